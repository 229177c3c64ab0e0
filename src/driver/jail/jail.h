/* jail: internals of the jail driver (driver_jail, declared in driver.h), shared by its files:
 *   jail.c          the driver operations (probe, init, create, destroy, cleanup_stale)
 *   jail_plan.c     the setup plan of the sandbox's first process
 *   jail_seccomp.c  the seccomp filter, compiled once to BPF in the parent
 *
 * The jail's first process is a plan-based child (util/spawn.h): the parent builds the steps
 * that turn it into the sandbox, the child walks them and execs the agent.
 *
 * The parent places the child in the sandbox's cgroup while the child sets up its mounts: on
 * cgroup v2 by creating it there (clone3 CLONE_INTO_CGROUP), otherwise by writing its pid to
 * cgroup.procs. A cgroup migration waits for an RCU grace period (about 10 ms here), so doing
 * it in parallel rather than first hides most of it. The child waits for the parent's
 * go-ahead before the steps that must come after joining (the cgroup namespace) and before
 * anything of the sandbox's own runs. */
#pragma once

#include <linux/filter.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "driver/driver.h"
#include "util/err.h"
#include "util/spawn.h"

/* Fixed descriptor numbers in the child after it has arranged its descriptors. */
enum {
	JAIL_FD_AGENT = 3, /* the agent's end of the socketpair: the only fd the agent inherits */
	JAIL_FD_REPORT,    /* the write end of the report pipe (close-on-exec) */
	JAIL_FD_EXE,       /* O_PATH descriptor of the agent binary (close-on-exec) */
	JAIL_FD_NETNS,     /* the network namespace to join, when one was given (close-on-exec) */
	JAIL_FD_PROC,      /* the sandbox's procfs, mounted nowhere yet (close-on-exec) */
	JAIL_FD_SYS,       /* its sysfs, likewise */
	JAIL_FD_ROOT,      /* the template's rootfs, idmapped by the parent (close-on-exec) */
	JAIL_FD_RESOLV,    /* the sandbox's resolv.conf, a detached bind mount (close-on-exec) */
	JAIL_FD_VOLUME,    /* and up: its volumes' idmapped mounts, in order (close-on-exec) */
};

/* A sandbox's disk (jail_disk.c): its filesystem's detached mount, holding upper/ and work/
 * of the root's overlay. */
struct jail_disk {
	int mnt; /* -1: none */
	int img; /* the image, -1: none (kept to give it a name: jail_disk_keep) */
	/* The image's name while the sandbox runs, when it has one (a disk resumed after a
	 * hibernation: SANDBOX_STATE_DIR/disks/<id>.disk, removed with the sandbox); NULL for
	 * an unnamed one. Owned. */
	char *path;
	uint64_t bytes;
};

/* Makes a disk of `bytes` (an unnamed sparse ext4 image in state_dir/disks on a loop device,
 * freed with its last user) whose root, upper/, upper/tmp belong to uid_base and
 * upper/workspace to the command user of that range. */
int jail_disk_create(const char *state_dir, uint64_t bytes, uint32_t uid_base,
		     struct jail_disk *ret, struct err *err);
/* The sandbox's writable root: an overlay of `lower` (a detached mount) and the disk. Returns
 * its detached mount. */
int jail_disk_overlay(const struct jail_disk *d, int lower, struct err *err);
/* Gives the disk's image the name `path` (on the state directory's filesystem), so that it
 * outlives the sandbox and the daemon (hibernation, docs/lifecycle.md). */
int jail_disk_keep(struct jail_disk *d, const char *path, struct err *err);
/* Saves a copy of the disk as `path` (a fork's, docs/lifecycle.md) while the sandbox runs: its
 * filesystem frozen meanwhile (FIFREEZE), the copy sparse, named only once complete (and,
 * when durable, synced). */
int jail_disk_save(struct jail_disk *d, const char *path, bool durable, const char *marker,
		   struct err *err);
