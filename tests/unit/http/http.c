/* Tests of src/http/http.c: a real evhttp server on loopback driven by a raw socket client,
 * checking routing, JSON errors (never HTML), body limits and URI redaction; and the paths of
 * a reply that outlives its handler: a stream whose client leaves midway, a client that
 * leaves before an asynchronous answer, back-pressure on a long stream, a stream that ends.
 *
 * The server runs on a thread of its own; its handlers record what they saw in P (atomics),
 * which the test's thread waits on. Leaks and use after free are ASan's to find: the unit
 * suite runs in build-asan/. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
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

static void h_echo(struct http_ctx *ctx)
{
	json_t *body;
	if (http_body_json(ctx, &body) < 0)
		return;
	const char *id = http_param(ctx, 0);
	json_object_set_new(body, "id", json_string(id ? id : ""));
	const char *q = http_query(ctx, "q");
	if (q)
		json_object_set_new(body, "q", json_string(q));
	http_reply_json(ctx, 200, body);
}

static void h_stream(struct http_ctx *ctx)
{
	http_stream_start(ctx, 200, "application/x-ndjson");
	http_stream_write(ctx, "{\"n\":1}\n", 8);
	http_stream_write(ctx, "{\"n\":2}\n", 8);
	http_stream_end(ctx);
}

struct server {
	struct event_base *base;
	struct http_server *srv;
	struct config cfg;
	int port;
	pthread_t thread;
};

/* The server of the running test (its handlers need its event base). */
static struct server *S;

/* What the server's thread saw, for the test's thread. */
static struct {
	atomic_int handled;          /* requests a handler took */
	atomic_int gone;             /* on_gone calls */
	atomic_int done;             /* requests finished (the server's done callback) */
	atomic_int status;           /* the status the last finished request was counted with */
	atomic_bool req_in_gone;     /* ctx->conn was still set while on_gone ran */
	atomic_long pending_in_gone; /* http_stream_pending() while on_gone ran */
	atomic_int dropped;          /* writes tried after the client left */
	atomic_long written;         /* payload bytes the flood wrote */
	atomic_int stalled;     /* most flood ticks in a row finding the client's buffer full */
	atomic_bool quiet_gone; /* the quiet request's ctx->gone, as last looked at */
	atomic_long inflight;   /* http_server_inflight(), as last looked at */
} P;

static void on_done(const char *method, const char *route, int status, double seconds, void *arg)
{
	atomic_store(&P.status, status);
	atomic_fetch_add(&P.done, 1);
}

/* --- producers: streams written from the server's own events, after their handler -------- */

struct producer {
	struct http_ctx *ctx;
	struct event *timer;
	void (*tick)(struct producer *p);
	unsigned n;
	bool gone;      /* the client left */
	int late;       /* writes still to try once it left */
	size_t written; /* flood: payload bytes so far */
	size_t target;  /* flood: end once this much is written (0: not yet) */
	int stalls;     /* flood: ticks in a row that found the client's buffer full */
};

static void producer_arm(struct producer *p, int ms)
{
	struct timeval tv = { 0, ms * 1000 };
	evtimer_add(p->timer, &tv);
}

/* Ends the reply, which every handler owes its ctx, and the producer. */
static void producer_end(struct producer *p)
{
	http_stream_end(p->ctx);
	event_free(p->timer);
	free(p);
}

/* The handler's part once the client left: a few more writes (dropped), then the end. */
static void producer_after_gone(struct producer *p)
{
	if (p->late > 0) {
		p->late--;
		http_stream_write(p->ctx, "late\n", 5);
		atomic_fetch_add(&P.dropped, 1);
		producer_arm(p, 1);
		return;
	}
	producer_end(p);
}

static void producer_on_timer(evutil_socket_t fd, short what, void *arg)
{
	struct producer *p = arg;
	if (p->gone)
		producer_after_gone(p);
	else
		p->tick(p);
}

