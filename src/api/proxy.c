/* proxy: HTTP/1.1 to a TCP port inside a session, for previews (docs/ingress.md).
 *
 * Two forms reach the same thing: the host form, any request whose Host is
 * `<port>-<name>.<SANDBOX_PUBLIC_DOMAIN>` (name: the session's preview name), and the path
 * form, `/exec/<id>/ports/<port>/...`. Both are chosen by the server's host router before the
 * path routes, so that every method and every path below the prefix is the app's.
 *
 * Each client request gets its own connection to the app (ops_connect: made by the sandbox's
 * agent on its loopback, so a jail and a VM work alike, networking on or off, and nothing
 * but that sandbox is reachable). The request goes out with `Connection: close`, its body
 * streamed with the framing it came with; the response is read (http/upstream.h) so that its
 * head can be rewritten and its body re-framed toward our client, who keeps its keep-alive
 * connection. A 101 answer to an Upgrade hands both connections over to a byte relay. Flow
 * control both ways: the client's body is read only as fast as the agent takes it, and the
 * agent's credit is returned only as our client takes the bytes, so a proxied transfer costs
 * about a window of memory whatever its size.
 *
 * Who may: the session's owner (or an admin) by API key; anyone with the session's traffic
 * token (X-Sandbox-Token or E2B-Traffic-Access-Token header, the sandbox_token cookie, or a
 * sandbox_token query parameter, which a GET turns into that cookie by a redirect); anyone
 * at all for a port made public. Before forwarding, every credential is taken out: the
 * Authorization, X-API-Key and token headers, the api_key/apiKey/sandbox_token query
 * parameters and the token's cookie. Path-form responses share the API's origin, so they are
 * served as an opaque origin (CSP sandbox); cookies an app sets never get a Domain. */
#include <errno.h>
#include <stdarg.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/api.h"
#include "api/host.h"
#include "api/auth.h"
#include "http/upstream.h"
#include "metrics/metrics.h"
#include "session/ops.h"
#include "session/preview.h"
#include "util/bev.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/text.h"

#define PROXY_HIGH   (1u << 20) /* bytes toward a client past which credit is held */
#define PROXY_COOKIE "sandbox_token"

enum proxy_form { FORM_HOST, FORM_PATH, FORM_FORWARD };

static void evbuffer_freep(struct evbuffer **b)
{
	if (*b)
		evbuffer_free(*b);
}

struct proxy {
	struct http_ctx *ctx; /* NULL once the reply is out or the client is gone */
	struct ops_call *call;
	enum proxy_form form;
	unsigned port;
	char prefix[200]; /* path form: /exec/<id>/ports/<port> */
	char sid[160];    /* for messages */
	bool upgrade;     /* the client asked to switch protocols */
	bool connected;
	bool body_chunked; /* the request's body goes out chunked */
	bool body_ended;
	/* the app's response */
	struct upstream_reader reader;
	bool head_done; /* its head was taken (sent on, or the upgrade begun) */
	size_t held;    /* credit held back while our client is slow */
	struct event *idle;
	/* after a 101: the client's connection, relayed as bytes */
	struct bufferevent *bev;
	bool relay_closing;
	bool client_eof; /* the client half-closed its side */
};

static const struct ops_connect_cbs proxy_cbs;
static void relay_start(struct proxy *p, const uint8_t *rest, size_t n);
static void relay_close(struct proxy *p);

static const char *status_class(int status)
{
	if (status == 101)
		return "101";
	if (status < 300)
		return "2xx";
	if (status < 400)
		return "3xx";
	if (status < 500)
		return "4xx";
	return "5xx";
}

static const char *form_name(enum proxy_form f)
{
	return f == FORM_HOST ? "host" : f == FORM_PATH ? "path" : "forward";
}

static void count(struct proxy *p, int status)
{
	metrics_add(metrics_daemon.preview_requests_total, 1, form_name(p->form),
		    status_class(status));
}

static void proxy_free(struct proxy *p)
{
	if (p->call)
		ops_call_detach(p->call);
	if (p->idle)
		event_free(p->idle);
	upstream_reader_free(&p->reader);
	if (p->bev)
		bufferevent_free(p->bev);
	metrics_add(metrics_daemon.preview_connections, -1);
	free(p);
}

/* Lets go of the client's request (its reply is out, or it is gone). */
static void detach_ctx(struct proxy *p)
{
	if (!p->ctx)
		return;
	p->ctx->on_gone = NULL;
	http_stream_on_drain(p->ctx, 0, NULL, NULL);
	p->ctx = NULL;
}

