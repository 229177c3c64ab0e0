"""Ordinary workloads under the jail's seccomp allow list, user namespace and command user:
what the bundled templates contain, run the way an agent would run it. A system call missing
from the allow list shows up here as a failing workload (ENOSYS, "Function not implemented").

  base    busybox applets: shell pipelines, files, archives (tar, gzip, cpio), processes
  python  python3 scripts (sqlite3, threads, processes, asyncio, lzma/tar.xz, sockets, a web
          server on port 80 fetched with urllib and curl, mmap, select/epoll), git, perl, tar;
          `python3 -m http.server 80` fetched with curl; tar.xz through tar and xz; the
          sqlite3 command; a wheel built in the sandbox and installed with pip
  node    node scripts (fs, child processes, worker threads, zlib, crypto, an HTTP server on
          port 80 fetched with fetch); a package made with `npm pack` and installed with
          `npm install`
  go      a C program built with gcc (threads, fork and exec, mmap, files, sockets), a
          multi-file C project built with make, and `go build` of a program with goroutines
          and net/http, with cgo and without

The sandboxes have no network (SANDBOX_NETWORK=off): every install here is of a local file.
A template built before it had the tools a test needs fails that test, saying to rebuild it.
Run with `tests/integration/run.sh tests/security`."""

import json
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

import harness  # noqa: E402
from helpers_exec import BASE_ENV, artifacts_dir  # noqa: E402


def have_template(name):
    return os.path.isdir(os.path.join(artifacts_dir(), "templates", name, "rootfs"))


def template_tools(name):
    """The tools the built template's manifest lists."""
    with open(os.path.join(artifacts_dir(), "templates", name, "template.json")) as f:
        return json.load(f).get("tools", [])


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


PY_CLI = r"""
set -ex
mkdir -p tree/sub && echo hello > tree/f && head -c 300000 /dev/urandom > tree/sub/r
tar cJf t.tar.xz tree && xz -t t.tar.xz && tar tJf t.tar.xz | grep -q tree/sub/r
mv tree old && tar xJf t.tar.xz && cmp old/sub/r tree/sub/r && grep -q hello tree/f
xz -T2 -6 -k tree/sub/r && unxz -c tree/sub/r.xz | cmp - old/sub/r
sqlite3 t.db 'pragma journal_mode=wal;' | grep -qx wal
sqlite3 t.db 'create table t (k integer primary key, v text);'
sqlite3 t.db "insert into t (v) values ('a'), ('b'), ('c');"
test "$(sqlite3 t.db 'select count(*) from t;')" = 3
test "$(sqlite3 t.db "select group_concat(v, ',') from t order by k;")" = a,b,c
sqlite3 t.db .dump | sqlite3 u.db
test "$(sqlite3 -separator : u.db 'select k, v from t where v = "b";')" = 2:b
echo done
"""

HTTP_SERVER = r"""
set -ex
mkdir www && echo served-file > www/page.txt && cd www
python3 -m http.server 80 >../server.log 2>&1 &
server=$!
i=0
until curl -sf http://127.0.0.1:80/page.txt >../got 2>/dev/null; do
  i=$((i + 1)); test $i -lt 200 || { cat ../server.log; exit 1; }; sleep 0.05
done
grep -qx served-file ../got
curl -sf http://127.0.0.1/ | grep -q page.txt
kill $server && wait $server || true
grep -q '"GET /page.txt HTTP/1.1" 200' ../server.log
echo done
"""

# A wheel built in the sandbox from a pyproject.toml (setuptools, no build isolation: nothing
# to download), installed into a virtual environment from the file.
PIP_FILES = {
    "src/pyproject.toml": (
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "corpus-pkg"\nversion = "1.0"\n'
    ),
    "src/corpus_pkg/__init__.py": 'def answer():\n    return "corpus " + str(6 * 7)\n',
}
PIP = r"""
set -ex
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INDEX=1 PIP_NO_CACHE_DIR=1
pip wheel --no-deps --no-build-isolation -w wheels ./src
test -f wheels/corpus_pkg-1.0-py3-none-any.whl
python3 -m venv venv
venv/bin/pip install wheels/corpus_pkg-1.0-py3-none-any.whl >install.log
grep -q 'Successfully installed corpus-pkg-1.0' install.log
venv/bin/python -c 'import corpus_pkg; print(corpus_pkg.answer())' | grep -qx 'corpus 42'
echo done
"""

