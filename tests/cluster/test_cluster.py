"""Many hosts on etcd (docs/cluster.md), all on loopback: a 3-member etcd cluster and three
sandboxd nodes, a, b and c (only a manages sandbox networks: one daemon per host does).

A client uses the whole API through any node for sessions that live on the others: creation
and placement, execute (buffered and NDJSON, whose chunks come as they are made), files, a
WebSocket terminal, E2B's control and data planes, previews; keys made, rotated or revoked on
one node take effect on every node; node and etcd failures behave as documented. Figures are
printed, assertions on time are generous."""

import json
import os
import shutil
import signal
import tempfile
import threading
import time
import unittest
import urllib.parse

import cluster
import harness
import helpers_host as host
from helpers_exec import sandbox_of
from wsclient import HandshakeError, WebSocket


def joined(output, stream="stdout"):
    return "".join(o["data"] for o in output if o["stream"] == stream)


class ClusterCase(unittest.TestCase):
    """One etcd cluster and three nodes for the tests of a class."""

    labels = {"a": "zone=one", "b": "zone=two", "c": "zone=two,gpu=yes"}
    node_env = {}

    @classmethod
    def setUpClass(cls):
        cls.etcd = cluster.Etcd(3).start()
        cls.nodes = {}
        # c is reached by a name, resolved off the loop when its record comes.
        port = cluster.free_port()
        named = {"PORT": str(port), "SANDBOX_NODE_URL": f"http://localhost:{port}"}
        try:
            for name in "abc":
                env = dict(cls.node_env.get(name) or {}, **(named if name == "c" else {}))
                cls.nodes[name] = cluster.node(cls.etcd, name, network=name == "a",
                                               labels=cls.labels.get(name, ""), env=env)
        except BaseException:
            cls.tearDownClass()
            raise
        keyed = [d for d in cls.nodes.values() if d.admin_key]
        # Exactly one node began the cluster and made its first admin key.
        assert len(keyed) == 1, [d.name for d in keyed]
        cls.key = keyed[0].admin_key
        for d in cls.nodes.values():
            d.api_key = cls.key
        cls.wait_nodes(3)

    @classmethod
    def tearDownClass(cls):
        for d in getattr(cls, "nodes", {}).values():
            d.stop(check=False)
        cls.etcd.stop()

    @classmethod
    def wait_nodes(cls, n, timeout=30):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            ok = True
            for d in cls.nodes.values():
                if d.proc is None or d.proc.poll() is not None:
                    continue
                st, _, body = d.get("/admin/nodes")
                if st != 200 or sum(1 for x in body["nodes"] if x["up"]) != n:
                    ok = False
            if ok:
                return
            time.sleep(0.1)
        raise AssertionError(f"the nodes did not all see {n} nodes up")

    def key_everywhere(self, key, timeout=5):
        """Waits until every node takes a key just made: keys reach the other nodes through
        the watch, within its latency, not at once."""
        for name, d in self.nodes.items():
            end = time.monotonic() + timeout
            while True:
                st, _, _ = d.get("/exec", api_key=key)
                if st == 200 or time.monotonic() > end:
                    break
                time.sleep(0.02)
            self.assertEqual(st, 200, name)

    def create(self, via, **body):
        st, _, s = self.nodes[via].post("/exec", body=body, timeout=120)
        self.assertEqual(st, 201, s)
        self.addCleanup(self.destroy, s["id"])
        return s

    def destroy(self, sid):
        for d in self.nodes.values():
            if d.proc is not None and d.proc.poll() is None:
                try:
                    d.delete(f"/exec/{sid}", timeout=30)
                except OSError:
                    continue
                return

    def execute(self, via, sid, command, **kw):
        st, _, out = self.nodes[via].post(f"/exec/{sid}/execute", body={"command": command},
                                          timeout=60, **kw)
        return st, out


