/* mcp_rpc: JSON-RPC 2.0 as MCP uses it. Decoding is strict (UTF-8, no duplicate keys, ids that
 * are strings or numbers, params that are objects) and bounded (the body was bounded by the
 * HTTP layer, batches by MCP_MAX_BATCH), and it never fails a whole batch for one bad member:
 * that member gets its own error. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "api/mcp.h"
#include "util/cleanup.h"

const char *const mcp_versions[] = { "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05", NULL };

bool mcp_version_supported(const char *v)
{
	if (!v)
		return false;
	for (size_t i = 0; mcp_versions[i]; i++)
		if (strcmp(v, mcp_versions[i]) == 0)
			return true;
	return false;
}

const char *mcp_version_negotiate(const char *requested)
{
	for (size_t i = 0; mcp_versions[i]; i++)
		if (requested && strcmp(requested, mcp_versions[i]) == 0)
			return mcp_versions[i];
	return mcp_versions[0];
}

bool mcp_version_at_least(const char *v, const char *min)
{
	/* Versions are ISO dates: they compare as strings. */
	return v && strcmp(v, min) >= 0;
}

bool mcp_version_allows_batch(const char *v)
{
	return v && strcmp(v, "2025-06-18") < 0;
}

static void invalid(struct mcp_msg *m, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void invalid(struct mcp_msg *m, int code, const char *fmt, ...)
{
	m->kind = MCP_INVALID;
	m->error_code = code;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(m->error, sizeof(m->error), fmt, ap);
	va_end(ap);
}

/* MCP request ids are strings or numbers, never null. */
static bool id_usable(json_t *id)
{
	return id && (json_is_string(id) || json_is_integer(id) || json_is_real(id));
}

static void classify(json_t *j, struct mcp_msg *m)
{
	memset(m, 0, sizeof(*m));
	m->json = j;
	if (!json_is_object(j)) {
		invalid(m, MCP_INVALID_REQUEST, "Invalid Request: a message must be a JSON object");
		return;
	}
	json_t *id = json_object_get(j, "id");
	json_t *method = json_object_get(j, "method");
	json_t *version = json_object_get(j, "jsonrpc");
	if (id_usable(id))
		m->id = id;
	if (!json_is_string(version) || strcmp(json_string_value(version), "2.0") != 0) {
		invalid(m, MCP_INVALID_REQUEST, "Invalid Request: \"jsonrpc\" must be \"2.0\"");
		return;
	}
	if (method) {
		if (!json_is_string(method) || json_string_length(method) == 0) {
			invalid(m, MCP_INVALID_REQUEST,
				"Invalid Request: \"method\" must be a non-empty string");
			return;
		}
		m->method = json_string_value(method);
		json_t *params = json_object_get(j, "params");
		if (!id) {
			/* A notification is never answered, even a malformed one: params that are
			 * not an object are ignored. */
			m->kind = MCP_NOTIFICATION;
			m->params = json_is_object(params) ? params : NULL;
			return;
		}
		if (!m->id) {
			invalid(m, MCP_INVALID_REQUEST,
				"Invalid Request: \"id\" must be a string or a number");
			return;
		}
		if (params && !json_is_object(params)) {
			invalid(m, MCP_INVALID_PARAMS,
				"Invalid params: \"params\" must be an object");
			return;
		}
		m->kind = MCP_REQUEST;
		m->params = params;
		return;
	}
	json_t *result = json_object_get(j, "result");
	json_t *error = json_object_get(j, "error");
	if (id && (result != NULL) != (error != NULL) && (m->id || (error && json_is_null(id)))) {
		m->kind = MCP_RESPONSE;
		return;
	}
	invalid(m, MCP_INVALID_REQUEST,
		"Invalid Request: neither a request, a notification nor a response");
}

int mcp_decode(const void *body, size_t len, struct mcp_batch *ret, int *ret_code, struct err *err)
{
	memset(ret, 0, sizeof(*ret));
	json_error_t jerr;
	json_t *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root) {
		*ret_code = MCP_PARSE_ERROR;
		return err_set(err, EINVAL, "Parse error: %s (line %d, column %d)", jerr.text,
			       jerr.line, jerr.column);
	}
	return mcp_decode_value(root, ret, ret_code, err);
}

int mcp_decode_value(json_t *value, struct mcp_batch *ret, int *ret_code, struct err *err)
{
	memset(ret, 0, sizeof(*ret));
	json_auto_t *root = value;
	if (json_is_array(root)) {
		size_t n = json_array_size(root);
		if (n == 0 || n > MCP_MAX_BATCH) {
			*ret_code = MCP_INVALID_REQUEST;
			return err_set(err, EINVAL,
				       n ? "Invalid Request: a batch holds at most %d messages"
					 : "Invalid Request: an empty batch",
				       MCP_MAX_BATCH);
		}
		ret->is_batch = true;
		ret->n = n;
	} else if (json_is_object(root)) {
		ret->n = 1;
	} else {
		*ret_code = MCP_INVALID_REQUEST;
		return err_set(err, EINVAL, "Invalid Request: a message must be a JSON object");
	}
	ret->root = TAKE_PTR(root);
	ret->msgs = xcalloc(ret->n, sizeof(*ret->msgs));
	for (size_t i = 0; i < ret->n; i++)
		classify(ret->is_batch ? json_array_get(ret->root, i) : ret->root, &ret->msgs[i]);
	return 0;
}

bool mcp_msg_wants_reply(const struct mcp_msg *m)
{
	return m->kind == MCP_REQUEST || m->kind == MCP_INVALID;
}

void mcp_batch_free(struct mcp_batch *b)
{
	json_decref(b->root);
	free(b->msgs);
	memset(b, 0, sizeof(*b));
}

static json_t *envelope(json_t *id)
{
	return json_pack("{s:s, s:O}", "jsonrpc", "2.0", "id", id ? id : json_null());
}

json_t *mcp_result(json_t *id, json_t *result)
{
	json_t *r = envelope(id);
	json_object_set_new(r, "result", result);
	return r;
}

json_t *mcp_error(json_t *id, int code, const char *fmt, ...)
{
	char msg[ERR_MSG_MAX + 64];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	json_t *r = envelope(id);
	json_object_set_new(r, "error", json_pack("{s:i, s:s}", "code", code, "message", msg));
	return r;
}

json_t *mcp_notification(const char *method, json_t *params)
{
	json_t *n = json_pack("{s:s, s:s}", "jsonrpc", "2.0", "method", method);
	if (params)
		json_object_set_new(n, "params", params);
	return n;
}
