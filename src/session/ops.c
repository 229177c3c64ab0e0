/* ops: session operations for every transport. The semantics are the REST API's (see
 * docs/api.md): implicit creation, an admin's reach into other keys' sessions, the session's
 * environment under the request's, a host watchdog beyond the command's own timeout,
 * UTF-8-safe output chunks, OOM detection, and the exec_message metrics, counted here once
 * per operation whichever transport asked. */
#include "session/ops.h"

#include <errno.h>
#include <event2/buffer.h>
#include <signal.h>
#include <stdlib.h>
#include <strings.h>
#include <string.h>
#include <time.h>

#include "session/quota.h"
#include "guest/event.h"
#include "guest/proto.h"
#include "metrics/metrics.h"
#include "net/net.h"
#include "session/snapshot.h"
#include "session/volume.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/text.h"
#include "util/time.h"

/* Extra time the host gives the agent beyond a command's own timeout before giving up. */
#define EXEC_WATCHDOG_SLACK_MS 30000
/* The longest command timeout the agent accepts. */
#define EXEC_MAX_TIMEOUT_MS 604800000ull

static struct {
	struct event_base *base;
	const struct config *cfg;
} ops_mod;

void ops_init(struct event_base *base, const struct config *cfg)
{
	ops_mod.base = base;
	ops_mod.cfg = cfg;
}

static void target_copy(struct ops_target *dst, const struct ops_target *t)
{
	dst->owner = xstrdup(t->owner ? t->owner : "");
	dst->session_id = t->session_id ? xstrdup(t->session_id) : session_new_id();
	dst->template_name = t->template_name ? xstrdup(t->template_name) : NULL;
	dst->any_owner = t->any_owner;
	dst->anonymous = t->anonymous;
	dst->any_path = t->any_path;
}

static void target_free(struct ops_target *t)
{
	free((char *)t->owner);
	free((char *)t->session_id);
	free((char *)t->template_name);
}

struct id_match {
	const char *id;
	struct session *found;
	unsigned n;
};

static void match_id(struct session *s, void *arg)
{
	struct id_match *m = arg;
	if (strcmp(s->id, m->id) == 0 && s->state != SESSION_DESTROYING &&
	    s->state != SESSION_GONE) {
		m->found = s;
		m->n++;
	}
}

/* Whose session t->session_id means (see ops.h): the caller's, or for an admin the one other
 * owner's session by that id. The owner returned may point into that session. */
static int target_owner(const struct ops_target *t, const char **ret_owner, struct err *err)
{
	const char *own = t->owner ? t->owner : "";
	if (!t->any_owner || session_find(own, t->session_id)) {
		*ret_owner = own;
		return 0;
	}
	struct id_match m = { .id = t->session_id };
	session_foreach(NULL, match_id, &m);
	/* EEXIST for its 409: none of them is more the admin's than the others. */
	if (m.n > 1)
		return err_set(
			err, EEXIST,
			"%u sessions of different keys are named `%s`; use one of those keys", m.n,
			t->session_id);
	*ret_owner = m.n == 1 ? m.found->owner : own;
	return 0;
}

/* The session the target names, in whatever state, or NULL with err set. */
static struct session *target_session(const struct ops_target *t, struct err *err)
{
	const char *owner = NULL;
	if (target_owner(t, &owner, err) < 0)
		return NULL;
	struct session *s = session_find(owner, t->session_id);
	if (!s)
		err_set(err, ENOENT, "Session `%s` not found", t->session_id);
	return s;
}

struct session *ops_find_session(const struct ops_target *t, struct err *err)
{
	struct session *s = target_session(t, err);
	if (!s)
		return NULL;
	if (s->state == SESSION_FAILED) {
		/* Report why once, then forget it: the next request starts afresh. */
		err_copy(err, &s->failure);
		session_destroy(s, "failed");
		return NULL;
	}
	if (s->state != SESSION_READY || s->transition) {
		err_set(err, EBUSY, "Session `%s` is %s", t->session_id,
			s->transition ? "being paused or resumed" : session_state_name(s->state));
		return NULL;
	}
	session_touch(s);
	return s;
}

static int check_target(const struct ops_target *t, bool id_optional, struct err *err)
{
	if (!t->session_id && id_optional)
		return 0;
	if (!t->session_id || !session_id_valid(t->session_id))
		return err_set(err, EINVAL,
			       "Invalid session id: use 1-128 letters, digits, '-', '_' or '.'");
	return 0;
}

/* Takes the caller's unit of kind k for an operation, unless its transport holds it already
 * (t->admitted). A refusal is EAGAIN (429) whether the caller's quota or the server's cap was
 * reached. */
static int admit(const struct ops_target *t, enum quota_kind k, bool *held, struct err *err)
{
	*held = false;
	if (t->admitted)
		return 0;
	if (quota_admit(t->owner, k, err) < 0) {
		err->errnum = EAGAIN;
		return -EAGAIN;
	}
	*held = true;
	return 0;
}

/* Runs fn(arg) on the next turn of the loop, so that no callback fires before the call that
 * started an operation has returned its handle. */
static struct event *defer(event_callback_fn fn, void *arg)
{
	struct event *ev = evtimer_new(ops_mod.base, fn, arg);
	struct timeval tv = { 0, 0 };
	evtimer_add(ev, &tv);
	return ev;
}

/* --- execute ------------------------------------------------------------------------ */

enum exec_phase { EXEC_WAITING, EXEC_RUNNING, EXEC_DONE };

struct ops_exec {
	enum exec_phase phase;
	struct ops_target t; /* strings owned */
	json_t *request;     /* to the agent */
	uint8_t *stdin_data;
	size_t stdin_len;
	bool has_stdin;
	uint64_t timeout_ms;
	const struct ops_exec_cbs *cbs;
	void *arg;
	struct event *start_ev;
	struct session *s;
	struct session_exec *reg;
	struct guest_op *op;
	uint64_t oom_before;
	uint64_t t0_us;
	/* bytes held back per stream so that no chunk ends inside a UTF-8 character */
	uint8_t carry[2][4];
	size_t carry_len[2];
	bool paused;
	size_t unacked;
	bool cancel_requested;
	bool detached;
	int in_cb;       /* user callbacks on the stack: frees wait for them */
	bool finished;   /* the terminal callback ran inside another: free when it returns */
	bool quota_held; /* a unit of QUOTA_COMMANDS, given back when the handle goes */
	char exec_id[25];
};

static void exec_free(struct ops_exec *x)
{
	if (x->start_ev)
		event_free(x->start_ev);
	if (x->s)
		session_unref(x->s);
	json_decref(x->request);
	free(x->stdin_data);
	if (x->quota_held)
		quota_release(x->t.owner, QUOTA_COMMANDS);
	target_free(&x->t);
	free(x);
}

/* Gives back what a running command holds in its session. */
static void exec_release(struct ops_exec *x)
{
	if (x->reg)
		session_exec_remove(x->s, x->reg);
	x->reg = NULL;
	if (x->s && x->phase == EXEC_RUNNING)
		session_op_end(x->s);
	x->op = NULL;
}

/* The handle's end: now, or when the outermost callback on the stack returns (a caller may
 * destroy the session from on_start or on_output, which ends the command under it). */
static void exec_finish(struct ops_exec *x)
{
	if (x->in_cb)
		x->finished = true;
	else
		exec_free(x);
}

/* Returns from a user callback; true when x is gone. */
static bool exec_cb_return(struct ops_exec *x)
{
	if (--x->in_cb || !x->finished)
		return false;
	exec_free(x);
	return true;
}

static void exec_fail(struct ops_exec *x, const struct err *err)
{
	x->phase = EXEC_DONE;
	x->in_cb++;
	x->cbs->on_done(x, NULL, err, x->arg);
	x->in_cb--;
	exec_finish(x);
}

/* Returns true when x is gone. */
static bool exec_deliver(struct ops_exec *x, int si, const uint8_t *buf, size_t len)
{
	if (len == 0 || !x->cbs->on_output || x->phase == EXEC_DONE)
		return false;
	size_t tlen;
	_cleanup_free_ char *text = utf8_sanitize(buf, len, &tlen);
	x->in_cb++;
	x->cbs->on_output(x, si ? OPS_STDERR : OPS_STDOUT, text, tlen, x->arg);
	return exec_cb_return(x);
}

/* The caller detached from inside a callback: finish that now that it returned. */
static bool exec_detached_now(struct ops_exec *x)
{
	if (!x->detached || x->in_cb)
		return false;
	if (x->op) {
		/* Credit held back for a paused consumer goes back: the agent must be able to
		 * finish sending what it has before it sees the cancel. */
		if (x->unacked)
			guest_op_consumed(x->op, x->unacked);
		guest_op_detach(x->op);
	}
	exec_release(x);
	x->phase = EXEC_DONE;
	exec_free(x);
	return true;
}

static void exec_on_data(struct guest_op *op, uint8_t type, const uint8_t *data, size_t len,
			 void *arg)
{
	struct ops_exec *x = arg;
	if (type == GUEST_FILEDATA) {
		guest_op_violation(op, "file contents for a command");
		return;
	}
	int si = type == GUEST_STDERR ? 1 : 0;

	/* Join the held-back bytes with this chunk, hold back a new incomplete tail. */
	size_t total = x->carry_len[si] + len;
	_cleanup_free_ uint8_t *buf = xmalloc(total);
	memcpy(buf, x->carry[si], x->carry_len[si]);
	memcpy(buf + x->carry_len[si], data, len);
	size_t tail = utf8_incomplete_tail(buf, total);
	memcpy(x->carry[si], buf + total - tail, tail);
	x->carry_len[si] = tail;
	if (exec_deliver(x, si, buf, total - tail) || x->phase == EXEC_DONE)
		return;
	if (x->paused || x->detached)
		x->unacked += len;
	else
		guest_op_consumed(op, len);
	exec_detached_now(x);
}

