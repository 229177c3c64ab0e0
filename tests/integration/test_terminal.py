"""Terminals over WebSocket: a process on a terminal, raw input and output, resize, ^C, a
full-screen program, a client that vanishes, attaching to a background process; and the
one-use tickets that let a browser authenticate an upgrade."""

import json
import time

import runner
from helpers_exec import BASE_ENV, DaemonTestCase, wait_until
from test_bounded_memory import small_quarantine_env
from wsclient import Closed, HandshakeError, WebSocket


class Term:
    """A terminal socket that collects output and events."""

    def __init__(self, d, path, headers=None):
        self.ws = WebSocket(d.host, d.port, path, headers=headers)
        self.out = b""
        self.events = []

    def pump_until(self, predicate, what, timeout=30):
        end = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > end:
                raise AssertionError(f"timed out waiting for {what}; output: {self.out[-2000:]!r}")
            binary, data = self.ws.recv()
            if binary:
                self.out += data
            else:
                self.events.append(json.loads(data))

    def until_closed(self, timeout=30):
        try:
            self.pump_until(lambda: False, "the close", timeout)
        except Closed as c:
            return c.code
        raise AssertionError("not closed")

    def send(self, text):
        self.ws.send_binary(text.encode())

    def control(self, **msg):
        self.ws.send_text(json.dumps(msg))

    def event(self, type_):
        return next((e for e in self.events if e.get("type") == type_), None)


