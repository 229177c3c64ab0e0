/* request: REQUEST payload validation (see request.h). */
#include "request.h"

#include <arpa/inet.h>
#include <errno.h>
#include <string.h>

#include "util/cleanup.h"

static const struct {
	const char *name;
	enum req_op op;
} ops[] = {
	{ "ping", REQ_PING },       { "resume", REQ_RESUME },     { "exec", REQ_EXEC },
	{ "write", REQ_WRITE },     { "read", REQ_READ },         { "list", REQ_LIST },
	{ "stat", REQ_STAT },       { "mkdir", REQ_MKDIR },       { "remove", REQ_REMOVE },
	{ "rename", REQ_RENAME },   { "shutdown", REQ_SHUTDOWN }, { "spawn", REQ_SPAWN },
	{ "procs", REQ_PROCS },     { "attach", REQ_ATTACH },     { "signal", REQ_SIGNAL },
	{ "input", REQ_INPUT },     { "resize", REQ_RESIZE },     { "watch", REQ_WATCH },
	{ "connect", REQ_CONNECT }, { "ports", REQ_PORTS },
};

static int wrong_type(const char *field, const char *want, const struct json *v, struct err *err)
{
	return err_set(err, EINVAL, "field `%s` must be %s, not %s", field, want,
		       json_type_name(v->type));
}

/* Optional string: *ret untouched when absent (or null). */
static int get_str(const struct json *o, const char *field, bool required, const char **ret,
		   struct err *err)
{
	const struct json *v = json_get(o, field);
	if (!v || v->type == JSON_NULL) {
		if (required)
			return err_set(err, EINVAL, "missing field `%s`", field);
		return 0;
	}
	if (v->type != JSON_STRING)
		return wrong_type(field, "a string", v, err);
	const char *s = json_str(v);
	if (!s)
		return err_set(err, EINVAL, "field `%s` contains a NUL byte", field);
	*ret = s;
	return 0;
}

static int get_bool(const struct json *o, const char *field, bool *ret, struct err *err)
{
	const struct json *v = json_get(o, field);
	if (!v || v->type == JSON_NULL)
		return 0;
	if (v->type != JSON_BOOL)
		return wrong_type(field, "a boolean", v, err);
	*ret = v->u.b;
	return 0;
}

static int get_int(const struct json *o, const char *field, int64_t min, int64_t max, int64_t *ret,
		   struct err *err)
{
	const struct json *v = json_get(o, field);
	if (!v || v->type == JSON_NULL)
		return 0;
	if (v->type != JSON_INT)
		return wrong_type(field, "an integer", v, err);
	if (v->u.i < min || v->u.i > max)
		return err_set(err, EINVAL, "field `%s` must be between %lld and %lld", field,
			       (long long)min, (long long)max);
	*ret = v->u.i;
	return 0;
}