class AnyNodeServesTheWholeApiTest(ClusterCase):
    def test_create_on_one_node_then_execute_stream_and_files_through_another(self):
        s = self.create("a", id="on-a", nodeSelector={"zone": "one"})
        self.assertEqual(s["node"], "a", s)
        st, out = self.execute("b", "on-a", "echo from $(hostname)")
        self.assertEqual(st, 200, out)
        self.assertEqual(joined(out["output"]), "from sandbox\n")
        # Files both ways through c, binary-safe and streamed.
        data = os.urandom(3 << 20)
        st, _, body = self.nodes["c"].request(
            "PUT", "/exec/on-a/file?path=blob", body=data,
            headers={"Content-Type": "application/octet-stream"})
        self.assertEqual(st, 200, body)
        st, _, got = self.nodes["b"].request("GET", "/exec/on-a/read?path=blob",
                                             headers={"Accept": "application/octet-stream"})
        self.assertEqual(st, 200)
        self.assertEqual(got, data)
        st, _, body = self.nodes["b"].post("/exec/on-a/write",
                                           body={"path": "t.txt", "content": "hi"})
        self.assertEqual(st, 200, body)
        st, _, body = self.nodes["c"].get("/exec/on-a/files?path=.")
        self.assertEqual(st, 200, body)
        self.assertIn("t.txt", json.dumps(body))

    def test_clients_that_leave_in_the_middle_cost_nothing(self):
        """A forwarded download whose client reads nothing and leaves, and listings whose
        clients leave at once: the node frees what they held (the ASan daemon's clean exit at
        the end of the class checks it) and serves on."""
        import socket
        s = self.create("a", id="big", nodeSelector={"gpu": "yes"})
        self.assertEqual(s["node"], "c")
        st, out = self.execute("c", "big", "head -c 33554432 /dev/urandom > big.bin")
        self.assertEqual(st, 200, out)
        a = self.nodes["a"]
        for path, accept in (("/exec/big/read?path=big.bin", "application/octet-stream"),
                             ("/exec", "application/json")):
            for _ in range(5):
                sock = socket.create_connection((a.host, a.port))
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                             f"Authorization: Bearer {self.key}\r\nAccept: {accept}\r\n\r\n"
                             .encode())
                if "read" in path:
                    time.sleep(0.5)  # the answer backs up: nobody reads it
                sock.close()
        time.sleep(1)
        st, out = self.execute("a", "big", "echo alive")
        self.assertEqual(joined(out["output"]), "alive\n")

    def test_an_ndjson_execute_streamed_through_another_node_shows_its_chunks_as_they_come(self):
        self.create("b", id="streamer", nodeSelector={"zone": "two", "gpu": "yes"})
        t0 = time.monotonic()
        arrivals = []
        with self.nodes["a"].stream(
                "POST", "/exec/streamer/execute?format=ndjson",
                body={"command": "for i in 1 2 3; do echo $i; sleep 1; done"}) as s:
            for line in s.ndjson():
                if line.get("type") == "stream":
                    arrivals.append((time.monotonic() - t0, line["data"]))
                if line.get("type") == "result":
                    end = time.monotonic() - t0
                    self.assertEqual(line["exitCode"], 0)
        print(f"\n  chunks through another node at {[round(t, 2) for t, _ in arrivals]} s, "
              f"result at {end:.2f} s")
        self.assertEqual([d for _, d in arrivals], ["1\n", "2\n", "3\n"])
        # The first chunk came long before the command ended: streamed, not buffered.
        self.assertLess(arrivals[0][0], end - 1.5)

    def test_a_terminal_through_another_node(self):
        self.create("a", id="tty", nodeSelector={"zone": "one"})
        # The ticket is made where the session is (through b), used through c.
        st, _, body = self.nodes["b"].post("/exec/tty/tickets", body={})
        self.assertEqual(st, 201, body)
        c = self.nodes["c"]
        ws = WebSocket(c.host, c.port, f"/exec/tty/terminal?command=sh&ticket={body['ticket']}")
        out = b""
        ws.send_binary(b"echo $((6*7))\r")
        end = time.monotonic() + 30
        while b"42" not in out and time.monotonic() < end:
            binary, data = ws.recv()
            if binary:
                out += data
        ws.close()
        self.assertIn(b"42", out)
        # The ticket worked once, wherever it is shown.
        with self.assertRaises(HandshakeError) as cm:
            WebSocket(c.host, c.port, f"/exec/tty/terminal?ticket={body['ticket']}")
        self.assertEqual(cm.exception.status, 401)

    def test_e2b_control_and_data_planes_through_another_node(self):
        st, _, sbx = self.nodes["c"].post("/sandboxes", body={"templateID": "base",
                                                              "nodeSelector": {"zone": "one"}})
        self.assertEqual(st, 201, sbx)
        sid = sbx["sandboxID"]
        self.addCleanup(self.nodes["a"].delete, f"/sandboxes/{sid}")
        st, _, info = self.nodes["b"].get(f"/sandboxes/{sid}")
        self.assertEqual(st, 200, info)
        st, _, body = self.nodes["c"].post(f"/exec/{sid}/write",
                                           body={"path": "e2b.txt", "content": "sandbox\n"})
        self.assertEqual(st, 200, body)
        # envd through b: the data plane is found by its sandbox id.
        st, _, body = self.nodes["b"].request(
            "GET", "/files?path=e2b.txt",
            headers={"E2b-Sandbox-Id": sid, "E2b-Sandbox-Port": "49983",
                     "X-Access-Token": sbx["envdAccessToken"],
                     "Accept": "application/octet-stream"}, api_key="")
        self.assertEqual(st, 200, body)
        self.assertEqual(body.strip(), b"sandbox")
        st, _, listed = self.nodes["b"].get("/v2/sandboxes")
        self.assertIn(sid, [x["sandboxID"] for x in listed])

    def test_a_preview_through_another_node(self):
        self.create("a", id="web", nodeSelector={"zone": "one"})
        st, out = self.execute("a", "web", "echo page > index.html; /usr/sbin/httpd -p 8080 -h .")
        self.assertEqual(st, 200, out)
        end = time.monotonic() + 20
        while True:
            st, _, body = self.nodes["c"].get("/exec/web/ports/8080/index.html",
                                              headers={"Accept": "*/*"})
            if st == 200 or time.monotonic() > end:
                break
            time.sleep(0.2)
        self.assertEqual(st, 200, body)
        self.assertEqual(body.strip(), b"page")

    def test_listing_is_cluster_wide_and_filtered_by_ownership(self):
        st, _, k = self.nodes["b"].post("/admin/keys", body={"name": "tenant", "scopes": ["exec"]})
        self.assertEqual(st, 201, k)
        self.addCleanup(self.nodes["b"].delete, f"/admin/keys/{k['id']}")
        self.key_everywhere(k["key"])
        mine = []
        for via, zone in (("a", {"zone": "one"}), ("b", {"gpu": "yes"})):
            st, _, s = self.nodes[via].post("/exec", body={"nodeSelector": zone},
                                            api_key=k["key"], timeout=120)
            self.assertEqual(st, 201, s)
            mine.append((s["id"], s["node"]))
            self.addCleanup(self.nodes[via].delete, f"/exec/{s['id']}", api_key=k["key"])
        admins = self.create("b", id="admins-own", nodeSelector={"gpu": "yes"})
        st, _, body = self.nodes["a"].post("/exec/admins-own/write",
                                           body={"path": "secret.txt", "content": "admin's"})
        self.assertEqual(st, 200, body)
        for via in "abc":
            st, _, listed = self.nodes[via].get("/exec", api_key=k["key"])
            self.assertEqual(st, 200, listed)
            self.assertEqual(sorted((s["id"], s["node"]) for s in listed["sessions"]),
                             sorted(mine), via)
            # Another key's session is not there, nor reachable through any node.
            st, _, body = self.nodes[via].get("/exec/admins-own/read?path=secret.txt",
                                              api_key=k["key"])
            self.assertEqual(st, 404, body)
        # An admin lists every key's.
        st, _, listed = self.nodes["c"].get("/exec")
        ids = {s["id"] for s in listed["sessions"]}
        self.assertTrue({m for m, _ in mine} | {admins["id"]} <= ids, listed)


