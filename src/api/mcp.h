/* mcp: the Model Context Protocol server, shared by its transports.
 *
 *   mcp_rpc.c     JSON-RPC 2.0 messages: decoding (strict, bounded), replies, versions
 *   mcp_server.c  MCP sessions, the methods (initialize, ping, tools/list, tools/call, ...),
 *                 calls in flight, cancellation, progress; transport-independent
 *   mcp_tools.c   the tools, their JSON Schemas and argument checking, on session/ops
 *   mcp.c         the HTTP transports: Streamable HTTP at /mcp, and the older HTTP+SSE
 *                 (/mcp + /mcp/messages, /sse + /messages)
 *
 * The stdio transport is `sandbox mcp` (cli/cmd_mcp.c), a bridge onto Streamable HTTP, so
 * every rule lives here once. Everything runs on the loop thread. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "session/ops.h"
#include "util/err.h"

/* JSON-RPC error codes. */
#define MCP_PARSE_ERROR      -32700
#define MCP_INVALID_REQUEST  -32600
#define MCP_METHOD_NOT_FOUND -32601
#define MCP_INVALID_PARAMS   -32602
#define MCP_INTERNAL_ERROR   -32603
#define MCP_SERVER_BUSY      -32000 /* too many requests in flight in one MCP session */
#define MCP_NO_SESSION       -32001 /* the MCP session named by the request does not exist */

/* The most messages one batch may hold. */
#define MCP_MAX_BATCH 64

/* --- messages (mcp_rpc.c) ----------------------------------------------------------- */

enum mcp_kind {
	MCP_REQUEST,      /* method + id: answered exactly once */
	MCP_NOTIFICATION, /* method, no id: never answered */
	MCP_RESPONSE,     /* result or error for a request of ours (we send none) */
	MCP_INVALID,      /* not a valid message: answered with error_code */
};

struct mcp_msg {
	enum mcp_kind kind;
	json_t *json;       /* the message, borrowed from the batch */
	json_t *id;         /* string or integer; NULL when absent or unusable */
	const char *method; /* requests and notifications */
	json_t *params;     /* object, or NULL when absent */
	int error_code;     /* MCP_INVALID: the error to answer with */
	char error[160];
};

struct mcp_batch {
	json_t *root;  /* owned */
	bool is_batch; /* the body was an array */
	size_t n;      /* at least 1 */
	struct mcp_msg *msgs;
};

/* Decodes one body (a POST's or a stdio line): a message or, for versions that allow it, a
 * batch (an array of 1 to MCP_MAX_BATCH messages). Returns 0 and fills *ret (invalid members
 * are MCP_INVALID entries), or a negative errno with *ret_code the JSON-RPC error
 * (MCP_PARSE_ERROR for bad JSON or UTF-8, MCP_INVALID_REQUEST for an empty or oversize batch
 * or a non-object) and err the reason. */
int mcp_decode(const void *body, size_t len, struct mcp_batch *ret, int *ret_code, struct err *err);
/* The same for a body parsed already (taken, whatever the outcome). */
int mcp_decode_value(json_t *value, struct mcp_batch *ret, int *ret_code, struct err *err);
void mcp_batch_free(struct mcp_batch *b);
/* Whether m is owed an answer: requests, and messages too malformed to be anything else. */
bool mcp_msg_wants_reply(const struct mcp_msg *m);

