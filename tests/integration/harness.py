"""Helpers for the integration tests: run the real sandboxd and talk HTTP to it.

Standard library only. A test starts a daemon, drives it over HTTP and stops it:

    d = harness.Daemon(env={"AUTH_ENABLED": "false"})
    d.start()
    self.addCleanup(d.stop)
    status, headers, body = d.get("/health")

The daemon listens on 127.0.0.1 with a port picked by the kernel (PORT=0) and writes the port
to SANDBOX_PORT_FILE; its state and run directories are fresh temporary directories; its
stderr (JSON log lines) is kept in a file. stop() sends SIGTERM, expects exit status 0 and
returns what the daemon logged.

With a fresh state directory the daemon creates an admin API key and prints it once on stderr;
the harness picks it up as `admin_key` and sends it with every request unless a request says
otherwise (`api_key="..."`, or `api_key=""` for none).

Environment read here:
  SANDBOXD                   the daemon binary (default build/src/sandboxd)
  DRIVER                     passed to the daemon as SANDBOX_DRIVER (default jail)
  FIRECRACKER_ARTIFACTS_DIR  passed through (default /var/lib/agent-sandbox/artifacts)
  LOG_LEVEL                  passed through (default debug)
  SANDBOXD_START_TIMEOUT     seconds to wait for the port file (default 30)
  SANDBOXD_SCOPE             1: each daemon runs in a transient systemd scope with
                             Delegate=yes (systemd-run --scope), as under the packaged unit;
                             on a host whose init is systemd (the host lane)
"""

import atexit
import ctypes
import http.client
import json
import os
import pty
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import urllib.parse

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_SANDBOXD = os.path.join(ROOT, "build", "src", "sandboxd")
DEFAULT_ARTIFACTS = "/var/lib/agent-sandbox/artifacts"

_running = set()


def sandboxd_path():
    return os.environ.get("SANDBOXD") or DEFAULT_SANDBOXD


def driver():
    """The driver the tests ask the daemon for."""
    return os.environ.get("DRIVER") or "jail"


def _kill_leftovers():
    for d in list(_running):
        d.kill()


atexit.register(_kill_leftovers)


def _die_with_parent():
    """In the child: get SIGTERM when the test process dies, so no daemon outlives a run."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def wait_until(predicate, timeout=30, interval=0.05, what="condition"):
    """Polls predicate() until it returns something true and returns that, or fails the test
    (AssertionError) after timeout seconds, naming what it waited for.

    What a test waits for (a process to exit, a file to appear, the daemon to reach a state)
    takes milliseconds on an idle machine: the deadline is for a loaded one, and a healthy
    run never comes near it. Tests wait with this instead of sleeping a guessed time."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(interval)


def _tail(text, lines=60):
    return "\n".join(text.splitlines()[-lines:])


def _mounts_under(path):
    """Mount points at or below path, as this process sees them."""
    found = []
    prefix = os.path.realpath(path).rstrip("/") + "/"
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                point = line.split()[4].replace("\\040", " ")
                if (point + "/").startswith(prefix):
                    found.append(point)
    except OSError:
        pass
    return found


def decode_body(headers, data):
    """A response body: parsed JSON when the content type says JSON, else the raw bytes."""
    ctype = (headers.get("Content-Type") or "").split(";")[0].strip().lower()
    if ctype == "application/json" or ctype.endswith("+json"):
        try:
            return json.loads(data)
        except ValueError as e:
            raise AssertionError(f"invalid JSON body ({e}): {data[:500]!r}") from None
    return data


def encode_body(body, headers):
    """Request bytes for body (dict/list: JSON, str: UTF-8, bytes: as is, None: empty)."""
    if body is None:
        return None
    if isinstance(body, (dict, list)):
        headers.setdefault("Content-Type", "application/json")
        return json.dumps(body).encode()
    if isinstance(body, str):
        return body.encode()
    return body


class Stream:
    """A response read as it arrives: NDJSON lines or server-sent events.

    Use as a context manager; status and headers are set on entry. Every read waits at most
    `timeout` seconds (socket.timeout otherwise)."""

    def __init__(self, conn, resp):
        self.conn = conn
        self.resp = resp
        self.status = resp.status
        self.headers = resp.headers

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        self.conn.close()

    def lines(self):
        """Raw lines (bytes, without the line end) until the end of the body."""
        while True:
            line = self.resp.readline()
            if not line:
                return
            yield line.rstrip(b"\r\n")

    def ndjson(self):
        """Each non-empty line parsed as JSON."""
        for line in self.lines():
            if line.strip():
                try:
                    yield json.loads(line)
                except ValueError as e:
                    raise AssertionError(f"invalid NDJSON line ({e}): {line[:500]!r}") from None

    def sse(self):
        """Server-sent events as dicts: event (default "message"), data (lines joined by
        newlines) and id when given."""
        event = {}
        data = []
        for raw in self.lines():
            line = raw.decode("utf-8", errors="replace")
            if not line:
                if data or event:
                    event.setdefault("event", "message")
                    event["data"] = "\n".join(data)
                    yield event
                event, data = {}, []
                continue
            if line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            if value.startswith(" "):
                value = value[1:]
            if field == "data":
                data.append(value)
            elif field in ("event", "id", "retry"):
                event[field] = value
        if data:
            event.setdefault("event", "message")
            event["data"] = "\n".join(data)
            yield event

    def read(self):
        """The rest of the body."""
        return self.resp.read()


