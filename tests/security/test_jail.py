"""Escapes from a jail sandbox, each a test, through the real daemon (the jail driver).

What is checked (docs/security.md says why each matters):
  - commands run under another uid than the agent and cannot signal, trace or read it, nor
    open its /proc/1/mem for writing;
  - each sandbox has a user namespace of its own, mapped to its own unprivileged host uid
    range, with the template's root-owned files still owned by root inside;
  - per-user kernel budgets (inotify instances, POSIX message queue bytes, pipe buffer pages)
    are charged to the sandbox's own host uid: one sandbox holding all of its budget leaves
    another sandbox's and the host's root's intact (at the host's default sysctls);
  - the seccomp filter is an allow list whose misses fail with ENOSYS, and socket families
    are limited (no AF_VSOCK, no NETLINK_AUDIT, no AF_ALG);
  - a uid range overlapping /etc/subuid is refused at start.

Run with `tests/integration/run.sh tests/security`. The budget tests need the python
template (templates/build.sh python); without it they are skipped, saying so."""

import ctypes
import errno
import os
import shutil
import socket
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import harness  # noqa: E402
from helpers_exec import BASE_ENV, artifacts_dir, wait_until  # noqa: E402

PYTHON = "python"
MiB = 1024 * 1024

libc = ctypes.CDLL(None, use_errno=True)


def have_template(name):
    """Whether the template is built for the jail: its image, or its rootfs directory."""
    d = os.path.join(artifacts_dir(), "templates", name)
    return os.path.isfile(os.path.join(d, "template.json")) and (
        os.path.isfile(os.path.join(d, "rootfs.ext4")) or os.path.isdir(os.path.join(d, "rootfs")))


class JailCase(unittest.TestCase):
    """One daemon for the class; sessions are made and removed by each test."""

    ENV = {}

    @classmethod
    def setUpClass(cls):
        if not have_template("base"):
            raise AssertionError("the base template is not built (make base-template)")
        env = {**BASE_ENV, "SANDBOX_DRIVER": "jail", "SANDBOX_NETWORK": "off",
               "SANDBOX_WARM_POOL": "0", **cls.ENV}
        cls.d = harness.Daemon(env=env)
        cls.d.start()
        cls.addClassCleanup(cls.d.stop)

    def session(self, template="base"):
        status, _, body = self.d.post("/exec/", {"template": template})
        self.assertEqual(status, 201, body)
        sid = body["id"]
        self.addCleanup(self.d.delete, f"/exec/{sid}")
        return sid

    def sh(self, sid, command, timeout_ms=60000, **fields):
        """Runs command with sh -c; (exit code, stdout, stderr)."""
        status, _, body = self.d.post(f"/exec/{sid}/execute",
                                      {"command": command, "timeout": timeout_ms, **fields})
        self.assertEqual(status, 200, body)
        out = "".join(o["data"] for o in body["output"] if o["stream"] == "stdout")
        err = "".join(o["data"] for o in body["output"] if o["stream"] == "stderr")
        return body["exitCode"], out, err

    def ok(self, sid, command, timeout_ms=60000):
        code, out, err = self.sh(sid, command, timeout_ms)
        self.assertEqual(code, 0, f"`{command}` failed: {out}{err}")
        return out

    def py(self, sid, script, timeout_ms=60000):
        """Runs a python3 script in the sandbox (python template); its stdout."""
        path = "t.py"
        status, _, body = self.d.post(f"/exec/{sid}/write", {"path": path, "content": script})
        self.assertEqual(status, 200, body)
        return self.ok(sid, f"python3 {path}", timeout_ms)

    def alive(self, sid):
        self.assertEqual(self.ok(sid, "echo alive"), "alive\n")


