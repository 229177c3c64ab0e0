/* snapshot: named saves of running sessions (snapshot.h).
 *
 * The snapshots live in a list (a key has at most SANDBOX_KEY_MAX_SNAPSHOTS of them) and in
 * the state database's `snapshots` table, one row each: the driver's record of the save and
 * what a session made from it needs. One being made is in the list already, not ready, so
 * that its name and its share of its owner's limits are taken until it is saved or failed. */
#include "session/snapshot.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics/metrics.h"
#include "session/internal.h"
#include "session/volume.h"
#include "store/store.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/time.h"
#include "util/timejson.h"

struct snapshot {
	char *owner;
	char *name;
	json_t *rec;    /* the row's record: template, resources, env, egress, nextChannel... */
	json_t *keep;   /* the driver's record of the save (NULL while being made) */
	uint64_t bytes; /* what the save holds on the host's disk (an estimate until made) */
	uint64_t created_ms; /* wall clock */
	uint64_t expires_ms;
	unsigned holds; /* sandboxes being made from it */
	bool ready;
	bool deleted; /* out of the list: its save goes with the last hold */
	struct snapshot *next;
};

static struct snapshot *all;

static const struct store_records table = {
	.table = "snapshots",
	.key = "name",
};

static int row_insert(const struct snapshot *sn, struct err *err)
{
	json_auto_t *rec = json_deep_copy(sn->rec);
	json_object_set(rec, "kept", sn->keep);
	json_object_set_new(rec, "bytes", json_integer((json_int_t)sn->bytes));
	json_object_set_new(rec, "createdMs", json_integer((json_int_t)sn->created_ms));
	json_object_set_new(rec, "expiresMs", json_integer((json_int_t)sn->expires_ms));
	return store_records_put(&table, sn->owner, sn->name, rec, false, err);
}

static void row_delete(const char *owner, const char *name)
{
	store_records_delete(&table, owner, name);
}

static void snapshot_free(struct snapshot *sn)
{
	free(sn->owner);
	free(sn->name);
	json_decref(sn->rec);
	json_decref(sn->keep);
	free(sn);
}

static void unlink_from_list(struct snapshot *sn)
{
	for (struct snapshot **pp = &all; *pp; pp = &(*pp)->next)
		if (*pp == sn) {
			*pp = sn->next;
			sn->next = NULL;
			return;
		}
}

/* Out of the list: its save goes now, or with the last sandbox being made from it. */
static void drop(struct snapshot *sn)
{
	unlink_from_list(sn);
	sn->deleted = true;
	if (sn->holds)
		return;
	if (sn->keep)
		session_kept_discard(TAKE_PTR(sn->keep));
	snapshot_free(sn);
}

static struct snapshot *find(const char *owner, const char *name, bool any_owner)
{
	owner = owner ? owner : "";
	struct snapshot *other = NULL;
	for (struct snapshot *sn = all; sn; sn = sn->next) {
		if (strcmp(sn->name, name) != 0)
			continue;
		if (strcmp(sn->owner, owner) == 0)
			return sn;
		if (any_owner && !other)
			other = sn;
	}
	return other;
}

static void owner_usage(const char *owner, uint64_t *count, uint64_t *bytes)
{
	*count = *bytes = 0;
	for (struct snapshot *sn = all; sn; sn = sn->next)
		if (strcmp(sn->owner, owner) == 0) {
			(*count)++;
			*bytes += sn->bytes;
		}
}

static json_t *snapshot_json(const struct snapshot *sn, bool with_owner)
{
	json_t *j =
		json_pack("{s:s, s:O, s:s, s:O, s:I, s:o, s:o, s:b}", "name", sn->name, "template",
			  json_object_get(sn->rec, "template"), "driver", session_mod.drv->name,
			  "session", json_object_get(sn->rec, "session"), "sizeBytes",
			  (json_int_t)sn->bytes, "createdAt", time_iso8601_json(sn->created_ms),
			  "expiresAt", time_iso8601_json(sn->expires_ms), "processesKept",
			  json_is_true(json_object_get(sn->rec, "processesKept")));
	if (with_owner)
		json_object_set_new(j, "owner", json_string(sn->owner));
	return j;
}

static bool expired(const struct snapshot *sn, uint64_t now)
{
	return sn->ready && now >= sn->expires_ms;
}

/* --- taking one ------------------------------------------------------------------------ */

struct take_job {
	struct snapshot *sn;
	snapshot_done_fn done;
	void *arg;
};

