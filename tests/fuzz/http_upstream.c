/* libFuzzer target: the reader of an upstream's answer (src/http/upstream_reader.c over h1's
 * response mode), fed what an app in a sandbox (a preview) or another node could send.
 *
 * The first byte chooses the pieces the rest is cut into, the second whether the request was
 * a HEAD, asked for an upgrade, and whether the upstream's end of file follows. Besides memory
 * safety it checks the reader's promises: at most one final head, a status from 100 to 999,
 * headers within UPSTREAM_MAX_HEADERS, a 101 only when asked for, no body after an upgrade or
 * for a HEAD, a failure always with a reason, nothing taken past the end of an answer, and
 * cutting the same bytes differently changes nothing. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "http/upstream.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct run {
	struct upstream_reader r;
	uint64_t hash;
	unsigned heads;
	bool upgrade_asked, head_request;
	int64_t length;
	uint64_t body;
};

static void mix(struct run *x, const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++) {
		x->hash ^= b[i];
		x->hash *= 1099511628211u;
	}
}

static int on_head(const struct upstream_answer *a, void *arg)
{
	struct run *x = arg;
	if (++x->heads > 1 || a->status < 100 || a->status > 999 ||
	    a->nheaders > UPSTREAM_MAX_HEADERS)
		abort();
	if (a->status < 200 && a->status != 101)
		abort(); /* informational answers are not handed over */
	if (a->upgrade != (a->status == 101) || (a->upgrade && !x->upgrade_asked))
		abort();
	size_t total = 0;
	for (size_t i = 0; i < a->nheaders; i++) {
		const char *n, *v;
		upstream_reader_header_at(&x->r, i, &n, &v);
		total += strlen(n) + strlen(v);
		mix(x, n, strlen(n) + 1);
		mix(x, v, strlen(v) + 1);
	}
	if (total > UPSTREAM_MAX_HEAD)
		abort();
	x->length = a->length;
	mix(x, &a->status, sizeof(a->status));
	mix(x, &a->length, sizeof(a->length));
	return 0;
}

static int on_body(const char *data, size_t len, void *arg)
{
	struct run *x = arg;
	if (!x->heads || x->r.upgraded || x->head_request)
		abort();
	x->body += len;
	if (x->length >= 0 && x->body > (uint64_t)x->length)
		abort();
	mix(x, data, len);
	return 0;
}

static const struct upstream_reader_cbs cbs = { .on_head = on_head, .on_body = on_body };

static uint64_t feed(const uint8_t *data, size_t size, size_t piece, uint8_t flags)
{
	struct run x = { .hash = 14695981039346656037u };
	x.head_request = flags & 1;
	x.upgrade_asked = flags & 2;
	upstream_reader_init(&x.r, &cbs, &x, x.head_request, x.upgrade_asked);
	size_t off = 0;
	int outcome = 0;
	while (off < size && !x.r.done) {
		size_t n = size - off < piece ? size - off : piece;
		ssize_t used = upstream_reader_feed(&x.r, (const char *)data + off, n);
		if (used < 0) {
			outcome = 1;
			break;
		}
		if ((size_t)used > n || ((size_t)used < n && !x.r.done))
			abort();
		off += (size_t)used;
	}
	if (!outcome && !x.r.done && (flags & 4))
		outcome = upstream_reader_eof(&x.r) < 0 ? 1 : 2;
	if (outcome == 1 && (!x.r.failed || !x.r.why[0]))
		abort();
	if (x.r.done && !x.heads)
		abort();
	upstream_reader_free(&x.r);
	mix(&x, &outcome, sizeof(outcome));
	if (outcome != 1)
		mix(&x, &off, sizeof(off));
	return x.hash;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	size_t piece = data[0] ? data[0] : 1;
	uint8_t flags = data[1];
	data += 2;
	size -= 2;
	uint64_t whole = feed(data, size, size ? size : 1, flags);
	if (feed(data, size, piece, flags) != whole)
		abort();
	if (feed(data, size, 1, flags) != whole)
		abort();
	return 0;
}
