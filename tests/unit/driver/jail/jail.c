/* Tests of the jail driver (src/driver/jail*.c) against the real kernel: a tiny busybox rootfs
 * and a static fake agent (fake_agent.c) that answers questions from inside the sandbox.
 * Skipped, saying why, when not root or when busybox or the fake agent is missing.
 *
 * `test-driver-jail --bench` instead measures create() to the agent's first reply. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "driver/cgroup.h"
#include "driver/driver.h"
#include "driver/jail/jail.h"
#include "util/cleanup.h"

#include "../../wait.h"

#define BUSYBOX "/bin/busybox"
#define MIB     (1024ULL * 1024ULL)

static struct {
	bool usable;
	char why[640];
	char tmp[64];
	char rootfs[128];
	struct config cfg;
	struct template tmpl;
	struct cgroup_root cg;
	unsigned n;
} T;

/* Fails the test when jails cannot run: root, the fake agent and busybox-static all come
 * with `make test`, and the integration suites need the jail driver anyway. */
static void need_jail(void)
{
	if (!T.usable)
		fail_msg("%s", T.why);
}

static char *next_id(void)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	pthread_mutex_lock(&lock);
	unsigned n = T.n++;
	pthread_mutex_unlock(&lock);
	return xasprintf("t-%d-%u", (int)getpid(), n);
}

static struct sandbox_limits default_limits(void)
{
	return (struct sandbox_limits){
		.memory_bytes = 256 * MIB,
		.cpu_quota_us = 50000,
		.cpu_period_us = 100000,
		.pids_max = 128,
		.workspace_bytes = 16 * MIB,
		.nofile = 1024,
	};
}

static struct sandbox *make_from(struct template *t, const struct sandbox_limits *l,
				 const char *netns)
{
	_cleanup_free_ char *id = next_id();
	struct sandbox_spec spec = { .tmpl = t, .id = id, .limits = *l, .netns_path = netns };
	struct sandbox *sb = NULL;
	struct err err = { 0 };
	int r = driver_jail.create(&T.cfg, &spec, &sb, &err);
	if (r < 0)
		print_error("create: %s\n", err.msg);
	assert_int_equal(r, 0);
	assert_non_null(sb);
	assert_true(sb->agent_fd >= 0);
	assert_true(sb->pid > 0);
	return sb;
}

static struct sandbox *make_with(const struct sandbox_limits *l, const char *netns)
{
	return make_from(&T.tmpl, l, netns);
}

static struct sandbox *make_with_template(struct template *t)
{
	struct sandbox_limits l = default_limits();
	return make_from(t, &l, NULL);
}

static struct sandbox *make(void)
{
	struct sandbox_limits l = default_limits();
	return make_with(&l, NULL);
}

static int read_full(int fd, char *buf, size_t len)
{
	size_t got = 0;
	while (got < len) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, 30000) <= 0)
			return -ETIMEDOUT;
		ssize_t r = read(fd, buf + got, len - got);
		if (r <= 0)
			return r < 0 ? -errno : -EPIPE;
		got += (size_t)r;
	}
	return 0;
}

/* Sends one command to the fake agent; returns its code and, in *out, its output. */
__attribute__((format(printf, 3, 4))) static int ask(struct sandbox *sb, char **out,
						     const char *fmt, ...)
{
	char line[1024];
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
	va_end(ap);
	line[n++] = '\n';
	assert_int_equal(write(sb->agent_fd, line, (size_t)n), n);

	char head[64];
	size_t len = 0;
	while (len < sizeof(head) - 1) {
		assert_int_equal(read_full(sb->agent_fd, head + len, 1), 0);
		if (head[len++] == '\n')
			break;
	}
	head[len] = '\0';
	int code;
	size_t size;
	assert_int_equal(sscanf(head, "%d %zu", &code, &size), 2);
	char *data = xmalloc(size + 1);
	assert_int_equal(read_full(sb->agent_fd, data, size), 0);
	data[size] = '\0';
	if (out)
		*out = data;
	else
		free(data);
	return code;
}

/* Runs a shell command in the sandbox; returns its status, output in *out. */
static int run(struct sandbox *sb, char **out, const char *cmd)
{
	return ask(sb, out, "run %s", cmd);
}

/* As root inside (the agent's uid), for what only the agent may see of itself. */
static int run_root(struct sandbox *sb, char **out, const char *cmd)
{
	return ask(sb, out, "root %s", cmd);
}

/* A test's sandbox is held in its state, so that a failed assertion does not leak it. */
static struct sandbox *held(void **state, struct sandbox *sb)
{
	*state = sb;
	return sb;
}

static void release(void **state)
{
	driver_jail.destroy(*state);
	*state = NULL;
}

static int release_teardown(void **state)
{
	release(state);
	return 0;
}

static int count_fds(void)
{
	_cleanup_closedir_ DIR *d = opendir("/proc/self/fd");
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	return n;
}

static bool path_exists(const char *p)
{
	return access(p, F_OK) == 0;
}

static char *read_file(const char *path)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	size_t cap = 1 << 16, len = 0;
	char *buf = xmalloc(cap + 1);
	ssize_t r;
	while ((r = read(fd, buf + len, cap - len)) > 0)
		len += (size_t)r;
	buf[len] = '\0';
	return buf;
}

static uint64_t read_u64(const char *dir, const char *file)
{
	_cleanup_free_ char *p = xasprintf("%s/%s", dir, file);
	_cleanup_free_ char *s = read_file(p);
	assert_non_null(s);
	return strtoull(s, NULL, 10);
}

