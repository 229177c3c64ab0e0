"""The sandbox user, the same in every interface: uid and gid 1000 with a name (`user` in the
bundled templates), HOME=/home/user, USER and LOGNAME set, commands starting in /home/user,
which is the directory the REST API calls /workspace (both names work), with either
storage."""

import unittest

import harness
from helpers_exec import DaemonTestCase


class SandboxUserTest(DaemonTestCase):
    def sandbox(self, storage):
        sid = self.session(f"user-{storage}")
        status, _, body = self.d.post("/exec/", body={"id": sid, "storage": storage},
                                      timeout=60)
        self.assertEqual(status, 201, body)
        return sid

    def check_user(self, storage):
        sid = self.sandbox(storage)
        out = self.stdout_of(sid, 'id -u; id -g; id -un; id -gn; echo "$HOME $USER $LOGNAME"; pwd')
        self.assertEqual(out.split("\n"), ["1000", "1000", "user", "user",
                                           "/home/user user user", "/home/user", ""], out)
        # One directory, two names: written by either, read by the other, and by the files
        # API under both names and relative.
        self.stdout_of(sid, "echo one > /home/user/a && echo two > /workspace/b")
        self.assertEqual(self.stdout_of(sid, "cat /workspace/a /home/user/b"), "one\ntwo\n")
        status, _, body = self.d.post(f"/exec/{sid}/write",
                                      body={"path": "/home/user/c.txt", "content": "three\n"})
        self.assertEqual(status, 200, body)
        self.assertEqual(self.stdout_of(sid, "cat /workspace/c.txt c.txt"), "three\nthree\n")
        for path in ("/workspace/a", "/home/user/a", "a"):
            status, _, body = self.d.get(f"/exec/{sid}/read", query={"path": path})
            self.assertEqual((status, body.get("content")), (200, "one\n"), (path, body))
        # A working directory by either name.
        self.stdout_of(sid, "mkdir -p sub")
        self.assertEqual(self.stdout_of(sid, "pwd", cwd="/home/user/sub"), "/home/user/sub\n")
        self.assertEqual(self.stdout_of(sid, "pwd", cwd="sub"), "/home/user/sub\n")
        # Above the home is still outside the workspace.
        status, _, body = self.d.get(f"/exec/{sid}/read", query={"path": "/home/user/../x"})
        self.assertEqual(status, 400, body)
        # The variables stay the client's to set.
        self.assertEqual(self.stdout_of(sid, 'echo "$HOME $USER"',
                                        env={"HOME": "/tmp", "USER": "agent"}),
                         "/tmp agent\n")

    def test_disk_storage(self):
        if harness.driver() != "jail":
            self.skipTest("storage is the jail driver's choice")
        self.check_user("disk")

    def test_tmpfs_storage(self):
        if harness.driver() != "jail":
            self.skipTest("storage is the jail driver's choice")
        self.check_user("tmpfs")


if __name__ == "__main__":
    unittest.main()
