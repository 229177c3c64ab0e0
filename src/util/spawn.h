/* spawn: running the host's helper programs (a VMM's --version, a probe) from blocking code,
 * with a bound on how long they may take. */
#pragma once

#include <stddef.h>

/* The absolute path of `bin`, looked up in PATH when it has no slash; NULL when there is no
 * executable file of that name. Caller frees. */
char *spawn_find_binary(const char *bin);

/* Runs argv (argv[0] an absolute path) with stdin from /dev/null, no environment but a plain
 * PATH, its stdout and stderr into out (at most cap - 1 bytes, NUL-terminated) when out is
 * not NULL, and kills it at timeout_ms. Returns its wait status, -ETIMEDOUT when it was
 * killed for taking too long, or another negative errno when it could not be started. */
int spawn_run_bounded(char *const argv[], int timeout_ms, char *out, size_t cap);
