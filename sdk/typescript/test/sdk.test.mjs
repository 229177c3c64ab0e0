import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, SandboxError } from "../dist/index.js";
import { startDaemon } from "./daemon.mjs";

let daemon;
let sandbox;

before(async () => {
  daemon = await startDaemon();
  sandbox = new Sandbox({ baseUrl: daemon.baseUrl, apiKey: daemon.apiKey });
});

after(async () => {
  await daemon?.stop();
});

test("health and templates", async () => {
  assert.equal(await sandbox.healthy(), true);
  const names = (await sandbox.templates()).map((t) => t.name);
  assert.ok(names.includes("base"));
});

test("exec, run and runCode", async () => {
  const s = sandbox.create({ template: "base" });
  const r = await s.exec("echo", { args: ["hi"] });
  assert.equal(r.exitCode, 0);
  assert.equal(r.output.map((c) => c.data).join(""), "hi\n");
  assert.match(r.execId, /^exec_/);
  const r2 = await s.run("echo err >&2; exit 7");
  assert.equal(r2.exitCode, 7);
  assert.equal(r2.output[0].stream, "stderr");
  const r3 = await s.runCode("echo $((2+2))");
  assert.equal(r3.output[0].data, "4\n");
  await s.destroy();
});

test("execStream yields start, output and result", async () => {
  const s = await sandbox.createSession({ template: "base" });
  const events = [];
  for await (const ev of s.execStream("sh", { args: ["-c", "echo a; sleep 0.2; echo b"] })) events.push(ev);
  assert.equal(events[0].type, "start");
  const out = events.filter((e) => e.type === "stream").map((e) => e.data).join("");
  assert.equal(out, "a\nb\n");
  const last = events.at(-1);
  assert.equal(last.type, "result");
  assert.equal(last.exitCode, 0);
  await s.destroy();
});

test("cancel a running command by its execId", async () => {
  const s = await sandbox.createSession({ template: "base" });
  const it = s.execStream("sleep", { args: ["30"] });
  const start = (await it.next()).value;
  assert.equal(start.type, "start");
  await s.cancel(start.execId);
  let result;
  for await (const ev of it) if (ev.type === "result") result = ev;
  assert.equal(result.cancelled, true);
  await s.destroy();
});

test("binary files round trip", async () => {
  const s = sandbox.create({ template: "base" });
  const bytes = new Uint8Array(256 * 40);
  for (let i = 0; i < bytes.length; i++) bytes[i] = i % 256;
  const w = await s.writeFile("data.bin", bytes);
  assert.equal(w.size, bytes.length);
  assert.deepEqual(await s.readBytes("data.bin"), bytes);
  await s.writeFile("t.txt", "héllo");
  const r = await s.readFile("t.txt");
  assert.equal(r.content, "héllo");
  assert.equal(r.encoding, "utf8");
  const list = await s.listFiles(".", { recursive: true });
  assert.deepEqual(list.files.map((f) => f.path).sort(), ["data.bin", "t.txt"]);
  await s.destroy();
});

test("stat, exists, mkdir, move and remove", async () => {
  const s = sandbox.create({ template: "base" });
  await s.mkdir("a/b");
  assert.equal((await s.stat("a/b")).type, "dir");
  await s.writeFile("a/b/f.txt", "hey");
  await s.move("a/b/f.txt", "c/g.txt");
  const st = await s.stat("c/g.txt");
  assert.deepEqual([st.type, st.size, st.path], ["file", 3, "c/g.txt"]);
  assert.equal(await s.exists("a/b/f.txt"), false);
  await assert.rejects(s.remove("a"), (e) => e instanceof SandboxError && e.status === 409);
  await s.remove("a", { recursive: true });
  assert.equal(await s.exists("a"), false);
  await assert.rejects(s.move("c", "../out"), (e) => e instanceof SandboxError && e.status === 400);
  await s.destroy();
});

