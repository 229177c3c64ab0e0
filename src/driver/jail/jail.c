/* jail: the container-grade driver. Each sandbox is a process tree in new pid, mount, uts, ipc,
 * net and cgroup namespaces, with the template's rootfs as its root: under a writable overlay on
 * a disk of its own that also holds /workspace and /tmp (jail_disk.c), or read-only with tmpfs
 * /workspace and /tmp (SANDBOX_STORAGE=tmpfs), a minimal /dev, masked /proc, reduced
 * capabilities, no_new_privs, a seccomp filter, and a cgroup of its own. The agent is its PID 1
 * and talks over a socketpair.
 *
 * The child is set up by a plan of raw system calls prepared in the parent (see jail.h for
 * why). Nothing named is created on the host's filesystem except the cgroup directories: the
 * mounts live and die with the sandbox's mount namespace, the disk image has no name. */
#include "driver/driver.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/capability.h>
#include <unistd.h>

#include "driver/cgroup.h"
#include "driver/jail/jail.h"
#include "driver/proc.h"
#include "util/cleanup.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/random.h"

#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif

/* How long the child may take from clone to exec before create() gives up on it. */
#define SETUP_TIMEOUT_MS 10000
/* When neither the sandbox's limits nor the configuration give one. */
#define DEFAULT_WORKSPACE_BYTES (512ULL << 20)
#define DEFAULT_NOFILE          1024
/* Each end's send buffer on the socket between the daemon and the agent, as asked: the
 * kernel doubles it (for its own overhead), so each end holds up to 512 KiB. */
#define JAIL_SOCKET_BUFFER (256 << 10)

/* The directories the template's rootfs must have for the sandbox's mounts. */
static const char *const mountpoints[] = { "proc", "dev", "sys", "tmp", "run", "workspace" };

static char *const agent_env[] = {
	"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	"HOME=/root",
	NULL,
};
#define STR_(x) #x
#define STR(x)  STR_(x)
/* Commands run as JAIL_COMMAND_UID (see agent/op_exec.c for why). */
static char *const agent_argv[] = {
	"sandbox-agent",
	"--fd",
	"3",
	"--workspace",
	"/workspace",
	"--user",
	STR(JAIL_COMMAND_UID) ":" STR(JAIL_COMMAND_UID),
	NULL,
};

/* The per-driver state of a sandbox (sandbox->priv). */
struct jail {
	struct cgroup *cg;
	uint32_t uid_base;                  /* the host uid range of its user namespace */
	struct jail_disk disk;              /* mnt -1: none (SANDBOX_STORAGE=tmpfs) */
	char *volumes[SANDBOX_VOLUMES_MAX]; /* images it holds open (jail_volume_open) */
	unsigned nvolumes;
};

static void close_volumes(char **images, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		jail_volume_close(images[i]);
		free(images[i]);
		images[i] = NULL;
	}
}

/* Opens the spec's volumes: their mounts in mnt, their images (copied) in images. */
static int open_volumes(const struct sandbox_spec *spec, int *mnt, char **images, struct err *err)
{
	if (spec->nvolumes > SANDBOX_VOLUMES_MAX)
		return err_set(err, EINVAL, "jail: at most %d volumes", SANDBOX_VOLUMES_MAX);
	if (spec->nvolumes && !spec->limits.disk)
		return err_set(err, EINVAL, "volumes need disk storage");
	for (unsigned i = 0; i < spec->nvolumes; i++) {
		int r = jail_volume_open(spec->volumes[i].image, &mnt[i], err);
		if (r < 0) {
			close_volumes(images, i);
			return r;
		}
		images[i] = xstrdup(spec->volumes[i].image);
	}
	return 0;
}

/* What every sandbox shares, computed once: the cgroup layout and the compiled filter. */
static struct {
	pthread_mutex_t lock;
	bool ready;
	struct cgroup_root cg;
	struct sock_fprog seccomp;
	unsigned cap_last;
	int sysfs;         /* jail_blank_sysfs */
	bool force_keeper; /* SANDBOX_KERNEL_FALLBACKS=mount-clone */
	/* The trial's finding: the templates' filesystem takes no idmapped mounts (said at
	 * start), or "". */
	char idmap_warning[ERR_MSG_MAX + 128];
} host = { .lock = PTHREAD_MUTEX_INITIALIZER, .sysfs = -1 };

const char *jail_idmap_warning(void)
{
	return host.idmap_warning;
}

static unsigned read_cap_last(void)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/sys/kernel/cap_last_cap", "re");
	unsigned v;
	if (f && fscanf(f, "%u", &v) == 1 && v < 64)
		return v;
	return CAP_LAST_CAP;
}

/* What every sandbox shares: the cgroup hierarchy, the seccomp filter, the capabilities the
 * kernel knows. Called with host.lock held. */
static int host_setup(struct err *err)
{
	_cleanup_(cgroup_root_free) struct cgroup_root cg = { 0 };
	int r;
	if ((r = cgroup_root_detect(CGROUP_ROOT, &cg, err)) < 0 ||
	    (r = jail_seccomp_build(&host.seccomp, err)) < 0 ||
	    (r = jail_keep_init(host.force_keeper, err)) < 0)
		return r;
	if (host.sysfs < 0 && (host.sysfs = jail_blank_sysfs(err)) < 0)
		return host.sysfs;
	host.cg = TAKE_STRUCT(cg);
	host.cap_last = read_cap_last();
	host.ready = true;
	return 0;
}

/* SANDBOX_KERNEL_FALLBACKS: which of the features with a fallback to treat as missing. */
static int fallbacks_parse(const char *list, struct err *err)
{
	_cleanup_free_ char *copy = xstrdup(list ? list : "");
	char *save = NULL;
	for (char *w = strtok_r(copy, ", ", &save); w; w = strtok_r(NULL, ", ", &save)) {
		if (strcmp(w, "mount-clone") == 0)
			continue;
		return err_set(err, EINVAL,
			       "SANDBOX_KERNEL_FALLBACKS: `%.64s` is not a kernel feature with a "
			       "fallback (known: mount-clone)",
			       w);
	}
	host.force_keeper = list && strstr(list, "mount-clone");
	return 0;
}