static void exec_on_guest_done(struct guest_op *op, json_t *result, const struct err *err,
			       void *arg)
{
	struct ops_exec *x = arg;
	/* A stream that ended inside a character shows its last bytes as replacement chars. */
	for (int si = 0; si < 2; si++) {
		size_t n = x->carry_len[si];
		x->carry_len[si] = 0;
		if (exec_deliver(x, si, x->carry[si], n) || x->phase == EXEC_DONE)
			return;
	}
	double duration = (double)(time_mono_us() - x->t0_us) / 1000.0;
	metrics_add(metrics_daemon.exec_message_total, 1, "execute");
	metrics_observe(metrics_daemon.exec_message_duration, duration / 1000.0, "execute");
	exec_release(x);
	if (x->detached) {
		x->phase = EXEC_DONE;
		exec_finish(x);
		return;
	}
	if (err && err->errnum == ECONNRESET && x->s) {
		struct err lost;
		session_lost_reason(x->s, x->oom_before, err, &lost);
		exec_fail(x, &lost);
		return;
	}
	if (err) {
		exec_fail(x, err);
		return;
	}
	struct ops_exec_result r = { .exec_id = x->exec_id,
				     .session_id = x->s->id,
				     .duration_ms = duration };
	json_t *code = json_object_get(result, "exitCode");
	if (json_is_integer(code)) {
		r.has_exit_code = true;
		r.exit_code = (int)json_integer_value(code);
	}
	r.signal = json_string_value(json_object_get(result, "signal"));
	r.timed_out = json_is_true(json_object_get(result, "timedOut"));
	r.cancelled = json_is_true(json_object_get(result, "cancelled"));
	const struct driver *d = session_driver();
	uint64_t ooms = d->oom_kills && x->s->sb ? d->oom_kills(x->s->sb) : 0;
	r.oom_killed = ooms > x->oom_before;
	if (r.oom_killed && ooms > x->s->oom_told)
		x->s->oom_told = ooms;
	x->phase = EXEC_DONE;
	x->in_cb++;
	x->cbs->on_done(x, &r, NULL, x->arg);
	x->in_cb--;
	exec_finish(x);
}

static const struct guest_op_cbs exec_guest_cbs = { .on_data = exec_on_data,
						    .on_done = exec_on_guest_done };

static void exec_on_session(struct session *s, const struct err *err, void *arg)
{
	struct ops_exec *x = arg;
	if (x->detached) {
		exec_free(x);
		return;
	}
	if (err) {
		exec_fail(x, err);
		return;
	}
	if (x->cancel_requested) {
		struct err e;
		err_set(&e, ECANCELED, "the command was cancelled before it started");
		exec_fail(x, &e);
		return;
	}
	x->s = s;
	session_ref(s);

	/* The session's environment under the request's. */
	json_t *env = json_deep_copy(s->env);
	json_t *req_env = json_object_get(x->request, "env");
	if (req_env)
		json_object_update(env, req_env);
	json_object_set_new(x->request, "env", env);

	struct err e;
	if (x->t.any_path)
		json_object_set_new(x->request, "anyPath", json_true());
	x->op = guest_op_start(s->conn, x->request, &exec_guest_cbs, x, &e);
	if (!x->op) {
		exec_fail(x, &e);
		return;
	}
	const struct driver *d = session_driver();
	x->oom_before = d->oom_kills && s->sb ? d->oom_kills(s->sb) : 0;
	x->phase = EXEC_RUNNING;
	session_op_begin(s);
	x->reg = session_exec_add(s, x->op);
	memcpy(x->exec_id, x->reg->id, sizeof(x->exec_id));
	x->t0_us = time_mono_us();
	if (x->timeout_ms)
		guest_op_set_timeout(x->op, x->timeout_ms + EXEC_WATCHDOG_SLACK_MS, "execute");
	if (x->has_stdin) {
		guest_op_send(x->op, x->stdin_data, x->stdin_len);
		guest_op_eof(x->op);
	}
	if (x->cbs->on_start) {
		x->in_cb++;
		x->cbs->on_start(x, x->arg);
		if (exec_cb_return(x) || x->phase == EXEC_DONE)
			return;
		exec_detached_now(x);
	}
}

static void exec_start(evutil_socket_t fd, short what, void *arg)
{
	struct ops_exec *x = arg;
	event_free(x->start_ev);
	x->start_ev = NULL;
	/* Resolved when it runs, not when asked: sessions may have come and gone meanwhile. */
	const char *owner = NULL;
	struct err e;
	if (session_closing()) {
		err_set(&e, ESHUTDOWN, "the server is shutting down");
		exec_fail(x, &e);
		return;
	}
	if (target_owner(&x->t, &owner, &e) < 0) {
		exec_fail(x, &e);
		return;
	}
	struct session_create_opts opts = { .template_name = x->t.template_name };
	session_get_or_create(owner, x->t.session_id, &opts, exec_on_session, x, NULL);
}

/* Whether a command string needs a shell: anything beyond plain words. */
static bool needs_shell(const char *cmd)
{
	return strpbrk(cmd, " \t\n|&;<>()$`\\\"'*?[]#~=%{}") != NULL;
}

/* The guest's "user" for a command: absent for the command user. */
static int check_user(const struct ops_exec_req *req, struct err *err)
{
	if (!req->user || strcmp(req->user, "user") == 0 || strcmp(req->user, "root") == 0)
		return 0;
	return err_set(err, EINVAL, "\"user\" must be \"root\" or \"user\"");
}

static void set_user(json_t *request, const struct ops_exec_req *req)
{
	if (req->user && strcmp(req->user, "root") == 0)
		json_object_set_new(request, "user", json_string("root"));
}

static int build_argv(const struct ops_exec_req *req, json_t **ret, struct err *err)
{
	if (check_user(req, err) < 0)
		return -1;
	json_t *argv = json_array();
	if (req->args && !json_is_null(req->args)) {
		if (!json_is_array(req->args)) {
			json_decref(argv);
			return err_set(err, EINVAL, "\"args\" must be an array of strings");
		}
		json_array_append_new(argv, json_string(req->command));
		size_t i;
		json_t *a;
		json_array_foreach (req->args, i, a) {
			if (!json_is_string(a)) {
				json_decref(argv);
				return err_set(err, EINVAL, "\"args[%zu]\" must be a string", i);
			}
			json_array_append(argv, a);
		}
	} else if (needs_shell(req->command)) {
		json_array_append_new(argv, json_string("/bin/sh"));
		json_array_append_new(argv, json_string("-c"));
		json_array_append_new(argv, json_string(req->command));
	} else {
		json_array_append_new(argv, json_string(req->command));
	}
	*ret = argv;
	return 0;
}

int ops_check_env(json_t *env, struct err *err)
{
	if (!env || json_is_null(env))
		return 0;
	if (!json_is_object(env))
		return err_set(err, EINVAL, "\"env\" must be an object of strings");
	const char *k;
	json_t *v;
	json_object_foreach (env, k, v) {
		if (!json_is_string(v) || !*k || strchr(k, '='))
			return err_set(err, EINVAL,
				       "\"env.%s\" must be a string (and a valid name)", k);
	}
	return 0;
}

struct ops_exec *ops_execute(const struct ops_target *t, const struct ops_exec_req *req,
			     const struct ops_exec_cbs *cbs, void *arg, struct err *err)
{
	if (check_target(t, false, err) < 0)
		return NULL;
	if (!req->command || !*req->command) {
		err_set(err, EINVAL, "\"command\" is required");
		return NULL;
	}
	uint64_t timeout = req->has_timeout ? req->timeout_ms : ops_mod.cfg->default_timeout_ms;
	if (timeout > EXEC_MAX_TIMEOUT_MS) {
		err_set(err, EINVAL, "\"timeout\" must be at most %llu ms (a week)",
			(unsigned long long)EXEC_MAX_TIMEOUT_MS);
		return NULL;
	}
	if (ops_check_env(req->env, err) < 0)
		return NULL;
	json_t *argv = NULL;
	if (build_argv(req, &argv, err) < 0)
		return NULL;
	bool held;
	if (admit(t, QUOTA_COMMANDS, &held, err) < 0) {
		json_decref(argv);
		return NULL;
	}

	struct ops_exec *x = xcalloc(1, sizeof(*x));
	x->quota_held = held;
	x->cbs = cbs;
	x->arg = arg;
	target_copy(&x->t, t);
	x->timeout_ms = timeout;
	x->request = json_pack("{s:s, s:o, s:I, s:b}", "op", "exec", "argv", argv, "timeoutMs",
			       (json_int_t)timeout, "stdin", req->has_stdin);
	if (req->env && json_is_object(req->env))
		json_object_set(x->request, "env", req->env);
	if (req->cwd)
		json_object_set_new(x->request, "cwd", json_string(req->cwd));
	set_user(x->request, req);
	if (req->has_stdin) {
		x->has_stdin = true;
		x->stdin_len = req->stdin_len;
		x->stdin_data = xmalloc(req->stdin_len + 1);
		if (req->stdin_len)
			memcpy(x->stdin_data, req->stdin_data, req->stdin_len);
	}
	x->start_ev = defer(exec_start, x);
	return x;
}

void ops_exec_cancel(struct ops_exec *x)
{
	if (x->phase == EXEC_WAITING)
		x->cancel_requested = true;
	else if (x->phase == EXEC_RUNNING && x->op)
		guest_op_cancel(x->op);
}

void ops_exec_detach(struct ops_exec *x)
{
	if (x->detached || x->phase == EXEC_DONE)
		return;
	x->detached = true;
	if (x->phase == EXEC_WAITING) {
		/* Not asked for a session yet: nothing else knows of it. Otherwise the session's
		 * answer frees it. */
		if (x->start_ev && !x->in_cb)
			exec_free(x);
		return;
	}
	exec_detached_now(x);
}

void ops_exec_pause(struct ops_exec *x)
{
	x->paused = true;
}

void ops_exec_resume(struct ops_exec *x)
{
	x->paused = false;
	if (x->op && x->unacked) {
		guest_op_consumed(x->op, x->unacked);
		x->unacked = 0;
	}
}