/* Asserts that nothing of sandbox `id` (init `pid`) is left on the host. */
static void assert_gone(const char *id, pid_t pid)
{
	if (pid > 0)
		assert_int_equal(kill(pid, 0) < 0 ? errno : 0, ESRCH);
	struct cgroup *cg = NULL;
	assert_int_equal(cgroup_open(&T.cg, id, &cg, NULL), 0);
	for (unsigned i = 0; i < cg->n; i++)
		assert_false(path_exists(cg->dir[i]));
	cgroup_free(cg);
	_cleanup_free_ char *mounts = read_file("/proc/self/mounts");
	assert_non_null(mounts);
	/* The id, or the rootfs (other parts of sandboxd may mount below agent-sandbox/). */
	assert_null(strstr(mounts, id));
	assert_null(strstr(mounts, T.tmp));
}

static void test_probe_init(void **state)
{
	need_jail();
	struct err err = { 0 };
	assert_int_equal(driver_jail.probe(&T.cfg, &err), 0);
	assert_int_equal(driver_jail.init(&T.cfg, &err), 0);
	assert_string_equal(driver_jail.name, "jail");
	assert_string_equal(driver_jail.isolation, "container");

	struct config bad = T.cfg;
	bad.agent_bin = "/nonexistent/sandbox-agent";
	assert_int_equal(driver_jail.probe(&bad, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "/nonexistent/sandbox-agent"));
}

static void test_identity(void **state)
{
	need_jail();
	struct sandbox *sb = held(state, make());
	char *out;

	assert_int_equal(ask(sb, &out, "pid"), 0);
	assert_string_equal(out, "1");
	free(out);

	assert_int_equal(run(sb, &out, "hostname"), 0);
	assert_string_equal(out, "sandbox\n");
	free(out);

	/* The sandbox's own processes only: the agent, the shell, ls and grep. */
	assert_int_equal(run(sb, &out, "ls /proc | grep -c '^[0-9]'"), 0);
	assert_true(atoi(out) >= 2 && atoi(out) <= 4);
	free(out);
	assert_int_equal(run(sb, &out, "cat /proc/1/cmdline | tr '\\0' ' '"), 0);
	assert_string_equal(out, "sandbox-agent --fd 3 --workspace /workspace --user 1000:1000 ");
	free(out);

	/* The agent inherited fds 0-2 (/dev/null) and 3 only; 4 is its pipe from this command. */
	assert_int_equal(run_root(sb, &out, "ls /proc/1/fd | tr '\\n' ' '"), 0);
	assert_string_equal(out, "0 1 2 3 4 ");
	free(out);
	/* Commands run as another user, to whom the agent's fds are closed. */
	assert_int_not_equal(run(sb, &out, "ls /proc/1/fd"), 0);
	free(out);
	assert_int_equal(run_root(sb, &out, "readlink /proc/1/fd/0"), 0);
	assert_string_equal(out, "/dev/null\n");
	free(out);

	assert_int_equal(run(sb, &out, "ulimit -n"), 0);
	assert_string_equal(out, "1024\n");
	free(out);
	/* Commands run as the command user; the agent is root of its user namespace, which
	 * maps it to an unprivileged host uid. */
	assert_int_equal(run(sb, &out, "id -u"), 0);
	assert_string_equal(out, "1000\n");
	free(out);
	assert_int_equal(run_root(sb, &out, "id -u; awk '{print $2}' /proc/self/uid_map"), 0);
	assert_true(strncmp(out, "0\n", 2) == 0 && strtoul(out + 2, NULL, 10) >= 65536);
	free(out);
	/* Signals are not inherited blocked or ignored from the daemon. */
	_cleanup_free_ char *status = NULL;
	assert_int_equal(ask(sb, &status, "read /proc/1/status"), 0);
	assert_non_null(strstr(status, "SigBlk:\t0000000000000000\n"));

	release(state);
}

