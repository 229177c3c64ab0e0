"""The client: Sandbox (a connection to sandboxd) and Session (one sandbox)."""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import secrets
import urllib.parse
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, Iterator, List, Optional, Sequence, Union

DEFAULT_URL = "http://127.0.0.1:3000"

# How long a request may wait for its reply, unless it says otherwise (milliseconds).
DEFAULT_HTTP_TIMEOUT_MS = 600_000
# What an execute waits beyond its command's own timeout: the daemon's reply about a command it
# stopped at its timeout still has to arrive (milliseconds).
EXEC_REPLY_MARGIN_MS = 30_000
# A request's http_timeout_ms when it gives none: the client's.
_CLIENT_TIMEOUT: Any = object()

# Interpreters for run_code, by template name.
_INTERPRETERS = {
    "python": ["python3", "-c"],
    "node": ["node", "-e"],
    "go": ["sh", "-c"],
    "base": ["sh", "-c"],
}


def _deprecated(old: str, new: str, stacklevel: int = 3) -> None:
    """Warns the caller of the public function (stacklevel counts from here)."""
    warnings.warn(f"{old} is deprecated: use {new}", DeprecationWarning, stacklevel=stacklevel)


def _timeout_ms(timeout_ms: Optional[float], timeout_s: Optional[float], old: str,
                new: str) -> Optional[float]:
    """timeout_ms, or the deprecated seconds-valued `timeout` converted (with a warning)."""
    if timeout_s is None:
        return timeout_ms
    if timeout_ms is not None:
        raise TypeError(f"give {new} or {old}, not both")
    _deprecated(old, f"{new} (milliseconds)", stacklevel=4)
    return timeout_s * 1000


class SandboxError(Exception):
    """An error reply from sandboxd (status is the HTTP status, 0 for transport errors)."""

    def __init__(self, status: int, message: str, body: Any = None):
        super().__init__(f"{status}: {message}" if status else message)
        self.status = status
        self.message = message
        self.body = body


@dataclass
class OutputChunk:
    stream: str
    data: str
    ts: int


@dataclass
class ExecResult:
    exit_code: Optional[int]
    duration: float
    output: List[OutputChunk]
    exec_id: Optional[str] = None
    signal: Optional[str] = None
    timed_out: bool = False
    cancelled: bool = False
    truncated: bool = False
    oom_killed: bool = False

    @property
    def stdout(self) -> str:
        return "".join(c.data for c in self.output if c.stream == "stdout")

    @property
    def stderr(self) -> str:
        return "".join(c.data for c in self.output if c.stream == "stderr")

    @property
    def ok(self) -> bool:
        return self.exit_code == 0

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "ExecResult":
        return cls(
            exit_code=j.get("exitCode"),
            duration=j.get("duration", 0.0),
            output=[OutputChunk(c["stream"], c["data"], c.get("ts", 0)) for c in j.get("output", [])],
            exec_id=j.get("execId"),
            signal=j.get("signal"),
            timed_out=bool(j.get("timedOut")),
            cancelled=bool(j.get("cancelled")),
            truncated=bool(j.get("truncated")),
            oom_killed=bool(j.get("oomKilled")),
        )


@dataclass
class StreamEvent:
    """One line of a streamed execute: type is start, stream, result or error."""

    type: str
    stream: Optional[str] = None
    data: Optional[str] = None
    exec_id: Optional[str] = None
    exit_code: Optional[int] = None
    signal: Optional[str] = None
    duration: Optional[float] = None
    error: Optional[str] = None
    raw: Dict[str, Any] = field(default_factory=dict)


@dataclass
class WatchEvent:
    """A change under a watched directory: type is create, write, remove, rename (with
    from_path when the rename happened inside the tree), chmod or overflow (changes were lost:
    look at the files again). Paths are relative to the workspace."""

    type: str
    path: Optional[str] = None
    dir: bool = False
    from_path: Optional[str] = None


class Watch:
    """A watch in place (Session.watch): iterate it for WatchEvents; close() (or leaving a
    with block) ends it, in the sandbox too. After the iteration, `end` says how it ended
    ({"events", "overflows", "timedOut", "gone"})."""

    def __init__(self, lines: Iterator[Dict[str, Any]]):
        self._lines = lines
        self.end: Optional[Dict[str, Any]] = None
        try:
            first = next(lines)
        except StopIteration:
            first = {}
        if first.get("type") != "ready":
            self.close()
            raise SandboxError(502, "the watch stream did not begin with its ready line")
        self.watches = int(first.get("watches", 0))

    def __iter__(self) -> "Watch":
        return self

    def __next__(self) -> WatchEvent:
        j = next(self._lines)
        if j.get("type") == "end":
            self.end = j
            self.close()
            raise StopIteration
        if j.get("type") == "error":
            self.close()
            raise SandboxError(int(j.get("status") or 502), str(j.get("error", "")), j)
        return WatchEvent(type=j.get("type", ""), path=j.get("path"), dir=bool(j.get("dir")),
                          from_path=j.get("from"))

    def close(self) -> None:
        close = getattr(self._lines, "close", None)
        if close:
            close()

    def __enter__(self) -> "Watch":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@dataclass
