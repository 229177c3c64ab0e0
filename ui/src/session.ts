// One session: what it is, a live terminal, its background processes, its ports and its
// files.
import { api, ApiError, Caps, Session, sessionPath } from "./api";
import { append, bytes, clear, duration, every, h, notice, when } from "./dom";
import { fileBrowser } from "./files";
import { idleExpiry, resources } from "./sessions";
import { openTerminal, TerminalHandle } from "./terminal";

interface Proc {
  pid: number;
  tag?: string | null;
  command: string;
  state: string;
  exitCode?: number | null;
  signal?: string | null;
  startedAt?: number;
  durationMs?: number;
  outputBytes?: number;
  pty?: boolean;
}

// A port listening in the sandbox: its path through this server and, where previews are
// set up, its own address (`url`; `previewUrl` in the first drafts of the route).
interface Port {
  port: number;
  address: string;
  pathUrl: string;
  url?: string | null;
  previewUrl?: string | null;
  public?: boolean;
}

function safeLink(href: string, text: string): HTMLElement {
  // Only this server's paths and http(s) URLs become links.
  let ok = false;
  try {
    const u = new URL(href, location.href);
    ok = u.protocol === "http:" || u.protocol === "https:";
  } catch {
    ok = false;
  }
  if (!ok) return h("span", { class: "mono" }, text);
  return h("a", { href, target: "_blank", rel: "noopener noreferrer", class: "mono" }, text);
}

// A preview address that opens the app: with the session's preview token as the
// sandbox_token parameter, which the server turns into a cookie of that preview (and takes
// out of the address) before the app sees the request.
export function withToken(href: string, token: string | null): string {
  if (!token) return href;
  try {
    const u = new URL(href, location.href);
    u.searchParams.set("sandbox_token", token);
    return u.origin === location.origin && !/^[a-z]+:/i.test(href) ? `${u.pathname}${u.search}${u.hash}` : u.href;
  } catch {
    return href;
  }
}

function portsPanel(id: string): { el: HTMLElement; refresh: () => Promise<boolean>; paused: () => void } {
  const body = h("div", { id: "ports-body" });
  const el = h("section", { class: "card", id: "ports" }, h("h2", {}, "Ports"), body);
  // false once the server turns out not to have the route: polling stops.
  async function refresh(): Promise<boolean> {
    try {
      const [r, token] = await Promise.all([
        api<{ ports: Port[]; truncated?: boolean }>("GET", sessionPath(id, "/ports")),
        // The preview's token: without it a port's link opens to a 401.
        api<{ token?: string }>("GET", sessionPath(id, "/preview")).then(
          (p) => p.token ?? null,
          () => null,
        ),
      ]);
      clear(body);
      if (!r.ports.length) append(body, h("p", { class: "muted" }, "Nothing listens in the sandbox."));
      const ul = h("ul", { class: "ports" });
      for (const p of r.ports) {
        const preview = p.previewUrl ?? p.url ?? null;
        const tok = p.public ? null : token;
        append(
          ul,
          h(
            "li",
            { "data-port": p.port },
            h("span", { class: "mono" }, `${p.address}:${p.port} `),
            safeLink(withToken(p.pathUrl, tok), p.pathUrl),
            preview ? " · " : null,
            preview ? safeLink(withToken(preview, tok), preview) : null,
            p.public ? h("span", { class: "muted" }, " (public)") : null,
          ),
        );
      }
      if (r.ports.length) append(body, ul);
      if (r.truncated) append(body, h("p", { class: "muted" }, "More ports listen than are listed."));
      return true;
    } catch (err) {
      clear(body);
      if (err instanceof ApiError && err.status === 404 && (err.body as { error?: string } | null)?.error === "Not found") {
        append(body, h("p", { class: "muted", id: "ports-unavailable" }, "not available"));
        return false;
      }
      append(body, notice(err instanceof Error ? err.message : String(err), "error"));
      return true;
    }
  }
  function paused(): void {
    clear(body);
    append(body, h("p", { class: "muted" }, "The session is paused: its ports are not reachable until it resumes."));
  }
  return { el, refresh, paused };
}