static void producer_gone(struct http_ctx *ctx, void *arg)
{
	struct producer *p = arg;
	atomic_store(&P.req_in_gone, ctx->conn != NULL);
	atomic_store(&P.pending_in_gone, (long)http_stream_pending(ctx));
	p->gone = true;
	atomic_fetch_add(&P.gone, 1);
}

static void start_producer(struct http_ctx *ctx, void (*tick)(struct producer *p), int late)
{
	struct producer *p = calloc(1, sizeof(*p));
	p->ctx = ctx;
	p->tick = tick;
	p->late = late;
	p->timer = evtimer_new(S->base, producer_on_timer, p);
	ctx->on_gone = producer_gone;
	ctx->on_gone_arg = p;
	http_stream_start(ctx, 200, "text/plain");
	atomic_fetch_add(&P.handled, 1);
	producer_arm(p, 0);
}

/* GET /ticks: a line every 2 ms, for as long as the client stays. */
static void tick_line(struct producer *p)
{
	char line[32];
	int n = snprintf(line, sizeof(line), "tick %u\n", p->n++);
	http_stream_write(p->ctx, line, (size_t)n);
	producer_arm(p, 2);
}

static void h_ticks(struct http_ctx *ctx)
{
	start_producer(ctx, tick_line, 3);
}

/* GET /countdown: five lines, 2 ms apart, then the end. */
static void countdown_line(struct producer *p)
{
	if (p->n == 5) {
		producer_end(p);
		return;
	}
	char line[8];
	int n = snprintf(line, sizeof(line), "%u\n", 5 - p->n++);
	http_stream_write(p->ctx, line, (size_t)n);
	producer_arm(p, 2);
}

static void h_countdown(struct http_ctx *ctx)
{
	start_producer(ctx, countdown_line, 0);
}

/* GET /flood: as much as the client takes, in chunks, holding back while it has FLOOD_HIGH
 * bytes or more still to read (http_stream_pending), as the exec stream does. Once it found
 * the client's buffer full FLOOD_STALL ticks in a row, it writes FLOOD_AFTER more and ends. */
#define FLOOD_CHUNK (16 * 1024)
#define FLOOD_HIGH  (64 * 1024)
#define FLOOD_AFTER (1024 * 1024)
#define FLOOD_STALL 50

static uint8_t flood_byte(size_t offset)
{
	return (uint8_t)(offset * 7 % 251);
}

static void flood_chunk(struct producer *p)
{
	if (http_stream_pending(p->ctx) >= FLOOD_HIGH) {
		if (++p->stalls > atomic_load(&P.stalled))
			atomic_store(&P.stalled, p->stalls);
		if (p->stalls == FLOOD_STALL && !p->target)
			p->target = p->written + FLOOD_AFTER;
		producer_arm(p, 1);
		return;
	}
	p->stalls = 0;
	if (p->target && p->written >= p->target) {
		producer_end(p);
		return;
	}
	static uint8_t buf[FLOOD_CHUNK];
	for (size_t i = 0; i < sizeof(buf); i++)
		buf[i] = flood_byte(p->written + i);
	http_stream_write(p->ctx, buf, sizeof(buf));
	p->written += sizeof(buf);
	atomic_store(&P.written, (long)p->written);
	producer_arm(p, 1);
}

static void h_flood(struct http_ctx *ctx)
{
	start_producer(ctx, flood_chunk, 0);
}

/* POST /later: answered after its handler returned, as a command's result is; a client that
 * leaves first is told to on_gone, and the answer still comes (and is dropped). */
static void later_reply(evutil_socket_t fd, short what, void *arg)
{
	http_reply_json(arg, 200, json_pack("{s:b}", "late", 1));
}

static void later_gone(struct http_ctx *ctx, void *arg)
{
	atomic_store(&P.req_in_gone, ctx->conn != NULL);
	atomic_fetch_add(&P.gone, 1);
	struct timeval now = { 0, 0 };
	event_base_once(S->base, -1, EV_TIMEOUT, later_reply, ctx, &now);
}

static void h_later(struct http_ctx *ctx)
{
	ctx->on_gone = later_gone;
	atomic_fetch_add(&P.handled, 1);
}

