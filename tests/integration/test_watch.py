"""Watching files: GET /exec/:id/watch streams the changes under a workspace directory.

Each test opens a watch (the stream's head comes once the watch is in place, with its "ready"
line), changes files with commands, and reads events until the one it waits for, within a
bounded number of events and the stream's read timeout."""

import json
import time
import socket
import urllib.parse

from helpers_exec import DaemonTestCase, wait_until
from runner import tag

READ_TIMEOUT = 60


class WatchStream:
    """A watch read line by line; the socket's receive buffer may be made small, so that a
    client that stops reading holds the pipeline back early."""

    def __init__(self, daemon, sid, path, recursive=False, rcvbuf=None, accept=None, **query):
        q = {"path": path, **query}
        if recursive:
            q["recursive"] = "true"
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        self.sock.settimeout(READ_TIMEOUT)
        self.sock.connect((daemon.host, daemon.port))
        headers = {"Host": f"{daemon.host}:{daemon.port}"}
        if accept:
            headers["Accept"] = accept
        if daemon.admin_key:
            headers["Authorization"] = f"Bearer {daemon.admin_key}"
        head = f"GET /exec/{sid}/watch?{urllib.parse.urlencode(q)} HTTP/1.1\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
        self.sock.sendall(head.encode())
        self.f = self.sock.makefile("rb")
        status_line = self.f.readline().decode()
        self.status = int(status_line.split()[1])
        self.headers = {}
        while True:
            line = self.f.readline().decode().rstrip("\r\n")
            if not line:
                break
            k, _, v = line.partition(":")
            self.headers[k.strip().lower()] = v.strip()
        self.chunked = self.headers.get("transfer-encoding", "").lower() == "chunked"
        self.buf = b""

    def close(self):
        try:
            self.f.close()
        finally:
            self.sock.close()

    def _fill(self):
        """More body bytes; False at the end of the body."""
        if not self.chunked:
            data = self.f.read1(65536)
            self.buf += data
            return bool(data)
        size = self.f.readline()
        if not size:
            return False
        n = int(size.split(b";")[0].strip() or b"0", 16)
        if n == 0:
            self.f.readline()
            return False
        self.buf += self.f.read(n)
        self.f.readline()
        return True

    def body(self):
        length = self.headers.get("content-length")
        if length is not None:
            return json.loads(self.f.read(int(length)))
        while self._fill():
            pass
        return json.loads(self.buf) if self.buf else None

    def lines(self):
        while True:
            while b"\n" not in self.buf:
                if not self._fill():
                    if self.buf.strip():
                        yield self.buf
                    return
            line, self.buf = self.buf.split(b"\n", 1)
            yield line

    def events(self):
        for line in self.lines():
            if line.strip():
                yield json.loads(line)

    def sse(self):
        event = {}
        for line in self.lines():
            line = line.decode().rstrip("\r")
            if not line:
                if event:
                    yield event
                event = {}
                continue
            field, _, value = line.partition(": ")
            event[field] = value

    def until(self, pred, limit=100000):
        """Events until (and including) the first for which pred is true."""
        seen = []
        for ev in self.events():
            seen.append(ev)
            if pred(ev):
                return seen
            if len(seen) >= limit:
                break
        raise AssertionError(f"the awaited event never came; last events: {seen[-20:]}")


def kinds(events):
    return [(e["type"], e.get("path"), e.get("from")) for e in events]


