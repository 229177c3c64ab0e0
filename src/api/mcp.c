/* mcp: MCP over HTTP.
 *
 * Streamable HTTP (2025-03-26 and later) at /mcp: every client message is a POST; a POST
 * carrying requests is answered with application/json, or with an SSE stream once a call
 * has something to say before its answer (progress) and the client accepts
 * text/event-stream. The session id is issued with the initialize answer and required
 * afterwards; DELETE ends the session; GET offers no server-initiated stream (405).
 *
 * HTTP+SSE (2024-11-05): GET /mcp (Accept: text/event-stream, no Mcp-Session-Id) or GET /sse
 * opens the session's stream, whose first event, `endpoint`, names where to POST messages
 * (/mcp/messages?sessionId=... or /messages?sessionId=...); POSTs are accepted with 202 and
 * answered on the stream.
 *
 * No stream is resumable (no event ids), so an answer whose client went away is lost: when
 * the HTTP layer sees a POST's client leave, before or during its reply, the POST's calls are
 * cancelled, which also bounds what a vanished client costs. Origins other than the local
 * machine's are refused unless SANDBOX_MCP_ALLOWED_ORIGINS lists them (DNS rebinding). */
#include <ctype.h>
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "api/api.h"
#include "api/mcp.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/time.h"

#define KEEPALIVE_S 15

static struct {
	bool ready;
	struct event *keepalive;
	struct post *posts;     /* POSTs answering with an SSE stream */
	struct stream *streams; /* HTTP+SSE session streams */
} mcp_mod;

static char *dump(json_t *msg)
{
	char *text = json_dumps(msg, JSON_COMPACT | JSON_REAL_PRECISION(15));
	json_decref(msg);
	return text;
}

/* Writes one SSE event; `data` must hold no newline (compact JSON never does). */
static void sse_event(struct http_ctx *ctx, const char *event, const char *data)
{
	_cleanup_free_ char *frame = xasprintf("event: %s\ndata: %s\n\n", event, data);
	http_stream_write(ctx, frame, strlen(frame));
}

/* A JSON-RPC error as the body of an HTTP error. */
static void reply_rpc_error(struct http_ctx *ctx, int status, json_t *id, int code, const char *msg)
{
	http_reply_json(ctx, status, mcp_error(id, code, "%s", msg));
}

/* --- checks every MCP route makes --------------------------------------------------- */

static void keepalive_tick(evutil_socket_t fd, short what, void *arg);

static void transport_init(void)
{
	if (mcp_mod.ready)
		return;
	mcp_mod.ready = true;
	mcp_init();
	mcp_mod.keepalive = event_new(api_base, -1, EV_PERSIST, keepalive_tick, NULL);
	struct timeval tv = { .tv_sec = KEEPALIVE_S };
	event_add(mcp_mod.keepalive, &tv);
}

/* The check before a message is read (the front door checked Origin): the protocol version
 * header. Replies and returns false when the request is refused. */
static bool precheck(struct http_ctx *ctx)
{
	transport_init();
	const char *version = http_header(ctx, "MCP-Protocol-Version");
	if (version && !mcp_version_supported(version)) {
		char msg[256];
		snprintf(msg, sizeof(msg),
			 "Bad Request: unsupported MCP-Protocol-Version `%.32s` (supported: "
			 "2025-11-25, 2025-06-18, 2025-03-26, 2024-11-05)",
			 version);
		reply_rpc_error(ctx, 400, NULL, MCP_INVALID_REQUEST, msg);
		return false;
	}
	return true;
}

static bool decode_inline(struct http_ctx *ctx, struct mcp_batch *b);

/* Reads the body as MCP messages into b (zeroed, the caller frees it whatever the outcome);
 * replies 400/415 and returns false when they are not. */
