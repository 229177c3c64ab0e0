/* sandbox ports SESSION: the TCP ports listening in a session, with their preview URLs;
 * sandbox open SESSION PORT: the URL of one (and a browser on it, from a terminal). */
#include <errno.h>
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"
#include "sandbox.h"
#include "util/cleanup.h"

extern char **environ;

void cmd_ports_help(void)
{
	printf("usage: sandbox ports SESSION [--json]\n\n"
	       "Lists the TCP ports listening in a session: PORT, the ADDRESS it listens on,\n"
	       "whether it is PUBLIC (reachable without a key or token), and the URL that\n"
	       "reaches it through the daemon (`sandbox open` prints one, `sandbox forward`\n"
	       "relays a local port to one). --json prints the server's answer as it is.\n");
}

int cli_port_arg(const char *s, bool zero_ok)
{
	size_t n = strspn(s, "0123456789");
	if (!n || n > 5 || s[n] || (s[0] == '0' && n > 1))
		return -1;
	long v = strtol(s, NULL, 10);
	if (v > 65535 || (v == 0 && !zero_ok))
		return -1;
	return (int)v;
}

json_t *cli_session_ports(struct client *c, const char *session_id, struct err *err)
{
	_cleanup_free_ char *esc = client_escape(session_id);
	_cleanup_free_ char *path = xasprintf("/exec/%s/ports", esc);
	json_t *r = NULL;
	if (client_json(c, "GET", path, NULL, &r, NULL, err) < 0)
		return NULL;
	if (!json_is_array(json_object_get(r, "ports"))) {
		json_decref(r);
		err_set(err, EBADMSG, "malformed reply from sandboxd: no ports");
		return NULL;
	}
	return r;
}

json_t *cli_find_port(json_t *listing, int port)
{
	size_t i;
	json_t *p;
	json_array_foreach (json_object_get(listing, "ports"), i, p)
		if (json_integer_value(json_object_get(p, "port")) == port)
			return p;
	return NULL;
}

int cli_need_listening(json_t *listing, const char *session_id, int port)
{
	/* A listing cut short may not show it: then the connection will tell. */
	if (cli_find_port(listing, port) || json_is_true(json_object_get(listing, "truncated")))
		return 0;
	return cli_fail("nothing is listening on port %d in session `%s` (`sandbox ports %s` "
			"lists what is)",
			port, session_id, session_id);
}

int cmd_ports(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	bool json = cli_flag(argc, argv, "--json");
	const char *id = NULL;
	int bad = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--json") == 0)
			continue;
		if (argv[i][0] == '-' || id)
			bad = 1;
		else
			id = argv[i];
	}
	if (bad || !id) {
		cmd_ports_help();
		client_free(c);
		return 2;
	}
	struct err e;
	json_t *r = cli_session_ports(c, id, &e);
	client_free(c);
	if (!r)
		return cli_fail("%s", e.msg);
	if (json) {
		cli_print_json(r);
		json_decref(r);
		return 0;
	}
	printf("%-6s %-16s %-6s %s\n", "PORT", "ADDRESS", "PUBLIC", "URL");
	size_t i;
	json_t *p;
	json_array_foreach (json_object_get(r, "ports"), i, p) {
		const char *addr = json_string_value(json_object_get(p, "address"));
		const char *url = json_string_value(json_object_get(p, "url"));
		printf("%-6lld %-16s %-6s %s\n",
		       (long long)json_integer_value(json_object_get(p, "port")), addr ? addr : "-",
		       json_is_true(json_object_get(p, "public")) ? "yes" : "no", url ? url : "-");
	}
	if (json_is_true(json_object_get(r, "truncated")))
		fprintf(stderr, "sandbox: the listing was truncated\n");
	json_decref(r);
	return 0;
}

void cmd_open_help(void)
{
	printf("usage: sandbox open SESSION PORT [--path] [--token]\n\n"
	       "Prints the URL of a server listening on PORT in a session, as the daemon serves\n"
	       "it: the host form, http://PORT-NAME.DOMAIN:..., by default; with --path the\n"
	       "path form, /exec/NAME/ports/PORT/ on the daemon's own URL. Either needs a key of\n"
	       "the session's owner, or the session's preview token, unless the port is public.\n"
	       "From a terminal it also opens the URL with xdg-open when there is one.\n"
	       "  --path   the path form (for a daemon whose host names do not reach it)\n"
	       "  --token  add ?sandbox_token=TOKEN, so that a browser without a key can open it\n"
	       "           (the token opens every port of the session until `POST\n"
	       "           /exec/SESSION/preview/token` rotates it)\n");
}

