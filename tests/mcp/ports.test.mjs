// Ports and previews through MCP: list_ports and get_preview_url with the official client
// (Streamable HTTP and stdio), the URLs they give reaching a server in the session (with a
// key, and the share URL without one), and their errors.
import { describe, it, before, after } from "node:test";
import assert from "node:assert/strict";
import http from "node:http";
import { BASE, KEY_A, KEY_B, connect, sid, structured, errorText, waitUntil } from "./helpers.mjs";

const WEB = 8000;

// GET url as a browser would: a `*.localhost` host is the loopback, its name the Host header.
function get(url, headers = {}) {
  const u = new URL(url);
  const daemon = new URL(BASE);
  return new Promise((resolve, reject) => {
    const req = http.get(
      { host: daemon.hostname, port: daemon.port, path: u.pathname + u.search, headers: { Host: u.host, ...headers } },
      (res) => {
        let body = "";
        res.setEncoding("utf8");
        res.on("data", (d) => (body += d));
        res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, body }));
      },
    );
    req.on("error", reject);
  });
}

for (const kind of ["streamable-http", "stdio"]) {
  describe(`ports and previews over ${kind}`, () => {
    let client;
    const tool = (name, args) => client.callTool({ name, arguments: args });
    const id = sid("ports");
    const page = `page-${process.pid}-${kind}\n`;

    before(async () => {
      ({ client } = await connect(kind));
    });

    after(async () => {
      await tool("reset_session", { sessionId: id }).catch(() => undefined);
      await client?.close();
    });

    it("lists a server's port with URLs that reach it", async (t) => {
      const templates = structured(await tool("list_templates", {})).templates.map((x) => x.name);
      if (!templates.includes("python")) return t.skip("the python template is not built");
      structured(await tool("create_session", { sessionId: id, template: "python" }));
      structured(await tool("write_file", { sessionId: id, path: "page.txt", content: page }));
      structured(await tool("start_process", { sessionId: id, command: `python3 -m http.server ${WEB}` }));
      const listed = await waitUntil(async () => {
        const r = structured(await tool("list_ports", { sessionId: id }));
        return r.ports.some((p) => p.port === WEB) && r;
      }, "the server to listen");
      assert.equal(listed.sessionId, id);
      assert.equal(listed.truncated, false);
      const entry = listed.ports.find((p) => p.port === WEB);
      const port = new URL(BASE).port;
      assert.equal(entry.address, "0.0.0.0");
      assert.equal(entry.public, false);
      assert.match(entry.url, new RegExp(`^http://${WEB}-[a-z0-9-]+\\.localhost:${port}/$`));
      assert.match(entry.pathUrl, new RegExp(`^/exec/[a-z0-9-]+/ports/${WEB}/$`));

      const got = structured(await tool("get_preview_url", { sessionId: id, port: WEB }));
      assert.deepEqual(got, {
        sessionId: id, port: WEB, url: entry.url, pathUrl: entry.pathUrl, public: false, listening: true,
      });
      const auth = { Authorization: `Bearer ${KEY_A}` };
      for (const url of [entry.url, BASE + entry.pathUrl]) {
        const r = await get(url + "page.txt", auth);
        assert.deepEqual([r.status, r.body], [200, page], url);
      }
      // Without a key: closed; the share URL opens it (a redirect that sets the cookie).
      assert.equal((await get(entry.url + "page.txt")).status, 401);
      const shared = structured(await tool("get_preview_url", { sessionId: id, port: WEB, share: true }));
      assert.match(shared.shareUrl, new RegExp(`^${entry.url.replace(/\./g, "\\.")}\\?sandbox_token=pt_`));
      const r = await get(shared.shareUrl);
      assert.equal(r.status, 302);
      const cookie = r.headers["set-cookie"][0].split(";")[0];
      const after = await get(entry.url + "page.txt", { Cookie: cookie });
      assert.deepEqual([after.status, after.body], [200, page]);
    });

    it("errors: no such session, another key's, a port out of range; nothing listening is a result", async () => {
      for (const [name, args] of [["list_ports", {}], ["get_preview_url", { port: WEB }]]) {
        const r = await tool(name, { sessionId: "no-such-session", ...args });
        assert.equal(r.isError, true, name);
        assert.match(errorText(r), /not found/);
      }
      for (const port of [0, 65536, "80"]) {
        const r = await tool("get_preview_url", { sessionId: id, port });
        assert.equal(r.isError, true, String(port));
        assert.match(errorText(r), /port/);
      }
      const other = (await connect(kind, KEY_B)).client;
      try {
        const mine = sid("mine");
        structured(await tool("make_directory", { sessionId: mine, path: "x" }));
        for (const [name, args] of [["list_ports", {}], ["get_preview_url", { port: WEB }]]) {
          const r = await other.callTool({ name, arguments: { sessionId: mine, ...args } });
          assert.equal(r.isError, true, name);
          assert.match(errorText(r), /not found/);
        }
        const idle = structured(await tool("get_preview_url", { sessionId: mine, port: 9 }));
        assert.equal(idle.listening, false);
        structured(await tool("reset_session", { sessionId: mine }));
      } finally {
        await other.close();
      }
    });
  });
}
