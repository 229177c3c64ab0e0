#include "api/forward.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http/upstream.h"
#include "loop.h"
#include "metrics/metrics.h"
#include "util/bev.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/text.h"
#include "util/time.h"

#define FWD_HIGH (1u << 20) /* bytes queued toward one side past which the other waits */
#define FWD_LOW  (256u << 10)

struct fwd {
	struct http_ctx *ctx; /* NULL once the reply is out or the client is gone */
	struct bufferevent *peer;
	char node[64];
	char *host;
	int port;
	struct sockaddr_storage addr;
	socklen_t addrlen; /* 0: the node's address could not be resolved */
	char owner[64];
	unsigned scopes;
	bool identity;
	const char *kind;
	uint64_t start_ns;
	bool connected;
	bool buffered;     /* the body was read already: it goes after the head */
	bool body_chunked; /* the body goes out chunked */
	bool body_ended;
	bool upgrade;
	/* the other node's answer */
	struct upstream_reader reader;
	bool head_done;
	/* after a 101: the client's connection, relayed as bytes */
	struct bufferevent *client;
	bool client_eof, peer_eof;
	struct fwd *prev, *next; /* every forward alive (cluster_forward_shutdown) */
};

static struct fwd *live;
static unsigned nlive;

/* At most a quarter of the descriptors this process may open. */
static unsigned max_forwards(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY)
		return 4096;
	return rl.rlim_cur / 4 > 16 ? (unsigned)(rl.rlim_cur / 4) : 16;
}

static void fwd_free(struct fwd *f)
{
	nlive--;
	if (f->prev)
		f->prev->next = f->next;
	else if (live == f)
		live = f->next;
	if (f->next)
		f->next->prev = f->prev;
	if (f->ctx) {
		f->ctx->on_gone = NULL;
		http_stream_on_drain(f->ctx, 0, NULL, NULL);
	}
	if (f->peer)
		bufferevent_free(f->peer);
	if (f->client)
		bufferevent_free(f->client);
	upstream_reader_free(&f->reader);
	free(f->host);
	free(f);
}

static void count(struct fwd *f, const char *result)
{
	metrics_add(metrics_daemon.cluster_forwarded_total, 1, f->kind, result);
}

