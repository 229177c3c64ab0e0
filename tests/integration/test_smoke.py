"""The daemon starts, answers /health and stops cleanly on SIGTERM."""

import json
import os
import shutil
import tempfile
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



class NetworkModeTest(unittest.TestCase):
    def test_network_off_is_said(self):
        """Without a network, /health says why and each session says it has none."""
        d = harness.Daemon(env={"SANDBOX_NETWORK": "off", "SANDBOX_WARM_POOL": "0",
                                "AUTH_ENABLED": "false"})
        d.start()
        self.addCleanup(d.stop, check=False)
        status, _, body = d.get("/health")
        self.assertEqual(status, 200, body)
        self.assertEqual(body.get("network"), {"enabled": False, "reason": "SANDBOX_NETWORK=off"})
        status, _, body = d.post("/exec/", body={"id": "netless"})
        self.assertEqual(status, 201, body)
        self.assertEqual(body.get("network"), "off", body)
        status, _, body = d.get("/exec")
        self.assertEqual([s.get("network") for s in body.get("sessions", [])], ["off"], body)
        d.stop()


class TemplatesRefreshTest(unittest.TestCase):
    def test_a_template_built_while_running_is_found(self):
        """No signal needed: a template that appears (or goes) is seen by the next request."""
        real = os.path.join(harness.DEFAULT_ARTIFACTS, "templates", "base")
        artifacts = tempfile.mkdtemp(prefix="sandboxd-artifacts-")
        self.addCleanup(shutil.rmtree, artifacts, True)
        templates = os.path.join(artifacts, "templates")
        os.mkdir(templates)
        os.symlink(real, os.path.join(templates, "base"))
        d = harness.Daemon(env={"FIRECRACKER_ARTIFACTS_DIR": artifacts, "AUTH_ENABLED": "false",
                                "SANDBOX_WARM_POOL": "0", "SANDBOX_DEFAULT_TEMPLATE": "base"})
        d.start()
        self.addCleanup(d.stop, check=False)

        def names():
            status, _, body = d.get("/exec/templates")
            self.assertEqual(status, 200, body)
            return sorted(t["name"] for t in body["templates"])

        self.assertEqual(names(), ["base"])
        status, _, body = d.post("/exec/", body={"id": "early", "template": "extra"})
        self.assertEqual(status, 400, body)
        self.assertIn("found as soon as it is there", body.get("error", ""))

        # Built the way templates/build.sh installs one: a whole directory, renamed in place.
        staging = os.path.join(templates, ".extra.tmp")
        os.mkdir(staging)
        with open(os.path.join(real, "template.json"), encoding="utf-8") as f:
            manifest = json.load(f)
        manifest["name"] = "extra"
        with open(os.path.join(staging, "template.json"), "w", encoding="utf-8") as f:
            json.dump(manifest, f)
        os.symlink(os.path.join(real, "rootfs"), os.path.join(staging, "rootfs"))
        os.rename(staging, os.path.join(templates, "extra"))

        status, _, body = d.post("/exec/", body={"id": "late", "template": "extra"})
        self.assertEqual(status, 201, body)
        self.assertEqual(body.get("template"), "extra", body)
        self.assertEqual(names(), ["base", "extra"])
        d.delete("/exec/late")
        shutil.rmtree(os.path.join(templates, "extra"))
        self.assertEqual(names(), ["base"])
        d.stop()


class StartupErrorTest(unittest.TestCase):
    def test_a_missing_agent_binary_is_named(self):
        """With no driver usable, the error says why for each, naming the missing file."""
        missing = "/nonexistent/sandbox-agent-for-this-test"
        d = harness.Daemon(env={"SANDBOX_DRIVER": "auto", "SANDBOX_AGENT_BIN": missing})
        self.addCleanup(d.kill)
        with self.assertRaises(AssertionError):
            d.start()
        self.addCleanup(shutil.rmtree, d.tmp, True)
        errors = [l["msg"] for l in d.logs() if l.get("level") == "error"]
        self.assertTrue(any("no sandbox driver can run on this host" in m and missing in m
                            for m in errors), errors)


if __name__ == "__main__":
    unittest.main()
