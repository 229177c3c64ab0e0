/* envd: the data plane of the E2B-compatible API (docs/e2b.md), what E2B's SDKs send to
 * the "envd" of a sandbox, served here on the host over the ops layer:
 *   /process.Process/{Start,Connect,List,SendInput,CloseStdin,SendSignal,Update}
 *   /filesystem.Filesystem/{Stat,ListDir,MakeDir,Move,Remove,WatchDir,CreateWatcher,
 *                           GetWatcherEvents,RemoveWatcher}
 *   GET /files (gzip when asked), POST /files (multipart/form-data or raw bytes, either of
 *   them gzip-compressed), GET /health
 * as Connect RPC with the JSON codec (connect.h) and envd's small REST API.
 *
 * The host router (routes.c) sends a request here when it names a sandbox: an
 * E2b-Sandbox-Id header (with E2b-Sandbox-Port 49983), or a Host of the preview form
 * `49983-<name>.<domain>`. The sandbox is the live session of that preview name (E2B ids are
 * DNS labels, so that is the id). No API key: the caller shows the session's envd token in
 * X-Access-Token (constant-time check), except on /health, which is envd's and says only
 * whether the sandbox runs. A sandbox that does not exist, or is not ready, is E2B's edge
 * answer: 502 {"code": 502, "message": ...}, on every route, streams included.
 *
 * Paths: E2B's are the sandbox's own, any it has, reached with the requesting user's
 * permissions (ops any_path); /home/user, the default user's home, is the workspace. A
 * relative path is under it; a reply names paths as the request did. */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "api/api.h"
#include "api/connect.h"
#include "api/gunzip.h"
#include "api/host.h"
#include "api/multipart.h"
#include "session/ops.h"
#include "session/session.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/text.h"
#include "util/random.h"
#include "util/time.h"
#include "util/timejson.h"
#include <zlib.h>

#define E2B_HOME    "/home/user"
#define WORKSPACE   "/workspace"
#define ENVD_PORT   49983
#define INTERP_PORT 49999
/* A unary request's body (SendInput carries stdin: the server's body limit applies). */
#define RPC_BODY_MIN (64u << 10)
/* A stream waits for its client once this much is queued toward it. */
#define STREAM_HIGH_WATER (512u << 10)
/* A data event carries at most this much output (envd's own size). */
#define DATA_CHUNK          (32u << 10)
#define KEEPALIVE_DEFAULT_S 90
#define KEEPALIVE_MAX_S     3600

/* --- the request ------------------------------------------------------------------- */

enum route_kind { KIND_REST, KIND_UNARY, KIND_STREAM };

struct envd_req {
	struct http_ctx *ctx;
	char *owner, *sid;
	enum route_kind kind;
	const char *method; /* "Start", "Stat"...; NULL for REST */
	bool process;       /* process.Process (else filesystem.Filesystem) */
	char *interp_route; /* the code interpreter's (port 49999) route, or NULL */
	const char *user;   /* "user" or "root" (request_user) */
	uint8_t *body;
	size_t len, limit;
};

static void req_free(struct envd_req *q)
{
	if (!q)
		return;
	free(q->owner);
	free(q->sid);
	free(q->interp_route);
	free(q->body);
	free(q);
}

static struct ops_target target_of(const char *owner, const char *sid)
{
	return (struct ops_target){ .owner = owner, .session_id = sid, .any_path = true };
}

