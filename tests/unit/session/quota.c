/* Tests of src/session/quota.c: the one admission function for what callers hold at once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "auth/keys.h"
#include "session/quota.h"
#include "store/store.h"

static struct config cfg;

static int setup(void **state)
{
	memset(&cfg, 0, sizeof(cfg));
	cfg.max_sessions = 4;
	cfg.max_commands = 100;
	cfg.mcp_max_sessions = 10;
	cfg.max_file_ops = 6;
	cfg.key_max_sessions = 2;
	cfg.key_max_commands = 0; /* no default quota */
	cfg.key_max_mcp_sessions = 5;
	cfg.key_max_file_ops = 3;
	cfg.key_max_memory_bytes = 1ull << 30;
	cfg.key_max_disk_bytes = 0; /* no default quota */
	quota_init(&cfg);
	return 0;
}

static int teardown(void **state)
{
	quota_shutdown();
	return 0;
}

static struct quota_set defaults(void)
{
	struct quota_set q;
	quota_set_default(&q);
	return q;
}

static void test_default_quota_then_cap(void **state)
{
	struct quota_set q = defaults();
	quota_note_key("a", false, &q);
	quota_note_key("b", false, &q);
	struct err e;
	assert_int_equal(quota_admit("a", QUOTA_SESSIONS, &e), 0);
	assert_int_equal(quota_admit("a", QUOTA_SESSIONS, &e), 0);
	assert_int_equal(quota_admit("a", QUOTA_SESSIONS, &e), -EAGAIN);
	assert_non_null(strstr(e.msg, "Quota `sessions` reached"));
	assert_non_null(strstr(e.msg, "2 of its 2"));
	assert_non_null(strstr(e.msg, "SANDBOX_KEY_MAX_SESSIONS"));
	assert_int_equal(quota_admit("b", QUOTA_SESSIONS, &e), 0);
	/* Without authentication only the cap applies: the fourth is the last. */
	assert_int_equal(quota_admit("", QUOTA_SESSIONS, &e), 0);
	assert_int_equal(quota_admit("b", QUOTA_SESSIONS, &e), -ENOBUFS);
	assert_non_null(strstr(e.msg, "limit of 4 sessions"));
	assert_int_equal(quota_used_total(QUOTA_SESSIONS), 4);
	assert_int_equal(quota_used("a", QUOTA_SESSIONS), 2);
	/* A refusal took nothing; a release makes room. */
	quota_release("a", QUOTA_SESSIONS);
	assert_int_equal(quota_admit("b", QUOTA_SESSIONS, &e), 0);
	assert_int_equal(quota_used("b", QUOTA_SESSIONS), 2);
	assert_int_equal(quota_admit("b", QUOTA_SESSIONS, &e), -ENOBUFS);
}

static void test_admin_has_no_default_but_an_override_binds(void **state)
{
	struct quota_set q = defaults();
	quota_note_key("adm", true, &q);
	struct err e;
	for (int i = 0; i < 6; i++)
		assert_int_equal(quota_admit("adm", QUOTA_FILE_OPS, &e), 0);
	assert_int_equal(quota_admit("adm", QUOTA_FILE_OPS, &e), -ENOBUFS); /* the cap */
	for (int i = 0; i < 6; i++)
		quota_release("adm", QUOTA_FILE_OPS);
	q.v[QUOTA_FILE_OPS] = 1;
	quota_note_key("adm", true, &q);
	assert_int_equal(quota_admit("adm", QUOTA_FILE_OPS, &e), 0);
	assert_int_equal(quota_admit("adm", QUOTA_FILE_OPS, &e), -EAGAIN);
	assert_int_equal(quota_limit("adm", QUOTA_FILE_OPS), 1);
	assert_int_equal(quota_limit("adm", QUOTA_SESSIONS), 0);
}

static void test_zero_means_none_of_its_own(void **state)
{
	struct quota_set q = defaults();
	q.v[QUOTA_MCP_SESSIONS] = QUOTA_UNLIMITED;
	quota_note_key("k", false, &q);
	struct err e;
	for (int i = 0; i < 10; i++)
		assert_int_equal(quota_admit("k", QUOTA_MCP_SESSIONS, &e), 0);
	assert_int_equal(quota_admit("k", QUOTA_MCP_SESSIONS, &e), -ENOBUFS);
	/* No default for commands: only the cap of 100. */
	for (int i = 0; i < 100; i++)
		assert_int_equal(quota_admit("k", QUOTA_COMMANDS, &e), 0);
	assert_int_equal(quota_admit("k", QUOTA_COMMANDS, &e), -ENOBUFS);
}