static void test_filesystem(void **state)
{
	need_jail();
	struct sandbox *sb = held(state, make());
	char *out;

	/* The template's rootfs is read-only. */
	assert_int_not_equal(run(sb, &out, "touch /bin/new"), 0);
	assert_non_null(strstr(out, "Read-only file system"));
	free(out);

	/* /workspace is writable, 0755, and bounded by workspace_bytes (16 MiB here). */
	assert_int_equal(run(sb, &out, "echo hello > /workspace/a && cat /workspace/a"), 0);
	assert_string_equal(out, "hello\n");
	free(out);
	assert_int_equal(run(sb, &out, "stat -c %a /workspace /tmp /dev/shm | tr '\\n' ' '"), 0);
	assert_string_equal(out, "755 1777 1777 ");
	free(out);
	assert_int_not_equal(run(sb, &out, "dd if=/dev/zero of=/workspace/big bs=1M count=20"), 0);
	assert_non_null(strstr(out, "No space left on device"));
	free(out);
	assert_int_equal(run(sb, &out, "df -k /workspace | tail -1 | awk '{print $2}'"), 0);
	assert_int_equal(atoi(out), 16 * 1024);
	free(out);
	assert_int_equal(run(sb, &out, "echo x > /tmp/x && echo y > /run/y && cat /tmp/x /run/y"),
			 0);
	assert_string_equal(out, "x\ny\n");
	free(out);
	/* /dev, /tmp and /run are directories of one tmpfs (one superblock, hence one shrinker,
	 * where there were three), each with its own mount flags: /dev alone is noexec. */
	assert_int_equal(run(sb, &out, "stat -c %d /dev /tmp /run /dev/shm | sort -u | wc -l"), 0);
	assert_string_equal(out, "1\n");
	free(out);
	assert_int_equal(run(sb, &out, "stat -c '%a %u' /run"), 0);
	assert_string_equal(out, "755 1000\n");
	free(out);
	assert_int_equal(
		run(sb, &out,
		    "awk '$5 == \"/dev\" || $5 == \"/tmp\" || $5 == \"/run\" "
		    "{ print $5, ($6 ~ /noexec/) }' /proc/self/mountinfo | sort | tr '\\n' ' '"),
		0);
	assert_string_equal(out, "/dev 1 /run 0 /tmp 0 ");
	free(out);
	/* Superblocks of its own (every device id among its mounts but the shared sysfs, the
	 * rootfs and the host's device nodes): procfs, the scratch tmpfs, devpts, mqueue and
	 * /workspace. */
	assert_int_equal(run(sb, &out,
			     "awk '{ for (i = 7; $i != \"-\"; i++); t = $(i + 1) } "
			     "t != \"sysfs\" && t != \"devtmpfs\" && $5 != \"/\" { print $3 }' "
			     "/proc/self/mountinfo | sort -u | wc -l"),
			 0);
	assert_string_equal(out, "5\n");
	free(out);

	/* A minimal /dev. */
	assert_int_equal(run(sb, &out, "ls /dev | tr '\\n' ' '"), 0);
	assert_string_equal(out, "fd full mqueue null ptmx pts random shm stderr stdin stdout tty "
				 "urandom zero ");
	free(out);
	assert_int_equal(run(sb, &out, "echo x > /dev/null && head -c 8 /dev/urandom | wc -c"), 0);
	assert_string_equal(out, "8\n");
	free(out);
	assert_int_equal(run(sb, &out, "head -c 3 /dev/zero | od -An -tx1"), 0);
	assert_non_null(strstr(out, "00 00 00"));
	free(out);
	assert_int_not_equal(run(sb, &out, "echo x > /dev/full"), 0);
	free(out);
	/* Its own devpts: a new pty is number 0. */
	assert_int_equal(run(sb, &out, "exec 5<>/dev/ptmx && ls /dev/pts | tr '\\n' ' '"), 0);
	assert_string_equal(out, "0 ptmx ");
	free(out);

	/* Sensitive /proc paths are masked or read-only; /sys is read-only. */
	/* Masked files read empty; those this kernel lacks are skipped. */
	assert_int_equal(run(sb, &out,
			     "for f in kcore keys timer_list sched_debug; do "
			     "[ -e /proc/$f ] && wc -c < /proc/$f; done | sort -u"),
			 0);
	assert_string_equal(out, "0\n");
	free(out);
	assert_int_equal(run(sb, &out, "ls -A /proc/acpi /sys/firmware | grep -v : | wc -w"), 0);
	assert_string_equal(out, "0\n");
	free(out);
	assert_int_not_equal(run(sb, &out, "echo 1 > /proc/sys/kernel/domainname"), 0);
	free(out);
	assert_int_not_equal(run(sb, &out, "echo h > /proc/sysrq-trigger"), 0);
	free(out);
	assert_int_not_equal(run(sb, &out, "touch /sys/x"), 0);
	free(out);
	assert_int_equal(run(sb, &out, "grep -c ' /workspace tmpfs ' /proc/mounts"), 0);
	assert_string_equal(out, "1\n");
	free(out);
	/* The host's mounts are not visible. */
	assert_int_equal(run(sb, &out, "grep -c cgroup /proc/mounts"), 1);
	free(out);

	release(state);
}

static void assert_status_line(const char *status, const char *key, const char *want)
{
	char *line = xasprintf("\n%s:\t%s\n", key, want);
	if (!strstr(status, line))
		print_error("want %s:\t%s in\n%s\n", key, want, status);
	assert_non_null(strstr(status, line));
	free(line);
}

/* Whether this host's kernel serves the i386 entry point (int 0x80) at all: a kernel
 * booted with ia32_emulation off, or built without it, kills the caller with SIGSEGV
 * before any filter sees the call, so the jail's answer there cannot be observed. */
