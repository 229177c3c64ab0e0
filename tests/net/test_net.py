"""Per-session networking and egress policy, end to end: the real sandboxd (jail driver, base
template) against a stand-in internet of the test's own (world.py). Every test class runs its
own daemon with its own policy; every packet a sandbox sends is route-checked first.

Run by tests/net/run.sh, which prints `N passed, N failed, N skipped` last."""

import concurrent.futures
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import harness  # noqa: E402
import runner  # noqa: E402
import world as W  # noqa: E402

WORLD = None
TEMPLATE = "base"


def setUpModule():
    global WORLD
    # Root, ip and nft, the daemon and the base template all come with `make test`: one of
    # them missing is a failure, not a reason to skip.
    w = W.World()
    why = w.preflight()
    if why:
        raise AssertionError(why)
    binary = harness.sandboxd_path()
    if not os.access(binary, os.X_OK):
        raise AssertionError(f"sandboxd is not built at {binary}")
    artifacts = os.environ.get("FIRECRACKER_ARTIFACTS_DIR") or harness.DEFAULT_ARTIFACTS
    if not os.path.isfile(os.path.join(artifacts, "templates", TEMPLATE, "template.json")):
        raise AssertionError(f"the {TEMPLATE} template is not built (make base-template)")
    w.setup()
    WORLD = w


def tearDownModule():
    if WORLD:
        WORLD.teardown()


def host_state():
    """What of sandbox networking exists on the host now."""
    netns = [n.split()[0] for n in W.run("ip", "netns", "list").splitlines()
             if n.startswith("as-")]
    links = [link["ifname"] for link in W.ip_json("link", "show")
             if link["ifname"].startswith("as-")]
    tables = W.run("nft", "list", "tables")
    dirs = sorted(d for d in os.listdir(W.NET_STATE_DIR) if d != "lock") \
        if os.path.isdir(W.NET_STATE_DIR) else []
    return {"netns": netns, "links": links, "table": "agent_sandbox" in tables, "dirs": dirs}


class Sandbox:
    """A session's sandbox, as the host sees its network."""

    def __init__(self, daemon, sid):
        self.daemon = daemon
        self.sid = sid
        self.exec("true")
        sb = None
        for entry in daemon.logs():
            m = re.match(rf"session {re.escape(sid)} ready \(.*sandbox (sb-[0-9a-f]+)\)",
                         entry.get("msg", ""))
            if m:
                sb = m.group(1)
        if not sb:
            raise AssertionError(f"no sandbox logged for session {sid}")
        self.link = "as-" + sb[3:]
        self.netns = self.link
        host = W.ip_json("addr", "show", "dev", self.link)[0]["addr_info"]
        self.gateway = next(i["local"] for i in host if i.get("family") == "inet")
        inner = W.ip_json("addr", "show", "dev", "eth0", ns=self.netns)[0]["addr_info"]
        self.address = next(i["local"] for i in inner if i.get("family") == "inet")
        los = W.ip_json("addr", "show", "dev", "lo", ns=self.netns)[0]["addr_info"]
        # A jail's resolver is on lo; a VM's on tap0 (VmSandbox).
        self.resolver = next((i["local"] for i in los
                              if i.get("family") == "inet" and i["local"] != "127.0.0.1"), None)

    def exec(self, command, timeout_ms=30000):
        """(exit code, stdout+stderr text, seconds) of a shell command in the sandbox."""
        st, _, body = self.daemon.post(f"/exec/{self.sid}/execute",
                                       body={"command": command, "timeout": timeout_ms})
        if st != 200:
            raise AssertionError(f"execute `{command}`: {st} {body}")
        text = "".join(c["data"] for c in body.get("output", []))
        return body["exitCode"], text, body["duration"] / 1000.0

    def fetch(self, url, target, expect="inet", seconds=4):
        """Runs wget in the sandbox after the route check of target; (exit code, text)."""
        WORLD.route_check(self, target, expect)
        code, text, _ = self.exec(f"timeout {seconds} wget -q -O - {url} 2>&1")
        return code, text

    def lookup(self, name, server=None):
        server = server or self.resolver
        if server != self.resolver:
            WORLD.route_check(self, server)
        return self.exec(f"timeout 8 nslookup -type=a {name} {server} 2>&1")[:2]

    def resolv_conf_ok(self):
        code, text, _ = self.exec("cat /etc/resolv.conf 2>/dev/null")
        return f"nameserver {self.resolver}" in text


