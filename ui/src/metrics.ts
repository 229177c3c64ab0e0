// Metrics: GET /metrics read every few seconds while the page is open, and four charts of
// what it says over that time: live sessions, sandbox creation latency, executes per second,
// errors per second.
import { Caps, request } from "./api";
import { append, clear, every, h, notice } from "./dom";
import { lineChart, Point } from "./charts";
import { parseProm, Sample, total } from "./prom";

const REFRESH_MS = 3000;
const KEEP = 120;

interface Reading {
  t: number;
  sessions: number | null;
  createSum: number | null;
  createCount: number | null;
  executes: number | null;
  errors: number;
}

function read(samples: Sample[], t: number): Reading {
  const status5xx = total(samples, "http_requests_total", (l) => /^5/.test(l.status ?? "")) ?? 0;
  const agent = (total(samples, "vsock_errors_total") ?? 0) + (total(samples, "guest_protocol_errors_total") ?? 0);
  const failedCreations = total(samples, "session_creations_total", (l) => l.result === "failure") ?? 0;
  return {
    t,
    sessions: total(samples, "exec_sessions_active"),
    createSum: total(samples, "vm_creation_time_sum"),
    createCount: total(samples, "vm_creation_time_count"),
    executes: total(samples, "exec_message_total", (l) => l.type === "execute"),
    errors: status5xx + agent + failedCreations,
  };
}

// Per second between successive readings of a counter (a reset counts as no change).
function rate(rs: Reading[], f: (r: Reading) => number | null): Point[] {
  const out: Point[] = [];
  for (let i = 1; i < rs.length; i++) {
    const a = f(rs[i - 1]);
    const b = f(rs[i]);
    if (a === null || b === null) continue;
    out.push({ t: rs[i].t, v: Math.max(0, b - a) / Math.max(0.001, (rs[i].t - rs[i - 1].t) / 1000) });
  }
  return out;
}

// The mean creation time of the sandboxes made between two readings, in ms (none made: the
// mean of all so far).
function latency(rs: Reading[]): Point[] {
  const out: Point[] = [];
  for (let i = 0; i < rs.length; i++) {
    const r = rs[i];
    if (r.createSum === null || r.createCount === null || r.createCount === 0) continue;
    const p = i > 0 ? rs[i - 1] : null;
    const dn = p && p.createCount !== null ? r.createCount - p.createCount : 0;
    const ds = p && p.createSum !== null ? r.createSum - p.createSum : 0;
    out.push({ t: r.t, v: dn > 0 ? (ds / dn) * 1000 : (r.createSum / r.createCount) * 1000 });
  }
  return out;
}

export function metricsPage(main: HTMLElement, _caps: Caps): () => void {
  const status = h("div", { id: "metrics-status" });
  const grid = h("div", { class: "grid charts", id: "charts" });
  append(main, h("h1", {}, "Metrics"), h("p", { class: "muted" }, `From GET /metrics every ${REFRESH_MS / 1000} s while this page is open.`), status, grid);
  const readings: Reading[] = [];

  function chart(id: string, title: string, points: Point[], latest: string, unit: string, digits: number): HTMLElement {
    return h("section", { class: "card", id }, h("div", { class: "row" }, h("h2", {}, title), h("span", { class: "big" }, latest)), lineChart(points, { unit, digits }));
  }

  async function refresh(): Promise<void> {
    let text: string;
    try {
      text = await (await request("GET", "/metrics", { accept: "text/plain" })).text();
    } catch (err) {
      clear(status);
      append(status, notice(err instanceof Error ? err.message : String(err), "error"));
      return;
    }
    clear(status);
    readings.push(read(parseProm(text), Date.now()));
    if (readings.length > KEEP) readings.shift();
    const last = readings[readings.length - 1];
    const sessions = readings.filter((r) => r.sessions !== null).map((r) => ({ t: r.t, v: r.sessions as number }));
    const lat = latency(readings);
    const ex = rate(readings, (r) => r.executes);
    const errs = rate(readings, (r) => r.errors);
    const lastOf = (p: Point[], digits: number, unit: string) => (p.length ? `${p[p.length - 1].v.toFixed(digits)}${unit}` : "–");
    clear(grid);
    append(
      grid,
      chart("chart-sessions", "Sessions", sessions, last.sessions === null ? "–" : String(last.sessions), "", 0),
      chart("chart-latency", "Creation latency", lat, lastOf(lat, 1, " ms"), " ms", 0),
      chart("chart-executes", "Executes", ex, `${lastOf(ex, 2, "/s")} · ${last.executes ?? 0} total`, "/s", 1),
      chart("chart-errors", "Errors", errs, `${lastOf(errs, 2, "/s")} · ${last.errors} total`, "/s", 1),
    );
  }
  return every(REFRESH_MS, refresh);
}
