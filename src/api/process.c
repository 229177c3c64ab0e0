/* process: the REST adapter of background processes (session/ops.h):
 *   POST   /exec/:id/processes              start one (201 with the process)
 *   GET    /exec/:id/processes              list them
 *   GET    /exec/:id/processes/:pid         one, by pid or tag
 *   GET    /exec/:id/processes/:pid/output  its output: replay, then live (NDJSON or SSE),
 *                                           or what is kept, as one JSON reply
 *   POST   /exec/:id/processes/:pid/wait    its result, once it ended
 *   POST   /exec/:id/processes/:pid/signal  {"signal": "TERM"}
 *   DELETE /exec/:id/processes/:pid         SIGKILL
 *   POST   /exec/:id/processes/:pid/stdin   bytes for its stdin (JSON or raw), and EOF
 *   POST   /exec/:id/processes/:pid/resize  its terminal's size
 * A client that leaves an output stream only ends its attach: the process goes on. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "session/ops.h"
#include "util/cleanup.h"
#include "util/signame.h"
#include "util/log.h"
#include "util/text.h"
#include "util/time.h"

/* An output stream waits for its client once this much is queued toward it. */
#define STREAM_HIGH_WATER (512u << 10)
/* What a buffered output reply holds at most (the rest is left out, said so). */
#define BUFFERED_MAX (4u << 20)
/* What an entry of a buffered reply costs beyond its text (its object, keys, allocations):
 * counted against BUFFERED_MAX, so that output in one-byte pieces cannot make it large. */
#define ENTRY_COST 256

/* The agent's answers that are about the process, not the sandbox: a closed stdin (EPIPE) is
 * the request's conflict with its state, a resize of a process without a terminal (ENOTTY) a
 * bad request. */
static void reply_proc_err(struct http_ctx *ctx, const struct err *err)
{
	if (err->errnum == EPIPE)
		http_reply_error(ctx, 409, "%s", err->msg);
	else if (err->errnum == ENOTTY)
		http_reply_error(ctx, 400, "%s", err->msg);
	else
		api_reply_err(ctx, err);
}

static void reply_process(struct http_ctx *ctx, int status, const struct ops_result *r,
			  const struct err *err)
{
	if (err) {
		api_reply_err(ctx, err);
		return;
	}
	http_reply_json(ctx, status, json_incref(r->info));
}

static void on_started(struct ops_call *c, const struct ops_result *r, const struct err *err,
		       void *arg)
{
	/* The session exists by now: a command or directory that is missing or cannot run is a
	 * bad request, as for execute. */
	if (err && (err->errnum == ENOENT || err->errnum == ENOEXEC || err->errnum == EACCES ||
		    err->errnum == ENOTDIR)) {
		http_reply_error(arg, 400, "%s", err->msg);
		return;
	}
	reply_process(arg, 201, r, err);
}

/* Starts a background process from an execute-like body; shared with execute's
 * `background: true`. */
static void start(struct http_ctx *ctx, const char *id, json_t *body)
{
	struct ops_spawn_req req = { 0 };
	const char *tmpl, *term;
	json_t *sv = json_object_get(body, "stdin");
	if (json_is_string(sv)) {
		http_reply_error(ctx, 400,
				 "a background process takes its stdin from POST "
				 "/exec/:id/processes/:pid/stdin: send \"stdin\": true to keep it "
				 "open");
		return;
	}
	if (sv && !json_is_null(sv) && !json_is_boolean(sv)) {
		http_reply_error(ctx, 400, "\"stdin\" must be true or false");
		return;
	}
	bool stdin_open = json_is_true(sv);
	/* The rest is an execute's (whose "stdin" is text). */
	json_auto_t *cmd = json_copy(body);
	json_object_del(cmd, "stdin");
	if (api_parse_command(ctx, cmd, &req.x, &tmpl) < 0 ||
	    api_opt_string(ctx, body, "tag", &req.tag) < 0 ||
	    api_opt_string(ctx, body, "term", &term) < 0)
		return;
	req.stdin_open = stdin_open;
	req.term = term;
	json_t *pty = json_object_get(body, "pty");
	if (pty && !json_is_null(pty) && !json_is_false(pty)) {
		req.pty = true;
		req.rows = 24;
		req.cols = 80;
		if (json_is_object(pty)) {
			json_t *rows = json_object_get(pty, "rows"),
			       *cols = json_object_get(pty, "cols");
			if ((rows && !json_is_integer(rows)) || (cols && !json_is_integer(cols))) {
				http_reply_error(ctx, 400,
						 "\"pty\" rows and cols must be integers");
				return;
			}
			if (rows)
				req.rows = (unsigned)json_integer_value(rows);
			if (cols)
				req.cols = (unsigned)json_integer_value(cols);
			if ((rows && json_integer_value(rows) <= 0) ||
			    (cols && json_integer_value(cols) <= 0))
				req.rows = 0;
		} else if (!json_is_true(pty)) {
			http_reply_error(ctx, 400, "\"pty\" must be true or {\"rows\", \"cols\"}");
			return;
		}
	}
	json_t *replay = json_object_get(body, "replayBytes");
	if (replay && !json_is_null(replay)) {
		if (!json_is_integer(replay) || json_integer_value(replay) <= 0) {
			http_reply_error(ctx, 400, "\"replayBytes\" must be a positive integer");
			return;
		}
		req.replay_bytes = (uint64_t)json_integer_value(replay);
	}
	struct ops_target t = api_request_target(ctx, id, tmpl);
	struct err e;
	if (!ops_spawn(&t, &req, on_started, ctx, &e))
		api_reply_err(ctx, &e);
}