static bool host_has_int80(void)
{
	pid_t pid = fork();
	if (pid == 0) {
		signal(SIGSEGV, SIG_DFL); /* not the test framework's handler */
		long ret;
		__asm__ volatile("int $0x80" : "=a"(ret) : "a"(20L /* i386 getpid */) : "memory");
		_exit(ret > 0 ? 0 : 1);
	}
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

static void test_security(void **state)
{
	need_jail();
	struct sandbox *sb = held(state, make());

	char *status;
	assert_int_equal(ask(sb, &status, "read /proc/self/status"), 0);
	char caps[32];
	snprintf(caps, sizeof(caps), "%016" PRIx64, jail_caps_keep());
	assert_status_line(status, "CapEff", caps);
	assert_status_line(status, "CapPrm", caps);
	assert_status_line(status, "CapBnd", caps);
	assert_status_line(status, "CapInh", "0000000000000000");
	assert_status_line(status, "CapAmb", "0000000000000000");
	assert_status_line(status, "NoNewPrivs", "1");
	assert_status_line(status, "Seccomp", "2");
	free(status);
	/* The agent keeps CAP_SETUID (7), CAP_SETGID (6), CAP_KILL (5) and, for root's
	 * commands, CAP_CHOWN (0), CAP_DAC_OVERRIDE (1), CAP_FOWNER (3), CAP_FSETID (4),
	 * CAP_SYS_CHROOT (18) and CAP_SETFCAP (31) alone. */
	assert_int_equal(jail_caps_keep(), (1ULL << 0) | (1ULL << 1) | (1ULL << 3) | (1ULL << 4) |
						   (1ULL << 5) | (1ULL << 6) | (1ULL << 7) |
						   (1ULL << 18) | (1ULL << 31));

	static const struct {
		const char *name;
		int want;
	} calls[] = {
		/* Not on the allow list: ENOSYS, as from a kernel without them. */
		{ "keyctl", ENOSYS },
		/* The i386 entry point: no call is allowed there. */
		{ "keyctl32", ENOSYS },
		{ "mount", ENOSYS },
		{ "unshare_user", ENOSYS },
		{ "unshare_net", ENOSYS },
		{ "ptrace", ENOSYS },
		{ "bpf", ENOSYS },
		{ "personality_unsafe", ENOSYS },
		{ "personality_query", 0 },
		{ "clone3", ENOSYS },
		{ "setns", ENOSYS },
		{ "io_uring", ENOSYS },
		{ "io_setup", ENOSYS },
		{ "chroot", ENOSYS },
		/* Faking a terminal's input: refused as by a kernel with legacy_tiocsti off,
		 * whatever the upper bits of the command; other ioctls pass. */
		{ "tiocsti", EIO },
		{ "tiocsti_high", EIO },
		{ "fionread", 0 },
		/* Allowed, and refused by the kernel: no CAP_MKNOD, no CAP_NET_RAW. */
		{ "mknod", EPERM },
		{ "rawsock", EPERM },
	};
	bool int80 = host_has_int80();
	if (!int80)
		print_message("keyctl32: not tried, this kernel has no i386 entry point\n");
	for (size_t i = 0; i < ARRAY_SIZE(calls); i++) {
		if (!int80 && strcmp(calls[i].name, "keyctl32") == 0)
			continue;
		int got = ask(sb, NULL, "sys %s", calls[i].name);
		if (got != calls[i].want)
			print_error("%s: errno %d, want %d\n", calls[i].name, got, calls[i].want);
		assert_int_equal(got, calls[i].want);
	}

	/* Ordinary programs are unaffected: fork, exec, pipes, background jobs. */
	char *out;
	assert_int_equal(run(sb, &out, "(sleep 0 &) ; echo a | cat; wait"), 0);
	assert_string_equal(out, "a\n");
	free(out);
	assert_int_not_equal(run(sb, &out, "unshare -U true"), 0);
	free(out);

	release(state);
}

static void test_network(void **state)
{
	need_jail();
	struct sandbox *sb = held(state, make());
	char *out;

	/* /sys is the one sysfs every sandbox shares (jail_userns.c): no interface shows. */
	assert_int_equal(run(sb, &out, "ls /sys/class/net | wc -l"), 0);
	assert_int_equal(atoi(out), 0);
	free(out);
	/* Its own sysctls, written through its own procfs. */
	assert_int_equal(run(sb, &out, "cat /proc/sys/net/ipv4/ip_unprivileged_port_start"), 0);
	assert_string_equal(out, "0\n");
	free(out);
	assert_int_equal(run(sb, &out, "tail -n +3 /proc/net/dev | awk '{print $1}'"), 0);
	assert_string_equal(out, "lo:\n");
	free(out);
	release(state);

	/* netns_path: the sandbox joins that namespace instead. */
	int ready[2];
	assert_int_equal(pipe(ready), 0);
	pid_t holder = fork();
	assert_true(holder >= 0);
	if (holder == 0) {
		if (unshare(CLONE_NEWNET) < 0)
			_exit(1);
		if (write(ready[1], "x", 1) != 1)
			_exit(1);
		pause();
		_exit(0);
	}
	close(ready[1]);
	char c;
	assert_int_equal(read(ready[0], &c, 1), 1);
	close(ready[0]);
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)holder);
	struct stat st;
	assert_int_equal(stat(path, &st), 0);

	struct sandbox_limits l = default_limits();
	sb = held(state, make_with(&l, path));
	assert_int_equal(run_root(sb, &out, "readlink /proc/1/ns/net"), 0);
	char want[64];
	snprintf(want, sizeof(want), "net:[%lu]\n", (unsigned long)st.st_ino);
	assert_string_equal(out, want);
	free(out);
	release(state);
	kill(holder, SIGKILL);
	waitpid(holder, NULL, 0);
}

