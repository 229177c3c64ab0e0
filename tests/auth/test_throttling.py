"""Per-key rate limits (a token bucket of N requests per minute) and the throttling of failed
authentications per client address (failures only: a valid key always passes)."""

import time
import unittest

import authlib
from authlib import assert_json_error, request


class RateLimitTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        authlib.require_ready()
        cls.d = authlib.start_daemon()
        cls.addClassCleanup(cls.d.stop)

    def test_limited_key_gets_429_then_refills(self):
        k = authlib.create_key(self.d, "sixty", ["exec"], rate_limit=60)
        other = authlib.create_key(self.d, "unlimited", ["exec"])
        # The bucket starts full: 60 requests pass, each saying how many are left.
        remaining = []
        refused = None
        for _ in range(70):
            st, headers, body = request(self.d, "GET", "/exec/templates", key=k["key"])
            if st == 429:
                refused = (st, headers, body)
                break
            self.assertEqual(st, 200, body)
            self.assertEqual(headers.get("RateLimit-Limit"), "60")
            remaining.append(int(headers["RateLimit-Remaining"]))
            self.assertGreaterEqual(int(headers["RateLimit-Reset"]), 0)
        self.assertIsNotNone(refused, "70 requests at once never reached a limit of 60/min")
        # Refilling goes on at one a second, so a slow machine may squeeze in a few more.
        self.assertTrue(60 <= len(remaining) <= 64, len(remaining))
        self.assertEqual(remaining[0], 59)
        self.assertEqual(remaining, sorted(remaining, reverse=True))

        st, headers, body = refused
        retry = body.get("retryAfter")
        self.assertEqual(body, {"error": "Rate limit exceeded", "retryAfter": retry})
        self.assertIsInstance(retry, int)
        self.assertTrue(1 <= retry <= 2, retry)
        self.assertEqual(headers.get("Retry-After"), str(retry))
        self.assertEqual(headers.get("RateLimit-Limit"), "60")
        self.assertEqual(headers.get("RateLimit-Remaining"), "0")
        self.assertEqual(headers.get("RateLimit-Reset"), str(retry))
        self.assertEqual(headers.get("Content-Type"), "application/json")

        # The limit is the key's own: another key is not held back, and carries no limit.
        st, headers, _ = request(self.d, "GET", "/exec/templates", key=other["key"])
        self.assertEqual(st, 200)
        self.assertIsNone(headers.get("RateLimit-Limit"))

        # A refused request does not count as a failed authentication, nor spend a token.
        for _ in range(5):
            self.assertEqual(request(self.d, "GET", "/exec/", key=k["key"])[0], 429)

        # After Retry-After, a token is back; the bucket refills slowly, not all at once.
        # The refill is over time: the test lets the time it announced go by.
        time.sleep(retry)
        st, _, body = request(self.d, "GET", "/exec/templates", key=k["key"])
        self.assertEqual(st, 200, body)
        burst = [request(self.d, "GET", "/exec/templates", key=k["key"])[0] for _ in range(6)]
        self.assertIn(429, burst)

    def test_limit_applies_to_every_scope_and_route(self):
        k = authlib.create_key(self.d, "two", ["exec", "metrics", "admin"], rate_limit=2)
        statuses = [request(self.d, m, p, key=k["key"])[0]
                    for m, p in (("GET", "/metrics"), ("GET", "/admin/keys"), ("GET", "/exec/"))]
        self.assertEqual(statuses, [200, 200, 429])
        # At 2 per minute the wait is about 30 s.
        st, headers, body = request(self.d, "GET", "/exec/", key=k["key"])
        self.assertEqual(st, 429)
        self.assertTrue(25 <= body["retryAfter"] <= 31, body)
        # Routes without authentication ignore the key and its limit.
        st, _, _ = request(self.d, "GET", "/health", key=k["key"])
        self.assertEqual(st, 200)


class FailedAttemptsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        authlib.require_ready()
        cls.d = authlib.start_daemon()
        cls.addClassCleanup(cls.d.stop)
        cls.exec_key = authlib.create_key(cls.d, "exec", ["exec"])["key"]
        cls.metrics_key = authlib.create_key(cls.d, "metrics", ["metrics"])["key"]

    def test_many_failures_from_one_address_are_throttled(self):
        src = authlib.fresh_address()
        # Any 401 counts: no key, unknown keys, in any form, on any route.
        for i in range(authlib.FAIL_LIMIT):
            key = None if i % 3 == 0 else f"{authlib.PREFIX}{i:032x}"
            via = authlib.VIAS[i % len(authlib.VIAS)]
            path = ("/exec/", "/metrics", "/admin/keys")[i % 3]
            resp = request(self.d, "GET", path, key=key, via=via, source=src)
            assert_json_error(self, resp, 401)
        st, headers, body = request(self.d, "GET", "/exec/", key=authlib.UNKNOWN_KEY, source=src)
        self.assertEqual(st, 429, body)
        retry = body.get("retryAfter")
        self.assertEqual(body, {"error": "Too many failed authentication attempts",
                                "retryAfter": retry})
        self.assertTrue(1 <= retry <= authlib.FAIL_WINDOW_S, retry)
        self.assertEqual(headers.get("Retry-After"), str(retry))
        # A valid key from that address is not refused for the failures of others there
        # (keys are 128 random bits: the throttle bounds failures, not guessing).
        st, _, body = request(self.d, "GET", "/exec/", key=self.exec_key, source=src)
        self.assertEqual(st, 200, body)
        # Routes without authentication still answer.
        self.assertEqual(request(self.d, "GET", "/health", source=src)[0], 200)
        # Other addresses are not affected.
        other = authlib.fresh_address()
        self.assertEqual(request(self.d, "GET", "/exec/", key=self.exec_key, source=other)[0],
                         200)
        assert_json_error(self, request(self.d, "GET", "/exec/", key=authlib.UNKNOWN_KEY,
                                        source=other), 401, "Invalid API key")

    def test_below_the_limit_nothing_is_throttled(self):
        src = authlib.fresh_address()
        for _ in range(authlib.FAIL_LIMIT - 1):
            self.assertEqual(request(self.d, "GET", "/exec/", key=authlib.UNKNOWN_KEY,
                                     source=src)[0], 401)
        self.assertEqual(request(self.d, "GET", "/exec/", key=self.exec_key, source=src)[0], 200)

    def test_scope_refusals_and_keyless_health_checks_do_not_count(self):
        # (A bad key sent to /health does count: tests/auth/test_front_door.py.)
        src = authlib.fresh_address()
        for _ in range(authlib.FAIL_LIMIT + 10):
            self.assertEqual(request(self.d, "GET", "/exec/", key=self.metrics_key,
                                     source=src)[0], 403)
            self.assertEqual(request(self.d, "GET", "/health", source=src)[0], 200)
        self.assertEqual(request(self.d, "GET", "/exec/", key=self.exec_key, source=src)[0], 200)
        assert_json_error(self, request(self.d, "GET", "/exec/", key=authlib.UNKNOWN_KEY,
                                        source=src), 401, "Invalid API key")


if __name__ == "__main__":
    unittest.main()
