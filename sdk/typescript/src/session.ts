import type { Sandbox } from "./client.js";
import { SandboxError } from "./errors.js";
import type {
  ExecOptions,
  ExecResult,
  AttachOptions,
  FileStat,
  ListFilesResult,
  PortInfo,
  PreviewInfo,
  PreviewUrlOptions,
  ProcessEvent,
  ProcessInfo,
  StartProcessOptions,
  ReadFileResult,
  SessionInfo,
  SnapshotInfo,
  StreamEvent,
  WatchEnd,
  WatchEvent,
  WatchOptions,
  WriteFileResult,
} from "./types.js";

/** The NDJSON objects of a response body, as they arrive. */
async function* ndjsonLines(body: ReadableStream<Uint8Array>): AsyncGenerator<Record<string, unknown>> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (line) yield JSON.parse(line) as Record<string, unknown>;
      }
    }
    const rest = (buf + decoder.decode()).trim();
    if (rest) yield JSON.parse(rest) as Record<string, unknown>;
  } finally {
    reader.releaseLock();
    await body.cancel().catch(() => undefined);
  }
}

/**
 * A watch in place (Session.watch): iterate it for the changes; close() ends it (so does
 * leaving a for-await loop early). `end` says how it ended once the iteration is over.
 */
export class Watch implements AsyncIterable<WatchEvent> {
  /** How many directories it covers. */
  readonly watches: number;
  end?: WatchEnd;
  constructor(
    private readonly lines: AsyncGenerator<Record<string, unknown>>,
    private readonly abort: AbortController,
    watches: number,
  ) {
    this.watches = watches;
  }

  async *[Symbol.asyncIterator](): AsyncGenerator<WatchEvent> {
    try {
      for (;;) {
        const { done, value } = await this.lines.next();
        if (done) return;
        if (value.type === "end") {
          this.end = value as unknown as WatchEnd;
          return;
        }
        if (value.type === "error")
          throw new SandboxError(Number(value.status) || 502, String(value.error), value);
        yield value as unknown as WatchEvent;
      }
    } finally {
      await this.close();
    }
  }

  /** Ends the watch (in the sandbox too). */
  async close(): Promise<void> {
    this.abort.abort();
    await this.lines.return(undefined).catch(() => undefined);
  }
}

/** Interpreters for runCode, by template. */
const INTERPRETERS: Record<string, [string, string]> = {
  python: ["python3", "-c"],
  node: ["node", "-e"],
  go: ["sh", "-c"],
  base: ["sh", "-c"],
};

function toBase64(bytes: Uint8Array): string {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x8000)
    s += String.fromCharCode(...bytes.subarray(i, i + 0x8000));
  return btoa(s);
}

function fromBase64(s: string): Uint8Array {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

/** The JSON objects of an NDJSON reply, as they arrive. */
async function* ndjson<T>(res: Response): AsyncGenerator<T> {
  if (!res.body) throw new SandboxError(0, "empty stream");
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      buf += decoder.decode(value, { stream: true });
      let nl: number;
      while ((nl = buf.indexOf("\n")) >= 0) {
        const line = buf.slice(0, nl).trim();
        buf = buf.slice(nl + 1);
        if (line) yield JSON.parse(line) as T;
      }
    }
    const rest = (buf + decoder.decode()).trim();
    if (rest) yield JSON.parse(rest) as T;
  } finally {
    reader.releaseLock();
    await res.body.cancel().catch(() => undefined);
  }
}

/** One sandbox. */
export class Session {
  private knownTemplate?: string;

  constructor(
    readonly client: Sandbox,
    readonly id: string,
    template?: string,
  ) {
    this.knownTemplate = template;
  }

  /** The template the session was made with, when this handle knows it. */
  get template(): string | undefined {
    return this.knownTemplate;
  }

  /**
   * The session's template: the one this handle was made with, else the daemon's answer for
   * this session (creating it with the daemon's default template when it does not exist yet,
   * as its first command would).
   */
  async resolveTemplate(): Promise<string> {
    if (this.knownTemplate) return this.knownTemplate;
    let info = (await this.client.sessions()).find((s) => s.id === this.id);
    if (!info) {
      try {
        info = await this.client.json<SessionInfo>("POST", "/exec/", { id: this.id });
      } catch (e) {
        // Made by someone else meanwhile: ask again.
        if (!(e instanceof SandboxError) || e.status !== 409) throw e;
        info = (await this.client.sessions()).find((s) => s.id === this.id);
      }
    }
    if (!info?.template) throw new SandboxError(0, `cannot tell the template of session ${this.id}`);
    this.knownTemplate = info.template;
    return info.template;
  }

