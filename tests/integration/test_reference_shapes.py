"""Compatibility with the reference project's answers: for every route and MCP tool it has,
the fields it returns, by name and JSON type, are in ours too (besides whatever we add).

The shapes were read from the reference's server routes, guest runtime and SDK types; each
check names the field and the type a client of the reference relies on. Where our answer
keeps a different, older meaning under the same name, the check says so and holds only the
name, and docs/api.md documents the difference."""

import json
import unittest

from helpers_exec import TEMPLATE, DaemonTestCase
from runner import tag

NUMBER = (int, float)


def is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


class ShapeChecks:
    """assertShape(obj, {"field": type or tuple of types}) for JSON objects."""

    def assertShape(self, obj, shape, what):
        self.assertIsInstance(obj, dict, f"{what}: not an object: {obj!r}")
        for field, kind in shape.items():
            self.assertIn(field, obj, f"{what}: no {field!r} in {obj!r}")
            value = obj[field]
            if kind is int:
                self.assertTrue(is_int(value), f"{what}.{field} is not an integer: {value!r}")
            elif kind is bool:
                self.assertIsInstance(value, bool, f"{what}.{field} is not a boolean")
            else:
                self.assertIsInstance(value, kind, f"{what}.{field}: {value!r}")
                self.assertNotIsInstance(value, bool, f"{what}.{field} is a boolean")


class RestShapesTest(ShapeChecks, DaemonTestCase):
    """The /exec, /health and /admin routes (auth is off here, as the reference allows)."""

    def test_templates(self):
        status, _, body = self.d.get("/exec/templates")
        self.assertEqual(status, 200, body)
        self.assertIsInstance(body["templates"], list)
        self.assertTrue(body["templates"], "no template listed")
        for t in body["templates"]:
            self.assertShape(t, {"name": str, "displayName": str, "version": str,
                                 "description": str, "tools": list, "baseImage": str,
                                 "createdAt": str}, "template")
            self.assertTrue(all(isinstance(x, str) for x in t["tools"]), t)
            if "resources" in t:
                self.assertIsInstance(t["resources"], dict)
                for k in ("memSizeMib", "vcpuCount"):
                    if k in t["resources"]:
                        self.assertTrue(is_int(t["resources"][k]), t)

    @tag("driver")
    def test_execute_buffered(self):
        sid = self.session()
        status, body = self.execute(sid, "echo out; echo err >&2; exit 3")
        self.assertEqual(status, 200, body)
        self.assertShape(body, {"exitCode": int, "duration": NUMBER, "output": list}, "result")
        self.assertEqual(body["exitCode"], 3)
        self.assertEqual({c["stream"] for c in body["output"]}, {"stdout", "stderr"})
        for c in body["output"]:
            self.assertShape(c, {"stream": str, "data": str, "ts": int}, "output chunk")
        status, body = self.execute(sid, "kill -TERM $$")
        self.assertEqual(status, 200, body)
        self.assertShape(body, {"signal": str}, "result of a killed command")
        self.assertEqual(body["signal"], "SIGTERM")

    @tag("driver")
    def test_execute_ndjson(self):
        sid = self.session()
        with self.stream_execute(sid, "echo a; echo b >&2") as s:
            lines = list(s.ndjson())
        chunks = [x for x in lines if x.get("type") == "stream"]
        self.assertEqual(len(chunks), 2, lines)
        for c in chunks:
            self.assertShape(c, {"type": str, "id": str, "stream": str, "data": str, "ts": int},
                             "stream line")
        self.assertEqual(len({c["id"] for c in chunks}), 1, "chunks of one command, two ids")
        self.assertShape(lines[-1], {"type": str, "exitCode": int, "duration": NUMBER},
                         "result line")
        self.assertEqual(lines[-1]["type"], "result")

    @tag("driver")
    def test_execute_ndjson_error_line(self):
        sid = self.session()
        with self.stream_execute(sid, "/no/such/program") as s:
            lines = list(s.ndjson())
        self.assertShape(lines[-1], {"type": str, "error": str}, "error line")
        self.assertEqual(lines[-1]["type"], "error")

    @tag("driver")
    def test_write(self):
        sid = self.session()
        status, _, body = self.d.post(f"/exec/{sid}/write",
                                      body={"path": "d/a.txt", "content": "héllo\n"})
        self.assertEqual(status, 200, body)
        self.assertShape(body, {"bytesWritten": int}, "write")
        self.assertEqual(body["bytesWritten"], len("héllo\n".encode()))

    @tag("driver")
    def test_read(self):
        sid = self.session()
        self.d.post(f"/exec/{sid}/write", body={"path": "a.txt", "content": "text\n"})
        status, _, body = self.d.get(f"/exec/{sid}/read", query={"path": "a.txt"})
        self.assertEqual(status, 200, body)
        self.assertShape(body, {"content": str, "size": int}, "read")
        self.assertEqual((body["content"], body["size"]), ("text\n", 5))

    @tag("driver")
    def test_files(self):
        sid = self.session()
        self.d.post(f"/exec/{sid}/write", body={"path": "d/a.txt", "content": "abc"})
        status, _, body = self.d.get(f"/exec/{sid}/files", query={"recursive": "true"})
        self.assertEqual(status, 200, body)
        self.assertIsInstance(body["files"], list)
        by_path = {}
        for f in body["files"]:
            self.assertShape(f, {"path": str, "type": str, "size": int}, "file entry")
            by_path[f["path"]] = f
        self.assertEqual(by_path["d"]["type"], "dir")
        self.assertEqual((by_path["d/a.txt"]["type"], by_path["d/a.txt"]["size"]), ("file", 3))

    @tag("driver")
    def test_delete(self):
        sid = self.session()
        self.run_ok(sid, "true")
        status, _, body = self.d.delete(f"/exec/{sid}")
        self.assertEqual(status, 200, body)
        self.assertShape(body, {"destroyed": bool}, "delete")
        self.assertIs(body["destroyed"], True)
        # No session: the reference answers 200 with destroyed false, and its SDK's destroy()
        # returns that boolean (any other status throws).
        status, _, body = self.d.delete(f"/exec/{sid}")
        self.assertEqual(status, 200, body)
        self.assertShape(body, {"destroyed": bool}, "delete of no session")
        self.assertIs(body["destroyed"], False)

    @tag("driver")
    def test_list_sessions(self):
        sid = self.session()
        self.run_ok(sid, "true", template=TEMPLATE)
        status, _, body = self.d.get("/exec/")
        self.assertEqual(status, 200, body)
        self.assertIsInstance(body["sessions"], list)
        mine = [s for s in body["sessions"] if s.get("sessionId") == sid]
        self.assertEqual(len(mine), 1, body)
        # createdAt is a number of milliseconds in the reference, an ISO 8601 string in ours
        # (kept: our clients read it): only the name is held here.
        self.assertShape(mine[0], {"sessionId": str, "state": str, "template": str,
                                   "lastActivityAt": int}, "session")
        self.assertIn("createdAt", mine[0])
        self.assertEqual(mine[0]["template"], TEMPLATE)

    def test_health(self):
        status, _, body = self.d.get("/health")
        self.assertEqual(status, 200, body)
        self.assertShape(body, {"status": str, "uptime": NUMBER}, "health")
        self.assertEqual(body["status"], "ok")

    def test_ready(self):
        status, _, body = self.d.get("/ready")
        self.assertEqual(status, 200, body)
        self.assertShape(body, {"status": str, "checks": dict}, "ready")
        self.assertEqual(body["status"], "ready")
        self.assertShape(body["checks"], {"memoryOk": bool}, "ready.checks")
        self.assertIs(body["checks"]["memoryOk"], True, body)


