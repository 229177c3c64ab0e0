// Sessions belong to the API key that made them, through MCP as through REST: two keys
// (made with `sandbox keys create` on the daemon's database by run.sh) never see or use
// each other's sessions, over any transport.
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { BASE, KEY_A, KEY_B, connect, sid, structured, errorText, post, initializeRequest } from "./helpers.mjs";

for (const kind of ["streamable-http", "stdio"]) {
  describe(`ownership over ${kind}`, () => {
    let a;
    let b;
    const id = sid("owned");

    before(async () => {
      a = (await connect(kind, KEY_A)).client;
      b = (await connect(kind, KEY_B)).client;
      structured(await a.callTool({ name: "create_session", arguments: { sessionId: id } }));
      structured(
        await a.callTool({
          name: "write_file",
          arguments: { sessionId: id, path: "secret.txt", content: "A's secret" },
        }),
      );
    });

    after(async () => {
      await a?.callTool({ name: "reset_session", arguments: { sessionId: id } }).catch(() => {});
      await b?.callTool({ name: "reset_session", arguments: { sessionId: id } }).catch(() => {});
      await a?.close();
      await b?.close();
    });

    it("B does not see A's session", async () => {
      const mine = structured(await a.callTool({ name: "list_sessions", arguments: {} }));
      assert.ok(mine.sessions.some((s) => s.sessionId === id));
      const theirs = structured(await b.callTool({ name: "list_sessions", arguments: {} }));
      assert.ok(!theirs.sessions.some((s) => s.sessionId === id));
    });

    it("B cannot read, list, cancel in or destroy A's session", async () => {
      for (const [name, args] of [
        ["read_file", { sessionId: id, path: "secret.txt" }],
        ["list_files", { sessionId: id }],
        ["cancel", { sessionId: id, execId: "exec_1" }],
      ]) {
        const r = await b.callTool({ name, arguments: args });
        assert.equal(r.isError, true, name);
        assert.match(errorText(r), /not found/, name);
      }
      // Destroying it is answered as for no session at all: destroyed false, not an error.
      const reset = structured(await b.callTool({ name: "reset_session", arguments: { sessionId: id } }));
      assert.equal(reset.destroyed, false);
      assert.match(reset.message, /not found/);
      // Still there for A.
      const still = structured(
        await a.callTool({ name: "read_file", arguments: { sessionId: id, path: "secret.txt" } }),
      );
      assert.equal(still.content, "A's secret");
    });

    it("the same id used by B is B's own session", async () => {
      const run = structured(
        await b.callTool({
          name: "execute",
          arguments: { sessionId: id, command: "ls; cat secret.txt 2>/dev/null; true" },
        }),
      );
      assert.equal(run.stdout, "");
      const again = structured(
        await a.callTool({ name: "read_file", arguments: { sessionId: id, path: "secret.txt" } }),
      );
      assert.equal(again.content, "A's secret");
    });
  });
}

describe("ownership across MCP and REST", () => {
  it("REST sees a session made through MCP for the same key, not for another", async () => {
    const { client } = await connect("streamable-http", KEY_A);
    const id = sid("rest");
    structured(await client.callTool({ name: "create_session", arguments: { sessionId: id } }));
    const list = async (key) => {
      const r = await fetch(`${BASE}/exec`, { headers: { Authorization: `Bearer ${key}` } });
      return (await r.json()).sessions.map((s) => s.id);
    };
    assert.ok((await list(KEY_A)).includes(id));
    assert.ok(!(await list(KEY_B)).includes(id));
    const del = await fetch(`${BASE}/exec/${id}`, {
      method: "DELETE",
      headers: { Authorization: `Bearer ${KEY_B}` },
    });
    assert.equal(del.status, 200);
    assert.equal((await del.json()).destroyed, false);
    structured(await client.callTool({ name: "reset_session", arguments: { sessionId: id } }));
    await client.close();
  });

  it("an MCP session of one key is unknown to another (404)", async () => {
    const r = await post("/mcp", initializeRequest(), { Authorization: `Bearer ${KEY_A}` });
    const headers = {
      Authorization: `Bearer ${KEY_B}`,
      "Mcp-Session-Id": r.headers.get("mcp-session-id"),
    };
    const other = await post("/mcp", { jsonrpc: "2.0", id: 2, method: "ping" }, headers);
    assert.equal(other.status, 404);
  });
});
