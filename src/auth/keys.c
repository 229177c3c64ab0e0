#include "auth/keys.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "store/store.h"
#include "util/cleanup.h"
#include "util/random.h"
#include "util/sha256.h"

static const char *const scope_names[] = { "exec", "admin", "metrics" };

int keys_parse_scopes(const char *s, unsigned *ret, struct err *err)
{
	unsigned mask = 0;
	_cleanup_free_ char *copy = xstrdup(s);
	char *save = NULL;
	for (char *tok = strtok_r(copy, ", ", &save); tok; tok = strtok_r(NULL, ", ", &save)) {
		size_t i;
		for (i = 0; i < 3; i++)
			if (strcmp(tok, scope_names[i]) == 0)
				break;
		if (i == 3)
			return err_set(err, EINVAL,
				       "unknown scope `%s` (scopes are exec, admin, metrics)", tok);
		mask |= 1u << i;
	}
	if (!mask)
		return err_set(err, EINVAL,
			       "at least one scope is required (exec, admin, metrics)");
	*ret = mask;
	return 0;
}

json_t *keys_scopes_json(unsigned scopes)
{
	json_t *a = json_array();
	for (size_t i = 0; i < 3; i++)
		if (scopes & (1u << i))
			json_array_append_new(a, json_string(scope_names[i]));
	return a;
}

static char *new_secret(const char *prefix)
{
	char hex[33];
	random_hex(hex, 16);
	return xasprintf("%s%s", prefix, hex);
}

static int db_error(sqlite3 *db, struct err *err, const char *what)
{
	/* The daemon waits only a moment for another process's lock (store.c): a 503. */
	if ((sqlite3_errcode(db) & 0xff) == SQLITE_BUSY)
		return err_set(err, EROFS,
			       "key store: %s: the database is locked by another process; try "
			       "again",
			       what);
	return err_set(err, EIO, "key store: %s: %s", what, sqlite3_errmsg(db));
}

static void row_to_info(sqlite3_stmt *st, struct key_info *k)
{
	memset(k, 0, sizeof(*k));
	snprintf(k->id, sizeof(k->id), "%s", (const char *)sqlite3_column_text(st, 0));
	snprintf(k->name, sizeof(k->name), "%s", (const char *)sqlite3_column_text(st, 1));
	snprintf(k->prefix, sizeof(k->prefix), "%s", (const char *)sqlite3_column_text(st, 2));
	k->scopes = (unsigned)sqlite3_column_int(st, 3);
	k->rate_limit = sqlite3_column_int64(st, 4);
	k->created = sqlite3_column_int64(st, 5);
	k->last_used = sqlite3_column_int64(st, 6);
	k->expires = sqlite3_column_int64(st, 7);
	k->enabled = sqlite3_column_int(st, 8) != 0;
	quota_set_load(&k->quotas, (const char *)sqlite3_column_text(st, 9));
}

#define KEY_COLUMNS \
	"id, name, prefix, scopes, rate_limit, created, last_used, expires, enabled, quotas"

/* The row of a new key; `shown` is the start of its secret, `hash` the digest of it. */
static int insert_key(sqlite3 *db, const char *id, const char *name, const char *shown,
		      const char *hash, unsigned scopes, int64_t rate_limit, int64_t expires,
		      struct err *err)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db,
			       "INSERT INTO api_keys(id, name, prefix, hash, scopes, rate_limit, "
			       "created, expires) VALUES (?,?,?,?,?,?,?,?)",
			       -1, &st, NULL) != SQLITE_OK)
		return db_error(db, err, "insert");
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, shown, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, hash, -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 5, (int)scopes);
	sqlite3_bind_int64(st, 6, rate_limit);
	sqlite3_bind_int64(st, 7, (int64_t)time(NULL));
	sqlite3_bind_int64(st, 8, expires);
	if (sqlite3_step(st) != SQLITE_DONE)
		return db_error(db, err, "insert");
	return 0;
}

int keys_create(sqlite3 *db, const char *prefix, const char *name, unsigned scopes,
		int64_t rate_limit, int64_t expires, struct key_info *ret_info, char **ret_key,
		struct err *err)
{
	if (!name || !*name || strlen(name) > 128)
		return err_set(err, EINVAL, "a key name of 1 to 128 characters is required");
	if (rate_limit < 0)
		return err_set(err, EINVAL, "the rate limit must be 0 (none) or more");
	char idhex[17];
	random_hex(idhex, 8);
	_cleanup_free_ char *id = xasprintf("key_%s", idhex);
	_cleanup_free_ char *secret = new_secret(prefix);
	char hash[65];
	sha256_hex(secret, strlen(secret), hash);
	char shown[24];
	snprintf(shown, sizeof(shown), "%.*s", (int)strlen(prefix) + 4, secret);

