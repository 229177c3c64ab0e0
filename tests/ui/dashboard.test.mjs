// The dashboard in a real browser: headless Chromium driven by puppeteer-core, against the
// daemon tests/ui/run.sh started. The tests run in order on one page, as a person would use
// it: sign in, sessions, a session's terminal (a command, then vi), files (upload by drag
// and drop, download), templates, metrics, keys (create, revoke), then an exec-only key that
// must see neither admin pages nor other keys' sessions. Each page is saved as a PNG.
import assert from "node:assert/strict";
import { randomBytes } from "node:crypto";
import { appendFileSync, existsSync, readFileSync, statSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { after, before, test } from "node:test";

const require = createRequire(new URL("../../ui/package.json", import.meta.url));
const puppeteer = require("puppeteer-core");

const URL_ = process.env.UI_TEST_URL;
const KEY_ADMIN = process.env.UI_TEST_KEY_ADMIN;
const KEY_A = process.env.UI_TEST_KEY_A;
const KEY_B = process.env.UI_TEST_KEY_B;
const OUT = process.env.UI_TEST_OUT;
const DOWNLOADS = process.env.UI_TEST_DOWNLOADS;
const SECRETS = process.env.UI_TEST_SECRETS;
const WAIT = { timeout: 30000 };

let browser;
let page;
const violations = [];
const pageErrors = [];
const requests = [];
const secrets = [];

async function api(key, method, path, body) {
  const headers = { Authorization: `Bearer ${key}` };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const res = await fetch(URL_ + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  let json = null;
  try {
    json = JSON.parse(text);
  } catch {
    json = null;
  }
  return { status: res.status, json, text };
}

async function shot(name) {
  await page.screenshot({ path: join(OUT, `${name}.png`), fullPage: true });
}

// The terminal's screen as text (xterm's DOM renderer: one element per row).
async function screen() {
  return page.$eval("#terminal .xterm-rows", (el) => el.innerText.replace(/\u00a0/g, " "));
}

async function waitScreen(re, what) {
  try {
    await page.waitForFunction(
      (src, flags) => new RegExp(src, flags).test(document.querySelector("#terminal .xterm-rows")?.innerText.replace(/\u00a0/g, " ") ?? ""),
      WAIT,
      re.source,
      re.flags,
    );
  } catch (e) {
    throw new Error(`${what}: the terminal never showed ${re}; it shows:\n${await screen()}`);
  }
}

async function type(text) {
  await page.focus("#terminal .xterm-helper-textarea");
  await page.keyboard.type(text, { delay: 5 });
}

async function signIn(key) {
  await page.goto(`${URL_}/ui/#/signin`, { waitUntil: "load" });
  await page.waitForSelector("#key", WAIT);
  await page.$eval("#key", (el) => (el.value = ""));
  await page.type("#key", key);
  await page.click("#signin button[type=submit]");
}

async function sessionIds() {
  return page.$$eval("#sessions-body tr[data-id]", (rows) => rows.map((r) => r.getAttribute("data-id")));
}

async function waitRow(id) {
  await page.waitForSelector(`#sessions-body tr[data-id="${id}"]`, WAIT);
}

before(async () => {
  browser = await puppeteer.launch({
    executablePath: process.env.UI_TEST_CHROMIUM,
    headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check"],
  });
  page = await browser.newPage();
  await page.setViewport({ width: 1400, height: 900 });
  const cdp = await browser.target().createCDPSession();
  await cdp.send("Browser.setDownloadBehavior", { behavior: "allow", downloadPath: DOWNLOADS, eventsEnabled: true });
  await page.exposeFunction("reportViolation", (v) => violations.push(v));
  await page.evaluateOnNewDocument(() => {
    document.addEventListener("securitypolicyviolation", (e) => {
      window.reportViolation(`${e.violatedDirective} ${e.blockedURI} ${e.sourceFile}:${e.lineNumber}`);
    });
  });
  page.on("pageerror", (e) => pageErrors.push(String(e)));
  page.on("request", (r) => requests.push(r.url()));
  // WebSockets are not requests to puppeteer: the protocol's own event names them.
  const net = await page.createCDPSession();
  await net.send("Network.enable");
  net.on("Network.webSocketCreated", (e) => requests.push(e.url));
  page.on("dialog", (d) => void d.accept());
});

after(async () => {
  await browser?.close();
});

test("a bad key is refused at sign-in and not kept", async () => {
  await signIn("sk_test_00000000000000000000000000000000");
  await page.waitForSelector("#signin-status .notice.error", WAIT);
  const msg = await page.$eval("#signin-status", (el) => el.textContent);
  assert.match(msg, /Invalid API key/);
  assert.equal(await page.evaluate(() => sessionStorage.length), 0);
  await shot("signin");
});

test("the admin key signs in and sees a session created through the API, with its owner", async () => {
  const made = await api(KEY_A, "POST", "/exec", { id: "ui-a-1", template: "base" });
  assert.equal(made.status, 201, made.text);
  await signIn(KEY_ADMIN);
  await waitRow("ui-a-1");
  // The key is in sessionStorage, not in the URL, and never in a cookie.
  assert.ok(!page.url().includes(KEY_ADMIN));
  assert.equal(await page.evaluate(() => document.cookie), "");
  // One created after the page loaded appears at the next refresh.
  const later = await api(KEY_ADMIN, "POST", "/exec", { id: "ui-admin-1", template: "base" });
  assert.equal(later.status, 201, later.text);
  await waitRow("ui-admin-1");
  const row = await page.$eval('#sessions-body tr[data-id="ui-a-1"]', (r) => r.innerText);
  assert.match(row, /base/);
  assert.match(row, /ready/);
  const keys = await api(KEY_ADMIN, "GET", "/admin/keys");
  const owner = keys.json.keys.find((k) => k.name === "ui-tenant-a").id;
  assert.ok(row.includes(owner), `the owner ${owner} is shown: ${row}`);
  for (const page_ of ["sessions", "templates", "keys", "metrics"]) assert.ok(await page.$(`#nav a[data-page=${page_}]`), page_);
  await shot("sessions");
});

test("the sessions list shows its driver and owners' names on its first paint", async () => {
  const driver = (await api(KEY_ADMIN, "GET", "/health")).json.driver;
  await page.goto(`${URL_}/ui/#/templates`, { waitUntil: "load" });
  await page.waitForSelector('#templates [data-template="base"]', WAIT);
  // The rows as they are first drawn, before any refresh.
  await page.evaluate(() => {
    window.firstRows = null;
    const obs = new MutationObserver(() => {
      const rows = [...document.querySelectorAll("#sessions-body tr[data-id]")];
      if (!rows.length || window.firstRows) return;
      window.firstRows = rows.map((r) => r.innerText);
      obs.disconnect();
    });
    obs.observe(document.getElementById("main"), { childList: true, subtree: true });
  });
  // What the rows show beside the list (/health, /admin/keys) is answered only after the
  // list itself, so that a page which draws before having both shows what it lacks.
  let listed;
  const answered = new Promise((r) => (listed = r));
  const onResponse = (res) => {
    if (new URL(res.url()).pathname === "/exec") listed();
  };
  const onRequest = async (req) => {
    const path = new URL(req.url()).pathname;
    if (path === "/health" || path === "/admin/keys") await answered;
    await req.continue();
  };
  page.on("response", onResponse);
  await page.setRequestInterception(true);
  page.on("request", onRequest);
  try {
    await page.evaluate(() => (location.hash = "#/sessions"));
    await page.waitForFunction(() => window.firstRows !== null, WAIT);
  } finally {
    page.off("request", onRequest);
    await page.setRequestInterception(false);
    page.off("response", onResponse);
  }
  const row = (await page.evaluate(() => window.firstRows)).find((t) => t.includes("ui-a-1"));
  assert.ok(row, "the first rows hold ui-a-1");
  assert.ok(row.includes(driver), `the driver ${driver} on the first paint: ${row}`);
  assert.ok(row.includes("ui-tenant-a"), `the owner's name on the first paint: ${row}`);
});

test("the terminal runs a command and shows its output", async () => {
  await page.goto(`${URL_}/ui/#/session/ui-a-1`, { waitUntil: "load" });
  await page.waitForFunction(() => /running \(pid \d+\)/.test(document.getElementById("terminal-status")?.textContent ?? ""), WAIT);
  await type("echo ui-$((6 * 7))-ok\r");
  await waitScreen(/ui-42-ok/, "echo");
  await shot("session");
});

test("vi opens in the terminal and :q leaves it", async () => {
  await type("vi /workspace/vi-test.txt\r");
  await waitScreen(/^~/m, "vi's empty lines");
  await shot("vi");
  await type(":q\r");
  await type("echo after-vi-$((2 + 3))\r");
  await waitScreen(/after-vi-5/, "the shell after vi");
  const text = await screen();
  assert.ok(!/^~\s*$/m.test(text.split("after-vi-5").pop()), "vi's screen is gone");
});

test("a file dropped on the browser is uploaded and downloads byte for byte", async () => {
  const data = Buffer.concat([randomBytes(4096), Buffer.from([0, 255, 10, 13])]);
  const name = "dropped.bin";
  await page.waitForSelector("#files-drop", WAIT);
  await page.evaluate(
    (b64, n) => {
      const bin = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
      const dt = new DataTransfer();
      dt.items.add(new File([bin], n));
      const el = document.getElementById("files-drop");
      el.dispatchEvent(new DragEvent("dragover", { dataTransfer: dt, bubbles: true, cancelable: true }));
      el.dispatchEvent(new DragEvent("drop", { dataTransfer: dt, bubbles: true, cancelable: true }));
    },
    data.toString("base64"),
    name,
  );
  await page.waitForSelector(`#files-body tr[data-name="${name}"]`, WAIT);
  const raw = await fetch(`${URL_}/exec/ui-a-1/read?path=${name}`, { headers: { Authorization: `Bearer ${KEY_A}`, Accept: "application/octet-stream" } });
  assert.equal(raw.status, 200);
  assert.ok(Buffer.from(await raw.arrayBuffer()).equals(data), "the sandbox holds the dropped bytes");

  await page.click(`#files-body tr[data-name="${name}"] button[data-action=download]`);
  const file = join(DOWNLOADS, name);
  const deadline = Date.now() + 30000;
  while (!(existsSync(file) && statSync(file).size === data.length) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  assert.ok(existsSync(file), "the download arrived");
  assert.ok(readFileSync(file).equals(data), "the download is the file's bytes");

  // A text file is shown by View.
  const w = await api(KEY_A, "POST", "/exec/ui-a-1/write", { path: "notes/hello.txt", content: "hello from the dashboard test\n" });
  assert.equal(w.status, 200, w.text);
  await page.click("#files .row button");
  await page.waitForSelector('#files-body a[data-dir="notes"]', WAIT);
  await page.click('#files-body a[data-dir="notes"]');
  await page.waitForSelector('#files-body tr[data-name="hello.txt"]', WAIT);
  await page.click('#files-body tr[data-name="hello.txt"] button[data-action=view]');
  await page.waitForSelector("#file-content", WAIT);
  assert.equal(await page.$eval("#file-content", (el) => el.textContent), "hello from the dashboard test\n");
  await shot("files");
});

test("the session's background processes are listed", async () => {
  const p = await api(KEY_A, "POST", "/exec/ui-a-1/processes", { command: "sleep 300", tag: "ui-sleeper" });
  assert.equal(p.status, 201, p.text);
  await page.waitForFunction((pid) => !!document.querySelector(`#processes-body tr[data-pid="${pid}"]`), WAIT, p.json.pid);
  const row = await page.$eval(`#processes-body tr[data-pid="${p.json.pid}"]`, (r) => r.innerText);
  assert.match(row, /ui-sleeper/);
  assert.match(row, /running/);
});

test("a port's link opens the app in the sandbox, not a 401", async () => {
  const marker = `app-${randomBytes(6).toString("hex")}`;
  const w = await api(KEY_A, "POST", "/exec/ui-a-1/write", { path: "site/index.html", content: `<h1>${marker}</h1>\n` });
  assert.equal(w.status, 200, w.text);
  const p = await api(KEY_A, "POST", "/exec/ui-a-1/processes", { command: "cd /workspace/site && exec busybox httpd -f -p 127.0.0.1:8765", tag: "ui-web" });
  assert.equal(p.status, 201, p.text);
  await page.waitForSelector('#ports-body li[data-port="8765"] a', WAIT);
  const href = await page.$eval('#ports-body li[data-port="8765"] a', (a) => a.href);
  await page.click('#ports-body li[data-port="8765"] a');
  const target = await browser.waitForTarget((t) => t.url().includes("/ports/8765/"), WAIT);
  const tab = await target.page();
  try {
    await tab.waitForFunction((m) => document.body?.innerText.includes(m), WAIT, marker);
    // The token went into the preview's cookie and out of the address.
    assert.ok(!tab.url().includes("sandbox_token"), tab.url());
  } catch (e) {
    throw new Error(`${href} opened ${tab.url()}: ${await tab.evaluate(() => document.body?.innerText)}; ${e.message}`);
  } finally {
    await tab.close();
  }
  const k = await api(KEY_A, "DELETE", `/exec/ui-a-1/processes/${p.json.pid}`);
  assert.equal(k.status, 200, k.text);
});

async function errors() {
  return page.$$eval("main .notice.error", (els) => els.map((e) => e.textContent));
}

async function stateText() {
  return page.$eval("#session-state", (el) => el.textContent);
}

async function waitState(want) {
  try {
    await page.waitForFunction((w) => document.getElementById("session-state")?.textContent === w && !document.querySelector("#session-action-status")?.textContent, WAIT, want);
  } catch (e) {
    throw new Error(`the page never said ${want}: it says ${await stateText()} (${await page.$eval("main", (m) => m.innerText)})`);
  }
}

test("a session is paused, hibernated and resumed from its page, which says so truthfully", async () => {
  const made = await api(KEY_ADMIN, "POST", "/exec", { id: "ui-napper", template: "base", storage: "disk" });
  assert.equal(made.status, 201, made.text);
  await page.goto(`${URL_}/ui/#/session/ui-napper`, { waitUntil: "load" });
  await page.waitForFunction(() => /running \(pid \d+\)/.test(document.getElementById("terminal-status")?.textContent ?? ""), WAIT);
  await type("echo kept > /workspace/kept.txt; echo wrote-$((3 * 3))\r");
  await waitScreen(/wrote-9/, "the write before the pause");
  assert.equal(await page.$eval("#session-resume", (b) => b.disabled), true, "nothing to resume while it runs");

  // Pause (a freeze): the page's own terminal is closed first, or the server refuses.
  await page.click("#session-pause");
  await waitState("paused");
  let s = (await api(KEY_ADMIN, "GET", "/exec")).json.sessions.find((x) => x.id === "ui-napper");
  assert.equal(s.state, "paused");
  assert.equal(s.pauseMode, "freeze");
  assert.equal(await page.$eval("#session-expiry", (el) => el.textContent), "not while paused");
  assert.match(await page.$eval("#terminal-status", (el) => el.textContent), /paused/);
  assert.deepEqual(await errors(), [], "no error after the pause");
  assert.deepEqual(
    await page.$$eval("#session-actions button", (bs) => bs.map((b) => [b.id, b.disabled])),
    [["session-pause", true], ["session-hibernate", false], ["session-resume", false]],
  );
  await shot("session-paused");

  // A frozen session may be hibernated.
  await page.click("#session-hibernate");
  await waitState("hibernated");
  s = (await api(KEY_ADMIN, "GET", "/exec")).json.sessions.find((x) => x.id === "ui-napper");
  assert.equal(s.pauseMode, "hibernate");
  assert.equal(await page.$eval("#session-expiry", (el) => el.textContent), "not while paused");
  assert.deepEqual(await errors(), [], "no error after the hibernation");

  // The list says the same, with no idle clock running.
  await page.goto(`${URL_}/ui/#/sessions`, { waitUntil: "load" });
  await waitRow("ui-napper");
  const cells = await page.$$eval('#sessions-body tr[data-id="ui-napper"] td', (tds) => tds.map((td) => td.textContent));
  assert.equal(cells[3], "hibernated", cells.join(" | "));
  assert.equal(cells[5], "not while paused", cells.join(" | "));

  // Resume: running again, with a new terminal over the same files.
  await page.goto(`${URL_}/ui/#/session/ui-napper`, { waitUntil: "load" });
  await waitState("hibernated");
  await page.click("#session-resume");
  await waitState("ready");
  assert.match(await page.$eval("#session-expiry", (el) => el.textContent), /^in /);
  await page.waitForFunction(() => /running \(pid \d+\)/.test(document.getElementById("terminal-status")?.textContent ?? ""), WAIT);
  await type("cat /workspace/kept.txt; echo after-$((4 + 4))\r");
  await waitScreen(/kept[\s\S]*after-8/, "the files after the resume");
  assert.deepEqual(await errors(), [], "no error after the resume");
});

test("a terminal that the server closes says why", async () => {
  const made = await api(KEY_ADMIN, "POST", "/exec", { id: "ui-doomed", template: "base" });
  assert.equal(made.status, 201, made.text);
  await page.goto(`${URL_}/ui/#/session/ui-doomed`, { waitUntil: "load" });
  await page.waitForFunction(() => /running \(pid \d+\)/.test(document.getElementById("terminal-status")?.textContent ?? ""), WAIT);
  // Its session goes under it: the server sends the error, then closes with 1011.
  assert.equal((await api(KEY_ADMIN, "DELETE", "/exec/ui-doomed")).status, 200);
  await page.waitForFunction(() => /^closed \(1011/.test(document.getElementById("terminal-status")?.textContent ?? ""), WAIT);
  const text = await page.$eval("#terminal-status", (el) => el.textContent);
  assert.match(text, /^closed \(1011: session `ui-doomed` was destroyed \(deleted by the client\)\)/);
  assert.ok(!text.includes("see the error message"), text);
});

test("the templates page shows the base template's manifest", async () => {
  await page.goto(`${URL_}/ui/#/templates`, { waitUntil: "load" });
  await page.waitForSelector('#templates [data-template="base"]', WAIT);
  const card = await page.$eval('#templates [data-template="base"]', (el) => el.textContent);
  const manifest = (await api(KEY_ADMIN, "GET", "/exec/templates")).json.templates.find((t) => t.name === "base");
  assert.ok(card.includes(manifest.displayName), card);
  assert.ok(card.includes(`"memSizeMib": ${manifest.resources.memSizeMib}`), card);
  await shot("templates");
});

test("the metrics page draws the server's last hour and its own readings, with time axes and gaps", async () => {
  // Something to count: a few executes.
  for (let i = 0; i < 3; i++) assert.equal((await api(KEY_ADMIN, "POST", "/exec/ui-admin-1/execute", { command: "true" })).status, 200);
  // A sample taken after everything the earlier tests created: whatever the page draws
  // after it, it read itself.
  const since = Date.now();
  let history;
  for (;;) {
    history = await api(KEY_ADMIN, "GET", "/metrics/history");
    assert.equal(history.status, 200, history.text);
    if (history.json.samples.at(-1).t > since) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  const samples = history.json.samples;
  assert.ok(samples.length > 1, `the daemon sampled since it started: ${history.text}`);
  const created = samples.some((x, i) => i > 0 && x.creations > samples[i - 1].creations);
  assert.ok(created, "sessions were created while the history was kept");
  const opened = Date.now();
  await page.goto(`${URL_}/ui/#/metrics`, { waitUntil: "load" });
  // A few of the page's own readings after the history.
  await page.waitForFunction(() => Number(document.getElementById("metrics-readings")?.textContent) >= 3, WAIT);
  for (const id of ["chart-sessions", "chart-latency", "chart-executes", "chart-errors"]) {
    const svg = `#${id} svg`;
    // It starts where the server's history starts, before the page was opened.
    assert.equal(Number(await page.$eval(svg, (el) => el.getAttribute("data-from"))), samples[0].t, id);
    const ticks = await page.$$eval(`${svg} .x-tick`, (ts) => ts.map((t) => t.textContent));
    assert.ok(ticks.length >= 2, `${id}: a time axis (${ticks})`);
    for (const t of ticks) assert.match(t, /^\d\d:\d\d(:\d\d)?$/, id);
    assert.equal((await page.$$(`${svg} .y-tick`)).length, 2, `${id}: a value axis`);
  }
  // Nothing was created while the page read: the latency chart has values only from the
  // history's intervals in which something was, and nothing after.
  const runs = await page.$$eval("#chart-latency svg [data-last]", (els) => els.map((e) => Number(e.getAttribute("data-last"))));
  assert.ok(runs.length >= 1, "the history's creations are drawn");
  for (const t of runs) assert.ok(t <= samples.at(-1).t, `a latency point at ${t}, after the last sample before the page opened (${samples.at(-1).t}, opened at ${opened})`);
  assert.ok(await page.$("#chart-executes svg polyline"), "executes drawn as a line");
  const all = (await api(KEY_ADMIN, "GET", "/exec")).json;
  assert.equal(await page.$eval("#chart-sessions .big", (el) => el.textContent), String(all.count));
  assert.match(await page.$eval("#chart-executes .big", (el) => el.textContent), /[1-9]\d* total/);
  await shot("metrics");
});

test("an admin creates a key (its secret shown once, working) and revokes it", async () => {
  await page.goto(`${URL_}/ui/#/keys`, { waitUntil: "load" });
  await page.waitForSelector('#keys-body tr[data-name="ui-admin"]', WAIT);
  await page.type("#key-name", "ui-made");
  await page.click("#new-key button[type=submit]");
  await page.waitForSelector("#key-secret-value", WAIT);
  const secret = await page.$eval("#key-secret-value", (el) => el.textContent);
  appendFileSync(SECRETS, `${secret}\n`);
  assert.match(secret, /^sk_test_[0-9a-f]{32}$/);
  assert.equal((await api(secret, "GET", "/exec")).status, 200, "the new key works");
  await page.waitForSelector('#keys-body tr[data-name="ui-made"]', WAIT);
  // The listing never holds the secret.
  assert.ok(!(await page.$eval("#keys-body", (el) => el.textContent)).includes(secret));
  await shot("keys");
  await page.click("#key-secret-dismiss");
  assert.equal(await page.$("#key-secret-value"), null, "the secret is gone from the page");
  secrets.push(secret);
  // Rotate: a new secret, shown once; the old one stops working.
  await page.click('#keys-body tr[data-name="ui-made"] button[data-action=rotate]');
  await page.waitForSelector("#key-secret-value", WAIT);
  const rotated = await page.$eval("#key-secret-value", (el) => el.textContent);
  appendFileSync(SECRETS, `${rotated}\n`);
  secrets.push(rotated);
  assert.notEqual(rotated, secret);
  assert.equal((await api(secret, "GET", "/exec")).status, 401, "the old secret is refused");
  assert.equal((await api(rotated, "GET", "/exec")).status, 200, "the new secret works");
  await page.click("#key-secret-dismiss");
  await page.click('#keys-body tr[data-name="ui-made"] button[data-action=revoke]');
  await page.waitForFunction(() => document.querySelector('#keys-body tr[data-name="ui-made"] .state-cell')?.textContent === "revoked", WAIT);
  const after_ = await api(rotated, "GET", "/exec");
  assert.equal(after_.status, 401);
  assert.match(after_.json.error, /revoked/);
});

test("an exec-only key sees neither the admin pages nor other keys' sessions", async () => {
  assert.equal((await api(KEY_B, "POST", "/exec", { id: "ui-b-1", template: "base" })).status, 201);
  await page.click("#sign-out");
  await page.waitForSelector("#key", WAIT);
  assert.equal(await page.evaluate(() => sessionStorage.length), 0, "signing out forgets the key");
  await page.type("#key", KEY_B);
  await page.click("#signin button[type=submit]");
  await waitRow("ui-b-1");
  const ids = await sessionIds();
  assert.deepEqual(ids, ["ui-b-1"]);
  assert.equal(await page.$("#nav a[data-page=keys]"), null);
  assert.equal(await page.$("#nav a[data-page=metrics]"), null);
  assert.equal(await page.$("#sessions th:nth-child(10)"), null, "no owner column");
  await shot("exec-key");
  await page.goto(`${URL_}/ui/#/keys`, { waitUntil: "load" });
  await page.waitForFunction(() => /no `admin` scope/.test(document.getElementById("main")?.textContent ?? ""), WAIT);
  assert.equal(await page.$("#keys-body"), null);
  assert.equal((await api(KEY_B, "GET", "/admin/keys")).status, 403);
  await page.goto(`${URL_}/ui/#/session/ui-a-1`, { waitUntil: "load" });
  await page.waitForFunction(() => /No session ui-a-1/.test(document.getElementById("main")?.textContent ?? ""), WAIT);
  assert.equal(await page.$("#terminal .xterm"), null, "no terminal is opened on another key's session");
});

test("no page broke its CSP or threw", async () => {
  assert.deepEqual(violations, []);
  assert.deepEqual(pageErrors, []);
});

test("every request went to the daemon, and no URL held a key", async () => {
  assert.ok(requests.length > 20, `${requests.length} requests`);
  for (const u of requests) {
    assert.ok(u.startsWith(`${URL_}/`) || u.startsWith(URL_.replace("http:", "ws:")) || u.startsWith("blob:"), u);
    for (const k of [KEY_ADMIN, KEY_A, KEY_B, ...secrets]) assert.ok(!u.includes(k), `a key in ${u}`);
    assert.ok(!/api_?key=/i.test(u), u);
  }
  assert.ok(requests.some((u) => /\/terminal\?ticket=[0-9a-f]+/.test(u)), "the terminal was opened with a ticket");
});