/* `marker` (above) names a file written before the freeze and removed after the thaw: a
 * daemon killed meanwhile leaves it, and the next start thaws the filesystem with this (it
 * finds the loop device by the image's inode, mounts the same filesystem again and thaws it
 * there), before the sandbox's processes, blocked on it, can be ended. 1 when it thawed one,
 * 0 when there was nothing to thaw (no marker, no such loop device any more); the marker is
 * removed either way. */
int jail_disk_thaw_leftover(const char *marker, struct err *err);
/* A new disk (unnamed, as jail_disk_create's) with the contents of the one jail_disk_save
 * kept as `from`, by a sandbox whose range began at from_base: its files are given the same
 * ids of the range at uid_base. */
int jail_disk_clone(const char *state_dir, const char *from, uint32_t from_base, uint32_t uid_base,
		    struct jail_disk *ret, struct err *err);
/* A disk made by jail_disk_create and kept as `path`: attached and mounted again, once no loop
 * device holds the image any more (the previous sandbox's detaches a moment after it ended;
 * EBUSY after a few seconds). */
int jail_disk_open(const char *path, struct jail_disk *ret, struct err *err);
/* The disk's used and total bytes (fstatfs: cheap). Negative errno when there is none. */
int jail_disk_usage(const struct jail_disk *d, uint64_t *used, uint64_t *size);
/* Closes the daemon's reference (and removes the image's name, when it has one); accepts a
 * disk without one. */
void jail_disk_close(struct jail_disk *d);
/* Attaches the image `img` read-write to a free loop device that detaches with its last
 * user (autoclear); its name in dev. Returns the device's descriptor. */
int jail_loop_attach_rw(int img, char *dev, size_t len, struct err *err);
/* A detached read-write, nosuid, nodev mount of the ext4 filesystem on `dev`. */
int jail_disk_mount(const char *dev, struct err *err);

/* Persistent volumes (jail_volume.c). Each image in use is mounted once, as a detached mount
 * the daemon holds while any sandbox uses it: jail_volume_open takes a reference (mounting it
 * on the first), *ret is borrowed until jail_volume_close. Thread-safe. EBUSY when a loop
 * device of an earlier use still holds the image after a short wait. */
int jail_volume_open(const char *image, int *ret, struct err *err);
void jail_volume_close(const char *image);
/* A sandbox's view of a volume: a clone of its mount idmapped to the user namespace (files
 * stored with canonical ids appear with those ids inside), read-only when asked, nosuid and
 * nodev. Returns its detached mount. */
int jail_volume_clone(int mnt, int userns, bool read_only, struct err *err);
/* Makes the directories of `path` (absolute, checked) below the detached root `root`, each
 * new one 0755 and root's inside (uid_base); refuses a symbolic link on the way. */
int jail_volume_mountpoint(int root, const char *path, uint32_t uid_base, struct err *err);

/* Each sandbox's ids: root inside is the first of JAIL_UID_RANGE host uids (and gids). */
#define JAIL_UID_RANGE 65536U
/* Who commands run as inside, unlike the agent (root inside): see agent/op_exec.c. */
#define JAIL_COMMAND_UID 1000

/* Namespaces made at clone time, by the privileged parent: the pid namespace, so that the
 * agent is its PID 1 (a pid namespace made later would take only the children), and the
 * network namespace of a sandbox without networking (networked ones join the network
 * module's). Both belong to the host's user namespace. */
#define JAIL_CLONE_NS (CLONE_NEWPID)
/* Namespaces the child makes once it is inside its user namespace, so that they belong to
 * it and root inside may mount, name the host and use mqueues in them. */
#define JAIL_USERNS_NS (CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC)

/* The steps that turn the child into the sandbox: the sandbox's network sysctls, limits, its
 * procfs and sysfs, the user namespace (created as host uid `uid_base`, mapped by the parent:
 * see jail_userns_map), the namespaces owned by it, hostname, mounts, /dev, /proc masking,
 * the wait for the parent's go-ahead, the cgroup namespace, capabilities, seccomp and the
 * exec of the agent. `rootfs` is the host directory the sandbox's / is attached over (the
 * parent sends the mount: jail_userns_map); with `resolv_conf`, the parent also sends a file
 * for its /etc/resolv.conf. With `home`, the workspace (with the volumes below it) is also
 * mounted on /home/user, the command user's home. The network step is added by the caller
 * first. */
