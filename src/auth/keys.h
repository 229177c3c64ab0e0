/* keys: the API key store in SQLite, shared by sandboxd and the `sandbox keys` CLI.
 *
 * A key is AUTH_KEY_PREFIX + 32 random hex characters. It is shown once, when created or
 * rotated; only its SHA-256 is stored. Both processes open the same database (WAL), so a
 * key the CLI creates or revokes takes effect on the daemon's next request. */
#pragma once

#include <jansson.h>
#include <sqlite3.h>
#include <stdbool.h>
#include <stdint.h>

#include "session/quota.h"
#include "util/err.h"

#define KEYS_SCOPE_EXEC    1u
#define KEYS_SCOPE_ADMIN   2u
#define KEYS_SCOPE_METRICS 4u

struct key_info {
	char id[40];
	char name[129];
	char prefix[24];    /* the first characters of the key, for recognising it */
	unsigned scopes;    /* KEYS_SCOPE_* */
	int64_t rate_limit; /* requests per minute, 0 = unlimited */
	int64_t created;    /* unix seconds */
	int64_t last_used;  /* unix seconds, 0 = never */
	int64_t expires;    /* unix seconds, 0 = never */
	bool enabled;
	struct quota_set quotas; /* its own quotas (QUOTA_DEFAULT where it has none) */
};

/* The table is the store's schema's (src/store/schema.c): api_keys. */

/* Parses "exec,admin" into a scope mask; unknown scopes are EINVAL naming the scope. */
int keys_parse_scopes(const char *s, unsigned *ret, struct err *err);
json_t *keys_scopes_json(unsigned scopes);

/* Creates a key; *ret_key gets the secret (caller frees), shown once. */
int keys_create(sqlite3 *db, const char *prefix, const char *name, unsigned scopes,
		int64_t rate_limit, int64_t expires, struct key_info *ret_info, char **ret_key,
		struct err *err);
/* Replaces the secret of key `id`, keeping its id (and so its sessions). */
int keys_rotate(sqlite3 *db, const char *prefix, const char *id, char **ret_key, struct err *err);
int keys_set_enabled(sqlite3 *db, const char *id, bool enabled, struct err *err);
int keys_delete(sqlite3 *db, const char *id, struct err *err);
int keys_get(sqlite3 *db, const char *id, struct key_info *ret, struct err *err);
/* Looks a secret up; ENOENT if no key has it. Does not check enabled/expiry. */
int keys_lookup(sqlite3 *db, const char *secret, struct key_info *ret, struct err *err);
int keys_count(sqlite3 *db, int64_t *ret);
/* Calls fn for every key, oldest first. */
int keys_foreach(sqlite3 *db, void (*fn)(const struct key_info *k, void *arg), void *arg,
		 struct err *err);
/* Replaces a key's own quotas (see session/quota.h) or its rate limit; ENOENT for no such key. */
int keys_set_quotas(sqlite3 *db, const char *id, const struct quota_set *q, struct err *err);
int keys_set_rate_limit(sqlite3 *db, const char *id, int64_t rate_limit, struct err *err);
int keys_touch(sqlite3 *db, const char *id, int64_t when);
json_t *keys_info_json(const struct key_info *k);
/* A key's whole row as JSON (its hash included, its last use not: that is each store's own),
 * for a cluster's shared key table; NULL with err set (ENOENT) when there is none. */
json_t *keys_row_json(sqlite3 *db, const char *id, struct err *err);
/* Writes such a row (a new key, or every field of an existing one but its last use), after
 * checking every field; EINVAL for a malformed row. */
int keys_row_apply(sqlite3 *db, const json_t *row, struct err *err);
/* Deletes every key but those whose ids are listed. */
int keys_keep_only(sqlite3 *db, const char *const *ids, size_t n, struct err *err);

/* The longest lifetime a key can be given: 100 years, far from overflowing an expiry time. */
#define KEYS_MAX_LIFETIME_S (100LL * 365 * 86400)
/* Parses "30d", "12h", "90m", "3600s" or plain seconds, at most KEYS_MAX_LIFETIME_S. */
int keys_parse_duration(const char *s, int64_t *ret_seconds);

/* Constant-time string equality. */
bool auth_secure_equal(const char *a, const char *b);
