"""Shared pieces of the authentication tests: daemons with authentication on, requests that
carry a key in any of the accepted ways and from a chosen client address, the `sandbox keys`
CLI on a daemon's database, and checks of JSON error bodies. Standard library only; built on
tests/integration/harness.py.

Failed authentications are throttled per client address (30 in 60 s, see src/api/auth.c),
so tests that fail on purpose send from addresses of their own: every 127.0.0.0/8 address
reaches the daemon's 127.0.0.1 listener, and fresh_address() hands out a new one each call.
"""

import calendar
import http.client
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.append(os.path.join(ROOT, "tests", "integration"))

import harness  # noqa: E402

TEMPLATE = "base"
PREFIX = "sk_test_"
KEY_RE = re.compile(re.escape(PREFIX) + r"[0-9a-f]{32}")
# A well-formed key that no daemon issued.
UNKNOWN_KEY = PREFIX + "0123456789abcdef" * 2

# What every daemon of these tests gets unless a test says otherwise: authentication stays
# on (the default).
BASE_ENV = {"SANDBOX_DEFAULT_TEMPLATE": TEMPLATE, "SANDBOX_WARM_POOL": "1"}

# Limits of src/api/auth.c that the tests rely on.
FAIL_LIMIT = 30
FAIL_WINDOW_S = 60
LAST_USED_FLUSH_S = 30


def cli_path():
    """The `sandbox` binary: SANDBOX_CLI, else the one built beside SANDBOXD, else build/."""
    if os.environ.get("SANDBOX_CLI"):
        return os.environ["SANDBOX_CLI"]
    daemon = os.environ.get("SANDBOXD")
    if daemon:
        sibling = os.path.join(os.path.dirname(os.path.dirname(daemon)), "cli", "sandbox")
        if os.access(sibling, os.X_OK):
            return sibling
    return os.path.join(ROOT, "build", "cli", "sandbox")


def artifacts_dir():
    return os.environ.get("FIRECRACKER_ARTIFACTS_DIR") or harness.DEFAULT_ARTIFACTS


def require_ready(cli=False):
    """Fails (saying what is missing) when the daemon, the CLI or the base template is
    missing: `make test` builds all three, so none is a reason to skip."""
    binary = harness.sandboxd_path()
    if not os.access(binary, os.X_OK):
        raise AssertionError(f"sandboxd is not built at {binary} (ninja -C build)")
    if cli and not os.access(cli_path(), os.X_OK):
        raise AssertionError(f"the sandbox CLI is not built at {cli_path()} (ninja -C build)")
    manifest = os.path.join(artifacts_dir(), "templates", TEMPLATE, "template.json")
    if not os.path.isfile(manifest):
        raise AssertionError(f"the {TEMPLATE} template is not built ({manifest} is "
                             f"missing; run make base-template)")


def start_daemon(env=None, state_dir=None):
    """A started daemon with BASE_ENV plus env; state_dir, when given, is used instead of a
    fresh one (and kept when the daemon stops)."""
    merged = {**BASE_ENV, **(env or {})}
    if state_dir:
        merged["SANDBOX_STATE_DIR"] = state_dir
    d = harness.Daemon(env=merged)
    d.start()
    if state_dir:
        d.state_dir = state_dir
    return d


def new_state_dir(test):
    """An empty state directory removed when test (a TestCase or its class) is done."""
    path = tempfile.mkdtemp(prefix="sandboxd-auth-state-")
    if isinstance(test, type):
        test.addClassCleanup(shutil.rmtree, path, True)
    else:
        test.addCleanup(shutil.rmtree, path, True)
    return path


def _addresses():
    for a in range(1, 255):
        for b in range(2, 255):
            yield f"127.0.{a}.{b}"


_next_address = _addresses()


def fresh_address():
    """A loopback address no earlier request of this run came from."""
    return next(_next_address)


VIAS = ("bearer", "x-api-key", "api_key", "apiKey")


