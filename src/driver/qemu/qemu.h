/* qemu: internals of the qemu driver, shared by its files and its unit tests.
 *
 *   qemu.c       the driver: probe (KVM or TCG), create/destroy, stale cleanup
 *   qemu_argv.c  QEMU's command line and the guest kernel's, from a machine description
 *   qemu_meta.c  a snapshot's meta.json: what it was made from, and matching it
 *   qemu_vm.c    one QEMU process: spawn, console capture, QMP, agent channel, save/restore
 *   qemu_snap.c  per-template snapshots: meta.json, validation, locking, building
 *   qemu_keep.c  hibernated VMs: saved whole to disk, and restored
 *   qemu_kvm_cache.c  the KVM probe's verdict, kept for the boot in the run directory
 *
 * A sandbox is a QEMU `microvm` running the project's kernel with the template's rootfs.ext4
 * as a read-only virtio-blk root; the agent is the guest's init and is reached over a named
 * virtio-serial port on a Unix socket of QEMU's (or over vhost-vsock where the host has it).
 * Sandboxes are clones of a per-template snapshot: guest RAM lives in a file that the
 * snapshot's VM mapped shared and every clone maps private (copy-on-write), so restoring
 * moves only device state (x-ignore-shared) and clones share the template's pages. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "driver/cgroup.h"
#include "driver/vm.h"
#include "util/err.h"

/* Bumped whenever the machine QEMU is asked for changes shape: a snapshot made by another
 * layout is rebuilt, never restored. */
#define QEMU_SNAPSHOT_FORMAT 5
/* The TAP the NIC uses, in QEMU's network namespace (the net module's NET_TAP_NAME). */
#define QEMU_TAP_NAME "tap0"
/* The virtio-serial port name the agent opens when the channel is serial. */
#define QEMU_AGENT_PORT_NAME "agent"
/* TCG's translation cache per VM, in MiB: QEMU's default (1 GiB) would let every VM's
 * memory use grow far past its guest RAM. */
#define QEMU_TCG_TB_MIB 64
/* What a QEMU process needs of the host besides guest RAM and a thread per vCPU (see
 * vm_vmm_limits): its own heap, TCG's cache and device buffers; its main loop, RCU, I/O pool
 * (up to 64 threads) and a migration's. */
#define QEMU_OVERHEAD_MIB (QEMU_TCG_TB_MIB + 160)
#define QEMU_MIN_PIDS     96
extern const struct vm_vmm_needs qemu_vmm_needs;

enum qemu_accel { QEMU_ACCEL_TCG, QEMU_ACCEL_KVM };
enum qemu_channel { QEMU_CHANNEL_SERIAL, QEMU_CHANNEL_VSOCK };

const char *qemu_accel_name(enum qemu_accel a);
const char *qemu_channel_name(enum qemu_channel c);

/* The guest: what a snapshot and its clones must agree on. */
struct qemu_machine {
	enum qemu_accel accel;
	enum qemu_channel channel;
	unsigned vcpus;
	unsigned mem_mib;
	const char *kernel;  /* vmlinux (ELF, PVH entry) */
	const char *rootfs;  /* rootfs.ext4, attached read-only */
	const char *cmdline; /* the guest kernel's, see qemu_cmdline() */
};

/* One QEMU process, confined (qemu_vm.c): an unprivileged uid of its own, no capabilities,
 * no_new_privs, QEMU's own seccomp filter (-sandbox), its own pid and mount namespaces with a
 * read-only root holding only the host's /usr, a procfs of its pid namespace and the devices
 * it uses. Everything else it gets as descriptors: the kernel, the rootfs, the guest RAM, the
 * TAP, and listening sockets for QMP and the agent's channel that the driver bound in the run
 * directory (root's, 0700): QEMU can write no file and create no socket anywhere. */
