/* /admin/keys: API key management over HTTP (scope admin). The CLI's `sandbox keys` does
 * the same on the database directly. */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "api/api.h"
#include "api/auth.h"
#include "auth/keys.h"
#include "session/quota.h"
#include "cluster/cluster.h"
#include "store/store.h"
#include "util/cleanup.h"
#include "util/log.h"

/* A key object with the reference's name for its prefix, "keyPrefix", beside "prefix", and
 * what the key holds now against the quotas in force for it ("usage"). */
static json_t *key_json(const struct key_info *k)
{
	json_t *j = keys_info_json(k);
	json_t *prefix = json_object_get(j, "prefix");
	if (prefix)
		json_object_set(j, "keyPrefix", prefix);
	quota_note_key(k->id, (k->scopes & KEYS_SCOPE_ADMIN) != 0, &k->quotas);
	json_object_set_new(j, "usage", quota_usage_json(k->id));
	return j;
}

/* "quotas": an object of the key's own quotas, merged into *q. Replies 400 when bad. */
static int opt_quotas(struct http_ctx *ctx, json_t *v, struct quota_set *q)
{
	if (!v || json_is_null(v))
		return 0;
	struct err e;
	if (quota_set_merge_json(q, v, &e) < 0) {
		http_reply_err(ctx, &e);
		return -1;
	}
	return 0;
}

/* A key and its new secret: the key's fields, the secret as "key", and the key object once
 * more as "record", where the reference puts it. */
static json_t *key_with_secret(const struct key_info *k, const char *secret)
{
	json_t *r = key_json(k);
	json_object_set_new(r, "record", key_json(k));
	json_object_set_new(r, "key", json_string(secret));
	return r;
}

static void add_key(const struct key_info *k, void *arg)
{
	json_array_append_new(arg, key_json(k));
}

void api_admin_keys_list(struct http_ctx *ctx)
{
	auth_flush_last_used();
	json_auto_t *list = json_array();
	struct err e;
	if (keys_foreach(store_db(), add_key, list, &e) < 0) {
		http_reply_err(ctx, &e);
		return;
	}
	http_reply_json(ctx, 200, json_pack("{s:o}", "keys", TAKE_PTR(list)));
}

/* "scopes": a non-empty array of scope names, or absent (exec). Replies 400 when bad. */
static int opt_scopes(struct http_ctx *ctx, json_t *sc, unsigned *ret)
{
	*ret = KEYS_SCOPE_EXEC;
	if (!sc || json_is_null(sc))
		return 0;
	if (!json_is_array(sc) || json_array_size(sc) == 0) {
		http_reply_error(ctx, 400, "\"scopes\" must be a non-empty array of strings");
		return -1;
	}
	unsigned scopes = 0;
	size_t i;
	json_t *s;
	json_array_foreach (sc, i, s) {
		unsigned one;
		struct err e;
		if (!json_is_string(s) || keys_parse_scopes(json_string_value(s), &one, &e) < 0) {
			http_reply_error(ctx, 400, "%s",
					 json_is_string(s) ? e.msg : "scopes must be strings");
			return -1;
		}
		scopes |= one;
	}
	*ret = scopes;
	return 0;
}

/* "rateLimit": requests per minute, or absent (0: none). Replies 400 when bad. */
static int opt_rate_limit(struct http_ctx *ctx, json_t *rl, int64_t *ret)
{
	*ret = 0;
	if (!rl || json_is_null(rl))
		return 0;
	if (!json_is_integer(rl) || json_integer_value(rl) < 0) {
		http_reply_error(ctx, 400,
				 "\"rateLimit\" must be a whole number of requests per minute");
		return -1;
	}
	*ret = json_integer_value(rl);
	return 0;
}

/* "expiresIn": seconds or a duration, or absent (0: never). *ret is the expiry time. Replies
 * 400 when bad. */
static int opt_expiry(struct http_ctx *ctx, json_t *ex, int64_t *ret)
{
	*ret = 0;
	if (!ex || json_is_null(ex))
		return 0;
	int64_t secs = 0;
	if (json_is_integer(ex) && json_integer_value(ex) > 0 &&
	    json_integer_value(ex) <= KEYS_MAX_LIFETIME_S)
		secs = json_integer_value(ex);
	else if (!json_is_string(ex) || keys_parse_duration(json_string_value(ex), &secs) < 0) {
		http_reply_error(ctx, 400,
				 "\"expiresIn\" must be seconds or a duration like 30d, 12h "
				 "(at most 100 years)");
		return -1;
	}
	*ret = (int64_t)time(NULL) + secs;
	return 0;
}

/* --- a change of the key table, in a cluster ----------------------------------------- */

/* A change made in the local store, waiting for etcd to hold it too: then its reply goes,
 * else the local store is put back as it was (`before`: the row then, NULL when the key did
 * not exist) and the client gets 503. */