class VmSandbox(Sandbox):
    """A qemu sandbox: the guest sits behind tap0 of the namespace, on the /31 peer of
    tap0's address, which is its gateway and resolver."""

    def __init__(self, daemon, sid):
        super().__init__(daemon, sid)
        tap = W.ip_json("addr", "show", "dev", "tap0", ns=self.netns)[0]["addr_info"]
        self.tap_addr = next(i["local"] for i in tap if i.get("family") == "inet")
        last = int(self.tap_addr.rsplit(".", 1)[1])
        self.guest = self.tap_addr.rsplit(".", 1)[0] + "." + str(last ^ 1)
        self.resolver = self.tap_addr

    def fetch(self, url, target, expect="inet", seconds=4):
        # The guest's packets enter the namespace by tap0 and must leave it by eth0 for
        # the host, which must forward them into the test's namespace.
        WORLD.route_check(self, target, expect)
        try:
            fwd = W.ip_json("route", "get", target, "from", self.guest, "iif", "tap0",
                            ns=self.netns)[0]
            if fwd.get("dev") != "eth0" or fwd.get("gateway") != self.gateway:
                raise W.Abort(f"{self.netns} forwards the guest's {target} by {fwd}")
            if expect == "inet":
                outer = W.ip_json("route", "get", target, "from", self.guest, "iif",
                                  self.link)[0]
                if outer.get("dev") != WORLD.link or outer.get("gateway") != W.LINK_INET:
                    raise W.Abort(f"the host forwards the guest's {target} by {outer}")
        except W.Abort as e:
            WORLD.aborted = str(e)
            raise
        except (RuntimeError, IndexError, ValueError) as e:
            WORLD.aborted = f"route check of the guest's {target} failed: {e}"
            raise W.Abort(WORLD.aborted) from None
        code, text, _ = self.exec(f"timeout {seconds} wget -q -O - {url} 2>&1")
        return code, text


class NetTest(unittest.TestCase):
    """A daemon with ENV for the class; sandboxes made by sandbox()."""

    ENV = {}
    HOST = None
    DRIVER = None  # SANDBOX_DRIVER: the DRIVER variable's (jail) unless a class says
    SANDBOX = Sandbox

    @classmethod
    def setUpClass(cls):
        # After a safety check stopped the run, nothing more runs; the run is failed for it
        # (main()'s late failure), so skipping hides nothing.
        if WORLD is None or WORLD.aborted:
            raise unittest.SkipTest(WORLD.aborted if WORLD else "no test world")
        env = {
            "AUTH_ENABLED": "false",
            "SANDBOX_DEFAULT_TEMPLATE": TEMPLATE,
            "SANDBOX_WARM_POOL": "0",
            "SANDBOX_NETWORK": "on",
            "SANDBOX_NET_POOL": W.POOL,
            "VM_DNS_UPSTREAM": W.DNS,
            "LOG_LEVEL": "debug",
        }
        env.update(cls.ENV)
        cls.daemon = harness.Daemon(env=env, driver_name=cls.DRIVER)
        if cls.HOST:
            cls.daemon.host = cls.HOST
        cls.daemon.start()
        cls.count = 0

    @classmethod
    def tearDownClass(cls):
        d = getattr(cls, "daemon", None)
        if d:
            d.stop()
            cls.daemon = None
            state = host_state()
            if state["netns"] or state["links"] or state["table"] or state["dirs"]:
                raise AssertionError(f"left behind by {cls.__name__}: {state}")

    def setUp(self):
        if WORLD.aborted:
            self.skipTest(f"aborted: {WORLD.aborted}")

    def sandbox(self):
        type(self).count += 1
        return self.SANDBOX(self.daemon, f"{type(self).__name__.lower()}-{type(self).count}")

    def assertReached(self, result, addr):
        code, text = result
        self.assertEqual(code, 0, text)
        self.assertIn(f"hello from {addr}", text)

    def assertBlocked(self, result):
        code, text = result
        self.assertNotEqual(code, 0, f"reached: {text}")
        self.assertNotIn("hello from", text)


