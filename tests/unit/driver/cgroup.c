/* Tests of src/driver/cgroup.c: the v1 and v2 logic against plain directory trees (control
 * files are plain files there), and, as root, against this machine's real hierarchy. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "driver/cgroup.h"
#include "util/cleanup.h"

#include "../wait.h"

static char *make_tmp(void)
{
	char *t = xstrdup("/tmp/cgroup-test-XXXXXX");
	assert_non_null(mkdtemp(t));
	return t;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	return remove(path);
}

static void rm_tree(char *dir)
{
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	free(dir);
}

static void put(const char *dir, const char *file, const char *text)
{
	_cleanup_free_ char *p = xasprintf("%s/%s", dir, file);
	FILE *f = fopen(p, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static char *get(const char *dir, const char *file)
{
	_cleanup_free_ char *p = xasprintf("%s/%s", dir, file);
	FILE *f = fopen(p, "r");
	if (!f)
		return NULL;
	char *buf = xcalloc(1, 4096);
	size_t n = fread(buf, 1, 4095, f);
	buf[n] = '\0';
	fclose(f);
	return buf;
}

static void assert_file(const char *dir, const char *file, const char *want)
{
	_cleanup_free_ char *got = get(dir, file);
	if (!got || strcmp(got, want) != 0)
		print_error("%s/%s: got `%s`, want `%s`\n", dir, file, got ? got : "(none)", want);
	assert_non_null(got);
	assert_string_equal(got, want);
}

static bool exists(const char *p)
{
	return access(p, F_OK) == 0;
}

static const struct cgroup_limits limits = {
	.memory_bytes = 64 << 20,
	.cpu_quota_us = 50000,
	.cpu_period_us = 100000,
	.pids_max = 64,
};

static void test_id_valid(void **state)
{
	assert_true(cgroup_id_valid("a"));
	assert_true(cgroup_id_valid("t-123-4"));
	assert_true(cgroup_id_valid("0123456789012345678901234567890123456789"));
	assert_false(cgroup_id_valid(NULL));
	assert_false(cgroup_id_valid(""));
	assert_false(cgroup_id_valid("-a"));
	assert_false(cgroup_id_valid("A"));
	assert_false(cgroup_id_valid(".."));
	assert_false(cgroup_id_valid("a/b"));
	assert_false(cgroup_id_valid("a b"));
	assert_false(cgroup_id_valid("01234567890123456789012345678901234567890"));

	struct cgroup_root root;
	cgroup_root_plain("/nonexistent", CGROUP_V2, &root);
	struct cgroup *cg = NULL;
	struct err err = { 0 };
	assert_int_equal(cgroup_create(&root, "../x", &limits, &cg, &err), -EINVAL);
	assert_non_null(strstr(err.msg, "invalid sandbox id"));
	assert_int_equal(cgroup_open(&root, "", &cg, &err), -EINVAL);
	cgroup_root_free(&root);
}

/* cgroup_init on a v2 tree at `tmp`, twice: the controllers enabled at the root and in
 * agent-sandbox. Returns agent-sandbox's path. */
static char *init_twice(const struct cgroup_root *root, const char *tmp)
{
	struct err err = { 0 };
	assert_int_equal(cgroup_init(root, &err), 0);
	assert_file(tmp, "cgroup.subtree_control", "+memory +cpu +pids");
	char *parent = xasprintf("%s/" CGROUP_PARENT, tmp);
	assert_file(parent, "cgroup.subtree_control", "+memory +cpu +pids");
	assert_int_equal(cgroup_init(root, &err), 0);
	return parent;
}

