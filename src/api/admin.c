/* /admin/keys: API key management over HTTP (scope admin). The CLI's `sandbox keys` does
 * the same on the database directly. */
#include <errno.h>
#include <string.h>
#include <time.h>

#include "api/api.h"
#include "auth/auth.h"
#include "auth/keys.h"
#include "store/store.h"
#include "util/cleanup.h"

static void add_key(const struct key_info *k, void *arg)
{
	json_array_append_new(arg, keys_info_json(k));
}

void api_admin_keys_list(struct http_ctx *ctx)
{
	auth_flush_last_used();
	json_t *list = json_array();
	struct err e;
	if (keys_foreach(store_db(), add_key, list, &e) < 0) {
		json_decref(list);
		http_reply_err(ctx, &e);
		return;
	}
	http_reply_json(ctx, 200, json_pack("{s:o}", "keys", list));
}

void api_admin_keys_create(struct http_ctx *ctx)
{
	json_t *body;
	if (http_body_json(ctx, &body) < 0)
		return;
	struct err e;
	char *secret = NULL;
	unsigned scopes = KEYS_SCOPE_EXEC;
	int64_t rate = 0, expires = 0;
	json_t *name = json_object_get(body, "name");
	json_t *sc = json_object_get(body, "scopes");
	json_t *rl = json_object_get(body, "rateLimit");
	json_t *ex = json_object_get(body, "expiresIn");
	if (!json_is_string(name)) {
		http_reply_error(ctx, 400, "\"name\" is required and must be a string");
		goto out;
	}
	if (sc && !json_is_null(sc)) {
		if (!json_is_array(sc) || json_array_size(sc) == 0) {
			http_reply_error(ctx, 400,
					 "\"scopes\" must be a non-empty array of strings");
			goto out;
		}
		scopes = 0;
		size_t i;
		json_t *s;
		json_array_foreach (sc, i, s) {
			unsigned one;
			if (!json_is_string(s) ||
			    keys_parse_scopes(json_string_value(s), &one, &e) < 0) {
				http_reply_error(ctx, 400, "%s",
						 json_is_string(s) ? e.msg
								   : "scopes must be strings");
				goto out;
			}
			scopes |= one;
		}
	}
	if (rl && !json_is_null(rl)) {
		if (!json_is_integer(rl) || json_integer_value(rl) < 0) {
			http_reply_error(
				ctx, 400,
				"\"rateLimit\" must be a whole number of requests per minute");
			goto out;
		}
		rate = json_integer_value(rl);
	}
	if (ex && !json_is_null(ex)) {
		int64_t secs = 0;
		if (json_is_integer(ex) && json_integer_value(ex) > 0 &&
		    json_integer_value(ex) <= KEYS_MAX_LIFETIME_S)
			secs = json_integer_value(ex);
		else if (!json_is_string(ex) ||
			 keys_parse_duration(json_string_value(ex), &secs) < 0) {
			http_reply_error(
				ctx, 400,
				"\"expiresIn\" must be seconds or a duration like 30d, 12h "
				"(at most 100 years)");
			goto out;
		}
		expires = (int64_t)time(NULL) + secs;
	}
	struct key_info k;
	if (keys_create(store_db(), api_cfg->key_prefix, json_string_value(name), scopes, rate,
			expires, &k, &secret, &e) < 0) {
		http_reply_err(ctx, &e);
		goto out;
	}
	json_t *r = keys_info_json(&k);
	json_object_set_new(r, "key", json_string(secret));
	http_reply_json(ctx, 201, r);
out:
	free(secret);
	json_decref(body);
}

static const char *key_id_param(struct http_ctx *ctx)
{
	const char *id = http_param(ctx, 0);
	return id ? id : "";
}

void api_admin_keys_revoke(struct http_ctx *ctx)
{
	struct err e;
	if (keys_set_enabled(store_db(), key_id_param(ctx), false, &e) < 0) {
		http_reply_err(ctx, &e);
		return;
	}
	http_reply_json(ctx, 200, json_pack("{s:b, s:s}", "success", 1, "id", key_id_param(ctx)));
}

void api_admin_keys_rotate(struct http_ctx *ctx)
{
	struct err e;
	_cleanup_free_ char *secret = NULL;
	if (keys_rotate(store_db(), api_cfg->key_prefix, key_id_param(ctx), &secret, &e) < 0) {
		http_reply_err(ctx, &e);
		return;
	}
	struct key_info k;
	if (keys_get(store_db(), key_id_param(ctx), &k, &e) < 0) {
		http_reply_err(ctx, &e);
		return;
	}
	json_t *r = keys_info_json(&k);
	json_object_set_new(r, "key", json_string(secret));
	http_reply_json(ctx, 200, r);
}

void api_admin_keys_delete(struct http_ctx *ctx)
{
	struct err e;
	if (keys_delete(store_db(), key_id_param(ctx), &e) < 0) {
		http_reply_err(ctx, &e);
		return;
	}
	http_reply_json(ctx, 200, json_pack("{s:b, s:s}", "success", 1, "id", key_id_param(ctx)));
}
