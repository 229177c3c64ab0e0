/* session: the table of sessions and their life (creating, ready, failed, destroyed), the
 * reaper, start and stop. Sandboxes are made in sandbox.c, pooled in pool.c. */
#include "session/internal.h"
#include "session/snapshot.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "session/quota.h"
#include "cluster/cluster.h"
#include "loop.h"
#include "metrics/metrics.h"
#include "net/net.h"
#include "session/volume.h"
#include "store/store.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/random.h"
#include "util/time.h"
#include "util/timejson.h"

struct session_module session_mod;

struct session_waiter {
	session_ready_fn cb;
	void *arg;
	struct session_waiter *next;
};

/* --- small helpers ------------------------------------------------------------------ */

/* The jail and qemu drivers have disks (docs/storage.md). */
static bool session_storage_disk_possible(void)
{
	return session_mod.drv && session_mod.drv->disks;
}

/* Whether a session asking for `r` (NULL: nothing) gets a disk. */
static bool session_storage_disk(const struct session_resources *r)
{
	if (!session_storage_disk_possible())
		return false;
	enum session_storage s = r ? r->storage : SESSION_STORAGE_DEFAULT;
	if (s == SESSION_STORAGE_DEFAULT)
		return strcmp(session_mod.cfg->storage ? session_mod.cfg->storage : "disk",
			      "disk") == 0;
	return s == SESSION_STORAGE_DISK;
}

static int tighter(const char *name, uint64_t asked, uint64_t server, struct err *err)
{
	if (asked && server && asked > server)
		return err_set(
			err, EINVAL,
			"resources.%s may only lower the server's limit (%llu), not raise it "
			"to %llu",
			name, (unsigned long long)server, (unsigned long long)asked);
	return 0;
}

int session_resources_check(const struct session_resources *r, struct err *err)
{
	const struct config *c = session_mod.cfg;
	/* In a VM these limits would bound the VMM on the host, not the processes in the guest,
	 * whose memory is the template's (resources.memSizeMib in template.json). */
	if (session_mod.drv && strcmp(session_mod.drv->isolation, "vm") == 0 &&
	    (r->memory_bytes || r->pids_max))
		return err_set(
			err, EINVAL,
			"resources.memoryBytes and resources.pidsMax apply to sandboxes of the "
			"jail driver; a VM's memory is its template's (memSizeMib)");
	if (r->memory_bytes > c->max_memory)
		return err_set(err, EINVAL,
			       "resources.memoryBytes (%llu) is above the server's cap "
			       "SANDBOX_MAX_MEMORY_BYTES (%llu)",
			       (unsigned long long)r->memory_bytes,
			       (unsigned long long)c->max_memory);
	if (r->storage == SESSION_STORAGE_DISK && !session_storage_disk_possible())
		return err_set(err, EINVAL,
			       "storage \"disk\" is a mode of the jail and qemu drivers; this "
			       "server runs %s",
			       session_mod.drv ? session_mod.drv->name : "no driver");
	if (session_storage_disk(r)) {
		if (r->workspace_bytes > c->max_disk_bytes)
			return err_set(err, EINVAL,
				       "resources.diskBytes (%llu) is above the server's cap "
				       "SANDBOX_MAX_DISK_BYTES (%llu)",
				       (unsigned long long)r->workspace_bytes,
				       (unsigned long long)c->max_disk_bytes);
	} else if (tighter("diskBytes", r->workspace_bytes, c->disk_limit, err) < 0) {
		return -EINVAL;
	}
	if (tighter("cpuQuotaUs", r->cpu_quota_us, c->cpu_quota_us, err) < 0 ||
	    tighter("pidsMax", r->pids_max, c->pids_max, err) < 0)
		return -EINVAL;
	if (r->memory_bytes && r->memory_bytes < (16u << 20))
		return err_set(err, EINVAL, "resources.memoryBytes must be at least 16 MiB");
	if (r->pids_max && r->pids_max < 4)
		return err_set(err, EINVAL, "resources.pidsMax must be at least 4");
	if (r->workspace_bytes && r->workspace_bytes < (1u << 20))
		return err_set(err, EINVAL, "resources.diskBytes must be at least 1 MiB");
	return 0;
}

int session_limits(const struct template *t, const struct session_resources *r,
		   struct sandbox_limits *ret, struct err *err)
{
	const struct config *c = session_mod.cfg;
	struct sandbox_limits l;
	driver_default_limits(c, t, &l);
	if (session_storage_disk(r)) {
		l.disk = true;
		l.workspace_bytes = t->disk_bytes ? t->disk_bytes : c->disk_bytes;
	}
	if (r && r->memory_bytes)
		l.memory_bytes = r->memory_bytes;
	if (r && r->cpu_quota_us)
		l.cpu_quota_us = r->cpu_quota_us;
	if (r && r->workspace_bytes)
		l.workspace_bytes = r->workspace_bytes;
	if (r && r->pids_max)
		l.pids_max = r->pids_max;
	/* A request above a cap was refused by session_resources_check: what passes one here
	 * comes from the template's manifest. A jail has no guest RAM nor vCPUs of its own:
	 * only its memory limit counts. */
	bool vm = session_mod.drv && strcmp(session_mod.drv->isolation, "vm") == 0;
	uint64_t mem = vm ? (uint64_t)l.mem_mib << 20 : l.memory_bytes;
	if (mem > c->max_memory)
		return err_set(
			err, EINVAL,
			"template `%s` asks for %u MiB (resources.memSizeMib in its "
			"template.json), above the server's cap SANDBOX_MAX_MEMORY_BYTES (%llu)",
			t->name, t->mem_mib, (unsigned long long)c->max_memory);
	if (vm && l.vcpus > c->max_vcpus)
		return err_set(err, EINVAL,
			       "template `%s` asks for %u vCPUs (resources.vcpuCount in its "
			       "template.json), above the server's cap SANDBOX_MAX_VCPUS (%u)",
			       t->name, l.vcpus, c->max_vcpus);
	if (l.disk && l.workspace_bytes > c->max_disk_bytes)
		return err_set(
			err, EINVAL,
			"template `%s` asks for a disk of %llu bytes (resources.diskBytes in "
			"its template.json), above the server's cap SANDBOX_MAX_DISK_BYTES "
			"(%llu)",
			t->name, (unsigned long long)l.workspace_bytes,
			(unsigned long long)c->max_disk_bytes);
	*ret = l;
	return 0;
}

bool session_id_valid(const char *id)
{
	size_t n = strlen(id);
	if (n == 0 || n > 128)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = id[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_' || c == '.'))
			return false;
	}
	return true;
}

char *session_new_id(void)
{
	char hex[25];
	random_hex(hex, 12);
	return xasprintf("sess_%s", hex);
}

