/* auth: who is calling. Authenticates each routed request by API key, checks the route's
 * scope, applies the key's rate limit and throttles failed attempts per client address.
 * The identity it attaches to the request is what session ownership is keyed on. */
#pragma once

#include <event2/event.h>
#include <stdbool.h>

#include "config.h"
#include "http/http.h"
#include "util/err.h"

struct auth_identity {
	char key_id[40]; /* "" when authentication is off */
	unsigned scopes; /* KEYS_SCOPE_* */
};

/* Prepares the key table. */
int auth_init(struct event_base *base, const struct config *cfg, struct err *err);
/* Once the daemon serves at `url`: on the first start with auth on and no key at all,
 * creates an admin key, keeps it in <state dir>/admin-key (0600) and shows it once on
 * stderr, with what to do with it. */
int auth_first_start(const struct config *cfg, const char *url, struct err *err);
/* Writes pending last-used times. */
void auth_shutdown(void);
/* Writes the last-used times noted since the last write. A request costs no database
 * write: the times are kept in memory and written every 30 s, at shutdown, and by this call
 * (GET /admin/keys makes it so that what it lists is current). */
void auth_flush_last_used(void);

/* The http_auth_fn hook. */
int auth_http_check(struct http_ctx *ctx, const char *scope, void *arg);

/* The caller's identity, or NULL when authentication is off. */
const struct auth_identity *auth_identity(struct http_ctx *ctx);
bool auth_is_admin(struct http_ctx *ctx);

/* Constant-time string equality. */
bool auth_secure_equal(const char *a, const char *b);
