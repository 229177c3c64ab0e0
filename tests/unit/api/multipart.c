/* Tests of src/api/multipart.c: the streaming multipart/form-data parser of uploads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/multipart.h"

/* What the callbacks saw, as text: "<name|filename>data|" per part. */
struct seen {
	char log[4096];
	size_t n;
};

static void add(struct seen *s, const char *t, size_t n)
{
	assert_true(s->n + n < sizeof(s->log));
	memcpy(s->log + s->n, t, n);
	s->n += n;
	s->log[s->n] = '\0';
}

static int on_begin(const char *name, const char *filename, void *arg)
{
	char b[256];
	int n = snprintf(b, sizeof(b), "<%s|%s>", name, filename);
	add(arg, b, (size_t)n);
	return 0;
}

static int on_data(const uint8_t *d, size_t n, void *arg)
{
	add(arg, (const char *)d, n);
	return 0;
}

static int on_end(void *arg)
{
	add(arg, "|", 1);
	return 0;
}

static const struct multipart_cbs cbs = { on_begin, on_data, on_end };

/* Parses body in pieces of `step` bytes; returns 0 or -1, the log in s, the error in why. */
static int parse(const char *boundary, const char *body, size_t step, struct seen *s, char why[160])
{
	struct multipart m;
	memset(s, 0, sizeof(*s));
	multipart_init(&m, boundary, &cbs, s);
	size_t len = strlen(body);
	int r = 0;
	for (size_t off = 0; off < len && r == 0; off += step)
		r = multipart_feed(&m, (const uint8_t *)body + off,
				   step < len - off ? step : len - off);
	if (r == 0)
		r = multipart_finish(&m);
	snprintf(why, 160, "%s", m.error);
	multipart_fini(&m);
	return r;
}

static const char two_files[] =
	"preamble\r\n--XyZ\r\n"
	"Content-Disposition: form-data; name=\"file\"; filename=\"/home/user/a.txt\"\r\n"
	"Content-Type: application/octet-stream\r\n\r\n"
	"hello\r\n--XyY-near\r\n"
	"--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"b%22q%0A.txt\"\r\n\r\n"
	"\r\n--XyZ--\r\nepilogue";

static void test_parts_whole_and_in_pieces(void **state)
{
	const char *want = "<file|/home/user/a.txt>hello\r\n--XyY-near|<file|b\"q\n.txt>|";
	struct seen s;
	char why[160];
	for (size_t step = 1; step <= sizeof(two_files); step++) {
		assert_int_equal(parse("XyZ", two_files, step, &s, why), 0);
		assert_string_equal(s.log, want);
	}
}

static void test_boundary(void **state)
{
	char b[MULTIPART_BOUNDARY_MAX + 1];
	assert_int_equal(multipart_boundary("multipart/form-data; boundary=abc", b), 0);
	assert_string_equal(b, "abc");
	assert_int_equal(multipart_boundary("multipart/form-data; charset=x; boundary=\"a b\"", b),
			 0);
	assert_string_equal(b, "a b");
	assert_int_equal(multipart_boundary("multipart/form-data", b), -1);
	assert_int_equal(multipart_boundary("multipart/form-data; boundary=", b), -1);
	assert_int_equal(multipart_boundary("multipart/form-data; boundary=\"open", b), -1);
	assert_int_equal(multipart_boundary("text/plain; boundary=abc", b), -1);
	assert_int_equal(multipart_boundary("multipart/form-data; boundary=a\x01", b), -1);
	char longer[200];
	snprintf(longer, sizeof(longer), "multipart/form-data; boundary=%071d", 0);
	assert_int_equal(multipart_boundary(longer, b), -1);
}

static void test_malformed(void **state)
{
	static const char *const bad[] = {
		/* no closing delimiter */
		"--b\r\nContent-Disposition: form-data; name=\"file\"\r\n\r\nx",
		/* no Content-Disposition */
		"--b\r\nContent-Type: text/plain\r\n\r\nx\r\n--b--",
		/* headers at once: no name */
		"--b\r\n\r\nx\r\n--b--",
		/* not form-data */
		"--b\r\nContent-Disposition: attachment; name=\"f\"\r\n\r\nx\r\n--b--",
		/* a delimiter followed by junk */
		"--bjunk\r\n",
		/* a header line without a colon */
		"--b\r\nContent-Disposition: form-data; name=\"f\"\r\nbroken\r\n\r\nx\r\n--b--",
		/* nothing at all */
		"",
	};
	struct seen s;
	char why[160];
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(parse("b", bad[i], 3, &s, why), -1);
		assert_true(why[0] != '\0');
	}
}

static void test_headers_bounded(void **state)
{
	/* Headers that never end stop at the limit, not at the end of memory. */
	size_t n = MULTIPART_HEADERS_MAX * 3;
	char *body = malloc(n + 64);
	assert_non_null(body);
	int k = snprintf(body, 64, "--b\r\nContent-Disposition: form-data; name=\"f\"\r\n");
	memset(body + k, 'h', n);
	body[k + n] = '\0';
	struct seen s;
	char why[160];
	assert_int_equal(parse("b", body, 1000, &s, why), -1);
	assert_non_null(strstr(why, "too long"));
	free(body);
}

static void test_parts_bounded(void **state)
{
	size_t one = 60, n = (MULTIPART_PARTS_MAX + 1) * one + 16;
	char *body = malloc(n);
	assert_non_null(body);
	size_t off = 0;
	for (int i = 0; i <= MULTIPART_PARTS_MAX; i++)
		off += (size_t)snprintf(
			body + off, n - off,
			"--b\r\nContent-Disposition: form-data; name=x\r\n\r\n\r\n");
	snprintf(body + off, n - off, "--b--");
	struct seen s;
	char why[160];
	struct multipart m;
	multipart_init(&m, "b", &(struct multipart_cbs){ 0 }, &s);
	assert_int_equal(multipart_feed(&m, (const uint8_t *)body, strlen(body)), -1);
	assert_non_null(strstr(m.error, "too many parts"));
	multipart_fini(&m);
	(void)why;
	free(body);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parts_whole_and_in_pieces),
		cmocka_unit_test(test_boundary),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_headers_bounded),
		cmocka_unit_test(test_parts_bounded),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
