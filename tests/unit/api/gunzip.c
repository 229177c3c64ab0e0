/* Tests of src/api/gunzip.c: the bounded gzip decoder of compressed uploads. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <zlib.h>

#include "api/gunzip.h"

/* in[0..n) gzip-compressed into a fresh buffer (*len). */
static uint8_t *gz(const void *in, size_t n, size_t *len)
{
	z_stream z = { 0 };
	assert_int_equal(deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY),
			 Z_OK);
	size_t cap = deflateBound(&z, n) + 64;
	uint8_t *out = malloc(cap);
	z.next_in = (Bytef *)in;
	z.avail_in = (uInt)n;
	z.next_out = out;
	z.avail_out = (uInt)cap;
	assert_int_equal(deflate(&z, Z_FINISH), Z_STREAM_END);
	*len = cap - z.avail_out;
	deflateEnd(&z);
	return out;
}

/* Decodes body in pieces of `piece` bytes into buffers of `cap`; the output is appended to
 * out (at most out_cap). Returns the last status. */
static enum gunzip_status decode(struct gunzip *g, const uint8_t *body, size_t len, size_t piece,
				 size_t cap, uint8_t *out, size_t out_cap, size_t *total)
{
	uint8_t *buf = malloc(cap);
	enum gunzip_status st = GUNZIP_MORE;
	size_t off = 0;
	*total = 0;
	for (;;) {
		size_t n = len - off < piece ? len - off : piece, used, made;
		st = gunzip_feed(g, body + off, n, &used, buf, cap, &made);
		assert_true(made <= cap && used <= n);
		if (*total + made <= out_cap)
			memcpy(out + *total, buf, made);
		*total += made;
		off += used;
		if (st == GUNZIP_ERROR || st == GUNZIP_LIMIT)
			break;
		if (st != GUNZIP_FULL && off == len)
			break;
	}
	free(buf);
	return st;
}

static void test_whole_and_in_pieces(void **state)
{
	char text[5000];
	for (size_t i = 0; i < sizeof(text); i++)
		text[i] = (char)('a' + i * 7 % 26);
	size_t len;
	uint8_t *body = gz(text, sizeof(text), &len);
	const size_t pieces[] = { 1, 3, 100, 100000 }, caps[] = { 1, 7, 4096, 65536 };
	for (size_t p = 0; p < 4; p++)
		for (size_t c = 0; c < 4; c++) {
			struct gunzip g;
			assert_int_equal(gunzip_init(&g, 1 << 20), 0);
			uint8_t out[6000];
			size_t total;
			enum gunzip_status st =
				decode(&g, body, len, pieces[p], caps[c], out, sizeof(out), &total);
			assert_int_equal(st, GUNZIP_END);
			assert_true(gunzip_complete(&g));
			assert_int_equal(total, sizeof(text));
			assert_memory_equal(out, text, sizeof(text));
			gunzip_fini(&g);
		}
	free(body);
}

static void test_members_one_after_the_other(void **state)
{
	size_t a_len, b_len;
	uint8_t *a = gz("one ", 4, &a_len), *b = gz("two", 3, &b_len);
	uint8_t *body = malloc(a_len + b_len);
	memcpy(body, a, a_len);
	memcpy(body + a_len, b, b_len);
	struct gunzip g;
	assert_int_equal(gunzip_init(&g, 100), 0);
	uint8_t out[16];
	size_t total;
	assert_int_equal(decode(&g, body, a_len + b_len, 5, 2, out, sizeof(out), &total),
			 GUNZIP_END);
	assert_int_equal(total, 7);
	assert_memory_equal(out, "one two", 7);
	gunzip_fini(&g);
	free(a);
	free(b);
	free(body);
}

static void test_a_bomb_stops_at_the_limit(void **state)
{
	size_t n = 16u << 20, len;
	uint8_t *zeros = calloc(1, n);
	uint8_t *body = gz(zeros, n, &len);
	free(zeros);
	assert_true(len < 64u << 10);
	struct gunzip g;
	assert_int_equal(gunzip_init(&g, 1u << 20), 0);
	uint8_t out[1];
	size_t total;
	assert_int_equal(decode(&g, body, len, len, 65536, out, 0, &total), GUNZIP_LIMIT);
	/* Stopped within one buffer of the limit, not at the 16 MiB the body holds. */
	assert_true(total > 1u << 20 && total <= (1u << 20) + 65536);
	gunzip_fini(&g);
	free(body);
}

static void test_malformed_and_truncated(void **state)
{
	struct gunzip g;
	uint8_t out[64];
	size_t total, len;
	assert_int_equal(gunzip_init(&g, 100), 0);
	assert_int_equal(decode(&g, (const uint8_t *)"plain text", 10, 10, 64, out, 64, &total),
			 GUNZIP_ERROR);
	assert_true(strlen(g.error) > 0);
	gunzip_fini(&g);

	uint8_t *body = gz("truncated here", 14, &len);
	assert_int_equal(gunzip_init(&g, 100), 0);
	assert_int_equal(decode(&g, body, len - 4, 1000, 64, out, 64, &total), GUNZIP_MORE);
	assert_false(gunzip_complete(&g));
	gunzip_fini(&g);

	uint8_t *junk = malloc(len + 4);
	memcpy(junk, body, len);
	memcpy(junk + len, "junk", 4);
	assert_int_equal(gunzip_init(&g, 100), 0);
	assert_int_equal(decode(&g, junk, len + 4, 1000, 64, out, 64, &total), GUNZIP_ERROR);
	gunzip_fini(&g);
	free(junk);
	free(body);

	/* Nothing at all is not a complete body. */
	assert_int_equal(gunzip_init(&g, 100), 0);
	assert_false(gunzip_complete(&g));
	gunzip_fini(&g);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_whole_and_in_pieces),
		cmocka_unit_test(test_members_one_after_the_other),
		cmocka_unit_test(test_a_bomb_stops_at_the_limit),
		cmocka_unit_test(test_malformed_and_truncated),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