test("watch yields a directory's changes until closed", async () => {
  const s = sandbox.create({ template: "base" });
  await s.mkdir("w");
  const w = await s.watch("w", { recursive: true });
  assert.equal(w.watches, 1);
  // A new directory is watched once the agent sees it; what is made in it before that is
  // reported by the scan that follows (as it is then): the pause keeps the order exact.
  await s.exec("sh", { args: ["-c", "mkdir w/d && sleep 0.5 && echo hi > w/d/f && mv w/d/f w/d/g && rm w/d/g"] });
  const seen = [];
  for await (const ev of w) {
    seen.push([ev.type, ev.path, ev.from]);
    if (ev.type === "remove") break; // leaving the loop closes the watch
  }
  assert.deepEqual(seen.slice(0, 2), [["create", "w/d", undefined], ["create", "w/d/f", undefined]]);
  assert.ok(seen.some(([t, p, f]) => t === "rename" && p === "w/d/g" && f === "w/d/f"), JSON.stringify(seen));
  assert.deepEqual(seen.at(-1), ["remove", "w/d/g", undefined]);
  // With a timeout it ends on its own, and says so.
  const t = await s.watch("w", { timeoutMs: 200 });
  for await (const ev of t) assert.fail(`unexpected ${JSON.stringify(ev)}`);
  assert.equal(t.end.timedOut, true);
  await assert.rejects(s.watch("../etc"), (e) => e instanceof SandboxError && e.status === 400);
  await assert.rejects(s.watch("missing"), (e) => e instanceof SandboxError && e.status === 404);
  await s.destroy();
});

test("volumes: made, mounted, kept, refused while mounted, deleted; root commands", async () => {
  if ((process.env.DRIVER ?? "jail") !== "jail") return;
  const v = await sandbox.createVolume("sdk-ts", 16 << 20);
  assert.deepEqual([v.name, v.state], ["sdk-ts", "ready"]);
  assert.ok((await sandbox.volumes()).some((x) => x.name === "sdk-ts"));
  const s = await sandbox.createSession({ template: "base", volumes: [{ name: "sdk-ts", path: "/data" }] });
  const r = await s.run("echo kept > /data/f && stat -c %u /data/f");
  assert.equal(r.output.map((c) => c.data).join(""), "1000\n");
  const root = await s.exec("id", { args: ["-u"], user: "root" });
  assert.equal(root.output.map((c) => c.data).join(""), "0\n");
  await assert.rejects(sandbox.deleteVolume("sdk-ts"), (e) => e instanceof SandboxError && e.status === 409);
  await s.destroy();
  for (let i = 0; ; i++) {
    try {
      await sandbox.deleteVolume("sdk-ts");
      break;
    } catch (e) {
      if (!(e instanceof SandboxError) || e.status !== 409 || i > 100) throw e;
      await new Promise((res) => setTimeout(res, 100));
    }
  }
  await assert.rejects(sandbox.volume("sdk-ts"), (e) => e instanceof SandboxError && e.status === 404);
});

test("errors carry status and message", async () => {
  const s = sandbox.create({ template: "base" });
  await s.exec("true");
  await assert.rejects(s.readFile("../etc/passwd"), (e) => e instanceof SandboxError && e.status === 400);
  await assert.rejects(s.readFile("missing"), (e) => e instanceof SandboxError && e.status === 404);
  assert.equal(await s.destroy(), true);
  assert.equal(await s.destroy(), false); // no such session: destroyed false, not an error
  const bad = new Sandbox({ baseUrl: daemon.baseUrl, apiKey: "sk_test_" + "0".repeat(32) });
  await assert.rejects(bad.templates(), (e) => e.status === 401);
  const down = new Sandbox({ baseUrl: "http://127.0.0.1:9", apiKey: "x" });
  assert.equal(await down.healthy(), false);
  await assert.rejects(down.templates(), (e) => e instanceof SandboxError && e.status === 0);
});

test("runCode follows the session's template, asking the daemon when the handle has none", async () => {
  // The daemon's default template here is base (sh), not node.
  const s = sandbox.create();
  assert.equal(s.template, undefined);
  const r = await s.runCode("echo $((2+2))");
  assert.equal(r.output.map((c) => c.data).join(""), "4\n");
  assert.equal(s.template, "base");
  const existing = await sandbox.createSession({ template: "base" });
  const handle = sandbox.session(existing.id);
  assert.equal((await handle.runCode("echo ok")).output[0].data, "ok\n");
  await existing.destroy();
  await s.destroy();
});

