/* jail_plan: the list of setup steps a jail's first process performs between clone() and the
 * exec of the agent. Built (with allocations) in the parent; run (without any) in the child.
 * See jail.h for why. */
#include "driver/jail/jail.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <net/if.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <unistd.h>

#include "util/cleanup.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT           47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif

/* Size of the tmpfs holding /dev: device nodes and symlinks only. */
#define DEV_TMPFS_OPTS "mode=755,size=65536"
/* /dev/shm: shared memory is charged to the memory cgroup as well; this bounds it further. */
#define SHM_BYTES (64ULL << 20)
#define RUN_BYTES (16ULL << 20)

void jail_plan_init(struct jail_plan *p)
{
	memset(p, 0, sizeof(*p));
	p->fd_agent = p->fd_report = p->fd_exe = p->fd_netns = -1;
}

void jail_plan_free(struct jail_plan *p)
{
	for (size_t i = 0; i < p->n_strs; i++)
		free(p->strs[i]);
	free(p->strs);
	free(p->ops);
	p->strs = NULL;
	p->ops = NULL;
	p->n = p->cap = p->n_strs = 0;
}

static char *keep_str(struct jail_plan *p, char *s)
{
	p->strs = xrealloc(p->strs, (p->n_strs + 1) * sizeof(*p->strs));
	p->strs[p->n_strs++] = s;
	return s;
}

char *jail_plan_str(struct jail_plan *p, const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	va_start(ap, fmt);
	int n = vasprintf(&s, fmt, ap);
	va_end(ap);
	if (n < 0)
		s = xstrdup(""); /* unreachable in practice: vasprintf fails only on OOM */
	return keep_str(p, s);
}

struct jail_op *jail_plan_add(struct jail_plan *p, enum jail_op_kind kind, const char *what)
{
	if (p->n == p->cap) {
		p->cap = p->cap ? p->cap * 2 : 64;
		p->ops = xrealloc(p->ops, p->cap * sizeof(*p->ops));
	}
	struct jail_op *op = &p->ops[p->n++];
	memset(op, 0, sizeof(*op));
	op->kind = kind;
	op->what = keep_str(p, xstrdup(what));
	op->fd = -1;
	return op;
}

static void add_mount(struct jail_plan *p, const char *src, const char *dst, const char *fstype,
		      unsigned long flags, const char *data, bool optional, const char *what)
{
	struct jail_op *op = jail_plan_add(p, JOP_MOUNT, what);
	op->src = src;
	op->dst = dst;
	op->fstype = fstype;
	op->flags = flags;
	op->data = data;
	op->optional = optional;
}

static void add_path(struct jail_plan *p, enum jail_op_kind kind, const char *dst,
		     unsigned long arg, const char *what)
{
	struct jail_op *op = jail_plan_add(p, kind, what);
	op->dst = dst;
	op->arg = arg;
}

static void add_node(struct jail_plan *p, const char *name, unsigned major, unsigned minor)
{
	char *path = jail_plan_str(p, "/dev/%s", name);
	char what[64];
	snprintf(what, sizeof(what), "mknod %s", path);
	struct jail_op *op = jail_plan_add(p, JOP_MKNOD, what);
	op->dst = path;
	op->arg = S_IFCHR | 0666;
	op->dev = makedev(major, minor);
}

static void add_symlink(struct jail_plan *p, const char *target, const char *path)
{
	char what[128];
	snprintf(what, sizeof(what), "symlink %s", path);
	struct jail_op *op = jail_plan_add(p, JOP_SYMLINK, what);
	op->src = target;
	op->dst = path;
}

/* Paths of /proc and /sys that expose or control the host, hidden or made read-only the way
 * container runtimes do it. Each may be absent from a given kernel. */
static const char *const masked_files[] = {
	"/proc/kcore",      "/proc/keys",        "/proc/latency_stats",
	"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
};
static const char *const masked_dirs[] = {
	"/proc/acpi",
	"/proc/asound",
	"/proc/scsi",
	"/sys/firmware",
	"/sys/devices/virtual/powercap",
};
static const char *const readonly_paths[] = {
	"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
};

