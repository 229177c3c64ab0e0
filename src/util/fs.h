/* fs: small file-system helpers shared by modules. */
#pragma once

#include <stdint.h>
#include <sys/types.h>

#include "util/err.h"

/* Creates `path` and its missing parents with `mode`; an existing directory is fine.
 * Returns 0 or negative errno. */
int fs_mkdir_p(const char *path, mode_t mode);

/* The first line of the file at `path`, without its newline, into buf (NUL-terminated, cut
 * to len - 1 bytes): 0, or a negative errno. For /proc and /sys files. */
int fs_read_line(const char *path, char *buf, size_t len);

/* Removes a file or a directory tree without following symlinks or entering another file
 * system mounted below it (EBUSY for that part); a missing path is fine. Returns 0 or
 * negative errno, with the first failure in err. */
int fs_rm_rf(const char *path, struct err *err);

/* Copies the data of `from` (its first size bytes) into `to`, which is at least that large
 * and reads as zeros: the holes of `from` are skipped, so that sparse stays sparse. Returns 0
 * or negative errno (err says which step failed). */
int fs_copy_data(int from, int to, uint64_t size, struct err *err);