static void test_v2(void **state)
{
	char *tmp = make_tmp();
	struct cgroup_root root;
	cgroup_root_plain(tmp, CGROUP_V2, &root);
	struct err err = { 0 };

	/* Controllers must be offered by the root. */
	put(tmp, "cgroup.controllers", "cpuset cpu io memory hugetlb\n");
	assert_int_equal(cgroup_check(&root, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "`pids` controller is not available"));
	put(tmp, "cgroup.controllers", "cpuset cpu io memory hugetlb pids rdma misc\n");
	assert_int_equal(cgroup_check(&root, &err), 0);

	/* init enables them at the root and in agent-sandbox; twice is fine. */
	_cleanup_free_ char *parent = init_twice(&root, tmp);

	struct cgroup *cg = NULL;
	assert_int_equal(cgroup_create(&root, "s1", &limits, &cg, &err), 0);
	_cleanup_free_ char *dir = xasprintf("%s/s1", parent);
	assert_int_equal(cg->n, 1);
	assert_string_equal(cg->dir[0], dir);
	_cleanup_free_ char *procs = xasprintf("%s/cgroup.procs", dir);
	assert_string_equal(cg->procs[0], procs);
	assert_file(dir, "memory.max", "67108864");
	assert_file(dir, "memory.swap.max", "0");
	assert_file(dir, "cpu.max", "50000 100000");
	assert_file(dir, "pids.max", "64");

	/* A leftover is never reused. */
	struct cgroup *again = NULL;
	assert_int_equal(cgroup_create(&root, "s1", &limits, &again, &err), -EEXIST);
	assert_non_null(strstr(err.msg, "already exists"));
	assert_true(exists(dir));

	assert_int_equal(cgroup_enter(cg, 4242, &err), 0);
	assert_file(dir, "cgroup.procs", "4242");

	assert_int_equal(cgroup_oom_kills(cg), 0);
	put(dir, "memory.events", "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n");
	assert_int_equal(cgroup_oom_kills(cg), 2);

	/* Usage: memory.current, memory.stat's `file` (not `file_mapped`), cpu.stat's usage. */
	struct cgroup_usage u;
	assert_int_equal(cgroup_usage(cg, &u, &err), -ENOENT);
	put(dir, "memory.current", "garbage\n");
	assert_int_equal(cgroup_usage(cg, &u, &err), -EIO);
	put(dir, "memory.current", "1048576\n");
	assert_int_equal(cgroup_usage(cg, &u, &err), 0);
	assert_false(u.has_cpu);
	assert_int_equal(u.memory_bytes, 1048576);
	put(dir, "memory.stat", "anon 1000\nfile_mapped 7\nfile 8192\n");
	put(dir, "cpu.stat", "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\n");
	assert_int_equal(cgroup_usage(cg, &u, &err), 0);
	assert_true(u.has_cpu);
	assert_false(u.approximate);
	assert_int_equal(u.cpu_usec, 2500);
	assert_int_equal(u.cache_bytes, 8192);

	assert_int_equal(cgroup_remove(cg, &err), 0);
	assert_false(exists(dir));
	assert_int_equal(cgroup_remove(cg, &err), 0);
	cgroup_free(cg);

	/* No limits: nothing written but the directory. */
	assert_int_equal(cgroup_create(&root, "s2", &(struct cgroup_limits){ 0 }, &cg, &err), 0);
	_cleanup_free_ char *dir2 = xasprintf("%s/s2", parent);
	assert_false(exists(cg->oom_file));
	_cleanup_free_ char *max = xasprintf("%s/memory.max", dir2);
	assert_false(exists(max));
	assert_int_equal(cgroup_oom_kills(cg), 0);
	assert_int_equal(cgroup_remove(cg, &err), 0);
	assert_false(exists(dir2));
	cgroup_free(cg);

	/* cpu.max without a period uses the kernel's default period. */
	struct cgroup_limits quota = { .cpu_quota_us = 20000 };
	assert_int_equal(cgroup_create(&root, "s3", &quota, &cg, &err), 0);
	assert_file(cg->dir[0], "cpu.max", "20000 100000");
	assert_int_equal(cgroup_remove(cg, &err), 0);
	cgroup_free(cg);

	cgroup_root_free(&root);
	rm_tree(tmp);
}

/* Delegated: the daemon's own cgroup empties into its leaf before it hands controllers on;
 * sandboxes go below it, nothing is written above it. */
