// The MCP Inspector's command-line mode, another client nobody here wrote, over stdio.
import { before, describe, it } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { BASE, KEY_A, CLI, sid } from "./helpers.mjs";

const run = promisify(execFile);
const here = path.dirname(fileURLToPath(import.meta.url));
const inspector = path.join(
  here,
  "node_modules",
  "@modelcontextprotocol",
  "inspector-cli",
  "build",
  "index.js",
);

async function inspect(...args) {
  // Its entry point finds its own package.json through the working directory.
  const { stdout } = await run(process.execPath, [inspector, CLI, "mcp", ...args], {
    cwd: path.dirname(inspector),
    env: { ...process.env, SANDBOX_URL: BASE, SANDBOX_API_KEY: KEY_A },
    timeout: 60000,
  });
  return JSON.parse(stdout);
}

describe("MCP Inspector CLI over stdio", () => {
  // It is among the npm packages the tests install (scripts/install-deps.sh --npm): missing,
  // it is a broken installation, not a reason to skip.
  before(() => {
    assert.ok(
      existsSync(inspector),
      `@modelcontextprotocol/inspector-cli is not installed at ${inspector} ` +
        "(scripts/install-deps.sh --npm installs it)",
    );
  });

  it("lists the tools", async () => {
    const out = await inspect("--method", "tools/list");
    const names = out.tools.map((t) => t.name);
    for (const name of ["execute", "create_session", "read_file", "reset_session"]) {
      assert.ok(names.includes(name), name);
    }
  });

  it("calls execute", async () => {
    const id = sid("inspector");
    const out = await inspect(
      "--method",
      "tools/call",
      "--tool-name",
      "execute",
      "--tool-arg",
      `sessionId=${id}`,
      "--tool-arg",
      "command=echo from the inspector",
    );
    assert.equal(out.isError, undefined);
    assert.equal(out.structuredContent.stdout, "from the inspector\n");
    assert.equal(out.structuredContent.exitCode, 0);
    await inspect(
      "--method",
      "tools/call",
      "--tool-name",
      "reset_session",
      "--tool-arg",
      `sessionId=${id}`,
    );
  });
});
