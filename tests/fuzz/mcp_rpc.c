/* Fuzz target: the MCP JSON-RPC decoder (src/api/mcp_rpc.c), which reads every body a client
 * POSTs and every line `sandbox mcp` forwards. Any input either fails with a JSON-RPC error
 * code and a message, or yields messages whose invariants mcp_handle() relies on; the replies
 * built from them always serialize. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/mcp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_reply(json_t *reply)
{
	char *text = json_dumps(reply, JSON_COMPACT);
	if (!text || strchr(text, '\n'))
		abort();
	free(text);
	json_decref(reply);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mcp_batch b;
	int code = 0;
	struct err e = { 0 };
	if (mcp_decode(data, size, &b, &code, &e) < 0) {
		if ((code != MCP_PARSE_ERROR && code != MCP_INVALID_REQUEST) || !e.msg[0])
			abort();
		check_reply(mcp_error(NULL, code, "%s", e.msg));
		return 0;
	}
	if (b.n == 0 || b.n > MCP_MAX_BATCH || (!b.is_batch && b.n != 1))
		abort();
	for (size_t i = 0; i < b.n; i++) {
		const struct mcp_msg *m = &b.msgs[i];
		if (m->id && !json_is_string(m->id) && !json_is_number(m->id))
			abort();
		switch (m->kind) {
		case MCP_REQUEST:
			if (!m->method || !*m->method || !m->id)
				abort();
			if (m->params && !json_is_object(m->params))
				abort();
			check_reply(mcp_result(m->id, json_object()));
			break;
		case MCP_NOTIFICATION:
			if (!m->method || !*m->method || m->id)
				abort();
			if (m->params && !json_is_object(m->params))
				abort();
			break;
		case MCP_RESPONSE:
			break;
		case MCP_INVALID:
			if ((m->error_code != MCP_INVALID_REQUEST &&
			     m->error_code != MCP_INVALID_PARAMS) ||
			    !m->error[0])
				abort();
			if (!mcp_msg_wants_reply(m))
				abort();
			check_reply(mcp_error(m->id, m->error_code, "%s", m->error));
			break;
		default:
			abort();
		}
	}
	mcp_batch_free(&b);

	/* Protocol versions come from the same clients. */
	char v[24];
	size_t n = size < sizeof(v) - 1 ? size : sizeof(v) - 1;
	memcpy(v, data, n);
	v[n] = '\0';
	if (!mcp_version_supported(mcp_version_negotiate(v)))
		abort();
	if (mcp_version_supported(v) && strcmp(mcp_version_negotiate(v), v) != 0)
		abort();
	return 0;
}
