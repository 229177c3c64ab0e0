/* log: logging on stderr, as JSON lines or as text for a person at a terminal.
 *
 * One line per event. JSON (for journald, files, and whatever reads them):
 * {"ts":"...","level":"info","module":"session","msg":"...", ...fields}. Text (a terminal):
 * `2026-01-02T03:04:05.678Z INFO  session: message key=value ...`, with every control or
 * non-ASCII byte escaped so that nothing logged can drive the terminal.
 * Safe from any thread: each line is written with a single write(2). Secrets never reach a
 * log call: callers redact URIs with http_redact_uri() and never pass header values. */
#pragma once

#include <jansson.h>
#include <stdbool.h>

enum log_level { LOG_TRACE, LOG_DEBUG, LOG_INFO, LOG_WARN, LOG_ERROR, LOG_FATAL };

/* Sets the minimum level written; the default is LOG_INFO. */
void log_set_level(enum log_level level);
enum log_level log_get_level(void);

/* Parses "trace|debug|info|warn|error|fatal|silent" into *ret; returns 0 or -EINVAL. */
int log_level_parse(const char *s, enum log_level *ret);

enum log_format {
	LOG_FORMAT_AUTO, /* text when stderr is a terminal, else JSON: the default */
	LOG_FORMAT_JSON,
	LOG_FORMAT_TEXT,
};

/* Sets the format of the lines written; LOG_FORMAT_AUTO looks at stderr once, now. */
void log_set_format(enum log_format format);
/* The format lines are written in now (never LOG_FORMAT_AUTO). */
enum log_format log_get_format(void);
/* Parses "auto|json|text" into *ret; returns 0 or -EINVAL. */
int log_format_parse(const char *s, enum log_format *ret);

/* Whether a message at `level` would be written. */
bool log_enabled(enum log_level level);

/* Writes one line. `fields` (may be NULL) is an object merged into the line; it is borrowed.
 * Warnings and errors are rate limited per call site (file and line): 20 lines per 10 s, the
 * first line written after some were left out carrying "suppressedBefore": how many. */
#define log_fields(level, mod, fields, ...) \
	log_fields_at(__FILE__, __LINE__, false, level, mod, fields, __VA_ARGS__)
/* log_fields, rate limited at any level: for lines a client can cause once per attempt (the
 * access log of requests refused at their head). */
#define log_fields_limited(level, mod, fields, ...) \
	log_fields_at(__FILE__, __LINE__, true, level, mod, fields, __VA_ARGS__)
void log_fields_at(const char *file, int line, bool limited, enum log_level level,
		   const char *module, json_t *fields, const char *fmt, ...)
	__attribute__((format(printf, 7, 8)));

#define log_trace(mod, ...) log_fields(LOG_TRACE, mod, NULL, __VA_ARGS__)
#define log_debug(mod, ...) log_fields(LOG_DEBUG, mod, NULL, __VA_ARGS__)
#define log_info(mod, ...)  log_fields(LOG_INFO, mod, NULL, __VA_ARGS__)
#define log_warn(mod, ...)  log_fields(LOG_WARN, mod, NULL, __VA_ARGS__)
#define log_error(mod, ...) log_fields(LOG_ERROR, mod, NULL, __VA_ARGS__)
