/* sandbox snapshot: a session's current state kept under a name (POST /exec/:id/snapshot);
 * sandbox snapshots: the caller's snapshots (ls, rm). New sessions start from one with
 * sandbox create --snapshot NAME. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth/keys.h"
#include "cli.h"
#include "sandbox.h"
#include "util/cleanup.h"

void cmd_snapshot_help(void)
{
	printf("usage: sandbox snapshot ID NAME [--ttl DURATION] [--json]\n\n"
	       "Keeps session ID's current state as snapshot NAME (1 to 63 of [A-Za-z0-9._-],\n"
	       "starting with a letter or digit), for new sessions to start from: sandbox\n"
	       "create --snapshot NAME. On qemu the whole VM, whose processes carry on in them;\n"
	       "in a jail (a session with a disk) only its files. The session runs on.\n"
	       "  --ttl DURATION  deleted after this long: seconds, or 90m, 12h, 7d (default and\n"
	       "                  most: the server's SANDBOX_SNAPSHOT_TTL)\n"
	       "Prints the snapshot's name and what it kept (--json: the snapshot object).\n");
}

void cmd_snapshots_help(void)
{
	printf("usage: sandbox snapshots ls [--json]    list your snapshots\n"
	       "       sandbox snapshots rm NAME...     delete snapshots\n\n"
	       "sandbox snapshot ID NAME takes one; sandbox create --snapshot NAME starts a\n"
	       "session from it. KEPT is what sessions made from it get: processes (the VM's\n"
	       "memory, on qemu) or files (a jail's disk).\n");
}

static const char *str_or_dash(json_t *obj, const char *key)
{
	const char *s = json_string_value(json_object_get(obj, key));
	return s ? s : "-";
}

static const char *kept(json_t *snap)
{
	return json_is_true(json_object_get(snap, "processesKept")) ? "processes" : "files";
}

int cmd_snapshot(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	bool json = cli_flag(argc, argv, "--json");
	const char *args[2] = { NULL, NULL };
	int nargs = 0;
	int64_t ttl = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			continue;
		if (strcmp(argv[i], "--ttl") == 0) {
			if (i + 1 >= argc || keys_parse_duration(argv[++i], &ttl) < 0 || ttl <= 0) {
				client_free(c);
				return cli_fail("--ttl takes a duration like 3600, 90m, 12h or 7d"),
				       2;
			}
			continue;
		}
		if (argv[i][0] == '-' || nargs == 2) {
			client_free(c);
			return cli_fail("unexpected `%s`", argv[i]), 2;
		}
		args[nargs++] = argv[i];
	}
	if (nargs < 2) {
		cmd_snapshot_help();
		client_free(c);
		return 2;
	}
	_cleanup_free_ char *esc = client_escape(args[0]);
	_cleanup_free_ char *p = xasprintf("/exec/%s/snapshot", esc);
	json_auto_t *body = json_pack("{s:s}", "name", args[1]);
	if (ttl > 0)
		json_object_set_new(body, "ttlSeconds", json_integer(ttl));
	json_auto_t *snap = NULL;
	struct err e;
	int rc = 0;
	if (client_json(c, "POST", p, body, &snap, NULL, &e) < 0)
		rc = cli_fail("%s: %s", args[0], e.msg);
	else if (json)
		cli_print_json(snap);
	else
		printf("%s (%s kept, until %s)\n", str_or_dash(snap, "name"), kept(snap),
		       str_or_dash(snap, "expiresAt"));
	client_free(c);
	return rc;
}

static char *snapshot_path(const char *name)
{
	/* Names are [A-Za-z0-9._-]: nothing to escape; others are refused by the server. */
	for (const char *p = name; *p; p++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
			    *p))
			return NULL;
	return *name ? xasprintf("/snapshots/%s", name) : NULL;
}

static void print_snapshot(json_t *s)
{
	printf("%-24s %-12s %-32s %12lld  %-9s %s\n", str_or_dash(s, "name"),
	       str_or_dash(s, "template"), str_or_dash(s, "session"),
	       (long long)json_integer_value(json_object_get(s, "sizeBytes")), kept(s),
	       str_or_dash(s, "expiresAt"));
}

int cmd_snapshots(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	const char *sub = argc >= 2 && strcmp(argv[1], "--json") != 0 ? argv[1] : "ls";
	bool json = cli_flag(argc, argv, "--json");
	json_t *r = NULL;
	struct err e;
	int rc = 0;
	if (strcmp(sub, "ls") == 0 || strcmp(sub, "list") == 0) {
		if (client_json(c, "GET", "/snapshots", NULL, &r, NULL, &e) < 0) {
			rc = cli_fail("%s", e.msg);
		} else if (json) {
			cli_print_json(json_object_get(r, "snapshots"));
		} else {
			printf("%-24s %-12s %-32s %12s  %-9s %s\n", "NAME", "TEMPLATE", "SESSION",
			       "SIZE", "KEPT", "EXPIRES");
			size_t i;
			json_t *s;
			json_array_foreach (json_object_get(r, "snapshots"), i, s)
				print_snapshot(s);
		}
	} else if (strcmp(sub, "rm") == 0 || strcmp(sub, "delete") == 0) {
		if (argc < 3)
			rc = cli_fail("usage: sandbox snapshots rm NAME...");
		for (int i = 2; i < argc; i++) {
			if (argv[i][0] == '-')
				continue;
			_cleanup_free_ char *path = snapshot_path(argv[i]);
			json_t *out = NULL;
			if (!path)
				rc = cli_fail("`%s` is not a snapshot name", argv[i]);
			else if (client_json(c, "DELETE", path, NULL, &out, NULL, &e) < 0)
				rc = cli_fail("%s: %s", argv[i], e.msg);
			json_decref(out);
		}
	} else {
		rc = cli_fail("unknown snapshots command `%s` (ls, rm)", sub);
	}
	json_decref(r);
	client_free(c);
	return rc;
}
