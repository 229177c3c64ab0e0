"""Every route against every kind of caller: no key, an unknown key, an expired key, a revoked
key, a key without the route's scope and a key with it; the ways to send a key; key creation
rules; expiry."""

import time
import unittest

import authlib
from authlib import assert_json_error, request

# (method, path, body, scope, statuses with the right scope). {sid} is a session and {kid} a
# key id; with the right scope the rows run in order, so later rows find what earlier ones
# made.
ROUTES = [
    ("GET", "/exec/templates", None, "exec", {200}),
    ("GET", "/exec/", None, "exec", {200}),
    ("POST", "/exec/", {"id": "{sid}", "template": authlib.TEMPLATE}, "exec", {201}),
    ("POST", "/exec/{sid}/execute", {"command": "echo ok"}, "exec", {200}),
    ("POST", "/exec/{sid}/write", {"path": "f.txt", "content": "x"}, "exec", {200, 201}),
    ("GET", "/exec/{sid}/read?path=f.txt", None, "exec", {200}),
    ("GET", "/exec/{sid}/files", None, "exec", {200}),
    ("POST", "/exec/{sid}/cancel", {"execId": "exec_0000000000000000"}, "exec", {404}),
    ("DELETE", "/exec/{sid}", None, "exec", {200}),
    ("GET", "/metrics", None, "metrics", {200}),
    ("GET", "/metrics/history", None, "metrics", {200}),
    ("GET", "/admin/keys", None, "admin", {200}),
    ("POST", "/admin/keys", {"name": "made-by-{case}"}, "admin", {201}),
    ("POST", "/admin/keys/{kid}/rotate", None, "admin", {200}),
    ("POST", "/admin/keys/{kid}/revoke", None, "admin", {200}),
    ("DELETE", "/admin/keys/{kid}", None, "admin", {200}),
]

UNAUTHENTICATED = {
    "none": "API key required",
    "unknown": "Invalid API key",
    "expired": "API key expired",
    "revoked": "API key revoked",
}


def fill(value, **names):
    """value with {sid}, {kid} and {case} replaced, in strings, dicts and lists alike."""
    if isinstance(value, str):
        for k, v in names.items():
            value = value.replace("{" + k + "}", v)
        return value
    if isinstance(value, dict):
        return {k: fill(v, **names) for k, v in value.items()}
    return value


class RouteMatrixTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        authlib.require_ready()
        cls.d = authlib.start_daemon()
        cls.addClassCleanup(cls.d.stop)
        d = cls.d
        # The expiring key first, so that its second passes while the others are made.
        expired = authlib.create_key(d, "caller-expired", ["exec", "admin", "metrics"],
                                     expires_in=1)
        cls.keys = {
            "exec": authlib.create_key(d, "only-exec", ["exec"])["key"],
            "metrics": authlib.create_key(d, "only-metrics", ["metrics"])["key"],
            "admin": authlib.create_key(d, "only-admin", ["admin"])["key"],
            "not-admin": authlib.create_key(d, "exec-metrics", ["exec", "metrics"])["key"],
        }
        revoked = authlib.create_key(d, "caller-revoked", ["exec", "admin", "metrics"])
        st, _, body = authlib.admin(d, "POST", f"/admin/keys/{revoked['id']}/revoke")
        assert st == 200, body
        cls.caller = {"none": None, "unknown": authlib.UNKNOWN_KEY,
                      "expired": expired["key"], "revoked": revoked["key"]}
        authlib.wait_until_expired(expired)

    def wrong_keys(self, scope):
        """Keys that lack `scope` (and have some other)."""
        return {"exec": [self.keys["metrics"], self.keys["admin"]],
                "metrics": [self.keys["exec"], self.keys["admin"]],
                "admin": [self.keys["not-admin"]]}[scope]

    def test_unauthenticated_callers_get_401_on_every_route(self):
        for case, message in UNAUTHENTICATED.items():
            # Each kind of caller from its own address, below the failed-attempt limit.
            source = authlib.fresh_address()
            for method, path, body, scope, _ in ROUTES:
                path = fill(path, sid=f"m-{case}", kid="key_0000000000000000", case=case)
                with self.subTest(case=case, route=f"{method} {path}"):
                    resp = request(self.d, method, path, body=fill(body, sid=f"m-{case}",
                                                                   case=case),
                                   key=self.caller[case], source=source)
                    assert_json_error(self, resp, 401, message)
                    self.assertEqual(resp[1].get("WWW-Authenticate"), "Bearer")
        self.assert_nothing_done()

    def test_wrong_scope_gets_403_on_every_route(self):
        for method, path, body, scope, _ in ROUTES:
            path = fill(path, sid="m-wrong", kid="key_0000000000000000", case="wrong")
            for key in self.wrong_keys(scope):
                with self.subTest(route=f"{method} {path}", key=key[:12]):
                    resp = request(self.d, method, path, body=fill(body, sid="m-wrong",
                                                                   case="wrong"), key=key)
                    assert_json_error(
                        self, resp, 403, f"Insufficient scope: this route requires `{scope}`")
        self.assert_nothing_done()

    def assert_nothing_done(self):
        """No request that was refused created a session or a key."""
        st, _, body = authlib.admin(self.d, "GET", "/exec/")
        self.assertEqual(st, 200)
        refused = {f"m-{c}" for c in [*UNAUTHENTICATED, "wrong"]}
        self.assertFalse(refused & {s["id"] for s in body["sessions"]}, body)
        names = {k["name"] for k in authlib.list_keys(self.d).values()}
        self.assertFalse({f"made-by-{c}" for c in [*UNAUTHENTICATED, "wrong"]} & names, names)

    def test_right_scope_reaches_every_route(self):
        kid = None
        for method, path, body, scope, statuses in ROUTES:
            key = {"exec": self.keys["exec"], "metrics": self.keys["metrics"],
                   "admin": self.keys["admin"]}[scope]
            path = fill(path, sid="m-right", kid=kid or "", case="right")
            with self.subTest(route=f"{method} {path}"):
                st, headers, resp = request(self.d, method, path,
                                            body=fill(body, sid="m-right", case="right"),
                                            key=key)
                self.assertIn(st, statuses, resp)
                if st == 404:
                    assert_json_error(self, (st, headers, resp), 404)
                if method == "POST" and path == "/admin/keys":
                    kid = resp["id"]
                    self.assertRegex(resp["key"], authlib.KEY_RE)
        # The chain ended by deleting the key it made.
        self.assertNotIn(kid, authlib.list_keys(self.d))

    def test_health_and_ready_need_no_key(self):
        for case, key in [*self.caller.items(), ("exec", self.keys["exec"])]:
            for path in ("/health", "/ready"):
                with self.subTest(case=case, path=path):
                    st, headers, body = request(self.d, "GET", path, key=key)
                    self.assertIn(st, (200, 503) if path == "/ready" else (200,), body)
                    self.assertIsInstance(body, dict)
                    self.assertNotIn("error", body)

    def test_the_ways_to_send_a_key(self):
        key = self.keys["exec"]
        for via in authlib.VIAS:
            with self.subTest(via=via):
                st, _, body = request(self.d, "GET", "/exec/templates", key=key, via=via)
                self.assertEqual(st, 200, body)
                self.assertIn(authlib.TEMPLATE, [t["name"] for t in body["templates"]])
        # A query key beside other query parameters.
        st, _, body = request(self.d, "POST", "/exec/ways/write", key=key,
                              body={"path": "a.txt", "content": "via query"}, via="apiKey")
        self.assertIn(st, (200, 201), body)
        for via in ("api_key", "apiKey"):
            with self.subTest(via=via, path="read"):
                st, _, body = request(self.d, "GET", "/exec/ways/read?path=a.txt", key=key,
                                      via=via)
                self.assertEqual(st, 200, body)
                self.assertEqual(body["content"], "via query")
        # Each way is really read: an unknown key sent that way is refused as unknown.
        source = authlib.fresh_address()
        for via in authlib.VIAS:
            with self.subTest(via=via, key="unknown"):
                resp = request(self.d, "GET", "/exec/templates", key=authlib.UNKNOWN_KEY,
                               via=via, source=source)
                assert_json_error(self, resp, 401, "Invalid API key")
        # The scheme name is case-insensitive; a Bearer with nothing after it is no key.
        st, _, body = request(self.d, "GET", "/exec/templates",
                              headers={"Authorization": f"bearer {key}"})
        self.assertEqual(st, 200, body)
        resp = request(self.d, "GET", "/exec/templates", headers={"Authorization": "Bearer "},
                       source=source)
        assert_json_error(self, resp, 401, "API key required")
        # A key in an Authorization header without its scheme: the answer says the form.
        resp = request(self.d, "GET", "/exec/templates", headers={"Authorization": key},
                       source=source)
        assert_json_error(self, resp, 401,
                          "API key required: an Authorization header must be `Bearer <key>` "
                          "(or send the key in X-API-Key)")
        # The header forms come first: a good header wins over a bad query key.
        st, _, body = request(self.d, "GET", "/exec/templates?api_key=nonsense",
                              headers={"X-API-Key": key})
        self.assertEqual(st, 200, body)
        request(self.d, "DELETE", "/exec/ways", key=key)

    def test_key_creation_is_validated(self):
        before = set(authlib.list_keys(self.d))
        cases = [
            ({"name": "bad-scope", "scopes": ["exec", "root"]}, "unknown scope `root`"),
            ({"name": "bad-scope", "scopes": "exec"}, "scopes"),
            ({"name": "bad-scope", "scopes": []}, "scopes"),
            ({"name": "bad-scope", "scopes": [1]}, "scopes"),
            ({"scopes": ["exec"]}, "name"),
            ({"name": ""}, "name"),
            ({"name": "x" * 129}, "name"),
            ({"name": "bad-rate", "rateLimit": -1}, "rateLimit"),
            ({"name": "bad-rate", "rateLimit": "10"}, "rateLimit"),
            ({"name": "bad-exp", "expiresIn": 0}, "expiresIn"),
            ({"name": "bad-exp", "expiresIn": "soon"}, "expiresIn"),
            ({"name": "bad-exp", "expiresIn": -5}, "expiresIn"),
            # Lifetimes are bounded (100 years), far from overflowing an expiry time.
            ({"name": "bad-exp", "expiresIn": 2**63 - 1}, "expiresIn"),
            ({"name": "bad-exp", "expiresIn": "9223372036854775807"}, "expiresIn"),
            ({"name": "bad-exp", "expiresIn": "106751991167300d"}, "expiresIn"),
            ({"name": "bad-exp", "expiresIn": "36501d"}, "expiresIn"),
        ]
        for body, contains in cases:
            with self.subTest(body=body):
                resp = authlib.admin(self.d, "POST", "/admin/keys", body)
                assert_json_error(self, resp, 400, contains=contains)
        self.assertEqual(set(authlib.list_keys(self.d)), before)
        # What a new key looks like, and that the secret is never listed.
        k = authlib.create_key(self.d, "shape", ["exec", "metrics"], rate_limit=5,
                               expires_in="1d")
        self.assertRegex(k["key"], "^" + authlib.KEY_RE.pattern + "$")
        self.assertTrue(k["key"].startswith(k["prefix"]))
        self.assertLess(len(k["prefix"]), len(k["key"]))
        self.assertEqual(k["scopes"], ["exec", "metrics"])
        self.assertEqual(k["rateLimit"], 5)
        self.assertTrue(k["enabled"])
        self.assertIsNone(k["lastUsedAt"])
        left = authlib.iso_epoch(k["expiresAt"]) - time.time()
        self.assertTrue(86400 - 5 < left <= 86400 + 1, k)
        longest = authlib.create_key(self.d, "century", expires_in="36500d")
        self.assertEqual(authlib.iso_epoch(longest["expiresAt"])
                         - authlib.iso_epoch(longest["createdAt"]), 36500 * 86400)
        self.assertEqual(request(self.d, "GET", "/exec/", key=longest["key"])[0], 200)
        listed = authlib.list_keys(self.d)[k["id"]]
        self.assertNotIn("key", listed)
        self.assertNotIn(k["key"], str(listed))
        # Unknown ids are 404 on every key route.
        for method, path in (("POST", "/admin/keys/key_nope/revoke"),
                             ("POST", "/admin/keys/key_nope/rotate"),
                             ("DELETE", "/admin/keys/key_nope")):
            with self.subTest(route=f"{method} {path}"):
                assert_json_error(self, authlib.admin(self.d, method, path), 404,
                                  contains="key_nope")

    def test_expiry(self):
        k = authlib.create_key(self.d, "short-lived", ["exec"], expires_in=2)
        st, _, body = request(self.d, "GET", "/exec/", key=k["key"])
        self.assertEqual(st, 200, body)
        authlib.wait_until_expired(k)
        resp = request(self.d, "GET", "/exec/", key=k["key"], source=authlib.fresh_address())
        assert_json_error(self, resp, 401, "API key expired")
        # Still listed (as it was), so an admin can see why it stopped.
        self.assertIn(k["id"], authlib.list_keys(self.d))

    def test_revoke_rotate_delete_take_effect_at_once(self):
        source = authlib.fresh_address()
        k = authlib.create_key(self.d, "lifecycle", ["exec"])
        self.assertEqual(request(self.d, "GET", "/exec/", key=k["key"])[0], 200)
        st, _, rotated = authlib.admin(self.d, "POST", f"/admin/keys/{k['id']}/rotate")
        self.assertEqual(st, 200, rotated)
        self.assertEqual(rotated["id"], k["id"])
        self.assertNotEqual(rotated["key"], k["key"])
        self.assertRegex(rotated["key"], authlib.KEY_RE)
        assert_json_error(self, request(self.d, "GET", "/exec/", key=k["key"], source=source),
                          401, "Invalid API key")
        self.assertEqual(request(self.d, "GET", "/exec/", key=rotated["key"])[0], 200)
        st, _, body = authlib.admin(self.d, "POST", f"/admin/keys/{k['id']}/revoke")
        self.assertEqual((st, body), (200, {"success": True, "id": k["id"],
                                            "message": f"Key {k['id']} revoked"}))
        self.assertFalse(authlib.list_keys(self.d)[k["id"]]["enabled"])
        assert_json_error(self, request(self.d, "GET", "/exec/", key=rotated["key"],
                                        source=source), 401, "API key revoked")
        st, _, body = authlib.admin(self.d, "DELETE", f"/admin/keys/{k['id']}")
        self.assertEqual((st, body), (200, {"success": True, "id": k["id"],
                                            "message": f"Key {k['id']} deleted"}))
        assert_json_error(self, request(self.d, "GET", "/exec/", key=rotated["key"],
                                        source=source), 401, "Invalid API key")
        self.assertNotIn(k["id"], authlib.list_keys(self.d))


if __name__ == "__main__":
    unittest.main()
