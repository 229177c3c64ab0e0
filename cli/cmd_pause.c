/* sandbox pause / sandbox resume: a session's processes frozen where they are, then let go on
 * (POST /exec/:id/pause, /resume); sandbox fork: new sessions from one's current state
 * (POST /exec/:id/fork). docs/lifecycle.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "sandbox.h"
#include "util/cleanup.h"

void cmd_pause_help(void)
{
	printf("usage: sandbox pause [--hibernate] ID... [--json]\n\n"
	       "Pauses sessions: their processes stop where they are and use no CPU; memory,\n"
	       "files and background processes are kept, and carry on after `sandbox resume`.\n"
	       "Commands and file operations of a paused session are refused until then, and\n"
	       "a session with a command or transfer in flight cannot be paused. Prints each\n"
	       "session's id and state (--json: the session objects).\n\n"
	       "--hibernate frees its memory and keeps it on disk (also across a server\n"
	       "restart): on qemu the whole VM, whose processes carry on after `sandbox\n"
	       "resume`; in a jail (a session with a disk) only its files: it ENDS every process\n"
	       "of the session, and `sandbox resume` starts it afresh over them.\n");
}

void cmd_resume_help(void)
{
	printf("usage: sandbox resume ID... [--json]\n\n"
	       "Resumes paused sessions: their processes carry on from where they stopped.\n"
	       "Prints each session's id and state (--json: the session objects).\n");
}

static int pause_or_resume(int argc, char **argv, const char *action, void (*help)(void))
{
	struct client *c = cli_client(&argc, argv);
	bool json = cli_flag(argc, argv, "--json");
	bool hibernate = strcmp(action, "pause") == 0 && cli_flag(argc, argv, "--hibernate");
	int n = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0 ||
		    (hibernate && strcmp(argv[i], "--hibernate") == 0))
			continue;
		if (argv[i][0] == '-') {
			client_free(c);
			return cli_fail("unknown option `%s`", argv[i]), 2;
		}
		n++;
	}
	if (n == 0) {
		help();
		client_free(c);
		return 2;
	}
	int rc = 0;
	json_t *all = json_array();
	for (int i = 1; i < argc; i++) {
		if (argv[i][0] == '-')
			continue;
		_cleanup_free_ char *esc = client_escape(argv[i]);
		_cleanup_free_ char *p = xasprintf("/exec/%s/%s", esc, action);
		struct err e;
		json_t *session = NULL;
		json_auto_t *body = hibernate ? json_pack("{s:s}", "mode", "hibernate") : NULL;
		if (client_json(c, "POST", p, body, &session, NULL, &e) < 0) {
			rc = cli_fail("%s: %s", argv[i], e.msg);
			continue;
		}
		if (json)
			json_array_append_new(all, session);
		else {
			const char *mode = json_string_value(json_object_get(session, "pauseMode"));
			bool kept = json_is_true(json_object_get(session, "processesKept"));
			bool hib = mode && strcmp(mode, "hibernate") == 0;
			printf("%s %s%s\n", json_string_value(json_object_get(session, "id")),
			       json_string_value(json_object_get(session, "state")),
			       !hib   ? ""
			       : kept ? " (hibernated: saved to disk, its processes kept)"
				      : " (hibernated: its processes were ended, its files kept)");
			json_decref(session);
		}
	}
	if (json)
		cli_print_json(n == 1 && json_array_size(all) == 1 ? json_array_get(all, 0) : all);
	json_decref(all);
	client_free(c);
	return rc;
}

int cmd_pause(int argc, char **argv)
{
	return pause_or_resume(argc, argv, "pause", cmd_pause_help);
}

int cmd_resume(int argc, char **argv)
{
	return pause_or_resume(argc, argv, "resume", cmd_resume_help);
}

void cmd_fork_help(void)
{
	printf("usage: sandbox fork ID [--count N] [--json]\n\n"
	       "Forks a running session into N new ones (1 by default, at most 16) from its\n"
	       "current state: on qemu the whole VM, its memory and running processes with a\n"
	       "copy of its disk; in a jail (a session with a disk) a copy of its files only,\n"
	       "each fork's processes starting afresh. Each fork has its own id and network.\n"
	       "The session runs on. Prints each fork's id and state (--json: the session\n"
	       "objects).\n");
}

int cmd_fork(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	bool json = cli_flag(argc, argv, "--json");
	const char *id = NULL;
	long count = 1;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			continue;
		if (strcmp(argv[i], "--count") == 0 && i + 1 < argc) {
			char *end;
			count = strtol(argv[++i], &end, 10);
			if (*end || count < 1 || count > 16) {
				client_free(c);
				return cli_fail("--count takes a number from 1 to 16"), 2;
			}
			continue;
		}
		if (argv[i][0] == '-' || id) {
			client_free(c);
			return cli_fail("unexpected `%s`", argv[i]), 2;
		}
		id = argv[i];
	}
	if (!id) {
		cmd_fork_help();
		client_free(c);
		return 2;
	}
	_cleanup_free_ char *esc = client_escape(id);
	_cleanup_free_ char *p = xasprintf("/exec/%s/fork", esc);
	json_auto_t *body = json_pack("{s:I}", "count", (json_int_t)count);
	json_auto_t *resp = NULL;
	struct err e;
	int rc = 0;
	if (client_json(c, "POST", p, body, &resp, NULL, &e) < 0) {
		rc = cli_fail("%s: %s", id, e.msg);
	} else if (json) {
		cli_print_json(json_object_get(resp, "sessions"));
	} else {
		size_t i;
		json_t *f;
		json_array_foreach (json_object_get(resp, "sessions"), i, f) {
			const char *err = json_string_value(json_object_get(f, "error"));
			printf("%s %s%s%s\n", json_string_value(json_object_get(f, "id")),
			       json_string_value(json_object_get(f, "state")), err ? ": " : "",
			       err ? err : "");
			if (err)
				rc = 1;
		}
	}
	client_free(c);
	return rc;
}