void api_process_start(struct http_ctx *ctx)
{
	const char *id;
	json_auto_t *body = NULL;
	if (api_id_and_body(ctx, &id, &body) < 0)
		return;
	start(ctx, id, body);
}

void api_exec_background(struct http_ctx *ctx, const char *id, json_t *body)
{
	start(ctx, id, body);
}

static void on_listed(struct ops_call *c, const struct ops_result *r, const struct err *err,
		      void *arg)
{
	struct http_ctx *ctx = arg;
	if (err) {
		api_reply_err(ctx, err);
		return;
	}
	http_reply_json(ctx, 200, json_pack("{s:O}", "processes", r->entries));
}

void api_process_list(struct http_ctx *ctx)
{
	const char *id = api_path_session_id(ctx);
	if (!id)
		return;
	struct ops_target t = api_request_target(ctx, id, NULL);
	struct err e;
	if (!ops_list_processes(&t, on_listed, ctx, &e))
		api_reply_err(ctx, &e);
}

/* The session id and the process named in the path; replies 400 and returns -1 when bad. */
static int path_process(struct http_ctx *ctx, const char **id, struct ops_proc_ref *ref)
{
	*id = api_path_session_id(ctx);
	if (!*id)
		return -1;
	struct err e;
	if (ops_proc_ref_parse(http_param(ctx, 1), ref, &e) < 0) {
		api_reply_err(ctx, &e);
		return -1;
	}
	return 0;
}

/* One process: an attach that sends nothing and does not follow answers with it. */
static void on_got(struct ops_call *c, const struct ops_result *r, const struct err *err, void *arg)
{
	struct http_ctx *ctx = arg;
	if (!err) {
		json_t *p = json_deep_copy(r->info);
		json_object_del(p, "detached");
		json_object_del(p, "position");
		http_reply_json(ctx, 200, p);
		return;
	}
	api_reply_err(ctx, err);
}

static void ignore_output(struct ops_call *c, enum ops_stream s, const uint8_t *d, size_t n,
			  void *arg)
{
	ops_call_consumed(c, n);
}

static const struct ops_attach_cbs ignore_cbs = { .on_output = ignore_output };

void api_process_get(struct http_ctx *ctx)
{
	const char *id;
	struct ops_proc_ref ref;
	if (path_process(ctx, &id, &ref) < 0)
		return;
	struct ops_target t = api_request_target(ctx, id, NULL);
	struct ops_attach_opts o = { .replay_bytes = 0, .output = false, .follow = false };
	struct err e;
	if (!ops_attach(&t, &ref, &o, &ignore_cbs, on_got, ctx, &e))
		api_reply_err(ctx, &e);
}

/* --- output -------------------------------------------------------------------------- */

enum out_mode { OUT_BUFFERED, OUT_NDJSON, OUT_SSE };

