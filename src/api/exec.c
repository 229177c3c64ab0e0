/* The /exec routes: sessions, commands and files, in the reference project's shapes. */
#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <string.h>
#include <time.h>

#include "api/api.h"
#include "auth/auth.h"
#include "guest/proto.h"
#include "metrics/metrics.h"
#include "session/session.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/text.h"

/* Streaming output waits for the client once this much is queued toward it. */
#define STREAM_HIGH_WATER    (512u << 10)
#define BACKPRESSURE_POLL_MS 10
/* Extra time the host gives the agent beyond a command's own timeout before giving up. */
#define EXEC_WATCHDOG_SLACK_MS 30000
#define FILE_OP_TIMEOUT_MS     120000
/* The longest command timeout the agent accepts. */
#define EXEC_MAX_TIMEOUT_MS 604800000ull

const char *api_owner(struct http_ctx *ctx)
{
	const struct auth_identity *id = auth_identity(ctx);
	return id ? id->key_id : "";
}

bool api_is_admin(struct http_ctx *ctx)
{
	return auth_is_admin(ctx);
}

struct id_match {
	const char *id;
	struct session *found;
	unsigned n;
};

static void match_id(struct session *s, void *arg)
{
	struct id_match *m = arg;
	if (strcmp(s->id, m->id) == 0 && s->state != SESSION_DESTROYING &&
	    s->state != SESSION_GONE) {
		m->found = s;
		m->n++;
	}
}

/* Whose session `id` the request means. Everyone's own first; an admin also reaches another
 * key's session with that id, when exactly one key has one (with several, the id is
 * ambiguous: 409). Returns the owner, or NULL after replying. */
static const char *target_owner(struct http_ctx *ctx, const char *id)
{
	const char *own = api_owner(ctx);
	if (!api_is_admin(ctx) || session_find(own, id))
		return own;
	struct id_match m = { .id = id };
	session_foreach(NULL, match_id, &m);
	if (m.n > 1) {
		http_reply_error(
			ctx, 409,
			"%u sessions of different keys are named `%s`; use one of those keys", m.n,
			id);
		return NULL;
	}
	return m.n == 1 ? m.found->owner : own;
}

/* The caller's session `id` (see target_owner); NULL after replying 409, or when none. */
static struct session *find_session(struct http_ctx *ctx, const char *id, bool *replied)
{
	const char *owner = target_owner(ctx, id);
	*replied = owner == NULL;
	return owner ? session_find(owner, id) : NULL;
}

static uint64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static uint64_t mono_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
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

/* The existing session named in the path; replies 404 and returns NULL otherwise. A failed
 * session reports its failure once and is forgotten. */
