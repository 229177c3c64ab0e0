"""Bundled templates built into the real artifacts directory, once per set of inputs.

ensure(name) builds templates/<name>/ with templates/build.sh into
$FIRECRACKER_ARTIFACTS_DIR/templates/<name>/ (the directory the daemon and `make run` use),
unless the build there was made from the same inputs: the files of templates/<name>/, the
builder (templates/build.sh, templates/lib/), and the guest agent binary. The SHA-256 of
those inputs is kept next to the build, in templates/<name>/.build-inputs, written once a
build succeeded; any other build of the template (by hand, by `make templates`) replaces the
directory and with it that file, so the next run builds again.

which(): the templates the tests build, from TEMPLATE_TESTS ("all", or names separated by
spaces or commas; default DEFAULT_SET). A template outside the set is not built and its tests
skip, saying how to run them.

Standard library only.
"""

import fcntl
import hashlib
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
TEMPLATES = os.path.join(ROOT, "templates")
BUILD_SH = os.path.join(TEMPLATES, "build.sh")
DEFAULT_ARTIFACTS = "/var/lib/agent-sandbox/artifacts"
STAMP = ".build-inputs"

# Every bundled Dockerfile template. On a 2-core machine a build takes 20 to 50 s (python),
# 60 to 90 s (go) and 70 to 110 s (node), the Debian base image included the first time:
# 3 to 4 minutes together, once per change of their inputs, which is little beside the rest
# of `make test`; so all of them are built and tested by default.
BUNDLED = ("python", "node", "go")
DEFAULT_SET = BUNDLED

# How long one build may take before the test gives up on it.
BUILD_TIMEOUT = int(os.environ.get("TEMPLATE_BUILD_TIMEOUT", "1500"))


def artifacts_dir():
    return os.environ.get("FIRECRACKER_ARTIFACTS_DIR") or DEFAULT_ARTIFACTS


def template_dir(name):
    return os.path.join(artifacts_dir(), "templates", name)


def agent_path():
    return os.environ.get("SANDBOX_AGENT_BIN") or os.path.join(ROOT, "build", "agent",
                                                                 "sandbox-agent")


def which():
    """The templates this run builds and tests, in the order of BUNDLED."""
    raw = os.environ.get("TEMPLATE_TESTS")
    if raw is None:
        return list(DEFAULT_SET)
    words = raw.replace(",", " ").split()
    if "all" in words:
        return list(BUNDLED)
    return [n for n in BUNDLED if n in words]


def not_selected_reason(name):
    """Why a template's tests do not run in this run, or None when they do."""
    if name in which():
        return None
    return (f"the {name} template is not built in this run (TEMPLATE_TESTS="
            f"{os.environ.get('TEMPLATE_TESTS', '')!r}); `make test-templates` builds and "
            f"tests every bundled template")


def _files_under(path):
    out = []
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames.sort()
        for f in sorted(filenames):
            out.append(os.path.join(dirpath, f))
    return out


def inputs_key(name):
    """SHA-256 over everything a build of template `name` is made from, as hex."""
    h = hashlib.sha256()
    files = _files_under(os.path.join(TEMPLATES, name))
    files += [BUILD_SH] + _files_under(os.path.join(TEMPLATES, "lib"))
    for path in files:
        st = os.stat(path)
        h.update(os.path.relpath(path, ROOT).encode() + b"\0")
        h.update(b"x" if st.st_mode & 0o111 else b"-")
        with open(path, "rb") as f:
            h.update(hashlib.sha256(f.read()).digest())
    with open(agent_path(), "rb") as f:
        h.update(b"agent\0" + hashlib.sha256(f.read()).digest())
    return h.hexdigest()


def _current(name, key):
    d = template_dir(name)
    try:
        with open(os.path.join(d, STAMP), encoding="ascii") as f:
            stamp = f.read().strip()
    except OSError:
        return False
    return (stamp == key and os.path.isfile(os.path.join(d, "template.json"))
            and os.path.isdir(os.path.join(d, "rootfs"))
            and os.path.isfile(os.path.join(d, "rootfs.ext4")))


class Build:
    """The result of ensure(): dir, seconds (of the build, 0 when reused), built (bool),
    log (the builder's output when it ran). Holds a shared lock on the builder's lock file
    of the template until release(), so that no other build replaces the template while
    tests use it (templates/build.sh takes that lock exclusively and waits)."""

    def __init__(self, name):
        self.name = name
        self.dir = template_dir(name)
        self.seconds = 0.0
        self.built = False
        self.log = ""
        self._lock = None

    def _take_shared(self):
        lock = os.path.join(artifacts_dir(), "templates", f".{self.name}.lock")
        os.makedirs(os.path.dirname(lock), exist_ok=True)
        self._lock = open(lock, "a")  # noqa: SIM115 - held until release()
        fcntl.flock(self._lock, fcntl.LOCK_SH)

    def release(self):
        if self._lock is not None:
            self._lock.close()
            self._lock = None


TRANSIENT = ("Temporary failure resolving", "Failed to fetch", "Could not connect to",
             "Connection timed out")


def ensure(name):
    """Builds template `name` unless its build is current; returns a Build holding the
    shared lock. Raises AssertionError (with the end of the builder's output) when the build
    fails."""
    if not os.access(agent_path(), os.X_OK):
        raise AssertionError(f"the guest agent is not built at {agent_path()} (ninja -C build)")
    b = Build(name)
    key = inputs_key(name)
    b._take_shared()
    if _current(name, key):
        return b
    b.release()
    start = time.monotonic()
    env = dict(os.environ)
    env.pop("TEMPLATES_DIR", None)  # the bundled sources, which the key is made of
    # The archive's mirror is another host: a name that did not resolve, or a fetch that
    # failed, is tried again twice (said in the log), anything else fails at once.
    for attempt in range(3):
        p = subprocess.run(["bash", BUILD_SH, name], env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=BUILD_TIMEOUT)
        b.log = p.stdout.decode("utf-8", errors="replace")
        if p.returncode == 0 or not any(m in b.log for m in TRANSIENT):
            break
        print(f"templates/build.sh {name}: the archive could not be reached, again in 10 s",
              file=sys.stderr, flush=True)
        time.sleep(10)
    b.seconds = time.monotonic() - start
    if p.returncode != 0:
        tail = "\n".join(b.log.splitlines()[-40:])
        raise AssertionError(f"templates/build.sh {name} failed (exit status {p.returncode}):\n"
                             f"{tail}")
    stamp = os.path.join(b.dir, STAMP)
    with open(stamp + ".tmp", "w", encoding="ascii") as f:
        f.write(key + "\n")
    os.replace(stamp + ".tmp", stamp)
    b.built = True
    b._take_shared()
    return b
