"""The dashboard's static files at /ui, served by the real daemon from SANDBOX_UI_DIR: the
security headers on every reply (errors too), Content-Type, HEAD, ETag and 304, no key needed,
and hostile names: traversal in every spelling, symlinks, FIFOs, oversize files, hidden files,
subdirectories and unknown types are all a JSON 404, and nothing outside the set loaded at
start is ever read."""
import http.client
import os
import socket
import tempfile
import unittest

import harness

INDEX = b"<!doctype html><title>t</title><script src=\"/ui/app.js\"></script>\n"
APP = b"console.log('app');\n"
CSS = b"body{color:red}\n"
SECURITY = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def raw_get(d, target, method="GET", headers=None):
    """A request whose target goes out exactly as given (no client normalization)."""
    conn = http.client.HTTPConnection(d.host, d.port, timeout=30)
    try:
        conn.putrequest(method, target, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", f"127.0.0.1:{d.port}")
        for k, v in (headers or {}).items():
            conn.putheader(k, v)
        conn.endheaders()
        resp = conn.getresponse()
        return resp.status, resp.headers, resp.read()
    finally:
        conn.close()


class UiTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp(prefix="ui-assets-")
        cls.addClassCleanup(lambda: harness.shutil.rmtree(cls.dir, ignore_errors=True))
        cls.outside = os.path.join(cls.dir, "..", os.path.basename(cls.dir) + "-secret.js")
        with open(cls.outside, "wb") as f:
            f.write(b"secret outside the directory\n")
        cls.addClassCleanup(os.unlink, cls.outside)
        for name, data in {"index.html": INDEX, "app.js": APP, "app.css": CSS,
                           ".hidden.js": b"hidden", "data.bin": b"\0\1",
                           "noext": b"x"}.items():
            with open(os.path.join(cls.dir, name), "wb") as f:
                f.write(data)
        with open(os.path.join(cls.dir, "big.js"), "wb") as f:
            f.truncate(8 * 1024 * 1024 + 1)
        os.symlink(cls.outside, os.path.join(cls.dir, "link.js"))
        os.symlink("/etc/passwd", os.path.join(cls.dir, "passwd.txt"))
        os.mkfifo(os.path.join(cls.dir, "fifo.js"))
        os.mkdir(os.path.join(cls.dir, "sub"))
        with open(os.path.join(cls.dir, "sub", "x.js"), "wb") as f:
            f.write(b"in a subdirectory")
        cls.d = harness.Daemon(env={"AUTH_ENABLED": "true", "SANDBOX_UI_DIR": cls.dir,
                                    "SANDBOX_WARM_POOL": "0"})
        cls.d.start()
        cls.addClassCleanup(cls.d.stop)

    def assertSecure(self, headers):
        for k, v in SECURITY.items():
            self.assertEqual(headers.get(k), v, k)
        csp = headers.get("Content-Security-Policy", "")
        directives = {p.split()[0]: p.split()[1:] for p in csp.split("; ") if p}
        self.assertEqual(directives.get("default-src"), ["'self'"], csp)
        self.assertEqual(directives.get("script-src"), ["'self'"], csp)
        self.assertEqual(directives.get("style-src"), ["'self'"], csp)
        self.assertEqual(directives.get("frame-ancestors"), ["'none'"], csp)
        self.assertEqual(directives.get("object-src"), ["'none'"], csp)
        self.assertIn("'self'", directives.get("connect-src", []), csp)
        self.assertNotIn("unsafe-inline", csp)
        self.assertNotIn("unsafe-eval", csp)

    def assertNotFound(self, target, method="GET"):
        status, headers, body = raw_get(self.d, target, method)
        self.assertEqual(status, 404, f"{target}: {body!r}")
        self.assertEqual(headers.get("Content-Type"), "application/json", target)
        self.assertIn(b'"error"', body, target)
        self.assertNotIn(b"secret", body)
        self.assertNotIn(b"root:", body)
        return headers

    def test_root_redirects_to_the_slash(self):
        status, headers, body = raw_get(self.d, "/ui")
        self.assertEqual(status, 308)
        self.assertEqual(headers.get("Location"), "/ui/")
        self.assertSecure(headers)

    def test_index_with_its_headers_and_no_key(self):
        status, headers, body = raw_get(self.d, "/ui/")
        self.assertEqual(status, 200)
        self.assertEqual(body, INDEX)
        self.assertEqual(headers.get("Content-Type"), "text/html; charset=utf-8")
        self.assertSecure(headers)
        self.assertIn(f"ws://127.0.0.1:{self.d.port}", headers["Content-Security-Policy"])
        self.assertEqual(raw_get(self.d, "/ui/index.html")[2], INDEX)

    def test_assets_and_their_types(self):
        for name, data, ctype in (("app.js", APP, "text/javascript; charset=utf-8"),
                                  ("app.css", CSS, "text/css; charset=utf-8")):
            status, headers, body = raw_get(self.d, f"/ui/{name}")
            self.assertEqual((status, body), (200, data), name)
            self.assertEqual(headers.get("Content-Type"), ctype)
            self.assertSecure(headers)

    def test_head_sends_the_length_and_no_body(self):
        status, headers, body = raw_get(self.d, "/ui/app.js", method="HEAD")
        self.assertEqual(status, 200)
        self.assertEqual(int(headers["Content-Length"]), len(APP))
        self.assertEqual(body, b"")

    def test_etag_and_304(self):
        status, headers, _ = raw_get(self.d, "/ui/app.js")
        etag = headers["ETag"]
        self.assertRegex(etag, r'^"[0-9a-f]{32}"$')
        for inm in (etag, f"W/{etag}", f'"other", {etag}', "*"):
            status, h, body = raw_get(self.d, "/ui/app.js", headers={"If-None-Match": inm})
            self.assertEqual((status, body), (304, b""), inm)
            self.assertEqual(h.get("ETag"), etag)
        for inm in ('"other"', etag[:-2] + '"', '"' + etag, "garbage", ",,,", '"unterminated'):
            status, _, body = raw_get(self.d, "/ui/app.js", headers={"If-None-Match": inm})
            self.assertEqual((status, body), (200, APP), inm)

    def test_traversal_in_every_spelling_is_404(self):
        name = os.path.basename(self.outside)
        for target in ("/ui/../" + name, "/ui/..%2f" + name, "/ui/%2e%2e%2f" + name,
                       "/ui/%2E%2E/" + name, "/ui/..%5c" + name, "/ui/....//" + name,
                       "/ui/..%252f" + name, "/ui/%2fetc%2fpasswd", "/ui//etc/passwd",
                       "/ui/%00", "/ui/index.html%00.js", "/ui/app.js%2f",
                       "/ui/./app.js", "/ui/.", "/ui/..", "/ui/%2e", "/ui/sub/x.js",
                       "/ui/sub", "/ui/sub%2fx.js"):
            self.assertNotFound(target)

    def test_what_is_not_a_plain_file_of_a_known_type_is_404(self):
        for name in ("link.js", "passwd.txt", "fifo.js", "big.js", ".hidden.js",
                     "data.bin", "noext", "INDEX.HTML", "nope.js", "a" * 200 + ".js"):
            headers = self.assertNotFound("/ui/" + name)
            self.assertSecure(headers)

    def test_only_what_was_there_at_start_is_served(self):
        path = os.path.join(self.dir, "late.js")
        with open(path, "wb") as f:
            f.write(b"late")
        self.addCleanup(os.unlink, path)
        self.assertNotFound("/ui/late.js")

    def test_other_methods_are_405(self):
        for method in ("POST", "PUT", "DELETE"):
            status, headers, body = raw_get(self.d, "/ui/app.js", method=method)
            self.assertEqual(status, 405, method)
            self.assertIn(b'"error"', body)

    def test_a_bad_key_does_not_matter_to_static_files(self):
        status, _, body = raw_get(self.d, "/ui/app.js",
                                  headers={"Authorization": "Bearer sk_test_" + "0" * 32})
        self.assertEqual((status, body), (200, APP))

    def test_a_cross_site_request_is_refused(self):
        status, headers, body = raw_get(self.d, "/ui/app.js",
                                        headers={"Origin": "https://evil.example",
                                                 "Sec-Fetch-Site": "cross-site"})
        self.assertEqual(status, 403, body)

    def test_a_strange_host_is_not_written_into_the_csp(self):
        # The front door refuses names it does not answer to; an IP literal passes and is
        # named in connect-src only when it is plain.
        s = socket.create_connection((self.d.host, self.d.port), timeout=30)
        try:
            s.sendall(b"GET /ui/ HTTP/1.1\r\nHost: 127.0.0.1:1;script-src *\r\n"
                      b"Connection: close\r\n\r\n")
            data = b""
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        finally:
            s.close()
        head = data.split(b"\r\n\r\n", 1)[0]
        self.assertIn(b" 403 ", head.split(b"\r\n")[0])
        self.assertNotIn(b"script-src *", head)


class UiMissingTest(unittest.TestCase):
    def test_a_missing_directory_is_a_404_that_says_so(self):
        d = harness.Daemon(env={"SANDBOX_UI_DIR": "/nonexistent/ui", "SANDBOX_WARM_POOL": "0"})
        d.start()
        self.addCleanup(d.stop)
        status, headers, body = raw_get(d, "/ui/")
        self.assertEqual(status, 404)
        self.assertIn(b"not installed", body)
        self.assertIn(b"SANDBOX_UI_DIR", body)
        self.assertEqual(headers.get("X-Frame-Options"), "DENY")
        self.assertEqual(raw_get(d, "/health")[0], 200)


class UiBuiltTest(unittest.TestCase):
    """The default directory of a daemon in a build tree is the dashboard built beside it."""

    def test_the_build_tree_serves_the_built_dashboard(self):
        built = os.path.join(os.path.dirname(os.path.realpath(harness.sandboxd_path())),
                             "..", "ui", "index.html")
        if not os.path.exists(built):
            self.skipTest(f"no dashboard built at {built} (meson -Dui=false?)")
        d = harness.Daemon(env={"SANDBOX_WARM_POOL": "0"})
        d.start()
        self.addCleanup(d.stop)
        status, _, body = raw_get(d, "/ui/")
        self.assertEqual(status, 200)
        with open(built, "rb") as f:
            self.assertEqual(body, f.read())
        for name, ctype in (("app.js", "text/javascript"), ("app.css", "text/css")):
            status, headers, body = raw_get(d, f"/ui/{name}")
            self.assertEqual(status, 200, name)
            self.assertTrue(headers["Content-Type"].startswith(ctype))
            self.assertGreater(len(body), 1000)


if __name__ == "__main__":
    unittest.main()