static void test_cgroup_limits(void **state)
{
	need_jail();
	struct sandbox *sb = held(state, make());
	struct cgroup *cg = NULL;
	assert_int_equal(cgroup_open(&T.cg, sb->id, &cg, NULL), 0);
	const char *mem = cg->ctl[0], *cpu = cg->ctl[1], *pids = cg->ctl[2];

	if (T.cg.version == CGROUP_V1) {
		assert_int_equal(read_u64(mem, "memory.limit_in_bytes"), 256 * MIB);
		_cleanup_free_ char *memsw = xasprintf("%s/memory.memsw.limit_in_bytes", mem);
		if (path_exists(memsw))
			assert_int_equal(read_u64(mem, "memory.memsw.limit_in_bytes"), 256 * MIB);
		assert_int_equal(read_u64(cpu, "cpu.cfs_quota_us"), 50000);
		assert_int_equal(read_u64(cpu, "cpu.cfs_period_us"), 100000);
	} else {
		assert_int_equal(read_u64(mem, "memory.max"), 256 * MIB);
		_cleanup_free_ char *p = xasprintf("%s/cpu.max", cpu);
		_cleanup_free_ char *s = read_file(p);
		assert_string_equal(s, "50000 100000\n");
	}
	assert_int_equal(read_u64(pids, "pids.max"), 128);

	/* The agent is a member of each directory, and sees its cgroup as the root. */
	char pid[32];
	snprintf(pid, sizeof(pid), "%d\n", (int)sb->pid);
	for (unsigned i = 0; i < cg->n; i++) {
		_cleanup_free_ char *procs = read_file(cg->procs[i]);
		assert_non_null(strstr(procs, pid));
	}
	char *out;
	assert_int_equal(ask(sb, &out, "read /proc/self/cgroup"), 0);
	for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n")) {
		if (strstr(line, ":memory:") || strstr(line, ":pids:") ||
		    strncmp(line, "0::", 3) == 0)
			assert_string_equal(strrchr(line, ':'), ":/");
	}
	free(out);

	assert_int_equal(driver_jail.oom_kills(sb), 0);
	cgroup_free(cg);
	release(state);
}

/* Whether the pids controller at directory `dir` refused a fork: pids.events counts a max. */
static bool pids_limit_hit(void *dir)
{
	_cleanup_free_ char *path = xasprintf("%s/pids.events", (const char *)dir);
	_cleanup_free_ char *events = read_file(path);
	return events && strncmp(events, "max ", 4) == 0 && strtoull(events + 4, NULL, 10) > 0;
}

static void test_fork_bomb(void **state)
{
	need_jail();
	struct sandbox_limits l = default_limits();
	l.pids_max = 32;
	struct sandbox *sb = held(state, make_with(&l, NULL));
	_cleanup_free_ char *id = xstrdup(sb->id);
	pid_t pid = sb->pid;
	struct cgroup *cg = NULL;
	assert_int_equal(cgroup_open(&T.cg, sb->id, &cg, NULL), 0);

	char *out;
	assert_int_equal(run(sb, &out, "sh -c 'b() { b | b & }; b' </dev/null >/dev/null 2>&1 &"),
			 0);
	free(out);
	/* The limit is hit: forks are refused, and no more than the limit run. */
	assert_true(wait_until(pids_limit_hit, cg->ctl[2], WAIT_TIMEOUT_MS,
			       "the fork bomb to reach pids.max"));
	uint64_t cur = read_u64(cg->ctl[2], "pids.current");
	assert_true(cur <= 32);
	_cleanup_free_ char *events_path = xasprintf("%s/pids.events", cg->ctl[2]);
	_cleanup_free_ char *events = read_file(events_path);
	print_message("fork bomb: pids.current %" PRIu64 " of 32, %s", cur, events);
	/* The host is unaffected. */
	assert_int_equal(system("true"), 0);

	release(state);
	cgroup_free(cg);
	assert_gone(id, pid);
}

static void test_oom(void **state)
{
	need_jail();
	struct sandbox_limits l = default_limits();
	l.memory_bytes = 32 * MIB;
	struct sandbox *sb = held(state, make_with(&l, NULL));

	/* The hog is killed by the kernel's OOM killer (SIGKILL), not the agent. */
	assert_int_equal(ask(sb, NULL, "hog 256"), 128 + SIGKILL);
	assert_true(driver_jail.oom_kills(sb) >= 1);
	char *out;
	assert_int_equal(ask(sb, &out, "ping"), 0);
	assert_string_equal(out, "pong");
	free(out);
	release(state);
}

static void test_destroy_leaves_nothing(void **state)
{
	need_jail();
	int fds = count_fds();
	struct sandbox *sb = held(state, make());
	_cleanup_free_ char *id = xstrdup(sb->id);
	pid_t pid = sb->pid;
	char *out;
	/* Some processes still running when it is destroyed. */
	assert_int_equal(run(sb, &out, "sleep 100 </dev/null >/dev/null 2>&1 &"), 0);
	free(out);
	release(state);
	assert_gone(id, pid);
	assert_int_equal(count_fds(), fds);
	assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
	assert_int_equal(errno, ECHILD);
}

static void test_record(void **state)
{
	need_jail();
	struct sandbox *sb = held(state, make());
	json_t *rec = sb->record;
	assert_non_null(rec);
	assert_int_equal(json_integer_value(json_object_get(rec, "pid")), sb->pid);
	assert_true(json_integer_value(json_object_get(rec, "start_time")) > 0);
	assert_int_equal(strlen(json_string_value(json_object_get(rec, "boot_id"))), 36);
	assert_true(json_array_size(json_object_get(rec, "cgroups")) >= 1);
	release(state);
}