const char *ops_exec_id(const struct ops_exec *x)
{
	return x->exec_id;
}

struct session *ops_exec_session(const struct ops_exec *x)
{
	return x->phase == EXEC_RUNNING ? x->s : NULL;
}

/* --- watch -------------------------------------------------------------------------- */

static int check_path(const char *path, struct err *err);

/* How long an agent has to end a watch once asked (cancel, timeout, caller gone). */
#define WATCH_END_GRACE_MS 10000

struct ops_watch {
	struct ops_target t; /* strings owned */
	json_t *request;     /* to the agent */
	uint64_t timeout_ms;
	const struct ops_watch_cbs *cbs;
	void *arg;
	struct event *start_ev;
	struct event *timer; /* timeout_ms */
	struct session *s;
	struct guest_op *op;
	bool ready;     /* the agent's first event came */
	bool detached;  /* no callbacks any more */
	bool ending;    /* the agent was asked to end it */
	bool timed_out; /* by timeout_ms */
	bool paused;
	bool quota_held; /* a unit of QUOTA_WATCHES */
	uint64_t unacked;
	uint64_t events, overflows;
};

static unsigned watches_open; /* in agents (the watches_active gauge) */

static void watch_free(struct ops_watch *w)
{
	if (w->start_ev)
		event_free(w->start_ev);
	if (w->timer)
		event_free(w->timer);
	if (w->s) {
		if (w->op) {
			session_op_end(w->s);
			watches_open--;
			metrics_set(metrics_daemon.watches_active, watches_open);
		}
		session_unref(w->s);
	}
	json_decref(w->request);
	if (w->quota_held)
		quota_release(w->t.owner, QUOTA_WATCHES);
	target_free(&w->t);
	free(w);
}

static void watch_finish(struct ops_watch *w, const struct ops_watch_result *r,
			 const struct err *err)
{
	bool call = !w->detached;
	w->detached = true;
	if (call)
		w->cbs->on_done(w, r, err, w->arg);
	watch_free(w);
}

/* Asks the agent to end the watch (its RESULT follows), giving it a grace period. */
static void watch_end(struct ops_watch *w)
{
	if (w->ending || !w->op)
		return;
	w->ending = true;
	if (w->unacked) {
		guest_op_consumed(w->op, w->unacked);
		w->unacked = 0;
	}
	guest_op_cancel(w->op);
	guest_op_set_timeout(w->op, WATCH_END_GRACE_MS, "ending a watch");
}

static void watch_on_event(struct guest_op *op, json_t *raw, size_t len, void *arg)
{
	struct ops_watch *w = arg;
	/* A watch's events in their one shape (guest/event.h): what reaches a client is built
	 * from the checked values, whatever the guest client let through. */
	json_auto_t *ev = NULL;
	struct err e;
	if (guest_event_check(raw, len, &ev, &e) < 0) {
		guest_op_violation(op, "a watch event that is not one");
		return;
	}
	const char *type = json_string_value(json_object_get(ev, "type"));
	bool is_ready = strcmp(type, "ready") == 0;
	if (is_ready == w->ready) {
		/* ready comes once, and first */
		guest_op_violation(op, "watch events out of order");
		return;
	}
	if (w->paused && !w->ending)
		w->unacked += len;
	else
		guest_op_consumed(op, len);
	if (w->detached)
		return;
	if (is_ready) {
		w->ready = true;
		if (!w->ending)
			guest_op_clear_timeout(op);
		if (w->cbs->on_ready)
			w->cbs->on_ready(
				w, (uint64_t)json_integer_value(json_object_get(ev, "watches")),
				w->arg);
		return;
	}
	if (strcmp(type, "overflow") == 0)
		w->overflows++;
	else
		w->events++;
	metrics_add(metrics_daemon.watch_events_total, 1, type);
	w->cbs->on_event(w, ev, w->arg);
}

static void watch_on_guest_done(struct guest_op *op, json_t *result, const struct err *err,
				void *arg)
{
	struct ops_watch *w = arg;
	metrics_add(metrics_daemon.exec_message_total, 1, "watch");
	if (err && err->errnum == ETIMEDOUT && w->ending && w->ready) {
		/* The agent did not end it in time: the host has given up on it. */
		log_warn("ops", "a sandbox agent did not end a watch of session %s in time",
			 w->t.session_id);
	}
	if (err && err->errnum == ENOSPC) {
		/* The watch limit (the tree's, or the system's): the request asked too much. */
		struct err e;
		err_set(&e, E2BIG, "%s", err->msg);
		watch_finish(w, NULL, &e);
		return;
	}
	if (err) {
		watch_finish(w, NULL, err);
		return;
	}
	struct ops_watch_result r = { .events = w->events,
				      .overflows = w->overflows,
				      .timed_out = w->timed_out,
				      .gone = json_is_true(json_object_get(result, "gone")) };
	watch_finish(w, &r, NULL);
}

static const struct guest_op_cbs watch_guest_cbs = { .on_event = watch_on_event,
						     .on_done = watch_on_guest_done };

static void watch_on_timer(evutil_socket_t fd, short what, void *arg)
{
	struct ops_watch *w = arg;
	w->timed_out = true;
	watch_end(w);
}

static void watch_start(evutil_socket_t fd, short what, void *arg)
{
	struct ops_watch *w = arg;
	event_free(w->start_ev);
	w->start_ev = NULL;
	struct err e;
	struct session *s = ops_find_session(&w->t, &e);
	if (!s) {
		watch_finish(w, NULL, &e);
		return;
	}
	w->s = s;
	session_ref(s);
	if (w->t.any_path)
		json_object_set_new(w->request, "anyPath", json_true());
	w->op = guest_op_start(s->conn, w->request, &watch_guest_cbs, w, &e);
	if (!w->op) {
		watch_finish(w, NULL, &e);
		return;
	}
	session_op_begin(s);
	watches_open++;
	metrics_set(metrics_daemon.watches_active, watches_open);
	/* An agent that never says the watch is in place holds nothing for long. */
	guest_op_set_timeout(w->op, ops_mod.cfg->file_op_timeout_ms, "watch");
	if (w->timeout_ms) {
		w->timer = evtimer_new(ops_mod.base, watch_on_timer, w);
		struct timeval tv = { .tv_sec = (time_t)(w->timeout_ms / 1000),
				      .tv_usec = (suseconds_t)(w->timeout_ms % 1000) * 1000 };
		evtimer_add(w->timer, &tv);
	}
}

static int check_watch_events(json_t *events, struct err *err)
{
	if (!events || json_is_null(events))
		return 0;
	static const char *const kinds[] = { "create", "write", "remove", "rename", "chmod" };
	if (!json_is_array(events) || json_array_size(events) == 0)
		return err_set(err, EINVAL,
			       "\"events\" must be a non-empty list of create, write, remove, "
			       "rename, chmod");
	size_t i;
	json_t *v;
	json_array_foreach (events, i, v) {
		const char *k = json_string_value(v);
		size_t j = 0;
		while (k && j < ARRAY_SIZE(kinds) && strcmp(k, kinds[j]) != 0)
			j++;
		if (!k || j == ARRAY_SIZE(kinds))
			return err_set(err, EINVAL,
				       "\"events\" may hold only create, write, remove, rename and "
				       "chmod");
	}
	return 0;
}

struct ops_watch *ops_watch(const struct ops_target *t, const struct ops_watch_req *req,
			    const struct ops_watch_cbs *cbs, void *arg, struct err *err)
{
	if (check_target(t, false, err) < 0 || check_path(req->path, err) < 0 ||
	    check_watch_events(req->events, err) < 0)
		return NULL;
	if (req->timeout_ms > EXEC_MAX_TIMEOUT_MS) {
		err_set(err, EINVAL, "\"timeoutMs\" must be at most %llu",
			(unsigned long long)EXEC_MAX_TIMEOUT_MS);
		return NULL;
	}
	bool held;
	if (admit(t, QUOTA_WATCHES, &held, err) < 0)
		return NULL;
	struct ops_watch *w = xcalloc(1, sizeof(*w));
	target_copy(&w->t, t);
	w->quota_held = held;
	w->cbs = cbs;
	w->arg = arg;
	w->timeout_ms = req->timeout_ms;
	w->request =
		json_pack("{s:s, s:s, s:b, s:i}", "op", "watch", "path", req->path, "recursive",
			  req->recursive, "maxWatches", ops_mod.cfg->watch_max_dirs);
	if (req->events && json_is_array(req->events))
		json_object_set(w->request, "events", req->events);
	w->start_ev = defer(watch_start, w);
	return w;
}

void ops_watch_cancel(struct ops_watch *w)
{
	if (w->start_ev) {
		struct err e;
		err_set(&e, ECANCELED, "the watch was cancelled before it started");
		watch_finish(w, NULL, &e);
		return;
	}
	watch_end(w);
}

void ops_watch_detach(struct ops_watch *w)
{
	w->detached = true;
	if (w->start_ev) {
		watch_free(w);
		return;
	}
	/* Freed once the agent has ended it (or the host gave up on it). */
	watch_end(w);
}

void ops_watch_pause(struct ops_watch *w)
{
	w->paused = true;
}

void ops_watch_resume(struct ops_watch *w)
{
	w->paused = false;
	if (w->unacked && w->op) {
		guest_op_consumed(w->op, w->unacked);
		w->unacked = 0;
	}
}

/* --- files and sessions ------------------------------------------------------------- */

enum call_kind {
	CALL_WRITE,
	CALL_READ,
	CALL_LIST,
	CALL_CREATE,
	/* metadata: answered at once by the agent */
	CALL_STAT,
	CALL_MKDIR,
	CALL_REMOVE,
	CALL_MOVE,
	/* background processes */
	CALL_SPAWN,
	CALL_PROCS,
	CALL_ATTACH,
	CALL_SIGNAL,
	CALL_INPUT,
	CALL_RESIZE,
	CALL_UPLOAD,  /* a write whose contents are streamed in */
	CALL_CONNECT, /* a byte stream to a port inside the sandbox */
	CALL_PORTS,
};

