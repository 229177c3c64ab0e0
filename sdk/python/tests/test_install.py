"""`pip install ./sdk/python` from the repository root gives a working package, offline."""

import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))


class InstallTest(unittest.TestCase):
    def test_pip_install_from_the_checkout(self):
        with tempfile.TemporaryDirectory() as tmp:
            venv = os.path.join(tmp, "venv")
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
            py = os.path.join(venv, "bin", "python")
            # No package index: the build must need nothing beyond the checkout.
            env = dict(os.environ, PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1")
            env.pop("PYTHONPATH", None)
            p = subprocess.run([py, "-m", "pip", "install", "./sdk/python"], cwd=ROOT, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            self.assertEqual(p.returncode, 0, p.stdout)
            script = ("import agent_sandbox\n"
                      "sb = agent_sandbox.Sandbox(base_url='http://127.0.0.1:9', api_key='x')\n"
                      "print(agent_sandbox.__file__, agent_sandbox.__version__, sb.healthy())\n")
            p = subprocess.run([py, "-c", script], cwd=tmp, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
            self.assertEqual(p.returncode, 0, p.stdout)
            where, version, healthy = p.stdout.split()
            self.assertTrue(where.startswith(venv), where)
            self.assertEqual((version, healthy), ("0.1.0", "False"))
            self.assertFalse(os.path.exists(os.path.join(ROOT, "sdk", "python", "build")))


if __name__ == "__main__":
    unittest.main()
