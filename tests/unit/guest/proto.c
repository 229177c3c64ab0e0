/* Tests of src/guest/proto.c: header layout, type table and the incremental decoder. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "guest/proto.h"

/* Appends one frame to buf at *len. */
static void put_frame(uint8_t *buf, size_t *len, uint8_t type, uint32_t ch, const void *p,
		      uint32_t n)
{
	guest_frame_header(buf + *len, type, ch, n);
	*len += GUEST_HDR_LEN;
	if (n)
		memcpy(buf + *len, p, n);
	*len += n;
}

static void test_header_layout(void **state)
{
	uint8_t h[GUEST_HDR_LEN];
	guest_frame_header(h, GUEST_STDOUT, 0x01020304, 0xa0b0c0d0);
	const uint8_t want[GUEST_HDR_LEN] = { 0xa0, 0xb0, 0xc0, 0xd0, 16, 1, 2, 3, 4 };
	assert_memory_equal(h, want, sizeof(want));

	guest_frame_header(h, 255, UINT32_MAX, UINT32_MAX);
	const uint8_t want2[GUEST_HDR_LEN] = {
		0xff, 0xff, 0xff, 0xff, 255, 0xff, 0xff, 0xff, 0xff
	};
	assert_memory_equal(h, want2, sizeof(want2));
}

static void test_type_valid(void **state)
{
	for (int t = 0; t < 256; t++) {
		int host = guest_type_valid((uint8_t)t, 1);
		int agent = guest_type_valid((uint8_t)t, 0);
		switch (t) {
		case GUEST_REQUEST:
		case GUEST_DATA:
		case GUEST_EOF:
		case GUEST_CANCEL:
			assert_true(host);
			assert_false(agent);
			break;
		case GUEST_WINDOW:
			assert_true(host);
			assert_true(agent);
			break;
		case GUEST_STDOUT:
		case GUEST_STDERR:
		case GUEST_FILEDATA:
		case GUEST_FILEINFO:
		case GUEST_EVENT:
		case GUEST_RESULT:
		case GUEST_ERROR:
			assert_false(host);
			assert_true(agent);
			break;
		default:
			assert_false(host);
			assert_false(agent);
		}
	}
}

/* Feeds the stream one byte at a time through a buffer the way a real reader does and
 * records what comes out. */
struct seen {
	int n;
	uint8_t type[16];
	uint32_t ch[16];
	uint32_t len[16];
	int oversize[16];
	uint8_t data[16][64];
};

static void feed(struct guest_decoder *d, const uint8_t *stream, size_t total, size_t step,
		 struct seen *s)
{
	uint8_t buf[4096];
	size_t have = 0;
	size_t pos = 0;
	memset(s, 0, sizeof(*s));
	while (pos < total || have) {
		size_t k = total - pos < step ? total - pos : step;
		memcpy(buf + have, stream + pos, k);
		have += k;
		pos += k;
		for (;;) {
			struct guest_frame f;
			size_t used = 99999;
			enum guest_decode_status st = guest_decode(d, buf, have, &f, &used);
			assert_true(used <= have);
			if (st != GUEST_DECODE_NEED_MORE) {
				assert_true(s->n < 16);
				s->type[s->n] = f.type;
				s->ch[s->n] = f.channel;
				s->len[s->n] = f.len;
				s->oversize[s->n] = st == GUEST_DECODE_OVERSIZE;
				if (st == GUEST_DECODE_FRAME) {
					assert_non_null(f.payload);
					assert_true(f.len <= sizeof(s->data[0]));
					memcpy(s->data[s->n], f.payload, f.len);
				} else {
					assert_null(f.payload);
				}
				s->n++;
			}
			memmove(buf, buf + used, have - used);
			have -= used;
			if (st == GUEST_DECODE_NEED_MORE)
				break;
		}
		if (pos == total && have) {
			/* A trailing partial frame never completes. */
			break;
		}
	}
}

