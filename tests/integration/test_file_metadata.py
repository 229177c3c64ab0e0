"""The metadata routes: stat, mkdir, remove and move, inside the workspace boundary."""

import os

from helpers_exec import DaemonTestCase


class FileMetadataTest(DaemonTestCase):
    def stat(self, sid, path):
        return self.d.get(f"/exec/{sid}/stat", query={"path": path})

    def post(self, sid, what, body):
        return self.d.post(f"/exec/{sid}/{what}", body=body)

    def test_stat_tells_type_size_mode_and_time_without_following_links(self):
        sid = self.session()
        self.run_ok(sid, "printf hello > f; chmod 640 f; mkdir d; ln -s f link; "
                         "ln -s /etc/passwd out")
        status, _, body = self.stat(sid, "f")
        self.assertEqual(status, 200, body)
        self.assertEqual({k: body[k] for k in ("path", "type", "size", "mode")},
                         {"path": "f", "type": "file", "size": 5, "mode": 0o640})
        self.assertIsInstance(body["mtime"], (int, float))
        self.assertEqual(self.stat(sid, "d")[2]["type"], "dir")
        self.assertEqual(self.stat(sid, "link")[2]["type"], "symlink")
        # A link out of the workspace is described, not followed.
        status, _, body = self.stat(sid, "out")
        self.assertEqual((status, body["type"]), (200, "symlink"))
        status, headers, body = self.stat(sid, "missing")
        self.assertJsonError(status, headers, body, 404)
        for path in ("../x", "/etc/passwd", "out/x"):
            status, headers, body = self.stat(sid, path)
            self.assertJsonError(status, headers, body, 400)
        status, headers, body = self.d.get(f"/exec/{sid}/stat")
        self.assertJsonError(status, headers, body, 400)

    def test_mkdir_with_and_without_parents(self):
        sid = self.session()
        status, _, body = self.post(sid, "mkdir", {"path": "a/b/c"})
        self.assertEqual(status, 200, body)
        self.assertEqual(body, {"success": True, "path": "a/b/c"})
        self.assertEqual(self.stat(sid, "a/b/c")[2]["type"], "dir")
        # Again: fine with parents (the default), 409 without.
        self.assertEqual(self.post(sid, "mkdir", {"path": "a/b/c"})[0], 200)
        status, headers, body = self.post(sid, "mkdir", {"path": "a/b/c", "parents": False})
        self.assertJsonError(status, headers, body, 409)
        status, headers, body = self.post(sid, "mkdir", {"path": "x/y", "parents": False})
        self.assertJsonError(status, headers, body, 404)
        for bad in ({}, {"path": ""}, {"path": 3}, {"path": "z", "parents": "yes"}):
            status, headers, body = self.post(sid, "mkdir", bad)
            self.assertJsonError(status, headers, body, 400)
        status, headers, body = self.post(sid, "mkdir", {"path": "../outside"})
        self.assertJsonError(status, headers, body, 400)

    def test_mkdir_creates_the_session_like_write(self):
        sid = "meta-created"
        self.addCleanup(self.d.delete, f"/exec/{sid}")
        status, _, body = self.post(sid, "mkdir", {"path": "made"})
        self.assertEqual(status, 200, body)
        self.assertEqual(self.stdout_of(sid, "test -d made && echo yes"), "yes\n")

    def test_remove(self):
        sid = self.session()
        self.run_ok(sid, "echo x > f; mkdir empty; mkdir -p tree/sub; echo y > tree/sub/g; "
                         "mkdir keep; echo safe > keep/file; ln -s ../keep tree/link")
        self.assertEqual(self.post(sid, "remove", {"path": "f"})[0], 200)
        self.assertEqual(self.post(sid, "remove", {"path": "empty"})[0], 200)
        status, headers, body = self.post(sid, "remove", {"path": "tree"})
        self.assertJsonError(status, headers, body, 409)  # not empty
        status, _, body = self.post(sid, "remove", {"path": "tree", "recursive": True})
        self.assertEqual((status, body), (200, {"success": True, "path": "tree"}))
        # The link inside went, not what it pointed to.
        self.assertEqual(self.stdout_of(sid, "ls; cat keep/file"), "keep\nsafe\n")
        status, headers, body = self.post(sid, "remove", {"path": "gone"})
        self.assertJsonError(status, headers, body, 404)
        for path in (".", "/workspace", "", "../x"):
            status, headers, body = self.post(sid, "remove", {"path": path, "recursive": True})
            self.assertIn(status, (400, 403), (path, body))
        self.assertEqual(self.stdout_of(sid, "ls"), "keep\n")

    def test_move(self):
        sid = self.session()
        self.run_ok(sid, "echo one > a; echo two > b; mkdir d; echo three > d/c")
        status, _, body = self.post(sid, "move", {"from": "a", "to": "new/place/a2"})
        self.assertEqual(status, 200, body)
        self.assertEqual(body, {"success": True, "from": "a", "to": "new/place/a2"})
        self.assertEqual(self.stdout_of(sid, "cat new/place/a2; test -e a || echo gone"),
                         "one\ngone\n")
        # Without overwrite an existing destination is 409 and nothing moves.
        status, headers, body = self.post(sid, "move", {"from": "b", "to": "new/place/a2",
                                                        "overwrite": False})
        self.assertJsonError(status, headers, body, 409)
        self.assertEqual(self.stdout_of(sid, "cat b"), "two\n")
        # With it (the default), replaced.
        self.assertEqual(self.post(sid, "move", {"from": "b", "to": "new/place/a2"})[0], 200)
        self.assertEqual(self.stdout_of(sid, "cat new/place/a2"), "two\n")
        # Directories move too.
        self.assertEqual(self.post(sid, "move", {"from": "d", "to": "e"})[0], 200)
        self.assertEqual(self.stdout_of(sid, "cat e/c"), "three\n")
        status, headers, body = self.post(sid, "move", {"from": "nothing", "to": "x"})
        self.assertJsonError(status, headers, body, 404)
        for bad in ({"from": "e"}, {"to": "x"}, {"from": "e", "to": ""},
                    {"from": "e", "to": "y", "overwrite": 1}):
            status, headers, body = self.post(sid, "move", bad)
            self.assertJsonError(status, headers, body, 400)

    def test_move_cannot_leave_the_workspace(self):
        sid = self.session()
        self.run_ok(sid, "echo secret > s; ln -s /tmp tmplink; ln -s /etc/hostname hn")
        marker = f"/tmp/moved-out-{os.getpid()}"
        for to in ("../x", "/tmp/x", "tmplink/x", marker):
            status, headers, body = self.post(sid, "move", {"from": "s", "to": to})
            self.assertJsonError(status, headers, body, 400)
        for frm in ("../etc/hostname", "/etc/hostname", "tmplink/x"):
            status, headers, body = self.post(sid, "move", {"from": frm, "to": "got"})
            self.assertJsonError(status, headers, body, 400)
        # Moving the link itself is allowed: it stays a link, in the workspace.
        self.assertEqual(self.post(sid, "move", {"from": "hn", "to": "hn2"})[0], 200)
        self.assertEqual(self.stat(sid, "hn2")[2]["type"], "symlink")
        status, headers, body = self.post(sid, "move", {"from": ".", "to": "x"})
        self.assertIn(status, (400, 403), body)
        self.assertEqual(self.stdout_of(sid, "cat s"), "secret\n")
        self.assertFalse(os.path.exists(marker))

    def test_unknown_session_is_404(self):
        for method, what, body in (("GET", "stat?path=x", None),
                                   ("POST", "remove", {"path": "x"}),
                                   ("POST", "move", {"from": "x", "to": "y"})):
            status, headers, resp = self.d.request(method, f"/exec/no-such-meta/{what}",
                                                   body=body)
            self.assertJsonError(status, headers, resp, 404)
        status, _, body = self.d.get("/exec")
        self.assertNotIn("no-such-meta", [s["id"] for s in body["sessions"]])
