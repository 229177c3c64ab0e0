/* size: the one syntax for sizes in bytes, shared by the daemon's settings and the CLI. */
#pragma once

#include <stdint.h>

/* The largest size accepted: what a JSON integer (int64) holds. */
#define SIZE_PARSE_MAX ((uint64_t)INT64_MAX)

/* Parses a size: decimal digits, optionally followed by one of K, M, G, T (either case;
 * powers of 1024), itself optionally followed by "B" or "iB" ("512M", "512MiB", "4g",
 * "1048576"). Nothing else: no sign, no spaces, no fraction. Returns 0 with *ret set, or
 * -EINVAL (not a size), -EDOM (negative) or -ERANGE (above SIZE_PARSE_MAX); *ret is set only on
 * success. */
int size_parse(const char *s, uint64_t *ret);

/* What a non-zero return of size_parse means, to follow "`VALUE` is " in a message;
 * a static string. */
const char *size_parse_problem(int r);
