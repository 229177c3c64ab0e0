/* jail_userns: a sandbox's user namespace, both halves of its making.
 *
 * The kernel charges per-user budgets (inotify instances, POSIX message queue bytes, pipe
 * buffers, processes) to a user namespace's owner and, above it, to the uid each process runs
 * as on the host. So the namespace is created by the child after it has become the first uid
 * of its sandbox's range (not by root, whose budgets would then be shared by every sandbox
 * and the host), and the whole sandbox runs as uids of that range alone. The child cannot map
 * ids outside itself: the privileged parent writes the maps, which a process with CAP_SETUID
 * in the parent namespace may do for a child namespace.
 *
 * What needs host privilege happens before the switch: the procfs of a pid namespace that
 * belongs to the host's user namespace can only be mounted by host root, so the child makes
 * it as a detached mount first and attaches it once its own mount namespace exists. The
 * idmapped rootfs needs CAP_SYS_ADMIN over the template's filesystem: the parent makes it and
 * sends it over the agent's socket, and with it a clone of the one read-only sysfs every
 * sandbox shows (jail_blank_sysfs: that of an empty network namespace). A sysfs of each
 * sandbox's own namespace would be a superblock each, and the kernel looks for an existing one
 * through all of them at every mount: a cost in proportion to the sandboxes alive (14% of the
 * daemon's time creating the 4,001st to the 6,000th). */
#include "driver/jail/jail.h"

#include <errno.h>
#include <sched.h>
#include <pthread.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "util/cleanup.h"

/* How long the child may take to reach its user namespace. */
#define USERNS_TIMEOUT_MS 10000

void jail_plan_userns(struct spawn_plan *p, uint32_t uid_base, bool resolv_conf)
{
	struct spawn_op *op = spawn_plan_add(p, SOP_FSMOUNT, "make the sandbox's procfs");
	op->fstype = "proc";
	op->flags = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
	op->arg = JAIL_FD_PROC;
	jail_plan_net_sysctls(p);
	op = spawn_plan_add(p, SOP_SETID,
			    spawn_plan_str(p, "become host uid and gid %u", uid_base));
	op->arg = uid_base;
	op->flags = uid_base;
	op = spawn_plan_add(p, SOP_UNSHARE, "unshare the user namespace");
	op->arg = CLONE_NEWUSER;
	op = spawn_plan_add(p, SOP_SEND_BYTE, "report the user namespace");
	op->fd = JAIL_FD_AGENT;
	op = spawn_plan_add(p, SOP_RECV_FD, "receive the id maps and the rootfs");
	op->fd = JAIL_FD_AGENT;
	op->arg = JAIL_FD_ROOT;
	op->flags = resolv_conf ? 2 : 1;
	op = spawn_plan_add(p, SOP_RECV_FD, "receive the sysfs");
	op->fd = JAIL_FD_AGENT;
	op->arg = JAIL_FD_SYS;
	op->flags = 1;
}

/* Made on a thread of its own, which alone enters the new network namespace (unshare acts on
 * the calling thread): the namespace lives on as long as the sysfs that refers to it. */
static void *blank_sysfs_thread(void *arg)
{
	int *ret = arg;
	if (unshare(CLONE_NEWNET) < 0) {
		*ret = -errno;
		return NULL;
	}
	int fs = (int)syscall(SYS_fsopen, "sysfs", FSOPEN_CLOEXEC);
	if (fs < 0) {
		*ret = -errno;
		return NULL;
	}
	int m = -1;
	if (syscall(SYS_fsconfig, fs, FSCONFIG_CMD_CREATE, NULL, NULL, 0) == 0)
		m = (int)syscall(SYS_fsmount, fs, FSMOUNT_CLOEXEC,
				 MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV |
					 MOUNT_ATTR_NOEXEC);
	*ret = m < 0 ? -errno : m;
	close(fs);
	return NULL;
}

