/* jailer: how the firecracker driver runs Firecracker inside Firecracker's jailer: its argv
 * and the chroot it prepares. Pure functions where possible, so that tests can check them
 * without the binaries. */
#pragma once

#include <stdint.h>
#include <sys/types.h>

#include "util/err.h"

/* Unix socket paths must fit sockaddr_un.sun_path. */
#define FC_SUN_PATH_MAX 107

struct fc_jail_spec {
	const char *jailer_bin;
	const char *fc_bin;
	const char *id;          /* the jail's id: [a-zA-Z0-9-], at most 64 chars */
	const char *chroot_base; /* FIRECRACKER_JAIL_BASE */
	const char *netns_path;  /* or NULL */
	unsigned uid, gid;
	int cgroup_version; /* 1 or 2 */
	const char *parent_cgroup;
	uint64_t memory_bytes; /* 0: no limit */
	uint64_t cpu_quota_us, cpu_period_us;
	uint32_t pids_max;
	uint32_t nofile;
};

/* The jailer's argv (NULL-terminated; free with fc_argv_free). Firecracker's own arguments
 * follow "--": the API socket, inside the chroot. */
char **fc_jailer_argv(const struct fc_jail_spec *s);
void fc_argv_free(char **argv);

/* <chroot_base>/<basename of fc_bin>/<id>: the jailer's directory for this VM. */
char *fc_jail_dir(const char *chroot_base, const char *fc_bin, const char *id);

/* The API socket and the vsock socket inside the chroot, as Firecracker sees them. */
#define FC_API_SOCK  "/run/firecracker.socket"
#define FC_VSOCK_UDS "/v.sock"

/* Puts `src` into the chroot at `root`/`name` as a hard link, or a copy when src is on
 * another filesystem; owned by uid:gid with `mode` (never world-accessible). */
int fc_jail_stage(const char *root, const char *src, const char *name, uid_t uid, gid_t gid,
		  mode_t mode, struct err *err);

/* Copies a regular file to a new file `dst` (never overwriting); negative errno. */
int fc_copy_file(const char *src, const char *dst, mode_t mode);
