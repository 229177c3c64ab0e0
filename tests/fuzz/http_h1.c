/* libFuzzer target: the HTTP/1.1 request reader of bench/http (h1.c over http_parser), the
 * candidate for sandboxd's own HTTP layer, fed what a client could send on one connection.
 *
 * The first two bytes choose how the rest is cut into pieces and whether on_head refuses
 * every third request; the rest is the connection's bytes. Besides memory safety it checks
 * h1's promises: the head's strings stay within their bounds and match their lengths, no more
 * body than max_body is handed over, and cutting the same bytes differently changes nothing:
 * every head, body byte and end is the same as when fed whole, and so is whether it fails
 * (though not always with which status: when a request has two faults, say a value too long
 * and a byte it may not hold, which one is seen first depends on where the pieces end). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http/h1.h"

#define MAX_BODY 4096

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct run {
	uint64_t hash; /* FNV-1a over everything handed over */
	unsigned heads, ends;
	uint64_t body;
	bool refuse; /* on_head refuses every third request */
};

static void mix(struct run *r, const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++) {
		r->hash ^= b[i];
		r->hash *= 1099511628211u;
	}
}

static int on_head(const struct h1_head *h, void *arg)
{
	struct run *r = arg;
	if (!h->target || strlen(h->target) != h->target_len || h->target_len > H1_MAX_TARGET)
		abort();
	if (h->authorization && strlen(h->authorization) > H1_MAX_VALUE)
		abort();
	/* A head may announce more than the limit: on_head sees it first (its route may set
	 * another limit, its key may be refused), and h1 refuses it with 413 after. */
	mix(r, "head", 4);
	mix(r, h->target, h->target_len);
	if (h->authorization)
		mix(r, h->authorization, strlen(h->authorization));
	uint8_t flags[] = { (uint8_t)h->method, h->chunked, h->keep_alive,
			    h->expect_continue, h->upgrade, h->authorization != NULL };
	mix(r, flags, sizeof(flags));
	mix(r, &h->content_length, sizeof(h->content_length));
	r->heads++;
	return r->refuse && r->heads % 3 == 0 ? 403 : 0;
}

static int on_body(const char *data, size_t len, void *arg)
{
	struct run *r = arg;
	r->body += len;
	if (r->body > MAX_BODY)
		abort();
	mix(r, data, len);
	return 0;
}

static int on_end(void *arg)
{
	struct run *r = arg;
	r->ends++;
	r->body = 0;
	mix(r, "end", 3);
	return 0;
}

static const struct h1_callbacks callbacks = {
	.on_head = on_head,
	.on_body = on_body,
	.on_end = on_end,
};

/* Feeds data in pieces of `piece` bytes as a server would: the next request after each one
 * that ended, until an error, a request after which the connection closes, or the end (then
 * EOF). Returns the transcript's hash, the final status and where it stopped mixed in. */
static uint64_t feed(const uint8_t *data, size_t size, size_t piece, bool refuse)
{
	struct run r = { .hash = 14695981039346656037u, .refuse = refuse };
	struct h1 h;
	h1_init(&h, &callbacks, &r, MAX_BODY);
	size_t off = 0, avail = 0;
	int status = 0;
	while (off < size) {
		/* Bytes arrive `piece` at a time; what h1 left unconsumed stays in front. */
		if (avail == 0)
			avail = size - off < piece ? size - off : piece;
		ssize_t n = h1_feed(&h, (const char *)data + off, avail);
		if (n < 0) {
			status = (int)-n;
			break;
		}
		if ((size_t)n > avail)
			abort();
		off += (size_t)n;
		avail -= (size_t)n;
		if (h1_ended(&h)) {
			if (!h.head.keep_alive || h.head.upgrade)
				break;
			h1_next(&h);
		} else if (avail) {
			abort(); /* h1 stops early only at the end of a request */
		}
	}
	if (off == size && !status)
		status = -h1_eof(&h);
	if (r.ends > r.heads)
		abort();
	h1_free(&h);
	if (status && (status < 400 || status > 599))
		abort();
	/* Where it stopped, unless on an error: bytes before that were consumed piece by piece. */
	if (status)
		mix(&r, "failed", 6);
	else
		mix(&r, &off, sizeof(off));
	return r.hash;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	size_t piece = data[0] ? data[0] : 1;
	bool refuse = data[1] & 1;
	data += 2;
	size -= 2;
	uint64_t whole = feed(data, size, size ? size : 1, refuse);
	if (feed(data, size, piece, refuse) != whole)
		abort();
	if (feed(data, size, 1, refuse) != whole)
		abort();
	return 0;
}
