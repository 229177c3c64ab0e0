/* json: the agent's own strict JSON reader and a small writer (libc only, so that the agent
 * builds statically with musl).
 *
 * The reader accepts exactly RFC 8259 JSON text: one value, surrounded by optional whitespace,
 * nothing after it. Strings must be valid UTF-8 (no overlong forms, no surrogate code points,
 * nothing above U+10FFFF); \uXXXX escapes must pair surrogates correctly. Integers are kept
 * exactly when |n| <= 2^53 and rejected when larger; numbers with a fraction or exponent are
 * doubles. "\u0000" is decoded (strings carry their length); json_str() refuses such strings so
 * that callers that need C strings never truncate silently. Duplicate object keys are rejected.
 * Nesting is limited to JSON_MAX_DEPTH and input size to JSON_MAX_INPUT. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define JSON_MAX_DEPTH 64
#define JSON_MAX_INPUT (1u << 20)
#define JSON_INT_MAX   ((int64_t)1 << 53)

enum json_type {
	JSON_NULL,
	JSON_BOOL,
	JSON_INT,
	JSON_REAL,
	JSON_STRING,
	JSON_ARRAY,
	JSON_OBJECT,
};

struct json {
	enum json_type type;
	const char *key;   /* member name when this value is in an object (NUL-free) */
	struct json *next; /* next element or member of the parent */
	union {
		bool b;
		int64_t i;
		double d;
		struct {
			const char *s; /* NUL-terminated; may contain NULs before len */
			size_t len;
		} str;
		struct {
			struct json *first;
			size_t n;
		} kids; /* array elements or object members, in order */
	} u;
};

struct json_doc;

/* Parses buf[0..len) into a document owned by the caller (json_doc_free). On error, err says
 * what and at which byte offset. */
int json_parse(const char *buf, size_t len, struct json_doc **ret, struct err *err);

/* The root value of a parsed document. */
const struct json *json_root(const struct json_doc *doc);

/* Frees the document and every value in it; NULL is allowed. Returns NULL. */
struct json_doc *json_doc_free(struct json_doc *doc);

/* The member `key` of object `obj`, or NULL when absent or obj is not an object. */
const struct json *json_get(const struct json *obj, const char *key);

/* The string value when v is a string without embedded NUL, else NULL. */
const char *json_str(const struct json *v);

/* A name for the type, for error messages ("string", "object", ...). */
const char *json_type_name(enum json_type t);

/* Writer: appends compact JSON to a growable buffer. Commas are placed automatically; the
 * caller keeps the nesting balanced. Invalid UTF-8 in strings is written as U+FFFD. */
struct jw {
	char *buf;
	size_t len;
	size_t cap;
	bool comma;     /* a value precedes: the next key or element needs a comma */
	bool after_key; /* a key was just written: the next value needs no comma */
};

void jw_init(struct jw *w);
void jw_free(struct jw *w);
void jw_obj_open(struct jw *w);
void jw_obj_close(struct jw *w);
void jw_arr_open(struct jw *w);
void jw_arr_close(struct jw *w);
void jw_key(struct jw *w, const char *key);
void jw_str(struct jw *w, const char *s);
void jw_strn(struct jw *w, const char *s, size_t n);
void jw_int(struct jw *w, int64_t v);
void jw_bool(struct jw *w, bool v);
void jw_null(struct jw *w);
/* A number with `decimals` digits after the point (finite values only; others give null). */
void jw_fixed(struct jw *w, double v, int decimals);
/* Seconds and nanoseconds as an exact decimal number of seconds ("12.000000500"). */
void jw_timespec(struct jw *w, int64_t sec, long nsec);

/* The length of the valid UTF-8 sequence at p[0..n), or 0 when it is not valid. */
size_t utf8_valid_seq(const unsigned char *p, size_t n);