/* POST /quiet: answered when the test says so, with no on_gone (as file operations are). */
static struct http_ctx *quiet_ctx; /* the server's thread only */

static void h_quiet(struct http_ctx *ctx)
{
	quiet_ctx = ctx;
	atomic_fetch_add(&P.handled, 1);
}

static const struct http_route routes[] = {
	{ HTTP_REQ_POST, "/things/:id/echo", h_echo, NULL },
	{ HTTP_REQ_GET, "/stream", h_stream, NULL },
	{ HTTP_REQ_GET, "/ticks", h_ticks, NULL },
	{ HTTP_REQ_GET, "/countdown", h_countdown, NULL },
	{ HTTP_REQ_GET, "/flood", h_flood, NULL },
	{ HTTP_REQ_POST, "/later", h_later, NULL },
	{ HTTP_REQ_POST, "/quiet", h_quiet, NULL },
};

static void *serve(void *arg)
{
	struct server *s = arg;
	event_base_dispatch(s->base);
	return NULL;
}

static int setup(void **state)
{
	evthread_use_pthreads();
	memset(&P, 0, sizeof(P));
	quiet_ctx = NULL;
	struct server *s = calloc(1, sizeof(*s));
	S = s;
	s->cfg.max_body_bytes = 1024;
	s->base = event_base_new();
	s->srv = http_server_new(s->base, &s->cfg, routes, sizeof(routes) / sizeof(routes[0]));
	http_server_set_done(s->srv, on_done, NULL);
	struct err e;
	assert_int_equal(http_server_listen_tcp(s->srv, "127.0.0.1", 0, &s->port, &e), 0);
	pthread_create(&s->thread, NULL, serve, s);
	*state = s;
	return 0;
}

static int teardown(void **state)
{
	struct server *s = *state;
	event_base_loopbreak(s->base);
	pthread_join(s->thread, NULL);
	http_server_free(s->srv);
	/* A connection freed above while one of its deferred callbacks was pending is released
	 * by the loop. */
	event_base_loop(s->base, EVLOOP_NONBLOCK);
	event_base_free(s->base);
	free(s);
	return 0;
}

/* Sends a raw request and returns the whole response (connection: close). */
static char *roundtrip(int port, const char *req, size_t reqlen)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	size_t off = 0;
	while (off < reqlen) {
		ssize_t w = write(fd, req + off, reqlen - off);
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	shutdown(fd, SHUT_WR);
	size_t cap = 65536, len = 0;
	char *buf = malloc(cap + 1);
	ssize_t r;
	while ((r = read(fd, buf + len, cap - len)) > 0)
		len += (size_t)r;
	buf[len] = '\0';
	close(fd);
	return buf;
}

static char *request(int port, const char *method, const char *path, const char *body)
{
	char req[8192];
	int n = snprintf(req, sizeof(req),
			 "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
			 "Content-Length: %zu\r\n\r\n%s",
			 method, path, strlen(body), body);
	return roundtrip(port, req, (size_t)n);
}

static void assert_json_error(const char *resp, const char *status_line)
{
	assert_non_null(strstr(resp, status_line));
	assert_non_null(strstr(resp, "Content-Type: application/json"));
	assert_non_null(strstr(resp, "{\"error\":"));
	assert_null(strstr(resp, "<HTML"));
	assert_null(strstr(resp, "<html"));
}

static void test_route_params_and_query(void **state)
{
	struct server *s = *state;
	char *resp = request(s->port, "POST", "/things/a%20b/echo?q=1", "{\"x\":1}");
	assert_non_null(strstr(resp, "HTTP/1.1 200"));
	assert_non_null(strstr(resp, "\"id\":\"a b\""));
	assert_non_null(strstr(resp, "\"q\":\"1\""));
	assert_non_null(strstr(resp, "X-Request-Id:"));
	free(resp);
}

static void test_unknown_route_and_method(void **state)
{
	struct server *s = *state;
	char *resp = request(s->port, "GET", "/nope", "");
	assert_json_error(resp, "HTTP/1.1 404");
	free(resp);
	resp = request(s->port, "GET", "/things/x/echo", "");
	assert_json_error(resp, "HTTP/1.1 405");
	free(resp);
}

