"""Named snapshots on the jail driver (docs/lifecycle.md#snapshots): POST /exec/:id/snapshot
saves a running session with a disk (its files: a jail cannot be saved whole) under a name of
its key's; POST /exec {"snapshot"} starts sessions from it as from a template; GET and DELETE
/snapshots. Refusals, ownership, the per-key limits (count and bytes), expiry, the clean-up of
what no snapshot names, and restarts (SIGTERM, SIGKILL, SIGKILL in the middle of a save).
Snapshots of VMs, memory included, are tested on qemu (tests/e2e/test_qemu_lifecycle.py)."""

import glob
import os
import shutil
import signal
import threading
import time
import unittest

import helpers_exec
from helpers_exec import BASE_ENV, DaemonTestCase, joined, wait_until

ENV = {**BASE_ENV, "AUTH_ENABLED": "true", "SANDBOX_WARM_POOL": "0"}


def saves(state_dir):
    return sorted(glob.glob(os.path.join(state_dir, "disks", "*.saved")))


def loops_under(state_dir):
    """Loop devices whose backing file is (was) an image of state_dir/disks."""
    import subprocess
    out = subprocess.run(["losetup", "-l", "-n", "-O", "NAME,BACK-FILE"], capture_output=True,
                         text=True, check=True).stdout
    where = os.path.join(state_dir, "disks")
    return [line.split()[0] for line in out.splitlines() if where in line]


def jail_only(cls):
    return unittest.skipUnless(os.environ.get("DRIVER", "jail") == "jail",
                               "the jail driver's snapshots (qemu's: tests/e2e)")(cls)


class SnapshotCase(DaemonTestCase):
    daemon_env = ENV

    def key(self, name, **fields):
        status, _, key = self.d.post("/admin/keys", body={"name": name, "scopes": ["exec"],
                                                          **fields})
        self.assertEqual(status, 201, key)
        return key["key"]

    def source(self, key=None, content="kept", **fields):
        status, _, body = self.d.post("/exec", body=fields, api_key=key)
        self.assertEqual(status, 201, body)
        sid = body["id"]
        self.addCleanup(self.d.delete, f"/exec/{sid}", api_key=key, timeout=30)
        status, _, out = self.d.post(f"/exec/{sid}/execute",
                                     body={"command": f"echo {content} > file"}, api_key=key)
        self.assertEqual((status, out.get("exitCode")), (200, 0), out)
        return sid

    def snapshot(self, sid, name, key=None, expect=201, **fields):
        status, headers, body = self.d.post(f"/exec/{sid}/snapshot",
                                            body={"name": name, **fields}, api_key=key,
                                            timeout=120)
        self.assertEqual(status, expect, body)
        if expect == 201:
            self.addCleanup(self.d.delete, f"/snapshots/{name}", api_key=key)
        return status, headers, body

    def from_snapshot(self, name, key=None, expect=201, **fields):
        status, headers, body = self.d.post("/exec", body={"snapshot": name, **fields},
                                            api_key=key, timeout=120)
        self.assertEqual(status, expect, body)
        if status == 201:
            self.addCleanup(self.d.delete, f"/exec/{body['id']}", api_key=key, timeout=30)
        return body

    def out(self, sid, command, key=None):
        status, _, body = self.d.post(f"/exec/{sid}/execute", body={"command": command},
                                      api_key=key)
        self.assertEqual(status, 200, body)
        return joined(body["output"], "stdout")


