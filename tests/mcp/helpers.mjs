// Shared by the MCP tests: where the daemon is (run.sh starts it and exports the
// variables), and MCP clients of the official SDK over each transport.
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { SSEClientTransport } from "@modelcontextprotocol/sdk/client/sse.js";
import {
  StdioClientTransport,
  getDefaultEnvironment,
} from "@modelcontextprotocol/sdk/client/stdio.js";

const here = path.dirname(fileURLToPath(import.meta.url));
export const ROOT = path.resolve(here, "..", "..");

export function need(name) {
  const v = process.env[name];
  if (!v) throw new Error(`${name} is not set: run the tests through tests/mcp/run.sh`);
  return v;
}

// The daemon under test and the keys run.sh created for it.
export const BASE = need("MCP_TEST_URL"); // http://127.0.0.1:PORT
export const KEY_A = need("MCP_TEST_KEY_A");
export const KEY_B = need("MCP_TEST_KEY_B");
export const LEGACY_TOKEN = process.env.MCP_TEST_LEGACY_TOKEN || "";
export const CLI = process.env.MCP_TEST_CLI || path.join(ROOT, "build", "cli", "sandbox");

// Every session id a test makes is unique, so tests never see each other's sessions.
let counter = 0;
export function sid(prefix = "t") {
  counter += 1;
  return `${prefix}-${process.pid}-${Date.now().toString(36)}-${counter}`;
}

export const TRANSPORTS = ["streamable-http", "sse", "sse-mcp-path", "stdio"];

export function makeTransport(kind, key = KEY_A) {
  const headers = { Authorization: `Bearer ${key}` };
  switch (kind) {
    case "streamable-http":
      return new StreamableHTTPClientTransport(new URL(`${BASE}/mcp`), {
        requestInit: { headers },
      });
    case "sse": // HTTP+SSE at /sse + /messages
      return new SSEClientTransport(new URL(`${BASE}/sse`), { requestInit: { headers } });
    case "sse-mcp-path": // HTTP+SSE at the reference's /mcp + /mcp/messages
      return new SSEClientTransport(new URL(`${BASE}/mcp`), { requestInit: { headers } });
    case "stdio":
      return new StdioClientTransport({
        command: CLI,
        args: ["mcp"],
        env: { ...getDefaultEnvironment(), SANDBOX_URL: BASE, SANDBOX_API_KEY: key },
        stderr: "pipe",
      });
    default:
      throw new Error(`unknown transport ${kind}`);
  }
}

export async function connect(kind, key = KEY_A) {
  const client = new Client({ name: "agent-sandbox-tests", version: "1.0.0" });
  const transport = makeTransport(kind, key);
  await client.connect(transport);
  return { client, transport };
}

// A tool result's structured content, failing loudly on a tool error.
export function structured(result) {
  if (result.isError) {
    throw new Error(`tool error: ${result.content?.map((c) => c.text).join(" ")}`);
  }
  return result.structuredContent;
}

export function errorText(result) {
  return (result.content || []).map((c) => c.text).join(" ");
}

// Raw HTTP to the daemon, for what the SDK does not let a test get wrong on purpose.
export async function post(pathname, body, headers = {}) {
  const res = await fetch(`${BASE}${pathname}`, {
    method: "POST",
    headers: {
      "Content-Type": "application/json",
      Accept: "application/json, text/event-stream",
      Authorization: `Bearer ${KEY_A}`,
      ...headers,
    },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    json = null;
  }
  return { status: res.status, headers: res.headers, text, json };
}

export function initializeRequest(version = "2025-11-25", id = 1) {
  return {
    jsonrpc: "2.0",
    id,
    method: "initialize",
    params: {
      protocolVersion: version,
      capabilities: {},
      clientInfo: { name: "raw-tests", version: "1" },
    },
  };
}

// A Streamable HTTP session made by hand: returns its id and negotiated version.
export async function rawSession(version = "2025-11-25") {
  const r = await post("/mcp", initializeRequest(version));
  if (r.status !== 200) throw new Error(`initialize: HTTP ${r.status} ${r.text}`);
  const id = r.headers.get("mcp-session-id");
  const headers = {
    "Mcp-Session-Id": id,
    "MCP-Protocol-Version": r.json.result.protocolVersion,
  };
  await post("/mcp", { jsonrpc: "2.0", method: "notifications/initialized" }, headers);
  return { id, version: r.json.result.protocolVersion, headers };
}

// A pause, for the tests whose point it is (pacing, a timeout let elapse on purpose); every
// other wait is a waitUntil.
export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Polls check() (which may be async) until it returns something truthy, and returns that;
// throws after timeoutMs, naming what it waited for. What a test waits for takes
// milliseconds on an idle machine: the deadline is for a loaded one.
export async function waitUntil(check, what, timeoutMs = 30000, intervalMs = 50) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() >= deadline) {
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    }
    await sleep(intervalMs);
  }
}

// A tools/call over raw Streamable HTTP in the MCP session whose headers are given; its
// result (JSON, since no progress is asked for).
export async function rawTool(headers, name, args, id = 100) {
  const body = { jsonrpc: "2.0", id, method: "tools/call", params: { name, arguments: args } };
  const r = await post("/mcp", body, headers);
  if (!r.json || !r.json.result) throw new Error(`tools/call ${name}: HTTP ${r.status} ${r.text}`);
  return r.json.result;
}

// Whether a command line holding `fragment` still runs in sandbox session `sessionId`, as
// `ps` there shows; callTool runs one tool and returns its result.
export async function stillRuns(callTool, sessionId, fragment) {
  const ps = await callTool("execute", { sessionId, command: "ps -o args" });
  if (ps.isError) throw new Error(`ps in ${sessionId}: ${errorText(ps)}`);
  return ps.structuredContent.stdout.includes(fragment);
}

// How many commands run in sandbox session `sessionId` (0 when there is no such session).
export async function runningIn(callTool, sessionId) {
  const listed = structured(await callTool("list_sessions", {}));
  return listed.sessions.find((s) => s.sessionId === sessionId)?.running ?? 0;
}

// The daemon's log lines (JSON, one a line) that run.sh keeps for the daemon named `which`
// ("main" or "short"), as objects; what they say is observable state the tests wait on.
export function daemonLog(which) {
  const file = need(`MCP_TEST_${which.toUpperCase()}_LOG`);
  return readFileSync(file, "utf8")
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => {
      try {
        return JSON.parse(l);
      } catch {
        return {};
      }
    });
}