class McpTest(ClusterCase):
    def mcp(self, via, message, sid=None):
        headers = {"Accept": "application/json, text/event-stream"}
        if sid:
            headers["Mcp-Session-Id"] = sid
        st, h, body = self.nodes[via].post("/mcp", body=message, headers=headers)
        return st, h, body

    def test_an_mcp_session_and_its_tools_through_any_node(self):
        self.create("a", id="mcp-target", nodeSelector={"zone": "one"})
        st, h, body = self.mcp("b", {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                                     "params": {"protocolVersion": "2025-03-26",
                                                "capabilities": {},
                                                "clientInfo": {"name": "t", "version": "1"}}})
        self.assertEqual(st, 200, body)
        sid = h["Mcp-Session-Id"]
        self.assertTrue(sid.startswith("b~"), sid)
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                "params": {"name": "execute",
                           "arguments": {"sessionId": "mcp-target", "command": "echo via-mcp"}}}
        # The session is a's, the MCP session b's; the request comes through c.
        st, _, body = self.mcp("c", call, sid)
        self.assertEqual(st, 200, body)
        self.assertIn("via-mcp", json.dumps(body["result"]), body)
        self.assertFalse(body["result"].get("isError"), body)
        # A tool that makes a session makes it on the MCP session's node, where its next
        # tools find it.
        st, _, body = self.mcp("a", {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
                                     "params": {"name": "create_session",
                                                "arguments": {"sessionId": "mcp-made"}}}, sid)
        self.assertEqual(st, 200, body)
        self.addCleanup(self.destroy, "mcp-made")
        st, _, listed = self.nodes["c"].get("/exec")
        made = next(s for s in listed["sessions"] if s["id"] == "mcp-made")
        self.assertEqual(made["node"], "b")
        st, _, body = self.nodes["a"].request("DELETE", "/mcp",
                                              headers={"Mcp-Session-Id": sid})
        self.assertIn(st, (200, 204), body)
        st, _, body = self.mcp("b", call, sid)
        self.assertEqual(st, 404, body)


