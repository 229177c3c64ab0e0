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
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/cleanup.h"
#include "util/spawn.h"

/* Runs `plan` to its end; returns spawn_wait's result and the child's wait status. */
static int run(struct spawn_plan *plan, int *status, struct err *e)
{
	struct spawn_child c;
	int r = spawn_start(plan, 0, -1, &c, e);
	assert_int_equal(r, 0);
	r = spawn_wait(plan, &c, 10000, e);
	*status = spawn_reap(c.pid, c.pidfd);
	spawn_child_close(&c);
	return r;
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
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
