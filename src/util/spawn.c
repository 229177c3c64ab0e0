#include "util/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/time.h"

char *spawn_find_binary(const char *bin)
{
	if (strchr(bin, '/'))
		return access(bin, X_OK) == 0 ? xstrdup(bin) : NULL;
	const char *path = getenv("PATH");
	if (!path || !*path)
		path = "/usr/local/bin:/usr/bin:/bin";
	_cleanup_free_ char *copy = xstrdup(path);
	char *save = NULL;
	for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		char *p = xasprintf("%s/%s", *d ? d : ".", bin);
		if (access(p, X_OK) == 0)
			return p;
		free(p);
	}
	return NULL;
}

int spawn_run_bounded(char *const argv[], int timeout_ms, char *out, size_t cap)
{
	static char *const env[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL };
	int p[2];
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(p[0]);
		close(p[1]);
		return -e;
	}
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		sigset_t none;
		sigemptyset(&none);
		sigprocmask(SIG_SETMASK, &none, NULL);
		int devnull = open("/dev/null", O_RDWR);
		if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(p[1], 1) < 0 || dup2(p[1], 2) < 0)
			_exit(127);
		syscall(SYS_close_range, 3U, ~0U, 4U /* CLOSE_RANGE_CLOEXEC */);
		execve(argv[0], argv, env);
		_exit(127);
	}
	close(p[1]);
	uint64_t deadline = time_deadline(timeout_ms);
	size_t len = 0;
	bool timed_out = false;
	char sink[1024];
	for (;;) {
		int left = time_left_ms(deadline);
		if (left <= 0) {
			timed_out = true;
			break;
		}
		struct pollfd pfd = { .fd = p[0], .events = POLLIN };
		int r = poll(&pfd, 1, left);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			timed_out = r == 0;
			break;
		}
		char *dst = out && len + 1 < cap ? out + len : sink;
		size_t room = out && len + 1 < cap ? cap - 1 - len : sizeof(sink);
		ssize_t n = read(p[0], dst, room);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (dst != sink)
			len += (size_t)n;
	}
	close(p[0]);
	if (out && cap)
		out[len] = '\0';
	if (timed_out)
		kill(pid, SIGKILL);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return timed_out ? -ETIMEDOUT : status;
}
