#include "util/jsonlimit.h"

#include <errno.h>
#include <string.h>

int jsonlimit_check(const uint8_t *buf, size_t len, const struct jsonlimit *lim, struct err *err)
{
	unsigned depth = 0;
	/* A text holds one value, and each container and each separator starts another. */
	size_t values = 1;
	for (size_t i = 0; i < len; i++) {
		switch (buf[i]) {
		case '"': {
			/* Skip the string: to the next quote not escaped by an odd run of
			 * backslashes (memchr: large strings are the common large bodies). */
			size_t start = i + 1;
			for (i = start;; i++) {
				const uint8_t *q = memchr(buf + i, '"', len - i);
				if (!q) {
					i = len;
					break;
				}
				i = (size_t)(q - buf);
				size_t bs = 0;
				while (i - bs > start && buf[i - 1 - bs] == '\\')
					bs++;
				if (bs % 2 == 0)
					break;
			}
			continue;
		}
		case '{':
		case '[':
			if (++depth > lim->max_depth)
				return err_set(err, EINVAL,
					       "The JSON body is nested deeper than %u levels "
					       "(SANDBOX_MAX_JSON_DEPTH)",
					       lim->max_depth);
			values++;
			break;
		case '}':
		case ']':
			if (depth)
				depth--;
			continue;
		case ',':
			values++;
			break;
		default:
			continue;
		}
		if (values > lim->max_elements)
			return err_set(err, EMSGSIZE,
				       "The JSON body has more than %u values "
				       "(SANDBOX_MAX_JSON_ELEMENTS)",
				       lim->max_elements);
	}
	return 0;
}
