/* qemu: the VM driver for any Linux with qemu-system-x86. Each sandbox is a QEMU microvm
 * restored from its template's snapshot (qemu_snap.c), in a cgroup of its own, with its
 * console captured in its run directory <run_dir>/qemu/<id>/. KVM when it is usable, TCG
 * (full emulation) otherwise; see qemu.h for the pieces. */
#include "driver/driver.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "driver/jail/jail.h"
#include "driver/proc.h"
#include "driver/qemu/qemu.h"
#include "driver/vm.h"
#include "util/cleanup.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/random.h"
#include "util/spawn.h"
#include "util/time.h"

/* A guest kernel under a usable KVM reaches its first panic (no root device) well within
 * this; under a nested or emulated KVM it does not get through early boot at all. */
#define KVM_PROBE_TIMEOUT_MS 3000
#define VERSION_TIMEOUT_MS   5000
#define QMP_START_TIMEOUT_MS 10000
/* A clone's agent channel is there at once; a cold boot's agent may take a while. */
#define AGENT_CONNECT_TIMEOUT_MS 10000
#define COLD_BOOT_TIMEOUT_MS     120000
#define RESTORE_TIMEOUT_MS       30000
/* A hibernated VM's stream holds all its RAM. */
#define RESUME_TIMEOUT_MS 120000
/* How long cleanup_stale waits for a killed leftover QEMU to exit. */

/* The per-driver state of a sandbox (sandbox->priv). */
struct qemu_sb {
	struct qemu_vm *vm;
	struct cgroup *cg;
	int disk_fd; /* the disk's image (-1: none), closed once QEMU is gone */
	/* A resumed VM's: its disk and its template image have names (qemu_keep_consume). */
	bool disk_named, rootfs_named;
	char *rootfs_path; /* the template's image by its path (qemu_keep_what.rootfs_path) */
	/* What a hibernation saves besides the VM (qemu_keep.c): the machine it runs as
	 * (m.cmdline owned), the template image its guest runs on, whether it has volumes
	 * (then it cannot be), and whether it is frozen (a failed save leaves it so). */
	struct qemu_machine m;
	int rootfs_fd;
	unsigned nvolumes;
	bool frozen;
};

static struct {
	pthread_mutex_t lock;
	bool probed;
	bool initialised;
	struct qemu_host h;
	char *state_dir;   /* SANDBOX_STATE_DIR: hibernated VMs are kept in it */
	char kvm_why[160]; /* why KVM is not used, for the log and for auto's verdict */
} qemu_mod = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* --- small host facts ------------------------------------------------------------------ */

static char *qemu_version(const char *bin, struct err *err)
{
	char *const argv[] = { (char *)bin, "--version", NULL };
	char out[512];
	int st = spawn_run_bounded(argv, VERSION_TIMEOUT_MS, out, sizeof(out));
	if (st < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		err_set(err, ENOEXEC, "`%s --version` failed", bin);
		return NULL;
	}
	out[strcspn(out, "\r\n")] = '\0';
	if (!strstr(out, "QEMU")) {
		err_set(err, ENOEXEC, "`%s` does not look like QEMU: %.100s", bin, out);
		return NULL;
	}
	return xstrdup(out);
}

#if defined(__x86_64__) || defined(__i386__)
/* A TSC reading and its time: of several tries, the one whose bracketing clock reads are
 * closest, so that a preemption between them cannot skew it. */
static void tsc_point(uint64_t *ret_tsc, double *ret_ns)
{
	double best = -1;
	for (int i = 0; i < 16; i++) {
		struct timespec a, b;
		clock_gettime(CLOCK_MONOTONIC_RAW, &a);
		uint64_t t = __builtin_ia32_rdtsc();
		clock_gettime(CLOCK_MONOTONIC_RAW, &b);
		double na = (double)a.tv_sec * 1e9 + (double)a.tv_nsec;
		double nb = (double)b.tv_sec * 1e9 + (double)b.tv_nsec;
		if (best < 0 || nb - na < best) {
			best = nb - na;
			*ret_tsc = t;
			*ret_ns = (na + nb) * 0.5;
		}
	}
}
#endif

/* The host's TSC rate in kHz: a TCG guest's TSC is the host's. 0 where there is none. */
static unsigned measure_tsc_khz(void)
{
#if defined(__x86_64__) || defined(__i386__)
	uint64_t t0, t1;
	double m0, m1;
	tsc_point(&t0, &m0);
	struct timespec nap = { 0, 50 * 1000000L };
	while (nanosleep(&nap, &nap) < 0 && errno == EINTR)
		;
	tsc_point(&t1, &m1);
	if (m1 <= m0 || t1 <= t0)
		return 0;
	return (unsigned)((double)(t1 - t0) / (m1 - m0) * 1e6 + 0.5);
#else
	return 0;
#endif
}

static char *host_cpu_model(void)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/cpuinfo", "re");
	char line[512];
	while (f && fgets(line, sizeof(line), f)) {
		if (strncmp(line, "model name", 10) != 0)
			continue;
		char *v = strchr(line, ':');
		if (!v)
			break;
		v++;
		v += strspn(v, " \t");
		v[strcspn(v, "\n")] = '\0';
		return xstrdup(v);
	}
	return xstrdup("unknown");
}

/* Whether a guest kernel under KVM gets through its boot quickly (to the panic for want of a
 * root device: -no-reboot then ends QEMU): 1, or 0 with why. A KVM that exists but crawls
 * (nested without hardware help) is worse than TCG. -1 (with why) when QEMU could not be run
 * at all: no verdict about KVM, so none to keep. */
