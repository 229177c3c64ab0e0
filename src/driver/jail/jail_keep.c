/* jail_keep: the detached mounts that sandboxes' mounts are cloned from.
 *
 * The daemon holds a few filesystems as detached mounts (fsmount) that appear in no mount
 * table: the templates' images, the volumes, the sandboxes' shared sysfs, the tmpfs of
 * resolv.conf copies. Each sandbox gets clones of them (open_tree OPEN_TREE_CLONE), idmapped
 * or read-only as it needs.
 *
 * Before 6.15 the kernel clones only a mount of the caller's own mount namespace
 * (__do_loopback's check_mnt): a detached mount cannot be cloned (EINVAL). On such a kernel
 * each kept mount is attached in a private mount namespace of a thread of its own, the keeper,
 * and every clone is made on that thread. Attached in the daemon's namespace instead, every
 * kept mount would be copied into each sandbox's new mount namespace, and shown there. The
 * keeper's namespace dies with the daemon, so kept mounts still end with it (kill -9 too).
 *
 * Which way is decided once, by trying to clone a detached tmpfs (jail_keep_init). */
#include "driver/jail/jail.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/cleanup.h"

/* Where the keeper attaches its tmpfs before it makes it its root, in its own namespace. */
#define KEEPER_DIR "/tmp"

/* A call to run on the keeper thread. */
struct keeper_call {
	int (*fn)(void *arg);
	void *arg;
	int ret;
	bool done;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool probed;
	enum jail_keep_mode mode;
	pthread_t thread;
	struct keeper_call *pending; /* the call the keeper runs next */
	int dir;                     /* the keeper's tmpfs: the root of its namespace */
	unsigned next;               /* the next slot's number */
	int start_ret;               /* the keeper's start: 0, or a negative errno */
	bool started;
} keeper_mod = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.cond = PTHREAD_COND_INITIALIZER,
	.dir = -1,
};

static int clone_tree(int fd, const char *path, unsigned flags)
{
	unsigned f = OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | (flags & AT_RECURSIVE) |
		     (*path ? 0 : AT_EMPTY_PATH);
	int m = (int)syscall(SYS_open_tree, fd, path, f);
	return m < 0 ? -errno : m;
}

/* A detached tmpfs, or a negative errno. */
static int detached_tmpfs(void)
{
	_cleanup_close_ int fs = (int)syscall(SYS_fsopen, "tmpfs", FSOPEN_CLOEXEC);
	if (fs < 0)
		return -errno;
	if (syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "mode", "0700", 0) < 0 ||
	    syscall(SYS_fsconfig, fs, FSCONFIG_SET_STRING, "size", "64k", 0) < 0 ||
	    syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) < 0)
		return -errno;
	int m = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
			     MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC);
	return m < 0 ? -errno : m;
}

/* The keeper's namespace: a tmpfs of its own as its root, nothing else. A copy of the
 * daemon's mounts would hold every mount the host had when the keeper started (a network
 * namespace's, a filesystem the host later unmounts) for as long as the daemon runs. */
static int keeper_setup(void)
{
	if (unshare(CLONE_NEWNS | CLONE_FS) < 0)
		return -errno;
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return -errno;
	_cleanup_close_ int t = detached_tmpfs();
	if (t < 0)
		return t;
	/* pivot_root(".", ".") stacks the old root on the tmpfs; detached, it is gone. */
	if (syscall(SYS_move_mount, t, "", AT_FDCWD, KEEPER_DIR, MOVE_MOUNT_F_EMPTY_PATH) < 0 ||
	    fchdir(t) < 0 || syscall(SYS_pivot_root, ".", ".") < 0 ||
	    umount2(".", MNT_DETACH) < 0 || chdir("/") < 0)
		return -errno;
	keeper_mod.dir = TAKE_FD(t);
	return 0;
}

static void *keeper_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&keeper_mod.lock);
	keeper_mod.start_ret = keeper_setup();
	keeper_mod.started = true;
	pthread_cond_broadcast(&keeper_mod.cond);
	if (keeper_mod.start_ret < 0) {
		pthread_mutex_unlock(&keeper_mod.lock);
		return NULL;
	}
	for (;;) {
		while (!keeper_mod.pending)
			pthread_cond_wait(&keeper_mod.cond, &keeper_mod.lock);
		struct keeper_call *c = keeper_mod.pending;
		keeper_mod.pending = NULL;
		/* Unlocked: fn may ask for the mode, and callers may queue meanwhile. */
		pthread_mutex_unlock(&keeper_mod.lock);
		int ret = c->fn(c->arg);
		pthread_mutex_lock(&keeper_mod.lock);
		c->ret = ret;
		c->done = true;
		pthread_cond_broadcast(&keeper_mod.cond);
	}
	return NULL;
}

/* Runs c->fn on the keeper thread and returns what it returned. */
static int keeper_run(struct keeper_call *c)
{
	pthread_mutex_lock(&keeper_mod.lock);
	while (keeper_mod.pending)
		pthread_cond_wait(&keeper_mod.cond, &keeper_mod.lock);
	keeper_mod.pending = c;
	pthread_cond_broadcast(&keeper_mod.cond);
	while (!c->done)
		pthread_cond_wait(&keeper_mod.cond, &keeper_mod.lock);
	pthread_mutex_unlock(&keeper_mod.lock);
	return c->ret;
}

