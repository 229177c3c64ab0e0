/* jsonlimit: a linear pre-scan that bounds what parsing a JSON text can cost, before a parser
 * that builds a tree (jansson) sees it.
 *
 * A body of a few megabytes of tiny values costs a tree parser twenty times its size in
 * memory and seconds of the event loop; a deeply nested one costs it stack. The scan reads the
 * text once, in constant memory, counting nesting and values, and stops at the first limit
 * crossed. It does not validate: malformed text that stays within the limits is left for the
 * parser to refuse with its own message. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

struct jsonlimit {
	unsigned max_depth;    /* nested objects and arrays */
	unsigned max_elements; /* values: objects, arrays, their members and elements */
};

/* 0 when `buf` stays within the limits; otherwise EMSGSIZE (too many values) or EINVAL (too
 * deep) with a message naming the limit. Strings (their escapes included) are skipped. */
int jsonlimit_check(const uint8_t *buf, size_t len, const struct jsonlimit *lim, struct err *err);
