/* Tests of src/util/text.c (UTF-8 boundaries and repair, base64) and src/util/sha256.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/sha256.h"
#include "util/text.h"

static void test_incomplete_tail(void **state)
{
	const uint8_t euro[] = { 0xe2, 0x82, 0xac }; /* U+20AC */
	assert_int_equal(utf8_incomplete_tail(euro, 3), 0);
	assert_int_equal(utf8_incomplete_tail(euro, 2), 2);
	assert_int_equal(utf8_incomplete_tail(euro, 1), 1);
	const uint8_t mixed[] = { 'a', 'b', 0xf0, 0x9f, 0x98 }; /* cut emoji */
	assert_int_equal(utf8_incomplete_tail(mixed, sizeof(mixed)), 3);
	const uint8_t ascii[] = "hello";
	assert_int_equal(utf8_incomplete_tail(ascii, 5), 0);
	/* An invalid byte is not held back: it can never become valid. */
	const uint8_t bad[] = { 'a', 0xff };
	assert_int_equal(utf8_incomplete_tail(bad, 2), 0);
}

/* Feeds buf cut at every pair of points: the verdict never depends on where it is cut. */
static bool stream_verdict_everywhere(const uint8_t *buf, size_t len, bool want)
{
	for (size_t a = 0; a <= len; a++) {
		for (size_t b = a; b <= len; b++) {
			struct utf8_stream st = { 0 };
			utf8_stream_feed(&st, buf, a);
			utf8_stream_feed(&st, buf + a, b - a);
			utf8_stream_feed(&st, buf + b, len - b);
			if (utf8_stream_end(&st) != want)
				return false;
		}
	}
	return true;
}

static void test_stream(void **state)
{
	const uint8_t text[] = "h\xc3\xa9llo \xe2\x82\xac \xf0\x9f\x98\x80!";
	assert_true(stream_verdict_everywhere(text, sizeof(text) - 1, true));
	const uint8_t nul[] = { 'a', 0, 'b' };
	assert_true(stream_verdict_everywhere(nul, sizeof(nul), false));
	const uint8_t lone[] = { 'a', 0x80, 'b' };
	assert_true(stream_verdict_everywhere(lone, sizeof(lone), false));
	const uint8_t cut[] = { 'a', 0xe2, 0x82 };
	assert_true(stream_verdict_everywhere(cut, sizeof(cut), false));
	const uint8_t surrogate[] = { 0xed, 0xa0, 0x80 };
	assert_true(stream_verdict_everywhere(surrogate, sizeof(surrogate), false));
	const uint8_t overlong[] = { 0xe0, 0x80, 0xaf };
	assert_true(stream_verdict_everywhere(overlong, sizeof(overlong), false));
	const uint8_t broken[] = { 0xe2, 'a', 0xac };
	assert_true(stream_verdict_everywhere(broken, sizeof(broken), false));
	/* Once not text, it stays so. */
	struct utf8_stream st = { 0 };
	assert_false(utf8_stream_feed(&st, nul, sizeof(nul)));
	assert_false(utf8_stream_feed(&st, text, 3));
	assert_false(utf8_stream_end(&st));
	/* Nothing at all is text. */
	struct utf8_stream empty = { 0 };
	assert_true(utf8_stream_end(&empty));
}

static void test_valid(void **state)
{
	assert_true(utf8_valid((const uint8_t *)"h\xc3\xa9llo", 6));
	assert_false(utf8_valid((const uint8_t *)"\xc0\xaf", 2));         /* overlong */
	assert_false(utf8_valid((const uint8_t *)"\xed\xa0\x80", 3));     /* surrogate */
	assert_false(utf8_valid((const uint8_t *)"\xf4\x90\x80\x80", 4)); /* > U+10FFFF */
	assert_false(utf8_valid((const uint8_t *)"\xe2\x82", 2));
}

