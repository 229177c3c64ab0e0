/* jail: the container-grade driver. Each sandbox is a process tree in new pid, mount, uts, ipc,
 * net and cgroup namespaces, with the template's rootfs directory as a read-only root, tmpfs
 * /workspace and /tmp, a minimal /dev, masked /proc, reduced capabilities, no_new_privs, a
 * seccomp filter, and a cgroup of its own. The agent is its PID 1 and talks over a socketpair.
 *
 * The child is set up by a plan of raw system calls prepared in the parent (see jail.h for
 * why). Nothing is created on the host's filesystem except the cgroup directories: the
 * mounts live and die with the sandbox's mount namespace. */
#include "driver/driver.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/capability.h>
#include <unistd.h>

#include "driver/cgroup.h"
#include "driver/jail/jail.h"
#include "driver/proc.h"
#include "util/cleanup.h"
#include "util/log.h"

#ifndef CLONE_PIDFD
#define CLONE_PIDFD 0x00001000
#endif
#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif
#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif
#ifndef P_PIDFD
#define P_PIDFD 3
#endif

#define CGROUP_ROOT "/sys/fs/cgroup"
/* How long the child may take from clone to exec before create() gives up on it. */
#define SETUP_TIMEOUT_MS 10000
/* How long cleanup_stale waits for a killed leftover to exit. */
#define STALE_WAIT_MS 2000
/* When neither the sandbox's limits nor the configuration give one. */
#define DEFAULT_WORKSPACE_BYTES (512ULL << 20)
#define DEFAULT_NOFILE          1024

/* Namespaces every jail gets at clone time; the cgroup namespace comes after joining the
 * sandbox's cgroup, so that the cgroup becomes the root of the sandbox's view. */
#define JAIL_NS (CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC)

/* The directories the template's rootfs must have for the sandbox's mounts. */
static const char *const mountpoints[] = { "proc", "dev", "sys", "tmp", "run", "workspace" };

static char *const agent_env[] = {
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/root",
	NULL,
};
static char *const agent_argv[] = {
	"sandbox-agent", "--fd", "3", "--workspace", "/workspace", NULL,
};

/* The per-driver state of a sandbox (sandbox->priv). */
struct jail {
	int pidfd; /* -1 on kernels without pidfds */
	struct cgroup *cg;
};

/* What every sandbox shares, computed once: the cgroup layout and the compiled filter. */
static struct {
	pthread_mutex_t lock;
	bool ready;
	struct cgroup_root cg;
	struct sock_fprog seccomp;
	unsigned cap_last;
} host = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* The clone3() arguments up to Linux 5.7 (CLONE_ARGS_SIZE_VER2), declared here because libc
 * headers and <linux/sched.h> disagree on who defines them. */
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

static unsigned read_cap_last(void)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/sys/kernel/cap_last_cap", "re");
	unsigned v;
	if (f && fscanf(f, "%u", &v) == 1 && v < 64)
		return v;
	return CAP_LAST_CAP;
}

static int host_get(struct err *err)
{
	int r = 0;
	pthread_mutex_lock(&host.lock);
	if (host.ready)
		goto out;
	struct cgroup_root cg;
	if ((r = cgroup_root_detect(CGROUP_ROOT, &cg, err)) < 0)
		goto out;
	if ((r = jail_seccomp_build(&host.seccomp, err)) < 0) {
		cgroup_root_free(&cg);
		goto out;
	}
	host.cg = cg;
	host.cap_last = read_cap_last();
	host.ready = true;
out:
	pthread_mutex_unlock(&host.lock);
	return r;
}

static int check_agent(const struct config *cfg, struct err *err)
{
	const char *bin = cfg->agent_bin;
	if (!bin || !*bin)
		return err_set(err, EINVAL, "jail: no agent binary: set SANDBOX_AGENT_BIN");
	struct stat st;
	if (stat(bin, &st) < 0)
		return err_sys(err, errno, "jail: agent binary `%s`", bin);
	if (!S_ISREG(st.st_mode))
		return err_set(err, EINVAL, "jail: agent binary `%s` is not a regular file", bin);
	if (access(bin, X_OK) < 0)
		return err_sys(err, errno, "jail: agent binary `%s` is not executable", bin);
	return 0;
}

