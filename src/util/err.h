/* err: the error object every fallible function fills in.
 *
 * Functions return int (0 or positive on success, negative errno on failure) and take
 * `struct err *err` as their last argument. err_set() formats a message meant for the API
 * caller and returns -errnum, so that `return err_set(err, ENOENT, "no template `%s`", n);`
 * composes. err_wrap() prefixes context to a message already set. A NULL err is allowed:
 * the message is then dropped. */
#pragma once

#include <stddef.h>

#define ERR_MSG_MAX 512

struct err {
	int errnum;            /* positive errno-style code, 0 when no error */
	char msg[ERR_MSG_MAX]; /* human-readable, safe to show to the API caller */
};

/* Sets errnum and message; returns -errnum (or -EIO when errnum is 0). */
int err_set(struct err *err, int errnum, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Like err_set, appending ": strerror(errnum)". */
int err_sys(struct err *err, int errnum, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Prefixes "context: " to the current message; returns -errnum. */
int err_wrap(struct err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Clears the error. */
void err_clear(struct err *err);

/* Copies src into dst (either may be NULL); returns -src->errnum. */
int err_copy(struct err *dst, const struct err *src);

/* The symbolic name of an errno value ("ENOENT"), or "EIO" when unknown. */
const char *err_name(int errnum);

/* The errno value of a symbolic name err_name() gives, or 0 when it gives no such name. */
int err_from_name(const char *name);