static void add_masks(struct jail_plan *p)
{
	char what[128];
	for (size_t i = 0; i < ARRAY_SIZE(masked_files); i++) {
		snprintf(what, sizeof(what), "mask %s", masked_files[i]);
		add_mount(p, "/dev/null", masked_files[i], NULL, MS_BIND, NULL, true, what);
	}
	for (size_t i = 0; i < ARRAY_SIZE(masked_dirs); i++) {
		snprintf(what, sizeof(what), "mask %s", masked_dirs[i]);
		add_mount(p, "tmpfs", masked_dirs[i], "tmpfs",
			  MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=0,mode=555", true,
			  what);
	}
	for (size_t i = 0; i < ARRAY_SIZE(readonly_paths); i++) {
		const char *path = readonly_paths[i];
		snprintf(what, sizeof(what), "bind %s", path);
		add_mount(p, path, path, NULL, MS_BIND | MS_REC, NULL, true, what);
		snprintf(what, sizeof(what), "remount %s read-only", path);
		add_mount(p, NULL, path, NULL,
			  MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL,
			  true, what);
	}
}

void jail_plan_sandbox(struct jail_plan *p, const char *rootfs, uint64_t workspace_bytes,
		       uint32_t nofile)
{
	const char *root = jail_plan_str(p, "%s", rootfs);
	struct jail_op *op;

	op = jail_plan_add(p, JOP_HOSTNAME, "sethostname");
	op->src = "sandbox";

	/* Private first: nothing mounted below may propagate back to the host's namespace. */
	add_mount(p, NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL, false, "make / private");
	/* Not recursive: whatever the host has mounted below the template stays out. */
	add_mount(p, root, root, NULL, MS_BIND, NULL, false,
		  jail_plan_str(p, "bind rootfs %s", rootfs));
	add_mount(p, NULL, root, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
		  NULL, false, "remount rootfs read-only");
	/* The sandbox's resolver, read-only (the file is the host's). Before the pivot, while the
	 * host's file is still in view: a bind mount's source must be in our mount namespace,
	 * which a descriptor opened by the parent is not. The parent checked that the target is
	 * a plain file of the template's. It rides along with the rootfs through the pivot. */
	if (p->resolv_conf) {
		const char *target = jail_plan_str(p, "%s/etc/resolv.conf", rootfs);
		add_mount(p, p->resolv_conf, target, NULL, MS_BIND, NULL, false,
			  "bind resolv.conf on /etc/resolv.conf");
		add_mount(p, NULL, target, NULL,
			  MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL,
			  false, "remount /etc/resolv.conf read-only");
	}
	add_path(p, JOP_CHDIR, root, 0, jail_plan_str(p, "chdir %s", rootfs));
	/* pivot_root(".", ".") needs no directory for the old root, which a read-only rootfs
	 * could not provide; the old root is then stacked on "." and detached at once. */
	jail_plan_add(p, JOP_PIVOT_ROOT, "pivot_root");
	op = jail_plan_add(p, JOP_UMOUNT, "detach the old root");
	op->dst = ".";
	op->flags = MNT_DETACH;
	add_path(p, JOP_CHDIR, "/", 0, "chdir /");

	/* From here on, every path resolves inside the new root, so a symlink planted in the
	 * template cannot redirect a mount onto the host. */
	add_mount(p, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL, false,
		  "mount proc on /proc");

	add_mount(p, "tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC | MS_STRICTATIME,
		  DEV_TMPFS_OPTS, false, "mount tmpfs on /dev");
	add_node(p, "null", 1, 3);
	add_node(p, "zero", 1, 5);
	add_node(p, "full", 1, 7);
	add_node(p, "random", 1, 8);
	add_node(p, "urandom", 1, 9);
	add_node(p, "tty", 5, 0);
	add_path(p, JOP_MKDIR, "/dev/pts", 0755, "mkdir /dev/pts");
	add_mount(p, "devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
		  "newinstance,ptmxmode=0666,mode=0620,gid=5", false, "mount devpts on /dev/pts");
	add_symlink(p, "pts/ptmx", "/dev/ptmx");
	add_path(p, JOP_MKDIR, "/dev/shm", 01777, "mkdir /dev/shm");
	add_mount(p, "shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
		  jail_plan_str(p, "mode=1777,size=%llu", SHM_BYTES), false,
		  "mount tmpfs on /dev/shm");
	add_path(p, JOP_MKDIR, "/dev/mqueue", 0755, "mkdir /dev/mqueue");
	add_mount(p, "mqueue", "/dev/mqueue", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL,
		  false, "mount mqueue on /dev/mqueue");
	add_symlink(p, "/proc/self/fd", "/dev/fd");
	add_symlink(p, "/proc/self/fd/0", "/dev/stdin");
	add_symlink(p, "/proc/self/fd/1", "/dev/stdout");
	add_symlink(p, "/proc/self/fd/2", "/dev/stderr");

	add_mount(p, "sysfs", "/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL,
		  false, "mount sysfs on /sys");

	/* /tmp gets the workspace's bound: the memory cgroup, which tmpfs pages are charged to,
	 * bounds the sum of both. */
	const char *size = jail_plan_str(p, "size=%llu", (unsigned long long)workspace_bytes);
	add_mount(p, "tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
		  jail_plan_str(p, "mode=1777,%s", size), false, "mount tmpfs on /tmp");
	add_mount(p, "tmpfs", "/workspace", "tmpfs", MS_NOSUID | MS_NODEV,
		  jail_plan_str(p, "mode=0755,%s", size), false, "mount tmpfs on /workspace");
	/* Sockets and pid files, as in the VM drivers' guests. */
	add_mount(p, "tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV,
		  jail_plan_str(p, "mode=0755,size=%llu", RUN_BYTES), false, "mount tmpfs on /run");

	add_masks(p);

	/* Everything from here on runs in the sandbox's cgroup, with it as the namespace root. */
	jail_plan_add(p, JOP_WAIT_PARENT, "wait to be placed in the sandbox's cgroup");
	op = jail_plan_add(p, JOP_UNSHARE, "unshare the cgroup namespace");
	op->arg = CLONE_NEWCGROUP;
	add_path(p, JOP_STDIO_NULL, "/dev/null", 0, "open /dev/null for stdin, stdout, stderr");
	op = jail_plan_add(p, JOP_RLIMIT, "setrlimit RLIMIT_NOFILE");
	op->flags = RLIMIT_NOFILE;
	op->arg = nofile;
	jail_plan_add(p, JOP_CAPS, "drop capabilities");
	jail_plan_add(p, JOP_NO_NEW_PRIVS, "prctl PR_SET_NO_NEW_PRIVS");
	add_path(p, JOP_UMASK, NULL, 022, "umask");
	jail_plan_add(p, JOP_SECCOMP, "install the seccomp filter");
	op = jail_plan_add(p, JOP_EXEC, "execute the agent");
	op->fd = JAIL_FD_EXE;
}

