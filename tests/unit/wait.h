/* Waiting in unit tests for something to happen (a process to exit, a counter to move, a
 * callback to run): poll for it with a deadline instead of sleeping a guessed time. The test
 * goes on as soon as the thing happened, and fails only past a deadline that a healthy run,
 * even under ASan on a loaded 2-core machine, never comes near.
 *
 * Header-only, with no cmocka in it, so that it serves cmocka tests and the bodies that run
 * in forked children alike (tests/unit/net/netns_child.h). */
#pragma once

#include <stdbool.h>
#include <stdio.h>
#include <time.h>

/* The deadline of a wait, in milliseconds, unless a test has a reason for another. */
#define WAIT_TIMEOUT_MS 30000

static inline long long wait_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Calls done(arg) every 10 ms until it returns true, for at most timeout_ms; returns whether
 * it did. On a timeout it says on stderr what it waited for (`what`), so that the assertion
 * around it fails with a reason: assert_true(wait_until(exited, &pid, WAIT_TIMEOUT_MS,
 * "the agent to exit")). */
static inline bool wait_until(bool (*done)(void *arg), void *arg, int timeout_ms, const char *what)
{
	long long deadline = wait_now_ms() + timeout_ms;
	for (;;) {
		if (done(arg))
			return true;
		if (wait_now_ms() >= deadline) {
			fprintf(stderr, "timed out after %d ms waiting for %s\n", timeout_ms, what);
			return false;
		}
		struct timespec pause = { 0, 10 * 1000 * 1000 };
		nanosleep(&pause, NULL);
	}
}