const char *session_state_name(enum session_state st)
{
	switch (st) {
	case SESSION_CREATING:
		return "creating";
	case SESSION_READY:
		return "ready";
	case SESSION_DESTROYING:
		return "destroying";
	case SESSION_GONE:
		return "gone";
	case SESSION_FAILED:
		return "failed";
	case SESSION_PAUSED:
		return "paused";
	}
	return "unknown";
}

/* --- session lifetime --------------------------------------------------------------- */

void session_ref(struct session *s)
{
	s->refs++;
}

struct session_gone_waiter {
	void (*fn)(void *arg);
	void *arg;
	struct session_gone_waiter *next;
};

static void fire_gone(struct session *s)
{
	struct session_gone_waiter *w = s->gone_waiters;
	s->gone_waiters = NULL;
	while (w) {
		struct session_gone_waiter *next = w->next;
		w->fn(w->arg);
		free(w);
		w = next;
	}
}

void session_set_gone(struct session *s)
{
	s->state = SESSION_GONE;
	/* Its sandbox and their mounts are gone: its volumes are another session's to take now,
	 * not when the last reference to it goes (a reply still draining may hold one). */
	volume_release(s->volumes);
	s->volumes = NULL;
	session_ref(s);
	fire_gone(s);
	session_unref(s);
}

void session_on_gone(struct session *s, void (*fn)(void *arg), void *arg)
{
	if (s->state == SESSION_GONE) {
		fn(arg);
		return;
	}
	struct session_gone_waiter *w = xcalloc(1, sizeof(*w));
	w->fn = fn;
	w->arg = arg;
	struct session_gone_waiter **pp = &s->gone_waiters;
	while (*pp)
		pp = &(*pp)->next;
	*pp = w;
}

void session_unref(struct session *s)
{
	if (--s->refs > 0)
		return;
	/* Nothing of it is left to wait for (a path that ends a session without saying so). */
	fire_gone(s);
	explicit_bzero(s->secret, sizeof(s->secret));
	free(s->id);
	free(s->owner);
	free(s->sandbox_id);
	template_unref(s->tmpl);
	json_decref(s->env);
	json_decref(s->kept);
	json_decref(s->egress_spec);
	/* After its sandbox: a destroy job holds a reference until the mounts are gone. */
	volume_release(s->volumes);
	json_decref(s->metadata);
	json_decref(s->e2b_contexts);
	session_usage_free(s);
	free(s->alias);
	free(s->snapshot);
	json_decref(s->restored);
	free(s);
}

void session_touch(struct session *s)
{
	s->active_mono_ms = time_mono_ms();
}

void session_op_begin(struct session *s)
{
	s->running++;
	session_touch(s);
}

void session_op_end(struct session *s)
{
	if (s->running)
		s->running--;
	session_touch(s);
}

/* Into the list and both indexes; its id and preview name are set and never change. */
static void table_insert(struct session *s)
{
	s->next = session_mod.sessions;
	session_mod.sessions = s;
	htab_insert(&session_mod.ids, &s->by_id, htab_hash_str(s->id));
	htab_insert(&session_mod.previews, &s->by_preview, htab_hash_str(s->preview_name));
	session_mod.nsessions++;
}

static void table_remove(struct session *s)
{
	for (struct session **pp = &session_mod.sessions; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			s->next = NULL;
			htab_remove(&session_mod.ids, &s->by_id);
			htab_remove(&session_mod.previews, &s->by_preview);
			session_mod.nsessions--;
			cluster_session_gone(s->owner, s->id);
			session_units_give(s->owner, &s->charge, 1);
			session_unref(s);
			return;
		}
	}
}

static void fire_waiters(struct session *s, const struct err *err)
{
	struct session_waiter *w = s->waiters;
	s->waiters = NULL;
	session_ref(s);
	struct err gone;
	while (w) {
		struct session_waiter *next = w->next;
		/* A waiter before this one may have destroyed the session from its callback. */
		if (!err && s->state != SESSION_READY) {
			err_set(&gone, ECONNRESET, "session `%s` was destroyed while it was made",
				s->id);
			err = &gone;
		}
		w->cb(err ? NULL : s, err, w->arg);
		free(w);
		w = next;
	}
	session_unref(s);
}

void session_lost_reason(const struct session *s, uint64_t oom_since, const struct err *why,
			 struct err *ret)
{
	const struct driver *d = session_mod.drv;
	uint64_t ooms = d->oom_kills && s->sb ? d->oom_kills(s->sb) : 0;
	if (ooms <= oom_since) {
		err_copy(ret, why);
		return;
	}
	/* A command running as root inside may have raised the agent's oom_score_adj (nothing
	 * in its user namespace can stop it), which makes the agent the killer's first choice:
	 * what ended the session is its own memory, said as such. */
	err_set(ret, why->errnum,
		"the sandbox ran out of memory: its out-of-memory killer killed %llu of its "
		"processes and the sandbox's agent is gone with them (%s)",
		(unsigned long long)(ooms - oom_since), why->msg);
}

/* The guest connection of a session dropped: the sandbox is dead. The session stays in the
 * table as failed so that its next operation reports why, then it goes. */
static void on_session_conn_closed(struct guest_conn *c, const struct err *why, void *arg)
{
	struct session *s = arg;
	if (s->state != SESSION_READY && s->state != SESSION_CREATING && s->state != SESSION_PAUSED)
		return;
	/* Its sandbox is being ended on purpose (hibernate.c). */
	if (s->hibernating)
		return;
	struct err lost;
	session_lost_reason(s, s->oom_told, why, &lost);
	err_set(&s->failure, ECONNRESET, "the sandbox of session `%s` stopped unexpectedly (%s)",
		s->id, lost.msg);
	log_warn("session", "%s", s->failure.msg);
	metrics_add(metrics_daemon.vsock_errors_total, 1, "disconnect");
	bool was_creating = s->state == SESSION_CREATING;
	s->state = SESSION_FAILED;
	if (s->sb) {
		/* The session is kept until its sandbox is gone: its volumes are released then. */
		session_sandbox_destroy(s->sb, s);
		s->sb = NULL;
	}
	if (was_creating)
		fire_waiters(s, &s->failure);
	/* The connection is freed later, outside its own callback. */
}

void session_fail_creation(struct session *s, const struct err *err)
{
	session_count_creation(s->tmpl, err->errnum == ECANCELED ? "cancelled" : "failure");
	err_copy(&s->failure, err);
	s->state = SESSION_FAILED;
	log_warn("session", "creating session %s failed: %s", s->id, err->msg);
	session_ref(s);
	table_remove(s);
	fire_waiters(s, &s->failure);
	session_unref(s);
}

