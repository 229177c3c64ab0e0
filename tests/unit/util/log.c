/* Tests of src/util/log.c: level names, thresholds and the JSON line written to stderr. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "util/log.h"

static void test_parse_names(void **state)
{
	static const struct {
		const char *name;
		enum log_level level;
	} names[] = {
		{ "trace", LOG_TRACE }, { "debug", LOG_DEBUG }, { "info", LOG_INFO },
		{ "warn", LOG_WARN },   { "error", LOG_ERROR }, { "fatal", LOG_FATAL },
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		enum log_level l = LOG_TRACE;
		assert_int_equal(log_level_parse(names[i].name, &l), 0);
		assert_int_equal(l, names[i].level);
	}
}

static void test_parse_silent(void **state)
{
	enum log_level l = LOG_TRACE;
	assert_int_equal(log_level_parse("silent", &l), 0);
	log_set_level(l);
	assert_false(log_enabled(LOG_FATAL));
	assert_false(log_enabled(LOG_ERROR));
	log_set_level(LOG_INFO);
}

static void test_parse_rejects(void **state)
{
	static const char *const bad[] = { "",      "verbose", "warning", "info ",
					   " info", "INFO",    "5",       "debugx" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		enum log_level l = LOG_WARN;
		assert_int_equal(log_level_parse(bad[i], &l), -EINVAL);
		assert_int_equal(l, LOG_WARN); /* untouched on failure */
	}
}

static void test_thresholds(void **state)
{
	log_set_level(LOG_WARN);
	assert_int_equal(log_get_level(), LOG_WARN);
	assert_false(log_enabled(LOG_DEBUG));
	assert_false(log_enabled(LOG_INFO));
	assert_true(log_enabled(LOG_WARN));
	assert_true(log_enabled(LOG_FATAL));

	log_set_level(LOG_TRACE);
	assert_true(log_enabled(LOG_TRACE));
	log_set_level(LOG_INFO);
}

/* Runs fn with stderr sent to a pipe; returns what was written (caller frees). */
static char *capture_stderr(void (*fn)(void))
{
	int p[2];
	assert_int_equal(pipe(p), 0);
	int saved = dup(STDERR_FILENO);
	assert_true(saved >= 0);
	assert_true(dup2(p[1], STDERR_FILENO) >= 0);
	close(p[1]);
	fn();
	dup2(saved, STDERR_FILENO);
	close(saved);

	fcntl(p[0], F_SETFL, O_NONBLOCK);
	static char buf[65536];
	size_t len = 0;
	ssize_t n;
	while ((n = read(p[0], buf + len, sizeof(buf) - 1 - len)) > 0)
		len += (size_t)n;
	close(p[0]);
	buf[len] = '\0';
	return strdup(buf);
}

static void write_one_line(void)
{
	json_t *fields = json_pack("{s:s, s:i, s:s}", "session", "abc", "port", 3000, "msg",
				   "must not replace the message");
	log_set_level(LOG_INFO);
	log_fields(LOG_WARN, "config", fields, "port %d taken", 3000);
	json_decref(fields);
}

static void test_line_is_json(void **state)
{
	char *out = capture_stderr(write_one_line);
	size_t len = strlen(out);
	assert_true(len > 1);
	assert_int_equal(out[len - 1], '\n');
	assert_null(memchr(out, '\n', len - 1)); /* exactly one line */

	json_error_t jerr;
	json_t *line = json_loads(out, 0, &jerr);
	assert_non_null(line);
	assert_string_equal(json_string_value(json_object_get(line, "level")), "warn");
	assert_string_equal(json_string_value(json_object_get(line, "module")), "config");
	assert_string_equal(json_string_value(json_object_get(line, "msg")), "port 3000 taken");
	assert_string_equal(json_string_value(json_object_get(line, "session")), "abc");
	assert_int_equal(json_integer_value(json_object_get(line, "port")), 3000);
	const char *ts = json_string_value(json_object_get(line, "ts"));
	assert_non_null(ts);
	assert_int_equal(strlen(ts), strlen("2024-01-01T00:00:00.000Z"));
	assert_int_equal(ts[strlen(ts) - 1], 'Z');
	json_decref(line);
	free(out);
}

