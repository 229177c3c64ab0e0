#include "api/forward.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "http/upstream.h"
#include "loop.h"
#include "metrics/metrics.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/text.h"
#include "util/time.h"

struct fwd {
	struct http_ctx *ctx; /* until the relay has it */
	struct upstream_conn *u;
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
	bool buffered;           /* the body was read already: it goes after the head */
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
	upstream_close(f->u);
	free(f->host);
	free(f);
}

static void count(struct fwd *f, const char *result)
{
	metrics_add(metrics_daemon.cluster_forwarded_total, 1, f->kind, result);
}

/* Answers the request with an error. */
static void fwd_reply_error(struct fwd *f, struct http_ctx *ctx, int status, const char *msg)
{
	count(f, "failure");
	log_warn("cluster", "%s", msg);
	http_reply_error(ctx, status, "%s", msg);
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

static int on_answer_head(const struct upstream_answer *a, const struct upstream_reader *r,
			  void *arg)
{
	struct fwd *f = arg;
	struct http_ctx *ctx = f->ctx;
	for (size_t i = 0; i < a->nheaders; i++) {
		const char *name, *value;
		upstream_reader_header_at(r, i, &name, &value);
		if (!upstream_hop_response_header(name, a->connection) &&
		    strcasecmp(name, "X-Request-Id") != 0)
			http_add_header(ctx, name, value);
	}
	metrics_observe(metrics_daemon.cluster_forward_duration,
			(double)(time_mono_ns() - f->start_ns) / 1e9, f->kind);
	count(f, "success");
	if (a->upgrade) {
		http_add_header(ctx, "Connection", "Upgrade");
		for (size_t i = 0; i < a->nheaders; i++) {
			const char *name, *value;
			upstream_reader_header_at(r, i, &name, &value);
			if (!strcasecmp(name, "Upgrade"))
				http_add_header(ctx, "Upgrade", value);
		}
	}
	return 0;
}

static void on_relay_fail(struct http_ctx *ctx, int status, const char *why, void *arg)
{
	struct fwd *f = arg;
	char msg[600];
	snprintf(msg, sizeof(msg), "node %s (%s:%d) %s", f->node, f->host, f->port, why);
	fwd_reply_error(f, ctx, status, msg);
}

static void on_relay_done(void *arg)
{
	struct fwd *f = arg;
	f->u = NULL;
	fwd_free(f);
}

static const struct upstream_conn_cbs relay_cbs = {
	.on_head = on_answer_head,
	.on_fail = on_relay_fail,
	.on_done = on_relay_done,
};

/* The relay to the other node (http/upstream.h): the head goes first, the body as the node
 * takes it, the answer as our client takes it. */
static void fwd_start(struct fwd *f, struct http_ctx *ctx)
{
	f->start_ns = time_mono_ns();
	if (!f->addrlen) {
		char msg[300];
		snprintf(msg, sizeof(msg), "node %s's address `%s` could not be resolved", f->node,
			 f->host);
		fwd_reply_error(f, ctx, 502, msg);
		fwd_free(f);
		return;
	}
	struct upstream_request req = {
		.target = http_target(ctx),
		.filter = head_filter,
		.extra = head_extra,
		.arg = f,
		.buffered = f->buffered,
		.upgrade = http_upgrade_requested(ctx),
	};
	struct upstream_conn_cfg cfg = {
		.base = cluster_event_base(),
		.addr = (const struct sockaddr *)&f->addr,
		.addrlen = f->addrlen,
		.connect_timeout_ms = cluster_timeout_ms(),
		.request = &req,
	};
	f->ctx = ctx;
	struct upstream_conn *u = upstream_open(ctx, &cfg, &relay_cbs, f);
	if (u) /* NULL: it failed, and on_relay_done freed f */
		f->u = u;
}

static struct fwd *fwd_new(struct http_ctx *ctx, const struct cluster_node *n, const char *owner,
			   unsigned scopes, bool identity, const char *kind)
{
	struct fwd *f = xcalloc(1, sizeof(*f));
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
	/* Forwards hold a descriptor each, counted by no connection cap: they have their own. */
	if (nlive > max_forwards()) {
		char msg[200];
		snprintf(msg, sizeof(msg),
			 "this node is forwarding %u requests to other nodes already: try again",
			 nlive - 1);
		http_add_header(ctx, "Retry-After", "1");
		fwd_reply_error(f, ctx, 503, msg);
		fwd_free(f);
		return;
	}
	fwd_start(f, ctx);
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
	http_reroute(ctx, &cluster_forward_route, f, fwd_arg_free);
}

void cluster_forward_buffered(struct http_ctx *ctx, const struct cluster_node *n, const char *owner,
			      unsigned scopes, const char *kind)
{
	struct fwd *f = fwd_new(ctx, n, owner, scopes, true, kind);
	f->buffered = true;
	fwd_start(f, ctx);
}

void cluster_forward_shutdown(void)
{
	/* What outlives the HTTP server: relays after an upgrade. Their clients are gone with
	 * the server. */
	while (live)
		fwd_free(live);
}