class FileEntry:
    path: str
    name: str
    type: str
    size: int
    mode: int
    mtime: float


@dataclass
class FileStat:
    """A path as stat describes it (a symlink itself, not what it points to)."""
    path: str
    type: str
    size: int
    mode: int
    mtime: float


@dataclass
class Port:
    """A TCP port listening in a session's sandbox, and the URLs that reach it through the
    daemon: url (host form, http://PORT-NAME.DOMAIN:...) and path_url (path form,
    /exec/NAME/ports/PORT/, on the daemon's address). public: reachable without a key or
    the preview token."""
    port: int
    address: str
    public: bool
    url: str
    path_url: str


@dataclass
class Preview:
    """A session's preview: its name, the URL templates (with "{port}") of both forms, the
    ports made public, and the token that opens every port of it (None in the answer to
    set_port_public)."""
    name: str
    url: str
    path_url: str
    public_ports: List[int]
    token: Optional[str] = None

    @classmethod
    def from_json(cls, j: Dict[str, Any]) -> "Preview":
        return cls(name=j["name"], url=j["url"], path_url=j["pathUrl"],
                   public_ports=[int(p) for p in j.get("publicPorts", [])],
                   token=j.get("token"))


class _Request:
    """One request's connection, which knows whether the request went out (to tell "cannot
    reach sandboxd" from "sandboxd did not answer in time")."""

    def __init__(self, client: "Sandbox", reply_timeout_ms: Optional[float]):
        self.client = client
        self.reply_timeout_ms = reply_timeout_ms
        self.sent = False
        # Connecting and sending take the client's HTTP timeout; waiting for the reply, the
        # request's own.
        self.conn = client._conn(client.http_timeout_ms / 1000)

    def send(self, method: str, path: str, body: Any, accept: str) -> http.client.HTTPResponse:
        headers = self.client._headers(accept)
        if isinstance(body, bytes):  # raw bytes go as they are
            data = body
            headers["Content-Type"] = "application/octet-stream"
        else:
            data = json.dumps(body).encode() if body is not None else None
        self.conn.request(method, self.client._path(path), body=data, headers=headers)
        self.sent = True
        if self.conn.sock is not None:
            ms = self.reply_timeout_ms
            self.conn.sock.settimeout(None if ms is None else ms / 1000)
        return self.conn.getresponse()

    def error(self, e: OSError) -> "SandboxError":
        url = self.client.base_url
        if self.sent and isinstance(e, socket.timeout):
            return SandboxError(0, f"no reply from sandboxd at {url} within "
                                   f"{self.reply_timeout_ms:g} ms; the client stopped waiting "
                                   "(the request may still be running there)")
        if self.sent:
            return SandboxError(0, f"lost the connection to sandboxd at {url}: {e}")
        return SandboxError(0, f"cannot reach sandboxd at {url}: {e}")


def _exec_http_timeout_ms(client: "Sandbox", command_timeout_ms: Optional[float]) -> Optional[float]:
    """An execute waits for its command's own timeout plus a margin; with no command timeout
    it waits as long as the command runs (the daemon's default may be none)."""
    if command_timeout_ms is None or command_timeout_ms == 0:
        return None
    return max(client.http_timeout_ms, command_timeout_ms + EXEC_REPLY_MARGIN_MS)


class _UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: Optional[float]):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


