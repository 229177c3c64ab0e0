// The stock `@e2b/code-interpreter` SDK against sandboxd: runCode with stateful contexts, in
// Python (the code-interpreter-v1 alias: the python template) and JavaScript (node).
import { after, before, describe, test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox } from "@e2b/code-interpreter";

const made = [];
after(async () => {
  for (const s of made) await s.kill().catch(() => {});
});

describe("code interpreter", () => {
  let ci;
  before(async () => {
    ci = await Sandbox.create({ timeoutMs: 120_000 });
    made.push(ci);
  });

  test("print goes to stdout, the last expression is the result", async () => {
    const ex = await ci.runCode("print(1+1)");
    assert.equal(ex.logs.stdout.join(""), "2\n");
    assert.equal(ex.error, undefined);
    assert.equal((await ci.runCode("1+1")).text, "2");
  });

  test("state is kept between runs of the default context", async () => {
    await ci.runCode("x = 41");
    assert.equal((await ci.runCode("x + 1")).text, "42");
  });

  test("errors have name, value and traceback", async () => {
    const ex = await ci.runCode("1/0");
    assert.equal(ex.error.name, "ZeroDivisionError");
    assert.match(ex.error.value, /division by zero/);
    assert.match(ex.error.traceback, /ZeroDivisionError/);
  });

  test("stdout and stderr callbacks while code runs; lists come as JSON too", async () => {
    const out = [], err = [];
    const ex = await ci.runCode(
      "import sys, time\nprint('a', flush=True)\ntime.sleep(0.3)\nprint('b', file=sys.stderr, flush=True)\n[1, 2]",
      { onStdout: (m) => out.push(m.line), onStderr: (m) => err.push(m.line) },
    );
    assert.equal(out.join(""), "a\n");
    assert.equal(err.join(""), "b\n");
    assert.equal(ex.text, "[1, 2]");
    assert.deepEqual(ex.results[0].json, [1, 2]);
  });

  test("envs of one run", async () => {
    const ex = await ci.runCode("import os; os.environ.get('ONE_RUN')", { envs: { ONE_RUN: "yes" } });
    assert.equal(ex.text, "'yes'");
    assert.equal((await ci.runCode("import os; os.environ.get('ONE_RUN')")).text, undefined);
  });

  test("contexts: create, list, isolated state, restart, remove", async () => {
    const c = await ci.createCodeContext({ language: "python" });
    await ci.runCode("y = 'mine'", { context: c });
    assert.equal((await ci.runCode("y", { context: c })).text, "'mine'");
    const other = await ci.runCode("'y' in dir()");
    assert.equal(other.text, "False");
    assert.ok((await ci.listCodeContexts()).some((x) => x.id === c.id));
    await ci.restartCodeContext(c);
    assert.equal((await ci.runCode("y", { context: c })).error.name, "NameError");
    await ci.removeCodeContext(c);
    assert.ok(!(await ci.listCodeContexts()).some((x) => x.id === c.id));
  });

  test("a context's interpreter that exits starts again", async () => {
    const c = await ci.createCodeContext({ language: "python" });
    const ex = await ci.runCode("import os; os._exit(3)", { context: c });
    assert.ok(ex.error);
    assert.equal((await ci.runCode("2*3", { context: c })).text, "6");
  });

  test("JavaScript keeps its state too (node template)", async () => {
    const js = await Sandbox.create("node", { timeoutMs: 120_000 });
    made.push(js);
    await js.runCode("let y = 2", { language: "js" });
    assert.equal((await js.runCode("y * 3", { language: "js" })).text, "6");
    const ex = await js.runCode("console.log('hi'); null.x", { language: "js" });
    assert.equal(ex.logs.stdout.join(""), "hi\n");
    assert.equal(ex.error.name, "TypeError");
  });

  test("without a token the interpreter refuses", async () => {
    const r = await fetch(`${process.env.E2B_TEST_URL}/execute`, {
      method: "POST",
      headers: { "E2b-Sandbox-Id": ci.sandboxId, "E2b-Sandbox-Port": "49999", "Content-Type": "application/json" },
      body: JSON.stringify({ code: "1" }),
    });
    assert.equal(r.status, 401);
  });

  test("each token means one thing: only the envd token runs code", async () => {
    const U = process.env.E2B_TEST_URL;
    const call = (path, method, token, body) =>
      fetch(`${U}${path}`, {
        method,
        headers: { "E2b-Sandbox-Id": ci.sandboxId, "E2b-Sandbox-Port": "49999", "Content-Type": "application/json", ...token },
        body,
      });
    // The preview token the REST API hands out for sharing the sandbox's app.
    const r = await fetch(`${U}/exec/${ci.sandboxId}/preview`, { headers: { "X-API-Key": process.env.E2B_API_KEY } });
    assert.equal(r.status, 200);
    const preview = (await r.json()).token;
    assert.match(preview, /^pt_/);
    assert.notEqual(preview, ci.trafficAccessToken);
    const code = JSON.stringify({ code: "import os; os.getuid()" });
    for (const tok of [
      { "E2B-Traffic-Access-Token": preview },
      { "X-Access-Token": preview },
      { "E2B-Traffic-Access-Token": ci.trafficAccessToken },
      { "X-Access-Token": ci.trafficAccessToken },
    ]) {
      assert.equal((await call("/execute", "POST", tok, code)).status, 401, JSON.stringify(tok));
      assert.equal((await call("/contexts", "POST", tok, JSON.stringify({ language: "python" }))).status,
        "E2B-Traffic-Access-Token" in tok && tok["E2B-Traffic-Access-Token"] === ci.trafficAccessToken ? 200 : 401,
        JSON.stringify(tok));
    }
    assert.equal((await call("/contexts", "GET", { "E2B-Traffic-Access-Token": preview })).status, 401);
    const ok = await call("/execute", "POST", { "X-Access-Token": ci.envdAccessToken }, code);
    assert.equal(ok.status, 200);
    await ok.text();
  });
});

