/* Unit tests of src/session/volume_spec.c: volume names, mount paths and the "volumes" of a
 * session's creation. */
#include <jansson.h>
#include <errno.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "session/volume.h"

static void test_names(void **state)
{
	(void)state;
	/* 63 characters, the most; and 64. */
	static const char longest[] =
		"x23456789012345678901234567890123456789012345678901234567890123";
	static const char too_long[] =
		"x234567890123456789012345678901234567890123456789012345678901234";
	static const char *const good[] = { "data", "a", "0", "my-vol_1.2", "A1", longest };
	static const char *const bad[] = { "",   ".",   "..",   "../x",        "a/b", "-x",    "_x",
					   ".x", "a b", "a\nb", "caf\xc3\xa9", "a:b", too_long };
	for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++)
		assert_true(volume_name_valid(good[i]));
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		assert_false(volume_name_valid(bad[i]));
	assert_false(volume_name_valid(NULL));
}

static void test_paths(void **state)
{
	(void)state;
	static const char *const good[] = { "/data",        "/mnt/a/b",      "/workspace",
					    "/workspace/v", "/tmp/x",        "/procfs",
					    "/devices",     "/..x",          "/a.b",
					    "/home/other",  "/home/username" };
	static const char *const bad[] = { "",          "data",       "/",           "//data",
					   "/data/",    "/a/../b",    "/a/./b",      "/..",
					   "/.",        "/proc",      "/proc/x",     "/dev",
					   "/dev/shm",  "/sys",       "/sys/fs",     "/run",
					   "/run/lock", "/a b",       "/a\tb",       "/caf\xc3\xa9",
					   "/home",     "/home/user", "/home/user/x" };
	struct err e;
	for (size_t i = 0; i < sizeof(good) / sizeof(*good); i++) {
		if (volume_path_check(good[i], &e) < 0)
			fail_msg("%s: %s", good[i], e.msg);
	}
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		if (volume_path_check(bad[i], &e) == 0)
			fail_msg("%s was accepted", bad[i]);
		assert_true(e.msg[0] != '\0');
	}
	char longp[300];
	memset(longp, 'a', sizeof(longp));
	longp[0] = '/';
	longp[VOLUME_PATH_MAX + 1] = '\0';
	assert_int_equal(volume_path_check(longp, &e), -EINVAL);
	longp[VOLUME_PATH_MAX] = '\0';
	assert_int_equal(volume_path_check(longp, &e), 0);
}

static int parse(const char *text, struct volume_mounts *m, struct err *e)
{
	json_t *v = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
	assert_non_null(v);
	int r = volume_mounts_parse(v, m, e);
	json_decref(v);
	return r;
}

static void test_mounts(void **state)
{
	(void)state;
	struct volume_mounts m;
	struct err e;
	assert_int_equal(volume_mounts_parse(NULL, &m, &e), 0);
	assert_int_equal(m.n, 0);
	assert_int_equal(parse("null", &m, &e), 0);
	assert_int_equal(m.n, 0);
	assert_int_equal(parse("[{\"name\": \"a\", \"path\": \"/a\"}, {\"name\": \"b\", \"path\": "
			       "\"/b\", \"readOnly\": true}]",
			       &m, &e),
			 0);
	assert_int_equal(m.n, 2);
	assert_string_equal(m.m[0].name, "a");
	assert_string_equal(m.m[0].path, "/a");
	assert_false(m.m[0].read_only);
	assert_true(m.m[1].read_only);
	volume_mounts_fini(&m);

	static const char *const bad[] = {
		"{}",
		"\"a\"",
		"[1]",
		"[{}]",
		"[{\"name\": \"a\"}]",
		"[{\"path\": \"/a\"}]",
		"[{\"name\": 1, \"path\": \"/a\"}]",
		"[{\"name\": \"a\", \"path\": \"/a\", \"readOnly\": 1}]",
		"[{\"name\": \"a\", \"path\": \"/a\", \"x\": 1}]",
		"[{\"name\": \"a\\u0000b\", \"path\": \"/a\"}]",
		"[{\"name\": \"a\", \"path\": \"/a\\u0000b\"}]",
		"[{\"name\": \"a\", \"path\": \"/a\"}, {\"name\": \"a\", \"path\": \"/b\"}]",
		"[{\"name\": \"a\", \"path\": \"/a\"}, {\"name\": \"b\", \"path\": \"/a\"}]",
		"[{\"name\": \"a\", \"path\": \"/a\"}, {\"name\": \"b\", \"path\": \"/a/b\"}]",
		"[{\"name\": \"a\", \"path\": \"/a/b\"}, {\"name\": \"b\", \"path\": \"/a\"}]",
		"[{\"name\": \"a\", \"path\": \"/proc/a\"}]",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		if (parse(bad[i], &m, &e) == 0)
			fail_msg("%s was accepted", bad[i]);
		assert_int_equal(m.n, 0);
	}
	/* /a and /ab are not one inside the other. */
	assert_int_equal(parse("[{\"name\": \"a\", \"path\": \"/a\"}, {\"name\": \"b\", \"path\": "
			       "\"/ab\"}]",
			       &m, &e),
			 0);
	volume_mounts_fini(&m);
	/* At most SANDBOX_VOLUMES_MAX. */
	json_t *many = json_array();
	for (int i = 0; i <= SANDBOX_VOLUMES_MAX; i++) {
		char name[8], path[8];
		snprintf(name, sizeof(name), "v%d", i);
		snprintf(path, sizeof(path), "/v%d", i);
		json_array_append_new(many, json_pack("{s:s, s:s}", "name", name, "path", path));
	}
	assert_int_equal(volume_mounts_parse(many, &m, &e), -EINVAL);
	json_array_remove(many, 0);
	assert_int_equal(volume_mounts_parse(many, &m, &e), 0);
	assert_int_equal(m.n, SANDBOX_VOLUMES_MAX);
	volume_mounts_fini(&m);
	json_decref(many);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_paths),
		cmocka_unit_test(test_mounts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