class Sandbox:
    """A connection to sandboxd.

    base_url: "http://host:port" or "unix:/path/to/socket" (default: $SANDBOX_URL or
    http://127.0.0.1:3000). api_key: default $SANDBOX_API_KEY. http_timeout_ms: how long a
    request waits for its reply (an execute waits for its command's timeout plus a margin
    instead); `timeout` in seconds is its deprecated older name.
    """

    def __init__(self, base_url: Optional[str] = None, api_key: Optional[str] = None,
                 timeout: Optional[float] = None, *,
                 http_timeout_ms: Optional[float] = None):
        self.base_url = base_url or os.environ.get("SANDBOX_URL") or DEFAULT_URL
        self.api_key = api_key if api_key is not None else os.environ.get("SANDBOX_API_KEY")
        ms = _timeout_ms(http_timeout_ms, timeout, "Sandbox(timeout=seconds)", "http_timeout_ms")
        self.http_timeout_ms = DEFAULT_HTTP_TIMEOUT_MS if ms is None else ms
        if self.base_url.startswith("unix:"):
            self._unix = self.base_url[5:]
        else:
            u = urllib.parse.urlsplit(self.base_url)
            if u.scheme not in ("http", "https"):
                raise ValueError(f"unsupported URL {self.base_url!r}")
            self._unix = None
            self._scheme, self._host, self._port = u.scheme, u.hostname, u.port
            self._prefix = u.path.rstrip("/")

    # -- context manager: nothing to release but kept for symmetry with Session --
    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc: Any) -> None:
        pass

    @property
    def timeout(self) -> float:
        """The HTTP timeout in seconds (deprecated: see http_timeout_ms)."""
        return self.http_timeout_ms / 1000

    def _conn(self, timeout_s: Optional[float]) -> http.client.HTTPConnection:
        if self._unix:
            return _UnixHTTPConnection(self._unix, timeout_s)
        if self._scheme == "https":
            return http.client.HTTPSConnection(self._host, self._port, timeout=timeout_s)
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout_s)

    def _headers(self, accept: str = "application/json") -> Dict[str, str]:
        h = {"Accept": accept, "Content-Type": "application/json"}
        if self.api_key:
            h["Authorization"] = f"Bearer {self.api_key}"
        return h

    def _path(self, path: str) -> str:
        return (self._prefix if not self._unix else "") + path

    def request(self, method: str, path: str, body: Any = None,
                accept: str = "application/json", *,
                http_timeout_ms: Optional[float] = _CLIENT_TIMEOUT) -> Any:
        """Sends one request (a JSON body, or bytes as octet-stream); returns the parsed JSON
        (or bytes for octet-stream). http_timeout_ms: how long to wait for the reply (None: as long as it takes)."""
        if http_timeout_ms is _CLIENT_TIMEOUT:
            http_timeout_ms = self.http_timeout_ms
        req = _Request(self, http_timeout_ms)
        try:
            resp = req.send(method, path, body, accept)
            raw = resp.read()
        except OSError as e:
            raise req.error(e) from e
        finally:
            req.conn.close()
        ctype = resp.getheader("Content-Type", "")
        if resp.status >= 400:
            try:
                j = json.loads(raw)
                msg = j.get("error", raw.decode(errors="replace"))
            except ValueError:
                j, msg = None, raw.decode(errors="replace")
            raise SandboxError(resp.status, msg, j)
        if "application/json" in ctype:
            return json.loads(raw) if raw else None
        return raw

    def stream(self, method: str, path: str, body: Any, *,
               http_timeout_ms: Optional[float] = _CLIENT_TIMEOUT) -> Iterator[Dict[str, Any]]:
        """Yields the JSON objects of an NDJSON reply as they arrive. http_timeout_ms bounds
        each wait for more of the reply (None: no bound)."""
        if http_timeout_ms is _CLIENT_TIMEOUT:
            http_timeout_ms = self.http_timeout_ms
        req = _Request(self, http_timeout_ms)
        try:
            resp = req.send(method, path, body, "application/x-ndjson")
            if resp.status >= 400:
                raw = resp.read()
                try:
                    msg = json.loads(raw).get("error", "")
                except ValueError:
                    msg = raw.decode(errors="replace")
                raise SandboxError(resp.status, msg)
            while True:
                line = resp.readline()
                if not line:
                    break
                line = line.strip()
                if line:
                    yield json.loads(line)
        except OSError as e:
            raise req.error(e) from e
        finally:
            req.conn.close()

    # -- top-level API --
    def healthy(self) -> bool:
        try:
            return self.request("GET", "/health").get("status") == "ok"
        except SandboxError:
            return False

    def health(self) -> Dict[str, Any]:
        return self.request("GET", "/health")

    def templates(self) -> List[Dict[str, Any]]:
        return self.request("GET", "/exec/templates")["templates"]

    def sessions(self) -> List[Dict[str, Any]]:
        return self.request("GET", "/exec/")["sessions"]

    def create(self, template: Optional[str] = None, id: Optional[str] = None,
               env: Optional[Dict[str, str]] = None,
               idle_timeout: Optional[int] = None) -> "Session":
        """A handle on a new session, which the server creates on its first command or write
        (as the TypeScript SDK's create()). env and idle_timeout, deprecated here, create it
        now as create_session() does."""
        if env is not None or idle_timeout is not None:
            _deprecated("create(env=, idle_timeout=)", "create_session(env=, idle_timeout_s=)")
            return self.create_session(template=template, id=id, env=env,
                                       idle_timeout_s=idle_timeout)
        return self.session(id, template)

    def create_session(self, template: Optional[str] = None, id: Optional[str] = None,
                       env: Optional[Dict[str, str]] = None,
                       idle_timeout_s: Optional[int] = None,
                       resources: Optional[Dict[str, int]] = None,
                       storage: Optional[str] = None,
                       volumes: Optional[Sequence[Dict[str, Any]]] = None,
                       on_timeout: Optional[str] = None,
                       snapshot: Optional[str] = None) -> "Session":
        """Creates a session now (POST /exec/), waits until it is ready, returns its handle.
        idle_timeout_s: seconds of inactivity before the server reaps it. resources: its own
        limits ({"memoryBytes", "cpuQuotaUs", "diskBytes", "pidsMax"}); storage: "disk" or
        "tmpfs" (jail, docs/storage.md), default the server's; volumes: persistent volumes to
        mount, [{"name": "data", "path": "/data", "readOnly": False}]; on_timeout: what the
        idle timeout does, "destroy" (the default) or "pause" (resume() brings it back);
        snapshot: start from this snapshot (Session.snapshot), its files and on qemu its
        processes; its template, resources and storage are the snapshot's, so template,
        resources, storage and volumes with it are refused (400), and an unknown one is 404."""
        body: Dict[str, Any] = {}
        if template:
            body["template"] = template
        if id:
            body["id"] = id
        if env:
            body["env"] = env
        if idle_timeout_s:
            body["idleTimeout"] = idle_timeout_s
        if resources:
            body["resources"] = resources
        if storage:
            body["storage"] = storage
        if volumes:
            body["volumes"] = list(volumes)
        if on_timeout:
            body["onTimeout"] = on_timeout
        if snapshot:
            body["snapshot"] = snapshot
        j = self.request("POST", "/exec/", body)
        return Session(self, j["id"], j.get("template", template))

    # persistent volumes (docs/storage.md)

    def create_volume(self, name: str, size_bytes: int) -> Dict[str, Any]:
        """Makes a persistent volume of size_bytes (its quota); returns it."""
        return self.request("POST", "/volumes", {"name": name, "sizeBytes": size_bytes})

    def volumes(self) -> List[Dict[str, Any]]:
        """This key's volumes (every key's for an admin key)."""
        return self.request("GET", "/volumes")["volumes"]

    def volume(self, name: str) -> Dict[str, Any]:
        return self.request("GET", f"/volumes/{urllib.parse.quote(name, safe='')}")

    def delete_volume(self, name: str) -> Dict[str, Any]:
        """Deletes a volume and its files (409 while a session mounts it)."""
        return self.request("DELETE", f"/volumes/{urllib.parse.quote(name, safe='')}")

    # named snapshots of sessions (Session.snapshot), to start new sessions from

    def snapshots(self) -> List[Dict[str, Any]]:
        """This key's snapshots (every key's for an admin key, each with its "owner")."""
        return self.request("GET", "/snapshots")["snapshots"]

    def snapshot(self, name: str) -> Dict[str, Any]:
        """One snapshot; SandboxError 404 when this key has none of that name."""
        return self.request("GET", f"/snapshots/{urllib.parse.quote(name, safe='')}")

    def delete_snapshot(self, name: str) -> Dict[str, Any]:
        """Deletes a snapshot ({"deleted": True, "name"}; SandboxError 404 when there is
        none)."""
        return self.request("DELETE", f"/snapshots/{urllib.parse.quote(name, safe='')}")

    def session(self, id: Optional[str] = None, template: Optional[str] = None) -> "Session":
        """A handle on session `id` (created by the server on first use if new)."""
        return Session(self, id or f"py-{secrets.token_hex(6)}", template)


