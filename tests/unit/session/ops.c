/* Tests of src/session/ops.c, and through it of the session table and a session's life
 * (session.c, sandbox.c): every operation against the fake driver (fake_driver.h), whose
 * sandboxes are the real sandbox-agent or the scripted fake agent on a socketpair.
 *
 * The session layer is one per process, so the whole file shares one: started before the
 * first test, shut down after the last. Each test leaves nothing behind (its teardown
 * destroys every session and waits for every sandbox to be gone), and waits only on what it
 * can observe, with a deadline that fails it.
 *
 *     test-session-ops SANDBOX_AGENT FAKE_AGENT
 *
 * SESSION_OPS_FILTER=PATTERN runs only the cases whose names match (cmocka's filter, `*`
 * as a wildcard). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <event2/event.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "config.h"
#include "fake_driver.h"
#include "guest/proto.h"
#include "loop.h"
#include "session/ops.h"
#include "session/session.h"
#include "store/store.h"
#include "util/cleanup.h"
#include "util/text.h"

#include "../wait.h"

static struct {
	char dir[64];
	struct event_base *base;
	struct config cfg;
	struct config defaults; /* what tests may change in cfg, restored after each */
	bool shut_down;
} T;

struct loop_goal {
	bool (*cond)(const void *arg);
	const void *arg;
};

/* Whether the goal is reached, after a turn of the loop (what is ready runs) if it was not. */
static bool loop_step(void *arg)
{
	const struct loop_goal *g = arg;
	if (g->cond(g->arg))
		return true;
	event_base_loop(T.base, EVLOOP_NONBLOCK);
	return g->cond(g->arg);
}

/* Runs the loop until cond(arg) holds, failing the test past wait.h's deadline. */
static void loop_until(bool (*cond)(const void *arg), const void *arg, const char *what)
{
	struct loop_goal g = { cond, arg };
	assert_true(wait_until(loop_step, &g, WAIT_TIMEOUT_MS, what));
}

struct count_goal {
	const int *n;
	int want;
};

static bool count_reached(const void *arg)
{
	const struct count_goal *g = arg;
	return *g->n >= g->want;
}

/* Until *n reaches want: a callback counted that many times. */
static void wait_count(const int *n, int want, const char *what)
{
	struct count_goal g = { n, want };
	loop_until(count_reached, &g, what);
}

struct session_name {
	const char *owner, *id;
};

static bool session_ready(const char *owner, const char *id)
{
	struct session *s = session_find(owner, id);
	return s && s->state == SESSION_READY;
}

static bool is_ready(const void *arg)
{
	const struct session_name *n = arg;
	return session_ready(n->owner, n->id);
}

static bool is_gone(const void *arg)
{
	const struct session_name *n = arg;
	return !session_find(n->owner, n->id);
}

/* Whether an operation runs in the session. */
static bool is_running(const void *arg)
{
	const struct session_name *n = arg;
	struct session *s = session_find(n->owner, n->id);
	return s && s->running > 0;
}

static void wait_ready(const char *owner, const char *id)
{
	struct session_name n = { owner, id };
	loop_until(is_ready, &n, "the session to be ready");
}

static void wait_gone(const char *owner, const char *id)
{
	struct session_name n = { owner, id };
	loop_until(is_gone, &n, "the session to go");
}

static void wait_running(const char *owner, const char *id)
{
	struct session_name n = { owner, id };
	loop_until(is_running, &n, "an operation to run in the session");
}

static struct fake_counts counts(void)
{
	struct fake_counts c;
	fake_driver_counts(&c);
	return c;
}

static void count_record(const char *sandbox_id, const char *driver, json_t *record, void *arg)
{
	(*(unsigned *)arg)++;
}

/* The sandboxes recorded for crash recovery: each from its session's start until it is
 * destroyed, on the loop, once the driver is done with it. */
static unsigned recorded_sandboxes(void)
{
	unsigned n = 0;
	struct err e;
	assert_int_equal(store_sandbox_foreach(count_record, &n, &e), 0);
	return n;
}

/* Every sandbox handed out was destroyed, and its record is gone. */
static bool settled(const void *arg)
{
	struct fake_counts c = counts();
	return c.created == c.destroyed && c.held == 0 && recorded_sandboxes() == 0;
}

static void wait_settled(void)
{
	loop_until(settled, NULL, "every sandbox to be destroyed");
}

static bool created_reached(const void *arg)
{
	return counts().created >= *(const unsigned *)arg;
}

static bool destroyed_reached(const void *arg)
{
	return counts().destroyed >= *(const unsigned *)arg;
}

static bool held_after(const void *arg)
{
	struct fake_counts c = counts();
	return c.calls >= *(const unsigned *)arg && c.held > 0;
}

/* Until the driver made (or destroyed) n sandboxes in all. */
static void wait_created(unsigned n)
{
	loop_until(created_reached, &n, "the driver to make a sandbox");
}

static void wait_destroyed(unsigned n)
{
	loop_until(destroyed_reached, &n, "the driver to destroy a sandbox");
}

/* Until create() was entered `calls` times in all and is held there. */
static void wait_held(unsigned calls)
{
	loop_until(held_after, &calls, "the driver's create() to be held");
}

static void plan_real(void)
{
	struct fake_plan p = { 0 };
	fake_driver_plan(&p);
}

static void plan_script(const char *script)
{
	struct fake_plan p = { .script = script };
	fake_driver_plan(&p);
}

static struct ops_target target(const char *owner, const char *id)
{
	return (struct ops_target){ .owner = owner, .session_id = id };
}

static struct ops_target admin(const char *id)
{
	return (struct ops_target){ .owner = "admin", .session_id = id, .any_owner = true };
}

/* --- recorders ----------------------------------------------------------------------- */

/* What the callbacks of the tests' operations record into lives until the test's teardown:
 * a test that failed midway leaves operations whose callbacks run while it destroys their
 * sessions. */
static struct {
	void **items;
	size_t n;
} recorders;

static void *recorder_new(size_t size)
{
	void *r = xcalloc(1, size);
	recorders.items = xrealloc(recorders.items, (recorders.n + 1) * sizeof(void *));
	recorders.items[recorders.n++] = r;
	return r;
}

static void recorders_free(void)
{
	for (size_t i = 0; i < recorders.n; i++)
		free(recorders.items[i]);
	free(recorders.items);
	recorders.items = NULL;
	recorders.n = 0;
}

/* --- execute: what the callbacks saw -------------------------------------------------- */

enum action { ACT_NONE, ACT_CANCEL, ACT_DETACH, ACT_DESTROY, ACT_OOM_KILL };

struct exec_rec {
	struct ops_exec *x; /* what ops_execute returned */
	bool returned;      /* ops_execute had returned */
	int early;          /* callbacks before it had, or with another handle */
	int starts, outputs, dones;
	char out[8192], errout[8192];
	size_t out_len, err_len;
	bool ok;
	struct ops_exec_result r; /* its strings point into the copies below */
	char exec_id[32], session_id[160], signal[16];
	struct err err;
	char start_id[32];             /* ops_exec_id() in on_start */
	struct session *start_session; /* ops_exec_session() in on_start */
	/* what the callbacks do */
	enum action on_start_do, on_output_do, on_done_do;
	struct ops_target destroy_target;
	int destroy_rc;
};

static void exec_act(struct exec_rec *rec, struct ops_exec *x, enum action a)
{
	struct err e;
	switch (a) {
	case ACT_NONE:
		break;
	case ACT_CANCEL:
		ops_exec_cancel(x);
		break;
	case ACT_DETACH:
		ops_exec_detach(x);
		break;
	case ACT_DESTROY:
		rec->destroy_rc =
			ops_destroy_session(&rec->destroy_target, "by the test", NULL, NULL, &e);
		break;
	case ACT_OOM_KILL:
		fake_driver_count_oom_kill();
		break;
	}
}

static void check_handle(struct exec_rec *rec, struct ops_exec *x)
{
	if (!rec->returned || x != rec->x)
		rec->early++;
}

static void on_exec_start(struct ops_exec *x, void *arg)
{
	struct exec_rec *rec = arg;
	check_handle(rec, x);
	rec->starts++;
	snprintf(rec->start_id, sizeof(rec->start_id), "%s", ops_exec_id(x));
	rec->start_session = ops_exec_session(x);
	exec_act(rec, x, rec->on_start_do);
}

static void append(char *buf, size_t cap, size_t *len, const char *text, size_t n)
{
	if (*len + n >= cap)
		n = cap - *len - 1;
	memcpy(buf + *len, text, n);
	*len += n;
	buf[*len] = '\0';
}

static void on_exec_output(struct ops_exec *x, enum ops_stream stream, const char *text, size_t len,
			   void *arg)
{
	struct exec_rec *rec = arg;
	check_handle(rec, x);
	rec->outputs++;
	if (stream == OPS_STDOUT)
		append(rec->out, sizeof(rec->out), &rec->out_len, text, len);
	else
		append(rec->errout, sizeof(rec->errout), &rec->err_len, text, len);
	exec_act(rec, x, rec->on_output_do);
}

static void on_exec_done(struct ops_exec *x, const struct ops_exec_result *r, const struct err *err,
			 void *arg)
{
	struct exec_rec *rec = arg;
	check_handle(rec, x);
	rec->dones++;
	rec->ok = r != NULL;
	exec_act(rec, x, rec->on_done_do);
	if (err) {
		err_copy(&rec->err, err);
		return;
	}
	rec->r = *r;
	snprintf(rec->exec_id, sizeof(rec->exec_id), "%s", r->exec_id);
	snprintf(rec->session_id, sizeof(rec->session_id), "%s", r->session_id);
	snprintf(rec->signal, sizeof(rec->signal), "%s", r->signal ? r->signal : "");
	rec->r.exec_id = rec->exec_id;
	rec->r.session_id = rec->session_id;
	rec->r.signal = r->signal ? rec->signal : NULL;
}

static struct exec_rec *exec_rec_new(void)
{
	return recorder_new(sizeof(struct exec_rec));
}

static const struct ops_exec_cbs exec_cbs = {
	.on_start = on_exec_start,
	.on_output = on_exec_output,
	.on_done = on_exec_done,
};