class Daemon:
    """One sandboxd process for a test."""

    def __init__(self, env=None, driver_name=None, binary=None, args=(), start_timeout=None,
                 tty=False):
        """env: extra variables for the daemon (a value of None removes a variable);
        driver_name: SANDBOX_DRIVER (default: the DRIVER variable, else jail); tty: its stderr
        is a pseudo-terminal, as when started from a shell (what it writes there is copied to
        the same file, with the terminal's CR LF made LF again, a moment later)."""
        self.tty = tty
        self._tty_copier = None
        self.extra_env = dict(env or {})
        self.driver = driver_name or driver()
        self.binary = binary or sandboxd_path()
        self.args = list(args)
        self.start_timeout = float(start_timeout or os.environ.get("SANDBOXD_START_TIMEOUT", 30))
        self.proc = None
        self.tmp = None
        self.port = None
        self.host = "127.0.0.1"
        self.admin_key = None
        self.api_key = None
        self.returncode = None
        self._stderr_text = None

    # lifecycle

    def start(self):
        if not os.access(self.binary, os.X_OK):
            raise AssertionError(f"sandboxd not found at {self.binary} (build it, or set SANDBOXD)")
        self.tmp = tempfile.mkdtemp(prefix="sandboxd-test-")
        self.state_dir = os.path.join(self.tmp, "state")
        self.run_dir = os.path.join(self.tmp, "run")
        os.mkdir(self.state_dir)
        os.mkdir(self.run_dir)
        self.port_file = os.path.join(self.tmp, "port")
        self.stderr_path = os.path.join(self.tmp, "stderr.log")
        self.stdout_path = os.path.join(self.tmp, "stdout.log")

        env = dict(os.environ)
        env.update(
            PORT="0",
            HOST=self.host,
            SANDBOX_PORT_FILE=self.port_file,
            SANDBOX_STATE_DIR=self.state_dir,
            SANDBOX_RUN_DIR=self.run_dir,
            FIRECRACKER_ARTIFACTS_DIR=os.environ.get("FIRECRACKER_ARTIFACTS_DIR")
            or DEFAULT_ARTIFACTS,
            SANDBOX_DRIVER=self.driver,
            LOG_LEVEL=os.environ.get("LOG_LEVEL") or "debug",
        )
        for name, value in self.extra_env.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = str(value)
        self.env = env
        # The directories the daemon uses: a restart over an earlier daemon's state names
        # them in its env, and a restart of that one must find them here.
        self.state_dir = env.get("SANDBOX_STATE_DIR", self.state_dir)
        self.run_dir = env.get("SANDBOX_RUN_DIR", self.run_dir)

        with open(self.stderr_path, "wb") as err, open(self.stdout_path, "wb") as out:
            # systemd-run --scope execs the daemon itself: the same process, in a delegated
            # cgroup of its own.
            scope = (["systemd-run", "--scope", "--quiet", "--collect", "-p", "Delegate=yes",
                      "--"] if os.environ.get("SANDBOXD_SCOPE") == "1" else [])
            master = terminal = None
            if self.tty:
                master, terminal = pty.openpty()
            self.proc = subprocess.Popen(
                [*scope, self.binary, *self.args],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=terminal if self.tty else err,
                preexec_fn=_die_with_parent,
            )
            if self.tty:
                os.close(terminal)
                self._tty_copier = threading.Thread(target=self._copy_tty, args=(master,),
                                                    daemon=True)
                self._tty_copier.start()
        _running.add(self)
        self._wait_for_port()
        return self

    def _wait_for_port(self):
        deadline = time.monotonic() + self.start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                _running.discard(self)
                raise AssertionError(
                    f"sandboxd exited with status {self.proc.returncode} before listening:\n"
                    + _tail(self.stderr())
                )
            try:
                with open(self.port_file, encoding="ascii") as f:
                    text = f.read().strip()
                if text.isdigit() and 0 < int(text) < 65536:
                    self.port = int(text)
                    self._find_admin_key()
                    return
            except (OSError, UnicodeDecodeError):
                pass
            time.sleep(0.02)
        self.kill()
        raise AssertionError(
            f"sandboxd wrote no port to {self.port_file} within {self.start_timeout:g}s:\n"
            + _tail(self.stderr())
        )

    def _find_admin_key(self):
        prefix = self.env.get("AUTH_KEY_PREFIX") or "sk_test_"
        found = re.findall(re.escape(prefix) + r"[0-9a-f]{32}\b", self.stderr())
        if found:
            self.admin_key = found[-1]
            self.api_key = self.admin_key

    def stop(self, timeout=20, check=True):
        """SIGTERM, wait at most timeout seconds, expect exit status 0 (when check) and return
        the daemon's stderr. Safe to call more than once."""
        if self.proc is None:
            return self._stderr_text or ""
        if self.returncode is None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
                    self.returncode = "killed"
                    _running.discard(self)
                    self._stderr_text = self.stderr()
                    if check:
                        raise AssertionError(
                            f"sandboxd did not exit within {timeout}s of SIGTERM:\n"
                            + _tail(self._stderr_text)
                        ) from None
                    return self._stderr_text
            self.returncode = self.proc.returncode
            _running.discard(self)
            if self._tty_copier:
                self._tty_copier.join(10)  # the rest of what the terminal holds
            self._stderr_text = self.stderr()
            ok = self.returncode == 0
            self._cleanup(keep=not ok)
            if check and not ok:
                raise AssertionError(
                    f"sandboxd exited with status {self.returncode} (files kept in {self.tmp}):\n"
                    + _tail(self._stderr_text)
                )
        return self._stderr_text

    def _copy_tty(self, master):
        """Copies the terminal's output to stderr_path until the daemon's side closes."""
        with open(self.stderr_path, "ab") as f:
            while True:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: nothing has the terminal open any more
                    break
                if not data:
                    break
                f.write(data.replace(b"\r\n", b"\n"))
                f.flush()
        os.close(master)

    def wait_stderr(self, text, timeout=30):
        """stderr once it holds text (a terminal's output comes through a moment later), or
        an AssertionError after timeout seconds."""
        deadline = time.monotonic() + timeout
        while True:
            out = self.stderr()
            if text in out:
                return out
            if time.monotonic() > deadline:
                raise AssertionError(f"sandboxd never wrote {text!r}:\n" + _tail(out))
            time.sleep(0.02)

    def kill(self):
        """SIGKILL without checks (for leftovers)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        _running.discard(self)

    def _cleanup(self, keep):
        if keep or not self.tmp:
            return
        if _mounts_under(self.tmp):
            return  # something is still mounted there: never delete through a mount
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, *rest):
        self.stop(check=exc_type is None)

    # what the daemon printed

    def stderr(self):
        """Everything the daemon wrote to stderr so far."""
        try:
            with open(self.stderr_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except (OSError, AttributeError):
            return ""

    def logs(self):
        """stderr parsed as JSON log lines (lines that are not JSON objects are skipped)."""
        out = []
        for line in self.stderr().splitlines():
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
        return out

    # HTTP

    @property
    def base_url(self):
        return f"http://{self.host}:{self.port}"

    def _headers(self, headers, api_key, accept="application/json"):
        h = {"Accept": accept} if accept else {}
        key = api_key if api_key is not None else self.api_key
        if key:
            h["Authorization"] = f"Bearer {key}"
        h.update(headers or {})
        return h

    def request(self, method, path, body=None, headers=None, api_key=None, query=None,
                timeout=60):
        """One request; returns (status, headers, body) where body is parsed JSON when the
        response says it is JSON, else bytes. api_key (or self.api_key) is sent as a Bearer
        token."""
        h = self._headers(headers, api_key)
        data = encode_body(body, h)
        if query:
            path += ("&" if "?" in path else "?") + urllib.parse.urlencode(query)
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request(method, path, body=data, headers=h)
            resp = conn.getresponse()
            raw = resp.read()
            return resp.status, resp.headers, decode_body(resp.headers, raw)
        finally:
            conn.close()

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body=None, **kw):
        return self.request("POST", path, body=body, **kw)

    def delete(self, path, **kw):
        return self.request("DELETE", path, **kw)

    def stream(self, method, path, body=None, headers=None, api_key=None, timeout=60):
        """Starts a request and returns a Stream to read the response as it arrives."""
        h = self._headers(headers, api_key, accept=None)
        data = encode_body(body, h)
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request(method, path, body=data, headers=h)
            return Stream(conn, conn.getresponse())
        except BaseException:
            conn.close()
            raise
