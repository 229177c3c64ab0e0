"""Bounded memory per request, over real sockets against the daemon: file reads stream to
their client with back-pressure (readers that never read cost a window each, not the file), a
read whose file changes midway ends visibly, JSON bodies are limited in size, nesting and
number of values before they are parsed, and the worst case of the memory formula in
docs/operations.md stays below its bound."""
import json
import os
import socket
import threading
import time
import unittest

from helpers_exec import DaemonTestCase, wait_until

MiB = 1024 * 1024
KiB = 1024


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def peak_rss_kib(pid, samples=20, interval=0.05):
    """The largest of a few samples: the daemon's memory while what it holds settles."""
    peak = 0
    for _ in range(samples):
        peak = max(peak, rss_kib(pid))
        time.sleep(interval)
    return peak


def small_quarantine_env():
    """Under AddressSanitizer freed memory is kept aside (256 MiB by default) before reuse,
    which would count as the daemon's: the memory tests keep that small. Without the
    sanitizer the variable is ignored."""
    opts = os.environ.get("ASAN_OPTIONS", "")
    return {"ASAN_OPTIONS": f"{opts}:quarantine_size_mb=4".lstrip(":")}


def connect(d, rcvbuf=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if rcvbuf:
        # Before connecting, so that the window the kernel offers stays small.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(120)
    s.connect((d.host, d.port))
    return s


def send_get(s, path, accept="application/json"):
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: localhost\r\nAccept: {accept}\r\n\r\n".encode())


def read_head(s):
    """The status, the headers (lower-case names) and what came after them."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = s.recv(4096)
        if not chunk:
            raise AssertionError(f"connection closed before the head: {data[:200]!r}")
        data += chunk
    head, rest = data.split(b"\r\n\r\n", 1)
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return int(lines[0].split()[1]), headers, rest


def read_to_close(s, data=b""):
    while True:
        chunk = s.recv(1 << 20)
        if not chunk:
            return data
        data += chunk


def post_raw(d, path, body, accept="application/json"):
    """POSTs body over a fresh connection; (status, JSON reply)."""
    s = connect(d)
    try:
        s.sendall(f"POST {path} HTTP/1.1\r\nHost: localhost\r\n"
                  f"Content-Type: application/json\r\nAccept: {accept}\r\n"
                  f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode())
        try:
            s.sendall(body)
        except OSError:
            pass  # refused before the whole body went: the answer is still there
        status, headers, rest = read_head(s)
        raw = read_to_close(s, rest)
        return status, json.loads(raw) if raw else None
    finally:
        s.close()


class StreamedReadsTest(DaemonTestCase):
    daemon_env = {**small_quarantine_env(), "VM_MEMORY_LIMIT_BYTES": str(512 * MiB)}

    def make_file(self, sid, name, mib, byte="a"):
        self.run_ok(sid, f"head -c {mib * MiB} /dev/zero | tr '\\0' '{byte}' > {name}",
                    http_timeout=120)

    def test_six_readers_that_read_nothing_keep_the_daemon_small(self):
        sid = self.session()
        self.make_file(sid, "text.txt", 64)
        # Warm up: one whole read, so what the daemon allocates once is in.
        status, _, body = self.d.get(f"/exec/{sid}/read", query={"path": "text.txt"},
                                     timeout=120)
        self.assertEqual(status, 200)
        del body
        before = peak_rss_kib(self.d.proc.pid, samples=5)
        readers = []
        try:
            for query, accept in (("", "application/json"),
                                  ("", "application/json"),
                                  ("&encoding=base64", "application/json"),
                                  ("&encoding=base64", "application/json"),
                                  ("", "application/octet-stream"),
                                  ("", "application/octet-stream")):
                s = connect(self.d, rcvbuf=16 * KiB)
                readers.append(s)
                send_get(s, f"/exec/{sid}/read?path=text.txt{query}", accept)
            # Each reply has begun (the old daemon began one only once it held the whole
            # file); after that nothing more is read.
            for s in readers:
                self.assertTrue(s.recv(1, socket.MSG_PEEK))
            peak = peak_rss_kib(self.d.proc.pid)
        finally:
            for s in readers:
                s.close()
        grown = (peak - before) / 1024
        print(f"6 readers of 64 MiB files that read nothing: the daemon grew {grown:.1f} MiB",
              flush=True)
        # A window and a high-water mark each (a few MiB), against 64 MiB or more each.
        self.assertLess(grown, 48, "the daemon held the files of readers that read nothing")
        # The readers that left are forgotten: the session runs nothing, and reads work.
        wait_until(lambda: self.listed_sessions()[sid]["running"] == 0, 60,
                   what="the abandoned reads to end")
        status, _, body = self.d.get(f"/exec/{sid}/read", query={"path": "text.txt"},
                                     timeout=120)
        self.assertEqual(status, 200)
        self.assertEqual(body["encoding"], "utf8")
        self.assertEqual(body["size"], 64 * MiB)
        self.assertEqual(body["content"], "a" * (64 * MiB))

    def paused_read(self, sid, path, accept):
        """A read whose reply has begun, with a little of it taken, then paused."""
        s = connect(self.d, rcvbuf=16 * KiB)
        self.addCleanup(s.close)
        send_get(s, f"/exec/{sid}/read?path={path}", accept)
        status, headers, rest = read_head(s)
        self.assertEqual(status, 200)
        while len(rest) < 64 * KiB:
            rest += s.recv(64 * KiB)
        return s, headers, rest

    def test_a_raw_read_of_a_file_that_grows_midway_is_cut_short(self):
        sid = self.session()
        self.make_file(sid, "grows.bin", 32)
        s, headers, got = self.paused_read(sid, "grows.bin", "application/octet-stream")
        self.assertEqual(int(headers["content-length"]), 32 * MiB)
        # The sandbox has sent a few MiB at most: the rest waits for this client.
        self.run_ok(sid, "echo more >> grows.bin")
        body = read_to_close(s, got)
        self.assertLess(len(body), 32 * MiB, "a read of a changed file looked complete")
        self.assertIn("changed while being read",
                      "".join(e.get("msg", "") for e in self.d.logs()))

    def test_a_json_read_of_text_that_changes_midway_is_cut_short(self):
        sid = self.session()
        self.make_file(sid, "text.txt", 32)
        s, headers, got = self.paused_read(sid, "text.txt", "application/json")
        self.assertEqual(headers.get("transfer-encoding"), "chunked")
        # A NUL where it has not been read yet: what follows would not be text.
        self.run_ok(sid, "printf '\\000' | dd of=text.txt bs=1 seek=33000000 conv=notrunc "
                         "2>/dev/null")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * MiB)  # the rest at full speed
        body = read_to_close(s, got)
        self.assertFalse(body.endswith(b"0\r\n\r\n"), "the chunked reply ended as complete")
        self.assertNotIn(b'"encoding"', body[-200:])

    def test_reads_of_an_unchanged_file_are_whole(self):
        sid = self.session()
        self.make_file(sid, "same.txt", 8, byte="\\001")
        s, headers, got = self.paused_read(sid, "same.txt", "application/json")
        self.assertEqual(headers.get("transfer-encoding"), "chunked")
        # The rest through a window of the usual size: 48 MiB through the small one takes
        # minutes.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * MiB)
        body = got
        while not body.endswith(b"0\r\n\r\n"):
            chunk = s.recv(1 << 20)
            self.assertTrue(chunk, "the reply ended before its last chunk")
            body += chunk
        # Control characters escaped as \u0001: six bytes each, through a small window.
        chunks, rest = [], body
        while True:
            size_line, rest = rest.split(b"\r\n", 1)
            n = int(size_line, 16)
            if n == 0:
                break
            chunks.append(rest[:n])
            rest = rest[n + 2:]
        reply = json.loads(b"".join(chunks))
        self.assertEqual(reply["encoding"], "utf8")
        self.assertEqual(reply["size"], 8 * MiB)
        self.assertEqual(reply["content"], "\x01" * (8 * MiB))


class SlowReaderTest(DaemonTestCase):
    """A streamed read lasts as long as its client takes to read it: the sandbox's deadline
    (SANDBOX_FILE_OP_TIMEOUT_MS, short here) does not run while the daemon waits for the
    client, and a client that takes a little of the reply in every body timeout
    (SANDBOX_BODY_TIMEOUT_MS, short here too) is not cut, however long it takes in all,
    whatever the kernel's buffers hold; a client that takes nothing for a body timeout is."""
    daemon_env = {**small_quarantine_env(), "SANDBOX_FILE_OP_TIMEOUT_MS": "1500",
                  "SANDBOX_BODY_TIMEOUT_MS": "1500"}

    def test_a_client_that_takes_nothing_is_cut_and_the_read_ends(self):
        sid = self.session()
        self.run_ok(sid, f"head -c {32 * MiB} /dev/zero > still.bin", http_timeout=120)
        s = connect(self.d, rcvbuf=16 * KiB)
        self.addCleanup(s.close)
        send_get(s, f"/exec/{sid}/read?path=still.bin", "application/octet-stream")
        status, headers, body = read_head(s)
        self.assertEqual(status, 200)
        self.assertEqual(int(headers["content-length"]), 32 * MiB)
        # Nothing more is read: the daemon closes the connection and ends the read.
        wait_until(lambda: any("took nothing of a reply" in e.get("msg", "")
                               for e in self.d.logs()), 30, what="the stalled client cut")
        wait_until(lambda: self.listed_sessions()[sid]["running"] == 0, 30,
                   what="the read to end")
        self.assertEqual(self.metrics().get('http_connections_closed_total{reason="stalled"}'), 1)
        body = read_to_close(s, body)
        self.assertLess(len(body), 32 * MiB)
        # The session is as it was.
        st, _, out = self.d.post(f"/exec/{sid}/execute", body={"command": "stat -c %s still.bin"})
        self.assertEqual(st, 200)
        self.assertEqual(out["exitCode"], 0)

    def test_a_read_slower_than_the_timeout_is_whole(self):
        sid = self.session()
        self.run_ok(sid, f"head -c {4 * MiB} /dev/urandom > slow.bin", http_timeout=120)
        st, _, out = self.d.post(f"/exec/{sid}/execute", body={"command": "sha256sum slow.bin"})
        want = "".join(o["data"] for o in out["output"] if o["stream"] == "stdout").split()[0]
        s = connect(self.d, rcvbuf=16 * KiB)
        self.addCleanup(s.close)
        send_get(s, f"/exec/{sid}/read?path=slow.bin", "application/octet-stream")
        status, headers, body = read_head(s)
        self.assertEqual(status, 200)
        t0 = time.monotonic()
        while len(body) < 4 * MiB:
            chunk = s.recv(64 * KiB)
            self.assertTrue(chunk, f"cut after {len(body)} bytes, {time.monotonic() - t0:.1f} s")
            body += chunk
            time.sleep(0.05)
        took = time.monotonic() - t0
        import hashlib
        self.assertEqual(hashlib.sha256(body[:4 * MiB]).hexdigest(), want)
        self.assertGreater(took, 1.5, "the client was not slower than the timeout")


class JsonBodiesTest(DaemonTestCase):
    daemon_env = small_quarantine_env()

    def test_20_mb_of_small_values_is_refused_before_parsing(self):
        sid = self.session()
        self.run_ok(sid, "true")
        n = 10 * 1000 * 1000
        body = b'{"command":"true","args":[' + b"0," * (n - 1) + b"0]}"
        self.assertGreater(len(body), 20 * 1000 * 1000)
        before = rss_kib(self.d.proc.pid)
        done = []
        # Another client, asking all along while the big body is sent and judged.
        stop = threading.Event()

        def other():
            while not stop.is_set():
                status, _, _ = self.d.get("/health", timeout=60)
                done.append(("health", status, time.monotonic()))

        t = threading.Thread(target=other)
        t.start()
        try:
            t0 = time.monotonic()
            status, reply = post_raw(self.d, f"/exec/{sid}/execute", body)
            answered = time.monotonic()
        finally:
            stop.set()
            t.join()
        grown = (peak_rss_kib(self.d.proc.pid, samples=5) - before) / 1024
        healths = [x for x in done if x[1] == 200]
        print(f"20 MB JSON body of small values: answered {status} in "
              f"{(answered - t0) * 1000:.0f} ms; the daemon grew {grown:.1f} MiB; "
              f"{len(healths)} other requests answered meanwhile", flush=True)
        self.assertEqual(status, 413, reply)
        self.assertIn("SANDBOX_MAX_JSON_ELEMENTS", reply["error"])
        self.assertIn("more than 10000 values", reply["error"])
        # The body itself (20 MB) and no tree of it (the old daemon's was about 400 MB).
        self.assertLess(grown, 96)
        # The other client was answered while the body was being sent and judged.
        self.assertTrue(any(x[2] < answered for x in healths))

    def test_deep_nesting_is_refused_naming_the_limit(self):
        sid = self.session()
        body = b'{"command":"true","args":' + b"[" * 40 + b"]" * 40 + b"}"
        status, reply = post_raw(self.d, f"/exec/{sid}/execute", body)
        self.assertEqual(status, 400, reply)
        self.assertIn("deeper than 32 levels (SANDBOX_MAX_JSON_DEPTH)", reply["error"])

    def test_routes_of_a_few_fields_take_small_bodies(self):
        sid = self.session()
        body = json.dumps({"execId": "x", "pad": "p" * (100 * KiB)}).encode()
        status, reply = post_raw(self.d, f"/exec/{sid}/cancel", body)
        self.assertEqual(status, 413, reply)
        self.assertIn("exceeds the limit of 65536", reply["error"])
        body = json.dumps({"id": sid, "env": {"PAD": "p" * (2 * MiB)}}).encode()
        status, reply = post_raw(self.d, "/exec", body)
        self.assertEqual(status, 413, reply)
        self.assertIn("exceeds the limit of 1048576", reply["error"])

    def test_an_mcp_message_of_many_values_is_refused(self):
        msg = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
               "params": {"protocolVersion": "2025-03-26", "capabilities": {},
                          "clientInfo": {"name": "t", "version": "1"},
                          "pad": [0] * 20000}}
        status, reply = post_raw(self.d, "/mcp", json.dumps(msg).encode(),
                                 accept="application/json, text/event-stream")
        self.assertEqual(status, 413, reply)
        self.assertEqual(reply["jsonrpc"], "2.0")
        self.assertIn("SANDBOX_MAX_JSON_ELEMENTS", reply["error"]["message"])


