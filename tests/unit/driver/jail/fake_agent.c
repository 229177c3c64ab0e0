/* A stand-in for sandbox-agent in the jail driver's tests: a static binary that answers line
 * commands on fd 3 so that the tests can look at the sandbox from the inside.
 *
 * Request: one line. Reply: "<code> <length>\n" followed by <length> bytes.
 *   ping             0 "pong"
 *   pid              0 getpid()
 *   read <path>      0 and the file's contents, or errno
 *   run <command>    exit status (128 + signal when killed) and the output of /bin/sh -c
 *   root <command>   the same, as the agent's own uid (root inside) even with --user
 *   sys <name>       the errno of a system call tried by name (0: it succeeded)
 *   hog <MiB>        status of a child that allocates and touches that much memory
 *   exit             exits without a reply
 * With --user UID:GID (as the jail starts the real agent), `run` runs its command as that
 * user, as the real agent does.
 * Built with musl-gcc -static: the sandbox's rootfs has no libc for it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/personality.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <unistd.h>

#define FD 3

static bool as_user;
static unsigned uid, gid;
static void reply(int code, const char *data, size_t len)
{
	char head[64];
	int n = snprintf(head, sizeof(head), "%d %zu\n", code, len);
	if (write(FD, head, (size_t)n) != n || (len && write(FD, data, len) != (ssize_t)len))
		_exit(1);
}

static void reply_str(int code, const char *s)
{
	reply(code, s, strlen(s));
}

static void cmd_read(const char *path)
{
	static char buf[65536];
	int fd = open(path, O_RDONLY);
	if (fd < 0) {
		reply(errno, NULL, 0);
		return;
	}
	size_t len = 0;
	ssize_t r;
	while (len < sizeof(buf) && (r = read(fd, buf + len, sizeof(buf) - len)) > 0)
		len += (size_t)r;
	close(fd);
	reply(0, buf, len);
}

static int status_code(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return 128 + WTERMSIG(status);
}

static void cmd_run(const char *command, bool drop)
{
	static char buf[1 << 20];
	int p[2];
	if (pipe(p) < 0) {
		reply(-errno, NULL, 0);
		return;
	}
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(p[0]);
		close(p[1]);
		reply(-e, NULL, 0);
		return;
	}
	if (pid == 0) {
		int null = open("/dev/null", O_RDONLY);
		dup2(null, 0);
		dup2(p[1], 1);
		dup2(p[1], 2);
		close(p[0]);
		close(p[1]);
		close(FD);
		if (drop && as_user &&
		    (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 ||
		     setresuid(uid, uid, uid) < 0))
			_exit(126);
		execl("/bin/sh", "sh", "-c", command, (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	size_t len = 0;
	ssize_t r;
	while ((r = read(p[0], buf + len, sizeof(buf) - len)) > 0 && len < sizeof(buf))
		len += (size_t)r;
	close(p[0]);
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	reply(status_code(status), buf, len);
}

static long try32(long nr, long a, long b, long c)
{
	long ret;
	/* A 32-bit system call from a 64-bit process: seccomp sees the i386 architecture. */
	__asm__ volatile("int $0x80" : "=a"(ret) : "a"(nr), "b"(a), "c"(b), "d"(c) : "memory");
	return ret;
}

