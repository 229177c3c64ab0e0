/* sandbox keys: API key management, through the daemon's /admin/keys when it is named
 * (--url or $SANDBOX_URL) or when a daemon holds the state directory; on the database
 * directly only when no daemon runs on it (the CLI then holds the directory's claim). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "auth/keys.h"
#include "cli.h"
#include "sandbox.h"
#include "store/store.h"
#include "util/cleanup.h"
#include "util/size.h"

#define DEFAULT_STATE_DIR "/var/lib/agent-sandbox/state"
#define DEFAULT_PREFIX    "sk_test_"

void cmd_keys_help(void)
{
	printf("usage: sandbox keys <action> [options]\n\n"
	       "  create NAME [--scopes exec,admin,metrics] [--rate-limit N] [--expires DURATION]\n"
	       "              [--quota KIND=N]...\n"
	       "                 create a key (shown once); DURATION like 30d, 12h, 90m, 3600\n"
	       "  set ID [--quota KIND=N|default]... [--rate-limit N]\n"
	       "                 change a key's own quotas or rate limit; KIND is sessions,\n"
	       "                 commands, mcpSessions, fileOps, streams, watches, or a size\n"
	       "                 for memoryBytes or diskBytes (like 8G); N=0 means no quota of\n"
	       "                 its own (the server's caps still apply), default the server's\n"
	       "                 default\n"
	       "  list           list keys (never their secrets)\n"
	       "  rotate ID      replace a key's secret; its sessions stay its own\n"
	       "  revoke ID      disable a key at once\n"
	       "  delete ID      remove a key\n\n"
	       "With --url URL or $SANDBOX_URL (http://host:port or unix:/path) the daemon does "
	       "it\n"
	       "through /admin/keys, with an admin key (--api-key or $SANDBOX_API_KEY). Without\n"
	       "them the state directory decides (--state-dir DIR or $SANDBOX_STATE_DIR, default\n"
	       "%s), and stderr says which: while a daemon runs on it, through\n"
	       "that daemon (at the address it noted there) with your key, else the directory's\n"
	       "admin-key; the daemon's database is never opened beside it. When none runs, the\n"
	       "database directly, claiming the directory meanwhile (no daemon starts during the\n"
	       "command); only create makes it when missing (keys made before the daemon's first\n"
	       "start), and AUTH_KEY_PREFIX (default %s) is then the prefix of new secrets.\n\n"
	       "options: --json for machine-readable output\n",
	       DEFAULT_STATE_DIR, DEFAULT_PREFIX);
}

/* Where the keys are: the daemon (http) or its database (db); exactly one is set. */
struct keys_store {
	struct client *http;
	sqlite3 *db;
};

/* The first line of the state directory's admin-key file (the first start's or the
 * package's), or NULL: the key of last resort for a root user who has none of their own. */
static char *state_admin_key(const char *dir)
{
	_cleanup_free_ char *path = xasprintf("%s/admin-key", dir);
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	char line[256];
	if (!f || !fgets(line, sizeof(line), f))
		return NULL;
	line[strcspn(line, "\r\n")] = '\0';
	return *line ? xstrdup(line) : NULL;
}

/* Finds the keys of the state directory dir (else $SANDBOX_STATE_DIR, else the default) when
 * no daemon was named, saying which way on stderr. When no daemon holds the directory, the
 * CLI claims it as a daemon would (so that none starts meanwhile) and opens its database;
 * only create may make one that is missing (keys made before the daemon's first start).
 * When a daemon holds it, the CLI never opens its database (the daemon's requests would wait
 * on its lock) and goes through the daemon's /admin/keys at the address the daemon noted in
 * the lock file (else the CLI's default), with the caller's key, else the directory's
 * admin-key. 0, or 1 after a message. */
