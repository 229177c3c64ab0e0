/* e2b: the control plane of the E2B-compatible API (docs/e2b.md), under the caller's key:
 *   POST   /sandboxes, /v2/sandboxes create one (201)
 *   GET    /sandboxes, /v2/sandboxes the caller's, with metadata and state filters, in pages
 *                                    (X-Next-Token)
 *   GET    /sandboxes/:id            one
 *   DELETE /sandboxes/:id            destroy it (204)
 *   POST   /sandboxes/:id/timeout    its deadline from now (204)
 *   POST   /sandboxes/:id/connect    extend its deadline, and its tokens (200; also under /v2);
 *                                    a paused one is resumed first (201)
 *   POST   /sandboxes/:id/pause      pause it, its processes kept (204; 409 when paused)
 *   POST   /sandboxes/:id/resume     thaw it (201, E2B's older call; 409 when it runs)
 *   GET    /sandboxes/:id/metrics    its usage samples
 *   other  /sandboxes/:id/:what      snapshots, fork...: 501
 * Every error body is E2B's {"code": <status>, "message": <text>} (the SDKs read both keys),
 * the refusals of the auth layer included (auth.c and front.c ask api_e2b_route()).
 *
 * A sandbox is a session of the caller's. Those made here have an E2B-shaped id (20
 * lowercase hex digits: a DNS label, so that its preview host names work), an absolute
 * deadline instead of the idle timeout, the client's metadata and the template id it asked
 * for (an alias from E2B_TEMPLATE_ALIASES, or the template's own name; a request without
 * one asks for E2B's default, "base"). The tokens given out are the session's token views
 * (session/preview.h). */
#include <errno.h>
#include <event2/event.h>
#include <event2/http.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/auth.h"
#include "cluster/cluster.h"
#include "api/cluster.h"
#include "session/ops.h"
#include "session/session.h"
#include "util/cleanup.h"
#include "util/random.h"
#include "util/text.h"
#include "util/time.h"
#include "util/timejson.h"

#define E2B_CLIENT_ID "agent-sandbox"
/* A list page holds at most this many sandboxes (E2B's own cap). */
#define LIST_LIMIT_MAX     100
#define METADATA_MAX       64
#define METADATA_VALUE_MAX 1024

void api_e2b_error(struct http_ctx *ctx, int status, const char *fmt, ...)
{
	char msg[ERR_MSG_MAX];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	_cleanup_free_ char *clean = utf8_sanitize((const uint8_t *)msg, strlen(msg), NULL);
	http_reply_json(ctx, status, json_pack("{s:i, s:s}", "code", status, "message", clean));
}

static const char *state_of(const struct session *s)
{
	return s->state == SESSION_PAUSED ? "paused" : "running";
}

static void reply_err(struct http_ctx *ctx, const struct err *err)
{
	int status = http_status_for_errno(err->errnum);
	if (err->errnum == EAGAIN)
		http_add_header(ctx, "Retry-After", "1");
	api_e2b_error(ctx, status, "%s", err->msg);
}

bool api_e2b_route(const struct http_route *r)
{
	return r && (strncmp(r->pattern, "/sandboxes", 10) == 0 ||
		     strncmp(r->pattern, "/v2/sandboxes", 13) == 0);
}

/* The body as a JSON object (empty: {}), or NULL having replied 400. */
static json_t *body_object(struct http_ctx *ctx)
{
	size_t len;
	const uint8_t *b = http_body(ctx, &len);
	if (!b || !len)
		return json_object();
	struct err e;
	if (http_json_limits_check(ctx, b, len, &e) < 0) {
		api_e2b_error(ctx, 400, "%s", e.msg);
		return NULL;
	}
	json_error_t je;
	json_t *j = json_loadb((const char *)b, len, 0, &je);
	if (!json_is_object(j)) {
		json_decref(j);
		api_e2b_error(ctx, 400, "the body must be a JSON object");
		return NULL;
	}
	return j;
}

/* A timeout in seconds from the body (key "timeout"), def when absent; -1 having replied. */
static int64_t body_timeout(struct http_ctx *ctx, json_t *body, int64_t def)
{
	json_t *v = json_object_get(body, "timeout");
	if (!v || json_is_null(v))
		return def;
	if (!json_is_integer(v) || json_integer_value(v) < 0 ||
	    json_integer_value(v) > 366 * 86400) {
		api_e2b_error(ctx, 400, "\"timeout\" must be a number of seconds");
		return -1;
	}
	return json_integer_value(v);
}

