/* jail_seccomp: the system-call filter of every jail, and the capabilities the agent keeps.
 *
 * An allow list. The baseline is Docker's default profile (moby's profiles/seccomp/
 * default.json): the system calls it allows unconditionally, and its argument rules for
 * clone, personality and socket. Every deviation from it is listed below with its reason.
 * Everything not allowed fails with ENOSYS, the answer of a kernel that lacks the call:
 * programs and libraries already fall back from it (glibc from clone3 to clone, libuv from
 * io_uring to threads), where EPERM would read as a failure to report, and a kill would take
 * down a program for probing.
 *
 * Deviations from the baseline:
 *   - Docker also allows calls whose capability it may grant (chroot with CAP_SYS_CHROOT,
 *     mount with CAP_SYS_ADMIN, ...). Commands here have no capability at all, and the agent
 *     only CAP_SETUID, CAP_SETGID and CAP_KILL, so none of those are allowed.
 *   - ptrace, process_vm_readv, process_vm_writev, kcmp (Docker allows them since Linux 4.8):
 *     tracing is the classic path from one process to another's memory; commands debugging
 *     their own children lose strace and gdb, which a sandbox for running code can spare.
 *   - name_to_handle_at: file handles can name files outside the mounts a process can see
 *     (open_by_handle_at is denied by Docker too); nothing ordinary needs them.
 *   - modify_ldt: 16-bit segments, for Wine and DOSEMU alone; a history of kernel bugs.
 *   - socketcall: the i386 multiplexer hides its arguments in memory, where the family
 *     rules below cannot see them (see the architectures below).
 *   - socket families (Docker: all but AF_VSOCK): AF_UNIX, AF_INET, AF_INET6, and AF_NETLINK
 *     with NETLINK_ROUTE only (getaddrinfo's AI_ADDRCONFIG, `ip addr`, Node's
 *     os.networkInterfaces() read interfaces and routes through it; changing them needs
 *     CAP_NET_ADMIN over the host-owned network namespace, which nothing here has). Other
 *     families fail with EAFNOSUPPORT and other netlink protocols (NETLINK_AUDIT, ...) with
 *     EPROTONOSUPPORT, as on a kernel built without them. No AF_VSOCK (the host's VM
 *     sockets), AF_ALG (the kernel's crypto, a long list of bugs), AF_PACKET (raw frames).
 *   - unshare: allowed without namespace flags (CLONE_FILES, CLONE_FS, CLONE_SYSVSEM only
 *     affect the caller); Docker allows it only with CAP_SYS_ADMIN.
 *   - io_uring_*: not allowed (Docker dropped them too): seccomp cannot see the operations
 *     submitted through the ring.
 *   - io_setup, io_submit, io_getevents, io_pgetevents, io_cancel, io_destroy (native AIO):
 *     not allowed. Each io_setup takes from fs.aio-max-nr, one budget for the whole host that
 *     no cgroup or user namespace divides: one sandbox could use it up and leave every other
 *     sandbox and the host's own services (databases) with EAGAIN. Programs fall back as on a
 *     kernel without AIO (libaio's callers see ENOSYS; glibc's POSIX AIO uses threads).
 *   - ioctl: all but TIOCSTI, which pushes bytes into a terminal's input as if typed, and
 *     gets EIO, as from a kernel with dev.tty.legacy_tiocsti off (6.2 and later; the host's
 *     setting would otherwise decide, and Debian 12's 6.1 has no such setting). The kernel
 *     reads the command as 32 bits, so the rule looks at those alone: a command with upper
 *     bits set must not pass as another.
 *
 * Architectures: x86_64 only. The i386 and x32 entry points (a 64-bit process can make
 * 32-bit system calls with int $0x80) get ENOSYS for everything, as calls from an
 * architecture the filter does not know: allowing them would double the surface for
 * binaries a sandbox has no use for. */
#include "driver/jail/jail.h"