int jail_blank_sysfs(struct err *err)
{
	int r = -EIO;
	pthread_t t;
	int e = pthread_create(&t, NULL, blank_sysfs_thread, &r);
	if (e)
		return err_sys(err, e, "jail: a thread for the sandboxes' sysfs");
	pthread_join(t, NULL);
	if (r < 0)
		return err_sys(err, -r,
			       "jail: the sandboxes' sysfs (of an empty network namespace)");
	return jail_keep(r, err);
}

/* Waits for the child's byte on agent_fd; a failure reported meanwhile is the error. */
static int wait_child(const struct spawn_plan *plan, struct spawn_child *c, int agent_fd,
		      struct err *err)
{
	struct pollfd pfd[2] = {
		{ .fd = agent_fd, .events = POLLIN },
		{ .fd = c->report, .events = POLLIN },
	};
	int r;
	do
		r = poll(pfd, 2, USERNS_TIMEOUT_MS);
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return err_sys(err, errno, "%s: poll", plan->name);
	if (r == 0)
		return err_set(err, ETIMEDOUT,
			       "%s: the child took longer than %d ms to reach its "
			       "user namespace",
			       plan->name, USERNS_TIMEOUT_MS);
	char b;
	if ((pfd[0].revents & POLLIN) && recv(agent_fd, &b, 1, MSG_DONTWAIT) == 1)
		return 0;
	/* The child failed (or died) first: its report says why. */
	r = spawn_wait(plan, c, USERNS_TIMEOUT_MS, err);
	return r < 0 ? r : err_set(err, ECHILD, "%s: the child exited during setup", plan->name);
}

static int write_map(const struct spawn_plan *plan, pid_t pid, const char *file, uint32_t base,
		     struct err *err)
{
	char path[64], map[64];
	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	int len = snprintf(map, sizeof(map), "0 %u %u\n", base, JAIL_UID_RANGE);
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, map, (size_t)len) != len)
		return err_sys(err, errno, "%s: write %s", plan->name, file);
	return 0;
}

/* Filesystems by statfs's f_type (linux/magic.h; ZFS's is its own), with the Linux version
 * from which they take idmapped mounts (0: none known; the message then says only that this
 * kernel has none). */
static const struct {
	unsigned long magic;
	const char *name;
	unsigned major, minor;
} fs_kinds[] = {
	{ 0xEF53, "ext4", 5, 12 },         { 0x58465342, "xfs", 5, 12 },
	{ 0x4d44, "vfat", 5, 12 },         { 0x9123683E, "btrfs", 5, 15 },
	{ 0x01021994, "tmpfs", 6, 3 },     { 0x858458f6, "ramfs", 0, 0 },
	{ 0x794c7630, "overlayfs", 0, 0 }, { 0x65735546, "fuse", 0, 0 },
	{ 0x6969, "nfs", 0, 0 },           { 0x2fc12fc1, "zfs", 0, 0 },
	{ 0xFF534D42, "cifs", 0, 0 },      { 0xFE534D42, "smb2", 0, 0 },
	{ 0x01021997, "9p", 0, 0 },        { 0x73717368, "squashfs", 0, 0 },
};

/* Why the filesystem of `fd` refused an idmapped mount, for a message: its type and the Linux
 * version that brought its support, or that it has none, with this kernel's release. */
static void idmap_why(int fd, char *buf, size_t len)
{
	struct utsname u;
	const char *release = uname(&u) == 0 ? u.release : "?";
	struct statfs st;
	if (fstatfs(fd, &st) < 0) {
		snprintf(buf, len, "its filesystem has no idmapped mounts on this kernel (%s)",
			 release);
		return;
	}
	for (size_t i = 0; i < ARRAY_SIZE(fs_kinds); i++) {
		if ((unsigned long)st.f_type != fs_kinds[i].magic)
			continue;
		unsigned major = 0, minor = 0;
		sscanf(release, "%u.%u", &major, &minor);
		bool older = major < fs_kinds[i].major ||
			     (major == fs_kinds[i].major && minor < fs_kinds[i].minor);
		if (fs_kinds[i].major && older)
			snprintf(buf, len,
				 "%s has idmapped mounts since Linux %u.%u, and this kernel is %s",
				 fs_kinds[i].name, fs_kinds[i].major, fs_kinds[i].minor, release);
		else
			snprintf(buf, len, "%s has no idmapped mounts on this kernel (%s)",
				 fs_kinds[i].name, release);
		return;
	}
	snprintf(buf, len,
		 "its filesystem (statfs type %#lx) has no idmapped mounts on this kernel (%s)",
		 (unsigned long)st.f_type, release);
}