static void write_below_threshold(void)
{
	log_set_level(LOG_ERROR);
	log_info("test", "not written");
	log_warn("test", "not written");
	log_set_level(LOG_INFO);
}

static void test_below_threshold_writes_nothing(void **state)
{
	char *out = capture_stderr(write_below_threshold);
	assert_string_equal(out, "");
	free(out);
}

static void write_control_bytes(void)
{
	log_info(NULL, "tab\there \"quoted\" \x01 and \xc3\xa9");
}

static void test_message_is_escaped(void **state)
{
	char *out = capture_stderr(write_control_bytes);
	json_t *line = json_loads(out, 0, NULL);
	assert_non_null(line);
	assert_null(json_object_get(line, "module"));
	assert_string_equal(json_string_value(json_object_get(line, "msg")),
			    "tab\there \"quoted\" \x01 and \xc3\xa9");
	json_decref(line);
	free(out);
}

static void write_a_flood(void)
{
	for (int i = 0; i < 100; i++)
		log_warn("test", "flood %d", i);
	for (int i = 0; i < 3; i++)
		log_warn("test", "another site %d", i);
	for (int i = 0; i < 50; i++)
		log_info("test", "info is not limited %d", i);
	/* Two places with the same format are two sites. */
	for (int i = 0; i < 30; i++)
		log_warn("test", "%s", "same format, first place");
	for (int i = 0; i < 5; i++)
		log_warn("test", "%s", "same format, second place");
	for (int i = 0; i < 30; i++)
		log_fields_limited(LOG_INFO, "test", NULL, "limited info %d", i);
}

static size_t count(const char *text, const char *needle)
{
	size_t n = 0;
	for (const char *p = strstr(text, needle); p; p = strstr(p + 1, needle))
		n++;
	return n;
}

/* A warning repeated from one place is written 20 times a window; other places and other
 * levels are not held back by it. */
static void test_warnings_are_limited_per_site(void **state)
{
	char *out = capture_stderr(write_a_flood);
	assert_int_equal(count(out, "\"msg\":\"flood "), 20);
	assert_non_null(strstr(out, "\"msg\":\"flood 19\""));
	assert_null(strstr(out, "\"msg\":\"flood 20\""));
	assert_int_equal(count(out, "another site"), 3);
	assert_int_equal(count(out, "info is not limited"), 50);
	assert_int_equal(count(out, "same format, first place"), 20);
	assert_int_equal(count(out, "same format, second place"), 5);
	assert_int_equal(count(out, "limited info"), 20);
	free(out);
}

static void write_text_line(void)
{
	json_t *fields = json_pack("{s:s, s:i, s:s, s:s, s:b, s:{s:i}, s:s}", "session", "abc",
				   "port", 3000, "path", "a b \"c\"", "empty", "", "ok", 1,
				   "limits", "pids", 64, "eq", "k=v");
	log_set_format(LOG_FORMAT_TEXT);
	log_set_level(LOG_INFO);
	log_fields(LOG_WARN, "config", fields, "port %d taken", 3000);
	log_set_format(LOG_FORMAT_JSON);
	json_decref(fields);
}

/* Text: time, level, module, message, then the fields as key=value. */
static void test_text_line(void **state)
{
	char *out = capture_stderr(write_text_line);
	size_t ts = strlen("2024-01-01T00:00:00.000Z");
	assert_true(strlen(out) > ts);
	assert_int_equal(out[4], '-');
	assert_int_equal(out[10], 'T');
	assert_int_equal(out[ts - 1], 'Z');
	assert_string_equal(out + ts, " WARN  config: port 3000 taken session=abc port=3000 "
				      "path=\"a b \\\"c\\\"\" empty=\"\" ok=true "
				      "limits={\"pids\":64} eq=\"k=v\"\n");
	free(out);
}