/* Makes the directories the sandbox mounts onto when the template lacks them, and refuses
 * anything else in their place: a symlink there would aim a mount elsewhere. */
static int check_rootfs(const char *rootfs, struct err *err)
{
	_cleanup_close_ int dfd = open(rootfs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return err_sys(err, errno, "jail: template rootfs `%s`", rootfs);
	struct stat st, root;
	if (fstat(dfd, &st) < 0 || stat("/", &root) < 0)
		return err_sys(err, errno, "jail: stat `%s`", rootfs);
	if (st.st_dev == root.st_dev && st.st_ino == root.st_ino)
		return err_set(err, EINVAL, "jail: template rootfs `%s` is the host's root",
			       rootfs);

	for (size_t i = 0; i < ARRAY_SIZE(mountpoints); i++) {
		const char *m = mountpoints[i];
		if (fstatat(dfd, m, &st, AT_SYMLINK_NOFOLLOW) == 0) {
			if (S_ISDIR(st.st_mode))
				continue;
			return err_set(err, ENOTDIR,
				       "jail: template rootfs `%s`: /%s must be a directory",
				       rootfs, m);
		}
		if (errno != ENOENT)
			return err_sys(err, errno, "jail: template rootfs `%s`: /%s", rootfs, m);
		if (mkdirat(dfd, m, 0755) < 0 && errno != EEXIST)
			return err_sys(
				err, errno,
				"jail: template rootfs `%s` has no /%s and it cannot be made",
				rootfs, m);
	}
	return 0;
}

/* Clones the child that runs `plan`, directly into the cgroup `cgroup_fd` refers to when it is
 * not -1 and the kernel can (*ret_placed tells). Signals stay blocked across the clone so that
 * none of the daemon's handlers can run in the child before it resets them. */
static int spawn(const struct jail_plan *plan, uint64_t ns, int cgroup_fd, pid_t *ret_pid,
		 int *ret_pidfd, bool *ret_placed, struct err *err)
{
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);

	int pidfd = -1;
	struct clone_args_v2 args = {
		.flags = ns | CLONE_PIDFD | (cgroup_fd >= 0 ? CLONE_INTO_CGROUP : 0),
		.pidfd = (uint64_t)(uintptr_t)&pidfd,
		.exit_signal = SIGCHLD,
		.cgroup = cgroup_fd >= 0 ? (uint64_t)cgroup_fd : 0,
	};
	bool placed = cgroup_fd >= 0;
	long pid = syscall(SYS_clone3, &args, sizeof(args));
	if (pid < 0 && placed && (errno == E2BIG || errno == EINVAL)) {
		/* Before Linux 5.7: no CLONE_INTO_CGROUP; the parent moves the child instead. */
		placed = false;
		args.flags &= ~(uint64_t)CLONE_INTO_CGROUP;
		args.cgroup = 0;
		pid = syscall(SYS_clone3, &args, sizeof(args));
	}
	if (pid < 0 && errno == ENOSYS) {
		/* Before Linux 5.3, or under a seccomp profile that hides clone3: a pidfd after
		 * the fact (where the kernel has them), as this pid cannot be reused before it
		 * is reaped. */
		placed = false;
		pid = syscall(SYS_clone, (unsigned long)ns | SIGCHLD, NULL, NULL, NULL, NULL);
		if (pid > 0)
			pidfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
	}
	if (pid == 0)
		jail_plan_run(plan);
	int e = errno;
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (pid < 0)
		return err_sys(err, e, "jail: clone");
	*ret_pid = (pid_t)pid;
	*ret_pidfd = pidfd;
	*ret_placed = placed;
	return 0;
}

