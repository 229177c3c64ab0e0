/* What the files of the session module share (session.c: the table and the sessions' life;
 * sandbox.c: creating and destroying sandboxes on workers; pool.c: the warm pool). Nothing
 * outside src/session/ includes this. Everything here is the loop thread's but the jobs'
 * work functions. */
#pragma once

#include <event2/event.h>
#include <stdbool.h>
#include <time.h>
#include <stdint.h>

#include "config.h"
#include "driver/driver.h"
#include "guest/client.h"
#include "session/session.h"
#include "template/template.h"
#include "util/err.h"

struct pool;
struct net_policy;

struct session_module {
	struct event_base *base;
	const struct config *cfg;
	const struct driver *drv;
	struct template_registry templates;
	struct session *sessions; /* every session, newest first */
	struct htab ids;          /* the same, by id (struct session.by_id) */
	struct htab previews;     /* and by preview name */
	size_t nsessions;
	struct pool *pools; /* pool.c */
	struct event *reaper;
	bool shutting_down;
	bool closing;                    /* the shutdown grace began: nothing new starts */
	struct timespec templates_mtime; /* of the templates directory when last loaded */
	unsigned destroying;             /* sandboxes being destroyed on workers */
	unsigned creating;               /* sandboxes being created on workers */
	void (*shutdown_done)(void *arg);
	void *shutdown_arg;
	struct err last_create_error;
	bool last_create_failed;
	/* session_set_suspend_hook() */
	void (*suspend_hook)(const char *owner, const char *id);
};

extern struct session_module session_mod;

/* --- session.c, for hibernate.c ------------------------------------------------------- */

void session_add_waiter(struct session *s, session_ready_fn cb, void *arg);
/* A creation job's end, on the loop (the sandbox handed to its session, or the failure). */
void session_create_done(void *arg);
/* A session whose creation failed: failed, with err, its waiters told. */
void session_fail_creation(struct session *s, const struct err *err);
/* A new session object, in the table, holding a unit of the owner's QUOTA_SESSIONS. */
struct session *session_table_add(const char *owner, const char *id, struct template *t);
/* session_table_add for a session put back after a restart (hibernate.c): with the preview
 * name and secret it had (the names and tokens its clients hold), when they are valid and
 * the name is free; else new ones. */
struct session *session_table_add_as(const char *owner, const char *id, struct template *t,
				     const char *preview_name,
				     const uint8_t secret[SESSION_SECRET_LEN]);

/* session.restored for a sandbox made from a save of a running VM. */
json_t *session_restored_new(const char *from, const char *session);

/* --- hibernate.c ---------------------------------------------------------------------- */

/* Frees what the driver keeps for `kept` (a hibernated session's, a fork's save) on a worker,
 * taking the reference; a stop waits for it. */
void session_kept_discard(json_t *kept);

/* The agent's liveness pings again, for a ready session (after a pause, a save). */
void session_liveness_on(struct session *s);

/* Whether the session's sandbox has a disk of its own (what hibernation keeps): asked of the
 * sandbox, which may come from the warm pool. */
bool session_has_disk(const struct session *s);

/* Hibernates s (session_pause_mode's checks done); cb as for session_pause. */
void session_hibernate(struct session *s,
		       void (*cb)(struct session *s, const struct err *err, void *arg), void *arg);
/* Starts the resume of a hibernated session: a new sandbox over its disk; cb as for a
 * creation's waiter. */
void session_wake(struct session *s, session_ready_fn cb, void *arg);
/* A resume ended (session.c, when the new sandbox's agent answered or creating it failed):
 * ok, the session runs over its disk and is hibernated no more; else, with `disk_lost`
 * (the new sandbox existed, and took the disk), it is not either; without, it stays
 * hibernated. */
void session_wake_done(struct session *s, bool ok, bool disk_lost);
/* A hibernated session leaves the table: its disk is freed, unless the server is stopping
 * (then it is kept for the next start). */
void session_hibernated_drop(struct session *s);
/* At start: the hibernated sessions a previous run left, back in the table. */
void session_hibernated_restore(void);
/* The state database's record of a hibernated session. */
int session_hibernated_store(struct session *s, struct err *err);

/* --- fork.c ---------------------------------------------------------------------------- */

/* Runs a save (work on a worker, then done on the loop) once the save gate lets it: at most
 * half the workers save at once, the others stay for creations; owners take turns.
 * Hibernations, forks and snapshots go through it. */
void session_save_submit(const char *owner, void (*work)(void *arg), void (*done)(void *arg),
			 void *arg);
/* Saves running and waiting for the gate (for /metrics). */
void session_saves(unsigned *running, unsigned *waiting);

