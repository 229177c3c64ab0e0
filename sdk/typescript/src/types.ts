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
  state: "creating" | "ready" | "destroying" | "failed";
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
  resources?: { memoryBytes?: number; cpuQuotaUs?: number; diskBytes?: number; pidsMax?: number };
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
}
