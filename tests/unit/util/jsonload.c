/* Tests of src/util/jsonload.c: texts with large strings in every position parse to what
 * jansson builds from them, and what jansson refuses is refused with its message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "util/jsonload.h"

/* The text with each '@' replaced by a large run of `fill`. */
static char *expand(const char *tpl, char fill, size_t *len)
{
	size_t n = strlen(tpl), big = JSONLOAD_LARGE + 17;
	char *t = malloc(n * big + 1);
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		if (tpl[i] == '@') {
			memset(t + o, fill, big);
			o += big;
		} else {
			t[o++] = tpl[i];
		}
	}
	*len = o;
	return t;
}

static void same_as_jansson(const char *tpl, char fill, size_t flags)
{
	size_t len;
	char *t = expand(tpl, fill, &len);
	json_error_t e1, e2;
	json_t *a = json_loadb(t, len, flags, &e1);
	json_t *b = jsonload((const uint8_t *)t, len, flags, &e2);
	if (!a) {
		assert_null(b);
		assert_string_equal(e1.text, e2.text);
		assert_int_equal(e1.position, e2.position);
	} else {
		assert_non_null(b);
		assert_true(json_equal(a, b));
	}
	json_decref(a);
	json_decref(b);
	free(t);
}

static void test_large_strings_everywhere(void **state)
{
	static const char *const texts[] = {
		"{\"path\":\"f\",\"content\":\"@\",\"encoding\":\"base64\"}",
		"[\"@\",{\"@\":\"@\"},\"x\\\\[@\",[\"@\",\"@\"]]",
		"\"@\"",
		"{\"a\":\"@\\u00e9\",\"b\":\"\\u00e9@\",\"c\":\"@\\\"\"}",
		"{\"a\" : \"@\" , \"b\"\n:\n\"@\"}",
		"{\"k\":\"@\",\"k\":\"@\"}",
	};
	for (size_t i = 0; i < sizeof(texts) / sizeof(*texts); i++) {
		same_as_jansson(texts[i], 'A', 0);
		same_as_jansson(texts[i], 'A', JSON_REJECT_DUPLICATES);
	}
}

static void test_what_jansson_refuses_is_refused(void **state)
{
	static const char *const bad[] = {
		"{\"a\":\"@\"",
		"{\"a\":\"@\",}",
		"[\"@\" \"@\"]",
		"{\"a\":\"@\\q\"}",
		"{\"a\":x\"@\"}",
		"{\"@\"}",
		"{\"k\":\"@\",\"k\":\"@\"}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		same_as_jansson(bad[i], 'A', JSON_REJECT_DUPLICATES);
	/* Control characters and invalid UTF-8 inside a large string. */
	same_as_jansson("{\"a\":\"@\"}", '\t', 0);
	same_as_jansson("{\"a\":\"@\"}", (char)0xff, 0);
	same_as_jansson("{\"a\":\"@\"}", (char)0xc3, 0);
}

static void test_more_strings_than_it_cuts(void **state)
{
	char tpl[1024] = "[";
	for (int i = 0; i < 80; i++)
		strcat(tpl, i ? ",\"@\"" : "\"@\"");
	strcat(tpl, "]");
	same_as_jansson(tpl, 'z', 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_large_strings_everywhere),
		cmocka_unit_test(test_what_jansson_refuses_is_refused),
		cmocka_unit_test(test_more_strings_than_it_cuts),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
