// One session: what it is, a live terminal, its background processes, its ports and its
// files.
import { api, ApiError, Caps, Session, sessionPath } from "./api";
import { append, bytes, clear, duration, every, h, notice, when } from "./dom";
import { fileBrowser } from "./files";
import { idleExpiry, idleTime, resources, stateLabel } from "./sessions";
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

function processesPanel(id: string): { el: HTMLElement; refresh: () => Promise<void>; paused: (s: Session) => void } {
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
  function paused(s: Session): void {
    clear(status);
    clear(body);
    const text = s.processesKept === false ? "Hibernated: its processes were ended; a resume starts it afresh over its files." : "Paused: its processes are stopped where they are and carry on after a resume.";
    append(body, h("tr", {}, h("td", { colspan: 8, class: "muted" }, text)));
  }
  return { el, refresh, paused };
}

type Action = "pause" | "hibernate" | "resume";

export function sessionPage(main: HTMLElement, _caps: Caps, id: string): () => void {
  const info = h("dl", { class: "facts", id: "session-facts" });
  const termStatus = h("span", { class: "muted", id: "terminal-status" });
  const termBox = h("div", { class: "terminal", id: "terminal" });
  const procs = processesPanel(id);
  const ports = portsPanel(id);
  const files = fileBrowser(id);
  const pageStatus = h("div");
  const actionStatus = h("span", { class: "muted", id: "session-action-status" });
  const buttons: Record<Action, HTMLButtonElement> = {
    pause: h("button", { type: "button", id: "session-pause", title: "Freeze its processes; its memory is kept", onclick: () => void act("pause") }, "Pause"),
    hibernate: h(
      "button",
      { type: "button", id: "session-hibernate", title: "Free its sandbox and keep it on disk (a jail's: its files only; its processes are ended)", onclick: () => void act("hibernate") },
      "Hibernate",
    ),
    resume: h("button", { type: "button", id: "session-resume", onclick: () => void act("resume") }, "Resume"),
  };
  append(
    main,
    h(
      "div",
      { class: "row" },
      h("h1", {}, "Session ", h("span", { class: "mono" }, id)),
      h("div", { class: "actions", id: "session-actions" }, buttons.pause, " ", buttons.hibernate, " ", buttons.resume, actionStatus, " ", h("a", { href: "#/sessions", class: "button" }, "All sessions")),
    ),
    pageStatus,
    info,
    h("section", { class: "card" }, h("div", { class: "row" }, h("h2", {}, "Terminal"), termStatus), termBox),
    h("div", { class: "grid" }, procs.el, ports.el),
    files.el,
  );

  let term: TerminalHandle | null = null;
  let portsLive = true;
  let found = false;
  let stopped = false;
  let busy = false; // an action runs: the periodic refresh waits
  let current: Session | null = null;
  let filesShown = false; // the file browser shows a running session's files
  let loading: Promise<void> | null = null;

  function setStatus(text: string, ok: boolean): void {
    termStatus.textContent = text;
    termStatus.className = ok ? "muted" : "error";
  }

  // Which actions the session's state allows (the server decides anyway).
  function showButtons(): void {
    const s = current;
    const ready = s?.state === "ready";
    const frozen = s?.state === "paused" && s.pauseMode !== "hibernate";
    buttons.pause.disabled = busy || !ready;
    buttons.hibernate.disabled = busy || !(ready || frozen);
    buttons.resume.disabled = busy || s?.state !== "paused";
  }

  function showFacts(s: Session): void {
    current = s;
    clear(info);
    const facts: [string, string, string?][] = [
      ["Template", s.template],
      ["State", stateLabel(s), "session-state"],
      ["Created", when(s.createdAt)],
      ["Idle", idleTime(s)],
      ["Expires (idle)", idleExpiry(s), "session-expiry"],
      ["Running", String(s.running)],
      ["Resources", resources(s.limits)],
      ["Network", s.network],
      ["Storage", s.storage ? `${s.storage}${s.disk ? ` (${bytes(s.disk.usedBytes)} of ${bytes(s.disk.sizeBytes)})` : ""}` : "–"],
    ];
    if (s.state === "paused") facts.splice(2, 0, ["Paused", `${when(s.pausedAt)}${s.pausedBy ? ` by ${s.pausedBy}` : ""}`]);
    if (s.owner !== undefined) facts.push(["Owner", s.owner || "–"]);
    for (const [k, v, elId] of facts) append(info, h("div", {}, h("dt", {}, k), h("dd", elId ? { id: elId } : {}, v)));
    if (s.note) append(info, h("div", { class: "wide" }, h("dt", {}, "Note"), h("dd", {}, s.note)));
    showButtons();
  }

  // The terminal follows the session: open while it runs, closed while it is paused.
  async function syncTerminal(s: Session): Promise<void> {
    if (s.state === "ready" && !term && !stopped) {
      term = openTerminal(termBox, id, setStatus);
    } else if (s.state === "paused") {
      if (term) {
        const t = term;
        term = null;
        await t.close();
      }
      setStatus(s.pauseMode === "hibernate" ? "closed: the session is hibernated; Resume starts it again" : "closed: the session is paused; Resume opens a new terminal", true);
    }
  }

  async function load(): Promise<void> {
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
      current = null;
      showButtons();
      return;
    }
    found = true;
    showFacts(s);
    await syncTerminal(s);
    if (s.state === "paused") {
      procs.paused(s);
      if (portsLive) ports.paused();
      files.paused();
      filesShown = false;
      return;
    }
    if (!filesShown && s.state === "ready") {
      filesShown = true;
      files.reload();
    }
    await procs.refresh();
    if (portsLive) portsLive = await ports.refresh();
  }

  async function refresh(): Promise<void> {
    if (busy || stopped) return;
    loading = load();
    try {
      await loading;
    } finally {
      loading = null;
    }
  }

  async function act(a: Action): Promise<void> {
    if (busy) return;
    busy = true;
    showButtons();
    actionStatus.textContent = ` ${a === "resume" ? "resuming" : a === "hibernate" ? "hibernating" : "pausing"}…`;
    try {
      // What this page has in flight ends first: the server refuses a pause while the
      // session has operations in flight, and the terminal's is one.
      if (loading) await loading.catch(() => undefined);
      if (a !== "resume" && term) {
        const t = term;
        term = null;
        setStatus("closing for the pause…", true);
        await t.close();
      }
      const body = a === "resume" ? {} : { mode: a === "hibernate" ? "hibernate" : "freeze" };
      const s = await api<Session>("POST", sessionPath(id, a === "resume" ? "/resume" : "/pause"), { json: body });
      actionStatus.textContent = "";
      clear(pageStatus);
      showFacts(s);
    } catch (err) {
      actionStatus.textContent = "";
      clear(pageStatus);
      append(pageStatus, notice(`${a}: ${err instanceof Error ? err.message : String(err)}`, "error"));
    } finally {
      busy = false;
    }
    await refresh();
  }

  const stop = every(3000, refresh);
  return () => {
    stopped = true;
    stop();
    void term?.close();
  };
}
