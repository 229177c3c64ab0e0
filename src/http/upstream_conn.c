/* upstream_conn: see upstream.h (a relay over a socket of its own). */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "http/upstream.h"
#include "util/bev.h"
#include "util/cleanup.h"

struct upstream_conn {
	struct http_ctx *ctx; /* NULL once the reply is out or the client is gone */
	const struct upstream_conn_cbs *cb;
	void *arg;
	struct bufferevent *peer;
	struct upstream_reader reader;
	unsigned idle_timeout_ms;
	bool connected;
	bool buffered;     /* the body was read already: it went after the head */
	bool body_chunked; /* the body goes out chunked */
	bool body_ended;
	bool head_done;
	/* after a 101: the client's connection, relayed as bytes */
	struct bufferevent *client;
	bool client_eof, peer_eof;
};

static void detach(struct upstream_conn *u)
{
	if (!u->ctx)
		return;
	u->ctx->on_gone = NULL;
	http_stream_on_drain(u->ctx, 0, NULL, NULL);
	u->ctx = NULL;
}

static void conn_free(struct upstream_conn *u)
{
	detach(u);
	if (u->peer)
		bufferevent_free(u->peer);
	if (u->client)
		bufferevent_free(u->client);
	upstream_reader_free(&u->reader);
	free(u);
}

/* The relay is over: the caller hears of it, then u goes. */
static void finish(struct upstream_conn *u)
{
	const struct upstream_conn_cbs *cb = u->cb;
	void *arg = u->arg;
	conn_free(u);
	if (cb->on_done)
		cb->on_done(arg);
}

void upstream_close(struct upstream_conn *u)
{
	if (!u)
		return;
	u->ctx = NULL; /* gone with the HTTP server */
	conn_free(u);
}

