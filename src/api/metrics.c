/* metrics: GET /metrics (the Prometheus exposition) and GET /metrics/history (the last
 * hour's samples of the daemon's main figures, taken here on a timer: metrics.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "api/api.h"
#include "metrics/metrics.h"
#include "util/cleanup.h"
#include "util/time.h"

/* The largest `since` taken: 2^53 - 1, the largest integer a JSON number holds exactly. */
#define SINCE_MAX 9007199254740991ULL

static struct event *sampler;

void api_metrics(struct http_ctx *ctx)
{
	size_t len;
	_cleanup_free_ char *text = metrics_render(&len);
	http_reply_bytes(ctx, 200, "text/plain; version=0.0.4; charset=utf-8", text, len);
}

static void on_sample(evutil_socket_t fd, short what, void *arg)
{
	metrics_history_sample(time_wall_ms());
}

void api_metrics_history_start(struct event_base *base)
{
	api_metrics_history_stop();
	metrics_history_sample(time_wall_ms());
	sampler = event_new(base, -1, EV_PERSIST, on_sample, NULL);
	struct timeval tv = { METRICS_HISTORY_INTERVAL_MS / 1000,
			      (METRICS_HISTORY_INTERVAL_MS % 1000) * 1000 };
	event_add(sampler, &tv);
}

void api_metrics_history_stop(void)
{
	if (sampler)
		event_free(sampler);
	sampler = NULL;
	metrics_history_reset();
}

/* Query parameter `name`: absent (*ret = def), or decimal digits only, from min to max;
 * replies 400 and returns -1 otherwise. */
static int query_uint(struct http_ctx *ctx, const char *name, unsigned long long min,
		      unsigned long long max, unsigned long long def, unsigned long long *ret)
{
	const char *v = http_query(ctx, name);
	*ret = def;
	if (!v)
		return 0;
	size_t n = strspn(v, "0123456789");
	unsigned long long x = n && n <= 16 && !v[n] ? strtoull(v, NULL, 10) : 0;
	if (!n || n > 16 || v[n] || x < min || x > max) {
		http_reply_error(ctx, 400, "`%s` must be an integer from %llu to %llu", name, min,
				 max);
		return -1;
	}
	*ret = x;
	return 0;
}

void api_metrics_history(struct http_ctx *ctx)
{
	unsigned long long since, limit;
	if (query_uint(ctx, "since", 0, SINCE_MAX, 0, &since) < 0 ||
	    query_uint(ctx, "limit", 1, METRICS_HISTORY_MAX, METRICS_HISTORY_MAX, &limit) < 0)
		return;
	struct metrics_sample s[METRICS_HISTORY_MAX];
	size_t n = metrics_history_read(since, s, limit);
	json_t *list = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(list,
				      json_pack("{s:I, s:f, s:I, s:f, s:f, s:f}", "t",
						(json_int_t)s[i].t_ms, "sessions", s[i].sessions,
						"creations", (json_int_t)s[i].creations,
						"creationSeconds", s[i].creation_s, "executes",
						s[i].executes, "errors", s[i].errors));
	http_reply_json(ctx, 200,
			json_pack("{s:i, s:i, s:o}", "intervalMs", METRICS_HISTORY_INTERVAL_MS,
				  "capacity", METRICS_HISTORY_MAX, "samples", list));
}