struct ops_call {
	enum call_kind kind;
	struct ops_target t; /* strings owned */
	json_t *request;     /* to the agent */
	char *path;
	uint8_t *data; /* write */
	size_t len;
	struct evbuffer *content; /* read: buffered */
	size_t max_bytes;
	/* read */
	const struct ops_read_cbs *rcbs; /* streamed to these; NULL: buffered in content */
	bool check_text;
	bool got_info;      /* the agent's FILEINFO came */
	uint64_t announced; /* the size it gave */
	uint64_t received;  /* FILEDATA bytes so far */
	bool text;          /* it said the file is text: the bytes must be */
	struct utf8_stream text_check;
	unsigned idle_timeout_s; /* create */
	enum session_on_timeout on_timeout;
	bool auto_resume;
	json_t *env;
	json_t *egress;               /* create: the session's own egress policy, or NULL */
	struct volume_mounts volumes; /* create: what it mounts */
	char *snapshot;               /* create: the snapshot it is made from, or NULL */
	struct session_resources resources;
	bool has_resources;
	const struct ops_attach_cbs *acbs;  /* attach */
	const struct ops_upload_cbs *ucbs;  /* upload */
	bool id_generated;                  /* create: the target named no id */
	const struct ops_connect_cbs *ncbs; /* connect */
	bool counted;                       /* connect: counted in its session's proxied */
	bool counted_anonymous;             /* and in its proxied_anonymous */
	struct evbuffer *pending;           /* upload: sent before the agent's op started */
	bool upload_end;                    /* upload: its caller sent all */
	json_t *checked;                    /* spawn, attach, procs: the agent's answer, checked */
	ops_done_fn done;
	void *arg;
	struct event *start_ev;
	struct session *s;
	struct guest_op *op;
	bool detached;
	bool finished;
	bool quota_held; /* a unit of QUOTA_FILE_OPS, given back when the handle goes */
	uint64_t t0_us;
};

/* What a call holds while in flight. */
static enum quota_kind call_quota(enum call_kind k)
{
	switch (k) {
	case CALL_SPAWN:
	case CALL_PROCS:
	case CALL_SIGNAL:
	case CALL_INPUT:
	case CALL_RESIZE:
		return QUOTA_COMMANDS;
	case CALL_ATTACH:
	case CALL_CONNECT:
		return QUOTA_STREAMS;
	case CALL_PORTS:
		return QUOTA_COMMANDS;
	default:
		return QUOTA_FILE_OPS;
	}
}

static void call_free(struct ops_call *c)
{
	if (c->start_ev)
		event_free(c->start_ev);
	if (c->s) {
		if (c->op || c->t0_us)
			session_op_end(c->s);
		if (c->counted && c->s->proxied)
			c->s->proxied--;
		if (c->counted_anonymous && c->s->proxied_anonymous)
			c->s->proxied_anonymous--;
		session_unref(c->s);
	}
	json_decref(c->request);
	json_decref(c->env);
	json_decref(c->egress);
	volume_mounts_fini(&c->volumes);
	free(c->snapshot);
	json_decref(c->checked);
	free(c->path);
	free(c->data);
	if (c->content)
		evbuffer_free(c->content);
	if (c->pending)
		evbuffer_free(c->pending);
	if (c->quota_held)
		quota_release(c->t.owner, call_quota(c->kind));
	target_free(&c->t);
	free(c);
}

static void call_finish(struct ops_call *c, const struct ops_result *r, const struct err *err)
{
	c->finished = true;
	c->op = NULL;
	if (!c->detached)
		c->done(c, r, err, c->arg);
	call_free(c);
}

static void call_fail(struct ops_call *c, const struct err *err)
{
	call_finish(c, NULL, err);
}

static const char *call_metric_type(enum call_kind k)
{
	switch (k) {
	case CALL_WRITE:
		return "write_file";
	case CALL_READ:
		return "read_file";
	case CALL_STAT:
		return "stat";
	case CALL_MKDIR:
		return "mkdir";
	case CALL_REMOVE:
		return "remove";
	case CALL_MOVE:
		return "move";
	case CALL_SPAWN:
		return "spawn";
	case CALL_PROCS:
		return "processes";
	case CALL_ATTACH:
		return "attach";
	case CALL_SIGNAL:
		return "signal";
	case CALL_INPUT:
		return "input";
	case CALL_RESIZE:
		return "resize";
	case CALL_UPLOAD:
		return "upload";
	case CALL_CONNECT:
		return "connect";
	case CALL_PORTS:
		return "ports";
	default:
		return "list_files";
	}
}

/* Fails a read the caller's limit does not allow; the agent checks it too, but is not
 * trusted. */
static void call_too_big(struct ops_call *c, struct guest_op *op)
{
	struct err e;
	err_set(&e, EFBIG, "`%s` exceeds the limit of %zu bytes", c->path, c->max_bytes);
	guest_op_detach(op);
	metrics_add(metrics_daemon.exec_message_total, 1, call_metric_type(c->kind));
	call_fail(c, &e);
}

static void call_on_info(struct guest_op *op, json_t *info, void *arg)
{
	struct ops_call *c = arg;
	json_t *size = json_object_get(info, "size");
	json_t *text = json_object_get(info, "text");
	if (c->kind != CALL_READ || c->got_info || !json_is_integer(size) ||
	    json_integer_value(size) < 0 || (text && !json_is_boolean(text)) ||
	    (c->check_text && !text)) {
		guest_op_violation(op, "file information that does not fit the read");
		return;
	}
	c->got_info = true;
	c->announced = (uint64_t)json_integer_value(size);
	c->text = c->check_text && json_is_true(text);
	if (c->announced > c->max_bytes) {
		call_too_big(c, op);
		return;
	}
	if (c->rcbs)
		c->rcbs->on_head(c, c->announced, c->text, c->arg);
}

static void call_on_data(struct guest_op *op, uint8_t type, const uint8_t *data, size_t len,
			 void *arg)
{
	struct ops_call *c = arg;
	if (c->kind == CALL_CONNECT && c->got_info && type == GUEST_STDOUT) {
		/* The consumer returns the credit (ops_call_consumed) as its client takes them. */
		c->ncbs->on_data(c, data, len, c->arg);
		return;
	}
	if (c->kind == CALL_ATTACH && c->got_info &&
	    (type == GUEST_STDOUT || type == GUEST_STDERR)) {
		/* The consumer returns the credit (ops_call_consumed) as its client takes them. */
		c->acbs->on_output(c, type == GUEST_STDERR ? OPS_STDERR : OPS_STDOUT, data, len,
				   c->arg);
		return;
	}
	if (type != GUEST_FILEDATA || c->kind != CALL_READ) {
		/* Only a read has data, and only file contents. */
		guest_op_violation(op, "data a file operation does not produce");
		return;
	}
	if (!c->got_info || c->received + len > c->announced) {
		guest_op_violation(op, "file contents beyond the size it announced");
		return;
	}
	if (c->text && !utf8_stream_feed(&c->text_check, data, len)) {
		guest_op_violation(op, "file contents that are not the text it announced");
		return;
	}
	if (c->received + len > c->max_bytes) {
		call_too_big(c, op);
		return;
	}
	c->received += len;
	if (c->rcbs) {
		/* A streamed read takes as long as its client takes to read it. The agent is
		 * not waited for while the consumer holds what it sent (a client slower than
		 * the deadline is the HTTP layer's to judge, by its own progress): the deadline
		 * runs again once credit goes back (ops_call_consumed). */
		guest_op_clear_timeout(op);
		/* The consumer returns the credit (ops_call_consumed) as its client takes them. */
		c->rcbs->on_data(c, data, len, c->arg);
		return;
	}
	evbuffer_add(c->content, data, len);
	guest_op_consumed(op, len);
}

static void call_on_event(struct guest_op *op, json_t *ev, size_t len, void *arg)
{
	struct ops_call *c = arg;
	const char *type = json_string_value(json_object_get(ev, "type"));
	json_t *bytes = json_object_get(ev, "bytes"), *pid = json_object_get(ev, "pid");
	if (c->kind == CALL_CONNECT && !strcmp(type, "connected") && !c->got_info) {
		guest_op_consumed(op, len);
		c->got_info = true;
		/* Connected: from now on the connection lasts as long as its caller wants. */
		guest_op_clear_timeout(op);
		if (c->ncbs->on_connected)
			c->ncbs->on_connected(c, c->arg);
		return;
	}
	bool gap = c->kind == CALL_ATTACH && !strcmp(type, "gap") && json_is_integer(bytes) &&
		   json_integer_value(bytes) > 0;
	bool attached = c->kind == CALL_ATTACH && !strcmp(type, "attached") && !c->got_info &&
			json_is_integer(pid) && json_integer_value(pid) > 0 &&
			json_integer_value(pid) <= INT32_MAX;
	if (!gap && !attached) {
		guest_op_violation(op, "an event the operation does not produce");
		return;
	}
	guest_op_consumed(op, len);
	if (attached) {
		c->got_info = true;
		if (c->acbs->on_attached)
			c->acbs->on_attached(c, (int)json_integer_value(pid), c->arg);
	} else if (c->acbs->on_gap) {
		c->acbs->on_gap(c, (uint64_t)json_integer_value(bytes), c->arg);
	}
}

