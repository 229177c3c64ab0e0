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
#include "api/auth.h"
#include "session/quota.h"
#include "cluster/cluster.h"
#include "api/cluster.h"
#include "util/cleanup.h"
#include "util/log.h"

static struct {
	struct origin_policy policy;
} front_mod;

void front_init(const struct config *cfg)
{
	front_shutdown();
	const char *origins[] = { cfg->allowed_origins, cfg->mcp_allowed_origins };
	char self[256] = "";
	if (gethostname(self, sizeof(self) - 1) < 0)
		self[0] = '\0';
	size_t dropped = origin_policy_init(&front_mod.policy, cfg->host, self, cfg->allowed_hosts,
					    origins, 2);
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
	origin_policy_free(&front_mod.policy);
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

/* A request another node forwarded (X-Sandbox-Peer): its signature checked, it is served
 * here whatever the Host and Origin (the node that took it checked them, as this one would
 * have), from the client's address that node gives, as the caller that node vouches for
 * when it checked a key, else authenticated here (a preview's or a ticket's token). -1
 * when refused. */
static int from_peer(struct http_ctx *ctx, const char *scope, const char *header, void *arg)
{
	char node[64], owner[64];
	unsigned scopes;
	bool identity;
	struct err e;
	if (cluster_peer_verify(header, http_method(ctx), http_target(ctx), node, sizeof(node),
				owner, sizeof(owner), &scopes, &identity, &e) < 0) {
		log_debug("api", "refused a request from %s: %s", http_conn_peer(ctx), e.msg);
		return refuse(ctx, 401, e.msg);
	}
	const char *xff = http_header(ctx, "X-Forwarded-For");
	if (xff && *xff && strlen(xff) < 64 && !strpbrk(xff, " ,\r\n"))
		http_set_peer(ctx, xff);
	int r = identity && scope ? auth_peer_vouched(ctx, scope, owner, scopes)
				  : auth_http_check(ctx, scope, arg);
	if (r < 0)
		return -1;
	struct auth_identity *id = ctx->user;
	if (id)
		id->from_peer = true;
	return 0;
}

/* The caller's quota for what its route holds while it runs. */
static int quota_for_route(struct http_ctx *ctx)
{
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

/* Refuses a Host that is not one of this server's names; -1 when refused. No name leads to
 * the Unix socket: whatever Host its clients send is theirs to pick. */
static int host_check(struct http_ctx *ctx, const char *host)
{
	if (!host || http_from_unix_socket(ctx) || origin_host_ok(&front_mod.policy, host))
		return 0;
	log_warn("api", "refused a request for Host %.100s", host);
	char msg[400];
	snprintf(msg, sizeof(msg),
		 "Forbidden: this server does not answer to the host name `%.100s` "
		 "(see SANDBOX_ALLOWED_HOSTS)",
		 host);
	return refuse(ctx, 403, msg);
}

int front_check(struct http_ctx *ctx, const char *scope, void *arg)
{
	bool cluster = cluster_enabled();
	if (cluster) {
		const char *peer = http_header(ctx, CLUSTER_PEER_HEADER);
		if (peer)
			return from_peer(ctx, scope, peer, arg) < 0 ? -1 : quota_for_route(ctx);
	}
	/* A preview is the app's: its Host is one of the preview names (chosen by it), its
	 * Origin and cross-site navigations are the app's business, and who may reach it is
	 * decided by its handler (proxy.c), which knows the key or the token. So is the E2B
	 * data plane: its callers show the sandbox's envd token (envd.c), from wherever the SDK
	 * runs. In a cluster, a session of another node's goes there, its token checked there. */
	const char *host = http_header(ctx, "Host");
	if (ctx->route == &api_preview_host_route || ctx->route == &api_envd_route) {
		/* The data plane's header form (E2b-Sandbox-Id) comes under one of the API's own
		 * names, not a preview name: checked like the API (a page of a rebound name must
		 * not reach it). Its Origin is not: it takes no credential a browser would add
		 * by itself (docs/security.md). */
		if (ctx->route == &api_envd_route && !api_preview_host(host) &&
		    host_check(ctx, host) < 0)
			return -1;
		int c = cluster ? api_cluster_route_anonymous(ctx) : 0;
		if (c)
			return c < 0 ? -1 : 0;
		return auth_http_check(ctx, NULL, arg);
	}
	bool preview_path = ctx->route == &api_preview_path_route;
	/* The path form of previews is under the API's names, so it is checked like the API
	 * (a page of a rebound name must not reach sessions' apps). */
	if (host_check(ctx, host) < 0)
		return -1;
	if (preview_path) {
		int c = cluster ? api_cluster_route_anonymous(ctx) : 0;
		if (c)
			return c < 0 ? -1 : 0;
		return auth_http_check(ctx, NULL, arg);
	}
	const char *origin = http_header(ctx, "Origin");
	if (origin && !origin_ok(&front_mod.policy, origin, host)) {
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
	    strcasecmp(site, "none") != 0 && !front_mod.policy.origins.any) {
		log_warn("api", "refused a %.20s request without an Origin", site);
		return refuse(ctx, 403,
			      "Forbidden: cross-site requests are not allowed (see "
			      "SANDBOX_ALLOWED_ORIGINS)");
	}
	/* A terminal's ticket names the node that issued it: the request goes there, checked by
	 * it (after the Host and Origin checks above, as on one host). */
	if (cluster && (ctx->route->flags & HTTP_ROUTE_TICKET)) {
		int c = api_cluster_route_anonymous(ctx);
		if (c)
			return c < 0 ? -1 : 0;
	}
	if (auth_http_check(ctx, scope, arg) < 0)
		return -1;
	/* A session of another node's: the request goes there, with the caller checked here;
	 * that node holds its quota. */
	if (cluster_enabled() && scope) {
		const struct auth_identity *id = auth_identity(ctx);
		int c = api_cluster_route_owned(ctx, api_owner(ctx), id ? id->scopes : 0,
						api_is_admin(ctx));
		if (!c)
			c = api_cluster_route_mcp(ctx, api_owner(ctx), id ? id->scopes : 0);
		if (c)
			return c < 0 ? -1 : 0;
	}
	return quota_for_route(ctx);
}
