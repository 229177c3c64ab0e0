"""The servers of the networking tests' stand-in internet, run inside the test's own network
namespace (`ip netns exec <ns> python3 inet_servers.py ...`). Standard library only.

  --dns ADDR        a DNS server on ADDR:53 (UDP and TCP) answering A questions from --zone
  --zone NAME=IP    a record (repeatable); other names get NXDOMAIN, other types no data
  --http ADDR       an HTTP server on ADDR:80 (repeatable): GET / answers "hello from ADDR",
                    GET /bytes/N answers N bytes
  --sink ADDR:PORT  a TCP server that reads and discards everything, then closes
  --ready FILE      written once every socket is bound

Each server binds to its own address only, so nothing here listens beyond the namespace's
addresses the test set up."""

import argparse
import http.server
import os
import socket
import socketserver
import struct
import sys
import threading


def dns_answer(query, zone):
    """The answer to a DNS query (bytes), or None for something that is not a plain query."""
    if len(query) < 12:
        return None
    ident, flags, qd = struct.unpack("!HHH", query[:6])
    if flags & 0x8000 or qd != 1:
        return None
    labels, pos = [], 12
    while True:
        if pos >= len(query):
            return None
        n = query[pos]
        if n == 0:
            pos += 1
            break
        if n & 0xC0:
            return None
        labels.append(query[pos + 1 : pos + 1 + n].decode("ascii", "replace").lower())
        pos += 1 + n
    if pos + 4 > len(query):
        return None
    qtype, qclass = struct.unpack("!HH", query[pos : pos + 4])
    question = query[12 : pos + 4]
    name = ".".join(labels)
    rd = flags & 0x0100
    if name not in zone:
        return struct.pack("!HHHHHH", ident, 0x8080 | rd | 3, 1, 0, 0, 0) + question
    if qtype != 1 or qclass != 1:
        return struct.pack("!HHHHHH", ident, 0x8080 | rd, 1, 0, 0, 0) + question
    addr = socket.inet_aton(zone[name])
    rr = struct.pack("!HHHIH", 0xC00C, 1, 1, 60, 4) + addr
    return struct.pack("!HHHHHH", ident, 0x8480 | rd, 1, 1, 0, 0) + question + rr


def serve_dns_udp(sock, zone):
    while True:
        data, peer = sock.recvfrom(4096)
        reply = dns_answer(data, zone)
        if reply:
            sock.sendto(reply, peer)


class DnsTcp(socketserver.StreamRequestHandler):
    zone = {}

    def handle(self):
        while True:
            head = self.rfile.read(2)
            if len(head) < 2:
                return
            (n,) = struct.unpack("!H", head)
            reply = dns_answer(self.rfile.read(n), self.zone)
            if not reply:
                return
            self.wfile.write(struct.pack("!H", len(reply)) + reply)


class Web(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"
    chunk = b"x" * 65536

    def log_message(self, *args):
        pass

    def do_GET(self):
        addr = self.server.server_address[0]
        if self.path.startswith("/bytes/"):
            n = int(self.path[len("/bytes/") :])
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(n))
            self.end_headers()
            while n > 0:
                k = min(n, len(self.chunk))
                self.wfile.write(self.chunk[:k])
                n -= k
            return
        body = f"hello from {addr}\n".encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


class Sink(socketserver.BaseRequestHandler):
    def handle(self):
        while self.request.recv(65536):
            pass


class ThreadingTCP(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


class ThreadingHTTP(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dns")
    ap.add_argument("--zone", action="append", default=[])
    ap.add_argument("--http", action="append", default=[])
    ap.add_argument("--sink", action="append", default=[])
    ap.add_argument("--ready")
    args = ap.parse_args()

    zone = dict(z.split("=", 1) for z in args.zone)
    threads = []
    if args.dns:
        u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        u.bind((args.dns, 53))
        threads.append(threading.Thread(target=serve_dns_udp, args=(u, zone), daemon=True))
        DnsTcp.zone = zone
        t = ThreadingTCP((args.dns, 53), DnsTcp)
        threads.append(threading.Thread(target=t.serve_forever, daemon=True))
    for addr in args.http:
        s = ThreadingHTTP((addr, 80), Web)
        threads.append(threading.Thread(target=s.serve_forever, daemon=True))
    for spec in args.sink:
        host, port = spec.rsplit(":", 1)
        s = ThreadingTCP((host, int(port)), Sink)
        threads.append(threading.Thread(target=s.serve_forever, daemon=True))
    for t in threads:
        t.start()
    if args.ready:
        with open(args.ready + ".tmp", "w") as f:
            f.write(str(os.getpid()))
        os.rename(args.ready + ".tmp", args.ready)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
