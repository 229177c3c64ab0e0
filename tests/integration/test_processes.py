"""Background processes: started detached from any request, listed, attached to (replay, then
live output, in order), signalled, fed on stdin, on a terminal; and their limits."""

import http.client
import json
import time

import runner
from helpers_exec import DaemonTestCase, wait_until


class ProcessesTest(DaemonTestCase):
    daemon_env = {"SANDBOX_MAX_PROCESSES": "120"}

    def start(self, sid, command, **fields):
        status, _, body = self.d.post(f"/exec/{sid}/processes", body={"command": command, **fields})
        self.assertEqual(status, 201, body)
        return body

    def get(self, sid, ref):
        return self.d.get(f"/exec/{sid}/processes/{ref}")

    def wait(self, sid, ref, timeout=None):
        body = {} if timeout is None else {"timeout": timeout}
        return self.d.post(f"/exec/{sid}/processes/{ref}/wait", body=body)

    def output(self, sid, ref, **query):
        return self.d.get(f"/exec/{sid}/processes/{ref}/output", query=query)

    def stdin(self, sid, ref, data=None, close=False):
        body = {"close": close}
        if data is not None:
            body["data"] = data
        return self.d.post(f"/exec/{sid}/processes/{ref}/stdin", body=body)

    def test_a_server_started_in_the_background_answers_later_requests(self):
        sid = self.session()
        p = self.start(sid, "python3 -m http.server 8765 --bind 127.0.0.1 || "
                            "busybox httpd -f -p 127.0.0.1:8765 -h .", tag="web")
        self.assertEqual((p["tag"], p["state"]), ("web", "running"))
        self.assertGreater(p["pid"], 0)
        self.run_ok(sid, "echo served > index.html")
        probe = ("for i in $(seq 100); do wget -qO- http://127.0.0.1:8765/index.html "
                 "2>/dev/null && exit 0; sleep 0.1; done; exit 1")
        self.assertEqual(self.stdout_of(sid, probe), "served\n")
        # Listed, by pid and by tag.
        status, _, body = self.d.get(f"/exec/{sid}/processes")
        self.assertEqual(status, 200, body)
        self.assertIn(p["pid"], [x["pid"] for x in body["processes"]])
        for ref in (p["pid"], "web"):
            status, _, one = self.get(sid, ref)
            self.assertEqual((status, one["pid"], one["state"]), (200, p["pid"], "running"))
        # Killed: ends with SIGKILL, stays listed as exited.
        status, _, body = self.d.delete(f"/exec/{sid}/processes/web")
        self.assertEqual(status, 200, body)
        status, _, done = self.wait(sid, p["pid"])
        self.assertEqual((status, done["state"], done["signal"]), (200, "exited", "SIGKILL"))
        status, headers, body = self.d.delete(f"/exec/{sid}/processes/web")
        self.assertJsonError(status, headers, body, 404)

    def test_execute_with_background_true_returns_at_once(self):
        sid = self.session()
        status, _, body = self.d.post(f"/exec/{sid}/execute",
                                      body={"command": "sleep 30; echo late", "background": True})
        self.assertEqual(status, 201, body)
        self.assertEqual(body["state"], "running")
        self.assertEqual(body["argv"], ["/bin/sh", "-c", "sleep 30; echo late"])
        status, headers, body = self.d.post(f"/exec/{sid}/execute",
                                            body={"command": "true", "background": "yes"})
        self.assertJsonError(status, headers, body, 400)

    @runner.tag("driver")
    def test_replay_then_live_output_in_order_after_the_starter_left(self):
        sid = self.session()
        # The starting client goes away at once: the process runs on.
        conn = http.client.HTTPConnection(self.d.host, self.d.port, timeout=30)
        conn.request("POST", f"/exec/{sid}/processes",
                     body=json.dumps({"command": "for i in $(seq 1 300); do echo $i; "
                                                 "sleep 0.01; done", "tag": "seq"}),
                     headers={"Content-Type": "application/json"})
        pid = json.loads(conn.getresponse().read())["pid"]
        conn.close()
        time.sleep(1)
        with self.d.stream("GET", f"/exec/{sid}/processes/seq/output",
                           headers={"Accept": "application/x-ndjson"}) as s:
            self.assertEqual(s.status, 200)
            text, result = "", None
            for ev in s.ndjson():
                self.assertNotEqual(ev["type"], "gap", ev)
                if ev["type"] == "stream":
                    self.assertEqual(ev["stream"], "stdout")
                    text += ev["data"]
                elif ev["type"] == "result":
                    result = ev["process"]
        self.assertEqual(text, "".join(f"{i}\n" for i in range(1, 301)))
        self.assertEqual((result["pid"], result["exitCode"], result["state"]), (pid, 0, "exited"))
        # Afterwards: the whole output again, buffered, and a tail by replay bytes.
        status, _, body = self.output(sid, "seq")
        self.assertEqual(status, 200, body)
        self.assertEqual("".join(c["data"] for c in body["output"]), text)
        status, _, body = self.output(sid, "seq", replay="4")
        self.assertEqual("".join(c["data"] for c in body["output"]), "300\n")

    def test_output_buffered_without_follow_does_not_wait(self):
        sid = self.session()
        self.start(sid, "echo first; echo err >&2; sleep 60", tag="slow")
        wait_until(lambda: self.get(sid, "slow")[2]["outputBytes"] >= 10, what="output")
        status, _, body = self.output(sid, "slow")
        self.assertEqual(status, 200, body)
        self.assertEqual(body["process"]["state"], "running")
        self.assertTrue(body["process"]["detached"])
        self.assertEqual({(c["stream"], c["data"]) for c in body["output"]},
                         {("stdout", "first\n"), ("stderr", "err\n")})
        # A wait with a timeout gives up with 408; the process runs on.
        status, headers, body = self.wait(sid, "slow", timeout=200)
        self.assertJsonError(status, headers, body, 408)
        self.assertEqual(self.get(sid, "slow")[2]["state"], "running")

    def test_a_buffered_reply_joins_the_pieces_of_a_stream(self):
        sid = self.session()
        self.start(sid, "for i in $(seq 1 40); do echo $i; sleep 0.02; done; echo e >&2; sleep 0.2; "
                        "echo last", tag="pieces")
        self.wait(sid, "pieces")
        status, _, body = self.output(sid, "pieces")
        self.assertEqual(status, 200)
        # Forty reads of the pipe, one entry per run of a stream (each costs the reply its
        # object: pieces of a byte could otherwise make it hundreds of times its text).
        self.assertEqual([c["stream"] for c in body["output"]], ["stdout", "stderr", "stdout"])
        self.assertEqual(body["output"][0]["data"], "".join(f"{i}\n" for i in range(1, 41)))

    def test_a_small_replay_buffer_reports_the_gap(self):
        sid = self.session()
        self.start(sid, "head -c 600000 /dev/zero | tr '\\0' a; echo; echo end",
                   tag="big", replayBytes=65536)
        status, _, done = self.wait(sid, "big")
        self.assertEqual((status, done["exitCode"]), (200, 0))
        self.assertEqual(done["outputBytes"], 600005)
        status, _, body = self.output(sid, "big", replay="0")
        self.assertEqual((status, body["output"]), (200, []))
        status, _, body = self.output(sid, "big", replay="100000000")
        data = "".join(c["data"] for c in body["output"])
        self.assertTrue(data.endswith("aaa\nend\n"))
        self.assertLessEqual(len(data), 65536)
        self.assertEqual(done["replayFrom"] + len(data), 600005)

    @runner.tag("driver")
    def test_signals(self):
        sid = self.session()
        self.start(sid, "trap 'echo got-term; exit 3' TERM; while true; do sleep 0.05; done",
                   tag="trap")
        time.sleep(0.3)
        status, _, body = self.d.post(f"/exec/{sid}/processes/trap/signal",
                                      body={"signal": "TERM"})
        self.assertEqual(status, 200, body)
        status, _, done = self.wait(sid, "trap")
        self.assertEqual(done["exitCode"], 3)
        status, _, body = self.output(sid, "trap")
        self.assertIn("got-term", "".join(c["data"] for c in body["output"]))
        for bad in ({"signal": "NOPE"}, {"signal": 0}, {"signal": 99}, {}):
            status, headers, body = self.d.post(f"/exec/{sid}/processes/trap/signal", body=bad)
            self.assertJsonError(status, headers, body, 400)
        # A signal other than KILL leaves its timeout armed (CONT once disarmed it).
        self.start(sid, "sleep 30", tag="tmo", timeout=1500)
        status, _, body = self.d.post(f"/exec/{sid}/processes/tmo/signal", body={"signal": "CONT"})
        self.assertEqual(status, 200, body)
        status, _, done = self.wait(sid, "tmo", timeout=20000)
        self.assertEqual((status, done["timedOut"], done["state"]), (200, True, "exited"), done)
        # Ended: 404 for a signal.
        status, headers, body = self.d.post(f"/exec/{sid}/processes/trap/signal",
                                            body={"signal": "KILL"})
        self.assertJsonError(status, headers, body, 404)

    @runner.tag("driver")
    def test_stdin_to_cat_and_a_program_that_reads_until_eof(self):
        sid = self.session()
        self.start(sid, "cat", tag="cat", stdin=True)
        for chunk in ("one\n", "two\n"):
            status, _, body = self.stdin(sid, "cat", chunk)
            self.assertEqual((status, body["bytes"]), (200, len(chunk)), body)
        status, _, body = self.stdin(sid, "cat", "three\n", close=True)
        self.assertEqual((status, body["closed"]), (200, True))
        status, _, done = self.wait(sid, "cat")
        self.assertEqual(done["exitCode"], 0)
        status, _, body = self.output(sid, "cat")
        self.assertEqual("".join(c["data"] for c in body["output"]), "one\ntwo\nthree\n")
        # Its stdin is closed now.
        status, headers, body = self.stdin(sid, "cat", "more")
        self.assertJsonError(status, headers, body, 409)

        self.start(sid, "wc -c", tag="wc", stdin=True)
        raw = bytes(range(256)) * 1000
        status, _, body = self.d.request(
            "POST", f"/exec/{sid}/processes/wc/stdin", body=raw, query={"close": "true"},
            headers={"Content-Type": "application/octet-stream"})
        self.assertEqual((status, body["bytes"]), (200, len(raw)), body)
        self.wait(sid, "wc")
        status, _, body = self.output(sid, "wc")
        self.assertEqual("".join(c["data"] for c in body["output"]).strip(), str(len(raw)))
        # A process started without stdin takes none.
        self.start(sid, "sleep 30", tag="nostdin")
        status, headers, body = self.stdin(sid, "nostdin", "x")
        self.assertJsonError(status, headers, body, 409)

    def test_stdin_to_an_interactive_python(self):
        sid = self.session()
        self.start(sid, "python3", args=["-i", "-u"], tag="repl", stdin=True, template="python")
        self.stdin(sid, "repl", "x = 6 * 7\nprint('answer', x)\n")
        wait_until(lambda: "answer 42" in "".join(
            c["data"] for c in self.output(sid, "repl")[2]["output"]), what="the answer")
        self.stdin(sid, "repl", "", close=True)
        self.assertEqual(self.wait(sid, "repl")[2]["exitCode"], 0)

    @runner.tag("driver")
    def test_terminal_tty_size_and_resize(self):
        sid = self.session()
        p = self.start(sid, "tty; stty size; read line; stty size; echo got:$line",
                       pty={"rows": 30, "cols": 100}, tag="term")
        self.assertTrue(p["pty"])
        wait_until(lambda: "30 100" in self.output_text(sid, "term"), what="stty size")
        status, _, body = self.d.post(f"/exec/{sid}/processes/term/resize",
                                      body={"rows": 40, "cols": 120})
        self.assertEqual(status, 200, body)
        self.stdin(sid, "term", "hello\r")
        self.assertEqual(self.wait(sid, "term")[2]["exitCode"], 0)
        text = self.output_text(sid, "term")
        self.assertRegex(text, r"/dev/pts/\d+")
        self.assertIn("30 100", text)
        self.assertIn("40 120", text)
        self.assertIn("got:hello", text)
        for bad in ({"rows": 0, "cols": 10}, {"rows": 10}, {"rows": 5000, "cols": 10}):
            status, headers, body = self.d.post(f"/exec/{sid}/processes/term/resize", body=bad)
            self.assertJsonError(status, headers, body, 400)
        # A process without a terminal cannot be resized.
        self.start(sid, "sleep 30", tag="plain")
        status, headers, body = self.d.post(f"/exec/{sid}/processes/plain/resize",
                                            body={"rows": 10, "cols": 10})
        self.assertJsonError(status, headers, body, 400)

    def test_ctrl_c_through_the_terminal_interrupts_the_foreground_program(self):
        sid = self.session()
        self.start(sid, "sh", pty={"rows": 24, "cols": 80}, tag="shell")
        self.stdin(sid, "shell", "sleep 100\r")
        wait_until(lambda: self.execute(sid, "pgrep -x sleep || ps | grep -q '[s]leep 100'")[1]
                   ["exitCode"] == 0, what="the sleep")
        self.stdin(sid, "shell", "\x03")
        self.stdin(sid, "shell", "echo after-sleep $?\r")
        wait_until(lambda: "after-sleep 130" in self.output_text(sid, "shell"),
                   what="the interrupted sleep")
        self.stdin(sid, "shell", "exit 7\r")
        self.assertEqual(self.wait(sid, "shell")[2]["exitCode"], 7)

    def output_text(self, sid, ref):
        status, _, body = self.output(sid, ref)
        self.assertEqual(status, 200, body)
        return "".join(c["data"] for c in body["output"])

    def test_a_hundred_background_processes_in_one_session(self):
        sid = self.session()
        pids = [self.start(sid, "sleep 60", tag=f"p{i}")["pid"] for i in range(100)]
        status, _, body = self.d.get(f"/exec/{sid}/processes")
        running = {x["pid"] for x in body["processes"] if x["state"] == "running"}
        self.assertTrue(set(pids) <= running)
        self.assertEqual(self.stdout_of(sid, "pgrep -c sleep || ps | grep -c 'sleep 6[0]'").strip(),
                         "100")

    def test_limits_and_bad_requests(self):
        sid = self.session()
        self.start(sid, "sleep 60", tag="dup")
        status, headers, body = self.d.post(f"/exec/{sid}/processes",
                                            body={"command": "true", "tag": "dup"})
        self.assertJsonError(status, headers, body, 409)
        for bad in ({}, {"command": 5}, {"command": "x", "tag": "no/slash"},
                    {"command": "x", "tag": "123"}, {"command": "x", "tag": "a" * 65},
                    {"command": "x", "pty": {"rows": 0}}, {"command": "x", "pty": "big"},
                    {"command": "x", "replayBytes": 10}, {"command": "x", "replayBytes": -1},
                    {"command": "x", "stdin": "yes"}, {"command": "x", "stdin": "text"}):
            status, headers, body = self.d.post(f"/exec/{sid}/processes", body=bad)
            self.assertJsonError(status, headers, body, 400)
        status, headers, body = self.d.post(f"/exec/{sid}/processes",
                                            body={"command": "no-such-program-x"})
        self.assertJsonError(status, headers, body, 400)
        for ref in ("999999", "nosuch"):
            status, headers, body = self.get(sid, ref)
            self.assertJsonError(status, headers, body, 404)
        for ref in ("a%2Fb", "0", "99999999999"):
            status, headers, body = self.get(sid, ref)
            self.assertJsonError(status, headers, body, 400)
        status, headers, body = self.d.get("/exec/no-such-session/processes")
        self.assertJsonError(status, headers, body, 404)
        # The replay budget of the session: 32 MiB by default.
        status, headers, body = self.d.post(f"/exec/{sid}/processes",
                                            body={"command": "sleep 60",
                                                  "replayBytes": 64 << 20})
        self.assertJsonError(status, headers, body, 429)


