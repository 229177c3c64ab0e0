#include "session/session.h"

#include <errno.h>
#include <limits.h>
#include <string.h>
#include <time.h>

#include "loop.h"
#include "metrics/metrics.h"
#include "net/net.h"
#include "store/store.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/random.h"
#include "util/time.h"

/* A failing warm pool waits pool_retry_ms times its failures in a row, up to this many. */
#define POOL_RETRY_MAX_STEPS 12

struct session_waiter {
	session_ready_fn cb;
	void *arg;
	struct session_waiter *next;
};

/* A sandbox created ahead of demand for one template. */
struct pool_entry {
	struct pool *pool;
	struct sandbox *sb;
	struct guest_conn *conn;
	struct guest_op *ping; /* the first ping, until it is answered */
	bool ready;
	struct pool_entry *next;
};

struct pool {
	char *template_name;
	struct pool_entry *entries;
	unsigned inflight;
	unsigned failures;
	struct event *retry;
	struct pool *next;
};

static struct {
	struct event_base *base;
	const struct config *cfg;
	const struct driver *drv;
	struct template_registry templates;
	struct session *sessions;
	size_t nsessions;
	struct pool *pools;
	struct event *reaper;
	bool shutting_down;
	unsigned destroying; /* sandboxes being destroyed on workers */
	unsigned creating;   /* sandboxes being created on workers */
	void (*shutdown_done)(void *arg);
	void *shutdown_arg;
	struct err last_create_error;
	bool last_create_failed;
} S;

static void pool_refill(struct pool *p);
static void shutdown_check(void);

/* --- small helpers ------------------------------------------------------------------ */

/* A connection to a new sandbox's agent, watched for liveness. */
static struct guest_conn *conn_new(int fd, guest_close_fn on_close, void *arg)
{
	struct guest_conn *c = guest_conn_new(S.base, fd, on_close, arg);
	guest_conn_set_liveness(c, S.cfg->ping_interval_ms, S.cfg->ping_timeout_ms);
	return c;
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
	const struct config *c = S.cfg;
	/* In a VM these limits would bound the VMM on the host, not the processes in the guest,
	 * whose memory is the template's (resources.memSizeMib in template.json). */
	if (S.drv && strcmp(S.drv->isolation, "vm") == 0 && (r->memory_bytes || r->pids_max))
		return err_set(
			err, EINVAL,
			"resources.memoryBytes and resources.pidsMax apply to sandboxes of the "
			"jail driver; a VM's memory is its template's (memSizeMib)");
	if (tighter("memoryBytes", r->memory_bytes, c->memory_limit, err) < 0 ||
	    tighter("cpuQuotaUs", r->cpu_quota_us, c->cpu_quota_us, err) < 0 ||
	    tighter("diskBytes", r->workspace_bytes, c->disk_limit, err) < 0 ||
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
	}
	return "unknown";
}

/* --- destroying sandboxes ----------------------------------------------------------- */

struct destroy_job {
	struct sandbox *sb;
	char *sandbox_id;
	struct session *s; /* unref'd when done, may be NULL */
};

static void destroy_work(void *arg)
{
	struct destroy_job *j = arg;
	j->sb->driver->destroy(j->sb);
	/* After the sandbox: nothing of it may be left using its network. */
	net_sandbox_destroy(j->sandbox_id);
}

static void destroy_done(void *arg)
{
	struct destroy_job *j = arg;
	store_sandbox_delete(j->sandbox_id);
	log_debug("session", "sandbox %s destroyed", j->sandbox_id);
	if (j->s) {
		j->s->state = j->s->state == SESSION_DESTROYING ? SESSION_GONE : j->s->state;
		session_unref(j->s);
	}
	free(j->sandbox_id);
	free(j);
	S.destroying--;
	shutdown_check();
}

/* Hands a sandbox to a worker for destruction; s (optional) is kept until it is done. */
static void sandbox_destroy_async(struct sandbox *sb, struct session *s)
{
	struct destroy_job *j = xcalloc(1, sizeof(*j));
	net_sandbox_stop(sb->id); /* its resolver lives on this thread */
	j->sb = sb;
	j->sandbox_id = xstrdup(sb->id);
	j->s = s;
	if (s)
		session_ref(s);
	S.destroying++;
	loop_submit(destroy_work, destroy_done, j);
}

