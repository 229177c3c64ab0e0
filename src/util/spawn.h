/* spawn: starting processes from the daemon's threads: the host's helper programs (a VMM's
 * --version) with a bound on how long they may take, and every child that must be set up
 * between its start and its exec (a jail's first process, a VMM), as a plan. */
#pragma once

#include <linux/filter.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/err.h"

/* The absolute path of `bin`, looked up in PATH when it has no slash; NULL when there is no
 * executable file of that name. Caller frees. */
char *spawn_find_binary(const char *bin);

/* Runs argv (argv[0] an absolute path) with stdin from /dev/null, no environment but a plain
 * PATH, its stdout and stderr into out (at most cap - 1 bytes, NUL-terminated) when out is
 * not NULL, and kills it at timeout_ms. Returns its wait status, -ETIMEDOUT when it was
 * killed for taking too long, or another negative errno when it could not be started. */
int spawn_run_bounded(char *const argv[], int timeout_ms, char *out, size_t cap);

/* --- the plan-based child -------------------------------------------------------------
 *
 * sandboxd is multithreaded, and after fork() or clone() the child of a multithreaded process
 * may only make async-signal-safe calls until it execs (another thread may have held the
 * malloc or stdio lock at the time of the clone). So the parent prepares everything that needs
 * memory (paths, mount options, a BPF program, argv) as a list of steps, a plan, and the child
 * only walks that list making raw system calls. A failing step is reported to the parent as
 * (step index, errno) over a close-on-exec pipe; the parent turns it into a message such as
 * "jail: pivot_root: Invalid argument". End of file on that pipe means the exec succeeded (or
 * the plan's exit was reached). Every driver's children (the jail's first process, QEMU, the
 * Firecracker jailer and its network namespace) and spawn_run_bounded are plans. */

enum spawn_op_kind {
	SOP_SIGNALS,      /* default dispositions, empty signal mask */
	SOP_PARENT_DEATH, /* SIGKILL when its parent thread exits (the daemon's main thread, the
			   * spawner's parent; without a spawner, the thread that started it);
			   * fail if it has */
	SOP_WAIT_BYTE,    /* read one byte from fd (the parent's go-ahead); EOF fails ECANCELED */
	SOP_WRITE,        /* open dst (below fd when it is not -1) write-only and write src (a
			   * cgroup's procs file: "0") */
	SOP_UNSHARE,      /* unshare(arg) */
	SOP_SETNS,        /* setns(fd, arg) */
	SOP_SETSID,       /* a session of its own, away from the daemon's terminal */
	SOP_LO_UP,        /* bring the loopback interface up */
	SOP_TAP,          /* create persistent TAP device src (IFF_TAP | IFF_NO_PI) */
	SOP_HOSTNAME,     /* sethostname(src) */
	SOP_MOUNT,        /* mount(src, dst, fstype, flags, data) */
	SOP_MKDIR,        /* mkdir(dst, arg); an existing directory is fine */
	SOP_RMDIR,        /* rmdir(dst) */
	SOP_CHOWN,        /* chown dst (not following a symlink) to uid arg, gid flags */
	SOP_MKNOD,        /* mknod(dst, arg, dev) */
	SOP_SYMLINK,      /* symlink(src, dst) */
	SOP_CHDIR,        /* chdir(dst), or fchdir(fd) when dst is NULL */
	SOP_PIVOT_ROOT,   /* pivot_root(".", "."): the old root ends up stacked on the new one */
	SOP_UMOUNT,       /* umount2(dst, flags) */
	SOP_STDIO_NULL,   /* open dst and make it fds 0, 1 and 2 */
	SOP_RLIMIT,       /* setrlimit(flags, {arg, arg}) */
	SOP_CAPS,         /* bounding set, ambient, then effective/permitted/inheritable */
	SOP_NO_NEW_PRIVS,
	SOP_UMASK,     /* umask(arg) */
	SOP_SECCOMP,   /* install the plan's filter */
	SOP_EXEC,      /* execveat(fd, "", argv, envp, AT_EMPTY_PATH), or execve(src) when fd < 0 */
	SOP_EXIT,      /* _exit(0): the end of a probe */
	SOP_SETID,     /* supplementary groups: none, or `dev` alone when not 0; then
			* setresgid(flags) and setresuid(arg) */
	SOP_SEND_BYTE, /* write one byte to fd (tells the parent a step is done) */
	SOP_RECV_FD,   /* receive one byte and `flags` descriptors (SCM_RIGHTS, at least one) on
			* fd, as numbers arg, arg + 1, ... */
	SOP_FSMOUNT,   /* a detached mount of a new fstype (fsopen, fsmount with attributes
			* flags) as descriptor number arg */
	SOP_OPEN_TREE, /* a detached copy of the mount at dst (with those below it when flags
			* has AT_RECURSIVE) as descriptor number arg */
	SOP_MOVE_MOUNT, /* attach the detached mount fd at dst (move_mount) */
	SOP_TAP_OPEN,   /* attach to (or create) TAP src as descriptor number arg, kept across
			 * the exec: IFF_TAP | IFF_NO_PI | flags */
	SOP_KEEP_CAPS,  /* PR_SET_KEEPCAPS: a SOP_SETID to non-root keeps the permitted set, so
			 * that a SOP_CAPS after it can still empty the bounding set */
};