class PlacementTest(ClusterCase):
    node_env = {"b": {"SANDBOX_MAX_SESSIONS": "2"}}

    def test_labels_choose_the_node_and_a_selector_nothing_fits_is_503(self):
        s = self.create("a", nodeSelector={"gpu": "yes"})
        self.assertEqual(s["node"], "c")
        s = self.create("c", nodeSelector={"zone": "one"})
        self.assertEqual(s["node"], "a")
        st, h, body = self.nodes["b"].post("/exec", body={"nodeSelector": {"gpu": "no"}})
        self.assertEqual(st, 503, body)
        self.assertIn("no node", body["error"])
        self.assertIn("Retry-After", h)
        st, _, body = self.nodes["b"].post("/exec", body={"nodeSelector": ["gpu"]})
        self.assertEqual(st, 400, body)
        st, _, body = self.nodes["b"].post("/exec", body={"template": "no-such-template"})
        self.assertEqual(st, 503, body)

    def test_capacity_and_load(self):
        # b holds two sessions at most: the third that asks for zone two goes to c.
        got = [self.create("a", nodeSelector={"zone": "two"})["node"] for _ in range(4)]
        print(f"\n  placed by load: {got}")
        self.assertLessEqual(got.count("b"), 2)
        self.assertEqual(len(got), 4)
        # Without a selector, the least loaded: a, which holds none yet here.
        self.assertEqual(self.create("b")["node"], "a")

    def test_a_cordoned_node_takes_no_new_session_and_keeps_its_own(self):
        s = self.create("a", nodeSelector={"gpu": "yes"})
        self.assertEqual(s["node"], "c")
        st, _, body = self.nodes["a"].post("/admin/nodes/c/cordon")
        self.assertEqual(st, 200, body)
        self.addCleanup(self.nodes["a"].post, "/admin/nodes/c/uncordon")
        end = time.monotonic() + 5
        while time.monotonic() < end:
            st, _, nodes = self.nodes["b"].get("/admin/nodes")
            if next(n for n in nodes["nodes"] if n["name"] == "c")["cordoned"]:
                break
            time.sleep(0.05)
        st, _, body = self.nodes["b"].post("/exec", body={"nodeSelector": {"gpu": "yes"}})
        self.assertEqual(st, 503, body)
        # b (two sessions at most) takes them instead.
        for _ in range(2):
            self.assertNotEqual(self.create("b", nodeSelector={"zone": "two"})["node"], "c")
        st, out = self.execute("a", s["id"], "echo still")
        self.assertEqual(joined(out["output"]), "still\n")
        st, _, body = self.nodes["b"].post("/admin/nodes/c/uncordon")
        self.assertEqual(st, 200, body)
        time.sleep(0.5)
        self.assertEqual(self.create("a", nodeSelector={"gpu": "yes"})["node"], "c")
        st, _, body = self.nodes["b"].post("/admin/nodes/nosuch/cordon")
        self.assertEqual(st, 404, body)