static int cmd_sys(const char *name)
{
	long r = -1;
	errno = 0;
	if (strcmp(name, "keyctl") == 0)
		r = syscall(SYS_keyctl, 0 /* GET_KEYRING_ID */, -3 /* session */, 0);
	else if (strcmp(name, "keyctl32") == 0) {
		r = try32(288 /* i386 keyctl */, 0, -3, 0);
		if (r < 0 && r > -4096) {
			errno = (int)-r;
			r = -1;
		}
	} else if (strcmp(name, "mount") == 0)
		r = mount("none", "/tmp", "tmpfs", 0, NULL);
	else if (strcmp(name, "unshare_user") == 0)
		r = unshare(CLONE_NEWUSER);
	else if (strcmp(name, "unshare_net") == 0)
		r = unshare(CLONE_NEWNET);
	else if (strcmp(name, "ptrace") == 0)
		r = ptrace(PTRACE_TRACEME, 0, NULL, NULL);
	else if (strcmp(name, "bpf") == 0)
		r = syscall(SYS_bpf, 0, NULL, 0);
	else if (strcmp(name, "personality_unsafe") == 0)
		r = personality(ADDR_NO_RANDOMIZE);
	else if (strcmp(name, "personality_query") == 0)
		r = personality(0xffffffff);
	else if (strcmp(name, "clone3") == 0)
		r = syscall(435 /* clone3 */, NULL, 0);
	else if (strcmp(name, "setns") == 0)
		r = setns(-1, 0);
	else if (strcmp(name, "io_uring") == 0)
		r = syscall(425 /* io_uring_setup */, 1, NULL);
	else if (strcmp(name, "io_setup") == 0) {
		unsigned long ctx = 0;
		r = syscall(SYS_io_setup, 8, &ctx);
	} else if (strcmp(name, "mknod") == 0)
		r = mknod("/tmp/node", S_IFCHR | 0600, makedev(1, 3));
	else if (strcmp(name, "rawsock") == 0)
		r = socket(AF_INET, SOCK_RAW, IPPROTO_ICMP);
	else if (strcmp(name, "tiocsti") == 0) {
		/* On a pipe: the kernel's answer would be ENOTTY, the filter's comes first. */
		int fds[2];
		char c = 'x';
		r = pipe(fds) < 0 ? -1 : ioctl(fds[0], TIOCSTI, &c);
	} else if (strcmp(name, "tiocsti_high") == 0) {
		/* The kernel reads the command as 32 bits: the upper ones must not get it past. */
		int fds[2];
		char c = 'x';
		r = pipe(fds) < 0 ? -1 : (int)syscall(SYS_ioctl, fds[0], (1UL << 32) | TIOCSTI, &c);
	} else if (strcmp(name, "fionread") == 0) {
		int fds[2], n = -1;
		r = pipe(fds) < 0 ? -1 : ioctl(fds[0], FIONREAD, &n);
	} else if (strcmp(name, "chroot") == 0)
		r = chroot("/");
	else
		return -1;
	return r < 0 ? errno : 0;
}

static void cmd_hog(long mib)
{
	pid_t pid = fork();
	if (pid == 0) {
		for (long i = 0; i < mib; i++) {
			char *p = malloc(1 << 20);
			if (!p)
				_exit(2);
			memset(p, 1, 1 << 20);
		}
		_exit(0);
	}
	int status = 0;
	if (pid > 0)
		while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
			;
	reply(pid < 0 ? -errno : status_code(status), NULL, 0);
}

int main(int argc, char **argv)
{
	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "--user") == 0 && sscanf(argv[i + 1], "%u:%u", &uid, &gid) == 2)
			as_user = true;
	static char line[4096];
	size_t len = 0;
	signal(SIGPIPE, SIG_IGN);
	for (;;) {
		char *nl = memchr(line, '\n', len);
		if (!nl) {
			if (len == sizeof(line))
				return 2;
			ssize_t r = read(FD, line + len, sizeof(line) - len);
			if (r <= 0)
				return 0;
			len += (size_t)r;
			continue;
		}
		*nl = '\0';
		char buf[64];
		if (strcmp(line, "ping") == 0) {
			reply_str(0, "pong");
		} else if (strcmp(line, "pid") == 0) {
			snprintf(buf, sizeof(buf), "%d", (int)getpid());
			reply_str(0, buf);
		} else if (strncmp(line, "read ", 5) == 0) {
			cmd_read(line + 5);
		} else if (strncmp(line, "run ", 4) == 0) {
			cmd_run(line + 4, true);
		} else if (strncmp(line, "root ", 5) == 0) {
			cmd_run(line + 5, false);
		} else if (strncmp(line, "sys ", 4) == 0) {
			int e = cmd_sys(line + 4);
			reply(e, NULL, 0);
		} else if (strncmp(line, "hog ", 4) == 0) {
			cmd_hog(atol(line + 4));
		} else if (strcmp(line, "exit") == 0) {
			_exit(0);
		} else {
			reply_str(-1, "unknown command");
		}
		size_t used = (size_t)(nl + 1 - line);
		memmove(line, nl + 1, len - used);
		len -= used;
	}
}
