/* qemu_vm: one QEMU process and the ways the driver talks to it: its console (captured with a
 * size cap), its QMP socket, and the agent's channel. Everything blocks with a deadline: this
 * runs on worker threads. */
#include "driver/qemu/qemu.h"
#include "driver/vm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/mount.h>
#include <linux/capability.h>
#include <linux/if_tun.h>
#include <time.h>
#include <unistd.h>
#include <linux/vm_sockets.h>

#include "driver/jail/jail.h"
#include "driver/proc.h"
#include "driver/qemu/qmp.h"
#include "guest/call.h"
#include "guest/proto.h"
#include "util/cleanup.h"
#include "util/fs.h"
#include "util/spawn.h"
#include "util/random.h"
#include "util/time.h"

/* console.log is rotated to console.log.1 past this size: at most twice this on disk, and
 * the latest output always kept. The guest decides what it prints, so it must be bounded. */
#define CONSOLE_LOG_CAP (256u << 10)
/* The last console bytes kept in memory for error messages. */
#define CONSOLE_RING 4096
/* The end of the guest kernel's line for an OOM kill (global or memory cgroup). At loglevel
 * 4 (quiet) it is the one line of the OOM report that reaches the console. */
#define OOM_LINE "of memory: Killed process"
/* How often a waiting loop looks again (QEMU's sockets appearing, migration progress). */
#define POLL_STEP_MS 5

static void sleep_ms(int ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* --- console capture ------------------------------------------------------------------- */

struct qemu_console {
	int fd;     /* read end of QEMU's stdout/stderr */
	int dirfd;  /* the run directory (borrowed) */
	int log_fd; /* console.log */
	size_t logged;
	pthread_t thread;
	atomic_bool stop;
	pthread_mutex_t lock;
	char ring[CONSOLE_RING];
	size_t total; /* bytes ever received; ring holds the last min(total, CONSOLE_RING) */
	/* The guest kernel's OOM kills, counted from its console lines. */
	atomic_uint_fast64_t oom_kills;
	char carry[sizeof(OOM_LINE) - 1]; /* the end of the previous read, for split lines */
	size_t carry_len;
};

/* Counts the guest kernel's "Out of memory: Killed process" (and the memory cgroup's) lines
 * in the next n bytes. A match must end in the new bytes: the carry is too short to hold
 * one, so none is counted twice. */
static void console_count_oom(struct qemu_console *c, const char *p, size_t n)
{
	const size_t plen = sizeof(OOM_LINE) - 1;
	char buf[sizeof(c->carry) + 8192];
	size_t len = 0;
	memcpy(buf, c->carry, c->carry_len);
	len = c->carry_len;
	size_t take = n < sizeof(buf) - len ? n : sizeof(buf) - len;
	memcpy(buf + len, p, take);
	len += take;
	for (const char *at = buf; (at = memmem(at, len - (size_t)(at - buf), OOM_LINE, plen));
	     at += plen)
		atomic_fetch_add(&c->oom_kills, 1);
	c->carry_len = len < sizeof(c->carry) ? len : sizeof(c->carry) - 1;
	memcpy(c->carry, buf + len - c->carry_len, c->carry_len);
}

static void console_keep(struct qemu_console *c, const char *p, size_t n)
{
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < n; i++)
		c->ring[(c->total + i) % CONSOLE_RING] = p[i];
	c->total += n;
	pthread_mutex_unlock(&c->lock);
}

