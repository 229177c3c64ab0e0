/* guest call: one request and its terminal reply over a guest-protocol stream, blocking, for
 * what runs before a sandbox's connection is handed to the event loop (a VM driver waiting
 * for the agent of a snapshot it builds) and for tests. Libc only.
 *
 * Frames before the terminal reply (output, other channels) are skipped; the agent is not
 * trusted: frames are bounded and every wait has the deadline. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "util/err.h"

struct guest_call {
	int fd;              /* a connected stream to the agent, blocking or not */
	uint32_t channel;    /* the request's channel (never used before on this stream) */
	const char *request; /* JSON, e.g. {"op":"ping"} */
	int timeout_ms;      /* for the whole exchange */
	/* Called about every 100 ms while waiting: false ends the wait with ECHILD (the VM the
	 * agent runs in has stopped). NULL: not asked. */
	bool (*alive)(void *arg);
	void *arg;
};

/* Sends the request and waits for its terminal frame. 0 for a RESULT, with its payload in
 * *ret_result (NUL-terminated, caller frees) when ret_result is not NULL. Fails with
 * EREMOTEIO for the agent's ERROR (its message in err) or a broken frame, ETIMEDOUT at the
 * deadline, ECONNRESET when the agent hangs up, ECHILD when alive() says no. */
int guest_call(const struct guest_call *c, char **ret_result, struct err *err);
