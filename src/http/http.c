/* http: see http.h. One struct http_conn per accepted socket, a bufferevent under it and an
 * h1 reader (http_parser) over its bytes; one struct http_ctx per request.
 *
 * A connection's life, in states:
 *   IDLE    no byte of a request yet (a new connection, or between keep-alive requests)
 *   HEAD    a request's head is arriving; when it is complete its route is chosen and its
 *           key checked (http.h) before the body is looked at
 *   BODY    its body is arriving: buffered up to the route's limit, or streamed
 *   WAIT    the request is complete and its handler answers; bytes the client sends
 *           meanwhile (a pipelined request) wait in the input, up to a bound
 *   LINGER  the request was refused before its body was read: the body is read and dropped,
 *           up to a bound, so that the client sees the answer rather than a reset
 *   CLOSING the reply is going out and then the connection closes
 *
 * IDLE and HEAD connections are the ones a client can hold without having been let in: they
 * are the ones evicted when a cap is reached (oldest first, after one last look at what they
 * sent), and the ones a deadline closes. */
#include "http/http.h"

#include <arpa/inet.h>
#include <linux/sockios.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/queue.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "http/h1.h"
#include "http/internal.h"
#include "loop.h"
#include "util/bev.h"
#include "util/cleanup.h"
#include "util/jsonlimit.h"
#include "util/jsonload.h"
#include "util/log.h"
#include "util/text.h"
#include "util/time.h"

/* How long accepting pauses when it fails for want of descriptors (EMFILE, ENFILE) or
 * memory: a failing accept() in a level-triggered loop would otherwise spin. */
#define ACCEPT_PAUSE_MS 100

/* Defaults of the settings (config.h) when they are 0. */
#define DEFAULT_HEADER_TIMEOUT_MS    10000
#define DEFAULT_KEEPALIVE_TIMEOUT_MS 60000
#define DEFAULT_BODY_TIMEOUT_MS      60000
#define DEFAULT_PER_ADDRESS          128

/* A refused request's body is read and dropped, for this long at most, before closing: all
 * of a declared length up to LINGER_MAX (a client that sends its whole body before reading,
 * as many do, then sees the answer rather than a reset), else LINGER_CHUNKED. Dropping costs
 * no memory. */
#define LINGER_MAX     (16u << 20)
#define LINGER_CHUNKED (1u << 20)
#define LINGER_MS      3000

/* Bytes a client may send ahead while its request is being answered (pipelining). */
#define WAIT_INPUT_MAX (64 * 1024)

/* Answers queued toward a client above which its next request is not read until they are
 * out: a client that pipelines requests and reads nothing would otherwise have the daemon
 * hold every answer. */
#define PIPELINE_OUTPUT_MAX (1024 * 1024)

/* Candidates looked at when a connection must be evicted. */
#define EVICT_TRIES 32

/* Descriptors kept for everything that is not a client connection (sandboxes, their
 * sockets, the store, logs) when the connection cap is derived from the descriptor limit. */
#define FD_RESERVE 64

enum conn_state { C_IDLE, C_HEAD, C_BODY, C_WAIT, C_LINGER, C_CLOSING };

/* What one key's requests hold of bodies in flight (http_set_budget_key). */
struct body_budget {
	struct body_budget *next;
	char key[64];
	uint64_t mem, spool;
	unsigned users; /* requests charged to it */
};

struct addr_entry;

struct http_conn {
	struct http_server *srv;
	struct bufferevent *bev;
	TAILQ_ENTRY(http_conn) all;      /* srv->conns */
	TAILQ_ENTRY(http_conn) waiting;  /* srv->waiting, while IDLE or HEAD */
	TAILQ_ENTRY(http_conn) stranger; /* its address's list, until it authenticated */
	struct addr_entry *addr;         /* set while counted as not yet authenticated */
	struct h1 h1;
	struct http_ctx *ctx; /* the request under way */
	struct event *timer;
	/* The send guard (http_stream_guard): while anything of a guarded reply waits to
	 * reach the client, the client must take some of it within a body timeout. */
	struct event *stall;
	struct evbuffer_cb_entry *out_cb;
	uint64_t sent; /* bytes handed to the socket since the connection began */
	/* The body's total deadline (see body_arm): when it began, what of it arrived, how long
	 * the daemon paused its reading. */
	uint64_t body_start_ns, body_bytes, body_paused_ns, pause_start_ns;
	uint64_t stall_mark; /* bytes the client had taken at the guard's last look */
	enum conn_state state;
	bool listed_waiting;
	bool fresh;         /* no request has completed on it yet */
	bool close_after;   /* close once the current reply is out */
	bool body_paused;   /* http_body_pause() */
	bool out_paused;    /* next request not read until the answers queued are out */
	bool answered;      /* the current request was answered before its body was read */
	bool upgrading;     /* the current request will take the connection over */
	bool head_has_body; /* the current request announced a body */
	bool in_parser;     /* within h1_feed: the reader may not be restarted */
	bool done_later;    /* a reply completed within h1_feed: conn_next() once it returns */
	int busy;           /* conn_process() frames running */
	bool dead;          /* to be freed when the outermost frame ends */
	size_t linger_left;
	char peer[INET6_ADDRSTRLEN];
	bool is_unix; /* came through the Unix socket */
};

/* Connections not yet authenticated, per peer address. */
struct addr_entry {
	struct addr_entry *next;
	TAILQ_HEAD(, http_conn) conns; /* oldest first */
	unsigned n;
	char addr[INET6_ADDRSTRLEN];
};

#define ADDR_BUCKETS 1024

struct http_listener {
	struct evconnlistener *lev;
	struct http_server *srv;
	char *unix_path;
	struct event *resume; /* re-enables accepting after a pause */
	uint64_t warned_ms;   /* when the last pause was logged */
};

struct http_server {
	struct event_base *base;
	const struct config *cfg;
	const struct http_route *routes;
	size_t nroutes;
	http_auth_fn auth;
	void *auth_arg;
	http_host_fn host_router;
	void *host_arg;
	http_done_fn done;
	void *done_arg;
	struct http_listener listeners[4];
	size_t nlisteners;
	size_t inflight;
	uint64_t next_id;
	TAILQ_HEAD(, http_conn) conns;
	TAILQ_HEAD(, http_conn) waiting; /* IDLE and HEAD connections, oldest first */
	struct addr_entry *addrs[ADDR_BUCKETS];
	unsigned max_conns, max_per_addr;
	unsigned header_ms, keepalive_ms, body_ms;
	unsigned body_min_rate;      /* bytes a second, 0: none */
	struct body_budget *budgets; /* keys with bodies in flight */
	uint64_t spooled;            /* their bytes in spool files, all keys */
	struct http_stats stats;
	char date[40];
	time_t date_at;
};

static void conn_process(struct http_conn *c);
static void conn_process_inner(struct http_conn *c);
static void conn_close(struct http_conn *c);
static void conn_answer_error(struct http_conn *c, int status);

/* --- small parts ---------------------------------------------------------------------- */

static const char *reason_phrase(int status)
{
	switch (status) {
	case 100:
		return "Continue";
	case 101:
		return "Switching Protocols";
	case 200:
		return "OK";
	case 201:
		return "Created";
	case 202:
		return "Accepted";
	case 204:
		return "No Content";
	case 304:
		return "Not Modified";
	case 308:
		return "Permanent Redirect";
	case 400:
		return "Bad Request";
	case 401:
		return "Unauthorized";
	case 403:
		return "Forbidden";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 406:
		return "Not Acceptable";
	case 408:
		return "Request Timeout";
	case 409:
		return "Conflict";
	case 410:
		return "Gone";
	case 411:
		return "Length Required";
	case 413:
		return "Content Too Large";
	case 414:
		return "URI Too Long";
	case 415:
		return "Unsupported Media Type";
	case 417:
		return "Expectation Failed";
	case 426:
		return "Upgrade Required";
	case 429:
		return "Too Many Requests";
	case 431:
		return "Request Header Fields Too Large";
	case 500:
		return "Internal Server Error";
	case 501:
		return "Not Implemented";
	case 502:
		return "Bad Gateway";
	case 503:
		return "Service Unavailable";
	case 504:
		return "Gateway Timeout";
	case 507:
		return "Insufficient Storage";
	default:
		return status < 300   ? "OK"
		       : status < 400 ? "Redirection"
		       : status < 500 ? "Client Error"
				      : "Server Error";
	}
}

/* The error message of a status the connection layer answers itself. */
static const char *layer_message(int status)
{
	switch (status) {
	case 400:
		return "Malformed HTTP request";
	case 408:
		return "The request was not sent in time";
	case 413:
		return "Request body too large";
	case 414:
		return "Request target too long";
	case 417:
		return "Only \"Expect: 100-continue\" is supported";
	case 431:
		return "Request headers too large";
	case 501:
		return "Method not implemented";
	case 503:
		return "Too many connections; try again";
	default:
		return "HTTP error";
	}
}

static const char *http_date(struct http_server *srv)
{
	time_t now = time(NULL);
	if (now != srv->date_at) {
		struct tm tm;
		gmtime_r(&now, &tm);
		strftime(srv->date, sizeof(srv->date), "%a, %d %b %Y %H:%M:%S GMT", &tm);
		srv->date_at = now;
	}
	return srv->date;
}

static int method_mask(enum http_method m)
{
	switch (m) {
	case HTTP_GET:
		return HTTP_REQ_GET;
	case HTTP_POST:
		return HTTP_REQ_POST;
	case HTTP_PUT:
		return HTTP_REQ_PUT;
	case HTTP_DELETE:
		return HTTP_REQ_DELETE;
	case HTTP_PATCH:
		return HTTP_REQ_PATCH;
	case HTTP_HEAD:
		return HTTP_REQ_HEAD;
	case HTTP_OPTIONS:
		return HTTP_REQ_OPTIONS;
	case HTTP_CONNECT:
		return HTTP_REQ_CONNECT;
	default:
		return 0;
	}
}

static bool safe_header_text(const char *s)
{
	for (; *s; s++)
		if (*s == '\r' || *s == '\n' || ((unsigned char)*s < 0x20 && *s != '\t'))
			return false;
	return true;
}

/* --- per-address tally of connections not yet authenticated ------------------------------ */

