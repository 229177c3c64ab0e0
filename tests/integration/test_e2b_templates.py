"""Which template E2B's templateIDs name (docs/e2b.md#templates).

E2B's default template, `base` (what the SDKs create without a template, and what a create
without `templateID` gets), is `code-interpreter` where that is built and the busybox `base`
where not; E2B_TEMPLATE_ALIASES overrides it; the REST API's `base` stays busybox.

The templates here are stand-ins: the real base template under other names (a manifest of
that name, the base's rootfs), in an artifacts directory of the test's own, so that what
a name resolves to shows in the session's template without building the real ones. The E2B
suite (tests/e2b) runs the real code-interpreter as E2B's default.
"""

import json
import os
import shutil
import tempfile
import unittest

import harness

REAL = os.path.join(os.environ.get("FIRECRACKER_ARTIFACTS_DIR") or harness.DEFAULT_ARTIFACTS,
                    "templates", "base")


class E2BDefaultTemplateTest(unittest.TestCase):
    def setUp(self):
        if not os.path.isfile(os.path.join(REAL, "template.json")):
            self.fail(f"no base template at {REAL} (make base-template)")
        self.artifacts = tempfile.mkdtemp(prefix="sandboxd-e2b-templates-")
        self.addCleanup(shutil.rmtree, self.artifacts, True)
        self.templates = os.path.join(self.artifacts, "templates")
        os.mkdir(self.templates)
        os.symlink(REAL, os.path.join(self.templates, "base"))

    def add(self, name):
        """A stand-in template NAME, installed as templates/build.sh installs one: a whole
        directory renamed into place."""
        staging = os.path.join(self.templates, f".{name}.tmp")
        os.mkdir(staging)
        with open(os.path.join(REAL, "template.json"), encoding="utf-8") as f:
            manifest = json.load(f)
        manifest["name"] = name
        with open(os.path.join(staging, "template.json"), "w", encoding="utf-8") as f:
            json.dump(manifest, f)
        os.symlink(os.path.join(REAL, "rootfs"), os.path.join(staging, "rootfs"))
        os.rename(staging, os.path.join(self.templates, name))

    def daemon(self, **env):
        d = harness.Daemon(env={"FIRECRACKER_ARTIFACTS_DIR": self.artifacts,
                                "SANDBOX_WARM_POOL": "0", "SANDBOX_NETWORK": "off",
                                "SANDBOX_DEFAULT_TEMPLATE": "base", **env})
        d.start()
        # Last, after its sandboxes' deletes: it must exit cleanly.
        self.addCleanup(d.stop)
        return d

    def e2b_create(self, d, body):
        """Creates an E2B sandbox; (the templateID it reports, the template it runs)."""
        status, _, sbx = d.post("/sandboxes", body=body)
        self.assertEqual(status, 201, sbx)
        sid = sbx["sandboxID"]
        self.addCleanup(d.delete, f"/sandboxes/{sid}")
        status, _, listed = d.get("/exec/")
        self.assertEqual(status, 200, listed)
        runs = [s["template"] for s in listed["sessions"] if s["id"] == sid]
        self.assertEqual(len(runs), 1, listed)
        status, _, info = d.get(f"/sandboxes/{sid}")
        self.assertEqual(status, 200, info)
        self.assertEqual(info["templateID"], sbx["templateID"], info)
        return sbx["templateID"], runs[0]

    def test_the_default_is_code_interpreter_where_it_is_built_else_busybox_base(self):
        d = self.daemon()
        # Not built: E2B's base is ours.
        self.assertEqual(self.e2b_create(d, {}), ("base", "base"))
        self.assertEqual(self.e2b_create(d, {"templateID": "base"}), ("base", "base"))
        # Built (while the daemon runs: the next create finds it).
        self.add("code-interpreter")
        self.assertEqual(self.e2b_create(d, {}), ("base", "code-interpreter"))
        self.assertEqual(self.e2b_create(d, {"templateID": "base"}), ("base", "code-interpreter"))
        # Its own name, and the code interpreter's alias, as before.
        self.assertEqual(self.e2b_create(d, {"templateID": "code-interpreter"}),
                         ("code-interpreter", "code-interpreter"))
        self.assertEqual(self.e2b_create(d, {"templateID": "code-interpreter-v1"}),
                         ("code-interpreter-v1", "code-interpreter"))
        # The list's template filter takes the name the client asked for.
        status, _, listed = d.get("/v2/sandboxes", query={"template": "base"})
        self.assertEqual(status, 200, listed)
        self.assertEqual(len(listed), 4, listed)
        # The REST API's base is the busybox one, with or without code-interpreter.
        for body in ({"id": "rest-base", "template": "base"}, {"id": "rest-default"}):
            status, _, made = d.post("/exec/", body=body)
            self.assertEqual(status, 201, made)
            self.assertEqual(made["template"], "base", made)
        # Gone again: E2B's base falls back to ours.
        shutil.rmtree(os.path.join(self.templates, "code-interpreter"))
        self.assertEqual(self.e2b_create(d, {}), ("base", "base"))

    def test_aliases_choose_the_default(self):
        self.add("code-interpreter")
        self.add("python")
        d = self.daemon(E2B_TEMPLATE_ALIASES="base=python,base=code-interpreter")
        self.assertEqual(self.e2b_create(d, {}), ("base", "python"))
        shutil.rmtree(os.path.join(self.templates, "python"))
        self.assertEqual(self.e2b_create(d, {"templateID": "base"}), ("base", "code-interpreter"))
        # base=base, or a list with no base= pair: the busybox base, code-interpreter built.
        for aliases in ("base=base,code-interpreter-v1=code-interpreter",
                        "code-interpreter-v1=code-interpreter"):
            d = self.daemon(E2B_TEMPLATE_ALIASES=aliases)
            self.assertEqual(self.e2b_create(d, {}), ("base", "base"))
            self.assertEqual(self.e2b_create(d, {"templateID": "code-interpreter-v1"}),
                             ("code-interpreter-v1", "code-interpreter"))

    def test_an_unknown_template_is_a_400_naming_the_templates(self):
        d = self.daemon(E2B_TEMPLATE_ALIASES="base=nowhere,ghost=nowhere")
        self.assertEqual(self.e2b_create(d, {}), ("base", "base"))
        for asked in ("ghost", "nowhere", "base=nowhere", "x" * 300):
            status, _, body = d.post("/sandboxes", body={"templateID": asked})
            self.assertEqual(status, 400, body)
            self.assertEqual(body["code"], 400, body)
            self.assertIn("not found (templates: base)", body["message"], body)
        status, _, body = d.post("/sandboxes", body={"templateID": 7})
        self.assertEqual(status, 400, body)
        self.assertIn("templateID", body["message"], body)


if __name__ == "__main__":
    unittest.main()