NPM_FILES = {
    "pkg/package.json": '{"name": "corpus-pkg", "version": "1.0.0", "main": "index.js", '
                        '"license": "MIT"}\n',
    "pkg/index.js": 'exports.answer = () => "corpus " + 6 * 7;\n',
    "app/package.json": '{"name": "app", "version": "1.0.0", "private": true}\n',
}
NPM = r"""
set -ex
export npm_config_update_notifier=false npm_config_audit=false npm_config_fund=false
(cd pkg && npm pack --silent) | grep -qx corpus-pkg-1.0.0.tgz
cd app && npm install --offline ../pkg/corpus-pkg-1.0.0.tgz
node -e 'console.log(require("corpus-pkg").answer())' | grep -qx 'corpus 42'
node -p 'require("./package.json").dependencies["corpus-pkg"]' >dep
grep -qx file:../pkg/corpus-pkg-1.0.0.tgz dep
test -f package-lock.json
echo done
"""

# Threads, fork and exec (of itself, and of sh through popen), shared and file mappings,
# files, TCP on the loopback and a socket pair.
C_PROGRAM = r"""
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(x)                                                                   \
	do {                                                                       \
		if (!(x)) {                                                        \
			fprintf(stderr, "line %d: %s: %s\n", __LINE__, #x, strerror(errno)); \
			exit(1);                                                   \
		}                                                                  \
	} while (0)

static long counter;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *count(void *arg)
{
	for (int i = 0; i < 100000; i++) {
		pthread_mutex_lock(&lock);
		counter++;
		pthread_mutex_unlock(&lock);
	}
	return arg;
}

static void *client(void *arg)
{
	struct sockaddr_in *addr = arg;
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(fd >= 0);
	CHECK(connect(fd, (struct sockaddr *)addr, sizeof(*addr)) == 0);
	CHECK(write(fd, "ping", 4) == 4);
	char buf[4];
	CHECK(read(fd, buf, 4) == 4 && memcmp(buf, "pong", 4) == 0);
	close(fd);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "child") == 0)
		return atoi(argv[2]);

	pthread_t t[4];
	for (int i = 0; i < 4; i++)
		CHECK(pthread_create(&t[i], NULL, count, NULL) == 0);
	for (int i = 0; i < 4; i++)
		CHECK(pthread_join(t[i], NULL) == 0);
	CHECK(counter == 400000);

	int *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	CHECK(shared != MAP_FAILED);
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		*shared = 42;
		execl("/proc/self/exe", argv[0], "child", "7", (char *)NULL);
		_exit(127);
	}
	int status;
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 7 && *shared == 42);
	FILE *p = popen("echo from-sh", "r");
	CHECK(p != NULL);
	char line[64] = "";
	CHECK(fgets(line, sizeof(line), p) != NULL && strcmp(line, "from-sh\n") == 0);
	CHECK(pclose(p) == 0);

	int fd = open("data.bin", O_RDWR | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0 && ftruncate(fd, 1 << 20) == 0);
	char *m = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK(m != MAP_FAILED);
	memset(m, 'x', 1 << 20);
	CHECK(msync(m, 1 << 20, MS_SYNC) == 0 && munmap(m, 1 << 20) == 0);
	char buf[16];
	CHECK(pread(fd, buf, sizeof(buf), 4096) == sizeof(buf) && buf[0] == 'x');
	CHECK(fsync(fd) == 0 && close(fd) == 0);
	struct stat st;
	CHECK(rename("data.bin", "moved.bin") == 0 && stat("moved.bin", &st) == 0);
	CHECK(st.st_size == 1 << 20 && unlink("moved.bin") == 0);

	int srv = socket(AF_INET, SOCK_STREAM, 0);
	CHECK(srv >= 0);
	struct sockaddr_in addr = { .sin_family = AF_INET };
	addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	socklen_t len = sizeof(addr);
	CHECK(bind(srv, (struct sockaddr *)&addr, sizeof(addr)) == 0 && listen(srv, 4) == 0);
	CHECK(getsockname(srv, (struct sockaddr *)&addr, &len) == 0);
	pthread_t c;
	CHECK(pthread_create(&c, NULL, client, &addr) == 0);
	int conn = accept(srv, NULL, NULL);
	CHECK(conn >= 0);
	CHECK(read(conn, buf, 4) == 4 && memcmp(buf, "ping", 4) == 0);
	CHECK(write(conn, "pong", 4) == 4);
	CHECK(pthread_join(c, NULL) == 0);
	close(conn);
	close(srv);
	int sv[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	CHECK(write(sv[0], "u", 1) == 1 && read(sv[1], buf, 1) == 1 && buf[0] == 'u');

	puts("done");
	return 0;
}
"""

