/* jail_disk: a sandbox's own disk, the writable half of its root (SANDBOX_STORAGE=disk).
 *
 * The disk is a sparse ext4 image of the sandbox's size on a loop device, made without a name:
 * the image is an O_TMPFILE in SANDBOX_STATE_DIR/disks, so no path of it ever exists. The loop
 * device holds the only reference to it (autoclear), the filesystem is a detached mount held
 * by the daemon's descriptor and the sandbox's overlay. When the sandbox is destroyed (or the
 * daemon dies, even by kill -9, and its leftover is killed), the last reference goes, the loop
 * device detaches and the kernel frees the image's blocks: there is nothing to clean up and
 * nothing a crash could leave behind. A full disk is the sandbox's ENOSPC: the image cannot
 * grow past its size.
 *
 * The sandbox's / is an overlay made here by host root: lower, the idmapped read-only clone of
 * the template (jail_userns.c), upper and work on the disk. The upper layer's files carry the
 * host ids of the sandbox's range (root inside = uid_base), as written by the sandbox's
 * processes; /workspace and /tmp are directories of the upper layer, made here with their
 * owners, so they are on the disk too and nothing of them is charged to the memory cgroup.
 *
 * Measured here (6.18, host ext4): mkfs.ext4 of a 1 GiB image without a journal takes about
 * 6 ms and writes 664 KiB. A project-quota directory would need the host's filesystem mounted
 * with prjquota, which the daemon cannot choose; the image works on any filesystem that
 * supports sparse files and O_TMPFILE. */
#include "driver/jail/jail.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/loop.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "driver/room.h"
#include "util/cleanup.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/spawn.h"

/* linux/fs.h's, which clashes with sys/mount.h. */
#ifndef FIFREEZE
#define FIFREEZE _IOWR('X', 119, int)
#define FITHAW   _IOWR('X', 120, int)
#endif

/* How long mkfs.ext4 may take (it takes milliseconds). */
#define MKFS_TIMEOUT_MS 30000

void jail_disk_close(struct jail_disk *d)
{
	if (d->mnt >= 0)
		close(d->mnt);
	if (d->img >= 0)
		close(d->img);
	if (d->path && unlink(d->path) < 0 && errno != ENOENT)
		log_warn("jail", "remove %s: %s", d->path, strerror(errno));
	free(d->path);
	d->path = NULL;
	d->mnt = -1;
	d->img = -1;
}

int jail_loop_attach_rw(int img, char *dev, size_t len, struct err *err)
{
	_cleanup_close_ int ctl = open("/dev/loop-control", O_RDWR | O_CLOEXEC);
	if (ctl < 0)
		return err_sys(err, errno, "jail: /dev/loop-control");
	for (int attempt = 0; attempt < 8; attempt++) {
		int n = ioctl(ctl, LOOP_CTL_GET_FREE);
		if (n < 0)
			return err_sys(err, errno, "jail: no free loop device");
		snprintf(dev, len, "/dev/loop%d", n);
		int fd = open(dev, O_RDWR | O_CLOEXEC);
		if (fd < 0)
			return err_sys(err, errno, "jail: %s", dev);
		struct loop_config lc = {
			.fd = (uint32_t)img,
			.info = { .lo_flags = LO_FLAGS_AUTOCLEAR | LO_FLAGS_DIRECT_IO },
		};
		if (ioctl(fd, LOOP_CONFIGURE, &lc) == 0)
			return fd;
		int e = errno;
		/* Direct I/O needs the backing filesystem's support: buffered, then. */
		if (e == EINVAL) {
			lc.info.lo_flags = LO_FLAGS_AUTOCLEAR;
			if (ioctl(fd, LOOP_CONFIGURE, &lc) == 0)
				return fd;
			e = errno;
		}
		close(fd);
		if (e != EBUSY)
			return err_sys(err, e, "jail: attach the disk to %s", dev);
	}
	return err_set(err, EBUSY, "jail: every free loop device was taken first");
}

