/* Tests of src/driver/qemu/qemu_kvm_cache.c: the KVM probe's verdict is reused only for the
 * same boot, host kernel, QEMU and guest kernel, and only from a well-formed file of ours. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "driver/qemu/qemu.h"
#include "util/cleanup.h"

static char dir[] = "/tmp/kvm-cache-test-XXXXXX";
static char boot_id[300], qemu_bin[300], kernel[300], cache[300];

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	assert_int_equal(fclose(f), 0);
}

static int setup(void **state)
{
	assert_non_null(mkdtemp(dir));
	snprintf(boot_id, sizeof(boot_id), "%s/boot_id", dir);
	snprintf(qemu_bin, sizeof(qemu_bin), "%s/qemu-system-x86_64", dir);
	snprintf(kernel, sizeof(kernel), "%s/vmlinux", dir);
	snprintf(cache, sizeof(cache), "%s/kvm-probe.json", dir);
	write_file(boot_id, "6f3c1a52-0b8e-4d7f-9a51-3c2d8e7f1a90\n");
	write_file(qemu_bin, "not really QEMU");
	write_file(kernel, "not really a kernel");
	return 0;
}

static int teardown(void **state)
{
	unlink(boot_id);
	unlink(qemu_bin);
	unlink(kernel);
	unlink(cache);
	rmdir(dir);
	return 0;
}

static json_t *key_now(void)
{
	struct err e;
	json_t *k =
		qemu_kvm_cache_key(boot_id, qemu_bin, "QEMU emulator version 7.2.22", kernel, &e);
	if (!k)
		fail_msg("no key: %s", e.msg);
	return k;
}

/* 0 and the verdict, or -1; reason gets why not. */
static int load(const json_t *key, bool *usable, char *why, char *reason)
{
	return qemu_kvm_cache_load(cache, key, usable, why, 160, reason, 160);
}

