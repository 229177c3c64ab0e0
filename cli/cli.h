/* sandbox: the command-line client. One file per subcommand (cmd_<name>.c), each behind the
 * command table in main.c. */
#pragma once

#include <stdbool.h>

struct cli_command {
	const char *name;
	const char *summary;
	int (*run)(int argc, char **argv); /* argv[0] is the subcommand's name */
	void (*help)(void);
};

/* Prints "sandbox: <message>" on stderr; returns 1 (the exit code for a failure). */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Whether argv holds --json (machine-readable output). */
bool cli_flag(int argc, char **argv, const char *flag);

int cmd_keys(int argc, char **argv);
void cmd_keys_help(void);
