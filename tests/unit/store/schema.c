/* Unit tests of src/store/schema.c through store_open(): a fresh database gets the whole
 * schema at its version; a database of every earlier release (built here from that release's
 * CREATE statements, with rows) arrives at the current version with its rows; a database of a
 * newer release, a file that is not a database, a damaged one and one whose tables are not
 * ours are refused, with the reason, and left as they were. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "auth/keys.h"
#include "store/store.h"
#include "util/fs.h"

/* --- the schemas of earlier releases, as their modules created them ------------------ */

/* src/store/store.c, from the first release on. */
#define OLD_SANDBOXES                                                                         \
	"CREATE TABLE IF NOT EXISTS sandboxes (  id TEXT PRIMARY KEY,  driver TEXT NOT NULL," \
	"  owner TEXT,  session_id TEXT,  record TEXT NOT NULL,  created INTEGER NOT NULL "   \
	"DEFAULT (strftime('%s','now')));"
/* src/auth/keys.c before per-key quotas (b975dce .. 5f8900f). */
#define OLD_KEYS_NO_QUOTAS                                                                 \
	"CREATE TABLE IF NOT EXISTS api_keys (  id TEXT PRIMARY KEY,  name TEXT NOT NULL," \
	"  prefix TEXT NOT NULL,  hash TEXT NOT NULL UNIQUE,  scopes INTEGER NOT NULL,"    \
	"  rate_limit INTEGER NOT NULL DEFAULT 0,  created INTEGER NOT NULL,"              \
	"  last_used INTEGER NOT NULL DEFAULT 0,  expires INTEGER NOT NULL DEFAULT 0,"     \
	"  enabled INTEGER NOT NULL DEFAULT 1);"
/* src/auth/keys.c with quotas (5f8900f on). */
#define OLD_KEYS_QUOTAS                                                                    \
	"CREATE TABLE IF NOT EXISTS api_keys (  id TEXT PRIMARY KEY,  name TEXT NOT NULL," \
	"  prefix TEXT NOT NULL,  hash TEXT NOT NULL UNIQUE,  scopes INTEGER NOT NULL,"    \
	"  rate_limit INTEGER NOT NULL DEFAULT 0,  created INTEGER NOT NULL,"              \
	"  last_used INTEGER NOT NULL DEFAULT 0,  expires INTEGER NOT NULL DEFAULT 0,"     \
	"  enabled INTEGER NOT NULL DEFAULT 1,  quotas TEXT NOT NULL DEFAULT '');"
/* The quotas column as an older table got it at start (keys_init's ALTER TABLE). */
#define OLD_KEYS_ALTERED \
	OLD_KEYS_NO_QUOTAS "ALTER TABLE api_keys ADD COLUMN quotas TEXT NOT NULL DEFAULT '';"
/* src/session/hibernate.c (ea864ad on). */
#define OLD_HIBERNATED                                                                      \
	"CREATE TABLE IF NOT EXISTS hibernated_sessions (owner TEXT NOT NULL, id TEXT NOT " \
	"NULL, record TEXT NOT NULL, PRIMARY KEY (owner, id));"
/* src/session/snapshot.c (55120a1 on). */
#define OLD_SNAPSHOTS                                                                     \
	"CREATE TABLE IF NOT EXISTS snapshots (owner TEXT NOT NULL, name TEXT NOT NULL, " \
	"record TEXT NOT NULL, PRIMARY KEY (owner, name));"
/* src/session/volume.c (f21c4d6 on). */
#define OLD_VOLUMES                                                                           \
	"CREATE TABLE IF NOT EXISTS volumes (id TEXT PRIMARY KEY, owner TEXT NOT NULL, name " \
	"TEXT NOT NULL, size_bytes INTEGER NOT NULL, created_ms INTEGER NOT NULL, state "     \
	"TEXT NOT NULL, UNIQUE(owner, name));"

