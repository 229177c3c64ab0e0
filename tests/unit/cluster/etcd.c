/* Unit tests of src/cluster/etcd.c: what etcd's JSON gateway answers, parsed strictly (a
 * malformed or hostile reply is an error, never a crash or a wrong key), and the endpoints a
 * client accepts. The calls themselves are exercised against a real etcd by tests/cluster. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cluster/etcd.h"

#define S(x) x, strlen(x)

static void test_range(void **state)
{
	struct etcd_kvs kvs;
	struct err e;
	/* key "a/b" = "hi", key "a/c" with an empty value (the gateway leaves it out). */
	assert_int_equal(
		etcd_parse_range(S("{\"header\":{\"revision\":\"42\"},\"kvs\":["
				   "{\"key\":\"YS9i\",\"value\":\"aGk=\","
				   "\"create_revision\":\"3\",\"mod_revision\":\"7\","
				   "\"lease\":\"99\"},"
				   "{\"key\":\"YS9j\",\"mod_revision\":8}],\"count\":\"2\"}"),
				 &kvs, &e),
		0);
	assert_int_equal(kvs.revision, 42);
	assert_int_equal(kvs.n, 2);
	assert_string_equal(kvs.v[0].key, "a/b");
	assert_string_equal(kvs.v[0].value, "hi");
	assert_int_equal(kvs.v[0].value_len, 2);
	assert_int_equal(kvs.v[0].create_rev, 3);
	assert_int_equal(kvs.v[0].mod_rev, 7);
	assert_int_equal(kvs.v[0].lease, 99);
	assert_string_equal(kvs.v[1].value, "");
	assert_int_equal(kvs.v[1].mod_rev, 8);
	etcd_kvs_clear(&kvs);
	/* Nothing there. */
	assert_int_equal(etcd_parse_range(S("{\"header\":{\"revision\":\"5\"}}"), &kvs, &e), 0);
	assert_int_equal(kvs.n, 0);
	assert_int_equal(kvs.revision, 5);
	etcd_kvs_clear(&kvs);
}

static void test_range_malformed(void **state)
{
	static const char *const bad[] = {
		"",
		"[]",
		"{\"header\":{\"revision\":\"x\"}}",
		"{\"header\":{\"revision\":\"99999999999999999999999\"}}",
		"{\"header\":{\"revision\":\"\"}}",
		"{\"kvs\":{}}",
		"{\"kvs\":[1]}",
		"{\"kvs\":[{\"key\":\"not base64!\"}]}",
		"{\"kvs\":[{\"key\":\"YQ==\",\"value\":7}]}",
		"{\"kvs\":[{\"key\":\"YQ==\",\"mod_revision\":\"1.5\"}]}",
		"{\"kvs\":[{\"key\":\"YQ==\"}],\"kvs\":[]}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		struct etcd_kvs kvs = { 0 };
		struct err e;
		assert_int_equal(etcd_parse_range(bad[i], strlen(bad[i]), &kvs, &e), -EBADMSG);
		assert_int_equal(kvs.n, 0);
		assert_null(kvs.v);
	}
}

struct seen {
	int puts, deletes;
	char last[64];
	int stop_after;
};

static int on_event(enum etcd_event_type t, const struct etcd_kv *kv, void *arg)
{
	struct seen *s = arg;
	if (t == ETCD_EVENT_PUT)
		s->puts++;
	else
		s->deletes++;
	strncpy(s->last, kv->key, sizeof(s->last) - 1);
	return s->stop_after && s->puts + s->deletes >= s->stop_after;
}

static void test_watch_lines(void **state)
{
	struct seen s = { 0 };
	struct err e;
	int64_t next = 10;
	/* Created, then a put and a delete: the next revision passes the last event's. */
	assert_int_equal(etcd_watch_parse_line(S("{\"result\":{\"header\":{\"revision\":\"9\"},"
						 "\"created\":true}}"),
					       on_event, &s, &next, &e),
			 0);
	assert_int_equal(next, 10);
	assert_int_equal(etcd_watch_parse_line(
				 S("{\"result\":{\"header\":{\"revision\":\"12\"},\"events\":["
				   "{\"kv\":{\"key\":\"YQ==\",\"value\":\"MQ==\",\"mod_revision\":"
				   "\"11\"}},"
				   "{\"type\":\"DELETE\",\"kv\":{\"key\":\"Yg==\",\"mod_revision\":"
				   "\"12\"}}]}}"),
				 on_event, &s, &next, &e),
			 0);
	assert_int_equal(s.puts, 1);
	assert_int_equal(s.deletes, 1);
	assert_string_equal(s.last, "b");
	assert_int_equal(next, 13);
	/* A progress notification moves it on too. */
	assert_int_equal(etcd_watch_parse_line(S("{\"result\":{\"header\":{\"revision\":\"20\"}}}"),
					       on_event, &s, &next, &e),
			 0);
	assert_int_equal(next, 21);
	/* The callback may end the watch. */
	s.stop_after = 3;
	assert_int_equal(
		etcd_watch_parse_line(S("{\"result\":{\"events\":[{\"kv\":{\"key\":\"Yw==\","
					"\"mod_revision\":\"30\"}},{\"kv\":{\"key\":\"ZA==\","
					"\"mod_revision\":\"31\"}}]}}"),
				      on_event, &s, &next, &e),
		1);
	assert_int_equal(s.puts, 2);
}

