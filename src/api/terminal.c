/* terminal: processes over WebSocket, an adapter of session/ops.h like the REST routes.
 *   POST /exec/:id/tickets                  a one-use ticket for an upgrade (auth/ticket.h)
 *   GET  /exec/:id/terminal                 a new process on a terminal (rows, cols, term,
 *                                           command, template in the query), ended when the
 *                                           socket closes (SIGHUP, then SIGKILL, by its agent)
 *   GET  /exec/:id/processes/:pid/ws        an existing process (replay in the query); the
 *                                           socket's end is only the attach's
 * Binary frames both ways are the process's input and output (a process without a terminal
 * sends its stderr as {"type":"stderr"} text); text frames from the client are the control
 * messages of ws_control.h; text frames to it are {"type":"started"|"gap"|"exit"|"error"}.
 * Close codes: 1000 the process ended (after its "exit"), 1001 the server is going away,
 * 1009 input faster than the process takes it, 1011 an internal failure, 4400 a bad request,
 * 4404 no such session or process, 4429 a limit was reached. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "api/api.h"
#include "cluster/cluster.h"
#include "api/ws_control.h"
#include "api/auth.h"
#include "auth/ticket.h"
#include "session/ops.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/text.h"

#define WS_MAX_MESSAGE (1u << 20)
#define WS_OUT_HIGH    (1u << 20) /* output queued to the client before the agent waits */
#define WS_IN_MAX      (1u << 20) /* input queued for the process before the socket closes */
#define WS_INPUT_CHUNK (256u << 10)

struct term {
	struct http_ws *ws; /* NULL once closed */
	char owner[40];
	char *sid;
	bool admin;
	struct ops_proc_ref ref;
	char tag[OPS_TAG_MAX + 1];
	bool own;    /* started by this socket: it ends with it */
	bool exited; /* its attach ended with the process */
	struct ops_call *spawn, *attach, *input;
	struct evbuffer *inq;
	bool eof_queued, eof_sent;
	size_t unacked; /* output bytes not handed back while the client is slow */
};

static struct ops_target term_target(const struct term *t)
{
	return (struct ops_target){ .owner = t->owner,
				    .session_id = t->sid,
				    .any_owner = t->admin };
}

static void term_free(struct term *t)
{
	if (t->inq)
		evbuffer_free(t->inq);
	free(t->sid);
	free(t);
}

static void send_json(struct term *t, json_t *j)
{
	if (!t->ws) {
		json_decref(j);
		return;
	}
	_cleanup_free_ char *text = json_dumps(j, JSON_COMPACT | JSON_REAL_PRECISION(15));
	json_decref(j);
	http_ws_send(t->ws, false, text, strlen(text));
}

/* An error event, unless the client has not read what it was sent: then the message is
 * dropped (a client that floods bad messages and reads nothing costs nothing). */
static void send_error(struct term *t, const char *msg, int status)
{
	if (t->ws && http_ws_pending(t->ws) < WS_OUT_HIGH)
		send_json(t, json_pack("{s:s, s:s, s:i}", "type", "error", "error", msg, "status",
				       status));
}

static uint16_t close_code(int errnum)
{
	switch (errnum) {
	case ENOENT:
	case ESRCH:
		return 4404;
	case EAGAIN:
	case ENOBUFS:
		return 4429;
	case EINVAL:
	case ENOEXEC:
	case EACCES:
	case ENOTDIR:
		return 4400;
	case ESHUTDOWN:
		return 1001;
	default:
		return 1011;
	}
}

static void fail(struct term *t, const struct err *err)
{
	if (!t->ws)
		return;
	send_json(t, json_pack("{s:s, s:s, s:i}", "type", "error", "error", err->msg, "status",
			       http_status_for_errno(err->errnum)));
	http_ws_close(t->ws, close_code(err->errnum), "see the error message");
}

static void ignore_done(struct ops_call *c, const struct ops_result *r, const struct err *err,
			void *arg)
{
}

/* --- a process that ends with its socket ---------------------------------------------- */

