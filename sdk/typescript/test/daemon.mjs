// Starts a real sandboxd for the tests: PORT=0 with a port file, fresh state and run dirs,
// and the admin key the daemon prints on its first start.
import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, existsSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve, dirname } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");

export async function startDaemon(extraEnv = {}) {
  const dir = mkdtempSync(join(tmpdir(), "sdk-ts-"));
  const portFile = join(dir, "port");
  const bin = process.env.SANDBOXD || join(ROOT, "build", "src", "sandboxd");
  let stderr = "";
  const child = spawn(bin, [], {
    env: {
      ...process.env,
      PORT: "0",
      HOST: "127.0.0.1",
      SANDBOX_PORT_FILE: portFile,
      SANDBOX_STATE_DIR: join(dir, "state"),
      SANDBOX_RUN_DIR: join(dir, "run"),
      SANDBOX_DRIVER: process.env.DRIVER || "jail",
      SANDBOX_DEFAULT_TEMPLATE: "base",
      SANDBOX_WARM_POOL: "1",
      ...extraEnv,
    },
    stdio: ["ignore", "ignore", "pipe"],
  });
  child.stderr.on("data", (d) => (stderr += d));
  const deadline = Date.now() + 30000;
  while (!existsSync(portFile)) {
    if (child.exitCode !== null) throw new Error(`sandboxd exited: ${stderr}`);
    if (Date.now() > deadline) throw new Error(`sandboxd did not start: ${stderr}`);
    await new Promise((r) => setTimeout(r, 50));
  }
  const port = readFileSync(portFile, "utf8").trim();
  // Not a terminal: the first start's key is in a JSON log line's "key".
  const key = /"key":"(sk_[^"]+)"/.exec(stderr)?.[1];
  return {
    baseUrl: `http://127.0.0.1:${port}`,
    apiKey: key,
    async stop() {
      const exited = new Promise((r) => child.once("exit", (code) => r(code)));
      child.kill("SIGTERM");
      const code = await exited;
      rmSync(dir, { recursive: true, force: true });
      if (code !== 0) throw new Error(`sandboxd exited with ${code}: ${stderr.slice(-2000)}`);
    },
  };
}