/* A process object from the agent, checked field by field and rebuilt (NULL: not one). */
static json_t *process_checked(json_t *p)
{
	json_t *pid = json_object_get(p, "pid"), *tag = json_object_get(p, "tag");
	json_t *argv = json_object_get(p, "argv"), *cwd = json_object_get(p, "cwd");
	json_t *keys = json_object_get(p, "envKeys"), *state = json_object_get(p, "state");
	json_t *started = json_object_get(p, "startedAt"), *ended = json_object_get(p, "endedAt");
	json_t *code = json_object_get(p, "exitCode"), *sig = json_object_get(p, "signal");
	json_t *dur = json_object_get(p, "durationMs"), *out = json_object_get(p, "outputBytes");
	json_t *from = json_object_get(p, "replayFrom");
	if (!json_is_integer(pid) || json_integer_value(pid) <= 0 ||
	    json_integer_value(pid) > INT32_MAX || !(json_is_string(tag) || json_is_null(tag)) ||
	    !json_is_array(argv) || !json_array_size(argv) || !json_is_string(cwd) ||
	    !json_is_array(keys) || !json_is_string(state) || !json_is_integer(started) ||
	    !(json_is_integer(ended) || json_is_null(ended)) ||
	    !(json_is_integer(code) || json_is_null(code)) ||
	    !(json_is_string(sig) || json_is_null(sig)) || !json_is_number(dur) ||
	    !json_is_integer(out) || json_integer_value(out) < 0 || !json_is_integer(from) ||
	    json_integer_value(from) < 0 || json_integer_value(from) > json_integer_value(out))
		return NULL;
	const char *st = json_string_value(state);
	if (strcmp(st, "running") && strcmp(st, "exited"))
		return NULL;
	size_t i;
	json_t *v;
	json_array_foreach (argv, i, v)
		if (!json_is_string(v))
			return NULL;
	json_array_foreach (keys, i, v)
		if (!json_is_string(v))
			return NULL;
	return json_pack("{s:O, s:O, s:s, s:O, s:O, s:O, s:b, s:s, s:O, s:O, s:O, s:O, s:O, "
			 "s:b, s:O, s:O}",
			 "pid", pid, "tag", tag, "command",
			 json_string_value(json_array_get(argv, 0)), "argv", argv, "cwd", cwd,
			 "envKeys", keys, "pty", json_is_true(json_object_get(p, "pty")), "state",
			 st, "startedAt", started, "endedAt", ended, "exitCode", code, "signal",
			 sig, "durationMs", dur, "timedOut",
			 json_is_true(json_object_get(p, "timedOut")), "outputBytes", out,
			 "replayFrom", from);
}

static void call_on_guest_done(struct guest_op *op, json_t *result, const struct err *err,
			       void *arg)
{
	struct ops_call *c = arg;
	const char *type = call_metric_type(c->kind);
	metrics_add(metrics_daemon.exec_message_total, 1, type);
	metrics_observe(metrics_daemon.exec_message_duration,
			(double)(time_mono_us() - c->t0_us) / 1e6, type);
	if (err) {
		call_fail(c, err);
		return;
	}
	struct ops_result r = { .session_id = c->t.session_id, .path = c->path };
	json_t *size = json_object_get(result, "size");
	switch (c->kind) {
	case CALL_WRITE:
	case CALL_UPLOAD:
		r.size = json_is_integer(size) && json_integer_value(size) >= 0
				 ? (uint64_t)json_integer_value(size)
				 : c->len;
		break;
	case CALL_READ:
		if (!c->got_info || c->received != c->announced ||
		    (c->text && !utf8_stream_end(&c->text_check))) {
			struct err e;
			err_set(&e, EREMOTEIO,
				"sandbox agent ended the read of `%s` after %llu of the %llu bytes "
				"it announced",
				c->path, (unsigned long long)c->received,
				(unsigned long long)c->announced);
			call_fail(c, &e);
			return;
		}
		r.size = c->received;
		if (c->content)
			r.data = r.size ? evbuffer_pullup(c->content, -1) : (const uint8_t *)"";
		break;
	case CALL_STAT:
	case CALL_MKDIR:
	case CALL_REMOVE:
	case CALL_MOVE:
	case CALL_SIGNAL:
	case CALL_RESIZE:
	case CALL_INPUT:
		r.info = result;
		break;
	case CALL_SPAWN:
	case CALL_ATTACH:
		c->checked = process_checked(json_object_get(result, "process"));
		if (!c->checked) {
			struct err e;
			err_set(&e, EREMOTEIO, "sandbox agent answered with a malformed process");
			call_fail(c, &e);
			return;
		}
		if (c->kind == CALL_ATTACH) {
			json_t *pos = json_object_get(result, "position");
			json_object_set_new(
				c->checked, "detached",
				json_boolean(json_is_true(json_object_get(result, "detached"))));
			if (json_is_integer(pos))
				json_object_set(c->checked, "position", pos);
		}
		r.info = c->checked;
		break;
	case CALL_CONNECT:
		if (!c->got_info) {
			guest_op_violation(op, "a connection's end before it was made");
			return;
		}
		r.info = result;
		break;
	case CALL_PORTS: {
		json_t *list = json_object_get(result, "ports");
		c->checked = json_array();
		size_t i;
		json_t *p;
		json_array_foreach (list, i, p) {
			json_t *port = json_object_get(p, "port"),
			       *addr = json_object_get(p, "address");
			if (!json_is_integer(port) || json_integer_value(port) < 1 ||
			    json_integer_value(port) > 65535 || !json_is_string(addr) ||
			    json_string_length(addr) > 64) {
				struct err e;
				err_set(&e, EREMOTEIO,
					"sandbox agent answered with a malformed port list");
				call_fail(c, &e);
				return;
			}
			json_array_append_new(
				c->checked, json_pack("{s:O, s:O}", "port", port, "address", addr));
		}
		r.entries = c->checked;
		r.truncated = json_is_true(json_object_get(result, "truncated"));
		break;
	}
	case CALL_PROCS: {
		json_t *list = json_object_get(result, "processes");
		c->checked = json_array();
		size_t i;
		json_t *p;
		json_array_foreach (list, i, p) {
			json_t *ok = process_checked(p);
			if (!ok) {
				struct err e;
				err_set(&e, EREMOTEIO,
					"sandbox agent answered with a malformed process list");
				call_fail(c, &e);
				return;
			}
			json_array_append_new(c->checked, ok);
		}
		r.entries = c->checked;
		break;
	}
	default:
		r.entries = json_object_get(result, "entries");
		if (!json_is_array(r.entries))
			r.entries = NULL;
		r.truncated = json_is_true(json_object_get(result, "truncated"));
		break;
	}
	call_finish(c, &r, NULL);
}

/* An upload's queue toward the agent went down: its caller may send more. */
static void call_on_sent(struct guest_op *op, void *arg)
{
	struct ops_call *c = arg;
	if (c->kind == CALL_UPLOAD && c->ucbs && guest_op_queued(op) < OPS_UPLOAD_HIGH)
		c->ucbs->on_ready(c, c->arg);
	else if (c->kind == CALL_CONNECT && c->ncbs->on_ready &&
		 guest_op_queued(op) < OPS_UPLOAD_HIGH)
		c->ncbs->on_ready(c, c->arg);
}

static const struct guest_op_cbs call_guest_cbs = { .on_data = call_on_data,
						    .on_info = call_on_info,
						    .on_event = call_on_event,
						    .on_sent = call_on_sent,
						    .on_done = call_on_guest_done };

static void call_run(struct ops_call *c, struct session *s)
{
	struct err e;
	c->s = s;
	session_ref(s);
	if (c->kind == CALL_SPAWN) {
		/* The session's environment under the request's, as for execute. */
		json_t *env = json_deep_copy(s->env);
		json_t *req_env = json_object_get(c->request, "env");
		if (req_env)
			json_object_update(env, req_env);
		json_object_set_new(c->request, "env", env);
	}
	if (c->t.any_path)
		json_object_set_new(c->request, "anyPath", json_true());
	c->op = guest_op_start(s->conn, c->request, &call_guest_cbs, c, &e);
	if (!c->op) {
		call_fail(c, &e);
		return;
	}
	c->t0_us = time_mono_us();
	session_op_begin(s);
	/* An attach lasts as long as its process (its caller ends it when it wants); an upload as
	 * long as its client sends (the HTTP layer bounds a stalled one). */
	if (c->kind == CALL_UPLOAD) {
		size_t n = evbuffer_get_length(c->pending);
		if (n)
			guest_op_send(c->op, evbuffer_pullup(c->pending, -1), n);
		evbuffer_drain(c->pending, n);
		if (c->upload_end)
			guest_op_eof(c->op);
		else if (guest_op_queued(c->op) < OPS_UPLOAD_HIGH)
			c->ucbs->on_ready(c, c->arg); /* may end the call: nothing after this */
		return;
	}
	if (c->kind == CALL_CONNECT) {
		size_t n = evbuffer_get_length(c->pending);
		if (n)
			guest_op_send(c->op, evbuffer_pullup(c->pending, -1), n);
		evbuffer_drain(c->pending, n);
		if (c->upload_end)
			guest_op_eof(c->op);
		/* Until it is made; then as long as its caller wants (the proxy bounds idleness).
		 */
		guest_op_set_timeout(c->op, ops_mod.cfg->file_op_timeout_ms, "connection");
		return;
	}
	if (c->kind != CALL_ATTACH)
		guest_op_set_timeout(c->op, ops_mod.cfg->file_op_timeout_ms,
				     c->kind >= CALL_SPAWN ? "process operation"
							   : "file operation");
	if (c->kind == CALL_WRITE || c->kind == CALL_INPUT) {
		guest_op_send(c->op, c->data, c->len);
		guest_op_eof(c->op);
		free(c->data);
		c->data = NULL;
	}
}

static void call_on_session(struct session *s, const struct err *err, void *arg)
{
	struct ops_call *c = arg;
	if (c->detached) {
		call_free(c);
		return;
	}
	if (err) {
		call_fail(c, err);
		return;
	}
	if (c->kind == CALL_CREATE) {
		struct ops_result r = { .session_id = s->id, .session = s };
		call_finish(c, &r, NULL);
		return;
	}
	call_run(c, s);
}

