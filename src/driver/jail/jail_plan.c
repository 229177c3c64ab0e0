/* jail_plan: the steps a jail's first process performs between clone() and the exec of the
 * agent, as a plan (util/spawn.h) that the parent builds and the child walks. */
#include "driver/jail/jail.h"

#include <stdio.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sched.h>

#include "util/cleanup.h"

/* Size of the tmpfs holding /dev: device nodes and symlinks only. */
/* /dev's own files (the nodes are bind mounts of the host's) */
#define DEV_BYTES (64ULL << 10)
/* /dev/shm: shared memory is charged to the memory cgroup as well; this bounds it further. */
#define SHM_BYTES (64ULL << 20)
#define RUN_BYTES (16ULL << 20)

static void add_mount(struct spawn_plan *p, const char *src, const char *dst, const char *fstype,
		      unsigned long flags, const char *data, bool optional, const char *what)
{
	struct spawn_op *op = spawn_plan_add(p, SOP_MOUNT, what);
	op->src = src;
	op->dst = dst;
	op->fstype = fstype;
	op->flags = flags;
	op->data = data;
	op->optional = optional;
}

static void add_path(struct spawn_plan *p, enum spawn_op_kind kind, const char *dst,
		     unsigned long arg, const char *what)
{
	struct spawn_op *op = spawn_plan_add(p, kind, what);
	op->dst = dst;
	op->arg = arg;
}

static void add_symlink(struct spawn_plan *p, const char *target, const char *path)
{
	char what[128];
	snprintf(what, sizeof(what), "symlink %s", path);
	struct spawn_op *op = spawn_plan_add(p, SOP_SYMLINK, what);
	op->src = target;
	op->dst = path;
}

/* Paths of /proc and /sys that expose or control the host, hidden or made read-only the way
 * container runtimes do it. Each may be absent from a given kernel. */
static const char *const masked_files[] = {
	"/proc/kcore",      "/proc/keys",        "/proc/latency_stats",
	"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug",
};
static const char *const masked_dirs[] = {
	"/proc/acpi",
	"/proc/asound",
	"/proc/scsi",
	"/sys/firmware",
	"/sys/devices/virtual/powercap",
};
static const char *const readonly_paths[] = {
	"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger",
};

/* Where the masks of directories come from: an empty directory of /dev's tmpfs, bound
 * read-only over each and then removed (a removed directory can hold no entry). One tmpfs of
 * their own each would be a superblock each, and every superblock registers a shrinker that
 * every memory cgroup of the host keeps a slot for (docs/operations.md, "Density"). */
#define MASK_SOURCE "/dev/.mask"

static void add_masks(struct spawn_plan *p)
{
	char what[128];
	for (size_t i = 0; i < ARRAY_SIZE(masked_files); i++) {
		snprintf(what, sizeof(what), "mask %s", masked_files[i]);
		add_mount(p, "/dev/null", masked_files[i], NULL, MS_BIND, NULL, true, what);
	}
	add_path(p, SOP_MKDIR, MASK_SOURCE, 0555, "mkdir " MASK_SOURCE);
	for (size_t i = 0; i < ARRAY_SIZE(masked_dirs); i++) {
		snprintf(what, sizeof(what), "mask %s", masked_dirs[i]);
		add_mount(p, MASK_SOURCE, masked_dirs[i], NULL, MS_BIND, NULL, true, what);
		snprintf(what, sizeof(what), "remount the mask of %s read-only", masked_dirs[i]);
		add_mount(p, NULL, masked_dirs[i], NULL,
			  MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL,
			  true, what);
	}
	add_path(p, SOP_RMDIR, MASK_SOURCE, 0, "rmdir " MASK_SOURCE);
	for (size_t i = 0; i < ARRAY_SIZE(readonly_paths); i++) {
		const char *path = readonly_paths[i];
		snprintf(what, sizeof(what), "bind %s", path);
		add_mount(p, path, path, NULL, MS_BIND | MS_REC, NULL, true, what);
		snprintf(what, sizeof(what), "remount %s read-only", path);
		add_mount(p, NULL, path, NULL,
			  MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL,
			  true, what);
	}
}

/* Device nodes cannot be made in a user namespace (mknod needs CAP_MKNOD on the host, and
 * its mounts are nodev), so the host's own nodes are bound onto empty files. */
static const char *const devices[] = { "null", "zero", "full", "random", "urandom", "tty" };

/* The sandbox's scratch tmpfs: /dev, /run and (with tmpfs storage) /tmp are directories of
 * one tmpfs, each attached alone. One superblock where there were three: every superblock
 * registers a shrinker that every memory cgroup of the host keeps a slot for
 * (docs/operations.md, "Density"). They share its size, the sum of their bounds. */