#define ROWS_SANDBOXES                                                         \
	"INSERT INTO sandboxes(id, driver, owner, session_id, record) VALUES " \
	"('sb_1', 'jail', 'key_a', 's_1', '{\"pid\":42}'), ('sb_2', 'qemu', NULL, NULL, '{}');"
#define ROWS_KEYS_NO_QUOTAS                                                                      \
	"INSERT INTO api_keys VALUES ('key_a', 'alice', 'sk_test_abcd', "                        \
	"'0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef', 3, 60, 1700000000," \
	" 1700000100, 0, 1), ('key_b', 'bob', 'sk_test_efgh', "                                  \
	"'1123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef', 1, 0, 1700000001,"  \
	" 0, 0, 0);"
#define ROWS_KEYS_QUOTAS                                                                         \
	"INSERT INTO api_keys VALUES ('key_a', 'alice', 'sk_test_abcd', "                        \
	"'0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef', 3, 60, 1700000000," \
	" 1700000100, 0, 1, '{\"sessions\":7}'), ('key_b', 'bob', 'sk_test_efgh', "              \
	"'1123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef', 1, 0, 1700000001,"  \
	" 0, 0, 0, '');"
#define ROWS_HIBERNATED \
	"INSERT INTO hibernated_sessions VALUES ('key_a', 's_9', '{\"template\":\"base\"}');"
#define ROWS_SNAPSHOTS "INSERT INTO snapshots VALUES ('key_a', 'snap1', '{\"bytes\":1}');"
#define ROWS_VOLUMES                                                                     \
	"INSERT INTO volumes VALUES ('vol_1', 'key_a', 'data', 1048576, 1700000000000, " \
	"'ready');"

/* --- helpers ----------------------------------------------------------------------------- */

struct fixture {
	char dir[64];
	char db[128];
};

static int setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	snprintf(f->dir, sizeof(f->dir), "/tmp/test-store-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(f->db, sizeof(f->db), "%s/sandboxd.db", f->dir);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	store_close();
	fs_rm_rf(f->dir, NULL);
	free(f);
	return 0;
}

/* Makes the database file of an earlier release: its statements, in WAL as the daemon had
 * it, then closed. */
static void make_db(const struct fixture *f, const char *sql)
{
	sqlite3 *db;
	assert_int_equal(sqlite3_open(f->db, &db), SQLITE_OK);
	char *msg = NULL;
	int rc = sqlite3_exec(db, "PRAGMA journal_mode=WAL;", NULL, NULL, &msg);
	if (rc == SQLITE_OK)
		rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
	if (rc != SQLITE_OK)
		fail_msg("%s: %s", sql, msg);
	sqlite3_close(db);
}

static int version_of(sqlite3 *db)
{
	sqlite3_stmt *st = NULL;
	assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	int v = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	return v;
}

/* The version of the file on disk, read by a connection of its own. */
static int file_version(const struct fixture *f)
{
	sqlite3 *db;
	assert_int_equal(sqlite3_open_v2(f->db, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
	int v = version_of(db);
	sqlite3_close(db);
	return v;
}

static int64_t count(const char *table)
{
	char sql[96];
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s", table);
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(store_db(), sql, -1, &st, NULL) != SQLITE_OK)
		fail_msg("%s: %s", sql, sqlite3_errmsg(store_db()));
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	int64_t n = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return n;
}

static char *text_of(const char *sql)
{
	sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(store_db(), sql, -1, &st, NULL) != SQLITE_OK)
		fail_msg("%s: %s", sql, sqlite3_errmsg(store_db()));
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	const char *t = (const char *)sqlite3_column_text(st, 0);
	char *r = strdup(t ? t : "(null)");
	sqlite3_finalize(st);
	return r;
}

static void assert_text(const char *sql, const char *want)
{
	char *got = text_of(sql);
	if (strcmp(got, want) != 0)
		fail_msg("%s: got `%s`, want `%s`", sql, got, want);
	free(got);
}