static void test_unknown_owner_gets_the_default(void **state)
{
	struct err e;
	/* A session restored before its key's next request: a key like any other. */
	assert_int_equal(quota_admit("never-seen", QUOTA_FILE_OPS, &e), 0);
	assert_int_equal(quota_admit("never-seen", QUOTA_FILE_OPS, &e), 0);
	assert_int_equal(quota_admit("never-seen", QUOTA_FILE_OPS, &e), 0);
	assert_int_equal(quota_admit("never-seen", QUOTA_FILE_OPS, &e), -EAGAIN);
	/* Releasing more than was taken, or for an owner never seen, changes nothing. */
	quota_release("nobody", QUOTA_FILE_OPS);
	for (int i = 0; i < 5; i++)
		quota_release("never-seen", QUOTA_FILE_OPS);
	assert_int_equal(quota_used("never-seen", QUOTA_FILE_OPS), 0);
}

static void test_caps_follow_the_configuration(void **state)
{
	struct err e;
	cfg.max_sessions = 1;
	assert_int_equal(quota_admit("", QUOTA_SESSIONS, &e), 0);
	assert_int_equal(quota_admit("", QUOTA_SESSIONS, &e), -ENOBUFS);
	cfg.max_sessions = 2;
	assert_int_equal(quota_admit("", QUOTA_SESSIONS, &e), 0);
}

static void test_many_owners_are_bounded(void **state)
{
	struct quota_set q = defaults();
	struct err e;
	char id[32];
	/* Far more owners than the table keeps: those holding nothing are forgotten, those
	 * holding something never are. */
	assert_int_equal(quota_admit("holder", QUOTA_SESSIONS, &e), 0);
	for (int i = 0; i < 70000; i++) {
		snprintf(id, sizeof(id), "key_%d", i);
		quota_note_key(id, false, &q);
	}
	assert_int_equal(quota_used("holder", QUOTA_SESSIONS), 1);
	quota_release("holder", QUOTA_SESSIONS);
	assert_int_equal(quota_used_total(QUOTA_SESSIONS), 0);
}

/* The byte kinds: amounts at once, all or nothing, no server cap; the default binds, a
 * key's own quota overrides it, and what was held before is held again whatever the quota. */
