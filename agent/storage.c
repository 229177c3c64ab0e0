/* storage: a VM's disk and volumes, mounted at its first `resume` (see init.h).
 *
 * The host binds a clone's drives to its images before the restore (the snapshot had
 * placeholders); the guest finds each by its serial, never by its name /dev/vdX. With a
 * disk, the root becomes an overlay: lower, the template's read-only root; upper and work on
 * the disk, with /workspace and /tmp directories of the upper layer. The agent moves /proc,
 * /sys and /dev into it, gives it a new /run, pivots into it and lets the old root's other
 * mounts (the boot-time /workspace and /tmp tmpfs) go. Volumes are then mounted at their
 * paths, whose missing directories are made in the new root. */
#include "init.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "agent.h"
#include "util/cleanup.h"

#define STORAGE_DIR  "/run/sandbox"
#define STORAGE_DISK STORAGE_DIR "/disk"
#define STORAGE_ROOT STORAGE_DIR "/root"

/* /dev/vdX of the drive whose serial is `serial`. */
static int find_drive(const char *serial, char *dev, size_t n, struct err *err)
{
	_cleanup_closedir_ DIR *d = opendir("/sys/block");
	if (!d)
		return err_sys(err, errno, "/sys/block");
	struct dirent *e;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, "vd", 2) != 0 || strlen(e->d_name) > 16)
			continue;
		char path[64], buf[64];
		snprintf(path, sizeof(path), "/sys/block/%s/serial", e->d_name);
		_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ssize_t k = read(fd, buf, sizeof(buf) - 1);
		if (k <= 0)
			continue;
		buf[k] = '\0';
		buf[strcspn(buf, "\n")] = '\0';
		if (strcmp(buf, serial) == 0) {
			snprintf(dev, n, "/dev/%s", e->d_name);
			return 0;
		}
	}
	return err_set(err, ENODEV, "no drive with serial `%s`", serial);
}

static int make_dir(const char *path, mode_t mode, uid_t owner, struct err *err)
{
	if (mkdir(path, mode) < 0 && errno != EEXIST)
		return err_sys(err, errno, "mkdir %s", path);
	if (chown(path, owner, owner) < 0 || chmod(path, mode) < 0)
		return err_sys(err, errno, "%s", path);
	return 0;
}

static int move_mount_into(const char *what, struct err *err)
{
	char dst[64];
	snprintf(dst, sizeof(dst), STORAGE_ROOT "%s", what);
	if (mount(what, dst, NULL, MS_MOVE, NULL) < 0)
		return err_sys(err, errno, "moving %s into the new root", what);
	return 0;
}

/* The disk's filesystem, its layout, the overlay and the pivot into it. */
static int setup_disk(struct agent *a, const char *serial, struct err *err)
{
	char dev[32];
	int r = find_drive(serial, dev, sizeof(dev), err);
	if (r < 0)
		return r;
	if ((r = make_dir(STORAGE_DIR, 0700, 0, err)) < 0 ||
	    (r = make_dir(STORAGE_DISK, 0700, 0, err)) < 0 ||
	    (r = make_dir(STORAGE_ROOT, 0755, 0, err)) < 0)
		return r;
	/* The host made it without zeroing its inode tables: nothing but writes allocates. */
	if (mount(dev, STORAGE_DISK, "ext4", 0, "noinit_itable") < 0)
		return err_sys(err, errno, "mounting the disk %s", dev);
	uid_t user = a->as_user ? a->uid : 0;
	if ((r = make_dir(STORAGE_DISK "/upper", 0755, 0, err)) < 0 ||
	    (r = make_dir(STORAGE_DISK "/work", 0700, 0, err)) < 0 ||
	    (r = make_dir(STORAGE_DISK "/upper/workspace", 0755, user, err)) < 0 ||
	    (r = make_dir(STORAGE_DISK "/upper/tmp", 01777, 0, err)) < 0)
		return r;
	if (mount("sandbox", STORAGE_ROOT, "overlay", 0,
		  "lowerdir=/,upperdir=" STORAGE_DISK "/upper,workdir=" STORAGE_DISK "/work") < 0)
		return err_sys(err, errno, "the overlay of the root and the disk");
	if ((r = move_mount_into("/proc", err)) < 0 || (r = move_mount_into("/sys", err)) < 0 ||
	    (r = move_mount_into("/dev", err)) < 0)
		return r;
	if (mount("tmpfs", STORAGE_ROOT "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") < 0)
		return err_sys(err, errno, "a /run in the new root");
	/* The old root ends up on top of the new one, and is detached with what is mounted on
	 * it. The overlay keeps its layers. */
	if (chdir(STORAGE_ROOT) < 0 || syscall(SYS_pivot_root, ".", ".") < 0)
		return err_sys(err, errno, "pivot_root into the overlay");
	if (umount2(".", MNT_DETACH) < 0)
		return err_sys(err, errno, "detaching the old root");
	if (chdir("/") < 0)
		return err_sys(err, errno, "chdir /");
	return 0;
}

