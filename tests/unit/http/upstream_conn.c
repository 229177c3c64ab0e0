/* Tests of src/http/upstream_conn.c, the relay of a request to an upstream over a socket of its
 * own (what api/forward.c uses between the nodes of a cluster), against a fake upstream on a
 * unix socket: an answer relayed with its body and without the hop-by-hop headers either way,
 * a malformed answer and an oversize head (502), an upstream that closes mid-body (the reply
 * is cut), a slow one (504), one that is not there (502), a 101 turned into a byte tunnel.
 *
 * The HTTP server runs on a thread of its own and the fake upstream on another; ASan finds
 * leaks and use after free (the unit suite runs in build-asan/). */
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
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "http/upstream.h"

#include "../wait.h"

/* --- the fake upstream ------------------------------------------------------------------ */

enum script { ANSWER, SLOW, CLOSE_MID_BODY, ECHO_AFTER_101 };

static struct {
	char path[108];
	int lfd;
	pthread_t thread;
	enum script script;
	const char *answer; /* what it answers (ANSWER, SLOW, CLOSE_MID_BODY) */
	char head[8192];    /* the last request head it got */
	char body[8192];    /* and what came after it */
	atomic_int served;
} U;

static size_t read_head(int fd, char *buf, size_t cap)
{
	size_t len = 0;
	while (len < cap - 1) {
		ssize_t r = read(fd, buf + len, cap - 1 - len);
		if (r <= 0)
			break;
		len += (size_t)r;
		buf[len] = '\0';
		if (strstr(buf, "\r\n\r\n"))
			break;
	}
	buf[len] = '\0';
	return len;
}

static void write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w <= 0)
			return;
		p += w;
		n -= (size_t)w;
	}
}

static void *upstream_main(void *arg)
{
	for (;;) {
		int fd = accept(U.lfd, NULL, NULL);
		if (fd < 0)
			return NULL;
		char buf[8192];
		size_t n = read_head(fd, buf, sizeof(buf));
		char *end = strstr(buf, "\r\n\r\n");
		size_t hl = end ? (size_t)(end - buf) + 4 : n;
		snprintf(U.head, sizeof(U.head), "%.*s", (int)hl, buf);
		snprintf(U.body, sizeof(U.body), "%.*s", (int)(n - hl), buf + hl);
		if (U.script == SLOW)
			usleep(1500 * 1000);
		if (U.script == ECHO_AFTER_101) {
			write_all(fd, U.answer, strlen(U.answer));
			ssize_t r;
			while ((r = read(fd, buf, sizeof(buf))) > 0)
				write_all(fd, buf, (size_t)r);
		} else {
			write_all(fd, U.answer, strlen(U.answer));
		}
		atomic_fetch_add(&U.served, 1);
		close(fd);
	}
}

/* --- the server relaying to it ------------------------------------------------------------ */

static struct {
	struct event_base *base;
	struct http_server *srv;
	struct config cfg;
	int port;
	pthread_t thread;
	atomic_int done;
} S;

static int on_head(const struct upstream_answer *a, const struct upstream_reader *r, void *arg)
{
	struct http_ctx *ctx = arg;
	for (size_t i = 0; i < a->nheaders; i++) {
		const char *n, *v;
		upstream_reader_header_at(r, i, &n, &v);
		if (a->upgrade || !upstream_hop_response_header(n, a->connection))
			http_add_header(ctx, n, v);
	}
	return 0;
}

static void on_fail(struct http_ctx *ctx, int status, const char *why, void *arg)
{
	http_reply_error(ctx, status, "the upstream %s", why);
}

static void on_done(void *arg)
{
	atomic_fetch_add(&S.done, 1);
}

static const struct upstream_conn_cbs cbs = { on_head, on_fail, on_done };

static void h_relay(struct http_ctx *ctx)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", U.path);
	struct upstream_request req = { .target = http_target(ctx),
					.upgrade = http_upgrade_requested(ctx) };
	struct upstream_conn_cfg cfg = { .base = S.base,
					 .addr = (struct sockaddr *)&sa,
					 .addrlen = sizeof(sa),
					 .connect_timeout_ms = 2000,
					 .idle_timeout_ms = 500,
					 .request = &req };
	upstream_open(ctx, &cfg, &cbs, ctx);
}

