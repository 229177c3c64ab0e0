/* jail_rootfs: what a sandbox's / and /etc/resolv.conf are cloned from.
 *
 * A template's rootfs.ext4 (the image the VM drivers boot) is mounted once per daemon,
 * read-only, on a loop device, as a detached mount that only a descriptor of the daemon's
 * holds: nothing appears in the host's mount table, and the mount, the loop device
 * (autoclear) and the image's use end with the daemon, even after kill -9. Sandboxes get
 * idmapped clones of it. A filesystem of its own, the sandbox's / shows as "/" of a block
 * device in /proc/self/mountinfo, where a bind of the rootfs/ directory would show the host's
 * path. Templates without an image (or whose image lacks a mount point) use rootfs/.
 *
 * The sandbox's resolv.conf is likewise a copy in a detached tmpfs of the daemon's, named by
 * the sandbox's id, rather than a bind of the network module's file, whose host path would
 * show as that mount's root. */
#include "driver/jail/jail.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/cleanup.h"

/* Templates a daemon serves: a handful; past that, images are mounted for each sandbox. */
#define IMAGES_MAX 32
/* Largest resolv.conf copied. */
#define RESOLV_MAX 4096

struct image {
	char *path;
	dev_t dev;
	ino_t ino;
	struct timespec mtime;
	int mnt;
};

static struct {
	pthread_mutex_t lock;
	struct image img[IMAGES_MAX];
	unsigned n;
	int resolv; /* the detached tmpfs of resolv.conf copies; -1 until first used */
} roots = { .lock = PTHREAD_MUTEX_INITIALIZER, .resolv = -1 };

/* Attaches the image read-only to a free loop device (released with its last user). */
static int loop_attach(int img, char *dev, size_t len, struct err *err)
{
	_cleanup_close_ int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	if (ctl < 0)
		return err_sys(err, errno, "jail: /dev/loop-control");
	/* Another process may take the free device first: then ask again. */
	for (int attempt = 0; attempt < 8; attempt++) {
		int n = ioctl(ctl, LOOP_CTL_GET_FREE);
		if (n < 0)
			return err_sys(err, errno, "jail: no free loop device");
		snprintf(dev, len, "/dev/loop%d", n);
		int fd = open(dev, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return err_sys(err, errno, "jail: %s", dev);
		struct loop_config lc = {
			.fd = (uint32_t)img,
			.info = { .lo_flags = LO_FLAGS_READ_ONLY | LO_FLAGS_AUTOCLEAR },
		};
		if (ioctl(fd, LOOP_CONFIGURE, &lc) == 0)
			return fd;
		int e = errno;
		close(fd);
		if (e != EBUSY)
			return err_sys(err, e, "jail: attach to %s", dev);
	}
	return err_set(err, EBUSY, "jail: every free loop device was taken first");
}

/* A detached, read-only mount of the ext4 image at `path`. */
static int mount_image(const char *path, int img, struct err *err)
{
	char dev[32];
	_cleanup_close_ int loop = loop_attach(img, dev, sizeof(dev), err);
	if (loop < 0)
		return loop;
	_cleanup_close_ int fs = (int)syscall(SYS_fsopen, "ext4", FSOPEN_CLOEXEC);
	if (fs < 0)
		return err_sys(err, errno, "jail: fsopen ext4");
	/* noload: no journal replay, which would write to the image. */
	if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "source", dev, 0) < 0 ||
	    syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, "ro", NULL, 0) < 0 ||
	    syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, "noload", NULL, 0) < 0 ||
	    syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
		return err_sys(err, errno, "jail: mount the image `%s`", path);
	int mnt = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
			       MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
	if (mnt < 0)
		return err_sys(err, errno, "jail: mount the image `%s`", path);
	return mnt;
}

static bool same_file(const struct image *im, const char *path, const struct stat *st)
{
	return strcmp(im->path, path) == 0 && im->dev == st->st_dev && im->ino == st->st_ino &&
	       im->mtime.tv_sec == st->st_mtim.tv_sec && im->mtime.tv_nsec == st->st_mtim.tv_nsec;
}