/* An object of strings (metadata, envVars), or NULL for none; -1 having replied. */
static int body_strings(struct http_ctx *ctx, json_t *body, const char *key, json_t **ret)
{
	json_t *v = json_object_get(body, key);
	*ret = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_object(v) || json_object_size(v) > METADATA_MAX) {
		api_e2b_error(ctx, 400, "\"%s\" must be an object of at most %d strings", key,
			      METADATA_MAX);
		return -1;
	}
	const char *k;
	json_t *x;
	json_object_foreach (v, k, x) {
		if (!json_is_string(x) || json_string_length(x) > METADATA_VALUE_MAX ||
		    strlen(k) > 256) {
			api_e2b_error(ctx, 400, "\"%s\" must be an object of strings (`%.64s`)",
				      key, k);
			return -1;
		}
	}
	*ret = v;
	return 0;
}

/* The template a client's templateID names: an alias of E2B_TEMPLATE_ALIASES
 * ("alias=name,...": of an alias's pairs, the first whose template is there), else a
 * template's own name. NULL when neither. Aliases come first so that a name can mean what it
 * means to E2B's clients: E2B's "base" has Python, Node.js, git and curl, so by default it is
 * code-interpreter where that is built, and our busybox base only where it is not. */
static const char *template_for(const char *id, char *buf, size_t cap)
{
	const char *list = api_cfg->e2b_template_aliases ? api_cfg->e2b_template_aliases : "";
	size_t idn = strlen(id);
	for (const char *p = list; *p;) {
		const char *end = strchr(p, ',');
		size_t n = end ? (size_t)(end - p) : strlen(p);
		const char *eq = memchr(p, '=', n);
		if (eq && (size_t)(eq - p) == idn && memcmp(p, id, idn) == 0) {
			snprintf(buf, cap, "%.*s", (int)(n - idn - 1), eq + 1);
			if (template_find(session_templates(), buf))
				return buf;
		}
		p += n + (end ? 1 : 0);
	}
	if (template_find(session_templates(), id))
		return id;
	return NULL;
}

static const char *template_id(const struct session *s)
{
	return s->alias ? s->alias : s->tmpl->name;
}

/* When the session ends if nothing else happens: its deadline, else its idle timeout from
 * its last activity; never past the server's maximum lifetime. */
static uint64_t end_ms(const struct session *s)
{
	uint64_t end = s->deadline_ms;
	if (!end) {
		uint64_t idle = time_mono_ms() - s->active_mono_ms;
		end = time_wall_ms() - idle + (uint64_t)s->idle_timeout_s * 1000;
	}
	if (api_cfg->max_lifetime_s) {
		uint64_t cap = s->created_ms + (uint64_t)api_cfg->max_lifetime_s * 1000;
		if (end > cap)
			end = cap;
	}
	return end;
}

static void set_deadline(struct session *s, int64_t seconds, bool extend_only)
{
	uint64_t d = time_wall_ms() + (uint64_t)seconds * 1000;
	if (api_cfg->max_lifetime_s) {
		uint64_t cap = s->created_ms + (uint64_t)api_cfg->max_lifetime_s * 1000;
		if (d > cap)
			d = cap;
	}
	if (extend_only && s->deadline_ms && s->deadline_ms >= d)
		return;
	/* A session made elsewhere (REST, MCP) that an E2B client extends keeps at least its
	 * idle time: the deadline replaces it. */
	if (extend_only && !s->deadline_ms && end_ms(s) >= d)
		return;
	s->deadline_ms = d;
	s->deadline_span_s = seconds > 0 && seconds <= UINT32_MAX ? (uint32_t)seconds : 0;
}

void api_e2b_woken(struct session *s)
{
	api_envd_resumed(s->owner, s->id);
	/* Its deadline had passed (that paused it): it runs again for as long as it last
	 * did (E2B's default timeout when it never had one). */
	if (s->deadline_ms)
		set_deadline(s, s->deadline_span_s ? s->deadline_span_s : 15, false);
}

/* E2B_ENVD_VERSION when it is x.y.z (the SDKs compare it and throw on anything else), else
 * the default. */
static const char *envd_version(void)
{
	const char *v = api_cfg->e2b_envd_version;
	unsigned a, b, c;
	char end;
	if (!v || sscanf(v, "%u.%u.%u%c", &a, &b, &c, &end) != 3 ||
	    strspn(v, "0123456789.") != strlen(v))
		return "0.5.7";
	return v;
}

