// pause_session and resume_session with the official MCP client: a paused session's
// background process stops and carries on after the resume, its operations are refused
// meanwhile with the reason, onTimeout "pause" pauses an idle session instead of destroying
// it, and another key can neither pause nor resume it.
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { KEY_A, KEY_B, connect, sid, structured, errorText } from "./helpers.mjs";

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function count(client, id) {
  const r = structured(
    await client.callTool({ name: "execute", arguments: { sessionId: id, command: "cat count" } }),
  );
  return Number(r.stdout.trim());
}

for (const kind of ["streamable-http", "stdio"]) {
  describe(`pause and resume over ${kind}`, () => {
    let a;
    let b;
    const id = sid("paused");

    before(async () => {
      a = (await connect(kind, KEY_A)).client;
      b = (await connect(kind, KEY_B)).client;
      structured(await a.callTool({ name: "create_session", arguments: { sessionId: id } }));
      structured(
        await a.callTool({
          name: "start_process",
          arguments: {
            sessionId: id,
            command: "i=0; while :; do i=$((i+1)); echo $i > c.tmp && mv c.tmp count; sleep 0.01; done",
            tag: "counter",
          },
        }),
      );
      for (let i = 0; i < 100; i++) {
        const r = await a.callTool({ name: "execute", arguments: { sessionId: id, command: "cat count" } });
        if (!r.isError && Number(r.structuredContent.stdout.trim()) > 0) break;
        await sleep(50);
      }
    });

    after(async () => {
      await a?.callTool({ name: "reset_session", arguments: { sessionId: id } }).catch(() => {});
      await a?.close();
      await b?.close();
    });

    it("lists both tools with their schemas", async () => {
      const { tools } = await a.listTools();
      for (const name of ["pause_session", "resume_session"]) {
        const t = tools.find((x) => x.name === name);
        assert.ok(t, name);
        assert.deepEqual(t.inputSchema.required, ["sessionId"]);
        assert.ok(t.outputSchema.properties.state.enum.includes("paused"));
      }
    });

    it("pauses: nothing runs, operations are refused, a second pause too; resumes", async () => {
      const p = structured(await a.callTool({ name: "pause_session", arguments: { sessionId: id } }));
      assert.equal(p.sessionId, id);
      assert.equal(p.state, "paused");
      assert.match(p.pausedAt, /^\d{4}-\d\d-\d\dT/);
      const listed = structured(await a.callTool({ name: "list_sessions", arguments: {} }));
      const mine = listed.sessions.find((s) => s.sessionId === id);
      assert.equal(mine.state, "paused");
      assert.equal(mine.pausedAt, p.pausedAt);

      const refused = await a.callTool({ name: "execute", arguments: { sessionId: id, command: "true" } });
      assert.equal(refused.isError, true);
      assert.match(errorText(refused), /paused/);
      const again = await a.callTool({ name: "pause_session", arguments: { sessionId: id } });
      assert.equal(again.isError, true);
      assert.match(errorText(again), /paused already/);

      const r = structured(await a.callTool({ name: "resume_session", arguments: { sessionId: id } }));
      assert.equal(r.state, "ready");
      assert.equal(r.pausedAt, undefined);
      const twice = await a.callTool({ name: "resume_session", arguments: { sessionId: id } });
      assert.equal(twice.isError, true);
      assert.match(errorText(twice), /not paused/);
      // The same background process counts on.
      const before = await count(a, id);
      let now = before;
      for (let i = 0; i < 100 && now <= before; i++) {
        await sleep(50);
        now = await count(a, id);
      }
      assert.ok(now > before, `the counter stayed at ${before}`);
    });

    it("another key can neither pause nor resume it", async () => {
      for (const name of ["pause_session", "resume_session"]) {
        const r = await b.callTool({ name, arguments: { sessionId: id } });
        assert.equal(r.isError, true, name);
        assert.match(errorText(r), /not found/, name);
      }
      structured(await a.callTool({ name: "pause_session", arguments: { sessionId: id } }));
      const r = await b.callTool({ name: "resume_session", arguments: { sessionId: id } });
      assert.equal(r.isError, true);
      assert.match(errorText(r), /not found/);
      const still = structured(await a.callTool({ name: "list_sessions", arguments: {} }));
      assert.equal(still.sessions.find((s) => s.sessionId === id).state, "paused");
      structured(await a.callTool({ name: "resume_session", arguments: { sessionId: id } }));
    });

    it("refuses malformed arguments and unknown sessions", async () => {
      for (const args of [{}, { sessionId: "" }, { sessionId: "a/b" }, { sessionId: id, extra: 1 }]) {
        const r = await a.callTool({ name: "pause_session", arguments: args });
        assert.equal(r.isError, true, JSON.stringify(args));
      }
      const r = await a.callTool({ name: "resume_session", arguments: { sessionId: sid("none") } });
      assert.equal(r.isError, true);
      assert.match(errorText(r), /not found/);
    });
  });
}