#include <errno.h>
#include <linux/capability.h>
#include <linux/netlink.h>
#include <sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/cleanup.h"

#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif
#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

/* Allowed with any arguments: Docker's unconditional list, less the deviations above. A name
 * this libseccomp does not know (newer than it) stays out, which fails it with ENOSYS. */
static const char *const allowed[] = {
	"accept",
	"accept4",
	"access",
	"adjtimex",
	"alarm",
	"arch_prctl",
	"bind",
	"brk",
	"cachestat",
	"capget",
	"capset",
	"chdir",
	"chmod",
	"chown",
	"clock_adjtime",
	"clock_getres",
	"clock_gettime",
	"clock_nanosleep",
	"close",
	"close_range",
	"connect",
	"copy_file_range",
	"creat",
	"dup",
	"dup2",
	"dup3",
	"epoll_create",
	"epoll_create1",
	"epoll_ctl",
	"epoll_ctl_old",
	"epoll_pwait",
	"epoll_pwait2",
	"epoll_wait",
	"epoll_wait_old",
	"eventfd",
	"eventfd2",
	"execve",
	"execveat",
	"exit",
	"exit_group",
	"faccessat",
	"faccessat2",
	"fadvise64",
	"fallocate",
	"fanotify_mark",
	"fchdir",
	"fchmod",
	"fchmodat",
	"fchmodat2",
	"fchown",
	"fchownat",
	"fcntl",
	"fdatasync",
	"fgetxattr",
	"flistxattr",
	"flock",
	"fork",
	"fremovexattr",
	"fsetxattr",
	"fstat",
	"fstatfs",
	"fsync",
	"ftruncate",
	"futex",
	"futex_requeue",
	"futex_wait",
	"futex_waitv",
	"futex_wake",
	"futimesat",
	"get_robust_list",
	"get_thread_area",
	"getcpu",
	"getcwd",
	"getdents",
	"getdents64",
	"getegid",
	"geteuid",
	"getgid",
	"getgroups",
	"getitimer",
	"getpeername",
	"getpgid",
	"getpgrp",
	"getpid",
	"getppid",
	"getpriority",
	"getrandom",
	"getresgid",
	"getresuid",
	"getrlimit",
	"getrusage",
	"getsid",
	"getsockname",
	"getsockopt",
	"gettid",
	"gettimeofday",
	"getuid",
	"getxattr",
	"inotify_add_watch",
	"inotify_init",
	"inotify_init1",
	"inotify_rm_watch",
	"ioprio_get",
	"ioprio_set",
	"kill",
	"landlock_add_rule",
	"landlock_create_ruleset",
	"landlock_restrict_self",
	"lchown",
	"lgetxattr",
	"link",
	"linkat",
	"listen",
	"listxattr",
	"llistxattr",
	"lremovexattr",
	"lseek",
	"lsetxattr",
	"lstat",
	"madvise",
	"map_shadow_stack",
	"membarrier",
	"memfd_create",
	"memfd_secret",
	"mincore",
	"mkdir",
	"mkdirat",
	"mknod",
	"mknodat",
	"mlock",
	"mlock2",
	"mlockall",
	"mmap",
	"mprotect",
	"mq_getsetattr",
	"mq_notify",
	"mq_open",
	"mq_timedreceive",
	"mq_timedsend",
	"mq_unlink",
	"mremap",
	"mseal",
	"msgctl",
	"msgget",
	"msgrcv",
	"msgsnd",
	"msync",
	"munlock",
	"munlockall",
	"munmap",
	"nanosleep",
	"newfstatat",
	"open",
	"openat",
	"openat2",
	"pause",
	"pidfd_open",
	"pidfd_send_signal",
	"pipe",
	"pipe2",
	"pkey_alloc",
	"pkey_free",
	"pkey_mprotect",
	"poll",
	"ppoll",
	"prctl",
	"pread64",
	"preadv",
	"preadv2",
	"prlimit64",
	"process_mrelease",
	"pselect6",
	"pwrite64",
	"pwritev",
	"pwritev2",
	"read",
	"readahead",
	"readlink",
	"readlinkat",
	"readv",
	"recvfrom",
	"recvmmsg",
	"recvmsg",
	"remap_file_pages",
	"removexattr",
	"rename",
	"renameat",
	"renameat2",
	"restart_syscall",
	"rmdir",
	"rseq",
	"rt_sigaction",
	"rt_sigpending",
	"rt_sigprocmask",
	"rt_sigqueueinfo",
	"rt_sigreturn",
	"rt_sigsuspend",
	"rt_sigtimedwait",
	"rt_tgsigqueueinfo",
	"sched_get_priority_max",
	"sched_get_priority_min",
	"sched_getaffinity",
	"sched_getattr",
	"sched_getparam",
	"sched_getscheduler",
	"sched_rr_get_interval",
	"sched_setaffinity",
	"sched_setattr",
	"sched_setparam",
	"sched_setscheduler",
	"sched_yield",
	"seccomp",
	"select",
	"semctl",
	"semget",
	"semop",
	"semtimedop",
	"sendfile",
	"sendmmsg",
	"sendmsg",
	"sendto",
	"set_robust_list",
	"set_thread_area",
	"set_tid_address",
	"setfsgid",
	"setfsuid",
	"setgid",
	"setgroups",
	"setitimer",
	"setpgid",
	"setpriority",
	"setregid",
	"setresgid",
	"setresuid",
	"setreuid",
	"setrlimit",
	"setsid",
	"setsockopt",
	"setuid",
	"setxattr",
	"shmat",
	"shmctl",
	"shmdt",
	"shmget",
	"shutdown",
	"sigaltstack",
	"signalfd",
	"signalfd4",
	"socketpair",
	"splice",
	"stat",
	"statfs",
	"statx",
	"symlink",
	"symlinkat",
	"sync",
	"sync_file_range",
	"syncfs",
	"sysinfo",
	"tee",
	"tgkill",
	"time",
	"timer_create",
	"timer_delete",
	"timer_getoverrun",
	"timer_gettime",
	"timer_settime",
	"timerfd_create",
	"timerfd_gettime",
	"timerfd_settime",
	"times",
	"tkill",
	"truncate",
	"umask",
	"uname",
	"unlink",
	"unlinkat",
	"utime",
	"utimensat",
	"utimes",
	"vfork",
	"vmsplice",
	"wait4",
	"waitid",
	"write",
	"writev",
};