class KeysTest(ClusterCase):
    def test_a_key_made_on_one_node_works_on_every_node_and_a_revocation_everywhere_at_once(self):
        st, _, k = self.nodes["a"].post("/admin/keys", body={"name": "k1", "scopes": ["exec"]})
        self.assertEqual(st, 201, k)
        self.key_everywhere(k["key"])
        # Rotated on b: the old secret fails on a, the new one works there.
        st, _, r = self.nodes["b"].post(f"/admin/keys/{k['id']}/rotate")
        self.assertEqual(st, 200, r)
        time.sleep(0.3)
        self.assertEqual(self.nodes["a"].get("/exec", api_key=k["key"])[0], 401)
        self.assertEqual(self.nodes["a"].get("/exec", api_key=r["key"])[0], 200)
        # Revoked on c: refused on a within a second.
        st, _, body = self.nodes["c"].post(f"/admin/keys/{k['id']}/revoke")
        self.assertEqual(st, 200, body)
        t0 = time.monotonic()
        while self.nodes["a"].get("/exec", api_key=r["key"])[0] != 401:
            self.assertLess(time.monotonic() - t0, 1.0, "the revocation took over a second")
            time.sleep(0.005)
        print(f"\n  revoked on c, refused on a after {1000 * (time.monotonic() - t0):.0f} ms")
        # Quotas and rate limits changed on one node hold on another.
        st, _, k2 = self.nodes["a"].post("/admin/keys", body={
            "name": "k2", "scopes": ["exec"], "quotas": {"sessions": 1}})
        self.assertEqual(st, 201, k2)
        time.sleep(0.3)
        st, _, listed = self.nodes["c"].get("/admin/keys")
        row = next(x for x in listed["keys"] if x["id"] == k2["id"])
        self.assertEqual(row["quotas"]["sessions"], 1, row)
        st, _, body = self.nodes["b"].delete(f"/admin/keys/{k2['id']}")
        self.assertEqual(st, 200, body)
        time.sleep(0.3)
        self.assertEqual(self.nodes["c"].get("/exec", api_key=k2["key"])[0], 401)
        # The first admin key is kept, 0600, by the one node that made it.
        files = [d for d in self.nodes.values()
                 if os.path.exists(os.path.join(d.state_dir, "admin-key"))]
        self.assertEqual(len(files), 1)
        self.assertEqual(os.stat(os.path.join(files[0].state_dir, "admin-key")).st_mode & 0o777,
                         0o600)


class WatchTest(ClusterCase):
    def test_the_watch_moves_to_another_member_and_resumes_where_it_was(self):
        """Every node's watch is on the first endpoint: when that member goes, each resumes
        on another from the revision it had reached, and misses nothing made meanwhile."""
        st, _, k = self.nodes["a"].post("/admin/keys", body={"name": "w", "scopes": ["exec"]})
        self.assertEqual(st, 201, k)
        self.etcd.stop_member(0)
        # Made while the watches are moving: a key revoked, and a session recorded.
        t0 = time.monotonic()
        st, _, body = self.nodes["a"].post(f"/admin/keys/{k['id']}/revoke", timeout=30)
        self.assertEqual(st, 200, body)
        s = self.create("a", nodeSelector={"zone": "one"})
        for via in "bc":
            while self.nodes[via].get("/exec", api_key=k["key"])[0] != 401:
                self.assertLess(time.monotonic() - t0, 15, f"{via} missed the revocation")
                time.sleep(0.05)
            while True:
                st, out = self.execute(via, s["id"], "echo here")
                if st == 200:
                    break
                self.assertLess(time.monotonic() - t0, 15, f"{via} missed the session")
                time.sleep(0.05)
        print(f"\n  a member gone: the other nodes saw the changes after "
              f"{time.monotonic() - t0:.2f} s")
        self.etcd.start_member(0)
        st, _, m = self.nodes["b"].request("GET", "/metrics", headers={"Accept": "text/plain"})
        self.assertIn('cluster_watch_restarts_total{reason="disconnected"}', m.decode())


