"""A small web app that the ingress tests run inside a sandbox (python template), standard
library only: it shows what reached it, and serves the kinds of answer a reverse proxy must
carry (redirects, cookies, chunked and close-delimited bodies, Server-Sent Events, a WebSocket
echo, a hang, garbage).

Usage: python3 preview_app.py PORT [RAWPORT]   (RAWPORT: a TCP server that answers garbage)"""

import base64
import hashlib
import json
import os
import socket
import struct
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
LOG = "requests.log"


class App(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def note(self):
        with open(LOG, "a") as f:
            f.write(json.dumps({"method": self.command, "path": self.path,
                                "headers": dict(self.headers.items())}) + "\n")

    def reply(self, status, body, ctype="application/json", headers=()):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def read_body(self):
        h = hashlib.sha256()
        n = 0
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            while True:
                size = int(self.rfile.readline().split(b";")[0], 16)
                if size == 0:
                    self.rfile.readline()
                    break
                left = size
                while left:
                    chunk = self.rfile.read(min(left, 65536))
                    h.update(chunk)
                    left -= len(chunk)
                    n += len(chunk)
                self.rfile.readline()
        else:
            left = int(self.headers.get("Content-Length", "0"))
            while left:
                chunk = self.rfile.read(min(left, 65536))
                if not chunk:
                    break
                h.update(chunk)
                left -= len(chunk)
                n += len(chunk)
        return n, h.hexdigest()

    def do_HEAD(self):
        self.do_GET()

    def do_POST(self):
        self.note()
        n, digest = self.read_body()
        self.reply(200, {"length": n, "sha256": digest, "path": self.path,
                         "framing": "chunked" if "Transfer-Encoding" in self.headers
                         else "length"})

    def do_GET(self):
        self.note()
        path = self.path.split("?")[0]
        if path == "/headers":
            self.reply(200, {"path": self.path, "headers": dict(self.headers.items())})
        elif path == "/redirect":
            self.reply(302, b"", "text/plain", [("Location", "/target?x=1")])
        elif path == "/redirect-abs":
            host = self.headers.get("Host", "")
            self.reply(302, b"", "text/plain", [("Location", f"http://{host}/abs")])
        elif path == "/redirect-away":
            self.reply(302, b"", "text/plain", [("Location", "https://example.com/x")])
        elif path == "/cookie":
            self.reply(200, b"ok", "text/plain", [
                ("Set-Cookie", "a=1; Path=/app; Domain=localhost; HttpOnly"),
                ("Set-Cookie", "b=2"),
                ("Set-Cookie", "c=3; samesite=None; Secure"),
                ("Clear-Site-Data", '"cookies", "storage"'),
            ])
        elif path == "/chunked":
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b"one ", b"two ", b"three"):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
        elif path == "/close-delimited":
            # No length, no chunks: the body ends with the connection.
            self.close_connection = True
            self.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n")
            self.wfile.write(b"until the end")
        elif path == "/sse":
            self.close_connection = True
            self.wfile.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                             b"Cache-Control: no-cache\r\nConnection: close\r\n\r\n")
            for i in range(3):
                self.wfile.write(f"data: event {i}\n\n".encode())
                self.wfile.flush()
            # The last one waits for the test's go: only a stream delivers the first ones
            # before it.
            for _ in range(600):
                if os.path.exists("sse-go"):
                    break
                time.sleep(0.1)
            self.wfile.write(b"data: last\n\n")
        elif path == "/tossing":
            self.reply(200, b"ok", "text/plain", [
                ("Set-Cookie", "tossed=1;\tDomain=localhost; Path=/"),
                ("Set-Cookie", "t2=1; Domain\t=localhost"),
                ("Set-Cookie", "sandbox_token=planted; Path=/"),
            ])
        elif path in ("/early", "/early-flood"):
            n = 3 if path == "/early" else 40
            for _ in range(n):
                self.wfile.write(b"HTTP/1.1 103 Early Hints\r\nLink: </x.css>; rel=preload\r\n\r\n")
            self.reply(200, {"after": n})
        elif path == "/endless":
            self.close_connection = True
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            block = b"x" * 65536
            try:
                while True:
                    self.wfile.write(b"10000\r\n" + block + b"\r\n")
            except OSError:
                return
        elif path == "/hang":
            time.sleep(60)
            self.reply(200, {"late": True})
        elif path == "/ws":
            self.websocket()
        elif path == "/bigheader":
            self.send_response(200)
            self.send_header("X-Big", "v" * 8000)
            for i in range(20):
                self.send_header(f"X-Big-{i}", "v" * 8000)
            self.send_header("Content-Length", "0")
            self.end_headers()
        elif path.startswith("/files/"):
            name = path[len("/files/"):]
            size = os.path.getsize(name)
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(size))
            self.end_headers()
            with open(name, "rb") as f:
                while True:
                    chunk = f.read(1 << 20)
                    if not chunk:
                        break
                    self.wfile.write(chunk)
        else:
            self.reply(404, {"error": "no such page", "path": self.path})

    def websocket(self):
        key = self.headers.get("Sec-WebSocket-Key", "")
        accept = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        self.send_response(101)
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.end_headers()
        self.wfile.flush()
        r = self.rfile
        while True:
            head = r.read(2)
            if len(head) < 2:
                return
            opcode = head[0] & 0x0F
            n = head[1] & 0x7F
            if n == 126:
                n = struct.unpack(">H", r.read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", r.read(8))[0]
            mask = r.read(4) if head[1] & 0x80 else b"\0\0\0\0"
            data = bytearray(r.read(n))
            for i in range(len(data)):
                data[i] ^= mask[i % 4]
            if opcode == 8:
                self.wfile.write(b"\x88\x02\x03\xe8")
                self.wfile.flush()
                return
            out = bytes([0x80 | opcode])
            if len(data) < 126:
                out += bytes([len(data)])
            elif len(data) < 65536:
                out += b"\x7e" + struct.pack(">H", len(data))
            else:
                out += b"\x7f" + struct.pack(">Q", len(data))
            self.wfile.write(out + bytes(data))
            self.wfile.flush()


def garbage(port):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(8)
    while True:
        c, _ = s.accept()
        try:
            c.recv(65536)
            c.sendall(b"this is not HTTP at all\r\n\r\n")
        finally:
            c.close()


if __name__ == "__main__":
    if len(sys.argv) > 2:
        threading.Thread(target=garbage, args=(int(sys.argv[2]),), daemon=True).start()
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), App).serve_forever()
