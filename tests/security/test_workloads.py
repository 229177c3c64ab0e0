"""Ordinary workloads under the jail's seccomp allow list, user namespace and command user:
what the bundled templates contain, run the way an agent would run it. A system call missing
from the allow list shows up here as a failing workload (ENOSYS, "Function not implemented").

  base    busybox applets: shell pipelines, files, archives (tar, gzip, cpio), processes
  python  python3 scripts (sqlite3, threads, processes, asyncio, lzma/tar.xz, sockets, a web
          server on port 80 fetched with urllib and curl, mmap, select/epoll), git, perl, tar
  node    node scripts (fs, child processes, worker threads, zlib, crypto, an HTTP server on
          port 80 fetched with fetch), npm

Neither template has gcc, make, xz or the sqlite3 command: those are not covered here.
Run with `tests/integration/run.sh tests/security`."""

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import harness  # noqa: E402
from helpers_exec import BASE_ENV, artifacts_dir  # noqa: E402


def have_template(name):
    return os.path.isdir(os.path.join(artifacts_dir(), "templates", name, "rootfs"))


BUSYBOX = r"""
set -e
mkdir -p d/e && echo hello > d/e/f && cp d/e/f g && mv g h && ln -s h l && readlink l
cat l | grep hel | sed s/hello/bye/ | wc -c
tar czf a.tgz d && rm -rf d && tar xzf a.tgz && test -f d/e/f
gzip -c h > h.gz && gunzip -c h.gz | grep -q hello
echo d/e/f | cpio -o -H newc > a.cpio 2>/dev/null && test -s a.cpio
base64 h | base64 -d | grep -q hello
stat -c %s h >/dev/null && touch -d 2020-01-01 h && chmod 600 h
dd if=/dev/zero of=z bs=1k count=64 2>/dev/null && test "$(stat -c %s z)" = 65536
head -c 16 /dev/urandom | wc -c | grep -q 16
sleep 0.1 & wait
ps >/dev/null && df /workspace >/dev/null && uname -a >/dev/null && hostname >/dev/null
date +%s >/dev/null && mktemp >/dev/null && id >/dev/null
echo done
"""

PYTHON = r"""
import asyncio, hashlib, json, lzma, mmap, multiprocessing, os, select, signal, socket
import sqlite3, ssl, subprocess, tarfile, tempfile, threading, urllib.request

db = sqlite3.connect("t.db")
db.execute("create table t (k integer primary key, v text)")
db.executemany("insert into t (v) values (?)", [(str(i),) for i in range(1000)])
db.commit()
assert db.execute("select count(*) from t").fetchone()[0] == 1000

results = []
threads = [threading.Thread(target=lambda i=i: results.append(i * i)) for i in range(8)]
[t.start() for t in threads]
[t.join() for t in threads]
assert sorted(results) == [i * i for i in range(8)]

with multiprocessing.Pool(2) as pool:
    assert pool.map(abs, [-1, -2, 3]) == [1, 2, 3]

with tarfile.open("a.tar.xz", "w:xz") as t:
    t.add("t.db")
with tarfile.open("a.tar.xz") as t:
    assert t.getnames() == ["t.db"]
assert lzma.decompress(lzma.compress(b"x" * 1000)) == b"x" * 1000

async def echo():
    async def handle(r, w):
        w.write(await r.read(5))
        await w.drain()
        w.close()
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"hello")
    assert await r.read(5) == b"hello"
    server.close()
asyncio.run(echo())

web = subprocess.Popen(["python3", "-m", "http.server", "80", "--bind", "127.0.0.1"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(100):
    try:
        body = urllib.request.urlopen("http://127.0.0.1:80/", timeout=5).read()
        break
    except OSError:
        import time
        time.sleep(0.05)
assert b"t.db" in body
assert b"t.db" in subprocess.check_output(["curl", "-s", "http://127.0.0.1:80/"])
web.terminate()
web.wait()

with open("m", "wb") as f:
    f.write(b"\0" * 4096)
with open("m", "r+b") as f, mmap.mmap(f.fileno(), 4096) as m:
    m[0:5] = b"hello"
a, b = socket.socketpair()
ep = select.epoll()
ep.register(a, select.EPOLLIN)
b.send(b"x")
assert ep.poll(1)
signal.signal(signal.SIGUSR1, lambda *_: None)
os.kill(os.getpid(), signal.SIGUSR1)
ssl.create_default_context()
hashlib.sha256(b"x").hexdigest()
# AI_ADDRCONFIG and if_nameindex read the interfaces over NETLINK_ROUTE.
socket.getaddrinfo("127.0.0.1", 80, flags=socket.AI_ADDRCONFIG)
assert "lo" in [n for _, n in socket.if_nameindex()]
pid = os.fork()
if pid == 0:
    os._exit(7)
assert os.waitpid(pid, 0)[1] >> 8 == 7
print("done")
"""

