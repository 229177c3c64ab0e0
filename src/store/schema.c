/* The state database's one schema and its migrations: the only place that creates or changes
 * a table of sandboxd.db.
 *
 * The schema's version is the database's `PRAGMA user_version`. migrations[i] takes a
 * database at version i to version i + 1; store_migrate() runs those it lacks, in order, each
 * in a transaction of its own (BEGIN IMMEDIATE, so two processes opening it at once run each
 * step once), and refuses a database of a version newer than STORE_SCHEMA_VERSION.
 *
 * A new release that changes the schema appends a step here (never edits one that shipped)
 * and raises STORE_SCHEMA_VERSION; the unit tests (tests/unit/store/schema.c) build each
 * earlier schema from its CREATE statements and check that it arrives with its rows. */
#include "store/store.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "util/cleanup.h"

/* --- version 1 ------------------------------------------------------------------------- */

/* Every release before the schema had a version (user_version 0) made its tables itself, each
 * module with its own CREATE TABLE IF NOT EXISTS when it started, so a database of then holds
 * any subset of these five, as they were (they never changed, but for api_keys' quotas column,
 * which came later and was added by ALTER TABLE at start). */
static const char v1_tables[] =
	"CREATE TABLE IF NOT EXISTS sandboxes ("
	"  id TEXT PRIMARY KEY,"
	"  driver TEXT NOT NULL,"
	"  owner TEXT,"
	"  session_id TEXT,"
	"  record TEXT NOT NULL,"
	"  created INTEGER NOT NULL DEFAULT (strftime('%s','now'))"
	");"
	"CREATE TABLE IF NOT EXISTS api_keys ("
	"  id TEXT PRIMARY KEY,"
	"  name TEXT NOT NULL,"
	"  prefix TEXT NOT NULL,"
	"  hash TEXT NOT NULL UNIQUE,"
	"  scopes INTEGER NOT NULL,"
	"  rate_limit INTEGER NOT NULL DEFAULT 0,"
	"  created INTEGER NOT NULL,"
	"  last_used INTEGER NOT NULL DEFAULT 0,"
	"  expires INTEGER NOT NULL DEFAULT 0,"
	"  enabled INTEGER NOT NULL DEFAULT 1,"
	"  quotas TEXT NOT NULL DEFAULT ''"
	");"
	"CREATE TABLE IF NOT EXISTS hibernated_sessions (owner TEXT NOT NULL, id TEXT NOT NULL, "
	"  record TEXT NOT NULL, PRIMARY KEY (owner, id));"
	"CREATE TABLE IF NOT EXISTS snapshots (owner TEXT NOT NULL, name TEXT NOT NULL, "
	"  record TEXT NOT NULL, PRIMARY KEY (owner, name));"
	"CREATE TABLE IF NOT EXISTS volumes ("
	"  id TEXT PRIMARY KEY, owner TEXT NOT NULL, name TEXT NOT NULL, "
	"  size_bytes INTEGER NOT NULL, created_ms INTEGER NOT NULL, "
	"  state TEXT NOT NULL, UNIQUE(owner, name));";

/* The columns each table of version 1 must have: a table of that name without them is not one
 * of ours, and the database is refused rather than half used. */
static const struct {
	const char *table;
	const char *columns[12];
} v1_columns[] = {
	{ "sandboxes", { "id", "driver", "owner", "session_id", "record", "created" } },
	{ "api_keys",
	  { "id", "name", "prefix", "hash", "scopes", "rate_limit", "created", "last_used",
	    "expires", "enabled", "quotas" } },
	{ "hibernated_sessions", { "owner", "id", "record" } },
	{ "snapshots", { "owner", "name", "record" } },
	{ "volumes", { "id", "owner", "name", "size_bytes", "created_ms", "state" } },
};

static int has_column(sqlite3 *db, const char *table, const char *column, bool *ret,
		      struct err *err)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, "SELECT 1 FROM pragma_table_info(?) WHERE name = ?", -1, &st,
			       NULL) != SQLITE_OK)
		return err_set(err, EIO, "%s", sqlite3_errmsg(db));
	sqlite3_bind_text(st, 1, table, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, column, -1, SQLITE_STATIC);
	int rc = sqlite3_step(st);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE)
		return err_set(err, EIO, "%s", sqlite3_errmsg(db));
	*ret = rc == SQLITE_ROW;
	return 0;
}

