#include "api/auth.h"

#include <errno.h>
#include <stdio.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <unistd.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "auth/keys.h"
#include "auth/ticket.h"
#include "session/quota.h"
#include "store/store.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/time.h"

#define LAST_USED_FLUSH_S 30
#define FAIL_WINDOW_S     60
#define FAIL_LIMIT        30
#define FAIL_TABLE        1024
#define MAX_BUCKETS       4096

struct bucket {
	char key_id[40];
	double tokens;
	uint64_t last_ns;
	int64_t limit;
	int64_t last_used; /* unix seconds, not yet written when dirty */
	bool dirty;
};

struct failure {
	char addr[64];
	unsigned count;
	uint64_t window_start_ns;
};

static struct {
	const struct config *cfg;
	struct bucket *buckets;
	size_t nbuckets;
	struct failure fails[FAIL_TABLE];
	struct event *flush;
} auth_mod;

void auth_flush_last_used(void)
{
	sqlite3 *db = store_db();
	for (size_t i = 0; i < auth_mod.nbuckets; i++) {
		struct bucket *b = &auth_mod.buckets[i];
		if (!b->dirty || !db)
			continue;
		/* Kept for the next flush while the database is locked (another process
		 * writing it): the loop does not wait for it. */
		int r = keys_touch(db, b->key_id, b->last_used);
		if (r < 0 && r != -ENOENT)
			break;
		b->dirty = false;
	}
}

static void on_flush(evutil_socket_t fd, short what, void *arg)
{
	auth_flush_last_used();
}

int auth_init(struct event_base *base, const struct config *cfg, struct err *err)
{
	auth_mod.cfg = cfg;
	if (!store_db())
		return err_set(err, EIO, "the key store is not open");
	auth_mod.flush = event_new(base, -1, EV_PERSIST, on_flush, NULL);
	struct timeval tv = { .tv_sec = LAST_USED_FLUSH_S };
	event_add(auth_mod.flush, &tv);
	if (cfg->mcp_auth_token && *cfg->mcp_auth_token)
		log_warn("auth", "MCP_AUTH_TOKEN is deprecated: create an API key with the exec "
				 "scope and use it as the bearer token instead");
	if (!cfg->auth_enabled) {
		log_warn("auth", "AUTH_ENABLED=false: every request is accepted without a key; "
				 "use this only on a trusted machine");
		return 0;
	}
	return 0;
}

/* Keeps the first start's key in the state directory (0600), so that it is never lost with
 * the one printing; an existing file is not replaced. */
static void keep_key_file(const struct config *cfg, const char *secret, char *path, size_t cap)
{
	snprintf(path, cap, "%s/admin-key", cfg->state_dir);
	_cleanup_close_ int fd =
		open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 || dprintf(fd, "%s\n", secret) < 0) {
		log_warn("auth", "cannot keep the admin key in `%s`: %s", path, strerror(errno));
		path[0] = '\0';
	}
}

/* When the store holds no key at all, creates an admin key named `name`: returns 1 with *k
 * and *ret_secret (caller frees) set, 0 when a key existed already, or a negative errno. */
static int create_first_admin_key(const struct config *cfg, const char *name, struct key_info *k,
				  char **ret_secret, struct err *err)
{
	int64_t n = 0;
	if (keys_count(store_db(), &n) < 0)
		return err_set(err, EIO, "cannot count API keys");
	if (n > 0)
		return 0;
	int r = keys_create(store_db(), cfg->key_prefix, name,
			    KEYS_SCOPE_EXEC | KEYS_SCOPE_ADMIN | KEYS_SCOPE_METRICS, 0, 0, k,
			    ret_secret, err);
	return r < 0 ? r : 1;
}

/* On a start that made no key: where the admin key is (the first start's, or the one the
 * package made), or that its file is gone and how to make a key. On a terminal as text beside
 * the "serving" line; otherwise as a log line with the path in a field of its own. */