/* Makes the clone `fd` read-only, nosuid, nodev and private, idmapped to the namespace unless
 * userns is -1 (then noexec too). 0, or a negative errno. */
static int set_attrs(int fd, int userns)
{
	/* Private: a clone of a shared mount (a template's directory on a host whose init is
	 * systemd, which makes every mount shared) would join its peer group, and the mounts
	 * the sandbox makes on it would propagate to the host, the host's to the sandbox. */
	struct mount_attr attr = {
		.attr_set = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
		.propagation = MS_PRIVATE,
	};
	if (userns >= 0) {
		attr.attr_set |= MOUNT_ATTR_IDMAP;
		attr.userns_fd = (uint64_t)userns;
	} else {
		attr.attr_set |= MOUNT_ATTR_NOEXEC;
	}
	if (syscall(SYS_mount_setattr, fd, "", AT_EMPTY_PATH, &attr, sizeof(attr)) < 0)
		return -errno;
	return 0;
}

/* The message of an idmapped mount of `path` (the clone fd) that failed with -e: a filesystem
 * without them (EINVAL: can_idmap_mount) and a kernel without mount_setattr said by name. */
static int idmap_error(const struct spawn_plan *plan, int fd, const char *path, int e,
		       struct err *err)
{
	char why[200];
	if (e == -EINVAL) {
		idmap_why(fd, why, sizeof(why));
		return err_set(err, EINVAL, "%s: idmapped mount of `%s`: %s", plan->name, path,
			       why);
	}
	if (e == -ENOSYS)
		return err_set(err, ENOSYS,
			       "%s: idmapped mount of `%s`: this kernel has no mount_setattr "
			       "(Linux 5.12)",
			       plan->name, path);
	return err_sys(err, -e, "%s: idmapped mount of `%s`", plan->name, path);
}

/* A read-only, nosuid, nodev clone of `path` below dfd (dfd itself for ""), not recursive,
 * idmapped to the namespace unless userns is -1. */
static int detached_tree(const struct spawn_plan *plan, int dfd, const char *path, int userns,
			 struct err *err)
{
	_cleanup_close_ int fd = jail_keep_clone(dfd, path, 0);
	if (fd < 0)
		return err_sys(err, -fd, "%s: open_tree `%s`", plan->name, path);
	int e = set_attrs(fd, userns);
	if (e < 0)
		return userns >= 0
			       ? idmap_error(plan, fd, path, e, err)
			       : err_sys(err, -e, "%s: read-only mount of `%s`", plan->name, path);
	return TAKE_FD(fd);
}

int jail_idmap_probe(const struct spawn_plan *plan, int userns, const char *path, struct err *err)
{
	_cleanup_close_ int fd = jail_keep_clone(AT_FDCWD, path, 0);
	if (fd < 0)
		return err_sys(err, -fd, "%s: open_tree `%s`", plan->name, path);
	int e = set_attrs(fd, userns);
	if (e == 0)
		return 0;
	int r = idmap_error(plan, fd, path, e, err);
	return e == -EINVAL ? 1 : r;
}

static int send_fds(const struct spawn_plan *plan, int sock, const int *fds, unsigned n,
		    struct err *err)
{
	char b = 1;
	struct iovec iov = { .iov_base = &b, .iov_len = 1 };
	union {
		char buf[CMSG_SPACE(SANDBOX_VOLUMES_MAX * sizeof(int))];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof(u));
	struct msghdr mh = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = u.buf,
		.msg_controllen = CMSG_SPACE(n * sizeof(int)),
	};
	struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(n * sizeof(int));
	memcpy(CMSG_DATA(cm), fds, n * sizeof(int));
	if (sendmsg(sock, &mh, MSG_NOSIGNAL) != 1)
		return err_sys(err, errno, "%s: send the rootfs", plan->name);
	return 0;
}

