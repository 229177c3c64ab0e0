/* sandbox exec: a command in an existing session. The server's execute route creates a
 * session on first use (as the reference API does); the CLI asks first, so that a mistyped
 * name is an error rather than a new session, unless --create says to make it. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "sandbox.h"
#include "util/cleanup.h"
#include "util/err.h"

void cmd_exec_help(void)
{
	printf("usage: sandbox exec [-d [--tag TAG] | -i] SESSION [--env K=V]... [--cwd DIR] "
	       "[--timeout MS] [--user root] [--create [--template NAME]] [--json] -- COMMAND "
	       "[ARG]...\n\n"
	       "Runs a command in SESSION, streaming its output, and exits with its exit code.\n"
	       "Ctrl-C cancels the command. SESSION must exist (sandbox create) unless --create\n"
	       "is given.\n"
	       "  --create   create SESSION when there is none (from --template NAME, else the\n"
	       "             server's default template)\n"
	       "  -d         start it as a background process and print its pid (the process\n"
	       "             object with --json); see `sandbox procs`, `attach` and `kill`\n"
	       "  --tag TAG  with -d: a name to refer to the process by\n"
	       "  --user root  run it as the sandbox's own root (to install packages)\n"
	       "  -i         forward this program's stdin to the command (it runs as a\n"
	       "             background process); Ctrl-C sends it SIGINT\n"
	       "Short options: -e (--env), -t (--template), -u (--user).\n");
}

/* Takes -d, -i, --create and --tag TAG out of argv (before any "--"). */
static int take_mode(int *argc, char **argv, bool *detach, bool *interactive, bool *create,
		     const char **tag)
{
	int out = 1, i;
	for (i = 1; i < *argc && strcmp(argv[i], "--") != 0; i++) {
		if (strcmp(argv[i], "--create") == 0) {
			*create = true;
		} else if (strcmp(argv[i], "-d") == 0 || strcmp(argv[i], "--detach") == 0) {
			*detach = true;
		} else if (strcmp(argv[i], "-i") == 0 || strcmp(argv[i], "--interactive") == 0) {
			*interactive = true;
		} else if (strcmp(argv[i], "--tag") == 0) {
			if (i + 1 >= *argc)
				return cli_fail("--tag needs a value");
			*tag = argv[++i];
		} else {
			argv[out++] = argv[i];
		}
	}
	while (i < *argc)
		argv[out++] = argv[i++];
	*argc = out;
	argv[out] = NULL;
	if (*detach && *interactive)
		return cli_fail("-d and -i do not go together");
	if (*tag && !*detach && !*interactive)
		return cli_fail("--tag names a background process: use it with -d");
	return 0;
}

/* 0 when the caller's session id exists; else 1 after saying so. A GET of the session (the
 * E2B route, which reads the session table and creates nothing): 404 for a session that does
 * not exist or is another key's. */
static int need_session(struct client *c, const char *id)
{
	_cleanup_free_ char *esc = client_escape(id);
	_cleanup_free_ char *path = xasprintf("/sandboxes/%s", esc);
	int status = 0;
	struct err e;
	if (client_json(c, "GET", path, NULL, NULL, &status, &e) == 0)
		return 0;
	if (status == 404)
		return cli_fail("no session %s; sandbox create %s, or sandbox exec --create %s ...",
				id, id, id);
	return cli_fail("%s", e.msg);
}

int cmd_exec(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	bool detach = false, interactive = false, create = false;
	const char *tag = NULL;
	if (take_mode(&argc, argv, &detach, &interactive, &create, &tag) != 0) {
		client_free(c);
		return 2;
	}
	if (argc < 3 || argv[1][0] == '-') {
		client_free(c);
		cmd_exec_help();
		return 2;
	}
	const char *id = argv[1];
	bool json = cli_flag(argc, argv, "--json");
	json_t *body = json_object();
	const char *tmpl = NULL;
	/* Options start after the session id. */
	if (cli_parse_exec_opts(argc - 1, argv + 1, body, &tmpl) < 0) {
		json_decref(body);
		client_free(c);
		return 2;
	}
	if (tmpl)
		json_object_set_new(body, "template", json_string(tmpl));
	if (tag)
		json_object_set_new(body, "tag", json_string(tag));
	if (!create && need_session(c, id) != 0) {
		json_decref(body);
		client_free(c);
		return 1;
	}
	int code = detach        ? cli_exec_background(c, id, body, json)
		   : interactive ? cli_exec_interactive(c, id, body)
				 : cli_exec_stream(c, id, body, json);
	json_decref(body);
	client_free(c);
	return code;
}
