/* api/cluster: which node of a cluster serves a request, decided at its head, where a
 * creation goes, and listings of every node (docs/cluster.md).
 *
 * A request about one session (a path below /exec/:id, /sandboxes/:id or /v2/sandboxes/:id,
 * a preview's Host or path, E2B's data plane, a terminal's ticket) is served here when the
 * session is this node's or unknown to the cluster (a first use creates it here), sent on to
 * its node when that node is up (forward.h), and refused when its node's lease ended: 410
 * with the reason (E2B's data plane: 502, which its SDKs read as "the sandbox is gone"). A
 * listing asks every other node for its part (api_cluster_fanout). Requests another node
 * forwarded are always served where they land. */
#pragma once

#include <jansson.h>
#include <stdbool.h>

#include "http/http.h"

/* For a route that takes a key, once the key was checked: 0 to serve here, 1 when the
 * request was rerouted to another node (the caller lets it go on), -1 when it was answered. */
int api_cluster_route_owned(struct http_ctx *ctx, const char *owner, unsigned scopes, bool admin);

/* For a route that authenticates by its own means (previews, E2B's data plane, a ticket), before
 * any check: the same answers. */
int api_cluster_route_anonymous(struct http_ctx *ctx);

/* For a creation whose body was read: 0 to make the session here, 1 when it was sent to the
 * node placement chose (cluster_place: the template, `selector`'s labels, the load), -1 when
 * answered (no node fits: 503; a bad selector: 400; E2B's error shape with e2b). A session
 * of that id on another node is that node's to answer for; one `pinned` to this node (made
 * from a snapshot, or with volumes: both are this node's files) is made here. */
int api_cluster_route_create(struct http_ctx *ctx, const char *owner, unsigned scopes,
			     const char *id, const char *template, const json_t *selector,
			     bool pinned, bool e2b);

/* For an MCP route, once the key was checked: a request of an MCP session that lives on
 * another node (its id is "<node>~...") goes there (1), one of a node that is gone is a 404
 * of JSON-RPC's shape (-1), else 0. */
int api_cluster_route_mcp(struct http_ctx *ctx, const char *owner, unsigned scopes);

/* From tools/call: a tool whose "sessionId" names a session of another node is called there
 * (through that node's /mcp, vouching for the caller), its answer given as this call's;
 * true when taken (or answered: the session's node is gone). */
struct mcp_call;
bool api_cluster_mcp_call(struct mcp_call *c, const char *tool, json_t *args, const char *version);

/* What every other live node answers to this request's method and target, asked with the
 * caller's identity (owner, scopes): done(ctx, parts, arg) on the loop with an array of
 * {"node", "status", "body"} (body: the JSON answer, or null) for each node, or NULL when the
 * client left meanwhile (done must then only free arg). A node that does not answer within
 * SANDBOX_CLUSTER_TIMEOUT_MS is left out, with status 0. */
void api_cluster_fanout(struct http_ctx *ctx, const char *owner, unsigned scopes,
			void (*done)(struct http_ctx *ctx, json_t *parts, void *arg), void *arg);