static bool read_messages(struct http_ctx *ctx, struct mcp_batch *b)
{
	const char *type = http_header(ctx, "Content-Type");
	if (type && strncasecmp(type, "application/json", 16) != 0) {
		reply_rpc_error(ctx, 415, NULL, MCP_INVALID_REQUEST,
				"Unsupported Media Type: send application/json");
		return false;
	}
	int code;
	struct err e;
	/* A large body was checked and parsed on a worker (HTTP_ROUTE_JSON_BODY). */
	if (http_body_preparsed(ctx)) {
		const struct http_parse_error *why;
		json_t *root = http_body_take_parsed(ctx, &why);
		if (!root && why && why->over_limit) {
			reply_rpc_error(ctx, why->status, NULL, MCP_INVALID_REQUEST, why->msg);
			return false;
		}
		if (!root) {
			char msg[ERR_MSG_MAX + 64];
			snprintf(msg, sizeof(msg), "Parse error: %s (line %d, column %d)",
				 why ? why->msg : "?", why ? why->line : 0, why ? why->column : 0);
			reply_rpc_error(ctx, 400, NULL, MCP_PARSE_ERROR, msg);
			return false;
		}
		if (mcp_decode_value(root, b, &code, &e) < 0) {
			reply_rpc_error(ctx, 400, NULL, code, e.msg);
			return false;
		}
	} else if (!decode_inline(ctx, b)) {
		return false;
	}
	/* One message that is not valid at all: an HTTP error, with its JSON-RPC error. */
	if (!b->is_batch && b->msgs[0].kind == MCP_INVALID) {
		reply_rpc_error(ctx, 400, b->msgs[0].id, b->msgs[0].error_code, b->msgs[0].error);
		return false;
	}
	return true;
}

/* The body checked and parsed here, on the loop (a small one). */
static bool decode_inline(struct http_ctx *ctx, struct mcp_batch *b)
{
	size_t len;
	const uint8_t *body = http_body(ctx, &len);
	int code;
	struct err e;
	if (http_json_limits_check(ctx, body, len, &e) < 0) {
		reply_rpc_error(ctx, http_status_for_errno(e.errnum), NULL, MCP_INVALID_REQUEST,
				e.msg);
		return false;
	}
	if (mcp_decode(body, len, b, &code, &e) < 0) {
		reply_rpc_error(ctx, 400, NULL, code, e.msg);
		return false;
	}
	return true;
}

static bool batch_allowed(struct http_ctx *ctx, const struct mcp_batch *b, const char *version)
{
	if (!b->is_batch || mcp_version_allows_batch(version))
		return true;
	char msg[160];
	snprintf(msg, sizeof(msg), "Invalid Request: JSON-RPC batches are not part of protocol %s",
		 version ? version : "before initialize");
	reply_rpc_error(ctx, 400, NULL, MCP_INVALID_REQUEST, msg);
	return false;
}

/* --- Streamable HTTP: one POST ------------------------------------------------------ */

struct post {
	struct mcp_sink sink;
	struct http_ctx *ctx;
	struct mcp_session *s;
	bool accepts_sse;
	bool streaming; /* the reply became an SSE stream */
	bool is_batch;
	unsigned requests; /* messages that were owed a reply */
	unsigned pending;  /* of those, not over yet (+1 while they are being handed out) */
	json_t *responses; /* collected for a JSON reply */
	uint64_t last_write_ms;
	struct post *next;
};

static void post_unlist(struct post *p)
{
	for (struct post **pp = &mcp_mod.posts; *pp; pp = &(*pp)->next) {
		if (*pp == p) {
			*pp = p->next;
			return;
		}
	}
}

static void post_start_stream(struct post *p)
{
	p->streaming = true;
	p->last_write_ms = time_mono_ms();
	p->next = mcp_mod.posts;
	mcp_mod.posts = p;
	http_stream_start(p->ctx, 200, "text/event-stream");
	/* Answers collected so far (a batch) go first. */
	size_t i;
	json_t *r;
	json_array_foreach (p->responses, i, r) {
		_cleanup_free_ char *text = dump(json_incref(r));
		sse_event(p->ctx, "message", text);
	}
	json_array_clear(p->responses);
}

static void post_send(struct mcp_sink *k, json_t *msg, bool is_response)
{
	struct post *p = (struct post *)k;
	if (!p->ctx->conn) {
		json_decref(msg);
		return;
	}
	if (!p->streaming && !is_response) {
		if (!p->accepts_sse) {
			/* No channel for it before the answer: progress is optional. */
			json_decref(msg);
			return;
		}
		post_start_stream(p);
	}
	if (p->streaming) {
		_cleanup_free_ char *text = dump(msg);
		sse_event(p->ctx, "message", text);
		p->last_write_ms = time_mono_ms();
		return;
	}
	json_array_append_new(p->responses, msg);
}

