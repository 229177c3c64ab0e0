#include "util/jsonlimit.h"

#include <errno.h>

int jsonlimit_check(const uint8_t *buf, size_t len, const struct jsonlimit *lim, struct err *err)
{
	unsigned depth = 0;
	/* A text holds one value, and each container and each separator starts another. */
	size_t values = 1;
	for (size_t i = 0; i < len; i++) {
		switch (buf[i]) {
		case '"':
			/* Skip the string: a backslash escapes the byte after it. */
			for (i++; i < len && buf[i] != '"'; i++)
				if (buf[i] == '\\')
					i++;
			continue;
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