/* Starts req in session t; the callbacks record into rec. */
static void exec_begin(struct exec_rec *rec, const struct ops_target *t,
		       const struct ops_exec_req *req)
{
	struct err e;
	rec->x = ops_execute(t, req, &exec_cbs, rec, &e);
	if (!rec->x)
		fail_msg("ops_execute: %s", e.msg);
	rec->returned = true;
}

static void exec_begin_cmd(struct exec_rec *rec, const struct ops_target *t, const char *command)
{
	struct ops_exec_req req = { .command = command };
	exec_begin(rec, t, &req);
}

/* Runs command in session t to its end. */
static void exec_run(struct exec_rec *rec, const struct ops_target *t, const char *command)
{
	exec_begin_cmd(rec, t, command);
	wait_count(&rec->dones, 1, "the command's end");
}

/* --- files and sessions: what the callback saw ---------------------------------------- */

struct call_rec {
	struct ops_call *c;
	bool returned;
	int early;
	int dones;
	bool ok;
	struct err err;
	char session_id[160], path[256];
	struct session *session;
	uint64_t size;
	char data[4096];
	size_t data_len;
	char names[1024]; /* list: the entries' names, each followed by a space */
	bool truncated;
	/* what the callback does: destroy this session (when destroy_target.session_id) */
	struct ops_target destroy_target;
	int destroy_rc;
	/* a streamed read */
	int heads;
	uint64_t head_size;
	bool head_text;
};

static void on_call_done(struct ops_call *c, const struct ops_result *r, const struct err *err,
			 void *arg)
{
	struct call_rec *rec = arg;
	if (!rec->returned || c != rec->c)
		rec->early++;
	rec->dones++;
	rec->ok = r != NULL;
	if (rec->destroy_target.session_id) {
		struct err e;
		rec->destroy_rc =
			ops_destroy_session(&rec->destroy_target, "by the test", NULL, NULL, &e);
	}
	if (err) {
		err_copy(&rec->err, err);
		return;
	}
	snprintf(rec->session_id, sizeof(rec->session_id), "%s", r->session_id);
	snprintf(rec->path, sizeof(rec->path), "%s", r->path ? r->path : "");
	rec->session = r->session;
	rec->size = r->size;
	if (r->data) {
		size_t n = r->size < sizeof(rec->data) - 1 ? r->size : sizeof(rec->data) - 1;
		memcpy(rec->data, r->data, n);
		rec->data[n] = '\0';
		rec->data_len = n;
	}
	size_t i;
	json_t *entry;
	size_t len = 0;
	json_array_foreach (r->entries, i, entry) {
		const char *name = json_string_value(json_object_get(entry, "name"));
		if (!name)
			continue;
		append(rec->names, sizeof(rec->names), &len, name, strlen(name));
		append(rec->names, sizeof(rec->names), &len, " ", 1);
	}
	rec->truncated = r->truncated;
}

static struct call_rec *call_rec_new(void)
{
	return recorder_new(sizeof(struct call_rec));
}

static void call_started(struct call_rec *rec, struct ops_call *c, const struct err *e)
{
	if (!c)
		fail_msg("the operation did not start: %s", e->msg);
	rec->c = c;
	rec->returned = true;
}

/* A byte for a write to take over. */
static uint8_t *one_byte(void)
{
	uint8_t *b = xmalloc(1);
	b[0] = 'x';
	return b;
}

static void write_begin(struct call_rec *rec, const struct ops_target *t, const char *path,
			const char *text)
{
	struct err e;
	size_t n = strlen(text);
	uint8_t *data = xmalloc(n + 1);
	memcpy(data, text, n);
	call_started(rec, ops_write_file(t, path, data, n, -1, on_call_done, rec, &e), &e);
}

static void write_run(struct call_rec *rec, const struct ops_target *t, const char *path,
		      const char *text)
{
	write_begin(rec, t, path, text);
	wait_count(&rec->dones, 1, "the write");
}

static void read_begin(struct call_rec *rec, const struct ops_target *t, const char *path,
		       size_t max)
{
	struct err e;
	call_started(rec, ops_read_file(t, path, max, on_call_done, rec, &e), &e);
}

static void read_run(struct call_rec *rec, const struct ops_target *t, const char *path, size_t max)
{
	read_begin(rec, t, path, max);
	wait_count(&rec->dones, 1, "the read");
}

static void stream_on_head(struct ops_call *c, uint64_t size, bool text, void *arg)
{
	struct call_rec *rec = arg;
	rec->heads++;
	rec->head_size = size;
	rec->head_text = text;
}

static void stream_on_data(struct ops_call *c, const uint8_t *data, size_t len, void *arg)
{
	struct call_rec *rec = arg;
	size_t room = sizeof(rec->data) - 1 - rec->data_len;
	size_t n = len < room ? len : room;
	memcpy(rec->data + rec->data_len, data, n);
	rec->data_len += n;
	rec->data[rec->data_len] = '\0';
	ops_call_consumed(c, len);
}

static const struct ops_read_cbs stream_cbs = { .on_head = stream_on_head,
						.on_data = stream_on_data };

/* A streamed read that asks whether the file is text, as REST's JSON reply does. */
static void stream_run(struct call_rec *rec, const struct ops_target *t, const char *path)
{
	struct err e;
	call_started(rec, ops_read_stream(t, path, true, &stream_cbs, on_call_done, rec, &e), &e);
	wait_count(&rec->dones, 1, "the streamed read");
}

static void list_run(struct call_rec *rec, const struct ops_target *t, const char *path)
{
	struct err e;
	call_started(rec, ops_list_files(t, path, false, on_call_done, rec, &e), &e);
	wait_count(&rec->dones, 1, "the listing");
}

static void create_run(struct call_rec *rec, const struct ops_target *t,
		       const struct ops_session_opts *o)
{
	struct err e;
	call_started(rec, ops_create_session(t, o, on_call_done, rec, &e), &e);
	wait_count(&rec->dones, 1, "the creation");
}

/* The operation rec recorded ended once, in a failure with errnum. */
static void expect_call_error(struct call_rec *rec, int errnum)
{
	assert_int_equal(rec->dones, 1);
	assert_false(rec->ok);
	assert_int_equal(rec->err.errnum, errnum);
	assert_int_equal(rec->early, 0);
}

/* Lists session t's workspace and waits for the answer: whatever the agent sent on the
 * connection before it (a stray second reply, say) has been handled by then. */
static void barrier(const struct ops_target *t)
{
	struct call_rec *rec = call_rec_new();
	list_run(rec, t, NULL);
	assert_true(rec->ok);
}

/* One turn of the loop for deferred starts: an operation started now is answered after
 * every operation started before it has been looked at. */
static void barrier_idle(void)
{
	struct call_rec *rec = call_rec_new();
	struct ops_target t = target("nobody", "no-such-session");
	read_run(rec, &t, "x", 0);
	expect_call_error(rec, ENOENT);
}

/* --- fixture -------------------------------------------------------------------------- */

static const char *agent_bin, *fake_agent_bin;

static void write_text(const char *path, const char *text)
{
	FILE *f = fopen(path, "we");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	remove(path);
	return 0;
}

static int group_setup(void **state)
{
	snprintf(T.dir, sizeof(T.dir), "/tmp/session-ops-XXXXXX");
	assert_non_null(mkdtemp(T.dir));
	char path[256];
	const char *const dirs[] = { "state",
				     "artifacts",
				     "artifacts/templates",
				     "artifacts/templates/base",
				     "artifacts/templates/base/rootfs",
				     "artifacts/templates/other",
				     "artifacts/templates/other/rootfs" };
	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		snprintf(path, sizeof(path), "%s/%s", T.dir, dirs[i]);
		assert_int_equal(mkdir(path, 0755), 0);
	}
	snprintf(path, sizeof(path), "%s/artifacts/templates/base/template.json", T.dir);
	write_text(path, "{\"name\": \"base\"}");
	snprintf(path, sizeof(path), "%s/artifacts/templates/other/template.json", T.dir);
	write_text(path, "{\"name\": \"other\"}");

	snprintf(path, sizeof(path), "%s/state", T.dir);
	setenv("SANDBOX_STATE_DIR", path, 1);
	snprintf(path, sizeof(path), "%s/artifacts", T.dir);
	setenv("FIRECRACKER_ARTIFACTS_DIR", path, 1);
	setenv("SANDBOX_DEFAULT_TEMPLATE", "base", 1);
	setenv("SANDBOX_WARM_POOL", "0", 1);
	setenv("SANDBOX_NETWORK", "off", 1);
	setenv("SANDBOX_PING_INTERVAL_MS", "0", 1);
	setenv("SANDBOX_REAPER_INTERVAL_MS", "50", 1);
	setenv("SANDBOX_WORKERS", "2", 1);
	setenv("LOG_LEVEL", "warn", 1);
	struct err e;
	if (config_load(&T.cfg, &e) < 0)
		fail_msg("config: %s", e.msg);
	T.defaults = T.cfg;

	fake_driver_setup(agent_bin, fake_agent_bin, T.dir);
	T.base = event_base_new();
	assert_int_equal(loop_pool_start(T.base, T.cfg.workers), 0);
	if (store_open(T.cfg.state_dir, &e) < 0)
		fail_msg("store: %s", e.msg);
	ops_init(T.base, &T.cfg);
	if (session_init(T.base, &T.cfg, &fake_driver, &e) < 0)
		fail_msg("session_init: %s", e.msg);
	return 0;
}

static void on_shut_down(void *arg)
{
	T.shut_down = true;
}

static bool is_shut_down(const void *arg)
{
	return T.shut_down;
}