  private path(suffix: string): string {
    return `/exec/${encodeURIComponent(this.id)}${suffix}`;
  }

  private execBody(command: string, opts: ExecOptions): Record<string, unknown> {
    const body: Record<string, unknown> = { command };
    if (opts.args) body.args = opts.args;
    if (this.template) body.template = this.template;
    if (opts.env) body.env = opts.env;
    if (opts.cwd) body.cwd = opts.cwd;
    if (opts.timeout !== undefined) body.timeout = opts.timeout;
    if (opts.stdin !== undefined) body.stdin = opts.stdin;
    if (opts.user !== undefined) body.user = opts.user;
    return body;
  }

  /** Runs a command and waits for its result. */
  async exec(command: string, opts: ExecOptions = {}): Promise<ExecResult> {
    return this.client.json<ExecResult>("POST", this.path("/execute"), this.execBody(command, opts), opts.signal);
  }

  /** Runs a shell command line. */
  async run(commandLine: string, opts: Omit<ExecOptions, "args"> = {}): Promise<ExecResult> {
    return this.exec("/bin/sh", { ...opts, args: ["-c", commandLine] });
  }

  /** Runs code with the interpreter of `language` or of the session's template (python3 -c, node -e, sh -c). */
  async runCode(code: string, opts: Omit<ExecOptions, "args"> & { language?: string } = {}): Promise<ExecResult> {
    const { language, ...execOpts } = opts;
    const lang = language ?? (await this.resolveTemplate());
    const interp = INTERPRETERS[lang];
    if (!interp) throw new SandboxError(0, `no interpreter known for template ${lang}`);
    return this.exec(interp[0], { ...execOpts, args: [interp[1], code] });
  }

  /** Runs a command, yielding its output as it arrives; aborting opts.signal cancels it. */
  async *execStream(command: string, opts: ExecOptions = {}): AsyncGenerator<StreamEvent> {
    const res = await this.client.request("POST", this.path("/execute"), this.execBody(command, opts), {
      accept: "application/x-ndjson",
      signal: opts.signal,
    });
    yield* ndjson<StreamEvent>(res);
  }

  /**
   * Watches a directory for changes. Resolves once the watch is in place (every change after
   * that is reported); rejects with a SandboxError for a bad path (400), a missing directory
   * (404), a tree too large (413) or the watch quota (429).
   */
  async watch(path: string, opts: WatchOptions = {}): Promise<Watch> {
    const q = new URLSearchParams({ path });
    if (opts.recursive) q.set("recursive", "true");
    if (opts.events) q.set("events", opts.events.join(","));
    if (opts.timeoutMs !== undefined) q.set("timeoutMs", String(opts.timeoutMs));
    const abort = new AbortController();
    opts.signal?.addEventListener("abort", () => abort.abort(), { once: true });
    const res = await this.client.request("GET", this.path(`/watch?${q}`), undefined, {
      accept: "application/x-ndjson",
      signal: abort.signal,
    });
    if (!res.body) throw new SandboxError(0, "empty stream");
    const lines = ndjsonLines(res.body);
    const first = await lines.next();
    if (first.done || first.value.type !== "ready") {
      abort.abort();
      throw new SandboxError(502, "the watch stream did not begin with its ready line");
    }
    return new Watch(lines, abort, Number(first.value.watches));
  }

  /** Cancels a running command by the execId of its start event or result. */
  async cancel(execId: string): Promise<void> {
    await this.client.json("POST", this.path("/cancel"), { execId });
  }

  /** Writes a file; bytes are sent as base64, strings as UTF-8 text. */
  async writeFile(path: string, content: string | Uint8Array, opts: { mode?: number } = {}): Promise<WriteFileResult> {
    const body: Record<string, unknown> =
      typeof content === "string"
        ? { path, content }
        : { path, content: toBase64(content), encoding: "base64" };
    if (opts.mode !== undefined) body.mode = opts.mode;
    if (this.template) body.template = this.template;
    return this.client.json<WriteFileResult>("POST", this.path("/write"), body);
  }

