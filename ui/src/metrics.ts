// Metrics: the server's history of the last hour (GET /metrics/history, one sample every
// 10 s, kept by the daemon) loaded when the page opens, then extended by reading GET
// /metrics every few seconds while it is open; four charts over that time: live sessions,
// sandbox creation latency, executes per second, errors per second.
import { api, Caps, request } from "./api";
import { append, clear, every, h, notice } from "./dom";
import { lineChart, Point } from "./charts";
import { parseProm, Sample, total } from "./prom";
import { fromSample, gauge, HistorySample, lastValue, latency, rate, Reading } from "./series";

const REFRESH_MS = 3000;
const KEEP_MS = 3600 * 1000;

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

export function metricsPage(main: HTMLElement, _caps: Caps): () => void {
  const status = h("div", { id: "metrics-status" });
  const history = h("span", { id: "metrics-history" });
  const count = h("span", { id: "metrics-readings" }, "0");
  const grid = h("div", { class: "grid charts", id: "charts" });
  append(
    main,
    h("h1", {}, "Metrics"),
    h("p", { class: "muted" }, history, ` Then GET /metrics every ${REFRESH_MS / 1000} s while this page is open: `, count, " readings so far."),
    status,
    grid,
  );
  const readings: Reading[] = [];
  let loaded = false;
  let own = 0;

  function chart(id: string, title: string, points: Point[], latest: string, unit: string, digits: number, from: number, to: number): HTMLElement {
    return h(
      "section",
      { class: "card", id },
      h("div", { class: "row" }, h("h2", {}, title), h("span", { class: "big" }, latest)),
      lineChart(points, { unit, digits, from, to }),
    );
  }

  // The server's samples of the last hour, before this page's own readings.
  async function loadHistory(): Promise<void> {
    try {
      const r = await api<{ intervalMs: number; samples: HistorySample[] }>("GET", "/metrics/history");
      readings.unshift(...r.samples.map(fromSample));
      history.textContent = `The server's samples of the last hour (${r.samples.length}, one every ${r.intervalMs / 1000} s).`;
    } catch (err) {
      history.textContent = `No history from the server (${err instanceof Error ? err.message : String(err)}).`;
    }
  }

  async function refresh(): Promise<void> {
    if (!loaded) {
      loaded = true;
      await loadHistory();
    }
    let text: string;
    try {
      text = await (await request("GET", "/metrics", { accept: "text/plain" })).text();
    } catch (err) {
      clear(status);
      append(status, notice(err instanceof Error ? err.message : String(err), "error"));
      return;
    }
    clear(status);
    const now = Date.now();
    readings.push(read(parseProm(text), now));
    count.textContent = String(++own);
    while (readings.length && readings[0].t < now - KEEP_MS) readings.shift();
    const last = readings[readings.length - 1];
    const from = readings[0].t;
    const sessions = gauge(readings, (r) => r.sessions);
    const lat = latency(readings);
    const ex = rate(readings, (r) => r.executes);
    const errs = rate(readings, (r) => r.errors);
    const lastOf = (p: Point[], digits: number, unit: string) => {
      const v = lastValue(p);
      return v === null ? "–" : `${v.toFixed(digits)}${unit}`;
    };
    clear(grid);
    append(
      grid,
      chart("chart-sessions", "Sessions", sessions, last.sessions === null ? "–" : String(last.sessions), "", 0, from, now),
      chart("chart-latency", "Creation latency", lat, lastOf(lat, 1, " ms"), " ms", 0, from, now),
      chart("chart-executes", "Executes", ex, `${lastOf(ex, 2, "/s")} · ${last.executes ?? 0} total`, "/s", 1, from, now),
      chart("chart-errors", "Errors", errs, `${lastOf(errs, 2, "/s")} · ${last.errors ?? 0} total`, "/s", 1, from, now),
    );
  }
  return every(REFRESH_MS, refresh);
}
