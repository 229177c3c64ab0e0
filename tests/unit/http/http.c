/* Tests of src/http/http.c: a real evhttp server on loopback driven by a raw socket client,
 * checking routing, JSON errors (never HTML), body limits and URI redaction. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "http/http.h"

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

static const struct http_route routes[] = {
	{ EVHTTP_REQ_POST, "/things/:id/echo", h_echo, NULL },
	{ EVHTTP_REQ_GET, "/stream", h_stream, NULL },
};

struct server {
	struct event_base *base;
	struct http_server *srv;
	struct config cfg;
	int port;
	pthread_t thread;
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
	struct server *s = calloc(1, sizeof(*s));
	s->cfg.max_body_bytes = 1024;
	s->base = event_base_new();
	s->srv = http_server_new(s->base, &s->cfg, routes, 2);
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
	/* libevent answers with version 0.0 when it could not parse one. */
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
		cmocka_unit_test(test_redact),
		cmocka_unit_test(test_status_mapping),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
