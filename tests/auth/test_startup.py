"""What the daemon does about keys when it starts and stops: the first-start admin key,
AUTH_ENABLED=false, the deprecated MCP_AUTH_TOKEN, no secret in the log, last-used times
written in batches."""

import json
import os
import secrets
import shutil
import socket
import sqlite3
import time
import unittest

import authlib
import harness
from authlib import assert_json_error, cli_json, request

MCP_INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-03-26", "capabilities": {},
                       "clientInfo": {"name": "auth-tests", "version": "1"}}}
MCP_HEADERS = {"Accept": "application/json, text/event-stream"}


def warnings(daemon, module="auth"):
    return [l["msg"] for l in daemon.logs() if l.get("level") == "warn" and
            l.get("module") == module]


def non_json_lines(text):
    out = []
    for line in text.splitlines():
        try:
            json.loads(line)
        except ValueError:
            out.append(line)
    return out


class FirstStartTest(unittest.TestCase):
    def setUp(self):
        authlib.require_ready()

    def test_admin_key_printed_once_then_never(self):
        state = authlib.new_state_dir(self)
        d = authlib.start_daemon(state_dir=state)
        self.addCleanup(d.stop, check=False)
        text = d.stderr()
        found = authlib.KEY_RE.findall(text)
        self.assertEqual(len(found), 1, text)
        key = found[0]
        self.assertEqual(d.admin_key, key)
        # stderr is not a terminal here: one log line like every other, the key in a field
        # of its own, and no line that is not JSON.
        self.assertEqual(non_json_lines(text), [])
        banner = [l for l in d.logs() if key in json.dumps(l)]
        self.assertEqual(len(banner), 1, banner)
        self.assertEqual(banner[0].get("key"), key)
        self.assertEqual(banner[0].get("module"), "auth")
        self.assertEqual(banner[0].get("url"), d.base_url)
        # Shown once the daemon serves, never before.
        order = [l.get("msg", "") for l in d.logs()]
        listening = next(i for i, m in enumerate(order) if m.startswith("listening on"))
        self.assertLess(listening, order.index(banner[0]["msg"]))
        # And kept: a file of the state directory only root can read.
        path = os.path.join(state, "admin-key")
        self.assertEqual(banner[0].get("keyFile"), path)
        self.assertEqual(os.stat(path).st_mode & 0o777, 0o600)
        with open(path, encoding="ascii") as f:
            self.assertEqual(f.read().strip(), key)
        keys = list(authlib.list_keys(d).values())
        self.assertEqual(len(keys), 1)
        self.assertEqual(keys[0]["scopes"], ["exec", "admin", "metrics"])
        self.assertTrue(key.startswith(keys[0]["prefix"]))
        self.assertIn(keys[0]["id"], text)
        d.stop()

        again = authlib.start_daemon(state_dir=state)
        self.addCleanup(again.stop, check=False)
        text = again.stderr()
        self.assertEqual(authlib.KEY_RE.findall(text), [], text)
        self.assertIsNone(again.admin_key)
        # It says where the key is kept, in a field of its own.
        said = [(l.get("module"), l.get("kept"), l.get("msg")) for l in again.logs()
                if l.get("keyFile") == path]
        self.assertEqual(said, [("auth", True, f"the admin key is in {path}")], text)
        st, _, body = request(again, "GET", "/admin/keys", key=key)
        self.assertEqual(st, 200, body)
        self.assertEqual(len(body["keys"]), 1)
        again.stop()

    def test_every_start_on_a_terminal_says_where_the_admin_key_is(self):
        state = authlib.new_state_dir(self)
        path = os.path.join(state, "admin-key")

        def start():
            d = harness.Daemon(env={**authlib.BASE_ENV, "SANDBOX_STATE_DIR": state}, tty=True)
            d.start()
            self.addCleanup(d.stop, check=False)
            d.wait_stderr("sandboxd is serving on")
            return d, d.stop()

        _, out = start()
        self.assertEqual(len(set(authlib.KEY_RE.findall(out))), 1, out)  # the first start's
        self.assertIn(f"(and kept in {path}, mode 0600)", out)
        _, out = start()
        self.assertEqual(authlib.KEY_RE.findall(out), [], out)
        self.assertIn(f"\nsandboxd: the admin key is in {path} (export "
                      f"SANDBOX_API_KEY=$(cat {path}))\n", out)
        # Gone (removed by hand): it says so, and how to make a key.
        os.unlink(path)
        _, out = start()
        self.assertIn(f"\nsandboxd: no admin key file ({path}); make a key with: sandbox keys "
                      f"create NAME --scopes exec,admin\n", out)
        self.assertNotIn("the admin key is in", out)

    def test_a_start_that_fails_does_not_use_up_the_key(self):
        state = authlib.new_state_dir(self)
        busy = socket.socket()
        self.addCleanup(busy.close)
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        failed = harness.Daemon(env={**authlib.BASE_ENV, "SANDBOX_STATE_DIR": state,
                                     "PORT": str(busy.getsockname()[1])})
        self.addCleanup(failed.kill)
        with self.assertRaises(AssertionError):
            failed.start()
        self.addCleanup(shutil.rmtree, failed.tmp, True)  # a failed start keeps its files
        self.assertEqual(authlib.KEY_RE.findall(failed.stderr()), [])
        self.assertFalse(os.path.exists(os.path.join(state, "admin-key")))
        # The next start that serves shows it.
        d = authlib.start_daemon(state_dir=state)
        self.addCleanup(d.stop, check=False)
        self.assertEqual(len(authlib.KEY_RE.findall(d.stderr())), 1)
        d.stop()

    def test_no_key_printed_when_keys_exist(self):
        state = authlib.new_state_dir(self)
        made = cli_json(self, state, "create", "made-first", "--scopes", "exec")
        d = authlib.start_daemon(state_dir=state)
        self.addCleanup(d.stop, check=False)
        self.assertEqual(authlib.KEY_RE.findall(d.stderr()), [])
        self.assertEqual(request(d, "GET", "/exec/", key=made["key"])[0], 200)
        d.stop()

    def test_auth_disabled(self):
        d = authlib.start_daemon(env={"AUTH_ENABLED": "false"})
        self.addCleanup(d.stop, check=False)
        self.assertTrue(any("AUTH_ENABLED=false" in m for m in warnings(d)), d.stderr())
        self.assertEqual(authlib.KEY_RE.findall(d.stderr()), [])
        for method, path, body in (("GET", "/exec/templates", None), ("GET", "/exec/", None),
                                   ("POST", "/exec/open/execute", {"command": "true"}),
                                   ("DELETE", "/exec/open", None), ("GET", "/metrics", None),
                                   ("GET", "/admin/keys", None)):
            with self.subTest(route=f"{method} {path}"):
                st, _, resp = request(d, method, path, body=body)
                self.assertEqual(st, 200, resp)
        # A key, good or not, changes nothing.
        self.assertEqual(request(d, "GET", "/exec/", key=authlib.UNKNOWN_KEY)[0], 200)
        d.stop()


class McpTokenTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        authlib.require_ready()
        cls.token = "mcp-" + secrets.token_hex(16)
        cls.d = authlib.start_daemon(env={"MCP_AUTH_TOKEN": cls.token})
        cls.addClassCleanup(cls.d.stop)

    def test_deprecation_warning(self):
        self.assertTrue(any("MCP_AUTH_TOKEN" in m and "deprecated" in m
                            for m in warnings(self.d)), self.d.stderr())

    def test_token_is_no_api_key(self):
        src = authlib.fresh_address()
        for path in ("/exec/templates", "/exec/", "/metrics", "/admin/keys"):
            for via in authlib.VIAS:
                with self.subTest(path=path, via=via):
                    resp = request(self.d, "GET", path, key=self.token, via=via, source=src)
                    assert_json_error(self, resp, 401, "Invalid API key")

    def test_token_accepted_on_mcp(self):
        st, _, body = request(self.d, "POST", "/mcp", body=MCP_INIT, headers=MCP_HEADERS)
        self.assertNotEqual(st, 404, "the daemon has no /mcp route")
        st, _, body = request(self.d, "POST", "/mcp", body=MCP_INIT, headers=MCP_HEADERS,
                              key=self.token)
        self.assertTrue(200 <= st < 300, (st, body))
        src = authlib.fresh_address()
        for key, message in ((None, "API key required"),
                             (self.token + "x", "Invalid API key"),
                             (self.token[:-1], "Invalid API key")):
            with self.subTest(key=key):
                resp = request(self.d, "POST", "/mcp", body=MCP_INIT, headers=MCP_HEADERS,
                               key=key, source=src)
                assert_json_error(self, resp, 401, message)
        # API keys with the exec scope work there too; other scopes do not.
        exec_key = authlib.create_key(self.d, "mcp-exec", ["exec"])["key"]
        st, _, body = request(self.d, "POST", "/mcp", body=MCP_INIT, headers=MCP_HEADERS,
                              key=exec_key)
        self.assertTrue(200 <= st < 300, (st, body))
        metrics_key = authlib.create_key(self.d, "mcp-metrics", ["metrics"])["key"]
        resp = request(self.d, "POST", "/mcp", body=MCP_INIT, headers=MCP_HEADERS,
                       key=metrics_key)
        assert_json_error(self, resp, 403)