class DefaultPolicy(NetTest):
    """No VM_DEST_* or VM_DNS_*: the internet yes; metadata, private, the host no."""

    HOST = W.LINK_HOST  # the API on an address a sandbox could otherwise reach

    def test_network_inside(self):
        sb = self.sandbox()
        code, text, _ = sb.exec("ip -4 addr; ip -4 route; cat /proc/sys/net/ipv6/conf/all/disable_ipv6")
        self.assertEqual(code, 0, text)
        self.assertIn(f"inet {sb.address}/31", text)
        self.assertIn(f"default via {sb.gateway} dev eth0", text)
        self.assertEqual(text.strip().splitlines()[-1], "1", "IPv6 is not disabled")
        self.assertIn(f"inet {sb.resolver}/32", text)
        # The daemon says so: in /health and in the session object.
        st, _, health = self.daemon.get("/health")
        self.assertEqual(health.get("network"), {"enabled": True}, health)
        st, _, listing = self.daemon.get("/exec")
        mine = [x for x in listing.get("sessions", []) if x.get("id") == sb.sid]
        self.assertEqual([x.get("network") for x in mine], ["on"], listing)

    def test_reaches_internet_by_address(self):
        sb = self.sandbox()
        self.assertReached(sb.fetch(f"http://{W.WEB}/", W.WEB), W.WEB)

    def test_resolves_names(self):
        sb = self.sandbox()
        code, text = sb.lookup("web.test.example")
        self.assertEqual(code, 0, text)
        self.assertIn(W.WEB, text)
        code, text = sb.lookup("nosuch.test.example")
        self.assertIn("NXDOMAIN", text)

    def test_reaches_internet_by_name(self):
        sb = self.sandbox()
        self.assertTrue(sb.resolv_conf_ok(), "the sandbox's /etc/resolv.conf is not the one "
                        "net_resolv_conf_path() names")
        self.assertReached(sb.fetch("http://web.test.example/", W.WEB), W.WEB)

    def test_metadata_blocked(self):
        sb = self.sandbox()
        self.assertBlocked(sb.fetch(f"http://{W.METADATA}/", W.METADATA))

    def test_private_blocked(self):
        sb = self.sandbox()
        self.assertBlocked(sb.fetch(f"http://{W.PRIVATE}/", W.PRIVATE))

    def test_host_api_blocked(self):
        sb = self.sandbox()
        # The daemon answers there, from the host...
        st, _, _ = self.daemon.get("/health")
        self.assertEqual(st, 200)
        # ...but not to the sandbox.
        code, text = sb.fetch(f"http://{W.LINK_HOST}:{self.daemon.port}/health", W.LINK_HOST,
                              expect="host")
        self.assertNotEqual(code, 0, text)
        self.assertNotIn("status", text)

    def test_other_sandboxes_blocked(self):
        a, b = self.sandbox(), self.sandbox()
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            # b listens (until someone connects, or 15 s)...
            listener = pool.submit(b.exec, "timeout 15 nc -l -p 8080 -e echo hi-from-b")
            harness.wait_until(lambda: ":8080 " in W.run("ss", "-ltnH", ns=b.netns), 30,
                               what="the listener in the second sandbox")
            # ...a may not connect to it, though they are on the same host...
            code, text, _ = a.exec(f"timeout 3 nc {b.address} 8080 </dev/null 2>&1")
            self.assertNotIn("hi-from-b", text)
            # ...while the host can: the listener was there all along.
            self.assertIn(b"hi-from-b", host_read(b.address, 8080))
            listener.result(20)


def qemu_missing():
    """Why a qemu sandbox cannot run here, or None."""
    artifacts = os.environ.get("FIRECRACKER_ARTIFACTS_DIR") or harness.DEFAULT_ARTIFACTS
    if not any(os.access(os.path.join(d, "qemu-system-x86_64"), os.X_OK)
               for d in os.environ.get("PATH", "").split(":") + ["/usr/bin", "/usr/local/bin"]):
        return "qemu-system-x86_64 is not installed"
    if not os.path.isfile(os.path.join(artifacts, "vmlinux")):
        return f"no guest kernel at {artifacts}/vmlinux"
    if not os.path.isfile(os.path.join(artifacts, "templates", TEMPLATE, "rootfs.ext4")):
        return f"no {artifacts}/templates/{TEMPLATE}/rootfs.ext4"
    return None


