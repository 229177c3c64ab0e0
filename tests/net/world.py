"""The networking tests' world: a stand-in internet in a network namespace of the test's own,
and the checks that keep every packet of the tests on this machine.

run.sh starts the tests in a new network namespace and a private mount namespace (with its
own /run): that namespace is the daemon's "host". It has no link to the real network at all,
only loopback and the link to the stand-in internet, and its default route is `unreachable`.
Our nftables table, the sandboxes' namespaces and veths, and the lock of sandbox networking
exist only there, so the tests neither see nor disturb a daemon running on the real host.

The internet namespace holds every address a sandbox is sent to:
  198.51.100.10   HTTP (web.test.example), also an upload sink on port 9000
  198.51.100.11   HTTP (other.test.example): an address the allow-list tests never resolve
  198.51.100.53   DNS, the daemon's VM_DNS_UPSTREAM
  10.99.0.10      HTTP on a private address
  169.254.169.254 HTTP on the metadata address
reached through a veth the test creates (198.18.0.0/31, the benchmarking range).

Before any packet is sent, route_check() asks the kernel how the target is reached, from
inside the sandbox's namespace and from the test's host namespace for packets the sandbox
forwards, and aborts the whole run unless the path ends in the internet namespace (or, for
the host's own address on the test's link, on the test's host)."""

import atexit
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))

POOL = "10.211.0.0/16"
LINK_HOST = "198.18.0.0"
LINK_INET = "198.18.0.1"
WEB = "198.51.100.10"
WEB2 = "198.51.100.11"
DNS = "198.51.100.53"
PRIVATE = "10.99.0.10"
METADATA = "169.254.169.254"
SINK_PORT = 9000
TARGETS = [WEB, WEB2, DNS, PRIVATE, METADATA]
ZONE = {
    "web.test.example": WEB,
    "other.test.example": WEB2,
    "blocked.test.example": WEB,
    "private.test.example": PRIVATE,
    "metadata.test.example": METADATA,
    "x.allowed.example": WEB,
}
NET_STATE_DIR = "/run/agent-sandbox-net"


class Abort(Exception):
    """A safety check failed: nothing more may be sent."""


def run(*args, check=True, ns=None, capture=True):
    cmd = list(args)
    if ns:
        cmd = ["ip", "netns", "exec", ns] + cmd
    p = subprocess.run(cmd, capture_output=capture, text=True)
    if check and p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {p.stderr.strip()}")
    return p.stdout


def ip_json(*args, ns=None):
    out = run("ip", "-j", *args, ns=ns)
    return json.loads(out) if out.strip() else []


