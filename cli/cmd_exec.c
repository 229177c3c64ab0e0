/* sandbox exec: a command in an existing session (created on first use by the server). */
#include <stdio.h>

#include "cli.h"
#include "sandbox.h"

void cmd_exec_help(void)
{
	printf("usage: sandbox exec SESSION [--env K=V]... [--cwd DIR] [--timeout MS] [--json] "
	       "-- COMMAND [ARG]...\n\n"
	       "Runs a command in SESSION, streaming its output, and exits with its exit code.\n"
	       "Ctrl-C cancels the command.\n");
}

int cmd_exec(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
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
	int code = cli_exec_stream(c, id, body, json);
	json_decref(body);
	client_free(c);
	return code;
}