static struct session *existing_session(struct http_ctx *ctx, const char *id)
{
	bool replied;
	struct session *s = find_session(ctx, id, &replied);
	if (replied)
		return NULL;
	if (!s) {
		http_reply_error(ctx, 404, "Session `%s` not found", id);
		return NULL;
	}
	if (s->state == SESSION_FAILED) {
		struct err e;
		err_copy(&e, &s->failure);
		session_destroy(s, "failed");
		http_reply_err(ctx, &e);
		return NULL;
	}
	if (s->state != SESSION_READY) {
		http_reply_error(ctx, 409, "Session `%s` is %s", id, session_state_name(s->state));
		return NULL;
	}
	session_touch(s);
	return s;
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

/* An object of string values, or absent. */
static int opt_env(struct http_ctx *ctx, json_t *body, const char *key, json_t **ret)
{
	json_t *v = json_object_get(body, key);
	*ret = NULL;
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_object(v)) {
		http_reply_error(ctx, 400, "\"%s\" must be an object of strings", key);
		return -1;
	}
	const char *k;
	json_t *val;
	json_object_foreach (v, k, val) {
		if (!json_is_string(val) || !*k || strchr(k, '=')) {
			http_reply_error(ctx, 400, "\"%s.%s\" must be a string (and a valid name)",
					 key, k);
			return -1;
		}
	}
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

struct list_state {
	json_t *list;
	bool admin; /* show whose each session is: admins see every key's */
};

static void add_session_json(struct session *s, void *arg)
{
	struct list_state *st = arg;
	if (s->state != SESSION_READY && s->state != SESSION_CREATING && s->state != SESSION_FAILED)
		return;
	json_t *j = session_json(s);
	if (st->admin)
		json_object_set_new(j, "owner", json_string(s->owner));
	json_array_append_new(st->list, j);
}

void api_exec_list(struct http_ctx *ctx)
{
	json_t *list = json_array();
	struct list_state st = { .list = list, .admin = api_is_admin(ctx) };
	session_foreach(st.admin ? NULL : api_owner(ctx), add_session_json, &st);
	http_reply_json(
		ctx, 200,
		json_pack("{s:o, s:i}", "sessions", list, "count", (int)json_array_size(list)));
}

static void on_created(struct session *s, const struct err *err, void *arg)
{
	struct http_ctx *ctx = arg;
	if (err)
		http_reply_err(ctx, err);
	else
		http_reply_json(ctx, 201, session_json(s));
}

void api_exec_create(struct http_ctx *ctx)
{
	json_t *body;
	if (http_body_json(ctx, &body) < 0)
		return;
	const char *id, *tmpl;
	json_t *env;
	uint64_t idle_s = 0;
	json_t *idle = json_object_get(body, "idleTimeout");
	if (!idle)
		idle = json_object_get(body, "ttl");
	if (opt_string(ctx, body, "id", &id) < 0 || opt_string(ctx, body, "template", &tmpl) < 0 ||
	    opt_env(ctx, body, "env", &env) < 0)
		goto out;
	if (idle && !json_is_null(idle)) {
		if (!json_is_integer(idle) || json_integer_value(idle) <= 0 ||
		    json_integer_value(idle) > 7 * 24 * 3600) {
			http_reply_error(ctx, 400,
					 "\"idleTimeout\" must be a whole number of seconds "
					 "between 1 and 604800");
			goto out;
		}
		idle_s = (uint64_t)json_integer_value(idle);
	}
	struct session_resources res = { 0 };
	json_t *jres = json_object_get(body, "resources");
	if (jres && !json_is_null(jres)) {
		static const struct {
			const char *key;
			size_t off;
			bool u32;
		} fields[] = {
			{ "memoryBytes", offsetof(struct session_resources, memory_bytes), false },
			{ "cpuQuotaUs", offsetof(struct session_resources, cpu_quota_us), false },
			{ "diskBytes", offsetof(struct session_resources, workspace_bytes), false },
			{ "pidsMax", offsetof(struct session_resources, pids_max), true },
		};
		if (!json_is_object(jres)) {
			http_reply_error(ctx, 400, "\"resources\" must be an object");
			goto out;
		}
		const char *k;
		json_t *v;
		json_object_foreach (jres, k, v) {
			size_t i;
			for (i = 0; i < ARRAY_SIZE(fields); i++)
				if (strcmp(fields[i].key, k) == 0)
					break;
			if (i == ARRAY_SIZE(fields)) {
				http_reply_error(
					ctx, 400,
					"unknown resource \"%s\" (memoryBytes, cpuQuotaUs, "
					"diskBytes, pidsMax)",
					k);
				goto out;
			}
			if (!json_is_integer(v) || json_integer_value(v) <= 0 ||
			    (fields[i].u32 && json_integer_value(v) > UINT32_MAX)) {
				http_reply_error(ctx, 400,
						 "\"resources.%s\" must be a positive whole number",
						 k);
				goto out;
			}
			char *field = (char *)&res + fields[i].off;
			if (fields[i].u32)
				*(uint32_t *)field = (uint32_t)json_integer_value(v);
			else
				*(uint64_t *)field = (uint64_t)json_integer_value(v);
		}
		struct err e;
		if (session_resources_check(&res, &e) < 0) {
			http_reply_err(ctx, &e);
			goto out;
		}
	}
	char *fresh = NULL;
	if (!id)
		id = fresh = session_new_id();
	if (!session_id_valid(id)) {
		http_reply_error(ctx, 400,
				 "Invalid session id: use 1-128 letters, digits, '-', '_' or '.'");
		goto invalid;
	}
	if (session_find(api_owner(ctx), id)) {
		http_reply_error(ctx, 409, "Session `%s` already exists", id);
		goto invalid;
	}
	struct session_create_opts opts = { .template_name = tmpl,
					    .idle_timeout_s = (unsigned)idle_s,
					    .env = env,
					    .resources = &res };
	session_get_or_create(api_owner(ctx), id, &opts, on_created, ctx, NULL);
	free(fresh);
	json_decref(body);
	return;
invalid:
	free(fresh);
out:
	json_decref(body);
}

void api_exec_delete(struct http_ctx *ctx)
{
	const char *id = path_session_id(ctx);
	if (!id)
		return;
	bool replied;
	struct session *s = find_session(ctx, id, &replied);
	if (replied)
		return;
	if (!s) {
		http_reply_error(ctx, 404, "Session `%s` not found", id);
		return;
	}
	session_destroy(s, "deleted by the client");
	http_reply_json(ctx, 200, json_pack("{s:b, s:s}", "success", 1, "id", id));
}

/* --- execute ------------------------------------------------------------------------ */

enum exec_mode { EXEC_BUFFERED, EXEC_NDJSON, EXEC_SSE };

struct exec_req {
	struct http_ctx *ctx;
	struct session *s;
	struct session_exec *reg;
	struct guest_op *op;
	enum exec_mode mode;
	json_t *request; /* to the agent */
	char *stdin_data;
	size_t stdin_len;
	bool has_stdin;
	uint64_t timeout_ms;
	uint64_t oom_before;
	uint64_t t0_us;
	/* buffered output */
	json_t *output;
	size_t output_bytes;
	bool truncated;
	/* bytes held back per stream so that no chunk ends inside a UTF-8 character */
	uint8_t carry[2][4];
	size_t carry_len[2];
	/* back-pressure toward a slow streaming client */
	size_t unacked;
	struct event *bp_timer;
	char exec_id[25];
};

static void exec_req_free(struct exec_req *x)
{
	if (x->bp_timer)
		event_free(x->bp_timer);
	json_decref(x->request);
	json_decref(x->output);
	free(x->stdin_data);
	if (x->s)
		session_unref(x->s);
	free(x);
}

static void stream_line(struct exec_req *x, const char *event, json_t *obj)
{
	char *text = json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(15));
	json_decref(obj);
	if (x->mode == EXEC_SSE) {
		_cleanup_free_ char *frame = xasprintf("event: %s\ndata: %s\n\n", event, text);
		http_stream_write(x->ctx, frame, strlen(frame));
	} else {
		size_t n = strlen(text);
		text[n] = '\n';
		http_stream_write(x->ctx, text, n + 1);
	}
	free(text);
}

