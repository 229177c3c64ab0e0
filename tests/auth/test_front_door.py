"""The front door under hostile clients: per-key quotas (sessions, running commands, MCP
sessions, file operations in flight) decided at the request's head, failed keys throttled
without locking valid keys out, cross-site requests and foreign Host names refused on every
route with authentication on and off, files at rest closed to others, /health without
tenants' figures, and the log not repeating one warning per attempt."""

import json
import os
import socket
import stat
import threading
import time
import unittest

import authlib
from authlib import assert_json_error, request


def raw_request(daemon, head, source="127.0.0.1"):
    """A socket with `head` (bytes) sent and nothing read yet."""
    s = socket.create_connection((daemon.host, daemon.port), timeout=30,
                                 source_address=(source, 0))
    s.sendall(head)
    return s


def read_reply(sock):
    """Status and JSON body of the one reply on sock (read to its end)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            break
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:])}
    length = int(headers.get("content-length", "0"))
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, json.loads(rest[:length]) if length else None


def mcp_initialize(daemon, key):
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "quota-test", "version": "1"}}}
    return request(daemon, "POST", "/mcp", body=body, key=key,
                   headers={"Accept": "application/json, text/event-stream"})


class QuotaTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        authlib.require_ready(cli=True)
        cls.state = authlib.new_state_dir(cls)
        cls.d = authlib.start_daemon(env={"SANDBOX_KEY_MAX_SESSIONS": "2",
                                          "SANDBOX_MAX_SESSIONS": "8",
                                          "SANDBOX_WARM_POOL": "0"},
                                     state_dir=cls.state)
        cls.addClassCleanup(cls.d.stop)

    def key(self, name, **kw):
        k = authlib.create_key(self.d, name, ["exec"], **kw)
        return k

    def create(self, key, sid):
        return request(self.d, "POST", "/exec", body={"id": sid}, key=key)

    def destroy_all(self, key, ids):
        for sid in ids:
            request(self.d, "DELETE", f"/exec/{sid}", key=key)

    def test_one_key_cannot_take_every_session(self):
        a = self.key("tenant-a")["key"]
        b = self.key("tenant-b")["key"]
        self.addCleanup(self.destroy_all, a, ["qa-1", "qa-2", "qa-3"])
        self.addCleanup(self.destroy_all, b, ["qb-1"])
        self.assertEqual(self.create(a, "qa-1")[0], 201)
        self.assertEqual(self.create(a, "qa-2")[0], 201)
        st, headers, body = self.create(a, "qa-3")
        self.assertEqual(st, 429, body)
        self.assertIn("Quota `sessions` reached", body["error"])
        self.assertIn("2 of its 2 sessions", body["error"])
        # Implicit creation is held to the same quota.
        st, _, body = request(self.d, "POST", "/exec/qa-3/execute", body={"command": "true"},
                              key=a)
        self.assertEqual(st, 429, body)
        self.assertIn("sessions", body["error"])
        # The other tenant still has room.
        self.assertEqual(self.create(b, "qb-1")[0], 201)
        # Room again once one of its own is gone.
        self.assertEqual(request(self.d, "DELETE", "/exec/qa-1", key=a)[0], 200)
        self.assertEqual(self.create(a, "qa-3")[0], 201)

    def test_admin_keys_have_no_default_quota_and_overrides_apply_at_once(self):
        adm = authlib.create_key(self.d, "operator", ["exec", "admin"])
        ids = [f"adm-{i}" for i in range(3)]
        self.addCleanup(self.destroy_all, adm["key"], ids)
        for sid in ids:
            self.assertEqual(self.create(adm["key"], sid)[0], 201, sid)
        # An override of its own binds it from its next request.
        st, _, body = authlib.admin(self.d, "PATCH", f"/admin/keys/{adm['id']}",
                                    {"quotas": {"sessions": 3}})
        self.assertEqual(st, 200, body)
        self.assertEqual(body["quotas"], {"sessions": 3})
        self.assertEqual(body["usage"]["sessions"], {"used": 3, "limit": 3})
        st, _, body = self.create(adm["key"], "adm-3")
        self.assertEqual(st, 429, body)
        self.assertIn("3 of its 3", body["error"])
        # Back to the default (none for an admin key).
        st, _, body = authlib.admin(self.d, "PATCH", f"/admin/keys/{adm['id']}",
                                    {"quotas": {"sessions": None}})
        self.assertEqual((st, body["quotas"]), (200, {}))
        self.assertEqual(body["usage"]["sessions"]["limit"], None)

    def test_a_quota_of_zero_means_none_of_its_own_and_the_cap_stays(self):
        k = self.key("unbounded", quotas={"sessions": 0})
        self.assertEqual(k["quotas"], {"sessions": 0})
        ids = [f"ub-{i}" for i in range(9)]
        self.addCleanup(self.destroy_all, k["key"], ids)
        made = [self.create(k["key"], sid) for sid in ids]
        statuses = [m[0] for m in made]
        # Past its default of 2, up to the server's cap of 8 (others may hold some).
        self.assertGreater(statuses.count(201), 2, statuses)
        refused = [m for m in made if m[0] != 201]
        self.assertTrue(refused, statuses)
        self.assertEqual(refused[0][0], 429)
        self.assertIn("limit of 8 sessions", refused[0][2]["error"])

    def test_bad_quotas_are_refused_clearly(self):
        for quotas, word in (({"cpus": 1}, "unknown quota `cpus`"),
                             ({"sessions": -1}, "integer from 0"),
                             ({"sessions": "many"}, "integer from 0"),
                             ([1], "must be an object")):
            st, _, body = authlib.admin(self.d, "POST", "/admin/keys",
                                        {"name": "bad", "quotas": quotas})
            self.assertEqual(st, 400, body)
            self.assertIn(word, body["error"])
        k = self.key("patched")
        st, _, body = authlib.admin(self.d, "PATCH", f"/admin/keys/{k['id']}",
                                    {"name": "renamed"})
        self.assertEqual(st, 400, body)
        assert_json_error(self, authlib.admin(self.d, "PATCH", "/admin/keys/key_nope",
                                              {"quotas": {}}), 404)
        # Only admins change quotas.
        st, _, _ = request(self.d, "PATCH", f"/admin/keys/{k['id']}",
                           body={"quotas": {"sessions": 100}}, key=k["key"])
        self.assertEqual(st, 403)

    def test_running_commands_quota(self):
        k = self.key("one-command", quotas={"commands": 1})
        self.addCleanup(self.destroy_all, k["key"], ["cmdq"])
        self.assertEqual(self.create(k["key"], "cmdq")[0], 201)
        done = {}

        def long_command():
            done["r"] = request(self.d, "POST", "/exec/cmdq/execute",
                                body={"command": "touch started; sleep 3"},
                                key=k["key"], timeout=60)

        t = threading.Thread(target=long_command, daemon=True)
        t.start()
        self.addCleanup(t.join, 60)
        # Wait for it to be running.
        for _ in range(200):
            st, _, body = request(self.d, "GET", "/exec/cmdq/read?path=started",
                                  key=k["key"])
            if st == 200:
                break
            time.sleep(0.05)
        else:
            self.fail("the first command never started")
        # A second one is refused at its head: its announced body is never read.
        sock = raw_request(self.d, (
            "POST /exec/cmdq/execute HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {k['key']}\r\nContent-Type: application/json\r\n"
            "Content-Length: 50000000\r\n\r\n").encode())
        with sock:
            st, body = read_reply(sock)
        self.assertEqual(st, 429, body)
        self.assertIn("Quota `commands` reached", body["error"])
        t.join(60)
        self.assertEqual(done["r"][0], 200, done["r"])
        st, _, body = request(self.d, "POST", "/exec/cmdq/execute", body={"command": "true"},
                              key=k["key"])
        self.assertEqual(st, 200, body)

    def test_file_operations_in_flight_quota(self):
        k = self.key("one-file-op", quotas={"fileOps": 1})
        self.addCleanup(self.destroy_all, k["key"], ["fileq"])
        self.assertEqual(self.create(k["key"], "fileq")[0], 201)
        # A write whose body is still coming is in flight from its head on.
        writer = raw_request(self.d, (
            "POST /exec/fileq/write HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {k['key']}\r\nContent-Type: application/json\r\n"
            "Content-Length: 1000\r\n\r\n{\"path\": \"slow\", ").encode())
        try:
            for _ in range(200):
                st, _, body = request(self.d, "GET", "/exec/fileq/files", key=k["key"])
                if st == 429:
                    break
                time.sleep(0.05)
            self.assertEqual(st, 429, body)
            self.assertIn("Quota `fileOps` reached", body["error"])
            st, _, body = request(self.d, "GET", "/exec/fileq/read?path=x", key=k["key"])
            self.assertEqual(st, 429, body)
            # Another key is not held back.
            other = self.key("other-files")["key"]
            st, _, _ = request(self.d, "GET", "/exec/fileq/files", key=other)
            self.assertEqual(st, 404)
        finally:
            writer.close()
        for _ in range(200):
            st, _, body = request(self.d, "GET", "/exec/fileq/files", key=k["key"])
            if st != 429:
                break
            time.sleep(0.05)
        self.assertEqual(st, 200, body)

    def test_watch_streams_quota(self):
        k = self.key("one-watch", quotas={"watches": 1})
        self.addCleanup(self.destroy_all, k["key"], ["watchq"])
        self.assertEqual(self.create(k["key"], "watchq")[0], 201)
        head = ("GET /exec/watchq/watch?path=. HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {k['key']}\r\n\r\n").encode()
        watcher = raw_request(self.d, head)
        try:
            watcher.settimeout(60)
            got = b""
            while b"ready" not in got:
                chunk = watcher.recv(4096)
                self.assertTrue(chunk, got)
                got += chunk
            self.assertIn(b" 200 ", got.split(b"\r\n", 1)[0])
            st, headers, body = request(self.d, "GET", "/exec/watchq/watch?path=.", key=k["key"])
            self.assertEqual(st, 429, body)
            self.assertIn("Quota `watches` reached", body["error"])
            self.assertIn("SANDBOX_KEY_MAX_WATCHES", body["error"])
            # Another key is not held back by it.
            other = self.key("other-watches")["key"]
            st, _, _ = request(self.d, "GET", "/exec/watchq/watch?path=.", key=other)
            self.assertEqual(st, 404)
        finally:
            watcher.close()
        # Once the stream is gone, the key may watch again.
        for _ in range(200):
            st, _, body = request(self.d, "GET", "/exec/watchq/watch?path=.&timeoutMs=1",
                                  key=k["key"])
            if st != 429:
                break
            time.sleep(0.05)
        self.assertEqual(st, 200, body)

    def test_mcp_sessions_quota(self):
        k = self.key("one-mcp", quotas={"mcpSessions": 1})
        st, headers, body = mcp_initialize(self.d, k["key"])
        self.assertEqual(st, 200, body)
        sid = headers["Mcp-Session-Id"]
        st, _, body = mcp_initialize(self.d, k["key"])
        self.assertEqual(st, 429, body)
        self.assertIn("Quota `mcpSessions` reached", body["error"]["message"])
        # Ending it gives the unit back.
        st, _, _ = request(self.d, "DELETE", "/mcp", key=k["key"],
                           headers={"Mcp-Session-Id": sid})
        self.assertIn(st, (200, 204))
        self.assertEqual(mcp_initialize(self.d, k["key"])[0], 200)

    def test_cli_sets_quotas_on_the_database(self):
        k = self.key("cli-quota")
        out = authlib.cli_json(self, self.state, "set", k["id"], "--quota", "sessions=1",
                               "--quota", "fileOps=5", "--rate-limit", "500")
        self.assertEqual(out["quotas"], {"sessions": 1, "fileOps": 5})
        self.assertEqual(out["rateLimit"], 500)
        self.addCleanup(self.destroy_all, k["key"], ["cq-1", "cq-2"])
        self.assertEqual(self.create(k["key"], "cq-1")[0], 201)
        st, _, body = self.create(k["key"], "cq-2")
        self.assertEqual(st, 429, body)
        out = authlib.cli_json(self, self.state, "set", k["id"], "--quota",
                               "sessions=default")
        self.assertEqual(out["quotas"], {"fileOps": 5})
        created = authlib.cli_json(self, self.state, "create", "cli-made", "--quota",
                                   "commands=3")
        self.assertEqual(created["quotas"], {"commands": 3})
        p = authlib.cli(self.state, "set", k["id"], "--quota", "cpus=1")
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"KIND=N", p.stderr)


MiB = 1 << 20


class ByteQuotaTest(unittest.TestCase):
    """The bytes a key's sessions are promised: their memory limits and their disks' sizes,
    forks and hibernated sessions included, each a quota of its own."""

    @classmethod
    def setUpClass(cls):
        authlib.require_ready(cli=True)
        cls.state = authlib.new_state_dir(cls)
        cls.d = authlib.start_daemon(env={"SANDBOX_KEY_MAX_SESSIONS": "16",
                                          "SANDBOX_MAX_SESSIONS": "32",
                                          "SANDBOX_KEY_MAX_MEMORY_BYTES": "512M",
                                          "SANDBOX_KEY_MAX_DISK_BYTES": "3G",
                                          "SANDBOX_DISK_OVERCOMMIT": "1000",
                                          "SANDBOX_WARM_POOL": "0"},
                                     state_dir=cls.state)
        cls.addClassCleanup(cls.d.stop)

    def create(self, key, sid, **fields):
        self.addCleanup(request, self.d, "DELETE", f"/exec/{sid}", key=key)
        return request(self.d, "POST", "/exec", body={"id": sid, **fields}, key=key,
                       timeout=120)

    def usage(self, key_id):
        st, _, body = authlib.admin(self.d, "GET", "/admin/keys")
        self.assertEqual(st, 200, body)
        keys = body["keys"] if isinstance(body, dict) else body
        return next(k for k in keys if k["id"] == key_id)["usage"]

    def test_memory_limits_add_up_per_key(self):
        a = self.key("mem-a")
        b = self.key("mem-b")
        big = {"resources": {"memoryBytes": 256 * MiB}, "storage": "tmpfs"}
        self.assertEqual(self.create(a["key"], "mq-1", **big)[0], 201)
        self.assertEqual(self.create(a["key"], "mq-2", **big)[0], 201)
        self.assertEqual(self.usage(a["id"])["memoryBytes"], {"used": 512 * MiB,
                                                             "limit": 512 * MiB})
        st, headers, body = self.create(a["key"], "mq-3",
                                        resources={"memoryBytes": 16 * MiB}, storage="tmpfs")
        self.assertEqual(st, 429, body)
        self.assertIn("Quota `memoryBytes` reached", body["error"])
        self.assertIn("512 MiB of its 512 MiB", body["error"])
        self.assertIn("SANDBOX_KEY_MAX_MEMORY_BYTES", body["error"])
        # A refusal holds nothing, and another key has its own share.
        self.assertEqual(self.usage(a["id"])["sessions"]["used"], 2)
        self.assertEqual(self.create(b["key"], "mq-b", **big)[0], 201)
        # A session gone gives its memory back.
        self.assertEqual(request(self.d, "DELETE", "/exec/mq-1", key=a["key"])[0], 200)
        self.assertEqual(self.usage(a["id"])["memoryBytes"]["used"], 256 * MiB)
        self.assertEqual(self.create(a["key"], "mq-4", **big)[0], 201)

    def test_disks_add_up_per_key_and_tmpfs_holds_none(self):
        k = self.key("disk-a")
        one = {"resources": {"memoryBytes": 32 * MiB, "diskBytes": 1024 * MiB},
               "storage": "disk"}
        for i in range(3):
            st, _, body = self.create(k["key"], f"dq-{i}", **one)
            self.assertEqual(st, 201, body)
        st, _, body = self.create(k["key"], "dq-3", **one)
        self.assertEqual(st, 429, body)
        self.assertIn("Quota `diskBytes` reached", body["error"])
        self.assertIn("3 GiB of its 3 GiB", body["error"])
        # Implicit creation is held to it too.
        st, _, body = request(self.d, "POST", "/exec/dq-4/execute", body={"command": "true"},
                              key=k["key"])
        self.assertEqual(st, 429, body)
        self.assertIn("diskBytes", body["error"])
        # A workspace in memory takes no disk (its bytes are memory's).
        st, _, body = self.create(k["key"], "dq-t", storage="tmpfs",
                                  resources={"memoryBytes": 32 * MiB})
        self.assertEqual(st, 201, body)
        self.assertEqual(self.usage(k["id"])["diskBytes"]["used"], 3 * 1024 * MiB)

    def test_forks_take_what_their_parent_holds(self):
        k = self.key("fork-a", quotas={"memoryBytes": 96 * MiB})
        st, _, body = self.create(k["key"], "fq-0", storage="disk",
                                  resources={"memoryBytes": 32 * MiB, "diskBytes": 64 * MiB})
        self.assertEqual(st, 201, body)
        st, _, body = request(self.d, "POST", "/exec/fq-0/fork", body={"count": 3},
                              key=k["key"], timeout=120)
        self.assertEqual(st, 429, body)
        self.assertIn("memoryBytes", body["error"])
        self.assertEqual(self.usage(k["id"])["memoryBytes"]["used"], 32 * MiB)
        st, _, body = request(self.d, "POST", "/exec/fq-0/fork", body={"count": 2},
                              key=k["key"], timeout=120)
        self.assertEqual(st, 201, body)
        for f in body["sessions"]:
            self.addCleanup(request, self.d, "DELETE", f"/exec/{f['id']}", key=k["key"])
        self.assertEqual(self.usage(k["id"])["memoryBytes"]["used"], 96 * MiB)
        self.assertEqual(self.usage(k["id"])["diskBytes"]["used"], 3 * 64 * MiB)

    def test_own_quotas_in_bytes_and_bad_ones(self):
        k = self.key("own-bytes")
        st, _, body = authlib.admin(self.d, "PATCH", f"/admin/keys/{k['id']}",
                                    {"quotas": {"memoryBytes": 64 * MiB, "diskBytes": 0}})
        self.assertEqual(st, 200, body)
        self.assertEqual(body["usage"]["memoryBytes"]["limit"], 64 * MiB)
        self.assertIsNone(body["usage"]["diskBytes"]["limit"])
        st, _, body = self.create(k["key"], "ob-1", storage="tmpfs",
                                  resources={"memoryBytes": 128 * MiB})
        self.assertEqual(st, 429, body)
        for bad in ({"memoryBytes": -1}, {"memoryBytes": 1 << 51}, {"diskBytes": "8G"}):
            st, _, body = authlib.admin(self.d, "PATCH", f"/admin/keys/{k['id']}",
                                        {"quotas": bad})
            self.assertEqual(st, 400, (bad, body))
            self.assertIn("quota `", body["error"])
        out = authlib.cli_json(self, self.state, "set", k["id"], "--quota",
                               "memoryBytes=8G", "--quota", "diskBytes=default")
        self.assertEqual(out["quotas"], {"memoryBytes": 8 << 30})
        p = authlib.cli(self.state, "set", k["id"], "--quota", "diskBytes=lots")
        self.assertEqual(p.returncode, 2)
        self.assertIn(b"takes a size", p.stderr)

    def key(self, name, **kw):
        return authlib.create_key(self.d, name, ["exec"], **kw)


class ThrottleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        authlib.require_ready()
        cls.d = authlib.start_daemon()
        cls.addClassCleanup(cls.d.stop)
        cls.key = authlib.create_key(cls.d, "valid", ["exec"])["key"]

    def test_failures_of_others_never_lock_a_valid_key_out(self):
        src = authlib.fresh_address()
        for i in range(authlib.FAIL_LIMIT + 20):
            request(self.d, "GET", "/exec/", key=f"{authlib.PREFIX}{i:032x}", source=src)
        st, _, body = request(self.d, "GET", "/exec/", key=authlib.UNKNOWN_KEY, source=src)
        self.assertEqual(st, 429, body)
        # The valid key from the same address at the same moment: accepted.
        for _ in range(5):
            st, _, body = request(self.d, "GET", "/exec/", key=self.key, source=src)
            self.assertEqual(st, 200, body)
        # And a missing key is still a throttled failure.
        self.assertEqual(request(self.d, "GET", "/exec/", source=src)[0], 429)

    def test_routes_without_a_key_are_no_way_around_the_throttle(self):
        src = authlib.fresh_address()
        for i in range(authlib.FAIL_LIMIT):
            st, _, body = request(self.d, "GET", "/health", key=f"{authlib.PREFIX}{i:032x}",
                                  source=src)
            self.assertEqual(st, 200)
            self.assertNotIn("sessions", body)
        # Bad keys sent to /health counted: the address is throttled now.
        self.assertEqual(request(self.d, "GET", "/exec/", key=authlib.UNKNOWN_KEY,
                                 source=src)[0], 429)
        # A key in the query is not read there (URLs travel into logs).
        metrics = authlib.create_key(self.d, "m", ["metrics"])["key"]
        body = request(self.d, "GET", "/health", key=metrics, via="api_key")[2]
        self.assertNotIn("sessions", body)
        body = request(self.d, "GET", "/health", key=metrics, via="x-api-key")[2]
        self.assertIn("sessions", body)


class CrossSiteTest(unittest.TestCase):
    """Run with authentication on and, in the subclass, off."""
    env = {}

    @classmethod
    def setUpClass(cls):
        authlib.require_ready()
        cls.d = authlib.start_daemon(env={"SANDBOX_ALLOWED_ORIGINS": "https://app.example",
                                          "SANDBOX_ALLOWED_HOSTS":
                                              "localhost,sandbox.example,*.preview.example",
                                          **cls.env})
        cls.addClassCleanup(cls.d.stop)
        cls.key = (authlib.create_key(cls.d, "web", ["exec"])["key"]
                   if cls.env.get("AUTH_ENABLED") != "false" else None)

    def execute(self, headers, body=b'{"command": "echo ran"}'):
        return request(self.d, "POST", "/exec/xsite/execute", body=body, key=self.key,
                       headers=headers)

    def test_foreign_origins_are_refused_on_every_route_and_content_type(self):
        for origin in ("https://evil.example", "null", "http://localhost.evil.example",
                       "https://app.example.evil"):
            for ctype in ("text/plain", "application/json",
                          "application/x-www-form-urlencoded"):
                st, _, body = self.execute({"Origin": origin, "Content-Type": ctype})
                self.assertEqual(st, 403, (origin, ctype, body))
                self.assertIn("Origin", body["error"])
            for method, path in (("GET", "/exec"), ("GET", "/health"), ("GET", "/metrics"),
                                 ("DELETE", "/exec/xsite"), ("GET", "/exec/templates")):
                st, _, body = request(self.d, method, path, key=self.key,
                                      headers={"Origin": origin})
                self.assertEqual(st, 403, (origin, path, body))
        # A browser's GET without an Origin still says it is cross-site.
        st, _, body = request(self.d, "GET", "/exec", key=self.key,
                              headers={"Sec-Fetch-Site": "cross-site"})
        self.assertEqual(st, 403, body)

    def test_clients_without_origin_and_allowed_origins_work(self):
        self.addCleanup(request, self.d, "DELETE", "/exec/xsite", key=self.key)
        # curl without a Content-Type, SDKs with one.
        st, _, body = self.execute({})
        self.assertEqual(st, 200, body)
        self.assertEqual(body["output"][0]["data"], "ran\n", body)
        for origin in ("https://app.example", "http://localhost:5173", "http://127.0.0.1",
                       f"http://127.0.0.1:{self.d.port}"):
            st, _, body = self.execute({"Origin": origin, "Content-Type": "application/json"})
            self.assertEqual(st, 200, (origin, body))
        for site in ("same-origin", "none"):
            st, _, _ = request(self.d, "GET", "/exec", key=self.key,
                               headers={"Sec-Fetch-Site": site})
            self.assertEqual(st, 200, site)

    def test_host_names_are_checked(self):
        for host in ("evil.example", f"evil.example:{self.d.port}", "localhost.evil.example",
                     "preview.example", "a.b", "bad host", "x:notaport"):
            st, _, body = request(self.d, "GET", "/exec", key=self.key, headers={"Host": host})
            self.assertEqual(st, 403, (host, body))
            self.assertIn("SANDBOX_ALLOWED_HOSTS", body["error"])
        for host in (f"localhost:{self.d.port}", "sandbox.example", "SANDBOX.example:443",
                     "p-1.preview.example", f"127.0.0.1:{self.d.port}", "[::1]:80",
                     "10.1.2.3"):
            st, _, body = request(self.d, "GET", "/exec", key=self.key, headers={"Host": host})
            self.assertEqual(st, 200, (host, body))
        # A same-origin page under an allowed name.
        st, _, body = request(self.d, "GET", "/exec", key=self.key,
                              headers={"Host": "sandbox.example:8080",
                                       "Origin": "https://sandbox.example:8080"})
        self.assertEqual(st, 200, body)

    def test_e2b_header_form_names_are_checked(self):
        """E2B's data plane addressed by E2b-Sandbox-Id comes under the API's own names: a
        page of a rebound name is refused. Its Origin is not checked: it takes no credential a
        browser adds by itself, so a page of another site gains nothing there."""
        self.addCleanup(request, self.d, "DELETE", "/exec/e2bhost", key=self.key)
        st, _, body = request(self.d, "POST", "/exec", key=self.key,
                              body={"id": "e2bhost", "template": "base"})
        self.assertEqual(st, 201, body)
        st, _, body = request(self.d, "GET", "/exec/e2bhost/preview", key=self.key)
        self.assertEqual(st, 200, body)
        sbx = {"E2b-Sandbox-Id": body["name"], "E2b-Sandbox-Port": "49983"}
        for host in ("evil.example", f"rebind.example:{self.d.port}"):
            st, _, body = request(self.d, "GET", "/health", headers={**sbx, "Host": host})
            self.assertEqual(st, 403, (host, body))
            self.assertIn("SANDBOX_ALLOWED_HOSTS", json.dumps(body))
        st, _, body = request(self.d, "GET", "/health", headers={**sbx, "Host": "localhost"})
        self.assertEqual(st, 204, body)
        # A foreign page with every cookie it could make a browser send reaches nothing
        # that needs the envd token.
        token = request(self.d, "GET", "/exec/e2bhost/preview", key=self.key)[2]["token"]
        st, _, body = request(self.d, "POST", "/process.Process/List", body={},
                              headers={**sbx, "Host": "localhost",
                                       "Origin": "https://evil.example",
                                       "Cookie": f"sandbox_token={token}"})
        self.assertIn(st, (401, 403), body)

    def test_mcp_refusals_are_json_rpc(self):
        st, _, body = request(self.d, "POST", "/mcp", key=self.key, body={},
                              headers={"Origin": "https://evil.example"})
        self.assertEqual(st, 403, body)
        self.assertIn("Origin", body["error"]["message"])


class CrossSiteWithoutAuthTest(CrossSiteTest):
    env = {"AUTH_ENABLED": "false"}


class DefaultHostsTest(unittest.TestCase):
    def test_loopback_names_by_default(self):
        authlib.require_ready()
        d = authlib.start_daemon()
        self.addCleanup(d.stop)
        for host, want in (("localhost", 200), (f"localhost:{d.port}", 200),
                           ("app.localhost", 200), ("127.0.0.1", 200),
                           ("rebind.example", 403), ("localhost.example", 403)):
            st, _, body = request(d, "GET", "/health", headers={"Host": host})
            self.assertEqual(st, want, (host, body))


    def test_every_address_is_like_loopback(self):
        # Runs in a network namespace of its own in `make test` (scripts/isolated.sh).
        authlib.require_ready()
        d = authlib.start_daemon(env={"HOST": "0.0.0.0"})
        self.addCleanup(d.stop)
        d.host = "127.0.0.1"
        for host, want in (("localhost", 200), (socket.gethostname(), 200),
                           ("127.0.0.1:1", 200), ("evil.example", 403)):
            st, _, body = request(d, "GET", "/health", headers={"Host": host})
            self.assertEqual(st, want, (host, body))

    def test_the_unix_socket_takes_any_host_name(self):
        authlib.require_ready()
        path = os.path.join(authlib.new_state_dir(self), "api.sock")
        d = authlib.start_daemon(env={"SANDBOX_SOCKET": path,
                                      "SANDBOX_ALLOWED_HOSTS": "sandbox.example"})
        self.addCleanup(d.stop)
        self.assertEqual(request(d, "GET", "/health", headers={"Host": "localhost"})[0], 403)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(path)
        with s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
            st, body = read_reply(s)
        self.assertEqual(st, 200, body)


class AtRestAndHealthTest(unittest.TestCase):
    def test_state_files_are_private_and_health_shows_no_figures_without_a_key(self):
        authlib.require_ready()
        state = authlib.new_state_dir(self)
        os.chmod(state, 0o755)  # made by someone else, open to all
        d = authlib.start_daemon(state_dir=state)
        self.addCleanup(d.stop)
        metrics = authlib.create_key(d, "metrics", ["metrics"])["key"]
        exec_key = authlib.create_key(d, "exec", ["exec"])["key"]
        self.assertEqual(stat.S_IMODE(os.stat(state).st_mode), 0o700)
        for name in ("sandboxd.db", "sandboxd.db-wal", "sandboxd.db-shm", "admin-key"):
            path = os.path.join(state, name)
            if os.path.exists(path):
                self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o600, name)
        self.assertTrue(os.path.exists(os.path.join(state, "sandboxd.db")))

        st, _, body = request(d, "GET", "/health")
        self.assertEqual(st, 200)
        self.assertEqual(body["status"], "ok")
        self.assertNotIn("sessions", body)
        self.assertNotIn("warmPool", body)
        for key in (exec_key, authlib.UNKNOWN_KEY):
            self.assertNotIn("sessions", request(d, "GET", "/health", key=key)[2])
        body = request(d, "GET", "/health", key=metrics)[2]
        self.assertIsInstance(body["sessions"], int)
        self.assertIsInstance(body["warmPool"], int)

    def test_a_database_made_by_the_cli_is_private(self):
        authlib.require_ready(cli=True)
        state = os.path.join(authlib.new_state_dir(self), "fresh")
        p = authlib.cli(state, "create", "first")
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertEqual(stat.S_IMODE(os.stat(state).st_mode), 0o700)
        self.assertEqual(stat.S_IMODE(os.stat(os.path.join(state, "sandboxd.db")).st_mode),
                         0o600)


class UnauthenticatedBodyAndLogTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        authlib.require_ready()
        cls.d = authlib.start_daemon()
        cls.addClassCleanup(cls.d.stop)

    def test_routes_without_a_key_take_no_large_body(self):
        sock = raw_request(self.d, (b"GET /health HTTP/1.1\r\nHost: localhost\r\n"
                                    b"Content-Length: 1048576\r\n\r\n"))
        with sock:
            st, body = read_reply(sock)
        self.assertEqual(st, 413, body)
        # The routes anyone may call are GETs: they take no body at all.
        self.assertIn("takes no request body", body["error"])

    def test_a_flood_of_refusals_writes_a_bounded_log(self):
        def counts():
            logs = self.d.logs()
            return (sum(1 for ln in logs
                        if ln.get("msg", "").startswith("refused a request from Origin")),
                    sum(1 for ln in logs if ln.get("msg") == "request"
                        and ln.get("status") == 403))

        warned, logged = counts()
        for i in range(150):
            request(self.d, "GET", "/health", headers={"Origin": f"https://evil{i}.example"})
        warned_after, logged_after = counts()
        self.assertGreater(warned_after, warned)
        self.assertLessEqual(warned_after - warned, 20)
        # The access log's lines of requests refused at their head are held back as well.
        self.assertGreater(logged_after, logged)
        self.assertLessEqual(logged_after - logged, 20)


if __name__ == "__main__":
    unittest.main()
