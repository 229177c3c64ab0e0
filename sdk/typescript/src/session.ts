import type { Sandbox } from "./client.js";
import { SandboxError } from "./errors.js";
import type {
  ExecOptions,
  ExecResult,
  FileStat,
  ListFilesResult,
  ReadFileResult,
  SessionInfo,
  StreamEvent,
  WriteFileResult,
} from "./types.js";

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
          if (line) yield JSON.parse(line) as StreamEvent;
        }
      }
      const rest = (buf + decoder.decode()).trim();
      if (rest) yield JSON.parse(rest) as StreamEvent;
    } finally {
      reader.releaseLock();
      await res.body.cancel().catch(() => undefined);
    }
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
