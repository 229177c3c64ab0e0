/* The /exec routes: sessions, commands and files, in the reference project's shapes.
 *
 * What happens to sessions and guests is session/ops, shared with MCP. This file owns what
 * is REST's alone: reading and checking requests, the shapes of replies (a buffered result
 * under the output cap, NDJSON or SSE lines, raw or encoded file contents), cancelling a
 * command whose client left, and pacing a command's output to a slow streaming client. */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "api/api.h"
#include "api/auth.h"
#include "cluster/cluster.h"
#include "api/cluster.h"
#include "session/ops.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/text.h"
#include "util/time.h"

/* Seconds a client told "try again" (429: the session limit, too many operations at once
 * in a sandbox; 503: the host's memory or descriptors below their watermarks) is asked to
 * wait. */
#define RETRY_AFTER_S 5

/* An error reply; at capacity (EAGAIN) with Retry-After and "retryAfter", as the rate
 * limiter's 429 has. */
static void reply_err(struct http_ctx *ctx, const struct err *err)
{
	const char *reason = session_host_reason(err->errnum);
	/* Worth trying again: a quota, the host's shortage, the cluster's store or room. */
	if (err->errnum != EAGAIN && err->errnum != EROFS && err->errnum != EHOSTUNREACH &&
	    !reason) {
		http_reply_err(ctx, err);
		return;
	}
	char secs[16];
	snprintf(secs, sizeof(secs), "%d", RETRY_AFTER_S);
	http_add_header(ctx, "Retry-After", secs);
	_cleanup_free_ char *msg = utf8_sanitize((const uint8_t *)err->msg, strlen(err->msg), NULL);
	json_t *body = json_pack("{s:s, s:i}", "error", msg, "retryAfter", RETRY_AFTER_S);
	/* The host's own shortage (503): which resource. */
	if (reason)
		json_object_set_new(body, "reason", json_string(reason));
	http_reply_json(ctx, http_status_for_errno(err->errnum), body);
}

/* Streaming output waits for the client once this much is queued toward it. */
#define STREAM_HIGH_WATER (512u << 10)

const char *api_owner(struct http_ctx *ctx)
{
	const struct auth_identity *id = auth_identity(ctx);
	return id ? id->key_id : "";
}

bool api_is_admin(struct http_ctx *ctx)
{
	return auth_is_admin(ctx);
}

/* The session `id` as the caller means it: its own, or for an admin another key's (ops.h
 * has the rule). */
static struct ops_target request_target(struct http_ctx *ctx, const char *id, const char *tmpl)
{
	const struct auth_identity *caller = ctx->user;
	return (struct ops_target){ .owner = api_owner(ctx),
				    .session_id = id,
				    .template_name = tmpl,
				    .any_owner = api_is_admin(ctx),
				    /* the front door took the route's quota (front.c) */
				    .admitted = caller && caller->held };
}

/* The session id in the path, checked. Replies 400 and returns NULL when invalid. */
static const char *path_session_id(struct http_ctx *ctx)
{
	const char *id = http_param(ctx, 0);
	if (!id || !session_id_valid(id)) {
		http_reply_error(ctx, 400,
				 "Invalid session id: use 1-128 letters, digits, '-', '_' or '.'");
		return NULL;
	}
	return id;
}

/* The session id in the path and the JSON body; replies and returns -1 when either is bad. */
static int id_and_body(struct http_ctx *ctx, const char **ret_id, json_t **ret_body)
{
	const char *id = path_session_id(ctx);
	if (!id || http_body_json(ctx, ret_body) < 0)
		return -1;
	*ret_id = id;
	return 0;
}

static int opt_string(struct http_ctx *ctx, json_t *body, const char *key, const char **ret)
{
	json_t *v = json_object_get(body, key);
	*ret = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v)) {
		http_reply_error(ctx, 400, "\"%s\" must be a string", key);
		return -1;
	}
	*ret = json_string_value(v);
	return 0;
}

/* "env": an object of string values, or absent. */
static int opt_env(struct http_ctx *ctx, json_t *body, json_t **ret)
{
	json_t *v = json_object_get(body, "env");
	struct err e;
	*ret = NULL;
	if (ops_check_env(v, &e) < 0) {
		reply_err(ctx, &e);
		return -1;
	}
	if (json_is_object(v))
		*ret = v;
	return 0;
}

/* A non-negative number of milliseconds, or absent (0). */
static int opt_ms(struct http_ctx *ctx, json_t *body, const char *key, uint64_t *ret)
{
	json_t *v = json_object_get(body, key);
	*ret = 0;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_number(v) || json_number_value(v) < 0 || json_number_value(v) > 1e15) {
		http_reply_error(ctx, 400, "\"%s\" must be a non-negative number of milliseconds",
				 key);
		return -1;
	}
	*ret = (uint64_t)json_number_value(v);
	return 0;
}

/* --- templates and sessions --------------------------------------------------------- */

void api_exec_templates(struct http_ctx *ctx)
{
	const struct template_registry *reg = session_templates();
	json_t *list = json_array();
	for (size_t i = 0; i < reg->n; i++)
		json_array_append_new(list, template_json(reg->items[i]));
	http_reply_json(ctx, 200, json_pack("{s:o}", "templates", list));
}

/* Adds the reference's names to a session object (session_json()): "sessionId" beside
 * "id", and "lastActivityAt", the last activity in milliseconds since the epoch. */
static json_t *with_reference_fields(json_t *j)
{
	json_t *id = json_object_get(j, "id");
	json_int_t idle = json_integer_value(json_object_get(j, "idleMs"));
	if (id)
		json_object_set(j, "sessionId", id);
	json_object_set_new(j, "lastActivityAt", json_integer((json_int_t)time_wall_ms() - idle));
	return j;
}

/* The other nodes' parts of a listing, after this node's. */
static void on_list_parts(struct http_ctx *ctx, json_t *parts, void *arg)
{
	json_t *list = arg;
	if (!ctx) {
		json_decref(list);
		return;
	}
	size_t i;
	json_t *part;
	json_t *missing = json_array();
	json_array_foreach (parts, i, part) {
		json_t *got = json_object_get(json_object_get(part, "body"), "sessions");
		if (json_integer_value(json_object_get(part, "status")) != 200 ||
		    !json_is_array(got)) {
			json_array_append(missing, json_object_get(part, "node"));
			continue;
		}
		json_array_extend(list, got);
	}
	json_t *reply =
		json_pack("{s:o, s:i}", "sessions", list, "count", (int)json_array_size(list));
	/* Nodes that did not answer in time: their sessions are not in this listing. */
	if (json_array_size(missing))
		json_object_set_new(reply, "nodesMissing", missing);
	else
		json_decref(missing);
	http_reply_json(ctx, 200, reply);
}

