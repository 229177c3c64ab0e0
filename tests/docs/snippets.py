"""Every fenced code block of the documentation is tagged, and every one tagged `run` runs.

A fence's info string names the language first (so that GitHub still highlights it), then
one tag:

    ```sh run                      run by this suite, as written
    ```json no-run: a config file  not run, and why

A block without a tag, with another tag, or with `no-run` in README.md or docs/api.md (where
every block must run) fails. The documents are every tracked *.md file.

The `run` blocks of one document run in order, each as its own process, in one scratch
directory, against one fresh sandboxd started by the harness (the ASan build in `make test`,
$SANDBOXD) with its defaults (authentication on, the warm pool, the default template) on
http://127.0.0.1:3000, the address the documents use. The snippets get what the README's
Quick start tells a user to set, and only that: its `export` line, run by bash in the
checkout's top directory with the fresh daemon's admin key in place of `sk_test_...` (so
SANDBOX_URL, SANDBOX_API_KEY, and PATH with the command-line client `sandbox` on it).

The commands the README shows (its code blocks, indented or fenced) work as root on a machine
without sudo: none of them runs `sudo`. Languages:

    sh, bash, shell        bash with -e and -o pipefail; curl fails on an error status
                           (--fail-with-body is added), so a snippet whose request fails fails
    python                 python3, with the Python SDK of the checkout on PYTHONPATH
    ts, typescript, js,    node, as an ES module in a directory where the TypeScript SDK of
    javascript             the checkout is installed (npm pack, then npm install --offline);
                           TypeScript is transpiled first with the SDK's own compiler

A block fails when it exits non-zero or runs longer than SNIPPET_TIMEOUT seconds, and the
daemon of each document must exit cleanly (no sanitizer report, no leak).

The daemon listens on port 3000, so the snippets run in a network namespace of their own
(scripts/isolated.sh): this script, started outside one, first makes sure the templates the
snippets use are built and current (tests/templates/template_builds.py, which needs the
network on a fresh machine and shares its lock with the template suites), then runs itself
again inside one.

Prints a line per block, then `N run, M no-run`, then `N passed, N failed`; exits non-zero
when anything failed. Arguments, if any, are the documents to check (default: all).
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
sys.path.insert(0, os.path.join(ROOT, "tests", "templates"))

import harness  # noqa: E402

URL = "http://127.0.0.1:3000"
# Documents in which every block runs: the first ones a user reads.
ALL_RUN = ("README.md", "docs/api.md")
# Templates the snippets create sessions from (besides base, which `make test` builds): the
# default template (node) and python.
TEMPLATES = ("node", "python")
SNIPPET_TIMEOUT = float(os.environ.get("SNIPPET_TIMEOUT", "90"))
# SNIPPET_OUTPUT=1: print what each block printed, also when it passed.

SHELLS = ("sh", "bash", "shell")
PYTHONS = ("python", "py")
NODES = ("ts", "typescript", "js", "javascript")

FENCE = re.compile(r"^( {0,3})(`{3,}|~{3,})\s*(.*)$")


class Block:
    def __init__(self, doc, line, lang, tag, reason, text):
        self.doc, self.line, self.lang, self.tag, self.reason, self.text = (
            doc, line, lang, tag, reason, text)

    @property
    def where(self):
        return f"{self.doc}:{self.line}"


def documents():
    out = subprocess.run(["git", "ls-files", "*.md"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    return sorted(p for p in out.split() if not p.startswith(("tests/mcp/node_modules",)))


def blocks_of(doc, text=None):
    """The fenced blocks of a document (CommonMark fences, including indented ones in lists);
    text: its contents, else read from the checkout."""
    if text is None:
        with open(os.path.join(ROOT, doc), encoding="utf-8") as f:
            text = f.read()
    lines = text.split("\n")
    found = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m or (m.group(2)[0] == "`" and "`" in m.group(3)):
            i += 1
            continue
        indent, fence, info = len(m.group(1)), m.group(2), m.group(3).strip()
        close = re.compile(r"^ {0,3}" + re.escape(fence[0]) + "{%d,}\\s*$" % len(fence))
        j = i + 1
        while j < len(lines) and not close.match(lines[j]):
            j += 1
        body = [l[indent:] if l[:indent].strip() == "" else l for l in lines[i + 1:j]]
        lang, _, rest = info.partition(" ")
        rest = rest.strip()
        tag, reason = rest, ""
        if rest.startswith("no-run"):
            tag, reason = "no-run", rest[len("no-run"):].lstrip(":").strip()
        found.append(Block(doc, i + 1, lang.lower(), tag, reason, "\n".join(body) + "\n"))
        i = j + 1
    return found


def tag_problem(b):
    """Why a block's tag is wrong, or None."""
    if not b.lang:
        return "no language on the fence (```LANG run or ```LANG no-run: why)"
    if b.tag == "run":
        if b.lang not in SHELLS + PYTHONS + NODES:
            return f"`run` on a {b.lang} block, which this suite cannot run"
        return None
    if b.tag == "no-run":
        if b.doc in ALL_RUN:
            return f"no-run in {b.doc}, where every block must run"
        if not b.reason:
            return "no-run without a reason (```LANG no-run: why)"
        return None
    if not b.tag:
        return "untagged (```LANG run or ```LANG no-run: why)"
    return f"unknown tag `{b.tag}`"


