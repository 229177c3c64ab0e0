/* Tests of src/util/spawn.{c,h}: the plan-based child (its descriptors, a failing step's
 * report, optional steps, a child killed during setup) and the bounded helper run. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/cleanup.h"
#include "util/spawn.h"

/* Runs `plan` to its end in a child made with clone flags `flags`; returns spawn_wait's
 * result and the child's wait status. */
static int run_ns(struct spawn_plan *plan, uint64_t flags, int *status, struct err *e)
{
	struct spawn_child c;
	int r = spawn_start(plan, flags, -1, &c, e);
	assert_int_equal(r, 0);
	r = spawn_wait(plan, &c, 10000, e);
	*status = spawn_reap(c.pid, c.pidfd);
	spawn_child_close(&c);
	return r;
}

static int run(struct spawn_plan *plan, int *status, struct err *e)
{
	return run_ns(plan, 0, status, e);
}

static char *read_all(int fd)
{
	char *buf = xcalloc(1, 4096);
	size_t len = 0;
	ssize_t n;
	while (len < 4095 && (n = read(fd, buf + len, 4095 - len)) > 0)
		len += (size_t)n;
	return buf;
}

/* fchdir(fd) in the child before its exec: ENOTDIR when fd is open (on /dev/null), EBADF
 * when it is not. */
static int probe_fd(struct spawn_plan *plan, int fd)
{
	plan->n = 0;
	struct spawn_op *op = spawn_plan_add(plan, SOP_CHDIR, "fchdir");
	op->fd = fd;
	spawn_plan_add(plan, SOP_EXIT, "exit");
	struct err e = { 0 };
	int status;
	return run(plan, &status, &e);
}

/* The child gets exactly the descriptors of its plan: kept ones across the exec, the others
 * until the exec, none of the parent's other descriptors (even those without FD_CLOEXEC). */
static void test_descriptors(void **state)
{
	int out[2];
	assert_int_equal(pipe2(out, O_CLOEXEC), 0);
	/* No O_CLOEXEC: a careless thread's. */
	int leak = open("/dev/null", O_RDONLY);
	assert_int_equal(dup2(leak, 9), 9);
	int until_exec = open("/dev/null", O_RDONLY | O_CLOEXEC);
	struct spawn_plan plan;
	spawn_plan_init(&plan, "test");
	spawn_plan_fd(&plan, out[1], 7, true);
	spawn_plan_fd(&plan, out[1], 1, true);
	spawn_plan_fd(&plan, until_exec, 5, false);

	assert_int_equal(probe_fd(&plan, 5), -ENOTDIR);
	for (int fd = 3; fd < 64; fd++)
		if (fd != 5 && fd != 7 && fd != 8 /* the report pipe */)
			assert_int_equal(probe_fd(&plan, fd), -EBADF);

	/* Across the exec: 7 and 1 stay, 5 goes. */
	char *argv[] = { "/bin/sh", "-c",
			 "echo out >&7; { echo leaked >&5; } 2>/dev/null && echo open 5; exit 0",
			 NULL };
	char *envp[] = { NULL };
	plan.argv = argv;
	plan.envp = envp;
	plan.n = 0;
	struct spawn_op *op = spawn_plan_add(&plan, SOP_EXEC, "exec");
	op->src = argv[0];
	struct err e = { 0 };
	int status;
	assert_int_equal(run(&plan, &status, &e), 0);
	assert_int_equal(status, 0);
	close(out[1]);
	_cleanup_free_ char *got = read_all(out[0]);
	assert_string_equal(got, "out\n");
	close(out[0]);
	close(9);
	close(leak);
	close(until_exec);
	spawn_plan_free(&plan);
}