test("a process started by one client: another attaches, gets replay then live output, in order", async () => {
  const s = await sandbox.createSession({ template: "base" });
  const [n, half] = [300, 150];
  const loop = (a, b) => `for i in $(seq ${a} ${b}); do echo $i; sleep 0.01; done`;
  // Its second half waits for a line on its stdin: only a live attach can see it.
  const p = await s.startProcess(`${loop(1, half)}; read _; ${loop(half + 1, n)}`, { tag: "seq", stdin: true });
  assert.equal(p.state, "running");
  const other = new Sandbox({ baseUrl: daemon.baseUrl, apiKey: daemon.apiKey }).session(s.id, "base");
  let text = "";
  let sent = false;
  let last;
  for await (const ev of other.attach("seq")) {
    assert.notEqual(ev.type, "gap");
    assert.notEqual(ev.type, "error");
    if (ev.type === "start") assert.equal(ev.pid, p.pid);
    if (ev.type === "stream") {
      text += ev.data;
      if (!sent && text.endsWith(`\n${half}\n`)) {
        await other.sendStdin("seq", "go\n");
        sent = true;
      }
    }
    last = ev;
  }
  assert.ok(sent);
  assert.equal(text, Array.from({ length: n }, (_, i) => `${i + 1}\n`).join(""));
  assert.equal(last.type, "result");
  assert.deepEqual([last.process.pid, last.process.state, last.process.exitCode], [p.pid, "exited", 0]);
  assert.deepEqual((await s.processes()).map((x) => x.pid), [p.pid]);
  await s.destroy();
});

test("process stdin, signals, terminal and errors", async () => {
  const s = await sandbox.createSession({ template: "base" });
  const cat = await s.startProcess("cat", { tag: "cat", stdin: true });
  assert.equal((await s.sendStdin("cat", "héllo ")).bytes, 7);
  assert.equal((await s.sendStdin(cat.pid, new Uint8Array([0, 0x72, 0xff, 0x0a]))).bytes, 4);
  await s.closeStdin("cat");
  assert.equal((await s.waitProcess("cat")).exitCode, 0);
  const events = [];
  for await (const ev of s.attach("cat", { follow: false })) events.push(ev);
  assert.deepEqual(events[0], { type: "start", pid: cat.pid });
  assert.equal(events.at(-1).type, "result");
  assert.equal(events.filter((e) => e.type === "stream").map((e) => e.data).join(""), "héllo \0r\ufffd\n");
  const tail = [];
  for await (const ev of s.attach("cat", { follow: false, replay: 2 })) if (ev.type === "stream") tail.push(ev.data);
  assert.equal(tail.join(""), "\ufffd\n");
  await s.startProcess("sleep", { args: ["60"], tag: "sl" });
  await assert.rejects(s.waitProcess("sl", { timeout: 200 }), (e) => e instanceof SandboxError && e.status === 408);
  await s.signalProcess("sl", "TERM");
  assert.equal((await s.waitProcess("sl")).signal, "SIGTERM");
  await s.startProcess("sleep 60", { tag: "k" });
  await s.killProcess("k");
  assert.equal((await s.waitProcess("k")).signal, "SIGKILL");
  await s.startProcess("sh", { args: ["-c", "read _; stty size"], tag: "t", pty: { rows: 30, cols: 100 } });
  await s.resize("t", 40, 120);
  await s.sendStdin("t", "\n");
  await s.waitProcess("t");
  let out = "";
  for await (const ev of s.attach("t", { follow: false })) if (ev.type === "stream") out += ev.data;
  assert.match(out, /40 120/);
  const is = (status) => (e) => e instanceof SandboxError && e.status === status;
  await assert.rejects(s.process("nosuch"), is(404));
  await assert.rejects(s.process(999999), is(404));
  await assert.rejects(s.attach("nosuch").next(), is(404));
  await assert.rejects(s.killProcess("nosuch"), is(404));
  await assert.rejects(s.sendStdin("nosuch", "x"), is(404));
  await assert.rejects(s.startProcess("sleep 60", { replayBytes: 64 << 20 }), is(429));
  await assert.rejects(s.startProcess("true", { tag: "bad/tag" }), is(400));
  await assert.rejects(s.signalProcess("cat", "NOSUCHSIG"), is(400));
  await s.destroy();
});

// GET url as a browser would: a `*.localhost` host is the loopback, its name the Host header.
async function browserGet(url, headers = {}) {
  const http = await import("node:http");
  const u = new URL(url);
  const daemonUrl = new URL(daemon.baseUrl);
  return new Promise((resolve, reject) => {
    http
      .get(
        { host: daemonUrl.hostname, port: daemonUrl.port, path: u.pathname + u.search, headers: { Host: u.host, ...headers } },
        (res) => {
          let body = "";
          res.setEncoding("utf8");
          res.on("data", (d) => (body += d));
          res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, body }));
        },
      )
      .on("error", reject);
  });
}