static int kvm_boots(const char *qemu_bin, const char *kernel, char *why, size_t n)
{
	char *const argv[] = {
		(char *)qemu_bin,
		"-M",
		"microvm,x-option-roms=off",
		"-accel",
		"kvm",
		"-cpu",
		"host",
		"-m",
		"64M",
		"-smp",
		"1",
		"-nodefaults",
		"-no-user-config",
		"-nographic",
		"-no-reboot",
		"-kernel",
		(char *)kernel,
		"-append",
		"console=ttyS0 quiet panic=-1 reboot=k",
		"-serial",
		"stdio",
		NULL,
	};
	int64_t t0 = time_mono_ms();
	char out[4096];
	int st = spawn_run_bounded(argv, KVM_PROBE_TIMEOUT_MS, out, sizeof(out));
	int64_t ms = time_mono_ms() - t0;
	if (st == -ETIMEDOUT) {
		snprintf(why, n, "a guest kernel did not boot under KVM within %d ms (nested KVM?)",
			 KVM_PROBE_TIMEOUT_MS);
		return 0;
	}
	if (st < 0) {
		snprintf(why, n, "QEMU could not be run to try KVM: %s", strerror(-st));
		return -1;
	}
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		/* QEMU's own complaint: its first line that names it. */
		const char *line = strstr(out, "qemu-system") ? strstr(out, "qemu-system") : out;
		size_t len = strcspn(line, "\r\n");
		snprintf(why, n, "QEMU could not run a guest under KVM%s%.*s", len ? ": " : "",
			 (int)(len > 100 ? 100 : len), line);
		return 0;
	}
	log_info("qemu", "KVM probe: a guest kernel booted in %lld ms", (long long)ms);
	return 1;
}

/* Whether KVM is worth using: /dev/kvm opens, and (kvm_boots) a guest boots under it. The
 * boot's verdict is kept in <run_dir>/kvm-probe.json for every later start of this boot with
 * the same host kernel, QEMU and guest kernel (qemu_kvm_cache.c): a KVM that cannot run
 * guests costs its 3 s once, not at every start. */
static bool kvm_usable(const char *run_dir, const struct qemu_host *h, char *why, size_t n)
{
	int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		snprintf(why, n, "/dev/kvm: %s", strerror(errno));
		return false;
	}
	close(fd);
	_cleanup_free_ char *path = xasprintf("%s/kvm-probe.json", run_dir);
	struct err e;
	json_auto_t *key = qemu_kvm_cache_key(NULL, h->qemu_bin, h->qemu_version, h->kernel, &e);
	if (!key)
		log_info("qemu", "KVM probe: its verdict is not kept (%s)", e.msg);
	bool usable = false;
	char reason[160];
	if (key && qemu_kvm_cache_load(path, key, &usable, why, n, reason, sizeof(reason)) == 0) {
		log_info("qemu", "KVM probe: this boot's verdict, kept in %s: %s", path,
			 usable ? "usable" : why);
		return usable;
	}
	if (key)
		log_debug("qemu", "KVM probe: no verdict to reuse in %s (%s)", path, reason);
	int r = kvm_boots(h->qemu_bin, h->kernel, why, n);
	if (r >= 0 && key && qemu_kvm_cache_store(path, key, r == 1, why, &e) < 0)
		log_info("qemu", "KVM probe: its verdict is not kept: %s", e.msg);
	return r == 1;
}

/* --- probe and init -------------------------------------------------------------------- */

static void host_clear(struct qemu_host *h)
{
	free(h->qemu_bin);
	free(h->qemu_version);
	free(h->run_dir);
	free(h->kernel);
	free(h->host_cpu);
	cgroup_root_free(&h->cg);
	memset(h, 0, sizeof(*h));
}

static int probe_host(const struct config *cfg, struct qemu_host *h, struct err *err)
{
	memset(h, 0, sizeof(*h));
	int r;
	h->qemu_bin = spawn_find_binary(cfg->qemu_bin);
	if (!h->qemu_bin)
		return err_set(err, ENOENT,
			       "QEMU `%s` not found (install qemu-system-x86, or set "
			       "SANDBOX_QEMU_BIN)",
			       cfg->qemu_bin);
	if (!(h->qemu_version = qemu_version(h->qemu_bin, err)))
		return -err->errnum;
	/* One built in the artifacts directory (make kernel) comes first, then the packaged one
	 * (agent-sandbox-vm). */
	h->kernel = xasprintf("%s/vmlinux", cfg->artifacts_dir);
	struct stat st;
	if (stat(h->kernel, &st) < 0 && errno == ENOENT && stat(VMLINUX_INSTALLED, &st) == 0) {
		free(h->kernel);
		h->kernel = xstrdup(VMLINUX_INSTALLED);
	}
	if (stat(h->kernel, &st) < 0 || !S_ISREG(st.st_mode))
		return err_set(err, ENOENT,
			       "no guest kernel at `%s` or `%s` (install the package "
			       "agent-sandbox-vm, or build it with guest/kernel/build.sh)",
			       h->kernel, VMLINUX_INSTALLED);
	if ((r = cgroup_root_detect(CGROUP_ROOT, &h->cg, err)) < 0 ||
	    (r = cgroup_check(&h->cg, err)) < 0 || (r = jail_uid_setup(cfg, err)) < 0)
		return r;
	h->run_dir = xasprintf("%s/qemu", cfg->run_dir);

	const char *want = cfg->qemu_accel ? cfg->qemu_accel : "auto";
	if (strcmp(want, "kvm") == 0) {
		if (access("/dev/kvm", R_OK | W_OK) < 0)
			return err_sys(err, errno, "SANDBOX_QEMU_ACCEL=kvm, but /dev/kvm");
		h->accel = QEMU_ACCEL_KVM;
	} else if (strcmp(want, "tcg") == 0) {
		h->accel = QEMU_ACCEL_TCG;
		snprintf(qemu_mod.kvm_why, sizeof(qemu_mod.kvm_why), "SANDBOX_QEMU_ACCEL=tcg");
	} else {
		h->accel = kvm_usable(cfg->run_dir, h, qemu_mod.kvm_why, sizeof(qemu_mod.kvm_why))
				   ? QEMU_ACCEL_KVM
				   : QEMU_ACCEL_TCG;
	}
	h->channel = access("/dev/vhost-vsock", R_OK | W_OK) == 0 ? QEMU_CHANNEL_VSOCK
								  : QEMU_CHANNEL_SERIAL;
	h->host_cpu = h->accel == QEMU_ACCEL_KVM ? host_cpu_model() : xstrdup("");
	if (h->accel == QEMU_ACCEL_TCG)
		h->tsc_khz = measure_tsc_khz();
	return 0;
}

