/* Tests of the firecracker driver's pure parts: the jailer's argv for cgroup v1 and v2, the
 * jail layout, staging files into a chroot (link or copy, owner and mode), version parsing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "driver/firecracker/fc_api.h"
#include "driver/firecracker/jailer.h"
#include "util/fs.h"

static const struct fc_jail_spec base_spec = {
	.jailer_bin = "/usr/local/bin/jailer",
	.fc_bin = "/usr/local/bin/firecracker",
	.id = "sb-0123456789ab",
	.chroot_base = "/srv/jail",
	.netns_path = "/run/netns/as-sb-0123",
	.uid = 997,
	.gid = 982,
	.cgroup_version = 1,
	.parent_cgroup = "agent-sandbox",
	.memory_bytes = 134217728,
	.cpu_quota_us = 50000,
	.cpu_period_us = 100000,
	.pids_max = 256,
	.nofile = 1024,
};

static char *joined(char **argv)
{
	size_t len = 1;
	for (char **p = argv; *p; p++)
		len += strlen(*p) + 1;
	char *s = calloc(1, len);
	for (char **p = argv; *p; p++) {
		if (p != argv)
			strcat(s, " ");
		strcat(s, *p);
	}
	return s;
}

static void test_argv_cgroup_v1(void **state)
{
	char **argv = fc_jailer_argv(&base_spec);
	char *s = joined(argv);
	assert_string_equal(
		s,
		"/usr/local/bin/jailer --id sb-0123456789ab --exec-file /usr/local/bin/firecracker"
		" --uid 997 --gid 982 --chroot-base-dir /srv/jail --netns /run/netns/as-sb-0123"
		" --cgroup-version 1 --parent-cgroup agent-sandbox"
		" --cgroup memory.limit_in_bytes=134217728 --cgroup cpu.cfs_period_us=100000"
		" --cgroup cpu.cfs_quota_us=50000 --cgroup pids.max=256"
		" --resource-limit no-file=1024 --new-pid-ns -- --api-sock "
		"/run/firecracker.socket");
	free(s);
	fc_argv_free(argv);
}

static void test_argv_cgroup_v2(void **state)
{
	struct fc_jail_spec spec = base_spec;
	spec.cgroup_version = 2;
	spec.netns_path = NULL;
	char **argv = fc_jailer_argv(&spec);
	char *s = joined(argv);
	assert_non_null(strstr(s, " --cgroup-version 2 "));
	assert_non_null(strstr(s, " --cgroup memory.max=134217728 "));
	assert_non_null(strstr(s, " --cgroup memory.swap.max=0 "));
	/* "cpu.max" takes quota and period as one value with a space: one argv element. */
	int found = 0;
	for (char **p = argv; *p; p++)
		found += strcmp(*p, "cpu.max=50000 100000") == 0;
	assert_int_equal(found, 1);
	assert_null(strstr(s, "--netns"));
	assert_null(strstr(s, "limit_in_bytes"));
	free(s);
	fc_argv_free(argv);
}

static void test_argv_without_limits(void **state)
{
	struct fc_jail_spec spec = base_spec;
	spec.memory_bytes = 0;
	spec.cpu_quota_us = 0;
	spec.pids_max = 0;
	spec.nofile = 0;
	char **argv = fc_jailer_argv(&spec);
	char *s = joined(argv);
	assert_null(strstr(s, "--cgroup "));
	assert_null(strstr(s, "--resource-limit"));
	free(s);
	fc_argv_free(argv);
}

static void test_jail_dir(void **state)
{
	char *d = fc_jail_dir("/srv/jail", "/usr/local/bin/firecracker", "sb-1");
	assert_string_equal(d, "/srv/jail/firecracker/sb-1");
	free(d);
	d = fc_jail_dir("/srv/jail", "firecracker-v1.16", "x");
	assert_string_equal(d, "/srv/jail/firecracker-v1.16/x");
	free(d);
}

