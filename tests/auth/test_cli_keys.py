"""`sandbox keys` beside a running daemon (which it goes through, never opening the database
the daemon holds): what it does takes effect at once."""

import json
import unittest

import authlib
from authlib import assert_json_error, cli, cli_json, request


class CliKeysTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        authlib.require_ready(cli=True)
        cls.d = authlib.start_daemon()
        cls.addClassCleanup(cls.d.stop)
        cls.state = cls.d.state_dir

    def use(self, key, path="/exec/", source=None):
        return request(self.d, "GET", path, key=key, source=source or authlib.fresh_address())

    def test_created_key_works_at_once_and_revoked_stops_at_once(self):
        k = cli_json(self, self.state, "create", "cli-made")
        self.assertRegex(k["key"], "^" + authlib.KEY_RE.pattern + "$")
        self.assertEqual(k["scopes"], ["exec"])
        self.assertEqual(self.use(k["key"])[0], 200)
        # exec is the default scope, and the only one.
        assert_json_error(self, self.use(k["key"], "/admin/keys"), 403)
        # The daemon lists what the CLI made, and the CLI what the daemon made.
        self.assertIn(k["id"], authlib.list_keys(self.d))
        http_made = authlib.create_key(self.d, "http-made", ["metrics"])
        listed = {x["id"]: x for x in cli_json(self, self.state, "list")["keys"]}
        self.assertEqual(listed[http_made["id"]]["scopes"], ["metrics"])

        p = cli(self.state, "revoke", k["id"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn(k["id"].encode(), p.stdout)
        assert_json_error(self, self.use(k["key"]), 401, "API key revoked")
        self.assertFalse(authlib.list_keys(self.d)[k["id"]]["enabled"])

    def test_scopes_and_rate_limit(self):
        k = cli_json(self, self.state, "create", "cli-admin", "--scopes", "exec,admin,metrics",
                     "--rate-limit", "100")
        self.assertEqual(k["scopes"], ["exec", "admin", "metrics"])
        self.assertEqual(k["rateLimit"], 100)
        for path in ("/exec/", "/admin/keys", "/metrics"):
            with self.subTest(path=path):
                st, headers, body = self.use(k["key"], path)
                self.assertEqual(st, 200, body)
                self.assertEqual(headers.get("RateLimit-Limit"), "100")

    def names(self):
        # The keys (their last use and usage change with the CLI's own requests).
        return sorted((k["id"], k["name"], k["enabled"])
                      for k in cli_json(self, self.state, "list")["keys"])

    def test_unknown_scope_is_refused(self):
        before = self.names()
        for scopes in ("exec,root", "", "Exec"):
            with self.subTest(scopes=scopes):
                p = cli(self.state, "create", "cli-bad", "--scopes", scopes)
                self.assertEqual(p.returncode, 1, p.stdout)
                self.assertIn(b"scope", p.stderr)
                self.assertNotRegex(p.stdout.decode(), authlib.KEY_RE)
        p = cli(self.state, "create", "cli-bad", "--scopes", "exec,root")
        self.assertIn(b"unknown scope `root`", p.stderr)
        self.assertEqual(self.names(), before)
        for args in (("create",), ("create", "x", "--rate-limit", "-3"),
                     ("create", "x", "--expires", "soon"),
                     # Lifetimes are bounded (100 years), far from overflowing an expiry time.
                     ("create", "x", "--expires", "9223372036854775807"),
                     ("create", "x", "--expires", "106751991167300d"),
                     ("rotate",), ("revoke", "key_nope"), ("delete", "key_nope"),
                     ("rotate", "key_nope"), ("frobnicate",)):
            with self.subTest(args=args):
                p = cli(self.state, *args)
                self.assertNotEqual(p.returncode, 0, p.stdout)
                self.assertTrue(p.stderr.strip())
        self.assertEqual(self.names(), before)

    def test_rotate_keeps_sessions_and_stops_the_old_secret(self):
        k = cli_json(self, self.state, "create", "cli-rotate")
        st, _, body = request(self.d, "POST", "/exec/", key=k["key"],
                              body={"id": "cli-rot", "template": authlib.TEMPLATE})
        self.assertEqual(st, 201, body)
        r = cli_json(self, self.state, "rotate", k["id"])
        self.assertEqual(r["id"], k["id"])
        self.assertRegex(r["key"], authlib.KEY_RE)
        assert_json_error(self, self.use(k["key"]), 401, "Invalid API key")
        st, _, body = self.use(r["key"])
        self.assertEqual(st, 200, body)
        self.assertEqual([s["id"] for s in body["sessions"]], ["cli-rot"])
        self.assertEqual(request(self.d, "DELETE", "/exec/cli-rot", key=r["key"])[0], 200)
        # The text form says the new key once too.
        p = cli(self.state, "rotate", k["id"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(len(authlib.KEY_RE.findall(p.stdout.decode())), 1)

    def test_delete_stops_the_key(self):
        k = cli_json(self, self.state, "create", "cli-delete")
        self.assertEqual(self.use(k["key"])[0], 200)
        r = cli_json(self, self.state, "delete", k["id"])
        self.assertEqual((r["success"], r["id"]), (True, k["id"]))
        assert_json_error(self, self.use(k["key"]), 401, "Invalid API key")
        self.assertNotIn(k["id"], authlib.list_keys(self.d))

    def test_expires(self):
        k = cli_json(self, self.state, "create", "cli-expiring", "--expires", "2s")
        self.assertIsNotNone(k["expiresAt"])
        self.assertEqual(self.use(k["key"])[0], 200)
        authlib.wait_until_expired(k)
        assert_json_error(self, self.use(k["key"]), 401, "API key expired")
        longer = cli_json(self, self.state, "create", "cli-30d", "--expires", "30d")
        days = (authlib.iso_epoch(longer["expiresAt"]) - authlib.iso_epoch(longer["createdAt"]))
        self.assertEqual(days, 30 * 86400)

    def test_list_never_shows_secrets(self):
        k = cli_json(self, self.state, "create", "cli-list")
        p = cli(self.state, "list")
        self.assertEqual(p.returncode, 0, p.stderr)
        text = p.stdout.decode()
        self.assertIn(k["id"], text)
        self.assertIn(k["prefix"], text)
        self.assertNotIn(k["key"], text)
        self.assertNotRegex(text, authlib.KEY_RE)
        listed = cli_json(self, self.state, "list")
        self.assertNotRegex(json.dumps(listed), authlib.KEY_RE)
        for entry in listed["keys"]:
            self.assertNotIn("key", entry)


if __name__ == "__main__":
    unittest.main()
