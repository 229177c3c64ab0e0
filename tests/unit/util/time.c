/* Tests of src/util/time.c: ISO 8601 times read back as the API writes them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <string.h>

#include <cmocka.h>

#include "util/time.h"

static void test_times_read(void **state)
{
	static const struct {
		const char *s;
		uint64_t want;
	} ok[] = {
		{ "1970-01-01T00:00:00Z", 0 },
		{ "1970-01-01T00:00:00.001Z", 1 },
		{ "2026-12-07T23:25:00.123Z", 1796685900123ull },
		{ "2026-12-07T23:25:00Z", 1796685900000ull },
		{ "2026-12-07T23:25:00", 1796685900000ull },
		{ "2026-12-07t23:25:00.1z", 1796685900100ull },
		{ "2026-12-07 23:25:00.123456789Z", 1796685900123ull },
		{ "2026-12-08T01:25:00+02:00", 1796685900000ull },
		{ "2026-12-07T22:25:00-01:00", 1796685900000ull },
		{ "2024-02-29T00:00:00Z", 1709164800000ull },
		{ "2000-03-01T00:00:00Z", 951868800000ull },
	};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		uint64_t ms = 7;
		if (time_parse_iso8601(ok[i].s, &ms) != 0 || ms != ok[i].want)
			print_error("%s: %llu, want %llu\n", ok[i].s, (unsigned long long)ms,
				    (unsigned long long)ok[i].want);
		assert_int_equal(time_parse_iso8601(ok[i].s, &ms), 0);
		assert_int_equal(ms, ok[i].want);
	}
}

static void test_round_trip(void **state)
{
	for (uint64_t ms = 0; ms < 4000000000000ull; ms = ms * 3 + 987654321) {
		char text[TIME_ISO_LEN];
		time_iso8601(ms, text);
		uint64_t back = 0;
		assert_int_equal(time_parse_iso8601(text, &back), 0);
		assert_int_equal(back, ms);
	}
}

static void test_bad_times_refused(void **state)
{
	static const char *const bad[] = {
		"",
		"2026",
		"2026-12-07",
		"2026-12-07T23:25",
		"2026-13-01T00:00:00Z",
		"2026-00-01T00:00:00Z",
		"2026-12-32T00:00:00Z",
		"2026-11-31T00:00:00Z",
		"2025-02-29T00:00:00Z",
		"2026-12-07T24:00:00Z",
		"2026-12-07T23:60:00Z",
		"2026-12-07T23:25:61Z",
		"1969-12-31T23:59:59Z",
		"1970-01-01T00:00:00+00:01",
		"2026-12-07T23:25:00.Z",
		"2026-12-07T23:25:00Zjunk",
		"2026-12-07T23:25:00+2:00",
		"2026-12-07T23:25:00+24:00",
		"2026-12-07X23:25:00Z",
		"-026-12-07T23:25:00Z",
		"2026-12-07T23:25:00 ",
		"20261207T232500Z",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		uint64_t ms = 7;
		if (time_parse_iso8601(bad[i], &ms) != -EINVAL)
			print_error("`%s` was read\n", bad[i]);
		assert_int_equal(time_parse_iso8601(bad[i], &ms), -EINVAL);
		assert_int_equal(ms, 7);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_times_read),
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_bad_times_refused),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