static void console_log(struct qemu_console *c, const char *p, size_t n)
{
	if (c->log_fd >= 0 && c->logged + n > CONSOLE_LOG_CAP) {
		close(c->log_fd);
		renameat(c->dirfd, QEMU_CONSOLE_LOG, c->dirfd, QEMU_CONSOLE_LOG ".1");
		c->log_fd = openat(c->dirfd, QEMU_CONSOLE_LOG,
				   O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
		c->logged = 0;
	}
	if (c->log_fd < 0)
		return;
	while (n) {
		ssize_t k = write(c->log_fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return; /* a full disk loses console output, nothing else */
		p += k;
		n -= (size_t)k;
		c->logged += (size_t)k;
	}
}

static void *console_main(void *arg)
{
	struct qemu_console *c = arg;
	char buf[8192];
	for (;;) {
		bool stopping = atomic_load(&c->stop);
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		/* Once asked to stop, only what is already in the pipe is read. */
		int r = poll(&p, 1, stopping ? 0 : 100);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			if (stopping || r < 0)
				break;
			continue;
		}
		ssize_t n = read(c->fd, buf, sizeof(buf));
		if (n < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (n <= 0)
			break;
		console_keep(c, buf, (size_t)n);
		console_count_oom(c, buf, (size_t)n);
		console_log(c, buf, (size_t)n);
	}
	return NULL;
}

static int console_start(int fd, int dirfd, struct qemu_console **ret, struct err *err)
{
	struct qemu_console *c = xcalloc(1, sizeof(*c));
	c->fd = fd;
	c->dirfd = dirfd;
	c->log_fd = openat(dirfd, QEMU_CONSOLE_LOG,
			   O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	pthread_mutex_init(&c->lock, NULL);
	int r = pthread_create(&c->thread, NULL, console_main, c);
	if (r != 0) {
		if (c->log_fd >= 0)
			close(c->log_fd);
		pthread_mutex_destroy(&c->lock);
		free(c);
		return err_sys(err, r, "qemu: starting the console reader");
	}
	*ret = c;
	return 0;
}

/* Ends the capture; what was received stays readable (console_tail) until console_free. */
static void console_stop(struct qemu_console *c)
{
	if (!c || c->fd < 0)
		return;
	atomic_store(&c->stop, true);
	pthread_join(c->thread, NULL);
	close(c->fd);
	c->fd = -1;
	if (c->log_fd >= 0)
		close(c->log_fd);
	c->log_fd = -1;
}

static void console_free(struct qemu_console *c)
{
	if (!c)
		return;
	console_stop(c);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* The last bytes received, non-printable bytes as '.', line breaks as " | ". */
static char *console_tail(struct qemu_console *c, size_t max)
{
	if (!c)
		return xstrdup("");
	char raw[CONSOLE_RING];
	pthread_mutex_lock(&c->lock);
	size_t n = c->total < CONSOLE_RING ? c->total : CONSOLE_RING;
	if (n > max)
		n = max;
	for (size_t i = 0; i < n; i++)
		raw[i] = c->ring[(c->total - n + i) % CONSOLE_RING];
	pthread_mutex_unlock(&c->lock);

	char *out = xmalloc(3 * n + 1);
	size_t o = 0;
	bool line_break = false;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)raw[i];
		if (ch == '\n' || ch == '\r') {
			line_break = o > 0;
			continue;
		}
		if (line_break) {
			memcpy(out + o, " | ", 3);
			o += 3;
			line_break = false;
		}
		out[o++] = ch >= 0x20 && ch < 0x7f ? (char)ch : '.';
	}
	out[o] = '\0';
	return out;
}

uint64_t qemu_vm_guest_oom_kills(struct qemu_vm *vm)
{
	return vm && vm->con ? atomic_load(&vm->con->oom_kills) : 0;
}

/* --- the process ----------------------------------------------------------------------- */

int qemu_vm_dir(const char *run_dir, const char *name, char **ret, struct err *err)
{
	if (mkdir(run_dir, 0700) < 0 && errno != EEXIST)
		return err_sys(err, errno, "qemu: creating `%s`", run_dir);
	_cleanup_free_ char *dir = xasprintf("%s/%s", run_dir, name);
	if (mkdir(dir, 0700) < 0)
		return err_sys(err, errno, "qemu: creating the run directory `%s`", dir);
	*ret = TAKE_PTR(dir);
	return 0;
}

static char *const qemu_env[] = {
	/* Nothing of the daemon's environment (keys, tokens) reaches QEMU. */
	"PATH=/usr/sbin:/usr/bin:/sbin:/bin",
	NULL,
};

/* Where the child's descriptors go before the exec: stdio, the files QEMU gets by number,
 * then those that the plan's own steps use (closed on exec). */
enum { CHILD_FD_NETNS = QEMU_FD_OVERLAY0 + QEMU_DRIVES, CHILD_FD_EXE };

/* What the host's /usr-merged top-level directories are, for QEMU's root: a symlink into
 * /usr is made again, a directory is bound read-only (a host that has not merged them). */
static void plan_top_dir(struct spawn_plan *p, const char *name)
{
	_cleanup_free_ char *host = xasprintf("/%s", name);
	struct stat st;
	if (lstat(host, &st) < 0)
		return;
	if (S_ISLNK(st.st_mode)) {
		char target[256];
		ssize_t n = readlink(host, target, sizeof(target) - 1);
		if (n <= 0)
			return;
		target[n] = '\0';
		struct spawn_op *op = spawn_plan_add(p, SOP_SYMLINK, "symlink a top directory");
		op->src = spawn_plan_str(p, "%s", target);
		op->dst = spawn_plan_str(p, "%s", name);
		return;
	}
	if (!S_ISDIR(st.st_mode))
		return;
	struct spawn_op *op = spawn_plan_add(p, SOP_MKDIR, "mkdir a top directory");
	op->dst = spawn_plan_str(p, "%s", name);
	op->arg = 0755;
	op = spawn_plan_add(p, SOP_MOUNT, spawn_plan_str(p, "bind /%s", name));
	op->src = spawn_plan_str(p, "/%s", name);
	op->dst = spawn_plan_str(p, "%s", name);
	op->flags = MS_BIND | MS_REC;
	op = spawn_plan_add(p, SOP_MOUNT, spawn_plan_str(p, "make /%s read-only", name));
	op->dst = spawn_plan_str(p, "%s", name);
	op->flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV;
}

/* A host device QEMU opens by path, bound on an empty file of its root. */
static void plan_device(struct spawn_plan *p, const char *dev)
{
	struct spawn_op *op = spawn_plan_add(p, SOP_MKNOD, spawn_plan_str(p, "create %s", dev));
	op->dst = dev + 1;
	op->arg = S_IFREG | 0600;
	op = spawn_plan_add(p, SOP_MOUNT, spawn_plan_str(p, "bind %s", dev));
	op->src = dev;
	op->dst = dev + 1;
	op->flags = MS_BIND;
}

/* QEMU's mount namespace: a private copy of the host's tree, then a new root of its own on
 * the run directory (a read-only tmpfs, seen by nothing outside) holding the host's /usr
 * read-only (QEMU, its libraries, firmware and modules: no secrets), the symlinks or binds
 * of /bin, /lib and /lib64, /dev/null and /dev/urandom (and /dev/kvm under KVM), and a procfs
 * of its own pid namespace, through whose /proc/self/fd it opens its descriptors. */
static void plan_root(struct spawn_plan *p, const struct qemu_launch *l, const char *dir)
{
	struct spawn_op *op = spawn_plan_add(p, SOP_MOUNT, "make the mount tree private");
	op->dst = "/";
	op->flags = MS_REC | MS_PRIVATE;
	op = spawn_plan_add(p, SOP_MOUNT, "mount its root");
	op->src = "qemu";
	op->dst = dir;
	op->fstype = "tmpfs";
	op->flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
	op->data = "size=64k,nr_inodes=64,mode=0755";
	op = spawn_plan_add(p, SOP_CHDIR, "enter its root");
	op->dst = dir;
	static const char *const dirs[] = { "usr", "dev", "proc" };
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		op = spawn_plan_add(p, SOP_MKDIR, spawn_plan_str(p, "mkdir /%s", dirs[i]));
		op->dst = dirs[i];
		op->arg = 0755;
	}
	op = spawn_plan_add(p, SOP_MOUNT, "bind /usr");
	op->src = "/usr";
	op->dst = "usr";
	op->flags = MS_BIND | MS_REC;
	op = spawn_plan_add(p, SOP_MOUNT, "make /usr read-only");
	op->dst = "usr";
	op->flags = MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV;
	plan_top_dir(p, "bin");
	plan_top_dir(p, "lib");
	plan_top_dir(p, "lib64");
	plan_device(p, "/dev/null");
	plan_device(p, "/dev/urandom");
	if (l->m->accel == QEMU_ACCEL_KVM)
		plan_device(p, "/dev/kvm");
	/* Made by the child, PID 1 of the new pid namespace: it shows that namespace only. */
	op = spawn_plan_add(p, SOP_MOUNT, "mount proc");
	op->src = "proc";
	op->dst = "proc";
	op->fstype = "proc";
	op->flags = MS_NOSUID | MS_NODEV | MS_NOEXEC;
	op->data = "hidepid=2";
	op = spawn_plan_add(p, SOP_MOUNT, "make its root read-only");
	op->dst = ".";
	op->flags = MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC;
	op->data = "size=64k,nr_inodes=64,mode=0755";
	spawn_plan_add(p, SOP_PIVOT_ROOT, "pivot_root");
	op = spawn_plan_add(p, SOP_UMOUNT, "detach the old root");
	op->dst = ".";
	op->flags = MNT_DETACH;
	op = spawn_plan_add(p, SOP_CHDIR, "chdir /");
	op->dst = "/";
}

/* The group that may open /dev/kvm (0: none but root's). */
static gid_t kvm_gid(void)
{
	struct stat st;
	return stat("/dev/kvm", &st) == 0 && (st.st_mode & 0060) == 0060 ? st.st_gid : 0;
}

/* The plan of QEMU's process: it dies with the daemon's thread that started it (the daemon's
 * workers live as long as the daemon), joins its cgroup and network namespace and attaches to
 * the TAP there, makes its root (plan_root), leaves the daemon's session, becomes `uid` with
 * no capability and no_new_privs, and execs QEMU. It is PID 1 of a pid namespace of its own
 * (spawn_start's flags). `chan`: QMP's and the agent's listening sockets and the vhost-vsock
 * device (-1 where the channel has none). */
static void child_plan(struct spawn_plan *plan, const struct qemu_launch *l, char **argv,
		       const struct cgroup *cg, const char *dir, uint32_t uid, int netns,
		       int kernel, int devnull, int out, const int chan[3], int exe)
{
	spawn_plan_fd(plan, devnull, 0, true);
	spawn_plan_fd(plan, out, 1, true);
	spawn_plan_fd(plan, out, 2, true);
	spawn_plan_fd(plan, l->ram_fd, QEMU_FD_RAM, true);
	spawn_plan_fd(plan, l->rootfs_fd, QEMU_FD_ROOTFS, true);
	spawn_plan_fd(plan, kernel, QEMU_FD_KERNEL, true);
	spawn_plan_fd(plan, chan[0], QEMU_FD_QMP, true);
	spawn_plan_fd(plan, chan[1], QEMU_FD_AGENT, true);
	spawn_plan_fd(plan, chan[2], QEMU_FD_VHOST, true);
	for (unsigned i = 0; l->drives && i < QEMU_DRIVES; i++) {
		spawn_plan_fd(plan, l->drives->fd[i], QEMU_FD_DRIVE0 + (int)i, true);
		spawn_plan_fd(plan, l->drives->overlay[i], QEMU_FD_OVERLAY0 + (int)i, true);
	}
	spawn_plan_fd(plan, netns, CHILD_FD_NETNS, false);
	spawn_plan_fd(plan, exe, CHILD_FD_EXE, false);
	plan->argv = argv;
	plan->envp = qemu_env;
	plan->caps_keep = 0;
	plan->cap_last = CAP_LAST_CAP;

	spawn_plan_add(plan, SOP_PARENT_DEATH, "die with the daemon");
	spawn_plan_add(plan, SOP_SIGNALS, "reset signals");
	/* A crashing QEMU dumps no core (the guest's memory) to the host's handler: 1 byte
	 * writes no file, and makes the kernel abort a dump to a pipe. */
	struct spawn_op *core = spawn_plan_add(plan, SOP_RLIMIT, "setrlimit RLIMIT_CORE");
	core->flags = RLIMIT_CORE;
	core->arg = 1;
	for (unsigned i = 0; cg && i < cg->n; i++) {
		struct spawn_op *op = spawn_plan_add(plan, SOP_WRITE, "join its cgroup");
		op->dst = cg->procs[i];
		op->src = "0";
	}
	struct spawn_op *op;
	if (netns >= 0) {
		op = spawn_plan_add(plan, SOP_SETNS, "enter its network namespace");
		op->fd = CHILD_FD_NETNS;
	} else {
		op = spawn_plan_add(plan, SOP_UNSHARE, "make its network namespace");
	}
	op->arg = CLONE_NEWNET;
	op = spawn_plan_add(plan, SOP_TAP_OPEN, "attach to " QEMU_TAP_NAME);
	op->src = QEMU_TAP_NAME;
	op->flags = IFF_VNET_HDR;
	op->arg = QEMU_FD_TAP;
	if (!l->unconfined)
		plan_root(plan, l, dir);
	spawn_plan_add(plan, SOP_SETSID, "setsid");
	if (l->unconfined) {
		op = spawn_plan_add(plan, SOP_EXEC, "exec");
		op->fd = CHILD_FD_EXE;
		return;
	}
	spawn_plan_add(plan, SOP_KEEP_CAPS, "keep capabilities across the uid change");
	op = spawn_plan_add(plan, SOP_SETID,
			    spawn_plan_str(plan, "become host uid and gid %u", uid));
	op->arg = uid;
	op->flags = uid;
	if (l->m->accel == QEMU_ACCEL_KVM)
		op->dev = kvm_gid();
	/* The uid change cleared the parent-death signal (prctl(2)): asked for again, or QEMU
	 * would outlive a daemon killed with SIGKILL. */
	spawn_plan_add(plan, SOP_PARENT_DEATH, "die with the daemon (again: as its uid)");
	spawn_plan_add(plan, SOP_CAPS, "drop every capability");
	spawn_plan_add(plan, SOP_NO_NEW_PRIVS, "no_new_privs");
	op = spawn_plan_add(plan, SOP_EXEC, "exec");
	op->fd = CHILD_FD_EXE;
}

static void reap(struct qemu_vm *vm, bool block)
{
	if (vm->pid <= 0 || vm->reaped)
		return;
	int status;
	pid_t r;
	while ((r = waitpid(vm->pid, &status, block ? 0 : WNOHANG)) < 0 && errno == EINTR)
		;
	if (r == vm->pid || (r < 0 && errno == ECHILD)) {
		vm->reaped = true;
		vm->status = r == vm->pid ? status : 0;
	}
}

static bool vm_alive(struct qemu_vm *vm)
{
	reap(vm, false);
	return vm->pid > 0 && !vm->reaped;
}

bool qemu_vm_running(struct qemu_vm *vm)
{
	return vm && vm_alive(vm) && !spawn_exiting(vm->pid);
}

/* How QEMU ended, for messages. */
static void exit_text(const struct qemu_vm *vm, char *buf, size_t n)
{
	if (!vm->reaped)
		snprintf(buf, n, "QEMU is still running");
	else if (WIFEXITED(vm->status))
		snprintf(buf, n, "QEMU exited with status %d", WEXITSTATUS(vm->status));
	else if (WIFSIGNALED(vm->status))
		snprintf(buf, n, "QEMU was killed by signal %d (SIG%s)", WTERMSIG(vm->status),
			 sigabbrev_np(WTERMSIG(vm->status)) ? sigabbrev_np(WTERMSIG(vm->status))
							    : "?");
	else
		snprintf(buf, n, "QEMU ended");
}

int qemu_vm_explain(struct qemu_vm *vm, struct err *err)
{
	if (!vm)
		return -(err ? err->errnum : EIO);
	reap(vm, false);
	if (!vm->reaped && vm->pid > 0 && spawn_exiting(vm->pid) && vm->pidfd >= 0) {
		/* Dying: its exit status is moments away. */
		struct pollfd p = { .fd = vm->pidfd, .events = POLLIN };
		poll(&p, 1, 200);
		reap(vm, false);
	}
	/* The console gets a moment to deliver QEMU's last words. */
	if (vm->reaped)
		sleep_ms(20);
	char what[128] = "";
	if (vm->reaped)
		exit_text(vm, what, sizeof(what));
	_cleanup_free_ char *tail = console_tail(vm->con, CONSOLE_RING);
	const char *panic = strstr(tail, "Kernel panic - not syncing:");
	char cause[256] = "";
	if (panic) {
		panic += strlen("Kernel panic - not syncing:");
		while (*panic == ' ')
			panic++;
		size_t len = strcspn(panic, "|");
		while (len && panic[len - 1] == ' ')
			len--;
		snprintf(cause, sizeof(cause), "guest kernel panicked: %.*s", (int)len, panic);
	}
	size_t keep = 160;
	size_t tl = strlen(tail);
	const char *last = tl > keep ? tail + tl - keep : tail;
	char msg[ERR_MSG_MAX];
	snprintf(msg, sizeof(msg), "%s", err ? err->msg : "");
	int errnum = err && err->errnum ? err->errnum : EIO;
	return err_set(err, errnum, "%s%s%s%s%s%s%s%s", msg, *cause || *what ? " (" : "", cause,
		       *cause && *what ? "; " : "", what, *cause || *what ? ")" : "",
		       *last ? "; console: " : "", *last ? last : "");
}

/* Connects a Unix socket in the run directory, retrying until QEMU creates and listens on it,
 * QEMU dies or the deadline passes. */
static int connect_unix(struct qemu_vm *vm, const char *name, uint64_t deadline, int *ret,
			struct err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	/* Through the directory's fd: short, whatever the run directory's length. */
	snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", vm->dirfd, name);
	for (;;) {
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return err_sys(err, errno, "qemu: socket");
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			*ret = fd;
			return 0;
		}
		int e = errno;
		close(fd);
		if (e != ENOENT && e != ECONNREFUSED && e != EAGAIN && e != EINTR)
			return err_sys(err, e, "qemu: connecting to its %s", name);
		if (!vm_alive(vm)) {
			err_set(err, ECHILD, "QEMU stopped before opening its %s", name);
			return qemu_vm_explain(vm, err);
		}
		if (time_mono_ms() >= deadline) {
			err_set(err, ETIMEDOUT, "QEMU did not open its %s in time", name);
			return qemu_vm_explain(vm, err);
		}
		sleep_ms(POLL_STEP_MS);
	}
}

