// API keys (admin): list, create (the secret shown once), rotate (a new secret, shown once),
// revoke, delete.
import { api, Caps } from "./api";
import { append, clear, h, notice, when } from "./dom";

interface Key {
  id: string;
  name: string;
  prefix: string;
  scopes: string[];
  rateLimit: number;
  enabled: boolean;
  createdAt: string;
  lastUsedAt: string | null;
  expiresAt: string | null;
}

interface Created extends Key {
  key: string;
}

export function keysPage(main: HTMLElement, _caps: Caps): void {
  const body = h("tbody", { id: "keys-body" });
  const status = h("div", { id: "keys-status" });
  const secret = h("div", { id: "key-secret" });
  const name = h("input", { id: "key-name", placeholder: "name", required: true, size: 18, "aria-label": "name" });
  const scopeBoxes = ["exec", "admin", "metrics"].map((s) => ({ s, box: h("input", { type: "checkbox", id: `scope-${s}`, value: s, checked: s === "exec" }) }));
  const rate = h("input", { id: "key-rate", type: "number", min: 0, placeholder: "requests/min", size: 10, "aria-label": "rate limit" });
  const expires = h("input", { id: "key-expires", placeholder: "expires in (30d)", size: 12, "aria-label": "expires in" });
  const form = h(
    "form",
    { class: "inline", id: "new-key" },
    h("strong", {}, "New key "),
    name,
    ...scopeBoxes.map(({ s, box }) => h("label", { class: "check" }, box, ` ${s}`)),
    rate,
    expires,
    h("button", { type: "submit" }, "Create"),
  );

  function say(text: string, kind: "error" | "info" = "info"): void {
    clear(status);
    if (text) append(status, notice(text, kind));
  }

  // The secret is shown here once and kept nowhere.
  function showSecret(k: Created, what: string): void {
    clear(secret);
    const value = h("code", { class: "secret", id: "key-secret-value" }, k.key);
    append(
      secret,
      h(
        "div",
        { class: "card warn" },
        h("p", {}, `${what} key ${k.name} (${k.id}). Its secret is shown only now: store it.`),
        value,
        " ",
        h("button", { type: "button", onclick: () => void navigator.clipboard?.writeText(k.key) }, "Copy"),
        " ",
        h("button", { type: "button", id: "key-secret-dismiss", onclick: () => clear(secret) }, "Done"),
      ),
    );
  }

  form.addEventListener("submit", (e) => {
    e.preventDefault();
    void (async () => {
      const body: Record<string, unknown> = { name: name.value.trim(), scopes: scopeBoxes.filter((b) => b.box.checked).map((b) => b.s) };
      if (rate.value) body.rateLimit = Number(rate.value);
      if (expires.value.trim()) body.expiresIn = /^\d+$/.test(expires.value.trim()) ? Number(expires.value.trim()) : expires.value.trim();
      try {
        const k = await api<Created>("POST", "/admin/keys", { json: body });
        name.value = "";
        showSecret(k, "Created");
        say("");
      } catch (err) {
        say(err instanceof Error ? err.message : String(err), "error");
      }
      await refresh();
    })();
  });

  async function act(k: Key, verb: "rotate" | "revoke" | "delete"): Promise<void> {
    const q = { rotate: "Rotate (the current secret stops working)", revoke: "Revoke", delete: "Delete" }[verb];
    if (!window.confirm(`${q} key ${k.name} (${k.id})?`)) return;
    try {
      if (verb === "delete") await api("DELETE", `/admin/keys/${encodeURIComponent(k.id)}`);
      else {
        const r = await api<Created>("POST", `/admin/keys/${encodeURIComponent(k.id)}/${verb}`, { json: {} });
        if (verb === "rotate") showSecret(r, "Rotated");
      }
      say(verb === "rotate" ? "" : `Key ${k.name} ${verb === "revoke" ? "revoked" : "deleted"}.`);
    } catch (err) {
      say(err instanceof Error ? err.message : String(err), "error");
    }
    await refresh();
  }

  async function refresh(): Promise<void> {
    try {
      const r = await api<{ keys: Key[] }>("GET", "/admin/keys");
      clear(body);
      for (const k of r.keys) {
        append(
          body,
          h(
            "tr",
            { "data-id": k.id, "data-name": k.name },
            h("td", {}, k.name),
            h("td", { class: "mono" }, k.id),
            h("td", { class: "mono" }, `${k.prefix}…`),
            h("td", {}, k.scopes.join(", ")),
            h("td", {}, k.rateLimit ? `${k.rateLimit}/min` : "none"),
            h("td", { class: "state-cell" }, k.enabled ? "active" : "revoked"),
            h("td", {}, when(k.createdAt)),
            h("td", {}, when(k.lastUsedAt)),
            h("td", {}, k.expiresAt ? when(k.expiresAt) : "never"),
            h(
              "td",
              { class: "actions" },
              k.enabled ? h("button", { type: "button", "data-action": "rotate", onclick: () => void act(k, "rotate") }, "Rotate") : null,
              k.enabled ? h("button", { type: "button", class: "danger", "data-action": "revoke", onclick: () => void act(k, "revoke") }, "Revoke") : null,
              h("button", { type: "button", class: "danger", "data-action": "delete", onclick: () => void act(k, "delete") }, "Delete"),
            ),
          ),
        );
      }
    } catch (err) {
      say(err instanceof Error ? err.message : String(err), "error");
    }
  }

  append(
    main,
    h("h1", {}, "API keys"),
    form,
    secret,
    status,
    h(
      "table",
      { class: "list", id: "keys" },
      h("thead", {}, h("tr", {}, ...["Name", "Id", "Prefix", "Scopes", "Rate limit", "State", "Created", "Last used", "Expires", ""].map((t) => h("th", {}, t)))),
      body,
    ),
  );
  void refresh();
}
