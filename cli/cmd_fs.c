/* sandbox stat, mkdir, mv and rm SESSION:PATH: a session's files by name. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "sandbox.h"
#include "util/cleanup.h"

/* Splits "SESSION:PATH" (session ids have no ':'); false when it is not of that form. */
static bool split(const char *arg, char **id, const char **path)
{
	const char *colon = strchr(arg, ':');
	if (!colon || colon == arg || !colon[1])
		return false;
	*id = strndup(arg, (size_t)(colon - arg));
	*path = colon + 1;
	return *id != NULL;
}

/* POSTs body to /exec/SESSION/what; prints the reply with --json. */
static int post(struct client *c, const char *id, const char *what, json_t *body, bool json)
{
	_cleanup_free_ char *esc = client_escape(id);
	_cleanup_free_ char *p = xasprintf("/exec/%s/%s", esc, what);
	json_t *r = NULL;
	struct err e;
	int rc = 0;
	if (client_json(c, "POST", p, body, &r, NULL, &e) < 0) {
		rc = cli_fail("%s", e.msg);
	} else if (json) {
		cli_print_json(r);
	}
	json_decref(r);
	return rc;
}

/* The arguments that are not options (up to "--", after which all are). */
static int positional(int argc, char **argv, const char **out, int max)
{
	int n = 0;
	bool opts = true;
	for (int i = 1; i < argc; i++) {
		if (opts && strcmp(argv[i], "--") == 0) {
			opts = false;
			continue;
		}
		if (opts && argv[i][0] == '-')
			continue;
		if (n == max)
			return -1;
		out[n++] = argv[i];
	}
	return n;
}

void cmd_stat_help(void)
{
	printf("usage: sandbox stat SESSION:PATH [--json]\n"
	       "Prints a path's type, size, mode and modification time (a symlink itself).\n");
}

int cmd_stat(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	bool json = cli_flag(argc, argv, "--json");
	const char *args[1];
	_cleanup_free_ char *id = NULL;
	const char *path;
	if (positional(argc, argv, args, 1) != 1 || !split(args[0], &id, &path)) {
		cmd_stat_help();
		client_free(c);
		return 2;
	}
	_cleanup_free_ char *esc = client_escape(id);
	_cleanup_free_ char *q = client_escape(path);
	_cleanup_free_ char *p = xasprintf("/exec/%s/stat?path=%s", esc, q);
	json_t *r = NULL;
	struct err e;
	int rc = 0;
	if (client_json(c, "GET", p, NULL, &r, NULL, &e) < 0) {
		rc = cli_fail("%s", e.msg);
	} else if (json) {
		cli_print_json(r);
	} else {
		printf("%s %s %lld %04llo %.3f\n", json_string_value(json_object_get(r, "path")),
		       json_string_value(json_object_get(r, "type")),
		       (long long)json_integer_value(json_object_get(r, "size")),
		       (unsigned long long)json_integer_value(json_object_get(r, "mode")),
		       json_number_value(json_object_get(r, "mtime")));
	}
	json_decref(r);
	client_free(c);
	return rc;
}

void cmd_mkdir_help(void)
{
	printf("usage: sandbox mkdir SESSION:PATH... [--no-parents] [--json]\n"
	       "Makes directories, with their missing parents unless --no-parents.\n");
}

int cmd_mkdir(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	bool json = cli_flag(argc, argv, "--json");
	bool parents = !cli_flag(argc, argv, "--no-parents");
	const char *args[64];
	int n = positional(argc, argv, args, 64);
	if (n < 1) {
		cmd_mkdir_help();
		client_free(c);
		return 2;
	}
	int rc = 0;
	for (int i = 0; i < n; i++) {
		_cleanup_free_ char *id = NULL;
		const char *path;
		if (!split(args[i], &id, &path)) {
			rc = cli_fail("`%s` is not SESSION:PATH", args[i]);
			continue;
		}
		json_auto_t *body = json_pack("{s:s, s:b}", "path", path, "parents", parents);
		if (post(c, id, "mkdir", body, json))
			rc = 1;
	}
	client_free(c);
	return rc;
}

void cmd_mv_help(void)
{
	printf("usage: sandbox mv SESSION:FROM [SESSION:]TO [--no-clobber] [--json]\n"
	       "Moves or renames within a session's workspace; replaces TO unless "
	       "--no-clobber.\n");
}

int cmd_mv(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	bool json = cli_flag(argc, argv, "--json");
	bool overwrite = !cli_flag(argc, argv, "--no-clobber");
	const char *args[2];
	_cleanup_free_ char *id = NULL, *id2 = NULL;
	const char *from, *to;
	if (positional(argc, argv, args, 2) != 2 || !split(args[0], &id, &from)) {
		cmd_mv_help();
		client_free(c);
		return 2;
	}
	to = args[1];
	if (split(args[1], &id2, &to) && strcmp(id, id2) != 0) {
		client_free(c);
		return cli_fail("mv moves within one session (`%s` and `%s`): use cp between "
				"sessions",
				id, id2);
	}
	json_auto_t *body =
		json_pack("{s:s, s:s, s:b}", "from", from, "to", to, "overwrite", overwrite);
	int rc = post(c, id, "move", body, json);
	client_free(c);
	return rc;
}

int cli_rm_paths(struct client *c, int argc, char **argv)
{
	bool recursive = cli_flag(argc, argv, "-r") || cli_flag(argc, argv, "--recursive");
	const char *args[64];
	int n = positional(argc, argv, args, 64);
	int rc = 0;
	for (int i = 0; i < n; i++) {
		_cleanup_free_ char *id = NULL;
		const char *path;
		if (!split(args[i], &id, &path)) {
			rc = cli_fail("`%s`: give SESSION:PATH to remove files, or only sessions",
				      args[i]);
			continue;
		}
		json_auto_t *body = json_pack("{s:s, s:b}", "path", path, "recursive", recursive);
		if (post(c, id, "remove", body, false))
			rc = 1;
	}
	return rc;
}
