/* interp: the code interpreter of the E2B-compatible API (docs/e2b.md), what
 * `@e2b/code-interpreter` sends to port 49999 of a sandbox, served here:
 *   POST   /execute               run code in a context; NDJSON results as they come
 *   POST   /contexts              a new context {id, language, cwd}
 *   GET    /contexts              the sandbox's contexts
 *   DELETE /contexts/:id          end one
 *   POST   /contexts/:id/restart  a fresh interpreter for it
 *
 * A context is a background process of the sandbox (session/ops.h), tagged by its id: a small
 * interpreter loop (Python, or JavaScript with node) that reads one request line per
 * execution from its stdin and keeps its variables between them. Its user's output goes to
 * stdout and stderr as usual; its results come on stdout in marker lines that begin with
 * "\x1eE2BM" and the execution's nonce (random, so code cannot forge another execution's
 * end), which are taken out of the output. In Python the figures of matplotlib open at the
 * end of an execution are png results, and a value's _repr_html_ its html. The caller
 * (envd.c) has checked the sandbox and its token; a pause ends the reply (api_envd_hold). */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "session/ops.h"
#include "session/session.h"
#include "util/cleanup.h"
#include "util/random.h"
#include "util/text.h"
#include "util/time.h"
#include "util/timejson.h"

#define MARKER \
	"\x1e" \
	"E2BM"
#define MARKER_LEN   5
#define NONCE_LEN    32
#define RESULT_MAX   (8u << 20) /* one result's marker line */
#define CONTEXTS_MAX 16
#define CODE_MAX     (4u << 20)
#define HIGH_WATER   (512u << 10)

/* The interpreter loops: one JSON request a line {nonce, code, env}; each result and the end
 * as a marker line on stdout. The last statement's value, if an expression, is the main
 * result (its repr, and JSON for lists and dicts). */
static const char python_loop[] =
	"import ast, base64, io, json, os, sys, traceback, warnings\n"
	"ns = {'__name__': '__main__'}\n"
	"warnings.filterwarnings('ignore', message='.*non-interactive.*')\n"
	"def figures(n):\n"
	"    plt = sys.modules.get('matplotlib.pyplot')\n"
	"    if plt is None: return\n"
	"    for num in plt.get_fignums():\n"
	"        f = plt.figure(num); b = io.BytesIO()\n"
	"        try:\n"
	"            f.savefig(b, format='png')\n"
	"            mark(n, {'type': 'result', 'png': base64.b64encode(b.getvalue()).decode(),\n"
	"                     'text': repr(f), 'is_main_result': False})\n"
	"        except Exception as e:\n"
	"            mark(n, {'type': 'stderr', 'text': 'figure %d: %r\\n' % (num, e)})\n"
	"    plt.close('all')\n"
	"def mark(n, o):\n"
	"    sys.stdout.flush()\n"
	"    sys.stdout.write('\\x1eE2BM' + n + json.dumps(o) + '\\n'); sys.stdout.flush()\n"
	"class Err:\n"
	"    n = ''\n"
	"    def write(self, t):\n"
	"        if t: mark(self.n, {'type': 'stderr', 'text': t})\n"
	"        return len(t)\n"
	"    def flush(self): pass\n"
	"    def isatty(self): return False\n"
	"err = Err(); sys.stderr = err\n"
	"for line in sys.stdin:\n"
	"    try:\n"
	"        req = json.loads(line); n = str(req['nonce'])\n"
	"    except Exception:\n"
	"        continue\n"
	"    err.n = n\n"
	"    env = req.get('env') or {}\n"
	"    saved = {k: os.environ.get(k) for k in env}\n"
	"    os.environ.update({str(k): str(v) for k, v in env.items()})\n"
	"    try:\n"
	"        tree = ast.parse(req.get('code') or '', '<cell>', 'exec')\n"
	"        last = None\n"
	"        if tree.body and isinstance(tree.body[-1], ast.Expr):\n"
	"            last = ast.Expression(tree.body.pop().value)\n"
	"        exec(compile(tree, '<cell>', 'exec'), ns)\n"
	"        if last is not None:\n"
	"            v = eval(compile(last, '<cell>', 'eval'), ns)\n"
	"        figures(n)\n"
	"        if last is not None and v is not None:\n"
	"                r = {'type': 'result', 'text': repr(v), 'is_main_result': True}\n"
	"                h = getattr(v, '_repr_html_', None)\n"
	"                if callable(h):\n"
	"                    try:\n"
	"                        t = h()\n"
	"                        if isinstance(t, str): r['html'] = t\n"
	"                    except Exception:\n"
	"                        pass\n"
	"                if isinstance(v, (dict, list)):\n"
	"                    try:\n"
	"                        r['json'] = json.loads(json.dumps(v))\n"
	"                    except Exception:\n"
	"                        pass\n"
	"                mark(n, r)\n"
	"    except BaseException as e:\n"
	"        mark(n, {'type': 'error', 'name': type(e).__name__, 'value': str(e),\n"
	"                 'traceback': traceback.format_exc()})\n"
	"    finally:\n"
	"        for k, v in saved.items():\n"
	"            if v is None: os.environ.pop(k, None)\n"
	"            else: os.environ[k] = v\n"
	"    mark(n, {'type': 'end'})\n";

