"""Hibernation of VM sandboxes (docs/lifecycle.md): `POST /exec/:id/pause {"mode":
"hibernate"}` on the qemu driver saves the whole VM (RAM and devices) and its disk to the state
directory and ends QEMU; a resume restores it, and its processes carry on where they were
(a background counter keeps counting from its value), its files and its tmpfs as they were.
Hibernated VMs survive a daemon restart, after a SIGTERM and after a kill -9; a daemon
killed while it saves one leaves either the running session's leftovers, removed by the
restart, or a whole saved VM that resumes, never half of one.

Runs the real sandboxd with SANDBOX_DRIVER=qemu (TCG where KVM is not usable) on the base
template. Built on test_qemu's helpers."""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import harness  # noqa: E402
import test_qemu  # noqa: E402
from helpers_exec import joined, new_session_id, sandbox_of, wait_until  # noqa: E402
from test_qemu import PrivateTemplateCase, QemuCase, qemu_pids  # noqa: E402

MiB = 1024 * 1024
HIBERNATE = {"mode": "hibernate"}
DISK = {"SANDBOX_STORAGE": "disk", "SANDBOX_DISK_BYTES": str(256 * MiB)}
# Writes its count to a file of the disk's and to the tmpfs, every 20 ms.
COUNTER = ("i=0; while :; do i=$((i+1)); echo $i > /workspace/c.tmp && "
           "mv /workspace/c.tmp /workspace/count; echo $i > /dev/shm/count; sleep 0.02; done")


def saved(state_dir):
    """What the state directory keeps of VMs: saved ones, and resumed ones' disks."""
    base = os.path.join(state_dir, "qemu-saved")
    return sorted(os.listdir(base)) if os.path.isdir(base) else []


def saved_dirs(state_dir):
    return [n for n in saved(state_dir) if not n.endswith((".disk", ".rootfs"))]


class HibernateCase(QemuCase):
    def create(self, d, keep=False, **body):
        sid = new_session_id(self._testMethodName.removeprefix("test_"))
        status, _, resp = d.post("/exec/", body={"id": sid, **body}, timeout=180)
        self.assertEqual(status, 201, resp)
        if not keep:
            self.addCleanup(d.delete, f"/exec/{sid}", timeout=60)
        return sid

    def listed(self, d):
        status, _, body = d.get("/exec/")
        self.assertEqual(status, 200, body)
        return {s["id"]: s for s in body["sessions"]}

    def out(self, d, sid, command):
        status, _, body = d.post(f"/exec/{sid}/execute", body={"command": command},
                                 timeout=300)
        self.assertEqual(status, 200, body)
        self.assertEqual(body["exitCode"], 0, body)
        return joined(body["output"], "stdout").strip()

    def count(self, d, sid):
        return int(self.out(d, sid, "cat /workspace/count 2>/dev/null || echo 0") or 0)

    def start_counter(self, d, sid):
        status, _, body = d.post(f"/exec/{sid}/processes",
                                 body={"command": COUNTER, "tag": "count"}, timeout=60)
        self.assertEqual(status, 201, body)
        wait_until(lambda: self.count(d, sid) > 0, 60, 0.1, "the counter running")
        return body

    def hibernate(self, d, sid):
        t0 = time.monotonic()
        status, _, body = d.post(f"/exec/{sid}/pause", body=HIBERNATE, timeout=180)
        self.assertEqual(status, 200, body)
        took = time.monotonic() - t0
        self.assertEqual((body["state"], body["pauseMode"]), ("paused", "hibernate"), body)
        self.assertIs(body["processesKept"], True, body)
        self.assertIn("the whole VM", body["note"])
        return took

    def resume(self, d, sid):
        t0 = time.monotonic()
        status, _, body = d.post(f"/exec/{sid}/resume", timeout=180)
        self.assertEqual(status, 200, body)
        self.assertEqual(body["state"], "ready", body)
        return time.monotonic() - t0


