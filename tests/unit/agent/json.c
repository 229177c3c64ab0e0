/* Tests of agent/json.c (reader and writer) and agent/request.c (request validation). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "request.h"

static struct json_doc *parse_ok(const char *s, size_t n)
{
	struct json_doc *d = NULL;
	struct err e = { 0 };
	int r = json_parse(s, n, &d, &e);
	if (r < 0)
		fprintf(stderr, "unexpected error for %s: %s\n", s, e.msg);
	assert_int_equal(r, 0);
	return d;
}

static void bad(const char *s, size_t n)
{
	struct json_doc *d = NULL;
	struct err e = { 0 };
	int r = json_parse(s, n, &d, &e);
	if (r == 0)
		fprintf(stderr, "accepted: %.*s\n", (int)n, s);
	assert_true(r < 0);
	assert_null(d);
	assert_true(e.msg[0] != '\0');
}

#define BAD(lit) bad(lit, sizeof(lit) - 1)
#define OK(lit)  parse_ok(lit, sizeof(lit) - 1)

static void test_values(void **state)
{
	struct json_doc *d = OK(" {\"a\": [1, -2, 3.5, true, false, null, \"s\", {}, []],"
				" \"b\": {\"c\": \"d\"}} \n");
	const struct json *root = json_root(d);
	assert_int_equal(root->type, JSON_OBJECT);
	const struct json *a = json_get(root, "a");
	assert_int_equal(a->type, JSON_ARRAY);
	assert_int_equal(a->u.kids.n, 9);
	const struct json *v = a->u.kids.first;
	assert_int_equal(v->type, JSON_INT);
	assert_int_equal(v->u.i, 1);
	v = v->next;
	assert_int_equal(v->u.i, -2);
	v = v->next;
	assert_int_equal(v->type, JSON_REAL);
	assert_true(v->u.d == 3.5);
	v = v->next;
	assert_true(v->type == JSON_BOOL && v->u.b);
	v = v->next;
	assert_true(v->type == JSON_BOOL && !v->u.b);
	v = v->next;
	assert_int_equal(v->type, JSON_NULL);
	v = v->next;
	assert_string_equal(json_str(v), "s");
	assert_string_equal(json_str(json_get(json_get(root, "b"), "c")), "d");
	assert_null(json_get(root, "missing"));
	assert_null(json_get(a, "a"));
	json_doc_free(d);

	d = OK("\"only\"");
	assert_string_equal(json_str(json_root(d)), "only");
	json_doc_free(d);
	d = OK("0");
	json_doc_free(d);
	d = OK("-0.0e+1");
	assert_int_equal(json_root(d)->type, JSON_REAL);
	json_doc_free(d);
}

static void test_integers(void **state)
{
	struct json_doc *d = OK("[9007199254740992,-9007199254740992,0,-0]");
	const struct json *v = json_root(d)->u.kids.first;
	assert_true(v->u.i == (int64_t)1 << 53);
	assert_true(v->next->u.i == -((int64_t)1 << 53));
	json_doc_free(d);
	BAD("9007199254740993");
	BAD("-9007199254740993");
	BAD("123456789012345678901234567890");
	BAD("01");
	BAD("1.");
	BAD(".5");
	BAD("+1");
	BAD("1e");
	BAD("1e+");
	BAD("-");
	BAD("NaN");
	BAD("Infinity");
	BAD("1e999");
	BAD("0x10");
	d = OK("1e2");
	assert_int_equal(json_root(d)->type, JSON_REAL);
	json_doc_free(d);
}

static void test_strings(void **state)
{
	struct json_doc *d = OK("\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\\u00e9\\u20ac\\ud83d\\ude00\"");
	const struct json *v = json_root(d);
	assert_string_equal(v->u.str.s, "a\"b\\c/d\b\f\n\r\t\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80");
	json_doc_free(d);

	d = OK("\"caf\xc3\xa9 \xf0\x9f\x98\x80\"");
	assert_string_equal(json_str(json_root(d)), "caf\xc3\xa9 \xf0\x9f\x98\x80");
	json_doc_free(d);

	/* An escaped NUL is kept with the length, and refused as a C string. */
	d = OK("\"a\\u0000b\"");
	v = json_root(d);
	assert_int_equal(v->u.str.len, 3);
	assert_memory_equal(v->u.str.s, "a\0b", 3);
	assert_null(json_str(v));
	json_doc_free(d);

	BAD("\"abc");
	BAD("\"abc\\\"");
	BAD("\"\\x\"");
	BAD("\"\\u12\"");
	BAD("\"\\u12g4\"");
	BAD("\"\\ud800\"");
	BAD("\"\\ud800\\u0041\"");
	BAD("\"\\udc00\"");
	BAD("\"\\ude00\\ud83d\"");
	BAD("\"tab\there\"");
	BAD("\"nl\nhere\"");
	BAD("\"\xc0\x80\"");         /* overlong NUL */
	BAD("\"\xe0\x80\xaf\"");     /* overlong */
	BAD("\"\xed\xa0\x80\"");     /* encoded surrogate */
	BAD("\"\xf4\x90\x80\x80\""); /* above U+10FFFF */
	BAD("\"\xf5\x80\x80\x80\"");
	BAD("\"\xff\"");
	BAD("\"\x80\"");
	BAD("\"\xc3\"");
	BAD("\"\xe2\x82\"");
	bad("\"a\0b\"", 5);      /* raw NUL */
	BAD("{\"a\\u0000\":1}"); /* NUL in a key */
}