/* Without a pidfd (kernels before 5.3) the pid is safe to use only because nobody but this
 * driver reaps the child: it stays ours, if only as a zombie, until reap_child. */
static void kill_child(pid_t pid, int pidfd)
{
	if (pidfd >= 0)
		syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, NULL, 0);
	else
		kill(pid, SIGKILL);
}

/* Waits for the child to exit; returns its wait status, or -1 when someone else reaped it. */
static int reap_child(pid_t pid, int pidfd)
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

/* Reads the child's report: 1 and *rep when it wrote one, 0 at end of file (it reached exec,
 * or died), negative errno on error. */
static int read_report(int fd, struct jail_report *rep)
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

/* Waits for the child's verdict: end of file on the report pipe means it reached exec (or, in
 * a probe, its exit). */
static int wait_report(const struct jail_plan *plan, int fd, int pidfd, struct err *err)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	int r;
	do
		r = poll(&pfd, 1, SETUP_TIMEOUT_MS);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return err_sys(err, errno, "jail: poll");
	if (r == 0)
		return err_set(err, ETIMEDOUT, "jail: setup took longer than %d ms",
			       SETUP_TIMEOUT_MS);

	struct jail_report rep;
	r = read_report(fd, &rep);
	if (r > 0)
		return jail_plan_error(plan, &rep, err);
	if (r < 0)
		return err_sys(err, -r, "jail: read the setup report");

	/* Killed during setup (e.g. by its memory limit) also closes the pipe. */
	siginfo_t si;
	memset(&si, 0, sizeof(si));
	if (pidfd >= 0 &&
	    waitid((idtype_t)P_PIDFD, (id_t)pidfd, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
	    si.si_pid != 0 && si.si_code != CLD_EXITED)
		return err_set(err, ECHILD,
			       "jail: the sandbox's first process was killed by signal %d during "
			       "setup",
			       si.si_status);
	return 0;
}

/* Places the child in its cgroup unless clone3 already did, then lets it go on. */
static int place_child(const struct jail_plan *plan, const struct cgroup *cg, pid_t pid, int pidfd,
		       bool placed, int agent_fd, int report_fd, struct err *err)
{
	int r = placed ? 0 : cgroup_enter(cg, pid, err);
	if (r == 0) {
		/* The go-ahead travels on the agent's socket, read by the child before exec:
		 * the agent never sees it. */
		static const char go = 1;
		if (send(agent_fd, &go, 1, MSG_NOSIGNAL) == 1)
			return 0;
		r = err_sys(err, errno, "jail: start the sandbox");
	}
	/* The child may have failed on its own first: its reason is the one to give. */
	kill_child(pid, pidfd);
	struct jail_report rep;
	if (read_report(report_fd, &rep) > 0)
		return jail_plan_error(plan, &rep, err);
	return r;
}

/* A throwaway child that exercises every kernel feature the jail relies on: the namespaces,
 * a private mount tree, pivot_root, a fresh procfs and the seccomp filter. */
