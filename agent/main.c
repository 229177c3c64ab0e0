/* sandbox-agent: the guest side of the sandbox. Serves the guest protocol (src/guest/proto.h)
 * on an inherited fd (jail driver, tests), a vsock port or a virtio-serial port, and doubles
 * as the VM's init when started as PID 1 without arguments. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "init.h"
#include "util/cleanup.h"

#ifndef AF_VSOCK
#define AF_VSOCK 40
#endif
#define VMADDR_CID_ANY_ ((unsigned)-1)

/* <linux/vm_sockets.h> is not part of every libc; the layout is the kernel's. */
struct agent_sockaddr_vm {
	sa_family_t svm_family;
	unsigned short svm_reserved1;
	unsigned int svm_port;
	unsigned int svm_cid;
	unsigned char svm_zero[4];
};

static struct agent agent;

/* Whether the agent is PID 1 (of the jail's pid namespace, or of a VM). */
static bool is_init;

static void on_signal(int sig, siginfo_t *si, void *uc)
{
	(void)uc;
	/* As PID 1, a stop comes from outside the sandbox: from the host, whose processes have
	 * no pid in the sandbox's namespace (si_pid 0), or from the kernel. A process of the
	 * sandbox (a command run as root inside, which may signal PID 1 with a handler) is not
	 * obeyed: only its own session would end. */
	if (is_init && (sig == SIGTERM || sig == SIGINT) && si && si->si_pid != 0)
		return;
	int saved = errno;
	unsigned char b = (unsigned char)sig;
	ssize_t k = write(agent.sigpipe[1], &b, 1);
	(void)k;
	errno = saved;
}

static int setup_signals(struct agent *a)
{
	if (pipe2(a->sigpipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return -errno;
	/* A real handler, not signalfd: as PID 1 of a pid namespace, signals with the default
	 * disposition are dropped before they could be read. */
	is_init = getpid() == 1;
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_signal;
	sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_NOCLDSTOP;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGCHLD, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	signal(SIGHUP, SIG_IGN);
	return 0;
}

/* Commands get fds 0-2 from their pipes; make sure no pipe of ours lands there. */
static void ensure_stdio(void)
{
	for (int i = 0; i < 3; i++) {
		if (fcntl(i, F_GETFD) >= 0)
			continue;
		int fd = open("/dev/null", O_RDWR);
		if (fd < 0)
			return;
		if (fd != i) {
			dup2(fd, i);
			close(fd);
		}
	}
}

static void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
	nanosleep(&ts, NULL);
}

/* Waits until fd reports one of `events` without POLLHUP (or, with hup_ok, any event),
 * handling signals meanwhile. Returns false when asked to stop. */
static bool wait_fd(struct agent *a, int fd, short events, bool hup_ok)
{
	while (!a->stop && !a->poweroff) {
		struct pollfd p[2] = { { .fd = a->sigpipe[0], .events = POLLIN },
				       { .fd = fd, .events = events } };
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			return false;
		if (p[0].revents)
			agent_handle_signals(a);
		if (!p[1].revents)
			continue;
		if (hup_ok || !(p[1].revents & (POLLHUP | POLLERR)))
			return true;
		/* A virtio-serial port reports HUP for as long as the host side is closed. */
		sleep_ms(20);
	}
	return false;
}

static void finish(struct agent *a) __attribute__((noreturn));

static void finish(struct agent *a)
{
	if (a->init)
		init_poweroff();
	agent_kill_children(a);
	exit(0);
}

static int serve_fd(struct agent *a, int fd)
{
	if (fcntl(fd, F_SETFD, FD_CLOEXEC) < 0) {
		agent_log("--fd %d: %s", fd, strerror(errno));
		exit(1);
	}
	int r = conn_serve(a, fd);
	if (r < 0)
		agent_log("connection failed: %s", strerror(-r));
	/* The host is gone: nothing may outlive it. */
	finish(a);
}

static int serve_vsock(struct agent *a, unsigned port)
{
	int lfd = socket(AF_VSOCK, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (lfd < 0) {
		agent_log("vsock socket: %s", strerror(errno));
		return -errno;
	}
	struct agent_sockaddr_vm addr = {
		.svm_family = AF_VSOCK,
		.svm_port = port,
		.svm_cid = VMADDR_CID_ANY_,
	};
	if (bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) < 0 || listen(lfd, 4) < 0) {
		agent_log("vsock port %u: %s", port, strerror(errno));
		close(lfd);
		return -errno;
	}
	while (wait_fd(a, lfd, POLLIN, true)) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED)
				sleep_ms(100);
			continue;
		}
		int r = conn_serve(a, fd);
		close(fd);
		if (r < 0)
			agent_log("connection failed: %s", strerror(-r));
	}
	close(lfd);
	finish(a);
}