struct out_req {
	struct http_ctx *ctx;
	struct ops_call *c;
	enum out_mode mode;
	bool started;
	size_t unacked; /* bytes not yet handed back while the client is slow */
	bool paused;
	/* per stream: bytes held back so that no chunk ends inside a UTF-8 character */
	uint8_t carry[2][4];
	size_t carry_len[2];
	json_t *output;      /* buffered: the entries made so far */
	size_t output_bytes; /* their bytes, with ENTRY_COST each */
	int cur_si;          /* buffered: the stream of the entry being joined, -1: none */
	char *cur;
	size_t cur_len;
	bool truncated;
	bool wait; /* only the result, as the process itself */
	uint64_t gaps;
	struct event *timer;
};

static void out_free(struct out_req *q)
{
	free(q->cur);
	if (q->timer)
		event_free(q->timer);
	json_decref(q->output);
	free(q);
}

static void out_line(struct out_req *q, const char *event, json_t *obj)
{
	_cleanup_free_ char *text = json_dumps(obj, JSON_COMPACT | JSON_REAL_PRECISION(15));
	json_decref(obj);
	if (q->mode == OUT_SSE) {
		_cleanup_free_ char *frame = xasprintf("event: %s\ndata: %s\n\n", event, text);
		http_stream_write(q->ctx, frame, strlen(frame));
	} else {
		size_t n = strlen(text);
		text[n] = '\n';
		http_stream_write(q->ctx, text, n + 1);
	}
}

static void out_begin(struct out_req *q)
{
	if (q->started || q->mode == OUT_BUFFERED)
		return;
	q->started = true;
	http_stream_start(q->ctx, 200,
			  q->mode == OUT_SSE ? "text/event-stream" : "application/x-ndjson");
}

static void out_drained(struct http_ctx *ctx, void *arg)
{
	struct out_req *q = arg;
	q->paused = false;
	if (q->c && q->unacked) {
		ops_call_consumed(q->c, q->unacked);
		q->unacked = 0;
	}
}

/* Ends the entry being joined (buffered replies). */
static void out_flush_entry(struct out_req *q)
{
	if (q->cur_si >= 0 && q->cur_len)
		json_array_append_new(q->output, json_pack("{s:s, s:s%}", "stream",
							   q->cur_si ? "stderr" : "stdout", "data",
							   q->cur, q->cur_len));
	q->cur_len = 0;
	q->cur_si = -1;
}

static void out_text(struct out_req *q, int si, const char *text, size_t len)
{
	if (!len)
		return;
	const char *name = si ? "stderr" : "stdout";
	if (q->mode == OUT_BUFFERED) {
		/* Pieces of one stream in a row are joined into one entry. */
		size_t cost = len + (q->cur_si == si ? 0 : ENTRY_COST);
		if (q->truncated || q->output_bytes + cost > BUFFERED_MAX) {
			q->truncated = true;
			return;
		}
		if (q->cur_si != si)
			out_flush_entry(q);
		q->cur_si = si;
		q->cur = xrealloc(q->cur, q->cur_len + len + 1);
		memcpy(q->cur + q->cur_len, text, len);
		q->cur_len += len;
		q->output_bytes += cost;
		return;
	}
	out_begin(q);
	out_line(q, "stream",
		 json_pack("{s:s, s:s, s:s%, s:I}", "type", "stream", "stream", name, "data", text,
			   len, "ts", (json_int_t)time_wall_ms()));
}

static void out_output(struct ops_call *c, enum ops_stream stream, const uint8_t *data, size_t len,
		       void *arg)
{
	struct out_req *q = arg;
	int si = stream == OPS_STDERR;
	size_t total = q->carry_len[si] + len;
	_cleanup_free_ uint8_t *buf = xmalloc(total);
	memcpy(buf, q->carry[si], q->carry_len[si]);
	memcpy(buf + q->carry_len[si], data, len);
	size_t tail = utf8_incomplete_tail(buf, total);
	memcpy(q->carry[si], buf + total - tail, tail);
	q->carry_len[si] = tail;
	size_t tlen;
	_cleanup_free_ char *text = utf8_sanitize(buf, total - tail, &tlen);
	out_text(q, si, text, tlen);
	if (q->mode != OUT_BUFFERED && q->ctx->conn &&
	    http_stream_pending(q->ctx) >= STREAM_HIGH_WATER) {
		q->unacked += len;
		if (!q->paused) {
			q->paused = true;
			http_stream_on_drain(q->ctx, STREAM_HIGH_WATER / 2, out_drained, q);
		}
		return;
	}
	if (q->paused)
		q->unacked += len;
	else
		ops_call_consumed(c, len);
}