static void open_ok(const struct fixture *f)
{
	struct err e = { 0 };
	if (store_open(f->dir, &e) < 0)
		fail_msg("store_open: %s", e.msg);
}

/* Every table of the schema is there and usable by its module, with no module having made
 * one: what each module writes at run time. */
static void assert_current_schema(void)
{
	sqlite3 *db = store_db();
	assert_non_null(db);
	assert_int_equal(version_of(db), STORE_SCHEMA_VERSION);
	static const char *const tables[] = { "sandboxes", "api_keys", "hibernated_sessions",
					      "snapshots", "volumes" };
	for (size_t i = 0; i < sizeof(tables) / sizeof(*tables); i++)
		assert_true(count(tables[i]) >= 0);
	/* api_keys has its quotas column: a key is made and read back by keys.c. */
	struct err e;
	struct key_info k;
	char *secret = NULL;
	if (keys_create(db, "sk_test_", "probe", KEYS_SCOPE_EXEC, 0, 0, &k, &secret, &e) < 0)
		fail_msg("keys_create: %s", e.msg);
	free(secret);
	assert_int_equal(keys_delete(db, k.id, &e), 0);
	/* The record tables take a record without being made first. */
	static const struct store_records snaps = { .table = "snapshots", .key = "name" };
	json_t *rec = json_pack("{s:i}", "bytes", 2);
	if (store_records_put(&snaps, "probe_owner", "probe", rec, false, &e) < 0)
		fail_msg("store_records_put: %s", e.msg);
	json_decref(rec);
	store_records_delete(&snaps, "probe_owner", "probe");
}

/* --- the tests ------------------------------------------------------------------------- */

static void test_fresh_database(void **state)
{
	struct fixture *f = *state;
	open_ok(f);
	assert_current_schema();
	assert_int_equal(count("api_keys"), 0);
	store_close();
	assert_int_equal(file_version(f), STORE_SCHEMA_VERSION);
	/* Opened again: nothing to do. */
	open_ok(f);
	assert_current_schema();
}

/* The rows an earlier database had, after its migration. */
static void assert_sandboxes_kept(void)
{
	assert_int_equal(count("sandboxes"), 2);
	assert_text("SELECT record FROM sandboxes WHERE id = 'sb_1'", "{\"pid\":42}");
	assert_text("SELECT driver || ':' || ifnull(owner, '-') FROM sandboxes WHERE id = 'sb_2'",
		    "qemu:-");
}

static void assert_keys_kept(const char *quotas_of_a)
{
	struct err e;
	struct key_info k;
	assert_int_equal(count("api_keys"), 2);
	assert_int_equal(keys_get(store_db(), "key_a", &k, &e), 0);
	assert_string_equal(k.name, "alice");
	assert_int_equal(k.scopes, 3);
	assert_int_equal(k.rate_limit, 60);
	assert_int_equal(k.last_used, 1700000100);
	assert_true(k.enabled);
	assert_int_equal(keys_get(store_db(), "key_b", &k, &e), 0);
	assert_false(k.enabled);
	char sql[96];
	snprintf(sql, sizeof(sql), "SELECT quotas FROM api_keys WHERE id = 'key_a'");
	assert_text(sql, quotas_of_a);
	/* A key's secret still finds it: the hash came across. */
	assert_text("SELECT id FROM api_keys WHERE hash = "
		    "'1123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef'",
		    "key_b");
}

static void assert_sessions_kept(void)
{
	assert_int_equal(count("hibernated_sessions"), 1);
	assert_text("SELECT record FROM hibernated_sessions WHERE id = 's_9'",
		    "{\"template\":\"base\"}");
	assert_int_equal(count("snapshots"), 1);
	assert_text("SELECT record FROM snapshots WHERE name = 'snap1'", "{\"bytes\":1}");
	assert_int_equal(count("volumes"), 1);
	assert_text("SELECT owner || '/' || name || '/' || size_bytes || '/' || state FROM volumes",
		    "key_a/data/1048576/ready");
}