struct spawn_op {
	enum spawn_op_kind kind;
	bool optional;    /* ENOENT is not a failure (paths a kernel may not have) */
	const char *what; /* the step, as the error message names it */
	const char *src;
	const char *dst;
	const char *fstype;
	const char *data;
	unsigned long flags;
	unsigned long arg;
	dev_t dev;
	int fd; /* a descriptor number in the child (after the moves below) */
};

/* At most this many descriptors move into a child (the report pipe included). */
#define SPAWN_MAX_FDS 24

struct spawn_fd {
	int from;  /* the parent's */
	int to;    /* the child's */
	bool keep; /* survives the exec; otherwise close-on-exec */
};

struct spawn_plan {
	const char *name; /* what error messages start with: "jail", "qemu: starting `...`" */
	struct spawn_op *ops;
	size_t n, cap;
	char **strs; /* strings the ops point to, owned by the plan */
	size_t n_strs;

	/* The child's descriptors: first thing in the child, each `from` is moved to its `to`
	 * and every other descriptor is closed (the daemon's sockets, databases, other
	 * sandboxes' fds). */
	struct spawn_fd fds[SPAWN_MAX_FDS];
	size_t n_fds;
	int report_to; /* where the report pipe goes in the child; -1: above the others */

	const struct sock_fprog *seccomp; /* SOP_SECCOMP; borrowed */
	uint64_t caps_keep;               /* SOP_CAPS: the capabilities kept */
	unsigned cap_last;                /* SOP_CAPS: highest capability the kernel knows */
	char *const *argv;                /* SOP_EXEC; borrowed */
	char *const *envp;

	pid_t parent;  /* set by spawn_start, for SOP_PARENT_DEATH */
	int report_fd; /* the write end, set by spawn_start (the child's, until exec) */
	int gate_fd;   /* the spawner's: the child goes on once a byte arrives there, and ends
			* at once on end of file; -1: none */
};

/* What the child writes to the report pipe when a step fails. */
struct spawn_report {
	int32_t step; /* index into ops, or -1: arranging the descriptors */
	int32_t errnum;
};

/* `name` is borrowed (a literal, or a string of the plan's own). */
void spawn_plan_init(struct spawn_plan *p, const char *name);
void spawn_plan_free(struct spawn_plan *p);

/* Appends a step and returns it for the caller to fill in; `what` is copied. */
struct spawn_op *spawn_plan_add(struct spawn_plan *p, enum spawn_op_kind kind, const char *what);

