/* spawn_plan: the plan-based child (spawn.h): the plan, built by the parent, the interpreter
 * that walks it in the child, and the parent's side of starting, waiting for and stopping the
 * child. */
#include "util/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <linux/if_tun.h>
#include <linux/seccomp.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/cleanup.h"

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif
#ifndef PR_CAP_AMBIENT
#define PR_CAP_AMBIENT           47
#define PR_CAP_AMBIENT_CLEAR_ALL 4
#endif

/* The clone3() arguments up to Linux 5.7 (CLONE_ARGS_SIZE_VER2), declared here because libc
 * headers of this vintage do not. */
struct clone_args_v2 {
	uint64_t flags;
	uint64_t pidfd;
	uint64_t child_tid;
	uint64_t parent_tid;
	uint64_t exit_signal;
	uint64_t stack;
	uint64_t stack_size;
	uint64_t tls;
	uint64_t set_tid;
	uint64_t set_tid_size;
	uint64_t cgroup;
};

/* --- building a plan (the parent) ------------------------------------------------------ */

void spawn_plan_init(struct spawn_plan *p, const char *name)
{
	memset(p, 0, sizeof(*p));
	p->name = name;
	p->report_to = -1;
	p->report_fd = -1;
	p->gate_fd = -1;
}

void spawn_plan_free(struct spawn_plan *p)
{
	for (size_t i = 0; i < p->n_strs; i++)
		free(p->strs[i]);
	free(p->strs);
	free(p->ops);
	spawn_plan_init(p, NULL);
}

static char *keep_str(struct spawn_plan *p, char *s)
{
	p->strs = xrealloc(p->strs, (p->n_strs + 1) * sizeof(*p->strs));
	p->strs[p->n_strs++] = s;
	return s;
}

char *spawn_plan_str(struct spawn_plan *p, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *s = NULL;
	if (vasprintf(&s, fmt, ap) < 0)
		abort();
	va_end(ap);
	return keep_str(p, s);
}

struct spawn_op *spawn_plan_add(struct spawn_plan *p, enum spawn_op_kind kind, const char *what)
{
	if (p->n == p->cap) {
		p->cap = p->cap ? p->cap * 2 : 64;
		p->ops = xrealloc(p->ops, p->cap * sizeof(*p->ops));
	}
	struct spawn_op *op = &p->ops[p->n++];
	memset(op, 0, sizeof(*op));
	op->kind = kind;
	op->what = keep_str(p, xstrdup(what));
	op->fd = -1;
	return op;
}

void spawn_plan_fd(struct spawn_plan *p, int from, int to, bool keep)
{
	if (from < 0)
		return;
	/* One slot stays for the report pipe. */
	if (p->n_fds + 1 >= SPAWN_MAX_FDS || to < 0)
		abort();
	p->fds[p->n_fds++] = (struct spawn_fd){ .from = from, .to = to, .keep = keep };
}

int spawn_plan_error(const struct spawn_plan *p, const struct spawn_report *rep, struct err *err)
{
	const char *what = "arrange file descriptors";
	if (rep->step >= 0 && (size_t)rep->step < p->n)
		what = p->ops[rep->step].what;
	else if (rep->step >= 0)
		what = "setup";
	return err_sys(err, rep->errnum, "%s: %s", p->name, what);
}

/*
 * Everything below, down to the parent's side, runs in the child between its start and exec:
 * raw system calls only, no allocation, no stdio, nothing that takes a lock another thread of
 * the parent may have held.
 */

static int report_fd = -1;

__attribute__((noreturn)) static void fail(int step, int errnum)
{
	struct spawn_report rep = { .step = step, .errnum = errnum };
	ssize_t w;
	do
		w = write(report_fd, &rep, sizeof(rep));
	while (w < 0 && errno == EINTR);
	_exit(127);
}

static int close_from_to(unsigned lo, unsigned hi)
{
	if (lo > hi)
		return 0;
	if (syscall(SYS_close_range, lo, hi, 0) == 0)
		return 0;
	if (errno != ENOSYS)
		return -errno;
	/* Kernels before 5.9. */
	struct rlimit rl;
	if (hi == ~0U) {
		if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
			return -errno;
		hi = rl.rlim_cur > 0 ? (unsigned)rl.rlim_cur - 1 : 0;
	}
	for (unsigned fd = lo; fd <= hi; fd++)
		close((int)fd);
	return 0;
}