void api_exec_list(struct http_ctx *ctx)
{
	struct ops_target t = request_target(ctx, NULL, NULL);
	json_t *list = ops_list_sessions(&t);
	size_t n = json_array_size(list);
	for (size_t i = 0; i < n; i++) {
		json_t *s = with_reference_fields(json_array_get(list, i));
		if (cluster_enabled())
			json_object_set_new(s, "node", json_string(cluster_node_name()));
	}
	if (cluster_enabled() && !auth_from_peer(ctx)) {
		const struct auth_identity *id = auth_identity(ctx);
		api_cluster_fanout(ctx, api_owner(ctx), id ? id->scopes : 0, on_list_parts, list);
		return;
	}
	http_reply_json(ctx, 200, json_pack("{s:o, s:i}", "sessions", list, "count", (int)n));
}

/* "idleTimeout" (or its older name "ttl"): whole seconds up to a week; 0 when absent. */
static int opt_idle(struct http_ctx *ctx, json_t *body, unsigned *ret)
{
	json_t *idle = json_object_get(body, "idleTimeout");
	if (!idle)
		idle = json_object_get(body, "ttl");
	*ret = 0;
	if (!idle || json_is_null(idle))
		return 0;
	if (!json_is_integer(idle) || json_integer_value(idle) <= 0 ||
	    json_integer_value(idle) > 7 * 24 * 3600) {
		http_reply_error(ctx, 400,
				 "\"idleTimeout\" must be a whole number of seconds between 1 and "
				 "604800");
		return -1;
	}
	*ret = (unsigned)json_integer_value(idle);
	return 0;
}

/* "onTimeout": "destroy" (the default) or "pause" (docs/lifecycle.md). */
static int opt_on_timeout(struct http_ctx *ctx, json_t *body, enum session_on_timeout *ret)
{
	json_t *v = json_object_get(body, "onTimeout");
	*ret = SESSION_ON_TIMEOUT_DESTROY;
	if (!v || json_is_null(v))
		return 0;
	const char *s = json_string_value(v);
	if (s && strcmp(s, "pause") == 0)
		*ret = SESSION_ON_TIMEOUT_PAUSE;
	else if (!s || strcmp(s, "destroy") != 0) {
		http_reply_error(ctx, 400, "\"onTimeout\" must be \"destroy\" or \"pause\"");
		return -1;
	}
	return 0;
}

static const struct {
	const char *key;
	size_t off;
	bool u32;
} resource_fields[] = {
	{ "memoryBytes", offsetof(struct session_resources, memory_bytes), false },
	{ "cpuQuotaUs", offsetof(struct session_resources, cpu_quota_us), false },
	{ "diskBytes", offsetof(struct session_resources, workspace_bytes), false },
	{ "pidsMax", offsetof(struct session_resources, pids_max), true },
};

/* Sets the field of `res` that resources key `k` names; replies 400 when it cannot. */
static int set_resource(struct http_ctx *ctx, struct session_resources *res, const char *k,
			json_t *v)
{
	size_t i = 0;
	while (i < ARRAY_SIZE(resource_fields) && strcmp(resource_fields[i].key, k) != 0)
		i++;
	if (i == ARRAY_SIZE(resource_fields)) {
		http_reply_error(
			ctx, 400,
			"unknown resource \"%s\" (memoryBytes, cpuQuotaUs, diskBytes, pidsMax)", k);
		return -1;
	}
	if (!json_is_integer(v) || json_integer_value(v) <= 0 ||
	    (resource_fields[i].u32 && json_integer_value(v) > UINT32_MAX)) {
		http_reply_error(ctx, 400, "\"resources.%s\" must be a positive whole number", k);
		return -1;
	}
	char *field = (char *)res + resource_fields[i].off;
	if (resource_fields[i].u32)
		*(uint32_t *)field = (uint32_t)json_integer_value(v);
	else
		*(uint64_t *)field = (uint64_t)json_integer_value(v);
	return 0;
}

/* "resources": the session's own limits; *ret_has tells whether any were asked for. Whether
 * they fit the server's is for ops to judge. */
static int opt_resources(struct http_ctx *ctx, json_t *body, struct session_resources *res,
			 bool *ret_has)
{
	json_t *jres = json_object_get(body, "resources");
	*ret_has = false;
	if (!jres || json_is_null(jres))
		return 0;
	if (!json_is_object(jres)) {
		http_reply_error(ctx, 400, "\"resources\" must be an object");
		return -1;
	}
	const char *k;
	json_t *v;
	json_object_foreach (jres, k, v) {
		if (set_resource(ctx, res, k, v) < 0)
			return -1;
	}
	*ret_has = true;
	return 0;
}

/* "storage": "tmpfs" or "disk" (docs/storage.md); absent or null: the server's. */
static int opt_storage(struct http_ctx *ctx, json_t *body, struct session_resources *res,
		       bool *has_res)
{
	json_t *v = json_object_get(body, "storage");
	if (!v || json_is_null(v))
		return 0;
	const char *s = json_string_value(v);
	if (s && strcmp(s, "tmpfs") == 0)
		res->storage = SESSION_STORAGE_TMPFS;
	else if (s && strcmp(s, "disk") == 0)
		res->storage = SESSION_STORAGE_DISK;
	else {
		http_reply_error(ctx, 400, "\"storage\" must be \"tmpfs\" or \"disk\"");
		return -1;
	}
	*has_res = true;
	return 0;
}

static void on_created(struct ops_call *c, const struct ops_result *r, const struct err *err,
		       void *arg)
{
	struct http_ctx *ctx = arg;
	if (err) {
		reply_err(ctx, err);
		return;
	}
	json_t *s = with_reference_fields(session_json(r->session));
	if (cluster_enabled())
		json_object_set_new(s, "node", json_string(cluster_node_name()));
	http_reply_json(ctx, 201, s);
}

void api_exec_create(struct http_ctx *ctx)
{
	json_auto_t *body = NULL;
	if (http_body_json(ctx, &body) < 0)
		return;
	const char *id, *tmpl, *snapshot;
	json_t *env;
	unsigned idle_s;
	enum session_on_timeout on_timeout;
	struct session_resources res = { 0 };
	bool has_res;
	if (opt_string(ctx, body, "id", &id) < 0 || opt_string(ctx, body, "template", &tmpl) < 0 ||
	    opt_string(ctx, body, "snapshot", &snapshot) < 0 || opt_env(ctx, body, &env) < 0 ||
	    opt_idle(ctx, body, &idle_s) < 0 || opt_on_timeout(ctx, body, &on_timeout) < 0 ||
	    opt_resources(ctx, body, &res, &has_res) < 0 ||
	    opt_storage(ctx, body, &res, &has_res) < 0)
		return;
	/* In a cluster, the node placement chooses makes it. */
	if (cluster_enabled()) {
		const struct auth_identity *who = auth_identity(ctx);
		json_t *vols = json_object_get(body, "volumes");
		bool pinned = snapshot || (vols && !json_is_null(vols));
		int c = api_cluster_route_create(ctx, api_owner(ctx), who ? who->scopes : 0, id,
						 tmpl, json_object_get(body, "nodeSelector"),
						 pinned, false);
		if (c)
			return;
	}
	/* Always the caller's own session, admin or not. */
	struct ops_target t = { .owner = api_owner(ctx), .session_id = id, .template_name = tmpl };
	struct ops_session_opts o = { .idle_timeout_s = idle_s,
				      .on_timeout = on_timeout,
				      .env = env,
				      .resources = has_res ? &res : NULL,
				      .egress = json_object_get(body, "egress"),
				      .volumes = json_object_get(body, "volumes"),
				      .snapshot = snapshot };
	struct err e;
	if (!ops_create_session(&t, &o, on_created, ctx, &e))
		reply_err(ctx, &e);
}

