// The file browser of a session: GET /exec/:id/files to navigate, GET /exec/:id/read to view
// (JSON) and download (raw bytes), PUT /exec/:id/file to upload what is dropped on it (raw,
// streamed), POST /exec/:id/remove.
import { api, request, sessionPath } from "./api";
import { append, bytes, clear, h, notice } from "./dom";

interface Entry {
  path: string;
  name: string;
  type: string;
  size: number;
  mode: number;
  mtime: number;
}

function join(dir: string, name: string): string {
  return dir && dir !== "." ? `${dir.replace(/\/+$/, "")}/${name}` : name;
}

function parent(dir: string): string {
  const i = dir.replace(/\/+$/, "").lastIndexOf("/");
  return i <= 0 ? "" : dir.slice(0, i);
}

// The panel, and what its page calls as its session's state changes: reload (it runs: the
// directory shown is read again) and paused (nothing can be read until it resumes).
export interface FileBrowser {
  el: HTMLElement;
  reload(): void;
  paused(): void;
}

export function fileBrowser(sessionId: string): FileBrowser {
  let dir = "";
  const crumbs = h("div", { class: "crumbs mono", id: "files-path" });
  const list = h("tbody", { id: "files-body" });
  const status = h("div", { id: "files-status" });
  const viewer = h("div", { id: "file-view" });
  const drop = h("div", { class: "drop", id: "files-drop", tabindex: 0 }, "Drop files here to upload them into this directory");
  const picker = h("input", { type: "file", multiple: true, id: "files-input", class: "hidden" });
  const panel = h(
    "section",
    { class: "card", id: "files" },
    h("div", { class: "row" }, h("h2", {}, "Files"), h("button", { type: "button", onclick: () => void load(dir) }, "Refresh"), h("button", { type: "button", onclick: () => picker.click() }, "Upload…")),
    crumbs,
    drop,
    picker,
    status,
    h("table", { class: "list" }, h("thead", {}, h("tr", {}, ...["Name", "Type", "Size", "Mode", "Modified", ""].map((t) => h("th", {}, t)))), list),
    viewer,
  );

  function say(text: string, kind: "error" | "info" = "info"): void {
    clear(status);
    if (text) append(status, notice(text, kind));
  }

  async function load(path: string): Promise<void> {
    try {
      const r = await api<{ path: string; files: Entry[]; truncated: boolean }>("GET", sessionPath(sessionId, "/files"), { query: { path: path || undefined } });
      dir = path;
      clear(crumbs);
      append(crumbs, h("a", { href: "#", onclick: (e: Event) => (e.preventDefault(), void load("")) }, "workspace"));
      let acc = "";
      for (const part of path.split("/").filter(Boolean)) {
        acc = join(acc, part);
        const target = acc;
        append(crumbs, " / ", h("a", { href: "#", onclick: (e: Event) => (e.preventDefault(), void load(target)) }, part));
      }
      clear(list);
      if (path) append(list, h("tr", {}, h("td", { colspan: 6 }, h("a", { href: "#", onclick: (e: Event) => (e.preventDefault(), void load(parent(path))) }, ".."))));
      const files = [...r.files].sort((a, b) => (a.type === "dir" ? 0 : 1) - (b.type === "dir" ? 0 : 1) || a.name.localeCompare(b.name));
      for (const f of files) append(list, entryRow(f));
      if (!files.length) append(list, h("tr", {}, h("td", { colspan: 6, class: "muted" }, "Empty directory.")));
      say(r.truncated ? "The listing was cut short (too many entries)." : "");
    } catch (err) {
      say(err instanceof Error ? err.message : String(err), "error");
    }
  }

  function entryRow(f: Entry): HTMLElement {
    const full = join(dir, f.name);
    const name =
      f.type === "dir"
        ? h("a", { href: "#", "data-dir": f.name, onclick: (e: Event) => (e.preventDefault(), void load(full)) }, `${f.name}/`)
        : h("span", {}, f.name);
    return h(
      "tr",
      { "data-name": f.name },
      h("td", { class: "mono" }, name),
      h("td", {}, f.type),
      h("td", {}, f.type === "dir" ? "" : bytes(f.size)),
      h("td", { class: "mono" }, (f.mode & 0o7777).toString(8).padStart(4, "0")),
      h("td", {}, new Date(f.mtime * 1000).toLocaleString()),
      h(
        "td",
        { class: "actions" },
        f.type === "file" ? h("button", { type: "button", "data-action": "view", onclick: () => void view(full) }, "View") : null,
        f.type === "file" ? h("button", { type: "button", "data-action": "download", onclick: () => void download(full, f.name) }, "Download") : null,
        h("button", { type: "button", class: "danger", "data-action": "delete", onclick: () => void remove(full, f.type === "dir") }, "Delete"),
      ),
    );
  }

  async function view(path: string): Promise<void> {
    clear(viewer);
    try {
      const r = await api<{ path: string; content: string; encoding: string; size: number }>("GET", sessionPath(sessionId, "/read"), { query: { path } });
      const text = r.encoding === "utf8" ? r.content : `(binary, ${bytes(r.size)}: use Download)`;
      append(viewer, h("div", { class: "row" }, h("h3", { class: "mono" }, r.path), h("button", { type: "button", onclick: () => clear(viewer) }, "Close")), h("pre", { class: "file", id: "file-content" }, text));
    } catch (err) {
      say(err instanceof Error ? err.message : String(err), "error");
    }
  }

  async function download(path: string, name: string): Promise<void> {
    try {
      const res = await request("GET", sessionPath(sessionId, "/read"), { query: { path }, accept: "application/octet-stream" });
      const blob = await res.blob();
      const href = URL.createObjectURL(blob);
      const a = h("a", { href, download: name, class: "hidden" });
      document.body.appendChild(a);
      a.click();
      a.remove();
      window.setTimeout(() => URL.revokeObjectURL(href), 60000);
      say(`Downloaded ${name} (${bytes(blob.size)}).`);
    } catch (err) {
      say(err instanceof Error ? err.message : String(err), "error");
    }
  }

  async function remove(path: string, isDir: boolean): Promise<void> {
    if (!window.confirm(`Delete ${path}${isDir ? " and everything in it" : ""}?`)) return;
    try {
      await api("POST", sessionPath(sessionId, "/remove"), { json: { path, recursive: isDir } });
    } catch (err) {
      say(err instanceof Error ? err.message : String(err), "error");
    }
    await load(dir);
  }

  async function upload(files: FileList | File[]): Promise<void> {
    const all = Array.from(files);
    let done = 0;
    for (const f of all) {
      say(`Uploading ${f.name} (${bytes(f.size)})…`);
      try {
        await api("PUT", sessionPath(sessionId, "/file"), { query: { path: join(dir, f.name) }, body: f });
        done++;
      } catch (err) {
        say(`${f.name}: ${err instanceof Error ? err.message : String(err)}`, "error");
        await load(dir);
        return;
      }
    }
    await load(dir);
    say(`Uploaded ${done} file${done === 1 ? "" : "s"}.`);
  }

  drop.addEventListener("dragover", (e) => {
    e.preventDefault();
    drop.classList.add("over");
  });
  drop.addEventListener("dragleave", () => drop.classList.remove("over"));
  drop.addEventListener("drop", (e) => {
    e.preventDefault();
    drop.classList.remove("over");
    if (e.dataTransfer?.files.length) void upload(e.dataTransfer.files);
  });
  picker.addEventListener("change", () => {
    if (picker.files?.length) void upload(picker.files);
    picker.value = "";
  });

  return {
    el: panel,
    reload: () => void load(dir),
    paused() {
      clear(list);
      say("The session is paused: its files are read again once it resumes.");
    },
  };
}
