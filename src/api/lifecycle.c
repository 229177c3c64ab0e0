/* lifecycle: POST /exec/:id/pause and POST /exec/:id/resume (docs/lifecycle.md). Each answers
 * with the session once its sandbox is frozen or running again. */
#include <errno.h>

#include "api/api.h"
#include "session/ops.h"

static void on_done(struct session *s, const struct err *err, void *arg)
{
	struct http_ctx *ctx = arg;
	if (err) {
		api_reply_err(ctx, err);
		return;
	}
	http_reply_json(ctx, 200, session_json(s));
}

static void pause_or_resume(struct http_ctx *ctx, bool pause)
{
	const char *id = api_path_session_id(ctx);
	if (!id)
		return;
	struct ops_target t = api_request_target(ctx, id, NULL);
	struct err e;
	if (ops_pause_session(&t, pause, on_done, ctx, &e) < 0)
		api_reply_err(ctx, &e);
}

void api_exec_pause(struct http_ctx *ctx)
{
	pause_or_resume(ctx, true);
}

void api_exec_resume(struct http_ctx *ctx)
{
	pause_or_resume(ctx, false);
}