/* Ends the request with an error (the caller's to word), or cuts an answer under way. */
static void conn_fail(struct upstream_conn *u, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void conn_fail(struct upstream_conn *u, int status, const char *fmt, ...)
{
	struct http_ctx *ctx = u->ctx;
	detach(u);
	if (ctx) {
		if (u->head_done) {
			http_stream_abort(ctx);
		} else {
			char msg[400];
			va_list ap;
			va_start(ap, fmt);
			vsnprintf(msg, sizeof(msg), fmt, ap);
			va_end(ap);
			u->cb->on_fail(ctx, status, msg, u->arg);
		}
	}
	finish(u);
}

/* --- the request ------------------------------------------------------------------------- */

static int body_data(struct http_ctx *ctx, const uint8_t *data, size_t len, void *arg)
{
	struct upstream_conn *u = arg;
	struct evbuffer *out = bufferevent_get_output(u->peer);
	upstream_body_piece(out, data, len, u->body_chunked);
	if (evbuffer_get_length(out) >= UPSTREAM_HIGH || !u->connected)
		http_body_pause(ctx);
	return 0;
}

static void body_end(struct http_ctx *ctx, void *arg)
{
	struct upstream_conn *u = arg;
	u->body_ended = true;
	upstream_body_end(bufferevent_get_output(u->peer), u->body_chunked);
	/* Nothing more to hold back: reading on is what lets a client that leaves be seen. */
	http_body_resume(ctx);
}

static const struct http_body_ops body_ops = { .data = body_data, .end = body_end };

/* --- the answer -------------------------------------------------------------------------- */

static int on_answer_head(const struct upstream_answer *a, void *arg)
{
	struct upstream_conn *u = arg;
	if (!u->ctx || (u->cb->on_head && u->cb->on_head(a, &u->reader, u->arg) < 0))
		return -1;
	u->head_done = true;
	if (u->idle_timeout_ms)
		bufferevent_set_timeouts(u->peer, NULL, NULL);
	if (!a->upgrade)
		http_stream_start_raw(u->ctx, a->status, a->length);
	return 0;
}

static int on_answer_body(const char *at, size_t len, void *arg)
{
	struct upstream_conn *u = arg;
	if (!u->ctx)
		return -1;
	http_stream_write(u->ctx, at, len);
	return 0;
}

static const struct upstream_reader_cbs answer_cbs = {
	.on_head = on_answer_head,
	.on_body = on_answer_body,
};

/* The answer is whole: our client's reply ends, and with it u. */
static void conn_complete(struct upstream_conn *u)
{
	struct http_ctx *ctx = u->ctx;
	detach(u);
	if (ctx)
		http_stream_end(ctx);
	finish(u);
}

static void tunnel_start(struct upstream_conn *u);
static void on_client_drained(struct http_ctx *ctx, void *arg);

/* Feeds what the upstream sent to the reader. */
static void feed(struct upstream_conn *u, bool eof)
{
	struct evbuffer *in = bufferevent_get_input(u->peer);
	size_t avail = evbuffer_get_length(in);
	if (avail) {
		ssize_t used = upstream_reader_feed(&u->reader,
						    (const char *)evbuffer_pullup(in, -1), avail);
		if (used < 0) {
			conn_fail(u, 502, "sent a malformed answer (%s)", u->reader.why);
			return;
		}
		evbuffer_drain(in, (size_t)used);
	}
	if (!u->reader.done && eof && upstream_reader_eof(&u->reader) < 0) {
		conn_fail(u, 502, "closed the connection before its answer was complete");
		return;
	}
	if (u->reader.upgraded) {
		tunnel_start(u);
		return;
	}
	if (u->reader.done) {
		conn_complete(u);
		return;
	}
	/* Our client is slow: the upstream waits until it took most of what is queued. */
	if (u->ctx && http_stream_pending(u->ctx) >= UPSTREAM_HIGH) {
		bufferevent_disable(u->peer, EV_READ);
		http_stream_on_drain(u->ctx, UPSTREAM_LOW, on_client_drained, u);
	}
}

static void on_client_drained(struct http_ctx *ctx, void *arg)
{
	struct upstream_conn *u = arg;
	http_stream_on_drain(ctx, 0, NULL, NULL);
	bufferevent_enable(u->peer, EV_READ);
	feed(u, false);
}

static void on_peer_read(struct bufferevent *bev, void *arg)
{
	bev_fill(bev, BEV_FILL_MAX);
	feed(arg, false);
}

static void on_peer_write(struct bufferevent *bev, void *arg)
{
	struct upstream_conn *u = arg;
	if (u->ctx && !u->body_ended && !u->buffered)
		http_body_resume(u->ctx);
}

static void set_timeout(struct bufferevent *bev, unsigned ms)
{
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
	bufferevent_set_timeouts(bev, ms ? &tv : NULL, NULL);
}

static void on_peer_event(struct bufferevent *bev, short what, void *arg)
{
	struct upstream_conn *u = arg;
	if (what & BEV_EVENT_CONNECTED) {
		u->connected = true;
		bufferevent_set_timeouts(bev, NULL, NULL);
		set_timeout(bev, u->idle_timeout_ms);
		if (u->ctx && !u->buffered && !u->body_ended)
			http_body_resume(u->ctx);
		return;
	}
	if (!u->connected) {
		conn_fail(u, 502, "cannot be reached: %s",
			  (what & BEV_EVENT_TIMEOUT)
				  ? "no connection in time"
				  : evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
		return;
	}
	if (what & BEV_EVENT_TIMEOUT) {
		conn_fail(u, 504, "sent nothing for %u ms", u->idle_timeout_ms);
		return;
	}
	if (what & BEV_EVENT_EOF) {
		feed(u, true);
		return;
	}
	conn_fail(u, 502, "the connection failed");
}

static void on_client_gone(struct http_ctx *ctx, void *arg)
{
	struct upstream_conn *u = arg;
	/* Its drain callback must not run on u once u is gone; and the request must end (a
	 * reply nobody reads) so that it is freed. */
	http_stream_on_drain(ctx, 0, NULL, NULL);
	u->ctx = NULL;
	finish(u);
	http_stream_abort(ctx);
}

/* --- after a 101: a byte tunnel ---------------------------------------------------------- */

static void tunnel_maybe_end(struct upstream_conn *u)
{
	/* Both sides ended, and what each sent is out. */
	if (u->client_eof && u->peer_eof &&
	    !evbuffer_get_length(bufferevent_get_output(u->client)) &&
	    !evbuffer_get_length(bufferevent_get_output(u->peer)))
		finish(u);
}

static void tunnel_move(struct bufferevent *from, struct bufferevent *to)
{
	struct evbuffer *out = bufferevent_get_output(to);
	bev_fill(from, BEV_FILL_MAX);
	evbuffer_add_buffer(out, bufferevent_get_input(from));
	if (evbuffer_get_length(out) >= UPSTREAM_HIGH)
		bufferevent_disable(from, EV_READ);
}

static void tunnel_client_read(struct bufferevent *bev, void *arg)
{
	struct upstream_conn *u = arg;
	tunnel_move(u->client, u->peer);
}

static void tunnel_peer_read(struct bufferevent *bev, void *arg)
{
	struct upstream_conn *u = arg;
	tunnel_move(u->peer, u->client);
}

/* One side sent its end and what it sent before is all out to the other: tell that one. */
static void tunnel_half_close(struct bufferevent *to)
{
	evutil_socket_t fd = bufferevent_getfd(to);
	if (fd >= 0 && !evbuffer_get_length(bufferevent_get_output(to)))
		shutdown(fd, SHUT_WR);
}

static void tunnel_client_write(struct bufferevent *bev, void *arg)
{
	struct upstream_conn *u = arg;
	if (!u->peer_eof) {
		bufferevent_enable(u->peer, EV_READ);
		return;
	}
	tunnel_half_close(u->client);
	tunnel_maybe_end(u);
}

static void tunnel_peer_write(struct bufferevent *bev, void *arg)
{
	struct upstream_conn *u = arg;
	if (!u->client_eof) {
		bufferevent_enable(u->client, EV_READ);
		return;
	}
	tunnel_half_close(u->peer);
	tunnel_maybe_end(u);
}

static void tunnel_event(struct upstream_conn *u, bool from_client, short what)
{
	if (what & BEV_EVENT_ERROR) {
		finish(u);
		return;
	}
	if (!(what & BEV_EVENT_EOF))
		return;
	struct bufferevent *other = from_client ? u->peer : u->client;
	if (from_client)
		u->client_eof = true;
	else
		u->peer_eof = true;
	/* Half-closed: the other side is told once what was sent is out. */
	tunnel_half_close(other);
	if (u->client_eof && u->peer_eof)
		finish(u);
}

static void tunnel_client_event(struct bufferevent *bev, short what, void *arg)
{
	tunnel_event(arg, true, what);
}

static void tunnel_peer_event(struct bufferevent *bev, short what, void *arg)
{
	tunnel_event(arg, false, what);
}

static void tunnel_start(struct upstream_conn *u)
{
	struct http_ctx *ctx = u->ctx;
	detach(u);
	u->client = ctx ? http_upgrade_raw(ctx, 101) : NULL;
	if (!u->client) {
		finish(u);
		return;
	}
	bufferevent_set_timeouts(u->peer, NULL, NULL);
	bufferevent_setwatermark(u->client, EV_WRITE, UPSTREAM_LOW, 0);
	bufferevent_setwatermark(u->peer, EV_WRITE, UPSTREAM_LOW, 0);
	bufferevent_setcb(u->client, tunnel_client_read, tunnel_client_write, tunnel_client_event,
			  u);
	bufferevent_setcb(u->peer, tunnel_peer_read, tunnel_peer_write, tunnel_peer_event, u);
	/* What each side sent past the heads goes first. */
	tunnel_move(u->peer, u->client);
	tunnel_move(u->client, u->peer);
	bufferevent_enable(u->client, EV_READ | EV_WRITE);
	bufferevent_enable(u->peer, EV_READ | EV_WRITE);
}

/* --- starting ---------------------------------------------------------------------------- */

static void keepalive(struct bufferevent *bev)
{
	/* An upstream host that vanishes (power, partition) is noticed: no answer to these,
	 * the connection fails. */
	evutil_socket_t fd = bufferevent_getfd(bev);
	int on = 1, idle = 10, intvl = 5, cnt = 3;
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

struct upstream_conn *upstream_open(struct http_ctx *ctx, const struct upstream_conn_cfg *cfg,
				    const struct upstream_conn_cbs *cb, void *arg)
{
	struct upstream_conn *u = xcalloc(1, sizeof(*u));
	u->ctx = ctx;
	u->cb = cb;
	u->arg = arg;
	u->buffered = cfg->request->buffered;
	u->idle_timeout_ms = cfg->idle_timeout_ms;
	ctx->on_gone = on_client_gone;
	ctx->on_gone_arg = u;
	u->peer = bufferevent_socket_new(cfg->base, -1, BEV_OPT_CLOSE_ON_FREE);
	bev_large_writes(u->peer);
	bufferevent_setcb(u->peer, on_peer_read, on_peer_write, on_peer_event, u);
	bufferevent_setwatermark(u->peer, EV_WRITE, UPSTREAM_LOW, 0);
	unsigned ms = cfg->connect_timeout_ms;
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
	if (ms)
		bufferevent_set_timeouts(u->peer, &tv, &tv);
	upstream_reader_init(&u->reader, &answer_cbs, u, ctx->head_only, cfg->request->upgrade);
	/* The head goes first; the body waits for the connection (or went with the head). */
	u->body_chunked = upstream_write_head(bufferevent_get_output(u->peer), ctx, cfg->request);
	if (u->buffered) {
		u->body_ended = true;
	} else {
		http_body_stream(ctx, &body_ops, u);
		uint64_t length;
		bool chunked;
		http_body_framing(ctx, &length, &chunked);
		if (length || chunked)
			http_body_pause(ctx);
	}
	if (bufferevent_socket_connect(u->peer, cfg->addr, (int)cfg->addrlen) < 0) {
		conn_fail(u, 502, "cannot be reached: %s", strerror(errno));
		return NULL;
	}
	if (cfg->addr->sa_family == AF_INET || cfg->addr->sa_family == AF_INET6)
		keepalive(u->peer);
	bufferevent_enable(u->peer, EV_READ | EV_WRITE);
	return u;
}
