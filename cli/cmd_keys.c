/* sandbox keys: API key management on the daemon's database, safe while it runs. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "auth/keys.h"
#include "cli.h"
#include "util/cleanup.h"

#define DEFAULT_STATE_DIR "/var/lib/agent-sandbox/state"
#define DEFAULT_PREFIX    "sk_test_"

void cmd_keys_help(void)
{
	printf("usage: sandbox keys <action> [options]\n\n"
	       "  create NAME [--scopes exec,admin,metrics] [--rate-limit N] [--expires DURATION]\n"
	       "                 create a key (shown once); DURATION like 30d, 12h, 90m, 3600\n"
	       "  list           list keys (never their secrets)\n"
	       "  rotate ID      replace a key's secret; its sessions stay its own\n"
	       "  revoke ID      disable a key at once\n"
	       "  delete ID      remove a key\n\n"
	       "options: --json for machine-readable output\n"
	       "environment: SANDBOX_STATE_DIR (default %s), AUTH_KEY_PREFIX (default %s)\n",
	       DEFAULT_STATE_DIR, DEFAULT_PREFIX);
}

static sqlite3 *open_db(void)
{
	const char *dir = getenv("SANDBOX_STATE_DIR");
	if (!dir || !*dir)
		dir = DEFAULT_STATE_DIR;
	_cleanup_free_ char *path = xasprintf("%s/sandboxd.db", dir);
	sqlite3 *db = NULL;
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, NULL) !=
	    SQLITE_OK) {
		cli_fail("cannot open the key store `%s`: %s (is SANDBOX_STATE_DIR right, and are "
			 "you root?)",
			 path, db ? sqlite3_errmsg(db) : "out of memory");
		sqlite3_close(db);
		return NULL;
	}
	sqlite3_busy_timeout(db, 5000);
	sqlite3_exec(db, "PRAGMA journal_mode=WAL;", NULL, NULL, NULL);
	struct err e;
	if (keys_init(db, &e) < 0) {
		cli_fail("%s", e.msg);
		sqlite3_close(db);
		return NULL;
	}
	return db;
}

static const char *prefix(void)
{
	const char *p = getenv("AUTH_KEY_PREFIX");
	return p && *p ? p : DEFAULT_PREFIX;
}

static void print_json(json_t *j)
{
	char *s = json_dumps(j, JSON_INDENT(2));
	puts(s);
	free(s);
	json_decref(j);
}

static void print_key_line(const struct key_info *k, void *arg)
{
	if (arg) {
		json_array_append_new(arg, keys_info_json(k));
		return;
	}
	json_t *scopes = keys_scopes_json(k->scopes);
	char sc[64] = "";
	size_t i;
	json_t *v;
	json_array_foreach (scopes, i, v) {
		if (i)
			strcat(sc, ",");
		strcat(sc, json_string_value(v));
	}
	json_decref(scopes);
	char exp[32] = "never";
	if (k->expires) {
		time_t t = (time_t)k->expires;
		strftime(exp, sizeof(exp), "%Y-%m-%d %H:%M", gmtime(&t));
	}
	printf("%-22s %-24s %-14s %-20s %-8lld %-8s %s\n", k->id, k->name, k->prefix, sc,
	       (long long)k->rate_limit, k->enabled ? "enabled" : "revoked", exp);
}

static int keys_create_cmd(sqlite3 *db, int argc, char **argv, bool json)
{
	const char *name = NULL, *scopes_s = "exec";
	int64_t rate = 0, expires = 0;
	for (int i = 2; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			continue;
		if (strcmp(argv[i], "--scopes") == 0 && i + 1 < argc) {
			scopes_s = argv[++i];
		} else if (strcmp(argv[i], "--rate-limit") == 0 && i + 1 < argc) {
			char *end;
			const char *v = argv[++i];
			rate = strtoll(v, &end, 10);
			if (!*v || *end || rate < 0)
				return cli_fail("--rate-limit takes a whole number of requests per "
						"minute (0 for none)");
		} else if (strcmp(argv[i], "--expires") == 0 && i + 1 < argc) {
			int64_t secs;
			if (keys_parse_duration(argv[++i], &secs) < 0)
				return cli_fail("--expires takes a duration like 30d, 12h, 90m or "
						"seconds");
			expires = (int64_t)time(NULL) + secs;
		} else if (argv[i][0] == '-') {
			return cli_fail("unknown or incomplete option `%s`", argv[i]);
		} else if (!name) {
			name = argv[i];
		} else {
			return cli_fail("unexpected argument `%s`", argv[i]);
		}
	}
	if (!name)
		return cli_fail("usage: sandbox keys create NAME [--scopes exec,admin,metrics] "
				"[--rate-limit N] [--expires DURATION]");
	struct err e;
	unsigned scopes;
	if (keys_parse_scopes(scopes_s, &scopes, &e) < 0)
		return cli_fail("%s", e.msg);
	struct key_info k;
	_cleanup_free_ char *secret = NULL;
	if (keys_create(db, prefix(), name, scopes, rate, expires, &k, &secret, &e) < 0)
		return cli_fail("%s", e.msg);
	if (json) {
		json_t *j = keys_info_json(&k);
		json_object_set_new(j, "key", json_string(secret));
		print_json(j);
	} else {
		printf("Created key %s (%s).\nKey (shown only now): %s\n", k.id, k.name, secret);
	}
	return 0;
}

int cmd_keys(int argc, char **argv)
{
	if (argc < 2)
		return cmd_keys_help(), 2;
	bool json = cli_flag(argc, argv, "--json");
	const char *action = argv[1];
	sqlite3 *db = open_db();
	if (!db)
		return 1;
	int rc = 0;
	struct err e;
	const char *id = argc > 2 && argv[2][0] != '-' ? argv[2] : NULL;
	if (strcmp(action, "create") == 0) {
		rc = keys_create_cmd(db, argc, argv, json);
	} else if (strcmp(action, "list") == 0) {
		json_t *arr = json ? json_array() : NULL;
		if (!json)
			printf("%-22s %-24s %-14s %-20s %-8s %-8s %s\n", "ID", "NAME", "PREFIX",
			       "SCOPES", "RATE/MIN", "STATE", "EXPIRES");
		if (keys_foreach(db, print_key_line, arr, &e) < 0)
			rc = cli_fail("%s", e.msg);
		else if (json)
			print_json(json_pack("{s:o}", "keys", arr));
	} else if (!id && (strcmp(action, "rotate") == 0 || strcmp(action, "revoke") == 0 ||
			   strcmp(action, "delete") == 0)) {
		rc = cli_fail("usage: sandbox keys %s ID", action);
	} else if (strcmp(action, "rotate") == 0) {
		_cleanup_free_ char *secret = NULL;
		if (keys_rotate(db, prefix(), id, &secret, &e) < 0)
			rc = cli_fail("%s", e.msg);
		else if (json)
			print_json(json_pack("{s:s, s:s}", "id", id, "key", secret));
		else
			printf("Rotated key %s.\nNew key (shown only now): %s\n", id, secret);
	} else if (strcmp(action, "revoke") == 0) {
		if (keys_set_enabled(db, id, false, &e) < 0)
			rc = cli_fail("%s", e.msg);
		else if (json)
			print_json(json_pack("{s:b, s:s}", "success", 1, "id", id));
		else
			printf("Revoked key %s.\n", id);
	} else if (strcmp(action, "delete") == 0) {
		if (keys_delete(db, id, &e) < 0)
			rc = cli_fail("%s", e.msg);
		else if (json)
			print_json(json_pack("{s:b, s:s}", "success", 1, "id", id));
		else
			printf("Deleted key %s.\n", id);
	} else {
		rc = cli_fail("unknown action `%s` (create, list, rotate, revoke, delete)", action);
	}
	sqlite3_close(db);
	return rc;
}