struct qemu_launch {
	const struct qemu_machine *m;
	const char *qemu_bin;
	const char *name;   /* sandbox id: `-name`, so that /proc/<pid>/cmdline names it */
	bool mem_share;     /* share=on: the snapshot's own boot writes the RAM file */
	bool incoming;      /* -incoming defer: a clone waiting for its snapshot */
	unsigned vsock_cid; /* the guest's CID with QEMU_CHANNEL_VSOCK */
	/* Network namespace QEMU joins (the sandbox's); NULL: a new empty one, so that a
	 * compromised QEMU reaches no network. Not part of argv. */
	const char *netns_path;
	/* Files QEMU inherits as QEMU_FD_*: it opens no path of the host (qemu_vm_start opens
	 * the kernel). ram_fd -1: anonymous guest RAM. A clone's RAM is the template's sealed
	 * memfd (qemu_snap_acquire), the snapshot build's the RAM file, read-write. */
	int ram_fd;
	int rootfs_fd;
	/* Images bound to the drives (clones); NULL: every drive a placeholder. */
	const struct qemu_drives *drives;
	/* Set from qemu_bench_unconfined by qemu_vm_start: argv without -sandbox. */
	bool unconfined;
};

/* For bench/vm alone, which measures what the confinement costs: QEMU then starts as it did
 * before it was confined (as root, in the daemon's mount and pid namespaces, with every
 * capability, without -sandbox), with the same descriptors. Nothing in sandboxd sets it. */
extern bool qemu_bench_unconfined;

#define QEMU_FD_RAM      3
#define QEMU_FD_ROOTFS   4
#define QEMU_FD_KERNEL   5
#define QEMU_FD_TAP      6
#define QEMU_FD_QMP      7
#define QEMU_FD_AGENT    8  /* serial channel */
#define QEMU_FD_VHOST    9  /* vsock channel: the daemon's descriptor of /dev/vhost-vsock */
#define QEMU_FD_DRIVE0   10 /* QEMU_FD_DRIVE0 + i: drive i's image, when bound */
#define QEMU_FD_OVERLAY0 (QEMU_FD_DRIVE0 + QEMU_DRIVES) /* + i: drive i's overlay */

/* What QEMU's own seccomp filter forbids besides its default: obsolete calls, any change of
 * ids or capabilities, fork and exec, and scheduling and resource changes. */
#define QEMU_SANDBOX_OPT "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"

/* Sockets the driver binds in the run directory, beside QEMU's console log. */
#define QEMU_QMP_SOCKET   "qmp.sock"
#define QEMU_AGENT_SOCKET "agent.sock"
#define QEMU_CONSOLE_LOG  "console.log"

/* QEMU's argv (NULL-terminated, each string owned) for l. */
char **qemu_argv(const struct qemu_launch *l);
void qemu_argv_free(char **argv);

struct qemu_cmdline_opts {
	enum qemu_accel accel;
	enum qemu_channel channel;
	unsigned tsc_khz;       /* TCG: the guest's TSC rate (the host's), 0: unknown */
	uint64_t workspace_mib; /* size of the guest's /workspace */
	unsigned tasks_max;     /* the guest's threads-max (0: the kernel's default) */
};

/* The guest kernel's command line (owned). Under TCG it pins the TSC rate: calibrating it
 * against the emulated PIT fails on a busy host, and the boot then hangs. */
char *qemu_cmdline(const struct qemu_cmdline_opts *o);

/* --- snapshots (qemu_snap.c) -------------------------------------------------------------- */

#define QEMU_SNAP_DIR   "qemu"
#define QEMU_SNAP_STATE "state.mig"
#define QEMU_SNAP_RAM   "memory.ram"
#define QEMU_SNAP_META  "meta.json"

/* What a snapshot is made from; a snapshot whose meta.json differs in any of it is stale. */
struct qemu_snap_key {
	struct qemu_machine m;
	char kernel_sha256[65];
	uint64_t kernel_size;
	int64_t kernel_mtime_ns;
	uint64_t rootfs_size;
	int64_t rootfs_mtime_ns;
	const char *qemu_version; /* first line of `qemu --version` */
	unsigned tsc_khz;
	uint64_t workspace_mib;
	unsigned tasks_max;
	const char *host_cpu; /* KVM: the host CPU model the guest sees; "" under TCG */
};

