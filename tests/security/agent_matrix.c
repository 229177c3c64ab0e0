/* The misbehaving-agent matrix (agent-matrix.txt) against the guest client, in-process: for
 * every cell, a fake agent (fake_agent.c) with that cell's fault on a socketpair, the client
 * driven as its owners drive it, and the outcome the cell names checked. Every cell is a test
 * case; under ASan a use-after-free or a leak in any path fails it.
 *
 *     test-agent-matrix MATRIX FAKE_AGENT */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "guest/client.h"
#include "guest/proto.h"

/* How long the client waits for an answer before its own timeout fails the operation. */
#define OP_TIMEOUT_MS 700
/* Longest a cell may take before the test gives up on it. */
#define CELL_LIMIT_MS 10000

enum { NFAULTS = 9 };
static const char *const faults[NFAULTS] = {
	"error",    "malformed",  "notobject",    "silent",    "eof",
	"oversize", "overcredit", "wrongchannel", "duplicate",
};

struct cell {
	char op[16], context[16], fault[16];
	bool expect_ok;
	int expect_errnum;
	bool expect_dead;
	char name[64];
};

static const char *fake_agent;

/* --- what happened -------------------------------------------------------------------- */

struct run {
	struct event_base *base;
	struct guest_conn *conn;
	pid_t agent;
	int closes;
	struct err closed;
	bool free_on_failure; /* first/pool: the owner frees the connection from the callback */
	/* the operation under test */
	bool done, ok;
	struct err err;
	/* the final ping */
	bool ping_done, ping_ok;
	/* another operation in flight, which the agent never answers */
	bool other_done;
	struct err other_err;
};

static uint64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void on_close(struct guest_conn *c, const struct err *why, void *arg)
{
	struct run *r = arg;
	r->closes++;
	err_copy(&r->closed, why);
	/* The pool's way: its sandbox is gone, so is the connection. */
	if (r->free_on_failure) {
		guest_conn_free(c);
		r->conn = NULL;
	}
}

static void on_data(struct guest_op *op, uint8_t type, const uint8_t *data, size_t len, void *arg)
{
	/* A consumer that never frees what it got: the agent must stay within its credit. */
}

static void on_event(struct guest_op *op, json_t *event, size_t len, void *arg)
{
	/* Kept like data: never handed back. */
}

static void on_info(struct guest_op *op, json_t *info, void *arg)
{
	/* What a read announces is for the session layer to judge (tests/unit/session). */
}

static void on_done(struct guest_op *op, json_t *result, const struct err *err, void *arg)
{
	struct run *r = arg;
	r->done = true;
	r->ok = result != NULL;
	if (err)
		err_copy(&r->err, err);
	/* The session's way: a sandbox whose agent failed its first request is destroyed,
	 * connection and all, from inside this callback. */
	if (err && r->free_on_failure && r->conn) {
		guest_conn_free(r->conn);
		r->conn = NULL;
	}
}

static void on_ping(struct guest_op *op, json_t *result, const struct err *err, void *arg)
{
	struct run *r = arg;
	r->ping_done = true;
	r->ping_ok = result != NULL;
}

/* As their owners open them: operations with data, and resume and ping, which have none. */
static const struct guest_op_cbs data_cbs = {
	.on_data = on_data, .on_info = on_info, .on_event = on_event, .on_done = on_done
};
static const struct guest_op_cbs control_cbs = { .on_done = on_done };
static const struct guest_op_cbs ping_cbs = { .on_done = on_ping };

static void on_other(struct guest_op *op, json_t *result, const struct err *err, void *arg)
{
	struct run *r = arg;
	r->other_done = true;
	if (err)
		err_copy(&r->other_err, err);
}

static const struct guest_op_cbs other_cbs = { .on_done = on_other };

static void pump_until(struct run *r, bool *flag)
{
	uint64_t deadline = now_ms() + CELL_LIMIT_MS;
	while (!*flag && now_ms() < deadline) {
		struct timeval tv = { .tv_usec = 5000 };
		event_base_loopexit(r->base, &tv);
		event_base_dispatch(r->base);
	}
}

static void pump_for(struct run *r, unsigned ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (suseconds_t)(ms % 1000) * 1000 };
	event_base_loopexit(r->base, &tv);
	event_base_dispatch(r->base);
}