	int r = insert_key(db, id, name, shown, hash, scopes, rate_limit, expires, err);
	if (r < 0)
		return r;
	if (ret_info && keys_get(db, id, ret_info, err) < 0)
		return -EIO;
	*ret_key = TAKE_PTR(secret);
	return 0;
}

int keys_rotate(sqlite3 *db, const char *prefix, const char *id, char **ret_key, struct err *err)
{
	struct key_info k;
	int r = keys_get(db, id, &k, err);
	if (r < 0)
		return r;
	_cleanup_free_ char *secret = new_secret(prefix);
	char hash[65];
	sha256_hex(secret, strlen(secret), hash);
	char shown[24];
	snprintf(shown, sizeof(shown), "%.*s", (int)strlen(prefix) + 4, secret);
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, "UPDATE api_keys SET hash = ?, prefix = ? WHERE id = ?", -1, &st,
			       NULL) != SQLITE_OK)
		return db_error(db, err, "rotate");
	sqlite3_bind_text(st, 1, hash, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, shown, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, id, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_DONE)
		return db_error(db, err, "rotate");
	*ret_key = TAKE_PTR(secret);
	return 0;
}

static int exec_on_id(sqlite3 *db, const char *sql, const char *id, int64_t v, struct err *err)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return db_error(db, err, "update");
	sqlite3_bind_int64(st, 1, v);
	sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_DONE)
		return db_error(db, err, "update");
	if (sqlite3_changes(db) == 0)
		return err_set(err, ENOENT, "no key with id `%s`", id);
	return 0;
}

int keys_set_enabled(sqlite3 *db, const char *id, bool enabled, struct err *err)
{
	return exec_on_id(db, "UPDATE api_keys SET enabled = ? WHERE id = ?", id, enabled, err);
}

int keys_delete(sqlite3 *db, const char *id, struct err *err)
{
	return exec_on_id(db, "DELETE FROM api_keys WHERE ? IS NOT NULL AND id = ?", id, 1, err);
}

int keys_set_rate_limit(sqlite3 *db, const char *id, int64_t rate_limit, struct err *err)
{
	if (rate_limit < 0)
		return err_set(err, EINVAL, "the rate limit must be 0 (none) or more");
	return exec_on_id(db, "UPDATE api_keys SET rate_limit = ? WHERE id = ?", id, rate_limit,
			  err);
}

int keys_set_quotas(sqlite3 *db, const char *id, const struct quota_set *q, struct err *err)
{
	_cleanup_free_ char *text = quota_set_dump(q);
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, "UPDATE api_keys SET quotas = ? WHERE id = ?", -1, &st, NULL) !=
	    SQLITE_OK)
		return db_error(db, err, "update");
	sqlite3_bind_text(st, 1, text, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_DONE)
		return db_error(db, err, "update");
	if (sqlite3_changes(db) == 0)
		return err_set(err, ENOENT, "no key with id `%s`", id);
	return 0;
}

int keys_touch(sqlite3 *db, const char *id, int64_t when)
{
	return exec_on_id(db, "UPDATE api_keys SET last_used = ? WHERE id = ?", id, when, NULL);
}

static int get_one(sqlite3 *db, const char *sql, const char *arg, struct key_info *ret,
		   struct err *err, const char *missing)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return db_error(db, err, "select");
	sqlite3_bind_text(st, 1, arg, -1, SQLITE_STATIC);
	int rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		row_to_info(st, ret);
		return 0;
	}
	if (rc == SQLITE_DONE)
		return err_set(err, ENOENT, "%s", missing);
	return db_error(db, err, "select");
}

int keys_get(sqlite3 *db, const char *id, struct key_info *ret, struct err *err)
{
	char missing[96];
	snprintf(missing, sizeof(missing), "no key with id `%.60s`", id);
	return get_one(db, "SELECT " KEY_COLUMNS " FROM api_keys WHERE id = ?", id, ret, err,
		       missing);
}

int keys_lookup(sqlite3 *db, const char *secret, struct key_info *ret, struct err *err)
{
	char hash[65];
	sha256_hex(secret, strlen(secret), hash);
	/* The lookup is by hash, so its timing says nothing about the secret. */
	return get_one(db, "SELECT " KEY_COLUMNS " FROM api_keys WHERE hash = ?", hash, ret, err,
		       "invalid API key");
}