static void test_bad_bodies(void **state)
{
	struct server *s = *state;
	char *resp = request(s->port, "POST", "/things/x/echo", "{bad");
	assert_json_error(resp, "HTTP/1.1 400");
	free(resp);
	resp = request(s->port, "POST", "/things/x/echo", "[1,2]");
	assert_json_error(resp, "HTTP/1.1 400");
	free(resp);
	resp = request(s->port, "POST", "/things/x/echo", "{\"a\":1,\"a\":2}");
	assert_json_error(resp, "HTTP/1.1 400");
	free(resp);
}

static void test_oversize_body_is_json_413(void **state)
{
	struct server *s = *state;
	char *big = malloc(4096);
	memset(big, ' ', 4095);
	big[0] = '{';
	big[4094] = '}';
	big[4095] = '\0';
	char *resp = request(s->port, "POST", "/things/x/echo", big);
	assert_json_error(resp, "HTTP/1.1 413");
	free(resp);
	free(big);
}

static void test_malformed_request_line_is_json(void **state)
{
	struct server *s = *state;
	const char *junk = "BLAH\r\n\r\n";
	char *resp = roundtrip(s->port, junk, strlen(junk));
	/* A method http_parser does not know is a malformed request line. */
	assert_json_error(resp, " 400 Bad Request");
	free(resp);
}

static void test_stream(void **state)
{
	struct server *s = *state;
	char *resp = request(s->port, "GET", "/stream", "");
	assert_non_null(strstr(resp, "HTTP/1.1 200"));
	assert_non_null(strstr(resp, "Transfer-Encoding: chunked"));
	assert_non_null(strstr(resp, "{\"n\":1}"));
	assert_non_null(strstr(resp, "{\"n\":2}"));
	free(resp);
}

/* --- the test's side: calls on the server's thread, waits, a client ----------------------- */

struct call {
	void (*fn)(void);
	atomic_bool ran;
};

static void run_call(evutil_socket_t fd, short what, void *arg)
{
	struct call *c = arg;
	c->fn();
	atomic_store(&c->ran, true);
}

static bool call_ran(void *arg)
{
	return atomic_load(&((struct call *)arg)->ran);
}

/* Runs fn on the server's thread, between two of its events, and waits until it did. */
static void on_server(void (*fn)(void))
{
	struct call c = { .fn = fn };
	struct timeval now = { 0, 0 };
	assert_int_equal(event_base_once(S->base, -1, EV_TIMEOUT, run_call, &c, &now), 0);
	assert_true(wait_until(call_ran, &c, WAIT_TIMEOUT_MS, "the server's thread to run a call"));
}

static void look_at_inflight(void)
{
	atomic_store(&P.inflight, (long)http_server_inflight(S->srv));
}

static void look_at_quiet(void)
{
	atomic_store(&P.quiet_gone, quiet_ctx && quiet_ctx->gone);
}

static void answer_quiet(void)
{
	http_reply_json(quiet_ctx, 200, json_pack("{s:b}", "quiet", 1));
	quiet_ctx = NULL;
}

/* Requests whose reply has not completed, as the server's thread sees them. */
static long inflight(void)
{
	on_server(look_at_inflight);
	return atomic_load(&P.inflight);
}

struct count {
	atomic_int *counter;
	int n;
};

static bool reached(void *arg)
{
	struct count *c = arg;
	return atomic_load(c->counter) >= c->n;
}

/* Waits until *counter reaches n. */
static void wait_count(atomic_int *counter, int n, const char *what)
{
	struct count c = { counter, n };
	assert_true(wait_until(reached, &c, WAIT_TIMEOUT_MS, what));
}

static bool quiet_is_gone(void *arg)
{
	on_server(look_at_quiet);
	return atomic_load(&P.quiet_gone);
}

/* A connected client socket whose reads give up after the wait's deadline. */
static int dial(int port, int rcvbuf)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	struct timeval tv = { WAIT_TIMEOUT_MS / 1000, 0 };
	assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
	if (rcvbuf)
		assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)), 0);
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

