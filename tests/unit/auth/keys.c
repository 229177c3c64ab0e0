/* Tests of src/auth/keys.c: the key store on a real SQLite file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "auth/keys.h"
#include "store/store.h"

#define HASH64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

static int setup(void **state)
{
	sqlite3 *db;
	assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
	struct err e;
	assert_int_equal(store_migrate(db, &e), 0);
	*state = db;
	return 0;
}

static int teardown(void **state)
{
	sqlite3_close(*state);
	return 0;
}

static void test_create_and_lookup(void **state)
{
	sqlite3 *db = *state;
	struct key_info k, found;
	char *secret = NULL;
	struct err e;
	assert_int_equal(
		keys_create(db, "sk_test_", "agent", KEYS_SCOPE_EXEC, 100, 0, &k, &secret, &e), 0);
	assert_int_equal(strlen(secret), strlen("sk_test_") + 32);
	assert_memory_equal(secret, "sk_test_", 8);
	assert_int_equal(keys_lookup(db, secret, &found, &e), 0);
	assert_string_equal(found.id, k.id);
	assert_int_equal(found.scopes, KEYS_SCOPE_EXEC);
	assert_int_equal(found.rate_limit, 100);
	assert_true(found.enabled);
	/* Only the hash is stored: the secret is nowhere in the table. */
	sqlite3_stmt *st;
	sqlite3_prepare_v2(db, "SELECT count(*) FROM api_keys WHERE hash = ? OR prefix = ?", -1,
			   &st, NULL);
	sqlite3_bind_text(st, 1, secret, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, secret, -1, SQLITE_STATIC);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_int_equal(sqlite3_column_int(st, 0), 0);
	sqlite3_finalize(st);
	assert_int_equal(keys_lookup(db, "sk_test_0000", &found, &e), -ENOENT);
	free(secret);
}

static void test_rotate_keeps_id_and_drops_old_secret(void **state)
{
	sqlite3 *db = *state;
	struct key_info k, found;
	char *old = NULL, *fresh = NULL;
	struct err e;
	assert_int_equal(keys_create(db, "sk_test_", "r", KEYS_SCOPE_EXEC, 0, 0, &k, &old, &e), 0);
	assert_int_equal(keys_rotate(db, "sk_test_", k.id, &fresh, &e), 0);
	assert_string_not_equal(old, fresh);
	assert_int_equal(keys_lookup(db, old, &found, &e), -ENOENT);
	assert_int_equal(keys_lookup(db, fresh, &found, &e), 0);
	assert_string_equal(found.id, k.id);
	assert_int_equal(keys_rotate(db, "sk_test_", "key_missing", &fresh, &e) < 0, 1);
	free(old);
	free(fresh);
}

static void test_revoke_and_delete(void **state)
{
	sqlite3 *db = *state;
	struct key_info k, found;
	char *secret = NULL;
	struct err e;
	assert_int_equal(keys_create(db, "sk_test_", "x", KEYS_SCOPE_ADMIN, 0, 0, &k, &secret, &e),
			 0);
	assert_int_equal(keys_set_enabled(db, k.id, false, &e), 0);
	assert_int_equal(keys_lookup(db, secret, &found, &e), 0);
	assert_false(found.enabled);
	assert_int_equal(keys_delete(db, k.id, &e), 0);
	assert_int_equal(keys_lookup(db, secret, &found, &e), -ENOENT);
	assert_int_equal(keys_delete(db, k.id, &e), -ENOENT);
	free(secret);
}

static void test_scopes_and_durations(void **state)
{
	unsigned s;
	struct err e;
	assert_int_equal(keys_parse_scopes("exec,admin,metrics", &s, &e), 0);
	assert_int_equal(s, KEYS_SCOPE_EXEC | KEYS_SCOPE_ADMIN | KEYS_SCOPE_METRICS);
	assert_int_equal(keys_parse_scopes("exec,root", &s, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "root"));
	assert_int_equal(keys_parse_scopes("", &s, &e), -EINVAL);
	int64_t secs;
	assert_int_equal(keys_parse_duration("30d", &secs), 0);
	assert_int_equal(secs, 30 * 86400);
	assert_int_equal(keys_parse_duration("90m", &secs), 0);
	assert_int_equal(secs, 5400);
	assert_int_equal(keys_parse_duration("3600", &secs), 0);
	assert_int_equal(secs, 3600);
	assert_int_equal(keys_parse_duration("-1d", &secs), -EINVAL);
	assert_int_equal(keys_parse_duration("5y", &secs), -EINVAL);
	assert_int_equal(keys_parse_duration("", &secs), -EINVAL);
}

