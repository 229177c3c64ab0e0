/* /volumes: persistent named volumes (session/volume.h), the caller's own; an admin key lists
 * and reaches every key's. */
#include <errno.h>
#include <string.h>

#include "api/api.h"
#include "session/volume.h"
#include "util/cleanup.h"

static void on_created(json_t *volume, const struct err *err, void *arg)
{
	struct http_ctx *ctx = arg;
	if (err)
		api_reply_err(ctx, err);
	else
		http_reply_json(ctx, 201, json_incref(volume));
}

void api_volumes_create(struct http_ctx *ctx)
{
	json_auto_t *body = NULL;
	if (http_body_json(ctx, &body) < 0)
		return;
	if (!json_is_object(body)) {
		http_reply_error(ctx, 400,
				 "the body must be a JSON object {\"name\", \"sizeBytes\"}");
		return;
	}
	json_t *name = json_object_get(body, "name"), *size = json_object_get(body, "sizeBytes");
	if (!json_is_string(name) || strlen(json_string_value(name)) != json_string_length(name)) {
		http_reply_error(ctx, 400, "\"name\" must be a string");
		return;
	}
	if (!json_is_integer(size) || json_integer_value(size) <= 0) {
		http_reply_error(ctx, 400, "\"sizeBytes\" must be a positive integer");
		return;
	}
	struct err e;
	if (volume_create(api_owner(ctx), json_string_value(name),
			  (uint64_t)json_integer_value(size), on_created, ctx, &e) < 0)
		api_reply_err(ctx, &e);
}

void api_volumes_list(struct http_ctx *ctx)
{
	http_reply_json(ctx, 200,
			json_pack("{s:o}", "volumes",
				  volume_list(api_is_admin(ctx) ? NULL : api_owner(ctx))));
}

void api_volumes_get(struct http_ctx *ctx)
{
	struct err e;
	json_t *v = volume_get(api_owner(ctx), http_param(ctx, 0), api_is_admin(ctx), &e);
	if (!v)
		api_reply_err(ctx, &e);
	else
		http_reply_json(ctx, 200, v);
}

void api_volumes_delete(struct http_ctx *ctx)
{
	struct err e;
	const char *name = http_param(ctx, 0);
	if (volume_delete(api_owner(ctx), name, api_is_admin(ctx), &e) < 0)
		api_reply_err(ctx, &e);
	else
		http_reply_json(ctx, 200, json_pack("{s:b, s:s}", "deleted", 1, "name", name));
}
