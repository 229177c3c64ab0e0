/* fork: new sessions from one running session's current state (session_fork, lifecycle.md).
 *
 * The driver saves the session's sandbox whole without ending it (driver.h: fork_save; a VM's
 * RAM and devices, a copy of its disk) while the session is in transition (its operations
 * refused, a destroy left to this job). Each fork is then a new session of the same owner,
 * template, limits, environment and egress policy, whose sandbox is made from that save as a
 * hibernated session's is at its resume (sandbox_spec.hibernated): its processes carry on
 * from the moment of the save, and it has an identity of its own (session id, preview name
 * and secret), fresh entropy and its own network, from the `resume` every new sandbox gets.
 * The caller hears once every fork is ready or failed; then the save is freed. Each fork
 * holds a unit of its owner's sessions, taken before anything is made. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "session/quota.h"
#include "loop.h"
#include "metrics/metrics.h"
#include "net/net.h"
#include "session/internal.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/time.h"

struct fork_job;

/* One fork: its session id, and why it failed. */
struct fork_child {
	struct fork_job *j;
	char *id;
	bool failed;
	struct err err;
};

struct fork_job {
	struct session *s; /* the parent (referenced) */
	char *owner;
	struct session_charge charge; /* each fork's (session_units_take) */
	unsigned count;
	json_t *keep; /* the save */
	uint32_t next_channel;
	struct fork_child *forks;
	unsigned pending;
	uint64_t t0;
	session_fork_fn cb;
	void *arg;
};

static void fork_job_free(struct fork_job *j)
{
	for (unsigned i = 0; i < j->count; i++)
		free(j->forks[i].id);
	free(j->forks);
	free(j->owner);
	json_decref(j->keep);
	free(j);
}

/* Every fork is ready or failed: the answer, then the save goes. */
static void forks_done(struct fork_job *j)
{
	json_t *list = json_array();
	unsigned ready = 0;
	struct err first = { 0 };
	for (unsigned i = 0; i < j->count; i++) {
		struct fork_child *c = &j->forks[i];
		struct session *f = session_find(j->owner, c->id);
		if (!c->failed && f && f->state == SESSION_READY) {
			json_array_append_new(list, session_json(f));
			ready++;
			continue;
		}
		const char *why = c->failed ? c->err.msg : "it was destroyed as it was made";
		if (!first.errnum)
			err_set(&first, c->failed ? c->err.errnum : ECANCELED, "%s", why);
		json_array_append_new(list,
				      json_pack("{s:s, s:s, s:s, s:s}", "id", c->id, "template",
						j->s->tmpl->name, "state", "failed", "error", why));
	}
	log_info("session", "session %s: %u of %u fork(s) ready in %llu ms", j->s->id, ready,
		 j->count, (unsigned long long)(time_mono_ms() - j->t0));
	metrics_add(metrics_daemon.session_pauses_total, 1, "fork", ready ? "success" : "failure");
	if (ready)
		j->cb(list, NULL, j->arg);
	else
		j->cb(NULL, &first, j->arg);
	json_decref(list);
	session_unref(j->s);
	session_kept_discard(TAKE_PTR(j->keep));
	fork_job_free(j);
}

static void fork_one_less(struct fork_job *j)
{
	if (--j->pending == 0)
		forks_done(j);
}

static void on_fork_ready(struct session *f, const struct err *err, void *arg)
{
	struct fork_child *c = arg;
	if (err) {
		c->failed = true;
		err_copy(&c->err, err);
	}
	fork_one_less(c->j);
}

/* --- making the forks ------------------------------------------------------------------ */

/* A new session like the parent, in the table, being created from the save. */
static void start_fork(struct fork_job *j, unsigned i)
{
	struct session *p = j->s;
	struct session *f = session_table_add(p->owner, j->forks[i].id, p->tmpl);
	f->state = SESSION_CREATING;
	f->id_generated = true;
	f->resources = p->resources;
	f->limits = p->limits;
	f->charge = j->charge;
	f->idle_timeout_s = p->idle_timeout_s;
	f->on_timeout = p->on_timeout;
	f->auto_resume = p->auto_resume;
	json_decref(f->env);
	f->env = json_deep_copy(p->env);
	if (p->egress_spec)
		f->egress_spec = json_deep_copy(p->egress_spec);
	if (p->metadata)
		f->metadata = json_deep_copy(p->metadata);
	if (p->alias)
		f->alias = xstrdup(p->alias);
	/* A VM restored whole goes on with its agent's channels; a jail's starts afresh. */
	if (session_mod.drv->hibernate_keeps_processes) {
		f->next_channel = j->next_channel;
		f->restored = session_restored_new("fork", p->id);
	}
	j->pending++;
	session_add_waiter(f, on_fork_ready, &j->forks[i]);

	struct err e;
	struct net_policy *egress = NULL;
	if (f->egress_spec && net_policy_for_session(f->egress_spec, &egress, &e) < 0) {
		session_fail_creation(f, &e);
		return;
	}
	struct create_job *cj = session_job_new(p->tmpl, f, NULL);
	cj->net_policy = egress;
	cj->spec.hibernated = j->keep; /* held by j until every fork's create returned */
	if (session_job_record(cj, f->owner, f->id, &e) < 0) {
		session_job_free(cj);
		session_fail_creation(f, &e);
		return;
	}
	session_ref(f);
	session_mod.creating++;
	loop_submit(session_job_work, session_create_done, cj);
}

