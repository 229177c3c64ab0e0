/* Fuzz target: lexical normalization of request paths (agent/wspath.c): an accepted path
 * never has an empty, "." or ".." component and never starts with '/'. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wspath.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *in = malloc(size + 1);
	memcpy(in, data, size);
	in[size] = '\0';
	struct workspace ws = { .path = (char *)"/workspace", .fd = -1 };
	struct wspath p;
	struct err e;
	if (wspath_init(&ws, in, &p, &e) == 0) {
		const char *s = p.rel;
		if (*s == '/')
			abort();
		while (*s) {
			const char *end = strchrnul(s, '/');
			size_t n = (size_t)(end - s);
			if (n == 0 || (n == 1 && s[0] == '.') ||
			    (n == 2 && s[0] == '.' && s[1] == '.'))
				abort();
			s = *end ? end + 1 : end;
			if (*end && !*s)
				abort(); /* trailing slash */
		}
		wspath_fini(&p);
	}
	free(in);
	return 0;
}