static int group_teardown(void **state)
{
	session_shutdown(on_shut_down, NULL);
	loop_until(is_shut_down, NULL, "the session layer's shutdown");
	loop_pool_stop();
	store_close();
	event_base_free(T.base);
	config_free(&T.cfg);
	nftw(T.dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	return 0;
}

static void collect(struct session *s, void *arg)
{
	json_array_append_new(arg, json_pack("[s,s]", s->owner, s->id));
}

static void destroy_all(void)
{
	json_t *all = json_array();
	session_foreach(NULL, collect, all);
	size_t i;
	json_t *pair;
	json_array_foreach (all, i, pair) {
		struct session *s = session_find(json_string_value(json_array_get(pair, 0)),
						 json_string_value(json_array_get(pair, 1)));
		if (s)
			session_destroy(s, "the test is over");
	}
	json_decref(all);
}

/* Destroys what is left, then tells whether nothing is (sessions, sandboxes, records). */
static bool cleared(const void *arg)
{
	destroy_all();
	return session_count() == 0 && settled(NULL);
}

/* Destroys whatever the test left and waits until its sandboxes are gone. A test that failed
 * midway may have left an operation that has yet to start, and make a session when it does
 * (on the first turn of the loop): that one is destroyed in turn. */
static int teardown(void **state)
{
	fake_driver_release();
	plan_real();
	T.cfg.max_sessions = T.defaults.max_sessions;
	T.cfg.default_timeout_ms = T.defaults.default_timeout_ms;
	T.cfg.first_reply_timeout_ms = T.defaults.first_reply_timeout_ms;
	T.cfg.file_op_timeout_ms = T.defaults.file_op_timeout_ms;
	event_base_loop(T.base, EVLOOP_NONBLOCK);
	loop_until(cleared, NULL, "what the test left to be gone");
	recorders_free();
	return 0;
}

/* --- execute ------------------------------------------------------------------------ */

static void test_execute_creates_the_session_and_reports_the_command(void **state)
{
	struct ops_target t = target("", "first");
	struct fake_counts before = counts();
	struct exec_rec *rec = exec_rec_new();
	long long t0 = wait_now_ms();
	exec_begin_cmd(rec, &t, "echo out; echo err >&2; exit 7");
	/* Nothing happens before the call returned: the session is asked for on the loop. */
	assert_null(session_find("", "first"));
	wait_count(&rec->dones, 1, "the command's end");
	long long elapsed = wait_now_ms() - t0;

	assert_int_equal(rec->early, 0);
	assert_true(rec->ok);
	assert_int_equal(rec->starts, 1);
	assert_string_equal(rec->out, "out\n");
	assert_string_equal(rec->errout, "err\n");
	assert_true(rec->r.has_exit_code);
	assert_int_equal(rec->r.exit_code, 7);
	assert_null(rec->r.signal);
	assert_false(rec->r.timed_out);
	assert_false(rec->r.cancelled);
	assert_false(rec->r.oom_killed);
	assert_string_equal(rec->r.session_id, "first");
	assert_true(strncmp(rec->r.exec_id, "exec_", 5) == 0);
	assert_string_equal(rec->r.exec_id, rec->start_id);
	assert_true(rec->r.duration_ms > 0);
	assert_true(rec->r.duration_ms <= (double)elapsed);
	/* The session was made on the way, with one sandbox. */
	assert_true(session_ready("", "first"));
	assert_int_equal(counts().created, before.created + 1);
	assert_int_equal(session_count(), 1);

	/* The next command runs in the same session; plain words run without a shell. */
	struct exec_rec *again = exec_rec_new();
	json_t *args = json_pack("[s,s,s]", "%s-%s", "a b", "c");
	struct ops_exec_req req = { .command = "printf", .args = args };
	exec_begin(again, &t, &req);
	json_decref(args);
	wait_count(&again->dones, 1, "the second command");
	assert_true(again->ok);
	assert_int_equal(again->early, 0);
	assert_string_equal(again->out, "a b-c");
	assert_int_equal(again->r.exit_code, 0);
	assert_string_not_equal(again->r.exec_id, rec->r.exec_id);
	assert_int_equal(counts().created, before.created + 1);
	assert_int_equal(session_find("", "first")->execs_total, 2);

	/* Exactly one terminal callback each: nothing more arrives. */
	barrier(&t);
	assert_int_equal(rec->dones, 1);
	assert_int_equal(again->dones, 1);
	assert_null(session_find("", "first")->execs);
	assert_int_equal(session_find("", "first")->running, 0);
}

static void test_a_signal_ends_the_command(void **state)
{
	struct ops_target t = target("", "signal");
	struct exec_rec *rec = exec_rec_new();
	exec_run(rec, &t, "kill -KILL $$");
	assert_true(rec->ok);
	assert_false(rec->r.has_exit_code);
	assert_non_null(rec->r.signal);
	assert_string_equal(rec->r.signal, "SIGKILL");
	assert_false(rec->r.cancelled);
	assert_false(rec->r.timed_out);
}

static void test_a_missing_command_is_reported(void **state)
{
	struct ops_target t = target("", "missing-command");
	struct exec_rec *rec = exec_rec_new();
	exec_run(rec, &t, "no-such-command-anywhere");
	assert_int_equal(rec->dones, 1);
	assert_false(rec->ok);
	assert_int_equal(rec->err.errnum, ENOENT);
	assert_int_equal(rec->early, 0);
	/* The session is still there and usable. */
	assert_true(session_ready("", "missing-command"));
	barrier(&t);
}

static void test_output_is_never_cut_inside_a_character(void **state)
{
	struct ops_target t = target("", "utf8");
	struct exec_rec *rec = exec_rec_new();
	/* A euro sign written in two halves, the agent sending each as it comes, then an
	 * invalid byte, then half a character at the very end. */
	exec_run(rec, &t, "printf '\\342\\202'; sleep 0.2; printf '\\254 \\377 \\342\\202'");
	assert_true(rec->ok);
	assert_true(rec->outputs >= 2);
	assert_true(utf8_valid((const uint8_t *)rec->out, rec->out_len));
	/* U+FFFD for the invalid byte, then for each byte of the character cut short. */
	assert_string_equal(rec->out, "\xe2\x82\xac \xef\xbf\xbd \xef\xbf\xbd\xef\xbf\xbd");
}

static void test_the_session_environment_is_under_the_request_environment(void **state)
{
	struct ops_target t = target("", "env");
	json_t *senv = json_pack("{s:s, s:s}", "A", "session-a", "B", "session-b");
	struct ops_session_opts o = { .env = senv };
	struct call_rec *created = call_rec_new();
	create_run(created, &t, &o);
	json_decref(senv);
	assert_true(created->ok);

	json_t *renv = json_pack("{s:s}", "B", "request-b");
	struct ops_exec_req req = { .command = "echo $A $B", .env = renv };
	struct exec_rec *rec = exec_rec_new();
	exec_begin(rec, &t, &req);
	json_decref(renv);
	wait_count(&rec->dones, 1, "the command's end");
	assert_true(rec->ok);
	assert_string_equal(rec->out, "session-a request-b\n");
}

static void test_stdin_is_sent_then_closed(void **state)
{
	struct ops_target t = target("", "stdin");
	static const char input[] = "line one\nline two\n";
	struct ops_exec_req req = { .command = "wc -l",
				    .stdin_data = input,
				    .stdin_len = sizeof(input) - 1,
				    .has_stdin = true };
	struct exec_rec *rec = exec_rec_new();
	exec_begin(rec, &t, &req);
	wait_count(&rec->dones, 1, "the command's end");
	assert_true(rec->ok);
	assert_int_equal(atoi(rec->out), 2);
}

static void test_an_oom_kill_meanwhile_is_reported(void **state)
{
	struct ops_target t = target("", "oom");
	struct exec_rec *rec = exec_rec_new();
	rec->on_start_do = ACT_OOM_KILL;
	exec_run(rec, &t, "true");
	assert_true(rec->ok);
	assert_true(rec->r.oom_killed);
	/* None since the next command started: none reported. */
	struct exec_rec *next = exec_rec_new();
	exec_run(next, &t, "true");
	assert_true(next->ok);
	assert_false(next->r.oom_killed);
}

/* --- cancel, detach, timeout -------------------------------------------------------- */

static void test_cancel_a_running_command(void **state)
{
	struct ops_target t = target("", "cancel");
	struct exec_rec *rec = exec_rec_new();
	rec->on_start_do = ACT_CANCEL;
	exec_run(rec, &t, "sleep 30");
	assert_int_equal(rec->early, 0);
	assert_true(rec->ok);
	assert_true(rec->r.cancelled);
	assert_false(rec->r.timed_out);
	assert_false(rec->r.has_exit_code);
	assert_string_equal(rec->r.signal, "SIGTERM");
	barrier(&t);
	assert_int_equal(rec->dones, 1);
	assert_int_equal(session_find("", "cancel")->running, 0);
}

static void test_cancel_before_the_command_started(void **state)
{
	struct ops_target t = target("", "cancel-early");
	struct exec_rec *rec = exec_rec_new();
	exec_begin_cmd(rec, &t, "sleep 30");
	ops_exec_cancel(rec->x);
	wait_count(&rec->dones, 1, "the command's end");
	assert_false(rec->ok);
	assert_int_equal(rec->err.errnum, ECANCELED);
	assert_int_equal(rec->starts, 0);
	assert_int_equal(rec->early, 0);
	/* The session it waited for was made all the same, and never ran it. */
	assert_true(session_ready("", "cancel-early"));
	assert_int_equal(session_find("", "cancel-early")->execs_total, 0);
}

static void test_cancel_by_id(void **state)
{
	struct ops_target t = target("", "cancel-id");
	struct exec_rec *rec = exec_rec_new();
	exec_begin_cmd(rec, &t, "sleep 30");
	wait_count(&rec->starts, 1, "the command's start");
	struct session *s = session_find("", "cancel-id");
	assert_ptr_equal(rec->start_session, s);
	assert_string_equal(ops_exec_id(rec->x), rec->start_id);
	assert_non_null(session_exec_find(s, rec->start_id));
	assert_int_equal(s->running, 1);

	struct err e;
	assert_int_equal(ops_cancel_exec(&t, "exec_000000000000", &e), -ENOENT);
	assert_int_equal(ops_cancel_exec(&t, "", &e), -ENOENT);
	assert_int_equal(ops_cancel_exec(&t, NULL, &e), -EINVAL);
	struct ops_target other = target("", "no-such-session");
	assert_int_equal(ops_cancel_exec(&other, rec->start_id, &e), -ENOENT);
	assert_int_equal(rec->dones, 0);

	assert_int_equal(ops_cancel_exec(&t, rec->start_id, &e), 0);
	wait_count(&rec->dones, 1, "the command's end");
	assert_true(rec->ok);
	assert_true(rec->r.cancelled);
	/* It is no longer running, so no longer there to cancel. */
	assert_null(session_exec_find(s, rec->start_id));
	assert_int_equal(ops_cancel_exec(&t, rec->start_id, &e), -ENOENT);
	assert_int_equal(s->running, 0);
}

/* Whether session t's command left its mark: a file `mark` that says it was stopped. */
static bool marked(void *arg)
{
	struct call_rec *r = call_rec_new();
	read_run(r, arg, "mark", 0);
	return r->ok && strcmp(r->data, "stopped\n") == 0;
}

static void test_detach_while_running_cancels_without_callbacks(void **state)
{
	struct ops_target t = target("", "detach");
	struct exec_rec *rec = exec_rec_new();
	/* The command leaves a mark when it is told to stop, once it says it is ready to. */
	exec_begin_cmd(rec, &t,
		       "trap 'echo stopped > mark; exit 1' TERM; echo ready; sleep 30 & wait");
	wait_count(&rec->outputs, 1, "the command's start");
	assert_string_equal(rec->out, "ready\n");
	struct session *s = session_find("", "detach");
	ops_exec_detach(rec->x);
	/* Given back at once: nothing runs in the session any longer. */
	assert_int_equal(s->running, 0);
	assert_null(s->execs);
	/* The agent was told to cancel it: the mark appears. */
	assert_true(wait_until(marked, &t, WAIT_TIMEOUT_MS, "the cancelled command's mark"));
	barrier(&t);
	assert_int_equal(rec->dones, 0);
	assert_int_equal(rec->early, 0);
}

static void test_detach_before_the_start_does_nothing(void **state)
{
	struct ops_target t = target("", "detach-early");
	struct fake_counts before = counts();
	struct exec_rec *rec = exec_rec_new();
	exec_begin_cmd(rec, &t, "true");
	ops_exec_detach(rec->x);
	barrier_idle();
	/* Never asked for its session. */
	assert_null(session_find("", "detach-early"));
	assert_int_equal(counts().calls, before.calls);
	assert_int_equal(rec->starts + rec->outputs + rec->dones, 0);
}

static void test_detach_while_the_session_is_created(void **state)
{
	struct ops_target t = target("", "detach-creating");
	struct fake_plan hold = { .hold = true };
	fake_driver_plan(&hold);
	unsigned calls = counts().calls;
	struct exec_rec *rec = exec_rec_new();
	exec_begin_cmd(rec, &t, "true");
	wait_held(calls + 1);
	ops_exec_detach(rec->x);
	fake_driver_release();
	wait_ready("", "detach-creating");
	barrier(&t);
	assert_int_equal(rec->starts + rec->outputs + rec->dones, 0);
	assert_int_equal(session_find("", "detach-creating")->execs_total, 0);
}

static bool destroys_held(const void *arg)
{
	return counts().destroys_held == *(const unsigned *)arg;
}

static void note_gone(void *arg)
{
	(*(unsigned *)arg)++;
}

static bool is_one(const void *arg)
{
	return *(const unsigned *)arg == 1;
}

/* A destroy's done comes once the sandbox is gone (a client's next session may take its
 * volumes then), not when the destroy starts; an unknown session has none. */
static void test_destroy_done_after_the_sandbox(void **state)
{
	struct fake_plan plan = { .hold_destroy = true };
	fake_driver_plan(&plan);
	struct ops_target t = target("", "gone-later");
	struct call_rec *c = call_rec_new();
	create_run(c, &t, NULL);
	assert_true(c->ok);
	unsigned gone = 0, one = 1;
	struct err e;
	assert_int_equal(ops_destroy_session(&t, "by the test", note_gone, &gone, &e), 0);
	loop_until(destroys_held, &one, "the teardown held");
	assert_int_equal(gone, 0);
	assert_null(session_find("", "gone-later"));
	fake_driver_release();
	loop_until(is_one, &gone, "the destroy's done");
	wait_settled();
	assert_int_equal(gone, 1);
	assert_int_equal(ops_destroy_session(&t, "again", note_gone, &gone, &e), -ENOENT);
	assert_int_equal(gone, 1);
}

/* Sandboxes still being torn down count against the server's cap (beyond one per worker):
 * creating and destroying in a loop cannot keep any number of them alive while their
 * teardown runs behind the creations. */
static void test_teardowns_count_against_the_cap(void **state)
{
	unsigned max = T.cfg.max_sessions;
	T.cfg.max_sessions = 2; /* with 2 workers: 4 sandboxes held at most */
	struct fake_plan plan = { .hold_destroy = true };
	fake_driver_plan(&plan);
	for (unsigned i = 0; i < 4; i++) {
		char id[16];
		snprintf(id, sizeof(id), "churn-%u", i);
		struct ops_target t = target("", id);
		struct call_rec *c = call_rec_new();
		create_run(c, &t, NULL);
		assert_true(c->ok);
		struct err e;
		assert_int_equal(ops_destroy_session(&t, "by the test", NULL, NULL, &e), 0);
	}
	/* The first teardown is held in the driver, the others wait behind it (teardown takes
	 * at most all workers but one, here one). */
	unsigned one = 1;
	loop_until(destroys_held, &one, "a teardown held");
	/* No session is alive, 4 sandboxes are: the quota would let one more in, the cap with
	 * its teardowns does not. */
	assert_int_equal(session_count(), 0);
	struct ops_target t = target("", "churn-next");
	struct call_rec *c = call_rec_new();
	create_run(c, &t, NULL);
	expect_call_error(c, EAGAIN);
	assert_non_null(strstr(c->err.msg, "the 4 sandboxes it is still tearing down"));

	fake_driver_release();
	wait_settled();
	c = call_rec_new();
	create_run(c, &t, NULL);
	assert_true(c->ok);
	T.cfg.max_sessions = max;
}

static void test_detach_from_the_output_callback(void **state)
{
	struct ops_target t = target("", "detach-output");
	struct exec_rec *rec = exec_rec_new();
	rec->on_output_do = ACT_DETACH;
	exec_begin_cmd(rec, &t, "echo hello; sleep 30");
	wait_count(&rec->outputs, 1, "the output");
	barrier(&t);
	assert_int_equal(rec->outputs, 1);
	assert_int_equal(rec->dones, 0);
	assert_int_equal(session_find("", "detach-output")->running, 0);
}

static void test_a_command_times_out(void **state)
{
	struct ops_target t = target("", "timeout");
	struct ops_exec_req req = { .command = "sleep 30", .timeout_ms = 200, .has_timeout = true };
	struct exec_rec *rec = exec_rec_new();
	exec_begin(rec, &t, &req);
	wait_count(&rec->dones, 1, "the command's end");
	assert_true(rec->ok);
	assert_true(rec->r.timed_out);
	assert_false(rec->r.cancelled);
	assert_false(rec->r.has_exit_code);

	/* Without a timeout of its own, the server's default applies. */
	T.cfg.default_timeout_ms = 200;
	struct exec_rec *dflt = exec_rec_new();
	exec_run(dflt, &t, "sleep 30");
	assert_true(dflt->ok);
	assert_true(dflt->r.timed_out);
}

static void test_a_running_command_keeps_its_session_alive(void **state)
{
	struct ops_target t = target("", "busy");
	struct ops_session_opts o = { .idle_timeout_s = 1 };
	struct call_rec *created = call_rec_new();
	create_run(created, &t, &o);
	assert_true(created->ok);
	/* Longer than the idle timeout, with the reaper looking every 50 ms. */
	struct exec_rec *rec = exec_rec_new();
	exec_run(rec, &t, "sleep 2");
	assert_true(rec->ok);
	assert_int_equal(rec->r.exit_code, 0);
	/* Idle afterwards: the reaper destroys it. */
	wait_gone("", "busy");
	wait_settled();
}

/* --- files -------------------------------------------------------------------------- */

static void test_write_read_and_list_files(void **state)
{
	struct ops_target t = target("", "files");
	struct call_rec *w = call_rec_new();
	write_run(w, &t, "hello.txt", "hello, world");
	assert_true(w->ok);
	assert_int_equal(w->early, 0);
	assert_int_equal(w->size, 12);
	assert_string_equal(w->path, "hello.txt");
	assert_string_equal(w->session_id, "files");
	/* The write made the session. */
	assert_true(session_ready("", "files"));

	struct call_rec *r = call_rec_new();
	read_run(r, &t, "hello.txt", 0);
	assert_true(r->ok);
	assert_int_equal(r->early, 0);
	assert_int_equal(r->size, 12);
	assert_string_equal(r->data, "hello, world");

	struct call_rec *l = call_rec_new();
	list_run(l, &t, "");
	assert_true(l->ok);
	assert_string_equal(l->path, ".");
	assert_string_equal(l->names, "hello.txt ");
	assert_false(l->truncated);

	/* An empty file reads as no bytes. */
	struct call_rec *we = call_rec_new();
	write_run(we, &t, "empty", "");
	assert_true(we->ok);
	struct call_rec *re = call_rec_new();
	read_run(re, &t, "empty", 0);
	assert_true(re->ok);
	assert_int_equal(re->size, 0);

	struct call_rec *missing = call_rec_new();
	read_run(missing, &t, "no-such-file", 0);
	expect_call_error(missing, ENOENT);
	assert_int_equal(session_find("", "files")->running, 0);
}

static void test_reading_or_listing_needs_the_session(void **state)
{
	struct fake_counts before = counts();
	struct ops_target t = target("", "never-made");
	struct call_rec *r = call_rec_new();
	read_run(r, &t, "file", 0);
	expect_call_error(r, ENOENT);
	struct call_rec *l = call_rec_new();
	list_run(l, &t, NULL);
	expect_call_error(l, ENOENT);
	struct err e;
	assert_null(ops_find_session(&t, &e));
	assert_int_equal(e.errnum, ENOENT);
	assert_null(session_find("", "never-made"));
	assert_int_equal(counts().calls, before.calls);
}

static void test_reading_beyond_max_bytes(void **state)
{
	struct ops_target t = target("", "big");
	struct call_rec *w = call_rec_new();
	write_run(w, &t, "file", "0123456789abcdef");
	assert_true(w->ok);
	struct call_rec *r = call_rec_new();
	read_run(r, &t, "file", 10);
	expect_call_error(r, EFBIG);
	struct call_rec *exact = call_rec_new();
	read_run(exact, &t, "file", 16);
	assert_true(exact->ok);
	assert_string_equal(exact->data, "0123456789abcdef");
}

static void test_an_agent_sending_more_than_max_bytes_is_stopped(void **state)
{
	/* The fake agent ignores maxBytes: the host's own limit is what holds. */
	plan_script("");
	struct ops_target t = target("", "big-fake");
	struct call_rec *created = call_rec_new();
	create_run(created, &t, NULL);
	assert_true(created->ok);
	struct call_rec *r = call_rec_new();
	read_run(r, &t, "file", 5);
	expect_call_error(r, EFBIG);
	assert_non_null(strstr(r->err.msg, "5 bytes"));
	/* The session goes on. */
	struct call_rec *all = call_rec_new();
	read_run(all, &t, "file", 0);
	assert_true(all->ok);
	assert_string_equal(all->data, "fake file contents\n");
	assert_int_equal(session_find("", "big-fake")->running, 0);
}

/* A streamed read whose consumer holds what it got until told to let go. */
struct held_read {
	struct call_rec rec;
	uint64_t got;
	bool let_go;
};

static void held_on_data(struct ops_call *c, const uint8_t *data, size_t len, void *arg)
{
	struct held_read *h = arg;
	h->got += len;
	if (h->let_go)
		ops_call_consumed(c, len);
}

static const struct ops_read_cbs held_cbs = { .on_head = stream_on_head, .on_data = held_on_data };

static bool held_window(const void *arg)
{
	const struct held_read *h = arg;
	return h->got >= GUEST_WINDOW_INITIAL;
}

static void test_a_streamed_read_waits_for_its_consumer(void **state)
{
	plan_real();
	struct ops_target t = target("", "stream");
	size_t n = 3u << 20;
	char *text = xmalloc(n + 1);
	memset(text, 'a', n);
	text[n] = '\0';
	struct call_rec *w = call_rec_new();
	write_run(w, &t, "big.txt", text);
	free(text);
	assert_true(w->ok);
	struct held_read *h = recorder_new(sizeof(*h));
	struct err e;
	call_started(&h->rec,
		     ops_read_stream(&t, "big.txt", true, &held_cbs, on_call_done, &h->rec, &e),
		     &e);
	loop_until(held_window, h, "a window of the read");
	/* Another operation's round trip on the same connection: the agent has had every
	 * chance to send more, and sent nothing beyond the credit it had. */
	barrier(&t);
	assert_int_equal(h->got, GUEST_WINDOW_INITIAL);
	assert_int_equal(h->rec.heads, 1);
	assert_int_equal(h->rec.head_size, n);
	assert_true(h->rec.head_text);
	assert_int_equal(h->rec.dones, 0);
	h->let_go = true;
	ops_call_consumed(h->rec.c, (size_t)h->got);
	wait_count(&h->rec.dones, 1, "the streamed read");
	assert_true(h->rec.ok);
	assert_int_equal(h->got, n);
	assert_int_equal(h->rec.size, n);
}

static void test_a_file_operation_times_out(void **state)
{
	plan_script("read reply silent");
	T.cfg.file_op_timeout_ms = 200;
	struct ops_target t = target("", "slow-read");
	struct call_rec *created = call_rec_new();
	create_run(created, &t, NULL);
	assert_true(created->ok);
	struct call_rec *r = call_rec_new();
	read_run(r, &t, "file", 0);
	expect_call_error(r, ETIMEDOUT);
	assert_int_equal(session_find("", "slow-read")->running, 0);
}

static void test_detach_a_file_operation(void **state)
{
	plan_script("read reply silent");
	struct ops_target t = target("", "detach-read");
	struct call_rec *created = call_rec_new();
	create_run(created, &t, NULL);
	assert_true(created->ok);
	/* Before it started, and while the agent has it. */
	struct call_rec *early = call_rec_new();
	read_begin(early, &t, "file", 0);
	ops_call_detach(early->c);
	struct call_rec *late = call_rec_new();
	read_begin(late, &t, "file", 0);
	wait_running("", "detach-read");
	assert_int_equal(session_find("", "detach-read")->running, 1);
	ops_call_detach(late->c);
	assert_int_equal(session_find("", "detach-read")->running, 0);
	barrier(&t);
	assert_int_equal(early->dones + late->dones, 0);
}

/* --- owners ------------------------------------------------------------------------- */

static void test_owners_do_not_see_each_other(void **state)
{
	struct ops_target a = target("key-a", "shared");
	struct ops_target b = target("key-b", "shared");
	struct call_rec *w = call_rec_new();
	write_run(w, &a, "secret", "a's");
	assert_true(w->ok);

	struct call_rec *r = call_rec_new();
	read_run(r, &b, "secret", 0);
	expect_call_error(r, ENOENT);
	struct call_rec *l = call_rec_new();
	list_run(l, &b, NULL);
	expect_call_error(l, ENOENT);
	struct err e;
	assert_int_equal(ops_destroy_session(&b, "by b", NULL, NULL, &e), -ENOENT);
	assert_int_equal(ops_cancel_exec(&b, "exec_000000000000", &e), -ENOENT);
	assert_null(ops_find_session(&b, &e));
	assert_int_equal(e.errnum, ENOENT);
	json_t *list = ops_list_sessions(&b);
	assert_int_equal(json_array_size(list), 0);
	json_decref(list);
	list = ops_list_sessions(&a);
	assert_int_equal(json_array_size(list), 1);
	assert_string_equal(json_string_value(json_object_get(json_array_get(list, 0), "id")),
			    "shared");
	assert_null(json_object_get(json_array_get(list, 0), "owner"));
	json_decref(list);
	assert_true(session_ready("key-a", "shared"));

	/* b's own session by that id is another one, with another sandbox. */
	struct exec_rec *x = exec_rec_new();
	exec_run(x, &b, "cat secret");
	assert_true(x->ok);
	assert_int_equal(x->r.exit_code, 1);
	assert_true(session_ready("key-b", "shared"));
	assert_ptr_not_equal(session_find("key-a", "shared"), session_find("key-b", "shared"));
	assert_int_equal(session_count(), 2);
	struct call_rec *still = call_rec_new();
	read_run(still, &a, "secret", 0);
	assert_true(still->ok);
	assert_string_equal(still->data, "a's");
}

static void test_an_admin_reaches_the_one_other_owners_session(void **state)
{
	struct ops_target a = target("key-a", "only-a");
	struct call_rec *w = call_rec_new();
	write_run(w, &a, "file", "a's");
	assert_true(w->ok);

	struct ops_target adm = admin("only-a");
	struct call_rec *r = call_rec_new();
	read_run(r, &adm, "file", 0);
	assert_true(r->ok);
	assert_string_equal(r->data, "a's");
	struct exec_rec *x = exec_rec_new();
	exec_run(x, &adm, "cat file");
	assert_true(x->ok);
	assert_string_equal(x->out, "a's");
	struct call_rec *w2 = call_rec_new();
	write_run(w2, &adm, "by-admin", "x");
	assert_true(w2->ok);
	/* All of it in a's session: the admin has none. */
	assert_null(session_find("admin", "only-a"));
	assert_int_equal(session_count(), 1);

	/* Without any_owner the admin is an owner like any other. */
	struct ops_target plain = target("admin", "only-a");
	struct call_rec *r2 = call_rec_new();
	read_run(r2, &plain, "file", 0);
	expect_call_error(r2, ENOENT);

	struct err e;
	assert_int_equal(ops_destroy_session(&adm, "by the admin", NULL, NULL, &e), 0);
	assert_null(session_find("key-a", "only-a"));
	assert_int_equal(ops_destroy_session(&adm, "by the admin", NULL, NULL, &e), -ENOENT);
}

static void test_an_admin_means_its_own_session_first(void **state)
{
	struct ops_target a = target("key-a", "both");
	struct call_rec *wa = call_rec_new();
	write_run(wa, &a, "file", "a's");
	assert_true(wa->ok);
	/* Creating is never of another owner's session, whatever any_owner says. */
	struct ops_target adm = admin("both");
	struct call_rec *c = call_rec_new();
	create_run(c, &adm, NULL);
	assert_true(c->ok);
	assert_ptr_equal(c->session, session_find("admin", "both"));
	struct call_rec *wadm = call_rec_new();
	write_run(wadm, &adm, "file", "admin's");
	assert_true(wadm->ok);

	struct call_rec *r = call_rec_new();
	read_run(r, &adm, "file", 0);
	assert_true(r->ok);
	assert_string_equal(r->data, "admin's");
	/* Its own goes first; then the one other owner's is what the id means. */
	struct err e;
	assert_int_equal(ops_destroy_session(&adm, "by the admin", NULL, NULL, &e), 0);
	assert_null(session_find("admin", "both"));
	assert_non_null(session_find("key-a", "both"));
	struct call_rec *r2 = call_rec_new();
	read_run(r2, &adm, "file", 0);
	assert_true(r2->ok);
	assert_string_equal(r2->data, "a's");
}

static void test_an_admin_id_of_several_owners_is_ambiguous(void **state)
{
	struct ops_target a = target("key-a", "dup");
	struct ops_target b = target("key-b", "dup");
	struct call_rec *wa = call_rec_new();
	struct call_rec *wb = call_rec_new();
	write_run(wa, &a, "file", "a's");
	write_run(wb, &b, "file", "b's");
	assert_true(wa->ok);
	assert_true(wb->ok);

	struct ops_target adm = admin("dup");
	struct call_rec *r = call_rec_new();
	read_run(r, &adm, "file", 0);
	expect_call_error(r, EEXIST);
	struct call_rec *l = call_rec_new();
	list_run(l, &adm, NULL);
	expect_call_error(l, EEXIST);
	struct call_rec *w = call_rec_new();
	write_run(w, &adm, "file", "admin's");
	expect_call_error(w, EEXIST);
	struct exec_rec *x = exec_rec_new();
	exec_run(x, &adm, "true");
	assert_false(x->ok);
	assert_int_equal(x->err.errnum, EEXIST);
	struct err e;
	assert_int_equal(ops_destroy_session(&adm, "by the admin", NULL, NULL, &e), -EEXIST);
	assert_int_equal(ops_cancel_exec(&adm, "exec_000000000000", &e), -EEXIST);
	assert_int_equal(session_count(), 2);
	assert_null(session_find("admin", "dup"));

	/* The admin's listing says whose each is. */
	json_t *list = ops_list_sessions(&adm);
	assert_int_equal(json_array_size(list), 2);
	const char *o0 = json_string_value(json_object_get(json_array_get(list, 0), "owner"));
	const char *o1 = json_string_value(json_object_get(json_array_get(list, 1), "owner"));
	assert_non_null(o0);
	assert_non_null(o1);
	assert_true((strcmp(o0, "key-a") == 0 && strcmp(o1, "key-b") == 0) ||
		    (strcmp(o0, "key-b") == 0 && strcmp(o1, "key-a") == 0));
	json_decref(list);
}

static void test_an_admin_without_a_match_creates_its_own(void **state)
{
	struct ops_target adm = admin("fresh");
	struct exec_rec *x = exec_rec_new();
	exec_run(x, &adm, "true");
	assert_true(x->ok);
	assert_true(session_ready("admin", "fresh"));
	assert_int_equal(session_count(), 1);
}

/* --- capacity and the driver -------------------------------------------------------- */

static void test_creation_beyond_max_sessions_fails(void **state)
{
	T.cfg.max_sessions = 2;
	struct ops_target t1 = target("", "one"), t2 = target("key-b", "two");
	struct call_rec *c1 = call_rec_new();
	struct call_rec *c2 = call_rec_new();
	create_run(c1, &t1, NULL);
	create_run(c2, &t2, NULL);
	assert_true(c1->ok);
	assert_true(c2->ok);
	unsigned calls = counts().calls;

	struct ops_target t3 = target("", "three");
	struct call_rec *c3 = call_rec_new();
	create_run(c3, &t3, NULL);
	expect_call_error(c3, EAGAIN);
	assert_non_null(strstr(c3->err.msg, "2 sessions"));
	struct exec_rec *x = exec_rec_new();
	exec_run(x, &t3, "true");
	assert_false(x->ok);
	assert_int_equal(x->err.errnum, EAGAIN);
	struct call_rec *w = call_rec_new();
	write_run(w, &t3, "file", "x");
	expect_call_error(w, EAGAIN);
	assert_null(session_find("", "three"));
	assert_int_equal(session_count(), 2);
	assert_int_equal(counts().calls, calls);
	/* The existing sessions still work. */
	barrier(&t1);

	/* Room again once one is gone. */
	struct err e;
	assert_int_equal(ops_destroy_session(&t2, "room", NULL, NULL, &e), 0);
	struct call_rec *c4 = call_rec_new();
	create_run(c4, &t3, NULL);
	assert_true(c4->ok);
}

static void test_a_failing_driver_fails_every_waiter(void **state)
{
	/* Whatever the driver's errno, a sandbox that cannot be made is the server's error;
	 * a lack of resources keeps its own. */
	const int asked[] = { EPERM, ENOSPC };
	const int seen[] = { EIO, ENOSPC };
	for (size_t i = 0; i < ARRAY_SIZE(asked); i++) {
		struct fake_plan plan = { .fail_errnum = asked[i], .hold = true };
		fake_driver_plan(&plan);
		unsigned calls = counts().calls;
		struct ops_target t = target("", "doomed");
		struct exec_rec *x = exec_rec_new();
		exec_begin_cmd(x, &t, "true");
		wait_held(calls + 1);
		/* Being created: others wait for it, or hear it is not ready. */
		struct session *s = session_find("", "doomed");
		assert_non_null(s);
		assert_int_equal(s->state, SESSION_CREATING);
		struct call_rec *w = call_rec_new();
		write_begin(w, &t, "file", "x");
		struct call_rec *r = call_rec_new();
		read_run(r, &t, "file", 0);
		expect_call_error(r, EBUSY);
		struct call_rec *c = call_rec_new();
		create_run(c, &t, NULL);
		expect_call_error(c, EEXIST);
		json_t *list = ops_list_sessions(&t);
		assert_string_equal(
			json_string_value(json_object_get(json_array_get(list, 0), "state")),
			"creating");
		json_decref(list);
		assert_int_equal(w->dones, 0);

		fake_driver_release();
		wait_count(&x->dones, 1, "the command's failure");
		wait_count(&w->dones, 1, "the write's failure");
		assert_false(x->ok);
		assert_int_equal(x->err.errnum, seen[i]);
		assert_non_null(strstr(x->err.msg, "the fake driver was told to fail"));
		expect_call_error(w, seen[i]);
		assert_int_equal(x->starts, 0);
		/* Removed, not left in creating; the driver is reported unhealthy. */
		assert_null(session_find("", "doomed"));
		assert_int_equal(session_count(), 0);
		struct err why;
		assert_false(session_driver_healthy(&why));
		assert_int_equal(why.errnum, seen[i]);
		assert_int_equal(counts().calls, calls + 1);
	}

	/* The next request starts afresh. */
	plan_real();
	struct ops_target t = target("", "doomed");
	struct exec_rec *ok = exec_rec_new();
	exec_run(ok, &t, "true");
	assert_true(ok->ok);
	struct err why;
	assert_true(session_driver_healthy(&why));
}

static void test_destroy_while_the_session_is_created(void **state)
{
	struct fake_plan hold = { .hold = true };
	fake_driver_plan(&hold);
	unsigned calls = counts().calls;
	struct ops_target t = target("", "short-lived");
	struct exec_rec *x = exec_rec_new();
	exec_begin_cmd(x, &t, "true");
	wait_held(calls + 1);
	struct err e;
	assert_int_equal(ops_destroy_session(&t, "by the test", NULL, NULL, &e), 0);
	/* Gone at once; its waiter hears why. */
	assert_null(session_find("", "short-lived"));
	wait_count(&x->dones, 1, "the command's failure");
	assert_false(x->ok);
	assert_int_equal(x->err.errnum, ECANCELED);
	assert_int_equal(x->early, 0);
	/* The sandbox made meanwhile is destroyed once it is there. */
	unsigned created = counts().created;
	fake_driver_release();
	wait_created(created + 1);
	wait_settled();
	assert_int_equal(x->dones, 1);
}

struct first_reply_case {
	const char *script;
	int errnum;
	const char *says;
};

static void test_an_agent_failing_its_first_reply_fails_the_creation(void **state)
{
	T.cfg.first_reply_timeout_ms = 200;
	const struct first_reply_case cases[] = {
		{ "resume reply error", EREMOTEIO, "the sandbox agent did not start" },
		{ "resume reply malformed", EREMOTEIO, "the sandbox agent did not start" },
		{ "resume reply eof", EREMOTEIO, "the sandbox agent did not start" },
		{ "resume reply silent", ETIMEDOUT, "the sandbox agent did not start" },
		{ "protocol 1", EPROTONOSUPPORT, "template `base`" },
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		plan_script(cases[i].script);
		struct ops_target t = target("", "bad-agent");
		struct exec_rec *x = exec_rec_new();
		struct call_rec *w = call_rec_new();
		exec_begin_cmd(x, &t, "true");
		write_begin(w, &t, "file", "x");
		wait_count(&x->dones, 1, "the command's failure");
		wait_count(&w->dones, 1, "the write's failure");
		assert_false(x->ok);
		assert_int_equal(x->err.errnum, cases[i].errnum);
		assert_non_null(strstr(x->err.msg, cases[i].says));
		expect_call_error(w, cases[i].errnum);
		assert_null(session_find("", "bad-agent"));
		wait_settled();
	}
}

static void test_an_unknown_template_is_the_callers_error(void **state)
{
	struct ops_target t = { .owner = "", .session_id = "tmpl", .template_name = "nope" };
	struct exec_rec *x = exec_rec_new();
	exec_run(x, &t, "true");
	assert_false(x->ok);
	assert_int_equal(x->err.errnum, EINVAL);
	assert_non_null(strstr(x->err.msg, "base, other"));
	assert_null(session_find("", "tmpl"));

	/* Another template than the default. */
	struct ops_target other = { .owner = "", .session_id = "tmpl", .template_name = "other" };
	struct call_rec *c = call_rec_new();
	create_run(c, &other, NULL);
	assert_true(c->ok);
	assert_string_equal(session_find("", "tmpl")->tmpl->name, "other");
}

/* --- destroying, and the agent dying, midway ------------------------------------------ */

static void test_destroy_while_a_command_runs(void **state)
{
	struct ops_target t = target("", "doomed-exec");
	struct exec_rec *x = exec_rec_new();
	exec_begin_cmd(x, &t, "sleep 30");
	wait_count(&x->starts, 1, "the command's start");
	unsigned destroyed = counts().destroyed;
	struct err e;
	assert_int_equal(ops_destroy_session(&t, "by the test", NULL, NULL, &e), 0);
	assert_null(session_find("", "doomed-exec"));
	wait_count(&x->dones, 1, "the command's failure");
	assert_false(x->ok);
	assert_int_equal(x->err.errnum, ECONNRESET);
	assert_int_equal(x->early, 0);
	wait_settled();
	assert_int_equal(counts().destroyed, destroyed + 1);
	assert_int_equal(x->dones, 1);
}

static void test_destroy_from_the_done_callback(void **state)
{
	struct ops_target t = target("", "doomed-done");
	struct exec_rec *x = exec_rec_new();
	x->on_done_do = ACT_DESTROY;
	x->destroy_target = t;
	exec_run(x, &t, "echo bye");
	assert_true(x->ok);
	assert_int_equal(x->destroy_rc, 0);
	assert_string_equal(x->out, "bye\n");
	assert_null(session_find("", "doomed-done"));
	struct call_rec *c = call_rec_new();
	c->destroy_target = target("", "doomed-created");
	struct ops_target tc = target("", "doomed-created");
	create_run(c, &tc, NULL);
	assert_true(c->ok);
	assert_int_equal(c->destroy_rc, 0);
	assert_null(session_find("", "doomed-created"));
	wait_settled();
	barrier_idle();
	assert_int_equal(x->dones, 1);
	assert_int_equal(c->dones, 1);
}

static void test_destroy_while_a_file_operation_waits(void **state)
{
	plan_script("read reply silent");
	struct ops_target t = target("", "doomed-read");
	struct call_rec *c = call_rec_new();
	create_run(c, &t, NULL);
	assert_true(c->ok);
	struct call_rec *r = call_rec_new();
	read_begin(r, &t, "file", 0);
	wait_running("", "doomed-read");
	struct err e;
	assert_int_equal(ops_destroy_session(&t, "by the test", NULL, NULL, &e), 0);
	wait_count(&r->dones, 1, "the read's failure");
	expect_call_error(r, ECONNRESET);
	wait_settled();
}

struct fault_case {
	const char *script;
	const char *op; /* exec, read, write or list */
	int errnum;
};

/* Runs one operation of the case's kind in session t; its error's errnum, 0 on success. */
static int run_op(const struct fault_case *fc, const struct ops_target *t)
{
	if (strcmp(fc->op, "exec") == 0) {
		struct exec_rec *x = exec_rec_new();
		exec_run(x, t, "true");
		assert_int_equal(x->early, 0);
		return x->ok ? 0 : x->err.errnum;
	}
	struct call_rec *r = call_rec_new();
	if (strcmp(fc->op, "read") == 0)
		read_run(r, t, "file", 0);
	else if (strcmp(fc->op, "stream") == 0)
		stream_run(r, t, "file");
	else if (strcmp(fc->op, "write") == 0)
		write_run(r, t, "file", "some bytes");
	else
		list_run(r, t, NULL);
	assert_int_equal(r->early, 0);
	return r->ok ? 0 : r->err.errnum;
}

static void expect_errnum(const struct fault_case *fc, int errnum)
{
	if (errnum != fc->errnum)
		fail_msg("%s: %s, not %s", fc->script, errnum ? err_name(errnum) : "success",
			 err_name(fc->errnum));
}

static void test_an_agent_failing_midway_fails_the_operation_then_the_session(void **state)
{
	const struct fault_case cases[] = {
		{ "exec midstream eof", "exec", ECONNRESET },
		{ "exec midstream oversize", "exec", EREMOTEIO },
		{ "read midstream eof", "read", ECONNRESET },
		{ "read midstream oversize", "read", EREMOTEIO },
		/* What it says of a file does not fit what it sends: cut off at once. */
		{ "read reply noinfo", "read", EREMOTEIO },
		{ "read reply noinfo", "stream", EREMOTEIO },
		{ "read reply overannounce", "read", EREMOTEIO },
		{ "read reply overannounce", "stream", EREMOTEIO },
		{ "read reply twoinfo", "read", EREMOTEIO },
		{ "read reply twoinfo", "stream", EREMOTEIO },
		{ "read reply nottext", "stream", EREMOTEIO },
		{ "write midstream eof", "write", ECONNRESET },
		{ "list reply eof", "list", ECONNRESET },
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		plan_script(cases[i].script);
		struct ops_target t = target("", "midway");
		struct call_rec *c = call_rec_new();
		create_run(c, &t, NULL);
		assert_true(c->ok);
		unsigned destroyed = counts().destroyed;
		expect_errnum(&cases[i], run_op(&cases[i], &t));
		/* The session failed with its sandbox, which is destroyed. */
		struct session *s = session_find("", "midway");
		assert_non_null(s);
		assert_int_equal(s->state, SESSION_FAILED);
		wait_destroyed(destroyed + 1);
		/* It says why once, then it is gone. */
		struct err e;
		assert_null(ops_find_session(&t, &e));
		assert_int_equal(e.errnum, ECONNRESET);
		assert_non_null(strstr(e.msg, "stopped unexpectedly"));
		assert_null(ops_find_session(&t, &e));
		assert_int_equal(e.errnum, ENOENT);
		wait_settled();
	}
}

static void test_an_agents_bad_answer_fails_only_the_operation(void **state)
{
	/* The agent's own error keeps its code; a reply that breaks the protocol is the
	 * agent's fault, not the caller's. */
	const struct fault_case cases[] = {
		{ "exec#1 reply error", "exec", ENOSPC },
		{ "exec#1 midstream malformed", "exec", EREMOTEIO },
		{ "read#1 reply notobject", "read", EREMOTEIO },
		/* It ends before the size it announced: the read failed, the session did not. */
		{ "read#1 reply short", "read", EREMOTEIO },
		{ "read#1 reply short", "stream", EREMOTEIO },
		{ "write#1 reply error", "write", ENOSPC },
		{ "list#1 reply malformed", "list", EREMOTEIO },
	};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		plan_script(cases[i].script);
		struct ops_target t = target("", "bad-answer");
		struct call_rec *c = call_rec_new();
		create_run(c, &t, NULL);
		assert_true(c->ok);
		expect_errnum(&cases[i], run_op(&cases[i], &t));
		/* The session goes on: the same operation works the next time. */
		assert_true(session_ready("", "bad-answer"));
		const struct fault_case fine = { cases[i].script, cases[i].op, 0 };
		expect_errnum(&fine, run_op(&fine, &t));
		assert_int_equal(session_find("", "bad-answer")->running, 0);
		struct err e;
		assert_int_equal(ops_destroy_session(&t, "next case", NULL, NULL, &e), 0);
		wait_settled();
	}
}