class AgentOutOfReachTest(JailCase):
    """The agent (PID 1) against the commands it runs."""

    def test_commands_run_as_another_uid_than_the_agent(self):
        sid = self.session()
        agent = self.ok(sid, "awk '/^Uid:/ {print $2}' /proc/1/status").strip()
        mine = self.ok(sid, "id -u").strip()
        self.assertEqual(agent, "0")
        self.assertNotEqual(mine, agent)
        # No capability at all: CapEff of the command is zero.
        self.assertIn("CapEff:\t0000000000000000", self.ok(sid, "cat /proc/self/status"))

    def test_agent_mem_cannot_be_opened_for_writing(self):
        sid = self.session()
        code, _, err = self.sh(sid, "exec 3>/proc/1/mem")
        self.assertNotEqual(code, 0, "a command opened the agent's memory for writing")
        code, _, _ = self.sh(sid, "exec 3</proc/1/mem")
        self.assertNotEqual(code, 0, "a command opened the agent's memory for reading")
        self.alive(sid)

    def test_agent_cannot_be_signalled(self):
        sid = self.session()
        for sig in ("TERM", "INT", "HUP", "STOP", "KILL"):
            code, _, _ = self.sh(sid, f"kill -{sig} 1")
            self.assertNotEqual(code, 0, f"SIGTERM{sig} reached the agent")
        self.alive(sid)

    def test_root_inside_cannot_stop_the_agent_with_a_signal(self):
        """A command run as root inside ("user": "root") may signal PID 1: the signals the
        agent handles (the kernel drops the others for a namespace's init) come from a
        process of the sandbox, and the agent obeys a stop only from the host or the
        kernel."""
        sid = self.session()
        code, out, err = self.sh(sid, "for s in TERM INT HUP CHLD PIPE USR1 USR2 ALRM; do "
                                 "kill -$s 1 || exit 1; done; sleep 0.5; echo sent",
                                 user="root")
        self.assertEqual((code, out), (0, "sent\n"), err)
        self.alive(sid)
        # Its commands go on running as before.
        self.assertEqual(self.ok(sid, "sleep 0.2; echo still"), "still\n")

    def test_an_agent_made_the_oom_victim_ends_its_session_saying_so(self):
        """Root inside can make the agent the first victim of the sandbox's OOM killer
        (/proc/1/oom_score_adj may be raised without privilege): only its own session
        suffers, and its end is reported as what it was, not as a bare lost connection."""
        status, _, body = self.d.post("/exec/", {"template": "base",
                                                 "resources": {"memoryBytes": 64 * MiB}})
        self.assertEqual(status, 201, body)
        sid = body["id"]
        self.addCleanup(self.d.delete, f"/exec/{sid}")
        other = self.session()
        # Four processes growing together, each a smaller victim than the agent is once its
        # score is raised (after they were started: a child inherits its parent's).
        status, _, body = self.d.post(f"/exec/{sid}/execute", {
            "command": "for i in 1 2 3 4; do (sleep 0.5; x=0123456789; while :; do x=$x$x; "
                       "done) & done; echo 1000 > /proc/1/oom_score_adj; wait",
            "user": "root", "timeout": 60000}, timeout=120)
        self.assertEqual(status, 502, body)
        self.assertIn("out of memory", body.get("error", ""), body)
        status, _, body = self.d.post(f"/exec/{sid}/execute", {"command": "true"})
        self.assertEqual(status, 502, body)
        self.assertIn("agent", body.get("error", ""), body)
        self.assertIn("out of memory", body.get("error", ""), body)
        self.alive(other)

    def test_a_command_cannot_fake_an_oom_kill(self):
        """The OOM killer's line written to the console or the kernel's log by root inside
        is no OOM kill: the jail counts them in the sandbox's cgroup, on the host."""
        sid = self.session()
        line = "Memory cgroup out of memory: Killed process 2 (x) total-vm:1kB"
        status, _, body = self.d.post(f"/exec/{sid}/execute", {
            "command": f"for f in /dev/console /dev/kmsg /dev/tty0; do "
                       f"echo '{line}' > $f 2>/dev/null; done; kill -9 $$",
            "user": "root"})
        self.assertEqual(status, 200, body)
        self.assertEqual(body.get("signal"), "SIGKILL", body)
        self.assertNotIn("oomKilled", body)

    def test_agent_proc_files_are_closed_to_commands(self):
        sid = self.session()
        for path in ("/proc/1/maps", "/proc/1/environ", "/proc/1/fd/3", "/proc/1/root/"):
            code, _, _ = self.sh(sid, f"ls -l {path} && cat {path} > /dev/null")
            self.assertNotEqual(code, 0, f"a command read {path}")
        # The agent's socket is reachable through no path: its fd is not listed either.
        code, out, _ = self.sh(sid, "ls /proc/1/fd")
        self.assertNotEqual(code, 0, out)

    def test_files_written_through_the_api_belong_to_the_command_user(self):
        sid = self.session()
        status, _, body = self.d.post(f"/exec/{sid}/write", {"path": "a.txt", "content": "x"})
        self.assertEqual(status, 200, body)
        owner = self.ok(sid, "stat -c %u a.txt").strip()
        self.assertEqual(owner, self.ok(sid, "id -u").strip())
        self.assertNotEqual(owner, "0", "commands and the API's files are root's")
        self.ok(sid, "echo more >> a.txt")