static const struct http_route routes[] = {
	{ HTTP_REQ_GET | HTTP_REQ_POST, "/relay", h_relay, NULL, 1u << 20, HTTP_ROUTE_STREAM_BODY },
};

static void *serve(void *arg)
{
	event_base_dispatch(S.base);
	return NULL;
}

static int setup(void **state)
{
	evthread_use_pthreads();
	snprintf(U.path, sizeof(U.path), "/tmp/upstream-test-%d.sock", (int)getpid());
	unlink(U.path);
	U.lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", U.path);
	assert_int_equal(bind(U.lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(U.lfd, 16), 0);
	pthread_create(&U.thread, NULL, upstream_main, NULL);
	atomic_store(&S.done, 0);
	S.cfg.max_body_bytes = 1 << 20;
	S.base = event_base_new();
	S.srv = http_server_new(S.base, &S.cfg, routes, 1);
	struct err e;
	assert_int_equal(http_server_listen_tcp(S.srv, "127.0.0.1", 0, &S.port, &e), 0);
	pthread_create(&S.thread, NULL, serve, NULL);
	return 0;
}

static bool all_done(void *arg)
{
	return atomic_load(&S.done) >= *(int *)arg;
}

static int teardown(void **state)
{
	shutdown(U.lfd, SHUT_RDWR);
	close(U.lfd);
	pthread_join(U.thread, NULL);
	unlink(U.path);
	usleep(100 * 1000);
	event_base_loopbreak(S.base);
	pthread_join(S.thread, NULL);
	http_server_free(S.srv);
	event_base_loop(S.base, EVLOOP_NONBLOCK);
	event_base_free(S.base);
	return 0;
}

/* --- the client --------------------------------------------------------------------------- */

static int dial(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct timeval tv = { WAIT_TIMEOUT_MS / 1000, 0 };
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)S.port) };
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	assert_int_equal(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	return fd;
}

/* Sends req on a new connection and reads until the server closes it or `until` came. */
static char *exchange(const char *req, const char *until)
{
	int fd = dial();
	write_all(fd, req, strlen(req));
	static char buf[1 << 17];
	size_t len = 0;
	while (len < sizeof(buf) - 1) {
		ssize_t r = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (r <= 0)
			break;
		len += (size_t)r;
		buf[len] = '\0';
		if (until && strstr(buf, until))
			break;
	}
	buf[len] = '\0';
	close(fd);
	return buf;
}

#define GET "GET /relay?x=1 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"

static void test_answer_relayed(void **state)
{
	U.script = ANSWER;
	U.answer = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-App: 1\r\nKeep-Alive: x\r\n"
		   "Connection: close, X-Hop\r\nX-Hop: y\r\n\r\nhello";
	char *r = exchange("POST /relay?x=1 HTTP/1.1\r\nHost: a\r\nKeep-Alive: 5\r\n"
			   "Connection: close, X-Secret\r\nX-Secret: s\r\nX-Kept: k\r\n"
			   "Content-Length: 4\r\n\r\nbody",
			   "hello");
	assert_non_null(strstr(r, "HTTP/1.1 200"));
	assert_non_null(strstr(r, "X-App: 1"));
	assert_null(strstr(r, "X-Hop"));
	assert_non_null(strstr(r, "\r\n\r\nhello"));
	/* What the upstream got: the target, its own framing, no hop-by-hop header. */
	assert_non_null(strstr(U.head, "POST /relay?x=1 HTTP/1.1\r\n"));
	assert_non_null(strstr(U.head, "X-Kept: k\r\n"));
	assert_non_null(strstr(U.head, "Content-Length: 4\r\n"));
	assert_non_null(strstr(U.head, "Connection: close\r\n"));
	assert_null(strstr(U.head, "X-Secret"));
	assert_null(strstr(U.head, "Keep-Alive"));
	int want = 1;
	assert_true(wait_until(all_done, &want, WAIT_TIMEOUT_MS, "the relay to end"));
}