static void call_start(evutil_socket_t fd, short what, void *arg)
{
	struct ops_call *c = arg;
	event_free(c->start_ev);
	c->start_ev = NULL;
	struct err e;
	struct session_create_opts opts = { .template_name = c->t.template_name };
	const char *owner = c->t.owner;
	switch (c->kind) {
	case CALL_READ:
	case CALL_LIST:
	case CALL_STAT:
	case CALL_REMOVE:
	case CALL_MOVE:
	case CALL_PROCS:
	case CALL_ATTACH:
	case CALL_SIGNAL:
	case CALL_INPUT:
	case CALL_RESIZE:
	case CALL_PORTS:
	case CALL_CONNECT: {
		struct session *s = ops_find_session(&c->t, &e);
		if (!s) {
			call_fail(c, &e);
			return;
		}
		if (c->kind == CALL_CONNECT) {
			if (s->proxied >= ops_mod.cfg->preview_max_connections) {
				err_set(&e, EAGAIN,
					"session `%s` has %u connections to its ports open, its "
					"limit (SANDBOX_PREVIEW_MAX_CONNECTIONS)",
					s->id, s->proxied);
				call_fail(c, &e);
				return;
			}
			if (c->t.anonymous &&
			    s->proxied_anonymous >= ops_anonymous_connections(ops_mod.cfg)) {
				err_set(&e, EAGAIN,
					"session `%s` has %u connections from visitors without its "
					"key or token open, their share of "
					"SANDBOX_PREVIEW_MAX_CONNECTIONS",
					s->id, s->proxied_anonymous);
				call_fail(c, &e);
				return;
			}
			s->proxied++;
			c->counted = true;
			if (c->t.anonymous) {
				s->proxied_anonymous++;
				c->counted_anonymous = true;
			}
		}
		call_run(c, s);
		return;
	}
	case CALL_CREATE:
		/* Checked when it runs, not when asked: another request may have made it. */
		if (session_find(c->t.owner, c->t.session_id)) {
			err_set(&e, EEXIST, "Session `%s` already exists", c->t.session_id);
			call_fail(c, &e);
			return;
		}
		opts.idle_timeout_s = c->idle_timeout_s;
		opts.on_timeout = c->on_timeout;
		opts.auto_resume = c->auto_resume;
		opts.id_generated = c->id_generated;
		opts.env = c->env;
		opts.resources = c->has_resources ? &c->resources : NULL;
		opts.egress = c->egress;
		opts.volumes = &c->volumes;
		opts.snapshot = c->snapshot;
		break;
	case CALL_WRITE:
	case CALL_UPLOAD:
	case CALL_MKDIR:
	case CALL_SPAWN:
		if (target_owner(&c->t, &owner, &e) < 0) {
			call_fail(c, &e);
			return;
		}
		break;
	}
	session_get_or_create(owner, c->t.session_id, &opts, call_on_session, c, NULL);
}

static struct ops_call *call_new(enum call_kind kind, const struct ops_target *t, const char *path,
				 ops_done_fn done, void *arg)
{
	struct ops_call *c = xcalloc(1, sizeof(*c));
	c->kind = kind;
	c->id_generated = !t->session_id;
	target_copy(&c->t, t);
	c->path = xstrdup(path && *path ? path : ".");
	c->done = done;
	c->arg = arg;
	c->start_ev = defer(call_start, c);
	return c;
}

static int check_path(const char *path, struct err *err)
{
	if (!path || !*path)
		return err_set(err, EINVAL, "\"path\" is required");
	/* A query string decodes to any bytes; the agent's requests are JSON. */
	if (!utf8_valid((const uint8_t *)path, strlen(path)))
		return err_set(err, EINVAL, "\"path\" must be valid UTF-8");
	return 0;
}

struct ops_call *ops_write_file(const struct ops_target *t, const char *path, uint8_t *data,
				size_t len, int mode, ops_done_fn done, void *arg, struct err *err)
{
	if (check_target(t, false, err) < 0 || check_path(path, err) < 0) {
		free(data);
		return NULL;
	}
	if (mode > 07777) {
		free(data);
		err_set(err, EINVAL, "\"mode\" must be a permission number (0 to 4095)");
		return NULL;
	}
	bool held;
	if (admit(t, QUOTA_FILE_OPS, &held, err) < 0) {
		free(data);
		return NULL;
	}
	struct ops_call *c = call_new(CALL_WRITE, t, path, done, arg);
	c->quota_held = held;
	c->data = data;
	c->len = len;
	c->request = json_pack("{s:s, s:s, s:I}", "op", "write", "path", path, "maxBytes",
			       (json_int_t)ops_mod.cfg->max_body_bytes);
	if (mode >= 0)
		json_object_set_new(c->request, "mode", json_integer(mode));
	return c;
}

struct ops_call *ops_read_file(const struct ops_target *t, const char *path, size_t max_bytes,
			       ops_done_fn done, void *arg, struct err *err)
{
	if (check_target(t, false, err) < 0 || check_path(path, err) < 0)
		return NULL;
	if (max_bytes == 0 || max_bytes > ops_mod.cfg->max_read_bytes)
		max_bytes = ops_mod.cfg->max_read_bytes;
	bool held;
	if (admit(t, QUOTA_FILE_OPS, &held, err) < 0)
		return NULL;
	struct ops_call *c = call_new(CALL_READ, t, path, done, arg);
	c->quota_held = held;
	c->content = evbuffer_new();
	c->max_bytes = max_bytes;
	c->request = json_pack("{s:s, s:s, s:I, s:b}", "op", "read", "path", path, "maxBytes",
			       (json_int_t)max_bytes, "info", 1);
	return c;
}

struct ops_call *ops_read_stream(const struct ops_target *t, const char *path, bool check_text,
				 const struct ops_read_cbs *cbs, ops_done_fn done, void *arg,
				 struct err *err)
{
	if (check_target(t, false, err) < 0 || check_path(path, err) < 0)
		return NULL;
	struct ops_call *c = call_new(CALL_READ, t, path, done, arg);
	c->rcbs = cbs;
	c->check_text = check_text;
	c->max_bytes = ops_mod.cfg->max_read_bytes;
	c->request = json_pack("{s:s, s:s, s:I, s:b, s:b}", "op", "read", "path", path, "maxBytes",
			       (json_int_t)c->max_bytes, "info", 1, "checkText", check_text);
	return c;
}

void ops_call_consumed(struct ops_call *c, size_t n)
{
	if (!c->op || c->finished)
		return;
	guest_op_consumed(c->op, n);
	if (c->kind == CALL_READ && c->rcbs) /* the agent has credit: it owes the rest */
		guest_op_set_timeout(c->op, ops_mod.cfg->file_op_timeout_ms, "file operation");
}

struct ops_call *ops_list_files(const struct ops_target *t, const char *path, bool recursive,
				ops_done_fn done, void *arg, struct err *err)
{
	if (check_target(t, false, err) < 0)
		return NULL;
	bool held;
	if (admit(t, QUOTA_FILE_OPS, &held, err) < 0)
		return NULL;
	struct ops_call *c = call_new(CALL_LIST, t, path, done, arg);
	c->quota_held = held;
	c->request =
		json_pack("{s:s, s:s, s:b}", "op", "list", "path", c->path, "recursive", recursive);
	return c;
}

/* A metadata operation: the request to the agent is built by the caller. */
static struct ops_call *meta_call(enum call_kind kind, const struct ops_target *t, const char *path,
				  json_t *request, ops_done_fn done, void *arg, struct err *err)
{
	if (check_target(t, false, err) < 0 || check_path(path, err) < 0) {
		json_decref(request);
		return NULL;
	}
	if (!request) {
		err_set(err, EINVAL, "invalid path");
		return NULL;
	}
	bool held;
	if (admit(t, QUOTA_FILE_OPS, &held, err) < 0) {
		json_decref(request);
		return NULL;
	}
	struct ops_call *c = call_new(kind, t, path, done, arg);
	c->quota_held = held;
	c->request = request;
	return c;
}

json_t *ops_stat_json(const struct ops_result *r)
{
	json_t *type = json_object_get(r->info, "type");
	json_t *size = json_object_get(r->info, "size");
	json_t *mode = json_object_get(r->info, "mode");
	json_t *mtime = json_object_get(r->info, "mtime");
	if (!json_is_string(type) || !json_is_integer(size) || json_integer_value(size) < 0 ||
	    !json_is_integer(mode) || json_integer_value(mode) < 0 ||
	    json_integer_value(mode) > 07777 || !json_is_number(mtime))
		return NULL;
	const char *t = json_string_value(type);
	if (strcmp(t, "file") && strcmp(t, "dir") && strcmp(t, "symlink") && strcmp(t, "other"))
		t = "other";
	return json_pack("{s:s, s:s, s:O, s:O, s:O}", "path", r->path, "type", t, "size", size,
			 "mode", mode, "mtime", mtime);
}

struct ops_call *ops_stat_path(const struct ops_target *t, const char *path, ops_done_fn done,
			       void *arg, struct err *err)
{
	return meta_call(CALL_STAT, t, path, json_pack("{s:s, s:s?}", "op", "stat", "path", path),
			 done, arg, err);
}

struct ops_call *ops_make_dir(const struct ops_target *t, const char *path, bool parents,
			      ops_done_fn done, void *arg, struct err *err)
{
	return meta_call(
		CALL_MKDIR, t, path,
		json_pack("{s:s, s:s?, s:b}", "op", "mkdir", "path", path, "parents", parents),
		done, arg, err);
}

struct ops_call *ops_remove_path(const struct ops_target *t, const char *path, bool recursive,
				 ops_done_fn done, void *arg, struct err *err)
{
	return meta_call(
		CALL_REMOVE, t, path,
		json_pack("{s:s, s:s?, s:b}", "op", "remove", "path", path, "recursive", recursive),
		done, arg, err);
}

struct ops_call *ops_move_path(const struct ops_target *t, const char *from, const char *to,
			       bool overwrite, ops_done_fn done, void *arg, struct err *err)
{
	if (!to || !*to || !utf8_valid((const uint8_t *)to, strlen(to))) {
		err_set(err, EINVAL, "\"to\" is required, as valid UTF-8");
		return NULL;
	}
	return meta_call(CALL_MOVE, t, from,
			 json_pack("{s:s, s:s?, s:s, s:b, s:b}", "op", "rename", "path", from, "to",
				   to, "parents", 1, "overwrite", overwrite),
			 done, arg, err);
}