static void announce_key_file(const struct config *cfg)
{
	char path[PATH_MAX];
	snprintf(path, sizeof(path), "%s/admin-key", cfg->state_dir);
	struct stat st;
	bool kept = lstat(path, &st) == 0 && S_ISREG(st.st_mode);
	if (isatty(STDERR_FILENO)) {
		if (kept)
			fprintf(stderr,
				"sandboxd: the admin key is in %s (export "
				"SANDBOX_API_KEY=$(cat %s))\n",
				path, path);
		else
			fprintf(stderr,
				"sandboxd: no admin key file (%s); make a key with: sandbox keys "
				"create NAME --scopes exec,admin\n",
				path);
		return;
	}
	json_auto_t *fields = json_pack("{s:s, s:b}", "keyFile", path, "kept", kept);
	if (kept)
		log_fields(LOG_INFO, "auth", fields, "the admin key is in %s", path);
	else
		log_fields(LOG_INFO, "auth", fields,
			   "no admin key file (%s); make a key with: sandbox keys create NAME "
			   "--scopes exec,admin",
			   path);
}

int auth_first_start(const struct config *cfg, const char *url,
		     int (*publish)(const char *id, struct err *err), struct err *err)
{
	if (!cfg->auth_enabled)
		return 0;
	struct key_info k;
	_cleanup_free_ char *secret = NULL;
	int r = create_first_admin_key(cfg, "admin (created at first start)", &k, &secret, err);
	if (r < 0)
		return r;
	if (r == 0) {
		announce_key_file(cfg);
		return 0;
	}
	/* Made known (a cluster's other nodes) before it is shown, or not at all. */
	if (publish && publish(k.id, err) < 0) {
		struct err ignored;
		keys_delete(store_db(), k.id, &ignored);
		return err_wrap(err, "the first admin key");
	}
	char path[PATH_MAX];
	keep_key_file(cfg, secret, path, sizeof(path));
	/* Shown once. On a terminal as text that is easy to copy, with what to do with it;
	 * otherwise (a log file, the journal) as a log line like every other. */
	if (isatty(STDERR_FILENO)) {
		fprintf(stderr,
			"\nsandboxd: no API key existed, so an admin key was created (id %s).\n"
			"sandboxd: it is shown only this once%s%s%s:\n\n    %s\n\n"
			"Use it from a shell (the CLI is build/cli/sandbox in a checkout):\n\n"
			"    export SANDBOX_URL=%s\n    export SANDBOX_API_KEY=%s\n\n",
			k.id, path[0] ? " (and kept in " : "", path, path[0] ? ", mode 0600)" : "",
			secret, url, secret);
	} else {
		json_auto_t *fields = json_pack("{s:s, s:s, s:s, s:s}", "keyId", k.id, "key",
						secret, "keyFile", path, "url", url);
		log_fields(LOG_WARN, "auth", fields,
			   "no API key existed, so an admin key was created; it is shown only this "
			   "once (export SANDBOX_API_KEY=<key> for the CLI and SDKs)");
	}
	return 0;
}

int auth_init_admin_key(const struct config *cfg, char *path, size_t cap, bool *ret_created,
			struct err *err)
{
	*ret_created = false;
	path[0] = '\0';
	if (!store_db())
		return err_set(err, EIO, "the key store is not open");
	struct key_info k;
	_cleanup_free_ char *secret = NULL;
	int r = create_first_admin_key(cfg, "admin (created at installation)", &k, &secret, err);
	if (r <= 0)
		return r;
	keep_key_file(cfg, secret, path, cap);
	if (!path[0]) {
		/* Nobody could ever read this key: take it back, and say why. */
		int saved = errno;
		struct err ignored;
		keys_delete(store_db(), k.id, &ignored);
		return err_sys(err, saved, "cannot write %s/admin-key", cfg->state_dir);
	}
	*ret_created = true;
	return 0;
}

void auth_shutdown(void)
{
	auth_flush_last_used();
	if (auth_mod.flush)
		event_free(auth_mod.flush);
	auth_mod.flush = NULL;
	free(auth_mod.buckets);
	auth_mod.buckets = NULL;
	auth_mod.nbuckets = 0;
}