static int parse_exec(const struct json *o, struct req_exec *x, struct err *err)
{
	const struct json *argv = json_get(o, "argv");
	if (!argv)
		return err_set(err, EINVAL, "missing field `argv`");
	if (argv->type != JSON_ARRAY)
		return wrong_type("argv", "an array of strings", argv, err);
	if (argv->u.kids.n == 0)
		return err_set(err, EINVAL, "field `argv` must not be empty");
	x->argv = xcalloc(argv->u.kids.n + 1, sizeof(*x->argv));
	for (const struct json *a = argv->u.kids.first; a; a = a->next) {
		if (a->type != JSON_STRING)
			return err_set(err, EINVAL, "field `argv` must be an array of strings");
		const char *s = json_str(a);
		if (!s)
			return err_set(err, EINVAL, "field `argv[%zu]` contains a NUL byte",
				       x->argc);
		x->argv[x->argc++] = s;
	}
	if (!*x->argv[0])
		return err_set(err, EINVAL, "field `argv[0]` must not be empty");

	const struct json *env = json_get(o, "env");
	if (env && env->type != JSON_NULL) {
		if (env->type != JSON_OBJECT)
			return wrong_type("env", "an object of strings", env, err);
		x->env_keys = xcalloc(env->u.kids.n + 1, sizeof(*x->env_keys));
		x->env_vals = xcalloc(env->u.kids.n + 1, sizeof(*x->env_vals));
		for (const struct json *m = env->u.kids.first; m; m = m->next) {
			if (!*m->key || strchr(m->key, '='))
				return err_set(err, EINVAL, "field `env`: bad variable name `%s`",
					       m->key);
			if (m->type != JSON_STRING)
				return err_set(err, EINVAL, "field `env.%s` must be a string",
					       m->key);
			const char *s = json_str(m);
			if (!s)
				return err_set(err, EINVAL, "field `env.%s` contains a NUL byte",
					       m->key);
			x->env_keys[x->env_n] = m->key;
			x->env_vals[x->env_n++] = s;
		}
	}
	int r;
	if ((r = get_str(o, "cwd", false, &x->cwd, err)) < 0 ||
	    (r = get_bool(o, "anyPath", &x->any_path, err)) < 0)
		return r;
	/* Who runs it: "root" (the sandbox's own root: in a jail, its user namespace's) or
	 * "user" (the command user, the default). */
	const char *user = NULL;
	if ((r = get_str(o, "user", false, &user, err)) < 0)
		return r;
	if (user && strcmp(user, "root") != 0 && strcmp(user, "user") != 0)
		return err_set(err, EINVAL, "field `user` must be \"root\" or \"user\"");
	x->as_root = user && strcmp(user, "root") == 0;
	if ((r = get_int(o, "timeoutMs", 0, REQ_MAX_TIMEOUT_MS, &x->timeout_ms, err)) < 0)
		return r;
	x->kill_grace_ms = REQ_DEFAULT_KILL_GRACE_MS;
	if ((r = get_int(o, "killGraceMs", 0, REQ_MAX_TIMEOUT_MS, &x->kill_grace_ms, err)) < 0)
		return r;
	return get_bool(o, "stdin", &x->stdin_pipe, err);
}

/* A tag: 1 to REQ_MAX_TAG of [A-Za-z0-9._:-]. */
static int check_tag(const char *field, const char *tag, struct err *err)
{
	size_t n = strlen(tag);
	if (n == 0 || n > REQ_MAX_TAG)
		return err_set(err, EINVAL, "field `%s` must have 1 to %d characters", field,
			       REQ_MAX_TAG);
	for (size_t i = 0; i < n; i++) {
		char c = tag[i];
		if (!(c >= 'a' && c <= 'z') && !(c >= 'A' && c <= 'Z') && !(c >= '0' && c <= '9') &&
		    !strchr("._:-", c))
			return err_set(err, EINVAL,
				       "field `%s` may contain only letters, digits and . _ : -",
				       field);
	}
	return 0;
}

static int parse_spawn(const struct json *o, struct req_spawn *s, struct err *err)
{
	int r = parse_exec(o, &s->x, err);
	if (r < 0)
		return r;
	if ((r = get_str(o, "tag", false, &s->tag, err)) < 0 ||
	    (s->tag && (r = check_tag("tag", s->tag, err)) < 0))
		return r;
	s->replay_bytes = REQ_DEFAULT_REPLAY;
	s->max_procs = 1024;
	s->max_replay = REQ_MAX_REPLAY_BYTES;
	if ((r = get_int(o, "replayBytes", REQ_MIN_REPLAY_BYTES, REQ_MAX_REPLAY_BYTES,
			 &s->replay_bytes, err)) < 0 ||
	    (r = get_int(o, "maxProcesses", 1, 1024, &s->max_procs, err)) < 0 ||
	    (r = get_int(o, "maxReplayBytes", REQ_MIN_REPLAY_BYTES, 1LL << 32, &s->max_replay,
			 err)) < 0 ||
	    (r = get_bool(o, "hold", &s->hold, err)) < 0)
		return r;
	const struct json *pty = json_get(o, "pty");
	if (!pty || pty->type == JSON_NULL)
		return 0;
	if (pty->type != JSON_OBJECT)
		return wrong_type("pty", "an object", pty, err);
	s->pty = true;
	s->rows = 24;
	s->cols = 80;
	if ((r = get_int(pty, "rows", 1, REQ_MAX_TERMINAL_SIZE, &s->rows, err)) < 0)
		return r;
	return get_int(pty, "cols", 1, REQ_MAX_TERMINAL_SIZE, &s->cols, err);
}