/* Ends the request with an error (or cuts an answer under way) and frees f. */
static void fwd_fail(struct fwd *f, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void fwd_fail(struct fwd *f, int status, const char *fmt, ...)
{
	struct http_ctx *ctx = f->ctx;
	if (ctx) {
		ctx->on_gone = NULL;
		http_stream_on_drain(ctx, 0, NULL, NULL);
		f->ctx = NULL;
		if (f->head_done) {
			http_stream_abort(ctx);
		} else {
			char msg[600];
			va_list ap;
			va_start(ap, fmt);
			vsnprintf(msg, sizeof(msg), fmt, ap);
			va_end(ap);
			count(f, "failure");
			log_warn("cluster", "%s", msg);
			http_reply_error(ctx, status, "%s", msg);
		}
	}
	fwd_free(f);
}

/* --- the request toward the other node ------------------------------------------------ */

/* Besides the hop-by-hop headers: ours, which only this node sets, and the key of a caller
 * this node vouches for (it does not cross the link between the nodes). */
static enum upstream_header head_filter(const char *name, const char *value, struct evbuffer *out,
					void *arg)
{
	struct fwd *f = arg;
	if (!strcasecmp(name, CLUSTER_PEER_HEADER) || !strcasecmp(name, "X-Forwarded-For"))
		return UPSTREAM_DROP;
	if (f->identity && (!strcasecmp(name, "Authorization") || !strcasecmp(name, "X-API-Key")))
		return UPSTREAM_DROP;
	return UPSTREAM_KEEP;
}

static void head_extra(struct evbuffer *out, void *arg)
{
	struct fwd *f = arg;
	struct http_ctx *ctx = f->ctx;
	_cleanup_free_ char *sig =
		cluster_peer_sign(f->node, http_method(ctx), http_target(ctx),
				  f->identity ? f->owner : "", f->identity ? f->scopes : 0);
	evbuffer_add_printf(out, CLUSTER_PEER_HEADER ": %s\r\nX-Forwarded-For: %s\r\n", sig,
			    http_peer(ctx));
}

static void send_head(struct fwd *f)
{
	struct upstream_request r = {
		.target = http_target(f->ctx),
		.filter = head_filter,
		.extra = head_extra,
		.arg = f,
		.buffered = f->buffered,
		.upgrade = f->upgrade,
	};
	f->body_chunked = upstream_write_head(bufferevent_get_output(f->peer), f->ctx, &r);
	if (f->buffered)
		f->body_ended = true;
}

static int body_data(struct http_ctx *ctx, const uint8_t *data, size_t len, void *arg)
{
	struct fwd *f = arg;
	struct evbuffer *out = bufferevent_get_output(f->peer);
	upstream_body_piece(out, data, len, f->body_chunked);
	if (evbuffer_get_length(out) >= FWD_HIGH || !f->connected)
		http_body_pause(ctx);
	return 0;
}

static void body_end(struct http_ctx *ctx, void *arg)
{
	struct fwd *f = arg;
	f->body_ended = true;
	upstream_body_end(bufferevent_get_output(f->peer), f->body_chunked);
	/* Nothing more to hold back: reading on is what lets a client that leaves be seen. */
	http_body_resume(ctx);
}

static const struct http_body_ops body_ops = { .data = body_data, .end = body_end };

/* --- the answer ----------------------------------------------------------------------- */

static int on_answer_head(const struct upstream_answer *a, void *arg)
{
	struct fwd *f = arg;
	struct http_ctx *ctx = f->ctx;
	if (!ctx)
		return -1;
	for (size_t i = 0; i < a->nheaders; i++) {
		const char *name, *value;
		upstream_reader_header_at(&f->reader, i, &name, &value);
		if (!upstream_hop_response_header(name, a->connection) &&
		    strcasecmp(name, "X-Request-Id") != 0)
			http_add_header(ctx, name, value);
	}
	metrics_observe(metrics_daemon.cluster_forward_duration,
			(double)(time_mono_ns() - f->start_ns) / 1e9, f->kind);
	count(f, "success");
	f->head_done = true;
	if (a->upgrade) {
		http_add_header(ctx, "Connection", "Upgrade");
		for (size_t i = 0; i < a->nheaders; i++) {
			const char *name, *value;
			upstream_reader_header_at(&f->reader, i, &name, &value);
			if (!strcasecmp(name, "Upgrade"))
				http_add_header(ctx, "Upgrade", value);
		}
		return 0; /* the rest is the relay's */
	}
	http_stream_start_raw(ctx, a->status, a->length);
	return 0;
}

static int on_answer_body(const char *at, size_t len, void *arg)
{
	struct fwd *f = arg;
	if (!f->ctx)
		return -1;
	http_stream_write(f->ctx, at, len);
	return 0;
}

static const struct upstream_reader_cbs answer_cbs = {
	.on_head = on_answer_head,
	.on_body = on_answer_body,
};

static void on_client_drained(struct http_ctx *ctx, void *arg);

/* The answer is whole: our client's reply ends, and with it f. */
static void fwd_complete(struct fwd *f)
{
	struct http_ctx *ctx = f->ctx;
	if (ctx) {
		ctx->on_gone = NULL;
		http_stream_on_drain(ctx, 0, NULL, NULL);
		f->ctx = NULL;
		http_stream_end(ctx);
	}
	fwd_free(f);
}

static void relay_start(struct fwd *f);

/* Feeds what the other node sent to the reader. Returns false once f is gone. */
static bool feed(struct fwd *f, bool eof)
{
	struct evbuffer *in = bufferevent_get_input(f->peer);
	size_t avail = evbuffer_get_length(in);
	if (avail) {
		ssize_t used = upstream_reader_feed(&f->reader,
						    (const char *)evbuffer_pullup(in, -1), avail);
		if (used < 0) {
			fwd_fail(f, 502, "node %s sent a malformed answer (%s)", f->node,
				 f->reader.why);
			return false;
		}
		evbuffer_drain(in, (size_t)used);
	}
	if (!f->reader.done && eof && upstream_reader_eof(&f->reader) < 0) {
		fwd_fail(f, 502, "node %s closed the connection before its answer was complete",
			 f->node);
		return false;
	}
	if (f->reader.upgraded) {
		relay_start(f);
		return false;
	}
	if (f->reader.done) {
		fwd_complete(f);
		return false;
	}
	/* Our client is slow: the other node waits until it took most of what is queued. */
	if (f->ctx && http_stream_pending(f->ctx) >= FWD_HIGH) {
		bufferevent_disable(f->peer, EV_READ);
		http_stream_on_drain(f->ctx, FWD_LOW, on_client_drained, f);
	}
	return true;
}

static void on_client_drained(struct http_ctx *ctx, void *arg)
{
	struct fwd *f = arg;
	http_stream_on_drain(ctx, 0, NULL, NULL);
	bufferevent_enable(f->peer, EV_READ);
	feed(f, false);
}

static void on_peer_read(struct bufferevent *bev, void *arg)
{
	bev_fill(bev, BEV_FILL_MAX);
	feed(arg, false);
}

static void on_peer_write(struct bufferevent *bev, void *arg)
{
	struct fwd *f = arg;
	if (f->ctx && !f->body_ended && !f->buffered)
		http_body_resume(f->ctx);
}

static void on_peer_event(struct bufferevent *bev, short what, void *arg)
{
	struct fwd *f = arg;
	if (what & BEV_EVENT_CONNECTED) {
		f->connected = true;
		bufferevent_set_timeouts(bev, NULL, NULL);
		if (f->ctx && !f->buffered && !f->body_ended)
			http_body_resume(f->ctx);
		return;
	}
	if (!f->connected) {
		fwd_fail(f, 502, "node %s (%s:%d) cannot be reached: %s", f->node, f->host, f->port,
			 (what & BEV_EVENT_TIMEOUT)
				 ? "no connection in time"
				 : evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
		return;
	}
	if (what & BEV_EVENT_EOF) {
		feed(f, true);
		return;
	}
	fwd_fail(f, 502, "the connection to node %s failed", f->node);
}

static void on_client_gone(struct http_ctx *ctx, void *arg)
{
	struct fwd *f = arg;
	/* Its drain callback must not run on f once f is gone; and the request must end (a
	 * reply nobody reads) so that it is freed. */
	http_stream_on_drain(ctx, 0, NULL, NULL);
	f->ctx = NULL;
	fwd_free(f);
	http_stream_abort(ctx);
}

/* --- after a 101 ---------------------------------------------------------------------- */

static void relay_maybe_end(struct fwd *f)
{
	/* Both sides ended, and what each sent is out. */
	if (f->client_eof && f->peer_eof &&
	    !evbuffer_get_length(bufferevent_get_output(f->client)) &&
	    !evbuffer_get_length(bufferevent_get_output(f->peer)))
		fwd_free(f);
}

static void relay_move(struct bufferevent *from, struct bufferevent *to)
{
	struct evbuffer *out = bufferevent_get_output(to);
	bev_fill(from, BEV_FILL_MAX);
	evbuffer_add_buffer(out, bufferevent_get_input(from));
	if (evbuffer_get_length(out) >= FWD_HIGH)
		bufferevent_disable(from, EV_READ);
}

static void relay_client_read(struct bufferevent *bev, void *arg)
{
	struct fwd *f = arg;
	relay_move(f->client, f->peer);
}

static void relay_peer_read(struct bufferevent *bev, void *arg)
{
	struct fwd *f = arg;
	relay_move(f->peer, f->client);
}

/* One side sent its end and what it sent before is all out to the other: tell that one. */
static void relay_half_close(struct bufferevent *to)
{
	evutil_socket_t fd = bufferevent_getfd(to);
	if (fd >= 0 && !evbuffer_get_length(bufferevent_get_output(to)))
		shutdown(fd, SHUT_WR);
}

static void relay_client_write(struct bufferevent *bev, void *arg)
{
	struct fwd *f = arg;
	if (!f->peer_eof) {
		bufferevent_enable(f->peer, EV_READ);
		return;
	}
	relay_half_close(f->client);
	relay_maybe_end(f);
}

static void relay_peer_write(struct bufferevent *bev, void *arg)
{
	struct fwd *f = arg;
	if (!f->client_eof) {
		bufferevent_enable(f->client, EV_READ);
		return;
	}
	relay_half_close(f->peer);
	relay_maybe_end(f);
}

static void relay_event(struct fwd *f, bool from_client, short what)
{
	if (what & BEV_EVENT_ERROR) {
		fwd_free(f);
		return;
	}
	if (!(what & BEV_EVENT_EOF))
		return;
	struct bufferevent *other = from_client ? f->peer : f->client;
	if (from_client)
		f->client_eof = true;
	else
		f->peer_eof = true;
	/* Half-closed: the other side is told once what was sent is out. */
	evutil_socket_t fd = bufferevent_getfd(other);
	if (fd >= 0 && !evbuffer_get_length(bufferevent_get_output(other)))
		shutdown(fd, SHUT_WR);
	if (f->client_eof && f->peer_eof)
		fwd_free(f);
}

static void relay_client_event(struct bufferevent *bev, short what, void *arg)
{
	relay_event(arg, true, what);
}

static void relay_peer_event(struct bufferevent *bev, short what, void *arg)
{
	relay_event(arg, false, what);
}

static void relay_start(struct fwd *f)
{
	struct http_ctx *ctx = f->ctx;
	ctx->on_gone = NULL;
	http_stream_on_drain(ctx, 0, NULL, NULL);
	f->ctx = NULL;
	f->client = http_upgrade_raw(ctx, 101);
	if (!f->client) {
		fwd_free(f);
		return;
	}
	bufferevent_setwatermark(f->client, EV_WRITE, FWD_LOW, 0);
	bufferevent_setwatermark(f->peer, EV_WRITE, FWD_LOW, 0);
	bufferevent_setcb(f->client, relay_client_read, relay_client_write, relay_client_event, f);
	bufferevent_setcb(f->peer, relay_peer_read, relay_peer_write, relay_peer_event, f);
	/* What each side sent past the heads goes first. */
	relay_move(f->peer, f->client);
	relay_move(f->client, f->peer);
	bufferevent_enable(f->client, EV_READ | EV_WRITE);
	bufferevent_enable(f->peer, EV_READ | EV_WRITE);
}

/* --- starting ------------------------------------------------------------------------- */

static void keepalive(struct bufferevent *bev)
{
	/* A node that vanishes (power, partition) is noticed: no answer to these, the
	 * connection fails. */
	evutil_socket_t fd = bufferevent_getfd(bev);
	int on = 1, idle = 10, intvl = 5, cnt = 3;
	setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
	setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

/* The connection to the other node, its head queued before any byte of the body can come
 * (the body is paused until the connection is up). */
static void fwd_start(struct fwd *f, const struct sockaddr *sa, socklen_t len)
{
	struct http_ctx *ctx = f->ctx;
	f->start_ns = time_mono_ns();
	f->upgrade = http_upgrade_requested(ctx);
	ctx->on_gone = on_client_gone;
	ctx->on_gone_arg = f;
	f->peer = bufferevent_socket_new(cluster_event_base(), -1, BEV_OPT_CLOSE_ON_FREE);
	bev_large_writes(f->peer);
	bufferevent_setcb(f->peer, on_peer_read, on_peer_write, on_peer_event, f);
	bufferevent_setwatermark(f->peer, EV_WRITE, FWD_LOW, 0);
	unsigned ms = cluster_timeout_ms();
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };
	bufferevent_set_timeouts(f->peer, &tv, &tv);
	upstream_reader_init(&f->reader, &answer_cbs, f, ctx->head_only, f->upgrade);
	send_head(f);
	if (!sa) {
		fwd_fail(f, 502, "node %s's address `%s` could not be resolved", f->node, f->host);
		return;
	}
	if (bufferevent_socket_connect(f->peer, sa, (int)len) < 0) {
		fwd_fail(f, 502, "node %s (%s:%d) cannot be reached", f->node, f->host, f->port);
		return;
	}
	keepalive(f->peer);
	bufferevent_enable(f->peer, EV_READ | EV_WRITE);
}

static struct fwd *fwd_new(struct http_ctx *ctx, const struct cluster_node *n, const char *owner,
			   unsigned scopes, bool identity, const char *kind)
{
	struct fwd *f = xcalloc(1, sizeof(*f));
	f->ctx = ctx;
	f->next = live;
	if (live)
		live->prev = f;
	live = f;
	nlive++;
	snprintf(f->node, sizeof(f->node), "%s", n->name);
	f->host = xstrdup(n->host);
	f->port = n->port;
	if (n->addr && n->addrlen <= sizeof(f->addr)) {
		memcpy(&f->addr, n->addr, n->addrlen);
		f->addrlen = n->addrlen;
	}
	snprintf(f->owner, sizeof(f->owner), "%s", owner ? owner : "");
	f->scopes = scopes;
	f->identity = identity;
	f->kind = kind;
	return f;
}

static void forward_handler(struct http_ctx *ctx)
{
	struct fwd *f = ctx->route_arg;
	ctx->route_arg = NULL;
	ctx->route_arg_free = NULL;
	f->ctx = ctx;
	/* Forwards hold a descriptor each, counted by no connection cap: they have their own. */
	if (nlive > max_forwards()) {
		http_add_header(ctx, "Retry-After", "1");
		fwd_fail(f, 503,
			 "this node is forwarding %u requests to other nodes already: try "
			 "again",
			 nlive - 1);
		return;
	}
	/* The body waits until the connection is up; the head goes first. */
	http_body_stream(ctx, &body_ops, f);
	uint64_t length;
	bool chunked;
	http_body_framing(ctx, &length, &chunked);
	if (length || chunked)
		http_body_pause(ctx);
	fwd_start(f, f->addrlen ? (const struct sockaddr *)&f->addr : NULL, f->addrlen);
}

static void fwd_arg_free(void *arg)
{
	fwd_free(arg);
}

/* Every method, any body as large as an upload's: the other node applies its own limits. */
const struct http_route cluster_forward_route = {
	HTTP_REQ_GET | HTTP_REQ_POST | HTTP_REQ_PUT | HTTP_REQ_DELETE | HTTP_REQ_PATCH |
		HTTP_REQ_HEAD | HTTP_REQ_OPTIONS,
	"(forwarded to another node)",
	forward_handler,
	NULL,
	(size_t)1 << 46,
	HTTP_ROUTE_STREAM_BODY | HTTP_ROUTE_SELF_AUTH,
};

void cluster_forward_at_head(struct http_ctx *ctx, const struct cluster_node *n, const char *owner,
			     unsigned scopes, bool identity, const char *kind)
{
	struct fwd *f = fwd_new(ctx, n, owner, scopes, identity, kind);
	f->ctx = NULL; /* the handler takes it */
	http_reroute(ctx, &cluster_forward_route, f, fwd_arg_free);
}

void cluster_forward_buffered(struct http_ctx *ctx, const struct cluster_node *n, const char *owner,
			      unsigned scopes, const char *kind)
{
	struct fwd *f = fwd_new(ctx, n, owner, scopes, true, kind);
	f->buffered = true;
	fwd_start(f, f->addrlen ? (const struct sockaddr *)&f->addr : NULL, f->addrlen);
}

void cluster_forward_shutdown(void)
{
	/* What outlives the HTTP server: relays after an upgrade. Their clients are gone with
	 * the server. */
	while (live) {
		live->ctx = NULL;
		fwd_free(live);
	}
}