static void on_resume_done(struct guest_op *op, json_t *result, const struct err *err, void *arg)
{
	struct session *s = arg;
	if (s->state != SESSION_CREATING) {
		if (s->resuming) /* destroyed meanwhile, with the sandbox that took its disk */
			session_wake_done(s, false, true);
		session_unref(s);
		return;
	}
	struct err stale;
	if (!err && session_check_agent(s->tmpl, result, &stale) < 0)
		err = &stale;
	if (err) {
		struct err e;
		err_copy(&e, err);
		/* Whatever the agent's own error says, its sandbox failing to start is not the
		 * caller's doing: its silence stays a timeout, anything else is a bad gateway. */
		if (e.errnum != ETIMEDOUT && e.errnum != EPROTONOSUPPORT)
			e.errnum = EREMOTEIO;
		err_wrap(&e, "the sandbox agent did not start");
		if (s->resuming)
			session_wake_done(s, false, true);
		if (s->sb) {
			guest_conn_free(s->conn);
			s->conn = NULL;
			session_sandbox_destroy(s->sb, s);
			s->sb = NULL;
		}
		session_fail_creation(s, &e);
		session_unref(s);
		return;
	}
	s->state = SESSION_READY;
	session_touch(s);
	if (s->restored) {
		json_int_t n = json_integer_value(json_object_get(result, "processes"));
		json_object_set_new(s->restored, "processes", json_integer(n > 0 ? n : 0));
		log_info("session",
			 "session %s: restored from a %s of session %s, %lld background "
			 "process(es) running",
			 s->id, json_string_value(json_object_get(s->restored, "from")),
			 json_string_value(json_object_get(s->restored, "session")), (long long)n);
	}
	if (s->resuming) {
		session_wake_done(s, true, false);
		log_info("session", "session %s resumed over its kept disk (sandbox %s)", s->id,
			 s->sandbox_id);
		fire_waiters(s, NULL);
		session_unref(s);
		return;
	}
	session_count_creation(s->tmpl, "success");
	metrics_observe(metrics_daemon.vsock_connection_time,
			(double)(time_mono_ms() - s->attach_mono_ms) / 1000.0);
	log_info("session", "session %s ready (template %s, sandbox %s)", s->id, s->tmpl->name,
		 s->sandbox_id);
	fire_waiters(s, NULL);
	session_unref(s);
}

static const struct guest_op_cbs resume_cbs = { .on_done = on_resume_done };

/* Gives the session its sandbox and tells the agent who it is now. */
static void session_attach(struct session *s, struct sandbox *sb, struct guest_conn *conn)
{
	s->attach_mono_ms = time_mono_ms();
	s->sb = sb;
	s->conn = conn;
	s->oom_told = session_mod.drv->oom_kills ? session_mod.drv->oom_kills(sb) : 0;
	if (s->next_channel && conn) {
		guest_conn_set_next_channel(conn, s->next_channel);
		s->next_channel = 0;
	}
	free(s->sandbox_id);
	s->sandbox_id = xstrdup(sb->id);
	net_sandbox_set_owner(sb->id, s->owner);
	struct err e;
	if (store_sandbox_update(sb->id, session_mod.drv->name, s->owner, s->id, sb->record, &e) <
	    0)
		log_warn("session", "cannot record sandbox %s: %s", sb->id, e.msg);

	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	char entropy[65];
	random_hex(entropy, 32);
	json_t *req = json_pack("{s:s, s:{s:I, s:I}, s:s, s:s, s:s}", "op", "resume", "time", "sec",
				(json_int_t)now.tv_sec, "nsec", (json_int_t)now.tv_nsec, "entropy",
				entropy, "sessionId", s->id, "hostname", "sandbox");
	/* The sandbox's network, for a VM to configure its interface with (after a snapshot
	 * restore every clone has its own address); a jail's agent ignores it. */
	struct net_sandbox_info ni;
	if (net_sandbox_info(sb->id, &ni) == 0)
		json_object_set_new(req, "network",
				    json_pack("{s:s, s:i, s:s, s:s}", "address", ni.guest_addr,
					      "prefix", (int)ni.prefix, "gateway", ni.gateway,
					      "dns", ni.dns));
	/* What the driver has the guest do first (a VM's storage to mount). */
	if (sb->resume_extra)
		json_object_update(req, sb->resume_extra);
	if (s->restored)
		json_object_set(req, "restored", s->restored);
	session_ref(s);
	struct guest_op *op = guest_op_start(conn, req, &resume_cbs, s, &e);
	json_decref(req);
	if (!op) {
		on_resume_done(NULL, NULL, &e, s);
		return;
	}
	guest_op_set_timeout(op, session_mod.cfg->first_reply_timeout_ms, "resume");
}

void session_create_done(void *arg)
{
	struct create_job *j = arg;
	struct session *s = j->s;
	session_mod.creating--;
	if (j->rc >= 0)
		metrics_observe(metrics_daemon.vm_creation_time,
				(double)(time_mono_ms() - j->t0) / 1000.0, session_mod.drv->name,
				"cold");
	if (j->rc < 0) {
		/* The driver left nothing behind: nor does its record. */
		store_sandbox_delete(j->sandbox_id);
		/* Whatever the driver's errno, a sandbox that cannot be made is the server's
		 * failure, not the request's: keep the message, report it as such. Unless the
		 * driver said it is the request's (driver.h). */
		if (j->err.errnum == DRIVER_EREQUEST)
			j->err.errnum = EINVAL;
		else if (j->err.errnum == DRIVER_ECONFLICT)
			j->err.errnum = EBUSY;
		else if (j->err.errnum != EAGAIN && j->err.errnum != ETIMEDOUT &&
			 j->err.errnum != ENOSPC && j->err.errnum != ENOMEM)
			j->err.errnum = EIO;
		session_mod.last_create_failed = true;
		err_copy(&session_mod.last_create_error, &j->err);
		if (s->state == SESSION_CREATING && s->resuming) {
			/* Nothing took its disk: it stays hibernated, for another resume. */
			session_wake_done(s, false, false);
			s->state = SESSION_PAUSED;
			log_warn("session", "session %s: resume failed: %s", s->id, j->err.msg);
			fire_waiters(s, &j->err);
		} else if (s->state == SESSION_CREATING) {
			session_fail_creation(s, &j->err);
		} else if (s->resuming) {
			/* Destroyed meanwhile: its disk goes now. */
			s->resuming = false;
			session_hibernated_drop(s);
		}
	} else {
		session_mod.last_create_failed = false;
		log_debug("session", "sandbox %s created in %llu ms", j->sb->id,
			  (unsigned long long)(time_mono_ms() - j->t0));
		net_sandbox_start(j->sb->id);
		if (s->state != SESSION_CREATING) {
			/* Destroyed while it was being made (with the disk it resumed over). */
			if (s->resuming)
				session_wake_done(s, false, true);
			session_sandbox_destroy(j->sb, s);
		} else {
			int fd = TAKE_FD(j->sb->agent_fd);
			session_attach(s, j->sb, session_conn_new(fd, on_session_conn_closed, s));
		}
	}
	session_unref(s);
	session_job_free(j);
	session_shutdown_check();
}