/* The namespace flags that clone() and unshare() may not be given (Docker's mask, which
 * leaves out CLONE_NEWTIME: in clone()'s flags that bit is part of the exit signal). */
#define NS_FLAGS                                                                                   \
	(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | \
	 CLONE_NEWCGROUP)

/* personality(): Docker's values: Linux, PER_LINUX32, UNAME26, both, and the query. The rest
 * (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, ...) weaken the process's own protections. */
static const unsigned long personalities[] = { 0x0, 0x8, 0x20000, 0x20008, 0xffffffff };

/* Socket families a sandbox may open (NETLINK below). */
static const int families[] = { AF_UNIX, AF_INET, AF_INET6 };

uint64_t jail_caps_keep(void)
{
	/* The agent's own needs, and those of root's commands ("user": "root"); the command
	 * user's commands keep none (agent/op_exec.c):
	 *   CAP_SETUID, CAP_SETGID  switch a command's child to the command user
	 *   CAP_KILL                signal the command user's process groups (timeout, cancel)
	 *   CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_FOWNER, CAP_FSETID, CAP_SETFCAP, CAP_SYS_CHROOT
	 *                           what a package manager run by root needs on the sandbox's
	 *                           own files. They are file-system capabilities: the agent
	 *                           works with the command user's fsuid, which clears them from
	 *                           its effective set, so its file operations do not have them.
	 * Docker's other defaults (CAP_SETPCAP, CAP_NET_BIND_SERVICE, CAP_AUDIT_WRITE, CAP_MKNOD,
	 * CAP_NET_RAW) are not needed: ports below 1024 and ping are opened by the namespace's
	 * sysctls, a user namespace cannot make devices, and audit records have no business
	 * leaving a sandbox. All of them are the sandbox's user namespace's, never the host's. */
	static const int keep[] = { CAP_CHOWN,  CAP_DAC_OVERRIDE, CAP_FOWNER,
				    CAP_FSETID, CAP_KILL,         CAP_SETGID,
				    CAP_SETUID, CAP_SETFCAP,      CAP_SYS_CHROOT };
	uint64_t mask = 0;
	for (size_t i = 0; i < ARRAY_SIZE(keep); i++)
		mask |= 1ULL << keep[i];
	return mask;
}

