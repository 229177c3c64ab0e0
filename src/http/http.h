/* http: the daemon's HTTP/1.1 front door, on libevent bufferevents and http_parser (h1.h).
 *
 * Owns connections (a global cap, a per-address cap for connections that have not yet
 * authenticated, deadlines for headers, bodies and idle keep-alive), routing by Host and by
 * method + path template with :params, header-phase checks (a request's route and key are
 * checked before any byte of its body is read; a refused request's body is not read),
 * request ids, bodies buffered up to a per-route limit or streamed to the handler with
 * back-pressure, JSON replies and errors, streaming replies with a drain callback,
 * client-disconnect notification, upgrades to WebSocket (ws.c, over wslay) and raw tunnels,
 * and the access log. Every reply is JSON (or the stream a route asked for): never an HTML
 * page, never a 200 with an empty body.
 *
 * A struct http_ctx lives from the arrival of a request's head until its reply is finished
 * or its client is gone, whichever comes last of "the handler replied" and "nothing holds
 * it": handlers that answer later keep the ctx and must call one of the reply functions
 * exactly once; if the client went away meanwhile the reply is dropped and the ctx freed. */
#pragma once

#include <event2/event.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "util/err.h"

/* Methods, as masks for struct http_route. */
enum {
	HTTP_REQ_GET = 1 << 0,
	HTTP_REQ_POST = 1 << 1,
	HTTP_REQ_PUT = 1 << 2,
	HTTP_REQ_DELETE = 1 << 3,
	HTTP_REQ_PATCH = 1 << 4,
	HTTP_REQ_HEAD = 1 << 5,
	HTTP_REQ_OPTIONS = 1 << 6,
	HTTP_REQ_CONNECT = 1 << 7,
};

/* struct http_route flags */
enum {
	/* The handler runs as soon as the head passed its checks, before any body byte; it
	 * receives the body through http_body_stream() (or refuses it by replying). */
	HTTP_ROUTE_STREAM_BODY = 1 << 0,
	/* The handler reads its (buffered) body with http_body_json() (or, for a JSON value of
	 * any type, http_body_take_parsed()): one larger than
	 * HTTP_OFFLOAD_BODY is checked and parsed on the worker pool before the handler runs,
	 * so that no large body holds up the event loop. */
	HTTP_ROUTE_JSON_BODY = 1 << 1,
	/* A WebSocket upgrade that may authenticate with a one-use `?ticket=` (auth/ticket.h)
	 * for the session of its first path parameter, instead of a key in a header. */
	HTTP_ROUTE_TICKET = 1 << 2,
	/* A route without a scope whose handler decides itself, at the head (with
	 * HTTP_ROUTE_STREAM_BODY), who may call it: its body limit is its own, not
	 * HTTP_ANON_MAX_BODY (a reverse proxy's: the app behind it decides). */
	HTTP_ROUTE_SELF_AUTH = 1 << 3,
};

#define HTTP_OFFLOAD_BODY (1u << 20)

#define HTTP_MAX_PARAMS   3
/* The largest body a route without a scope (one that needs no key) takes. */
#define HTTP_ANON_MAX_BODY (64u << 10)

struct http_ctx;
struct http_server;

typedef void (*http_handler_fn)(struct http_ctx *ctx);

struct http_route {
	int methods;         /* HTTP_REQ_* mask */
	const char *pattern; /* "/exec/:id/execute"; also the route's label in logs and metrics */
	http_handler_fn fn;
	const char *scope; /* scope the caller's key needs ("exec", "admin", "metrics"), or NULL */
	size_t max_body;   /* the largest body it takes; 0: the server's (SANDBOX_MAX_BODY_BYTES) */
	unsigned flags;    /* HTTP_ROUTE_* */
};

/* Called before every routed request; returns 0 to go on, or replies itself and returns -1. */
typedef int (*http_auth_fn)(struct http_ctx *ctx, const char *scope, void *arg);

/* Chooses a route by the request's Host (and anything else of its head), before the path
 * routes are looked at: returns the route to use, or NULL for the path routes. */
typedef const struct http_route *(*http_host_fn)(struct http_ctx *ctx, const char *host, void *arg);

/* Called when a request finished (metrics). `route` is the pattern or "unmatched". */
typedef void (*http_done_fn)(const char *method, const char *route, int status, double seconds,
			     void *arg);

struct http_conn;
struct evbuffer;
struct evkeyvalq;