static unsigned addr_hash(const char *a)
{
	uint32_t h = 2166136261u;
	for (; *a; a++)
		h = (h ^ (uint8_t)*a) * 16777619u;
	return h % ADDR_BUCKETS;
}

static struct addr_entry *addr_find(struct http_server *srv, const char *a, bool create)
{
	struct addr_entry **slot = &srv->addrs[addr_hash(a)];
	for (struct addr_entry *e = *slot; e; e = e->next)
		if (!strcmp(e->addr, a))
			return e;
	if (!create)
		return NULL;
	struct addr_entry *e = xcalloc(1, sizeof(*e));
	snprintf(e->addr, sizeof(e->addr), "%s", a);
	TAILQ_INIT(&e->conns);
	e->next = *slot;
	*slot = e;
	return e;
}

static void addr_drop(struct http_server *srv, struct addr_entry *e)
{
	for (struct addr_entry **pp = &srv->addrs[addr_hash(e->addr)]; *pp; pp = &(*pp)->next) {
		if (*pp == e) {
			*pp = e->next;
			free(e);
			return;
		}
	}
}

/* The connection authenticated (or closed): it no longer counts against its address. */
static void conn_unlist_stranger(struct http_conn *c)
{
	struct addr_entry *e = c->addr;
	if (!e)
		return;
	TAILQ_REMOVE(&e->conns, c, stranger);
	c->addr = NULL;
	if (--e->n == 0)
		addr_drop(c->srv, e);
}

static void conn_set_waiting(struct http_conn *c, bool on)
{
	if (on == c->listed_waiting)
		return;
	if (on)
		TAILQ_INSERT_TAIL(&c->srv->waiting, c, waiting);
	else
		TAILQ_REMOVE(&c->srv->waiting, c, waiting);
	c->listed_waiting = on;
}

/* --- ctx lifetime ------------------------------------------------------------------- */

static const char *method_name(int m)
{
	switch (m) {
	case HTTP_REQ_GET:
		return "GET";
	case HTTP_REQ_POST:
		return "POST";
	case HTTP_REQ_PUT:
		return "PUT";
	case HTTP_REQ_DELETE:
		return "DELETE";
	case HTTP_REQ_PATCH:
		return "PATCH";
	case HTTP_REQ_HEAD:
		return "HEAD";
	case HTTP_REQ_OPTIONS:
		return "OPTIONS";
	case HTTP_REQ_CONNECT:
		return "CONNECT";
	default:
		return "OTHER";
	}
}

static void ctx_log_and_count(struct http_ctx *ctx)
{
	double secs = (double)(time_mono_ns() - ctx->start_ns) / 1e9;
	const char *route = ctx->route ? ctx->route->pattern : "unmatched";
	int status = ctx->gone && !ctx->status ? 499 : ctx->status;
	if (ctx->srv->done)
		ctx->srv->done(http_method(ctx), route, status, secs, ctx->srv->done_arg);
	if (log_enabled(LOG_INFO)) {
		json_auto_t *f = json_pack("{s:s, s:s, s:s, s:i, s:f}", "reqId", ctx->id, "method",
					   http_method(ctx), "route", route, "status", status,
					   "durationMs", secs * 1000.0);
		if (ctx->gone)
			json_object_set_new(f, "clientGone", json_true());
		/* A request refused at its head costs its client nothing but the attempt: those
		 * lines are rate limited, or a flood of them would be one line per attempt. */
		if (!ctx->dispatched && status >= 400)
			log_fields_limited(LOG_INFO, "http", f, "request");
		else
			log_fields(LOG_INFO, "http", f, "request");
	}
}

/* --- bodies in flight, per key ------------------------------------------------------- */

static struct body_budget *budget_of(struct http_server *srv, const char *key, bool create)
{
	for (struct body_budget *b = srv->budgets; b; b = b->next)
		if (!strcmp(b->key, key))
			return b;
	if (!create)
		return NULL;
	struct body_budget *b = xcalloc(1, sizeof(*b));
	snprintf(b->key, sizeof(b->key), "%s", key);
	b->next = srv->budgets;
	srv->budgets = b;
	return b;
}

void http_set_budget_key(struct http_ctx *ctx, const char *key)
{
	snprintf(ctx->budget_key, sizeof(ctx->budget_key), "%s", key ? key : "");
}

static void budget_release(struct http_ctx *ctx)
{
	if (ctx->spool_fd >= 0)
		close(ctx->spool_fd);
	ctx->spool_fd = -1;
	if (!ctx->charged_mem && !ctx->charged_spool)
		return;
	struct http_server *srv = ctx->srv;
	struct body_budget *b = budget_of(srv, ctx->budget_key, false);
	if (b) {
		b->mem -= ctx->charged_mem;
		b->spool -= ctx->charged_spool;
		srv->spooled -= ctx->charged_spool;
		if (--b->users == 0) {
			for (struct body_budget **pp = &srv->budgets; *pp; pp = &(*pp)->next)
				if (*pp == b) {
					*pp = b->next;
					break;
				}
			free(b);
		}
	}
	ctx->charged_mem = ctx->charged_spool = 0;
}

