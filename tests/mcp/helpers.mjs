// Shared by the MCP tests: where the daemon is (run.sh starts it and exports the
// variables), and MCP clients of the official SDK over each transport.
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

function need(name) {
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

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