static const char js_loop[] =
	"const vm = require('vm'), util = require('util'), rl = require('readline');\n"
	"const g = { console, require, process, Buffer, setTimeout, clearTimeout, setInterval,\n"
	"  clearInterval, URL, TextEncoder, TextDecoder };\n"
	"const ctx = vm.createContext(g);\n"
	"const mark = (n, o) => process.stdout.write('\\x1eE2BM' + n + JSON.stringify(o) + "
	"'\\n');\n"
	"let cur = '';\n"
	"process.stderr.write = (t) => { mark(cur, { type: 'stderr', text: String(t) }); return "
	"true; };\n"
	"const q = []; let busy = false;\n"
	"async function run() {\n"
	"  if (busy) return; busy = true;\n"
	"  while (q.length) {\n"
	"    let r; try { r = JSON.parse(q.shift()); } catch { continue; }\n"
	"    const n = String(r.nonce); cur = n; Object.assign(process.env, r.env || {});\n"
	"    try {\n"
	"      let v = vm.runInContext(r.code || '', ctx, { filename: '<cell>' });\n"
	"      if (v && typeof v.then === 'function') v = await v;\n"
	"      if (v !== undefined) {\n"
	"        const res = { type: 'result', text: typeof v === 'string' ? v : util.inspect(v),\n"
	"          is_main_result: true };\n"
	"        if (v !== null && typeof v === 'object') { try { res.json = "
	"JSON.parse(JSON.stringify(v)); } catch {} }\n"
	"        mark(n, res);\n"
	"      }\n"
	"    } catch (e) {\n"
	"      mark(n, { type: 'error', name: (e && e.name) || 'Error', value: (e && e.message) || "
	"String(e),\n"
	"        traceback: (e && e.stack) || String(e) });\n"
	"    }\n"
	"    mark(n, { type: 'end' });\n"
	"  }\n"
	"  busy = false;\n"
	"}\n"
	"rl.createInterface({ input: process.stdin }).on('line', (l) => { q.push(l); run(); });\n";

static void reply_error(struct http_ctx *ctx, int status, const char *msg)
{
	/* The SDK shows a non-2xx body as text (404: NotFoundError). */
	api_e2b_error(ctx, status, "%s", msg);
}

static const char *language_of(const char *l)
{
	if (!l || !*l || !strcmp(l, "python") || !strcmp(l, "python3"))
		return "python";
	if (!strcmp(l, "js") || !strcmp(l, "javascript") || !strcmp(l, "node"))
		return "js";
	return NULL;
}

static json_t *contexts_of(struct session *s)
{
	if (!s->e2b_contexts)
		s->e2b_contexts = json_object();
	return s->e2b_contexts;
}

static json_t *context_json(const char *id, json_t *c)
{
	return json_pack("{s:s, s:O, s:O}", "id", id, "language", json_object_get(c, "language"),
			 "cwd", json_object_get(c, "cwd"));
}

