/* Fuzz target: the gzip decoder of compressed uploads (src/api/gunzip.c), which inflates
 * bodies any holder of a sandbox's token sends. The first two input bytes choose the sizes of
 * the input pieces and of the output buffer, the rest is the body. It is decoded whole and in
 * pieces: both must give the same bytes and the same verdict, never more output than the
 * limit plus one buffer, and never an output past the buffer's room. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/gunzip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define LIMIT (256u << 10)

struct result {
	enum gunzip_status last;
	bool complete;
	uint64_t total, hash;
};

static void decode(const uint8_t *in, size_t len, size_t piece, size_t cap, struct result *r)
{
	struct gunzip g;
	if (gunzip_init(&g, LIMIT) < 0)
		abort();
	uint8_t *out = malloc(cap);
	memset(r, 0, sizeof(*r));
	r->hash = 1469598103934665603ull;
	r->last = GUNZIP_MORE;
	size_t off = 0;
	while (r->last != GUNZIP_ERROR && r->last != GUNZIP_LIMIT) {
		size_t n = len - off < piece ? len - off : piece;
		size_t used, made;
		r->last = gunzip_feed(&g, in + off, n, &used, out, cap, &made);
		if (used > n || made > cap)
			abort();
		off += used;
		for (size_t i = 0; i < made; i++)
			r->hash = (r->hash ^ out[i]) * 1099511628211ull;
		r->total += made;
		if (r->total > LIMIT + cap)
			abort();
		if (r->last == GUNZIP_FULL)
			continue;
		if (off == len)
			break;
	}
	r->complete = gunzip_complete(&g);
	free(out);
	gunzip_fini(&g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	size_t piece = 1 + data[0] % 64, cap = 1 + (size_t)data[1] * 16;
	const uint8_t *body = data + 2;
	size_t len = size - 2;
	struct result whole, pieces;
	decode(body, len, len ? len : 1, 64u << 10, &whole);
	decode(body, len, piece, cap, &pieces);
	bool bad_whole = whole.last == GUNZIP_ERROR, bad_pieces = pieces.last == GUNZIP_ERROR;
	bool over_whole = whole.last == GUNZIP_LIMIT, over_pieces = pieces.last == GUNZIP_LIMIT;
	if (bad_whole != bad_pieces || over_whole != over_pieces)
		abort();
	if (!bad_whole && !over_whole &&
	    (whole.hash != pieces.hash || whole.total != pieces.total ||
	     whole.complete != pieces.complete))
		abort();
	return 0;
}
