/* Tests of src/util/jsonlimit.c: nesting and values are counted outside strings only, the
 * count never falls below what a parser builds, and the first limit crossed is named. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "util/jsonlimit.h"

static int check(const char *text, unsigned depth, unsigned elements, struct err *e)
{
	struct jsonlimit lim = { .max_depth = depth, .max_elements = elements };
	return jsonlimit_check((const uint8_t *)text, strlen(text), &lim, e);
}

static void test_within(void **state)
{
	struct err e;
	assert_int_equal(check("{}", 1, 2, &e), 0);
	assert_int_equal(check("{\"a\":[1,2,{\"b\":null}]}", 3, 8, &e), 0);
	assert_int_equal(check("", 1, 1, &e), 0);
}

static void test_depth(void **state)
{
	struct err e;
	assert_int_equal(check("[[[]]]", 3, 100, &e), 0);
	assert_int_equal(check("[[[[]]]]", 3, 100, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "deeper than 3 levels"));
	assert_non_null(strstr(e.msg, "SANDBOX_MAX_JSON_DEPTH"));
	/* Brackets in strings, escaped quotes included, are text. */
	assert_int_equal(check("[\"[[[[\\\"[[[[\"]", 1, 100, &e), 0);
	/* Closing more than was opened does not earn depth back. */
	assert_int_equal(check("]]]][[", 1, 100, &e), -EINVAL);
}

static void test_elements(void **state)
{
	struct err e;
	assert_int_equal(check("[1,2,3]", 10, 5, &e), 0);
	assert_int_equal(check("[1,2,3,4,5]", 10, 5, &e), -EMSGSIZE);
	assert_non_null(strstr(e.msg, "more than 5 values"));
	assert_non_null(strstr(e.msg, "SANDBOX_MAX_JSON_ELEMENTS"));
	assert_int_equal(check("[\"1,2,3,4,5,6,7,8,9\"]", 10, 3, &e), 0);
}

/* Counts the values jansson built, and their deepest nesting. */
static size_t tree_values(json_t *j, unsigned level, unsigned *deepest)
{
	size_t n = 1;
	if (json_is_object(j) || json_is_array(j)) {
		if (level + 1 > *deepest)
			*deepest = level + 1;
	}
	if (json_is_object(j)) {
		const char *k;
		json_t *v;
		json_object_foreach (j, k, v)
			n += tree_values(v, level + 1, deepest);
	} else if (json_is_array(j)) {
		size_t i;
		json_t *v;
		json_array_foreach (j, i, v)
			n += tree_values(v, level + 1, deepest);
	}
	return n;
}

static void test_never_below_the_parser(void **state)
{
	/* A text at its limits exactly passes, and what jansson builds of it is within them. */
	const char *texts[] = { "{\"a\":{\"b\":[1,[2,[3]],{}]},\"c\":\"]]]\"}", "[[],[],[[]]]",
				"[0,0,0,0,0,0,0,0,0,0]", "{\"x\\\"\":[\"\\\\\",1]}" };
	for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++) {
		json_t *j = json_loads(texts[i], JSON_DECODE_ANY, NULL);
		assert_non_null(j);
		unsigned depth = 0;
		size_t values = tree_values(j, 0, &depth);
		json_decref(j);
		struct err e;
		unsigned lo_depth = 0, lo_values = 0;
		for (unsigned d = 1; d <= 10 && !lo_depth; d++)
			if (check(texts[i], d, 1000, &e) == 0)
				lo_depth = d;
		for (unsigned v = 1; v <= 1000 && !lo_values; v++)
			if (check(texts[i], 100, v, &e) == 0)
				lo_values = v;
		assert_int_equal(lo_depth, depth);
		assert_true(lo_values >= values);
		assert_true(lo_values <= 2 * values);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_within),
		cmocka_unit_test(test_depth),
		cmocka_unit_test(test_elements),
		cmocka_unit_test(test_never_below_the_parser),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
