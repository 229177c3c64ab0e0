// MCP sessions expire when idle and are bounded in number; `sandbox mcp` carries its client
// over an expiry. Against the `short` daemon of run.sh: sessions expire after a second of
// silence (the sweep runs every 5 s) and there are at most three.
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import {
  StdioClientTransport,
  getDefaultEnvironment,
} from "@modelcontextprotocol/sdk/client/stdio.js";
import { CLI, initializeRequest, sleep, structured } from "./helpers.mjs";

const SHORT = process.env.MCP_TEST_SHORT_URL;

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

describe("MCP session limits", { skip: SHORT ? false : "MCP_TEST_SHORT_URL is not set" }, () => {
  it("an idle session expires (404), a busy one does not", async () => {
    const idle = await rpc(initializeRequest());
    const busy = await rpc(initializeRequest());
    const idleHeaders = { "Mcp-Session-Id": idle.headers.get("mcp-session-id") };
    const busyHeaders = { "Mcp-Session-Id": busy.headers.get("mcp-session-id") };
    const call = rpc(
      {
        jsonrpc: "2.0",
        id: 2,
        method: "tools/call",
        params: {
          name: "execute",
          arguments: { sessionId: `busy-${process.pid}`, command: "sleep 3; echo done" },
        },
      },
      busyHeaders,
    );
    // The idle one goes a second after its last request (found within 100 ms); the busy one
    // outlives it. Asking earlier would count as activity: the test sleeps past the timeout.
    await sleep(2000);
    const ping = { jsonrpc: "2.0", id: 3, method: "ping" };
    assert.equal((await rpc(ping, idleHeaders)).status, 404);
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
    await client.connect(transport);
    const id = `reinit-${process.pid}`;
    const first = structured(
      await client.callTool({ name: "execute", arguments: { sessionId: id, command: "echo 1" } }),
    );
    assert.equal(first.stdout, "1\n");
    // The MCP session expires meanwhile: a second of silence, found within 100 ms.
    await sleep(2500);
    const second = structured(
      await client.callTool({ name: "execute", arguments: { sessionId: id, command: "echo 2" } }),
    );
    assert.equal(second.stdout, "2\n");
    assert.match(stderr, /new one was initialized/);
    await client.close();
  });
});