static int find_store(struct keys_store *st, const char *dir, bool create, const char *key)
{
	if (!dir || !*dir)
		dir = getenv("SANDBOX_STATE_DIR");
	if (!dir || !*dir)
		dir = DEFAULT_STATE_DIR;
	_cleanup_free_ char *path = xasprintf("%s/sandboxd.db", dir);
	if (access(path, F_OK) < 0 && errno == ENOENT && !create)
		return cli_fail("no key store at `%s` (name the daemon's state directory with "
				"--state-dir or $SANDBOX_STATE_DIR, or the daemon with --url)",
				path);
	bool missing = access(path, F_OK) < 0;
	struct err e;
	int r = store_claim_dir(dir, &e);
	if (r == 0) {
		fprintf(stderr,
			"sandbox: no daemon uses %s: %s the key store %s directly (--url or "
			"$SANDBOX_URL to go through a daemon instead)\n",
			dir, missing ? "creating" : "using", path);
		if (store_open(dir, &e) < 0)
			return cli_fail("%s", e.msg);
		st->db = store_db();
		return 0;
	}
	if (r != -EBUSY && r != -EACCES && r != -EPERM)
		return cli_fail("%s", e.msg);
	_cleanup_free_ char *url = store_claimant_url(dir);
	if (!key || !*key)
		key = getenv("SANDBOX_API_KEY");
	_cleanup_free_ char *own = key && *key ? NULL : state_admin_key(dir);
	st->http = client_new(url, own ? own : key);
	fprintf(stderr, "sandbox: %s %s: going through the daemon at %s%s\n",
		r == -EBUSY ? "a daemon uses the key store" : "cannot claim the key store", path,
		client_url(st->http),
		url || r != -EBUSY ? "" : " (it noted no address of its own; --url names another)");
	return 0;
}

static const char *prefix(void)
{
	const char *p = getenv("AUTH_KEY_PREFIX");
	return p && *p ? p : DEFAULT_PREFIX;
}

static void print_key_line(json_t *k)
{
	char sc[64] = "";
	size_t i, n = 0;
	json_t *v;
	json_array_foreach (json_object_get(k, "scopes"), i, v)
		if (n < sizeof(sc))
			n += (size_t)snprintf(sc + n, sizeof(sc) - n, "%s%s", i ? "," : "",
					      json_string_value(v));
	char exp[32] = "never";
	const char *at = json_string_value(json_object_get(k, "expiresAt"));
	if (at) {
		snprintf(exp, sizeof(exp), "%.16s", at); /* 2026-12-01T14:00 */
		char *t = strchr(exp, 'T');
		if (t)
			*t = ' ';
	}
	printf("%-22s %-24s %-14s %-20s %-8lld %-8s %s\n",
	       json_string_value(json_object_get(k, "id")),
	       json_string_value(json_object_get(k, "name")),
	       json_string_value(json_object_get(k, "prefix")), sc,
	       (long long)json_integer_value(json_object_get(k, "rateLimit")),
	       json_is_true(json_object_get(k, "enabled")) ? "enabled" : "revoked", exp);
}

static void append_key(const struct key_info *k, void *arg)
{
	json_array_append_new(arg, keys_info_json(k));
}

/* --quota KIND=N (KIND=SIZE for the byte kinds) or KIND=default into body's "quotas"; 0, or
 * 2 after a message. */
static int parse_quota(const char *arg, json_t *body)
{
	const char *eq = strchr(arg, '=');
	_cleanup_free_ char *kind = eq ? strndup(arg, (size_t)(eq - arg)) : NULL;
	int k = kind ? quota_kind_from_name(kind) : -1;
	if (k < 0)
		return cli_fail("--quota takes KIND=N with KIND one of sessions, commands, "
				"mcpSessions, fileOps, streams, watches, memoryBytes, diskBytes "
				"(got `%s`)",
				arg),
		       2;
	const char *v = eq + 1;
	json_t *value;
	if (strcmp(v, "default") == 0) {
		value = json_null();
	} else if (quota_kind_bytes((enum quota_kind)k)) {
		uint64_t n;
		int r = size_parse(v, &n);
		if (r < 0)
			return cli_fail("--quota %s= takes a size such as 8G (0: no quota of its "
					"own) "
					"or `default`: `%s` is %s",
					kind, v, size_parse_problem(r)),
			       2;
		value = json_integer((json_int_t)n);
	} else {
		char *end;
		long long n = strtoll(v, &end, 10);
		if (!*v || *end || n < 0)
			return cli_fail("--quota %s= takes a whole number (0: no quota of its own) "
					"or `default`",
					kind),
			       2;
		value = json_integer(n);
	}
	json_t *q = json_object_get(body, "quotas");
	if (!q) {
		q = json_object();
		json_object_set_new(body, "quotas", q);
	}
	json_object_set_new(q, kind, value);
	return 0;
}

