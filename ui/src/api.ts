// The dashboard is a client of the public API, with the key it was given: kept in
// sessionStorage (gone with the tab), sent in the Authorization header, never in a URL.

const STORE = "agent-sandbox.key";

export function getKey(): string | null {
  return sessionStorage.getItem(STORE);
}
export function setKey(key: string): void {
  sessionStorage.setItem(STORE, key);
}
export function clearKey(): void {
  sessionStorage.removeItem(STORE);
}

export class ApiError extends Error {
  constructor(
    public status: number,
    message: string,
    public body: unknown,
  ) {
    super(message);
  }
}

// Called when the server says the key is not (or no longer) valid.
let onUnauthorized: (msg: string) => void = () => {};
export function setUnauthorizedHandler(fn: (msg: string) => void): void {
  onUnauthorized = fn;
}

export interface RequestOptions {
  json?: unknown;
  body?: BodyInit;
  accept?: string;
  query?: Record<string, string | undefined>;
  // Do not treat a 401 as the end of the sign-in (the sign-in form's own probe).
  probe?: boolean;
}

export function url(path: string, query?: Record<string, string | undefined>): string {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(query ?? {})) if (v !== undefined) q.set(k, v);
  const s = q.toString();
  return s ? `${path}?${s}` : path;
}

export async function request(method: string, path: string, opts: RequestOptions = {}): Promise<Response> {
  const headers: Record<string, string> = { Accept: opts.accept ?? "application/json" };
  const key = getKey();
  if (key) headers.Authorization = `Bearer ${key}`;
  let body = opts.body;
  if (opts.json !== undefined) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(opts.json);
  }
  const res = await fetch(url(path, opts.query), {
    method,
    headers,
    body,
    credentials: "omit",
    cache: "no-store",
    redirect: "error",
    referrerPolicy: "no-referrer",
  });
  if (res.ok) return res;
  let parsed: unknown = null;
  let msg = `${res.status} ${res.statusText}`;
  try {
    parsed = await res.json();
    const e = (parsed as { error?: unknown }).error;
    if (typeof e === "string") msg = e;
  } catch {
    // not JSON: keep the status line
  }
  if (res.status === 401 && !opts.probe) onUnauthorized(msg);
  throw new ApiError(res.status, msg, parsed);
}

export async function api<T>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
  const res = await request(method, path, opts);
  return (await res.json()) as T;
}

export function sessionPath(id: string, rest = ""): string {
  return `/exec/${encodeURIComponent(id)}${rest}`;
}

// What the signed-in key may do, found by asking (there is no route that says).
export interface Caps {
  exec: boolean;
  admin: boolean;
  metrics: boolean;
}

async function allowed(path: string): Promise<boolean> {
  try {
    await request("GET", path, { probe: true, accept: "*/*" });
    return true;
  } catch (e) {
    if (e instanceof ApiError && e.status === 403) return false;
    throw e;
  }
}

export async function probeCaps(): Promise<Caps> {
  const [exec, admin, metrics] = await Promise.all([allowed("/exec/templates"), allowed("/admin/keys"), allowed("/metrics")]);
  return { exec, admin, metrics };
}

export interface Limits {
  memoryBytes?: number;
  cpuQuotaUs?: number;
  cpuPeriodUs?: number;
  diskBytes?: number;
  pidsMax?: number;
  vcpuCount?: number;
}

export interface Session {
  id: string;
  template: string;
  state: string;
  idleMs: number;
  idleTimeout: number;
  running: number;
  createdAt: string;
  lastActivity: string;
  network: string;
  limits?: Limits;
  storage?: string;
  disk?: { usedBytes: number; sizeBytes: number };
  owner?: string;
  error?: string;
  previewName?: string;
  // A paused session's: how (frozen, or hibernated), since when, by whom.
  pauseMode?: "freeze" | "hibernate";
  pausedAt?: string;
  pausedBy?: string;
  processesKept?: boolean;
  note?: string;
}

export interface Health {
  status: string;
  version: string;
  driver: string;
  isolation: string;
}