/* Moves the parent's descriptors (and the report pipe) to their numbers in the child and
 * closes every other one above stderr. */
static int arrange_fds(const struct spawn_plan *p)
{
	struct spawn_fd fds[SPAWN_MAX_FDS];
	size_t n = p->n_fds;
	memcpy(fds, p->fds, n * sizeof(*fds));
	int top = 2;
	for (size_t i = 0; i < n; i++)
		top = fds[i].to > top ? fds[i].to : top;
	size_t rep = n++;
	fds[rep] = (struct spawn_fd){ .from = p->report_fd,
				      .to = p->report_to >= 0 ? p->report_to : top + 1 };

	int base = 0;
	for (size_t i = 0; i < n; i++) {
		base = fds[i].from >= base ? fds[i].from + 1 : base;
		base = fds[i].to >= base ? fds[i].to + 1 : base;
	}
	/* Two moves, so that no target number overwrites a source not yet moved. */
	for (size_t i = 0; i < n; i++)
		if (dup3(fds[i].from, base + (int)i, O_CLOEXEC) < 0)
			return -errno;
	report_fd = base + (int)rep;
	for (size_t i = 0; i < n; i++)
		if (dup3(base + (int)i, fds[i].to, fds[i].keep ? 0 : O_CLOEXEC) < 0)
			return -errno;
	report_fd = fds[rep].to;

	/* Every number above stderr that is not a target: the gaps between targets (in order),
	 * then all above the last, which takes the temporary copies too. */
	unsigned next = 3;
	for (;;) {
		unsigned lowest = ~0U;
		for (size_t i = 0; i < n; i++)
			if ((unsigned)fds[i].to >= next && (unsigned)fds[i].to < lowest)
				lowest = (unsigned)fds[i].to;
		int r = close_from_to(next, lowest == ~0U ? ~0U : lowest - 1);
		if (r < 0)
			return r;
		if (lowest == ~0U)
			return 0;
		next = lowest + 1;
	}
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

static int make_tap(const char *name)
{
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
	size_t len = strlen(name);
	if (len >= sizeof(ifr.ifr_name))
		return -ENAMETOOLONG;
	memcpy(ifr.ifr_name, name, len);
	int tun = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
	if (tun < 0)
		return -errno;
	int r = ioctl(tun, TUNSETIFF, &ifr) < 0 || ioctl(tun, TUNSETPERSIST, 1) < 0 ? -errno : 0;
	close(tun);
	return r;
}

/* Attaches to the TAP `name` (created when missing, gone with its last descriptor unless
 * persistent) of the current network namespace as descriptor `to`, not close-on-exec: the
 * program after the exec uses it without the privilege attaching needs. */
static int open_tap(const char *name, unsigned flags, int to)
{
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	ifr.ifr_flags = (short)(IFF_TAP | IFF_NO_PI | flags);
	size_t len = strlen(name);
	if (len >= sizeof(ifr.ifr_name))
		return -ENAMETOOLONG;
	memcpy(ifr.ifr_name, name, len);
	int tun = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
	if (tun < 0)
		return -errno;
	int r = ioctl(tun, TUNSETIFF, &ifr) < 0 ? -errno : 0;
	if (r == 0 && tun != to)
		r = dup3(tun, to, 0) < 0 ? -errno : 0;
	else if (r == 0)
		r = fcntl(tun, F_SETFD, 0) < 0 ? -errno : 0;
	if (tun != to || r < 0)
		close(tun);
	return r;
}

static int reset_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	/* Ignored signals stay ignored across exec: the child must not inherit the daemon's. */
	for (int sig = 1; sig < NSIG; sig++)
		if (sig != SIGKILL && sig != SIGSTOP)
			sigaction(sig, &sa, NULL); /* fails harmlessly for signals libc reserves */
	sigset_t none;
	sigemptyset(&none);
	return sigprocmask(SIG_SETMASK, &none, NULL) < 0 ? -errno : 0;
}

static int drop_caps(const struct spawn_plan *p)
{
	/* After a SOP_SETID under SOP_KEEP_CAPS the permitted set is kept and the effective one
	 * emptied: raise it again, for the bounding set's drops (CAP_SETPCAP). Otherwise this
	 * changes nothing. */
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3, .pid = 0 };
	struct __user_cap_data_struct cur[2];
	if (syscall(SYS_capget, &h, cur) < 0)
		return -errno;
	if (cur[0].effective != cur[0].permitted || cur[1].effective != cur[1].permitted) {
		cur[0].effective = cur[0].permitted;
		cur[1].effective = cur[1].permitted;
		if (syscall(SYS_capset, &h, cur) < 0)
			return -errno;
	}
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

