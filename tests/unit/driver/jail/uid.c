/* Tests of src/driver/jail/jail_uid.c: the host uid ranges of the sandboxes' user namespaces
 * (allocation, reuse, exhaustion) and the check against subuid/subgid files. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "config.h"
#include "driver/jail/jail.h"

#define BASE 0x40000000U

static char *write_tmp(const char *text)
{
	char *path = strdup("/tmp/jail-uid-XXXXXX");
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return path;
}

static void test_subid_overlap(void **state)
{
	char *f = write_tmp("# comment\n\nalice:100000:65536\nbob:200000:10\nbad line\n");
	struct err e;
	assert_int_equal(jail_subid_check(f, 165536, 200000, NULL, &e), 0);
	assert_int_equal(jail_subid_check(f, 300000, 400000, NULL, &e), 0);
	/* Touching alice's last id, and bob's first. */
	assert_int_equal(jail_subid_check(f, 165535, 165536, NULL, &e), -EEXIST);
	assert_non_null(strstr(e.msg, "alice"));
	assert_int_equal(jail_subid_check(f, 150000, 200001, NULL, &e), -EEXIST);
	/* A missing file has no entries. */
	assert_int_equal(jail_subid_check("/nonexistent/subuid", 0, 1U << 31, NULL, &e), 0);
	unlink(f);
	free(f);
}

/* The package registers the ranges for its own account: those entries are no overlap, other
 * accounts' still are, and a name that only starts like the owner's is another account. */
static void test_subid_owner(void **state)
{
	char *f = write_tmp("agent-sandbox:1879048192:67108864\nalice:100000:65536\n"
			    "agent-sandboxer:1879048192:65536\n");
	struct err e;
	uint64_t lo = 1879048192, hi = lo + 1024ULL * 65536;
	assert_int_equal(jail_subid_check(f, lo, hi, NULL, &e), -EEXIST);
	assert_non_null(strstr(e.msg, "agent-sandbox"));
	assert_int_equal(jail_subid_check(f, lo, hi, "agent-sandbox", &e), -EEXIST);
	assert_non_null(strstr(e.msg, "agent-sandboxer"));
	assert_int_equal(jail_subid_check(f, lo, hi, "agent-sandboxer", &e), -EEXIST);
	char *g = write_tmp("agent-sandbox:1879048192:67108864\nalice:100000:65536\n");
	assert_int_equal(jail_subid_check(g, lo, hi, "agent-sandbox", &e), 0);
	assert_int_equal(jail_subid_check(g, 100000, 100001, "agent-sandbox", &e), -EEXIST);
	assert_non_null(strstr(e.msg, "alice"));
	unlink(f);
	unlink(g);
	free(f);
	free(g);
}

static void test_ranges(void **state)
{
	char *empty = write_tmp("");
	struct config cfg = {
		.uid_base = BASE, .uid_ranges = 3, .subuid_file = empty, .subgid_file = empty
	};
	struct err e;
	assert_int_equal(jail_uid_setup(&cfg, &e), 0);
	uint32_t a, b, c, d;
	assert_int_equal(jail_uid_alloc(&a, &e), 0);
	assert_int_equal(jail_uid_alloc(&b, &e), 0);
	assert_int_equal(jail_uid_alloc(&c, &e), 0);
	assert_int_equal(a, BASE);
	assert_int_equal(b, BASE + JAIL_UID_RANGE);
	assert_int_equal(c, BASE + 2 * JAIL_UID_RANGE);
	/* All taken. */
	assert_int_equal(jail_uid_alloc(&d, &e), -EAGAIN);
	assert_non_null(strstr(e.msg, "SANDBOX_UID_RANGES"));
	/* A freed range is used again; a base that is no range's is ignored. */
	jail_uid_release(b);
	jail_uid_release(BASE + 1);
	jail_uid_release(7);
	assert_int_equal(jail_uid_alloc(&d, &e), 0);
	assert_int_equal(d, b);
	assert_int_equal(jail_uid_alloc(&d, &e), -EAGAIN);
	/* A range nothing runs in is not kept from use after a restart's cleanup. */
	jail_uid_release(c);
	jail_uid_reserve_if_busy(c);
	assert_int_equal(jail_uid_alloc(&d, &e), 0);
	assert_int_equal(d, c);
	/* One that a host process still runs in (a survivor of a killed daemon) is. */
	jail_uid_release(a);
	if (geteuid() == 0) {
		int p[2];
		assert_int_equal(pipe(p), 0);
		pid_t pid = fork();
		assert_true(pid >= 0);
		if (pid == 0) {
			char byte;
			close(p[1]);
			if (setresuid(a + 5, a + 5, a + 5) < 0)
				_exit(1);
			while (read(p[0], &byte, 1) < 0)
				;
			_exit(0);
		}
		close(p[0]);
		/* Until the child has switched. */
		char path[64], line[128];
		snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
		for (bool switched = false; !switched; usleep(1000)) {
			FILE *f = fopen(path, "re");
			while (f && fgets(line, sizeof(line), f))
				switched |= strncmp(line, "Uid:", 4) == 0 &&
					    strtoul(line + 4, NULL, 10) == a + 5;
			if (f)
				fclose(f);
		}
		jail_uid_reserve_if_busy(a);
		assert_int_equal(jail_uid_alloc(&d, &e), -EAGAIN);
		close(p[1]);
		assert_int_equal(waitpid(pid, NULL, 0), pid);
		jail_uid_release(a);
	}
	assert_int_equal(jail_uid_alloc(&d, &e), 0);
	assert_int_equal(d, a);
	unlink(empty);
	free(empty);
}

static void test_range_past_2_31_refused(void **state)
{
	struct config cfg = { .uid_base = 0x7fff0000U,
			      .uid_ranges = 2,
			      .subuid_file = "/nonexistent",
			      .subgid_file = "/nonexistent" };
	struct err e;
	assert_int_equal(jail_uid_setup(&cfg, &e), -ERANGE);
	assert_non_null(strstr(e.msg, "2^31"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_subid_overlap),
		cmocka_unit_test(test_subid_owner),
		cmocka_unit_test(test_ranges),
		cmocka_unit_test(test_range_past_2_31_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