/* Sandbox: the reply of create and connect. */
static json_t *sandbox_json(const struct session *s)
{
	char envd[SESSION_TOKEN_LEN + 1], traffic[SESSION_TOKEN_LEN + 1];
	session_token(s, SESSION_TOKEN_ENVD, envd);
	session_token(s, SESSION_TOKEN_E2B_TRAFFIC, traffic);
	/* "localhost": a client that forgot E2B_SANDBOX_URL fails on its own machine instead
	 * of sending the token to E2B's cloud. */
	return json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:s, s:s}", "templateID", template_id(s),
			 "sandboxID", s->id, "alias", template_id(s), "clientID", E2B_CLIENT_ID,
			 "envdVersion", envd_version(), "envdAccessToken", envd,
			 "trafficAccessToken", traffic, "domain", "localhost");
}

/* ListedSandbox, and with detail SandboxDetail. */
static json_t *listed_json(const struct session *s, bool detail)
{
	const struct sandbox_limits *l = &s->limits;
	unsigned cpus = l->vcpus;
	if (!cpus && l->cpu_quota_us && l->cpu_period_us)
		cpus = (unsigned)((l->cpu_quota_us + l->cpu_period_us - 1) / l->cpu_period_us);
	if (!cpus)
		cpus = 1;
	uint64_t mem_mb = l->mem_mib ? l->mem_mib : l->memory_bytes >> 20;
	json_t *j = json_pack(
		"{s:s, s:s, s:s, s:s, s:i, s:I, s:I, s:s, s:s, s:O}", "templateID", template_id(s),
		"alias", template_id(s), "sandboxID", s->id, "clientID", E2B_CLIENT_ID, "cpuCount",
		(int)cpus, "memoryMB", (json_int_t)mem_mb, "diskSizeMB",
		(json_int_t)(l->workspace_bytes >> 20), "state", state_of(s), "envdVersion",
		envd_version(), "metadata", s->metadata ? s->metadata : json_object());
	/* json_pack's O takes a reference; a fresh empty object would leak it. */
	if (!s->metadata)
		json_decref(json_object_get(j, "metadata"));
	json_object_set_new(j, "startedAt", time_iso8601_json(s->created_ms));
	json_object_set_new(j, "endAt", time_iso8601_json(end_ms(s)));
	/* E2B's lifecycle: what its timeout does, and whether traffic wakes it. */
	json_object_set_new(
		j, "lifecycle",
		json_pack("{s:s, s:b}", "onTimeout",
			  s->on_timeout == SESSION_ON_TIMEOUT_DESTROY ? "kill" : "pause",
			  "autoResume", s->auto_resume));
	if (detail) {
		char envd[SESSION_TOKEN_LEN + 1];
		session_token(s, SESSION_TOKEN_ENVD, envd);
		json_object_set_new(j, "envdAccessToken", json_string(envd));
		json_object_set_new(j, "domain", json_string("localhost"));
	}
	return j;
}

/* The caller's ready or paused session named by the path, or NULL having replied 404
 * (another key's sandbox does not exist for the caller). */
static struct session *path_session(struct http_ctx *ctx)
{
	const char *id = http_param(ctx, 0);
	struct session *s = id && session_id_valid(id) ? session_find(api_owner(ctx), id) : NULL;
	if (!s || (s->state != SESSION_READY && s->state != SESSION_PAUSED)) {
		api_e2b_error(ctx, 404, "sandbox `%.64s` not found", id ? id : "");
		return NULL;
	}
	return s;
}

/* --- create ------------------------------------------------------------------------ */

/* E2B's lifecycle at creation: autoPause (what the timeout does), autoPauseMemory (false: its
 * files are enough, as this server's hibernation keeps them; true or absent: its processes
 * too) and autoResume ({"enabled": bool}, or a bool). 400 having replied when malformed or
 * contradictory, as E2B's SDKs refuse it. */
