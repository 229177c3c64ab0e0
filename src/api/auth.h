/* auth: who is calling. Authenticates each routed request by API key, checks the route's
 * scope, applies the key's rate limit and throttles failed attempts per client address.
 * The identity it attaches to the request is what session ownership is keyed on.
 *
 * The HTTP side of authentication, over what src/auth/ keeps without knowing of HTTP (the
 * keys in SQLite, keys.h; WebSocket tickets, ticket.h). */
#pragma once

#include <event2/event.h>
#include <stdbool.h>

#include "session/quota.h"
#include "config.h"
#include "http/http.h"
#include "util/err.h"

/* Every routed request gets one (ctx->user), freed with the request. */
struct auth_identity {
	char key_id[40];    /* "" when authentication is off or the route needs no key */
	unsigned scopes;    /* KEYS_SCOPE_* */
	bool authenticated; /* a valid key was given */
	int held;           /* the quota kind + 1 the request holds (auth_hold), 0: none */
	bool from_peer;     /* forwarded by another node of the cluster (served here, only here) */
};

/* Prepares the key table. */
int auth_init(struct event_base *base, const struct config *cfg, struct err *err);
/* Once the daemon serves at `url`: on the first start with auth on and no key at all,
 * creates an admin key, keeps it in <state dir>/admin-key (0600) and shows it once on
 * stderr, with what to do with it. `publish` (may be NULL) is called with its id first (a
 * cluster's key table): when it fails, the key is taken back and nothing is shown. On every
 * other start (auth on), says where the admin key file is, or that there is none. */
int auth_first_start(const struct config *cfg, const char *url,
		     int (*publish)(const char *id, struct err *err), struct err *err);
/* For an installation (sandboxd --init-admin-key): when the store holds no key at all,
 * creates an admin key and writes it only to <state dir>/admin-key (0600; an existing file
 * is an error), whose path goes to `path`; *ret_created says whether it did. The key is
 * printed nowhere, so the daemon's first start then creates none and logs none. */
int auth_init_admin_key(const struct config *cfg, char *path, size_t cap, bool *ret_created,
			struct err *err);
/* Writes pending last-used times. */
void auth_shutdown(void);
/* Writes the last-used times noted since the last write. A request costs no database
 * write: the times are kept in memory and written every 30 s, at shutdown, and by this call
 * (GET /admin/keys makes it so that what it lists is current). */
void auth_flush_last_used(void);

/* Checks the request's key for a route needing `scope` and gives the request its identity
 * (an http_auth_fn). A route without a scope takes every caller, and knows one that sent a
 * valid key. Failures are throttled per address (30 a minute, then 429 for failures only). */
int auth_http_check(struct http_ctx *ctx, const char *scope, void *arg);

/* For a request another node of the cluster forwarded, vouching for the caller (key_id, with
 * scopes): the key must still stand here (enabled, not expired) and hold the route's scope;
 * no secret is checked and no rate limit applied (the node that took the request did both).
 * Replies and returns -1 otherwise. */
int auth_peer_vouched(struct http_ctx *ctx, const char *scope, const char *key_id, unsigned scopes);

/* Takes a unit of quota kind k for the caller, given back when the request ends (one per
 * request). -EAGAIN or -ENOBUFS with err set when refused (see quota_admit). */
int auth_hold(struct http_ctx *ctx, enum quota_kind k, struct err *err);

/* The caller's identity when it gave a valid key, else NULL (authentication off, or a
 * route without a scope called without a key). */
const struct auth_identity *auth_identity(struct http_ctx *ctx);
bool auth_is_admin(struct http_ctx *ctx);
/* Whether another node of the cluster forwarded the request (front.c checked its signature):
 * it is served here and nowhere else, and a listing gives this node's part only. */
bool auth_from_peer(struct http_ctx *ctx);