/* Learns the host's facts into qemu_mod.h. Called with qemu_mod.lock held. */
static int probe_locked(const struct config *cfg, struct err *err)
{
	_cleanup_(host_clear) struct qemu_host h = { 0 };
	int r = probe_host(cfg, &h, err);
	if (r < 0)
		return r;
	qemu_mod.h = TAKE_STRUCT(h);
	qemu_mod.probed = true;
	log_info("qemu", "%s, %s%s%s, agent channel %s", qemu_mod.h.qemu_version,
		 qemu_mod.h.accel == QEMU_ACCEL_KVM ? "KVM" : "TCG (full emulation)",
		 qemu_mod.h.accel == QEMU_ACCEL_TCG ? ": " : "",
		 qemu_mod.h.accel == QEMU_ACCEL_TCG ? qemu_mod.kvm_why : "",
		 qemu_channel_name(qemu_mod.h.channel));
	return 0;
}

static int qemu_probe(const struct config *cfg, struct err *err)
{
	pthread_mutex_lock(&qemu_mod.lock);
	int r = qemu_mod.probed ? 0 : probe_locked(cfg, err);
	/* Chosen automatically only as a hardware VM: without KVM the jail is faster, and
	 * TCG is for those who ask for it. */
	if (r == 0 && strcmp(cfg->driver, "auto") == 0 && qemu_mod.h.accel != QEMU_ACCEL_KVM)
		r = err_set(err, ENODEV,
			    "no usable KVM (%s); SANDBOX_DRIVER=qemu runs it under TCG emulation",
			    qemu_mod.kvm_why);
	pthread_mutex_unlock(&qemu_mod.lock);
	return r;
}

/* Snapshot builds of a previous run that died with it (their QEMU got SIGKILL from
 * PR_SET_PDEATHSIG): their run directories and cgroups, named prep-*. Sandboxes are
 * cleaned up from their records instead (cleanup_stale). */
static void sweep_builds(const struct qemu_host *h)
{
	_cleanup_closedir_ DIR *d = opendir(h->run_dir);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (strncmp(de->d_name, "prep-", 5) != 0 || !cgroup_id_valid(de->d_name))
			continue;
		_cleanup_free_ char *path = xasprintf("%s/%s", h->run_dir, de->d_name);
		struct err e;
		if (fs_rm_rf(path, &e) < 0)
			log_warn("qemu", "cannot remove `%s`: %s", path, e.msg);
		struct cgroup *cg = NULL;
		if (cgroup_open(&h->cg, de->d_name, &cg, &e) < 0 || cgroup_remove(cg, &e) < 0)
			log_warn("qemu", "snapshot build %s: %s", de->d_name, e.msg);
		cgroup_free(cg);
	}
}

/* The run directories, the cgroup parent, and what dead builds left. Called with qemu_mod.lock
 * held. */
static int init_locked(const struct config *cfg, struct err *err)
{
	if (mkdir(cfg->run_dir, 0755) < 0 && errno != EEXIST)
		return err_sys(err, errno, "qemu: creating `%s`", cfg->run_dir);
	if (mkdir(qemu_mod.h.run_dir, 0700) < 0 && errno != EEXIST)
		return err_sys(err, errno, "qemu: creating `%s`", qemu_mod.h.run_dir);
	int r = cgroup_init(&qemu_mod.h.cg, err);
	if (r < 0)
		return r;
	sweep_builds(&qemu_mod.h);
	free(qemu_mod.state_dir);
	qemu_mod.state_dir = xstrdup(cfg->state_dir);
	qemu_keep_sweep(qemu_mod.state_dir);
	qemu_mod.initialised = true;
	return 0;
}

static int qemu_init(const struct config *cfg, struct err *err)
{
	pthread_mutex_lock(&qemu_mod.lock);
	int r = 0;
	if (!qemu_mod.probed)
		r = err_set(err, EINVAL, "qemu: not probed");
	else if (!qemu_mod.initialised)
		r = init_locked(cfg, err);
	pthread_mutex_unlock(&qemu_mod.lock);
	return r;
}

/* The host facts, once init has run (read-only from then on: no lock needed). */
static const struct qemu_host *host(struct err *err)
{
	pthread_mutex_lock(&qemu_mod.lock);
	bool ok = qemu_mod.initialised;
	pthread_mutex_unlock(&qemu_mod.lock);
	if (!ok) {
		err_set(err, EINVAL, "qemu: the driver is not initialised");
		return NULL;
	}
	return &qemu_mod.h;
}

/* --- prepare, create, destroy ------------------------------------------------------------ */

static uint64_t mib_up(uint64_t bytes)
{
	return (bytes + (1u << 20) - 1) >> 20;
}