struct scratch {
	bool tmp;                   /* /tmp is one of its directories (tmpfs storage) */
	int fd_tmp, fd_run, fd_dev; /* the detached directories, before they are attached */
};

/* Made on the rootfs (the working directory) before the pivot, while the host's device
 * nodes are in view: the tmpfs is mounted on dev, its directories are cloned as detached
 * mounts, then it goes and its dev/ takes its place. */
static void add_scratch(struct spawn_plan *p, const struct scratch *sc, uint64_t tmp_bytes)
{
	/* The modes below are exact (the plan sets its umask again before the exec). */
	add_path(p, SOP_UMASK, NULL, 0, "umask 0");
	/* nodev costs nothing: the nodes are bind mounts of the host's, with their own flags;
	 * /dev alone is noexec (below). */
	unsigned long long bytes = DEV_BYTES + SHM_BYTES + RUN_BYTES + (sc->tmp ? tmp_bytes : 0);
	add_mount(p, "tmpfs", "dev", "tmpfs", MS_NOSUID | MS_NODEV | MS_STRICTATIME,
		  spawn_plan_str(p, "mode=755,size=%llu", bytes), false,
		  "mount the scratch tmpfs on /dev");
	add_path(p, SOP_MKDIR, "dev/dev", 0755, "mkdir the scratch's dev");
	add_path(p, SOP_MKDIR, "dev/run", 0755, "mkdir the scratch's run");
	struct spawn_op *op = spawn_plan_add(p, SOP_CHOWN, "chown the scratch's run");
	op->dst = "dev/run";
	op->arg = JAIL_COMMAND_UID;
	op->flags = JAIL_COMMAND_UID;
	if (sc->tmp)
		add_path(p, SOP_MKDIR, "dev/tmp", 01777, "mkdir the scratch's tmp");
	for (size_t i = 0; i < ARRAY_SIZE(devices); i++) {
		const char *node = spawn_plan_str(p, "dev/dev/%s", devices[i]);
		op = spawn_plan_add(p, SOP_MKNOD, spawn_plan_str(p, "create /dev/%s", devices[i]));
		op->dst = node;
		op->arg = S_IFREG | 0666;
		add_mount(p, spawn_plan_str(p, "/dev/%s", devices[i]), node, NULL, MS_BIND, NULL,
			  false, spawn_plan_str(p, "bind /dev/%s", devices[i]));
	}
	op = spawn_plan_add(p, SOP_OPEN_TREE, "clone the scratch's run");
	op->dst = "dev/run";
	op->arg = sc->fd_run;
	if (sc->tmp) {
		op = spawn_plan_add(p, SOP_OPEN_TREE, "clone the scratch's tmp");
		op->dst = "dev/tmp";
		op->arg = sc->fd_tmp;
	}
	op = spawn_plan_add(p, SOP_OPEN_TREE, "clone the scratch's dev with its nodes");
	op->dst = "dev/dev";
	op->arg = sc->fd_dev;
	op->flags = AT_RECURSIVE;
	op = spawn_plan_add(p, SOP_UMOUNT, "detach the scratch's root");
	op->dst = "dev";
	op->flags = MNT_DETACH;
	op = spawn_plan_add(p, SOP_MOVE_MOUNT, "attach the scratch's dev on /dev");
	op->fd = sc->fd_dev;
	op->dst = "dev";
	add_mount(p, NULL, "dev", NULL,
		  MS_REMOUNT | MS_BIND | MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_STRICTATIME, NULL,
		  false, "remount /dev noexec");
}

/* The rest of /dev, after the pivot. */
static void add_dev_rest(struct spawn_plan *p)
{
	add_path(p, SOP_MKDIR, "/dev/pts", 0755, "mkdir /dev/pts");
	add_mount(p, "devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
		  "newinstance,ptmxmode=0666,mode=0620,gid=5", false, "mount devpts on /dev/pts");
	add_symlink(p, "pts/ptmx", "/dev/ptmx");
	/* A directory of /dev, which has room for it (SHM_BYTES). */
	add_path(p, SOP_MKDIR, "/dev/shm", 01777, "mkdir /dev/shm");
	add_path(p, SOP_MKDIR, "/dev/mqueue", 0755, "mkdir /dev/mqueue");
	add_mount(p, "mqueue", "/dev/mqueue", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL,
		  false, "mount mqueue on /dev/mqueue");
	add_symlink(p, "/proc/self/fd", "/dev/fd");
	add_symlink(p, "/proc/self/fd/0", "/dev/stdin");
	add_symlink(p, "/proc/self/fd/1", "/dev/stdout");
	add_symlink(p, "/proc/self/fd/2", "/dev/stderr");
}