static void test_cleanup_stale(void **state)
{
	need_jail();

	/* A record that names a process which is not the sandbox's (wrong start time, or another
	 * boot) leaves that process alone. */
	pid_t bystander = fork();
	assert_true(bystander >= 0);
	if (bystander == 0) {
		pause();
		_exit(0);
	}
	_cleanup_free_ char *other = next_id();
	json_t *rec = json_pack("{s:i, s:I, s:s}", "pid", (int)bystander, "start_time",
				(json_int_t)1, "boot_id", "x");
	driver_jail.cleanup_stale(&T.cfg, other, rec);
	json_decref(rec);
	assert_int_equal(kill(bystander, 0), 0);
	kill(bystander, SIGKILL);
	waitpid(bystander, NULL, 0);

	/* A live sandbox, as a crashed daemon would have left it. */
	struct sandbox *sb = held(state, make());
	_cleanup_free_ char *id = xstrdup(sb->id);
	pid_t pid = sb->pid;
	rec = json_deep_copy(sb->record);
	json_object_set_new(
		rec, "start_time",
		json_integer(json_integer_value(json_object_get(rec, "start_time")) + 1));
	/* Start time off by one: the process is spared, the cgroup is ours by name. */
	driver_jail.cleanup_stale(&T.cfg, "t-unrelated", rec);
	assert_int_equal(kill(pid, 0), 0);
	json_decref(rec);

	driver_jail.cleanup_stale(&T.cfg, id, sb->record);
	/* It was our child: reap it as the daemon's SIGCHLD handling would. */
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	/* destroy() after that is still safe. */
	release(state);
	assert_gone(id, pid);

	/* No record at all: the cgroups named for the id still go. */
	struct cgroup *cg = NULL;
	_cleanup_free_ char *lone = next_id();
	struct cgroup_limits lim = { 0 };
	assert_int_equal(cgroup_create(&T.cg, lone, &lim, &cg, NULL), 0);
	driver_jail.cleanup_stale(&T.cfg, lone, NULL);
	for (unsigned i = 0; i < cg->n; i++)
		assert_false(path_exists(cg->dir[i]));
	cgroup_free(cg);
}

struct churn {
	int runs;
	int failures;
};

static void *churn_sandboxes(void *arg)
{
	struct churn *c = arg;
	struct sandbox_limits l = default_limits();
	for (int i = 0; i < c->runs; i++) {
		_cleanup_free_ char *id = next_id();
		struct sandbox_spec spec = { .tmpl = &T.tmpl, .id = id, .limits = l };
		struct sandbox *sb = NULL;
		struct err err = { 0 };
		if (driver_jail.create(&T.cfg, &spec, &sb, &err) < 0) {
			print_error("create: %s\n", err.msg);
			c->failures++;
			continue;
		}
		char line[] = "ping\n", reply[16] = { 0 };
		if (write(sb->agent_fd, line, 5) != 5 || read_full(sb->agent_fd, reply, 8) < 0 ||
		    strcmp(reply, "0 4\npong") != 0)
			c->failures++;
		driver_jail.destroy(sb);
	}
	return NULL;
}

static volatile bool stop_malloc;

static void *churn_malloc(void *arg)
{
	while (!stop_malloc) {
		void *p[64];
		for (int i = 0; i < 64; i++)
			p[i] = malloc((size_t)(i + 1) * 100);
		for (int i = 0; i < 64; i++)
			free(p[i]);
	}
	return NULL;
}

/* As in sandboxd: several worker threads create and destroy sandboxes at once while other
 * threads allocate (a child cloned while another thread holds the malloc lock must not need
 * it). */
static void test_threads(void **state)
{
	need_jail();
	pthread_t workers[3], noise;
	struct churn churn[3];
	stop_malloc = false;
	assert_int_equal(pthread_create(&noise, NULL, churn_malloc, NULL), 0);
	for (int i = 0; i < 3; i++) {
		churn[i] = (struct churn){ .runs = 8 };
		assert_int_equal(pthread_create(&workers[i], NULL, churn_sandboxes, &churn[i]), 0);
	}
	for (int i = 0; i < 3; i++)
		pthread_join(workers[i], NULL);
	stop_malloc = true;
	pthread_join(noise, NULL);
	for (int i = 0; i < 3; i++)
		assert_int_equal(churn[i].failures, 0);
	assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
}

/* Creates with `tmpl` and agent `agent`, expects failure with `want` in the message, and
 * checks that nothing was left. */
static void expect_failure(struct template *tmpl, const char *agent, const char *netns,
			   const char *want)
{
	int fds = count_fds();
	_cleanup_free_ char *id = next_id();
	struct config cfg = T.cfg;
	cfg.agent_bin = (char *)agent;
	struct sandbox_spec spec = {
		.tmpl = tmpl, .id = id, .limits = default_limits(), .netns_path = netns
	};
	struct sandbox *sb = NULL;
	struct err err = { 0 };
	assert_true(driver_jail.create(&cfg, &spec, &sb, &err) < 0);
	assert_null(sb);
	print_message("expected failure: %s\n", err.msg);
	if (!strstr(err.msg, want))
		print_error("want `%s` in `%s`\n", want ? want : "(nothing)", err.msg);
	assert_non_null(strstr(err.msg, want));
	assert_gone(id, 0);
	assert_int_equal(count_fds(), fds);
	assert_int_equal(waitpid(-1, NULL, WNOHANG), -1);
}