/* tpl with every "{port}" replaced by port (caller frees). */
static char *with_port(const char *tpl, int port)
{
	char num[12];
	snprintf(num, sizeof(num), "%d", port);
	size_t n = 0;
	for (const char *s = tpl; (s = strstr(s, "{port}")); s += 6)
		n++;
	char *out = xmalloc(strlen(tpl) + n * strlen(num) + 1), *o = out;
	for (const char *s = tpl; *s;) {
		if (strncmp(s, "{port}", 6) == 0) {
			o = stpcpy(o, num);
			s += 6;
		} else {
			*o++ = *s++;
		}
	}
	*o = '\0';
	return out;
}

/* Whether a program is on $PATH. */
static bool on_path(const char *prog)
{
	const char *path = getenv("PATH");
	for (const char *s = path ? path : ""; *s;) {
		size_t n = strcspn(s, ":");
		_cleanup_free_ char *f = xasprintf("%.*s/%s", (int)n, s, prog);
		if (n && access(f, X_OK) == 0)
			return true;
		s += n + (s[n] == ':');
	}
	return false;
}

static void browse(const char *url)
{
	char *args[] = { "xdg-open", (char *)url, NULL };
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	pid_t pid;
	if (posix_spawnp(&pid, "xdg-open", &fa, NULL, args, environ) == 0)
		waitpid(pid, NULL, 0);
	posix_spawn_file_actions_destroy(&fa);
}

/* The URL of port in session id (caller frees), or NULL after saying why not. */
static char *preview_url(struct client *c, const char *id, int port, bool path_form, bool token,
			 struct err *e)
{
	_cleanup_free_ char *esc = client_escape(id);
	_cleanup_free_ char *path = xasprintf("/exec/%s/preview", esc);
	json_auto_t *preview = NULL;
	if (client_json(c, "GET", path, NULL, &preview, NULL, e) < 0) {
		cli_fail("%s", e->msg);
		return NULL;
	}
	json_auto_t *listing = cli_session_ports(c, id, e);
	if (!listing) {
		cli_fail("%s", e->msg);
		return NULL;
	}
	if (cli_need_listening(listing, id, port) != 0)
		return NULL;
	const char *tpl =
		json_string_value(json_object_get(preview, path_form ? "pathUrl" : "url"));
	const char *tok = json_string_value(json_object_get(preview, "token"));
	if (!tpl || (token && !tok)) {
		cli_fail("malformed reply from sandboxd: no %s", !tpl ? "URL" : "token");
		return NULL;
	}
	_cleanup_free_ char *url = with_port(tpl, port);
	if (!token)
		return path_form ? xasprintf("%s%s", client_http_url(c), url) : xstrdup(url);
	_cleanup_free_ char *qtok = client_escape(tok);
	return xasprintf("%s%s%ssandbox_token=%s", path_form ? client_http_url(c) : "", url,
			 strchr(url, '?') ? "&" : "?", qtok);
}

int cmd_open(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	bool path_form = cli_flag(argc, argv, "--path");
	bool token = cli_flag(argc, argv, "--token");
	const char *id = NULL, *port_s = NULL;
	int bad = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--path") == 0 || strcmp(argv[i], "--token") == 0)
			continue;
		if (argv[i][0] == '-')
			bad = 1;
		else if (!id)
			id = argv[i];
		else if (!port_s)
			port_s = argv[i];
		else
			bad = 1;
	}
	if (bad || !port_s) {
		cmd_open_help();
		client_free(c);
		return 2;
	}
	int port = cli_port_arg(port_s, false);
	if (port < 0) {
		client_free(c);
		return cli_fail("a port is a number from 1 to 65535, not `%s`", port_s);
	}
	if (path_form && !client_http_url(c)) {
		client_free(c);
		return cli_fail("the daemon is reached over a Unix socket, which a browser cannot "
				"use: give --url http://HOST:PORT for the path form");
	}
	struct err e;
	char *url = preview_url(c, id, port, path_form, token, &e);
	client_free(c);
	if (!url)
		return 1;
	puts(url);
	fflush(stdout);
	if (isatty(STDOUT_FILENO) && on_path("xdg-open"))
		browse(url);
	free(url);
	return 0;
}
