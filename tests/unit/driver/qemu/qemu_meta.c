/* Tests of src/driver/qemu_meta.c: a snapshot's meta.json matches only the inputs it was made
 * from, and says what changed when it does not. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "driver/qemu/qemu.h"

static struct qemu_snap_key key(void)
{
	struct qemu_snap_key k = {
		.m = {
			.accel = QEMU_ACCEL_TCG,
			.channel = QEMU_CHANNEL_SERIAL,
			.vcpus = 1,
			.mem_mib = 128,
			.kernel = "/a/vmlinux",
			.rootfs = "/a/templates/base/rootfs.ext4",
			.cmdline = "console=ttyS0 tsc_early_khz=2596128",
		},
		.kernel_size = 21892792,
		.kernel_mtime_ns = 1700000000123456789,
		.rootfs_size = 44040192,
		.rootfs_mtime_ns = 1700000001000000000,
		.qemu_version = "QEMU emulator version 7.2.22",
		.tsc_khz = 2596128,
		.workspace_mib = 512,
		.tasks_max = 320,
		.host_cpu = "",
	};
	memset(k.kernel_sha256, 'a', 64);
	k.kernel_sha256[64] = '\0';
	return k;
}

/* meta built from a, matched against b: the result, and why in *msg. */
static int match(const struct qemu_snap_key *a, const struct qemu_snap_key *b, struct err *why)
{
	json_t *meta = qemu_meta_build(a);
	assert_non_null(meta);
	/* Through text, as it is stored. */
	char *text = json_dumps(meta, 0);
	json_decref(meta);
	meta = json_loads(text, 0, NULL);
	free(text);
	int r = qemu_meta_match(meta, b, why);
	json_decref(meta);
	return r;
}

static void test_same_inputs_match(void **state)
{
	struct qemu_snap_key k = key();
	struct err why = { 0 };
	assert_int_equal(match(&k, &k, &why), 0);
}

static void expect_stale(const struct qemu_snap_key *want, const char *words)
{
	struct qemu_snap_key k = key();
	struct err why = { 0 };
	assert_int_equal(match(&k, want, &why), -ESTALE);
	if (!strstr(why.msg, words))
		fail_msg("`%s` does not say `%s`", why.msg, words);
}

static void test_every_input_counts(void **state)
{
	struct qemu_snap_key w = key();
	w.kernel_sha256[0] = 'b';
	expect_stale(&w, "guest kernel /a/vmlinux changed");

	w = key();
	w.rootfs_size += 4096;
	expect_stale(&w, "rootfs.ext4 changed");

	w = key();
	w.rootfs_mtime_ns += 1;
	expect_stale(&w, "rootfs.ext4 changed");

	w = key();
	w.m.rootfs = "/a/templates/node/rootfs.ext4";
	expect_stale(&w, "rootfs.ext4 changed");

	w = key();
	w.qemu_version = "QEMU emulator version 8.0.0";
	expect_stale(&w, "QEMU changed (QEMU emulator version 7.2.22, now QEMU emulator "
			 "version 8.0.0)");

	w = key();
	w.m.accel = QEMU_ACCEL_KVM;
	expect_stale(&w, "made with tcg, this server uses kvm");

	w = key();
	w.m.channel = QEMU_CHANNEL_VSOCK;
	expect_stale(&w, "agent channel is serial");

	w = key();
	w.m.mem_mib = 256;
	expect_stale(&w, "1 vCPU(s) and 128 MiB, sandboxes get 1 and 256 MiB");

	w = key();
	w.m.vcpus = 2;
	expect_stale(&w, "sandboxes get 2 and 128 MiB");

	w = key();
	w.workspace_mib = 1024;
	expect_stale(&w, "workspace is 512 MiB");

	w = key();
	w.tasks_max = 96;
	expect_stale(&w, "its guest allows 320 tasks, sandboxes get 96");

	w = key();
	w.tsc_khz = 2000000;
	expect_stale(&w, "TSC");

	w = key();
	w.host_cpu = "AMD EPYC";
	expect_stale(&w, "host CPU changed");

	w = key();
	w.m.cmdline = "console=ttyS0 tsc_early_khz=2596128 quiet";
	expect_stale(&w, "command line changed");
}

static void test_kernel_mtime_alone_does_not_count(void **state)
{
	/* The kernel is identified by its hash: touching it is not a change. */
	struct qemu_snap_key k = key(), w = key();
	w.kernel_mtime_ns += 5;
	struct err why = { 0 };
	assert_int_equal(match(&k, &w, &why), 0);
}

static void test_malformed_meta(void **state)
{
	struct qemu_snap_key k = key();
	struct err why = { 0 };
	json_t *meta = json_array();
	assert_int_equal(qemu_meta_match(meta, &k, &why), -EINVAL);
	json_decref(meta);

	meta = qemu_meta_build(&k);
	json_object_del(meta, "cmdline");
	assert_int_equal(qemu_meta_match(meta, &k, &why), -EINVAL);
	assert_non_null(strstr(why.msg, "incomplete"));
	json_decref(meta);

	meta = qemu_meta_build(&k);
	json_object_set_new(meta, "memMib", json_string("128"));
	assert_int_equal(qemu_meta_match(meta, &k, &why), -EINVAL);
	json_decref(meta);

	meta = qemu_meta_build(&k);
	json_object_set_new(meta, "format", json_integer(QEMU_SNAPSHOT_FORMAT + 1));
	assert_int_equal(qemu_meta_match(meta, &k, &why), -ESTALE);
	assert_non_null(strstr(why.msg, "format"));
	json_decref(meta);
}

static void test_tsc_rate(void **state)
{
	struct qemu_snap_key k = key();
	json_t *meta = qemu_meta_build(&k);
	assert_int_equal(qemu_meta_tsc_khz(meta), 2596128);
	json_object_set_new(meta, "tscKhz", json_integer(-1));
	assert_int_equal(qemu_meta_tsc_khz(meta), 0);
	json_decref(meta);
	assert_int_equal(qemu_meta_tsc_khz(NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_same_inputs_match),
		cmocka_unit_test(test_every_input_counts),
		cmocka_unit_test(test_kernel_mtime_alone_does_not_count),
		cmocka_unit_test(test_malformed_meta),
		cmocka_unit_test(test_tsc_rate),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