class UserNamespaceTest(JailCase):
    """Each sandbox's own user namespace and host uid range."""

    def uid_map(self, sid):
        fields = self.ok(sid, "cat /proc/self/uid_map").split()
        return int(fields[0]), int(fields[1]), int(fields[2])

    def test_root_inside_is_an_unprivileged_host_uid(self):
        sid = self.session()
        inside, outside, count = self.uid_map(sid)
        self.assertEqual((inside, count), (0, 65536))
        self.assertGreaterEqual(outside, 65536, "root inside is a low host uid")
        self.assertEqual(self.ok(sid, "cat /proc/self/gid_map").split()[:3],
                         ["0", str(outside), "65536"])

    def test_each_sandbox_has_its_own_range(self):
        a, b = self.session(), self.session()
        self.assertNotEqual(self.uid_map(a)[1], self.uid_map(b)[1])

    def test_rootfs_is_owned_by_root_inside_and_read_only(self):
        sid = self.session()
        # Root inside is not the host's root, yet the template's files are root's.
        self.assertNotEqual(self.uid_map(sid)[1], 0)
        self.assertEqual(self.ok(sid, "stat -c %u:%g /bin/busybox /etc").split(),
                         ["0:0", "0:0"])
        code, _, _ = self.sh(sid, "touch /bin/x")
        self.assertNotEqual(code, 0)


    def test_no_host_path_in_mountinfo(self):
        # The rootfs is the template's image, a filesystem of its own ("/" of a loop
        # device), not a bind of a host directory whose path would show.
        sid = self.session()
        info = self.ok(sid, "cat /proc/self/mountinfo")
        roots = {line.split()[4]: line.split()[3] for line in info.splitlines()}
        self.assertEqual(roots["/"], "/", info)
        for host_path in (artifacts_dir(), self.d.tmp, "agent-sandbox"):
            self.assertNotIn(host_path, info)


    def test_the_shared_sysfs_is_read_only_even_to_root(self):
        # Every sandbox's /sys is a clone of one sysfs (jail_userns.c): root inside may not
        # write it, remount it writable, or change what another sandbox sees through it.
        a, b = self.session(), self.session()
        for command in ("echo 1 > /sys/kernel/mm/ksm/run", "mount -o remount,rw /sys",
                        "touch /sys/x"):
            status, _, body = self.d.post(f"/exec/{a}/execute",
                                          {"command": command, "user": "root"})
            self.assertEqual(status, 200, body)
            self.assertNotEqual(body["exitCode"], 0, command)
        self.d.post(f"/exec/{a}/execute", {"command": "umount -l /sys", "user": "root"})
        self.assertEqual(self.ok(b, "ls /sys/class/net | wc -l").strip(), "0")
        self.assertEqual(self.ok(b, "awk '$5 == \"/sys\"' /proc/self/mountinfo | wc -l").strip(),
                         "1")

    def test_no_core_dump_leaves_a_sandbox(self):
        # 1 byte: no core file, and the kernel aborts a dump to a pipe (the host's
        # core_pattern, run as root on the host) instead of running it. Not to be raised.
        sid = self.session()
        limits = self.ok(sid, "grep 'Max core file size' /proc/self/limits")
        self.assertEqual(limits.split()[4:6], ["1", "1"], limits)
        code, _, _ = self.sh(sid, "ulimit -H -c unlimited")
        self.assertNotEqual(code, 0)

    def test_network_sysctls_of_the_command_user(self):
        # Written through the sandbox's own procfs (jail_plan.c): low ports and ping for the
        # command user, in this sandbox's network namespace; the host's stay as they were.
        path = "/proc/sys/net/ipv4/ip_unprivileged_port_start"
        with open(path) as f:
            before = f.read()
        sid = self.session()
        self.assertEqual(self.ok(sid, f"cat {path}"), "0\n")
        with open(path) as f:
            self.assertEqual(f.read(), before)