@jail_only
class SnapshotTest(SnapshotCase):
    def test_a_snapshot_starts_sessions_as_a_template_does(self):
        sid = self.source(env={"WHO": "source"})
        self.out(sid, "head -c 1048576 /dev/urandom > big")
        digest = self.out(sid, "sha256sum big")
        _, _, snap = self.snapshot(sid, "base-1", ttlSeconds=3600)
        self.assertEqual(snap["name"], "base-1")
        self.assertEqual(snap["session"], sid)
        self.assertEqual(snap["driver"], "jail")
        self.assertIs(snap["processesKept"], False)
        self.assertGreaterEqual(snap["sizeBytes"], 1 << 20)
        self.assertTrue(snap["createdAt"].endswith("Z") and snap["expiresAt"] > snap["createdAt"])
        status, _, listed = self.d.get("/snapshots")
        self.assertEqual(status, 200, listed)
        self.assertEqual([s["name"] for s in listed["snapshots"]], ["base-1"])
        status, _, got = self.d.get("/snapshots/base-1")
        self.assertEqual((status, got["sizeBytes"]), (200, snap["sizeBytes"]))

        a = self.from_snapshot("base-1", env={"EXTRA": "x"})
        b = self.from_snapshot("base-1", id="from-snap-b")
        self.assertEqual(b["id"], "from-snap-b")
        for s in (a, b):
            self.assertEqual((s["state"], s["snapshot"]), ("ready", "base-1"))
            self.assertEqual(self.out(s["id"], "cat file; sha256sum big"), "kept\n" + digest)
        # The snapshot's environment, and what the request adds.
        self.assertEqual(self.out(a["id"], "echo $WHO $EXTRA"), "source x\n")
        self.assertEqual(self.out(b["id"], "echo $WHO $EXTRA"), "source\n")
        # Each has a disk of its own, and so has the source.
        self.out(a["id"], "echo a > file")
        self.out(sid, "echo changed > file")
        self.assertEqual(self.out(b["id"], "cat file"), "kept\n")
        self.assertEqual(self.out(sid, "cat file"), "changed\n")
        # A snapshot made later does not change what the earlier one holds.
        self.from_snapshot("base-1", id="from-snap-c")
        self.assertEqual(self.out("from-snap-c", "cat file"), "kept\n")

        status, _, body = self.d.delete("/snapshots/base-1")
        self.assertEqual((status, body), (200, {"deleted": True, "name": "base-1"}))
        wait_until(lambda: not saves(self.d.state_dir), 30, 0.1, "its save freed")
        status, headers, body = self.d.get("/snapshots/base-1")
        self.assertJsonError(status, headers, body, 404, "not found")
        # The sessions made from it go on.
        self.assertEqual(self.out(a["id"], "cat file"), "a\n")

    def test_a_tree_deeper_than_path_max_it_takes_it_starts_sessions_from(self):
        """What a snapshot accepts, a session made from it has: a chain of directories whose
        path is twice PATH_MAX, with the new session's own ids down to its deepest file."""
        sid = self.source()
        down = "for i in $(seq 40); do cd -P " + "d" * 200 + " || exit 1; done;"
        self.out(sid, "for i in $(seq 40); do mkdir " + "d" * 200 + " && cd -P " + "d" * 200 +
                 " || exit 1; done; echo deep > f")
        self.snapshot(sid, "deep")
        s = self.from_snapshot("deep")
        self.assertEqual(self.out(s["id"], f"{down} cat f; stat -c '%u %g' f"),
                         "deep\n1000 1000\n")

    def test_refusals(self):
        sid = self.source()
        for bad in ("", "-x", ".x", "a/b", "a b", "x" * 64, "ünï"):
            status, headers, body = self.d.post(f"/exec/{sid}/snapshot", body={"name": bad})
            self.assertJsonError(status, headers, body, 400, "name")
        for bad in (None, 3, [], {}):
            status, headers, body = self.d.post(f"/exec/{sid}/snapshot", body={"name": bad})
            self.assertJsonError(status, headers, body, 400, "name")
        for bad in (0, -1, "60", 1.5, 604801):
            status, headers, body = self.d.post(f"/exec/{sid}/snapshot",
                                                body={"name": "ok", "ttlSeconds": bad})
            self.assertJsonError(status, headers, body, 400, "ttlSeconds")
        status, headers, body = self.d.post("/exec/no-such-session/snapshot",
                                            body={"name": "ok"})
        self.assertJsonError(status, headers, body, 404)
        self.snapshot(sid, "dup")
        status, headers, body = self.d.post(f"/exec/{sid}/snapshot", body={"name": "dup"})
        self.assertJsonError(status, headers, body, 409, "already exists")
        # A session from a snapshot has the snapshot's template, resources and files.
        status, headers, body = self.d.post("/exec", body={"snapshot": "nope"})
        self.assertJsonError(status, headers, body, 404, "not found")
        for extra in ({"template": "base"}, {"resources": {"memoryBytes": 268435456}},
                      {"storage": "tmpfs"}, {"volumes": [{"name": "v", "path": "/data"}]}):
            status, headers, body = self.d.post("/exec", body={"snapshot": "dup", **extra})
            self.assertJsonError(status, headers, body, 400, "snapshot")
        status, headers, body = self.d.post("/exec", body={"snapshot": 3})
        self.assertJsonError(status, headers, body, 400, "snapshot")
        # Only a running session with a disk.
        tmpfs = self.source(storage="tmpfs")
        status, headers, body = self.d.post(f"/exec/{tmpfs}/snapshot", body={"name": "t"})
        self.assertJsonError(status, headers, body, 501, "disk")
        status, _, body = self.d.post(f"/exec/{sid}/pause")
        self.assertEqual(status, 200, body)
        status, headers, body = self.d.post(f"/exec/{sid}/snapshot", body={"name": "p"})
        self.assertJsonError(status, headers, body, 409, "paused")
        status, _, listed = self.d.get("/snapshots")
        self.assertEqual([s["name"] for s in listed["snapshots"]], ["dup"])

    def test_another_key_neither_sees_nor_uses_nor_deletes_it(self):
        mine, theirs = self.key("mine"), self.key("theirs")
        sid = self.source(key=mine)
        self.snapshot(sid, "private", key=mine)
        status, _, listed = self.d.get("/snapshots", api_key=theirs)
        self.assertEqual((status, listed), (200, {"snapshots": []}))
        status, headers, body = self.d.get("/snapshots/private", api_key=theirs)
        self.assertJsonError(status, headers, body, 404)
        status, headers, body = self.d.post("/exec", body={"snapshot": "private"},
                                            api_key=theirs)
        self.assertJsonError(status, headers, body, 404)
        status, headers, body = self.d.delete("/snapshots/private", api_key=theirs)
        self.assertJsonError(status, headers, body, 404)
        status, headers, body = self.d.post(f"/exec/{sid}/snapshot", body={"name": "x"},
                                            api_key=theirs)
        self.assertJsonError(status, headers, body, 404)
        # Names are per key: theirs may have one of the same name.
        other = self.source(key=theirs, content="theirs")
        self.snapshot(other, "private", key=theirs)
        made = self.from_snapshot("private", key=theirs)
        self.assertEqual(self.out(made["id"], "cat file", key=theirs), "theirs\n")
        # An admin lists every key's, each with its owner.
        status, _, listed = self.d.get("/snapshots")
        owners = sorted(s.get("owner", "") for s in listed["snapshots"]
                        if s["name"] == "private")
        self.assertEqual(len(owners), 2, listed)
        self.assertTrue(all(owners), listed)
        status, _, mine_listed = self.d.get("/snapshots", api_key=mine)
        self.assertEqual([s["name"] for s in mine_listed["snapshots"]], ["private"])
        self.assertNotIn("owner", mine_listed["snapshots"][0])

    def test_it_expires(self):
        sid = self.source()
        self.snapshot(sid, "short", ttlSeconds=1)
        self.assertEqual(len(saves(self.d.state_dir)), 1)
        wait_until(lambda: self.d.get("/snapshots/short")[0] == 404, 30, 0.1, "it expired")
        wait_until(lambda: not saves(self.d.state_dir), 30, 0.1, "its save freed")
        status, headers, body = self.d.post("/exec", body={"snapshot": "short"})
        self.assertJsonError(status, headers, body, 404)
        self.assertTrue(any(e.get("msg") == "snapshot short expired" for e in self.d.logs()))

    def test_deleting_it_while_sessions_are_made_from_it(self):
        sid = self.source()
        self.snapshot(sid, "busy")
        results = []

        def make():
            status, _, body = self.d.post("/exec", body={"snapshot": "busy"}, timeout=120)
            results.append((status, body))
            if status == 201:
                self.addCleanup(self.d.delete, f"/exec/{body['id']}", timeout=30)
        threads = [threading.Thread(target=make) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.02)
        status, _, body = self.d.delete("/snapshots/busy")
        self.assertEqual(status, 200, body)
        for t in threads:
            t.join()
        # Each was made whole, or refused as not found; none failed half-way.
        for status, body in results:
            self.assertIn(status, (201, 404), body)
            if status == 201:
                self.assertEqual(self.out(body["id"], "cat file"), "kept\n")
        wait_until(lambda: not saves(self.d.state_dir), 30, 0.1, "its save freed")

    def test_metrics(self):
        sid = self.source()
        self.snapshot(sid, "counted")
        status, _, text = self.d.get("/metrics")
        self.assertEqual(status, 200)
        text = text.decode() if isinstance(text, bytes) else text
        self.assertIn('sandbox_snapshots{kind="count"} 1', text)
        self.assertRegex(text, r'session_pauses_total\{action="snapshot",result="success"\} '
                               r'[1-9]')
        self.assertRegex(text, r'session_pause_duration_seconds_count\{action="snapshot"\} '
                               r'[1-9]')