/* A failing step names itself and its errno; an optional step may miss its path. */
static void test_failing_and_optional_steps(void **state)
{
	struct spawn_plan plan;
	spawn_plan_init(&plan, "test");
	struct spawn_op *op = spawn_plan_add(&plan, SOP_CHDIR, "chdir /nonexistent-a");
	op->dst = "/nonexistent-a";
	op->optional = true;
	op = spawn_plan_add(&plan, SOP_CHDIR, "chdir /nonexistent-b");
	op->dst = "/nonexistent-b";
	spawn_plan_add(&plan, SOP_EXIT, "exit");
	struct err e = { 0 };
	int status;
	assert_int_equal(run(&plan, &status, &e), -ENOENT);
	assert_string_equal(e.msg, "test: chdir /nonexistent-b: No such file or directory");
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 127);

	/* Without the second step the plan reaches its exit. */
	plan.n = 1;
	spawn_plan_add(&plan, SOP_EXIT, "exit");
	assert_int_equal(run(&plan, &status, &e), 0);
	assert_int_equal(status, 0);

	/* A plan with no end is a bug, reported as such. */
	plan.n = 1;
	assert_int_equal(run(&plan, &status, &e), -EINVAL);
	assert_string_equal(e.msg, "test: setup: Invalid argument");
	spawn_plan_free(&plan);
}

static void test_write_and_exec_failure(void **state)
{
	char dir[] = "/tmp/test-spawn-XXXXXX";
	assert_non_null(mkdtemp(dir));
	_cleanup_free_ char *file = xasprintf("%s/procs", dir);
	assert_int_equal(close(open(file, O_WRONLY | O_CREAT, 0600)), 0);

	char *argv[] = { "/nonexistent/binary", NULL };
	char *envp[] = { NULL };
	struct spawn_plan plan;
	spawn_plan_init(&plan, "test");
	plan.argv = argv;
	plan.envp = envp;
	struct spawn_op *op = spawn_plan_add(&plan, SOP_WRITE, "write");
	op->dst = file;
	op->src = "0";
	op = spawn_plan_add(&plan, SOP_EXEC, "exec");
	op->src = argv[0];
	struct err e = { 0 };
	int status;
	assert_int_equal(run(&plan, &status, &e), -ENOENT);
	assert_string_equal(e.msg, "test: exec: No such file or directory");
	_cleanup_fclose_ FILE *f = fopen(file, "r");
	char buf[8] = { 0 };
	assert_non_null(fgets(buf, sizeof(buf), f));
	assert_string_equal(buf, "0");
	unlink(file);
	rmdir(dir);
	spawn_plan_free(&plan);
}

/* A plan that waits for a byte on go[0] (made here), then exits. */
static void waiting_plan(struct spawn_plan *plan, int go[2])
{
	assert_int_equal(pipe2(go, O_CLOEXEC), 0);
	spawn_plan_init(plan, "test");
	spawn_plan_fd(plan, go[0], 3, false);
	struct spawn_op *op = spawn_plan_add(plan, SOP_WAIT_BYTE, "wait");
	op->fd = 3;
	spawn_plan_add(plan, SOP_EXIT, "exit");
}

/* A child that dies during setup (here, killed while it waits) is not taken for a success. */
static void test_killed_during_setup(void **state)
{
	int go[2];
	struct spawn_plan plan;
	waiting_plan(&plan, go);
	struct spawn_child c;
	struct err e = { 0 };
	assert_int_equal(spawn_start(&plan, 0, -1, &c, &e), 0);
	spawn_kill(c.pid, c.pidfd);
	int r = spawn_wait(&plan, &c, 10000, &e);
	if (c.pidfd >= 0) {
		assert_int_equal(r, -ECHILD);
		assert_non_null(strstr(e.msg, "killed by signal 9"));
	}
	int status = spawn_reap(c.pid, c.pidfd);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	spawn_child_close(&c);

	/* The go-ahead's end of file: ECANCELED. */
	assert_int_equal(spawn_start(&plan, 0, -1, &c, &e), 0);
	close(go[1]);
	assert_int_equal(spawn_wait(&plan, &c, 10000, &e), -ECANCELED);
	spawn_reap(c.pid, c.pidfd);
	spawn_child_close(&c);
	close(go[0]);
	spawn_plan_free(&plan);
}