@runner.tag("vm")
class QemuVm(NetTest):
    """The qemu driver: a restored clone configures eth0 from the resume message and reaches
    the internet through tap0, by address and by name; metadata stays blocked."""

    DRIVER = "qemu"
    SANDBOX = VmSandbox

    @classmethod
    def setUpClass(cls):
        # QEMU is installed, the kernel and the base template's image built, by `make test`.
        why = qemu_missing()
        if why:
            raise AssertionError(why)
        super().setUpClass()

    def test_guest_network(self):
        sb = self.sandbox()
        code, text, _ = sb.exec("ip -4 addr show dev eth0; ip -4 route; cat /etc/resolv.conf")
        self.assertEqual(code, 0, text)
        self.assertIn(f"inet {sb.guest}/31", text)
        self.assertIn(f"default via {sb.tap_addr} dev eth0", text)
        self.assertIn(f"nameserver {sb.tap_addr}", text)
        # Two clones of one snapshot, two addresses.
        other = self.sandbox()
        self.assertNotEqual(other.guest, sb.guest)
        code, text, _ = other.exec("ip -4 addr show dev eth0")
        self.assertIn(f"inet {other.guest}/31", text)

    def test_reaches_internet_by_address(self):
        sb = self.sandbox()
        self.assertReached(sb.fetch(f"http://{W.WEB}/", W.WEB), W.WEB)

    def test_reaches_internet_by_name(self):
        sb = self.sandbox()
        self.assertReached(sb.fetch("http://web.test.example/", W.WEB), W.WEB)

    def test_metadata_blocked(self):
        sb = self.sandbox()
        self.assertBlocked(sb.fetch(f"http://{W.METADATA}/", W.METADATA))


class DnsDeny(NetTest):
    ENV = {"VM_DNS_MODE": "deny", "VM_DNS_DOMAINS": "blocked.test.example"}

    def test_denied_name_nxdomain(self):
        sb = self.sandbox()
        code, text = sb.lookup("blocked.test.example")
        self.assertIn("NXDOMAIN", text)
        self.assertNotIn(W.WEB, text)

    def test_other_names_resolve(self):
        sb = self.sandbox()
        code, text = sb.lookup("web.test.example")
        self.assertEqual(code, 0, text)
        self.assertIn(W.WEB, text)

    def test_other_resolvers_blocked(self):
        # Filtering names means nothing if the sandbox can ask another server directly.
        sb = self.sandbox()
        code, text = sb.lookup("blocked.test.example", server=W.DNS)
        self.assertNotIn(W.WEB, text)
        self.assertNotEqual(code, 0, text)


class DnsAllow(NetTest):
    ENV = {"VM_DNS_MODE": "allow", "VM_DNS_DOMAINS": "web.test.example,*.allowed.example"}

    def test_unlisted_name_nxdomain(self):
        sb = self.sandbox()
        code, text = sb.lookup("other.test.example")
        self.assertIn("NXDOMAIN", text)

    def test_never_resolved_address_blocked(self):
        sb = self.sandbox()
        self.assertBlocked(sb.fetch(f"http://{W.WEB2}/", W.WEB2))

    def test_address_reachable_once_resolved(self):
        sb = self.sandbox()
        self.assertBlocked(sb.fetch(f"http://{W.WEB}/", W.WEB))
        code, text = sb.lookup("web.test.example")
        self.assertIn(W.WEB, text)
        self.assertReached(sb.fetch(f"http://{W.WEB}/", W.WEB), W.WEB)
        # Per sandbox: another one has not resolved it.
        other = self.sandbox()
        self.assertBlocked(other.fetch(f"http://{W.WEB}/", W.WEB))

    def test_wildcard(self):
        sb = self.sandbox()
        code, text = sb.lookup("x.allowed.example")
        self.assertEqual(code, 0, text)
        self.assertIn(W.WEB, text)
        code, text = sb.lookup("allowed.example")
        self.assertIn("NXDOMAIN", text)

    def test_by_name(self):
        sb = self.sandbox()
        self.assertTrue(sb.resolv_conf_ok(), "the sandbox's /etc/resolv.conf is not mounted by "
                        "the driver")
        self.assertReached(sb.fetch("http://web.test.example/", W.WEB), W.WEB)


