"""What the cluster tests share: a 3-member etcd cluster on loopback (its data on a tmpfs,
elections quick) and sandboxd nodes that use it, each a real daemon (the ASan build in the
test run) started through the integration tests' harness.

    etcd = Etcd(3).start()
    a = node(etcd, "a", network=True)      # the one node that manages sandbox networks
    b = node(etcd, "b")                    # SANDBOX_NETWORK=off: one daemon per host does
"""

import hashlib
import hmac
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import harness

ETCD = shutil.which("etcd") or "/usr/bin/etcd"
SECRET = "0123456789abcdef" * 4


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Etcd:
    """An etcd cluster of n members on 127.0.0.1, its data under /dev/shm."""

    def __init__(self, n=3):
        self.n = n
        self.tmp = tempfile.mkdtemp(prefix="etcd-", dir="/dev/shm" if os.path.isdir("/dev/shm")
                                    else None)
        self.members = []
        for i in range(n):
            self.members.append({"name": f"e{i}", "client": free_port(), "peer": free_port(),
                                 "proc": None, "dir": os.path.join(self.tmp, f"e{i}")})
        self.initial = ",".join(f"{m['name']}=http://127.0.0.1:{m['peer']}" for m in self.members)

    @property
    def endpoints(self):
        return ",".join(f"http://127.0.0.1:{m['client']}" for m in self.members)

    def start_member(self, i):
        m = self.members[i]
        log = open(os.path.join(self.tmp, f"{m['name']}.log"), "ab")
        existing = os.path.isdir(m["dir"])
        m["proc"] = subprocess.Popen(
            [ETCD, "--name", m["name"], "--data-dir", m["dir"],
             "--listen-client-urls", f"http://127.0.0.1:{m['client']}",
             "--advertise-client-urls", f"http://127.0.0.1:{m['client']}",
             "--listen-peer-urls", f"http://127.0.0.1:{m['peer']}",
             "--initial-advertise-peer-urls", f"http://127.0.0.1:{m['peer']}",
             "--initial-cluster", self.initial,
             "--initial-cluster-state", "existing" if existing else "new",
             "--initial-cluster-token", "agent-sandbox-test",
             "--heartbeat-interval", "100", "--election-timeout", "1000",
             "--log-level", "warn"],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()

    def start(self):
        if not os.access(ETCD, os.X_OK):
            raise AssertionError(f"no etcd at {ETCD} (make deps installs etcd-server)")
        for i in range(self.n):
            self.start_member(i)
        self.wait_healthy()
        return self

    def wait_healthy(self, timeout=30):
        import json
        import urllib.request
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            for m in self.members:
                if not m["proc"] or m["proc"].poll() is not None:
                    continue
                try:
                    req = urllib.request.Request(
                        f"http://127.0.0.1:{m['client']}/v3/kv/put",
                        data=json.dumps({"key": "aGVhbHRo", "value": "b2s="}).encode(),
                        method="POST")
                    with urllib.request.urlopen(req, timeout=1) as r:
                        if r.status == 200:
                            return
                except OSError:
                    pass
            time.sleep(0.1)
        raise AssertionError("etcd did not become writable")

    def stop_member(self, i, sig=signal.SIGTERM):
        m = self.members[i]
        if m["proc"] and m["proc"].poll() is None:
            m["proc"].send_signal(sig)
            m["proc"].wait(30)
        m["proc"] = None

    def stop(self):
        for i in range(self.n):
            self.stop_member(i, signal.SIGKILL)
        shutil.rmtree(self.tmp, ignore_errors=True)


def node(etcd, name, network=False, labels="", env=None, state_dir=None, uid_slot=None):
    """A started sandboxd node of the cluster. The nodes share the secret; each has its own
    range of host uids for its jails, and only one manages sandbox networks."""
    tmp = tempfile.mkdtemp(prefix="cluster-secret-")
    secret = os.path.join(tmp, "secret")
    with open(secret, "w") as f:
        f.write(SECRET)
    os.chmod(secret, 0o600)
    slot = uid_slot if uid_slot is not None else ord(name[0]) - ord("a")
    e = {
        "SANDBOX_CLUSTER": etcd.endpoints,
        "SANDBOX_NODE_NAME": name,
        "SANDBOX_NODE_LABELS": labels,
        "SANDBOX_CLUSTER_SECRET_FILE": secret,
        "SANDBOX_CLUSTER_LEASE_TTL": "2",
        "SANDBOX_CLUSTER_TIMEOUT_MS": "1000",
        "SANDBOX_NETWORK": "on" if network else "off",
        "SANDBOX_WARM_POOL": "0",
        "SANDBOX_DEFAULT_TEMPLATE": "base",
        "SANDBOX_UID_BASE": str(1_000_000_000 + slot * 100_000_000),
        "LOG_LEVEL": "info",
    }
    if state_dir:
        e["SANDBOX_STATE_DIR"] = state_dir
        e["SANDBOX_RUN_DIR"] = os.path.join(os.path.dirname(state_dir), "run")
    e.update(env or {})
    d = harness.Daemon(env=e, driver_name="jail")
    d.name = name
    # The secret's directory goes with the node: a node replaced by a restart leaves nothing.
    def removing(end, killed):
        def end_and_remove(*args, **kwargs):
            try:
                return end(*args, **kwargs)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
                if killed:
                    # Its state stays for a restart to take over (and remove at its end). A
                    # node that was itself restarted over an earlier node's state keeps that
                    # in the earlier node's directory: its own holds only its logs.
                    if d.tmp and os.path.dirname(d.state_dir) != d.tmp:
                        shutil.rmtree(d.tmp, ignore_errors=True)
                elif state_dir:
                    # A node restarted over an earlier node's state lives in that node's
                    # directory, which the earlier node's end left.
                    shutil.rmtree(os.path.dirname(state_dir), ignore_errors=True)
        return end_and_remove
    d.stop, d.kill = removing(d.stop, False), removing(d.kill, True)
    try:
        d.start()
    except BaseException:
        # The failure carries the daemon's log; its directory would only be left behind.
        shutil.rmtree(tmp, ignore_errors=True)
        if d.tmp:
            shutil.rmtree(d.tmp, ignore_errors=True)
        raise
    return d


def sign(method, target, dest, node="a", owner="-", scopes=0, ts=None, nonce=None,
         secret=SECRET):
    """An X-Sandbox-Peer value as node `node` with the cluster's secret would make it for
    node `dest`."""
    ts = str(int(time.time() * 1000) if ts is None else ts)
    nonce = nonce or os.urandom(16).hex()
    msg = f"v2\n{node}\n{dest}\n{ts}\n{nonce}\n{method}\n{target}\n{owner}\n{scopes}"
    sig = hmac.new(secret.encode(), msg.encode(), hashlib.sha256).hexdigest()
    return (f"v2 node={node} dest={dest} ts={ts} nonce={nonce} owner={owner} "
            f"scopes={scopes} sig={sig}")
