/* Tests of src/util/size.c: the size syntax the settings and the CLI share. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <string.h>

#include <cmocka.h>

#include "util/size.h"

static void test_sizes_read(void **state)
{
	static const struct {
		const char *s;
		uint64_t want;
	} ok[] = {
		{ "0", 0 },
		{ "1", 1 },
		{ "1048576", 1048576 },
		{ "512M", 512ull << 20 },
		{ "512m", 512ull << 20 },
		{ "512MB", 512ull << 20 },
		{ "512MiB", 512ull << 20 },
		{ "4k", 4096 },
		{ "3G", 3ull << 30 },
		{ "2T", 2ull << 40 },
		{ "0M", 0 },
		{ "007K", 7 << 10 },
		{ "9223372036854775807", INT64_MAX },
		{ "8388607T", 8388607ull << 40 },
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		uint64_t v = 12345;
		if (size_parse(ok[i].s, &v) != 0)
			fail_msg("`%s` was refused", ok[i].s);
		if (v != ok[i].want)
			fail_msg("`%s` read as %llu", ok[i].s, (unsigned long long)v);
	}
}

static void test_garbage_refused(void **state)
{
	static const char *const bad[] = { "",    "M",    "K5",   "5X",  "5.5M", " 5",  "5 ",
					   "+5",  "5Mi",  "5MBB", "5mb", "0x10", "1e3", "5KM",
					   "5 M", "five", "5B",   "5iB", "\n5",  "5\n" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint64_t v = 777;
		int r = size_parse(bad[i], &v);
		if (r != -EINVAL)
			fail_msg("`%s`: %d, not -EINVAL", bad[i], r);
		assert_true(v == 777); /* untouched */
	}
	uint64_t v = 777;
	assert_int_equal(size_parse(NULL, &v), -EINVAL);
	assert_non_null(strstr(size_parse_problem(-EINVAL), "not a size"));
}

static void test_negative_refused(void **state)
{
	static const char *const bad[] = { "-1", "-512M", "-0", "-99999999999999999999999" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint64_t v = 777;
		if (size_parse(bad[i], &v) != -EDOM)
			fail_msg("`%s` was not refused as negative", bad[i]);
		assert_true(v == 777);
	}
	assert_non_null(strstr(size_parse_problem(-EDOM), "negative"));
}

static void test_overflow_refused(void **state)
{
	static const char *const bad[] = { "9223372036854775808",     "18446744073709551616",
					   "99999999999999999999999", "8388608T",
					   "9007199254740992K",       "17179869184G" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint64_t v = 777;
		if (size_parse(bad[i], &v) != -ERANGE)
			fail_msg("`%s` was not refused as too large", bad[i]);
		assert_true(v == 777);
	}
	assert_non_null(strstr(size_parse_problem(-ERANGE), "too large"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sizes_read),
		cmocka_unit_test(test_garbage_refused),
		cmocka_unit_test(test_negative_refused),
		cmocka_unit_test(test_overflow_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