/* meta.json for a snapshot made from k. */
json_t *qemu_meta_build(const struct qemu_snap_key *k);

/* Whether meta describes a snapshot made from want: 0 when it does, -ESTALE with what
 * differs in why otherwise (-EINVAL when meta is malformed). */
int qemu_meta_match(const json_t *meta, const struct qemu_snap_key *want, struct err *why);

/* The TSC rate recorded in meta (0: none). A freshly measured rate within 0.1% of it is taken
 * to be the same, so that measurement noise never invalidates a snapshot. */
unsigned qemu_meta_tsc_khz(const json_t *meta);

/* What the driver learnt about this host at init, read-only afterwards. */
struct qemu_host {
	char *qemu_bin;
	char *qemu_version; /* first line of `qemu --version` */
	char *run_dir;      /* <run_dir>/qemu */
	char *kernel;       /* <artifacts>/vmlinux */
	struct cgroup_root cg;
	enum qemu_accel accel;
	enum qemu_channel channel;
	unsigned tsc_khz; /* measured host TSC rate (TCG guests run at it), 0: unknown */
	char *host_cpu;   /* KVM: the host CPU model name; "" otherwise */
};

/* What a sandbox of a template gets: the inputs of its snapshot besides the host's. */
struct qemu_want {
	const char *tdir;   /* the template's directory */
	const char *rootfs; /* its rootfs.ext4 */
	unsigned vcpus;
	unsigned mem_mib;
	uint64_t workspace_mib;
	unsigned pids_max; /* the sandbox's pids limit, 0: none */
};

/* The key for w on host h (owned strings: free with qemu_key_free). `meta` (may be NULL) is
 * an existing snapshot's, whose TSC rate is kept when the host's measures the same. Fails when
 * the kernel or the rootfs is missing. */
int qemu_key_build(const struct qemu_host *h, const struct qemu_want *w, const json_t *meta,
		   struct qemu_snap_key *k, struct err *err);
void qemu_key_free(struct qemu_snap_key *k);

/* --- drives (qemu_disk.c) ----------------------------------------------------------------
 *
 * Besides its root, every VM has the same QEMU_DRIVES virtio-blk devices, snapshot and clones
 * alike (a restore needs the device set the snapshot was made with): drive 0, the sandbox's
 * disk; drives 1 to QEMU_VOLUME_SLOTS, volume slots. The snapshot's are placeholders (null-co:
 * no file, reads zeros); a clone binds each of its own to an image given as a descriptor, or
 * leaves the placeholder. The guest's driver learnt each device's capacity when the template
 * booted (QEMU_SLOT_BYTES); what bounds a bound drive is its image's size, which QEMU enforces
 * (an access past its end is an I/O error) and the filesystem in it is made to. The guest's
 * agent finds a drive by its serial (QEMU_DRIVE_SERIAL), not by its name /dev/vdX. */
#define QEMU_VOLUME_SLOTS 4
#define QEMU_DRIVES       (1 + QEMU_VOLUME_SLOTS)
#define QEMU_DRIVE_DISK   0
#define QEMU_SLOT_BYTES   (1ull << 40) /* 1 TiB: the largest disk or volume a VM can bind */
#define QEMU_DRIVE_SERIAL "sandbox-drive%u"

/* The images a clone binds to its drives: fd[i] -1 leaves drive i a placeholder; an fd is
 * read-write unless ro[i] (QEMU needs the descriptor's access mode to match). overlay[i]
 * (-1: none), for a read-only image: a qcow2 image of its size without a name, over which
 * the guest sees it (qemu_overlay_create), so that its kernel may replay the journal of a
 * volume whose writer was killed, in blocks that go with the sandbox. */
struct qemu_drives {
	int fd[QEMU_DRIVES];
	bool ro[QEMU_DRIVES];
	int overlay[QEMU_DRIVES];
};