class PeerAuthenticationTest(ClusterCase):
    def test_only_a_node_with_the_secret_may_vouch_for_a_caller_once(self):
        s = self.create("b", nodeSelector={"gpu": "yes"})
        sid, holder_name = s["id"], s["node"]
        holder = self.nodes[holder_name]
        other_name = next(n for n in "abc" if n != holder_name)
        other = self.nodes[other_name]
        path = f"/exec/{sid}/execute"
        st, _, keys = holder.get("/admin/keys")
        admin_id = keys["keys"][0]["id"]
        sender = next(n for n in "abc" if n != holder_name)

        def attempt(d, header, target=path, body=None):
            return d.post(target, body=body or {"command": "true"}, api_key="",
                          headers={"X-Sandbox-Peer": header})

        def signed(dest=holder_name, **kw):
            kw.setdefault("owner", admin_id)
            kw.setdefault("scopes", 7)
            kw.setdefault("node", sender)
            return cluster.sign("POST", kw.pop("target", path), dest, **kw)

        # No key, a signature made with another secret: refused, as a forgery.
        st, _, body = attempt(holder, signed(secret="x" * 64))
        self.assertEqual(st, 401, body)
        self.assertIn("signature", body["error"])
        # The right secret, but a minute and more ago.
        st, _, body = attempt(holder, signed(ts=int(time.time() * 1000) - 120_000))
        self.assertEqual(st, 401, body)
        self.assertIn("stale", body["error"])
        # Signed for another target, or for another node.
        st, _, body = attempt(holder, signed(target="/exec/other/execute"))
        self.assertEqual(st, 401, body)
        st, _, body = attempt(holder, signed(dest=other_name))
        self.assertEqual(st, 401, body)
        self.assertIn("made for node", body["error"])
        # From a name that is no node of the cluster.
        st, _, body = attempt(holder, signed(node="stranger"))
        self.assertEqual(st, 401, body)
        for bad in ("v1", "garbage", "v2 node=../x dest=a ts=1 nonce=" + "0" * 32 +
                    " owner=- scopes=0 sig=" + "0" * 64,
                    "v2 node=a dest=a ts=1 nonce=xyz owner=- scopes=0 sig=" + "0" * 64,
                    "v2 node=a dest=a ts=1 nonce=" + "0" * 32 + " owner=- scopes=99 sig=" +
                    "0" * 64):
            self.assertEqual(attempt(holder, bad)[0], 401, bad)
        # Signed with the secret for the node that holds the session: a vouched caller. The
        # same header again (a replay of what crossed the link) is refused: it works once.
        header = signed()
        st, _, body = attempt(holder, header, body={"command": "echo vouched"})
        self.assertEqual(st, 200, body)
        self.assertEqual(joined(body["output"]), "vouched\n")
        st, _, body = attempt(holder, header, body={"command": "echo again"})
        self.assertEqual(st, 401, body)
        self.assertIn("sent before", body["error"])
        # Served where it lands (no second hop): a node that does not hold the session does
        # not send it on; it would make one of that id, which the cluster's table refuses
        # while the other node holds it.
        st, _, body = attempt(other, signed(dest=other_name, node=holder_name))
        self.assertEqual(st, 409, body)
        self.assertIn(f"node `{holder_name}`", body["error"])
        # A vouched identity is checked against the key table: a key that is gone is 401.
        st, _, body = attempt(holder, signed(owner="key_0000"))
        self.assertEqual(st, 401, body)