static void test_structure(void **state)
{
	BAD("");
	BAD("   ");
	BAD("{");
	BAD("}");
	BAD("[1,]");
	BAD("[,1]");
	BAD("{\"a\":1,}");
	BAD("{\"a\" 1}");
	BAD("{a:1}");
	BAD("{\"a\":1 \"b\":2}");
	BAD("{} {}");
	BAD("{}x");
	BAD("[1] ]");
	BAD("tru");
	BAD("nul");
	BAD("truex");
	BAD("{\"a\":1,\"a\":2}");
	BAD("{\"b\":1,\"a\":2,\"b\":3}");
	bad("{}\0", 3);

	/* Depth: exactly the limit is fine, one more is not. */
	char deep[2 * JSON_MAX_DEPTH + 3];
	for (int i = 0; i < JSON_MAX_DEPTH; i++) {
		deep[i] = '[';
		deep[JSON_MAX_DEPTH + i] = ']';
	}
	struct json_doc *d = parse_ok(deep, 2 * JSON_MAX_DEPTH);
	json_doc_free(d);
	char deeper[2 * JSON_MAX_DEPTH + 2];
	for (int i = 0; i <= JSON_MAX_DEPTH; i++) {
		deeper[i] = '[';
		deeper[JSON_MAX_DEPTH + 1 + i] = ']';
	}
	bad(deeper, sizeof(deeper));

	/* Size limit. */
	size_t n = JSON_MAX_INPUT + 1;
	char *big = malloc(n);
	memset(big, ' ', n);
	big[0] = '1';
	struct json_doc *dd = NULL;
	struct err e;
	assert_int_equal(json_parse(big, n, &dd, &e), -EMSGSIZE);
	free(big);

	/* Many keys stay fast (duplicate detection is not quadratic). */
	size_t keys = 60000;
	char *obj = malloc(keys * 16 + 2);
	size_t o = 0;
	obj[o++] = '{';
	for (size_t i = 0; i < keys; i++)
		o += (size_t)sprintf(obj + o, "%s\"k%zu\":1", i ? "," : "", i);
	obj[o++] = '}';
	d = parse_ok(obj, o);
	assert_int_equal(json_root(d)->u.kids.n, keys);
	json_doc_free(d);
	free(obj);

	/* Short texts whose values outgrow the first, small arena block (sized to the text):
	 * every value and string survives into the next blocks. */
	for (size_t count = 1; count <= 2000; count = count * 3 + 1) {
		char *arr = malloc(count * 8 + 2);
		size_t a = 0;
		arr[a++] = '[';
		for (size_t i = 0; i < count; i++)
			a += (size_t)sprintf(arr + a, "%s\"%zu\"", i ? "," : "", i % 10);
		arr[a++] = ']';
		d = parse_ok(arr, a);
		const struct json *root = json_root(d);
		assert_int_equal(root->u.kids.n, count);
		size_t i = 0;
		for (const struct json *v = root->u.kids.first; v; v = v->next, i++) {
			char want[4];
			snprintf(want, sizeof(want), "%zu", i % 10);
			assert_int_equal(v->type, JSON_STRING);
			assert_string_equal(v->u.str.s, want);
		}
		assert_int_equal(i, count);
		json_doc_free(d);
		free(arr);
	}
}