static void send_text(int fd, const char *text)
{
	size_t len = strlen(text);
	assert_int_equal(write(fd, text, len), (ssize_t)len);
}

/* A buffered reader of one connection's responses. */
struct reader {
	int fd;
	uint8_t buf[65536];
	size_t len, off;
};

static bool fill(struct reader *r)
{
	if (r->off < r->len)
		return true;
	ssize_t n = read(r->fd, r->buf, sizeof(r->buf));
	if (n <= 0)
		return false;
	r->len = (size_t)n;
	r->off = 0;
	return true;
}

/* A line without its CRLF; false at the end of the stream (or the deadline). */
static bool read_line(struct reader *r, char *line, size_t cap)
{
	size_t n = 0;
	while (fill(r)) {
		char c = (char)r->buf[r->off++];
		if (c == '\n') {
			if (n && line[n - 1] == '\r')
				n--;
			line[n] = '\0';
			return true;
		}
		if (n + 1 < cap)
			line[n++] = c;
	}
	return false;
}

/* n bytes of body, handed to sink as they come. */
static bool read_body(struct reader *r, size_t n,
		      void (*sink)(const uint8_t *p, size_t n, void *arg), void *arg)
{
	while (n) {
		if (!fill(r))
			return false;
		size_t k = r->len - r->off < n ? r->len - r->off : n;
		sink(r->buf + r->off, k, arg);
		r->off += k;
		n -= k;
	}
	return true;
}

/* One response: its status and its body (chunked or with a length), handed to sink piece by
 * piece. False when the connection ended, or the deadline passed, before its end. */
static bool read_response(struct reader *r, int *status,
			  void (*sink)(const uint8_t *p, size_t n, void *arg), void *arg)
{
	char line[1024];
	if (!read_line(r, line, sizeof(line)) || sscanf(line, "HTTP/1.1 %d", status) != 1)
		return false;
	bool chunked = false;
	size_t length = 0;
	while (read_line(r, line, sizeof(line)) && line[0]) {
		if (strcasecmp(line, "Transfer-Encoding: chunked") == 0)
			chunked = true;
		else if (strncasecmp(line, "Content-Length:", 15) == 0)
			length = strtoul(line + 15, NULL, 10);
	}
	if (!chunked)
		return read_body(r, length, sink, arg);
	for (;;) {
		if (!read_line(r, line, sizeof(line)))
			return false;
		size_t size = strtoul(line, NULL, 16);
		if (size == 0) /* the last chunk, then an empty trailer */
			return read_line(r, line, sizeof(line)) && line[0] == '\0';
		if (!read_body(r, size, sink, arg) || !read_line(r, line, sizeof(line)) || line[0])
			return false;
	}
}

/* A sink that keeps the body as text. */
struct text {
	char buf[4096];
	size_t len;
};

static void keep_text(const uint8_t *p, size_t n, void *arg)
{
	struct text *t = arg;
	size_t room = sizeof(t->buf) - 1 - t->len;
	memcpy(t->buf + t->len, p, n < room ? n : room);
	t->len += n < room ? n : room;
	t->buf[t->len] = '\0';
}

/* A client that leaves in the middle of a stream: on_gone runs once, with the request already
 * let go and nothing counted as still to send; the producer's later writes are dropped; its
 * end of the reply frees everything (ASan reports a leak or a use after free otherwise). */
static void test_client_leaves_mid_stream(void **state)
{
	struct server *s = *state;
	int fd = dial(s->port, 0);
	send_text(fd, "GET /ticks HTTP/1.1\r\nHost: x\r\n\r\n");
	/* The stream is under way: lines have come. */
	char got[4096] = "";
	size_t len = 0;
	while (!strstr(got, "tick 2\n")) {
		ssize_t n = read(fd, got + len, sizeof(got) - 1 - len);
		assert_true(n > 0);
		len += (size_t)n;
		got[len] = '\0';
	}
	assert_non_null(strstr(got, "HTTP/1.1 200"));
	close(fd);

	wait_count(&P.done, 1, "the stream's request to finish after its client left");
	assert_int_equal(atomic_load(&P.gone), 1);
	assert_false(atomic_load(&P.req_in_gone));
	assert_int_equal(atomic_load(&P.pending_in_gone), 0);
	assert_int_equal(atomic_load(&P.dropped), 3);
	assert_int_equal(atomic_load(&P.status), 200); /* the status that was sent */
	assert_int_equal(inflight(), 0);
}

