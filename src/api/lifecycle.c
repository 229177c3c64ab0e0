/* lifecycle: POST /exec/:id/pause (body {"mode": "freeze"} by default, or "hibernate"),
 * POST /exec/:id/resume, POST /exec/:id/fork (body {"count": N}, 1 by default), and the
 * snapshots: POST /exec/:id/snapshot (body {"name", "ttlSeconds"?}), GET /snapshots,
 * GET and DELETE /snapshots/:name (docs/lifecycle.md). The first two answer with the session
 * once its sandbox is frozen, hibernated or running again; a fork with {"sessions": [...]}
 * once every fork is ready; a snapshot with the snapshot once it is saved. Snapshots are the
 * caller's own; an admin key lists and reaches every key's. */
#include <errno.h>
#include <string.h>

#include "api/api.h"
#include "session/ops.h"
#include "session/snapshot.h"

static void on_done(struct session *s, const struct err *err, void *arg)
{
	struct http_ctx *ctx = arg;
	if (err) {
		api_reply_err(ctx, err);
		return;
	}
	http_reply_json(ctx, 200, session_json(s));
}

/* "mode": "freeze" (also when absent or null) or "hibernate"; 400 otherwise. */
static int opt_mode(struct http_ctx *ctx, json_t *body, enum session_pause_mode *ret)
{
	json_t *v = json_object_get(body, "mode");
	*ret = SESSION_PAUSE_FREEZE;
	if (!v || json_is_null(v))
		return 0;
	const char *m = json_string_value(v);
	if (m && strcmp(m, "hibernate") == 0)
		*ret = SESSION_PAUSE_HIBERNATE;
	else if (!m || strcmp(m, "freeze") != 0) {
		http_reply_error(ctx, 400, "\"mode\" must be \"freeze\" or \"hibernate\"");
		return -1;
	}
	return 0;
}

/* The path's session id and the request's JSON body (NULL: none); false, answered, when
 * either is wrong. */
static bool id_and_body(struct http_ctx *ctx, const char **id, json_t **body)
{
	*id = api_path_session_id(ctx);
	*body = NULL;
	return *id && http_body_json(ctx, body) == 0;
}

static void pause_or_resume(struct http_ctx *ctx, bool pause)
{
	const char *id;
	json_auto_t *body = NULL;
	if (!id_and_body(ctx, &id, &body))
		return;
	enum session_pause_mode mode = SESSION_PAUSE_FREEZE;
	if (pause && opt_mode(ctx, body, &mode) < 0)
		return;
	struct ops_target t = api_request_target(ctx, id, NULL);
	struct err e;
	if (ops_pause_session_mode(&t, pause, mode, on_done, ctx, &e) < 0)
		api_reply_err(ctx, &e);
}

void api_exec_pause(struct http_ctx *ctx)
{
	pause_or_resume(ctx, true);
}

void api_exec_resume(struct http_ctx *ctx)
{
	pause_or_resume(ctx, false);
}

static void on_forked(json_t *forks, const struct err *err, void *arg)
{
	struct http_ctx *ctx = arg;
	if (err) {
		api_reply_err(ctx, err);
		return;
	}
	http_reply_json(ctx, 201, json_pack("{s:O}", "sessions", forks));
}

void api_exec_fork(struct http_ctx *ctx)
{
	const char *id;
	json_auto_t *body = NULL;
	if (!id_and_body(ctx, &id, &body))
		return;
	json_t *n = json_object_get(body, "count");
	json_int_t count = 1;
	if (n && !json_is_null(n)) {
		if (!json_is_integer(n) || json_integer_value(n) < 1 ||
		    json_integer_value(n) > OPS_FORK_MAX) {
			http_reply_error(ctx, 400, "\"count\" must be an integer from 1 to %d",
					 OPS_FORK_MAX);
			return;
		}
		count = json_integer_value(n);
	}
	struct ops_target t = api_request_target(ctx, id, NULL);
	struct err e;
	if (ops_fork_session(&t, (unsigned)count, on_forked, ctx, &e) < 0)
		api_reply_err(ctx, &e);
}

/* --- snapshots ------------------------------------------------------------------------- */

static void on_snapshot(json_t *snapshot, const struct err *err, void *arg)
{
	struct http_ctx *ctx = arg;
	if (err)
		api_reply_err(ctx, err);
	else
		http_reply_json(ctx, 201, json_incref(snapshot));
}

void api_exec_snapshot(struct http_ctx *ctx)
{
	const char *id;
	json_auto_t *body = NULL;
	if (!id_and_body(ctx, &id, &body))
		return;
	json_t *name = json_object_get(body, "name"), *ttl = json_object_get(body, "ttlSeconds");
	if (!json_is_string(name) || strlen(json_string_value(name)) != json_string_length(name)) {
		http_reply_error(ctx, 400, "\"name\" must be a string");
		return;
	}
	json_int_t ttl_s = 0;
	if (ttl && !json_is_null(ttl)) {
		if (!json_is_integer(ttl) || json_integer_value(ttl) < 1) {
			http_reply_error(ctx, 400, "\"ttlSeconds\" must be a positive integer");
			return;
		}
		ttl_s = json_integer_value(ttl);
	}
	struct ops_target t = api_request_target(ctx, id, NULL);
	struct err e;
	if (ops_snapshot_session(&t, json_string_value(name), (uint64_t)ttl_s, on_snapshot, ctx,
				 &e) < 0)
		api_reply_err(ctx, &e);
}

void api_snapshots_list(struct http_ctx *ctx)
{
	http_reply_json(ctx, 200,
			json_pack("{s:o}", "snapshots",
				  snapshot_list(api_is_admin(ctx) ? NULL : api_owner(ctx))));
}

void api_snapshots_get(struct http_ctx *ctx)
{
	struct err e;
	json_t *v = snapshot_get(api_owner(ctx), http_param(ctx, 0), api_is_admin(ctx), &e);
	if (!v)
		api_reply_err(ctx, &e);
	else
		http_reply_json(ctx, 200, v);
}

void api_snapshots_delete(struct http_ctx *ctx)
{
	struct err e;
	const char *name = http_param(ctx, 0);
	if (snapshot_delete(api_owner(ctx), name, api_is_admin(ctx), &e) < 0)
		api_reply_err(ctx, &e);
	else
		http_reply_json(ctx, 200, json_pack("{s:b, s:s}", "deleted", 1, "name", name));
}
