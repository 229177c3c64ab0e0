/* qemu_snap: one snapshot per template, beside it in <template dir>/qemu/:
 *
 *   memory.ram  guest RAM: the snapshot's VM mapped it shared (so it holds the RAM as it
 *               was when the VM stopped); clones map it private, copy-on-write
 *   state.mig   QEMU's device state (a migration stream without the RAM: x-ignore-shared)
 *   meta.json   what it was made from (qemu_meta.c); any difference makes it stale
 *
 * A stale or missing snapshot is built in <template dir>/.qemu.tmp-XXXXXX and swapped in
 * whole; <template dir>/qemu.build.lock (flock, which excludes threads of one process too,
 * being per open file) keeps it to one builder per template across daemons.
 *
 * A clone never opens these files by path after they were validated: it gets descriptors
 * opened through one descriptor of the snapshot directory (so all three are of the same
 * build) and QEMU inherits them. Neither a rebuild's swap nor templates/build.sh replacing
 * the whole template directory can then hand a clone the RAM of one build and the state of
 * another; clones of a replaced snapshot keep running on its unlinked RAM file. */
#include "driver/qemu/qemu.h"
#include "driver/vm.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/random.h"
#include "util/sha256.h"
#include "util/time.h"

/* A cold boot of the snapshot's VM to its agent's first answer. Generous: TCG on a busy host
 * is slow, and this happens once per template. */
#define BUILD_BOOT_TIMEOUT_MS 120000
#define BUILD_SAVE_TIMEOUT_MS 60000
#define QMP_START_TIMEOUT_MS  10000

/* Every valid snapshot this process has seen, by template directory: revalidated with stats
 * only (meta.json, kernel, rootfs), never by reading or hashing big files again. */
struct seen {
	char *tdir;
	struct stat meta_st;
	json_t *meta;
	struct seen *next;
};

static struct {
	pthread_mutex_t lock;  /* seen, kernel hash cache */
	pthread_mutex_t build; /* one snapshot build at a time in this process */
	struct seen *seen;
	/* the kernel's hash, for the file identity it was computed from */
	char *kernel_path;
	struct stat kernel_st;
	char kernel_sha[65];
} snap_mod = { .lock = PTHREAD_MUTEX_INITIALIZER, .build = PTHREAD_MUTEX_INITIALIZER };