/* Whether s can be saved whole while it runs (a fork, a snapshot: `what` says which, as the
 * error's "forked"): EBUSY (not running, operations in flight), ENOTSUP (the driver cannot),
 * EINVAL (volumes), ESHUTDOWN, or the host's admission. */
int session_save_check(struct session *s, const char *what, struct err *e);
/* The save's end: keep (owned) is the driver's record of it, or NULL with err. */
typedef void (*session_saved_fn)(struct session *s, json_t *keep, const struct err *err, void *arg);
/* Saves s (session_save_check passed) on a worker through the driver's fork_save, s in
 * transition meanwhile; `action` names the metrics' duration ("fork", "snapshot"); durable
 * as fork_save's. */
void session_save(struct session *s, const char *action, bool durable, session_saved_fn cb,
		  void *arg);

/* --- sandbox.c ------------------------------------------------------------------------ */

/* Creating one sandbox on a worker: for a session (s) or for the warm pool (pool). */
struct create_job {
	struct sandbox_spec spec;
	char *sandbox_id;
	struct template *tmpl;
	struct session *s; /* NULL for a pool entry */
	struct pool *pool;
	struct sandbox *sb;
	struct net_policy *net_policy; /* the session's egress policy; NULL: the server's */
	struct snapshot *snapshot;     /* held while a sandbox is made from it (snapshot.h) */
	char *netns_path;
	struct err err;
	int rc;
	uint64_t t0;
};

/* A job for a sandbox of template t with the server's limits, or the session's own. */
struct create_job *session_job_new(struct template *t, struct session *s, struct pool *p);
void session_job_free(struct create_job *j);
/* Records the sandbox a job is about to make before anything of it exists (its id names every
 * kernel object and directory the driver makes), so that a crash from then on leaves a record
 * the next start cleans up by. When the store cannot write, nothing is made: EROFS. */
int session_job_record(struct create_job *j, const char *owner, const char *session_id,
		       struct err *err);
/* The work (on a worker): prepares the template, the network, then the driver's create. */
void session_job_work(void *arg);

/* Hands a sandbox to a worker for destruction; s (optional) is kept until it is done. */
void session_sandbox_destroy(struct sandbox *sb, struct session *s);
/* A destroyed session's end: state gone, its volumes given back, session_on_gone()'s
 * callbacks called. Once its sandbox (if any) is destroyed. */
void session_set_gone(struct session *s);

/* A connection to a new sandbox's agent, watched for liveness. */
struct guest_conn *session_conn_new(int fd, guest_close_fn on_close, void *arg);

/* Whether an agent's first answer says it can serve this server: err names the template. */
int session_check_agent(const struct template *t, const json_t *result, struct err *err);

void session_count_creation(const struct template *t, const char *result);

/* --- pool.c --------------------------------------------------------------------------- */

/* Takes a ready pooled sandbox of the template, if there is one: true with the sandbox and
 * its connection, which the caller owns now; the pool refills. */
bool session_pool_claim(const char *template_name, struct sandbox **ret_sb,
			struct guest_conn **ret_conn);
/* Starts filling the template's pool, or every template's (when SANDBOX_WARM_POOL > 0). */
void session_pool_refill(const char *template_name);
void session_pools_fill(void);
/* Drops the pooled sandboxes of templates that are no longer loaded. */
void session_pools_drop_stale(void);
/* Whether no pool holds a sandbox or is making one (for the shutdown). */
bool session_pools_idle(void);
/* Shutdown: no more retries, every pooled sandbox destroyed; then freed. */
void session_pools_discard(void);
void session_pools_free(void);
/* Sets the warm-pool gauges. */
void session_pools_publish(void);

/* --- session.c ------------------------------------------------------------------------ */

/* Ends the shutdown once nothing is left (sessions, pooled sandboxes, jobs). */
void session_shutdown_check(void);

/* A session's place in its owner's quotas (admit.c): one unit of `sessions`, its memory
 * limit and (disk storage) its disk's size, taken together for `count` sessions of the same
 * limits, or none of it (EAGAIN or ENOBUFS as quota_admit, a 429). session_units_give gives
 * back what a take took; table removal gives a session's own (s->charge). */
void session_charge_of(const struct sandbox_limits *l, struct session_charge *ret);
int session_units_take(const char *owner, const struct session_charge *c, unsigned count,
		       struct err *err);
void session_units_give(const char *owner, const struct session_charge *c, unsigned count);
/* Takes them whatever the quotas: a session held again (a hibernated one at start). */
void session_units_force(const char *owner, const struct session_charge *c);
