// The protocol and the HTTP transports, by hand: what a correct client never sends, and
// what the SDK does not show (headers, statuses, batches, the legacy endpoint event).
import { describe, it } from "node:test";
import assert from "node:assert/strict";
import {
  BASE,
  KEY_A,
  LEGACY_TOKEN,
  post,
  initializeRequest,
  rawSession,
  rawTool,
  runningIn,
  stillRuns,
  waitUntil,
} from "./helpers.mjs";

describe("initialize and versions", () => {
  for (const v of ["2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05"]) {
    it(`answers ${v} with ${v}`, async () => {
      const r = await post("/mcp", initializeRequest(v));
      assert.equal(r.status, 200);
      assert.equal(r.json.result.protocolVersion, v);
      assert.deepEqual(r.json.result.capabilities, { tools: { listChanged: false } });
      assert.equal(r.json.result.serverInfo.name, "agent-sandbox");
      assert.match(r.headers.get("mcp-session-id"), /^[0-9a-f]{32}$/);
    });
  }

  it("answers an unknown version with its newest", async () => {
    const r = await post("/mcp", initializeRequest("1999-01-01"));
    assert.equal(r.status, 200);
    assert.equal(r.json.result.protocolVersion, "2025-11-25");
  });

  it("refuses initialize without a protocol version, and issues no session", async () => {
    const r = await post("/mcp", { jsonrpc: "2.0", id: 1, method: "initialize", params: {} });
    assert.equal(r.status, 200);
    assert.equal(r.json.error.code, -32602);
    assert.equal(r.headers.get("mcp-session-id"), null);
  });

  it("refuses a second initialize in a session", async () => {
    const s = await rawSession();
    const r = await post("/mcp", initializeRequest(), s.headers);
    assert.equal(r.json.error.code, -32600);
  });

  it("older versions get tools without output schemas or structured content", async () => {
    const s = await rawSession("2025-03-26");
    const list = await post("/mcp", { jsonrpc: "2.0", id: 2, method: "tools/list" }, s.headers);
    const ping = list.json.result.tools.find((t) => t.name === "ping");
    assert.equal(ping.outputSchema, undefined);
    assert.equal(typeof ping.annotations.readOnlyHint, "boolean");
    const call = await post(
      "/mcp",
      { jsonrpc: "2.0", id: 3, method: "tools/call", params: { name: "ping", arguments: {} } },
      s.headers,
    );
    assert.equal(call.json.result.structuredContent, undefined);
    assert.equal(JSON.parse(call.json.result.content[0].text).ok, true);
  });
});

