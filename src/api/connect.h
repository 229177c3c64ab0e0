/* connect: the subset of the Connect protocol (connectrpc.com) that E2B's SDKs speak to
 * envd, with the JSON codec over HTTP/1.1: unary calls (a JSON body, a JSON reply or a
 * {"code", "message"} error) and server streams (5-byte envelopes: flags, big-endian length,
 * JSON; the end of stream is an envelope of flag 0x02). No compression, no binary codec. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "http/http.h"

#define CONNECT_FLAG_COMPRESSED 0x01
#define CONNECT_FLAG_END        0x02
#define CONNECT_ENVELOPE_HEAD   5

/* Connect error codes, as their wire names ("not_found"). */
enum connect_code {
	CONNECT_CANCELED,
	CONNECT_UNKNOWN,
	CONNECT_INVALID_ARGUMENT,
	CONNECT_DEADLINE_EXCEEDED,
	CONNECT_NOT_FOUND,
	CONNECT_ALREADY_EXISTS,
	CONNECT_PERMISSION_DENIED,
	CONNECT_RESOURCE_EXHAUSTED,
	CONNECT_FAILED_PRECONDITION,
	CONNECT_ABORTED,
	CONNECT_OUT_OF_RANGE,
	CONNECT_UNIMPLEMENTED,
	CONNECT_INTERNAL,
	CONNECT_UNAVAILABLE,
	CONNECT_DATA_LOSS,
	CONNECT_UNAUTHENTICATED,
};

const char *connect_code_name(enum connect_code c);
/* The HTTP status of a unary error of code c. */
int connect_code_status(enum connect_code c);
/* The code for an errno of the ops layer (ENOENT not_found, EEXIST already_exists...). */
enum connect_code connect_code_for_errno(int errnum);

/* Parses a request body that must be exactly one uncompressed envelope holding a JSON
 * object: 0 and *ret, or -1 with *why. */
int connect_parse_envelope(const uint8_t *body, size_t len, json_t **ret, const char **why);

/* Unary replies: 200 application/json with msg (stolen), or the error. */
void connect_unary_reply(struct http_ctx *ctx, json_t *msg);
void connect_unary_error(struct http_ctx *ctx, enum connect_code code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Streams: the head (200, application/connect+json), a message (stolen), the end of stream
 * (ok, or an error). */
void connect_stream_start(struct http_ctx *ctx);
void connect_stream_send(struct http_ctx *ctx, json_t *msg);
void connect_stream_end(struct http_ctx *ctx, const enum connect_code *code, const char *msg);

/* A field of a request message by its JSON name or its proto name ("watcherId",
 * "watcher_id"). */
json_t *connect_field(json_t *msg, const char *camel, const char *snake);
