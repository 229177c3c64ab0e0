/* driver: turns a template into a running sandbox and hands back a connected byte stream to
 * the sandbox's agent. Everything above this interface is the same for every driver.
 *
 * Drivers are variants behind `struct driver` (one file each: jail.c, qemu.c, firecracker.c)
 * listed in driver.c's table. create() and destroy() block and run on worker threads; they
 * must not touch loop-owned state. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "config.h"
#include "driver/cgroup.h"
#include "template/template.h"
#include "util/err.h"

struct sandbox_limits {
	uint64_t memory_bytes; /* memory cgroup limit (0: none) */
	uint64_t cpu_quota_us; /* CPU bandwidth: quota per period (0: none) */
	uint64_t cpu_period_us;
	uint32_t pids_max;        /* pids cgroup limit (0: none) */
	uint64_t workspace_bytes; /* size of the /workspace tmpfs, or of the disk (below) */
	bool disk;        /* a disk of workspace_bytes under the root and /workspace (storage.md) */
	uint32_t nofile;  /* RLIMIT_NOFILE inside the sandbox */
	unsigned vcpus;   /* VM drivers */
	unsigned mem_mib; /* VM drivers: guest RAM */
};

/* A persistent volume to mount in the sandbox (session/volume.h): an ext4 image whose files
 * carry canonical ids (the sandbox's own, as seen inside), at an absolute path already
 * checked (volume_path_check). */
struct sandbox_volume {
	const char *image; /* host path of the image */
	const char *path;  /* inside the sandbox */
	bool read_only;
};
#define SANDBOX_VOLUMES_MAX 8
/* The extended attribute of a volume image a VM has had read-write: its filesystem is
 * whatever a guest kernel wrote, and the host's kernel (the jail's mounts) does not parse it. */
#define DRIVER_XATTR_GUEST_WRITTEN "trusted.agent-sandbox.guest-written"

/* A driver's failure to create a sandbox is the server's, whatever its errno (the system
 * calls on the way fail with every errno for reasons of the host's), except under these two,
 * which a driver sets only for what the request asked: DRIVER_EREQUEST, a request the template
 * cannot meet (a volume's mount point through a symbolic link or a file of the template: the
 * request's error, 400), and DRIVER_ECONFLICT, a volume this driver cannot use as it is (one a
 * VM wrote: a conflict with the volume's state, 409). The session layer reports them as such,
 * with their messages. */
#define DRIVER_EREQUEST  EBADRQC
#define DRIVER_ECONFLICT EMEDIUMTYPE

struct sandbox_spec {
	struct template *tmpl; /* borrowed; the caller holds a reference until create returns */
	const char *id;        /* unique id ([a-z0-9-], at most 40 chars): names cgroups and dirs */
	struct sandbox_limits limits;
	const char
		*netns_path; /* network namespace to join (/run/netns/...), NULL: a new empty one */
	/* The resolver of the sandbox's network, as a resolv.conf to mount on the template's
	 * /etc/resolv.conf where the driver gives the sandbox its own root; NULL: none. */
	const char *resolv_conf;
	/* Volumes to mount (disk storage only); borrowed until create returns. */
	const struct sandbox_volume *volumes;
	unsigned nvolumes;
	/* Borrowed, NULL: a new sandbox. What hibernate() kept of an earlier one (claimed again by
	 * hibernated_claim after a restart): the new sandbox runs over its disk, with its ids.
	 * On failure it stays kept, for another try. */
	const json_t *hibernated;
};

struct sandbox {
	const struct driver *driver;
	char *id;
	int agent_fd;   /* connected stream to the agent; the caller takes it (TAKE_FD) */
	pid_t pid;      /* main process: the jail's init or the VMM; 0 if none */
	json_t *record; /* what cleanup_stale needs after a daemon crash (owned) */
	/* Fields the driver adds to the agent's first `resume` (owned; NULL: none): a VM's
	 * storage, which its guest mounts then (qemu: "storage", guest/proto.h). The warm pool
	 * sends them ahead, in a resume of its own, and clears them. */
	json_t *resume_extra;
	void *priv; /* driver state */
};

struct driver {
	const char *name;      /* "jail", "qemu", "firecracker" */
	const char *isolation; /* "container" (namespaces, shared kernel) or "vm" */
	bool snapshots;        /* restores from a template snapshot */
	bool disks;            /* has disk storage and volumes (docs/storage.md) */
	unsigned max_volumes;  /* volumes a sandbox may mount (at most SANDBOX_VOLUMES_MAX) */

	/* Whether the driver can run on this host; err says what is missing. Blocking. */
	int (*probe)(const struct config *cfg, struct err *err);

	/* One-time setup after the probe succeeded (parent cgroups, run dirs). Blocking. */
	int (*init)(const struct config *cfg, struct err *err);

	/* Per-template preparation, e.g. building its snapshot; NULL when not needed. Blocking.
	 * Called before every create() from worker threads: it must be idempotent, safe to run
	 * concurrently for the same template, and cheap when the template is already prepared
	 * (and still matches its kernel, rootfs and VMM version). */
	int (*prepare)(const struct config *cfg, struct template *t, struct err *err);

	/* Creates and starts a sandbox. On success *ret is a sandbox whose agent_fd is connected
	 * to its agent (the session layer makes the first exchange, with a deadline). On failure
	 * nothing is left behind (processes, mounts, cgroups, files). */
	int (*create)(const struct config *cfg, const struct sandbox_spec *spec,
		      struct sandbox **ret, struct err *err);