static void on_destroyed(void *arg)
{
	struct http_ctx *ctx = arg;
	http_reply_json(ctx, 200,
			json_pack("{s:b, s:s, s:b}", "success", 1, "id", http_param(ctx, 0),
				  "destroyed", 1));
}

void api_exec_delete(struct http_ctx *ctx)
{
	const char *id = path_session_id(ctx);
	if (!id)
		return;
	struct ops_target t = request_target(ctx, id, NULL);
	struct err e;
	/* Answered once the session is gone: a client that deletes a session, then takes its
	 * volumes for another, finds them free. */
	if (ops_destroy_session(&t, "deleted by the client", on_destroyed, ctx, &e) < 0) {
		/* No such session (for this key) is the reference's 200 {destroyed: false}: its
		 * SDK's destroy() returns that boolean and throws on any other status. */
		if (e.errnum == ENOENT) {
			http_reply_json(ctx, 200,
					json_pack("{s:b, s:s, s:b, s:s}", "success", 0, "id", id,
						  "destroyed", 0, "message", e.msg));
			return;
		}
		int status = http_status_for_errno(e.errnum);
		_cleanup_free_ char *msg =
			utf8_sanitize((const uint8_t *)e.msg, strlen(e.msg), NULL);
		http_reply_json(ctx, status, json_pack("{s:s, s:b}", "error", msg, "destroyed", 0));
	}
}

/* --- execute ------------------------------------------------------------------------ */

enum exec_mode { EXEC_BUFFERED, EXEC_NDJSON, EXEC_SSE };

struct exec_req {
	struct http_ctx *ctx;
	struct ops_exec *x;
	enum exec_mode mode;
	bool started; /* the command runs: errors are its own, streams have begun */
	/* buffered output */
	json_t *output;
	size_t output_bytes;
	bool truncated;
};

static void exec_req_free(struct exec_req *q)
{
	json_decref(q->output);
	free(q);
}

static void stream_line(struct exec_req *q, const char *event, json_t *obj)
{
	_cleanup_free_ char *text = json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(15));
	json_decref(obj);
	if (q->mode == EXEC_SSE) {
		_cleanup_free_ char *frame = xasprintf("event: %s\ndata: %s\n\n", event, text);
		http_stream_write(q->ctx, frame, strlen(frame));
	} else {
		size_t n = strlen(text);
		text[n] = '\n'; /* json_dumps allocates n + 1: reuse the terminator */
		http_stream_write(q->ctx, text, n + 1);
	}
}

static void exec_on_start(struct ops_exec *x, void *arg)
{
	struct exec_req *q = arg;
	q->started = true;
	if (q->mode == EXEC_BUFFERED)
		return;
	const char *id = ops_exec_id(x);
	http_add_header(q->ctx, "X-Exec-Id", id);
	http_stream_start(q->ctx, 200,
			  q->mode == EXEC_SSE ? "text/event-stream" : "application/x-ndjson");
	stream_line(q, "start",
		    json_pack("{s:s, s:s, s:s}", "type", "start", "execId", id, "sessionId",
			      ops_exec_session(x)->id));
}

static json_t *output_chunk(enum ops_stream stream, const char *text, size_t len)
{
	return json_pack("{s:s, s:s%, s:I}", "stream", stream == OPS_STDERR ? "stderr" : "stdout",
			 "data", text, len, "ts", (json_int_t)time_wall_ms());
}

/* How much of this output a buffered reply keeps. Past the cap the output is dropped (the
 * command runs on); the part that still fits is kept, cut on a character boundary. */
static size_t buffered_room(struct exec_req *q, const char *text, size_t len)
{
	if (q->truncated)
		return 0;
	if (q->output_bytes + len <= api_cfg->max_output_bytes)
		return len;
	q->truncated = true;
	size_t room = api_cfg->max_output_bytes - q->output_bytes;
	return room - utf8_incomplete_tail((const uint8_t *)text, room);
}

/* The client read enough of the stream (or left, reading nothing more: the command then
 * finishes its cancellation). */
static void on_stream_drained(struct http_ctx *ctx, void *arg)
{
	struct exec_req *q = arg;
	ops_exec_resume(q->x);
}

/* Holds the command's output back while the client has much of it still to read, so that
 * a slow reader costs the daemon a bounded buffer, not the command's whole output. */
static void pace_stream(struct exec_req *q, struct ops_exec *x)
{
	if (!q->ctx->conn || http_stream_pending(q->ctx) < STREAM_HIGH_WATER)
		return;
	ops_exec_pause(x);
	http_stream_on_drain(q->ctx, STREAM_HIGH_WATER / 2, on_stream_drained, q);
}

static void exec_on_output(struct ops_exec *x, enum ops_stream stream, const char *text, size_t len,
			   void *arg)
{
	struct exec_req *q = arg;
	if (q->mode == EXEC_BUFFERED) {
		size_t keep = buffered_room(q, text, len);
		q->output_bytes += keep;
		if (keep)
			json_array_append_new(q->output, output_chunk(stream, text, keep));
		return;
	}
	json_t *chunk = output_chunk(stream, text, len);
	json_object_set_new(chunk, "type", json_string("stream"));
	/* The reference tags each chunk with the id of its command. */
	json_object_set_new(chunk, "id", json_string(ops_exec_id(x)));
	stream_line(q, "stream", chunk);
	pace_stream(q, x);
}

static json_t *exec_result_json(const struct ops_exec_result *r)
{
	/* duration: milliseconds, to the microsecond */
	json_t *j = json_pack("{s:o, s:f, s:s}", "exitCode",
			      r->has_exit_code ? json_integer(r->exit_code) : json_null(),
			      "duration", r->duration_ms, "execId", r->exec_id);
	if (r->signal)
		json_object_set_new(j, "signal", json_string(r->signal));
	if (r->timed_out)
		json_object_set_new(j, "timedOut", json_true());
	if (r->cancelled)
		json_object_set_new(j, "cancelled", json_true());
	if (r->oom_killed) {
		json_object_set_new(j, "oomKilled", json_true());
		json_object_set_new(j, "error",
				    json_string("a process was killed because the sandbox "
						"exceeded its memory limit"));
	}
	return j;
}