describe("onTimeout pause", () => {
  let a;
  before(async () => {
    a = (await connect("streamable-http", KEY_A)).client;
  });
  after(async () => {
    await a?.close();
  });

  it("an idle session is paused, not destroyed, and resumes with its files", async () => {
    const id = sid("autopause");
    const made = structured(
      await a.callTool({
        name: "create_session",
        arguments: { sessionId: id, idleTimeout: 1, onTimeout: "pause" },
      }),
    );
    assert.equal(made.state, "ready");
    structured(
      await a.callTool({ name: "write_file", arguments: { sessionId: id, path: "kept.txt", content: "kept" } }),
    );
    let state;
    for (let i = 0; i < 100; i++) {
      await sleep(100);
      const l = structured(await a.callTool({ name: "list_sessions", arguments: {} }));
      state = l.sessions.find((s) => s.sessionId === id)?.state;
      if (state !== "ready") break;
    }
    assert.equal(state, "paused");
    structured(await a.callTool({ name: "resume_session", arguments: { sessionId: id } }));
    const r = structured(await a.callTool({ name: "read_file", arguments: { sessionId: id, path: "kept.txt" } }));
    assert.equal(r.content, "kept");
    structured(await a.callTool({ name: "reset_session", arguments: { sessionId: id } }));
  });

  it("refuses an unknown onTimeout", async () => {
    const r = await a.callTool({
      name: "create_session",
      arguments: { sessionId: sid("bad"), onTimeout: "hibernate-forever" },
    });
    assert.equal(r.isError, true);
  });
});

describe("pause_session mode hibernate", () => {
  let a;
  before(async () => {
    a = (await connect("streamable-http", KEY_A)).client;
  });
  after(async () => {
    await a?.close();
  });

  it("ends the processes, keeps the files, says so; resume_session starts afresh", async () => {
    const id = sid("hibernated");
    structured(await a.callTool({ name: "create_session", arguments: { sessionId: id, storage: "disk" } }));
    structured(await a.callTool({ name: "write_file", arguments: { sessionId: id, path: "kept.txt", content: "kept" } }));
    structured(await a.callTool({ name: "start_process", arguments: { sessionId: id, command: "sleep 600", tag: "sl" } }));
    const h = structured(await a.callTool({ name: "pause_session", arguments: { sessionId: id, mode: "hibernate" } }));
    assert.equal(h.state, "paused");
    assert.equal(h.pauseMode, "hibernate");
    assert.equal(h.processesKept, false);
    assert.match(h.note, /every process of the session was ended/);
    const again = await a.callTool({ name: "pause_session", arguments: { sessionId: id, mode: "hibernate" } });
    assert.equal(again.isError, true);
    const r = structured(await a.callTool({ name: "resume_session", arguments: { sessionId: id } }));
    assert.equal(r.state, "ready");
    const f = structured(await a.callTool({ name: "read_file", arguments: { sessionId: id, path: "kept.txt" } }));
    assert.equal(f.content, "kept");
    const procs = structured(await a.callTool({ name: "list_processes", arguments: { sessionId: id } }));
    assert.equal(procs.processes.filter((p) => p.state === "running").length, 0);
    const bad = await a.callTool({ name: "pause_session", arguments: { sessionId: id, mode: "deep" } });
    assert.equal(bad.isError, true);
    structured(await a.callTool({ name: "reset_session", arguments: { sessionId: id } }));
  });

  it("refuses a tmpfs session with the reason", async () => {
    const id = sid("tmpfs");
    structured(await a.callTool({ name: "create_session", arguments: { sessionId: id, storage: "tmpfs" } }));
    const r = await a.callTool({ name: "pause_session", arguments: { sessionId: id, mode: "hibernate" } });
    assert.equal(r.isError, true);
    assert.match(errorText(r), /disk/);
    structured(await a.callTool({ name: "reset_session", arguments: { sessionId: id } }));
  });
});

// fork_session: listed with its schema; a bad count is refused, another key's session is not
// found; in a jail a session with a disk forks into sessions with a copy of its files.
// snapshot_session, list_snapshots, delete_snapshot and create_session's snapshot: a session
// started from a snapshot has its files; another key sees and uses none of it. VM forks and
// snapshots, memory included, are qemu's (tests/e2e).
const JAIL = process.env.DRIVER === undefined || process.env.DRIVER === "jail";