static void test_malformed_and_oversize(void **state)
{
	U.script = ANSWER;
	U.answer = "SSH-2.0-OpenSSH_9.2\r\n";
	char *r = exchange(GET, NULL);
	assert_non_null(strstr(r, "HTTP/1.1 502"));
	assert_non_null(strstr(r, "malformed answer"));
	static char big[80 << 10];
	int n = snprintf(big, sizeof(big), "HTTP/1.1 200 OK\r\nX-Big: ");
	memset(big + n, 'a', 70 << 10);
	strcpy(big + n + (70 << 10), "\r\n\r\n");
	U.answer = big;
	r = exchange(GET, NULL);
	assert_non_null(strstr(r, "HTTP/1.1 502"));
	assert_non_null(strstr(r, "a head too large"));
	int want = 2;
	assert_true(wait_until(all_done, &want, WAIT_TIMEOUT_MS, "the relays to end"));
}

static void test_closes_mid_body(void **state)
{
	U.script = CLOSE_MID_BODY;
	U.answer = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nhalf";
	char *r = exchange(GET, NULL);
	/* The head went out: the reply can only be cut, short of its length. */
	assert_non_null(strstr(r, "HTTP/1.1 200"));
	assert_non_null(strstr(r, "Content-Length: 100"));
	char *body = strstr(r, "\r\n\r\n") + 4;
	assert_true(strlen(body) < 100);
	int want = 1;
	assert_true(wait_until(all_done, &want, WAIT_TIMEOUT_MS, "the relay to end"));
}

static void test_slow_upstream(void **state)
{
	U.script = SLOW;
	U.answer = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
	char *r = exchange(GET, NULL);
	assert_non_null(strstr(r, "HTTP/1.1 504"));
	assert_non_null(strstr(r, "sent nothing for 500 ms"));
	int want = 1;
	assert_true(wait_until(all_done, &want, WAIT_TIMEOUT_MS, "the relay to end"));
}

static void test_nothing_there(void **state)
{
	unlink(U.path);
	char *r = exchange(GET, NULL);
	assert_non_null(strstr(r, "HTTP/1.1 502"));
	assert_non_null(strstr(r, "cannot be reached"));
	int want = 1;
	assert_true(wait_until(all_done, &want, WAIT_TIMEOUT_MS, "the relay to end"));
}

static void test_upgrade_tunnel(void **state)
{
	U.script = ECHO_AFTER_101;
	U.answer =
		"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n";
	int fd = dial();
	const char *req =
		"GET /relay HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: echo\r\n\r\n";
	write_all(fd, req, strlen(req));
	char buf[4096];
	size_t len = read_head(fd, buf, sizeof(buf));
	assert_true(len > 0);
	assert_non_null(strstr(buf, "HTTP/1.1 101"));
	assert_non_null(strstr(buf, "Upgrade: echo"));
	assert_non_null(strstr(U.head, "Upgrade: echo\r\n"));
	write_all(fd, "ping", 4);
	size_t got = 0;
	while (got < 4) {
		ssize_t r = read(fd, buf + got, sizeof(buf) - got);
		assert_true(r > 0);
		got += (size_t)r;
	}
	assert_memory_equal(buf, "ping", 4);
	/* The client's end is passed on; the upstream's end closes the tunnel. */
	shutdown(fd, SHUT_WR);
	assert_int_equal(read(fd, buf, sizeof(buf)), 0);
	close(fd);
	int want = 1;
	assert_true(wait_until(all_done, &want, WAIT_TIMEOUT_MS, "the tunnel to end"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_answer_relayed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_malformed_and_oversize, setup, teardown),
		cmocka_unit_test_setup_teardown(test_closes_mid_body, setup, teardown),
		cmocka_unit_test_setup_teardown(test_slow_upstream, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nothing_there, setup, teardown),
		cmocka_unit_test_setup_teardown(test_upgrade_tunnel, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