class SecretsAndLastUsedTest(unittest.TestCase):
    def setUp(self):
        authlib.require_ready(cli=True)

    def test_log_holds_no_secret_and_last_used_is_batched(self):
        state = authlib.new_state_dir(self)
        admin = cli_json(self, state, "create", "admin", "--scopes", "exec,admin,metrics")
        used = cli_json(self, state, "create", "used")
        later = cli_json(self, state, "create", "used-later")
        idle = cli_json(self, state, "create", "never-used")
        revoked = cli_json(self, state, "create", "revoked")
        cli_json(self, state, "revoke", revoked["id"])
        token = "mcp-" + secrets.token_hex(16)
        started = time.monotonic()
        d = authlib.start_daemon(env={"MCP_AUTH_TOKEN": token, "LOG_LEVEL": "trace"},
                                 state_dir=state)
        self.addCleanup(d.stop, check=False)
        a = d.admin_key = admin["key"]
        secret_list = [admin["key"], used["key"], later["key"], idle["key"], revoked["key"],
                       token, authlib.UNKNOWN_KEY]

        # Every way of sending a key, on routes with and without query strings of their own,
        # good keys and bad ones.
        for via in authlib.VIAS:
            for key in (used["key"], revoked["key"], authlib.UNKNOWN_KEY, token):
                request(d, "GET", "/exec/templates", key=key, via=via)
            st, _, body = request(d, "POST", "/exec/logged/execute", key=used["key"], via=via,
                                  body={"command": "echo hi"})
            self.assertEqual(st, 200, body)
            request(d, "POST", "/exec/logged/write", key=used["key"], via=via,
                    body={"path": "f", "content": "x"})
            st, _, _ = request(d, "GET", "/exec/logged/read?path=f&encoding=utf8",
                               key=used["key"], via=via)
            self.assertEqual(st, 200)
            request(d, "GET", "/exec/logged/files?recursive=true", key=used["key"], via=via)
            request(d, "GET", "/metrics", key=a, via=via)
            request(d, "GET", "/nowhere", key=used["key"], via=via)
            request(d, "POST", "/mcp", key=token, via=via, body=MCP_INIT, headers=MCP_HEADERS)
        request(d, "GET", "/exec/templates",
                headers={"X-API-Key": used["key"], "Authorization": f"Basic {used['key']}"})
        # Secrets made and shown while the daemon runs.
        made = authlib.create_key(d, "made-over-http")
        st, _, rotated = request(d, "POST", f"/admin/keys/{made['id']}/rotate", key=a)
        self.assertEqual(st, 200)
        secret_list += [made["key"], rotated["key"]]
        request(d, "GET", "/exec/", key=rotated["key"], via="api_key")
        request(d, "DELETE", "/exec/logged", key=used["key"], via="apiKey")

        # Last-used times are kept in memory, not written per request: the database still
        # says "never" (unless the periodic write came in between). Read by a reader of its
        # own (the CLI goes through the daemon, whose list writes them first).
        db = sqlite3.connect(f"file:{state}/sandboxd.db?mode=ro", uri=True)
        last = db.execute("SELECT last_used FROM api_keys WHERE id = ?",
                          (used["id"],)).fetchone()[0]
        db.close()
        if time.monotonic() - started < authlib.LAST_USED_FLUSH_S - 5:
            self.assertEqual(last, 0)
        # The API shows them.
        keys = authlib.list_keys(d)
        self.assertIsNotNone(keys[used["id"]]["lastUsedAt"])
        self.assertIsNone(keys[idle["id"]]["lastUsedAt"])
        self.assertIsNone(keys[revoked["id"]]["lastUsedAt"])
        self.assertIsNone(keys[later["id"]]["lastUsedAt"])
        # A key used after that is written when the daemon stops.
        self.assertEqual(request(d, "GET", "/exec/", key=later["key"])[0], 200)
        stopped_at = time.time()
        log = d.stop()

        listed = {k["id"]: k for k in cli_json(self, state, "list")["keys"]}
        for k in (used, later):
            last = listed[k["id"]]["lastUsedAt"]
            self.assertIsNotNone(last, k["name"])
            self.assertLessEqual(abs(authlib.iso_epoch(last) - stopped_at), 60)
        self.assertIsNone(listed[idle["id"]]["lastUsedAt"])

        # The log is the access log at its most verbose, and it saw the requests.
        self.assertIn('"route":"/exec/:id/read"', log)
        for secret in secret_list:
            with self.subTest(secret=secret[:10]):
                self.assertNotIn(secret, log)
                # Nor its random part, however it might have been quoted or cut.
                self.assertNotIn(secret[-24:], log)


if __name__ == "__main__":
    unittest.main()