bool qemu_bench_unconfined;

static void argv_freep(char ***argv)
{
	qemu_argv_free(*argv);
}

/* A listening Unix socket `name` in the run directory, for QEMU to accept on: the directory
 * is root's and 0700, so only the daemon can connect. */
static int listen_unix(struct qemu_vm *vm, const char *name, int *ret, struct err *err)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	snprintf(sa.sun_path, sizeof(sa.sun_path), "/proc/self/fd/%d/%s", vm->dirfd, name);
	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return err_sys(err, errno, "qemu: socket");
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 4) < 0)
		return err_sys(err, errno, "qemu: binding its %s", name);
	*ret = TAKE_FD(fd);
	return 0;
}

/* Starts QEMU's process for l in vm's run directory, its output going to the console reader,
 * and waits until it has reached its exec. */
static int start_process(struct qemu_vm *vm, const struct qemu_launch *launch,
			 const struct cgroup *cg, uint64_t deadline, struct err *err)
{
	struct qemu_launch unconfined = *launch;
	unconfined.unconfined = true;
	const struct qemu_launch *l = qemu_bench_unconfined ? &unconfined : launch;
	_cleanup_(argv_freep) char **argv = qemu_argv(l);
	_cleanup_close_ int devnull = -1, netns = -1, exe = -1, kernel = -1;
	_cleanup_close_pair_ int out[2] = { -1, -1 };
	_cleanup_close_pair_ int socks[2] = { -1, -1 };
	_cleanup_close_ int vhost = -1;
	vm->dirfd = open(vm->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (vm->dirfd < 0)
		return err_sys(err, errno, "qemu: run directory `%s`", vm->dir);
	if (l->netns_path && (netns = open(l->netns_path, O_RDONLY | O_CLOEXEC)) < 0)
		return err_sys(err, errno, "qemu: network namespace `%s`", l->netns_path);
	/* Opened here, executed after the pivot: the binary need not be under /usr. */
	if ((exe = open(argv[0], O_PATH | O_CLOEXEC)) < 0)
		return err_sys(err, errno, "qemu: `%s`", argv[0]);
	int r;
	if (!l->unconfined && (r = jail_uid_alloc(&vm->uid, err)) < 0)
		return err_wrap(err, "qemu");
	if ((kernel = open(l->m->kernel, O_RDONLY | O_CLOEXEC)) < 0)
		return err_sys(err, errno, "qemu: guest kernel `%s`", l->m->kernel);
	devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (devnull < 0)
		return err_sys(err, errno, "qemu: /dev/null");
	if ((r = listen_unix(vm, QEMU_QMP_SOCKET, &socks[0], err)) < 0)
		return r;
	if (l->m->channel == QEMU_CHANNEL_SERIAL &&
	    (r = listen_unix(vm, QEMU_AGENT_SOCKET, &socks[1], err)) < 0)
		return r;
	/* QEMU's uid may not open the device (root's, 0600 on most hosts). */
	if (l->m->channel == QEMU_CHANNEL_VSOCK &&
	    (vhost = open("/dev/vhost-vsock", O_RDWR | O_CLOEXEC)) < 0)
		return err_sys(err, errno, "qemu: /dev/vhost-vsock");
	if (pipe2(out, O_CLOEXEC) < 0)
		return err_sys(err, errno, "qemu: pipe");
	_cleanup_(spawn_plan_free) struct spawn_plan plan;
	spawn_plan_init(&plan, "qemu");
	plan.name = spawn_plan_str(&plan, "qemu: starting `%s`", argv[0]);
	const int chan[3] = { socks[0], socks[1], vhost };
	child_plan(&plan, l, argv, cg, vm->dir, vm->uid, netns, kernel, devnull, out[1], chan, exe);
	_cleanup_(spawn_child_close) struct spawn_child c = { .pidfd = -1, .report = -1 };
	uint64_t ns = l->unconfined ? 0 : CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWUTS;
	r = spawn_start(&plan, ns, -1, &c, err);
	if (r < 0)
		return r;
	/* Not reaped before we say so: the pid cannot be reused, so the pidfd is not needed for
	 * safe kills; it lets waits poll. */
	vm->pid = c.pid;
	vm->pidfd = TAKE_FD(c.pidfd);
	close(TAKE_FD(out[1]));

	if ((r = console_start(out[0], vm->dirfd, &vm->con, err)) < 0)
		return r;
	out[0] = -1; /* the console's now */
	int wait_ms = time_left_ms(deadline);
	if ((r = spawn_wait(&plan, &c, wait_ms > 0 ? wait_ms : 1, err)) < 0) {
		/* A child stuck in its setup (or on its way to exec QEMU) is not waited for. */
		kill(vm->pid, SIGKILL);
		reap(vm, true);
		return r;
	}
	vm->start_time = proc_start_time(vm->pid);
	return 0;
}

/* Connects to QEMU's QMP socket (vm->qmp) by the deadline. */
static int open_qmp(struct qemu_vm *vm, uint64_t deadline, struct err *err)
{
	int qfd = -1;
	int r = connect_unix(vm, QEMU_QMP_SOCKET, deadline, &qfd, err);
	if (r < 0)
		return r;
	int left = time_left_ms(deadline);
	if ((r = qmp_open(qfd, left > 0 ? left : 1, &vm->qmp, err)) < 0)
		qemu_vm_explain(vm, err);
	return r;
}

int qemu_vm_start(const struct qemu_launch *l, char *dir, const struct cgroup *cg, int timeout_ms,
		  struct qemu_vm **ret, struct err *err)
{
	uint64_t deadline = time_deadline(timeout_ms);
	struct qemu_vm *vm = xcalloc(1, sizeof(*vm));
	vm->name = xstrdup(l->name);
	vm->dir = dir;
	vm->pidfd = -1;
	vm->agent_fd = -1;
	vm->dirfd = -1;
	vm->channel = l->m->channel;
	vm->vsock_cid = l->vsock_cid;
	int r;
	/* Whatever of it was done, qemu_vm_free undoes: the process, the run directory. */
	if ((r = start_process(vm, l, cg, deadline, err)) < 0 ||
	    (r = open_qmp(vm, deadline, err)) < 0) {
		qemu_vm_free(vm);
		return r;
	}
	*ret = vm;
	return 0;
}

/* --- QMP-driven steps ------------------------------------------------------------------ */

static int qmp_step(struct qemu_vm *vm, const char *cmd, json_t *args, uint64_t deadline,
		    json_t **ret, struct err *err)
{
	int left = time_left_ms(deadline);
	int r = qmp_execute(vm->qmp, cmd, args, left > 0 ? left : 1, ret, err);
	if (r < 0)
		qemu_vm_explain(vm, err);
	return r;
}

int qemu_vm_run_state(struct qemu_vm *vm, bool run, int timeout_ms, struct err *err)
{
	uint64_t deadline = time_mono_ms() + (uint64_t)timeout_ms;
	return qmp_step(vm, run ? "cont" : "stop", NULL, deadline, NULL, err);
}

/* Whether QEMU's agent chardev has a client: its filename loses the "disconnected:"
 * prefix. */
static int chardev_connected(struct qemu_vm *vm, uint64_t deadline, bool *ret, struct err *err)
{
	json_auto_t *list = NULL;
	int r = qmp_step(vm, "query-chardev", NULL, deadline, &list, err);
	if (r < 0)
		return r;
	*ret = false;
	size_t i;
	json_t *c;
	json_array_foreach (list, i, c) {
		const char *label = json_string_value(json_object_get(c, "label"));
		const char *file = json_string_value(json_object_get(c, "filename"));
		if (label && file && strcmp(label, "agent") == 0)
			*ret = strncmp(file, "disconnected:", 13) != 0;
	}
	return 0;
}

static int connect_vsock(struct qemu_vm *vm, uint64_t deadline, struct err *err)
{
	struct sockaddr_vm sa = {
		.svm_family = AF_VSOCK,
		.svm_cid = vm->vsock_cid,
		.svm_port = VM_AGENT_VSOCK_PORT,
	};
	for (;;) {
		int fd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return err_sys(err, errno, "qemu: vsock socket");
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			vm->agent_fd = fd;
			return 0;
		}
		int e = errno;
		close(fd);
		/* Until the agent listens: refused or reset by the guest. */
		if (e != ECONNREFUSED && e != ECONNRESET && e != ETIMEDOUT && e != EINTR &&
		    e != ENODEV && e != EHOSTUNREACH)
			return err_sys(err, e, "qemu: connecting to the agent over vsock");
		if (!vm_alive(vm)) {
			err_set(err, ECHILD, "the VM stopped before its agent listened");
			return qemu_vm_explain(vm, err);
		}
		if (time_mono_ms() >= deadline) {
			err_set(err, ETIMEDOUT, "the agent did not listen on vsock port %u in time",
				VM_AGENT_VSOCK_PORT);
			return qemu_vm_explain(vm, err);
		}
		sleep_ms(POLL_STEP_MS * 4);
	}
}

