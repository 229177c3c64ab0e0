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

/* The plan of a helper program: it dies with its parent thread (SOP_PARENT_DEATH), reads
 * /dev/null, writes into `out`, and runs argv with a plain PATH. */
static void helper_plan(struct spawn_plan *plan, char *const argv[], int devnull, int out)
{
	static char *const env[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL };
	spawn_plan_fd(plan, devnull, 0, true);
	spawn_plan_fd(plan, out, 1, true);
	spawn_plan_fd(plan, out, 2, true);
	plan->argv = argv;
	plan->envp = env;
	spawn_plan_add(plan, SOP_PARENT_DEATH, "die with its parent");
	spawn_plan_add(plan, SOP_SIGNALS, "reset signals");
	struct spawn_op *op = spawn_plan_add(plan, SOP_EXEC, "execute");
	op->src = argv[0];
}

int spawn_run_bounded(char *const argv[], int timeout_ms, char *out, size_t cap)
{
	_cleanup_close_ int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (devnull < 0)
		return -errno;
	_cleanup_close_pair_ int p[2] = { -1, -1 };
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	struct spawn_plan plan;
	spawn_plan_init(&plan, "spawn");
	helper_plan(&plan, argv, devnull, p[1]);
	uint64_t deadline = time_deadline(timeout_ms);
	struct spawn_child c = { .pid = 0, .pidfd = -1, .report = -1 };
	struct err e;
	int r = spawn_start(&plan, 0, -1, &c, &e);
	if (r == 0)
		r = spawn_wait(&plan, &c, timeout_ms, &e);
	spawn_plan_free(&plan);
	if (r < 0) {
		if (c.pid > 0) {
			spawn_kill(c.pid, c.pidfd);
			spawn_reap(c.pid, c.pidfd);
			spawn_child_close(&c);
		}
		return r;
	}
	pid_t pid = c.pid;
	spawn_child_close(&c);
	close(TAKE_FD(p[1]));
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
		r = poll(&pfd, 1, left);
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
	close(TAKE_FD(p[0]));
	if (out && cap)
		out[len] = '\0';
	if (timed_out)
		kill(pid, SIGKILL);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	return timed_out ? -ETIMEDOUT : status;
}
