/* hibernate: a paused session that keeps no sandbox at all (session_pause_mode, lifecycle.md).
 *
 * The driver ends the sandbox and keeps its disk (driver.h: hibernate); the session stays in
 * the table as paused, with the driver's record of what it kept, and so does a row of the
 * state database's `hibernated_sessions`, so that the next start of the daemon puts it back
 * (session_hibernated_restore). A resume makes a new sandbox over the kept disk through the
 * same path as a creation (the session is `creating` meanwhile, and its operations wait for
 * it); if that fails before the new sandbox exists the session stays hibernated. Destroying
 * a hibernated session frees the kept disk, except when the daemon stops: then it is kept. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "session/quota.h"
#include "loop.h"
#include "metrics/metrics.h"
#include "net/net.h"
#include "session/internal.h"
#include "session/snapshot.h"
#include "store/store.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/time.h"

static const struct store_records table = {
	.table = "hibernated_sessions",
	.key = "id",
};

bool session_has_disk(const struct session *s)
{
	uint64_t used, size;
	return s->sb && s->sb->driver->disk_usage &&
	       s->sb->driver->disk_usage(s->sb, &used, &size) == 0;
}

bool session_can_hibernate(const struct session *s)
{
	return s->sb && s->sb->driver->hibernate && !s->volumes &&
	       (s->sb->driver->hibernate_keeps_processes || session_has_disk(s));
}

/* --- the state database's record ---------------------------------------------------- */

/* What a restart needs to put the session back as it was asked for. */
static json_t *record_of(const struct session *s)
{
	const struct session_resources *r = &s->resources;
	json_t *j =
		json_pack("{s:s, s:O, s:O, s:I, s:I, s:I, s:s, s:b, s:{s:I, s:I, s:I, s:I, s:i}}",
			  "template", s->tmpl->name, "kept", s->kept, "env", s->env, "createdMs",
			  (json_int_t)s->created_ms, "pausedMs", (json_int_t)s->paused_ms,
			  "idleTimeout", (json_int_t)s->idle_timeout_s, "onTimeout",
			  session_on_timeout_name(s->on_timeout), "autoPaused", s->auto_paused,
			  "resources", "memoryBytes", (json_int_t)r->memory_bytes, "cpuQuotaUs",
			  (json_int_t)r->cpu_quota_us, "diskBytes", (json_int_t)r->workspace_bytes,
			  "pidsMax", (json_int_t)r->pids_max, "storage", (int)r->storage);
	if (s->next_channel)
		json_object_set_new(j, "nextChannel", json_integer(s->next_channel));
	if (s->auto_resume)
		json_object_set_new(j, "autoResume", json_true());
	/* What its clients hold: its preview name and the tokens made from its secret (the
	 * state database is root's alone, as the keys' are), and the E2B API's view of it. */
	char secret[2 * SESSION_SECRET_LEN + 1];
	for (size_t i = 0; i < SESSION_SECRET_LEN; i++)
		snprintf(secret + 2 * i, 3, "%02x", s->secret[i]);
	json_object_set_new(j, "previewName", json_string(s->preview_name));
	json_object_set_new(j, "secret", json_string(secret));
	if (s->deadline_ms)
		json_object_set_new(j, "deadlineMs", json_integer((json_int_t)s->deadline_ms));
	if (s->deadline_span_s)
		json_object_set_new(j, "deadlineSpanS", json_integer(s->deadline_span_s));
	if (s->metadata)
		json_object_set(j, "metadata", s->metadata);
	if (s->alias)
		json_object_set_new(j, "alias", json_string(s->alias));
	if (s->egress_spec)
		json_object_set(j, "egress", s->egress_spec);
	return j;
}

int session_hibernated_store(struct session *s, struct err *err)
{
	json_auto_t *rec = record_of(s);
	return store_records_put(&table, s->owner, s->id, rec, true, err);
}

static void record_delete(const char *owner, const char *id)
{
	store_records_delete(&table, owner, id);
}

/* --- freeing what a hibernated session keeps ---------------------------------------- */

struct discard_job {
	json_t *kept;
};

static void discard_work(void *arg)
{
	struct discard_job *j = arg;
	session_mod.drv->hibernated_discard(j->kept);
}

static void discard_done(void *arg)
{
	struct discard_job *j = arg;
	json_decref(j->kept);
	free(j);
	session_mod.destroying--;
	session_shutdown_check();
}

void session_kept_discard(json_t *kept)
{
	struct discard_job *j = xcalloc(1, sizeof(*j));
	j->kept = kept;
	session_mod.destroying++;
	loop_submit(discard_work, discard_done, j);
}