/* --rate-limit N into body; 0, or 2 after a message. */
static int parse_rate(const char *v, json_t *body)
{
	char *end;
	long long rate = strtoll(v, &end, 10);
	if (!*v || *end || rate < 0)
		return cli_fail("--rate-limit takes a whole number of requests per minute (0 for "
				"none)"),
		       2;
	json_object_set_new(body, "rateLimit", json_integer(rate));
	return 0;
}

/* The options of set as the body of PATCH /admin/keys/ID; 0, or 2 after a message. */
static int parse_set(int argc, char **argv, json_t *body)
{
	for (int i = 3; i < argc; i++) {
		int r = 0;
		if (strcmp(argv[i], "--json") == 0)
			continue;
		if (strcmp(argv[i], "--quota") == 0 && i + 1 < argc)
			r = parse_quota(argv[++i], body);
		else if (strcmp(argv[i], "--rate-limit") == 0 && i + 1 < argc)
			r = parse_rate(argv[++i], body);
		else
			r = (cli_fail("unknown or incomplete option `%s`", argv[i]), 2);
		if (r)
			return r;
	}
	if (json_object_size(body) == 0)
		return cli_fail("usage: sandbox keys set ID [--quota KIND=N|default]... "
				"[--rate-limit N]"),
		       2;
	return 0;
}

/* The options of create as the body of POST /admin/keys; 0, or 2 after a message. */
static int parse_create(int argc, char **argv, json_t *body)
{
	const char *scopes = "exec";
	for (int i = 2; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			continue;
		if (strcmp(argv[i], "--quota") == 0 && i + 1 < argc) {
			int r = parse_quota(argv[++i], body);
			if (r)
				return r;
		} else if (strcmp(argv[i], "--scopes") == 0 && i + 1 < argc) {
			scopes = argv[++i];
		} else if (strcmp(argv[i], "--rate-limit") == 0 && i + 1 < argc) {
			int r = parse_rate(argv[++i], body);
			if (r)
				return r;
		} else if (strcmp(argv[i], "--expires") == 0 && i + 1 < argc) {
			int64_t secs;
			if (keys_parse_duration(argv[++i], &secs) < 0)
				return cli_fail("--expires takes a duration like 30d, 12h, 90m or "
						"seconds"),
				       2;
			json_object_set_new(body, "expiresIn", json_string(argv[i]));
		} else if (argv[i][0] == '-') {
			return cli_fail("unknown or incomplete option `%s`", argv[i]), 2;
		} else if (!json_object_get(body, "name")) {
			json_object_set_new(body, "name", json_string(argv[i]));
		} else {
			return cli_fail("unexpected argument `%s`", argv[i]), 2;
		}
	}
	if (!json_object_get(body, "name"))
		return cli_fail("usage: sandbox keys create NAME [--scopes exec,admin,metrics] "
				"[--rate-limit N] [--expires DURATION] [--quota KIND=N]..."),
		       2;
	json_t *arr = json_array();
	_cleanup_free_ char *copy = xstrdup(scopes);
	char *save = NULL;
	for (char *s = strtok_r(copy, ",", &save); s; s = strtok_r(NULL, ",", &save))
		json_array_append_new(arr, json_string(s));
	json_object_set_new(body, "scopes", arr);
	return 0;
}