const noCI = !process.env.E2B_TEST_CI_TEMPLATE && "the code-interpreter template is not built (run.sh says why)";

describe("the code-interpreter template", { skip: noCI }, () => {
  let ci;
  before(async () => {
    ci = await Sandbox.create({ timeoutMs: 120_000 });
    made.push(ci);
  });

  test("code-interpreter-v1 is it: Python and JavaScript contexts in one sandbox", async () => {
    assert.equal((await ci.getInfo()).templateId, "code-interpreter-v1");
    await ci.runCode("shared = 'py'");
    await ci.runCode("let shared = 'js'", { language: "js" });
    assert.equal((await ci.runCode("shared")).text, "'py'");
    assert.equal((await ci.runCode("shared", { language: "javascript" })).text, "js");
    const r = await ci.commands.run("python3 -c 'import matplotlib, numpy; print(1)' && node -e 'console.log(2)'");
    assert.equal(r.stdout, "1\n2\n");
  });

  test("a matplotlib figure is a png result; the last value stays the main result", async () => {
    const ex = await ci.runCode(
      "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.title('t')\nplt.show()\n6 * 7",
    );
    assert.equal(ex.error, undefined, JSON.stringify(ex.error));
    assert.equal(ex.logs.stderr.join(""), "", "no warning about the backend");
    const png = ex.results.find((r) => r.png);
    assert.ok(png, "a png result");
    const bytes = Buffer.from(png.png, "base64");
    assert.deepEqual([...bytes.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
    assert.ok(bytes.length > 1000);
    assert.equal(ex.text, "42");
    // Shown once: the next run has no figure.
    assert.equal((await ci.runCode("1")).results.filter((r) => r.png).length, 0);
    const two = await ci.runCode("plt.figure(); plt.plot([1]); plt.figure(); plt.plot([2])");
    assert.equal(two.results.filter((r) => r.png).length, 2);
  });

  test("a pause during an execution ends it with an error; the context lives on", async () => {
    await ci.runCode("kept = 7");
    const running = ci.runCode("import time\ntime.sleep(3)\n'late'");
    await new Promise((r) => setTimeout(r, 500));
    assert.equal(await ci.pause(), true);
    const ex = await Promise.race([running, new Promise((r) => setTimeout(() => r("hung"), 10_000))]);
    assert.notEqual(ex, "hung");
    assert.match(ex.error.value, /paused/);
    const again = await Sandbox.connect(ci.sandboxId);
    await new Promise((r) => setTimeout(r, 3000)); // the sleep ends in the context
    assert.equal((await again.runCode("kept * 6")).text, "42");
  });

  test("an object with _repr_html_ gives an html result", async () => {
    const ex = await ci.runCode("class T:\n    def _repr_html_(self): return '<b>t</b>'\nT()");
    assert.equal(ex.results[0].html, "<b>t</b>");
  });
});