/* The status for a command that failed as a whole. The session exists, so a command or
 * working directory that is missing or not executable is a bad request, not a 404. */
static int exec_error_status(const struct err *err)
{
	switch (err->errnum) {
	case ENOENT:
	case ENOEXEC:
	case ETXTBSY:
		return 400;
	default:
		return http_status_for_errno(err->errnum);
	}
}

/* A command that never started: its session failed, or its client left while it waited
 * for it (the only cancel that can reach a command without an id yet). */
static void reply_not_started(struct exec_req *q, const struct err *err)
{
	if (err->errnum == ECANCELED && q->ctx->gone)
		http_reply_error(q->ctx, 499, "client closed the request");
	else
		reply_err(q->ctx, err);
}

static void reply_buffered(struct exec_req *q, const struct ops_exec_result *r,
			   const struct err *err)
{
	if (err) {
		http_reply_error(q->ctx, exec_error_status(err), "%s", err->msg);
		return;
	}
	json_t *j = exec_result_json(r);
	json_object_set(j, "output", q->output);
	if (q->truncated) {
		json_object_set_new(j, "truncated", json_true());
		json_object_set_new(j, "outputLimit",
				    json_integer((json_int_t)api_cfg->max_output_bytes));
	}
	http_reply_json(q->ctx, 200, j);
}

static void reply_stream_end(struct exec_req *q, const char *exec_id,
			     const struct ops_exec_result *r, const struct err *err)
{
	if (err) {
		stream_line(q, "error",
			    json_pack("{s:s, s:s, s:s, s:i}", "type", "error", "error", err->msg,
				      "execId", exec_id, "status",
				      http_status_for_errno(err->errnum)));
	} else {
		json_t *j = exec_result_json(r);
		json_object_set_new(j, "type", json_string("result"));
		stream_line(q, "result", j);
	}
	http_stream_end(q->ctx);
}

static void exec_on_done(struct ops_exec *x, const struct ops_exec_result *r, const struct err *err,
			 void *arg)
{
	struct exec_req *q = arg;
	if (!q->started)
		reply_not_started(q, err);
	else if (q->mode == EXEC_BUFFERED)
		reply_buffered(q, r, err);
	else
		reply_stream_end(q, ops_exec_id(x), r, err);
	exec_req_free(q);
}

static const struct ops_exec_cbs exec_cbs = { .on_start = exec_on_start,
					      .on_output = exec_on_output,
					      .on_done = exec_on_done };

static void exec_on_client_gone(struct http_ctx *ctx, void *arg)
{
	struct exec_req *q = arg;
	if (q->started)
		log_info("api", "client of %s went away: cancelling the command",
			 ops_exec_id(q->x));
	ops_exec_cancel(q->x);
}

static enum exec_mode exec_mode(struct http_ctx *ctx)
{
	const char *format = http_query(ctx, "format");
	if (format && strcmp(format, "ndjson") == 0)
		return EXEC_NDJSON;
	if (format && strcmp(format, "sse") == 0)
		return EXEC_SSE;
	if (http_accepts(ctx, "application/x-ndjson"))
		return EXEC_NDJSON;
	if (http_accepts(ctx, "text/event-stream"))
		return EXEC_SSE;
	return EXEC_BUFFERED;
}

/* The request's fields, each of the right type; ops_execute judges the rest (a command is
 * required, the timeout's cap, args) with the messages the API has always given. */
static int parse_exec(struct http_ctx *ctx, json_t *body, struct ops_exec_req *req,
		      const char **tmpl)
{
	const char *stdin_text;
	if (opt_string(ctx, body, "command", &req->command) < 0 ||
	    opt_string(ctx, body, "template", tmpl) < 0 ||
	    opt_string(ctx, body, "cwd", &req->cwd) < 0 || opt_env(ctx, body, &req->env) < 0 ||
	    opt_string(ctx, body, "stdin", &stdin_text) < 0 ||
	    opt_string(ctx, body, "user", &req->user) < 0 ||
	    opt_ms(ctx, body, "timeout", &req->timeout_ms) < 0)
		return -1;
	/* An absent timeout takes the server's default; an explicit 0 means none. */
	json_t *tv = json_object_get(body, "timeout");
	req->has_timeout = tv && !json_is_null(tv);
	req->args = json_object_get(body, "args");
	req->has_stdin = stdin_text != NULL;
	req->stdin_data = stdin_text;
	req->stdin_len = json_string_length(json_object_get(body, "stdin"));
	return 0;
}

void api_exec_execute(struct http_ctx *ctx)
{
	const char *id;
	json_auto_t *body = NULL;
	if (id_and_body(ctx, &id, &body) < 0)
		return;
	json_t *bg = json_object_get(body, "background");
	if (bg && !json_is_null(bg) && !json_is_boolean(bg)) {
		http_reply_error(ctx, 400, "\"background\" must be true or false");
		return;
	}
	if (json_is_true(bg)) {
		api_exec_background(ctx, id, body);
		return;
	}
	struct ops_exec_req req = { 0 };
	const char *tmpl;
	if (parse_exec(ctx, body, &req, &tmpl) < 0)
		return;
	struct exec_req *q = xcalloc(1, sizeof(*q));
	q->ctx = ctx;
	q->mode = exec_mode(ctx);
	q->output = json_array();
	struct ops_target t = request_target(ctx, id, tmpl);
	struct err e;
	/* ops keeps what it needs of req: body may go once this returns. */
	q->x = ops_execute(&t, &req, &exec_cbs, q, &e);
	if (!q->x) {
		reply_err(ctx, &e);
		exec_req_free(q);
		return;
	}
	ctx->on_gone = exec_on_client_gone;
	ctx->on_gone_arg = q;
}

void api_exec_cancel(struct http_ctx *ctx)
{
	const char *id;
	json_auto_t *body = NULL;
	if (id_and_body(ctx, &id, &body) < 0)
		return;
	const char *exec_id;
	if (opt_string(ctx, body, "execId", &exec_id) < 0)
		return;
	struct ops_target t = request_target(ctx, id, NULL);
	struct err e;
	if (ops_cancel_exec(&t, exec_id, &e) < 0) {
		reply_err(ctx, &e);
		return;
	}
	http_reply_json(ctx, 202, json_pack("{s:b, s:s}", "cancelled", 1, "execId", exec_id));
}

/* --- files -------------------------------------------------------------------------- */

/* A file operation's client that leaves is not noticed (no on_gone): the operation
 * completes, a write included, and only its reply is dropped. */