class HibernateTest(HibernateCase):
    def test_processes_carry_on_and_files_stay(self):
        d = self.daemon(DISK)
        sid = self.create(d)
        self.out(d, sid, "echo kept > /workspace/file && echo tmp > /tmp/t && "
                         "echo root > /usr/by-root")
        self.start_counter(d, sid)
        sandbox = sandbox_of(d, sid)
        before = self.count(d, sid)
        took = self.hibernate(d, sid)
        # QEMU is gone; what is kept is a directory of the state directory.
        wait_until(lambda: not qemu_pids(sandbox), 30, 0.1, "QEMU ended")
        self.assertEqual(saved_dirs(d.state_dir), [sandbox])
        kept = os.listdir(os.path.join(d.state_dir, "qemu-saved", sandbox))
        self.assertEqual(sorted(kept), ["disk.img", "rootfs.ext4", "state.mig"])
        mine = self.listed(d)[sid]
        self.assertEqual((mine["state"], mine["pauseMode"], mine["processesKept"]),
                         ("paused", "hibernate", True))
        status, _, err = d.post(f"/exec/{sid}/execute", body={"command": "true"})
        self.assertEqual(status, 409, err)
        status, _, err = d.post(f"/exec/{sid}/pause", body=HIBERNATE)
        self.assertEqual(status, 409, err)
        resumed = self.resume(d, sid)
        print(f"\n    qemu hibernate {took * 1000:.0f} ms, resume {resumed * 1000:.0f} ms",
              file=sys.stderr)
        # Its agent was told it was restored, and counted the counter running on.
        self.assertEqual(self.listed(d)[sid]["restored"],
                         {"from": "hibernation", "session": sid, "processes": 1})
        # The same counter process, counting on from where it was.
        after = self.count(d, sid)
        self.assertGreaterEqual(after, before)
        wait_until(lambda: self.count(d, sid) > after + 5, 60, 0.1, "the counter counting on")
        status, _, procs = d.get(f"/exec/{sid}/processes")
        self.assertEqual(status, 200, procs)
        tagged = [p for p in procs["processes"] if p.get("tag") == "count"]
        self.assertEqual([p["state"] for p in tagged], ["running"], procs)
        self.assertEqual(self.out(d, sid, "cat /workspace/file /tmp/t /usr/by-root"),
                         "kept\ntmp\nroot")
        # A fresh clock: the guest's time is the host's again, not the pause's.
        guest = int(self.out(d, sid, "date +%s"))
        self.assertLess(abs(guest - time.time()), 30)
        # The resumed sandbox holds what it needs; the saved VM is gone. Its disk and its
        # template image have names while it runs (the next hibernation links them), and
        # none once it is destroyed.
        live = saved(d.state_dir)
        self.assertEqual(len(live), 2, live)
        resumed_as = live[0].removesuffix(".disk")
        self.assertNotEqual(resumed_as, sandbox)
        self.assertEqual(live, [f"{resumed_as}.disk", f"{resumed_as}.rootfs"])
        # And it hibernates again.
        self.hibernate(d, sid)
        self.assertEqual(saved(d.state_dir), [resumed_as])
        self.resume(d, sid)
        self.assertGreater(self.count(d, sid), after)
        status, _, body = d.delete(f"/exec/{sid}", timeout=60)
        self.assertEqual(status, 200, body)
        wait_until(lambda: saved(d.state_dir) == [], 30, 0.1, "the disk freed")

    def test_on_timeout_pause_saves_an_idle_vm_whole(self):
        d = self.daemon(DISK)
        sid = self.create(d, idleTimeout=2, onTimeout="pause")
        self.start_counter(d, sid)
        # A background process is no operation in flight: the session goes idle.
        wait_until(lambda: self.listed(d)[sid]["state"] == "paused", 60, 0.1,
                   "the idle timeout pausing the session")
        mine = self.listed(d)[sid]
        self.assertEqual((mine["pausedBy"], mine["pauseMode"], mine["processesKept"]),
                         ("timeout", "hibernate", True), mine)
        self.assertEqual(len(saved_dirs(d.state_dir)), 1)
        self.resume(d, sid)
        n = self.count(d, sid)
        wait_until(lambda: self.count(d, sid) > n + 3, 60, 0.1, "the counter counting on")

    def test_a_session_without_a_disk_keeps_its_tmpfs(self):
        d = self.daemon({"SANDBOX_STORAGE": "tmpfs"})
        sid = self.create(d)
        self.out(d, sid, "echo in-ram > /workspace/f")
        sandbox = sandbox_of(d, sid)
        self.hibernate(d, sid)
        self.assertEqual(saved_dirs(d.state_dir), [sandbox])
        self.assertEqual(sorted(os.listdir(os.path.join(d.state_dir, "qemu-saved", sandbox))),
                         ["rootfs.ext4", "state.mig"])
        self.resume(d, sid)
        self.assertEqual(self.out(d, sid, "cat /workspace/f"), "in-ram")

    def test_a_frozen_session_hibernates_and_a_destroy_frees_the_save(self):
        d = self.daemon(DISK)
        sid = self.create(d, keep=True)
        self.start_counter(d, sid)
        status, _, body = d.post(f"/exec/{sid}/pause", timeout=60)
        self.assertEqual((status, body.get("pauseMode")), (200, "freeze"), body)
        self.hibernate(d, sid)
        self.assertEqual(len(saved_dirs(d.state_dir)), 1)
        status, _, body = d.delete(f"/exec/{sid}", timeout=60)
        self.assertEqual(status, 200, body)
        wait_until(lambda: saved_dirs(d.state_dir) == [], 30, 0.1, "the saved VM removed")

    def test_a_session_with_volumes_is_refused_and_runs_on(self):
        d = self.daemon(DISK)
        status, _, vol = d.post("/volumes", body={"name": "hib-vol", "sizeBytes": 32 * MiB})
        self.assertEqual(status, 201, vol)
        self.addCleanup(d.delete, "/volumes/hib-vol")
        sid = self.create(d, volumes=[{"name": "hib-vol", "path": "/data"}])
        status, _, err = d.post(f"/exec/{sid}/pause", body=HIBERNATE, timeout=60)
        self.assertEqual(status, 400, err)
        self.assertIn("volumes", err["error"])
        self.assertEqual(self.out(d, sid, "echo still"), "still")
        self.assertEqual(saved_dirs(d.state_dir), [])