/* A file in the state directory for a large body: unnamed, gone with its descriptor. */
static int spool_open(struct http_server *srv)
{
	const char *dir = srv->cfg->state_dir;
	if (!dir || !*dir)
		return -1;
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/bodies", dir);
	if (mkdir(path, 0700) < 0 && errno != EEXIST)
		return -1;
	return open(path, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
}

static int write_all(int fd, const void *data, size_t len)
{
	const char *p = data;
	while (len) {
		ssize_t w = write(fd, p, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p += w;
		len -= (size_t)w;
	}
	return 0;
}

/* Whether `more` bytes may go to spool files: within SANDBOX_MAX_BODY_SPOOL_BYTES for all
 * keys together, and leaving the state filesystem its reserve (SANDBOX_DISK_RESERVE_BYTES),
 * which sandboxes' disks are kept out of too: many keys' unfinished bodies must not fill
 * what their disks were promised. -1 having replied 503 (the server's condition: retry). */
static int spool_refuse(struct http_ctx *ctx, uint64_t more)
{
	struct http_server *srv = ctx->srv;
	const struct config *cfg = srv->cfg;
	uint64_t cap = cfg->max_body_spool_bytes;
	if (cap && srv->spooled + more > cap) {
		http_add_header(ctx, "Retry-After", "1");
		http_reply_error(ctx, 503,
				 "The server holds %llu MiB of large request bodies on its disk, "
				 "its limit (SANDBOX_MAX_BODY_SPOOL_BYTES, %llu MiB): try again "
				 "shortly",
				 (unsigned long long)(srv->spooled >> 20),
				 (unsigned long long)(cap >> 20));
		return -1;
	}
	struct statvfs st;
	if (cfg->state_dir && statvfs(cfg->state_dir, &st) == 0) {
		uint64_t free_bytes = (uint64_t)st.f_bavail * st.f_frsize;
		if (free_bytes < cfg->disk_reserve_bytes + more) {
			http_add_header(ctx, "Retry-After", "1");
			http_reply_error(
				ctx, 503,
				"The state filesystem is at its reserve (%llu MiB free, "
				"SANDBOX_DISK_RESERVE_BYTES %llu MiB): no room for a large "
				"request body; try again later",
				(unsigned long long)(free_bytes >> 20),
				(unsigned long long)(cfg->disk_reserve_bytes >> 20));
			return -1;
		}
	}
	return 0;
}

/* Takes a piece of a buffered body: charged to its key, kept in memory or in the spool.
 * Returns 0, or a status having replied. */
static int body_take(struct http_ctx *ctx, const char *data, size_t len)
{
	struct http_server *srv = ctx->srv;
	struct body_budget *b = budget_of(srv, ctx->budget_key, true);
	if (!ctx->charged_mem && !ctx->charged_spool)
		b->users++;
	uint64_t cap = srv->cfg->key_max_body_bytes;
	if (cap && b->mem + b->spool + len > cap) {
		http_reply_error(
			ctx, 429,
			"This key's requests have %llu bytes of bodies in flight; %zu more "
			"would pass %llu (SANDBOX_KEY_MAX_BODY_BYTES): send fewer at once",
			(unsigned long long)(b->mem + b->spool), len, (unsigned long long)cap);
		return 429;
	}
	size_t held = evbuffer_get_length(ctx->body);
	bool spillable = (ctx->route->flags & HTTP_ROUTE_JSON_BODY) != 0;
	bool spill = ctx->spool_fd < 0 && spillable &&
		     (held + len > HTTP_OFFLOAD_BODY || b->mem + len > HTTP_KEY_BODY_MEMORY);
	if ((spill || ctx->spool_fd >= 0) &&
	    spool_refuse(ctx, (spill ? ctx->charged_mem : 0) + len) < 0)
		return 503;
	if (spill) {
		int fd = spool_open(srv);
		if (fd >= 0) {
			struct evbuffer_iovec v[16];
			int n = evbuffer_peek(ctx->body, -1, NULL, v, 16);
			bool ok = n >= 0 && n <= 16;
			for (int i = 0; ok && i < n; i++)
				ok = write_all(fd, v[i].iov_base, v[i].iov_len) == 0;
			if (ok) {
				evbuffer_drain(ctx->body, held);
				ctx->spool_fd = fd;
				b->mem -= ctx->charged_mem;
				b->spool += ctx->charged_mem;
				srv->spooled += ctx->charged_mem;
				ctx->charged_spool += ctx->charged_mem;
				ctx->charged_mem = 0;
			} else {
				close(fd);
			}
		}
	}
	if (ctx->spool_fd >= 0) {
		if (write_all(ctx->spool_fd, data, len) < 0) {
			http_reply_error(ctx, 507, "Cannot keep the request's body: %s",
					 strerror(errno));
			return 507;
		}
		ctx->charged_spool += len;
		b->spool += len;
		srv->spooled += len;
		return 0;
	}
	evbuffer_add(ctx->body, data, len);
	ctx->charged_mem += len;
	b->mem += len;
	return 0;
}

static void ctx_free(struct http_ctx *ctx)
{
	ctx_log_and_count(ctx);
	for (size_t i = 0; i < ctx->nparams; i++)
		free(ctx->params[i]);
	if (ctx->user_free)
		ctx->user_free(ctx->user);
	ctx->srv->inflight--;
	if (ctx->query) {
		evhttp_clear_headers(ctx->query);
		free(ctx->query);
	}
	if (ctx->body)
		evbuffer_free(ctx->body);
	budget_release(ctx);
	if (ctx->headers)
		evbuffer_free(ctx->headers);
	json_decref(ctx->parsed);
	free(ctx->parse_error);
	free(ctx->path);
	if (ctx->route_arg_free)
		ctx->route_arg_free(ctx->route_arg);
	free(ctx->peer_override);
	free(ctx);
}

static void ctx_maybe_free(struct http_ctx *ctx)
{
	if (ctx->replied && (ctx->complete || ctx->gone) && ctx->holds == 0)
		ctx_free(ctx);
}

void http_ctx_hold(struct http_ctx *ctx)
{
	ctx->holds++;
}

void http_ctx_release(struct http_ctx *ctx)
{
	ctx->holds--;
	ctx_maybe_free(ctx);
}

/* The client left (or the connection failed) before the reply completed. */
static void ctx_gone(struct http_ctx *ctx)
{
	ctx->conn = NULL;
	ctx->gone = true;
	if (!ctx->dispatched)
		ctx->replied = true; /* no handler will answer: it never got the request */
	ctx->holds++;
	if (ctx->on_gone && !ctx->replied) {
		void (*fn)(struct http_ctx *, void *) = ctx->on_gone;
		ctx->on_gone = NULL;
		fn(ctx, ctx->on_gone_arg);
	}
	if (ctx->drain_fn) {
		void (*fn)(struct http_ctx *, void *) = ctx->drain_fn;
		ctx->drain_fn = NULL;
		fn(ctx, ctx->drain_arg);
	}
	ctx->holds--;
	ctx_maybe_free(ctx);
}

/* --- connections ------------------------------------------------------------------------ */

static void conn_arm(struct http_conn *c, unsigned ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
	evtimer_add(c->timer, &tv);
}

/* A body's deadlines: no pause longer than the body timeout, and the whole of it by its start
 * plus the body timeout plus a second for each body_min_rate bytes that arrived (the time the
 * daemon itself held the reading paused does not count). A client that trickles a byte now
 * and then re-arms the first but never the second. */
static void body_arm(struct http_conn *c)
{
	struct http_server *srv = c->srv;
	uint64_t ms = srv->body_ms;
	if (srv->body_min_rate) {
		uint64_t r = srv->body_min_rate;
		uint64_t earned = c->body_bytes / r * 1000 + c->body_bytes % r * 1000 / r;
		uint64_t deadline = c->body_start_ns / 1000000 + c->body_paused_ns / 1000000 +
				    srv->body_ms + earned;
		uint64_t now = time_mono_ns() / 1000000;
		uint64_t left = deadline > now ? deadline - now : 0;
		if (left < ms)
			ms = left;
	}
	conn_arm(c, (unsigned)ms);
}

static void conn_free(struct http_conn *c)
{
	struct http_server *srv = c->srv;
	if (c->ctx) {
		struct http_ctx *ctx = c->ctx;
		c->ctx = NULL;
		ctx_gone(ctx);
	}
	conn_unlist_stranger(c);
	conn_set_waiting(c, false);
	TAILQ_REMOVE(&srv->conns, c, all);
	srv->stats.connections--;
	if (c->timer)
		event_free(c->timer);
	if (c->stall)
		event_free(c->stall);
	if (c->bev) {
		evbuffer_remove_cb_entry(bufferevent_get_output(c->bev), c->out_cb);
		bufferevent_free(c->bev);
	}
	h1_free(&c->h1);
	free(c);
}

/* Closes now (or, inside conn_process, when its outermost frame ends). */
static void conn_close(struct http_conn *c)
{
	if (c->busy) {
		c->dead = true;
		if (c->bev)
			bufferevent_disable(c->bev, EV_READ | EV_WRITE);
		return;
	}
	conn_free(c);
}

/* Closes once what is queued has gone out. */
static void conn_close_after_flush(struct http_conn *c)
{
	c->state = C_CLOSING;
	conn_set_waiting(c, false);
	evtimer_del(c->timer);
	bufferevent_disable(c->bev, EV_READ);
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
		conn_close(c);
	else
		conn_arm(
			c,
			c->srv->body_ms); /* a client that reads nothing is not waited on forever */
}

/* Drops what is left of a refused request's body, then closes (on_write, on_read). */
static void conn_linger(struct http_conn *c)
{
	uint64_t declared = c->h1.head.content_length;
	c->state = C_LINGER;
	c->linger_left = c->h1.head.chunked || !declared ? LINGER_CHUNKED
			 : declared < LINGER_MAX         ? (size_t)declared + 1
							 : LINGER_MAX;
	conn_set_waiting(c, false);
	bufferevent_setwatermark(c->bev, EV_READ, 0, 0);
	bufferevent_enable(c->bev, EV_READ);
	conn_arm(c, LINGER_MS);
}

/* Ready for the next request on a kept-alive connection. */
static void conn_next(struct http_conn *c)
{
	h1_next(&c->h1);
	c->state = C_IDLE;
	c->answered = false;
	c->body_paused = false;
	c->fresh = false;
	c->done_later = false;
	bufferevent_setwatermark(c->bev, EV_READ | EV_WRITE, 0, 0);
	bufferevent_enable(c->bev, EV_READ);
	conn_set_waiting(c, true);
	conn_arm(c, c->srv->keepalive_ms);
}

/* The reply of c's request is all queued (or its ctx gave up the connection). */
static void conn_reply_done(struct http_conn *c)
{
	struct http_ctx *ctx = c->ctx;
	c->ctx = NULL;
	if (ctx) {
		ctx->conn = NULL;
		ctx->complete = true;
	}
	bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
	if (c->state == C_HEAD || c->state == C_BODY) {
		/* Answered before its body was read: the body is dropped, then the connection
		 * closes, as where the next request would start is not worth finding. */
		conn_linger(c);
		return;
	}
	if (c->close_after || c->upgrading) {
		conn_close_after_flush(c);
		return;
	}
	if (c->in_parser) {
		c->done_later = true; /* refused at its head, with no body: the reader ends it */
		return;
	}
	conn_next(c);
	if (!c->busy)
		conn_process(c);
}

/* A large JSON body parsed on a worker (HTTP_ROUTE_JSON_BODY). The loop does not touch the
 * ctx's body meanwhile; the ctx is held. */
struct parse_job {
	struct http_ctx *ctx;
	struct evbuffer *body;
	int fd; /* the spooled body, -1: in body */
	size_t len;
	struct jsonlimit lim;
	json_t *json;
	struct http_parse_error *why;
};

static void parse_text(struct parse_job *j, const uint8_t *data, size_t len);

static void parse_work(void *arg)
{
	struct parse_job *j = arg;
	if (j->fd < 0) {
		parse_text(j, evbuffer_pullup(j->body, -1), evbuffer_get_length(j->body));
		return;
	}
	void *m = j->len ? mmap(NULL, j->len, PROT_READ, MAP_PRIVATE, j->fd, 0) : MAP_FAILED;
	if (m == MAP_FAILED) {
		j->why = xcalloc(1, sizeof(*j->why));
		j->why->over_limit = true;
		j->why->status = 500;
		snprintf(j->why->msg, sizeof(j->why->msg), "Cannot read the request's body back");
		return;
	}
	parse_text(j, m, j->len);
	munmap(m, j->len);
}

static void parse_text(struct parse_job *j, const uint8_t *data, size_t len)
{
	struct err e;
	if (jsonlimit_check(data, len, &j->lim, &e) < 0) {
		j->why = xcalloc(1, sizeof(*j->why));
		j->why->over_limit = true;
		j->why->status = http_status_for_errno(e.errnum);
		snprintf(j->why->msg, sizeof(j->why->msg), "%s", e.msg);
		return;
	}
	json_error_t jerr;
	j->json = jsonload(data, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!j->json) {
		j->why = xcalloc(1, sizeof(*j->why));
		j->why->status = 400;
		j->why->line = jerr.line;
		j->why->column = jerr.column;
		snprintf(j->why->msg, sizeof(j->why->msg), "%s", jerr.text);
	}
}

static void parse_done(void *arg)
{
	struct parse_job *j = arg;
	struct http_ctx *ctx = j->ctx;
	ctx->parsed_ready = true;
	ctx->parsed = j->json;
	ctx->parse_error = j->why;
	free(j);
	/* A client that left meanwhile gets nothing run for it, and no handler will answer. */
	if (ctx->conn && !ctx->gone && !ctx->replied)
		ctx->route->fn(ctx);
	else
		ctx->replied = true;
	ctx->holds--;
	ctx_maybe_free(ctx);
}

/* The request is complete and its handler answers from here. */
static void conn_dispatch(struct http_conn *c)
{
	struct http_ctx *ctx = c->ctx;
	c->state = C_WAIT;
	ctx->dispatched = true;
	evtimer_del(c->timer);
	/* Bytes sent ahead wait, up to a bound; reading on lets a client that leaves be seen. */
	bufferevent_setwatermark(c->bev, EV_READ, 0, WAIT_INPUT_MAX);
	if (ctx->route->flags & HTTP_ROUTE_STREAM_BODY) {
		if (ctx->body_ops && ctx->body_ops->end) {
			ctx->holds++;
			ctx->body_ops->end(ctx, ctx->body_arg);
			ctx->holds--;
			ctx_maybe_free(ctx);
		}
		return;
	}
	if ((ctx->route->flags & HTTP_ROUTE_JSON_BODY) && ctx->body &&
	    (ctx->spool_fd >= 0 || evbuffer_get_length(ctx->body) > HTTP_OFFLOAD_BODY)) {
		const struct config *cfg = c->srv->cfg;
		struct parse_job *j = xcalloc(1, sizeof(*j));
		j->ctx = ctx;
		j->body = ctx->body;
		j->fd = ctx->spool_fd;
		j->len = (size_t)ctx->charged_spool;
		j->lim = (struct jsonlimit){
			.max_depth = cfg->max_json_depth ? cfg->max_json_depth : 32,
			.max_elements = cfg->max_json_elements ? cfg->max_json_elements : 10000
		};
		c->srv->stats.offloaded++;
		ctx->holds++;
		if (loop_pool_running()) {
			loop_submit(parse_work, parse_done, j);
		} else {
			parse_work(j);
			parse_done(j);
		}
		return;
	}
	ctx->holds++;
	ctx->route->fn(ctx);
	ctx->holds--;
	ctx_maybe_free(ctx);
}

/* --- routing ------------------------------------------------------------------------ */

/* Matches a path like "/exec/abc/execute" against "/exec/:id/execute", collecting params.
 * A trailing slash is ignored ("/exec/" matches "/exec"). */
static bool route_match(const char *pattern, const char *path, struct http_ctx *ctx)
{
	/* Where each parameter is in the path: copied only once the whole path matched. */
	const char *start[HTTP_MAX_PARAMS];
	size_t len[HTTP_MAX_PARAMS];
	size_t n = 0;
	const char *p = pattern, *s = path;
	while (*p) {
		if (*p != '/' || *s != '/')
			return false;
		p++, s++;
		const char *pe = strchrnul(p, '/');
		const char *se = strchrnul(s, '/');
		if (*p == ':') {
			if (se == s || n == HTTP_MAX_PARAMS)
				return false;
			start[n] = s;
			len[n++] = (size_t)(se - s);
		} else if ((size_t)(pe - p) != (size_t)(se - s) ||
			   strncmp(p, s, (size_t)(pe - p))) {
			return false;
		}
		p = pe, s = se;
	}
	if (!(*s == '\0' || (s[0] == '/' && s[1] == '\0')))
		return false;
	for (size_t i = 0; i < n; i++) {
		_cleanup_free_ char *raw = strndup(start[i], len[i]);
		ctx->params[i] = evhttp_uridecode(raw, 0, NULL);
	}
	ctx->nparams = n;
	return true;
}

static void params_clear(struct http_ctx *ctx)
{
	for (size_t j = 0; j < ctx->nparams; j++)
		free(ctx->params[j]);
	ctx->nparams = 0;
}

/* Chooses ctx's route; replies 404 or 405 itself when there is none. */
static const struct http_route *route_find(struct http_ctx *ctx, const char *host)
{
	struct http_server *srv = ctx->srv;
	if (srv->host_router) {
		const struct http_route *r = srv->host_router(ctx, host, srv->host_arg);
		if (r || ctx->replied)
			return r;
	}
	bool path_known = false;
	for (size_t i = 0; i < srv->nroutes; i++) {
		const struct http_route *r = &srv->routes[i];
		if (!route_match(r->pattern, ctx->path, ctx))
			continue;
		path_known = true;
		if (r->methods & ctx->method)
			return r;
		params_clear(ctx);
	}
	if (path_known)
		http_reply_error(ctx, 405, "Method %s not allowed on %s", http_method(ctx),
				 ctx->path);
	else
		http_reply_error(ctx, 404, "Not found");
	return NULL;
}

/* --- the request reader's callbacks ----------------------------------------------------- */

static struct http_ctx *ctx_new(struct http_conn *c, const struct h1_head *head)
{
	struct http_server *srv = c->srv;
	struct http_ctx *ctx = xcalloc(1, sizeof(*ctx));
	ctx->conn = c;
	ctx->srv = srv;
	ctx->start_ns = time_mono_ns();
	snprintf(ctx->id, sizeof(ctx->id), "%016llx",
		 (unsigned long long)(srv->next_id++ ^ (ctx->start_ns << 20)));
	srv->inflight++;
	ctx->spool_fd = -1;
	ctx->method = method_mask(head->method);
	ctx->head_only = head->method == HTTP_HEAD;
	const char *t = head->target;
	size_t plen = strcspn(t, "?#");
	ctx->path = plen && t[0] == '/' ? strndup(t, plen) : xstrdup("/");
	if (!ctx->path)
		abort();
	return ctx;
}

/* The request was answered at its head: with a body to come, the reader stops (the body is
 * dropped while the connection lingers); without one, the reader ends the request. */
static int refused(struct http_conn *c, struct http_ctx *ctx, int fallback)
{
	/* Without a body there is nothing to drop: whatever state the reply left the
	 * connection in (closing after it, with Connection: close), the reader ends the request,
	 * and the reply already sent is the only one. */
	if (c->state == C_WAIT || !c->head_has_body)
		return 0;
	return ctx->status ? ctx->status : fallback;
}

/* Whether a request of this method to r may carry a body: a route that streams its body takes
 * one with any method (a preview hands it on); others with the methods that carry one. A GET
 * to /health has no use for a body, and one sent slowly would hold the connection. */
static bool takes_body(const struct http_route *r, int method)
{
	if (r->flags & HTTP_ROUTE_STREAM_BODY)
		return true;
	return method & (HTTP_REQ_POST | HTTP_REQ_PUT | HTTP_REQ_PATCH);
}

/* The checks at the head (see on_head); ctx is held meanwhile. */
static int head_checks(struct http_conn *c, struct http_ctx *ctx, const struct h1_head *head)
{
	struct http_server *srv = c->srv;
	bool has_body = head->content_length > 0 || head->chunked;
	c->state = has_body ? C_BODY : C_WAIT;
	c->head_has_body = has_body;
	c->close_after = !head->keep_alive;
	c->upgrading = head->upgrade;
	conn_set_waiting(c, false);
	evtimer_del(c->timer);

	if (!ctx->method) {
		http_reply_error(ctx, 501, "Method not implemented");
		return refused(c, ctx, 501);
	}
	const struct http_route *r = route_find(ctx, head->host ? head->host : "");
	if (!r)
		return refused(c, ctx, 404);
	ctx->route = r;
	if (srv->auth && srv->auth(ctx, r->scope, srv->auth_arg) < 0)
		return refused(c, ctx, 401);
	/* The check may have chosen another route (http_reroute): its body limit and flags
	 * are the ones that count from here. */
	r = ctx->route;
	if (has_body && !takes_body(r, ctx->method)) {
		http_reply_error(ctx, 413, "%s %s takes no request body", http_method(ctx),
				 r->pattern);
		return refused(c, ctx, 413);
	}
	/* Past a key check (or a route that checks its own callers): the connection is no
	 * stranger any more. A route anyone may call leaves it one. */
	if (r->scope || (r->flags & HTTP_ROUTE_SELF_AUTH))
		conn_unlist_stranger(c);
	uint64_t limit = r->max_body ? r->max_body : srv->cfg->max_body_bytes;
	/* A route anyone may call takes no large body from anyone. */
	if (!r->scope && !(r->flags & HTTP_ROUTE_SELF_AUTH) && limit > HTTP_ANON_MAX_BODY)
		limit = HTTP_ANON_MAX_BODY;
	h1_set_max_body(&c->h1, limit);
	if (head->content_length > limit) {
		http_reply_error(ctx, 413, "Request body of %llu bytes exceeds the limit of %llu",
				 (unsigned long long)head->content_length,
				 (unsigned long long)limit);
		return refused(c, ctx, 413);
	}
	if (has_body) {
		c->body_start_ns = time_mono_ns();
		c->body_bytes = 0;
		c->body_paused_ns = 0;
		body_arm(c);
	}
	if (r->flags & HTTP_ROUTE_STREAM_BODY) {
		ctx->dispatched = true;
		r->fn(ctx);
		if (ctx->replied)
			return refused(c, ctx, 400);
	} else if (has_body) {
		ctx->body = evbuffer_new();
	}
	if (has_body && head->expect_continue)
		bufferevent_write(c->bev, "HTTP/1.1 100 Continue\r\n\r\n", 25);
	return 0;
}

static int on_head(const struct h1_head *head, void *arg)
{
	struct http_conn *c = arg;
	struct http_ctx *ctx = ctx_new(c, head);
	c->ctx = ctx;
	ctx->holds++; /* a refusal completes (and would free) it */
	int r = head_checks(c, ctx, head);
	ctx->holds--;
	ctx_maybe_free(ctx);
	return r;
}

static int on_body(const char *data, size_t len, void *arg)
{
	struct http_conn *c = arg;
	struct http_ctx *ctx = c->ctx;
	if (!ctx)
		return 400;
	c->body_bytes += len;
	body_arm(c);
	if (ctx->body)
		return body_take(ctx, data, len);
	if (ctx->body_ops && ctx->body_ops->data) {
		ctx->holds++;
		int r = ctx->body_ops->data(ctx, (const uint8_t *)data, len, ctx->body_arg);
		bool replied = ctx->replied;
		int status = ctx->status;
		ctx->holds--;
		ctx_maybe_free(ctx);
		if (r < 0 || replied)
			return status ? status : 400;
	}
	return 0;
}

static int on_end(void *arg)
{
	(void)arg;
	return 0;
}

static const struct h1_callbacks h1_cb = {
	.on_head = on_head,
	.on_body = on_body,
	.on_end = on_end,
};

/* --- reading ----------------------------------------------------------------------------- */

/* Feeds what the input holds to the reader, dispatching each request as it completes.
 * Returns false once the connection is to go. */
static bool conn_feed(struct http_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);
	while (!c->dead && (c->state == C_IDLE || c->state == C_HEAD || c->state == C_BODY)) {
		if (c->body_paused)
			return true;
		size_t avail = evbuffer_get_length(in);
		if (avail == 0)
			return true;
		if (c->state == C_IDLE &&
		    evbuffer_get_length(bufferevent_get_output(c->bev)) > PIPELINE_OUTPUT_MAX) {
			c->out_paused = true; /* on_write goes on once they are out */
			bufferevent_disable(c->bev, EV_READ);
			return true;
		}
		if (c->state == C_IDLE) {
			c->state = C_HEAD;
			/* A new connection's deadline runs from its accept; a kept-alive one's
			 * from the first byte of its next request. */
			if (!c->fresh)
				conn_arm(c, c->srv->header_ms);
		}
		struct evbuffer_iovec v;
		if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
			return true;
		c->in_parser = true;
		ssize_t n = h1_feed(&c->h1, v.iov_base, v.iov_len);
		c->in_parser = false;
		if (n < 0) {
			int status = (int)-n;
			/* The piece holds the head (or body) of a request that goes no further: it
			 * is dropped with whatever lingering drops after it. */
			evbuffer_drain(in, v.iov_len);
			if (c->answered || (c->ctx && c->ctx->replied) || c->state == C_LINGER) {
				/* A callback answered: conn_reply_done() chose what follows. */
				if (c->state != C_LINGER && !c->dead)
					conn_answer_error(c, status);
				return !c->dead;
			}
			conn_answer_error(c, status);
			return false;
		}
		evbuffer_drain(in, (size_t)n);
		if (c->done_later) {
			conn_next(c);
			continue;
		}
		if (h1_ended(&c->h1) && c->ctx && c->state != C_LINGER)
			conn_dispatch(c);
	}
	return !c->dead;
}

static void conn_linger_read(struct http_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);
	size_t n = evbuffer_get_length(in);
	if (n >= c->linger_left) {
		evbuffer_drain(in, n);
		conn_close_after_flush(c); /* the answer goes out first */
		return;
	}
	evbuffer_drain(in, n);
	c->linger_left -= n;
}

