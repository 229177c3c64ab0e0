/* sandbox: client for agent-sandbox. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "sandbox.h"
#include "util/cleanup.h"

#define COMMAND(name, summary)                                \
	{                                                     \
#name, summary, cmd_##name, cmd_##name##_help \
	}

static const struct cli_command commands[] = {
	COMMAND(run, "run a command in a new sandbox, then destroy it"),
	COMMAND(create, "create a session (template or snapshot, idle timeout, env, resources)"),
	COMMAND(exec, "run a command in an existing session"),
	COMMAND(shell, "open an interactive terminal in a session"),
	COMMAND(cp, "copy files or directories to or from a session (SESSION:PATH)"),
	COMMAND(ls, "list files in a session"),
	COMMAND(cat, "print a file of a session"),
	COMMAND(stat, "describe a path of a session (SESSION:PATH)"),
	COMMAND(mkdir, "make directories in a session (SESSION:PATH)"),
	COMMAND(mv, "move or rename within a session (SESSION:FROM TO)"),
	COMMAND(watch, "print a directory's changes as they happen (SESSION:PATH)"),
	COMMAND(ports, "list the TCP ports listening in a session, with their URLs"),
	COMMAND(open, "print (and open) the URL of a server in a session"),
	COMMAND(forward, "relay a local port to a port of a session, like ssh -L"),
	COMMAND(ps, "list your sessions"),
	COMMAND(pause, "pause sessions: their processes stop, all is kept until resume"),
	COMMAND(resume, "resume paused sessions"),
	COMMAND(fork, "fork a running session into new ones from its current state"),
	COMMAND(snapshot, "keep a session's current state under a name, to start sessions from"),
	COMMAND(procs, "list the background processes of a session"),
	COMMAND(attach, "stream a background process's output until it ends"),
	COMMAND(kill, "send a signal to a background process"),
	COMMAND(rm, "destroy sessions, or remove files of them (SESSION:PATH)"),
	COMMAND(templates, "list templates, or build one (templates build NAME)"),
	COMMAND(volumes, "manage persistent volumes (create, ls, rm)"),
	COMMAND(snapshots, "manage snapshots (ls, rm)"),
	COMMAND(keys, "manage API keys (create, list, rotate, revoke, delete)"),
	COMMAND(mcp, "serve MCP on stdin/stdout, forwarding to the daemon"),
};

#define NCOMMANDS (sizeof(commands) / sizeof(commands[0]))

int cli_fail(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("sandbox: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
	return 1;
}

bool cli_flag(int argc, char **argv, const char *flag)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
		if (strcmp(argv[i], flag) == 0)
			return true;
	return false;
}

static void usage(FILE *out)
{
	fprintf(out, "usage: sandbox <command> [options]\n\ncommands:\n");
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(out,
		"\nRun `sandbox <command> --help` for a command's options.\n"
		"Global options: --url URL (or $SANDBOX_URL; http://host:port or unix:/path),\n"
		"--api-key KEY (or $SANDBOX_API_KEY), --json for machine-readable output.\n"
		"\n"
		"Without a URL the daemon is unix:%s where that socket\n"
		"exists (the installed service; members of the agent-sandbox group may use it),\n"
		"else http://127.0.0.1:3000. Over the socket as over TCP, requests carry an API\n"
		"key: without --api-key or $SANDBOX_API_KEY, the first line of the key file\n"
		"$XDG_CONFIG_HOME/agent-sandbox/api-key (default "
		"~/.config/agent-sandbox/api-key),\n"
		"which must not be readable by group or others.\n",
		CLIENT_SERVICE_SOCKET);
}

/* The per-user key file: $XDG_CONFIG_HOME/agent-sandbox/api-key, else under ~/.config. */
static char *key_file_path(void)
{
	const char *xdg = getenv("XDG_CONFIG_HOME");
	if (xdg && xdg[0] == '/')
		return xasprintf("%s/agent-sandbox/api-key", xdg);
	const char *home = getenv("HOME");
	if (home && home[0] == '/')
		return xasprintf("%s/.config/agent-sandbox/api-key", home);
	return NULL;
}

/* Sets $SANDBOX_API_KEY from the key file when no key was given: 0, or 1 after saying why
 * the file cannot be used (a key others can read is refused, as ssh refuses such keys). */
static int load_key_file(void)
{
	const char *key = getenv("SANDBOX_API_KEY");
	if (key && *key)
		return 0;
	_cleanup_free_ char *path = key_file_path();
	if (!path)
		return 0;
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? 0 : cli_fail("cannot read %s: %s", path, strerror(errno));
	struct stat st;
	if (fstat(fileno(f), &st) < 0)
		return cli_fail("cannot read %s: %s", path, strerror(errno));
	if (st.st_mode & 077)
		return cli_fail("%s is readable by others (mode %04o): chmod 600 it", path,
				(unsigned)(st.st_mode & 07777));
	char line[256];
	if (!fgets(line, sizeof(line), f))
		return cli_fail("%s is empty: put the API key on its first line", path);
	line[strcspn(line, "\r\n")] = '\0';
	if (!*line)
		return cli_fail("%s is empty: put the API key on its first line", path);
	setenv("SANDBOX_API_KEY", line, 1);
	return 0;
}

int main(int argc, char **argv)
{
	/* Global options before the command become the environment the commands read. */
	while (argc > 2 && (strcmp(argv[1], "--url") == 0 || strcmp(argv[1], "--api-key") == 0)) {
		setenv(strcmp(argv[1], "--url") == 0 ? "SANDBOX_URL" : "SANDBOX_API_KEY", argv[2],
		       1);
		argv[2] = argv[0];
		argv += 2;
		argc -= 2;
	}
	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("sandbox %s\n", SANDBOX_VERSION);
		return 0;
	}
	for (size_t i = 0; i < NCOMMANDS; i++) {
		if (strcmp(argv[1], commands[i].name) != 0)
			continue;
		if (cli_flag(argc - 1, argv + 1, "--help") || cli_flag(argc - 1, argv + 1, "-h")) {
			commands[i].help();
			return 0;
		}
		if (!cli_flag(argc - 1, argv + 1, "--api-key") && load_key_file() != 0)
			return 1;
		return commands[i].run(argc - 1, argv + 1);
	}
	fprintf(stderr, "sandbox: unknown command `%s`\n\n", argv[1]);
	usage(stderr);
	return 2;
}
