"""PUT /exec/:id/file: a file's bytes streamed to the sandbox, never whole in the daemon."""

import hashlib
import http.client
import json
import os
import socket
import time

from helpers_exec import BASE_ENV, DaemonTestCase, wait_until

MiB = 1 << 20


class UploadTest(DaemonTestCase):
    daemon_env = {**BASE_ENV, "SANDBOX_MAX_UPLOAD_BYTES": str(512 * MiB)}

    def put(self, sid, path, data, query=None, chunked=False, headers=None):
        conn = http.client.HTTPConnection(self.d.host, self.d.port, timeout=300)
        q = "&".join(f"{k}={v}" for k, v in {"path": path, **(query or {})}.items())
        h = {"Content-Type": "application/octet-stream", **(headers or {})}
        if chunked:
            conn.request("PUT", f"/exec/{sid}/file?{q}", body=iter(data), headers=h,
                         encode_chunked=True)
        else:
            conn.request("PUT", f"/exec/{sid}/file?{q}", body=data, headers=h)
        r = conn.getresponse()
        body = r.read()
        conn.close()
        return r.status, r.headers, json.loads(body) if body else None

    def read_raw(self, sid, path):
        status, _, body = self.d.request("GET", f"/exec/{sid}/read", query={"path": path},
                                         headers={"Accept": "application/octet-stream"})
        self.assertEqual(status, 200)
        return body

    def test_bytes_in_are_bytes_out_with_a_length_or_chunked(self):
        sid = self.session()
        data = os.urandom(3 * MiB + 17)
        status, _, body = self.put(sid, "up/a.bin", data, {"mode": "600"})
        self.assertEqual(status, 200, body)
        self.assertEqual((body["path"], body["size"]), ("up/a.bin", len(data)))
        got = self.read_raw(sid, "up/a.bin")
        self.assertEqual(hashlib.sha256(got).hexdigest(), hashlib.sha256(data).hexdigest())
        self.assertEqual(self.stdout_of(sid, "stat -c %a up/a.bin"), "600\n")
        pieces = [os.urandom(n) for n in (1, 1000, 70000, 5, MiB)]
        status, _, body = self.put(sid, "b.bin", pieces, chunked=True)
        self.assertEqual((status, body["size"]), (200, sum(map(len, pieces))), body)
        self.assertEqual(self.read_raw(sid, "b.bin"), b"".join(pieces))
        status, _, body = self.put(sid, "empty", b"")
        self.assertEqual((status, body["size"]), (200, 0))

    def test_limits_and_bad_requests(self):
        sid = self.session()
        # A declared length over the limit is refused before any byte is read.
        conn = http.client.HTTPConnection(self.d.host, self.d.port, timeout=30)
        conn.putrequest("PUT", f"/exec/{sid}/file?path=x")
        conn.putheader("Content-Length", str(600 * MiB))
        conn.endheaders()
        r = conn.getresponse()
        self.assertEqual(r.status, 413)
        self.assertIn(b"SANDBOX_MAX_UPLOAD_BYTES", r.read())
        conn.close()
        for query in ({"path": ""}, {"path": "../out"}, {"path": "/etc/x"},
                      {"path": "ok", "mode": "999"}, {"path": "ok", "mode": "abc"}):
            status, headers, body = self.put(sid, query.pop("path"), b"data", query)
            self.assertEqual(status, 400, (query, body))
            self.assertIn("error", body)
        status, _, body = self.d.request("PUT", "/exec/bad%20id/file", body=b"x",
                                         query={"path": "x"})
        self.assertEqual(status, 400)

    def test_a_cut_upload_leaves_nothing(self):
        sid = self.session()
        self.run_ok(sid, "true")
        s = socket.create_connection((self.d.host, self.d.port))
        s.sendall(f"PUT /exec/{sid}/file?path=cut.bin HTTP/1.1\r\nHost: localhost\r\n"
                  f"Content-Length: {64 * MiB}\r\n\r\n".encode())
        s.sendall(os.urandom(4 * MiB))
        time.sleep(0.5)
        s.close()
        wait_until(lambda: self.stdout_of(sid, "ls -A") == "", what="no file, no temporary")
        # The daemon still serves, and an upload afterwards works.
        status, _, body = self.put(sid, "after", b"fine")
        self.assertEqual(status, 200, body)


class UploadCapTest(DaemonTestCase):
    daemon_env = {**BASE_ENV, "SANDBOX_MAX_UPLOAD_BYTES": str(MiB)}

    def test_a_chunked_upload_over_the_limit_is_refused_and_leaves_nothing(self):
        sid = self.session()
        self.run_ok(sid, "true")
        conn = http.client.HTTPConnection(self.d.host, self.d.port, timeout=60)
        conn.request("PUT", f"/exec/{sid}/file?path=over", body=iter([os.urandom(MiB)] * 3),
                     encode_chunked=True)
        r = conn.getresponse()
        self.assertEqual(r.status, 413, r.read())
        conn.close()
        self.assertEqual(self.stdout_of(sid, "ls -A"), "")