class SeccompTest(JailCase):
    """The allow list: what is not on it fails with ENOSYS; socket families are limited."""

    def test_unlisted_system_calls_fail_with_enosys(self):
        sid = self.session()
        # busybox's mount and umount report the errno of their system call.
        for cmd in ("mount -t tmpfs none /tmp", "umount /proc"):
            _, _, err = self.sh(sid, cmd)
            self.assertIn("Function not implemented", err, cmd)

    @unittest.skipUnless(have_template(PYTHON), "the python template is not built")
    def test_socket_families(self):
        sid = self.session(PYTHON)
        out = self.py(sid, f"""
import errno, socket
def probe(*args):
    try:
        socket.socket(*args).close()
        return "ok"
    except OSError as e:
        return errno.errorcode[e.errno]
print("unix", probe(socket.AF_UNIX, socket.SOCK_STREAM))
print("inet", probe(socket.AF_INET, socket.SOCK_STREAM))
print("inet6", probe(socket.AF_INET6, socket.SOCK_DGRAM))
print("route", probe(socket.AF_NETLINK, socket.SOCK_RAW, 0))
print("audit", probe(socket.AF_NETLINK, socket.SOCK_RAW, 9))
print("vsock", probe(40, socket.SOCK_STREAM))
print("alg", probe(38, socket.SOCK_SEQPACKET))
print("packet", probe(17, socket.SOCK_RAW))
""")
        got = dict(line.split() for line in out.splitlines())
        self.assertEqual(got, {"unix": "ok", "inet": "ok", "inet6": "ok", "route": "ok",
                               "audit": "EPROTONOSUPPORT", "vsock": "EAFNOSUPPORT",
                               "alg": "EAFNOSUPPORT", "packet": "EAFNOSUPPORT"})

    @unittest.skipUnless(have_template(PYTHON), "the python template is not built")
    def test_ptrace_io_uring_and_native_aio_fail_with_enosys(self):
        sid = self.session(PYTHON)
        out = self.py(sid, """
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
ctx = ctypes.c_ulong(0)
for name, nr, args in (("ptrace", 101, (16, 1, 0, 0)), ("io_uring_setup", 425, (8, 0)),
                       ("io_setup", 206, (8, ctypes.byref(ctx))),
                       ("bpf", 321, (0, 0, 0)), ("keyctl", 250, (0, 0)),
                       ("clone3", 435, (0, 0))):
    r = libc.syscall(nr, *args)
    print(name, r, errno.errorcode.get(ctypes.get_errno(), "0") if r < 0 else "0")
""")
        for line in out.splitlines():
            name, r, e = line.split()
            self.assertEqual((r, e), ("-1", "ENOSYS"), name)


