/* Fuzz target: the ISO 8601 reader (time_parse_iso8601 in src/util/time.c), which reads what
 * clients send as times (E2B's list filter startedAfter). A time it accepts, written back in
 * the API's form, reads as the same instant. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "util/time.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 256)
		return 0;
	char text[257];
	memcpy(text, data, size);
	text[size] = '\0';
	uint64_t ms;
	if (time_parse_iso8601(text, &ms) < 0)
		return 0;
	char back[TIME_ISO_LEN];
	time_iso8601(ms, back);
	uint64_t again;
	if (time_parse_iso8601(back, &again) < 0 || again != ms)
		__builtin_trap();
	return 0;
}
