"""Sessions belong to the key that created them: other keys can neither see, use nor destroy
them (404, as if they did not exist), the same session id names a different session for each
key, an admin key reaches every session, and rotating a key keeps its sessions."""

import unittest

import authlib
from authlib import assert_json_error, request


class OwnershipTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        authlib.require_ready()
        cls.d = authlib.start_daemon()
        cls.addClassCleanup(cls.d.stop)

    def setUp(self):
        self.a = authlib.create_key(self.d, f"{self._testMethodName}-a", ["exec"])
        self.b = authlib.create_key(self.d, f"{self._testMethodName}-b", ["exec"])

    def call(self, who, method, path, body=None):
        return request(self.d, method, path, body=body, key=who["key"])

    def ids(self, who):
        st, _, body = self.call(who, "GET", "/exec/")
        self.assertEqual(st, 200, body)
        self.assertEqual(body["count"], len(body["sessions"]))
        return sorted(s["id"] for s in body["sessions"])

    def make(self, who, sid, content):
        st, _, body = self.call(who, "POST", "/exec/", {"id": sid, "template": authlib.TEMPLATE})
        self.assertEqual(st, 201, body)
        st, _, body = self.call(who, "POST", f"/exec/{sid}/write",
                                {"path": "owner.txt", "content": content})
        self.assertIn(st, (200, 201), body)

    def read(self, who, sid):
        st, _, body = self.call(who, "GET", f"/exec/{sid}/read?path=owner.txt")
        return st, body.get("content") if st == 200 else body

    def test_other_keys_cannot_see_use_or_destroy(self):
        self.make(self.a, "own-a", "a's")
        self.assertEqual(self.ids(self.a), ["own-a"])
        self.assertEqual(self.ids(self.b), [])
        for method, path, body in (
            ("GET", "/exec/own-a/read?path=owner.txt", None),
            ("GET", "/exec/own-a/files", None),
            ("POST", "/exec/own-a/cancel", {"execId": "exec_0000000000000000"}),
        ):
            with self.subTest(route=f"{method} {path}"):
                resp = self.call(self.b, method, path, body)
                assert_json_error(self, resp, 404, "Session `own-a` not found")
        # Deleting A's session answers as for no session at all (the reference's 200 with
        # destroyed false), and leaves it alone.
        st, _, body = self.call(self.b, "DELETE", "/exec/own-a")
        self.assertEqual((st, body["destroyed"]), (200, False), body)
        self.assertEqual(body["message"], "Session `own-a` not found")
        # A's session is untouched.
        self.assertEqual(self.read(self.a, "own-a"), (200, "a's"))
        # Execute and write create a session on first use: B gets one of its own, which
        # does not hold A's file.
        st, _, body = self.call(self.b, "POST", "/exec/own-a/execute",
                                {"command": "cat owner.txt"})
        self.assertEqual(st, 200, body)
        self.assertNotEqual(body["exitCode"], 0, body)
        self.assertEqual(self.ids(self.b), ["own-a"])
        self.assertEqual(self.read(self.a, "own-a"), (200, "a's"))
        # B deletes its own; A's stays, and a second delete by B finds nothing.
        st, _, body = self.call(self.b, "DELETE", "/exec/own-a")
        self.assertEqual((st, body), (200, {"success": True, "id": "own-a", "destroyed": True}))
        st, _, body = self.call(self.b, "DELETE", "/exec/own-a")
        self.assertEqual((st, body["destroyed"]), (200, False), body)
        self.assertEqual(self.read(self.a, "own-a"), (200, "a's"))
        self.assertEqual(self.ids(self.a), ["own-a"])
        st, _, _ = self.call(self.a, "DELETE", "/exec/own-a")
        self.assertEqual(st, 200)

    def test_same_session_id_for_two_keys(self):
        self.make(self.a, "shared", "from a")
        self.make(self.b, "shared", "from b")
        self.assertEqual(self.read(self.a, "shared"), (200, "from a"))
        self.assertEqual(self.read(self.b, "shared"), (200, "from b"))
        st, _, body = self.call(self.a, "POST", "/exec/shared/execute",
                                {"command": "cat owner.txt"})
        self.assertEqual((st, body["output"][0]["data"]), (200, "from a"))
        self.assertEqual(self.ids(self.a), ["shared"])
        self.assertEqual(self.ids(self.b), ["shared"])
        # A second explicit creation of one's own id conflicts; the other key's does not.
        st, _, body = self.call(self.a, "POST", "/exec/", {"id": "shared"})
        assert_json_error(self, (st, _, body), 409)
        # Deleting one leaves the other.
        self.assertEqual(self.call(self.a, "DELETE", "/exec/shared")[0], 200)
        self.assertEqual(self.read(self.b, "shared"), (200, "from b"))
        self.assertEqual(self.read(self.a, "shared")[0], 404)
        self.assertEqual(self.call(self.b, "DELETE", "/exec/shared")[0], 200)

    def test_admin_reaches_every_session(self):
        self.make(self.a, "adm-a", "a")
        self.make(self.b, "adm-b", "b")
        st, _, body = authlib.admin(self.d, "GET", "/exec/")
        self.assertEqual(st, 200, body)
        listed = [s["id"] for s in body["sessions"]]
        self.assertIn("adm-a", listed)
        self.assertIn("adm-b", listed)
        st, _, body = authlib.admin(self.d, "GET", "/exec/adm-a/read?path=owner.txt")
        self.assertEqual((st, body.get("content")), (200, "a"))
        st, _, body = authlib.admin(self.d, "GET", "/exec/adm-b/files")
        self.assertEqual(st, 200, body)
        st, _, body = authlib.admin(self.d, "DELETE", "/exec/adm-b")
        self.assertEqual(st, 200, body)
        self.assertEqual(self.ids(self.b), [])
        self.assertEqual(self.ids(self.a), ["adm-a"])
        # An exec-only key is no admin, whatever it owns.
        self.assertEqual(self.call(self.a, "GET", "/exec/adm-a/files")[0], 200)
        self.assertEqual(self.call(self.a, "DELETE", "/exec/adm-a")[0], 200)

    def test_admin_commands_and_writes_go_to_the_owners_session(self):
        self.make(self.a, "adm-run", "a's file")
        # Execute and write by id reach a's session; they do not create one for the admin.
        st, _, body = authlib.admin(self.d, "POST", "/exec/adm-run/execute",
                                    {"command": "cat owner.txt"})
        self.assertEqual((st, body["output"][0]["data"]), (200, "a's file"), body)
        st, _, body = authlib.admin(self.d, "POST", "/exec/adm-run/write",
                                    {"path": "by-admin.txt", "content": "x"})
        self.assertEqual(st, 200, body)
        st, _, body = self.call(self.a, "GET", "/exec/adm-run/read?path=by-admin.txt")
        self.assertEqual((st, body.get("content")), (200, "x"))
        st, _, body = authlib.admin(self.d, "GET", "/exec/")
        mine = [s for s in body["sessions"] if s["id"] == "adm-run"]
        self.assertEqual(len(mine), 1, mine)
        self.assertEqual(mine[0]["owner"], self.a["id"])

    def test_admin_by_id_is_refused_when_ambiguous(self):
        self.make(self.a, "adm-dup", "a")
        self.make(self.b, "adm-dup", "b")
        for method, path, body in (("GET", "/exec/adm-dup/read?path=owner.txt", None),
                                   ("POST", "/exec/adm-dup/execute", {"command": "true"}),
                                   ("DELETE", "/exec/adm-dup", None)):
            st, _, reply = authlib.admin(self.d, method, path, body)
            self.assertEqual(st, 409, reply)
            self.assertIn("use one of those keys", reply["error"])
        self.assertEqual(self.read(self.a, "adm-dup"), (200, "a"))
        self.assertEqual(self.read(self.b, "adm-dup"), (200, "b"))

    def test_rotation_keeps_ownership(self):
        self.make(self.a, "rot-a", "before rotation")
        st, _, rotated = authlib.admin(self.d, "POST", f"/admin/keys/{self.a['id']}/rotate")
        self.assertEqual(st, 200, rotated)
        new = {"key": rotated["key"]}
        assert_json_error(self, request(self.d, "GET", "/exec/", key=self.a["key"],
                                        source=authlib.fresh_address()),
                          401, "Invalid API key")
        self.assertEqual(self.ids(new), ["rot-a"])
        self.assertEqual(self.read(new, "rot-a"), (200, "before rotation"))
        st, _, body = self.call(new, "POST", "/exec/rot-a/execute", {"command": "cat owner.txt"})
        self.assertEqual((st, body["output"][0]["data"]), (200, "before rotation"))
        self.assertEqual(self.call(new, "DELETE", "/exec/rot-a")[0], 200)

    def test_revoked_key_loses_its_sessions(self):
        self.make(self.a, "rev-a", "x")
        st, _, _ = authlib.admin(self.d, "POST", f"/admin/keys/{self.a['id']}/revoke")
        self.assertEqual(st, 200)
        src = authlib.fresh_address()
        for method, path in (("GET", "/exec/"), ("GET", "/exec/rev-a/read?path=owner.txt"),
                             ("DELETE", "/exec/rev-a")):
            with self.subTest(route=f"{method} {path}"):
                assert_json_error(self, request(self.d, method, path, key=self.a["key"],
                                                source=src), 401, "API key revoked")
        # The session is still there for an admin to see and remove.
        self.assertEqual(authlib.admin(self.d, "DELETE", "/exec/rev-a")[0], 200)


if __name__ == "__main__":
    unittest.main()
