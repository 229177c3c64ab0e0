// What the dashboard's metrics page draws from readings of the daemon's counters
// (ui/src/series.ts and the chart's runs and time ticks in ui/src/charts.ts), bundled here
// with esbuild as the build bundles them: a value between two readings, or a gap (null)
// where nothing was measured; never a zero or an older value in its place.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { pathToFileURL } from "node:url";

const require = createRequire(new URL("../../ui/package.json", import.meta.url));
const esbuild = require("esbuild");
let m;
let dir;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "ui-series-"));
  const entry = join(dir, "entry.ts");
  const src = new URL("../../ui/src/", import.meta.url).pathname;
  writeFileSync(entry, `export * from "${src}series";\nexport { runs, timeTicks } from "${src}charts";\n`);
  const out = join(dir, "series.mjs");
  await esbuild.build({ entryPoints: [entry], outfile: out, bundle: true, format: "esm", logLevel: "warning" });
  m = await import(pathToFileURL(out).href);
});

after(() => rmSync(dir, { recursive: true, force: true }));

const r = (t, over = {}) => ({ t, sessions: 1, createSum: 0.5, createCount: 5, executes: 10, errors: 0, ...over });

test("no creation between two readings is a gap, not a zero nor the mean so far", () => {
  const rs = [r(0), r(10000), r(20000, { createCount: 7, createSum: 0.9 }), r(30000, { createCount: 7, createSum: 0.9 })];
  const p = m.latency(rs);
  assert.deepEqual(
    p.map((x) => x.v),
    [null, 200, null],
  );
  assert.deepEqual(
    m.runs(p).map((run) => run.map((x) => x.t)),
    [[20000]],
  );
});

test("readings too far apart, or a counter that went back, give no value", () => {
  const rs = [r(0), r(10000, { executes: 20 }), r(10000 + m.MAX_GAP_MS + 1, { executes: 30 }), r(10000 + m.MAX_GAP_MS + 3001, { executes: 2 })];
  assert.deepEqual(
    m.rate(rs, (x) => x.executes).map((x) => x.v),
    [1, null, null],
  );
  const g = m.gauge(rs, (x) => x.sessions);
  assert.equal(g.filter((x) => x.v === null).length, 1, "a gauge breaks where readings are missing");
  assert.equal(m.lastValue([{ t: 1, v: 3 }, { t: 2, v: null }]), 3);
});

test("a history sample is a reading", () => {
  assert.deepEqual(m.fromSample({ t: 5, sessions: 2, creations: 3, creationSeconds: 0.3, executes: 4, errors: 1 }), {
    t: 5,
    sessions: 2,
    createSum: 0.3,
    createCount: 3,
    executes: 4,
    errors: 1,
  });
});

test("the time axis has round ticks inside its span", () => {
  const t0 = Date.UTC(2026, 0, 1, 10, 0, 7);
  const ticks = m.timeTicks(t0, t0 + 3600 * 1000);
  assert.ok(ticks.length >= 2 && ticks.length <= 5, JSON.stringify(ticks));
  for (const k of ticks) {
    assert.ok(k.t >= t0 && k.t <= t0 + 3600 * 1000);
    assert.equal(k.t % (15 * 60 * 1000), 0);
    assert.match(k.label, /^\d\d:\d\d$/);
  }
  const short = m.timeTicks(t0, t0 + 40 * 1000);
  assert.ok(short.length >= 2);
  for (const k of short) assert.match(k.label, /^\d\d:\d\d:\d\d$/);
});