/* Does whatever the connection's bytes and state allow now. */
static void conn_process_inner(struct http_conn *c)
{
	for (;;) {
		enum conn_state was = c->state;
		if (c->state == C_LINGER)
			conn_linger_read(c);
		else if (c->state != C_WAIT && c->state != C_CLOSING)
			conn_feed(c);
		if (c->dead || c->state == was)
			break;
	}
}

static void conn_process(struct http_conn *c)
{
	c->busy++;
	conn_process_inner(c);
	c->busy--;
	if (c->busy == 0 && c->dead)
		conn_free(c);
}

/* --- the send guard --------------------------------------------------------------------- */

/* Bytes the client has taken: handed to the socket less what the kernel still holds for it
 * (unsent or unacknowledged; for a Unix socket, unread). The kernel's buffers can hold
 * megabytes, and a writable event comes only when half of them are free: counting what
 * leaves the daemon alone would call a slow but steady reader stalled. */
static uint64_t conn_taken(struct http_conn *c)
{
	int queued = 0;
	if (ioctl(bufferevent_getfd(c->bev), SIOCOUTQ, &queued) < 0 || queued < 0)
		queued = 0;
	return c->sent - (uint64_t)queued;
}

static void stall_arm(struct http_conn *c)
{
	struct timeval tv = { .tv_sec = c->srv->body_ms / 1000,
			      .tv_usec = (suseconds_t)(c->srv->body_ms % 1000) * 1000 };
	evtimer_add(c->stall, &tv);
}