test("ports and previews: the URLs reach a server in the session", async () => {
  const s = await sandbox.createSession({ template: "python" });
  await s.writeFile("page.txt", "the page\n");
  await s.startProcess("python3", { args: ["-m", "http.server", "8000"] });
  let port;
  for (let i = 0; i < 600 && !port; i++) {
    port = (await s.ports()).find((p) => p.port === 8000);
    if (!port) await new Promise((r) => setTimeout(r, 100));
  }
  assert.ok(port, "the server listens");
  const pv = await s.preview();
  const host = `${pv.name}.localhost:${new URL(daemon.baseUrl).port}`;
  assert.deepEqual(port, {
    port: 8000, address: "0.0.0.0", public: false, url: `http://8000-${host}/`, pathUrl: `/exec/${pv.name}/ports/8000/`,
  });
  assert.match(pv.token, /^pt_/);
  assert.equal(await s.previewUrl(8000), port.url);
  const path = await s.previewUrl(8000, { form: "path" });
  assert.equal(path, `${daemon.baseUrl}/exec/${pv.name}/ports/8000/`);
  const key = { Authorization: `Bearer ${daemon.apiKey}` };
  for (const url of [port.url, path]) {
    const r = await browserGet(url + "page.txt", key);
    assert.deepEqual([r.status, r.body], [200, "the page\n"], url);
  }
  // The token URL lets a client without a key in; a rotated token stops working.
  assert.equal((await browserGet(port.url + "page.txt")).status, 401);
  const shared = await s.previewUrl(8000, { token: true });
  assert.equal(shared, `${port.url}?sandbox_token=${pv.token}`);
  const redirect = await browserGet(shared);
  assert.equal(redirect.status, 302);
  const cookie = redirect.headers["set-cookie"][0].split(";")[0];
  assert.equal((await browserGet(port.url + "page.txt", { Cookie: cookie })).status, 200);
  const rotated = await s.rotatePreviewToken();
  assert.notEqual(rotated.token, pv.token);
  assert.equal((await browserGet(port.url + "page.txt", { Cookie: cookie })).status, 401);
  // Public: anyone, until private again.
  assert.deepEqual((await s.setPortPublic(8000)).publicPorts, [8000]);
  assert.equal((await s.ports()).find((p) => p.port === 8000).public, true);
  assert.equal((await browserGet(port.url + "page.txt")).status, 200);
  assert.deepEqual((await s.setPortPublic(8000, false)).publicPorts, []);
  assert.equal((await browserGet(port.url + "page.txt")).status, 401);
  // Errors: the server's, and the client's own.
  const is = (status) => (e) => e instanceof SandboxError && e.status === status;
  await assert.rejects(s.setPortPublic(0), is(400));
  for (const bad of [0, 65536, 1.5, "80"]) await assert.rejects(s.previewUrl(bad), is(0));
  await assert.rejects(s.previewUrl(8000, { form: "nosuch" }), is(0));
  await assert.rejects(sandbox.session("no-such-session").ports(), is(404));
  await assert.rejects(sandbox.session("no-such-session").previewUrl(8000), is(404));
  await s.destroy();
});

test("pause and resume: state visible, operations refused, processes carry on", async () => {
  const s = await sandbox.createSession({ template: "base" });
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const count = async () => Number((await s.run("cat count 2>/dev/null || echo 0")).output.map((c) => c.data).join(""));
  try {
    await s.startProcess("i=0; while :; do i=$((i+1)); echo $i > c.tmp && mv c.tmp count; sleep 0.01; done", {
      tag: "counter",
    });
    for (let i = 0; i < 300 && (await count()) === 0; i++) await sleep(50);
    assert.equal(await s.state(), "ready");
    const p = await s.pause();
    assert.equal(p.state, "paused");
    assert.match(p.pausedAt, /^\d{4}-/);
    assert.equal(p.pausedBy, "client");
    assert.equal(await s.state(), "paused");
    await assert.rejects(s.run("true"), (e) => e instanceof SandboxError && e.status === 409 && /paused/.test(e.message));
    await assert.rejects(s.pause(), (e) => e instanceof SandboxError && e.status === 409);
    const r = await s.resume();
    assert.equal(r.state, "ready");
    assert.equal(r.pausedAt, undefined);
    await assert.rejects(s.resume(), (e) => e instanceof SandboxError && e.status === 409);
    const before = await count();
    let now = before;
    for (let i = 0; i < 300 && now <= before; i++) {
      await sleep(50);
      now = await count();
    }
    assert.ok(now > before, `the counter stayed at ${before}`);
  } finally {
    await s.destroy();
  }
  assert.equal(await s.state(), undefined);
  await assert.rejects(sandbox.session("no-such-session").pause(), (e) => e instanceof SandboxError && e.status === 404);
});