int keys_count(sqlite3 *db, int64_t *ret)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, "SELECT count(*) FROM api_keys", -1, &st, NULL) != SQLITE_OK)
		return -EIO;
	int rc = sqlite3_step(st);
	*ret = rc == SQLITE_ROW ? sqlite3_column_int64(st, 0) : 0;
	return rc == SQLITE_ROW ? 0 : -EIO;
}

int keys_foreach(sqlite3 *db, void (*fn)(const struct key_info *k, void *arg), void *arg,
		 struct err *err)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, "SELECT " KEY_COLUMNS " FROM api_keys ORDER BY created, id", -1,
			       &st, NULL) != SQLITE_OK)
		return db_error(db, err, "select");
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct key_info k;
		row_to_info(st, &k);
		fn(&k, arg);
	}
	return rc == SQLITE_DONE ? 0 : db_error(db, err, "select");
}

static json_t *iso_or_null(int64_t t)
{
	if (!t)
		return json_null();
	time_t tt = (time_t)t;
	struct tm tm;
	gmtime_r(&tt, &tm);
	char buf[32];
	strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
	return json_string(buf);
}

json_t *keys_info_json(const struct key_info *k)
{
	json_t *j = json_pack("{s:s, s:s, s:s, s:o, s:I, s:b}", "id", k->id, "name", k->name,
			      "prefix", k->prefix, "scopes", keys_scopes_json(k->scopes),
			      "rateLimit", (json_int_t)k->rate_limit, "enabled", k->enabled);
	json_object_set_new(j, "createdAt", iso_or_null(k->created));
	json_object_set_new(j, "lastUsedAt", iso_or_null(k->last_used));
	json_object_set_new(j, "expiresAt", iso_or_null(k->expires));
	json_object_set_new(j, "quotas", quota_set_json(&k->quotas));
	return j;
}

int keys_parse_duration(const char *s, int64_t *ret_seconds)
{
	char *end = NULL;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || v <= 0)
		return -EINVAL;
	int64_t mult = 1;
	if (*end == 'd')
		mult = 86400, end++;
	else if (*end == 'h')
		mult = 3600, end++;
	else if (*end == 'm')
		mult = 60, end++;
	else if (*end == 's')
		end++;
	if (*end || v > KEYS_MAX_LIFETIME_S / mult)
		return -EINVAL;
	*ret_seconds = v * mult;
	return 0;
}

/* --- whole rows, for a cluster's shared key table ------------------------------------ */

json_t *keys_row_json(sqlite3 *db, const char *id, struct err *err)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db,
			       "SELECT id, name, prefix, hash, scopes, rate_limit, created, "
			       "expires, enabled, quotas FROM api_keys WHERE id = ?",
			       -1, &st, NULL) != SQLITE_OK) {
		db_error(db, err, "select");
		return NULL;
	}
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	int rc = sqlite3_step(st);
	if (rc != SQLITE_ROW) {
		if (rc == SQLITE_DONE)
			err_set(err, ENOENT, "no key with id `%.60s`", id);
		else
			db_error(db, err, "select");
		return NULL;
	}
	return json_pack("{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:b, s:s}", "id",
			 (const char *)sqlite3_column_text(st, 0), "name",
			 (const char *)sqlite3_column_text(st, 1), "prefix",
			 (const char *)sqlite3_column_text(st, 2), "hash",
			 (const char *)sqlite3_column_text(st, 3), "scopes",
			 (json_int_t)sqlite3_column_int(st, 4), "rateLimit",
			 (json_int_t)sqlite3_column_int64(st, 5), "created",
			 (json_int_t)sqlite3_column_int64(st, 6), "expires",
			 (json_int_t)sqlite3_column_int64(st, 7), "enabled",
			 sqlite3_column_int(st, 8) != 0, "quotas",
			 (const char *)sqlite3_column_text(st, 9));
}

static bool hex64(const char *s)
{
	if (!s || strlen(s) != 64)
		return false;
	for (const char *p = s; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	return true;
}

static bool key_id_ok(const char *s)
{
	size_t n = s ? strlen(s) : 0;
	if (n == 0 || n >= sizeof(((struct key_info *)0)->id))
		return false;
	for (const char *p = s; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') ||
		      (*p >= 'A' && *p <= 'Z') || *p == '_' || *p == '-'))
			return false;
	return true;
}

