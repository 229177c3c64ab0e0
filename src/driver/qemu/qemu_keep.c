/* qemu_keep: a hibernated VM, kept whole on disk (docs/lifecycle.md), in
 * SANDBOX_STATE_DIR/qemu-saved/<sandbox id>/:
 *
 *   state.mig    QEMU's migration stream of the stopped VM: its device state and all of its
 *                RAM (a clone's RAM is private, so x-ignore-shared leaves none of it out)
 *   disk.img     the sandbox's disk, when it has one: the image QEMU wrote, given a name
 *   rootfs.ext4  a hard link to the template image the guest ran on (its page cache holds
 *                that image's blocks), so that a rebuilt template does not change it
 *
 * A resumed VM's disk keeps a name, <new sandbox id>.disk beside those directories (a file
 * once unlinked cannot be linked again, and the next hibernation links it), removed with the
 * sandbox, or by the restart after a crash (cleanup_stale).
 *
 * A save is made in <id>.tmp-XXXXXX, synced, and renamed to <id>: a daemon killed in the
 * middle leaves a temporary directory (swept at init) and the VM it was saving, never a
 * directory that looks whole. The JSON record (qemu_keep_save's) says what machine to start
 * to restore it: the same vCPUs, RAM, agent channel, QEMU version and host CPU, which a
 * resume checks against the host's before it starts anything. */
#include "driver/qemu/qemu.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/random.h"

#define KEEP_STATE  "state.mig"
#define KEEP_DISK   "disk.img"
#define KEEP_ROOTFS "rootfs.ext4"
/* Writing out all of a guest's RAM: a few seconds for a GiB on a busy host. */
#define KEEP_SAVE_TIMEOUT_MS 120000
/* Free space a save leaves beyond the guest's RAM: the state database and the device state. */
#define KEEP_MARGIN_BYTES (64ull << 20)

static char *keep_base(const char *state_dir)
{
	return xasprintf("%s/%s", state_dir, QEMU_KEEP_DIR);
}

static int64_t mtime_ns(const struct stat *st)
{
	return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

static json_t *identity_of(const struct stat *st, bool linked)
{
	return json_pack("{s:b, s:I, s:I, s:I, s:I}", "linked", linked, "dev",
			 (json_int_t)st->st_dev, "ino", (json_int_t)st->st_ino, "size",
			 (json_int_t)st->st_size, "mtimeNs", (json_int_t)mtime_ns(st));
}

/* Gives the file behind fd a name in dirfd (the daemon's /proc link to it: an unnamed disk
 * image, or a file of another directory). */
static int link_fd(int fd, int dirfd, const char *name)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	return linkat(AT_FDCWD, path, dirfd, name, AT_SYMLINK_FOLLOW) < 0 ? -errno : 0;
}

static int sync_fd(int fd, const char *what, struct err *err)
{
	return fsync(fd) < 0 ? err_sys(err, errno, "qemu: syncing %s", what) : 0;
}

