// A small line chart in SVG: a series of (time, value) points, its latest value and range.
const SVG = "http://www.w3.org/2000/svg";

function svg<K extends keyof SVGElementTagNameMap>(tag: K, attrs: Record<string, string | number>): SVGElementTagNameMap[K] {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  return el;
}

export interface Point {
  t: number;
  v: number;
}

export function lineChart(points: Point[], opts: { width?: number; height?: number; unit?: string; digits?: number }): SVGSVGElement {
  const w = opts.width ?? 360;
  const hgt = opts.height ?? 120;
  const pad = { l: 44, r: 8, t: 8, b: 18 };
  const root = svg("svg", { viewBox: `0 0 ${w} ${hgt}`, class: "chart", role: "img" });
  const vals = points.map((p) => p.v).filter((v) => Number.isFinite(v));
  const max = Math.max(1e-9, ...vals, 0);
  const min = Math.min(0, ...vals);
  const t0 = points.length ? points[0].t : 0;
  const t1 = points.length ? points[points.length - 1].t : 1;
  const x = (t: number) => pad.l + ((t - t0) / Math.max(1, t1 - t0)) * (w - pad.l - pad.r);
  const y = (v: number) => hgt - pad.b - ((v - min) / Math.max(1e-9, max - min)) * (hgt - pad.t - pad.b);
  const fmt = (v: number) => `${v.toFixed(opts.digits ?? 0)}${opts.unit ?? ""}`;
  root.appendChild(svg("line", { x1: pad.l, y1: y(min), x2: w - pad.r, y2: y(min), class: "axis" }));
  root.appendChild(svg("line", { x1: pad.l, y1: pad.t, x2: pad.l, y2: hgt - pad.b, class: "axis" }));
  const top = svg("text", { x: pad.l - 4, y: pad.t + 8, class: "tick", "text-anchor": "end" });
  top.textContent = fmt(max);
  root.appendChild(top);
  const bottom = svg("text", { x: pad.l - 4, y: hgt - pad.b, class: "tick", "text-anchor": "end" });
  bottom.textContent = fmt(min);
  root.appendChild(bottom);
  const span = svg("text", { x: w - pad.r, y: hgt - 4, class: "tick", "text-anchor": "end" });
  span.textContent = points.length > 1 ? `last ${Math.round((t1 - t0) / 1000)} s` : "collecting…";
  root.appendChild(span);
  const good = points.filter((p) => Number.isFinite(p.v));
  if (good.length > 1) root.appendChild(svg("polyline", { points: good.map((p) => `${x(p.t).toFixed(1)},${y(p.v).toFixed(1)}`).join(" "), class: "series" }));
  for (const p of good.slice(-1)) root.appendChild(svg("circle", { cx: x(p.t), cy: y(p.v), r: 2.5, class: "dot" }));
  return root;
}