/* A new context entry (not started: its process is spawned at its first execution). */
static json_t *context_add(struct session *s, const char *id, const char *language, const char *cwd)
{
	json_t *c =
		json_pack("{s:s, s:s, s:s, s:b, s:i}", "language", language, "cwd",
			  cwd && *cwd ? cwd : "/home/user", "tag", "", "busy", 0, "executions", 0);
	_cleanup_free_ char *tag = xasprintf("e2b-ctx-%s", id);
	json_object_set_new(c, "tag", json_string(tag));
	json_object_set_new(contexts_of(s), id, c);
	return c;
}

/* --- execute ------------------------------------------------------------------------ */

struct run {
	struct http_ctx *ctx;
	char *owner, *sid, *ctx_id, *tag, *language, *cwd;
	char nonce[NONCE_LEN + 1];
	uint8_t *frame;
	size_t frame_len;
	struct ops_call *attach, *input, *spawn;
	bool spawned, started, ended;
	bool input_ok;     /* the interpreter took the request */
	bool attach_ended; /* the process ended while the input was in flight */
	/* stdout not yet given on: a marker's possible beginning, or a marker line */
	uint8_t *pend;
	size_t pend_len;
	bool in_marker;
	uint8_t carry[2][4];
	size_t carry_len[2];
	size_t unacked;
	bool paused;
	struct envd_hold hold; /* a pause ends the execution's reply */
};

static void run_free(struct run *r)
{
	api_envd_release(&r->hold);
	free(r->owner);
	free(r->sid);
	free(r->ctx_id);
	free(r->tag);
	free(r->language);
	free(r->cwd);
	free(r->frame);
	free(r->pend);
	free(r);
}

static json_t *context_entry(struct run *r)
{
	struct session *s = session_find(r->owner, r->sid);
	return s && s->e2b_contexts ? json_object_get(s->e2b_contexts, r->ctx_id) : NULL;
}

static void set_busy(struct run *r, bool busy)
{
	json_t *c = context_entry(r);
	if (c)
		json_object_set_new(c, "busy", json_boolean(busy));
}

static void line(struct run *r, json_t *obj)
{
	if (!r->started) {
		r->started = true;
		http_stream_start(r->ctx, 200, "application/x-ndjson");
	}
	_cleanup_free_ char *text = json_dumps(obj, JSON_COMPACT);
	json_decref(obj);
	size_t n = strlen(text);
	http_stream_write(r->ctx, text, n);
	http_stream_write(r->ctx, "\n", 1);
}

/* Output text of stream si (0 stdout, 1 stderr), cut only between UTF-8 characters. */
static void text(struct run *r, int si, const uint8_t *data, size_t len, bool flush)
{
	size_t total = r->carry_len[si] + len;
	_cleanup_free_ uint8_t *buf = xmalloc(total ? total : 1);
	memcpy(buf, r->carry[si], r->carry_len[si]);
	if (len)
		memcpy(buf + r->carry_len[si], data, len);
	size_t tail = flush ? 0 : utf8_incomplete_tail(buf, total);
	memcpy(r->carry[si], buf + total - tail, tail);
	r->carry_len[si] = tail;
	if (total - tail == 0)
		return;
	size_t tn;
	_cleanup_free_ char *t = utf8_sanitize(buf, total - tail, &tn);
	json_t *o = json_pack("{s:s, s:s%}", "type", si ? "stderr" : "stdout", "text", t, tn);
	json_object_set_new(o, "timestamp", time_iso8601_json(time_wall_ms()));
	line(r, o);
}

static void finish(struct run *r, const char *error)
{
	if (r->ended)
		return;
	r->ended = true;
	text(r, 0, NULL, 0, true);
	text(r, 1, NULL, 0, true);
	if (error)
		line(r, json_pack("{s:s, s:s, s:s, s:s}", "type", "error", "name", "ContextError",
				  "value", error, "traceback", error));
	json_t *c = context_entry(r);
	int count = c ? (int)json_integer_value(json_object_get(c, "executions")) : 0;
	line(r, json_pack("{s:s, s:i}", "type", "number_of_executions", "execution_count", count));
	line(r, json_pack("{s:s}", "type", "end_of_execution"));
	set_busy(r, false);
	r->ctx->on_gone = NULL;
	http_stream_on_drain(r->ctx, 0, NULL, NULL);
	http_stream_end(r->ctx);
	if (r->attach)
		ops_call_detach(r->attach);
	if (r->input)
		ops_call_detach(r->input);
	if (r->spawn)
		ops_call_detach(r->spawn);
	run_free(r);
}

