#include "util/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "util/cleanup.h"

static enum log_level min_level = LOG_INFO;
static bool silent;

static const char *const level_names[] = { "trace", "debug", "info", "warn", "error", "fatal" };

void log_set_level(enum log_level level)
{
	min_level = level;
	silent = false;
}

enum log_level log_get_level(void)
{
	return min_level;
}

int log_level_parse(const char *s, enum log_level *ret)
{
	for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (strcmp(s, level_names[i]) == 0) {
			*ret = (enum log_level)i;
			return 0;
		}
	}
	if (strcmp(s, "silent") == 0) {
		*ret = LOG_FATAL + 1;
		return 0;
	}
	return -EINVAL;
}

bool log_enabled(enum log_level level)
{
	return !silent && level >= min_level;
}

/* Warnings and errors are limited per call site (its file and line): LOG_SITE_BURST lines a
 * window of LOG_SITE_WINDOW_MS, then nothing until the next window, whose first line says how
 * many were left out. So no client can make the log repeat one warning per attempt. */
#define LOG_SITE_BURST     20
#define LOG_SITE_WINDOW_MS 10000
#define LOG_SITES          256

struct log_site {
	const char *file; /* __FILE__ of the call: one string per source file */
	int line;
	uint64_t window_ms;
	unsigned count;
	unsigned suppressed;
};

static struct log_site sites[LOG_SITES];
static pthread_mutex_t sites_lock = PTHREAD_MUTEX_INITIALIZER;

static uint64_t mono_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Whether a line of this site may be written now; *suppressed gets the count left out
 * before it. A full table lets everything through (it holds more sites than the code has). */
static bool site_admit(const char *file, int line, unsigned *suppressed)
{
	*suppressed = 0;
	size_t h = (((uintptr_t)file >> 3) * 31 + (size_t)line) % LOG_SITES;
	uint64_t now = mono_ms();
	bool ok = true;
	pthread_mutex_lock(&sites_lock);
	for (size_t i = 0; i < LOG_SITES; i++) {
		struct log_site *st = &sites[(h + i) % LOG_SITES];
		if (st->file && (st->file != file || st->line != line))
			continue;
		if (!st->file) {
			st->file = file;
			st->line = line;
			st->window_ms = now;
		}
		if (now - st->window_ms >= LOG_SITE_WINDOW_MS) {
			st->window_ms = now;
			st->count = 0;
		}
		if (st->count < LOG_SITE_BURST) {
			st->count++;
			*suppressed = st->suppressed;
			st->suppressed = 0;
		} else {
			st->suppressed++;
			ok = false;
		}
		break;
	}
	pthread_mutex_unlock(&sites_lock);
	return ok;
}

void log_fields_at(const char *file, int lineno, bool limited, enum log_level level,
		   const char *module, json_t *fields, const char *fmt, ...)
{
	if (!log_enabled(level) || level > LOG_FATAL)
		return;
	unsigned suppressed = 0;
	if ((limited || level >= LOG_WARN) && level < LOG_FATAL &&
	    !site_admit(file, lineno, &suppressed))
		return;

	char msg[2048];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);

	struct timespec ts;
	struct tm tm;
	char when[40];
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	size_t n = strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	snprintf(when + n, sizeof(when) - n, ".%03ldZ", ts.tv_nsec / 1000000);

	json_auto_t *line = json_object();
	json_object_set_new(line, "ts", json_string(when));
	json_object_set_new(line, "level", json_string(level_names[level]));
	if (module)
		json_object_set_new(line, "module", json_string(module));
	json_object_set_new(line, "msg", json_string(msg));
	if (fields)
		json_object_update_missing(line, fields);
	if (suppressed)
		json_object_set_new(line, "suppressedBefore", json_integer(suppressed));

	_cleanup_free_ char *text =
		json_dumps(line, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(15));
	if (!text)
		return;
	size_t len = strlen(text);
	text[len] = '\n'; /* json_dumps allocates len + 1: reuse the terminator */
	ssize_t w = write(STDERR_FILENO, text, len + 1);
	(void)w;
}