static int parse_ref(const struct json *o, struct req_proc_ref *ref, struct err *err)
{
	int r;
	if ((r = get_int(o, "pid", 1, INT32_MAX, &ref->pid, err)) < 0 ||
	    (r = get_str(o, "tag", false, &ref->tag, err)) < 0)
		return r;
	if (!ref->pid == !ref->tag)
		return err_set(err, EINVAL,
			       "exactly one of the fields `pid` and `tag` is required");
	return ref->tag ? check_tag("tag", ref->tag, err) : 0;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

int req_parse_ipv4(const char *s, uint32_t *ret)
{
	uint32_t v = 0;
	for (int part = 0; part < 4; part++) {
		if (part && *s++ != '.')
			return -EINVAL;
		if (*s < '0' || *s > '9')
			return -EINVAL;
		unsigned n = 0, digits = 0;
		for (; *s >= '0' && *s <= '9'; s++, digits++) {
			if (digits == 3)
				return -EINVAL;
			n = n * 10 + (unsigned)(*s - '0');
		}
		if (n > 255 || (digits > 1 && s[-(int)digits] == '0'))
			return -EINVAL;
		v = v << 8 | n;
	}
	if (*s)
		return -EINVAL;
	*ret = htonl(v);
	return 0;
}

static int get_ipv4(const struct json *o, const char *field, uint32_t *ret, struct err *err)
{
	const char *s = NULL;
	int r = get_str(o, field, true, &s, err);
	if (r < 0)
		return err_set(err, EINVAL, "field `network.%s` must be a dotted IPv4 address",
			       field);
	if (req_parse_ipv4(s, ret) < 0)
		return err_set(err, EINVAL, "field `network.%s` is not a dotted IPv4 address",
			       field);
	return 0;
}

/* "network": {"address", "prefix", "gateway", "dns"}, all required. */
static int parse_network(const struct json *n, struct req_resume *x, struct err *err)
{
	if (n->type != JSON_OBJECT)
		return wrong_type("network", "an object", n, err);
	int r;
	if ((r = get_ipv4(n, "address", &x->net_addr, err)) < 0 ||
	    (r = get_ipv4(n, "gateway", &x->net_gateway, err)) < 0 ||
	    (r = get_ipv4(n, "dns", &x->net_dns, err)) < 0)
		return r;
	const struct json *p = json_get(n, "prefix");
	if (!p || p->type != JSON_INT || p->u.i < 1 || p->u.i > 32)
		return err_set(err, EINVAL,
			       "field `network.prefix` must be an integer from 1 to 32");
	x->net_prefix = (unsigned)p->u.i;
	if (x->net_addr == 0 || x->net_addr == x->net_gateway)
		return err_set(err, EINVAL,
			       "field `network.address` must be nonzero and not the gateway");
	x->has_network = true;
	return 0;
}

/* A drive's serial: 1 to REQ_MAX_SERIAL of [a-z0-9-]. */
static int get_serial(const struct json *o, const char *field, bool required, const char **ret,
		      struct err *err)
{
	int r = get_str(o, field, required, ret, err);
	if (r < 0 || !*ret)
		return r;
	size_t n = strlen(*ret);
	if (!n || n > REQ_MAX_SERIAL || strspn(*ret, "abcdefghijklmnopqrstuvwxyz0123456789-") != n)
		return err_set(err, EINVAL,
			       "field `%s` must be a drive serial (1 to %d of a-z, 0-9 and -)",
			       field, REQ_MAX_SERIAL);
	return 0;
}

/* An absolute path without empty, `.` or `..` components, not `/`, shorter than 1024. */
static bool mount_path_ok(const char *p)
{
	size_t n = strlen(p);
	if (n < 2 || n >= 1024 || p[0] != '/' || p[n - 1] == '/')
		return false;
	for (const char *c = p + 1; *c;) {
		size_t len = strcspn(c, "/");
		if (len == 0 || (len == 1 && c[0] == '.') ||
		    (len == 2 && c[0] == '.' && c[1] == '.'))
			return false;
		c += len;
		if (*c == '/')
			c++;
	}
	return true;
}

/* "storage": {"disk": serial, "volumes": [{"serial", "path", "readOnly"}]}. */
static int parse_storage(const struct json *s, struct req_resume *x, struct err *err)
{
	if (s->type != JSON_OBJECT)
		return wrong_type("storage", "an object", s, err);
	int r = get_serial(s, "disk", false, &x->disk_serial, err);
	if (r < 0)
		return r;
	const struct json *vols = json_get(s, "volumes");
	if (vols && vols->type != JSON_NULL) {
		if (vols->type != JSON_ARRAY)
			return wrong_type("storage.volumes", "an array", vols, err);
		for (const struct json *v = vols->u.kids.first; v; v = v->next) {
			if (x->nvolumes == REQ_MAX_VOLUMES)
				return err_set(err, EINVAL,
					       "field `storage.volumes` has more than %d",
					       REQ_MAX_VOLUMES);
			if (v->type != JSON_OBJECT)
				return wrong_type("storage.volumes[]", "an object", v, err);
			struct req_volume *rv = &x->volumes[x->nvolumes];
			if ((r = get_serial(v, "serial", true, &rv->serial, err)) < 0 ||
			    (r = get_str(v, "path", true, &rv->path, err)) < 0 ||
			    (r = get_bool(v, "readOnly", &rv->read_only, err)) < 0)
				return r;
			if (!mount_path_ok(rv->path))
				return err_set(
					err, EINVAL,
					"field `storage.volumes[].path` must be an absolute, "
					"normalized path other than /");
			x->nvolumes++;
		}
	}
	x->has_storage = true;
	return 0;
}

static int parse_restored(const struct json *v, struct req_resume *x, struct err *err)
{
	if (v->type != JSON_OBJECT)
		return wrong_type("restored", "an object", v, err);
	const char *from = NULL;
	int r = get_str(v, "from", true, &from, err);
	if (r < 0)
		return r;
	if (strcmp(from, "hibernation") != 0 && strcmp(from, "fork") != 0 &&
	    strcmp(from, "snapshot") != 0)
		return err_set(err, EINVAL,
			       "field `restored.from` must be hibernation, fork or snapshot");
	if ((r = get_str(v, "session", false, &x->restored_session, err)) < 0)
		return r;
	if (x->restored_session && strlen(x->restored_session) > 128)
		return err_set(err, EINVAL, "field `restored.session` is too long");
	x->restored_from = from;
	return 0;
}

static int parse_resume(const struct json *o, struct req_resume *x, struct err *err)
{
	const struct json *rs = json_get(o, "restored");
	if (rs && rs->type != JSON_NULL) {
		int r = parse_restored(rs, x, err);
		if (r < 0)
			return r;
	}
	const struct json *st = json_get(o, "storage");
	if (st && st->type != JSON_NULL) {
		int r = parse_storage(st, x, err);
		if (r < 0)
			return r;
	}
	const struct json *net = json_get(o, "network");
	if (net && net->type != JSON_NULL) {
		int r = parse_network(net, x, err);
		if (r < 0)
			return r;
	}
	const struct json *t = json_get(o, "time");
	if (t && t->type != JSON_NULL) {
		if (t->type != JSON_OBJECT)
			return wrong_type("time", "an object", t, err);
		const struct json *s = json_get(t, "sec"), *ns = json_get(t, "nsec");
		if (!s || s->type != JSON_INT || s->u.i < 0)
			return err_set(err, EINVAL,
				       "field `time.sec` must be a non-negative integer");
		if (ns && (ns->type != JSON_INT || ns->u.i < 0 || ns->u.i > 999999999))
			return err_set(err, EINVAL,
				       "field `time.nsec` must be an integer below 1000000000");
		x->has_time = true;
		x->sec = s->u.i;
		x->nsec = ns ? ns->u.i : 0;
	}
	const char *hex = NULL;
	int r = get_str(o, "entropy", false, &hex, err);
	if (r < 0)
		return r;
	if (hex) {
		size_t n = strlen(hex);
		if (n % 2 || n / 2 > REQ_MAX_ENTROPY)
			return err_set(err, EINVAL,
				       "field `entropy` must be an even number of hex digits (at "
				       "most %d bytes)",
				       REQ_MAX_ENTROPY);
		for (size_t i = 0; i < n; i += 2) {
			int hi = hexval(hex[i]), lo = hexval(hex[i + 1]);
			if (hi < 0 || lo < 0)
				return err_set(err, EINVAL, "field `entropy` is not hexadecimal");
			x->entropy[i / 2] = (uint8_t)(hi << 4 | lo);
		}
		x->entropy_len = n / 2;
	}
	if ((r = get_str(o, "sessionId", false, &x->session_id, err)) < 0)
		return r;
	if ((r = get_str(o, "hostname", false, &x->hostname, err)) < 0)
		return r;
	if (x->hostname && (!*x->hostname || strlen(x->hostname) > 64))
		return err_set(err, EINVAL, "field `hostname` must have 1 to 64 characters");
	return 0;
}

static const char *const watch_event_names[] = { "create", "write", "remove", "rename", "chmod" };

/* "events": an array of event kinds; absent or null: every kind. */
static int parse_watch_events(const struct json *o, unsigned *ret, struct err *err)
{
	const struct json *v = json_get(o, "events");
	*ret = REQ_WATCH_ALL;
	if (!v || v->type == JSON_NULL)
		return 0;
	if (v->type != JSON_ARRAY)
		return wrong_type("events", "an array of event kinds", v, err);
	unsigned set = 0;
	for (const struct json *e = v->u.kids.first; e; e = e->next) {
		const char *s = e->type == JSON_STRING ? json_str(e) : NULL;
		size_t i;
		for (i = 0; s && i < ARRAY_SIZE(watch_event_names); i++)
			if (strcmp(s, watch_event_names[i]) == 0)
				break;
		if (!s || i == ARRAY_SIZE(watch_event_names))
			return err_set(
				err, EINVAL,
				"field `events` must list kinds among create, write, remove, "
				"rename and chmod");
		set |= 1u << i;
	}
	if (!set)
		return err_set(err, EINVAL, "field `events` must not be empty");
	*ret = set;
	return 0;
}

static int parse_watch(const struct json *o, struct req *r, struct err *err)
{
	int ret;
	r->u.watch.max_watches = REQ_DEFAULT_MAX_WATCHES;
	if ((ret = get_str(o, "path", true, &r->path, err)) < 0 ||
	    (ret = get_bool(o, "recursive", &r->u.watch.recursive, err)) < 0 ||
	    (ret = get_int(o, "maxWatches", 1, REQ_MAX_WATCHES, &r->u.watch.max_watches, err)) < 0)
		return ret;
	return parse_watch_events(o, &r->u.watch.events, err);
}

static int parse_op(const struct json *o, struct req *r, struct err *err)
{
	int ret;
	switch (r->op) {
	case REQ_PING:
	case REQ_SHUTDOWN:
		return 0;
	case REQ_RESUME:
		return parse_resume(o, &r->u.resume, err);
	case REQ_EXEC:
		return parse_exec(o, &r->u.exec, err);
	case REQ_WRITE:
		r->u.write.mode = 0644;
		r->u.write.max_bytes = -1;
		if ((ret = get_str(o, "path", true, &r->path, err)) < 0)
			return ret;
		if ((ret = get_int(o, "mode", 0, 07777, &r->u.write.mode, err)) < 0)
			return ret;
		return get_int(o, "maxBytes", 0, JSON_INT_MAX, &r->u.write.max_bytes, err);
	case REQ_READ:
		r->u.read.max_bytes = -1;
		if ((ret = get_str(o, "path", true, &r->path, err)) < 0)
			return ret;
		if ((ret = get_bool(o, "info", &r->u.read.info, err)) < 0)
			return ret;
		if ((ret = get_bool(o, "checkText", &r->u.read.check_text, err)) < 0)
			return ret;
		return get_int(o, "maxBytes", 0, JSON_INT_MAX, &r->u.read.max_bytes, err);
	case REQ_LIST:
		r->path = ".";
		r->u.list.max_entries = REQ_DEFAULT_MAX_ENTRIES;
		if ((ret = get_str(o, "path", false, &r->path, err)) < 0)
			return ret;
		if ((ret = get_bool(o, "recursive", &r->u.list.recursive, err)) < 0)
			return ret;
		return get_int(o, "maxEntries", 0, REQ_MAX_ENTRIES, &r->u.list.max_entries, err);
	case REQ_STAT:
		return get_str(o, "path", true, &r->path, err);
	case REQ_MKDIR:
		if ((ret = get_str(o, "path", true, &r->path, err)) < 0)
			return ret;
		return get_bool(o, "parents", &r->u.mkdir.parents, err);
	case REQ_REMOVE:
		if ((ret = get_str(o, "path", true, &r->path, err)) < 0)
			return ret;
		return get_bool(o, "recursive", &r->u.remove.recursive, err);
	case REQ_RENAME:
		if ((ret = get_str(o, "path", true, &r->path, err)) < 0 ||
		    (ret = get_str(o, "to", true, &r->u.rename.to, err)) < 0 ||
		    (ret = get_bool(o, "parents", &r->u.rename.parents, err)) < 0)
			return ret;
		return get_bool(o, "overwrite", &r->u.rename.overwrite, err);
	case REQ_SPAWN:
		return parse_spawn(o, &r->u.spawn, err);
	case REQ_PROCS:
		return 0;
	case REQ_ATTACH:
		r->u.attach.replay_bytes = -1;
		r->u.attach.output = true;
		r->u.attach.follow = true;
		if ((ret = parse_ref(o, &r->u.attach.ref, err)) < 0 ||
		    (ret = get_int(o, "replayBytes", 0, JSON_INT_MAX, &r->u.attach.replay_bytes,
				   err)) < 0 ||
		    (ret = get_bool(o, "output", &r->u.attach.output, err)) < 0)
			return ret;
		if ((ret = get_bool(o, "follow", &r->u.attach.follow, err)) < 0 ||
		    (ret = get_bool(o, "hold", &r->u.attach.hold, err)) < 0)
			return ret;
		return get_bool(o, "hangup", &r->u.attach.hangup, err);
	case REQ_SIGNAL:
		if ((ret = parse_ref(o, &r->u.signal.ref, err)) < 0)
			return ret;
		if (!json_get(o, "signal"))
			return err_set(err, EINVAL, "missing field `signal`");
		return get_int(o, "signal", 1, 64, &r->u.signal.signal, err);
	case REQ_INPUT:
		if ((ret = parse_ref(o, &r->u.input.ref, err)) < 0)
			return ret;
		return get_bool(o, "close", &r->u.input.close, err);
	case REQ_RESIZE:
		if ((ret = parse_ref(o, &r->u.resize.ref, err)) < 0)
			return ret;
		if (!json_get(o, "rows") || !json_get(o, "cols"))
			return err_set(err, EINVAL, "fields `rows` and `cols` are required");
		if ((ret = get_int(o, "rows", 1, REQ_MAX_TERMINAL_SIZE, &r->u.resize.rows, err)) <
		    0)
			return ret;
		return get_int(o, "cols", 1, REQ_MAX_TERMINAL_SIZE, &r->u.resize.cols, err);
	case REQ_WATCH:
		return parse_watch(o, r, err);
	case REQ_CONNECT:
		if (!json_get(o, "port"))
			return err_set(err, EINVAL, "missing field `port`");
		return get_int(o, "port", 1, 65535, &r->u.connect.port, err);
	case REQ_PORTS:
		return 0;
	}
	return err_set(err, EINVAL, "unknown op");
}

int req_parse(const void *payload, size_t len, struct req *ret, struct err *err)
{
	memset(ret, 0, sizeof(*ret));
	int r = json_parse(payload, len, &ret->doc, err);
	if (r < 0) {
		if (err && err->errnum != EMSGSIZE)
			err->errnum = EPROTO;
		return r;
	}
	const struct json *o = json_root(ret->doc);
	if (o->type != JSON_OBJECT) {
		r = err_set(err, EPROTO, "request must be a JSON object, not %s",
			    json_type_name(o->type));
		goto fail;
	}
	const char *op = NULL;
	if ((r = get_str(o, "op", true, &op, err)) < 0)
		goto fail;
	size_t i;
	for (i = 0; i < ARRAY_SIZE(ops); i++)
		if (strcmp(ops[i].name, op) == 0)
			break;
	if (i == ARRAY_SIZE(ops)) {
		r = err_set(err, EINVAL, "unknown op `%s`", op);
		goto fail;
	}
	ret->op = ops[i].op;
	ret->op_name = ops[i].name;
	if ((r = get_bool(o, "anyPath", &ret->any_path, err)) < 0 ||
	    (r = parse_op(o, ret, err)) < 0)
		goto fail;
	return 0;
fail:
	req_fini(ret);
	return r;
}

void req_fini(struct req *r)
{
	if (r->op == REQ_EXEC || r->op == REQ_SPAWN) {
		/* The spawn's command is its first member. */
		struct req_exec *x = r->op == REQ_EXEC ? &r->u.exec : &r->u.spawn.x;
		free(x->argv);
		free(x->env_keys);
		free(x->env_vals);
	}
	json_doc_free(r->doc);
	memset(r, 0, sizeof(*r));
}
