/* sandbox: the command-line client. One file per subcommand (cmd_<name>.c), each behind the
 * command table in main.c. */
#pragma once

#include <jansson.h>
#include <stdbool.h>

struct cli_command {
	const char *name;
	const char *summary;
	int (*run)(int argc, char **argv); /* argv[0] is the subcommand's name */
	void (*help)(void);
};

/* Prints "sandbox: <message>" on stderr; returns 1 (the exit code for a failure). */
int cli_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Whether argv holds flag (such as --json) before any "--": what follows "--" is the
 * command's, never the CLI's. */
bool cli_flag(int argc, char **argv, const char *flag);

/* A client from --url/--api-key in argv (removed from it, up to any "--") or
 * $SANDBOX_URL/$SANDBOX_API_KEY. */
struct client;
struct client *cli_client(int *argc, char **argv);

/* Streams a command's output to stdout/stderr; returns its exit code (128 + signal number
 * when killed), or 1 with a message on failure. Ctrl-C cancels the remote command. */
int cli_exec_stream(struct client *c, const char *session_id, json_t *body, bool json);

/* Parses the options of run and exec (--env, --cwd, --timeout, --template) up to the command
 * and fills body's command and args; returns the command's index or -1 with a message. */
int cli_parse_exec_opts(int argc, char **argv, json_t *body, const char **template_name);

/* "SIGTERM" and the like to their number (0 when unknown). */
int cli_signal_number(const char *name);

/* Background processes (cmd_proc.c): exec -d starts one and prints its pid; exec -i runs
 * one with this terminal's stdin forwarded to it and returns its exit status. */
int cli_exec_background(struct client *c, const char *session_id, json_t *body, bool json);
int cli_exec_interactive(struct client *c, const char *session_id, json_t *body);

/* Parses "K=V" into obj; returns -1 with a message on a bad value. */
int cli_env_add(json_t *obj, const char *kv);
/* A positive size in the syntax of size_parse (src/util/size.h), as the daemon's settings
 * take it: digits with an optional K, M, G or T (powers of 1024). -1 after saying what is
 * wrong ("WHAT takes a size: ..."). */
int cli_parse_size(const char *what, const char *s, json_int_t *ret);
/* Appends {"name", "path", "readOnly"} for --volume NAME:/PATH[:ro]; 2 after a message. */
int cli_volume_add(json_t *volumes, const char *spec);

/* Ports (cmd_ports.c): a port argument's value (1-65535, or 0 too when zero_ok), -1 when it
 * is none; GET /exec/:id/ports (NULL with err); the entry of a listing for port, or NULL; 0
 * when the listing shows something listening on port (or was cut short), else 1 after
 * saying so. */
struct err;
int cli_port_arg(const char *s, bool zero_ok);
json_t *cli_session_ports(struct client *c, const char *session_id, struct err *err);
json_t *cli_find_port(json_t *listing, int port);
int cli_need_listening(json_t *listing, const char *session_id, int port);

/* Prints j indented, for --json. */
void cli_print_json(json_t *j);

#define DECLARE_COMMAND(name)                  \
	int cmd_##name(int argc, char **argv); \
	void cmd_##name##_help(void)

DECLARE_COMMAND(keys);
DECLARE_COMMAND(run);
DECLARE_COMMAND(create);
DECLARE_COMMAND(exec);
DECLARE_COMMAND(shell);
DECLARE_COMMAND(cp);
DECLARE_COMMAND(ls);
DECLARE_COMMAND(cat);
DECLARE_COMMAND(ps);
DECLARE_COMMAND(volumes);
DECLARE_COMMAND(snapshot);
DECLARE_COMMAND(snapshots);
DECLARE_COMMAND(rm);
DECLARE_COMMAND(pause);
DECLARE_COMMAND(resume);
DECLARE_COMMAND(fork);
DECLARE_COMMAND(stat);
DECLARE_COMMAND(mkdir);
DECLARE_COMMAND(mv);

/* sandbox rm SESSION:PATH... [-r]: removes files of sessions (cmd_fs.c). */
int cli_rm_paths(struct client *c, int argc, char **argv);
DECLARE_COMMAND(procs);
DECLARE_COMMAND(attach);
DECLARE_COMMAND(kill);
DECLARE_COMMAND(templates);
DECLARE_COMMAND(mcp);
DECLARE_COMMAND(watch);
DECLARE_COMMAND(ports);
DECLARE_COMMAND(open);
DECLARE_COMMAND(forward);
