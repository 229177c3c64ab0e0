"""The daemon starts, answers /health and stops cleanly on SIGTERM."""

import unittest

import harness


class SmokeTest(unittest.TestCase):
    def test_health(self):
        d = harness.Daemon()
        d.start()
        self.addCleanup(d.stop, check=False)

        status, headers, body = d.get("/health")
        self.assertEqual(status, 200, body)
        self.assertIn("application/json", headers.get("Content-Type", ""))
        self.assertIsInstance(body, dict)
        for key in ("status", "uptime", "version", "driver", "isolation"):
            self.assertIn(key, body)
        self.assertEqual(body["driver"], d.driver)

        d.stop()  # exits with status 0 on SIGTERM


if __name__ == "__main__":
    unittest.main()