/* A marker line's JSON (the nonce first): results and errors go on, the end ends. Returns
 * true when the run ended (r is freed). */
static bool marker(struct run *r, const uint8_t *m, size_t n)
{
	if (n < NONCE_LEN || memcmp(m, r->nonce, NONCE_LEN) != 0)
		return false; /* an earlier execution's, whose client left */
	json_error_t je;
	json_t *o = json_loadb((const char *)m + NONCE_LEN, n - NONCE_LEN, 0, &je);
	const char *type = json_string_value(json_object_get(o, "type"));
	if (!type) {
		json_decref(o);
		return false;
	}
	if (!strcmp(type, "end")) {
		json_decref(o);
		finish(r, NULL);
		return true;
	}
	if (!strcmp(type, "stderr")) {
		/* The interpreter's sys.stderr, in order with its stdout. */
		const char *t = json_string_value(json_object_get(o, "text"));
		if (t)
			text(r, 1, (const uint8_t *)t, strlen(t), false);
		json_decref(o);
		return false;
	}
	if (!strcmp(type, "result") || !strcmp(type, "error")) {
		/* Output before it first, in order. */
		text(r, 0, NULL, 0, true);
		line(r, o);
		return false;
	}
	json_decref(o);
	return false;
}

/* Takes stdout bytes: output, and the marker lines cut out of it. True when the run ended. */
static bool stdout_bytes(struct run *r, const uint8_t *data, size_t len)
{
	r->pend = xrealloc(r->pend, r->pend_len + len + 1);
	memcpy(r->pend + r->pend_len, data, len);
	r->pend_len += len;
	for (;;) {
		if (r->in_marker) {
			uint8_t *nl = memchr(r->pend, '\n', r->pend_len);
			if (!nl) {
				if (r->pend_len > RESULT_MAX) {
					finish(r, "a result was larger than the server takes");
					return true;
				}
				return false;
			}
			size_t n = (size_t)(nl - r->pend);
			r->in_marker = false;
			bool ended = marker(r, r->pend, n);
			if (ended)
				return true;
			memmove(r->pend, nl + 1, r->pend_len - n - 1);
			r->pend_len -= n + 1;
			continue;
		}
		uint8_t *m = r->pend_len >= MARKER_LEN
				     ? memmem(r->pend, r->pend_len, MARKER, MARKER_LEN)
				     : NULL;
		if (m) {
			size_t at = (size_t)(m - r->pend);
			text(r, 0, r->pend, at, false);
			memmove(r->pend, m + MARKER_LEN, r->pend_len - at - MARKER_LEN);
			r->pend_len -= at + MARKER_LEN;
			r->in_marker = true;
			continue;
		}
		/* Keep what may be the beginning of a marker. */
		size_t keep = 0;
		for (size_t k = MARKER_LEN - 1; k > 0; k--)
			if (r->pend_len >= k && !memcmp(r->pend + r->pend_len - k, MARKER, k)) {
				keep = k;
				break;
			}
		text(r, 0, r->pend, r->pend_len - keep, false);
		memmove(r->pend, r->pend + r->pend_len - keep, keep);
		r->pend_len = keep;
		return false;
	}
}

static void run_drained(struct http_ctx *ctx, void *arg)
{
	struct run *r = arg;
	r->paused = false;
	if (r->attach && r->unacked) {
		ops_call_consumed(r->attach, r->unacked);
		r->unacked = 0;
	}
}