static int to_v1(sqlite3 *db, struct err *err)
{
	/* The key table of before quotas: the column, with its default for the keys it has.
	 * (pragma_table_info has no rows for a table that does not exist.) */
	bool keys, quotas;
	int r = has_column(db, "api_keys", "id", &keys, err);
	if (r < 0 || (r = has_column(db, "api_keys", "quotas", &quotas, err)) < 0)
		return r;
	_cleanup_sqlite_free_ char *msg = NULL;
	if (keys && !quotas &&
	    sqlite3_exec(db, "ALTER TABLE api_keys ADD COLUMN quotas TEXT NOT NULL DEFAULT ''",
			 NULL, NULL, &msg) != SQLITE_OK)
		return err_set(err, EIO, "cannot add quotas to api_keys: %s", msg ? msg : "?");
	_cleanup_sqlite_free_ char *msg2 = NULL;
	if (sqlite3_exec(db, v1_tables, NULL, NULL, &msg2) != SQLITE_OK)
		return err_set(err, EIO, "cannot create the tables: %s", msg2 ? msg2 : "?");
	for (size_t i = 0; i < sizeof(v1_columns) / sizeof(v1_columns[0]); i++)
		for (const char *const *c = v1_columns[i].columns; *c; c++) {
			bool ok;
			if ((r = has_column(db, v1_columns[i].table, *c, &ok, err)) < 0)
				return r;
			if (!ok)
				return err_set(err, EPROTO,
					       "its table `%s` has no column `%s`: it is not a "
					       "database of sandboxd's",
					       v1_columns[i].table, *c);
		}
	return 0;
}

/* --- the steps, in order ---------------------------------------------------------------- */

static const struct {
	const char *what;
	int (*run)(sqlite3 *db, struct err *err);
} migrations[] = {
	{ "the tables of every module in one schema (api_keys with quotas)", to_v1 },
};

_Static_assert(sizeof(migrations) / sizeof(migrations[0]) == STORE_SCHEMA_VERSION,
	       "one migration per version");

int store_schema_version(sqlite3 *db, int *ret, struct err *err)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &st, NULL) != SQLITE_OK ||
	    sqlite3_step(st) != SQLITE_ROW)
		return err_set(err, EIO, "cannot read its schema version: %s", sqlite3_errmsg(db));
	*ret = sqlite3_column_int(st, 0);
	return 0;
}

static int refuse_newer(int v, struct err *err)
{
	return err_set(err, EPROTONOSUPPORT,
		       "its schema version is %d, newer than this release knows (%d): a newer "
		       "sandboxd wrote it; run that release (this one does not downgrade a "
		       "database)",
		       v, STORE_SCHEMA_VERSION);
}

int store_migrate(sqlite3 *db, struct err *err)
{
	for (;;) {
		_cleanup_sqlite_free_ char *msg = NULL;
		if (sqlite3_exec(db, "BEGIN IMMEDIATE", NULL, NULL, &msg) != SQLITE_OK)
			return err_set(err, EIO, "cannot begin its migration: %s",
				       msg ? msg : sqlite3_errmsg(db));
		int v;
		int r = store_schema_version(db, &v, err);
		if (r == 0 && v > STORE_SCHEMA_VERSION)
			r = refuse_newer(v, err);
		else if (r == 0 && v < 0)
			r = err_set(err, EPROTO, "its schema version %d is impossible", v);
		if (r < 0 || v == STORE_SCHEMA_VERSION) {
			sqlite3_exec(db, r < 0 ? "ROLLBACK" : "COMMIT", NULL, NULL, NULL);
			return r;
		}
		r = migrations[v].run(db, err);
		if (r < 0) {
			sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
			return err_wrap(err, "migrating its schema from version %d to %d (%s)", v,
					v + 1, migrations[v].what);
		}
		char sql[48];
		snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", v + 1);
		_cleanup_sqlite_free_ char *msg2 = NULL;
		if (sqlite3_exec(db, sql, NULL, NULL, &msg2) != SQLITE_OK ||
		    sqlite3_exec(db, "COMMIT", NULL, NULL, &msg2) != SQLITE_OK) {
			r = err_set(err, EIO, "migrating its schema to version %d: %s", v + 1,
				    msg2 ? msg2 : sqlite3_errmsg(db));
			sqlite3_exec(db, "ROLLBACK", NULL, NULL, NULL);
			return r;
		}
	}
}
