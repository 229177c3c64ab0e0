/* Fuzz target: the JSON pre-scan (src/util/jsonlimit.c), which reads every JSON body a client
 * sends before jansson does. Whatever the input, it stops within the text, and a text it lets
 * through that jansson parses holds no more nesting and no more values than the limits it was
 * given (the first two bytes choose them). */
#include <errno.h>
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>

#include "util/jsonlimit.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static size_t walk(json_t *j, unsigned level, unsigned *deepest)
{
	size_t n = 1;
	if ((json_is_object(j) || json_is_array(j)) && level + 1 > *deepest)
		*deepest = level + 1;
	if (json_is_object(j)) {
		const char *k;
		json_t *v;
		json_object_foreach (j, k, v)
			n += walk(v, level + 1, deepest);
	} else if (json_is_array(j)) {
		size_t i;
		json_t *v;
		json_array_foreach (j, i, v)
			n += walk(v, level + 1, deepest);
	}
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	struct jsonlimit lim = { .max_depth = 1u + data[0] % 40,
				 .max_elements = 1u + data[1] * 4u };
	data += 2;
	size -= 2;
	struct err e = { 0 };
	int rc = jsonlimit_check(data, size, &lim, &e);
	if (rc < 0) {
		if ((rc != -EINVAL && rc != -EMSGSIZE) || !e.msg[0])
			abort();
		return 0;
	}
	json_t *j = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
	if (!j)
		return 0;
	unsigned depth = 0;
	size_t values = walk(j, 0, &depth);
	json_decref(j);
	if (depth > lim.max_depth || values > lim.max_elements)
		abort();
	return 0;
}
