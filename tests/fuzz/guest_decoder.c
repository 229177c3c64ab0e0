/* Fuzz target: the incremental frame decoder (src/guest/proto.c).
 *
 * Input: byte 0-1 choose the decoder's payload limit and byte 2 the feeding step, the rest is
 * the stream. The stream is fed in steps through a bounded buffer as a reader would, and the
 * decoder's promises are checked: never consume more than given, frames within the limit
 * carry their payload, oversize ones never do, and feeding in steps yields the same frames as
 * feeding everything at once. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "guest/proto.h"

#define MAX_FRAMES 4096

struct rec {
	uint8_t type;
	uint32_t ch;
	uint32_t len;
	int oversize;
	uint32_t sum;
};

static uint32_t checksum(const uint8_t *p, uint32_t n)
{
	uint32_t s = 0;
	for (uint32_t i = 0; i < n; i++)
		s = s * 31 + p[i];
	return s;
}

static size_t run(const uint8_t *data, size_t size, uint32_t max, size_t step, struct rec *out)
{
	struct guest_decoder d;
	guest_decoder_init(&d, max);
	size_t cap = GUEST_HDR_LEN + max + step;
	uint8_t *buf = malloc(cap);
	size_t have = 0, pos = 0, n = 0;
	while (pos < size) {
		size_t k = size - pos < step ? size - pos : step;
		if (k > cap - have)
			k = cap - have;
		if (!k)
			abort(); /* the buffer can never fill up with a whole frame inside */
		memcpy(buf + have, data + pos, k);
		have += k;
		pos += k;
		for (;;) {
			struct guest_frame f;
			size_t used = (size_t)-1;
			enum guest_decode_status st = guest_decode(&d, buf, have, &f, &used);
			if (used > have)
				abort();
			if (st != GUEST_DECODE_NEED_MORE && n < MAX_FRAMES) {
				out[n].type = f.type;
				out[n].ch = f.channel;
				out[n].len = f.len;
				out[n].oversize = st == GUEST_DECODE_OVERSIZE;
				if (st == GUEST_DECODE_FRAME) {
					if (!f.payload || f.len > max ||
					    f.payload + f.len > buf + have || f.payload < buf)
						abort();
					out[n].sum = checksum(f.payload, f.len);
				} else {
					if (f.payload || f.len <= max)
						abort();
					out[n].sum = 0;
				}
				n++;
			}
			memmove(buf, buf + used, have - used);
			have -= used;
			if (st == GUEST_DECODE_NEED_MORE)
				break;
		}
	}
	free(buf);
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 3)
		return 0;
	uint32_t max = ((uint32_t)data[0] << 8 | data[1]) % 4096;
	size_t step = (size_t)data[2] % 64 + 1;
	data += 3;
	size -= 3;
	static struct rec a[MAX_FRAMES], b[MAX_FRAMES];
	size_t na = run(data, size, max, step, a);
	size_t nb = run(data, size, max, size ? size : 1, b);
	if (na != nb || memcmp(a, b, na * sizeof(*a)) != 0)
		abort();
	return 0;
}