/* Its attach carries the hangup (ops_attach_opts.hangup): the agent ends the process when
 * the attach goes, with no timer here and no doubt about which process. Only a process whose
 * socket went before its attach began is ended from here, at once: it was just started, and
 * its owner holds no quota for it (admitted: ending one's own terminal never waits for one). */
static void kill_unattached(struct term *t)
{
	if (!t->own || !t->ref.pid || t->exited)
		return;
	struct ops_target tt = term_target(t);
	tt.admitted = true;
	struct err e;
	if (!ops_signal_process(&tt, &t->ref, 9, ignore_done, NULL, &e))
		log_warn("api", "cannot end terminal process %d of session %s: %s", t->ref.pid,
			 t->sid, e.msg);
}

static void pump_input(struct term *t);

/* --- output --------------------------------------------------------------------------- */

static void on_output(struct ops_call *c, enum ops_stream stream, const uint8_t *data, size_t len,
		      void *arg)
{
	struct term *t = arg;
	if (stream == OPS_STDERR) {
		size_t n;
		_cleanup_free_ char *text = utf8_sanitize(data, len, &n);
		send_json(t, json_pack("{s:s, s:s%}", "type", "stderr", "data", text, n));
	} else if (t->ws) {
		http_ws_send(t->ws, true, data, len);
	}
	/* The agent sends more once the client has taken this (ws_drain). */
	if (t->ws && http_ws_pending(t->ws) >= WS_OUT_HIGH)
		t->unacked += len;
	else
		ops_call_consumed(c, len);
}

static void on_gap(struct ops_call *c, uint64_t bytes, void *arg)
{
	send_json(arg, json_pack("{s:s, s:I}", "type", "gap", "bytes", (json_int_t)bytes));
}

static void on_attach_done(struct ops_call *c, const struct ops_result *r, const struct err *err,
			   void *arg)
{
	struct term *t = arg;
	t->attach = NULL;
	if (err) {
		fail(t, err);
		return;
	}
	json_t *p = r->info;
	t->exited = !json_is_true(json_object_get(p, "detached"));
	send_json(t, json_pack("{s:s, s:O, s:O, s:O}", "type", "exit", "exitCode",
			       json_object_get(p, "exitCode"), "signal",
			       json_object_get(p, "signal"), "process", p));
	if (t->ws)
		http_ws_close(t->ws, 1000, "the process ended");
}

/* From now on the process is named by its pid (a tag may pass to a newer process). */
static void on_attached(struct ops_call *c, int pid, void *arg)
{
	struct term *t = arg;
	t->ref.pid = pid;
	t->ref.tag = NULL;
	pump_input(t);
}

static const struct ops_attach_cbs attach_cbs = { .on_attached = on_attached,
						  .on_output = on_output,
						  .on_gap = on_gap };

static void start_attach(struct term *t, int64_t replay)
{
	struct ops_target tt = term_target(t);
	struct ops_attach_opts o = {
		.replay_bytes = replay, .output = true, .follow = true, .hangup = t->own
	};
	struct err e;
	t->attach = ops_attach(&tt, &t->ref, &o, &attach_cbs, on_attach_done, t, &e);
	if (!t->attach)
		fail(t, &e);
}

/* --- input ---------------------------------------------------------------------------- */

static void on_input_done(struct ops_call *c, const struct ops_result *r, const struct err *err,
			  void *arg)
{
	struct term *t = arg;
	t->input = NULL;
	if (err) {
		send_error(t, err->msg, http_status_for_errno(err->errnum));
		evbuffer_drain(t->inq, evbuffer_get_length(t->inq));
		return;
	}
	pump_input(t);
}

/* One input call at a time, with what has queued meanwhile. */
static void pump_input(struct term *t)
{
	size_t n = evbuffer_get_length(t->inq);
	if (t->input || !t->ws || !t->ref.pid || (!n && (!t->eof_queued || t->eof_sent)))
		return;
	if (n > WS_INPUT_CHUNK)
		n = WS_INPUT_CHUNK;
	uint8_t *data = xmalloc(n + 1);
	evbuffer_remove(t->inq, data, n);
	bool close = t->eof_queued && evbuffer_get_length(t->inq) == 0;
	t->eof_sent |= close;
	struct ops_target tt = term_target(t);
	struct err e;
	t->input = ops_process_input(&tt, &t->ref, data, n, close, on_input_done, t, &e);
	if (!t->input)
		fail(t, &e);
}

