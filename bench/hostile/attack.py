#!/usr/bin/env python3
"""The attackers of bench/hostile/bench.py, in a process of their own (one asyncio loop), so
that they never hold up the honest client's process.

Run by bench.py as `attack.py`, its configuration as JSON on stdin; prints one JSON line of counters a second on
stdout and a last one when it stops (on SIGTERM, SIGINT or when its parent goes away). Every
attacker binds its socket to its own loopback source address before connecting:

  slow      clients that send a request head a byte at a time and never finish it; when the
            daemon closes one, it connects again
  bodies    keyless clients that POST large bodies to a route that needs a key, over and over
  quota     one key that creates sessions until it is refused, then keeps asking as fast as
            one keep-alive connection allows
  readers   a key whose clients ask for a large file and never read the answer (a small
            receive buffer); when the daemon closes one, it asks again
  pings     a key's terminal WebSockets that send empty pings as fast as they can and never
            read a pong
  trickle   keyless clients that send GET /health with a large Content-Length and then a body
            byte now and then; when the daemon closes one, it connects again
  unfinished  a key's clients that POST /mcp bodies of 40 MiB, send all but the last byte and
            wait; when the daemon answers or closes one, it starts again
"""

import asyncio
import base64
import ctypes
import json
import os
import resource
import select
import signal
import socket
import sys
import time

POLLRDHUP = 0x2000


def die_with_parent():
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def raise_nofile(need):
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard == resource.RLIM_INFINITY else max(soft, min(hard, need))
    if want > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class Counters(dict):
    def add(self, name, n=1):
        self[name] = self.get(name, 0) + n


def bound_socket(addr, rcvbuf=None):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setblocking(False)
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind((addr, 0))
    return s


def status_of(data):
    """The status code of a response that begins in data, or 0."""
    if data.startswith(b"HTTP/1.") and len(data) >= 12 and data[9:12].isdigit():
        return int(data[9:12])
    return 0


async def read_response(reader):
    """One HTTP/1.1 response from an asyncio reader: (status, body bytes)."""
    head = await reader.readuntil(b"\r\n\r\n")
    status = status_of(head)
    length, chunked = 0, False
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        name = name.strip().lower()
        if name == b"content-length":
            length = int(value.strip())
        elif name == b"transfer-encoding" and b"chunked" in value.lower():
            chunked = True
    if not chunked:
        return status, await reader.readexactly(length)
    body = b""
    while True:
        size = int((await reader.readuntil(b"\r\n")).split(b";")[0].strip(), 16)
        if size == 0:
            await reader.readuntil(b"\r\n")
            return status, body
        body += await reader.readexactly(size)
        await reader.readexactly(2)


