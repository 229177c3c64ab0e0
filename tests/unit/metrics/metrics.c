/* Tests of src/metrics/metrics.c: exposition format, histograms, bounded series. */
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
	return 0;
}

static void test_counter_and_gauge(void **state)
{
	struct metric *c = metrics_counter("reqs_total", "Requests", "route,status");
	struct metric *g = metrics_gauge("temp", "A gauge", NULL);
	metrics_add(c, 1, "/a", "200");
	metrics_add(c, 2, "/a", "200");
	metrics_add(c, 1, "/b", "404");
	metrics_set(g, 3.5);
	char *text = metrics_render(NULL);
	assert_non_null(strstr(text, "# TYPE reqs_total counter\n"));
	assert_non_null(strstr(text, "reqs_total{route=\"/a\",status=\"200\"} 3\n"));
	assert_non_null(strstr(text, "reqs_total{route=\"/b\",status=\"404\"} 1\n"));
	assert_non_null(strstr(text, "temp 3.5\n"));
	free(text);
}

static void test_histogram_buckets_are_cumulative(void **state)
{
	static const double b[] = { 0.001, 0.01, 0.1 };
	struct metric *h = metrics_histogram("lat_seconds", "Latency", NULL, b, 3);
	metrics_observe(h, 0.0005);
	metrics_observe(h, 0.005);
	metrics_observe(h, 5);
	char *text = metrics_render(NULL);
	assert_non_null(strstr(text, "lat_seconds_bucket{le=\"0.001\"} 1\n"));
	assert_non_null(strstr(text, "lat_seconds_bucket{le=\"0.01\"} 2\n"));
	assert_non_null(strstr(text, "lat_seconds_bucket{le=\"0.1\"} 2\n"));
	assert_non_null(strstr(text, "lat_seconds_bucket{le=\"+Inf\"} 3\n"));
	assert_non_null(strstr(text, "lat_seconds_count 3\n"));
	free(text);
}

static void test_label_values_escaped(void **state)
{
	struct metric *c = metrics_counter("esc_total", "Escapes", "v");
	metrics_add(c, 1, "a\"b\\c\nd");
	char *text = metrics_render(NULL);
	assert_non_null(strstr(text, "esc_total{v=\"a\\\"b\\\\c\\nd\"} 1\n"));
	free(text);
}

static void test_series_are_bounded(void **state)
{
	struct metric *c = metrics_counter("many_total", "Many", "path");
	char label[32];
	for (int i = 0; i < 5000; i++) {
		snprintf(label, sizeof(label), "/p%d", i);
		metrics_add(c, 1, label);
	}
	size_t len;
	char *text = metrics_render(&len);
	size_t lines = 0;
	for (char *p = text; (p = strstr(p, "many_total{")); p++)
		lines++;
	assert_true(lines <= 501);
	assert_non_null(strstr(text, "many_total{path=\"other\"}"));
	free(text);
}

static int scraped;
static void on_scrape(void *arg)
{
	scraped++;
}

static void test_scrape_hooks_run(void **state)
{
	metrics_on_scrape(on_scrape, NULL);
	free(metrics_render(NULL));
	free(metrics_render(NULL));
	assert_int_equal(scraped, 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup(test_counter_and_gauge, reset),
		cmocka_unit_test_setup(test_histogram_buckets_are_cumulative, reset),
		cmocka_unit_test_setup(test_label_values_escaped, reset),
		cmocka_unit_test_setup(test_series_are_bounded, reset),
		cmocka_unit_test_setup(test_scrape_hooks_run, reset),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