static bool same_file(const struct stat *a, const struct stat *b)
{
	return a->st_dev == b->st_dev && a->st_ino == b->st_ino && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

static int64_t mtime_ns(const struct stat *st)
{
	return (int64_t)st->st_mtim.tv_sec * 1000000000 + st->st_mtim.tv_nsec;
}

static int hash_file(const char *path, size_t size, char out[65], struct err *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return err_sys(err, errno, "qemu: guest kernel `%s`", path);
	_cleanup_free_ uint8_t *buf = xmalloc(size ? size : 1);
	size_t got = 0;
	while (got < size) {
		ssize_t n = read(fd, buf + got, size - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return err_sys(err, n < 0 ? errno : EIO, "qemu: reading `%s`", path);
		got += (size_t)n;
	}
	sha256_hex(buf, size, out);
	return 0;
}

/* The kernel's sha256, hashed once per file identity. */
static int kernel_sha(const char *path, struct stat *st, char out[65], struct err *err)
{
	if (stat(path, st) < 0)
		return err_sys(
			err, errno,
			"qemu: no guest kernel at `%s` (build it with guest/kernel/build.sh)",
			path);
	pthread_mutex_lock(&snap_mod.lock);
	bool hit = snap_mod.kernel_path && strcmp(snap_mod.kernel_path, path) == 0 &&
		   same_file(&snap_mod.kernel_st, st);
	if (hit)
		memcpy(out, snap_mod.kernel_sha, 65);
	pthread_mutex_unlock(&snap_mod.lock);
	if (hit)
		return 0;
	int r = hash_file(path, (size_t)st->st_size, out, err);
	if (r < 0)
		return r;
	pthread_mutex_lock(&snap_mod.lock);
	free(snap_mod.kernel_path);
	snap_mod.kernel_path = xstrdup(path);
	snap_mod.kernel_st = *st;
	memcpy(snap_mod.kernel_sha, out, 65);
	pthread_mutex_unlock(&snap_mod.lock);
	return 0;
}

void qemu_key_free(struct qemu_snap_key *k)
{
	free((char *)k->m.cmdline);
	free((char *)k->m.rootfs);
	k->m.cmdline = NULL;
	k->m.rootfs = NULL;
}

int qemu_key_build(const struct qemu_host *h, const struct qemu_want *w, const json_t *meta,
		   struct qemu_snap_key *k, struct err *err)
{
	memset(k, 0, sizeof(*k));
	struct stat kst, rst;
	int r = kernel_sha(h->kernel, &kst, k->kernel_sha256, err);
	if (r < 0)
		return r;
	if (stat(w->rootfs, &rst) < 0)
		return err_sys(err, errno, "qemu: template image `%s`", w->rootfs);
	k->kernel_size = (uint64_t)kst.st_size;
	k->kernel_mtime_ns = mtime_ns(&kst);
	k->rootfs_size = (uint64_t)rst.st_size;
	k->rootfs_mtime_ns = mtime_ns(&rst);
	k->qemu_version = h->qemu_version;
	k->host_cpu = h->accel == QEMU_ACCEL_KVM ? h->host_cpu : "";
	k->workspace_mib = w->workspace_mib;
	k->tasks_max = vm_guest_threads_max(w->pids_max);
	k->tsc_khz = h->accel == QEMU_ACCEL_TCG ? h->tsc_khz : 0;
	/* A rate measured again within 0.1% of the snapshot's is the same clock. */
	unsigned had = qemu_meta_tsc_khz(meta);
	if (k->tsc_khz && had &&
	    (uint64_t)(had > k->tsc_khz ? had - k->tsc_khz : k->tsc_khz - had) * 1000 <= k->tsc_khz)
		k->tsc_khz = had;

	k->m.accel = h->accel;
	k->m.channel = h->channel;
	k->m.vcpus = w->vcpus;
	k->m.mem_mib = w->mem_mib;
	k->m.kernel = h->kernel;
	k->m.rootfs = xstrdup(w->rootfs);
	struct qemu_cmdline_opts o = {
		.accel = h->accel,
		.channel = h->channel,
		.tsc_khz = k->tsc_khz,
		.workspace_mib = w->workspace_mib,
		.tasks_max = k->tasks_max,
	};
	k->m.cmdline = qemu_cmdline(&o);
	return 0;
}

static struct seen *seen_find(const char *tdir)
{
	for (struct seen *s = snap_mod.seen; s; s = s->next)
		if (strcmp(s->tdir, tdir) == 0)
			return s;
	return NULL;
}

/* meta.json in the snapshot directory dirfd of template tdir: from the cache while the file
 * is the same. */
static json_t *meta_load(const char *tdir, int dirfd, struct err *err)
{
	struct stat st;
	if (fstatat(dirfd, QEMU_SNAP_META, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		err_set(err, ENOENT, "there is none");
		return NULL;
	}
	pthread_mutex_lock(&snap_mod.lock);
	struct seen *s = seen_find(tdir);
	json_t *meta = s && same_file(&s->meta_st, &st) ? json_incref(s->meta) : NULL;
	pthread_mutex_unlock(&snap_mod.lock);
	if (meta)
		return meta;

	_cleanup_close_ int fd = openat(dirfd, QEMU_SNAP_META, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	json_error_t jerr;
	meta = fd >= 0 ? json_loadfd(fd, JSON_REJECT_DUPLICATES, &jerr) : NULL;
	if (!meta) {
		err_set(err, EINVAL, "its meta.json cannot be read: %s",
			fd >= 0 ? jerr.text : strerror(errno));
		return NULL;
	}
	pthread_mutex_lock(&snap_mod.lock);
	s = seen_find(tdir);
	if (!s) {
		s = xcalloc(1, sizeof(*s));
		s->tdir = xstrdup(tdir);
		s->next = snap_mod.seen;
		snap_mod.seen = s;
	}
	json_decref(s->meta);
	s->meta = json_incref(meta);
	s->meta_st = st;
	pthread_mutex_unlock(&snap_mod.lock);
	return meta;
}

static int open_snap_dir(const char *tdir)
{
	_cleanup_free_ char *dir = xasprintf("%s/" QEMU_SNAP_DIR, tdir);
	return open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
}

/* The meta.json of tdir's current snapshot, or NULL. */
static json_t *current_meta(const char *tdir)
{
	_cleanup_close_ int dirfd = open_snap_dir(tdir);
	return dirfd >= 0 ? meta_load(tdir, dirfd, NULL) : NULL;
}

/* What load() checks once s has its meta and key: that they match, that the snapshot's files
 * are there at their size and, with `rootfs`, that the template's image is still the one the
 * key describes. The files checked are opened into s. */
static int check_files(int dirfd, const struct qemu_want *w, struct qemu_snap *s, bool rootfs,
		       struct err *why)
{
	int r = qemu_meta_match(s->meta, &s->key, why);
	if (r < 0)
		return r;
	struct stat st;
	s->ram_fd = openat(dirfd, QEMU_SNAP_RAM, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	s->state_fd = openat(dirfd, QEMU_SNAP_STATE, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (s->ram_fd < 0 || s->state_fd < 0 || fstat(s->ram_fd, &st) < 0 ||
	    (uint64_t)st.st_size != (uint64_t)s->key.m.mem_mib << 20)
		return err_set(why, ENOENT, "its files are incomplete");
	if (!rootfs)
		return 0;
	/* The image QEMU attaches must be the one the guest's page cache came from. */
	s->rootfs_fd = open(w->rootfs, O_RDONLY | O_CLOEXEC);
	if (s->rootfs_fd < 0 || fstat(s->rootfs_fd, &st) < 0 ||
	    (uint64_t)st.st_size != s->key.rootfs_size || mtime_ns(&st) != s->key.rootfs_mtime_ns)
		return err_set(why, ESTALE, "the template's %s changed", w->rootfs);
	return 0;
}

/* Whether tdir has a snapshot that matches w: 0, or -ESTALE/-ENOENT/-EINVAL with why. With
 * ret, also opens its files and the template's rootfs (checked against the key) into it. */
static int load(const struct qemu_host *h, const struct qemu_want *w, struct qemu_snap *ret,
		struct err *why)
{
	_cleanup_close_ int dirfd = open_snap_dir(w->tdir);
	if (dirfd < 0)
		return err_set(why, ENOENT, "there is none");
	struct qemu_snap s = { .ram_fd = -1, .state_fd = -1, .rootfs_fd = -1 };
	s.meta = meta_load(w->tdir, dirfd, why);
	if (!s.meta)
		return -why->errnum;
	int r = qemu_key_build(h, w, s.meta, &s.key, why);
	if (r == 0)
		r = check_files(dirfd, w, &s, ret != NULL, why);
	if (r < 0 || !ret) {
		qemu_snap_release(&s);
		return r;
	}
	*ret = s;
	return 0;
}

/* Whether load() failed in a way a build mends: no snapshot, a stale one, a malformed one. */
static bool build_mends(int r)
{
	return r == -ESTALE || r == -ENOENT || r == -EINVAL;
}

static int lock_file(const char *tdir, const char *name, int op, int *ret, struct err *err)
{
	_cleanup_free_ char *path = xasprintf("%s/%s", tdir, name);
	_cleanup_close_ int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return err_sys(err, errno, "qemu: lock file `%s`", path);
	int r;
	while ((r = flock(fd, op)) < 0 && errno == EINTR)
		;
	if (r < 0)
		return err_sys(err, errno, "qemu: locking `%s`", path);
	*ret = TAKE_FD(fd);
	return 0;
}

static int fsync_path(const char *path, int flags, struct err *err)
{
	_cleanup_close_ int fd = open(path, flags | O_CLOEXEC);
	if (fd < 0 || fsync(fd) < 0)
		return err_sys(err, errno, "qemu: syncing `%s`", path);
	return 0;
}

static int write_meta(const char *dir, json_t *meta, struct err *err)
{
	_cleanup_free_ char *path = xasprintf("%s/" QEMU_SNAP_META, dir);
	if (json_dump_file(meta, path, JSON_INDENT(2) | JSON_SORT_KEYS) < 0)
		return err_set(err, EIO, "qemu: cannot write `%s`", path);
	return fsync_path(path, O_RDONLY, err);
}

/* Warms the build's VM up, then saves its state into `state`. */
static int warm_and_save(struct qemu_vm *vm, const char *state, struct err *err)
{
	/* What every clone's first command does, done once here: the shell and what it loads
	 * are then in the guest's page cache in the snapshot, instead of being read from the
	 * disk by each clone. A template without /bin/sh only misses the head start. */
	struct err werr;
	if (qemu_vm_call(vm, 2, "{\"op\":\"exec\",\"argv\":[\"/bin/sh\",\"-c\",\"true\"]}",
			 BUILD_BOOT_TIMEOUT_MS, &werr) < 0)
		log_info("qemu", "snapshot build %s: warm-up command failed: %s", vm->name,
			 werr.msg);
	_cleanup_close_ int sfd =
		open(state, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (sfd < 0)
		return err_sys(err, errno, "qemu: creating `%s`", state);
	return qemu_vm_save(vm, sfd, BUILD_SAVE_TIMEOUT_MS, err);
}

/* Starts the build's VM (l) in cg, waits for its agent and saves it into `state`. The VM and
 * its run directory are gone when this returns. */
static int run_and_save(const struct qemu_host *h, const struct qemu_launch *l,
			const struct cgroup *cg, const char *state, int64_t *boot_ms,
			struct err *err)
{
	_cleanup_free_ char *dir = NULL;
	int r = qemu_vm_dir(h->run_dir, l->name, &dir, err);
	if (r < 0)
		return r;
	int64_t t0 = time_mono_ms();
	struct qemu_vm *vm = NULL;
	if ((r = qemu_vm_start(l, TAKE_PTR(dir), cg, QMP_START_TIMEOUT_MS, &vm, err)) < 0)
		return r;
	if ((r = qemu_vm_connect_agent(vm, BUILD_BOOT_TIMEOUT_MS, err)) == 0 &&
	    (r = qemu_vm_call(vm, 1, "{\"op\":\"ping\"}", BUILD_BOOT_TIMEOUT_MS, err)) == 0) {
		*boot_ms = time_mono_ms() - t0;
		r = warm_and_save(vm, state, err);
	}
	qemu_vm_free(vm);
	return r;
}

/* The template snapshots' RAM as sandboxd gives it to clones: one memfd per snapshot RAM
 * file, a copy of it made once and sealed against every change (F_SEAL_WRITE, SHRINK, GROW,
 * SEAL). QEMU maps it private (copy-on-write), so clones share its pages, and neither a
 * write() through any descriptor nor a shared writable mapping can change what every later
 * clone starts from. A snapshot replaced by a rebuild gets a new memfd; clones of the old
 * one keep theirs. */
struct sealed_ram {
	char *tdir;
	struct stat st; /* the RAM file it is a copy of */
	int fd;
	struct sealed_ram *next;
};

static struct {
	pthread_mutex_t lock; /* held while a copy is made: one at a time */
	struct sealed_ram *list;
} sealed_mod = { .lock = PTHREAD_MUTEX_INITIALIZER };

static int sealed_copy(const char *tdir, int file, const struct stat *st, int *ret, struct err *err)
{
	/* The name shows in /proc/<qemu>/maps: the template's, short (memfd names stop at 249
	 * bytes). */
	const char *base = strrchr(tdir, '/') ? strrchr(tdir, '/') + 1 : tdir;
	_cleanup_free_ char *name = xasprintf("sandbox-ram:%.64s", base);
	_cleanup_close_ int fd = (int)memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, st->st_size) < 0)
		return err_sys(err, errno, "qemu: a memfd for the snapshot's RAM");
	int r = fs_copy_data(file, fd, (uint64_t)st->st_size, err);
	if (r < 0)
		return err_wrap(err, "qemu: copying the snapshot's RAM");
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
		return err_sys(err, errno, "qemu: sealing the snapshot's RAM");
	*ret = TAKE_FD(fd);
	return 0;
}

/* Drops the memfds of other templates whose snapshot RAM file is gone or was replaced (the
 * template removed or rebuilt), so that they do not hold their memory for the daemon's life;
 * clones running from them keep their own descriptors. Called with sealed_mod.lock held. */
static void prune_sealed(const char *keep)
{
	for (struct sealed_ram **pp = &sealed_mod.list; *pp;) {
		struct sealed_ram *e = *pp;
		_cleanup_free_ char *path =
			xasprintf("%s/" QEMU_SNAP_DIR "/" QEMU_SNAP_RAM, e->tdir);
		struct stat st;
		if (strcmp(e->tdir, keep) == 0 ||
		    (stat(path, &st) == 0 && same_file(&e->st, &st))) {
			pp = &e->next;
			continue;
		}
		*pp = e->next;
		close(e->fd);
		free(e->tdir);
		free(e);
	}
}

/* A descriptor (the caller's) of the sealed memfd for tdir's RAM file `file`. */
static int sealed_ram(const char *tdir, int file, int *ret, struct err *err)
{
	struct stat st;
	if (fstat(file, &st) < 0)
		return err_sys(err, errno, "qemu: the snapshot's RAM");
	pthread_mutex_lock(&sealed_mod.lock);
	prune_sealed(tdir);
	struct sealed_ram *e = sealed_mod.list;
	while (e && strcmp(e->tdir, tdir) != 0)
		e = e->next;
	int r = 0;
	if (!e || !same_file(&e->st, &st)) {
		int64_t t0 = time_mono_ms();
		int fd = -1;
		r = sealed_copy(tdir, file, &st, &fd, err);
		if (r == 0) {
			if (!e) {
				e = xcalloc(1, sizeof(*e));
				e->tdir = xstrdup(tdir);
				e->next = sealed_mod.list;
				sealed_mod.list = e;
			} else {
				close(e->fd);
			}
			e->fd = fd;
			e->st = st;
			log_info("qemu", "the snapshot RAM of %s sealed in a memfd in %lld ms",
				 tdir, (long long)(time_mono_ms() - t0));
		}
	}
	if (r == 0 && (*ret = fcntl(e->fd, F_DUPFD_CLOEXEC, 3)) < 0)
		r = err_sys(err, errno, "qemu: dup");
	pthread_mutex_unlock(&sealed_mod.lock);
	return r;
}

/* Boots the template once in `tmp`, waits for its agent and saves it there. */
static int boot_and_save(const struct qemu_host *h, const struct qemu_snap_key *k, const char *tmp,
			 int64_t *boot_ms, struct err *err)
{
	char hex[17];
	random_hex(hex, 8);
	_cleanup_free_ char *name = xasprintf("prep-%s", hex);
	_cleanup_free_ char *ram = xasprintf("%s/" QEMU_SNAP_RAM, tmp);
	_cleanup_free_ char *state = xasprintf("%s/" QEMU_SNAP_STATE, tmp);

	/* The build's VM writes its RAM into a memfd (QEMU, an unprivileged uid, could not
	 * open a file of root's), copied into the RAM file once it is saved: at its full size,
	 * sparse, so that only what the guest touched takes disk. */
	uint64_t size = (uint64_t)k->m.mem_mib << 20;
	_cleanup_close_ int ram_fd =
		open(ram, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (ram_fd < 0 || ftruncate(ram_fd, (off_t)size) < 0)
		return err_sys(err, errno, "qemu: creating `%s`", ram);
	_cleanup_close_ int mem = (int)memfd_create("sandbox-ram-build", MFD_CLOEXEC);
	if (mem < 0 || ftruncate(mem, (off_t)size) < 0)
		return err_sys(err, errno, "qemu: the build's guest RAM");
	/* The image booted is the one the key describes. */
	_cleanup_close_ int rootfs = open(k->m.rootfs, O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (rootfs < 0 || fstat(rootfs, &st) < 0)
		return err_sys(err, errno, "qemu: template image `%s`", k->m.rootfs);
	if ((uint64_t)st.st_size != k->rootfs_size || mtime_ns(&st) != k->rootfs_mtime_ns)
		return err_set(err, EAGAIN, "the template's %s changed during the build",
			       k->m.rootfs);
	/* The build's VM is bounded like a sandbox's, without a CPU quota: it is the server's
	 * own work and delays every first session. */
	struct cgroup_limits lim = { 0 };
	vm_vmm_limits(&(struct sandbox_limits){ 0 }, k->m.mem_mib, k->m.vcpus, &qemu_vmm_needs,
		      &lim.memory_bytes, &lim.pids_max);
	struct cgroup *cg = NULL;
	int r = cgroup_create(&h->cg, name, &lim, &cg, err);
	if (r < 0)
		return err_wrap(err, "qemu");
	struct qemu_launch l = {
		.m = &k->m,
		.qemu_bin = h->qemu_bin,
		.name = name,
		.mem_share = true,
		.ram_fd = mem,
		.rootfs_fd = rootfs,
		.vsock_cid = k->m.channel == QEMU_CHANNEL_VSOCK ? qemu_random_cid() : 0,
	};
	r = run_and_save(h, &l, cg, state, boot_ms, err);
	if (r == 0 && (r = fs_copy_data(mem, ram_fd, size, err)) < 0)
		err_wrap(err, "qemu: copying guest RAM into the snapshot");
	struct err e;
	if (cgroup_remove(cg, &e) < 0)
		log_warn("qemu", "snapshot build %s: %s", name, e.msg);
	cgroup_free(cg);
	return r;
}

/* Puts the freshly built `tmp` in place of <tdir>/qemu. */
static int swap_in(const char *tdir, const char *tmp, struct err *err)
{
	_cleanup_free_ char *dst = xasprintf("%s/" QEMU_SNAP_DIR, tdir);
	if (renameat2(AT_FDCWD, tmp, AT_FDCWD, dst, RENAME_EXCHANGE) == 0)
		return 0; /* tmp now holds the old snapshot: the caller removes it */
	if (errno != ENOENT)
		return err_sys(err, errno, "qemu: replacing `%s`", dst);
	if (rename(tmp, dst) < 0)
		return err_sys(err, errno, "qemu: installing `%s`", dst);
	return 0;
}

static int build(const struct qemu_host *h, const struct qemu_want *w, struct err *err)
{
	_cleanup_(qemu_key_free) struct qemu_snap_key k = { 0 };
	json_auto_t *old = current_meta(w->tdir);
	int r = qemu_key_build(h, w, old, &k, err);
	if (r < 0)
		return r;
	_cleanup_free_ char *tmp = xasprintf("%s/.qemu.tmp-XXXXXX", w->tdir);
	if (!mkdtemp(tmp))
		return err_sys(err, errno, "qemu: creating a directory in `%s`", w->tdir);
	int64_t boot_ms = 0;
	r = boot_and_save(h, &k, tmp, &boot_ms, err);
	if (r == 0) {
		json_auto_t *meta = qemu_meta_build(&k);
		json_object_set_new(meta, "bootMs", json_integer(boot_ms));
		json_object_set_new(meta, "createdAt", json_integer((json_int_t)time(NULL)));
		_cleanup_free_ char *ram = xasprintf("%s/" QEMU_SNAP_RAM, tmp);
		_cleanup_free_ char *state = xasprintf("%s/" QEMU_SNAP_STATE, tmp);
		/* On disk before it is in place: a crash must not leave a snapshot whose RAM
		 * and state disagree. */
		if ((r = fsync_path(ram, O_RDONLY, err)) == 0 &&
		    (r = fsync_path(state, O_RDONLY, err)) == 0 &&
		    (r = write_meta(tmp, meta, err)) == 0 &&
		    (r = fsync_path(tmp, O_RDONLY | O_DIRECTORY, err)) == 0)
			r = swap_in(w->tdir, tmp, err);
		if (r == 0)
			log_info("qemu", "snapshot of %s built: cold boot to first reply %lld ms",
				 w->tdir, (long long)boot_ms);
	}
	struct err e;
	if (fs_rm_rf(tmp, &e) < 0)
		log_warn("qemu", "cannot remove `%s`: %s", tmp, e.msg);
	return r;
}

/* Removes what builds that died midway left in tdir. Called with the build lock held: no
 * build of this template is running anywhere. */
static void sweep_tmp(const char *tdir)
{
	_cleanup_closedir_ DIR *d = opendir(tdir);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (strncmp(de->d_name, ".qemu.tmp-", 10) != 0)
			continue;
		_cleanup_free_ char *path = xasprintf("%s/%s", tdir, de->d_name);
		struct err e;
		if (fs_rm_rf(path, &e) < 0)
			log_warn("qemu", "cannot remove `%s`: %s", path, e.msg);
		else
			log_info("qemu", "removed `%s`, left by an interrupted build", path);
	}
}

/* Builds the snapshot unless another builder did meanwhile. Called with snap_mod.build held; takes
 * the template's build lock, which keeps other daemons out. */
static int prepare_locked(const struct qemu_host *h, const struct qemu_want *w, struct err *err)
{
	_cleanup_close_ int lock = -1;
	int r = lock_file(w->tdir, "qemu.build.lock", LOCK_EX, &lock, err);
	if (r < 0)
		return r;
	/* Someone may have built it while we waited. */
	struct err why;
	r = load(h, w, NULL, &why);
	if (r == 0)
		return 0;
	if (!build_mends(r))
		return err_copy(err, &why);
	sweep_tmp(w->tdir);
	log_info("qemu", "building the snapshot of %s: %s", w->tdir, why.msg);
	if ((r = build(h, w, err)) < 0) {
		err_wrap(err, "building the snapshot");
		return r;
	}
	if (load(h, w, NULL, &why) < 0)
		return err_set(err, EIO, "the snapshot just built does not validate: %s", why.msg);
	return 0;
}

int qemu_snap_prepare(const struct qemu_host *h, const struct qemu_want *w, struct err *err)
{
	struct err why;
	int r = load(h, w, NULL, &why);
	if (r == 0)
		return 0;
	if (!build_mends(r))
		return err_copy(err, &why);
	pthread_mutex_lock(&snap_mod.build);
	r = prepare_locked(h, w, err);
	pthread_mutex_unlock(&snap_mod.build);
	return r;
}

int qemu_snap_acquire(const struct qemu_host *h, const struct qemu_want *w, struct qemu_snap *ret,
		      struct err *err)
{
	struct err why;
	int r = load(h, w, ret, &why);
	if (r < 0)
		return err_set(err, ENOENT, "no usable snapshot: %s", why.msg);
	/* The clone gets the sealed copy, never the file. */
	int mem = -1;
	if ((r = sealed_ram(w->tdir, ret->ram_fd, &mem, err)) < 0) {
		qemu_snap_release(ret);
		return r;
	}
	close(ret->ram_fd);
	ret->ram_fd = mem;
	return 0;
}

void qemu_snap_release(struct qemu_snap *s)
{
	if (s->ram_fd >= 0)
		close(s->ram_fd);
	if (s->state_fd >= 0)
		close(s->state_fd);
	if (s->rootfs_fd >= 0)
		close(s->rootfs_fd);
	json_decref(s->meta);
	qemu_key_free(&s->key);
	memset(s, 0, sizeof(*s));
	s->ram_fd = s->state_fd = s->rootfs_fd = -1;
}

void qemu_snap_invalidate(const struct qemu_want *w, const struct qemu_snap *s)
{
	_cleanup_close_ int dirfd = open_snap_dir(w->tdir);
	if (dirfd < 0)
		return;
	json_auto_t *now = meta_load(w->tdir, dirfd, NULL);
	if (!now || !s->meta || !json_equal(now, s->meta))
		return; /* rebuilt meanwhile */
	if (renameat(dirfd, QEMU_SNAP_META, dirfd, QEMU_SNAP_META ".rejected") == 0)
		log_warn("qemu", "the snapshot of %s did not restore: it will be rebuilt", w->tdir);
}