static void test_byte_at_a_time(void **state)
{
	uint8_t stream[256];
	size_t len = 0;
	put_frame(stream, &len, GUEST_REQUEST, 7, "{\"op\":\"ping\"}", 13);
	put_frame(stream, &len, GUEST_EOF, 7, NULL, 0);
	put_frame(stream, &len, GUEST_DATA, 0xffffffff, "abc", 3);

	for (size_t step = 1; step <= len; step++) {
		struct guest_decoder d;
		struct seen s;
		guest_decoder_init(&d, 64);
		feed(&d, stream, len, step, &s);
		assert_int_equal(s.n, 3);
		assert_int_equal(s.type[0], GUEST_REQUEST);
		assert_int_equal(s.ch[0], 7);
		assert_int_equal(s.len[0], 13);
		assert_memory_equal(s.data[0], "{\"op\":\"ping\"}", 13);
		assert_int_equal(s.type[1], GUEST_EOF);
		assert_int_equal(s.len[1], 0);
		assert_int_equal(s.type[2], GUEST_DATA);
		assert_int_equal(s.ch[2], 0xffffffff);
		assert_memory_equal(s.data[2], "abc", 3);
	}
}

static void test_several_in_one_buffer(void **state)
{
	uint8_t stream[512];
	size_t len = 0;
	for (uint32_t i = 1; i <= 5; i++)
		put_frame(stream, &len, GUEST_DATA, i, "0123456789", i);

	struct guest_decoder d;
	guest_decoder_init(&d, GUEST_MAX_PAYLOAD);
	size_t off = 0;
	for (uint32_t i = 1; i <= 5; i++) {
		struct guest_frame f;
		size_t used;
		assert_int_equal(guest_decode(&d, stream + off, len - off, &f, &used),
				 GUEST_DECODE_FRAME);
		assert_int_equal(f.channel, i);
		assert_int_equal(f.len, i);
		assert_memory_equal(f.payload, "0123456789", i);
		assert_int_equal(used, GUEST_HDR_LEN + i);
		off += used;
	}
	struct guest_frame f;
	size_t used;
	assert_int_equal(guest_decode(&d, stream + off, len - off, &f, &used),
			 GUEST_DECODE_NEED_MORE);
	assert_int_equal(used, 0);
}

static void test_partial_header_and_payload(void **state)
{
	uint8_t stream[64];
	size_t len = 0;
	put_frame(stream, &len, GUEST_DATA, 3, "hello", 5);
	struct guest_decoder d;
	guest_decoder_init(&d, 16);
	struct guest_frame f;
	size_t used = 1;
	for (size_t n = 0; n < len; n++) {
		assert_int_equal(guest_decode(&d, stream, n, &f, &used), GUEST_DECODE_NEED_MORE);
		assert_int_equal(used, 0);
	}
	assert_int_equal(guest_decode(&d, stream, len, &f, &used), GUEST_DECODE_FRAME);
	assert_int_equal(used, len);
}

static void test_oversize_skip_then_next(void **state)
{
	uint8_t stream[512];
	size_t len = 0;
	uint8_t big[100];
	memset(big, 'x', sizeof(big));
	put_frame(stream, &len, GUEST_DATA, 1, "ok", 2);
	put_frame(stream, &len, GUEST_REQUEST, 2, big, sizeof(big));
	put_frame(stream, &len, GUEST_DATA, 3, "next", 4);
	put_frame(stream, &len, GUEST_DATA, 4, big, 20); /* exactly the limit */

	for (size_t step = 1; step <= len; step++) {
		struct guest_decoder d;
		struct seen s;
		guest_decoder_init(&d, 20);
		feed(&d, stream, len, step, &s);
		assert_int_equal(s.n, 4);
		assert_int_equal(s.ch[0], 1);
		assert_false(s.oversize[0]);
		assert_int_equal(s.ch[1], 2);
		assert_true(s.oversize[1]);
		assert_int_equal(s.type[1], GUEST_REQUEST);
		assert_int_equal(s.len[1], 100);
		assert_int_equal(s.ch[2], 3);
		assert_false(s.oversize[2]);
		assert_memory_equal(s.data[2], "next", 4);
		assert_int_equal(s.ch[3], 4);
		assert_false(s.oversize[3]);
		assert_int_equal(s.len[3], 20);
		assert_int_equal(d.skip, 0);
	}
}