static void test_bytes_are_amounts(void **state)
{
	struct quota_set q = defaults();
	quota_note_key("a", false, &q);
	struct err e;
	uint64_t mib = 1ull << 20;
	assert_int_equal(quota_admit_n("a", QUOTA_MEMORY, 768 * mib, &e), 0);
	assert_int_equal(quota_admit_n("a", QUOTA_MEMORY, 512 * mib, &e), -EAGAIN);
	assert_non_null(strstr(e.msg, "Quota `memoryBytes` reached"));
	assert_non_null(strstr(e.msg, "768 MiB of its 1 GiB"));
	assert_non_null(strstr(e.msg, "asks 512 MiB more"));
	assert_non_null(strstr(e.msg, "SANDBOX_KEY_MAX_MEMORY_BYTES"));
	/* A refusal took nothing: what is left fits exactly. */
	assert_int_equal(quota_used("a", QUOTA_MEMORY), 768 * mib);
	assert_int_equal(quota_admit_n("a", QUOTA_MEMORY, 256 * mib, &e), 0);
	assert_int_equal(quota_admit_n("a", QUOTA_MEMORY, 1, &e), -EAGAIN);
	/* Nothing asked is never refused; near the top of uint64 nothing wraps. */
	assert_int_equal(quota_admit_n("a", QUOTA_MEMORY, 0, &e), 0);
	assert_int_equal(quota_admit_n("a", QUOTA_MEMORY, UINT64_MAX, &e), -EAGAIN);
	quota_release_n("a", QUOTA_MEMORY, 1ull << 30);
	assert_int_equal(quota_used("a", QUOTA_MEMORY), 0);
	assert_int_equal(quota_used_total(QUOTA_MEMORY), 0);
	/* No default for disks here, and no cap: anything goes. */
	assert_int_equal(quota_admit_n("a", QUOTA_DISK, 1ull << 44, &e), 0);
	quota_release_n("a", QUOTA_DISK, 1ull << 44);
	/* A key's own quota overrides the default, and an admin has none by default. */
	q.v[QUOTA_DISK] = (int64_t)(2 * mib);
	quota_note_key("a", false, &q);
	assert_int_equal(quota_admit_n("a", QUOTA_DISK, 3 * mib, &e), -EAGAIN);
	assert_non_null(strstr(e.msg, "Quota `diskBytes` reached"));
	struct quota_set none = defaults();
	quota_note_key("adm", true, &none);
	assert_int_equal(quota_admit_n("adm", QUOTA_MEMORY, 8ull << 30, &e), 0);
	/* Held again past the quota (a hibernated session at start): it counts, and refuses
	 * more, until released. */
	quota_take_n("a", QUOTA_MEMORY, 2ull << 30);
	assert_int_equal(quota_used("a", QUOTA_MEMORY), 2ull << 30);
	assert_int_equal(quota_admit_n("a", QUOTA_MEMORY, mib, &e), -EAGAIN);
	quota_release_n("a", QUOTA_MEMORY, 2ull << 30);
	assert_int_equal(quota_admit_n("a", QUOTA_MEMORY, mib, &e), 0);
	/* Releasing more than is held stops at nothing. */
	quota_release_n("a", QUOTA_MEMORY, 5ull << 30);
	assert_int_equal(quota_used("a", QUOTA_MEMORY), 0);
}

/* Several units at once, as a fork of n sessions takes them: all or none, within the cap. */
static void test_units_at_once(void **state)
{
	struct quota_set q = defaults();
	quota_note_key("a", false, &q);
	struct err e;
	assert_int_equal(quota_admit_n("a", QUOTA_FILE_OPS, 4, &e), -EAGAIN); /* quota 3 */
	assert_int_equal(quota_used("a", QUOTA_FILE_OPS), 0);
	assert_int_equal(quota_admit_n("a", QUOTA_FILE_OPS, 3, &e), 0);
	assert_int_equal(quota_admit_n("", QUOTA_FILE_OPS, 4, &e), -ENOBUFS); /* cap 6 */
	assert_int_equal(quota_admit_n("", QUOTA_FILE_OPS, 3, &e), 0);
	assert_int_equal(quota_used_total(QUOTA_FILE_OPS), 6);
}

static void test_json_forms(void **state)
{
	struct quota_set q = defaults();
	struct err e;
	json_t *in = json_loads("{\"sessions\": 4, \"fileOps\": 0, \"commands\": null}", 0, NULL);
	assert_int_equal(quota_set_merge_json(&q, in, &e), 0);
	json_decref(in);
	assert_int_equal(q.v[QUOTA_SESSIONS], 4);
	assert_int_equal(q.v[QUOTA_FILE_OPS], 0);
	assert_int_equal(q.v[QUOTA_COMMANDS], QUOTA_DEFAULT);
	char *text = quota_set_dump(&q);
	assert_string_equal(text, "{\"fileOps\":0,\"sessions\":4}");
	struct quota_set back;
	quota_set_load(&back, text);
	free(text);
	assert_memory_equal(&back, &q, sizeof(q));
	/* Bad input is refused, naming what is wrong; stored junk reads as defaults. */
	const char *bad[] = {
		"{\"cpus\": 1}",         "{\"sessions\": -1}",          "{\"sessions\": 1.5}",
		"{\"sessions\": \"4\"}", "{\"sessions\": 10000000000}", "[1]"
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		json_t *j = json_loads(bad[i], JSON_DECODE_ANY, NULL);
		assert_int_equal(quota_set_merge_json(&q, j, &e), -EINVAL);
		json_decref(j);
	}
	quota_set_load(&back, "{\"sessions\": -5, \"future\": 3, \"commands\": 2}");
	assert_int_equal(back.v[QUOTA_SESSIONS], QUOTA_DEFAULT);
	assert_int_equal(back.v[QUOTA_COMMANDS], 2);
	/* Byte quotas take bytes, up to a pebibyte. */
	json_t *big = json_loads("{\"memoryBytes\": 17179869184, \"diskBytes\": 0}", 0, NULL);
	assert_int_equal(quota_set_merge_json(&q, big, &e), 0);
	json_decref(big);
	assert_int_equal(q.v[QUOTA_MEMORY], 17179869184LL);
	text = quota_set_dump(&q);
	quota_set_load(&back, text);
	free(text);
	assert_int_equal(back.v[QUOTA_MEMORY], 17179869184LL);
	assert_int_equal(back.v[QUOTA_DISK], 0);
	big = json_loads("{\"memoryBytes\": 2251799813685248}", 0, NULL);
	assert_int_equal(quota_set_merge_json(&q, big, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "(bytes)"));
	json_decref(big);
	quota_set_load(&back, "not json");
	assert_int_equal(back.v[QUOTA_COMMANDS], QUOTA_DEFAULT);
	assert_int_equal(quota_kind_from_name("mcpSessions"), QUOTA_MCP_SESSIONS);
	assert_int_equal(quota_kind_from_name("nope"), -1);
}