/* A client that leaves before an asynchronous answer: the server notices, though it reads
 * nothing from the connection meanwhile; on_gone runs once; the answer that comes afterwards
 * is dropped and the ctx freed. */
static void test_client_leaves_before_the_answer(void **state)
{
	struct server *s = *state;
	int fd = dial(s->port, 0);
	send_text(fd, "POST /later HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}");
	wait_count(&P.handled, 1, "the handler to take the request");
	close(fd);

	wait_count(&P.done, 1, "the request to finish after its client left");
	assert_int_equal(atomic_load(&P.gone), 1);
	assert_false(atomic_load(&P.req_in_gone));
	/* No status was ever sent: the request is counted and logged as 499, not as the status
	 * of the answer that was dropped. */
	assert_int_equal(atomic_load(&P.status), 499);
	assert_int_equal(inflight(), 0);
}

/* The same without on_gone: the ctx, marked gone, waits for its handler's answer, which is
 * dropped; then it is freed. */
static void test_client_leaves_before_an_answer_nobody_is_told_of(void **state)
{
	struct server *s = *state;
	int fd = dial(s->port, 0);
	send_text(fd, "POST /quiet HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}");
	wait_count(&P.handled, 1, "the handler to take the request");
	close(fd);

	assert_true(wait_until(quiet_is_gone, NULL, WAIT_TIMEOUT_MS,
			       "the server to notice that the client left"));
	assert_int_equal(atomic_load(&P.done), 0);
	assert_int_equal(inflight(), 1);
	on_server(answer_quiet);
	wait_count(&P.done, 1, "the late answer to finish the request");
	assert_int_equal(atomic_load(&P.status), 499); /* nothing was sent */
	assert_int_equal(inflight(), 0);
}

struct flood_check {
	size_t offset;
	size_t wrong;
};

static void check_flood(const uint8_t *p, size_t n, void *arg)
{
	struct flood_check *c = arg;
	for (size_t i = 0; i < n; i++)
		c->wrong += p[i] != flood_byte(c->offset + i);
	c->offset += n;
}

/* A long stream to a client that does not read: http_stream_pending() shows what waits for
 * it, so its producer holds back; once the client reads, what waited drains and the producer
 * goes on; every byte arrives, in order. */
static void test_stream_back_pressure(void **state)
{
	struct server *s = *state;
	int fd = dial(s->port, 4096);
	send_text(fd, "GET /flood HTTP/1.1\r\nHost: x\r\n\r\n");
	wait_count(&P.stalled, FLOOD_STALL,
		   "the stream to hold back for a client that does not read");
	long before = atomic_load(&P.written);

	struct reader *r = calloc(1, sizeof(*r));
	r->fd = fd;
	int status = 0;
	struct flood_check c = { 0 };
	assert_true(read_response(r, &status, check_flood, &c));
	assert_int_equal(status, 200);
	assert_int_equal(c.wrong, 0);
	wait_count(&P.done, 1, "the stream to finish");
	assert_int_equal(c.offset, (size_t)atomic_load(&P.written));
	assert_true(c.offset >= (size_t)before + FLOOD_AFTER);
	print_message("flood: held back after %ld bytes, %zu in all\n", before, c.offset);
	assert_int_equal(atomic_load(&P.gone), 0);
	free(r);
	close(fd);
	assert_int_equal(inflight(), 0);
}

/* A client that leaves while the stream holds back for it, with data it never read: its
 * connection is reset under a pending write, so libevent hands the request back to be freed
 * with the ctx (the path a plain hang-up of a quiet stream does not take). */