struct http_ctx {
	struct http_conn *conn; /* NULL once the reply is out or the client is gone */
	struct http_server *srv;
	char id[17]; /* request id, also sent as X-Request-Id */
	const struct http_route *route;
	char *params[HTTP_MAX_PARAMS];
	size_t nparams;
	uint64_t start_ns;
	int status;      /* status sent, 0 before */
	bool streaming;  /* a chunked reply is under way */
	bool replied;    /* the reply is complete (or abandoned) */
	bool complete;   /* the reply is all queued toward the client */
	bool gone;       /* the client disconnected before the reply completed */
	bool dispatched; /* its handler was called */
	void *user;      /* set by auth: the caller's identity */
	void (*user_free)(void *user);
	/* Called once if the client disconnects before the reply completes. */
	void (*on_gone)(struct http_ctx *ctx, void *arg);
	void *on_gone_arg;
	int holds;                /* http_ctx_hold() count */
	int method;               /* HTTP_REQ_* */
	struct evkeyvalq *query;  /* parsed lazily */
	char *path;               /* the target's path, as sent (not decoded) */
	struct evbuffer *body;    /* a buffered route's body */
	struct evbuffer *headers; /* reply headers added so far, as "Name: value\r\n" lines */
	bool head_only;           /* HEAD: the reply's body is not sent */
	bool chunked;             /* the stream under way is chunked (else ends at close) */
	bool send_guard;          /* http_stream_guard() */
	/* http_stream_on_drain() */
	void (*drain_fn)(struct http_ctx *ctx, void *arg);
	void *drain_arg;
	size_t drain_below;
	/* http_body_stream() */
	const struct http_body_ops *body_ops;
	void *body_arg;
	/* HTTP_ROUTE_JSON_BODY: the body parsed on a worker, or why it could not be */
	bool parsed_ready;
	json_t *parsed;
	struct http_parse_error *parse_error;
	/* http_reroute(): what the route chosen at the head is given */
	void *route_arg;
	void (*route_arg_free)(void *arg);
	char *peer_override; /* http_set_peer() */
	/* The body's charge to its key (http_set_budget_key): in memory, and spooled to a file
	 * of the state directory (spool_fd, -1: none) once large. */
	char budget_key[64];
	uint64_t charged_mem, charged_spool;
	int spool_fd;
};

/* Why a body parsed on a worker is not JSON: over a limit (status 400 or 413 and the
 * limit's message), or not JSON at all (jansson's message and where). */
struct http_parse_error {
	bool over_limit;
	int status;
	int line, column;
	char msg[ERR_MSG_MAX];
};

struct http_server *http_server_new(struct event_base *base, const struct config *cfg,
				    const struct http_route *routes, size_t nroutes);
void http_server_set_auth(struct http_server *srv, http_auth_fn fn, void *arg);
void http_server_set_host_router(struct http_server *srv, http_host_fn fn, void *arg);
void http_server_set_done(struct http_server *srv, http_done_fn fn, void *arg);

/* Binds host:port (port 0 picks one; *ret_port gets the bound port). */
int http_server_listen_tcp(struct http_server *srv, const char *host, int port, int *ret_port,
			   struct err *err);
/* Binds a Unix socket, replacing a stale socket file (but not a live one). */
int http_server_listen_unix(struct http_server *srv, const char *path, struct err *err);

/* Stops accepting new connections; in-flight requests go on. */
void http_server_stop_accepting(struct http_server *srv);
/* Number of requests whose reply has not completed. */
size_t http_server_inflight(struct http_server *srv);

/* What the connection layer did, for /metrics. */
struct http_stats {
	uint64_t connections;     /* open now */
	uint64_t reading_heads;   /* of those, in the middle of a request's head */
	uint64_t accepted;        /* since start */
	uint64_t refused;         /* closed at accept: over a cap with nothing to evict */
	uint64_t evicted;         /* closed to make room: had not completed a request's head */
	uint64_t header_timeouts; /* closed for a head (or body) not sent in time */
	uint64_t send_stalls;     /* closed for taking nothing of a reply for a body timeout */
	uint64_t accept_pauses;   /* accepting paused for want of descriptors */
	uint64_t offloaded;       /* JSON bodies parsed on the worker pool */
	uint64_t body_mem;        /* bytes of request bodies held in memory now */
	uint64_t body_spool;      /* and spooled to the state directory */
	unsigned max_connections; /* the caps in force */
	unsigned max_per_address;
};
void http_server_stats(struct http_server *srv, struct http_stats *st);
void http_server_free(struct http_server *srv);

/* --- request accessors ------------------------------------------------------------ */

const char *http_method(struct http_ctx *ctx);
const char *http_param(struct http_ctx *ctx, size_t i);
/* A query parameter (decoded), or NULL. */
const char *http_query(struct http_ctx *ctx, const char *name);
/* A request header, or NULL. */
const char *http_header(struct http_ctx *ctx, const char *name);
/* The peer's address as text. */
const char *http_peer(struct http_ctx *ctx);
/* The address of the connection itself, whatever http_set_peer said. */
const char *http_conn_peer(struct http_ctx *ctx);
/* The client's address as a trusted proxy (another node of the cluster) says it is: what
 * http_peer() answers from then on (per-address limits count it). */
