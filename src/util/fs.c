#include "util/fs.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/cleanup.h"

/* Data is copied in pieces of this size. */
#define COPY_CHUNK (1u << 20)

int fs_copy_data(int from, int to, uint64_t size, struct err *err)
{
	_cleanup_free_ char *buf = xmalloc(COPY_CHUNK);
	off_t at = 0;
	while ((uint64_t)at < size) {
		off_t data = lseek(from, at, SEEK_DATA);
		if (data < 0 && errno == ENXIO)
			return 0; /* only a hole is left */
		if (data < 0)
			return err_sys(err, errno, "seeking data");
		off_t hole = lseek(from, data, SEEK_HOLE);
		if (hole < 0)
			return err_sys(err, errno, "seeking a hole");
		if ((uint64_t)hole > size)
			hole = (off_t)size;
		for (off_t o = data; o < hole;) {
			size_t want =
				(size_t)(hole - o) < COPY_CHUNK ? (size_t)(hole - o) : COPY_CHUNK;
			ssize_t n = pread(from, buf, want, o);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				return err_sys(err, n < 0 ? errno : EIO, "reading");
			for (ssize_t w = 0; w < n;) {
				ssize_t m = pwrite(to, buf + w, (size_t)(n - w), o + w);
				if (m < 0 && errno == EINTR)
					continue;
				if (m <= 0)
					return err_sys(err, m < 0 ? errno : EIO, "writing");
				w += m;
			}
			o += n;
		}
		at = hole;
	}
	return 0;
}

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

/* Removes `name` under dirfd (dev: the device it must be on; 0: any). */
static int rmtree_at(int dirfd, const char *name, dev_t dev, struct err *err)
{
	if (unlinkat(dirfd, name, 0) == 0 || errno == ENOENT)
		return 0;
	if (errno != EISDIR && errno != EPERM)
		return err_sys(err, errno, "removing `%s`", name);
	int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : err_sys(err, errno, "opening `%s`", name);
	struct stat st;
	if (fstat(fd, &st) < 0 || (dev && st.st_dev != dev)) {
		/* Another file system mounted here: what it holds is not ours to remove. */
		int e = errno;
		close(fd);
		return dev && st.st_dev != dev ? err_set(err, EBUSY, "`%s` is a mount point", name)
					       : err_sys(err, e, "stat `%s`", name);
	}
	_cleanup_closedir_ DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return err_sys(err, errno, "reading `%s`", name);
	}
	int r = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		int q = rmtree_at(fd, de->d_name, st.st_dev, err);
		if (q < 0 && r == 0)
			r = q;
	}
	if (unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT && r == 0)
		r = err_sys(err, errno, "removing `%s`", name);
	return r;
}

int fs_rm_rf(const char *path, struct err *err)
{
	return rmtree_at(AT_FDCWD, path, 0, err);
}

int fs_read_line(const char *path, char *buf, size_t len)
{
	buf[0] = '\0';
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, len - 1);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}
