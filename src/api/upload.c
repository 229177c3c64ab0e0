/* upload: PUT /exec/:id/file?path=P[&mode=644][&template=T], the file's bytes as the body
 * (any content type; chunked or with a length), streamed to the sandbox as they arrive: the
 * body is read only as fast as the agent takes it (credit), so that a large upload costs
 * the daemon about a window of memory, never the file. The file appears whole when the
 * body ends, or not at all. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "config.h"
#include "session/ops.h"
#include "util/cleanup.h"
#include "util/text.h"

struct up_req {
	struct http_ctx *ctx;
	struct ops_call *c;
};

static void up_ready(struct ops_call *c, void *arg)
{
	struct up_req *q = arg;
	http_body_resume(q->ctx);
}

static const struct ops_upload_cbs up_cbs = { .on_ready = up_ready };

static int up_data(struct http_ctx *ctx, const uint8_t *data, size_t len, void *arg)
{
	struct up_req *q = arg;
	ops_upload_send(q->c, data, len);
	if (ops_upload_queued(q->c) >= OPS_UPLOAD_HIGH)
		http_body_pause(ctx);
	return 0;
}

static void up_end(struct http_ctx *ctx, void *arg)
{
	struct up_req *q = arg;
	ops_upload_end(q->c);
}

static const struct http_body_ops up_body = { .data = up_data, .end = up_end };

static void up_done(struct ops_call *c, const struct ops_result *r, const struct err *err,
		    void *arg)
{
	struct up_req *q = arg;
	struct http_ctx *ctx = q->ctx;
	ctx->on_gone = NULL;
	free(q);
	if (err) {
		api_reply_err(ctx, err);
		return;
	}
	http_reply_json(ctx, 200,
			json_pack("{s:b, s:s, s:I, s:I}", "success", 1, "path", r->path, "size",
				  (json_int_t)r->size, "bytesWritten", (json_int_t)r->size));
}

static void up_gone(struct http_ctx *ctx, void *arg)
{
	struct up_req *q = arg;
	/* The agent drops its temporary file: nothing of a cut upload is left. */
	ops_call_detach(q->c);
	free(q);
	http_stream_abort(ctx);
}

void api_exec_upload(struct http_ctx *ctx)
{
	const char *id = api_path_session_id(ctx);
	if (!id)
		return;
	const char *path = http_query(ctx, "path");
	const char *mode_s = http_query(ctx, "mode");
	const char *tmpl = http_query(ctx, "template");
	if (!path || !*path || !utf8_valid((const uint8_t *)path, strlen(path))) {
		http_reply_error(ctx, 400, "`path` is required, as UTF-8 text");
		return;
	}
	int mode = -1;
	if (mode_s) {
		char *end;
		long m = strtol(mode_s, &end, 8);
		if (!*mode_s || *end || m < 0 || m > 07777) {
			http_reply_error(ctx, 400, "`mode` must be octal permissions such as 644");
			return;
		}
		mode = (int)m;
	}
	const char *cl = http_header(ctx, "Content-Length");
	if (cl && strtoull(cl, NULL, 10) > api_cfg->max_upload_bytes) {
		http_reply_error(ctx, 413,
				 "an upload is at most %llu bytes (SANDBOX_MAX_UPLOAD_BYTES)",
				 (unsigned long long)api_cfg->max_upload_bytes);
		return;
	}
	struct up_req *q = xcalloc(1, sizeof(*q));
	q->ctx = ctx;
	struct ops_target t = api_request_target(ctx, id, tmpl);
	struct err e;
	q->c = ops_upload(&t, path, mode, api_cfg->max_upload_bytes, &up_cbs, up_done, q, &e);
	if (!q->c) {
		free(q);
		api_reply_err(ctx, &e);
		return;
	}
	/* Nothing is read until the sandbox is ready for it. */
	http_body_stream(ctx, &up_body, q);
	http_body_pause(ctx);
	ctx->on_gone = up_gone;
	ctx->on_gone_arg = q;
}
