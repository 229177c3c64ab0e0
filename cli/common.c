/* Helpers shared by the subcommands: the client from options, streaming a command. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "sandbox.h"
#include "util/cleanup.h"

struct client *cli_client(int *argc, char **argv)
{
	const char *url = NULL, *key = NULL;
	int out = 1;
	bool rest = false; /* after "--" every argument belongs to the command */
	for (int i = 1; i < *argc; i++) {
		if (rest) {
			argv[out++] = argv[i];
		} else if (strcmp(argv[i], "--") == 0) {
			rest = true;
			argv[out++] = argv[i];
		} else if (strcmp(argv[i], "--url") == 0 && i + 1 < *argc)
			url = argv[++i];
		else if (strcmp(argv[i], "--api-key") == 0 && i + 1 < *argc)
			key = argv[++i];
		else
			argv[out++] = argv[i];
	}
	*argc = out;
	argv[out] = NULL;
	return client_new(url, key);
}

int cli_env_add(json_t *obj, const char *kv)
{
	const char *eq = strchr(kv, '=');
	if (!eq || eq == kv) {
		cli_fail("--env takes NAME=VALUE, not `%s`", kv);
		return -1;
	}
	_cleanup_free_ char *name = strndup(kv, (size_t)(eq - kv));
	json_object_set_new(obj, name, json_string(eq + 1));
	return 0;
}

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
	interrupted = 1;
}

struct stream_state {
	bool json;
	int exit_code;
	bool have_result;
	char error[512];
};

int cli_signal_number(const char *name)
{
	static const struct {
		const char *name;
		int num;
	} sigs[] = { { "SIGHUP", 1 },   { "SIGINT", 2 },   { "SIGQUIT", 3 }, { "SIGILL", 4 },
		     { "SIGABRT", 6 },  { "SIGFPE", 8 },   { "SIGKILL", 9 }, { "SIGSEGV", 11 },
		     { "SIGPIPE", 13 }, { "SIGALRM", 14 }, { "SIGTERM", 15 } };
	for (size_t i = 0; name && i < sizeof(sigs) / sizeof(sigs[0]); i++)
		if (strcmp(sigs[i].name, name) == 0)
			return sigs[i].num;
	return 0;
}

static int on_line(json_t *obj, void *arg)
{
	struct stream_state *st = arg;
	if (interrupted)
		return -1; /* closing the stream makes the server cancel the command */
	const char *type = json_string_value(json_object_get(obj, "type"));
	if (!type)
		return 0;
	if (st->json) {
		char *s = json_dumps(obj, JSON_COMPACT);
		puts(s);
		fflush(stdout);
		free(s);
	}
	if (strcmp(type, "stream") == 0 && !st->json) {
		const char *stream = json_string_value(json_object_get(obj, "stream"));
		json_t *data = json_object_get(obj, "data");
		FILE *f = stream && strcmp(stream, "stderr") == 0 ? stderr : stdout;
		fwrite(json_string_value(data), 1, json_string_length(data), f);
		fflush(f);
	} else if (strcmp(type, "result") == 0) {
		st->have_result = true;
		json_t *code = json_object_get(obj, "exitCode");
		int sig = cli_signal_number(json_string_value(json_object_get(obj, "signal")));
		st->exit_code = json_is_integer(code) ? (int)json_integer_value(code)
						      : 128 + (sig ? sig : 9);
		if (!st->json && json_is_true(json_object_get(obj, "timedOut")))
			fprintf(stderr, "sandbox: the command timed out\n");
		if (!st->json && json_is_true(json_object_get(obj, "oomKilled")))
			fprintf(stderr, "sandbox: killed: the sandbox ran out of memory\n");
	} else if (strcmp(type, "error") == 0) {
		snprintf(st->error, sizeof(st->error), "%s",
			 json_string_value(json_object_get(obj, "error")));
	}
	return 0;
}

static bool was_interrupted(void *arg)
{
	return interrupted;
}

int cli_exec_stream(struct client *c, const char *session_id, json_t *body, bool json)
{
	client_set_abort_check(c, was_interrupted, NULL);
	struct sigaction sa = { .sa_handler = on_sigint }, old;
	sigaction(SIGINT, &sa, &old);
	_cleanup_free_ char *esc = client_escape(session_id);
	_cleanup_free_ char *path = xasprintf("/exec/%s/execute", esc);
	struct stream_state st = { .json = json };
	struct err e;
	int r = client_ndjson(c, "POST", path, body, on_line, &st, &e);
	sigaction(SIGINT, &old, NULL);
	if (interrupted) {
		fprintf(stderr, "sandbox: interrupted: the command was cancelled\n");
		return 130;
	}
	if (r < 0)
		return cli_fail("%s", e.msg);
	if (st.error[0])
		return cli_fail("%s", st.error);
	if (!st.have_result)
		return cli_fail("the stream ended without a result");
	return st.exit_code;
}

void cli_print_json(json_t *j)
{
	char *s = json_dumps(j, JSON_INDENT(2));
	if (s)
		puts(s);
	free(s);
}