static int write_file(int dfd, const char *path, const char *data)
{
	int fd = openat(dfd >= 0 ? dfd : AT_FDCWD, path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	size_t len = strlen(data);
	ssize_t n;
	do
		n = write(fd, data, len);
	while (n < 0 && errno == EINTR);
	int e = errno;
	close(fd);
	return n == (ssize_t)len ? 0 : n < 0 ? -e : -EIO;
}

/* Drops every supplementary group, then the gid, then the uid: in that order, since each
 * step needs the privilege the next one gives up. */
static int set_ids(uid_t uid, gid_t gid, gid_t extra)
{
	gid_t groups[1] = { extra };
	if (syscall(SYS_setgroups, extra ? 1 : 0, extra ? groups : NULL) < 0 ||
	    syscall(SYS_setresgid, gid, gid, gid) < 0 || syscall(SYS_setresuid, uid, uid, uid) < 0)
		return -errno;
	return 0;
}

static int send_byte(int fd)
{
	static const char b = 1;
	ssize_t n;
	do
		n = send(fd, &b, 1, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	return n == 1 ? 0 : -errno;
}

/* At most this many descriptors arrive with one SOP_RECV_FD. */
#define RECV_FDS_MAX 8

ssize_t spawn_recv_fds(int sock, void *buf, size_t len, int *fds, size_t max, size_t *nfd,
		       int *mflags)
{
	struct iovec iov = { .iov_base = buf, .iov_len = len };
	union {
		char buf[CMSG_SPACE(SPAWN_MSG_MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} u;
	max = max > SPAWN_MSG_MAX_FDS ? SPAWN_MSG_MAX_FDS : max;
	struct msghdr mh = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = u.buf,
		.msg_controllen = CMSG_SPACE(max * sizeof(int)),
	};
	ssize_t n;
	do
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	*nfd = 0;
	if (n < 0)
		return -errno;
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	if (cm && cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
	    cm->cmsg_len >= CMSG_LEN(0)) {
		*nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		*nfd = *nfd > max ? max : *nfd;
		memcpy(fds, CMSG_DATA(cm), *nfd * sizeof(int));
	}
	*mflags = mh.msg_flags;
	return n;
}

/* One byte with n descriptors attached; they end up as numbers to, to + 1, ... */
static int recv_fds(int fd, int to, unsigned n)
{
	if (n < 1 || n > RECV_FDS_MAX)
		return -EINVAL;
	char b;
	int got[RECV_FDS_MAX];
	size_t nfd;
	int mflags;
	ssize_t k = spawn_recv_fds(fd, &b, 1, got, n, &nfd, &mflags);
	if (k < 0)
		return (int)k;
	if (k == 0)
		return -ECANCELED;
	if (nfd != n || (mflags & MSG_CTRUNC))
		return -EPROTO;
	int r = 0;
	/* One received into the target range but not at its own place is moved above it first,
	 * so that putting another in place cannot close it. */
	for (unsigned i = 0; i < n; i++) {
		if (got[i] >= to && got[i] < to + (int)n && got[i] != to + (int)i) {
			int moved = fcntl(got[i], F_DUPFD_CLOEXEC, to + (int)n);
			if (moved < 0 && r == 0)
				r = -errno;
			close(got[i]);
			got[i] = moved;
		}
	}
	for (unsigned i = 0; i < n; i++) {
		if (got[i] < 0)
			continue;
		if (got[i] == to + (int)i)
			continue;
		if (r == 0 && dup3(got[i], to + (int)i, O_CLOEXEC) < 0)
			r = -errno;
		close(got[i]);
	}
	return r;
}

/* Gives descriptor m the number `to` (close-on-exec). */
static int fd_to(int m, int to)
{
	if (m == to)
		return 0;
	int r = dup3(m, to, O_CLOEXEC) < 0 ? -errno : 0;
	close(m);
	return r;
}

/* A new filesystem instance, mounted nowhere yet: created while the child still has the
 * privilege its kind needs (see SOP_FSMOUNT), attached later with SOP_MOVE_MOUNT. */
static int fs_mount(const char *fstype, unsigned attr, int to)
{
	int fs = (int)syscall(SYS_fsopen, fstype, FSOPEN_CLOEXEC);
	if (fs < 0)
		return -errno;
	int m = -1;
	if (syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0)
		m = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, attr);
	int r = m < 0 ? -errno : 0;
	close(fs);
	if (r < 0)
		return r;
	return fd_to(m, to);
}

/* A detached copy of the mount at path (and of the mounts below it when flags has
 * AT_RECURSIVE), attached later with SOP_MOVE_MOUNT. */
static int tree_clone(const char *path, unsigned flags, int to)
{
	int m = (int)syscall(SYS_open_tree, AT_FDCWD, path,
			     OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (flags & AT_RECURSIVE));
	if (m < 0)
		return -errno;
	return fd_to(m, to);
}

static int run_op(const struct spawn_plan *p, const struct spawn_op *op)
{
	int r = 0;
	switch (op->kind) {
	case SOP_SIGNALS:
		return reset_signals();
	case SOP_PARENT_DEATH:
		r = prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (r < 0)
			break;
		/* The parent may have died before the request took: then nobody would kill us. In
		 * a pid namespace of its own the parent has no pid here (0): its death shows as
		 * the report pipe's reader gone. */
		if (getppid() == 0) {
			struct pollfd pf = { .fd = report_fd, .events = 0 };
			if (poll(&pf, 1, 0) == 1 && (pf.revents & POLLERR))
				return -ESRCH;
		} else if (getppid() != p->parent) {
			return -ESRCH;
		}
		break;
	case SOP_WAIT_BYTE: {
		char c;
		ssize_t n;
		do
			n = read(op->fd, &c, 1);
		while (n < 0 && errno == EINTR);
		return n == 1 ? 0 : n == 0 ? -ECANCELED : -errno;
	}
	case SOP_WRITE:
		return write_file(op->fd, op->dst, op->src);
	case SOP_UNSHARE:
		r = unshare((int)op->arg);
		break;
	case SOP_SETNS:
		r = setns(op->fd, (int)op->arg);
		break;
	case SOP_SETSID:
		r = setsid() < 0 ? -1 : 0;
		break;
	case SOP_LO_UP:
		return lo_up();
	case SOP_TAP:
		return make_tap(op->src);
	case SOP_HOSTNAME:
		r = sethostname(op->src, strlen(op->src));
		break;
	case SOP_MOUNT:
		r = mount(op->src, op->dst, op->fstype, op->flags, op->data);
		break;
	case SOP_MKDIR:
		r = mkdir(op->dst, (mode_t)op->arg);
		if (r < 0 && errno == EEXIST)
			r = 0;
		break;
	case SOP_RMDIR:
		r = rmdir(op->dst);
		break;
	case SOP_CHOWN:
		r = fchownat(AT_FDCWD, op->dst, (uid_t)op->arg, (gid_t)op->flags,
			     AT_SYMLINK_NOFOLLOW);
		break;
	case SOP_MKNOD:
		r = mknod(op->dst, (mode_t)op->arg, op->dev);
		break;
	case SOP_SYMLINK:
		r = symlink(op->src, op->dst);
		break;
	case SOP_CHDIR:
		r = op->dst ? chdir(op->dst) : fchdir(op->fd);
		break;
	case SOP_PIVOT_ROOT:
		r = (int)syscall(SYS_pivot_root, ".", ".");
		break;
	case SOP_UMOUNT:
		r = umount2(op->dst, (int)op->flags);
		break;
	case SOP_STDIO_NULL:
		return stdio_null(op->dst);
	case SOP_RLIMIT: {
		struct rlimit rl = { .rlim_cur = op->arg, .rlim_max = op->arg };
		r = setrlimit((__rlimit_resource_t)op->flags, &rl);
		break;
	}
	case SOP_CAPS:
		return drop_caps(p);
	case SOP_NO_NEW_PRIVS:
		r = prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
		break;
	case SOP_UMASK:
		umask((mode_t)op->arg);
		return 0;
	case SOP_SECCOMP:
		r = prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, p->seccomp, 0, 0);
		break;
	case SOP_EXEC:
		if (op->fd >= 0)
			r = (int)syscall(SYS_execveat, op->fd, "", p->argv, p->envp, AT_EMPTY_PATH);
		else
			r = execve(op->src, p->argv, p->envp);
		break;
	case SOP_EXIT:
		_exit(0);
	case SOP_SETID:
		return set_ids((uid_t)op->arg, (gid_t)op->flags, (gid_t)op->dev);
	case SOP_SEND_BYTE:
		return send_byte(op->fd);
	case SOP_RECV_FD:
		return recv_fds(op->fd, (int)op->arg, (unsigned)op->flags);
	case SOP_FSMOUNT:
		return fs_mount(op->fstype, (unsigned)op->flags, (int)op->arg);
	case SOP_TAP_OPEN:
		return open_tap(op->src, (unsigned)op->flags, (int)op->arg);
	case SOP_KEEP_CAPS:
		r = prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0);
		break;
	case SOP_OPEN_TREE:
		return tree_clone(op->dst, (unsigned)op->flags, (int)op->arg);
	case SOP_MOVE_MOUNT:
		r = (int)syscall(SYS_move_mount, op->fd, "", AT_FDCWD, op->dst,
				 MOVE_MOUNT_F_EMPTY_PATH);
		break;
	}
	return r < 0 ? -errno : 0;
}

