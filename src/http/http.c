#include "http/http.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <sys/queue.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/log.h"
#include "util/text.h"
#include "util/time.h"

/* How long accepting pauses when it fails for want of descriptors (EMFILE, ENFILE) or
 * memory: a failing accept() in a level-triggered loop would otherwise spin. */
#define ACCEPT_PAUSE_MS 100

struct http_listener {
	struct evhttp_bound_socket *sock;
	char *unix_path;
	struct event *resume; /* re-enables accepting after a pause */
	uint64_t warned_ms;   /* when the last pause was logged */
};

struct http_server {
	struct event_base *base;
	struct evhttp *evh;
	const struct config *cfg;
	const struct http_route *routes;
	size_t nroutes;
	http_auth_fn auth;
	void *auth_arg;
	http_done_fn done;
	void *done_arg;
	struct http_listener listeners[4];
	size_t nlisteners;
	size_t inflight;
	uint64_t next_id;
};

/* libevent answers some protocol errors itself (413 for an oversize body, 400 for a
 * malformed request line, 405...) through evhttp_send_error(), with an HTML page. The
 * library calls it through its PLT, so this definition takes its place and every such
 * answer is JSON like the rest of the API. */
void evhttp_send_error(struct evhttp_request *req, int error, const char *reason)
{
	json_auto_t *body = json_object();
	const char *msg = reason;
	if (!msg) {
		switch (error) {
		case HTTP_ENTITYTOOLARGE:
			msg = "Request body too large";
			break;
		case HTTP_BADREQUEST:
			msg = "Malformed HTTP request";
			break;
		case HTTP_BADMETHOD:
			msg = "Method not allowed";
			break;
		case HTTP_NOTFOUND:
			msg = "Not found";
			break;
		default:
			msg = "HTTP error";
		}
	}
	json_object_set_new(body, "error", json_string(msg));
	_cleanup_free_ char *text = json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(15));
	struct evbuffer *buf = evbuffer_new();
	evbuffer_add(buf, text, strlen(text));
	struct evkeyvalq *out = evhttp_request_get_output_headers(req);
	evhttp_remove_header(out, "Content-Type");
	evhttp_add_header(out, "Content-Type", "application/json");
	evhttp_add_header(out, "Connection", "close");
	evhttp_send_reply(req, error, NULL, buf);
	evbuffer_free(buf);
}

/* --- ctx lifetime ------------------------------------------------------------------- */

static void ctx_maybe_free(struct http_ctx *ctx);

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
		log_fields(LOG_INFO, "http", f, "request");
	}
}

static void watch_stop(struct http_ctx *ctx);