static void on_written(struct ops_call *c, const struct ops_result *r, const struct err *err,
		       void *arg)
{
	struct http_ctx *ctx = arg;
	if (err) {
		reply_err(ctx, err);
		return;
	}
	http_reply_json(ctx, 200,
			json_pack("{s:b, s:s, s:I, s:I}", "success", 1, "path", r->path, "size",
				  (json_int_t)r->size, "bytesWritten", (json_int_t)r->size));
}

/* The bytes "content" stands for in its "encoding" (the caller frees *ret). */
static int write_content(struct http_ctx *ctx, json_t *content, const char *encoding, uint8_t **ret,
			 size_t *ret_len)
{
	const char *text = json_string_value(content);
	size_t tlen = json_string_length(content);
	if (encoding && strcmp(encoding, "base64") == 0) {
		if (base64_decode(text, tlen, ret, ret_len) < 0) {
			http_reply_error(ctx, 400, "\"content\" is not valid base64");
			return -1;
		}
		return 0;
	}
	if (encoding && strcmp(encoding, "utf8") != 0 && strcmp(encoding, "utf-8") != 0) {
		http_reply_error(ctx, 400, "\"encoding\" must be \"utf8\" or \"base64\"");
		return -1;
	}
	*ret = xmalloc(tlen + 1);
	memcpy(*ret, text, tlen);
	*ret_len = tlen;
	return 0;
}

void api_exec_write(struct http_ctx *ctx)
{
	const char *id;
	json_auto_t *body = NULL;
	if (id_and_body(ctx, &id, &body) < 0)
		return;
	const char *path, *tmpl, *encoding;
	if (opt_string(ctx, body, "path", &path) < 0 ||
	    opt_string(ctx, body, "template", &tmpl) < 0 ||
	    opt_string(ctx, body, "encoding", &encoding) < 0)
		return;
	json_t *content = json_object_get(body, "content");
	if (!path || !*path) {
		http_reply_error(ctx, 400, "\"path\" is required");
		return;
	}
	if (!json_is_string(content)) {
		http_reply_error(ctx, 400, "\"content\" is required and must be a string");
		return;
	}
	json_t *mode = json_object_get(body, "mode");
	if (mode && !(json_is_integer(mode) && json_integer_value(mode) >= 0 &&
		      json_integer_value(mode) <= 07777)) {
		http_reply_error(ctx, 400, "\"mode\" must be a permission number (0 to 4095)");
		return;
	}
	_cleanup_free_ uint8_t *data = NULL;
	size_t len;
	if (write_content(ctx, content, encoding, &data, &len) < 0)
		return;
	struct ops_target t = request_target(ctx, id, tmpl);
	struct err e;
	/* ops takes the data, whatever happens. */
	if (!ops_write_file(&t, path, TAKE_PTR(data), len,
			    mode ? (int)json_integer_value(mode) : -1, on_written, ctx, &e))
		reply_err(ctx, &e);
}

/* A path from the query string: JSON (to the agent) can carry only UTF-8 text. Replies 400
 * and returns false otherwise. */
static bool query_path_valid(struct http_ctx *ctx, const char *path)
{
	if (utf8_valid((const uint8_t *)path, strlen(path)))
		return true;
	http_reply_error(ctx, 400, "\"path\" must be UTF-8 text");
	return false;
}

/* A read streams from the agent to the client: the agent sends at most a window ahead of
 * what the client has taken (ops_call_consumed is called as its socket drains), so a reader
 * that reads nothing holds the daemon to about a window and a high-water mark. The JSON
 * reply is written as it goes: its head once the agent has said how big the file is and
 * whether it is text, then the content escaped or in base64, then its tail. A file of at
 * most a window is answered whole instead, so that any failure of its read still gets its
 * own status; the window is what a read may hold anyway. */
#define READ_WHOLE_MAX (1u << 20) /* GUEST_WINDOW_INITIAL */

struct read_req {
	struct http_ctx *ctx;
	struct ops_call *call;
	bool raw; /* reply with the bytes themselves */
	bool want_base64;
	bool base64;         /* the content goes out in base64 */
	bool started;        /* the reply's head went out */
	uint64_t size;       /* as announced */
	uint8_t b64_tail[2]; /* bytes waiting for a whole group of three */
	size_t b64_ntail;
	size_t held; /* bytes delivered and not yet handed back */
	char *path;
	struct evbuffer *whole; /* a small file, answered once it is all there */
};

static void read_req_free(struct read_req *rr)
{
	if (rr->whole)
		evbuffer_free(rr->whole);
	free(rr->path);
	free(rr);
}

static void read_release(struct read_req *rr)
{
	if (rr->held && rr->call)
		ops_call_consumed(rr->call, rr->held);
	rr->held = 0;
}

static void read_on_drained(struct http_ctx *ctx, void *arg)
{
	read_release(arg);
}

/* Hands the bytes back to the agent now, or once the client has taken most of what waits
 * for it. */
static void read_pace(struct read_req *rr)
{
	if (!rr->ctx->conn || http_stream_pending(rr->ctx) < STREAM_HIGH_WATER) {
		read_release(rr);
		return;
	}
	http_stream_on_drain(rr->ctx, STREAM_HIGH_WATER / 2, read_on_drained, rr);
}

static void read_on_head(struct ops_call *c, uint64_t size, bool text, void *arg)
{
	struct read_req *rr = arg;
	rr->size = size;
	rr->base64 = rr->want_base64 || !text;
	if (size <= READ_WHOLE_MAX) {
		rr->whole = evbuffer_new();
		return;
	}
	rr->started = true;
	http_stream_guard(rr->ctx);
	if (rr->raw) {
		http_stream_start_sized(rr->ctx, 200, "application/octet-stream", size);
		return;
	}
	http_stream_start(rr->ctx, 200, "application/json");
	json_auto_t *jpath = json_string(rr->path);
	_cleanup_free_ char *path = json_dumps(jpath, JSON_ENCODE_ANY);
	_cleanup_free_ char *head = xasprintf("{\"path\":%s,\"content\":\"", path);
	http_stream_write(rr->ctx, head, strlen(head));
}

/* A character's two-character escape in a JSON string, or NULL: another control character
 * takes six (\u00XX), anything else itself. */
static const char *short_escape(uint8_t ch)
{
	switch (ch) {
	case '"':
		return "\\\"";
	case '\\':
		return "\\\\";
	case '\b':
		return "\\b";
	case '\f':
		return "\\f";
	case '\n':
		return "\\n";
	case '\r':
		return "\\r";
	case '\t':
		return "\\t";
	}
	return NULL;
}

/* Writes bytes as the inside of a JSON string, as jansson would: they are valid UTF-8
 * without NUL (ops checked), so only quotes, backslashes and control characters change. */