static void test_v2_delegated(void **state)
{
	char *tmp = make_tmp();
	struct cgroup_root root;
	cgroup_root_plain_delegated(tmp, &root);
	struct err err = { 0 };
	put(tmp, "cgroup.procs", "100\n200\n");
	assert_int_equal(cgroup_init(&root, &err), 0);
	_cleanup_free_ char *leaf = xasprintf("%s/" CGROUP_DAEMON_LEAF, tmp);
	assert_file(leaf, "cgroup.procs", "100\n200\n");
	assert_file(tmp, "cgroup.procs", "");
	_cleanup_free_ char *parent = init_twice(&root, tmp);

	struct cgroup *cg = NULL;
	assert_int_equal(cgroup_create(&root, "s1", &limits, &cg, &err), 0);
	_cleanup_free_ char *dir = xasprintf("%s/s1", parent);
	assert_string_equal(cg->dir[0], dir);
	assert_file(dir, "memory.max", "67108864");
	assert_int_equal(cgroup_remove(cg, &err), 0);
	assert_false(exists(dir));
	cgroup_free(cg);

	/* A directory an earlier daemon recorded (another scope of its own): only a sandbox
	 * cgroup of that id below the hierarchy is taken. */
	static const char *const bad[] = {
		"/etc/passwd",
		"/sys/fs/cgroup/x/../" CGROUP_PARENT "/s1",
		"/sys/fs/cgroup/x/./" CGROUP_PARENT "/s1",
		"/sys/fs/cgroup//" CGROUP_PARENT "/s1",
		"/sys/fs/cgroup/system.slice/a.scope/" CGROUP_PARENT "/s2",
		"/sys/fs/cgroupx/" CGROUP_PARENT "/s1",
		"relative/" CGROUP_PARENT "/s1",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct cgroup *no = NULL;
		assert_int_equal(cgroup_open_path(&root, "s1", bad[i], &no, &err), -EINVAL);
		assert_null(no);
	}
	const char *old = "/sys/fs/cgroup/system.slice/a.scope/" CGROUP_PARENT "/s1";
	assert_int_equal(cgroup_open_path(&root, "s1", old, &cg, &err), 0);
	assert_string_equal(cg->dir[0], old);
	assert_string_equal(cg->freezer, old);
	cgroup_free(cg);

	_cleanup_free_ char *what = cgroup_root_describe(&root);
	assert_non_null(strstr(what, "delegated"));
	cgroup_root_free(&root);
	rm_tree(tmp);
}

static void test_v2_missing_parent(void **state)
{
	char *tmp = make_tmp();
	struct cgroup_root root;
	cgroup_root_plain(tmp, CGROUP_V2, &root);
	struct err err = { 0 };
	struct cgroup *cg = NULL;
	/* Without init, the parent does not exist: a clear error and nothing made. */
	assert_int_equal(cgroup_create(&root, "s1", &limits, &cg, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "mkdir"));
	assert_non_null(strstr(err.msg, CGROUP_PARENT "/s1"));
	cgroup_root_free(&root);
	rm_tree(tmp);
}

static void make_v1_tree(const char *tmp, bool comount)
{
	_cleanup_free_ char *mem = xasprintf("%s/memory", tmp);
	_cleanup_free_ char *cpu = xasprintf("%s/cpu,cpuacct", tmp);
	_cleanup_free_ char *cpu_link = xasprintf("%s/cpu", tmp);
	_cleanup_free_ char *pids = xasprintf("%s/pids", tmp);
	assert_int_equal(mkdir(mem, 0755), 0);
	assert_int_equal(mkdir(pids, 0755), 0);
	if (comount) {
		/* memory and cpu in one hierarchy */
		assert_int_equal(symlink("memory", cpu_link), 0);
	} else {
		assert_int_equal(mkdir(cpu, 0755), 0);
		assert_int_equal(symlink("cpu,cpuacct", cpu_link), 0);
	}
}