static size_t post_pending(struct mcp_sink *k)
{
	struct post *p = (struct post *)k;
	return p->streaming ? http_stream_pending(p->ctx) : 0;
}

static void post_drained(struct http_ctx *ctx, void *arg)
{
	mcp_sink_drained(arg);
}

static void post_arm_drain(struct mcp_sink *k, size_t below)
{
	struct post *p = (struct post *)k;
	http_stream_on_drain(p->ctx, below, post_drained, &p->sink);
}

static void post_finish(struct post *p)
{
	struct http_ctx *ctx = p->ctx;
	ctx->on_gone = NULL;
	http_stream_on_drain(ctx, 0, NULL, NULL);
	if (p->streaming) {
		post_unlist(p);
		http_stream_end(ctx);
	} else if (json_array_size(p->responses) > 0) {
		json_t *body = p->is_batch ? json_incref(p->responses)
					   : json_incref(json_array_get(p->responses, 0));
		http_reply_json(ctx, 200, body);
	} else if (p->requests == 0) {
		/* Only notifications and responses: accepted, nothing to say. */
		http_reply_bytes(ctx, 202, "application/json", "", 0);
	} else if (p->accepts_sse) {
		/* Every request was cancelled, and a cancelled request is not answered: an SSE
		 * stream that ends without an event says exactly that. */
		http_stream_start(ctx, 200, "text/event-stream");
		http_stream_end(ctx);
	} else {
		reply_rpc_error(ctx, 200, NULL, MCP_INVALID_REQUEST, "The request was cancelled");
	}
	json_decref(p->responses);
	mcp_session_unref(p->s);
	free(p);
}

static void post_request_done(struct mcp_sink *k)
{
	struct post *p = (struct post *)k;
	if (--p->pending == 0)
		post_finish(p);
}

static const struct mcp_sink_ops post_ops = {
	.send = post_send,
	.pending = post_pending,
	.request_done = post_request_done,
	.arm_drain = post_arm_drain,
};

static void post_gone(struct http_ctx *ctx, void *arg)
{
	struct post *p = arg;
	log_info("mcp", "client of a POST went away: cancelling its calls");
	mcp_sink_gone(p->s, &p->sink);
}

static bool accepts(struct http_ctx *ctx, const char *type)
{
	const char *accept = http_header(ctx, "Accept");
	return !accept || strstr(accept, type) || strstr(accept, "*/*");
}

static void mcp_post(struct http_ctx *ctx)
{
	if (!precheck(ctx))
		return;
	if (!accepts(ctx, "application/json") && !accepts(ctx, "text/event-stream")) {
		reply_rpc_error(ctx, 406, NULL, MCP_INVALID_REQUEST,
				"Not Acceptable: accept application/json and text/event-stream");
		return;
	}
	_cleanup_(mcp_batch_free) struct mcp_batch b = { 0 };
	if (!read_messages(ctx, &b))
		return;
	const char *sid = http_header(ctx, "Mcp-Session-Id");
	const char *owner = api_owner(ctx);
	struct mcp_session *s;
	bool fresh = false;
	if (sid) {
		s = mcp_session_find(sid, owner);
		if (!s) {
			reply_rpc_error(ctx, 404, NULL, MCP_NO_SESSION,
					"Session not found: it ended or expired; initialize a new "
					"one");
			return;
		}
	} else {
		const struct mcp_msg *m = &b.msgs[0];
		if (b.is_batch || m->kind != MCP_REQUEST || strcmp(m->method, "initialize") != 0) {
			reply_rpc_error(ctx, 400, NULL, MCP_INVALID_REQUEST,
					"Bad Request: the Mcp-Session-Id header is required (the "
					"first message is an initialize request)");
			return;
		}
		struct err e;
		int status;
		s = mcp_session_new(owner, &e, &status);
		if (!s) {
			reply_rpc_error(ctx, status, m->id, MCP_SERVER_BUSY, e.msg);
			return;
		}
		fresh = true;
	}
	if (!batch_allowed(ctx, &b, mcp_session_version(s))) {
		if (fresh)
			mcp_session_end(s, "refused its first request");
		return;
	}

	struct post *p = xcalloc(1, sizeof(*p));
	p->sink.ops = &post_ops;
	p->ctx = ctx;
	p->s = s;
	mcp_session_ref(s);
	p->accepts_sse = http_accepts(ctx, "text/event-stream");
	p->is_batch = b.is_batch;
	p->responses = json_array();
	p->pending = 1; /* until every message is handed out */
	ctx->on_gone = post_gone;
	ctx->on_gone_arg = p;
	for (size_t i = 0; i < b.n; i++) {
		if (mcp_msg_wants_reply(&b.msgs[i])) {
			p->requests++;
			p->pending++;
		}
		mcp_handle(s, &p->sink, &b.msgs[i]);
	}
	if (fresh) {
		/* initialize answers at once: issue the session only if it succeeded. */
		json_t *r = json_array_get(p->responses, 0);
		if (json_object_get(r, "result"))
			http_add_header(ctx, "Mcp-Session-Id", mcp_session_id(s));
		else
			mcp_session_end(s, "initialize failed");
	}
	post_request_done(&p->sink);
}