static void on_output(struct ops_call *c, enum ops_stream stream, const uint8_t *data, size_t len,
		      void *arg)
{
	struct run *r = arg;
	if (stream == OPS_STDERR)
		text(r, 1, data, len, false);
	else if (stdout_bytes(r, data, len))
		return; /* ended: the attach is detached, r freed */
	if (r->paused || http_stream_pending(r->ctx) >= HIGH_WATER) {
		r->unacked += len;
		if (!r->paused) {
			r->paused = true;
			http_stream_on_drain(r->ctx, HIGH_WATER / 2, run_drained, r);
		}
		return;
	}
	ops_call_consumed(c, len);
}

static void respawn(struct run *r);

static void on_input(struct ops_call *c, const struct ops_result *res, const struct err *err,
		     void *arg)
{
	struct run *r = arg;
	r->input = NULL;
	if (err) {
		/* A context whose interpreter ended before (exit(), a crash) starts again. */
		if (!r->spawned)
			respawn(r);
		else
			finish(r, err->msg);
		return;
	}
	r->input_ok = true;
	if (r->attach_ended)
		finish(r, "the context's interpreter ended; it starts again at the next execution");
}

static void start_attach(struct run *r);

static void on_attached(struct ops_call *c, int pid, void *arg)
{
	struct run *r = arg;
	struct ops_target t = { .owner = r->owner, .session_id = r->sid };
	struct ops_proc_ref ref = { .tag = r->tag };
	/* A copy: the request is sent again if the interpreter has to be started anew. */
	uint8_t *frame = xmalloc(r->frame_len);
	memcpy(frame, r->frame, r->frame_len);
	struct err e;
	r->input = ops_process_input(&t, &ref, frame, r->frame_len, false, on_input, r, &e);
	if (!r->input)
		finish(r, e.msg);
}

static void on_spawned(struct ops_call *c, const struct ops_result *res, const struct err *err,
		       void *arg)
{
	struct run *r = arg;
	r->spawn = NULL;
	if (err) {
		finish(r, err->msg);
		return;
	}
	start_attach(r);
}

static void spawn_context(struct run *r)
{
	struct ops_spawn_req req = { 0 };
	bool py = !strcmp(r->language, "python");
	json_auto_t *args = py ? json_pack("[s, s, s]", "-u", "-c", python_loop)
			       : json_pack("[s, s]", "-e", js_loop);
	req.x.command = py ? "python3" : "node";
	req.x.args = args;
	req.x.has_timeout = true; /* none: it lives as long as the context */
	_cleanup_free_ char *cwd = NULL;
	if (r->cwd && !strncmp(r->cwd, "/home/user", 10) && (r->cwd[10] == '/' || !r->cwd[10])) {
		const char *rest = r->cwd + 10;
		while (*rest == '/')
			rest++;
		cwd = xstrdup(rest);
	} else if (r->cwd) {
		cwd = xstrdup(r->cwd);
	}
	req.x.cwd = cwd && *cwd ? cwd : NULL;
	req.tag = r->tag;
	req.stdin_open = true;
	struct ops_target t = { .owner = r->owner, .session_id = r->sid };
	struct err e;
	r->spawned = true;
	r->spawn = ops_spawn(&t, &req, on_spawned, r, &e);
	if (!r->spawn)
		finish(r, e.msg);
}

static void on_attach_done(struct ops_call *c, const struct ops_result *res, const struct err *err,
			   void *arg)
{
	struct run *r = arg;
	r->attach = NULL;
	/* No process by that tag (or it ended before taking the request): start the context's
	 * interpreter, once. */
	if (err && err->errnum == ESRCH && !r->spawned) {
		respawn(r);
		return;
	}
	if (err) {
		finish(r, err->msg);
		return;
	}
	if (r->input) {
		r->attach_ended = true; /* on_input decides */
		return;
	}
	if (!r->input_ok && !r->spawned) {
		respawn(r);
		return;
	}
	/* The interpreter ended during the execution (exit(), a crash). */
	finish(r, "the context's interpreter ended; it starts again at the next execution");
}

static const struct ops_attach_cbs attach_cbs = { .on_attached = on_attached,
						  .on_output = on_output };