static json_t *resources_of(const struct session_resources *r)
{
	return json_pack("{s:I, s:I, s:I, s:I, s:i}", "memoryBytes", (json_int_t)r->memory_bytes,
			 "cpuQuotaUs", (json_int_t)r->cpu_quota_us, "diskBytes",
			 (json_int_t)r->workspace_bytes, "pidsMax", (json_int_t)r->pids_max,
			 "storage", (int)r->storage);
}

static uint64_t uint_of(const json_t *o, const char *key)
{
	json_int_t v = json_integer_value(json_object_get(o, key));
	return v > 0 ? (uint64_t)v : 0;
}

/* What the save holds on the host's disk, as the driver counted it. */
static uint64_t saved_bytes(const json_t *keep)
{
	uint64_t b = uint_of(keep, "savedBytes");
	return b ? b : uint_of(keep, "stateBytes");
}

static void taken(struct session *s, json_t *keep, const struct err *err, void *arg)
{
	struct take_job *j = arg;
	struct snapshot *sn = j->sn;
	struct err e;
	(void)s;
	if (!keep) {
		metrics_add(metrics_daemon.session_pauses_total, 1, "snapshot", "failure");
		err_copy(&e, err);
		goto fail;
	}
	sn->keep = keep;
	sn->bytes = saved_bytes(keep);
	/* The estimate passed; what it holds must too. */
	uint64_t count, bytes;
	owner_usage(sn->owner, &count, &bytes);
	const struct config *cfg = session_mod.cfg;
	if (cfg->key_max_snapshot_bytes && bytes > cfg->key_max_snapshot_bytes) {
		metrics_add(metrics_daemon.session_pauses_total, 1, "snapshot", "refused");
		err_set(&e, EAGAIN,
			"Snapshot limit reached: this snapshot holds %llu bytes, which would bring "
			"this key's snapshots to %llu bytes, more than it may hold "
			"(SANDBOX_KEY_MAX_SNAPSHOT_BYTES, %llu)",
			(unsigned long long)sn->bytes, (unsigned long long)bytes,
			(unsigned long long)cfg->key_max_snapshot_bytes);
		goto fail;
	}
	sn->created_ms = time_wall_ms();
	sn->expires_ms += sn->created_ms;
	if (row_insert(sn, &e) < 0) {
		metrics_add(metrics_daemon.session_pauses_total, 1, "snapshot", "failure");
		err_wrap(&e, "recording snapshot `%s`", sn->name);
		goto fail;
	}
	sn->ready = true;
	metrics_add(metrics_daemon.session_pauses_total, 1, "snapshot", "success");
	log_info("session", "snapshot %s of session %s: %llu bytes", sn->name,
		 json_string_value(json_object_get(sn->rec, "session")),
		 (unsigned long long)sn->bytes);
	json_t *obj = snapshot_json(sn, false);
	j->done(obj, NULL, j->arg);
	json_decref(obj);
	free(j);
	return;
fail:
	drop(sn);
	j->done(NULL, &e, j->arg);
	free(j);
}