struct ops_call *ops_create_session(const struct ops_target *t, const struct ops_session_opts *o,
				    ops_done_fn done, void *arg, struct err *err)
{
	static const struct ops_session_opts none;
	if (!o)
		o = &none;
	/* The REST API has always judged the resources before the id. */
	if (o->resources && session_resources_check(o->resources, err) < 0)
		return NULL;
	if (check_target(t, true, err) < 0 || ops_check_env(o->env, err) < 0)
		return NULL;
	if (o->egress && !json_is_null(o->egress)) {
		/* Judged now, so that a bad policy is the request's error, not the session's. */
		struct net_policy *p = NULL;
		if (net_policy_for_session(o->egress, &p, err) < 0)
			return NULL;
		net_policy_destroy(p);
	}
	struct volume_mounts vols;
	if (volume_mounts_parse(o->volumes, &vols, err) < 0)
		return NULL;
	struct ops_call *c = call_new(CALL_CREATE, t, NULL, done, arg);
	if (o->id_generated)
		c->id_generated = true;
	c->volumes = vols;
	c->snapshot = o->snapshot ? xstrdup(o->snapshot) : NULL;
	c->egress = o->egress && !json_is_null(o->egress) ? json_deep_copy(o->egress) : NULL;
	c->idle_timeout_s = o->idle_timeout_s;
	c->on_timeout = o->on_timeout;
	c->auto_resume = o->auto_resume;
	c->env = o->env && json_is_object(o->env) ? json_deep_copy(o->env) : NULL;
	if (o->resources) {
		c->resources = *o->resources;
		c->has_resources = true;
	}
	return c;
}

void ops_call_detach(struct ops_call *c)
{
	if (c->detached || c->finished)
		return;
	c->detached = true;
	if (c->start_ev) {
		call_free(c);
	} else if (c->op) {
		guest_op_detach(c->op);
		call_free(c);
	}
	/* Otherwise it waits for its session: call_on_session frees it. */
}

int ops_destroy_session(const struct ops_target *t, const char *why, void (*done)(void *arg),
			void *arg, struct err *err)
{
	if (check_target(t, false, err) < 0)
		return -EINVAL;
	struct session *s = target_session(t, err);
	if (!s)
		return -err->errnum;
	session_ref(s);
	session_destroy(s, why);
	if (done)
		session_on_gone(s, done, arg);
	session_unref(s);
	return 0;
}

int ops_cancel_exec(const struct ops_target *t, const char *exec_id, struct err *err)
{
	if (check_target(t, false, err) < 0)
		return -EINVAL;
	/* An empty id is looked for like any other (and not found), as the REST API has. */
	if (!exec_id)
		return err_set(err, EINVAL, "\"execId\" is required");
	struct session *s = ops_find_session(t, err);
	if (!s)
		return -err->errnum;
	struct session_exec *e = session_exec_find(s, exec_id);
	if (!e)
		return err_set(err, ENOENT, "No running command `%s` in session `%s`", exec_id,
			       t->session_id);
	guest_op_cancel(e->op);
	return 0;
}

struct list_state {
	json_t *list;
	bool owners; /* say whose each session is */
};

static void add_session_json(struct session *s, void *arg)
{
	struct list_state *st = arg;
	if (s->state != SESSION_READY && s->state != SESSION_CREATING &&
	    s->state != SESSION_FAILED && s->state != SESSION_PAUSED)
		return;
	json_t *j = session_json(s);
	if (st->owners)
		json_object_set_new(j, "owner", json_string(s->owner));
	json_array_append_new(st->list, j);
}

json_t *ops_list_sessions(const struct ops_target *t)
{
	struct list_state st = { .list = json_array(), .owners = t->any_owner };
	session_foreach(t->any_owner ? NULL : (t->owner ? t->owner : ""), add_session_json, &st);
	return st.list;
}

json_t *ops_read_json(const struct ops_result *r, bool want_base64)
{
	bool b64 = want_base64 || !utf8_valid(r->data, r->size) || memchr(r->data, 0, r->size);
	json_t *content;
	if (b64) {
		size_t n;
		_cleanup_free_ char *enc = base64_encode(r->data, r->size, &n);
		content = json_stringn(enc, n);
	} else {
		content = json_stringn((const char *)r->data, r->size);
	}
	return json_pack("{s:s, s:o, s:s, s:I}", "path", r->path, "content", content, "encoding",
			 b64 ? "base64" : "utf8", "size", (json_int_t)r->size);
}

/* --- background processes --------------------------------------------------------------- */

int ops_proc_ref_parse(const char *s, struct ops_proc_ref *ref, struct err *err)
{
	memset(ref, 0, sizeof(*ref));
	if (!s || !*s)
		return err_set(err, EINVAL, "a process is named by its pid or its tag");
	size_t n = strlen(s);
	if (strspn(s, "0123456789") == n) {
		long long v = n <= 10 ? strtoll(s, NULL, 10) : 0;
		if (v <= 0 || v > INT32_MAX)
			return err_set(err, EINVAL, "`%.20s` is not a process id", s);
		ref->pid = (int)v;
		return 0;
	}
	if (n > OPS_TAG_MAX || strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
					 "0123456789._:-") != n)
		return err_set(err, EINVAL,
			       "a tag has 1 to %d letters, digits and . _ : - (not `%.80s`)",
			       OPS_TAG_MAX, s);
	ref->tag = s;
	return 0;
}

/* A call about one process: `request` gets the process's pid or tag. */
static struct ops_call *proc_call(enum call_kind kind, const struct ops_target *t,
				  const struct ops_proc_ref *ref, json_t *request, ops_done_fn done,
				  void *arg, struct err *err)
{
	if (check_target(t, false, err) < 0) {
		json_decref(request);
		return NULL;
	}
	if (ref) {
		if (ref->tag)
			json_object_set_new(request, "tag", json_string(ref->tag));
		else
			json_object_set_new(request, "pid", json_integer(ref->pid));
	}
	bool held;
	if (admit(t, call_quota(kind), &held, err) < 0) {
		json_decref(request);
		return NULL;
	}
	struct ops_call *c = call_new(kind, t, NULL, done, arg);
	c->quota_held = held;
	c->request = request;
	return c;
}

struct ops_call *ops_spawn(const struct ops_target *t, const struct ops_spawn_req *req,
			   ops_done_fn done, void *arg, struct err *err)
{
	const struct ops_exec_req *x = &req->x;
	if (check_target(t, false, err) < 0)
		return NULL;
	if (!x->command || !*x->command) {
		err_set(err, EINVAL, "\"command\" is required");
		return NULL;
	}
	if (x->has_timeout && x->timeout_ms > EXEC_MAX_TIMEOUT_MS) {
		err_set(err, EINVAL, "\"timeout\" must be at most %llu ms (a week)",
			(unsigned long long)EXEC_MAX_TIMEOUT_MS);
		return NULL;
	}
	if (req->tag) {
		struct ops_proc_ref ref;
		if (ops_proc_ref_parse(req->tag, &ref, err) < 0)
			return NULL;
		if (!ref.tag) {
			err_set(err, EINVAL, "\"tag\" must not be a number (numbers name pids)");
			return NULL;
		}
	}
	if (req->pty && (req->rows < 1 || req->rows > OPS_TERMINAL_MAX || req->cols < 1 ||
			 req->cols > OPS_TERMINAL_MAX)) {
		err_set(err, EINVAL, "a terminal has 1 to %d rows and columns", OPS_TERMINAL_MAX);
		return NULL;
	}
	uint64_t replay = req->replay_bytes ? req->replay_bytes : ops_mod.cfg->process_replay_bytes;
	if (replay < OPS_REPLAY_MIN || replay > OPS_REPLAY_MAX) {
		err_set(err, EINVAL, "\"replayBytes\" must be between %u and %u", OPS_REPLAY_MIN,
			OPS_REPLAY_MAX);
		return NULL;
	}
	if (ops_check_env(x->env, err) < 0)
		return NULL;
	json_t *argv = NULL;
	if (build_argv(x, &argv, err) < 0)
		return NULL;
	json_t *request =
		json_pack("{s:s, s:o, s:I, s:b, s:I, s:I, s:I}", "op", "spawn", "argv", argv,
			  "timeoutMs", (json_int_t)(x->has_timeout ? x->timeout_ms : 0), "stdin",
			  req->stdin_open, "replayBytes", (json_int_t)replay, "maxProcesses",
			  (json_int_t)ops_mod.cfg->max_processes, "maxReplayBytes",
			  (json_int_t)ops_mod.cfg->session_replay_bytes);
	json_t *env = x->env && json_is_object(x->env) ? json_deep_copy(x->env) : json_object();
	if (req->pty && !json_object_get(env, "TERM"))
		json_object_set_new(env, "TERM",
				    json_string(req->term ? req->term : "xterm-256color"));
	json_object_set_new(request, "env", env);
	if (x->cwd)
		json_object_set_new(request, "cwd", json_string(x->cwd));
	set_user(request, x);
	if (req->tag)
		json_object_set_new(request, "tag", json_string(req->tag));
	if (req->hold)
		json_object_set_new(request, "hold", json_true());
	if (req->pty)
		json_object_set_new(request, "pty",
				    json_pack("{s:i, s:i}", "rows", req->rows, "cols", req->cols));
	return proc_call(CALL_SPAWN, t, NULL, request, done, arg, err);
}

struct ops_call *ops_list_processes(const struct ops_target *t, ops_done_fn done, void *arg,
				    struct err *err)
{
	return proc_call(CALL_PROCS, t, NULL, json_pack("{s:s}", "op", "procs"), done, arg, err);
}