static void out_gap(struct ops_call *c, uint64_t bytes, void *arg)
{
	struct out_req *q = arg;
	q->gaps += bytes;
	if (q->mode == OUT_BUFFERED)
		return;
	out_begin(q);
	out_line(q, "gap", json_pack("{s:s, s:I}", "type", "gap", "bytes", (json_int_t)bytes));
}

static void out_done(struct ops_call *c, const struct ops_result *r, const struct err *err,
		     void *arg)
{
	struct out_req *q = arg;
	q->c = NULL;
	q->ctx->on_gone = NULL;
	http_stream_on_drain(q->ctx, 0, NULL, NULL);
	for (int si = 0; si < 2 && !err; si++) {
		size_t n = q->carry_len[si], tlen;
		q->carry_len[si] = 0;
		_cleanup_free_ char *text = utf8_sanitize(q->carry[si], n, &tlen);
		out_text(q, si, text, tlen);
	}
	if (q->mode == OUT_BUFFERED) {
		out_flush_entry(q);
		if (err) {
			api_reply_err(q->ctx, err);
		} else if (q->wait) {
			http_reply_json(q->ctx, 200, json_incref(r->info));
		} else {
			json_t *j = json_pack("{s:O, s:O, s:I, s:b}", "process", r->info, "output",
					      q->output, "gapBytes", (json_int_t)q->gaps,
					      "truncated", q->truncated);
			http_reply_json(q->ctx, 200, j);
		}
		out_free(q);
		return;
	}
	if (!q->started && err) {
		api_reply_err(q->ctx, err);
		out_free(q);
		return;
	}
	out_begin(q);
	if (err)
		out_line(q, "error",
			 json_pack("{s:s, s:s, s:i}", "type", "error", "error", err->msg, "status",
				   http_status_for_errno(err->errnum)));
	else
		out_line(q, "result",
			 json_pack("{s:s, s:O}", "type", "result", "process", r->info));
	http_stream_end(q->ctx);
	out_free(q);
}

static void out_attached(struct ops_call *c, int pid, void *arg)
{
	struct out_req *q = arg;
	if (q->mode == OUT_BUFFERED)
		return;
	/* The stream's head goes now: its client knows it is attached before any output. */
	out_begin(q);
	out_line(q, "start", json_pack("{s:s, s:i}", "type", "start", "pid", pid));
}

static const struct ops_attach_cbs out_cbs = { .on_attached = out_attached,
					       .on_output = out_output,
					       .on_gap = out_gap };

static void out_gone(struct http_ctx *ctx, void *arg)
{
	struct out_req *q = arg;
	/* Only this reader goes: the process runs on. */
	if (q->c)
		ops_call_detach(q->c);
	q->c = NULL;
	http_stream_on_drain(ctx, 0, NULL, NULL);
	out_free(q);
	http_stream_abort(ctx); /* nothing more is sent: the ctx is done with */
}

/* A query flag: "true"/"1" or "false"/"0"; replies 400 and returns -1 otherwise. */
static int query_bool(struct http_ctx *ctx, const char *name, bool def, bool *ret)
{
	const char *v = http_query(ctx, name);
	*ret = def;
	if (!v)
		return 0;
	if (!strcmp(v, "true") || !strcmp(v, "1"))
		*ret = true;
	else if (!strcmp(v, "false") || !strcmp(v, "0"))
		*ret = false;
	else {
		http_reply_error(ctx, 400, "`%s` must be true or false", name);
		return -1;
	}
	return 0;
}

static int query_uint(struct http_ctx *ctx, const char *name, int64_t *ret)
{
	const char *v = http_query(ctx, name);
	if (!v)
		return 0;
	char *end;
	long long n = strtoll(v, &end, 10);
	if (!*v || *end || n < 0 || n > (1LL << 50)) {
		http_reply_error(ctx, 400, "`%s` must be a non-negative integer", name);
		return -1;
	}
	*ret = n;
	return 0;
}