static void test_a_failed_session_reports_once_then_starts_afresh(void **state)
{
	plan_script("exec midstream eof");
	struct ops_target t = target("", "again");
	struct exec_rec *first = exec_rec_new();
	exec_run(first, &t, "true");
	assert_false(first->ok);
	assert_int_equal(first->err.errnum, ECONNRESET);
	assert_string_equal(first->out, "fake output\n");
	plan_real();
	/* The next command hears why, the one after gets a new session. */
	unsigned created = counts().created;
	struct exec_rec *second = exec_rec_new();
	exec_run(second, &t, "true");
	assert_false(second->ok);
	assert_int_equal(second->err.errnum, ECONNRESET);
	assert_non_null(strstr(second->err.msg, "stopped unexpectedly"));
	struct exec_rec *third = exec_rec_new();
	exec_run(third, &t, "true");
	assert_true(third->ok);
	assert_int_equal(counts().created, created + 1);
}

static void test_the_real_agent_killed_midway(void **state)
{
	struct ops_target t = target("", "killed");
	struct exec_rec *x = exec_rec_new();
	exec_begin_cmd(x, &t, "echo $$; exec sleep 30");
	wait_count(&x->outputs, 1, "the command's pid");
	pid_t command = (pid_t)atoi(x->out);
	assert_true(command > 0);
	assert_int_equal(kill(fake_driver_last_pid(), SIGKILL), 0);
	wait_count(&x->dones, 1, "the command's failure");
	assert_false(x->ok);
	assert_int_equal(x->err.errnum, ECONNRESET);
	/* What the agent left running is the test's to end. */
	kill(-command, SIGKILL);
	struct err e;
	assert_null(ops_find_session(&t, &e));
	assert_int_equal(e.errnum, ECONNRESET);
	wait_settled();
}