  /** Reads a file. `content` is text unless the file is not UTF-8 (then encoding is base64). */
  async readFile(path: string): Promise<ReadFileResult> {
    return this.client.json<ReadFileResult>("GET", this.path(`/read?path=${encodeURIComponent(path)}`));
  }

  /** Reads a file's bytes exactly. */
  async readBytes(path: string): Promise<Uint8Array> {
    const r = await this.client.json<ReadFileResult>(
      "GET",
      this.path(`/read?path=${encodeURIComponent(path)}&encoding=base64`),
    );
    return fromBase64(r.content);
  }

  async listFiles(path = ".", opts: { recursive?: boolean } = {}): Promise<ListFilesResult> {
    const q = `path=${encodeURIComponent(path)}&recursive=${opts.recursive ? "true" : "false"}`;
    return this.client.json<ListFilesResult>("GET", this.path(`/files?${q}`));
  }

  /** Describes a path without following it; a SandboxError with status 404 when nothing is there. */
  async stat(path: string): Promise<FileStat> {
    return this.client.json<FileStat>("GET", this.path(`/stat?path=${encodeURIComponent(path)}`));
  }

  /** Whether something (a file, directory or symlink) is at `path`. */
  async exists(path: string): Promise<boolean> {
    try {
      await this.stat(path);
      return true;
    } catch (e) {
      if (e instanceof SandboxError && e.status === 404) return false;
      throw e;
    }
  }

  /** Makes a directory, with its missing parents unless `parents` is false. */
  async mkdir(path: string, opts: { parents?: boolean } = {}): Promise<void> {
    const body: Record<string, unknown> = { path, parents: opts.parents !== false };
    if (this.template) body.template = this.template;
    await this.client.json("POST", this.path("/mkdir"), body);
  }

  /** Removes a file, a symlink or an empty directory; a whole tree with `recursive`. */
  async remove(path: string, opts: { recursive?: boolean } = {}): Promise<void> {
    await this.client.json("POST", this.path("/remove"), { path, recursive: !!opts.recursive });
  }

  /** Moves or renames within the workspace; replaces the destination unless `overwrite` is false. */
  async move(from: string, to: string, opts: { overwrite?: boolean } = {}): Promise<void> {
    await this.client.json("POST", this.path("/move"), { from, to, overwrite: opts.overwrite !== false });
  }

  // Background processes: they run on after the request that started them, named by pid or
  // tag (ref); their output is kept in the sandbox for any number of attaches.

  private proc(ref: number | string, suffix = ""): string {
    return this.path(`/processes/${encodeURIComponent(String(ref))}${suffix}`);
  }

  /** Starts a background process and returns it. */
  async startProcess(command: string, opts: StartProcessOptions = {}): Promise<ProcessInfo> {
    const body = this.execBody(command, {
      args: opts.args,
      env: opts.env,
      cwd: opts.cwd,
      timeout: opts.timeout,
      user: opts.user,
    });
    if (opts.template) body.template = opts.template;
    if (opts.tag !== undefined) body.tag = opts.tag;
    if (opts.stdin) body.stdin = true;
    if (opts.pty !== undefined) body.pty = opts.pty;
    if (opts.replayBytes !== undefined) body.replayBytes = opts.replayBytes;
    return this.client.json<ProcessInfo>("POST", this.path("/processes"), body);
  }

  /** The session's processes, running and recently ended. */
  async processes(): Promise<ProcessInfo[]> {
    return (await this.client.json<{ processes: ProcessInfo[] }>("GET", this.path("/processes"))).processes;
  }

  /** One process, by pid or tag (a SandboxError with status 404 when there is none). */
  async process(ref: number | string): Promise<ProcessInfo> {
    return this.client.json<ProcessInfo>("GET", this.proc(ref));
  }

