/* session/pool: the warm pool, a few started sandboxes per template (SANDBOX_WARM_POOL)
 * that answered their first ping and wait for sessions. It fills in the background, one
 * creation at a time per template, and backs off when creations fail. */
#include "session/internal.h"

#include <errno.h>
#include <string.h>

#include "loop.h"
#include "metrics/metrics.h"
#include "net/net.h"
#include "store/store.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/time.h"

/* A failing warm pool waits pool_retry_ms times its failures in a row, up to this many. */
#define POOL_RETRY_MAX_STEPS 12

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

static void pool_refill(struct pool *p);

static struct pool *pool_get(const char *name)
{
	for (struct pool *p = session_mod.pools; p; p = p->next)
		if (strcmp(p->template_name, name) == 0)
			return p;
	struct pool *p = xcalloc(1, sizeof(*p));
	p->template_name = xstrdup(name);
	p->next = session_mod.pools;
	session_mod.pools = p;
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
		session_sandbox_destroy(e->sb, NULL);
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
	uint64_t ms = (uint64_t)session_mod.cfg->pool_retry_ms * steps;
	log_warn("session", "warm pool for template %s: %s (retrying in %llu ms)", p->template_name,
		 err->msg, (unsigned long long)ms);
	if (!p->retry)
		p->retry = evtimer_new(session_mod.base, on_pool_retry, p);
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
		session_sandbox_destroy(e->sb, NULL);
	e->sb = NULL;
	guest_conn_free(c); /* deferred by the connection until its callback returns */
	free(e);
}

static void on_pool_ping(struct guest_op *op, json_t *result, const struct err *err, void *arg)
{
	struct pool_entry *e = arg;
	e->ping = NULL;
	struct err stale;
	const struct template *t = template_find(&session_mod.templates, e->pool->template_name);
	if (!err && t && session_check_agent(t, result, &stale) < 0)
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
	session_mod.creating--;
	p->inflight--;
	if (j->rc < 0) {
		store_sandbox_delete(j->sandbox_id);
		session_mod.last_create_failed = true;
		err_copy(&session_mod.last_create_error, &j->err);
		pool_failed(p, &j->err);
	} else if (session_mod.shutting_down ||
		   !template_find(&session_mod.templates, p->template_name)) {
		session_mod.last_create_failed = false;
		session_sandbox_destroy(j->sb, NULL);
	} else {
		session_mod.last_create_failed = false;
		net_sandbox_start(j->sb->id);
		struct pool_entry *e = xcalloc(1, sizeof(*e));
		e->pool = p;
		e->sb = j->sb;
		struct err perr;
		if (store_sandbox_update(j->sb->id, session_mod.drv->name, NULL, NULL,
					 j->sb->record, &perr) < 0)
			log_warn("session", "cannot record sandbox %s: %s", j->sb->id, perr.msg);
		e->conn = session_conn_new(TAKE_FD(j->sb->agent_fd), on_pool_conn_closed, e);
		e->next = p->entries;
		p->entries = e;
		/* A sandbox whose driver has its agent do something first (a VM mounting its
		 * disk) does it now, with a resume in place of the ping, so that a claim does
		 * not wait for it; the session's resume then carries no more of it. */
		json_t *req = json_pack("{s:s}", "op", e->sb->resume_extra ? "resume" : "ping");
		if (e->sb->resume_extra) {
			json_object_update(req, e->sb->resume_extra);
			json_decref(e->sb->resume_extra);
			e->sb->resume_extra = NULL;
		}
		e->ping = guest_op_start(e->conn, req, &pool_ping_cbs, e, &perr);
		json_decref(req);
		if (e->ping)
			guest_op_set_timeout(e->ping, session_mod.cfg->first_reply_timeout_ms,
					     "first ping");
		log_debug("session", "pooled sandbox %s for %s created in %llu ms", j->sb->id,
			  p->template_name, (unsigned long long)(time_mono_ms() - j->t0));
	}
	session_job_free(j);
	session_shutdown_check();
	pool_refill(p);
}