static void test_names_validated(void **state)
{
	sqlite3 *db = *state;
	char *secret = NULL;
	struct err e;
	assert_int_equal(keys_create(db, "sk_test_", "", KEYS_SCOPE_EXEC, 0, 0, NULL, &secret, &e),
			 -EINVAL);
	assert_int_equal(
		keys_create(db, "sk_test_", "n", KEYS_SCOPE_EXEC, -5, 0, NULL, &secret, &e),
		-EINVAL);
}

/* A cluster's key table moves whole rows between stores: a row taken from one store and put
 * into another gives a key that works there, with the same id, scopes and state; its last
 * use stays the store's own; rows with impossible fields are refused. */
static void test_rows_move_between_stores(void **state)
{
	sqlite3 *db = *state, *other;
	struct err e;
	assert_int_equal(sqlite3_open(":memory:", &other), SQLITE_OK);
	assert_int_equal(store_migrate(other, &e), 0);
	struct key_info k, got;
	char *secret = NULL;
	assert_int_equal(
		keys_create(db, "sk_test_", "moved", KEYS_SCOPE_EXEC, 60, 0, &k, &secret, &e), 0);
	json_t *row = keys_row_json(db, k.id, &e);
	assert_non_null(row);
	assert_null(json_object_get(row, "lastUsed"));
	assert_int_equal(keys_row_apply(other, row, &e), 0);
	assert_int_equal(keys_lookup(other, secret, &got, &e), 0);
	assert_string_equal(got.id, k.id);
	assert_int_equal(got.scopes, KEYS_SCOPE_EXEC);
	assert_int_equal(got.rate_limit, 60);
	/* Revoked in the first, the row again: revoked in the other; its last use kept. */
	assert_int_equal(keys_touch(other, k.id, 12345), 0);
	assert_int_equal(keys_set_enabled(db, k.id, false, &e), 0);
	json_decref(row);
	row = keys_row_json(db, k.id, &e);
	assert_int_equal(keys_row_apply(other, row, &e), 0);
	assert_int_equal(keys_get(other, k.id, &got, &e), 0);
	assert_false(got.enabled);
	assert_int_equal(got.last_used, 12345);
	/* Only the listed keys are kept. */
	const char *ids[] = { "key_none" };
	assert_int_equal(keys_keep_only(other, ids, 1, &e), 0);
	assert_int_equal(keys_get(other, k.id, &got, &e), -ENOENT);
	/* Impossible rows. */
	static const char *const bad[] = {
		"{}",
		"{\"id\":\"../x\",\"name\":\"n\",\"prefix\":\"p\",\"hash\":\"" HASH64
		"\",\"scopes\":1,\"rateLimit\":0,\"created\":1,\"expires\":0,\"enabled\":true,"
		"\"quotas\":\"\"}",
		"{\"id\":\"key_1\",\"name\":\"n\",\"prefix\":\"p\",\"hash\":\"short\","
		"\"scopes\":1,\"rateLimit\":0,\"created\":1,\"expires\":0,\"enabled\":true,"
		"\"quotas\":\"\"}",
		"{\"id\":\"key_1\",\"name\":\"n\",\"prefix\":\"p\",\"hash\":\"" HASH64
		"\",\"scopes\":64,\"rateLimit\":0,\"created\":1,\"expires\":0,\"enabled\":true,"
		"\"quotas\":\"\"}",
		"{\"id\":\"key_1\",\"name\":\"n\",\"prefix\":\"p\",\"hash\":\"" HASH64
		"\",\"scopes\":1,\"rateLimit\":-1,\"created\":1,\"expires\":0,\"enabled\":true,"
		"\"quotas\":\"\"}",
		"{\"id\":\"key_1\",\"name\":\"n\",\"prefix\":\"p\",\"hash\":\"" HASH64
		"\",\"scopes\":1,\"rateLimit\":0,\"created\":1,\"expires\":0,\"enabled\":\"yes\","
		"\"quotas\":\"\"}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		json_t *j = json_loads(bad[i], 0, NULL);
		assert_non_null(j);
		assert_int_equal(keys_row_apply(other, j, &e), -EINVAL);
		json_decref(j);
	}
	int64_t n;
	assert_int_equal(keys_count(other, &n), 0);
	assert_int_equal(n, 0);
	json_decref(row);
	free(secret);
	sqlite3_close(other);
}

static void test_secure_equal(void **state)
{
	assert_true(auth_secure_equal("abc", "abc"));
	assert_false(auth_secure_equal("abc", "abd"));
	assert_false(auth_secure_equal("abc", "ab"));
	assert_false(auth_secure_equal("", "a"));
	assert_true(auth_secure_equal("", ""));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_create_and_lookup, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rotate_keeps_id_and_drops_old_secret, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_revoke_and_delete, setup, teardown),
		cmocka_unit_test(test_scopes_and_durations),
		cmocka_unit_test_setup_teardown(test_names_validated, setup, teardown),
		cmocka_unit_test(test_secure_equal),
		cmocka_unit_test_setup_teardown(test_rows_move_between_stores, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
