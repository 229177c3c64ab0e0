/** An error reply from sandboxd; status 0 means the server could not be reached. */
export class SandboxError extends Error {
  readonly status: number;
  readonly body: unknown;

  constructor(status: number, message: string, body?: unknown) {
    super(status ? `${status}: ${message}` : message);
    this.name = "SandboxError";
    this.status = status;
    this.body = body;
  }
}