static void test_another_member(void **state)
{
	(void)state;
	/* A member stopping answers through its gateway while its own connection closes. */
	assert_true(etcd_try_another_member(408, "grpc: the client connection is closing"));
	assert_true(etcd_try_another_member(503, "etcdserver: request timed out"));
	assert_true(etcd_try_another_member(500, "etcdserver: no leader"));
	assert_true(etcd_try_another_member(500, "rpc error: transport is closing"));
	/* What every member would answer the same. */
	assert_false(etcd_try_another_member(400, "etcdserver: mvcc: required revision has been "
						  "compacted"));
	assert_false(etcd_try_another_member(400, "etcdserver: requested lease not found"));
	assert_false(etcd_try_another_member(403, "etcdserver: permission denied"));
}

static void test_watch_errors(void **state)
{
	struct seen s = { 0 };
	struct err e;
	int64_t next = 5;
	assert_int_equal(etcd_watch_parse_line(S("{\"result\":{\"compact_revision\":\"40\"}}"),
					       on_event, &s, &next, &e),
			 -ESTALE);
	assert_int_equal(next, 40);
	assert_int_equal(etcd_watch_parse_line(S("{\"result\":{\"canceled\":true,"
						 "\"cancel_reason\":\"gone\"}}"),
					       on_event, &s, &next, &e),
			 -EIO);
	assert_non_null(strstr(e.msg, "gone"));
	assert_int_equal(etcd_watch_parse_line(S("{\"error\":{\"grpc_code\":14,\"message\":"
						 "\"etcdserver: no leader\"}}"),
					       on_event, &s, &next, &e),
			 -EIO);
	assert_non_null(strstr(e.msg, "no leader"));
	static const char *const bad[] = {
		"not json",
		"[]",
		"{\"result\":{\"events\":{}}}",
		"{\"result\":{\"events\":[{\"type\":\"EXPLODE\",\"kv\":{\"key\":\"YQ==\"}}]}}",
		"{\"result\":{\"events\":[{\"kv\":{\"key\":\"%%%\"}}]}}",
		"{\"result\":{\"events\":[{\"kv\":7}]}}",
		"{\"result\":{\"compact_revision\":\"x\"}}",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++)
		assert_int_equal(
			etcd_watch_parse_line(bad[i], strlen(bad[i]), on_event, &s, &next, &e),
			-EBADMSG);
	assert_int_equal(s.puts + s.deletes, 0);
}

static void test_endpoints(void **state)
{
	struct etcd_client *c = NULL;
	struct err e;
	struct etcd_opts o = { .endpoints = "http://127.0.0.1:2379, https://h2:2379/" };
	assert_int_equal(etcd_new(&o, &c, &e), 0);
	assert_string_equal(etcd_endpoint(c), "http://127.0.0.1:2379");
	c = etcd_free(c);
	static const char *const bad[] = { "",          " , ",     "127.0.0.1:2379",
					   "ftp://h:1", "http://", "http://h:1?x=1" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		o.endpoints = bad[i];
		assert_int_equal(etcd_new(&o, &c, &e), -EINVAL);
		assert_null(c);
	}
	/* Nobody listening: every endpoint tried, then a clear error, within the bound. */
	o = (struct etcd_opts){ .endpoints = "http://127.0.0.1:1,http://127.0.0.1:2",
				.timeout_ms = 500 };
	assert_int_equal(etcd_new(&o, &c, &e), 0);
	struct etcd_kvs kvs;
	assert_int_equal(etcd_get(c, "/x/", true, &kvs, &e), -ETIMEDOUT);
	assert_non_null(strstr(e.msg, "cannot be reached"));
	etcd_free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_range),          cmocka_unit_test(test_range_malformed),
		cmocka_unit_test(test_watch_lines),    cmocka_unit_test(test_watch_errors),
		cmocka_unit_test(test_another_member), cmocka_unit_test(test_endpoints),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