/* A setup that never ends is cut off at the timeout. */
static void test_setup_timeout(void **state)
{
	int go[2];
	struct spawn_plan plan;
	waiting_plan(&plan, go);
	struct spawn_child c;
	struct err e = { 0 };
	assert_int_equal(spawn_start(&plan, 0, -1, &c, &e), 0);
	assert_int_equal(spawn_wait(&plan, &c, 50, &e), -ETIMEDOUT);
	assert_string_equal(e.msg, "test: setup took longer than 50 ms");
	/* The caller's own failure after a child's: the child's reason wins. */
	assert_int_equal(spawn_abort(&plan, &c, -EIO, &e), -EIO);
	spawn_reap(c.pid, c.pidfd);
	spawn_child_close(&c);
	close(go[0]);
	close(go[1]);
	spawn_plan_free(&plan);
}

static void test_run_bounded(void **state)
{
	char out[64];
	char *echo[] = { "/bin/sh", "-c", "echo hello; echo world >&2", NULL };
	int st = spawn_run_bounded(echo, 10000, out, sizeof(out));
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_string_equal(out, "hello\nworld\n");

	/* Output beyond the buffer is read and dropped, not left to block the child. */
	char small[4];
	char *flood[] = { "/bin/sh", "-c", "head -c 1000000 /dev/zero; exit 3", NULL };
	st = spawn_run_bounded(flood, 10000, small, sizeof(small));
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 3);
	assert_int_equal(strlen(small), 0); /* NULs: the buffer holds them, strlen stops */

	char *hang[] = { "/bin/sleep", "30", NULL };
	assert_int_equal(spawn_run_bounded(hang, 100, out, sizeof(out)), -ETIMEDOUT);

	/* A program that cannot be started is an errno, not an exit status. */
	char *missing[] = { "/nonexistent/binary", "--version", NULL };
	assert_int_equal(spawn_run_bounded(missing, 10000, out, sizeof(out)), -ENOENT);

	/* Only a plain PATH: nothing of the daemon's environment. */
	setenv("SPAWN_TEST_SECRET", "s3cret", 1);
	char *env[] = { "/usr/bin/env", NULL };
	char big[512];
	st = spawn_run_bounded(env, 10000, big, sizeof(big));
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_string_equal(big, "PATH=/usr/sbin:/usr/bin:/sbin:/bin\n");
}

static void test_find_binary(void **state)
{
	_cleanup_free_ char *sh = spawn_find_binary("sh");
	assert_non_null(sh);
	assert_int_equal(sh[0], '/');
	assert_null(spawn_find_binary("no-such-binary-anywhere"));
	_cleanup_free_ char *abs = spawn_find_binary("/bin/sh");
	assert_string_equal(abs, "/bin/sh");
}

/* `cmd` run by /bin/sh after the plan's steps, its stdout returned (the child's status in
 * *status, spawn_wait's result returned in *r). */
static char *exec_output(struct spawn_plan *plan, uint64_t flags, const char *cmd, int *r,
			 int *status)
{
	int out[2];
	assert_int_equal(pipe2(out, O_CLOEXEC), 0);
	spawn_plan_fd(plan, out[1], 1, true);
	char *argv[] = { "/bin/sh", "-c", (char *)cmd, NULL };
	char *envp[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL };
	plan->argv = argv;
	plan->envp = envp;
	struct spawn_op *op = spawn_plan_add(plan, SOP_EXEC, "exec");
	op->src = argv[0];
	struct err e = { 0 };
	*r = run_ns(plan, flags, status, &e);
	close(out[1]);
	char *got = read_all(out[0]);
	close(out[0]);
	return got;
}

/* Root becomes an unprivileged uid with no capability left in any set, the bounding set
 * included: SOP_KEEP_CAPS keeps the permitted set across the uid change for SOP_CAPS. */
