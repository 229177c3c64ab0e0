"""The bundled Debian templates in real sessions: each is built (or its current build reused,
see template_builds.py) into the artifacts directory, a daemon is started on it, and its
language runs and installs a package from a file in the workspace, with no network (the
sandbox has none).

Run with `tests/integration/run.sh tests/templates`; TEMPLATE_TESTS chooses the templates
(template_builds.which()). Prints how long each build and each template's tests took.
"""

import base64
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import fixtures  # noqa: E402
import harness  # noqa: E402
import template_builds  # noqa: E402

# No network in the sandboxes (what every install here must do without), and limits enough
# for a compiler (the default is half a CPU; memory is each template's memSizeMib, and
# VM_MEMORY_LIMIT_BYTES only for a template without one).
DAEMON_ENV = {
    "AUTH_ENABLED": "false",
    "SANDBOX_NETWORK": "off",
    "SANDBOX_WARM_POOL": "0",
    "VM_MEMORY_LIMIT_BYTES": str(1024 * 1024 * 1024),
    "VM_CPU_QUOTA_US": "200000",
}

# Longest any one command here may run (ms): creating a venv, `go run` from a cold cache.
COMMAND_TIMEOUT_MS = 240_000


def report(line):
    print(f"templates: {line}", flush=True)


class TemplateSessionCase(unittest.TestCase):
    """A daemon on one built template; subclasses set `template`."""

    template = None
    daemon_env = {}  # over DAEMON_ENV (a value of None removes a variable)
    d = None

    @classmethod
    def setUpClass(cls):
        # Left out on purpose (TEMPLATE_TESTS names the templates a run builds): a choice of
        # whoever runs the tests, not something missing.
        reason = template_builds.not_selected_reason(cls.template)
        if reason:
            raise unittest.SkipTest(reason)
        if os.geteuid() != 0:
            raise AssertionError("building templates and running jail sandboxes need root "
                                 "(sudo make test)")
        binary = harness.sandboxd_path()
        if not os.access(binary, os.X_OK):
            raise AssertionError(f"sandboxd is not built at {binary} (ninja -C build)")

        build = template_builds.ensure(cls.template)
        cls.addClassCleanup(build.release)
        if build.built:
            report(f"{cls.template}: built in {build.seconds:.1f} s into {build.dir}")
        else:
            report(f"{cls.template}: the build in {build.dir} is current, reused")
        cls.build = build

        cls.d = harness.Daemon(env={**DAEMON_ENV, "SANDBOX_DEFAULT_TEMPLATE": cls.template,
                                    **cls.daemon_env})
        cls.d.start()
        cls.addClassCleanup(cls.d.stop)
        cls.started = time.monotonic()

    @classmethod
    def tearDownClass(cls):
        report(f"{cls.template}: session tests took {time.monotonic() - cls.started:.1f} s")

    # helpers

    def session(self):
        """A new session of this template, deleted when the test ends."""
        sid = f"{self.template}-{self._testMethodName.removeprefix('test_')}"[:60]
        status, _, body = self.d.post("/exec/", body={"id": sid, "template": self.template},
                                      timeout=120)
        self.assertEqual(status, 201, body)
        self.addCleanup(self.d.delete, f"/exec/{sid}", timeout=60)
        return sid

    def execute(self, sid, command, **fields):
        """Runs command; returns (exit code, stdout, stderr)."""
        body = {"command": command, "timeout": COMMAND_TIMEOUT_MS, **fields}
        status, _, resp = self.d.post(f"/exec/{sid}/execute", body=body,
                                      timeout=COMMAND_TIMEOUT_MS / 1000 + 60)
        self.assertEqual(status, 200, resp)
        out = "".join(c["data"] for c in resp["output"] if c["stream"] == "stdout")
        err = "".join(c["data"] for c in resp["output"] if c["stream"] == "stderr")
        return resp.get("exitCode"), out, err

    def run_ok(self, sid, command, **fields):
        """Runs command, expects exit code 0; returns its stdout."""
        code, out, err = self.execute(sid, command, **fields)
        self.assertEqual(code, 0, f"`{command}` exited with {code}\nstdout:\n{out}\n"
                                  f"stderr:\n{err}")
        return out

    def write(self, sid, path, data, mode=None):
        body = {"path": path, "content": base64.b64encode(data).decode(), "encoding": "base64"}
        if mode is not None:
            body["mode"] = mode
        status, _, resp = self.d.post(f"/exec/{sid}/write", body=body, timeout=60)
        self.assertEqual(status, 200, resp)
        self.assertEqual(resp.get("size"), len(data), resp)

    # common tests

    def test_listed_with_its_manifest(self):
        status, _, body = self.d.get("/exec/templates", timeout=30)
        self.assertEqual(status, 200, body)
        found = {t["name"]: t for t in body["templates"]}
        self.assertIn(self.template, found, body)
        m = found[self.template]
        self.assertEqual(m.get("baseImage"), "agent-sandbox-base:latest", m)
        self.assertTrue(m.get("tools"), m)

    def test_no_network_in_the_sandbox(self):
        # SANDBOX_NETWORK=off: the installs below can reach nothing but the sandbox itself.
        sid = self.session()
        out = self.run_ok(sid, "cat /proc/net/dev")
        ifaces = sorted(line.split(":")[0].strip() for line in out.splitlines()[2:])
        self.assertEqual(ifaces, ["lo"], out)


