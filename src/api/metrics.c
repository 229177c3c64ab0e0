#include <stdlib.h>

#include "api/api.h"
#include "metrics/metrics.h"
#include "util/cleanup.h"

void api_metrics(struct http_ctx *ctx)
{
	size_t len;
	_cleanup_free_ char *text = metrics_render(&len);
	http_reply_bytes(ctx, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
}