test("fork: a jail's session without a disk says it cannot, a bad count is refused", async () => {
  // The forks themselves: tests/integration/test_fork.py (jail), tests/e2e/test_qemu_lifecycle.py (qemu).
  const s = await sandbox.createSession({ template: "base", storage: "tmpfs" });
  try {
    assert.equal(typeof s.fork, "function");
    await assert.rejects(s.fork({ count: 0 }), (e) => e instanceof SandboxError && e.status === 400);
    await assert.rejects(s.fork(), (e) => e instanceof SandboxError && e.status === 501 && /disk/.test(e.message));
    assert.equal(await s.state(), "ready");
  } finally {
    await s.destroy();
  }
  await assert.rejects(sandbox.session("no-such-session").fork(), (e) => e instanceof SandboxError && e.status === 404);
});

// A key of its own (scope exec), made with the admin key.
async function otherKey(name) {
  const res = await fetch(`${daemon.baseUrl}/admin/keys`, {
    method: "POST",
    headers: { Authorization: `Bearer ${daemon.apiKey}`, "Content-Type": "application/json" },
    body: JSON.stringify({ name, scopes: ["exec"] }),
  });
  assert.equal(res.status, 201);
  return (await res.json()).key;
}

test("snapshot: a disk's files kept by name, sessions started from them, refusals, delete", async () => {
  if ((process.env.DRIVER ?? "jail") !== "jail") return;
  const is = (status) => (e) => e instanceof SandboxError && e.status === status;
  const src = await sandbox.createSession({ template: "base", storage: "disk" });
  const made = [];
  try {
    const bytes = new Uint8Array(256 * 400);
    for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 7) % 256;
    await src.writeFile("kept.bin", bytes);
    const snap = await src.snapshot("sdk-ts-snap");
    assert.deepEqual(
      [snap.name, snap.template, snap.driver, snap.session, snap.processesKept],
      ["sdk-ts-snap", "base", "jail", src.id, false],
    );
    assert.ok(Number.isInteger(snap.sizeBytes) && snap.sizeBytes > 0, JSON.stringify(snap));
    // Without ttlSeconds it lasts the server's SANDBOX_SNAPSHOT_TTL (a week by default).
    const lasts = (x) => (Date.parse(x.expiresAt) - Date.parse(x.createdAt)) / 1000;
    assert.ok(Math.abs(lasts(snap) - 604800) <= 5, JSON.stringify(snap));
    const fields = (x) => [x.name, x.session, x.sizeBytes, x.createdAt, x.expiresAt];
    assert.deepEqual(fields(await sandbox.snapshot("sdk-ts-snap")), fields(snap));
    const listed = (await sandbox.snapshots()).find((x) => x.name === "sdk-ts-snap");
    assert.deepEqual(fields(listed), fields(snap));
    const short = await src.snapshot("sdk-ts-short", { ttlSeconds: 60 });
    assert.ok(Math.abs(lasts(short) - 60) <= 5, JSON.stringify(short));
    await sandbox.deleteSnapshot("sdk-ts-short");
    // The source runs on; what it writes now is not in the snapshot.
    await src.writeFile("after.txt", "later");

    const from = await sandbox.createSession({ snapshot: "sdk-ts-snap" });
    made.push(from);
    const info = await from.info();
    assert.deepEqual([info.state, info.template, info.snapshot], ["ready", "base", "sdk-ts-snap"]);
    assert.deepEqual(await from.readBytes("kept.bin"), bytes);
    assert.equal(await from.exists("after.txt"), false);
    // Each session has its own copy: the source and a second session do not see the first's writes.
    await from.writeFile("kept.bin", "changed");
    await from.writeFile("mine.txt", "mine");
    assert.deepEqual(await src.readBytes("kept.bin"), bytes);
    assert.equal(await src.exists("mine.txt"), false);
    const second = await sandbox.createSession({ snapshot: "sdk-ts-snap" });
    made.push(second);
    assert.deepEqual(await second.readBytes("kept.bin"), bytes);
    assert.equal(await second.exists("mine.txt"), false);

    // Refusals.
    for (const bad of ["", "-dash-first", "a/b", "sp ace", "x".repeat(64)])
      await assert.rejects(src.snapshot(bad), is(400), bad);
    for (const ttlSeconds of [0, -1, 604801])
      await assert.rejects(src.snapshot("sdk-ts-ttl", { ttlSeconds }), is(400), String(ttlSeconds));
    await assert.rejects(src.snapshot("sdk-ts-snap"), is(409));
    await assert.rejects(sandbox.session("no-such-session").snapshot("sdk-ts-x"), is(404));
    await assert.rejects(sandbox.snapshot("no-such-snap"), is(404));
    await assert.rejects(sandbox.createSession({ snapshot: "no-such-snap" }), is(404));
    for (const extra of [
      { template: "base" },
      { resources: { memoryBytes: 256 << 20 } },
      { resources: { diskBytes: 64 << 20 } },
      { storage: "disk" },
      { volumes: [{ name: "v", path: "/data" }] },
    ])
      await assert.rejects(
        sandbox.createSession({ snapshot: "sdk-ts-snap", ...extra }),
        is(400),
        JSON.stringify(extra),
      );
    await src.pause();
    await assert.rejects(src.snapshot("sdk-ts-paused"), is(409));
    await src.resume();
    // In a jail the disk is what is kept: a session without one cannot be snapshotted.
    const tmpfs = await sandbox.createSession({ template: "base", storage: "tmpfs" });
    made.push(tmpfs);
    await assert.rejects(tmpfs.snapshot("sdk-ts-tmpfs"), (e) => is(501)(e) && /disk/.test(e.message));

    // Another key neither sees nor uses nor deletes it.
    const other = new Sandbox({ baseUrl: daemon.baseUrl, apiKey: await otherKey("sdk-ts-snap-other") });
    assert.equal((await other.snapshots()).some((x) => x.name === "sdk-ts-snap"), false);
    await assert.rejects(other.snapshot("sdk-ts-snap"), is(404));
    await assert.rejects(other.createSession({ snapshot: "sdk-ts-snap" }), is(404));
    await assert.rejects(other.deleteSnapshot("sdk-ts-snap"), is(404));
    assert.equal((await sandbox.snapshot("sdk-ts-snap")).name, "sdk-ts-snap");

    await sandbox.deleteSnapshot("sdk-ts-snap");
    assert.equal((await from.readFile("mine.txt")).content, "mine"); // it goes on
    await assert.rejects(sandbox.snapshot("sdk-ts-snap"), is(404));
    await assert.rejects(sandbox.deleteSnapshot("sdk-ts-snap"), is(404));
    assert.equal((await sandbox.snapshots()).some((x) => x.name === "sdk-ts-snap"), false);
    await assert.rejects(sandbox.createSession({ snapshot: "sdk-ts-snap" }), is(404));
  } finally {
    for (const s of [...made, src]) await s.destroy();
    for (const name of ["sdk-ts-snap", "sdk-ts-short"]) await sandbox.deleteSnapshot(name).catch(() => undefined);
  }
});