static int want_for(const struct template *t, unsigned vcpus, unsigned mem_mib,
		    uint64_t workspace_bytes, unsigned pids_max, struct qemu_want *w,
		    struct err *err)
{
	if (!t->rootfs_img)
		return err_set(err, ENOENT,
			       "template `%s` has no rootfs.ext4, which the qemu driver boots "
			       "(build it with templates/build.sh %s)",
			       t->name, t->name);
	*w = (struct qemu_want){
		.tdir = t->dir,
		.rootfs = t->rootfs_img,
		.vcpus = vcpus ? vcpus : 1,
		.mem_mib = mem_mib ? mem_mib : 128,
		.workspace_mib = mib_up(workspace_bytes),
		.pids_max = pids_max,
	};
	return 0;
}

static int qemu_prepare(const struct config *cfg, struct template *t, struct err *err)
{
	const struct qemu_host *h = host(err);
	if (!h)
		return -err->errnum;
	/* The same resources the session layer gives the template's sandboxes. */
	struct sandbox_limits l;
	driver_default_limits(cfg, t, &l);
	struct qemu_want w;
	int r = want_for(t, l.vcpus, l.mem_mib, l.workspace_bytes, l.pids_max, &w, err);
	if (r < 0)
		return r;
	return qemu_snap_prepare(h, &w, err);
}

/* What a sandbox starts from: the template's snapshot, or (when there is none that fits) a
 * cold boot of its image. */
struct boot_source {
	bool restore;
	struct qemu_snap snap;     /* restore */
	struct qemu_snap_key cold; /* cold boot: the machine */
	int rootfs_fd;             /* cold boot: the image */
	/* A hibernated VM's resume (restore too): the saved VM, and its RAM's backing (the
	 * template snapshot's when it has the size, which the stream then mostly matches, else
	 * a memfd of its own). */
	bool saved;
	struct qemu_kept kept;
	bool snap_held;
	int ram_fd;
	bool disk_named, rootfs_named; /* a resume took them from the save (qemu_keep_consume) */
};

static int source_get(const struct qemu_host *h, const struct qemu_want *w,
		      const struct sandbox_spec *spec, struct boot_source *src, struct err *err)
{
	*src = (struct boot_source){ .restore = true, .rootfs_fd = -1 };
	struct err why;
	if (qemu_snap_acquire(h, w, &src->snap, &why) == 0)
		return 0;
	/* prepare() made one moments ago: this template changed since, or its snapshot needs
	 * other resources than this sandbox gets. */
	log_info("qemu", "sandbox %s: cold boot of template %s (%s)", spec->id, spec->tmpl->name,
		 why.msg);
	src->restore = false;
	int r = qemu_key_build(h, w, NULL, &src->cold, err);
	if (r < 0)
		return r;
	src->rootfs_fd = open(w->rootfs, O_RDONLY | O_CLOEXEC);
	if (src->rootfs_fd < 0) {
		r = err_sys(err, errno, "qemu: template image `%s`", w->rootfs);
		qemu_key_free(&src->cold);
		return r;
	}
	return 0;
}

static void source_release(struct boot_source *src)
{
	if (src->saved) {
		qemu_kept_close(&src->kept);
		if (src->snap_held)
			qemu_snap_release(&src->snap);
		else if (src->ram_fd >= 0)
			close(TAKE_FD(src->ram_fd));
	} else if (src->restore) {
		qemu_snap_release(&src->snap);
	} else {
		qemu_key_free(&src->cold);
		if (src->rootfs_fd >= 0)
			close(TAKE_FD(src->rootfs_fd));
	}
}

/* The machine the sandbox starts as: the snapshot's, or the cold boot's. */
static const struct qemu_machine *source_machine(const struct boot_source *src)
{
	if (src->saved)
		return &src->kept.m;
	return src->restore ? &src->snap.key.m : &src->cold.m;
}

/* The RAM a launch maps, and the image its root is. */
static int source_ram_fd(const struct boot_source *src)
{
	if (src->saved)
		return src->snap_held ? src->snap.ram_fd : src->ram_fd;
	return src->restore ? src->snap.ram_fd : -1;
}

static int source_rootfs_fd(const struct boot_source *src)
{
	if (src->saved)
		return src->kept.rootfs_fd;
	return src->restore ? src->snap.rootfs_fd : src->rootfs_fd;
}

/* A hibernated VM to resume: its saved files, and RAM of its size to restore into. */
static int source_saved(const struct qemu_host *h, const struct qemu_want *w,
			const struct sandbox_spec *spec, struct boot_source *src, struct err *err)
{
	*src = (struct boot_source){
		.restore = true, .saved = true, .rootfs_fd = -1, .ram_fd = -1
	};
	int r = qemu_keep_open(h, qemu_mod.state_dir, spec->hibernated, spec->tmpl->rootfs_img,
			       &src->kept, err);
	if (r < 0)
		return err_wrap(err, "resuming");
	struct err why;
	if (qemu_snap_acquire(h, w, &src->snap, &why) == 0) {
		if (src->snap.key.m.mem_mib == src->kept.m.mem_mib) {
			src->snap_held = true;
			return 0;
		}
		qemu_snap_release(&src->snap);
	}
	/* Every page the stream loads is then a page of this VM's own. */
	src->ram_fd = memfd_create("qemu-ram", MFD_CLOEXEC);
	if (src->ram_fd < 0 || ftruncate(src->ram_fd, (off_t)src->kept.m.mem_mib << 20) < 0)
		return err_sys(err, errno, "qemu: guest RAM for the resume");
	return 0;
}

/* Brings a started VM to a connected agent: restores the snapshot (when there is one) and
 * connects the agent's channel. */