unsigned qemu_random_cid(void)
{
	uint32_t v = 0;
	random_bytes(&v, sizeof(v));
	/* 0-2 are reserved; the top bit keeps clear of VMADDR_CID_ANY (-1U). */
	return 3 + (v & 0x7ffffff0u);
}

int qemu_vm_connect_agent(struct qemu_vm *vm, int timeout_ms, struct err *err)
{
	uint64_t deadline = time_deadline(timeout_ms);
	if (vm->channel == QEMU_CHANNEL_VSOCK)
		return connect_vsock(vm, deadline, err);
	int fd = -1;
	int r = connect_unix(vm, QEMU_AGENT_SOCKET, deadline, &fd, err);
	if (r < 0)
		return r;
	vm->agent_fd = fd;
	/* QEMU accepts in its main loop. Until it has, the port's "host connected" state is
	 * false, and a guest restored meanwhile would see its host hang up. */
	for (;;) {
		bool ok;
		if ((r = chardev_connected(vm, deadline, &ok, err)) < 0)
			return r;
		if (ok)
			return 0;
		if (time_mono_ms() >= deadline) {
			err_set(err, ETIMEDOUT, "QEMU did not accept the agent connection in time");
			return qemu_vm_explain(vm, err);
		}
		sleep_ms(1);
	}
}