struct key_change {
	struct http_ctx *ctx;
	char id[40];
	json_t *before;
	int status;
	json_t *reply;
};

static void on_key_published(const struct err *err, void *arg)
{
	struct key_change *c = arg;
	/* Refused because another node changed the key meanwhile: the local store has the
	 * cluster's state already. Otherwise it is put back (and the cluster's read again). */
	if (err && err->errnum != EEXIST) {
		struct err e;
		if (c->before ? keys_row_apply(store_db(), c->before, &e) < 0
			      : keys_delete(store_db(), c->id, &e) < 0 && e.errnum != ENOENT)
			log_error("api", "key %s: cannot put the local store back: %s", c->id,
				  e.msg);
	}
	/* Replied even to a client that left (the reply is dropped): the request must end. */
	if (err && err->errnum == EEXIST) {
		http_reply_error(c->ctx, 409, "the change was not made: %s", err->msg);
	} else if (err) {
		http_add_header(c->ctx, "Retry-After", "1");
		http_reply_error(c->ctx, 503,
				 "the change was not made: the cluster's store (etcd) did not take "
				 "it (%s)",
				 err->msg);
	} else {
		http_reply_json(c->ctx, c->status, json_incref(c->reply));
	}
	http_ctx_release(c->ctx);
	json_decref(c->before);
	json_decref(c->reply);
	free(c);
}

/* Replies (status, reply: stolen) once the change of key `id` is the cluster's. */
static void commit(struct http_ctx *ctx, const char *id, json_t *before, int status, json_t *reply)
{
	if (!cluster_enabled()) {
		json_decref(before);
		http_reply_json(ctx, status, reply);
		return;
	}
	struct key_change *c = xcalloc(1, sizeof(*c));
	c->ctx = ctx;
	snprintf(c->id, sizeof(c->id), "%s", id);
	c->before = before;
	c->status = status;
	c->reply = reply;
	http_ctx_hold(ctx);
	cluster_publish_key(id, on_key_published, c);
}

/* The key's row before a change (NULL outside a cluster, where nothing is put back). */
static json_t *row_before(const char *id)
{
	struct err e;
	return cluster_enabled() ? keys_row_json(store_db(), id, &e) : NULL;
}

void api_admin_keys_create(struct http_ctx *ctx)
{
	json_auto_t *body = NULL;
	if (http_body_json(ctx, &body) < 0)
		return;
	unsigned scopes;
	int64_t rate, expires;
	json_t *name = json_object_get(body, "name");
	if (!json_is_string(name)) {
		http_reply_error(ctx, 400, "\"name\" is required and must be a string");
		return;
	}
	struct quota_set quotas;
	quota_set_default(&quotas);
	if (opt_scopes(ctx, json_object_get(body, "scopes"), &scopes) < 0 ||
	    opt_rate_limit(ctx, json_object_get(body, "rateLimit"), &rate) < 0 ||
	    opt_expiry(ctx, json_object_get(body, "expiresIn"), &expires) < 0 ||
	    opt_quotas(ctx, json_object_get(body, "quotas"), &quotas) < 0)
		return;
	struct key_info k;
	struct err e;
	_cleanup_free_ char *secret = NULL;
	if (keys_create(store_db(), api_cfg->key_prefix, json_string_value(name), scopes, rate,
			expires, &k, &secret, &e) < 0) {
		http_reply_err(ctx, &e);
		return;
	}
	/* A key that did not get the quotas asked for is not left behind. */
	if (keys_set_quotas(store_db(), k.id, &quotas, &e) < 0 ||
	    keys_get(store_db(), k.id, &k, &e) < 0) {
		struct err ignored;
		keys_delete(store_db(), k.id, &ignored);
		http_reply_err(ctx, &e);
		return;
	}
	commit(ctx, k.id, NULL, 201, key_with_secret(&k, secret));
}

static const char *key_id_param(struct http_ctx *ctx)
{
	const char *id = http_param(ctx, 0);
	return id ? id : "";
}

/* {success, id} and the reference's "message", e.g. "Key key_... revoked". */
static void reply_done(struct http_ctx *ctx, const char *what, json_t *before)
{
	const char *id = key_id_param(ctx);
	_cleanup_free_ char *msg = xasprintf("Key %s %s", id, what);
	commit(ctx, id, before, 200,
	       json_pack("{s:b, s:s, s:s}", "success", 1, "id", id, "message", msg));
}

/* PATCH /admin/keys/:id {"quotas": {...}, "rateLimit": N}: changes what a key may do; its
 * quotas are merged (null puts one back to the server's default). Takes effect on the key's
 * next request. */
