/** Shapes of sandboxd's replies, as the server sends them. */

export type StreamName = "stdout" | "stderr";

export interface OutputChunk {
  stream: StreamName;
  data: string;
  /** Milliseconds since the epoch when the chunk arrived. */
  ts: number;
}

export interface ExecResult {
  execId: string;
  exitCode: number | null;
  signal?: string;
  /** Milliseconds. */
  duration: number;
  output: OutputChunk[];
  timedOut?: boolean;
  cancelled?: boolean;
  truncated?: boolean;
  outputLimit?: number;
  oomKilled?: boolean;
  error?: string;
}

export type StreamEvent =
  | { type: "start"; execId: string; sessionId: string }
  | { type: "stream"; stream: StreamName; data: string; ts: number }
  | ({ type: "result" } & Omit<ExecResult, "output">)
  | { type: "error"; error: string; execId?: string };

export interface ExecOptions {
  args?: string[];
  env?: Record<string, string>;
  cwd?: string;
  /** Milliseconds; no limit when absent. */
  timeout?: number;
  stdin?: string;
  /** "root": the sandbox's own root (a jail's user-namespace root); default the command user. */
  user?: "user" | "root";
  /** Aborting cancels the command (streaming) or stops waiting (buffered). */
  signal?: AbortSignal;
}

export interface FileEntry {
  path: string;
  name: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  mode: number;
  mtime: number;
}

/** A path as `stat` describes it (a symlink itself, not what it points to). */
export interface FileStat {
  path: string;
  type: "file" | "dir" | "symlink" | "other";
  size: number;
  mode: number;
  mtime: number;
}

export interface ListFilesResult {
  path: string;
  files: FileEntry[];
  truncated: boolean;
}

export interface ReadFileResult {
  path: string;
  content: string;
  encoding: "utf8" | "base64";
  size: number;
}

export interface WriteFileResult {
  success: boolean;
  path: string;
  size: number;
}

export interface TemplateManifest {
  name: string;
  displayName?: string;
  version?: string;
  description?: string;
  tools?: string[];
  baseImage?: string;
  resources?: { memSizeMib?: number; vcpuCount?: number };
  createdAt?: string;
}

export interface SessionInfo {
  id: string;
  template: string;
  state: "creating" | "ready" | "destroying" | "failed" | "paused";
  /** When it was paused (ISO 8601), while it is. */
  pausedAt?: string;
  /** Who paused it, while it is paused: a client, or its own timeout (onTimeout "pause"). */
  pausedBy?: "client" | "timeout";
  /** How it is paused, while it is: frozen, or hibernated (its processes were ended). */
  pauseMode?: "freeze" | "hibernate";
  /** While paused: whether its processes carry on after the resume. */
  processesKept?: boolean;
  /** While hibernated: what a resume gives back. */
  note?: string;
  /** What its idle timeout does (CreateOptions.onTimeout). */
  onTimeout?: "destroy" | "pause";
  createdAt: string;
  lastActivity: string;
  idleMs: number;
  idleTimeout: number;
  running: number;
  error?: string;
  /** The limits the session's sandbox runs with: from its request, else its template's
   * manifest, else the server's defaults. vcpuCount with a VM driver only. */
  limits?: {
    memoryBytes: number;
    cpuQuotaUs: number;
    cpuPeriodUs: number;
    diskBytes: number;
    pidsMax: number;
    vcpuCount?: number;
  };
  /** What the session asked for at creation, when it did. */
  resources?: {
    memoryBytes?: number;
    cpuQuotaUs?: number;
    diskBytes?: number;
    pidsMax?: number;
    storage?: "disk" | "tmpfs";
  };
  /** Where its writable files live (docs/storage.md). */
  storage?: "disk" | "tmpfs";
  /** Its disk's use, with "disk" storage. */
  disk?: { usedBytes: number; sizeBytes: number };
  /** The persistent volumes it mounts. */
  volumes?: VolumeMount[];
  /** The snapshot it was made from (CreateOptions.snapshot). */
  snapshot?: string;
}

/** A persistent volume to mount at a session's creation (docs/storage.md). */
export interface VolumeMount {
  name: string;
  /** An absolute path inside the sandbox. */
  path: string;
  /** Any number of sessions may mount a volume read-only; one at a time read-write. */
  readOnly?: boolean;
}

/** A persistent volume, as the server describes it. */
export interface VolumeInfo {
  name: string;
  sizeBytes: number;
  /** What its sparse image holds on the host. */
  allocatedBytes: number;
  state: "creating" | "ready";
  createdAt: string;
  mounts: { sessionId: string; readOnly: boolean }[];
  /** For an admin key, whose it is. */
  owner?: string;
}

/** A named snapshot of a session (Session.snapshot), from which new sessions start
 * (CreateOptions.snapshot). */
export interface SnapshotInfo {
  name: string;
  template: string;
  driver: "jail" | "qemu";
  /** The session it was taken from. */
  session: string;
  sizeBytes: number;
  createdAt: string;
  /** When the server deletes it (ISO 8601). */
  expiresAt: string;
  /** qemu: the VM's memory is kept, so processes carry on in the sessions made from it;
   * jail: only the files are. */
  processesKept: boolean;
  /** For an admin key, whose it is. */
  owner?: string;
}

