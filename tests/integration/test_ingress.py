"""Ingress: servers inside a session reached through the daemon, by host name
(`<port>-<name>.localhost`) and by path (`/exec/:id/ports/:port/...`): bodies both ways,
redirects and cookies, SSE, WebSocket, credentials kept from the app, access by key, token or
public switch, port listing, limits, and the proxy's memory."""

import hashlib
import http.client
import json
import os
import socket
import time
import unittest

import runner
import wsclient
from helpers_exec import BASE_ENV, DaemonTestCase, wait_until
from test_bounded_memory import peak_rss_kib, small_quarantine_env

MiB = 1 << 20
APP = os.path.join(os.path.dirname(__file__), "preview_app.py")
PORT = 8765
RAW_PORT = 8766


class IngressCase(DaemonTestCase):
    """Shared: a session of the python template running preview_app.py."""

    def app_session(self, label=None, **create):
        sid = self.session(label)
        status, _, body = self.d.post("/exec", body={"id": sid, "template": "python", **create})
        self.assertEqual(status, 201, body)
        with open(APP, "rb") as f:
            status, _, body = self.d.request("PUT", f"/exec/{sid}/file", body=f.read(),
                                             query={"path": "app.py"},
                                             headers={"Content-Type":
                                                      "application/octet-stream"})
        self.assertEqual(status, 200, body)
        status, _, body = self.d.post(f"/exec/{sid}/processes", body={
            "command": f"python3 app.py {PORT} {RAW_PORT}", "tag": "app"})
        self.assertEqual(status, 201, body)
        wait_until(lambda: PORT in self.ports(sid), 60, 0.1, "the app listening")
        return sid

    def ports(self, sid):
        status, _, body = self.d.get(f"/exec/{sid}/ports")
        self.assertEqual(status, 200, body)
        return {p["port"]: p for p in body["ports"]}

    def preview(self, sid):
        status, _, body = self.d.get(f"/exec/{sid}/preview")
        self.assertEqual(status, 200, body)
        return body

    def host_of(self, sid, port=PORT):
        return f"{port}-{self.preview(sid)['name']}.localhost:{self.d.port}"

    def host_request(self, host, method, path, body=None, headers=None, conn=None):
        """A request naming `host`; returns (status, headers, bytes)."""
        own = conn is None
        conn = conn or http.client.HTTPConnection(self.d.host, self.d.port, timeout=60)
        try:
            h = {"Host": host, **(headers or {})}
            conn.request(method, path, body=body, headers=h)
            r = conn.getresponse()
            return r.status, r.headers, r.read()
        finally:
            if own:
                conn.close()

    def path_request(self, sid, method, path, port=PORT, **kw):
        return self.d.request(method, f"/exec/{sid}/ports/{port}{path}", **kw)

    def app_log(self, sid):
        out = self.stdout_of(sid, "cat requests.log")
        return [json.loads(line) for line in out.splitlines() if line.strip()]


