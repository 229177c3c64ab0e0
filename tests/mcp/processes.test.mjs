// Background processes through MCP: start_process, list_processes, read_process_output,
// send_process_input and signal_process, with the official client (Streamable HTTP and
// stdio), their errors, a wait given up by its client, and another key's processes.
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { BASE, KEY_A, KEY_B, connect, sid, structured, errorText } from "./helpers.mjs";

for (const kind of ["streamable-http", "stdio"]) {
  describe(`background processes over ${kind}`, () => {
    let client;
    const tool = (name, args, opts) => client.callTool({ name, arguments: args }, undefined, opts);

    before(async () => {
      ({ client } = await connect(kind));
    });

    after(async () => {
      await client?.close();
    });

    it("a process fed on stdin, read while it runs and after it ended", async () => {
      const id = sid("proc");
      const started = structured(
        await tool("start_process", { sessionId: id, command: "cat", tag: "cat", stdin: true }),
      );
      assert.equal(started.sessionId, id);
      const p = started.process;
      assert.deepEqual([p.tag, p.state, p.command, p.exitCode], ["cat", "running", "cat", null]);
      const sent = structured(await tool("send_process_input", { sessionId: id, ref: "cat", data: "one\n" }));
      assert.deepEqual(sent, { sessionId: id, ref: "cat", bytes: 4, closed: false });
      // Still running after the wait: its output so far and its state.
      const mid = structured(await tool("read_process_output", { sessionId: id, ref: p.pid, waitMs: 300 }));
      assert.deepEqual([mid.stdout, mid.process.state, mid.truncated], ["one\n", "running", false]);
      const raw = Buffer.from([0x74, 0x77, 0x6f, 0x0a]).toString("base64");
      structured(
        await tool("send_process_input", { sessionId: id, ref: "cat", data: raw, encoding: "base64", close: true }),
      );
      const end = structured(await tool("read_process_output", { sessionId: id, ref: "cat", waitMs: 60000 }));
      assert.deepEqual(
        [end.stdout, end.stderr, end.gapBytes, end.process.state, end.process.exitCode],
        ["one\ntwo\n", "", 0, "exited", 0],
      );
      assert.equal(end.process.outputBytes, 8);
      const tail = structured(await tool("read_process_output", { sessionId: id, ref: "cat", replayBytes: 4 }));
      assert.equal(tail.stdout, "two\n");
      const late = await tool("send_process_input", { sessionId: id, ref: "cat", data: "x" });
      assert.equal(late.isError, true);
      const listed = structured(await tool("list_processes", { sessionId: id }));
      assert.equal(listed.count, 1);
      assert.deepEqual(listed.processes.map((x) => [x.pid, x.tag, x.state]), [[p.pid, "cat", "exited"]]);
      structured(await tool("reset_session", { sessionId: id }));
    });

    it("signals, a terminal, stderr and the errors", async () => {
      const id = sid("sig");
      structured(await tool("start_process", { sessionId: id, command: "sleep", args: ["60"], tag: "sl" }));
      const sig = structured(await tool("signal_process", { sessionId: id, ref: "sl", signal: "TERM" }));
      assert.deepEqual(sig, { sessionId: id, ref: "sl", signal: 15, signalled: true });
      const ended = structured(await tool("read_process_output", { sessionId: id, ref: "sl", waitMs: 60000 }));
      assert.deepEqual([ended.process.state, ended.process.signal], ["exited", "SIGTERM"]);
      structured(await tool("start_process", { sessionId: id, command: "sleep 60", tag: "k" }));
      structured(await tool("signal_process", { sessionId: id, ref: "k", signal: 9 }));
      const killed = structured(await tool("read_process_output", { sessionId: id, ref: "k", waitMs: 60000 }));
      assert.equal(killed.process.signal, "SIGKILL");
      const t = structured(
        await tool("start_process", { sessionId: id, command: "stty size; echo err >&2", pty: { rows: 33, cols: 101 } }),
      );
      assert.equal(t.process.pty, true);
      const out = structured(await tool("read_process_output", { sessionId: id, ref: t.process.pid, waitMs: 60000 }));
      assert.match(out.stdout, /33 101/);
      const e = structured(await tool("start_process", { sessionId: id, command: "echo oops >&2; exit 3" }));
      const eo = structured(await tool("read_process_output", { sessionId: id, ref: e.process.pid, waitMs: 60000 }));
      assert.deepEqual([eo.stdout, eo.stderr, eo.process.exitCode], ["", "oops\n", 3]);
      for (const [name, args, pattern] of [
        ["read_process_output", { ref: "nosuch" }, /no/i],
        ["read_process_output", { ref: 999999 }, /no/i],
        ["signal_process", { ref: "nosuch", signal: "TERM" }, /no/i],
        ["send_process_input", { ref: "nosuch", data: "x" }, /no/i],
        ["signal_process", { ref: "sl", signal: "NOSUCH" }, /unknown signal/],
        ["signal_process", { ref: "sl", signal: 65 }, /Invalid arguments/],
        ["read_process_output", { ref: "a/b" }, /a tag has/],
        ["read_process_output", { ref: 0 }, /Invalid arguments/],
        ["read_process_output", { ref: "x", waitMs: -1 }, /Invalid arguments/],
        ["send_process_input", { ref: "sl" }, /nothing to send/],
        ["send_process_input", { ref: "sl", data: "!!", encoding: "base64" }, /base64/],
        ["start_process", { command: "true", tag: "no/slash" }, /Invalid arguments/],
        ["start_process", { command: "true", tag: "123" }, /tag/],
        ["start_process", { command: "true", pty: { rows: 0 } }, /Invalid arguments/],
        ["start_process", { command: "true", stdin: "text" }, /Invalid arguments/],
        ["start_process", { command: "no-such-program-x" }, /no-such-program-x|not found|No such/i],
      ]) {
        const r = await tool(name, { sessionId: id, ...args });
        assert.equal(r.isError, true, `${name} ${JSON.stringify(args)}`);
        assert.match(errorText(r), pattern, `${name} ${JSON.stringify(args)}`);
      }
      structured(await tool("start_process", { sessionId: id, command: "sleep 60", tag: "dup" }));
      const dup = await tool("start_process", { sessionId: id, command: "true", tag: "dup" });
      assert.equal(dup.isError, true);
      const none = await tool("list_processes", { sessionId: sid("none") });
      assert.equal(none.isError, true);
      structured(await tool("reset_session", { sessionId: id }));
    });

    it("output beyond SANDBOX_MCP_MAX_READ_BYTES is left out, and said so", async () => {
      const id = sid("big");
      // Started over REST, with a replay buffer larger than the MCP read limit (4 MiB).
      const rest = (method, path, body) =>
        fetch(`${BASE}/exec/${id}${path}`, {
          method,
          headers: { Authorization: `Bearer ${KEY_A}`, "Content-Type": "application/json" },
          body: JSON.stringify(body),
        }).then((r) => r.json());
      const mib = 1 << 20;
      const p = await rest("POST", "/processes", {
        command: `head -c ${5 * mib} /dev/zero | tr '\\0' a`,
        replayBytes: 8 * mib,
      });
      assert.equal((await rest("POST", `/processes/${p.pid}/wait`, {})).exitCode, 0);
      const all = structured(await tool("read_process_output", { sessionId: id, ref: p.pid }));
      assert.deepEqual([all.stdout.length, all.truncated, all.process.outputBytes], [4 * mib, true, 5 * mib]);
      const some = structured(await tool("read_process_output", { sessionId: id, ref: p.pid, replayBytes: 10 }));
      assert.deepEqual([some.stdout, some.truncated], ["a".repeat(10), false]);
      structured(await tool("reset_session", { sessionId: id }));
    });

    it("a wait its client gives up leaves the process running", async () => {
      const id = sid("giveup");
      structured(await tool("start_process", { sessionId: id, command: "sleep 600", tag: "long" }));
      const ac = new AbortController();
      const waiting = tool("read_process_output", { sessionId: id, ref: "long", waitMs: 600000 }, { signal: ac.signal });
      await new Promise((r) => setTimeout(r, 200));
      ac.abort();
      await assert.rejects(waiting);
      const now = structured(await tool("read_process_output", { sessionId: id, ref: "long" }));
      assert.equal(now.process.state, "running");
      structured(await tool("reset_session", { sessionId: id }));
    });

    it("another key's processes are not there", async () => {
      const id = sid("mine");
      structured(await tool("start_process", { sessionId: id, command: "sleep 60", tag: "s" }));
      const other = (await connect(kind, KEY_B)).client;
      try {
        const call = (name, args) => other.callTool({ name, arguments: { sessionId: id, ...args } });
        for (const [name, args] of [
          ["list_processes", {}],
          ["read_process_output", { ref: "s" }],
          ["signal_process", { ref: "s", signal: "KILL" }],
          ["send_process_input", { ref: "s", data: "x" }],
        ]) {
          const r = await call(name, args);
          assert.equal(r.isError, true, name);
        }
      } finally {
        await other.close();
      }
      const mine = structured(await tool("read_process_output", { sessionId: id, ref: "s" }));
      assert.equal(mine.process.state, "running");
      structured(await tool("reset_session", { sessionId: id }));
    });
  });
}