int qemu_keep_save(struct qemu_vm *vm, const char *state_dir, const struct qemu_keep_what *what,
		   json_t **ret, struct err *err)
{
	const char *id = what->name;
	*ret = NULL;
	if (!cgroup_id_valid(id))
		return err_set(err, EINVAL, "qemu: invalid sandbox id");
	_cleanup_free_ char *base = keep_base(state_dir);
	if (fs_mkdir_p(base, 0700) < 0)
		return err_sys(err, errno, "qemu: make %s", base);
	_cleanup_free_ char *final = xasprintf("%s/%s", base, id);
	_cleanup_free_ char *tmp = xasprintf("%s/%s.tmp-XXXXXX", base, id);
	if (!mkdtemp(tmp))
		return err_sys(err, errno, "qemu: make a directory in %s", base);
	int r;
	_cleanup_close_ int dirfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	_cleanup_close_ int state = -1;
	_cleanup_close_ int basefd = -1;
	_cleanup_close_ int copy = -1; /* a fork's copy of the disk */
	if (dirfd < 0) {
		r = err_sys(err, errno, "qemu: open %s", tmp);
		goto fail;
	}
	state = openat(dirfd, KEEP_STATE, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
	if (state < 0) {
		r = err_sys(err, errno, "qemu: create %s/%s", tmp, KEEP_STATE);
		goto fail;
	}
	/* Room for the guest's RAM at least (and a fork's disk copy), checked before the VM is
	 * stopped: a save that fills the file system fails late and leaves nothing but a
	 * tenant's ENOSPC behind. */
	struct statvfs vfs;
	uint64_t need = ((uint64_t)what->m->mem_mib << 20) + KEEP_MARGIN_BYTES;
	if (what->fork && what->disk_fd >= 0) {
		uint64_t used = 0, size = 0;
		if (qemu_disk_usage(what->disk_fd, &used, &size) == 0)
			need += used;
	}
	if (fstatvfs(dirfd, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < need) {
		r = err_set(err, ENOSPC,
			    "no room in %s for the VM's save: it needs up to %llu MiB, %llu MiB "
			    "are free",
			    base, (unsigned long long)(need >> 20),
			    (unsigned long long)(((uint64_t)vfs.f_bavail * vfs.f_frsize) >> 20));
		goto fail;
	}
	/* The image the guest's page cache is of: a rebuild of the template replaces its file,
	 * this link keeps the old one. Across file systems there is no link: the resume then
	 * checks the template's file is still the very one, which it must be now. */
	struct stat rst, now;
	if (fstat(what->rootfs_fd, &rst) < 0) {
		r = err_sys(err, errno, "qemu: the template's image");
		goto fail;
	}
	bool linked = link_fd(what->rootfs_fd, dirfd, KEEP_ROOTFS) == 0;
	if (!linked &&
	    (rst.st_nlink == 0 || !what->rootfs_path || stat(what->rootfs_path, &now) < 0 ||
	     now.st_ino != rst.st_ino || now.st_dev != rst.st_dev)) {
		r = err_set(err, ESTALE,
			    "the template image this VM runs on was replaced since it started (a "
			    "rebuild) and cannot be kept with it: pause it with mode \"freeze\"");
		goto fail;
	}
	if (what->disk_fd >= 0 && !what->fork &&
	    (r = link_fd(what->disk_fd, dirfd, KEEP_DISK)) < 0) {
		r = err_sys(err, -r, "qemu: naming the disk image in %s", tmp);
		goto fail;
	}
	if ((r = qemu_vm_save(vm, state, KEEP_SAVE_TIMEOUT_MS, err)) < 0) {
		/* QEMU says only that the stream failed: a full file system is the likely why,
		 * and the truthful status is then the host's lack of room. */
		if (fstatvfs(dirfd, &vfs) == 0 &&
		    (uint64_t)vfs.f_bavail * vfs.f_frsize < (1u << 20)) {
			char why[sizeof(err->msg)];
			snprintf(why, sizeof(why), "%s", err->msg);
			r = err_set(err, ENOSPC,
				    "no room left in %s for the VM's save (its RAM): %s", base,
				    why);
		} else
			err_wrap(err, "saving the VM");
		goto fail;
	}
	/* The migration ended with QEMU's own flush of the disk: as the VM is stopped now, a
	 * fork's copy of it is of the same moment as its RAM. */
	if (what->disk_fd >= 0 && what->fork) {
		if ((r = copy = qemu_disk_clone(state_dir, what->disk_fd, err)) < 0)
			goto fail;
		if ((r = link_fd(copy, dirfd, KEEP_DISK)) < 0) {
			r = err_sys(err, -r, "qemu: naming the disk's copy in %s", tmp);
			goto fail;
		}
	}
	struct stat sst;
	int disk = copy >= 0 ? copy : what->disk_fd;
	if (what->durable && ((r = sync_fd(state, "the VM's saved state", err)) < 0 ||
			      (disk >= 0 && (r = sync_fd(disk, "the disk", err)) < 0) ||
			      (r = sync_fd(dirfd, "the saved VM's directory", err)) < 0))
		goto fail;
	if (fstat(state, &sst) < 0) {
		r = err_sys(err, errno, "qemu: the saved state");
		goto fail;
	}
	if (rename(tmp, final) < 0) {
		r = err_sys(err, errno, "qemu: rename %s to %s", tmp, final);
		goto fail;
	}
	if (what->durable) {
		basefd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (basefd < 0 || fsync(basefd) < 0)
			log_warn("qemu", "syncing %s: %s", base, strerror(errno));
	}
	/* What the save holds on the host's disk: the state, and the disk's allocated blocks
	 * (a hibernation's disk is the sandbox's own, named; a fork's its copy). */
	struct stat dst;
	uint64_t saved = (uint64_t)sst.st_blocks * 512;
	if (disk >= 0 && fstat(disk, &dst) == 0)
		saved += (uint64_t)dst.st_blocks * 512;
	const struct qemu_machine *m = what->m;
	*ret = json_pack("{s:s, s:s, s:{s:s, s:s, s:i, s:i, s:s, s:i}, s:s, s:s, s:o, s:b, s:I, "
			 "s:I, s:I, s:b}",
			 "driver", "qemu", "sandbox", id, "machine", "accel",
			 qemu_accel_name(m->accel), "channel", qemu_channel_name(m->channel),
			 "vcpus", (int)m->vcpus, "memMib", (int)m->mem_mib, "cmdline", m->cmdline,
			 "vsockCid", (int)what->vsock_cid, "qemuVersion", what->qemu_version,
			 "hostCpu", what->host_cpu ? what->host_cpu : "", "rootfs",
			 identity_of(&rst, linked), "disk", what->disk_fd >= 0, "diskBytes",
			 (json_int_t)what->disk_bytes, "stateBytes", (json_int_t)sst.st_size,
			 "savedBytes", (json_int_t)saved, "fork", what->fork);
	return 0;
fail:
	if (fs_rm_rf(tmp, NULL) < 0)
		log_warn("qemu", "cannot remove %s", tmp);
	return r;
}

/* --- reading a record back --------------------------------------------------------------- */

static const char *str_of(const json_t *o, const char *key)
{
	const char *s = json_string_value(json_object_get(o, key));
	return s ? s : "";
}

static json_int_t int_of(const json_t *o, const char *key)
{
	return json_integer_value(json_object_get(o, key));
}

static const char *keep_id(const json_t *keep, struct err *err)
{
	const char *id = json_string_value(json_object_get(keep, "sandbox"));
	if (!json_is_object(keep) || strcmp(str_of(keep, "driver"), "qemu") != 0 || !id ||
	    !cgroup_id_valid(id)) {
		err_set(err, EINVAL, "qemu: not a saved VM's record");
		return NULL;
	}
	return id;
}

static int open_in(int dirfd, const char *name, int flags, const char *dir, int *ret,
		   struct err *err)
{
	*ret = openat(dirfd, name, flags | O_CLOEXEC | O_NOFOLLOW);
	if (*ret < 0)
		return err_sys(err, errno, "qemu: the saved VM's %s in %s", name, dir);
	return 0;
}

void qemu_kept_close(struct qemu_kept *k)
{
	int *fds[] = { &k->state_fd, &k->disk_fd, &k->rootfs_fd };
	for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
		if (*fds[i] >= 0)
			close(TAKE_FD(*fds[i]));
	free((char *)k->m.cmdline);
	k->m.cmdline = NULL;
}

int qemu_keep_open(const struct qemu_host *h, const char *state_dir, const json_t *keep,
		   const char *template_rootfs, struct qemu_kept *k, struct err *err)
{
	*k = (struct qemu_kept){ .state_fd = -1, .disk_fd = -1, .rootfs_fd = -1 };
	const char *id = keep_id(keep, err);
	if (!id)
		return -err->errnum;
	const json_t *m = json_object_get(keep, "machine");
	const char *accel = str_of(m, "accel"), *chan = str_of(m, "channel");
	json_int_t vcpus = int_of(m, "vcpus"), mem = int_of(m, "memMib");
	/* The machine must be the one saved, on a QEMU that reads its stream. */
	if (strcmp(accel, qemu_accel_name(h->accel)) != 0 ||
	    strcmp(chan, qemu_channel_name(h->channel)) != 0)
		return err_set(err, EXDEV,
			       "the VM was saved under %s with a %s channel; this host runs %s "
			       "with %s",
			       accel, chan, qemu_accel_name(h->accel),
			       qemu_channel_name(h->channel));
	if (strcmp(str_of(keep, "qemuVersion"), h->qemu_version) != 0)
		return err_set(err, EXDEV, "the VM was saved by another QEMU (%s; this one is %s)",
			       str_of(keep, "qemuVersion"), h->qemu_version);
	if (h->accel == QEMU_ACCEL_KVM && strcmp(str_of(keep, "hostCpu"), h->host_cpu) != 0)
		return err_set(err, EXDEV, "the VM was saved on another host CPU (%s)",
			       str_of(keep, "hostCpu"));
	if (vcpus < 1 || vcpus > 256 || mem < 1 || mem > (1 << 22) || !*str_of(m, "cmdline"))
		return err_set(err, EINVAL, "qemu: the saved VM's record is malformed");
	_cleanup_free_ char *base = keep_base(state_dir);
	_cleanup_free_ char *dir = xasprintf("%s/%s", base, id);
	_cleanup_close_ int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	if (dirfd < 0)
		return err_sys(err, errno, "qemu: the saved VM %s", dir);
	int r;
	if ((r = open_in(dirfd, KEEP_STATE, O_RDONLY, dir, &k->state_fd, err)) < 0)
		goto fail;
	if (json_is_true(json_object_get(keep, "disk")) &&
	    (r = open_in(dirfd, KEEP_DISK, O_RDWR, dir, &k->disk_fd, err)) < 0)
		goto fail;
	const json_t *id_of = json_object_get(keep, "rootfs");
	bool linked = json_is_true(json_object_get(id_of, "linked"));
	if (linked)
		r = open_in(dirfd, KEEP_ROOTFS, O_RDONLY, dir, &k->rootfs_fd, err);
	else if ((k->rootfs_fd = open(template_rootfs, O_RDONLY | O_CLOEXEC)) < 0)
		r = err_sys(err, errno, "qemu: template image `%s`", template_rootfs);
	if (r < 0)
		goto fail;
	/* Changed in place (or another file): the guest's page cache would not match it. */
	struct stat st;
	if (fstat(k->rootfs_fd, &st) < 0) {
		r = err_sys(err, errno, "qemu: the saved VM's root image");
		goto fail;
	}
	if ((json_int_t)st.st_ino != int_of(id_of, "ino") ||
	    (json_int_t)st.st_dev != int_of(id_of, "dev") ||
	    (json_int_t)st.st_size != int_of(id_of, "size") ||
	    mtime_ns(&st) != int_of(id_of, "mtimeNs")) {
		r = err_set(err, ESTALE,
			    "the template's image changed since the VM was saved: its guest "
			    "would not find its files as it left them");
		goto fail;
	}
	k->m = (struct qemu_machine){
		.accel = h->accel,
		.channel = h->channel,
		.vcpus = (unsigned)vcpus,
		.mem_mib = (unsigned)mem,
		.kernel = h->kernel,
		.rootfs = template_rootfs,
		.cmdline = xstrdup(str_of(m, "cmdline")),
	};
	k->fork = json_is_true(json_object_get(keep, "fork"));
	json_int_t cid = int_of(keep, "vsockCid");
	k->vsock_cid = cid > 2 && cid < UINT32_MAX ? (unsigned)cid : 0;
	return 0;
fail:
	qemu_kept_close(k);
	return r;
}

int qemu_keep_check(const char *state_dir, const json_t *keep, struct err *err)
{
	const char *id = keep_id(keep, err);
	if (!id)
		return -err->errnum;
	_cleanup_free_ char *base = keep_base(state_dir);
	_cleanup_free_ char *state = xasprintf("%s/%s/%s", base, id, KEEP_STATE);
	struct stat st;
	if (lstat(state, &st) < 0 || !S_ISREG(st.st_mode))
		return err_set(err, ENOENT, "qemu: the saved VM %s/%s is missing", base, id);
	return 0;
}

int qemu_keep_consume(const char *state_dir, const char *id, const char *new_id, bool *disk_named,
		      bool *rootfs_named, struct err *err)
{
	*disk_named = *rootfs_named = false;
	if (!id || !cgroup_id_valid(id) || !cgroup_id_valid(new_id))
		return err_set(err, EINVAL, "qemu: invalid sandbox id");
	_cleanup_free_ char *base = keep_base(state_dir);
	_cleanup_free_ char *dir = xasprintf("%s/%s", base, id);
	char hex[13];
	random_hex(hex, 6);
	/* The commit: from here on the save is no one's (the sweep removes such names). */
	_cleanup_free_ char *gone = xasprintf("%s/%s.tmp-resumed-%s", base, id, hex);
	if (rename(dir, gone) < 0)
		return err_sys(err, errno, "qemu: rename %s to %s", dir, gone);
	struct {
		const char *name, *suffix;
		bool *named;
	} keep[] = { { KEEP_DISK, QEMU_KEEP_LIVE_DISK, disk_named },
		     { KEEP_ROOTFS, QEMU_KEEP_LIVE_ROOTFS, rootfs_named } };
	for (size_t i = 0; i < ARRAY_SIZE(keep); i++) {
		_cleanup_free_ char *from = xasprintf("%s/%s", gone, keep[i].name);
		_cleanup_free_ char *to = xasprintf("%s/%s%s", base, new_id, keep[i].suffix);
		if (rename(from, to) == 0)
			*keep[i].named = true;
		else if (errno != ENOENT)
			log_warn("qemu",
				 "rename %s to %s: %s (sandbox %s cannot be hibernated "
				 "again)",
				 from, to, strerror(errno), new_id);
	}
	struct err e;
	if (fs_rm_rf(gone, &e) < 0)
		log_warn("qemu", "cannot remove %s: %s", gone, e.msg);
	return 0;
}

void qemu_keep_remove(const char *state_dir, const char *id)
{
	if (!id || !cgroup_id_valid(id))
		return;
	_cleanup_free_ char *base = keep_base(state_dir);
	_cleanup_free_ char *dir = xasprintf("%s/%s", base, id);
	struct err e;
	if (fs_rm_rf(dir, &e) < 0)
		log_warn("qemu", "cannot remove %s: %s", dir, e.msg);
}

void qemu_keep_remove_live(const char *state_dir, const char *id)
{
	if (!id || !cgroup_id_valid(id))
		return;
	_cleanup_free_ char *base = keep_base(state_dir);
	static const char *const suffixes[] = { QEMU_KEEP_LIVE_DISK, QEMU_KEEP_LIVE_ROOTFS };
	for (size_t i = 0; i < ARRAY_SIZE(suffixes); i++) {
		_cleanup_free_ char *path = xasprintf("%s/%s%s", base, id, suffixes[i]);
		if (unlink(path) < 0 && errno != ENOENT)
			log_warn("qemu", "remove %s: %s", path, strerror(errno));
	}
}

/* Whether name is one of the n saves' names. */
static bool named_in(const char *name, const char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (names[i] && strcmp(name, names[i]) == 0)
			return true;
	return false;
}

/* Removes every entry of qemu-saved/ for which doomed(name) holds, saying why in the log. */
static void sweep_where(const char *state_dir, bool (*doomed)(const char *name, const void *arg),
			const void *arg, const char *why)
{
	_cleanup_free_ char *base = keep_base(state_dir);
	_cleanup_closedir_ DIR *d = opendir(base);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.' || !doomed(de->d_name, arg))
			continue;
		_cleanup_free_ char *path = xasprintf("%s/%s", base, de->d_name);
		struct err e;
		if (fs_rm_rf(path, &e) < 0)
			log_warn("qemu", "cannot remove %s: %s", path, e.msg);
		else
			log_info("qemu", "removed %s, %s", path, why);
	}
}

struct names {
	const char *const *v;
	size_t n;
};

static bool unnamed(const char *name, const void *arg)
{
	const struct names *k = arg;
	return !named_in(name, k->v, k->n);
}

static bool unfinished(const char *name, const void *arg)
{
	return strstr(name, ".tmp-") != NULL;
}

void qemu_keep_sweep_orphans(const char *state_dir, const char *const *keep, size_t n)
{
	const struct names k = { keep, n };
	sweep_where(state_dir, unnamed, &k, "which no hibernated session keeps");
}

void qemu_keep_sweep(const char *state_dir)
{
	sweep_where(state_dir, unfinished, NULL,
		    "a save or resume a stopped daemon left unfinished");
}