static void test_create_failures(void **state)
{
	need_jail();

	struct template missing = T.tmpl;
	_cleanup_free_ char *nowhere = xasprintf("%s/no-such-rootfs", T.tmp);
	missing.rootfs_dir = nowhere;
	expect_failure(&missing, T.cfg.agent_bin, NULL, "template rootfs `" /* path follows */);
	expect_failure(&missing, T.cfg.agent_bin, NULL, "No such file or directory");

	struct template none = T.tmpl;
	none.rootfs_dir = NULL;
	expect_failure(&none, T.cfg.agent_bin, NULL, "has no rootfs directory");

	expect_failure(&T.tmpl, "/nonexistent/agent", NULL,
		       "jail: agent binary `/nonexistent/agent`: No such file or directory");

	/* Failures inside the child come back with the step that failed. */
	expect_failure(&T.tmpl, T.cfg.agent_bin, "/dev/null",
		       "jail: join network namespace /dev/null: Invalid argument");
	_cleanup_free_ char *junk = xasprintf("%s/junk-agent", T.tmp);
	FILE *f = fopen(junk, "w");
	assert_non_null(f);
	fputs("not a program\n", f);
	fclose(f);
	chmod(junk, 0755);
	expect_failure(&T.tmpl, junk, NULL, "jail: execute the agent: Exec format error");

	/* A mount point replaced by a symlink is refused. */
	_cleanup_free_ char *evil = xasprintf("%s/evil", T.tmp);
	_cleanup_free_ char *cmd = xasprintf("cp -a %s %s && rmdir %s/workspace && "
					     "ln -s / %s/workspace",
					     T.rootfs, evil, evil, evil);
	assert_int_equal(system(cmd), 0);
	struct template bad = T.tmpl;
	bad.rootfs_dir = evil;
	expect_failure(&bad, T.cfg.agent_bin, NULL, "/workspace must be a directory");

	struct sandbox_spec spec = { .tmpl = &T.tmpl, .id = "Bad/Id", .limits = default_limits() };
	struct sandbox *sb = NULL;
	struct err err = { 0 };
	assert_int_equal(driver_jail.create(&T.cfg, &spec, &sb, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "invalid sandbox id"));
}

/* Whether this kernel is Linux major.minor or later. */
static bool kernel_at_least(unsigned major, unsigned minor)
{
	struct utsname u;
	unsigned ma = 0, mi = 0;
	assert_int_equal(uname(&u), 0);
	sscanf(u.release, "%u.%u", &ma, &mi);
	return ma > major || (ma == major && mi >= minor);
}

/* The templates' filesystem without idmapped mounts (ramfs has none; tmpfs before Linux 6.3,
 * as on the host lane's 6.1): found at start and said, not refused (the templates' images
 * stand in); a template kept there as a directory alone fails at its creation, naming the
 * path, the filesystem and the kernel. Where the filesystem has them, a sandbox is made. */
static void test_idmap_filesystems(void **state)
{
	need_jail();
	const struct {
		const char *type;
		bool idmap;
		const char *why;
	} fss[] = {
		{ "ramfs", false, "ramfs has no idmapped mounts on this kernel" },
		{ "tmpfs", kernel_at_least(6, 3),
		  "tmpfs has idmapped mounts since Linux 6.3, and this kernel is " },
	};
	for (size_t i = 0; i < ARRAY_SIZE(fss); i++) {
		/* Outside T.tmp, which assert_gone looks for in the mount table. */
		char dir[64];
		snprintf(dir, sizeof(dir), "/tmp/jail-idmap-XXXXXX");
		assert_non_null(mkdtemp(dir));
		assert_int_equal(mount(fss[i].type, dir, fss[i].type, 0, "mode=0755"), 0);
		_cleanup_free_ char *rootfs = xasprintf("%s/templates/t/rootfs", dir);
		_cleanup_free_ char *cmd =
			xasprintf("mkdir -p %s/templates/t && cp -a %s %s", dir, T.rootfs, rootfs);
		assert_int_equal(system(cmd), 0);

		struct config cfg = T.cfg;
		cfg.artifacts_dir = dir;
		struct err err = { 0 };
		assert_int_equal(driver_jail.probe(&cfg, &err), 0);
		const char *warning = jail_idmap_warning();
		print_message("%s: start: %s\n", fss[i].type, *warning ? warning : "no warning");
		struct template t = T.tmpl;
		t.rootfs_dir = rootfs;
		if (fss[i].idmap) {
			assert_string_equal(warning, "");
			driver_jail.destroy(make_with_template(&t));
		} else {
			_cleanup_free_ char *templates = xasprintf("`%s/templates`", dir);
			_cleanup_free_ char *named = xasprintf("idmapped mount of `%s`", rootfs);
			assert_non_null(strstr(warning, fss[i].why));
			assert_non_null(strstr(warning, templates));
			assert_non_null(strstr(warning, "rootfs.ext4"));
			expect_failure(&t, T.cfg.agent_bin, NULL, named);
			expect_failure(&t, T.cfg.agent_bin, NULL, fss[i].why);
		}
		assert_int_equal(umount2(dir, MNT_DETACH), 0);
		rmdir(dir);
	}
	/* The suite's own templates' filesystem again. */
	struct err err = { 0 };
	assert_int_equal(driver_jail.probe(&T.cfg, &err), 0);
	assert_string_equal(jail_idmap_warning(), "");
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

static int build_rootfs(void)
{
	snprintf(T.tmp, sizeof(T.tmp), "/tmp/jail-test-XXXXXX");
	if (!mkdtemp(T.tmp))
		return -errno;
	snprintf(T.rootfs, sizeof(T.rootfs), "%s/rootfs", T.tmp);
	_cleanup_free_ char *cmd = xasprintf(
		"set -e; cd %s; mkdir -p bin etc root; cp %s bin/busybox; "
		"for a in $(bin/busybox --list); do [ -e bin/$a ] || ln -s busybox bin/$a; done; "
		"echo 'root:x:0:0:root:/root:/bin/sh' > etc/passwd; echo 'root:x:0:' > etc/group",
		T.rootfs, BUSYBOX);
	if (mkdir(T.rootfs, 0755) < 0 || system(cmd) != 0)
		return -EIO;
	return 0;
}

static int setup(void **state)
{
	const char *agent = getenv("JAIL_TEST_AGENT");
	/* As on a host whose init is systemd, every mount is shared, in this test's own mount
	 * namespace: a sandbox's mounts must neither propagate to the host from a template's
	 * directory nor come in from it (assert_gone checks the host's table). */
	if (geteuid() == 0 &&
	    (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_SHARED, NULL) < 0)) {
		snprintf(T.why, sizeof(T.why), "cannot make a shared mount namespace: %s",
			 strerror(errno));
		return 0;
	}
	if (geteuid() != 0)
		snprintf(T.why, sizeof(T.why), "the jail driver needs root (sudo make test)");
	else if (!agent || access(agent, X_OK) < 0)
		snprintf(T.why, sizeof(T.why),
			 "no fake agent (JAIL_TEST_AGENT; musl-gcc, of the package musl-tools, "
			 "builds "
			 "it)");
	else if (access(BUSYBOX, X_OK) < 0)
		snprintf(T.why, sizeof(T.why), "no %s (package busybox-static)", BUSYBOX);
	else if (build_rootfs() < 0)
		snprintf(T.why, sizeof(T.why), "cannot build a rootfs in /tmp");
	else
		T.usable = true;
	if (!T.usable)
		return 0;

	T.cfg.agent_bin = (char *)agent;
	/* The suite runs once more with the fallbacks of older kernels (meson.build). */
	T.cfg.kernel_fallbacks = getenv("SANDBOX_KERNEL_FALLBACKS");
	T.tmpl.name = "test";
	T.tmpl.dir = T.tmp;
	T.tmpl.rootfs_dir = T.rootfs;
	/* Its templates' filesystem is /tmp's (the idmap probed at start). */
	T.cfg.artifacts_dir = T.tmp;
	struct err err = { 0 };
	if (driver_jail.probe(&T.cfg, &err) < 0 || driver_jail.init(&T.cfg, &err) < 0 ||
	    cgroup_root_detect("/sys/fs/cgroup", &T.cg, &err) < 0) {
		snprintf(T.why, sizeof(T.why), "the jail driver cannot run here: %s", err.msg);
		T.usable = false;
	}
	return 0;
}