static int body_lifecycle(struct http_ctx *ctx, json_t *body, enum session_on_timeout *on_timeout,
			  bool *auto_resume)
{
	json_t *ap = json_object_get(body, "autoPause"),
	       *mem = json_object_get(body, "autoPauseMemory");
	json_t *ar = json_object_get(body, "autoResume");
	*on_timeout = SESSION_ON_TIMEOUT_DESTROY;
	*auto_resume = false;
	if ((ap && !json_is_boolean(ap) && !json_is_null(ap)) ||
	    (mem && !json_is_boolean(mem) && !json_is_null(mem))) {
		api_e2b_error(ctx, 400, "\"autoPause\" and \"autoPauseMemory\" must be booleans");
		return -1;
	}
	if (json_is_object(ar))
		ar = json_object_get(ar, "enabled");
	if (ar && !json_is_boolean(ar) && !json_is_null(ar)) {
		api_e2b_error(ctx, 400, "\"autoResume\" must be {\"enabled\": boolean}");
		return -1;
	}
	bool pause = json_is_true(ap), files_only = json_is_false(mem);
	*auto_resume = json_is_true(ar);
	if (*auto_resume && !pause) {
		api_e2b_error(ctx, 400, "\"autoResume\" needs \"autoPause\": true");
		return -1;
	}
	if (*auto_resume && files_only) {
		api_e2b_error(ctx, 400,
			      "\"autoResume\" cannot wake a sandbox paused without its memory "
			      "(\"autoPauseMemory\": false): resume it with connect");
		return -1;
	}
	if (pause)
		*on_timeout =
			files_only ? SESSION_ON_TIMEOUT_PAUSE : SESSION_ON_TIMEOUT_PAUSE_MEMORY;
	return 0;
}

struct create_req {
	struct http_ctx *ctx;
	int64_t timeout_s;
	json_t *metadata;
	char *alias;
};

static void on_created(struct ops_call *c, const struct ops_result *r, const struct err *err,
		       void *arg)
{
	struct create_req *q = arg;
	if (err) {
		if (err->errnum == ENOENT || err->errnum == EINVAL)
			api_e2b_error(q->ctx, 400, "%s", err->msg);
		else
			reply_err(q->ctx, err);
	} else {
		struct session *s = r->session;
		s->metadata = q->metadata ? json_deep_copy(q->metadata) : NULL;
		free(s->alias);
		s->alias = q->alias;
		q->alias = NULL;
		set_deadline(s, q->timeout_s, false);
		http_reply_json(q->ctx, 201, sandbox_json(s));
	}
	json_decref(q->metadata);
	free(q->alias);
	free(q);
}

void api_e2b_create(struct http_ctx *ctx)
{
	json_auto_t *body = body_object(ctx);
	if (!body)
		return;
	json_t *tv = json_object_get(body, "templateID");
	if (tv && !json_is_string(tv)) {
		api_e2b_error(ctx, 400, "\"templateID\" must be a string");
		return;
	}
	const char *asked = tv ? json_string_value(tv) : "base";
	char buf[128];
	const char *tmpl = template_for(asked, buf, sizeof(buf));
	/* In a cluster, the node placement chooses makes it (by the template as this node
	 * names it, or as asked when this node has none of that name). */
	if (cluster_enabled()) {
		const struct auth_identity *who = auth_identity(ctx);
		int c = api_cluster_route_create(
			ctx, api_owner(ctx), who ? who->scopes : 0, NULL, tmpl ? tmpl : asked,
			json_object_get(body, "nodeSelector"), false, true);
		if (c)
			return;
	}
	if (!tmpl) {
		_cleanup_free_ char *names = template_names(session_templates());
		api_e2b_error(ctx, 400, "template `%.64s` not found (templates: %s)", asked, names);
		return;
	}
	json_t *metadata, *env;
	enum session_on_timeout on_timeout;
	bool auto_resume;
	/* E2B's default when the client sends none: 15 seconds. */
	int64_t timeout = body_timeout(ctx, body, 15);
	if (timeout < 0 || body_strings(ctx, body, "metadata", &metadata) < 0 ||
	    body_strings(ctx, body, "envVars", &env) < 0 ||
	    body_lifecycle(ctx, body, &on_timeout, &auto_resume) < 0)
		return;
	struct err e;
	if (ops_check_env(env, &e) < 0) {
		api_e2b_error(ctx, 400, "\"envVars\": %s", e.msg);
		return;
	}
	char id[21];
	random_hex(id, 10);
	struct ops_target t = { .owner = api_owner(ctx), .session_id = id, .template_name = tmpl };
	/* Random, and E2B's clients build host names from it: the preview name is the id. */
	struct ops_session_opts o = {
		.env = env,
		.id_generated = true,
		.on_timeout = on_timeout,
		.auto_resume = auto_resume,
	};
	struct create_req *q = xcalloc(1, sizeof(*q));
	q->ctx = ctx;
	q->timeout_s = timeout;
	q->metadata = metadata ? json_incref(metadata) : NULL;
	q->alias = strcmp(asked, tmpl) ? xstrdup(asked) : NULL;
	if (!ops_create_session(&t, &o, on_created, q, &e)) {
		reply_err(ctx, &e);
		json_decref(q->metadata);
		free(q->alias);
		free(q);
	}
}