static int trial_run(struct err *err)
{
	struct jail_plan plan;
	jail_plan_init(&plan);
	int rep[2] = { -1, -1 };
	int r;

	if (pipe2(rep, O_CLOEXEC) < 0)
		return err_sys(err, errno, "jail: pipe");
	plan.fd_report = rep[1];
	plan.seccomp = &host.seccomp;

	jail_plan_add(&plan, JOP_SIGNALS, "reset signals");
	struct jail_op *op = jail_plan_add(&plan, JOP_UNSHARE, "unshare the cgroup namespace");
	op->arg = CLONE_NEWCGROUP;
	op = jail_plan_add(&plan, JOP_MOUNT, "make / private");
	op->dst = "/";
	op->flags = MS_REC | MS_PRIVATE;
	op = jail_plan_add(&plan, JOP_MOUNT, "mount tmpfs on /tmp");
	op->src = "tmpfs";
	op->dst = "/tmp";
	op->fstype = "tmpfs";
	op->data = "size=65536";
	op = jail_plan_add(&plan, JOP_CHDIR, "chdir /tmp");
	op->dst = "/tmp";
	jail_plan_add(&plan, JOP_PIVOT_ROOT, "pivot_root");
	op = jail_plan_add(&plan, JOP_UMOUNT, "detach the old root");
	op->dst = ".";
	op->flags = MNT_DETACH;
	op = jail_plan_add(&plan, JOP_MKDIR, "mkdir /proc");
	op->dst = "/proc";
	op->arg = 0755;
	op = jail_plan_add(&plan, JOP_MOUNT, "mount proc on /proc");
	op->src = "proc";
	op->dst = "/proc";
	op->fstype = "proc";
	jail_plan_add(&plan, JOP_NO_NEW_PRIVS, "prctl PR_SET_NO_NEW_PRIVS");
	jail_plan_add(&plan, JOP_SECCOMP, "install the seccomp filter");
	jail_plan_add(&plan, JOP_EXIT, "exit");

	pid_t pid;
	int pidfd;
	bool placed;
	r = spawn(&plan, JAIL_NS | CLONE_NEWNET, -1, &pid, &pidfd, &placed, err);
	close(rep[1]);
	if (r == 0) {
		r = wait_report(&plan, rep[0], pidfd, err);
		if (r < 0)
			kill_child(pid, pidfd);
		int status = reap_child(pid, pidfd);
		if (r == 0 && status != 0)
			r = err_set(err, ECHILD, "jail: the trial sandbox exited with status %#x",
				    status);
		if (pidfd >= 0)
			close(pidfd);
	}
	close(rep[0]);
	jail_plan_free(&plan);
	if (r < 0 && err) {
		/* "jail: pivot_root: ..." becomes "jail: trial sandbox: pivot_root: ...". */
		char why[ERR_MSG_MAX];
		bool ours = strncmp(err->msg, "jail: ", 6) == 0;
		snprintf(why, sizeof(why), "%s", err->msg + (ours ? 6 : 0));
		return err_set(err, err->errnum, "jail: trial sandbox: %s", why);
	}
	return r;
}

static int jail_probe(const struct config *cfg, struct err *err)
{
	int r;
	if (geteuid() != 0)
		return err_set(err, EPERM,
			       "jail: sandboxd must run as root to create namespaces and cgroups");
	if ((r = check_agent(cfg, err)) < 0)
		return r;
	if ((r = host_get(err)) < 0)
		return r;
	if ((r = cgroup_check(&host.cg, err)) < 0)
		return r;
	return trial_run(err);
}

static int jail_init(const struct config *cfg, struct err *err)
{
	int r = host_get(err);
	if (r < 0)
		return r;
	return cgroup_init(&host.cg, err);
}

static json_t *make_record(pid_t pid, const struct cgroup *cg)
{
	json_t *dirs = json_array();
	for (unsigned i = 0; i < cg->n; i++)
		json_array_append_new(dirs, json_string(cg->dir[i]));
	json_t *record = json_pack("{s:o}", "cgroups", dirs);
	proc_record_add(record, pid);
	return record;
}

static int jail_create(const struct config *cfg, const struct sandbox_spec *spec,
		       struct sandbox **ret, struct err *err)
{
	const struct template *t = spec->tmpl;
	_cleanup_close_ int exe = -1, netns = -1, cgroup_fd = -1;
	int sv[2] = { -1, -1 }, rep[2] = { -1, -1 };
	struct jail_plan plan;
	struct cgroup *cg = NULL;
	pid_t pid = 0;
	int pidfd = -1;
	bool placed = false;
	int r;