/* Waits for a migration (either direction) to end. */
static int migration_wait(struct qemu_vm *vm, const char *what, uint64_t deadline, struct err *err)
{
	for (;;) {
		json_auto_t *info = NULL;
		int r = qmp_step(vm, "query-migrate", NULL, deadline, &info, err);
		if (r < 0)
			return err_wrap(err, "%s", what);
		const char *status = json_string_value(json_object_get(info, "status"));
		if (status && strcmp(status, "completed") == 0)
			return 0;
		if (status && (strcmp(status, "failed") == 0 || strcmp(status, "cancelled") == 0)) {
			const char *desc = json_string_value(json_object_get(info, "error-desc"));
			vm->migration_failed = true;
			err_set(err, EIO, "%s failed: %s", what, desc ? desc : status);
			return qemu_vm_explain(vm, err);
		}
		if (time_mono_ms() >= deadline) {
			err_set(err, ETIMEDOUT, "%s did not finish in time (status %s)", what,
				status ? status : "unknown");
			return qemu_vm_explain(vm, err);
		}
		sleep_ms(POLL_STEP_MS);
	}
}

static int ignore_shared(struct qemu_vm *vm, uint64_t deadline, struct err *err)
{
	/* Guest RAM is in a file the snapshot and its clones share: it is not copied. */
	json_auto_t *args = json_pack("{s:[{s:s, s:b}]}", "capabilities", "capability",
				      "x-ignore-shared", "state", 1);
	return qmp_step(vm, "migrate-set-capabilities", args, deadline, NULL, err);
}