static void rest_error(struct http_ctx *ctx, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void rest_error(struct http_ctx *ctx, int status, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	api_e2b_error(ctx, status, "%s", msg);
}

/* An error of the request's kind, before any reply: REST {"code": status}, unary
 * {"code": "<name>"} with its status, a stream 200 and an end of stream with it. */
static void early_error(struct http_ctx *ctx, enum route_kind kind, enum connect_code code,
			const char *msg)
{
	if (kind == KIND_REST) {
		rest_error(ctx, connect_code_status(code), "%s", msg);
	} else if (kind == KIND_UNARY) {
		connect_unary_error(ctx, code, "%s", msg);
	} else {
		connect_stream_start(ctx);
		connect_stream_end(ctx, &code, msg);
	}
}

/* --- what a pause ends ------------------------------------------------------------- */

#define HOLDER(h, type, member) ((type *)(void *)((char *)(h)-offsetof(type, member)))

static struct envd_hold *holds;

void api_envd_hold(struct envd_hold *h, const char *owner, const char *sid,
		   void (*cut)(struct envd_hold *h))
{
	h->owner = owner;
	h->sid = sid;
	h->cut = cut;
	h->prev = NULL;
	h->next = holds;
	if (holds)
		holds->prev = h;
	holds = h;
	h->held = true;
}

void api_envd_release(struct envd_hold *h)
{
	if (!h->held)
		return;
	if (h->prev)
		h->prev->next = h->next;
	else
		holds = h->next;
	if (h->next)
		h->next->prev = h->prev;
	h->held = false;
}

static void watchers_suspend(const char *owner, const char *sid);
static void watchers_sweep(void);

void api_envd_suspend(const char *owner, const char *sid)
{
	/* From the head each time: a cut frees its holder, and with it its hold. */
	for (;;) {
		struct envd_hold *h = holds;
		while (h && (strcmp(h->owner, owner) || strcmp(h->sid, sid)))
			h = h->next;
		if (!h)
			break;
		api_envd_release(h);
		h->cut(h);
	}
	watchers_suspend(owner, sid);
	watchers_sweep();
}

#define PAUSED_MSG "the sandbox was paused (connect to it again to resume it)"

/* --- paths ------------------------------------------------------------------------- */

/* The request's path made absolute in E2B's namespace (relative: under /home/user); caller
 * frees. */
static char *e2b_path(const char *p)
{
	if (!p || !*p)
		return xstrdup(E2B_HOME);
	if (p[0] == '/')
		return xstrdup(p);
	return xasprintf(E2B_HOME "/%s", p);
}

/* A process's cwd as the agent gives it, in E2B's namespace: none, or the workspace's
 * (".", /workspace), is the user's home. */
static char *from_ws(const char *p)
{
	size_t n = strlen(WORKSPACE);
	if (!p || !strcmp(p, "."))
		return xstrdup(E2B_HOME);
	if (strncmp(p, WORKSPACE, n) == 0 && (p[n] == '\0' || p[n] == '/'))
		return xasprintf(E2B_HOME "%s", p + n);
	return xstrdup(p);
}

static const char *base_name(const char *p)
{
	const char *s = strrchr(p, '/');
	return s && s[1] ? s + 1 : p;
}

/* --- users ------------------------------------------------------------------------- */

/* The user a request runs as: Authorization Basic base64("<user>:"), or `username=`.
 * E2B's `user` and `root` are accepted; until exec takes a user, both run as the
 * sandbox's one user. Returns NULL for any other name. */
static const char *request_user(struct http_ctx *ctx)
{
	const char *name = http_query(ctx, "username");
	char decoded[64] = "";
	const char *h = http_header(ctx, "Authorization");
	if (h && strncasecmp(h, "Basic ", 6) == 0) {
		uint8_t *raw = NULL;
		size_t rn = 0;
		const char *b = h + 6;
		if (base64_decode(b, strlen(b), &raw, &rn) < 0 || rn >= sizeof(decoded)) {
			free(raw);
			return NULL;
		}
		memcpy(decoded, raw, rn);
		decoded[rn] = '\0';
		free(raw);
		char *colon = strchr(decoded, ':');
		if (colon)
			*colon = '\0';
		name = decoded;
	}
	if (!name || !*name || !strcmp(name, "user"))
		return "user";
	if (!strcmp(name, "root"))
		return "root";
	return NULL;
}

/* --- EntryInfo --------------------------------------------------------------------- */

static const char *file_type(const char *t)
{
	if (!strcmp(t, "file"))
		return "FILE_TYPE_FILE";
	if (!strcmp(t, "dir"))
		return "FILE_TYPE_DIRECTORY";
	if (!strcmp(t, "symlink"))
		return "FILE_TYPE_SYMLINK";
	return "FILE_TYPE_UNSPECIFIED";
}

/* The agent's modification time (seconds, a guest's number): bounded before it is converted
 * (year 9999 at most). */
static json_t *iso_time(double secs)
{
	if (!(secs > 0))
		secs = 0;
	if (secs > 253402300799.0)
		secs = 253402300799.0;
	return time_iso8601_json((uint64_t)(secs * 1000.0));
}

/* A symlink's target as E2B names it: absolute, a relative one taken from the link's
 * directory, "." and ".." resolved by name; caller frees. */
static char *link_target(const char *link, const char *target)
{
	_cleanup_free_ char *joined = NULL;
	if (target[0] != '/') {
		const char *slash = strrchr(link, '/');
		int dir = slash ? (int)(slash - link) : 0;
		joined = xasprintf("%.*s/%s", dir, link, target);
		target = joined;
	}
	char *out = xmalloc(strlen(target) + 2);
	size_t o = 0;
	for (const char *s = target; *s;) {
		while (*s == '/')
			s++;
		const char *e = strchrnul(s, '/');
		size_t n = (size_t)(e - s);
		if (n == 2 && s[0] == '.' && s[1] == '.') {
			while (o > 0 && out[o - 1] != '/')
				o--;
			if (o > 0)
				o--;
		} else if (n && !(n == 1 && s[0] == '.')) {
			out[o++] = '/';
			memcpy(out + o, s, n);
			o += n;
		}
		s = e;
	}
	if (!o)
		out[o++] = '/';
	out[o] = '\0';
	return out;
}

/* EntryInfo from a stat-shaped object {type, size, mode, mtime, owner, group, target} of path
 * `e2b`. */
static json_t *entry_json(const char *e2b, json_t *st)
{
	const char *type = json_string_value(json_object_get(st, "type"));
	json_t *size = json_object_get(st, "size"), *mode = json_object_get(st, "mode");
	json_t *mtime = json_object_get(st, "mtime");
	if (!type || !json_is_integer(size) || !json_is_integer(mode))
		return NULL;
	unsigned m = (unsigned)json_integer_value(mode) & 0777;
	char perm[11] = "----------";
	perm[0] = !strcmp(type, "dir") ? 'd' : !strcmp(type, "symlink") ? 'L' : '-';
	for (int i = 0; i < 9; i++)
		if (m & (1u << (8 - i)))
			perm[1 + i] = "rwxrwxrwx"[i];
	char sz[24];
	snprintf(sz, sizeof(sz), "%lld", (long long)json_integer_value(size));
	const char *owner = json_string_value(json_object_get(st, "owner"));
	const char *group = json_string_value(json_object_get(st, "group"));
	json_t *e = json_pack("{s:s, s:s, s:s, s:s, s:i, s:s, s:s, s:s}", "name", base_name(e2b),
			      "type", file_type(type), "path", e2b, "size", sz, "mode", (int)m,
			      "permissions", perm, "owner", owner ? owner : "user", "group",
			      group ? group : "user");
	const char *target = json_string_value(json_object_get(st, "target"));
	if (target && !strcmp(type, "symlink")) {
		_cleanup_free_ char *abs = link_target(e2b, target);
		json_t *v = json_string(abs); /* NULL for a name that is not UTF-8: left out */
		if (v)
			json_object_set_new(e, "symlinkTarget", v);
	}
	json_object_set_new(e, "modifiedTime",
			    iso_time(json_is_number(mtime) ? json_number_value(mtime) : 0));
	return e;
}

/* --- filesystem (unary) ------------------------------------------------------------ */

struct fs_call {
	struct http_ctx *ctx;
	char *owner, *sid;
	char *path;  /* E2B path the reply names */
	char *path2; /* Move: the destination's */
	int depth;
	const char *method;
};

static void fs_free(struct fs_call *f)
{
	free(f->owner);
	free(f->sid);
	free(f->path);
	free(f->path2);
	free(f);
}

static void fs_gone(struct http_ctx *ctx, void *arg)
{
	/* The call finishes on its own; its reply is dropped with the ctx. */
}

static void fs_reply_err(struct fs_call *f, const struct err *err)
{
	enum connect_code code = connect_code_for_errno(err->errnum);
	connect_unary_error(f->ctx, code, "%s", err->msg);
}

/* The RPC fails with err's code, and its call is done. */
static void fs_fail(struct fs_call *f, const struct err *err)
{
	fs_reply_err(f, err);
	fs_free(f);
}

static void on_stat(struct ops_call *c, const struct ops_result *r, const struct err *err,
		    void *arg)
{
	struct fs_call *f = arg;
	if (err) {
		fs_reply_err(f, err);
	} else {
		json_t *e = entry_json(f->path2 ? f->path2 : f->path, r->info);
		if (!e)
			connect_unary_error(f->ctx, CONNECT_INTERNAL,
					    "the sandbox's agent sent "
					    "a stat of a bad shape");
		else
			connect_unary_reply(f->ctx, json_pack("{s:o}", "entry", e));
	}
	fs_free(f);
}

static void stat_then_reply(struct fs_call *f, const char *e2b)
{
	struct ops_target t = target_of(f->owner, f->sid);
	struct err e;
	if (!ops_stat_path(&t, e2b, on_stat, f, &e)) {
		fs_fail(f, &e);
	}
}

static void on_made(struct ops_call *c, const struct ops_result *r, const struct err *err,
		    void *arg)
{
	struct fs_call *f = arg;
	if (err) {
		/* envd: a directory that exists is already_exists; a file in the way is a bad
		 * argument. */
		fs_fail(f, err);
		return;
	}
	stat_then_reply(f, f->path);
}

/* MakeDir: envd says already_exists for a directory that is there (the SDK's makeDir() is
 * then false), which mkdir with parents does not: looked at first. */
static void on_mkdir_stat(struct ops_call *c, const struct ops_result *r, const struct err *err,
			  void *arg)
{
	struct fs_call *f = arg;
	if (!err) {
		const char *type = json_string_value(json_object_get(r->info, "type"));
		bool dir = type && !strcmp(type, "dir");
		connect_unary_error(f->ctx, dir ? CONNECT_ALREADY_EXISTS : CONNECT_INVALID_ARGUMENT,
				    dir ? "directory `%.200s` already exists"
					: "`%.200s` exists and is not a directory",
				    f->path);
		fs_free(f);
		return;
	}
	if (err->errnum != ENOENT) {
		fs_fail(f, err);
		return;
	}
	struct ops_target t = target_of(f->owner, f->sid);
	struct err e;
	if (!ops_make_dir(&t, f->path, true, on_made, f, &e)) {
		fs_fail(f, &e);
	}
}

static void on_moved(struct ops_call *c, const struct ops_result *r, const struct err *err,
		     void *arg)
{
	struct fs_call *f = arg;
	if (err) {
		fs_fail(f, err);
		return;
	}
	stat_then_reply(f, f->path2);
}

static void on_removed(struct ops_call *c, const struct ops_result *r, const struct err *err,
		       void *arg)
{
	struct fs_call *f = arg;
	/* rm -rf: what is not there is removed. */
	if (err && err->errnum != ENOENT)
		fs_reply_err(f, err);
	else
		connect_unary_reply(f->ctx, json_object());
	fs_free(f);
}

static void on_listed_dir(struct ops_call *c, const struct ops_result *r, const struct err *err,
			  void *arg)
{
	struct fs_call *f = arg;
	if (err) {
		fs_fail(f, err);
		return;
	}
	json_t *out = json_array();
	size_t i;
	json_t *v;
	json_array_foreach (r->entries, i, v) {
		const char *rel = json_string_value(json_object_get(v, "path"));
		if (!rel)
			continue;
		int depth = 1;
		for (const char *p = rel; *p; p++)
			depth += *p == '/';
		if (depth > f->depth)
			continue;
		_cleanup_free_ char *p = !strcmp(f->path, "/") ? xasprintf("/%s", rel)
							       : xasprintf("%s/%s", f->path, rel);
		json_t *e = entry_json(p, v);
		if (e)
			json_array_append_new(out, e);
	}
	connect_unary_reply(f->ctx, json_pack("{s:o}", "entries", out));
	fs_free(f);
}

static void watcher_create(struct envd_req *q, json_t *msg);
static void watcher_events(struct envd_req *q, json_t *msg);
static void watcher_remove(struct envd_req *q, json_t *msg);

static void filesystem_unary(struct envd_req *q, json_t *msg)
{
	struct http_ctx *ctx = q->ctx;
	const char *wm = q->method;
	if (!strcmp(wm, "CreateWatcher") || !strcmp(wm, "GetWatcherEvents") ||
	    !strcmp(wm, "RemoveWatcher")) {
		watchers_sweep();
		if (!strcmp(wm, "CreateWatcher"))
			watcher_create(q, msg);
		else if (!strcmp(wm, "GetWatcherEvents"))
			watcher_events(q, msg);
		else
			watcher_remove(q, msg);
		return;
	}
	struct fs_call *f = xcalloc(1, sizeof(*f));
	f->ctx = ctx;
	f->owner = xstrdup(q->owner);
	f->sid = xstrdup(q->sid);
	f->method = q->method;
	struct ops_target t = target_of(q->owner, q->sid);
	struct err e;
	struct ops_call *c = NULL;
	const char *m = q->method;
	json_t *pv = connect_field(msg, "path", NULL);
	if (pv && !json_is_string(pv)) {
		connect_unary_error(ctx, CONNECT_INVALID_ARGUMENT, "\"path\" must be a string");
		fs_free(f);
		return;
	}
	f->path = e2b_path(json_string_value(pv));
	ctx->on_gone = fs_gone;
	if (!strcmp(m, "Stat")) {
		c = ops_stat_path(&t, f->path, on_stat, f, &e);
	} else if (!strcmp(m, "MakeDir")) {
		c = ops_stat_path(&t, f->path, on_mkdir_stat, f, &e);
	} else if (!strcmp(m, "Remove")) {
		c = ops_remove_path(&t, f->path, true, on_removed, f, &e);
	} else if (!strcmp(m, "ListDir")) {
		json_t *d = connect_field(msg, "depth", NULL);
		if (d && !json_is_integer(d)) {
			connect_unary_error(ctx, CONNECT_INVALID_ARGUMENT,
					    "\"depth\" must be an integer");
			fs_free(f);
			return;
		}
		f->depth = d ? (int)json_integer_value(d) : 1;
		if (f->depth < 1)
			f->depth = 1;
		c = ops_list_files(&t, f->path, f->depth > 1, on_listed_dir, f, &e);
	} else if (!strcmp(m, "Move")) {
		json_t *src = connect_field(msg, "source", NULL);
		json_t *dst = connect_field(msg, "destination", NULL);
		if (!json_is_string(src) || !json_is_string(dst)) {
			connect_unary_error(ctx, CONNECT_INVALID_ARGUMENT,
					    "\"source\" and \"destination\" must be strings");
			fs_free(f);
			return;
		}
		free(f->path);
		f->path = e2b_path(json_string_value(src));
		f->path2 = e2b_path(json_string_value(dst));
		c = ops_move_path(&t, f->path, f->path2, true, on_moved, f, &e);
	} else {
		connect_unary_error(ctx, CONNECT_UNIMPLEMENTED,
				    "filesystem.Filesystem/%s is not supported by this server", m);
		fs_free(f);
		return;
	}
	if (!c) {
		fs_fail(f, &e);
	}
}

/* --- process streams: Start, Connect ---------------------------------------------------- */

struct pstream {
	struct http_ctx *ctx;
	char *owner, *sid;
	struct ops_call *c;
	int pid;
	bool pty;
	bool started; /* the stream's head and its start event are out */
	bool connect; /* Connect: a process started before */
	struct event *keepalive;
	bool wrote; /* since the last keepalive tick */
	size_t unacked;
	bool paused;
	uint64_t lost; /* bytes of output this reader missed (a gap) */
	struct envd_hold hold;
};

static void ps_free(struct pstream *p)
{
	api_envd_release(&p->hold);
	if (p->keepalive)
		event_free(p->keepalive);
	free(p->owner);
	free(p->sid);
	free(p);
}

static void ps_send(struct pstream *p, json_t *event)
{
	connect_stream_send(p->ctx, json_pack("{s:o}", "event", event));
	p->wrote = true;
}

static void ps_tick(evutil_socket_t fd, short what, void *arg)
{
	struct pstream *p = arg;
	if (p->started && !p->wrote)
		ps_send(p, json_pack("{s:{}}", "keepalive"));
	p->wrote = false;
}

static void ps_keepalive_start(struct pstream *p)
{
	const char *h = http_header(p->ctx, "Keepalive-Ping-Interval");
	long s = h ? strtol(h, NULL, 10) : KEEPALIVE_DEFAULT_S;
	if (s < 1)
		s = 1;
	if (s > KEEPALIVE_MAX_S)
		s = KEEPALIVE_MAX_S;
	p->keepalive = event_new(api_base, -1, EV_PERSIST, ps_tick, p);
	struct timeval tv = { s, 0 };
	event_add(p->keepalive, &tv);
}

static void ps_end(struct pstream *p, const enum connect_code *code, const char *msg)
{
	if (!p->started)
		connect_stream_start(p->ctx);
	p->ctx->on_gone = NULL;
	http_stream_on_drain(p->ctx, 0, NULL, NULL);
	connect_stream_end(p->ctx, code, msg);
	ps_free(p);
}

static void ps_end_err(struct pstream *p, const struct err *err)
{
	enum connect_code code = connect_code_for_errno(err->errnum);
	/* A command or a directory that cannot be used is the request's fault. */
	if (err->errnum == ENOEXEC || err->errnum == EACCES)
		code = CONNECT_INVALID_ARGUMENT;
	ps_end(p, &code, err->msg);
}

static void ps_drained(struct http_ctx *ctx, void *arg)
{
	struct pstream *p = arg;
	p->paused = false;
	if (p->c && p->unacked) {
		ops_call_consumed(p->c, p->unacked);
		p->unacked = 0;
	}
}

static void ps_output(struct ops_call *c, enum ops_stream stream, const uint8_t *data, size_t len,
		      void *arg)
{
	struct pstream *p = arg;
	const char *field = p->pty ? "pty" : stream == OPS_STDERR ? "stderr" : "stdout";
	for (size_t off = 0; off < len;) {
		size_t n = len - off < DATA_CHUNK ? len - off : DATA_CHUNK;
		size_t bn;
		_cleanup_free_ char *b64 = base64_encode(data + off, n, &bn);
		ps_send(p, json_pack("{s:{s:s%}}", "data", field, b64, bn));
		off += n;
	}
	if (p->paused || http_stream_pending(p->ctx) >= STREAM_HIGH_WATER) {
		p->unacked += len;
		if (!p->paused) {
			p->paused = true;
			http_stream_on_drain(p->ctx, STREAM_HIGH_WATER / 2, ps_drained, p);
		}
		return;
	}
	ops_call_consumed(c, len);
}

static void ps_attached(struct ops_call *c, int pid, void *arg)
{
	struct pstream *p = arg;
	if (p->started)
		return;
	p->pid = pid;
	p->started = true;
	connect_stream_start(p->ctx);
	ps_send(p, json_pack("{s:{s:i}}", "start", "pid", pid));
}

static const char *signal_status(const char *sig)
{
	if (!strcmp(sig, "SIGKILL"))
		return "signal: killed";
	if (!strcmp(sig, "SIGTERM"))
		return "signal: terminated";
	if (!strcmp(sig, "SIGINT"))
		return "signal: interrupt";
	if (!strcmp(sig, "SIGHUP"))
		return "signal: hangup";
	return NULL;
}

static void ps_done(struct ops_call *c, const struct ops_result *r, const struct err *err,
		    void *arg)
{
	struct pstream *p = arg;
	p->c = NULL;
	if (err && err->errnum == ECONNRESET && p->started) {
		/* The sandbox went under the stream (destroyed, its agent lost): E2B's edge drops
		 * the connection then, and the SDKs ask the sandbox's health to tell a killed
		 * sandbox from a network failure. */
		struct http_ctx *ctx = p->ctx;
		ctx->on_gone = NULL;
		http_stream_on_drain(ctx, 0, NULL, NULL);
		ps_free(p);
		http_stream_abort(ctx);
		return;
	}
	if (err) {
		ps_end_err(p, err);
		return;
	}
	if (p->lost) {
		/* The client must not take what it got for the command's whole output. */
		enum connect_code code = CONNECT_DATA_LOSS;
		char msg[200];
		snprintf(msg, sizeof(msg),
			 "%llu bytes of the command's output were lost before they reached this "
			 "client (its reader fell a whole buffer behind)",
			 (unsigned long long)p->lost);
		ps_end(p, &code, msg);
		return;
	}
	if (json_is_true(json_object_get(r->info, "timedOut"))) {
		enum connect_code code = CONNECT_DEADLINE_EXCEEDED;
		ps_end(p, &code, "the command's timeout (Connect-Timeout-Ms) passed");
		return;
	}
	json_t *code = json_object_get(r->info, "exitCode");
	const char *sig = json_string_value(json_object_get(r->info, "signal"));
	json_t *end;
	if (json_is_integer(code)) {
		int n = (int)json_integer_value(code);
		char status[40];
		snprintf(status, sizeof(status), "exit status %d", n);
		end = json_pack("{s:i, s:b, s:s}", "exitCode", n, "exited", 1, "status", status);
		if (n)
			json_object_set_new(end, "error", json_string(status));
	} else {
		char status[64];
		const char *known = sig ? signal_status(sig) : NULL;
		snprintf(status, sizeof(status), "%s", known ? known : "signal: ");
		if (!known && sig)
			snprintf(status, sizeof(status), "signal: %s", sig);
		end = json_pack("{s:i, s:b, s:s, s:s}", "exitCode", -1, "exited", 0, "status",
				status, "error", status);
	}
	if (!p->started)
		ps_attached(NULL, p->pid, p);
	ps_send(p, json_pack("{s:o}", "end", end));
	ps_end(p, NULL, NULL);
}

/* A holding reader has no gaps; an agent that does not know holds still may. */
static void ps_gap(struct ops_call *c, uint64_t bytes, void *arg)
{
	struct pstream *p = arg;
	p->lost += bytes;
}

static const struct ops_attach_cbs ps_cbs = { .on_attached = ps_attached,
					      .on_output = ps_output,
					      .on_gap = ps_gap };

static void ps_gone(struct http_ctx *ctx, void *arg)
{
	struct pstream *p = arg;
	/* Only this reader goes: the process runs on, as envd's do. */
	if (p->c)
		ops_call_detach(p->c);
	p->c = NULL;
	http_stream_on_drain(ctx, 0, NULL, NULL);
	ps_free(p);
	http_stream_abort(ctx);
}

/* A pause: this reader goes (the process is paused with the sandbox, and runs on after the
 * resume, where Connect finds it); its client sees the stream end, unavailable. */
static void ps_cut(struct envd_hold *h)
{
	struct pstream *p = HOLDER(h, struct pstream, hold);
	if (p->c)
		ops_call_detach(p->c);
	p->c = NULL;
	enum connect_code code = CONNECT_UNAVAILABLE;
	ps_end(p, &code, PAUSED_MSG);
}

static void ps_attach(struct pstream *p, const struct ops_proc_ref *ref)
{
	struct ops_target t = target_of(p->owner, p->sid);
	/* A new process's output from its first byte; a re-attach's from now on. */
	/* Every byte, as envd gives its clients: the process waits for a slow one. */
	struct ops_attach_opts o = {
		.replay_bytes = p->connect ? 0 : -1, .output = true, .follow = true, .hold = true
	};
	struct err e;
	p->c = ops_attach(&t, ref, &o, &ps_cbs, ps_done, p, &e);
	if (!p->c)
		ps_end_err(p, &e);
}

static void on_spawned(struct ops_call *c, const struct ops_result *r, const struct err *err,
		       void *arg)
{
	struct pstream *p = arg;
	p->c = NULL;
	if (err) {
		ps_end_err(p, err);
		return;
	}
	json_t *pid = json_object_get(r->info, "pid");
	if (!json_is_integer(pid)) {
		struct err e;
		err_set(&e, EREMOTEIO, "the sandbox's agent did not name the process");
		ps_end_err(p, &e);
		return;
	}
	p->pid = (int)json_integer_value(pid);
	ps_attached(NULL, p->pid, p);
	struct ops_proc_ref ref = { .pid = p->pid };
	ps_attach(p, &ref);
}

/* Whether the session's template has bash: the SDKs run every command with /bin/bash -l -c,
 * and a busybox template has only sh. */
static bool template_has_bash(const char *owner, const char *sid)
{
	struct session *s = session_find(owner, sid);
	if (!s || !s->tmpl->rootfs_dir)
		return true;
	const char *where[] = { "/bin/bash", "/usr/bin/bash" };
	for (size_t i = 0; i < 2; i++) {
		_cleanup_free_ char *p = xasprintf("%s%s", s->tmpl->rootfs_dir, where[i]);
		struct stat st;
		if (lstat(p, &st) == 0)
			return true;
	}
	return false;
}

/* A process selector {pid} or {tag}; -1 having replied in the request's kind. */
static int process_ref(struct envd_req *q, json_t *msg, struct ops_proc_ref *ref)
{
	json_t *sel = connect_field(msg, "process", NULL);
	json_t *pid = json_object_get(sel, "pid"), *tag = json_object_get(sel, "tag");
	memset(ref, 0, sizeof(*ref));
	if (json_is_integer(pid) && json_integer_value(pid) > 0 &&
	    json_integer_value(pid) <= INT32_MAX) {
		ref->pid = (int)json_integer_value(pid);
		return 0;
	}
	if (json_is_string(tag)) {
		struct err e;
		if (ops_proc_ref_parse(json_string_value(tag), ref, &e) == 0 && !ref->pid)
			return 0;
	}
	early_error(q->ctx, q->kind, CONNECT_INVALID_ARGUMENT,
		    "\"process\" must select a process by \"pid\" or \"tag\"");
	return -1;
}

static struct pstream *ps_new(struct envd_req *q)
{
	struct pstream *p = xcalloc(1, sizeof(*p));
	p->ctx = q->ctx;
	p->owner = xstrdup(q->owner);
	p->sid = xstrdup(q->sid);
	q->ctx->on_gone = ps_gone;
	q->ctx->on_gone_arg = p;
	ps_keepalive_start(p);
	api_envd_hold(&p->hold, p->owner, p->sid, ps_cut);
	return p;
}

static int strings_array(json_t *a)
{
	size_t i;
	json_t *v;
	if (a && !json_is_array(a))
		return -1;
	json_array_foreach (a, i, v)
		if (!json_is_string(v))
			return -1;
	return 0;
}

static void process_start(struct envd_req *q, json_t *msg)
{
	json_t *proc = connect_field(msg, "process", NULL);
	json_t *cmd = json_object_get(proc, "cmd"), *args = json_object_get(proc, "args");
	json_t *envs = json_object_get(proc, "envs"), *cwd = json_object_get(proc, "cwd");
	json_t *tag = connect_field(msg, "tag", NULL), *in = connect_field(msg, "stdin", NULL);
	json_t *pty = connect_field(msg, "pty", NULL);
	if (!json_is_string(cmd) || !*json_string_value(cmd) || strings_array(args) < 0 ||
	    (envs && !json_is_object(envs)) || (cwd && !json_is_string(cwd)) ||
	    (tag && !json_is_string(tag)) || (in && !json_is_boolean(in)) ||
	    (pty && !json_is_object(pty))) {
		early_error(q->ctx, KIND_STREAM, CONNECT_INVALID_ARGUMENT,
			    "\"process\" must have a \"cmd\" string, \"args\" strings, \"envs\" "
			    "strings and a \"cwd\" string");
		return;
	}
	struct err e;
	if (ops_check_env(envs, &e) < 0) {
		early_error(q->ctx, KIND_STREAM, CONNECT_INVALID_ARGUMENT, e.msg);
		return;
	}
	struct ops_spawn_req req = { 0 };
	json_auto_t *argv = json_is_array(args) ? json_deep_copy(args) : json_array();
	req.x.command = json_string_value(cmd);
	/* The SDKs' `/bin/bash -l -c <cmd>` where there is no bash: `/bin/sh -c <cmd>`. */
	if (!strcmp(req.x.command, "/bin/bash") && !template_has_bash(q->owner, q->sid)) {
		req.x.command = "/bin/sh";
		if (json_array_size(argv) &&
		    !strcmp(json_string_value(json_array_get(argv, 0)), "-l"))
			json_array_remove(argv, 0);
	}
	req.x.args = argv;
	req.x.env = envs;
	_cleanup_free_ char *cwd_abs = NULL;
	if (cwd && *json_string_value(cwd)) {
		cwd_abs = e2b_path(json_string_value(cwd));
		req.x.cwd = cwd_abs;
	}
	/* Connect-Timeout-Ms is the command's lifetime, as envd has it; none: no limit. */
	const char *tmo = http_header(q->ctx, "Connect-Timeout-Ms");
	req.x.has_timeout = true;
	if (tmo) {
		char *end;
		unsigned long long ms = strtoull(tmo, &end, 10);
		if (!*tmo || *end || ms > 10000000000ull) {
			early_error(q->ctx, KIND_STREAM, CONNECT_INVALID_ARGUMENT,
				    "Connect-Timeout-Ms must be a number of milliseconds");
			return;
		}
		req.x.timeout_ms = ms;
	}
	req.tag = tag ? json_string_value(tag) : NULL;
	req.stdin_open = !json_is_false(in);
	req.hold = true; /* its output waits for this stream's attach (ps_attach) */
	if (pty) {
		json_t *size = json_object_get(pty, "size");
		json_t *rows = json_object_get(size, "rows"), *cols = json_object_get(size, "cols");
		req.pty = true;
		req.rows = json_is_integer(rows) && json_integer_value(rows) > 0
				   ? (unsigned)json_integer_value(rows)
				   : 24;
		req.cols = json_is_integer(cols) && json_integer_value(cols) > 0
				   ? (unsigned)json_integer_value(cols)
				   : 80;
	}
	/* The one place the E2B user reaches a process: q->user is "user" or "root" (checked
	 * in api_envd); root is the sandbox's own root. */
	req.x.user = q->user;
	struct pstream *p = ps_new(q);
	p->pty = req.pty;
	struct ops_target t = target_of(q->owner, q->sid);
	p->c = ops_spawn(&t, &req, on_spawned, p, &e);
	if (!p->c)
		ps_end_err(p, &e);
}

static void process_connect(struct envd_req *q, json_t *msg)
{
	struct ops_proc_ref ref;
	if (process_ref(q, msg, &ref) < 0)
		return;
	struct pstream *p = ps_new(q);
	p->connect = true;
	ps_attach(p, &ref);
}

/* --- process (unary) --------------------------------------------------------------- */

static void pu_reply(struct ops_call *c, const struct ops_result *r, const struct err *err,
		     void *arg)
{
	struct http_ctx *ctx = arg;
	if (!err) {
		connect_unary_reply(ctx, json_object());
		return;
	}
	enum connect_code code = connect_code_for_errno(err->errnum);
	if (err->errnum == ENOTTY)
		code = CONNECT_FAILED_PRECONDITION;
	connect_unary_error(ctx, code, "%s", err->msg);
}

static void on_processes(struct ops_call *c, const struct ops_result *r, const struct err *err,
			 void *arg)
{
	struct http_ctx *ctx = arg;
	if (err) {
		pu_reply(c, r, err, arg);
		return;
	}
	json_t *out = json_array();
	size_t i;
	json_t *p;
	json_array_foreach (r->entries, i, p) {
		if (strcmp(json_string_value(json_object_get(p, "state")) ?: "", "running"))
			continue;
		json_t *argv = json_object_get(p, "argv");
		json_t *args = json_array();
		for (size_t k = 1; k < json_array_size(argv); k++)
			json_array_append(args, json_array_get(argv, k));
		const char *cwd = json_string_value(json_object_get(p, "cwd"));
		_cleanup_free_ char *e2b_cwd = from_ws(cwd);
		json_t *config = json_pack("{s:s, s:o, s:{}, s:s}", "cmd",
					   json_string_value(json_array_get(argv, 0)) ?: "", "args",
					   args, "envs", "cwd", e2b_cwd);
		json_t *info =
			json_pack("{s:o, s:O}", "config", config, "pid", json_object_get(p, "pid"));
		json_t *tag = json_object_get(p, "tag");
		if (json_is_string(tag))
			json_object_set(info, "tag", tag);
		json_array_append_new(out, info);
	}
	connect_unary_reply(ctx, json_pack("{s:o}", "processes", out));
}

static int signal_of(json_t *v)
{
	if (json_is_integer(v))
		return (int)json_integer_value(v);
	const char *s = json_string_value(v);
	if (!s)
		return -1;
	if (!strcmp(s, "SIGNAL_SIGKILL"))
		return SIGKILL;
	if (!strcmp(s, "SIGNAL_SIGTERM"))
		return SIGTERM;
	return -1;
}

static void process_unary(struct envd_req *q, json_t *msg)
{
	struct http_ctx *ctx = q->ctx;
	struct ops_target t = target_of(q->owner, q->sid);
	struct ops_proc_ref ref;
	struct err e;
	struct ops_call *c = NULL;
	const char *m = q->method;
	ctx->on_gone = fs_gone;
	if (!strcmp(m, "List")) {
		c = ops_list_processes(&t, on_processes, ctx, &e);
	} else if (!strcmp(m, "SendSignal")) {
		if (process_ref(q, msg, &ref) < 0)
			return;
		int sig = signal_of(connect_field(msg, "signal", NULL));
		if (sig != SIGKILL && sig != SIGTERM) {
			connect_unary_error(ctx, CONNECT_INVALID_ARGUMENT,
					    "\"signal\" must be SIGNAL_SIGKILL or SIGNAL_SIGTERM");
			return;
		}
		c = ops_signal_process(&t, &ref, sig, pu_reply, ctx, &e);
	} else if (!strcmp(m, "SendInput") || !strcmp(m, "CloseStdin")) {
		if (process_ref(q, msg, &ref) < 0)
			return;
		uint8_t *data = NULL;
		size_t len = 0;
		bool close = !strcmp(m, "CloseStdin");
		if (!close) {
			json_t *in = connect_field(msg, "input", NULL);
			json_t *b = json_object_get(in, "stdin");
			if (!b)
				b = json_object_get(in, "pty");
			const char *s = json_string_value(b);
			if (!s || base64_decode(s, strlen(s), &data, &len) < 0) {
				connect_unary_error(ctx, CONNECT_INVALID_ARGUMENT,
						    "\"input\" must carry \"stdin\" or \"pty\" "
						    "bytes in base64");
				return;
			}
		}
		c = ops_process_input(&t, &ref, data, len, close, pu_reply, ctx, &e);
	} else if (!strcmp(m, "Update")) {
		if (process_ref(q, msg, &ref) < 0)
			return;
		json_t *size = json_object_get(connect_field(msg, "pty", NULL), "size");
		json_t *rows = json_object_get(size, "rows"), *cols = json_object_get(size, "cols");
		if (!json_is_integer(rows) || !json_is_integer(cols) ||
		    json_integer_value(rows) <= 0 || json_integer_value(cols) <= 0 ||
		    json_integer_value(rows) > OPS_TERMINAL_MAX ||
		    json_integer_value(cols) > OPS_TERMINAL_MAX) {
			connect_unary_error(ctx, CONNECT_INVALID_ARGUMENT,
					    "\"pty\" must have a \"size\" of positive \"rows\" and "
					    "\"cols\"");
			return;
		}
		c = ops_resize_process(&t, &ref, (unsigned)json_integer_value(rows),
				       (unsigned)json_integer_value(cols), pu_reply, ctx, &e);
	} else {
		connect_unary_error(ctx, CONNECT_UNIMPLEMENTED,
				    "process.Process/%s is not supported by this server", m);
		return;
	}
	if (!c)
		pu_reply(NULL, NULL, &e, ctx);
}

/* --- WatchDir ---------------------------------------------------------------------- */

struct wstream {
	struct http_ctx *ctx;
	struct ops_watch *w;
	char *root; /* the E2B path watched */
	struct event *keepalive;
	bool started, wrote;
	char *owner, *sid;
	struct envd_hold hold;
};

static void ws_free(struct wstream *s)
{
	api_envd_release(&s->hold);
	free(s->owner);
	free(s->sid);
	if (s->keepalive)
		event_free(s->keepalive);
	free(s->root);
	free(s);
}

static void ws_send(struct wstream *s, json_t *event)
{
	connect_stream_send(s->ctx, event);
	s->wrote = true;
}

static void ws_tick(evutil_socket_t fd, short what, void *arg)
{
	struct wstream *s = arg;
	if (s->started && !s->wrote)
		ws_send(s, json_pack("{s:{}}", "keepalive"));
	s->wrote = false;
}

static void ws_ready(struct ops_watch *w, uint64_t watches, void *arg)
{
	struct wstream *s = arg;
	s->started = true;
	connect_stream_start(s->ctx);
	ws_send(s, json_pack("{s:{}}", "start"));
}

static const char *event_type(const char *t)
{
	if (!strcmp(t, "create"))
		return "EVENT_TYPE_CREATE";
	if (!strcmp(t, "write"))
		return "EVENT_TYPE_WRITE";
	if (!strcmp(t, "remove"))
		return "EVENT_TYPE_REMOVE";
	if (!strcmp(t, "rename"))
		return "EVENT_TYPE_RENAME";
	if (!strcmp(t, "chmod") || !strcmp(t, "attrib"))
		return "EVENT_TYPE_CHMOD";
	return NULL;
}

/* A watch event of the agent's as a FilesystemEvent of a watch of workspace path `root`, or
 * NULL for a kind E2B has no name for. */
static json_t *fs_event(const char *root, json_t *event)
{
	const char *type = event_type(json_string_value(json_object_get(event, "type")) ?: "");
	const char *path = json_string_value(json_object_get(event, "path"));
	if (!type || !path)
		return NULL;
	/* The name relative to the watched directory, as envd gives it; the agent names paths
	 * from the sandbox's root, without its "/". */
	while (*root == '/')
		root++;
	if (!*root)
		root = ".";
	size_t n = strlen(root);
	const char *rel = path;
	if (strcmp(root, ".") && strncmp(path, root, n) == 0 && path[n] == '/')
		rel = path + n + 1;
	return json_pack("{s:s, s:s}", "name", rel, "type", type);
}

static void ws_event(struct ops_watch *w, json_t *event, void *arg)
{
	struct wstream *s = arg;
	json_t *e = fs_event(s->root, event);
	if (e)
		ws_send(s, json_pack("{s:o}", "filesystem", e));
}

static void ws_done(struct ops_watch *w, const struct ops_watch_result *r, const struct err *err,
		    void *arg)
{
	struct wstream *s = arg;
	s->ctx->on_gone = NULL;
	if (!s->started)
		connect_stream_start(s->ctx);
	if (err) {
		enum connect_code code = connect_code_for_errno(err->errnum);
		connect_stream_end(s->ctx, &code, err->msg);
	} else {
		connect_stream_end(s->ctx, NULL, NULL);
	}
	ws_free(s);
}

static const struct ops_watch_cbs watch_cbs = { .on_ready = ws_ready,
						.on_event = ws_event,
						.on_done = ws_done };

static void ws_gone(struct http_ctx *ctx, void *arg)
{
	struct wstream *s = arg;
	ops_watch_detach(s->w);
	ws_free(s);
	http_stream_abort(ctx);
}

static void ws_cut(struct envd_hold *h)
{
	struct wstream *s = HOLDER(h, struct wstream, hold);
	ops_watch_detach(s->w);
	s->ctx->on_gone = NULL;
	if (!s->started)
		connect_stream_start(s->ctx);
	enum connect_code code = CONNECT_UNAVAILABLE;
	connect_stream_end(s->ctx, &code, PAUSED_MSG);
	ws_free(s);
}

static void watch_dir(struct envd_req *q, json_t *msg)
{
	json_t *pv = connect_field(msg, "path", NULL);
	json_t *rec = connect_field(msg, "recursive", NULL);
	if (!json_is_string(pv) || (rec && !json_is_boolean(rec))) {
		early_error(q->ctx, KIND_STREAM, CONNECT_INVALID_ARGUMENT,
			    "\"path\" must be a string and \"recursive\" a boolean");
		return;
	}
	struct wstream *s = xcalloc(1, sizeof(*s));
	s->ctx = q->ctx;
	s->root = e2b_path(json_string_value(pv));
	struct ops_target t = target_of(q->owner, q->sid);
	struct ops_watch_req req = { .path = s->root, .recursive = json_is_true(rec) };
	const char *tmo = http_header(q->ctx, "Connect-Timeout-Ms");
	if (tmo)
		req.timeout_ms = strtoull(tmo, NULL, 10);
	struct err e;
	s->w = ops_watch(&t, &req, &watch_cbs, s, &e);
	if (!s->w) {
		enum connect_code code = connect_code_for_errno(e.errnum);
		early_error(q->ctx, KIND_STREAM, code, e.msg);
		ws_free(s);
		return;
	}
	s->keepalive = event_new(api_base, -1, EV_PERSIST, ws_tick, s);
	const char *h = http_header(q->ctx, "Keepalive-Ping-Interval");
	long secs = h ? strtol(h, NULL, 10) : KEEPALIVE_DEFAULT_S;
	struct timeval tv = { secs < 1 ? 1 : secs > KEEPALIVE_MAX_S ? KEEPALIVE_MAX_S : secs, 0 };
	event_add(s->keepalive, &tv);
	q->ctx->on_gone = ws_gone;
	q->ctx->on_gone_arg = s;
	s->owner = xstrdup(q->owner);
	s->sid = xstrdup(q->sid);
	api_envd_hold(&s->hold, s->owner, s->sid, ws_cut);
}

/* --- watchers: CreateWatcher, GetWatcherEvents, RemoveWatcher ----------------------- */

/* A watcher is WatchDir without a stream: a watch of the sandbox's (ops_watch, holding a unit
 * of the watches quota, SANDBOX_MAX_WATCHES) whose events wait in a bounded queue for the
 * client to poll them. It belongs to its sandbox: at most SANDBOX_MAX_WATCHES of them in one,
 * gone with it. While the sandbox is paused its watch is ended in the agent (a frozen agent
 * holds nothing open for the host) and made again at the resume; nothing changes in a
 * frozen sandbox meanwhile. A watch that ends on its own (its directory removed) keeps its
 * last events for one more poll, then the poll that finds it ended says why. */
#define WATCHER_EVENTS_MAX 1024
#define WATCHER_ID_LEN     24

struct watcher {
	char id[WATCHER_ID_LEN + 1];
	char *owner, *sid;
	char *path; /* the E2B path watched */
	bool recursive;
	struct ops_watch *w;      /* NULL while suspended, or once ended */
	struct http_ctx *pending; /* CreateWatcher, until the watch is in place */
	json_t *events;           /* [FilesystemEvent], at most WATCHER_EVENTS_MAX */
	uint64_t lost;            /* events dropped since the last poll */
	bool suspended;           /* its sandbox is paused */
	bool ended;
	enum connect_code end_code;
	char *end_msg;
	struct watcher *next;
};

static struct watcher *watchers;

static void watcher_free(struct watcher *x)
{
	for (struct watcher **pp = &watchers; *pp; pp = &(*pp)->next)
		if (*pp == x) {
			*pp = x->next;
			break;
		}
	if (x->w)
		ops_watch_detach(x->w);
	if (x->pending)
		x->pending->on_gone = NULL;
	free(x->owner);
	free(x->sid);
	free(x->path);
	free(x->end_msg);
	json_decref(x->events);
	free(x);
}

static bool sandbox_alive(const char *owner, const char *sid)
{
	struct session *s = session_find(owner, sid);
	return s && (s->state == SESSION_READY || s->state == SESSION_PAUSED);
}

/* Frees the watchers whose sandbox is gone (their watches ended with it). */
static void watchers_sweep(void)
{
	for (struct watcher *x = watchers, *next; x; x = next) {
		next = x->next;
		if (!x->pending && !x->w && !sandbox_alive(x->owner, x->sid))
			watcher_free(x);
	}
}

static void wr_ready(struct ops_watch *w, uint64_t count, void *arg)
{
	struct watcher *x = arg;
	if (!x->pending)
		return;
	x->pending->on_gone = NULL;
	connect_unary_reply(x->pending, json_pack("{s:s}", "watcherId", x->id));
	x->pending = NULL;
}

static void wr_event(struct ops_watch *w, json_t *event, void *arg)
{
	struct watcher *x = arg;
	const char *type = json_string_value(json_object_get(event, "type"));
	if (type && !strcmp(type, "overflow")) {
		x->lost++; /* the agent lost some: how many, it cannot say */
		return;
	}
	json_t *e = fs_event(x->path, event);
	if (!e)
		return;
	if (json_array_size(x->events) >= WATCHER_EVENTS_MAX) {
		x->lost++;
		json_decref(e);
		return;
	}
	json_array_append_new(x->events, e);
}

static void wr_done(struct ops_watch *w, const struct ops_watch_result *r, const struct err *err,
		    void *arg)
{
	struct watcher *x = arg;
	x->w = NULL;
	if (x->pending) {
		/* It never was in place: CreateWatcher fails, and there is no watcher. */
		struct http_ctx *ctx = x->pending;
		x->pending = NULL;
		ctx->on_gone = NULL;
		enum connect_code code =
			err ? connect_code_for_errno(err->errnum) : CONNECT_UNAVAILABLE;
		if (err && err->errnum == ENOTDIR)
			code = CONNECT_INVALID_ARGUMENT;
		connect_unary_error(ctx, code, "%s",
				    err ? err->msg : "the watch ended before it was in place");
		watcher_free(x);
		return;
	}
	if (!sandbox_alive(x->owner, x->sid)) {
		watcher_free(x);
		return;
	}
	x->ended = true;
	x->end_code = err ? connect_code_for_errno(err->errnum) : CONNECT_NOT_FOUND;
	x->end_msg = xstrdup(err            ? err->msg
			     : r && r->gone ? "the watched directory was removed or moved"
					    : "the watch ended");
}

static const struct ops_watch_cbs watcher_cbs = { .on_ready = wr_ready,
						  .on_event = wr_event,
						  .on_done = wr_done };

static struct ops_watch *watcher_watch(struct watcher *x, struct err *e)
{
	struct ops_target t = target_of(x->owner, x->sid);
	struct ops_watch_req req = { .path = x->path, .recursive = x->recursive };
	return ops_watch(&t, &req, &watcher_cbs, x, e);
}

static void watchers_suspend(const char *owner, const char *sid)
{
	for (struct watcher *x = watchers, *next; x; x = next) {
		next = x->next;
		if (strcmp(x->owner, owner) || strcmp(x->sid, sid))
			continue;
		if (x->pending) {
			/* Not in place yet: its CreateWatcher fails, as a stream would. */
			struct http_ctx *ctx = x->pending;
			x->pending = NULL;
			ctx->on_gone = NULL;
			connect_unary_error(ctx, CONNECT_UNAVAILABLE, "%s", PAUSED_MSG);
			watcher_free(x);
			continue;
		}
		if (x->w) {
			ops_watch_detach(x->w);
			x->w = NULL;
			x->suspended = true;
		}
	}
}

void api_envd_resumed(const char *owner, const char *sid)
{
	for (struct watcher *x = watchers; x; x = x->next) {
		if (!x->suspended || strcmp(x->owner, owner) || strcmp(x->sid, sid))
			continue;
		x->suspended = false;
		struct err e;
		x->w = watcher_watch(x, &e);
		if (!x->w) {
			x->ended = true;
			x->end_code = connect_code_for_errno(e.errnum);
			x->end_msg = xasprintf(
				"the watch could not be made again after the resume: %s", e.msg);
		}
	}
}

void api_envd_shutdown(void)
{
	while (watchers)
		watcher_free(watchers);
}

static void wr_gone(struct http_ctx *ctx, void *arg)
{
	/* The client left before the watcher's id reached it: nobody can poll it. */
	struct watcher *x = arg;
	x->pending = NULL;
	watcher_free(x);
}

static struct watcher *watcher_find(struct envd_req *q, json_t *msg)
{
	json_t *id = connect_field(msg, "watcherId", "watcher_id");
	if (!json_is_string(id)) {
		connect_unary_error(q->ctx, CONNECT_INVALID_ARGUMENT,
				    "\"watcherId\" must be a string");
		return NULL;
	}
	for (struct watcher *x = watchers; x; x = x->next)
		if (!x->pending && !strcmp(x->id, json_string_value(id)) &&
		    !strcmp(x->owner, q->owner) && !strcmp(x->sid, q->sid))
			return x;
	connect_unary_error(q->ctx, CONNECT_NOT_FOUND, "watcher `%.64s` not found",
			    json_string_value(id));
	return NULL;
}

static void watcher_create(struct envd_req *q, json_t *msg)
{
	json_t *pv = connect_field(msg, "path", NULL);
	json_t *rec = connect_field(msg, "recursive", NULL);
	if (!json_is_string(pv) || (rec && !json_is_boolean(rec))) {
		connect_unary_error(q->ctx, CONNECT_INVALID_ARGUMENT,
				    "\"path\" must be a string and \"recursive\" a boolean");
		return;
	}
	unsigned n = 0;
	for (struct watcher *x = watchers; x; x = x->next)
		n += !strcmp(x->owner, q->owner) && !strcmp(x->sid, q->sid);
	if (n >= api_cfg->max_watches) {
		connect_unary_error(q->ctx, CONNECT_RESOURCE_EXHAUSTED,
				    "a sandbox has at most %u watchers (SANDBOX_MAX_WATCHES): "
				    "remove one first",
				    api_cfg->max_watches);
		return;
	}
	struct watcher *x = xcalloc(1, sizeof(*x));
	random_hex(x->id, WATCHER_ID_LEN / 2);
	x->owner = xstrdup(q->owner);
	x->sid = xstrdup(q->sid);
	x->path = e2b_path(json_string_value(pv));
	x->recursive = json_is_true(rec);
	x->events = json_array();
	struct err e;
	x->w = watcher_watch(x, &e);
	if (!x->w) {
		enum connect_code code = connect_code_for_errno(e.errnum);
		connect_unary_error(q->ctx, code, "%s", e.msg);
		watcher_free(x);
		return;
	}
	x->pending = q->ctx;
	x->next = watchers;
	watchers = x;
	q->ctx->on_gone = wr_gone;
	q->ctx->on_gone_arg = x;
}

static void watcher_events(struct envd_req *q, json_t *msg)
{
	struct watcher *x = watcher_find(q, msg);
	if (!x)
		return;
	/* Resumed other than through E2B's API (POST /exec/:id/resume): it watches again now. */
	struct session *s = session_find(q->owner, q->sid);
	if (x->suspended && s && s->state == SESSION_READY && !s->transition)
		api_envd_resumed(q->owner, q->sid);
	if (x->lost) {
		/* Its queue is bounded: a client that polls too seldom learns that it missed
		 * events, once, and starts afresh (what it kept is dropped with them, so that
		 * what it gets next is again every change). */
		connect_unary_error(q->ctx, CONNECT_DATA_LOSS,
				    "%llu events were lost: a watcher keeps at most %d events "
				    "between two polls; the %zu kept were dropped too, list the "
				    "directory again",
				    (unsigned long long)x->lost, WATCHER_EVENTS_MAX,
				    json_array_size(x->events));
		x->lost = 0;
		json_array_clear(x->events);
		return;
	}
	if (x->ended && !json_array_size(x->events)) {
		connect_unary_error(q->ctx, x->end_code, "watcher `%s`: %s", x->id, x->end_msg);
		watcher_free(x);
		return;
	}
	connect_unary_reply(q->ctx, json_pack("{s:o}", "events", x->events));
	x->events = json_array();
}

static void watcher_remove(struct envd_req *q, json_t *msg)
{
	struct watcher *x = watcher_find(q, msg);
	if (!x)
		return;
	watcher_free(x);
	connect_unary_reply(q->ctx, json_object());
}

/* --- GET /files -------------------------------------------------------------------- */

/* A download, as it comes from the sandbox; with Accept-Encoding: gzip (what the SDK sends
 * for read(..., {gzip: true})) compressed on the way, in a chunked reply. */
#define GZIP_CHUNK (64u << 10)

struct download {
	struct http_ctx *ctx;
	struct ops_call *c;
	bool started;
	size_t unacked;
	bool paused;
	bool gzip;      /* asked for */
	bool deflating; /* z is in use */
	z_stream z;
	char *owner, *sid;
	struct envd_hold hold;
};

static void dl_free(struct download *d)
{
	api_envd_release(&d->hold);
	if (d->deflating)
		deflateEnd(&d->z);
	free(d->owner);
	free(d->sid);
	free(d);
}

/* Whether the client takes gzip: a coding "gzip" of Accept-Encoding whose q is not 0. */
static bool accepts_gzip(const char *h)
{
	for (const char *p = h; p && *p;) {
		p += strspn(p, " \t,");
		size_t n = strcspn(p, ",;");
		bool gz = (n == 4 && !strncasecmp(p, "gzip", 4)) ||
			  (n == 6 && !strncasecmp(p, "x-gzip", 6));
		const char *end = p + strcspn(p, ",");
		if (gz) {
			const char *q = memchr(p, ';', (size_t)(end - p));
			if (q) {
				q += 1 + strspn(q + 1, " \t");
				if (!strncasecmp(q, "q=", 2) && strtod(q + 2, NULL) <= 0)
					return false;
			}
			return true;
		}
		p = end;
	}
	return false;
}

static void dl_drained(struct http_ctx *ctx, void *arg)
{
	struct download *d = arg;
	d->paused = false;
	if (d->c && d->unacked) {
		ops_call_consumed(d->c, d->unacked);
		d->unacked = 0;
	}
}

static void dl_head(struct ops_call *c, uint64_t size, bool text, void *arg)
{
	struct download *d = arg;
	d->started = true;
	http_stream_guard(d->ctx);
	/* An empty file stays plain: the SDK reads Content-Length: 0 as the empty file. */
	if (d->gzip && size > 0 &&
	    deflateInit2(&d->z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8,
			 Z_DEFAULT_STRATEGY) == Z_OK) {
		d->deflating = true;
		http_add_header(d->ctx, "Content-Encoding", "gzip");
		http_add_header(d->ctx, "Vary", "Accept-Encoding");
		http_stream_start(d->ctx, 200, "application/octet-stream");
		return;
	}
	http_stream_start_sized(d->ctx, 200, "application/octet-stream", size);
}

/* Compresses data (flush: the end of the file) into the reply. */
static void dl_deflate(struct download *d, const uint8_t *data, size_t len, bool flush)
{
	uint8_t out[GZIP_CHUNK];
	d->z.next_in = (Bytef *)data;
	d->z.avail_in = (uInt)len;
	do {
		d->z.next_out = out;
		d->z.avail_out = sizeof(out);
		deflate(&d->z, flush ? Z_FINISH : Z_NO_FLUSH);
		size_t n = sizeof(out) - d->z.avail_out;
		if (n)
			http_stream_write(d->ctx, out, n);
	} while (d->z.avail_out == 0);
}

static void dl_data(struct ops_call *c, const uint8_t *data, size_t len, void *arg)
{
	struct download *d = arg;
	if (d->deflating)
		dl_deflate(d, data, len, false);
	else
		http_stream_write(d->ctx, data, len);
	if (d->paused || http_stream_pending(d->ctx) >= STREAM_HIGH_WATER) {
		d->unacked += len;
		if (!d->paused) {
			d->paused = true;
			http_stream_on_drain(d->ctx, STREAM_HIGH_WATER / 2, dl_drained, d);
		}
		return;
	}
	ops_call_consumed(c, len);
}

static void dl_done(struct ops_call *c, const struct ops_result *r, const struct err *err,
		    void *arg)
{
	struct download *d = arg;
	d->ctx->on_gone = NULL;
	http_stream_on_drain(d->ctx, 0, NULL, NULL);
	if (!d->started) {
		int status =
			err->errnum == ENOENT                           ? 404
			: err->errnum == EACCES || err->errnum == EPERM ? 403
			: err->errnum == EISDIR || err->errnum == EINVAL || err->errnum == EXDEV
				? 400
				: http_status_for_errno(err->errnum);
		rest_error(d->ctx, status, "%s", err->msg);
	} else if (err) {
		http_stream_abort(d->ctx);
	} else {
		if (d->deflating)
			dl_deflate(d, NULL, 0, true);
		http_stream_end(d->ctx);
	}
	dl_free(d);
}

static void dl_gone(struct http_ctx *ctx, void *arg)
{
	struct download *d = arg;
	if (d->c)
		ops_call_detach(d->c);
	http_stream_on_drain(ctx, 0, NULL, NULL);
	dl_free(d);
	http_stream_abort(ctx);
}

/* A pause: a download begun is cut short (its client sees a truncated body), one not begun
 * is a 502, as for a sandbox that is not running. */
static void dl_cut(struct envd_hold *h)
{
	struct download *d = HOLDER(h, struct download, hold);
	if (d->c)
		ops_call_detach(d->c);
	d->c = NULL;
	d->ctx->on_gone = NULL;
	http_stream_on_drain(d->ctx, 0, NULL, NULL);
	if (d->started)
		http_stream_abort(d->ctx);
	else
		rest_error(d->ctx, 502, "%s", PAUSED_MSG);
	dl_free(d);
}

static const struct ops_read_cbs dl_cbs = { .on_head = dl_head, .on_data = dl_data };

static void files_get(struct envd_req *q)
{
	const char *p = http_query(q->ctx, "path");
	_cleanup_free_ char *e2b = e2b_path(p);
	struct download *d = xcalloc(1, sizeof(*d));
	d->ctx = q->ctx;
	d->gzip = accepts_gzip(http_header(q->ctx, "Accept-Encoding"));
	d->owner = xstrdup(q->owner);
	d->sid = xstrdup(q->sid);
	struct ops_target t = target_of(q->owner, q->sid);
	struct err e;
	d->c = ops_read_stream(&t, e2b, false, &dl_cbs, dl_done, d, &e);
	if (!d->c) {
		d->ctx->on_gone = NULL;
		dl_done(NULL, NULL, &e, d);
		return;
	}
	q->ctx->on_gone = dl_gone;
	q->ctx->on_gone_arg = d;
	api_envd_hold(&d->hold, d->owner, d->sid, dl_cut);
}

/* --- POST /files ------------------------------------------------------------------- */

/* An upload: the body's parts named "file" (or its raw bytes), each written with a streamed
 * ops_upload as it arrives; the reply lists what was written, in the body's order. The body
 * is read only while the part being received takes more (back-pressure toward the client).
 * One terminal point, up_finish(): the reply, every call detached, the memory freed (put off
 * while the parser is running). */
#define UPLOAD_PARTS_IN_FLIGHT 16
/* Compressed bytes an upload may hold while the sandbox takes the inflated ones. */
#define UPLOAD_GZ_PENDING_MAX (4u << 20)
/* A compressed multipart body may inflate to this much more than its files. */
#define UPLOAD_GZ_FRAMING (1u << 20)

struct upart {
	struct upload *u;
	struct ops_call *c;
	size_t index; /* in u->written */
	char *path;   /* E2B path */
	struct upart *next;
};

struct upload {
	struct http_ctx *ctx;
	char *owner, *sid;
	char *query_path; /* ?path=, which wins over a part's filename (single file) */
	bool multipart;
	struct multipart mp;
	struct upart *parts; /* in flight */
	size_t inflight;
	struct upart *cur; /* receiving data */
	bool body_ended, finished, in_feed;
	json_t *written; /* [{name, type, path}], null while a part is written */
	json_t *seen;    /* paths of this request */
	uint64_t max_bytes;
	/* Content-Encoding: gzip: the body inflated as it comes, a buffer at a time, never
	 * faster than the sandbox takes it; gz_in holds what a full part could not take yet. */
	bool gzip;
	struct gunzip gz;
	uint8_t *gz_in;
	size_t gz_len;
	bool end_deferred; /* the body ended while gz_in waited */
	struct envd_hold hold;
};

static void up_free(struct upload *u)
{
	api_envd_release(&u->hold);
	if (u->gzip)
		gunzip_fini(&u->gz);
	free(u->gz_in);
	if (u->multipart)
		multipart_fini(&u->mp);
	while (u->parts) {
		struct upart *p = u->parts;
		u->parts = p->next;
		if (p->c)
			ops_call_detach(p->c);
		free(p->path);
		free(p);
	}
	free(u->owner);
	free(u->sid);
	free(u->query_path);
	json_decref(u->written);
	json_decref(u->seen);
	free(u);
}

/* Ends the request: the reply (an error when status, else the list), then the memory. */
static void up_finish(struct upload *u, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void up_finish(struct upload *u, int status, const char *fmt, ...)
{
	if (u->finished)
		return;
	u->finished = true;
	struct http_ctx *ctx = u->ctx;
	ctx->on_gone = NULL;
	http_body_stream(ctx, NULL, NULL);
	if (status) {
		char msg[512];
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(msg, sizeof(msg), fmt, ap);
		va_end(ap);
		rest_error(ctx, status, "%s", msg);
	} else {
		http_reply_json(ctx, 200, json_incref(u->written));
	}
	if (!u->in_feed)
		up_free(u);
}

static int upload_status(int errnum)
{
	if (errnum == ENOSPC || errnum == EDQUOT)
		return 507;
	if (errnum == EACCES || errnum == EPERM)
		return 403; /* the user's permissions, as in the sandbox */
	if (errnum == EINVAL || errnum == EXDEV || errnum == EISDIR || errnum == ENOTDIR)
		return 400;
	return http_status_for_errno(errnum);
}

static void up_maybe_done(struct upload *u)
{
	if (u->finished || !u->body_ended || u->inflight)
		return;
	if (!json_array_size(u->written))
		up_finish(u, 400, "the body held no part named \"file\"");
	else
		up_finish(u, 0, NULL);
}

static bool up_gz_drain(struct upload *u);
static void up_end_now(struct upload *u);

static void up_ready(struct ops_call *c, void *arg)
{
	struct upart *p = arg;
	struct upload *u = p->u;
	if (u->cur != p)
		return;
	if (u->gz_len) {
		u->in_feed = true;
		bool blocked = up_gz_drain(u);
		u->in_feed = false;
		if (u->finished) {
			up_free(u);
			return;
		}
		if (blocked)
			return;
		if (u->end_deferred) {
			up_end_now(u);
			return;
		}
	}
	http_body_resume(u->ctx);
}

static void unlink_part(struct upload *u, struct upart *p)
{
	for (struct upart **pp = &u->parts; *pp; pp = &(*pp)->next)
		if (*pp == p) {
			*pp = p->next;
			break;
		}
	if (u->cur == p)
		u->cur = NULL;
	u->inflight--;
	free(p->path);
	free(p);
}

static void up_done(struct ops_call *c, const struct ops_result *r, const struct err *err,
		    void *arg)
{
	struct upart *p = arg;
	struct upload *u = p->u;
	p->c = NULL;
	if (err) {
		int status = upload_status(err->errnum);
		_cleanup_free_ char *path = xstrdup(p->path);
		unlink_part(u, p);
		up_finish(u, status, "%.200s: %s", path, err->msg);
		return;
	}
	json_array_set_new(u->written, p->index,
			   json_pack("{s:s, s:s, s:s}", "name", base_name(p->path), "type", "file",
				     "path", p->path));
	unlink_part(u, p);
	http_body_resume(u->ctx);
	up_maybe_done(u);
}

static const struct ops_upload_cbs up_cbs = { .on_ready = up_ready };

/* Starts writing a file; -1 when the request ended (up_finish). */
static int up_begin_file(struct upload *u, const char *path)
{
	if (!path || !*path) {
		up_finish(u, 400, "a file part needs a path (?path= or its filename)");
		return -1;
	}
	if (u->inflight >= UPLOAD_PARTS_IN_FLIGHT) {
		up_finish(u, 400, "at most %d files are written at once", UPLOAD_PARTS_IN_FLIGHT);
		return -1;
	}
	_cleanup_free_ char *e2b = e2b_path(path);
	if (json_object_get(u->seen, e2b)) {
		up_finish(u, 400, "the path `%.200s` is written twice", e2b);
		return -1;
	}
	json_object_set_new(u->seen, e2b, json_true());
	struct upart *p = xcalloc(1, sizeof(*p));
	p->u = u;
	p->path = xstrdup(e2b);
	p->index = json_array_size(u->written);
	struct ops_target t = target_of(u->owner, u->sid);
	struct err e;
	p->c = ops_upload(&t, e2b, -1, u->max_bytes, &up_cbs, up_done, p, &e);
	if (!p->c) {
		free(p->path);
		free(p);
		up_finish(u, upload_status(e.errnum), "%s", e.msg);
		return -1;
	}
	json_array_append_new(u->written, json_null());
	p->next = u->parts;
	u->parts = p;
	u->inflight++;
	u->cur = p;
	return 0;
}

static void up_send(struct upload *u, const uint8_t *data, size_t len)
{
	if (!u->cur)
		return;
	ops_upload_send(u->cur->c, data, len);
	/* Before the sandbox takes it (the session may be starting), or past the high-water
	 * mark: the body waits for on_ready. */
	if (ops_upload_queued(u->cur->c) >= OPS_UPLOAD_HIGH)
		http_body_pause(u->ctx);
}

static int mp_begin(const char *name, const char *filename, void *arg)
{
	struct upload *u = arg;
	u->cur = NULL;
	if (strcmp(name, "file") != 0)
		return 0; /* other fields are ignored */
	if (u->query_path && json_array_size(u->written)) {
		up_finish(u, 400, "?path= names one file: the body has several");
		return -1;
	}
	return up_begin_file(u, u->query_path ? u->query_path : filename);
}

static int mp_data(const uint8_t *data, size_t len, void *arg)
{
	up_send(arg, data, len);
	return 0;
}

static int mp_end(void *arg)
{
	struct upload *u = arg;
	if (u->cur)
		ops_upload_end(u->cur->c);
	u->cur = NULL;
	return 0;
}

static const struct multipart_cbs mp_cbs = { .on_begin = mp_begin,
					     .on_data = mp_data,
					     .on_end = mp_end };

/* Bytes of the (decoded) body: to the multipart parser, or the file. Called with in_feed
 * set; u may be finished after. */
static void up_take(struct upload *u, const uint8_t *data, size_t len)
{
	if (!u->multipart) {
		up_send(u, data, len);
		return;
	}
	if (multipart_feed(&u->mp, data, len) < 0 && !u->finished)
		up_finish(u, 400, "the multipart body is malformed: %s", u->mp.error);
}

/* Whether the part being written takes no more now (its queue toward the sandbox is full). */
static bool up_blocked(struct upload *u)
{
	return u->cur && ops_upload_queued(u->cur->c) >= OPS_UPLOAD_HIGH;
}

/* Inflates gz_in into the body's path, one buffer at a time, while the sandbox takes it.
 * Returns true when it stopped for back-pressure (the rest stays in gz_in). */
static bool up_gz_drain(struct upload *u)
{
	uint8_t out[GZIP_CHUNK];
	size_t off = 0;
	bool blocked = false;
	while (!u->finished) {
		if (up_blocked(u)) {
			blocked = true;
			break;
		}
		size_t used, made;
		enum gunzip_status st = gunzip_feed(&u->gz, u->gz_in + off, u->gz_len - off, &used,
						    out, sizeof(out), &made);
		off += used;
		if (st == GUNZIP_ERROR) {
			up_finish(u, 400, "the gzip body is malformed: %s", u->gz.error);
			break;
		}
		if (st == GUNZIP_LIMIT) {
			up_finish(u, 413,
				  "the upload inflates to more than %llu bytes "
				  "(SANDBOX_MAX_UPLOAD_BYTES)",
				  (unsigned long long)u->gz.limit);
			break;
		}
		if (made)
			up_take(u, out, made);
		if (st != GUNZIP_FULL)
			break;
	}
	if (u->finished)
		return false;
	memmove(u->gz_in, u->gz_in + off, u->gz_len - off);
	u->gz_len -= off;
	if (u->gz_len)
		http_body_pause(u->ctx);
	return blocked && u->gz_len;
}

static int up_body(struct http_ctx *ctx, const uint8_t *data, size_t len, void *arg)
{
	struct upload *u = arg;
	u->in_feed = true;
	if (u->gzip) {
		if (u->gz_len + len > UPLOAD_GZ_PENDING_MAX) {
			up_finish(u, 400, "the gzip body came faster than it could be taken");
		} else {
			u->gz_in = xrealloc(u->gz_in, u->gz_len + len);
			memcpy(u->gz_in + u->gz_len, data, len);
			u->gz_len += len;
			up_gz_drain(u);
		}
	} else {
		up_take(u, data, len);
	}
	u->in_feed = false;
	if (u->finished) {
		up_free(u);
		return -1;
	}
	return 0;
}

static void up_end(struct http_ctx *ctx, void *arg)
{
	struct upload *u = arg;
	if (u->gz_len) {
		/* The inflated rest waits for the sandbox: the end comes after it (up_ready). */
		u->end_deferred = true;
		return;
	}
	up_end_now(u);
}

static void up_end_now(struct upload *u)
{
	u->body_ended = true;
	if (u->gzip && !gunzip_complete(&u->gz)) {
		up_finish(u, 400, "the gzip body is truncated");
		return;
	}
	if (!u->multipart) {
		if (u->cur)
			ops_upload_end(u->cur->c);
		u->cur = NULL;
	} else if (multipart_finish(&u->mp) < 0) {
		up_finish(u, 400, "the multipart body is malformed: %s", u->mp.error);
		return;
	}
	up_maybe_done(u);
}

static const struct http_body_ops up_body_ops = { .data = up_body, .end = up_end };

static void up_gone(struct http_ctx *ctx, void *arg)
{
	struct upload *u = arg;
	u->finished = true;
	http_body_stream(ctx, NULL, NULL);
	up_free(u);
}

static void up_cut(struct envd_hold *h)
{
	struct upload *u = HOLDER(h, struct upload, hold);
	up_finish(u, 502, "%s", PAUSED_MSG);
}

static void files_post(struct envd_req *q)
{
	struct http_ctx *ctx = q->ctx;
	const char *ct = http_header(ctx, "Content-Type");
	char boundary[MULTIPART_BOUNDARY_MAX + 1];
	bool multipart = ct && strncasecmp(ct, "multipart/form-data", 19) == 0;
	if (multipart && multipart_boundary(ct, boundary) < 0) {
		rest_error(ctx, 400, "the multipart Content-Type has no valid boundary");
		return;
	}
	if (!multipart && !(ct && strncasecmp(ct, "application/octet-stream", 24) == 0)) {
		rest_error(ctx, 415,
			   "an upload is multipart/form-data or application/octet-stream");
		return;
	}
	const char *ce = http_header(ctx, "Content-Encoding");
	bool gzip = ce && (!strcasecmp(ce, "gzip") || !strcasecmp(ce, "x-gzip"));
	if (ce && !gzip && strcasecmp(ce, "identity")) {
		rest_error(ctx, 415, "an upload's Content-Encoding is gzip or identity");
		return;
	}
	struct upload *u = xcalloc(1, sizeof(*u));
	u->ctx = ctx;
	u->owner = xstrdup(q->owner);
	u->sid = xstrdup(q->sid);
	u->written = json_array();
	u->seen = json_object();
	u->max_bytes = api_cfg->max_upload_bytes;
	const char *p = http_query(ctx, "path");
	u->query_path = p && *p ? xstrdup(p) : NULL;
	if (gzip) {
		/* What it inflates to: the files, and a multipart body's own bytes around them. */
		uint64_t limit = u->max_bytes + (multipart ? UPLOAD_GZ_FRAMING : 0);
		if (gunzip_init(&u->gz, limit) < 0) {
			rest_error(ctx, 500, "cannot set up a gzip decoder");
			up_free(u);
			return;
		}
		u->gzip = true;
	}
	ctx->on_gone = up_gone;
	ctx->on_gone_arg = u;
	api_envd_hold(&u->hold, u->owner, u->sid, up_cut);
	http_body_stream(ctx, &up_body_ops, u);
	if (multipart) {
		u->multipart = true;
		multipart_init(&u->mp, boundary, &mp_cbs, u);
	} else if (up_begin_file(u, u->query_path) == 0) {
		http_body_pause(ctx);
	}
}

/* --- dispatch ---------------------------------------------------------------------- */

/* The code interpreter's request, its body read: to interp.c with the session, if it is
 * still there. */
static void interp_dispatch(struct envd_req *q)
{
	struct session *s = session_find(q->owner, q->sid);
	if (!s || s->state != SESSION_READY) {
		api_e2b_error(q->ctx, 502, "sandbox `%.64s` not found", q->sid);
		return;
	}
	json_error_t je;
	struct err e;
	if (q->len && http_json_limits_check(q->ctx, q->body, q->len, &e) < 0) {
		api_e2b_error(q->ctx, http_status_for_errno(e.errnum), "%s", e.msg);
		return;
	}
	json_auto_t *body =
		q->len ? json_loadb((const char *)q->body, q->len, 0, &je) : json_object();
	if (!json_is_object(body)) {
		api_e2b_error(q->ctx, 400, "the body must be a JSON object");
		return;
	}
	api_interp(q->ctx, s, q->interp_route, body);
}

static void rpc_dispatch(struct envd_req *q)
{
	if (q->interp_route) {
		interp_dispatch(q);
		return;
	}
	json_t *msg = NULL;
	const char *why = NULL;
	/* The server's JSON limits before any parse, as on every other route. */
	struct err lim;
	if (q->len && http_json_limits_check(q->ctx, q->body, q->len, &lim) < 0) {
		if (q->kind == KIND_STREAM)
			early_error(q->ctx, KIND_STREAM, CONNECT_RESOURCE_EXHAUSTED, lim.msg);
		else
			connect_unary_error(q->ctx, CONNECT_RESOURCE_EXHAUSTED, "%s", lim.msg);
		return;
	}
	if (q->kind == KIND_STREAM) {
		if (connect_parse_envelope(q->body, q->len, &msg, &why) < 0) {
			early_error(q->ctx, KIND_STREAM, CONNECT_INVALID_ARGUMENT, why);
			return;
		}
	} else {
		json_error_t je;
		msg = q->len ? json_loadb((const char *)q->body, q->len, 0, &je) : json_object();
		if (!json_is_object(msg)) {
			json_decref(msg);
			connect_unary_error(q->ctx, CONNECT_INVALID_ARGUMENT,
					    "the request message is not a JSON object");
			return;
		}
	}
	json_auto_t *m = msg;
	const char *name = q->method;
	if (q->kind == KIND_STREAM) {
		if (q->process && !strcmp(name, "Start"))
			process_start(q, m);
		else if (q->process && !strcmp(name, "Connect"))
			process_connect(q, m);
		else if (!q->process && !strcmp(name, "WatchDir"))
			watch_dir(q, m);
		return;
	}
	if (q->process)
		process_unary(q, m);
	else
		filesystem_unary(q, m);
}

static int rpc_body(struct http_ctx *ctx, const uint8_t *data, size_t len, void *arg)
{
	struct envd_req *q = arg;
	if (len > q->limit - q->len) {
		/* Refused: nothing more comes here (the rest of the body is not read). */
		ctx->on_gone = NULL;
		http_body_stream(ctx, NULL, NULL);
		if (q->kind == KIND_UNARY)
			connect_unary_error(ctx, CONNECT_RESOURCE_EXHAUSTED,
					    "the request message is larger than %zu bytes",
					    q->limit);
		else
			early_error(ctx, KIND_STREAM, CONNECT_RESOURCE_EXHAUSTED,
				    "the request message is too large");
		req_free(q);
		return -1;
	}
	q->body = xrealloc(q->body, q->len + len);
	memcpy(q->body + q->len, data, len);
	q->len += len;
	return 0;
}

static void rpc_end(struct http_ctx *ctx, void *arg)
{
	struct envd_req *q = arg;
	ctx->on_gone = NULL;
	rpc_dispatch(q);
	req_free(q);
}

static void rpc_gone(struct http_ctx *ctx, void *arg)
{
	req_free(arg);
}

static const struct http_body_ops rpc_body_ops = { .data = rpc_body, .end = rpc_end };

static const char *const stream_methods[] = { "Start", "Connect", "WatchDir" };

/* The path's RPC: "/process.Process/Start" -> process, "Start". */
static bool rpc_route(const char *path, bool *process, const char **method)
{
	const char *pp = "/process.Process/", *fp = "/filesystem.Filesystem/";
	if (!strncmp(path, pp, strlen(pp))) {
		*process = true;
		*method = path + strlen(pp);
	} else if (!strncmp(path, fp, strlen(fp))) {
		*process = false;
		*method = path + strlen(fp);
	} else {
		return false;
	}
	return **method && !strchr(*method, '/') && !strchr(*method, '?');
}

/* The sandbox a data-plane request names: E2b-Sandbox-Id, else the preview Host's name. */
static const char *sandbox_name(struct http_ctx *ctx, char *buf, size_t cap, unsigned *port)
{
	const char *id = http_header(ctx, "E2b-Sandbox-Id");
	const char *ps = http_header(ctx, "E2b-Sandbox-Port");
	*port = ps ? (unsigned)strtoul(ps, NULL, 10) : ENVD_PORT;
	if (id)
		return id;
	struct preview_host ph;
	const char *host = http_header(ctx, "Host");
	if (host && api_cfg->public_domain &&
	    preview_host_parse(host, api_cfg->public_domain, &ph) == 0) {
		*port = ph.port;
		snprintf(buf, cap, "%s", ph.name);
		return buf;
	}
	return NULL;
}

/* Port 49999: the code interpreter. Running code (/execute) takes the envd token, which the
 * SDK sends there; the context routes carry only E2B's traffic token, which admits them and
 * nothing that runs code. A preview token (the one shared with an app's visitors) admits
 * neither. */
static void interp_request(struct http_ctx *ctx, struct session *s, const char *route)
{
	const char *tok = http_header(ctx, "X-Access-Token");
	const char *traffic = http_header(ctx, "E2B-Traffic-Access-Token");
	bool envd = tok && session_token_check(s, SESSION_TOKEN_ENVD, tok);
	bool contexts = !strncmp(route, "/contexts", 9) && (!route[9] || route[9] == '/');
	if (!envd &&
	    !(contexts && traffic && session_token_check(s, SESSION_TOKEN_E2B_TRAFFIC, traffic))) {
		api_e2b_error(ctx, 401,
			      contexts ? "X-Access-Token or E2B-Traffic-Access-Token is required"
				       : "X-Access-Token is required to run code");
		return;
	}
	struct envd_req *q = xcalloc(1, sizeof(*q));
	q->ctx = ctx;
	q->owner = xstrdup(s->owner);
	q->sid = xstrdup(s->id);
	q->kind = KIND_REST;
	q->interp_route = xstrdup(route);
	q->limit = api_cfg->max_body_bytes > RPC_BODY_MIN ? api_cfg->max_body_bytes : RPC_BODY_MIN;
	ctx->on_gone = rpc_gone;
	ctx->on_gone_arg = q;
	http_body_stream(ctx, &rpc_body_ops, q);
}

void api_envd(struct http_ctx *ctx)
{
	char buf[64];
	unsigned port;
	const char *name = sandbox_name(ctx, buf, sizeof(buf), &port);
	const char *path = ctx->path ? ctx->path : "";
	size_t plen = strcspn(path, "?");
	char route[128];
	snprintf(route, sizeof(route), "%.*s", (int)(plen < 127 ? plen : 127), path);
	bool process = false;
	const char *method = NULL;
	bool is_rpc = rpc_route(route, &process, &method);
	enum route_kind kind = KIND_REST;
	if (is_rpc) {
		kind = KIND_UNARY;
		for (size_t i = 0; i < 3; i++)
			if (!strcmp(method, stream_methods[i]) && (i < 2) == process)
				kind = KIND_STREAM;
	}
	struct session *s = name ? session_find_preview(name) : NULL;
	/* E2B's edge: no such sandbox (or not ready, or a port nothing serves) is a 502 in the
	 * REST shape whatever the route, which every SDK reads as "the sandbox is gone". */
	if (!s || s->state != SESSION_READY || (port != ENVD_PORT && port != INTERP_PORT)) {
		if (s && s->state == SESSION_READY)
			api_e2b_error(ctx, 502, "port %u of sandbox `%.64s` is not served here",
				      port, name);
		else if (s && s->state == SESSION_PAUSED)
			api_e2b_error(ctx, 502, "sandbox `%.64s` is paused (connect resumes it)",
				      name);
		else
			api_e2b_error(ctx, 502, "sandbox `%.64s` not found", name ? name : "");
		return;
	}
	if (port == INTERP_PORT) {
		interp_request(ctx, s, route);
		return;
	}
	if (!strcmp(route, "/health")) {
		http_stream_start_raw(ctx, 204, HTTP_LENGTH_NONE);
		http_stream_end(ctx);
		return;
	}
	bool files = !strcmp(route, "/files");
	if (!files && !is_rpc) {
		api_e2b_error(ctx, 404, "no such route: %.100s", route);
		return;
	}
	const char *tok = http_header(ctx, "X-Access-Token");
	if (!tok || !session_token_check(s, SESSION_TOKEN_ENVD, tok)) {
		early_error(ctx, kind, CONNECT_UNAUTHENTICATED,
			    tok ? "the X-Access-Token is not this sandbox's"
				: "X-Access-Token is required");
		return;
	}
	const char *user = request_user(ctx);
	if (!user) {
		early_error(ctx, kind, CONNECT_UNAUTHENTICATED,
			    "unknown user: this server knows `user` and `root`");
		return;
	}
	struct envd_req *q = xcalloc(1, sizeof(*q));
	q->ctx = ctx;
	q->owner = xstrdup(s->owner);
	q->sid = xstrdup(s->id);
	q->kind = kind;
	q->user = user;
	q->process = process;
	if (files) {
		if (ctx->method == HTTP_REQ_GET)
			files_get(q);
		else if (ctx->method == HTTP_REQ_POST)
			files_post(q);
		else
			api_e2b_error(ctx, 405, "/files takes GET and POST");
		req_free(q);
		return;
	}
	/* Method names point into ctx->path, which lives as long as the request. */
	q->method = path + (method - route);
	if (ctx->method != HTTP_REQ_POST) {
		early_error(ctx, KIND_UNARY, CONNECT_UNIMPLEMENTED, "Connect calls are POSTs");
		req_free(q);
		return;
	}
	const char *ct = http_header(ctx, "Content-Type");
	const char *want = kind == KIND_STREAM ? "application/connect+json" : "application/json";
	if (!ct || strncasecmp(ct, want, strlen(want)) != 0 ||
	    (ct[strlen(want)] && ct[strlen(want)] != ';')) {
		bool proto = ct && strstr(ct, "proto");
		char msg[160];
		snprintf(msg, sizeof(msg),
			 "%s: this server speaks Connect with the JSON codec (%s)",
			 proto ? "binary messages are not supported" : "unsupported Content-Type",
			 want);
		api_e2b_error(ctx, 415, "%s", msg);
		req_free(q);
		return;
	}
	q->limit = api_cfg->max_body_bytes > RPC_BODY_MIN ? api_cfg->max_body_bytes : RPC_BODY_MIN;
	ctx->on_gone = rpc_gone;
	ctx->on_gone_arg = q;
	http_body_stream(ctx, &rpc_body_ops, q);
}

bool api_envd_request(struct http_ctx *ctx, const char *host)
{
	if (http_header(ctx, "E2b-Sandbox-Id"))
		return true;
	struct preview_host ph;
	return host && api_cfg->public_domain && *api_cfg->public_domain &&
	       preview_host_parse(host, api_cfg->public_domain, &ph) == 0 &&
	       (ph.port == ENVD_PORT || ph.port == INTERP_PORT);
}