static void test_kept_and_read_back(void **state)
{
	json_t *key = key_now();
	struct err e;
	char why[160] = "", reason[160] = "";
	bool usable = true;
	unlink(cache);
	assert_int_equal(load(key, &usable, why, reason), -1);
	assert_string_equal(reason, "none kept yet");

	const char *said = "a guest kernel did not boot under KVM within 3000 ms (nested KVM?)";
	assert_int_equal(qemu_kvm_cache_store(cache, key, false, said, &e), 0);
	struct stat st;
	assert_int_equal(stat(cache, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0600);
	assert_int_equal(load(key, &usable, why, reason), 0);
	assert_false(usable);
	assert_string_equal(why, said);

	assert_int_equal(qemu_kvm_cache_store(cache, key, true, NULL, &e), 0);
	usable = false;
	assert_int_equal(load(key, &usable, why, reason), 0);
	assert_true(usable);
	json_decref(key);
}

/* Another boot, host kernel, QEMU or guest kernel: probe again. */
static void test_other_inputs_are_not_believed(void **state)
{
	json_t *key = key_now();
	struct err e;
	char why[160], reason[160];
	bool usable;
	assert_int_equal(qemu_kvm_cache_store(cache, key, true, NULL, &e), 0);

	write_file(boot_id, "0d9a7e3b-5c41-4b2f-8e6d-1f0a9c8b7e65\n");
	json_t *other = key_now();
	assert_int_equal(load(other, &usable, why, reason), -1);
	assert_non_null(strstr(reason, "another boot"));
	json_decref(other);
	write_file(boot_id, "6f3c1a52-0b8e-4d7f-9a51-3c2d8e7f1a90\n");
	other = key_now();
	assert_int_equal(load(other, &usable, why, reason), 0); /* the same again */
	json_decref(other);

	other = qemu_kvm_cache_key(boot_id, qemu_bin, "QEMU emulator version 8.0.0", kernel, &e);
	assert_int_equal(load(other, &usable, why, reason), -1);
	json_decref(other);

	write_file(kernel, "another guest kernel, of another size");
	other = key_now();
	assert_int_equal(load(other, &usable, why, reason), -1);
	json_decref(other);

	write_file(qemu_bin, "another QEMU binary, of another size");
	other = key_now();
	json_t *k2 = json_deep_copy(other);
	assert_int_equal(qemu_kvm_cache_store(cache, other, true, NULL, &e), 0);
	assert_int_equal(load(k2, &usable, why, reason), 0);
	/* The host kernel is part of it too. */
	json_object_set_new(k2, "hostKernel", json_string("6.1.0-99-amd64"));
	assert_int_equal(load(k2, &usable, why, reason), -1);
	json_decref(k2);
	json_decref(other);
	json_decref(key);

	/* No boot id: no key, so nothing is kept or believed. */
	assert_null(qemu_kvm_cache_key("/nonexistent/boot_id", qemu_bin, "v", kernel, &e));
	assert_null(qemu_kvm_cache_key(boot_id, "/nonexistent/qemu", "v", kernel, &e));
}

/* A file that is not what the daemon writes is ignored, whatever it says. */
static void test_malformed_files_are_ignored(void **state)
{
	json_t *key = key_now();
	_cleanup_free_ char *k = json_dumps(key, JSON_COMPACT);
	char *bad[] = {
		xstrdup(""),
		xstrdup("not json"),
		xstrdup("[]"),
		xasprintf("{\"format\":1,\"key\":%s,\"usable\":true", k), /* cut short */
		xasprintf("{\"format\":1,\"key\":%s,\"usable\":\"yes\"}", k),
		xasprintf("{\"format\":1,\"key\":%s}", k),
		xasprintf("{\"format\":2,\"key\":%s,\"usable\":true}", k),
		xasprintf("{\"format\":\"1\",\"key\":%s,\"usable\":true}", k),
		xasprintf("{\"format\":1,\"key\":\"%s\",\"usable\":true}", "x"),
		xasprintf("{\"format\":1,\"key\":%s,\"usable\":false}", k), /* no reason */
		xasprintf("{\"format\":1,\"key\":%s,\"usable\":false,\"why\":7}", k),
		xasprintf("{\"format\":1,\"key\":%s,\"usable\":false,\"why\":\"\"}", k),
		xasprintf("{\"format\":1,\"key\":%s,\"usable\":false,\"why\":\"\\u001b[2J\"}", k),
		xasprintf("{\"format\":1,\"key\":%s,\"usable\":true,\"usable\":false}", k),
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		write_file(cache, bad[i]);
		chmod(cache, 0600);
		bool usable = true;
		char why[160] = "unchanged", reason[160] = "";
		if (load(key, &usable, why, reason) != -1)
			fail_msg("believed `%s`", bad[i]);
		assert_true(usable);
		assert_string_equal(why, "unchanged");
		free(bad[i]);
	}
	/* A reason too long for the caller's buffer is not cut and believed either. */
	char long_why[400];
	memset(long_why, 'x', sizeof(long_why) - 1);
	long_why[sizeof(long_why) - 1] = '\0';
	struct err e;
	assert_int_equal(qemu_kvm_cache_store(cache, key, false, long_why, &e), 0);
	bool usable;
	char why[160], reason[160];
	assert_int_equal(load(key, &usable, why, reason), -1);
	json_decref(key);
}

/* Only a regular file of ours that nobody else may write. */
static void test_files_others_could_write_are_ignored(void **state)
{
	json_t *key = key_now();
	struct err e;
	bool usable;
	char why[160], reason[160];
	assert_int_equal(qemu_kvm_cache_store(cache, key, true, NULL, &e), 0);
	assert_int_equal(chmod(cache, 0666), 0);
	assert_int_equal(load(key, &usable, why, reason), -1);
	assert_int_equal(chmod(cache, 0620), 0);
	assert_int_equal(load(key, &usable, why, reason), -1);
	assert_int_equal(chmod(cache, 0644), 0);
	assert_int_equal(load(key, &usable, why, reason), 0);

	/* A symbolic link to a good file is not followed. */
	char real[320];
	snprintf(real, sizeof(real), "%s/real.json", dir);
	assert_int_equal(rename(cache, real), 0);
	assert_int_equal(symlink(real, cache), 0);
	assert_int_equal(load(key, &usable, why, reason), -1);
	unlink(cache);
	unlink(real);
	/* Nor is a directory read. */
	assert_int_equal(mkdir(cache, 0700), 0);
	assert_int_equal(load(key, &usable, why, reason), -1);
	rmdir(cache);
	json_decref(key);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_kept_and_read_back),
		cmocka_unit_test(test_other_inputs_are_not_believed),
		cmocka_unit_test(test_malformed_files_are_ignored),
		cmocka_unit_test(test_files_others_could_write_are_ignored),
	};
	return cmocka_run_group_tests(tests, setup, teardown);
}
