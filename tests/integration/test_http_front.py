"""The daemon's HTTP front end under hostile clients, over real sockets: a key is checked
before any body byte is read (a keyless gigabyte is refused at once and costs no memory, an
authorised 90 MiB upload still goes through), a crowd of slow clients at the descriptor limit
does not keep a prompt, authorised request from its answer, heads have a deadline, and the
connection layer's counts are in /metrics."""
import os
import resource
import shutil
import socket
import time
import unittest

import harness
from helpers_exec import DaemonTestCase, joined

MiB = 1024 * 1024
BASE_ENV = {"SANDBOX_WARM_POOL": "0"}


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def read_response(sock, timeout):
    """What the server sent until it closed, or until a whole JSON error arrived."""
    sock.settimeout(timeout)
    data = b""
    try:
        while b"\r\n\r\n" not in data or not data.rstrip().endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    return data


class EarlyRefusalTest(DaemonTestCase):
    daemon_env = {**BASE_ENV, "AUTH_ENABLED": "true", "VM_MEMORY_LIMIT_BYTES": str(512 * MiB)}

    def test_keyless_gigabyte_is_refused_at_once_without_memory(self):
        d = self.d
        before = rss_kib(d.proc.pid)
        socks, took = [], []
        try:
            for _ in range(4):
                s = socket.create_connection((d.host, d.port), timeout=10)
                socks.append(s)
                t0 = time.monotonic()
                s.sendall(b"POST /exec/x/write HTTP/1.1\r\nHost: localhost\r\n"
                          b"Content-Type: application/json\r\n"
                          b"Content-Length: 1073741824\r\n\r\n")
                try:
                    s.sendall(b"x" * (4 * MiB))  # as much as it takes before refusing
                except OSError:
                    pass
                resp = read_response(s, 10)
                took.append(time.monotonic() - t0)
                self.assertTrue(resp.startswith(b"HTTP/1.1 401"), resp[:200])
                self.assertIn(b'"error"', resp)
        finally:
            for s in socks:
                s.close()
        grown = rss_kib(d.proc.pid) - before
        print(f"keyless 1 GiB: answered in {max(took) * 1000:.1f} ms at most, "
              f"daemon grew {grown} KiB", flush=True)
        self.assertLess(max(took), 1.0)
        self.assertLess(grown, 32 * 1024, "the daemon buffered a refused body")

    def test_authorised_90_mib_upload_succeeds(self):
        sid = self.session()
        status, _, body = self.d.post("/exec", body={"id": sid,
                                                     "resources": {"memoryBytes": 512 * MiB}})
        self.assertIn(status, (200, 201), body)
        content = "y" * (90 * MiB)
        status, _, body = self.d.post(f"/exec/{sid}/write",
                                      body={"path": "big.txt", "content": content}, timeout=120)
        self.assertEqual(status, 200, body)
        status, body = self.execute(sid, "wc -c < /workspace/big.txt")
        self.assertEqual(status, 200, body)
        self.assertEqual(int(joined(body["output"]).strip()), 90 * MiB)

    def test_a_refusal_at_the_head_is_the_only_answer(self):
        """A request without a body refused at its head (no key here) gets that answer and
        nothing else, with Connection: close as with keep-alive."""
        for extra in (b"Connection: close\r\n", b""):
            s = socket.create_connection((self.d.host, self.d.port), timeout=10)
            try:
                s.sendall(b"GET /exec HTTP/1.1\r\nHost: localhost\r\n" + extra + b"\r\n")
                s.settimeout(2)
                data = b""
                try:
                    while True:
                        chunk = s.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                except socket.timeout:
                    pass
            finally:
                s.close()
            self.assertTrue(data.startswith(b"HTTP/1.1 401"), data[:200])
            self.assertEqual(data.count(b"HTTP/1.1 "), 1, data)

    def test_connection_counts_in_metrics(self):
        status, _, body = self.d.get("/metrics")
        self.assertEqual(status, 200)
        text = body.decode() if isinstance(body, bytes) else str(body)
        self.assertIn("http_connections ", text)
        self.assertIn("http_connections_closed_total", text)