static void start_attach(struct run *r)
{
	struct ops_target t = { .owner = r->owner, .session_id = r->sid };
	struct ops_proc_ref ref = { .tag = r->tag };
	struct ops_attach_opts o = { .replay_bytes = 0, .output = true, .follow = true };
	struct err e;
	r->attach = ops_attach(&t, &ref, &o, &attach_cbs, on_attach_done, r, &e);
	if (!r->attach) {
		if (e.errnum == ESRCH && !r->spawned)
			respawn(r);
		else
			finish(r, e.msg);
	}
}

/* A fresh interpreter for the context, under a new tag (the old process, if any, may still
 * be ending), then the request again. */
static void respawn(struct run *r)
{
	if (r->attach) {
		ops_call_detach(r->attach);
		r->attach = NULL;
	}
	char gen[9];
	random_hex(gen, 4);
	free(r->tag);
	r->tag = xasprintf("e2b-ctx-%.32s-%s", r->ctx_id, gen);
	json_t *c = context_entry(r);
	if (c)
		json_object_set_new(c, "tag", json_string(r->tag));
	r->attach_ended = false;
	r->input_ok = false;
	spawn_context(r);
}

static void run_gone(struct http_ctx *ctx, void *arg)
{
	struct run *r = arg;
	/* The execution goes on in the interpreter; its markers will not match the next one's
	 * nonce. */
	set_busy(r, false);
	if (r->attach)
		ops_call_detach(r->attach);
	if (r->input)
		ops_call_detach(r->input);
	if (r->spawn)
		ops_call_detach(r->spawn);
	http_stream_on_drain(ctx, 0, NULL, NULL);
	run_free(r);
	if (ctx->streaming)
		http_stream_abort(ctx);
}

/* A pause: the reply ends with an error (the code is paused with the interpreter, and goes
 * on after the resume, unseen). */
static void run_cut(struct envd_hold *h)
{
	struct run *r = (struct run *)(void *)((char *)h - offsetof(struct run, hold));
	finish(r, "the sandbox was paused during the execution");
}

static void execute(struct http_ctx *ctx, struct session *s, json_t *body)
{
	json_t *code = json_object_get(body, "code"), *cid = json_object_get(body, "context_id");
	json_t *lang = json_object_get(body, "language"), *env = json_object_get(body, "env_vars");
	if (!json_is_string(code) || json_string_length(code) > CODE_MAX ||
	    (cid && !json_is_null(cid) && !json_is_string(cid)) ||
	    (lang && !json_is_null(lang) && !json_is_string(lang)) ||
	    (env && !json_is_null(env) && !json_is_object(env))) {
		reply_error(ctx, 400,
			    "the body must have \"code\" (a string), and may have "
			    "\"context_id\", \"language\" and \"env_vars\"");
		return;
	}
	struct err e;
	if (json_is_object(env) && ops_check_env(env, &e) < 0) {
		reply_error(ctx, 400, e.msg);
		return;
	}
	json_t *contexts = contexts_of(s);
	const char *id;
	json_t *c;
	if (json_is_string(cid)) {
		id = json_string_value(cid);
		c = json_object_get(contexts, id);
		if (!c) {
			reply_error(ctx, 404, "no such context");
			return;
		}
	} else {
		const char *l = language_of(json_string_value(lang));
		if (!l) {
			reply_error(ctx, 400, "languages: python, js");
			return;
		}
		id = !strcmp(l, "python") ? "default-python" : "default-js";
		c = json_object_get(contexts, id);
		if (!c)
			c = context_add(s, id, l, NULL);
	}
	if (json_is_true(json_object_get(c, "busy"))) {
		reply_error(ctx, 409, "the context is running another execution");
		return;
	}
	struct run *r = xcalloc(1, sizeof(*r));
	r->ctx = ctx;
	r->owner = xstrdup(s->owner);
	r->sid = xstrdup(s->id);
	r->ctx_id = xstrdup(id);
	r->tag = xstrdup(json_string_value(json_object_get(c, "tag")));
	r->language = xstrdup(json_string_value(json_object_get(c, "language")));
	r->cwd = xstrdup(json_string_value(json_object_get(c, "cwd")));
	random_hex(r->nonce, NONCE_LEN / 2);
	json_auto_t *req = json_pack("{s:s, s:O, s:O}", "nonce", r->nonce, "code", code, "env",
				     json_is_object(env) ? env : json_object());
	if (!json_is_object(env))
		json_decref(json_object_get(req, "env"));
	char *t = json_dumps(req, JSON_COMPACT);
	r->frame_len = strlen(t) + 1;
	r->frame = (uint8_t *)xasprintf("%s\n", t);
	free(t);
	json_object_set_new(c, "busy", json_true());
	json_object_set_new(c, "executions",
			    json_integer(json_integer_value(json_object_get(c, "executions")) + 1));
	ctx->on_gone = run_gone;
	ctx->on_gone_arg = r;
	api_envd_hold(&r->hold, r->owner, r->sid, run_cut);
	start_attach(r);
}

