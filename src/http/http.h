/* http: the daemon's HTTP front door on libevent's evhttp.
 *
 * Owns routing (method + path template with :params), request ids, bounded JSON bodies,
 * JSON replies and errors, streaming replies with back-pressure, client-disconnect
 * notification and the access log. Every reply is JSON (or the stream a route asked for):
 * never an HTML page, never a 200 with an empty body.
 *
 * A struct http_ctx lives from the request's arrival until its reply is finished or its
 * client is gone, whichever comes last of "the handler replied" and "nothing holds it":
 * handlers that answer later keep the ctx and must call one of the reply functions exactly
 * once; if the client went away meanwhile the reply is dropped and the ctx freed. */
#pragma once

#include <event2/event.h>
#include <event2/http.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "util/err.h"

#define HTTP_MAX_PARAMS 3

struct http_ctx;
struct http_server;

typedef void (*http_handler_fn)(struct http_ctx *ctx);

struct http_route {
	int methods;         /* EVHTTP_REQ_* mask */
	const char *pattern; /* "/exec/:id/execute"; also the route's label in logs and metrics */
	http_handler_fn fn;
	const char *scope; /* scope the caller's key needs ("exec", "admin", "metrics"), or NULL */
};

/* Called before every routed request; returns 0 to go on, or replies itself and returns -1. */
typedef int (*http_auth_fn)(struct http_ctx *ctx, const char *scope, void *arg);

/* Called when a request finished (metrics). `route` is the pattern or "unmatched". */
typedef void (*http_done_fn)(const char *method, const char *route, int status, double seconds,
			     void *arg);

struct http_ctx {
	struct evhttp_request *req; /* NULL once the client is gone */
	/* A request libevent handed back when its client left mid-reply: freed with the ctx. */
	struct evhttp_request *orphan;
	struct http_server *srv;
	char id[17]; /* request id, also sent as X-Request-Id */
	const struct http_route *route;
	char *params[HTTP_MAX_PARAMS];
	size_t nparams;
	uint64_t start_ns;
	int status;     /* status sent, 0 before */
	bool streaming; /* a chunked reply is under way */
	bool replied;   /* the reply is complete (or abandoned) */
	bool complete;  /* libevent finished sending the reply */
	bool gone;      /* the client disconnected before the reply completed */
	void *user;     /* set by auth: the caller's identity */
	void (*user_free)(void *user);
	/* Called once if the client disconnects before the reply completes. */
	void (*on_gone)(struct http_ctx *ctx, void *arg);
	void *on_gone_arg;
	int holds;               /* http_ctx_hold() count */
	struct event *close_ev;  /* watches the client's socket while the reply is pending */
	struct evkeyvalq *query; /* parsed lazily */
	const char *method_name; /* kept for the access log after the request is gone */
};

struct http_server *http_server_new(struct event_base *base, const struct config *cfg,
				    const struct http_route *routes, size_t nroutes);
void http_server_set_auth(struct http_server *srv, http_auth_fn fn, void *arg);
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
/* Whether the client accepts `type` (a plain substring test over Accept). */
bool http_accepts(struct http_ctx *ctx, const char *type);
/* The raw body. */
const uint8_t *http_body(struct http_ctx *ctx, size_t *len);

/* Parses the body as a JSON object (an empty body is {}). On failure replies 400/413 and
 * returns -1; the handler must then return without replying again. */
int http_body_json(struct http_ctx *ctx, json_t **ret);

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
void http_add_header(struct http_ctx *ctx, const char *name, const char *value);

/* Streaming: start a chunked reply, send chunks, end it. Writes are dropped once the client
 * is gone. Producers apply back-pressure by looking at http_stream_pending(): the bytes
 * still waiting to go out to this client. */
void http_stream_start(struct http_ctx *ctx, int status, const char *content_type);
void http_stream_write(struct http_ctx *ctx, const void *data, size_t len);
size_t http_stream_pending(struct http_ctx *ctx);
void http_stream_end(struct http_ctx *ctx);

/* Keeps ctx alive past its reply (for producers that may still call in); release with
 * http_ctx_release. */
void http_ctx_hold(struct http_ctx *ctx);
void http_ctx_release(struct http_ctx *ctx);

/* Copies uri into out with the values of api_key/apiKey query parameters replaced. */
void http_redact_uri(const char *uri, char *out, size_t outlen);
