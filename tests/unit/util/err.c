/* Tests of src/util/err.c: return values, messages, truncation and NULL handling. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "util/err.h"

static void test_set_returns_negative_errno(void **state)
{
	struct err e = { 0 };
	assert_int_equal(err_set(&e, ENOENT, "no template `%s`", "node"), -ENOENT);
	assert_int_equal(e.errnum, ENOENT);
	assert_string_equal(e.msg, "no template `node`");
}

static void test_set_zero_errnum_is_eio(void **state)
{
	struct err e = { 0 };
	assert_int_equal(err_set(&e, 0, "something"), -EIO);
	assert_int_equal(e.errnum, EIO);
	assert_int_equal(err_set(&e, -3, "negative"), -EIO);
	assert_int_equal(e.errnum, EIO);
}

static void test_null_err_is_allowed(void **state)
{
	assert_int_equal(err_set(NULL, EINVAL, "dropped %d", 1), -EINVAL);
	assert_int_equal(err_sys(NULL, EPERM, "dropped"), -EPERM);
	assert_int_equal(err_wrap(NULL, "ctx"), -EIO);
	err_clear(NULL);
}

static void test_sys_appends_strerror(void **state)
{
	struct err e = { 0 };
	char want[ERR_MSG_MAX];
	snprintf(want, sizeof(want), "open `/x`: %s", strerror(ENOENT));
	assert_int_equal(err_sys(&e, ENOENT, "open `%s`", "/x"), -ENOENT);
	assert_string_equal(e.msg, want);
	assert_int_equal(e.errnum, ENOENT);
}

static void test_long_messages_are_truncated(void **state)
{
	struct err e = { 0 };
	char big[ERR_MSG_MAX * 2];
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';

	err_set(&e, EINVAL, "%s", big);
	assert_int_equal(strlen(e.msg), ERR_MSG_MAX - 1);

	/* A message that fills the buffer gets no strerror suffix, and stays terminated. */
	err_sys(&e, EPERM, "%s", big);
	assert_int_equal(strlen(e.msg), ERR_MSG_MAX - 1);
	assert_null(strchr(e.msg, ':'));

	err_wrap(&e, "%s", big);
	assert_int_equal(strlen(e.msg), ERR_MSG_MAX - 1);
	assert_int_equal(e.errnum, EPERM);
}

static void test_wrap_prefixes_context(void **state)
{
	struct err e = { 0 };
	err_set(&e, EACCES, "permission denied");
	assert_int_equal(err_wrap(&e, "template `%s`", "go"), -EACCES);
	assert_string_equal(e.msg, "template `go`: permission denied");
	assert_int_equal(err_wrap(&e, "session %d", 7), -EACCES);
	assert_string_equal(e.msg, "session 7: template `go`: permission denied");
}

static void test_clear(void **state)
{
	struct err e = { 0 };
	err_set(&e, EBUSY, "busy");
	err_clear(&e);
	assert_int_equal(e.errnum, 0);
	assert_string_equal(e.msg, "");
}

static void test_copy(void **state)
{
	struct err a = { 0 }, b = { 0 };
	err_set(&a, ETIMEDOUT, "guest did not answer");
	assert_int_equal(err_copy(&b, &a), -ETIMEDOUT);
	assert_int_equal(b.errnum, ETIMEDOUT);
	assert_string_equal(b.msg, "guest did not answer");

	assert_int_equal(err_copy(NULL, &a), -ETIMEDOUT);
	assert_int_equal(err_copy(&a, &a), -ETIMEDOUT);
	assert_string_equal(a.msg, "guest did not answer");
	assert_int_equal(err_copy(&b, NULL), -EIO);
}

static void test_names(void **state)
{
	assert_string_equal(err_name(ENOENT), "ENOENT");
	assert_string_equal(err_name(EINVAL), "EINVAL");
	assert_string_equal(err_name(EADDRINUSE), "EADDRINUSE");
	assert_string_equal(err_name(ETIMEDOUT), "ETIMEDOUT");
	assert_string_equal(err_name(0), "EIO");
	assert_string_equal(err_name(99999), "EIO");
	assert_string_equal(err_name(-ENOENT), "EIO");
	/* And back, for every name err_name gives: what the agent sends the host. */
	for (int e = 1; e < 200; e++) {
		const char *n = err_name(e);
		if (strcmp(n, "EIO") != 0 || e == EIO)
			assert_int_equal(err_from_name(n), e);
	}
	assert_int_equal(err_from_name("ENOENT"), ENOENT);
	assert_int_equal(err_from_name("EREMOTEIO"), EREMOTEIO);
	assert_int_equal(err_from_name("ESCAPE"), 0);
	assert_int_equal(err_from_name(""), 0);
	assert_int_equal(err_from_name(NULL), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_set_returns_negative_errno),
		cmocka_unit_test(test_set_zero_errnum_is_eio),
		cmocka_unit_test(test_null_err_is_allowed),
		cmocka_unit_test(test_sys_appends_strerror),
		cmocka_unit_test(test_long_messages_are_truncated),
		cmocka_unit_test(test_wrap_prefixes_context),
		cmocka_unit_test(test_clear),
		cmocka_unit_test(test_copy),
		cmocka_unit_test(test_names),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