/* --- list -------------------------------------------------------------------------- */

struct list_filter {
	json_t *metadata; /* object of strings every listed sandbox has, or NULL */
	const char *template_id;
	uint64_t started_after; /* ms: those started then or later (0: any) */
	bool running, paused;   /* the states listed */
	json_t *out;
};

/* Adds `k=v&...` (URL-encoded pairs, what the SDKs send) to f->metadata; -1 when bad. */
static int parse_metadata_query(const char *q, json_t *into)
{
	_cleanup_free_ char *copy = xstrdup(q);
	char *save = NULL;
	for (char *pair = strtok_r(copy, "&", &save); pair; pair = strtok_r(NULL, "&", &save)) {
		char *eq = strchr(pair, '=');
		if (!eq)
			return -1;
		*eq = '\0';
		_cleanup_free_ char *k = evhttp_uridecode(pair, 1, NULL);
		_cleanup_free_ char *v = evhttp_uridecode(eq + 1, 1, NULL);
		if (!k || !v || json_object_size(into) >= METADATA_MAX)
			return -1;
		json_object_set_new(into, k, json_string(v));
	}
	return 0;
}

static void collect(struct session *s, void *arg)
{
	struct list_filter *f = arg;
	if (!(s->state == SESSION_READY && f->running) &&
	    !(s->state == SESSION_PAUSED && f->paused))
		return;
	if (f->template_id && strcmp(f->template_id, template_id(s)) != 0)
		return;
	if (s->created_ms < f->started_after)
		return;
	const char *k;
	json_t *v;
	json_object_foreach (f->metadata, k, v) {
		json_t *have = s->metadata ? json_object_get(s->metadata, k) : NULL;
		if (!json_is_string(have) || strcmp(json_string_value(have), json_string_value(v)))
			return;
	}
	json_array_append_new(f->out, listed_json(s, false));
}

static int by_start(const void *a, const void *b)
{
	json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
	int c = strcmp(json_string_value(json_object_get(x, "startedAt")),
		       json_string_value(json_object_get(y, "startedAt")));
	if (c)
		return c;
	return strcmp(json_string_value(json_object_get(x, "sandboxID")),
		      json_string_value(json_object_get(y, "sandboxID")));
}

struct list_page {
	json_t *all;
	long limit, offset;
	bool desc;
};

static void reply_page(struct http_ctx *ctx, json_t *all, long limit, long offset, bool desc);

static void on_list_parts(struct http_ctx *ctx, json_t *parts, void *arg)
{
	struct list_page *p = arg;
	if (ctx) {
		size_t i;
		json_t *part;
		json_array_foreach (parts, i, part) {
			json_t *got = json_object_get(part, "body");
			if (json_integer_value(json_object_get(part, "status")) == 200 &&
			    json_is_array(got))
				json_array_extend(p->all, got);
		}
		reply_page(ctx, p->all, p->limit, p->offset, p->desc);
	}
	json_decref(p->all);
	free(p);
}

void api_e2b_list(struct http_ctx *ctx)
{
	json_auto_t *meta = json_object(), *all = json_array();
	struct list_filter f = { .metadata = meta, .out = all };
	const char *mq = http_query(ctx, "metadata");
	/* Old SDKs sent metadata as its own query parameters on v1: the same pairs. */
	if (mq && parse_metadata_query(mq, f.metadata) < 0) {
		api_e2b_error(ctx, 400, "\"metadata\" must be URL-encoded key=value pairs");
		return;
	}
	/* state=running,paused (the SDK's default is both). */
	const char *state = http_query(ctx, "state");
	f.running = !state || strstr(state, "running");
	f.paused = !state || strstr(state, "paused");
	f.template_id = http_query(ctx, "template");
	const char *after = http_query(ctx, "startedAfter");
	if (after && time_parse_iso8601(after, &f.started_after) < 0) {
		api_e2b_error(ctx, 400, "\"startedAfter\" must be an ISO 8601 time");
		return;
	}
	/* E2B's order: the newest first, unless asked otherwise. */
	const char *order = http_query(ctx, "order");
	if (order && strcmp(order, "asc") && strcmp(order, "desc")) {
		api_e2b_error(ctx, 400, "\"order\" must be asc or desc");
		return;
	}
	long limit = LIST_LIMIT_MAX, offset = 0;
	const char *lq = http_query(ctx, "limit"), *tq = http_query(ctx, "nextToken");
	char *end;
	if (lq) {
		limit = strtol(lq, &end, 10);
		if (!*lq || *end || limit < 1 || limit > LIST_LIMIT_MAX) {
			api_e2b_error(ctx, 400, "\"limit\" must be 1 to %d", LIST_LIMIT_MAX);
			return;
		}
	}
	if (tq) {
		offset = strtol(tq, &end, 10);
		if (!*tq || *end || offset < 0) {
			api_e2b_error(ctx, 400, "\"nextToken\" is not one this server gave");
			return;
		}
	}
	if (f.running || f.paused)
		session_foreach(api_owner(ctx), collect, &f);
	bool desc = !order || !strcmp(order, "desc");
	/* Another node's part is all of it: the node asked pages the whole. */
	if (auth_from_peer(ctx)) {
		http_reply_json(ctx, 200, json_incref(all));
		return;
	}
	if (cluster_enabled()) {
		struct list_page *p = xcalloc(1, sizeof(*p));
		p->all = json_incref(all);
		p->limit = limit;
		p->offset = offset;
		p->desc = desc;
		const struct auth_identity *id = auth_identity(ctx);
		api_cluster_fanout(ctx, api_owner(ctx), id ? id->scopes : 0, on_list_parts, p);
		return;
	}
	reply_page(ctx, all, limit, offset, desc);
}