static size_t escape_into(char *out, const uint8_t *p, size_t n)
{
	size_t o = 0;
	static const char hex[] = "0123456789abcdef";
	for (size_t i = 0; i < n; i++) {
		uint8_t ch = p[i];
		const char *esc = short_escape(ch);
		if (esc) {
			out[o++] = esc[0];
			out[o++] = esc[1];
		} else if (ch < 0x20) {
			memcpy(out + o, "\\u00", 4);
			out[o + 4] = hex[ch >> 4];
			out[o + 5] = hex[ch & 15];
			o += 6;
		} else {
			out[o++] = (char)ch;
		}
	}
	return o;
}

/* How long escape_into() makes n bytes. */
static size_t escaped_len(const uint8_t *p, size_t n)
{
	size_t o = 0;
	for (size_t i = 0; i < n; i++)
		o += short_escape(p[i]) ? 2 : p[i] < 0x20 ? 6 : 1;
	return o;
}

static void write_escaped(struct http_ctx *ctx, const uint8_t *p, size_t n)
{
	_cleanup_free_ char *out = xmalloc(n * 6 + 1);
	size_t o = escape_into(out, p, n);
	http_stream_write(ctx, out, o);
}

/* Writes bytes in base64, a group of three at a time; the last one or two wait. */
static void write_base64(struct read_req *rr, const uint8_t *p, size_t n)
{
	uint8_t first[3];
	size_t k = 0;
	while (rr->b64_ntail && k < n && rr->b64_ntail + k < 3)
		k++;
	if (rr->b64_ntail) {
		if (rr->b64_ntail + k < 3) {
			memcpy(rr->b64_tail + rr->b64_ntail, p, k);
			rr->b64_ntail += k;
			return;
		}
		memcpy(first, rr->b64_tail, rr->b64_ntail);
		memcpy(first + rr->b64_ntail, p, k);
		size_t m;
		_cleanup_free_ char *enc = base64_encode(first, 3, &m);
		http_stream_write(rr->ctx, enc, m);
		rr->b64_ntail = 0;
		p += k, n -= k;
	}
	size_t whole = n - n % 3;
	if (whole) {
		size_t m;
		_cleanup_free_ char *enc = base64_encode(p, whole, &m);
		http_stream_write(rr->ctx, enc, m);
	}
	memcpy(rr->b64_tail, p + whole, n - whole);
	rr->b64_ntail = n - whole;
}

static void read_on_data(struct ops_call *c, const uint8_t *data, size_t len, void *arg)
{
	struct read_req *rr = arg;
	if (rr->whole) {
		evbuffer_add(rr->whole, data, len);
		ops_call_consumed(c, len);
		return;
	}
	rr->held += len;
	if (rr->raw)
		http_stream_write(rr->ctx, data, len);
	else if (rr->base64)
		write_base64(rr, data, len);
	else
		write_escaped(rr->ctx, data, len);
	read_pace(rr);
}

/* A small file's reply, as a buffered read has always had it, built in the buffer that goes
 * out: a megabyte crosses the daemon's memory once as bytes and once encoded. */
static void reply_whole(struct read_req *rr, const struct ops_result *r)
{
	if (rr->raw) {
		http_reply_buffer(rr->ctx, 200, "application/octet-stream", rr->whole);
		return;
	}
	size_t len = evbuffer_get_length(rr->whole);
	const uint8_t *data = len ? evbuffer_pullup(rr->whole, -1) : (const uint8_t *)"";
	/* The reply ops_read_json() describes, written directly: jansson would check and
	 * escape the contents a byte at a time, twice. */
	bool b64 = rr->base64 || !utf8_valid(data, len) || memchr(data, 0, len);
	json_auto_t *jpath = json_string(rr->path);
	_cleanup_free_ char *path = json_dumps(jpath, JSON_ENCODE_ANY);
	struct evbuffer *out = evbuffer_new();
	evbuffer_add_printf(out, "{\"path\":%s,\"content\":\"", path);
	/* Exactly what the content takes: the reply's buffer is held until the client has it. */
	size_t cap = b64 ? BASE64_LEN(len) : escaped_len(data, len);
	struct evbuffer_iovec v;
	if (cap && evbuffer_reserve_space(out, (ev_ssize_t)cap, &v, 1) != 1) {
		evbuffer_free(out);
		http_reply_error(rr->ctx, 500, "out of memory for the reply of `%s`", rr->path);
		return;
	}
	if (cap) {
		v.iov_len = b64 ? base64_encode_into(v.iov_base, data, len)
				: escape_into(v.iov_base, data, len);
		evbuffer_commit_space(out, &v, 1);
	}
	evbuffer_add_printf(out, "\",\"encoding\":\"%s\",\"size\":%zu}", b64 ? "base64" : "utf8",
			    len);
	/* The bytes are not needed any more: their memory goes before the reply's is sent. */
	evbuffer_drain(rr->whole, len);
	http_reply_buffer(rr->ctx, 200, "application/json", out);
	evbuffer_free(out);
}

static void read_on_done(struct ops_call *c, const struct ops_result *r, const struct err *err,
			 void *arg)
{
	struct read_req *rr = arg;
	struct http_ctx *ctx = rr->ctx;
	rr->call = NULL;
	ctx->on_gone = NULL;
	http_stream_on_drain(ctx, 0, NULL, NULL);
	if (err && !rr->started) {
		reply_err(ctx, err);
	} else if (rr->whole) {
		reply_whole(rr, r);
	} else if (err) {
		log_info("api", "read of `%s` failed after its reply began: %s", rr->path,
			 err->msg);
		http_stream_abort(ctx);
	} else if (rr->raw) {
		http_stream_end(ctx);
	} else {
		if (rr->b64_ntail) {
			size_t m;
			_cleanup_free_ char *enc = base64_encode(rr->b64_tail, rr->b64_ntail, &m);
			http_stream_write(ctx, enc, m);
		}
		_cleanup_free_ char *tail =
			xasprintf("\",\"encoding\":\"%s\",\"size\":%llu}",
				  rr->base64 ? "base64" : "utf8", (unsigned long long)rr->size);
		http_stream_write(ctx, tail, strlen(tail));
		http_stream_end(ctx);
	}
	read_req_free(rr);
}

static const struct ops_read_cbs read_cbs = { .on_head = read_on_head, .on_data = read_on_data };

/* A reader that leaves stops the read: nothing more is sent for it. */
static void read_on_client_gone(struct http_ctx *ctx, void *arg)
{
	struct read_req *rr = arg;
	ops_call_detach(rr->call);
	http_stream_on_drain(ctx, 0, NULL, NULL);
	read_req_free(rr);
	http_stream_abort(ctx); /* nothing is sent: the ctx is done with */
}

/* The session id of the path and the required "path" query parameter, checked. Replies 400
 * and returns -1 when either is missing or invalid. */
static int id_and_query_path(struct http_ctx *ctx, const char **id, const char **path)
{
	*id = path_session_id(ctx);
	if (!*id)
		return -1;
	*path = http_query(ctx, "path");
	if (!*path || !**path) {
		http_reply_error(ctx, 400, "The \"path\" query parameter is required");
		return -1;
	}
	return query_path_valid(ctx, *path) ? 0 : -1;
}

