"""The spawner: the small process, forked by the daemon before its threads, that clones every
sandbox's first process (and every VMM and helper program) so that a creation does not copy
the daemon's page tables and descriptor table. The children stay the daemon's; when the
spawner is killed, the daemon clones them itself and nothing fails, until a new spawner
replaces it; it goes with the daemon."""

import os
import signal
import time
import unittest

import harness
from helpers_exec import joined
from test_admission import metric


def stat_of(pid):
    """(comm, state, ppid) of a process, or None when there is none."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    comm = text[text.index("(") + 1:text.rindex(")")]
    rest = text[text.rindex(")") + 2:].split()
    return comm, rest[0], int(rest[1])


def children(pid):
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = stat_of(int(name))
            if st and st[2] == pid:
                out.append((int(name), st[0]))
    return out


def spawner_of(d):
    """The daemon's spawner: its child of that name (a child the spawner has just cloned
    has the name too, until it passes its gate: the oldest is the spawner)."""
    found = [p for p, comm in children(d.proc.pid) if comm == "sandboxd-spawn"]
    return min(found, key=start_time) if found else None


def start_time(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return 0


def gone(pid):
    st = stat_of(pid)
    return st is None


def dead(pid):
    """Gone, or a zombie (a parent other than the daemon may take its time to reap it)."""
    st = stat_of(pid)
    return st is None or st[1] in "ZX"


class SpawnerTest(unittest.TestCase):
    def start(self, stop=True):
        d = harness.Daemon(env={"SANDBOX_WARM_POOL": "0", "SANDBOX_NETWORK": "off",
                                "AUTH_ENABLED": "false", "SANDBOX_DEFAULT_TEMPLATE": "base"})
        d.start()
        if stop:
            self.addCleanup(d.stop)
        return d

    def create(self, d, sid):
        status, _, body = d.post("/exec/", body={"id": sid}, timeout=60)
        self.assertEqual(status, 201, body)
        status, _, body = d.post(f"/exec/{sid}/execute", body={"command": "echo $((6*7))"})
        self.assertEqual(status, 200, body)
        self.assertEqual(body.get("exitCode"), 0, body)
        self.assertEqual(joined(body["output"], "stdout"), "42\n", body)

    def spawns(self, d, via):
        return metric(d, "process_spawns_total", f'via="{via}"') or 0

    def test_children_come_from_the_spawner_and_are_the_daemons(self):
        d = self.start()
        sp = spawner_of(d)
        self.assertIsNotNone(sp, f"no sandboxd-spawn child of {d.proc.pid}: "
                                 f"{children(d.proc.pid)}")
        before = self.spawns(d, "spawner")
        kids_before = {p for p, _ in children(d.proc.pid)}
        self.create(d, "sp-1")
        self.assertGreaterEqual(self.spawns(d, "spawner"), before + 1)
        self.assertEqual(self.spawns(d, "daemon"), 0)
        # The jail's first process is the daemon's child, not the spawner's.
        new = [p for p, _ in children(d.proc.pid) if p not in kids_before]
        self.assertTrue(new, "the sandbox's first process is not a child of the daemon")
        self.assertEqual(children(sp), [], "the spawner has children of its own")
        # Nothing of the spawner reaches the sandbox: its socket is in none of the sandbox's
        # first process's descriptors.
        sock = os.readlink(f"/proc/{sp}/fd/3")
        self.assertTrue(sock.startswith("socket:"), sock)
        for pid in new:
            held = {os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
            self.assertNotIn(sock, held, f"process {pid} holds the spawner's socket")
        # Destroyed, it is reaped by the daemon: no zombie of it left.
        status, _, body = d.delete("/exec/sp-1")
        self.assertIn(status, (200, 204), body)
        harness.wait_until(lambda: all(gone(p) for p in new), what="the sandbox's process reaped")

    def test_a_killed_spawner_costs_nothing(self):
        d = self.start()
        sp = spawner_of(d)
        self.assertIsNotNone(sp)
        os.kill(sp, signal.SIGKILL)
        harness.wait_until(lambda: (stat_of(sp) or ("", "Z"))[1] in "ZX",
                           what="the spawner dead")
        # The next creation is cloned by the daemon itself, and works.
        self.create(d, "sp-2")
        self.assertGreaterEqual(self.spawns(d, "daemon"), 1)
        # The spawner was reaped, and the daemon said why it clones by itself.
        harness.wait_until(lambda: gone(sp), what="the spawner reaped")
        self.assertIn(f"the spawner (pid {sp}) is gone", d.stderr())
        # Some seconds later a creation finds a new spawner in its place.
        time.sleep(5.5)
        via = self.spawns(d, "spawner")
        self.create(d, "sp-3")
        self.assertGreaterEqual(self.spawns(d, "spawner"), via + 1)
        sp2 = spawner_of(d)
        self.assertIsNotNone(sp2)
        self.assertNotEqual(sp2, sp)
        self.assertIn(f"a new spawner (pid {sp2}) replaces", d.stderr())
        status, _, body = d.get("/ready")
        self.assertEqual(status, 200, body)

    def test_it_goes_with_the_daemon(self):
        d = self.start()
        sp = spawner_of(d)
        self.assertIsNotNone(sp)
        d.stop()
        harness.wait_until(lambda: gone(sp), what="the spawner gone after a stop")
        # Killed outright, the daemon takes it along (PR_SET_PDEATHSIG).
        d2 = self.start(stop=False)
        self.addCleanup(d2.kill)
        sp2 = spawner_of(d2)
        self.assertIsNotNone(sp2)
        d2.kill()
        harness.wait_until(lambda: dead(sp2), what="the spawner gone with a killed daemon")
        d2._cleanup(keep=False)


if __name__ == "__main__":
    unittest.main()