const struct auth_identity *auth_identity(struct http_ctx *ctx)
{
	const struct auth_identity *id = ctx->user;
	return id && id->authenticated ? id : NULL;
}

bool auth_from_peer(struct http_ctx *ctx)
{
	const struct auth_identity *id = ctx->user;
	return id && id->from_peer;
}

bool auth_is_admin(struct http_ctx *ctx)
{
	if (!auth_mod.cfg->auth_enabled)
		return true;
	const struct auth_identity *id = auth_identity(ctx);
	return id && (id->scopes & KEYS_SCOPE_ADMIN);
}

/* The secret of the header forms (Authorization: Bearer, X-API-Key), or NULL. */
static const char *header_secret(struct http_ctx *ctx)
{
	const char *h = http_header(ctx, "Authorization");
	if (h && strncasecmp(h, "Bearer ", 7) == 0) {
		h += 7;
		while (*h == ' ')
			h++;
		if (*h)
			return h;
	}
	h = http_header(ctx, "X-API-Key");
	return h && *h ? h : NULL;
}

/* The secret the request carries, from the header forms first. */
static const char *request_secret(struct http_ctx *ctx)
{
	const char *h = header_secret(ctx);
	if (h)
		return h;
	h = http_query(ctx, "api_key");
	if (h && *h)
		return h;
	h = http_query(ctx, "apiKey");
	if (h && *h)
		return h;
	return NULL;
}

static struct failure *failure_slot(const char *addr, bool create)
{
	struct failure *oldest = &auth_mod.fails[0];
	for (size_t i = 0; i < FAIL_TABLE; i++) {
		struct failure *f = &auth_mod.fails[i];
		if (f->addr[0] && strcmp(f->addr, addr) == 0)
			return f;
		if (f->window_start_ns < oldest->window_start_ns)
			oldest = f;
	}
	if (!create)
		return NULL;
	memset(oldest, 0, sizeof(*oldest));
	snprintf(oldest->addr, sizeof(oldest->addr), "%s", addr);
	oldest->window_start_ns = time_mono_ns();
	return oldest;
}

static bool throttled(const char *addr, unsigned *retry_after)
{
	struct failure *f = failure_slot(addr, false);
	if (!f)
		return false;
	uint64_t now = time_mono_ns();
	uint64_t window = (uint64_t)FAIL_WINDOW_S * 1000000000u;
	if (now - f->window_start_ns >= window) {
		f->count = 0;
		f->window_start_ns = now;
		return false;
	}
	*retry_after = (unsigned)((window - (now - f->window_start_ns)) / 1000000000u) + 1;
	return f->count >= FAIL_LIMIT;
}

static void note_failure(const char *addr)
{
	struct failure *f = failure_slot(addr, true);
	f->count++;
}

/* The E2B-compatible routes (api/e2b.c) refuse with E2B's body, {"code": <status>,
 * "message": ...}: its SDKs read both keys, also on a 401 or a 429. */
static bool is_e2b_route(const struct http_ctx *ctx)
{
	const char *p = ctx->route ? ctx->route->pattern : "";
	return strncmp(p, "/sandboxes", 10) == 0 || strncmp(p, "/v2/sandboxes", 13) == 0;
}

static void refuse(struct http_ctx *ctx, int status, const char *msg, int retry_after)
{
	if (is_e2b_route(ctx))
		http_reply_json(ctx, status,
				json_pack("{s:i, s:s}", "code", status, "message", msg));
	else if (retry_after >= 0)
		http_reply_json(ctx, status,
				json_pack("{s:s, s:i}", "error", msg, "retryAfter", retry_after));
	else
		http_reply_error(ctx, status, "%s", msg);
}

static int deny(struct http_ctx *ctx, int status, const char *msg)
{
	if (status == 401) {
		note_failure(http_peer(ctx));
		http_add_header(ctx, "WWW-Authenticate", "Bearer");
	}
	refuse(ctx, status, msg, -1);
	return -1;
}