void jail_plan_sandbox(struct spawn_plan *p, const char *rootfs, bool resolv_conf,
		       uint64_t workspace_bytes, uint32_t nofile, uint32_t uid_base, bool disk,
		       bool home, const struct sandbox_volume *vols, unsigned nvol);

/* The steps that take the child from host root into its user namespace (shared with the
 * trial run): procfs and sysfs made while it is still host root, the switch to uid_base,
 * the user namespace, then the wait for the parent's maps and the idmapped rootfs. */
void jail_plan_userns(struct spawn_plan *p, uint32_t uid_base, bool resolv_conf);
/* The network sysctls a sandbox's command user needs (unprivileged low ports, ping), written
 * through JAIL_FD_PROC while the child is host root (jail_plan.c). */
void jail_plan_net_sysctls(struct spawn_plan *p);
/* A detached read-only sysfs of a new, empty network namespace (made once: jail.c's host
 * state), which every sandbox gets a clone of as its /sys. Returns its descriptor. */
int jail_blank_sysfs(struct err *err);

/* The detached mounts sandboxes are cloned from (jail_keep.c). jail_keep_init decides, once,
 * whether this kernel clones a detached mount itself (6.15 and later) or the clones are made
 * on a thread of a private mount namespace where the kept mounts are attached. */
enum jail_keep_mode {
	JAIL_KEEP_DIRECT, /* open_tree clones detached mounts */
	JAIL_KEEP_THREAD, /* kept mounts attached in the keeper thread's namespace */
};
/* force_thread: the keeper even where the kernel would not need it (tests of the fallback). */
int jail_keep_init(bool force_thread, struct err *err);
enum jail_keep_mode jail_keep_mode(void);
/* Takes a detached mount (fsmount's; consumed, even on failure) and returns the handle its
 * clones are made from, which stands for it in every use a mount's descriptor has (openat,
 * fstatat, /proc/self/fd paths). */
int jail_keep(int mnt, struct err *err);
/* A detached clone of `path` below a kept mount, or below AT_FDCWD (a path of the daemon's
 * own mount namespace): "" for its root; flags: AT_RECURSIVE or 0. A negative errno on
 * failure. */
int jail_keep_clone(int kept, const char *path, unsigned flags);
/* Closes a handle of jail_keep, and detaches its mount where the keeper holds it. */
void jail_keep_release(int kept);
/* Runs fn(arg) on the keeper's thread, where there is one, else on this one; returns what it
 * returned. For what must see mounts in the caller's namespace on older kernels (overlayfs
 * clones its layers, and before 6.15 only mounts of the caller's namespace). */
int jail_keep_call(int (*fn)(void *arg), void *arg);
/* Only within jail_keep_call's fn, in JAIL_KEEP_THREAD mode: attaches the detached mount `mnt`
 * (still the caller's) at a new place of the keeper's namespace, whose path it writes to path;
 * jail_keep_detach(path) detaches it again (the descriptor stays usable). */
int jail_keep_attach(int mnt, char *path, size_t len, struct err *err);
void jail_keep_detach(const char *path);

/* The parent's half of jail_plan_userns: waits for the child to be in its user namespace,
 * writes its uid and gid maps (root inside = uid_base, JAIL_UID_RANGE ids), and sends it a
 * read-only clone of the rootfs (`root_path` below `root_dfd`, or root_dfd itself when the
 * path is "") idmapped to that namespace (with a disk, `disk` not NULL: an overlay of that
 * clone and the disk, see jail_disk_overlay), and of `resolv` below `resolv_dfd` (NULL: none)
 * as a read-only file mount. Both are made here, where the daemon's directories can be
 * reached: the child, an unprivileged uid by then, may not be able to look up paths below
 * them. With volumes (a disk's overlay only): makes their mount points in that overlay and
 * sends, in a second message, an idmapped clone of each volume's mount (`vol_mnt`,
 * jail_volume_open's) in order. jail_userns_enter, then jail_userns_send. */
