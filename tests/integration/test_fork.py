"""POST /exec/:id/fork on the jail driver: a session with a disk forks into new sessions with a
copy of its files (not its processes: a jail cannot be saved whole), each with ids of its own;
one without a disk gets a clear 501; a malformed count is a 400 whatever the driver; another
key's session is a 404. VM forks, memory included, are tested on qemu (tests/e2e/
test_qemu_lifecycle.py)."""

import glob
import os
import shutil
import signal
import threading
import time
import unittest

import helpers_exec
from helpers_exec import BASE_ENV, DaemonTestCase, joined, wait_until

# A directory chain of DEPTH names of 200 bytes: a path of 8 KiB, twice PATH_MAX.
LONG = "d" * 200
DEPTH = 40
DOWN = f"for i in $(seq {DEPTH}); do cd -P {LONG} || exit 1; done;"
COUNTER = "i=0; while :; do i=$((i+1)); echo $i > c.tmp && mv c.tmp count; sleep 0.01; done"


def saves(state_dir):
    return glob.glob(os.path.join(state_dir, "disks", "*.saved"))


@unittest.skipUnless(os.environ.get("DRIVER", "jail") == "jail",
                     "the jail driver's forks (qemu forks: tests/e2e)")
class JailForkTest(DaemonTestCase):
    daemon_env = {**BASE_ENV, "AUTH_ENABLED": "true", "SANDBOX_WARM_POOL": "0"}

    def fork(self, sid, count=1, expect=201):
        status, _, body = self.d.post(f"/exec/{sid}/fork", body={"count": count}, timeout=120)
        self.assertEqual(status, expect, body)
        return body

    def test_forks_get_the_files_not_the_processes_and_diverge(self):
        sid = self.session()
        self.run_ok(sid, "echo kept > file && mkdir -p d && head -c 65536 /dev/urandom > d/r")
        status, _, body = self.d.post(f"/exec/{sid}/execute",
                                      body={"command": "echo root > /usr/by-root && "
                                            "cp /bin/true /usr/suid && chmod 4755 /usr/suid",
                                            "user": "root"})
        self.assertEqual((status, body.get("exitCode")), (200, 0), body)
        status, _, body = self.d.post(f"/exec/{sid}/processes",
                                      body={"command": COUNTER, "tag": "count"})
        self.assertEqual(status, 201, body)
        wait_until(lambda: self.stdout_of(sid, "cat count 2>/dev/null || echo 0").strip() != "0",
                   30, 0.05, "the counter running")
        digest = self.stdout_of(sid, "sha256sum d/r")
        forks = self.fork(sid, 2)["sessions"]
        self.assertEqual(len(forks), 2)
        ids = [f["id"] for f in forks]
        for f in ids:
            self.addCleanup(self.d.delete, f"/exec/{f}", timeout=30)
        self.assertEqual(len(set(ids + [sid])), 3)
        for f in forks:
            self.assertEqual((f["state"], f["template"]), ("ready", self.listed_sessions()[sid][
                "template"]))
        # The save is freed once the forks are made.
        wait_until(lambda: not saves(self.d.state_dir), 30, 0.1, "the save freed")
        for f in ids:
            self.assertEqual(self.stdout_of(f, "cat file /usr/by-root"), "kept\nroot\n")
            self.assertEqual(self.stdout_of(f, "sha256sum d/r"), digest)
            # Its files carry its own ids, as the source's did its: owners and set-id bits.
            self.assertEqual(self.stdout_of(f, "stat -c '%u %g' file d/r"),
                             "1000 1000\n1000 1000\n")
            self.assertEqual(self.stdout_of(f, "stat -c '%u %a' /usr/suid /usr/by-root"),
                             "0 4755\n0 644\n")
            status, _, body = self.d.post(f"/exec/{f}/execute",
                                          body={"command": "echo mine > /usr/by-root",
                                                "user": "root"})
            self.assertEqual((status, body.get("exitCode")), (200, 0), body)
            # No process came along: its counter stays where the copy left it.
            before = self.stdout_of(f, "cat count")
            self.assertEqual(self.stdout_of(f, "sleep 0.3; cat count"), before)
        # They diverge: what one writes, neither the other nor the source sees.
        self.run_ok(ids[0], "echo first > file")
        self.assertEqual(self.stdout_of(ids[1], "cat file"), "kept\n")
        self.assertEqual(self.stdout_of(sid, "cat file /usr/by-root"), "kept\nroot\n")
        # The source runs on: its counter counts.
        before = int(self.stdout_of(sid, "cat count"))
        wait_until(lambda: int(self.stdout_of(sid, "cat count")) > before, 30, 0.1,
                   "the source's counter going on")

    def test_a_tree_deeper_than_path_max_forks_with_its_owners(self):
        """A chain of directories whose full path is far longer than PATH_MAX (4096): the
        fork's copy gives every file of it, down to the deepest, the fork's own ids, and
        follows none of its symlinks (one points at a file of the template)."""
        sid = self.session()
        self.run_ok(sid, f"for i in $(seq {DEPTH}); do echo $i > s && ln -s /etc/passwd "
                    f"link && mkdir {LONG} && cd -P {LONG} || exit 1; done; echo deep > f")
        forks = self.fork(sid, 1)["sessions"]
        fid = forks[0]["id"]
        self.addCleanup(self.d.delete, f"/exec/{fid}", timeout=30)
        self.assertEqual(self.stdout_of(fid, f"{DOWN} cat f; stat -c '%u %g' f ."),
                         "deep\n1000 1000\n1000 1000\n")
        # Every level's own files, the ones read after the deep directory was, too.
        levels = self.stdout_of(fid, f"for i in $(seq {DEPTH}); do stat -c '%u %g' s link "
                                f"&& cd -P {LONG} || exit 1; done")
        self.assertEqual(levels, "1000 1000\n" * (2 * DEPTH))
        # The template's file a link points at is not the fork's.
        self.assertEqual(self.stdout_of(fid, "stat -L -c '%u %g' link"), "0 0\n")

    def test_a_session_without_a_disk_cannot_fork_and_says_so(self):
        sid = self.session()
        status, _, body = self.d.post("/exec", body={"id": sid, "storage": "tmpfs"})
        self.assertEqual(status, 201, body)
        self.run_ok(sid, "echo kept > file")
        status, headers, body = self.d.post(f"/exec/{sid}/fork", body={"count": 2})
        self.assertJsonError(status, headers, body, 501, "disk")
        self.assertEqual(self.stdout_of(sid, "cat file"), "kept\n")
        self.assertEqual(list(self.listed_sessions()), [sid])

    def test_a_malformed_count_is_400(self):
        sid = self.session()
        for bad in (0, 17, -3, "1", 2.5, [], {}):
            status, headers, body = self.d.post(f"/exec/{sid}/fork", body={"count": bad})
            self.assertJsonError(status, headers, body, 400, "count")
        status, headers, body = self.d.post(f"/exec/{sid}/fork", body=b"{not json",
                                            headers={"Content-Type": "application/json"})
        self.assertEqual(status, 400, body)

    def test_another_keys_session_is_404(self):
        status, _, key = self.d.post("/admin/keys", body={"name": "other", "scopes": ["exec"]})
        self.assertEqual(status, 201, key)
        sid = self.session()
        self.run_ok(sid, "true")
        status, headers, body = self.d.post(f"/exec/{sid}/fork", body={"count": 1},
                                            api_key=key["key"])
        self.assertJsonError(status, headers, body, 404)

    def test_forks_count_against_the_owners_sessions(self):
        status, _, key = self.d.post("/admin/keys", body={"name": "two", "scopes": ["exec"],
                                                          "quotas": {"sessions": 2}})
        self.assertEqual(status, 201, key)
        status, _, body = self.d.post("/exec", body={}, api_key=key["key"])
        self.assertEqual(status, 201, body)
        sid = body["id"]
        self.addCleanup(self.d.delete, f"/exec/{sid}", api_key=key["key"])
        status, headers, body = self.d.post(f"/exec/{sid}/fork", body={"count": 2},
                                            api_key=key["key"])
        self.assertJsonError(status, headers, body, 429)
        status, _, body = self.d.post(f"/exec/{sid}/fork", body={"count": 1},
                                      api_key=key["key"], timeout=120)
        self.assertEqual(status, 201, body)
        fork = body["sessions"][0]["id"]
        self.addCleanup(self.d.delete, f"/exec/{fork}", api_key=key["key"])
        status, _, out = self.d.post(f"/exec/{fork}/execute", body={"command": "echo hi"},
                                     api_key=key["key"])
        self.assertEqual(joined(out["output"], "stdout"), "hi\n")


