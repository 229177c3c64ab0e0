/* bench/density --baseline: holders of what a jail's kernel side is made of, without
 * agent-sandbox, to measure what the kernel and the host charge for that many of them.
 *
 * Usage: bench-density-holders CGROUP-DIR...
 * Each line read on stdin makes one holder and answers "ok" or "error: ..." on stdout. A
 * holder is one process in new user (root mapped to root), mount, pid (it is its init),
 * network, ipc, uts and cgroup namespaces, placed in a cgroup of its own below each
 * CGROUP-DIR (DIR/hN: the memory, cpu and pids hierarchies of cgroup v1, or one directory of
 * v2 with those controllers enabled) with the limits a sandbox gets where the files exist (a
 * CPU quota of half a CPU, a pids limit). It pivots into a tmpfs root of its own and mounts
 * procfs, a tmpfs on /tmp and a devpts instance: with the ipc namespace's mqueue, five
 * superblocks, as a jail with tmpfs storage has. At end of input the holders are killed,
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
#include <sys/syscall.h>
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

/* procfs is mounted before the pivot: in a user namespace the kernel allows a new one only
 * while a full procfs is in view (the jail mounts its own the same way, beforehand). */
static int holder_setup(void)
{
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
	    mount("none", "/mnt", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m,mode=755") < 0 ||
	    mkdir("/mnt/proc", 0555) < 0 || mkdir("/mnt/tmp", 01777) < 0 ||
	    mkdir("/mnt/dev", 0755) < 0 || mkdir("/mnt/dev/pts", 0755) < 0 ||
	    mount("proc", "/mnt/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0 ||
	    chdir("/mnt") < 0 || syscall(SYS_pivot_root, ".", ".") < 0 ||
	    umount2(".", MNT_DETACH) < 0 || chdir("/") < 0 ||
	    mount("none", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "size=1m") < 0 ||
	    mount("none", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance") < 0)
		return errno;
	return 0;
}

static int holder_main(void *arg)
{
	const struct holder_args *h = arg;
	char byte;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (read(h->go, &byte, 1) != 1)
		_exit(1);
	int err = holder_setup();
	if (write(h->ready, &err, sizeof(err)) != sizeof(err) || err)
		_exit(1);
	close(h->ready);
	for (;;)
		pause();
}

/* Writes `text` to DIR/hN/name if that file exists (the controller is there). */
static int write_limit(const char *dir, unsigned i, const char *name, const char *text)
{
	char path[512];
	snprintf(path, sizeof(path), "%s/h%u/%s", dir, i, name);
	if (access(path, F_OK) < 0)
		return 0;
	return write_file(path, text);
}

/* Makes DIR/hN below each directory, with a sandbox's limits where they apply. */
static int make_cgroups(char **dirs, int ndirs, unsigned i)
{
	char path[512];
	for (int k = 0; k < ndirs; k++) {
		snprintf(path, sizeof(path), "%s/h%u", dirs[k], i);
		if (mkdir(path, 0755) < 0)
			return -errno;
		int e = write_limit(dirs[k], i, "cpu.cfs_quota_us", "50000");
		if (!e)
			e = write_limit(dirs[k], i, "cpu.max", "50000 100000");
		if (!e)
			e = write_limit(dirs[k], i, "pids.max", "1024");
		if (e)
			return e;
	}
	return 0;
}

static void remove_cgroups(char **dirs, int ndirs, unsigned i)
{
	char path[512];
	for (int k = 0; k < ndirs; k++) {
		snprintf(path, sizeof(path), "%s/h%u", dirs[k], i);
		/* The kernel finishes a cgroup's last exit asynchronously: retry a moment. */
		for (int t = 0; t < 200 && rmdir(path) < 0 && errno == EBUSY; t++)
			usleep(10000);
	}
}

static int make_holder(char **dirs, int ndirs, unsigned i, pid_t *out)
{
	static char stack[STACK_BYTES];
	char path[512], text[64];
	int go[2], ready[2];

	int e = make_cgroups(dirs, ndirs, i);
	if (e) {
		remove_cgroups(dirs, ndirs, i);
		return e;
	}
	if (pipe2(go, O_CLOEXEC) < 0) {
		e = -errno;
		remove_cgroups(dirs, ndirs, i);
		return e;
	}
	if (pipe2(ready, O_CLOEXEC) < 0) {
		e = -errno;
		close(go[0]);
		close(go[1]);
		remove_cgroups(dirs, ndirs, i);
		return e;
	}
	struct holder_args h = { .go = go[0], .ready = ready[1] };
	pid_t pid = clone(holder_main, stack + sizeof(stack),
			  CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC |
				  CLONE_NEWUTS | CLONE_NEWCGROUP | SIGCHLD,
			  &h);
	e = pid < 0 ? -errno : 0;
	close(go[0]);
	close(ready[1]);
	if (e) {
		remove_cgroups(dirs, ndirs, i);
	} else {
		*out = pid;
		snprintf(path, sizeof(path), "/proc/%d/uid_map", (int)pid);
		e = write_file(path, "0 0 1");
		snprintf(path, sizeof(path), "/proc/%d/setgroups", (int)pid);
		if (!e)
			e = write_file(path, "deny");
		snprintf(path, sizeof(path), "/proc/%d/gid_map", (int)pid);
		if (!e)
			e = write_file(path, "0 0 1");
		snprintf(text, sizeof(text), "%d", (int)pid);
		for (int k = 0; k < ndirs && !e; k++) {
			snprintf(path, sizeof(path), "%s/h%u/cgroup.procs", dirs[k], i);
			e = write_file(path, text);
		}
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
	if (argc < 2) {
		fprintf(stderr, "usage: %s CGROUP-DIR...\n", argv[0]);
		return 2;
	}
	char **dirs = argv + 1;
	int ndirs = argc - 1;
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
		int e = make_holder(dirs, ndirs, (unsigned)n, &pid);
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
	for (size_t i = 0; i < n; i++)
		remove_cgroups(dirs, ndirs, (unsigned)i);
	free(pids);
	return 0;
}
