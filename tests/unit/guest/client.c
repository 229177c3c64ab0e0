/* Tests of src/guest/client.c: the liveness pings of a connection and the checks of EVENT
 * frames, against a scripted agent on the other end of a socketpair. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "guest/client.h"
#include "guest/event.h"
#include "guest/proto.h"

/* How long a test waits for something that should happen within a few intervals. */
#define WAIT_MS 5000

struct fixture {
	struct event_base *base;
	struct guest_conn *conn;
	int agent; /* the agent's end */
	int closes;
	struct err closed;
	bool free_on_close; /* the owner frees the connection from on_close, as the pool does */
	int dones;
	struct err done_err;
	bool done_ok;
};

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void on_close(struct guest_conn *c, const struct err *why, void *arg)
{
	struct fixture *f = arg;
	f->closes++;
	err_copy(&f->closed, why);
	if (f->free_on_close) {
		guest_conn_free(c);
		f->conn = NULL;
	}
}

static void on_done(struct guest_op *op, json_t *result, const struct err *err, void *arg)
{
	struct fixture *f = arg;
	f->dones++;
	f->done_ok = result != NULL;
	if (err)
		err_copy(&f->done_err, err);
}

static const struct guest_op_cbs op_cbs = { .on_done = on_done };

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	f->base = event_base_new();
	f->conn = guest_conn_new(f->base, sv[0], on_close, f);
	f->agent = sv[1];
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	guest_conn_free(f->conn);
	close(f->agent);
	event_base_free(f->base);
	free(f);
	return 0;
}

/* Runs the loop for about ms. */
static void pump(struct fixture *f, unsigned ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (suseconds_t)(ms % 1000) * 1000 };
	event_base_loopexit(f->base, &tv);
	event_base_dispatch(f->base);
}

/* Reads exactly n bytes from the agent's end, which has them (poll said so). */
static void read_all(int fd, uint8_t *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, buf + got, n - got);
		assert_true(r > 0);
		got += (size_t)r;
	}
}

/* Runs the loop until the host sends the agent a frame, for at most WAIT_MS; returns false
 * when none came. The payload (NUL-terminated) goes to payload. */
static bool next_frame(struct fixture *f, uint8_t *type, uint32_t *channel, char *payload,
		       size_t max)
{
	uint64_t deadline = now_ms() + WAIT_MS;
	while (now_ms() < deadline) {
		struct pollfd p = { .fd = f->agent, .events = POLLIN };
		if (poll(&p, 1, 0) == 1) {
			uint8_t h[GUEST_HDR_LEN];
			read_all(f->agent, h, sizeof(h));
			uint32_t len = ((uint32_t)h[0] << 24) | ((uint32_t)h[1] << 16) |
				       ((uint32_t)h[2] << 8) | h[3];
			assert_true(len < max);
			read_all(f->agent, (uint8_t *)payload, len);
			payload[len] = '\0';
			*type = h[4];
			*channel = ((uint32_t)h[5] << 24) | ((uint32_t)h[6] << 16) |
				   ((uint32_t)h[7] << 8) | h[8];
			return true;
		}
		pump(f, 5);
	}
	return false;
}

/* The agent's side: one frame toward the host. */
static void agent_send(struct fixture *f, uint8_t type, uint32_t channel, const char *json)
{
	uint8_t h[GUEST_HDR_LEN];
	size_t n = strlen(json);
	guest_frame_header(h, type, channel, (uint32_t)n);
	assert_int_equal(write(f->agent, h, sizeof(h)), (ssize_t)sizeof(h));
	assert_int_equal(write(f->agent, json, n), (ssize_t)n);
}

/* Expects a ping request and returns its channel. */
static uint32_t expect_ping(struct fixture *f)
{
	uint8_t type;
	uint32_t channel;
	char payload[256];
	assert_true(next_frame(f, &type, &channel, payload, sizeof(payload)));
	assert_int_equal(type, GUEST_REQUEST);
	assert_string_equal(payload, "{\"op\":\"ping\"}");
	return channel;
}

static void wait_closed(struct fixture *f)
{
	uint64_t deadline = now_ms() + WAIT_MS;
	while (f->closes == 0 && now_ms() < deadline)
		pump(f, 5);
	assert_int_equal(f->closes, 1);
}

static void test_answered_pings_keep_the_connection(void **state)
{
	struct fixture *f = *state;
	guest_conn_set_liveness(f->conn, 20, 200);
	uint32_t first = expect_ping(f);
	agent_send(f, GUEST_RESULT, first, "{}");
	uint32_t second = expect_ping(f);
	assert_true(second > first);
	agent_send(f, GUEST_RESULT, second, "{\"pong\":true}");
	/* Several more rounds, each answered: the connection stays. */
	for (int i = 0; i < 3; i++)
		agent_send(f, GUEST_RESULT, expect_ping(f), "{}");
	assert_true(guest_conn_alive(f->conn));
	assert_int_equal(f->closes, 0);
}