static void test_unprivileged_with_an_empty_bounding_set(void **state)
{
	if (geteuid() != 0)
		skip();
	struct spawn_plan plan;
	spawn_plan_init(&plan, "test");
	plan.caps_keep = 0;
	plan.cap_last = 40;
	spawn_plan_add(&plan, SOP_KEEP_CAPS, "keep caps");
	struct spawn_op *op = spawn_plan_add(&plan, SOP_SETID, "setid");
	op->arg = 0x7ffe0000;
	op->flags = 0x7ffe0000;
	spawn_plan_add(&plan, SOP_CAPS, "caps");
	spawn_plan_add(&plan, SOP_NO_NEW_PRIVS, "nnp");
	int r, status;
	_cleanup_free_ char *got = exec_output(
		&plan, 0,
		"grep -E '^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' "
		"/proc/self/status | tr -s ' \t' ' '",
		&r, &status);
	assert_int_equal(r, 0);
	assert_int_equal(status, 0);
	assert_string_equal(got, "Uid: 2147352576 2147352576 2147352576 2147352576\n"
				 "Gid: 2147352576 2147352576 2147352576 2147352576\n"
				 "Groups: \n"
				 "CapInh: 0000000000000000\n"
				 "CapPrm: 0000000000000000\n"
				 "CapEff: 0000000000000000\n"
				 "CapBnd: 0000000000000000\n"
				 "CapAmb: 0000000000000000\n"
				 "NoNewPrivs: 1\n");
	spawn_plan_free(&plan);
}

/* PID 1 of a pid namespace of its own has no parent it can see: SOP_PARENT_DEATH still
 * succeeds while the parent lives. */
static void test_parent_death_in_a_pid_namespace(void **state)
{
	if (geteuid() != 0)
		skip();
	struct spawn_plan plan;
	spawn_plan_init(&plan, "test");
	spawn_plan_add(&plan, SOP_PARENT_DEATH, "die with the parent");
	int r, status;
	_cleanup_free_ char *got = exec_output(&plan, CLONE_NEWPID, "echo $$", &r, &status);
	assert_int_equal(r, 0);
	assert_int_equal(status, 0);
	assert_string_equal(got, "1\n");
	spawn_plan_free(&plan);
}

/* A TAP attached in the child's network namespace, as a descriptor its program inherits. */
static void test_tap_as_a_descriptor(void **state)
{
	if (geteuid() != 0 || access("/dev/net/tun", R_OK | W_OK) < 0)
		skip();
	struct spawn_plan plan;
	spawn_plan_init(&plan, "test");
	struct spawn_op *op = spawn_plan_add(&plan, SOP_TAP_OPEN, "tap");
	op->src = "tap0";
	op->arg = 6;
	int r, status;
	_cleanup_free_ char *got = exec_output(
		&plan, CLONE_NEWNET,
		"readlink /proc/self/fd/6; ip -o link show tap0 >/dev/null && echo tap0 is there",
		&r, &status);
	assert_int_equal(r, 0);
	assert_int_equal(status, 0);
	/* Made in the child's namespace, there while the descriptor is open. */
	assert_string_equal(got, "/dev/net/tun\ntap0 is there\n");
	spawn_plan_free(&plan);

	/* A name the kernel refuses is an error of that step. */
	spawn_plan_init(&plan, "test");
	op = spawn_plan_add(&plan, SOP_TAP_OPEN, "tap");
	op->src = "a-name-far-too-long-for-an-interface";
	op->arg = 6;
	free(exec_output(&plan, CLONE_NEWNET, "true", &r, &status));
	assert_int_equal(r, -ENAMETOOLONG);
	spawn_plan_free(&plan);
}

/* --- the spawner (run after the tests above ran once without it, and once with it) --- */

static uint64_t via_spawner(void)
{
	uint64_t via, direct;
	spawner_counts(&via, &direct);
	return via;
}

/* A child cloned by the spawner is the caller's: its parent is us, we reap it through its
 * pidfd, and its failing step's report reaches us. */