int jail_rootfs_image(const char *path, int *ret, struct err *err)
{
	_cleanup_close_ int img = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (img < 0 || fstat(img, &st) < 0)
		return err_sys(err, errno, "jail: template image `%s`", path);
	pthread_mutex_lock(&roots.lock);
	int r = 0;
	for (unsigned i = 0; i < roots.n; i++) {
		struct image *im = &roots.img[i];
		if (strcmp(im->path, path) != 0)
			continue;
		if (same_file(im, path, &st)) {
			/* A duplicate: a rebuild may release the kept one while a sandbox is being
			 * made from it, and its number be reused by another kept mount meanwhile.
			 */
			*ret = fcntl(im->mnt, F_DUPFD_CLOEXEC, 3);
			if (*ret < 0)
				r = err_sys(err, errno, "jail: template image `%s`", path);
			goto out;
		}
		/* Rebuilt: sandboxes made from the old one keep their own clones. */
		jail_keep_release(im->mnt);
		free(im->path);
		*im = roots.img[--roots.n];
		break;
	}
	if (roots.n == IMAGES_MAX) {
		r = err_set(err, ENOSPC, "jail: more than %d template images", IMAGES_MAX);
		goto out;
	}
	int mnt = mount_image(path, img, err);
	if (mnt >= 0)
		mnt = jail_keep(mnt, err);
	if (mnt < 0) {
		r = mnt;
		goto out;
	}
	roots.img[roots.n++] = (struct image){
		.path = xstrdup(path),
		.dev = st.st_dev,
		.ino = st.st_ino,
		.mtime = st.st_mtim,
		.mnt = mnt,
	};
	*ret = fcntl(mnt, F_DUPFD_CLOEXEC, 3);
	if (*ret < 0)
		r = err_sys(err, errno, "jail: template image `%s`", path);
out:
	pthread_mutex_unlock(&roots.lock);
	return r;
}

/* The tmpfs of resolv.conf copies, made on first use. Called with roots.lock held. */
static int resolv_fs(struct err *err)
{
	if (roots.resolv >= 0)
		return roots.resolv;
	_cleanup_close_ int fs = (int)syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC);
	if (fs < 0 || syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "size", "4m", 0) < 0 ||
	    syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "mode", "0755", 0) < 0 ||
	    syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
		return err_sys(err, errno, "jail: tmpfs for resolv.conf");
	int mnt = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
			       MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
	if (mnt < 0)
		return err_sys(err, errno, "jail: tmpfs for resolv.conf");
	mnt = jail_keep(mnt, err);
	return mnt < 0 ? mnt : (roots.resolv = mnt);
}

static int copy_file(int from, int dir, const char *name, struct err *err)
{
	char buf[RESOLV_MAX];
	ssize_t n = read(from, buf, sizeof(buf));
	if (n < 0)
		return err_sys(err, errno, "jail: read resolv.conf");
	_cleanup_close_ int to = openat(dir, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (to < 0 || write(to, buf, (size_t)n) != n)
		return err_sys(err, errno, "jail: copy resolv.conf");
	return 0;
}

int jail_resolv_copy(const char *id, const char *host_path, int *ret_dir, struct err *err)
{
	_cleanup_close_ int from = open(host_path, O_RDONLY | O_CLOEXEC);
	if (from < 0)
		return err_sys(err, errno, "jail: %s", host_path);
	pthread_mutex_lock(&roots.lock);
	int dir = resolv_fs(err);
	int r = dir < 0 ? dir : copy_file(from, dir, id, err);
	pthread_mutex_unlock(&roots.lock);
	if (r == 0)
		*ret_dir = dir;
	return r;
}

void jail_resolv_remove(const char *id)
{
	pthread_mutex_lock(&roots.lock);
	if (roots.resolv >= 0)
		unlinkat(roots.resolv, id, 0);
	pthread_mutex_unlock(&roots.lock);
}
