// Sessions: the key's sessions (every owner's for an admin key), refreshed every few
// seconds; open one, destroy one, create one.
import { api, ApiError, Caps, Health, Limits, Session, sessionPath } from "./api";
import { append, bytes, clear, duration, every, h, notice, when } from "./dom";

const REFRESH_MS = 3000;

export function resources(l: Limits | undefined): string {
  if (!l) return "–";
  const parts: string[] = [];
  if (l.memoryBytes) parts.push(`${bytes(l.memoryBytes)} RAM`);
  if (l.vcpuCount) parts.push(`${l.vcpuCount} vCPU`);
  if (l.cpuQuotaUs && l.cpuPeriodUs) parts.push(`${(l.cpuQuotaUs / l.cpuPeriodUs).toFixed(2)} CPU`);
  if (l.diskBytes) parts.push(`${bytes(l.diskBytes)} disk`);
  if (l.pidsMax) parts.push(`${l.pidsMax} pids`);
  return parts.join(" · ") || "–";
}

// What a session is doing, as said to a person: a paused one is "paused" (frozen: its
// processes stopped, its memory kept) or "hibernated" (its sandbox freed, its files kept).
export function stateLabel(s: Session): string {
  if (s.state !== "paused") return s.state;
  const how = s.pauseMode === "hibernate" ? "hibernated" : "paused";
  return s.pausedBy && s.pausedBy !== "client" ? `${how} (by ${s.pausedBy})` : how;
}

// The session's idle time: none while paused (its idle clock is stopped then).
export function idleTime(s: Session): string {
  return s.state === "paused" ? "–" : duration(s.idleMs);
}

// When the session goes if nothing happens: its idle timeout less its idle time; never while
// paused or running.
export function idleExpiry(s: Session): string {
  if (s.state === "paused") return "not while paused";
  if (s.running > 0) return "not while running";
  return `in ${duration(s.idleTimeout * 1000 - s.idleMs)}`;
}

export function sessionsPage(main: HTMLElement, caps: Caps): () => void {
  const status = h("div", { id: "sessions-status" });
  const body = h("tbody", { id: "sessions-body" });
  const count = h("span", { class: "muted", id: "sessions-count" });
  const showOwner = caps.admin;
  const head = h(
    "tr",
    {},
    ...["Id", "Template", "Driver", "State", "Idle", "Expires (idle)", "Resources", "Network", ...(showOwner ? ["Owner"] : []), ""].map((t) => h("th", {}, t)),
  );
  let driver = "–";
  // An admin key's view: the names of the keys that own sessions.
  const ownerNames = new Map<string, string>();

  const templateSelect = h("select", { id: "new-template", "aria-label": "template" });
  const idInput = h("input", { id: "new-id", placeholder: "id (optional)", size: 20, "aria-label": "session id" });
  const createStatus = h("span", { class: "muted" });
  const create = h(
    "form",
    { class: "inline", id: "new-session" },
    h("strong", {}, "New session "),
    templateSelect,
    idInput,
    h("button", { type: "submit" }, "Create"),
    createStatus,
  );
  create.addEventListener("submit", (e) => {
    e.preventDefault();
    void (async () => {
      createStatus.textContent = " creating…";
      try {
        const s = await api<Session>("POST", "/exec", {
          json: { template: templateSelect.value || undefined, id: idInput.value.trim() || undefined },
        });
        createStatus.textContent = "";
        location.hash = `#/session/${encodeURIComponent(s.id)}`;
      } catch (err) {
        createStatus.textContent = ` ${err instanceof Error ? err.message : String(err)}`;
      }
    })();
  });

  append(
    main,
    h("div", { class: "row" }, h("h1", {}, "Sessions "), count),
    create,
    status,
    h("table", { class: "list", id: "sessions" }, h("thead", {}, head), body),
  );

  void (async () => {
    try {
      const t = await api<{ templates: { name: string; displayName?: string }[] }>("GET", "/exec/templates");
      for (const m of t.templates) append(templateSelect, h("option", { value: m.name }, m.displayName ? `${m.name} (${m.displayName})` : m.name));
    } catch {
      // the list stays empty: the server's default template is used
    }
  })();
  // What every row shows beside the session's own fields: asked for once, at the same time
  // as the first list, and awaited before the list is drawn, so that its first rows are
  // already right.
  const context = (async () => {
    await Promise.all([
      (async () => {
        try {
          driver = (await api<Health>("GET", "/health")).driver ?? "–";
        } catch {
          // shown as –
        }
      })(),
      (async () => {
        if (!showOwner) return;
        try {
          const k = await api<{ keys: { id: string; name: string }[] }>("GET", "/admin/keys");
          for (const key of k.keys) ownerNames.set(key.id, key.name);
        } catch {
          // owners are shown by key id only
        }
      })(),
    ]);
  })();

  async function destroy(id: string): Promise<void> {
    if (!window.confirm(`Destroy session ${id}? Its sandbox and files go with it.`)) return;
    try {
      await api("DELETE", sessionPath(id));
    } catch (err) {
      clear(status);
      append(status, notice(err instanceof Error ? err.message : String(err), "error"));
    }
    await refresh();
  }

  function row(s: Session): HTMLElement {
    const open = `#/session/${encodeURIComponent(s.id)}`;
    return h(
      "tr",
      { "data-id": s.id },
      h("td", {}, h("a", { href: open, class: "mono" }, s.id)),
      h("td", {}, s.template),
      h("td", {}, driver),
      h("td", {}, h("span", { class: `state ${s.state}${s.pauseMode === "hibernate" ? " hibernated" : ""}`, title: s.error ?? s.note ?? "" }, stateLabel(s))),
      h("td", {}, idleTime(s)),
      h("td", { title: `idle timeout ${s.idleTimeout}s; created ${when(s.createdAt)}` }, idleExpiry(s)),
      h("td", {}, resources(s.limits)),
      h("td", {}, s.network),
      showOwner ? h("td", { class: "owner" }, s.owner ? ownerNames.get(s.owner) ?? "" : "–", s.owner ? h("span", { class: "muted mono" }, ` ${s.owner}`) : null) : null,
      h(
        "td",
        { class: "actions" },
        h("a", { href: open, class: "button" }, "Open"),
        " ",
        h("button", { type: "button", class: "danger", "data-action": "destroy", onclick: () => void destroy(s.id) }, "Destroy"),
      ),
    );
  }

  async function refresh(): Promise<void> {
    try {
      const [r] = await Promise.all([api<{ sessions: Session[]; count: number }>("GET", "/exec"), context]);
      clear(status);
      clear(body);
      const list = [...r.sessions].sort((a, b) => a.createdAt.localeCompare(b.createdAt));
      for (const s of list) append(body, row(s));
      if (!list.length) append(body, h("tr", {}, h("td", { colspan: showOwner ? 10 : 9, class: "muted" }, "No sessions.")));
      count.textContent = `${r.count} session${r.count === 1 ? "" : "s"} · refreshed ${new Date().toLocaleTimeString()}`;
    } catch (err) {
      if (err instanceof ApiError && err.status === 401) return;
      clear(status);
      append(status, notice(err instanceof Error ? err.message : String(err), "error"));
    }
  }

  return every(REFRESH_MS, refresh);
}