static void queue_input(struct term *t, const void *data, size_t len)
{
	if (evbuffer_get_length(t->inq) + len > WS_IN_MAX) {
		http_ws_close(t->ws, 1009, "input arrives faster than the process takes it");
		return;
	}
	evbuffer_add(t->inq, data, len);
	pump_input(t);
}

static void ws_message(struct http_ws *ws, bool binary, const uint8_t *data, size_t len, void *arg)
{
	struct term *t = arg;
	if (binary) {
		queue_input(t, data, len);
		return;
	}
	struct ws_control ctl;
	struct err e;
	if (ws_control_parse(data, len, &ctl, &e) < 0) {
		send_error(t, e.msg, 400);
		return;
	}
	struct ops_target tt = term_target(t);
	if (!t->ref.pid && (ctl.type == WS_CTL_RESIZE || ctl.type == WS_CTL_SIGNAL)) {
		send_error(t, "the process has not started yet", 409);
	} else if (ctl.type == WS_CTL_RESIZE) {
		/* Answered later; the socket may be gone by then, so no handle is kept. */
		if (!ops_resize_process(&tt, &t->ref, ctl.rows, ctl.cols, ignore_done, NULL, &e))
			send_error(t, e.msg, http_status_for_errno(e.errnum));
	} else if (ctl.type == WS_CTL_SIGNAL) {
		if (!ops_signal_process(&tt, &t->ref, ctl.signal, ignore_done, NULL, &e))
			send_error(t, e.msg, http_status_for_errno(e.errnum));
	} else if (ctl.type == WS_CTL_INPUT) {
		queue_input(t, ctl.data, ctl.len);
	} else {
		t->eof_queued = true;
		pump_input(t);
	}
	ws_control_fini(&ctl);
}

static void ws_drain(struct http_ws *ws, void *arg)
{
	struct term *t = arg;
	if (t->attach && t->unacked) {
		ops_call_consumed(t->attach, t->unacked);
		t->unacked = 0;
	}
}

static void ws_closed(struct http_ws *ws, uint16_t code, void *arg)
{
	struct term *t = arg;
	t->ws = NULL;
	if (t->attach)
		ops_call_detach(t->attach);
	if (t->input)
		ops_call_detach(t->input);
	t->attach = t->input = NULL;
	/* A start still on its way: its answer ends what it started (on_spawned). */
	if (!t->spawn)
		term_free(t);
}

static const struct http_ws_ops ws_ops = { .message = ws_message,
					   .drain = ws_drain,
					   .closed = ws_closed };

/* --- the routes ------------------------------------------------------------------------ */

static struct term *term_new(struct http_ctx *ctx, const char *sid)
{
	struct term *t = xcalloc(1, sizeof(*t));
	snprintf(t->owner, sizeof(t->owner), "%s", api_owner(ctx));
	t->sid = xstrdup(sid);
	t->admin = api_is_admin(ctx);
	t->inq = evbuffer_new();
	return t;
}

static void on_spawned(struct ops_call *c, const struct ops_result *r, const struct err *err,
		       void *arg)
{
	struct term *t = arg;
	t->spawn = NULL;
	if (!err)
		t->ref.pid = (int)json_integer_value(json_object_get(r->info, "pid"));
	if (!t->ws) {
		/* The socket went while it started: so does the process. */
		kill_unattached(t);
		term_free(t);
		return;
	}
	if (err) {
		fail(t, err);
		return;
	}
	send_json(t, json_pack("{s:s, s:i, s:O}", "type", "started", "pid", t->ref.pid, "process",
			       r->info));
	start_attach(t, -1);
	pump_input(t);
}

/* An unsigned query number within [min, max], or def; replies 400 and returns -1 if bad. */
static int query_num(struct http_ctx *ctx, const char *name, long long min, long long max,
		     long long def, long long *ret)
{
	const char *v = http_query(ctx, name);
	*ret = def;
	if (!v)
		return 0;
	char *end;
	long long n = strtoll(v, &end, 10);
	if (!*v || *end || n < min || n > max) {
		http_reply_error(ctx, 400, "`%s` must be an integer from %lld to %lld", name, min,
				 max);
		return -1;
	}
	*ret = n;
	return 0;
}

