/* Tests of src/metrics/history.c and metrics_total: samples taken from the daemon's metrics,
 * a ring of fixed size, read after a time and up to a count. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "metrics/metrics.h"

static int reset(void **state)
{
	metrics_reset();
	metrics_history_reset();
	return 0;
}

static bool five_hundred(const char *status)
{
	return status[0] == '5';
}

static void test_total_sums_the_series_a_label_keeps(void **state)
{
	struct metric *c = metrics_counter("reqs_total", "Requests", "route,status");
	metrics_add(c, 2, "/a", "500");
	metrics_add(c, 3, "/b", "503");
	metrics_add(c, 7, "/a", "200");
	assert_true(metrics_total(c, "status", five_hundred, NULL) == 5);
	assert_true(metrics_total(c, NULL, NULL, NULL) == 12);
	/* A label it does not have: no series. */
	assert_true(metrics_total(c, "nope", five_hundred, NULL) == 0);
	struct metric *h = metrics_histogram("lat_seconds", "Latency", "driver", NULL, 0);
	metrics_observe(h, 0.5, "jail");
	metrics_observe(h, 0.25, "qemu");
	uint64_t n = 0;
	assert_true(metrics_total(h, NULL, NULL, &n) == 0.75);
	assert_int_equal(n, 2);
	assert_true(metrics_total(NULL, NULL, NULL, &n) == 0);
	assert_int_equal(n, 0);
}

static void test_sample_reads_the_daemon_metrics(void **state)
{
	metrics_init();
	metrics_set(metrics_daemon.exec_sessions_active, 4);
	metrics_observe(metrics_daemon.vm_creation_time, 0.5, "jail", "pool");
	metrics_observe(metrics_daemon.vm_creation_time, 1.5, "jail", "cold");
	metrics_add(metrics_daemon.exec_message_total, 3, "execute");
	metrics_add(metrics_daemon.exec_message_total, 9, "read_file");
	metrics_add(metrics_daemon.http_requests_total, 2, "/exec", "POST", "502");
	metrics_add(metrics_daemon.http_requests_total, 5, "/exec", "POST", "404");
	metrics_add(metrics_daemon.vsock_errors_total, 1, "reset");
	metrics_add(metrics_daemon.guest_protocol_errors_total, 1, "frame");
	metrics_add(metrics_daemon.session_creations_total, 1, "base", "jail", "failure");
	metrics_add(metrics_daemon.session_creations_total, 6, "base", "jail", "success");
	metrics_history_sample(1000);
	struct metrics_sample s[2];
	assert_int_equal(metrics_history_read(0, s, 2), 1);
	assert_int_equal(s[0].t_ms, 1000);
	assert_true(s[0].sessions == 4);
	assert_int_equal(s[0].creations, 2);
	assert_true(s[0].creation_s == 2.0);
	assert_true(s[0].executes == 3);
	assert_true(s[0].errors == 5);
}

static void test_ring_keeps_the_newest(void **state)
{
	/* Twice round the ring and some. */
	for (uint64_t i = 1; i <= 2 * METRICS_HISTORY_MAX + 7; i++)
		metrics_history_add(&(struct metrics_sample){ .t_ms = i * 10, .executes = i });
	static struct metrics_sample s[METRICS_HISTORY_MAX + 1];
	size_t n = metrics_history_read(0, s, METRICS_HISTORY_MAX + 1);
	assert_int_equal(n, METRICS_HISTORY_MAX);
	for (size_t i = 0; i < n; i++)
		assert_int_equal(s[i].t_ms, (METRICS_HISTORY_MAX + 8 + i) * 10);
	/* After a time: only later ones; a limit: the newest of those, oldest first. */
	uint64_t last = (2 * METRICS_HISTORY_MAX + 7) * 10;
	assert_int_equal(metrics_history_read(last - 30, s, 10), 3);
	assert_int_equal(s[0].t_ms, last - 20);
	assert_int_equal(s[2].t_ms, last);
	assert_int_equal(metrics_history_read(0, s, 2), 2);
	assert_int_equal(s[0].t_ms, last - 10);
	assert_int_equal(s[1].t_ms, last);
	assert_int_equal(metrics_history_read(last, s, 10), 0);
}

static void test_a_clock_set_back_does_not_hide_samples(void **state)
{
	uint64_t times[] = { 100, 200, 50, 300 };
	for (size_t i = 0; i < 4; i++)
		metrics_history_add(&(struct metrics_sample){ .t_ms = times[i] });
	struct metrics_sample s[4];
	assert_int_equal(metrics_history_read(150, s, 4), 2);
	assert_int_equal(s[0].t_ms, 200);
	assert_int_equal(s[1].t_ms, 300);
	metrics_history_reset();
	assert_int_equal(metrics_history_read(0, s, 4), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_total_sums_the_series_a_label_keeps, reset),
		cmocka_unit_test_setup(test_sample_reads_the_daemon_metrics, reset),
		cmocka_unit_test_setup(test_ring_keeps_the_newest, reset),
		cmocka_unit_test_setup(test_a_clock_set_back_does_not_hide_samples, reset),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