class DestAllow(NetTest):
    """An allow list opens a private range, and closes everything else."""

    ENV = {"VM_DEST_MODE": "allow", "VM_DEST_RULES": "10.99.0.0/24:80/tcp"}

    def test_private_reachable_when_allowed(self):
        sb = self.sandbox()
        self.assertReached(sb.fetch(f"http://{W.PRIVATE}/", W.PRIVATE), W.PRIVATE)

    def test_metadata_still_blocked(self):
        sb = self.sandbox()
        self.assertBlocked(sb.fetch(f"http://{W.METADATA}/", W.METADATA))

    def test_unlisted_blocked(self):
        sb = self.sandbox()
        self.assertBlocked(sb.fetch(f"http://{W.WEB}/", W.WEB))


class DestDeny(NetTest):
    ENV = {"VM_DEST_MODE": "deny", "VM_DEST_RULES": f"{W.WEB2}/32:80/tcp,169.254.0.0/16"}

    def test_denied_blocked_others_reached(self):
        sb = self.sandbox()
        self.assertBlocked(sb.fetch(f"http://{W.WEB2}/", W.WEB2))
        self.assertReached(sb.fetch(f"http://{W.WEB}/", W.WEB), W.WEB)
        self.assertBlocked(sb.fetch(f"http://{W.PRIVATE}/", W.PRIVATE))


class Bandwidth(NetTest):
    RATE_KBIT = 8000
    ENV = {"VM_BW_ENABLED": "true", "VM_BW_RATE_KBIT": str(RATE_KBIT), "VM_BW_BURST_KBIT": "256"}
    BYTES = 2500000  # 2.5 s at the rate

    def measure(self, sb, command):
        base = sb.exec("true")[2]
        code, text, secs = sb.exec(command, timeout_ms=60000)
        self.assertEqual(code, 0, text)
        secs -= base
        return self.BYTES * 8 / 1000 / secs

    def test_download_rate(self):
        sb = self.sandbox()
        WORLD.route_check(sb, W.WEB)
        kbit = self.measure(sb, f"wget -q -O /dev/null http://{W.WEB}/bytes/{self.BYTES}")
        print(f"download: {kbit:.0f} kbit/s with a limit of {self.RATE_KBIT}", file=sys.stderr)
        self.assertLess(abs(kbit - self.RATE_KBIT) / self.RATE_KBIT, 0.30)

    def test_upload_rate(self):
        sb = self.sandbox()
        WORLD.route_check(sb, W.WEB)
        kbit = self.measure(sb, f"head -c {self.BYTES} /dev/zero | nc {W.WEB} {W.SINK_PORT}")
        print(f"upload: {kbit:.0f} kbit/s with a limit of {self.RATE_KBIT}", file=sys.stderr)
        self.assertLess(abs(kbit - self.RATE_KBIT) / self.RATE_KBIT, 0.30)


class StartFailure(unittest.TestCase):
    """A daemon that set networking up and then cannot start (its port is taken) undoes it:
    no table of ours stays in nftables, and the next daemon gets the networking lock."""

    def env(self, **more):
        return {
            "AUTH_ENABLED": "false",
            "SANDBOX_DEFAULT_TEMPLATE": TEMPLATE,
            "SANDBOX_WARM_POOL": "0",
            "SANDBOX_NETWORK": "on",
            "SANDBOX_NET_POOL": W.POOL,
            "VM_DNS_UPSTREAM": W.DNS,
            **more,
        }

    def setUp(self):
        if WORLD is None or WORLD.aborted:
            self.skipTest(WORLD.aborted if WORLD else "no test world")

    def test_a_daemon_that_cannot_listen_leaves_no_network_behind(self):
        taken = socket.socket()
        self.addCleanup(taken.close)
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        d = harness.Daemon(env=self.env(PORT=str(port)), driver_name="jail")
        with self.assertRaises(AssertionError) as failed:
            d.start()
        self.addCleanup(shutil.rmtree, d.tmp, True)  # a failed start keeps its files
        self.assertIn("exited with status 1", str(failed.exception))
        self.assertIn("sandbox networking on", d.stderr())  # it had got that far
        self.assertNotIn("Sanitizer", d.stderr())  # and freed what it had made
        state = host_state()
        self.assertFalse(state["table"], f"our nftables table was left: {state}")
        self.assertEqual(state["netns"], [], state)
        # The lock is free: a daemon with networking on starts, and it is clean too.
        ok = harness.Daemon(env=self.env(), driver_name="jail")
        ok.start()
        ok.stop()
        self.assertFalse(host_state()["table"])