static void conn_stall_check(evutil_socket_t fd, short what, void *arg)
{
	struct http_conn *c = arg;
	if (!c->bev || !c->ctx || !c->ctx->send_guard)
		return; /* the guarded reply is over */
	uint64_t taken = conn_taken(c);
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0 && taken == c->sent)
		return; /* all out and read: the guard waits for the next reply */
	if (taken != c->stall_mark) {
		c->stall_mark = taken;
		stall_arm(c);
		return;
	}
	c->srv->stats.send_stalls++;
	log_info("http", "%s took nothing of a reply for %u ms: connection closed", c->peer,
		 c->srv->body_ms);
	conn_close(c);
}

/* Runs as the output buffer changes: counts what leaves, and (re)starts the guard when
 * something is queued after nothing was (a guard armed long before, over a connection that
 * was idle since, would otherwise judge a reply only just begun). */
static void on_output_change(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct http_conn *c = arg;
	c->sent += info->n_deleted;
	if (info->n_added && c->bev && c->ctx && c->ctx->send_guard &&
	    (info->orig_size == 0 || !evtimer_pending(c->stall, NULL))) {
		c->stall_mark = conn_taken(c);
		stall_arm(c);
	}
}

static void on_read(struct bufferevent *bev, void *arg)
{
	bev_fill(bev, BEV_FILL_MAX);
	conn_process(arg);
}

static void on_write(struct bufferevent *bev, void *arg)
{
	struct http_conn *c = arg;
	size_t pending = evbuffer_get_length(bufferevent_get_output(bev));
	if (c->state == C_CLOSING && pending == 0) {
		conn_close(c);
		return;
	}
	if (c->out_paused && pending == 0) {
		c->out_paused = false;
		bufferevent_enable(bev, EV_READ);
		conn_process(c);
		return;
	}
	if (c->state == C_LINGER && pending == 0) {
		/* The answer is out: say so, and keep dropping what the client still sends. */
		shutdown(bufferevent_getfd(bev), SHUT_WR);
		return;
	}
	struct http_ctx *ctx = c->ctx;
	if (ctx && ctx->drain_fn && pending < ctx->drain_below) {
		void (*fn)(struct http_ctx *, void *) = ctx->drain_fn;
		ctx->drain_fn = NULL;
		bufferevent_setwatermark(bev, EV_WRITE, 0, 0);
		ctx->holds++;
		fn(ctx, ctx->drain_arg);
		ctx->holds--;
		ctx_maybe_free(ctx);
	}
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
	struct http_conn *c = arg;
	if ((what & BEV_EVENT_EOF) && c->state == C_HEAD && h1_eof(&c->h1) < 0 && !c->ctx)
		log_debug("http", "%s closed the connection within a request", c->peer);
	conn_close(c);
}

static void on_timer(evutil_socket_t fd, short what, void *arg)
{
	struct http_conn *c = arg;
	switch (c->state) {
	case C_HEAD:
	case C_BODY:
		c->srv->stats.header_timeouts++;
		if (!c->ctx || !c->ctx->replied) {
			conn_answer_error(c, 408);
			return;
		}
		conn_close(c);
		return;
	case C_IDLE:
		if (c->fresh)
			c->srv->stats.header_timeouts++;
		conn_close(c);
		return;
	default:
		conn_close(c);
		return;
	}
}

/* Answers an error the connection layer found itself (a malformed request, a deadline)
 * and closes the connection after it. */
static void conn_answer_error(struct http_conn *c, int status)
{
	struct http_ctx *ctx = c->ctx;
	if (ctx && !ctx->replied) {
		c->close_after = true;
		http_reply_error(ctx, status, "%s", layer_message(status));
		return;
	}
	if (ctx) {
		c->ctx = NULL;
		ctx->conn = NULL;
		ctx->complete = true;
		ctx_maybe_free(ctx);
	}
	_cleanup_free_ char *body = NULL;
	int n = asprintf(&body, "{\"error\":\"%s\"}", layer_message(status));
	if (n < 0)
		abort();
	evbuffer_add_printf(bufferevent_get_output(c->bev),
			    "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
			    "Content-Length: %d\r\nDate: %s\r\nConnection: close\r\n\r\n%s",
			    status, reason_phrase(status), n, http_date(c->srv), body);
	conn_linger(c);
}

/* --- accepting ------------------------------------------------------------------------- */

/* Whether c has sent bytes the loop has not looked at yet (read by its bufferevent but not
 * handed over, its callbacks being deferred, or still in the kernel): those may complete a
 * request's head, so c is not the one to close. */
static bool conn_has_unread(struct http_conn *c)
{
	if (evbuffer_get_length(bufferevent_get_input(c->bev)))
		return true;
	int n = 0;
	return ioctl(bufferevent_getfd(c->bev), FIONREAD, &n) == 0 && n > 0;
}

/* Whether c may be closed to make room: it has not sent a whole head, sent nothing the loop
 * has not seen, and has no answer still going out to it. */
static bool evictable(struct http_conn *c)
{
	return (c->state == C_IDLE || c->state == C_HEAD) && !conn_has_unread(c) &&
	       evbuffer_get_length(bufferevent_get_output(c->bev)) == 0;
}

/* Reads and handles at once what c sent and the loop has not looked at yet (in a burst of
 * new connections nothing of them has been read): it may complete a request's head, and a
 * prompt client is then served rather than closed. Returns false if c is gone. */
static bool conn_look(struct http_conn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);
	if (evbuffer_get_length(in) == 0) {
		/* The bufferevent's input takes bytes at its end only from the bufferevent
		 * itself; into an empty one, a prepend is the same. */
		struct evbuffer *tmp = evbuffer_new();
		int r = evbuffer_read(tmp, bufferevent_getfd(c->bev), 16384);
		if (r > 0)
			evbuffer_prepend_buffer(in, tmp);
		evbuffer_free(tmp);
		if (r == 0) {
			conn_close(c);
			return false;
		}
	}
	if (evbuffer_get_length(in)) {
		c->busy++;
		conn_process_inner(c);
		c->busy--;
		if (c->dead) {
			conn_free(c);
			return false;
		}
	}
	return true;
}

/* Closes the oldest connection that has not completed a request's head: of all of them, or
 * of the strangers from address `addr`. Candidates with bytes not yet looked at are looked at
 * first. Returns false if there was none among the first few. */
static bool evict_one(struct http_server *srv, const char *addr)
{
	for (int tries = 0; tries < EVICT_TRIES; tries++) {
		struct http_conn *c = NULL, *s;
		if (addr) {
			/* Looked up anew each time: a look may have emptied (and freed) it. */
			struct addr_entry *e = addr_find(srv, addr, false);
			if (e)
				TAILQ_FOREACH (s, &e->conns, stranger)
					if (s->state == C_IDLE || s->state == C_HEAD) {
						c = s;
						break;
					}
		} else {
			c = TAILQ_FIRST(&srv->waiting);
		}
		if (!c)
			return false;
		if (conn_has_unread(c) && !conn_look(c))
			return true; /* it left: room made */
		if (!evictable(c)) {
			if (c->state == C_IDLE || c->state == C_HEAD)
				return false; /* an answer still going out to the oldest: no room */
			continue;             /* it sent a request: served, no longer a candidate */
		}
		srv->stats.evicted++;
		log_debug("http",
			  "closing a connection from %s that sent no request in time to "
			  "make room",
			  c->peer);
		conn_close(c);
		return true;
	}
	return false;
}

/* Strangers from addr right now. */
static unsigned strangers(struct http_server *srv, const char *addr)
{
	struct addr_entry *e = addr_find(srv, addr, false);
	return e ? e->n : 0;
}

