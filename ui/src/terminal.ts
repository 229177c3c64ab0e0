// A live terminal: xterm.js over GET /exec/:id/terminal. A browser cannot put the key in a
// WebSocket's headers and the key never goes into a URL, so each connection first asks for
// a one-use ticket (POST /exec/:id/tickets, with the key in its header) and presents that.
import { FitAddon } from "@xterm/addon-fit";
import { Terminal } from "@xterm/xterm";
import { api, sessionPath } from "./api";

export interface TerminalHandle {
  // Closes the socket (its process ends with it) and removes the terminal; resolves once
  // the server has the socket closed, so that the session has no operation of it in flight.
  close(): Promise<void>;
}

interface Ticket {
  ticket: string;
  expiresInMs: number;
}

export function openTerminal(container: HTMLElement, sessionId: string, status: (text: string, ok: boolean) => void): TerminalHandle {
  const term = new Terminal({ cursorBlink: true, fontSize: 14, scrollback: 5000, fontFamily: "ui-monospace, Menlo, Consolas, monospace" });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(container);
  fit.fit();
  const enc = new TextEncoder();
  let ws: WebSocket | null = null;
  let closed = false;
  // The server's last error on this socket ({"type": "error"}), said again when the socket
  // closes: the close frame's reason only points to it.
  let lastError = "";

  const resized = new ResizeObserver(() => {
    try {
      fit.fit();
    } catch {
      // not laid out yet
    }
  });
  resized.observe(container);

  term.onData((d) => {
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(enc.encode(d));
  });
  term.onResize(({ rows, cols }) => {
    if (ws && ws.readyState === WebSocket.OPEN) ws.send(JSON.stringify({ type: "resize", rows, cols }));
  });

  async function connect(): Promise<void> {
    status("connecting…", true);
    let t: Ticket;
    try {
      t = await api<Ticket>("POST", sessionPath(sessionId, "/tickets"), { json: {} });
    } catch (err) {
      status(`cannot open a terminal: ${err instanceof Error ? err.message : String(err)}`, false);
      return;
    }
    if (closed) return;
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    const q = new URLSearchParams({ ticket: t.ticket, rows: String(term.rows), cols: String(term.cols) });
    const sock = new WebSocket(`${proto}//${location.host}${sessionPath(sessionId, "/terminal")}?${q}`);
    sock.binaryType = "arraybuffer";
    ws = sock;
    lastError = "";
    sock.onopen = () => term.focus();
    sock.onmessage = (ev: MessageEvent) => {
      if (ev.data instanceof ArrayBuffer) {
        term.write(new Uint8Array(ev.data));
        return;
      }
      let m: { type?: string; pid?: number; exitCode?: number | null; signal?: string; error?: string; data?: string };
      try {
        m = JSON.parse(String(ev.data));
      } catch {
        return;
      }
      if (m.type === "started") status(`running (pid ${m.pid})`, true);
      else if (m.type === "exit") status(`exited${m.signal ? ` by ${m.signal}` : ` with status ${m.exitCode}`}`, true);
      else if (m.type === "stderr" && m.data) term.write(m.data);
      else if (m.type === "error") {
        lastError = m.error ?? "";
        status(`error: ${lastError}`, false);
      }
    };
    sock.onclose = (ev: CloseEvent) => {
      if (ws === sock) ws = null;
      if (closed) return;
      const why = lastError || ev.reason;
      status(`closed (${ev.code}${why ? `: ${why}` : ""}): press Enter to reconnect`, ev.code === 1000);
    };
  }

  // After the socket closed, Enter opens a new one.
  term.onKey(({ domEvent }) => {
    if (!ws && !closed && domEvent.key === "Enter") void connect();
  });

  void connect();
  return {
    close(): Promise<void> {
      closed = true;
      resized.disconnect();
      const sock = ws;
      ws = null;
      term.dispose();
      if (!sock || sock.readyState === WebSocket.CLOSED) return Promise.resolve();
      return new Promise((resolve) => {
        sock.addEventListener("close", () => resolve());
        sock.close(1000);
      });
    },
  };
}