static void out_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct out_req *q = arg;
	/* The caller's wait is over: the attach ends (the process goes on) with its answer. */
	if (q->c) {
		struct ops_call *c = q->c;
		q->c = NULL;
		ops_call_detach(c);
	}
	q->ctx->on_gone = NULL;
	http_stream_on_drain(q->ctx, 0, NULL, NULL);
	if (q->mode == OUT_BUFFERED) {
		http_reply_error(q->ctx, 408, "the process did not end within the timeout");
	} else {
		out_begin(q);
		out_line(q, "timeout", json_pack("{s:s}", "type", "timeout"));
		http_stream_end(q->ctx);
	}
	out_free(q);
}

/* Starts an attach for ctx's process; `wait`: only the result. */
static void attach(struct http_ctx *ctx, bool wait, uint64_t timeout_ms)
{
	const char *id;
	struct ops_proc_ref ref;
	if (path_process(ctx, &id, &ref) < 0)
		return;
	struct out_req *q = xcalloc(1, sizeof(*q));
	q->ctx = ctx;
	q->wait = wait;
	q->output = json_array();
	q->cur_si = -1;
	const char *format = http_query(ctx, "format");
	if ((format && !strcmp(format, "ndjson")) ||
	    (!format && http_accepts(ctx, "application/x-ndjson")))
		q->mode = OUT_NDJSON;
	else if ((format && !strcmp(format, "sse")) ||
		 (!format && http_accepts(ctx, "text/event-stream")))
		q->mode = OUT_SSE;
	struct ops_attach_opts o = { .replay_bytes = -1, .output = !wait, .follow = true };
	/* A buffered reply does not wait for the end unless asked. */
	if (!wait && (query_bool(ctx, "follow", q->mode != OUT_BUFFERED, &o.follow) < 0 ||
		      query_uint(ctx, "replay", &o.replay_bytes) < 0)) {
		out_free(q);
		return;
	}
	int64_t tmo = (int64_t)timeout_ms;
	if (!wait && query_uint(ctx, "timeout", &tmo) < 0) {
		out_free(q);
		return;
	}
	struct ops_target t = api_request_target(ctx, id, NULL);
	struct err e;
	q->c = ops_attach(&t, &ref, &o, &out_cbs, out_done, q, &e);
	if (!q->c) {
		api_reply_err(ctx, &e);
		out_free(q);
		return;
	}
	if (tmo > 0) {
		q->timer = evtimer_new(api_base, out_timeout, q);
		struct timeval tv = { (time_t)(tmo / 1000), (suseconds_t)(tmo % 1000) * 1000 };
		evtimer_add(q->timer, &tv);
	}
	ctx->on_gone = out_gone;
	ctx->on_gone_arg = q;
}

void api_process_output(struct http_ctx *ctx)
{
	attach(ctx, false, 0);
}

void api_process_wait(struct http_ctx *ctx)
{
	json_auto_t *body = NULL;
	if (http_body_json(ctx, &body) < 0)
		return;
	json_t *tv = json_object_get(body, "timeout");
	if (tv && !json_is_null(tv) &&
	    (!json_is_number(tv) || json_number_value(tv) < 0 || json_number_value(tv) > 1e12)) {
		http_reply_error(ctx, 400, "\"timeout\" must be a non-negative number of ms");
		return;
	}
	attach(ctx, true, tv ? (uint64_t)json_number_value(tv) : 0);
}

/* --- signal, kill, stdin, resize --------------------------------------------------------- */

static void on_signalled(struct ops_call *c, const struct ops_result *r, const struct err *err,
			 void *arg)
{
	struct http_ctx *ctx = arg;
	if (err)
		reply_proc_err(ctx, err);
	else
		http_reply_json(ctx, 200, json_pack("{s:b}", "signalled", 1));
}

static void send_signal(struct http_ctx *ctx, int sig)
{
	const char *id;
	struct ops_proc_ref ref;
	if (path_process(ctx, &id, &ref) < 0)
		return;
	struct ops_target t = api_request_target(ctx, id, NULL);
	struct err e;
	if (!ops_signal_process(&t, &ref, sig, on_signalled, ctx, &e))
		api_reply_err(ctx, &e);
}

