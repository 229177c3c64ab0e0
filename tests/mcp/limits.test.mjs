// MCP sessions expire when idle and are bounded in number; `sandbox mcp` carries its client
// over an expiry. Against the `short` daemon of run.sh: sessions expire after a second of
// silence (looked for every 100 ms) and there are at most three. A request to a session counts
// as its activity, so the tests learn of an expiry from the daemon's log instead of asking.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import {
  StdioClientTransport,
  getDefaultEnvironment,
} from "@modelcontextprotocol/sdk/client/stdio.js";
import { CLI, daemonLog, initializeRequest, need, structured, waitUntil } from "./helpers.mjs";

const SHORT = need("MCP_TEST_SHORT_URL");

// Whether the short daemon logged the end of the MCP session whose id starts with `id`, for
// being idle.
function expired(id) {
  const line = `MCP session ${id.slice(0, 8)}... ended (idle timeout)`;
  return daemonLog("short").some((l) => l.msg === line);
}

// Waits until a session made now, and left alone, has expired: by then every session whose
// last activity came before it would have expired too, had nothing kept it.
async function expiredWitness() {
  const witness = await rpc(initializeRequest());
  const id = witness.headers.get("mcp-session-id");
  await waitUntil(
    () => expired(id),
    "an MCP session left alone to expire (in the short daemon's log, at level info)",
  );
}

// How many commands run in sandbox session `sessionId`, asked over REST (no MCP activity).
async function running(sessionId) {
  const res = await fetch(`${SHORT}/exec/`);
  const body = await res.json();
  return body.sessions.find((s) => s.id === sessionId)?.running ?? 0;
}

async function rpc(body, headers = {}) {
  const res = await fetch(`${SHORT}/mcp`, {
    method: "POST",
    headers: {
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
      ...headers,
    },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  return { status: res.status, headers: res.headers, json: text ? JSON.parse(text) : null };
}

describe("MCP session limits", () => {
  it("an idle session expires (404), a busy one does not", async () => {
    const idle = await rpc(initializeRequest());
    const busy = await rpc(initializeRequest());
    const idleHeaders = { "Mcp-Session-Id": idle.headers.get("mcp-session-id") };
    const busyHeaders = { "Mcp-Session-Id": busy.headers.get("mcp-session-id") };
    const sandbox = `busy-${process.pid}`;
    const execute = (id, command) => ({
      jsonrpc: "2.0",
      id,
      method: "tools/call",
      params: { name: "execute", arguments: { sessionId: sandbox, command } },
    });
    // The busy session's call runs until the test lets it end.
    const call = rpc(
      execute(
        2,
        "i=0; while [ ! -e go ] && [ $i -lt 1200 ]; do usleep 50000; i=$((i+1)); done; echo done",
      ),
      busyHeaders,
    );
    await waitUntil(async () => (await running(sandbox)) === 1, "the busy session's call to run");
    // Both are left alone past their idle timeout: the idle one expires, the busy one not.
    await expiredWitness();
    await waitUntil(() => expired(idleHeaders["Mcp-Session-Id"]), "the idle session to expire");
    const ping = { jsonrpc: "2.0", id: 3, method: "ping" };
    assert.equal((await rpc(ping, idleHeaders)).status, 404);
    assert.ok(!expired(busyHeaders["Mcp-Session-Id"]), "the busy session expired");
    const go = await rpc(execute(4, "touch go"), busyHeaders);
    assert.equal(go.status, 200);
    assert.equal(go.json.result.isError, undefined, JSON.stringify(go.json));
    const answer = await call;
    assert.equal(answer.json.result.structuredContent.stdout, "done\n");
    for (const h of [busyHeaders]) {
      await fetch(`${SHORT}/mcp`, { method: "DELETE", headers: h }).then((r) => r.text());
    }
  });

  it("at most SANDBOX_MCP_MAX_SESSIONS sessions (503 beyond)", async () => {
    // Earlier sessions have ended or expired: there is room for three.
    const ids = [];
    for (let i = 0; i < 3; i++) {
      const r = await rpc(initializeRequest());
      assert.equal(r.status, 200);
      ids.push(r.headers.get("mcp-session-id"));
    }
    const refused = await rpc(initializeRequest());
    assert.equal(refused.status, 503);
    assert.equal(refused.json.error.code, -32000);
    assert.match(refused.json.error.message, /limit of 3 MCP sessions/);
    // Ending one makes room.
    await fetch(`${SHORT}/mcp`, { method: "DELETE", headers: { "Mcp-Session-Id": ids[0] } }).then(
      (r) => r.text(),
    );
    const again = await rpc(initializeRequest());
    assert.equal(again.status, 200);
    ids[0] = again.headers.get("mcp-session-id");
    for (const id of ids) {
      await fetch(`${SHORT}/mcp`, { method: "DELETE", headers: { "Mcp-Session-Id": id } }).then(
        (r) => r.text(),
      );
    }
  });

  it("sandbox mcp initializes a new session when the daemon dropped its own", async () => {
    const client = new Client({ name: "agent-sandbox-tests", version: "1.0.0" });
    const transport = new StdioClientTransport({
      command: CLI,
      args: ["mcp"],
      env: { ...getDefaultEnvironment(), SANDBOX_URL: SHORT },
      stderr: "pipe",
    });
    let stderr = "";
    transport.stderr.on("data", (d) => {
      stderr += d;
    });
    const logged = daemonLog("short").length;
    await client.connect(transport);
    const id = `reinit-${process.pid}`;
    const first = structured(
      await client.callTool({ name: "execute", arguments: { sessionId: id, command: "echo 1" } }),
    );
    assert.equal(first.stdout, "1\n");
    // The MCP session expires meanwhile, after a second of silence.
    const opened = daemonLog("short")
      .slice(logged)
      .map((l) => /^MCP session (\w{8})\.\.\. initialized/.exec(l.msg || ""))
      .filter(Boolean);
    assert.equal(opened.length, 1, "the client's MCP session is not in the daemon's log");
    await waitUntil(() => expired(opened[0][1]), "the client's MCP session to expire");
    const second = structured(
      await client.callTool({ name: "execute", arguments: { sessionId: id, command: "echo 2" } }),
    );
    assert.equal(second.stdout, "2\n");
    assert.match(stderr, /new one was initialized/);
    await client.close();
  });
});