void session_hibernated_drop(struct session *s)
{
	if (!s->kept)
		return;
	if (session_mod.shutting_down) {
		log_info("session", "session %s stays hibernated for the next start", s->id);
	} else {
		record_delete(s->owner, s->id);
		session_kept_discard(s->kept);
		s->kept = NULL;
	}
	s->hibernated = false;
}

/* --- hibernating -------------------------------------------------------------------- */

struct hibernate_job {
	struct session *s;
	struct sandbox *sb;
	char *sandbox_id;
	json_t *kept;
	uint64_t t0;
	int rc;
	struct err err;
	void (*cb)(struct session *s, const struct err *err, void *arg);
	void *arg;
};

static void hibernate_work(void *arg)
{
	struct hibernate_job *j = arg;
	j->rc = session_mod.drv->hibernate(j->sb, &j->kept, &j->err);
	/* As after a destroy: nothing of it may be left using its network. */
	if (j->rc == 0)
		net_sandbox_destroy(j->sandbox_id);
}

static void hibernate_failed(struct hibernate_job *j)
{
	struct session *s = j->s;
	s->sb = j->sb;
	net_sandbox_start(j->sandbox_id);
	if (s->destroy_pending) {
		s->destroy_pending = false;
		session_sandbox_destroy(s->sb, s);
		s->sb = NULL;
		struct err e;
		err_set(&e, ECANCELED, "session `%s` was destroyed while it was being hibernated",
			s->id);
		j->cb(s, &e, j->arg);
		return;
	}
	session_liveness_on(s);
	log_warn("session", "session %s: hibernation failed: %s", s->id, j->err.msg);
	j->cb(s, &j->err, j->arg);
}

static void hibernate_done(void *arg)
{
	struct hibernate_job *j = arg;
	struct session *s = j->s;
	s->transition = false;
	s->hibernating = false;
	session_mod.destroying--;
	metrics_observe(metrics_daemon.session_pause_duration,
			(double)(time_mono_ms() - j->t0) / 1000.0, "hibernate");
	metrics_add(metrics_daemon.session_pauses_total, 1, "hibernate",
		    j->rc < 0 ? "failure" : "success");
	if (j->rc < 0) {
		hibernate_failed(j);
		goto out;
	}
	/* The sandbox is gone: so are its connection and its record, which the session's record
	 * replaces in one transaction (a crash between them would lose the kept disk). */
	sqlite3 *db = store_db();
	bool txn = db && sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) == SQLITE_OK;
	store_sandbox_delete(j->sandbox_id);
	/* A restored VM's agent may still send what it had queued for this connection: the
	 * next one goes on with its channel numbers, so that none of it is taken for a reply. */
	if (s->conn)
		s->next_channel = guest_conn_next_channel(s->conn);
	guest_conn_free(s->conn);
	s->conn = NULL;
	s->kept = j->kept;
	s->hibernated = true;
	s->paused_ms = time_wall_ms();
	s->auto_paused = false; /* the reaper's pause says so after this */
	struct err e;
	if (s->destroy_pending) {
		/* Destroyed meanwhile: a stopping server keeps it for its next start. */
		s->destroy_pending = false;
		if (session_mod.shutting_down && session_hibernated_store(s, &e) < 0)
			log_warn("session", "session %s: %s", s->id, e.msg);
		if (txn)
			sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
		session_hibernated_drop(s);
		session_set_gone(s);
		err_set(&e, ECANCELED, "session `%s` was destroyed while it was being hibernated",
			s->id);
		j->cb(s, &e, j->arg);
		goto out;
	}
	s->state = SESSION_PAUSED;
	/* Both or neither: without its own record, the sandbox's stays, and a restart removes
	 * what the driver kept as it removes any sandbox's leftovers. */
	if (session_hibernated_store(s, &e) < 0) {
		log_warn("session", "session %s is hibernated but will not survive a restart: %s",
			 s->id, e.msg);
		if (txn)
			sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
	} else if (txn && sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
		log_warn("session", "session %s: recording its hibernation: %s", s->id,
			 sqlite3_errmsg(db));
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
	}
	log_info("session", "session %s hibernated", s->id);
	j->cb(s, NULL, j->arg);
out:
	session_unref(s);
	free(j->sandbox_id);
	free(j);
	session_shutdown_check();
}