  /** A process's output events as they come: start, stream and gap, ending with result (or
   * error). Leaving the loop or aborting opts.signal ends the attach, not the process. */
  async *attach(ref: number | string, opts: AttachOptions = {}): AsyncGenerator<ProcessEvent> {
    let q = `follow=${opts.follow === false ? "false" : "true"}`;
    if (opts.replay !== undefined) q += `&replay=${Math.trunc(opts.replay)}`;
    const res = await this.client.request("GET", this.proc(ref, `/output?${q}`), undefined, {
      accept: "application/x-ndjson",
      signal: opts.signal,
    });
    yield* ndjson<ProcessEvent>(res);
  }

  /** Waits for a process to end and returns it; a SandboxError with status 408 when it runs
   * beyond opts.timeout milliseconds (absent: waits as long as it runs). */
  async waitProcess(ref: number | string, opts: { timeout?: number; signal?: AbortSignal } = {}): Promise<ProcessInfo> {
    const body = opts.timeout === undefined ? {} : { timeout: opts.timeout };
    return this.client.json<ProcessInfo>("POST", this.proc(ref, "/wait"), body, opts.signal);
  }

  /** Sends a signal ("TERM", "INT"... or a number) to the process's group. */
  async signalProcess(ref: number | string, signal: string | number): Promise<void> {
    await this.client.json("POST", this.proc(ref, "/signal"), { signal });
  }

  /** Sends SIGKILL to the process's group. */
  async killProcess(ref: number | string): Promise<void> {
    await this.client.json("DELETE", this.proc(ref));
  }

  /** Writes to the stdin of a process started with `stdin` (or on a terminal), then closes it
   * with opts.close; bytes go raw. */
  async sendStdin(
    ref: number | string,
    data: string | Uint8Array,
    opts: { close?: boolean } = {},
  ): Promise<{ bytes: number; closed: boolean }> {
    const close = !!opts.close;
    if (typeof data === "string")
      return this.client.json("POST", this.proc(ref, "/stdin"), { data, close });
    return this.client.json("POST", this.proc(ref, `/stdin?close=${close}`), data);
  }

  /** Closes the process's stdin (a terminal gets ^D). */
  async closeStdin(ref: number | string): Promise<{ bytes: number; closed: boolean }> {
    return this.client.json("POST", this.proc(ref, "/stdin"), { close: true });
  }

  /** Resizes the terminal of a process started with `pty`. */
  async resize(ref: number | string, rows: number, cols: number): Promise<void> {
    await this.client.json("POST", this.proc(ref, "/resize"), { rows, cols });
  }

  // Servers inside the sandbox, reached through the daemon (previews).

  /** The TCP ports listening in the sandbox, with their URLs (at most 1024). */
  async ports(): Promise<PortInfo[]> {
    return (await this.client.json<{ ports: PortInfo[] }>("GET", this.path("/ports"))).ports;
  }

  /** The session's preview: name, URL templates, public ports and token. */
  async preview(): Promise<PreviewInfo> {
    return this.client.json<PreviewInfo>("GET", this.path("/preview"));
  }

  /** The URL of `port` in the host form (default) or the path form on baseUrl; with
   * `token`, with ?sandbox_token=... for a browser without a key. Rejects with a
   * SandboxError (status 0) for a port outside 1-65535 or an unknown form. */
  async previewUrl(port: number, opts: PreviewUrlOptions = {}): Promise<string> {
    if (!Number.isInteger(port) || port < 1 || port > 65535)
      throw new SandboxError(0, `a port is a number from 1 to 65535, not ${String(port)}`);
    const form = opts.form ?? "host";
    if (form !== "host" && form !== "path") throw new SandboxError(0, `form is "host" or "path", not ${String(form)}`);
    const p = await this.preview();
    let url = (form === "host" ? p.url : this.client.baseUrl + p.pathUrl).split("{port}").join(String(port));
    if (opts.token) url += `${url.includes("?") ? "&" : "?"}sandbox_token=${encodeURIComponent(p.token ?? "")}`;
    return url;
  }

  /** A new preview token; every earlier one stops working at once. */
  async rotatePreviewToken(): Promise<PreviewInfo> {
    return this.client.json<PreviewInfo>("POST", this.path("/preview/token"));
  }

  /** Makes `port` reachable by anyone (true) or by keys and the token only again (false). A
   * SandboxError 400 for a port outside 1-65535, 409 past the most public ports. */
  async setPortPublic(port: number, isPublic = true): Promise<PreviewInfo> {
    return this.client.json<PreviewInfo>("POST", this.path("/preview/public"), { port, public: isPublic });
  }