int snapshot_take(struct session *s, const char *name, uint64_t ttl_s, snapshot_done_fn done,
		  void *arg, struct err *err)
{
	const struct config *cfg = session_mod.cfg;
	if (!volume_name_valid(name))
		return err_set(err, EINVAL,
			       "\"name\" must be 1 to %d letters, digits, . _ -, starting with a "
			       "letter or a digit",
			       VOLUME_NAME_MAX);
	if (ttl_s > cfg->snapshot_ttl_s)
		return err_set(err, EINVAL,
			       "\"ttlSeconds\" must be from 1 to %u (SANDBOX_SNAPSHOT_TTL)",
			       cfg->snapshot_ttl_s);
	struct snapshot *old = find(s->owner, name, false);
	if (old)
		return err_set(err, EEXIST,
			       old->ready ? "snapshot `%s` already exists"
					  : "snapshot `%s` is being made",
			       name);
	int r = session_save_check(s, "snapshotted", err);
	if (r < 0)
		return r;
	/* What it will hold at most: a VM's RAM with its disk, a jail's disk. */
	uint64_t estimate = 0, used = 0, size = 0;
	if (session_mod.drv->hibernate_keeps_processes)
		estimate += (uint64_t)s->limits.mem_mib << 20;
	if (s->sb->driver->disk_usage && s->sb->driver->disk_usage(s->sb, &used, &size) == 0)
		estimate += used;
	uint64_t count, bytes;
	owner_usage(s->owner, &count, &bytes);
	if (cfg->key_max_snapshots && count >= cfg->key_max_snapshots)
		return err_set(err, EAGAIN,
			       "Snapshot limit reached: this key has %llu snapshots, the most it "
			       "may have (SANDBOX_KEY_MAX_SNAPSHOTS): delete one first",
			       (unsigned long long)count);
	if (cfg->key_max_snapshot_bytes && bytes + estimate > cfg->key_max_snapshot_bytes)
		return err_set(err, EAGAIN,
			       "Snapshot limit reached: this key's snapshots hold %llu bytes and "
			       "this one would hold up to %llu more, past what a key may hold "
			       "(SANDBOX_KEY_MAX_SNAPSHOT_BYTES, %llu)",
			       (unsigned long long)bytes, (unsigned long long)estimate,
			       (unsigned long long)cfg->key_max_snapshot_bytes);

	struct snapshot *sn = xcalloc(1, sizeof(*sn));
	sn->owner = xstrdup(s->owner);
	sn->name = xstrdup(name);
	sn->bytes = estimate;
	/* Until it is made: then the time it was made is added. */
	sn->expires_ms = (ttl_s ? ttl_s : cfg->snapshot_ttl_s) * 1000ULL;
	bool processes = session_mod.drv->hibernate_keeps_processes;
	sn->rec = json_pack("{s:s, s:s, s:o, s:O, s:b}", "template", s->tmpl->name, "session",
			    s->id, "resources", resources_of(&s->resources), "env", s->env,
			    "processesKept", processes);
	if (s->egress_spec)
		json_object_set(sn->rec, "egress", s->egress_spec);
	if (processes)
		json_object_set_new(sn->rec, "nextChannel",
				    json_integer(guest_conn_next_channel(s->conn)));
	sn->next = all;
	all = sn;
	struct take_job *j = xcalloc(1, sizeof(*j));
	j->sn = sn;
	j->done = done;
	j->arg = arg;
	session_save(s, "snapshot", true, taken, j);
	return 0;
}

/* --- the list -------------------------------------------------------------------------- */

json_t *snapshot_list(const char *owner)
{
	json_t *a = json_array();
	uint64_t now = time_wall_ms();
	for (struct snapshot *sn = all; sn; sn = sn->next)
		if (sn->ready && !expired(sn, now) && (!owner || strcmp(sn->owner, owner) == 0))
			json_array_append_new(a, snapshot_json(sn, owner == NULL));
	return a;
}

/* A ready one that has not expired (the reaper may not have come by yet). */
static struct snapshot *find_ready(const char *owner, const char *name, bool any_owner,
				   struct err *err)
{
	struct snapshot *sn = name ? find(owner, name, any_owner) : NULL;
	if (!sn || !sn->ready || expired(sn, time_wall_ms())) {
		err_set(err, ENOENT, "Snapshot `%s` not found", name ? name : "");
		return NULL;
	}
	return sn;
}

json_t *snapshot_get(const char *owner, const char *name, bool any_owner, struct err *err)
{
	struct snapshot *sn = find_ready(owner, name, any_owner, err);
	return sn ? snapshot_json(sn, any_owner) : NULL;
}

int snapshot_delete(const char *owner, const char *name, bool any_owner, struct err *err)
{
	struct snapshot *sn = find_ready(owner, name, any_owner, err);
	if (!sn)
		return -ENOENT;
	row_delete(sn->owner, sn->name);
	log_info("session", "snapshot %s deleted", sn->name);
	drop(sn);
	return 0;
}

/* --- sessions made from one ------------------------------------------------------------- */

const struct snapshot *snapshot_find(const char *owner, const char *name, struct err *err)
{
	return find_ready(owner, name, false, err);
}

const char *snapshot_template(const struct snapshot *sn)
{
	return json_string_value(json_object_get(sn->rec, "template"));
}

void snapshot_resources(const struct snapshot *sn, struct session_resources *ret)
{
	const json_t *r = json_object_get(sn->rec, "resources");
	uint64_t storage = uint_of(r, "storage");
	*ret = (struct session_resources){
		.memory_bytes = uint_of(r, "memoryBytes"),
		.cpu_quota_us = uint_of(r, "cpuQuotaUs"),
		.workspace_bytes = uint_of(r, "diskBytes"),
		.pids_max = (uint32_t)uint_of(r, "pidsMax"),
		.storage = storage <= SESSION_STORAGE_DISK ? (enum session_storage)storage
							   : SESSION_STORAGE_DEFAULT,
	};
}