static void test_key_store_keeps_quotas(void **state)
{
	sqlite3 *db;
	assert_int_equal(sqlite3_open(":memory:", &db), SQLITE_OK);
	/* A table of before quotas gets the column (the store's first migration). */
	assert_int_equal(
		sqlite3_exec(db,
			     "CREATE TABLE api_keys (id TEXT PRIMARY KEY, name TEXT NOT "
			     "NULL, prefix TEXT NOT NULL, hash TEXT NOT NULL UNIQUE, "
			     "scopes INTEGER NOT NULL, rate_limit INTEGER NOT NULL DEFAULT "
			     "0, created INTEGER NOT NULL, last_used INTEGER NOT NULL "
			     "DEFAULT 0, expires INTEGER NOT NULL DEFAULT 0, enabled "
			     "INTEGER NOT NULL DEFAULT 1); INSERT INTO api_keys VALUES "
			     "('key_old', 'old', 'sk_', 'h', 1, 0, 1, 0, 0, 1);",
			     NULL, NULL, NULL),
		SQLITE_OK);
	struct err e;
	assert_int_equal(store_migrate(db, &e), 0);
	struct key_info k;
	assert_int_equal(keys_get(db, "key_old", &k, &e), 0);
	assert_int_equal(k.quotas.v[QUOTA_SESSIONS], QUOTA_DEFAULT);
	struct quota_set q = defaults();
	q.v[QUOTA_SESSIONS] = 7;
	assert_int_equal(keys_set_quotas(db, "key_old", &q, &e), 0);
	assert_int_equal(keys_get(db, "key_old", &k, &e), 0);
	assert_int_equal(k.quotas.v[QUOTA_SESSIONS], 7);
	json_t *j = keys_info_json(&k);
	assert_int_equal(
		json_integer_value(json_object_get(json_object_get(j, "quotas"), "sessions")), 7);
	json_decref(j);
	assert_int_equal(keys_set_quotas(db, "key_none", &q, &e), -ENOENT);
	assert_int_equal(keys_set_rate_limit(db, "key_old", -1, &e), -EINVAL);
	assert_int_equal(keys_set_rate_limit(db, "key_old", 60, &e), 0);
	/* A second opening finds the schema current and changes nothing. */
	assert_int_equal(store_migrate(db, &e), 0);
	assert_int_equal(keys_get(db, "key_old", &k, &e), 0);
	assert_int_equal(k.rate_limit, 60);
	sqlite3_close(db);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_default_quota_then_cap, setup, teardown),
		cmocka_unit_test_setup_teardown(test_admin_has_no_default_but_an_override_binds,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_zero_means_none_of_its_own, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unknown_owner_gets_the_default, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_caps_follow_the_configuration, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_many_owners_are_bounded, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bytes_are_amounts, setup, teardown),
		cmocka_unit_test_setup_teardown(test_units_at_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_json_forms, setup, teardown),
		cmocka_unit_test_setup_teardown(test_key_store_keeps_quotas, setup, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