class HibernateAttackTest(HibernateCase):
    """What goes wrong around a hibernation: no room for the save, a destroy in the middle of
    a save or of a resume, many at once."""

    def small_state_dir(self):
        """A state directory too small for a guest's RAM: a tmpfs of its own, 24 MiB."""
        small = tempfile.mkdtemp(prefix="sandboxd-small-state-")
        self.addCleanup(os.rmdir, small)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m,mode=0700", "tmpfs", small],
                       check=True)
        self.addCleanup(subprocess.run, ["umount", "-l", small])
        return small

    def test_no_room_for_the_save_is_507_and_the_vm_runs_on(self):
        small = self.small_state_dir()
        d = self.daemon({"SANDBOX_STORAGE": "tmpfs", "SANDBOX_STATE_DIR": small})
        sid = self.create(d)
        # Guest RAM the save must hold: more than the state directory has.
        self.out(d, sid, "head -c 40000000 /dev/urandom > /workspace/big && echo ok")
        self.start_counter(d, sid)
        status, _, err = d.post(f"/exec/{sid}/pause", body=HIBERNATE, timeout=180)
        self.assertEqual(status, 507, err)
        self.assertIn("no room", err["error"])
        # As it was: running, its counter counting, its files there; nothing of the save left.
        n = self.count(d, sid)
        wait_until(lambda: self.count(d, sid) > n + 3, 60, 0.1, "the counter counting on")
        self.assertEqual(self.out(d, sid, "wc -c < /workspace/big"), "40000000")
        self.assertEqual(saved(small), [])
        self.assertEqual(self.listed(d)[sid]["state"], "ready")

    def test_e2b_pause_with_no_room_freezes_instead(self):
        small = self.small_state_dir()
        d = self.daemon({"SANDBOX_STORAGE": "tmpfs", "SANDBOX_STATE_DIR": small})
        status, _, sbx = d.post("/sandboxes", body={"templateID": "base"}, timeout=180)
        self.assertEqual(status, 201, sbx)
        sid = sbx["sandboxID"]
        self.addCleanup(d.delete, f"/sandboxes/{sid}", timeout=60)
        status, _, body = d.post(f"/sandboxes/{sid}/pause", timeout=180)
        self.assertEqual(status, 204, body)
        mine = self.listed(d)[sid]
        self.assertEqual((mine["state"], mine["pauseMode"], mine["processesKept"]),
                         ("paused", "freeze", True), mine)
        self.assertEqual(saved(small), [])
        status, _, body = d.post(f"/sandboxes/{sid}/connect", body={"timeout": 60}, timeout=60)
        self.assertEqual(status, 201, body)
        self.assertEqual(self.out(d, sid, "echo back"), "back")

    def test_a_destroy_during_the_save_or_the_resume_leaves_nothing(self):
        d = self.daemon(DISK)
        for when in ("save", "resume"):
            sid = self.create(d, keep=True)
            self.start_counter(d, sid)
            sandbox = sandbox_of(d, sid)
            if when == "resume":
                self.hibernate(d, sid)
            path = f"/exec/{sid}/pause" if when == "save" else f"/exec/{sid}/resume"
            answers = []
            t = threading.Thread(target=lambda: answers.append(
                d.post(path, body=HIBERNATE if when == "save" else None, timeout=120)))
            t.start()
            time.sleep(0.05)
            status, _, body = d.delete(f"/exec/{sid}", timeout=120)
            self.assertEqual(status, 200, body)
            t.join(120)
            self.assertIn(answers[0][0], (200, 404, 409), answers)
            wait_until(lambda: saved(d.state_dir) == [] and not qemu_pids(sandbox), 60, 0.1,
                       f"nothing left after a destroy during the {when}")
            self.assertNotIn(sid, self.listed(d))

    def test_concurrent_hibernations_and_resumes(self):
        d = self.daemon(DISK)
        sids = [self.create(d) for _ in range(3)]
        for sid in sids:
            self.out(d, sid, f"echo {sid} > /workspace/me")
        for phase in ("pause", "resume"):
            answers = {}
            threads = [threading.Thread(target=lambda sid=sid: answers.__setitem__(
                sid, d.post(f"/exec/{sid}/{phase}",
                            body=HIBERNATE if phase == "pause" else None, timeout=180)))
                       for sid in sids]
            for t in threads:
                t.start()
            for t in threads:
                t.join(180)
            self.assertEqual({sid: a[0] for sid, a in answers.items()},
                             {sid: 200 for sid in sids}, answers)
            if phase == "pause":
                self.assertEqual(len(saved_dirs(d.state_dir)), 3)
        # Each came back as itself.
        for sid in sids:
            self.assertEqual(self.out(d, sid, "cat /workspace/me"), sid)
        self.assertEqual(saved_dirs(d.state_dir), [])