void session_hibernate(struct session *s,
		       void (*cb)(struct session *s, const struct err *err, void *arg), void *arg)
{
	struct hibernate_job *j = xcalloc(1, sizeof(*j));
	j->s = s;
	session_ref(s);
	j->sb = s->sb;
	j->sandbox_id = xstrdup(s->sb->id);
	j->t0 = time_mono_ms();
	j->cb = cb;
	j->arg = arg;
	s->transition = true;
	s->hibernating = true;
	/* The job owns the sandbox now (the driver frees it): nothing on the loop may read it
	 * meanwhile (the session's listing, /metrics). A failure hands it back. */
	s->sb = NULL;
	if (s->conn)
		guest_conn_set_liveness(s->conn, 0, session_mod.cfg->ping_timeout_ms);
	net_sandbox_stop(j->sandbox_id); /* its resolver lives on this thread */
	session_mod.destroying++;        /* a stop waits for it */
	session_save_submit(s->owner, hibernate_work, hibernate_done, j);
}

/* --- resuming ----------------------------------------------------------------------- */

void session_wake(struct session *s, session_ready_fn cb, void *arg)
{
	struct err e;
	struct net_policy *egress = NULL;
	if (s->egress_spec && net_policy_for_session(s->egress_spec, &egress, &e) < 0) {
		cb(NULL, &e, arg);
		return;
	}
	struct create_job *j = session_job_new(s->tmpl, s, NULL);
	j->net_policy = egress;
	j->spec.hibernated = s->kept;
	/* Over its disk, of the size it has, whatever the limits said at its creation. */
	j->spec.limits.disk = true;
	if (json_integer_value(json_object_get(s->kept, "diskBytes")) > 0)
		j->spec.limits.workspace_bytes =
			(uint64_t)json_integer_value(json_object_get(s->kept, "diskBytes"));
	if (session_job_record(j, s->owner, s->id, &e) < 0) {
		session_job_free(j);
		cb(NULL, &e, arg);
		return;
	}
	s->state = SESSION_CREATING;
	s->resuming = true;
	json_decref(s->restored);
	s->restored = session_mod.drv->hibernate_keeps_processes
			      ? session_restored_new("hibernation", s->id)
			      : NULL;
	session_add_waiter(s, cb, arg);
	session_ref(s);
	session_mod.creating++;
	loop_submit(session_job_work, session_create_done, j);
}

void session_wake_done(struct session *s, bool ok, bool disk_lost)
{
	s->resuming = false;
	metrics_add(metrics_daemon.session_pauses_total, 1, "resume", ok ? "success" : "failure");
	if (!ok && !disk_lost)
		return; /* still hibernated: its record and what it keeps stay */
	/* The new sandbox took the disk (and its ids): freed with it from now on. */
	record_delete(s->owner, s->id);
	json_decref(s->kept);
	s->kept = NULL;
	s->hibernated = false;
}

/* --- at start ----------------------------------------------------------------------- */

static uint64_t uint_of(const json_t *o, const char *key)
{
	json_int_t v = json_integer_value(json_object_get(o, key));
	return v > 0 ? (uint64_t)v : 0;
}

/* n bytes from 2n hex digits (exactly); false for anything else. */
static bool hex_bytes(const char *hex, uint8_t *out, size_t n)
{
	if (!hex || strlen(hex) != 2 * n)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned v;
		if (!isxdigit((unsigned char)hex[2 * i]) ||
		    !isxdigit((unsigned char)hex[2 * i + 1]) || sscanf(hex + 2 * i, "%2x", &v) != 1)
			return false;
		out[i] = (uint8_t)v;
	}
	return true;
}