/* Starts migration command cmd ("migrate", "migrate-incoming") on state_fd. QEMU reads or
 * writes the stream through a copy of our descriptor: no path to race with, no shell. */
static int migrate_fd(struct qemu_vm *vm, const char *cmd, int state_fd, uint64_t deadline,
		      struct err *err)
{
	int left = time_left_ms(deadline);
	if (qmp_pass_fd(vm->qmp, state_fd, "state", left > 0 ? left : 1, err) < 0)
		return qemu_vm_explain(vm, err);
	json_auto_t *args = json_pack("{s:s}", "uri", "fd:state");
	return qmp_step(vm, cmd, args, deadline, NULL, err);
}

int qemu_vm_restore(struct qemu_vm *vm, int state_fd, int timeout_ms, struct err *err)
{
	int r = qemu_vm_load(vm, state_fd, timeout_ms, err);
	if (r < 0)
		return r;
	return qemu_vm_run_state(vm, true, timeout_ms, err);
}

int qemu_vm_load(struct qemu_vm *vm, int state_fd, int timeout_ms, struct err *err)
{
	uint64_t deadline = time_deadline(timeout_ms);
	int r;
	if ((r = ignore_shared(vm, deadline, err)) < 0)
		return r;
	if ((r = migrate_fd(vm, "migrate-incoming", state_fd, deadline, err)) < 0)
		return r;
	if ((r = migration_wait(vm, "restoring the snapshot", deadline, err)) < 0) {
		/* QEMU 7.2 exits when an incoming stream does not load, saying so. */
		_cleanup_free_ char *tail = console_tail(vm->con, CONSOLE_RING);
		if (strstr(tail, "load of migration failed"))
			vm->migration_failed = true;
		return r;
	}
	return 0;
}