/* --- HTTP+SSE: the session stream --------------------------------------------------- */

struct stream {
	struct mcp_sink sink;
	struct http_ctx *ctx;
	struct mcp_session *s;
	uint64_t last_write_ms;
	struct stream *next;
};

static void stream_unlist(struct stream *st)
{
	for (struct stream **pp = &mcp_mod.streams; *pp; pp = &(*pp)->next) {
		if (*pp == st) {
			*pp = st->next;
			return;
		}
	}
}

static void stream_send(struct mcp_sink *k, json_t *msg, bool is_response)
{
	struct stream *st = (struct stream *)k;
	_cleanup_free_ char *text = dump(msg);
	sse_event(st->ctx, "message", text);
	st->last_write_ms = time_mono_ms();
}

static size_t stream_pending(struct mcp_sink *k)
{
	return http_stream_pending(((struct stream *)k)->ctx);
}

static void stream_request_done(struct mcp_sink *k)
{
	/* Answers went out on the stream as they came. */
}

static void stream_drained(struct http_ctx *ctx, void *arg)
{
	mcp_sink_drained(arg);
}

static void stream_arm_drain(struct mcp_sink *k, size_t below)
{
	struct stream *st = (struct stream *)k;
	http_stream_on_drain(st->ctx, below, stream_drained, &st->sink);
}

static void stream_close(struct stream *st)
{
	stream_unlist(st);
	st->ctx->on_gone = NULL;
	http_stream_on_drain(st->ctx, 0, NULL, NULL);
	http_stream_end(st->ctx);
	mcp_session_unref(st->s);
	free(st);
}

/* The session ended (idle, or deleted): so does its stream. */
static void stream_session_ended(struct mcp_sink *k)
{
	stream_close((struct stream *)k);
}

static const struct mcp_sink_ops stream_ops = {
	.send = stream_send,
	.pending = stream_pending,
	.request_done = stream_request_done,
	.session_ended = stream_session_ended,
	.arm_drain = stream_arm_drain,
};

static void stream_gone(struct http_ctx *ctx, void *arg)
{
	struct stream *st = arg;
	struct mcp_session *s = st->s;
	/* The stream is the session's only way back to its client: without it, the session
	 * is over. Its calls end first (they answer through this stream), then the stream. */
	mcp_session_attach_stream(s, NULL);
	mcp_session_end(s, "its SSE stream closed");
	stream_close(st);
}

static void sse_open(struct http_ctx *ctx, const char *post_path)
{
	struct err e;
	int status;
	struct mcp_session *s = mcp_session_new(api_owner(ctx), &e, &status);
	if (!s) {
		reply_rpc_error(ctx, status, NULL, MCP_SERVER_BUSY, e.msg);
		return;
	}
	struct stream *st = xcalloc(1, sizeof(*st));
	st->sink.ops = &stream_ops;
	st->ctx = ctx;
	st->s = s;
	mcp_session_ref(s);
	mcp_session_attach_stream(s, &st->sink);
	st->next = mcp_mod.streams;
	mcp_mod.streams = st;
	st->last_write_ms = time_mono_ms();
	ctx->on_gone = stream_gone;
	ctx->on_gone_arg = st;
	http_stream_start(ctx, 200, "text/event-stream");
	_cleanup_free_ char *endpoint = xasprintf("%s?sessionId=%s", post_path, mcp_session_id(s));
	sse_event(ctx, "endpoint", endpoint);
	log_info("mcp", "HTTP+SSE session %.8s... opened", mcp_session_id(s));
}