static void test_sanitize_replaces_each_bad_byte(void **state)
{
	size_t n;
	char *s = utf8_sanitize((const uint8_t *)"a\xff"
						 "b\xc3\xa9",
				5, &n);
	assert_string_equal(s, "a\xef\xbf\xbd"
			       "b\xc3\xa9");
	assert_int_equal(n, strlen(s));
	free(s);
}

static void test_base64_round_trip_all_bytes(void **state)
{
	uint8_t all[256];
	for (int i = 0; i < 256; i++)
		all[i] = (uint8_t)i;
	for (size_t len = 0; len <= 256; len += 1) {
		size_t elen;
		char *enc = base64_encode(all, len, &elen);
		assert_int_equal(elen % 4, 0);
		uint8_t *dec;
		size_t dlen;
		assert_int_equal(base64_decode(enc, elen, &dec, &dlen), 0);
		assert_int_equal(dlen, len);
		assert_memory_equal(dec, all, len);
		/* Into a buffer: the same characters, BASE64_LEN of them, nothing after. */
		char into[BASE64_LEN(256) + 1];
		memset(into, '#', sizeof(into));
		assert_int_equal(base64_encode_into(into, all, len), elen);
		assert_int_equal(BASE64_LEN(len), elen);
		assert_memory_equal(into, enc, elen);
		assert_int_equal(into[elen], '#');
		free(dec);
		free(enc);
	}
}

static void test_base64_known_and_bad(void **state)
{
	size_t n;
	char *enc = base64_encode((const uint8_t *)"foobar", 6, &n);
	assert_string_equal(enc, "Zm9vYmFy");
	free(enc);
	enc = base64_encode((const uint8_t *)"fo", 2, &n);
	assert_string_equal(enc, "Zm8=");
	free(enc);
	uint8_t *out;
	size_t len;
	assert_int_equal(base64_decode("Zm8=", 4, &out, &len), 0);
	assert_int_equal(len, 2);
	free(out);
	assert_int_equal(base64_decode("Z", 1, &out, &len), -1);        /* one char: never valid */
	assert_int_equal(base64_decode("Zm8=Zm8=", 8, &out, &len), -1); /* data after padding */
	assert_int_equal(base64_decode("Zm*=", 4, &out, &len), -1);
	assert_int_equal(base64_decode("Zm8===", 6, &out, &len), -1);
	assert_int_equal(base64_decode("", 0, &out, &len), 0);
	assert_int_equal(len, 0);
	free(out);
}

static void test_sha256_vectors(void **state)
{
	char hex[65];
	sha256_hex("abc", 3, hex);
	assert_string_equal(hex,
			    "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
	sha256_hex("", 0, hex);
	assert_string_equal(hex,
			    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
	const char *two = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	sha256_hex(two, strlen(two), hex);
	assert_string_equal(hex,
			    "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
	/* 55, 56 and 64 bytes straddle the padding boundary. */
	char buf[64];
	memset(buf, 'a', sizeof(buf));
	sha256_hex(buf, 56, hex);
	assert_string_equal(hex,
			    "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
}

static void test_token_listed(void **state)
{
	assert_true(token_listed("keep-alive, Upgrade", "upgrade"));
	assert_true(token_listed(" \tclose", "Close"));
	assert_true(token_listed("a,,b", "b"));
	assert_false(token_listed("Upgraded", "Upgrade")); /* a whole token, not a prefix */
	assert_false(token_listed("x-upgrade", "upgrade"));
	assert_false(token_listed("", "close"));
	assert_false(token_listed(NULL, "close"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_incomplete_tail),
		cmocka_unit_test(test_stream),
		cmocka_unit_test(test_valid),
		cmocka_unit_test(test_sanitize_replaces_each_bad_byte),
		cmocka_unit_test(test_base64_round_trip_all_bytes),
		cmocka_unit_test(test_base64_known_and_bad),
		cmocka_unit_test(test_sha256_vectors),
		cmocka_unit_test(test_token_listed),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
