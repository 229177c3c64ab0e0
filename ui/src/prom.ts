// A reader of the Prometheus text exposition (what GET /metrics answers): samples with
// their labels. Lines it cannot read are skipped (and NaN values, which nothing charts); it
// never throws on what a server sends.

export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;

function parseLabels(s: string, at: number, out: Record<string, string>): number {
  // s[at] is "{"; returns the index after "}", or -1.
  let i = at + 1;
  for (;;) {
    while (s[i] === " " || s[i] === ",") i++;
    if (s[i] === "}") return i + 1;
    const m = /^[a-zA-Z_][a-zA-Z0-9_]*/.exec(s.slice(i, i + 200));
    if (!m) return -1;
    i += m[0].length;
    if (s[i] !== "=" || s[i + 1] !== '"') return -1;
    i += 2;
    let v = "";
    for (;;) {
      const c = s[i];
      if (c === undefined) return -1;
      if (c === '"') break;
      if (c === "\\") {
        const n = s[i + 1];
        v += n === "n" ? "\n" : (n ?? "");
        i += 2;
        continue;
      }
      v += c;
      i++;
    }
    i++;
    out[m[0]] = v;
  }
}

export function parseProm(text: string): Sample[] {
  const out: Sample[] = [];
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (!line || line.startsWith("#")) continue;
    const m = NAME.exec(line);
    if (!m) continue;
    const labels: Record<string, string> = {};
    let i = m[0].length;
    if (line[i] === "{") {
      i = parseLabels(line, i, labels);
      if (i < 0) continue;
    }
    const rest = line.slice(i).trim().split(/\s+/);
    const value = rest[0] === "+Inf" ? Infinity : rest[0] === "-Inf" ? -Infinity : Number(rest[0]);
    if (rest[0] === undefined || rest[0] === "" || Number.isNaN(value)) continue;
    out.push({ name: m[0], labels, value });
  }
  return out;
}

// The sum of every sample of `name` whose labels pass `where`.
export function total(samples: Sample[], name: string, where: (l: Record<string, string>) => boolean = () => true): number | null {
  let sum = 0;
  let seen = false;
  for (const s of samples)
    if (s.name === name && where(s.labels)) {
      sum += s.value;
      seen = true;
    }
  return seen ? sum : null;
}
