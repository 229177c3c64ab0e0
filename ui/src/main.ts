// The dashboard: sign-in, navigation and the pages (sessions, one session, templates, keys,
// metrics), each a function that fills the main element and returns what stops it.
import { ApiError, Caps, clearKey, getKey, probeCaps, setKey, setUnauthorizedHandler } from "./api";
import { append, clear, h, notice } from "./dom";
import { keysPage } from "./keys";
import { metricsPage } from "./metrics";
import { sessionPage } from "./session";
import { sessionsPage } from "./sessions";
import { templatesPage } from "./templates";

export type Stop = () => void;
export type Page = (main: HTMLElement, caps: Caps, arg: string) => Stop | void;

installStyleSheetShim();

let caps: Caps | null = null;
let stopPage: Stop | void = undefined;
let signInMessage = "";

const pages: Record<string, { title: string; page: Page; needs?: keyof Caps; nav: boolean }> = {
  sessions: { title: "Sessions", page: sessionsPage, needs: "exec", nav: true },
  session: { title: "Session", page: sessionPage, needs: "exec", nav: false },
  templates: { title: "Templates", page: templatesPage, needs: "exec", nav: true },
  keys: { title: "API keys", page: keysPage, needs: "admin", nav: true },
  metrics: { title: "Metrics", page: metricsPage, needs: "metrics", nav: true },
};

function route(): { name: string; arg: string } {
  const m = /^#\/([a-z]+)(?:\/(.*))?$/.exec(location.hash);
  if (!m) return { name: "sessions", arg: "" };
  let arg = "";
  try {
    arg = decodeURIComponent(m[2] ?? "");
  } catch {
    arg = "";
  }
  return { name: m[1], arg };
}

function main(): HTMLElement {
  return document.getElementById("main") as HTMLElement;
}

function renderNav(): void {
  const nav = document.getElementById("nav") as HTMLElement;
  const who = document.getElementById("who") as HTMLElement;
  clear(nav);
  clear(who);
  if (!caps) return;
  const current = route().name;
  for (const [name, p] of Object.entries(pages)) {
    if (!p.nav || (p.needs && !caps[p.needs])) continue;
    const active = current === name || (name === "sessions" && current === "session");
    append(nav, h("a", { href: `#/${name}`, class: active ? "active" : "", "data-page": name }, p.title));
  }
  const key = getKey() ?? "";
  const scopes = (Object.keys(caps) as (keyof Caps)[]).filter((k) => caps?.[k]);
  append(
    who,
    h("span", { class: "muted", title: "the signed-in key (its first characters) and what it may do" }, `${key.slice(0, 12)}… · ${scopes.join(", ") || "no scope"}`),
    " ",
    h("button", { type: "button", class: "link", id: "sign-out", onclick: () => signOut("") }, "Sign out"),
  );
}

function signOut(message: string): void {
  clearKey();
  caps = null;
  signInMessage = message;
  if (location.hash !== "#/signin") location.hash = "#/signin";
  else render();
}

function signInPage(el: HTMLElement): void {
  const input = h("input", { type: "password", id: "key", name: "key", autocomplete: "off", placeholder: "sk_test_…", required: true, size: 44 });
  const status = h("div", { id: "signin-status" });
  if (signInMessage) append(status, notice(signInMessage, "error"));
  const form = h(
    "form",
    { class: "card signin", id: "signin" },
    h("h1", {}, "Sign in"),
    h("p", { class: "muted" }, "Paste an API key. It is kept in this tab only (sessionStorage) and sent in a header with each request."),
    h("label", { for: "key" }, "API key"),
    input,
    h("button", { type: "submit" }, "Sign in"),
    status,
  );
  form.addEventListener("submit", (e) => {
    e.preventDefault();
    void (async () => {
      clear(status);
      setKey(input.value.trim());
      try {
        caps = await probeCaps();
        signInMessage = "";
        input.value = "";
        const first = caps.exec ? "sessions" : caps.admin ? "keys" : caps.metrics ? "metrics" : "sessions";
        location.hash = `#/${first}`;
        render();
      } catch (err) {
        clearKey();
        caps = null;
        append(status, notice(err instanceof Error ? err.message : String(err), "error"));
      }
    })();
  });
  append(el, form);
  input.focus();
}

function render(): void {
  if (stopPage) stopPage();
  stopPage = undefined;
  const el = main();
  clear(el);
  const r = route();
  if (!caps || r.name === "signin") {
    if (caps && r.name === "signin") {
      location.hash = "#/sessions";
      return;
    }
    renderNav();
    signInPage(el);
    return;
  }
  renderNav();
  const p = pages[r.name];
  if (!p) {
    append(el, notice(`No page ${r.name}`, "error"));
    return;
  }
  document.title = `${p.title} · agent-sandbox`;
  if (p.needs && !caps[p.needs]) {
    append(el, h("h1", {}, p.title), notice(`This key has no \`${p.needs}\` scope: the ${p.title.toLowerCase()} page is not available to it.`, "error"));
    return;
  }
  stopPage = p.page(el, caps, r.arg);
}

async function start(): Promise<void> {
  setUnauthorizedHandler((msg) => signOut(msg));
  if (getKey()) {
    try {
      caps = await probeCaps();
    } catch (err) {
      clearKey();
      signInMessage = err instanceof ApiError ? err.message : String(err);
    }
  }
  window.addEventListener("hashchange", render);
  render();
}

// xterm.js writes its computed styles (cell size, theme colours) into <style> elements,
// which this page's CSP (style-src 'self') refuses, even empty. A style element asked for
// through createElement is given as an inert stand-in (a <template>, which renders nothing)
// whose text goes into a constructed stylesheet (CSSOM, which the CSP allows) instead, so
// that the terminal renders under the CSP with no violation. The page makes none itself.
function installStyleSheetShim(): void {
  const doc = document;
  const create = doc.createElement.bind(doc) as (tag: string, opts?: ElementCreationOptions) => HTMLElement;
  const shimmed = function (tag: string, opts?: ElementCreationOptions): HTMLElement {
    if (tag.toLowerCase() !== "style") return create(tag, opts);
    const el = create("template");
    const sheet = new CSSStyleSheet();
    doc.adoptedStyleSheets = [...doc.adoptedStyleSheets, sheet];
    let text = "";
    Object.defineProperty(el, "textContent", {
      get: () => text,
      set: (v: unknown) => {
        text = v === null || v === undefined ? "" : String(v);
        sheet.replaceSync(text);
      },
    });
    const remove = el.remove.bind(el);
    el.remove = () => {
      doc.adoptedStyleSheets = doc.adoptedStyleSheets.filter((s) => s !== sheet);
      remove();
    };
    return el;
  };
  doc.createElement = shimmed as typeof doc.createElement;
}

void start();