class WatchTest(DaemonTestCase):
    daemon_env = {"SANDBOX_WATCH_MAX_DIRS": "16"}

    def session(self, label=None):
        """A session that exists (a watch never creates one)."""
        sid = super().session(label)
        self.run_ok(sid, "true")
        return sid

    def open(self, sid, path=".", **kw):
        w = WatchStream(self.d, sid, path, **kw)
        self.addCleanup(w.close)
        return w

    def ready(self, sid, path=".", **kw):
        w = self.open(sid, path, **kw)
        self.assertEqual(w.status, 200, w.body() if w.status != 200 else None)
        self.assertIn("application/x-ndjson", w.headers.get("content-type", ""))
        first = next(w.events())
        self.assertEqual(first["type"], "ready", first)
        return w, first

    def refused(self, sid, path, status, **kw):
        w = self.open(sid, path, **kw)
        body = w.body()
        self.assertEqual(w.status, status, body)
        self.assertIn("application/json", w.headers.get("content-type", ""))
        self.assertIsInstance(body.get("error"), str)
        return body

    def watches_active(self):
        status, _, text = self.d.get("/metrics")
        self.assertEqual(status, 200)
        if isinstance(text, bytes):
            text = text.decode()
        for line in text.splitlines():
            if line.startswith("watches_active ") or line.startswith(
                "sandbox_watches_active "
            ):
                return float(line.split()[1])
        raise AssertionError("no watches_active gauge in /metrics")

    @tag("driver")
    def test_every_kind_of_event(self):
        sid = self.session()
        self.run_ok(sid, "mkdir -p sub")
        w, ready = self.ready(sid, "sub")
        self.assertEqual(ready["watches"], 1)
        self.run_ok(sid, "cd sub && echo hi > a && chmod 600 a && mv a b && rm b && "
                         "touch end")
        seen = w.until(lambda e: e["type"] == "create" and e["path"] == "sub/end")
        k = kinds(seen)
        for expected in [("create", "sub/a", None), ("write", "sub/a", None),
                         ("chmod", "sub/a", None), ("rename", "sub/b", "sub/a"),
                         ("remove", "sub/b", None)]:
            self.assertIn(expected, k)
        order = [k.index(x) for x in [("create", "sub/a", None), ("rename", "sub/b", "sub/a"),
                                      ("remove", "sub/b", None)]]
        self.assertEqual(order, sorted(order))
        for e in seen:
            self.assertIs(e["dir"], False, e)

    @tag("driver")
    def test_recursive_watch_follows_new_directories(self):
        sid = self.session()
        self.run_ok(sid, "mkdir -p old/deep")
        w, ready = self.ready(sid, ".", recursive=True)
        self.assertEqual(ready["watches"], 3)
        self.run_ok(sid, "echo x > old/deep/f && mkdir new")
        seen = w.until(lambda e: e["type"] == "create" and e["path"] == "new")
        self.assertIn(("create", "old/deep/f", None), kinds(seen))
        self.assertTrue(seen[-1]["dir"])
        # The directory created after the watch began is watched too.
        self.run_ok(sid, "echo y > new/g && mv new renamed && echo z > renamed/h")
        seen = w.until(lambda e: e["path"] == "renamed/h" and e["type"] == "create")
        self.assertIn(("create", "new/g", None), kinds(seen))
        self.assertIn(("rename", "renamed", "new"), kinds(seen))

    def test_a_plain_watch_does_not_descend(self):
        sid = self.session()
        self.run_ok(sid, "mkdir d")
        w, ready = self.ready(sid, ".")
        self.run_ok(sid, "echo x > d/f; echo y > top")
        seen = w.until(lambda e: e["path"] == "top" and e["type"] == "create")
        self.assertNotIn("d/f", [e["path"] for e in seen])

    def test_events_filter_and_sse(self):
        sid = self.session()
        w = self.open(sid, ".", accept="text/event-stream", events="remove")
        self.assertEqual(w.status, 200)
        self.assertIn("text/event-stream", w.headers.get("content-type", ""))
        events = w.sse()
        self.assertEqual(next(events)["event"], "ready")
        self.run_ok(sid, "echo a > one; rm one")
        ev = next(events)
        self.assertEqual(ev["event"], "remove")
        self.assertEqual(json.loads(ev["data"]),
                         {"type": "remove", "path": "one", "dir": False})
        status, headers, body = self.d.get(f"/exec/{sid}/watch",
                                           query={"path": ".", "events": "create,bogus"})
        self.assertJsonError(status, headers, body, 400)

    def test_timeout_ends_the_stream_cleanly(self):
        sid = self.session()
        w, _ = self.ready(sid, ".", timeoutMs="300")
        rest = list(w.events())
        self.assertEqual(rest[-1]["type"], "end", rest)
        self.assertTrue(rest[-1]["timedOut"])
        self.assertEqual(rest[-1]["overflows"], 0)
        status, headers, body = self.d.get(f"/exec/{sid}/watch",
                                           query={"path": ".", "timeoutMs": "-1"})
        self.assertJsonError(status, headers, body, 400)

    def test_removing_the_watched_directory_ends_the_watch(self):
        sid = self.session()
        self.run_ok(sid, "mkdir gone")
        w, _ = self.ready(sid, "gone")
        self.run_ok(sid, "rmdir gone")
        rest = list(w.events())
        self.assertIn(("remove", "gone", None), kinds(rest))
        self.assertEqual(rest[-1]["type"], "end")
        self.assertTrue(rest[-1]["gone"])

    @tag("driver")
    def test_a_client_that_does_not_read_gets_an_overflow_not_unbounded_memory(self):
        sid = self.session()
        w, _ = self.ready(sid, ".", rcvbuf=4096)
        # Alternating appends to two files: the kernel folds only identical events in a row.
        n = 150000
        self.run_ok(sid, f"i=0; while [ $i -lt {n} ]; do echo >> a; echo >> b; "
                         f"i=$((i+1)); done", http_timeout=600)
        seen = w.until(lambda e: e["type"] == "overflow", limit=4 * n)
        self.assertLess(len(seen), 2 * n)
        # The watch goes on after it.
        self.run_ok(sid, "touch after")
        w.until(lambda e: e["path"] == "after" if e["type"] != "overflow" else False,
                limit=4 * n)

    @tag("driver")
    def test_a_client_that_leaves_ends_the_watch_in_the_agent(self):
        sid = self.session()
        base = self.watches_active()
        w, _ = self.ready(sid, ".")
        self.assertEqual(self.watches_active(), base + 1)
        w.close()
        wait_until(lambda: self.watches_active() == base, 30, what="the watch to end")
        # Clients that leave before their watch is in place (the request sent, the
        # connection closed at once): nothing of them stays, in the agent or the daemon (whose
        # clean exit, leak-checked, ends the class).
        for _ in range(5):
            s = socket.create_connection((self.d.host, self.d.port))
            s.sendall(f"GET /exec/{sid}/watch?path=.&recursive=true HTTP/1.1\r\n"
                      f"Host: x\r\n\r\n".encode())
            s.close()
        wait_until(lambda: self.watches_active() == base, 30, what="the watches to end")
        # The sandbox is fine and can be watched again.
        w2, _ = self.ready(sid, ".")
        self.run_ok(sid, "touch again")
        w2.until(lambda e: e["path"] == "again")

    def test_paths_outside_the_workspace_are_refused(self):
        sid = self.session()
        self.run_ok(sid, "ln -s /etc out; echo x > file")
        for path in ("../", "/etc", "out", "out/ssl"):
            with self.subTest(path=path):
                body = self.refused(sid, path, 400)
                self.assertIn("escapes", body["error"])
        body = self.refused(sid, "file", 400)
        self.assertIn("file", body["error"])
        self.refused(sid, "missing", 404)
        status, headers, body = self.d.get(f"/exec/{sid}/watch")
        self.assertJsonError(status, headers, body, 400)
        self.refused("no-such-session-w", ".", 404)

    def test_a_tree_beyond_the_watch_limit_is_refused(self):
        sid = self.session()
        self.run_ok(sid, "mkdir -p big && cd big && for i in $(seq 20); do mkdir d$i; done")
        body = self.refused(sid, "big", 413, recursive=True)
        self.assertIn("maxWatches", body["error"])
        # Non-recursive, it is one watch.
        self.ready(sid, "big")
        # A tree that grows past the limit ends its watch with the error.
        self.run_ok(sid, "mkdir small")
        w, _ = self.ready(sid, "small", recursive=True)
        self.run_ok(sid, "cd small && for i in $(seq 20); do mkdir e$i; done")
        rest = list(w.events())
        self.assertEqual(rest[-1]["type"], "error", rest[-3:])
        self.assertEqual(rest[-1]["status"], 413)