class PythonTemplateTest(TemplateSessionCase):
    template = "python"

    def test_python_prints(self):
        sid = self.session()
        code, out, err = self.execute(sid, "python3", args=["-c", "print(2+2)"])
        self.assertEqual((code, out), (0, "4\n"), err)

    def test_standard_modules_import(self):
        sid = self.session()
        out = self.run_ok(sid, "python3", args=["-c", "import ssl, sqlite3, venv, ensurepip; "
                                                      "print(ssl.OPENSSL_VERSION)"])
        self.assertIn("OpenSSL", out)

    def test_pip_installs_a_wheel_offline_into_a_venv(self):
        sid = self.session()
        name, data = fixtures.wheel()
        self.write(sid, f"wheels/{name}", data)
        self.run_ok(sid, "python3 -m venv /workspace/venv")
        out = self.run_ok(sid, "/workspace/venv/bin/pip install --no-index --no-cache-dir "
                               f"--disable-pip-version-check /workspace/wheels/{name}")
        self.assertIn(f"Successfully installed {fixtures.WHEEL_NAME.replace('_', '-')}", out)
        out = self.run_ok(sid, "/workspace/venv/bin/python", args=[
            "-c", f"import {fixtures.WHEEL_NAME} as m; print(m.answer())"])
        self.assertEqual(out, fixtures.ANSWER + "\n")
        # Installed in the venv, not for the system's python3.
        code, _, _ = self.execute(sid, "python3", args=["-c", f"import {fixtures.WHEEL_NAME}"])
        self.assertNotEqual(code, 0)

    def test_pip_without_a_venv_installs_into_the_workspace(self):
        # The root filesystem is read-only: pip falls back to a user install, under
        # HOME=/home/user (the workspace), which the system's python3 then finds.
        sid = self.session()
        name, data = fixtures.wheel()
        self.write(sid, name, data)
        self.run_ok(sid, f"pip install --no-index --no-cache-dir --disable-pip-version-check {name}")
        out = self.run_ok(sid, "python3", args=[
            "-c", f"import {fixtures.WHEEL_NAME} as m; print(m.answer()); print(m.__file__)"])
        answer, path = out.splitlines()
        self.assertEqual(answer, fixtures.ANSWER)
        self.assertTrue(path.startswith("/home/user/.local/"), path)

    def test_the_user_has_a_name_and_a_home(self):
        sid = self.session()
        out = self.run_ok(sid, "python3", args=[
            "-c", "import getpass, os, pwd; print(getpass.getuser()); "
                  "print(pwd.getpwuid(os.getuid()).pw_dir); print(os.path.expanduser('~')); "
                  "print(os.getcwd())"])
        self.assertEqual(out.splitlines(), ["user", "/home/user", "/home/user", "/home/user"])


