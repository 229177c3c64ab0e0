/* sandbox run: a new sandbox for one command, destroyed afterwards. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "sandbox.h"
#include "util/cleanup.h"

void cmd_run_help(void)
{
	printf("usage: sandbox run [--template T] [--env K=V]... [--cwd DIR] [--timeout MS] "
	       "[--user root] [--json] -- COMMAND [ARG]...\n\n"
	       "Creates a session, streams the command's output, destroys the session and exits\n"
	       "with the command's exit code (128 + N when killed by signal N). Ctrl-C cancels\n"
	       "the command. --json prints the stream's NDJSON events instead of the output.\n"
	       "--user root runs it as the sandbox's own root (default: the command user).\n"
	       "Short options: -e (--env), -t (--template), -u (--user).\n");
}

int cli_parse_exec_opts(int argc, char **argv, json_t *body, const char **template_name)
{
	json_t *env = json_object();
	int i;
	for (i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--") == 0) {
			i++;
			break;
		}
		if (strcmp(a, "--json") == 0)
			continue;
		if (i + 1 >= argc || a[0] != '-') {
			if (a[0] != '-')
				break; /* the command, without "--" */
			cli_fail("option %s needs a value", a);
			json_decref(env);
			return -1;
		}
		const char *v = argv[++i];
		if (strcmp(a, "--env") == 0 || strcmp(a, "-e") == 0) {
			if (cli_env_add(env, v) < 0) {
				json_decref(env);
				return -1;
			}
		} else if (strcmp(a, "--cwd") == 0) {
			json_object_set_new(body, "cwd", json_string(v));
		} else if (strcmp(a, "--user") == 0 || strcmp(a, "-u") == 0) {
			/* "root" or "user": the server says what else is wrong. */
			json_object_set_new(body, "user", json_string(v));
		} else if (strcmp(a, "--timeout") == 0) {
			char *end;
			long long ms = strtoll(v, &end, 10);
			if (*end || ms < 0) {
				cli_fail("--timeout takes milliseconds");
				json_decref(env);
				return -1;
			}
			json_object_set_new(body, "timeout", json_integer(ms));
		} else if ((strcmp(a, "--template") == 0 || strcmp(a, "-t") == 0) &&
			   template_name) {
			*template_name = v;
		} else {
			cli_fail("unknown option `%s`", a);
			json_decref(env);
			return -1;
		}
	}
	if (json_object_size(env))
		json_object_set_new(body, "env", env);
	else
		json_decref(env);
	if (i >= argc) {
		cli_fail("no command given (put it after --)");
		return -1;
	}
	json_object_set_new(body, "command", json_string(argv[i]));
	json_t *args = json_array();
	for (int j = i + 1; j < argc; j++)
		json_array_append_new(args, json_string(argv[j]));
	json_object_set_new(body, "args", args);
	return i;
}

int cmd_run(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	bool json = cli_flag(argc, argv, "--json");
	json_t *body = json_object();
	const char *tmpl = NULL;
	if (cli_parse_exec_opts(argc, argv, body, &tmpl) < 0) {
		json_decref(body);
		client_free(c);
		return 2;
	}
	json_t *create = json_object();
	if (tmpl)
		json_object_set_new(create, "template", json_string(tmpl));
	json_t *session = NULL;
	struct err e;
	if (client_json(c, "POST", "/exec/", create, &session, NULL, &e) < 0) {
		json_decref(create);
		json_decref(body);
		client_free(c);
		return cli_fail("%s", e.msg);
	}
	json_decref(create);
	_cleanup_free_ char *id = xstrdup(json_string_value(json_object_get(session, "id")));
	json_decref(session);
	int code = cli_exec_stream(c, id, body, json);
	json_decref(body);
	_cleanup_free_ char *esc = client_escape(id);
	_cleanup_free_ char *path = xasprintf("/exec/%s", esc);
	client_set_abort_check(c, NULL, NULL);
	if (client_json(c, "DELETE", path, NULL, NULL, NULL, &e) < 0)
		fprintf(stderr, "sandbox: could not destroy session %s: %s\n", id, e.msg);
	client_free(c);
	return code;
}
