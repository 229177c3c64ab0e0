/* timejson: a wall-clock time as the API writes it in JSON (time_iso8601, a string). Apart
 * from util/time.h because the agent, which shares that, has no JSON library. */
#pragma once

#include <jansson.h>
#include <stdint.h>

#include "util/time.h"

static inline json_t *time_iso8601_json(uint64_t ms)
{
	char buf[TIME_ISO_LEN];
	time_iso8601(ms, buf);
	return json_string(buf);
}