static void ctx_free(struct http_ctx *ctx)
{
	watch_stop(ctx);
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
	if (ctx->orphan)
		evhttp_request_free(ctx->orphan);
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

static void watch_stop(struct http_ctx *ctx)
{
	if (ctx->close_ev) {
		event_free(ctx->close_ev);
		ctx->close_ev = NULL;
	}
}

static void on_conn_close(struct evhttp_connection *evcon, void *arg)
{
	struct http_ctx *ctx = arg;
	watch_stop(ctx);
	evhttp_connection_set_closecb(evcon, NULL, NULL);
	/* When a client leaves while its reply is under way, libevent detaches the request from
	 * the connection and leaves freeing it to us; a request still attached is freed with
	 * its connection. */
	if (ctx->req && !evhttp_request_get_connection(ctx->req))
		ctx->orphan = ctx->req;
	ctx->req = NULL;
	ctx->gone = true;
	if (ctx->on_gone && !ctx->replied) {
		void (*fn)(struct http_ctx *, void *) = ctx->on_gone;
		ctx->on_gone = NULL;
		ctx->holds++;
		fn(ctx, ctx->on_gone_arg);
		ctx->holds--;
	}
	ctx_maybe_free(ctx);
}

static void on_complete(struct evhttp_request *req, void *arg)
{
	struct http_ctx *ctx = arg;
	watch_stop(ctx);
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	if (evcon)
		evhttp_connection_set_closecb(evcon, NULL, NULL);
	ctx->req = NULL;
	ctx->complete = true;
	ctx_maybe_free(ctx);
}

/* libevent reads nothing from a connection while its request awaits an answer, so it does not
 * notice a client that leaves before the answer starts (or during a quiet stream). An
 * EV_CLOSED watch (EPOLLRDHUP) on the socket does; closing the connection then runs the usual
 * client-gone path, which cancels whatever the request started. */
static void on_peer_closed(evutil_socket_t fd, short what, void *arg)
{
	struct http_ctx *ctx = arg;
	watch_stop(ctx);
	struct evhttp_connection *evcon = ctx->req ? evhttp_request_get_connection(ctx->req) : NULL;
	if (evcon)
		evhttp_connection_free(evcon);
}

static void watch_start(struct http_ctx *ctx)
{
	if (!ctx->req || ctx->close_ev ||
	    !(event_base_get_features(ctx->srv->base) & EV_FEATURE_EARLY_CLOSE))
		return;
	struct evhttp_connection *evcon = evhttp_request_get_connection(ctx->req);
	struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
	evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
	if (fd < 0)
		return;
	ctx->close_ev = event_new(ctx->srv->base, fd, EV_CLOSED, on_peer_closed, ctx);
	if (ctx->close_ev)
		event_add(ctx->close_ev, NULL);
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

static void dispatch(struct evhttp_request *req, void *arg)
{
	struct http_server *srv = arg;
	struct http_ctx *ctx = xcalloc(1, sizeof(*ctx));
	ctx->req = req;
	ctx->srv = srv;
	ctx->start_ns = time_mono_ns();
	snprintf(ctx->id, sizeof(ctx->id), "%016llx",
		 (unsigned long long)(srv->next_id++ ^ (ctx->start_ns << 20)));
	srv->inflight++;
	ctx->method_name = http_method(ctx);

	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	evhttp_connection_set_closecb(evcon, on_conn_close, ctx);
	evhttp_request_set_on_complete_cb(req, on_complete, ctx);
	evhttp_add_header(evhttp_request_get_output_headers(req), "X-Request-Id", ctx->id);

	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
	if (!path || !*path)
		path = "/";
	int method = (int)evhttp_request_get_command(req);

	bool path_known = false;
	for (size_t i = 0; i < srv->nroutes; i++) {
		const struct http_route *r = &srv->routes[i];
		if (!route_match(r->pattern, path, ctx))
			continue;
		path_known = true;
		if (!(r->methods & method)) {
			for (size_t j = 0; j < ctx->nparams; j++)
				free(ctx->params[j]);
			ctx->nparams = 0;
			continue;
		}
		ctx->route = r;
		if (srv->auth && srv->auth(ctx, r->scope, srv->auth_arg) < 0)
			return;
		ctx->holds++;
		r->fn(ctx);
		if (!ctx->replied)
			watch_start(ctx);
		ctx->holds--;
		ctx_maybe_free(ctx);
		return;
	}
	if (path_known)
		http_reply_error(ctx, 405, "Method %s not allowed on %s", http_method(ctx), path);
	else
		http_reply_error(ctx, 404, "Not found");
}

struct http_server *http_server_new(struct event_base *base, const struct config *cfg,
				    const struct http_route *routes, size_t nroutes)
{
	struct http_server *srv = xcalloc(1, sizeof(*srv));
	srv->base = base;
	srv->cfg = cfg;
	srv->routes = routes;
	srv->nroutes = nroutes;
	srv->evh = evhttp_new(base);
	if (!srv->evh)
		abort();
	evhttp_set_allowed_methods(srv->evh, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
						     EVHTTP_REQ_DELETE | EVHTTP_REQ_PATCH |
						     EVHTTP_REQ_HEAD | EVHTTP_REQ_OPTIONS);
	evhttp_set_max_body_size(srv->evh, (ev_ssize_t)cfg->max_body_bytes);
	evhttp_set_max_headers_size(srv->evh, 64 * 1024);
	evhttp_set_default_content_type(srv->evh, "application/json");
	/* Read an oversize body to its end before answering 413, so the client sees the JSON
	 * error rather than a connection reset. */
	evhttp_set_flags(srv->evh, EVHTTP_SERVER_LINGERING_CLOSE);
	evhttp_set_gencb(srv->evh, dispatch, srv);
	return srv;
}

void http_server_set_auth(struct http_server *srv, http_auth_fn fn, void *arg)
{
	srv->auth = fn;
	srv->auth_arg = arg;
}

void http_server_set_done(struct http_server *srv, http_done_fn fn, void *arg)
{
	srv->done = fn;
	srv->done_arg = arg;
}

static void on_accept_resume(evutil_socket_t fd, short what, void *arg)
{
	struct http_listener *l = arg;
	if (l->sock)
		evconnlistener_enable(evhttp_bound_socket_get_listener(l->sock));
}

/* The listeners whose accept errors are watched: libevent hands the error callback evhttp's
 * argument, not ours, so the listener is found by its evconnlistener. Loop thread only. */
static struct http_listener *watched[16];

/* accept() failed for a reason the next try may not have (the descriptor limit reached):
 * accepting pauses, is logged once a burst, and resumes by itself. */
static void on_accept_error(struct evconnlistener *lev, void *arg)
{
	int e = EVUTIL_SOCKET_ERROR();
	struct http_listener *l = NULL;
	for (size_t i = 0; i < ARRAY_SIZE(watched) && !l; i++)
		if (watched[i] && watched[i]->sock &&
		    evhttp_bound_socket_get_listener(watched[i]->sock) == lev)
			l = watched[i];
	if (!l)
		return;
	evconnlistener_disable(lev);
	uint64_t now = time_mono_ms();
	if (!l->warned_ms || now - l->warned_ms >= 10000)
		log_warn("http", "accepting paused for %d ms: %s", ACCEPT_PAUSE_MS, strerror(e));
	l->warned_ms = now;
	struct timeval tv = { .tv_usec = ACCEPT_PAUSE_MS * 1000 };
	evtimer_add(l->resume, &tv);
}

static void listener_watch(struct http_server *srv, struct http_listener *l)
{
	l->resume = evtimer_new(srv->base, on_accept_resume, l);
	for (size_t i = 0; i < ARRAY_SIZE(watched); i++) {
		if (!watched[i]) {
			watched[i] = l;
			evconnlistener_set_error_cb(evhttp_bound_socket_get_listener(l->sock),
						    on_accept_error);
			return;
		}
	}
}

static void listener_unwatch(struct http_listener *l)
{
	for (size_t i = 0; i < ARRAY_SIZE(watched); i++)
		if (watched[i] == l)
			watched[i] = NULL;
	if (l->resume)
		event_free(l->resume);
	l->resume = NULL;
}

int http_server_listen_tcp(struct http_server *srv, const char *host, int port, int *ret_port,
			   struct err *err)
{
	if (srv->nlisteners == ARRAY_SIZE(srv->listeners))
		return err_set(err, ENOSPC, "too many listeners");
	struct evhttp_bound_socket *s =
		evhttp_bind_socket_with_handle(srv->evh, host, (ev_uint16_t)port);
	if (!s)
		return err_sys(err, errno ? errno : EADDRNOTAVAIL, "cannot listen on %s:%d", host,
			       port);
	srv->listeners[srv->nlisteners] = (struct http_listener){ .sock = s };
	listener_watch(srv, &srv->listeners[srv->nlisteners++]);
	if (ret_port) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		int fd = evhttp_bound_socket_get_fd(s);
		if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
			return err_sys(err, errno, "getsockname");
		if (ss.ss_family == AF_INET)
			*ret_port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
		else
			*ret_port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	}
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
	if (bind(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0 || listen(fd, 128) < 0)
		return err_sys(err, errno, "cannot listen on `%s`", path);
	chmod(path, 0660);
	struct evhttp_bound_socket *s = evhttp_accept_socket_with_handle(srv->evh, fd);
	if (!s) {
		unlink(path);
		return err_set(err, EIO, "cannot accept on `%s`", path);
	}
	TAKE_FD(fd); /* the listener's now: evhttp closes it */
	srv->listeners[srv->nlisteners] =
		(struct http_listener){ .sock = s, .unix_path = xstrdup(path) };
	listener_watch(srv, &srv->listeners[srv->nlisteners++]);
	return 0;
}

void http_server_stop_accepting(struct http_server *srv)
{
	for (size_t i = 0; i < srv->nlisteners; i++) {
		struct http_listener *l = &srv->listeners[i];
		listener_unwatch(l);
		if (l->sock)
			evhttp_del_accept_socket(srv->evh, l->sock);
		l->sock = NULL;
		if (l->unix_path) {
			unlink(l->unix_path);
			free(l->unix_path);
			l->unix_path = NULL;
		}
	}
}

size_t http_server_inflight(struct http_server *srv)
{
	return srv->inflight;
}

void http_server_free(struct http_server *srv)
{
	if (!srv)
		return;
	http_server_stop_accepting(srv);
	evhttp_free(srv->evh);
	free(srv);
}

/* --- accessors ---------------------------------------------------------------------- */

const char *http_method(struct http_ctx *ctx)
{
	if (!ctx->req)
		return ctx->method_name ? ctx->method_name : "?";
	switch (evhttp_request_get_command(ctx->req)) {
	case EVHTTP_REQ_GET:
		return "GET";
	case EVHTTP_REQ_POST:
		return "POST";
	case EVHTTP_REQ_PUT:
		return "PUT";
	case EVHTTP_REQ_DELETE:
		return "DELETE";
	case EVHTTP_REQ_PATCH:
		return "PATCH";
	case EVHTTP_REQ_HEAD:
		return "HEAD";
	case EVHTTP_REQ_OPTIONS:
		return "OPTIONS";
	default:
		return "OTHER";
	}
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
		const struct evhttp_uri *uri =
			ctx->req ? evhttp_request_get_evhttp_uri(ctx->req) : NULL;
		const char *q = uri ? evhttp_uri_get_query(uri) : NULL;
		if (q)
			evhttp_parse_query_str(q, ctx->query);
	}
	return evhttp_find_header(ctx->query, name);
}

const char *http_header(struct http_ctx *ctx, const char *name)
{
	if (!ctx->req)
		return NULL;
	return evhttp_find_header(evhttp_request_get_input_headers(ctx->req), name);
}

const char *http_peer(struct http_ctx *ctx)
{
	char *addr = NULL;
	ev_uint16_t port = 0;
	if (!ctx->req)
		return "";
	evhttp_connection_get_peer(evhttp_request_get_connection(ctx->req), &addr, &port);
	return addr ? addr : "";
}

bool http_accepts(struct http_ctx *ctx, const char *type)
{
	const char *accept = http_header(ctx, "Accept");
	return accept && strstr(accept, type);
}

const uint8_t *http_body(struct http_ctx *ctx, size_t *len)
{
	*len = 0;
	if (!ctx->req)
		return NULL;
	struct evbuffer *in = evhttp_request_get_input_buffer(ctx->req);
	*len = evbuffer_get_length(in);
	return *len ? evbuffer_pullup(in, -1) : (const uint8_t *)"";
}

int http_body_json(struct http_ctx *ctx, json_t **ret)
{
	size_t len;
	const uint8_t *body = http_body(ctx, &len);
	if (len == 0) {
		*ret = json_object();
		return 0;
	}
	if (len > ctx->srv->cfg->max_body_bytes) {
		http_reply_error(ctx, 413, "Request body of %zu bytes exceeds the limit of %zu",
				 len, ctx->srv->cfg->max_body_bytes);
		return -1;
	}
	json_error_t jerr;
	json_auto_t *j = json_loadb((const char *)body, len, JSON_REJECT_DUPLICATES, &jerr);
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

/* --- replies ------------------------------------------------------------------------ */

void http_add_header(struct http_ctx *ctx, const char *name, const char *value)
{
	if (ctx->req)
		evhttp_add_header(evhttp_request_get_output_headers(ctx->req), name, value);
}

static void set_content_type(struct http_ctx *ctx, const char *type)
{
	struct evkeyvalq *out = evhttp_request_get_output_headers(ctx->req);
	evhttp_remove_header(out, "Content-Type");
	evhttp_add_header(out, "Content-Type", type);
}

void http_reply_bytes(struct http_ctx *ctx, int status, const char *content_type, const void *data,
		      size_t len)
{
	if (ctx->replied)
		return;
	ctx->replied = true;
	watch_stop(ctx);
	if (ctx->req) {
		/* The status sent: a reply to a client already gone sends nothing (499). */
		ctx->status = status;
		struct evbuffer *buf = evbuffer_new();
		evbuffer_add(buf, data, len);
		set_content_type(ctx, content_type);
		ctx->holds++; /* in case libevent completes the reply before returning */
		evhttp_send_reply(ctx->req, status, NULL, buf);
		ctx->holds--;
		evbuffer_free(buf);
	}
	ctx_maybe_free(ctx);
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
	case EROFS:     /* the server cannot record what it would create */
	case ESHUTDOWN: /* the server is shutting down */
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
	ctx->streaming = true;
	if (!ctx->req)
		return; /* the client is gone: nothing is sent (499) */
	ctx->status = status;
	set_content_type(ctx, content_type);
	http_add_header(ctx, "Cache-Control", "no-cache");
	http_add_header(ctx, "X-Accel-Buffering", "no");
	evhttp_send_reply_start(ctx->req, status, NULL);
}

void http_stream_write(struct http_ctx *ctx, const void *data, size_t len)
{
	if (!ctx->req || ctx->replied || !ctx->streaming)
		return;
	struct evbuffer *buf = evbuffer_new();
	evbuffer_add(buf, data, len);
	evhttp_send_reply_chunk(ctx->req, buf);
	evbuffer_free(buf);
}

size_t http_stream_pending(struct http_ctx *ctx)
{
	if (!ctx->req)
		return 0;
	struct evhttp_connection *evcon = evhttp_request_get_connection(ctx->req);
	struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;
	return bev ? evbuffer_get_length(bufferevent_get_output(bev)) : 0;
}

void http_stream_end(struct http_ctx *ctx)
{
	if (ctx->replied)
		return;
	ctx->replied = true;
	watch_stop(ctx);
	if (ctx->req) {
		ctx->holds++;
		evhttp_send_reply_end(ctx->req);
		ctx->holds--;
	}
	ctx_maybe_free(ctx);
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
				      (keylen == 5 && !strncmp(p, "token", 5));
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