static int host_get(struct err *err)
{
	pthread_mutex_lock(&host.lock);
	int r = host.ready ? 0 : host_setup(err);
	pthread_mutex_unlock(&host.lock);
	return r;
}

static int check_agent(const struct config *cfg, struct err *err)
{
	const char *bin = cfg->agent_bin;
	if (!bin || !*bin)
		return err_set(err, EINVAL, "jail: no agent binary: set SANDBOX_AGENT_BIN");
	struct stat st;
	if (stat(bin, &st) < 0)
		return err_sys(err, errno, "jail: agent binary `%s`", bin);
	if (!S_ISREG(st.st_mode))
		return err_set(err, EINVAL, "jail: agent binary `%s` is not a regular file", bin);
	if (access(bin, X_OK) < 0)
		return err_sys(err, errno, "jail: agent binary `%s` is not executable", bin);
	return 0;
}

/* Where a sandbox's / is cloned from, and the host directory it is attached over before
 * the pivot (any directory would do; this one the child reaches as host root). */
struct root_src {
	int dfd;          /* the image's kept mount (owned: a duplicate), or AT_FDCWD */
	const char *path; /* below dfd: "" for the image, else the rootfs directory */
	char *attach;     /* owned */
};

static void root_src_fini(struct root_src *r)
{
	if (r->dfd >= 0)
		close(r->dfd);
	free(r->attach);
}

