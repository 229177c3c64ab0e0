"""POST /exec/:id/fork on a driver that cannot save a running sandbox whole (the jail): a
clear 501 and the session runs on; a malformed count is a 400 whatever the driver; another
key's session is a 404. The forks themselves are tested on qemu (tests/e2e/
test_qemu_lifecycle.py)."""

import os
import unittest

from helpers_exec import BASE_ENV, DaemonTestCase


@unittest.skipUnless(os.environ.get("DRIVER", "jail") == "jail",
                     "the jail driver's refusal (qemu forks: tests/e2e)")
class ForkRefusalTest(DaemonTestCase):
    daemon_env = {**BASE_ENV, "AUTH_ENABLED": "true", "SANDBOX_WARM_POOL": "0"}

    def test_the_jail_cannot_fork_and_says_so(self):
        sid = self.session()
        self.run_ok(sid, "echo kept > file")
        status, headers, body = self.d.post(f"/exec/{sid}/fork", body={"count": 2})
        self.assertJsonError(status, headers, body, 501, "cannot fork")
        self.assertEqual(self.stdout_of(sid, "cat file"), "kept\n")
        self.assertEqual(list(self.listed_sessions()), [sid])

    def test_a_malformed_count_is_400(self):
        sid = self.session()
        for bad in (0, 17, -3, "1", 2.5, [], {}):
            status, headers, body = self.d.post(f"/exec/{sid}/fork", body={"count": bad})
            self.assertJsonError(status, headers, body, 400, "count")
        status, headers, body = self.d.post(f"/exec/{sid}/fork", body=b"{not json",
                                            headers={"Content-Type": "application/json"})
        self.assertEqual(status, 400, body)

    def test_another_keys_session_is_404(self):
        status, _, key = self.d.post("/admin/keys", body={"name": "other", "scopes": ["exec"]})
        self.assertEqual(status, 201, key)
        sid = self.session()
        status, headers, body = self.d.post(f"/exec/{sid}/fork", body={"count": 1},
                                            api_key=key["key"])
        self.assertJsonError(status, headers, body, 404)