static void test_an_error_answer_shows_the_agent_is_there(void **state)
{
	struct fixture *f = *state;
	guest_conn_set_liveness(f->conn, 20, 200);
	agent_send(f, GUEST_ERROR, expect_ping(f), "{\"error\":\"busy\",\"code\":\"EAGAIN\"}");
	agent_send(f, GUEST_RESULT, expect_ping(f), "{}");
	assert_true(guest_conn_alive(f->conn));
	assert_int_equal(f->closes, 0);
}

static void test_a_silent_agent_fails_the_connection_and_its_operations(void **state)
{
	struct fixture *f = *state;
	/* An operation with no timeout of its own: without liveness it would wait forever. */
	json_t *req = json_pack("{s:s}", "op", "exec");
	struct err e;
	struct guest_op *op = guest_op_start(f->conn, req, &op_cbs, f, &e);
	json_decref(req);
	assert_non_null(op);
	guest_conn_set_liveness(f->conn, 20, 100);
	uint8_t type;
	uint32_t channel;
	char payload[256];
	assert_true(next_frame(f, &type, &channel, payload, sizeof(payload)));
	assert_string_equal(payload, "{\"op\":\"exec\"}");
	expect_ping(f); /* never answered */
	wait_closed(f);
	assert_int_equal(f->closed.errnum, ETIMEDOUT);
	assert_non_null(strstr(f->closed.msg, "liveness ping"));
	assert_false(guest_conn_alive(f->conn));
	assert_int_equal(f->dones, 1);
	assert_false(f->done_ok);
	assert_int_equal(f->done_err.errnum, ETIMEDOUT);
	/* Nothing more happens afterwards: no second close, no more pings. */
	pump(f, 100);
	assert_int_equal(f->closes, 1);
}

static void test_the_owner_may_free_the_connection_when_told(void **state)
{
	struct fixture *f = *state;
	f->free_on_close = true;
	guest_conn_set_liveness(f->conn, 10, 50);
	expect_ping(f);
	wait_closed(f);
	assert_null(f->conn);
	pump(f, 50);
	assert_int_equal(f->closes, 1);
}

static void test_no_pings_when_turned_off(void **state)
{
	struct fixture *f = *state;
	guest_conn_set_liveness(f->conn, 10, 50);
	guest_conn_set_liveness(f->conn, 0, 50);
	pump(f, 200);
	struct pollfd p = { .fd = f->agent, .events = POLLIN };
	assert_int_equal(poll(&p, 1, 0), 0);
	assert_true(guest_conn_alive(f->conn));
}

static void test_the_agent_hanging_up_stops_the_pings(void **state)
{
	struct fixture *f = *state;
	guest_conn_set_liveness(f->conn, 10, 1000);
	expect_ping(f);
	shutdown(f->agent, SHUT_WR);
	wait_closed(f);
	assert_int_equal(f->closed.errnum, ECONNRESET);
	pump(f, 100);
	assert_int_equal(f->closes, 1);
}

static void test_a_flood_for_closed_channels_ends_the_connection(void **state)
{
	struct fixture *f = *state;
	/* A few frames for channels that are not open are dropped (a late reply after a
	 * cancel); thousands are a violation, not a reason to keep the loop busy. */
	for (int i = 0; i < 8; i++)
		agent_send(f, GUEST_STDOUT, 1000 + (uint32_t)i, "late");
	pump(f, 50);
	assert_true(guest_conn_alive(f->conn));
	/* Without blocking: the host stops reading once it has had enough. */
	fcntl(f->agent, F_SETFL, fcntl(f->agent, F_GETFL) | O_NONBLOCK);
	uint8_t frame[GUEST_HDR_LEN + 2];
	guest_frame_header(frame, GUEST_RESULT, 999, 2);
	memcpy(frame + GUEST_HDR_LEN, "{}", 2);
	uint64_t deadline = now_ms() + WAIT_MS;
	for (int sent = 0; sent < 6000 && f->closes == 0 && now_ms() < deadline;) {
		ssize_t k = write(f->agent, frame, sizeof(frame));
		if (k == (ssize_t)sizeof(frame))
			sent++;
		else
			pump(f, 5); /* a partial frame is fine: the rest never matters */
	}
	wait_closed(f);
	assert_int_equal(f->closed.errnum, EREMOTEIO);
	assert_non_null(strstr(f->closed.msg, "not open"));
}

