/* Tests of src/http's connection layer with real sockets on loopback: checks at the head
 * before any body byte (a key, a route's body limit, Expect: 100-continue), the caps on
 * connections (global, per address) and which connection they close, deadlines for heads,
 * bodies and idle keep-alive connections, pipelining, HTTP/1.0, streamed request bodies with
 * pause and resume, the drain callback, routing by Host, raw upgrades and WebSocket (echo with
 * fragmented and control frames, bad handshakes, bad frames).
 *
 * The server runs on a thread of its own, as in http.c's tests; leaks and use after free are
 * ASan's to find (the unit suite runs in build-asan/). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "http/http.h"

#include "../wait.h"

struct server {
	struct event_base *base;
	struct http_server *srv;
	struct config cfg;
	int port;
	pthread_t thread;
};

static struct server *S;

static struct {
	atomic_int handled;
	atomic_long body_bytes; /* a streamed body's bytes, as the handler got them */
	atomic_int body_pieces;
	atomic_long buffer_left; /* what h_buffer's evbuffer held after its reply */
	atomic_int drains;       /* drain callbacks */
	atomic_int ws_messages;
	atomic_int ws_closed;
	atomic_int ws_close_code;
	atomic_int raw_closed;
} P;

/* --- handlers ------------------------------------------------------------------------ */

static void h_echo(struct http_ctx *ctx)
{
	size_t len;
	const uint8_t *b = http_body(ctx, &len);
	atomic_fetch_add(&P.handled, 1);
	http_reply_bytes(ctx, 200, "application/octet-stream", b, len);
}

/* POST /json: the length of the body's "s", parsed (on a worker, or from the spool). */
static void h_json(struct http_ctx *ctx)
{
	json_t *j;
	if (http_body_json(ctx, &j) < 0)
		return;
	atomic_fetch_add(&P.handled, 1);
	size_t n = json_string_length(json_object_get(j, "s"));
	json_decref(j);
	http_reply_json(ctx, 200, json_pack("{s:I}", "length", (json_int_t)n));
}

/* GET /buffer/:n: n bytes of a pattern, moved to the reply from an evbuffer. */
static void h_buffer(struct http_ctx *ctx)
{
	size_t n = strtoul(http_param(ctx, 0), NULL, 10);
	struct evbuffer *b = evbuffer_new();
	for (size_t i = 0; i < n; i++) {
		char c = (char)('a' + i % 26);
		evbuffer_add(b, &c, 1);
	}
	http_reply_buffer(ctx, 200, "text/plain", b);
	/* Moved, not copied: nothing is left in it (but for a HEAD, which sends no body). */
	atomic_store(&P.buffer_left, (long)evbuffer_get_length(b));
	evbuffer_free(b);
}

static void h_hello(struct http_ctx *ctx)
{
	atomic_fetch_add(&P.handled, 1);
	http_reply_json(ctx, 200,
			json_pack("{s:s}", "hello", http_param(ctx, 0) ? http_param(ctx, 0) : ""));
}

/* POST /upload: a streamed body; the handler pauses after each piece and resumes from a
 * timer, as a consumer with credit would, and answers with the byte count. */
struct upload {
	struct http_ctx *ctx;
	struct event *timer;
	uint64_t bytes;
	uint32_t sum;
};

static void upload_resume(evutil_socket_t fd, short what, void *arg)
{
	struct upload *u = arg;
	http_body_resume(u->ctx);
}

static int upload_data(struct http_ctx *ctx, const uint8_t *data, size_t len, void *arg)
{
	struct upload *u = arg;
	u->bytes += len;
	for (size_t i = 0; i < len; i++)
		u->sum = u->sum * 31 + data[i];
	atomic_fetch_add(&P.body_pieces, 1);
	http_body_pause(ctx);
	struct timeval tv = { 0, 1000 };
	evtimer_add(u->timer, &tv);
	return 0;
}

static void upload_end(struct http_ctx *ctx, void *arg)
{
	struct upload *u = arg;
	atomic_store(&P.body_bytes, (long)u->bytes);
	http_reply_json(
		ctx, 200,
		json_pack("{s:I, s:I}", "bytes", (json_int_t)u->bytes, "sum", (json_int_t)u->sum));
	event_free(u->timer);
	free(u);
}

static void upload_gone(struct http_ctx *ctx, void *arg)
{
	struct upload *u = arg;
	event_free(u->timer);
	free(u);
	http_reply_error(ctx, 499, "gone");
}

static const struct http_body_ops upload_ops = { .data = upload_data, .end = upload_end };

static void h_upload(struct http_ctx *ctx)
{
	struct upload *u = calloc(1, sizeof(*u));
	u->ctx = ctx;
	u->timer = evtimer_new(S->base, upload_resume, u);
	ctx->on_gone = upload_gone;
	ctx->on_gone_arg = u;
	http_body_stream(ctx, &upload_ops, u);
}

/* GET /flood: 8 MiB in 64 KiB chunks, each next chunk written from the drain callback. */
struct flood {
	size_t sent;
};

static void flood_more(struct http_ctx *ctx, void *arg)
{
	struct flood *f = arg;
	static char chunk[65536];
	atomic_fetch_add(&P.drains, 1);
	if (ctx->gone) {
		free(f);
		http_stream_end(ctx);
		return;
	}
	while (f->sent < 8u << 20 && http_stream_pending(ctx) < 256 * 1024) {
		memset(chunk, 'a' + (int)(f->sent >> 16) % 26, sizeof(chunk));
		http_stream_write(ctx, chunk, sizeof(chunk));
		f->sent += sizeof(chunk);
	}
	if (f->sent >= 8u << 20) {
		free(f);
		http_stream_end(ctx);
		return;
	}
	http_stream_on_drain(ctx, 64 * 1024, flood_more, f);
}

static void h_flood(struct http_ctx *ctx)
{
	http_stream_start(ctx, 200, "text/plain");
	flood_more(ctx, calloc(1, sizeof(struct flood)));
}

/* GET /raw: takes the connection over and echoes what comes, upper-cased. */
static void raw_read(struct bufferevent *bev, void *arg)
{
	char buf[4096];
	size_t n;
	while ((n = bufferevent_read(bev, buf, sizeof(buf))) > 0) {
		for (size_t i = 0; i < n; i++)
			if (buf[i] >= 'a' && buf[i] <= 'z')
				buf[i] = (char)(buf[i] - 32);
		bufferevent_write(bev, buf, n);
	}
}

