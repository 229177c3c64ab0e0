// The official MCP client over every transport: Streamable HTTP, HTTP+SSE (at /sse and at
// the reference's /mcp) and stdio (`sandbox mcp`). Each transport runs the same tests.
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import { McpError } from "@modelcontextprotocol/sdk/types.js";
import {
  TRANSPORTS,
  connect,
  sid,
  structured,
  errorText,
  runningIn,
  stillRuns,
  waitUntil,
} from "./helpers.mjs";

const TOOLS = [
  "cancel",
  "create_session",
  "create_volume",
  "delete_snapshot",
  "delete_volume",
  "execute",
  "fork_session",
  "get_preview_url",
  "list_files",
  "list_ports",
  "list_processes",
  "list_sessions",
  "list_snapshots",
  "list_templates",
  "list_volumes",
  "make_directory",
  "move_path",
  "pause_session",
  "ping",
  "read_file",
  "read_process_output",
  "remove_path",
  "reset_session",
  "resume_session",
  "send_process_input",
  "signal_process",
  "snapshot_session",
  "start_process",
  "stat_path",
  "wait_for_change",
  "write_file",
];

for (const kind of TRANSPORTS) {
  describe(`transport ${kind}`, () => {
    let client;
    let transport;
    const tool = (name, args) => client.callTool({ name, arguments: args });

    before(async () => {
      ({ client, transport } = await connect(kind));
    });

    after(async () => {
      await client?.close();
    });

    it("initializes with the newest protocol and says who it is", () => {
      const info = client.getServerVersion();
      assert.equal(info.name, "agent-sandbox");
      assert.match(info.version, /^\d+\.\d+\.\d+/);
      const caps = client.getServerCapabilities();
      assert.deepEqual(caps.tools, { listChanged: false });
      assert.ok(client.getInstructions()?.includes("execute"));
      // HTTP+SSE clients and servers both speak the newest version they share.
      assert.equal(transport._protocolVersion ?? "2025-11-25", "2025-11-25");
    });

    it("answers ping", async () => {
      assert.deepEqual(await client.ping(), {});
    });

    it("lists every tool with input and output schemas", async () => {
      const { tools, nextCursor } = await client.listTools();
      assert.equal(nextCursor, undefined);
      assert.deepEqual(tools.map((t) => t.name).sort(), TOOLS);
      for (const t of tools) {
        assert.equal(t.inputSchema.type, "object", t.name);
        assert.equal(t.outputSchema?.type, "object", t.name);
        assert.ok(t.description.length > 20, t.name);
        assert.equal(typeof t.annotations?.readOnlyHint, "boolean", t.name);
      }
      const exec = tools.find((t) => t.name === "execute");
      assert.deepEqual(exec.inputSchema.required, ["sessionId", "command"]);
      assert.equal(exec.inputSchema.additionalProperties, false);
    });

    it("ping tool", async () => {
      const out = structured(await client.callTool({ name: "ping", arguments: {} }));
      assert.equal(out.ok, true);
      assert.equal(out.server, "agent-sandbox");
    });

    it("list_templates", async () => {
      const out = structured(await client.callTool({ name: "list_templates", arguments: {} }));
      assert.ok(out.templates.some((t) => t.name === "base"), JSON.stringify(out));
      assert.equal(typeof out.default, "string");
    });

    it("create_session creates the session with its template", async () => {
      const id = sid("create");
      const out = structured(
        await client.callTool({
          name: "create_session",
          arguments: { sessionId: id, template: "base", env: { GREETING: "hello" } },
        }),
      );
      assert.equal(out.sessionId, id);
      assert.equal(out.template, "base");
      assert.equal(out.state, "ready");
      const listed = structured(await client.callTool({ name: "list_sessions", arguments: {} }));
      assert.ok(listed.sessions.some((s) => s.sessionId === id));
      // The session's environment reaches its commands.
      const run = structured(
        await client.callTool({
          name: "execute",
          arguments: { sessionId: id, command: "echo $GREETING" },
        }),
      );
      assert.equal(run.stdout, "hello\n");
      // A second creation by the same id is refused, with the reason.
      const again = await client.callTool({
        name: "create_session",
        arguments: { sessionId: id },
      });
      assert.equal(again.isError, true);
      assert.match(errorText(again), /already exists/);
      structured(await client.callTool({ name: "reset_session", arguments: { sessionId: id } }));
    });

    it("create_session takes an egress policy that may only tighten the server's", async () => {
      const ok = structured(
        await client.callTool({
          name: "create_session",
          arguments: { egress: { dns: { mode: "deny", domains: ["blocked.example"] } } },
        }),
      );
      assert.match(ok.sessionId, /^sess_/);
      structured(
        await client.callTool({ name: "reset_session", arguments: { sessionId: ok.sessionId } }),
      );
      const bad = await client.callTool({
        name: "create_session",
        arguments: { egress: { bandwidth: "fast" } },
      });
      assert.equal(bad.isError, true);
      assert.match(errorText(bad), /egress/);
    });

    it("create_session without an id makes one", async () => {
      const out = structured(await client.callTool({ name: "create_session", arguments: {} }));
      assert.match(out.sessionId, /^sess_/);
      structured(
        await client.callTool({ name: "reset_session", arguments: { sessionId: out.sessionId } }),
      );
    });

    it("execute keeps stdout and stderr apart and reports the exit code", async () => {
      const id = sid("exec");
      const result = await client.callTool({
        name: "execute",
        arguments: {
          sessionId: id,
          command: "echo out; echo err >&2; echo $FOO; pwd; exit 3",
          env: { FOO: "bar" },
          timeout: 60000,
        },
      });
      const out = structured(result);
      assert.equal(out.exitCode, 3);
      assert.equal(out.stdout, "out\nbar\n/home/user\n");
      assert.equal(out.stderr, "err\n");
      assert.equal(out.signal, null);
      assert.equal(out.timedOut, false);
      assert.match(out.execId, /^exec_/);
      // The text block carries the same, for clients without structured content.
      assert.deepEqual(JSON.parse(result.content[0].text), out);

      const args = structured(
        await client.callTool({
          name: "execute",
          arguments: { sessionId: id, command: "printf", args: ["%s|", "a b", "$HOME"] },
        }),
      );
      assert.equal(args.stdout, "a b|$HOME|");

      structured(
        await client.callTool({
          name: "execute",
          arguments: { sessionId: id, command: "mkdir -p sub/dir" },
        }),
      );
      const cwd = structured(
        await client.callTool({
          name: "execute",
          arguments: { sessionId: id, command: "pwd; cat", cwd: "sub/dir", stdin: "typed\n" },
        }),
      );
      assert.equal(cwd.stdout, "/home/user/sub/dir\ntyped\n");
      structured(await client.callTool({ name: "reset_session", arguments: { sessionId: id } }));
    });

    it("execute times out", async () => {
      const id = sid("timeout");
      const out = structured(
        await client.callTool({
          name: "execute",
          // It would run far past its timeout, on purpose.
          arguments: { sessionId: id, command: "sleep 10", timeout: 300 },
        }),
      );
      assert.equal(out.timedOut, true);
      assert.notEqual(out.exitCode, 0);
      structured(await client.callTool({ name: "reset_session", arguments: { sessionId: id } }));
    });

    it("write_file, read_file and list_files, in text and base64", async () => {
      const id = sid("files");
      const w = structured(
        await client.callTool({
          name: "write_file",
          arguments: { sessionId: id, path: "dir/hello.txt", content: "héllo\n" },
        }),
      );
      assert.deepEqual(w, { sessionId: id, path: "dir/hello.txt", size: 7, bytesWritten: 7 });
      const bytes = Buffer.from([0, 1, 2, 255, 254, 10]);
      structured(
        await client.callTool({
          name: "write_file",
          arguments: {
            sessionId: id,
            path: "bin.dat",
            content: bytes.toString("base64"),
            encoding: "base64",
            mode: 0o600,
          },
        }),
      );
      const text = structured(
        await client.callTool({
          name: "read_file",
          arguments: { sessionId: id, path: "dir/hello.txt" },
        }),
      );
      assert.equal(text.content, "héllo\n");
      assert.equal(text.encoding, "utf8");
      const bin = structured(
        await client.callTool({ name: "read_file", arguments: { sessionId: id, path: "bin.dat" } }),
      );
      assert.equal(bin.encoding, "base64");
      assert.deepEqual(Buffer.from(bin.content, "base64"), bytes);
      const forced = structured(
        await client.callTool({
          name: "read_file",
          arguments: { sessionId: id, path: "dir/hello.txt", encoding: "base64" },
        }),
      );
      assert.equal(Buffer.from(forced.content, "base64").toString(), "héllo\n");

      const top = structured(
        await client.callTool({ name: "list_files", arguments: { sessionId: id } }),
      );
      assert.deepEqual(top.files.map((f) => `${f.path}:${f.type}`).sort(), [
        "bin.dat:file",
        "dir:dir",
      ]);
      const binEntry = top.files.find((f) => f.path === "bin.dat");
      assert.equal(binEntry.size, 6);
      assert.equal(binEntry.mode, 0o600);
      const all = structured(
        await client.callTool({
          name: "list_files",
          arguments: { sessionId: id, path: ".", recursive: true },
        }),
      );
      assert.ok(all.files.some((f) => f.path === "dir/hello.txt"));
      assert.equal(all.truncated, false);
      structured(await client.callTool({ name: "reset_session", arguments: { sessionId: id } }));
    });

    it("wait_for_change returns the first batch of changes, or nothing at its timeout", async () => {
      const id = sid("watch");
      structured(await tool("make_directory", { sessionId: id, path: "w" }));
      // Nothing happens: the wait ends at its timeout, empty-handed.
      const idle = structured(
        await tool("wait_for_change", { sessionId: id, path: "w", timeoutMs: 200 }),
      );
      assert.deepEqual(idle, { sessionId: id, path: "w", events: [], timedOut: true });
      // The wait gives no sign that its watch is in place: a new file is made until it ends.
      const waiting = tool("wait_for_change", {
        sessionId: id,
        path: "w",
        recursive: true,
        timeoutMs: 60000,
      });
      let changed;
      for (let i = 0; i < 600 && !changed; i++) {
        await tool("execute", { sessionId: id, command: `echo hi > w/new${i}.txt` });
        changed = await Promise.race([waiting, new Promise((r) => setTimeout(r, 100))]);
      }
      const got = structured(changed);
      assert.equal(got.timedOut, false);
      assert.ok(
        got.events.some((e) => e.type === "create" && /^w\/new\d+\.txt$/.test(e.path)),
        JSON.stringify(got),
      );
      const bad = await tool("wait_for_change", { sessionId: id, path: "../etc", timeoutMs: 100 });
      assert.equal(bad.isError, true);
      assert.match(errorText(bad), /escapes the workspace/);
      structured(await tool("reset_session", { sessionId: id }));
    });

    it("stat_path, make_directory, move_path and remove_path", async () => {
      const id = sid("meta");
      assert.deepEqual(
        structured(await tool("make_directory", { sessionId: id, path: "a/b" })),
        { sessionId: id, path: "a/b" },
      );
      const st = structured(await tool("stat_path", { sessionId: id, path: "a/b" }));
      assert.equal(st.type, "dir");
      assert.equal(st.path, "a/b");
      assert.equal(typeof st.mtime, "number");
      structured(
        await tool("write_file", { sessionId: id, path: "a/b/f.txt", content: "hi" }),
      );
      assert.deepEqual(
        structured(await tool("move_path", { sessionId: id, from: "a/b/f.txt", to: "c/g.txt" })),
        { sessionId: id, from: "a/b/f.txt", to: "c/g.txt" },
      );
      const g = structured(await tool("stat_path", { sessionId: id, path: "c/g.txt" }));
      assert.deepEqual([g.type, g.size], ["file", 2]);
      const missing = await tool("stat_path", { sessionId: id, path: "a/b/f.txt" });
      assert.equal(missing.isError, true);
      const full = await tool("remove_path", { sessionId: id, path: "a" });
      assert.equal(full.isError, true); // not empty without recursive
      structured(await tool("remove_path", { sessionId: id, path: "a", recursive: true }));
      const listed = structured(await tool("list_files", { sessionId: id }));
      assert.deepEqual(listed.files.map((f) => f.path), ["c"]);
      const escape = await tool("move_path", { sessionId: id, from: "c", to: "../../tmp/c" });
      assert.equal(escape.isError, true);
      assert.match(errorText(escape), /escapes the workspace/);
      structured(await tool("reset_session", { sessionId: id }));
    });

    it("read_file stops at its limit (one JSON-RPC message), naming it and the REST route", async () => {
      const id = sid("big-read");
      const mib = 1024 * 1024;
      structured(
        await client.callTool({
          name: "execute",
          arguments: {
            sessionId: id,
            command: `head -c ${4 * mib} /dev/zero | tr '\\0' a > four; echo b >> four; head -c ${4 * mib} /dev/zero | tr '\\0' a > fits`,
          },
        }),
      );
      const over = await client.callTool({
        name: "read_file",
        arguments: { sessionId: id, path: "four" },
      });
      assert.equal(over.isError, true);
      assert.match(errorText(over), /4194304 bytes \(SANDBOX_MCP_MAX_READ_BYTES\)/);
      assert.match(errorText(over), /GET \/exec\/\{sessionId\}\/read/);
      // A larger maxBytes does not lift it.
      const asked = await client.callTool({
        name: "read_file",
        arguments: { sessionId: id, path: "four", maxBytes: 64 * mib },
      });
      assert.equal(asked.isError, true);
      assert.match(errorText(asked), /SANDBOX_MCP_MAX_READ_BYTES/);
      // At the limit exactly, it is read.
      const fits = structured(
        await client.callTool({ name: "read_file", arguments: { sessionId: id, path: "fits" } }),
      );
      assert.equal(fits.size, 4 * mib);
      assert.equal(fits.content.length, 4 * mib);
      structured(await client.callTool({ name: "reset_session", arguments: { sessionId: id } }));
    });

    it("reports failures as tool errors with the real reason", async () => {
      const id = sid("errors");
      const escape = await client.callTool({
        name: "write_file",
        arguments: { sessionId: id, path: "../../etc/passwd", content: "x" },
      });
      assert.equal(escape.isError, true);
      assert.match(errorText(escape), /escapes the workspace/);

      const unknownSession = await client.callTool({
        name: "read_file",
        arguments: { sessionId: sid("never-made"), path: "a.txt" },
      });
      assert.equal(unknownSession.isError, true);
      assert.match(errorText(unknownSession), /Session `.*` not found/);

      const missing = await client.callTool({
        name: "read_file",
        arguments: { sessionId: id, path: "no-such-file" },
      });
      assert.equal(missing.isError, true);
      assert.match(errorText(missing), /no-such-file/);

      const noCommand = await client.callTool({
        name: "execute",
        arguments: { sessionId: id, command: "definitely-not-a-command" },
      });
      assert.equal(noCommand.isError, true);
      assert.match(errorText(noCommand), /definitely-not-a-command/);

      const badArgs = await client.callTool({
        name: "execute",
        arguments: { sessionId: id, command: "true", timeout: -5 },
      });
      assert.equal(badArgs.isError, true);
      assert.match(errorText(badArgs), /timeout must be at least 0/);

      const badId = await client.callTool({
        name: "execute",
        arguments: { sessionId: "no spaces allowed", command: "true" },
      });
      assert.equal(badId.isError, true);
      assert.match(errorText(badId), /sessionId must match/);

      const badTemplate = await client.callTool({
        name: "create_session",
        arguments: { template: "no-such-template" },
      });
      assert.equal(badTemplate.isError, true);
      assert.match(errorText(badTemplate), /Unknown template `no-such-template`/);

      const badBase64 = await client.callTool({
        name: "write_file",
        arguments: { sessionId: id, path: "x", content: "***", encoding: "base64" },
      });
      assert.equal(badBase64.isError, true);
      assert.match(errorText(badBase64), /base64/);

      const notRunning = await client.callTool({
        name: "cancel",
        arguments: { sessionId: id, execId: "exec_0000" },
      });
      assert.equal(notRunning.isError, true);
      assert.match(errorText(notRunning), /No running command/);

      const resetTwice = await client.callTool({
        name: "reset_session",
        arguments: { sessionId: id },
      });
      assert.equal(resetTwice.isError, undefined);
      const resetAgain = await client.callTool({
        name: "reset_session",
        arguments: { sessionId: id },
      });
      // Nothing left to destroy: a result saying so (the tool is idempotent), not an error.
      assert.equal(resetAgain.isError, undefined);
      assert.equal(structured(resetAgain).destroyed, false);
      assert.match(structured(resetAgain).message, /not found/);
    });

    it("an unknown tool is a JSON-RPC error (-32602)", async () => {
      await assert.rejects(
        client.callTool({ name: "no_such_tool", arguments: {} }),
        (e) => e instanceof McpError && e.code === -32602 && /Unknown tool/.test(e.message),
      );
    });

    it("streams output as progress notifications", async () => {
      const id = sid("progress");
      const seen = [];
      const out = structured(
        await client.callTool(
          {
            name: "execute",
            arguments: {
              sessionId: id,
              // The pauses make each line progress of its own.
              command: "for i in 1 2 3; do echo line$i; sleep 0.2; done; echo oops >&2",
            },
          },
          undefined,
          { onprogress: (p) => seen.push(p) },
        ),
      );
      assert.equal(out.stdout, "line1\nline2\nline3\n");
      assert.equal(out.stderr, "oops\n");
      // First the start, then the output as it came, with strictly increasing progress.
      // (The SDK hands notifications to their handler a tick later than responses, so the
      // last one, sent just before the answer, may be dropped on the client's side.)
      assert.match(seen[0].message, /^started exec_/);
      const text = seen.slice(1).map((p) => p.message).join("");
      assert.ok(text.startsWith("line1\nline2\nline3\n"), text);
      assert.ok("line1\nline2\nline3\noops\n".startsWith(text), text);
      for (let i = 1; i < seen.length; i++) assert.ok(seen[i].progress > seen[i - 1].progress);
      assert.ok(seen.length >= 4, `${seen.length} notifications`);
      structured(await client.callTool({ name: "reset_session", arguments: { sessionId: id } }));
    });

    it("cancelling a request (AbortSignal) stops the command", async () => {
      const id = sid("abort");
      const controller = new AbortController();
      let started = false;
      const call = client.callTool(
        {
          name: "execute",
          // It would leave a marker a minute in, were it not cancelled.
          arguments: { sessionId: id, command: "echo ready; sleep 60; echo finished > marker" },
        },
        undefined,
        {
          signal: controller.signal,
          onprogress: (p) => {
            if (p.message === "ready\n") {
              started = true;
              controller.abort("the test cancels it");
            }
          },
        },
      );
      await assert.rejects(call);
      assert.ok(started, "the command was running when it was cancelled");
      // Its processes go, so that nothing will ever make the marker; and there is none.
      await waitUntil(
        async () => !(await stillRuns(tool, id, "finished > marker")),
        "the command's processes to go after it was cancelled",
      );
      const marker = await client.callTool({
        name: "read_file",
        arguments: { sessionId: id, path: "marker" },
      });
      assert.equal(marker.isError, true, "the command went on after it was cancelled");
      assert.equal(await runningIn(tool, id), 0);
      structured(await client.callTool({ name: "reset_session", arguments: { sessionId: id } }));
    });

    it("the cancel tool stops a command by its execId", async () => {
      const id = sid("canceltool");
      let execId = null;
      let gotId;
      const idKnown = new Promise((resolve) => {
        gotId = resolve;
      });
      const call = client.callTool(
        // It runs until the cancel ends it.
        { name: "execute", arguments: { sessionId: id, command: "sleep 30" } },
        undefined,
        {
          onprogress: (p) => {
            const meta = p._meta || {};
            if (meta["sandbox/execId"]) {
              execId = meta["sandbox/execId"];
              gotId();
            }
          },
        },
      );
      await idKnown;
      const c = structured(
        await client.callTool({ name: "cancel", arguments: { sessionId: id, execId } }),
      );
      assert.deepEqual(c, { sessionId: id, execId, cancelled: true });
      const out = structured(await call);
      assert.equal(out.cancelled, true);
      assert.equal(out.execId, execId);
      structured(await client.callTool({ name: "reset_session", arguments: { sessionId: id } }));
    });

    it("runs calls concurrently", async () => {
      const id = sid("concurrent");
      // The slow call ends only once the quick one has run (or, were they served one after
      // the other, after a minute, saying so).
      const slow = client.callTool({
        name: "execute",
        arguments: {
          sessionId: id,
          command:
            "i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do usleep 50000; i=$((i+1)); done; " +
            "[ -e go ] && echo slow || echo 'the quick call never ran'",
        },
      });
      await waitUntil(async () => (await runningIn(tool, id)) === 1, "the slow call to run");
      const fast = structured(
        await client.callTool({
          name: "execute",
          arguments: { sessionId: id, command: "touch go; echo fast" },
        }),
      );
      assert.equal(fast.stdout, "fast\n");
      assert.equal(structured(await slow).stdout, "slow\n");
      structured(await client.callTool({ name: "reset_session", arguments: { sessionId: id } }));
    });
  });
}
