/* Background processes: `sandbox exec -d` and `exec -i` (cmd_exec.c parses them), `sandbox
 * procs`, `sandbox attach`, `sandbox kill`. Thin over the REST API's /exec/:id/processes. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "sandbox.h"
#include "util/cleanup.h"

/* Bytes of local stdin sent in one request. */
#define STDIN_CHUNK (64u << 10)

static char *proc_path(const char *session_id, const char *ref, const char *suffix)
{
	_cleanup_free_ char *sid = client_escape(session_id);
	_cleanup_free_ char *r = client_escape(ref);
	return xasprintf("/exec/%s/processes/%s%s", sid, r, suffix);
}

/* POST /exec/:id/processes; the process, or NULL with a message printed. */
static json_t *start(struct client *c, const char *session_id, json_t *body)
{
	_cleanup_free_ char *sid = client_escape(session_id);
	_cleanup_free_ char *path = xasprintf("/exec/%s/processes", sid);
	json_t *p = NULL;
	struct err e;
	if (client_json(c, "POST", path, body, &p, NULL, &e) < 0) {
		cli_fail("%s", e.msg);
		return NULL;
	}
	if (!json_is_integer(json_object_get(p, "pid"))) {
		json_decref(p);
		cli_fail("sandboxd answered a start without a pid");
		return NULL;
	}
	return p;
}

int cli_exec_background(struct client *c, const char *session_id, json_t *body, bool json)
{
	json_auto_t *p = start(c, session_id, body);
	if (!p)
		return 1;
	if (json)
		cli_print_json(p);
	else
		printf("%lld\n", (long long)json_integer_value(json_object_get(p, "pid")));
	return 0;
}

/* --- streaming a process's output -------------------------------------------------------- */

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
	interrupted = 1;
}

struct attach_state {
	bool json;
	bool have_result;
	int exit_code;
	char error[512];
	/* exec -i: Ctrl-C is sent to the process (with `signaller`) instead of ending the attach */
	struct client *signaller;
	const char *session_id, *ref;
};

static int exit_status(json_t *p)
{
	json_t *code = json_object_get(p, "exitCode");
	if (json_is_integer(code))
		return (int)json_integer_value(code);
	int sig = cli_signal_number(json_string_value(json_object_get(p, "signal")));
	return 128 + (sig ? sig : 9);
}

static int on_event(json_t *obj, void *arg)
{
	struct attach_state *st = arg;
	if (interrupted && !st->signaller)
		return -1; /* leaving the stream ends this attach only */
	const char *type = json_string_value(json_object_get(obj, "type"));
	if (!type)
		return 0;
	if (st->json) {
		_cleanup_free_ char *s = json_dumps(obj, JSON_COMPACT);
		puts(s);
		fflush(stdout);
	}
	if (strcmp(type, "stream") == 0 && !st->json) {
		const char *stream = json_string_value(json_object_get(obj, "stream"));
		json_t *data = json_object_get(obj, "data");
		FILE *f = stream && strcmp(stream, "stderr") == 0 ? stderr : stdout;
		fwrite(json_string_value(data), 1, json_string_length(data), f);
		fflush(f);
	} else if (strcmp(type, "gap") == 0 && !st->json) {
		fprintf(stderr,
			"sandbox: %lld bytes of output were lost (the replay buffer is full)\n",
			(long long)json_integer_value(json_object_get(obj, "bytes")));
	} else if (strcmp(type, "result") == 0) {
		st->have_result = true;
		st->exit_code = exit_status(json_object_get(obj, "process"));
	} else if (strcmp(type, "error") == 0) {
		snprintf(st->error, sizeof(st->error), "%s",
			 json_string_value(json_object_get(obj, "error")));
	}
	return 0;
}

/* Runs about once a second while the stream waits: Ctrl-C either ends the attach or, for
 * exec -i, goes to the process as SIGINT (which then ends as it does). */
static bool check_interrupt(void *arg)
{
	struct attach_state *st = arg;
	if (!interrupted)
		return false;
	if (!st->signaller)
		return true;
	interrupted = 0;
	_cleanup_free_ char *path = proc_path(st->session_id, st->ref, "/signal");
	json_auto_t *body = json_pack("{s:s}", "signal", "INT");
	struct err e;
	if (client_json(st->signaller, "POST", path, body, NULL, NULL, &e) < 0)
		fprintf(stderr, "sandbox: %s\n", e.msg);
	return false;
}