/* --- sessions and validation -------------------------------------------------------- */

static void test_create_session(void **state)
{
	/* What is refused records here if a broken check lets it run. */
	struct call_rec *stray = call_rec_new();
	struct ops_target t = target("", "made");
	struct call_rec *c = call_rec_new();
	create_run(c, &t, NULL);
	assert_true(c->ok);
	assert_int_equal(c->early, 0);
	assert_string_equal(c->session_id, "made");
	assert_ptr_equal(c->session, session_find("", "made"));
	assert_int_equal(c->session->state, SESSION_READY);

	struct call_rec *again = call_rec_new();
	create_run(again, &t, NULL);
	expect_call_error(again, EEXIST);
	/* Another owner may have one by that id. */
	struct ops_target b = target("key-b", "made");
	struct call_rec *other = call_rec_new();
	create_run(other, &b, NULL);
	assert_true(other->ok);

	/* Without an id, a fresh one. */
	struct ops_target anon = target("", NULL);
	struct call_rec *fresh = call_rec_new();
	create_run(fresh, &anon, NULL);
	assert_true(fresh->ok);
	assert_true(strncmp(fresh->session_id, "sess_", 5) == 0);
	assert_true(session_ready("", fresh->session_id));
	assert_int_equal(session_count(), 3);

	/* Its limits, which may only be tighter than the server's, reach the driver. */
	struct session_resources res = { .memory_bytes = 64u << 20, .pids_max = 32 };
	struct ops_session_opts o = { .resources = &res, .idle_timeout_s = 7 };
	struct ops_target lim = target("", "limited");
	struct call_rec *l = call_rec_new();
	create_run(l, &lim, &o);
	assert_true(l->ok);
	struct sandbox_limits got;
	fake_driver_last_limits(&got);
	assert_int_equal(got.memory_bytes, 64u << 20);
	assert_int_equal(got.pids_max, 32);
	assert_int_equal(l->session->idle_timeout_s, 7);

	struct err e;
	struct session_resources more = { .memory_bytes = T.cfg.max_memory + 1 };
	struct ops_session_opts loose = { .resources = &more };
	assert_null(ops_create_session(&lim, &loose, on_call_done, stray, &e));
	assert_int_equal(e.errnum, EINVAL);
	assert_non_null(strstr(e.msg, "memoryBytes"));
	assert_non_null(strstr(e.msg, "SANDBOX_MAX_MEMORY_BYTES"));
}