static void on_backpressure_poll(evutil_socket_t fd, short what, void *arg)
{
	struct exec_req *x = arg;
	if (!x->op)
		return;
	if (!x->ctx->req || http_stream_pending(x->ctx) < STREAM_HIGH_WATER / 2) {
		guest_op_consumed(x->op, x->unacked);
		x->unacked = 0;
		return;
	}
	struct timeval tv = { .tv_usec = BACKPRESSURE_POLL_MS * 1000 };
	evtimer_add(x->bp_timer, &tv);
}

static void exec_on_data(struct guest_op *op, uint8_t type, const uint8_t *data, size_t len,
			 void *arg)
{
	struct exec_req *x = arg;
	int si = type == GUEST_STDERR ? 1 : 0;
	const char *stream = si ? "stderr" : "stdout";

	/* Join the held-back bytes with this chunk, hold back a new incomplete tail. */
	size_t total = x->carry_len[si] + len;
	_cleanup_free_ uint8_t *buf = xmalloc(total);
	memcpy(buf, x->carry[si], x->carry_len[si]);
	memcpy(buf + x->carry_len[si], data, len);
	size_t tail = utf8_incomplete_tail(buf, total);
	memcpy(x->carry[si], buf + total - tail, tail);
	x->carry_len[si] = tail;
	total -= tail;

	if (x->mode == EXEC_BUFFERED && total > 0) {
		/* Past the cap the output is dropped (the command runs on); the part that still
		 * fits is kept, cut on a character boundary. */
		if (x->truncated) {
			total = 0;
		} else if (x->output_bytes + total > api_cfg->max_output_bytes) {
			size_t room = api_cfg->max_output_bytes - x->output_bytes;
			total = room - utf8_incomplete_tail(buf, room);
			x->truncated = true;
			x->carry_len[0] = x->carry_len[1] = 0;
		}
		x->output_bytes += total;
	}
	if (total > 0) {
		size_t tlen;
		_cleanup_free_ char *text = utf8_sanitize(buf, total, &tlen);
		json_t *chunk = json_pack("{s:s, s:s%, s:I}", "stream", stream, "data", text, tlen,
					  "ts", (json_int_t)wall_ms());
		if (x->mode == EXEC_BUFFERED) {
			json_array_append_new(x->output, chunk);
		} else {
			json_object_set_new(chunk, "type", json_string("stream"));
			stream_line(x, "stream", chunk);
		}
	}

	if (x->mode == EXEC_BUFFERED || !x->ctx->req ||
	    http_stream_pending(x->ctx) < STREAM_HIGH_WATER) {
		guest_op_consumed(op, len);
		return;
	}
	x->unacked += len;
	if (!x->bp_timer)
		x->bp_timer = evtimer_new(api_base, on_backpressure_poll, x);
	if (!evtimer_pending(x->bp_timer, NULL)) {
		struct timeval tv = { .tv_usec = BACKPRESSURE_POLL_MS * 1000 };
		evtimer_add(x->bp_timer, &tv);
	}
}