static void reply_page(struct http_ctx *ctx, json_t *all, long limit, long offset, bool desc)
{
	size_t n = json_array_size(all);
	json_t **items = xcalloc(n ? n : 1, sizeof(*items));
	for (size_t i = 0; i < n; i++)
		items[i] = json_array_get(all, i);
	qsort(items, n, sizeof(*items), by_start);
	if (desc)
		for (size_t i = 0; i < n / 2; i++) {
			json_t *x = items[i];
			items[i] = items[n - 1 - i];
			items[n - 1 - i] = x;
		}
	json_t *page = json_array();
	size_t i;
	for (i = (size_t)offset; i < n && json_array_size(page) < (size_t)limit; i++)
		json_array_append(page, items[i]);
	free(items);
	if (i < n) {
		char tok[24];
		snprintf(tok, sizeof(tok), "%zu", i);
		http_add_header(ctx, "X-Next-Token", tok);
	}
	http_reply_json(ctx, 200, page);
}

/* --- one sandbox ------------------------------------------------------------------- */

void api_e2b_get(struct http_ctx *ctx)
{
	struct session *s = path_session(ctx);
	if (s)
		http_reply_json(ctx, 200, listed_json(s, true));
}

/* Once the sandbox is gone (its volumes free for the next one). */
static void on_killed(void *arg)
{
	struct http_ctx *ctx = arg;
	http_stream_start_raw(ctx, 204, HTTP_LENGTH_NONE);
	http_stream_end(ctx);
}

void api_e2b_kill(struct http_ctx *ctx)
{
	const char *id = http_param(ctx, 0);
	struct ops_target t = { .owner = api_owner(ctx), .session_id = id };
	struct err e;
	if (!id || !session_id_valid(id)) {
		api_e2b_error(ctx, 404, "sandbox not found");
		return;
	}
	if (ops_destroy_session(&t, "killed by an E2B client", on_killed, ctx, &e) < 0) {
		if (e.errnum == ENOENT)
			api_e2b_error(ctx, 404, "sandbox `%s` not found", id);
		else
			reply_err(ctx, &e);
	}
}

void api_e2b_timeout(struct http_ctx *ctx)
{
	json_auto_t *body = body_object(ctx);
	if (!body)
		return;
	int64_t timeout = body_timeout(ctx, body, -2);
	if (timeout == -1)
		return;
	if (timeout == -2) {
		api_e2b_error(ctx, 400, "\"timeout\" is required");
		return;
	}
	struct session *s = path_session(ctx);
	if (!s)
		return;
	set_deadline(s, timeout, false);
	http_stream_start_raw(ctx, 204, HTTP_LENGTH_NONE);
	http_stream_end(ctx);
}

/* --- pause and resume -------------------------------------------------------------- */

/* A pause ends what E2B clients hold open in the sandbox first (their streams end with
 * `unavailable`, a download or upload is cut, a watcher's watch ends in the agent), waits
 * for those operations to be over in the agent, then pauses it with its processes kept
 * (SESSION_PAUSE_KEEP: a VM hibernated whole, else frozen: the cgroup freezer). Operations of other
 * clients (REST, MCP) still in flight then make it fail, with 400 and what to do: never 409, which
 * the SDKs read as "paused already". While paused, the data plane answers 502 (the SDKs: not
 * running), the deadline does not run, and connect resumes it. */