export interface HealthInfo {
  status: string;
  uptime: number;
  version: string;
  driver: string;
  isolation: string;
  sessions?: number;
  warmPool?: number;
}

export interface SandboxOptions {
  /** Default: process.env.SANDBOX_URL or http://127.0.0.1:3000. */
  baseUrl?: string;
  /** Default: process.env.SANDBOX_API_KEY. */
  apiKey?: string;
  /** A fetch implementation (default: the global one). */
  fetch?: typeof fetch;
}

export interface CreateOptions {
  template?: string;
  id?: string;
  env?: Record<string, string>;
  /** Seconds of inactivity before the server reaps the session. */
  idleTimeout?: number;
  /** What the idle timeout does: "destroy" (the default) or "pause" (resume() brings the
   * session back as it was; docs/lifecycle.md). */
  onTimeout?: "destroy" | "pause";
  /** The session's own limits (each may only stay within the server's caps). */
  resources?: { memoryBytes?: number; cpuQuotaUs?: number; diskBytes?: number; pidsMax?: number };
  /** jail: "disk" (a writable root and /workspace on a disk of diskBytes) or "tmpfs"
   * (docs/storage.md); default: the server's SANDBOX_STORAGE. */
  storage?: "disk" | "tmpfs";
  /** Persistent volumes to mount (jail, disk storage). */
  volumes?: VolumeMount[];
  /** Start from this snapshot (Session.snapshot): its files, and on qemu its processes. Its
   * template, resources and storage are the snapshot's: with it, template, resources,
   * storage and volumes are refused (400). */
  snapshot?: string;
}

/** A background process, as the server describes it. */
export interface ProcessInfo {
  pid: number;
  tag: string | null;
  command: string;
  argv: string[];
  cwd: string;
  envKeys: string[];
  pty: boolean;
  state: "running" | "exited";
  /** Milliseconds since the epoch. */
  startedAt: number;
  endedAt: number | null;
  exitCode: number | null;
  signal: string | null;
  durationMs: number;
  timedOut: boolean;
  /** Bytes of output it produced, and the first of them still kept for a replay. */
  outputBytes: number;
  replayFrom: number;
}

export interface StartProcessOptions {
  args?: string[];
  /** A name for it, unique among the session's running processes (1 to 64 of [A-Za-z0-9._:-]). */
  tag?: string;
  cwd?: string;
  env?: Record<string, string>;
  /** Keep its stdin open for sendStdin. */
  stdin?: boolean;
  /** Run it on a terminal (true: 24 x 80). */
  pty?: boolean | { rows?: number; cols?: number };
  /** Its limit in milliseconds (absent or 0: none). */
  timeout?: number;
  /** The size of its replay buffer. */
  replayBytes?: number;
  template?: string;
  /** "root": the sandbox's own root; default the command user. */
  user?: "user" | "root";
}

export interface AttachOptions {
  /** Bytes of the output already produced to begin with (default: all that is kept). */
  replay?: number;
  /** Until the process ends (default); false: only what is kept now. */
  follow?: boolean;
  /** Aborting it ends the attach, not the process. */
  signal?: AbortSignal;
}

/** One event of an attach: its start, output, output lost to this reader, then the end. */
export type ProcessEvent =
  | { type: "start"; pid: number }
  | { type: "stream"; stream: "stdout" | "stderr"; data: string; ts: number }
  | { type: "gap"; bytes: number }
  | { type: "result"; process: ProcessInfo }
  | { type: "error"; error: string; status: number }
  | { type: "timeout" };
/** A change under a watched directory (Session.watch). Paths are relative to the workspace. */
export type WatchEvent =
  | { type: "create" | "write" | "remove" | "chmod"; path: string; dir: boolean }
  | { type: "rename"; path: string; dir: boolean; from?: string }
  | { type: "overflow" };

export interface WatchOptions {
  /** The directories below it too, including those made later. */
  recursive?: boolean;
  /** Only these kinds (default: all). */
  events?: Array<"create" | "write" | "remove" | "rename" | "chmod">;
  /** End the watch after this many milliseconds (default: when closed). */
  timeoutMs?: number;
  signal?: AbortSignal;
}

/** How a watch ended (the stream's last line). */
export interface WatchEnd {
  events: number;
  overflows: number;
  timedOut: boolean;
  gone: boolean;
}

/** A TCP port listening in a session's sandbox, and the URLs that reach it through the daemon. */
export interface PortInfo {
  port: number;
  /** The address it listens on inside the sandbox. */
  address: string;
  /** Reachable without a key or the preview token. */
  public: boolean;
  /** The host form: http://PORT-NAME.DOMAIN:.../ */
  url: string;
  /** The path form, on the daemon's address: /exec/NAME/ports/PORT/ */
  pathUrl: string;
}

/** A session's preview: its name, the URL templates (with "{port}") of both forms, the ports
 * made public, and the token that opens every port of it (absent in setPortPublic's answer). */
export interface PreviewInfo {
  name: string;
  url: string;
  pathUrl: string;
  publicPorts: number[];
  token?: string;
}

export interface PreviewUrlOptions {
  /** "host" (default): http://PORT-NAME.DOMAIN:.../; "path": /exec/NAME/ports/PORT/ on baseUrl. */
  form?: "host" | "path";
  /** Append ?sandbox_token=..., so that a browser without a key can open it. */
  token?: boolean;
}