describe("fork_session and snapshots", () => {
  let a;
  let b;
  before(async () => {
    a = (await connect("streamable-http", KEY_A)).client;
    b = (await connect("streamable-http", KEY_B)).client;
  });
  after(async () => {
    await a?.close();
    await b?.close();
  });

  const run = async (client, id, command) =>
    structured(await client.callTool({ name: "execute", arguments: { sessionId: id, command } }));

  it("forks a session", async () => {
    const { tools } = await a.listTools();
    const t = tools.find((x) => x.name === "fork_session");
    assert.ok(t, "fork_session");
    assert.deepEqual(t.inputSchema.required, ["sessionId"]);
    assert.equal(t.inputSchema.properties.count.maximum, 16);
    assert.ok(t.outputSchema.properties.sessions);
    const id = sid("fork");
    structured(await a.callTool({ name: "create_session", arguments: { sessionId: id } }));
    await run(a, id, "echo forked > file");
    for (const count of [0, 17, "2"]) {
      const bad = await a.callTool({ name: "fork_session", arguments: { sessionId: id, count } });
      assert.equal(bad.isError, true, `count ${count}`);
    }
    const other = await b.callTool({ name: "fork_session", arguments: { sessionId: id } });
    assert.equal(other.isError, true);
    assert.match(errorText(other), /not found|no session/i);
    if (JAIL) {
      const r = structured(await a.callTool({ name: "fork_session", arguments: { sessionId: id, count: 2 } }));
      assert.equal(r.count, 2);
      for (const f of r.sessions) {
        assert.notEqual(f.sessionId, id);
        assert.equal((await run(a, f.sessionId, "cat file")).stdout, "forked\n");
        structured(await a.callTool({ name: "reset_session", arguments: { sessionId: f.sessionId } }));
      }
    }
    structured(await a.callTool({ name: "reset_session", arguments: { sessionId: id } }));
  });

  it("snapshots a session and starts sessions from it", { skip: !JAIL && "jail's files (qemu: tests/e2e)" }, async () => {
    const { tools } = await a.listTools();
    const t = tools.find((x) => x.name === "snapshot_session");
    assert.ok(t, "snapshot_session");
    assert.deepEqual(t.inputSchema.required, ["sessionId", "name"]);
    const id = sid("snap");
    const name = `mcp-${id}`.slice(0, 60);
    structured(await a.callTool({ name: "create_session", arguments: { sessionId: id } }));
    await run(a, id, "echo from-snapshot > file");
    const bad = await a.callTool({ name: "snapshot_session", arguments: { sessionId: id, name: "-bad" } });
    assert.equal(bad.isError, true);
    const snap = structured(
      await a.callTool({ name: "snapshot_session", arguments: { sessionId: id, name, ttlSeconds: 600 } }),
    );
    assert.equal(snap.name, name);
    assert.equal(snap.session, id);
    assert.equal(snap.processesKept, false);
    const dup = await a.callTool({ name: "snapshot_session", arguments: { sessionId: id, name } });
    assert.equal(dup.isError, true);
    assert.match(errorText(dup), /already exists/);
    const listed = structured(await a.callTool({ name: "list_snapshots", arguments: {} }));
    assert.deepEqual(
      listed.snapshots.map((s) => s.name),
      [name],
    );
    assert.deepEqual(structured(await b.callTool({ name: "list_snapshots", arguments: {} })).snapshots, []);
    const theirs = await b.callTool({ name: "create_session", arguments: { snapshot: name } });
    assert.equal(theirs.isError, true);
    assert.match(errorText(theirs), /not found/i);
    const withTemplate = await a.callTool({ name: "create_session", arguments: { snapshot: name, template: "base" } });
    assert.equal(withTemplate.isError, true);
    const made = structured(await a.callTool({ name: "create_session", arguments: { snapshot: name } }));
    assert.equal((await run(a, made.sessionId, "cat file")).stdout, "from-snapshot\n");
    structured(await a.callTool({ name: "reset_session", arguments: { sessionId: made.sessionId } }));
    const notTheirs = await b.callTool({ name: "delete_snapshot", arguments: { name } });
    assert.equal(notTheirs.isError, true);
    assert.deepEqual(structured(await a.callTool({ name: "delete_snapshot", arguments: { name } })), {
      deleted: true,
      name,
    });
    const gone = await a.callTool({ name: "create_session", arguments: { snapshot: name } });
    assert.equal(gone.isError, true);
    structured(await a.callTool({ name: "reset_session", arguments: { sessionId: id } }));
  });
});
