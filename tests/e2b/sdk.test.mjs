// The stock `e2b` SDK against sandboxd: lifecycle, commands, files, watch, terminals.
// run.sh sets E2B_API_URL, E2B_SANDBOX_URL, E2B_DOMAIN and E2B_API_KEY before this runs.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  Sandbox,
  FilesystemEventType,
  CommandExitError,
  TimeoutError,
  NotFoundError,
  FileNotFoundError,
  AuthenticationError,
  SandboxNotFoundError,
} from "e2b";

const made = [];
async function create(template, opts = {}) {
  const sbx = template
    ? await Sandbox.create(template, { timeoutMs: 120_000, ...opts })
    : await Sandbox.create({ timeoutMs: 120_000, ...opts });
  made.push(sbx);
  return sbx;
}
after(async () => {
  for (const s of made) await Sandbox.kill(s.sandboxId).catch(() => {});
});

// Waits until cond() is true, polling (bounded).
async function until(cond, what, tries = 100) {
  for (let i = 0; i < tries; i++) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe("lifecycle", () => {
  let sbx;
  before(async () => {
    sbx = await create("base", { metadata: { suite: "e2b", run: String(process.pid) } });
  });

  test("create gives an E2B-shaped id and getInfo the deadline asked for", async () => {
    assert.match(sbx.sandboxId, /^[a-z0-9]{20}$/);
    const info = await sbx.getInfo();
    assert.equal(info.state, "running");
    assert.equal(info.templateId, "base");
    assert.deepEqual(info.metadata, { suite: "e2b", run: String(process.pid) });
    const span = info.endAt.getTime() - info.startedAt.getTime();
    assert.ok(Math.abs(span - 120_000) < 5_000, `endAt - startedAt = ${span} ms`);
  });

  test("isRunning is true while it runs", async () => {
    assert.equal(await sbx.isRunning(), true);
  });

  test("setTimeout moves the deadline from now", async () => {
    await sbx.setTimeout(600_000);
    const info = await sbx.getInfo();
    const left = info.endAt.getTime() - Date.now();
    assert.ok(Math.abs(left - 600_000) < 10_000, `left ${left} ms`);
  });

  test("list finds it, with a metadata filter, and only with the right one", async () => {
    const p = Sandbox.list({ query: { metadata: { suite: "e2b", run: String(process.pid) } } });
    const items = await p.nextItems();
    assert.ok(items.some((s) => s.sandboxId === sbx.sandboxId && s.state === "running"));
    assert.equal(p.hasNext, false);
    const none = await Sandbox.list({ query: { metadata: { suite: "other" } } }).nextItems();
    assert.ok(!none.some((s) => s.sandboxId === sbx.sandboxId));
  });

  test("list pages with a limit", async () => {
    const other = await create("base");
    const p = Sandbox.list({ limit: 1 });
    const first = await p.nextItems();
    assert.equal(first.length, 1);
    assert.equal(p.hasNext, true);
    const second = await p.nextItems();
    assert.equal(second.length, 1);
    assert.notEqual(first[0].sandboxId, second[0].sandboxId);
    await other.kill();
  });

  test("list: the newest first (order asc the oldest), startedAfter, a paused one as paused", async () => {
    const tag = { suite: "e2b-order", run: String(process.pid) };
    const older = await create("base", { metadata: tag });
    await new Promise((r) => setTimeout(r, 20));
    const newer = await create("base", { metadata: tag });
    await newer.betaPause();
    try {
      const p = Sandbox.list({ limit: 1, query: { metadata: tag } });
      const first = await p.nextItems();
      assert.equal(first[0].sandboxId, newer.sandboxId);
      assert.equal(first[0].state, "paused");
      const second = await p.nextItems();
      assert.equal(second[0].sandboxId, older.sandboxId);
      assert.equal(second[0].state, "running");
      assert.equal(p.hasNext, false);
      const asc = await Sandbox.list({ order: "asc", query: { metadata: tag } }).nextItems();
      assert.deepEqual(asc.map((s) => s.sandboxId), [older.sandboxId, newer.sandboxId]);
      const info = await newer.getInfo();
      const after = await Sandbox.list({ query: { metadata: tag, startedAfter: info.startedAt } }).nextItems();
      assert.deepEqual(after.map((s) => s.sandboxId), [newer.sandboxId]);
      const later = new Date(info.startedAt.getTime() + 1000);
      assert.equal((await Sandbox.list({ query: { metadata: tag, startedAfter: later } }).nextItems()).length, 0);
    } finally {
      await older.kill();
      await newer.kill();
    }
  });

  test("connect reaches the same sandbox", async () => {
    const s2 = await Sandbox.connect(sbx.sandboxId);
    assert.equal((await s2.commands.run("echo again")).stdout, "again\n");
  });

  test("another key does not see it", async () => {
    const other = { apiKey: process.env.E2B_TEST_KEY_B };
    await assert.rejects(Sandbox.connect(sbx.sandboxId, other), NotFoundError);
    assert.equal(await Sandbox.kill(sbx.sandboxId, other), false);
    const items = await Sandbox.list(other).nextItems();
    assert.ok(!items.some((s) => s.sandboxId === sbx.sandboxId));
  });

  test("kill ends it: kill again is false, isRunning false, commands fail", async () => {
    const s = await create("base");
    await s.kill();
    assert.equal(await Sandbox.kill(s.sandboxId), false);
    assert.equal(await s.isRunning(), false);
    await assert.rejects(Sandbox.connect(s.sandboxId), NotFoundError);
    // envd's 502: the SDK's "not running anymore" (TimeoutError before 2.46).
    await assert.rejects(
      s.commands.run("true"),
      (e) => e instanceof SandboxNotFoundError || e instanceof TimeoutError,
    );
  });

  test("a wrong key is an AuthenticationError, an unknown template an error", async () => {
    await assert.rejects(
      Sandbox.create("base", { apiKey: "e2b_" + "f".repeat(32) }),
      AuthenticationError,
    );
    await assert.rejects(Sandbox.create("no-such-template"), /400|not found/);
  });

  test("getMetrics: its own usage, a busy command's CPU share, a window of time", async () => {
    const first = await sbx.getMetrics();
    assert.ok(first.length >= 1, "a reading is taken when asked");
    const m = first.at(-1);
    assert.ok(m.timestamp instanceof Date && Math.abs(m.timestamp.getTime() - Date.now()) < 60_000);
    assert.ok(m.cpuCount >= 1, `cpuCount ${m.cpuCount}`);
    assert.ok(m.memUsed > 0 && m.memUsed <= m.memTotal, `memUsed ${m.memUsed} of ${m.memTotal}`);
    assert.ok(m.diskTotal > 0 && m.diskUsed <= m.diskTotal, `disk ${m.diskUsed} of ${m.diskTotal}`);
    // Two seconds of a busy loop: the next reading counts them.
    await sbx.commands.run("timeout 2 sh -c 'while :; do :; done'").catch(() => {});
    const after = await sbx.getMetrics();
    assert.ok(after.length >= 2, `${after.length} readings`);
    assert.ok(after.at(-1).cpuUsedPct > 5, `cpuUsedPct ${after.at(-1).cpuUsedPct}`);
    assert.ok(after.at(-2).timestamp <= after.at(-1).timestamp);
    // A window in the past holds none of them; one around now holds the newest.
    const hourAgo = new Date(Date.now() - 3_600_000);
    assert.deepEqual(await sbx.getMetrics({ start: hourAgo, end: new Date(Date.now() - 1_800_000) }), []);
    const around = await sbx.getMetrics({ start: hourAgo, end: new Date(Date.now() + 5_000) });
    assert.ok(around.length >= 2);
    assert.equal((await Sandbox.getMetrics(sbx.sandboxId)).length >= 2, true);
  });

  test("the default template and the alias of the code interpreter", async () => {
    const d = await create(null);
    assert.equal((await d.getInfo()).templateId, "base");
    const ci = await create("code-interpreter-v1");
    assert.equal((await ci.getInfo()).templateId, "code-interpreter-v1");
    const r = await ci.commands.run("python3 -c 'print(6*7)'");
    assert.equal(r.stdout, "42\n");
    await ci.kill();
    await d.kill();
  });
});

// E2B's default template, "base" (what Sandbox.create() makes), has Python with pip,
// Node.js with npm, git and curl: here it is the code-interpreter template (docs/e2b.md).
const noCI = !process.env.E2B_TEST_CI_TEMPLATE && "the code-interpreter template is not built (run.sh says why)";

describe("E2B's default template", { skip: noCI }, () => {
  const run = async (sbx, cmd) => {
    const r = await sbx.commands.run(cmd);
    assert.equal(r.exitCode, 0, `${cmd}: ${r.stderr}`);
    return r.stdout.trim();
  };

  // What E2B's users run first in E2B's base: its tools, each doing something.
  async function hasTheTools(sbx) {
    assert.equal((await sbx.getInfo()).templateId, "base");
    assert.equal(await run(sbx, "python3 -c 'print(6 * 7)'"), "42");
    assert.match(await run(sbx, "pip --version"), /^pip \d+/);
    assert.equal(await run(sbx, "node -e 'console.log(6 * 7)'"), "42");
    assert.match(await run(sbx, "npm --version"), /^\d+\.\d+\.\d+$/);
    assert.match(await run(sbx, "git --version"), /^git version 2\./);
    assert.match(await run(sbx, "curl --version"), /^curl \d/);
    await sbx.files.write("/home/user/hi.txt", "hi from curl\n");
    assert.equal(await run(sbx, "curl -sS file:///home/user/hi.txt"), "hi from curl");
    assert.equal(await run(sbx, "mkdir pkg && cd pkg && npm init -y >/dev/null && node -p 'require(\"./package.json\").name'"), "pkg");
  }

  test("Sandbox.create() with no template has python3, pip, node, npm, git and curl", async () => {
    await hasTheTools(await create());
  });

  test("so has templateID base, named", async () => {
    await hasTheTools(await create("base"));
  });

  test("git init and commit in /home/user, as E2B's git tests do them", async () => {
    const sbx = await create();
    assert.equal(await run(sbx, "pwd"), "/home/user");
    assert.equal(await run(sbx, "echo $HOME"), "/home/user");
    // The SDK's git module: an identity per commit, none configured.
    await sbx.git.init("/home/user/repo", { initialBranch: "main" });
    await sbx.files.write("/home/user/repo/README.md", "hello\n");
    await sbx.git.add("/home/user/repo");
    await sbx.git.commit("/home/user/repo", "Initial commit", {
      authorName: "Sandbox Bot",
      authorEmail: "sandbox@example.com",
    });
    assert.equal(await run(sbx, "git -C repo log -1 --pretty='%an <%ae> %s'"),
      "Sandbox Bot <sandbox@example.com> Initial commit");
    assert.equal(await run(sbx, "git -C repo symbolic-ref --short HEAD"), "main");
    // A global identity goes to the user's home, and plain git commands use it.
    await sbx.git.configureUser("Sandbox Bot", "sandbox@example.com");
    assert.match(await sbx.files.read("/home/user/.gitconfig"), /name = Sandbox Bot/);
    assert.equal(await run(sbx, "git init -q plain && cd plain && echo x > x && git add x && " +
      "git commit -qm one && git log --pretty='%ae %s'"), "sandbox@example.com one");
    // The files are the user's: the commands' user owns what git made.
    assert.equal(await run(sbx, "stat -c %U repo/.git plain/.git | sort -u"), await run(sbx, "id -un"));
  });
});

describe("commands", () => {
  let sbx;
  before(async () => {
    sbx = await create("base", { envs: { FROM_CREATE: "yes" } });
  });

  test("run gives stdout, stderr and the exit code", async () => {
    const r = await sbx.commands.run("echo hi");
    assert.equal(r.exitCode, 0);
    assert.equal(r.stdout, "hi\n");
    assert.equal(r.stderr, "");
  });

  test("output is streamed as it comes", async () => {
    const seen = [];
    const t0 = Date.now();
    await sbx.commands.run("for i in 1 2 3; do echo $i; sleep 0.3; done", {
      onStdout: (d) => seen.push([Date.now() - t0, d]),
    });
    const total = Date.now() - t0;
    assert.equal(seen.map((s) => s[1]).join(""), "1\n2\n3\n");
    assert.ok(seen.length >= 2, `${seen.length} pieces`);
    assert.ok(total - seen[0][0] >= 400, `first piece at ${seen[0][0]} of ${total} ms`);
  });

  test("a large output arrives whole, in order", async () => {
    const r = await sbx.commands.run("seq 1 300000");
    const lines = r.stdout.split("\n");
    assert.equal(lines.length, 300001, `${lines.length - 1} lines`);
    assert.equal(lines[0], "1");
    assert.equal(lines[299999], "300000");
    assert.ok(lines.every((l, i) => i === 300000 || l === String(i + 1)), "lines spliced");
  });

  test("a slow reader gets every byte: the command waits for it", async () => {
    // Each piece holds the event loop, so the stream is read far slower than `seq` writes:
    // the sandbox's buffer (256 KiB) is passed many times over.
    let pieces = 0;
    const r = await sbx.commands.run("seq 1 200000", {
      onStdout: () => {
        pieces++;
        const until = Date.now() + 15;
        while (Date.now() < until);
      },
    });
    const lines = r.stdout.split("\n");
    assert.equal(lines.length, 200001, `${lines.length - 1} lines in ${pieces} pieces`);
    assert.equal(lines[199999], "200000");
  });

  test("a sandbox killed under a running command: the SDK's actionable TimeoutError", async () => {
    const s = await create("base");
    const cmd = await s.commands.run("sleep 60", { background: true });
    await s.kill();
    const err = await cmd.wait().catch((e) => e);
    assert.ok(err instanceof TimeoutError, String(err));
    assert.match(err.message, /sandbox was killed or reached its end of life/);
  });

  test("a failing command is a CommandExitError with its code and stderr", async () => {
    await assert.rejects(
      sbx.commands.run("echo oops >&2; exit 3"),
      (e) => e instanceof CommandExitError && e.exitCode === 3 && e.stderr === "oops\n",
    );
  });

  test("envs, the sandbox's envVars and cwd", async () => {
    assert.equal((await sbx.commands.run("echo $FOO", { envs: { FOO: "bar" } })).stdout, "bar\n");
    assert.equal((await sbx.commands.run("echo $FROM_CREATE")).stdout, "yes\n");
    await sbx.files.makeDir("/home/user/sub");
    const r = await sbx.commands.run("pwd; ls", { cwd: "/home/user/sub" });
    assert.equal(r.exitCode, 0);
    assert.match(r.stdout, /sub\n/);
  });

  test("background commands: list, kill, wait", async () => {
    const h = await sbx.commands.run("sleep 30", { background: true, timeoutMs: 0 });
    assert.ok(h.pid > 0);
    const list = await sbx.commands.list();
    assert.ok(list.some((p) => p.pid === h.pid && p.args.includes("sleep 30")), JSON.stringify(list));
    assert.equal(await sbx.commands.kill(h.pid), true);
    await assert.rejects(h.wait(), CommandExitError);
    await until(async () => !(await sbx.commands.list()).some((p) => p.pid === h.pid), "the pid to go");
    assert.equal(await sbx.commands.kill(h.pid), false);
  });

  test("a background command outlives its handle and can be reattached", async () => {
    const h = await sbx.commands.run("sleep 1; echo late", { background: true, timeoutMs: 0 });
    await h.disconnect();
    const again = await sbx.commands.connect(h.pid);
    const r = await again.wait();
    assert.equal(r.exitCode, 0);
    assert.match(r.stdout, /late/);
  });

  test("sendStdin reaches a command that keeps its stdin", async () => {
    const h = await sbx.commands.run("head -n 1", { background: true, stdin: true });
    await sbx.commands.sendStdin(h.pid, "typed\n");
    const r = await h.wait();
    assert.equal(r.stdout, "typed\n");
  });

  test("closeStdin ends a command's input", async () => {
    const h = await sbx.commands.run("cat; echo done", { background: true, stdin: true });
    await sbx.commands.sendStdin(h.pid, "in-");
    await sbx.commands.closeStdin(h.pid);
    const r = await h.wait();
    assert.equal(r.stdout, "in-done\n");
  });

  test("a command's timeout is a TimeoutError", async () => {
    const t0 = Date.now();
    await assert.rejects(sbx.commands.run("sleep 10", { timeoutMs: 1000 }), TimeoutError);
    assert.ok(Date.now() - t0 < 8000);
  });

  test("a terminal: create, sendInput, resize, kill", async () => {
    let out = "";
    const dec = new TextDecoder();
    const t = await sbx.pty.create({
      cols: 80,
      rows: 24,
      onData: (d) => {
        out += dec.decode(d);
      },
      timeoutMs: 0,
    });
    await sbx.pty.sendInput(t.pid, new TextEncoder().encode("stty size; echo mark-$((6*7))\n"));
    await until(() => out.includes("mark-42"), "the terminal's echo");
    assert.match(out, /24 80/);
    await sbx.pty.resize(t.pid, { cols: 100, rows: 30 });
    await sbx.pty.sendInput(t.pid, new TextEncoder().encode("stty size\n"));
    await until(() => out.includes("30 100"), "the new size");
    assert.equal(await sbx.pty.kill(t.pid), true);
  });
});

describe("files", () => {
  let sbx;
  before(async () => {
    sbx = await create("base");
  });

  test("any path the user may reach, as in E2B: files and commands agree", async () => {
    await sbx.files.write("/tmp/anywhere.txt", "there");
    assert.equal((await sbx.commands.run("cat /tmp/anywhere.txt")).stdout, "there");
    assert.match(await sbx.files.read("/etc/passwd"), /^root:/);
    assert.equal((await sbx.commands.run("pwd", { cwd: "/tmp" })).stdout, "/tmp\n");
    const names = (await sbx.files.list("/")).map((e) => e.path);
    assert.ok(names.includes("/etc") && names.includes("/tmp"), names.join(" "));
    assert.equal((await sbx.files.getInfo("/tmp/anywhere.txt")).path, "/tmp/anywhere.txt");
    assert.equal((await sbx.files.getInfo("hello-rel.txt").catch(() => null)), null);
    await sbx.files.write("hello-rel.txt", "x");
    assert.equal((await sbx.files.getInfo("hello-rel.txt")).path, "/home/user/hello-rel.txt");
    // Missing directories are made wherever they are asked for, and are the user's, as E2B's
    // envd makes them; a file in root's own directory is still not the user's to write.
    await sbx.files.write("/e2b-made/deeper/f.txt", "made");
    assert.equal((await sbx.files.getInfo("/e2b-made")).owner, "user");
    assert.equal(await sbx.files.makeDir("/e2b-dir"), true);
    assert.equal((await sbx.files.getInfo("/e2b-dir")).owner, "user");
    assert.equal((await sbx.commands.run("cat /e2b-made/deeper/f.txt")).stdout, "made");
    await assert.rejects(sbx.files.write("/etc/not-yours", "x"));
    await assert.rejects(sbx.commands.run("true", { cwd: "/nowhere" }));
    assert.equal(await sbx.files.exists("/nowhere/at/all"), false);
    assert.equal(await sbx.files.exists("/etc"), true);
  });

  test("write returns the entry; read by absolute and relative path; commands see it", async () => {
    const w = await sbx.files.write("/home/user/hello.txt", "hello");
    assert.equal(w.path, "/home/user/hello.txt");
    assert.equal(w.name, "hello.txt");
    assert.equal(w.type, "file");
    assert.equal(await sbx.files.read("/home/user/hello.txt"), "hello");
    assert.equal(await sbx.files.read("hello.txt"), "hello");
    assert.equal((await sbx.commands.run("cat hello.txt")).stdout, "hello");
  });

  test("binary and empty files", async () => {
    const bytes = Uint8Array.from({ length: 256 }, (_, i) => i);
    await sbx.files.write("bin", bytes.buffer);
    assert.deepEqual(await sbx.files.read("bin", { format: "bytes" }), bytes);
    await sbx.files.write("empty", "");
    assert.equal(await sbx.files.read("empty"), "");
  });

  test("a large file goes both ways whole", async () => {
    const big = new Uint8Array(3 * 1024 * 1024 + 17);
    for (let i = 0; i < big.length; i++) big[i] = (i * 7) & 0xff;
    await sbx.files.write("/home/user/big.bin", big.buffer);
    const back = await sbx.files.read("/home/user/big.bin", { format: "bytes" });
    assert.equal(back.length, big.length);
    assert.ok(Buffer.from(back).equals(Buffer.from(big)));
  });

  test("makeDir, exists, getInfo", async () => {
    assert.equal(await sbx.files.makeDir("/home/user/d1"), true);
    assert.equal(await sbx.files.makeDir("/home/user/d1"), false);
    assert.equal(await sbx.files.exists("/home/user/d1"), true);
    assert.equal(await sbx.files.exists("/home/user/nothing"), false);
    const info = await sbx.files.getInfo("/home/user/d1");
    assert.equal(info.type, "dir");
    assert.equal(info.name, "d1");
    assert.equal(info.path, "/home/user/d1");
  });

  test("list, rename, remove", async () => {
    await sbx.files.makeDir("/home/user/d2/deep");
    await sbx.files.write("/home/user/d2/a.txt", "x");
    await sbx.files.write("/home/user/d2/deep/b.txt", "yy");
    const es = await sbx.files.list("/home/user/d2");
    const a = es.find((e) => e.name === "a.txt");
    assert.deepEqual([a.type, a.path, a.size], ["file", "/home/user/d2/a.txt", 1]);
    assert.ok(!es.some((e) => e.name === "b.txt"), "depth 1 only");
    const deep = await sbx.files.list("/home/user/d2", { depth: 2 });
    assert.ok(deep.some((e) => e.path === "/home/user/d2/deep/b.txt"));
    const e = await sbx.files.rename("/home/user/d2/a.txt", "/home/user/d2/c.txt");
    assert.equal(e.name, "c.txt");
    assert.equal(await sbx.files.exists("/home/user/d2/a.txt"), false);
    await sbx.files.remove("/home/user/d2");
    assert.equal(await sbx.files.exists("/home/user/d2"), false);
    await sbx.files.remove("/home/user/d2");
    await assert.rejects(sbx.files.read("/home/user/nope"), FileNotFoundError);
  });

  test("several files in one write", async () => {
    const r = await sbx.files.write([
      { path: "m1", data: "1" },
      { path: "/home/user/m2", data: "2" },
    ]);
    assert.equal(r.length, 2);
    assert.equal(await sbx.files.read("m1"), "1");
    assert.equal(await sbx.files.read("m2"), "2");
  });

  test("watchDir reports a file written", async () => {
    await sbx.files.makeDir("/home/user/w");
    const events = [];
    const h = await sbx.files.watchDir("/home/user/w", (ev) => events.push(ev), {
      timeoutMs: 0,
    });
    await sbx.files.write("/home/user/w/new.txt", "n");
    await until(() => events.some((e) => e.name === "new.txt"), "the watch event");
    await h.stop();
  });

  test("entries as E2B gives them: owner, mode, permissions; a symlink's target made absolute", async () => {
    await sbx.files.makeDir("ent");
    await sbx.files.write("ent/test.txt", "Hello, World!");
    const [e] = await sbx.files.list("ent", { depth: 1 });
    assert.equal(e.path, "/home/user/ent/test.txt");
    assert.equal(e.type, "file");
    assert.equal(e.mode, 0o644);
    assert.equal(e.permissions, "-rw-r--r--");
    assert.equal(e.owner, "user");
    assert.equal(e.group, "user");
    assert.equal(e.size, 13);
    assert.equal(e.symlinkTarget, undefined);
    await sbx.commands.run("cd ent && ln -s test.txt link.txt");
    const info = await sbx.files.getInfo("ent/link.txt");
    assert.equal(info.name, "link.txt");
    assert.equal(info.symlinkTarget, "/home/user/ent/test.txt");
    assert.equal(info.type, "symlink");
    const root = await sbx.files.getInfo("/etc/passwd");
    assert.equal(root.owner, "root");
    assert.equal(root.group, "root");
  });

  test("watchDir: a write is created then written, as E2B's; no temporary file shows", async () => {
    await sbx.files.makeDir("/tmp/w2");
    await sbx.files.write("/tmp/w2/old.txt", "a");
    const events = [];
    const h = await sbx.files.watchDir("/tmp/w2", (ev) => events.push(ev), { timeoutMs: 0 });
    await sbx.files.write("/tmp/w2/new.txt", "n");
    await sbx.files.write("/tmp/w2/old.txt", "b");
    await until(() => events.some((e) => e.name === "old.txt" && e.type === FilesystemEventType.WRITE), "the second write");
    await h.stop();
    const seen = events.map((e) => `${e.type}:${e.name}`);
    assert.ok(events.every((e) => e.name === "new.txt" || e.name === "old.txt"), seen.join(" "));
    const created = seen.indexOf(`${FilesystemEventType.CREATE}:new.txt`);
    const written = seen.indexOf(`${FilesystemEventType.WRITE}:new.txt`);
    assert.ok(created >= 0 && written > created, seen.join(" "));
    assert.ok(!seen.includes(`${FilesystemEventType.CREATE}:old.txt`), seen.join(" "));
    assert.ok(!events.some((e) => e.type === FilesystemEventType.RENAME), seen.join(" "));
    assert.equal(await sbx.files.read("/tmp/w2/new.txt"), "n");
    assert.equal(await sbx.files.read("/tmp/w2/old.txt"), "b");
  });

  test("a raw-byte upload (useOctetStream) writes the file", async () => {
    const w = await sbx.files.write("/home/user/raw.bin", "raw bytes", { useOctetStream: true });
    assert.equal(w.path, "/home/user/raw.bin");
    assert.equal(await sbx.files.read("raw.bin"), "raw bytes");
  });
});

describe("gzip on /files", () => {
  let sbx;
  before(async () => {
    sbx = await create("base");
  });

  test("write and read with gzip: true (compressed raw bytes both ways)", async () => {
    const big = new Uint8Array(2 * 1024 * 1024 + 3);
    for (let i = 0; i < big.length; i++) big[i] = (i * 31) % 251;
    const w = await sbx.files.write("/home/user/gz.bin", big.buffer, { gzip: true });
    assert.equal(w.path, "/home/user/gz.bin");
    const back = await sbx.files.read("gz.bin", { format: "bytes", gzip: true });
    assert.ok(Buffer.from(back).equals(Buffer.from(big)));
    assert.equal((await sbx.commands.run("wc -c < gz.bin")).stdout.trim(), String(big.length));
    await sbx.files.write("gz-empty", "", { gzip: true });
    assert.equal(await sbx.files.read("gz-empty", { gzip: true }), "");
  });
});

describe("pause and resume", () => {
  test("pause freezes it with its background process; connect resumes it", async () => {
    const sbx = await create("base");
    assert.equal(typeof sbx.pause, "function", "this SDK has pause()");
    await sbx.files.write("/home/user/kept.txt", "kept");
    const h = await sbx.commands.run(
      // Replaced whole each time: a read that met the file half rewritten would fail (the
      // daemon never hands out a file that changed while it was read) or find it empty.
      "i=0; while :; do i=$((i+1)); echo $i > c.tmp && mv c.tmp count; sleep 0.1; done",
      { background: true, timeoutMs: 0 },
    );
    await until(async () => Number(await sbx.files.read("count").catch(() => "0")) > 3, "the counter");
    // The handle's stream is open during the pause: it must end, not hang.
    const waited = h.wait().then(() => "resolved", (e) => e);
    const before = Number(await sbx.files.read("count"));
    assert.equal(await sbx.pause(), true);
    const ended = await Promise.race([waited, new Promise((r) => setTimeout(() => r("hung"), 10_000))]);
    assert.ok(ended instanceof Error, `the open stream ended with an error (${ended})`);
    assert.equal((await sbx.getInfo()).state, "paused");
    assert.equal(await sbx.isRunning(), false);
    assert.equal(await sbx.pause(), false, "a second pause: already paused");
    const paused = await Sandbox.list({ query: { state: ["paused"] } }).nextItems();
    assert.ok(paused.some((s) => s.sandboxId === sbx.sandboxId && s.state === "paused"));
    const running = await Sandbox.list({ query: { state: ["running"] } }).nextItems();
    assert.ok(!running.some((s) => s.sandboxId === sbx.sandboxId));
    // The data plane is 502 while paused: the SDK says the sandbox is not running.
    await assert.rejects(sbx.commands.run("true"), (e) => e instanceof SandboxNotFoundError || e instanceof TimeoutError);
    await new Promise((r) => setTimeout(r, 1500));

    const again = await Sandbox.connect(sbx.sandboxId);
    assert.equal((await again.getInfo()).state, "running");
    const after = Number(await again.files.read("count"));
    // Frozen: at most a few ticks between the read before and the one after (15 if not).
    assert.ok(after - before < 8, `the counter stood still while paused (${before} -> ${after})`);
    assert.equal(await again.files.read("kept.txt"), "kept");
    assert.ok((await again.commands.list()).some((p) => p.pid === h.pid), "the process lives");
    await until(async () => Number(await again.files.read("count")) > after + 3, "the counter again");
    assert.equal(await again.commands.kill(h.pid), true);
    assert.equal((await again.commands.run("echo back")).stdout, "back\n");
  });

  test("lifecycle onTimeout pause: its timeout pauses it, processes kept; connect wakes it", async () => {
    const sbx = await create("base", { timeoutMs: 3_000, lifecycle: { onTimeout: "pause" } });
    assert.deepEqual((await sbx.getInfo()).lifecycle, { onTimeout: "pause", autoResume: false });
    const h = await sbx.commands.run("sleep 600", { background: true, timeoutMs: 0 });
    await until(async () => (await sbx.getInfo()).state === "paused", "the timeout's pause", 300);
    assert.equal(await sbx.isRunning(), false);
    await sbx.connect({ timeoutMs: 60_000 });
    assert.equal((await sbx.getInfo()).state, "running");
    // Paused with its memory (E2B's default): the process is still there.
    assert.ok((await sbx.commands.list()).some((p) => p.pid === h.pid), "the process lives");
    const plain = await create("base");
    assert.deepEqual((await plain.getInfo()).lifecycle, { onTimeout: "kill", autoResume: false });
    await plain.kill();
  });

  test("a paused sandbox can be killed, and one that is not there is not found", async () => {
    const sbx = await create("base");
    assert.equal(await Sandbox.pause(sbx.sandboxId), true);
    assert.equal(await Sandbox.kill(sbx.sandboxId), true);
    await assert.rejects(Sandbox.pause(sbx.sandboxId), SandboxNotFoundError);
    await assert.rejects(Sandbox.connect(sbx.sandboxId), SandboxNotFoundError);
  });

  test("a pause during a streaming command and a watch ends both; the watch comes back", async () => {
    const sbx = await create("base");
    await sbx.files.makeDir("/home/user/pw");
    const got = [];
    const w = await sbx.files.watchDir("/home/user/pw", (e) => got.push(e), { timeoutMs: 0 });
    const run = sbx.commands.run("sleep 30", { timeoutMs: 0 }).then(() => "resolved", (e) => e);
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(await sbx.pause(), true);
    const r = await Promise.race([run, new Promise((res) => setTimeout(() => res("hung"), 10_000))]);
    assert.ok(r instanceof Error, `the command's stream ended (${r})`);
    await w.stop().catch(() => {});
    const again = await Sandbox.connect(sbx.sandboxId);
    const w2 = await again.files.watchDir("/home/user/pw", (e) => got.push(e), { timeoutMs: 0 });
    await again.files.write("/home/user/pw/after.txt", "a");
    await until(() => got.some((e) => e.name === "after.txt"), "an event after the resume");
    await w2.stop();
  });
});