@unittest.skipUnless(have_template(PYTHON), "the python template is not built")
class BudgetTest(JailCase):
    """Sandbox A holds as much of a per-user budget as it can; sandbox B and the host's root
    still get theirs. The host's sysctls stay as they are."""

    # Each prints "held N" once it holds all it can, then keeps it until killed.
    HOLD = {
        "inotify": """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
fds = []
while len(fds) < 100000:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    fds.append(fd)
""",
        "mqueue": """
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
fds = []
while len(fds) < 100000:
    fd = libc.mq_open(b"/q%d" % len(fds), os.O_CREAT | os.O_RDWR, 0o600, None)
    if fd < 0:
        break
    fds.append(fd)
""",
        "pipe": """
import fcntl, os, sys, time
F_SETPIPE_SZ = 1031
fds = []
while len(fds) < 100000:
    r, w = os.pipe()
    try:
        fcntl.fcntl(w, F_SETPIPE_SZ, 1 << 20)
    except OSError:
        break
    fds.append((r, w))
""",
    }
    HOLD_END = """
with open("held", "w") as f:
    f.write("held %d\\n" % len(fds))
time.sleep(600)
"""
    # Prints "got" when one more of the resource can be had, else "denied <errno>".
    PROBE = {
        "inotify": """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
fd = libc.inotify_init1(0)
print("got" if fd >= 0 else "denied %d" % ctypes.get_errno())
""",
        "mqueue": """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
name = b"/probe-%d" % os.getpid()
fd = libc.mq_open(name, os.O_CREAT | os.O_RDWR, 0o600, None)
print("got" if fd >= 0 else "denied %d" % ctypes.get_errno())
if fd >= 0:
    libc.mq_unlink(name)
""",
        "pipe": """
import fcntl, os
r, w = os.pipe()
try:
    fcntl.fcntl(w, 1031, 1 << 20)
    print("got")
except OSError as e:
    print("denied %d" % e.errno)
""",
    }

    def host_probe(self, kind):
        """The probe, run by the host's root (this test process) in a child."""
        import subprocess
        r = subprocess.run([sys.executable, "-c", self.PROBE[kind]], capture_output=True,
                           text=True, timeout=60)
        return r.stdout.strip()

    def check(self, kind):
        a, b = self.session(PYTHON), self.session(PYTHON)
        status, _, body = self.d.post(f"/exec/{a}/write",
                                      {"path": "hold.py",
                                       "content": self.HOLD[kind] + self.HOLD_END})
        self.assertEqual(status, 200, body)
        self.ok(a, "python3 hold.py > /dev/null 2>&1 &")
        held = wait_until(lambda: self.sh(a, "cat held 2>/dev/null")[1], timeout=60,
                          what=f"sandbox A to hold its {kind} budget")
        self.assertGreater(int(held.split()[1]), 0, held)
        # Released when the test ends, whatever happens: A's processes go with A.
        self.assertEqual(self.py(b, self.PROBE[kind]).strip(), "got",
                         f"sandbox B got no {kind} while A holds {held}")
        self.assertEqual(self.host_probe(kind), "got",
                         f"the host's root got no {kind} while A holds {held}")

    def test_inotify_instances(self):
        self.check("inotify")

    def test_posix_message_queues(self):
        self.check("mqueue")

    def test_pipe_buffer_pages(self):
        self.check("pipe")