class NodeFailureTest(ClusterCase):
    def test_kill_9_of_a_node_its_sessions_are_lost_with_a_clear_answer_and_the_rest_goes_on(self):
        on_c = self.create("a", id="doomed", nodeSelector={"gpu": "yes"})["id"]
        on_a = self.create("b", id="survivor", nodeSelector={"zone": "one"})["id"]
        c = self.nodes["c"]
        c_state = c.state_dir
        doomed = sandbox_of(c, on_c)
        self.assertTrue(doomed and host.cgroup_dirs(doomed), f"no cgroup for {on_c}: {doomed}")
        c.proc.send_signal(signal.SIGKILL)
        c.proc.wait(10)
        c.kill()
        t0 = time.monotonic()
        while True:
            t1 = time.monotonic()
            st, out = self.execute("a", on_c, "true")
            took = time.monotonic() - t1
            self.assertLess(took, 10, "a request for a lost session hung")
            if st == 410:
                break
            self.assertEqual(st, 502, out)  # the node is gone, its lease not yet
            self.assertLess(time.monotonic() - t0, 15, "its lease never ended")
            time.sleep(0.1)
        print(f"\n  kill -9: its sessions answer 410 after {time.monotonic() - t0:.2f} s")
        self.assertIn("not up", out["error"])
        for via in "ab":
            st, _, listed = self.nodes[via].get("/exec")
            self.assertNotIn(on_c, [s["id"] for s in listed["sessions"]])
            st, out = self.execute(via, on_a, "echo ok")
            self.assertEqual(joined(out["output"]), "ok\n")
        st, _, body = self.nodes["a"].get(f"/exec/{on_c}/read?path=x")
        self.assertEqual(st, 410, body)
        # It comes back over its old state: what it left is cleared, the id is free again.
        self.nodes["c"] = cluster.node(self.etcd, "c", labels=self.labels["c"],
                                       state_dir=c_state)
        self.nodes["c"].api_key = self.key
        self.wait_nodes(3)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            st, _, body = self.nodes["a"].get(f"/exec/{on_c}/read?path=x")
            if st == 404:
                break
            time.sleep(0.1)
        self.assertEqual(st, 404, body)
        # Its sandbox went with the restart (also when this node was itself a restart's).
        self.assertEqual(host.cgroup_dirs(doomed), [], "the killed node's sandbox survived")

    def test_a_rolling_restart_loses_no_session_but_the_restarted_nodes(self):
        keep = {}
        for name, sel in (("a", {"zone": "one"}), ("b", {"zone": "two"}),
                          ("c", {"gpu": "yes"})):
            s = self.create("a", nodeSelector=sel)
            keep.setdefault(s["node"], []).append(s["id"])
        for name in "abc":
            d = self.nodes[name]
            state = d.state_dir
            d.stop()
            keep.pop(name, None)
            self.nodes[name] = cluster.node(self.etcd, name, network=name == "a",
                                            labels=self.labels[name], state_dir=state)
            self.nodes[name].api_key = self.key
            self.wait_nodes(3)
            for node_name, ids in keep.items():
                for sid in ids:
                    for via in "abc":
                        st, out = self.execute(via, sid, "echo alive")
                        self.assertEqual(st, 200, (name, sid, via, out))
            # A new session on the restarted node, kept through the next restarts.
            s = self.create("b", nodeSelector={"a": {"zone": "one"}, "b": {"zone": "two"},
                                               "c": {"gpu": "yes"}}[name])
            keep.setdefault(s["node"], []).append(s["id"])


