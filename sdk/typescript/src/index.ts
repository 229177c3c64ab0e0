export { Sandbox } from "./client.js";
export { Session, Watch } from "./session.js";
export { SandboxError } from "./errors.js";
export type * from "./types.js";
