/* sandbox watch SESSION:PATH [-r] [--json] [--timeout MS]: a directory's changes as they
 * happen, one per line, until Ctrl-C (or the timeout, or the directory's removal). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "sandbox.h"
#include "util/cleanup.h"

static volatile sig_atomic_t watch_interrupted;

static void on_sigint(int sig)
{
	watch_interrupted = 1;
}

static bool watch_was_interrupted(void *arg)
{
	return watch_interrupted;
}

struct watch_state {
	bool json;
	char error[512];
};

/* "create  src/a.py", "rename  old -> new", a directory with a trailing "/". */
static void print_event(json_t *ev, const char *type)
{
	bool dir = json_is_true(json_object_get(ev, "dir"));
	const char *path = json_string_value(json_object_get(ev, "path"));
	const char *from = json_string_value(json_object_get(ev, "from"));
	if (!path) {
		printf("%s\n", type);
		return;
	}
	if (from)
		printf("%-7s %s%s -> %s%s\n", type, from, dir ? "/" : "", path, dir ? "/" : "");
	else
		printf("%-7s %s%s\n", type, path, dir ? "/" : "");
}

static int on_event(json_t *obj, void *arg)
{
	struct watch_state *st = arg;
	if (watch_interrupted)
		return -1; /* closing the stream ends the watch in the sandbox */
	const char *type = json_string_value(json_object_get(obj, "type"));
	if (!type)
		return 0;
	if (strcmp(type, "error") == 0)
		snprintf(st->error, sizeof(st->error), "%s",
			 json_string_value(json_object_get(obj, "error")));
	if (st->json) {
		char *s = json_dumps(obj, JSON_COMPACT);
		puts(s);
		free(s);
	} else if (strcmp(type, "ready") == 0) {
		fprintf(stderr, "watching (%lld directories)\n",
			(long long)json_integer_value(json_object_get(obj, "watches")));
	} else if (strcmp(type, "overflow") == 0) {
		printf("overflow (changes were lost: look at the files again)\n");
	} else if (strcmp(type, "ready") != 0 && strcmp(type, "end") != 0 &&
		   strcmp(type, "error") != 0) {
		print_event(obj, type);
	}
	fflush(stdout);
	return 0;
}

void cmd_watch_help(void)
{
	printf("usage: sandbox watch SESSION:PATH [-r] [--json] [--timeout MS]\n"
	       "Prints the changes under a directory of a session as they happen, one per line\n"
	       "(create, write, remove, rename, chmod, overflow), until Ctrl-C; once the watch\n"
	       "is in place it says so on stderr.\n"
	       "  -r, --recursive  the directories below it too\n"
	       "  --json           each event as the JSON line the server sends\n"
	       "  --timeout MS     stop after MS milliseconds\n");
}

int cmd_watch(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	struct watch_state st = { .json = cli_flag(argc, argv, "--json") };
	bool recursive = cli_flag(argc, argv, "-r") || cli_flag(argc, argv, "--recursive");
	const char *target = NULL, *timeout = NULL;
	int bad = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--timeout") == 0 && i + 1 < argc)
			timeout = argv[++i];
		else if (argv[i][0] != '-' && !target)
			target = argv[i];
		else if (argv[i][0] != '-' ||
			 (strcmp(argv[i], "-r") && strcmp(argv[i], "--recursive") &&
			  strcmp(argv[i], "--json")))
			bad = 1;
	}
	const char *colon = target ? strchr(target, ':') : NULL;
	if (bad || !colon || colon == target || !colon[1] ||
	    (timeout && strspn(timeout, "0123456789") != strlen(timeout))) {
		cmd_watch_help();
		client_free(c);
		return 2;
	}
	_cleanup_free_ char *id = strndup(target, (size_t)(colon - target));
	_cleanup_free_ char *esc = client_escape(id);
	_cleanup_free_ char *q = client_escape(colon + 1);
	_cleanup_free_ char *path = xasprintf("/exec/%s/watch?path=%s%s%s%s", esc, q,
					      recursive ? "&recursive=true" : "",
					      timeout ? "&timeoutMs=" : "", timeout ? timeout : "");
	client_set_abort_check(c, watch_was_interrupted, NULL);
	struct sigaction sa = { .sa_handler = on_sigint }, old;
	sigaction(SIGINT, &sa, &old);
	struct err e;
	int r = client_ndjson(c, "GET", path, NULL, on_event, &st, &e);
	sigaction(SIGINT, &old, NULL);
	client_free(c);
	if (watch_interrupted)
		return 0;
	if (r < 0)
		return cli_fail("%s", e.msg);
	if (st.error[0])
		return cli_fail("%s", st.error);
	return 0;
}