static void test_v1(void **state)
{
	char *tmp = make_tmp();
	make_v1_tree(tmp, false);
	struct cgroup_root root;
	cgroup_root_plain(tmp, CGROUP_V1, &root);
	struct err err = { 0 };

	assert_int_equal(cgroup_check(&root, &err), 0);
	assert_int_equal(cgroup_init(&root, &err), 0);
	assert_int_equal(cgroup_init(&root, &err), 0);
	const char *ctl[] = { "memory", "cpu,cpuacct", "pids" };
	for (size_t i = 0; i < 3; i++) {
		_cleanup_free_ char *p = xasprintf("%s/%s/" CGROUP_PARENT, tmp, ctl[i]);
		assert_true(exists(p));
	}

	struct cgroup *cg = NULL;
	assert_int_equal(cgroup_create(&root, "s1", &limits, &cg, &err), 0);
	assert_int_equal(cg->n, 3);
	_cleanup_free_ char *mem = xasprintf("%s/memory/" CGROUP_PARENT "/s1", tmp);
	_cleanup_free_ char *cpu = xasprintf("%s/cpu,cpuacct/" CGROUP_PARENT "/s1", tmp);
	_cleanup_free_ char *pids = xasprintf("%s/pids/" CGROUP_PARENT "/s1", tmp);
	assert_string_equal(cg->dir[0], mem);
	assert_string_equal(cg->dir[1], cpu);
	assert_string_equal(cg->dir[2], pids);
	assert_file(mem, "memory.limit_in_bytes", "67108864");
	assert_file(mem, "memory.memsw.limit_in_bytes", "67108864");
	assert_file(cpu, "cpu.cfs_period_us", "100000");
	assert_file(cpu, "cpu.cfs_quota_us", "50000");
	assert_file(pids, "pids.max", "64");

	put(mem, "memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n");
	assert_int_equal(cgroup_oom_kills(cg), 5);

	/* Usage: memory.usage_in_bytes, memory.stat's total_cache, cpuacct.usage (ns). */
	struct cgroup_usage u;
	put(mem, "memory.usage_in_bytes", "4194304\n");
	put(mem, "memory.stat", "cache 10\nrss 20\ntotal_cache 12288\n");
	put(cpu, "cpuacct.usage", "3000000\n");
	assert_int_equal(cgroup_usage(cg, &u, &err), 0);
	assert_int_equal(u.memory_bytes, 4194304);
	assert_int_equal(u.cache_bytes, 12288);
	assert_true(u.has_cpu);
	assert_false(u.approximate);
	assert_int_equal(u.cpu_usec, 3000);
	/* Without cpuacct beside cpu: the times of the processes it lists (this one, after it
	 * has used some CPU), an unknown pid counting nothing. */
	_cleanup_free_ char *acct = xasprintf("%s/cpuacct.usage", cpu);
	assert_int_equal(unlink(acct), 0);
	struct timespec t0, t;
	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
	do
		clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
	while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 50000000L);
	char procs[64];
	snprintf(procs, sizeof(procs), "%d\n999999999\n", (int)getpid());
	put(mem, "cgroup.procs", procs);
	assert_int_equal(cgroup_usage(cg, &u, &err), 0);
	assert_true(u.has_cpu && u.approximate);
	assert_true(u.cpu_usec >= 40000);

	assert_int_equal(cgroup_remove(cg, &err), 0);
	assert_false(exists(mem));
	assert_false(exists(cpu));
	assert_false(exists(pids));
	cgroup_free(cg);
	cgroup_root_free(&root);
	rm_tree(tmp);
}

static void test_v1_comount(void **state)
{
	char *tmp = make_tmp();
	make_v1_tree(tmp, true);
	struct cgroup_root root;
	cgroup_root_plain(tmp, CGROUP_V1, &root);
	struct err err = { 0 };
	assert_int_equal(cgroup_init(&root, &err), 0);

	struct cgroup *cg = NULL;
	assert_int_equal(cgroup_create(&root, "s1", &limits, &cg, &err), 0);
	/* One directory for memory and cpu, joined once. */
	assert_int_equal(cg->n, 2);
	assert_string_equal(cg->ctl[0], cg->ctl[1]);
	assert_file(cg->ctl[1], "cpu.cfs_quota_us", "50000");
	assert_file(cg->ctl[0], "memory.limit_in_bytes", "67108864");
	assert_int_equal(cgroup_remove(cg, &err), 0);
	assert_false(exists(cg->dir[0]));
	assert_false(exists(cg->dir[1]));
	cgroup_free(cg);
	cgroup_root_free(&root);
	rm_tree(tmp);
}