static void raw_event(struct bufferevent *bev, short what, void *arg)
{
	bufferevent_free(bev);
	atomic_fetch_add(&P.raw_closed, 1);
}

static void h_raw(struct http_ctx *ctx)
{
	http_add_header(ctx, "Upgrade", "shout");
	http_add_header(ctx, "Connection", "Upgrade");
	struct bufferevent *bev = http_upgrade_raw(ctx, 101);
	if (!bev)
		return;
	bufferevent_setcb(bev, raw_read, NULL, raw_event, NULL);
	bufferevent_enable(bev, EV_READ | EV_WRITE);
	raw_read(bev, NULL); /* bytes sent right behind the head */
}

/* GET /ws: WebSocket echo; "close" closes with 4000. */
static void ws_message(struct http_ws *ws, bool binary, const uint8_t *data, size_t len, void *arg)
{
	atomic_fetch_add(&P.ws_messages, 1);
	if (!binary && len == 5 && !memcmp(data, "close", 5)) {
		http_ws_close(ws, 4000, "asked to");
		return;
	}
	http_ws_send(ws, binary, data, len);
}

static void ws_closed(struct http_ws *ws, uint16_t code, void *arg)
{
	atomic_store(&P.ws_close_code, code);
	atomic_fetch_add(&P.ws_closed, 1);
}

static const struct http_ws_ops ws_ops = { .message = ws_message, .closed = ws_closed };

static void h_ws(struct http_ctx *ctx)
{
	http_ws_accept(ctx, NULL, &ws_ops, NULL, 4096);
}

static void h_preview(struct http_ctx *ctx)
{
	http_reply_json(ctx, 200, json_pack("{s:s}", "preview", http_header(ctx, "Host")));
}

static const struct http_route preview_route = { HTTP_REQ_GET | HTTP_REQ_POST, "preview", h_preview,
						 NULL };

static const struct http_route *host_router(struct http_ctx *ctx, const char *host, void *arg)
{
	return !strncmp(host, "8080-box.", 9) ? &preview_route : NULL;
}

/* Requests without "Authorization: Bearer ok" are refused, except on /open/... routes. */
static int auth(struct http_ctx *ctx, const char *scope, void *arg)
{
	if (!scope)
		return 0;
	const char *a = http_header(ctx, "Authorization");
	if (a && !strcmp(a, "Bearer ok"))
		return 0;
	http_reply_error(ctx, 401, "API key required");
	return -1;
}

static const struct http_route routes[] = {
	{ HTTP_REQ_POST, "/echo", h_echo, "exec" },
	{ HTTP_REQ_POST, "/json", h_json, "exec", 64u << 20, HTTP_ROUTE_JSON_BODY },
	{ HTTP_REQ_POST, "/small", h_echo, "exec", 16 },
	{ HTTP_REQ_GET | HTTP_REQ_HEAD, "/open/:name", h_hello, NULL },
	{ HTTP_REQ_POST, "/upload", h_upload, "exec", 64u << 20, HTTP_ROUTE_STREAM_BODY },
	{ HTTP_REQ_GET, "/flood", h_flood, NULL },
	{ HTTP_REQ_GET | HTTP_REQ_HEAD, "/buffer/:n", h_buffer, NULL },
	{ HTTP_REQ_GET, "/raw", h_raw, NULL },
	{ HTTP_REQ_GET, "/ws", h_ws, NULL },
};

static void *serve(void *arg)
{
	event_base_dispatch(((struct server *)arg)->base);
	return NULL;
}

static void start(void **state, struct config cfg)
{
	evthread_use_pthreads();
	memset(&P, 0, sizeof(P));
	struct server *s = calloc(1, sizeof(*s));
	S = s;
	s->cfg = cfg;
	if (!s->cfg.max_body_bytes)
		s->cfg.max_body_bytes = 1 << 20;
	s->base = event_base_new();
	s->srv = http_server_new(s->base, &s->cfg, routes, sizeof(routes) / sizeof(routes[0]));
	http_server_set_auth(s->srv, auth, NULL);
	http_server_set_host_router(s->srv, host_router, NULL);
	struct err e;
	assert_int_equal(http_server_listen_tcp(s->srv, "127.0.0.1", 0, &s->port, &e), 0);
	pthread_create(&s->thread, NULL, serve, s);
	*state = s;
}

static int setup(void **state)
{
	start(state, (struct config){ 0 });
	return 0;
}

/* Short deadlines and small caps. */
static int setup_tight(void **state)
{
	start(state, (struct config){ .http_header_timeout_ms = 300,
				      .http_body_timeout_ms = 300,
				      .http_keepalive_timeout_ms = 300 });
	return 0;
}

/* A short body timeout and a minimum body rate of 1000 bytes a second. */
static int setup_rate(void **state)
{
	start(state, (struct config){ .http_body_timeout_ms = 300, .http_body_min_rate = 1000 });
	return 0;
}

/* A server whose state directory (for the spool) is a new one in /tmp. */
static char spool_dir[64];
static void start_spooling(void **state, struct config cfg)
{
	snprintf(spool_dir, sizeof(spool_dir), "/tmp/http-spool-XXXXXX");
	assert_non_null(mkdtemp(spool_dir));
	cfg.state_dir = spool_dir;
	cfg.max_body_bytes = 64u << 20;
	start(state, cfg);
}

/* A budget of 4 MiB of bodies in flight per key. */
static int setup_budget(void **state)
{
	start_spooling(state, (struct config){ .key_max_body_bytes = 4u << 20 });
	return 0;
}

static int teardown_budget(void **state);

/* 2 MiB of spool files for all keys together. */
static int setup_spool_cap(void **state)
{
	start_spooling(state, (struct config){ .key_max_body_bytes = 64u << 20,
					       .max_body_spool_bytes = 2u << 20 });
	return 0;
}

/* A state filesystem always below its reserve. */
static int setup_spool_reserve(void **state)
{
	start_spooling(state, (struct config){ .key_max_body_bytes = 64u << 20,
					       .disk_reserve_bytes = 1ull << 60 });
	return 0;
}

/* Small caps, the default deadlines. */
static int setup_caps(void **state)
{
	start(state, (struct config){ .http_max_connections = 8, .http_max_per_address = 4 });
	return 0;
}