static void ctx_release(scmp_filter_ctx *ctx)
{
	if (*ctx)
		seccomp_release(*ctx);
}

static int rule(scmp_filter_ctx ctx, const char *name, uint32_t action, unsigned n,
		const struct scmp_arg_cmp *cmp, struct err *err)
{
	int nr = seccomp_syscall_resolve_name(name);
	if (nr == __NR_SCMP_ERROR)
		return 0;
	int r = seccomp_rule_add_array(ctx, action, nr, n, cmp);
	/* -EDOM: a name of another architecture's (socketcall's kin); nothing to add here. */
	if (r < 0 && r != -EDOM)
		return err_sys(err, -r, "jail: seccomp rule for %s", name);
	return 0;
}

static int add_socket_rules(scmp_filter_ctx ctx, struct err *err)
{
	int r;
	for (size_t i = 0; i < ARRAY_SIZE(families); i++) {
		struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)families[i]);
		if ((r = rule(ctx, "socket", SCMP_ACT_ALLOW, 1, &c, err)) < 0)
			return r;
	}
	struct scmp_arg_cmp route[2] = {
		SCMP_A0(SCMP_CMP_EQ, AF_NETLINK),
		SCMP_A2(SCMP_CMP_EQ, NETLINK_ROUTE),
	};
	if ((r = rule(ctx, "socket", SCMP_ACT_ALLOW, 2, route, err)) < 0)
		return r;
	/* NETLINK_ROUTE is 0: every other protocol number compares greater (unsigned). */
	struct scmp_arg_cmp other[2] = {
		SCMP_A0(SCMP_CMP_EQ, AF_NETLINK),
		SCMP_A2(SCMP_CMP_GT, NETLINK_ROUTE),
	};
	if ((r = rule(ctx, "socket", SCMP_ACT_ERRNO(EPROTONOSUPPORT), 2, other, err)) < 0)
		return r;
	/* Every other family the kernel knows, with the error of a kernel built without it;
	 * values beyond those fall to the default. */
	for (int f = 0; f < AF_MAX; f++) {
		bool ok = f == AF_NETLINK;
		for (size_t i = 0; i < ARRAY_SIZE(families); i++)
			ok |= f == families[i];
		if (ok)
			continue;
		struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)f);
		if ((r = rule(ctx, "socket", SCMP_ACT_ERRNO(EAFNOSUPPORT), 1, &c, err)) < 0)
			return r;
	}
	return 0;
}

/* ioctl with any command but TIOCSTI. An unconditional allow would win over any refusal
 * (libseccomp keeps the unconditional rule of a call alone), and "not equal" compares all
 * 64 bits, which a caller sets freely. So: one allow for each bit of the low 32 where the
 * command differs from TIOCSTI's; a TIOCSTI differs in none, and meets the refusal. */
