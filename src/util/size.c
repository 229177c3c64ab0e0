#include "util/size.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>

/* The unit at s, with its optional "B" or "iB": its shift, or -1 when s is no unit. */
static int unit_shift(const char *s)
{
	static const char units[] = "KMGT";
	int shift = -1;
	for (int i = 0; units[i]; i++)
		if (*s == units[i] || *s == units[i] + ('a' - 'A'))
			shift = 10 * (i + 1);
	if (shift < 0)
		return -1;
	s++;
	if (*s == 'i')
		s++;
	if (*s == 'B')
		s++;
	else if (s[-1] == 'i')
		return -1; /* "Mi" alone */
	return *s ? -1 : shift;
}

int size_parse(const char *s, uint64_t *ret)
{
	if (!s)
		return -EINVAL;
	bool negative = *s == '-';
	const char *p = s + negative;
	if (*p < '0' || *p > '9')
		return -EINVAL;
	uint64_t v = 0;
	bool over = false;
	for (; *p >= '0' && *p <= '9'; p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (SIZE_PARSE_MAX - d) / 10)
			over = true;
		else
			v = v * 10 + d;
	}
	int shift = 0;
	if (*p) {
		shift = unit_shift(p);
		if (shift < 0)
			return -EINVAL;
	}
	if (negative)
		return -EDOM;
	if (over || v > SIZE_PARSE_MAX >> shift)
		return -ERANGE;
	*ret = v << shift;
	return 0;
}

const char *size_parse_problem(int r)
{
	switch (r) {
	case -EDOM:
		return "negative: a size is 0 or more";
	case -ERANGE:
		return "too large (at most 9223372036854775807 bytes)";
	default:
		return "not a size (bytes, or a whole number with K, M, G or T: powers of 1024, "
		       "e.g. 512M)";
	}
}