json_t *session_restored_new(const char *from, const char *session)
{
	return json_pack("{s:s, s:s}", "from", from, "session", session ? session : "");
}

/* --- the table ---------------------------------------------------------------------- */

struct session *session_find(const char *owner, const char *id)
{
	for (struct hlink *l = htab_first(&session_mod.ids, htab_hash_str(id)); l;
	     l = htab_next(l)) {
		struct session *s = htab_entry(l, struct session, by_id);
		if (strcmp(s->id, id) == 0 && strcmp(s->owner, owner ? owner : "") == 0)
			return s;
	}
	return NULL;
}

void session_add_waiter(struct session *s, session_ready_fn cb, void *arg)
{
	struct session_waiter *w = xcalloc(1, sizeof(*w));
	w->cb = cb;
	w->arg = arg;
	struct session_waiter **pp = &s->waiters;
	while (*pp)
		pp = &(*pp)->next;
	*pp = w;
}

static void templates_refresh(void);

/* Gives a new session its sandbox: a pooled one when it asks for nothing of its own, else a
 * new one, recorded before anything of it exists. */
static void session_start(struct session *s, struct template *t, struct net_policy *egress)
{
	/* Pooled sandboxes have the server's limits: a session with its own goes cold. */
	/* Volumes are mounted while the sandbox is made: one with volumes goes cold too. */
	/* One made from a snapshot is made as a fork is, from the snapshot's save. */
	if (s->snapshot) {
		struct err e;
		const struct snapshot *sn = snapshot_find(s->owner, s->snapshot, &e);
		if (!sn) {
			session_fail_creation(s, &e);
			return;
		}
		struct create_job *j = session_job_new(t, s, NULL);
		j->net_policy = egress;
		j->snapshot = snapshot_hold(sn);
		j->spec.hibernated = snapshot_keep(sn);
		if (session_job_record(j, s->owner, s->id, &e) < 0) {
			session_job_free(j);
			session_fail_creation(s, &e);
			return;
		}
		session_ref(s);
		session_mod.creating++;
		loop_submit(session_job_work, session_create_done, j);
		return;
	}
	bool own_limits = s->resources.memory_bytes || s->resources.cpu_quota_us ||
			  s->resources.workspace_bytes || s->resources.pids_max ||
			  s->resources.storage || s->volumes;
	/* Likewise for the network: pooled sandboxes have the server's egress policy. */
	struct sandbox *sb;
	struct guest_conn *conn;
	if (!own_limits && !egress && session_pool_claim(t->name, &sb, &conn)) {
		guest_conn_set_close(conn, on_session_conn_closed, s);
		session_attach(s, sb, conn);
		metrics_observe(metrics_daemon.vm_creation_time,
				(double)(time_mono_ms() - s->attach_mono_ms) / 1000.0,
				session_mod.drv->name, "pool");
		return;
	}
	struct create_job *j = session_job_new(t, s, NULL);
	j->net_policy = egress;
	struct err unrecorded;
	if (session_job_record(j, s->owner, s->id, &unrecorded) < 0) {
		session_job_free(j);
		session_fail_creation(s, &unrecorded);
		return;
	}
	session_ref(s);
	session_mod.creating++;
	loop_submit(session_job_work, session_create_done, j);
	if (session_mod.cfg->warm_pool)
		session_pool_refill(t->name);
}

/* A new session whose id the cluster is asked for (cluster_session_claim). */
struct claim_call {
	struct session *s;
	struct template *t;
	struct net_policy *egress;
};

static void on_claimed(const struct err *err, void *arg)
{
	struct claim_call *c = arg;
	struct session *s = c->s;
	if (s->state != SESSION_CREATING) {
		/* Destroyed meanwhile (a DELETE, the shutdown): its record goes with it. */
		net_policy_free(c->egress);
	} else if (err) {
		net_policy_free(c->egress);
		session_fail_creation(s, err);
	} else {
		session_start(s, c->t, c->egress);
	}
	template_unref(c->t);
	session_unref(s);
	free(c);
}