class ReadyNotReadyShapeTest(ShapeChecks, DaemonTestCase):
    """/ready when it fails: the reference's `not_ready` and `checks.memoryOk` false (here
    the host's available memory is below a watermark no host reaches)."""

    daemon_env = {"SANDBOX_MEMORY_WATERMARK_BYTES": str(16 << 40), "SANDBOX_WARM_POOL": "0"}

    def test_not_ready(self):
        status, _, body = self.d.get("/ready")
        self.assertEqual(status, 503, body)
        self.assertShape(body, {"status": str, "checks": dict}, "not ready")
        self.assertEqual(body["status"], "not_ready")
        self.assertIs(body["checks"]["memoryOk"], False, body)
        self.assertIn("memory", [f["check"] for f in body["failing"]])

    def test_admin_keys(self):
        status, _, body = self.d.post("/admin/keys", body={"name": "shape-key"})
        self.assertEqual(status, 201, body)
        self.assertShape(body, {"key": str, "record": dict}, "created key")
        record_shape = {"id": str, "name": str, "keyPrefix": str, "scopes": list,
                        "rateLimit": int, "enabled": bool}
        self.assertShape(body["record"], record_shape, "key record")
        # createdAt and expiresAt are numbers in the reference, ISO strings (or null) in
        # ours: only the names are held.
        for k in ("createdAt", "expiresAt"):
            self.assertIn(k, body["record"])
        kid = body["record"]["id"]
        status, _, body = self.d.get("/admin/keys")
        self.assertEqual(status, 200, body)
        listed = {k["id"]: k for k in body["keys"]}
        self.assertShape(listed[kid], record_shape, "listed key")
        self.assertIn("lastUsedAt", listed[kid])
        status, _, body = self.d.post(f"/admin/keys/{kid}/rotate")
        self.assertEqual(status, 200, body)
        self.assertShape(body, {"key": str, "record": dict}, "rotated key")
        self.assertShape(body["record"], record_shape, "rotated key record")
        for action, (method, path) in (("revoke", ("POST", f"/admin/keys/{kid}/revoke")),
                                       ("delete", ("DELETE", f"/admin/keys/{kid}"))):
            status, _, body = self.d.request(method, path)
            self.assertEqual(status, 200, body)
            self.assertShape(body, {"success": bool, "message": str}, action)
            self.assertIs(body["success"], True)