static void test_writer(void **state)
{
	struct jw w;
	jw_init(&w);
	jw_obj_open(&w);
	jw_key(&w, "s");
	jw_str(&w, "q\"b\\n\n\t\x01\x1f\xc3\xa9");
	jw_key(&w, "bad");
	jw_strn(&w,
		"a\xff"
		"b\xc3",
		4);
	jw_key(&w, "nul");
	jw_strn(&w, "a\0b", 3);
	jw_key(&w, "arr");
	jw_arr_open(&w);
	jw_int(&w, -5);
	jw_bool(&w, true);
	jw_null(&w);
	jw_obj_open(&w);
	jw_obj_close(&w);
	jw_arr_open(&w);
	jw_arr_close(&w);
	jw_fixed(&w, 1.5, 3);
	jw_timespec(&w, 12, 500);
	jw_timespec(&w, -1, 250000000);
	jw_arr_close(&w);
	jw_obj_close(&w);
	assert_string_equal(w.buf, "{\"s\":\"q\\\"b\\\\n\\n\\t\\u0001\\u001f\xc3\xa9\","
				   "\"bad\":\"a\xef\xbf\xbd"
				   "b\xef\xbf\xbd\","
				   "\"nul\":\"a\\u0000b\","
				   "\"arr\":[-5,true,null,{},[],1.500,12.000000500,-0.750000000]}");

	/* What the writer produces, the reader takes back. */
	struct json_doc *d = parse_ok(w.buf, w.len);
	const struct json *nul = json_get(json_root(d), "nul");
	assert_int_equal(nul->u.str.len, 3);
	json_doc_free(d);
	jw_free(&w);
}

static int req_ok(const char *s, struct req *r)
{
	struct err e = { 0 };
	int ret = req_parse(s, strlen(s), r, &e);
	if (ret < 0)
		fprintf(stderr, "%s: %s\n", s, e.msg);
	return ret;
}

static void req_bad(const char *s, int errnum, const char *needle)
{
	struct req r;
	struct err e = { 0 };
	assert_true(req_parse(s, strlen(s), &r, &e) < 0);
	if (e.errnum != errnum || (needle && !strstr(e.msg, needle)))
		fprintf(stderr, "%s: got %d `%s`\n", s, e.errnum, e.msg);
	assert_int_equal(e.errnum, errnum);
	if (needle)
		assert_non_null(strstr(e.msg, needle));
}