int jail_userns_map(const struct spawn_plan *plan, struct spawn_child *c, int agent_fd,
		    uint32_t uid_base, int sysfs, int root_dfd, const char *root_path,
		    int resolv_dfd, const char *resolv, const struct jail_disk *disk,
		    const struct sandbox_volume *vols, const int *vol_mnt, unsigned nvol,
		    struct err *err);
/* Its first half: the wait and the maps. Returns a descriptor of the child's user namespace
 * (the caller's to close). */
int jail_userns_enter(const struct spawn_plan *plan, struct spawn_child *c, int agent_fd,
		      uint32_t uid_base, struct err *err);
/* Its second half: the mounts, made for the namespace `userns` and sent. With userns -1 (the
 * trial run's) the rootfs is cloned without an idmap. */
int jail_userns_send(const struct spawn_plan *plan, int agent_fd, int userns, uint32_t uid_base,
		     int sysfs, int root_dfd, const char *root_path, int resolv_dfd,
		     const char *resolv, const struct jail_disk *disk,
		     const struct sandbox_volume *vols, const int *vol_mnt, unsigned nvol,
		     struct err *err);
/* Whether the filesystem of `path` takes an idmapped mount for the namespace `userns`: a
 * clone of it is idmapped (as a template's directory would be) and dropped. 0 when it does;
 * 1 when its filesystem lacks the kernel's support (mount_setattr's EINVAL), the reason in
 * err (the filesystem's type, the Linux version that brought its support, this kernel's: "...:
 * tmpfs has idmapped mounts since Linux 6.3, and this kernel is 6.1.0-18-amd64"); a negative
 * errno for any other failure, such as a kernel without mount_setattr. */
int jail_idmap_probe(const struct spawn_plan *plan, int userns, const char *path, struct err *err);
/* What the start (the trial run) found of the templates' filesystem: "" when it takes
 * idmapped mounts, else the warning said at start (jail.c). */
const char *jail_idmap_warning(void);

/* A detached read-only mount of the ext4 image at `path` (a template's rootfs.ext4), mounted
 * on first use and kept for the daemon's life (jail_keep): *ret is a duplicate of its handle,
 * the caller's to close. */
int jail_rootfs_image(const char *path, int *ret, struct err *err);
/* Copies host_path into the daemon's detached tmpfs as a file named `id`; *ret_dir is that
 * tmpfs (borrowed). */
int jail_resolv_copy(const char *id, const char *host_path, int *ret_dir, struct err *err);
void jail_resolv_remove(const char *id);

struct config;
/* Checks the configured ranges against /etc/subuid and /etc/subgid (the files configured)
 * and sets up the allocator. */
int jail_uid_setup(const struct config *cfg, struct err *err);
/* Fails when `path` ("name:start:count" lines) gives any id in [lo, hi) to a user other than
 * `owner` (NULL or "": no exception). */
int jail_subid_check(const char *path, uint64_t lo, uint64_t hi, const char *owner,
		     struct err *err);
/* A free range's first uid; EAGAIN when all are taken. */
int jail_uid_alloc(uint32_t *ret, struct err *err);
void jail_uid_release(uint32_t base);
/* Takes the range that begins at `base` (a hibernated sandbox's, after a restart): EBUSY when
 * it is in use, EINVAL when no range begins there. */
int jail_uid_claim(uint32_t base, struct err *err);
/* After a previous run's sandbox was cleaned up: keeps its range out of use while any host
 * process still runs with one of its uids. */
void jail_uid_reserve_if_busy(uint32_t base);

/* Compiles the sandbox's seccomp filter for this machine's architectures into *ret (the
 * instructions are heap-allocated; they are meant to live as long as the process). */
int jail_seccomp_build(struct sock_fprog *ret, struct err *err);

/* The capabilities the agent keeps inside its user namespace (commands get none). */
uint64_t jail_caps_keep(void);