class HeaderDeadlineTest(DaemonTestCase):
    daemon_env = {**BASE_ENV, "SANDBOX_HEADER_TIMEOUT_MS": "500"}

    def test_a_trickled_head_gets_408_and_is_closed(self):
        s = socket.create_connection((self.d.host, self.d.port), timeout=10)
        self.addCleanup(s.close)
        s.sendall(b"GET /health HTTP/1.1\r\nHo")
        resp = read_response(s, 10)
        self.assertTrue(resp.startswith(b"HTTP/1.1 408"), resp[:200])
        self.assertIn(b"Connection: close", resp)
        self.assertEqual(s.recv(10), b"")

    def test_a_prompt_client_is_served(self):
        status, _, body = self.d.get("/health")
        self.assertEqual(status, 200, body)


class SlowBodyTest(DaemonTestCase):
    """A body sent slowly holds its connection no longer than its deadline, and a route that
    takes no body (anyone's /health) refuses one at the head."""
    daemon_env = {**BASE_ENV, "SANDBOX_BODY_TIMEOUT_MS": "1000", "SANDBOX_BODY_MIN_RATE": "100"}

    def test_keyless_routes_take_no_body(self):
        for path in ("/health", "/ready", "/ui/app.js"):
            s = socket.create_connection((self.d.host, self.d.port), timeout=10)
            self.addCleanup(s.close)
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\n"
                      "Content-Length: 65536\r\n\r\nx".encode())
            resp = read_response(s, 10)
            self.assertTrue(resp.startswith(b"HTTP/1.1 413"), resp[:300])
            self.assertIn(b"takes no request body", resp)

    def test_a_trickled_body_is_cut_at_its_deadline(self):
        s = socket.create_connection((self.d.host, self.d.port), timeout=10)
        self.addCleanup(s.close)
        s.sendall(f"POST /exec HTTP/1.1\r\nHost: localhost\r\n"
                  f"Authorization: Bearer {self.d.api_key}\r\n"
                  "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{".encode())
        start = time.monotonic()
        s.settimeout(0.5)
        resp = b""
        # A byte every half second: each within the 1 s body timeout, far below 100 B/s.
        while time.monotonic() - start < 20 and not resp:
            try:
                s.sendall(b" ")
                resp = s.recv(4096)
            except socket.timeout:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
        self.assertTrue(resp.startswith(b"HTTP/1.1 408"), resp[:300])
        self.assertLess(time.monotonic() - start, 10)


class SlowClientsTest(unittest.TestCase):
    """1,100 slow clients from one address at a 1,024-descriptor limit: the daemon sheds the
    oldest of them, and a new authorised request from the same address is answered within a
    second; the log says nothing per connection."""

    def test_slow_crowd_at_the_descriptor_limit(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < 4096:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(4096, hard), hard))
        d = harness.Daemon(env=dict(BASE_ENV), binary=shutil.which("prlimit"),
                           args=("--nofile=1024:1024", "--", harness.sandboxd_path()))
        d.start()
        self.addCleanup(shutil.rmtree, d.tmp, True)
        self.addCleanup(d.kill)
        socks = []
        self.addCleanup(lambda: [s.close() for s in socks])
        for _ in range(1100):
            try:
                s = socket.create_connection((d.host, d.port), timeout=5)
                s.sendall(b"GET /exec HTTP/1.1\r\nHost: localhost\r\nAuthori")  # and no more
                socks.append(s)
            except OSError:
                pass
        t0 = time.monotonic()
        status, _, body = d.get("/exec", timeout=5)
        took = time.monotonic() - t0
        print(f"1,100 slow clients: an authorised request answered in {took * 1000:.1f} ms",
              flush=True)
        self.assertEqual(status, 200, body)
        self.assertLess(took, 1.0)
        closed = 0
        for s in socks:
            s.setblocking(False)
            try:
                if s.recv(1) == b"":
                    closed += 1
            except BlockingIOError:
                pass
            except OSError:
                closed += 1
        self.assertGreater(closed, 500, "the oldest slow clients were not shed")
        status, _, text = d.get("/metrics")
        text = text.decode() if isinstance(text, bytes) else str(text)
        self.assertRegex(text, r'http_connections_closed_total\{reason="evicted"\} [1-9]')
        logs = [l for l in d.logs() if l.get("level") != "debug"]
        self.assertLess(len(logs), 200, "the log grew with the connections")


if __name__ == "__main__":
    unittest.main()


