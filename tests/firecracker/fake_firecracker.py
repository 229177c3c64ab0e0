#!/usr/bin/env python3
"""A stand-in for Firecracker, for contract tests where the real one is absent.

It serves the API on --api-sock (inside FAKE_FC_ROOT, the chroot the fake jailer made),
validates every request against Firecracker v1.16.1's spec (answering 400 with a
fault_message, as Firecracker does, when a request is invalid), records each request to
FAKE_FC_LOG, and plays the VM: when the instance starts or a snapshot is loaded and resumed,
it starts the real sandbox agent (FAKE_FC_AGENT, with --fd) as the "guest" and serves the
vsock socket the way Firecracker does: `CONNECT <port>\n` answered by `OK <port>\n`, then
bytes relayed to the agent. A snapshot's memory file holds the guest's workspace (a tar of
it), which a load puts back: files survive a save and a load as a guest's would (its
processes do not: the agent is started afresh).
"""

import base64
import io
import json
import os
import socket
import subprocess
import sys
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

if sys.argv[1:] == ["--version"]:
    print("Firecracker v1.16.1")
    sys.exit(0)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from spec import Spec  # noqa: E402

ROOT = os.environ.get("FAKE_FC_ROOT", "/")
LOG = os.environ.get("FAKE_FC_LOG")
AGENT = os.environ.get("FAKE_FC_AGENT")
SPEC = Spec()
STATE = {"config": {}, "started": False, "paused": False, "agent": None, "vsock": None}
LOCK = threading.Lock()


def host_path(p):
    return os.path.join(ROOT, p.lstrip("/"))


def record(entry):
    if LOG:
        with LOCK, open(LOG, "a") as f:
            f.write(json.dumps(entry) + "\n")


def agent_to_host(agent_sock):
    """The guest's side: whatever the agent sends goes to the current vsock connection."""
    while True:
        try:
            data = agent_sock.recv(65536)
        except OSError:
            return
        if not data:
            return
        conn = STATE["vsock"]
        if conn is not None:
            try:
                conn.sendall(data)
            except OSError:
                pass


def serve_vsock(path, agent_sock):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(4)
    threading.Thread(target=agent_to_host, args=(agent_sock,), daemon=True).start()
    while True:
        conn, _ = srv.accept()
        line = b""
        while not line.endswith(b"\n") and len(line) < 64:
            b = conn.recv(1)
            if not b:
                break
            line += b
        parts = line.split()
        if len(parts) != 2 or parts[0] != b"CONNECT" or parts[1] != b"5000":
            conn.close()
            continue
        conn.sendall(b"OK 1073741824\n")
        STATE["vsock"] = conn
        try:
            while True:
                data = conn.recv(65536)
                if not data:
                    break
                agent_sock.sendall(data)
        except OSError:
            pass
        STATE["vsock"] = None
        conn.close()


def check_nics(cfg):
    """A NIC's TAP is looked up in Firecracker's network namespace: the jailer must have put
    it in one (--netns), never left it in the host's. Returns an error or None."""
    nics = [d for k, d in cfg.items() if k.startswith("network-interfaces/")]
    if not nics:
        return None
    netns = os.environ.get("FAKE_FC_NETNS", "")
    if not netns:
        return "a network interface without --netns: the TAP would be the host's"
    if not os.path.exists(netns):
        return f"network namespace {netns}: no such file"
    for d in nics:
        if d.get("host_dev_name") != "tap0":
            return f"unexpected host_dev_name {d.get('host_dev_name')}"
    return None


def workspace_tar():
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        ws = host_path("/fake-guest-workspace")
        if os.path.isdir(ws):
            tar.add(ws, arcname=".")
    return base64.b64encode(buf.getvalue()).decode()


def workspace_restore(data):
    ws = host_path("/fake-guest-workspace")
    os.makedirs(ws, exist_ok=True)
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(data))) as tar:
        tar.extractall(ws, filter="tar")