/* --- the save gate ---------------------------------------------------------------------
 *
 * A save holds a worker for as long as it writes (a VM's RAM: seconds for a large one), and
 * the workers also make every tenant's sandboxes: at most half of them save at once, the
 * rest stay for creations. Among waiting saves, owners take turns: the next to start is the
 * oldest of the owner whose last save started longest ago (one that never saved first), so
 * a client that asks for many cannot hold back another's. */

struct save_slot {
	char *owner;
	void (*work)(void *arg);
	void (*done)(void *arg);
	void *arg;
	struct save_slot *next;
};

static struct {
	struct save_slot *queue; /* waiting, oldest first */
	unsigned nrunning;
	uint64_t started; /* saves started so far */
	/* When each owner with a save waiting or running last started one. */
	struct gate_owner {
		char *owner;
		uint64_t last; /* 0: never */
		unsigned held; /* its saves waiting or running */
	} * owners;
	size_t nowners;
} gate;

static unsigned gate_limit(void)
{
	unsigned w = session_mod.cfg->workers / 2;
	return w ? w : 1;
}

static struct gate_owner *gate_owner(const char *owner)
{
	for (size_t i = 0; i < gate.nowners; i++)
		if (strcmp(gate.owners[i].owner, owner) == 0)
			return &gate.owners[i];
	gate.owners = xrealloc(gate.owners, (gate.nowners + 1) * sizeof(*gate.owners));
	struct gate_owner *o = &gate.owners[gate.nowners++];
	*o = (struct gate_owner){ .owner = xstrdup(owner) };
	return o;
}

static void gate_owner_put(const char *owner)
{
	struct gate_owner *o = gate_owner(owner);
	if (--o->held)
		return;
	free(o->owner);
	*o = gate.owners[--gate.nowners];
}

static void gate_work(void *arg)
{
	struct save_slot *slot = arg;
	slot->work(slot->arg);
}

static void gate_dispatch(void);

static void gate_done(void *arg)
{
	struct save_slot *slot = arg;
	gate.nrunning--;
	slot->done(slot->arg);
	gate_owner_put(slot->owner);
	free(slot->owner);
	free(slot);
	gate_dispatch();
}

static void gate_dispatch(void)
{
	while (gate.queue && gate.nrunning < gate_limit()) {
		struct save_slot **pick = &gate.queue;
		uint64_t best = UINT64_MAX;
		for (struct save_slot **pp = &gate.queue; *pp; pp = &(*pp)->next) {
			uint64_t last = gate_owner((*pp)->owner)->last;
			if (last < best) {
				best = last;
				pick = pp;
			}
		}
		struct save_slot *slot = *pick;
		*pick = slot->next;
		gate_owner(slot->owner)->last = ++gate.started;
		gate.nrunning++;
		loop_submit(gate_work, gate_done, slot);
	}
}

void session_save_submit(const char *owner, void (*work)(void *arg), void (*done)(void *arg),
			 void *arg)
{
	struct save_slot *slot = xcalloc(1, sizeof(*slot));
	slot->owner = xstrdup(owner ? owner : "");
	slot->work = work;
	slot->done = done;
	slot->arg = arg;
	gate_owner(slot->owner)->held++;
	struct save_slot **pp = &gate.queue;
	while (*pp)
		pp = &(*pp)->next;
	*pp = slot;
	if (gate.nrunning >= gate_limit())
		log_info("session", "a save of owner `%s` waits: %u of %u running", slot->owner,
			 gate.nrunning, gate_limit());
	gate_dispatch();
}

void session_saves(unsigned *running, unsigned *waiting)
{
	*running = gate.nrunning;
	*waiting = 0;
	for (struct save_slot *s = gate.queue; s; s = s->next)
		(*waiting)++;
}

/* --- saving a running session whole (fork and snapshot) ------------------------------ */

struct save_job {
	struct session *s; /* referenced */
	json_t *keep;
	int rc;
	struct err err;
	uint64_t t0;
	const char *action; /* the metrics' */
	bool durable;       /* driver.h: fork_save's */
	session_saved_fn cb;
	void *arg;
};

static void save_work(void *arg)
{
	struct save_job *j = arg;
	j->rc = session_mod.drv->fork_save(j->s->sb, j->durable, &j->keep, &j->err);
}