void http_set_peer(struct http_ctx *ctx, const char *addr);
/* From the auth function, at the head: the request goes to `route` instead (its flags and
 * body limit apply), whose handler finds `arg` in ctx->route_arg; arg_free (may be NULL)
 * frees it with the request. */
void http_reroute(struct http_ctx *ctx, const struct http_route *route, void *arg,
		  void (*arg_free)(void *arg));
/* Whether the request came through the Unix socket (no name was resolved to reach it). */
bool http_from_unix_socket(struct http_ctx *ctx);
/* Whether the client accepts `type` (a plain substring test over Accept). */
bool http_accepts(struct http_ctx *ctx, const char *type);
/* The raw body of a buffered route. */
const uint8_t *http_body(struct http_ctx *ctx, size_t *len);

/* A streamed body (HTTP_ROUTE_STREAM_BODY): `data` gets each piece as it arrives (return 0,
 * or reply and return -1 to refuse the rest), `end` is called once it is complete. Either may
 * be NULL. Pieces keep coming until http_body_pause(); http_body_resume() lets them come
 * again (credit toward whatever consumes them). */
struct http_body_ops {
	int (*data)(struct http_ctx *ctx, const uint8_t *data, size_t len, void *arg);
	void (*end)(struct http_ctx *ctx, void *arg);
};
void http_body_stream(struct http_ctx *ctx, const struct http_body_ops *ops, void *arg);
void http_body_pause(struct http_ctx *ctx);
void http_body_resume(struct http_ctx *ctx);

/* Names the key whose budget of bodies in flight (SANDBOX_KEY_MAX_BODY_BYTES) the request's
 * body is charged to: what the key check calls once it knows the caller. A body beyond the
 * key's budget is refused with 429; a body of a route that parses it on a worker
 * (HTTP_ROUTE_JSON_BODY) is spooled to a file of the state directory once it passes
 * HTTP_OFFLOAD_BODY or its key holds HTTP_KEY_BODY_MEMORY in memory, so that bodies that never
 * finish cost disk, not the daemon's memory. */
#define HTTP_KEY_BODY_MEMORY (16u << 20)
void http_set_budget_key(struct http_ctx *ctx, const char *key);

/* Checks a JSON text against the server's SANDBOX_MAX_JSON_DEPTH (EINVAL) and
 * SANDBOX_MAX_JSON_ELEMENTS (EMSGSIZE), in one linear pass and constant memory: what a
 * route that parses JSON itself calls first. */
int http_json_limits_check(struct http_ctx *ctx, const uint8_t *body, size_t len, struct err *err);

/* Parses the body as a JSON object (an empty body is {}), within the limits above. On failure
 * replies 400/413 and returns -1; the handler must then return without replying again. */
int http_body_json(struct http_ctx *ctx, json_t **ret);
/* For handlers that parse their body in their own way (MCP): whether the body was parsed on
 * a worker already (HTTP_ROUTE_JSON_BODY), and then the value (taken, any JSON type) or, with
 * NULL, why not. */
bool http_body_preparsed(struct http_ctx *ctx);
json_t *http_body_take_parsed(struct http_ctx *ctx, const struct http_parse_error **why);

/* --- replies ------------------------------------------------------------------------ */

