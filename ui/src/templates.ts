// Templates: the manifests of the templates the daemon has loaded (GET /exec/templates).
import { api, Caps } from "./api";
import { append, h, notice, when } from "./dom";

interface Manifest {
  name: string;
  displayName?: string;
  version?: string;
  description?: string;
  tools?: string[];
  baseImage?: string;
  resources?: { memSizeMib?: number; vcpuCount?: number };
  createdAt?: string;
}

export function templatesPage(main: HTMLElement, _caps: Caps): void {
  const list = h("div", { class: "cards", id: "templates" });
  append(main, h("h1", {}, "Templates"), list);
  void (async () => {
    try {
      const r = await api<{ templates: Manifest[] }>("GET", "/exec/templates");
      if (!r.templates.length) append(list, notice("No template is loaded.", "error"));
      for (const m of r.templates) {
        const res = m.resources ?? {};
        append(
          list,
          h(
            "section",
            { class: "card", "data-template": m.name },
            h("h2", {}, m.displayName ?? m.name, " ", h("span", { class: "muted mono" }, `${m.name}${m.version ? ` ${m.version}` : ""}`)),
            m.description ? h("p", {}, m.description) : null,
            h(
              "dl",
              { class: "facts" },
              h("div", {}, h("dt", {}, "Tools"), h("dd", {}, (m.tools ?? []).join(", ") || "–")),
              h("div", {}, h("dt", {}, "Base image"), h("dd", {}, m.baseImage ?? "–")),
              h("div", {}, h("dt", {}, "Resources"), h("dd", {}, `${res.memSizeMib ?? "–"} MiB, ${res.vcpuCount ?? "–"} vCPU`)),
              h("div", {}, h("dt", {}, "Built"), h("dd", {}, when(m.createdAt))),
            ),
            h("details", {}, h("summary", {}, "Manifest"), h("pre", { class: "file" }, JSON.stringify(m, null, 2))),
          ),
        );
      }
    } catch (err) {
      append(list, notice(err instanceof Error ? err.message : String(err), "error"));
    }
  })();
}