static void test_requests(void **state)
{
	struct req r;
	assert_int_equal(req_ok("{\"op\":\"exec\",\"argv\":[\"ls\",\"-l\"],\"env\":{\"A\":\"1\"},"
				"\"cwd\":\"x\",\"timeoutMs\":5,\"stdin\":true,\"extra\":[1]}",
				&r),
			 0);
	assert_int_equal(r.op, REQ_EXEC);
	assert_int_equal(r.u.exec.argc, 2);
	assert_string_equal(r.u.exec.argv[1], "-l");
	assert_null(r.u.exec.argv[2]);
	assert_int_equal(r.u.exec.env_n, 1);
	assert_string_equal(r.u.exec.env_vals[0], "1");
	assert_string_equal(r.u.exec.cwd, "x");
	assert_int_equal(r.u.exec.timeout_ms, 5);
	assert_int_equal(r.u.exec.kill_grace_ms, REQ_DEFAULT_KILL_GRACE_MS);
	assert_true(r.u.exec.stdin_pipe);
	req_fini(&r);

	assert_int_equal(req_ok("{\"op\":\"write\",\"path\":\"f\"}", &r), 0);
	assert_int_equal(r.u.write.mode, 0644);
	assert_int_equal(r.u.write.max_bytes, -1);
	req_fini(&r);
	assert_int_equal(req_ok("{\"op\":\"list\"}", &r), 0);
	assert_string_equal(r.path, ".");
	assert_int_equal(r.u.list.max_entries, REQ_DEFAULT_MAX_ENTRIES);
	req_fini(&r);
	assert_int_equal(
		req_ok("{\"op\":\"resume\",\"entropy\":\"00Ff\",\"time\":{\"sec\":1}}", &r), 0);
	assert_int_equal(r.u.resume.entropy_len, 2);
	assert_int_equal(r.u.resume.entropy[1], 0xff);
	assert_true(r.u.resume.has_time);
	req_fini(&r);

	req_bad("{\"op\":1}", EINVAL, "`op`");
	req_bad("{}", EINVAL, "`op`");
	req_bad("{\"op\":\"nope\"}", EINVAL, "nope");
	req_bad("[]", EPROTO, NULL);
	req_bad("{", EPROTO, NULL);
	req_bad("{\"op\":\"exec\"}", EINVAL, "`argv`");
	req_bad("{\"op\":\"exec\",\"argv\":\"ls\"}", EINVAL, "`argv`");
	req_bad("{\"op\":\"exec\",\"argv\":[1]}", EINVAL, "`argv`");
	req_bad("{\"op\":\"exec\",\"argv\":[\"\"]}", EINVAL, "`argv[0]`");
	req_bad("{\"op\":\"exec\",\"argv\":[\"a\"],\"timeoutMs\":-1}", EINVAL, "`timeoutMs`");
	req_bad("{\"op\":\"exec\",\"argv\":[\"a\"],\"timeoutMs\":1.5}", EINVAL, "`timeoutMs`");
	req_bad("{\"op\":\"exec\",\"argv\":[\"a\"],\"stdin\":1}", EINVAL, "`stdin`");
	req_bad("{\"op\":\"exec\",\"argv\":[\"a\"],\"cwd\":\"a\\u0000\"}", EINVAL, "NUL");
	req_bad("{\"op\":\"write\"}", EINVAL, "`path`");
	req_bad("{\"op\":\"write\",\"path\":\"f\",\"mode\":4096}", EINVAL, "`mode`");
	req_bad("{\"op\":\"read\",\"path\":\"f\",\"maxBytes\":-1}", EINVAL, "`maxBytes`");
	req_bad("{\"op\":\"list\",\"recursive\":\"yes\"}", EINVAL, "`recursive`");
	req_bad("{\"op\":\"resume\",\"entropy\":\"abc\"}", EINVAL, "`entropy`");
	req_bad("{\"op\":\"resume\",\"time\":{\"sec\":1,\"nsec\":1000000000}}", EINVAL,
		"`time.nsec`");
}

