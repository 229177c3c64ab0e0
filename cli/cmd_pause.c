/* sandbox pause / sandbox resume: a session's processes frozen where they are, then let go on
 * (POST /exec/:id/pause, /resume; docs/lifecycle.md). */
#include <stdio.h>
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
	       "--hibernate (jail, a session with a disk): ENDS every process of the session and\n"
	       "frees its memory; only its files are kept (also across a server restart), and\n"
	       "`sandbox resume` starts it afresh over them.\n");
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
			printf("%s %s%s\n", json_string_value(json_object_get(session, "id")),
			       json_string_value(json_object_get(session, "state")),
			       mode && strcmp(mode, "hibernate") == 0
				       ? " (hibernated: its processes were ended, its files kept)"
				       : "");
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