#define PAUSE_SETTLE_MS   2000
#define PAUSE_SETTLE_STEP 10

struct pause_req {
	struct http_ctx *ctx;
	char *owner, *sid;
	bool pause;
	int64_t timeout_s;
	struct event *timer;
	unsigned waited_ms;
};

static void pause_req_free(struct pause_req *q)
{
	if (q->timer)
		event_free(q->timer);
	free(q->owner);
	free(q->sid);
	free(q);
}

static void on_pause_done(struct session *s, const struct err *err, void *arg)
{
	struct pause_req *q = arg;
	/* On failure the session is not given: what state it is in decides the answer. */
	if (err)
		s = session_find(q->owner, q->sid);
	/* A pause that did not happen: the watchers it suspended watch again. */
	if (err && q->pause && s && s->state == SESSION_READY && !s->transition)
		api_envd_resumed(q->owner, q->sid);
	if (err) {
		if (err->errnum == ENOENT || err->errnum == ECANCELED)
			api_e2b_error(q->ctx, 404, "sandbox `%s` not found", q->sid);
		else if (err->errnum == ENOTSUP)
			api_e2b_error(q->ctx, 501, "%s", err->msg);
		else if (err->errnum == EBUSY && s && q->pause &&
			 (s->state == SESSION_PAUSED || s->transition))
			api_e2b_error(q->ctx, 409,
				      "sandbox `%s` is already paused (or being paused)", q->sid);
		else if (err->errnum == EBUSY && s && !q->pause &&
			 (s->state == SESSION_READY || s->transition))
			api_e2b_error(q->ctx, 409,
				      "sandbox `%s` is already running (or being resumed)", q->sid);
		else if (err->errnum == EBUSY)
			api_e2b_error(q->ctx, 400, "%s", err->msg);
		else
			reply_err(q->ctx, err);
	} else if (q->pause) {
		http_stream_start_raw(q->ctx, 204, HTTP_LENGTH_NONE);
		http_stream_end(q->ctx);
	} else {
		api_envd_resumed(q->owner, q->sid);
		set_deadline(s, q->timeout_s, false);
		http_reply_json(q->ctx, 201, sandbox_json(s));
	}
	pause_req_free(q);
}

static void pause_now(struct pause_req *q)
{
	struct ops_target t = { .owner = q->owner, .session_id = q->sid };
	struct err e;
	if (ops_pause_session_mode(&t, q->pause, SESSION_PAUSE_KEEP, on_pause_done, q, &e) < 0)
		on_pause_done(NULL, &e, q);
}

/* Waits a little for the operations a suspend ended to be over in the agent. */
static void pause_settle(evutil_socket_t fd, short what, void *arg)
{
	struct pause_req *q = arg;
	struct session *s = session_find(q->owner, q->sid);
	/* Again at each step: what E2B clients opened meanwhile ends too. */
	if (s && s->state == SESSION_READY && !s->transition)
		api_envd_suspend(q->owner, q->sid);
	if (s && s->state == SESSION_READY && s->running && q->waited_ms < PAUSE_SETTLE_MS) {
		q->waited_ms += PAUSE_SETTLE_STEP;
		struct timeval tv = { 0, PAUSE_SETTLE_STEP * 1000 };
		evtimer_add(q->timer, &tv);
		return;
	}
	pause_now(q);
}

static struct pause_req *pause_req_new(struct http_ctx *ctx, struct session *s, bool pause)
{
	struct pause_req *q = xcalloc(1, sizeof(*q));
	q->ctx = ctx;
	q->owner = xstrdup(s->owner);
	q->sid = xstrdup(s->id);
	q->pause = pause;
	return q;
}

/* Thaws it; the reply is the Sandbox, 201 (connect's and resume's answer to a paused one),
 * with a deadline timeout_s from now. */
static void resume(struct http_ctx *ctx, struct session *s, int64_t timeout_s)
{
	struct pause_req *q = pause_req_new(ctx, s, false);
	q->timeout_s = timeout_s;
	pause_now(q);
}