function processesPanel(id: string): { el: HTMLElement; refresh: () => Promise<void> } {
  const body = h("tbody", { id: "processes-body" });
  const status = h("div");
  const el = h(
    "section",
    { class: "card", id: "processes" },
    h("h2", {}, "Background processes"),
    status,
    h("table", { class: "list" }, h("thead", {}, h("tr", {}, ...["Pid", "Tag", "Command", "State", "Started", "Ran", "Output", ""].map((t) => h("th", {}, t)))), body),
  );
  async function kill(p: Proc): Promise<void> {
    if (!window.confirm(`Kill process ${p.pid} (${p.command})?`)) return;
    try {
      await api("DELETE", sessionPath(id, `/processes/${p.pid}`));
    } catch (err) {
      clear(status);
      append(status, notice(err instanceof Error ? err.message : String(err), "error"));
    }
    await refresh();
  }
  async function refresh(): Promise<void> {
    try {
      const r = await api<{ processes: Proc[] }>("GET", sessionPath(id, "/processes"));
      clear(status);
      clear(body);
      for (const p of r.processes) {
        const state = p.state === "running" ? "running" : p.signal ? `ended by ${p.signal}` : `exited ${p.exitCode}`;
        append(
          body,
          h(
            "tr",
            { "data-pid": p.pid },
            h("td", { class: "mono" }, p.pid),
            h("td", { class: "mono" }, p.tag ?? ""),
            h("td", { class: "mono cmd" }, p.command),
            h("td", {}, state),
            h("td", {}, p.startedAt ? new Date(p.startedAt).toLocaleTimeString() : "–"),
            h("td", {}, duration(p.durationMs)),
            h("td", {}, bytes(p.outputBytes)),
            h("td", {}, p.state === "running" ? h("button", { type: "button", class: "danger", onclick: () => void kill(p) }, "Kill") : null),
          ),
        );
      }
      if (!r.processes.length) append(body, h("tr", {}, h("td", { colspan: 8, class: "muted" }, "No background processes.")));
    } catch (err) {
      clear(status);
      append(status, notice(err instanceof Error ? err.message : String(err), "error"));
    }
  }
  return { el, refresh };
}

export function sessionPage(main: HTMLElement, _caps: Caps, id: string): () => void {
  const info = h("dl", { class: "facts", id: "session-facts" });
  const termStatus = h("span", { class: "muted", id: "terminal-status" });
  const termBox = h("div", { class: "terminal", id: "terminal" });
  const procs = processesPanel(id);
  const ports = portsPanel(id);
  const pageStatus = h("div");
  append(
    main,
    h("div", { class: "row" }, h("h1", {}, "Session ", h("span", { class: "mono" }, id)), h("a", { href: "#/sessions", class: "button" }, "All sessions")),
    pageStatus,
    info,
    h("section", { class: "card" }, h("div", { class: "row" }, h("h2", {}, "Terminal"), termStatus), termBox),
    h("div", { class: "grid" }, procs.el, ports.el),
    fileBrowser(id),
  );

  let term: TerminalHandle | null = null;
  let portsLive = true;
  let found = false;

  async function refresh(): Promise<void> {
    let s: Session | undefined;
    try {
      const r = await api<{ sessions: Session[] }>("GET", "/exec");
      s = r.sessions.find((x) => x.id === id);
    } catch (err) {
      clear(pageStatus);
      append(pageStatus, notice(err instanceof Error ? err.message : String(err), "error"));
      return;
    }
    clear(pageStatus);
    if (!s) {
      append(pageStatus, notice(found ? "This session is gone." : `No session ${id} (for this key).`, "error"));
      return;
    }
    if (!found) {
      found = true;
      term = openTerminal(termBox, id, (text, ok) => {
        termStatus.textContent = text;
        termStatus.className = ok ? "muted" : "error";
      });
    }
    clear(info);
    const facts: [string, string][] = [
      ["Template", s.template],
      ["State", s.state],
      ["Created", when(s.createdAt)],
      ["Idle", duration(s.idleMs)],
      ["Expires (idle)", idleExpiry(s)],
      ["Running", String(s.running)],
      ["Resources", resources(s.limits)],
      ["Network", s.network],
      ["Storage", s.storage ? `${s.storage}${s.disk ? ` (${bytes(s.disk.usedBytes)} of ${bytes(s.disk.sizeBytes)})` : ""}` : "–"],
    ];
    if (s.owner !== undefined) facts.push(["Owner", s.owner || "–"]);
    for (const [k, v] of facts) append(info, h("div", {}, h("dt", {}, k), h("dd", {}, v)));
    await procs.refresh();
    if (portsLive) portsLive = await ports.refresh();
  }

  const stop = every(3000, refresh);
  return () => {
    stop();
    term?.close();
  };
}