static struct bucket *bucket_for(const struct key_info *k)
{
	for (size_t i = 0; i < auth_mod.nbuckets; i++)
		if (strcmp(auth_mod.buckets[i].key_id, k->id) == 0)
			return &auth_mod.buckets[i];
	if (auth_mod.nbuckets == MAX_BUCKETS) {
		auth_flush_last_used();
		auth_mod.nbuckets = 0; /* forget idle buckets: they refill to full anyway */
	}
	auth_mod.buckets =
		xrealloc(auth_mod.buckets, (auth_mod.nbuckets + 1) * sizeof(*auth_mod.buckets));
	struct bucket *b = &auth_mod.buckets[auth_mod.nbuckets++];
	memset(b, 0, sizeof(*b));
	snprintf(b->key_id, sizeof(b->key_id), "%s", k->id);
	b->tokens = (double)k->rate_limit;
	b->limit = k->rate_limit;
	b->last_ns = time_mono_ns();
	return b;
}

/* Token bucket: `limit` requests per minute, refilled continuously. */
static int rate_limit(struct http_ctx *ctx, const struct key_info *k, struct bucket *b)
{
	if (k->rate_limit <= 0)
		return 0;
	uint64_t now = time_mono_ns();
	if (b->limit != k->rate_limit) {
		b->limit = k->rate_limit;
		if (b->tokens > (double)b->limit)
			b->tokens = (double)b->limit;
	}
	double per_ns = (double)k->rate_limit / 60e9;
	b->tokens += (double)(now - b->last_ns) * per_ns;
	if (b->tokens > (double)k->rate_limit)
		b->tokens = (double)k->rate_limit;
	b->last_ns = now;

	char buf[32];
	snprintf(buf, sizeof(buf), "%lld", (long long)k->rate_limit);
	http_add_header(ctx, "RateLimit-Limit", buf);
	if (b->tokens < 1.0) {
		unsigned wait = (unsigned)((1.0 - b->tokens) / per_ns / 1e9) + 1;
		snprintf(buf, sizeof(buf), "%u", wait);
		http_add_header(ctx, "Retry-After", buf);
		http_add_header(ctx, "RateLimit-Remaining", "0");
		http_add_header(ctx, "RateLimit-Reset", buf);
		refuse(ctx, 429, "Rate limit exceeded", (int)wait);
		return -1;
	}
	b->tokens -= 1.0;
	snprintf(buf, sizeof(buf), "%lld", (long long)b->tokens);
	http_add_header(ctx, "RateLimit-Remaining", buf);
	unsigned full = (unsigned)(((double)k->rate_limit - b->tokens) / per_ns / 1e9);
	snprintf(buf, sizeof(buf), "%u", full);
	http_add_header(ctx, "RateLimit-Reset", buf);
	return 0;
}

static unsigned scope_bit(const char *scope)
{
	if (strcmp(scope, "admin") == 0)
		return KEYS_SCOPE_ADMIN;
	if (strcmp(scope, "metrics") == 0)
		return KEYS_SCOPE_METRICS;
	return KEYS_SCOPE_EXEC;
}

static void identity_free(void *p)
{
	struct auth_identity *id = p;
	if (id->held)
		quota_release(id->key_id, (enum quota_kind)(id->held - 1));
	free(id);
}

static void set_identity(struct http_ctx *ctx, const char *key_id, unsigned scopes)
{
	struct auth_identity *id = xcalloc(1, sizeof(*id));
	snprintf(id->key_id, sizeof(id->key_id), "%s", key_id);
	id->scopes = scopes;
	id->authenticated = *key_id != '\0';
	ctx->user = id;
	ctx->user_free = identity_free;
	http_set_budget_key(ctx, key_id);
}

int auth_hold(struct http_ctx *ctx, enum quota_kind k, struct err *err)
{
	struct auth_identity *id = ctx->user;
	if (!id)
		return err_set(err, EINVAL, "no caller to hold a quota for");
	int r = quota_admit(id->key_id, k, err);
	if (r < 0)
		return r;
	id->held = (int)k + 1;
	return 0;
}

/* The MCP transports: Streamable HTTP and the reference's SSE at /mcp..., the usual legacy
 * SSE pair at /sse and /messages. */