class TemplateRebuiltTest(HibernateCase, PrivateTemplateCase):
    """A template rebuilt under a hibernated VM: the save keeps the image its guest runs on,
    and so does the resumed VM, for its next hibernation."""

    def test_hibernate_rebuild_resume_hibernate_resume(self):
        d = self.daemon({**DISK, **self.env})
        sid = self.create(d)
        self.out(d, sid, "echo kept > /workspace/file")
        self.start_counter(d, sid)
        rootfs = os.path.join(self.tdir, "rootfs.ext4")
        for round in range(2):
            self.hibernate(d, sid)
            # A rebuild: a new file of the same name (the old one's last name is ours).
            shutil.copy2(rootfs, rootfs + ".new")
            os.rename(rootfs + ".new", rootfs)
            self.resume(d, sid)
            n = self.count(d, sid)
            wait_until(lambda: self.count(d, sid) > n + 3, 60, 0.1,
                       f"the counter after rebuild {round + 1}")
            self.assertEqual(self.out(d, sid, "cat /workspace/file"), "kept")
        # A new session of the template runs on the new image.
        other = self.create(d)
        self.assertEqual(self.out(d, other, "echo new"), "new")


class HibernatedAcrossRestartsTest(HibernateCase):
    def restart(self, first, how):
        if how == "kill":
            first.proc.send_signal(signal.SIGKILL)
        else:
            first.proc.send_signal(signal.SIGTERM)
        first.proc.wait(60)
        return self.daemon({**DISK, "SANDBOX_STATE_DIR": first.state_dir,
                            "SANDBOX_RUN_DIR": first.run_dir})

    def first(self):
        d = harness.Daemon(env={**test_qemu.ENV, **DISK}, driver_name="qemu",
                           start_timeout=60)
        d.start()
        self.addCleanup(d._cleanup, False)
        self.addCleanup(d.kill)
        return d

    def check_across(self, how):
        first = self.first()
        sid = self.create(first, keep=True)
        self.out(first, sid, "echo kept > /workspace/file")
        self.start_counter(first, sid)
        self.hibernate(first, sid)
        # What no session keeps is removed at the start: a save a crash orphaned, the name
        # of a resumed VM's disk whose VM is gone.
        base = os.path.join(first.state_dir, "qemu-saved")
        kept = saved(first.state_dir)
        os.makedirs(os.path.join(base, "sb-0rphan000000"))
        with open(os.path.join(base, "sb-gone00000000.disk"), "w") as f:
            f.write("no VM runs on this")
        second = self.restart(first, how)
        self.assertEqual(saved(first.state_dir), kept)
        self.addCleanup(second.delete, f"/exec/{sid}", timeout=60)
        body = self.listed(second).get(sid, {})
        self.assertEqual((body.get("state"), body.get("pauseMode"), body.get("processesKept")),
                         ("paused", "hibernate", True), body)
        self.resume(second, sid)
        before = self.count(second, sid)
        self.assertGreater(before, 0)
        wait_until(lambda: self.count(second, sid) > before + 5, 60, 0.1,
                   "the counter counting on after the restart")
        self.assertEqual(self.out(second, sid, "cat /workspace/file"), "kept")

    def test_sigterm_keeps_it(self):
        self.check_across("term")

    def test_kill_9_keeps_it(self):
        self.check_across("kill")

    def test_kill_9_during_the_save_leaves_no_half_saved_vm(self):
        first = self.first()
        sid = self.create(first, keep=True)
        self.start_counter(first, sid)
        sandbox = sandbox_of(first, sid)
        # The save takes a while (all of the guest's RAM is written): kill the daemon in it.
        def pause():
            try:
                first.post(f"/exec/{sid}/pause", body=HIBERNATE, timeout=60)
            except OSError:
                pass  # the daemon is killed under it

        t = threading.Thread(target=pause, daemon=True)
        t.start()
        base = os.path.join(first.state_dir, "qemu-saved")
        wait_until(lambda: os.path.isdir(base) and os.listdir(base), 60, 0.005,
                   "the save under way")
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(30)
        second = self.restart(first, "none")
        self.addCleanup(second.delete, f"/exec/{sid}", timeout=60)
        body = self.listed(second).get(sid)
        left = saved_dirs(first.state_dir)
        if body:
            # The save was whole and recorded: it resumes, its counter counting on.
            self.assertEqual(body["pauseMode"], "hibernate", body)
            self.assertEqual(left, [sandbox])
            self.resume(second, sid)
            c = self.count(second, sid)
            wait_until(lambda: self.count(second, sid) > c, 60, 0.1, "the counter")
        else:
            # The session died with the daemon: nothing of its save is left.
            self.assertEqual(left, [])
        self.assertFalse(qemu_pids(sandbox))