static void test_invalid_session_ids(void **state)
{
	/* What is refused records here if a broken check lets it run. */
	struct exec_rec *xstray = exec_rec_new();
	struct call_rec *stray = call_rec_new();
	char long_id[130];
	memset(long_id, 'a', 129);
	long_id[129] = '\0';
	const char *const bad[] = {
		"", "with space", "a/b", "semi;colon", "\xc3\xa9", long_id, NULL
	};
	assert_true(session_id_valid("aZ0-_.x"));
	long_id[128] = '\0';
	assert_true(session_id_valid(long_id));
	long_id[128] = 'a';
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		struct ops_target t = target("", bad[i]);
		struct err e;
		struct ops_exec_req req = { .command = "true" };
		e.errnum = 0;
		assert_null(ops_execute(&t, &req, &exec_cbs, xstray, &e));
		assert_int_equal(e.errnum, EINVAL);
		e.errnum = 0;
		assert_null(ops_write_file(&t, "f", one_byte(), 1, -1, on_call_done, stray, &e));
		assert_int_equal(e.errnum, EINVAL);
		e.errnum = 0;
		assert_null(ops_read_file(&t, "f", 0, on_call_done, stray, &e));
		assert_int_equal(e.errnum, EINVAL);
		e.errnum = 0;
		assert_null(ops_list_files(&t, NULL, false, on_call_done, stray, &e));
		assert_int_equal(e.errnum, EINVAL);
		assert_int_equal(ops_destroy_session(&t, "x", NULL, NULL, &e), -EINVAL);
		assert_int_equal(ops_cancel_exec(&t, "exec_000000000000", &e), -EINVAL);
		if (bad[i]) {
			e.errnum = 0;
			assert_null(ops_create_session(&t, NULL, on_call_done, stray, &e));
			assert_int_equal(e.errnum, EINVAL);
		}
	}
	barrier_idle();
	assert_int_equal(session_count(), 0);
}