class McpShapesTest(ShapeChecks, DaemonTestCase):
    """The MCP tools through Streamable HTTP. The reference's tools answer in text blocks;
    where that text carries fields (create_session's JSON, write_file's byte count), ours
    has them in structuredContent and in the JSON of its text block."""

    def setUp(self):
        status, headers, body = self.rpc("initialize", {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "shapes", "version": "1"}})
        self.assertEqual(status, 200, body)
        self.mcp_session = headers.get("Mcp-Session-Id")
        self.assertTrue(self.mcp_session, headers)
        self.addCleanup(self.d.delete, "/mcp", headers={"Mcp-Session-Id": self.mcp_session})
        # A notification is answered 202 without a body.
        with self.d.stream("POST", "/mcp", body={"jsonrpc": "2.0",
                                                 "method": "notifications/initialized"},
                           headers={"Mcp-Session-Id": self.mcp_session,
                                    "Content-Type": "application/json",
                                    "Accept": "application/json, text/event-stream"}) as s:
            self.assertEqual(s.status, 202)

    def rpc(self, method, params=None):
        msg = {"jsonrpc": "2.0", "id": 1, "method": method}
        if params is not None:
            msg["params"] = params
        headers = {"Accept": "application/json, text/event-stream",
                   "Content-Type": "application/json"}
        if getattr(self, "mcp_session", None):
            headers["Mcp-Session-Id"] = self.mcp_session
        return self.d.post("/mcp", body=msg, headers=headers, timeout=60)

    def call(self, tool, **arguments):
        """A tools/call; returns (result, the JSON of its first text block)."""
        status, _, body = self.rpc("tools/call", {"name": tool, "arguments": arguments})
        self.assertEqual(status, 200, body)
        self.assertIn("result", body, body)
        result = body["result"]
        self.assertFalse(result.get("isError"), result)
        text = result["content"][0]
        self.assertEqual(text["type"], "text", result)
        return result, json.loads(text["text"])

    def test_tools_of_the_reference_exist(self):
        status, _, body = self.rpc("tools/list", {})
        self.assertEqual(status, 200, body)
        names = {t["name"] for t in body["result"]["tools"]}
        for name in ("create_session", "execute", "list_templates", "write_file", "read_file",
                     "list_files", "ping", "reset_session"):
            self.assertIn(name, names)

    @tag("driver")
    def test_create_session(self):
        result, text = self.call("create_session", template=TEMPLATE)
        sid = text["sessionId"]
        self.addCleanup(self.d.delete, f"/exec/{sid}", timeout=30)
        for got in (result["structuredContent"], text):
            self.assertShape(got, {"sessionId": str, "template": str, "status": str},
                             "create_session")
            self.assertEqual(got["status"], "active")
            self.assertEqual(got["template"], TEMPLATE)

    @tag("driver")
    def test_write_file(self):
        sid = self.session()
        result, text = self.call("write_file", sessionId=sid, path="a.txt", content="héllo")
        for got in (result["structuredContent"], text):
            self.assertShape(got, {"bytesWritten": int}, "write_file")
            self.assertEqual(got["bytesWritten"], len("héllo".encode()))

    @tag("driver")
    def test_text_tools_answer(self):
        sid = self.session()
        self.call("write_file", sessionId=sid, path="a.txt", content="abc")
        _, out = self.call("execute", sessionId=sid, command="cat a.txt")
        self.assertEqual(out["stdout"], "abc")
        _, out = self.call("read_file", sessionId=sid, path="a.txt")
        self.assertEqual(out["content"], "abc")
        _, out = self.call("list_files", sessionId=sid)
        self.assertIn("a.txt", [f["path"] for f in out["files"]])
        self.call("list_templates")
        self.call("ping")
        _, out = self.call("reset_session", sessionId=sid)
        self.assertIs(out["destroyed"], True)


if __name__ == "__main__":
    unittest.main()