class Attack:
    def __init__(self, cfg):
        self.cfg = cfg
        self.host, self.port = cfg["host"], cfg["port"]
        self.stopping = asyncio.Event()
        self.c = Counters()
        self.loop = asyncio.get_running_loop()

    def stopped(self):
        return self.stopping.is_set()

    async def nap(self, seconds):
        """Sleeps, or returns early (True) when the attack stops."""
        try:
            await asyncio.wait_for(self.stopping.wait(), seconds)
            return True
        except asyncio.TimeoutError:
            return False

    async def connect(self, addr, what, rcvbuf=None):
        s = bound_socket(addr, rcvbuf)
        try:
            await asyncio.wait_for(self.loop.sock_connect(s, (self.host, self.port)), 10)
            return s
        except (OSError, asyncio.TimeoutError):
            s.close()
            self.c.add(f"{what}_connect_failed")
            return None

    # slow heads

    async def slow_client(self, addr, start_delay):
        if await self.nap(start_delay):
            return
        interval = self.cfg["slow_interval"]
        head = (b"GET /exec HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slow\r\nX-Pad: ")
        while not self.stopped():
            s = await self.connect(addr, "slow")
            if s is None:
                await self.nap(interval)
                continue
            self.c.add("slow_connects")
            self.c.add("slow_open")
            sent = 0
            try:
                while not self.stopped():
                    # The daemon's answer (408, 503) or its close ends this connection.
                    try:
                        got = s.recv(4096)
                        status = status_of(got)
                        self.c.add(f"slow_closed_{status}" if status else "slow_closed_eof")
                        break
                    except BlockingIOError:
                        pass
                    byte = head[sent:sent + 1] if sent < len(head) else b"a"
                    s.send(byte)
                    sent += 1
                    self.c.add("slow_bytes")
                    if await self.nap(interval):
                        break
            except OSError:
                self.c.add("slow_closed_reset")
            finally:
                self.c.add("slow_open", -1)
                s.close()

    # keyless bodies

    async def body_client(self, addr, start_delay):
        if await self.nap(start_delay):
            return
        size = self.cfg["body_bytes"]
        rate = self.cfg["body_rate"] / max(1, self.cfg["bodies"])  # bytes/s each; 0: unpaced
        chunk = memoryview(b"A" * self.cfg["body_chunk"])
        head = (f"POST {self.cfg['body_path']} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Content-Type: application/json\r\nContent-Length: {size}\r\n\r\n").encode()
        while not self.stopped():
            s = await self.connect(addr, "body")
            if s is None:
                await self.nap(1)
                continue
            self.c.add("body_requests")
            left = size
            try:
                await self.loop.sock_sendall(s, head)
                started = time.monotonic()
                sent = 0
                while left and not self.stopped():
                    n = min(left, len(chunk))
                    await self.loop.sock_sendall(s, chunk[:n])
                    left -= n
                    sent += n
                    self.c.add("body_bytes_sent", n)
                    if rate:
                        ahead = sent / rate - (time.monotonic() - started)
                        if ahead > 0 and await self.nap(ahead):
                            break
                if not left:
                    self.c.add("body_sent_whole")
            except OSError:
                self.c.add("body_cut_off")
            # Whatever the daemon answered (it may have answered at the head).
            try:
                got = await asyncio.wait_for(self.loop.sock_recv(s, 4096), 5)
                status = status_of(got)
                self.c.add(f"body_status_{status}" if status else "body_no_answer")
            except (OSError, asyncio.TimeoutError):
                self.c.add("body_no_answer")
            s.close()

    # a key at its quota

    async def quota_client(self, addr):
        key = self.cfg["quota_key"]
        limit = self.cfg["quota_sessions"]
        s = None
        writer = None
        created = 0
        refused = False
        n = 0
        while not self.stopped():
            if writer is None:
                s = await self.connect(addr, "quota")
                if s is None:
                    await self.nap(0.1)
                    continue
                reader, writer = await asyncio.open_connection(sock=s)
            # Sessions until the first refusal (at most twice the quota plus a few, in case
            # nothing refuses), then the same request, again and again.
            if not refused and created < 2 * limit + 8:
                sid = f"quota-{created}"
            else:
                sid = f"quota-more-{n % 4}"
            n += 1
            body = json.dumps({"id": sid}).encode()
            req = (f"POST /exec HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
                   f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                   ).encode() + body
            try:
                writer.write(req)
                await writer.drain()
                status, _ = await asyncio.wait_for(read_response(reader), 60)
            except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
                    asyncio.TimeoutError, ValueError):
                self.c.add("quota_conn_lost")
                writer.close()
                writer = None
                continue
            self.c.add(f"quota_status_{status}")
            if status == 201:
                created += 1
                self.c["quota_created"] = created
            elif not refused:
                refused = True
                self.c["quota_refused_after"] = created
        if writer is not None:
            writer.close()

    # readers that never read

    def reader_request(self, sid):
        return (f"GET /exec/{sid}/read?path={self.cfg['read_path']} HTTP/1.1\r\n"
                f"Host: 127.0.0.1\r\nAuthorization: Bearer {self.cfg['reader_key']}\r\n"
                f"Accept: application/octet-stream\r\n\r\n").encode()

    async def reader_client(self, addr, sid):
        while not self.stopped():
            s = await self.connect(addr, "reader", rcvbuf=4096)
            if s is None:
                await self.nap(1)
                continue
            try:
                await self.loop.sock_sendall(s, self.reader_request(sid))
                self.c.add("reader_requests")
                self.c.add("reader_open")
                p = select.poll()
                p.register(s, POLLRDHUP)
                # Never read; only notice (without reading) when the daemon gives up on us.
                while not self.stopped():
                    if p.poll(0):
                        self.c.add("reader_closed_by_daemon")
                        break
                    if await self.nap(0.5):
                        break
                self.c.add("reader_open", -1)
            except OSError:
                self.c.add("reader_send_failed")
            finally:
                s.close()

    # empty pings, pongs never read

    async def ping_client(self, addr, sid):
        key = base64.b64encode(os.urandom(16)).decode()
        head = (f"GET /exec/{sid}/terminal?command=sh HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {self.cfg['ping_key']}\r\nUpgrade: websocket\r\n"
                f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                "Sec-WebSocket-Version: 13\r\n\r\n").encode()
        burst = (bytes([0x89, 0x80]) + os.urandom(4)) * 2048
        while not self.stopped():
            s = await self.connect(addr, "ping", rcvbuf=4096)
            if s is None:
                await self.nap(1)
                continue
            try:
                await self.loop.sock_sendall(s, head)
                got = await asyncio.wait_for(self.loop.sock_recv(s, 4096), 10)
                status = status_of(got)
                self.c.add(f"ping_upgrade_{status}")
                if status != 101:
                    await self.nap(1)
                    continue
                self.c.add("ping_open")
                try:
                    while not self.stopped():
                        # Sends block (the daemon stops reading): wait, never read.
                        try:
                            await asyncio.wait_for(self.loop.sock_sendall(s, burst), 1)
                            self.c.add("ping_sent", len(burst) // 6)
                        except asyncio.TimeoutError:
                            self.c.add("ping_blocked")
                finally:
                    self.c.add("ping_open", -1)
            except (OSError, asyncio.TimeoutError):
                self.c.add("ping_cut_off")
            finally:
                s.close()

    # keyless trickled bodies

    async def trickle_client(self, addr, start_delay):
        if await self.nap(start_delay):
            return
        interval = self.cfg["trickle_interval"]
        head = (b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 65536\r\n\r\n")
        while not self.stopped():
            s = await self.connect(addr, "trickle")
            if s is None:
                await self.nap(interval)
                continue
            self.c.add("trickle_connects")
            try:
                await self.loop.sock_sendall(s, head)
                while not self.stopped():
                    try:
                        got = s.recv(4096)
                        status = status_of(got)
                        self.c.add(f"trickle_closed_{status}" if status
                                   else "trickle_closed_eof")
                        break
                    except BlockingIOError:
                        pass
                    s.send(b"a")
                    self.c.add("trickle_bytes")
                    if await self.nap(interval):
                        break
            except OSError:
                self.c.add("trickle_closed_reset")
            finally:
                s.close()

    # unfinished bodies

    async def unfinished_client(self, addr, start_delay):
        if await self.nap(start_delay):
            return
        size = self.cfg["unfinished_bytes"]
        head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                f"Authorization: Bearer {self.cfg['unfinished_key']}\r\n"
                "Content-Type: application/json\r\nAccept: application/json, text/event-stream\r\n"
                f"Content-Length: {size}\r\n\r\n").encode()
        chunk = memoryview(b"[" + b" " * (256 * 1024 - 1))
        while not self.stopped():
            s = await self.connect(addr, "unfinished")
            if s is None:
                await self.nap(1)
                continue
            self.c.add("unfinished_requests")
            try:
                await self.loop.sock_sendall(s, head)
                left = size - 1
                first = True
                while left and not self.stopped():
                    n = min(left, len(chunk))
                    await self.loop.sock_sendall(s, chunk[:n] if first else
                                                 memoryview(b" " * n))
                    first = False
                    left -= n
                    self.c.add("unfinished_bytes_sent", n)
                self.c.add("unfinished_open")
                try:
                    got = await asyncio.wait_for(self.loop.sock_recv(s, 4096), 3600)
                    status = status_of(got)
                    self.c.add(f"unfinished_status_{status}" if status
                               else "unfinished_closed")
                except asyncio.TimeoutError:
                    pass
                finally:
                    self.c.add("unfinished_open", -1)
            except OSError:
                self.c.add("unfinished_cut_off")
            finally:
                s.close()
            await self.nap(0.5)

    async def report(self):
        while True:
            snapshot = dict(self.c)
            snapshot["t"] = time.monotonic()
            print(json.dumps(snapshot), flush=True)
            if self.stopped():
                return
            await self.nap(1)

    async def run(self):
        cfg = self.cfg
        for sig in (signal.SIGTERM, signal.SIGINT):
            self.loop.add_signal_handler(sig, self.stopping.set)
        tasks = []
        per = max(1, cfg["slow_per_address"])
        ramp = cfg["ramp"]
        for i in range(cfg["slow"]):
            addr = f"127.0.{1 + i // per // 254}.{1 + (i // per) % 254}"
            tasks.append(self.slow_client(addr, ramp * i / max(1, cfg["slow"])))
        for i in range(cfg["bodies"]):
            tasks.append(self.body_client(f"127.0.{cfg['body_net']}.{1 + i % 254}",
                                          ramp * i / max(1, cfg["bodies"])))
        if cfg["quota_key"]:
            tasks.append(self.quota_client(f"127.0.{cfg['quota_net']}.1"))
        for i, sid in enumerate(cfg["reader_sessions"]):
            tasks.append(self.reader_client(f"127.0.{cfg['reader_net']}.{1 + i % 254}", sid))
        for i in range(cfg["pings"]):
            tasks.append(self.ping_client(f"127.0.{cfg['ping_net']}.{1 + i % 254}",
                                          cfg["ping_session"]))
        per = max(1, cfg["slow_per_address"])
        for i in range(cfg["trickles"]):
            addr = f"127.0.{cfg['trickle_net'] + i // per // 254}.{1 + (i // per) % 254}"
            tasks.append(self.trickle_client(addr, ramp * i / max(1, cfg["trickles"])))
        for i in range(cfg["unfinished"]):
            tasks.append(self.unfinished_client(f"127.0.{cfg['unfinished_net']}.{1 + i % 254}",
                                                ramp * i / max(1, cfg["unfinished"])))
        reporter = asyncio.ensure_future(self.report())
        await asyncio.gather(*tasks)
        await reporter


def main():
    die_with_parent()
    cfg = json.load(sys.stdin)
    need = (cfg["slow"] + 2 * cfg["bodies"] + 2 * len(cfg["reader_sessions"]) +
            2 * cfg["pings"] + cfg["trickles"] + 2 * cfg["unfinished"] + 64)
    cfg["nofile"] = raise_nofile(need)
    if cfg["nofile"] < need:
        sys.exit(f"attack: {need} descriptors needed, the limit is {cfg['nofile']}")
    async def attack():
        await Attack(cfg).run()

    asyncio.run(attack())


if __name__ == "__main__":
    main()
