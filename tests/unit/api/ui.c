/* Tests of src/api/ui_assets.c: which names may name a dashboard file, their types, the
 * If-None-Match reader, the Host check of the CSP, and loading a directory that holds what
 * must not be served (symlinks, a FIFO, an oversize file, hidden and unknown files). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "api/ui.h"

static void test_names(void **state)
{
	const char *good[] = { "index.html",  "app.js", "app.css",    "a-b_c.1.js", "x.png",
			       "favicon.ico", "A.svg",  "font.woff2", "LICENSE.txt" };
	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
		assert_true(ui_name_ok(good[i]));
	const char *bad[] = { NULL,          "",        ".",          "..",       "../app.js",
			      "..app.js",    "a..js",   ".hidden.js", "a/b.js",   "/app.js",
			      "app.js/",     "a\\b.js", "a b.js",     "a%2fb.js", "app.exe",
			      "noext",       "app.JS",  "app.js.",    "app.js~",  "a\x01.js",
			      "\xc3\xa9.js", "app.js\n" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_false(ui_name_ok(bad[i]));
	char longest[UI_NAME_MAX + 2];
	memset(longest, 'a', sizeof(longest));
	memcpy(longest + UI_NAME_MAX - 3, ".js", 4);
	assert_int_equal(strlen(longest), UI_NAME_MAX);
	assert_true(ui_name_ok(longest));
	memset(longest, 'a', sizeof(longest));
	memcpy(longest + UI_NAME_MAX - 2, ".js", 4);
	assert_false(ui_name_ok(longest));
}

static void test_types(void **state)
{
	assert_string_equal(ui_content_type("index.html"), "text/html; charset=utf-8");
	assert_string_equal(ui_content_type("app.js"), "text/javascript; charset=utf-8");
	assert_string_equal(ui_content_type("app.css"), "text/css; charset=utf-8");
	assert_string_equal(ui_content_type("a.png"), "image/png");
	assert_null(ui_content_type("a.map.gz"));
	assert_null(ui_content_type("noext"));
	assert_null(ui_content_type(NULL));
}

static void test_etag_match(void **state)
{
	const char *tag = "\"0123456789abcdef0123456789abcdef\"";
	assert_true(ui_etag_match(tag, tag));
	assert_true(ui_etag_match("*", tag));
	assert_true(ui_etag_match("W/\"0123456789abcdef0123456789abcdef\"", tag));
	assert_true(ui_etag_match("\"x\", \"0123456789abcdef0123456789abcdef\"", tag));
	assert_true(ui_etag_match(" ,\t\"0123456789abcdef0123456789abcdef\" ,", tag));
	assert_true(ui_etag_match("junk, \"0123456789abcdef0123456789abcdef\"", tag));
	assert_false(ui_etag_match(NULL, tag));
	assert_false(ui_etag_match("", tag));
	assert_false(ui_etag_match(",,,", tag));
	assert_false(ui_etag_match("\"x\"", tag));
	assert_false(ui_etag_match("0123456789abcdef0123456789abcdef", tag));
	assert_false(ui_etag_match("\"0123456789abcdef0123456789abcdef", tag));
	assert_false(ui_etag_match("\"0123456789abcdef0123456789abcde\"", tag));
	assert_false(ui_etag_match("\"0123456789abcdef0123456789abcdef0\"", tag));
	assert_false(ui_etag_match("W/", tag));
	assert_false(ui_etag_match("\"", tag));
}

static void test_host_plain(void **state)
{
	assert_true(ui_host_plain("localhost:3000"));
	assert_true(ui_host_plain("127.0.0.1:8080"));
	assert_true(ui_host_plain("[::1]:3000"));
	assert_true(ui_host_plain("sandbox.example.com"));
	assert_false(ui_host_plain(NULL));
	assert_false(ui_host_plain(""));
	assert_false(ui_host_plain("a;script-src *"));
	assert_false(ui_host_plain("a b"));
	assert_false(ui_host_plain("a'b"));
	assert_false(ui_host_plain("a\r\nX: y"));
	char big[300];
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_false(ui_host_plain(big));
}

static char dir[] = "/tmp/ui-unit-XXXXXX";

static void put(const char *name, const char *data, size_t len)
{
	char path[256];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(data, 1, len, f), len);
	fclose(f);
}

static void test_load(void **state)
{
	assert_non_null(mkdtemp(dir));
	put("index.html", "<p>hi</p>", 9);
	put("app.js", "x()", 3);
	put("empty.css", "", 0);
	put(".hidden.js", "h", 1);
	put("data.bin", "b", 1);
	char path[256];
	snprintf(path, sizeof(path), "%s/big.js", dir);
	FILE *f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(ftruncate(fileno(f), (off_t)UI_FILE_MAX + 1), 0);
	fclose(f);
	snprintf(path, sizeof(path), "%s/link.js", dir);
	assert_int_equal(symlink("/etc/passwd", path), 0);
	snprintf(path, sizeof(path), "%s/dangling.js", dir);
	assert_int_equal(symlink("/nonexistent", path), 0);
	snprintf(path, sizeof(path), "%s/fifo.js", dir);
	assert_int_equal(mkfifo(path, 0600), 0);
	snprintf(path, sizeof(path), "%s/dir.js", dir);
	assert_int_equal(mkdir(path, 0700), 0);

	struct ui_assets a = { 0 };
	struct err e;
	assert_int_equal(ui_assets_load(&a, dir, &e), 3);
	const struct ui_asset *x = ui_assets_find(&a, "index.html");
	assert_non_null(x);
	assert_int_equal(x->len, 9);
	assert_memory_equal(x->data, "<p>hi</p>", 9);
	assert_string_equal(x->type, "text/html; charset=utf-8");
	assert_int_equal(strlen(x->etag), UI_ETAG_LEN);
	assert_int_equal(x->etag[0], '"');
	assert_int_equal(x->etag[UI_ETAG_LEN - 1], '"');
	assert_true(ui_etag_match(x->etag, x->etag));
	x = ui_assets_find(&a, "empty.css");
	assert_non_null(x);
	assert_int_equal(x->len, 0);
	assert_non_null(ui_assets_find(&a, "app.js"));
	const char *absent[] = { "big.js",     "link.js",  "dangling.js",   "fifo.js", "dir.js",
				 ".hidden.js", "data.bin", "../index.html", "nope.js", NULL };
	for (size_t i = 0; i < sizeof(absent) / sizeof(absent[0]); i++)
		assert_null(ui_assets_find(&a, absent[i]));

	/* Loading again replaces what was there. */
	snprintf(path, sizeof(path), "%s/app.js", dir);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(ui_assets_load(&a, dir, &e), 2);
	assert_null(ui_assets_find(&a, "app.js"));
	ui_assets_free(&a);
	ui_assets_free(&a); /* twice is harmless */

	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	assert_int_equal(system(cmd), 0);
}

static void test_missing_dir(void **state)
{
	struct ui_assets a = { 0 };
	struct err e;
	assert_true(ui_assets_load(&a, "/nonexistent/ui", &e) < 0);
	assert_non_null(strstr(e.msg, "/nonexistent/ui"));
	assert_null(ui_assets_find(&a, "index.html"));
	assert_true(ui_assets_load(&a, "/etc/passwd", &e) < 0); /* not a directory */
	ui_assets_free(&a);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_names),      cmocka_unit_test(test_types),
		cmocka_unit_test(test_etag_match), cmocka_unit_test(test_host_plain),
		cmocka_unit_test(test_load),       cmocka_unit_test(test_missing_dir),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