/* --- creating sandboxes ------------------------------------------------------------- */

struct create_job {
	struct sandbox_spec spec;
	char *sandbox_id;
	struct template *tmpl;
	struct session *s; /* NULL for a pool entry */
	struct pool *pool;
	struct sandbox *sb;
	struct net_policy *net_policy; /* the session's egress policy; NULL: the server's */
	char *netns_path;
	struct err err;
	int rc;
	uint64_t t0;
};

static void spec_fill(struct sandbox_spec *spec, struct template *t, const char *sandbox_id)
{
	const struct config *c = S.cfg;
	spec->tmpl = t;
	spec->id = sandbox_id;
	spec->limits = (struct sandbox_limits){
		.memory_bytes = c->memory_limit,
		.cpu_quota_us = c->cpu_quota_us,
		.cpu_period_us = c->cpu_period_us,
		.pids_max = c->pids_max,
		.workspace_bytes = c->disk_limit,
		.nofile = c->nofile,
		.vcpus = t->vcpus ? t->vcpus : c->vcpus,
		.mem_mib = t->mem_mib ? t->mem_mib : c->mem_mib,
	};
}

static void create_work(void *arg)
{
	struct create_job *j = arg;
	/* prepare() is idempotent, thread-safe and cheap once the template is ready (e.g. its
	 * snapshot exists and matches); the first creation pays for it. */
	if (S.drv->prepare) {
		j->rc = S.drv->prepare(S.cfg, j->tmpl, &j->err);
		if (j->rc < 0) {
			err_wrap(&j->err, "preparing template %s", j->tmpl->name);
			return;
		}
	}
	/* The network first: the driver puts the sandbox into its namespace. */
	j->rc = net_sandbox_create(j->sandbox_id, j->net_policy,
				   strcmp(S.drv->isolation, "vm") == 0, &j->netns_path, &j->err);
	if (j->rc < 0)
		return;
	j->spec.netns_path = j->netns_path;
	char resolv[PATH_MAX];
	if (j->netns_path && net_resolv_conf_path(j->netns_path, resolv, sizeof(resolv)) == 0)
		j->spec.resolv_conf = resolv;
	j->rc = S.drv->create(S.cfg, &j->spec, &j->sb, &j->err);
	j->spec.resolv_conf = NULL;
	if (j->rc < 0)
		net_sandbox_destroy(j->sandbox_id);
}

static struct create_job *create_job_new(struct template *t, struct session *s, struct pool *p)
{
	struct create_job *j = xcalloc(1, sizeof(*j));
	char hex[13];
	random_hex(hex, 6);
	j->sandbox_id = xasprintf("sb-%s", hex);
	j->tmpl = template_ref(t);
	spec_fill(&j->spec, j->tmpl, j->sandbox_id);
	if (s) {
		const struct session_resources *r = &s->resources;
		struct sandbox_limits *l = &j->spec.limits;
		if (r->memory_bytes)
			l->memory_bytes = r->memory_bytes;
		if (r->cpu_quota_us)
			l->cpu_quota_us = r->cpu_quota_us;
		if (r->workspace_bytes)
			l->workspace_bytes = r->workspace_bytes;
		if (r->pids_max)
			l->pids_max = r->pids_max;
	}
	j->s = s;
	j->pool = p;
	j->t0 = time_mono_ms();
	return j;
}

static void create_job_free(struct create_job *j)
{
	net_policy_destroy(j->net_policy);
	free(j->netns_path);
	template_unref(j->tmpl);
	free(j->sandbox_id);
	free(j);
}

/* --- session lifetime --------------------------------------------------------------- */

static void count_creation(const struct template *t, const char *result)
{
	metrics_add(M.session_creations_total, 1, t->name, S.drv->name, result);
}

void session_ref(struct session *s)
{
	s->refs++;
}