class ForkTest(HibernateCase):
    """POST /exec/:id/fork: new sessions from a running VM's current state, memory included:
    the same files and the same running processes, then each its own."""

    def fork(self, d, sid, count, expect=201):
        t0 = time.monotonic()
        status, _, body = d.post(f"/exec/{sid}/fork", body={"count": count}, timeout=300)
        self.assertEqual(status, expect, body)
        if status == 201:
            print(f"\n    qemu fork of {count}: {(time.monotonic() - t0) * 1000:.0f} ms "
                  "to every fork ready", file=sys.stderr)
            for f in body["sessions"]:
                self.addCleanup(d.delete, f"/exec/{f['id']}", timeout=60)
        return body

    def test_forks_start_from_the_same_state_then_diverge(self):
        d = self.daemon(DISK)
        sid = self.create(d)
        self.out(d, sid, "echo parent > /workspace/file && echo tmp > /tmp/t")
        self.start_counter(d, sid)
        body = self.fork(d, sid, 2)
        forks = [f["id"] for f in body["sessions"]]
        self.assertEqual(len(set(forks)), 2)
        self.assertNotIn(sid, forks)
        self.assertEqual([f["state"] for f in body["sessions"]], ["ready", "ready"], body)
        # Each fork's agent was told it was restored, and counted the counter running on.
        for f in body["sessions"]:
            self.assertEqual(f["restored"], {"from": "fork", "session": sid, "processes": 1},
                             f)
        names = {f["previewName"] for f in body["sessions"]}
        self.assertEqual(len(names), 2)
        # The parent runs on, its counter counting.
        n = self.count(d, sid)
        wait_until(lambda: self.count(d, sid) > n + 3, 60, 0.1, "the parent's counter")
        for f in forks:
            self.assertEqual(self.out(d, f, "cat /workspace/file /tmp/t"), "parent\ntmp")
            # The same counter process, running on in each fork.
            status, _, procs = d.get(f"/exec/{f}/processes")
            self.assertEqual(status, 200, procs)
            tagged = [p for p in procs["processes"] if p.get("tag") == "count"]
            self.assertEqual([p["state"] for p in tagged], ["running"], procs)
            c = self.count(d, f)
            self.assertGreater(c, 0)
            wait_until(lambda f=f, c=c: self.count(d, f) > c + 3, 60, 0.1,
                       "a fork's counter counting on")
        # Each its own from now on: files, and what /dev/urandom gives.
        self.out(d, forks[0], "echo mine > /workspace/file")
        self.assertEqual(self.out(d, forks[1], "cat /workspace/file"), "parent")
        self.assertEqual(self.out(d, sid, "cat /workspace/file"), "parent")
        rnd = [self.out(d, x, "head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'")
               for x in [sid] + forks]
        self.assertEqual(len(set(rnd)), 3, rnd)
        # The save is gone once the forks are made; their disks have no name.
        self.assertEqual(saved(d.state_dir), [])
        # A fork outlives its parent, and can be forked and hibernated in turn.
        status, _, gone = d.delete(f"/exec/{sid}", timeout=60)
        self.assertEqual(status, 200, gone)
        self.assertEqual(self.out(d, forks[0], "cat /workspace/file"), "mine")
        again = self.fork(d, forks[0], 1)["sessions"][0]["id"]
        self.assertEqual(self.out(d, again, "cat /workspace/file"), "mine")
        self.hibernate(d, forks[1])
        self.resume(d, forks[1])
        self.assertEqual(self.out(d, forks[1], "cat /workspace/file"), "parent")

    def test_refusals(self):
        d = self.daemon({**DISK, "SANDBOX_MAX_SESSIONS": "3"})
        sid = self.create(d)
        for bad in (0, 17, -1, "2", 1.5, True, [1]):
            status, _, err = d.post(f"/exec/{sid}/fork", body={"count": bad})
            self.assertEqual(status, 400, (bad, err))
            self.assertIn("count", err["error"])
        status, _, err = d.post("/exec/no-such-session/fork", body={"count": 1})
        self.assertEqual(status, 404, err)
        # Beyond the server's sessions: nothing is made, the parent runs on.
        status, _, err = d.post(f"/exec/{sid}/fork", body={"count": 3}, timeout=120)
        self.assertEqual(status, 429, err)
        self.assertEqual(sorted(self.listed(d)), [sid])
        self.assertEqual(self.out(d, sid, "echo on"), "on")
        # A paused session is not forked.
        status, _, body = d.post(f"/exec/{sid}/pause", timeout=60)
        self.assertEqual(status, 200, body)
        status, _, err = d.post(f"/exec/{sid}/fork", body={"count": 1})
        self.assertEqual(status, 409, err)
        status, _, body = d.post(f"/exec/{sid}/resume", timeout=60)
        self.assertEqual(status, 200, body)
        # Two forks fit in the three sessions.
        self.assertEqual(len(self.fork(d, sid, 2)["sessions"]), 2)
        status, _, text = d.get("/metrics")
        text = text.decode() if isinstance(text, bytes) else text
        counts = {ln.split()[0]: float(ln.split()[1]) for ln in text.splitlines()
                  if ln.startswith("session_pauses_total{action=\"fork\"")}
        self.assertEqual(counts.get('session_pauses_total{action="fork",result="success"}'), 1,
                         counts)
        self.assertGreaterEqual(
            counts.get('session_pauses_total{action="fork",result="refused"}', 0), 2, counts)

    def test_another_key_cannot_fork_yours_nor_see_the_forks(self):
        d = self.daemon({**DISK, "AUTH_ENABLED": "true"})
        status, _, key = d.post("/admin/keys", body={"name": "other", "scopes": ["exec"]})
        self.assertEqual(status, 201, key)
        sid = self.create(d)
        status, _, err = d.post(f"/exec/{sid}/fork", body={"count": 1}, api_key=key["key"])
        self.assertEqual(status, 404, err)
        forks = [f["id"] for f in self.fork(d, sid, 1)["sessions"]]
        status, _, listed = d.get("/exec/", api_key=key["key"])
        self.assertEqual(status, 200, listed)
        self.assertEqual([s["id"] for s in listed["sessions"]], [])
        status, _, err = d.get(f"/exec/{forks[0]}/processes", api_key=key["key"])
        self.assertEqual(status, 404, err)
        self.assertEqual(sorted(self.listed(d)), sorted([sid] + forks))

    def test_through_the_cli_and_the_python_sdk(self):
        d = self.daemon(DISK)
        sid = self.create(d)
        self.out(d, sid, "echo parent > /workspace/file")
        root = os.path.dirname(os.path.dirname(HERE))
        cli = os.environ.get("SANDBOX_CLI") or os.path.join(
            os.path.dirname(os.path.dirname(os.path.abspath(harness.sandboxd_path()))),
            "cli", "sandbox")
        env = dict(os.environ, SANDBOX_URL=d.base_url, SANDBOX_API_KEY=d.api_key or "")
        p = subprocess.run([cli, "fork", sid, "--count", "2"], env=env, capture_output=True,
                           text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stderr)
        lines = p.stdout.strip().splitlines()
        self.assertEqual([ln.split()[1] for ln in lines], ["ready", "ready"], p.stdout)
        for ln in lines:
            self.addCleanup(d.delete, f"/exec/{ln.split()[0]}", timeout=60)
            self.assertEqual(self.out(d, ln.split()[0], "cat /workspace/file"), "parent")
        sys.path.insert(0, os.path.join(root, "sdk", "python"))
        from agent_sandbox import Sandbox
        forks = Sandbox(base_url=d.base_url, api_key=d.api_key).session(sid).fork(count=1)
        self.assertEqual(len(forks), 1)
        self.addCleanup(d.delete, f"/exec/{forks[0].id}", timeout=60)
        self.assertEqual(forks[0].fork_info["state"], "ready")
        self.assertEqual(forks[0].run("cat /workspace/file").stdout, "parent\n")

    def test_a_destroy_during_the_fork(self):
        d = self.daemon(DISK)
        sid = self.create(d, keep=True)
        self.start_counter(d, sid)
        sandbox = sandbox_of(d, sid)
        answers = []
        t = threading.Thread(target=lambda: answers.append(
            d.post(f"/exec/{sid}/fork", body={"count": 2}, timeout=120)))
        t.start()
        time.sleep(0.05)
        status, _, body = d.delete(f"/exec/{sid}", timeout=120)
        self.assertEqual(status, 200, body)
        t.join(120)
        status, _, body = answers[0]
        self.assertIn(status, (201, 404, 409), body)
        for f in body.get("sessions", []) if status == 201 else []:
            d.delete(f"/exec/{f['id']}", timeout=60)
        wait_until(lambda: saved(d.state_dir) == [] and not qemu_pids(sandbox), 60, 0.1,
                   "nothing left of the parent and its save")



