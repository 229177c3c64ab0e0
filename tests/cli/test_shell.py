"""`sandbox shell` on a real local terminal (a pseudo-terminal the test drives): raw mode, the
remote size following the local one (SIGWINCH), the exit status, the terminal restored; and
with a pipe for stdin."""

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))

import harness  # noqa: E402

CLI = os.environ.get("SANDBOX_CLI") or os.path.join(ROOT, "build", "cli", "sandbox")


def set_size(fd, rows, cols):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class ShellTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.daemon = harness.Daemon(env={"SANDBOX_DEFAULT_TEMPLATE": "base",
                                         "SANDBOX_WARM_POOL": "1"})
        cls.daemon.start()
        cls.env = dict(os.environ, SANDBOX_URL=cls.daemon.base_url,
                       SANDBOX_API_KEY=cls.daemon.admin_key, TERM="xterm")

    @classmethod
    def tearDownClass(cls):
        cls.daemon.stop()

    def spawn(self, script):
        """Runs `sh -c script` on a new local terminal; returns (pid, master fd)."""
        pid, master = pty.fork()
        if pid == 0:
            os.execvpe("/bin/sh", ["/bin/sh", "-c", script], self.env)
        self.addCleanup(os.close, master)
        return pid, master

    def read_until(self, master, needle, timeout=60):
        out = b""
        end = time.monotonic() + timeout
        while needle not in out:
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out waiting for {needle!r}; got {out[-1500:]!r}")
            r, _, _ = select.select([master], [], [], left)
            if r:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
        return out

    def wait(self, pid):
        for _ in range(600):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status)
            time.sleep(0.1)
        raise AssertionError("the CLI did not exit")

    def test_raw_mode_size_resize_exit_status_and_restore(self):
        sid = f"shell-{os.getpid()}"
        self.addCleanup(self.daemon.delete, f"/exec/{sid}")
        script = (f"stty -g > before; {CLI} shell {sid} --command sh; echo cli-exit:$?; "
                  "stty -g > after; echo restored; sleep 0.2")
        tmp = self.daemon.tmp
        pid, master = self.spawn(f"cd {tmp} && {script}")
        set_size(master, 33, 111)
        self.read_until(master, b"$ ")
        os.write(master, b"stty size\r")
        self.read_until(master, b"33 111")
        # The local terminal is resized: the remote one follows.
        set_size(master, 40, 120)
        time.sleep(0.5)
        os.write(master, b"stty size\r")
        self.read_until(master, b"40 120")
        # ^C is a byte in raw mode: it reaches the remote program, not the CLI.
        os.write(master, b"sleep 50\r")
        time.sleep(0.5)
        os.write(master, b"\x03")
        os.write(master, b"echo after:$?\r")
        self.read_until(master, b"after:130")
        os.write(master, b"exit 4\r")
        out = self.read_until(master, b"restored")
        self.assertIn(b"cli-exit:4", out)
        self.assertEqual(self.wait(pid), 0)
        with open(os.path.join(tmp, "before")) as b, open(os.path.join(tmp, "after")) as a:
            self.assertEqual(b.read(), a.read())

    def test_stdin_from_a_pipe_and_errors(self):
        sid = f"shell-pipe-{os.getpid()}"
        self.addCleanup(self.daemon.delete, f"/exec/{sid}")
        p = subprocess.run([CLI, "shell", sid, "--command", "sh"], env=self.env,
                           input=b"echo piped $((2+3))\nexit 6\n", capture_output=True,
                           timeout=60)
        self.assertEqual(p.returncode, 6, p.stderr)
        self.assertIn(b"piped 5", p.stdout)
        p = subprocess.run([CLI, "shell", "bad id!"], env=self.env, input=b"",
                           capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"Invalid session id", p.stderr)
        p = subprocess.run([CLI, "shell", sid], env=dict(self.env, SANDBOX_API_KEY="sk_test_"
                                                         + "0" * 32),
                           input=b"", capture_output=True, timeout=60)
        self.assertEqual(p.returncode, 1)
        self.assertIn(b"401", p.stderr)
        p = subprocess.run([CLI, "shell", sid, "--bogus"], env=self.env, input=b"",
                           capture_output=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)


if __name__ == "__main__":
    unittest.main()