static int boot(struct qemu_vm *vm, const struct qemu_want *w, struct boot_source *src,
		const struct sandbox_spec *spec, struct err *err)
{
	const struct qemu_machine *m = source_machine(src);
	int connect_ms = src->restore || m->channel == QEMU_CHANNEL_SERIAL
				 ? AGENT_CONNECT_TIMEOUT_MS
				 : COLD_BOOT_TIMEOUT_MS;
	int r;
	/* Over serial the host connects before the restore: the guest never sees its host
	 * gone. Over vsock the guest's transport resets with the restore, so after. */
	if (m->channel == QEMU_CHANNEL_SERIAL &&
	    (r = qemu_vm_connect_agent(vm, connect_ms, err)) < 0)
		return r;
	if (src->saved) {
		if ((r = qemu_vm_load(vm, src->kept.state_fd, RESUME_TIMEOUT_MS, err)) < 0)
			return err_wrap(err, "restoring the hibernated VM");
		/* Restored, not run yet: a resume (not a fork, whose save serves the next) takes
		 * the save now, before the guest changes its disk. */
		const char *old = json_string_value(json_object_get(spec->hibernated, "sandbox"));
		if (!src->kept.fork &&
		    (r = qemu_keep_consume(qemu_mod.state_dir, old, spec->id, &src->disk_named,
					   &src->rootfs_named, err)) < 0)
			return r;
		if ((r = qemu_vm_run_state(vm, true, RESUME_TIMEOUT_MS, err)) < 0)
			return err_wrap(err, "running the restored VM");
	} else if (src->restore) {
		if ((r = qemu_vm_restore(vm, src->snap.state_fd, RESTORE_TIMEOUT_MS, err)) < 0) {
			if (vm->migration_failed)
				qemu_snap_invalidate(w, &src->snap);
			return err_wrap(err, "restoring template %s", spec->tmpl->name);
		}
	}
	if (m->channel == QEMU_CHANNEL_VSOCK &&
	    (r = qemu_vm_connect_agent(vm, connect_ms, err)) < 0)
		return r;
	return 0;
}

static struct sandbox *sandbox_of(const struct sandbox_spec *spec, struct qemu_vm *vm,
				  struct cgroup *cg, int disk_fd, json_t *storage,
				  const struct boot_source *src)
{
	struct qemu_sb *q = xcalloc(1, sizeof(*q));
	q->vm = vm;
	q->cg = cg;
	q->disk_fd = disk_fd;
	const struct qemu_machine *m = source_machine(src);
	q->m = (struct qemu_machine){ .accel = m->accel,
				      .channel = m->channel,
				      .vcpus = m->vcpus,
				      .mem_mib = m->mem_mib,
				      .cmdline = xstrdup(m->cmdline) };
	q->rootfs_fd = fcntl(source_rootfs_fd(src), F_DUPFD_CLOEXEC, 3);
	q->rootfs_path = xstrdup(spec->tmpl->rootfs_img);
	q->disk_named = src->disk_named;
	q->rootfs_named = src->rootfs_named;
	q->nvolumes = spec->nvolumes;
	struct sandbox *sb = xcalloc(1, sizeof(*sb));
	sb->driver = &driver_qemu;
	sb->id = xstrdup(spec->id);
	sb->agent_fd = TAKE_FD(vm->agent_fd);
	sb->pid = vm->pid;
	sb->record = json_pack("{s:s, s:I}", "run_dir", vm->dir, "uidBase", (json_int_t)vm->uid);
	proc_record_add(sb->record, vm->pid);
	if (storage)
		sb->resume_extra = json_pack("{s:o}", "storage", storage);
	sb->priv = q;
	return sb;
}

/* Removes and frees the sandbox's cgroup (NULL: nothing), logging what it cannot remove. */
static void drop_cgroup(struct cgroup *cg, const char *id)
{
	if (!cg)
		return;
	struct err e;
	if (cgroup_remove(cg, &e) < 0)
		log_warn("qemu", "sandbox %s: %s", id, e.msg);
	cgroup_free(cg);
}

/* Starts the sandbox's QEMU from src in cgroup cg, in a run directory of its own, and brings it
 * to its agent; on failure neither the process nor the directory is left. t0: when the create
 * began, for the log. */
static int vm_up(const struct qemu_host *h, const struct qemu_want *w, struct boot_source *src,
		 const struct sandbox_spec *spec, const struct qemu_drives *drives,
		 const struct cgroup *cg, int64_t t0, struct qemu_vm **ret, struct err *err)
{
	_cleanup_free_ char *dir = NULL;
	int r = qemu_vm_dir(h->run_dir, spec->id, &dir, err);
	if (r < 0)
		return r;
	const struct qemu_machine *m = source_machine(src);
	struct qemu_launch l = {
		.m = m,
		.qemu_bin = h->qemu_bin,
		.name = spec->id,
		.mem_share = false,
		.incoming = src->restore,
		.ram_fd = source_ram_fd(src),
		.rootfs_fd = source_rootfs_fd(src),
		.vsock_cid = m->channel != QEMU_CHANNEL_VSOCK    ? 0
			     : src->saved && src->kept.vsock_cid ? src->kept.vsock_cid
								 : qemu_random_cid(),
		.netns_path = spec->netns_path,
		.drives = drives,
	};
	struct qemu_vm *vm = NULL;
	if ((r = qemu_vm_start(&l, TAKE_PTR(dir), cg, QMP_START_TIMEOUT_MS, &vm, err)) < 0)
		return r;
	int64_t t1 = time_mono_ms();
	if ((r = boot(vm, w, src, spec, err)) < 0) {
		qemu_vm_free(vm);
		return r;
	}
	int64_t t2 = time_mono_ms();
	log_debug("qemu", "sandbox %s: %s in %lld ms (QEMU up %lld ms, %s %lld ms)", spec->id,
		  src->saved     ? "resumed"
		  : src->restore ? "restored"
				 : "cold-started",
		  (long long)(t2 - t0), (long long)(t1 - t0),
		  src->restore ? "restore" : "agent channel", (long long)(t2 - t1));
	*ret = vm;
	return 0;
}