static int create_local(sqlite3 *db, json_t *body, json_t **ret, struct err *e)
{
	_cleanup_free_ char *scopes_s = NULL;
	size_t i, n = 0;
	json_t *v;
	json_array_foreach (json_object_get(body, "scopes"), i, v) {
		char *s = xasprintf("%s%s%s", scopes_s ? scopes_s : "", n++ ? "," : "",
				    json_string_value(v));
		free(scopes_s);
		scopes_s = s;
	}
	unsigned scopes;
	if (keys_parse_scopes(scopes_s ? scopes_s : "", &scopes, e) < 0)
		return -1;
	int64_t expires = 0;
	const char *exp = json_string_value(json_object_get(body, "expiresIn"));
	if (exp && keys_parse_duration(exp, &expires) == 0)
		expires += (int64_t)time(NULL);
	struct quota_set quotas;
	quota_set_default(&quotas);
	json_t *q = json_object_get(body, "quotas");
	if (q && quota_set_merge_json(&quotas, q, e) < 0)
		return -1;
	struct key_info k;
	_cleanup_free_ char *secret = NULL;
	if (keys_create(db, prefix(), json_string_value(json_object_get(body, "name")), scopes,
			json_integer_value(json_object_get(body, "rateLimit")), expires, &k,
			&secret, e) < 0)
		return -1;
	if (keys_set_quotas(db, k.id, &quotas, e) < 0 || keys_get(db, k.id, &k, e) < 0) {
		struct err ignored;
		keys_delete(db, k.id, &ignored);
		return -1;
	}
	*ret = keys_info_json(&k);
	json_object_set_new(*ret, "key", json_string(secret));
	return 0;
}

/* Runs action on the store; *ret gets the reply as the HTTP API gives it. */
/* set on the database: the body of PATCH /admin/keys/ID, applied. */
static int set_local(sqlite3 *db, const char *id, json_t *body, json_t **ret, struct err *e)
{
	struct key_info k;
	if (keys_get(db, id, &k, e) < 0)
		return -1;
	json_t *q = json_object_get(body, "quotas");
	if (q && (quota_set_merge_json(&k.quotas, q, e) < 0 ||
		  keys_set_quotas(db, id, &k.quotas, e) < 0))
		return -1;
	json_t *rl = json_object_get(body, "rateLimit");
	if (rl && keys_set_rate_limit(db, id, json_integer_value(rl), e) < 0)
		return -1;
	if (keys_get(db, id, &k, e) < 0)
		return -1;
	*ret = keys_info_json(&k);
	return 0;
}

static int keys_do(struct keys_store *st, const char *action, const char *id, json_t *body,
		   json_t **ret, struct err *e)
{
	bool create = strcmp(action, "create") == 0, list = strcmp(action, "list") == 0;
	bool set = strcmp(action, "set") == 0;
	if (st->http) {
		_cleanup_free_ char *esc = id ? client_escape(id) : NULL;
		_cleanup_free_ char *path = create || list ? xstrdup("/admin/keys")
					    : strcmp(action, "delete") == 0 || set
						    ? xasprintf("/admin/keys/%s", esc)
						    : xasprintf("/admin/keys/%s/%s", esc, action);
		const char *method = list                            ? "GET"
				     : strcmp(action, "delete") == 0 ? "DELETE"
				     : set                           ? "PATCH"
								     : "POST";
		return client_json(st->http, method, path, create || set ? body : NULL, ret, NULL,
				   e);
	}
	if (create)
		return create_local(st->db, body, ret, e);
	if (set)
		return set_local(st->db, id, body, ret, e);
	if (list) {
		json_t *arr = json_array();
		if (keys_foreach(st->db, append_key, arr, e) < 0) {
			json_decref(arr);
			return -1;
		}
		*ret = json_pack("{s:o}", "keys", arr);
		return 0;
	}
	if (strcmp(action, "rotate") == 0) {
		_cleanup_free_ char *secret = NULL;
		if (keys_rotate(st->db, prefix(), id, &secret, e) < 0)
			return -1;
		*ret = json_pack("{s:s, s:s}", "id", id, "key", secret);
		return 0;
	}
	int r = strcmp(action, "revoke") == 0 ? keys_set_enabled(st->db, id, false, e)
					      : keys_delete(st->db, id, e);
	if (r < 0)
		return -1;
	*ret = json_pack("{s:b, s:s}", "success", 1, "id", id);
	return 0;
}

