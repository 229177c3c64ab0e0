/* bench/density --baseline: holders of what a jail's kernel side is made of, without
 * agent-sandbox, to measure what the kernel and the host charge for that many of them.
 *
 * Usage: bench-density-holders CGROUP-DIR
 * Each line read on stdin makes one holder and answers "ok" or "error: ..." on stdout. A
 * holder is one process in new user (root mapped to root), mount, pid (it is its init),
 * network, ipc, uts and cgroup namespaces, in a memory cgroup of its own (CGROUP-DIR/hN, a
 * directory of a v1 memory hierarchy or of a v2 one with the memory controller enabled),
 * with procfs, two tmpfs and a devpts instance mounted: with the ipc namespace's mqueue,
 * five superblocks, as a jail with tmpfs storage has. At end of input the holders are killed,
 * reaped and their cgroups removed; they also die with this process (parent-death signal). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define STACK_BYTES (64u << 10)

struct holder_args {
	int go;    /* read end: a byte once the parent has mapped ids and placed it */
	int ready; /* write end: errno as an int, 0 once everything is mounted */
};

static int write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = write(fd, text, strlen(text));
	int e = n < 0 ? -errno : 0;
	close(fd);
	return e;
}

static int holder_main(void *arg)
{
	const struct holder_args *h = arg;
	int err = 0;
	char byte;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (read(h->go, &byte, 1) != 1)
		_exit(1);
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0 ||
	    mount("none", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m") < 0 ||
	    mount("none", "/mnt", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m") < 0 ||
	    mount("none", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance") < 0)
		err = errno;
	if (write(h->ready, &err, sizeof(err)) != sizeof(err) || err)
		_exit(1);
	close(h->ready);
	for (;;)
		pause();
}

static int make_holder(const char *dir, unsigned i, pid_t *out)
{
	static char stack[STACK_BYTES];
	char path[512], text[64];
	int go[2], ready[2];

	snprintf(path, sizeof(path), "%s/h%u", dir, i);
	if (mkdir(path, 0755) < 0)
		return -errno;
	if (pipe2(go, O_CLOEXEC) < 0)
		return -errno;
	if (pipe2(ready, O_CLOEXEC) < 0) {
		int e = -errno;
		close(go[0]);
		close(go[1]);
		return e;
	}
	struct holder_args h = { .go = go[0], .ready = ready[1] };
	pid_t pid = clone(holder_main, stack + sizeof(stack),
			  CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
				  CLONE_NEWUTS | CLONE_NEWCGROUP | SIGCHLD,
			  &h);
	int e = pid < 0 ? -errno : 0;
	close(go[0]);
	close(ready[1]);
	if (e) {
		snprintf(path, sizeof(path), "%s/h%u", dir, i);
		rmdir(path);
	} else {
		*out = pid;
		snprintf(text, sizeof(text), "%d", (int)pid);
		char map[64];
		snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
		snprintf(map, sizeof(map), "0 0 1");
		e = write_file(path, map);
		snprintf(path, sizeof(path), "/proc/%d/setgroups", (int)pid);
		if (!e)
			e = write_file(path, "deny");
		snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
		if (!e)
			e = write_file(path, map);
		snprintf(path, sizeof(path), "%s/h%u/cgroup.procs", dir, i);
		if (!e)
			e = write_file(path, text);
		if (!e && write(go[1], "g", 1) != 1)
			e = -errno;
		int err = 0;
		if (!e && read(ready[0], &err, sizeof(err)) != sizeof(err))
			e = -EPIPE;
		if (!e && err)
			e = -err;
	}
	close(go[1]);
	close(ready[0]);
	return e;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s CGROUP-DIR\n", argv[0]);
		return 2;
	}
	const char *dir = argv[1];
	size_t cap = 1024, n = 0;
	pid_t *pids = malloc(cap * sizeof(*pids));
	char line[64];
	if (!pids)
		return 1;

	setvbuf(stdout, NULL, _IOLBF, 0);
	while (fgets(line, sizeof(line), stdin)) {
		if (n == cap) {
			pid_t *more = realloc(pids, 2 * cap * sizeof(*pids));
			if (!more) {
				printf("error: out of memory\n");
				continue;
			}
			pids = more;
			cap *= 2;
		}
		pid_t pid = -1;
		int e = make_holder(dir, (unsigned)n, &pid);
		if (pid > 0)
			pids[n++] = pid;
		if (e)
			printf("error: holder %zu: %s\n", n, strerror(-e));
		else
			printf("ok\n");
	}
	for (size_t i = 0; i < n; i++)
		kill(pids[i], SIGKILL);
	for (size_t i = 0; i < n; i++)
		waitpid(pids[i], NULL, 0);
	/* The kernel finishes a cgroup's last exit asynchronously: retry a moment. */
	for (size_t i = 0; i < n; i++) {
		char path[512];
		snprintf(path, sizeof(path), "%s/h%zu", dir, i);
		for (int k = 0; k < 200 && rmdir(path) < 0 && errno == EBUSY; k++)
			usleep(10000);
	}
	free(pids);
	return 0;
}