E2B_DIR = os.path.join(HERE, "..", "e2b")


class SnapshotTest(HibernateCase):
    """Named snapshots of a VM (POST /exec/:id/snapshot): its memory, running processes and
    disk, kept under a name; sessions start from it as from a template, each with its
    processes running on from the moment of the snapshot; it outlives its source session
    and a daemon killed with SIGKILL."""

    def test_sessions_start_from_a_snapshot_with_its_processes_and_it_survives(self):
        first = harness.Daemon(env={**test_qemu.ENV, **DISK}, driver_name="qemu",
                               start_timeout=60)
        first.start()
        self.addCleanup(first._cleanup, False)
        self.addCleanup(first.kill)
        sid = self.create(first, keep=True)
        self.out(first, sid, "echo snapped > /workspace/file")
        self.start_counter(first, sid)
        t0 = time.monotonic()
        status, _, snap = first.post(f"/exec/{sid}/snapshot", body={"name": "vm-1"},
                                     timeout=300)
        took = time.monotonic() - t0
        self.assertEqual(status, 201, snap)
        self.assertEqual((snap["driver"], snap["session"], snap["processesKept"]),
                         ("qemu", sid, True), snap)
        # Its RAM at least (the guest's 128 MiB, less what was never touched), and its disk.
        self.assertGreater(snap["sizeBytes"], 4 * MiB, snap)
        self.assertEqual(len(saved_dirs(first.state_dir)), 1)
        # The source runs on.
        n = self.count(first, sid)
        wait_until(lambda: self.count(first, sid) > n + 3, 60, 0.1, "the source's counter")
        made = []
        for _ in range(2):
            t1 = time.monotonic()
            status, _, body = first.post("/exec", body={"snapshot": "vm-1"}, timeout=300)
            self.assertEqual(status, 201, body)
            made.append((body["id"], time.monotonic() - t1))
            self.assertEqual(body["snapshot"], "vm-1")
            self.assertEqual(body["restored"], {"from": "snapshot", "session": sid,
                                                "processes": 1}, body)
        print(f"\n    qemu snapshot: saved in {took * 1000:.0f} ms ({snap['sizeBytes']} bytes), "
              f"sessions from it ready in {made[0][1] * 1000:.0f} and "
              f"{made[1][1] * 1000:.0f} ms", file=sys.stderr)
        ids = [m[0] for m in made]
        for f in ids:
            self.assertEqual(self.out(first, f, "cat /workspace/file"), "snapped")
            status, _, procs = first.get(f"/exec/{f}/processes")
            tagged = [p for p in procs["processes"] if p.get("tag") == "count"]
            self.assertEqual([p["state"] for p in tagged], ["running"], procs)
            c = self.count(first, f)
            wait_until(lambda f=f, c=c: self.count(first, f) > c + 3, 60, 0.1,
                       "a counter running on from the snapshot")
        rnd = [self.out(first, x, "head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n'")
               for x in [sid] + ids]
        self.assertEqual(len(set(rnd)), 3, rnd)
        self.out(first, ids[0], "echo mine > /workspace/file")
        self.assertEqual(self.out(first, ids[1], "cat /workspace/file"), "snapped")
        for x in [sid] + ids:
            status, _, body = first.delete(f"/exec/{x}", timeout=60)
            self.assertEqual(status, 200, body)
        # The snapshot outlives its source and a SIGKILL of the daemon.
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(60)
        second = self.daemon({**DISK, "SANDBOX_STATE_DIR": first.state_dir,
                              "SANDBOX_RUN_DIR": first.run_dir})
        status, _, got = second.get("/snapshots/vm-1")
        self.assertEqual((status, got.get("sizeBytes")), (200, snap["sizeBytes"]), got)
        status, _, body = second.post("/exec", body={"snapshot": "vm-1"}, timeout=300)
        self.assertEqual(status, 201, body)
        again = body["id"]
        self.assertEqual(self.out(second, again, "cat /workspace/file"), "snapped")
        c = self.count(second, again)
        wait_until(lambda: self.count(second, again) > c + 3, 60, 0.1,
                   "the counter after the restart")
        status, _, body = second.delete(f"/exec/{again}", timeout=60)
        self.assertEqual(status, 200, body)
        status, _, body = second.delete("/snapshots/vm-1")
        self.assertEqual(status, 200, body)
        wait_until(lambda: not saved_dirs(first.state_dir), 30, 0.1, "the save freed")