@jail_only
class SnapshotLimitsTest(SnapshotCase):
    daemon_env = {**ENV, "SANDBOX_KEY_MAX_SNAPSHOTS": "2",
                  "SANDBOX_KEY_MAX_SNAPSHOT_BYTES": str(24 << 20),
                  "SANDBOX_SNAPSHOT_TTL": "600"}

    def test_a_key_has_at_most_so_many(self):
        key = self.key("counted")
        sid = self.source(key=key)
        self.snapshot(sid, "one", key=key)
        self.snapshot(sid, "two", key=key)
        status, headers, body = self.d.post(f"/exec/{sid}/snapshot", body={"name": "three"},
                                            api_key=key)
        self.assertJsonError(status, headers, body, 429, "SANDBOX_KEY_MAX_SNAPSHOTS")
        # Another key has its own.
        other = self.key("other")
        self.snapshot(self.source(key=other), "three", key=other)
        status, _, body = self.d.delete("/snapshots/one", api_key=key)
        self.assertEqual(status, 200, body)
        self.snapshot(sid, "three", key=key)

    def test_and_at_most_so_many_bytes(self):
        key = self.key("bytes")
        sid = self.source(key=key)
        self.out(sid, "head -c 16777216 /dev/urandom > big", key=key)
        self.snapshot(sid, "sixteen", key=key)
        status, headers, body = self.d.post(f"/exec/{sid}/snapshot", body={"name": "again"},
                                            api_key=key)
        self.assertJsonError(status, headers, body, 429, "SANDBOX_KEY_MAX_SNAPSHOT_BYTES")
        status, _, listed = self.d.get("/snapshots", api_key=key)
        self.assertEqual([s["name"] for s in listed["snapshots"]], ["sixteen"])

    def test_the_ttl_is_at_most_the_servers(self):
        sid = self.source()
        status, headers, body = self.d.post(f"/exec/{sid}/snapshot",
                                            body={"name": "long", "ttlSeconds": 601})
        self.assertJsonError(status, headers, body, 400, "SANDBOX_SNAPSHOT_TTL")
        _, _, snap = self.snapshot(sid, "default")
        created = time.strptime(snap["createdAt"][:19], "%Y-%m-%dT%H:%M:%S")
        expires = time.strptime(snap["expiresAt"][:19], "%Y-%m-%dT%H:%M:%S")
        self.assertAlmostEqual(time.mktime(expires) - time.mktime(created), 600, delta=1)