@unittest.skipUnless(os.environ.get("DRIVER", "jail") == "jail",
                     "the jail driver's forks (qemu forks: tests/e2e)")
class ForkCrashTest(unittest.TestCase):
    def test_sigkill_in_the_middle_of_forks_leaves_nothing_behind(self):
        """A daemon killed while sessions are being forked leaves, after its restart, no save
        and no disk that nothing names (running jails do not outlive their daemon), and the
        restarted daemon forks again."""
        first = helpers_exec.start_daemon({"SANDBOX_WARM_POOL": "0"})
        self.addCleanup(shutil.rmtree, first.tmp, True)
        self.addCleanup(first.kill)
        ids = [f"crash-{i}" for i in range(3)]
        for sid in ids:
            status, _, body = first.post("/exec", body={"id": sid})
            self.assertEqual(status, 201, body)
            status, _, body = first.post(f"/exec/{sid}/execute", body={
                "command": "head -c 16777216 /dev/urandom > big"})
            self.assertEqual(status, 200, body)
        threads = [threading.Thread(target=lambda sid=sid: first.post(
            f"/exec/{sid}/fork", body={"count": 3}, timeout=10)) for sid in ids]
        for t in threads:
            t.start()
        # Killed once a fork's save exists: in the middle of a fork, between its save and
        # its last copy.
        deadline = time.monotonic() + 30
        while not saves(first.state_dir) and time.monotonic() < deadline:
            time.sleep(0.001)
        mid_fork = bool(saves(first.state_dir))
        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
        for t in threads:
            t.join()
        first.kill()
        self.assertTrue(mid_fork, "no fork's save was ever seen")
        second = helpers_exec.start_daemon({"SANDBOX_WARM_POOL": "0",
                                            "SANDBOX_STATE_DIR": first.state_dir,
                                            "SANDBOX_RUN_DIR": first.run_dir})
        self.addCleanup(second.stop, check=False)
        disks = os.path.join(first.state_dir, "disks")
        wait_until(lambda: not os.listdir(disks) if os.path.isdir(disks) else True, 30, 0.1,
                   "the crashed daemon's saves and disks removed")
        status, _, listed = second.get("/exec/")
        self.assertEqual(status, 200, listed)
        self.assertEqual(listed["sessions"], [], listed)
        status, _, body = second.post("/exec", body={"id": "after"})
        self.assertEqual(status, 201, body)
        status, _, body = second.post("/exec/after/fork", body={"count": 2}, timeout=120)
        self.assertEqual(status, 201, body)
        for s in body["sessions"]:
            second.delete(f"/exec/{s['id']}")
        second.delete("/exec/after")
        wait_until(lambda: not os.listdir(disks), 30, 0.1, "every disk freed")
        second.stop()
