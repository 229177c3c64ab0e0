/* Fuzz target: the multipart/form-data parser (src/api/multipart.c), which reads upload bodies
 * any holder of a sandbox's token sends. The input is a Content-Type line, then the body. The
 * body is parsed twice, whole and in pieces whose sizes the input chooses: both must report
 * the same parts, names and bytes and the same verdict (a delimiter split across pieces is
 * the parser's hard case), and data never arrives outside a part. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/multipart.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct trace {
	uint64_t hash;
	size_t parts, bytes;
	int open;
};

static void mix(struct trace *t, const void *p, size_t n)
{
	const uint8_t *b = p;
	for (size_t i = 0; i < n; i++)
		t->hash = (t->hash ^ b[i]) * 1099511628211ull;
}

static int on_begin(const char *name, const char *filename, void *arg)
{
	struct trace *t = arg;
	if (t->open || strlen(name) > MULTIPART_NAME_MAX || strlen(filename) > MULTIPART_NAME_MAX)
		abort();
	t->open = 1;
	t->parts++;
	mix(t, "B", 1);
	mix(t, name, strlen(name) + 1);
	mix(t, filename, strlen(filename) + 1);
	return 0;
}

static int on_data(const uint8_t *d, size_t n, void *arg)
{
	struct trace *t = arg;
	if (!t->open || n == 0)
		abort();
	t->bytes += n;
	mix(t, d, n);
	return 0;
}

static int on_end(void *arg)
{
	struct trace *t = arg;
	if (!t->open)
		abort();
	t->open = 0;
	mix(t, "E", 1);
	return 0;
}

static const struct multipart_cbs cbs = { on_begin, on_data, on_end };

static int run(const char *boundary, const uint8_t *body, size_t n, const uint8_t *sizes,
	       size_t nsizes, struct trace *t)
{
	struct multipart m;
	multipart_init(&m, boundary, &cbs, t);
	int r = 0;
	size_t k = 0;
	for (size_t off = 0; off < n && r == 0;) {
		size_t step = nsizes ? (size_t)sizes[k++ % nsizes] + 1 : n;
		if (step > n - off)
			step = n - off;
		r = multipart_feed(&m, body + off, step);
		off += step;
	}
	if (r == 0)
		r = multipart_finish(&m);
	if (m.parts > MULTIPART_PARTS_MAX)
		abort();
	multipart_fini(&m);
	return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 256 * 1024)
		return 0;
	const uint8_t *nl = memchr(data, '\n', size);
	if (!nl)
		return 0;
	size_t hn = (size_t)(nl - data);
	char *ct = malloc(hn + 1);
	if (!ct)
		return 0;
	memcpy(ct, data, hn);
	ct[hn] = '\0';
	char boundary[MULTIPART_BOUNDARY_MAX + 1];
	if (multipart_boundary(ct, boundary) < 0) {
		free(ct);
		return 0;
	}
	if (strlen(boundary) == 0 || strlen(boundary) > MULTIPART_BOUNDARY_MAX)
		abort();
	const uint8_t *body = nl + 1;
	size_t n = size - hn - 1;
	struct trace whole = { .hash = 14695981039346656037ull };
	struct trace pieces = whole;
	int a = run(boundary, body, n, NULL, 0, &whole);
	/* The piece sizes: the body's first bytes, reused (1 to 256 bytes each). */
	int b = run(boundary, body, n, body, n < 16 ? n : 16, &pieces);
	if (a != b || whole.hash != pieces.hash || whole.parts != pieces.parts ||
	    whole.bytes != pieces.bytes)
		abort();
	free(ct);
	return 0;
}