/* Streams the output of process ref to stdout/stderr; its exit status, 130 when interrupted
 * (the process runs on), or 1 with a message. */
static int stream_output(struct client *c, struct attach_state *st, long long replay)
{
	_cleanup_free_ char *suffix =
		replay >= 0 ? xasprintf("/output?format=ndjson&replay=%lld", replay)
			    : xstrdup("/output?format=ndjson");
	_cleanup_free_ char *path = proc_path(st->session_id, st->ref, suffix);
	client_set_abort_check(c, check_interrupt, st);
	struct sigaction sa = { .sa_handler = on_sigint }, old;
	sigaction(SIGINT, &sa, &old);
	struct err e;
	int r = client_ndjson(c, "GET", path, NULL, on_event, st, &e);
	sigaction(SIGINT, &old, NULL);
	client_set_abort_check(c, NULL, NULL);
	if (interrupted && !st->signaller) {
		fprintf(stderr, "sandbox: detached: process %s runs on\n", st->ref);
		return 130;
	}
	if (r < 0)
		return cli_fail("%s", e.msg);
	if (st->error[0])
		return cli_fail("%s", st->error);
	if (!st->have_result)
		return cli_fail("the stream ended without a result");
	return st->exit_code;
}

/* --- exec -i: local stdin to the process ---------------------------------------------------- */

struct feeder {
	struct client *c;
	char *stdin_path; /* .../stdin */
};

/* The feeder outlives its attach when local stdin never ends: it stays reachable here. */
static struct feeder *feeder;

/* Sends local stdin as it is read, then closes the process's; stops quietly once the process
 * takes no more (it ended or closed its stdin: its result says the rest). */
static void *feed_stdin(void *arg)
{
	struct feeder *f = arg;
	_cleanup_free_ char *more = xasprintf("%s?close=false", f->stdin_path);
	_cleanup_free_ char *last = xasprintf("%s?close=true", f->stdin_path);
	_cleanup_free_ char *buf = xmalloc(STDIN_CHUNK);
	struct err e;
	for (;;) {
		ssize_t n = read(STDIN_FILENO, buf, STDIN_CHUNK);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			client_post_bytes(f->c, last, "", 0, NULL, &e);
			break;
		}
		if (client_post_bytes(f->c, more, buf, (size_t)n, NULL, &e) < 0)
			break;
	}
	return NULL;
}

int cli_exec_interactive(struct client *c, const char *session_id, json_t *body)
{
	json_object_set_new(body, "stdin", json_true());
	json_auto_t *p = start(c, session_id, body);
	if (!p)
		return 1;
	char ref[24];
	snprintf(ref, sizeof(ref), "%lld",
		 (long long)json_integer_value(json_object_get(p, "pid")));
	feeder = xcalloc(1, sizeof(*feeder));
	feeder->c = client_dup(c);
	feeder->stdin_path = proc_path(session_id, ref, "/stdin");
	struct attach_state st = { .signaller = client_dup(c),
				   .session_id = session_id,
				   .ref = ref };
	pthread_t t;
	int terr = pthread_create(&t, NULL, feed_stdin, feeder);
	if (terr)
		fprintf(stderr, "sandbox: cannot forward stdin: %s\n", strerror(terr));
	int code = stream_output(c, &st, -1);
	/* The process ended; a feeder still waiting for local input has nothing to send it, and
	 * goes with this program. */
	if (!terr)
		pthread_detach(t);
	client_free(st.signaller);
	return code;
}

/* --- procs, attach, kill -------------------------------------------------------------------- */

void cmd_procs_help(void)
{
	printf("usage: sandbox procs SESSION [--json]\n\n"
	       "Lists the background processes of SESSION (started with `sandbox exec -d`),\n"
	       "running and recently ended: PID, TAG, STATE, EXIT (the exit code, or the signal\n"
	       "that ended it) and COMMAND. --json prints the server's process objects.\n");
}