static void write_hostile_text(void)
{
	json_t *fields = json_pack("{s:s}", "name", "x\x1b]0;owned\x07\ny");
	log_set_format(LOG_FORMAT_TEXT);
	log_fields(LOG_INFO, NULL, fields, "tab\there\x1b[2J\r\nnext \xc3\xa9");
	log_set_format(LOG_FORMAT_JSON);
	json_decref(fields);
}

/* Nothing logged reaches a terminal as a control character: one line, every such byte (and
 * every non-ASCII byte) escaped. */
static void test_text_escapes_control_bytes(void **state)
{
	char *out = capture_stderr(write_hostile_text);
	size_t len = strlen(out);
	assert_int_equal(out[len - 1], '\n');
	for (size_t i = 0; i + 1 < len; i++)
		if ((unsigned char)out[i] < 0x20 || (unsigned char)out[i] >= 0x7f)
			fail_msg("byte 0x%02x at %zu of `%s`", (unsigned char)out[i], i, out);
	const char *rest = out + strlen("2024-01-01T00:00:00.000Z");
	assert_string_equal(rest, " INFO  tab\\there\\x1b[2J\\r\\nnext \\xc3\\xa9 "
				  "name=\"x\\x1b]0;owned\\x07\\ny\"\n");
	free(out);
}

static void test_format_names(void **state)
{
	enum log_format f = LOG_FORMAT_TEXT;
	assert_int_equal(log_format_parse("auto", &f), 0);
	assert_int_equal(f, LOG_FORMAT_AUTO);
	assert_int_equal(log_format_parse("json", &f), 0);
	assert_int_equal(f, LOG_FORMAT_JSON);
	assert_int_equal(log_format_parse("text", &f), 0);
	assert_int_equal(f, LOG_FORMAT_TEXT);
	static const char *const bad[] = { "", "JSON", "pretty", "text ", "jsonl" };
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		f = LOG_FORMAT_TEXT;
		assert_int_equal(log_format_parse(bad[i], &f), -EINVAL);
		assert_int_equal(f, LOG_FORMAT_TEXT);
	}
}

/* auto: text when stderr is a terminal (a pseudo-terminal here), JSON when it is not. */
static void test_auto_follows_the_terminal(void **state)
{
	int master = posix_openpt(O_RDWR | O_NOCTTY);
	assert_true(master >= 0);
	assert_int_equal(grantpt(master), 0);
	assert_int_equal(unlockpt(master), 0);
	int tty = open(ptsname(master), O_RDWR | O_NOCTTY);
	assert_true(tty >= 0);
	int saved = dup(STDERR_FILENO);
	assert_true(dup2(tty, STDERR_FILENO) >= 0);
	log_set_format(LOG_FORMAT_AUTO);
	enum log_format on_tty = log_get_format();
	dup2(saved, STDERR_FILENO);
	close(saved);
	close(tty);
	close(master);
	assert_int_equal(on_tty, LOG_FORMAT_TEXT);

	int p[2];
	assert_int_equal(pipe(p), 0);
	saved = dup(STDERR_FILENO);
	assert_true(dup2(p[1], STDERR_FILENO) >= 0);
	log_set_format(LOG_FORMAT_AUTO);
	enum log_format on_pipe = log_get_format();
	dup2(saved, STDERR_FILENO);
	close(saved);
	close(p[0]);
	close(p[1]);
	assert_int_equal(on_pipe, LOG_FORMAT_JSON);
	log_set_format(LOG_FORMAT_JSON);
}

int main(void)
{
	log_set_format(LOG_FORMAT_JSON); /* whatever stderr is: the JSON tests read JSON */
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_names),
		cmocka_unit_test(test_parse_silent),
		cmocka_unit_test(test_parse_rejects),
		cmocka_unit_test(test_thresholds),
		cmocka_unit_test(test_line_is_json),
		cmocka_unit_test(test_below_threshold_writes_nothing),
		cmocka_unit_test(test_message_is_escaped),
		cmocka_unit_test(test_warnings_are_limited_per_site),
		cmocka_unit_test(test_text_line),
		cmocka_unit_test(test_text_escapes_control_bytes),
		cmocka_unit_test(test_format_names),
		cmocka_unit_test(test_auto_follows_the_terminal),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
