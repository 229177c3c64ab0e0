/* Tests of loop_log_libevent (src/loop.c): libevent's own messages become JSON log lines,
 * at most LOOP_LIBEVENT_LOG_BURST a second, the dropped ones counted. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>
#include <jansson.h>

#include "loop.h"
#include "util/cleanup.h"
#include "util/log.h"

/* A public way to make libevent warn: a base with every method avoided has none left. */
static void provoke(void)
{
	struct event_config *cfg = event_config_new();
	const char **methods = event_get_supported_methods();
	for (int i = 0; methods[i]; i++)
		event_config_avoid_method(cfg, methods[i]);
	struct event_base *base = event_base_new_with_config(cfg);
	assert_null(base);
	event_config_free(cfg);
}

static void test_libevent_messages_are_bounded_json_lines(void **state)
{
	char path[] = "/tmp/test-loop-log-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	int saved = dup(2);
	assert_int_equal(dup2(fd, 2), 2);
	loop_log_libevent();
	for (int i = 0; i < 100; i++)
		provoke();
	dup2(saved, 2);
	close(saved);

	_cleanup_free_ char *text = xcalloc(1, 1 << 16);
	assert_true(pread(fd, text, (1 << 16) - 1, 0) > 0);
	close(fd);
	unsigned lines = 0;
	for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
	     line = strtok_r(NULL, "\n", &save)) {
		json_auto_t *j = json_loads(line, 0, NULL);
		assert_non_null(j); /* every line is JSON */
		assert_string_equal(json_string_value(json_object_get(j, "module")), "libevent");
		assert_non_null(strstr(json_string_value(json_object_get(j, "msg")),
				       "no event mechanism available"));
		lines++;
	}
	/* 100 in a burst: the first ones only (a burst may straddle a second). */
	assert_true(lines >= 1);
	assert_true(lines <= 2 * LOOP_LIBEVENT_LOG_BURST);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_libevent_messages_are_bounded_json_lines),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