static int run_mkfs(const char *dev, uint32_t uid_base, struct err *err)
{
	_cleanup_free_ char *mkfs = spawn_find_binary("mkfs.ext4");
	if (!mkfs)
		return err_set(err, ENOENT,
			       "jail: mkfs.ext4 not found (e2fsprogs): needed for "
			       "SANDBOX_STORAGE=disk");
	char ext[96];
	/* No journal: the disk lives as long as the sandbox, a crash ends both. No reserved
	 * blocks: the sandbox gets all it was given. The inode tables are not zeroed. */
	snprintf(ext, sizeof(ext), "lazy_itable_init=1,nodiscard,root_owner=%u:%u", uid_base,
		 uid_base);
	char *const argv[] = { mkfs, "-q", "-F", "-m",   "0",         "-O", "^has_journal",
			       "-E", ext,  "-b", "4096", (char *)dev, NULL };
	char out[512];
	int st = spawn_run_bounded(argv, MKFS_TIMEOUT_MS, out, sizeof(out));
	if (st < 0)
		return err_sys(err, -st, "jail: mkfs.ext4 %s", dev);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return err_set(err, EIO, "jail: mkfs.ext4 %s failed: %s", dev, out);
	return 0;
}

int jail_disk_mount(const char *dev, struct err *err)
{
	_cleanup_close_ int fs = (int)syscall(SYS_fsopen, "ext4", FSOPEN_CLOEXEC);
	if (fs < 0)
		return err_sys(err, errno, "jail: fsopen ext4");
	if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "source", dev, 0) < 0 ||
	    syscall(SYS_fsconfig, fs, FSCONFIG_SET_FLAG, "noinit_itable", NULL, 0) < 0 ||
	    syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
		return err_sys(err, errno, "jail: mount the disk %s", dev);
	int mnt = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
			       MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
	if (mnt < 0)
		return err_sys(err, errno, "jail: mount the disk %s", dev);
	return mnt;
}

static int make_dir(int dfd, const char *name, mode_t mode, uid_t uid, struct err *err)
{
	if (mkdirat(dfd, name, mode) < 0 || fchownat(dfd, name, uid, uid, 0) < 0 ||
	    fchmodat(dfd, name, mode, 0) < 0)
		return err_sys(err, errno, "jail: make /%s on the disk", name);
	return 0;
}

/* upper/ (the root's changes; its attributes are those of the sandbox's /), work/ (the
 * overlay's own), and the directories commands write to. */
static int layout(int mnt, uint32_t uid_base, struct err *err)
{
	int r;
	if ((r = make_dir(mnt, "upper", 0755, uid_base, err)) < 0 ||
	    (r = make_dir(mnt, "work", 0700, 0, err)) < 0 ||
	    (r = make_dir(mnt, "upper/workspace", 0755, uid_base + JAIL_COMMAND_UID, err)) < 0 ||
	    (r = make_dir(mnt, "upper/tmp", 01777, uid_base, err)) < 0)
		return r;
	return 0;
}

int jail_disk_create(const char *state_dir, uint64_t bytes, uint32_t uid_base,
		     struct jail_disk *ret, struct err *err)
{
	_cleanup_free_ char *dir = xasprintf("%s/disks", state_dir);
	if (fs_mkdir_p(dir, 0700) < 0)
		return err_sys(err, errno, "jail: make %s", dir);
	_cleanup_close_ int img = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (img < 0)
		return err_sys(err, errno, "jail: a disk image in %s", dir);
	if (ftruncate(img, (off_t)bytes) < 0)
		return err_sys(err, errno, "jail: size the disk image to %llu bytes",
			       (unsigned long long)bytes);
	int r = room_claim(img, bytes, "the sandbox's disk", err);
	if (r < 0)
		return r;
	char dev[32];
	_cleanup_close_ int loop = jail_loop_attach_rw(img, dev, sizeof(dev), err);
	if (loop < 0)
		return loop;
	if ((r = run_mkfs(dev, uid_base, err)) < 0)
		return r;
	_cleanup_close_ int mnt = jail_disk_mount(dev, err);
	if (mnt < 0)
		return mnt;
	if ((r = layout(mnt, uid_base, err)) < 0)
		return r;
	*ret = (struct jail_disk){ .mnt = TAKE_FD(mnt), .img = TAKE_FD(img), .bytes = bytes };
	return 0;
}

