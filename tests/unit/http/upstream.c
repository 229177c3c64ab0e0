/* Tests of src/http/upstream.c's reader of an upstream's answer: what the relays of previews
 * (api/proxy.c) and of cluster forwarding (api/forward.c) make of what an upstream sends.
 * Each answer is fed whole, in pieces of 7 bytes and a byte at a time (a slow upstream), and
 * must come out the same: malformed heads and oversize ones fail with a reason, an upstream
 * that closes mid-body fails, one whose body ends with the connection does not, informational
 * answers are dropped, a 101 stops at its head with the tunnel's bytes left over.
 *
 * ASan finds leaks and overruns: the unit suite runs in build-asan/. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "http/upstream.h"

struct seen {
	int status;
	int64_t length;
	bool upgrade;
	char headers[4096];
	char body[65536];
	size_t body_len;
	int heads;
	bool refuse;
};

/* What a run ends with. */
enum outcome { DONE, FAILED, MORE };

struct run {
	struct seen seen; /* first: the callbacks' arg is both */
	struct upstream_reader r;
	enum outcome outcome;
	size_t used; /* bytes the reader took */
};

static int on_head(const struct upstream_answer *a, void *arg)
{
	struct seen *s = arg;
	struct upstream_reader *r = &((struct run *)arg)->r;
	s->heads++;
	s->status = a->status;
	s->length = a->length;
	s->upgrade = a->upgrade;
	for (size_t i = 0; i < a->nheaders; i++) {
		const char *n, *v;
		upstream_reader_header_at(r, i, &n, &v);
		if (!upstream_hop_response_header(n, a->connection)) {
			size_t l = strlen(s->headers);
			snprintf(s->headers + l, sizeof(s->headers) - l, "%s=%s;", n, v);
		}
	}
	return s->refuse ? -1 : 0;
}

static int on_body(const char *data, size_t len, void *arg)
{
	struct seen *s = arg;
	assert_true(s->body_len + len <= sizeof(s->body));
	memcpy(s->body + s->body_len, data, len);
	s->body_len += len;
	return 0;
}

static const struct upstream_reader_cbs cbs = { .on_head = on_head, .on_body = on_body };

static void run(struct run *x, const char *data, size_t len, size_t piece, bool eof,
		bool head_request, bool upgrade, bool refuse)
{
	memset(x, 0, sizeof(*x));
	x->seen.refuse = refuse;
	upstream_reader_init(&x->r, &cbs, &x->seen, head_request, upgrade);
	size_t off = 0;
	x->outcome = MORE;
	while (off < len && !x->r.done) {
		size_t n = len - off < piece ? len - off : piece;
		ssize_t used = upstream_reader_feed(&x->r, data + off, n);
		if (used < 0) {
			x->outcome = FAILED;
			break;
		}
		assert_true((size_t)used <= n);
		off += (size_t)used;
		if ((size_t)used < n)
			assert_true(x->r.done);
	}
	x->used = off;
	if (x->outcome != FAILED) {
		if (x->r.done)
			x->outcome = DONE;
		else if (eof)
			x->outcome = upstream_reader_eof(&x->r) == 0 ? DONE : FAILED;
	}
	if (x->outcome == FAILED)
		assert_true(x->r.failed && x->r.why[0]);
	upstream_reader_free(&x->r);
}

/* Runs the answer whole, in pieces of 7 and a byte at a time: the same each way. */
static struct run *check(const char *data, size_t len, bool eof, bool head_request, bool upgrade,
			 bool refuse, enum outcome want)
{
	static struct run first, x;
	size_t pieces[] = { len ? len : 1, 7, 1 };
	for (size_t i = 0; i < 3; i++) {
		struct run *r = i == 0 ? &first : &x;
		run(r, data, len, pieces[i], eof, head_request, upgrade, refuse);
		assert_int_equal(r->outcome, want);
		if (i) {
			assert_int_equal(x.seen.status, first.seen.status);
			assert_int_equal(x.seen.heads, first.seen.heads);
			assert_string_equal(x.seen.headers, first.seen.headers);
			assert_int_equal(x.seen.body_len, first.seen.body_len);
			assert_memory_equal(x.seen.body, first.seen.body, x.seen.body_len);
			if (want != FAILED) /* where a failure is seen depends on the pieces */
				assert_int_equal(x.used, first.used);
		}
	}
	return &first;
}

#define CHECK(s, eof, want) check(s, sizeof(s) - 1, eof, false, false, false, want)

static void test_length(void **state)
{
	struct run *r = CHECK("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n"
			      "Connection: close, X-Hop\r\nX-Hop: 1\r\nDate: x\r\n\r\nhelloEXTRA",
			      false, DONE);
	assert_int_equal(r->seen.status, 200);
	assert_int_equal(r->seen.length, 5);
	assert_string_equal(r->seen.headers, "Content-Type=text/plain;");
	assert_int_equal(r->seen.body_len, 5);
	assert_memory_equal(r->seen.body, "hello", 5);
	assert_int_equal(r->used, sizeof("HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
					 "Content-Length: 5\r\nConnection: close, X-Hop\r\n"
					 "X-Hop: 1\r\nDate: x\r\n\r\nhello") -
					  1);
}

static void test_chunked_and_to_eof(void **state)
{
	struct run *r = CHECK("HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n"
			      "3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nTrailer: x\r\n\r\n",
			      false, DONE);
	assert_int_equal(r->seen.length, HTTP_LENGTH_CHUNKED);
	assert_int_equal(r->seen.body_len, 5);
	/* No framing: the body ends with the connection, re-framed chunked toward the client. */
	r = CHECK("HTTP/1.1 200 OK\r\n\r\nto the end", true, DONE);
	assert_int_equal(r->seen.length, HTTP_LENGTH_CHUNKED);
	assert_int_equal(r->seen.body_len, 10);
	/* Without the end of file, it is not whole yet. */
	CHECK("HTTP/1.1 200 OK\r\n\r\nto the end", false, MORE);
}

