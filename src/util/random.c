#include "util/random.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/random.h>

void random_bytes(void *buf, size_t n)
{
	uint8_t *p = buf;
	while (n) {
		ssize_t got = getrandom(p, n, 0);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			abort();
		p += got;
		n -= (size_t)got;
	}
}

void random_hex(char *out, size_t nbytes)
{
	static const char digits[] = "0123456789abcdef";
	uint8_t buf[64];
	while (nbytes) {
		size_t n = nbytes < sizeof(buf) ? nbytes : sizeof(buf);
		random_bytes(buf, n);
		for (size_t i = 0; i < n; i++) {
			*out++ = digits[buf[i] >> 4];
			*out++ = digits[buf[i] & 15];
		}
		nbytes -= n;
	}
	*out = '\0';
}