void api_exec_read(struct http_ctx *ctx)
{
	const char *id, *path;
	if (id_and_query_path(ctx, &id, &path) < 0)
		return;
	const char *encoding = http_query(ctx, "encoding");
	if (encoding && strcmp(encoding, "base64") && strcmp(encoding, "utf8")) {
		http_reply_error(ctx, 400, "\"encoding\" must be \"utf8\" or \"base64\"");
		return;
	}
	struct read_req *rr = xcalloc(1, sizeof(*rr));
	rr->ctx = ctx;
	rr->path = xstrdup(path);
	rr->want_base64 = encoding && strcmp(encoding, "base64") == 0;
	rr->raw = http_accepts(ctx, "application/octet-stream") && !encoding;
	struct ops_target t = request_target(ctx, id, NULL);
	struct err e;
	/* Only a JSON reply that may carry the text as it is needs to know whether it is. */
	rr->call = ops_read_stream(&t, path, !rr->raw && !rr->want_base64, &read_cbs, read_on_done,
				   rr, &e);
	if (!rr->call) {
		read_req_free(rr);
		reply_err(ctx, &e);
		return;
	}
	ctx->on_gone = read_on_client_gone;
	ctx->on_gone_arg = rr;
}

static void on_listed(struct ops_call *c, const struct ops_result *r, const struct err *err,
		      void *arg)
{
	struct http_ctx *ctx = arg;
	if (err) {
		reply_err(ctx, err);
		return;
	}
	json_t *files = r->entries ? json_incref(r->entries) : json_array();
	http_reply_json(ctx, 200,
			json_pack("{s:s, s:o, s:b}", "path", r->path, "files", files, "truncated",
				  r->truncated));
}

void api_exec_files(struct http_ctx *ctx)
{
	const char *id = path_session_id(ctx);
	if (!id)
		return;
	const char *path = http_query(ctx, "path");
	const char *rec = http_query(ctx, "recursive");
	if (path && !query_path_valid(ctx, path))
		return;
	bool recursive = rec && (strcmp(rec, "true") == 0 || strcmp(rec, "1") == 0);
	struct ops_target t = request_target(ctx, id, NULL);
	struct err e;
	if (!ops_list_files(&t, path, recursive, on_listed, ctx, &e))
		reply_err(ctx, &e);
}

/* --- metadata: stat, mkdir, remove, move -------------------------------------------- */

static void on_stat(struct ops_call *c, const struct ops_result *r, const struct err *err,
		    void *arg)
{
	struct http_ctx *ctx = arg;
	if (err) {
		reply_err(ctx, err);
		return;
	}
	json_t *st = ops_stat_json(r);
	if (!st) {
		http_reply_error(ctx, 502,
				 "the sandbox's agent answered a stat with something else");
		return;
	}
	http_reply_json(ctx, 200, st);
}

void api_exec_stat(struct http_ctx *ctx)
{
	const char *id, *path;
	if (id_and_query_path(ctx, &id, &path) < 0)
		return;
	struct ops_target t = request_target(ctx, id, NULL);
	struct err e;
	if (!ops_stat_path(&t, path, on_stat, ctx, &e))
		reply_err(ctx, &e);
}

static void on_changed(struct ops_call *c, const struct ops_result *r, const struct err *err,
		       void *arg)
{
	struct http_ctx *ctx = arg;
	if (err) {
		reply_err(ctx, err);
		return;
	}
	http_reply_json(ctx, 200, json_pack("{s:b, s:s}", "success", 1, "path", r->path));
}

/* A boolean of the body, or `def` when absent. Replies 400 and returns -1 when not one. */
static int opt_bool(struct http_ctx *ctx, json_t *body, const char *key, bool def, bool *ret)
{
	json_t *v = json_object_get(body, key);
	*ret = def;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_boolean(v)) {
		http_reply_error(ctx, 400, "\"%s\" must be true or false", key);
		return -1;
	}
	*ret = json_is_true(v);
	return 0;
}

/* The body's required "path" (and the session id). Replies and returns -1 when missing. */
static int path_and_body(struct http_ctx *ctx, const char *key, const char **id, json_t **body,
			 const char **path)
{
	if (id_and_body(ctx, id, body) < 0 || opt_string(ctx, *body, key, path) < 0)
		return -1;
	if (!*path || !**path) {
		http_reply_error(ctx, 400, "\"%s\" is required", key);
		return -1;
	}
	return 0;
}

void api_exec_mkdir(struct http_ctx *ctx)
{
	const char *id, *path, *tmpl;
	json_auto_t *body = NULL;
	bool parents;
	if (path_and_body(ctx, "path", &id, &body, &path) < 0 ||
	    opt_string(ctx, body, "template", &tmpl) < 0 ||
	    opt_bool(ctx, body, "parents", true, &parents) < 0)
		return;
	struct ops_target t = request_target(ctx, id, tmpl);
	struct err e;
	if (!ops_make_dir(&t, path, parents, on_changed, ctx, &e))
		reply_err(ctx, &e);
}

void api_exec_remove(struct http_ctx *ctx)
{
	const char *id, *path;
	json_auto_t *body = NULL;
	bool recursive;
	if (path_and_body(ctx, "path", &id, &body, &path) < 0 ||
	    opt_bool(ctx, body, "recursive", false, &recursive) < 0)
		return;
	struct ops_target t = request_target(ctx, id, NULL);
	struct err e;
	if (!ops_remove_path(&t, path, recursive, on_changed, ctx, &e))
		reply_err(ctx, &e);
}

static void on_moved(struct ops_call *c, const struct ops_result *r, const struct err *err,
		     void *arg)
{
	struct http_ctx *ctx = arg;
	if (err) {
		reply_err(ctx, err);
		return;
	}
	json_t *to = json_object_get(r->info, "path");
	http_reply_json(ctx, 200,
			json_pack("{s:b, s:s, s:s}", "success", 1, "from", r->path, "to",
				  json_is_string(to) ? json_string_value(to) : ""));
}

void api_exec_move(struct http_ctx *ctx)
{
	const char *id, *from, *to;
	json_auto_t *body = NULL;
	bool overwrite;
	if (path_and_body(ctx, "from", &id, &body, &from) < 0 ||
	    opt_string(ctx, body, "to", &to) < 0 ||
	    opt_bool(ctx, body, "overwrite", true, &overwrite) < 0)
		return;
	if (!to || !*to) {
		http_reply_error(ctx, 400, "\"to\" is required");
		return;
	}
	struct ops_target t = request_target(ctx, id, NULL);
	struct err e;
	if (!ops_move_path(&t, from, to, overwrite, on_moved, ctx, &e))
		reply_err(ctx, &e);
}

/* --- shared with the other /exec adapters (process.c) ------------------------------- */

