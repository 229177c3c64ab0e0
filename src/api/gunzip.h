/* gunzip: a streaming, bounded gzip decoder (RFC 1952, members one after the other as gzip
 * writes them) for request bodies sent with Content-Encoding: gzip. Pure: bytes in, bytes
 * out into the caller's buffer, never more than it has room for; every input is untrusted
 * (tests/fuzz/api_gunzip.c). The limit bounds what the whole body inflates to, so that a
 * small body that inflates to much more (a "gzip bomb") ends as an error once the limit is
 * passed, with at most one buffer of output made past what the caller takes. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <zlib.h>

enum gunzip_status {
	GUNZIP_MORE,  /* give more input (all of it was taken) */
	GUNZIP_FULL,  /* the output buffer is full: call again with the rest of the input */
	GUNZIP_END,   /* all the input was taken, and it ends a member (another may follow) */
	GUNZIP_ERROR, /* malformed (g->error says why) */
	GUNZIP_LIMIT, /* it inflates to more than the limit */
};

struct gunzip {
	z_stream z;
	bool ready;      /* z is initialised */
	bool member_end; /* the last member ended, and no byte came after it */
	uint64_t out_total, limit;
	char error[160];
};

/* Prepares g for a body that may inflate to at most limit bytes; 0, or -1 (out of memory). */
int gunzip_init(struct gunzip *g, uint64_t limit);
/* Inflates from in[0..len): *used is how much input was taken, *made how much output was
 * written to out[0..cap). */
enum gunzip_status gunzip_feed(struct gunzip *g, const uint8_t *in, size_t len, size_t *used,
			       uint8_t *out, size_t cap, size_t *made);
/* Whether the body may end here: what came ends with a complete member. */
bool gunzip_complete(const struct gunzip *g);
void gunzip_fini(struct gunzip *g);