class IngressTest(IngressCase):
    daemon_env = {**BASE_ENV, "SANDBOX_WARM_POOL": "0"}

    @runner.tag("driver")
    def test_both_url_forms_reach_the_app(self):
        sid = self.app_session()
        ports = self.ports(sid)
        self.assertEqual(ports[PORT]["address"], "127.0.0.1")
        self.assertNotIn(53, ports)  # the resolver is the daemon's, not the sandbox's
        self.assertTrue(ports[PORT]["url"].startswith(f"http://{PORT}-"), ports[PORT])
        name = self.preview(sid)["name"]
        self.assertEqual(ports[PORT]["pathUrl"], f"/exec/{name}/ports/{PORT}/")
        # Path form, with its query.
        status, headers, body = self.path_request(sid, "GET", "/headers?q=1")
        self.assertEqual(status, 200, body)
        self.assertEqual(body["path"], "/headers?q=1")
        self.assertEqual(headers["Content-Security-Policy"],
                         "sandbox allow-scripts allow-forms allow-popups")
        # The prefix without its slash is sent to it.
        status, headers, _ = self.d.get(f"/exec/{sid}/ports/{PORT}")
        self.assertEqual((status, headers["Location"]), (308, f"/exec/{sid}/ports/{PORT}/"))
        # Host form: two requests on one kept-alive connection, then a HEAD.
        host = self.host_of(sid)
        conn = http.client.HTTPConnection(self.d.host, self.d.port, timeout=60)
        try:
            for q in ("a", "b"):
                status, headers, raw = self.host_request(host, "GET", f"/headers?{q}", conn=conn)
                self.assertEqual(status, 200, raw)
                self.assertEqual(json.loads(raw)["path"], f"/headers?{q}")
                self.assertNotIn("Content-Security-Policy", headers)
            status, headers, raw = self.host_request(host, "HEAD", "/headers", conn=conn)
            self.assertEqual((status, raw), (200, b""))
            self.assertGreater(int(headers["Content-Length"]), 0)
        finally:
            conn.close()
        # Chunked and close-delimited answers come out whole.
        status, _, raw = self.host_request(host, "GET", "/chunked")
        self.assertEqual((status, raw), (200, b"one two three"))
        status, _, raw = self.host_request(host, "GET", "/close-delimited")
        self.assertEqual((status, raw), (200, b"until the end"))

    def test_request_bodies_stream_with_either_framing(self):
        sid = self.app_session()
        data = os.urandom(6 * MiB)
        want = hashlib.sha256(data).hexdigest()
        status, _, body = self.path_request(sid, "POST", "/echo", body=data,
                                            headers={"Content-Type": "application/octet-stream"})
        self.assertEqual(status, 200, body)
        self.assertEqual((body["length"], body["sha256"], body["framing"]),
                         (len(data), want, "length"))
        conn = http.client.HTTPConnection(self.d.host, self.d.port, timeout=60)
        conn.request("POST", "/echo", body=(data[i:i + MiB] for i in range(0, len(data), MiB)),
                     headers={"Host": self.host_of(sid)}, encode_chunked=True)
        r = conn.getresponse()
        body = json.loads(r.read())
        conn.close()
        self.assertEqual((r.status, body["length"], body["sha256"], body["framing"]),
                         (200, len(data), want, "chunked"))

    def test_location_and_cookies_are_rewritten_and_nothing_else(self):
        sid = self.app_session()
        prefix = f"/exec/{sid}/ports/{PORT}"
        status, headers, _ = self.path_request(sid, "GET", "/redirect")
        self.assertEqual((status, headers["Location"]), (302, f"{prefix}/target?x=1"))
        status, headers, _ = self.path_request(sid, "GET", "/redirect-abs")
        self.assertEqual((status, headers["Location"]), (302, f"{prefix}/abs"))
        status, headers, _ = self.path_request(sid, "GET", "/redirect-away")
        self.assertEqual(headers["Location"], "https://example.com/x")
        status, headers, _ = self.path_request(sid, "GET", "/cookie")
        cookies = headers.get_all("Set-Cookie")
        # Its pages' requests say `Origin: null` from whichever site: a cookie left to the
        # browser's default is kept from other sites' requests (SameSite=Lax).
        self.assertEqual(cookies, [f"a=1; Path={prefix}/app; HttpOnly; SameSite=Lax",
                                   f"b=2; Path={prefix}/; SameSite=Lax",
                                   f"c=3; samesite=None; Secure; Path={prefix}/"])
        # The path form shares the dashboard's origin: an app cannot clear its storage.
        self.assertIsNone(headers.get("Clear-Site-Data"))
        # The host form leaves Location and Path alone, but no cookie gets a Domain.
        host = self.host_of(sid)
        status, headers, _ = self.host_request(host, "GET", "/redirect")
        self.assertEqual(headers["Location"], "/target?x=1")
        status, headers, _ = self.host_request(host, "GET", "/cookie")
        self.assertEqual(headers.get_all("Set-Cookie"),
                         ["a=1; Path=/app; HttpOnly", "b=2", "c=3; samesite=None; Secure"])
        self.assertEqual(headers.get("Clear-Site-Data"), '"cookies", "storage"')

    @runner.tag("driver")
    def test_server_sent_events_stream(self):
        sid = self.app_session()
        conn = http.client.HTTPConnection(self.d.host, self.d.port, timeout=60)
        try:
            conn.request("GET", "/sse", headers={"Host": self.host_of(sid)})
            r = conn.getresponse()
            self.assertEqual((r.status, r.headers["Content-Type"]), (200, "text/event-stream"))
            got = b""
            while got.count(b"\n\n") < 3:
                chunk = r.read1(65536)
                self.assertTrue(chunk, "the stream ended early")
                got += chunk
            self.assertEqual(got, b"data: event 0\n\ndata: event 1\n\ndata: event 2\n\n")
            # The app sends its last event only now.
            self.run_ok(sid, "touch sse-go")
            self.assertEqual(r.read(), b"data: last\n\n")
        finally:
            conn.close()

    @runner.tag("driver")
    def test_websocket_upgrades_pass_through(self):
        sid = self.app_session()
        for path, headers in ((f"/exec/{sid}/ports/{PORT}/ws", {}),
                              ("/ws", {"Host": self.host_of(sid)})):
            ws = wsclient.WebSocket(self.d.host, self.d.port, path, headers=headers)
            try:
                ws.send_text("hello")
                self.assertEqual(ws.recv(), (False, b"hello"))
                big = os.urandom(MiB)
                ws.send_binary(big)
                self.assertEqual(ws.recv(), (True, big))
                ws.close()
            finally:
                ws.sock.close()

    def test_failures_are_clear(self):
        sid = self.app_session()
        # Nothing listens there: not even the daemon's own port is reachable from a sandbox.
        for port in (PORT + 100, self.d.port):
            status, headers, body = self.path_request(sid, "GET", "/", port=port)
            self.assertJsonError(status, headers, body, 502)
            self.assertIn(f"nothing is listening on port {port}", body["error"])
        # An app that does not speak HTTP, or whose head is too large.
        status, headers, body = self.path_request(sid, "GET", "/", port=RAW_PORT)
        self.assertJsonError(status, headers, body, 502)
        self.assertIn("not HTTP/1.1", body["error"])
        status, headers, body = self.path_request(sid, "GET", "/bigheader")
        self.assertJsonError(status, headers, body, 502)
        # Names and ports that are not previews.
        for host in (f"0-{sid}.localhost", f"70000-{sid}.localhost", f"{PORT}-nosuch.localhost"):
            status, headers, raw = self.host_request(host, "GET", "/")
            self.assertIn(status, (403, 404), raw)
            self.assertEqual(headers["Content-Type"], "application/json")
        status, headers, body = self.d.get(f"/exec/{sid}/ports/0/")
        self.assertJsonError(status, headers, body, 404)
        status, headers, body = self.d.get(f"/exec/no-such-session/ports/{PORT}/")
        self.assertJsonError(status, headers, body, 404)
        # A page of another site may not call it.
        status, headers, raw = self.host_request(self.host_of(sid), "POST", "/echo", body=b"x",
                                                 headers={"Origin": "http://evil.example"})
        self.assertEqual(status, 403, raw)
        other = f"http://{self.host_of(sid, port=3000)}"
        status, _, raw = self.host_request(self.host_of(sid), "POST", "/echo", body=b"x",
                                           headers={"Origin": other})
        self.assertEqual(status, 200, raw)

    def test_forward_is_a_byte_stream(self):
        sid = self.app_session()
        s = socket.create_connection((self.d.host, self.d.port), timeout=30)
        try:
            s.sendall(f"GET /exec/{sid}/forward/{PORT} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                      f"Connection: Upgrade\r\nUpgrade: tcp\r\n\r\n".encode())
            buf = b""
            while b"\r\n\r\n" not in buf:
                buf += s.recv(4096)
            self.assertTrue(buf.startswith(b"HTTP/1.1 101 "), buf)
            rest = buf.split(b"\r\n\r\n", 1)[1]
            s.sendall(b"GET /headers HTTP/1.1\r\nHost: app\r\nConnection: close\r\n\r\n")
            # A half-close: the client has said all it will, the answer still comes.
            s.shutdown(socket.SHUT_WR)
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                rest += chunk
            self.assertTrue(rest.startswith(b"HTTP/1.1 200 "), rest[:200])
            self.assertIn(b'"Host": "app"', rest)
        finally:
            s.close()
        status, headers, body = self.d.get(f"/exec/{sid}/forward/{PORT}")
        self.assertJsonError(status, headers, body, 426)

    def test_metrics_count_previews(self):
        sid = self.app_session()
        self.path_request(sid, "GET", "/headers")
        status, _, text = self.d.get("/metrics")
        text = text.decode() if isinstance(text, bytes) else text
        self.assertRegex(text, r'preview_requests_total\{form="path",status="2xx"\} [1-9]')
        self.assertRegex(text, r'preview_bytes_total\{direction="out"\} [1-9]')


class IngressHardeningTest(IngressCase):
    """What a hostile client or a hostile app tries."""
    daemon_env = {**BASE_ENV, "SANDBOX_WARM_POOL": "0", **small_quarantine_env()}

    def test_a_client_that_leaves_while_held_back_costs_nothing(self):
        sid = self.app_session()
        host = self.host_of(sid)
        for _ in range(3):
            s = socket.socket()
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.connect((self.d.host, self.d.port))
            s.sendall(f"GET /endless HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
            # It reads nothing: the daemon holds the app back, then the client goes.
            time.sleep(1.5)
            s.close()
        wait_until(lambda: self.host_request(host, "GET", "/headers")[0] == 200, 30, 0.2,
                   "the daemon serving on")
        self.assertIsNone(self.d.proc.poll(), "the daemon died")

    def test_names_are_never_handed_on(self):
        sid = self.session("web")
        status, _, body = self.d.post("/exec", body={"id": sid, "template": "base"})
        self.assertEqual(status, 201, body)
        first = self.preview(sid)["name"]
        self.assertRegex(first, "^" + sid + "-[0-9a-f]{8}$")
        self.assertEqual(body["previewName"], first)
        self.d.delete(f"/exec/{sid}")
        status, _, body = self.d.post("/exec", body={"id": sid, "template": "base"})
        self.assertEqual(status, 201, body)
        self.assertNotEqual(self.preview(sid)["name"], first)
        # A made-up id is random: it serves as the name... when it is a DNS label.
        status, _, body = self.d.post("/exec", body={"template": "base"})
        self.assertEqual(status, 201, body)
        self.addCleanup(self.d.delete, f"/exec/{body['id']}")
        self.assertRegex(body["previewName"], "^p[0-9a-f]{20}$")

    def test_cookies_cannot_be_tossed_or_planted(self):
        sid = self.app_session()
        for status, headers, _ in (self.host_request(self.host_of(sid), "GET", "/tossing"),
                                   self.path_request(sid, "GET", "/tossing")):
            self.assertEqual(status, 200)
            cookies = headers.get_all("Set-Cookie")
            self.assertEqual(len(cookies), 2, cookies)
            for c in cookies:
                self.assertNotIn("domain", c.lower())
                self.assertFalse(c.startswith("sandbox_token"), c)

    def test_framing_and_heads_a_client_controls(self):
        sid = self.app_session()
        host = self.host_of(sid)
        # The Connection header does not take the app's Host away.
        status, _, raw = self.host_request(host, "GET", "/headers",
                                           headers={"Connection": "keep-alive, Host"})
        self.assertEqual(status, 200, raw)
        self.assertEqual(json.loads(raw)["headers"]["Host"], host)
        # Codings other than chunked are not passed on as if they were not there.
        s = socket.create_connection((self.d.host, self.d.port), timeout=10)
        try:
            s.sendall(f"POST /echo HTTP/1.1\r\nHost: {host}\r\n"
                      f"Transfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n".encode())
            head = s.recv(4096)
        finally:
            s.close()
        self.assertTrue(head.split(b" ")[1] in (b"400", b"501"), head[:100])
        # A token in the URL of `//other.host/x` is not a way to send a browser elsewhere.
        token = self.preview(sid)["token"]
        for evil in ("//evil.example/x", "/\\evil.example/x", "/\\/evil.example/x"):
            status, headers, _ = self.host_request(host, "GET", f"{evil}?sandbox_token={token}")
            self.assertEqual(status, 302)
            loc = headers["Location"]
            self.assertTrue(loc.startswith("/") and loc[1:2] not in ("/", "\\"), loc)
        # The path form's pages run sandboxed: their own requests say Origin null.
        status, _, body = self.path_request(sid, "POST", "/echo", body=b"x",
                                            headers={"Origin": "null"})
        self.assertEqual(status, 200, body)
        # The path form answers only to the API's names (a rebound page names its own).
        status, headers, body = self.path_request(
            sid, "POST", "/echo", body=b"x",
            headers={"Host": f"rebind.attacker.example:{self.d.port}",
                     "Origin": f"http://rebind.attacker.example:{self.d.port}"})
        self.assertJsonError(status, headers, body, 403)
        # A few 1xx answers are dropped; an app that sends nothing else is a bad gateway.
        status, _, raw = self.host_request(host, "GET", "/early")
        self.assertEqual((status, json.loads(raw)), (200, {"after": 3}))
        status, _, raw = self.host_request(host, "GET", "/early-flood")
        self.assertEqual(status, 502, raw)


class IngressAccessTest(IngressCase):
    """Who may reach a preview, and what the app never sees."""
    daemon_env = {**BASE_ENV, "AUTH_ENABLED": "true", "SANDBOX_WARM_POOL": "0"}

    def key(self, name):
        status, _, key = self.d.post("/admin/keys", body={"name": name, "scopes": ["exec"]})
        self.assertEqual(status, 201, key)
        return key["key"]

    def test_no_credential_reaches_the_app(self):
        sid = self.app_session()
        token = self.preview(sid)["token"]
        key = self.d.api_key
        status, _, body = self.path_request(
            sid, "POST", "/echo?api_key=K1&apiKey=K2&sandbox_token=T&keep=1", body=b"x",
            headers={"X-API-Key": key, "X-Sandbox-Token": token,
                     "E2B-Traffic-Access-Token": token, "X-Access-Token": "t",
                     "Cookie": f"theirs=1; sandbox_token={token}; also=2",
                     "X-Forwarded-For": "6.6.6.6", "Content-Type": "text/plain"})
        self.assertEqual(status, 200, body)
        status, _, raw = self.host_request(self.host_of(sid), "GET", "/headers",
                                           headers={"Authorization": f"Bearer {key}"})
        self.assertEqual(status, 200, raw)
        seen = self.app_log(sid)
        self.assertEqual(len(seen), 2, seen)
        for entry in seen:
            names = {k.lower(): v for k, v in entry["headers"].items()}
            text = json.dumps(entry)
            for secret in (key, token):
                self.assertNotIn(secret, text)
            for h in ("authorization", "x-api-key", "x-sandbox-token",
                      "e2b-traffic-access-token", "x-access-token"):
                self.assertNotIn(h, names)
            self.assertEqual(names["x-forwarded-for"], "127.0.0.1")
        self.assertEqual(seen[0]["path"], "/echo?keep=1")
        self.assertEqual({k.lower(): v for k, v in seen[0]["headers"].items()}["cookie"],
                         "theirs=1; also=2")
        # Nor does the access log hold the token.
        self.assertNotIn(token, self.d.stderr())

    def test_key_token_and_public_switch(self):
        sid = self.app_session()
        other = self.key("other")
        host = self.host_of(sid)
        # No credential: 401 (without a key a path names the session by its preview name;
        # by its id, it is not found); another key: 404, in both forms.
        name = self.preview(sid)["name"]
        status, headers, body = self.path_request(name, "GET", "/headers", api_key="")
        self.assertJsonError(status, headers, body, 401)
        status, headers, body = self.path_request(sid, "GET", "/headers", api_key="")
        self.assertJsonError(status, headers, body, 401)
        # Nor does an unknown name say it is unknown to a caller without a key.
        status, _, raw = self.host_request(f"{PORT}-nosuchname.localhost:{self.d.port}", "GET",
                                           "/")
        self.assertEqual(status, 401, raw)
        status, headers, body = self.path_request(sid, "GET", "/headers", api_key=other)
        self.assertJsonError(status, headers, body, 404)
        status, _, raw = self.host_request(host, "GET", "/headers",
                                           headers={"Authorization": f"Bearer {other}"})
        self.assertEqual(status, 404, raw)
        # The token: as a header, and as a query parameter that becomes a cookie.
        token = self.preview(sid)["token"]
        status, _, raw = self.host_request(host, "GET", "/headers",
                                           headers={"X-Sandbox-Token": token})
        self.assertEqual(status, 200, raw)
        status, headers, raw = self.host_request(host, "GET",
                                                 f"/headers?x=1&sandbox_token={token}")
        self.assertEqual((status, headers["Location"]), (302, "/headers?x=1"), raw)
        cookie = headers["Set-Cookie"]
        self.assertEqual(cookie, f"sandbox_token={token}; Path=/; HttpOnly; SameSite=Lax")
        status, _, raw = self.host_request(host, "GET", "/headers?x=1",
                                           headers={"Cookie": cookie.split(";")[0]})
        self.assertEqual(status, 200, raw)
        # Rotated: the old token stops working at once.
        status, _, rotated = self.d.post(f"/exec/{sid}/preview/token")
        self.assertEqual(status, 200, rotated)
        self.assertNotEqual(rotated["token"], token)
        status, _, raw = self.host_request(host, "GET", "/headers",
                                           headers={"X-Sandbox-Token": token})
        self.assertEqual(status, 401, raw)
        status, _, raw = self.host_request(host, "GET", "/headers",
                                           headers={"X-Sandbox-Token": rotated["token"]})
        self.assertEqual(status, 200, raw)
        # Public: anyone, until it is private again; only the owner may switch it.
        status, _, body = self.d.post(f"/exec/{sid}/preview/public",
                                      body={"port": PORT, "public": True}, api_key=other)
        self.assertEqual(status, 404, body)
        status, _, body = self.d.post(f"/exec/{sid}/preview/public",
                                      body={"port": PORT, "public": True})
        self.assertEqual((status, body["publicPorts"]), (200, [PORT]), body)
        status, _, raw = self.host_request(host, "GET", "/headers")
        self.assertEqual(status, 200, raw)
        self.assertTrue(self.ports(sid)[PORT]["public"])
        self.d.post(f"/exec/{sid}/preview/public", body={"port": PORT, "public": False})
        status, _, raw = self.host_request(host, "GET", "/headers")
        self.assertEqual(status, 401, raw)
        for bad in ({"port": 0, "public": True}, {"port": PORT}, {"port": "80", "public": 1}):
            status, headers, body = self.d.post(f"/exec/{sid}/preview/public", body=bad)
            self.assertJsonError(status, headers, body, 400)

    def test_what_origin_null_can_and_cannot_do(self):
        """The path form takes `Origin: null` (its own pages run sandboxed, an opaque
        origin): any page can send that, so it opens nothing by itself. What would let
        another site's page act is a credential its browser adds, the token's cookie, and
        that is SameSite=Lax: never sent with another site's POST, fetch or frame."""
        sid = self.app_session()
        name = self.preview(sid)["name"]
        token = self.preview(sid)["token"]
        null = {"Origin": "null", "Content-Type": "text/plain"}
        # No credential: refused, as without the Origin.
        status, headers, body = self.path_request(name, "POST", "/echo", body=b"x",
                                                  headers=null, api_key="")
        self.assertJsonError(status, headers, body, 401)
        # The cookie the token becomes is for the preview's path only, HttpOnly and
        # SameSite=Lax: a browser sends it with same-site requests and top-level GETs alone.
        status, headers, _ = self.path_request(name, "GET", f"/headers?sandbox_token={token}",
                                               api_key="")
        self.assertEqual(status, 302)
        self.assertEqual(headers["Set-Cookie"],
                         f"sandbox_token={token}; Path=/exec/{name}/ports/{PORT}; HttpOnly; "
                         f"SameSite=Lax")
        # With it (the preview's own sandboxed pages): the app is reached.
        status, _, body = self.path_request(name, "POST", "/echo", body=b"x",
                                            headers={**null, "Cookie": f"sandbox_token={token}"},
                                            api_key="")
        self.assertEqual(status, 200, body)
        # The host form is an origin of its own: `null` is not it.
        status, _, raw = self.host_request(self.host_of(sid), "POST", "/echo", body=b"x",
                                           headers={**null, "X-Sandbox-Token": token})
        self.assertEqual(status, 403, raw)
        # A public port is open to any page, with or without an Origin: nothing ambient.
        self.d.post(f"/exec/{sid}/preview/public", body={"port": PORT, "public": True})
        status, _, body = self.path_request(name, "POST", "/echo", body=b"x", headers=null,
                                            api_key="")
        self.assertEqual(status, 200, body)


class IngressLimitsTest(IngressCase):
    daemon_env = {**BASE_ENV, "SANDBOX_WARM_POOL": "0", "SANDBOX_PREVIEW_MAX_CONNECTIONS": "2",
                  "SANDBOX_PREVIEW_IDLE_TIMEOUT_MS": "1500"}

    def test_connections_per_session_and_idle_timeout(self):
        sid = self.app_session()
        host = self.host_of(sid)
        held = []
        try:
            for _ in range(2):
                c = http.client.HTTPConnection(self.d.host, self.d.port, timeout=60)
                c.request("GET", "/sse", headers={"Host": host})
                r = c.getresponse()
                self.assertEqual(r.status, 200)
                r.read1(100)
                held.append(c)
            status, headers, raw = self.host_request(host, "GET", "/headers")
            self.assertEqual(status, 429, raw)
            self.assertIn("SANDBOX_PREVIEW_MAX_CONNECTIONS", json.loads(raw)["error"])
        finally:
            for c in held:
                c.close()
        # A closed client frees its connection.
        wait_until(lambda: self.host_request(host, "GET", "/headers")[0] == 200, 30, 0.1,
                   "connections given back")
        status, headers, raw = self.host_request(host, "GET", "/hang")
        self.assertEqual(status, 504, raw)
        self.assertIn("sent nothing", json.loads(raw)["error"])


class IngressPublicCrowdTest(IngressCase):
    """Anonymous visitors of a public port cannot take every connection from its owner."""
    daemon_env = {**BASE_ENV, "AUTH_ENABLED": "true", "SANDBOX_WARM_POOL": "0"}

    def test_visitors_without_credentials_leave_room_for_the_owner(self):
        sid = self.app_session()
        host = self.host_of(sid)
        status, _, body = self.d.post(f"/exec/{sid}/preview/public",
                                      body={"port": PORT, "public": True})
        self.assertEqual(status, 200, body)
        # As many visitors as SANDBOX_PREVIEW_MAX_CONNECTIONS (64) and more try to hold a
        # stream each: three quarters of them get one, the others 429.
        held, refused = [], 0
        try:
            for _ in range(66):
                c = http.client.HTTPConnection(self.d.host, self.d.port, timeout=60)
                c.request("GET", "/sse", headers={"Host": host})
                r = c.getresponse()
                if r.status == 200:
                    r.read1(100)
                    held.append(c)
                    continue
                self.assertEqual(r.status, 429)
                self.assertIn("SANDBOX_PREVIEW_MAX_CONNECTIONS", json.loads(r.read())["error"])
                refused += 1
                c.close()
            # The owner, by key, and a holder of the token still get through.
            status, _, raw = self.host_request(
                host, "GET", "/headers", headers={"Authorization": f"Bearer {self.d.api_key}"})
            self.assertEqual(status, 200, raw)
            status, _, raw = self.path_request(sid, "GET", "/headers")
            self.assertEqual(status, 200, raw)
            token = self.preview(sid)["token"]
            status, _, raw = self.host_request(host, "GET", "/headers",
                                               headers={"X-Sandbox-Token": token})
            self.assertEqual(status, 200, raw)
            self.assertEqual((len(held), refused), (48, 18))
        finally:
            for c in held:
                c.close()


class PublicDomainSettingTest(unittest.TestCase):
    def test_a_domain_that_cannot_hold_preview_names_is_refused_at_start(self):
        import harness
        import subprocess
        for bad in ("Bad_Domain", "-x.example", "a..b", "x" * 64 + ".example"):
            r = subprocess.run([harness.sandboxd_path()], env={**os.environ,
                               "SANDBOX_PUBLIC_DOMAIN": bad, "PORT": "0"},
                               capture_output=True, text=True, timeout=30)
            self.assertEqual(r.returncode, 2, (bad, r.stderr))
            self.assertIn("SANDBOX_PUBLIC_DOMAIN", r.stderr)


class IngressNoNetworkTest(IngressCase):
    """A sandbox without a network still serves its previews: the agent dials its loopback."""
    daemon_env = {**BASE_ENV, "SANDBOX_WARM_POOL": "0", "SANDBOX_NETWORK": "off"}

    def test_a_preview_without_networking(self):
        sid = self.app_session()
        status, _, body = self.d.get("/exec")
        self.assertEqual([x["network"] for x in body["sessions"] if x["id"] == sid], ["off"])
        status, _, raw = self.host_request(self.host_of(sid), "GET", "/headers")
        self.assertEqual(status, 200, raw)
        ws = wsclient.WebSocket(self.d.host, self.d.port, f"/exec/{sid}/ports/{PORT}/ws")
        try:
            ws.send_text("offline")
            self.assertEqual(ws.recv(), (False, b"offline"))
        finally:
            ws.sock.close()


class IngressMemoryTest(IngressCase):
    daemon_env = {**BASE_ENV, "SANDBOX_WARM_POOL": "0", **small_quarantine_env()}

    @runner.tag("driver")
    def test_a_large_download_leaves_the_daemon_where_it_was(self):
        jail = os.environ.get("DRIVER", "jail") == "jail"
        size = (256 if jail else 32) * MiB
        sid = self.app_session(**({"resources": {"memoryBytes": 512 * MiB,
                                                 "diskBytes": 1024 * MiB}} if jail else {}))
        self.run_ok(sid, f"head -c {size} /dev/urandom > big.bin")
        want = self.stdout_of(sid, "sha256sum big.bin").split()[0]
        before = peak_rss_kib(self.d.proc.pid, samples=5)
        conn = http.client.HTTPConnection(self.d.host, self.d.port, timeout=600)
        conn.request("GET", f"/exec/{sid}/ports/{PORT}/files/big.bin")
        r = conn.getresponse()
        self.assertEqual(r.status, 200)
        h, n = hashlib.sha256(), 0
        while True:
            chunk = r.read(MiB)
            if not chunk:
                break
            h.update(chunk)
            n += len(chunk)
        conn.close()
        grown = (peak_rss_kib(self.d.proc.pid, samples=5) - before) / 1024
        print(f"\n  download of {size // MiB} MiB through a preview: daemon RSS +{grown:.1f} MiB",
              flush=True)
        self.assertEqual((n, h.hexdigest()), (size, want))
        self.assertLess(grown, 16)


if __name__ == "__main__":
    unittest.main()
