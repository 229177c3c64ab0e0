/* connect: see connect.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "api/connect.h"
#include "util/cleanup.h"
#include "util/text.h"

static const struct {
	const char *name;
	int status;
} codes[] = {
	[CONNECT_CANCELED] = { "canceled", 499 },
	[CONNECT_UNKNOWN] = { "unknown", 500 },
	[CONNECT_INVALID_ARGUMENT] = { "invalid_argument", 400 },
	[CONNECT_DEADLINE_EXCEEDED] = { "deadline_exceeded", 504 },
	[CONNECT_NOT_FOUND] = { "not_found", 404 },
	[CONNECT_ALREADY_EXISTS] = { "already_exists", 409 },
	[CONNECT_PERMISSION_DENIED] = { "permission_denied", 403 },
	[CONNECT_RESOURCE_EXHAUSTED] = { "resource_exhausted", 429 },
	[CONNECT_FAILED_PRECONDITION] = { "failed_precondition", 400 },
	[CONNECT_ABORTED] = { "aborted", 409 },
	[CONNECT_OUT_OF_RANGE] = { "out_of_range", 400 },
	[CONNECT_UNIMPLEMENTED] = { "unimplemented", 501 },
	[CONNECT_INTERNAL] = { "internal", 500 },
	[CONNECT_UNAVAILABLE] = { "unavailable", 503 },
	[CONNECT_DATA_LOSS] = { "data_loss", 500 },
	[CONNECT_UNAUTHENTICATED] = { "unauthenticated", 401 },
};

const char *connect_code_name(enum connect_code c)
{
	return codes[c].name;
}

int connect_code_status(enum connect_code c)
{
	return codes[c].status;
}

enum connect_code connect_code_for_errno(int errnum)
{
	switch (errnum) {
	case ENOENT:
	case ESRCH:
		return CONNECT_NOT_FOUND;
	case EEXIST:
		return CONNECT_ALREADY_EXISTS;
	case EINVAL:
	case ENOTDIR:
	case EISDIR:
	case ENAMETOOLONG:
	case EXDEV:
	case ENOTTY:
	case ENOTEMPTY:
		return CONNECT_INVALID_ARGUMENT;
	case EACCES:
	case EPERM:
		return CONNECT_PERMISSION_DENIED;
	case EAGAIN:
	case ENOSPC:
	case EFBIG:
	case EMSGSIZE:
		return CONNECT_RESOURCE_EXHAUSTED;
	case EPIPE:
		return CONNECT_FAILED_PRECONDITION;
	case EBUSY:
		return CONNECT_ABORTED;
	case ETIMEDOUT:
		return CONNECT_DEADLINE_EXCEEDED;
	case ECANCELED:
		return CONNECT_CANCELED;
	case ESHUTDOWN:
	case ECONNRESET:
		return CONNECT_UNAVAILABLE;
	default:
		return CONNECT_INTERNAL;
	}
}

int connect_parse_envelope(const uint8_t *body, size_t len, json_t **ret, const char **why)
{
	*ret = NULL;
	if (len < CONNECT_ENVELOPE_HEAD) {
		*why = "the request is not a Connect envelope (fewer than 5 bytes)";
		return -1;
	}
	if (body[0] & CONNECT_FLAG_COMPRESSED) {
		*why = "compressed messages are not supported";
		return -1;
	}
	if (body[0] != 0) {
		*why = "the request envelope's flags are not those of a message";
		return -1;
	}
	uint32_t n = (uint32_t)body[1] << 24 | (uint32_t)body[2] << 16 | (uint32_t)body[3] << 8 |
		     body[4];
	if ((size_t)n != len - CONNECT_ENVELOPE_HEAD) {
		*why = "the request envelope's length is not the body's (exactly one message)";
		return -1;
	}
	json_error_t je;
	json_t *j = json_loadb((const char *)body + CONNECT_ENVELOPE_HEAD, n, 0, &je);
	if (!json_is_object(j)) {
		json_decref(j);
		*why = "the request message is not a JSON object";
		return -1;
	}
	*ret = j;
	return 0;
}

void connect_unary_reply(struct http_ctx *ctx, json_t *msg)
{
	_cleanup_free_ char *text = json_dumps(msg, JSON_COMPACT);
	json_decref(msg);
	http_reply_bytes(ctx, 200, "application/json", text, strlen(text));
}

static json_t *error_json(enum connect_code code, const char *msg)
{
	_cleanup_free_ char *clean = utf8_sanitize((const uint8_t *)msg, strlen(msg), NULL);
	return json_pack("{s:s, s:s}", "code", connect_code_name(code), "message", clean);
}

void connect_unary_error(struct http_ctx *ctx, enum connect_code code, const char *fmt, ...)
{
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	json_t *j = error_json(code, msg);
	_cleanup_free_ char *text = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	http_reply_bytes(ctx, connect_code_status(code), "application/json", text, strlen(text));
}

void connect_stream_start(struct http_ctx *ctx)
{
	/* Exactly this type, no parameters: connect-python compares it whole. */
	http_stream_start(ctx, 200, "application/connect+json");
}

static void envelope(struct http_ctx *ctx, uint8_t flags, json_t *msg)
{
	_cleanup_free_ char *text = json_dumps(msg, JSON_COMPACT);
	json_decref(msg);
	size_t n = strlen(text);
	uint8_t head[CONNECT_ENVELOPE_HEAD] = { flags, (uint8_t)(n >> 24), (uint8_t)(n >> 16),
						(uint8_t)(n >> 8), (uint8_t)n };
	http_stream_write(ctx, head, sizeof(head));
	http_stream_write(ctx, text, n);
}

void connect_stream_send(struct http_ctx *ctx, json_t *msg)
{
	envelope(ctx, 0, msg);
}

void connect_stream_end(struct http_ctx *ctx, const enum connect_code *code, const char *msg)
{
	json_t *end = json_object();
	if (code)
		json_object_set_new(end, "error", error_json(*code, msg ? msg : ""));
	envelope(ctx, CONNECT_FLAG_END, end);
	http_stream_end(ctx);
}

json_t *connect_field(json_t *msg, const char *camel, const char *snake)
{
	json_t *v = json_object_get(msg, camel);
	if (!v && snake)
		v = json_object_get(msg, snake);
	return v;
}