void api_e2b_pause(struct http_ctx *ctx)
{
	json_auto_t *body = body_object(ctx);
	if (!body)
		return;
	struct session *s = path_session(ctx);
	if (!s)
		return;
	if (s->state == SESSION_PAUSED) {
		api_e2b_error(ctx, 409, "sandbox `%s` is already paused", s->id);
		return;
	}
	if (s->transition) {
		api_e2b_error(ctx, 409, "sandbox `%s` is being paused or resumed", s->id);
		return;
	}
	struct pause_req *q = pause_req_new(ctx, s, true);
	q->timer = evtimer_new(api_base, pause_settle, q);
	pause_settle(-1, 0, q);
}

void api_e2b_resume(struct http_ctx *ctx)
{
	json_auto_t *body = body_object(ctx);
	if (!body)
		return;
	/* E2B's default for a resumed sandbox: 15 seconds. */
	int64_t timeout = body_timeout(ctx, body, 15);
	if (timeout < 0)
		return;
	struct session *s = path_session(ctx);
	if (!s)
		return;
	if (s->state == SESSION_READY && !s->transition) {
		api_e2b_error(ctx, 409, "sandbox `%s` is already running", s->id);
		return;
	}
	resume(ctx, s, timeout);
}

void api_e2b_connect(struct http_ctx *ctx)
{
	json_auto_t *body = body_object(ctx);
	if (!body)
		return;
	int64_t timeout = body_timeout(ctx, body, 300);
	if (timeout < 0)
		return;
	struct session *s = path_session(ctx);
	if (!s)
		return;
	if (s->state == SESSION_PAUSED || s->transition) {
		resume(ctx, s, timeout);
		return;
	}
	set_deadline(s, timeout, true);
	session_touch(s);
	http_reply_json(ctx, 200, sandbox_json(s));
}

/* A query's unix seconds (start=, end=): *ret in ms; -1 when present and not a number. */
static int query_seconds(struct http_ctx *ctx, const char *name, uint64_t *ret)
{
	const char *q = http_query(ctx, name);
	if (!q)
		return 0;
	char *end;
	errno = 0;
	unsigned long long v = strtoull(q, &end, 10);
	if (!*q || *end || *q == '-' || errno || v > UINT64_MAX / 1000)
		return -1;
	*ret = (uint64_t)v * 1000;
	return 0;
}

static json_t *metric_json(const struct session_usage *u)
{
	json_t *j = json_pack("{s:o, s:I, s:i, s:f, s:I, s:I, s:I, s:I, s:I}", "timestamp",
			      time_iso8601_json(u->t_ms), "timestampUnix",
			      (json_int_t)(u->t_ms / 1000), "cpuCount", (int)u->cpu_count,
			      "cpuUsedPct", u->cpu_pct < 0 ? 0.0 : u->cpu_pct, "memUsed",
			      (json_int_t)u->memory_bytes, "memTotal", (json_int_t)u->memory_total,
			      "memCache", (json_int_t)u->cache_bytes, "diskUsed",
			      (json_int_t)u->disk_used, "diskTotal", (json_int_t)u->disk_total);
	return j;
}

/* GET /sandboxes/:id/metrics?start=&end= (unix seconds, both optional): the sandbox's usage
 * readings in that window, oldest first. A reading is taken now when the window reaches
 * now (the server reads usage when asked, and keeps the last SESSION_USAGE_KEEP readings:
 * docs/e2b.md). */
void api_e2b_metrics(struct http_ctx *ctx)
{
	uint64_t from = 0, to = UINT64_MAX;
	if (query_seconds(ctx, "start", &from) < 0 || query_seconds(ctx, "end", &to) < 0) {
		api_e2b_error(ctx, 400, "\"start\" and \"end\" must be unix times in seconds");
		return;
	}
	if (to != UINT64_MAX)
		to += 999; /* the whole second that `end` names */
	if (from > to) {
		api_e2b_error(ctx, 400, "\"start\" is after \"end\"");
		return;
	}
	struct session *s = path_session(ctx);
	if (!s)
		return;
	uint64_t now = time_wall_ms();
	struct session_usage now_u;
	if (from <= now && now <= to)
		(void)session_usage_take(s, &now_u);
	struct session_usage out[SESSION_USAGE_KEEP];
	size_t n = session_usage_read(s, from, to, out, SESSION_USAGE_KEEP);
	json_t *list = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(list, metric_json(&out[i]));
	http_reply_json(ctx, 200, list);
}

void api_e2b_unsupported(struct http_ctx *ctx)
{
	/* Never 409 for pause: the SDKs read it as "already paused". */
	if (path_session(ctx))
		api_e2b_error(ctx, 501, "%s is not supported by this server",
			      http_param(ctx, 1) ? http_param(ctx, 1) : "this operation");
}