static void test_no_body(void **state)
{
	struct run *r = CHECK("HTTP/1.1 204 No Content\r\nX-A: b\r\n\r\n", false, DONE);
	assert_int_equal(r->seen.length, HTTP_LENGTH_NONE);
	r = CHECK("HTTP/1.1 304 Not Modified\r\n\r\n", false, DONE);
	assert_int_equal(r->seen.length, HTTP_LENGTH_NONE);
	/* A HEAD's answer: its length told, no body read. */
	const char head[] = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n";
	r = check(head, sizeof(head) - 1, false, true, false, false, DONE);
	assert_int_equal(r->seen.length, 100);
	assert_int_equal(r->seen.body_len, 0);
	const char head2[] = "HTTP/1.1 200 OK\r\n\r\n";
	r = check(head2, sizeof(head2) - 1, false, true, false, false, DONE);
	assert_int_equal(r->seen.length, HTTP_LENGTH_NONE);
}

static void test_informational(void **state)
{
	struct run *r =
		CHECK("HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: a\r\n\r\n"
		      "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Final: 1\r\n\r\nok",
		      false, DONE);
	assert_int_equal(r->seen.status, 200);
	assert_int_equal(r->seen.heads, 1);
	assert_string_equal(r->seen.headers, "X-Final=1;");
	/* An upstream that sends only informational answers is refused after 16. */
	char many[1024] = "";
	for (int i = 0; i < 17; i++)
		strcat(many, "HTTP/1.1 100 Continue\r\n\r\n");
	check(many, strlen(many), false, false, false, false, FAILED);
	/* One that closes after them gave no answer. */
	CHECK("HTTP/1.1 100 Continue\r\n\r\n", true, FAILED);
}

static void test_malformed(void **state)
{
	CHECK("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello", false,
	      FAILED);
	CHECK("SSH-2.0-OpenSSH_9.2\r\n", false, FAILED);
	CHECK("HTTP/1.1 2000 Far\r\n\r\n", false, FAILED);
	CHECK("HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n", false, FAILED);
	CHECK("HTTP/1.1 200 OK\r\nName : x\r\n\r\n", false, FAILED);
	CHECK("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", false, FAILED);
	/* Nothing at all before the end. */
	CHECK("", true, FAILED);
	/* A refused head. */
	const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n";
	check(ok, sizeof(ok) - 1, false, false, false, true, FAILED);
}

static void test_oversize(void **state)
{
	/* A head past UPSTREAM_MAX_HEAD, in one value and in many headers. */
	size_t big = UPSTREAM_MAX_HEAD + 100;
	char *s = malloc(big + 100);
	if (!s)
		abort();
	int n = sprintf(s, "HTTP/1.1 200 OK\r\nX-Big: ");
	memset(s + n, 'a', big);
	strcpy(s + n + big, "\r\n\r\n");
	struct run *r = check(s, strlen(s), false, false, false, false, FAILED);
	assert_string_equal(r->r.why, "a head too large");
	/* More headers than UPSTREAM_MAX_HEADERS. */
	n = sprintf(s, "HTTP/1.1 200 OK\r\n");
	for (int i = 0; i <= UPSTREAM_MAX_HEADERS; i++)
		n += sprintf(s + n, "X-%d: v\r\n", i);
	strcpy(s + n, "\r\n");
	check(s, strlen(s), false, false, false, false, FAILED);
	/* Just under the bound is fine. */
	n = sprintf(s, "HTTP/1.1 200 OK\r\nX-Big: ");
	memset(s + n, 'a', 60000);
	strcpy(s + n + 60000, "\r\nContent-Length: 0\r\n\r\n");
	check(s, strlen(s), false, false, false, false, DONE);
	free(s);
}

static void test_closes_mid_body(void **state)
{
	struct run *r = CHECK("HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nhalf", true, FAILED);
	assert_string_equal(r->r.why, "the connection closed before the answer was complete");
	CHECK("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab", true, FAILED);
	CHECK("HTTP/1.1 200 OK\r\nContent-Le", true, FAILED);
}

static void test_upgrade(void **state)
{
	const char s[] = "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
			 "Connection: Upgrade\r\nSec-WebSocket-Accept: x\r\n\r\n\x81\x02hi";
	struct run *r = check(s, sizeof(s) - 1, false, false, true, false, DONE);
	assert_true(r->seen.upgrade);
	assert_int_equal(r->seen.status, 101);
	/* The frame after the head is the tunnel's: not taken. */
	assert_int_equal(r->used, sizeof(s) - 1 - 4);
	/* Asked for nothing: refused. */
	check(s, sizeof(s) - 1, false, false, false, false, FAILED);
	/* A 101 without Upgrade headers still ends the reader at its head. */
	const char bare[] = "HTTP/1.1 101 Switching Protocols\r\n\r\nraw";
	r = check(bare, sizeof(bare) - 1, false, false, true, false, DONE);
	assert_true(r->seen.upgrade);
	assert_int_equal(r->used, sizeof(bare) - 1 - 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_length),          cmocka_unit_test(test_chunked_and_to_eof),
		cmocka_unit_test(test_no_body),         cmocka_unit_test(test_informational),
		cmocka_unit_test(test_malformed),       cmocka_unit_test(test_oversize),
		cmocka_unit_test(test_closes_mid_body), cmocka_unit_test(test_upgrade),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
