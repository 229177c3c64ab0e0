// The wire shapes of the E2B-compatible API over raw HTTP: what the Python SDK (which cannot
// be installed here) requires beyond the JS one, and attacks on both planes.
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import zlib from "node:zlib";

const BASE = process.env.E2B_TEST_URL;
const KEY_A = process.env.E2B_API_KEY;
const KEY_B = process.env.E2B_TEST_KEY_B;
const DOMAIN = process.env.E2B_TEST_PUBLIC_DOMAIN;

const made = [];
async function createRaw(key = KEY_A, body = { templateID: "base", timeout: 120 }) {
  const r = await fetch(`${BASE}/v2/sandboxes`, {
    method: "POST",
    headers: { "X-API-KEY": key, "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  const j = await r.json();
  if (r.status === 201) made.push([j.sandboxID, key]);
  return { status: r.status, body: j };
}
after(async () => {
  for (const [id, key] of made)
    await fetch(`${BASE}/sandboxes/${id}`, { method: "DELETE", headers: { "X-API-KEY": key } });
});

function isE2bError(j, status) {
  return typeof j === "object" && j.code === status && typeof j.message === "string";
}

// One Connect envelope: flags, big-endian length, bytes.
function envelope(obj, flags = 0, lie = 0) {
  const b = Buffer.from(typeof obj === "string" ? obj : JSON.stringify(obj));
  const h = Buffer.alloc(5);
  h[0] = flags;
  h.writeUInt32BE(b.length + lie, 1);
  return Buffer.concat([h, b]);
}

// The envelopes of a stream's reply: [{flags, json}].
function envelopes(buf) {
  const out = [];
  for (let i = 0; i + 5 <= buf.length; ) {
    const n = buf.readUInt32BE(i + 1);
    out.push({ flags: buf[i], json: JSON.parse(buf.subarray(i + 5, i + 5 + n).toString()) });
    i += 5 + n;
  }
  return out;
}

function dataHeaders(sbx, extra = {}) {
  return {
    "E2b-Sandbox-Id": sbx.sandboxID,
    "E2b-Sandbox-Port": "49983",
    "X-Access-Token": sbx.envdAccessToken,
    ...extra,
  };
}

async function stream(sbx, method, msg, headers = {}) {
  const r = await fetch(`${BASE}/process.Process/${method}`, {
    method: "POST",
    headers: dataHeaders(sbx, { "Content-Type": "application/connect+json", ...headers }),
    body: Buffer.isBuffer(msg) ? msg : envelope(msg),
  });
  return { r, env: envelopes(Buffer.from(await r.arrayBuffer())) };
}

describe("control plane", () => {
  let sbx;
  before(async () => {
    const c = await createRaw(KEY_A, { templateID: "base", timeout: 120, metadata: { w: "1" } });
    assert.equal(c.status, 201, JSON.stringify(c.body));
    sbx = c.body;
  });

  test("create is 201 with every field the Python client requires", () => {
    for (const k of ["templateID", "sandboxID", "clientID", "envdVersion", "envdAccessToken"])
      assert.equal(typeof sbx[k], "string", k);
    assert.match(sbx.envdVersion, /^\d+\.\d+\.\d+$/);
    assert.equal(sbx.domain, "localhost");
  });

  test("get and list have the ten required fields", async () => {
    const one = await (await fetch(`${BASE}/sandboxes/${sbx.sandboxID}`, { headers: { "X-API-KEY": KEY_A } })).json();
    const list = await (await fetch(`${BASE}/v2/sandboxes?metadata=w%3D1`, { headers: { "X-API-KEY": KEY_A } })).json();
    const v1 = await (await fetch(`${BASE}/sandboxes`, { headers: { "X-API-KEY": KEY_A } })).json();
    const listed = list.find((s) => s.sandboxID === sbx.sandboxID);
    assert.ok(listed && v1.some((s) => s.sandboxID === sbx.sandboxID));
    for (const o of [one, listed]) {
      for (const k of ["templateID", "sandboxID", "clientID", "startedAt", "endAt", "state", "envdVersion"])
        assert.equal(typeof o[k], "string", k);
      for (const k of ["cpuCount", "memoryMB", "diskSizeMB"]) assert.equal(typeof o[k], "number", k);
      assert.ok(!Number.isNaN(Date.parse(o.endAt)));
    }
  });

  test("every error is {code: int, message: str}, the auth layer's too", async () => {
    const cases = [
      [fetch(`${BASE}/v2/sandboxes`), 401],
      [fetch(`${BASE}/v2/sandboxes`, { headers: { "X-API-KEY": "e2b_" + "0".repeat(32) } }), 401],
      [fetch(`${BASE}/sandboxes/nosuchsandbox0000000`, { headers: { "X-API-KEY": KEY_A } }), 404],
      [fetch(`${BASE}/sandboxes/${sbx.sandboxID}`, { headers: { "X-API-KEY": KEY_B } }), 404],
      [fetch(`${BASE}/sandboxes/${sbx.sandboxID}/timeout`, { method: "POST", headers: { "X-API-KEY": KEY_B }, body: '{"timeout":5}' }), 404],
      [fetch(`${BASE}/sandboxes/${sbx.sandboxID}`, { method: "DELETE", headers: { "X-API-KEY": KEY_B } }), 404],
      [fetch(`${BASE}/sandboxes/${sbx.sandboxID}/snapshots`, { method: "POST", headers: { "X-API-KEY": KEY_A }, body: "{}" }), 501],
      [fetch(`${BASE}/v2/sandboxes`, { method: "POST", headers: { "X-API-KEY": KEY_A }, body: '{"templateID":"nope"}' }), 400],
      [fetch(`${BASE}/v2/sandboxes`, { method: "POST", headers: { "X-API-KEY": KEY_A }, body: "[1," }), 400],
      [fetch(`${BASE}/v2/sandboxes`, { method: "POST", headers: { "X-API-KEY": KEY_A }, body: '{"metadata":{"a":1}}' }), 400],
      [fetch(`${BASE}/v2/sandboxes?limit=0`, { headers: { "X-API-KEY": KEY_A } }), 400],
      [fetch(`${BASE}/v2/sandboxes`, { method: "POST", headers: { "X-API-KEY": KEY_A }, body: '{"templateID":"base","autoPause":"yes"}' }), 400],
      [fetch(`${BASE}/v2/sandboxes`, { method: "POST", headers: { "X-API-KEY": KEY_A }, body: '{"templateID":"base","autoResume":{"enabled":true}}' }), 400],
      [fetch(`${BASE}/v2/sandboxes`, { method: "POST", headers: { "X-API-KEY": KEY_A }, body: '{"templateID":"base","autoPause":true,"autoPauseMemory":false,"autoResume":{"enabled":true}}' }), 400],
      [fetch(`${BASE}/v2/sandboxes`, { method: "POST", headers: { "X-API-KEY": KEY_A }, body: '{"templateID":"base","autoPause":true,"autoResume":{"enabled":3}}' }), 400],
      [fetch(`${BASE}/sandboxes/${sbx.sandboxID}/metrics?start=abc`, { headers: { "X-API-KEY": KEY_A } }), 400],
      [fetch(`${BASE}/sandboxes/${sbx.sandboxID}/metrics?start=-5`, { headers: { "X-API-KEY": KEY_A } }), 400],
      [fetch(`${BASE}/sandboxes/${sbx.sandboxID}/metrics?start=200&end=100`, { headers: { "X-API-KEY": KEY_A } }), 400],
      [fetch(`${BASE}/sandboxes/${sbx.sandboxID}/metrics`, { headers: { "X-API-KEY": KEY_B } }), 404],
      [fetch(`${BASE}/v2/sandboxes?nextToken=x`, { headers: { "X-API-KEY": KEY_A } }), 400],
    ];
    for (const [p, status] of cases) {
      const r = await p;
      assert.equal(r.status, status, r.url);
      assert.match(r.headers.get("content-type"), /^application\/json/);
      assert.ok(isE2bError(await r.json(), status), r.url);
    }
  });

  test("the other key's attempts changed nothing", async () => {
    const r = await fetch(`${BASE}/sandboxes/${sbx.sandboxID}`, { headers: { "X-API-KEY": KEY_A } });
    assert.equal(r.status, 200);
  });

  test("timeout is 204 and sets the deadline; connect never shortens it", async () => {
    let r = await fetch(`${BASE}/sandboxes/${sbx.sandboxID}/timeout`, { method: "POST", headers: { "X-API-KEY": KEY_A }, body: '{"timeout":900}' });
    assert.equal(r.status, 204);
    r = await fetch(`${BASE}/sandboxes/${sbx.sandboxID}/connect`, { method: "POST", headers: { "X-API-KEY": KEY_A }, body: '{"timeout":10}' });
    assert.equal(r.status, 200);
    const one = await (await fetch(`${BASE}/sandboxes/${sbx.sandboxID}`, { headers: { "X-API-KEY": KEY_A } })).json();
    assert.ok(Date.parse(one.endAt) - Date.now() > 800_000);
  });

  test("a sandbox whose timeout passes is gone", async () => {
    const c = await createRaw(KEY_A, { templateID: "base", timeout: 1 });
    assert.equal(c.status, 201);
    let status = 200;
    for (let i = 0; i < 100 && status === 200; i++) {
      await new Promise((r) => setTimeout(r, 100));
      status = (await fetch(`${BASE}/sandboxes/${c.body.sandboxID}`, { headers: { "X-API-KEY": KEY_A } })).status;
    }
    assert.equal(status, 404);
  });
});

describe("data plane", () => {
  let sbx, other;
  before(async () => {
    sbx = (await createRaw()).body;
    other = (await createRaw(KEY_B)).body;
  });

  test("/health: envd's with the sandbox header, the server's without", async () => {
    let r = await fetch(`${BASE}/health`, { headers: { "E2b-Sandbox-Id": sbx.sandboxID } });
    assert.equal(r.status, 204);
    r = await fetch(`${BASE}/health`, { headers: { "E2b-Sandbox-Id": "nosuchsandbox0000000" } });
    assert.equal(r.status, 502);
    assert.ok(isE2bError(await r.json(), 502));
    r = await fetch(`${BASE}/health`);
    assert.equal(r.status, 200);
  });

  test("a stream: exact content type, start first, end, end of stream", async () => {
    const { r, env } = await stream(sbx, "Start", { process: { cmd: "/bin/sh", args: ["-c", "echo hi"] }, stdin: false });
    assert.equal(r.status, 200);
    assert.equal(r.headers.get("content-type"), "application/connect+json");
    assert.ok(env[0].json.event.start.pid > 0);
    const data = env.filter((e) => e.json.event?.data).map((e) => Buffer.from(e.json.event.data.stdout, "base64").toString()).join("");
    assert.equal(data, "hi\n");
    const end = env.find((e) => e.json.event?.end);
    assert.equal(end.json.event.end.status, "exit status 0");
    assert.equal(env.at(-1).flags, 2);
    assert.deepEqual(env.at(-1).json, {});
  });

  test("a chunked request body is accepted", async () => {
    const body = envelope({ process: { cmd: "/bin/sh", args: ["-c", "echo chunked"] }, stdin: false });
    const r = await fetch(`${BASE}/process.Process/Start`, {
      method: "POST",
      headers: dataHeaders(sbx, { "Content-Type": "application/connect+json" }),
      body: new ReadableStream({
        start(c) {
          c.enqueue(body.subarray(0, 3));
          c.enqueue(body.subarray(3));
          c.close();
        },
      }),
      duplex: "half",
    });
    const env = envelopes(Buffer.from(await r.arrayBuffer()));
    assert.ok(env.some((e) => e.json.event?.data && Buffer.from(e.json.event.data.stdout, "base64").toString() === "chunked\n"));
  });

  test("unary: exact content type, not_found in Connect's shape", async () => {
    const r = await fetch(`${BASE}/filesystem.Filesystem/Stat`, {
      method: "POST",
      headers: dataHeaders(sbx, { "Content-Type": "application/json" }),
      body: JSON.stringify({ path: "/home/user/none" }),
    });
    assert.equal(r.status, 404);
    assert.equal(r.headers.get("content-type"), "application/json");
    const j = await r.json();
    assert.equal(j.code, "not_found");
    const ok = await fetch(`${BASE}/process.Process/List`, {
      method: "POST",
      headers: dataHeaders(sbx, { "Content-Type": "application/json" }),
      body: "{}",
    });
    assert.equal(ok.status, 200);
    assert.equal(ok.headers.get("content-type"), "application/json");
  });

  test("a missing or wrong X-Access-Token is refused in each route's shape", async () => {
    for (const tok of [undefined, "ea_" + "0".repeat(40), other.envdAccessToken]) {
      const h = { "E2b-Sandbox-Id": sbx.sandboxID };
      if (tok) h["X-Access-Token"] = tok;
      let r = await fetch(`${BASE}/process.Process/List`, { method: "POST", headers: { ...h, "Content-Type": "application/json" }, body: "{}" });
      assert.equal(r.status, 401);
      assert.equal((await r.json()).code, "unauthenticated");
      r = await fetch(`${BASE}/process.Process/Start`, { method: "POST", headers: { ...h, "Content-Type": "application/connect+json" }, body: envelope({ process: { cmd: "/bin/true" } }) });
      assert.equal(r.status, 200);
      const env = envelopes(Buffer.from(await r.arrayBuffer()));
      assert.equal(env.length, 1);
      assert.equal(env[0].flags, 2);
      assert.equal(env[0].json.error.code, "unauthenticated");
      r = await fetch(`${BASE}/files?path=x`, { headers: h });
      assert.equal(r.status, 401);
      assert.ok(isE2bError(await r.json(), 401));
      r = await fetch(`${BASE}/files?path=x`, { method: "POST", headers: { ...h, "Content-Type": "application/octet-stream" }, body: "x" });
      assert.equal(r.status, 401);
    }
  });

  test("an API key is no way in, nor the traffic token", async () => {
    for (const h of [{ "X-API-KEY": KEY_A }, { "X-Access-Token": sbx.trafficAccessToken }]) {
      const r = await fetch(`${BASE}/process.Process/List`, { method: "POST", headers: { "E2b-Sandbox-Id": sbx.sandboxID, "Content-Type": "application/json", ...h }, body: "{}" });
      assert.equal(r.status, 401);
    }
  });

  test("a sandbox that does not exist is 502 on every route kind", async () => {
    const h = { "E2b-Sandbox-Id": "nosuchsandbox0000000", "X-Access-Token": sbx.envdAccessToken };
    for (const [path, ct, body] of [
      ["/process.Process/List", "application/json", "{}"],
      ["/process.Process/Start", "application/connect+json", envelope({})],
      ["/files?path=a", null, null],
    ]) {
      const r = await fetch(`${BASE}${path}`, { method: body ? "POST" : "GET", headers: ct ? { ...h, "Content-Type": ct } : h, body });
      assert.equal(r.status, 502, path);
      assert.ok(isE2bError(await r.json(), 502));
    }
  });

  test("binary Connect content types are 415", async () => {
    for (const [m, ct] of [["List", "application/proto"], ["Start", "application/connect+proto"], ["List", "text/plain"]]) {
      const r = await fetch(`${BASE}/process.Process/${m}`, { method: "POST", headers: dataHeaders(sbx, { "Content-Type": ct }), body: "\x00" });
      assert.equal(r.status, 415, ct);
    }
  });

  test("malformed envelopes end the stream with invalid_argument", async () => {
    const good = { process: { cmd: "/bin/true" } };
    for (const body of [
      Buffer.from([0, 0]),
      envelope(good, 0, 7),
      envelope(good, 0, -3),
      envelope(good, 1),
      envelope(good, 2),
      Buffer.concat([envelope(good), envelope(good)]),
      envelope("[1,2]"),
      envelope("{not json"),
      envelope({ process: { cmd: 5 } }),
      envelope({ process: { cmd: "/bin/true", args: [1] } }),
    ]) {
      const { r, env } = await stream(sbx, "Start", body);
      assert.equal(r.status, 200);
      assert.equal(env.length, 1, body.toString("hex"));
      assert.equal(env[0].flags, 2);
      assert.equal(env[0].json.error.code, "invalid_argument");
    }
  });

  test("an oversize message is refused, and the sandbox still answers", async () => {
    const big = JSON.stringify({ process: { pid: 1 }, input: { stdin: "A".repeat(2 * 1024 * 1024) } });
    const r = await fetch(`${BASE}/process.Process/SendInput`, { method: "POST", headers: dataHeaders(sbx, { "Content-Type": "application/json" }), body: big }).catch((e) => e);
    if (!(r instanceof Error)) {
      assert.equal(r.status, 429);
      assert.equal((await r.json()).code, "resource_exhausted");
    }
    const ok = await fetch(`${BASE}/process.Process/List`, { method: "POST", headers: dataHeaders(sbx, { "Content-Type": "application/json" }), body: "{}" });
    assert.equal(ok.status, 200);
  });

  test("a message of too many values is refused before it is parsed", async () => {
    // 20,000 values (SANDBOX_MAX_JSON_ELEMENTS is 10,000): refused by the pre-scan, on the
    // data plane as on every other route.
    const many = JSON.stringify({ process: { cmd: "true", args: Array(20000).fill(0) } });
    let r = await fetch(`${BASE}/process.Process/List`, { method: "POST", headers: dataHeaders(sbx, { "Content-Type": "application/json" }), body: many });
    assert.equal(r.status, 429);
    const j = await r.json();
    assert.equal(j.code, "resource_exhausted");
    assert.match(j.message, /SANDBOX_MAX_JSON_ELEMENTS/);
    r = await fetch(`${BASE}/execute`, { method: "POST", headers: { ...dataHeaders(sbx, { "Content-Type": "application/json" }), "E2b-Sandbox-Port": "49999" }, body: many });
    assert.equal(r.status, 413);
    assert.match((await r.json()).message, /SANDBOX_MAX_JSON_ELEMENTS/);
  });

  test("multipart bodies that lie are 400, and write nothing", async () => {
    const h = dataHeaders(sbx, { "Content-Type": "multipart/form-data; boundary=XyZ" });
    const part = (name, file, data) =>
      `--XyZ\r\nContent-Disposition: form-data; name="${name}"; filename="${file}"\r\n\r\n${data}\r\n`;
    for (const [what, body] of [
      ["no closing delimiter", part("file", "/home/user/lie1", "a")],
      ["another boundary", "--Other\r\n" + 'Content-Disposition: form-data; name="file"; filename="lie2"\r\n\r\nx\r\n--Other--\r\n'],
      ["no disposition", "--XyZ\r\nContent-Type: text/plain\r\n\r\nx\r\n--XyZ--\r\n"],
      ["headers without end", "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"lie3\"\r\n" + "X-Pad: y\r\n".repeat(2000)],
      ["the same path twice", part("file", "/home/user/twice", "a") + part("file", "/home/user/twice", "b") + "--XyZ--\r\n"],
      ["no file part", part("other", "x", "a") + "--XyZ--\r\n"],
      ["a delimiter not followed by a line end", "--XyZjunk"],
    ]) {
      const r = await fetch(`${BASE}/files`, { method: "POST", headers: h, body });
      assert.equal(r.status, 400, what);
      assert.ok(isE2bError(await r.json(), 400), what);
    }
    for (const p of ["lie1", "lie2", "lie3"]) {
      const r = await fetch(`${BASE}/files?path=/home/user/${p}`, { headers: dataHeaders(sbx) });
      assert.equal(r.status, 404, p);
    }
    const bad = await fetch(`${BASE}/files`, { method: "POST", headers: dataHeaders(sbx, { "Content-Type": "multipart/form-data" }), body: "x" });
    assert.equal(bad.status, 400);
  });

  test("multipart with escaped filenames and fields around the file", async () => {
    const body =
      '--b0\r\nContent-Disposition: form-data; name="note"\r\n\r\nignored\r\n' +
      '--b0\r\nContent-Disposition: form-data; name="file"; filename="/home/user/q%22uote.txt"\r\nContent-Type: application/octet-stream\r\n\r\nQ\r\n--b0--\r\nepilogue';
    const r = await fetch(`${BASE}/files`, { method: "POST", headers: dataHeaders(sbx, { "Content-Type": 'multipart/form-data; boundary="b0"' }), body });
    assert.equal(r.status, 200);
    const j = await r.json();
    assert.deepEqual(j, [{ name: 'q"uote.txt', type: "file", path: '/home/user/q"uote.txt' }]);
    const back = await fetch(`${BASE}/files?path=${encodeURIComponent('/home/user/q"uote.txt')}`, { headers: dataHeaders(sbx) });
    assert.equal(await back.text(), "Q");
  });

  test("files anywhere the user may reach, with the user's permissions", async () => {
    const r = await fetch(`${BASE}/files?path=/etc/passwd`, { headers: dataHeaders(sbx) });
    assert.equal(r.status, 200);
    assert.match(await r.text(), /^root:/);
    // ".." is resolved as the sandbox resolves it: this is /etc/x, which `user` may not write.
    const w = await fetch(`${BASE}/files?path=/home/user/../../etc/x`, { method: "POST", headers: dataHeaders(sbx, { "Content-Type": "application/octet-stream" }), body: "x" });
    assert.equal(w.status, 403, await w.text());
    const t = await fetch(`${BASE}/files?path=/tmp/wire-x`, { method: "POST", headers: dataHeaders(sbx, { "Content-Type": "application/octet-stream" }), body: "x" });
    assert.equal(t.status, 200, await t.text());
    assert.equal((await run(sbx, "test \"$(cat /tmp/wire-x)\" = x")).exitCode, 0, "a command sees it");
  });

  test("the sandbox agent's own /proc entries are not served", async () => {
    for (const path of ["/proc/self/environ", "/proc/1/environ", "/proc/self/maps", "/proc/thread-self/environ"]) {
      const r = await fetch(`${BASE}/files?path=${path}`, { headers: dataHeaders(sbx) });
      assert.ok(r.status === 403 || r.status === 404, `${path}: ${r.status}`);
      const body = await r.text();
      assert.ok(!body.includes("SANDBOX") && !body.includes("PATH="), `${path}: ${body.slice(0, 80)}`);
    }
    // Through a symlink the sandbox made, too.
    await run(sbx, "ln -sf /proc/self/environ /tmp/agent-env");
    const r = await fetch(`${BASE}/files?path=/tmp/agent-env`, { headers: dataHeaders(sbx) });
    assert.equal(r.status, 403);
  });

  test("the preview Host form reaches envd", { skip: !DOMAIN && "no SANDBOX_PUBLIC_DOMAIN" }, async () => {
    const u = new URL(BASE);
    const status = (host, token) =>
      new Promise((resolve, reject) => {
        const req = http.request(
          { host: u.hostname, port: u.port, path: "/process.Process/List", method: "POST", headers: { Host: host, "Content-Type": "application/json", ...(token ? { "X-Access-Token": token } : {}) } },
          (res) => {
            res.resume();
            res.on("end", () => resolve(res.statusCode));
          },
        );
        req.on("error", reject);
        req.end("{}");
      });
    assert.equal(await status(`49983-${sbx.sandboxID}.${DOMAIN}`, sbx.envdAccessToken), 200);
    assert.equal(await status(`49983-${sbx.sandboxID}.${DOMAIN}`, other.envdAccessToken), 401);
    assert.equal(await status(`49983-nosuchsandbox0000000.${DOMAIN}`, sbx.envdAccessToken), 502);
  });

  test("getHost(port): another port of the preview Host form is the app's, with the traffic token", { skip: !DOMAIN && "no SANDBOX_PUBLIC_DOMAIN" }, async () => {
    const py = (await createRaw(KEY_A, { templateID: "python", timeout: 120 })).body;
    const reader = await startProcess(py, "echo served > index.html; python3 -m http.server 8000");
    await reader.read(); // the start event: the server is starting
    const get = (headers) => previewGet(py, 8000, "/index.html", headers);
    assert.deepEqual(await untilServed(get, { "E2B-Traffic-Access-Token": py.trafficAccessToken }), [200, "served\n"]);
    const denied = await get({ "E2B-Traffic-Access-Token": sbx.trafficAccessToken });
    assert.notEqual(denied[0], 200);
    reader.cancel();
  });

  test("autoResume: a request to a port of the paused sandbox resumes it; a stranger's does not", { skip: !DOMAIN && "no SANDBOX_PUBLIC_DOMAIN" }, async () => {
    const made = await createRaw(KEY_A, { templateID: "python", timeout: 3, autoPause: true, autoResume: { enabled: true } });
    assert.equal(made.status, 201);
    const py = made.body;
    const info = async () => (await fetch(`${BASE}/sandboxes/${py.sandboxID}`, { headers: { "X-API-KEY": KEY_A } })).json();
    assert.deepEqual((await info()).lifecycle, { onTimeout: "pause", autoResume: true });
    (await startProcess(py, "echo awake > index.html; python3 -m http.server 8000")).read();
    const get = (headers) => previewGet(py, 8000, "/index.html", headers);
    const token = { "E2B-Traffic-Access-Token": py.trafficAccessToken };
    assert.deepEqual(await untilServed(get, token), [200, "awake\n"]);
    let state = "";
    for (let i = 0; i < 300 && state !== "paused"; i++) {
      state = (await info()).state;
      if (state !== "paused") await new Promise((r) => setTimeout(r, 100));
    }
    assert.equal(state, "paused", "its timeout paused it");
    // Another sandbox's token neither reaches it nor wakes it.
    const stranger = await get({ "E2B-Traffic-Access-Token": sbx.trafficAccessToken });
    assert.notEqual(stranger[0], 200);
    await new Promise((r) => setTimeout(r, 300));
    assert.equal((await info()).state, "paused", "a stranger's request did not wake it");
    // Its own traffic does: the request waits for the resume and is served.
    assert.deepEqual(await get(token), [200, "awake\n"]);
    const after = await info();
    assert.equal(after.state, "running");
    assert.ok(Date.parse(after.endAt) > Date.now(), "its deadline runs again from the resume");
  });
});

// A sh command started in the sandbox through the data plane; its stream's reader.
async function startProcess(sbx, cmd) {
  const start = await fetch(`${BASE}/process.Process/Start`, {
    method: "POST",
    headers: dataHeaders(sbx, { "Content-Type": "application/connect+json" }),
    body: envelope({ process: { cmd: "/bin/sh", args: ["-c", cmd] }, stdin: false }),
  });
  return start.body.getReader();
}

// GET of path on the sandbox's port through the preview's Host form: [status, body].
function previewGet(sbx, port, path, headers) {
  const u = new URL(BASE);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path, headers: { Host: `${port}-${sbx.sandboxID}.${DOMAIN}`, ...headers } }, (res) => {
      let b = "";
      res.on("data", (d) => (b += d));
      res.on("end", () => resolve([res.statusCode, b]));
    });
    req.on("error", reject);
    req.end();
  });
}