/* A small global cap, a large per-address one. */
static int setup_global(void **state)
{
	start(state, (struct config){ .http_max_connections = 8, .http_max_per_address = 64 });
	return 0;
}

static struct http_stats stats(void);

static bool no_connections(void *arg)
{
	return stats().connections == 0;
}

static int teardown(void **state)
{
	struct server *s = *state;
	/* Connections the clients closed end on the server's thread first; what is left is
	 * freed below, and the loop run once more for what libevent frees from it. */
	wait_until(no_connections, NULL, 5000, "connections to end");
	event_base_loopbreak(s->base);
	pthread_join(s->thread, NULL);
	http_server_free(s->srv);
	event_base_loop(s->base, EVLOOP_NONBLOCK);
	event_base_free(s->base);
	free(s);
	return 0;
}

/* --- the client's side ------------------------------------------------------------------ */

static int dial(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	struct timeval tv = { WAIT_TIMEOUT_MS / 1000, 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

static void send_all(int fd, const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
		assert_true(w > 0);
		c += w;
		n -= (size_t)w;
	}
}

static void send_text(int fd, const char *text)
{
	send_all(fd, text, strlen(text));
}

/* Reads until `needle` has arrived (or the connection ended); returns what came, owned. */
static char *read_until(int fd, const char *needle, size_t *len_out)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap + 1);
	buf[0] = '\0';
	while (!needle || !memmem(buf, len, needle, strlen(needle))) {
		if (len == cap) {
			cap *= 2;
			buf = realloc(buf, cap + 1);
		}
		ssize_t r = read(fd, buf + len, cap - len);
		if (r <= 0)
			break;
		len += (size_t)r;
		buf[len] = '\0';
	}
	if (len_out)
		*len_out = len;
	return buf;
}

/* Reads to the end of the connection. */
static char *read_all(int fd)
{
	return read_until(fd, NULL, NULL);
}

/* Whether the server closed fd (a read sees the end, or a reset). */
static bool closed_by_server(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	if (poll(&p, 1, WAIT_TIMEOUT_MS) != 1)
		return false;
	char c[4096];
	ssize_t r;
	while ((r = read(fd, c, sizeof(c))) > 0)
		;
	return r == 0 || errno == ECONNRESET;
}

/* Runs fn on the server's thread, between two of its events, and waits until it did. */
struct call {
	void (*fn)(void *arg);
	void *arg;
	atomic_bool ran;
};

static void run_call(evutil_socket_t fd, short what, void *arg)
{
	struct call *c = arg;
	c->fn(c->arg);
	atomic_store(&c->ran, true);
}

static bool call_ran(void *arg)
{
	return atomic_load(&((struct call *)arg)->ran);
}

static void on_server(void (*fn)(void *arg), void *arg)
{
	struct call c = { .fn = fn, .arg = arg };
	struct timeval now = { 0, 0 };
	assert_int_equal(event_base_once(S->base, -1, EV_TIMEOUT, run_call, &c, &now), 0);
	assert_true(wait_until(call_ran, &c, WAIT_TIMEOUT_MS, "the server's thread to run a call"));
}

static void take_stats(void *arg)
{
	http_server_stats(S->srv, arg);
}

static struct http_stats stats(void)
{
	struct http_stats st;
	on_server(take_stats, &st);
	return st;
}

static bool bodies_held(void *arg)
{
	struct http_stats st = stats();
	return st.body_mem + st.body_spool >= *(uint64_t *)arg;
}

static bool heads_reach(void *arg)
{
	return stats().reading_heads >= *(uint64_t *)arg;
}

/* --- checks at the head ---------------------------------------------------------------- */

/* A request without a key that announces a gigabyte gets its 401 at once, without sending a
 * byte of its body: the server did not wait for the body. */
