/* Fuzz target: the host's check of a watch's EVENT payloads (src/guest/event.c), what any
 * sandbox's agent may send.
 *
 * Checks its promises on whatever it accepts: the result is a fresh object of a known type
 * with exactly that type's members, every path passes guest_event_path_ok(), and checking the
 * result's own text again gives the same object. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "guest/event.h"

static void check_path(json_t *o, const char *key, int required)
{
	json_t *v = json_object_get(o, key);
	if (!v) {
		if (required)
			abort();
		return;
	}
	if (!json_is_string(v) || !guest_event_path_ok(json_string_value(v), json_string_length(v)))
		abort();
	const char *s = json_string_value(v);
	if (s[0] == '/' || strstr(s, "//") || strstr(s, "/../") || strncmp(s, "../", 3) == 0 ||
	    strcmp(s, "..") == 0)
		abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *ev = NULL;
	struct err e;
	if (guest_event_parse(data, size, &ev, &e) < 0) {
		if (ev || !e.msg[0])
			abort();
		return 0;
	}
	if (!json_is_object(ev))
		abort();
	const char *type = json_string_value(json_object_get(ev, "type"));
	if (!type)
		abort();
	if (strcmp(type, "overflow") == 0) {
		if (json_object_size(ev) != 1)
			abort();
	} else if (strcmp(type, "ready") == 0) {
		check_path(ev, "path", 1);
		if (json_object_size(ev) != 3 || !json_is_integer(json_object_get(ev, "watches")))
			abort();
	} else {
		check_path(ev, "path", 1);
		check_path(ev, "from", 0);
		if (!json_is_boolean(json_object_get(ev, "dir")))
			abort();
		if (json_object_get(ev, "from") && strcmp(type, "rename") != 0)
			abort();
	}
	char *text = json_dumps(ev, JSON_COMPACT);
	json_t *again = NULL;
	if (guest_event_parse((const uint8_t *)text, strlen(text), &again, &e) < 0 ||
	    !json_equal(ev, again))
		abort();
	free(text);
	json_decref(again);
	json_decref(ev);
	return 0;
}
