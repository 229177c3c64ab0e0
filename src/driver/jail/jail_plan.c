/* jail_plan: the steps a jail's first process performs between clone() and the exec of the
 * agent, as a plan (util/spawn.h) that the parent builds and the child walks. */
#include "driver/jail/jail.h"

#include <stdio.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sched.h>

#include "util/cleanup.h"

/* Size of the tmpfs holding /dev: device nodes and symlinks only. */
#define DEV_TMPFS_OPTS "mode=755,size=65536"
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

static void add_node(struct spawn_plan *p, const char *name, unsigned major, unsigned minor)
{
	char *path = spawn_plan_str(p, "/dev/%s", name);
	char what[64];
	snprintf(what, sizeof(what), "mknod %s", path);
	struct spawn_op *op = spawn_plan_add(p, SOP_MKNOD, what);
	op->dst = path;
	op->arg = S_IFCHR | 0666;
	op->dev = makedev(major, minor);
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

static void add_masks(struct spawn_plan *p)
{
	char what[128];
	for (size_t i = 0; i < ARRAY_SIZE(masked_files); i++) {
		snprintf(what, sizeof(what), "mask %s", masked_files[i]);
		add_mount(p, "/dev/null", masked_files[i], NULL, MS_BIND, NULL, true, what);
	}
	for (size_t i = 0; i < ARRAY_SIZE(masked_dirs); i++) {
		snprintf(what, sizeof(what), "mask %s", masked_dirs[i]);
		add_mount(p, "tmpfs", masked_dirs[i], "tmpfs",
			  MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=0,mode=555", true,
			  what);
	}
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

void jail_plan_sandbox(struct spawn_plan *p, const char *rootfs, const char *resolv_conf,
		       uint64_t workspace_bytes, uint32_t nofile)
{
	const char *root = spawn_plan_str(p, "%s", rootfs);
	struct spawn_op *op;

	op = spawn_plan_add(p, SOP_HOSTNAME, "sethostname");
	op->src = "sandbox";

	/* Private first: nothing mounted below may propagate back to the host's namespace. */
	add_mount(p, NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL, false, "make / private");
	/* Not recursive: whatever the host has mounted below the template stays out. */
	add_mount(p, root, root, NULL, MS_BIND, NULL, false,
		  spawn_plan_str(p, "bind rootfs %s", rootfs));
	add_mount(p, NULL, root, NULL, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV,
		  NULL, false, "remount rootfs read-only");
	/* The sandbox's resolver, read-only (the file is the host's). Before the pivot, while the
	 * host's file is still in view: a bind mount's source must be in our mount namespace,
	 * which a descriptor opened by the parent is not. The parent checked that the target is
	 * a plain file of the template's. It rides along with the rootfs through the pivot. */
	if (resolv_conf) {
		const char *target = spawn_plan_str(p, "%s/etc/resolv.conf", rootfs);
		add_mount(p, resolv_conf, target, NULL, MS_BIND, NULL, false,
			  "bind resolv.conf on /etc/resolv.conf");
		add_mount(p, NULL, target, NULL,
			  MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL,
			  false, "remount /etc/resolv.conf read-only");
	}
	add_path(p, SOP_CHDIR, root, 0, spawn_plan_str(p, "chdir %s", rootfs));
	/* pivot_root(".", ".") needs no directory for the old root, which a read-only rootfs
	 * could not provide; the old root is then stacked on "." and detached at once. */
	spawn_plan_add(p, SOP_PIVOT_ROOT, "pivot_root");
	op = spawn_plan_add(p, SOP_UMOUNT, "detach the old root");
	op->dst = ".";
	op->flags = MNT_DETACH;
	add_path(p, SOP_CHDIR, "/", 0, "chdir /");

	/* From here on, every path resolves inside the new root, so a symlink planted in the
	 * template cannot redirect a mount onto the host. */
	add_mount(p, "proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL, false,
		  "mount proc on /proc");

	add_mount(p, "tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC | MS_STRICTATIME,
		  DEV_TMPFS_OPTS, false, "mount tmpfs on /dev");
	add_node(p, "null", 1, 3);
	add_node(p, "zero", 1, 5);
	add_node(p, "full", 1, 7);
	add_node(p, "random", 1, 8);
	add_node(p, "urandom", 1, 9);
	add_node(p, "tty", 5, 0);
	add_path(p, SOP_MKDIR, "/dev/pts", 0755, "mkdir /dev/pts");
	add_mount(p, "devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
		  "newinstance,ptmxmode=0666,mode=0620,gid=5", false, "mount devpts on /dev/pts");
	add_symlink(p, "pts/ptmx", "/dev/ptmx");
	add_path(p, SOP_MKDIR, "/dev/shm", 01777, "mkdir /dev/shm");
	add_mount(p, "shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
		  spawn_plan_str(p, "mode=1777,size=%llu", SHM_BYTES), false,
		  "mount tmpfs on /dev/shm");
	add_path(p, SOP_MKDIR, "/dev/mqueue", 0755, "mkdir /dev/mqueue");
	add_mount(p, "mqueue", "/dev/mqueue", "mqueue", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL,
		  false, "mount mqueue on /dev/mqueue");
	add_symlink(p, "/proc/self/fd", "/dev/fd");
	add_symlink(p, "/proc/self/fd/0", "/dev/stdin");
	add_symlink(p, "/proc/self/fd/1", "/dev/stdout");
	add_symlink(p, "/proc/self/fd/2", "/dev/stderr");

	add_mount(p, "sysfs", "/sys", "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL,
		  false, "mount sysfs on /sys");

	/* /tmp gets the workspace's bound: the memory cgroup, which tmpfs pages are charged to,
	 * bounds the sum of both. */
	const char *size = spawn_plan_str(p, "size=%llu", (unsigned long long)workspace_bytes);
	add_mount(p, "tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV,
		  spawn_plan_str(p, "mode=1777,%s", size), false, "mount tmpfs on /tmp");
	add_mount(p, "tmpfs", "/workspace", "tmpfs", MS_NOSUID | MS_NODEV,
		  spawn_plan_str(p, "mode=0755,%s", size), false, "mount tmpfs on /workspace");
	/* Sockets and pid files, as in the VM drivers' guests. */
	add_mount(p, "tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV,
		  spawn_plan_str(p, "mode=0755,size=%llu", RUN_BYTES), false,
		  "mount tmpfs on /run");

	add_masks(p);

	/* Everything from here on runs in the sandbox's cgroup, with it as the namespace root. */
	op = spawn_plan_add(p, SOP_WAIT_BYTE, "wait to be placed in the sandbox's cgroup");
	op->fd = JAIL_FD_AGENT;
	op = spawn_plan_add(p, SOP_UNSHARE, "unshare the cgroup namespace");
	op->arg = CLONE_NEWCGROUP;
	add_path(p, SOP_STDIO_NULL, "/dev/null", 0, "open /dev/null for stdin, stdout, stderr");
	op = spawn_plan_add(p, SOP_RLIMIT, "setrlimit RLIMIT_NOFILE");
	op->flags = RLIMIT_NOFILE;
	op->arg = nofile;
	spawn_plan_add(p, SOP_CAPS, "drop capabilities");
	spawn_plan_add(p, SOP_NO_NEW_PRIVS, "prctl PR_SET_NO_NEW_PRIVS");
	add_path(p, SOP_UMASK, NULL, 022, "umask");
	spawn_plan_add(p, SOP_SECCOMP, "install the seccomp filter");
	op = spawn_plan_add(p, SOP_EXEC, "execute the agent");
	op->fd = JAIL_FD_EXE;
}
