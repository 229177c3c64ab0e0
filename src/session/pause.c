/* pause: a session's sandbox frozen and thawed (session_pause in session.h), and the choice
 * between freezing and hibernating (session_pause_mode; hibernation is hibernate.c's).
 *
 * The driver's pause runs on a worker (a freezer settling, a VMM's answer); meanwhile the
 * session is marked in transition: its operations are refused, and a destroy that comes
 * then leaves the sandbox to this job, which hands it to the destroyer when it ends. The
 * agent's liveness pings stop before a pause (a frozen agent answers nothing) and start
 * again after the resume. Every call is counted in /metrics (session_pauses_total by action
 * and result, session_pause_duration_seconds for those that reached the driver). */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "loop.h"
#include "metrics/metrics.h"
#include "session/internal.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/random.h"
#include "util/time.h"

struct pause_job {
	struct session *s;
	struct sandbox *sb;
	bool pause;
	uint64_t t0; /* monotonic ms, when it was asked for */
	int rc;
	struct err err;
	void (*cb)(struct session *s, const struct err *err, void *arg);
	void *arg;
};

static void pause_work(void *arg)
{
	struct pause_job *j = arg;
	j->rc = j->sb->driver->pause(j->sb, j->pause, &j->err);
}

void session_liveness_on(struct session *s)
{
	if (s->conn && s->state == SESSION_READY)
		guest_conn_set_liveness(s->conn, session_mod.cfg->ping_interval_ms,
					session_mod.cfg->ping_timeout_ms);
}

static void on_clock_set(struct guest_op *op, json_t *result, const struct err *err, void *arg)
{
	if (err)
		log_warn("session", "a resumed VM's clock was not set: %s", err->msg);
}

static const struct guest_op_cbs clock_cbs = { .on_done = on_clock_set };

/* A VM's clock stood still while it was paused: the agent sets it again, with fresh entropy
 * (what it does after a restore, without a new identity). */
static void refresh_clock(struct session *s)
{
	if (!s->conn || !s->sb->driver->snapshots)
		return;
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	char entropy[65];
	random_hex(entropy, 32);
	json_auto_t *req = json_pack("{s:s, s:{s:I, s:I}, s:s}", "op", "resume", "time", "sec",
				     (json_int_t)now.tv_sec, "nsec", (json_int_t)now.tv_nsec,
				     "entropy", entropy);
	struct err e;
	struct guest_op *op = guest_op_start(s->conn, req, &clock_cbs, NULL, &e);
	if (op)
		guest_op_set_timeout(op, session_mod.cfg->first_reply_timeout_ms, "resume");
}

static const char *action_name(bool pause)
{
	return pause ? "pause" : "resume";
}

static void pause_done(void *arg)
{
	struct pause_job *j = arg;
	struct session *s = j->s;
	s->transition = false;
	metrics_observe(metrics_daemon.session_pause_duration,
			(double)(time_mono_ms() - j->t0) / 1000.0, action_name(j->pause));
	metrics_add(metrics_daemon.session_pauses_total, 1, action_name(j->pause),
		    j->rc < 0 || s->destroy_pending ? "failure" : "success");
	struct err e;
	if (s->destroy_pending) {
		/* Destroyed meanwhile: now the sandbox can go. */
		s->destroy_pending = false;
		session_sandbox_destroy(s->sb, s);
		s->sb = NULL;
		err_set(&e, ECANCELED, "session `%s` was destroyed while it was being %s", s->id,
			j->pause ? "paused" : "resumed");
		j->cb(s, &e, j->arg);
	} else if (j->rc < 0) {
		if (j->pause)
			session_liveness_on(s);
		log_warn("session", "session %s: %s failed: %s", s->id,
			 j->pause ? "pause" : "resume", j->err.msg);
		j->cb(s, &j->err, j->arg);
	} else {
		s->state = j->pause ? SESSION_PAUSED : SESSION_READY;
		s->auto_paused = false; /* the reaper's pause says so after this */
		s->disk_paused = false; /* and the state filesystem's watch */
		if (j->pause) {
			s->paused_ms = time_wall_ms();
		} else {
			session_liveness_on(s);
			refresh_clock(s);
			session_touch(s);
		}
		log_info("session", "session %s %s", s->id, j->pause ? "paused" : "resumed");
		j->cb(s, NULL, j->arg);
	}
	session_unref(s);
	free(j);
}

/* A call refused before it reached the driver (the session's state, the driver). */
static void refuse_as(struct session *s, const char *action, const struct err *e,
		      void (*cb)(struct session *s, const struct err *err, void *arg), void *arg)
{
	metrics_add(metrics_daemon.session_pauses_total, 1, action, "refused");
	cb(s, e, arg);
}

static void refuse(struct session *s, bool pause, const struct err *e,
		   void (*cb)(struct session *s, const struct err *err, void *arg), void *arg)
{
	refuse_as(s, action_name(pause), e, cb, arg);
}

static void session_freeze(struct session *s, bool pause, bool force,
			   void (*cb)(struct session *s, const struct err *err, void *arg),
			   void *arg);

void session_pause(struct session *s, bool pause,
		   void (*cb)(struct session *s, const struct err *err, void *arg), void *arg)
{
	session_pause_mode(s, pause, SESSION_PAUSE_FREEZE, cb, arg);
}

struct keep_call {
	void (*cb)(struct session *s, const struct err *err, void *arg);
	void *arg;
};

/* A hibernation for SESSION_PAUSE_KEEP ended: a failure that left the session running (a
 * save with no room) freezes it instead. */