/* A copy of the formatted string that lives as long as the plan. */
char *spawn_plan_str(struct spawn_plan *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Moves the parent's `from` to `to` in the child (kept across the exec when `keep`). A
 * negative `from` is ignored. Aborts beyond SPAWN_MAX_FDS: a plan's size is the code's. */
void spawn_plan_fd(struct spawn_plan *p, int from, int to, bool keep);

/* Runs the plan in the freshly started child; never returns. Only async-signal-safe calls. */
__attribute__((noreturn)) void spawn_plan_run(const struct spawn_plan *p);

/* The message for a child's report: "<name>: <step>: <strerror>". Returns -errnum. */
int spawn_plan_error(const struct spawn_plan *p, const struct spawn_report *rep, struct err *err);

struct spawn_child {
	pid_t pid;
	int pidfd;   /* -1 on kernels without pidfds */
	int report;  /* the read end of the report pipe; -1 once spawn_wait has read it */
	bool placed; /* started in the cgroup asked for */
};

/* Starts a child that runs `plan`: clone3 with the namespaces in `flags`, a pidfd, and
 * directly into the cgroup `cgroup_fd` refers to when it is not -1 and the kernel can
 * (c->placed tells; otherwise the caller moves the child). Signals stay blocked across the
 * clone so that none of the daemon's handlers can run in the child before it resets them. */
int spawn_start(struct spawn_plan *plan, uint64_t flags, int cgroup_fd, struct spawn_child *c,
		struct err *err);

/* The most descriptors one message of this module carries: a plan's, the report pipe, the
 * spawner's gate, a cgroup. */
#define SPAWN_MSG_MAX_FDS (SPAWN_MAX_FDS + 3)

/* Receives one message into buf and the descriptors that came with it (at most max, no more
 * than SPAWN_MSG_MAX_FDS; *mflags has MSG_CTRUNC when there were more), close-on-exec.
 * Returns its length, 0 at end of file, or a negative errno. Neither allocates nor locks:
 * a child's SOP_RECV_FD and the spawner use it. */
ssize_t spawn_recv_fds(int sock, void *buf, size_t len, int *fds, size_t max, size_t *nfd,
		       int *mflags);

/* Clones the child that runs `plan` (the clone3 of spawn_start, with its fallbacks for older
 * kernels), from the calling process, whose signals must all be blocked. Returns the child's
 * pid (the child never returns) or a negative errno; *pidfd is -1 without one. */
long spawn_clone(struct spawn_plan *plan, uint64_t flags, int cgroup_fd, int *pidfd, bool *placed);

/* --- the spawner ----------------------------------------------------------------------
 *
 * A clone copies its parent: its page tables, and its descriptor table, which the child then
 * closes. The daemon grows with its sessions (a descriptor each, its heap), so every new
 * sandbox would cost more than the last, and each copy-on-write fault the daemon takes after
 * a clone flushes the TLB of every CPU its threads run on. The spawner is a process forked
 * from the daemon before its first thread starts, single-threaded and small for good: it
 * clones every plan's child on the daemon's behalf, with CLONE_PARENT, so that the child is
 * the daemon's (the daemon reaps it, waits on its pidfd, and SOP_PARENT_DEATH names it).
 *
 * The plan travels in one message over a SOCK_SEQPACKET socket: the structs as they are (the
 * spawner is a fork of the same program), each pointer replaced by an offset into the
 * message, and the plan's descriptors, the report pipe's write end and the cgroup's descriptor
 * with it (SCM_RIGHTS). The reply carries the pid and the pidfd. One request at a time.
 *
 * A child cloned by the spawner waits at a gate (a pipe) until the daemon has its pid, so that
 * a spawner that dies or hangs with a request in its hands can never leave a child running
 * that nobody knows: the daemon closes the gate, any such child ends before its first step,
 * and the daemon clones the child itself. A spawner lost that way is replaced at a later
 * request, at most once per SPAWNER_RESTART_MS. */

/* Forks the spawner; call it before any thread starts. Returns 0 or a negative errno; without
 * it, or once it is gone, spawn_start clones from the caller as before. */
int spawner_start(struct err *err);

/* Ends the spawner and waits for it. */
void spawner_stop(void);

/* spawn_start's way to its child: false when the spawner cannot clone it (there is none, it
 * is gone or hung, the plan does not fit its message), and the caller clones the child
 * itself. Otherwise *pid is the child's pid or a negative errno. */
bool spawner_clone(struct spawn_plan *plan, uint64_t flags, int cgroup_fd, long *pid, int *pidfd,
		   bool *placed);

/* The spawner's pid; 0 when there is none. */
pid_t spawner_pid(void);

/* Children started through the spawner, and by the daemon's own threads. */
void spawner_counts(uint64_t *via_spawner, uint64_t *direct);

/* Waits up to timeout_ms for the child's verdict: 0 when it reached its exec (or exit), the
 * failing step's error, ETIMEDOUT, or ECHILD when it was killed during setup. Closes the
 * report pipe. */
int spawn_wait(const struct spawn_plan *plan, struct spawn_child *c, int timeout_ms,
	       struct err *err);

/* After the caller's own step failed: kills the child and, when the child had failed on its
 * own first, replaces err with its reason. Returns the error to give. */
int spawn_abort(const struct spawn_plan *plan, struct spawn_child *c, int r, struct err *err);

/* Kills a child with SIGKILL, through its pidfd when it has one. Without a pidfd the pid is
 * safe to use only because nobody but its starter reaps it. */
void spawn_kill(pid_t pid, int pidfd);

/* Waits for the child to exit; returns its wait status, or -1 when someone else reaped it. */
int spawn_reap(pid_t pid, int pidfd);

/* Whether a child (not yet reaped) is on its way out: its files (pipes, sockets) close
 * before it can be reaped, so a peer may see the close first. True when it is gone. */
bool spawn_exiting(pid_t pid);

/* Releases what spawn_start left open (not the process). */
void spawn_child_close(struct spawn_child *c);