/* Answers a connection the caps leave no room for, without reading it, and closes it. */
static void refuse_fd(struct http_server *srv, evutil_socket_t fd)
{
	static const char msg[] = "HTTP/1.1 503 Service Unavailable\r\n"
				  "Content-Type: application/json\r\nContent-Length: 45\r\n"
				  "Retry-After: 1\r\nConnection: close\r\n\r\n"
				  "{\"error\":\"Too many connections; try again\"}\n";
	ssize_t w = send(fd, msg, sizeof(msg) - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
	(void)w;
	close(fd);
	srv->stats.refused++;
}

static void peer_text(const struct sockaddr *sa, char *out, size_t outlen)
{
	out[0] = '\0';
	if (sa->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out,
			  (socklen_t)outlen);
	else if (sa->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out,
			  (socklen_t)outlen);
}

static void on_accept(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa,
		      int salen, void *arg)
{
	struct http_listener *l = arg;
	struct http_server *srv = l->srv;
	char peer[INET6_ADDRSTRLEN];
	peer_text(sa, peer, sizeof(peer));
	bool is_unix = sa->sa_family == AF_UNIX;

	if (srv->stats.connections >= srv->max_conns && !evict_one(srv, NULL)) {
		refuse_fd(srv, fd);
		return;
	}
	if (!is_unix && strangers(srv, peer) >= srv->max_per_addr && !evict_one(srv, peer)) {
		refuse_fd(srv, fd);
		return;
	}
	struct bufferevent *bev = bufferevent_socket_new(
		srv->base, fd, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
	if (!bev) {
		close(fd);
		return;
	}
	if (!is_unix) {
		int one = 1;
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	}
	struct http_conn *c = xcalloc(1, sizeof(*c));
	c->srv = srv;
	c->bev = bev;
	c->fresh = true;
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
	c->is_unix = is_unix;
	h1_init(&c->h1, &h1_cb, c, srv->cfg->max_body_bytes);
	c->timer = evtimer_new(srv->base, on_timer, c);
	c->stall = evtimer_new(srv->base, conn_stall_check, c);
	c->out_cb = evbuffer_add_cb(bufferevent_get_output(bev), on_output_change, c);
	TAILQ_INSERT_TAIL(&srv->conns, c, all);
	srv->stats.connections++;
	srv->stats.accepted++;
	if (!is_unix) {
		c->addr = addr_find(srv, peer, true);
		TAILQ_INSERT_TAIL(&c->addr->conns, c, stranger);
		c->addr->n++;
	}
	conn_set_waiting(c, true);
	bev_large_writes(bev);
	bufferevent_setcb(bev, on_read, on_write, on_event, c);
	bufferevent_enable(bev, EV_READ | EV_WRITE);
	conn_arm(c, srv->header_ms);
}

static void on_accept_resume(evutil_socket_t fd, short what, void *arg)
{
	struct http_listener *l = arg;
	if (l->lev)
		evconnlistener_enable(l->lev);
}

/* accept() failed for a reason the next try may not have (the descriptor limit reached):
 * accepting pauses, is logged once a burst, and resumes by itself. */
static void on_accept_error(struct evconnlistener *lev, void *arg)
{
	struct http_listener *l = arg;
	int e = EVUTIL_SOCKET_ERROR();
	evconnlistener_disable(lev);
	l->srv->stats.accept_pauses++;
	uint64_t now = time_mono_ms();
	if (!l->warned_ms || now - l->warned_ms >= 10000)
		log_warn("http", "accepting paused for %d ms: %s", ACCEPT_PAUSE_MS, strerror(e));
	l->warned_ms = now;
	struct timeval tv = { .tv_usec = ACCEPT_PAUSE_MS * 1000 };
	evtimer_add(l->resume, &tv);
}

static int listener_add(struct http_server *srv, evutil_socket_t fd, const char *unix_path,
			struct err *err)
{
	struct http_listener *l = &srv->listeners[srv->nlisteners];
	*l = (struct http_listener){ .srv = srv };
	l->lev = evconnlistener_new(srv->base, on_accept, l,
				    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 1024, fd);
	if (!l->lev)
		return err_set(err, EIO, "cannot accept connections");
	evconnlistener_set_error_cb(l->lev, on_accept_error);
	l->resume = evtimer_new(srv->base, on_accept_resume, l);
	if (unix_path)
		l->unix_path = xstrdup(unix_path);
	srv->nlisteners++;
	return 0;
}

/* --- the server ---------------------------------------------------------------------- */

/* The connection cap by default: half of what the descriptor limit leaves after a reserve,
 * so that sandboxes keep the other half. */
static unsigned default_max_conns(void)
{
	struct rlimit rl;
	rlim_t lim = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur : 1024;
	if (lim == RLIM_INFINITY || lim > 1u << 20)
		lim = 1u << 20;
	rlim_t n = lim > 2 * FD_RESERVE ? (lim - FD_RESERVE) / 2 : 32;
	return (unsigned)n;
}

struct http_server *http_server_new(struct event_base *base, const struct config *cfg,
				    const struct http_route *routes, size_t nroutes)
{
	struct http_server *srv = xcalloc(1, sizeof(*srv));
	srv->base = base;
	srv->cfg = cfg;
	srv->routes = routes;
	srv->nroutes = nroutes;
	TAILQ_INIT(&srv->conns);
	TAILQ_INIT(&srv->waiting);
	srv->max_conns =
		cfg->http_max_connections ? cfg->http_max_connections : default_max_conns();
	srv->max_per_addr =
		cfg->http_max_per_address ? cfg->http_max_per_address : DEFAULT_PER_ADDRESS;
	srv->header_ms = cfg->http_header_timeout_ms ? cfg->http_header_timeout_ms
						     : DEFAULT_HEADER_TIMEOUT_MS;
	srv->keepalive_ms = cfg->http_keepalive_timeout_ms ? cfg->http_keepalive_timeout_ms
							   : DEFAULT_KEEPALIVE_TIMEOUT_MS;
	srv->body_ms =
		cfg->http_body_timeout_ms ? cfg->http_body_timeout_ms : DEFAULT_BODY_TIMEOUT_MS;
	srv->body_min_rate = cfg->http_body_min_rate;
	srv->stats.max_connections = srv->max_conns;
	srv->stats.max_per_address = srv->max_per_addr;
	return srv;
}

void http_server_set_auth(struct http_server *srv, http_auth_fn fn, void *arg)
{
	srv->auth = fn;
	srv->auth_arg = arg;
}

void http_server_set_host_router(struct http_server *srv, http_host_fn fn, void *arg)
{
	srv->host_router = fn;
	srv->host_arg = arg;
}

void http_server_set_done(struct http_server *srv, http_done_fn fn, void *arg)
{
	srv->done = fn;
	srv->done_arg = arg;
}

int http_server_listen_tcp(struct http_server *srv, const char *host, int port, int *ret_port,
			   struct err *err)
{
	if (srv->nlisteners == ARRAY_SIZE(srv->listeners))
		return err_set(err, ENOSPC, "too many listeners");
	struct addrinfo hints = { .ai_family = AF_UNSPEC,
				  .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *ai = NULL;
	char service[8];
	snprintf(service, sizeof(service), "%d", port);
	int gai = getaddrinfo(host, service, &hints, &ai);
	if (gai != 0)
		return err_set(err, EADDRNOTAVAIL, "cannot listen on %s:%d: %s", host, port,
			       gai_strerror(gai));
	_cleanup_close_ int fd =
		socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		freeaddrinfo(ai);
		return err_sys(err, errno, "socket");
	}
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	int r = bind(fd, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	if (r < 0 || listen(fd, 1024) < 0)
		return err_sys(err, errno, "cannot listen on %s:%d", host, port);
	if (ret_port) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
			return err_sys(err, errno, "getsockname");
		*ret_port = ss.ss_family == AF_INET
				    ? ntohs(((struct sockaddr_in *)&ss)->sin_port)
				    : ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	}
	if (listener_add(srv, fd, NULL, err) < 0)
		return -1;
	TAKE_FD(fd); /* the listener's now */
	return 0;
}

int http_server_listen_unix(struct http_server *srv, const char *path, struct err *err)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	if (strlen(path) >= sizeof(sun.sun_path))
		return err_set(err, ENAMETOOLONG, "socket path `%s` is longer than %zu bytes", path,
			       sizeof(sun.sun_path) - 1);
	if (srv->nlisteners == ARRAY_SIZE(srv->listeners))
		return err_set(err, ENOSPC, "too many listeners");
	strcpy(sun.sun_path, path);

	/* A socket file left by a previous run is removed, one a live daemon answers on is not. */
	struct stat st;
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode))
			return err_set(err, EEXIST, "`%s` exists and is not a socket", path);
		_cleanup_close_ int probe = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (probe >= 0 && connect(probe, (struct sockaddr *)&sun, sizeof(sun)) == 0)
			return err_set(err, EADDRINUSE, "another daemon is listening on `%s`",
				       path);
		unlink(path);
	}
	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return err_sys(err, errno, "socket");
	if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0 || listen(fd, 1024) < 0)
		return err_sys(err, errno, "cannot listen on `%s`", path);
	chmod(path, 0660);
	if (listener_add(srv, fd, path, err) < 0) {
		unlink(path);
		return -1;
	}
	TAKE_FD(fd);
	return 0;
}

void http_server_stop_accepting(struct http_server *srv)
{
	for (size_t i = 0; i < srv->nlisteners; i++) {
		struct http_listener *l = &srv->listeners[i];
		if (l->resume)
			event_free(l->resume);
		l->resume = NULL;
		if (l->lev)
			evconnlistener_free(l->lev);
		l->lev = NULL;
		if (l->unix_path) {
			unlink(l->unix_path);
			free(l->unix_path);
			l->unix_path = NULL;
		}
	}
	/* Open connections stay: during the shutdown grace their requests get 503 (the API's
	 * answer), not a reset. */
}

size_t http_server_inflight(struct http_server *srv)
{
	return srv->inflight;
}

void http_server_stats(struct http_server *srv, struct http_stats *st)
{
	*st = srv->stats;
	st->reading_heads = 0;
	st->body_mem = st->body_spool = 0;
	for (struct body_budget *b = srv->budgets; b; b = b->next) {
		st->body_mem += b->mem;
		st->body_spool += b->spool;
	}
	struct http_conn *c;
	TAILQ_FOREACH (c, &srv->waiting, waiting)
		st->reading_heads += c->state == C_HEAD;
}