const json_t *snapshot_env(const struct snapshot *sn)
{
	return json_object_get(sn->rec, "env");
}

const json_t *snapshot_egress(const struct snapshot *sn)
{
	const json_t *e = json_object_get(sn->rec, "egress");
	return json_is_object(e) ? e : NULL;
}

uint32_t snapshot_next_channel(const struct snapshot *sn)
{
	uint64_t n = uint_of(sn->rec, "nextChannel");
	return n < UINT32_MAX / 2 ? (uint32_t)n : 0;
}

const char *snapshot_session(const struct snapshot *sn)
{
	return json_string_value(json_object_get(sn->rec, "session"));
}

const json_t *snapshot_keep(const struct snapshot *sn)
{
	return sn->keep;
}

struct snapshot *snapshot_hold(const struct snapshot *csn)
{
	struct snapshot *sn = (struct snapshot *)csn;
	sn->holds++;
	return sn;
}

void snapshot_release(struct snapshot *sn)
{
	if (--sn->holds == 0 && sn->deleted) {
		sn->deleted = false; /* drop() frees it now */
		drop(sn);
	}
}

/* --- start, reaper, stop ----------------------------------------------------------------- */

/* What a row must have for a session to be made from it. */
static bool record_ok(const json_t *rec)
{
	return json_is_string(json_object_get(rec, "template")) &&
	       json_is_string(json_object_get(rec, "session")) &&
	       json_is_object(json_object_get(rec, "resources")) &&
	       json_is_object(json_object_get(rec, "env"));
}

struct load_walk {
	json_t *keeps;
	json_t *gone; /* [owner, name] of rows to forget */
	unsigned n;
};

static void load_row(const char *owner, const char *name, json_t *rec, void *arg)
{
	struct load_walk *w = arg;
	struct err e;
	json_t *keep = json_object_get(rec, "kept");
	if (!json_is_object(keep) || !record_ok(rec)) {
		log_warn("session", "snapshot %s: its record is not one: forgotten", name);
		json_array_append_new(w->gone, json_pack("[s, s]", owner, name));
		return;
	}
	json_array_append(w->keeps, keep);
	if (session_mod.drv->hibernated_claim(keep, &e) < 0) {
		/* Saved by another driver, or its files are gone: a later start with that driver
		 * may take it, unless nothing of it is left. */
		log_warn("session", "snapshot %s cannot be used: %s", name, e.msg);
		if (e.errnum == ENOENT)
			json_array_append_new(w->gone, json_pack("[s, s]", owner, name));
		return;
	}
	struct snapshot *sn = xcalloc(1, sizeof(*sn));
	sn->owner = xstrdup(owner);
	sn->name = xstrdup(name);
	sn->keep = json_incref(keep);
	sn->bytes = uint_of(rec, "bytes");
	sn->created_ms = uint_of(rec, "createdMs");
	sn->expires_ms = uint_of(rec, "expiresMs");
	sn->ready = true;
	sn->rec = json_deep_copy(rec);
	json_object_del(sn->rec, "kept");
	sn->next = all;
	all = sn;
	w->n++;
}

void snapshot_load(json_t *keeps)
{
	struct err e;
	struct load_walk w = { .keeps = keeps, .gone = json_array() };
	if (store_records_foreach(&table, load_row, &w, &e) < 0)
		log_warn("session", "cannot read the snapshots: %s", e.msg);
	size_t i;
	json_t *v;
	json_array_foreach (w.gone, i, v)
		row_delete(json_string_value(json_array_get(v, 0)),
			   json_string_value(json_array_get(v, 1)));
	json_decref(w.gone);
	if (w.n)
		log_info("session", "%u snapshot(s) back from the previous run", w.n);
}

void snapshot_reap(void)
{
	uint64_t now = time_wall_ms();
	struct snapshot *sn = all;
	while (sn) {
		struct snapshot *next = sn->next;
		if (expired(sn, now)) {
			log_info("session", "snapshot %s expired", sn->name);
			row_delete(sn->owner, sn->name);
			drop(sn);
		}
		sn = next;
	}
}

void snapshot_totals(uint64_t *count, uint64_t *bytes)
{
	*count = *bytes = 0;
	for (struct snapshot *sn = all; sn; sn = sn->next)
		if (sn->ready) {
			(*count)++;
			*bytes += sn->bytes;
		}
}

void snapshot_shutdown(void)
{
	while (all) {
		struct snapshot *sn = all;
		all = sn->next;
		snapshot_free(sn);
	}
}