/* The first release: the daemon's sandboxes only. */
static void test_from_first_release(void **state)
{
	struct fixture *f = *state;
	make_db(f, OLD_SANDBOXES ROWS_SANDBOXES);
	open_ok(f);
	assert_current_schema();
	assert_sandboxes_kept();
	assert_int_equal(count("api_keys"), 0);
}

/* Keys before quotas, as a daemon of then left them. */
static void test_from_keys_without_quotas(void **state)
{
	struct fixture *f = *state;
	make_db(f, OLD_SANDBOXES ROWS_SANDBOXES OLD_KEYS_NO_QUOTAS ROWS_KEYS_NO_QUOTAS);
	open_ok(f);
	assert_current_schema();
	assert_sandboxes_kept();
	assert_keys_kept("");
}

/* Only the key table, as `sandbox keys create` made it before the daemon's first start (the
 * CLI's opening made no other table), before quotas. */
static void test_from_cli_key_store(void **state)
{
	struct fixture *f = *state;
	make_db(f, OLD_KEYS_NO_QUOTAS ROWS_KEYS_NO_QUOTAS);
	open_ok(f);
	assert_current_schema();
	assert_keys_kept("");
	assert_int_equal(count("sandboxes"), 0);
}

/* The key table whose quotas column an ALTER TABLE added at a later start. */
static void test_from_altered_keys(void **state)
{
	struct fixture *f = *state;
	make_db(f, OLD_SANDBOXES ROWS_SANDBOXES OLD_KEYS_ALTERED ROWS_KEYS_QUOTAS OLD_HIBERNATED
			   ROWS_HIBERNATED);
	open_ok(f);
	assert_current_schema();
	assert_sandboxes_kept();
	assert_keys_kept("{\"sessions\":7}");
}

/* The last release before the schema had a version: all five tables, quotas in api_keys. */
static void test_from_last_unversioned_release(void **state)
{
	struct fixture *f = *state;
	make_db(f, OLD_SANDBOXES ROWS_SANDBOXES OLD_KEYS_QUOTAS ROWS_KEYS_QUOTAS OLD_HIBERNATED
			   ROWS_HIBERNATED OLD_SNAPSHOTS ROWS_SNAPSHOTS OLD_VOLUMES ROWS_VOLUMES);
	open_ok(f);
	assert_current_schema();
	assert_sandboxes_kept();
	assert_keys_kept("{\"sessions\":7}");
	assert_sessions_kept();
	store_close();
	assert_int_equal(file_version(f), STORE_SCHEMA_VERSION);
}

/* A release whose tables came in another order (volumes and snapshots before any key). */
static void test_from_sessions_without_keys(void **state)
{
	struct fixture *f = *state;
	make_db(f, OLD_SANDBOXES ROWS_SANDBOXES OLD_HIBERNATED ROWS_HIBERNATED OLD_SNAPSHOTS
			   ROWS_SNAPSHOTS OLD_VOLUMES ROWS_VOLUMES);
	open_ok(f);
	assert_current_schema();
	assert_sessions_kept();
}

/* A newer release's database: refused, naming its version, and left at it. */
static void test_newer_version_refused(void **state)
{
	struct fixture *f = *state;
	char sql[2048];
	snprintf(sql, sizeof(sql), "%s%sPRAGMA user_version = %d;", OLD_KEYS_QUOTAS,
		 ROWS_KEYS_QUOTAS, STORE_SCHEMA_VERSION + 1);
	make_db(f, sql);
	struct err e = { 0 };
	assert_int_equal(store_open(f->dir, &e), -EPROTONOSUPPORT);
	assert_null(store_db());
	char want[64];
	snprintf(want, sizeof(want), "schema version is %d", STORE_SCHEMA_VERSION + 1);
	if (!strstr(e.msg, want) || !strstr(e.msg, f->db))
		fail_msg("the message does not name the version and the file: %s", e.msg);
	assert_int_equal(file_version(f), STORE_SCHEMA_VERSION + 1);
}