def boot_guest():
    """Starts the agent as the guest, once, and the vsock listener."""
    if STATE["agent"]:
        return
    vsock = STATE["config"].get("vsock")
    if not vsock:
        return
    ws = host_path("/fake-guest-workspace")
    os.makedirs(ws, exist_ok=True)
    host, guest = socket.socketpair()
    os.set_inheritable(guest.fileno(), True)
    proc = subprocess.Popen([AGENT, "--fd", str(guest.fileno()), "--workspace", ws],
                            pass_fds=(guest.fileno(),), stdin=subprocess.DEVNULL)
    guest.close()
    STATE["agent"] = proc
    path = host_path(vsock["uds_path"])
    threading.Thread(target=serve_vsock, args=(path, host), daemon=True).start()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, code, obj=None):
        data = json.dumps(obj).encode() if obj is not None else b""
        self.send_response(code)
        if data:
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def handle_any(self):
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        body = None
        errors = []
        if raw:
            try:
                body = json.loads(raw)
            except ValueError:
                errors.append("body is not JSON")
        if not errors:
            errors = SPEC.validate(self.command, self.path, body)
        record({"method": self.command, "path": self.path, "body": body, "errors": errors})
        if errors:
            return self.reply(400, {"fault_message": "; ".join(errors)})
        return self.act(body)

    def act(self, body):
        m, p = self.command, self.path
        cfg = STATE["config"]
        if m == "GET" and p == "/version":
            return self.reply(200, {"firecracker_version": "1.16.1"})
        if m == "GET" and p == "/":
            return self.reply(200, {"id": os.environ.get("FAKE_FC_ID", ""), "state":
                                    "Running" if STATE["started"] else "Not started",
                                    "vmm_version": "1.16.1", "app_name": "Firecracker"})
        if m == "PUT" and p == "/actions" and body["action_type"] == "InstanceStart":
            for need in ("machine-config", "boot-source"):
                if need not in cfg:
                    return self.reply(400, {"fault_message": f"{need} not configured"})
            for f in (cfg["boot-source"]["kernel_image_path"],
                      *[d["path_on_host"] for k, d in cfg.items() if k.startswith("drives/")]):
                if not os.path.exists(host_path(f)):
                    return self.reply(400, {"fault_message": f"{f}: no such file"})
            nic_err = check_nics(cfg)
            if nic_err:
                return self.reply(400, {"fault_message": nic_err})
            STATE["started"] = True
            boot_guest()
            return self.reply(204)
        if m == "PUT" and p == "/snapshot/create":
            if not STATE["paused"]:
                return self.reply(400, {"fault_message": "the VM must be paused"})
            with open(host_path(body["snapshot_path"]), "w") as f:
                json.dump(cfg, f)
            with open(host_path(body["mem_file_path"]), "w") as f:
                json.dump({"config": cfg, "workspace": workspace_tar()}, f)
            return self.reply(204)
        if m == "PUT" and p == "/snapshot/load":
            if STATE["started"]:
                return self.reply(400, {"fault_message": "load is only allowed before boot"})
            backend = body.get("mem_backend", {}).get("backend_path") or body.get("mem_file_path")
            for f in (body["snapshot_path"], backend):
                if not f or not os.path.exists(host_path(f)):
                    return self.reply(400, {"fault_message": f"{f}: no such file"})
            with open(host_path(body["snapshot_path"])) as f:
                STATE["config"] = json.load(f)
            with open(host_path(backend)) as f:
                memory = json.load(f)
            if "workspace" in memory:
                workspace_restore(memory["workspace"])
            for k, d in STATE["config"].items():
                if k.startswith("drives/") and not os.path.exists(host_path(d["path_on_host"])):
                    return self.reply(400, {"fault_message": f"{d['path_on_host']}: missing"})
            nic_err = check_nics(STATE["config"])
            if nic_err:
                return self.reply(400, {"fault_message": nic_err})
            STATE["started"] = True
            if body.get("resume_vm"):
                boot_guest()
            return self.reply(204)
        if m == "PATCH" and p == "/vm":
            STATE["paused"] = body["state"] == "Paused"
            return self.reply(204)
        if m == "PUT":
            if STATE["started"] and p != "/actions":
                return self.reply(400, {"fault_message": "not allowed after boot"})
            cfg[p.lstrip("/")] = body
            if p == "/vsock":
                cfg["vsock"] = body
            return self.reply(204)
        return self.reply(400, {"fault_message": f"unsupported {m} {p}"})

    do_GET = do_PUT = do_PATCH = handle_any


class UnixHTTPServer(HTTPServer):
    address_family = socket.AF_UNIX

    def server_bind(self):
        self.socket.bind(self.server_address)

    def get_request(self):
        conn, _ = self.socket.accept()
        return conn, ("fake", 0)


def main():
    args = sys.argv[1:]
    if args == ["--version"]:
        print("Firecracker v1.16.1")
        return
    if len(args) != 2 or args[0] != "--api-sock":
        print(f"fake firecracker: bad arguments {args}", file=sys.stderr)
        sys.exit(1)
    record({"firecracker": args})
    sock = host_path(args[1])
    os.makedirs(os.path.dirname(sock), exist_ok=True)
    server = UnixHTTPServer(sock, Handler)
    server.serve_forever()


if __name__ == "__main__":
    main()