void api_terminal_open(struct http_ctx *ctx)
{
	const char *sid = api_path_session_id(ctx);
	if (!sid)
		return;
	long long rows, cols;
	if (query_num(ctx, "rows", 1, OPS_TERMINAL_MAX, 24, &rows) < 0 ||
	    query_num(ctx, "cols", 1, OPS_TERMINAL_MAX, 80, &cols) < 0)
		return;
	const char *command = http_query(ctx, "command");
	const char *term = http_query(ctx, "term");
	const char *tmpl = http_query(ctx, "template");
	struct ops_spawn_req req = {
		/* The template's login shell: bash where it has one. */
		.x = { .command = command && *command
					  ? command
					  : "if command -v bash >/dev/null; then exec bash -il; "
					    "else exec sh -il; fi" },
		.pty = true,
		.rows = (unsigned)rows,
		.cols = (unsigned)cols,
		.term = term && *term ? term : NULL,
	};
	req.x.user = http_query(ctx, "user");
	if ((command && !utf8_valid((const uint8_t *)command, strlen(command))) ||
	    (term && (!utf8_valid((const uint8_t *)term, strlen(term)) || strlen(term) > 64))) {
		http_reply_error(ctx, 400, "`command` and `term` must be UTF-8 text");
		return;
	}
	struct term *t = term_new(ctx, sid);
	t->own = true;
	struct ops_target tt = api_request_target(ctx, sid, tmpl);
	tt.admitted = false;
	struct err e;
	/* Judged before the upgrade, so that a bad request gets its status. */
	t->spawn = ops_spawn(&tt, &req, on_spawned, t, &e);
	if (!t->spawn) {
		api_reply_err(ctx, &e);
		term_free(t);
		return;
	}
	t->ws = http_ws_accept(ctx, NULL, &ws_ops, t, WS_MAX_MESSAGE);
	if (!t->ws) {
		/* Not a handshake (replied to): what the start begins ends when it answers. */
		ws_closed(NULL, 0, t);
	}
}

void api_process_ws(struct http_ctx *ctx)
{
	const char *sid = api_path_session_id(ctx);
	if (!sid)
		return;
	struct ops_proc_ref ref;
	struct err e;
	if (ops_proc_ref_parse(http_param(ctx, 1), &ref, &e) < 0) {
		api_reply_err(ctx, &e);
		return;
	}
	long long replay;
	if (query_num(ctx, "replay", -1, 1LL << 40, -1, &replay) < 0)
		return;
	struct term *t = term_new(ctx, sid);
	if (ref.tag) {
		snprintf(t->tag, sizeof(t->tag), "%s", ref.tag);
		t->ref.tag = t->tag;
	}
	t->ref.pid = ref.pid;
	t->ws = http_ws_accept(ctx, NULL, &ws_ops, t, WS_MAX_MESSAGE);
	if (!t->ws) {
		term_free(t);
		return;
	}
	start_attach(t, replay);
}

void api_ticket_create(struct http_ctx *ctx)
{
	const char *sid = api_path_session_id(ctx);
	if (!sid)
		return;
	const struct auth_identity *id = auth_identity(ctx);
	char ticket[TICKET_LEN + 1];
	struct err e;
	if (ticket_issue(id ? id->key_id : "", id ? id->scopes : 0, sid, ticket, &e) < 0) {
		api_reply_err(ctx, &e);
		return;
	}
	/* In a cluster it names this node ("<node>~..."): any node sends its upgrade here. */
	_cleanup_free_ char *shown = cluster_enabled()
					     ? xasprintf("%s~%s", cluster_node_name(), ticket)
					     : xstrdup(ticket);
	http_reply_json(ctx, 201,
			json_pack("{s:s, s:i, s:s}", "ticket", shown, "expiresInMs", TICKET_TTL_MS,
				  "sessionId", sid));
}
