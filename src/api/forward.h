/* forward: a request for a session of another node, sent on to that node (docs/cluster.md):
 * an HTTP relay over http/upstream.h, here in api/ beside api/cluster.c, which decides at
 * each request's head which node serves it; cluster/ gives it the nodes, the event base,
 * the timeout and the peer's signature.
 *
 * The request goes to the node's advertised URL over a connection of its own, with its
 * method, target and headers (but the hop-by-hop ones), its body streamed as it comes with
 * back-pressure both ways, and two headers of ours: X-Forwarded-For (the client's address)
 * and X-Sandbox-Peer (cluster_peer_sign: this node, and the identity it checked, if any). The
 * answer comes back as it comes: its status and headers, then its body re-framed toward our
 * client, who keeps its keep-alive connection; an NDJSON or SSE stream arrives chunk by
 * chunk. A 101 answer to an Upgrade (a WebSocket terminal) hands both connections to a byte
 * relay. The other node never forwards again (no second hop): a request carrying a valid
 * X-Sandbox-Peer is served where it lands. */
#pragma once

#include <stdbool.h>

#include "cluster/cluster.h"
#include "http/http.h"

/* The route a request takes once forwarding was decided at its head. */
extern const struct http_route cluster_forward_route;

/* Decided at the head (from the auth function): reroutes ctx so that its body streams to
 * node n. With `identity`, n is told the caller is owner with scopes (a key this node
 * checked); without, n authenticates the request itself (a preview's or a ticket's token).
 * `kind` labels the metrics ("request"). */
void cluster_forward_at_head(struct http_ctx *ctx, const struct cluster_node *n, const char *owner,
			     unsigned scopes, bool identity, const char *kind);

/* Frees every forward still alive (relays of upgraded connections), once the HTTP server is
 * gone. */
void cluster_forward_shutdown(void);

/* Decided by a handler whose body was read (a creation placed on another node): sends the
 * request, body included, to n and answers with what n answers. */
void cluster_forward_buffered(struct http_ctx *ctx, const struct cluster_node *n, const char *owner,
			      unsigned scopes, const char *kind);