static void flush_carry(struct exec_req *x)
{
	for (int si = 0; si < 2; si++) {
		if (!x->carry_len[si] || x->truncated)
			continue;
		/* A stream ended inside a character: show the bytes as replacement chars. */
		uint8_t held[4];
		size_t n = x->carry_len[si];
		memcpy(held, x->carry[si], n);
		x->carry_len[si] = 0;
		size_t tlen;
		_cleanup_free_ char *text = utf8_sanitize(held, n, &tlen);
		json_t *chunk = json_pack("{s:s, s:s%, s:I}", "stream", si ? "stderr" : "stdout",
					  "data", text, tlen, "ts", (json_int_t)wall_ms());
		if (x->mode == EXEC_BUFFERED) {
			json_array_append_new(x->output, chunk);
		} else {
			json_object_set_new(chunk, "type", json_string("stream"));
			stream_line(x, "stream", chunk);
		}
	}
}

static json_t *exec_result_json(struct exec_req *x, json_t *result)
{
	json_t *exit_code = json_object_get(result, "exitCode");
	json_t *sig = json_object_get(result, "signal");
	/* Milliseconds, to the microsecond. */
	double duration = (double)(mono_us() - x->t0_us) / 1000.0;
	json_t *r = json_pack("{s:O, s:f, s:s}", "exitCode", exit_code ? exit_code : json_null(),
			      "duration", duration, "execId", x->exec_id);
	if (json_is_string(sig))
		json_object_set(r, "signal", sig);
	if (json_is_true(json_object_get(result, "timedOut")))
		json_object_set_new(r, "timedOut", json_true());
	if (json_is_true(json_object_get(result, "cancelled")))
		json_object_set_new(r, "cancelled", json_true());
	const struct driver *d = session_driver();
	if (d->oom_kills && x->s->sb && d->oom_kills(x->s->sb) > x->oom_before) {
		json_object_set_new(r, "oomKilled", json_true());
		json_object_set_new(r, "error",
				    json_string("a process was killed because the sandbox "
						"exceeded its memory limit"));
	}
	return r;
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

static void exec_on_done(struct guest_op *op, json_t *result, const struct err *err, void *arg)
{
	struct exec_req *x = arg;
	x->op = NULL;
	if (x->reg)
		session_exec_remove(x->s, x->reg);
	x->reg = NULL;
	session_op_end(x->s);
	flush_carry(x);
	metrics_add(M.exec_message_total, 1, "execute");
	metrics_observe(M.exec_message_duration, (double)(mono_us() - x->t0_us) / 1e6, "execute");

	if (x->mode == EXEC_BUFFERED) {
		if (err) {
			http_reply_error(x->ctx, exec_error_status(err), "%s", err->msg);
		} else {
			json_t *r = exec_result_json(x, result);
			json_object_set(r, "output", x->output);
			if (x->truncated) {
				json_object_set_new(r, "truncated", json_true());
				json_object_set_new(
					r, "outputLimit",
					json_integer((json_int_t)api_cfg->max_output_bytes));
			}
			http_reply_json(x->ctx, 200, r);
		}
	} else {
		if (err) {
			stream_line(x, "error",
				    json_pack("{s:s, s:s, s:s}", "type", "error", "error", err->msg,
					      "execId", x->exec_id));
		} else {
			json_t *r = exec_result_json(x, result);
			json_object_set_new(r, "type", json_string("result"));
			stream_line(x, "result", r);
		}
		http_stream_end(x->ctx);
	}
	exec_req_free(x);
}

static const struct guest_op_cbs exec_cbs = { .on_data = exec_on_data, .on_done = exec_on_done };

static void exec_on_client_gone(struct http_ctx *ctx, void *arg)
{
	struct exec_req *x = arg;
	if (x->op) {
		log_info("api", "client of %s went away: cancelling the command", x->exec_id);
		guest_op_cancel(x->op);
	}
}

static void exec_on_session(struct session *s, const struct err *err, void *arg)
{
	struct exec_req *x = arg;
	if (err || x->ctx->gone) {
		if (err)
			http_reply_err(x->ctx, err);
		else
			http_reply_error(x->ctx, 499, "client closed the request");
		exec_req_free(x);
		return;
	}
	x->s = s;
	session_ref(s);

	/* The session's environment under the request's. */
	json_t *env = json_deep_copy(s->env);
	json_t *req_env = json_object_get(x->request, "env");
	if (req_env)
		json_object_update(env, req_env);
	json_object_set_new(x->request, "env", env);

	struct err e;
	x->op = guest_op_start(s->conn, x->request, &exec_cbs, x, &e);
	if (!x->op) {
		http_reply_err(x->ctx, &e);
		exec_req_free(x);
		return;
	}
	const struct driver *d = session_driver();
	x->oom_before = d->oom_kills && s->sb ? d->oom_kills(s->sb) : 0;
	session_op_begin(s);
	x->reg = session_exec_add(s, x->op);
	memcpy(x->exec_id, x->reg->id, sizeof(x->exec_id));
	x->t0_us = mono_us();
	if (x->timeout_ms)
		guest_op_set_timeout(x->op, x->timeout_ms + EXEC_WATCHDOG_SLACK_MS, "execute");
	if (x->has_stdin) {
		guest_op_send(x->op, x->stdin_data, x->stdin_len);
		guest_op_eof(x->op);
	}
	x->ctx->on_gone = exec_on_client_gone;
	x->ctx->on_gone_arg = x;
	if (x->mode != EXEC_BUFFERED) {
		http_add_header(x->ctx, "X-Exec-Id", x->exec_id);
		http_stream_start(x->ctx, 200,
				  x->mode == EXEC_SSE ? "text/event-stream"
						      : "application/x-ndjson");
		stream_line(x, "start",
			    json_pack("{s:s, s:s, s:s}", "type", "start", "execId", x->exec_id,
				      "sessionId", s->id));
	}
}

/* Whether a command string needs a shell: anything beyond plain words. */
static bool needs_shell(const char *cmd)
{
	return strpbrk(cmd, " \t\n|&;<>()$`\\\"'*?[]#~=%{}") != NULL;
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

void api_exec_execute(struct http_ctx *ctx)
{
	const char *id = path_session_id(ctx);
	if (!id)
		return;
	json_t *body;
	if (http_body_json(ctx, &body) < 0)
		return;
	struct exec_req *x = xcalloc(1, sizeof(*x));
	x->ctx = ctx;
	x->mode = exec_mode(ctx);
	x->output = json_array();

	const char *command, *tmpl, *cwd, *stdin_text;
	json_t *env;
	if (opt_string(ctx, body, "command", &command) < 0 ||
	    opt_string(ctx, body, "template", &tmpl) < 0 ||
	    opt_string(ctx, body, "cwd", &cwd) < 0 || opt_env(ctx, body, "env", &env) < 0 ||
	    opt_string(ctx, body, "stdin", &stdin_text) < 0 ||
	    opt_ms(ctx, body, "timeout", &x->timeout_ms) < 0)
		goto fail;
	if (!command || !*command) {
		http_reply_error(ctx, 400, "\"command\" is required");
		goto fail;
	}
	/* An absent timeout takes the server's default; an explicit 0 means none. */
	json_t *tv = json_object_get(body, "timeout");
	if (!tv || json_is_null(tv))
		x->timeout_ms = api_cfg->default_timeout_ms;
	if (x->timeout_ms > EXEC_MAX_TIMEOUT_MS) {
		http_reply_error(ctx, 400, "\"timeout\" must be at most %llu ms (a week)",
				 (unsigned long long)EXEC_MAX_TIMEOUT_MS);
		goto fail;
	}
	json_t *args = json_object_get(body, "args");
	json_t *argv = json_array();
	if (args && !json_is_null(args)) {
		if (!json_is_array(args)) {
			json_decref(argv);
			http_reply_error(ctx, 400, "\"args\" must be an array of strings");
			goto fail;
		}
		json_array_append_new(argv, json_string(command));
		size_t i;
		json_t *a;
		json_array_foreach (args, i, a) {
			if (!json_is_string(a)) {
				json_decref(argv);
				http_reply_error(ctx, 400, "\"args[%zu]\" must be a string", i);
				goto fail;
			}
			json_array_append(argv, a);
		}
	} else if (needs_shell(command)) {
		json_array_append_new(argv, json_string("/bin/sh"));
		json_array_append_new(argv, json_string("-c"));
		json_array_append_new(argv, json_string(command));
	} else {
		json_array_append_new(argv, json_string(command));
	}
	x->request = json_pack("{s:s, s:o, s:I, s:b}", "op", "exec", "argv", argv, "timeoutMs",
			       (json_int_t)x->timeout_ms, "stdin", stdin_text != NULL);
	if (env)
		json_object_set(x->request, "env", env);
	if (cwd)
		json_object_set_new(x->request, "cwd", json_string(cwd));
	if (stdin_text) {
		x->has_stdin = true;
		x->stdin_len = json_string_length(json_object_get(body, "stdin"));
		x->stdin_data = xmalloc(x->stdin_len + 1);
		memcpy(x->stdin_data, stdin_text, x->stdin_len);
	}
	struct session_create_opts opts = { .template_name = tmpl };
	/* opts points into body: release it only after the call. */
	const char *owner = target_owner(ctx, id);
	if (!owner)
		goto fail;
	session_get_or_create(owner, id, &opts, exec_on_session, x, NULL);
	json_decref(body);
	return;
fail:
	json_decref(body);
	exec_req_free(x);
}

void api_exec_cancel(struct http_ctx *ctx)
{
	const char *id = path_session_id(ctx);
	if (!id)
		return;
	json_t *body;
	if (http_body_json(ctx, &body) < 0)
		return;
	const char *exec_id;
	if (opt_string(ctx, body, "execId", &exec_id) < 0)
		goto out;
	if (!exec_id) {
		http_reply_error(ctx, 400, "\"execId\" is required");
		goto out;
	}
	struct session *s = existing_session(ctx, id);
	if (!s)
		goto out;
	struct session_exec *e = session_exec_find(s, exec_id);
	if (!e) {
		http_reply_error(ctx, 404, "No running command `%s` in session `%s`", exec_id, id);
		goto out;
	}
	guest_op_cancel(e->op);
	http_reply_json(ctx, 202, json_pack("{s:b, s:s}", "cancelled", 1, "execId", exec_id));
out:
	json_decref(body);
}

/* --- files -------------------------------------------------------------------------- */

struct file_req {
	struct http_ctx *ctx;
	struct session *s;
	json_t *request;
	uint8_t *data; /* write: contents to send */
	size_t len;
	/* read */
	struct evbuffer *content;
	bool raw; /* reply with the bytes themselves */
	bool want_base64;
	bool is_write;
	uint64_t t0_us;
	char *path;
};

static void file_req_free(struct file_req *f)
{
	json_decref(f->request);
	free(f->data);
	free(f->path);
	if (f->content)
		evbuffer_free(f->content);
	if (f->s) {
		session_op_end(f->s);
		session_unref(f->s);
	}
	free(f);
}

typedef void (*file_reply_fn)(struct file_req *f, json_t *result);

static void file_on_data(struct guest_op *op, uint8_t type, const uint8_t *data, size_t len,
			 void *arg)
{
	struct file_req *f = arg;
	if (type == GUEST_FILEDATA && f->content)
		evbuffer_add(f->content, data, len);
	guest_op_consumed(op, len);
}

static void write_reply(struct file_req *f, json_t *result)
{
	json_t *size = json_object_get(result, "size");
	http_reply_json(f->ctx, 200,
			json_pack("{s:b, s:s, s:O}", "success", 1, "path", f->path, "size",
				  size ? size : json_integer((json_int_t)f->len)));
}

static void read_reply(struct file_req *f, json_t *result)
{
	size_t len = evbuffer_get_length(f->content);
	const uint8_t *bytes = len ? evbuffer_pullup(f->content, -1) : (const uint8_t *)"";
	if (f->raw) {
		http_reply_bytes(f->ctx, 200, "application/octet-stream", bytes, len);
		return;
	}
	/* Text that is not UTF-8 would be damaged by JSON: send it as base64 and say so. */
	bool b64 = f->want_base64 || !utf8_valid(bytes, len) || memchr(bytes, 0, len);
	json_t *content;
	if (b64) {
		size_t n;
		char *enc = base64_encode(bytes, len, &n);
		content = json_stringn(enc, n);
		free(enc);
	} else {
		content = json_stringn((const char *)bytes, len);
	}
	http_reply_json(f->ctx, 200,
			json_pack("{s:s, s:o, s:s, s:I}", "path", f->path, "content", content,
				  "encoding", b64 ? "base64" : "utf8", "size", (json_int_t)len));
}

static void files_reply(struct file_req *f, json_t *result)
{
	json_t *entries = json_object_get(result, "entries");
	json_t *r = json_pack("{s:s, s:O, s:b}", "path", f->path, "files",
			      entries ? entries : json_array(), "truncated",
			      json_is_true(json_object_get(result, "truncated")));
	http_reply_json(f->ctx, 200, r);
}

static const char *file_message_type(const char *op)
{
	if (strcmp(op, "write") == 0)
		return "write_file";
	if (strcmp(op, "read") == 0)
		return "read_file";
	return "list_files";
}

static void file_on_done(struct guest_op *op, json_t *result, const struct err *err, void *arg)
{
	struct file_req *f = arg;
	const char *type = file_message_type(json_string_value(json_object_get(f->request, "op")));
	metrics_add(M.exec_message_total, 1, type);
	metrics_observe(M.exec_message_duration, (double)(mono_us() - f->t0_us) / 1e6, type);
	if (err) {
		http_reply_err(f->ctx, err);
	} else {
		const char *kind = json_string_value(json_object_get(f->request, "op"));
		if (strcmp(kind, "write") == 0)
			write_reply(f, result);
		else if (strcmp(kind, "read") == 0)
			read_reply(f, result);
		else
			files_reply(f, result);
	}
	file_req_free(f);
}

static const struct guest_op_cbs file_cbs = { .on_data = file_on_data, .on_done = file_on_done };

static void file_on_gone(struct http_ctx *ctx, void *arg)
{
	/* The op finishes on its own; the reply is dropped. Reads stop early. */
	(void)ctx;
	(void)arg;
}

static void file_start(struct session *s, const struct err *err, void *arg)
{
	struct file_req *f = arg;
	if (err) {
		http_reply_err(f->ctx, err);
		file_req_free(f);
		return;
	}
	struct err e;
	struct guest_op *op = guest_op_start(s->conn, f->request, &file_cbs, f, &e);
	if (!op) {
		http_reply_err(f->ctx, &e);
		file_req_free(f);
		return;
	}
	f->s = s;
	f->t0_us = mono_us();
	session_ref(s);
	session_op_begin(s);
	f->ctx->on_gone = file_on_gone;
	guest_op_set_timeout(op, FILE_OP_TIMEOUT_MS, "file operation");
	if (f->is_write) {
		guest_op_send(op, f->data, f->len);
		guest_op_eof(op);
	}
}

void api_exec_write(struct http_ctx *ctx)
{
	const char *id = path_session_id(ctx);
	if (!id)
		return;
	json_t *body;
	if (http_body_json(ctx, &body) < 0)
		return;
	const char *path, *tmpl, *encoding;
	struct file_req *f = NULL;
	if (opt_string(ctx, body, "path", &path) < 0 ||
	    opt_string(ctx, body, "template", &tmpl) < 0 ||
	    opt_string(ctx, body, "encoding", &encoding) < 0)
		goto out;
	json_t *content = json_object_get(body, "content");
	if (!path || !*path) {
		http_reply_error(ctx, 400, "\"path\" is required");
		goto out;
	}
	if (!json_is_string(content)) {
		http_reply_error(ctx, 400, "\"content\" is required and must be a string");
		goto out;
	}
	json_t *mode = json_object_get(body, "mode");
	if (mode && !(json_is_integer(mode) && json_integer_value(mode) >= 0 &&
		      json_integer_value(mode) <= 07777)) {
		http_reply_error(ctx, 400, "\"mode\" must be a permission number (0 to 4095)");
		goto out;
	}
	f = xcalloc(1, sizeof(*f));
	f->ctx = ctx;
	f->path = xstrdup(path);
	const char *text = json_string_value(content);
	size_t tlen = json_string_length(content);
	if (encoding && strcmp(encoding, "base64") == 0) {
		if (base64_decode(text, tlen, &f->data, &f->len) < 0) {
			http_reply_error(ctx, 400, "\"content\" is not valid base64");
			goto out;
		}
	} else if (!encoding || strcmp(encoding, "utf8") == 0 || strcmp(encoding, "utf-8") == 0) {
		f->data = xmalloc(tlen + 1);
		memcpy(f->data, text, tlen);
		f->len = tlen;
	} else {
		http_reply_error(ctx, 400, "\"encoding\" must be \"utf8\" or \"base64\"");
		goto out;
	}
	f->is_write = true;
	f->request = json_pack("{s:s, s:s, s:I}", "op", "write", "path", path, "maxBytes",
			       (json_int_t)api_cfg->max_body_bytes);
	if (mode)
		json_object_set(f->request, "mode", mode);
	struct session_create_opts opts = { .template_name = tmpl };
	const char *owner = target_owner(ctx, id);
	if (!owner)
		goto out;
	session_get_or_create(owner, id, &opts, file_start, f, NULL);
	json_decref(body);
	return;
out:
	json_decref(body);
	if (f)
		file_req_free(f);
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

void api_exec_read(struct http_ctx *ctx)
{
	const char *id = path_session_id(ctx);
	if (!id)
		return;
	const char *path = http_query(ctx, "path");
	if (!path || !*path) {
		http_reply_error(ctx, 400, "The \"path\" query parameter is required");
		return;
	}
	if (!query_path_valid(ctx, path))
		return;
	const char *encoding = http_query(ctx, "encoding");
	if (encoding && strcmp(encoding, "base64") && strcmp(encoding, "utf8")) {
		http_reply_error(ctx, 400, "\"encoding\" must be \"utf8\" or \"base64\"");
		return;
	}
	struct session *s = existing_session(ctx, id);
	if (!s)
		return;
	struct file_req *f = xcalloc(1, sizeof(*f));
	f->ctx = ctx;
	f->path = xstrdup(path);
	f->content = evbuffer_new();
	f->want_base64 = encoding && strcmp(encoding, "base64") == 0;
	f->raw = http_accepts(ctx, "application/octet-stream") && !encoding;
	f->request = json_pack("{s:s, s:s, s:I}", "op", "read", "path", path, "maxBytes",
			       (json_int_t)api_cfg->max_read_bytes);
	file_start(s, NULL, f);
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
	struct session *s = existing_session(ctx, id);
	if (!s)
		return;
	struct file_req *f = xcalloc(1, sizeof(*f));
	f->ctx = ctx;
	f->path = xstrdup(path && *path ? path : ".");
	bool recursive = rec && (strcmp(rec, "true") == 0 || strcmp(rec, "1") == 0);
	f->request =
		json_pack("{s:s, s:s, s:b}", "op", "list", "path", f->path, "recursive", recursive);
	file_start(s, NULL, f);
}