static void test_a_timed_out_operation_is_closed_after_the_grace(void **state)
{
	struct fixture *f = *state;
	guest_conn_set_grace(f->conn, 50);
	json_t *req = json_pack("{s:s}", "op", "exec");
	struct err e;
	struct guest_op *op = guest_op_start(f->conn, req, &op_cbs, f, &e);
	json_decref(req);
	/* Twice the agent's credit: half of it stays queued on our side. */
	size_t n = 2 * GUEST_WINDOW_INITIAL;
	char *data = calloc(1, n);
	guest_op_send(op, data, n);
	free(data);
	assert_true(guest_op_queued(op) >= GUEST_WINDOW_INITIAL);
	guest_op_set_timeout(op, 20, "exec");
	uint64_t deadline = now_ms() + WAIT_MS;
	while (f->dones == 0 && now_ms() < deadline)
		pump(f, 5);
	assert_int_equal(f->done_err.errnum, ETIMEDOUT);
	/* Given up: nothing of it stays queued, and after the grace it is closed. */
	assert_int_equal(guest_op_queued(op), 0);
	assert_int_equal(guest_conn_ops(f->conn), 1);
	pump(f, 150);
	assert_int_equal(guest_conn_ops(f->conn), 0);
	/* A reply coming after that is dropped; the connection stays. */
	agent_send(f, GUEST_RESULT, 1, "{}");
	pump(f, 50);
	assert_true(guest_conn_alive(f->conn));
	assert_int_equal(f->dones, 1);
}

/* --- EVENT frames: what a watch's agent sends, checked before anything else sees it ---- */

struct event_rec {
	int events;
	size_t bytes;
	char last[256];
};

/* As a watch's consumer does (session/ops.c): each event checked (guest_event_check), one
 * that is not a watch's a violation; only the checked copy is kept. */
static void rec_event(struct guest_op *op, json_t *ev, size_t len, void *arg)
{
	struct event_rec *r = arg;
	json_t *ok;
	struct err e;
	if (guest_event_check(ev, len, &ok, &e) < 0) {
		guest_op_violation(op, e.msg);
		return;
	}
	r->events++;
	r->bytes += len;
	char *t = json_dumps(ok, JSON_COMPACT | JSON_SORT_KEYS);
	snprintf(r->last, sizeof(r->last), "%s", t);
	free(t);
	json_decref(ok);
}

static void rec_done(struct guest_op *op, json_t *result, const struct err *err, void *arg)
{
}

static const struct guest_op_cbs watch_cbs = { .on_event = rec_event, .on_done = rec_done };

static void agent_send_bytes(struct fixture *f, uint8_t type, uint32_t channel, const void *p,
			     size_t n)
{
	uint8_t *buf = malloc(GUEST_HDR_LEN + n);
	guest_frame_header(buf, type, channel, (uint32_t)n);
	memcpy(buf + GUEST_HDR_LEN, p, n);
	size_t off = 0;
	uint64_t deadline = now_ms() + WAIT_MS;
	/* Until it is all written, or the host has stopped reading for good. */
	while (off < GUEST_HDR_LEN + n && f->closes == 0 && now_ms() < deadline) {
		ssize_t k = write(f->agent, buf + off, GUEST_HDR_LEN + n - off);
		if (k > 0)
			off += (size_t)k;
		else
			pump(f, 5);
	}
	free(buf);
}

static void test_watch_events_reach_their_consumer_checked(void **state)
{
	struct fixture *f = *state;
	struct event_rec r = { 0 };
	json_t *req = json_pack("{s:s, s:s}", "op", "watch", "path", "d");
	struct err e;
	struct guest_op *op = guest_op_start(f->conn, req, &watch_cbs, &r, &e);
	json_decref(req);
	assert_non_null(op);
	/* Extra members are not passed on: the consumer gets what was checked. */
	agent_send(f, GUEST_EVENT, 1,
		   "{\"type\":\"rename\",\"path\":\"d/b\",\"dir\":false,\"from\":\"d/a\"}");
	agent_send(f, GUEST_EVENT, 1, "{\"type\":\"overflow\"}");
	uint64_t deadline = now_ms() + WAIT_MS;
	while (r.events < 2 && now_ms() < deadline)
		pump(f, 5);
	assert_int_equal(r.events, 2);
	assert_string_equal(r.last, "{\"type\":\"overflow\"}");
	assert_true(guest_conn_alive(f->conn));
}