int jail_plan_error(const struct jail_plan *p, const struct jail_report *rep, struct err *err)
{
	const char *what = "arrange file descriptors";
	if (rep->step >= 0 && (size_t)rep->step < p->n)
		what = p->ops[rep->step].what;
	else if (rep->step >= 0)
		what = "setup";
	return err_sys(err, rep->errnum, "jail: %s", what);
}

/*
 * Everything below runs in the child between clone() and exec: raw system calls only, no
 * allocation, no stdio, nothing that takes a lock another thread of the parent may have held.
 */

static int report_fd = -1;

__attribute__((noreturn)) static void fail(int step, int errnum)
{
	struct jail_report rep = { .step = step, .errnum = errnum };
	ssize_t w;
	do
		w = write(report_fd, &rep, sizeof(rep));
	while (w < 0 && errno == EINTR);
	_exit(127);
}

/* Moves the parent's descriptors to the JAIL_FD_* numbers and closes every other one above
 * stderr (the daemon's sockets, databases, other sandboxes' fds). */
static int arrange_fds(const struct jail_plan *p)
{
	int src[] = { p->fd_agent, p->fd_report, p->fd_exe, p->fd_netns };
	int n = (int)ARRAY_SIZE(src);
	int base = JAIL_FD_AGENT + n;
	for (int i = 0; i < n; i++)
		base = src[i] >= base ? src[i] + 1 : base;

	/* Two moves, so that no target number overwrites a source not yet moved. */
	for (int i = 0; i < n; i++)
		if (src[i] >= 0 && dup3(src[i], base + i, O_CLOEXEC) < 0)
			return -errno;
	report_fd = base + 1;
	for (int i = 0; i < n; i++) {
		int target = JAIL_FD_AGENT + i;
		if (src[i] < 0) {
			close(target);
			continue;
		}
		/* The agent's fd alone survives the exec. */
		if (dup3(base + i, target, target == JAIL_FD_AGENT ? 0 : O_CLOEXEC) < 0)
			return -errno;
	}
	report_fd = JAIL_FD_REPORT;

	unsigned first = (unsigned)(JAIL_FD_AGENT + n);
	if (syscall(SYS_close_range, first, ~0U, 0) == 0)
		return 0;
	if (errno != ENOSYS)
		return -errno;
	/* Kernels before 5.9. */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return -errno;
	for (unsigned fd = first; fd < rl.rlim_cur; fd++)
		close((int)fd);
	return 0;
}

static int lo_up(void)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	memcpy(ifr.ifr_name, "lo", 3);
	int r = ioctl(s, SIOCGIFFLAGS, &ifr);
	if (r == 0) {
		ifr.ifr_flags |= IFF_UP;
		r = ioctl(s, SIOCSIFFLAGS, &ifr);
	}
	int e = errno;
	close(s);
	return r < 0 ? -e : 0;
}

