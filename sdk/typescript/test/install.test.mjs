// `npm install ./sdk/typescript` from the repository's root gives a working package, built on
// install (the package's prepare script). It runs in a copy of the SDK's sources with neither
// dist/ nor node_modules/, as in a fresh checkout.
//
// The suite runs without a network, so npm asks a stand-in registry on loopback for the build's
// dev dependencies: it serves their metadata from the SDK's package-lock.json, and npm takes
// their tarballs from its cache by integrity (they are there since the SDK's own `npm ci`).
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { cpSync, mkdtempSync, rmSync, existsSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

const SDK = resolve(dirname(fileURLToPath(import.meta.url)), "..");
const run = promisify(execFile);

/** Registry documents for the packages of a package-lock.json, one version each. */
function packuments(lockPath) {
  const lock = JSON.parse(readFileSync(lockPath, "utf8"));
  const docs = new Map();
  for (const [key, p] of Object.entries(lock.packages)) {
    if (!key.startsWith("node_modules/") || key.includes("/node_modules/", 1)) continue;
    const name = key.slice("node_modules/".length);
    const tarball =
      p.resolved ?? `https://registry.npmjs.org/${name}/-/${name.split("/").pop()}-${p.version}.tgz`;
    docs.set(name, {
      name,
      "dist-tags": { latest: p.version },
      versions: {
        [p.version]: {
          name,
          version: p.version,
          dependencies: p.dependencies ?? {},
          bin: p.bin,
          dist: { tarball, integrity: p.integrity },
        },
      },
    });
  }
  return docs;
}

async function standInRegistry() {
  const docs = packuments(join(SDK, "package-lock.json"));
  const server = createServer((req, res) => {
    const doc = docs.get(decodeURIComponent(req.url.slice(1)));
    res.writeHead(doc ? 200 : 404, { "Content-Type": "application/json" });
    res.end(JSON.stringify(doc ?? { error: "not found" }));
  });
  await new Promise((r) => server.listen(0, "127.0.0.1", r));
  return { url: `http://127.0.0.1:${server.address().port}/`, close: () => server.close() };
}

test("npm install ./sdk/typescript builds and installs the package", { timeout: 240000 }, async () => {
  const root = mkdtempSync(join(tmpdir(), "sdk-ts-install-"));
  const registry = await standInRegistry();
  try {
    const copy = join(root, "sdk", "typescript");
    for (const f of ["package.json", "package-lock.json", "tsconfig.json", "README.md", "src"])
      cpSync(join(SDK, f), join(copy, f), { recursive: true });
    const npmArgs = ["install", "--prefer-offline", "--no-audit", "--no-fund", "--registry", registry.url];
    await run("npm", [...npmArgs, "./sdk/typescript"], { cwd: root });
    assert.equal(existsSync(join(copy, "dist", "index.js")), true);
    const { stdout } = await run(
      "node",
      [
        "--input-type=module",
        "-e",
        `import { Sandbox } from "@agent-sandbox/sdk";
         const sb = new Sandbox({ baseUrl: "http://127.0.0.1:9", apiKey: "x" });
         console.log(typeof sb.create, await sb.healthy());`,
      ],
      { cwd: root },
    );
    assert.equal(stdout, "function false\n");
  } finally {
    registry.close();
    rmSync(root, { recursive: true, force: true });
  }
});
