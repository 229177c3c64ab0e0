/* fc_api: a client of Firecracker's HTTP API on its Unix socket (libcurl).
 *
 * Written to the v1.16.1 API. Calls block with a deadline and run on worker threads. An API
 * error's `fault_message` becomes the error's text, so it reaches the API caller. */
#pragma once

#include <jansson.h>
#include <stdint.h>

#include "util/err.h"

struct fc_version {
	unsigned major, minor, patch;
};

/* Sends `method path` with an optional JSON body (borrowed); *ret (optional) gets the parsed
 * reply for GETs. timeout_ms bounds the whole exchange. */
int fc_api_call(const char *sock, const char *method, const char *path, json_t *body, json_t **ret,
		long timeout_ms, struct err *err);

/* Waits until the API socket accepts connections (the VMM is up), or the deadline passes. */
int fc_api_wait(const char *sock, long timeout_ms, struct err *err);

/* GET /version, parsed. */
int fc_api_version(const char *sock, struct fc_version *ret, struct err *err);

/* Parses "v1.16.1" or "1.16.1". */
int fc_version_parse(const char *s, struct fc_version *ret);
/* Whether a >= b. */
int fc_version_at_least(const struct fc_version *a, unsigned major, unsigned minor, unsigned patch);
