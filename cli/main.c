/* sandbox: client for agent-sandbox. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const struct cli_command commands[] = {
	{ "keys", "manage API keys (create, list, rotate, revoke, delete)", cmd_keys,
	  cmd_keys_help },
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
	for (int i = 1; i < argc; i++)
		if (strcmp(argv[i], flag) == 0)
			return true;
	return false;
}

static void usage(FILE *out)
{
	fprintf(out, "usage: sandbox <command> [options]\n\ncommands:\n");
	for (size_t i = 0; i < NCOMMANDS; i++)
		fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
	fprintf(out, "\nRun `sandbox <command> --help` for a command's options.\n");
}

int main(int argc, char **argv)
{
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
		return commands[i].run(argc - 1, argv + 1);
	}
	fprintf(stderr, "sandbox: unknown command `%s`\n\n", argv[1]);
	usage(stderr);
	return 2;
}