# --- running -------------------------------------------------------------------------------

QUICK_START_EXPORT = re.compile(r"^ {4}(export .*\bSANDBOX_API_KEY=sk_test_\.\.\..*)$", re.M)


def quick_start_env(key, readme=None):
    """The variables the README's Quick start sets (its one indented `export ...
    SANDBOX_API_KEY=sk_test_...` line, run by bash in the checkout with `key` in place of the
    placeholder), as {name: value} of what it changed."""
    if readme is None:
        with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
            readme = f.read()
    found = QUICK_START_EXPORT.findall(readme)
    if len(found) != 1:
        raise AssertionError(f"README.md: expected one Quick start `export ... "
                             f"SANDBOX_API_KEY=sk_test_...` line, found {len(found)}")
    line = found[0].replace("sk_test_...", key)
    base = {"PATH": "/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root")}
    out = subprocess.run(["bash", "-c", line + "\nenv -0"], cwd=ROOT, env=base,
                         capture_output=True, check=True).stdout.decode()
    after = dict(kv.split("=", 1) for kv in out.split("\0") if "=" in kv)
    return {k: v for k, v in after.items() if base.get(k) != v and k not in ("PWD", "SHLVL", "_")}


SUDO = re.compile(r"(^|[;&|(]\s*|\bthen\s+|\bdo\s+)sudo\b")


