/* store: the daemon's SQLite database (WAL) under SANDBOX_STATE_DIR, with one versioned
 * schema (schema.c).
 *
 * It remembers every sandbox the daemon created, so that a restarted daemon removes
 * exactly what it had made and nothing else. Loop thread only; every statement is short. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <sqlite3.h>

#include "util/err.h"

/* Scope-bound SQLite handles (util/cleanup.h): a statement finalized, a message of
 * sqlite3_exec() freed. Both functions accept NULL. */
static inline void store_finalizep(sqlite3_stmt **st)
{
	sqlite3_finalize(*st);
}

static inline void store_sqlite_freep(char **msg)
{
	sqlite3_free(*msg);
}

#define _cleanup_stmt_        __attribute__((cleanup(store_finalizep)))
#define _cleanup_sqlite_free_ __attribute__((cleanup(store_sqlite_freep)))

/* Opens SANDBOX_STATE_DIR/sandboxd.db and brings its schema to STORE_SCHEMA_VERSION
 * (store_migrate). Refused, with the reason, when the file is not a database or when its
 * schema is newer than this release's. */
int store_open(const char *state_dir, struct err *err);

/* The schema (src/store/schema.c): one for the whole database, its version in `PRAGMA
 * user_version`. No module creates or changes a table itself. */
#define STORE_SCHEMA_VERSION 1
/* Runs the migrations from the database's version to STORE_SCHEMA_VERSION, each step in a
 * transaction of its own; EPROTONOSUPPORT (the message naming both versions) for a database
 * newer than this release, EPROTO for one whose tables are not ours. */
int store_migrate(sqlite3 *db, struct err *err);
/* The database's schema version (its user_version). */
int store_schema_version(sqlite3 *db, int *ret, struct err *err);
/* Makes the state directory (0700, also when it exists) and its database files (0600, the
 * database created empty when missing): store_open() and store_claim_dir() do it. */
int store_prepare_dir(const char *state_dir, struct err *err);
void store_close(void);
/* Claims the state directory for this process: an exclusive lock on its `sandboxd.lock`
 * (an open file description lock, so no child inherits it past its descriptors being closed,
 * and the kernel drops it when the process dies, however it dies), holding the claimant's pid.
 * EBUSY, saying "another sandboxd (pid N) uses this state directory", while another process
 * holds it. The lock stays for the life of the process. The daemon takes it first thing;
 * `sandbox keys` and `sandboxd --init-admin-key` take it before they open the database, so
 * that none opens it beside a running daemon (the CLI goes through the daemon's API then). */
int store_claim_dir(const char *state_dir, struct err *err);
/* Writes the claimant's address (a URL its clients reach it at: unix:/path or http://...)
 * into the claim's lock file, on the line after its pid: how `sandbox keys` finds the daemon
 * that holds the state directory. */
int store_claim_note_url(const char *url, struct err *err);
/* The address a claimant of dir noted (caller frees), or NULL when none is readable. */
char *store_claimant_url(const char *dir);
/* The open database (for modules that keep their own tables in the schema). */
sqlite3 *store_db(void);

int store_sandbox_put(const char *sandbox_id, const char *driver, const char *owner,
		      const char *session_id, json_t *record, struct err *err);
/* store_sandbox_put() writes at once or fails (EAGAIN while another process holds the
 * database's write lock): for a record that must exist before its sandbox does. The event
 * loop never waits more than a few milliseconds for that lock. store_sandbox_update() and
 * store_sandbox_delete() instead queue a write the lock stops, in order, and retry it from a
 * timer (once store_set_event_base() gave one; store_close() makes what is left, waiting for
 * the lock): for the records of sandboxes that exist, whose writes need not hold up the
 * request that asks for them. */
int store_sandbox_update(const char *sandbox_id, const char *driver, const char *owner,
			 const char *session_id, json_t *record, struct err *err);
int store_sandbox_delete(const char *sandbox_id);
struct event_base;
void store_set_event_base(struct event_base *base);
/* Writes waiting in the queue. */
size_t store_queued_writes(void);
typedef void (*store_sandbox_fn)(const char *sandbox_id, const char *driver, json_t *record,
				 void *arg);
int store_sandbox_foreach(store_sandbox_fn fn, void *arg, struct err *err);
/* Tables of records owned by a key: `table` (a name of ours, never a client's, and a table of
 * the schema) with columns owner, `key` (the record's name among the owner's) and record
 * (JSON text). EROFS when the store is not open or does not write. */
struct store_records {
	const char *table;
	const char *key;
};
/* Writes the owner's record `name` (replace: over one of that name; else EROFS when there
 * is one). */
int store_records_put(const struct store_records *t, const char *owner, const char *name,
		      const json_t *record, bool replace, struct err *err);
/* Deletes it; logs what it cannot. */
void store_records_delete(const struct store_records *t, const char *owner, const char *name);
/* Calls fn for every row (owner, name, the record parsed or NULL when it is not JSON). */
typedef void (*store_records_fn)(const char *owner, const char *name, json_t *record, void *arg);
int store_records_foreach(const struct store_records *t, store_records_fn fn, void *arg,
			  struct err *err);

/* Checks that the state directory accepts writes (for /ready). */
int store_check_writable(struct err *err);
