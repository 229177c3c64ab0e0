import { SandboxError } from "./errors.js";
import { Session } from "./session.js";
import type {
  CreateOptions,
  HealthInfo,
  SandboxOptions,
  SessionInfo,
  SnapshotInfo,
  TemplateManifest,
  VolumeInfo,
} from "./types.js";

const DEFAULT_URL = "http://127.0.0.1:3000";

function env(name: string): string | undefined {
  const p = (globalThis as { process?: { env?: Record<string, string | undefined> } }).process;
  return p?.env?.[name];
}

/** A connection to sandboxd. */
export class Sandbox {
  readonly baseUrl: string;
  readonly apiKey?: string;
  private readonly fetchImpl: typeof fetch;

  constructor(options: SandboxOptions = {}) {
    this.baseUrl = (options.baseUrl ?? env("SANDBOX_URL") ?? DEFAULT_URL).replace(/\/+$/, "");
    this.apiKey = options.apiKey ?? env("SANDBOX_API_KEY");
    this.fetchImpl = options.fetch ?? globalThis.fetch.bind(globalThis);
  }

  /** @internal Sends a request (a JSON body, or a Uint8Array as octet-stream); rejects with SandboxError on an error status. */
  async request(
    method: string,
    path: string,
    body?: unknown,
    init: { accept?: string; signal?: AbortSignal } = {},
  ): Promise<Response> {
    const headers: Record<string, string> = { Accept: init.accept ?? "application/json" };
    // Bytes go raw; anything else as JSON.
    const raw = body instanceof Uint8Array;
    if (body !== undefined) headers["Content-Type"] = raw ? "application/octet-stream" : "application/json";
    if (this.apiKey) headers["Authorization"] = `Bearer ${this.apiKey}`;
    let res: Response;
    try {
      res = await this.fetchImpl(this.baseUrl + path, {
        method,
        headers,
        body: body === undefined ? undefined : raw ? (body as unknown as BodyInit) : JSON.stringify(body),
        signal: init.signal,
      });
    } catch (e) {
      if ((e as Error).name === "AbortError") throw e;
      throw new SandboxError(0, `cannot reach sandboxd at ${this.baseUrl}: ${(e as Error).message}`);
    }
    if (!res.ok) {
      const text = await res.text();
      let parsed: unknown = undefined;
      let message = text;
      try {
        parsed = JSON.parse(text);
        const err = (parsed as { error?: unknown }).error;
        if (typeof err === "string") message = err;
      } catch {
        /* not JSON: keep the text */
      }
      throw new SandboxError(res.status, message || res.statusText, parsed);
    }
    return res;
  }

  /** @internal */
  async json<T>(method: string, path: string, body?: unknown, signal?: AbortSignal): Promise<T> {
    const res = await this.request(method, path, body, { signal });
    return (await res.json()) as T;
  }

  /** A handle on a session that the server creates on first use (the reference's behaviour). */
  create(options: { template?: string; id?: string } = {}): Session {
    const id = options.id ?? `ts-${randomId()}`;
    return new Session(this, id, options.template);
  }

  /** Creates the session now and waits until it is ready. */
  async createSession(options: CreateOptions = {}): Promise<Session> {
    const info = await this.json<SessionInfo>("POST", "/exec/", options);
    return new Session(this, info.id, info.template);
  }

  /** A handle on an existing session. */
  session(id: string, template?: string): Session {
    return new Session(this, id, template);
  }

  /** Makes a persistent volume of sizeBytes (its quota). */
  async createVolume(name: string, sizeBytes: number): Promise<VolumeInfo> {
    return this.json<VolumeInfo>("POST", "/volumes", { name, sizeBytes });
  }

  /** This key's volumes (every key's for an admin key). */
  async volumes(): Promise<VolumeInfo[]> {
    return (await this.json<{ volumes: VolumeInfo[] }>("GET", "/volumes")).volumes;
  }

  async volume(name: string): Promise<VolumeInfo> {
    return this.json<VolumeInfo>("GET", `/volumes/${encodeURIComponent(name)}`);
  }

  /** Deletes a volume and its files (409 while a session mounts it). */
  async deleteVolume(name: string): Promise<void> {
    await this.json<unknown>("DELETE", `/volumes/${encodeURIComponent(name)}`);
  }

  /** This key's snapshots (every key's for an admin key, each with its owner). */
  async snapshots(): Promise<SnapshotInfo[]> {
    return (await this.json<{ snapshots: SnapshotInfo[] }>("GET", "/snapshots")).snapshots;
  }

  /** One snapshot; a SandboxError with status 404 when this key has none of that name. */
  async snapshot(name: string): Promise<SnapshotInfo> {
    return this.json<SnapshotInfo>("GET", `/snapshots/${encodeURIComponent(name)}`);
  }

  /** Deletes a snapshot (a SandboxError with status 404 when there is none). */
  async deleteSnapshot(name: string): Promise<void> {
    await this.json<unknown>("DELETE", `/snapshots/${encodeURIComponent(name)}`);
  }

  async templates(): Promise<TemplateManifest[]> {
    return (await this.json<{ templates: TemplateManifest[] }>("GET", "/exec/templates")).templates;
  }

  async sessions(): Promise<SessionInfo[]> {
    return (await this.json<{ sessions: SessionInfo[] }>("GET", "/exec/")).sessions;
  }

  async health(): Promise<HealthInfo> {
    return this.json<HealthInfo>("GET", "/health");
  }

  async healthy(): Promise<boolean> {
    try {
      return (await this.health()).status === "ok";
    } catch {
      return false;
    }
  }
}

function randomId(): string {
  const bytes = new Uint8Array(6);
  globalThis.crypto.getRandomValues(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