def sudo_commands(text):
    """The lines of text's code blocks (indented by 4, or fenced) that run sudo."""
    found = []
    fenced = False
    for no, line in enumerate(text.split("\n"), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        code = line.strip() if fenced else line[4:].strip() if line.startswith("    ") else None
        if code is not None and SUDO.search(code):
            found.append(f"README.md:{no}: {code}")
    return found


def curl_shim(bindir):
    """A `curl` first on PATH that adds --fail-with-body, so that an error status fails the
    snippet (curl itself exits 0 on a 401 or a 404)."""
    real = shutil.which("curl")
    if not real:
        raise AssertionError("curl is not installed (scripts/debian-packages.txt has it)")
    path = os.path.join(bindir, "curl")
    with open(path, "w", encoding="ascii") as f:
        f.write(f'#!/bin/sh\nexec {real} --fail-with-body "$@"\n')
    os.chmod(path, 0o755)


def node_dir(scratch):
    """A directory with the TypeScript SDK of the checkout installed, and a transpiler."""
    sdk = os.path.join(ROOT, "sdk", "typescript")
    tsc = os.path.join(sdk, "node_modules", "typescript")
    if not os.path.isdir(tsc):
        raise AssertionError(f"the TypeScript SDK's dev dependencies are missing ({tsc}): "
                             "make deps installs them")
    d = os.path.join(scratch, "node")
    os.makedirs(d)
    with open(os.path.join(d, "package.json"), "w", encoding="utf-8") as f:
        json.dump({"name": "snippets", "private": True, "type": "module"}, f)
    # npm pack runs the package's prepare script (tsc): the tarball holds a fresh dist/.
    packed = subprocess.run(["npm", "pack", "--silent", "--pack-destination", d], cwd=sdk,
                            capture_output=True, text=True, timeout=180)
    if packed.returncode != 0:
        raise AssertionError(f"npm pack of the TypeScript SDK failed:\n{packed.stderr[-2000:]}")
    tarball = os.path.join(d, packed.stdout.strip().splitlines()[-1])
    inst = subprocess.run(["npm", "install", "--offline", "--no-audit", "--no-fund",
                           "--silent", tarball], cwd=d, capture_output=True, text=True,
                          timeout=180)
    if inst.returncode != 0:
        raise AssertionError(f"npm install of the packed SDK failed:\n{inst.stderr[-2000:]}")
    transpile = os.path.join(d, "transpile.cjs")
    with open(transpile, "w", encoding="utf-8") as f:
        f.write(f"const ts = require({json.dumps(tsc)});\n"
                "const fs = require('fs');\n"
                "const src = fs.readFileSync(process.argv[2], 'utf8');\n"
                "const out = ts.transpileModule(src, {compilerOptions: "
                "{module: ts.ModuleKind.ESNext, target: ts.ScriptTarget.ES2022}, "
                "reportDiagnostics: true});\n"
                "if (out.diagnostics && out.diagnostics.length) {\n"
                "  for (const d of out.diagnostics) console.error("
                "ts.flattenDiagnosticMessageText(d.messageText, '\\n'));\n"
                "  process.exit(1);\n}\n"
                "fs.writeFileSync(process.argv[3], out.outputText);\n")
    return d


def command_for(b, scratch, ndir, n):
    """The argv that runs block b (files written into scratch)."""
    if b.lang in SHELLS:
        path = os.path.join(scratch, f".snippet-{n}.sh")
        with open(path, "w", encoding="utf-8") as f:
            f.write(b.text)
        return ["bash", "-e", "-o", "pipefail", path]
    if b.lang in PYTHONS:
        path = os.path.join(scratch, f".snippet-{n}.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(b.text)
        return ["python3", path]
    src = os.path.join(ndir, f"snippet-{n}.{'ts' if b.lang in ('ts', 'typescript') else 'js'}")
    out = os.path.join(ndir, f"snippet-{n}.mjs")
    with open(src, "w", encoding="utf-8") as f:
        f.write(b.text)
    t = subprocess.run(["node", os.path.join(ndir, "transpile.cjs"), src, out],
                       capture_output=True, text=True, timeout=60)
    if t.returncode != 0:
        raise AssertionError(f"transpiling failed:\n{t.stderr}")
    return ["node", out]


def run_block(argv, cwd, env):
    """Runs one snippet in a process group of its own, its output into a file (what it
    leaves in the background must not hold the run up); whatever of the group is left when
    it exits is killed. Returns (ok, output, why)."""
    with tempfile.TemporaryFile() as out:
        p = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out,
                             stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc = p.wait(timeout=SNIPPET_TIMEOUT)
            why = f"exit status {rc}"
        except subprocess.TimeoutExpired:
            rc = None
            why = f"still running after {SNIPPET_TIMEOUT:g}s"
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
        out.seek(0)
        return rc == 0, out.read().decode("utf-8", errors="replace"), why


def run_document(doc, blocks, results):
    """Runs the `run` blocks of one document against a fresh daemon; appends (ok, what)."""
    scratch = tempfile.mkdtemp(prefix="doc-snippets-")
    try:
        bindir = os.path.join(scratch, ".bin")
        os.makedirs(bindir)
        curl_shim(bindir)
        ndir = node_dir(scratch) if any(b.lang in NODES for b in blocks) else None
        work = os.path.join(scratch, "work")
        os.makedirs(work)
        d = harness.Daemon(env={"PORT": "3000", "LOG_LEVEL": "info"})
        d.start()
        if not d.admin_key:
            d.stop(check=False)
            raise AssertionError("the fresh daemon printed no admin key")
        env = dict(os.environ)
        for k in [k for k in env if k.startswith("SANDBOX_") and k != "SANDBOX_ISOLATED"]:
            del env[k]
        env["PATH"] = env.get("PATH", "/usr/bin:/bin")
        # What the Quick start sets: its PATH put before the one the tests run with.
        told = quick_start_env(d.admin_key)
        if "PATH" in told:
            told["PATH"] = told["PATH"].replace("/usr/bin:/bin", env["PATH"])
        env.update(told)
        env.update(PATH=bindir + os.pathsep + env["PATH"],
                   PYTHONPATH=os.path.join(ROOT, "sdk", "python"))
        try:
            for n, b in enumerate(blocks):
                t0 = time.monotonic()
                try:
                    ok, detail, why = run_block(command_for(b, work, ndir, n), work, env)
                except AssertionError as e:
                    ok, detail, why = False, str(e), "could not be run"
                secs = time.monotonic() - t0
                if ok:
                    print(f"ok    {b.where} ({b.lang}, {secs:.1f}s)", flush=True)
                    if os.environ.get("SNIPPET_OUTPUT"):
                        print(indent(tail(detail, 200), "  > "), flush=True)
                else:
                    print(f"FAIL  {b.where} ({b.lang}): {why}\n"
                          + indent(b.text, "  | ") + "\n" + indent(tail(detail), "  > "),
                          flush=True)
                results.append(ok)
        finally:
            try:
                d.stop()
                results.append(True)
            except AssertionError as e:
                print(f"FAIL  {doc}: the daemon did not exit cleanly:\n{indent(str(e), '  > ')}")
                results.append(False)
    except AssertionError as e:
        print(f"FAIL  {doc}: {e}", flush=True)
        results.append(False)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def indent(text, prefix):
    return "\n".join(prefix + l for l in text.rstrip("\n").split("\n"))


def tail(text, lines=30):
    return "\n".join(text.rstrip("\n").split("\n")[-lines:])


# What the tag check must say of each kind of block: (document, fence line, a problem?).
SELF_CHECKS = (
    ("docs/x.md", "```sh run", False),
    ("docs/x.md", "```text no-run: output", False),
    ("docs/x.md", "   ```json no-run: a fragment", False),
    ("docs/x.md", "```sh", True),
    ("docs/x.md", "```", True),
    ("docs/x.md", "```json run", True),
    ("docs/x.md", "```sh no-run", True),
    ("docs/x.md", "```sh maybe", True),
    ("README.md", "```sh no-run: needs systemd", True),
    ("docs/api.md", "```json no-run: output", True),
)


def self_check(results):
    """The tag rules themselves, on made-up documents."""
    for doc, fence, bad in SELF_CHECKS:
        found = blocks_of(doc, f"text\n\n{fence}\necho hi\n{fence.strip()[:3]}\n")
        ok = len(found) == 1 and (tag_problem(found[0]) is not None) == bad
        print(f"{'ok   ' if ok else 'FAIL '} tag check: {doc} {fence.strip()!r} is "
              f"{'refused' if bad else 'accepted'}", flush=True)
        results.append(ok)


def check_readme(results):
    """The README's commands run as root without sudo, and its Quick start puts the CLI on
    PATH; also on made-up READMEs, that these checks can fail."""
    with open(os.path.join(ROOT, "README.md"), encoding="utf-8") as f:
        readme = f.read()
    for text, want in (("    sudo make run\n", 1), ("```sh run\ncd x && sudo ls\n```\n", 1),
                       ("Prose may say sudo make run.\n    make run   # as root\n", 0)):
        ok = len(sudo_commands(text)) == want
        print(f"{'ok   ' if ok else 'FAIL '} sudo check: {text.strip()!r}", flush=True)
        results.append(ok)
    found = sudo_commands(readme)
    for f in found:
        print(f"FAIL  {f}: a command with sudo (a root Debian machine has none)", flush=True)
    results.append(not found)
    try:
        told = quick_start_env("sk_test_" + "0" * 32, readme)
        cli = shutil.which("sandbox", path=told.get("PATH", ""))
        ok = (told.get("SANDBOX_URL") == URL and told.get("SANDBOX_API_KEY", "").endswith("0" * 32)
              and cli == os.path.join(ROOT, "build", "cli", "sandbox"))
        why = f"sets {sorted(told)}; sandbox on its PATH: {cli}"
    except (AssertionError, subprocess.CalledProcessError) as e:
        ok, why = False, str(e)
    print(f"{'ok   ' if ok else 'FAIL '} README.md: the Quick start's export ({why})", flush=True)
    results.append(ok)


def inside(docs):
    t0 = time.monotonic()
    results = []
    self_check(results)
    if "README.md" in docs:
        check_readme(results)
    n_run = n_norun = 0
    runs = {}
    for doc in docs:
        for b in blocks_of(doc):
            problem = tag_problem(b)
            if problem:
                print(f"FAIL  {b.where} [{b.lang} {b.tag}]: {problem}", flush=True)
                results.append(False)
                continue
            if b.tag == "run":
                n_run += 1
                runs.setdefault(doc, []).append(b)
            else:
                n_norun += 1
    for doc, blocks in runs.items():
        run_document(doc, blocks, results)
    passed = sum(results)
    print(f"docs: {n_run} run, {n_norun} no-run ({time.monotonic() - t0:.0f}s)")
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if all(results) else 1


def outside(argv):
    import template_builds  # noqa: E402 (tests/templates)

    held = []
    try:
        for name in TEMPLATES:
            try:
                b = template_builds.ensure(name)
            except AssertionError as e:
                print(f"FAIL  template {name}: {e}")
                print("0 passed, 1 failed")
                return 1
            held.append(b)
            print(f"template {name}: {'built' if b.built else 'current'} in {b.dir}", flush=True)
        iso = os.path.join(ROOT, "scripts", "isolated.sh")
        return subprocess.run([iso, sys.executable, "-u", os.path.abspath(__file__),
                               "--inside", *argv]).returncode
    finally:
        for b in held:
            b.release()


def main():
    argv = sys.argv[1:]
    if argv[:1] == ["--inside"]:
        docs = argv[1:] or documents()
        return inside(docs)
    if os.geteuid() != 0:
        print("docs: needs root (sandboxes, namespaces): sudo make test")
        print("0 passed, 1 failed")
        return 1
    return outside(argv)


if __name__ == "__main__":
    sys.exit(main())