class Session:
    """One sandbox. Use as a context manager to destroy it on exit.

    template is the one the session was made with, when this handle knows it (see
    resolve_template)."""

    def __init__(self, client: Sandbox, id: str, template: Optional[str] = None):
        self.client = client
        self.id = id
        self.template = template

    def resolve_template(self) -> str:
        """The session's template: this handle's, else the daemon's answer for this session
        (creating it with the daemon's default template when it does not exist yet, as its
        first command would)."""
        if self.template:
            return self.template
        info = self._info()
        if info is None:
            try:
                info = self.client.request("POST", "/exec/", {"id": self.id})
            except SandboxError as e:
                if e.status != 409:  # made by someone else meanwhile: ask again
                    raise
                info = self._info()
        if not info or not info.get("template"):
            raise SandboxError(0, f"cannot tell the template of session {self.id}")
        self.template = info["template"]
        return self.template

    def _info(self) -> Optional[Dict[str, Any]]:
        return next((s for s in self.client.sessions() if s.get("id") == self.id), None)

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        try:
            self.destroy()
        except SandboxError as e:
            if e.status != 404:
                raise

    def __repr__(self) -> str:
        return f"Session(id={self.id!r}, template={self.template!r})"

    def _p(self, suffix: str) -> str:
        return f"/exec/{urllib.parse.quote(self.id, safe='')}{suffix}"

    def _exec_body(self, command: str, args: Optional[Sequence[str]], env: Optional[Dict[str, str]],
                   cwd: Optional[str], timeout_ms: Optional[float],
                   stdin: Optional[str], user: Optional[str] = None) -> Dict[str, Any]:
        body: Dict[str, Any] = {"command": command}
        if user is not None:
            body["user"] = user
        if args is not None:
            body["args"] = list(args)
        if self.template:
            body["template"] = self.template
        if env:
            body["env"] = env
        if cwd:
            body["cwd"] = cwd
        if timeout_ms is not None:
            body["timeout"] = int(timeout_ms)
        if stdin is not None:
            body["stdin"] = stdin
        return body

    def exec(self, command: str, args: Optional[Sequence[str]] = None, *,
             env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None,
             timeout_ms: Optional[float] = None, stdin: Optional[str] = None,
             timeout: Optional[float] = None, user: Optional[str] = None) -> ExecResult:
        """Runs a command and waits for it. timeout_ms: the command's limit in milliseconds
        (absent: the server's default; 0: none); the client waits for it plus a margin.
        `timeout` in seconds is its deprecated older name. user: "root" runs it as the
        sandbox's own root (default: the command user)."""
        timeout_ms = _timeout_ms(timeout_ms, timeout, "exec(timeout=seconds)", "timeout_ms")
        j = self.client.request("POST", self._p("/execute"),
                                self._exec_body(command, args, env, cwd, timeout_ms, stdin,
                                                user),
                                http_timeout_ms=_exec_http_timeout_ms(self.client, timeout_ms))
        return ExecResult.from_json(j)

    def run(self, command: str, **kw: Any) -> ExecResult:
        """Runs a shell command line."""
        return self.exec("/bin/sh", ["-c", command], **kw)

    def run_code(self, code: str, language: Optional[str] = None, **kw: Any) -> ExecResult:
        """Runs a snippet with the interpreter of `language` or of the session's template
        (resolve_template)."""
        lang = language or self.resolve_template()
        interp = _INTERPRETERS.get(lang)
        if not interp:
            raise ValueError(f"no interpreter known for {lang!r}")
        return self.exec(interp[0], [interp[1], code], **kw)

    def exec_stream(self, command: str, args: Optional[Sequence[str]] = None, *,
                    env: Optional[Dict[str, str]] = None, cwd: Optional[str] = None,
                    timeout_ms: Optional[float] = None, stdin: Optional[str] = None,
                    timeout: Optional[float] = None) -> Iterator[StreamEvent]:
        """Runs a command, yielding output as it arrives, then a result (or error) event.
        timeout_ms (`timeout` in seconds, deprecated) as for exec."""
        timeout_ms = _timeout_ms(timeout_ms, timeout, "exec_stream(timeout=seconds)",
                                 "timeout_ms")
        body = self._exec_body(command, args, env, cwd, timeout_ms, stdin)
        wait = _exec_http_timeout_ms(self.client, timeout_ms)
        for j in self.client.stream("POST", self._p("/execute"), body, http_timeout_ms=wait):
            yield StreamEvent(type=j.get("type", ""), stream=j.get("stream"), data=j.get("data"),
                              exec_id=j.get("execId"), exit_code=j.get("exitCode"),
                              signal=j.get("signal"), duration=j.get("duration"),
                              error=j.get("error"), raw=j)

    def cancel(self, exec_id: str) -> None:
        self.client.request("POST", self._p("/cancel"), {"execId": exec_id})

    def write_file(self, path: str, content: Union[str, bytes], mode: Optional[int] = None) -> int:
        """Writes a file (bytes are sent as base64, so any content is safe). Returns its size."""
        body: Dict[str, Any] = {"path": path}
        if isinstance(content, bytes):
            body["content"] = base64.b64encode(content).decode()
            body["encoding"] = "base64"
        else:
            body["content"] = content
        if mode is not None:
            body["mode"] = mode
        if self.template:
            body["template"] = self.template
        return self.client.request("POST", self._p("/write"), body).get("size", 0)

    def read_file(self, path: str) -> str:
        """Reads a text file."""
        j = self.client.request("GET", self._p("/read?" + urllib.parse.urlencode({"path": path})))
        if j.get("encoding") == "base64":
            return base64.b64decode(j["content"]).decode("utf-8", errors="replace")
        return j["content"]

    def read_bytes(self, path: str) -> bytes:
        """Reads a file as bytes."""
        q = urllib.parse.urlencode({"path": path, "encoding": "base64"})
        j = self.client.request("GET", self._p("/read?" + q))
        return base64.b64decode(j["content"])

    def list_files(self, path: str = ".", recursive: bool = False) -> List[FileEntry]:
        q = urllib.parse.urlencode({"path": path, "recursive": "true" if recursive else "false"})
        j = self.client.request("GET", self._p("/files?" + q))
        return [FileEntry(e["path"], e["name"], e["type"], e.get("size", 0), e.get("mode", 0),
                          e.get("mtime", 0.0)) for e in j.get("files", [])]

    def stat(self, path: str) -> FileStat:
        """Describes a path without following it; SandboxError (status 404) when nothing is
        there."""
        j = self.client.request("GET", self._p("/stat?" + urllib.parse.urlencode({"path": path})))
        return FileStat(j["path"], j["type"], j.get("size", 0), j.get("mode", 0),
                        j.get("mtime", 0.0))

    def exists(self, path: str) -> bool:
        """Whether something (a file, directory or symlink) is at path."""
        try:
            self.stat(path)
            return True
        except SandboxError as e:
            if e.status == 404:
                return False
            raise

    def watch(self, path: str = ".", recursive: bool = False,
              events: Optional[Sequence[str]] = None,
              timeout_ms: Optional[float] = None) -> Watch:
        """Watches a directory of the session for changes; returns once the watch is in place
        (every change after that is reported), as an iterator of WatchEvent. SandboxError:
        400 for a path outside the workspace or not a directory, 404 when it is missing, 413
        for a tree too large, 429 at the watch quota."""
        q: Dict[str, str] = {"path": path}
        if recursive:
            q["recursive"] = "true"
        if events:
            q["events"] = ",".join(events)
        if timeout_ms is not None:
            q["timeoutMs"] = str(int(timeout_ms))
        lines = self.client.stream("GET", self._p("/watch?" + urllib.parse.urlencode(q)), None,
                                   http_timeout_ms=None)
        return Watch(lines)

    def mkdir(self, path: str, parents: bool = True) -> None:
        """Makes a directory, with its missing parents unless parents is False."""
        body: Dict[str, Any] = {"path": path, "parents": parents}
        if self.template:
            body["template"] = self.template
        self.client.request("POST", self._p("/mkdir"), body)

    def remove(self, path: str, recursive: bool = False) -> None:
        """Removes a file, a symlink or an empty directory; a whole tree when recursive."""
        self.client.request("POST", self._p("/remove"), {"path": path, "recursive": recursive})

    def move(self, src: str, dst: str, overwrite: bool = True) -> None:
        """Moves or renames within the workspace; replaces dst unless overwrite is False."""
        self.client.request("POST", self._p("/move"),
                            {"from": src, "to": dst, "overwrite": overwrite})

    # -- background processes: run on after the request that started them; named by pid or
    # tag (ref); their output is kept in the sandbox for any number of attaches --
    def _proc(self, ref: Union[int, str], suffix: str = "") -> str:
        return self._p(f"/processes/{urllib.parse.quote(str(ref), safe='')}{suffix}")

    def start_process(self, command: str, args: Optional[Sequence[str]] = None, *,
                      tag: Optional[str] = None, cwd: Optional[str] = None,
                      env: Optional[Dict[str, str]] = None, stdin: bool = False,
                      pty: Union[None, bool, Sequence[int], Dict[str, int]] = None,
                      timeout_ms: Optional[float] = None, replay_bytes: Optional[int] = None,
                      template: Optional[str] = None,
                      user: Optional[str] = None) -> Dict[str, Any]:
        """Starts a background process; returns it (pid, tag, state...). stdin: keep its stdin
        open for send_stdin; pty: True, (rows, cols) or {"rows", "cols"} for a terminal;
        timeout_ms: its limit (absent or 0: none); replay_bytes: its replay buffer's size."""
        body = self._exec_body(command, args, env, cwd, timeout_ms, None, user)
        if template:
            body["template"] = template
        if tag is not None:
            body["tag"] = tag
        if stdin:
            body["stdin"] = True
        if isinstance(pty, (list, tuple)):
            body["pty"] = {"rows": pty[0], "cols": pty[1]}
        elif pty is not None:
            body["pty"] = pty
        if replay_bytes is not None:
            body["replayBytes"] = replay_bytes
        return self.client.request("POST", self._p("/processes"), body)

    def processes(self) -> List[Dict[str, Any]]:
        """The session's processes, running and recently ended."""
        return self.client.request("GET", self._p("/processes"))["processes"]

    def process(self, ref: Union[int, str]) -> Dict[str, Any]:
        """One process, by pid or tag (SandboxError 404 when there is none)."""
        return self.client.request("GET", self._proc(ref))

    def attach(self, ref: Union[int, str], replay: Optional[int] = None,
               follow: bool = True) -> Iterator[Dict[str, Any]]:
        """Yields a process's output events as they come: {"type": "start"}, then "stream"
        (stream, data, ts) and "gap" (bytes lost to this reader), ending with "result" (the
        process) or "error". replay: bytes of the output already produced to begin with
        (None: all that is kept); follow=False: only what is kept now. Leaving the iterator
        ends the attach, not the process."""
        q = {"follow": "true" if follow else "false"}
        if replay is not None:
            q["replay"] = str(int(replay))
        path = self._proc(ref, "/output?" + urllib.parse.urlencode(q))
        return self.client.stream("GET", path, None, http_timeout_ms=None)

    def wait_process(self, ref: Union[int, str],
                     timeout_ms: Optional[float] = None) -> Dict[str, Any]:
        """Waits for a process to end and returns it; SandboxError 408 when it runs beyond
        timeout_ms (None: waits as long as it runs)."""
        body: Dict[str, Any] = {}
        if timeout_ms is not None:
            body["timeout"] = int(timeout_ms)
        return self.client.request("POST", self._proc(ref, "/wait"), body,
                                   http_timeout_ms=_exec_http_timeout_ms(self.client, timeout_ms))

    def signal_process(self, ref: Union[int, str], signal: Union[str, int]) -> None:
        """Sends a signal ("TERM", "INT"... or a number) to the process's group."""
        self.client.request("POST", self._proc(ref, "/signal"), {"signal": signal})

    def kill_process(self, ref: Union[int, str]) -> None:
        """Sends SIGKILL to the process's group."""
        self.client.request("DELETE", self._proc(ref))

    def send_stdin(self, ref: Union[int, str], data: Union[str, bytes],
                   close: bool = False) -> Dict[str, Any]:
        """Writes to the stdin of a process started with stdin=True (or on a terminal), then
        closes it when close; bytes go raw. Returns {bytes, closed}."""
        if isinstance(data, bytes):
            path = self._proc(ref, "/stdin?close=" + ("true" if close else "false"))
            return self.client.request("POST", path, data)
        return self.client.request("POST", self._proc(ref, "/stdin"),
                                   {"data": data, "close": close})

    def close_stdin(self, ref: Union[int, str]) -> Dict[str, Any]:
        """Closes the process's stdin (a terminal gets ^D)."""
        return self.client.request("POST", self._proc(ref, "/stdin"), {"close": True})

    def resize(self, ref: Union[int, str], rows: int, cols: int) -> None:
        """Resizes the terminal of a process started with pty."""
        self.client.request("POST", self._proc(ref, "/resize"), {"rows": rows, "cols": cols})

    # -- ports and previews: servers inside the sandbox, reached through the daemon --
    def ports(self) -> List[Port]:
        """The TCP ports listening in the sandbox, with their URLs (at most 1024)."""
        j = self.client.request("GET", self._p("/ports"))
        return [Port(int(p["port"]), p.get("address", ""), bool(p.get("public")), p["url"],
                     p["pathUrl"]) for p in j.get("ports", [])]

    def preview(self) -> Preview:
        """The session's preview: name, URL templates, public ports and token."""
        return Preview.from_json(self.client.request("GET", self._p("/preview")))

    def preview_url(self, port: int, form: str = "host", token: bool = False) -> str:
        """The URL of port: form "host" (http://PORT-NAME.DOMAIN:.../) or "path" (the path
        form on this client's base URL). token=True appends ?sandbox_token=..., which lets
        a browser without a key in. ValueError for a port outside 1-65535, an unknown form,
        or the path form over a Unix socket."""
        if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
            raise ValueError(f"a port is a number from 1 to 65535, not {port!r}")
        if form not in ("host", "path"):
            raise ValueError(f'form is "host" or "path", not {form!r}')
        if form == "path" and self.client._unix:
            raise ValueError("the path form needs the daemon's HTTP address, not a Unix socket")
        p = self.preview()
        url = (p.url if form == "host" else self.client.base_url.rstrip("/") + p.path_url)
        url = url.replace("{port}", str(port))
        if token:
            url += ("&" if "?" in url else "?") + urllib.parse.urlencode({"sandbox_token": p.token})
        return url

    def rotate_preview_token(self) -> Preview:
        """A new preview token; every earlier one stops working at once."""
        return Preview.from_json(self.client.request("POST", self._p("/preview/token")))

    def set_port_public(self, port: int, public: bool = True) -> Preview:
        """Makes port reachable by anyone (public) or by keys and the token only again.
        SandboxError 400 for a port outside 1-65535, 409 past the most public ports."""
        return Preview.from_json(self.client.request("POST", self._p("/preview/public"),
                                                     {"port": port, "public": public}))

    # pause and resume (docs/lifecycle.md)

    def pause(self, mode: Optional[str] = None) -> Dict[str, Any]:
        """Pauses the session. mode "freeze" (the default): its processes stop where they
        are and use no CPU; memory, files and background processes are kept. mode
        "hibernate": its memory is freed and it is kept on disk (across a server restart
        too): on qemu the whole VM, whose processes carry on after resume(); in a jail (a
        session with a disk) only its files: every process is ENDED, and resume() starts it
        afresh over them ("processesKept" says which). Its commands and file operations fail (409) until resume().
        Returns the session object ("state": "paused", "pausedAt", "pauseMode",
        "processesKept"); 409 while a command or transfer of it is in flight, or when it is
        paused already; 400 for a session that cannot be hibernated."""
        return self.client.request("POST", self._p("/pause"), {"mode": mode} if mode else None)

    def resume(self) -> Dict[str, Any]:
        """Resumes a paused session: its processes carry on from where they stopped.
        Returns the session object ("state": "ready"); 409 when it is not paused."""
        return self.client.request("POST", self._p("/resume"))

    def fork(self, count: int = 1) -> List["Session"]:
        """Forks the running session into `count` new ones (1 to 16) from its current
        state: on qemu the whole VM, its memory and running processes with a copy of its
        disk; in a jail (a session with a disk) a copy of its files only, each fork's
        processes starting afresh; each fork with its own id and network; the session runs
        on. Returns the forks once every one is ready, as Sessions (their session objects in
        `.fork_info`; a fork that failed has "state": "failed" and "error"). SandboxError 501
        where the driver cannot save the session (a jail's session without a disk), 409
        while paused or with an operation in flight, 429 beyond the key's or the server's
        sessions, 400 for a bad count or a session with volumes."""
        body = self.client.request("POST", self._p("/fork"), {"count": count})
        forks = []
        for info in body["sessions"]:
            s = Session(self.client, info["id"], info.get("template"))
            s.fork_info = info
            forks.append(s)
        return forks

    def snapshot(self, name: str, ttl_seconds: Optional[int] = None) -> Dict[str, Any]:
        """Keeps the session's current state under `name` (1 to 63 of [A-Za-z0-9._-],
        starting with a letter or digit), for new sessions to start from
        (create_session(snapshot=name)): on qemu the whole VM, whose processes carry on in
        them; in a jail (a session with a disk) only its files ("processesKept" says which).
        The session runs on. It lasts ttl_seconds (default and most: the server's
        SANDBOX_SNAPSHOT_TTL). Returns the snapshot (name, template, driver, session,
        sizeBytes, createdAt, expiresAt, processesKept). SandboxError 400 for a bad name or
        ttl or a session with volumes, 404 for an unknown session, 409 when the key has a
        snapshot of that name or the session is paused or busy, 429 beyond the key's
        snapshots or their bytes, 501 where the driver cannot save the session (a jail's
        session without a disk), 507 when the server's disk has no room."""
        body: Dict[str, Any] = {"name": name}
        if ttl_seconds is not None:
            body["ttlSeconds"] = ttl_seconds
        return self.client.request("POST", self._p("/snapshot"), body)

    def info(self) -> Optional[Dict[str, Any]]:
        """The session object as the server lists it (state, pausedAt, limits...), or None
        when there is no such session."""
        return self._info()

    @property
    def state(self) -> Optional[str]:
        """The session's state now: "ready", "paused", "creating"...; None when it is gone."""
        info = self._info()
        return info.get("state") if info else None

    def destroy(self) -> bool:
        """Destroys the session; False when there was no such session (a 200 with
        destroyed false, or the 404 of older servers)."""
        try:
            j = self.client.request("DELETE", self._p(""))
        except SandboxError as e:
            if e.status == 404:
                return False
            raise
        return not (isinstance(j, dict) and j.get("destroyed") is False)
