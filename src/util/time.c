#include "util/time.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <time.h>

static uint64_t read_clock(clockid_t id, uint64_t per_sec)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * per_sec + (uint64_t)ts.tv_nsec / (1000000000u / per_sec);
}

uint64_t time_mono_ms(void)
{
	return read_clock(CLOCK_MONOTONIC, 1000);
}

uint64_t time_mono_us(void)
{
	return read_clock(CLOCK_MONOTONIC, 1000000);
}

uint64_t time_mono_ns(void)
{
	return read_clock(CLOCK_MONOTONIC, 1000000000);
}

uint64_t time_wall_ms(void)
{
	return read_clock(CLOCK_REALTIME, 1000);
}

uint64_t time_deadline(uint64_t ms)
{
	return time_mono_ms() + ms;
}

int time_left_ms(uint64_t deadline)
{
	uint64_t now = time_mono_ms();
	if (now >= deadline)
		return 0;
	return deadline - now > INT_MAX ? INT_MAX : (int)(deadline - now);
}

/* n decimal digits at *p into *v, *p moved past them; false when they are not digits. */
static bool digits(const char **p, int n, int *v)
{
	*v = 0;
	for (int i = 0; i < n; i++, (*p)++) {
		if (**p < '0' || **p > '9')
			return false;
		*v = *v * 10 + (**p - '0');
	}
	return true;
}

int time_parse_iso8601(const char *s, uint64_t *ms)
{
	int y, mo, d, h, mi, sec, frac = 0;
	const char *p = s;
	if (!digits(&p, 4, &y) || *p++ != '-' || !digits(&p, 2, &mo) || *p++ != '-' ||
	    !digits(&p, 2, &d) || (*p != 'T' && *p != 't' && *p != ' ') || !*p++ ||
	    !digits(&p, 2, &h) || *p++ != ':' || !digits(&p, 2, &mi) || *p++ != ':' ||
	    !digits(&p, 2, &sec))
		return -EINVAL;
	if (*p == '.') {
		p++;
		int n = 0;
		for (; *p >= '0' && *p <= '9'; p++, n++)
			if (n < 3)
				frac = frac * 10 + (*p - '0');
		if (!n)
			return -EINVAL;
		for (; n < 3; n++)
			frac *= 10;
	}
	long offset = 0;
	if (*p == 'Z' || *p == 'z') {
		p++;
	} else if (*p == '+' || *p == '-') {
		int sign = *p++ == '-' ? -1 : 1, oh, om;
		if (!digits(&p, 2, &oh) || *p++ != ':' || !digits(&p, 2, &om) || oh > 23 || om > 59)
			return -EINVAL;
		offset = sign * (oh * 3600L + om * 60L);
	}
	static const int mdays[] = { 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	if (*p || y < 1970 || mo < 1 || mo > 12 || d < 1 || d > mdays[mo - 1] || h > 23 ||
	    mi > 59 || sec > 60)
		return -EINVAL;
	bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
	if (mo == 2 && d == 29 && !leap)
		return -EINVAL;
	/* Days since the epoch (a civil-from-days inverse, valid for every year here). */
	int yy = mo <= 2 ? y - 1 : y;
	int era = yy / 400, yoe = yy - era * 400;
	int doy = (153 * (mo + (mo > 2 ? -3 : 9)) + 2) / 5 + d - 1;
	long doe = yoe * 365L + yoe / 4 - yoe / 100 + doy;
	long days = era * 146097L + doe - 719468L;
	long long secs = days * 86400LL + h * 3600LL + mi * 60LL + sec - offset;
	if (secs < 0)
		return -EINVAL;
	*ms = (uint64_t)secs * 1000 + (uint64_t)frac;
	return 0;
}

void time_iso8601(uint64_t ms, char out[TIME_ISO_LEN])
{
	time_t secs = (time_t)(ms / 1000);
	struct tm tm;
	gmtime_r(&secs, &tm);
	size_t n = strftime(out, TIME_ISO_LEN, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + n, TIME_ISO_LEN - n, ".%03uZ", (unsigned)(ms % 1000));
}