/* An empty qcow2 image of `bytes` (version 2, 64 KiB clusters, no backing file named: QEMU
 * is given it), an O_TMPFILE in <state_dir>/disks. Returns its descriptor (read-write). */
int qemu_overlay_create(const char *state_dir, uint64_t bytes, struct err *err);

/* Makes a sandbox's disk: a sparse ext4 image of `bytes` without a name (O_TMPFILE in
 * <state_dir>/disks), formatted for the guest to mount (its root owned by the guest's root).
 * Returns the image's descriptor (read-write; the caller's). Nothing stays behind when the
 * last descriptor closes. */
int qemu_disk_create(const char *state_dir, uint64_t bytes, struct err *err);

/* A copy of disk image `from` (sparse, as it is), without a name as qemu_disk_create's:
 * a fork's own disk. Returns its descriptor (read-write). */
int qemu_disk_clone(const char *state_dir, int from, struct err *err);

/* Used and total bytes of a disk image as the host sees it: its size, and what of it holds
 * data (allocated blocks). */
int qemu_disk_usage(int fd, uint64_t *used, uint64_t *size);

/* A snapshot ready to restore: its files, open. */
struct qemu_snap {
	json_t *meta;
	struct qemu_snap_key key; /* the machine to start, identical to the snapshot's */
	int ram_fd;               /* the sealed memfd of memory.ram's contents */
	int state_fd;             /* state.mig */
	int rootfs_fd;            /* the template's rootfs.ext4, checked against the key */
};

/* Makes sure the template has a valid snapshot for w; builds it when missing or stale (one
 * builder at a time per template, across threads and processes). Cheap when valid: stats and
 * a comparison. */
int qemu_snap_prepare(const struct qemu_host *h, const struct qemu_want *w, struct err *err);

/* Opens the template's snapshot for a restore, when it is valid for w: -ENOENT when there is
 * none or it is stale (err says why). Release with qemu_snap_release(). */
int qemu_snap_acquire(const struct qemu_host *h, const struct qemu_want *w, struct qemu_snap *ret,
		      struct err *err);
void qemu_snap_release(struct qemu_snap *s);

/* Marks the template's snapshot stale after QEMU refused to load it, so that the next
 * prepare() rebuilds it instead of every clone failing the same way. Only if it is still the
 * snapshot s was opened from. */
void qemu_snap_invalidate(const struct qemu_want *w, const struct qemu_snap *s);

/* --- hibernated VMs (qemu_keep.c) -------------------------------------------------------- */

#define QEMU_KEEP_DIR "qemu-saved" /* in SANDBOX_STATE_DIR */

struct qemu_vm;

/* What a save keeps besides QEMU's stream: the machine to start again, the disk (-1: none)
 * and the template image the guest ran on. */
struct qemu_keep_what {
	/* The save's name (its directory, and "sandbox" in the record): the sandbox's id for a
	 * hibernation, another valid id for a fork's save. */
	const char *name;
	/* The template's image by its path now: where no link can be made, it must still be the
	 * file the VM runs on. */
	const char *rootfs_path;
	/* A fork's: the VM runs on after the save, so its disk is copied (while the VM is
	 * stopped) rather than linked, and the record says "fork": each sandbox made from it
	 * copies the disk again and leaves the save for the next. */
	bool fork;
	/* Synced before it is named (a hibernation's, a snapshot's); a fork's need not be. */
	bool durable;
	const struct qemu_machine *m;
	unsigned vsock_cid;
	int disk_fd;
	uint64_t disk_bytes;
	int rootfs_fd;
	const char *qemu_version;
	const char *host_cpu;
};

/* Stops the VM and saves it whole (RAM and devices) with what in
 * <state_dir>/qemu-saved/<what->name>/, atomically (a temporary directory renamed once synced);
 * *ret is the record a resume needs (owned). On failure nothing is left but the VM, stopped:
 * the caller lets it run again if it was running. */
int qemu_keep_save(struct qemu_vm *vm, const char *state_dir, const struct qemu_keep_what *what,
		   json_t **ret, struct err *err);