void api_reply_err(struct http_ctx *ctx, const struct err *err)
{
	reply_err(ctx, err);
}

struct ops_target api_request_target(struct http_ctx *ctx, const char *id, const char *tmpl)
{
	return request_target(ctx, id, tmpl);
}

int api_id_and_body(struct http_ctx *ctx, const char **ret_id, json_t **ret_body)
{
	return id_and_body(ctx, ret_id, ret_body);
}

const char *api_path_session_id(struct http_ctx *ctx)
{
	return path_session_id(ctx);
}

int api_opt_string(struct http_ctx *ctx, json_t *body, const char *key, const char **ret)
{
	return opt_string(ctx, body, key, ret);
}

int api_opt_bool(struct http_ctx *ctx, json_t *body, const char *key, bool def, bool *ret)
{
	return opt_bool(ctx, body, key, def, ret);
}

int api_parse_command(struct http_ctx *ctx, json_t *body, struct ops_exec_req *req,
		      const char **tmpl)
{
	return parse_exec(ctx, body, req, tmpl);
}

/* --- watch -------------------------------------------------------------------------- */

/* GET /exec/:id/watch?path=...&recursive=true[&timeoutMs=N][&events=create,write]: a stream
 * of NDJSON lines (SSE with Accept: text/event-stream), each an event, between a "ready" line
 * (the watch is in place) and an "end" line. Before "ready" a failure has its own status. A
 * slow client holds the agent back (its events wait in the agent, then overflow there); a
 * client that leaves ends the watch in the agent. */
struct watch_req {
	struct http_ctx *ctx;
	struct ops_watch *w;
	bool sse;
	bool started;
};

static void watch_line(struct watch_req *q, const char *event, json_t *obj)
{
	_cleanup_free_ char *text = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	if (q->sse) {
		_cleanup_free_ char *frame = xasprintf("event: %s\ndata: %s\n\n", event, text);
		http_stream_write(q->ctx, frame, strlen(frame));
	} else {
		size_t n = strlen(text);
		text[n] = '\n';
		http_stream_write(q->ctx, text, n + 1);
	}
}

static void watch_on_drained(struct http_ctx *ctx, void *arg)
{
	struct watch_req *q = arg;
	ops_watch_resume(q->w);
}

static void watch_rest_ready(struct ops_watch *w, uint64_t watches, void *arg)
{
	struct watch_req *q = arg;
	q->started = true;
	http_stream_start(q->ctx, 200, q->sse ? "text/event-stream" : "application/x-ndjson");
	watch_line(q, "ready",
		   json_pack("{s:s, s:I}", "type", "ready", "watches", (json_int_t)watches));
}

static void watch_rest_event(struct ops_watch *w, json_t *event, void *arg)
{
	struct watch_req *q = arg;
	const char *type = json_string_value(json_object_get(event, "type"));
	watch_line(q, type, json_incref(event));
	if (q->ctx->conn && http_stream_pending(q->ctx) >= STREAM_HIGH_WATER) {
		ops_watch_pause(w);
		http_stream_on_drain(q->ctx, STREAM_HIGH_WATER / 2, watch_on_drained, q);
	}
}

static void watch_rest_done(struct ops_watch *w, const struct ops_watch_result *r,
			    const struct err *err, void *arg)
{
	struct watch_req *q = arg;
	struct http_ctx *ctx = q->ctx;
	ctx->on_gone = NULL;
	http_stream_on_drain(ctx, 0, NULL, NULL);
	if (!q->started) {
		reply_err(ctx, err);
	} else if (err) {
		watch_line(q, "error",
			   json_pack("{s:s, s:s, s:i}", "type", "error", "error", err->msg,
				     "status", http_status_for_errno(err->errnum)));
		http_stream_end(ctx);
	} else {
		watch_line(q, "end",
			   json_pack("{s:s, s:I, s:I, s:b, s:b}", "type", "end", "events",
				     (json_int_t)r->events, "overflows", (json_int_t)r->overflows,
				     "timedOut", r->timed_out, "gone", r->gone));
		http_stream_end(ctx);
	}
	free(q);
}

static const struct ops_watch_cbs watch_rest_cbs = { .on_ready = watch_rest_ready,
						     .on_event = watch_rest_event,
						     .on_done = watch_rest_done };

/* The client left: the watch ends in the agent, nothing more is sent. */
static void watch_on_client_gone(struct http_ctx *ctx, void *arg)
{
	struct watch_req *q = arg;
	ops_watch_detach(q->w);
	http_stream_on_drain(ctx, 0, NULL, NULL);
	free(q);
	/* Nothing is sent, whether or not the stream began: the ctx is done with (a watch not
	 * yet in place would otherwise hold it for ever). */
	http_stream_abort(ctx);
}

/* "events=create,write": the kinds as a JSON array (NULL when absent). */
static json_t *watch_query_events(const char *s)
{
	if (!s)
		return NULL;
	json_t *a = json_array();
	const char *p = s;
	for (;;) {
		const char *comma = strchr(p, ',');
		size_t n = comma ? (size_t)(comma - p) : strlen(p);
		json_array_append_new(a, json_stringn(p, n));
		if (!comma)
			break;
		p = comma + 1;
	}
	return a;
}

void api_exec_watch(struct http_ctx *ctx)
{
	const char *id, *path;
	if (id_and_query_path(ctx, &id, &path) < 0)
		return;
	const char *rec = http_query(ctx, "recursive");
	const char *tmo = http_query(ctx, "timeoutMs");
	struct ops_watch_req req = {
		.path = path,
		.recursive = rec && (strcmp(rec, "true") == 0 || strcmp(rec, "1") == 0),
	};
	if (tmo) {
		char *end;
		errno = 0;
		unsigned long long v = strtoull(tmo, &end, 10);
		if (!*tmo || *end || errno || *tmo == '-') {
			http_reply_error(
				ctx, 400,
				"\"timeoutMs\" must be a non-negative number of milliseconds");
			return;
		}
		req.timeout_ms = v;
	}
	const char *events = http_query(ctx, "events");
	if (events && !utf8_valid((const uint8_t *)events, strlen(events))) {
		http_reply_error(ctx, 400, "\"events\" must be UTF-8 text");
		return;
	}
	json_auto_t *kinds = watch_query_events(events);
	req.events = kinds;
	struct watch_req *q = xcalloc(1, sizeof(*q));
	q->ctx = ctx;
	const char *format = http_query(ctx, "format");
	q->sse = format ? strcmp(format, "sse") == 0 : http_accepts(ctx, "text/event-stream");
	struct ops_target t = request_target(ctx, id, NULL);
	struct err e;
	q->w = ops_watch(&t, &req, &watch_rest_cbs, q, &e);
	if (!q->w) {
		free(q);
		reply_err(ctx, &e);
		return;
	}
	ctx->on_gone = watch_on_client_gone;
	ctx->on_gone_arg = q;
}