/* After a save that failed or ran out of time: QEMU must not go on writing a stream no one
 * will read (nor stop the guest when it ends). Waits briefly for the cancel to settle. */
static void migration_cancel(struct qemu_vm *vm)
{
	uint64_t deadline = time_deadline(5000);
	struct err e;
	if (qmp_step(vm, "migrate_cancel", NULL, deadline, NULL, &e) < 0)
		return;
	for (;;) {
		json_auto_t *info = NULL;
		if (qmp_step(vm, "query-migrate", NULL, deadline, &info, &e) < 0)
			return;
		const char *status = json_string_value(json_object_get(info, "status"));
		if (!status || strcmp(status, "cancelled") == 0 || strcmp(status, "failed") == 0 ||
		    strcmp(status, "completed") == 0 || time_mono_ms() >= deadline)
			return;
		sleep_ms(POLL_STEP_MS);
	}
}

int qemu_vm_save(struct qemu_vm *vm, int state_fd, int timeout_ms, struct err *err)
{
	uint64_t deadline = time_deadline(timeout_ms);
	int r;
	if ((r = qmp_step(vm, "stop", NULL, deadline, NULL, err)) < 0)
		return r;
	if ((r = ignore_shared(vm, deadline, err)) < 0)
		return r;
	/* To a file as fast as it goes: QEMU's default rate suits a network. */
	json_auto_t *params = json_pack("{s:I}", "max-bandwidth", (json_int_t)1 << 40);
	if ((r = qmp_step(vm, "migrate-set-parameters", params, deadline, NULL, err)) < 0)
		return r;
	if ((r = migrate_fd(vm, "migrate", state_fd, deadline, err)) < 0 ||
	    (r = migration_wait(vm, "saving the snapshot", deadline, err)) < 0)
		migration_cancel(vm);
	return r;
}