class E2BPauseTest(HibernateCase):
    """The stock E2B SDK: betaPause hibernates the VM (its processes kept), the daemon
    restarts, and Sandbox.connect resumes it with its background counter counting on."""

    def node(self, d, *args):
        env = {k: v for k, v in os.environ.items()
               if k not in ("E2B_DEBUG", "HTTP_PROXY", "HTTPS_PROXY", "http_proxy",
                            "https_proxy")}
        env.update(E2B_API_URL=d.base_url, E2B_SANDBOX_URL=d.base_url,
                   E2B_DOMAIN="localhost", E2B_API_KEY=d.api_key)
        p = subprocess.run(["node", "pause-phase.mjs", *args], cwd=E2B_DIR, env=env,
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
        return json.loads(p.stdout.strip().splitlines()[-1])

    def test_beta_pause_a_restart_and_connect(self):
        if not os.path.isfile(os.path.join(E2B_DIR, "node_modules", "e2b", "package.json")):
            self.fail("the e2b npm package is not installed in tests/e2b (make test does it)")
        env = {**DISK, "AUTH_ENABLED": "true", "AUTH_KEY_PREFIX": "e2b_"}
        first = harness.Daemon(env={**test_qemu.ENV, **env}, driver_name="qemu",
                               start_timeout=60)
        first.start()
        self.addCleanup(first._cleanup, False)
        self.addCleanup(first.kill)
        paused = self.node(first, "pause")
        self.assertGreater(paused["count"], 0)
        # Hibernated, not frozen: QEMU is gone, the VM is on disk.
        self.assertEqual(len(saved_dirs(first.state_dir)), 1)
        first.proc.send_signal(signal.SIGTERM)
        first.proc.wait(60)
        second = self.daemon({**env, "SANDBOX_STATE_DIR": first.state_dir,
                              "SANDBOX_RUN_DIR": first.run_dir})
        second.api_key = first.admin_key
        back = self.node(second, "connect", paused["sandboxId"], str(paused["pid"]))
        self.assertGreaterEqual(back["count"], paused["count"])
        self.assertGreater(back["after"], back["count"])


if __name__ == "__main__":
    unittest.main()