static void pool_refill(struct pool *p)
{
	if (session_mod.shutting_down || session_mod.cfg->warm_pool == 0)
		return;
	if (p->retry && evtimer_pending(p->retry, NULL))
		return;
	struct template *t = template_find(&session_mod.templates, p->template_name);
	if (!t)
		return;
	/* No session of a template above the server's caps can claim one. */
	struct sandbox_limits l;
	if (session_limits(t, NULL, &l, NULL) < 0)
		return;
	/* One creation at a time per template: the pool fills in the background without
	 * starving requests for the workers. */
	/* Nor when the host is short of memory or descriptors: sessions come first. */
	if (session_memory_check(NULL) < 0 || session_descriptor_check(NULL) < 0)
		return;
	while (pool_count(p) + p->inflight < session_mod.cfg->warm_pool && p->inflight < 1) {
		struct create_job *j = session_job_new(t, NULL, p);
		/* What a session that asks for nothing gets (its disk among them): the pool's
		 * sandbox must be that. */
		j->spec.limits = l;
		struct err e;
		if (session_job_record(j, NULL, NULL, &e) < 0) {
			session_job_free(j);
			pool_failed(p, &e);
			return;
		}
		p->inflight++;
		session_mod.creating++;
		loop_submit(session_job_work, pool_create_done, j);
	}
}

static struct pool_entry *pool_take(const char *template_name)
{
	for (struct pool *p = session_mod.pools; p; p = p->next) {
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
	for (struct pool *p = session_mod.pools; p; p = p->next)
		for (struct pool_entry *e = p->entries; e; e = e->next)
			n += e->ready;
	return n;
}

json_t *session_pool_sizes(void)
{
	json_t *o = json_object();
	for (struct pool *p = session_mod.pools; p; p = p->next) {
		json_int_t ready = 0;
		for (struct pool_entry *e = p->entries; e; e = e->next)
			ready += e->ready;
		json_object_set_new(o, p->template_name, json_integer(ready));
	}
	return o;
}

bool session_pool_claim(const char *template_name, struct sandbox **ret_sb,
			struct guest_conn **ret_conn)
{
	struct pool_entry *e = pool_take(template_name);
	if (!e)
		return false;
	struct pool *p = e->pool;
	*ret_sb = e->sb;
	*ret_conn = e->conn;
	free(e);
	pool_refill(p);
	return true;
}

void session_pool_refill(const char *template_name)
{
	pool_refill(pool_get(template_name));
}

void session_pools_fill(void)
{
	for (size_t i = 0; i < session_mod.templates.n; i++)
		pool_refill(pool_get(session_mod.templates.items[i]->name));
}

void session_pools_drop_stale(void)
{
	for (struct pool *p = session_mod.pools; p; p = p->next) {
		if (template_find(&session_mod.templates, p->template_name))
			continue;
		while (p->entries)
			pool_entry_discard(p->entries);
	}
}

bool session_pools_idle(void)
{
	for (struct pool *p = session_mod.pools; p; p = p->next)
		if (p->entries || p->inflight)
			return false;
	return true;
}

void session_pools_discard(void)
{
	for (struct pool *p = session_mod.pools; p; p = p->next) {
		if (p->retry)
			event_del(p->retry);
		while (p->entries)
			pool_entry_discard(p->entries);
	}
}

void session_pools_free(void)
{
	while (session_mod.pools) {
		struct pool *p = session_mod.pools;
		session_mod.pools = p->next;
		if (p->retry)
			event_free(p->retry);
		free(p->template_name);
		free(p);
	}
}

void session_pools_publish(void)
{
	for (struct pool *p = session_mod.pools; p; p = p->next) {
		unsigned ready = 0;
		for (struct pool_entry *e = p->entries; e; e = e->next)
			ready += e->ready;
		metrics_set(metrics_daemon.warm_pool_size, ready, p->template_name);
	}
}