void session_get_or_create(const char *owner, const char *id,
			   const struct session_create_opts *opts, session_ready_fn cb, void *arg,
			   bool *created)
{
	struct err e;
	if (created)
		*created = false;
	struct session *s = session_find(owner, id);
	if (s) {
		switch (s->state) {
		case SESSION_READY:
			if (s->transition) {
				err_set(&e, EBUSY, "Session `%s` is being paused or resumed",
					s->id);
				cb(NULL, &e, arg);
				return;
			}
			session_touch(s);
			cb(s, NULL, arg);
			return;
		case SESSION_CREATING:
			session_add_waiter(s, cb, arg);
			return;
		case SESSION_FAILED:
			/* Report why once, then forget it: the next request starts afresh. */
			err_copy(&e, &s->failure);
			session_destroy(s, "failed");
			cb(NULL, &e, arg);
			return;
		case SESSION_PAUSED:
			err_set(&e, EBUSY, "Session `%s` is paused: resume it first", s->id);
			cb(NULL, &e, arg);
			return;
		default:
			break;
		}
	}
	if (session_closing()) {
		err_set(&e, ESHUTDOWN, "the server is shutting down");
		cb(NULL, &e, arg);
		return;
	}
	const char *tname = opts && opts->template_name ? opts->template_name
							: session_mod.cfg->default_template;
	/* From a snapshot: its template, resources, environment and egress policy. */
	const struct snapshot *sn = NULL;
	struct session_resources snap_res;
	struct session_create_opts snap_opts;
	if (opts && opts->snapshot) {
		const struct session_resources *r = opts->resources;
		if (opts->template_name ||
		    (r && (r->memory_bytes || r->cpu_quota_us || r->workspace_bytes ||
			   r->pids_max || r->storage)) ||
		    (opts->volumes && opts->volumes->n)) {
			err_set(&e, EINVAL,
				"a session made from a snapshot has the snapshot's template, "
				"resources and files: leave out \"template\", \"resources\" and "
				"\"volumes\"");
			cb(NULL, &e, arg);
			return;
		}
		if (!(sn = snapshot_find(owner, opts->snapshot, &e))) {
			cb(NULL, &e, arg);
			return;
		}
		snapshot_resources(sn, &snap_res);
		snap_opts = *opts;
		snap_opts.resources = &snap_res;
		if (!opts->egress || json_is_null(opts->egress))
			snap_opts.egress = snapshot_egress(sn);
		opts = &snap_opts;
		tname = snapshot_template(sn);
	}
	templates_refresh();
	struct template *t = template_find(&session_mod.templates, tname);
	if (!t) {
		_cleanup_free_ char *names = template_names(&session_mod.templates);
		err_set(&e, EINVAL,
			"Unknown template `%s`; available templates: %s (a template built with "
			"templates/build.sh is found as soon as it is there)",
			tname, *names ? names : "(none built)");
		cb(NULL, &e, arg);
		return;
	}
	struct sandbox_limits limits;
	if (session_limits(t, opts ? opts->resources : NULL, &limits, &e) < 0 ||
	    (limits.disk && session_disk_check(limits.workspace_bytes, &e) < 0) ||
	    session_host_check(&e) < 0) {
		cb(NULL, &e, arg);
		return;
	}
	if (sn) {
		/* Over a copy of the snapshot's disk, of the size it has. */
		const json_t *keep = snapshot_keep(sn);
		limits.disk = true;
		if (json_integer_value(json_object_get(keep, "diskBytes")) > 0)
			limits.workspace_bytes =
				(uint64_t)json_integer_value(json_object_get(keep, "diskBytes"));
	}
	/* An egress policy of its own, merged into the server's (it may only tighten it). */
	struct net_policy *egress = NULL;
	if (opts && opts->egress && !json_is_null(opts->egress) &&
	    net_policy_for_session(opts->egress, &egress, &e) < 0) {
		cb(NULL, &e, arg);
		return;
	}
	bool volumes = opts && opts->volumes && opts->volumes->n;
	if (volumes && (!session_mod.drv->disks || !limits.disk)) {
		err_set(&e, EINVAL,
			!session_mod.drv->disks
				? "volumes are mounted by the jail and qemu drivers only (this "
				  "server runs %s)"
				: "volumes need disk storage (\"storage\": \"disk\")",
			session_mod.drv->name);
		net_policy_free(egress);
		cb(NULL, &e, arg);
		return;
	}
	if (volumes && opts->volumes->n > session_mod.drv->max_volumes) {
		err_set(&e, EINVAL,
			"a sandbox of the %s driver mounts at most %u volumes, not %u (a VM has "
			"that many drive slots in its template's snapshot)",
			session_mod.drv->name, session_mod.drv->max_volumes, opts->volumes->n);
		net_policy_free(egress);
		cb(NULL, &e, arg);
		return;
	}
	/* Last, so that nothing can fail between taking the unit and the session holding it:
	 * the server's cap and the owner's quota, both a 429. */
	struct session_charge charge;
	session_charge_of(&limits, &charge);
	if (session_units_take(owner, &charge, 1, &e) < 0) {
		e.errnum = EAGAIN;
		net_policy_free(egress);
		cb(NULL, &e, arg);
		return;
	}
	struct volume_claim *claim = NULL;
	if (volumes && volume_claim(owner, id, opts->volumes, &claim, &e) < 0) {
		session_units_give(owner, &charge, 1);
		net_policy_free(egress);
		cb(NULL, &e, arg);
		return;
	}

	s = xcalloc(1, sizeof(*s));
	s->refs = 1; /* the table's */
	s->id = xstrdup(id);
	s->owner = xstrdup(owner ? owner : "");
	s->tmpl = template_ref(t);
	s->state = SESSION_CREATING;
	s->created_ms = time_wall_ms();
	s->active_mono_ms = time_mono_ms();
	s->idle_timeout_s = opts && opts->idle_timeout_s ? opts->idle_timeout_s
							 : session_mod.cfg->idle_timeout_s;
	s->on_timeout = opts ? opts->on_timeout : SESSION_ON_TIMEOUT_DESTROY;
	s->auto_resume = opts && opts->auto_resume;
	s->env = opts && json_is_object(opts->env) ? json_deep_copy(opts->env) : json_object();
	if (sn) {
		/* The snapshot's environment, with what the request adds over it. */
		json_t *env = json_deep_copy(snapshot_env(sn));
		json_object_update(env, s->env);
		json_decref(s->env);
		s->env = env;
		s->snapshot = xstrdup(opts->snapshot);
		s->next_channel = snapshot_next_channel(sn);
		if (session_mod.drv->hibernate_keeps_processes)
			s->restored = session_restored_new("snapshot", snapshot_session(sn));
	}
	if (opts && opts->resources)
		s->resources = *opts->resources;
	s->limits = limits;
	s->charge = charge;
	s->id_generated = opts && opts->id_generated;
	s->egress_spec = opts && opts->egress && !json_is_null(opts->egress)
				 ? json_deep_copy(opts->egress)
				 : NULL;
	session_preview_init(s);
	s->volumes = claim;
	table_insert(s);
	if (created)
		*created = true;
	session_add_waiter(s, cb, arg);

	if (cluster_enabled()) {
		/* Its id is claimed in the cluster's table first: one session per id there. */
		struct claim_call *c = xcalloc(1, sizeof(*c));
		c->s = s;
		c->t = template_ref(t);
		c->egress = egress;
		session_ref(s);
		cluster_session_claim(s->owner, s->id, s->preview_name, t->name, on_claimed, c);
		return;
	}
	session_start(s, t, egress);
}

static struct session *table_add(const char *owner, const char *id, struct template *t,
				 const char *preview_name, const uint8_t *secret);

struct session *session_table_add(const char *owner, const char *id, struct template *t)
{
	return table_add(owner, id, t, NULL, NULL);
}

struct session *session_table_add_as(const char *owner, const char *id, struct template *t,
				     const char *preview_name,
				     const uint8_t secret[SESSION_SECRET_LEN])
{
	return table_add(owner, id, t, preview_name, secret);
}

static struct session *table_add(const char *owner, const char *id, struct template *t,
				 const char *preview_name, const uint8_t *secret)
{
	struct session *s = xcalloc(1, sizeof(*s));
	s->refs = 1; /* the table's */
	s->id = xstrdup(id);
	s->owner = xstrdup(owner ? owner : "");
	s->tmpl = template_ref(t);
	s->created_ms = time_wall_ms();
	s->active_mono_ms = time_mono_ms();
	s->idle_timeout_s = session_mod.cfg->idle_timeout_s;
	s->env = json_object();
	session_preview_init(s);
	if (preview_name && secret && session_preview_label_ok(preview_name) &&
	    !session_find_preview(preview_name)) {
		snprintf(s->preview_name, sizeof(s->preview_name), "%s", preview_name);
		memcpy(s->secret, secret, SESSION_SECRET_LEN);
	}
	table_insert(s);
	/* A fork, a session put back at start: recorded in the cluster as this node's. */
	cluster_session_put(s->owner, s->id, s->preview_name, t ? t->name : NULL);
	return s;
}