def offloaded(d):
    """http_json_bodies_offloaded_total from /metrics."""
    _, _, text = d.get("/metrics", headers={"Accept": "text/plain"})
    text = text.decode() if isinstance(text, bytes) else str(text)
    for line in text.splitlines():
        if line.startswith("http_json_bodies_offloaded_total"):
            return float(line.split()[-1])
    raise AssertionError("no http_json_bodies_offloaded_total in /metrics")


class LargeJsonBodyTest(DaemonTestCase):
    """Bodies over a megabyte of execute and write are checked and parsed on the worker
    pool (HTTP_ROUTE_JSON_BODY), with the same answers as on the loop."""
    daemon_env = {**BASE_ENV, "VM_MEMORY_LIMIT_BYTES": str(512 * MiB)}

    def test_large_bodies_are_parsed_off_the_loop_with_the_same_answers(self):
        sid = self.session()
        before = offloaded(self.d)
        content = "b" * (3 * MiB)
        status, _, body = self.d.post(f"/exec/{sid}/write",
                                      body={"path": "big.txt", "content": content}, timeout=120)
        self.assertEqual(status, 200, str(body)[:200])
        self.assertEqual(body["size"], 3 * MiB)
        status, _, body = self.d.post(f"/exec/{sid}/execute",
                                      body={"command": "wc", "args": ["-c"],
                                            "stdin": "x" * (2 * MiB)}, timeout=120)
        self.assertEqual(status, 200, str(body)[:200])
        self.assertEqual(joined(body["output"], "stdout").strip(), str(2 * MiB))
        self.assertEqual(offloaded(self.d), before + 2)
        # Errors are those of the loop's parsing, named the same way.
        pad = " " * (2 * MiB)
        for raw, code, words in ((b'{"path": "x", "content": "' + b"a" * (2 * MiB), 400,
                                  "Malformed JSON body"),
                                 (b"[" * 40 + pad.encode() + b"]" * 40, 400,
                                  "SANDBOX_MAX_JSON_DEPTH"),
                                 (b'["' + b"a" * (2 * MiB) + b'"]', 400, "JSON object")):
            status, _, body = self.d.post(f"/exec/{sid}/write", body=raw,
                                          headers={"Content-Type": "application/json"},
                                          timeout=120)
            self.assertEqual(status, code, str(body)[:200])
            self.assertIn(words, body["error"])
        self.assertEqual(offloaded(self.d), before + 5)
        # A small body is parsed where it arrives.
        self.run_ok(sid, "true")
        self.assertEqual(offloaded(self.d), before + 5)

    def test_large_mcp_messages_too(self):
        before = offloaded(self.d)
        headers = {"Content-Type": "application/json",
                   "Accept": "application/json, text/event-stream"}
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                           "clientInfo": {"name": "big", "version": "x" * (2 * MiB)}}}
        status, _, body = self.d.post("/mcp", body=init, headers=headers, timeout=120)
        self.assertEqual(status, 200, str(body)[:200])
        status, _, body = self.d.post("/mcp", body=b"{" + b" " * (2 * MiB), headers=headers,
                                      timeout=120)
        self.assertEqual(status, 400, str(body)[:200])
        self.assertEqual(body["error"]["code"], -32700)
        self.assertIn("Parse error", body["error"]["message"])
        status, _, body = self.d.post("/mcp", body=b"[" * 40 + b" " * (2 * MiB) + b"]" * 40,
                                      headers=headers, timeout=120)
        self.assertEqual(status, 400, str(body)[:200])
        self.assertIn("SANDBOX_MAX_JSON_DEPTH", body["error"]["message"])
        self.assertEqual(offloaded(self.d), before + 3)


class LargeJsonBodyLeftTest(DaemonTestCase):
    """A daemon of its own: when a leaving client's body is dispatched is not known."""
    daemon_env = {**BASE_ENV, "VM_MEMORY_LIMIT_BYTES": str(512 * MiB)}

    def test_a_client_that_leaves_during_the_parse_costs_nothing(self):
        sid = self.session()
        body = b'{"path": "left.txt", "content": "' + b"c" * (8 * MiB) + b'"}'
        for _ in range(3):
            s = socket.create_connection((self.d.host, self.d.port), timeout=30)
            s.sendall(f"POST /exec/{sid}/write HTTP/1.1\r\nHost: localhost\r\n"
                      f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                      .encode() + body)
            s.close()
        # The daemon goes on serving (and its exit, checked by the harness, is clean).
        self.run_ok(sid, "true")
