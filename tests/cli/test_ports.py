"""`sandbox ports`, `sandbox open` and `sandbox forward` against a real daemon: servers started
in a session of the python template, listed, reached by the printed URLs (with a key, and with
the token alone), and relayed from a local port (several connections at once, bytes both
ways); and their errors."""

import hashlib
import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import unittest
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import harness  # noqa: E402

CLI = os.environ.get("SANDBOX_CLI") or os.path.join(ROOT, "build", "cli", "sandbox")
WEB = 8000   # python3 -m http.server in the session's workspace
ECHO = 8001  # echo.py below: each connection gets back what it sends
MiB = 1 << 20

ECHO_PY = b"""import socket, sys, threading
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
def serve(c):
    while True:
        d = c.recv(65536)
        if not d:
            break
        c.sendall(d)
    c.close()
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def recv_exactly(sock, n):
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(min(n - len(out), 1 << 16))
        if not chunk:
            raise AssertionError(f"the connection ended after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


class PortsCliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = harness.Daemon(env={"SANDBOX_DEFAULT_TEMPLATE": "base",
                                         "SANDBOX_WARM_POOL": "0"})
        cls.daemon.start()
        cls.env = dict(os.environ, SANDBOX_URL=cls.daemon.base_url,
                       SANDBOX_API_KEY=cls.daemon.admin_key)
        cls.sid = "ports1"
        cls.run_cli("create", cls.sid, "--template", "python")
        cls.page = os.urandom(16).hex()
        cls.run_cli("exec", cls.sid, "--", "sh", "-c", f"echo {cls.page} > page.txt")
        status, _, body = cls.daemon.request("PUT", f"/exec/{cls.sid}/file", body=ECHO_PY,
                                             query={"path": "echo.py"},
                                             headers={"Content-Type": "application/octet-stream"})
        assert status == 200, body
        cls.run_cli("exec", "-d", cls.sid, "--tag", "web", "--", "python3", "-m", "http.server",
                    str(WEB))
        cls.run_cli("exec", "-d", cls.sid, "--tag", "echo", "--", "python3", "echo.py", str(ECHO))
        harness.wait_until(lambda: {WEB, ECHO} <= cls.listening(cls.sid), 60, 0.1,
                           "the servers to listen")

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    @classmethod
    def run_cli(cls, *args):
        p = subprocess.run([CLI, *args], env=cls.env, capture_output=True, timeout=120)
        assert p.returncode == 0, (args, p.stderr)
        return p

    @classmethod
    def listening(cls, sid):
        status, _, body = cls.daemon.get(f"/exec/{sid}/ports")
        assert status == 200, body
        return {p["port"] for p in body["ports"]}

    def cli(self, *args, env=None):
        return subprocess.run([CLI, *args], env=env or self.env, capture_output=True, timeout=120)

    def fetch(self, url, headers=None):
        """GET url from the daemon as a browser would: a host of the `*.localhost` form is the
        loopback address, its name goes in the Host header. Returns (status, headers, body)."""
        u = urllib.parse.urlsplit(url)
        self.assertEqual(u.scheme, "http", url)
        self.assertEqual(u.port, self.daemon.port, url)
        conn = http.client.HTTPConnection(self.daemon.host, self.daemon.port, timeout=60)
        try:
            conn.request("GET", u.path + (f"?{u.query}" if u.query else ""),
                         headers={"Host": u.netloc, **(headers or {})})
            r = conn.getresponse()
            return r.status, r.headers, r.read()
        finally:
            conn.close()

    def name(self):
        status, _, body = self.daemon.get(f"/exec/{self.sid}/preview")
        self.assertEqual(status, 200, body)
        return body["name"]

    def start_forward(self, *args):
        """`sandbox forward ARGS...` running; returns (process, local port) once it listens."""
        p = subprocess.Popen([CLI, "forward", *args], env=self.env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        self.addCleanup(lambda: (p.kill(), p.wait(), p.stdout.close(), p.stderr.close()))
        line = p.stdout.readline().decode()
        if not line.startswith("forwarding 127.0.0.1:"):
            p.kill()
            self.fail(f"sandbox forward printed {line!r}: {p.stderr.read()!r}")
        return p, int(line.split()[1].rsplit(":", 1)[1])

    def test_ports_lists_the_servers(self):
        p = self.cli("ports", self.sid)
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = p.stdout.decode().splitlines()
        self.assertEqual(lines[0].split(), ["PORT", "ADDRESS", "PUBLIC", "URL"])
        rows = {int(line.split()[0]): line.split() for line in lines[1:]}
        host = f"{self.name()}.localhost:{self.daemon.port}"
        self.assertEqual(rows[WEB], [str(WEB), "0.0.0.0", "no", f"http://{WEB}-{host}/"])
        self.assertEqual(rows[ECHO], [str(ECHO), "127.0.0.1", "no", f"http://{ECHO}-{host}/"])
        # Public is what the daemon says, and --json is its answer.
        status, _, body = self.daemon.post(f"/exec/{self.sid}/preview/public",
                                           body={"port": ECHO, "public": True})
        self.assertEqual(status, 200, body)
        self.addCleanup(self.daemon.post, f"/exec/{self.sid}/preview/public",
                        body={"port": ECHO, "public": False})
        p = self.cli("ports", self.sid)
        self.assertIn(f"{ECHO}   127.0.0.1        yes", p.stdout.decode())
        p = self.cli("ports", self.sid, "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        listing = json.loads(p.stdout)
        entry = next(e for e in listing["ports"] if e["port"] == WEB)
        self.assertEqual(entry["pathUrl"], f"/exec/{self.name()}/ports/{WEB}/")
        self.assertIs(listing["truncated"], False)

    def test_open_prints_urls_that_serve_the_page(self):
        key = {"Authorization": f"Bearer {self.daemon.admin_key}"}
        p = self.cli("open", self.sid, str(WEB))
        self.assertEqual(p.returncode, 0, p.stderr)
        url = p.stdout.decode().strip()
        self.assertEqual(url, f"http://{WEB}-{self.name()}.localhost:{self.daemon.port}/")
        status, _, body = self.fetch(url + "page.txt", key)
        self.assertEqual((status, body), (200, f"{self.page}\n".encode()))
        # The path form, on the daemon's own URL.
        p = self.cli("open", self.sid, str(WEB), "--path")
        self.assertEqual(p.returncode, 0, p.stderr)
        url = p.stdout.decode().strip()
        self.assertEqual(url, f"{self.daemon.base_url}/exec/{self.name()}/ports/{WEB}/")
        status, _, body = self.fetch(url + "page.txt", key)
        self.assertEqual((status, body), (200, f"{self.page}\n".encode()))
        # Without a key the page is closed; the token URL opens it (a redirect that sets the
        # cookie, then the page with the cookie alone), in both forms.
        for form in ([], ["--path"]):
            p = self.cli("open", self.sid, str(WEB), "--token", *form)
            self.assertEqual(p.returncode, 0, p.stderr)
            url = p.stdout.decode().strip()
            base, _, query = url.partition("?")
            self.assertTrue(query.startswith("sandbox_token=pt_"), url)
            status, _, _ = self.fetch(base + "page.txt")
            self.assertEqual(status, 401)
            status, headers, _ = self.fetch(url)
            self.assertEqual(status, 302, url)
            cookie = headers["Set-Cookie"].split(";")[0]
            status, _, body = self.fetch(base + "page.txt", {"Cookie": cookie})
            self.assertEqual((status, body), (200, f"{self.page}\n".encode()))

    def test_forward_relays_requests_and_bytes_both_ways(self):
        proc, local = self.start_forward(self.sid, str(WEB), "0")
        conn = http.client.HTTPConnection("127.0.0.1", local, timeout=60)
        conn.request("GET", "/page.txt")
        r = conn.getresponse()
        self.assertEqual((r.status, r.read()), (200, f"{self.page}\n".encode()))
        conn.close()
        # Several connections at once, each its own stream, one of them carrying 8 MiB each
        # way while the others wait.
        echo, elocal = self.start_forward(self.sid, str(ECHO), "0")
        socks = [socket.create_connection(("127.0.0.1", elocal), timeout=60) for _ in range(4)]
        try:
            for i, s in enumerate(socks):
                s.sendall(f"hello {i}\n".encode())
            data = os.urandom(8 * MiB)
            sender = threading.Thread(target=socks[0].sendall, args=(data,))
            sender.start()
            self.assertEqual(recv_exactly(socks[0], 8), b"hello 0\n")
            got = recv_exactly(socks[0], len(data))
            sender.join()
            self.assertEqual(hashlib.sha256(got).digest(), hashlib.sha256(data).digest())
            for i, s in reversed(list(enumerate(socks[1:], 1))):
                self.assertEqual(recv_exactly(s, 8), f"hello {i}\n".encode())
        finally:
            for s in socks:
                s.close()
        # Ctrl-C stops it.
        for p in (proc, echo):
            p.send_signal(signal.SIGINT)
            self.assertEqual(p.wait(timeout=30), 0, p.stderr.read())

    def test_forward_listens_on_the_same_port_by_default(self):
        port = free_port()
        self.run_cli("exec", "-d", self.sid, "--", "python3", "echo.py", str(port))
        harness.wait_until(lambda: port in self.listening(self.sid), 60, 0.1,
                           "the echo server to listen")
        _, local = self.start_forward(self.sid, str(port))
        self.assertEqual(local, port)
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.sendall(b"same port\n")
            self.assertEqual(recv_exactly(s, 10), b"same port\n")

    def test_errors_are_clear(self):
        for args in (["ports", "nosuch"], ["open", "nosuch", "80"],
                     ["forward", "nosuch", "80", "0"]):
            p = self.cli(*args)
            self.assertEqual(p.returncode, 1, args)
            self.assertIn(b"Session `nosuch` not found", p.stderr, args)
        for args in (["open", self.sid, "0"], ["forward", self.sid, "0"],
                     ["forward", self.sid, "65536", "0"], ["open", self.sid, "http"],
                     ["forward", self.sid, str(WEB), "70000"]):
            p = self.cli(*args)
            self.assertEqual(p.returncode, 1, args)
            self.assertIn(b"a port is a number from 1 to 65535", p.stderr, args)
        idle = free_port()
        for cmd in (["open"], ["forward"]):
            p = self.cli(*cmd, self.sid, str(idle))
            self.assertEqual(p.returncode, 1, cmd)
            self.assertIn(f"nothing is listening on port {idle} in session `{self.sid}`".encode(),
                          p.stderr)
        # A local port that is taken.
        with socket.socket() as taken:
            taken.bind(("127.0.0.1", 0))
            taken.listen(1)
            p = self.cli("forward", self.sid, str(WEB), str(taken.getsockname()[1]))
            self.assertEqual(p.returncode, 1)
            self.assertIn(b"cannot listen on 127.0.0.1 port", p.stderr)
        # Usage.
        for args in (["ports"], ["open", self.sid], ["forward", self.sid], ["ports", "a", "b"]):
            self.assertEqual(self.cli(*args).returncode, 2, args)

    def test_forward_when_the_server_goes_away(self):
        port = free_port()
        self.run_cli("exec", "-d", self.sid, "--tag", "gone", "--", "python3", "echo.py",
                     str(port))
        harness.wait_until(lambda: port in self.listening(self.sid), 60, 0.1,
                           "the echo server to listen")
        proc, local = self.start_forward(self.sid, str(port), "0")
        self.run_cli("kill", self.sid, "gone", "-s", "KILL")
        harness.wait_until(lambda: port not in self.listening(self.sid), 60, 0.1,
                           "the echo server to go")
        # The connection is closed, the reason said, and the forward goes on.
        with socket.create_connection(("127.0.0.1", local), timeout=60) as s:
            self.assertEqual(s.recv(100), b"")
        proc.send_signal(signal.SIGINT)
        self.assertEqual(proc.wait(timeout=30), 0)
        self.assertIn(f"sandbox: forward: nothing is listening on port {port}".encode(),
                      proc.stderr.read())

    def test_help(self):
        p = self.cli("--help")
        for cmd in ("ports", "open", "forward"):
            self.assertIn(f"\n  {cmd} ".encode(), p.stdout)
            h = self.cli(cmd, "--help")
            self.assertEqual(h.returncode, 0)
            self.assertIn(f"usage: sandbox {cmd} SESSION".encode(), h.stdout)


class HostileDaemonTest(unittest.TestCase):
    """`sandbox forward` against a server that lists a port but answers the upgrade wrongly:
    each connection gets a clear error, is closed, and the forward goes on."""

    ANSWERS = [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", b"(HTTP 200)"),
        (b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
         b"Connection: Upgrade\r\n\r\n", b"did not upgrade to tcp"),
        (b"SSH-2.0-nonsense\r\n\r\n", b"is not HTTP"),
        (b"HTTP/1.1 101 Switching Protocols\r\n" + b"X-Pad: " + b"a" * (80 << 10), b"too long"),
        (b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 17\r\n\r\n{\"error\": \"nope\"}",
         b"nope (HTTP 502)"),
    ]

    def serve(self, listener, answers):
        listing = json.dumps({"ports": [{"port": 80, "address": "0.0.0.0", "public": False,
                                         "url": "http://80-x.localhost/",
                                         "pathUrl": "/exec/x/ports/80/"}],
                              "truncated": False}).encode()
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                head = b""
                while b"\r\n\r\n" not in head:
                    chunk = conn.recv(4096)
                    if not chunk:
                        break
                    head += chunk
                if head.startswith(b"GET /exec/x/ports "):
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                 b"Connection: close\r\nContent-Length: %d\r\n\r\n%s"
                                 % (len(listing), listing))
                elif head.startswith(b"GET /exec/x/forward/80 ") and answers:
                    self.assertIn(b"\r\nUpgrade: tcp\r\n", head)
                    self.assertIn(b"\r\nAuthorization: Bearer sk_test_fake\r\n", head)
                    conn.sendall(answers.pop(0))

    def test_bad_answers_to_the_upgrade(self):
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        answers = [a for a, _ in self.ANSWERS]
        t = threading.Thread(target=self.serve, args=(listener, answers), daemon=True)
        t.start()
        self.addCleanup(listener.close)
        env = dict(os.environ, SANDBOX_URL=f"http://127.0.0.1:{listener.getsockname()[1]}",
                   SANDBOX_API_KEY="sk_test_fake")
        p = subprocess.Popen([CLI, "forward", "x", "80", "0"], env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        self.addCleanup(lambda: (p.kill(), p.wait(), p.stdout.close(), p.stderr.close()))
        line = p.stdout.readline().decode()
        self.assertTrue(line.startswith("forwarding 127.0.0.1:"), line)
        local = int(line.split()[1].rsplit(":", 1)[1])
        for _ in self.ANSWERS:
            with socket.create_connection(("127.0.0.1", local), timeout=60) as s:
                self.assertEqual(s.recv(100), b"")
        p.send_signal(signal.SIGINT)
        self.assertEqual(p.wait(timeout=30), 0)
        err = p.stderr.read()
        for _, message in self.ANSWERS:
            self.assertIn(message, err)


if __name__ == "__main__":
    unittest.main()