int jail_disk_keep(struct jail_disk *d, const char *path, struct err *err)
{
	if (d->img < 0)
		return err_set(err, ENOENT, "jail: the sandbox has no disk");
	/* Its blocks reach the image before it is named: nothing of it is lost with the
	 * sandbox's page cache. */
	if (d->mnt >= 0) {
		/* A mount's descriptor is a path's: syncfs needs an open directory. */
		_cleanup_close_ int dir = openat(d->mnt, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (dir < 0 || syncfs(dir) < 0)
			return err_sys(err, errno, "jail: sync the disk");
	}
	/* A named image (resumed once already) is renamed: only an unnamed one (O_TMPFILE) can
	 * be given a name through its descriptor. */
	if (d->path) {
		if (rename(d->path, path) < 0)
			return err_sys(err, errno, "jail: keep the disk as %s", path);
		free(d->path);
		d->path = NULL;
		return 0;
	}
	if (linkat(d->img, "", AT_FDCWD, path, AT_EMPTY_PATH) < 0)
		return err_sys(err, errno, "jail: keep the disk as %s", path);
	return 0;
}

/* Attaches a disk image made by jail_disk_create (kept, or a copy of one: `what` names it)
 * and mounts it; EINVAL unless it has the disk's layout. Returns the mount's descriptor. */
static int mount_kept(int img, const char *what, struct err *err)
{
	char dev[32];
	_cleanup_close_ int loop = jail_loop_attach_rw(img, dev, sizeof(dev), err);
	if (loop < 0)
		return loop;
	_cleanup_close_ int mnt = jail_disk_mount(dev, err);
	if (mnt < 0)
		return mnt;
	struct stat up, work;
	if (fstatat(mnt, "upper", &up, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(up.st_mode) ||
	    fstatat(mnt, "work", &work, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(work.st_mode))
		return err_set(err, EINVAL, "jail: the disk %s has no upper/ and work/", what);
	return TAKE_FD(mnt);
}

/* Writes the marker of a freeze: the image's device and inode, by which the next start finds
 * the loop device to thaw should the daemon die while the filesystem is frozen. */
static int mark_frozen(int img, const char *marker, struct err *err)
{
	struct stat st;
	if (fstat(img, &st) < 0)
		return err_sys(err, errno, "jail: the disk's image");
	_cleanup_close_ int fd = open(marker, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return err_sys(err, errno, "jail: write %s", marker);
	char line[64];
	int n = snprintf(line, sizeof(line), "%llu %llu\n", (unsigned long long)st.st_dev,
			 (unsigned long long)st.st_ino);
	if (write(fd, line, (size_t)n) != n)
		return err_sys(err, errno ? errno : EIO, "jail: write %s", marker);
	return 0;
}

/* The loop device (/dev/loopN into dev) whose backing file is inode `ino` of device `st_dev`. */
static bool find_loop(unsigned long long st_dev, unsigned long long ino, char *dev, size_t len)
{
	_cleanup_closedir_ DIR *d = opendir("/sys/block");
	if (!d)
		return false;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, "loop", 4))
			continue;
		snprintf(dev, len, "/dev/%s", e->d_name);
		_cleanup_close_ int fd = open(dev, O_RDONLY | O_CLOEXEC);
		struct loop_info64 info;
		if (fd >= 0 && ioctl(fd, LOOP_GET_STATUS64, &info) == 0 &&
		    info.lo_device == st_dev && info.lo_inode == ino)
			return true;
	}
	return false;
}

int jail_disk_thaw_leftover(const char *marker, struct err *err)
{
	_cleanup_fclose_ FILE *f = fopen(marker, "re");
	if (!f)
		return errno == ENOENT ? 0 : err_sys(err, errno, "jail: read %s", marker);
	unsigned long long st_dev, ino;
	int r = 0;
	char dev[288];
	if (fscanf(f, "%llu %llu", &st_dev, &ino) != 2) {
		r = err_set(err, EINVAL, "jail: %s is not a freeze's marker", marker);
	} else if (find_loop(st_dev, ino, dev, sizeof(dev))) {
		/* A new mount of the device is a mount of the same (frozen) filesystem: thawed
		 * through it. */
		_cleanup_close_ int mnt = jail_disk_mount(dev, err);
		_cleanup_close_ int root =
			mnt < 0 ? -1 : openat(mnt, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (mnt < 0)
			r = mnt;
		else if (root < 0 || (ioctl(root, FITHAW, 0) < 0 && errno != EINVAL))
			r = err_sys(err, errno, "jail: thaw the disk on %s", dev);
		else
			r = 1;
	}
	if (r >= 0 && unlink(marker) < 0 && errno != ENOENT)
		log_warn("jail", "remove %s: %s", marker, strerror(errno));
	return r;
}

int jail_disk_save(struct jail_disk *d, const char *path, bool durable, const char *marker,
		   struct err *err)
{
	if (d->img < 0 || d->mnt < 0)
		return err_set(err, ENOENT, "jail: the sandbox has no disk");
	_cleanup_close_ int root = openat(d->mnt, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root < 0)
		return err_sys(err, errno, "jail: open the disk");
	int mr = mark_frozen(d->img, marker, err);
	if (mr < 0)
		return mr;
	/* Frozen, the filesystem is whole on its image (no journal to replay) and takes no
	 * write until it is thawed. */
	if (ioctl(root, FIFREEZE, 0) < 0) {
		int e = errno;
		unlink(marker);
		return err_sys(err, e, "jail: freeze the disk's filesystem");
	}
	_cleanup_free_ char *dir = xstrdup(path);
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	int r = 0;
	_cleanup_close_ int out = open(slash ? dir : ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	struct stat img_st;
	if (out < 0)
		r = err_sys(err, errno, "jail: a copy of the disk in %s", slash ? dir : ".");
	else if (fstat(d->img, &img_st) < 0)
		r = err_sys(err, errno, "jail: the disk's image");
	else if ((r = room_check(out, (uint64_t)img_st.st_blocks * 512, "a copy of the disk",
				 err)) < 0)
		;
	else if (ftruncate(out, (off_t)d->bytes) < 0)
		r = err_sys(err, errno, "jail: size the copy of the disk");
	else if ((r = fs_copy_data(d->img, out, d->bytes, err)) < 0)
		err_wrap(err, "jail: copying the disk");
	if (ioctl(root, FITHAW, 0) < 0)
		log_warn("jail", "thaw the disk's filesystem: %s", strerror(errno));
	else
		unlink(marker);
	if (r < 0)
		return r;
	/* Named once complete and on disk: a crash leaves the whole copy or none. */
	if (durable && fsync(out) < 0)
		return err_sys(err, errno, "jail: sync the copy of the disk");
	if (linkat(out, "", AT_FDCWD, path, AT_EMPTY_PATH) < 0)
		return err_sys(err, errno, "jail: keep the copy of the disk as %s", path);
	return 0;
}

/* How many directories below the root shift_ids holds open at once. The walk goes as deep as
 * the disk's tree does (a path's length is no limit of a tree's depth: nftw's paths stop at
 * PATH_MAX, a sandbox's directories do not), and the daemon's descriptors are shared by every
 * session: a directory deeper than this from the one being read is let go, and reopened
 * through its child's ".." when the walk comes back to it. */
#define SHIFT_OPEN_DIRS 16

/* A directory of the walk: its stream (NULL while let go), where its reading stood when it was
 * let go, and its identity, by which it is known again when reopened. */
struct shift_dir {
	DIR *d;
	long pos;
	dev_t dev;
	ino_t ino;
};

struct shift {
	uint32_t from, to;
	unsigned seen, moved;
};

static uint32_t shifted(const struct shift *s, uint32_t id)
{
	return id >= s->from && id - s->from < JAIL_UID_RANGE ? id - s->from + s->to : id;
}

/* Gives `name` of dfd (st: its own status, not its target's) the ids of the new range; an
 * empty name is dfd itself. Never through a symlink. */
static int shift_file(struct shift *s, int dfd, const char *name, const struct stat *st,
		      struct err *err)
{
	s->seen++;
	uid_t uid = shifted(s, st->st_uid);
	gid_t gid = shifted(s, st->st_gid);
	if (uid == st->st_uid && gid == st->st_gid)
		return 0;
	s->moved++;
	int r = *name ? fchownat(dfd, name, uid, gid, AT_SYMLINK_NOFOLLOW) : fchown(dfd, uid, gid);
	/* A change of owner clears the set-id bits: they stay what they were. A symlink has
	 * none (and fchmodat would follow it). */
	if (r == 0 && !S_ISLNK(st->st_mode) && (st->st_mode & (S_ISUID | S_ISGID)))
		r = *name ? fchmodat(dfd, name, st->st_mode & 07777, 0)
			  : fchmod(dfd, st->st_mode & 07777);
	if (r < 0)
		return err_sys(err, errno, "jail: give the copied disk's file %s the sandbox's ids",
			       *name ? name : "/");
	return 0;
}

/* Opens the directory `name` of dfd into *ret, which must be the one st describes (not a
 * symlink, not another filesystem, not one put in its place). */
static int shift_open(int dfd, const char *name, const struct stat *st, DIR **ret, struct err *err)
{
	_cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	struct stat now;
	if (fd < 0 || fstat(fd, &now) < 0)
		return err_sys(err, errno, "jail: open the copied disk's directory %s", name);
	if (now.st_dev != st->st_dev || now.st_ino != st->st_ino)
		return err_set(err, EIO,
			       "jail: the copied disk's directory %s changed under the walk", name);
	DIR *d = fdopendir(fd);
	if (!d)
		return err_sys(err, errno, "jail: read the copied disk's directory %s", name);
	fd = -1;
	*ret = d;
	return 0;
}

/* Leaves the directory on top of the walk's stack for its parent, reopened (through "..", and
 * read on from where it stood) if it was let go. */
static int shift_up(struct shift_dir *stack, size_t depth, struct err *err)
{
	struct shift_dir *top = &stack[depth - 1], *up = depth > 1 ? &stack[depth - 2] : NULL;
	int r = 0;
	if (up && !up->d) {
		struct stat st = { .st_dev = up->dev, .st_ino = up->ino };
		if ((r = shift_open(dirfd(top->d), "..", &st, &up->d, err)) == 0)
			seekdir(up->d, up->pos);
	}
	closedir(top->d);
	top->d = NULL;
	return r;
}

/* Every file of the disk owned by an id of [from, from + JAIL_UID_RANGE) is given the same id
 * of the range at `to`; ids outside it are left. The disk is no sandbox's yet: nothing moves
 * under the walk. The walk is by descriptors (no path is ever built, so none is too long) and
 * by a stack of its own (no recursion, so no depth is too deep), with at most
 * SHIFT_OPEN_DIRS + 1 directories open. */
static int shift_ids(int mnt, uint32_t from, uint32_t to, struct err *err)
{
	if (from == to)
		return 0;
	struct shift s = { .from = from, .to = to };
	struct stat st;
	if (fstat(mnt, &st) < 0)
		return err_sys(err, errno, "jail: the copied disk");
	/* "." of the mount: a stream of its own (the mount's descriptor is a path's, no open
	 * directory, and stays the disk's). */
	DIR *root = NULL;
	int r = shift_open(mnt, ".", &st, &root, err);
	if (r < 0)
		return r;
	if ((r = shift_file(&s, dirfd(root), "", &st, err)) < 0) {
		closedir(root);
		return r;
	}
	const dev_t dev = st.st_dev;
	size_t depth = 1, cap = 32;
	struct shift_dir *stack = xcalloc(cap, sizeof(*stack));
	stack[0] = (struct shift_dir){ .d = root, .dev = st.st_dev, .ino = st.st_ino };
	while (depth > 0) {
		DIR *d = stack[depth - 1].d;
		errno = 0;
		struct dirent *e = readdir(d);
		if (!e) {
			if (errno) {
				r = err_sys(err, errno, "jail: read the copied disk");
				break;
			}
			if ((r = shift_up(stack, depth, err)) < 0)
				break;
			depth--;
			continue;
		}
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			r = err_sys(err, errno, "jail: the copied disk's file %s", e->d_name);
			break;
		}
		if ((r = shift_file(&s, dirfd(d), e->d_name, &st, err)) < 0)
			break;
		/* Not into another filesystem (the disk has none mounted: a guard). */
		if (!S_ISDIR(st.st_mode) || st.st_dev != dev)
			continue;
		DIR *sub = NULL;
		if ((r = shift_open(dirfd(d), e->d_name, &st, &sub, err)) < 0)
			break;
		if (depth == cap) {
			cap *= 2;
			stack = xrealloc(stack, cap * sizeof(*stack));
		}
		stack[depth++] = (struct shift_dir){ .d = sub, .dev = st.st_dev, .ino = st.st_ino };
		if (depth - 1 > SHIFT_OPEN_DIRS) {
			struct shift_dir *far = &stack[depth - 1 - SHIFT_OPEN_DIRS];
			far->pos = telldir(far->d);
			closedir(far->d);
			far->d = NULL;
		}
	}
	for (size_t i = 0; i < depth; i++)
		if (stack[i].d)
			closedir(stack[i].d);
	free(stack);
	log_debug("jail", "copied disk: %u of %u files given the ids of the range at %u", s.moved,
		  s.seen, to);
	return r < 0 ? r : 0;
}

int jail_disk_clone(const char *state_dir, const char *from, uint32_t from_base, uint32_t uid_base,
		    struct jail_disk *ret, struct err *err)
{
	_cleanup_close_ int src = open(from, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	if (src < 0 || fstat(src, &st) < 0)
		return err_sys(err, errno, "jail: the saved disk %s", from);
	if (!S_ISREG(st.st_mode))
		return err_set(err, EINVAL, "jail: the saved disk %s is not a file", from);
	_cleanup_free_ char *dir = xasprintf("%s/disks", state_dir);
	_cleanup_close_ int img = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (img < 0)
		return err_sys(err, errno, "jail: a disk image in %s", dir);
	int r;
	if (ftruncate(img, st.st_size) < 0)
		return err_sys(err, errno, "jail: size the disk image");
	if ((r = room_claim(img, (uint64_t)st.st_size, "the sandbox's disk", err)) < 0)
		return r;
	if ((r = fs_copy_data(src, img, (uint64_t)st.st_size, err)) < 0)
		return err_wrap(err, "jail: copying the saved disk");
	_cleanup_close_ int mnt = mount_kept(img, from, err);
	if (mnt < 0)
		return mnt;
	if ((r = shift_ids(mnt, from_base, uid_base, err)) < 0)
		return r;
	*ret = (struct jail_disk){ .mnt = TAKE_FD(mnt),
				   .img = TAKE_FD(img),
				   .bytes = (uint64_t)st.st_size };
	return 0;
}

/* Whether a loop device is attached to the file st names. */
static bool loop_holds(const struct stat *st)
{
	_cleanup_closedir_ DIR *d = opendir("/sys/block");
	if (!d)
		return false;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, "loop", 4) != 0)
			continue;
		char dev[300];
		snprintf(dev, sizeof(dev), "/dev/%s", de->d_name);
		_cleanup_close_ int fd = open(dev, O_RDONLY | O_CLOEXEC);
		struct loop_info64 li;
		if (fd >= 0 && ioctl(fd, LOOP_GET_STATUS64, &li) == 0 &&
		    li.lo_device == (uint64_t)st->st_dev && li.lo_inode == (uint64_t)st->st_ino)
			return true;
	}
	return false;
}