static void sse_post(struct http_ctx *ctx)
{
	if (!precheck(ctx))
		return;
	struct mcp_session *s = mcp_session_find(http_query(ctx, "sessionId"), api_owner(ctx));
	if (!s || !mcp_session_stream(s)) {
		reply_rpc_error(ctx, 404, NULL, MCP_NO_SESSION,
				"Session not found: open a new stream with GET");
		return;
	}
	_cleanup_(mcp_batch_free) struct mcp_batch b = { 0 };
	if (!read_messages(ctx, &b) || !batch_allowed(ctx, &b, mcp_session_version(s)))
		return;
	/* Accepted now, answered on the stream: a later notifications/cancelled must not wait
	 * for this POST's calls. */
	http_reply_bytes(ctx, 202, "application/json", "", 0);
	mcp_session_ref(s);
	for (size_t i = 0; i < b.n; i++) {
		struct mcp_sink *k = mcp_session_stream(s);
		if (!k)
			break;
		mcp_handle(s, k, &b.msgs[i]);
	}
	mcp_session_unref(s);
}

/* --- keep-alives -------------------------------------------------------------------- */

/* SSE comments on quiet streams, so that proxies keep them and dead clients are noticed. */
static void keepalive_tick(evutil_socket_t fd, short what, void *arg)
{
	uint64_t now = time_mono_ms();
	static const char comment[] = ": keepalive\n\n";
	for (struct post *p = mcp_mod.posts; p; p = p->next) {
		if (now - p->last_write_ms >= KEEPALIVE_S * 1000) {
			http_stream_write(p->ctx, comment, sizeof(comment) - 1);
			p->last_write_ms = now;
		}
	}
	for (struct stream *st = mcp_mod.streams; st; st = st->next) {
		if (now - st->last_write_ms >= KEEPALIVE_S * 1000) {
			http_stream_write(st->ctx, comment, sizeof(comment) - 1);
			st->last_write_ms = now;
		}
	}
}

/* --- routes ------------------------------------------------------------------------- */

static void mcp_get(struct http_ctx *ctx)
{
	if (!precheck(ctx))
		return;
	const char *sid = http_header(ctx, "Mcp-Session-Id");
	if (sid) {
		if (!mcp_session_find(sid, api_owner(ctx))) {
			reply_rpc_error(ctx, 404, NULL, MCP_NO_SESSION, "Session not found");
			return;
		}
		http_add_header(ctx, "Allow", "POST, DELETE");
		reply_rpc_error(ctx, 405, NULL, MCP_INVALID_REQUEST,
				"Method Not Allowed: this server sends no messages outside the "
				"answers to POSTs");
		return;
	}
	if (!http_accepts(ctx, "text/event-stream")) {
		reply_rpc_error(ctx, 406, NULL, MCP_INVALID_REQUEST,
				"Not Acceptable: GET /mcp opens an SSE stream (Accept: "
				"text/event-stream); send MCP messages with POST");
		return;
	}
	sse_open(ctx, "/mcp/messages");
}

static void mcp_delete(struct http_ctx *ctx)
{
	if (!precheck(ctx))
		return;
	const char *sid = http_header(ctx, "Mcp-Session-Id");
	if (!sid) {
		reply_rpc_error(ctx, 400, NULL, MCP_INVALID_REQUEST,
				"Bad Request: the Mcp-Session-Id header is required");
		return;
	}
	struct mcp_session *s = mcp_session_find(sid, api_owner(ctx));
	if (!s) {
		reply_rpc_error(ctx, 404, NULL, MCP_NO_SESSION, "Session not found");
		return;
	}
	mcp_session_end(s, "deleted by the client");
	http_reply_json(ctx, 200, json_pack("{s:b}", "deleted", 1));
}

void api_mcp(struct http_ctx *ctx)
{
	const char *method = http_method(ctx);
	if (strcmp(method, "POST") == 0)
		mcp_post(ctx);
	else if (strcmp(method, "GET") == 0)
		mcp_get(ctx);
	else
		mcp_delete(ctx);
}

void api_mcp_sse(struct http_ctx *ctx)
{
	if (!precheck(ctx))
		return;
	sse_open(ctx, "/messages");
}

void api_mcp_messages(struct http_ctx *ctx)
{
	sse_post(ctx);
}