describe("Streamable HTTP", () => {
  it("requires the session id after initialize (400), and knows unknown ones (404)", async () => {
    const ping = { jsonrpc: "2.0", id: 5, method: "ping" };
    const none = await post("/mcp", ping);
    assert.equal(none.status, 400);
    assert.match(none.json.error.message, /Mcp-Session-Id/);
    const unknown = await post("/mcp", ping, { "Mcp-Session-Id": "0".repeat(32) });
    assert.equal(unknown.status, 404);
  });

  it("checks MCP-Protocol-Version (400 when unsupported)", async () => {
    const s = await rawSession();
    const ping = { jsonrpc: "2.0", id: 5, method: "ping" };
    const bad = await post("/mcp", ping, { ...s.headers, "MCP-Protocol-Version": "1900-01-01" });
    assert.equal(bad.status, 400);
    assert.match(bad.json.error.message, /MCP-Protocol-Version/);
    const junk = await post("/mcp", ping, { ...s.headers, "MCP-Protocol-Version": "not-a-version" });
    assert.equal(junk.status, 400);
    const good = await post("/mcp", ping, s.headers);
    assert.equal(good.status, 200);
    assert.deepEqual(good.json, { jsonrpc: "2.0", id: 5, result: {} });
    // Without the header the session's own version applies.
    const { "MCP-Protocol-Version": _, ...noVersion } = s.headers;
    assert.equal((await post("/mcp", ping, noVersion)).status, 200);
  });

  it("answers notifications with 202 and no body", async () => {
    const s = await rawSession();
    const r = await post("/mcp", { jsonrpc: "2.0", method: "notifications/whatever" }, s.headers);
    assert.equal(r.status, 202);
    assert.equal(r.text, "");
  });

  it("parse errors (-32700), invalid requests (-32600), unknown methods (-32601)", async () => {
    const s = await rawSession();
    const parse = await post("/mcp", "{not json", s.headers);
    assert.equal(parse.status, 400);
    assert.equal(parse.json.error.code, -32700);
    assert.equal(parse.json.id, null);
    const invalid = await post("/mcp", { jsonrpc: "1.0", id: 9, method: "ping" }, s.headers);
    assert.equal(invalid.status, 400);
    assert.equal(invalid.json.error.code, -32600);
    assert.equal(invalid.json.id, 9);
    const nullId = await post("/mcp", { jsonrpc: "2.0", id: null, method: "ping" }, s.headers);
    assert.equal(nullId.json.error.code, -32600);
    const arrayParams = await post(
      "/mcp",
      { jsonrpc: "2.0", id: 10, method: "tools/list", params: [1] },
      s.headers,
    );
    assert.equal(arrayParams.json.error.code, -32602);
    const unknown = await post("/mcp", { jsonrpc: "2.0", id: 11, method: "resources/list" }, s.headers);
    assert.equal(unknown.status, 200);
    assert.equal(unknown.json.error.code, -32601);
    const noName = await post(
      "/mcp",
      { jsonrpc: "2.0", id: 12, method: "tools/call", params: { arguments: {} } },
      s.headers,
    );
    assert.equal(noName.json.error.code, -32602);
  });

  it("tools/list cursors: ours are accepted, others are -32602", async () => {
    const s = await rawSession();
    const first = await post(
      "/mcp",
      { jsonrpc: "2.0", id: 1, method: "tools/list", params: { cursor: "0" } },
      s.headers,
    );
    assert.equal(first.json.result.tools.length, 31);
    const bogus = await post(
      "/mcp",
      { jsonrpc: "2.0", id: 2, method: "tools/list", params: { cursor: "bogus" } },
      s.headers,
    );
    assert.equal(bogus.json.error.code, -32602);
  });

  it("batches: handled in 2025-03-26, refused from 2025-06-18", async () => {
    const batch = [
      { jsonrpc: "2.0", id: "a", method: "ping" },
      { jsonrpc: "2.0", method: "notifications/initialized" },
      { jsonrpc: "2.0", id: "b", method: "nope" },
      { bad: true },
    ];
    const old = await rawSession("2025-03-26");
    const r = await post("/mcp", batch, old.headers);
    assert.equal(r.status, 200);
    assert.ok(Array.isArray(r.json));
    const byId = Object.fromEntries(r.json.map((m) => [m.id, m]));
    assert.deepEqual(byId.a.result, {});
    assert.equal(byId.b.error.code, -32601);
    assert.equal(byId.null.error.code, -32600);
    assert.equal(r.json.length, 3);
    const empty = await post("/mcp", [], old.headers);
    assert.equal(empty.status, 400);
    assert.equal(empty.json.error.code, -32600);

    const current = await rawSession("2025-06-18");
    const refused = await post("/mcp", batch, current.headers);
    assert.equal(refused.status, 400);
    assert.equal(refused.json.error.code, -32600);
    assert.match(refused.json.error.message, /batch/);
  });

  it("streams SSE only when a call has progress to send", async () => {
    const s = await rawSession();
    const call = (id, meta) => ({
      jsonrpc: "2.0",
      id,
      method: "tools/call",
      params: {
        name: "execute",
        // The pause makes "b" progress of its own.
        arguments: { sessionId: `sse-${process.pid}`, command: "echo a; sleep 0.2; echo b" },
        ...(meta ? { _meta: meta } : {}),
      },
    });
    const plain = await post("/mcp", call(1), s.headers);
    assert.match(plain.headers.get("content-type"), /^application\/json/);
    assert.equal(plain.json.result.structuredContent.stdout, "a\nb\n");
    const streamed = await post("/mcp", call(2, { progressToken: "p" }), s.headers);
    assert.match(streamed.headers.get("content-type"), /^text\/event-stream/);
    const events = streamed.text
      .split("\n\n")
      .filter((e) => e.includes("data:"))
      .map((e) => JSON.parse(e.split("\n").find((l) => l.startsWith("data:")).slice(5)));
    assert.ok(events.length >= 4);
    assert.equal(events.at(-1).id, 2);
    assert.equal(events.at(-1).result.structuredContent.stdout, "a\nb\n");
    assert.ok(events.slice(0, -1).every((e) => e.method === "notifications/progress"));
    // A client that cannot take SSE gets JSON, without the progress.
    const jsonOnly = await post("/mcp", call(3, { progressToken: "q" }), {
      ...s.headers,
      Accept: "application/json",
    });
    assert.match(jsonOnly.headers.get("content-type"), /^application\/json/);
    assert.equal(jsonOnly.json.id, 3);
  });

  for (const streaming of [true, false]) {
    it(`a POST whose client goes away has its command cancelled (${streaming ? "SSE" : "JSON"})`, async () => {
      const s = await rawSession();
      const session = `gone-${process.pid}-${streaming}`;
      const tool = (name, args) => rawTool(s.headers, name, args);
      const controller = new AbortController();
      const req = fetch(`${BASE}/mcp`, {
        method: "POST",
        headers: {
          "Content-Type": "application/json",
          Accept: "application/json, text/event-stream",
          Authorization: `Bearer ${KEY_A}`,
          ...s.headers,
        },
        body: JSON.stringify({
          jsonrpc: "2.0",
          id: 1,
          method: "tools/call",
          params: {
            name: "execute",
            // It would leave a marker a minute in, were it not cancelled.
            arguments: { sessionId: session, command: "echo go; sleep 60; echo late > marker" },
            ...(streaming ? { _meta: { progressToken: 1 } } : {}),
          },
        }),
        signal: controller.signal,
      }).catch(() => null);
      await waitUntil(async () => (await runningIn(tool, session)) === 1, "the command to run");
      controller.abort();
      await req;
      // Its processes go, so that nothing will ever make the marker; and there is none.
      await waitUntil(
        async () => !(await stillRuns(tool, session, "late > marker")),
        "the command's processes to go after its client left",
      );
      const r = await post(
        "/mcp",
        {
          jsonrpc: "2.0",
          id: 2,
          method: "tools/call",
          params: { name: "read_file", arguments: { sessionId: session, path: "marker" } },
        },
        s.headers,
      );
      assert.equal(r.json.result.isError, true, "the command went on without its client");
      assert.match(r.json.result.content[0].text, /marker/);
    });
  }

  it("GET with a session: no server stream (405); DELETE ends the session", async () => {
    const s = await rawSession();
    const get = await fetch(`${BASE}/mcp`, {
      headers: { Accept: "text/event-stream", Authorization: `Bearer ${KEY_A}`, ...s.headers },
    });
    assert.equal(get.status, 405);
    await get.text();
    const del = await fetch(`${BASE}/mcp`, {
      method: "DELETE",
      headers: { Authorization: `Bearer ${KEY_A}`, ...s.headers },
    });
    assert.equal(del.status, 200);
    await del.text();
    const after = await post("/mcp", { jsonrpc: "2.0", id: 1, method: "ping" }, s.headers);
    assert.equal(after.status, 404);
  });

  it("Origin: local and listed ones pass, others get 403", async () => {
    const init = initializeRequest();
    for (const origin of ["http://localhost:6274", "http://127.0.0.1", "http://[::1]:8080"]) {
      assert.equal((await post("/mcp", init, { Origin: origin })).status, 200, origin);
    }
    assert.equal((await post("/mcp", init, { Origin: "https://allowed.example" })).status, 200);
    for (const origin of ["https://evil.example", "http://localhost.evil.example", "null"]) {
      const r = await post("/mcp", init, { Origin: origin });
      assert.equal(r.status, 403, origin);
      assert.equal(r.json.id, null);
      assert.match(r.json.error.message, /Origin/);
    }
  });

  it("authentication: no key 401, the legacy MCP_AUTH_TOKEN works on /mcp", async () => {
    const r = await fetch(`${BASE}/mcp`, {
      method: "POST",
      headers: { "Content-Type": "application/json", Accept: "application/json" },
      body: JSON.stringify(initializeRequest()),
    });
    assert.equal(r.status, 401);
    await r.text();
    const legacy = await post("/mcp", initializeRequest(), {
      Authorization: `Bearer ${LEGACY_TOKEN}`,
    });
    assert.equal(legacy.status, 200);
  });
});

