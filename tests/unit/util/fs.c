/* Tests of src/util/fs.c: making and removing directory trees. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/cleanup.h"
#include "util/fs.h"

static void touch(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	close(fd);
}

static void test_mkdir_p_and_rm_rf(void **state)
{
	char top[] = "/tmp/test-fs-XXXXXX";
	assert_non_null(mkdtemp(top));
	_cleanup_free_ char *deep = xasprintf("%s/a/b/c", top);
	assert_int_equal(fs_mkdir_p(deep, 0700), 0);
	assert_int_equal(fs_mkdir_p(deep, 0700), 0); /* existing is fine */
	_cleanup_free_ char *file = xasprintf("%s/a/b/file", top);
	touch(file);
	/* A symlink to outside is removed, not followed. */
	char outside[] = "/tmp/test-fs-outside-XXXXXX";
	assert_non_null(mkdtemp(outside));
	_cleanup_free_ char *kept = xasprintf("%s/kept", outside);
	touch(kept);
	_cleanup_free_ char *link = xasprintf("%s/a/link", top);
	assert_int_equal(symlink(outside, link), 0);

	struct err e = { 0 };
	assert_int_equal(fs_rm_rf(top, &e), 0);
	assert_int_equal(access(top, F_OK), -1);
	assert_int_equal(access(kept, F_OK), 0);
	assert_int_equal(fs_rm_rf(top, &e), 0); /* missing is fine */
	assert_int_equal(fs_rm_rf(outside, &e), 0);
}

/* What another file system mounted below holds is not removed. */
static void test_rm_rf_stays_out_of_mounts(void **state)
{
	if (geteuid() != 0) {
		fail_msg("the test command runs as root; this test mounts a tmpfs");
		return;
	}
	char top[] = "/tmp/test-fs-XXXXXX";
	assert_non_null(mkdtemp(top));
	_cleanup_free_ char *mnt = xasprintf("%s/mnt", top);
	assert_int_equal(mkdir(mnt, 0700), 0);
	assert_int_equal(mount("tmpfs", mnt, "tmpfs", 0, "size=65536"), 0);
	_cleanup_free_ char *inside = xasprintf("%s/precious", mnt);
	touch(inside);

	struct err e = { 0 };
	assert_int_equal(fs_rm_rf(top, &e), -EBUSY);
	assert_non_null(strstr(e.msg, "mount point"));
	assert_int_equal(access(inside, F_OK), 0);

	assert_int_equal(umount(mnt), 0);
	assert_int_equal(fs_rm_rf(top, &e), 0);
	assert_int_equal(access(top, F_OK), -1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mkdir_p_and_rm_rf),
		cmocka_unit_test(test_rm_rf_stays_out_of_mounts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