static int reset_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	/* Ignored signals stay ignored across exec: the agent must not inherit the daemon's. */
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			sigaction(sig, &sa, NULL); /* fails harmlessly for signals libc reserves */
	sigset_t none;
	sigemptyset(&none);
	return sigprocmask(SIG_SETMASK, &none, NULL) < 0 ? -errno : 0;
}

static int drop_caps(const struct jail_plan *p)
{
	for (unsigned c = 0; c <= p->cap_last && c < 64; c++) {
		if (p->caps_keep & (1ULL << c))
			continue;
		if (prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0 && errno != EINVAL)
			return -errno;
	}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
		return -errno;

	struct __user_cap_header_struct hdr = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct data[2];
	memset(data, 0, sizeof(data));
	for (int i = 0; i < 2; i++) {
		uint32_t word = (uint32_t)(p->caps_keep >> (32 * i));
		data[i].effective = word;
		data[i].permitted = word;
		/* Inheritable stays empty: with it, a file's inheritable capabilities could be
		 * gained by a non-root process on exec. */
		data[i].inheritable = 0;
	}
	return syscall(SYS_capset, &hdr, data) < 0 ? -errno : 0;
}

static int stdio_null(const char *path)
{
	int fd = open(path, O_RDWR);
	if (fd < 0)
		return -errno;
	for (int i = 0; i < 3; i++)
		if (fd != i && dup2(fd, i) < 0)
			return -errno;
	if (fd > 2)
		close(fd);
	return 0;
}

static int run_op(const struct jail_plan *p, const struct jail_op *op)
{
	int r = 0;
	switch (op->kind) {
	case JOP_SIGNALS:
		return reset_signals();
	case JOP_WAIT_PARENT: {
		char c;
		ssize_t n = read(JAIL_FD_AGENT, &c, 1);
		return n == 1 ? 0 : n == 0 ? -ECANCELED : -errno;
	}
	case JOP_UNSHARE:
		r = unshare((int)op->arg);
		break;
	case JOP_SETNS:
		r = setns(op->fd, (int)op->arg);
		break;
	case JOP_LO_UP:
		return lo_up();
	case JOP_HOSTNAME:
		r = sethostname(op->src, strlen(op->src));
		break;
	case JOP_MOUNT:
		r = mount(op->src, op->dst, op->fstype, op->flags, op->data);
		break;
	case JOP_MKDIR:
		r = mkdir(op->dst, (mode_t)op->arg);
		if (r < 0 && errno == EEXIST)
			r = 0;
		break;
	case JOP_MKNOD:
		r = mknod(op->dst, (mode_t)op->arg, op->dev);
		break;
	case JOP_SYMLINK:
		r = symlink(op->src, op->dst);
		break;
	case JOP_CHDIR:
		r = chdir(op->dst);
		break;
	case JOP_PIVOT_ROOT:
		r = (int)syscall(SYS_pivot_root, ".", ".");
		break;
	case JOP_UMOUNT:
		r = umount2(op->dst, (int)op->flags);
		break;
	case JOP_STDIO_NULL:
		return stdio_null(op->dst);
	case JOP_RLIMIT: {
		struct rlimit rl = { .rlim_cur = op->arg, .rlim_max = op->arg };
		r = setrlimit((__rlimit_resource_t)op->flags, &rl);
		break;
	}
	case JOP_CAPS:
		return drop_caps(p);
	case JOP_NO_NEW_PRIVS:
		r = prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
		break;
	case JOP_UMASK:
		umask((mode_t)op->arg);
		return 0;
	case JOP_SECCOMP:
		r = prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, p->seccomp, 0, 0);
		break;
	case JOP_EXEC:
		r = (int)syscall(SYS_execveat, op->fd, "", p->argv, p->envp, AT_EMPTY_PATH);
		break;
	case JOP_EXIT:
		_exit(0);
	}
	return r < 0 ? -errno : 0;
}

void jail_plan_run(const struct jail_plan *p)
{
	report_fd = p->fd_report;
	int r = arrange_fds(p);
	if (r < 0)
		fail(-1, -r);
	for (size_t i = 0; i < p->n; i++) {
		r = run_op(p, &p->ops[i]);
		if (r == -ENOENT && p->ops[i].optional)
			continue;
		if (r < 0)
			fail((int)i, -r);
	}
	/* A plan ends with an exec or an exit; reaching here is a bug in the plan. */
	fail((int)p->n, EINVAL);
}