class World:
    def __init__(self):
        tag = secrets.token_hex(3)
        self.ns = f"asnt-inet-{tag}"  # not "as-": no sandbox rule may match it
        self.link = f"asnt{tag}"
        self.tmp = None
        self.servers = None
        self.made = []  # undo commands, in order of creation
        self.aborted = None

    # --- set-up ----------------------------------------------------------------------

    def preflight(self):
        """What the tests need and is missing (a string), or None."""
        if os.geteuid() != 0:
            return "the networking tests need root"
        for tool in ("ip", "nft"):
            if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode:
                return f"`{tool}` is not installed"
        return None

    def check_isolated(self):
        """Refuses to run anywhere but in the fresh namespace run.sh made: loopback only, no
        routes, nothing of sandbox networking."""
        if os.environ.get("SANDBOX_ISOLATED") != "1":
            raise Abort("not started by tests/net/run.sh in namespaces of its own "
                        "(scripts/isolated.sh)")
        links = [link["ifname"] for link in ip_json("link", "show")]
        if links != ["lo"]:
            raise Abort(f"the test's host namespace is not fresh: links {links}")
        routes = run("ip", "-4", "route", "show", "table", "main")
        if routes.strip():
            raise Abort(f"the test's host namespace has routes: {routes}")
        if os.path.exists(os.path.join(NET_STATE_DIR, "lock")):
            raise Abort(f"{NET_STATE_DIR} is not empty: /run is not the test's own")

    def _do(self, undo, *args, ns=None):
        run(*args, ns=ns)
        if undo:
            self.made.append(undo)

    def setup(self):
        self.check_isolated()
        atexit.register(self.teardown)
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))
        # Nothing this namespace sends may go anywhere but where the test says.
        self._do(None, "ip", "route", "add", "unreachable", "default")
        self._do(["ip", "netns", "del", self.ns], "ip", "netns", "add", self.ns)
        self._do(["ip", "link", "del", self.link], "ip", "link", "add", self.link, "type", "veth",
                 "peer", "name", "eth0", "netns", self.ns)
        self._do(None, "ip", "addr", "add", f"{LINK_HOST}/31", "dev", self.link)
        self._do(None, "ip", "link", "set", self.link, "up")
        self._do(None, "ip", "addr", "add", f"{LINK_INET}/31", "dev", "eth0", ns=self.ns)
        self._do(None, "ip", "link", "set", "eth0", "up", ns=self.ns)
        self._do(None, "ip", "link", "set", "lo", "up", ns=self.ns)
        for a in TARGETS:
            self._do(None, "ip", "addr", "add", f"{a}/32", "dev", "lo", ns=self.ns)
        for prefix in ("198.51.100.0/24", "10.99.0.0/24", f"{METADATA}/32"):
            self._do(None, "ip", "route", "add", prefix, "via", LINK_INET, "dev", self.link)
        self.start_servers()
        # The daemon's upstream is in the test's namespace.
        r = ip_json("route", "get", DNS)[0]
        if r.get("dev") != self.link:
            raise Abort(f"the route to {DNS} leaves through {r.get('dev')}")

    def start_servers(self):
        self.tmp = tempfile.mkdtemp(prefix="sandbox-net-test-")
        ready = os.path.join(self.tmp, "ready")
        args = ["ip", "netns", "exec", self.ns, sys.executable, os.path.join(HERE, "inet_servers.py"),
                "--dns", DNS, "--ready", ready, "--sink", f"{WEB}:{SINK_PORT}"]
        for name, addr in ZONE.items():
            args += ["--zone", f"{name}={addr}"]
        for addr in (WEB, WEB2, PRIVATE, METADATA):
            args += ["--http", addr]
        self.servers = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 10
        while not os.path.exists(ready):
            if self.servers.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the test servers did not start: "
                                   + (self.servers.stderr.read().decode() if self.servers.poll()
                                      is not None else "timeout"))
            time.sleep(0.05)

    def teardown(self):
        if self.servers and self.servers.poll() is None:
            self.servers.terminate()
            try:
                self.servers.wait(5)
            except subprocess.TimeoutExpired:
                self.servers.kill()
        self.servers = None
        while self.made:
            subprocess.run(self.made.pop(), capture_output=True)
        if self.tmp:
            subprocess.run(["rm", "-rf", self.tmp])
            self.tmp = None

    # --- the safety check --------------------------------------------------------------

    def route_check(self, sb, target, expect="inet"):
        """Aborts unless a packet from sandbox sb to target ends in the test's namespace
        (expect="inet") or on the host's address of the test's link (expect="host")."""
        if self.aborted:
            raise Abort(self.aborted)
        try:
            inner = ip_json("route", "get", target, ns=sb.netns)[0]
            if inner.get("dev") != "eth0" or inner.get("gateway") != sb.gateway:
                raise Abort(f"inside {sb.netns}, {target} is reached by {inner}, not via "
                            f"{sb.gateway}")
            outer = ip_json("route", "get", target, "from", sb.address, "iif", sb.link)[0]
            if expect == "inet":
                if outer.get("dev") != self.link or outer.get("gateway") != LINK_INET:
                    raise Abort(f"the host forwards {target} by {outer}, not into {self.ns}")
                local = [i.get("local") for a in ip_json("addr", "show", ns=self.ns)
                         for i in a.get("addr_info", [])]
                if target not in local:
                    raise Abort(f"{target} is not an address of {self.ns}")
            elif expect == "host":
                if outer.get("type") != "local" or target != LINK_HOST:
                    raise Abort(f"{target} is not the host's address on the test link: {outer}")
            else:
                raise Abort(f"unknown expectation {expect}")
        except Abort as e:
            self.aborted = str(e)
            raise
        except (RuntimeError, IndexError, ValueError) as e:
            self.aborted = f"route check of {target} failed: {e}"
            raise Abort(self.aborted) from None