static void drives_close(struct qemu_drives *d)
{
	for (unsigned i = 0; i < QEMU_DRIVES; i++) {
		if (d->fd[i] >= 0)
			close(TAKE_FD(d->fd[i]));
		if (d->overlay[i] >= 0)
			close(TAKE_FD(d->overlay[i]));
	}
}

/* The images of the sandbox's drives (spec NULL: none, every drive a placeholder): its disk
 * (made here) and its volumes' (opened with the access they are mounted with), and what the
 * guest is to mount, for its `resume`:
 * {"disk": serial, "volumes": [{"serial", "path", "readOnly"}]} (*ret_storage NULL when there
 * is nothing). */
static int drives_open(const struct config *cfg, const struct sandbox_spec *spec,
		       struct qemu_drives *d, json_t **ret_storage, struct err *err)
{
	*d = (struct qemu_drives){ 0 };
	for (unsigned i = 0; i < QEMU_DRIVES; i++)
		d->fd[i] = d->overlay[i] = -1;
	*ret_storage = NULL;
	if (!spec)
		return 0;
	if (spec->nvolumes > QEMU_VOLUME_SLOTS)
		return err_set(err, EINVAL, "a VM mounts at most %d volumes, not %u",
			       QEMU_VOLUME_SLOTS, spec->nvolumes);
	if (!spec->limits.disk && !spec->nvolumes)
		return 0;
	json_auto_t *storage = json_object();
	char serial[32];
	int r;
	if (spec->limits.disk) {
		if ((r = qemu_disk_create(cfg->state_dir, spec->limits.workspace_bytes, err)) < 0)
			return r;
		d->fd[QEMU_DRIVE_DISK] = r;
		snprintf(serial, sizeof(serial), QEMU_DRIVE_SERIAL, QEMU_DRIVE_DISK);
		json_object_set_new(storage, "disk", json_string(serial));
	}
	json_t *vols = json_array();
	json_object_set_new(storage, "volumes", vols);
	for (unsigned i = 0; i < spec->nvolumes; i++) {
		const struct sandbox_volume *v = &spec->volumes[i];
		unsigned slot = 1 + i;
		int fd =
			open(v->image, (v->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC | O_NOFOLLOW);
		struct stat st;
		if (fd < 0 || fstat(fd, &st) < 0) {
			r = err_sys(err, errno, "qemu: volume image for %s", v->path);
			if (fd >= 0)
				close(fd);
			return r;
		}
		d->fd[slot] = fd;
		d->ro[slot] = v->read_only;
		/* A guest's kernel may write anything into it from now on: the host's never
		 * mounts it again (jail_volume.c). */
		if (!v->read_only && fsetxattr(fd, DRIVER_XATTR_GUEST_WRITTEN, "1", 1, 0) < 0)
			return err_sys(err, errno,
				       "qemu: marking the volume for %s as written by a VM",
				       v->path);
		if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > QEMU_SLOT_BYTES)
			return err_set(err, EINVAL,
				       "the volume for %s is not an image a VM can bind (a regular "
				       "file of at most %llu bytes)",
				       v->path, QEMU_SLOT_BYTES);
		if (v->read_only) {
			if ((r = qemu_overlay_create(cfg->state_dir, (uint64_t)st.st_size, err)) <
			    0)
				return r;
			d->overlay[slot] = r;
		}
		snprintf(serial, sizeof(serial), QEMU_DRIVE_SERIAL, slot);
		json_array_append_new(vols, json_pack("{s:s, s:s, s:b}", "serial", serial, "path",
						      v->path, "readOnly", v->read_only));
	}
	*ret_storage = json_incref(storage);
	return 0;
}

static int qemu_create(const struct config *cfg, const struct sandbox_spec *spec,
		       struct sandbox **ret, struct err *err)
{
	const struct qemu_host *h = host(err);
	if (!h)
		return -err->errnum;
	if (!cgroup_id_valid(spec->id))
		return err_set(err, EINVAL, "qemu: invalid sandbox id `%s`",
			       spec->id ? spec->id : "");
	const struct sandbox_limits *lim = &spec->limits;
	/* With a disk, the guest's boot-time /workspace tmpfs is left unused: the sandbox has the
	 * snapshot's (made with the server's size), not one of the disk's size. */
	struct sandbox_limits def;
	driver_default_limits(cfg, spec->tmpl, &def);
	struct qemu_want w;
	int r = want_for(spec->tmpl, lim->vcpus, lim->mem_mib,
			 lim->disk ? def.workspace_bytes : lim->workspace_bytes, lim->pids_max, &w,
			 err);
	if (r < 0)
		return r;
	_cleanup_(drives_close) struct qemu_drives drives;
	json_auto_t *storage = NULL;
	if (spec->hibernated && spec->nvolumes)
		return err_set(err, EINVAL, "qemu: a hibernated VM resumes without volumes");
	/* A hibernated VM's storage is mounted already: the guest is as it was saved. */
	if ((r = drives_open(cfg, spec->hibernated ? NULL : spec, &drives, &storage, err)) < 0)
		return r;

	int64_t t0 = time_mono_ms();
	/* Released when the create returns: by then QEMU holds what it needs of the files. */
	_cleanup_(source_release) struct boot_source src = { .rootfs_fd = -1, .ram_fd = -1 };
	if ((r = spec->hibernated ? source_saved(h, &w, spec, &src, err)
				  : source_get(h, &w, spec, &src, err)) < 0)
		return r;
	if (src.saved && src.kept.fork && src.kept.disk_fd >= 0) {
		/* Each clone of a fork has a disk of its own, a copy of the save's. */
		if ((r = qemu_disk_clone(cfg->state_dir, src.kept.disk_fd, err)) < 0)
			return r;
		drives.fd[QEMU_DRIVE_DISK] = r;
	} else if (src.saved) {
		drives.fd[QEMU_DRIVE_DISK] = TAKE_FD(src.kept.disk_fd);
	}
	const struct qemu_machine *m = source_machine(&src);