@jail_only
class SaveGateTest(SnapshotCase):
    """Saves hold workers: with two (SANDBOX_WORKERS=2) one saves at a time, and the other
    makes sessions meanwhile; owners take turns, so one that asks for many saves at once
    holds back neither another's creations nor its saves."""
    daemon_env = {**ENV, "SANDBOX_WORKERS": "2"}

    def test_owners_take_turns_and_creations_go_on(self):
        greedy, other = self.key("greedy"), self.key("other")
        sids = [self.source(key=greedy) for _ in range(3)]
        for sid in sids:
            # Enough that each copy takes a while (the copy is synced before it is named).
            self.out(sid, "head -c 100663296 /dev/urandom > big", key=greedy)
        theirs = self.source(key=other)
        done = []

        def snap(sid, key, name):
            status, _, body = self.d.post(f"/exec/{sid}/snapshot", body={"name": name},
                                          api_key=key, timeout=300)
            done.append((name, status))
        threads = [threading.Thread(target=snap, args=(sid, greedy, f"g{i}"))
                   for i, sid in enumerate(sids)]
        for t in threads:
            t.start()
        wait_until(lambda: any("waits" in e.get("msg", "") for e in self.d.logs()), 30, 0.01,
                   "the greedy key's saves waiting")
        late = threading.Thread(target=snap, args=(theirs, other, "o0"))
        late.start()
        # A creation is not held back by the saves waiting.
        status, _, made = self.d.post("/exec", body={}, api_key=other, timeout=300)
        self.assertEqual(status, 201, made)
        self.addCleanup(self.d.delete, f"/exec/{made['id']}", api_key=other)
        created_before = len(done)
        for t in threads + [late]:
            t.join()
        self.assertEqual(sorted(done), [("g0", 201), ("g1", 201), ("g2", 201), ("o0", 201)])
        self.assertLess(created_before, 3, done)
        # The other key's save did not wait for all of the greedy key's.
        order = [n for n, _ in done]
        self.assertLess(order.index("o0"), 3, order)
        for name, key in (("g0", greedy), ("g1", greedy), ("g2", greedy), ("o0", other)):
            self.d.delete(f"/snapshots/{name}", api_key=key)
        status, _, text = self.d.get("/metrics")
        text = text.decode() if isinstance(text, bytes) else text
        self.assertIn('session_saves{state="waiting"} 0', text)


