/* front: the checks every routed request passes at its head, before any byte of its body is
 * read, in this order:
 *   1. Host: the name the client used must be one this server answers to (DNS rebinding: a
 *      page of evil.example whose name was made to point at 127.0.0.1 names evil.example);
 *   2. Origin (and Sec-Fetch-Site): a browser's cross-site request is refused on every
 *      route, whatever its method and content type, with authentication on or off; clients
 *      that send neither (curl, the SDKs) are not browsers and pass;
 *   3. the key (auth_http_check);
 *   4. the caller's quota for what the route holds while it runs (REST execute: a running
 *      command; file routes: a file operation), so that a caller at its quota is refused
 *      before its body is read.
 * Refusals are JSON: {"error": ...}, or a JSON-RPC error on the MCP routes. */
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "api/api.h"
#include "api/mcp.h"
#include "api/origin.h"
#include "auth/auth.h"
#include "auth/quota.h"
#include "util/cleanup.h"
#include "util/log.h"

static struct {
	struct origin_policy policy;
} F;

void front_init(const struct config *cfg)
{
	front_shutdown();
	const char *origins[] = { cfg->allowed_origins, cfg->mcp_allowed_origins };
	char self[256] = "";
	if (gethostname(self, sizeof(self) - 1) < 0)
		self[0] = '\0';
	size_t dropped =
		origin_policy_init(&F.policy, cfg->host, self, cfg->allowed_hosts, origins, 2);
	if (!origin_is_loopback_address(cfg->host) && !(cfg->allowed_hosts && *cfg->allowed_hosts))
		log_info("api",
			 "listening on %s: requests must name this server by an IP address, "
			 "localhost or `%s` unless SANDBOX_ALLOWED_HOSTS lists other names",
			 cfg->host, self);
	if (dropped)
		log_warn(
			"api",
			"SANDBOX_ALLOWED_HOSTS and SANDBOX_ALLOWED_ORIGINS hold at most %d entries "
			"each: %zu were left out",
			ORIGIN_LIST_MAX, dropped);
}

void front_shutdown(void)
{
	origin_policy_free(&F.policy);
}

static bool is_mcp_route(const struct http_route *r)
{
	return r && (strncmp(r->pattern, "/mcp", 4) == 0 || strcmp(r->pattern, "/sse") == 0 ||
		     strcmp(r->pattern, "/messages") == 0);
}

static int refuse(struct http_ctx *ctx, int status, const char *msg)
{
	if (is_mcp_route(ctx->route))
		http_reply_json(ctx, status, mcp_error(NULL, MCP_INVALID_REQUEST, "%s", msg));
	else if (api_e2b_route(ctx->route))
		api_e2b_error(ctx, status, "%s", msg);
	else
		http_reply_error(ctx, status, "%s", msg);
	return -1;
}

/* What a route's request holds while it runs, or -1. */
static int route_quota(const struct http_route *r)
{
	if (r->fn == api_exec_execute)
		return QUOTA_COMMANDS;
	if (r->fn == api_exec_write || r->fn == api_exec_upload || r->fn == api_exec_read ||
	    r->fn == api_exec_files || r->fn == api_exec_stat || r->fn == api_exec_mkdir ||
	    r->fn == api_exec_remove || r->fn == api_exec_move)
		return QUOTA_FILE_OPS;
	if (r->fn == api_exec_watch)
		return QUOTA_WATCHES;
	return -1;
}

int front_check(struct http_ctx *ctx, const char *scope, void *arg)
{
	/* A preview is the app's: its Host is one of the preview names (chosen by it), its
	 * Origin and cross-site navigations are the app's business, and who may reach it is
	 * decided by its handler (proxy.c), which knows the key or the token. */
	if (ctx->route == &api_preview_host_route)
		return auth_http_check(ctx, NULL, arg);
	/* So is the E2B data plane: its callers show the sandbox's envd token (envd.c), from
	 * wherever the SDK runs. */
	if (ctx->route == &api_envd_route)
		return auth_http_check(ctx, NULL, arg);
	bool preview_path = ctx->route == &api_preview_path_route;
	const char *host = http_header(ctx, "Host");
	/* No name leads to the Unix socket: whatever Host its clients send is theirs to pick.
	 * The path form of previews is under the API's names, so it is checked like the API
	 * (a page of a rebound name must not reach sessions' apps). */
	if (host && !http_from_unix_socket(ctx)) {
		if (!origin_host_ok(&F.policy, host)) {
			log_warn("api", "refused a request for Host %.100s", host);
			char msg[400];
			snprintf(msg, sizeof(msg),
				 "Forbidden: this server does not answer to the host name `%.100s` "
				 "(see SANDBOX_ALLOWED_HOSTS)",
				 host);
			return refuse(ctx, 403, msg);
		}
	}
	if (preview_path)
		return auth_http_check(ctx, NULL, arg);
	const char *origin = http_header(ctx, "Origin");
	if (origin && !origin_ok(&F.policy, origin, host)) {
		log_warn("api", "refused a request from Origin %.100s", origin);
		char msg[400];
		snprintf(msg, sizeof(msg),
			 "Forbidden: Origin `%.200s` is not allowed (see SANDBOX_ALLOWED_ORIGINS)",
			 origin);
		return refuse(ctx, 403, msg);
	}
	/* A browser that sent no Origin (a GET, say) still says where the request comes from. */
	const char *site = http_header(ctx, "Sec-Fetch-Site");
	if (!origin && site && strcasecmp(site, "same-origin") != 0 &&
	    strcasecmp(site, "none") != 0 && !F.policy.origins.any) {
		log_warn("api", "refused a %.20s request without an Origin", site);
		return refuse(ctx, 403,
			      "Forbidden: cross-site requests are not allowed (see "
			      "SANDBOX_ALLOWED_ORIGINS)");
	}
	if (auth_http_check(ctx, scope, arg) < 0)
		return -1;
	int k = route_quota(ctx->route);
	if (k >= 0) {
		struct err e;
		if (auth_hold(ctx, (enum quota_kind)k, &e) < 0) {
			http_add_header(ctx, "Retry-After", "1");
			http_reply_json(ctx, 429,
					json_pack("{s:s, s:i}", "error", e.msg, "retryAfter", 1));
			return -1;
		}
	}
	return 0;
}