	jail_plan_init(&plan);
	if (!cgroup_id_valid(spec->id))
		return err_set(err, EINVAL, "jail: invalid sandbox id `%s`",
			       spec->id ? spec->id : "");
	if (!t || !t->rootfs_dir)
		return err_set(err, ENOENT,
			       "jail: template `%s` has no rootfs directory: build it for the jail "
			       "driver",
			       t ? t->name : "?");
	if ((r = host_get(err)) < 0)
		return r;
	if ((r = check_rootfs(t->rootfs_dir, err)) < 0)
		return r;
	/* Opened here, executed after pivot_root: the binary need not exist in the rootfs. */
	exe = open(cfg->agent_bin ? cfg->agent_bin : "", O_PATH | O_CLOEXEC);
	if (exe < 0)
		return err_sys(err, errno, "jail: agent binary `%s`",
			       cfg->agent_bin ? cfg->agent_bin : "");
	if (spec->netns_path) {
		netns = open(spec->netns_path, O_RDONLY | O_CLOEXEC);
		if (netns < 0)
			return err_sys(err, errno, "jail: network namespace `%s`",
				       spec->netns_path);
	}

	struct cgroup_limits limits = {
		.memory_bytes = spec->limits.memory_bytes,
		.cpu_quota_us = spec->limits.cpu_quota_us,
		.cpu_period_us = spec->limits.cpu_period_us,
		.pids_max = spec->limits.pids_max,
	};
	if ((r = cgroup_create(&host.cg, spec->id, &limits, &cg, err)) < 0)
		return err_wrap(err, "jail");
	/* Without it (an old kernel), the child is moved after the clone instead. */
	if (host.cg.version == CGROUP_V2)
		cgroup_fd = open(cg->dir[0], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		r = err_sys(err, errno, "jail: socketpair");
		goto err_cgroup;
	}
	if (pipe2(rep, O_CLOEXEC) < 0) {
		r = err_sys(err, errno, "jail: pipe");
		goto err_sockets;
	}

	plan.fd_agent = sv[1];
	plan.fd_report = rep[1];
	plan.fd_exe = exe;
	plan.fd_netns = netns;
	if (netns >= 0) {
		/* The resolver of the sandbox's network, when the network module made one, on the
		 * template's /etc/resolv.conf when that is a plain file to mount on (the builder
		 * makes one; without it, names do not resolve in this sandbox). */
		_cleanup_free_ char *target = xasprintf("%s/etc/resolv.conf", t->rootfs_dir);
		struct stat st, src;
		if (spec->resolv_conf && stat(spec->resolv_conf, &src) == 0 &&
		    S_ISREG(src.st_mode) && lstat(target, &st) == 0 && S_ISREG(st.st_mode))
			plan.resolv_conf = jail_plan_str(&plan, "%s", spec->resolv_conf);
	}
	plan.seccomp = &host.seccomp;
	plan.caps_keep = jail_caps_keep();
	plan.cap_last = host.cap_last;
	plan.argv = agent_argv;
	plan.envp = agent_env;
	jail_plan_add(&plan, JOP_SIGNALS, "reset signals");
	if (netns >= 0) {
		struct jail_op *op = jail_plan_add(
			&plan, JOP_SETNS,
			jail_plan_str(&plan, "join network namespace %s", spec->netns_path));
		op->fd = JAIL_FD_NETNS;
		op->arg = CLONE_NEWNET;
	} else {
		jail_plan_add(&plan, JOP_LO_UP, "bring up lo");
	}
	/* A tmpfs of size 0 would be unbounded: fall back to the server's defaults. */
	uint64_t workspace = spec->limits.workspace_bytes ? spec->limits.workspace_bytes
			     : cfg->disk_limit            ? cfg->disk_limit
							  : DEFAULT_WORKSPACE_BYTES;
	uint32_t nofile = spec->limits.nofile ? spec->limits.nofile
			  : cfg->nofile       ? cfg->nofile
					      : DEFAULT_NOFILE;
	jail_plan_sandbox(&plan, t->rootfs_dir, workspace, nofile);

