/* time: the clocks every module reads. */
#pragma once

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