static void test_invalid_environments(void **state)
{
	/* What is refused records here if a broken check lets it run. */
	struct exec_rec *xstray = exec_rec_new();
	struct call_rec *stray = call_rec_new();
	json_t *bad[] = {
		json_pack("{s:s}", "A=B", "x"),
		json_pack("{s:s}", "", "x"),
		json_pack("{s:i}", "A", 1),
		json_pack("{s:n}", "A"),
		json_string("A=1"),
		json_pack("[s]", "A=1"),
	};
	struct ops_target t = target("", "env-check");
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		struct err e;
		e.errnum = 0;
		assert_int_equal(ops_check_env(bad[i], &e), -EINVAL);
		struct ops_exec_req req = { .command = "true", .env = bad[i] };
		e.errnum = 0;
		assert_null(ops_execute(&t, &req, &exec_cbs, xstray, &e));
		assert_int_equal(e.errnum, EINVAL);
		struct ops_session_opts o = { .env = bad[i] };
		e.errnum = 0;
		assert_null(ops_create_session(&t, &o, on_call_done, stray, &e));
		assert_int_equal(e.errnum, EINVAL);
		json_decref(bad[i]);
	}
	struct err e;
	assert_int_equal(ops_check_env(NULL, &e), 0);
	json_t *null = json_null();
	assert_int_equal(ops_check_env(null, &e), 0);
	json_t *good = json_pack("{s:s, s:s}", "A", "", "LONG_NAME_1", "x=y");
	assert_int_equal(ops_check_env(good, &e), 0);
	json_decref(good);
	barrier_idle();
	assert_int_equal(session_count(), 0);
}