/* The resume's "storage": drive serials, absolute normalized mount paths, at most 8. */
static void test_resume_storage(void **state)
{
	struct req r;
	assert_int_equal(req_ok("{\"op\":\"resume\",\"storage\":{\"disk\":\"sandbox-drive0\","
				"\"volumes\":[{\"serial\":\"sandbox-drive1\",\"path\":\"/data\","
				"\"readOnly\":true},{\"serial\":\"sandbox-drive2\",\"path\":"
				"\"/srv/a.b/c\"}]}}",
				&r),
			 0);
	assert_true(r.u.resume.has_storage);
	assert_string_equal(r.u.resume.disk_serial, "sandbox-drive0");
	assert_int_equal(r.u.resume.nvolumes, 2);
	assert_string_equal(r.u.resume.volumes[0].path, "/data");
	assert_true(r.u.resume.volumes[0].read_only);
	assert_string_equal(r.u.resume.volumes[1].serial, "sandbox-drive2");
	assert_false(r.u.resume.volumes[1].read_only);
	req_fini(&r);
	assert_int_equal(req_ok("{\"op\":\"resume\",\"storage\":{}}", &r), 0);
	assert_true(r.u.resume.has_storage);
	assert_null(r.u.resume.disk_serial);
	req_fini(&r);
	assert_int_equal(req_ok("{\"op\":\"resume\",\"storage\":null}", &r), 0);
	assert_false(r.u.resume.has_storage);
	req_fini(&r);

#define VOL(serial, path)                                                                          \
	"{\"op\":\"resume\",\"storage\":{\"volumes\":[{\"serial\":" serial ",\"path\":" path "}]}" \
	"}"
	req_bad("{\"op\":\"resume\",\"storage\":[]}", EINVAL, "`storage`");
	req_bad("{\"op\":\"resume\",\"storage\":{\"disk\":\"../vda\"}}", EINVAL, "`disk`");
	req_bad("{\"op\":\"resume\",\"storage\":{\"disk\":\"\"}}", EINVAL, "`disk`");
	req_bad("{\"op\":\"resume\",\"storage\":{\"disk\":\"abcdefghijklmnopqrstu\"}}", EINVAL,
		"`disk`");
	req_bad("{\"op\":\"resume\",\"storage\":{\"volumes\":{}}}", EINVAL, "`storage.volumes`");
	req_bad("{\"op\":\"resume\",\"storage\":{\"volumes\":[1]}}", EINVAL, "storage.volumes[]");
	req_bad(VOL("\"v\"", "\"data\""), EINVAL, "path");
	req_bad(VOL("\"v\"", "\"/\""), EINVAL, "path");
	req_bad(VOL("\"v\"", "\"/a/../b\""), EINVAL, "path");
	req_bad(VOL("\"v\"", "\"/a//b\""), EINVAL, "path");
	req_bad(VOL("\"v\"", "\"/a/./b\""), EINVAL, "path");
	req_bad(VOL("\"v\"", "\"/a/\""), EINVAL, "path");
	req_bad(VOL("\"v\"", "\"/a\\u0000b\""), EINVAL, "NUL");
	req_bad(VOL("\"V\"", "\"/a\""), EINVAL, "`serial`");
	req_bad(VOL("1", "\"/a\""), EINVAL, "`serial`");
	req_bad("{\"op\":\"resume\",\"storage\":{\"volumes\":[{\"path\":\"/a\"}]}}", EINVAL,
		"`serial`");
#undef VOL
	char nine[1024] = "{\"op\":\"resume\",\"storage\":{\"volumes\":[";
	for (int i = 0; i < 9; i++)
		snprintf(nine + strlen(nine), sizeof(nine) - strlen(nine),
			 "%s{\"serial\":\"v%d\",\"path\":\"/v%d\"}", i ? "," : "", i, i);
	strcat(nine, "]}}");
	req_bad(nine, EINVAL, "more than 8");
}