static void test_oversize_whole_buffer(void **state)
{
	/* Payload and next frame all in one call: skip and decode the next in one go. */
	uint8_t stream[128];
	size_t len = 0;
	put_frame(stream, &len, GUEST_DATA, 9, "0123456789", 10);
	put_frame(stream, &len, GUEST_EOF, 10, NULL, 0);
	struct guest_decoder d;
	guest_decoder_init(&d, 4);
	struct guest_frame f;
	size_t used;
	assert_int_equal(guest_decode(&d, stream, len, &f, &used), GUEST_DECODE_OVERSIZE);
	assert_int_equal(used, GUEST_HDR_LEN + 10);
	assert_int_equal(f.channel, 9);
	assert_int_equal(guest_decode(&d, stream + used, len - used, &f, &used),
			 GUEST_DECODE_FRAME);
	assert_int_equal(f.channel, 10);
	assert_int_equal(f.type, GUEST_EOF);
}

static void test_max_values(void **state)
{
	/* A 4 GiB - 1 announced length with the decoder's largest limit below it. */
	uint8_t hdr[GUEST_HDR_LEN + 8];
	guest_frame_header(hdr, 255, UINT32_MAX, UINT32_MAX);
	memset(hdr + GUEST_HDR_LEN, 0, 8);
	struct guest_decoder d;
	guest_decoder_init(&d, UINT32_MAX - 1);
	struct guest_frame f;
	size_t used;
	assert_int_equal(guest_decode(&d, hdr, sizeof(hdr), &f, &used), GUEST_DECODE_OVERSIZE);
	assert_int_equal(f.len, UINT32_MAX);
	assert_int_equal(f.channel, UINT32_MAX);
	assert_int_equal(f.type, 255);
	assert_int_equal(used, sizeof(hdr));
	assert_int_equal(d.skip, (uint64_t)UINT32_MAX - 8);

	/* Skipping never overshoots into the next frame (shortened to keep the test quick). */
	static uint8_t zeros[1 << 16];
	d.skip = 100000;
	assert_int_equal(guest_decode(&d, zeros, sizeof(zeros), &f, &used), GUEST_DECODE_NEED_MORE);
	assert_int_equal(used, sizeof(zeros));
	guest_frame_header(zeros + 100000 - sizeof(zeros), GUEST_EOF, 5, 0);
	assert_int_equal(guest_decode(&d, zeros, sizeof(zeros), &f, &used), GUEST_DECODE_FRAME);
	assert_int_equal(used, 100000 - sizeof(zeros) + GUEST_HDR_LEN);
	assert_int_equal(f.channel, 5);
	assert_int_equal(d.skip, 0);

	/* With the limit at UINT32_MAX the same header is a normal (incomplete) frame. */
	guest_decoder_init(&d, UINT32_MAX);
	assert_int_equal(guest_decode(&d, hdr, sizeof(hdr), &f, &used), GUEST_DECODE_NEED_MORE);
	assert_int_equal(used, 0);

	/* Largest payload at the default limit decodes. */
	size_t n = GUEST_HDR_LEN + GUEST_MAX_PAYLOAD;
	uint8_t *big = calloc(1, n);
	assert_non_null(big);
	guest_frame_header(big, GUEST_DATA, 1, GUEST_MAX_PAYLOAD);
	guest_decoder_init(&d, GUEST_MAX_PAYLOAD);
	assert_int_equal(guest_decode(&d, big, n, &f, &used), GUEST_DECODE_FRAME);
	assert_int_equal(used, n);
	guest_frame_header(big, GUEST_DATA, 1, GUEST_MAX_PAYLOAD + 1);
	assert_int_equal(guest_decode(&d, big, n, &f, &used), GUEST_DECODE_OVERSIZE);
	assert_int_equal(d.skip, 1);
	free(big);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_layout),
		cmocka_unit_test(test_type_valid),
		cmocka_unit_test(test_byte_at_a_time),
		cmocka_unit_test(test_several_in_one_buffer),
		cmocka_unit_test(test_partial_header_and_payload),
		cmocka_unit_test(test_oversize_skip_then_next),
		cmocka_unit_test(test_oversize_whole_buffer),
		cmocka_unit_test(test_max_values),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
