// Persistent volumes through MCP: create_volume, list_volumes, delete_volume and
// create_session's volumes, with the official client; another key's volumes are unknown to it.
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { KEY_B, connect, sid, structured, errorText } from "./helpers.mjs";

describe("volumes over streamable-http", () => {
  let client, other;
  const tool = (c, name, args) => c.callTool({ name, arguments: args });

  before(async () => {
    ({ client } = await connect("streamable-http"));
    ({ client: other } = await connect("streamable-http", KEY_B));
  });

  after(async () => {
    await client?.close();
    await other?.close();
  });

  it("made, mounted by a session, listed, refused to others and deleted", async () => {
    const name = sid("vol").replace(/[^A-Za-z0-9._-]/g, "-").slice(0, 60);
    const made = structured(await tool(client, "create_volume", { name, sizeBytes: 16 << 20 }));
    assert.deepEqual([made.name, made.sizeBytes, made.state], [name, 16 << 20, "ready"]);
    const id = sid("volsess");
    const s = structured(
      await tool(client, "create_session", { sessionId: id, volumes: [{ name, path: "/data" }] }),
    );
    assert.equal(s.sessionId, id);
    const run = structured(
      await tool(client, "execute", { sessionId: id, command: "echo v > /data/f && stat -c %u /data/f" }),
    );
    assert.equal(run.exitCode, 0);
    const listed = structured(await tool(client, "list_volumes", {}));
    const mine = listed.volumes.find((v) => v.name === name);
    assert.deepEqual(mine.mounts, [{ sessionId: id, readOnly: false }]);
    // Mounted: not deleted.
    const busy = await tool(client, "delete_volume", { name });
    assert.equal(busy.isError, true);
    assert.match(errorText(busy), /mounted/);
    // Another key does not see it, nor mount it.
    const theirs = structured(await tool(other, "list_volumes", {}));
    assert.equal(theirs.volumes.some((v) => v.name === name), false);
    const refused = await tool(other, "create_session", { volumes: [{ name, path: "/data" }] });
    assert.equal(refused.isError, true);
    assert.match(errorText(refused), /not found/);
    structured(await tool(client, "reset_session", { sessionId: id }));
    let deleted;
    for (let i = 0; i < 100; i++) {
      deleted = await tool(client, "delete_volume", { name });
      if (!deleted.isError) break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.deepEqual(structured(deleted), { deleted: true, name });
    const bad = await tool(client, "create_volume", { name: "x", sizeBytes: 2 ** 62 });
    assert.equal(bad.isError, true);
  });
});
