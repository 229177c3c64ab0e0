// What the metrics page draws, from readings of the daemon's cumulative counters (the
// server's history, GET /metrics/history, then the page's own readings of GET /metrics):
// values between two readings, or null (a gap) where there is nothing to say.
import { Point } from "./charts";

export interface Reading {
  t: number;
  sessions: number | null;
  createSum: number | null;
  createCount: number | null;
  executes: number | null;
  errors: number | null;
}

// One sample of GET /metrics/history.
export interface HistorySample {
  t: number;
  sessions: number;
  creations: number;
  creationSeconds: number;
  executes: number;
  errors: number;
}

export function fromSample(s: HistorySample): Reading {
  return { t: s.t, sessions: s.sessions, createSum: s.creationSeconds, createCount: s.creations, executes: s.executes, errors: s.errors };
}

// Two readings further apart than this have no sample between them (the daemon was not
// running, or the page was not reading): nothing is drawn there.
export const MAX_GAP_MS = 30000;

// Whether b follows a closely enough to be compared with it, and the same daemon's counters
// (a counter going back: the daemon restarted).
function pair(a: Reading, b: Reading, f: (r: Reading) => number | null): [number, number] | null {
  const x = f(a);
  const y = f(b);
  if (x === null || y === null || y < x || b.t - a.t > MAX_GAP_MS || b.t <= a.t) return null;
  return [x, y];
}

// A gauge as it was read, with a gap where readings are missing.
export function gauge(rs: Reading[], f: (r: Reading) => number | null): Point[] {
  const out: Point[] = [];
  for (let i = 0; i < rs.length; i++) {
    if (i > 0 && rs[i].t - rs[i - 1].t > MAX_GAP_MS) out.push({ t: rs[i - 1].t + 1, v: null });
    out.push({ t: rs[i].t, v: f(rs[i]) });
  }
  return out;
}

// Per second between successive readings of a counter.
export function rate(rs: Reading[], f: (r: Reading) => number | null): Point[] {
  const out: Point[] = [];
  for (let i = 1; i < rs.length; i++) {
    const p = pair(rs[i - 1], rs[i], f);
    out.push({ t: rs[i].t, v: p ? (p[1] - p[0]) / ((rs[i].t - rs[i - 1].t) / 1000) : null });
  }
  return out;
}

// The mean creation time, in ms, of the sandboxes made between two readings; none made: no
// value (a gap), not a zero and not an older mean.
export function latency(rs: Reading[]): Point[] {
  const out: Point[] = [];
  for (let i = 1; i < rs.length; i++) {
    const n = pair(rs[i - 1], rs[i], (r) => r.createCount);
    const s = pair(rs[i - 1], rs[i], (r) => r.createSum);
    const dn = n ? n[1] - n[0] : 0;
    out.push({ t: rs[i].t, v: n && s && dn > 0 ? ((s[1] - s[0]) / dn) * 1000 : null });
  }
  return out;
}

// The last point with a value.
export function lastValue(p: Point[]): number | null {
  for (let i = p.length - 1; i >= 0; i--) if (p[i].v !== null) return p[i].v;
  return null;
}