/* Each of these ends the connection as a protocol violation. */
static void test_bad_watch_events_end_the_connection(void **state)
{
	static char big[GUEST_EVENT_MAX + 64];
	memset(big, ' ', sizeof(big));
	memcpy(big, "{\"type\":\"overflow\"", 19);
	big[sizeof(big) - 1] = '}';
	const struct {
		const char *what;
		const char *payload;
		size_t len;
		bool plain_op; /* on an operation that has no events (an exec) */
	} cases[] = {
		{ "oversize", big, sizeof(big), false },
		{ "not JSON", "{\"type\": create", 0, false },
		{ "not an object", "[1]", 0, false },
		{ "unknown type", "{\"type\":\"explode\",\"path\":\"a\",\"dir\":false}", 0, false },
		{ "escaping path", "{\"type\":\"create\",\"path\":\"../x\",\"dir\":false}", 0,
		  false },
		{ "absolute path", "{\"type\":\"create\",\"path\":\"/etc\",\"dir\":false}", 0,
		  false },
		{ "dot component", "{\"type\":\"write\",\"path\":\"a/./b\",\"dir\":false}", 0,
		  false },
		{ "no dir", "{\"type\":\"create\",\"path\":\"a\"}", 0, false },
		{ "from outside a rename",
		  "{\"type\":\"create\",\"path\":\"a\",\"dir\":false,\"from\":\"b\"}", 0, false },
		{ "extra member", "{\"type\":\"chmod\",\"path\":\"a\",\"dir\":true,\"x\":1}", 0,
		  false },
		{ "NUL in a path", "{\"type\":\"create\",\"path\":\"a\\u0000b\",\"dir\":false}", 0,
		  false },
		{ "event of an exec", "{\"type\":\"overflow\"}", 0, true },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		void *st;
		setup(&st);
		struct fixture *f = st;
		struct event_rec r = { 0 };
		json_t *req = json_pack("{s:s}", "op", cases[i].plain_op ? "exec" : "watch");
		struct err e;
		assert_non_null(guest_op_start(f->conn, req,
					       cases[i].plain_op ? &op_cbs : &watch_cbs,
					       cases[i].plain_op ? (void *)f : (void *)&r, &e));
		json_decref(req);
		size_t n = cases[i].len ? cases[i].len : strlen(cases[i].payload);
		agent_send_bytes(f, GUEST_EVENT, 1, cases[i].payload, n);
		wait_closed(f);
		if (f->closed.errnum != EREMOTEIO)
			fail_msg("%s: errno %d (%s)", cases[i].what, f->closed.errnum,
				 f->closed.msg);
		assert_int_equal(r.events, 0);
		teardown(&st);
	}
}

/* Events count against the channel's credit like data. */
static void test_watch_events_beyond_the_credit_end_the_connection(void **state)
{
	struct fixture *f = *state;
	struct event_rec r = { 0 };
	json_t *req = json_pack("{s:s}", "op", "watch");
	struct err e;
	assert_non_null(guest_op_start(f->conn, req, &watch_cbs, &r, &e));
	json_decref(req);
	const char *ev = "{\"type\":\"overflow\"}";
	size_t n = strlen(ev);
	fcntl(f->agent, F_SETFL, fcntl(f->agent, F_GETFL) | O_NONBLOCK);
	for (size_t sent = 0; sent <= GUEST_WINDOW_INITIAL + n && f->closes == 0; sent += n)
		agent_send_bytes(f, GUEST_EVENT, 1, ev, n);
	wait_closed(f);
	assert_int_equal(f->closed.errnum, EREMOTEIO);
	assert_true(r.bytes <= GUEST_WINDOW_INITIAL);
}

static void test_agent_error_codes(void **state)
{
	assert_int_equal(guest_code_errno("ENOENT"), ENOENT);
	assert_int_equal(guest_code_errno("ESCAPE"), EXDEV);
	assert_int_equal(guest_code_errno("EDQUOT"), EDQUOT);
	assert_int_equal(guest_code_errno("ENOSUCHTHING"), EIO);
	assert_int_equal(guest_code_errno(NULL), EIO);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_answered_pings_keep_the_connection, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_an_error_answer_shows_the_agent_is_there,
						setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_a_silent_agent_fails_the_connection_and_its_operations, setup,
			teardown),
		cmocka_unit_test_setup_teardown(test_the_owner_may_free_the_connection_when_told,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_pings_when_turned_off, setup, teardown),
		cmocka_unit_test_setup_teardown(test_the_agent_hanging_up_stops_the_pings, setup,
						teardown),
		cmocka_unit_test_setup_teardown(
			test_a_flood_for_closed_channels_ends_the_connection, setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_a_timed_out_operation_is_closed_after_the_grace, setup, teardown),
		cmocka_unit_test_setup_teardown(test_watch_events_reach_their_consumer_checked,
						setup, teardown),
		cmocka_unit_test(test_bad_watch_events_end_the_connection),
		cmocka_unit_test_setup_teardown(
			test_watch_events_beyond_the_credit_end_the_connection, setup, teardown),
		cmocka_unit_test(test_agent_error_codes),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
