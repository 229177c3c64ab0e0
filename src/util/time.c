#include "util/time.h"

#include <limits.h>
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

void time_iso8601(uint64_t ms, char out[TIME_ISO_LEN])
{
	time_t secs = (time_t)(ms / 1000);
	struct tm tm;
	gmtime_r(&secs, &tm);
	size_t n = strftime(out, TIME_ISO_LEN, "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(out + n, TIME_ISO_LEN - n, ".%03uZ", (unsigned)(ms % 1000));
}