static void test_invalid_requests(void **state)
{
	/* What is refused records here if a broken check lets it run. */
	struct exec_rec *xstray = exec_rec_new();
	struct call_rec *stray = call_rec_new();
	struct ops_target t = target("", "req-check");
	struct err e;
	struct ops_exec_req none = { 0 };
	assert_null(ops_execute(&t, &none, &exec_cbs, xstray, &e));
	assert_int_equal(e.errnum, EINVAL);
	struct ops_exec_req empty = { .command = "" };
	assert_null(ops_execute(&t, &empty, &exec_cbs, xstray, &e));
	assert_int_equal(e.errnum, EINVAL);
	json_t *not_array = json_string("x");
	struct ops_exec_req args1 = { .command = "echo", .args = not_array };
	assert_null(ops_execute(&t, &args1, &exec_cbs, xstray, &e));
	assert_int_equal(e.errnum, EINVAL);
	json_decref(not_array);
	json_t *not_strings = json_pack("[s,i]", "x", 1);
	struct ops_exec_req args2 = { .command = "echo", .args = not_strings };
	assert_null(ops_execute(&t, &args2, &exec_cbs, xstray, &e));
	assert_int_equal(e.errnum, EINVAL);
	assert_non_null(strstr(e.msg, "args[1]"));
	json_decref(not_strings);
	struct ops_exec_req week = { .command = "true",
				     .timeout_ms = 604800001ull,
				     .has_timeout = true };
	assert_null(ops_execute(&t, &week, &exec_cbs, xstray, &e));
	assert_int_equal(e.errnum, EINVAL);

	/* A write takes its data over even when it refuses. */
	assert_null(ops_write_file(&t, "f", one_byte(), 1, 010000, on_call_done, stray, &e));
	assert_int_equal(e.errnum, EINVAL);
	assert_null(ops_write_file(&t, "", one_byte(), 1, -1, on_call_done, stray, &e));
	assert_int_equal(e.errnum, EINVAL);
	assert_null(ops_write_file(&t, NULL, one_byte(), 1, -1, on_call_done, stray, &e));
	assert_int_equal(e.errnum, EINVAL);
	assert_null(ops_read_file(&t, "", 0, on_call_done, stray, &e));
	assert_int_equal(e.errnum, EINVAL);
	barrier_idle();
	assert_int_equal(session_count(), 0);
}

/* --- destroying a session from inside a callback ----------------------------------- */

/* Destroying the session from inside on_output or on_start ends the command under the
 * callback (the connection's end fails its operations at once): the command fails once, and
 * its handle outlives the callback that ended it. */
static void test_destroy_from_the_output_callback(void **state)
{
	struct ops_target t = target("", "doomed-output");
	struct exec_rec *x = exec_rec_new();
	x->on_output_do = ACT_DESTROY;
	x->destroy_target = t;
	exec_begin_cmd(x, &t, "echo hello; sleep 30");
	wait_count(&x->dones, 1, "the command's failure");
	assert_int_equal(x->destroy_rc, 0);
	assert_false(x->ok);
	assert_int_equal(x->err.errnum, ECONNRESET);
	assert_int_equal(x->outputs, 1);
	assert_null(session_find("", "doomed-output"));
	wait_settled();
	assert_int_equal(x->dones, 1);
}

static void test_destroy_from_the_start_callback(void **state)
{
	struct ops_target t = target("", "doomed-start");
	struct exec_rec *x = exec_rec_new();
	x->on_start_do = ACT_DESTROY;
	x->destroy_target = t;
	exec_begin_cmd(x, &t, "sleep 30");
	wait_count(&x->dones, 1, "the command's failure");
	assert_int_equal(x->destroy_rc, 0);
	assert_false(x->ok);
	assert_int_equal(x->err.errnum, ECONNRESET);
	assert_int_equal(x->starts, 1);
	assert_null(session_find("", "doomed-start"));
	wait_settled();
	assert_int_equal(x->dones, 1);
}

/* A waiter that destroys the session from its callback (here the creation's done) leaves
 * the waiters after it an error, not the destroyed session. */
static void test_a_waiter_destroying_the_session_fails_the_others(void **state)
{
	struct fake_plan hold = { .hold = true };
	fake_driver_plan(&hold);
	unsigned calls = counts().calls;
	struct ops_target t = target("", "destroyed-by-a-waiter");
	struct call_rec *c = call_rec_new();
	c->destroy_target = t;
	struct err e;
	call_started(c, ops_create_session(&t, NULL, on_call_done, c, &e), &e);
	wait_held(calls + 1);
	struct exec_rec *x = exec_rec_new();
	exec_begin_cmd(x, &t, "true");
	barrier_idle();
	fake_driver_release();
	wait_count(&c->dones, 1, "the creation");
	wait_count(&x->dones, 1, "the command's failure");
	assert_true(c->ok);
	assert_int_equal(c->destroy_rc, 0);
	assert_false(x->ok);
	assert_int_equal(x->early, 0);
	wait_settled();
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: %s SANDBOX_AGENT FAKE_AGENT\n", argv[0]);
		return 2;
	}
	agent_bin = argv[1];
	fake_agent_bin = argv[2];
#define T_(fn) cmocka_unit_test_teardown(fn, teardown)
	const struct CMUnitTest tests[] = {
		T_(test_execute_creates_the_session_and_reports_the_command),
		T_(test_a_signal_ends_the_command),
		T_(test_a_missing_command_is_reported),
		T_(test_output_is_never_cut_inside_a_character),
		T_(test_the_session_environment_is_under_the_request_environment),
		T_(test_stdin_is_sent_then_closed),
		T_(test_an_oom_kill_meanwhile_is_reported),
		T_(test_cancel_a_running_command),
		T_(test_cancel_before_the_command_started),
		T_(test_cancel_by_id),
		T_(test_detach_while_running_cancels_without_callbacks),
		T_(test_detach_before_the_start_does_nothing),
		T_(test_detach_while_the_session_is_created),
		T_(test_teardowns_count_against_the_cap),
		T_(test_destroy_done_after_the_sandbox),
		T_(test_detach_from_the_output_callback),
		T_(test_a_command_times_out),
		T_(test_a_running_command_keeps_its_session_alive),
		T_(test_write_read_and_list_files),
		T_(test_reading_or_listing_needs_the_session),
		T_(test_reading_beyond_max_bytes),
		T_(test_an_agent_sending_more_than_max_bytes_is_stopped),
		T_(test_a_streamed_read_waits_for_its_consumer),
		T_(test_a_file_operation_times_out),
		T_(test_detach_a_file_operation),
		T_(test_owners_do_not_see_each_other),
		T_(test_an_admin_reaches_the_one_other_owners_session),
		T_(test_an_admin_means_its_own_session_first),
		T_(test_an_admin_id_of_several_owners_is_ambiguous),
		T_(test_an_admin_without_a_match_creates_its_own),
		T_(test_creation_beyond_max_sessions_fails),
		T_(test_a_failing_driver_fails_every_waiter),
		T_(test_destroy_while_the_session_is_created),
		T_(test_an_agent_failing_its_first_reply_fails_the_creation),
		T_(test_an_unknown_template_is_the_callers_error),
		T_(test_destroy_while_a_command_runs),
		T_(test_destroy_from_the_done_callback),
		T_(test_destroy_while_a_file_operation_waits),
		T_(test_an_agent_failing_midway_fails_the_operation_then_the_session),
		T_(test_an_agents_bad_answer_fails_only_the_operation),
		T_(test_a_failed_session_reports_once_then_starts_afresh),
		T_(test_the_real_agent_killed_midway),
		T_(test_create_session),
		T_(test_invalid_session_ids),
		T_(test_invalid_environments),
		T_(test_invalid_requests),
		T_(test_destroy_from_the_output_callback),
		T_(test_destroy_from_the_start_callback),
		T_(test_a_waiter_destroying_the_session_fails_the_others),
	};
#undef T_
	if (getenv("SESSION_OPS_FILTER"))
		cmocka_set_test_filter(getenv("SESSION_OPS_FILTER"));
	return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