void http_server_free(struct http_server *srv)
{
	if (!srv)
		return;
	http_server_stop_accepting(srv);
	struct http_conn *c;
	while ((c = TAILQ_FIRST(&srv->conns)))
		conn_free(c);
	for (size_t i = 0; i < ADDR_BUCKETS; i++)
		while (srv->addrs[i])
			addr_drop(srv, srv->addrs[i]);
	free(srv);
}

/* --- accessors ---------------------------------------------------------------------- */

const char *http_method(struct http_ctx *ctx)
{
	return method_name(ctx->method);
}

const char *http_param(struct http_ctx *ctx, size_t i)
{
	return i < ctx->nparams ? ctx->params[i] : NULL;
}

const char *http_query(struct http_ctx *ctx, const char *name)
{
	if (!ctx->query) {
		ctx->query = xcalloc(1, sizeof(*ctx->query));
		TAILQ_INIT(ctx->query);
		const char *t = ctx->conn ? ctx->conn->h1.head.target : NULL;
		const char *q = t ? strchr(t, '?') : NULL;
		if (q) {
			_cleanup_free_ char *qs = strndup(q + 1, strcspn(q + 1, "#"));
			if (qs)
				evhttp_parse_query_str(qs, ctx->query);
		}
	}
	return evhttp_find_header(ctx->query, name);
}

const char *http_header(struct http_ctx *ctx, const char *name)
{
	if (!ctx->conn)
		return NULL;
	return h1_header(&ctx->conn->h1, name);
}

size_t http_header_count(struct http_ctx *ctx)
{
	return ctx->conn ? ctx->conn->h1.head.nheaders : 0;
}

void http_header_at(struct http_ctx *ctx, size_t i, const char **name, const char **value)
{
	h1_header_at(&ctx->conn->h1, i, name, value);
}

const char *http_target(struct http_ctx *ctx)
{
	return ctx->conn && ctx->conn->h1.head.target ? ctx->conn->h1.head.target : "";
}

void http_body_framing(struct http_ctx *ctx, uint64_t *length, bool *chunked)
{
	*length = ctx->conn ? ctx->conn->h1.head.content_length : 0;
	*chunked = ctx->conn && ctx->conn->h1.head.chunked;
}

const char *http_peer(struct http_ctx *ctx)
{
	if (ctx->peer_override)
		return ctx->peer_override;
	return ctx->conn ? ctx->conn->peer : "";
}

const char *http_conn_peer(struct http_ctx *ctx)
{
	return ctx->conn ? ctx->conn->peer : "";
}

void http_set_peer(struct http_ctx *ctx, const char *addr)
{
	free(ctx->peer_override);
	ctx->peer_override = xstrdup(addr);
}

void http_reroute(struct http_ctx *ctx, const struct http_route *route, void *arg,
		  void (*arg_free)(void *arg))
{
	if (ctx->route_arg_free)
		ctx->route_arg_free(ctx->route_arg);
	ctx->route = route;
	ctx->route_arg = arg;
	ctx->route_arg_free = arg_free;
}

bool http_from_unix_socket(struct http_ctx *ctx)
{
	return ctx->conn && ctx->conn->is_unix;
}

bool http_accepts(struct http_ctx *ctx, const char *type)
{
	const char *accept = http_header(ctx, "Accept");
	return accept && strstr(accept, type);
}

const uint8_t *http_body(struct http_ctx *ctx, size_t *len)
{
	*len = ctx->body ? evbuffer_get_length(ctx->body) : 0;
	return *len ? evbuffer_pullup(ctx->body, -1) : (const uint8_t *)"";
}

int http_json_limits_check(struct http_ctx *ctx, const uint8_t *body, size_t len, struct err *err)
{
	const struct config *cfg = ctx->srv->cfg;
	struct jsonlimit lim = { .max_depth = cfg->max_json_depth ? cfg->max_json_depth : 32,
				 .max_elements =
					 cfg->max_json_elements ? cfg->max_json_elements : 10000 };
	return jsonlimit_check(body, len, &lim, err);
}

int http_body_json(struct http_ctx *ctx, json_t **ret)
{
	if (ctx->parsed_ready) {
		const struct http_parse_error *why;
		json_auto_t *j = http_body_take_parsed(ctx, &why);
		if (!j && why && why->over_limit) {
			http_reply_error(ctx, why->status, "%s", why->msg);
			return -1;
		}
		if (!j) {
			http_reply_error(ctx, 400, "Malformed JSON body: %s (line %d, column %d)",
					 why ? why->msg : "?", why ? why->line : 0,
					 why ? why->column : 0);
			return -1;
		}
		if (!json_is_object(j)) {
			http_reply_error(ctx, 400, "The request body must be a JSON object");
			return -1;
		}
		*ret = TAKE_PTR(j);
		return 0;
	}
	size_t len;
	const uint8_t *body = http_body(ctx, &len);
	if (len == 0) {
		*ret = json_object();
		return 0;
	}
	struct err e;
	if (http_json_limits_check(ctx, body, len, &e) < 0) {
		http_reply_err(ctx, &e);
		return -1;
	}
	json_error_t jerr;
	json_auto_t *j = jsonload(body, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!j) {
		http_reply_error(ctx, 400, "Malformed JSON body: %s (line %d, column %d)",
				 jerr.text, jerr.line, jerr.column);
		return -1;
	}
	if (!json_is_object(j)) {
		http_reply_error(ctx, 400, "The request body must be a JSON object");
		return -1;
	}
	*ret = TAKE_PTR(j);
	return 0;
}

bool http_body_preparsed(struct http_ctx *ctx)
{
	return ctx->parsed_ready;
}

json_t *http_body_take_parsed(struct http_ctx *ctx, const struct http_parse_error **why)
{
	*why = ctx->parse_error;
	return TAKE_PTR(ctx->parsed);
}

void http_body_stream(struct http_ctx *ctx, const struct http_body_ops *ops, void *arg)
{
	ctx->body_ops = ops;
	ctx->body_arg = arg;
}

void http_body_pause(struct http_ctx *ctx)
{
	struct http_conn *c = ctx->conn;
	if (!c || c->body_paused)
		return;
	c->body_paused = true;
	c->pause_start_ns = time_mono_ns();
	evtimer_del(c->timer); /* the client is not the slow one now */
	bufferevent_disable(c->bev, EV_READ);
}

void http_body_resume(struct http_ctx *ctx)
{
	struct http_conn *c = ctx->conn;
	if (!c || !c->body_paused)
		return;
	c->body_paused = false;
	c->body_paused_ns += time_mono_ns() - c->pause_start_ns;
	if (c->state == C_BODY)
		body_arm(c);
	bufferevent_enable(c->bev, EV_READ);
	/* What was read before the pause is fed from the loop, not from the caller's frame. */
	bufferevent_trigger(c->bev, EV_READ, BEV_TRIG_DEFER_CALLBACKS | BEV_TRIG_IGNORE_WATERMARKS);
}

/* --- replies ------------------------------------------------------------------------ */

void http_add_header(struct http_ctx *ctx, const char *name, const char *value)
{
	if (ctx->replied || ctx->streaming || !safe_header_text(name) || !safe_header_text(value))
		return;
	if (!ctx->headers)
		ctx->headers = evbuffer_new();
	evbuffer_add_printf(ctx->headers, "%s: %s\r\n", name, value);
}

/* Queues the status line and headers. `length` < 0: a stream. */
static void send_head(struct http_ctx *ctx, int status, const char *content_type, ssize_t length)
{
	struct http_conn *c = ctx->conn;
	struct evbuffer *out = bufferevent_get_output(c->bev);
	bool http10 = c->h1.head.http_major == 1 && c->h1.head.http_minor == 0;
	/* A request answered before its body was read, or that asked for it, closes after. */
	if (c->state == C_HEAD || c->state == C_BODY || c->upgrading)
		c->close_after = true;
	evbuffer_add_printf(out, "HTTP/1.1 %d %s\r\nDate: %s\r\nX-Request-Id: %s\r\n", status,
			    reason_phrase(status), http_date(c->srv), ctx->id);
	if (content_type)
		evbuffer_add_printf(out, "Content-Type: %s\r\n", content_type);
	if (length >= 0) {
		evbuffer_add_printf(out, "Content-Length: %zd\r\n", length);
	} else if (length == HTTP_LENGTH_NONE) {
		/* a status without a body: nothing says how long it is */
	} else if (!http10) {
		evbuffer_add(out, "Transfer-Encoding: chunked\r\n", 28);
		ctx->chunked = true;
	} else {
		c->close_after = true; /* the stream ends when the connection does */
	}
	if (ctx->headers)
		evbuffer_add_buffer(out, ctx->headers);
	if (c->close_after)
		evbuffer_add(out, "Connection: close\r\n", 19);
	else if (http10)
		evbuffer_add(out, "Connection: keep-alive\r\n", 24);
	evbuffer_add(out, "\r\n", 2);
}

/* A whole reply: its body either bytes to copy or an evbuffer to move. */
static void reply_at_once(struct http_ctx *ctx, int status, const char *content_type,
			  const void *data, size_t len, struct evbuffer *body)
{
	if (ctx->replied)
		return;
	ctx->replied = true;
	struct http_conn *c = ctx->conn;
	if (c) {
		/* The status sent: a reply to a client already gone sends nothing (499). */
		ctx->status = status;
		if (c->state == C_HEAD || c->state == C_BODY)
			c->answered = true;
		send_head(ctx, status, content_type, (ssize_t)len);
		if (!ctx->head_only) {
			if (body)
				evbuffer_add_buffer(bufferevent_get_output(c->bev), body);
			else
				bufferevent_write(c->bev, data, len);
		}
		ctx->holds++;
		conn_reply_done(c);
		ctx->holds--;
	}
	ctx_maybe_free(ctx);
}

void http_reply_bytes(struct http_ctx *ctx, int status, const char *content_type, const void *data,
		      size_t len)
{
	reply_at_once(ctx, status, content_type, data, len, NULL);
}

void http_reply_buffer(struct http_ctx *ctx, int status, const char *content_type,
		       struct evbuffer *body)
{
	reply_at_once(ctx, status, content_type, NULL, evbuffer_get_length(body), body);
}

void http_reply_json(struct http_ctx *ctx, int status, json_t *body)
{
	_cleanup_free_ char *text = json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(15));
	json_decref(body);
	http_reply_bytes(ctx, status, "application/json", text, strlen(text));
}