/* The image must have every mount point as a directory: it cannot be changed. */
static bool image_usable(int mnt)
{
	for (size_t i = 0; i < ARRAY_SIZE(mountpoints); i++) {
		struct stat st;
		if (fstatat(mnt, mountpoints[i], &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISDIR(st.st_mode))
			return false;
	}
	return true;
}

static int check_rootfs(const char *rootfs, struct err *err);

/* The template's rootfs.ext4 when it has one that can be used (see jail_rootfs.c for why),
 * else its rootfs directory. */
static int choose_root(const struct template *t, struct root_src *ret, struct err *err)
{
	int mnt = -1;
	struct err why;
	if (t->rootfs_img && jail_rootfs_image(t->rootfs_img, &mnt, &why) == 0 &&
	    !image_usable(mnt)) {
		close(mnt);
		mnt = -1;
		err_set(&why, ENOTDIR, "a mount point of the jail is not a directory in it");
	}
	if (mnt >= 0) {
		ret->dfd = mnt;
		ret->path = "";
		ret->attach = t->rootfs_dir ? xstrdup(t->rootfs_dir) : xstrdup(t->rootfs_img);
		if (!t->rootfs_dir)
			*strrchr(ret->attach, '/') = '\0';
		return 0;
	}
	if (t->rootfs_img && mnt < 0)
		log_debug("jail", "template %s: image not used: %s", t->name, why.msg);
	if (!t->rootfs_dir)
		return err_set(err, ENOENT,
			       "jail: template `%s` has no rootfs directory or usable image: build "
			       "it for the jail driver",
			       t->name);
	int r = check_rootfs(t->rootfs_dir, err);
	if (r < 0)
		return r;
	ret->dfd = AT_FDCWD;
	ret->path = t->rootfs_dir;
	ret->attach = xstrdup(t->rootfs_dir);
	return 0;
}

/* Makes the directories the sandbox mounts onto when the template lacks them, and refuses
 * anything else in their place: a symlink there would aim a mount elsewhere. */
static int check_rootfs(const char *rootfs, struct err *err)
{
	_cleanup_close_ int dfd = open(rootfs, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return err_sys(err, errno, "jail: template rootfs `%s`", rootfs);
	struct stat st, root;
	if (fstat(dfd, &st) < 0 || stat("/", &root) < 0)
		return err_sys(err, errno, "jail: stat `%s`", rootfs);
	if (st.st_dev == root.st_dev && st.st_ino == root.st_ino)
		return err_set(err, EINVAL, "jail: template rootfs `%s` is the host's root",
			       rootfs);

	for (size_t i = 0; i < ARRAY_SIZE(mountpoints); i++) {
		const char *m = mountpoints[i];
		if (fstatat(dfd, m, &st, AT_SYMLINK_NOFOLLOW) == 0) {
			if (S_ISDIR(st.st_mode))
				continue;
			return err_set(err, ENOTDIR,
				       "jail: template rootfs `%s`: /%s must be a directory",
				       rootfs, m);
		}
		if (errno != ENOENT)
			return err_sys(err, errno, "jail: template rootfs `%s`: /%s", rootfs, m);
		if (mkdirat(dfd, m, 0755) < 0 && errno != EEXIST)
			return err_sys(
				err, errno,
				"jail: template rootfs `%s` has no /%s and it cannot be made",
				rootfs, m);
	}
	return 0;
}

/* Places the child in its cgroup unless clone3 already did, then lets it go on. */
static int place_child(const struct spawn_plan *plan, const struct cgroup *cg,
		       struct spawn_child *c, int agent_fd, struct err *err)
{
	int r = c->placed ? 0 : cgroup_enter(cg, c->pid, err);
	if (r == 0) {
		/* The go-ahead travels on the agent's socket, read by the child before exec:
		 * the agent never sees it. */
		static const char go = 1;
		if (send(agent_fd, &go, 1, MSG_NOSIGNAL) == 1)
			return 0;
		r = err_sys(err, errno, "jail: start the sandbox");
	}
	/* The child may have failed on its own first: its reason is the one to give. */
	return spawn_abort(plan, c, r, err);
}

/* The steps of the trial run: the kernel features the jail relies on, then an exit. */
static void trial_plan(struct spawn_plan *plan, uint32_t uid_base)
{
	plan->seccomp = &host.seccomp;
	spawn_plan_add(plan, SOP_SIGNALS, "reset signals");
	jail_plan_userns(plan, uid_base, false);
	struct spawn_op *op = spawn_plan_add(plan, SOP_UNSHARE, "unshare the namespaces");
	op->arg = JAIL_USERNS_NS | CLONE_NEWCGROUP;
	op = spawn_plan_add(plan, SOP_MOUNT, "make / private");
	op->dst = "/";
	op->flags = MS_REC | MS_PRIVATE;
	op = spawn_plan_add(plan, SOP_MOUNT, "mount tmpfs on /tmp");
	op->src = "tmpfs";
	op->dst = "/tmp";
	op->fstype = "tmpfs";
	op->data = "size=65536";
	op = spawn_plan_add(plan, SOP_CHDIR, "chdir /tmp");
	op->dst = "/tmp";
	spawn_plan_add(plan, SOP_PIVOT_ROOT, "pivot_root");
	op = spawn_plan_add(plan, SOP_UMOUNT, "detach the old root");
	op->dst = ".";
	op->flags = MNT_DETACH;
	op = spawn_plan_add(plan, SOP_MKDIR, "mkdir /proc");
	op->dst = "/proc";
	op->arg = 0755;
	op = spawn_plan_add(plan, SOP_MOVE_MOUNT, "attach proc on /proc");
	op->fd = JAIL_FD_PROC;
	op->dst = "/proc";
	spawn_plan_add(plan, SOP_NO_NEW_PRIVS, "prctl PR_SET_NO_NEW_PRIVS");
	spawn_plan_add(plan, SOP_SECCOMP, "install the seccomp filter");
	spawn_plan_add(plan, SOP_EXIT, "exit");
}

/* The templates' directory, or the nearest directory above it that exists (none is built
 * yet): where templates kept as a directory are, on the filesystem they will be on. */
static char *templates_dir(const struct config *cfg)
{
	char *dir = xasprintf("%s/templates", cfg->artifacts_dir ? cfg->artifacts_dir : "");
	for (;;) {
		struct stat st;
		if (*dir && stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
			return dir;
		char *slash = strrchr(dir, '/');
		if (!slash || slash == dir) {
			free(dir);
			return xstrdup(slash ? "/" : ".");
		}
		*slash = '\0';
	}
}

/* The one filesystem the jail idmaps that is not its own: the templates' (a template kept as
 * a directory, with no usable image, is idmapped there). Templates' images and volumes are
 * ext4 filesystems the daemon mounts itself (from 5.12, as mount_setattr); disks are not
 * idmapped, and resolv.conf is not either. Without support there, the templates' images
 * stand in: a warning, not a refusal. Any other failure (a kernel without mount_setattr) is
 * the trial's. */
static int probe_templates(const struct spawn_plan *plan, int userns, const char *dir,
			   struct err *err)
{
	host.idmap_warning[0] = '\0';
	struct err why;
	int r = jail_idmap_probe(plan, userns, dir, &why);
	if (r < 0)
		return err_copy(err, &why);
	if (r > 0)
		snprintf(host.idmap_warning, sizeof(host.idmap_warning),
			 "templates are used through their image (rootfs.ext4) alone, and one "
			 "without a usable image fails at its sessions' creation: %s",
			 why.msg + (strncmp(why.msg, "jail: ", 6) == 0 ? 6 : 0));
	return 0;
}

/* Runs the trial child to its end: through its user namespace's maps, then its verdict. */
static int trial_child(struct spawn_plan *plan, uint32_t uid_base, const char *templates,
		       struct err *err)
{
	_cleanup_close_pair_ int sv[2] = { -1, -1 };
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return err_sys(err, errno, "jail: socketpair");
	spawn_plan_fd(plan, sv[1], JAIL_FD_AGENT, false);
	trial_plan(plan, uid_base);
	struct spawn_child c;
	int r = spawn_start(plan, JAIL_CLONE_NS | CLONE_NEWNET, -1, &c, err);
	if (r < 0)
		return r;
	/* The idmap is tried on the templates' filesystem; the child gets a clone of / without
	 * one, which it does not attach. */
	_cleanup_close_ int userns = jail_userns_enter(plan, &c, sv[0], uid_base, err);
	r = userns < 0 ? userns : probe_templates(plan, userns, templates, err);
	if (r == 0)
		r = jail_userns_send(plan, sv[0], -1, uid_base, host.sysfs, AT_FDCWD, "/", -1, NULL,
				     NULL, NULL, NULL, 0, err);
	if (r == 0)
		r = spawn_wait(plan, &c, SETUP_TIMEOUT_MS, err);
	if (r < 0)
		spawn_kill(c.pid, c.pidfd);
	int status = spawn_reap(c.pid, c.pidfd);
	if (r == 0 && status != 0)
		r = err_set(err, ECHILD, "jail: the trial sandbox exited with status %#x", status);
	spawn_child_close(&c);
	return r;
}

/* A throwaway child that exercises every kernel feature the jail relies on: the namespaces
 * (a user namespace made as an unprivileged uid, mapped from outside), an idmapped mount of
 * the templates' filesystem, a private mount tree, pivot_root, a procfs made before the switch
 * and the seccomp filter. */
static int trial_run(const struct config *cfg, struct err *err)
{
	uint32_t uid_base;
	int r = jail_uid_alloc(&uid_base, err);
	if (r < 0)
		return r;
	_cleanup_free_ char *templates = templates_dir(cfg);
	struct spawn_plan plan;
	spawn_plan_init(&plan, "jail");
	r = trial_child(&plan, uid_base, templates, err);
	spawn_plan_free(&plan);
	jail_uid_release(uid_base);
	if (r < 0 && err) {
		/* "jail: pivot_root: ..." becomes "jail: trial sandbox: pivot_root: ...". */
		char why[ERR_MSG_MAX];
		bool ours = strncmp(err->msg, "jail: ", 6) == 0;
		snprintf(why, sizeof(why), "%s", err->msg + (ours ? 6 : 0));
		return err_set(err, err->errnum, "jail: trial sandbox: %s", why);
	}
	return r;
}

/* Host policies that forbid what the jail does: each sandbox's first process makes its user
 * namespace as an unprivileged uid of its range. Said by name, with the fix, rather than as
 * the trial's EPERM. */
static int check_userns_policy(struct err *err)
{
	char v[64];
	fs_read_line("/proc/sys/user/max_user_namespaces", v, sizeof(v));
	if (strcmp(v, "0") == 0)
		return err_set(err, EPERM,
			       "jail: user namespaces are disabled (user.max_user_namespaces = 0): "
			       "set it to a number above SANDBOX_MAX_SESSIONS (sysctl -w "
			       "user.max_user_namespaces=65536)");
	/* Debian's and older Ubuntu's switch for unprivileged user namespaces. */
	fs_read_line("/proc/sys/kernel/unprivileged_userns_clone", v, sizeof(v));
	if (strcmp(v, "0") == 0)
		return err_set(err, EPERM,
			       "jail: unprivileged user namespaces are disabled "
			       "(kernel.unprivileged_userns_clone = 0), and each sandbox makes its "
			       "own as an unprivileged uid: sysctl -w "
			       "kernel.unprivileged_userns_clone=1");
	/* Ubuntu 23.10 and later: only processes whose AppArmor profile allows it. */
	fs_read_line("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", v, sizeof(v));
	if (strcmp(v, "1") == 0) {
		char label[256];
		fs_read_line("/proc/self/attr/current", label, sizeof(label));
		if (strncmp(label, "unconfined", 10) == 0)
			return err_set(
				err, EPERM,
				"jail: AppArmor restricts unprivileged user namespaces "
				"(kernel.apparmor_restrict_unprivileged_userns = 1) and sandboxd "
				"runs unconfined: it needs the profile /etc/apparmor.d/sandboxd, "
				"which the package installs and loads where AppArmor 4 accepts it "
				"(apt's log says why it did not; docs/hosts.md), or sysctl -w "
				"kernel.apparmor_restrict_unprivileged_userns=0");
	}
	return 0;
}

static int jail_probe(const struct config *cfg, struct err *err)
{
	int r;
	if (geteuid() != 0)
		return err_set(err, EPERM,
			       "jail: sandboxd must run as root to create namespaces and cgroups");
	if ((r = check_agent(cfg, err)) < 0 ||
	    (r = fallbacks_parse(cfg->kernel_fallbacks, err)) < 0 ||
	    (r = check_userns_policy(err)) < 0)
		return r;
	if ((r = host_get(err)) < 0)
		return r;
	if ((r = cgroup_check(&host.cg, err)) < 0 || (r = jail_uid_setup(cfg, err)) < 0)
		return r;
	return trial_run(cfg, err);
}

/* SANDBOX_STATE_DIR, where hibernated sandboxes' disks are kept (set by jail_init). */
static const char *state_dir;

/* Where a hibernated sandbox's disk is kept: named by its id alone (checked), never by a
 * path read back from anywhere. */
static char *kept_disk_path(const char *id)
{
	return xasprintf("%s/disks/%s.hibernated", state_dir ? state_dir : ".", id);
}

/* The name of a running sandbox's disk that was kept once (jail_disk.path). */
/* The marker of a disk frozen for a save (jail_disk_save). */
static char *frozen_marker_path(const char *id)
{
	return xasprintf("%s/disks/%s.frozen", state_dir ? state_dir : ".", id);
}

static char *live_disk_path(const char *id)
{
	return xasprintf("%s/disks/%s.disk", state_dir ? state_dir : ".", id);
}

/* Where a fork's save (a copy of the disk) is kept: named by the save's name alone. */
static char *saved_disk_path(const char *name)
{
	return xasprintf("%s/disks/%s.saved", state_dir ? state_dir : ".", name);
}

/* The id and uid range a hibernated sandbox keeps, from its record (hibernate()'s), and
 * whether it is a fork's save (fork_save()'s: the range is the one its files carry, still
 * the forked sandbox's or no one's, never taken for the save). */
static int kept_of(const json_t *keep, const char **ret_id, uint32_t *ret_base, bool *ret_fork,
		   struct err *err)
{
	const char *id = json_string_value(json_object_get(keep, "sandbox"));
	json_t *base = json_object_get(keep, "uidBase");
	if (!id || !cgroup_id_valid(id) || !json_is_integer(base) ||
	    json_integer_value(base) <= 0 || json_integer_value(base) > UINT32_MAX)
		return err_set(err, EINVAL, "jail: not a hibernated sandbox's record");
	*ret_id = id;
	*ret_base = (uint32_t)json_integer_value(base);
	*ret_fork = json_is_true(json_object_get(keep, "fork"));
	return 0;
}

static int jail_init(const struct config *cfg, struct err *err)
{
	int r;
	state_dir = cfg->state_dir;
	if ((r = fallbacks_parse(cfg->kernel_fallbacks, err)) < 0 || (r = host_get(err)) < 0 ||
	    (r = jail_uid_setup(cfg, err)) < 0)
		return r;
	_cleanup_free_ char *cg = cgroup_root_describe(&host.cg);
	log_info("jail", "cgroups %s", cg);
	if (host.idmap_warning[0])
		log_warn("jail", "%s", host.idmap_warning);
	log_info("jail", "detached mounts are cloned %s",
		 jail_keep_mode() == JAIL_KEEP_DIRECT
			 ? "directly (open_tree of a detached mount: Linux 6.15)"
			 : "in the mount keeper's namespace (the fallback before Linux 6.15)");
	/* Said at start rather than by every session's creation. */
	_cleanup_free_ char *mkfs = spawn_find_binary("mkfs.ext4");
	if (!mkfs && (!cfg->storage || strcmp(cfg->storage, "disk") == 0))
		return err_set(err, ENOENT,
			       "jail: SANDBOX_STORAGE=disk needs mkfs.ext4 (e2fsprogs); install it "
			       "or set SANDBOX_STORAGE=tmpfs");
	return cgroup_init(&host.cg, err);
}

static json_t *make_record(pid_t pid, const struct cgroup *cg, uint32_t uid_base)
{
	json_t *dirs = json_array();
	for (unsigned i = 0; i < cg->n; i++)
		json_array_append_new(dirs, json_string(cg->dir[i]));
	json_t *record = json_pack("{s:o, s:I}", "cgroups", dirs, "uidBase", (json_int_t)uid_base);
	proc_record_add(record, pid);
	return record;
}

/* The resolver of the sandbox's network, when the network module made one, to mount on the
 * template's /etc/resolv.conf when that is a plain file to mount on (the builder makes one;
 * without it, names do not resolve in this sandbox). False: none. */
static bool wants_resolv_conf(const struct sandbox_spec *spec, const struct root_src *root)
{
	if (!spec->netns_path || !spec->resolv_conf)
		return false;
	_cleanup_free_ char *target = *root->path ? xasprintf("%s/etc/resolv.conf", root->path)
						  : xstrdup("etc/resolv.conf");
	struct stat st, src;
	return stat(spec->resolv_conf, &src) == 0 && S_ISREG(src.st_mode) &&
	       fstatat(root->dfd, target, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode);
}

/* Whether the template has /home/user as a plain directory (and /home too) for the
 * workspace's second mount: templates built before it do not, and their sandboxes have the
 * workspace at /workspace only. */
static bool has_home(const struct root_src *root)
{
	static const char *const dirs[] = { "home", "home/user" };
	for (size_t i = 0; i < ARRAY_SIZE(dirs); i++) {
		_cleanup_free_ char *path =
			*root->path ? xasprintf("%s/%s", root->path, dirs[i]) : xstrdup(dirs[i]);
		struct stat st;
		if (fstatat(root->dfd, path, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
			return false;
	}
	return true;
}

/* The plan of the sandbox's first process: its descriptors, its network, then the steps
 * that make it the sandbox and exec the agent. */
static void sandbox_plan(struct spawn_plan *plan, const struct config *cfg,
			 const struct sandbox_spec *spec, int agent, int exe, int netns,
			 uint32_t uid_base, const char *attach, bool resolv, bool home)
{
	spawn_plan_fd(plan, agent, JAIL_FD_AGENT, true);
	spawn_plan_fd(plan, exe, JAIL_FD_EXE, false);
	spawn_plan_fd(plan, netns, JAIL_FD_NETNS, false);
	plan->report_to = JAIL_FD_REPORT;
	plan->seccomp = &host.seccomp;
	plan->caps_keep = jail_caps_keep();
	plan->cap_last = host.cap_last;
	plan->argv = agent_argv;
	plan->envp = agent_env;
	spawn_plan_add(plan, SOP_SIGNALS, "reset signals");
	if (netns >= 0) {
		struct spawn_op *op = spawn_plan_add(
			plan, SOP_SETNS,
			spawn_plan_str(plan, "join network namespace %s", spec->netns_path));
		op->fd = JAIL_FD_NETNS;
		op->arg = CLONE_NEWNET;
	} else {
		spawn_plan_add(plan, SOP_LO_UP, "bring up lo");
	}
	/* A tmpfs of size 0 would be unbounded: fall back to the server's defaults. */
	uint64_t workspace = spec->limits.workspace_bytes ? spec->limits.workspace_bytes
			     : cfg->disk_limit            ? cfg->disk_limit
							  : DEFAULT_WORKSPACE_BYTES;
	uint32_t nofile = spec->limits.nofile ? spec->limits.nofile
			  : cfg->nofile       ? cfg->nofile
					      : DEFAULT_NOFILE;
	jail_plan_sandbox(plan, attach, resolv, workspace, nofile, uid_base, spec->limits.disk,
			  home, spec->volumes, spec->nvolumes);
}

/* Starts the plan's child in cgroup cg and waits until it has become the sandbox's agent. */
static int start_child(struct spawn_plan *plan, struct cgroup *cg, bool own_netns, int agent,
		       uint32_t uid_base, const struct root_src *root, int resolv_dfd,
		       const char *resolv, const struct jail_disk *disk,
		       const struct sandbox_spec *spec, const int *vol_mnt, struct spawn_child *c,
		       struct err *err)
{
	/* Without it (an old kernel), the child is moved after the clone instead. */
	_cleanup_close_ int cgroup_fd = -1;
	if (host.cg.version == CGROUP_V2)
		cgroup_fd = open(cg->dir[0], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int r = spawn_start(plan, JAIL_CLONE_NS | (own_netns ? CLONE_NEWNET : 0), cgroup_fd, c,
			    err);
	if (r < 0)
		return r;
	if ((r = jail_userns_map(plan, c, agent, uid_base, host.sysfs, root->dfd, root->path,
				 resolv_dfd, resolv, disk, spec->volumes, vol_mnt, spec->nvolumes,
				 err)) < 0 ||
	    (r = place_child(plan, cg, c, agent, err)) < 0 ||
	    (r = spawn_wait(plan, c, SETUP_TIMEOUT_MS, err)) < 0) {
		spawn_kill(c->pid, c->pidfd);
		spawn_reap(c->pid, c->pidfd);
		spawn_child_close(c);
		return r;
	}
	return 0;
}

/* A failed creation gives its uid range back, unless it was a hibernated sandbox's. */
static void release_ids(bool kept, uint32_t base)
{
	if (!kept)
		jail_uid_release(base);
}

static int jail_create(const struct config *cfg, const struct sandbox_spec *spec,
		       struct sandbox **ret, struct err *err)
{
	const struct template *t = spec->tmpl;
	if (!cgroup_id_valid(spec->id))
		return err_set(err, EINVAL, "jail: invalid sandbox id `%s`",
			       spec->id ? spec->id : "");
	if (!t || (!t->rootfs_dir && !t->rootfs_img))
		return err_set(err, ENOENT,
			       "jail: template `%s` has no rootfs directory: build it for the jail "
			       "driver",
			       t ? t->name : "?");
	int r;
	_cleanup_(root_src_fini) struct root_src root = { .dfd = AT_FDCWD };
	if ((r = host_get(err)) < 0 || (r = choose_root(t, &root, err)) < 0)
		return r;
	/* Opened here, executed after pivot_root: the binary need not exist in the rootfs. */
	_cleanup_close_ int exe = open(cfg->agent_bin ? cfg->agent_bin : "", O_PATH | O_CLOEXEC);
	if (exe < 0)
		return err_sys(err, errno, "jail: agent binary `%s`",
			       cfg->agent_bin ? cfg->agent_bin : "");
	_cleanup_close_ int netns = -1;
	if (spec->netns_path && (netns = open(spec->netns_path, O_RDONLY | O_CLOEXEC)) < 0)
		return err_sys(err, errno, "jail: network namespace `%s`", spec->netns_path);
	_cleanup_close_pair_ int sv[2] = { -1, -1 };
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		return err_sys(err, errno, "jail: socketpair");
	/* Room for a file's data in flight both ways (the kernel's default is about 208 KiB, this
	 * 512 KiB): a megabyte read from the sandbox then takes two writes of the agent, not
	 * eight with a wait for the daemon between each. An agent that stops reading leaves up
	 * to that much of what the daemon sent (within its credit) in the kernel, charged to no
	 * cgroup: docs/operations.md#memory counts it. */
	int sockbuf = JAIL_SOCKET_BUFFER;
	for (int i = 0; i < 2; i++)
		(void)setsockopt(sv[i], SOL_SOCKET, SO_SNDBUFFORCE, &sockbuf, sizeof(sockbuf));

	struct cgroup_limits limits = {
		.memory_bytes = spec->limits.memory_bytes,
		.cpu_quota_us = spec->limits.cpu_quota_us,
		.cpu_period_us = spec->limits.cpu_period_us,
		.pids_max = spec->limits.pids_max,
	};
	/* A hibernated sandbox's range is still taken (hibernate, hibernated_claim): the files
	 * of its disk carry its ids. It stays taken when this fails, for another try. */
	/* A fork's (a clone of a save) has a range of its own, to which the files of its copy
	 * of the disk are moved. */
	uint32_t uid_base = 0, saved_base = 0;
	const char *kept_id = NULL;
	bool kept = false, clone = false;
	if (spec->hibernated) {
		if (!spec->limits.disk)
			return err_set(err, EINVAL,
				       "jail: a hibernated sandbox resumes with its disk");
		if ((r = kept_of(spec->hibernated, &kept_id, &saved_base, &clone, err)) < 0)
			return r;
		kept = !clone;
		uid_base = saved_base;
	}
	if (!kept && (r = jail_uid_alloc(&uid_base, err)) < 0)
		return r;
	struct cgroup *cg = NULL;
	if ((r = cgroup_create(&host.cg, spec->id, &limits, &cg, err)) < 0) {
		release_ids(kept, uid_base);
		return err_wrap(err, "jail");
	}

	/* Unnamed: nothing of it outlives the sandbox or the daemon (jail_disk.c), unless it
	 * is kept by a hibernation. */
	struct jail_disk disk = { .mnt = -1, .img = -1 };
	_cleanup_free_ char *kept_path = kept    ? kept_disk_path(kept_id)
					 : clone ? saved_disk_path(kept_id)
						 : NULL;
	if (spec->limits.disk &&
	    (r = kept    ? jail_disk_open(kept_path, &disk, err)
		 : clone ? jail_disk_clone(cfg->state_dir, kept_path, saved_base, uid_base, &disk,
					   err)
			 : jail_disk_create(cfg->state_dir, spec->limits.workspace_bytes, uid_base,
					    &disk, err)) < 0) {
		cgroup_remove(cg, NULL);
		cgroup_free(cg);
		release_ids(kept, uid_base);
		return r;
	}
	int vol_mnt[SANDBOX_VOLUMES_MAX];
	char *images[SANDBOX_VOLUMES_MAX] = { 0 };
	if ((r = open_volumes(spec, vol_mnt, images, err)) < 0) {
		jail_disk_close(&disk);
		cgroup_remove(cg, NULL);
		cgroup_free(cg);
		release_ids(kept, uid_base);
		return r;
	}
	int resolv_dfd = -1;
	bool resolv = wants_resolv_conf(spec, &root);
	r = resolv ? jail_resolv_copy(spec->id, spec->resolv_conf, &resolv_dfd, err) : 0;
	struct spawn_plan plan;
	spawn_plan_init(&plan, "jail");
	sandbox_plan(&plan, cfg, spec, sv[1], exe, netns, uid_base, root.attach, resolv,
		     has_home(&root));
	struct spawn_child c;
	if (r == 0)
		r = start_child(&plan, cg, netns < 0, sv[0], uid_base, &root, resolv_dfd,
				resolv ? spec->id : NULL, &disk, spec, vol_mnt, &c, err);
	spawn_plan_free(&plan);
	if (r < 0) {
		close_volumes(images, spec->nvolumes);
		jail_disk_close(&disk);
		jail_resolv_remove(spec->id);
		cgroup_remove(cg, NULL);
		cgroup_free(cg);
		release_ids(kept, uid_base);
		return r;
	}
	/* The sandbox runs over the kept disk, named after it now: removed with it (or by the
	 * clean-up after a crash), kept again by another hibernation. */
	if (kept) {
		char *live = live_disk_path(spec->id);
		if (rename(kept_path, live) == 0) {
			disk.path = live;
		} else {
			log_warn("jail", "sandbox %s: rename %s: %s", spec->id, kept_path,
				 strerror(errno));
			free(live);
			disk.path = TAKE_PTR(kept_path);
		}
	}

	/* The daemon is the child's parent and reaps it only in jail_destroy: until then its pid
	 * cannot name another process, so no pidfd is kept (a descriptor less per sandbox). */
	spawn_child_close(&c);
	struct jail *j = xcalloc(1, sizeof(*j));
	j->cg = cg;
	j->uid_base = uid_base;
	j->disk = disk;
	memcpy(j->volumes, images, sizeof(images));
	j->nvolumes = spec->nvolumes;
	struct sandbox *sb = xcalloc(1, sizeof(*sb));
	sb->driver = &driver_jail;
	sb->id = xstrdup(spec->id);
	sb->agent_fd = TAKE_FD(sv[0]);
	sb->pid = c.pid;
	sb->record = make_record(c.pid, cg, uid_base);
	sb->priv = j;
	*ret = sb;
	return 0;
}

/* Ends the sandbox and frees what it holds; with keep_ids, not its uid range (hibernate). */
static void jail_teardown(struct sandbox *sb, bool keep_ids)
{
	if (!sb)
		return;
	struct jail *j = sb->priv;
	if (sb->agent_fd >= 0)
		close(sb->agent_fd);
	/* A paused jail's processes act on SIGKILL only once thawed. */
	if (j && j->cg && j->cg->freezer)
		cgroup_freeze(j->cg, false, NULL);
	/* The pid namespace dies with its PID 1: the kernel kills and reaps the rest before the
	 * wait returns, which leaves the cgroup empty. */
	if (sb->pid > 0) {
		spawn_kill(sb->pid, -1);
		spawn_reap(sb->pid, -1);
	}
	if (j) {
		struct err e;
		if (j->cg && cgroup_remove(j->cg, &e) < 0)
			log_warn("jail", "sandbox %s: %s", sb->id, e.msg);
		cgroup_free(j->cg);
		jail_resolv_remove(sb->id);
		/* Its last reference: the image's blocks are freed now (jail_disk.c). */
		jail_disk_close(&j->disk);
		/* Reaped above: no mount of the sandbox's holds them any more. */
		close_volumes(j->volumes, j->nvolumes);
		/* Reaped above: nothing runs with the range's uids any more. */
		if (!keep_ids)
			jail_uid_release(j->uid_base);
		free(j);
	}
	json_decref(sb->record);
	free(sb->id);
	free(sb);
}

static void jail_destroy(struct sandbox *sb)
{
	jail_teardown(sb, false);
}

/* Hibernation: the disk is kept as a file named by the sandbox's id, then the sandbox ends as
 * in a destroy, but for its uid range, which the files of its disk carry. */
static int jail_hibernate(struct sandbox *sb, json_t **ret_keep, struct err *err)
{
	struct jail *j = sb->priv;
	if (j->disk.mnt < 0)
		return err_set(err, ENOTSUP,
			       "only a session with a disk (\"storage\": \"disk\") can be "
			       "hibernated; pause it instead (mode \"freeze\")");
	if (j->nvolumes)
		return err_set(err, ENOTSUP,
			       "a session with volumes cannot be hibernated; pause it instead "
			       "(mode \"freeze\")");
	_cleanup_free_ char *path = kept_disk_path(sb->id);
	int r = jail_disk_keep(&j->disk, path, err);
	if (r < 0)
		return r;
	json_t *keep = json_pack("{s:s, s:I, s:I}", "sandbox", sb->id, "uidBase",
				 (json_int_t)j->uid_base, "diskBytes", (json_int_t)j->disk.bytes);
	jail_teardown(sb, true);
	*ret_keep = keep;
	return 0;
}

/* A fork's save: a copy of the disk, named <id>-f<random>, taken while the sandbox runs on
 * (jail_disk_save). Only the files are kept: a sandbox made from it starts its processes
 * afresh, with a range of ids of its own. */
static int jail_fork_save(struct sandbox *sb, bool durable, json_t **ret_keep, struct err *err)
{
	struct jail *j = sb->priv;
	if (j->disk.mnt < 0)
		return err_set(err, ENOTSUP,
			       "only a session with a disk (\"storage\": \"disk\") can be forked "
			       "or snapshotted on the jail driver: its disk is what is kept");
	if (j->nvolumes)
		return err_set(err, ENOTSUP,
			       "a session with volumes cannot be forked or snapshotted");
	char hex[9];
	random_hex(hex, 4);
	_cleanup_free_ char *name = xasprintf("%s-f%s", sb->id, hex);
	if (!cgroup_id_valid(name))
		return err_set(err, EINVAL, "jail: sandbox id `%s` is too long to save", sb->id);
	_cleanup_free_ char *path = saved_disk_path(name);
	_cleanup_free_ char *marker = frozen_marker_path(sb->id);
	int r = jail_disk_save(&j->disk, path, durable, marker, err);
	if (r < 0)
		return r;
	struct stat st;
	uint64_t saved = stat(path, &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0;
	*ret_keep = json_pack("{s:s, s:s, s:b, s:I, s:I, s:I}", "driver", "jail", "sandbox", name,
			      "fork", 1, "uidBase", (json_int_t)j->uid_base, "diskBytes",
			      (json_int_t)j->disk.bytes, "savedBytes", (json_int_t)saved);
	return 0;
}

static int jail_hibernated_claim(const json_t *keep, struct err *err)
{
	const char *id;
	uint32_t base;
	bool fork;
	int r = kept_of(keep, &id, &base, &fork, err);
	if (r < 0)
		return r;
	_cleanup_free_ char *path = fork ? saved_disk_path(id) : kept_disk_path(id);
	struct stat st;
	if (lstat(path, &st) < 0 || !S_ISREG(st.st_mode))
		return err_set(err, ENOENT, "jail: the kept disk %s is missing", path);
	return fork ? 0 : jail_uid_claim(base, err);
}

static void jail_hibernated_discard(const json_t *keep)
{
	const char *id;
	uint32_t base;
	bool fork;
	struct err e;
	if (kept_of(keep, &id, &base, &fork, &e) < 0) {
		log_warn("jail", "%s", e.msg);
		return;
	}
	_cleanup_free_ char *path = fork ? saved_disk_path(id) : kept_disk_path(id);
	if (unlink(path) < 0 && errno != ENOENT)
		log_warn("jail", "remove %s: %s", path, strerror(errno));
	/* Nothing ran with its ids since it was hibernated (a save never held any). */
	if (!fork)
		jail_uid_release(base);
}

/* Removes the saves no record names (a crash between a save and its record). */
static void jail_hibernated_sweep(json_t *const *keeps, size_t n)
{
	_cleanup_free_ char *dir = xasprintf("%s/disks", state_dir ? state_dir : ".");
	_cleanup_closedir_ DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		size_t len = strlen(de->d_name);
		if (len <= 6 || strcmp(de->d_name + len - 6, ".saved") != 0)
			continue;
		bool named = false;
		for (size_t i = 0; i < n && !named; i++) {
			const char *id = json_string_value(json_object_get(keeps[i], "sandbox"));
			named = id && strlen(id) == len - 6 &&
				strncmp(id, de->d_name, len - 6) == 0;
		}
		if (named)
			continue;
		log_info("jail", "removing %s/%s: no session or snapshot keeps it", dir,
			 de->d_name);
		if (unlinkat(dirfd(d), de->d_name, 0) < 0)
			log_warn("jail", "remove %s/%s: %s", dir, de->d_name, strerror(errno));
	}
}

static void jail_cleanup_stale(const struct config *cfg, const char *id, json_t *record)
{
	/* A disk frozen for a save when the daemon died: its writers sleep uninterruptibly on it
	 * until it is thawed, and only then can they be ended. */
	if (id && cgroup_id_valid(id)) {
		_cleanup_free_ char *marker = frozen_marker_path(id);
		struct err e;
		int t = jail_disk_thaw_leftover(marker, &e);
		if (t < 0)
			log_warn("jail", "sandbox %s: %s", id, e.msg);
		else if (t > 0)
			log_info("jail",
				 "sandbox %s: thawed its disk, frozen for a save when the "
				 "daemon stopped",
				 id);
	}
	/* The jail's init: the pid namespace dies with it. */
	const struct driver_stale stale = { .driver = "jail", .what = "process" };
	driver_cleanup_stale(&stale, id, record);
	/* A disk it resumed over after a hibernation has a name (jail_disk.path), and so has
	 * one a hibernation under way had named: a sandbox still recorded was not hibernated
	 * (the session layer forgets it in the same transaction that records the hibernation). */
	if (id && cgroup_id_valid(id)) {
		char *names[] = { live_disk_path(id), kept_disk_path(id) };
		for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
			if (unlink(names[i]) < 0 && errno != ENOENT)
				log_warn("jail", "remove %s: %s", names[i], strerror(errno));
			free(names[i]);
		}
	}
	/* Should a leftover have survived, its uid range must not go to a new sandbox. */
	json_t *base = json_object_get(record, "uidBase");
	if (json_is_integer(base) && json_integer_value(base) > 0 &&
	    json_integer_value(base) <= UINT32_MAX)
		jail_uid_reserve_if_busy((uint32_t)json_integer_value(base));
}

static uint64_t jail_oom_kills(struct sandbox *sb)
{
	struct jail *j = sb ? sb->priv : NULL;
	return j ? cgroup_oom_kills(j->cg) : 0;
}

/* The cgroup freezer: every process of the jail stops where it is, its memory kept. */
static int jail_pause(struct sandbox *sb, bool pause, struct err *err)
{
	struct jail *j = sb->priv;
	return cgroup_freeze(j->cg, pause, err);
}

static int jail_usage(struct sandbox *sb, struct cgroup_usage *ret)
{
	struct jail *j = sb ? sb->priv : NULL;
	return j ? cgroup_usage(j->cg, ret, NULL) : -ENOENT;
}

static int jail_disk_usage_of(struct sandbox *sb, uint64_t *used, uint64_t *size)
{
	struct jail *j = sb ? sb->priv : NULL;
	return j ? jail_disk_usage(&j->disk, used, size) : -ENOENT;
}

const struct driver driver_jail = {
	.name = "jail",
	.isolation = "container",
	.snapshots = false,
	.disks = true,
	.max_volumes = SANDBOX_VOLUMES_MAX,
	.probe = jail_probe,
	.init = jail_init,
	.prepare = NULL,
	.create = jail_create,
	.destroy = jail_destroy,
	.cleanup_stale = jail_cleanup_stale,
	.oom_kills = jail_oom_kills,
	.disk_usage = jail_disk_usage_of,
	.usage = jail_usage,
	.pause = jail_pause,
	.hibernate = jail_hibernate,
	.fork_save = jail_fork_save,
	.hibernated_claim = jail_hibernated_claim,
	.hibernated_discard = jail_hibernated_discard,
	.hibernated_sweep = jail_hibernated_sweep,
};
