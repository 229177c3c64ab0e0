/* multipart: a streaming, bounded parser of multipart/form-data bodies (RFC 7578), for
 * uploads that never sit whole in memory. Pure: bytes in, callbacks out; every input is
 * untrusted (tests/fuzz/api_multipart.c).
 *
 * Each part's headers are read whole (at most MULTIPART_HEADERS_MAX bytes); of them only
 * Content-Disposition's `name` and `filename` are kept, the latter with the escapes browsers
 * and undici use (%22, %0D, %0A) undone. Its contents are handed on in pieces as they
 * arrive. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MULTIPART_BOUNDARY_MAX 70
#define MULTIPART_HEADERS_MAX  8192
#define MULTIPART_NAME_MAX     4096
#define MULTIPART_PARTS_MAX    1000

struct multipart_cbs {
	/* A part begins; name and filename are "" when absent. Return 0, or -1 to stop. */
	int (*on_begin)(const char *name, const char *filename, void *arg);
	/* A piece of its contents (never empty). */
	int (*on_data)(const uint8_t *data, size_t len, void *arg);
	/* It ended (its last byte was given). */
	int (*on_end)(void *arg);
};

struct multipart {
	const struct multipart_cbs *cbs;
	void *arg;
	char delim[MULTIPART_BOUNDARY_MAX + 5]; /* "\r\n--" boundary */
	size_t delim_len;
	int state;
	uint8_t *buf; /* bytes not yet decided on */
	size_t len, cap;
	size_t parts;
	bool in_part;
	char error[160];
};

/* The boundary of a Content-Type value "multipart/form-data; boundary=...", into out; -1
 * when it is not one (or the boundary is empty, too long or has characters RFC 2046 does
 * not allow). */
int multipart_boundary(const char *content_type, char out[MULTIPART_BOUNDARY_MAX + 1]);

void multipart_init(struct multipart *m, const char *boundary, const struct multipart_cbs *cbs,
		    void *arg);
/* Feeds bytes; 0, or -1 when the body is malformed (m->error says how) or a callback
 * stopped it. */
int multipart_feed(struct multipart *m, const uint8_t *data, size_t len);
/* The body ended: 0 when its closing delimiter was seen, -1 otherwise. */
int multipart_finish(struct multipart *m);
void multipart_fini(struct multipart *m);