void session_destroy(struct session *s, const char *why)
{
	if (s->state == SESSION_DESTROYING || s->state == SESSION_GONE)
		return;
	log_info("session", "destroying session %s (%s)", s->id, why);
	if (s->state == SESSION_READY || s->state == SESSION_FAILED || s->state == SESSION_PAUSED)
		metrics_observe(metrics_daemon.exec_session_duration,
				(double)(time_wall_ms() - s->created_ms) / 1000.0);
	bool creating = s->state == SESSION_CREATING;
	s->state = SESSION_DESTROYING;
	session_ref(s);
	table_remove(s);
	if (creating) {
		struct err e;
		err_set(&e, ECANCELED, "session `%s` was destroyed while it was being created",
			s->id);
		fire_waiters(s, &e);
	}
	if (s->conn) {
		/* Fails the session's operations, saying why: a server's shutdown, or this. */
		char msg[256];
		snprintf(msg, sizeof(msg), "session `%s` was destroyed (%s)", s->id, why);
		if (session_mod.shutting_down)
			guest_conn_close(s->conn, ESHUTDOWN, "the server is shutting down");
		else
			guest_conn_close(s->conn, ECONNRESET, msg);
		s->conn = NULL;
	}
	if (s->resuming && s->sb)
		session_wake_done(s, false, true); /* its new sandbox, going now, took the disk */
	if (s->transition && (s->sb || s->hibernating)) {
		/* The pause, resume or hibernation under way ends it (pause.c, hibernate.c). */
		s->destroy_pending = true;
	} else if (s->hibernated && !s->resuming) {
		session_hibernated_drop(s);
		session_set_gone(s);
	} else if (s->sb) {
		session_sandbox_destroy(s->sb, s);
		s->sb = NULL;
	} else {
		session_set_gone(s);
	}
	session_unref(s);
}

struct session_exec *session_exec_add(struct session *s, struct guest_op *op)
{
	struct session_exec *e = xcalloc(1, sizeof(*e));
	char hex[17];
	random_hex(hex, 8);
	snprintf(e->id, sizeof(e->id), "exec_%s", hex);
	e->op = op;
	e->next = s->execs;
	s->execs = e;
	s->execs_total++;
	return e;
}

void session_exec_remove(struct session *s, struct session_exec *e)
{
	for (struct session_exec **pp = &s->execs; *pp; pp = &(*pp)->next) {
		if (*pp == e) {
			*pp = e->next;
			free(e);
			return;
		}
	}
}

struct session_exec *session_exec_find(struct session *s, const char *exec_id)
{
	for (struct session_exec *e = s->execs; e; e = e->next)
		if (strcmp(e->id, exec_id) == 0)
			return e;
	return NULL;
}

void session_foreach(const char *owner, void (*fn)(struct session *s, void *arg), void *arg)
{
	for (struct session *s = session_mod.sessions; s; s = s->next)
		if (!owner || strcmp(s->owner, owner) == 0)
			fn(s, arg);
}

size_t session_count(void)
{
	return session_mod.nsessions;
}

/* The limits in force, in the request's names. In a VM, memory is the guest's RAM and the
 * vCPUs are its own; in a jail, memory is the cgroup's limit and the CPU bound is the quota
 * alone. */
static json_t *limits_json(const struct sandbox_limits *l)
{
	bool vm = session_mod.drv && strcmp(session_mod.drv->isolation, "vm") == 0;
	json_t *j = json_pack("{s:I, s:I, s:I, s:I, s:I}", "memoryBytes",
			      (json_int_t)(vm ? (uint64_t)l->mem_mib << 20 : l->memory_bytes),
			      "cpuQuotaUs", (json_int_t)l->cpu_quota_us, "cpuPeriodUs",
			      (json_int_t)l->cpu_period_us, "diskBytes",
			      (json_int_t)l->workspace_bytes, "pidsMax", (json_int_t)l->pids_max);
	if (vm)
		json_object_set_new(j, "vcpuCount", json_integer(l->vcpus));
	return j;
}

/* What the session asked for at creation (only the fields it gave). */
static json_t *resources_json(const struct session_resources *r)
{
	json_t *j = json_object();
	if (r->memory_bytes)
		json_object_set_new(j, "memoryBytes", json_integer((json_int_t)r->memory_bytes));
	if (r->cpu_quota_us)
		json_object_set_new(j, "cpuQuotaUs", json_integer((json_int_t)r->cpu_quota_us));
	if (r->workspace_bytes)
		json_object_set_new(j, "diskBytes", json_integer((json_int_t)r->workspace_bytes));
	if (r->pids_max)
		json_object_set_new(j, "pidsMax", json_integer(r->pids_max));
	if (r->storage)
		json_object_set_new(
			j, "storage",
			json_string(r->storage == SESSION_STORAGE_DISK ? "disk" : "tmpfs"));
	return j;
}

json_t *session_json(const struct session *s)
{
	uint64_t idle_ms = time_mono_ms() - s->active_mono_ms;
	json_t *j =
		json_pack("{s:s, s:s, s:s, s:I, s:I, s:i}", "id", s->id, "template", s->tmpl->name,
			  "state", session_state_name(s->state), "idleMs", (json_int_t)idle_ms,
			  "idleTimeout", (json_int_t)s->idle_timeout_s, "running", (int)s->running);
	json_object_set_new(j, "createdAt", time_iso8601_json(s->created_ms));
	json_object_set_new(j, "previewName", json_string(s->preview_name));
	json_object_set_new(j, "lastActivity", time_iso8601_json(time_wall_ms() - idle_ms));
	if (s->state == SESSION_FAILED)
		json_object_set_new(j, "error", json_string(s->failure.msg));
	if (s->snapshot)
		json_object_set_new(j, "snapshot", json_string(s->snapshot));
	if (s->restored && json_object_get(s->restored, "processes"))
		json_object_set(j, "restored", s->restored);
	if (s->state == SESSION_PAUSED) {
		json_object_set_new(j, "pausedAt", time_iso8601_json(s->paused_ms));
		json_object_set_new(j, "pausedBy",
				    json_string(s->disk_paused   ? "disk"
						: s->auto_paused ? "timeout"
								 : "client"));
		if (s->disk_paused)
			json_object_set_new(
				j, "error",
				json_string(
					"stopped: the state filesystem reached its reserve "
					"(SANDBOX_DISK_RESERVE_BYTES) and this session's disk "
					"was the most beyond its share; it resumes once there is "
					"room again"));
		json_object_set_new(j, "pauseMode",
				    json_string(s->hibernated ? "hibernate" : "freeze"));
		/* Said in every answer: what a resume gives back differs. */
		bool whole = session_mod.drv->hibernate_keeps_processes;
		json_object_set_new(j, "processesKept", json_boolean(!s->hibernated || whole));
		if (s->hibernated)
			json_object_set_new(
				j, "note",
				json_string(
					whole ? "hibernated: the whole VM (its memory, processes "
						"and files) was saved to disk and its VMM ended; "
						"a resume restores it and its processes carry on"
					      : "hibernated: every process of the session was "
						"ended and its memory freed; its files are kept "
						"on disk, and a resume starts it afresh over "
						"them"));
	}
	json_object_set_new(
		j, "onTimeout",
		json_string(s->on_timeout == SESSION_ON_TIMEOUT_DESTROY ? "destroy" : "pause"));
	if (s->auto_resume)
		json_object_set_new(j, "autoResume", json_true());
	/* Whether its sandbox has a network (see /health for why not). */
	struct net_sandbox_info ni;
	bool networked = s->sb && s->sandbox_id && net_sandbox_info(s->sandbox_id, &ni) == 0;
	json_object_set_new(j, "network", json_string(networked ? "on" : "off"));
	json_object_set_new(j, "limits", limits_json(&s->limits));
	json_object_set_new(j, "storage", json_string(s->limits.disk ? "disk" : "tmpfs"));
	uint64_t used, size;
	if (s->sb && s->sb->driver->disk_usage &&
	    s->sb->driver->disk_usage(s->sb, &used, &size) == 0)
		json_object_set_new(j, "disk",
				    json_pack("{s:I, s:I}", "usedBytes", (json_int_t)used,
					      "sizeBytes", (json_int_t)size));
	if (s->volumes)
		json_object_set_new(j, "volumes", volume_claim_json(s->volumes));
	json_t *asked = resources_json(&s->resources);
	if (json_object_size(asked))
		json_object_set_new(j, "resources", asked);
	else
		json_decref(asked);
	return j;
}

