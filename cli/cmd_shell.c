/* sandbox shell: an interactive terminal in a session, over the terminal WebSocket. The local
 * terminal goes raw for as long as it runs (restored on every way out: the end of the remote
 * shell, a lost connection, a signal), its size follows SIGWINCH, and the CLI exits with the
 * remote program's status. Without a local terminal (a pipe), stdin is sent as typed input
 * and its end as ^D. */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "cli.h"
#include "sandbox.h"
#include "util/cleanup.h"

static struct termios saved;
static bool raw_on;
static volatile sig_atomic_t winch, quit;

static void restore_terminal(void)
{
	if (raw_on) {
		tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved);
		raw_on = false;
	}
}

static void on_signal(int sig)
{
	if (sig == SIGWINCH)
		winch = 1;
	else
		quit = sig;
}

void cmd_shell_help(void)
{
	printf("usage: sandbox shell SESSION [--template T] [--command CMD]\n\n"
	       "Opens an interactive terminal in SESSION (created on first use): its login shell, "
	       "or\nCMD run by /bin/sh. Exits with the remote program's exit status (128 + its "
	       "signal when\nkilled). The terminal's size follows the local one.\n");
}

static void window_size(unsigned *rows, unsigned *cols)
{
	struct winsize w;
	*rows = 24;
	*cols = 80;
	if (ioctl(STDIN_FILENO, TIOCGWINSZ, &w) == 0 && w.ws_row && w.ws_col) {
		*rows = w.ws_row;
		*cols = w.ws_col;
	}
}

static int send_control(struct client_ws *ws, json_t *msg, struct err *e)
{
	_cleanup_free_ char *text = json_dumps(msg, JSON_COMPACT);
	json_decref(msg);
	return client_ws_send(ws, false, text, strlen(text), e);
}

/* A text event from the server: exit (*status set), error and stderr (shown). */
static void on_event(const uint8_t *data, size_t len, int *status)
{
	json_auto_t *j = json_loadb((const char *)data, len, 0, NULL);
	const char *type = json_string_value(json_object_get(j, "type"));
	if (!type)
		return;
	if (!strcmp(type, "exit")) {
		json_t *code = json_object_get(j, "exitCode");
		const char *sig = json_string_value(json_object_get(j, "signal"));
		if (json_is_integer(code)) {
			*status = (int)json_integer_value(code);
		} else if (sig) {
			int n = 0;
			static const char *const names[] = { "SIGHUP", "SIGINT",  "SIGQUIT",
							     "SIGILL", "SIGTRAP", "SIGABRT",
							     "SIGBUS", "SIGFPE",  "SIGKILL" };
			for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
				if (!strcmp(sig, names[i]))
					n = (int)i + 1;
			*status = 128 + (n ? n : 15);
		}
	} else if (!strcmp(type, "error") || !strcmp(type, "stderr")) {
		const char *msg = json_string_value(
			json_object_get(j, !strcmp(type, "error") ? "error" : "data"));
		restore_terminal();
		fprintf(stderr, !strcmp(type, "error") ? "sandbox: %s\n" : "%s", msg ? msg : "");
	}
}

int cmd_shell(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	if (argc < 2 || argv[1][0] == '-') {
		client_free(c);
		cmd_shell_help();
		return 2;
	}
	const char *id = argv[1], *tmpl = NULL, *command = NULL;
	for (int i = 2; i < argc; i++) {
		if (!strcmp(argv[i], "--template") && i + 1 < argc)
			tmpl = argv[++i];
		else if (!strcmp(argv[i], "--command") && i + 1 < argc)
			command = argv[++i];
		else {
			client_free(c);
			return cli_fail("unknown option `%s` (see sandbox shell --help)", argv[i]);
		}
	}
	bool tty = isatty(STDIN_FILENO);
	unsigned rows, cols;
	window_size(&rows, &cols);
	_cleanup_free_ char *eid = client_escape(id);
	_cleanup_free_ char *eterm = client_escape(getenv("TERM") ? getenv("TERM") : "xterm");
	_cleanup_free_ char *path =
		xasprintf("/exec/%s/terminal?rows=%u&cols=%u&term=%s", eid, rows, cols, eterm);
	if (tmpl) {
		_cleanup_free_ char *e = client_escape(tmpl);
		char *p = xasprintf("%s&template=%s", path, e);
		free(path);
		path = p;
	}
	if (command) {
		_cleanup_free_ char *e = client_escape(command);
		char *p = xasprintf("%s&command=%s", path, e);
		free(path);
		path = p;
	}
	struct err e;
	struct client_ws *ws = client_ws_open(c, path, &e);
	if (!ws) {
		client_free(c);
		return cli_fail("%s", e.msg);
	}

	struct sigaction sa = { .sa_handler = on_signal };
	sigemptyset(&sa.sa_mask);
	sigaction(SIGWINCH, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGINT, &sa, NULL); /* raw mode sends ^C as a byte; a pipe's caller may not */
	signal(SIGPIPE, SIG_IGN);
	if (tty && tcgetattr(STDIN_FILENO, &saved) == 0) {
		struct termios raw = saved;
		cfmakeraw(&raw);
		if (tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) == 0) {
			raw_on = true;
			atexit(restore_terminal);
		}
	}

	int status = -1;
	bool in_open = true, failed = false;
	unsigned close_code = 0;
	while (!quit) {
		if (winch) {
			winch = 0;
			window_size(&rows, &cols);
			if (send_control(ws,
					 json_pack("{s:s, s:i, s:i}", "type", "resize", "rows",
						   rows, "cols", cols),
					 &e) < 0)
				break;
		}
		/* What curl has buffered already needs no poll. */
		bool binary;
		const uint8_t *data;
		size_t len;
		int r;
		while ((r = client_ws_recv(ws, &binary, &data, &len, &e)) > 0) {
			if (binary) {
				if (fwrite(data, 1, len, stdout) != len)
					quit = SIGPIPE;
				fflush(stdout);
			} else {
				on_event(data, len, &status);
			}
		}
		if (r < 0) {
			close_code = client_ws_close_code(ws);
			failed = close_code != 1000;
			break;
		}
		struct pollfd p[2] = { { .fd = client_ws_fd(ws), .events = POLLIN },
				       { .fd = STDIN_FILENO, .events = POLLIN } };
		int n = poll(p, in_open ? 2 : 1, -1);
		if (n < 0 && errno != EINTR)
			break;
		if (n > 0 && in_open && (p[1].revents & (POLLIN | POLLHUP | POLLERR))) {
			char buf[4096];
			ssize_t k = read(STDIN_FILENO, buf, sizeof(buf));
			if (k > 0) {
				if (client_ws_send(ws, true, buf, (size_t)k, &e) < 0)
					break;
			} else if (k == 0 || (errno != EINTR && errno != EAGAIN)) {
				in_open = false;
				if (send_control(ws, json_pack("{s:s}", "type", "eof"), &e) < 0)
					break;
			}
		}
	}
	restore_terminal();
	client_ws_free(ws);
	client_free(c);
	if (quit)
		return 128 + (int)quit;
	if (status >= 0)
		return status;
	if (failed)
		return cli_fail("the terminal ended: %s (close code %u)", e.msg, close_code);
	return 1;
}
