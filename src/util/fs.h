/* fs: small file-system helpers shared by modules. */
#pragma once

#include <stdint.h>
#include <sys/types.h>

#include "util/err.h"

/* Creates `path` and its missing parents with `mode`; an existing directory is fine.
 * Returns 0 or negative errno. */
int fs_mkdir_p(const char *path, mode_t mode);

/* Removes a file or a directory tree without following symlinks or entering another file
 * system mounted below it (EBUSY for that part); a missing path is fine. Returns 0 or
 * negative errno, with the first failure in err. */
int fs_rm_rf(const char *path, struct err *err);

/* Copies the data of `from` (its first size bytes) into `to`, which is at least that large
 * and reads as zeros: the holes of `from` are skipped, so that sparse stays sparse. Returns 0
 * or negative errno (err says which step failed). */
int fs_copy_data(int from, int to, uint64_t size, struct err *err);