// get(headers) again until it answers 200 (a server starting), bounded: its last answer.
async function untilServed(get, headers) {
  let got = [0, ""];
  for (let i = 0; i < 100 && got[0] !== 200; i++) {
    got = await get(headers);
    if (got[0] !== 200) await new Promise((r) => setTimeout(r, 100));
  }
  return got;
}

// A unary call of the data plane: {status, json}.
async function unary(sbx, service, method, msg) {
  const r = await fetch(`${BASE}/${service}/${method}`, {
    method: "POST",
    headers: dataHeaders(sbx, { "Content-Type": "application/json" }),
    body: JSON.stringify(msg),
  });
  return { status: r.status, json: await r.json() };
}
const fsCall = (sbx, method, msg) => unary(sbx, "filesystem.Filesystem", method, msg);
async function run(sbx, cmd) {
  const { env } = await stream(sbx, "Start", { process: { cmd: "/bin/sh", args: ["-c", cmd] }, stdin: false });
  return env.find((e) => e.json.event?.end)?.json.event.end;
}
async function until(cond, what, tries = 100) {
  for (let i = 0; i < tries; i++) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}`);
}

describe("watchers (CreateWatcher, GetWatcherEvents, RemoveWatcher)", () => {
  let sbx, other;
  before(async () => {
    sbx = (await createRaw()).body;
    other = (await createRaw(KEY_B)).body;
    assert.equal((await run(sbx, "mkdir -p wd/sub")).exitCode ?? 0, 0);
  });

  test("events are kept until polled, relative to the watched directory", async () => {
    const c = await fsCall(sbx, "CreateWatcher", { path: "/home/user/wd", recursive: true });
    assert.equal(c.status, 200, JSON.stringify(c.json));
    assert.match(c.json.watcherId, /^[0-9a-f]{24}$/);
    const id = c.json.watcherId;
    await run(sbx, "echo a > wd/a.txt; echo b > wd/sub/b.txt; rm wd/a.txt");
    const seen = [];
    await until(async () => {
      const g = await fsCall(sbx, "GetWatcherEvents", { watcherId: id });
      assert.equal(g.status, 200);
      seen.push(...(g.json.events ?? []));
      return seen.some((e) => e.name === "sub/b.txt") && seen.some((e) => e.type === "EVENT_TYPE_REMOVE");
    }, "the events");
    assert.ok(seen.some((e) => e.name === "a.txt" && e.type === "EVENT_TYPE_CREATE"));
    // Polled: the queue is empty now (snake_case works as well).
    const g = await fsCall(sbx, "GetWatcherEvents", { watcher_id: id });
    assert.deepEqual(g.json.events ?? [], []);
    assert.deepEqual((await fsCall(sbx, "RemoveWatcher", { watcherId: id })).json, {});
    const gone = await fsCall(sbx, "GetWatcherEvents", { watcherId: id });
    assert.equal(gone.status, 404);
    assert.equal(gone.json.code, "not_found");
    assert.equal((await fsCall(sbx, "RemoveWatcher", { watcherId: id })).json.code, "not_found");
  });

  test("bad requests: a missing directory, a file, no id, another sandbox's watcher", async () => {
    let r = await fsCall(sbx, "CreateWatcher", { path: "/home/user/nowhere" });
    assert.equal(r.json.code, "not_found");
    await run(sbx, "echo x > afile");
    r = await fsCall(sbx, "CreateWatcher", { path: "afile" });
    assert.ok(["invalid_argument", "failed_precondition"].includes(r.json.code), JSON.stringify(r.json));
    r = await fsCall(sbx, "CreateWatcher", { path: "/root" });
    assert.equal(r.json.code, "permission_denied", JSON.stringify(r.json));
    r = await fsCall(sbx, "GetWatcherEvents", {});
    assert.equal(r.json.code, "invalid_argument");
    const mine = await fsCall(sbx, "CreateWatcher", { path: "wd" });
    r = await fsCall(other, "GetWatcherEvents", { watcherId: mine.json.watcherId });
    assert.equal(r.json.code, "not_found", "another sandbox does not see it");
    r = await fsCall(other, "RemoveWatcher", { watcherId: mine.json.watcherId });
    assert.equal(r.json.code, "not_found");
    assert.equal((await fsCall(sbx, "GetWatcherEvents", { watcherId: mine.json.watcherId })).status, 200);
    await fsCall(sbx, "RemoveWatcher", { watcherId: mine.json.watcherId });
  });

  test("a queue that overflows says so once (data_loss), then works again", async () => {
    const c = await fsCall(sbx, "CreateWatcher", { path: "wd" });
    const id = c.json.watcherId;
    await run(sbx, "i=0; while [ $i -lt 1500 ]; do : > wd/f$i; i=$((i+1)); done");
    let lost;
    await until(async () => {
      lost = await fsCall(sbx, "GetWatcherEvents", { watcherId: id });
      return lost.status !== 200;
    }, "the overflow");
    assert.equal(lost.json.code, "data_loss");
    assert.match(lost.json.message, /lost/);
    await run(sbx, "echo z > wd/after");
    await until(async () => {
      const g = await fsCall(sbx, "GetWatcherEvents", { watcherId: id });
      return g.status === 200 && (g.json.events ?? []).some((e) => e.name === "after");
    }, "events after the overflow");
    await fsCall(sbx, "RemoveWatcher", { watcherId: id });
  });

  test("a watcher whose directory is removed says so, then is gone", async () => {
    await run(sbx, "mkdir -p gone1");
    const id = (await fsCall(sbx, "CreateWatcher", { path: "gone1" })).json.watcherId;
    await run(sbx, "rm -r gone1");
    let r;
    await until(async () => {
      r = await fsCall(sbx, "GetWatcherEvents", { watcherId: id });
      return r.status !== 200;
    }, "the end of the watch");
    assert.equal(r.json.code, "not_found");
    assert.match(r.json.message, /removed/);
    assert.match((await fsCall(sbx, "GetWatcherEvents", { watcherId: id })).json.message, /not found/);
  });

  test("a sandbox has a bounded number; a killed sandbox's watchers are freed", async () => {
    const s = (await createRaw()).body;
    await run(s, "mkdir -p lim");
    const ids = [];
    let refused;
    for (let i = 0; i < 80 && !refused; i++) {
      const r = await fsCall(s, "CreateWatcher", { path: "lim" });
      if (r.status === 200) ids.push(r.json.watcherId);
      else refused = r;
    }
    assert.ok(refused, "the 80th is refused");
    assert.equal(refused.json.code, "resource_exhausted", JSON.stringify(refused.json));
    assert.ok(ids.length >= 1 && ids.length <= 64, `${ids.length} watchers`);
    await fetch(`${BASE}/sandboxes/${s.sandboxID}`, { method: "DELETE", headers: { "X-API-KEY": KEY_A } });
    // Their watches (and the key's quota) went with it: another sandbox gets as many.
    const t = (await createRaw()).body;
    await run(t, "mkdir -p lim");
    const more = [];
    for (let i = 0; i < ids.length; i++) {
      const r = await fsCall(t, "CreateWatcher", { path: "lim" });
      assert.equal(r.status, 200, `watcher ${i}: ${JSON.stringify(r.json)}`);
      more.push(r.json.watcherId);
    }
    for (const id of more) await fsCall(t, "RemoveWatcher", { watcherId: id });
  });

  test("a client that leaves during CreateWatcher leaves nothing behind", async () => {
    for (let i = 0; i < 5; i++) {
      const ac = new AbortController();
      const p = fetch(`${BASE}/filesystem.Filesystem/CreateWatcher`, {
        method: "POST",
        headers: dataHeaders(sbx, { "Content-Type": "application/json" }),
        body: JSON.stringify({ path: "wd", recursive: true }),
        signal: ac.signal,
      }).catch(() => {});
      ac.abort();
      await p;
    }
    assert.equal((await fsCall(sbx, "Stat", { path: "wd" })).status, 200);
  });
});

describe("gzip on /files (wire)", () => {
  let sbx;
  before(async () => {
    sbx = (await createRaw()).body;
  });

  test("octet-stream and multipart, compressed, write the file", async () => {
    let r = await fetch(`${BASE}/files?path=/home/user/z1`, {
      method: "POST",
      headers: dataHeaders(sbx, { "Content-Type": "application/octet-stream", "Content-Encoding": "gzip" }),
      body: zlib.gzipSync("one"),
    });
    assert.equal(r.status, 200);
    // Two members one after the other are one body, as gzip writes them.
    r = await fetch(`${BASE}/files?path=/home/user/z2`, {
      method: "POST",
      headers: dataHeaders(sbx, { "Content-Type": "application/octet-stream", "Content-Encoding": "gzip" }),
      body: Buffer.concat([zlib.gzipSync("tw"), zlib.gzipSync("o")]),
    });
    assert.equal(r.status, 200);
    const mp = '--B\r\nContent-Disposition: form-data; name="file"; filename="/home/user/z3"\r\n\r\nthree\r\n--B--\r\n';
    r = await fetch(`${BASE}/files`, {
      method: "POST",
      headers: dataHeaders(sbx, { "Content-Type": "multipart/form-data; boundary=B", "Content-Encoding": "gzip" }),
      body: zlib.gzipSync(mp),
    });
    assert.equal(r.status, 200);
    assert.deepEqual(await r.json(), [{ name: "z3", type: "file", path: "/home/user/z3" }]);
    for (const [p, want] of [["z1", "one"], ["z2", "two"], ["z3", "three"]]) {
      const back = await fetch(`${BASE}/files?path=${p}`, { headers: dataHeaders(sbx) });
      assert.equal(await back.text(), want, p);
    }
  });

  test("a gzip bomb hits the upload limit, with a clear error, and the server lives", async () => {
    // 64 MiB of zeros in 64 KiB: twice SANDBOX_MAX_UPLOAD_BYTES of the test daemon.
    const bomb = zlib.gzipSync(Buffer.alloc(64 << 20), { level: 9 });
    assert.ok(bomb.length < 128 << 10);
    for (const ct of ["application/octet-stream", "multipart/form-data; boundary=B"]) {
      const body = ct.startsWith("multipart")
        ? zlib.gzipSync(Buffer.concat([Buffer.from('--B\r\nContent-Disposition: form-data; name="file"; filename="bomb"\r\n\r\n'), Buffer.alloc(64 << 20)]), { level: 9 })
        : bomb;
      const r = await fetch(`${BASE}/files?path=/home/user/bomb`, {
        method: "POST",
        headers: dataHeaders(sbx, { "Content-Type": ct, "Content-Encoding": "gzip" }),
        body,
      });
      assert.equal(r.status, 413, ct);
      const j = await r.json();
      assert.ok(isE2bError(j, 413) && /inflates|large|limit/i.test(j.message), j.message);
    }
    assert.equal((await fsCall(sbx, "Stat", { path: "/home/user" })).status, 200);
  });

  test("malformed, truncated and unknown encodings are refused", async () => {
    const good = zlib.gzipSync("payload");
    for (const [what, body, enc, status] of [
      ["not gzip", Buffer.from("plain text"), "gzip", 400],
      ["truncated", good.subarray(0, good.length - 6), "gzip", 400],
      ["trailing junk", Buffer.concat([good, Buffer.from("junk")]), "gzip", 400],
      ["empty", Buffer.alloc(0), "gzip", 400],
      ["brotli", good, "br", 415],
    ]) {
      const r = await fetch(`${BASE}/files?path=/home/user/bad-${what.replace(/ /g, "-")}`, {
        method: "POST",
        headers: dataHeaders(sbx, { "Content-Type": "application/octet-stream", "Content-Encoding": enc }),
        body,
      });
      assert.equal(r.status, status, what);
      assert.ok(isE2bError(await r.json(), status), what);
    }
  });

  test("a download with Accept-Encoding: gzip is compressed; an empty file is not", async () => {
    const data = Buffer.alloc(300000, "abc");
    await fetch(`${BASE}/files?path=/home/user/dl`, {
      method: "POST",
      headers: dataHeaders(sbx, { "Content-Type": "application/octet-stream" }),
      body: data,
    });
    await fetch(`${BASE}/files?path=/home/user/dl-empty`, {
      method: "POST",
      headers: dataHeaders(sbx, { "Content-Type": "application/octet-stream" }),
      body: "",
    });
    const get = (path, enc) =>
      new Promise((resolve, reject) => {
        const u = new URL(`${BASE}/files?path=${path}`);
        http.get(u, { headers: dataHeaders(sbx, enc ? { "Accept-Encoding": enc } : {}) }, (res) => {
          const chunks = [];
          res.on("data", (c) => chunks.push(c)).on("end", () => resolve({ res, body: Buffer.concat(chunks) }));
        }).on("error", reject);
      });
    let { res, body } = await get("/home/user/dl", "gzip, deflate");
    assert.equal(res.headers["content-encoding"], "gzip");
    assert.ok(body.length < data.length / 10);
    assert.ok(zlib.gunzipSync(body).equals(data));
    ({ res, body } = await get("/home/user/dl", "gzip;q=0"));
    assert.equal(res.headers["content-encoding"], undefined);
    assert.ok(body.equals(data));
    ({ res, body } = await get("/home/user/dl-empty", "gzip"));
    assert.equal(res.headers["content-encoding"], undefined);
    assert.equal(res.headers["content-length"], "0");
  });
});

describe("pause and resume (wire)", () => {
  test("statuses and shapes: 204, 409, 404, 201, the data plane 502 while paused", async () => {
    const sbx = (await createRaw()).body;
    const post = (id, what, key = KEY_A, body = "{}") =>
      fetch(`${BASE}/sandboxes/${id}/${what}`, { method: "POST", headers: { "X-API-KEY": key, "Content-Type": "application/json" }, body });
    let r = await post(sbx.sandboxID, "resume");
    assert.equal(r.status, 409, "resume of a running one");
    assert.ok(isE2bError(await r.json(), 409));
    r = await post(sbx.sandboxID, "pause", KEY_B);
    assert.equal(r.status, 404, "another key's");
    assert.ok(isE2bError(await r.json(), 404));
    r = await post("nosuchsandbox0000000", "pause");
    assert.equal(r.status, 404);
    // A stream open when the pause comes ends with an end of stream, unavailable.
    const open = stream(sbx, "Start", { process: { cmd: "/bin/sh", args: ["-c", "echo go; sleep 30"] }, stdin: false });
    await new Promise((res) => setTimeout(res, 500));
    r = await post(sbx.sandboxID, "pause", KEY_A, '{"memory": true}');
    assert.equal(r.status, 204);
    const { env } = await open;
    assert.equal(env.at(-1).flags, 2);
    assert.equal(env.at(-1).json.error.code, "unavailable");
    r = await post(sbx.sandboxID, "pause");
    assert.equal(r.status, 409);
    assert.ok(isE2bError(await r.json(), 409));
    const info = await (await fetch(`${BASE}/sandboxes/${sbx.sandboxID}`, { headers: { "X-API-KEY": KEY_A } })).json();
    assert.equal(info.state, "paused");
    for (const route of ["/health", "/files?path=x"]) {
      const d = await fetch(`${BASE}${route}`, { headers: dataHeaders(sbx) });
      assert.equal(d.status, 502, route);
      assert.match((await d.json()).message, /paused/);
    }
    const listed = await (await fetch(`${BASE}/v2/sandboxes?state=paused`, { headers: { "X-API-KEY": KEY_A } })).json();
    assert.ok(listed.some((s) => s.sandboxID === sbx.sandboxID && s.state === "paused"));
    const running = await (await fetch(`${BASE}/v2/sandboxes?state=running`, { headers: { "X-API-KEY": KEY_A } })).json();
    assert.ok(!running.some((s) => s.sandboxID === sbx.sandboxID));
    r = await post(sbx.sandboxID, "resume", KEY_A, '{"timeout": 60}');
    assert.equal(r.status, 201);
    const j = await r.json();
    assert.equal(j.sandboxID, sbx.sandboxID);
    assert.equal(typeof j.envdAccessToken, "string");
    assert.equal((await fetch(`${BASE}/health`, { headers: dataHeaders(sbx) })).status, 204);
    // Paused again, connect resumes it (201); on a running one it is 200.
    assert.equal((await post(sbx.sandboxID, "pause")).status, 204);
    assert.equal((await post(sbx.sandboxID, "connect", KEY_A, '{"timeout": 60}')).status, 201);
    assert.equal((await post(sbx.sandboxID, "connect", KEY_A, '{"timeout": 60}')).status, 200);
    assert.equal((await run(sbx, "echo alive")).exitCode ?? 0, 0);
  });

  test("concurrent pauses: one wins, the others are 409; a watcher survives the pause", async () => {
    const sbx = (await createRaw()).body;
    await run(sbx, "mkdir -p pw");
    const id = (await fsCall(sbx, "CreateWatcher", { path: "pw" })).json.watcherId;
    const post = (what) =>
      fetch(`${BASE}/sandboxes/${sbx.sandboxID}/${what}`, { method: "POST", headers: { "X-API-KEY": KEY_A }, body: "{}" });
    const statuses = (await Promise.all([1, 2, 3, 4].map(() => post("pause")))).map((r) => r.status).sort();
    assert.deepEqual(statuses, [204, 409, 409, 409]);
    assert.equal((await post("connect")).status, 201);
    await run(sbx, "echo x > pw/after-resume");
    await until(async () => {
      const g = await fsCall(sbx, "GetWatcherEvents", { watcherId: id });
      return (g.json.events ?? []).some((e) => e.name === "after-resume");
    }, "the watcher's event after the resume");
  });

  test("a kill while a pause settles, and a pause of a dying sandbox, leave the server well", async () => {
    for (let i = 0; i < 3; i++) {
      const sbx = (await createRaw()).body;
      const p = fetch(`${BASE}/sandboxes/${sbx.sandboxID}/pause`, { method: "POST", headers: { "X-API-KEY": KEY_A }, body: "{}" });
      const k = fetch(`${BASE}/sandboxes/${sbx.sandboxID}`, { method: "DELETE", headers: { "X-API-KEY": KEY_A } });
      const [pr, kr] = await Promise.all([p, k]);
      assert.ok([204, 404].includes(pr.status), `pause: ${pr.status}`);
      assert.equal(kr.status, 204);
      assert.ok(isE2bError(await pr.json().catch(() => ({ code: 404, message: "" })), pr.status) || pr.status === 204);
    }
    assert.equal((await fetch(`${BASE}/health`)).status, 200);
  });
});

describe("pause and transfers (wire)", () => {
  test("an upload in progress when the pause comes is answered, 502, not left hanging", async () => {
    const sbx = (await createRaw()).body;
    let push;
    const body = new ReadableStream({ start(c) { push = c; } });
    const up = fetch(`${BASE}/files?path=/home/user/slow.bin`, {
      method: "POST",
      headers: dataHeaders(sbx, { "Content-Type": "application/octet-stream" }),
      body,
      duplex: "half",
    });
    push.enqueue(new Uint8Array(1000));
    await new Promise((r) => setTimeout(r, 300));
    const p = await fetch(`${BASE}/sandboxes/${sbx.sandboxID}/pause`, { method: "POST", headers: { "X-API-KEY": KEY_A }, body: "{}" });
    assert.equal(p.status, 204);
    const r = await Promise.race([up, new Promise((res) => setTimeout(() => res("hung"), 10_000))]);
    assert.notEqual(r, "hung");
    assert.equal(r.status, 502);
    assert.match((await r.json()).message, /paused/);
    try { push.close(); } catch {}
    const c = await fetch(`${BASE}/sandboxes/${sbx.sandboxID}/connect`, { method: "POST", headers: { "X-API-KEY": KEY_A }, body: "{}" });
    assert.equal(c.status, 201);
    assert.equal((await fsCall(sbx, "Stat", { path: "/home/user" })).status, 200);
  });

  test("a watcher resumed through the REST API watches again at its next poll", async () => {
    const sbx = (await createRaw()).body;
    await run(sbx, "mkdir -p rw");
    const id = (await fsCall(sbx, "CreateWatcher", { path: "rw" })).json.watcherId;
    const e2b = (what) => fetch(`${BASE}/sandboxes/${sbx.sandboxID}/${what}`, { method: "POST", headers: { "X-API-KEY": KEY_A }, body: "{}" });
    assert.equal((await e2b("pause")).status, 204);
    const rest = await fetch(`${BASE}/exec/${sbx.sandboxID}/resume`, { method: "POST", headers: { Authorization: `Bearer ${KEY_A}` } });
    assert.equal(rest.status, 200);
    assert.equal((await fsCall(sbx, "GetWatcherEvents", { watcherId: id })).status, 200);
    await run(sbx, "echo y > rw/later");
    await until(async () => {
      const g = await fsCall(sbx, "GetWatcherEvents", { watcherId: id });
      return (g.json.events ?? []).some((e) => e.name === "later");
    }, "the event after a REST resume");
  });
});
