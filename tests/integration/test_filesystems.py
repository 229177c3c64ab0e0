"""The host filesystems the jail idmaps (docs/hosts.md#kernel-features): only the templates'.
A template kept as a directory (with no usable image) is idmapped there; templates' images,
disks and volumes are ext4 filesystems the daemon mounts itself from loop devices. A
templates' filesystem without idmapped mounts (ramfs has none; tmpfs has them from Linux 6.3)
is said at start, not refused: a template's image stands in, and one without an image fails
at its creation naming the path, the filesystem and the kernel. The state directory needs
none: with it on tmpfs, a session's disk is made there.

The daemon's artifacts directory here is a fresh filesystem of the type tested, with two
templates copied from `base`: `image` (its rootfs.ext4 alone) and `dir` (its rootfs/ alone).
The host lane runs this on Debian 12's 6.1, where tmpfs has no idmapped mounts."""

import json
import os
import platform
import re
import shutil
import subprocess
import tempfile
import unittest

import harness
from helpers_exec import artifacts_dir, joined, new_session_id, require_ready, start_daemon


def kernel_at_least(major, minor):
    m = re.match(r"(\d+)\.(\d+)", platform.release())
    return m is not None and (int(m.group(1)), int(m.group(2))) >= (major, minor)


def copy_template(src, dst, name, part):
    """Template `name` in dst/templates: src's manifest (renamed) and one of its parts."""
    out = os.path.join(dst, "templates", name)
    os.makedirs(out)
    with open(os.path.join(src, "template.json")) as f:
        manifest = json.load(f)
    manifest["name"] = name
    with open(os.path.join(out, "template.json"), "w") as f:
        json.dump(manifest, f)
    if part == "rootfs":
        subprocess.run(["cp", "-a", os.path.join(src, "rootfs"), out], check=True)
    else:
        subprocess.run(["cp", "--sparse=always", os.path.join(src, part), out], check=True)


class FilesystemCase:
    """The checks, with a daemon whose artifacts directory is a new filesystem of type FS (a
    unittest.TestCase with it)."""

    FS = None
    IDMAP = False  # whether FS takes idmapped mounts on this kernel
    WHY = ""  # what the messages say of FS when it does not
    STATE_ON_FS = False  # the daemon's state directory on it too

    @classmethod
    def setUpClass(cls):
        if harness.driver() != "jail":
            raise unittest.SkipTest("idmapped mounts are the jail driver's")
        require_ready()
        cls.top = tempfile.mkdtemp(prefix="sandboxd-idmap-")
        cls.addClassCleanup(shutil.rmtree, cls.top, True)
        subprocess.run(["mount", "-t", cls.FS, "-o", "mode=0755", cls.FS, cls.top], check=True)
        cls.addClassCleanup(subprocess.run, ["umount", "-l", cls.top], check=False)
        base = os.path.join(artifacts_dir(), "templates", "base")
        copy_template(base, cls.top, "image", "rootfs.ext4")
        copy_template(base, cls.top, "dir", "rootfs")
        env = {"FIRECRACKER_ARTIFACTS_DIR": cls.top, "SANDBOX_WARM_POOL": "0",
               "SANDBOX_DEFAULT_TEMPLATE": "image"}
        if cls.STATE_ON_FS:
            env["SANDBOX_STATE_DIR"] = os.path.join(cls.top, "state")
            os.mkdir(env["SANDBOX_STATE_DIR"], 0o700)
        cls.d = start_daemon(env)
        cls.addClassCleanup(cls.d.stop)

    def create(self, template):
        sid = new_session_id(f"{self.FS}-{template}")
        status, _, body = self.d.post("/exec/", body={"id": sid, "template": template},
                                      timeout=60)
        if status == 201:
            self.addCleanup(self.d.delete, f"/exec/{sid}", timeout=30)
        return sid, status, body

    def warnings(self):
        """What the start said of the templates' filesystem."""
        return [e.get("msg", "") for e in self.d.logs()
                if e.get("level") == "warn" and "idmapped" in e.get("msg", "")
                and "creating session" not in e.get("msg", "")]

    def test_start_says_what_the_templates_filesystem_lacks(self):
        said = self.warnings()
        if self.IDMAP:
            self.assertEqual(said, [])
            return
        self.assertEqual(len(said), 1, said)
        self.assertIn(self.WHY, said[0])
        self.assertIn(f"`{self.top}/templates`", said[0])
        self.assertIn("rootfs.ext4", said[0])

    def test_a_template_with_an_image_runs(self):
        sid, status, body = self.create("image")
        self.assertEqual(status, 201, body)
        status, _, out = self.d.post(f"/exec/{sid}/execute",
                                     body={"command": "sh", "args": ["-c", "echo ok > f; cat f"]},
                                     timeout=60)
        self.assertEqual(status, 200, out)
        self.assertEqual(joined(out["output"], "stdout"), "ok\n")

    def test_a_template_kept_as_a_directory(self):
        sid, status, body = self.create("dir")
        if self.IDMAP:
            self.assertEqual(status, 201, body)
            return
        self.assertGreaterEqual(status, 400, body)
        self.assertIn(f"idmapped mount of `{self.top}/templates/dir/rootfs`", body["error"])
        self.assertIn(self.WHY, body["error"])


class RamfsTest(FilesystemCase, unittest.TestCase):
    FS = "ramfs"
    WHY = "ramfs has no idmapped mounts on this kernel"


class TmpfsTest(FilesystemCase, unittest.TestCase):
    FS = "tmpfs"
    IDMAP = kernel_at_least(6, 3)
    WHY = "tmpfs has idmapped mounts since Linux 6.3, and this kernel is "
    STATE_ON_FS = True


if __name__ == "__main__":
    unittest.main()