class TerminalTest(DaemonTestCase):
    daemon_env = {**BASE_ENV, **small_quarantine_env()}

    def open(self, sid, query="rows=30&cols=100", **kw):
        return Term(self.d, f"/exec/{sid}/terminal?{query}", **kw)

    @runner.tag("driver")
    def test_tty_size_resize_and_exit_status(self):
        sid = self.session()
        t = self.open(sid, "rows=30&cols=100&command=sh")
        t.pump_until(lambda: t.event("started"), "started")
        t.send("tty; stty size\r")
        t.pump_until(lambda: b"30 100" in t.out, "stty size")
        self.assertRegex(t.out.decode(errors="replace"), r"/dev/pts/\d+")
        t.control(type="resize", rows=50, cols=132)
        time.sleep(0.3)
        t.send("stty size\r")
        t.pump_until(lambda: b"50 132" in t.out, "the new size")
        t.send("exit 5\r")
        self.assertEqual(t.until_closed(), 1000)
        self.assertEqual(t.event("exit")["exitCode"], 5)

    def test_ctrl_c_and_a_full_screen_program(self):
        sid = self.session()
        t = self.open(sid, "command=sh")
        t.pump_until(lambda: t.event("started"), "started")
        t.send("sleep 100\r")
        time.sleep(0.5)
        t.send("\x03")
        t.send("echo status:$?\r")
        t.pump_until(lambda: b"status:130" in t.out, "the interrupted sleep")
        # top in batch mode draws its screen; vi driven by keys writes a file.
        t.send("top -b -n1 | head -3; echo top-done\r")
        t.pump_until(lambda: b"top-done" in t.out.split(b"echo top-done")[-1], "top")
        self.assertRegex(t.out.decode(errors="replace"), r"(Mem|CPU|Load)")
        t.send("vi edited.txt\r")
        time.sleep(0.8)
        t.send("ihello from vi")
        time.sleep(0.3)
        # Escape alone: vi takes an escape followed at once by more as a key sequence.
        t.send("\x1b")
        time.sleep(0.5)
        t.send(":wq\r")
        t.send("cat edited.txt\r")
        t.pump_until(lambda: t.out.count(b"hello from vi") >= 2, "vi's file")
        t.send("exit\r")
        self.assertEqual(t.until_closed(), 1000)

    @runner.tag("driver")
    def test_a_client_that_vanishes_ends_its_process(self):
        sid = self.session()
        t = self.open(sid, "command=sleep%20300")
        t.pump_until(lambda: t.event("started"), "started")
        pid = t.event("started")["pid"]
        t.ws.sock.close()  # no close frame: the client is simply gone
        wait_until(lambda: self.d.get(f"/exec/{sid}/processes/{pid}")[2].get("state") == "exited",
                   what="the terminal's process to end")
        self.assertIn(self.d.get(f"/exec/{sid}/processes/{pid}")[2]["signal"],
                      ("SIGHUP", "SIGKILL"))

    def test_a_session_destroyed_under_its_terminal_is_said_to_be(self):
        sid = self.session()
        t = self.open(sid, "command=sh")
        t.pump_until(lambda: t.event("started"), "started")
        st, _, body = self.d.delete(f"/exec/{sid}")
        self.assertEqual(st, 200, body)
        # The reason comes as an error event before the close (whose reason only points to
        # it): what happened to the session, not only that its connection went.
        self.assertEqual(t.until_closed(), 1011)
        err = t.event("error")
        self.assertIsNotNone(err, t.events)
        self.assertEqual(err["error"], f"session `{sid}` was destroyed (deleted by the client)")

    def test_attach_to_a_background_process_over_websocket(self):
        sid = self.session()
        status, _, p = self.d.post(f"/exec/{sid}/processes",
                                   body={"command": "cat", "stdin": True, "tag": "cat"})
        self.assertEqual(status, 201, p)
        t = Term(self.d, f"/exec/{sid}/processes/cat/ws")
        t.send("through the socket\n")
        t.pump_until(lambda: b"through the socket\n" in t.out, "the echo")
        t.control(type="eof")
        self.assertEqual(t.until_closed(), 1000)
        self.assertEqual(t.event("exit")["exitCode"], 0)
        # Leaving an attach leaves the process alone.
        self.d.post(f"/exec/{sid}/processes", body={"command": "sleep 300", "tag": "bg"})
        t = Term(self.d, f"/exec/{sid}/processes/bg/ws")
        t.ws.close()
        time.sleep(0.5)
        self.assertEqual(self.d.get(f"/exec/{sid}/processes/bg")[2]["state"], "running")

    def test_bad_requests_and_control_messages(self):
        sid = self.session()
        for query in ("rows=0", "cols=5000", "rows=abc"):
            with self.assertRaises(HandshakeError) as cm:
                self.open(sid, query)
            self.assertEqual(cm.exception.status, 400)
        self.d.post(f"/exec/{sid}/execute", body={"command": "true"})
        for ref, status in (("nosuch", 4404), ("999999", 4404)):
            t = Term(self.d, f"/exec/{sid}/processes/{ref}/ws")
            self.assertEqual(t.until_closed(), status)
            self.assertEqual(t.event("error")["status"], 404)
        # Control messages that are not: an error event each, the terminal goes on.
        t = self.open(sid, "command=sh")
        t.pump_until(lambda: t.event("started"), "started")
        for bad in ("not json", "[]", '{"type":"resize","rows":0,"cols":1}',
                    '{"type":"signal","signal":"NOPE"}', '{"type":"fly"}', '{"rows":1}'):
            t.ws.send_text(bad)
        t.pump_until(lambda: sum(e.get("type") == "error" for e in t.events) >= 6, "six errors")
        t.send("echo alive\r")
        t.pump_until(lambda: b"alive\r\n" in t.out, "the shell after them")
        t.control(type="signal", signal="KILL")
        self.assertEqual(t.until_closed(), 1000)
        self.assertEqual(t.event("exit")["signal"], "SIGKILL")

    def test_a_client_that_floods_and_never_reads_costs_a_bounded_amount(self):
        from test_bounded_memory import rss_kib
        sid = self.session()
        self.d.post(f"/exec/{sid}/processes", body={"command": "sleep 300", "tag": "quiet"})
        t = Term(self.d, f"/exec/{sid}/processes/quiet/ws")
        before = rss_kib(self.d.proc.pid)
        t.ws.sock.setsockopt(__import__("socket").SOL_SOCKET, __import__("socket").SO_RCVBUF, 4096)
        t.ws.sock.settimeout(5)
        sent = 0
        try:
            for _ in range(100000):  # about 12 MiB of bad control messages, none read back
                t.ws.send_text("{}" * 60)
                sent += 1
        except OSError:
            pass  # the server stopped reading: the socket's buffers are full
        grown = rss_kib(self.d.proc.pid) - before
        print(f"\n  {sent} unread error replies: daemon RSS +{grown} KiB", flush=True)
        self.assertLess(grown, 64 * 1024)
        t.ws.sock.close()

    def test_not_a_websocket(self):
        sid = self.session()
        status, headers, body = self.d.get(f"/exec/{sid}/terminal")
        self.assertIn(status, (400, 426), body)