/* A saved VM, open for a resume. */
struct qemu_kept {
	struct qemu_machine m; /* m.cmdline owned */
	unsigned vsock_cid;
	int state_fd;
	int disk_fd; /* -1: it had no disk */
	int rootfs_fd;
	bool fork; /* a fork's save (qemu_keep_what.fork) */
};

/* Opens the saved VM of `keep` (qemu_keep_save's record) after checking that this host can
 * restore it: the same accelerator, channel, QEMU and host CPU (EXDEV otherwise), and its
 * template image still the file it ran on (ESTALE). template_rootfs: the template's image
 * now. Close with qemu_kept_close. */
int qemu_keep_open(const struct qemu_host *h, const char *state_dir, const json_t *keep,
		   const char *template_rootfs, struct qemu_kept *k, struct err *err);
void qemu_kept_close(struct qemu_kept *k);

/* Whether keep's saved VM is on disk (ENOENT when not). */
int qemu_keep_check(const char *state_dir, const json_t *keep, struct err *err);

/* Removes sandbox id's saved VM, if any (a resumed one, a discarded one). */
void qemu_keep_remove(const char *state_dir, const char *id);

/* The names a resumed VM's disk and template image keep while it runs (the next hibernation
 * links them): <state_dir>/qemu-saved/<id>.disk and <id>.rootfs. */
#define QEMU_KEEP_LIVE_DISK   ".disk"
#define QEMU_KEEP_LIVE_ROOTFS ".rootfs"
/* A resume's commit, once the VM is restored and before it runs: saved VM id is renamed out of
 * the way in one step (a crash from then on leaves a name the sweep removes), its disk and
 * template image get the resumed sandbox new_id's names (*disk_named, *rootfs_named), the
 * rest is removed. On failure the save is untouched. */
int qemu_keep_consume(const char *state_dir, const char *id, const char *new_id, bool *disk_named,
		      bool *rootfs_named, struct err *err);
/* Removes sandbox id's names (qemu_keep_consume's), if any. */
void qemu_keep_remove_live(const char *state_dir, const char *id);
/* At start, before any sandbox runs: removes everything of qemu-saved/ that none of the n
 * names (the saves hibernated sessions keep) is: orphaned saves, names of sandboxes gone. */
void qemu_keep_sweep_orphans(const char *state_dir, const char *const *keep, size_t n);

/* Removes the temporary directories of saves a stopped daemon did not finish. */
void qemu_keep_sweep(const char *state_dir);

/* --- one QEMU process (qemu_vm.c) --------------------------------------------------------- */

struct qemu_console;

struct qemu_vm {
	char *name;
	char *dir; /* run directory, removed by qemu_vm_free */
	int dirfd;
	pid_t pid;
	int pidfd;
	uint64_t start_time; /* /proc/<pid>/stat field 22 */
	bool reaped;
	int status; /* wait status once reaped */
	struct qemu_console *con;
	struct qmp *qmp;
	int agent_fd;
	enum qemu_channel channel;
	unsigned vsock_cid;
	bool migration_failed; /* QEMU reported the migration failed (not a timeout) */
	/* The host uid and gid QEMU runs as: the first id of a range of the allocator the jails
	 * use (jail_uid_alloc), held until QEMU is reaped. */
	uint32_t uid;
};

/* Creates the run directory <run_dir>/qemu/<name> (0700; an existing one is refused). */
int qemu_vm_dir(const char *run_dir, const char *name, char **ret, struct err *err);

/* Starts QEMU for l in `dir` (taken over: removed when the vm is freed), placed in cgroup cg
 * (may be NULL), confined as a uid of its own (see struct qemu_launch), its console captured
 * in dir/console.log, and connects to its QMP socket.
 * On failure the process is gone and err says why (with QEMU's own last words). */
int qemu_vm_start(const struct qemu_launch *l, char *dir, const struct cgroup *cg, int timeout_ms,
		  struct qemu_vm **ret, struct err *err);