PY_TOOLS = r"""
set -e
git init -q repo && cd repo && git config user.email a@b && git config user.name a
echo x > f && git add f && git commit -qm one && git log --oneline | grep -q one && cd ..
perl -e 'print "perl ok\n"' | grep -q ok
tar czf r.tgz repo && tar tzf r.tgz | grep -q repo/f
echo done
"""

NODE = r"""
const assert = require("assert"), fs = require("fs"), cp = require("child_process");
const http = require("http"), zlib = require("zlib"), crypto = require("crypto");
const { Worker } = require("worker_threads");
fs.writeFileSync("n.txt", "hello");
assert.equal(fs.readFileSync("n.txt", "utf8"), "hello");
assert.equal(cp.execSync("echo hi").toString(), "hi\n");
assert.equal(zlib.gunzipSync(zlib.gzipSync("zz")).toString(), "zz");
crypto.randomBytes(16); crypto.createHash("sha256").update("x").digest("hex");
new Worker("require('worker_threads').parentPort.postMessage(42)", { eval: true })
  .on("message", (m) => {
    assert.equal(m, 42);
    const server = http.createServer((q, s) => s.end("node ok")).listen(80, "127.0.0.1",
      async () => {
        const body = await (await fetch("http://127.0.0.1:80/")).text();
        assert.equal(body, "node ok");
        server.close();
        console.log("done");
      });
  });
"""


class WorkloadTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        env = {**BASE_ENV, "SANDBOX_DRIVER": "jail", "SANDBOX_NETWORK": "off",
               "SANDBOX_WARM_POOL": "0", "VM_MEMORY_LIMIT_BYTES": str(512 << 20)}
        cls.d = harness.Daemon(env=env)
        cls.d.start()
        cls.addClassCleanup(cls.d.stop)

    def run_script(self, template, name, script, command):
        if not have_template(template):
            self.skipTest(f"the {template} template is not built")
        status, _, body = self.d.post("/exec/", {"template": template})
        self.assertEqual(status, 201, body)
        sid = body["id"]
        self.addCleanup(self.d.delete, f"/exec/{sid}")
        status, _, body = self.d.post(f"/exec/{sid}/write", {"path": name, "content": script})
        self.assertEqual(status, 200, body)
        status, _, body = self.d.post(f"/exec/{sid}/execute",
                                      {"command": command, "timeout": 120000}, timeout=180)
        self.assertEqual(status, 200, body)
        out = "".join(o["data"] for o in body["output"])
        self.assertEqual(body["exitCode"], 0, out)
        self.assertTrue(out.rstrip().endswith("done"), out)
        self.assertNotIn("not implemented", out.lower(), out)

    def test_busybox_applets(self):
        self.run_script("base", "w.sh", BUSYBOX, "sh w.sh")

    def test_python_scripts(self):
        self.run_script("python", "w.py", PYTHON, "python3 w.py")

    def test_python_template_tools(self):
        self.run_script("python", "w.sh", PY_TOOLS, "sh w.sh")

    def test_node_scripts(self):
        self.run_script("node", "w.js", NODE, "node w.js")

    def test_npm(self):
        self.run_script("node", "w.sh", "npm --version >/dev/null\necho done\n", "sh w.sh")


if __name__ == "__main__":
    unittest.main()
