"""A small WebSocket client (RFC 6455) for the tests: the handshake over a plain socket, masked
frames out, whole messages in (fragments joined, pings answered), the close code kept.
Standard library only."""

import base64
import hashlib
import os
import socket
import struct

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class Closed(Exception):
    def __init__(self, code, reason):
        super().__init__(f"closed {code}: {reason}")
        self.code = code
        self.reason = reason


class HandshakeError(Exception):
    def __init__(self, status, body):
        super().__init__(f"handshake refused: {status} {body[:200]!r}")
        self.status = status
        self.body = body


class WebSocket:
    def __init__(self, host, port, path, headers=None, timeout=30):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.buf = b""
        self.close_code = None
        key = base64.b64encode(os.urandom(16)).decode()
        headers = dict(headers or {})
        lines = [f"GET {path} HTTP/1.1", f"Host: {headers.pop('Host', f'{host}:{port}')}",
                 "Upgrade: websocket",
                 "Connection: Upgrade", f"Sec-WebSocket-Key: {key}",
                 "Sec-WebSocket-Version: 13"]
        for k, v in (headers or {}).items():
            lines.append(f"{k}: {v}")
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = self._read_until(b"\r\n\r\n")
        status_line, *hdrs = head.decode("latin-1").split("\r\n")
        status = int(status_line.split()[1])
        fields = {h.split(":", 1)[0].strip().lower(): h.split(":", 1)[1].strip()
                  for h in hdrs if ":" in h}
        if status != 101:
            n = int(fields.get("content-length", "0"))
            body = self._read_exact(n) if n else b""
            self.sock.close()
            raise HandshakeError(status, body)
        want = base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()
        if fields.get("sec-websocket-accept") != want:
            raise AssertionError("bad Sec-WebSocket-Accept")

    def _read_until(self, marker):
        while marker not in self.buf:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed during the handshake")
            self.buf += chunk
        head, self.buf = self.buf.split(marker, 1)
        return head

    def _read_exact(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("connection closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def send_frame(self, opcode, payload, fin=True):
        head = bytes([(0x80 if fin else 0) | opcode])
        n = len(payload)
        if n < 126:
            head += bytes([0x80 | n])
        elif n < 65536:
            head += bytes([0x80 | 126]) + struct.pack("!H", n)
        else:
            head += bytes([0x80 | 127]) + struct.pack("!Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(head + mask + masked)

    def send_binary(self, data):
        self.send_frame(0x2, data)

    def send_text(self, text):
        self.send_frame(0x1, text.encode())

    def close(self, code=1000):
        try:
            self.send_frame(0x8, struct.pack("!H", code))
        except OSError:
            pass
        self.sock.close()

    def recv(self):
        """The next message as (binary, payload); raises Closed at the server's close."""
        parts, first_op = [], None
        while True:
            b0, b1 = self._read_exact(2)
            op, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack("!H", self._read_exact(2))[0]
            elif n == 127:
                n = struct.unpack("!Q", self._read_exact(8))[0]
            if b1 & 0x80:
                raise AssertionError("the server masked a frame")
            payload = self._read_exact(n)
            if op == 0x8:
                code = struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else 1005
                self.close_code = code
                try:
                    self.send_frame(0x8, payload[:2])
                except OSError:
                    pass
                self.sock.close()
                raise Closed(code, payload[2:].decode("utf-8", "replace"))
            if op == 0x9:
                self.send_frame(0xA, payload)
                continue
            if op == 0xA:
                continue
            if op != 0:
                first_op = op
            parts.append(payload)
            if b0 & 0x80:
                return first_op == 0x2, b"".join(parts)