static bool is_mcp_route(const char *pattern)
{
	return strncmp(pattern, "/mcp", 4) == 0 || strcmp(pattern, "/sse") == 0 ||
	       strcmp(pattern, "/messages") == 0;
}

/* The refusal of a request without a valid key: 401, or 429 while its address has failed too
 * often. Only failures count and only failures are refused for them: a valid key is accepted
 * from any address, whatever other clients there did (keys are 128 random bits: guessing
 * one is not what the throttle is for; it bounds the work and the noise of failures). */
static int deny_key(struct http_ctx *ctx, const char *msg)
{
	unsigned retry;
	if (throttled(http_peer(ctx), &retry)) {
		char buf[16];
		snprintf(buf, sizeof(buf), "%u", retry);
		http_add_header(ctx, "Retry-After", buf);
		refuse(ctx, 429, "Too many failed authentication attempts", (int)retry);
		return -1;
	}
	return deny(ctx, 401, msg);
}

/* The key a request carries, looked up and checked: 0 with *k filled, or -1 with *why set
 * (status and message) when there is none or it cannot be used. */
static int valid_key(const char *secret, struct key_info *k, int *status, const char **why,
		     struct err *e)
{
	if (keys_lookup(store_db(), secret, k, e) < 0) {
		*status = e->errnum == ENOENT ? 401 : 500;
		*why = e->errnum == ENOENT ? "Invalid API key" : e->msg;
		return -1;
	}
	*status = 401;
	if (!k->enabled) {
		*why = "API key revoked";
		return -1;
	}
	if (k->expires && k->expires <= (int64_t)time(NULL)) {
		*why = "API key expired";
		return -1;
	}
	return 0;
}

/* A route without a scope takes any caller; one that sends a valid key in a header is still
 * known by it (what /health shows depends on it). A bad key changes nothing for the request
 * but counts as a failure of its address, and a throttled address is not looked up: the
 * route is no way around the throttle. */
static int anonymous_route(struct http_ctx *ctx)
{
	set_identity(ctx, "", 0);
	if (!auth_mod.cfg->auth_enabled)
		return 0;
	const char *secret = header_secret(ctx);
	unsigned retry;
	if (!secret || throttled(http_peer(ctx), &retry))
		return 0;
	struct key_info k;
	struct err e;
	int status;
	const char *why;
	if (valid_key(secret, &k, &status, &why, &e) < 0) {
		if (status == 401)
			note_failure(http_peer(ctx));
		return 0;
	}
	struct auth_identity *id = ctx->user;
	snprintf(id->key_id, sizeof(id->key_id), "%s", k.id);
	id->scopes = k.scopes;
	id->authenticated = true;
	return 0;
}

/* An upgrade's one-use ticket (auth/ticket.h): taken, then its key checked again as a header
 * key would be (revoked, expired, its scopes now, its rate limit), so that a ticket never
 * outlives what its key may do. */
static int ticket_check(struct http_ctx *ctx, const char *scope, const char *ticket)
{
	char owner[40];
	unsigned scopes;
	const char *sid = http_param(ctx, 0);
	/* In a cluster a ticket begins with its node's name ("<node>~"): the rest is the ticket. */
	const char *tilde = strchr(ticket, '~');
	if (tilde)
		ticket = tilde + 1;
	if (!sid || !ticket_take(ticket, sid, owner, &scopes))
		return deny_key(ctx, "invalid, used or expired ticket (a ticket works once, for 30 "
				     "seconds, for the session it was issued for)");
	struct key_info k;
	struct err e;
	if (keys_get(store_db(), owner, &k, &e) < 0 || !k.enabled ||
	    (k.expires && k.expires <= (int64_t)time(NULL)))
		return deny_key(ctx,
				"the key this ticket was issued to is revoked, expired or gone");
	k.scopes &= scopes;
	if (!(k.scopes & scope_bit(scope))) {
		http_reply_error(ctx, 403, "Insufficient scope: this route requires `%s`", scope);
		return -1;
	}
	struct bucket *b = bucket_for(&k);
	if (rate_limit(ctx, &k, b) < 0)
		return -1;
	quota_note_key(k.id, (k.scopes & KEYS_SCOPE_ADMIN) != 0, &k.quotas);
	set_identity(ctx, k.id, k.scopes);
	return 0;
}

