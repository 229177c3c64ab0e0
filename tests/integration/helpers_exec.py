"""Shared pieces of the /exec integration tests: a daemon per test class, session names,
execute calls and result checks. Standard library only; built on harness.py.

Every test here runs against whichever driver DRIVER names (default jail) and assumes only
what the design promises of every driver: a `base` template with busybox, a workspace that is
the working directory of commands, limits from the VM_* / SANDBOX_* variables."""

import json
import os
import re
import secrets
import time
import unittest

import harness
from harness import wait_until  # noqa: F401 (the tests import it from here too)

TEMPLATE = "base"

# What every daemon of these tests gets unless a class says otherwise: the daemon's waits
# shortened (docs/testing.md), and liveness pings often enough that they run beside every
# test's requests.
BASE_ENV = {
    "SANDBOX_DEFAULT_TEMPLATE": TEMPLATE,
    "AUTH_ENABLED": "false",
    "SANDBOX_WARM_POOL": "1",
    "SANDBOX_SHUTDOWN_GRACE_MS": "1000",
    "SANDBOX_REAPER_INTERVAL_MS": "100",
    "SANDBOX_POOL_RETRY_MS": "500",
    "SANDBOX_PING_INTERVAL_MS": "500",
    "SANDBOX_PING_TIMEOUT_MS": "15000",
}


def artifacts_dir():
    return os.environ.get("FIRECRACKER_ARTIFACTS_DIR") or harness.DEFAULT_ARTIFACTS


def require_ready():
    """Fails (saying what is missing) when the daemon binary or the base template is missing:
    `make test` builds both, so neither is a reason to skip."""
    binary = harness.sandboxd_path()
    if not os.access(binary, os.X_OK):
        raise AssertionError(f"sandboxd is not built at {binary} (ninja -C build)")
    manifest = os.path.join(artifacts_dir(), "templates", TEMPLATE, "template.json")
    if not os.path.isfile(manifest):
        raise AssertionError(
            f"the {TEMPLATE} template is not built ({manifest} is missing; "
            f"run make base-template)"
        )


def start_daemon(env=None):
    """A started daemon with BASE_ENV plus env."""
    require_ready()
    d = harness.Daemon(env={**BASE_ENV, **(env or {})})
    d.start()
    return d


def new_session_id(label="t"):
    """A fresh session id that names the test it belongs to."""
    label = re.sub(r"[^A-Za-z0-9._-]", "-", label)[:60].strip("-") or "t"
    return f"{label}-{secrets.token_hex(4)}"


def sandbox_of(daemon, sid):
    """The sandbox id the daemon logged for session sid ("session <sid> ready (..., sandbox
    <id>)"), or None."""
    prefix = f"session {sid} ready"
    for entry in daemon.logs():
        msg = entry.get("msg", "")
        if msg.startswith(prefix):
            m = re.search(r"\bsandbox (\S+?)\)?$", msg)
            if m:
                return m.group(1)
    return None


def joined(output, stream=None):
    """The text of a list of output chunks (of one stream, or all)."""
    return "".join(c["data"] for c in output if stream is None or c["stream"] == stream)


def until_file(name, seconds=60):
    """Shell (to put before the rest of a command) that waits until the workspace holds
    `name`, for at most `seconds`: a command that goes on when the test says so, instead of
    one that sleeps for a time the test hopes is long enough."""
    return (f"i=0; while [ ! -e {name} ] && [ $i -lt {seconds * 50} ]; do usleep 20000; "
            f"i=$((i+1)); done; ")


class DaemonTestCase(unittest.TestCase):
    """Tests sharing one daemon per class. Subclasses set daemon_env."""

    daemon_env = {}
    d = None

    @classmethod
    def setUpClass(cls):
        cls.d = start_daemon(cls.daemon_env)
        cls.addClassCleanup(cls.d.stop)

    # sessions

    def session(self, label=None):
        """A new session id, deleted (if it exists) when the test ends."""
        sid = new_session_id(label or self._testMethodName.removeprefix("test_"))
        self.addCleanup(self.d.delete, f"/exec/{sid}", timeout=30)
        return sid

    def listed_sessions(self):
        status, _, body = self.d.get("/exec/", timeout=30)
        self.assertEqual(status, 200, body)
        return {s["id"]: s for s in body["sessions"]}

    def metrics(self):
        """/metrics as {"name{labels}": value}."""
        status, _, text = self.d.get("/metrics")
        self.assertEqual(status, 200)
        text = text.decode() if isinstance(text, bytes) else text
        return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
                for line in text.splitlines() if line and not line.startswith("#")}

    # commands

    def execute(self, sid, command, http_timeout=60, headers=None, query=None, **fields):
        """POST /exec/:id/execute with {"command": command, **fields}; (status, body)."""
        body = {"command": command, **fields}
        status, _, resp = self.d.post(
            f"/exec/{sid}/execute", body=body, timeout=http_timeout, headers=headers, query=query
        )
        return status, resp

    def run_ok(self, sid, command, http_timeout=60, **fields):
        """Executes and expects exit code 0; returns the result."""
        status, body = self.execute(sid, command, http_timeout=http_timeout, **fields)
        self.assertEqual(status, 200, body)
        self.assertEqual(body.get("exitCode"), 0, body)
        return body

    def stdout_of(self, sid, command, **fields):
        return joined(self.run_ok(sid, command, **fields)["output"], "stdout")

    def wait_processes_gone(self, sid, fragment, what, timeout=30):
        """Waits until no process of the session's sandbox has `fragment` in its command line
        (as `ps` in the sandbox shows them)."""
        wait_until(lambda: fragment not in self.stdout_of(sid, "ps -o args"), timeout,
                   interval=0.2, what=what)

    def stream_execute(self, sid, command, mode="ndjson", http_timeout=60, **fields):
        """Starts a streaming execute; returns a harness.Stream (a context manager)."""
        body = {"command": command, **fields}
        if mode == "ndjson":
            headers = {"Accept": "application/x-ndjson"}
        elif mode == "sse":
            headers = {"Accept": "text/event-stream"}
        else:
            raise ValueError(mode)
        return self.d.stream(
            "POST", f"/exec/{sid}/execute", body=body, headers=headers, timeout=http_timeout
        )

    # checks

    def assertJsonError(self, status, headers, body, expected_status, fragment=None):
        """A JSON error reply: the status, a JSON content type, {"error": "..."}."""
        self.assertEqual(status, expected_status, body)
        self.assertIn("application/json", headers.get("Content-Type", ""), body)
        self.assertIsInstance(body, dict, body)
        self.assertIsInstance(body.get("error"), str, body)
        self.assertTrue(body["error"], body)
        if fragment is not None:
            self.assertIn(fragment, body["error"])

    def assertChunk(self, chunk, streaming=False):
        """One output chunk: {stream, data, ts} (plus type "stream" when streamed)."""
        self.assertIn(chunk.get("stream"), ("stdout", "stderr"), chunk)
        self.assertIsInstance(chunk.get("data"), str, chunk)
        self.assertIsInstance(chunk.get("ts"), int, chunk)
        now_ms = time.time() * 1000
        self.assertLess(abs(chunk["ts"] - now_ms), 600_000, f"ts far from now: {chunk}")
        if streaming:
            self.assertEqual(chunk.get("type"), "stream", chunk)


def parse_sse_data(events):
    """The events of an SSE stream with their data parsed as JSON."""
    out = []
    for e in events:
        out.append({"event": e["event"], "data": json.loads(e["data"])})
    return out