/* --- reaper ------------------------------------------------------------------------- */

static void on_auto_paused(struct session *s, const struct err *err, void *arg)
{
	const char *why = arg;
	if (!err) {
		s->auto_paused = true;
		return;
	}
	/* A session that cannot be paused ends as it would have without onTimeout. */
	log_warn("session", "session %s: %s, and it cannot be paused (%s): destroying it", s->id,
		 why, err->msg);
	if (s->state == SESSION_READY)
		session_destroy(s, why);
}

static const char *const on_timeout_names[] = {
	[SESSION_ON_TIMEOUT_DESTROY] = "destroy",
	[SESSION_ON_TIMEOUT_PAUSE] = "pause",
	[SESSION_ON_TIMEOUT_PAUSE_MEMORY] = "pauseMemory",
};

const char *session_on_timeout_name(enum session_on_timeout t)
{
	return (size_t)t < sizeof(on_timeout_names) / sizeof(on_timeout_names[0])
		       ? on_timeout_names[t]
		       : "destroy";
}

enum session_on_timeout session_on_timeout_parse(const char *name)
{
	for (size_t i = 0; name && i < sizeof(on_timeout_names) / sizeof(on_timeout_names[0]); i++)
		if (strcmp(name, on_timeout_names[i]) == 0)
			return (enum session_on_timeout)i;
	return SESSION_ON_TIMEOUT_DESTROY;
}

void session_set_suspend_hook(void (*fn)(const char *owner, const char *id))
{
	session_mod.suspend_hook = fn;
}

/* A session's own timeout fired: it is destroyed, or paused when it asked for that. */
static void session_timeout(struct session *s, const char *why)
{
	if (s->on_timeout == SESSION_ON_TIMEOUT_DESTROY || s->state != SESSION_READY) {
		session_destroy(s, why);
		return;
	}
	/* A pause or resume under way: the timeout fires again once it ended. */
	if (s->transition)
		return;
	/* What clients hold open ends first (an idle session holds nothing; a deadline, the
	 * E2B API's, passes whatever is open, as E2B's does); the operations it ended are over
	 * in the agent by a later round of the reaper, which tries again. */
	if (s->running && session_mod.suspend_hook)
		session_mod.suspend_hook(s->owner, s->id);
	if (s->running)
		return;
	/* Hibernated where it can be (no memory while paused), else frozen; as E2B's pause when
	 * its processes are to carry on (hibernated where they do, qemu; else frozen). */
	enum session_pause_mode mode = s->on_timeout == SESSION_ON_TIMEOUT_PAUSE_MEMORY
					       ? SESSION_PAUSE_KEEP
				       : session_can_hibernate(s) ? SESSION_PAUSE_HIBERNATE
								  : SESSION_PAUSE_FREEZE;
	log_info("session", "session %s: %s: %s it (onTimeout pause)", s->id, why,
		 mode == SESSION_PAUSE_HIBERNATE ? "hibernating" : "pausing");
	session_pause_mode(s, true, mode, on_auto_paused, (void *)why);
}

static void on_reap(evutil_socket_t fd, short what, void *arg)
{
	uint64_t now = time_mono_ms();
	uint64_t wall = time_wall_ms();
	struct session *s = session_mod.sessions;
	while (s) {
		struct session *next = s->next;
		bool idle = s->running == 0 && !s->deadline_ms &&
			    now - s->active_mono_ms >= (uint64_t)s->idle_timeout_s * 1000;
		bool deadline = s->deadline_ms && wall >= s->deadline_ms;
		bool expired =
			session_mod.cfg->max_lifetime_s &&
			wall - s->created_ms >= (uint64_t)session_mod.cfg->max_lifetime_s * 1000;
		if (s->state == SESSION_READY || s->state == SESSION_FAILED) {
			if (expired)
				session_destroy(s, "maximum lifetime reached");
			else if (idle)
				session_timeout(s, "idle timeout");
			else if (deadline)
				session_timeout(s, "its timeout passed");
		} else if (s->state == SESSION_PAUSED && expired) {
			/* Paused: no idle clock, but the lifetime runs. */
			session_destroy(s, "maximum lifetime reached");
		}
		s = next;
	}
	snapshot_reap();
}

/* --- start and stop ----------------------------------------------------------------- */

struct stale {
	char *id;
	char *driver;
	json_t *record;
	struct stale *next;
};

static void collect_stale(const char *id, const char *driver, json_t *record, void *arg)
{
	struct stale **list = arg;
	struct stale *st = xcalloc(1, sizeof(*st));
	st->id = xstrdup(id);
	st->driver = xstrdup(driver ? driver : "");
	st->record = record ? json_incref(record) : json_object();
	st->next = *list;
	*list = st;
}

/* Removes what a previous run of the daemon left: only sandboxes it had recorded. */
static void cleanup_stale(void)
{
	struct stale *list = NULL;
	struct err e;
	if (store_sandbox_foreach(collect_stale, &list, &e) < 0)
		log_warn("session", "cannot list recorded sandboxes: %s", e.msg);
	while (list) {
		struct stale *st = list;
		list = st->next;
		const struct driver *d = driver_find(st->driver);
		if (d && d->cleanup_stale) {
			log_info("session", "removing sandbox %s left by a previous run", st->id);
			d->cleanup_stale(session_mod.cfg, st->id, st->record);
		} else {
			log_warn("session", "sandbox %s was made by driver `%s`, not available now",
				 st->id, st->driver);
		}
		store_sandbox_delete(st->id);
		json_decref(st->record);
		free(st->id);
		free(st->driver);
		free(st);
	}
}

