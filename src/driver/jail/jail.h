/* jail: internals of the jail driver (driver_jail, declared in driver.h), shared by its files:
 *   jail.c          the driver operations (probe, init, create, destroy, cleanup_stale)
 *   jail_plan.c     the setup plan of the sandbox's first process
 *   jail_seccomp.c  the seccomp filter, compiled once to BPF in the parent
 *
 * The jail's first process is a plan-based child (util/spawn.h): the parent builds the steps
 * that turn it into the sandbox, the child walks them and execs the agent.
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
#include "util/spawn.h"

/* Fixed descriptor numbers in the child after it has arranged its descriptors. */
enum {
	JAIL_FD_AGENT = 3, /* the agent's end of the socketpair: the only fd the agent inherits */
	JAIL_FD_REPORT,    /* the write end of the report pipe (close-on-exec) */
	JAIL_FD_EXE,       /* O_PATH descriptor of the agent binary (close-on-exec) */
	JAIL_FD_NETNS,     /* the network namespace to join, when one was given (close-on-exec) */
};

/* The steps that turn the child into the sandbox: hostname, mounts, /dev, /proc masking, the
 * wait for the parent's go-ahead, the cgroup namespace, limits, capabilities, seccomp and the
 * exec of the agent. `rootfs` is the host directory that becomes /; `resolv_conf` (or NULL),
 * a host file mounted on its /etc/resolv.conf. The network step is added by the caller first. */
void jail_plan_sandbox(struct spawn_plan *p, const char *rootfs, const char *resolv_conf,
		       uint64_t workspace_bytes, uint32_t nofile);

/* Compiles the sandbox's seccomp filter for this machine's architectures into *ret (the
 * instructions are heap-allocated; they are meant to live as long as the process). */
int jail_seccomp_build(struct sock_fprog *ret, struct err *err);

/* The capabilities a sandbox keeps: Docker's default set without CAP_NET_RAW and CAP_MKNOD. */
uint64_t jail_caps_keep(void);