/* Ends the request with an error reply (or cuts a reply already under way) and frees p. */
static void proxy_fail(struct proxy *p, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void proxy_fail(struct proxy *p, int status, const char *fmt, ...)
{
	struct http_ctx *ctx = p->ctx;
	detach_ctx(p);
	if (ctx) {
		if (p->head_done) {
			http_stream_abort(ctx);
		} else {
			char msg[600];
			va_list ap;
			va_start(ap, fmt);
			vsnprintf(msg, sizeof(msg), fmt, ap);
			va_end(ap);
			count(p, status);
			http_reply_error(ctx, status, "%s", msg);
		}
	}
	proxy_free(p);
}

static void idle_arm(struct proxy *p)
{
	struct timeval tv = { api_cfg->preview_idle_timeout_ms / 1000,
			      (api_cfg->preview_idle_timeout_ms % 1000) * 1000 };
	evtimer_add(p->idle, &tv);
}

static void on_idle(evutil_socket_t fd, short what, void *arg)
{
	struct proxy *p = arg;
	if (p->bev) {
		relay_close(p);
		return;
	}
	proxy_fail(p, 504, "port %u of session `%s` sent nothing for %u ms", p->port, p->sid,
		   api_cfg->preview_idle_timeout_ms);
}

/* --- the request toward the app ---------------------------------------------------------- */

static bool ieq(const char *a, const char *b)
{
	return strcasecmp(a, b) == 0;
}

/* Besides the hop-by-hop headers: every credential, and what we say of the client ourselves. */
static bool dropped_request_header(const char *name)
{
	static const char *const drop[] = {
		"Authorization",
		"X-API-Key",
		"X-Sandbox-Token",
		"X-Access-Token",
		"E2B-Traffic-Access-Token",
		"Forwarded",
		"X-Forwarded-For",
		"X-Forwarded-Host",
		"X-Forwarded-Proto",
		"X-Forwarded-Prefix",
	};
	for (size_t i = 0; i < sizeof(drop) / sizeof(*drop); i++)
		if (ieq(name, drop[i]))
			return true;
	return false;
}

/* A Cookie header's value without the token's cookie ("" when nothing else is left). */
static void cookie_without_token(const char *v, struct evbuffer *out)
{
	bool first = true;
	for (const char *s = v; *s;) {
		s += strspn(s, " ;");
		size_t len = strcspn(s, ";");
		if (!len)
			break;
		size_t nl = strcspn(s, "=");
		bool ours =
			nl < len && nl == strlen(PROXY_COOKIE) && strncmp(s, PROXY_COOKIE, nl) == 0;
		if (!ours) {
			evbuffer_add_printf(out, "%s%.*s", first ? "" : "; ", (int)len, s);
			first = false;
		}
		s += len;
	}
}

static bool secret_param(const char *p, size_t keylen)
{
	return (keylen == 7 && !strncmp(p, "api_key", 7)) ||
	       (keylen == 6 && !strncmp(p, "apiKey", 6)) ||
	       (keylen == strlen(PROXY_COOKIE) && !strncmp(p, PROXY_COOKIE, keylen));
}

/* Appends the query `q` (after its '?', may be NULL) without the credentials in it. */
static void query_without_secrets(const char *q, struct evbuffer *out)
{
	bool first = true;
	for (const char *p = q; p && *p;) {
		const char *end = strchrnul(p, '&');
		const char *eq = memchr(p, '=', (size_t)(end - p));
		size_t keylen = eq ? (size_t)(eq - p) : (size_t)(end - p);
		if ((size_t)(end - p) && !secret_param(p, keylen)) {
			evbuffer_add_printf(out, "%s%.*s", first ? "?" : "&", (int)(end - p), p);
			first = false;
		}
		p = *end ? end + 1 : end;
	}
}

/* The value of query parameter `name` in `q` (raw, not decoded: tokens are plain). */
static bool query_value(const char *q, const char *name, char *out, size_t cap)
{
	size_t n = strlen(name);
	for (const char *p = q; p && *p;) {
		const char *end = strchrnul(p, '&');
		if ((size_t)(end - p) > n && !strncmp(p, name, n) && p[n] == '=' &&
		    (size_t)(end - p) - n - 1 < cap) {
			memcpy(out, p + n + 1, (size_t)(end - p) - n - 1);
			out[(size_t)(end - p) - n - 1] = '\0';
			return true;
		}
		p = *end ? end + 1 : end;
	}
	return false;
}

/* The client's Cookie without the token's cookie; the credentials go. */
static enum upstream_header head_filter(const char *name, const char *value, struct evbuffer *out,
					void *arg)
{
	if (ieq(name, "Cookie")) {
		_cleanup_(evbuffer_freep) struct evbuffer *c = evbuffer_new();
		cookie_without_token(value, c);
		if (evbuffer_get_length(c)) {
			evbuffer_add(out, "Cookie: ", 8);
			evbuffer_add_buffer(out, c);
			evbuffer_add(out, "\r\n", 2);
		}
		return UPSTREAM_DROP;
	}
	return dropped_request_header(name) ? UPSTREAM_DROP : UPSTREAM_KEEP;
}

static void head_extra(struct evbuffer *b, void *arg)
{
	struct proxy *p = arg;
	const char *host = http_header(p->ctx, "Host");
	evbuffer_add_printf(b, "X-Forwarded-For: %s\r\nX-Forwarded-Proto: http\r\n",
			    http_peer(p->ctx));
	if (host)
		evbuffer_add_printf(b, "X-Forwarded-Host: %s\r\n", host);
	if (p->form == FORM_PATH)
		evbuffer_add_printf(b, "X-Forwarded-Prefix: %s\r\n", p->prefix);
}

/* Sends the request's head to the app. */
static void send_head(struct proxy *p, const char *target_path, const char *query)
{
	_cleanup_(evbuffer_freep) struct evbuffer *t = evbuffer_new();
	evbuffer_add_printf(t, "%s", *target_path ? target_path : "/");
	query_without_secrets(query, t);
	evbuffer_add(t, "", 1);
	struct upstream_request r = {
		.target = (const char *)evbuffer_pullup(t, -1),
		.filter = head_filter,
		.extra = head_extra,
		.arg = p,
		.upgrade = p->upgrade,
	};
	_cleanup_(evbuffer_freep) struct evbuffer *b = evbuffer_new();
	p->body_chunked = upstream_write_head(b, p->ctx, &r);
	size_t len = evbuffer_get_length(b);
	metrics_add(metrics_daemon.preview_bytes_total, (double)len, "in");
	ops_connect_send(p->call, evbuffer_pullup(b, -1), len);
}

static int body_data(struct http_ctx *ctx, const uint8_t *data, size_t len, void *arg)
{
	struct proxy *p = arg;
	if (p->body_chunked) {
		char hdr[24];
		ops_connect_send(p->call, hdr, upstream_chunk_header(hdr, len));
	}
	ops_connect_send(p->call, data, len);
	if (p->body_chunked)
		ops_connect_send(p->call, "\r\n", 2);
	metrics_add(metrics_daemon.preview_bytes_total, (double)len, "in");
	idle_arm(p);
	if (ops_connect_queued(p->call) >= OPS_UPLOAD_HIGH || !p->connected)
		http_body_pause(ctx);
	return 0;
}

static void body_end(struct http_ctx *ctx, void *arg)
{
	struct proxy *p = arg;
	p->body_ended = true;
	if (p->body_chunked)
		ops_connect_send(p->call, "0\r\n\r\n", 5);
}

static const struct http_body_ops body_ops = { .data = body_data, .end = body_end };

/* --- the app's response ------------------------------------------------------------------ */

/* Location, path form: an absolute path (or a URL of the app's own host) gets the prefix. */
static void add_location(struct proxy *p, const char *v)
{
	if (p->form != FORM_PATH) {
		http_add_header(p->ctx, "Location", v);
		return;
	}
	const char *path = NULL;
	if (v[0] == '/' && v[1] != '/') {
		path = v;
	} else {
		/* http://localhost:PORT/..., http://127.0.0.1:PORT/... or our own Host */
		const char *host = http_header(p->ctx, "Host");
		const char *rest = !strncasecmp(v, "http://", 7)    ? v + 7
				   : !strncasecmp(v, "https://", 8) ? v + 8
								    : NULL;
		if (rest) {
			size_t hl = strcspn(rest, "/?#");
			char hostpart[300];
			snprintf(hostpart, sizeof(hostpart), "%.*s", (int)(hl < 299 ? hl : 299),
				 rest);
			char *colon = strrchr(hostpart, ':');
			bool local = (colon && (!strncasecmp(hostpart, "localhost:", 10) ||
						!strncmp(hostpart, "127.0.0.1:", 10))) ||
				     (host && !strcasecmp(hostpart, host));
			if (local)
				path = rest[hl] ? rest + hl : "/";
		}
	}
	if (!path) {
		http_add_header(p->ctx, "Location", v);
		return;
	}
	_cleanup_free_ char *nv = NULL;
	if (asprintf(&nv, "%s%s%s", p->prefix, *path == '/' ? "" : "/", path) < 0)
		return;
	http_add_header(p->ctx, "Location", nv);
}

/* Set-Cookie: never a Domain (a cookie of one preview must not reach another, or the API);
 * the path form's Path gets the prefix (no Path: the prefix). */
/* Whether a cookie attribute (as sent, spaces and tabs around its name allowed, as browsers
 * read it) is named `name`. */
static bool attr_is(const char *s, size_t len, const char *name)
{
	size_t i = strspn(s, " \t");
	size_t n = strlen(name);
	if (i + n > len || strncasecmp(s + i, name, n) != 0)
		return false;
	i += n;
	i += strspn(s + i, " \t");
	return i == len || s[i] == '=';
}

/* Set-Cookie: never a Domain (a cookie of one preview must not reach another, or the API),
 * never one named like the preview token's; the path form's Path gets the prefix (no Path:
 * the prefix), and SameSite=Lax where the app set no SameSite: the path form's pages run as
 * an opaque origin, whose requests say `Origin: null` whichever site's page sent them, so
 * the app cannot tell its own from another site's, and some browsers still send a cookie
 * without SameSite with every cross-site request. */
static void add_set_cookie(struct proxy *p, const char *v)
{
	size_t first = strcspn(v, ";");
	size_t nl = strcspn(v, "=");
	size_t lead = strspn(v, " \t");
	if (nl < first) {
		size_t end = nl;
		while (end > lead && (v[end - 1] == ' ' || v[end - 1] == '\t'))
			end--;
		if (end - lead == strlen(PROXY_COOKIE) &&
		    !strncmp(v + lead, PROXY_COOKIE, strlen(PROXY_COOKIE)))
			return;
	}
	_cleanup_(evbuffer_freep) struct evbuffer *b = evbuffer_new();
	bool had_path = false, had_samesite = false;
	const char *s = v;
	evbuffer_add(b, s, first);
	s += first;
	while (*s == ';') {
		s++;
		size_t len = strcspn(s, ";");
		if (attr_is(s, len, "Domain")) {
			s += len;
			continue;
		}
		if (p->form == FORM_PATH && attr_is(s, len, "Path")) {
			had_path = true;
			const char *eq = memchr(s, '=', len);
			const char *val = eq ? eq + 1 : s + len;
			val += strspn(val, " \t");
			size_t vl = (size_t)(s + len - val);
			evbuffer_add_printf(b, "; Path=%s%s%.*s", p->prefix,
					    vl && val[0] == '/' ? "" : "/", (int)vl, val);
			s += len;
			continue;
		}
		had_samesite |= attr_is(s, len, "SameSite");
		size_t sp = strspn(s, " \t");
		evbuffer_add_printf(b, "; %.*s", (int)(len - sp), s + sp);
		s += len;
	}
	if (p->form == FORM_PATH && !had_path)
		evbuffer_add_printf(b, "; Path=%s/", p->prefix);
	if (p->form == FORM_PATH && !had_samesite)
		evbuffer_add_printf(b, "; SameSite=Lax");
	evbuffer_add(b, "", 1);
	http_add_header(p->ctx, "Set-Cookie", (const char *)evbuffer_pullup(b, -1));
}

static void add_response_headers(struct proxy *p, const struct upstream_answer *a)
{
	for (size_t i = 0; i < a->nheaders; i++) {
		const char *n, *v;
		upstream_reader_header_at(&p->reader, i, &n, &v);
		if (a->upgrade && (ieq(n, "Upgrade") || ieq(n, "Connection"))) {
			http_add_header(p->ctx, n, v);
			continue;
		}
		if (upstream_hop_response_header(n, a->connection))
			continue;
		/* The path form is served from the API's origin: an app may not clear what the
		 * dashboard keeps there (its key), nor set what applies to the whole origin. */
		if (p->form == FORM_PATH &&
		    (ieq(n, "Clear-Site-Data") || ieq(n, "Service-Worker-Allowed") ||
		     ieq(n, "Origin-Agent-Cluster")))
			continue;
		if (ieq(n, "Location"))
			add_location(p, v);
		else if (ieq(n, "Set-Cookie"))
			add_set_cookie(p, v);
		else
			http_add_header(p->ctx, n, v);
	}
	/* The path form shares the API's origin: its pages get an opaque one. */
	if (p->form == FORM_PATH)
		http_add_header(p->ctx, "Content-Security-Policy",
				"sandbox allow-scripts allow-forms allow-popups");
}

static int on_answer_head(const struct upstream_answer *a, void *arg)
{
	struct proxy *p = arg;
	p->head_done = true;
	add_response_headers(p, a);
	if (a->upgrade)
		return 0; /* what follows is the new protocol's */
	count(p, a->status);
	http_stream_start_raw(p->ctx, a->status, a->length);
	return 0;
}

static int on_answer_body(const char *at, size_t len, void *arg)
{
	struct proxy *p = arg;
	http_stream_write(p->ctx, at, len);
	return 0;
}

static const struct upstream_reader_cbs answer_cbs = {
	.on_head = on_answer_head,
	.on_body = on_answer_body,
};

static void on_client_drained(struct http_ctx *ctx, void *arg)
{
	struct proxy *p = arg;
	if (p->held && p->call) {
		ops_call_consumed(p->call, p->held);
		p->held = 0;
	}
}

/* The reply is complete: the app's connection is no longer needed. */
static void proxy_complete(struct proxy *p)
{
	struct http_ctx *ctx = p->ctx;
	detach_ctx(p);
	if (ctx)
		http_stream_end(ctx);
	proxy_free(p);
}

static void on_app_data(struct ops_call *c, const uint8_t *data, size_t len, void *arg)
{
	struct proxy *p = arg;
	metrics_add(metrics_daemon.preview_bytes_total, (double)len, "out");
	idle_arm(p);
	if (p->bev) {
		bufferevent_write(p->bev, data, len);
		if (evbuffer_get_length(bufferevent_get_output(p->bev)) >= PROXY_HIGH)
			p->held += len;
		else
			ops_call_consumed(c, len);
		return;
	}
	if (!p->ctx || p->reader.done) {
		ops_call_consumed(c, len);
		return;
	}
	ssize_t n = upstream_reader_feed(&p->reader, (const char *)data, len);
	if (n < 0) {
		proxy_fail(p, 502,
			   "port %u of session `%s` answered with something that is not "
			   "HTTP/1.1 (%s)",
			   p->port, p->sid, p->reader.why);
		return;
	}
	if (p->reader.upgraded) {
		ops_call_consumed(c, len);
		relay_start(p, data + n, len - (size_t)n);
		return;
	}
	if (p->reader.done) {
		proxy_complete(p);
		return;
	}
	if (p->ctx && http_stream_pending(p->ctx) >= PROXY_HIGH) {
		p->held += len;
		http_stream_on_drain(p->ctx, PROXY_HIGH / 2, on_client_drained, p);
	} else {
		ops_call_consumed(c, len);
	}
}

static void on_app_connected(struct ops_call *c, void *arg)
{
	struct proxy *p = arg;
	p->connected = true;
	idle_arm(p);
	if (p->form == FORM_FORWARD) {
		http_add_header(p->ctx, "Upgrade", "tcp");
		http_add_header(p->ctx, "Connection", "Upgrade");
		relay_start(p, NULL, 0);
		return;
	}
	if (p->ctx && !p->body_ended)
		http_body_resume(p->ctx);
}

static void on_app_ready(struct ops_call *c, void *arg)
{
	struct proxy *p = arg;
	if (p->bev) {
		if (!p->relay_closing && !p->client_eof)
			bufferevent_enable(p->bev, EV_READ);
		return;
	}
	if (p->ctx && p->connected && !p->body_ended)
		http_body_resume(p->ctx);
}

static const struct ops_connect_cbs proxy_cbs = {
	.on_connected = on_app_connected,
	.on_data = on_app_data,
	.on_ready = on_app_ready,
};

static void on_app_done(struct ops_call *c, const struct ops_result *r, const struct err *err,
			void *arg)
{
	struct proxy *p = arg;
	p->call = NULL;
	if (p->bev) {
		/* The app closed: what it sent goes out, then the client's connection closes. */
		p->relay_closing = true;
		bufferevent_disable(p->bev, EV_READ);
		bufferevent_setwatermark(p->bev, EV_WRITE, 0, 0);
		if (!evbuffer_get_length(bufferevent_get_output(p->bev)))
			proxy_free(p);
		return;
	}
	if (err) {
		if (err->errnum == ECONNREFUSED)
			proxy_fail(p, 502, "nothing is listening on port %u in session `%s`",
				   p->port, p->sid);
		else if (err->errnum == EAGAIN)
			proxy_fail(p, 429, "%s", err->msg);
		else if (err->errnum == ENOENT)
			proxy_fail(p, 404, "%s", err->msg);
		else
			proxy_fail(p,
				   http_status_for_errno(err->errnum) >= 500
					   ? 502
					   : http_status_for_errno(err->errnum),
				   "port %u of session `%s`: %s", p->port, p->sid, err->msg);
		return;
	}
	/* The app closed its side: a body that ends with the connection ends now. */
	if (p->ctx && !p->reader.done)
		upstream_reader_eof(&p->reader);
	if (p->reader.done && !p->reader.upgraded) {
		proxy_complete(p);
		return;
	}
	proxy_fail(p, 502,
		   "port %u of session `%s` closed the connection without a complete "
		   "answer",
		   p->port, p->sid);
}

static void on_client_gone(struct http_ctx *ctx, void *arg)
{
	struct proxy *p = arg;
	/* A drain callback registered while the client was slow must not run on p freed. */
	http_stream_on_drain(ctx, 0, NULL, NULL);
	p->ctx = NULL;
	proxy_free(p);
	/* The reply is dropped, but it must end for the request to be freed. */
	http_stream_abort(ctx);
}

/* --- after a 101: bytes both ways ------------------------------------------------------- */

static void relay_close(struct proxy *p)
{
	proxy_free(p);
}

static void relay_read(struct bufferevent *bev, void *arg)
{
	struct proxy *p = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	if (p->call)
		bev_fill(bev, OPS_UPLOAD_HIGH);
	size_t n = evbuffer_get_length(in);
	if (!n || !p->call)
		return;
	idle_arm(p);
	metrics_add(metrics_daemon.preview_bytes_total, (double)n, "in");
	ops_connect_send(p->call, evbuffer_pullup(in, -1), n);
	evbuffer_drain(in, n);
	if (ops_connect_queued(p->call) >= OPS_UPLOAD_HIGH)
		bufferevent_disable(bev, EV_READ);
}

static void relay_write(struct bufferevent *bev, void *arg)
{
	struct proxy *p = arg;
	if (p->relay_closing) {
		proxy_free(p);
		return;
	}
	if (p->held && p->call) {
		ops_call_consumed(p->call, p->held);
		p->held = 0;
	}
}

static void relay_event(struct bufferevent *bev, short what, void *arg)
{
	struct proxy *p = arg;
	/* The client's end of file is a half-close, passed on: what the app still sends goes
	 * to it until the app closes too. */
	if ((what & BEV_EVENT_EOF) && !(what & BEV_EVENT_ERROR) && p->call && !p->relay_closing) {
		relay_read(bev, p);
		bufferevent_disable(bev, EV_READ);
		p->client_eof = true;
		if (p->call)
			ops_connect_eof(p->call);
		return;
	}
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
		relay_close(p);
}

static void relay_start(struct proxy *p, const uint8_t *rest, size_t n)
{
	struct http_ctx *ctx = p->ctx;
	detach_ctx(p);
	count(p, 101);
	struct bufferevent *bev = http_upgrade_raw(ctx, 101);
	if (!bev) {
		proxy_free(p);
		return;
	}
	p->bev = bev;
	if (n)
		bufferevent_write(bev, rest, n);
	bufferevent_setcb(bev, relay_read, relay_write, relay_event, p);
	bufferevent_setwatermark(bev, EV_WRITE, PROXY_HIGH / 2, 0);
	bufferevent_enable(bev, EV_READ);
	/* What the client sent past its head already waits in the input. */
	relay_read(bev, p);
}

/* A proxied request or connection of ctx to port of session sid (its strings copied). */
static struct proxy *proxy_new(struct http_ctx *ctx, enum proxy_form form, unsigned port,
			       const char *sid)
{
	struct proxy *p = xcalloc(1, sizeof(*p));
	metrics_add(metrics_daemon.preview_connections, 1);
	p->ctx = ctx;
	p->form = form;
	p->port = port;
	snprintf(p->sid, sizeof(p->sid), "%s", sid);
	p->idle = evtimer_new(api_base, on_idle, p);
	upstream_reader_init(&p->reader, &answer_cbs, p, false, false);
	return p;
}

/* Opens p's connection to the app; false (p freed, the client answered) when it cannot. */
static bool proxy_connect(struct proxy *p, const struct ops_target *t)
{
	struct err e;
	p->call = ops_connect(t, p->port, &proxy_cbs, on_app_done, p, &e);
	if (!p->call) {
		proxy_fail(p, e.errnum == EAGAIN ? 429 : http_status_for_errno(e.errnum), "%s",
			   e.msg);
		return false;
	}
	p->ctx->on_gone = on_client_gone;
	p->ctx->on_gone_arg = p;
	idle_arm(p);
	return true;
}

/* --- the handler ------------------------------------------------------------------------- */

/* A request of the path form: its session id, port and the path after the prefix. */
static bool parse_path_form(const char *path, char *id, size_t idcap, unsigned *port,
			    const char **rest)
{
	if (strncmp(path, "/exec/", 6) != 0)
		return false;
	const char *s = path + 6;
	size_t idlen = strcspn(s, "/");
	if (!idlen || idlen >= idcap || strncmp(s + idlen, "/ports/", 7) != 0)
		return false;
	const char *ps = s + idlen + 7;
	size_t pl = strspn(ps, "0123456789");
	if (!pl || pl > 5 || ps[0] == '0' || (ps[pl] != '/' && ps[pl] != '\0'))
		return false;
	unsigned v = (unsigned)strtoul(ps, NULL, 10);
	if (v < 1 || v > 65535)
		return false;
	memcpy(id, s, idlen);
	id[idlen] = '\0';
	*port = v;
	*rest = ps + pl;
	return true;
}

bool api_preview_host(const char *host)
{
	struct preview_host h;
	return host && preview_host_parse(host, api_cfg->public_domain, &h) == 0;
}

bool api_preview_request(struct http_ctx *ctx, const char *host)
{
	struct preview_host h;
	if (host && preview_host_parse(host, api_cfg->public_domain, &h) == 0)
		return true;
	char id[130];
	unsigned port;
	const char *rest;
	return parse_path_form(ctx->path, id, sizeof(id), &port, &rest);
}

/* A token that opens the session's HTTP ports: the preview token or E2B's traffic token. */
static bool port_token(const struct session *s, const char *given)
{
	return session_token_check(s, SESSION_TOKEN_TRAFFIC, given) ||
	       session_token_check(s, SESSION_TOKEN_E2B_TRAFFIC, given);
}

/* Whether the request carries the session's traffic token: as a header, in any of its
 * sandbox_token cookies (an app may have set one of its own beside ours), or as the query
 * parameter (*from_query: then only there). *carries: it named one at all. */
static bool token_ok(struct http_ctx *ctx, const char *query, const struct session *s,
		     bool *carries, bool *from_query, char tok[SESSION_TOKEN_LEN + 2])
{
	*from_query = false;
	*carries = false;
	const char *headers[] = { "X-Sandbox-Token", "E2B-Traffic-Access-Token" };
	for (size_t i = 0; i < 2; i++) {
		const char *h = http_header(ctx, headers[i]);
		if (!h)
			continue;
		*carries = true;
		if (port_token(s, h))
			return true;
	}
	size_t n = http_header_count(ctx);
	for (size_t i = 0; i < n; i++) {
		const char *name, *value;
		http_header_at(ctx, i, &name, &value);
		if (!ieq(name, "Cookie"))
			continue;
		/* every sandbox_token=... of the header */
		size_t cl = strlen(PROXY_COOKIE);
		for (const char *c = value; *c;) {
			c += strspn(c, " ;");
			size_t len = strcspn(c, ";");
			if (!len)
				break;
			if (len > cl && !strncmp(c, PROXY_COOKIE "=", cl + 1)) {
				*carries = true;
				char v[SESSION_TOKEN_LEN + 2];
				if (len - cl - 1 < sizeof(v)) {
					memcpy(v, c + cl + 1, len - cl - 1);
					v[len - cl - 1] = '\0';
					if (port_token(s, v))
						return true;
				}
			}
			c += len;
		}
	}
	if (query_value(query, PROXY_COOKIE, tok, SESSION_TOKEN_LEN + 2)) {
		*carries = true;
		if (port_token(s, tok)) {
			*from_query = true;
			return true;
		}
	}
	return false;
}

/* Whether the Origin a browser sent may reach this preview: none, the preview's own host, or
 * another port of the same session's preview. */
static bool origin_allowed(struct http_ctx *ctx, const struct session *s, enum proxy_form form)
{
	const char *origin = http_header(ctx, "Origin");
	if (!origin)
		return true;
	/* The path form's pages run sandboxed (CSP): their requests say "null". */
	if (form == FORM_PATH && !strcmp(origin, "null"))
		return true;
	const char *host = http_header(ctx, "Host");
	const char *o = !strncasecmp(origin, "http://", 7)    ? origin + 7
			: !strncasecmp(origin, "https://", 8) ? origin + 8
							      : NULL;
	if (!o)
		return false;
	if (host && !strcasecmp(o, host))
		return true;
	struct preview_host ph;
	return preview_host_parse(o, api_cfg->public_domain, &ph) == 0 &&
	       !strcmp(ph.name, s->preview_name);
}

/* --- waking a paused session --------------------------------------------------------
 *
 * A request the preview would serve that reaches a paused session created with autoResume
 * (E2B's lifecycle) resumes it and waits, then goes on as if it had come then. The check of
 * who may reach the port runs first, as for a running session; concurrent requests wait for
 * the same resume. */
#define WAKE_STEP_MS 50
#define WAKE_MAX_MS  60000

struct wake {
	struct http_ctx *ctx;
	char *owner, *sid;
	struct event *timer;
	unsigned waited_ms;
	bool asked, gone;
};

static void wake_free(struct wake *w)
{
	if (w->timer)
		event_free(w->timer);
	if (!w->gone)
		w->ctx->on_gone = NULL;
	http_ctx_release(w->ctx);
	free(w->owner);
	free(w->sid);
	free(w);
}

static void wake_gone(struct http_ctx *ctx, void *arg)
{
	struct wake *w = arg;
	w->gone = true;
}

static void wake_resumed(struct session *s, const struct err *err, void *arg)
{
	/* Whatever came of it, the next step looks at the session as it is. */
	if (!err && s)
		api_e2b_woken(s);
}

static void wake_step(evutil_socket_t fd, short what, void *arg)
{
	struct wake *w = arg;
	if (w->gone) {
		wake_free(w);
		return;
	}
	struct ops_target t = { .owner = w->owner, .session_id = w->sid };
	struct err e;
	struct session *s = session_find(w->owner, w->sid);
	if (s && s->state == SESSION_READY && !s->transition) {
		struct http_ctx *ctx = w->ctx;
		ctx->on_gone = NULL;
		w->gone = true; /* on_gone is the preview's from here */
		api_preview(ctx);
		wake_free(w);
		return;
	}
	if (!s || (s->state != SESSION_PAUSED && !s->transition) || w->waited_ms >= WAKE_MAX_MS) {
		http_reply_error(w->ctx, s ? 503 : 404,
				 s ? "Session `%.80s` could not be resumed in time"
				   : "No session has the preview name `%.80s`",
				 w->sid);
		wake_free(w);
		return;
	}
	if (s->state == SESSION_PAUSED && !s->transition && !w->asked) {
		w->asked = true;
		log_info("proxy", "session %s: a request to its port resumes it (autoResume)",
			 s->id);
		if (ops_pause_session_mode(&t, false, SESSION_PAUSE_FREEZE, wake_resumed, NULL,
					   &e) < 0)
			log_warn("proxy", "session %s: cannot resume it: %s", s->id, e.msg);
	}
	w->waited_ms += WAKE_STEP_MS;
	struct timeval tv = { 0, WAKE_STEP_MS * 1000 };
	evtimer_add(w->timer, &tv);
}

static void wake_then_serve(struct http_ctx *ctx, struct session *s)
{
	struct wake *w = xcalloc(1, sizeof(*w));
	w->ctx = ctx;
	w->owner = xstrdup(s->owner);
	w->sid = xstrdup(s->id);
	w->timer = evtimer_new(api_base, wake_step, w);
	http_ctx_hold(ctx);
	ctx->on_gone = wake_gone;
	ctx->on_gone_arg = w;
	wake_step(-1, 0, w);
}

void api_preview(struct http_ctx *ctx)
{
	const char *host = http_header(ctx, "Host");
	const char *target = http_target(ctx);
	const char *query = strchr(target, '?');
	if (query)
		query++;
	struct preview_host h;
	enum proxy_form form;
	unsigned port;
	const char *rest;
	char id[130];
	struct session *s = NULL;
	const struct auth_identity *who = auth_identity(ctx);
	bool admin = api_is_admin(ctx);
	if (host && preview_host_parse(host, api_cfg->public_domain, &h) == 0) {
		form = FORM_HOST;
		port = h.port;
		rest = ctx->path;
		s = session_find_preview(h.name);
	} else if (parse_path_form(ctx->path, id, sizeof(id), &port, &rest)) {
		form = FORM_PATH;
		if (!*rest && (ctx->method & (HTTP_REQ_GET | HTTP_REQ_HEAD))) {
			/* Relative URLs of the app's pages resolve below the prefix only with
			 * the trailing slash. */
			char loc[300];
			snprintf(loc, sizeof(loc), "%s/%s%s", ctx->path, query ? "?" : "",
				 query ? query : "");
			http_add_header(ctx, "Location", loc);
			http_reply_json(ctx, 308, json_pack("{s:s}", "location", loc));
			return;
		}
		/* By key: the caller's own session (an admin's: anyone's); by token: the
		 * session whose preview name this is. */
		if (who || !api_cfg->auth_enabled) {
			struct ops_target t = { .owner = api_owner(ctx),
						.session_id = id,
						.any_owner = admin };
			struct err e;
			s = session_id_valid(id) ? ops_find_session(&t, &e) : NULL;
		}
		if (!s)
			s = session_find_preview(id);
	} else {
		http_reply_error(ctx, 404, "Not found");
		return;
	}
	const char *name = form == FORM_HOST ? h.name : id;
	/* A paused one that asked to be woken by its traffic: after the check of who may. */
	bool wake = s && s->auto_resume && (s->state == SESSION_PAUSED || s->transition);
	if (!wake && (!s || s->state != SESSION_READY)) {
		/* Without a key, whether a name exists is not told (401 as for one that does). */
		if (!who && api_cfg->auth_enabled)
			http_reply_error(
				ctx, 401,
				"This preview needs the session's key or its preview token "
				"(see docs/ingress.md)");
		else if (s && s->state == SESSION_PAUSED)
			http_reply_error(ctx, 409, "Session `%.80s` is paused", name);
		else
			http_reply_error(ctx, 404, "No session has the preview name `%.80s`", name);
		return;
	}
	if (!origin_allowed(ctx, s, form)) {
		http_reply_error(ctx, 403,
				 "Forbidden: a page of another origin may not call this preview");
		return;
	}
	bool owner =
		!api_cfg->auth_enabled || (who && (admin || strcmp(who->key_id, s->owner) == 0));
	char token[SESSION_TOKEN_LEN + 2];
	bool from_query = false, carries = false;
	bool token_good = token_ok(ctx, query, s, &carries, &from_query, token);
	if (!owner && !token_good && !session_port_public(s, port)) {
		if (who)
			http_reply_error(ctx, 404, "No session has the preview name `%.80s`", name);
		else
			http_reply_error(
				ctx, 401,
				"This preview needs the session's key or its preview token "
				"(see docs/ingress.md)");
		return;
	}
	if (wake) {
		wake_then_serve(ctx, s);
		return;
	}
	char prefix[200];
	snprintf(prefix, sizeof(prefix), "/exec/%s/ports/%u", s->preview_name, port);
	if (form == FORM_PATH)
		snprintf(prefix, sizeof(prefix), "/exec/%s/ports/%u", id, port);
	/* A token in the URL becomes a cookie, and leaves the URL (history, Referer). */
	if (token_good && from_query && (ctx->method & (HTTP_REQ_GET | HTTP_REQ_HEAD)) &&
	    !http_upgrade_requested(ctx)) {
		_cleanup_(evbuffer_freep) struct evbuffer *loc = evbuffer_new();
		/* "//evil.example/x" would be another host's URL, and so would "/\evil.example"
		 * (browsers read a backslash as a slash): one leading slash, then no other. */
		const char *lp = ctx->path;
		while (*lp == '/' || *lp == '\\')
			lp++;
		evbuffer_add_printf(loc, "/%s", lp);
		query_without_secrets(query, loc);
		evbuffer_add(loc, "", 1);
		char cookie[300];
		snprintf(cookie, sizeof(cookie), "%s=%s; Path=%s; HttpOnly; SameSite=Lax",
			 PROXY_COOKIE, token, form == FORM_PATH ? prefix : "/");
		http_add_header(ctx, "Set-Cookie", cookie);
		http_add_header(ctx, "Location", (const char *)evbuffer_pullup(loc, -1));
		http_add_header(ctx, "Cache-Control", "no-store");
		http_add_header(ctx, "Referrer-Policy", "no-referrer");
		http_reply_json(
			ctx, 302,
			json_pack("{s:s}", "location", (const char *)evbuffer_pullup(loc, -1)));
		return;
	}
	const char *te = http_header(ctx, "Transfer-Encoding");
	if (te && strcasecmp(te, "chunked") != 0) {
		http_reply_error(ctx, 501, "Transfer-Encoding `%.40s`: only chunked is carried",
				 te);
		return;
	}
	struct proxy *p = proxy_new(ctx, form, port, s->id);
	snprintf(p->prefix, sizeof(p->prefix), "%s", prefix);
	p->upgrade = http_upgrade_requested(ctx) && http_header(ctx, "Upgrade");
	upstream_reader_init(&p->reader, &answer_cbs, p, !strcmp(http_method(ctx), "HEAD"),
			     p->upgrade);
	/* Visitors of a preview are not its owner's requests: SANDBOX_PREVIEW_MAX_CONNECTIONS
	 * per session bounds them, not the owner's `streams` quota (which they would use up);
	 * those of a public port without key or token, only a share of it, so that they cannot
	 * take every connection from the owner (ops_anonymous_connections). */
	struct ops_target t = { .owner = s->owner,
				.session_id = s->id,
				.admitted = true,
				.anonymous = !owner && !token_good };
	if (!proxy_connect(p, &t))
		return;
	send_head(p, form == FORM_PATH ? rest : ctx->path, query);
	/* The body waits for the connection. */
	http_body_stream(ctx, &body_ops, p);
	http_body_pause(ctx);
}

/* GET /exec/:id/forward/:port with `Upgrade: tcp`: the connection becomes a byte stream to
 * the port (what `sandbox forward` uses, like ssh -L). */
void api_exec_forward(struct http_ctx *ctx)
{
	const char *id = api_path_session_id(ctx);
	if (!id)
		return;
	const char *up = http_header(ctx, "Upgrade");
	if (!http_upgrade_requested(ctx) || !up || strcasecmp(up, "tcp") != 0) {
		http_add_header(ctx, "Upgrade", "tcp");
		http_reply_error(ctx, 426,
				 "a forward is an upgrade: send `Connection: Upgrade` and "
				 "`Upgrade: tcp`");
		return;
	}
	const char *ps = http_param(ctx, 1);
	size_t pl = strspn(ps, "0123456789");
	unsigned port =
		pl && pl <= 5 && !ps[pl] && ps[0] != '0' ? (unsigned)strtoul(ps, NULL, 10) : 0;
	if (port < 1 || port > 65535) {
		http_reply_error(ctx, 400, "a port is a number from 1 to 65535");
		return;
	}
	struct proxy *p = proxy_new(ctx, FORM_FORWARD, port, id);
	struct ops_target t = api_request_target(ctx, id, NULL);
	proxy_connect(p, &t);
}