void api_admin_keys_update(struct http_ctx *ctx)
{
	json_auto_t *body = NULL;
	if (http_body_json(ctx, &body) < 0)
		return;
	const char *key;
	json_t *v;
	json_object_foreach (body, key, v) {
		if (strcmp(key, "quotas") != 0 && strcmp(key, "rateLimit") != 0) {
			http_reply_error(ctx, 400,
					 "\"%.64s\" cannot be changed (a key's quotas and "
					 "rateLimit can)",
					 key);
			return;
		}
	}
	struct key_info k;
	struct err e;
	if (keys_get(store_db(), key_id_param(ctx), &k, &e) < 0) {
		http_reply_err(ctx, &e);
		return;
	}
	json_t *before = row_before(k.id);
	struct quota_set quotas = k.quotas;
	int64_t rate = k.rate_limit;
	json_t *rl = json_object_get(body, "rateLimit");
	if (opt_quotas(ctx, json_object_get(body, "quotas"), &quotas) < 0 ||
	    (rl && opt_rate_limit(ctx, rl, &rate) < 0)) {
		json_decref(before);
		return;
	}
	/* Both or neither. */
	sqlite3 *db = store_db();
	if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, NULL) != SQLITE_OK) {
		json_decref(before);
		http_reply_error(ctx, 500, "key store: %s", sqlite3_errmsg(db));
		return;
	}
	if (keys_set_quotas(db, k.id, &quotas, &e) < 0 ||
	    keys_set_rate_limit(db, k.id, rate, &e) < 0 ||
	    sqlite3_exec(db, "COMMIT", NULL, NULL, NULL) != SQLITE_OK) {
		sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
		json_decref(before);
		http_reply_err(ctx, &e);
		return;
	}
	if (keys_get(db, k.id, &k, &e) < 0) {
		json_decref(before);
		http_reply_err(ctx, &e);
		return;
	}
	commit(ctx, k.id, before, 200, key_json(&k));
}

void api_admin_keys_revoke(struct http_ctx *ctx)
{
	struct err e;
	json_t *before = row_before(key_id_param(ctx));
	if (keys_set_enabled(store_db(), key_id_param(ctx), false, &e) < 0) {
		json_decref(before);
		http_reply_err(ctx, &e);
		return;
	}
	reply_done(ctx, "revoked", before);
}

void api_admin_keys_rotate(struct http_ctx *ctx)
{
	struct err e;
	_cleanup_free_ char *secret = NULL;
	json_t *before = row_before(key_id_param(ctx));
	if (keys_rotate(store_db(), api_cfg->key_prefix, key_id_param(ctx), &secret, &e) < 0) {
		json_decref(before);
		http_reply_err(ctx, &e);
		return;
	}
	struct key_info k;
	if (keys_get(store_db(), key_id_param(ctx), &k, &e) < 0) {
		json_decref(before);
		http_reply_err(ctx, &e);
		return;
	}
	commit(ctx, k.id, before, 200, key_with_secret(&k, secret));
}

void api_admin_keys_delete(struct http_ctx *ctx)
{
	struct err e;
	json_t *before = row_before(key_id_param(ctx));
	if (keys_delete(store_db(), key_id_param(ctx), &e) < 0) {
		json_decref(before);
		http_reply_err(ctx, &e);
		return;
	}
	reply_done(ctx, "deleted", before);
}

/* --- the cluster's nodes ---------------------------------------------------------------- */

void api_admin_nodes_list(struct http_ctx *ctx)
{
	if (!cluster_enabled()) {
		http_reply_error(
			ctx, 404,
			"this server is not a node of a cluster (SANDBOX_CLUSTER is not set)");
		return;
	}
	http_reply_json(ctx, 200, cluster_nodes_json());
}

static void on_cordoned(const struct err *err, void *arg)
{
	struct http_ctx *ctx = arg;
	{
		const char *name = http_param(ctx, 0);
		bool on = strstr(ctx->path, "/uncordon") == NULL;
		if (err)
			http_reply_error(
				ctx, 503,
				"node %s was not %scordoned: the cluster's store (etcd) did "
				"not take it (%s)",
				name, on ? "" : "un", err->msg);
		else
			http_reply_json(ctx, 200,
					json_pack("{s:b, s:s, s:b}", "success", 1, "node", name,
						  "cordoned", on));
	}
	http_ctx_release(ctx);
}

static void cordon(struct http_ctx *ctx, bool on)
{
	const char *name = http_param(ctx, 0);
	if (!cluster_enabled()) {
		http_reply_error(
			ctx, 404,
			"this server is not a node of a cluster (SANDBOX_CLUSTER is not set)");
		return;
	}
	if (!cluster_node_find(name)) {
		http_reply_error(ctx, 404, "no node named `%.63s` in this cluster", name);
		return;
	}
	http_ctx_hold(ctx);
	cluster_cordon(name, on, on_cordoned, ctx);
}

void api_admin_nodes_cordon(struct http_ctx *ctx)
{
	cordon(ctx, true);
}

void api_admin_nodes_uncordon(struct http_ctx *ctx)
{
	cordon(ctx, false);
}