static void test_detect(void **state)
{
	char *tmp = make_tmp();
	struct cgroup_root root;
	struct err err = { 0 };
	assert_int_equal(cgroup_root_detect(tmp, &root, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "is not a cgroup2 mount"));
	assert_int_equal(cgroup_root_detect("/nonexistent", &root, &err), -ENOENT);
	assert_non_null(strstr(err.msg, "statfs"));
	rm_tree(tmp);

	/* Every driver puts its sandboxes in cgroups: a machine without them cannot run any. */
	if (cgroup_root_detect("/sys/fs/cgroup", &root, &err) < 0)
		fail_msg("no cgroup hierarchy here: %s", err.msg);
	assert_true(root.version == CGROUP_V1 || root.version == CGROUP_V2);
	assert_false(root.plain);
	_cleanup_free_ char *what = cgroup_root_describe(&root);
	print_message("this host: cgroup %s\n", what);
	cgroup_root_free(&root);

	/* Told not to delegate, a v2 host's sandboxes go below its root. */
	cgroup_configure(CGROUP_DELEGATION_OFF);
	assert_int_equal(cgroup_root_detect("/sys/fs/cgroup", &root, &err), 0);
	assert_false(root.delegated);
	assert_string_equal(root.path, "/sys/fs/cgroup");
	cgroup_root_free(&root);
	cgroup_configure(CGROUP_DELEGATION_AUTO);
}

/* Whether every directory of cgroup `arg` holds two processes. */
static bool holds_two(void *arg)
{
	const struct cgroup *cg = arg;
	for (unsigned i = 0; i < cg->n; i++) {
		_cleanup_free_ char *procs = get(cg->dir[i], "cgroup.procs");
		unsigned lines = 0;
		for (const char *c = procs; c && *c; c++)
			lines += *c == '\n';
		if (lines != 2)
			return false;
	}
	return true;
}

/* The real hierarchy: a process placed in the cgroup is killed by cgroup_remove. */
static void test_real(void **state)
{
	struct cgroup_root root;
	struct err err = { 0 };
	/* Root (`make test` runs as root) and the controllers every driver needs. */
	if (geteuid() != 0)
		fail_msg("cgroups need root (sudo make test)");
	if (cgroup_root_detect("/sys/fs/cgroup", &root, &err) < 0 || cgroup_check(&root, &err) < 0)
		fail_msg("the memory, cpu and pids controllers are not usable here: %s", err.msg);
	assert_int_equal(cgroup_init(&root, &err), 0);
	char id[48];
	snprintf(id, sizeof(id), "c-%d", (int)getpid());
	struct cgroup *cg = NULL;
	if (cgroup_create(&root, id, &limits, &cg, &err) < 0)
		print_error("%s\n", err.msg);
	assert_non_null(cg);

	int ready[2];
	assert_int_equal(pipe(ready), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		char c;
		/* Wait until placed, then fork a grandchild that must die too. */
		if (read(ready[0], &c, 1) != 1)
			_exit(1);
		if (fork() == 0)
			pause();
		pause();
		_exit(0);
	}
	assert_int_equal(cgroup_enter(cg, pid, &err), 0);
	char line[32];
	snprintf(line, sizeof(line), "%d\n", (int)pid);
	for (unsigned i = 0; i < cg->n; i++) {
		_cleanup_free_ char *procs = get(cg->dir[i], "cgroup.procs");
		assert_non_null(strstr(procs, line));
	}
	assert_int_equal(write(ready[1], "x", 1), 1);
	assert_true(wait_until(holds_two, cg, WAIT_TIMEOUT_MS,
			       "the child's own child to join its cgroup"));
	assert_int_equal(cgroup_oom_kills(cg), 0);

	/* Our child turns zombie (outside the cgroup) until reaped; the grandchild is
	 * reparented and reaped by init. */
	assert_int_equal(cgroup_remove(cg, &err), 0);
	for (unsigned i = 0; i < cg->n; i++)
		assert_false(exists(cg->dir[i]));
	int status;
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
	cgroup_free(cg);
	cgroup_root_free(&root);
	close(ready[0]);
	close(ready[1]);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_id_valid),     cmocka_unit_test(test_v2),
		cmocka_unit_test(test_v2_delegated), cmocka_unit_test(test_v2_missing_parent),
		cmocka_unit_test(test_v1),           cmocka_unit_test(test_v1_comount),
		cmocka_unit_test(test_detect),       cmocka_unit_test(test_real),
	};
	return cmocka_run_group_tests_name("driver/cgroup", tests, NULL, NULL);
}
