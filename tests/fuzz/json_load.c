/* Fuzz target: jsonload (src/util/jsonload.c), which cuts large strings out of a JSON text
 * before jansson parses the rest, against jansson itself on the same text. Each '@' of the
 * input becomes 64 KiB of 'A' (at most four), so that large strings appear as values, keys,
 * array elements, escaped or not, in valid and invalid texts. Both parses must agree: both
 * refuse, or both give equal trees. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/jsonload.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 4096)
		return 0;
	size_t ats = 0;
	for (size_t i = 0; i < size; i++)
		ats += data[i] == '@';
	if (ats > 4)
		return 0;
	size_t cap = size + ats * JSONLOAD_LARGE;
	uint8_t *text = malloc(cap ? cap : 1);
	if (!text)
		return 0;
	size_t o = 0;
	for (size_t i = 0; i < size; i++) {
		if (data[i] == '@') {
			memset(text + o, 'A', JSONLOAD_LARGE);
			o += JSONLOAD_LARGE;
		} else {
			text[o++] = data[i];
		}
	}
	size_t flags = size && (data[0] & 1) ? JSON_REJECT_DUPLICATES : 0;
	json_error_t e1, e2;
	json_t *a = json_loadb((const char *)text, o, flags, &e1);
	json_t *b = jsonload(text, o, flags, &e2);
	if ((a == NULL) != (b == NULL))
		abort();
	if (a && !json_equal(a, b))
		abort();
	json_decref(a);
	json_decref(b);
	free(text);
	return 0;
}