class PythonTemplateLimitsTest(TemplateSessionCase):
    """A session's memory comes from its request, else its template's manifest (python's
    template.json says memSizeMib 512), else VM_MEMORY_LIMIT_BYTES (left at its 128 MiB
    here), and never passes the cap SANDBOX_MAX_MEMORY_BYTES."""

    template = "python"
    daemon_env = {"VM_MEMORY_LIMIT_BYTES": None, "SANDBOX_MAX_MEMORY_BYTES": str(1 << 30)}

    # Touches every page: 200 MB resident, which 128 MiB would not hold.
    ALLOC = ["-c", "b = b'x' * (200 * 1000 * 1000); print(len(b))"]

    def test_manifest_memory_holds_200_mb(self):
        sid = self.session()
        status, _, resp = self.d.post(f"/exec/{sid}/execute", timeout=120, body={
            "command": "python3", "args": self.ALLOC, "timeout": COMMAND_TIMEOUT_MS})
        self.assertEqual(status, 200, resp)
        self.assertEqual((resp["exitCode"], resp.get("oomKilled")), (0, None), resp)
        status, _, body = self.d.get("/exec/")
        self.assertEqual(status, 200, body)
        mine = next(s for s in body["sessions"] if s["id"] == sid)
        self.assertEqual(mine["limits"]["memoryBytes"], 512 << 20, mine)
        self.assertNotIn("resources", mine)  # it asked for nothing of its own

    def test_request_before_manifest(self):
        sid = f"python-{self._testMethodName}"[:60]
        status, _, body = self.d.post("/exec/", body={
            "id": sid, "template": "python", "resources": {"memoryBytes": 64 << 20}},
            timeout=120)
        self.assertEqual(status, 201, body)
        self.addCleanup(self.d.delete, f"/exec/{sid}", timeout=60)
        self.assertEqual(body["limits"]["memoryBytes"], 64 << 20, body)
        self.assertEqual(body["resources"], {"memoryBytes": 64 << 20}, body)
        status, _, resp = self.d.post(f"/exec/{sid}/execute", timeout=120, body={
            "command": "python3", "args": self.ALLOC, "timeout": COMMAND_TIMEOUT_MS})
        self.assertEqual(status, 200, resp)
        self.assertIs(resp.get("oomKilled"), True, resp)

    def test_request_above_the_cap_is_refused(self):
        status, _, body = self.d.post("/exec/", body={
            "template": "python", "resources": {"memoryBytes": 2 << 30}}, timeout=60)
        self.assertEqual(status, 400, body)
        self.assertIn("SANDBOX_MAX_MEMORY_BYTES", body["error"])
        self.assertIn(str(1 << 30), body["error"])


class NodeTemplateTest(TemplateSessionCase):
    template = "node"

    def test_node_prints(self):
        sid = self.session()
        code, out, err = self.execute(sid, "node", args=["-e", "console.log(2+2)"])
        self.assertEqual((code, out), (0, "4\n"), err)

    def test_the_user_has_a_name_and_a_home(self):
        sid = self.session()
        out = self.run_ok(sid, "node", args=[
            "-e", "const os = require('os'); const u = os.userInfo(); "
                  "console.log(u.username, u.homedir, os.homedir(), process.cwd())"])
        self.assertEqual(out, "user /home/user /home/user /home/user\n")

    def test_npm_installs_a_tarball_offline(self):
        sid = self.session()
        name, data = fixtures.npm_tarball()
        self.write(sid, f"app/{name}", data)
        self.run_ok(sid, "npm install --offline --no-audit --no-fund --no-update-notifier "
                         f"./{name}", cwd="app")
        out = self.run_ok(sid, "node", args=[
            "-e", f"console.log(require({fixtures.NPM_NAME!r}).answer())"], cwd="app")
        self.assertEqual(out, fixtures.ANSWER + "\n")


class GoTemplateTest(TemplateSessionCase):
    template = "go"

    def test_go_runs_a_module_with_a_local_dependency(self):
        sid = self.session()
        for path, text in fixtures.go_module().items():
            self.write(sid, f"app/{path}", text.encode())
        # GOPROXY=off: nothing may be downloaded.
        out = self.run_ok(sid, "go run .", cwd="app",
                          env={"GOPROXY": "off", "GOFLAGS": "-mod=mod"})
        self.assertEqual(out, fixtures.ANSWER + "\n")

    def test_go_prints(self):
        sid = self.session()
        self.write(sid, "hello/main.go",
                   b'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println(2 + 2) }\n')
        code, out, err = self.execute(sid, "go run main.go", cwd="hello")
        self.assertEqual((code, out), (0, "4\n"), err)


def load_tests(loader, tests, pattern):
    """The templates in the order of template_builds.BUNDLED, python first."""
    suite = unittest.TestSuite()
    for cls in (PythonTemplateTest, PythonTemplateLimitsTest, NodeTemplateTest, GoTemplateTest):
        suite.addTests(loader.loadTestsFromTestCase(cls))
    return suite