/* The resume's "network": dotted quads only, prefix 1-32, all four fields. */
static void test_resume_network(void **state)
{
	struct req r;
	assert_int_equal(req_ok("{\"op\":\"resume\",\"network\":{\"address\":\"10.200.0.3\","
				"\"prefix\":31,\"gateway\":\"10.200.0.2\",\"dns\":\"10.200.0.2\"}}",
				&r),
			 0);
	assert_true(r.u.resume.has_network);
	assert_int_equal(r.u.resume.net_prefix, 31);
	const uint8_t *a = (const uint8_t *)&r.u.resume.net_addr;
	assert_int_equal(a[0], 10);
	assert_int_equal(a[1], 200);
	assert_int_equal(a[2], 0);
	assert_int_equal(a[3], 3);
	const uint8_t *g = (const uint8_t *)&r.u.resume.net_gateway;
	assert_int_equal(g[3], 2);
	req_fini(&r);
	assert_int_equal(req_ok("{\"op\":\"resume\",\"network\":null}", &r), 0);
	assert_false(r.u.resume.has_network);
	req_fini(&r);
	assert_int_equal(req_ok("{\"op\":\"resume\"}", &r), 0);
	assert_false(r.u.resume.has_network);
	req_fini(&r);
	assert_int_equal(req_ok("{\"op\":\"resume\",\"network\":{\"address\":\"255.255.255.254\","
				"\"prefix\":32,\"gateway\":\"0.0.0.1\",\"dns\":\"1.1.1.1\"}}",
				&r),
			 0);
	req_fini(&r);

#define NET(addr, prefix, gw, dns)                                                \
	"{\"op\":\"resume\",\"network\":{\"address\":" addr ",\"prefix\":" prefix \
	",\"gateway\":" gw ",\"dns\":" dns "}}"
	req_bad("{\"op\":\"resume\",\"network\":\"10.0.0.1/31\"}", EINVAL, "`network`");
	req_bad("{\"op\":\"resume\",\"network\":{}}", EINVAL, "`network.address`");
	req_bad(NET("\"10.0.0.1\"", "0", "\"10.0.0.0\"", "\"10.0.0.0\""), EINVAL,
		"`network.prefix`");
	req_bad(NET("\"10.0.0.1\"", "33", "\"10.0.0.0\"", "\"10.0.0.0\""), EINVAL,
		"`network.prefix`");
	req_bad(NET("\"10.0.0.1\"", "\"31\"", "\"10.0.0.0\"", "\"10.0.0.0\""), EINVAL,
		"`network.prefix`");
	req_bad(NET("\"10.0.0.1\"", "31", "\"10.0.0.0\"", "null"), EINVAL, "`network.dns`");
	req_bad(NET("\"10.0.0.1\"", "31", "10", "\"10.0.0.0\""), EINVAL, "`network.gateway`");
	req_bad(NET("\"10.0.0.1\"", "31", "\"10.0.0.1\"", "\"10.0.0.0\""), EINVAL,
		"`network.address`");
	req_bad(NET("\"0.0.0.0\"", "31", "\"10.0.0.1\"", "\"10.0.0.0\""), EINVAL,
		"`network.address`");
	static const char *const bad[] = {
		"\"10.0.0\"",     "\"10.0.0.1.2\"", "\"10.0.0.256\"",      "\"010.0.0.1\"",
		"\"10.0.0.01\"",  "\"10..0.1\"",    "\"10.0.0.1 \"",       "\"+10.0.0.1\"",
		"\"10.0.0.-1\"",  "\"0x0a.0.0.1\"", "\"10.0.0.1\\u0000\"", "\"\"",
		"\"1000.0.0.1\"", "\"::1\"",        "\"10.0.0.1/31\"",
	};
	char buf[256];
	for (size_t i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		snprintf(buf, sizeof(buf),
			 "{\"op\":\"resume\",\"network\":{\"address\":%s,\"prefix\":31,"
			 "\"gateway\":\"10.0.0.0\",\"dns\":\"10.0.0.0\"}}",
			 bad[i]);
		req_bad(buf, EINVAL, "`network.address`");
	}
#undef NET
	uint32_t v;
	assert_int_equal(req_parse_ipv4("0.0.0.0", &v), 0);
	assert_int_equal(req_parse_ipv4("255.255.255.255", &v), 0);
	assert_int_equal(v, 0xffffffffu);
	assert_int_equal(req_parse_ipv4("256.0.0.0", &v), -EINVAL);
	(void)state;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_values),         cmocka_unit_test(test_integers),
		cmocka_unit_test(test_strings),        cmocka_unit_test(test_structure),
		cmocka_unit_test(test_writer),         cmocka_unit_test(test_requests),
		cmocka_unit_test(test_resume_network), cmocka_unit_test(test_resume_storage),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