int cmd_procs(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	if (argc < 2 || argv[1][0] == '-') {
		client_free(c);
		cmd_procs_help();
		return 2;
	}
	_cleanup_free_ char *sid = client_escape(argv[1]);
	_cleanup_free_ char *path = xasprintf("/exec/%s/processes", sid);
	json_auto_t *reply = NULL;
	struct err e;
	int r = client_json(c, "GET", path, NULL, &reply, NULL, &e);
	client_free(c);
	if (r < 0)
		return cli_fail("%s", e.msg);
	json_t *list = json_object_get(reply, "processes");
	if (cli_flag(argc, argv, "--json")) {
		cli_print_json(list);
		return 0;
	}
	printf("%-8s %-16s %-8s %-8s %s\n", "PID", "TAG", "STATE", "EXIT", "COMMAND");
	size_t i;
	json_t *p;
	json_array_foreach (list, i, p) {
		const char *tag = json_string_value(json_object_get(p, "tag"));
		const char *state = json_string_value(json_object_get(p, "state"));
		const char *sig = json_string_value(json_object_get(p, "signal"));
		json_t *code = json_object_get(p, "exitCode");
		char exit_s[32] = "-";
		if (json_is_integer(code))
			snprintf(exit_s, sizeof(exit_s), "%lld",
				 (long long)json_integer_value(code));
		else if (sig)
			snprintf(exit_s, sizeof(exit_s), "%s", sig);
		printf("%-8lld %-16s %-8s %-8s",
		       (long long)json_integer_value(json_object_get(p, "pid")), tag ? tag : "-",
		       state ? state : "?", exit_s);
		size_t j;
		json_t *a;
		json_array_foreach (json_object_get(p, "argv"), j, a)
			printf(" %s", json_string_value(a));
		putchar('\n');
	}
	return 0;
}

void cmd_attach_help(void)
{
	printf("usage: sandbox attach SESSION PID|TAG [--replay BYTES] [--json]\n\n"
	       "Streams the output of a background process of SESSION to stdout and stderr: what\n"
	       "is kept of it first (the last BYTES with --replay), then live, until it ends;\n"
	       "exits with its exit code (128 + signal number when a signal ended it). Ctrl-C\n"
	       "detaches, leaving the process running. --json prints the stream's events.\n");
}

int cmd_attach(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	const char *pos[2] = { 0 };
	int npos = 0;
	long long replay = -1;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--replay") == 0 && i + 1 < argc) {
			char *end;
			replay = strtoll(argv[++i], &end, 10);
			if (*end || !*argv[i] || replay < 0) {
				client_free(c);
				return cli_fail("--replay takes a number of bytes");
			}
		} else if (strcmp(argv[i], "--json") == 0) {
			continue;
		} else if (argv[i][0] == '-' || npos == 2) {
			npos = -1;
			break;
		} else {
			pos[npos++] = argv[i];
		}
	}
	if (npos != 2) {
		client_free(c);
		cmd_attach_help();
		return 2;
	}
	struct attach_state st = { .json = cli_flag(argc, argv, "--json"),
				   .session_id = pos[0],
				   .ref = pos[1] };
	int code = stream_output(c, &st, replay);
	client_free(c);
	return code;
}

void cmd_kill_help(void)
{
	printf("usage: sandbox kill SESSION PID|TAG [-s|--signal SIGNAL]\n\n"
	       "Sends SIGNAL (default TERM; a name such as INT, KILL, HUP or a number) to a\n"
	       "background process of SESSION and its children.\n");
}

int cmd_kill(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	const char *pos[2] = { 0 };
	int npos = 0;
	const char *sig = "TERM";
	for (int i = 1; i < argc; i++) {
		if ((strcmp(argv[i], "-s") == 0 || strcmp(argv[i], "--signal") == 0) &&
		    i + 1 < argc) {
			sig = argv[++i];
		} else if (argv[i][0] == '-' || npos == 2) {
			npos = -1;
			break;
		} else {
			pos[npos++] = argv[i];
		}
	}
	if (npos != 2) {
		client_free(c);
		cmd_kill_help();
		return 2;
	}
	json_auto_t *body = NULL;
	char *end;
	long num = strtol(sig, &end, 10);
	if (*sig && !*end)
		body = json_pack("{s:I}", "signal", (json_int_t)num);
	else
		body = json_pack("{s:s}", "signal", sig);
	_cleanup_free_ char *path = proc_path(pos[0], pos[1], "/signal");
	struct err e;
	int r = client_json(c, "POST", path, body, NULL, NULL, &e);
	client_free(c);
	if (r < 0)
		return cli_fail("%s", e.msg);
	return 0;
}