static void start_agent(struct run *r, const char *script)
{
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	r->agent = fork();
	assert_true(r->agent >= 0);
	if (r->agent == 0) {
		dup2(sv[1], 3);
		execl(fake_agent, "fake-agent", "--fd", "3", "--script", script, (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	r->base = event_base_new();
	r->conn = guest_conn_new(r->base, sv[0], on_close, r);
}

static void stop_agent(struct run *r)
{
	guest_conn_free(r->conn);
	r->conn = NULL;
	kill(r->agent, SIGKILL);
	waitpid(r->agent, NULL, 0);
	event_base_free(r->base);
}

/* Starts op `name` with its usual request; write sends a little data and EOF. */
static struct guest_op *start_op(struct run *r, const char *name, const struct guest_op_cbs *cbs)
{
	bool storage = strcmp(name, "resume-storage") == 0;
	bool restored = strcmp(name, "resume-restored") == 0;
	json_t *req = json_pack("{s:s}", "op", storage || restored ? "resume" : name);
	/* A VM made from a save of a running one (protocol 10). */
	if (restored)
		json_object_set_new(req, "restored",
				    json_pack("{s:s, s:s}", "from", "fork", "session", "parent"));
	/* A VM's first resume: the storage its agent mounts before answering. */
	if (storage)
		json_object_set_new(req, "storage",
				    json_pack("{s:s, s:[{s:s, s:s, s:b}]}", "disk",
					      "sandbox-drive0", "volumes", "serial",
					      "sandbox-drive1", "path", "/data", "readOnly", 1));
	if (strcmp(name, "exec") == 0 || strcmp(name, "spawn") == 0)
		json_object_set_new(req, "argv", json_pack("[s]", "true"));
	else if (strcmp(name, "attach") == 0 || strcmp(name, "signal") == 0 ||
		 strcmp(name, "input") == 0 || strcmp(name, "resize") == 0)
		json_object_set_new(req, "pid", json_integer(7));
	else if (strcmp(name, "read") == 0 || strcmp(name, "write") == 0 ||
		 strcmp(name, "list") == 0 || strcmp(name, "stat") == 0 ||
		 strcmp(name, "mkdir") == 0 || strcmp(name, "remove") == 0 ||
		 strcmp(name, "watch") == 0)
		json_object_set_new(req, "path", json_string("file"));
	if (strcmp(name, "rename") == 0) {
		json_object_set_new(req, "path", json_string("file"));
		json_object_set_new(req, "to", json_string("other"));
	}
	struct err e;
	struct guest_op *op = guest_op_start(r->conn, req, cbs, r, &e);
	json_decref(req);
	assert_non_null(op);
	guest_op_set_timeout(op, OP_TIMEOUT_MS, name);
	if (strcmp(name, "write") == 0 || strcmp(name, "input") == 0) {
		static const char data[] = "some bytes for the fake agent";
		guest_op_send(op, data, sizeof(data) - 1);
		guest_op_eof(op);
	}
	return op;
}

/* A ping that must be answered, before or after the fault: bounded by the cell's limit, not
 * by the short timeout that makes the faults' cells quick (a loaded host can take longer than
 * that to start the fake agent). */
static void ping(struct run *r)
{
	struct guest_op *op = start_op(r, "ping", &ping_cbs);
	guest_op_set_timeout(op, CELL_LIMIT_MS, "ping");
	pump_until(r, &r->ping_done);
}

static void run_cell(void **state)
{
	const struct cell *c = *state;
	char script[128];
	const char *phase = strcmp(c->context, "midstream") == 0 ? "midstream"
			    : strcmp(c->context, "after") == 0   ? "after"
								 : "reply";
	bool first = strcmp(c->context, "first") == 0 || strcmp(c->context, "pool") == 0;
	/* Later contexts follow a first ping that is answered, so the fault is on the op's first
	 * occurrence, or on the second ping. */
	int nth = !first && strcmp(c->op, "ping") == 0 ? 2 : 1;
	const char *script_op = strncmp(c->op, "resume-", 7) == 0 ? "resume" : c->op;
	snprintf(script, sizeof(script), "%s#%d %s %s", script_op, nth, phase, c->fault);

	struct run r = { .free_on_failure = first };
	start_agent(&r, script);
	/* What the host gave up on is closed on our side soon, for the count below. */
	guest_conn_set_grace(r.conn, 50);
	if (!first) {
		ping(&r);
		assert_true(r.ping_ok);
		r.ping_done = false;
	}
	bool control = strncmp(c->op, "resume", 6) == 0 || strcmp(c->op, "ping") == 0;
	start_op(&r, c->op, control ? &control_cbs : &data_cbs);
	/* After it, so that the op under test stays its connection's first request. */
	json_t *hang = json_pack("{s:s}", "op", "hang");
	struct err e;
	assert_non_null(guest_op_start(r.conn, hang, &other_cbs, &r, &e));
	json_decref(hang);
	pump_until(&r, &r.done);
	assert_true(r.done);
	if (c->expect_ok) {
		if (!r.ok)
			fail_msg("%s: expected success, got errno %d: %s", c->name, r.err.errnum,
				 r.err.msg);
	} else {
		assert_false(r.ok);
		if (r.err.errnum != c->expect_errnum)
			fail_msg("%s: expected errno %d, got %d: %s", c->name, c->expect_errnum,
				 r.err.errnum, r.err.msg);
	}
	/* Whatever follows the fault (a reply after the result, the rest of a flood) has
	 * arrived once the agent has been given a moment, and the grace of what timed out
	 * has run. */
	if (r.conn)
		pump_for(&r, 120);
	if (c->expect_dead || !r.conn) {
		/* The connection is gone (or, for a connection's first request, its owner freed
		 * it): the other operation failed with it. */
		if (r.conn && guest_conn_alive(r.conn))
			fail_msg("%s: the connection is still alive", c->name);
		if (!r.other_done)
			fail_msg("%s: the other operation did not end with the connection",
				 c->name);
		if (r.conn && r.closes != 1)
			fail_msg("%s: on_close ran %d times", c->name, r.closes);
	} else {
		if (!guest_conn_alive(r.conn))
			fail_msg("%s: the connection died: %s", c->name, r.closed.msg);
		if (r.other_done)
			fail_msg("%s: the other operation ended: %s", c->name, r.other_err.msg);
		if (guest_conn_ops(r.conn) != 1)
			fail_msg("%s: %zu operations open, expected only the other one", c->name,
				 guest_conn_ops(r.conn));
		ping(&r);
		if (!r.ping_ok)
			fail_msg("%s: a ping after the fault was not answered", c->name);
		assert_int_equal(r.closes, 0);
	}
	stop_agent(&r);
}

/* --- the table ------------------------------------------------------------------------ */

static int errnum_of(const char *name)
{
	static const struct {
		const char *name;
		int num;
	} names[] = { { "ENOSPC", ENOSPC },
		      { "EREMOTEIO", EREMOTEIO },
		      { "ETIMEDOUT", ETIMEDOUT },
		      { "ECONNRESET", ECONNRESET } };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(names[i].name, name) == 0)
			return names[i].num;
	fprintf(stderr, "agent-matrix: unknown errno %s\n", name);
	exit(2);
}

/* Reads the matrix; returns its runnable cells (n/a ones are left out) and how many. */
static struct cell *load(const char *path, size_t *ncells, size_t *nna)
{
	FILE *f = fopen(path, "r");
	if (!f) {
		perror(path);
		exit(2);
	}
	struct cell *cells = NULL;
	size_t n = 0;
	char line[512];
	*nna = 0;
	while (fgets(line, sizeof(line), f)) {
		char *hash = strchr(line, '#');
		if (hash)
			*hash = '\0';
		char op[16], ctx[16], v[NFAULTS][32];
		int got = sscanf(line, "%15s %15s %31s %31s %31s %31s %31s %31s %31s %31s %31s", op,
				 ctx, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]);
		if (got <= 0)
			continue;
		if (got != 2 + NFAULTS) {
			fprintf(stderr, "agent-matrix: bad line: %s\n", line);
			exit(2);
		}
		for (int i = 0; i < NFAULTS; i++) {
			if (strcmp(v[i], "n/a") == 0) {
				(*nna)++;
				continue;
			}
			cells = realloc(cells, (n + 1) * sizeof(*cells));
			struct cell *c = &cells[n++];
			memset(c, 0, sizeof(*c));
			snprintf(c->op, sizeof(c->op), "%s", op);
			snprintf(c->context, sizeof(c->context), "%s", ctx);
			snprintf(c->fault, sizeof(c->fault), "%s", faults[i]);
			snprintf(c->name, sizeof(c->name), "%s/%s/%s", op, ctx, faults[i]);
			char *plus = strstr(v[i], "+dead");
			c->expect_dead = plus != NULL;
			if (plus)
				*plus = '\0';
			if (strcmp(v[i], "ok") == 0)
				c->expect_ok = true;
			else
				c->expect_errnum = errnum_of(v[i]);
		}
	}
	fclose(f);
	*ncells = n;
	return cells;
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: test-agent-matrix MATRIX FAKE_AGENT\n");
		return 2;
	}
	fake_agent = argv[2];
	signal(SIGPIPE, SIG_IGN);
	size_t n, nna;
	struct cell *cells = load(argv[1], &n, &nna);
	printf("agent matrix: %zu cells to run, %zu n/a\n", n, nna);
	struct CMUnitTest *tests = calloc(n, sizeof(*tests));
	for (size_t i = 0; i < n; i++) {
		tests[i].name = cells[i].name;
		tests[i].test_func = run_cell;
		tests[i].initial_state = &cells[i];
	}
	int failed = _cmocka_run_group_tests("agent-matrix", tests, n, NULL, NULL);
	free(tests);
	free(cells);
	return failed;
}
