/* The session tests' driver (fake_driver.h). */
#include "fake_driver.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/cleanup.h"

/* A sandbox of this driver: its agent, and the real agent's workspace. */
struct fake_sandbox {
	pid_t pid;
	char *workspace; /* NULL for the fake agent */
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t released;
	char *agent, *fake_agent, *dir;
	int fail_errnum;
	char *script;
	bool hold, hold_destroy;
	struct fake_counts counts;
	pid_t last_pid;
	struct sandbox_limits last_limits;
	uint64_t oom_kills;
} F = { .lock = PTHREAD_MUTEX_INITIALIZER, .released = PTHREAD_COND_INITIALIZER };

void fake_driver_setup(const char *agent, const char *fake_agent, const char *dir)
{
	F.agent = xstrdup(agent);
	F.fake_agent = xstrdup(fake_agent);
	F.dir = xstrdup(dir);
}

void fake_driver_plan(const struct fake_plan *plan)
{
	pthread_mutex_lock(&F.lock);
	F.fail_errnum = plan->fail_errnum;
	free(F.script);
	F.script = plan->script ? xstrdup(plan->script) : NULL;
	F.hold = plan->hold;
	F.hold_destroy = plan->hold_destroy;
	pthread_mutex_unlock(&F.lock);
}

void fake_driver_release(void)
{
	pthread_mutex_lock(&F.lock);
	F.hold = false;
	F.hold_destroy = false;
	pthread_cond_broadcast(&F.released);
	pthread_mutex_unlock(&F.lock);
}

void fake_driver_counts(struct fake_counts *ret)
{
	pthread_mutex_lock(&F.lock);
	*ret = F.counts;
	pthread_mutex_unlock(&F.lock);
}

pid_t fake_driver_last_pid(void)
{
	pthread_mutex_lock(&F.lock);
	pid_t pid = F.last_pid;
	pthread_mutex_unlock(&F.lock);
	return pid;
}

void fake_driver_last_limits(struct sandbox_limits *ret)
{
	pthread_mutex_lock(&F.lock);
	*ret = F.last_limits;
	pthread_mutex_unlock(&F.lock);
}

void fake_driver_count_oom_kill(void)
{
	pthread_mutex_lock(&F.lock);
	F.oom_kills++;
	pthread_mutex_unlock(&F.lock);
}

/* Starts the agent on fd; argv is built before the fork, the child only execs. */
static pid_t spawn_agent(int fd, const char *script, const char *workspace)
{
	char fds[16];
	snprintf(fds, sizeof(fds), "%d", fd);
	const char *argv[7] = { NULL };
	if (script) {
		argv[0] = F.fake_agent;
		argv[1] = "--fd";
		argv[2] = fds;
		argv[3] = "--script";
		argv[4] = script;
	} else {
		argv[0] = F.agent;
		argv[1] = "--fd";
		argv[2] = fds;
		argv[3] = "--workspace";
		argv[4] = workspace;
	}
	pid_t pid = fork();
	if (pid == 0) {
		/* The agent's end must survive the exec; every other descriptor is CLOEXEC. */
		fcntl(fd, F_SETFD, 0);
		execv(argv[0], (char *const *)argv);
		_exit(127);
	}
	return pid;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	remove(path);
	return 0;
}

static void fake_free(struct fake_sandbox *fs)
{
	if (fs->workspace) {
		nftw(fs->workspace, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
		free(fs->workspace);
	}
	free(fs);
}

static int fake_create(const struct config *cfg, const struct sandbox_spec *spec,
		       struct sandbox **ret, struct err *err)
{
	pthread_mutex_lock(&F.lock);
	F.counts.calls++;
	F.last_limits = spec->limits;
	F.counts.held++;
	while (F.hold)
		pthread_cond_wait(&F.released, &F.lock);
	F.counts.held--;
	int fail = F.fail_errnum;
	_cleanup_free_ char *script = F.script ? xstrdup(F.script) : NULL;
	pthread_mutex_unlock(&F.lock);
	if (fail)
		return err_set(err, fail, "the fake driver was told to fail (%s)", err_name(fail));

	struct fake_sandbox *fs = xcalloc(1, sizeof(*fs));
	if (!script) {
		fs->workspace = xasprintf("%s/ws-XXXXXX", F.dir);
		if (!mkdtemp(fs->workspace)) {
			int r = err_sys(err, errno, "mkdtemp");
			free(fs->workspace);
			free(fs);
			return r;
		}
	}
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		int r = err_sys(err, errno, "socketpair");
		fake_free(fs);
		return r;
	}
	fs->pid = spawn_agent(sv[1], script, fs->workspace);
	close(sv[1]);
	if (fs->pid < 0) {
		int r = err_sys(err, errno, "fork");
		close(sv[0]);
		fake_free(fs);
		return r;
	}

	struct sandbox *sb = xcalloc(1, sizeof(*sb));
	sb->driver = &fake_driver;
	sb->id = xstrdup(spec->id);
	sb->agent_fd = sv[0];
	sb->pid = fs->pid;
	sb->record = json_pack("{s:i}", "pid", (int)fs->pid);
	sb->priv = fs;
	pthread_mutex_lock(&F.lock);
	F.counts.created++;
	F.last_pid = fs->pid;
	pthread_mutex_unlock(&F.lock);
	*ret = sb;
	return 0;
}

static void fake_destroy(struct sandbox *sb)
{
	struct fake_sandbox *fs = sb->priv;
	pthread_mutex_lock(&F.lock);
	F.counts.destroys_held++;
	while (F.hold_destroy)
		pthread_cond_wait(&F.released, &F.lock);
	F.counts.destroys_held--;
	pthread_mutex_unlock(&F.lock);
	/* The real agent kills its commands on SIGTERM before it leaves. */
	kill(fs->pid, SIGTERM);
	waitpid(fs->pid, NULL, 0);
	if (sb->agent_fd >= 0)
		close(sb->agent_fd);
	fake_free(fs);
	json_decref(sb->record);
	free(sb->id);
	free(sb);
	pthread_mutex_lock(&F.lock);
	F.counts.destroyed++;
	pthread_mutex_unlock(&F.lock);
}

static uint64_t fake_oom_kills(struct sandbox *sb)
{
	pthread_mutex_lock(&F.lock);
	uint64_t n = F.oom_kills;
	pthread_mutex_unlock(&F.lock);
	return n;
}

const struct driver fake_driver = {
	.name = "fake",
	.isolation = "container",
	.create = fake_create,
	.destroy = fake_destroy,
	.oom_kills = fake_oom_kills,
};
