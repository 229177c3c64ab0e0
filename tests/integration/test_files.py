"""The file routes: write, read (JSON, base64, raw bytes), list, and the workspace boundary."""

import base64
import hashlib
import unittest

from helpers_exec import DaemonTestCase
from runner import tag


def sha256(data):
    return hashlib.sha256(data).hexdigest()


class FilesTest(DaemonTestCase):
    def write(self, sid, path, content, **fields):
        return self.d.post(f"/exec/{sid}/write", body={"path": path, "content": content, **fields},
                           timeout=120)

    def write_ok(self, sid, path, content, **fields):
        status, _, body = self.write(sid, path, content, **fields)
        self.assertEqual(status, 200, body)
        return body

    def read(self, sid, path, raw=False, encoding=None, timeout=120):
        query = {"path": path}
        if encoding:
            query["encoding"] = encoding
        headers = {"Accept": "application/octet-stream"} if raw else None
        return self.d.get(f"/exec/{sid}/read", query=query, headers=headers, timeout=timeout)

    @tag("driver")
    def test_binary_file_of_50_mib_round_trips_byte_for_byte(self):
        sid = self.session()
        data = bytes(range(256)) * (50 * 1024 * 1024 // 256)
        digest = sha256(data)
        body = self.write_ok(sid, "blob.bin", base64.b64encode(data).decode(),
                             encoding="base64")
        self.assertEqual(body["size"], len(data))
        del body
        # The workspace holds exactly these bytes.
        out = self.stdout_of(sid, "sha256sum blob.bin; wc -c < blob.bin")
        self.assertEqual(out.split(), [digest, "blob.bin", str(len(data))])

        status, _, body = self.read(sid, "blob.bin", encoding="base64")
        self.assertEqual(status, 200, str(body)[:300])
        self.assertEqual(body["encoding"], "base64")
        self.assertEqual(body["size"], len(data))
        self.assertEqual(body["path"], "blob.bin")
        self.assertEqual(sha256(base64.b64decode(body["content"], validate=True)), digest)
        del body

        status, headers, raw = self.read(sid, "blob.bin", raw=True)
        self.assertEqual(status, 200, raw[:300])
        self.assertIn("application/octet-stream", headers.get("Content-Type", ""))
        self.assertIsInstance(raw, bytes)
        self.assertEqual(len(raw), len(data))
        self.assertEqual(sha256(raw), digest)

    def test_binary_content_read_without_encoding_comes_back_as_base64(self):
        sid = self.session()
        data = b"\x00\x01\xfe\xffnot utf-8\x80"
        self.write_ok(sid, "b.bin", base64.b64encode(data).decode(), encoding="base64")
        status, _, body = self.read(sid, "b.bin")
        self.assertEqual(status, 200, body)
        self.assertEqual(body["encoding"], "base64")
        self.assertEqual(base64.b64decode(body["content"]), data)
        self.assertEqual(body["size"], len(data))

    @tag("driver")
    def test_text_with_every_escape_reads_back_whole_and_streamed(self):
        # The reply is built directly (escaped into a buffer sized to the escaped text): every
        # kind of escape, around a character JSON keeps as it is, in a file answered whole and
        # in one streamed past a megabyte.
        sid = self.session()
        unit = "q\"b\\n\nt\tr\rb\bf\fc\x01\x1f del\x7f é€😀 "
        for name, repeat in (("small.txt", 1), ("large.txt", 1 + (1 << 20) // len(unit))):
            text = unit * repeat
            self.write_ok(sid, name, base64.b64encode(text.encode()).decode(),
                          encoding="base64")
            status, _, body = self.read(sid, name)
            self.assertEqual(status, 200, str(body)[:300])
            self.assertEqual(body["encoding"], "utf8")
            self.assertEqual(body["size"], len(text.encode()))
            self.assertEqual(body["content"], text)

    @tag("driver")
    def test_text_round_trip(self):
        sid = self.session()
        text = "héllo €😀\nline two\n"
        body = self.write_ok(sid, "t.txt", text)
        self.assertEqual(body, {"success": True, "path": "t.txt", "size": len(text.encode()),
                                "bytesWritten": len(text.encode())})
        status, headers, body = self.read(sid, "t.txt")
        self.assertEqual(status, 200, body)
        self.assertIn("application/json", headers.get("Content-Type", ""))
        self.assertEqual(body, {"path": "t.txt", "content": text, "encoding": "utf8",
                                "size": len(text.encode())})
        # utf8 named explicitly is the same; the command sees the same bytes.
        self.assertEqual(self.read(sid, "t.txt", encoding="utf8")[2]["content"], text)
        self.assertEqual(self.stdout_of(sid, "cat t.txt"), text)

    def test_overwrite_replaces_the_whole_file(self):
        sid = self.session()
        self.write_ok(sid, "o.txt", "a much longer first version\n")
        self.write_ok(sid, "o.txt", "short\n")
        self.assertEqual(self.read(sid, "o.txt")[2]["content"], "short\n")

    def test_empty_file(self):
        sid = self.session()
        body = self.write_ok(sid, "empty", "")
        self.assertEqual(body["size"], 0)
        status, _, body = self.read(sid, "empty")
        self.assertEqual(status, 200, body)
        self.assertEqual(body["content"], "")
        self.assertEqual(body["size"], 0)
        status, _, raw = self.read(sid, "empty", raw=True)
        self.assertEqual(status, 200)
        self.assertEqual(raw, b"")
        status, _, body = self.read(sid, "empty", encoding="base64")
        self.assertEqual((status, body["content"]), (200, ""))
        self.write_ok(sid, "empty64", "", encoding="base64")
        self.assertEqual(self.stdout_of(sid, "wc -c < empty64").strip(), "0")

    @tag("driver")
    def test_write_with_mode(self):
        sid = self.session()
        self.write_ok(sid, "run.sh", "#!/bin/sh\necho ran \"$@\"\n", mode=0o755)
        self.write_ok(sid, "secret", "s", mode=0o600)
        self.write_ok(sid, "plain", "p")
        self.assertEqual(self.stdout_of(sid, "stat -c '%a %n' run.sh secret plain"),
                         "755 run.sh\n600 secret\n644 plain\n")
        self.assertEqual(self.stdout_of(sid, "./run.sh", args=["x"]), "ran x\n")

    def test_parent_directories_are_created(self):
        sid = self.session()
        self.write_ok(sid, "a/b/c/d.txt", "deep")
        self.assertEqual(self.read(sid, "a/b/c/d.txt")[2]["content"], "deep")
        self.assertEqual(self.stdout_of(sid, "test -d a/b/c && echo dir"), "dir\n")

    def test_absolute_path_inside_the_workspace(self):
        sid = self.session()
        home = self.stdout_of(sid, "pwd").strip()
        self.write_ok(sid, f"{home}/abs.txt", "abs")
        self.assertEqual(self.read(sid, "abs.txt")[2]["content"], "abs")
        self.assertEqual(self.read(sid, f"{home}/abs.txt")[2]["content"], "abs")

    @tag("driver")
    def test_paths_that_escape_the_workspace_are_400(self):
        sid = self.session()
        self.run_ok(sid, "ln -s /etc etclink; ln -s /etc/passwd pwlink; ln -s .. up; "
                         "mkdir -p d; ln -s ../../.. d/out")
        with open("/etc/passwd", "rb") as f:
            host_passwd = f.read()
        for path in ("../x", "/etc/passwd", "a/../../x", "..", "/", "etclink/passwd",
                     "pwlink", "up/x", "d/out/etc/passwd", "etclink"):
            with self.subTest(read=path):
                status, headers, body = self.read(sid, path)
                self.assertJsonError(status, headers, body, 400)
                status, headers, raw = self.read(sid, path, raw=True)
                self.assertEqual(status, 400, raw)
                self.assertNotIn(host_passwd[:64], raw if isinstance(raw, bytes) else b"")
        for path in ("../x", "/etc/evil", "etclink/evil", "up/evil", "d/out/tmp/evil"):
            with self.subTest(write=path):
                status, headers, body = self.write(sid, path, "x")
                self.assertJsonError(status, headers, body, 400)
        for path in ("..", "/etc", "etclink", "d/out"):
            with self.subTest(files=path):
                status, headers, body = self.d.get(f"/exec/{sid}/files", query={"path": path})
                self.assertJsonError(status, headers, body, 400)
        for cwd in ("..", "etclink"):
            with self.subTest(cwd=cwd):
                status, headers, body = self.d.post(f"/exec/{sid}/execute",
                                                    body={"command": "pwd", "cwd": cwd})
                self.assertJsonError(status, headers, body, 400)
        # Nothing was written outside through the links.
        self.assertFalse(self._host_file_exists("/etc/evil"))

    @staticmethod
    def _host_file_exists(path):
        try:
            open(path, "rb").close()
            return True
        except OSError:
            return False

    @tag("driver")
    def test_missing_file_is_404(self):
        sid = self.session()
        self.run_ok(sid, "true")
        status, headers, body = self.read(sid, "no-such-file")
        self.assertJsonError(status, headers, body, 404, "no-such-file")
        status, headers, body = self.read(sid, "no/such/dir/f")
        self.assertJsonError(status, headers, body, 404)
        status, headers, body = self.d.get(f"/exec/{sid}/files", query={"path": "nope"})
        self.assertJsonError(status, headers, body, 404)

    def test_reading_a_directory_is_400(self):
        sid = self.session()
        self.run_ok(sid, "mkdir -p somedir")
        status, headers, body = self.read(sid, "somedir")
        self.assertJsonError(status, headers, body, 400)
        status, headers, body = self.write(sid, "somedir", "x")
        self.assertJsonError(status, headers, body, 400)

    def test_unknown_session_is_404_and_not_created(self):
        sid = self.session()
        for method, path in (("GET", f"/exec/{sid}/read?path=x"),
                             ("GET", f"/exec/{sid}/files")):
            with self.subTest(method=method, path=path):
                status, headers, body = self.d.request(method, path, timeout=30)
                self.assertJsonError(status, headers, body, 404, sid)
        status, headers, body = self.d.post(f"/exec/{sid}/cancel", body={"execId": "exec_1"})
        self.assertJsonError(status, headers, body, 404)
        # DELETE answers as the reference does: 200, nothing destroyed.
        status, _, body = self.d.delete(f"/exec/{sid}", timeout=30)
        self.assertEqual((status, body["destroyed"]), (200, False), body)
        self.assertNotIn(sid, self.listed_sessions())

    def test_path_that_is_not_utf8_is_400(self):
        sid = self.session()
        self.run_ok(sid, "true")
        for route in ("read", "files"):
            with self.subTest(route=route):
                status, headers, body = self.d.get(f"/exec/{sid}/{route}?path=%FF%FE")
                self.assertJsonError(status, headers, body, 400, "path")
        self.assertEqual(self.d.get("/health")[0], 200)

    def test_read_needs_a_path(self):
        sid = self.session()
        self.run_ok(sid, "true")
        status, headers, body = self.d.get(f"/exec/{sid}/read")
        self.assertJsonError(status, headers, body, 400, "path")
        status, headers, body = self.read(sid, "x", encoding="latin1")
        self.assertJsonError(status, headers, body, 400, "encoding")

    @tag("driver")
    def test_list_files(self):
        sid = self.session()
        self.write_ok(sid, "top/one.txt", "1")
        self.write_ok(sid, "top/sub/two.txt", "22")
        status, _, body = self.d.get(f"/exec/{sid}/files", query={"path": "top"})
        self.assertEqual(status, 200, body)
        self.assertEqual(body["path"], "top")
        self.assertFalse(body["truncated"])
        entries = {e["name"]: e for e in body["files"]}
        self.assertEqual(set(entries), {"one.txt", "sub"})
        self.assertEqual(entries["one.txt"]["type"], "file")
        self.assertEqual(entries["one.txt"]["size"], 1)
        self.assertEqual(entries["sub"]["type"], "dir")
        for e in body["files"]:
            for key in ("path", "name", "type", "size", "mode", "mtime"):
                self.assertIn(key, e)

        status, _, body = self.d.get(f"/exec/{sid}/files",
                                     query={"path": "top", "recursive": "true"})
        self.assertEqual(status, 200, body)
        # Entry paths are relative to the directory listed.
        paths = {e["path"]: e for e in body["files"]}
        self.assertEqual(set(paths), {"one.txt", "sub", "sub/two.txt"})
        self.assertEqual(paths["sub/two.txt"]["size"], 2)
        self.assertEqual(paths["sub/two.txt"]["name"], "two.txt")

        # Without a path: the workspace itself.
        status, _, body = self.d.get(f"/exec/{sid}/files")
        self.assertEqual(status, 200, body)
        self.assertIn("top", {e["name"] for e in body["files"]})


if __name__ == "__main__":
    unittest.main()