void api_process_signal(struct http_ctx *ctx)
{
	json_auto_t *body = NULL;
	if (http_body_json(ctx, &body) < 0)
		return;
	json_t *v = json_object_get(body, "signal");
	int sig = -1;
	if (json_is_string(v))
		sig = signal_from_name(json_string_value(v));
	else if (json_is_integer(v) && json_integer_value(v) >= 1 && json_integer_value(v) <= 64)
		sig = (int)json_integer_value(v);
	if (sig < 0) {
		http_reply_error(ctx, 400,
				 "\"signal\" must be a signal name (TERM, KILL, INT, HUP, QUIT, "
				 "USR1, USR2, CONT, STOP, TSTP, WINCH, ALRM) or number");
		return;
	}
	send_signal(ctx, sig);
}

void api_process_kill(struct http_ctx *ctx)
{
	send_signal(ctx, 9);
}

static void on_input(struct ops_call *c, const struct ops_result *r, const struct err *err,
		     void *arg)
{
	struct http_ctx *ctx = arg;
	if (err) {
		reply_proc_err(ctx, err);
		return;
	}
	http_reply_json(ctx, 200, json_incref(r->info));
}

/* JSON {"data": "...", "encoding": "utf8"|"base64", "close": bool}, or the raw body
 * (application/octet-stream) with ?close=true. */
void api_process_stdin(struct http_ctx *ctx)
{
	const char *id;
	struct ops_proc_ref ref;
	if (path_process(ctx, &id, &ref) < 0)
		return;
	const char *ctype = http_header(ctx, "Content-Type");
	uint8_t *data = NULL;
	size_t len = 0;
	bool close = false;
	if (ctype && strncasecmp(ctype, "application/octet-stream", 24) == 0) {
		if (query_bool(ctx, "close", false, &close) < 0)
			return;
		const uint8_t *b = http_body(ctx, &len);
		data = xmalloc(len + 1);
		if (len)
			memcpy(data, b, len);
	} else {
		json_auto_t *body = NULL;
		if (http_body_json(ctx, &body) < 0)
			return;
		const char *encoding;
		if (api_opt_bool(ctx, body, "close", false, &close) < 0 ||
		    api_opt_string(ctx, body, "encoding", &encoding) < 0)
			return;
		json_t *d = json_object_get(body, "data");
		if (d && !json_is_null(d) && !json_is_string(d)) {
			http_reply_error(ctx, 400, "\"data\" must be a string");
			return;
		}
		const char *text = d ? json_string_value(d) : NULL;
		size_t tlen = text ? json_string_length(d) : 0;
		if (encoding && !strcmp(encoding, "base64")) {
			if (base64_decode(text ? text : "", tlen, &data, &len) < 0) {
				http_reply_error(ctx, 400, "\"data\" is not valid base64");
				return;
			}
		} else if (encoding && strcmp(encoding, "utf8") && strcmp(encoding, "utf-8")) {
			http_reply_error(ctx, 400, "\"encoding\" must be \"utf8\" or \"base64\"");
			return;
		} else {
			data = xmalloc(tlen + 1);
			if (tlen)
				memcpy(data, text, tlen);
			len = tlen;
		}
		if (!len && !close) {
			http_reply_error(ctx, 400,
					 "nothing to send: give \"data\" or \"close\": true");
			free(data);
			return;
		}
	}
	struct ops_target t = api_request_target(ctx, id, NULL);
	struct err e;
	if (!ops_process_input(&t, &ref, data, len, close, on_input, ctx, &e))
		api_reply_err(ctx, &e);
}

void api_process_resize(struct http_ctx *ctx)
{
	const char *id;
	struct ops_proc_ref ref;
	if (path_process(ctx, &id, &ref) < 0)
		return;
	json_auto_t *body = NULL;
	if (http_body_json(ctx, &body) < 0)
		return;
	json_t *rows = json_object_get(body, "rows"), *cols = json_object_get(body, "cols");
	if (!json_is_integer(rows) || !json_is_integer(cols) || json_integer_value(rows) < 1 ||
	    json_integer_value(cols) < 1 || json_integer_value(rows) > OPS_TERMINAL_MAX ||
	    json_integer_value(cols) > OPS_TERMINAL_MAX) {
		http_reply_error(ctx, 400, "\"rows\" and \"cols\" must be integers from 1 to %d",
				 OPS_TERMINAL_MAX);
		return;
	}
	struct ops_target t = api_request_target(ctx, id, NULL);
	struct err e;
	if (!ops_resize_process(&t, &ref, (unsigned)json_integer_value(rows),
				(unsigned)json_integer_value(cols), on_signalled, ctx, &e))
		api_reply_err(ctx, &e);
}
