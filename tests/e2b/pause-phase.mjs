// One phase of a pause that outlives the daemon, with the stock `e2b` SDK (driven by
// tests/e2e/test_qemu_lifecycle.py, which restarts the daemon between the phases):
//   node pause-phase.mjs pause          a sandbox with a background counter, then betaPause;
//                                       prints {"sandboxId", "pid", "count"}
//   node pause-phase.mjs connect ID PID Sandbox.connect resumes it; checks the counter process
//                                       is the same and counts on; prints {"count", "after"}
// E2B_API_URL, E2B_SANDBOX_URL, E2B_DOMAIN and E2B_API_KEY point the SDK at the daemon.
import { Sandbox } from "e2b";

const COUNTER = "i=0; while :; do i=$((i+1)); echo $i > c.tmp && mv c.tmp count; sleep 0.05; done";

async function until(cond, what, tries = 300) {
  for (let i = 0; i < tries; i++) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`timed out waiting for ${what}`);
}

const count = async (sbx) => Number(await sbx.files.read("count").catch(() => "0"));

const [phase, id, pid] = process.argv.slice(2);
if (phase === "pause") {
  const sbx = await Sandbox.create("base", { timeoutMs: 600_000 });
  await sbx.files.write("kept.txt", "kept");
  const h = await sbx.commands.run(COUNTER, { background: true, timeoutMs: 0 });
  await until(async () => (await count(sbx)) > 3, "the counter");
  const n = await count(sbx);
  const paused = await sbx.betaPause();
  if (paused !== true) throw new Error(`betaPause answered ${paused}`);
  const info = await sbx.getInfo();
  if (info.state !== "paused") throw new Error(`state ${info.state} after the pause`);
  console.log(JSON.stringify({ sandboxId: sbx.sandboxId, pid: h.pid, count: n }));
} else if (phase === "connect") {
  const sbx = await Sandbox.connect(id);
  const info = await sbx.getInfo();
  if (info.state !== "running") throw new Error(`state ${info.state} after connect`);
  const n = await count(sbx);
  const procs = await sbx.commands.list();
  if (!procs.some((p) => p.pid === Number(pid)))
    throw new Error(`the counter process ${pid} is not listed: ${JSON.stringify(procs)}`);
  await until(async () => (await count(sbx)) > n + 3, "the counter counting on");
  const kept = await sbx.files.read("kept.txt");
  if (kept !== "kept") throw new Error(`kept.txt holds ${kept}`);
  console.log(JSON.stringify({ count: n, after: await count(sbx) }));
  await Sandbox.kill(sbx.sandboxId);
} else {
  throw new Error(`unknown phase ${phase}`);
}