# The worst case of docs/operations.md's formula with small limits.
C, B, O = 48, 1 * MiB, 64 * KiB
W, H = 1 * MiB, 512 * KiB
E = 10000


def formula_bound(idle_bytes):
    """docs/operations.md: M_idle + C x (1.3 MiB + max(3.5 B + 200 B x E, 8 O, 6 W + H)); no
    MCP calls and one session here (its share is in the idle figure)."""
    per_request = max(3.5 * B + 200 * E, 8 * O, 6 * W + H)
    return idle_bytes + C * (1.3 * MiB + per_request)


class WorstCaseMemoryTest(DaemonTestCase):
    daemon_env = {
        **small_quarantine_env(),
        "VM_MEMORY_LIMIT_BYTES": str(512 * MiB),
        "SANDBOX_MAX_CONNECTIONS": str(C),
        "SANDBOX_MAX_BODY_BYTES": str(B),
        "SANDBOX_MAX_OUTPUT_BYTES": str(O),
        "SANDBOX_MAX_READ_BYTES": str(32 * MiB),
        "SANDBOX_BODY_TIMEOUT_MS": "600000",
    }

    def test_the_worst_case_stays_below_the_formula(self):
        sid = self.session()
        # Control characters: escaped text is the largest expansion (6 bytes a byte).
        self.run_ok(sid, f"head -c {32 * MiB} /dev/zero | tr '\\0' '\\001' > ctl.txt",
                    http_timeout=120)
        status, _, body = self.d.get(f"/exec/{sid}/read", query={"path": "ctl.txt"},
                                     timeout=300)
        self.assertEqual(status, 200)
        del body
        idle = rss_kib(self.d.proc.pid) * 1024
        held = []
        try:
            # Half the connections: readers that never read their replies.
            for _ in range(C // 2 - 2):
                s = connect(self.d, rcvbuf=16 * KiB)
                held.append(s)
                send_get(s, f"/exec/{sid}/read?path=ctl.txt")
            # The other half: bodies of the largest size, left one byte short.
            for _ in range(C // 2 - 2):
                s = connect(self.d)
                held.append(s)
                s.sendall(f"POST /exec/{sid}/execute HTTP/1.1\r\nHost: localhost\r\n"
                          f"Content-Type: application/json\r\nContent-Length: {B}\r\n\r\n"
                          .encode())
                s.sendall(b'{"command":"true","pad":"' + b"p" * (B - 27))
            for s in held[:C // 2 - 2]:
                self.assertTrue(s.recv(1, socket.MSG_PEEK))
            # And bodies of many values, parsed and answered meanwhile.
            for _ in range(4):
                many = b'{"command":"true","args":[' + b'"a",' * (E // 2 - 10) + b'"a"]}'
                status, reply = post_raw(self.d, f"/exec/{sid}/execute", many)
                self.assertEqual(status, 200, reply)
            peak = peak_rss_kib(self.d.proc.pid) * 1024
        finally:
            for s in held:
                s.close()
        bound = formula_bound(idle)
        print(f"worst case with C={C}, B={B // KiB} KiB: {(peak - idle) / MiB:.1f} MiB above "
              f"idle, the formula allows {(bound - idle) / MiB:.1f} MiB", flush=True)
        self.assertLess(peak, bound)


class StreamedUploadTest(DaemonTestCase):
    """PUT /exec/:id/file: the body is read as fast as the sandbox takes it, so that an
    upload of any size costs the daemon about a window."""

    daemon_env = {**small_quarantine_env(), "SANDBOX_MAX_UPLOAD_BYTES": str(512 * MiB)}

    def test_a_300_mib_upload_leaves_the_daemon_where_it_was(self):
        import hashlib
        import http.client
        sid = self.session()
        # Room for it: today's workspace is a tmpfs charged to the sandbox's memory.
        status, _, body = self.d.post("/exec", body={
            "id": sid, "resources": {"memoryBytes": 768 * MiB, "diskBytes": 512 * MiB}})
        self.assertEqual(status, 201, body)
        before = peak_rss_kib(self.d.proc.pid, samples=5)
        block, n = os.urandom(MiB), 300
        h = hashlib.sha256()
        for _ in range(n):
            h.update(block)
        conn = http.client.HTTPConnection(self.d.host, self.d.port, timeout=300)
        conn.request("PUT", f"/exec/{sid}/file?path=big.bin", body=(block for _ in range(n)),
                     encode_chunked=True)
        r = conn.getresponse()
        reply = json.loads(r.read())
        conn.close()
        self.assertEqual((r.status, reply.get("size")), (200, n * MiB), reply)
        grown = (peak_rss_kib(self.d.proc.pid, samples=5) - before) / 1024
        print(f"\n  upload of {n} MiB: daemon RSS +{grown:.1f} MiB", flush=True)
        self.assertLess(grown, 32)
        status, body = self.execute(sid, "sha256sum big.bin")
        self.assertEqual(body["output"][0]["data"].split()[0], h.hexdigest())


if __name__ == "__main__":
    unittest.main()