// Reads an SSE stream event by event.
async function* sseEvents(body) {
  const decoder = new TextDecoder();
  let buf = "";
  for await (const chunk of body) {
    buf += decoder.decode(chunk, { stream: true });
    let end;
    while ((end = buf.indexOf("\n\n")) >= 0) {
      const raw = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const ev = { event: "message", data: "" };
      for (const line of raw.split("\n")) {
        if (line.startsWith("event:")) ev.event = line.slice(6).trim();
        else if (line.startsWith("data:")) ev.data += line.slice(5).trim();
      }
      if (ev.data) yield ev;
    }
  }
}

describe("HTTP+SSE", () => {
  for (const [path, endpoint] of [
    ["/mcp", "/mcp/messages"],
    ["/sse", "/messages"],
  ]) {
    it(`GET ${path} opens a stream whose first event names ${endpoint}`, async () => {
      const controller = new AbortController();
      const res = await fetch(`${BASE}${path}`, {
        headers: { Accept: "text/event-stream", Authorization: `Bearer ${KEY_A}` },
        signal: controller.signal,
      });
      assert.equal(res.status, 200);
      assert.match(res.headers.get("content-type"), /^text\/event-stream/);
      const events = sseEvents(res.body);
      const first = (await events.next()).value;
      assert.equal(first.event, "endpoint");
      assert.match(first.data, new RegExp(`^${endpoint}\\?sessionId=[0-9a-f]{32}$`));

      const accepted = await post(first.data, initializeRequest("2024-11-05"));
      assert.equal(accepted.status, 202);
      assert.equal(accepted.text, "");
      const answer = JSON.parse((await events.next()).value.data);
      assert.equal(answer.result.protocolVersion, "2024-11-05");

      // Batches belong to 2024-11-05; answers come on the stream, one event each.
      await post(first.data, [
        { jsonrpc: "2.0", id: 7, method: "ping" },
        { jsonrpc: "2.0", id: 8, method: "tools/list" },
      ]);
      const ids = [];
      for (let i = 0; i < 2; i++) ids.push(JSON.parse((await events.next()).value.data).id);
      assert.deepEqual(ids.sort(), [7, 8]);

      const parse = await post(first.data, "nope");
      assert.equal(parse.status, 400);
      assert.equal(parse.json.error.code, -32700);
      controller.abort();
      // Closing the stream ends the session.
      const ping = { jsonrpc: "2.0", id: 9, method: "ping" };
      await waitUntil(
        async () => (await post(first.data, ping)).status === 404,
        "the session to end with its stream",
      );
    });
  }

  it("requests before initialize are refused (except ping)", async () => {
    const controller = new AbortController();
    const res = await fetch(`${BASE}/sse`, {
      headers: { Accept: "text/event-stream", Authorization: `Bearer ${KEY_A}` },
      signal: controller.signal,
    });
    const events = sseEvents(res.body);
    const endpoint = (await events.next()).value.data;
    await post(endpoint, { jsonrpc: "2.0", id: 1, method: "tools/list" });
    assert.equal(JSON.parse((await events.next()).value.data).error.code, -32600);
    await post(endpoint, { jsonrpc: "2.0", id: 2, method: "ping" });
    assert.deepEqual(JSON.parse((await events.next()).value.data).result, {});
    controller.abort();
  });

  it("GET /mcp without Accept: text/event-stream is refused (406)", async () => {
    const r = await fetch(`${BASE}/mcp`, { headers: { Authorization: `Bearer ${KEY_A}` } });
    assert.equal(r.status, 406);
    await r.text();
  });
});
