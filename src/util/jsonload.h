/* jsonload: jansson's parse of a JSON text, faster for texts that carry large strings.
 *
 * jansson builds each string a byte at a time (validating, unescaping, growing a buffer):
 * about 10 ms for the 1.4 MB base64 string of a 1 MiB file, most of a write's cost. Large
 * string values without escapes are the common case of such texts (base64, plain text), and
 * their JSON value is their bytes. So the text is scanned first (memchr-fast): each such string
 * value of at least JSONLOAD_LARGE bytes that is valid UTF-8 without control characters is
 * cut out and replaced by a short marker, jansson parses what is left, and the markers are
 * replaced by the strings, copied without a second check. The result is the tree jansson
 * would have built from the text (tests/fuzz/json_load.c checks it against jansson), and any
 * text jansson refuses is refused. */
#pragma once

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define JSONLOAD_LARGE (64u << 10)

/* As json_loadb(buf, len, flags, err). */
json_t *jsonload(const uint8_t *buf, size_t len, size_t flags, json_error_t *err);