/* A file that is not a database: refused with the reason, not taken over. */
static void test_garbage_refused(void **state)
{
	struct fixture *f = *state;
	int fd = open(f->db, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	assert_true(fd >= 0);
	char junk[8192];
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (char)(i * 131 + 7);
	assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
	close(fd);
	struct err e = { 0 };
	assert_true(store_open(f->dir, &e) < 0);
	assert_null(store_db());
	if (!strstr(e.msg, "not a database"))
		fail_msg("unclear: %s", e.msg);
	/* Nothing was written over it. */
	char back[8192];
	fd = open(f->db, O_RDONLY);
	assert_int_equal(read(fd, back, sizeof(back)), (ssize_t)sizeof(back));
	close(fd);
	assert_memory_equal(back, junk, sizeof(junk));
}

/* A database whose schema page was damaged: refused, not crashed on. */
static void test_damaged_refused(void **state)
{
	struct fixture *f = *state;
	sqlite3 *db;
	assert_int_equal(sqlite3_open(f->db, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, OLD_KEYS_QUOTAS ROWS_KEYS_QUOTAS, NULL, NULL, NULL),
			 SQLITE_OK);
	sqlite3_close(db);
	/* The first page after its 100-byte header is the schema's. */
	int fd = open(f->db, O_WRONLY);
	assert_true(fd >= 0);
	char junk[400];
	memset(junk, 0xa5, sizeof(junk));
	assert_int_equal(pwrite(fd, junk, sizeof(junk), 100), (ssize_t)sizeof(junk));
	close(fd);
	struct err e = { 0 };
	assert_true(store_open(f->dir, &e) < 0);
	assert_null(store_db());
	assert_true(e.msg[0] != '\0');
	assert_non_null(strstr(e.msg, f->db));
}

/* A database of someone else's with a table of one of our names: refused, and the migration
 * rolled back (its version still 0, no table of ours added). */
static void test_foreign_table_refused(void **state)
{
	struct fixture *f = *state;
	make_db(f, "CREATE TABLE sandboxes (name TEXT, colour TEXT);"
		   "INSERT INTO sandboxes VALUES ('a', 'red');");
	struct err e = { 0 };
	assert_int_equal(store_open(f->dir, &e), -EPROTO);
	assert_null(store_db());
	if (!strstr(e.msg, "sandboxes") || !strstr(e.msg, "version 0 to 1"))
		fail_msg("unclear: %s", e.msg);
	assert_int_equal(file_version(f), 0);
	sqlite3 *db;
	assert_int_equal(sqlite3_open(f->db, &db), SQLITE_OK);
	sqlite3_stmt *st;
	assert_int_equal(
		sqlite3_prepare_v2(db, "SELECT count(*) FROM sqlite_schema", -1, &st, NULL),
		SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	assert_int_equal(sqlite3_column_int(st, 0), 1);
	sqlite3_finalize(st);
	sqlite3_close(db);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_fresh_database, setup, teardown),
		cmocka_unit_test_setup_teardown(test_from_first_release, setup, teardown),
		cmocka_unit_test_setup_teardown(test_from_keys_without_quotas, setup, teardown),
		cmocka_unit_test_setup_teardown(test_from_cli_key_store, setup, teardown),
		cmocka_unit_test_setup_teardown(test_from_altered_keys, setup, teardown),
		cmocka_unit_test_setup_teardown(test_from_last_unversioned_release, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_from_sessions_without_keys, setup, teardown),
		cmocka_unit_test_setup_teardown(test_newer_version_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_garbage_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_damaged_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_foreign_table_refused, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