static void test_stage_link_and_modes(void **state)
{
	char dir[] = "/tmp/fc-stage-XXXXXX";
	assert_non_null(mkdtemp(dir));
	char src[512], root[512], dst[1024];
	snprintf(src, sizeof(src), "%s/rootfs.ext4", dir);
	snprintf(root, sizeof(root), "%s/root", dir);
	mkdir(root, 0750);
	int fd = open(src, O_WRONLY | O_CREAT, 0644);
	assert_true(write(fd, "data", 4) == 4);
	close(fd);
	struct err e;
	assert_int_equal(fc_jail_stage(root, src, "rootfs.ext4", 997, 982, 0400, &e), 0);
	snprintf(dst, sizeof(dst), "%s/rootfs.ext4", root);
	struct stat st;
	assert_int_equal(stat(dst, &st), 0);
	/* A hard link: shared, root-owned, group-readable for the jail, nothing for others. */
	assert_int_equal(st.st_nlink, 2);
	assert_int_equal(st.st_uid, 0);
	assert_int_equal(st.st_gid, 982);
	assert_int_equal(st.st_mode & 07777, 0440);
	assert_int_equal(st.st_mode & 0007, 0);
	/* Staging again over an existing file is an error, never a silent overwrite. */
	assert_true(fc_jail_stage(root, src, "rootfs.ext4", 997, 982, 0400, &e) < 0);
	assert_int_equal(fs_rm_rf(dir, NULL), 0);
	assert_int_equal(access(dir, F_OK), -1);
}

static void test_stage_copy_across_filesystems(void **state)
{
	/* /dev/shm is another filesystem than /tmp here: the file must be copied. */
	char dir[] = "/dev/shm/fc-stage-XXXXXX";
	char root[] = "/tmp/fc-root-XXXXXX";
	assert_non_null(mkdtemp(dir));
	assert_non_null(mkdtemp(root));
	char src[512], dst[512];
	snprintf(src, sizeof(src), "%s/memory", dir);
	int fd = open(src, O_WRONLY | O_CREAT, 0644);
	assert_true(write(fd, "0123456789", 10) == 10);
	close(fd);
	struct err e;
	assert_int_equal(fc_jail_stage(root, src, "memory", 997, 982, 0400, &e), 0);
	snprintf(dst, sizeof(dst), "%s/memory", root);
	struct stat st;
	assert_int_equal(stat(dst, &st), 0);
	if (st.st_nlink == 1) {
		assert_int_equal(st.st_uid, 997);
		assert_int_equal(st.st_gid, 982);
		assert_int_equal(st.st_mode & 07777, 0400);
		assert_int_equal(st.st_size, 10);
	}
	fs_rm_rf(dir, NULL);
	fs_rm_rf(root, NULL);
}

static void test_version(void **state)
{
	struct fc_version v;
	assert_int_equal(fc_version_parse("v1.16.1", &v), 0);
	assert_int_equal(v.major, 1);
	assert_int_equal(v.minor, 16);
	assert_int_equal(v.patch, 1);
	assert_true(fc_version_at_least(&v, 1, 16, 0));
	assert_true(fc_version_at_least(&v, 1, 16, 1));
	assert_false(fc_version_at_least(&v, 1, 16, 2));
	assert_false(fc_version_at_least(&v, 2, 0, 0));
	assert_true(fc_version_at_least(&v, 0, 99, 99));
	assert_int_equal(fc_version_parse("1.2", &v), -EINVAL);
	assert_int_equal(fc_version_parse("garbage", &v), -EINVAL);
}

static void test_socket_wait_times_out(void **state)
{
	struct err e;
	assert_int_equal(fc_api_wait("/tmp/does-not-exist.sock", 50, &e), -ETIMEDOUT);
	char longp[200];
	memset(longp, 'a', sizeof(longp) - 1);
	longp[0] = '/';
	longp[sizeof(longp) - 1] = '\0';
	assert_int_equal(fc_api_wait(longp, 50, &e), -ENAMETOOLONG);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_argv_cgroup_v1),
		cmocka_unit_test(test_argv_cgroup_v2),
		cmocka_unit_test(test_argv_without_limits),
		cmocka_unit_test(test_jail_dir),
		cmocka_unit_test(test_stage_link_and_modes),
		cmocka_unit_test(test_stage_copy_across_filesystems),
		cmocka_unit_test(test_version),
		cmocka_unit_test(test_socket_wait_times_out),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