/* --- contexts --------------------------------------------------------------------- */

static void on_killed(struct ops_call *c, const struct ops_result *r, const struct err *err,
		      void *arg)
{
	/* A context never started has no process (ESRCH): nothing to end. */
}

/* Ends a context's interpreter, and gives the context a new tag: a restarted one starts
 * afresh at its next execution without waiting for the old process to be gone. */
static void kill_context(struct session *s, const char *id, json_t *c)
{
	struct ops_target t = { .owner = s->owner, .session_id = s->id };
	struct ops_proc_ref ref = { .tag = json_string_value(json_object_get(c, "tag")) };
	struct err e;
	ops_signal_process(&t, &ref, SIGKILL, on_killed, NULL, &e);
	char gen[9];
	random_hex(gen, 4);
	_cleanup_free_ char *tag = xasprintf("e2b-ctx-%.32s-%s", id, gen);
	json_object_set_new(c, "tag", json_string(tag));
}

void api_interp(struct http_ctx *ctx, struct session *s, const char *route, json_t *body)
{
	if (!strcmp(route, "/execute") && ctx->method == HTTP_REQ_POST) {
		execute(ctx, s, body);
		return;
	}
	json_t *contexts = contexts_of(s);
	if (!strcmp(route, "/contexts")) {
		if (ctx->method == HTTP_REQ_GET) {
			json_t *out = json_array();
			const char *id;
			json_t *c;
			json_object_foreach (contexts, id, c)
				json_array_append_new(out, context_json(id, c));
			http_reply_json(ctx, 200, out);
			return;
		}
		if (ctx->method == HTTP_REQ_POST) {
			const char *l =
				language_of(json_string_value(json_object_get(body, "language")));
			json_t *cwd = json_object_get(body, "cwd");
			if (!l || (cwd && !json_is_null(cwd) && !json_is_string(cwd))) {
				reply_error(ctx, 400,
					    "\"language\" is python or js, \"cwd\" a string");
				return;
			}
			if (json_object_size(contexts) >= CONTEXTS_MAX) {
				reply_error(ctx, 429, "a sandbox has at most 16 contexts");
				return;
			}
			char id[33];
			random_hex(id, 16);
			json_t *c = context_add(s, id, l, json_string_value(cwd));
			http_reply_json(ctx, 200, context_json(id, c));
			return;
		}
	}
	const char *p = "/contexts/";
	if (!strncmp(route, p, strlen(p))) {
		char id[64];
		const char *rest = route + strlen(p);
		size_t n = strcspn(rest, "/");
		snprintf(id, sizeof(id), "%.*s", (int)(n < 63 ? n : 63), rest);
		json_t *c = json_object_get(contexts, id);
		if (!c) {
			reply_error(ctx, 404, "no such context");
			return;
		}
		bool restart = !strcmp(rest + n, "/restart") && ctx->method == HTTP_REQ_POST;
		bool del = !rest[n] && ctx->method == HTTP_REQ_DELETE;
		if (restart || del) {
			if (json_is_true(json_object_get(c, "busy")) && del) {
				reply_error(ctx, 409, "the context is running an execution");
				return;
			}
			kill_context(s, id, c);
			if (del)
				json_object_del(contexts, id);
			http_stream_start_raw(ctx, 204, HTTP_LENGTH_NONE);
			http_stream_end(ctx);
			return;
		}
	}
	reply_error(ctx, 404, "no such route of the code interpreter");
}
