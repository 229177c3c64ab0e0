/* fs: small file-system helpers shared by modules. */
#pragma once

#include <sys/types.h>

/* Creates `path` and its missing parents with `mode`; an existing directory is fine.
 * Returns 0 or negative errno. */
int fs_mkdir_p(const char *path, mode_t mode);

/* Removes a directory tree without following symlinks or crossing mount points; a missing
 * path is fine. Returns 0 or negative errno. */
int fs_rm_rf(const char *path);