static void test_spawner_child_is_ours(void **state)
{
	assert_true(spawner_pid() > 0);
	uint64_t before = via_spawner();
	struct spawn_plan plan;
	spawn_plan_init(&plan, "test");
	int r, status;
	_cleanup_free_ char *got = exec_output(&plan, 0, "echo $PPID", &r, &status);
	assert_int_equal(r, 0);
	assert_int_equal(status, 0);
	char want[32];
	snprintf(want, sizeof(want), "%d\n", (int)getpid());
	assert_string_equal(got, want);
	assert_int_equal(via_spawner(), before + 1);
	spawn_plan_free(&plan);
}

/* The point of the spawner: a child starts as a copy of the spawner, not of its caller, so a
 * caller holding thousands of descriptors does not hand each child a table that size. The
 * kernel never shrinks a table, so FDSize after the exec still shows what the clone copied. */
static void test_spawner_child_has_a_small_table(void **state)
{
	struct rlimit rl;
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_max < 4096)
		skip();
	rl.rlim_cur = rl.rlim_max;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
	int high = dup2(0, 4000);
	assert_int_equal(high, 4000);
	struct spawn_plan plan;
	spawn_plan_init(&plan, "test");
	int r, status;
	_cleanup_free_ char *got = exec_output(
		&plan, 0, "exec sed -n 's/^FDSize:[[:space:]]*//p' /proc/self/status", &r, &status);
	close(high);
	assert_int_equal(r, 0);
	assert_int_equal(status, 0);
	assert_true(atoi(got) > 0);
	assert_true(atoi(got) < 4000);
	spawn_plan_free(&plan);
}

/* Eight threads starting children at once through the spawner: each gets its own child,
 * with its own output, and none is cloned by the caller. */
#define CONCURRENT_THREADS 8
#define CONCURRENT_EACH    10

/* One child of a thread: its output is `want`. No cmocka assertion here (they may only fail
 * on the test's own thread). */
static bool spawn_one(const char *cmd, const char *want)
{
	int out[2];
	if (pipe2(out, O_CLOEXEC) < 0)
		return false;
	struct spawn_plan plan;
	spawn_plan_init(&plan, "test");
	spawn_plan_fd(&plan, out[1], 1, true);
	char *argv[] = { "/bin/sh", "-c", (char *)cmd, NULL };
	char *envp[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", NULL };
	plan.argv = argv;
	plan.envp = envp;
	spawn_plan_add(&plan, SOP_EXEC, "exec")->src = argv[0];
	struct err e = { 0 };
	struct spawn_child c;
	bool ok = spawn_start(&plan, 0, -1, &c, &e) == 0;
	if (ok) {
		ok = spawn_wait(&plan, &c, 10000, &e) == 0;
		ok = spawn_reap(c.pid, c.pidfd) == 0 && ok;
		spawn_child_close(&c);
	}
	close(out[1]);
	char *got = read_all(out[0]);
	close(out[0]);
	ok = ok && strcmp(got, want) == 0;
	free(got);
	spawn_plan_free(&plan);
	return ok;
}

static void *spawn_many(void *arg)
{
	long id = (long)arg;
	for (int i = 0; i < CONCURRENT_EACH; i++) {
		char cmd[64], want[64];
		snprintf(cmd, sizeof(cmd), "echo %ld-%d $PPID", id, i);
		snprintf(want, sizeof(want), "%ld-%d %d\n", id, i, (int)getpid());
		if (!spawn_one(cmd, want))
			return (void *)1;
	}
	return NULL;
}

static void test_spawner_concurrent(void **state)
{
	uint64_t via0, d0, via1, d1;
	spawner_counts(&via0, &d0);
	pthread_t t[CONCURRENT_THREADS];
	for (long i = 0; i < CONCURRENT_THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, spawn_many, (void *)i), 0);
	int bad = 0;
	for (int i = 0; i < CONCURRENT_THREADS; i++) {
		void *ret;
		assert_int_equal(pthread_join(t[i], &ret), 0);
		bad += ret != NULL;
	}
	assert_int_equal(bad, 0);
	spawner_counts(&via1, &d1);
	assert_int_equal(via1 - via0, CONCURRENT_THREADS * CONCURRENT_EACH);
	assert_int_equal(d1, d0);
}

