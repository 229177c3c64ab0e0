/* gunzip: see gunzip.h. zlib does the inflating; this keeps the limit, the member sequence
 * and the error text. */
#include <stdio.h>
#include <string.h>

#include "api/gunzip.h"

int gunzip_init(struct gunzip *g, uint64_t limit)
{
	memset(g, 0, sizeof(*g));
	g->limit = limit;
	/* 16 + MAX_WBITS: the gzip wrapper only (no raw deflate, no zlib header). */
	if (inflateInit2(&g->z, 16 + MAX_WBITS) != Z_OK)
		return -1;
	g->ready = true;
	return 0;
}

static enum gunzip_status fail(struct gunzip *g, const char *why)
{
	snprintf(g->error, sizeof(g->error), "%s", why ? why : "corrupt data");
	return GUNZIP_ERROR;
}

enum gunzip_status gunzip_feed(struct gunzip *g, const uint8_t *in, size_t len, size_t *used,
			       uint8_t *out, size_t cap, size_t *made)
{
	*used = 0;
	*made = 0;
	if (!g->ready)
		return fail(g, "the decoder is not set up");
	for (;;) {
		if (*made == cap)
			break;
		if (g->member_end) {
			if (*used == len)
				break;
			/* Another member follows the one that ended (gzip's concatenation). */
			if (inflateReset(&g->z) != Z_OK)
				return fail(g, "cannot start the next gzip member");
			g->member_end = false;
		}
		size_t in_n = len - *used, out_n = cap - *made;
		g->z.next_in = (Bytef *)(in + *used);
		g->z.avail_in = in_n > UINT32_MAX ? UINT32_MAX : (uInt)in_n;
		g->z.next_out = out + *made;
		g->z.avail_out = out_n > UINT32_MAX ? UINT32_MAX : (uInt)out_n;
		uInt before_in = g->z.avail_in, before_out = g->z.avail_out;
		int rc = inflate(&g->z, Z_NO_FLUSH);
		size_t took = before_in - g->z.avail_in, gave = before_out - g->z.avail_out;
		*used += took;
		*made += gave;
		g->out_total += gave;
		if (g->out_total > g->limit)
			return GUNZIP_LIMIT;
		if (rc == Z_STREAM_END) {
			g->member_end = true;
			continue;
		}
		if (rc == Z_NEED_DICT || rc == Z_DATA_ERROR || rc == Z_MEM_ERROR ||
		    rc == Z_STREAM_ERROR)
			return fail(g, rc == Z_MEM_ERROR ? "out of memory" : g->z.msg);
		if (!took && !gave)
			break; /* it needs more input (or has nothing more to give) */
	}
	if (g->member_end && *used == len)
		return GUNZIP_END;
	if (*made == cap)
		return GUNZIP_FULL;
	return GUNZIP_MORE;
}

bool gunzip_complete(const struct gunzip *g)
{
	return g->member_end;
}

void gunzip_fini(struct gunzip *g)
{
	if (g->ready)
		inflateEnd(&g->z);
	g->ready = false;
}