	/* Stops the sandbox and removes all it owns; frees sb. Never fails: what cannot be
	 * removed is logged. Blocking. */
	void (*destroy)(struct sandbox *sb);

	/* Removes what a previous daemon run left of a sandbox, given its saved record. Must
	 * touch nothing it cannot prove is that sandbox's. Blocking. */
	void (*cleanup_stale)(const struct config *cfg, const char *id, json_t *record);

	/* How many processes the sandbox's memory limit has killed so far (for a clear result
	 * when a command dies of it); NULL when the driver cannot tell. Cheap, loop-safe. */
	uint64_t (*oom_kills)(struct sandbox *sb);

	/* The sandbox's disk: used and total bytes. Negative errno when it has none (or the
	 * driver keeps none); NULL likewise. Cheap, loop-safe. */
	int (*disk_usage)(struct sandbox *sb, uint64_t *used, uint64_t *size);

	/* What the sandbox uses now, as the host counts it (its cgroup: for a VM, its VMM's
	 * CPU time and memory). Negative errno when it cannot tell; NULL likewise. A few small
	 * reads: loop-safe. */
	int (*usage)(struct sandbox *sb, struct cgroup_usage *ret);

	/* Freezes the sandbox (pause) or lets it run again: its processes keep their memory and
	 * use no CPU meanwhile. NULL when the driver cannot. Blocking (briefly): a worker's. */
	int (*pause)(struct sandbox *sb, bool pause, struct err *err);

	/* Hibernation (docs/lifecycle.md); NULL when the driver cannot. Ends the sandbox (frozen
	 * or not) and frees all it holds but what it keeps on disk (the jail: its disk, and its
	 * ids; a VM: all of it, RAM included, see hibernate_keeps_processes); on success sb is
	 * freed and *ret_keep (owned) is what a later create needs (sandbox_spec.hibernated): a
	 * JSON object the caller may store. On failure (a sandbox without a disk, with volumes, a
	 * disk that cannot be kept) the sandbox is untouched. Blocking. */
	int (*hibernate)(struct sandbox *sb, json_t **ret_keep, struct err *err);
	/* Whether a hibernated sandbox's processes carry on after its resume (a VM saved whole:
	 * qemu), or were ended (the jail keeps only the disk). */
	bool hibernate_keeps_processes;
	/* Fork (docs/lifecycle.md); NULL when the driver cannot. Saves the running sandbox whole
	 * (a VM: its RAM and devices, a copy of its disk) without ending it: it runs on (or stays
	 * frozen). *ret_keep (owned) is a record as hibernate()'s, from which any number of new
	 * sandboxes are made (sandbox_spec.hibernated), each from that moment with a disk of its
	 * own; hibernated_discard frees the save once no more are to be made. On failure the
	 * sandbox is as it was. durable: it must survive a crash of the host (a snapshot's,
	 * synced before it is named); else it lives only until its forks are made (a fork's),
	 * and a crash leaves at most a save the next start sweeps. Blocking. */
	int (*fork_save)(struct sandbox *sb, bool durable, json_t **ret_keep, struct err *err);
	/* After a restart: takes back what a hibernated sandbox keeps (its ids), before any
	 * sandbox is made; EBUSY/ENOENT when it cannot. Blocking, brief. */
	int (*hibernated_claim)(const json_t *keep, struct err *err);
	/* At start, once every hibernated session's record was read (keeps: what each keeps,
	 * also those that could not be put back), before any sandbox is made: removes what the
	 * driver keeps for no one (a save a crash orphaned). NULL: nothing to do. Blocking. */
	void (*hibernated_sweep)(json_t *const *keeps, size_t n);
	/* Frees what a hibernated sandbox keeps (its disk's file, its ids) once it will not be
	 * resumed. Touches nothing that `keep` cannot prove is that sandbox's. Blocking. */
	void (*hibernated_discard)(const json_t *keep);
};

/* What a driver's cleanup_stale removes of a sandbox a previous run left, done the same way
 * for every driver by driver_cleanup_stale: the recorded process (only if it is still the very
 * process that was started: same boot, pid and start time), a directory of the driver's, and
 * the sandbox's cgroup (looked up afresh: the server may run another driver now). */
struct driver_stale {
	const char *driver; /* names the log lines: "qemu" */
	const char *what;   /* the recorded process, as the log names it: "QEMU" */
	/* An extra check that a recorded pid is the sandbox's (proc_kill_recorded), or NULL. */
	bool (*also)(pid_t pid, void *arg);
	void *arg;
	const char *dir; /* built from the server's settings, never from the record; or NULL */
};

/* Nothing is touched for an invalid id; what cannot be removed is logged. */
void driver_cleanup_stale(const struct driver_stale *s, const char *id, json_t *record);

/* The limits of a sandbox of template t that asks for nothing of its own: the server's
 * (VM_*, SANDBOX_PIDS_MAX), except the template's vCPUs and memory (guest RAM, and the
 * memory cgroup limit) where its manifest gives them. The
 * session layer starts from these, and a driver preparing a template's snapshot uses them
 * to build it for the sandboxes it will restore. */
void driver_default_limits(const struct config *cfg, const struct template *t,
			   struct sandbox_limits *ret);

/* The driver named `name`, or NULL. */
const struct driver *driver_find(const char *name);

/* Resolves SANDBOX_DRIVER (auto: firecracker, then qemu with a usable KVM, then jail), probes
 * and initialises it. Blocking; called once at start. */
int driver_select(const struct config *cfg, const struct driver **ret, struct err *err);

extern const struct driver driver_jail;
extern const struct driver driver_qemu;
extern const struct driver driver_firecracker;