class EtcdFailureTest(ClusterCase):
    def test_quorum_lost_creations_fail_fast_sessions_answer_health_is_quick(self):
        s_a = self.create("a", nodeSelector={"zone": "one"})["id"]
        s_c = self.create("a", nodeSelector={"gpu": "yes"})["id"]
        # One member of three down: the quorum holds, everything works.
        self.etcd.stop_member(2)
        self.create("b", nodeSelector={"zone": "two"})
        # Two down: no quorum.
        self.etcd.stop_member(1)
        time.sleep(3)
        for via in "abc":
            t0 = time.monotonic()
            st, _, body = self.nodes[via].post("/exec", body={})
            took = time.monotonic() - t0
            print(f"\n  no quorum: a creation through {via} answered {st} in {took:.2f} s")
            self.assertEqual(st, 503, body)
            self.assertLess(took, 5)
            self.assertIn("etcd", body["error"])
        for via in "abc":
            for sid in (s_a, s_c):
                st, out = self.execute(via, sid, "echo still")
                self.assertEqual(st, 200, (via, sid, out))
            worst = 0
            for _ in range(20):
                t0 = time.monotonic()
                st, _, body = self.nodes[via].get("/health")
                worst = max(worst, time.monotonic() - t0)
                self.assertEqual(st, 200)
            print(f"  /health on {via}: worst of 20 {1000 * worst:.1f} ms")
            self.assertLess(worst, 0.1)
            self.assertFalse(body["cluster"]["store"], body)
        # The quorum back: creations work again.
        self.etcd.start_member(1)
        self.etcd.start_member(2)
        self.etcd.wait_healthy()
        end = time.monotonic() + 20
        while True:
            st, _, body = self.nodes["b"].post("/exec", body={"nodeSelector": {"zone": "two"}},
                                               timeout=60)
            if st == 201 or time.monotonic() > end:
                break
            time.sleep(0.3)
        self.assertEqual(st, 201, body)
        self.addCleanup(self.destroy, body["id"])
        st, _, m = self.nodes["a"].request("GET", "/metrics", headers={"Accept": "text/plain"})
        text = m.decode()
        self.assertIn('cluster_nodes{state="up"} 3', text)
        self.assertIn("cluster_store_up 1", text)
        self.assertIn('cluster_forwarded_total{kind="request",result="success"}', text)


class EtcdAuthenticationTest(unittest.TestCase):
    """etcd with authentication on: a node with its user and password file works; one with a
    wrong password does not start, and says why."""

    def setUp(self):
        import base64
        import urllib.request
        self.etcd = cluster.Etcd(1).start()
        self.addCleanup(self.etcd.stop)
        url = self.etcd.endpoints

        def call(path, body, token=None):
            req = urllib.request.Request(url + path, data=json.dumps(body).encode(),
                                         method="POST")
            if token:
                req.add_header("Authorization", token)
            with urllib.request.urlopen(req, timeout=5) as r:
                return json.loads(r.read())

        prefix = base64.b64encode(b"/agent-sandbox/").decode()
        end = base64.b64encode(b"/agent-sandbox0").decode()
        call("/v3/auth/user/add", {"name": "root", "password": "rootpw"})
        call("/v3/auth/role/add", {"name": "root"})
        call("/v3/auth/user/grant", {"user": "root", "role": "root"})
        call("/v3/auth/role/add", {"name": "sandboxd"})
        call("/v3/auth/role/grant", {"name": "sandboxd", "perm": {
            "permType": "READWRITE", "key": prefix, "range_end": end}})
        call("/v3/auth/user/add", {"name": "sandboxd", "password": "s3cret"})
        call("/v3/auth/user/grant", {"user": "sandboxd", "role": "sandboxd"})
        call("/v3/auth/enable", {})
        self.tmp = tempfile.mkdtemp(prefix="etcd-auth-")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def password_file(self, text):
        path = os.path.join(self.tmp, "pw-" + text)
        with open(path, "w") as f:
            f.write(text + "\n")
        os.chmod(path, 0o600)
        return path

    def test_a_node_authenticates_to_etcd(self):
        d = cluster.node(self.etcd, "a", env={
            "SANDBOX_ETCD_USER": "sandboxd",
            "SANDBOX_ETCD_PASSWORD_FILE": self.password_file("s3cret")})
        self.addCleanup(d.stop, check=False)
        self.assertTrue(d.admin_key)
        st, _, s = d.post("/exec", body={})
        self.assertEqual(st, 201, s)
        st, _, body = d.delete(f"/exec/{s['id']}")
        self.assertEqual(st, 200, body)
        d.stop()
        with self.assertRaises(AssertionError) as cm:
            cluster.node(self.etcd, "b", env={
                "SANDBOX_ETCD_USER": "sandboxd",
                "SANDBOX_ETCD_PASSWORD_FILE": self.password_file("wrong")})
        self.assertIn("authentication failed", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