class Churn(NetTest):
    """Many sessions made and destroyed leave nothing of their networks behind."""

    ENV = {"SANDBOX_MAX_SESSIONS": "64", "VM_DNS_MODE": "allow",
           "VM_DNS_DOMAINS": "web.test.example"}
    SESSIONS = 200

    def sockets(self):
        pid = self.daemon.proc.pid
        n = 0
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                n += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
            except OSError:
                pass
        return n

    def test_200_sessions_leave_nothing(self):
        warm = self.sandbox()  # one first, so that lazily made sockets exist already
        st, _, _ = self.daemon.request("DELETE", f"/exec/{warm.sid}")
        self.assertIn(st, (200, 204))
        harness.wait_until(lambda: not host_state()["netns"], 30, what="the first sandbox to go")
        before = self.sockets()

        lookup = ("nslookup web.test.example $(ip -4 addr show lo | awk '/inet / && "
                  "!/127.0.0.1/ {split($2, a, \"/\"); print a[1]}') >/dev/null 2>&1; true")

        def one(i):
            sid = f"churn-{i}"
            # Half of them resolve a name, so that allowed addresses come and go too.
            st, _, body = self.daemon.post(f"/exec/{sid}/execute",
                                           body={"command": lookup if i % 2 else "true"})
            if st != 200:
                return f"{sid}: {st} {body}"
            st, _, body = self.daemon.request("DELETE", f"/exec/{sid}")
            return None if st in (200, 204) else f"{sid}: delete {st} {body}"

        t0 = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            errors = [e for e in pool.map(one, range(self.SESSIONS)) if e]
        self.assertEqual(errors, [])
        secs = time.monotonic() - t0
        print(f"{self.SESSIONS} sessions made and destroyed in {secs:.1f} s", file=sys.stderr)
        harness.wait_until(lambda: not host_state()["netns"] and not host_state()["links"], 30,
                           what="every sandbox network to go")
        state = host_state()
        self.assertEqual(state["netns"], [])
        self.assertEqual(state["links"], [])
        self.assertEqual(state["dirs"], [])
        egress = json.loads(W.run("nft", "-j", "list", "map", "inet", "agent_sandbox", "egress"))
        elems = [o["map"].get("elem", []) for o in egress["nftables"] if "map" in o]
        self.assertEqual(elems, [[]])
        allowed = W.run("nft", "list", "set", "inet", "agent_sandbox", "dns_allowed")
        self.assertNotIn("as-", allowed)
        chains = W.run("nft", "list", "table", "inet", "agent_sandbox")
        self.assertEqual(len(re.findall(r"chain pol_", chains)), 1, chains)
        self.assertEqual(self.sockets(), before)
        st, _, body = self.daemon.get("/metrics")
        self.assertIn("vm_egress_policy_applied_total", body if isinstance(body, str)
                      else body.decode())


def host_read(addr, port, timeout=5):
    """What a TCP server at addr:port sends, read from the host (a sandbox's own address:
    on this machine, one hop away)."""
    import socket
    with socket.create_connection((addr, port), timeout=timeout) as c:
        data = b""
        while True:
            chunk = c.recv(4096)
            if not chunk:
                return data
            data += chunk


def main():
    # Arguments: test classes (or Class.test_method) to run instead of all of them.
    if len(sys.argv) > 1:
        suite = unittest.defaultTestLoader.loadTestsFromNames(sys.argv[1:],
                                                              sys.modules[__name__])
    else:
        suite = unittest.defaultTestLoader.loadTestsFromModule(sys.modules[__name__])

    def aborted():
        # A safety check that stopped the run is a failure whatever the tests said.
        return [f"ABORTED by a safety check: {WORLD.aborted}"] if WORLD and WORLD.aborted else []

    return runner.run(suite, late_failures=aborted)


if __name__ == "__main__":
    sys.exit(main())