static void print_result(const char *action, const char *id, json_t *r)
{
	const char *secret = json_string_value(json_object_get(r, "key"));
	if (strcmp(action, "list") == 0) {
		printf("%-22s %-24s %-14s %-20s %-8s %-8s %s\n", "ID", "NAME", "PREFIX", "SCOPES",
		       "RATE/MIN", "STATE", "EXPIRES");
		size_t i;
		json_t *k;
		json_array_foreach (json_object_get(r, "keys"), i, k)
			print_key_line(k);
	} else if (strcmp(action, "create") == 0) {
		printf("Created key %s (%s).\nKey (shown only now): %s\n",
		       json_string_value(json_object_get(r, "id")),
		       json_string_value(json_object_get(r, "name")), secret);
	} else if (strcmp(action, "rotate") == 0) {
		printf("Rotated key %s.\nNew key (shown only now): %s\n", id, secret);
	} else if (strcmp(action, "set") == 0) {
		_cleanup_free_ char *q =
			json_dumps(json_object_get(r, "quotas"), JSON_COMPACT | JSON_SORT_KEYS);
		printf("Key %s: rate limit %lld/min, own quotas %s.\n", id,
		       (long long)json_integer_value(json_object_get(r, "rateLimit")),
		       q ? q : "{}");
	} else {
		printf("%s key %s.\n", strcmp(action, "revoke") == 0 ? "Revoked" : "Deleted", id);
	}
}

/* Takes --state-dir DIR out of argv (up to "--"); returns DIR or NULL. */
static const char *take_state_dir(int *argc, char **argv)
{
	const char *dir = NULL;
	int out = 1;
	for (int i = 1; i < *argc; i++) {
		if (strcmp(argv[i], "--state-dir") == 0 && i + 1 < *argc)
			dir = argv[++i];
		else
			argv[out++] = argv[i];
	}
	*argc = out;
	argv[out] = NULL;
	return dir;
}

int cmd_keys(int argc, char **argv)
{
	const char *url = getenv("SANDBOX_URL");
	bool http = cli_flag(argc, argv, "--url") || (url && *url);
	const char *api_key = NULL;
	for (int i = 1; i + 1 < argc && strcmp(argv[i], "--") != 0; i++)
		if (strcmp(argv[i], "--api-key") == 0)
			api_key = argv[i + 1];
	struct client *c = cli_client(&argc, argv);
	const char *state_dir = take_state_dir(&argc, argv);
	if (argc < 2) {
		client_free(c);
		return cmd_keys_help(), 2;
	}
	bool json = cli_flag(argc, argv, "--json");
	const char *action = argv[1];
	const char *id = argc > 2 && argv[2][0] != '-' ? argv[2] : NULL;
	static const char *const actions[] = {
		"create", "list", "set", "rotate", "revoke", "delete"
	};
	bool known = false;
	for (size_t i = 0; i < sizeof(actions) / sizeof(actions[0]); i++)
		known |= strcmp(action, actions[i]) == 0;
	int rc = 0;
	json_t *body = json_object();
	if (!known)
		rc = cli_fail("unknown action `%s` (create, list, set, rotate, revoke, delete)",
			      action);
	else if (strcmp(action, "create") == 0)
		rc = parse_create(argc, argv, body);
	else if (strcmp(action, "set") == 0 && id)
		rc = parse_set(argc, argv, body);
	else if (!id && strcmp(action, "list") != 0)
		rc = cli_fail("usage: sandbox keys %s ID", action);
	struct keys_store st = { 0 };
	if (rc == 0 && http)
		st.http = c, c = NULL;
	else if (rc == 0)
		rc = find_store(&st, state_dir, strcmp(action, "create") == 0, api_key);
	json_t *r = NULL;
	struct err e;
	if (rc == 0 && keys_do(&st, action, id, body, &r, &e) < 0)
		rc = cli_fail("%s", e.msg);
	else if (rc == 0 && json)
		cli_print_json(r);
	else if (rc == 0)
		print_result(action, id, r);
	json_decref(r);
	json_decref(body);
	if (st.db)
		store_close();
	client_free(st.http);
	client_free(c);
	return rc;
}