  // Pause and resume (docs/lifecycle.md).

  /** Pauses the session. mode "freeze" (the default): its processes stop where they are and
   * use no CPU; memory, files and background processes are kept. mode "hibernate": its memory
   * is freed and it is kept on disk (across a server restart too): on qemu the whole VM,
   * whose processes carry on after resume(); in a jail (a session with a disk) only its
   * files: every process is ENDED, and resume() starts it afresh over them
   * ("processesKept" says which). Its commands and file operations reject with a
   * SandboxError 409 until resume(). Rejects with 409 while a command or transfer of it is in
   * flight, or when it is paused already. Resolves to the session ("state": "paused"). */
  async pause(opts: { mode?: "freeze" | "hibernate" } = {}): Promise<SessionInfo> {
    return this.client.json<SessionInfo>("POST", this.path("/pause"), opts.mode ? { mode: opts.mode } : undefined);
  }

  /** Resumes a paused session: its processes carry on from where they stopped. Resolves to
   * the session ("state": "ready"); rejects with 409 when it is not paused. */
  async resume(): Promise<SessionInfo> {
    return this.client.json<SessionInfo>("POST", this.path("/resume"));
  }

  /** Forks the running session into `count` new ones (1 by default, at most 16) from its
   * current state: on qemu the whole VM, its memory and running processes with a copy of its
   * disk; in a jail (a session with a disk) a copy of its files only, each fork's processes
   * starting afresh; each fork with its own id and network; the session runs on. Resolves to
   * the forks once every one is ready, as Sessions with their info (`fork.info`); a fork that
   * failed has `state: "failed"` and `error`. Rejects with a SandboxError: 501 where the
   * driver cannot save the session (a jail's session without a disk), 409 while the session
   * is paused or has an operation in flight, 429 beyond the key's or the server's sessions,
   * 400 for a bad count or a session with volumes. */
  async fork(opts: { count?: number } = {}): Promise<Array<{ session: Session; info: SessionInfo }>> {
    const r = await this.client.json<{ sessions: SessionInfo[] }>("POST", this.path("/fork"), {
      count: opts.count ?? 1,
    });
    return r.sessions.map((info) => ({ session: this.client.session(info.id, info.template), info }));
  }

  /** Keeps the session's current state under `name` (1 to 63 of [A-Za-z0-9._-], starting
   * with a letter or digit), for new sessions to start from (createSession({ snapshot })):
   * on qemu the whole VM, whose processes carry on in them; in a jail (a session with a disk)
   * only its files ("processesKept" says which). The session runs on. It lasts
   * opts.ttlSeconds (default and most: the server's SANDBOX_SNAPSHOT_TTL). Rejects with a
   * SandboxError: 400 for a bad name or ttl or a session with volumes, 404 for an unknown
   * session, 409 when the key has a snapshot of that name or the session is paused or busy,
   * 429 beyond the key's snapshots or their bytes, 501 where the driver cannot save the
   * session (a jail's session without a disk), 507 when the server's disk has no room. */
  async snapshot(name: string, opts: { ttlSeconds?: number } = {}): Promise<SnapshotInfo> {
    const body: Record<string, unknown> = { name };
    if (opts.ttlSeconds !== undefined) body.ttlSeconds = opts.ttlSeconds;
    return this.client.json<SnapshotInfo>("POST", this.path("/snapshot"), body);
  }

  /** The session as the server lists it (state, pausedAt, limits...), or undefined when
   * there is no such session. */
  async info(): Promise<SessionInfo | undefined> {
    return (await this.client.sessions()).find((s) => s.id === this.id);
  }

  /** The session's state now ("ready", "paused"...), or undefined when it is gone. */
  async state(): Promise<SessionInfo["state"] | undefined> {
    return (await this.info())?.state;
  }

  /** Destroys the session and its sandbox; false when there was no such session (a 200
   * with `destroyed: false`, or the 404 older servers answer). */
  async destroy(): Promise<boolean> {
    try {
      const r = await this.client.json<{ destroyed?: boolean }>("DELETE", this.path(""));
      return r.destroyed !== false;
    } catch (e) {
      if (e instanceof SandboxError && e.status === 404) return false;
      throw e;
    }
  }
}