/* A plan too large for one message is cloned by the caller, and works the same. */
static void test_spawner_large_plan(void **state)
{
	uint64_t via, d0, via2, direct;
	spawner_counts(&via, &d0);
	struct spawn_plan plan;
	spawn_plan_init(&plan, "test");
	for (int i = 0; i < 4000; i++) {
		struct spawn_op *op = spawn_plan_add(&plan, SOP_UMASK, "umask");
		op->arg = 022;
	}
	int r, status;
	_cleanup_free_ char *got = exec_output(&plan, 0, "echo big", &r, &status);
	assert_int_equal(r, 0);
	assert_string_equal(got, "big\n");
	spawner_counts(&via2, &direct);
	assert_int_equal(via2, via);
	assert_int_equal(direct, d0 + 1);
	spawn_plan_free(&plan);
}

/* Runs `echo $PPID` and checks that the caller cloned it itself (the spawner being lost) and
 * that it is the caller's child all the same. */
static void expect_cloned_directly(void)
{
	uint64_t via0, d0, via1, d1;
	spawner_counts(&via0, &d0);
	struct spawn_plan plan;
	spawn_plan_init(&plan, "test");
	int r, status;
	_cleanup_free_ char *got = exec_output(&plan, 0, "echo $PPID", &r, &status);
	assert_int_equal(r, 0);
	char want[32];
	snprintf(want, sizeof(want), "%d\n", (int)getpid());
	assert_string_equal(got, want);
	spawner_counts(&via1, &d1);
	assert_int_equal(via1, via0);
	assert_int_equal(d1, d0 + 1);
	assert_int_equal(spawner_pid(), 0);
	spawn_plan_free(&plan);
}

/* A spawner killed between requests: the next child is cloned by the caller, nothing fails,
 * and the spawner is reaped (no zombie left). */
static void test_spawner_lost(void **state)
{
	pid_t sp = spawner_pid();
	assert_true(sp > 0);
	assert_int_equal(kill(sp, SIGKILL), 0);
	/* Until it is dead: a request sent before would be in its hands when it dies. */
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)sp);
	for (int i = 0; i < 1000; i++) {
		char buf[256] = "";
		FILE *f = fopen(path, "r");
		if (f) {
			if (!fgets(buf, sizeof(buf), f))
				buf[0] = '\0';
			fclose(f);
		}
		char *p = strrchr(buf, ')');
		if (!p || p[2] == 'Z')
			break;
		usleep(10000);
	}
	expect_cloned_directly();
	/* Reaped: no such process any more. */
	assert_int_equal(kill(sp, 0), -1);
	assert_int_equal(errno, ESRCH);

	/* Replaced at a request some seconds later. */
	sleep(6);
	uint64_t via0, d0, via1, d1;
	spawner_counts(&via0, &d0);
	struct spawn_plan plan;
	spawn_plan_init(&plan, "test");
	int r, status;
	free(exec_output(&plan, 0, "true", &r, &status));
	assert_int_equal(r, 0);
	assert_true(spawner_pid() > 0);
	assert_true(spawner_pid() != sp);
	spawner_counts(&via1, &d1);
	assert_int_equal(via1, via0 + 1);
	assert_int_equal(d1, d0);
	spawn_plan_free(&plan);
}

/* A spawner that does not answer (stopped) is given up after its timeout: the child is
 * cloned by the caller, and the stopped spawner is killed and reaped. */
static void test_spawner_hung(void **state)
{
	pid_t sp = spawner_pid();
	assert_true(sp > 0);
	assert_int_equal(kill(sp, SIGSTOP), 0);
	expect_cloned_directly();
	/* Killed; reaped by the stop at the latest. */
	spawner_stop();
	assert_int_equal(kill(sp, 0), -1);
	assert_int_equal(errno, ESRCH);
}