class ProcessLimitsTest(DaemonTestCase):
    daemon_env = {"SANDBOX_MAX_PROCESSES": "3", "SANDBOX_MAX_STREAMS": "2"}

    def test_process_and_stream_limits(self):
        sid = self.session()
        for i in range(3):
            status, _, body = self.d.post(f"/exec/{sid}/processes",
                                          body={"command": "sleep 60", "tag": f"s{i}"})
            self.assertEqual(status, 201, body)
        status, headers, body = self.d.post(f"/exec/{sid}/processes", body={"command": "true"})
        self.assertJsonError(status, headers, body, 429)
        self.assertIn("background processes", body["error"])
        # Two attach streams at once; a third is refused until one ends.
        streams = [self.d.stream("GET", f"/exec/{sid}/processes/s{i}/output",
                                 headers={"Accept": "application/x-ndjson"}) for i in range(2)]
        try:
            wait_until(lambda: all(s.status == 200 for s in streams), what="streams")
            status, headers, body = self.d.get(f"/exec/{sid}/processes/s2/output",
                                               query={"format": "ndjson"})
            self.assertJsonError(status, headers, body, 429)
        finally:
            for s in streams:
                s.close()
        # The readers left; the processes did not.
        wait_until(lambda: self.d.get(f"/exec/{sid}/processes/s2/output")[0] == 200,
                   what="the streams' quota back")
        status, _, body = self.d.get(f"/exec/{sid}/processes")
        self.assertEqual(sum(p["state"] == "running" for p in body["processes"]), 3)

    def test_everything_ends_with_the_session(self):
        sid = self.session()
        self.d.post(f"/exec/{sid}/processes", body={"command": "sleep 600"})
        self.assertEqual(self.d.delete(f"/exec/{sid}")[0], 200)
        status, headers, body = self.d.get(f"/exec/{sid}/processes")
        self.assertJsonError(status, headers, body, 404)