	/* QEMU aborts when it cannot start a thread, and a memory limit below its needs kills
	 * the VM rather than a process in it. */
	struct cgroup_limits cl = {
		.cpu_quota_us = lim->cpu_quota_us,
		.cpu_period_us = lim->cpu_period_us,
	};
	vm_vmm_limits(lim, m->mem_mib, m->vcpus, &qemu_vmm_needs, &cl.memory_bytes, &cl.pids_max);
	struct cgroup *cg = NULL;
	if ((r = cgroup_create(&h->cg, spec->id, &cl, &cg, err)) < 0)
		return err_wrap(err, "qemu");
	struct qemu_vm *vm = NULL;
	if ((r = vm_up(h, &w, &src, spec, &drives, cg, t0, &vm, err)) < 0) {
		drop_cgroup(cg, spec->id);
		return r;
	}
	/* QEMU holds the volumes' images now; the daemon keeps the disk's, to tell its use. */
	*ret = sandbox_of(spec, vm, cg, TAKE_FD(drives.fd[QEMU_DRIVE_DISK]), TAKE_PTR(storage),
			  &src);
	return 0;
}

static void qemu_destroy(struct sandbox *sb)
{
	if (!sb)
		return;
	struct qemu_sb *q = sb->priv;
	if (sb->agent_fd >= 0)
		close(sb->agent_fd);
	if (q && q->vm) {
		/* A VM that ended on its own says why, once, in the log. */
		struct qemu_vm *vm = q->vm;
		bool died = !qemu_vm_running(vm);
		qemu_vm_stop(vm);
		if (died) {
			struct err e;
			err_set(&e, ECHILD, "sandbox %s: its VM had stopped", sb->id);
			qemu_vm_explain(vm, &e);
			log_warn("qemu", "%s", e.msg);
		}
		qemu_vm_free(vm);
	}
	if (q) {
		drop_cgroup(q->cg, sb->id);
		/* QEMU is gone: this is the image's last reference, its blocks are freed now. */
		if (q->disk_fd >= 0)
			close(q->disk_fd);
		/* A hibernation linked them in its saved VM first, when it had one. */
		if (q->disk_named || q->rootfs_named)
			qemu_keep_remove_live(qemu_mod.state_dir, sb->id);
		free(q->rootfs_path);
		if (q->rootfs_fd >= 0)
			close(q->rootfs_fd);
		free((char *)q->m.cmdline);
	}
	free(q);
	json_decref(sb->resume_extra);
	json_decref(sb->record);
	free(sb->id);
	free(sb);
}

/* Whether /proc/<pid>/cmdline has `-name <id>`: what makes a process this sandbox's QEMU. */
static bool cmdline_names(pid_t pid, const char *id)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	char buf[8192];
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	bool after_name = false;
	for (char *p = buf; p < buf + n; p += strlen(p) + 1) {
		if (after_name && strcmp(p, id) == 0)
			return true;
		after_name = strcmp(p, "-name") == 0;
	}
	return false;
}

/* Kills a previous run's QEMU if, and only if, its pid still names it: same boot, same start
 * time, its command line naming the sandbox, all checked through a pidfd so that the pid
 * cannot change hands between the checks and the kill. */
static bool names_sandbox(pid_t pid, void *id)
{
	return cmdline_names(pid, id);
}

static void qemu_cleanup_stale(const struct config *cfg, const char *id, json_t *record)
{
	/* Built from our own settings, not from the record: only our directory goes. */
	_cleanup_free_ char *dir =
		cgroup_id_valid(id) ? xasprintf("%s/qemu/%s", cfg->run_dir, id) : NULL;
	const struct driver_stale stale = { .driver = "qemu",
					    .what = "QEMU",
					    .also = names_sandbox,
					    .arg = (void *)id,
					    .dir = dir };
	driver_cleanup_stale(&stale, id, record);
	/* A sandbox still recorded was not hibernated (the session layer forgets it in the
	 * transaction that records the hibernation): a save of it that got as far as its
	 * rename is no one's. */
	if (cgroup_id_valid(id)) {
		qemu_keep_remove(cfg->state_dir, id);
		qemu_keep_remove_live(cfg->state_dir, id);
	}
	/* Should the QEMU have survived, its uid must not go to a new sandbox or jail. */
	json_t *base = json_object_get(record, "uidBase");
	if (json_is_integer(base) && json_integer_value(base) > 0 &&
	    json_integer_value(base) <= UINT32_MAX)
		jail_uid_reserve_if_busy((uint32_t)json_integer_value(base));
}

static uint64_t qemu_oom_kills(struct sandbox *sb)
{
	struct qemu_sb *q = sb ? sb->priv : NULL;
	if (!q)
		return 0;
	/* Inside the VM, the guest kernel kills a process that runs it out of memory; the
	 * host's limit, if reached, kills QEMU itself. */
	return qemu_vm_guest_oom_kills(q->vm) + cgroup_oom_kills(q->cg);
}

static int qemu_usage(struct sandbox *sb, struct cgroup_usage *ret)
{
	struct qemu_sb *q = sb ? sb->priv : NULL;
	return q ? cgroup_usage(q->cg, ret, NULL) : -ENOENT;
}

