#include "util/fs.h"

#include <errno.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/cleanup.h"

int fs_mkdir_p(const char *path, mode_t mode)
{
	_cleanup_free_ char *p = xstrdup(path);
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, mode) < 0 && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	return mkdir(p, mode) < 0 && errno != EEXIST ? -errno : 0;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		return rmdir(path) < 0 && errno != ENOENT ? -1 : 0;
	return unlink(path) < 0 && errno != ENOENT ? -1 : 0;
}

int fs_rm_rf(const char *path)
{
	if (access(path, F_OK) < 0)
		return errno == ENOENT ? 0 : -errno;
	return nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT) < 0 ? -errno : 0;
}