static void save_done(void *arg)
{
	struct save_job *j = arg;
	struct session *s = j->s;
	session_mod.creating--;
	s->transition = false;
	metrics_observe(metrics_daemon.session_pause_duration,
			(double)(time_mono_ms() - j->t0) / 1000.0, j->action);
	struct err e;
	if (s->destroy_pending) {
		/* Destroyed meanwhile: its sandbox goes now, and so does the save. */
		s->destroy_pending = false;
		session_sandbox_destroy(s->sb, s);
		s->sb = NULL;
		err_set(&e, ECANCELED, "session `%s` was destroyed while it was being saved",
			s->id);
		j->rc = -ECANCELED;
		err_copy(&j->err, &e);
	} else {
		session_liveness_on(s);
	}
	if (j->rc < 0) {
		if (j->rc != -ECANCELED)
			log_warn("session", "session %s: %s failed: %s", s->id, j->action,
				 j->err.msg);
		if (j->keep)
			session_kept_discard(TAKE_PTR(j->keep));
	}
	j->cb(s, j->rc < 0 ? NULL : TAKE_PTR(j->keep), j->rc < 0 ? &j->err : NULL, j->arg);
	session_unref(s);
	free(j);
	session_shutdown_check();
}

int session_save_check(struct session *s, const char *what, struct err *e)
{
	if (s->state != SESSION_READY || s->transition || !s->sb || !s->conn)
		return err_set(
			e, EBUSY, "session `%s` is %s: only a running session can be %s", s->id,
			s->transition ? "being paused or resumed" : session_state_name(s->state),
			what);
	if (!session_mod.drv->fork_save)
		return err_set(e, ENOTSUP,
			       "the %s driver cannot fork or snapshot sessions (its sandboxes "
			       "cannot be saved while they run)",
			       session_mod.drv->name);
	if (s->volumes)
		return err_set(e, EINVAL, "a session with volumes cannot be %s", what);
	if (s->running)
		return err_set(e, EBUSY,
			       "session `%s` has %u operations in flight (commands, file "
			       "transfers, attaches, previews): it can be %s once they ended",
			       s->id, s->running, what);
	if (session_closing())
		return err_set(e, ESHUTDOWN, "the server is shutting down");
	if (s->limits.disk && session_disk_check(s->limits.workspace_bytes, e) < 0)
		return -ENOSPC;
	return session_host_check(e);
}

void session_save(struct session *s, const char *action, bool durable, session_saved_fn cb,
		  void *arg)
{
	struct save_job *j = xcalloc(1, sizeof(*j));
	j->s = s;
	session_ref(s);
	j->t0 = time_mono_ms();
	j->action = action;
	j->durable = durable;
	j->cb = cb;
	j->arg = arg;
	s->transition = true;
	/* A stopped VM answers no ping meanwhile. */
	guest_conn_set_liveness(s->conn, 0, session_mod.cfg->ping_timeout_ms);
	session_touch(s);
	session_mod.creating++; /* a stop waits for it */
	session_save_submit(s->owner, save_work, save_done, j);
}

/* --- fork -------------------------------------------------------------------------------- */

static void fork_saved(struct session *s, json_t *keep, const struct err *err, void *arg)
{
	struct fork_job *j = arg;
	(void)s;
	if (!keep) {
		metrics_add(metrics_daemon.session_pauses_total, 1, "fork", "failure");
		session_units_give(j->owner, &j->charge, j->count);
		j->cb(NULL, err, j->arg);
		session_unref(j->s);
		fork_job_free(j);
		return;
	}
	j->keep = keep;
	/* One more than the forks until all are started: one that fails at once must not end
	 * the job before the next is made. */
	j->pending = 1;
	for (unsigned i = 0; i < j->count; i++)
		start_fork(j, i);
	fork_one_less(j);
}

/* A fork turned down before anything was done. */
static void refuse(const struct err *e, session_fork_fn cb, void *arg)
{
	metrics_add(metrics_daemon.session_pauses_total, 1, "fork", "refused");
	cb(NULL, e, arg);
}

void session_fork(struct session *s, unsigned count, session_fork_fn cb, void *arg)
{
	struct err e;
	if (session_save_check(s, "forked", &e) < 0) {
		refuse(&e, cb, arg);
		return;
	}
	/* Every fork's unit first: the server's cap and the owner's, a 429 for any beyond. */
	struct session_charge charge;
	session_charge_of(&s->limits, &charge);
	if (session_units_take(s->owner, &charge, count, &e) < 0) {
		e.errnum = EAGAIN;
		err_wrap(&e, "forking %u session(s)", count);
		refuse(&e, cb, arg);
		return;
	}
	struct fork_job *j = xcalloc(1, sizeof(*j));
	j->s = s;
	session_ref(s);
	j->owner = xstrdup(s->owner);
	j->charge = charge;
	j->count = count;
	j->forks = xcalloc(count, sizeof(*j->forks));
	for (unsigned i = 0; i < count; i++) {
		j->forks[i].j = j;
		j->forks[i].id = session_new_id();
	}
	j->next_channel = guest_conn_next_channel(s->conn);
	j->t0 = time_mono_ms();
	j->cb = cb;
	j->arg = arg;
	/* Its save lives until its forks are made: nothing of it need reach the disk. */
	session_save(s, "fork", false, fork_saved, j);
}
