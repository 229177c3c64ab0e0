/* text: UTF-8 and base64 helpers for moving bytes through JSON. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Length of the incomplete UTF-8 sequence at the end of buf (0-3): bytes a stream should
 * hold back so that no chunk ends inside a character. */
size_t utf8_incomplete_tail(const uint8_t *buf, size_t len);

/* Whether buf is entirely valid UTF-8 (no NUL check). */
bool utf8_valid(const uint8_t *buf, size_t len);

/* Checks a stream of bytes, piece by piece, for text that JSON carries as it is: valid UTF-8
 * without NUL. A character cut by the end of one piece is finished by the next. */
struct utf8_stream {
	uint8_t tail[4];
	size_t ntail;
	bool bad;
};
/* Returns false (and stays false) once the bytes so far are not such text. */
bool utf8_stream_feed(struct utf8_stream *s, const uint8_t *buf, size_t len);
/* Whether everything fed was such text, ending on a character boundary. */
bool utf8_stream_end(const struct utf8_stream *s);

/* Copies buf as valid UTF-8, each invalid byte replaced by U+FFFD. Returns a NUL-terminated
 * string (caller frees); *outlen gets its length. */
char *utf8_sanitize(const uint8_t *buf, size_t len, size_t *outlen);

/* Base64 (RFC 4648, with padding). Encode returns a NUL-terminated string. */
char *base64_encode(const uint8_t *buf, size_t len, size_t *outlen);
/* The length of len bytes in base64, and the encoding written to out (that many chars,
 * no NUL); returns the length. */
#define BASE64_LEN(len) (4 * (((size_t)(len) + 2) / 3))
size_t base64_encode_into(char *out, const uint8_t *buf, size_t len);
/* Strict decode: padding required when the length is not a multiple of 4, no stray
 * characters (whitespace is skipped). Returns -1 on bad input. */
int base64_decode(const char *in, size_t inlen, uint8_t **ret, size_t *retlen);

/* Whether `name` is one of the tokens of a list such as a Connection header's value
 * (separated by commas and blanks), compared without case. */
bool token_listed(const char *list, const char *name);