struct ops_call *ops_attach(const struct ops_target *t, const struct ops_proc_ref *ref,
			    const struct ops_attach_opts *o, const struct ops_attach_cbs *cbs,
			    ops_done_fn done, void *arg, struct err *err)
{
	json_t *request = json_pack("{s:s, s:b, s:b, s:b}", "op", "attach", "output", o->output,
				    "follow", o->follow, "hangup", o->hangup);
	if (o->replay_bytes >= 0)
		json_object_set_new(request, "replayBytes", json_integer(o->replay_bytes));
	if (o->hold)
		json_object_set_new(request, "hold", json_true());
	struct ops_call *c = proc_call(CALL_ATTACH, t, ref, request, done, arg, err);
	if (c)
		c->acbs = cbs;
	return c;
}

struct ops_call *ops_signal_process(const struct ops_target *t, const struct ops_proc_ref *ref,
				    int sig, ops_done_fn done, void *arg, struct err *err)
{
	if (sig < 1 || sig > 64) {
		err_set(err, EINVAL, "unknown signal");
		return NULL;
	}
	return proc_call(CALL_SIGNAL, t, ref,
			 json_pack("{s:s, s:i}", "op", "signal", "signal", sig), done, arg, err);
}

struct ops_call *ops_process_input(const struct ops_target *t, const struct ops_proc_ref *ref,
				   uint8_t *data, size_t len, bool close, ops_done_fn done,
				   void *arg, struct err *err)
{
	struct ops_call *c =
		proc_call(CALL_INPUT, t, ref,
			  json_pack("{s:s, s:b}", "op", "input", "close", close), done, arg, err);
	if (!c) {
		free(data);
		return NULL;
	}
	c->data = data;
	c->len = len;
	return c;
}

struct ops_call *ops_resize_process(const struct ops_target *t, const struct ops_proc_ref *ref,
				    unsigned rows, unsigned cols, ops_done_fn done, void *arg,
				    struct err *err)
{
	if (rows < 1 || rows > OPS_TERMINAL_MAX || cols < 1 || cols > OPS_TERMINAL_MAX) {
		err_set(err, EINVAL, "a terminal has 1 to %d rows and columns", OPS_TERMINAL_MAX);
		return NULL;
	}
	return proc_call(CALL_RESIZE, t, ref,
			 json_pack("{s:s, s:i, s:i}", "op", "resize", "rows", rows, "cols", cols),
			 done, arg, err);
}

/* --- streamed uploads ------------------------------------------------------------------- */

struct ops_call *ops_upload(const struct ops_target *t, const char *path, int mode,
			    uint64_t max_bytes, const struct ops_upload_cbs *cbs, ops_done_fn done,
			    void *arg, struct err *err)
{
	if (check_target(t, false, err) < 0 || check_path(path, err) < 0)
		return NULL;
	if (mode > 07777) {
		err_set(err, EINVAL, "\"mode\" must be a permission number (0 to 4095)");
		return NULL;
	}
	bool held;
	if (admit(t, QUOTA_FILE_OPS, &held, err) < 0)
		return NULL;
	struct ops_call *c = call_new(CALL_UPLOAD, t, path, done, arg);
	c->quota_held = held;
	c->ucbs = cbs;
	c->pending = evbuffer_new();
	c->request = json_pack("{s:s, s:s, s:I}", "op", "write", "path", path, "maxBytes",
			       (json_int_t)max_bytes);
	if (mode >= 0)
		json_object_set_new(c->request, "mode", json_integer(mode));
	return c;
}

void ops_upload_send(struct ops_call *c, const void *data, size_t len)
{
	if (c->finished || c->upload_end)
		return;
	if (c->op)
		guest_op_send(c->op, data, len);
	else
		evbuffer_add(c->pending, data, len);
}

size_t ops_upload_queued(struct ops_call *c)
{
	return c->op ? guest_op_queued(c->op) : evbuffer_get_length(c->pending) + OPS_UPLOAD_HIGH;
}

void ops_upload_end(struct ops_call *c)
{
	if (c->finished || c->upload_end)
		return;
	c->upload_end = true;
	if (c->op)
		guest_op_eof(c->op);
}

/* --- the sandbox's own ports -------------------------------------------------------------- */

unsigned ops_anonymous_connections(const struct config *cfg)
{
	unsigned cap = cfg->preview_max_connections;
	unsigned reserved = cap / 4 ? cap / 4 : cap > 1;
	return cap - reserved;
}

struct ops_call *ops_connect(const struct ops_target *t, unsigned port,
			     const struct ops_connect_cbs *cbs, ops_done_fn done, void *arg,
			     struct err *err)
{
	if (check_target(t, false, err) < 0)
		return NULL;
	if (port < 1 || port > 65535) {
		err_set(err, EINVAL, "a port is a number from 1 to 65535");
		return NULL;
	}
	bool held;
	if (admit(t, QUOTA_STREAMS, &held, err) < 0)
		return NULL;
	struct ops_call *c = call_new(CALL_CONNECT, t, NULL, done, arg);
	c->quota_held = held;
	c->ncbs = cbs;
	c->pending = evbuffer_new();
	c->request = json_pack("{s:s, s:i}", "op", "connect", "port", (int)port);
	return c;
}

void ops_connect_send(struct ops_call *c, const void *data, size_t len)
{
	ops_upload_send(c, data, len);
}

size_t ops_connect_queued(struct ops_call *c)
{
	return ops_upload_queued(c);
}

void ops_connect_eof(struct ops_call *c)
{
	ops_upload_end(c);
}

struct ops_call *ops_list_ports(const struct ops_target *t, ops_done_fn done, void *arg,
				struct err *err)
{
	return proc_call(CALL_PORTS, t, NULL, json_pack("{s:s}", "op", "ports"), done, arg, err);
}

/* --- pause and resume --------------------------------------------------------------------- */

struct pause_call {
	ops_pause_fn cb;
	void *arg;
	struct event *ev;
	struct session *s;
	struct err err;
	bool failed;
};

static void pause_deliver(evutil_socket_t fd, short what, void *arg)
{
	struct pause_call *p = arg;
	event_free(p->ev);
	p->cb(p->failed ? NULL : p->s, p->failed ? &p->err : NULL, p->arg);
	session_unref(p->s);
	free(p);
}

static void on_paused(struct session *s, const struct err *err, void *arg)
{
	struct pause_call *p = arg;
	if (err) {
		err_copy(&p->err, err);
		p->failed = true;
	}
	/* Never before ops_pause_session returned: a refusal is answered from the loop. */
	p->ev = defer(pause_deliver, p);
}

int ops_pause_session(const struct ops_target *t, bool pause, ops_pause_fn cb, void *arg,
		      struct err *err)
{
	return ops_pause_session_mode(t, pause, SESSION_PAUSE_FREEZE, cb, arg, err);
}

int ops_pause_session_mode(const struct ops_target *t, bool pause, enum session_pause_mode mode,
			   ops_pause_fn cb, void *arg, struct err *err)
{
	if (check_target(t, false, err) < 0)
		return -EINVAL;
	struct session *s = target_session(t, err);
	if (!s)
		return -err->errnum;
	struct pause_call *p = xcalloc(1, sizeof(*p));
	p->cb = cb;
	p->arg = arg;
	p->s = s;
	session_ref(s);
	session_pause_mode(s, pause, mode, on_paused, p);
	return 0;
}

/* --- fork ------------------------------------------------------------------------------- */

struct fork_call {
	ops_fork_fn cb;
	void *arg;
	struct event *ev;
	json_t *forks;
	struct err err;
};

static void fork_deliver(evutil_socket_t fd, short what, void *arg)
{
	struct fork_call *c = arg;
	event_free(c->ev);
	c->cb(c->forks, c->forks ? NULL : &c->err, c->arg);
	json_decref(c->forks);
	free(c);
}

static void on_forked(json_t *forks, const struct err *err, void *arg)
{
	struct fork_call *c = arg;
	if (forks)
		c->forks = json_incref(forks);
	else
		err_copy(&c->err, err);
	/* Never before ops_fork_session returned: a refusal is answered from the loop. */
	c->ev = defer(fork_deliver, c);
}

int ops_fork_session(const struct ops_target *t, unsigned count, ops_fork_fn cb, void *arg,
		     struct err *err)
{
	if (check_target(t, false, err) < 0)
		return -EINVAL;
	if (count < 1 || count > OPS_FORK_MAX)
		return err_set(err, EINVAL, "\"count\" must be an integer from 1 to %d",
			       OPS_FORK_MAX);
	struct session *s = target_session(t, err);
	if (!s)
		return -err->errnum;
	struct fork_call *c = xcalloc(1, sizeof(*c));
	c->cb = cb;
	c->arg = arg;
	session_fork(s, count, on_forked, c);
	return 0;
}

/* --- snapshot --------------------------------------------------------------------------- */

struct snapshot_call {
	ops_snapshot_fn cb;
	void *arg;
	struct event *ev;
	json_t *snapshot;
	struct err err;
};

static void snapshot_deliver(evutil_socket_t fd, short what, void *arg)
{
	struct snapshot_call *c = arg;
	event_free(c->ev);
	c->cb(c->snapshot, c->snapshot ? NULL : &c->err, c->arg);
	json_decref(c->snapshot);
	free(c);
}

static void on_snapshot(json_t *snapshot, const struct err *err, void *arg)
{
	struct snapshot_call *c = arg;
	if (snapshot)
		c->snapshot = json_incref(snapshot);
	else
		err_copy(&c->err, err);
	c->ev = defer(snapshot_deliver, c);
}

int ops_snapshot_session(const struct ops_target *t, const char *name, uint64_t ttl_s,
			 ops_snapshot_fn cb, void *arg, struct err *err)
{
	if (check_target(t, false, err) < 0)
		return -EINVAL;
	struct session *s = target_session(t, err);
	if (!s)
		return -err->errnum;
	struct snapshot_call *c = xcalloc(1, sizeof(*c));
	c->cb = cb;
	c->arg = arg;
	int r = snapshot_take(s, name, ttl_s, on_snapshot, c, err);
	if (r < 0)
		free(c);
	return r;
}