/* How long jail_disk_open waits for the previous sandbox's loop device to let go. */
#define LOOP_RELEASE_TIMEOUT_MS 5000

int jail_disk_open(const char *path, struct jail_disk *ret, struct err *err)
{
	_cleanup_close_ int img = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	if (img < 0)
		return err_sys(err, errno, "jail: the kept disk %s", path);
	struct stat st;
	if (fstat(img, &st) < 0)
		return err_sys(err, errno, "jail: the kept disk %s", path);
	if (!S_ISREG(st.st_mode))
		return err_set(err, EINVAL, "jail: the kept disk %s is not a file", path);
	/* Two filesystems over one image would corrupt it: the old one must be gone. */
	for (int waited = 0; loop_holds(&st); waited += 20) {
		if (waited >= LOOP_RELEASE_TIMEOUT_MS)
			return err_set(err, EBUSY,
				       "jail: the kept disk %s is still attached to a loop device",
				       path);
		usleep(20 * 1000);
	}
	_cleanup_close_ int mnt = mount_kept(img, path, err);
	if (mnt < 0)
		return mnt;
	*ret = (struct jail_disk){ .mnt = TAKE_FD(mnt),
				   .img = TAKE_FD(img),
				   .path = NULL,
				   .bytes = (uint64_t)st.st_size };
	return 0;
}