/* The new root's home mount (after the volumes, which it takes along) and the workspace's
 * descriptor, which was the old root's /workspace. */
static int reopen_workspace(struct agent *a, struct err *err)
{
	init_home_mount();
	_cleanup_free_ char *ws = xstrdup(a->ws.path ? a->ws.path : "/workspace");
	ws_fini(&a->ws);
	ws_fini(&a->root);
	int r = ws_init_root(&a->root, err);
	if (r < 0)
		return r;
	return ws_init(&a->ws, ws, err);
}

/* Opens the directory `path` of the root, making missing components (0755, root's) and
 * refusing symbolic links and files on the way. */
static int mountpoint_open(const char *path, struct err *err)
{
	_cleanup_close_ int dir = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dir < 0)
		return err_sys(err, errno, "/");
	_cleanup_free_ char *copy = xstrdup(path);
	char *save = NULL;
	for (char *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
		if (mkdirat(dir, c, 0755) < 0 && errno != EEXIST)
			return err_sys(err, errno, "making the mount point %s", path);
		int next = openat(dir, c, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0) {
			if (errno == ELOOP || errno == ENOTDIR)
				return err_set(
					err, ENOTDIR,
					"volume mount point %s: `%s` is not a directory of the "
					"template (a symbolic link or a file)",
					path, c);
			return err_sys(err, errno, "volume mount point %s", path);
		}
		close(dir);
		dir = next;
	}
	return TAKE_FD(dir);
}

/* A read-write volume is mounted synchronous: a write that returned is on the image, which
 * is all that survives the VM's end (it is killed, not shut down). A read-only one is left
 * alone: a journal that needs replaying is replayed when the drive takes writes (the host
 * gives a reader a private overlay), else skipped (noload). */
static int mount_volume(const struct req_volume *v, struct err *err)
{
	char dev[32];
	int r = find_drive(v->serial, dev, sizeof(dev), err);
	if (r < 0)
		return r;
	_cleanup_close_ int at = mountpoint_open(v->path, err);
	if (at < 0)
		return at;
	char target[64];
	snprintf(target, sizeof(target), "/proc/self/fd/%d", at);
	unsigned long flags = MS_NOSUID | MS_NODEV;
	flags |= v->read_only ? MS_RDONLY : MS_SYNCHRONOUS | MS_DIRSYNC;
	if (mount(dev, target, "ext4", flags, NULL) == 0)
		return 0;
	if (v->read_only && (errno == EROFS || errno == EACCES) &&
	    mount(dev, target, "ext4", flags, "noload") == 0)
		return 0;
	return err_sys(err, errno, "mounting the volume at %s", v->path);
}

int init_storage(struct agent *a, const struct req_resume *x, struct err *err)
{
	static bool done;
	if (done)
		return err_set(err, EALREADY, "the storage was set up already");
	done = true; /* a half-made one is not made again */
	if (x->nvolumes && !x->disk_serial)
		return err_set(err, EINVAL,
			       "volumes need the disk (their mount points are made "
			       "in the root)");
	/* The agent works on files as the command user; this is root's work. */
	int fsuid = setfsuid(0), fsgid = setfsgid(0);
	int r = 0;
	if (x->disk_serial)
		r = setup_disk(a, x->disk_serial, err);
	for (unsigned i = 0; r == 0 && i < x->nvolumes; i++)
		r = mount_volume(&x->volumes[i], err);
	if (r == 0 && x->disk_serial)
		r = reopen_workspace(a, err);
	setfsgid((gid_t)fsgid);
	setfsuid((uid_t)fsuid);
	return r;
}