void http_reply_error(struct http_ctx *ctx, int status, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* Messages may quote what a client or a guest sent: keep the JSON valid whatever. */
	_cleanup_free_ char *clean = utf8_sanitize((const uint8_t *)msg, strlen(msg), NULL);
	http_reply_json(ctx, status, json_pack("{s:s}", "error", clean));
}

int http_status_for_errno(int errnum)
{
	switch (errnum) {
	case ENOENT:
	case ESRCH:
		return 404;
	case EINVAL:
	case EPROTO:
	case EXDEV:
	case EISDIR:
	case ENOTDIR:
	case ENAMETOOLONG:
	case ELOOP:
	case EBADMSG:
	case EACCES:
	case EPERM:
		return 400;
	case EFBIG:
	case E2BIG:
	case EMSGSIZE:
		return 413;
	case EEXIST:
	case EBUSY:
	case ENOTEMPTY:
	case ESTALE: /* a file changed while it was read */
		return 409;
	case EAGAIN:
		return 429;
	case ENOSPC:
	case EDQUOT:
		return 507;
	case ETIMEDOUT:
		return 504;
	case ECONNRESET:
	case ENOTCONN:
	case EPIPE:
	case EREMOTEIO:       /* the sandbox's agent broke the protocol */
	case EPROTONOSUPPORT: /* its agent is too old for this server */
		return 502;
	case ENOTSUP:
	case ENOSYS:
		return 501;
	case ENOMEM:       /* the host is low on memory (admission) */
	case EMFILE:       /* the daemon is low on descriptors (admission) */
	case EROFS:        /* the server cannot record what it would create */
	case ESHUTDOWN:    /* the server is shutting down */
	case EHOSTUNREACH: /* no node of the cluster can take it */
		return 503;
	case ECANCELED:
		return 409;
	default:
		return 500;
	}
}

void http_reply_err(struct http_ctx *ctx, const struct err *err)
{
	http_reply_error(ctx, http_status_for_errno(err->errnum), "%s", err->msg);
}

void http_stream_start(struct http_ctx *ctx, int status, const char *content_type)
{
	if (ctx->streaming || ctx->replied)
		return;
	ctx->streaming = true;
	struct http_conn *c = ctx->conn;
	if (!c)
		return; /* the client is gone: nothing is sent (499) */
	ctx->status = status;
	http_add_header_raw(ctx, "Cache-Control", "no-cache");
	http_add_header_raw(ctx, "X-Accel-Buffering", "no");
	send_head(ctx, status, content_type, -1);
}

/* A stream's head with the headers added so far and no defaults of its own. */
static void stream_head(struct http_ctx *ctx, int status, const char *content_type, ssize_t length)
{
	if (ctx->streaming || ctx->replied)
		return;
	ctx->streaming = true;
	if (!ctx->conn)
		return; /* the client is gone: nothing is sent (499) */
	ctx->status = status;
	send_head(ctx, status, content_type, length);
}

void http_stream_start_raw(struct http_ctx *ctx, int status, int64_t length)
{
	stream_head(ctx, status, NULL, (ssize_t)length);
}

void http_stream_start_sized(struct http_ctx *ctx, int status, const char *content_type,
			     uint64_t length)
{
	stream_head(ctx, status, content_type, (ssize_t)length);
}

void http_stream_abort(struct http_ctx *ctx)
{
	if (ctx->replied)
		return;
	ctx->replied = true;
	struct http_conn *c = ctx->conn;
	if (c) {
		/* No last chunk, and the connection closes once what is queued is out: the client
		 * sees a body cut short, never one that looks complete. */
		c->close_after = true;
		ctx->holds++;
		conn_reply_done(c);
		ctx->holds--;
	}
	ctx_maybe_free(ctx);
}

void http_stream_write(struct http_ctx *ctx, const void *data, size_t len)
{
	struct http_conn *c = ctx->conn;
	if (!c || ctx->replied || !ctx->streaming || len == 0 || ctx->head_only)
		return;
	struct evbuffer *out = bufferevent_get_output(c->bev);
	if (ctx->chunked)
		evbuffer_add_printf(out, "%zx\r\n", len);
	evbuffer_add(out, data, len);
	if (ctx->chunked)
		evbuffer_add(out, "\r\n", 2);
}

void http_stream_guard(struct http_ctx *ctx)
{
	ctx->send_guard = true;
}

size_t http_stream_pending(struct http_ctx *ctx)
{
	struct http_conn *c = ctx->conn;
	return c ? evbuffer_get_length(bufferevent_get_output(c->bev)) : 0;
}

static void drain_later(evutil_socket_t fd, short what, void *arg)
{
	struct http_ctx *ctx = arg;
	void (*fn)(struct http_ctx *, void *) = ctx->drain_fn;
	ctx->drain_fn = NULL;
	if (fn && !ctx->replied) /* a producer that answered is done waiting */
		fn(ctx, ctx->drain_arg);
	http_ctx_release(ctx);
}

void http_stream_on_drain(struct http_ctx *ctx, size_t below,
			  void (*fn)(struct http_ctx *ctx, void *arg), void *arg)
{
	ctx->drain_fn = fn;
	ctx->drain_arg = arg;
	ctx->drain_below = below ? below : 1;
	struct http_conn *c = ctx->conn;
	if (!fn)
		return;
	if (!c) {
		/* Nothing waits to go out any more: fn runs from the loop. */
		ctx->holds++;
		struct timeval now = { 0, 0 };
		event_base_once(ctx->srv->base, -1, EV_TIMEOUT, drain_later, ctx, &now);
		return;
	}
	/* The write callback runs when the output falls to the low mark; below it already, it
	 * is made to run from the loop. */
	bufferevent_setwatermark(c->bev, EV_WRITE, below ? below - 1 : 0, 0);
	if (http_stream_pending(ctx) < ctx->drain_below)
		bufferevent_trigger(c->bev, EV_WRITE,
				    BEV_TRIG_DEFER_CALLBACKS | BEV_TRIG_IGNORE_WATERMARKS);
}

void http_stream_end(struct http_ctx *ctx)
{
	if (ctx->replied)
		return;
	ctx->replied = true;
	struct http_conn *c = ctx->conn;
	if (c) {
		if (!ctx->streaming) /* ended without a start: an empty 200 is still JSON-less */
			send_head(ctx, ctx->status ? ctx->status : 200, NULL, -1);
		if (ctx->chunked && !ctx->head_only)
			evbuffer_add(bufferevent_get_output(c->bev), "0\r\n\r\n", 5);
		ctx->holds++;
		conn_reply_done(c);
		ctx->holds--;
	}
	ctx_maybe_free(ctx);
}

/* --- upgrades ------------------------------------------------------------------------ */

struct bufferevent *http_upgrade_raw(struct http_ctx *ctx, int status)
{
	struct http_conn *c = ctx->conn;
	if (ctx->replied)
		return NULL;
	if (!c) {
		http_reply_error(ctx, 400, "The client is gone");
		return NULL;
	}
	if (!c->upgrading || c->state != C_WAIT) {
		http_reply_error(ctx, 400, "This request cannot take over its connection");
		return NULL;
	}
	ctx->replied = true;
	ctx->status = status;
	struct evbuffer *out = bufferevent_get_output(c->bev);
	evbuffer_add_printf(out, "HTTP/1.1 %d %s\r\nDate: %s\r\nX-Request-Id: %s\r\n", status,
			    reason_phrase(status), http_date(c->srv), ctx->id);
	if (ctx->headers)
		evbuffer_add_buffer(out, ctx->headers);
	evbuffer_add(out, "\r\n", 2);
	/* The connection leaves the layer: its bufferevent goes to the caller, with its
	 * watermarks and callbacks reset. */
	struct bufferevent *bev = c->bev;
	evbuffer_remove_cb_entry(bufferevent_get_output(bev), c->out_cb);
	evtimer_del(c->stall);
	c->bev = NULL;
	c->ctx = NULL;
	ctx->conn = NULL;
	ctx->complete = true;
	bufferevent_setcb(bev, NULL, NULL, NULL, NULL);
	bufferevent_setwatermark(bev, EV_READ | EV_WRITE, 0, 0);
	bufferevent_disable(bev, EV_READ);
	c->state = C_CLOSING;
	conn_close(c);
	ctx_maybe_free(ctx);
	return bev;
}

bool http_upgrade_requested(struct http_ctx *ctx)
{
	return ctx->conn && ctx->conn->upgrading;
}

void http_add_header_raw(struct http_ctx *ctx, const char *name, const char *value)
{
	if (!ctx->headers)
		ctx->headers = evbuffer_new();
	evbuffer_add_printf(ctx->headers, "%s: %s\r\n", name, value);
}

void http_redact_uri(const char *uri, char *out, size_t outlen)
{
	size_t o = 0;
	const char *q = strchr(uri, '?');
	size_t head = q ? (size_t)(q - uri) + 1 : strlen(uri);
	for (size_t i = 0; i < head && o + 1 < outlen; i++)
		out[o++] = uri[i];
	if (q) {
		const char *p = q + 1;
		while (*p && o + 1 < outlen) {
			const char *end = strchrnul(p, '&');
			const char *eq = memchr(p, '=', (size_t)(end - p));
			size_t keylen = eq ? (size_t)(eq - p) : (size_t)(end - p);
			bool secret = (keylen == 7 && !strncmp(p, "api_key", 7)) ||
				      (keylen == 6 && !strncmp(p, "apiKey", 6)) ||
				      (keylen == 5 && !strncmp(p, "token", 5)) ||
				      (keylen == 6 && !strncmp(p, "ticket", 6)) ||
				      (keylen == 13 && !strncmp(p, "sandbox_token", 13));
			const char *copy_end = secret && eq ? eq + 1 : end;
			for (const char *c = p; c < copy_end && o + 1 < outlen; c++)
				out[o++] = *c;
			if (secret && eq)
				for (const char *r = "REDACTED"; *r && o + 1 < outlen; r++)
					out[o++] = *r;
			if (*end == '&' && o + 1 < outlen)
				out[o++] = '&';
			p = *end ? end + 1 : end;
		}
	}
	out[o < outlen ? o : outlen - 1] = '\0';
}