/* Finds /dev/vportNpM whose sysfs name is `name`, creating the node if /dev lacks it. */
static int open_serial(const char *name)
{
	_cleanup_closedir_ DIR *d = opendir("/sys/class/virtio-ports");
	if (!d)
		return -ENOENT;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		char path[300], buf[256];
		snprintf(path, sizeof(path), "/sys/class/virtio-ports/%s/name", de->d_name);
		_cleanup_close_ int nfd = open(path, O_RDONLY | O_CLOEXEC);
		if (nfd < 0)
			continue;
		ssize_t n = read(nfd, buf, sizeof(buf) - 1);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		buf[strcspn(buf, "\n")] = '\0';
		if (strcmp(buf, name) != 0)
			continue;
		char dev[300];
		snprintf(dev, sizeof(dev), "/dev/%s", de->d_name);
		int fd = open(dev, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
		if (fd >= 0 || errno != ENOENT)
			return fd >= 0 ? fd : -errno;
		/* No devtmpfs: make the node from its sysfs "MAJ:MIN". */
		snprintf(path, sizeof(path), "/sys/class/virtio-ports/%s/dev", de->d_name);
		_cleanup_close_ int dfd = open(path, O_RDONLY | O_CLOEXEC);
		unsigned maj, min;
		if (dfd < 0 || (n = read(dfd, buf, sizeof(buf) - 1)) <= 0)
			return -ENOENT;
		buf[n] = '\0';
		if (sscanf(buf, "%u:%u", &maj, &min) != 2)
			return -ENOENT;
		if (mknod(dev, S_IFCHR | 0600, makedev(maj, min)) < 0 && errno != EEXIST)
			return -errno;
		fd = open(dev, O_RDWR | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
		return fd >= 0 ? fd : -errno;
	}
	return -ENOENT;
}

static int serve_serial(struct agent *a, const char *name)
{
	int fd;
	int64_t next_log = 0;
	/* The port may show up a little after boot; as init there is nothing better to do
	 * than to keep looking. */
	while ((fd = open_serial(name)) < 0) {
		if (agent_now_ns() >= next_log) {
			agent_log("virtio-serial port `%s`: %s; waiting", name, strerror(-fd));
			next_log = agent_now_ns() + 10 * 1000000000LL;
		}
		agent_handle_signals(a);
		if (a->stop)
			finish(a);
		sleep_ms(50);
	}
	/* The port outlives host connections (and snapshot restores): on HUP, wait for the host
	 * to open its side again and start a fresh protocol session. */
	while (wait_fd(a, fd, POLLIN, false)) {
		int r = conn_serve(a, fd);
		if (r < 0) {
			agent_log("connection failed: %s", strerror(-r));
			sleep_ms(20);
		}
	}
	close(fd);
	finish(a);
}

static void usage(FILE *f)
{
	fprintf(f,
		"usage: %s (--fd N | --vsock PORT | --serial NAME) [--workspace DIR]\n"
		"       [--env-file FILE] (default " AGENT_ENV_FILE ": KEY=value lines)\n"
		"       [--user UID:GID] (commands and file operations run as that user)\n"
		"       as PID 1 without arguments: the VM's init (settings from the kernel\n"
		"       command line: sandbox.channel=serial:NAME|vsock:PORT,\n"
		"       sandbox.workspace_mib=N, sandbox.hostname=NAME)\n",
		AGENT_NAME);
}

/* Reads KEY=value lines; a missing file is an empty environment, bad lines are skipped
 * (the file comes from the template, which the host built). */
static void image_env_load(struct image_env *env, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return;
	char *buf = xmalloc(AGENT_ENV_FILE_MAX + 1);
	size_t len = 0;
	ssize_t n;
	while (len < AGENT_ENV_FILE_MAX && (n = read(fd, buf + len, AGENT_ENV_FILE_MAX - len)) > 0)
		len += (size_t)n;
	close(fd);
	buf[len] = '\0';
	char *save = NULL;
	for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '=');
		if (!eq || eq == line)
			continue;
		*eq = '\0';
		env->keys = xrealloc(env->keys, (env->n + 1) * sizeof(char *));
		env->vals = xrealloc(env->vals, (env->n + 1) * sizeof(char *));
		env->keys[env->n] = xstrdup(line);
		env->vals[env->n] = xstrdup(eq + 1);
		env->n++;
	}
	free(buf);
}

static bool parse_uint(const char *s, unsigned long max, unsigned long *ret);

/* "UID:GID", neither of them root: the point of --user is to run commands as someone else. */
static bool parse_user(const char *s, struct agent *a)
{
	char buf[32];
	const char *colon = strchr(s, ':');
	unsigned long uid, gid;
	if (!colon || (size_t)(colon - s) >= sizeof(buf))
		return false;
	memcpy(buf, s, (size_t)(colon - s));
	buf[colon - s] = '\0';
	if (!parse_uint(buf, UINT32_MAX - 1, &uid) ||
	    !parse_uint(colon + 1, UINT32_MAX - 1, &gid) || uid == 0 || gid == 0)
		return false;
	a->as_user = true;
	a->uid = (unsigned)uid;
	a->gid = (unsigned)gid;
	return true;
}