static void on_scrape(void *arg)
{
	unsigned counts[SESSION_PAUSED + 1] = { 0 };
	uint64_t disk_used = 0, disk_size = 0;
	unsigned hibernated = 0;
	for (struct session *s = session_mod.sessions; s; s = s->next) {
		counts[s->state]++;
		hibernated += s->hibernated && s->state == SESSION_PAUSED;
		uint64_t used, size;
		if (s->sb && s->sb->driver->disk_usage &&
		    s->sb->driver->disk_usage(s->sb, &used, &size) == 0) {
			disk_used += used;
			disk_size += size;
		}
	}
	metrics_set(metrics_daemon.sandbox_disk_bytes, (double)disk_used, "used");
	metrics_set(metrics_daemon.sandbox_disk_bytes, (double)disk_size, "allocated");
	for (int st = SESSION_CREATING; st <= SESSION_PAUSED; st++)
		if (st != SESSION_GONE)
			metrics_set(metrics_daemon.active_vm_count, counts[st],
				    session_state_name(st));
	metrics_set(metrics_daemon.active_vm_count, (double)session_pool_size(), "pooled");
	metrics_set(metrics_daemon.sessions_paused, counts[SESSION_PAUSED] - hibernated, "freeze");
	metrics_set(metrics_daemon.sessions_paused, hibernated, "hibernate");
	metrics_set(metrics_daemon.exec_sessions_active, (double)session_mod.nsessions);
	session_host_publish();
	uint64_t vcount, vbytes;
	volume_totals(&vcount, &vbytes);
	metrics_set(metrics_daemon.volumes, (double)vcount, "count");
	metrics_set(metrics_daemon.volumes, (double)vbytes, "bytes");
	unsigned saving, waiting;
	session_saves(&saving, &waiting);
	metrics_set(metrics_daemon.session_saves, saving, "running");
	metrics_set(metrics_daemon.session_saves, waiting, "waiting");
	snapshot_totals(&vcount, &vbytes);
	metrics_set(metrics_daemon.snapshots, (double)vcount, "count");
	metrics_set(metrics_daemon.snapshots, (double)vbytes, "bytes");
	session_pools_publish();
}

int session_init(struct event_base *base, const struct config *cfg, const struct driver *drv,
		 struct err *err)
{
	metrics_on_scrape(on_scrape, NULL);
	session_mod.base = base;
	session_mod.cfg = cfg;
	quota_init(cfg);
	session_mod.drv = drv;
	cleanup_stale();
	/* After the stale sandboxes, which may have held volumes, are gone. */
	int r = volume_init(cfg, err);
	if (r < 0)
		return r;
	r = session_reload_templates(err);
	if (r < 0)
		return r;
	/* Before any sandbox is made: they hold ids that no new one may take. */
	session_hibernated_restore();
	session_mod.reaper = event_new(base, -1, EV_PERSIST, on_reap, NULL);
	struct timeval tv = { .tv_sec = session_mod.cfg->reaper_interval_ms / 1000,
			      .tv_usec = (suseconds_t)(session_mod.cfg->reaper_interval_ms % 1000) *
					 1000 };
	event_add(session_mod.reaper, &tv);
	session_room_watch(base);
	session_pools_fill();
	return 0;
}

/* The templates directory's modification time: it changes when a template is built,
 * rebuilt (templates/build.sh replaces a template's directory) or removed. */
static struct timespec templates_dir_mtime(const char *dir)
{
	struct stat st;
	return stat(dir, &st) == 0 ? st.st_mtim : (struct timespec){ 0, 0 };
}

/* Reads the templates again when their directory changed since they were loaded: one stat
 * per lookup, and no signal needed for a template built while the daemon runs. */
static void templates_refresh(void)
{
	_cleanup_free_ char *dir = xasprintf("%s/templates", session_mod.cfg->artifacts_dir);
	struct timespec now = templates_dir_mtime(dir);
	if (now.tv_sec == session_mod.templates_mtime.tv_sec &&
	    now.tv_nsec == session_mod.templates_mtime.tv_nsec)
		return;
	struct err e;
	if (session_reload_templates(&e) < 0)
		log_warn("session", "reading the templates again: %s", e.msg);
}

int session_reload_templates(struct err *err)
{
	_cleanup_free_ char *dir = xasprintf("%s/templates", session_mod.cfg->artifacts_dir);
	/* Before the load: a change during it is seen by the next lookup. */
	session_mod.templates_mtime = templates_dir_mtime(dir);
	int r = template_registry_load(&session_mod.templates, dir, err);
	if (r < 0)
		return r;
	log_info("session", "%zu template(s) loaded from %s", session_mod.templates.n, dir);
	/* Pooled sandboxes of templates that are gone or changed are dropped. */
	session_pools_drop_stale();
	if (session_mod.reaper)
		session_pools_fill();
	return 0;
}

const struct template_registry *session_templates(void)
{
	templates_refresh();
	return &session_mod.templates;
}

const struct driver *session_driver(void)
{
	return session_mod.drv;
}

bool session_driver_healthy(struct err *err)
{
	if (session_mod.last_create_failed) {
		err_copy(err, &session_mod.last_create_error);
		return false;
	}
	return true;
}

void session_shutdown_check(void)
{
	if (!session_mod.shutting_down || session_mod.destroying || session_mod.creating ||
	    session_mod.nsessions || !session_pools_idle())
		return;
	if (session_mod.shutdown_done) {
		void (*done)(void *) = session_mod.shutdown_done;
		session_mod.shutdown_done = NULL;
		if (session_mod.reaper)
			event_free(session_mod.reaper);
		session_mod.reaper = NULL;
		session_room_unwatch();
		session_pools_free();
		htab_fini(&session_mod.ids);
		htab_fini(&session_mod.previews);
		template_registry_clear(&session_mod.templates);
		done(session_mod.shutdown_arg);
	}
}

void session_grace_begin(void)
{
	session_mod.closing = true;
}

bool session_closing(void)
{
	return session_mod.closing || session_mod.shutting_down;
}

void session_shutdown(void (*done)(void *arg), void *arg)
{
	session_mod.closing = true;
	session_mod.shutting_down = true;
	session_mod.shutdown_done = done;
	session_mod.shutdown_arg = arg;
	while (session_mod.sessions)
		session_destroy(session_mod.sessions, "server shutdown");
	session_pools_discard();
	session_shutdown_check();
}