static int qemu_disk_usage_of(struct sandbox *sb, uint64_t *used, uint64_t *size)
{
	struct qemu_sb *q = sb ? sb->priv : NULL;
	return q ? qemu_disk_usage(q->disk_fd, used, size) : -ENOENT;
}

/* QMP stop and cont: the vCPUs halt (the guest's clock with them: the session layer sets it
 * again after a resume), guest RAM stays in QEMU's memory. */
static int qemu_pause(struct sandbox *sb, bool pause, struct err *err)
{
	struct qemu_sb *q = sb->priv;
	int r = qemu_vm_run_state(q->vm, !pause, 5000, err);
	if (r == 0)
		q->frozen = pause;
	return r;
}

/* Saves the VM whole (qemu_keep.c) under `name`: for a fork, the VM then runs on (unless it
 * was frozen) and its disk is copied; a failed save leaves it as it was either way. */
static int save_whole(struct sandbox *sb, const char *name, bool fork, bool durable,
		      json_t **ret_keep, struct err *err)
{
	struct qemu_sb *q = sb->priv;
	const struct qemu_host *h = host(err);
	if (!h)
		return -err->errnum;
	if (q->nvolumes)
		return err_set(err, ENOTSUP,
			       "a session with volumes cannot be %s; pause it instead (mode "
			       "\"freeze\")",
			       fork ? "forked" : "hibernated");
	if (fork && q->m.channel == QEMU_CHANNEL_VSOCK)
		return err_set(err, ENOTSUP,
			       "forks of a VM need its agent on virtio-serial: with vhost-vsock "
			       "every clone would have the same guest CID");
	if (q->rootfs_fd < 0)
		return err_set(err, EBADF, "qemu: the sandbox's template image is not open");
	struct stat st;
	uint64_t disk_bytes =
		q->disk_fd >= 0 && fstat(q->disk_fd, &st) == 0 ? (uint64_t)st.st_size : 0;
	const struct qemu_keep_what what = {
		.name = name,
		.rootfs_path = q->rootfs_path,
		.fork = fork,
		.durable = durable,
		.m = &q->m,
		.vsock_cid = q->vm->vsock_cid,
		.disk_fd = q->disk_fd,
		.disk_bytes = disk_bytes,
		.rootfs_fd = q->rootfs_fd,
		.qemu_version = h->qemu_version,
		.host_cpu = h->accel == QEMU_ACCEL_KVM ? h->host_cpu : "",
	};
	int64_t t0 = time_mono_ms();
	int r = qemu_keep_save(q->vm, qemu_mod.state_dir, &what, ret_keep, err);
	/* As it was: running unless it had been frozen (a hibernation ends it next). */
	struct err e;
	if ((r < 0 || fork) && !q->frozen && qemu_vm_run_state(q->vm, true, 5000, &e) < 0)
		log_warn("qemu", "sandbox %s: after a save: %s", sb->id, e.msg);
	if (r < 0)
		return r;
	log_debug("qemu", "sandbox %s: saved as %s in %lld ms (%lld bytes)", sb->id, name,
		  (long long)(time_mono_ms() - t0),
		  (long long)json_integer_value(json_object_get(*ret_keep, "stateBytes")));
	return 0;
}

/* Hibernation: the whole VM (its RAM, so its processes and its tmpfs too, and its devices)
 * saved to disk with its disk image, QEMU ended. A resume restores it as it was: its
 * processes carry on. */
static int qemu_hibernate(struct sandbox *sb, json_t **ret_keep, struct err *err)
{
	int r = save_whole(sb, sb->id, false, true, ret_keep, err);
	if (r < 0)
		return r;
	/* Its disk has a name in the saved VM now: the destroy's close does not free it. */
	qemu_destroy(sb);
	return 0;
}

/* A fork's save: <id>-f<random>, the VM running on. */
static int qemu_fork_save(struct sandbox *sb, bool durable, json_t **ret_keep, struct err *err)
{
	char hex[9];
	random_hex(hex, 4);
	_cleanup_free_ char *name = xasprintf("%s-f%s", sb->id, hex);
	return save_whole(sb, name, true, durable, ret_keep, err);
}

static int qemu_hibernated_claim(const json_t *keep, struct err *err)
{
	const struct qemu_host *h = host(err);
	return h ? qemu_keep_check(qemu_mod.state_dir, keep, err) : -err->errnum;
}

static void qemu_hibernated_sweep(json_t *const *keeps, size_t n)
{
	const char **names = xcalloc(n ? n : 1, sizeof(*names));
	for (size_t i = 0; i < n; i++)
		names[i] = json_string_value(json_object_get(keeps[i], "sandbox"));
	qemu_keep_sweep_orphans(qemu_mod.state_dir, names, n);
	free(names);
}

static void qemu_hibernated_discard(const json_t *keep)
{
	qemu_keep_remove(qemu_mod.state_dir, json_string_value(json_object_get(keep, "sandbox")));
}

const struct driver driver_qemu = {
	.name = "qemu",
	.isolation = "vm",
	.snapshots = true,
	.disks = true,
	.max_volumes = QEMU_VOLUME_SLOTS,
	.probe = qemu_probe,
	.init = qemu_init,
	.prepare = qemu_prepare,
	.create = qemu_create,
	.destroy = qemu_destroy,
	.cleanup_stale = qemu_cleanup_stale,
	.oom_kills = qemu_oom_kills,
	.disk_usage = qemu_disk_usage_of,
	.usage = qemu_usage,
	.pause = qemu_pause,
	.hibernate = qemu_hibernate,
	.hibernate_keeps_processes = true,
	.fork_save = qemu_fork_save,
	.hibernated_claim = qemu_hibernated_claim,
	.hibernated_discard = qemu_hibernated_discard,
	.hibernated_sweep = qemu_hibernated_sweep,
};