/* --- the agent ------------------------------------------------------------------------- */

static bool vm_alive_cb(void *arg)
{
	return vm_alive(arg);
}

int qemu_vm_call(struct qemu_vm *vm, uint32_t ch, const char *request, int timeout_ms,
		 struct err *err)
{
	struct guest_call c = { .fd = vm->agent_fd,
				.channel = ch,
				.request = request,
				.timeout_ms = timeout_ms,
				.alive = vm_alive_cb,
				.arg = vm };
	int r = guest_call(&c, NULL, err);
	return r < 0 ? qemu_vm_explain(vm, err) : 0;
}

/* --- teardown -------------------------------------------------------------------------- */

void qemu_vm_stop(struct qemu_vm *vm)
{
	if (!vm)
		return;
	if (vm->pid > 0 && !vm->reaped) {
		/* Still our unreaped child: the pid names it, whatever the pidfd says. */
		kill(vm->pid, SIGKILL);
		reap(vm, true);
	}
	qmp_close(TAKE_PTR(vm->qmp));
	console_stop(vm->con);
	if (vm->pidfd >= 0)
		close(TAKE_FD(vm->pidfd));
}

void qemu_vm_free(struct qemu_vm *vm)
{
	if (!vm)
		return;
	qemu_vm_stop(vm);
	/* Reaped by the stop (or never started): nothing runs as the uid any more. */
	if (vm->uid && (vm->reaped || vm->pid <= 0))
		jail_uid_release(vm->uid);
	console_free(vm->con);
	if (vm->agent_fd >= 0)
		close(vm->agent_fd);
	if (vm->dirfd >= 0)
		close(vm->dirfd);
	if (vm->dir)
		fs_rm_rf(vm->dir, NULL);
	free(vm->dir);
	free(vm->name);
	free(vm);
}