void http_reply_json(struct http_ctx *ctx, int status, json_t *body /* stolen */);
void http_reply_error(struct http_ctx *ctx, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Replies with the status that fits err->errnum (ENOENT 404, EINVAL 400, ...). */
void http_reply_err(struct http_ctx *ctx, const struct err *err);
/* The HTTP status for an errno value. */
int http_status_for_errno(int errnum);
void http_reply_bytes(struct http_ctx *ctx, int status, const char *content_type, const void *data,
		      size_t len);
/* The same with the body's bytes moved out of an evbuffer, not copied (it is left empty; the
 * caller still frees it). */
void http_reply_buffer(struct http_ctx *ctx, int status, const char *content_type,
		       struct evbuffer *body);
void http_add_header(struct http_ctx *ctx, const char *name, const char *value);

/* Streaming: start a chunked reply, send chunks, end it. Writes are dropped once the client
 * is gone. Producers apply back-pressure by looking at http_stream_pending(): the bytes
 * still waiting to go out to this client. */
void http_stream_start(struct http_ctx *ctx, int status, const char *content_type);
void http_stream_write(struct http_ctx *ctx, const void *data, size_t len);
size_t http_stream_pending(struct http_ctx *ctx);
void http_stream_end(struct http_ctx *ctx);
/* A stream of exactly `length` bytes (Content-Length, not chunked): the producer writes that
 * many, then ends it, or aborts. */
void http_stream_start_sized(struct http_ctx *ctx, int status, const char *content_type,
			     uint64_t length);
/* Ends a stream that failed after its head went out: the reply is cut short (no last chunk;
 * the connection closes after what is queued), so the client cannot take it for complete. */
void http_stream_abort(struct http_ctx *ctx);
/* Puts the reply under the send guard: a client that takes none of what waits for it for
 * SANDBOX_BODY_TIMEOUT_MS has its connection closed (on_gone runs). For replies whose
 * producer holds something while it waits (a file read's sandbox operation); an event
 * stream, whose slow client gets an overflow instead, is not guarded. */
void http_stream_guard(struct http_ctx *ctx);

/* Calls fn once, from the loop, when fewer than `below` bytes wait to go out to the client
 * (at once if that is so already), or when the client is gone: a producer paused at its
 * high-water mark resumes from it. A new call replaces the one pending; fn NULL cancels. */
void http_stream_on_drain(struct http_ctx *ctx, size_t below,
			  void (*fn)(struct http_ctx *ctx, void *arg), void *arg);

/* --- for a reverse proxy ------------------------------------------------------------- */

/* The request's headers, in the order sent: i < http_header_count(). */
size_t http_header_count(struct http_ctx *ctx);
void http_header_at(struct http_ctx *ctx, size_t i, const char **name, const char **value);
/* The request target as sent (path and query), or "" once the client is gone. */
const char *http_target(struct http_ctx *ctx);
/* How the request's body is framed: Content-Length (0 without one), or chunked. */
void http_body_framing(struct http_ctx *ctx, uint64_t *length, bool *chunked);
/* Whether the request asked to take over its connection (Upgrade, CONNECT). */
bool http_upgrade_requested(struct http_ctx *ctx);

#define HTTP_LENGTH_CHUNKED (-1)
#define HTTP_LENGTH_NONE    (-2)
/* Starts a reply whose headers are all the caller's (http_add_header; none of the stream
 * defaults, no Content-Type of its own): a body of `length` bytes (for HEAD, the length only),
 * HTTP_LENGTH_CHUNKED for a stream, or HTTP_LENGTH_NONE for a status that has no body (1xx,
 * 204, 304). Then http_stream_write and http_stream_end (or abort) as for any stream. */
void http_stream_start_raw(struct http_ctx *ctx, int status, int64_t length);

/* --- upgrades ----------------------------------------------------------------------- */

/* Takes the connection over as a raw byte stream: sends `status` (101 for an Upgrade, 200
 * for CONNECT) with the headers added so far and hands the socket's bufferevent, with any
 * bytes already read past the head in its input, to the caller, who owns and frees it. The
 * ctx is finished. Returns NULL (having replied with an error) when the request cannot be
 * upgraded or its client is gone. */
struct bufferevent *http_upgrade_raw(struct http_ctx *ctx, int status);

struct http_ws;
struct http_ws_ops {
	/* A whole message (text or binary; fragments joined, at most max_message bytes). */
	void (*message)(struct http_ws *ws, bool binary, const uint8_t *data, size_t len,
			void *arg);
	/* Fewer than the high-water mark of bytes wait to go out (optional). */
	void (*drain)(struct http_ws *ws, void *arg);
	/* The connection ended (closed by either side, or failed); ws is freed after this. */
	void (*closed)(struct http_ws *ws, uint16_t code, void *arg);
};
/* Answers a WebSocket handshake (RFC 6455) and takes the connection over; on a request that
 * is not a valid handshake replies 400 (426 without Upgrade) and returns NULL. `protocol`, if
 * not NULL, is the subprotocol chosen (echoed as Sec-WebSocket-Protocol). */
struct http_ws *http_ws_accept(struct http_ctx *ctx, const char *protocol,
			       const struct http_ws_ops *ops, void *arg, size_t max_message);
/* Queues a message; dropped once the connection is closing. */
void http_ws_send(struct http_ws *ws, bool binary, const void *data, size_t len);
/* Bytes queued toward the client, each queued message counted with its bookkeeping (so that
 * many empty control frames weigh like their memory). */
size_t http_ws_pending(struct http_ws *ws);
/* Starts the closing handshake; `closed` follows. */
void http_ws_close(struct http_ws *ws, uint16_t code, const char *reason);

/* Keeps ctx alive past its reply (for producers that may still call in); release with
 * http_ctx_release. */
void http_ctx_hold(struct http_ctx *ctx);
void http_ctx_release(struct http_ctx *ctx);

/* Copies uri into out with the values of api_key/apiKey query parameters replaced. */
void http_redact_uri(const char *uri, char *out, size_t outlen);
