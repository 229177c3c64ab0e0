#include <errno.h>
#include <stdio.h>
#include <time.h>

#include "api/api.h"
#include "driver/room.h"
#include "cluster/cluster.h"
#include "api/auth.h"
#include "auth/keys.h"
#include "session/ops.h"
#include "net/net.h"
#include "session/session.h"
#include "store/store.h"
#include "util/cleanup.h"

static struct {
	const struct config *cfg;
	const char *driver;
	const char *isolation;
	struct timespec started;
} health_mod;

const struct config *api_cfg;
struct event_base *api_base;

void api_init(struct event_base *base, const struct config *cfg, const char *driver_name,
	      const char *isolation)
{
	api_base = base;
	api_cfg = cfg;
	health_mod.cfg = cfg;
	health_mod.driver = driver_name;
	health_mod.isolation = isolation;
	clock_gettime(CLOCK_MONOTONIC, &health_mod.started);
	/* Every transport's routes act through ops: set it up before any of them runs. */
	ops_init(base, cfg);
	/* A timeout's pause ends the E2B clients' streams and watches first, as theirs does. */
	session_set_suspend_hook(api_envd_suspend);
}

static double uptime(void)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - health_mod.started.tv_sec) +
	       (double)(now.tv_nsec - health_mod.started.tv_nsec) / 1e9;
}

/* Whether the caller may see the server's figures: without authentication everyone may;
 * with it, a key with the metrics or admin scope (the same figures are in /metrics). */
static bool may_see_figures(struct http_ctx *ctx)
{
	if (!health_mod.cfg->auth_enabled)
		return true;
	const struct auth_identity *id = auth_identity(ctx);
	return id && (id->scopes & (KEYS_SCOPE_METRICS | KEYS_SCOPE_ADMIN));
}

void api_health(struct http_ctx *ctx)
{
	json_t *body = json_pack("{s:s, s:f, s:s, s:s, s:s}", "status", "ok", "uptime", uptime(),
				 "version", SANDBOX_VERSION, "driver", health_mod.driver,
				 "isolation", health_mod.isolation);
	if (may_see_figures(ctx)) {
		json_object_set_new(body, "sessions", json_integer((json_int_t)session_count()));
		json_object_set_new(body, "warmPool",
				    json_integer((json_int_t)session_pool_size()));
		json_object_set_new(body, "warmPools", session_pool_sizes());
	}
	/* Whether sandboxes get a network, and why not: without it a DNS failure inside is the
	 * only other clue. */
	const char *off = net_why_off();
	json_object_set_new(body, "network",
			    off ? json_pack("{s:b, s:s}", "enabled", 0, "reason", off)
				: json_pack("{s:b}", "enabled", 1));
	/* Which node answers, and whether etcd takes its renewals: from memory, never from
	 * etcd, so that /health answers whatever etcd does. */
	if (cluster_enabled() && may_see_figures(ctx))
		json_object_set_new(body, "cluster", cluster_health_json());
	else if (cluster_enabled())
		json_object_set_new(body, "cluster",
				    json_pack("{s:s}", "node", cluster_node_name()));
	http_reply_json(ctx, 200, body);
}

/* Ready means a request for a session can succeed now: state can be written, the driver
 * works, a template is loaded, there is room for another session and the host has memory
 * above the watermark. `checks` holds each as a boolean under the reference's names
 * (memoryOk) and ours; `failing` says why for each that fails. */
void api_ready(struct http_ctx *ctx)
{
	json_t *failing = json_array();
	json_t *checks = json_object();
	struct err e;

	bool mem_ok = session_memory_check(&e) == 0;
	json_object_set_new(checks, "memoryOk", json_boolean(mem_ok));
	if (!mem_ok)
		json_array_append_new(failing,
				      json_pack("{s:s, s:s}", "check", "memory", "error", e.msg));
	bool fds_ok = session_descriptor_check(&e) == 0;
	json_object_set_new(checks, "descriptors", json_boolean(fds_ok));
	if (!fds_ok)
		json_array_append_new(
			failing, json_pack("{s:s, s:s}", "check", "descriptors", "error", e.msg));
	bool room_ok = session_room_low(&e) == 0;
	json_object_set_new(checks, "stateDisk", json_boolean(room_ok));
	if (!room_ok)
		json_array_append_new(
			failing, json_pack("{s:s, s:s}", "check", "stateDisk", "error", e.msg));
	bool state_ok = store_check_writable(&e) == 0;
	json_object_set_new(checks, "state", json_boolean(state_ok));
	if (!state_ok)
		json_array_append_new(failing,
				      json_pack("{s:s, s:s}", "check", "state", "error", e.msg));
	bool driver_ok = session_driver_healthy(&e);
	json_object_set_new(checks, "driver", json_boolean(driver_ok));
	if (!driver_ok)
		json_array_append_new(failing,
				      json_pack("{s:s, s:s}", "check", "driver", "error", e.msg));
	bool templates_ok = session_templates()->n > 0;
	json_object_set_new(checks, "templates", json_boolean(templates_ok));
	if (!templates_ok)
		json_array_append_new(failing, json_pack("{s:s, s:s}", "check", "templates",
							 "error", "no template is loaded"));
	bool capacity_ok = session_count() < health_mod.cfg->max_sessions;
	json_object_set_new(checks, "capacity", json_boolean(capacity_ok));
	if (!capacity_ok)
		json_array_append_new(failing, json_pack("{s:s, s:s}", "check", "capacity", "error",
							 "the session limit is reached"));
	bool ok = json_array_size(failing) == 0;
	/* "not_ready" is the reference's spelling. */
	json_t *body = json_pack("{s:s, s:o, s:o}", "status", ok ? "ready" : "not_ready", "checks",
				 checks, "failing", failing);
	struct room_state st;
	if (room_state(health_mod.cfg->state_dir, &st) == 0)
		json_object_set_new(body, "stateDisk",
				    json_pack("{s:I, s:I, s:I}", "freeBytes", (json_int_t)st.free,
					      "sizeBytes", (json_int_t)st.size, "reserveBytes",
					      (json_int_t)st.reserve));
	http_reply_json(ctx, ok ? 200 : 503, body);
}
