/* sandbox-agent internals: the agent, its connection to the host and the operations running
 * on that connection.
 *
 * One thread, one poll loop. The connection owns a table of operations keyed by channel id;
 * each operation contributes file descriptors and a deadline to the poll set and is stepped
 * after every poll. An operation ends by sending its one terminal frame (op_result or
 * op_error); it is freed at the end of that loop iteration. */
#pragma once

#include <poll.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/types.h>

#include "guest/proto.h"
#include "json.h"
#include "request.h"
#include "util/err.h"
#include "wspath.h"

#define AGENT_NAME       "sandbox-agent"
#define AGENT_MAX_OPS    256
#define AGENT_OP_MAX_FDS 3
/* Data is produced only while less than this is queued for the host. */
#define AGENT_OUT_HIGH (1u << 20)
/* Past this, no further requests are read until the host drains its replies. */
#define AGENT_OUT_HARD (4u << 20)
/* WINDOW credit is returned in batches of at least this much. */
#define AGENT_WINDOW_GRANT (GUEST_WINDOW_INITIAL / 4)
/* After a command's main process exits, its pipes are drained at most this long. */
#define AGENT_DRAIN_NS (200 * 1000000LL)

struct conn;
struct op;
struct procs;

/* The environment the template's image declares (its Dockerfile's ENV), from
 * /etc/sandbox/env: layered between the agent's defaults and each request's env. */
struct image_env {
	char **keys;
	char **vals;
	size_t n;
};

#define AGENT_ENV_FILE     "/etc/sandbox/env"
#define AGENT_ENV_FILE_MAX (64u << 10)

struct agent {
	struct workspace ws;
	struct workspace root; /* the sandbox's root, for requests with any_path */
	struct image_env image_env;
	bool init;      /* the VM's init: mounts done, may power off */
	bool pid1;      /* PID 1 (VM or pid namespace): reap every child */
	int sigpipe[2]; /* signal handler -> loop */
	bool stop;      /* SIGTERM/SIGINT: leave the loop */
	bool poweroff;  /* a shutdown op was accepted */
	struct conn *conn;
	struct procs *procs; /* background processes (op_proc.c); they outlive connections */
	bool as_user;        /* --user: commands (and file operations) run as uid:gid below */
	unsigned uid, gid;
};

/* The temporary file a write goes to before it is renamed over its target
 * (".sandbox-write-<pid>-<n>-<time>.tmp", op_file.c): watches do not show it (op_watch.c). */
#define AGENT_WRITE_TMP_PREFIX ".sandbox-write-"
#define AGENT_WRITE_TMP_SUFFIX ".tmp"
static inline bool agent_is_write_tmp(const char *name)
{
	size_t n = strlen(name), p = sizeof(AGENT_WRITE_TMP_PREFIX) - 1,
	       s = sizeof(AGENT_WRITE_TMP_SUFFIX) - 1;
	return n > p + s && strncmp(name, AGENT_WRITE_TMP_PREFIX, p) == 0 &&
	       strcmp(name + n - s, AGENT_WRITE_TMP_SUFFIX) == 0;
}

/* Where a request's paths resolve: the sandbox's whole tree for "anyPath", else the
 * workspace. */
static inline const struct workspace *agent_ws(const struct agent *a, bool any_path)
{
	return any_path ? &a->root : &a->ws;
}

struct op_vt {
	const char *name;
	/* DATA payload; the op calls op_consumed() once the bytes are out of its hands. NULL:
	 * data is dropped and credited at once. */
	void (*data)(struct op *op, const uint8_t *p, size_t n);
	void (*eof)(struct op *op);
	/* CANCEL; NULL: ERROR ECANCELED. */
	void (*cancel)(struct op *op);
	/* Adds up to AGENT_OP_MAX_FDS entries to pfd and returns how many; lowers *deadline_ns
	 * (monotonic) when it has a timer; 0 asks for an immediate step. */
	int (*poll_fill)(struct op *op, struct pollfd *pfd, int64_t *deadline_ns);
	/* Called after every poll with the entries it filled (n may be 0). */
	void (*step)(struct op *op, const struct pollfd *pfd, int n);
	/* The process `op->child` exited with `status` (as from waitpid). */
	void (*child_exit)(struct op *op, int status);
	/* Releases everything; when the op never ended (connection lost, protocol error) it
	 * also kills its processes and removes its temporary files. Frees op. */
	void (*destroy)(struct op *op);
};

struct op {
	const struct op_vt *vt;
	struct conn *conn;
	uint32_t ch;
	bool done;             /* terminal frame sent */
	pid_t child;           /* process whose exit the op waits for, 0 when none */
	uint64_t send_credit;  /* data bytes the host still accepts on this channel */
	uint64_t recv_left;    /* data bytes the host may still send */
	uint64_t recv_unacked; /* consumed but not yet granted back */
	int pfd_first;         /* this iteration's entries in the poll set */
	int pfd_n;
};

struct conn {
	struct agent *a;
	int fd;
	bool hup;    /* the host went away */
	bool failed; /* I/O error */
	struct guest_decoder dec;
	uint8_t *in;
	size_t in_len;
	size_t in_cap;
	uint8_t *out;
	size_t out_off; /* already written */
	size_t out_len;
	size_t out_cap;
	struct op **ops;
	size_t nops;   /* entries in ops (some may be done) */
	size_t active; /* entries not done */
};

/* --- conn.c --- */

