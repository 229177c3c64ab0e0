/* jail_volume: persistent volumes in jail sandboxes (docs/storage.md).
 *
 * A volume is an ext4 image with a name, under SANDBOX_STATE_DIR/volumes (session/volume.c
 * makes it and records it). While sandboxes use it, it is on a loop device (autoclear) and
 * mounted once, as a detached mount this file holds; every sandbox gets a clone of that mount
 * idmapped to its own user namespace, so that the files keep canonical ids on the disk (the
 * command user's are 1000, root's 0) whatever host range the sandbox has, and one superblock
 * serves a writer and any number of readers at once. When the last sandbox using it is
 * destroyed, the daemon closes its mount, the superblock goes with the sandboxes' mount
 * namespaces and the loop device detaches by itself.
 *
 * The one thing that must never happen is two superblocks of the same image (two loop
 * devices, each mounted): a new first use waits until no loop device backs the image any
 * more. */
#include "driver/jail/jail.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "util/cleanup.h"

/* How long a first use waits for the loop device of the previous one to detach. */
#define RELEASE_WAIT_MS 3000

struct open_volume {
	char *image; /* its real path */
	int mnt;
	unsigned refs;
	struct open_volume *next;
};

static struct {
	pthread_mutex_t lock;
	struct open_volume *open;
} jail_volume_mod = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* Whether a loop device is attached to the image (its backing file, as the kernel names it). */
static bool loop_holds(const char *real)
{
	_cleanup_closedir_ DIR *d = opendir("/sys/block");
	if (!d)
		return false;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, "loop", 4) != 0)
			continue;
		char path[PATH_MAX], back[PATH_MAX];
		snprintf(path, sizeof(path), "/sys/block/%s/loop/backing_file", e->d_name);
		_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ssize_t n = read(fd, back, sizeof(back) - 1);
		if (n <= 0)
			continue;
		back[n] = '\0';
		if (back[n - 1] == '\n')
			back[n - 1] = '\0';
		if (strcmp(back, real) == 0)
			return true;
	}
	return false;
}

static int wait_released(const char *real, struct err *err)
{
	for (int waited = 0; loop_holds(real); waited += 10) {
		if (waited >= RELEASE_WAIT_MS)
			return err_set(
				err, EBUSY,
				"the volume's previous use has not released it yet; try again");
		struct timespec ts = { 0, 10 * 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	return 0;
}

static int mount_image(const char *real, struct err *err)
{
	int r = wait_released(real, err);
	if (r < 0)
		return r;
	_cleanup_close_ int img = open(real, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (img < 0)
		return err_sys(err, errno, "jail: volume image");
	char mark[4];
	if (fgetxattr(img, DRIVER_XATTR_GUEST_WRITTEN, mark, sizeof(mark)) >= 0)
		return err_set(
			err, DRIVER_ECONFLICT,
			"this volume was mounted read-write in a VM: its filesystem is what "
			"a guest's kernel wrote, which the host's kernel does not mount "
			"(use it with the qemu driver, or copy its files into a new volume)");
	char dev[32];
	_cleanup_close_ int loop = jail_loop_attach_rw(img, dev, sizeof(dev), err);
	if (loop < 0)
		return loop;
	/* The mount holds the device from now on: closing ours leaves it attached. */
	return jail_disk_mount(dev, err);
}

int jail_volume_open(const char *image, int *ret, struct err *err)
{
	char real[PATH_MAX];
	if (!realpath(image, real))
		return err_sys(err, errno, "jail: volume image");
	pthread_mutex_lock(&jail_volume_mod.lock);
	struct open_volume *v;
	for (v = jail_volume_mod.open; v; v = v->next)
		if (strcmp(v->image, real) == 0)
			break;
	int r = 0;
	if (v) {
		v->refs++;
	} else {
		int mnt = mount_image(real, err);
		if (mnt >= 0)
			mnt = jail_keep(mnt, err);
		if (mnt < 0) {
			r = mnt;
		} else {
			v = xcalloc(1, sizeof(*v));
			v->image = xstrdup(real);
			v->mnt = mnt;
			v->refs = 1;
			v->next = jail_volume_mod.open;
			jail_volume_mod.open = v;
		}
	}
	if (r == 0)
		*ret = v->mnt;
	pthread_mutex_unlock(&jail_volume_mod.lock);
	return r;
}

void jail_volume_close(const char *image)
{
	char real[PATH_MAX];
	if (!realpath(image, real))
		return;
	pthread_mutex_lock(&jail_volume_mod.lock);
	for (struct open_volume **pp = &jail_volume_mod.open; *pp; pp = &(*pp)->next) {
		struct open_volume *v = *pp;
		if (strcmp(v->image, real) != 0)
			continue;
		if (--v->refs == 0) {
			*pp = v->next;
			jail_keep_release(v->mnt);
			free(v->image);
			free(v);
		}
		break;
	}
	pthread_mutex_unlock(&jail_volume_mod.lock);
}

int jail_volume_clone(int mnt, int userns, bool read_only, struct err *err)
{
	_cleanup_close_ int fd = jail_keep_clone(mnt, "", 0);
	if (fd < 0)
		return err_sys(err, -fd, "jail: clone the volume's mount");
	struct mount_attr attr = {
		.attr_set = MOUNT_ATTR_IDMAP | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
			    (read_only ? MOUNT_ATTR_RDONLY : 0),
		.propagation = MS_PRIVATE, /* never a peer of anything of the host's */
		.userns_fd = (uint64_t)userns,
	};
	if (syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0)
		return err_sys(err, errno, "jail: idmapped mount of the volume");
	return TAKE_FD(fd);
}

int jail_volume_mountpoint(int root, const char *path, uint32_t uid_base, struct err *err)
{
	_cleanup_free_ char *copy = xstrdup(path);
	_cleanup_close_ int dir = openat(root, ".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return err_sys(err, errno, "jail: open the sandbox's root");
	char *save = NULL;
	for (char *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		if (mkdirat(dir, c, 0755) == 0) {
			if (fchownat(dir, c, uid_base, uid_base, AT_SYMLINK_NOFOLLOW) < 0)
				return err_sys(err, errno, "jail: volume mount point %s", path);
		} else if (errno != EEXIST) {
			return err_sys(err, errno, "jail: make the volume's mount point %s", path);
		}
		int next = openat(dir, c, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0) {
			int e = errno;
			if (e == ELOOP || e == ENOTDIR)
				return err_set(err, DRIVER_EREQUEST,
					       "volume mount point %s: `%s` is not a directory of "
					       "the template (a symbolic link or a file)",
					       path, c);
			return err_sys(err, e, "jail: volume mount point %s", path);
		}
		close(dir);
		dir = next;
	}
	return 0;
}