/* The network namespace is the host's (it belongs to the host's user namespace), so root
 * inside holds no capability in it: these let the unprivileged command user bind ports below
 * 1024 (a web server on port 80) and ping (ICMP datagram sockets), in this namespace alone.
 * Written while the child is still host root, before it leaves for its user namespace, and
 * through the sandbox's own procfs (JAIL_FD_PROC): the host's /proc keeps a dentry of each
 * name below /proc/sys/net for every network namespace, all in one hash chain, so a lookup
 * there costs in proportion to the sandboxes alive; a new procfs has none of them. */
void jail_plan_net_sysctls(struct spawn_plan *p)
{
	struct spawn_op *op =
		spawn_plan_add(p, SOP_WRITE, "set net.ipv4.ip_unprivileged_port_start");
	op->fd = JAIL_FD_PROC;
	op->dst = "sys/net/ipv4/ip_unprivileged_port_start";
	op->src = "0";
	op = spawn_plan_add(p, SOP_WRITE, "set net.ipv4.ping_group_range");
	op->fd = JAIL_FD_PROC;
	op->dst = "sys/net/ipv4/ping_group_range";
	op->src = "0 2147483647";
}

void jail_plan_sandbox(struct spawn_plan *p, const char *rootfs, bool resolv_conf,
		       uint64_t workspace_bytes, uint32_t nofile, uint32_t uid_base, bool disk,
		       bool home, const struct sandbox_volume *vols, unsigned nvol)
{
	const char *root = spawn_plan_str(p, "%s", rootfs);
	struct spawn_op *op;

	/* Before the switch of uid: raising a hard limit takes CAP_SYS_RESOURCE on the host. */
	op = spawn_plan_add(p, SOP_RLIMIT, "setrlimit RLIMIT_NOFILE");
	op->flags = RLIMIT_NOFILE;
	op->arg = nofile;
	/* No core dump leaves a sandbox: a limit of 1 byte writes no core file, and the kernel
	 * aborts a dump to a pipe (a core_pattern such as systemd-coredump's, which would run
	 * on the host, as root, for every crash a sandbox provokes) rather than run it. */
	op = spawn_plan_add(p, SOP_RLIMIT, "setrlimit RLIMIT_CORE");
	op->flags = RLIMIT_CORE;
	op->arg = 1;
	/* Reached as host root: the unprivileged uid may not be able to look up the template's
	 * path, but the working directory follows into the new mount namespace. */
	add_path(p, SOP_CHDIR, root, 0, spawn_plan_str(p, "chdir %s", rootfs));
	jail_plan_userns(p, uid_base, resolv_conf);
	if (nvol) {
		op = spawn_plan_add(p, SOP_RECV_FD, "receive the volumes");
		op->fd = JAIL_FD_AGENT;
		op->arg = JAIL_FD_VOLUME;
		op->flags = nvol;
	}
	op = spawn_plan_add(p, SOP_UNSHARE, "unshare the mount, uts and ipc namespaces");
	op->arg = JAIL_USERNS_NS;

	op = spawn_plan_add(p, SOP_HOSTNAME, "sethostname");
	op->src = "sandbox";

	/* Private first: nothing mounted below may propagate back to the host's namespace. */
	add_mount(p, NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL, false, "make / private");
	/* The parent's read-only, idmapped, non-recursive clone of the template (its image, or
	 * its directory), over `rootfs`: whatever the host has mounted below the template stays
	 * out, and its root-owned files appear owned by root inside (by this sandbox's first
	 * host uid outside). Paths are relative to it from here to the pivot. */
	op = spawn_plan_add(p, SOP_MOVE_MOUNT, spawn_plan_str(p, "attach rootfs %s", rootfs));
	op->fd = JAIL_FD_ROOT;
	op->dst = ".";
	op = spawn_plan_add(p, SOP_CHDIR, "enter the rootfs");
	op->fd = JAIL_FD_ROOT;
	/* The sandbox's resolver: a read-only copy the parent made of the network module's file
	 * (jail_rootfs.c). The parent checked that the target is a plain file of the
	 * template's. It rides along with the rootfs through the pivot. */
	if (resolv_conf) {
		op = spawn_plan_add(p, SOP_MOVE_MOUNT, "attach resolv.conf on /etc/resolv.conf");
		op->fd = JAIL_FD_RESOLV;
		op->dst = "etc/resolv.conf";
	}
	/* Descriptor numbers past the volumes'. */
	struct scratch sc = { .tmp = !disk,
			      .fd_tmp = JAIL_FD_VOLUME + (int)nvol,
			      .fd_run = JAIL_FD_VOLUME + (int)nvol + 1,
			      .fd_dev = JAIL_FD_VOLUME + (int)nvol + 2 };
	add_scratch(p, &sc, workspace_bytes);
	/* pivot_root(".", ".") needs no directory for the old root, which a read-only rootfs
	 * could not provide; the old root is then stacked on "." and detached at once. */
	spawn_plan_add(p, SOP_PIVOT_ROOT, "pivot_root");
	op = spawn_plan_add(p, SOP_UMOUNT, "detach the old root");
	op->dst = ".";
	op->flags = MNT_DETACH;
	add_path(p, SOP_CHDIR, "/", 0, "chdir /");

	/* From here on, every path resolves inside the new root, so a symlink planted in the
	 * template cannot redirect a mount onto the host. */
	op = spawn_plan_add(p, SOP_MOVE_MOUNT, "attach proc on /proc");
	op->fd = JAIL_FD_PROC;
	op->dst = "/proc";
	add_dev_rest(p);
	op = spawn_plan_add(p, SOP_MOVE_MOUNT, "attach sysfs on /sys");
	op->fd = JAIL_FD_SYS;
	op->dst = "/sys";

	/* /workspace gets the sandbox's workspace limit, which `df` shows; /tmp has the same
	 * room in the scratch. The memory cgroup, which tmpfs pages are charged to, bounds the
	 * sum. The places commands write to belong to the command user. */
	const char *size = spawn_plan_str(p, "size=%llu", (unsigned long long)workspace_bytes);
	const char *owner = spawn_plan_str(p, "uid=%u,gid=%u", JAIL_COMMAND_UID, JAIL_COMMAND_UID);
	/* With a disk, both are directories of the overlay's upper layer (jail_disk.c). */
	if (!disk) {
		op = spawn_plan_add(p, SOP_MOVE_MOUNT, "attach the scratch's tmp on /tmp");
		op->fd = sc.fd_tmp;
		op->dst = "/tmp";
		add_mount(p, "tmpfs", "/workspace", "tmpfs", MS_NOSUID | MS_NODEV,
			  spawn_plan_str(p, "mode=0755,%s,%s", owner, size), false,
			  "mount tmpfs on /workspace");
	}
	/* Sockets and pid files, as in the VM drivers' guests. */
	op = spawn_plan_add(p, SOP_MOVE_MOUNT, "attach the scratch's run on /run");
	op->fd = sc.fd_run;
	op->dst = "/run";

	/* Volumes last, over the directories the parent made for them in the root (they cannot
	 * be below the mounts above: volume_path_check). */
	for (unsigned i = 0; i < nvol; i++) {
		op = spawn_plan_add(p, SOP_MOVE_MOUNT,
				    spawn_plan_str(p, "attach volume on %s", vols[i].path));
		op->fd = JAIL_FD_VOLUME + (int)i;
		op->dst = spawn_plan_str(p, "%s", vols[i].path);
	}
	/* The command user's home is the workspace, by a second name: E2B's code and most tools
	 * expect /home/user. Recursive, after the volumes: one mounted in the workspace is in
	 * the home too, read-only where it is. */
	if (home)
		add_mount(p, "/workspace", "/home/user", NULL, MS_BIND | MS_REC, NULL, false,
			  "mount the workspace on /home/user");

	add_masks(p);

	/* Everything from here on runs in the sandbox's cgroup, with it as the namespace root. */
	op = spawn_plan_add(p, SOP_WAIT_BYTE, "wait to be placed in the sandbox's cgroup");
	op->fd = JAIL_FD_AGENT;
	op = spawn_plan_add(p, SOP_UNSHARE, "unshare the cgroup namespace");
	op->arg = CLONE_NEWCGROUP;
	add_path(p, SOP_STDIO_NULL, "/dev/null", 0, "open /dev/null for stdin, stdout, stderr");
	/* A session of its own: no controlling terminal, and out of the daemon's process group,
	 * so that a ^C in the terminal the daemon runs in (make run) reaches the daemon alone,
	 * which ends its sessions with their grace. */
	spawn_plan_add(p, SOP_SETSID, "setsid");
	spawn_plan_add(p, SOP_CAPS, "drop capabilities");
	spawn_plan_add(p, SOP_NO_NEW_PRIVS, "prctl PR_SET_NO_NEW_PRIVS");
	add_path(p, SOP_UMASK, NULL, 022, "umask");
	spawn_plan_add(p, SOP_SECCOMP, "install the seccomp filter");
	op = spawn_plan_add(p, SOP_EXEC, "execute the agent");
	op->fd = JAIL_FD_EXE;
}
