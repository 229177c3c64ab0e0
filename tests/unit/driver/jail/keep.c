/* Tests of src/driver/jail/jail_keep.c: the keeper's way, which kernels before 6.15 need, run
 * on whatever kernel this is (jail_keep_init's force_thread). Skipped when not root. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cmocka.h>

#include "driver/jail/jail.h"
#include "util/cleanup.h"

/* Lines of a file, or -1. */
static int lines_of(const char *path)
{
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	int n = 0, c;
	while ((c = fgetc(f)) != EOF)
		n += c == '\n';
	return n;
}

/* The lines of /proc/self/mountinfo: the daemon's own mount table. */
static int mount_count(void)
{
	int n = lines_of("/proc/self/mountinfo");
	assert_true(n > 0);
	return n;
}

/* A detached tmpfs holding dir/file. */
static int tmpfs_with_file(void)
{
	_cleanup_close_ int fs = (int)syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC);
	assert_true(fs >= 0);
	assert_int_equal(syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0), 0);
	int m = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC, 0);
	assert_true(m >= 0);
	assert_int_equal(mkdirat(m, "dir", 0755), 0);
	int f = openat(m, "dir/file", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	assert_true(f >= 0);
	close(f);
	return m;
}

static int setup(void **state)
{
	if (geteuid() != 0) {
		skip();
		return 0;
	}
	struct err err = { 0 };
	if (jail_keep_init(true, &err) < 0)
		fail_msg("%s", err.msg);
	return 0;
}

static void need_root(void)
{
	if (geteuid() != 0)
		skip();
}

static void test_keeper_is_used(void **state)
{
	need_root();
	assert_int_equal(jail_keep_mode(), JAIL_KEEP_THREAD);
}

/* A kept mount is cloned, root and below, without ever showing in the daemon's mount table
 * (where every sandbox's mount namespace would copy it). */
static void test_kept_mount_clones(void **state)
{
	need_root();
	int before = mount_count();
	struct err err = { 0 };
	int h = jail_keep(tmpfs_with_file(), &err);
	assert_true(h >= 0);
	assert_int_equal(mount_count(), before);
	struct stat st;
	assert_int_equal(fstatat(h, "dir/file", &st, 0), 0);

	_cleanup_close_ int root = jail_keep_clone(h, "", 0);
	assert_true(root >= 0);
	assert_int_equal(fstatat(root, "dir/file", &st, 0), 0);
	_cleanup_close_ int dir = jail_keep_clone(h, "dir", 0);
	assert_true(dir >= 0);
	assert_int_equal(fstatat(dir, "file", &st, 0), 0);
	assert_int_equal(mount_count(), before);

	/* A clone is a mount of its own: it outlives the kept one. */
	jail_keep_release(h);
	assert_int_equal(fstatat(root, "dir/file", &st, 0), 0);
	assert_int_equal(mount_count(), before);
}

/* Paths of the daemon's namespace are cloned there, not in the keeper's copy of it. */
static void test_own_namespace_path(void **state)
{
	need_root();
	_cleanup_close_ int m = jail_keep_clone(AT_FDCWD, "/", 0);
	assert_true(m >= 0);
	struct stat a, b;
	assert_int_equal(fstatat(m, "", &a, AT_EMPTY_PATH), 0);
	assert_int_equal(stat("/", &b), 0);
	assert_true(a.st_dev == b.st_dev && a.st_ino == b.st_ino);
}

static int keeper_tid(void *arg)
{
	return (int)syscall(SYS_gettid);
}

/* Entries of a directory, or -1. */
static int entries_of(const char *path)
{
	DIR *d = opendir(path);
	if (!d)
		return -1;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)))
		n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
	closedir(d);
	return n;
}

/* The keeper's namespace holds its tmpfs and the kept mounts, nothing of the host's: a copy
 * of the host's mounts would pin them (a network namespace, a filesystem being unmounted). */
static void test_keeper_namespace_is_bare(void **state)
{
	need_root();
	int tid = jail_keep_call(keeper_tid, NULL);
	assert_true(tid > 0);
	_cleanup_free_ char *mi = xasprintf("/proc/self/task/%d/mountinfo", tid);
	int base = lines_of(mi);
	assert_int_equal(base, 1);
	struct err err = { 0 };
	int h = jail_keep(tmpfs_with_file(), &err);
	assert_true(h >= 0);
	assert_int_equal(lines_of(mi), 2);
	jail_keep_release(h);
	assert_int_equal(lines_of(mi), 1);
}

/* Released kept mounts leave nothing: many in a row, each released, and each handle's clone
 * still fine while the next is kept. */
static void test_release_detaches(void **state)
{
	need_root();
	for (int i = 0; i < 200; i++) {
		struct err err = { 0 };
		int h = jail_keep(tmpfs_with_file(), &err);
		assert_true(h >= 0);
		int c = jail_keep_clone(h, "dir", 0);
		assert_true(c >= 0);
		close(c);
		jail_keep_release(h);
	}
	/* A handle that is no kept mount's is refused, not served. */
	assert_true(jail_keep_clone(-1, "", 0) < 0);
	/* And the keeper's root has no slot left. */
	int tid = jail_keep_call(keeper_tid, NULL);
	_cleanup_free_ char *root = xasprintf("/proc/self/task/%d/root", tid);
	assert_int_equal(entries_of(root), 0);
}

/* What runs on the keeper may ask the mode and attach mounts there (the overlay's way): it
 * runs on another thread, where an attached mount's path resolves, and returns. */
static int on_keeper(void *arg)
{
	int *mnt = arg;
	if (jail_keep_mode() != JAIL_KEEP_THREAD)
		return -EINVAL;
	char path[64];
	struct err err = { 0 };
	if (jail_keep_attach(*mnt, path, sizeof(path), &err) < 0)
		return err.errnum ? -err.errnum : -EIO;
	_cleanup_free_ char *file = xasprintf("%s/dir/file", path);
	struct stat st;
	int r = stat(file, &st) == 0 ? (int)syscall(SYS_gettid) : -errno;
	jail_keep_detach(path);
	return r;
}

static void test_call_runs_on_keeper(void **state)
{
	need_root();
	_cleanup_close_ int m = tmpfs_with_file();
	int tid = jail_keep_call(on_keeper, &m);
	assert_true(tid > 0);
	assert_int_not_equal(tid, (int)syscall(SYS_gettid));
	/* Detached again, the descriptor still reaches the files. */
	struct stat st;
	assert_int_equal(fstatat(m, "dir/file", &st, 0), 0);
	/* Attached and detached once, a mount is no longer detached: it cannot be attached again
	 * (which is why each overlay is made over a mount of its own). */
	assert_true(jail_keep_call(on_keeper, &m) < 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_keeper_is_used),
		cmocka_unit_test(test_kept_mount_clones),
		cmocka_unit_test(test_own_namespace_path),
		cmocka_unit_test(test_release_detaches),
		cmocka_unit_test(test_call_runs_on_keeper),
		cmocka_unit_test(test_keeper_namespace_is_bare),
	};
	return cmocka_run_group_tests(tests, setup, NULL);
}