/* The agent out of reach of its commands. Non-dumpable: its /proc/<pid> files (mem, maps,
 * environ, fd/) become root's, and ptrace or /proc/<pid>/mem access needs CAP_SYS_PTRACE,
 * which nothing in a sandbox has. With --user, commands also run as another uid without
 * capabilities, so they cannot signal, trace or read the agent either way; and the agent's
 * own file operations take the command user's file-system identity (setfsuid), so that
 * files written through the API belong to the user who runs the commands, and the API sees
 * no file a command could not. */
static void harden(const struct agent *a)
{
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	if (!a->as_user)
		return;
	setfsgid(a->gid);
	setfsuid(a->uid);
}

static bool parse_uint(const char *s, unsigned long max, unsigned long *ret)
{
	char *end;
	errno = 0;
	unsigned long v = strtoul(s, &end, 10);
	if (!*s || *end || errno || v > max)
		return false;
	*ret = v;
	return true;
}

int main(int argc, char **argv)
{
	struct agent *a = &agent;
	const char *workspace = "/workspace";
	const char *serial = NULL;
	const char *env_file = AGENT_ENV_FILE;
	long fd = -1, vsock = -1;
	struct init_config cfg;

	/* Executed from a descriptor (the jail driver uses execveat), the process would be named
	 * after the descriptor's number in ps; give it its own name. */
	prctl(PR_SET_NAME, AGENT_NAME, 0, 0, 0);
	a->pid1 = getpid() == 1;
	a->init = a->pid1 && argc == 1;
	for (int i = 1; i < argc; i++) {
		const char *arg = argv[i];
		const char *val = i + 1 < argc ? argv[i + 1] : NULL;
		unsigned long v;
		if (strcmp(arg, "--help") == 0) {
			usage(stdout);
			return 0;
		}
		if (strcmp(arg, "--version") == 0) {
			printf("%s protocol %d\n", AGENT_NAME, GUEST_PROTO_VERSION);
			return 0;
		}
		if (!val) {
			usage(stderr);
			return 2;
		}
		i++;
		if (strcmp(arg, "--fd") == 0 && parse_uint(val, 1u << 30, &v)) {
			fd = (long)v;
		} else if (strcmp(arg, "--vsock") == 0 && parse_uint(val, UINT32_MAX - 1, &v)) {
			vsock = (long)v;
		} else if (strcmp(arg, "--serial") == 0 && *val) {
			serial = val;
		} else if (strcmp(arg, "--workspace") == 0 && *val) {
			workspace = val;
		} else if (strcmp(arg, "--env-file") == 0 && *val) {
			env_file = val;
		} else if (strcmp(arg, "--user") == 0 && parse_user(val, a)) {
			/* parsed */
		} else {
			fprintf(stderr, "%s: bad argument `%s %s`\n", AGENT_NAME, arg, val);
			usage(stderr);
			return 2;
		}
	}
	if ((fd >= 0) + (vsock >= 0) + (serial != NULL) > 1) {
		fprintf(stderr, "%s: --fd, --vsock and --serial exclude each other\n", AGENT_NAME);
		return 2;
	}
	if (fd < 0 && vsock < 0 && !serial && !a->init) {
		usage(stderr);
		return 2;
	}

	if (a->init) {
		init_setup(&cfg);
		if (strncmp(cfg.channel, "vsock:", 6) == 0) {
			unsigned long v;
			vsock = parse_uint(cfg.channel + 6, UINT32_MAX - 1, &v) ? (long)v : 5000;
		} else {
			serial = cfg.channel + 7;
		}
	}
	ensure_stdio();
	harden(a);
	image_env_load(&a->image_env, env_file);
	if (setup_signals(a) < 0) {
		agent_log("signal pipe: %s", strerror(errno));
		return 1;
	}
	/* Orphans of finished commands (background daemons) come back to us, so that they can
	 * be reaped and killed when the host goes away. PID 1 gets them anyway. */
	if (!a->pid1)
		prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);

	struct err e;
	if (ws_init(&a->ws, workspace, &e) < 0 || ws_init_root(&a->root, &e) < 0) {
		agent_log("%s", e.msg);
		if (a->init)
			init_poweroff();
		return 1;
	}
	if (fd >= 0)
		serve_fd(a, (int)fd);
	if (vsock >= 0)
		serve_vsock(a, (unsigned)vsock);
	else
		serve_serial(a, serial);
	if (a->init)
		init_poweroff();
	return 1;
}