/* {"jsonrpc":"2.0","id":id,"result":result}; result is stolen, id borrowed (NULL: null). */
json_t *mcp_result(json_t *id, json_t *result);
/* {"jsonrpc":"2.0","id":id,"error":{"code":code,"message":...}}; id borrowed (NULL: null). */
json_t *mcp_error(json_t *id, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* {"jsonrpc":"2.0","method":method,"params":params}; params stolen. */
json_t *mcp_notification(const char *method, json_t *params);

/* Protocol versions, newest first; NULL-terminated. */
extern const char *const mcp_versions[];
bool mcp_version_supported(const char *v);
/* The version to answer an initialize asking for `requested` with: the same when supported,
 * else the newest. */
const char *mcp_version_negotiate(const char *requested);
/* Whether version v is `min` or newer (versions are dates). */
bool mcp_version_at_least(const char *v, const char *min);
/* Whether JSON-RPC batches are part of version v (2025-03-26 and before; later ones dropped
 * them). */
bool mcp_version_allows_batch(const char *v);

/* --- sessions and calls (mcp_server.c) ---------------------------------------------- */

struct mcp_session;
struct mcp_call;
struct mcp_sink;

/* Where the messages of one exchange go: a Streamable HTTP POST's reply, or the SSE stream
 * of an HTTP+SSE session. */
struct mcp_sink_ops {
	/* Sends one message (stolen). A response ends its call; a notification relates to a
	 * call still running. */
	void (*send)(struct mcp_sink *k, json_t *msg, bool is_response);
	/* Bytes queued toward the client: producers pause above MCP_HIGH_WATER. */
	size_t (*pending)(struct mcp_sink *k);
	/* One message mcp_handle() owed a reply is over (answered, or cancelled unanswered). */
	void (*request_done)(struct mcp_sink *k);
	/* The session the sink belongs to ended (optional: the HTTP+SSE stream closes). */
	void (*session_ended)(struct mcp_sink *k);
	/* Calls mcp_sink_drained() once fewer than `below` bytes are queued toward the client
	 * (or the client is gone). Optional: a sink without it never holds producers back. */
	void (*arm_drain)(struct mcp_sink *k, size_t below);
};

/* A producer held back until its sink drains: fn runs once, from the loop. It must not end
 * the sink from within (resuming a command only lets its output flow again, later). */
struct mcp_drain {
	void (*fn)(struct mcp_drain *d);
	struct mcp_drain *next;
	bool waiting;
};

struct mcp_sink {
	const struct mcp_sink_ops *ops;
	struct mcp_drain *waiters;
};

#define MCP_HIGH_WATER (512u << 10)

/* Settings, read from the environment by mcp_init(). */
struct mcp_settings {
	unsigned idle_timeout_s; /* SANDBOX_MCP_SESSION_TIMEOUT, default 1800 */
	unsigned max_sessions;   /* SANDBOX_MCP_MAX_SESSIONS, default 256 */
	unsigned max_inflight;   /* requests in flight per MCP session */
};
extern struct mcp_settings mcp_settings;

/* Prepares the module on its first use (idempotent): settings, ops, the idle sweep. */
void mcp_init(void);

/* Creates an MCP session for `owner`; NULL with err set and *ret_status the reply's status:
 * 503 at the server's limit of sessions, 429 at the key's quota (session/quota.h). */
struct mcp_session *mcp_session_new(const char *owner, struct err *err, int *ret_status);
/* The live session `id` of `owner`, or NULL (expired, ended, never existed, or another
 * owner's: the same answer, so that ids do not leak). */
struct mcp_session *mcp_session_find(const char *id, const char *owner);
const char *mcp_session_id(const struct mcp_session *s);
/* The negotiated version, or NULL before initialize succeeded. */
const char *mcp_session_version(const struct mcp_session *s);
/* Ends a session: its calls are cancelled unanswered, it leaves the table, and an attached
 * stream is told (session_ended). */
void mcp_session_end(struct mcp_session *s, const char *why);
void mcp_session_ref(struct mcp_session *s);
void mcp_session_unref(struct mcp_session *s);
/* HTTP+SSE: the stream replies go to (NULL: detach it, when its client went away). */
void mcp_session_attach_stream(struct mcp_session *s, struct mcp_sink *k);
struct mcp_sink *mcp_session_stream(struct mcp_session *s);

/* Handles one message from the session's owner. Every message mcp_msg_wants_reply() is true
 * for gets exactly one k->ops->request_done() once it is over, possibly before this returns. */
void mcp_handle(struct mcp_session *s, struct mcp_sink *k, const struct mcp_msg *m);
/* Cancels, unanswered, the calls of s that answer through k (their client is gone). */
void mcp_sink_gone(struct mcp_session *s, struct mcp_sink *k);

/* --- for the tools (mcp_server.c) --------------------------------------------------- */

/* The caller of a call (its key id). */
const char *mcp_call_owner(const struct mcp_call *c);
/* The request's _meta.progressToken, or NULL. */
json_t *mcp_call_progress_token(const struct mcp_call *c);
/* Answers a tools/call: result is the CallToolResult (stolen). */
void mcp_call_reply(struct mcp_call *c, json_t *result);
/* Sends a notification tied to the call (progress); dropped when the sink cannot carry it. */
void mcp_call_notify(struct mcp_call *c, json_t *notification);
/* Bytes queued toward the call's client. */
size_t mcp_call_pending(struct mcp_call *c);
/* d->fn runs once the call's sink has fewer than MCP_HIGH_WATER / 2 bytes queued. */
void mcp_call_on_drain(struct mcp_call *c, struct mcp_drain *d);
/* Withdraws d (before the producer that holds it goes, and before its call is answered). */
void mcp_call_drain_cancel(struct mcp_call *c, struct mcp_drain *d);
/* For the transports: the sink drained; every producer waiting on it goes on. */
void mcp_sink_drained(struct mcp_sink *k);

/* A running tool's hooks: cancel stops it without an answer (the call ends right after);
 * the state is the tool's own. */
struct mcp_tool_run {
	void (*cancel)(struct mcp_call *c, void *state);
	void *state;
};
void mcp_call_set_run(struct mcp_call *c, const struct mcp_tool_run *run);

/* --- tools (mcp_tools.c) ------------------------------------------------------------ */

/* The tools/list page starting at `offset` for version v: {"tools":[...], "nextCursor"?}. */
json_t *mcp_tools_list(const char *version, size_t offset);
/* Whether a tool of that name exists. */
bool mcp_tool_exists(const char *name);
/* Runs tool `name` with `args` (an object; borrowed). Answers through mcp_call_reply(),
 * possibly before returning. */
void mcp_tool_call(struct mcp_call *c, const char *name, json_t *args, const char *version);

/* Checks value against a JSON Schema of the subset the tools use (type, properties, required,
 * additionalProperties, items, enum, minimum, maximum, minLength, maxLength, pattern as
 * session ids use it). Returns 0, or -EINVAL with the first problem in err. */
int mcp_schema_check(json_t *schema, json_t *value, const char *where, struct err *err);
