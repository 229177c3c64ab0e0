/* Unit tests of src/store/store.c's writes while another connection holds the database's
 * write lock: the loop does not wait for it; a sandbox's first record fails at once (EAGAIN),
 * later ones and deletions are queued in order and made from a timer once the lock goes, or
 * at store_close(). */
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
#include <event2/event.h>

#include "store/store.h"
#include "util/fs.h"

static char dir[64];

static int setup(void **state)
{
	snprintf(dir, sizeof(dir), "/tmp/test-store-queue-XXXXXX");
	assert_non_null(mkdtemp(dir));
	return 0;
}

static int teardown(void **state)
{
	store_close();
	fs_rm_rf(dir, NULL);
	return 0;
}

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1000 + (double)ts.tv_nsec / 1e6;
}

/* Another process's lock: a connection of its own in a write transaction. */
static sqlite3 *take_lock(void)
{
	char path[128];
	snprintf(path, sizeof(path), "%s/sandboxd.db", dir);
	sqlite3 *other;
	assert_int_equal(sqlite3_open(path, &other), SQLITE_OK);
	assert_int_equal(sqlite3_exec(other, "BEGIN IMMEDIATE", NULL, NULL, NULL), SQLITE_OK);
	return other;
}

static int rows(const char *id)
{
	sqlite3_stmt *st;
	assert_int_equal(sqlite3_prepare_v2(store_db(),
					    "SELECT count(*) FROM sandboxes WHERE id = ?", -1, &st,
					    NULL),
			 SQLITE_OK);
	sqlite3_bind_text(st, 1, id, -1, SQLITE_STATIC);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	int n = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	return n;
}

static void test_locked_writes_are_queued_then_made(void **state)
{
	struct event_base *base = event_base_new();
	struct err e;
	assert_int_equal(store_open(dir, &e), 0);
	store_set_event_base(base);
	json_t *rec = json_pack("{s:s}", "state", "creating");
	assert_int_equal(store_sandbox_put("sb_a", "jail", "o", "s", rec, &e), 0);
	assert_int_equal(store_sandbox_put("sb_b", "jail", "o", "s", rec, &e), 0);
	sqlite3 *other = take_lock();
	double t0 = now_ms();
	/* A first record cannot wait: refused at once. */
	assert_int_equal(store_sandbox_put("sb_new", "jail", "o", "s", rec, &e), -EAGAIN);
	/* Later writes are queued, in order: sb_a updated then deleted, sb_b updated. */
	json_t *up = json_pack("{s:i}", "pid", 42);
	assert_int_equal(store_sandbox_update("sb_a", "jail", "o", "s", up, &e), 0);
	assert_int_equal(store_sandbox_delete("sb_a"), 0);
	assert_int_equal(store_sandbox_update("sb_b", "jail", "o", "s", up, &e), 0);
	assert_int_equal(store_queued_writes(), 3);
	double waited = now_ms() - t0;
	if (waited > 500)
		fail_msg("the writes waited %.0f ms for the lock", waited);
	/* Tried again while the lock is held: still queued. */
	struct timeval tv = { .tv_usec = 250 * 1000 };
	event_base_loopexit(base, &tv);
	event_base_dispatch(base);
	assert_int_equal(store_queued_writes(), 3);
	assert_int_equal(sqlite3_exec(other, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(other);
	event_base_loopexit(base, &tv);
	event_base_dispatch(base);
	assert_int_equal(store_queued_writes(), 0);
	assert_int_equal(rows("sb_a"), 0);
	assert_int_equal(rows("sb_b"), 1);
	assert_int_equal(rows("sb_new"), 0);
	/* With nothing queued, writes go straight in. */
	assert_int_equal(store_sandbox_delete("sb_b"), 0);
	assert_int_equal(rows("sb_b"), 0);
	json_decref(rec);
	json_decref(up);
	store_close();
	event_base_free(base);
}

/* What is still queued when the store closes is made then (the daemon stopping). */
static void test_close_makes_what_is_queued(void **state)
{
	struct event_base *base = event_base_new();
	struct err e;
	assert_int_equal(store_open(dir, &e), 0);
	store_set_event_base(base);
	json_t *rec = json_pack("{}");
	assert_int_equal(store_sandbox_put("sb_c", "jail", NULL, NULL, rec, &e), 0);
	sqlite3 *other = take_lock();
	assert_int_equal(store_sandbox_delete("sb_c"), 0);
	assert_int_equal(store_queued_writes(), 1);
	assert_int_equal(sqlite3_exec(other, "ROLLBACK", NULL, NULL, NULL), SQLITE_OK);
	sqlite3_close(other);
	store_close();
	assert_int_equal(store_open(dir, &e), 0);
	assert_int_equal(rows("sb_c"), 0);
	json_decref(rec);
	store_close();
	event_base_free(base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_locked_writes_are_queued_then_made, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_close_makes_what_is_queued, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