	r = spawn(&plan, JAIL_NS | (netns >= 0 ? 0 : CLONE_NEWNET), cgroup_fd, &pid, &pidfd,
		  &placed, err);
	/* The child's ends: held by the child alone from now on. */
	close(TAKE_FD(sv[1]));
	close(TAKE_FD(rep[1]));
	if (r < 0)
		goto err_pipe;
	if ((r = place_child(&plan, cg, pid, pidfd, placed, sv[0], rep[0], err)) < 0)
		goto err_child;
	if ((r = wait_report(&plan, rep[0], pidfd, err)) < 0)
		goto err_child;
	close(TAKE_FD(rep[0]));

	struct jail *j = xcalloc(1, sizeof(*j));
	j->pidfd = pidfd;
	j->cg = cg;
	struct sandbox *sb = xcalloc(1, sizeof(*sb));
	sb->driver = &driver_jail;
	sb->id = xstrdup(spec->id);
	sb->agent_fd = sv[0];
	sb->pid = pid;
	sb->record = make_record(pid, cg);
	sb->priv = j;
	jail_plan_free(&plan);
	*ret = sb;
	return 0;

err_child:
	kill_child(pid, pidfd);
	reap_child(pid, pidfd);
	if (pidfd >= 0)
		close(pidfd);
err_pipe:
	if (rep[0] >= 0)
		close(rep[0]);
	if (rep[1] >= 0)
		close(rep[1]);
err_sockets:
	if (sv[0] >= 0)
		close(sv[0]);
	if (sv[1] >= 0)
		close(sv[1]);
err_cgroup:
	cgroup_remove(cg, NULL);
	cgroup_free(cg);
	jail_plan_free(&plan);
	return r;
}

static void jail_destroy(struct sandbox *sb)
{
	if (!sb)
		return;
	struct jail *j = sb->priv;
	if (sb->agent_fd >= 0)
		close(sb->agent_fd);
	/* The pid namespace dies with its PID 1: the kernel kills and reaps the rest before the
	 * wait returns, which leaves the cgroup empty. */
	if (sb->pid > 0)
		kill_child(sb->pid, j ? j->pidfd : -1);
	if (sb->pid > 0)
		reap_child(sb->pid, j ? j->pidfd : -1);
	if (j) {
		struct err e;
		if (j->cg && cgroup_remove(j->cg, &e) < 0)
			log_warn("jail", "sandbox %s: %s", sb->id, e.msg);
		cgroup_free(j->cg);
		if (j->pidfd >= 0)
			close(j->pidfd);
		free(j);
	}
	json_decref(sb->record);
	free(sb->id);
	free(sb);
}

/* Kills a previous run's jail init if, and only if, its pid still names the same process:
 * same boot, same start time, checked through a pidfd so that the pid cannot change hands
 * between the check and the kill. */
static void kill_stale(const char *id, json_t *record)
{
	if (proc_kill_recorded(record, NULL, NULL, STALE_WAIT_MS))
		log_info("jail", "sandbox %s: killed a leftover process", id);
}

static void jail_cleanup_stale(const struct config *cfg, const char *id, json_t *record)
{
	if (!cgroup_id_valid(id)) {
		log_warn("jail", "not cleaning up invalid sandbox id `%s`", id ? id : "");
		return;
	}
	if (record)
		kill_stale(id, record);

	struct err e;
	if (host_get(&e) < 0) {
		log_warn("jail", "sandbox %s: %s", id, e.msg);
		return;
	}
	struct cgroup *cg = NULL;
	if (cgroup_open(&host.cg, id, &cg, &e) < 0 || cgroup_remove(cg, &e) < 0)
		log_warn("jail", "sandbox %s: %s", id, e.msg);
	cgroup_free(cg);
}

static uint64_t jail_oom_kills(struct sandbox *sb)
{
	struct jail *j = sb ? sb->priv : NULL;
	return j ? cgroup_oom_kills(j->cg) : 0;
}

const struct driver driver_jail = {
	.name = "jail",
	.isolation = "container",
	.snapshots = false,
	.probe = jail_probe,
	.init = jail_init,
	.prepare = NULL,
	.create = jail_create,
	.destroy = jail_destroy,
	.cleanup_stale = jail_cleanup_stale,
	.oom_kills = jail_oom_kills,
};