/* Serves the protocol on fd until the host goes away (returns 0), an I/O error (negative
 * errno) or a stop request (a->stop / a->poweroff). Every operation still running when it
 * returns is destroyed (processes killed, temporary files removed). fd stays open. */
int conn_serve(struct agent *a, int fd);

/* Queues a frame. */
void conn_frame(struct conn *c, uint8_t type, uint32_t ch, const void *p, size_t n);
/* Reserves room for a frame of at most max payload bytes and returns where the payload goes;
 * conn_commit() then queues it with its real length (<= max). */
uint8_t *conn_reserve(struct conn *c, size_t max);
void conn_commit(struct conn *c, uint8_t type, uint32_t ch, size_t n);
/* Whether data frames may be produced now (the outgoing queue is not too long). */
bool conn_may_send_data(const struct conn *c);
/* Ends every operation of the connection without a word to the host (their processes
 * killed, their files removed): what a previous host left open before a save of the VM. */
void conn_drop_ops(struct conn *c);
/* Sends ERROR {"error": msg, "code": NAME} on ch (no op involved). */
void conn_error(struct conn *c, uint32_t ch, const struct err *e);

/* --- op.c helpers used by every operation --- */

/* Initialises the common part and adds op to the connection's table. */
void op_register(struct conn *c, struct op *op, const struct op_vt *vt, uint32_t ch);
/* Terminal frames: mark the op done. */
void op_result(struct op *op, const struct jw *w);
void op_error(struct op *op, const struct err *e);
/* Accounts for n received data bytes the op no longer holds; may send WINDOW. */
void op_consumed(struct op *op, size_t n);
/* How many data bytes the op may send now (credit, chunk size, queue). */
size_t op_send_room(const struct op *op);
/* The error code string for an errnum ("ENOENT", "ESCAPE"). */
const char *agent_code(int errnum);

/* --- operations --- */

/* Each starts the operation for a validated request on channel ch: either it answers at
 * once or it registers an op. */
void op_ping(struct conn *c, uint32_t ch, const struct req *r);
void op_resume(struct conn *c, uint32_t ch, const struct req *r);
void op_shutdown(struct conn *c, uint32_t ch, const struct req *r);
void op_exec(struct conn *c, uint32_t ch, const struct req *r);
void op_write(struct conn *c, uint32_t ch, const struct req *r);
void op_read(struct conn *c, uint32_t ch, const struct req *r);
void op_list(struct conn *c, uint32_t ch, const struct req *r);
void op_stat(struct conn *c, uint32_t ch, const struct req *r);
void op_mkdir(struct conn *c, uint32_t ch, const struct req *r);
void op_remove(struct conn *c, uint32_t ch, const struct req *r);
void op_rename(struct conn *c, uint32_t ch, const struct req *r);
void op_spawn(struct conn *c, uint32_t ch, const struct req *r);
void op_procs(struct conn *c, uint32_t ch, const struct req *r);
void op_attach(struct conn *c, uint32_t ch, const struct req *r);
void op_signal(struct conn *c, uint32_t ch, const struct req *r);
void op_input(struct conn *c, uint32_t ch, const struct req *r);
void op_resize(struct conn *c, uint32_t ch, const struct req *r);

/* --- op_exec.c --- */

/* Closes *fd if open and marks it closed (-1). */
void agent_close_fd(int *fd);
/* A close-on-exec pipe whose agent end (the read end when parent_reads) is non-blocking.
 * Returns 0 or -errno. */
int agent_make_pipe(int p[2], bool parent_reads);

/* Starts rx's command with in_fd, out_fd and err_fd as its stdin, stdout and stderr (the
 * caller keeps and closes them), in a new session and process group; with ctty, in_fd is a
 * terminal that becomes the session's controlling terminal. Returns its pid, or -1 with e
 * set (the command could not start: the message says why). */
pid_t agent_start_command(struct agent *a, const struct req_exec *rx, int in_fd, int out_fd,
			  int err_fd, bool ctty, struct err *e);

/* --- op_proc.c: background processes, which belong to the agent, not to a connection --- */

/* Adds the processes' descriptors to the poll set (returns how many) and lowers *deadline. */
int procs_poll_fill(struct agent *a, struct pollfd *pfd, int64_t *deadline_ns);
/* Reads their output into the replay buffers, feeds their stdin, runs their timers. */
void procs_step(struct agent *a, const struct pollfd *pfd, int n);
/* How many background processes are running. */
size_t procs_running(struct agent *a);
/* Whether pid is a background process's (its exit is then recorded); called by the reaper. */
bool procs_child_exit(struct agent *a, pid_t pid, int status);
/* Descriptors a process may hold in the poll set. */
#define AGENT_PROC_FDS  2
#define AGENT_MAX_PROCS 1024
void op_watch(struct conn *c, uint32_t ch, const struct req *r);
/* op_net.c: a byte stream to a port on the sandbox's loopback, and the ports listening */
void op_connect(struct conn *c, uint32_t ch, const struct req *r);
void op_ports(struct conn *c, uint32_t ch, const struct req *r);

/* --- agent.c: process-wide services --- */

/* Monotonic clock in nanoseconds. */
int64_t agent_now_ns(void);
/* Reads pending signals and reaps children (dispatching exits to ops of a->conn). */
void agent_handle_signals(struct agent *a);
/* Kills every process the agent started (process groups of running commands, then any
 * remaining child) and reaps them, for at most about two seconds. */
void agent_kill_children(struct agent *a);
/* The symbolic name of a signal ("SIGKILL"). */
const char *agent_signame(int sig, char buf[16]);
void agent_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