def restart(first):
    return helpers_exec.start_daemon({"SANDBOX_WARM_POOL": "0",
                                      "SANDBOX_STATE_DIR": first.state_dir,
                                      "SANDBOX_RUN_DIR": first.run_dir})


@jail_only
class SnapshotsAcrossRestartsTest(unittest.TestCase):
    def first_daemon(self):
        first = helpers_exec.start_daemon({"SANDBOX_WARM_POOL": "0"})
        self.addCleanup(shutil.rmtree, first.tmp, True)
        self.addCleanup(first.kill)
        return first

    def make(self, d, name, sid=None):
        sid = sid or f"src-{name}"
        status, _, body = d.post("/exec", body={"id": sid})
        self.assertEqual(status, 201, body)
        status, _, body = d.post(f"/exec/{sid}/execute", body={"command": f"echo {name} > file"})
        self.assertEqual(status, 200, body)
        status, _, body = d.post(f"/exec/{sid}/snapshot", body={"name": name}, timeout=120)
        self.assertEqual(status, 201, body)
        return body

    def check_makes(self, d, name):
        status, _, body = d.post("/exec", body={"snapshot": name}, timeout=120)
        self.assertEqual(status, 201, body)
        status, _, out = d.post(f"/exec/{body['id']}/execute", body={"command": "cat file"})
        self.assertEqual(joined(out["output"], "stdout"), f"{name}\n")
        d.delete(f"/exec/{body['id']}")

    def test_snapshots_survive_sigterm_and_sigkill(self):
        first = self.first_daemon()
        made = self.make(first, "kept-a")
        first.proc.send_signal(signal.SIGTERM)
        self.assertEqual(first.proc.wait(30), 0)
        first.kill()
        second = restart(first)
        self.addCleanup(second.kill)
        status, _, got = second.get("/snapshots/kept-a")
        self.assertEqual(status, 200, got)
        self.assertEqual((got["createdAt"], got["expiresAt"], got["sizeBytes"]),
                         (made["createdAt"], made["expiresAt"], made["sizeBytes"]))
        self.check_makes(second, "kept-a")
        self.make(second, "kept-b")
        second.proc.send_signal(signal.SIGKILL)
        second.proc.wait(10)
        second.kill()
        self.addCleanup(shutil.rmtree, second.tmp, True)
        third = restart(first)
        self.addCleanup(third.stop, check=False)
        status, _, listed = third.get("/snapshots")
        self.assertEqual(sorted(s["name"] for s in listed["snapshots"]), ["kept-a", "kept-b"])
        self.check_makes(third, "kept-b")
        for name in ("kept-a", "kept-b"):
            status, _, body = third.delete(f"/snapshots/{name}")
            self.assertEqual(status, 200, body)
        wait_until(lambda: not saves(first.state_dir), 30, 0.1, "the saves freed")
        third.stop()

    def test_a_start_removes_what_no_snapshot_names_and_forgets_what_is_gone(self):
        first = self.first_daemon()
        self.make(first, "real")
        self.make(first, "gone")
        first.proc.send_signal(signal.SIGTERM)
        self.assertEqual(first.proc.wait(30), 0)
        first.kill()
        # A save no row names (a crash between the save and its row), and a row whose save
        # is gone.
        orphan = os.path.join(first.state_dir, "disks", "sb-0123456789ab-fdeadbeef.saved")
        with open(orphan, "wb") as f:
            f.write(b"x" * 4096)
        self.assertEqual(len(saves(first.state_dir)), 3)
        second = restart(first)
        self.addCleanup(second.stop, check=False)
        status, _, listed = second.get("/snapshots")
        names = sorted(s["name"] for s in listed["snapshots"])
        self.assertEqual(names, ["gone", "real"])
        self.assertFalse(os.path.exists(orphan))
        second.stop()
        # One save removed behind the daemon's back: the next start forgets its snapshot.
        kept = saves(first.state_dir)
        self.assertEqual(len(kept), 2)
        os.unlink(kept[0])
        third = restart(first)
        self.addCleanup(third.stop, check=False)
        status, _, listed = third.get("/snapshots")
        self.assertEqual(len(listed["snapshots"]), 1, listed)
        self.check_makes(third, listed["snapshots"][0]["name"])
        third.stop()
        fourth = restart(first)
        self.addCleanup(fourth.stop, check=False)
        status, _, listed = fourth.get("/snapshots")
        self.assertEqual(len(listed["snapshots"]), 1, listed)
        fourth.stop()

    def test_a_disk_frozen_by_a_killed_daemon_is_thawed_at_the_next_start(self):
        import helpers_host as host
        first = self.first_daemon()
        sid = "frozen-src"
        status, _, body = first.post("/exec", body={"id": sid})
        self.assertEqual(status, 201, body)
        # Enough data that the save takes a while, and a writer that blocks while the disk
        # is frozen for it.
        status, _, body = first.post(f"/exec/{sid}/execute", body={
            "command": "head -c 268435456 /dev/urandom > big && "
                       "(while :; do echo x >> log; sleep 0.01; done) > /dev/null 2>&1 &",
            "timeout": 120000}, timeout=150)
        self.assertEqual(status, 200, body)
        sandbox = helpers_exec.sandbox_of(first, sid)
        def save():
            try:
                first.post(f"/exec/{sid}/snapshot", body={"name": "frozen"}, timeout=30)
            except OSError:
                pass  # the daemon is killed under it

        threading.Thread(target=save, daemon=True).start()

        def blocked():
            for pid in host.cgroup_pids(host.cgroup_dirs(sandbox)):
                try:
                    with open(f"/proc/{pid}/stat") as f:
                        if f.read().rsplit(")", 1)[1].split()[0] == "D":
                            return pid
                except OSError:
                    pass
            return None

        wait_until(blocked, 30, 0.01, "a writer blocked on the frozen disk")
        fp = host.Footprint()
        fp.record_sandbox(sandbox)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
        first.kill()
        second = restart(first)
        self.addCleanup(second.stop, check=False)
        # Thawed, the writers could be ended, and the sandbox left nothing.
        left = host.wait_all_gone(fp, [sandbox], timeout=30)
        self.assertEqual(left, [], "the frozen sandbox outlived the restart")
        self.assertIn("thawed its disk", second.stderr())
        second.stop()

    def test_sigkill_in_the_middle_of_saves_leaves_whole_snapshots_or_none(self):
        first = self.first_daemon()
        ids = [f"crash-{i}" for i in range(4)]
        for sid in ids:
            status, _, body = first.post("/exec", body={"id": sid})
            self.assertEqual(status, 201, body)
            status, _, body = first.post(f"/exec/{sid}/execute", body={
                "command": f"echo {sid} > file && head -c 33554432 /dev/urandom > big && "
                           "sha256sum big > sum"})
            self.assertEqual(status, 200, body)
        threads = [threading.Thread(target=lambda sid=sid: first.post(
            f"/exec/{sid}/snapshot", body={"name": f"s-{sid}"}, timeout=10)) for sid in ids]
        for t in threads:
            t.start()
        time.sleep(0.05)
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
        for t in threads:
            t.join()
        first.kill()
        second = restart(first)
        self.addCleanup(second.stop, check=False)
        status, _, listed = second.get("/snapshots")
        back = sorted(s["name"] for s in listed["snapshots"])
        # Every save left is one a snapshot that is back names; each of those is whole.
        self.assertEqual(len(saves(first.state_dir)), len(back), (back, saves(first.state_dir)))
        for name in back:
            status, _, body = second.post("/exec", body={"snapshot": name}, timeout=120)
            self.assertEqual(status, 201, body)
            status, _, out = second.post(f"/exec/{body['id']}/execute",
                                         body={"command": "cat file; sha256sum -c sum"})
            self.assertEqual(joined(out["output"], "stdout"),
                             f"{name.removeprefix('s-')}\nbig: OK\n")
            second.delete(f"/exec/{body['id']}")
            second.delete(f"/snapshots/{name}")
        wait_until(lambda: not saves(first.state_dir), 30, 0.1, "the saves freed")
        second.stop()
        # A disk frozen by a save the kill interrupted is thawed by the restart: frozen, its
        # filesystem would hold its loop device (and image) for as long as the host runs.
        wait_until(lambda: not loops_under(first.state_dir), 30, 0.1,
                   "the killed daemon's loop devices detached")