class TicketTest(DaemonTestCase):
    daemon_env = {**BASE_ENV, "AUTH_ENABLED": "true"}

    def ticket(self, sid, api_key=None):
        status, _, body = self.d.post(f"/exec/{sid}/tickets", body={}, api_key=api_key)
        self.assertEqual(status, 201, body)
        return body["ticket"]

    def test_a_ticket_opens_one_terminal_once(self):
        sid = self.session()
        tk = self.ticket(sid)
        t = Term(self.d, f"/exec/{sid}/terminal?command=sh&ticket={tk}")
        t.pump_until(lambda: t.event("started"), "started")
        t.send("echo $((6*7))\r")
        t.pump_until(lambda: b"42" in t.out, "the answer")
        t.ws.close()
        # Used up; and a ticket is for its session only.
        with self.assertRaises(HandshakeError) as cm:
            Term(self.d, f"/exec/{sid}/terminal?ticket={tk}")
        self.assertEqual(cm.exception.status, 401)
        other = self.ticket(sid)
        with self.assertRaises(HandshakeError) as cm:
            Term(self.d, f"/exec/other-{sid}/terminal?ticket={other}")
        self.assertEqual(cm.exception.status, 401)
        for bad in ("", "x" * 48, "0" * 48, tk + "0"):
            with self.assertRaises(HandshakeError) as cm:
                Term(self.d, f"/exec/{sid}/terminal?ticket={bad}")
            self.assertEqual(cm.exception.status, 401)
        # No key, no ticket: 401; a header key works as for any route.
        with self.assertRaises(HandshakeError) as cm:
            Term(self.d, f"/exec/{sid}/terminal")
        self.assertEqual(cm.exception.status, 401)
        t = Term(self.d, f"/exec/{sid}/terminal?command=true",
                 headers={"Authorization": f"Bearer {self.d.api_key}"})
        self.assertEqual(t.until_closed(), 1000)
        # A ticket is never written to the log.
        self.assertNotIn(tk, self.d.stderr())

    def test_a_ticket_of_a_revoked_key_opens_nothing(self):
        sid = self.session()
        status, _, key = self.d.post("/admin/keys", body={"name": "short", "scopes": ["exec"]})
        self.assertEqual(status, 201, key)
        secret = key.get("key") or key.get("secret")
        tk = self.ticket(sid, api_key=secret)
        status, _, body = self.d.post(f"/admin/keys/{key['id']}/revoke", body={})
        self.assertEqual(status, 200, body)
        with self.assertRaises(HandshakeError) as cm:
            Term(self.d, f"/exec/{sid}/terminal?command=sh&ticket={tk}")
        self.assertEqual(cm.exception.status, 401)

    def test_tickets_need_a_key_and_a_cross_site_origin_is_refused(self):
        sid = self.session()
        status, headers, body = self.d.post(f"/exec/{sid}/tickets", body={}, api_key="")
        self.assertJsonError(status, headers, body, 401)
        tk = self.ticket(sid)
        with self.assertRaises(HandshakeError) as cm:
            Term(self.d, f"/exec/{sid}/terminal?ticket={tk}",
                 headers={"Origin": "https://evil.example"})
        self.assertEqual(cm.exception.status, 403)

    def test_another_keys_session_is_not_reachable_with_its_ticket(self):
        sid = self.session()
        self.d.post(f"/exec/{sid}/execute", body={"command": "true"})
        status, _, key = self.d.post("/admin/keys", body={"name": "other", "scopes": ["exec"]})
        self.assertEqual(status, 201, key)
        other = key.get("key") or key.get("secret")
        tk = self.ticket(sid, api_key=other)
        t = Term(self.d, f"/exec/{sid}/processes/1/ws?ticket={tk}")
        # The other key's view: no such session (its own, new one has no process 1).
        self.assertEqual(t.until_closed(), 4404)


class PingFloodTest(DaemonTestCase):
    """A client that sends empty pings and never reads their pongs: the daemon stops reading
    it once its answers are unsent, so its memory stays where it was."""
    daemon_env = {**BASE_ENV, **small_quarantine_env()}

    def test_empty_pings_never_read_do_not_grow_the_daemon(self):
        import os
        import socket
        from test_bounded_memory import peak_rss_kib, rss_kib
        sid = self.session()
        t = Term(self.d, f"/exec/{sid}/terminal?command=sh")
        t.pump_until(lambda: t.event("started"), "started")
        sock = t.ws.sock
        # Read nothing from here on: a small window, full at once.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(0.5)
        before = rss_kib(self.d.proc.pid)
        frame = bytes([0x89, 0x80]) + os.urandom(4)
        burst = frame * 4096
        sent = 0
        end = time.monotonic() + 8
        while time.monotonic() < end:
            try:
                sent += sock.send(burst)
            except (TimeoutError, socket.timeout):
                continue
        grown = peak_rss_kib(self.d.proc.pid) - before
        # 8 s of pings were hundreds of MiB of queued pongs before reading stopped at the
        # connection's bound; now the daemon holds a few MiB for this connection at most.
        self.assertLess(grown, 64 * 1024, f"sent {sent // 6} pings, daemon grew {grown} KiB")
        sock.close()
        self.run_ok(sid, "true")