class TcpMemoryTest(JailCase):
    """A sandbox's TCP buffers count against its memory: on cgroup v2 inside memory.max, on
    v1 against a limit of their own (a quarter of the memory limit), without which they would
    take what the host-wide tcp_mem allows."""

    FILL = """
import socket, time
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(128)
port = srv.getsockname()[1]
conns = []
for i in range(60):
    c = socket.create_connection(("127.0.0.1", port))
    a, _ = srv.accept()
    c.setblocking(False)
    conns.append((c, a))
chunk = b"x" * 65536
total, idle, end = 0, 0, time.monotonic() + 30
while idle < 3 and time.monotonic() < end:
    before = total
    for c, _ in conns:
        while True:
            try:
                total += c.send(chunk)
            except (BlockingIOError, OSError):
                break
    idle = idle + 1 if total == before else 0
    time.sleep(0.2)
print(total)
"""

    def test_socket_buffers_stay_within_the_memory_limit(self):
        limit = 96 * MiB
        status, _, body = self.d.post("/exec/", {"template": PYTHON,
                                                 "resources": {"memoryBytes": limit}})
        self.assertEqual(status, 201, body)
        sid = body["id"]
        self.addCleanup(self.d.delete, f"/exec/{sid}")
        status, _, body = self.d.post(f"/exec/{sid}/write", {"path": "t.py",
                                                             "content": self.FILL})
        self.assertEqual(status, 200, body)
        code, out, err = self.sh(sid, "python3 t.py", timeout_ms=120000)
        # 60 loopback connections whose readers never read hold up to tcp_wmem + tcp_rmem
        # each (some 10 MiB): hundreds of MiB when nothing charges them to the sandbox.
        # Charged, they either stop at the limit (v1's TCP limit, memory pressure) or take
        # the sandbox to its memory limit, whose OOM killer ends the program (v2).
        if code == 0:
            queued = int(out.strip())
            self.assertGreater(queued, 0)
            self.assertLess(queued, limit, f"{queued >> 20} MiB queued in the sandbox's "
                            f"sockets with a memory limit of {limit >> 20} MiB")
        else:
            self.assertEqual(code, 137, f"{out}{err}")
        self.alive(sid)


class UidRangeConfigTest(unittest.TestCase):
    """SANDBOX_UID_BASE against /etc/subuid and /etc/subgid (files named by
    SANDBOX_SUBUID_FILE / SANDBOX_SUBGID_FILE, so that the test needs no change to /etc)."""

    def start(self, subuid, subgid="", base="1879048192"):
        tmp = tempfile.mkdtemp(prefix="subid-")
        self.addCleanup(shutil.rmtree, tmp, True)
        paths = {}
        for name, text in (("subuid", subuid), ("subgid", subgid)):
            paths[name] = os.path.join(tmp, name)
            with open(paths[name], "w", encoding="utf-8") as f:
                f.write(text)
        env = {**BASE_ENV, "SANDBOX_DRIVER": "jail", "SANDBOX_NETWORK": "off",
               "SANDBOX_WARM_POOL": "0", "SANDBOX_UID_BASE": base,
               "SANDBOX_SUBUID_FILE": paths["subuid"], "SANDBOX_SUBGID_FILE": paths["subgid"]}
        d = harness.Daemon(env=env)
        # A start that fails leaves its files for a look: these are expected to fail.
        self.addCleanup(lambda: d.tmp and shutil.rmtree(d.tmp, True))
        return d

    def test_overlap_with_subuid_is_refused(self):
        d = self.start("alice:100000:65536\nbob:1879100000:65536\n")
        with self.assertRaises(AssertionError) as ctx:
            d.start()
            d.stop()
        msg = str(ctx.exception)
        self.assertIn("overlap", msg)
        self.assertIn("bob", msg)

    def test_overlap_with_subgid_is_refused(self):
        d = self.start("", "carol:1879048192:1\n")
        with self.assertRaises(AssertionError) as ctx:
            d.start()
            d.stop()
        self.assertIn("carol", str(ctx.exception))

    def test_disjoint_ranges_start_and_are_used(self):
        d = self.start("alice:100000:65536\n", "alice:100000:65536\n", base="1073741824")
        d.start()
        self.addCleanup(d.stop)
        status, _, body = d.post("/exec/", {"template": "base"})
        self.assertEqual(status, 201, body)
        status, _, body = d.post(f"/exec/{body['id']}/execute",
                                 {"command": "cat /proc/self/uid_map"})
        self.assertEqual(status, 200, body)
        outside = int(body["output"][0]["data"].split()[1])
        self.assertTrue(1073741824 <= outside < 1073741824 + 1024 * 65536, outside)


if __name__ == "__main__":
    unittest.main()