/* A guest CID for vhost-vsock (random: a clash makes QEMU fail to start, and is rare). */
unsigned qemu_random_cid(void);

/* Connects to the agent's channel (vm->agent_fd). Serial: to QEMU's socket, and waits until
 * QEMU has taken the connection, so that a restored guest never sees its host go away. */
int qemu_vm_connect_agent(struct qemu_vm *vm, int timeout_ms, struct err *err);

/* Restores a snapshot into a VM started with `incoming` and runs it: QEMU reads the device
 * state from a copy of state_fd (passed over QMP). */
int qemu_vm_restore(struct qemu_vm *vm, int state_fd, int timeout_ms, struct err *err);

/* qemu_vm_restore without the `cont`: the guest is restored and stays stopped. */
int qemu_vm_load(struct qemu_vm *vm, int state_fd, int timeout_ms, struct err *err);

/* Halts the guest's vCPUs (run false, QMP stop) or lets them run again (cont). */
int qemu_vm_run_state(struct qemu_vm *vm, bool run, int timeout_ms, struct err *err);

/* Stops the guest and has QEMU write its device state to a copy of state_fd (RAM stays in
 * its shared file; a clone's private RAM goes into the stream), at no rate limit. A save that
 * fails or times out is cancelled: the guest stays stopped, QEMU writes no more. */
int qemu_vm_save(struct qemu_vm *vm, int state_fd, int timeout_ms, struct err *err);

/* Sends the guest-protocol REQUEST `request` (JSON) on channel ch of vm->agent_fd and waits
 * for its terminal frame: 0 for RESULT, -EREMOTEIO with the agent's message for ERROR. Frames
 * before it (output) are skipped. */
int qemu_vm_call(struct qemu_vm *vm, uint32_t ch, const char *request, int timeout_ms,
		 struct err *err);

/* Whether QEMU is still running: false once it exits or is exiting (reaps it when it can). */
bool qemu_vm_running(struct qemu_vm *vm);

/* Adds why the VM failed, when it did, to err: QEMU's exit, a guest kernel panic, the last
 * console lines. Returns -err->errnum. */
int qemu_vm_explain(struct qemu_vm *vm, struct err *err);

/* How many processes the guest kernel's OOM killer has killed, as its console reported
 * them. A guest root can print such lines itself: it only misleads its own results. */
uint64_t qemu_vm_guest_oom_kills(struct qemu_vm *vm);

/* Kills QEMU (SIGKILL) and reaps it, stops the console capture (its tail stays readable),
 * closes QMP. Idempotent. */
void qemu_vm_stop(struct qemu_vm *vm);

/* Stops the VM, removes its run directory and frees it. Accepts NULL. */
void qemu_vm_free(struct qemu_vm *vm);

/* --- qemu_kvm_cache.c ------------------------------------------------------------------- */

/* What the KVM probe's verdict depends on, as a JSON object (caller owns): the boot (the
 * boot id read from boot_id_path, NULL: /proc/sys/kernel/random/boot_id), the host kernel's
 * release, QEMU (its version line; its binary's path, size and mtime), the guest kernel the
 * probe boots (path, size, mtime) and /dev/kvm's device number. NULL with err when a part
 * cannot be read: then nothing is kept or believed. */
json_t *qemu_kvm_cache_key(const char *boot_id_path, const char *qemu_bin, const char *qemu_version,
			   const char *kernel, struct err *err);
/* The verdict kept in path for exactly `key`: 0 with *ret_usable (and, when false, why[n]
 * the reason kept), or -1 with reason[rn] saying why there is none to believe: no file, one
 * made for other inputs, or one that is not a regular file of this user writable only by it,
 * is too large, or is malformed in any way. Nothing is set but reason on -1. */
int qemu_kvm_cache_load(const char *path, const json_t *key, bool *ret_usable, char *why, size_t n,
			char *reason, size_t rn);
/* Keeps a verdict in path (mode 0600, written aside and renamed into place). */
int qemu_kvm_cache_store(const char *path, const json_t *key, bool usable, const char *why,
			 struct err *err);