static void on_kept(struct session *s, const struct err *err, void *arg)
{
	struct keep_call *k = arg;
	if (err && s && s->state == SESSION_READY && !s->transition && s->sb) {
		log_info("session", "session %s: frozen instead (%s)", s->id, err->msg);
		session_freeze(s, true, false, k->cb, k->arg);
	} else {
		k->cb(s, err, k->arg);
	}
	if (s)
		session_unref(s);
	free(k);
}

void session_pause_mode(struct session *s, bool pause, enum session_pause_mode mode,
			void (*cb)(struct session *s, const struct err *err, void *arg), void *arg)
{
	struct err e;
	if (s->transition || s->resuming) {
		err_set(&e, EBUSY, "session `%s` is being paused or resumed", s->id);
		refuse(s, pause, &e, cb, arg);
		return;
	}
	if (pause && s->hibernated) {
		err_set(&e, EBUSY, "session `%s` is paused already (hibernated)", s->id);
		refuse(s, pause, &e, cb, arg);
		return;
	}
	if (!pause && s->hibernated && s->state == SESSION_PAUSED) {
		session_wake(s, cb, arg);
		return;
	}
	/* E2B's pause: its processes must carry on; hibernated where that keeps them, frozen
	 * otherwise, and frozen when the save fails (no room for it). */
	if (pause && mode == SESSION_PAUSE_KEEP) {
		if (s->state == SESSION_READY && s->sb &&
		    s->sb->driver->hibernate_keeps_processes && session_can_hibernate(s) &&
		    !s->running) {
			struct keep_call *k = xcalloc(1, sizeof(*k));
			k->cb = cb;
			k->arg = arg;
			session_ref(s);
			session_hibernate(s, on_kept, k);
			return;
		}
		mode = SESSION_PAUSE_FREEZE;
	}
	if (!pause || mode == SESSION_PAUSE_FREEZE) {
		session_freeze(s, pause, false, cb, arg);
		return;
	}
	/* Hibernation: of a running or a frozen session. */
	if ((s->state != SESSION_READY && s->state != SESSION_PAUSED) || !s->sb)
		err_set(&e, EBUSY, "session `%s` is %s", s->id, session_state_name(s->state));
	else if (!s->sb->driver->hibernate)
		err_set(&e, ENOTSUP,
			"the %s driver cannot hibernate sessions (mode \"freeze\" "
			"pauses them)",
			s->sb->driver->name);
	else if (!s->sb->driver->hibernate_keeps_processes && !session_has_disk(s))
		err_set(&e, EINVAL,
			"only a session with a disk (\"storage\": \"disk\") can be hibernated; "
			"mode \"freeze\" pauses this one");
	else if (s->volumes)
		err_set(&e, EINVAL,
			"a session with volumes cannot be hibernated; mode "
			"\"freeze\" pauses it");
	else if (s->running)
		err_set(&e, EBUSY,
			"session `%s` has %u operations in flight (commands, file transfers, "
			"attaches, previews): hibernate it once they ended",
			s->id, s->running);
	else {
		session_hibernate(s, cb, arg);
		return;
	}
	refuse_as(s, "hibernate", &e, cb, arg);
}

void session_freeze_now(struct session *s,
			void (*cb)(struct session *s, const struct err *err, void *arg), void *arg)
{
	session_freeze(s, true, true, cb, arg);
}

/* force: with operations in flight too (they carry on after the resume). */
static void session_freeze(struct session *s, bool pause, bool force,
			   void (*cb)(struct session *s, const struct err *err, void *arg),
			   void *arg)
{
	struct err e;
	if (s->transition) {
		err_set(&e, EBUSY, "session `%s` is being paused or resumed", s->id);
		refuse(s, pause, &e, cb, arg);
		return;
	}
	if (pause && s->state == SESSION_PAUSED) {
		err_set(&e, EBUSY, "session `%s` is paused already", s->id);
		refuse(s, pause, &e, cb, arg);
		return;
	}
	if (!pause && s->state == SESSION_READY) {
		err_set(&e, EBUSY, "session `%s` is not paused", s->id);
		refuse(s, pause, &e, cb, arg);
		return;
	}
	if (s->state != (pause ? SESSION_READY : SESSION_PAUSED) || !s->sb) {
		err_set(&e, EBUSY, "session `%s` is %s", s->id, session_state_name(s->state));
		refuse(s, pause, &e, cb, arg);
		return;
	}
	if (!s->sb->driver->pause) {
		err_set(&e, ENOTSUP, "the %s driver cannot pause sessions", s->sb->driver->name);
		refuse(s, pause, &e, cb, arg);
		return;
	}
	if (!pause && s->disk_paused && session_room_low(&e)) {
		refuse(s, pause, &e, cb, arg);
		return;
	}
	if (pause && s->running && !force) {
		err_set(&e, EBUSY,
			"session `%s` has %u operations in flight (commands, file transfers, "
			"attaches, previews): pause it once they ended",
			s->id, s->running);
		refuse(s, pause, &e, cb, arg);
		return;
	}
	struct pause_job *j = xcalloc(1, sizeof(*j));
	j->s = s;
	session_ref(s);
	j->sb = s->sb;
	j->pause = pause;
	j->t0 = time_mono_ms();
	j->cb = cb;
	j->arg = arg;
	s->transition = true;
	if (pause && s->conn)
		guest_conn_set_liveness(s->conn, 0, session_mod.cfg->ping_timeout_ms);
	loop_submit(pause_work, pause_done, j);
}