static int add_ioctl_rules(scmp_filter_ctx ctx, struct err *err)
{
	int r;
	for (unsigned bit = 0; bit < 32; bit++) {
		scmp_datum_t mask = 1ULL << bit;
		struct scmp_arg_cmp c = SCMP_A1(SCMP_CMP_MASKED_EQ, mask, (TIOCSTI & mask) ^ mask);
		if ((r = rule(ctx, "ioctl", SCMP_ACT_ALLOW, 1, &c, err)) < 0)
			return r;
	}
	struct scmp_arg_cmp sti = SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffULL, TIOCSTI);
	return rule(ctx, "ioctl", SCMP_ACT_ERRNO(EIO), 1, &sti, err);
}

static int add_rules(scmp_filter_ctx ctx, struct err *err)
{
	int r;
	for (size_t i = 0; i < ARRAY_SIZE(allowed); i++)
		if ((r = rule(ctx, allowed[i], SCMP_ACT_ALLOW, 0, NULL, err)) < 0)
			return r;

	if ((r = add_ioctl_rules(ctx, err)) < 0)
		return r;

	struct scmp_arg_cmp no_ns = SCMP_A0(SCMP_CMP_MASKED_EQ, NS_FLAGS, 0);
	if ((r = rule(ctx, "clone", SCMP_ACT_ALLOW, 1, &no_ns, err)) < 0)
		return r;
	struct scmp_arg_cmp no_ns_time = SCMP_A0(SCMP_CMP_MASKED_EQ, NS_FLAGS | CLONE_NEWTIME, 0);
	if ((r = rule(ctx, "unshare", SCMP_ACT_ALLOW, 1, &no_ns_time, err)) < 0)
		return r;
	/* clone3 passes its flags in memory, out of the filter's sight: it stays out, and its
	 * ENOSYS makes libc fall back to clone(), whose flags are checked above. */

	for (size_t i = 0; i < ARRAY_SIZE(personalities); i++) {
		struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_EQ, personalities[i]);
		if ((r = rule(ctx, "personality", SCMP_ACT_ALLOW, 1, &c, err)) < 0)
			return r;
	}
	return add_socket_rules(ctx, err);
}

int jail_seccomp_build(struct sock_fprog *ret, struct err *err)
{
	_cleanup_(ctx_release) scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(ENOSYS));
	if (!ctx)
		return err_set(err, ENOMEM, "jail: seccomp_init failed");
	/* The other entry points of x86_64 (i386, x32) as well: see the top of this file. */
	int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_ERRNO(ENOSYS));
	if (r < 0)
		return err_sys(err, -r, "jail: seccomp bad-architecture action");
	/* The filter is exported, not loaded here: no_new_privs is the plan's own step. */
	seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);
	/* A binary tree over system call numbers instead of a linear list: with some 300
	 * allowed calls, the list would cost every call up to as many comparisons. */
	if ((r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2)) < 0)
		return err_sys(err, -r, "jail: seccomp: binary tree optimisation");
	if ((r = add_rules(ctx, err)) < 0)
		return r;

	/* libseccomp 2.5 exports to a descriptor only; a memfd turns that into a buffer. */
	_cleanup_close_ int fd = memfd_create("jail-seccomp", MFD_CLOEXEC);
	if (fd < 0)
		return err_sys(err, errno, "jail: memfd_create");
	if ((r = seccomp_export_bpf(ctx, fd)) < 0)
		return err_sys(err, -r, "jail: seccomp_export_bpf");
	off_t size = lseek(fd, 0, SEEK_END);
	if (size <= 0 || size % (off_t)sizeof(struct sock_filter) != 0 ||
	    size / (off_t)sizeof(struct sock_filter) > BPF_MAXINSNS)
		return err_set(err, EINVAL, "jail: seccomp: unexpected filter size %lld",
			       (long long)size);
	_cleanup_free_ struct sock_filter *insns = xmalloc((size_t)size);
	if (pread(fd, insns, (size_t)size, 0) != size)
		return err_set(err, EIO, "jail: seccomp: cannot read the exported filter back");
	ret->len = (unsigned short)(size / (off_t)sizeof(struct sock_filter));
	ret->filter = TAKE_PTR(insns);
	return 0;
}
