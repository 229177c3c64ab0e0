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
/* Decided at the first line (or log_set_format): whether stderr is a terminal. */
static int format = LOG_FORMAT_AUTO;

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

static enum log_format resolve(enum log_format f)
{
	if (f != LOG_FORMAT_AUTO)
		return f;
	return isatty(STDERR_FILENO) ? LOG_FORMAT_TEXT : LOG_FORMAT_JSON;
}

void log_set_format(enum log_format f)
{
	__atomic_store_n(&format, (int)resolve(f), __ATOMIC_RELAXED);
}

enum log_format log_get_format(void)
{
	int f = __atomic_load_n(&format, __ATOMIC_RELAXED);
	if (f == LOG_FORMAT_AUTO) {
		f = (int)resolve(LOG_FORMAT_AUTO);
		__atomic_store_n(&format, f, __ATOMIC_RELAXED);
	}
	return (enum log_format)f;
}

int log_format_parse(const char *s, enum log_format *ret)
{
	static const char *const names[] = { "auto", "json", "text" };
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (strcmp(s, names[i]) == 0) {
			*ret = (enum log_format)i;
			return 0;
		}
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

/* --- the text format ---------------------------------------------------------------- */

struct buf {
	char *p;
	size_t len, cap;
};

static void buf_add(struct buf *b, const char *s, size_t n)
{
	if (b->len + n + 1 > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (b->len + n + 1 > cap)
			cap *= 2;
		b->p = xrealloc(b->p, cap);
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
	b->p[b->len] = '\0';
}

static void buf_str(struct buf *b, const char *s)
{
	buf_add(b, s, strlen(s));
}

/* s with every byte that is not printable ASCII escaped (\n, \t, \xNN); in quotes, a quote
 * and a backslash too. A terminal shows what was logged and is driven by none of it. */
static void buf_escaped(struct buf *b, const char *s, size_t n, bool quoted)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		char esc[8];
		if (c == '\n')
			buf_str(b, "\\n");
		else if (c == '\t')
			buf_str(b, "\\t");
		else if (c == '\r')
			buf_str(b, "\\r");
		else if (c < 0x20 || c >= 0x7f) {
			snprintf(esc, sizeof(esc), "\\x%02x", c);
			buf_str(b, esc);
		} else if (quoted && (c == '"' || c == '\\')) {
			esc[0] = '\\', esc[1] = (char)c;
			buf_add(b, esc, 2);
		} else {
			buf_add(b, (const char *)&c, 1);
		}
	}
}

/* Whether a string value can be shown without quotes: non-empty printable ASCII without a
 * space, a quote, a backslash or `=`. */
static bool bare(const char *s, size_t n)
{
	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c <= 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '=')
			return false;
	}
	return true;
}

static void buf_value(struct buf *b, json_t *v)
{
	if (json_is_string(v)) {
		const char *s = json_string_value(v);
		size_t n = json_string_length(v);
		if (bare(s, n)) {
			buf_add(b, s, n);
		} else {
			buf_str(b, "\"");
			buf_escaped(b, s, n, true);
			buf_str(b, "\"");
		}
		return;
	}
	/* Numbers, booleans, null, objects and arrays: compact JSON, which escapes its strings. */
	_cleanup_free_ char *j = json_dumps(v, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_ENCODE_ANY |
						       JSON_REAL_PRECISION(15));
	if (j)
		buf_escaped(b, j, strlen(j), false);
}

/* `TS LEVEL module: msg key=value ...` from a line's object (caller frees). */
static char *text_line(json_t *line)
{
	static const char *const upper[] = { "TRACE", "DEBUG", "INFO ", "WARN ", "ERROR", "FATAL" };
	struct buf b = { 0 };
	const char *level = json_string_value(json_object_get(line, "level"));
	const char *module = json_string_value(json_object_get(line, "module"));
	json_t *msg = json_object_get(line, "msg");
	buf_str(&b, json_string_value(json_object_get(line, "ts")));
	buf_str(&b, " ");
	for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++)
		if (strcmp(level, level_names[i]) == 0)
			buf_str(&b, upper[i]);
	buf_str(&b, " ");
	if (module) {
		buf_escaped(&b, module, strlen(module), false);
		buf_str(&b, ": ");
	}
	buf_escaped(&b, json_string_value(msg), json_string_length(msg), false);
	const char *key;
	json_t *v;
	json_object_foreach (line, key, v) {
		if (!strcmp(key, "ts") || !strcmp(key, "level") || !strcmp(key, "module") ||
		    !strcmp(key, "msg"))
			continue;
		buf_str(&b, " ");
		buf_escaped(&b, key, strlen(key), false);
		buf_str(&b, "=");
		buf_value(&b, v);
	}
	return b.p;
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

	_cleanup_free_ char *text = NULL;
	if (log_get_format() == LOG_FORMAT_TEXT)
		text = text_line(line);
	else
		text = json_dumps(line, JSON_COMPACT | JSON_ENSURE_ASCII | JSON_REAL_PRECISION(15));
	if (!text)
		return;
	size_t len = strlen(text);
	text[len] = '\n'; /* both allocate len + 1: reuse the terminator */
	ssize_t w = write(STDERR_FILENO, text, len + 1);
	(void)w;
}
