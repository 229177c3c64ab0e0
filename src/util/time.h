/* time: the clocks every module reads. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* CLOCK_MONOTONIC in milliseconds, microseconds and nanoseconds: for deadlines and
 * durations. */
uint64_t time_mono_ms(void);
uint64_t time_mono_us(void);
uint64_t time_mono_ns(void);

/* CLOCK_REALTIME in milliseconds since the epoch: for what is shown or stored. */
uint64_t time_wall_ms(void);

/* The time `ms` from now on the monotonic clock, and how long is left until such a deadline:
 * at least 0 (it has passed), at most INT_MAX (for poll). */
uint64_t time_deadline(uint64_t ms);
int time_left_ms(uint64_t deadline);

/* A wall-clock time in ms as ISO 8601 in UTC with milliseconds ("2026-12-02T17:35:04.123Z"),
 * the form the API answers in. */
#define TIME_ISO_LEN 32
void time_iso8601(uint64_t ms, char out[TIME_ISO_LEN]);
/* Reads an ISO 8601 date and time, as clients send one: "YYYY-MM-DDTHH:MM:SS", then an
 * optional fraction of a second (its first three digits count), then "Z" or an offset
 * "+HH:MM" / "-HH:MM" (no zone: UTC). 0 with *ms since the epoch, or -EINVAL for anything
 * else, a date before 1970 or a field out of its range included. */
int time_parse_iso8601(const char *s, uint64_t *ms);