void session_unref(struct session *s)
{
	if (--s->refs > 0)
		return;
	free(s->id);
	free(s->owner);
	free(s->sandbox_id);
	template_unref(s->tmpl);
	json_decref(s->env);
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

static void table_remove(struct session *s)
{
	for (struct session **pp = &S.sessions; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			s->next = NULL;
			S.nsessions--;
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
	while (w) {
		struct session_waiter *next = w->next;
		w->cb(err ? NULL : s, err, w->arg);
		free(w);
		w = next;
	}
	session_unref(s);
}

/* The guest connection of a session dropped: the sandbox is dead. The session stays in the
 * table as failed so that its next operation reports why, then it goes. */
static void on_session_conn_closed(struct guest_conn *c, const struct err *why, void *arg)
{
	struct session *s = arg;
	if (s->state != SESSION_READY && s->state != SESSION_CREATING)
		return;
	err_set(&s->failure, ECONNRESET, "the sandbox of session `%s` stopped unexpectedly (%s)",
		s->id, why->msg);
	log_warn("session", "%s", s->failure.msg);
	metrics_add(M.vsock_errors_total, 1, "disconnect");
	bool was_creating = s->state == SESSION_CREATING;
	s->state = SESSION_FAILED;
	if (s->sb) {
		sandbox_destroy_async(s->sb, NULL);
		s->sb = NULL;
	}
	if (was_creating)
		fire_waiters(s, &s->failure);
	/* The connection is freed later, outside its own callback. */
}

static void session_fail_creation(struct session *s, const struct err *err)
{
	count_creation(s->tmpl, err->errnum == ECANCELED ? "cancelled" : "failure");
	err_copy(&s->failure, err);
	s->state = SESSION_FAILED;
	log_warn("session", "creating session %s failed: %s", s->id, err->msg);
	session_ref(s);
	table_remove(s);
	fire_waiters(s, &s->failure);
	session_unref(s);
}

/* Whether an agent's first answer says it can serve this server: err names the template. */
static int check_agent(const struct template *t, const json_t *result, struct err *err)
{
	struct err why;
	if (guest_check_protocol(result, &why) == 0)
		return 0;
	return err_set(err, why.errnum, "template `%s`: %s; rebuild it (templates/build.sh %s)",
		       t->name, why.msg, t->name);
}

static void on_resume_done(struct guest_op *op, json_t *result, const struct err *err, void *arg)
{
	struct session *s = arg;
	if (s->state != SESSION_CREATING) {
		session_unref(s);
		return;
	}
	struct err stale;
	if (!err && check_agent(s->tmpl, result, &stale) < 0)
		err = &stale;
	if (err) {
		struct err e;
		err_copy(&e, err);
		err_wrap(&e, "the sandbox agent did not start");
		if (s->sb) {
			guest_conn_free(s->conn);
			s->conn = NULL;
			sandbox_destroy_async(s->sb, NULL);
			s->sb = NULL;
		}
		session_fail_creation(s, &e);
		session_unref(s);
		return;
	}
	s->state = SESSION_READY;
	session_touch(s);
	count_creation(s->tmpl, "success");
	metrics_observe(M.vsock_connection_time,
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
	free(s->sandbox_id);
	s->sandbox_id = xstrdup(sb->id);
	struct err e;
	if (store_sandbox_put(sb->id, S.drv->name, s->owner, s->id, sb->record, &e) < 0)
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
	session_ref(s);
	struct guest_op *op = guest_op_start(conn, req, &resume_cbs, s, &e);
	json_decref(req);
	if (!op) {
		on_resume_done(NULL, NULL, &e, s);
		return;
	}
	guest_op_set_timeout(op, S.cfg->first_reply_timeout_ms, "resume");
}

static void session_create_done(void *arg)
{
	struct create_job *j = arg;
	struct session *s = j->s;
	S.creating--;
	if (j->rc >= 0)
		metrics_observe(M.vm_creation_time, (double)(time_mono_ms() - j->t0) / 1000.0,
				S.drv->name, "cold");
	if (j->rc < 0) {
		/* Whatever the driver's errno, a sandbox that cannot be made is the server's
		 * failure, not the request's: keep the message, report it as such. */
		if (j->err.errnum != EAGAIN && j->err.errnum != ETIMEDOUT &&
		    j->err.errnum != ENOSPC && j->err.errnum != ENOMEM)
			j->err.errnum = EIO;
		S.last_create_failed = true;
		err_copy(&S.last_create_error, &j->err);
		if (s->state == SESSION_CREATING)
			session_fail_creation(s, &j->err);
	} else {
		S.last_create_failed = false;
		log_debug("session", "sandbox %s created in %llu ms", j->sb->id,
			  (unsigned long long)(time_mono_ms() - j->t0));
		net_sandbox_start(j->sb->id);
		if (s->state != SESSION_CREATING) {
			/* Destroyed while it was being made. */
			sandbox_destroy_async(j->sb, NULL);
		} else {
			int fd = TAKE_FD(j->sb->agent_fd);
			session_attach(s, j->sb, conn_new(fd, on_session_conn_closed, s));
		}
	}
	session_unref(s);
	create_job_free(j);
	shutdown_check();
}

/* --- warm pool ---------------------------------------------------------------------- */

static struct pool *pool_get(const char *name)
{
	for (struct pool *p = S.pools; p; p = p->next)
		if (strcmp(p->template_name, name) == 0)
			return p;
	struct pool *p = xcalloc(1, sizeof(*p));
	p->template_name = xstrdup(name);
	p->next = S.pools;
	S.pools = p;
	return p;
}

static unsigned pool_count(struct pool *p)
{
	unsigned n = 0;
	for (struct pool_entry *e = p->entries; e; e = e->next)
		n++;
	return n;
}

static void pool_unlink(struct pool_entry *e)
{
	for (struct pool_entry **pp = &e->pool->entries; *pp; pp = &(*pp)->next) {
		if (*pp == e) {
			*pp = e->next;
			return;
		}
	}
}

static void pool_entry_discard(struct pool_entry *e)
{
	pool_unlink(e);
	/* Its answer would come to e, which is about to go. */
	if (e->ping)
		guest_op_detach(e->ping);
	if (e->conn)
		guest_conn_free(e->conn);
	if (e->sb)
		sandbox_destroy_async(e->sb, NULL);
	free(e);
}

static void on_pool_retry(evutil_socket_t fd, short what, void *arg)
{
	pool_refill(arg);
}

static void pool_failed(struct pool *p, const struct err *err)
{
	p->failures++;
	unsigned steps = p->failures < POOL_RETRY_MAX_STEPS ? p->failures : POOL_RETRY_MAX_STEPS;
	uint64_t ms = (uint64_t)S.cfg->pool_retry_ms * steps;
	log_warn("session", "warm pool for template %s: %s (retrying in %llu ms)", p->template_name,
		 err->msg, (unsigned long long)ms);
	if (!p->retry)
		p->retry = evtimer_new(S.base, on_pool_retry, p);
	struct timeval tv = { .tv_sec = (time_t)(ms / 1000),
			      .tv_usec = (suseconds_t)(ms % 1000) * 1000 };
	evtimer_add(p->retry, &tv);
}

static void on_pool_conn_closed(struct guest_conn *c, const struct err *why, void *arg)
{
	struct pool_entry *e = arg;
	log_warn("session", "pooled sandbox %s stopped: %s", e->sb ? e->sb->id : "?", why->msg);
	e->conn = NULL; /* freed by its owner below, not from inside its callback */
	pool_unlink(e);
	if (e->sb)
		sandbox_destroy_async(e->sb, NULL);
	e->sb = NULL;
	guest_conn_free(c); /* deferred by the connection until its callback returns */
	free(e);
}

static void on_pool_ping(struct guest_op *op, json_t *result, const struct err *err, void *arg)
{
	struct pool_entry *e = arg;
	e->ping = NULL;
	struct err stale;
	const struct template *t = template_find(&S.templates, e->pool->template_name);
	if (!err && t && check_agent(t, result, &stale) < 0)
		err = &stale;
	if (err) {
		struct pool *p = e->pool;
		struct err why;
		err_copy(&why, err);
		pool_entry_discard(e);
		pool_failed(p, &why);
		return;
	}
	e->ready = true;
	e->pool->failures = 0;
}

static const struct guest_op_cbs pool_ping_cbs = { .on_done = on_pool_ping };

static void pool_create_done(void *arg)
{
	struct create_job *j = arg;
	struct pool *p = j->pool;
	S.creating--;
	p->inflight--;
	if (j->rc < 0) {
		S.last_create_failed = true;
		err_copy(&S.last_create_error, &j->err);
		pool_failed(p, &j->err);
	} else if (S.shutting_down || !template_find(&S.templates, p->template_name)) {
		S.last_create_failed = false;
		sandbox_destroy_async(j->sb, NULL);
	} else {
		S.last_create_failed = false;
		net_sandbox_start(j->sb->id);
		struct pool_entry *e = xcalloc(1, sizeof(*e));
		e->pool = p;
		e->sb = j->sb;
		struct err perr;
		if (store_sandbox_put(j->sb->id, S.drv->name, NULL, NULL, j->sb->record, &perr) < 0)
			log_warn("session", "cannot record sandbox %s: %s", j->sb->id, perr.msg);
		e->conn = conn_new(TAKE_FD(j->sb->agent_fd), on_pool_conn_closed, e);
		e->next = p->entries;
		p->entries = e;
		json_t *req = json_pack("{s:s}", "op", "ping");
		e->ping = guest_op_start(e->conn, req, &pool_ping_cbs, e, &perr);
		json_decref(req);
		if (e->ping)
			guest_op_set_timeout(e->ping, S.cfg->first_reply_timeout_ms, "first ping");
		log_debug("session", "pooled sandbox %s for %s created in %llu ms", j->sb->id,
			  p->template_name, (unsigned long long)(time_mono_ms() - j->t0));
	}
	create_job_free(j);
	shutdown_check();
	pool_refill(p);
}

static void pool_refill(struct pool *p)
{
	if (S.shutting_down || S.cfg->warm_pool == 0)
		return;
	if (p->retry && evtimer_pending(p->retry, NULL))
		return;
	struct template *t = template_find(&S.templates, p->template_name);
	if (!t)
		return;
	/* One creation at a time per template: the pool fills in the background without
	 * starving requests for the workers. */
	while (pool_count(p) + p->inflight < S.cfg->warm_pool && p->inflight < 1) {
		struct create_job *j = create_job_new(t, NULL, p);
		p->inflight++;
		S.creating++;
		loop_submit(create_work, pool_create_done, j);
	}
}

static struct pool_entry *pool_take(const char *template_name)
{
	for (struct pool *p = S.pools; p; p = p->next) {
		if (strcmp(p->template_name, template_name) != 0)
			continue;
		for (struct pool_entry *e = p->entries; e; e = e->next) {
			if (e->ready && guest_conn_alive(e->conn)) {
				pool_unlink(e);
				return e;
			}
		}
	}
	return NULL;
}

size_t session_pool_size(void)
{
	size_t n = 0;
	for (struct pool *p = S.pools; p; p = p->next)
		for (struct pool_entry *e = p->entries; e; e = e->next)
			n += e->ready;
	return n;
}

static void pools_fill_all(void)
{
	for (size_t i = 0; i < S.templates.n; i++)
		pool_refill(pool_get(S.templates.items[i]->name));
}

/* --- the table ---------------------------------------------------------------------- */

struct session *session_find(const char *owner, const char *id)
{
	for (struct session *s = S.sessions; s; s = s->next)
		if (strcmp(s->id, id) == 0 && strcmp(s->owner, owner ? owner : "") == 0)
			return s;
	return NULL;
}

static void add_waiter(struct session *s, session_ready_fn cb, void *arg)
{
	struct session_waiter *w = xcalloc(1, sizeof(*w));
	w->cb = cb;
	w->arg = arg;
	struct session_waiter **pp = &s->waiters;
	while (*pp)
		pp = &(*pp)->next;
	*pp = w;
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
			session_touch(s);
			cb(s, NULL, arg);
			return;
		case SESSION_CREATING:
			add_waiter(s, cb, arg);
			return;
		case SESSION_FAILED:
			/* Report why once, then forget it: the next request starts afresh. */
			err_copy(&e, &s->failure);
			session_destroy(s, "failed");
			cb(NULL, &e, arg);
			return;
		default:
			break;
		}
	}
	if (S.shutting_down) {
		err_set(&e, ESHUTDOWN, "the server is shutting down");
		cb(NULL, &e, arg);
		return;
	}
	const char *tname =
		opts && opts->template_name ? opts->template_name : S.cfg->default_template;
	struct template *t = template_find(&S.templates, tname);
	if (!t) {
		_cleanup_free_ char *names = template_names(&S.templates);
		err_set(&e, EINVAL, "Unknown template `%s`; available templates: %s", tname,
			*names ? names : "(none built)");
		cb(NULL, &e, arg);
		return;
	}
	if (S.nsessions >= S.cfg->max_sessions) {
		err_set(&e, EAGAIN, "The server is at its limit of %u sessions",
			S.cfg->max_sessions);
		cb(NULL, &e, arg);
		return;
	}
	/* An egress policy of its own, merged into the server's (it may only tighten it). */
	struct net_policy *egress = NULL;
	if (opts && opts->egress && !json_is_null(opts->egress) &&
	    net_policy_for_session(opts->egress, &egress, &e) < 0) {
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
	s->idle_timeout_s =
		opts && opts->idle_timeout_s ? opts->idle_timeout_s : S.cfg->idle_timeout_s;
	s->env = opts && json_is_object(opts->env) ? json_deep_copy(opts->env) : json_object();
	if (opts && opts->resources)
		s->resources = *opts->resources;
	s->next = S.sessions;
	S.sessions = s;
	S.nsessions++;
	if (created)
		*created = true;
	add_waiter(s, cb, arg);

	/* Pooled sandboxes have the server's limits: a session with its own goes cold. */
	bool own_limits = opts && opts->resources &&
			  (opts->resources->memory_bytes || opts->resources->cpu_quota_us ||
			   opts->resources->workspace_bytes || opts->resources->pids_max);
	/* Likewise for the network: pooled sandboxes have the server's egress policy. */
	struct pool_entry *pe = own_limits || egress ? NULL : pool_take(t->name);
	if (pe) {
		struct sandbox *sb = pe->sb;
		struct guest_conn *conn = pe->conn;
		struct pool *p = pe->pool;
		free(pe);
		guest_conn_set_close(conn, on_session_conn_closed, s);
		session_attach(s, sb, conn);
		metrics_observe(M.vm_creation_time,
				(double)(time_mono_ms() - s->attach_mono_ms) / 1000.0, S.drv->name,
				"pool");
		pool_refill(p);
		return;
	}
	struct create_job *j = create_job_new(t, s, NULL);
	j->net_policy = egress;
	session_ref(s);
	S.creating++;
	loop_submit(create_work, session_create_done, j);
	if (S.cfg->warm_pool)
		pool_refill(pool_get(t->name));
}

void session_destroy(struct session *s, const char *why)
{
	if (s->state == SESSION_DESTROYING || s->state == SESSION_GONE)
		return;
	log_info("session", "destroying session %s (%s)", s->id, why);
	if (s->state == SESSION_READY || s->state == SESSION_FAILED)
		metrics_observe(M.exec_session_duration,
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
		guest_conn_free(s->conn); /* fails the session's operations */
		s->conn = NULL;
	}
	if (s->sb) {
		sandbox_destroy_async(s->sb, s);
		s->sb = NULL;
	} else {
		s->state = SESSION_GONE;
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
	for (struct session *s = S.sessions; s; s = s->next)
		if (!owner || strcmp(s->owner, owner) == 0)
			fn(s, arg);
}

size_t session_count(void)
{
	return S.nsessions;
}

static json_t *iso_time(uint64_t ms)
{
	time_t secs = (time_t)(ms / 1000);
	struct tm tm;
	gmtime_r(&secs, &tm);
	char buf[40];
	size_t n = strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(buf + n, sizeof(buf) - n, ".%03uZ", (unsigned)(ms % 1000));
	return json_string(buf);
}

json_t *session_json(const struct session *s)
{
	uint64_t idle_ms = time_mono_ms() - s->active_mono_ms;
	json_t *j =
		json_pack("{s:s, s:s, s:s, s:I, s:I, s:i}", "id", s->id, "template", s->tmpl->name,
			  "state", session_state_name(s->state), "idleMs", (json_int_t)idle_ms,
			  "idleTimeout", (json_int_t)s->idle_timeout_s, "running", (int)s->running);
	json_object_set_new(j, "createdAt", iso_time(s->created_ms));
	json_object_set_new(j, "lastActivity", iso_time(time_wall_ms() - idle_ms));
	if (s->state == SESSION_FAILED)
		json_object_set_new(j, "error", json_string(s->failure.msg));
	return j;
}

/* --- reaper ------------------------------------------------------------------------- */

static void on_reap(evutil_socket_t fd, short what, void *arg)
{
	uint64_t now = time_mono_ms();
	uint64_t wall = time_wall_ms();
	struct session *s = S.sessions;
	while (s) {
		struct session *next = s->next;
		bool idle = s->running == 0 &&
			    now - s->active_mono_ms >= (uint64_t)s->idle_timeout_s * 1000;
		bool expired = S.cfg->max_lifetime_s &&
			       wall - s->created_ms >= (uint64_t)S.cfg->max_lifetime_s * 1000;
		if (s->state == SESSION_READY || s->state == SESSION_FAILED) {
			if (idle)
				session_destroy(s, "idle timeout");
			else if (expired)
				session_destroy(s, "maximum lifetime reached");
		}
		s = next;
	}
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
			d->cleanup_stale(S.cfg, st->id, st->record);
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
	unsigned counts[SESSION_FAILED + 1] = { 0 };
	for (struct session *s = S.sessions; s; s = s->next)
		counts[s->state]++;
	for (int st = SESSION_CREATING; st <= SESSION_FAILED; st++)
		if (st != SESSION_GONE)
			metrics_set(M.active_vm_count, counts[st], session_state_name(st));
	metrics_set(M.active_vm_count, (double)session_pool_size(), "pooled");
	metrics_set(M.exec_sessions_active, (double)S.nsessions);
	for (struct pool *p = S.pools; p; p = p->next) {
		unsigned ready = 0;
		for (struct pool_entry *e = p->entries; e; e = e->next)
			ready += e->ready;
		metrics_set(M.warm_pool_size, ready, p->template_name);
	}
}

int session_init(struct event_base *base, const struct config *cfg, const struct driver *drv,
		 struct err *err)
{
	metrics_on_scrape(on_scrape, NULL);
	S.base = base;
	S.cfg = cfg;
	S.drv = drv;
	cleanup_stale();
	int r = session_reload_templates(err);
	if (r < 0)
		return r;
	S.reaper = event_new(base, -1, EV_PERSIST, on_reap, NULL);
	struct timeval tv = { .tv_sec = S.cfg->reaper_interval_ms / 1000,
			      .tv_usec = (suseconds_t)(S.cfg->reaper_interval_ms % 1000) * 1000 };
	event_add(S.reaper, &tv);
	pools_fill_all();
	return 0;
}

int session_reload_templates(struct err *err)
{
	_cleanup_free_ char *dir = xasprintf("%s/templates", S.cfg->artifacts_dir);
	int r = template_registry_load(&S.templates, dir, err);
	if (r < 0)
		return r;
	log_info("session", "%zu template(s) loaded from %s", S.templates.n, dir);
	/* Pooled sandboxes of templates that are gone or changed are dropped. */
	for (struct pool *p = S.pools; p; p = p->next) {
		if (template_find(&S.templates, p->template_name))
			continue;
		while (p->entries)
			pool_entry_discard(p->entries);
	}
	if (S.reaper)
		pools_fill_all();
	return 0;
}

const struct template_registry *session_templates(void)
{
	return &S.templates;
}

const struct driver *session_driver(void)
{
	return S.drv;
}

bool session_driver_healthy(struct err *err)
{
	if (S.last_create_failed) {
		err_copy(err, &S.last_create_error);
		return false;
	}
	return true;
}

static void shutdown_check(void)
{
	if (!S.shutting_down || S.destroying || S.creating || S.nsessions)
		return;
	for (struct pool *p = S.pools; p; p = p->next)
		if (p->entries || p->inflight)
			return;
	if (S.shutdown_done) {
		void (*done)(void *) = S.shutdown_done;
		S.shutdown_done = NULL;
		if (S.reaper)
			event_free(S.reaper);
		S.reaper = NULL;
		while (S.pools) {
			struct pool *p = S.pools;
			S.pools = p->next;
			if (p->retry)
				event_free(p->retry);
			free(p->template_name);
			free(p);
		}
		template_registry_clear(&S.templates);
		done(S.shutdown_arg);
	}
}

void session_shutdown(void (*done)(void *arg), void *arg)
{
	S.shutting_down = true;
	S.shutdown_done = done;
	S.shutdown_arg = arg;
	while (S.sessions)
		session_destroy(S.sessions, "server shutdown");
	for (struct pool *p = S.pools; p; p = p->next) {
		if (p->retry)
			event_del(p->retry);
		while (p->entries)
			pool_entry_discard(p->entries);
	}
	shutdown_check();
}