struct overlay_args {
	int lower, upper; /* the lower layer's mount, the disk's */
	struct err *err;
};

/* Made where the layers are in the caller's mount namespace, as overlayfs wants them before
 * Linux 6.15 (it clones each, with clone_private_mount): on the keeper's thread, each attached
 * there for as long as it takes. The descriptors stay usable after they are detached again. */
static int make_overlay(void *arg)
{
	struct overlay_args *a = arg;
	char lower[64], disk[64], upper[80], work[80];
	bool attach = jail_keep_mode() == JAIL_KEEP_THREAD;
	int r = 0;
	if (attach) {
		if ((r = jail_keep_attach(a->lower, lower, sizeof(lower), a->err)) < 0)
			return r;
		if ((r = jail_keep_attach(a->upper, disk, sizeof(disk), a->err)) < 0) {
			jail_keep_detach(lower);
			return r;
		}
	} else {
		snprintf(lower, sizeof(lower), "/proc/self/fd/%d", a->lower);
		snprintf(disk, sizeof(disk), "/proc/self/fd/%d", a->upper);
	}
	snprintf(upper, sizeof(upper), "%s/upper", disk);
	snprintf(work, sizeof(work), "%s/work", disk);
	int fs = (int)syscall(SYS_fsopen, "overlay", FSOPEN_CLOEXEC);
	if (fs < 0) {
		r = err_sys(a->err, errno, "jail: fsopen overlay");
	} else if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "source", "sandbox", 0) < 0 ||
		   syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "lowerdir", lower, 0) < 0 ||
		   syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "upperdir", upper, 0) < 0 ||
		   syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "workdir", work, 0) < 0 ||
		   syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0) {
		r = err_sys(a->err, errno, "jail: overlay of the template and the disk");
	} else {
		r = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
				 MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
		if (r < 0)
			r = err_sys(a->err, errno, "jail: mount the overlay");
	}
	if (fs >= 0)
		close(fs);
	if (attach) {
		jail_keep_detach(disk);
		jail_keep_detach(lower);
	}
	return r;
}

int jail_disk_overlay(const struct jail_disk *d, int lower, struct err *err)
{
	struct overlay_args a = { .lower = lower, .upper = d->mnt, .err = err };
	return jail_keep_call(make_overlay, &a);
}

int jail_disk_usage(const struct jail_disk *d, uint64_t *used, uint64_t *size)
{
	struct statfs st;
	if (d->mnt < 0)
		return -ENOENT;
	if (fstatfs(d->mnt, &st) < 0)
		return -errno;
	*size = (uint64_t)st.f_blocks * (uint64_t)st.f_bsize;
	*used = (uint64_t)(st.f_blocks - st.f_bfree) * (uint64_t)st.f_bsize;
	return 0;
}