class WatchQuotaTest(DaemonTestCase):
    daemon_env = {"SANDBOX_MAX_WATCHES": "2"}

    def test_the_server_caps_watch_streams(self):
        sid = self.session()
        self.run_ok(sid, "true")
        open_ = []
        for _ in range(2):
            w = WatchStream(self.d, sid, ".")
            self.addCleanup(w.close)
            self.assertEqual(w.status, 200)
            open_.append(w)
        w = WatchStream(self.d, sid, ".")
        self.addCleanup(w.close)
        body = w.body()
        self.assertEqual(w.status, 429, body)
        self.assertIn("watch", body["error"])
        self.assertIn("SANDBOX_MAX_WATCHES", body["error"])
        # One ends: another may begin.
        open_[0].close()
        wait_until(lambda: WatchStream(self.d, sid, ".", timeoutMs="1").status == 200, 30,
                   what="a watch to be admitted again")


class PausedWatchClientTest(DaemonTestCase):
    """A watch's client may stop reading for longer than SANDBOX_BODY_TIMEOUT_MS (short here):
    it gets an overflow, not a cut connection. Only replies whose producer holds something
    while it waits (file reads) are under the send guard."""
    daemon_env = {"SANDBOX_BODY_TIMEOUT_MS": "1000"}

    def test_a_watch_outlives_a_client_that_paused_past_the_body_timeout(self):
        sid = self.session()
        self.run_ok(sid, "true")  # the workspace is there
        w = WatchStream(self.d, sid, ".", rcvbuf=4096)
        self.addCleanup(w.close)
        self.assertEqual(w.status, 200)
        first = next(w.events())
        self.assertEqual(first.get("type"), "ready", first)
        n = 20000
        self.run_ok(sid, f"i=0; while [ $i -lt {n} ]; do echo >> a; echo >> b; "
                         f"i=$((i+1)); done", http_timeout=600)
        time.sleep(4)  # nothing read for four body timeouts, with events waiting
        self.run_ok(sid, "touch after")
        w.until(lambda e: e.get("path") == "after" and e["type"] != "overflow", limit=4 * n)