def request(daemon, method, path, body=None, key=None, via="bearer", source=None,
            headers=None, timeout=30):
    """One request; returns (status, headers, body) with body parsed as JSON when the
    response says JSON. key is sent as `via` says: "bearer" (Authorization: Bearer),
    "x-api-key", or the query parameters "api_key" / "apiKey"; None sends no key.
    source is the client address (default 127.0.0.1)."""
    h = {"Accept": "application/json"}
    if key is not None:
        if via == "bearer":
            h["Authorization"] = f"Bearer {key}"
        elif via == "x-api-key":
            h["X-API-Key"] = key
        elif via in ("api_key", "apiKey"):
            path += ("&" if "?" in path else "?") + urllib.parse.urlencode({via: key})
        else:
            raise ValueError(f"unknown way to send a key: {via}")
    h.update(headers or {})
    data = harness.encode_body(body, h)
    conn = http.client.HTTPConnection(daemon.host, daemon.port, timeout=timeout,
                                      source_address=(source, 0) if source else None)
    try:
        conn.request(method, path, body=data, headers=h)
        resp = conn.getresponse()
        raw = resp.read()
        return resp.status, resp.headers, harness.decode_body(resp.headers, raw)
    finally:
        conn.close()


def admin(daemon, method, path, body=None):
    """A request with the daemon's first-start admin key."""
    return request(daemon, method, path, body=body, key=daemon.admin_key)


def create_key(daemon, name, scopes=None, rate_limit=None, expires_in=None, quotas=None):
    """A key created over HTTP with the admin key: the 201 body (with "key", the secret)."""
    body = {"name": name}
    if quotas is not None:
        body["quotas"] = quotas
    if scopes is not None:
        body["scopes"] = scopes
    if rate_limit is not None:
        body["rateLimit"] = rate_limit
    if expires_in is not None:
        body["expiresIn"] = expires_in
    st, _, k = admin(daemon, "POST", "/admin/keys", body)
    if st != 201:
        raise AssertionError(f"cannot create key {name}: {st} {k}")
    return k


def list_keys(daemon):
    st, _, body = admin(daemon, "GET", "/admin/keys")
    if st != 200:
        raise AssertionError(f"GET /admin/keys: {st} {body}")
    return {k["id"]: k for k in body["keys"]}


def iso_epoch(text):
    """Unix seconds of an ISO time like 2026-01-02T03:04:05Z."""
    return calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ"))


def wait_until_expired(key_json, limit=10):
    """Sleeps until the key's expiresAt has passed (at most `limit` seconds)."""
    left = iso_epoch(key_json["expiresAt"]) - time.time() + 0.2
    if left > limit:
        raise AssertionError(f"key {key_json['id']} expires too late to wait for: {left:.1f}s")
    if left > 0:
        # An expiry is a moment: nothing but the clock passing it can be waited for.
        time.sleep(left)


def cli(state_dir, *args, env=None, timeout=30):
    """`sandbox keys ARGS` on the database in state_dir; returns the CompletedProcess."""
    e = dict(os.environ, SANDBOX_STATE_DIR=state_dir)
    e.update(env or {})
    return subprocess.run([cli_path(), "keys", *args], env=e, capture_output=True,
                          timeout=timeout)


def cli_json(test, state_dir, *args):
    """`sandbox keys ARGS --json`, expected to succeed; its output parsed."""
    p = cli(state_dir, *args, "--json")
    test.assertEqual(p.returncode, 0, p.stderr.decode(errors="replace"))
    return json.loads(p.stdout)


def assert_json_error(test, resp, status, message=None, contains=None):
    """resp is (status, headers, body): a JSON {"error": "..."} with that status."""
    st, headers, body = resp
    test.assertEqual(st, status, body)
    ctype = (headers.get("Content-Type") or "").split(";")[0].strip()
    test.assertEqual(ctype, "application/json", body)
    test.assertIsInstance(body, dict)
    test.assertIsInstance(body.get("error"), str, body)
    if message is not None:
        test.assertEqual(body["error"], message)
    if contains is not None:
        test.assertIn(contains, body["error"])
    return body