int keys_row_apply(sqlite3 *db, const json_t *row, struct err *err)
{
	const char *id, *name, *prefix, *hash, *quotas;
	json_int_t scopes, rate, created, expires;
	int enabled;
	json_error_t jerr;
	/* Fields it does not know (a newer node's) are left aside. */
	if (json_unpack_ex((json_t *)row, &jerr, 0,
			   "{s:s, s:s, s:s, s:s, s:I, s:I, s:I, s:I, s:b, s:s}", "id", &id, "name",
			   &name, "prefix", &prefix, "hash", &hash, "scopes", &scopes, "rateLimit",
			   &rate, "created", &created, "expires", &expires, "enabled", &enabled,
			   "quotas", &quotas) < 0)
		return err_set(err, EINVAL, "a key row: %s", jerr.text);
	if (!key_id_ok(id) || !hex64(hash) || !*name || strlen(name) > 128 || strlen(prefix) > 23 ||
	    scopes <= 0 || scopes > 7 || rate < 0 || created < 0 || expires < 0 ||
	    strlen(quotas) > 4096)
		return err_set(err, EINVAL, "a key row with impossible fields (id `%.40s`)", id);
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	/* Its last use stays this store's own. A row of another id with the same hash (a key
	 * deleted and made again elsewhere) gives way. */
	if (sqlite3_prepare_v2(db, "DELETE FROM api_keys WHERE hash = ? AND id != ?", -1, &st,
			       NULL) != SQLITE_OK)
		return db_error(db, err, "replace");
	sqlite3_bind_text(st, 1, hash, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, id, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_DONE)
		return db_error(db, err, "replace");
	sqlite3_finalize(TAKE_PTR(st));
	if (sqlite3_prepare_v2(
		    db,
		    "INSERT INTO api_keys(id, name, prefix, hash, scopes, rate_limit, created, "
		    "expires, enabled, quotas) VALUES (?,?,?,?,?,?,?,?,?,?) ON CONFLICT(id) DO "
		    "UPDATE SET name = excluded.name, prefix = excluded.prefix, hash = "
		    "excluded.hash, scopes = excluded.scopes, rate_limit = excluded.rate_limit, "
		    "created = excluded.created, expires = excluded.expires, enabled = "
		    "excluded.enabled, quotas = excluded.quotas",
		    -1, &st, NULL) != SQLITE_OK)
		return db_error(db, err, "upsert");
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, prefix, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, hash, -1, SQLITE_STATIC);
	sqlite3_bind_int(st, 5, (int)scopes);
	sqlite3_bind_int64(st, 6, rate);
	sqlite3_bind_int64(st, 7, created);
	sqlite3_bind_int64(st, 8, expires);
	sqlite3_bind_int(st, 9, enabled ? 1 : 0);
	sqlite3_bind_text(st, 10, quotas, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_DONE)
		return db_error(db, err, "upsert");
	return 0;
}

int keys_keep_only(sqlite3 *db, const char *const *ids, size_t n, struct err *err)
{
	_cleanup_sqlite_free_ char *msg = NULL;
	if (sqlite3_exec(db,
			 "CREATE TEMP TABLE IF NOT EXISTS keep_keys(id TEXT PRIMARY KEY);"
			 "DELETE FROM keep_keys;",
			 NULL, NULL, &msg) != SQLITE_OK)
		return err_set(err, EIO, "key store: %s", msg ? msg : "?");
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, "INSERT OR IGNORE INTO keep_keys(id) VALUES (?)", -1, &st,
			       NULL) != SQLITE_OK)
		return db_error(db, err, "keep");
	for (size_t i = 0; i < n; i++) {
		sqlite3_reset(st);
		sqlite3_bind_text(st, 1, ids[i], -1, SQLITE_STATIC);
		if (sqlite3_step(st) != SQLITE_DONE)
			return db_error(db, err, "keep");
	}
	_cleanup_sqlite_free_ char *msg2 = NULL;
	if (sqlite3_exec(db, "DELETE FROM api_keys WHERE id NOT IN (SELECT id FROM keep_keys);",
			 NULL, NULL, &msg2) != SQLITE_OK)
		return err_set(err, EIO, "key store: %s", msg2 ? msg2 : "?");
	return 0;
}

bool auth_secure_equal(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	unsigned char diff = (unsigned char)(la != lb);
	for (size_t i = 0; i < la; i++)
		diff |= (unsigned char)(a[i] ^ b[i % (lb ? lb : 1)]);
	return diff == 0;
}