/* The gate of a child the spawner clones: a byte lets it go on; end of file ends it before its
 * first step (a spawner lost mid-request leaves nothing running). */
static void test_gate(void **state)
{
	_cleanup_free_ char *dir = xstrdup("/tmp/spawn-gate-XXXXXX");
	assert_non_null(mkdtemp(dir));
	_cleanup_free_ char *path = xasprintf("%s/stepped", dir);
	for (int open_it = 0; open_it < 2; open_it++) {
		int gate[2];
		assert_int_equal(pipe2(gate, O_CLOEXEC), 0);
		struct spawn_plan plan;
		spawn_plan_init(&plan, "test");
		plan.gate_fd = gate[0];
		struct spawn_op *op = spawn_plan_add(&plan, SOP_MKDIR, "mkdir");
		op->dst = path;
		op->arg = 0700;
		spawn_plan_add(&plan, SOP_EXIT, "exit");
		if (open_it)
			assert_int_equal(write(gate[1], "", 1), 1);
		close(gate[1]);
		struct err e = { 0 };
		int status;
		run(&plan, &status, &e);
		close(gate[0]);
		assert_true(WIFEXITED(status));
		assert_int_equal(WEXITSTATUS(status), open_it ? 0 : 127);
		assert_int_equal(access(path, F_OK) == 0, open_it);
		spawn_plan_free(&plan);
	}
	rmdir(path);
	rmdir(dir);
}

static int start_spawner(void **state)
{
	struct err e = { 0 };
	return spawner_start(&e);
}

static int stop_spawner(void **state)
{
	spawner_stop();
	return 0;
}

/* The group of every test through the spawner: none of its children may have been cloned by
 * the caller. */
static uint64_t group_direct;

static int start_spawner_group(void **state)
{
	uint64_t via;
	spawner_counts(&via, &group_direct);
	return start_spawner(state);
}

static int stop_spawner_group(void **state)
{
	uint64_t via, direct;
	spawner_counts(&via, &direct);
	spawner_stop();
	if (direct != group_direct || via == 0) {
		fprintf(stderr, "the spawner group: %llu through the spawner, %llu direct\n",
			(unsigned long long)via, (unsigned long long)(direct - group_direct));
		return -1;
	}
	return 0;
}

int main(void)
{
	/* A child's end of file on a pipe must not kill the test. */
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_descriptors),
		cmocka_unit_test(test_failing_and_optional_steps),
		cmocka_unit_test(test_write_and_exec_failure),
		cmocka_unit_test(test_killed_during_setup),
		cmocka_unit_test(test_setup_timeout),
		cmocka_unit_test(test_run_bounded),
		cmocka_unit_test(test_find_binary),
		cmocka_unit_test(test_unprivileged_with_an_empty_bounding_set),
		cmocka_unit_test(test_parent_death_in_a_pid_namespace),
		cmocka_unit_test(test_tap_as_a_descriptor),
	};
	/* The spawner puts a gate of its own on every child it clones: this one is the caller's. */
	const struct CMUnitTest direct_tests[] = {
		cmocka_unit_test(test_gate),
	};
	const struct CMUnitTest spawner_tests[] = {
		cmocka_unit_test(test_spawner_child_is_ours),
		cmocka_unit_test(test_spawner_child_has_a_small_table),
		cmocka_unit_test(test_spawner_concurrent),
		cmocka_unit_test(test_spawner_large_plan),
		cmocka_unit_test(test_spawner_lost),
		cmocka_unit_test_setup(test_spawner_hung, start_spawner),
	};
	/* Every test once as a daemon without a spawner clones, once through the spawner. */
	int failed = cmocka_run_group_tests_name("direct", tests, NULL, NULL);
	failed += cmocka_run_group_tests_name("direct only", direct_tests, NULL, NULL);
	failed += cmocka_run_group_tests_name("spawner", tests, start_spawner_group,
					      stop_spawner_group);
	failed += cmocka_run_group_tests_name("spawner only", spawner_tests, start_spawner,
					      stop_spawner);
	return failed;
}