void spawn_plan_run(const struct spawn_plan *p)
{
	if (p->gate_fd >= 0) {
		/* Cloned by the spawner: on only once the daemon knows this child. */
		char c;
		ssize_t n;
		do
			n = read(p->gate_fd, &c, 1);
		while (n < 0 && errno == EINTR);
		if (n != 1)
			_exit(127);
		/* The daemon's name (p->name, set by the spawner), not the spawner's. */
		prctl(PR_SET_NAME, p->name, 0, 0, 0);
	}
	report_fd = p->report_fd;
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

/* --- the parent's side ------------------------------------------------------------------ */

long spawn_clone(struct spawn_plan *plan, uint64_t flags, int cgroup_fd, int *pidfd, bool *placed)
{
	*pidfd = -1;
	struct clone_args_v2 args = {
		.flags = flags | CLONE_PIDFD | (cgroup_fd >= 0 ? CLONE_INTO_CGROUP : 0),
		.pidfd = (uint64_t)(uintptr_t)pidfd,
		/* With CLONE_PARENT the child's exit signal is its cloner's own (SIGCHLD, as a
		 * fork's), and clone3 takes none. */
		.exit_signal = flags & CLONE_PARENT ? 0 : SIGCHLD,
		.cgroup = cgroup_fd >= 0 ? (uint64_t)cgroup_fd : 0,
	};
	*placed = cgroup_fd >= 0;
	long pid = syscall(SYS_clone3, &args, sizeof(args));
	if (pid < 0 && *placed && (errno == E2BIG || errno == EINVAL)) {
		/* Before Linux 5.7: no CLONE_INTO_CGROUP; the caller moves the child instead. */
		*placed = false;
		args.flags &= ~(uint64_t)CLONE_INTO_CGROUP;
		args.cgroup = 0;
		pid = syscall(SYS_clone3, &args, sizeof(args));
	}
	if (pid < 0 && errno == ENOSYS) {
		/* Before Linux 5.3, or under a seccomp profile that hides clone3: a pidfd after
		 * the fact (where the kernel has them), as this pid cannot be reused before it
		 * is reaped. */
		*placed = false;
		pid = syscall(SYS_clone, (unsigned long)flags | SIGCHLD, NULL, NULL, NULL, NULL);
		if (pid > 0)
			*pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
	}
	if (pid == 0)
		spawn_plan_run(plan);
	return pid < 0 ? -errno : pid;
}

int spawn_start(struct spawn_plan *plan, uint64_t flags, int cgroup_fd, struct spawn_child *c,
		struct err *err)
{
	int rep[2];
	if (pipe2(rep, O_CLOEXEC) < 0)
		return err_sys(err, errno, "%s: pipe", plan->name);
	plan->report_fd = rep[1];
	plan->parent = getpid();

	int pidfd = -1;
	bool placed = false;
	long pid;
	if (!spawner_clone(plan, flags, cgroup_fd, &pid, &pidfd, &placed)) {
		sigset_t all, old;
		sigfillset(&all);
		pthread_sigmask(SIG_SETMASK, &all, &old);
		pid = spawn_clone(plan, flags, cgroup_fd, &pidfd, &placed);
		pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	/* The child's end: held by the child alone from now on. */
	close(rep[1]);
	plan->report_fd = -1;
	if (pid < 0) {
		close(rep[0]);
		return err_sys(err, (int)-pid, "%s: clone", plan->name);
	}
	*c = (struct spawn_child){
		.pid = (pid_t)pid, .pidfd = pidfd, .report = rep[0], .placed = placed
	};
	return 0;
}

/* Reads the child's report: 1 and *rep when it wrote one, 0 at end of file (it reached exec,
 * or died), negative errno on error. */
static int read_report(int fd, struct spawn_report *rep)
{
	ssize_t n;
	do
		n = read(fd, rep, sizeof(*rep));
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		return 0;
	return n == (ssize_t)sizeof(*rep) ? 1 : -EPROTO;
}

int spawn_wait(const struct spawn_plan *plan, struct spawn_child *c, int timeout_ms,
	       struct err *err)
{
	struct pollfd pfd = { .fd = c->report, .events = POLLIN };
	int r;
	do
		r = poll(&pfd, 1, timeout_ms);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return err_sys(err, errno, "%s: poll", plan->name);
	if (r == 0)
		return err_set(err, ETIMEDOUT, "%s: setup took longer than %d ms", plan->name,
			       timeout_ms);

	struct spawn_report rep;
	r = read_report(c->report, &rep);
	close(TAKE_FD(c->report));
	if (r > 0)
		return spawn_plan_error(plan, &rep, err);
	if (r < 0)
		return err_sys(err, -r, "%s: read the setup report", plan->name);

	/* Killed during setup (e.g. by its memory limit) also closes the pipe, a moment before
	 * the child can be waited for: one that is exiting is waited for. */
	if (c->pidfd < 0 || !spawn_exiting(c->pid))
		return 0;
	pfd = (struct pollfd){ .fd = c->pidfd, .events = POLLIN };
	while (poll(&pfd, 1, timeout_ms) < 0 && errno == EINTR)
		;
	siginfo_t si;
	memset(&si, 0, sizeof(si));
	if (waitid((idtype_t)P_PIDFD, (id_t)c->pidfd, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
	    si.si_pid != 0 && si.si_code != CLD_EXITED)
		return err_set(err, ECHILD, "%s: the child was killed by signal %d during setup",
			       plan->name, si.si_status);
	return 0;
}

int spawn_abort(const struct spawn_plan *plan, struct spawn_child *c, int r, struct err *err)
{
	spawn_kill(c->pid, c->pidfd);
	struct spawn_report rep;
	if (c->report >= 0 && read_report(c->report, &rep) > 0)
		return spawn_plan_error(plan, &rep, err);
	return r;
}

void spawn_kill(pid_t pid, int pidfd)
{
	if (pidfd >= 0)
		syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
	else if (pid > 0)
		kill(pid, SIGKILL);
}

int spawn_reap(pid_t pid, int pidfd)
{
	int status = -1;
	if (pidfd >= 0) {
		siginfo_t si;
		memset(&si, 0, sizeof(si));
		int r;
		do
			r = waitid((idtype_t)P_PIDFD, (id_t)pidfd, &si, WEXITED);
		while (r < 0 && errno == EINTR);
		if (r == 0)
			return si.si_code == CLD_EXITED ? W_EXITCODE(si.si_status, 0)
							: si.si_status;
		if (errno != EINVAL)
			return -1;
		/* Kernels before 5.4 have pidfds but no P_PIDFD. */
	}
	pid_t r;
	do
		r = waitpid(pid, &status, 0);
	while (r < 0 && errno == EINTR);
	return r == pid ? status : -1;
}

bool spawn_exiting(pid_t pid)
{
	/* Field 9 of /proc/<pid>/stat has PF_EXITING, set before the files are closed. */
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return true;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		return true;
	buf[n] = '\0';
	char *p = strrchr(buf, ')');
	char state;
	unsigned long flags;
	if (!p || sscanf(p + 1, " %c %*d %*d %*d %*d %*d %lu", &state, &flags) != 2)
		return false;
	return state == 'Z' || state == 'X' || (flags & 0x4 /* PF_EXITING */);
}

void spawn_child_close(struct spawn_child *c)
{
	if (c->report >= 0)
		close(TAKE_FD(c->report));
	if (c->pidfd >= 0)
		close(TAKE_FD(c->pidfd));
}
