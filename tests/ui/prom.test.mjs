// The dashboard's reader of the Prometheus text exposition (ui/src/prom.ts), bundled here
// with esbuild as the build bundles it: the daemon's own /metrics read back exactly, the
// exposition's corner cases, and random and mutated input, on which it must never throw and
// never invent a sample.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { pathToFileURL } from "node:url";

const require = createRequire(new URL("../../ui/package.json", import.meta.url));
const esbuild = require("esbuild");
let prom;
let dir;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "ui-prom-"));
  const out = join(dir, "prom.mjs");
  await esbuild.build({ entryPoints: [new URL("../../ui/src/prom.ts", import.meta.url).pathname], outfile: out, bundle: true, format: "esm", logLevel: "warning" });
  prom = await import(pathToFileURL(out).href);
});

after(() => rmSync(dir, { recursive: true, force: true }));

test("the daemon's /metrics is read sample for sample", async () => {
  const res = await fetch(`${process.env.UI_TEST_URL}/metrics`, { headers: { Authorization: `Bearer ${process.env.UI_TEST_KEY_ADMIN}` } });
  assert.equal(res.status, 200);
  const text = await res.text();
  const samples = prom.parseProm(text);
  const lines = text.split("\n").filter((l) => l.trim() && !l.startsWith("#"));
  assert.equal(samples.length, lines.length, "one sample per line");
  assert.ok(prom.total(samples, "exec_sessions_active") !== null);
  for (const s of samples) assert.ok(Number.isFinite(s.value) || Math.abs(s.value) === Infinity, s.name);
});

test("labels, escapes, infinities and timestamps", () => {
  const s = prom.parseProm(
    [
      "# HELP x a metric",
      "# TYPE x counter",
      'x{a="1",b="q\\"uote\\\\ and \\n newline"} 3 1700000000000',
      'h_bucket{le="+Inf"} 7',
      "g -Inf",
      "plain 2.5e3",
      'empty{} 1',
      'trailing{a="1",} 4',
    ].join("\n"),
  );
  assert.deepEqual(s[0], { name: "x", labels: { a: "1", b: 'q"uote\\ and \n newline' }, value: 3 });
  assert.deepEqual(s[1], { name: "h_bucket", labels: { le: "+Inf" }, value: 7 });
  assert.equal(s[2].value, -Infinity);
  assert.equal(s[3].value, 2500);
  assert.deepEqual(s[4], { name: "empty", labels: {}, value: 1 });
  assert.deepEqual(s[5], { name: "trailing", labels: { a: "1" }, value: 4 });
  assert.equal(prom.total(s, "x", (l) => l.a === "1"), 3);
  assert.equal(prom.total(s, "nothing"), null);
});

test("malformed lines are skipped, not guessed", () => {
  // (NaN is well formed, but there is nothing to chart: left out too.)
  const bad = ['x{a="1" 3', 'x{a=1} 3', "x{", 'x{a="unterminated} 3', "x", "x NaN", "x abc", "{a=\"1\"} 3", "9x 1", 'x{1a="b"} 2', "x{a=\"1\"}"];
  for (const line of bad) assert.deepEqual(prom.parseProm(line), [], line);
});

test("random and mutated input never throws and yields only well-formed samples", () => {
  // A fixed seed: the same inputs every run.
  let seed = 0x2545f491;
  const rnd = (n) => {
    seed ^= seed << 13;
    seed ^= seed >>> 17;
    seed ^= seed << 5;
    return (seed >>> 0) % n;
  };
  const alphabet = 'ab_:{}="\\,\n #+-.e0123456789InfNa \t';
  const seedText = 'x{a="1",b="2"} 3\nh_bucket{le="+Inf"} 7\n# TYPE y gauge\ny 1.5\n';
  for (let i = 0; i < 20000; i++) {
    let text;
    if (i % 2) {
      text = Array.from({ length: rnd(80) }, () => alphabet[rnd(alphabet.length)]).join("");
    } else {
      const chars = seedText.split("");
      for (let k = rnd(6); k >= 0; k--) chars.splice(rnd(chars.length + 1), rnd(3), alphabet[rnd(alphabet.length)]);
      text = chars.join("");
    }
    const samples = prom.parseProm(text);
    const lines = text.split("\n").filter((l) => l.trim() && !l.trim().startsWith("#"));
    assert.ok(samples.length <= lines.length, JSON.stringify(text));
    for (const s of samples) {
      assert.match(s.name, /^[a-zA-Z_:][a-zA-Z0-9_:]*$/, JSON.stringify(text));
      assert.ok(!Number.isNaN(s.value), JSON.stringify(text));
      for (const k of Object.keys(s.labels)) assert.match(k, /^[a-zA-Z_][a-zA-Z0-9_]*$/);
    }
  }
});