static int teardown(void **state)
{
	if (T.tmp[0])
		nftw(T.tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	cgroup_root_free(&T.cg);
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* Cold create() to the first reply from the agent, and destroy(), over `runs` sandboxes,
 * `gap_ms` apart (kernel work deferred by the previous one, such as RCU grace periods, then
 * does not overlap the next). */
static int bench(int runs, int gap_ms)
{
	setup(NULL);
	if (!T.usable) {
		printf("bench cannot run: %s\n", T.why);
		teardown(NULL);
		return 1;
	}
	double *up = xcalloc((size_t)runs, sizeof(double));
	double *down = xcalloc((size_t)runs, sizeof(double));
	struct sandbox_limits l = default_limits();
	for (int i = 0; i < runs; i++) {
		/* Pacing: the runs are measured apart from each other's deferred kernel work. */
		if (gap_ms > 0)
			usleep((useconds_t)gap_ms * 1000);
		double t0 = now_ms();
		struct sandbox *sb = make_with(&l, NULL);
		char *out;
		if (ask(sb, &out, "ping") != 0)
			return 1;
		free(out);
		double t1 = now_ms();
		driver_jail.destroy(sb);
		up[i] = t1 - t0;
		down[i] = now_ms() - t1;
	}
	qsort(up, (size_t)runs, sizeof(double), cmp_double);
	qsort(down, (size_t)runs, sizeof(double), cmp_double);
	printf("jail create to first reply over %d runs (%d ms apart): p50 %.2f ms, p90 %.2f ms, "
	       "min %.2f ms\n",
	       runs, gap_ms, up[runs / 2], up[runs * 9 / 10], up[0]);
	printf("jail destroy over %d runs: p50 %.2f ms, p90 %.2f ms\n", runs, down[runs / 2],
	       down[runs * 9 / 10]);
	free(up);
	free(down);
	teardown(NULL);
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "--bench") == 0)
		return bench(argc > 2 ? atoi(argv[2]) : 100, argc > 3 ? atoi(argv[3]) : 0);

	const struct CMUnitTest tests[] = {
		cmocka_unit_test_teardown(test_probe_init, release_teardown),
		cmocka_unit_test_teardown(test_identity, release_teardown),
		cmocka_unit_test_teardown(test_filesystem, release_teardown),
		cmocka_unit_test_teardown(test_security, release_teardown),
		cmocka_unit_test_teardown(test_network, release_teardown),
		cmocka_unit_test_teardown(test_cgroup_limits, release_teardown),
		cmocka_unit_test_teardown(test_fork_bomb, release_teardown),
		cmocka_unit_test_teardown(test_oom, release_teardown),
		cmocka_unit_test_teardown(test_destroy_leaves_nothing, release_teardown),
		cmocka_unit_test_teardown(test_record, release_teardown),
		cmocka_unit_test_teardown(test_cleanup_stale, release_teardown),
		cmocka_unit_test_teardown(test_create_failures, release_teardown),
		cmocka_unit_test_teardown(test_idmap_filesystems, release_teardown),
		cmocka_unit_test_teardown(test_threads, release_teardown),
	};
	return cmocka_run_group_tests_name("driver/jail", tests, setup, teardown);
}
