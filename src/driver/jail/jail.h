/* jail: internals of the jail driver (driver_jail, declared in driver.h), shared by its files:
 *   jail.c          the driver operations (probe, init, create, destroy, cleanup_stale)
 *   jail_plan.c     the setup plan: built by the parent, interpreted by the cloned child
 *   jail_seccomp.c  the seccomp filter, compiled once to BPF in the parent
 *
 * Why a plan: sandboxd is multithreaded, and after clone() the child of a multithreaded
 * process may only make async-signal-safe calls until it execs (another thread may have held
 * the malloc or stdio lock at the time of the clone). So the parent prepares everything that
 * needs memory (paths, mount options, the BPF program, argv) as a list of steps, and the child
 * only walks that list making raw system calls. A failing step is reported to the parent as
 * (step index, errno) over a close-on-exec pipe; the parent turns it into a message such as
 * "jail: pivot_root: Invalid argument". End of file on that pipe means the exec succeeded.
 *
 * The parent places the child in the sandbox's cgroup while the child sets up its mounts: on
 * cgroup v2 by creating it there (clone3 CLONE_INTO_CGROUP), otherwise by writing its pid to
 * cgroup.procs. A cgroup migration waits for an RCU grace period (about 10 ms here), so doing
 * it in parallel rather than first hides most of it. The child waits for the parent's
 * go-ahead before the steps that must come after joining (the cgroup namespace) and before
 * anything of the sandbox's own runs. */
#pragma once

#include <linux/filter.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/err.h"

/* Fixed descriptor numbers in the child after it has arranged its descriptors. */
enum {
	JAIL_FD_AGENT = 3, /* the agent's end of the socketpair: the only fd the agent inherits */
	JAIL_FD_REPORT,    /* the write end of the report pipe (close-on-exec) */
	JAIL_FD_EXE,       /* O_PATH descriptor of the agent binary (close-on-exec) */
	JAIL_FD_NETNS,     /* the network namespace to join, when one was given (close-on-exec) */
};

enum jail_op_kind {
	JOP_SIGNALS,     /* default dispositions, empty signal mask */
	JOP_WAIT_PARENT, /* read the parent's go-ahead byte from the agent's socket */
	JOP_UNSHARE,     /* unshare(arg) */
	JOP_SETNS,       /* setns(fd, arg) */
	JOP_LO_UP,       /* bring the loopback interface up */
	JOP_HOSTNAME,    /* sethostname(src) */
	JOP_MOUNT,       /* mount(src, dst, fstype, flags, data) */
	JOP_MKDIR,       /* mkdir(dst, arg); an existing directory is fine */
	JOP_MKNOD,       /* mknod(dst, arg, dev) */
	JOP_SYMLINK,     /* symlink(src, dst) */
	JOP_CHDIR,       /* chdir(dst) */
	JOP_PIVOT_ROOT,  /* pivot_root(".", "."): the old root ends up stacked on the new one */
	JOP_UMOUNT,      /* umount2(dst, flags) */
	JOP_STDIO_NULL,  /* open dst and make it fds 0, 1 and 2 */
	JOP_RLIMIT,      /* setrlimit(flags, {arg, arg}) */
	JOP_CAPS,        /* bounding set, ambient, then effective/permitted/inheritable */
	JOP_NO_NEW_PRIVS,
	JOP_UMASK,   /* umask(arg) */
	JOP_SECCOMP, /* install the plan's filter */
	JOP_EXEC,    /* execveat(fd, "", argv, envp, AT_EMPTY_PATH) */
	JOP_EXIT,    /* _exit(0): the end of a probe */
};

struct jail_op {
	enum jail_op_kind kind;
	bool optional;    /* ENOENT is not a failure (paths a kernel may not have) */
	const char *what; /* the step, as the error message names it */
	const char *src;
	const char *dst;
	const char *fstype;
	const char *data;
	unsigned long flags;
	unsigned long arg;
	dev_t dev;
	int fd;
};

struct jail_plan {
	struct jail_op *ops;
	size_t n, cap;
	char **strs; /* strings the ops point to, owned by the plan */
	size_t n_strs;

	/* The parent's descriptors, moved to the JAIL_FD_* numbers first thing in the child. */
	int fd_agent;
	int fd_report;
	int fd_exe;
	int fd_netns; /* -1: none */

	const char *resolv_conf; /* host file mounted on the sandbox's /etc/resolv.conf, or NULL */

	const struct sock_fprog *seccomp; /* borrowed: the filter lives as long as the process */
	uint64_t caps_keep;               /* capabilities the agent keeps */
	unsigned cap_last;                /* highest capability the kernel knows */
	char *const *argv;
	char *const *envp;
};

/* What the child writes to the report pipe when a step fails. */
struct jail_report {
	int32_t step; /* index into ops, or -1: arranging the descriptors */
	int32_t errnum;
};

void jail_plan_init(struct jail_plan *p);
void jail_plan_free(struct jail_plan *p);

/* Appends a step and returns it for the caller to fill in; `what` is copied. */
struct jail_op *jail_plan_add(struct jail_plan *p, enum jail_op_kind kind, const char *what);

/* A copy of the formatted string that lives as long as the plan. */
char *jail_plan_str(struct jail_plan *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* The steps that turn the child into the sandbox: hostname, mounts, /dev, /proc masking, the
 * wait for the parent's go-ahead, the cgroup namespace, limits, capabilities, seccomp and the
 * exec of the agent. `rootfs` is the host directory that becomes /. The network step is added
 * by the caller first. */
void jail_plan_sandbox(struct jail_plan *p, const char *rootfs, uint64_t workspace_bytes,
		       uint32_t nofile);

/* Runs the plan in the freshly cloned child; never returns. Only async-signal-safe calls. */
__attribute__((noreturn)) void jail_plan_run(const struct jail_plan *p);

/* The message for a report read from the pipe: "jail: <step>: <strerror>". */
int jail_plan_error(const struct jail_plan *p, const struct jail_report *rep, struct err *err);

/* Compiles the sandbox's seccomp filter for this machine's architectures into *ret (the
 * instructions are heap-allocated; they are meant to live as long as the process). */
int jail_seccomp_build(struct sock_fprog *ret, struct err *err);

/* The capabilities a sandbox keeps: Docker's default set without CAP_NET_RAW and CAP_MKNOD. */
uint64_t jail_caps_keep(void);