static void test_client_leaves_a_stream_held_back(void **state)
{
	struct server *s = *state;
	int fd = dial(s->port, 4096);
	send_text(fd, "GET /flood HTTP/1.1\r\nHost: x\r\n\r\n");
	wait_count(&P.stalled, FLOOD_STALL,
		   "the stream to hold back for a client that does not read");
	close(fd);

	wait_count(&P.done, 1, "the stream's request to finish after its client left");
	assert_int_equal(atomic_load(&P.gone), 1);
	assert_false(atomic_load(&P.req_in_gone));
	assert_int_equal(atomic_load(&P.pending_in_gone), 0);
	assert_int_equal(inflight(), 0);
}

/* A stream that ends normally: on_gone never runs, not even when the client hangs up after
 * it; the connection serves the next request; nothing is left. */
static void test_stream_ends_normally(void **state)
{
	struct server *s = *state;
	int fd = dial(s->port, 0);
	struct reader *r = calloc(1, sizeof(*r));
	r->fd = fd;
	struct text t = { 0 };
	int status = 0;
	send_text(fd, "GET /countdown HTTP/1.1\r\nHost: x\r\n\r\n");
	assert_true(read_response(r, &status, keep_text, &t));
	assert_int_equal(status, 200);
	assert_string_equal(t.buf, "5\n4\n3\n2\n1\n");
	wait_count(&P.done, 1, "the stream to finish");

	memset(&t, 0, sizeof(t));
	send_text(fd, "GET /stream HTTP/1.1\r\nHost: x\r\n\r\n");
	assert_true(read_response(r, &status, keep_text, &t));
	assert_string_equal(t.buf, "{\"n\":1}\n{\"n\":2}\n");
	wait_count(&P.done, 2, "the second request to finish");
	close(fd);
	free(r);

	/* Another connection's request, answered after the server has (in practice) seen the
	 * hang-up of the first. */
	char *resp = request(s->port, "GET", "/stream", "");
	assert_non_null(strstr(resp, "HTTP/1.1 200"));
	free(resp);
	wait_count(&P.done, 3, "the third request to finish");
	assert_int_equal(atomic_load(&P.gone), 0);
	assert_int_equal(inflight(), 0);
}

static void test_redact(void **state)
{
	char out[256];
	http_redact_uri("/exec/x/read?path=a&api_key=sk_test_123&apiKey=zz&token=t", out,
			sizeof(out));
	assert_string_equal(out,
			    "/exec/x/read?path=a&api_key=REDACTED&apiKey=REDACTED&token=REDACTED");
	http_redact_uri("/health", out, sizeof(out));
	assert_string_equal(out, "/health");
	http_redact_uri("/x?api_key=secret", out, 12);
	assert_null(strstr(out, "secret"));
}

static void test_status_mapping(void **state)
{
	assert_int_equal(http_status_for_errno(ENOENT), 404);
	assert_int_equal(http_status_for_errno(EXDEV), 400);
	assert_int_equal(http_status_for_errno(EFBIG), 413);
	assert_int_equal(http_status_for_errno(EAGAIN), 429);
	assert_int_equal(http_status_for_errno(ECONNRESET), 502);
	assert_int_equal(http_status_for_errno(EIO), 500);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_route_params_and_query, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unknown_route_and_method, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_bodies, setup, teardown),
		cmocka_unit_test_setup_teardown(test_oversize_body_is_json_413, setup, teardown),
		cmocka_unit_test_setup_teardown(test_malformed_request_line_is_json, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_stream, setup, teardown),
		cmocka_unit_test_setup_teardown(test_client_leaves_mid_stream, setup, teardown),
		cmocka_unit_test_setup_teardown(test_client_leaves_before_the_answer, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			test_client_leaves_before_an_answer_nobody_is_told_of, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stream_back_pressure, setup, teardown),
		cmocka_unit_test_setup_teardown(test_client_leaves_a_stream_held_back, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_stream_ends_normally, setup, teardown),
		cmocka_unit_test(test_redact),
		cmocka_unit_test(test_status_mapping),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