/* One record back in the table; false (with err) when it cannot be. */
static bool restore_one(const char *owner, const char *id, json_t *rec, struct err *err)
{
	const char *tname = json_string_value(json_object_get(rec, "template"));
	json_t *kept = json_object_get(rec, "kept");
	struct template *t = tname ? template_find(&session_mod.templates, tname) : NULL;
	if (!session_id_valid(id) || !json_is_object(kept)) {
		err_set(err, EINVAL, "its record is not one");
		return false;
	}
	if (!t) {
		err_set(err, ENOENT, "its template `%s` is gone", tname ? tname : "?");
		return false;
	}
	json_t *res = json_object_get(rec, "resources");
	struct session_resources r = {
		.memory_bytes = uint_of(res, "memoryBytes"),
		.cpu_quota_us = uint_of(res, "cpuQuotaUs"),
		.workspace_bytes = uint_of(res, "diskBytes"),
		.pids_max = (uint32_t)uint_of(res, "pidsMax"),
		.storage = (enum session_storage)uint_of(res, "storage"),
	};
	struct sandbox_limits limits;
	if (r.storage > SESSION_STORAGE_DISK || session_limits(t, &r, &limits, err) < 0)
		return false;
	/* It resumes over its disk, whatever the server's storage is now. */
	limits.disk = true;
	if (uint_of(kept, "diskBytes"))
		limits.workspace_bytes = uint_of(kept, "diskBytes");
	if (session_mod.drv->hibernated_claim(kept, err) < 0) {
		/* What it kept is gone for good (a resume a crash cut short took it): so is its
		 * record. Anything else may pass (a later start). */
		if (err->errnum == ENOENT)
			record_delete(owner, id);
		return false;
	}
	/* It still counts as one of its owner's sessions, with its memory and disk; a lowered
	 * cap or quota does not turn it out, it only refuses more. */
	struct session_charge charge;
	session_charge_of(&limits, &charge);
	struct err over;
	if (session_units_take(owner, &charge, 1, &over) < 0) {
		log_warn("session", "hibernated session %s is back beyond its owner's cap: %s", id,
			 over.msg);
		session_units_force(owner, &charge);
	}
	uint8_t secret[SESSION_SECRET_LEN];
	bool has_secret = hex_bytes(json_string_value(json_object_get(rec, "secret")), secret,
				    sizeof(secret));
	struct session *s = session_table_add_as(
		owner, id, t, json_string_value(json_object_get(rec, "previewName")),
		has_secret ? secret : NULL);
	s->state = SESSION_PAUSED;
	s->deadline_ms = uint_of(rec, "deadlineMs");
	s->deadline_span_s = uint_of(rec, "deadlineSpanS") <= UINT32_MAX
				     ? (uint32_t)uint_of(rec, "deadlineSpanS")
				     : 0;
	json_t *meta = json_object_get(rec, "metadata");
	if (json_is_object(meta))
		s->metadata = json_deep_copy(meta);
	const char *alias = json_string_value(json_object_get(rec, "alias"));
	if (alias)
		s->alias = xstrdup(alias);
	s->hibernated = true;
	s->kept = json_incref(kept);
	s->resources = r;
	s->limits = limits;
	s->charge = charge;
	s->created_ms = uint_of(rec, "createdMs") ? uint_of(rec, "createdMs") : s->created_ms;
	s->paused_ms = uint_of(rec, "pausedMs");
	s->auto_paused = json_is_true(json_object_get(rec, "autoPaused"));
	json_int_t next = json_integer_value(json_object_get(rec, "nextChannel"));
	s->next_channel = next > 0 && next < UINT32_MAX / 2 ? (uint32_t)next : 0;
	if (uint_of(rec, "idleTimeout"))
		s->idle_timeout_s = (unsigned)uint_of(rec, "idleTimeout");
	const char *ot = json_string_value(json_object_get(rec, "onTimeout"));
	s->on_timeout = session_on_timeout_parse(ot);
	s->auto_resume = json_is_true(json_object_get(rec, "autoResume"));
	json_t *env = json_object_get(rec, "env");
	if (json_is_object(env)) {
		json_decref(s->env);
		s->env = json_deep_copy(env);
	}
	json_t *egress = json_object_get(rec, "egress");
	if (json_is_object(egress))
		s->egress_spec = json_deep_copy(egress);
	return true;
}

struct restore_walk {
	unsigned n;
	json_t *keeps; /* what every record keeps, put back or not: the rest is no one's */
};

static void restore_row(const char *owner, const char *id, json_t *rec, void *arg)
{
	struct restore_walk *w = arg;
	struct err e;
	if (json_is_object(json_object_get(rec, "kept")))
		json_array_append(w->keeps, json_object_get(rec, "kept"));
	if (session_find(owner, id)) {
		log_warn("session", "hibernated session %s is recorded twice", id);
		return;
	}
	if (restore_one(owner, id, rec, &e)) {
		w->n++;
		return;
	}
	/* Kept in the database: a later start (the template built again) may take it. */
	log_warn("session", "hibernated session %s cannot be put back: %s", id, e.msg);
}

void session_hibernated_restore(void)
{
	struct err e;
	if (!session_mod.drv->hibernate)
		return;
	struct restore_walk w = { .keeps = json_array() };
	if (store_records_foreach(&table, restore_row, &w, &e) < 0) {
		log_warn("session", "cannot read the hibernated sessions: %s", e.msg);
		json_decref(w.keeps);
		return;
	}
	if (w.n)
		log_info("session", "%u hibernated session(s) back from the previous run", w.n);
	snapshot_load(w.keeps);
	if (session_mod.drv->hibernated_sweep) {
		size_t k = json_array_size(w.keeps);
		json_t **v = xcalloc(k ? k : 1, sizeof(*v));
		for (size_t i = 0; i < k; i++)
			v[i] = json_array_get(w.keeps, i);
		session_mod.drv->hibernated_sweep(v, k);
		free(v);
	}
	json_decref(w.keeps);
}