int jail_keep_attach(int mnt, char *path, size_t len, struct err *err)
{
	char name[16];
	snprintf(name, sizeof(name), "%u", keeper_mod.next++);
	snprintf(path, len, "/%s", name);
	if (mkdirat(keeper_mod.dir, name, 0700) < 0)
		return err_sys(err, errno, "jail: a mount point in the keeper's tmpfs");
	if (syscall(SYS_move_mount, mnt, "", keeper_mod.dir, name, MOVE_MOUNT_F_EMPTY_PATH) < 0) {
		int e = errno;
		unlinkat(keeper_mod.dir, name, AT_REMOVEDIR);
		return err_sys(err, e, "jail: attach a mount in the keeper's namespace");
	}
	return 0;
}

void jail_keep_detach(const char *path)
{
	umount2(path, MNT_DETACH);
	rmdir(path);
}

struct keep_args {
	int fd;
	const char *path;
	unsigned flags;
	struct err *err;
};

/* On the keeper: attaches a->fd at a slot of its own; returns a handle on it there. */
static int do_keep(void *arg)
{
	struct keep_args *a = arg;
	char path[64];
	int r = jail_keep_attach(a->fd, path, sizeof(path), a->err);
	if (r < 0)
		return r;
	int h = open(path, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (h < 0) {
		r = err_sys(a->err, errno, "jail: open a kept mount");
		jail_keep_detach(path);
		return r;
	}
	return h;
}

static int do_clone(void *arg)
{
	struct keep_args *a = arg;
	return clone_tree(a->fd, a->path, a->flags);
}

/* On the keeper: detaches the mount that handle a->fd is the root of, and its slot: the slot
 * of the keeper's root whose mount is the handle's. */
static int do_release(void *arg)
{
	struct keep_args *a = arg;
	struct stat want;
	if (fstat(a->fd, &want) < 0)
		return -errno;
	_cleanup_close_ int d = openat(keeper_mod.dir, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *dir = d < 0 ? NULL : fdopendir(d);
	if (!dir)
		return -errno;
	d = -1;
	struct dirent *e;
	int r = -ENOENT;
	while ((e = readdir(dir))) {
		struct stat st;
		if (e->d_name[0] == '.' || fstatat(keeper_mod.dir, e->d_name, &st, 0) < 0 ||
		    st.st_dev != want.st_dev || st.st_ino != want.st_ino)
			continue;
		char path[300];
		snprintf(path, sizeof(path), "/%s", e->d_name);
		jail_keep_detach(path);
		r = 0;
		break;
	}
	closedir(dir);
	return r;
}

int jail_keep_call(int (*fn)(void *arg), void *arg)
{
	if (jail_keep_mode() == JAIL_KEEP_DIRECT)
		return fn(arg);
	struct keeper_call c = { .fn = fn, .arg = arg };
	return keeper_run(&c);
}

int jail_keep_init(bool force_thread, struct err *err)
{
	pthread_mutex_lock(&keeper_mod.lock);
	bool probed = keeper_mod.probed;
	pthread_mutex_unlock(&keeper_mod.lock);
	if (probed)
		return 0;
	_cleanup_close_ int t = detached_tmpfs();
	if (t < 0)
		return err_sys(err, -t, "jail: a detached tmpfs (fsopen, fsmount: Linux 5.2)");
	int c = clone_tree(t, "", 0);
	enum jail_keep_mode mode = JAIL_KEEP_DIRECT;
	if (c >= 0)
		close(c);
	if (c == -EINVAL || (c >= 0 && force_thread))
		mode = JAIL_KEEP_THREAD;
	else if (c < 0)
		return err_sys(err, -c, "jail: clone a detached mount (open_tree: Linux 5.2)");
	pthread_mutex_lock(&keeper_mod.lock);
	int r = 0;
	if (mode == JAIL_KEEP_THREAD && !keeper_mod.started) {
		int e = pthread_create(&keeper_mod.thread, NULL, keeper_main, NULL);
		if (e) {
			pthread_mutex_unlock(&keeper_mod.lock);
			return err_sys(err, e, "jail: start the mount keeper's thread");
		}
		pthread_detach(keeper_mod.thread);
		while (!keeper_mod.started)
			pthread_cond_wait(&keeper_mod.cond, &keeper_mod.lock);
	}
	if (mode == JAIL_KEEP_THREAD)
		r = keeper_mod.start_ret;
	if (r == 0) {
		__atomic_store_n(&keeper_mod.mode, mode, __ATOMIC_RELEASE);
		keeper_mod.probed = true;
	}
	pthread_mutex_unlock(&keeper_mod.lock);
	if (r < 0)
		return err_sys(
			err, -r,
			"jail: the mount keeper's namespace (unshare CLONE_NEWNS, a tmpfs on "
			"%s there)",
			KEEPER_DIR);
	return 0;
}

enum jail_keep_mode jail_keep_mode(void)
{
	/* Set once, by jail_keep_init, before any mount is kept. */
	return __atomic_load_n(&keeper_mod.mode, __ATOMIC_ACQUIRE);
}

int jail_keep(int mnt, struct err *err)
{
	_cleanup_close_ int fd = mnt;
	if (jail_keep_mode() == JAIL_KEEP_DIRECT)
		return TAKE_FD(fd);
	struct keep_args a = { .fd = fd, .err = err };
	return jail_keep_call(do_keep, &a);
}

int jail_keep_clone(int kept, const char *path, unsigned flags)
{
	/* A path of the daemon's own namespace is cloned where it is. */
	if (kept == AT_FDCWD || jail_keep_mode() == JAIL_KEEP_DIRECT)
		return clone_tree(kept, path, flags);
	struct keep_args a = { .fd = kept, .path = path, .flags = flags };
	return jail_keep_call(do_clone, &a);
}

void jail_keep_release(int kept)
{
	if (kept < 0)
		return;
	if (jail_keep_mode() == JAIL_KEEP_THREAD) {
		struct keep_args a = { .fd = kept };
		jail_keep_call(do_release, &a);
	}
	close(kept);
}