int auth_peer_vouched(struct http_ctx *ctx, const char *scope, const char *key_id, unsigned scopes)
{
	struct key_info k;
	struct err e;
	/* The deprecated single MCP token: a caller of MCP routes, where it is set here too. */
	if (!strcmp(key_id, "mcp-token")) {
		const char *token = auth_mod.cfg->mcp_auth_token;
		if (!token || !*token || !ctx->route || !is_mcp_route(ctx->route->pattern))
			return deny(ctx, 401, "MCP_AUTH_TOKEN is not accepted here");
		set_identity(ctx, "mcp-token", KEYS_SCOPE_EXEC);
		return 0;
	}
	/* The node that took the request checked the key itself a moment ago; this one only
	 * checks that the key it names still stands here, and the route's scope. */
	if (keys_get(store_db(), key_id, &k, &e) < 0 || !k.enabled ||
	    (k.expires && k.expires <= (int64_t)time(NULL)))
		return deny(ctx, 401, "API key revoked, expired or unknown");
	k.scopes &= scopes;
	if (scope && !(k.scopes & scope_bit(scope))) {
		char msg[96];
		snprintf(msg, sizeof(msg), "Insufficient scope: this route requires `%s`", scope);
		refuse(ctx, 403, msg, -1);
		return -1;
	}
	quota_note_key(k.id, (k.scopes & KEYS_SCOPE_ADMIN) != 0, &k.quotas);
	set_identity(ctx, k.id, k.scopes);
	return 0;
}

int auth_http_check(struct http_ctx *ctx, const char *scope, void *arg)
{
	if (!scope)
		return anonymous_route(ctx);
	const char *ticket = ctx->route && (ctx->route->flags & HTTP_ROUTE_TICKET)
				     ? http_query(ctx, "ticket")
				     : NULL;
	if (ticket && auth_mod.cfg->auth_enabled)
		return ticket_check(ctx, scope, ticket);
	if (!auth_mod.cfg->auth_enabled) {
		set_identity(ctx, "", 0);
		return 0;
	}
	const char *secret = request_secret(ctx);
	if (!secret) {
		/* A key sent in a form we do not read is not "no key": say which forms we do. */
		const char *h = http_header(ctx, "Authorization");
		if (h && *h && strncasecmp(h, "Bearer", 6) != 0)
			return deny_key(ctx, "API key required: an Authorization header must be "
					     "`Bearer <key>` (or send the key in X-API-Key)");
		return deny_key(ctx, "API key required");
	}

	/* The deprecated single MCP token admits MCP requests only. */
	const char *token = auth_mod.cfg->mcp_auth_token;
	if (token && *token && ctx->route && is_mcp_route(ctx->route->pattern) &&
	    auth_secure_equal(secret, token)) {
		set_identity(ctx, "mcp-token", KEYS_SCOPE_EXEC);
		return 0;
	}

	struct key_info k;
	struct err e;
	int status;
	const char *why;
	if (valid_key(secret, &k, &status, &why, &e) < 0) {
		if (status != 401) {
			refuse(ctx, status, why, -1);
			return -1;
		}
		return deny_key(ctx, why);
	}
	if (!(k.scopes & scope_bit(scope))) {
		char msg[96];
		snprintf(msg, sizeof(msg), "Insufficient scope: this route requires `%s`", scope);
		refuse(ctx, 403, msg, -1);
		return -1;
	}
	struct bucket *b = bucket_for(&k);
	if (rate_limit(ctx, &k, b) < 0)
		return -1;
	b->last_used = (int64_t)time(NULL);
	b->dirty = true;
	quota_note_key(k.id, (k.scopes & KEYS_SCOPE_ADMIN) != 0, &k.quotas);
	set_identity(ctx, k.id, k.scopes);
	return 0;
}
