/* session/sandbox: creating and destroying sandboxes on the worker threads, for sessions and
 * for the warm pool alike. */
#include "session/internal.h"
#include "session/snapshot.h"

#include <errno.h>
#include <limits.h>
#include <string.h>

#include "loop.h"
#include "metrics/metrics.h"
#include "net/net.h"
#include "session/volume.h"
#include "store/store.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/random.h"
#include "util/time.h"

struct guest_conn *session_conn_new(int fd, guest_close_fn on_close, void *arg)
{
	struct guest_conn *c = guest_conn_new(session_mod.base, fd, on_close, arg);
	guest_conn_set_liveness(c, session_mod.cfg->ping_interval_ms,
				session_mod.cfg->ping_timeout_ms);
	return c;
}

void session_count_creation(const struct template *t, const char *result)
{
	metrics_add(metrics_daemon.session_creations_total, 1, t->name, session_mod.drv->name,
		    result);
}

int session_check_agent(const struct template *t, const json_t *result, struct err *err)
{
	struct err why;
	if (guest_check_protocol(result, &why) == 0)
		return 0;
	return err_set(err, why.errnum, "template `%s`: %s; rebuild it (templates/build.sh %s)",
		       t->name, why.msg, t->name);
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
		if (j->s->state == SESSION_DESTROYING)
			session_set_gone(j->s);
		session_unref(j->s);
	}
	free(j->sandbox_id);
	free(j);
	session_mod.destroying--;
	session_shutdown_check();
}

void session_sandbox_destroy(struct sandbox *sb, struct session *s)
{
	struct destroy_job *j = xcalloc(1, sizeof(*j));
	net_sandbox_stop(sb->id); /* its resolver lives on this thread */
	j->sb = sb;
	j->sandbox_id = xstrdup(sb->id);
	j->s = s;
	if (s)
		session_ref(s);
	session_mod.destroying++;
	/* Behind other work, not ahead of it: a client destroying thousands of sessions must
	 * not hold up another's creation for the time they take. */
	loop_submit_background(destroy_work, destroy_done, j);
}

/* --- creating sandboxes ------------------------------------------------------------- */

static void spec_fill(struct sandbox_spec *spec, struct template *t, const char *sandbox_id)
{
	spec->tmpl = t;
	spec->id = sandbox_id;
	driver_default_limits(session_mod.cfg, t, &spec->limits);
}

void session_job_work(void *arg)
{
	struct create_job *j = arg;
	/* prepare() is idempotent, thread-safe and cheap once the template is ready (e.g. its
	 * snapshot exists and matches); the first creation pays for it. */
	if (session_mod.drv->prepare) {
		j->rc = session_mod.drv->prepare(session_mod.cfg, j->tmpl, &j->err);
		if (j->rc < 0) {
			err_wrap(&j->err, "preparing template %s", j->tmpl->name);
			return;
		}
	}
	/* The network first: the driver puts the sandbox into its namespace. */
	j->rc = net_sandbox_create(j->sandbox_id, j->net_policy,
				   strcmp(session_mod.drv->isolation, "vm") == 0, &j->netns_path,
				   &j->err);
	if (j->rc < 0)
		return;
	j->spec.netns_path = j->netns_path;
	log_debug("session", "sandbox %s: creating (template %s)", j->sandbox_id, j->tmpl->name);
	char resolv[PATH_MAX];
	if (j->netns_path && net_resolv_conf_path(j->netns_path, resolv, sizeof(resolv)) == 0)
		j->spec.resolv_conf = resolv;
	j->rc = session_mod.drv->create(session_mod.cfg, &j->spec, &j->sb, &j->err);
	j->spec.resolv_conf = NULL;
	if (j->rc < 0)
		net_sandbox_destroy(j->sandbox_id);
}

struct create_job *session_job_new(struct template *t, struct session *s, struct pool *p)
{
	struct create_job *j = xcalloc(1, sizeof(*j));
	char hex[13];
	random_hex(hex, 6);
	j->sandbox_id = xasprintf("sb-%s", hex);
	j->tmpl = template_ref(t);
	spec_fill(&j->spec, j->tmpl, j->sandbox_id);
	if (s)
		j->spec.limits = s->limits; /* session_limits(), at the session's creation */
	/* A pooled sandbox gets what a session that asks for nothing gets: its disk too, made
	 * ahead (session_limits() succeeded for it in pool_refill). */
	else if (session_limits(t, NULL, &j->spec.limits, NULL) < 0)
		driver_default_limits(session_mod.cfg, t, &j->spec.limits);
	if (s && s->volumes)
		j->spec.volumes = volume_claim_spec(s->volumes, &j->spec.nvolumes);
	j->s = s;
	j->pool = p;
	j->t0 = time_mono_ms();
	return j;
}

int session_job_record(struct create_job *j, const char *owner, const char *session_id,
		       struct err *err)
{
	json_auto_t *intent = json_pack("{s:s}", "state", "creating");
	struct err e;
	if (store_sandbox_put(j->sandbox_id, session_mod.drv->name, owner, session_id, intent, &e) <
	    0)
		return err_set(err, EROFS,
			       "the server cannot record new sandboxes now (%s); nothing was "
			       "created",
			       e.msg);
	return 0;
}

void session_job_free(struct create_job *j)
{
	net_policy_destroy(j->net_policy);
	if (j->snapshot)
		snapshot_release(j->snapshot);
	free(j->netns_path);
	template_unref(j->tmpl);
	free(j->sandbox_id);
	free(j);
}
