// Bundles the dashboard into the directory given as the first argument: app.js (src/main.ts
// and what it imports, xterm.js included), app.css (style.css and xterm's stylesheet) and
// index.html. Everything the page loads is in those three files: nothing comes from
// elsewhere at run time.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, statSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const out = process.argv[2];
if (!out) {
  console.error("usage: node build.mjs OUT_DIR");
  process.exit(2);
}
mkdirSync(out, { recursive: true });

const common = {
  bundle: true,
  minify: true,
  target: ["chrome110", "firefox115", "safari16"],
  legalComments: "eof",
  logLevel: "warning",
  absWorkingDir: here,
};
await build({ ...common, entryPoints: ["src/main.ts"], outfile: join(out, "app.js"), format: "iife" });
await build({ ...common, entryPoints: ["style.css"], outfile: join(out, "app.css") });
copyFileSync(join(here, "index.html"), join(out, "index.html"));
for (const f of ["index.html", "app.js", "app.css"])
  console.log(`ui: ${f} ${statSync(join(out, f)).size} bytes`);