test("onTimeout pause: an idle session is paused, not destroyed", async () => {
  const s = await sandbox.createSession({ template: "base", idleTimeout: 1, onTimeout: "pause" });
  try {
    await s.writeFile("kept.txt", "kept");
    let info;
    for (let i = 0; i < 300; i++) {
      info = await s.info();
      if (info?.state !== "ready") break;
      await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(info.state, "paused");
    assert.equal(info.pausedBy, "timeout");
    assert.equal(info.onTimeout, "pause");
    await s.resume();
    assert.equal((await s.readFile("kept.txt")).content, "kept");
  } finally {
    await s.destroy();
  }
  await assert.rejects(
    sandbox.createSession({ template: "base", onTimeout: "never" }),
    (e) => e instanceof SandboxError && e.status === 400,
  );
});

test("pause({ mode: 'hibernate' }): processes ended, files kept, state says so", async () => {
  const s = await sandbox.createSession({ template: "base", storage: "disk" });
  try {
    await s.writeFile("kept.txt", "kept");
    await s.startProcess("sleep", { args: ["600"], tag: "sl" });
    const h = await s.pause({ mode: "hibernate" });
    assert.equal(h.state, "paused");
    assert.equal(h.pauseMode, "hibernate");
    assert.equal(h.processesKept, false);
    assert.match(h.note, /every process of the session was ended/);
    assert.equal((await s.info()).pauseMode, "hibernate");
    assert.equal((await s.resume()).state, "ready");
    assert.equal((await s.readFile("kept.txt")).content, "kept");
    assert.equal((await s.processes()).filter((p) => p.state === "running").length, 0);
    await assert.rejects(s.pause({ mode: "deep" }), (e) => e instanceof SandboxError && e.status === 400);
  } finally {
    await s.destroy();
  }
});
