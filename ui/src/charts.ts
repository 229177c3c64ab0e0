// A small line chart in SVG: a series of (time, value) points over a time axis, a value
// axis from its range, and gaps where a point has no value (null): nothing is drawn where
// nothing was measured.
const SVG = "http://www.w3.org/2000/svg";

function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number>): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

export interface Point {
  t: number;
  v: number | null;
}

// Steps of the time axis, in seconds: the first that gives at most five ticks.
const STEPS = [10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200];

export function timeTicks(t0: number, t1: number, most = 5): { t: number; label: string }[] {
  const span = Math.max(1, (t1 - t0) / 1000);
  const step = (STEPS.find((s) => span / s <= most) ?? STEPS[STEPS.length - 1]) * 1000;
  const out: { t: number; label: string }[] = [];
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
    const d = new Date(t);
    const hm = `${String(d.getHours()).padStart(2, "0")}:${String(d.getMinutes()).padStart(2, "0")}`;
    out.push({ t, label: step < 60000 ? `${hm}:${String(d.getSeconds()).padStart(2, "0")}` : hm });
  }
  return out;
}

// Runs of consecutive points with a value: each is drawn on its own.
export function runs(points: Point[]): Point[][] {
  const out: Point[][] = [];
  let cur: Point[] = [];
  for (const p of points) {
    if (p.v === null || !Number.isFinite(p.v)) {
      if (cur.length) out.push(cur);
      cur = [];
    } else cur.push(p);
  }
  if (cur.length) out.push(cur);
  return out;
}

export interface ChartOptions {
  width?: number;
  height?: number;
  unit?: string;
  digits?: number;
  // The time axis's span (default: the points' own).
  from?: number;
  to?: number;
}

export function lineChart(points: Point[], opts: ChartOptions): SVGSVGElement {
  const w = opts.width ?? 360;
  const hgt = opts.height ?? 130;
  const pad = { l: 44, r: 10, t: 8, b: 28 };
  const root = svg("svg", { viewBox: `0 0 ${w} ${hgt}`, class: "chart", role: "img" });
  const vals = points.map((p) => p.v).filter((v): v is number => v !== null && Number.isFinite(v));
  const min = Math.min(0, ...vals);
  // A flat series (all zero, say) still gets an axis with two different ends.
  const top = Math.max(0, ...vals);
  const max = top - min < 1e-9 ? min + 1 : top;
  const t0 = opts.from ?? (points.length ? points[0].t : 0);
  const t1 = Math.max(t0 + 1, opts.to ?? (points.length ? points[points.length - 1].t : 1));
  root.setAttribute("data-from", String(t0));
  root.setAttribute("data-to", String(t1));
  const x = (t: number) => pad.l + ((t - t0) / (t1 - t0)) * (w - pad.l - pad.r);
  const y = (v: number) => hgt - pad.b - ((v - min) / Math.max(1e-9, max - min)) * (hgt - pad.t - pad.b);
  const fmt = (v: number) => `${v.toFixed(opts.digits ?? 0)}${opts.unit ?? ""}`;
  const text = (attrs: Record<string, string | number>, s: string) => {
    const el = svg("text", attrs);
    el.textContent = s;
    root.appendChild(el);
  };
  // The value axis: its range at its ends.
  root.appendChild(svg("line", { x1: pad.l, y1: pad.t, x2: pad.l, y2: hgt - pad.b, class: "axis y-axis" }));
  text({ x: pad.l - 4, y: pad.t + 8, class: "tick y-tick", "text-anchor": "end" }, fmt(max));
  text({ x: pad.l - 4, y: hgt - pad.b, class: "tick y-tick", "text-anchor": "end" }, fmt(min));
  // The time axis: clock times at round steps.
  root.appendChild(svg("line", { x1: pad.l, y1: y(min), x2: w - pad.r, y2: y(min), class: "axis x-axis" }));
  for (const tick of timeTicks(t0, t1)) {
    const tx = x(tick.t);
    root.appendChild(svg("line", { x1: tx, y1: hgt - pad.b, x2: tx, y2: hgt - pad.b + 3, class: "axis" }));
    text({ x: tx, y: hgt - pad.b + 13, class: "tick x-tick", "text-anchor": "middle", "data-t": tick.t }, tick.label);
  }
  if (!points.length) text({ x: w - pad.r, y: hgt - 2, class: "tick", "text-anchor": "end" }, "collecting…");
  // Each run says when it starts and ends (data-first, data-last).
  for (const run of runs(points)) {
    const span = { "data-first": run[0].t, "data-last": run[run.length - 1].t };
    if (run.length > 1)
      root.appendChild(svg("polyline", { points: run.map((p) => `${x(p.t).toFixed(1)},${y(p.v as number).toFixed(1)}`).join(" "), class: "series", ...span }));
    else root.appendChild(svg("circle", { cx: x(run[0].t), cy: y(run[0].v as number), r: 1.8, class: "dot lone", ...span }));
  }
  const last = points[points.length - 1];
  if (last && last.v !== null && Number.isFinite(last.v)) root.appendChild(svg("circle", { cx: x(last.t), cy: y(last.v), r: 2.5, class: "dot last" }));
  return root;
}