MAKE_FILES = {
    "proj/Makefile": (
        "CFLAGS = -O2 -Wall -Werror\n"
        "OBJS = main.o greet.o\n\n"
        "app: $(OBJS)\n"
        "\t$(CC) $(CFLAGS) -o $@ $(OBJS)\n\n"
        "%.o: %.c greet.h\n"
        "\t$(CC) $(CFLAGS) -c -o $@ $<\n\n"
        "clean:\n"
        "\trm -f app $(OBJS)\n\n"
        ".PHONY: clean\n"
    ),
    "proj/greet.h": "const char *greeting(void);\n",
    "proj/greet.c": '#include "greet.h"\n\nconst char *greeting(void) { return "made"; }\n',
    "proj/main.c": (
        '#include <stdio.h>\n\n#include "greet.h"\n\n'
        'int main(void)\n{\n\tputs(greeting());\n\treturn 0;\n}\n'
    ),
}
AIO_PROGRAM = r"""#include <aio.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int main(void)
{
	unsigned long ctx = 0;
	if (syscall(SYS_io_setup, 8, &ctx) == 0 || errno != ENOSYS) {
		printf("io_setup: %s\n", strerror(errno));
		return 1;
	}
	int fd = open("aio.dat", O_RDWR | O_CREAT | O_TRUNC, 0600);
	char out[4096], in[4096];
	memset(out, 'a', sizeof(out));
	struct aiocb cb = { .aio_fildes = fd, .aio_buf = out, .aio_nbytes = sizeof(out) };
	const struct aiocb *list[1] = { &cb };
	if (fd < 0 || aio_write(&cb) < 0)
		return 1;
	while (aio_error(&cb) == EINPROGRESS)
		aio_suspend(list, 1, NULL);
	if (aio_return(&cb) != (ssize_t)sizeof(out))
		return 1;
	cb.aio_buf = in;
	if (aio_read(&cb) < 0)
		return 1;
	while (aio_error(&cb) == EINPROGRESS)
		aio_suspend(list, 1, NULL);
	if (aio_return(&cb) != (ssize_t)sizeof(in) || memcmp(in, out, sizeof(in)))
		return 1;
	puts("done");
	return 0;
}
"""

C_TOOLS = r"""
set -ex
gcc -O2 -Wall -Werror -pthread -o w w.c && ./w | grep -qx done
cd proj
make -j2 && ./app | grep -qx made
make -q app
rm greet.o && make >rebuild.log && grep -q greet.c rebuild.log && ! grep -q main.c rebuild.log
make clean && test ! -e app
echo done
"""

# Goroutines and net/http; cAnswer() comes from C (cgo.go) when cgo is on, else from Go
# (nocgo.go, which the cgo build constraint leaves out of a cgo build).
GO_FILES = {
    "app/go.mod": "module example.com/corpus\n\ngo 1.19\n",
    "app/main.go": r"""package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
)

func main() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "hello %s", r.URL.Path[1:])
	}))
	var wg sync.WaitGroup
	replies := make(chan string, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			resp, err := http.Get(fmt.Sprintf("http://%s/%d", ln.Addr(), i))
			if err != nil {
				panic(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				panic(err)
			}
			replies <- string(body)
		}(i)
	}
	wg.Wait()
	close(replies)
	seen := map[string]bool{}
	for r := range replies {
		seen[r] = true
	}
	if len(seen) != 16 || !seen["hello 15"] {
		fmt.Println("unexpected replies:", seen)
		os.Exit(1)
	}
	fmt.Println(cAnswer())
	fmt.Println("done")
}
""",
    "app/cgo.go": r"""package main

/*
static int twice(int x) { return 2 * x; }
*/
import "C"

import "fmt"

func cAnswer() string { return fmt.Sprintf("cgo %d", int(C.twice(21))) }
""",
    "app/nocgo.go": """//go:build !cgo

package main

func cAnswer() string { return "pure go" }
""",
}
# GOPROXY=off: nothing may be downloaded.
GO = r"""
set -ex
export GOPROXY=off GOFLAGS=-mod=mod
cd app
CGO_ENABLED=0 go build -o app-pure . && ./app-pure >pure.out
grep -qx 'pure go' pure.out
CGO_ENABLED=1 go build -o app-cgo . && ./app-cgo >cgo.out
grep -qx 'cgo 42' cgo.out
go vet ./...
echo done
"""


class WorkloadTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        # Memory: a template's memSizeMib, else 512 MiB. CPU: two CPUs' worth rather than the
        # default half, for the compilers.
        env = {**BASE_ENV, "SANDBOX_DRIVER": "jail", "SANDBOX_NETWORK": "off",
               "SANDBOX_WARM_POOL": "0", "VM_MEMORY_LIMIT_BYTES": str(512 << 20),
               "VM_CPU_QUOTA_US": "200000"}
        cls.d = harness.Daemon(env=env)
        cls.d.start()
        cls.addClassCleanup(cls.d.stop)

    def session(self, template, needs=()):
        if not have_template(template):
            self.skipTest(f"the {template} template is not built")
        missing = [t for t in needs if t not in template_tools(template)]
        self.assertEqual(missing, [], f"the {template} template in {artifacts_dir()} was built "
                                      f"without {', '.join(missing)}: rebuild it "
                                      f"(templates/build.sh {template})")
        status, _, body = self.d.post("/exec/", {"template": template})
        self.assertEqual(status, 201, body)
        sid = body["id"]
        self.addCleanup(self.d.delete, f"/exec/{sid}")
        return sid

    def execute(self, sid, command):
        """Runs command; returns (exit code, stdout and stderr together)."""
        status, _, body = self.d.post(f"/exec/{sid}/execute",
                                      {"command": command, "timeout": 240000}, timeout=300)
        self.assertEqual(status, 200, body)
        return body["exitCode"], "".join(o["data"] for o in body["output"])

    def run_script(self, template, name, script, command, files=None, needs=()):
        sid = self.session(template, needs)
        for path, content in {**(files or {}), name: script}.items():
            status, _, body = self.d.post(f"/exec/{sid}/write", {"path": path,
                                                                  "content": content})
            self.assertEqual(status, 200, body)
        code, out = self.execute(sid, command)
        self.assertEqual(code, 0, out)
        self.assertTrue(out.rstrip().endswith("done"), out)
        self.assertNotIn("not implemented", out.lower(), out)

    def test_commands_run_confined(self):
        # What the workloads here run under: the allow list (seccomp mode 2, no_new_privs), no
        # capabilities, the command user, a user namespace whose root is not the host's.
        sid = self.session("base")
        code, out = self.execute(sid, "cat /proc/self/status; "
                                      "echo uid_map: $(cat /proc/self/uid_map)")
        self.assertEqual(code, 0, out)
        status = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
        status = {k: v.split() for k, v in status.items()}
        self.assertEqual(status["Seccomp"], ["2"], out)
        self.assertEqual(status["NoNewPrivs"], ["1"], out)
        self.assertEqual(status["CapEff"], ["0000000000000000"], out)
        self.assertEqual(status["Uid"], ["1000"] * 4, out)
        inside, outside, _ = status["uid_map"]
        self.assertEqual(inside, "0", out)
        self.assertNotEqual(outside, "0", out)

    def test_busybox_applets(self):
        self.run_script("base", "w.sh", BUSYBOX, "sh w.sh")

    def test_python_scripts(self):
        self.run_script("python", "w.py", PYTHON, "python3 w.py")

    def test_python_template_tools(self):
        self.run_script("python", "w.sh", PY_TOOLS, "sh w.sh")

    def test_xz_through_tar_and_the_sqlite3_command(self):
        self.run_script("python", "w.sh", PY_CLI, "sh w.sh", needs=("xz", "sqlite3"))

    def test_python_http_server_on_port_80(self):
        self.run_script("python", "w.sh", HTTP_SERVER, "sh w.sh")

    def test_pip_installs_a_wheel_built_in_the_sandbox(self):
        self.run_script("python", "w.sh", PIP, "sh w.sh", files=PIP_FILES)

    def test_node_scripts(self):
        self.run_script("node", "w.js", NODE, "node w.js")

    def test_npm_installs_a_packed_tarball(self):
        self.run_script("node", "w.sh", NPM, "sh w.sh", files=NPM_FILES)

    def test_gcc_and_make(self):
        self.run_script("go", "w.sh", C_TOOLS, "sh w.sh", files={"w.c": C_PROGRAM, **MAKE_FILES},
                        needs=("gcc", "make"))

    def test_aio_users_fall_back_to_posix_aio(self):
        # Native AIO is refused (ENOSYS: fs.aio-max-nr is one budget for the whole host);
        # glibc's POSIX AIO, which is threads, works.
        self.run_script("go", "w.sh", "set -e\ngcc -O2 -Wall -Werror -o aio aio.c -lrt && ./aio\n",
                        "sh w.sh", files={"aio.c": AIO_PROGRAM}, needs=("gcc",))

    def test_go_build_with_and_without_cgo(self):
        self.run_script("go", "w.sh", GO, "sh w.sh", files=GO_FILES, needs=("go", "gcc"))


if __name__ == "__main__":
    unittest.main()
