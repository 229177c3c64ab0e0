/* agent: process-wide services: clock, signals, child reaping and cleanup, logging. */
#include "agent.h"

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util/cleanup.h"

int64_t agent_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void agent_log(const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	fprintf(stderr, "%s: %s\n", AGENT_NAME, buf);
}

const char *agent_signame(int sig, char buf[16])
{
	static const char *const names[] = {
		[SIGHUP] = "SIGHUP",       [SIGINT] = "SIGINT",       [SIGQUIT] = "SIGQUIT",
		[SIGILL] = "SIGILL",       [SIGTRAP] = "SIGTRAP",     [SIGABRT] = "SIGABRT",
		[SIGBUS] = "SIGBUS",       [SIGFPE] = "SIGFPE",       [SIGKILL] = "SIGKILL",
		[SIGUSR1] = "SIGUSR1",     [SIGSEGV] = "SIGSEGV",     [SIGUSR2] = "SIGUSR2",
		[SIGPIPE] = "SIGPIPE",     [SIGALRM] = "SIGALRM",     [SIGTERM] = "SIGTERM",
		[SIGSTKFLT] = "SIGSTKFLT", [SIGCHLD] = "SIGCHLD",     [SIGCONT] = "SIGCONT",
		[SIGSTOP] = "SIGSTOP",     [SIGTSTP] = "SIGTSTP",     [SIGTTIN] = "SIGTTIN",
		[SIGTTOU] = "SIGTTOU",     [SIGURG] = "SIGURG",       [SIGXCPU] = "SIGXCPU",
		[SIGXFSZ] = "SIGXFSZ",     [SIGVTALRM] = "SIGVTALRM", [SIGPROF] = "SIGPROF",
		[SIGWINCH] = "SIGWINCH",   [SIGIO] = "SIGIO",         [SIGPWR] = "SIGPWR",
		[SIGSYS] = "SIGSYS",
	};
	if (sig > 0 && (size_t)sig < ARRAY_SIZE(names) && names[sig])
		return names[sig];
	if (sig >= SIGRTMIN && sig <= SIGRTMAX)
		snprintf(buf, 16, "SIGRTMIN+%d", sig - SIGRTMIN);
	else
		snprintf(buf, 16, "SIG%d", sig);
	return buf;
}

static void reap(struct agent *a)
{
	for (;;) {
		int status;
		pid_t pid = waitpid(-1, &status, WNOHANG);
		if (pid <= 0)
			return;
		/* Record the exit for the operation waiting on it; anything else (orphans
		 * adopted as PID 1 or subreaper, children of finished commands) is just reaped. */
		if (procs_child_exit(a, pid, status))
			continue;
		struct conn *c = a->conn;
		for (size_t i = 0; c && i < c->nops; i++) {
			struct op *op = c->ops[i];
			if (op->child == pid) {
				op->child = 0;
				if (op->vt->child_exit)
					op->vt->child_exit(op, status);
				break;
			}
		}
	}
}

void agent_handle_signals(struct agent *a)
{
	unsigned char sigs[64];
	ssize_t n;
	while ((n = read(a->sigpipe[0], sigs, sizeof(sigs))) > 0) {
		for (ssize_t i = 0; i < n; i++) {
			if (sigs[i] == SIGTERM || sigs[i] == SIGINT)
				a->stop = true;
		}
	}
	/* Reap on every wake-up, not only on SIGCHLD: cheap, and robust against a lost
	 * notification when the pipe was full. */
	reap(a);
}

/* Children of this process according to /proc (they may not have been started by us:
 * orphans are adopted by PID 1 and by a subreaper). */
static size_t list_children(pid_t *out, size_t max)
{
	_cleanup_closedir_ DIR *d = opendir("/proc");
	if (!d)
		return 0;
	pid_t self = getpid();
	size_t n = 0;
	struct dirent *de;
	while (n < max && (de = readdir(d))) {
		char *end;
		long pid = strtol(de->d_name, &end, 10);
		if (*end || pid <= 0)
			continue;
		char path[64], buf[512];
		snprintf(path, sizeof(path), "/proc/%ld/stat", pid);
		_cleanup_fclose_ FILE *f = fopen(path, "re");
		if (!f || !fgets(buf, sizeof(buf), f))
			continue;
		/* "pid (comm) state ppid ...": comm may contain anything, so parse after the
		 * last ')'. */
		char *p = strrchr(buf, ')');
		char state;
		long ppid;
		if (p && sscanf(p + 1, " %c %ld", &state, &ppid) == 2 && ppid == self)
			out[n++] = (pid_t)pid;
	}
	return n;
}

void agent_kill_children(struct agent *a)
{
	int64_t end = agent_now_ns() + 2000000000LL;
	for (;;) {
		pid_t kids[256];
		size_t n = list_children(kids, ARRAY_SIZE(kids));
		for (size_t i = 0; i < n; i++) {
			/* Their whole process group too: commands run in groups of their own. */
			kill(-kids[i], SIGKILL);
			kill(kids[i], SIGKILL);
		}
		int status;
		pid_t pid;
		while ((pid = waitpid(-1, &status, WNOHANG)) > 0)
			;
		if (pid < 0 && errno == ECHILD)
			return;
		if (agent_now_ns() >= end)
			return;
		struct timespec ts = { 0, 10 * 1000000L };
		nanosleep(&ts, NULL);
	}
}