int jail_userns_enter(const struct spawn_plan *plan, struct spawn_child *c, int agent_fd,
		      uint32_t uid_base, struct err *err)
{
	int r;
	if ((r = wait_child(plan, c, agent_fd, err)) < 0 ||
	    (r = write_map(plan, c->pid, "uid_map", uid_base, err)) < 0 ||
	    (r = write_map(plan, c->pid, "gid_map", uid_base, err)) < 0)
		return r;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/ns/user", (int)c->pid);
	int userns = open(path, O_RDONLY | O_CLOEXEC);
	if (userns < 0)
		return err_sys(err, errno, "%s: open %s", plan->name, path);
	return userns;
}

int jail_userns_send(const struct spawn_plan *plan, int agent_fd, int userns, uint32_t uid_base,
		     int sysfs, int root_dfd, const char *root_path, int resolv_dfd,
		     const char *resolv, const struct jail_disk *disk,
		     const struct sandbox_volume *vols, const int *vol_mnt, unsigned nvol,
		     struct err *err)
{
	if (nvol > SANDBOX_VOLUMES_MAX || (nvol && (!disk || disk->mnt < 0)))
		return err_set(err, EINVAL, "%s: volumes need a disk", plan->name);
	int r = 0;
	_cleanup_close_ int tree = detached_tree(plan, root_dfd, root_path, userns, err);
	if (tree < 0)
		return tree;
	if (disk && disk->mnt >= 0) {
		int ovl = jail_disk_overlay(disk, tree, err);
		if (ovl < 0)
			return ovl;
		close(tree);
		tree = ovl;
	}
	_cleanup_close_ int file = -1;
	if (resolv && (file = detached_tree(plan, resolv_dfd, resolv, -1, err)) < 0)
		return file;
	int vfd[SANDBOX_VOLUMES_MAX];
	unsigned made = 0;
	for (; made < nvol; made++) {
		if ((r = jail_volume_mountpoint(tree, vols[made].path, uid_base, err)) < 0)
			break;
		vfd[made] = jail_volume_clone(vol_mnt[made], userns, vols[made].read_only, err);
		if ((r = vfd[made]) < 0)
			break;
	}
	const int fds[2] = { tree, file };
	if (r >= 0)
		r = send_fds(plan, agent_fd, fds, resolv ? 2 : 1, err);
	if (r >= 0) {
		_cleanup_close_ int sys = jail_keep_clone(sysfs, "", 0);
		r = sys < 0 ? err_sys(err, -sys, "%s: clone the sysfs", plan->name)
			    : send_fds(plan, agent_fd, &sys, 1, err);
	}
	if (r >= 0 && nvol)
		r = send_fds(plan, agent_fd, vfd, nvol, err);
	for (unsigned i = 0; i < made; i++)
		close(vfd[i]);
	return r < 0 ? r : 0;
}

int jail_userns_map(const struct spawn_plan *plan, struct spawn_child *c, int agent_fd,
		    uint32_t uid_base, int sysfs, int root_dfd, const char *root_path,
		    int resolv_dfd, const char *resolv, const struct jail_disk *disk,
		    const struct sandbox_volume *vols, const int *vol_mnt, unsigned nvol,
		    struct err *err)
{
	if (nvol > SANDBOX_VOLUMES_MAX || (nvol && (!disk || disk->mnt < 0)))
		return err_set(err, EINVAL, "%s: volumes need a disk", plan->name);
	_cleanup_close_ int userns = jail_userns_enter(plan, c, agent_fd, uid_base, err);
	if (userns < 0)
		return userns;
	return jail_userns_send(plan, agent_fd, userns, uid_base, sysfs, root_dfd, root_path,
				resolv_dfd, resolv, disk, vols, vol_mnt, nvol, err);
}