static void test_refused_before_the_body(void **state)
{
	struct server *s = *state;
	int fd = dial(s->port);
	send_text(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n\r\n");
	send_all(fd, "some of it", 10);
	char *resp = read_until(fd, "}", NULL);
	assert_non_null(strstr(resp, "HTTP/1.1 401"));
	assert_non_null(strstr(resp, "Connection: close"));
	assert_non_null(strstr(resp, "API key required"));
	free(resp);
	assert_true(closed_by_server(fd));
	close(fd);
	assert_int_equal(atomic_load(&P.handled), 0);
}

/* Expect: 100-continue: a refused request gets its refusal and no 100; an accepted one gets
 * 100 Continue, then its answer. */
static void test_expect_continue(void **state)
{
	struct server *s = *state;
	int fd = dial(s->port);
	send_text(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
		      "Expect: 100-continue\r\n\r\n");
	char *resp = read_until(fd, "}", NULL);
	assert_null(strstr(resp, "100 Continue"));
	assert_non_null(strstr(resp, "HTTP/1.1 401"));
	free(resp);
	close(fd);

	fd = dial(s->port);
	send_text(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ok\r\n"
		      "Content-Length: 5\r\nExpect: 100-continue\r\n\r\n");
	resp = read_until(fd, "\r\n\r\n", NULL);
	assert_string_equal(resp, "HTTP/1.1 100 Continue\r\n\r\n");
	free(resp);
	send_text(fd, "hello");
	resp = read_until(fd, "hello", NULL);
	assert_non_null(strstr(resp, "HTTP/1.1 200"));
	free(resp);
	close(fd);
}

/* A route's own body limit is enforced at the head (Content-Length) and while a chunked body
 * arrives; an unknown Expect is 417. */
static void test_route_body_limit(void **state)
{
	struct server *s = *state;
	int fd = dial(s->port);
	send_text(fd, "POST /small HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ok\r\n"
		      "Content-Length: 17\r\n\r\n");
	char *resp = read_until(fd, "}", NULL);
	assert_non_null(strstr(resp, "HTTP/1.1 413"));
	assert_non_null(strstr(resp, "limit of 16"));
	free(resp);
	close(fd);

	fd = dial(s->port);
	send_text(
		fd,
		"POST /small HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ok\r\n"
		"Transfer-Encoding: chunked\r\n\r\n10\r\n0123456789abcdef\r\n1\r\nx\r\n0\r\n\r\n");
	resp = read_until(fd, "}", NULL);
	assert_non_null(strstr(resp, "HTTP/1.1 413"));
	assert_non_null(strstr(resp, "application/json"));
	free(resp);
	close(fd);

	fd = dial(s->port);
	send_text(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nExpect: coffee\r\n\r\n");
	resp = read_until(fd, "}", NULL);
	assert_non_null(strstr(resp, "HTTP/1.1 417"));
	free(resp);
	close(fd);
}

/* Two keys, two hosts: refused, whatever the order (request smuggling plays on which one a
 * server takes). */
static void test_duplicate_headers_refused(void **state)
{
	struct server *s = *state;
	const char *reqs[] = {
		("POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer no\r\n"
		 "Authorization: Bearer ok\r\nContent-Length: 0\r\n\r\n"),
		"GET /open/a HTTP/1.1\r\nHost: x\r\nHost: 8080-box.example\r\n\r\n",
		"GET /open/a HTTP/1.1\r\n\r\n", /* 1.1 without Host */
		/* Whitespace before the colon (RFC 9112 5.1): not a framing header, not a
		 * second Host under another name. */
		("POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ok\r\n"
		 "Transfer-Encoding : chunked\r\n\r\n1\r\na\r\n0\r\n\r\n"),
		"GET /open/a HTTP/1.1\r\nHost: x\r\nHost : 8080-box.example\r\n\r\n",
		"GET /open/a HTTP/1.1\r\nHost: x\r\nX-Bad\tName: 1\r\n\r\n",
	};
	for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++) {
		int fd = dial(s->port);
		send_text(fd, reqs[i]);
		char *resp = read_all(fd);
		assert_non_null(strstr(resp, "HTTP/1.1 400"));
		assert_non_null(strstr(resp, "{\"error\":"));
		free(resp);
		close(fd);
	}
	assert_int_equal(atomic_load(&P.handled), 0);
}

/* --- keep-alive, pipelining, HTTP/1.0, HEAD ----------------------------------------------- */

static void test_keep_alive_and_pipelining(void **state)
{
	struct server *s = *state;
	int fd = dial(s->port);
	/* Three requests in one write, the second refused (no key) but without a body, so the
	 * connection goes on. */
	send_text(fd, "GET /open/one HTTP/1.1\r\nHost: x\r\n\r\n"
		      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
		      "GET /open/three HTTP/1.1\r\nHost: x\r\n\r\n");
	char *resp = read_until(fd, "three", NULL);
	char *one = strstr(resp, "\"one\"");
	char *refused = strstr(resp, "HTTP/1.1 401");
	char *three = strstr(resp, "\"three\"");
	assert_non_null(one);
	assert_non_null(refused);
	assert_non_null(three);
	assert_true(one < refused && refused < three);
	free(resp);
	close(fd);
	assert_int_equal(atomic_load(&P.handled), 2);
}

/* A client that pipelines requests and reads none of the answers: the server stops reading
 * once about a megabyte of answers waits, so the client's sends block long before it has
 * sent 64 MiB of requests; once it reads, every answer comes, in order. */
static void test_pipelining_without_reading_is_bounded(void **state)
{
	struct server *s = *state;
	int fd = dial(s->port);
	static const char req[] = "GET /open/p HTTP/1.1\r\nHost: x\r\n\r\n";
	const size_t rl = sizeof(req) - 1;
	size_t sent = 0;
	while (sent < (64u << 20)) {
		/* From where the last send stopped within a request. */
		ssize_t w = send(fd, req + sent % rl, rl - sent % rl, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			struct pollfd p = { .fd = fd, .events = POLLOUT };
			if (poll(&p, 1, 1000) == 0)
				break; /* a second without room: the server stopped reading */
			continue;
		}
		assert_true(w > 0);
		sent += (size_t)w;
	}
	size_t requests = sent / rl;
	print_message("pipelining: the server stopped reading after %zu requests (%zu bytes)\n",
		      requests, sent);
	assert_true(sent < (64u << 20));
	/* Reading now, every answer comes: the cut request is finished, and a last one asks
	 * the server to close after its answer. */
	if (sent % rl)
		send_all(fd, req + sent % rl, rl - sent % rl);
	send_text(fd, "GET /open/p HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	size_t len;
	char *resp = read_until(fd, NULL, &len);
	size_t answers = 0;
	for (char *p = resp; (p = memmem(p, len - (size_t)(p - resp), "\"hello\":\"p\"", 11)); p++)
		answers++;
	free(resp);
	close(fd);
	assert_int_equal(answers, (sent + rl - 1) / rl + 1);
}

static void test_http10_and_head(void **state)
{
	struct server *s = *state;
	int fd = dial(s->port);
	send_text(fd, "GET /open/old HTTP/1.0\r\n\r\n");
	char *resp = read_all(fd); /* 1.0 without keep-alive: closed after */
	assert_non_null(strstr(resp, "HTTP/1.1 200"));
	assert_non_null(strstr(resp, "Connection: close"));
	assert_non_null(strstr(resp, "\"old\""));
	free(resp);
	close(fd);

	/* A stream to a 1.0 client is not chunked: it ends with the connection. */
	fd = dial(s->port);
	send_text(fd, "GET /flood HTTP/1.0\r\n\r\n");
	size_t len;
	resp = read_until(fd, NULL, &len);
	assert_null(strstr(resp, "chunked"));
	char *body = strstr(resp, "\r\n\r\n");
	assert_non_null(body);
	assert_int_equal(len - (size_t)(body + 4 - resp), 8u << 20);
	free(resp);
	close(fd);

	fd = dial(s->port);
	send_text(fd, "HEAD /open/h HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	resp = read_all(fd);
	assert_non_null(strstr(resp, "HTTP/1.1 200"));
	assert_non_null(strstr(resp, "Content-Length: 13"));
	assert_null(strstr(resp, "hello")); /* no body */
	free(resp);
	close(fd);
}

/* --- deadlines and caps ----------------------------------------------------------------- */

/* A head trickled past its deadline gets 408 and the connection closes; so does a body that
 * stops; an idle kept-alive connection is closed quietly. */
static void test_deadlines(void **state)
{
	struct server *s = *state;
	int fd = dial(s->port);
	send_text(fd, "GET /open/slow HTTP/1.1\r\nHo");
	char *resp = read_all(fd);
	assert_non_null(strstr(resp, "HTTP/1.1 408"));
	assert_non_null(strstr(resp, "{\"error\":"));
	free(resp);
	close(fd);

	fd = dial(s->port);
	send_text(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ok\r\n"
		      "Content-Length: 10\r\n\r\nabc");
	resp = read_all(fd);
	assert_non_null(strstr(resp, "HTTP/1.1 408"));
	free(resp);
	close(fd);

	fd = dial(s->port);
	send_text(fd, "GET /open/ka HTTP/1.1\r\nHost: x\r\n\r\n");
	resp = read_until(fd, "\"ka\"", NULL);
	free(resp);
	assert_true(closed_by_server(fd));
	close(fd);
	assert_int_equal(atomic_load(&P.handled), 1);
}

/* A body on a route that takes none is refused at the head, with or without a key: a GET
 * that anyone may make cannot hold its connection with a body sent slowly. */
static void test_body_on_a_route_that_takes_none(void **state)
{
	struct server *s = *state;
	int fd = dial(s->port);
	send_text(fd, "GET /open/x HTTP/1.1\r\nHost: x\r\nContent-Length: 65536\r\n\r\na");
	char *resp = read_all(fd);
	assert_non_null(strstr(resp, "HTTP/1.1 413"));
	assert_non_null(strstr(resp, "takes no request body"));
	free(resp);
	close(fd);
	fd = dial(s->port);
	send_text(fd, "GET /open/x HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
		      "1\r\na\r\n");
	resp = read_all(fd);
	assert_non_null(strstr(resp, "HTTP/1.1 413"));
	free(resp);
	close(fd);
	assert_int_equal(atomic_load(&P.handled), 0);
}

/* A body trickled in, a byte at a time each well within the body timeout, still has to be
 * whole by its deadline: the body timeout plus a second for each 1000 bytes. */
static void test_a_trickled_body_meets_its_total_deadline(void **state)
{
	struct server *s = *state;
	int fd = dial(s->port);
	send_text(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ok\r\n"
		      "Content-Length: 1000\r\n\r\n");
	bool refused = false;
	/* 50 bytes, one each 100 ms: 5 s, where the deadline is about 0.35 s. */
	for (int i = 0; i < 50 && !refused; i++) {
		if (write(fd, "x", 1) != 1)
			break;
		struct pollfd p = { .fd = fd, .events = POLLIN };
		refused = poll(&p, 1, 100) == 1;
	}
	assert_true(refused);
	char *resp = read_all(fd);
	assert_non_null(strstr(resp, "HTTP/1.1 408"));
	free(resp);
	close(fd);
	assert_int_equal(atomic_load(&P.handled), 0);

	/* A body as fast as the rate asks, paused no longer than the timeout, is whole. */
	fd = dial(s->port);
	send_text(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ok\r\n"
		      "Content-Length: 4000\r\nConnection: close\r\n\r\n");
	char chunk[400];
	memset(chunk, 'y', sizeof(chunk));
	for (int i = 0; i < 10; i++) {
		send_all(fd, chunk, sizeof(chunk));
		usleep(100 * 1000);
	}
	resp = read_all(fd);
	assert_non_null(strstr(resp, "HTTP/1.1 200"));
	free(resp);
	close(fd);
}

/* Connections that made only requests anyone may make stay strangers: at the per-address cap
 * (4 here) the oldest of them, idle between requests, makes room. */
static void test_keyless_requests_stay_strangers(void **state)
{
	struct server *s = *state;
	int fds[5];
	for (int i = 0; i < 5; i++) {
		fds[i] = dial(s->port);
		send_text(fds[i], "GET /open/k HTTP/1.1\r\nHost: x\r\n\r\n");
		free(read_until(fds[i], "\"k\"", NULL));
	}
	assert_true(closed_by_server(fds[0]));
	for (int i = 0; i < 5; i++)
		close(fds[i]);
}

/* Bodies in flight are charged to their key: past its budget a body is refused with 429, and
 * the others go through. */
static void test_bodies_in_flight_have_a_budget_per_key(void **state)
{
	struct server *s = *state;
	int held = dial(s->port);
	send_text(held, "POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ok\r\n"
			"Content-Length: 8388608\r\n\r\n");
	char *chunk = calloc(1, 3u << 20);
	memset(chunk, 'a', 3u << 20);
	send_all(held, chunk, 3u << 20); /* 3 of the 4 MiB, and nothing more for now */
	assert_true(wait_until(bodies_held, &(uint64_t){ 3u << 20 }, WAIT_TIMEOUT_MS,
			       "the first body to be held"));
	int fd = dial(s->port);
	send_text(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ok\r\n"
		      "Content-Length: 2097152\r\n\r\n");
	send_all(fd, chunk, 2u << 20);
	char *resp = read_all(fd);
	assert_non_null(strstr(resp, "HTTP/1.1 429"));
	assert_non_null(strstr(resp, "SANDBOX_KEY_MAX_BODY_BYTES"));
	free(resp);
	close(fd);
	close(held);
	/* The first one's charge went with it: a body within the budget goes through. */
	fd = dial(s->port);
	send_text(fd, "POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ok\r\n"
		      "Content-Length: 3145728\r\nConnection: close\r\n\r\n");
	send_all(fd, chunk, 3u << 20);
	size_t n = 0;
	resp = read_until(fd, NULL, &n);
	assert_non_null(strstr(resp, "HTTP/1.1 200"));
	assert_true(n > 3u << 20);
	free(resp);
	close(fd);
	free(chunk);
}

/* A JSON body of `len` bytes of "s" to /json; the reply. */
static char *post_json(int port, size_t len)
{
	char *body = malloc(len + 16);
	memcpy(body, "{\"s\":\"", 6);
	memset(body + 6, 'b', len);
	memcpy(body + 6 + len, "\"}", 2);
	int fd = dial(port);
	char head[256];
	snprintf(head, sizeof(head),
		 "POST /json HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ok\r\n"
		 "Content-Length: %zu\r\nConnection: close\r\n\r\n",
		 len + 8);
	send_text(fd, head);
	send_all(fd, body, len + 8);
	char *resp = read_all(fd);
	close(fd);
	free(body);
	return resp;
}

/* A large JSON body is spooled to the state directory and parsed from there, whole. */
static void test_a_large_json_body_is_spooled_and_parsed(void **state)
{
	struct server *s = *state;
	size_t len = 3u << 20;
	char *resp = post_json(s->port, len);
	assert_non_null(strstr(resp, "HTTP/1.1 200"));
	char want[64];
	snprintf(want, sizeof(want), "\"length\": %zu", len);
	if (!strstr(resp, want))
		snprintf(want, sizeof(want), "\"length\":%zu", len);
	assert_non_null(strstr(resp, want));
	free(resp);
	/* The spool was made there, and nothing of it has a name. */
	char dir[128];
	snprintf(dir, sizeof(dir), "%s/bodies", spool_dir);
	DIR *d = opendir(dir);
	assert_non_null(d);
	struct dirent *e;
	int names = 0;
	while ((e = readdir(d)))
		names += e->d_name[0] != '.';
	closedir(d);
	assert_int_equal(names, 0);
}

/* Spool files have one bound for all keys: a large body past it is a 503 to retry, a body
 * that stays in memory is not, and nothing stays charged. */
static void test_spool_files_have_a_bound_for_all_keys(void **state)
{
	struct server *s = *state;
	char *resp = post_json(s->port, 3u << 20);
	assert_non_null(strstr(resp, "HTTP/1.1 503"));
	assert_non_null(strstr(resp, "Retry-After: 1"));
	assert_non_null(strstr(resp, "SANDBOX_MAX_BODY_SPOOL_BYTES"));
	free(resp);
	resp = post_json(s->port, 1u << 20); /* spooled (past 1 MiB), within the bound */
	assert_non_null(strstr(resp, "HTTP/1.1 200"));
	free(resp);
	resp = post_json(s->port, 512u << 10);
	assert_non_null(strstr(resp, "HTTP/1.1 200"));
	free(resp);
	struct http_stats st = stats();
	assert_int_equal(st.body_spool, 0);
	assert_int_equal(st.body_mem, 0);
}

/* Spool files never take the state filesystem's reserve, which sandboxes' disks were kept
 * out of; bodies small enough for memory still go through. */
static void test_spool_files_leave_the_reserve(void **state)
{
	struct server *s = *state;
	char *resp = post_json(s->port, 3u << 20);
	assert_non_null(strstr(resp, "HTTP/1.1 503"));
	assert_non_null(strstr(resp, "SANDBOX_DISK_RESERVE_BYTES"));
	free(resp);
	resp = post_json(s->port, 512u << 10);
	assert_non_null(strstr(resp, "HTTP/1.1 200"));
	free(resp);
}

static int teardown_budget(void **state)
{
	int r = teardown(state);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", spool_dir);
	if (system(cmd) != 0)
		return -1;
	return r;
}

/* At the per-address cap (4 here), a new connection closes the oldest one from that address
 * that has not sent a whole head; a prompt client is always served. */
static void test_per_address_cap_evicts_the_oldest(void **state)
{
	struct server *s = *state;
	int slow[6];
	for (int i = 0; i < 6; i++) {
		slow[i] = dial(s->port);
		send_text(slow[i], "GET /open/x HTTP/1.1\r\n"); /* never finished */
		/* The server has read it (what it has not read yet may still complete a head, and
		 * is not closed). */
		uint64_t want = i < 4 ? (uint64_t)i + 1 : 4;
		assert_true(wait_until(heads_reach, &want, WAIT_TIMEOUT_MS, "the head to be read"));
	}
	/* The first two made room for the last two. */
	assert_true(closed_by_server(slow[0]));
	assert_true(closed_by_server(slow[1]));
	int fd = dial(s->port);
	send_text(fd, "GET /open/prompt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	char *resp = read_all(fd);
	assert_non_null(strstr(resp, "\"prompt\""));
	free(resp);
	close(fd);
	for (int i = 0; i < 6; i++)
		close(slow[i]);
	assert_true(stats().evicted >= 3);
}

/* Connections that passed a key check do not count against their address: at the global
 * cap (8 here), the oldest connection without a whole head goes, and with none to close the
 * newcomer gets a 503. */
static void test_global_cap(void **state)
{
	struct server *s = *state;
	int held[8];
	for (int i = 0; i < 8; i++) {
		held[i] = dial(s->port);
		/* Authenticated, then kept busy with a body that is still coming. */
		send_text(held[i], "POST /echo HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ok\r\n"
				   "Content-Length: 100\r\n\r\nx");
	}
	int fd = dial(s->port);
	char *resp = read_all(fd);
	assert_non_null(strstr(resp, "HTTP/1.1 503"));
	assert_non_null(strstr(resp, "Retry-After"));
	free(resp);
	close(fd);
	for (int i = 0; i < 8; i++)
		close(held[i]);
	assert_true(stats().refused >= 1);
}

/* --- streamed bodies and replies -------------------------------------------------------- */

static void test_streamed_body_with_pauses(void **state)
{
	struct server *s = *state;
	int fd = dial(s->port);
	size_t total = 3u << 20;
	char head[256];
	snprintf(head, sizeof(head),
		 "POST /upload HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ok\r\n"
		 "Content-Length: %zu\r\n\r\n",
		 total);
	send_text(fd, head);
	atomic_store(&P.body_pieces, 0);
	char *buf = malloc(total);
	uint32_t sum = 0;
	for (size_t i = 0; i < total; i++) {
		buf[i] = (char)(i * 13 % 251);
		sum = sum * 31 + (uint8_t)buf[i];
	}
	send_all(fd, buf, total);
	free(buf);
	char *resp = read_until(fd, "}", NULL);
	char want[96];
	snprintf(want, sizeof(want), "{\"bytes\":%zu,\"sum\":%u}", total, sum);
	assert_non_null(strstr(resp, "HTTP/1.1 200"));
	assert_non_null(strstr(resp, want));
	free(resp);
	close(fd);
	assert_true(atomic_load(&P.body_pieces) > 1);
	/* Read in large pieces (bev_fill), not libevent's 4096 bytes at a time: 768 of them. */
	assert_true(atomic_load(&P.body_pieces) <= (int)(total / (16u << 10)));
}

static void test_reply_moved_from_a_buffer(void **state)
{
	struct server *s = *state;
	int fd = dial(s->port);
	atomic_store(&P.buffer_left, -1);
	send_text(fd, "GET /buffer/100000 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	char *resp = read_all(fd);
	close(fd);
	assert_non_null(strstr(resp, "Content-Length: 100000\r\n"));
	char *body = strstr(resp, "\r\n\r\n");
	assert_non_null(body);
	body += 4;
	assert_int_equal(strlen(body), 100000);
	for (size_t i = 0; i < 100000; i++)
		assert_int_equal(body[i], 'a' + i % 26);
	free(resp);
	/* Moved, not copied: nothing was left in the handler's buffer. */
	assert_int_equal(atomic_load(&P.buffer_left), 0);

	/* A HEAD has the length and no body; the buffer keeps what was not sent. */
	fd = dial(s->port);
	send_text(fd, "HEAD /buffer/7 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	resp = read_all(fd);
	close(fd);
	assert_non_null(strstr(resp, "Content-Length: 7\r\n"));
	assert_string_equal(strstr(resp, "\r\n\r\n"), "\r\n\r\n");
	assert_int_equal(atomic_load(&P.buffer_left), 7);
	free(resp);
}

/* A client that leaves while its body is still being streamed: the handler hears of it. */
static void test_streamed_body_client_leaves(void **state)
{
	struct server *s = *state;
	int fd = dial(s->port);
	send_text(fd, "POST /upload HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ok\r\n"
		      "Content-Length: 1000000\r\n\r\npartial");
	close(fd);
	/* A later request on a new connection is served; ASan checks the first was freed. */
	fd = dial(s->port);
	send_text(fd, "GET /open/after HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	char *resp = read_all(fd);
	assert_non_null(strstr(resp, "\"after\""));
	free(resp);
	close(fd);
}

/* The drain callback paces a producer: 8 MiB arrive whole. */
static void test_drain_callback(void **state)
{
	struct server *s = *state;
	/* The receive buffer is left as it is: a tiny one makes loopback wait for delayed
	 * acknowledgements, 40 ms a window. The producer queues 256 KiB at a time, so the
	 * callback is what keeps it going. */
	int fd = dial(s->port);
	send_text(fd, "GET /flood HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	size_t len;
	char *resp = read_until(fd, NULL, &len);
	char *body = strstr(resp, "\r\n\r\n");
	assert_non_null(body);
	assert_non_null(strstr(resp, "chunked"));
	/* 128 chunks of 64 KiB with their framing. */
	size_t framing = 128 * (strlen("10000\r\n") + 2) + 5;
	assert_int_equal(len - (size_t)(body + 4 - resp), (8u << 20) + framing);
	free(resp);
	close(fd);
	assert_true(atomic_load(&P.drains) > 2);
}

/* --- Host routing and upgrades ----------------------------------------------------------- */

static void test_host_routing(void **state)
{
	struct server *s = *state;
	int fd = dial(s->port);
	send_text(fd, "GET /anything/at/all HTTP/1.1\r\nHost: 8080-box.example\r\n"
		      "Connection: close\r\n\r\n");
	char *resp = read_all(fd);
	assert_non_null(strstr(resp, "\"preview\":\"8080-box.example\""));
	free(resp);
	close(fd);
	fd = dial(s->port);
	send_text(fd, "GET /anything HTTP/1.1\r\nHost: other\r\nConnection: close\r\n\r\n");
	resp = read_all(fd);
	assert_non_null(strstr(resp, "HTTP/1.1 404"));
	free(resp);
	close(fd);
}

static bool ws_closed_once(void *arg)
{
	return atomic_load(&P.ws_closed) >= *(int *)arg;
}

static bool raw_closed_once(void *arg)
{
	return atomic_load(&P.raw_closed) >= 1;
}

static void test_raw_upgrade(void **state)
{
	struct server *s = *state;
	int fd = dial(s->port);
	send_text(fd,
		  "GET /raw HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: shout\r\n\r\n"
		  "early bytes ");
	char *resp = read_until(fd, "EARLY BYTES ", NULL);
	assert_non_null(strstr(resp, "HTTP/1.1 101"));
	assert_non_null(strstr(resp, "Upgrade: shout"));
	free(resp);
	send_text(fd, "and more");
	resp = read_until(fd, "AND MORE", NULL);
	assert_string_equal(resp, "AND MORE");
	free(resp);
	close(fd);
	assert_true(wait_until(raw_closed_once, NULL, WAIT_TIMEOUT_MS, "the tunnel to close"));

	/* Without Upgrade the route cannot take the connection. */
	fd = dial(s->port);
	send_text(fd, "GET /raw HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
	resp = read_all(fd);
	assert_non_null(strstr(resp, "HTTP/1.1 400"));
	free(resp);
	close(fd);
}

/* A client frame: FIN/opcode, masked payload. */
static size_t ws_frame(uint8_t *out, bool fin, int opcode, const void *data, size_t len)
{
	size_t o = 0;
	out[o++] = (uint8_t)((fin ? 0x80 : 0) | opcode);
	if (len < 126) {
		out[o++] = (uint8_t)(0x80 | len);
	} else {
		out[o++] = 0x80 | 126;
		out[o++] = (uint8_t)(len >> 8);
		out[o++] = (uint8_t)len;
	}
	uint8_t mask[4] = { 0x12, 0x34, 0x56, 0x78 };
	memcpy(out + o, mask, 4);
	o += 4;
	for (size_t i = 0; i < len; i++)
		out[o++] = ((const uint8_t *)data)[i] ^ mask[i % 4];
	return o;
}

/* Reads one server frame (unmasked): returns its opcode, the payload in data. */
static int ws_read_frame(int fd, uint8_t *data, size_t *len)
{
	uint8_t h[4];
	if (recv(fd, h, 2, MSG_WAITALL) != 2)
		return -1;
	size_t n = h[1] & 0x7f;
	if (n == 126) {
		if (recv(fd, h + 2, 2, MSG_WAITALL) != 2)
			return -1;
		n = (size_t)h[2] << 8 | h[3];
	}
	if (n && recv(fd, data, n, MSG_WAITALL) != (ssize_t)n)
		return -1;
	*len = n;
	return h[0] & 0x0f;
}

static int ws_dial(int port)
{
	int fd = dial(port);
	send_text(
		fd,
		"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n");
	char *resp = read_until(fd, "\r\n\r\n", NULL);
	assert_non_null(strstr(resp, "HTTP/1.1 101"));
	/* RFC 6455's own example key and answer. */
	assert_non_null(strstr(resp, "Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo="));
	free(resp);
	return fd;
}

static void test_websocket_echo(void **state)
{
	struct server *s = *state;
	int fd = ws_dial(s->port);
	uint8_t out[512], in[4096];
	size_t n, len;

	/* A text message in three fragments, with a ping between two of them. */
	n = ws_frame(out, false, 0x1, "hel", 3);
	n += ws_frame(out + n, false, 0x0, "lo ", 3);
	n += ws_frame(out + n, true, 0x9, "p!", 2);
	n += ws_frame(out + n, true, 0x0, "world", 5);
	send_all(fd, out, n);
	assert_int_equal(ws_read_frame(fd, in, &len), 0xA); /* the pong first */
	assert_int_equal(len, 2);
	assert_memory_equal(in, "p!", 2);
	assert_int_equal(ws_read_frame(fd, in, &len), 0x1);
	assert_int_equal(len, 11);
	assert_memory_equal(in, "hello world", 11);

	/* Binary, 300 bytes (a 16-bit length). */
	uint8_t bin[300];
	for (size_t i = 0; i < sizeof(bin); i++)
		bin[i] = (uint8_t)i;
	n = ws_frame(out, true, 0x2, bin, sizeof(bin));
	send_all(fd, out, n);
	assert_int_equal(ws_read_frame(fd, in, &len), 0x2);
	assert_int_equal(len, sizeof(bin));
	assert_memory_equal(in, bin, sizeof(bin));

	/* The server closes when asked: a close frame with 4000, then the end. */
	n = ws_frame(out, true, 0x1, "close", 5);
	send_all(fd, out, n);
	assert_int_equal(ws_read_frame(fd, in, &len), 0x8);
	assert_true(len >= 2);
	assert_int_equal(in[0] << 8 | in[1], 4000);
	uint8_t code[2] = { 4000 >> 8, 4000 & 0xff };
	n = ws_frame(out, true, 0x8, code, 2);
	send_all(fd, out, n);
	assert_true(closed_by_server(fd));
	close(fd);
	int want = 1;
	assert_true(wait_until(ws_closed_once, &want, WAIT_TIMEOUT_MS, "the WebSocket to end"));
	assert_int_equal(atomic_load(&P.ws_close_code), 4000);
}

/* Bad frames: text that is not UTF-8 closes with 1007, a message over the limit with 1009,
 * an unmasked client frame with 1002; a client that just leaves is told as 1006. */
static void test_websocket_bad_frames(void **state)
{
	struct server *s = *state;
	uint8_t out[8192], in[256];
	size_t n, len;
	struct {
		int opcode;
		size_t len;
		int code;
	} cases[] = { { 0x1, 2, 1007 }, { 0x2, 5000, 1009 } };
	for (size_t i = 0; i < 2; i++) {
		int fd = ws_dial(s->port);
		uint8_t payload[5000];
		memset(payload, 0xff, sizeof(payload));
		n = ws_frame(out, true, cases[i].opcode, payload, cases[i].len);
		send_all(fd, out, n);
		int op;
		while ((op = ws_read_frame(fd, in, &len)) == 0x1 || op == 0x2)
			;
		assert_int_equal(op, 0x8);
		assert_int_equal(in[0] << 8 | in[1], cases[i].code);
		close(fd);
	}
	int fd = ws_dial(s->port);
	uint8_t unmasked[] = { 0x81, 0x02, 'h', 'i' };
	send_all(fd, unmasked, sizeof(unmasked));
	int op = ws_read_frame(fd, in, &len);
	if (op == 0x8)
		assert_int_equal(in[0] << 8 | in[1], 1002);
	close(fd);

	fd = ws_dial(s->port);
	close(fd);
	int want = 4;
	assert_true(wait_until(ws_closed_once, &want, WAIT_TIMEOUT_MS, "every WebSocket to end"));
}

/* Handshakes that are not: no Upgrade (426), a wrong version (426), a bad key (400). */
static void test_websocket_bad_handshakes(void **state)
{
	struct server *s = *state;
	const char *reqs[][2] = {
		{ "GET /ws HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "HTTP/1.1 426" },
		{ ("GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
		   "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: "
		   "8\r\n\r\n"),
		  "HTTP/1.1 426" },
		{ ("GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
		   "Sec-WebSocket-Key: short\r\nSec-WebSocket-Version: 13\r\n\r\n"),
		  "HTTP/1.1 400" },
	};
	for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++) {
		int fd = dial(s->port);
		send_text(fd, reqs[i][0]);
		char *resp = read_all(fd);
		assert_non_null(strstr(resp, reqs[i][1]));
		assert_non_null(strstr(resp, "{\"error\":"));
		free(resp);
		close(fd);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_refused_before_the_body, setup, teardown),
		cmocka_unit_test_setup_teardown(test_expect_continue, setup, teardown),
		cmocka_unit_test_setup_teardown(test_route_body_limit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_duplicate_headers_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_keep_alive_and_pipelining, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pipelining_without_reading_is_bounded, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_http10_and_head, setup, teardown),
		cmocka_unit_test_setup_teardown(test_deadlines, setup_tight, teardown),
		cmocka_unit_test_setup_teardown(test_body_on_a_route_that_takes_none, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_a_trickled_body_meets_its_total_deadline,
						setup_rate, teardown),
		cmocka_unit_test_setup_teardown(test_keyless_requests_stay_strangers, setup_caps,
						teardown),
		cmocka_unit_test_setup_teardown(test_bodies_in_flight_have_a_budget_per_key,
						setup_budget, teardown_budget),
		cmocka_unit_test_setup_teardown(test_a_large_json_body_is_spooled_and_parsed,
						setup_budget, teardown_budget),
		cmocka_unit_test_setup_teardown(test_spool_files_have_a_bound_for_all_keys,
						setup_spool_cap, teardown_budget),
		cmocka_unit_test_setup_teardown(test_spool_files_leave_the_reserve,
						setup_spool_reserve, teardown_budget),
		cmocka_unit_test_setup_teardown(test_per_address_cap_evicts_the_oldest, setup_caps,
						teardown),
		cmocka_unit_test_setup_teardown(test_global_cap, setup_global, teardown),
		cmocka_unit_test_setup_teardown(test_streamed_body_with_pauses, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reply_moved_from_a_buffer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_streamed_body_client_leaves, setup, teardown),
		cmocka_unit_test_setup_teardown(test_drain_callback, setup, teardown),
		cmocka_unit_test_setup_teardown(test_host_routing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_raw_upgrade, setup, teardown),
		cmocka_unit_test_setup_teardown(test_websocket_echo, setup, teardown),
		cmocka_unit_test_setup_teardown(test_websocket_bad_frames, setup, teardown),
		cmocka_unit_test_setup_teardown(test_websocket_bad_handshakes, setup, teardown),
	};
	if (getenv("TEST_FILTER"))
		cmocka_set_test_filter(getenv("TEST_FILTER"));
	return cmocka_run_group_tests(tests, NULL, NULL);
}
