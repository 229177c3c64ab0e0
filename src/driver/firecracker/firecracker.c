/* The firecracker driver: each sandbox is a Firecracker microVM inside Firecracker's jailer
 * (chroot, dropped uid/gid, new pid namespace, cgroups, seccomp by Firecracker itself),
 * restored from its template's snapshot, reached over vsock.
 *
 * Layout per VM: <FIRECRACKER_JAIL_BASE>/firecracker/<id>/root is the chroot, holding hard
 * links (or copies) of the template's files under fixed names, the API socket at
 * /run/firecracker.socket and the vsock socket at /v.sock. Because every VM has its own
 * chroot and its own network namespace, those names are the same in every restore as at
 * snapshot time, so restores never need Firecracker's vsock or network overrides: eth0 is on
 * `tap0` of the namespace, the net module's for a session, one of ours otherwise.
 *
 * Per template (prepare): boot once from the kernel and rootfs, wait for the agent, pause,
 * take a Full snapshot, keep it in <template>/firecracker/ with a meta.json that names what it
 * was made from; a snapshot that no longer matches (kernel, rootfs, Firecracker version,
 * machine size) is rebuilt, never used.
 *
 * Per sandbox, saved whole (pause with mode hibernate, fork, snapshot: docs/lifecycle.md):
 * `Paused`, then a Full snapshot into the jail, whose files are moved to
 * SANDBOX_STATE_DIR/fc-saved/<name>/ with a link to the template's rootfs (the guest's page
 * cache is of that very file) and meta.json, the record, written last; the directory is
 * renamed into place once all of it is synced. A hibernation then ends the VM; a fork
 * resumes it. A sandbox made from a save loads it, resumed, in a new jail, and a
 * hibernation's save goes once it runs. Firecracker loads a snapshot only with the version
 * that made it, on the same machine size: a save that does not match is refused. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <linux/kvm.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/vfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "driver/cgroup.h"
#include "driver/driver.h"
#include "driver/firecracker/fc_api.h"
#include "driver/firecracker/jailer.h"
#include "driver/proc.h"
#include "driver/vm.h"
#include "guest/call.h"
#include "guest/proto.h"
#include "util/cleanup.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/random.h"
#include "util/spawn.h"
#include "util/time.h"

extern char **environ;

#define FC_GUEST_CID   3
#define API_TIMEOUT_MS 10000
/* How long a child may take from its start to its exec (or its end, for the NIC's namespace). */
#define CHILD_TIMEOUT_MS 10000
/* What the Firecracker process needs of the host besides guest RAM and a thread per vCPU
 * (see vm_vmm_limits): its heap, the API server, device buffers, and the page cache of the
 * snapshot's memory file that its faults bring in; its API, VMM and device threads. */
#define FC_OVERHEAD_MIB 64
#define FC_MIN_PIDS     16
/* `firecracker --version` answers at once; a binary that does not is not one to use. */
#define FC_VERSION_TIMEOUT_MS 5000
#define BOOT_TIMEOUT_MS       60000
#define RESTORE_TIMEOUT_MS    15000
#define CONSOLE_TAIL          2048

struct fc_vm {
	char *jail_dir; /* <base>/firecracker/<id> */
	char *root;     /* <jail_dir>/root */
	char *api_sock; /* host path of the API socket */
	char *vsock;    /* host path of the vsock socket */
	pid_t jailer;   /* our child, the jailer (it exits once Firecracker runs) */
	pid_t vmm;      /* Firecracker, from <root>/firecracker.pid */
	struct cgroup *cg;
	struct fc_version version;
	char *own_netns; /* a namespace of our own with a dummy TAP (see tap_netns_create) */
	bool frozen;     /* paused (fc_pause): a save leaves it so */
	struct sandbox_limits limits;
};

static const struct vm_vmm_needs fc_vmm_needs = { .overhead_mib = FC_OVERHEAD_MIB,
						  .min_pids = FC_MIN_PIDS };

static struct {
	pthread_mutex_t lock;
	struct cgroup_root cgroots;
	bool have_cgroots;
	char *saved_dir;          /* SANDBOX_STATE_DIR/fc-saved: saved VMs */
	const struct config *cfg; /* for what the driver is called without it (saves) */
} fc_mod = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void tap_netns_remove(const char *path);

/* --- probe and init ----------------------------------------------------------------- */

static int kvm_usable(struct err *err)
{
	_cleanup_close_ int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return err_sys(err, errno, "/dev/kvm is not usable");
	if (ioctl(fd, KVM_GET_API_VERSION, 0) != KVM_API_VERSION)
		return err_set(err, ENODEV, "/dev/kvm speaks an unexpected API version");
	int vm = ioctl(fd, KVM_CREATE_VM, 0);
	if (vm < 0)
		return err_sys(err, errno, "KVM cannot create a VM");
	close(vm);
	return 0;
}

static int fc_probe(const struct config *cfg, struct err *err)
{
	if (access(cfg->fc_bin, X_OK) < 0)
		return err_sys(err, errno, "firecracker binary `%s`", cfg->fc_bin);
	if (access(cfg->fc_jailer_bin, X_OK) < 0)
		return err_sys(err, errno, "jailer binary `%s`", cfg->fc_jailer_bin);
	/* Chosen by name with the check turned off (a VMM double that needs no KVM): the
	 * sandboxes' own starts then say what is missing. `auto` always checks. */
	if (!cfg->fc_kvm_check && strcmp(cfg->driver, "firecracker") == 0)
		return 0;
	return kvm_usable(err);
}

static int fc_init(const struct config *cfg, struct err *err)
{
	int r = fs_mkdir_p(cfg->fc_jail_base, 0711);
	if (r < 0)
		return err_sys(err, -r, "cannot create `%s`", cfg->fc_jail_base);
	pthread_mutex_lock(&fc_mod.lock);
	fc_mod.cfg = cfg;
	free(fc_mod.saved_dir);
	fc_mod.saved_dir = xasprintf("%s/fc-saved", cfg->state_dir);
	if (!fc_mod.have_cgroots) {
		r = cgroup_root_detect(CGROUP_ROOT, &fc_mod.cgroots, err);
		if (r == 0)
			r = cgroup_init(&fc_mod.cgroots, err);
		fc_mod.have_cgroots = r == 0;
	}
	pthread_mutex_unlock(&fc_mod.lock);
	return r;
}

/* --- the VM process ----------------------------------------------------------------- */

static char *console_tail(const struct fc_vm *vm)
{
	_cleanup_free_ char *path = xasprintf("%s/console.log", vm->jail_dir);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return xstrdup("");
	off_t end = lseek(fd, 0, SEEK_END);
	off_t start = end > CONSOLE_TAIL ? end - CONSOLE_TAIL : 0;
	char *buf = xcalloc(1, CONSOLE_TAIL + 1);
	ssize_t n = pread(fd, buf, CONSOLE_TAIL, start);
	if (n > 0)
		buf[n] = '\0';
	return buf;
}

static void vm_free(struct fc_vm *vm)
{
	if (!vm)
		return;
	free(vm->jail_dir);
	free(vm->root);
	free(vm->api_sock);
	free(vm->vsock);
	free(vm->own_netns);
	cgroup_free(vm->cg);
	free(vm);
}

static bool pid_alive(pid_t pid)
{
	return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM);
}

/* Stops the VM and removes its jail and cgroup. Never fails; logs what it cannot undo. */
static void vm_teardown(struct fc_vm *vm, const char *id)
{
	if (vm->vmm > 0) {
		int pfd = (int)syscall(SYS_pidfd_open, vm->vmm, 0);
		kill(vm->vmm, SIGKILL);
		if (pfd >= 0) {
			struct pollfd p = { .fd = pfd, .events = POLLIN };
			poll(&p, 1, 5000);
			close(pfd);
		} else {
			for (int i = 0; i < 500 && pid_alive(vm->vmm); i++)
				poll(NULL, 0, 10);
		}
	}
	if (vm->jailer > 0) {
		kill(vm->jailer, SIGKILL);
		waitpid(vm->jailer, NULL, 0);
	}
	if (vm->cg) {
		struct err e;
		if (cgroup_remove(vm->cg, &e) < 0)
			log_warn("firecracker", "sandbox %s: %s", id, e.msg);
	}
	if (vm->jail_dir && fs_rm_rf(vm->jail_dir, NULL) < 0)
		log_warn("firecracker", "sandbox %s: cannot remove `%s`", id, vm->jail_dir);
	if (vm->own_netns)
		tap_netns_remove(vm->own_netns);
}

/* Tears the VM down and frees it (NULL: nothing). */
static void vm_discard(struct fc_vm *vm, const char *id)
{
	if (!vm)
		return;
	vm_teardown(vm, id);
	vm_free(vm);
}

static int read_pid_file(const char *path, pid_t *ret)
{
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	int pid = 0;
	if (!f || fscanf(f, "%d", &pid) != 1 || pid <= 0)
		return -ENOENT;
	*ret = pid;
	return 0;
}

static int cgroup_version_now(void)
{
	struct statfs sf;
	if (statfs("/sys/fs/cgroup", &sf) == 0 && sf.f_type == 0x63677270 /* CGROUP2 */)
		return 2;
	return 1;
}

/* --- the NIC's namespace -------------------------------------------------------------- */

/* Every VM has eth0 on the TAP `tap0` of the network namespace Firecracker runs in. A
 * session's sandbox gets the net module's namespace (tap0 routed); the snapshot build, and
 * sandboxes when networking is off, get one of ours: a new namespace holding only a
 * persistent tap0, its link down (nothing to reach), bind-mounted at <jail dir>.netns. The
 * snapshot's device then always finds tap0 at restore. */
#define FC_TAP_NAME "tap0"

static char *own_netns_path(const struct config *cfg, const char *id)
{
	_cleanup_free_ char *jail = fc_jail_dir(cfg->fc_jail_base, cfg->fc_bin, id);
	return xasprintf("%s.netns", jail);
}

static void tap_netns_remove(const char *path)
{
	if (umount2(path, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
		log_warn("firecracker", "cannot unmount `%s`: %s", path, strerror(errno));
	if (unlink(path) < 0 && errno != ENOENT)
		log_warn("firecracker", "cannot remove `%s`: %s", path, strerror(errno));
}

static int tap_netns_create(const char *path, struct err *err)
{
	_cleanup_free_ char *parent = xstrdup(path);
	char *slash = strrchr(parent, '/');
	if (slash && slash != parent)
		*slash = '\0';
	int r = fs_mkdir_p(parent, 0755);
	if (r < 0)
		return err_sys(err, -r, "cannot create `%s`", parent);
	tap_netns_remove(path); /* left by a crash */
	int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return err_sys(err, errno, "cannot create `%s`", path);
	close(fd);
	/* A child does it, so that no thread of the daemon ever leaves the root namespace. */
	struct spawn_plan plan;
	spawn_plan_init(&plan, "firecracker");
	struct spawn_op *op = spawn_plan_add(
		&plan, SOP_UNSHARE,
		spawn_plan_str(&plan, "creating a network namespace for `%s`", path));
	op->arg = CLONE_NEWNET;
	op = spawn_plan_add(&plan, SOP_TAP, "creating " FC_TAP_NAME);
	op->src = FC_TAP_NAME;
	op = spawn_plan_add(&plan, SOP_MOUNT,
			    spawn_plan_str(&plan, "mounting the namespace on `%s`", path));
	op->src = "/proc/self/ns/net";
	op->dst = path;
	op->flags = MS_BIND;
	spawn_plan_add(&plan, SOP_EXIT, "exit");
	struct spawn_child c;
	r = spawn_start(&plan, 0, -1, &c, err);
	if (r == 0) {
		r = spawn_wait(&plan, &c, CHILD_TIMEOUT_MS, err);
		if (r < 0)
			spawn_kill(c.pid, c.pidfd);
		int status = spawn_reap(c.pid, c.pidfd);
		if (r == 0 && status != 0)
			r = err_set(err, EIO,
				    "firecracker: setting up the NIC's namespace `%s`: status %#x",
				    path, status);
		spawn_child_close(&c);
	}
	spawn_plan_free(&plan);
	if (r < 0)
		tap_netns_remove(path);
	return r;
}

/* Starts the jailer (argv) with its output appended to `console`, in a session of its own. */
static int start_jailer(struct fc_vm *vm, char **argv, const char *console, struct err *err)
{
	_cleanup_close_ int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	_cleanup_close_ int out =
		open(console, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (devnull < 0 || out < 0)
		return err_sys(err, errno, "cannot open `%s`", devnull < 0 ? "/dev/null" : console);
	struct spawn_plan plan;
	spawn_plan_init(&plan, "firecracker");
	spawn_plan_fd(&plan, devnull, 0, true);
	spawn_plan_fd(&plan, out, 1, true);
	spawn_plan_fd(&plan, out, 2, true);
	plan.argv = argv;
	/* The daemon's environment, as the jailer has always had it. */
	plan.envp = environ;
	spawn_plan_add(&plan, SOP_SIGNALS, "reset signals");
	spawn_plan_add(&plan, SOP_SETSID, "setsid");
	struct spawn_op *op = spawn_plan_add(
		&plan, SOP_EXEC, spawn_plan_str(&plan, "cannot start the jailer `%s`", argv[0]));
	op->src = argv[0];
	struct spawn_child c;
	int r = spawn_start(&plan, 0, -1, &c, err);
	if (r == 0) {
		vm->jailer = c.pid;
		r = spawn_wait(&plan, &c, CHILD_TIMEOUT_MS, err);
		if (r < 0) {
			spawn_kill(c.pid, c.pidfd);
			spawn_reap(c.pid, c.pidfd);
			vm->jailer = 0;
		}
		spawn_child_close(&c);
	}
	spawn_plan_free(&plan);
	return r;
}

/* Makes the VM's jail and starts the jailer for sandbox `id` in it; on success the API
 * socket answers. What it did, vm_teardown undoes. */
static int vm_launch(const struct config *cfg, struct fc_vm *vm, const char *id,
		     const struct sandbox_limits *l, const char *netns, struct err *err)
{
	/* Until the jail is made here, the directory of that name is not this VM's to remove. */
	_cleanup_free_ char *jail_dir = TAKE_PTR(vm->jail_dir);
	if (strlen(vm->api_sock) > FC_SUN_PATH_MAX || strlen(vm->vsock) > FC_SUN_PATH_MAX)
		return err_set(
			err, ENAMETOOLONG,
			"FIRECRACKER_JAIL_BASE `%s` is too long: the socket path `%s` exceeds "
			"%d bytes",
			cfg->fc_jail_base, vm->api_sock, FC_SUN_PATH_MAX);
	if (access(jail_dir, F_OK) == 0)
		return err_set(err, EEXIST, "jail `%s` already exists", jail_dir);
	vm->jail_dir = TAKE_PTR(jail_dir);
	int r = fs_mkdir_p(vm->root, 0750);
	if (r < 0)
		return err_sys(err, -r, "cannot create `%s`", vm->root);
	if (chown(vm->root, 0, cfg->fc_gid) < 0)
		return err_sys(err, errno, "chown `%s`", vm->root);

	struct fc_jail_spec js = {
		.jailer_bin = cfg->fc_jailer_bin,
		.fc_bin = cfg->fc_bin,
		.id = id,
		.chroot_base = cfg->fc_jail_base,
		.netns_path = netns,
		.uid = cfg->fc_uid,
		.gid = cfg->fc_gid,
		.cgroup_version = cgroup_version_now(),
		.parent_cgroup = CGROUP_PARENT,
		.cpu_quota_us = l->cpu_quota_us,
		.cpu_period_us = l->cpu_period_us,
		.nofile = l->nofile,
	};
	vm_vmm_limits(l, l->mem_mib, l->vcpus, &fc_vmm_needs, &js.memory_bytes, &js.pids_max);
	char **argv = fc_jailer_argv(&js);
	_cleanup_free_ char *console = xasprintf("%s/console.log", vm->jail_dir);
	r = start_jailer(vm, argv, console, err);
	fc_argv_free(argv);
	if (r < 0)
		return r;
	if ((r = fc_api_wait(vm->api_sock, API_TIMEOUT_MS, err)) < 0) {
		_cleanup_free_ char *tail = console_tail(vm);
		err_wrap(err, "%s", *tail ? tail : "firecracker did not start");
		return r;
	}
	_cleanup_free_ char *pidfile = xasprintf("%s/firecracker.pid", vm->root);
	if (read_pid_file(pidfile, &vm->vmm) < 0)
		log_warn("firecracker", "sandbox %s: no pid file from the jailer", id);
	/* The jailer has handed over to Firecracker in its new pid namespace. */
	waitpid(vm->jailer, NULL, WNOHANG);
	if (fc_mod.have_cgroots && cgroup_open(&fc_mod.cgroots, id, &vm->cg, NULL) < 0)
		vm->cg = NULL;
	return fc_api_version(vm->api_sock, &vm->version, err);
}

/* Starts the jailer for sandbox `id`; on success the API socket answers. */
static int vm_start(const struct config *cfg, const char *id, const struct sandbox_limits *l,
		    const char *netns, struct fc_vm **ret, struct err *err)
{
	struct fc_vm *vm = xcalloc(1, sizeof(*vm));
	vm->jail_dir = fc_jail_dir(cfg->fc_jail_base, cfg->fc_bin, id);
	vm->root = xasprintf("%s/root", vm->jail_dir);
	vm->api_sock = xasprintf("%s%s", vm->root, FC_API_SOCK);
	vm->vsock = xasprintf("%s%s", vm->root, FC_VSOCK_UDS);
	int r = vm_launch(cfg, vm, id, l, netns, err);
	if (r < 0) {
		vm_discard(vm, id);
		return r;
	}
	*ret = vm;
	return 0;
}

/* vm_start in `netns`, or without one in a namespace of our own with a dummy tap0. */
static int vm_start_net(const struct config *cfg, const char *id, const struct sandbox_limits *l,
			const char *netns, struct fc_vm **ret, struct err *err)
{
	if (netns)
		return vm_start(cfg, id, l, netns, ret, err);
	_cleanup_free_ char *own = own_netns_path(cfg, id);
	int r = tap_netns_create(own, err);
	if (r == 0 && (r = vm_start(cfg, id, l, own, ret, err)) == 0) {
		(*ret)->own_netns = TAKE_PTR(own);
		return 0;
	}
	if (r < 0 && access(own, F_OK) == 0)
		tap_netns_remove(own);
	return r;
}

/* --- vsock and the agent ------------------------------------------------------------ */

static int read_line(int fd, char *buf, size_t cap, uint64_t deadline)
{
	size_t n = 0;
	while (n + 1 < cap) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		long left = deadline - time_mono_ms();
		if (left <= 0 || poll(&p, 1, (int)left) <= 0)
			return -ETIMEDOUT;
		ssize_t r = read(fd, buf + n, 1);
		if (r <= 0)
			return r == 0 ? -ECONNRESET : -errno;
		if (buf[n++] == '\n')
			break;
	}
	buf[n] = '\0';
	return 0;
}

/* Connects to the agent's vsock port through Firecracker's socket: "CONNECT 5000\n" in one
 * write, then "OK <port>\n". The agent may not listen yet (or again, after a restore), so
 * refusals are retried until the deadline. */
static int vsock_connect(const char *uds, long timeout_ms, int *ret, struct err *err)
{
	uint64_t deadline = time_deadline(timeout_ms);
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", uds);
	char last[128] = "no attempt";
	while (time_mono_ms() < deadline) {
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return err_sys(err, errno, "socket");
		if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) == 0) {
			char cmd[32];
			int n = snprintf(cmd, sizeof(cmd), "CONNECT %d\n", VM_AGENT_VSOCK_PORT);
			char line[64];
			if (write(fd, cmd, (size_t)n) == n &&
			    read_line(fd, line, sizeof(line), deadline) == 0 &&
			    strncmp(line, "OK ", 3) == 0) {
				*ret = fd;
				return 0;
			}
			snprintf(last, sizeof(last), "the guest did not accept port %d",
				 VM_AGENT_VSOCK_PORT);
		} else {
			snprintf(last, sizeof(last), "%s", strerror(errno));
		}
		close(fd);
		poll(NULL, 0, 10);
	}
	return err_set(err, ETIMEDOUT, "cannot reach the agent over vsock within %ld ms (%s)",
		       timeout_ms, last);
}

/* One ping through the guest protocol, for the snapshot build (the session layer does its own
 * first exchange for sessions). */
static int agent_ping(int fd, int timeout_ms, struct err *err)
{
	struct guest_call c = {
		.fd = fd, .channel = 1, .request = "{\"op\":\"ping\"}", .timeout_ms = timeout_ms
	};
	return guest_call(&c, NULL, err);
}

/* --- template snapshots ------------------------------------------------------------- */

static char *file_digest(const char *path)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return NULL;
	/* Identity by size and change time: hashing a rootfs on every create is too slow. */
	return xasprintf("%lld:%lld.%09ld:%llu", (long long)st.st_size,
			 (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
			 (unsigned long long)st.st_ino);
}

static char *boot_args(const struct sandbox_limits *l)
{
	char channel[32];
	snprintf(channel, sizeof(channel), "vsock:%d", VM_AGENT_VSOCK_PORT);
	/* Firecracker has no PCI bus; panic=1 reboots, which ends the VM. */
	struct vm_cmdline_opts o = { .machine = "panic=1 pci=off",
				     .channel = channel,
				     .threads_max = vm_guest_threads_max(l->pids_max),
				     .workspace_mib = l->workspace_bytes >> 20 };
	return vm_guest_cmdline(&o);
}

/* What a snapshot was made from; a snapshot is used only when this matches exactly. */
static json_t *snapshot_identity(const struct config *cfg, const struct template *t,
				 const struct sandbox_limits *l, const struct fc_version *v)
{
	_cleanup_free_ char *kernel = xasprintf("%s/vmlinux", cfg->artifacts_dir);
	_cleanup_free_ char *kd = file_digest(kernel);
	_cleanup_free_ char *rd = t->rootfs_img ? file_digest(t->rootfs_img) : NULL;
	_cleanup_free_ char *args = boot_args(l);
	_cleanup_free_ char *ver = xasprintf("%u.%u.%u", v->major, v->minor, v->patch);
	return json_pack("{s:s, s:s?, s:s?, s:I, s:I, s:s, s:s}", "firecracker", ver, "kernel", kd,
			 "rootfs", rd, "memMib", (json_int_t)l->mem_mib, "vcpus",
			 (json_int_t)l->vcpus, "bootArgs", args, "nic", "eth0:" FC_TAP_NAME);
}

/* Sends a request whose body (stolen) is freed whatever happens. */
static int send_body(struct fc_vm *vm, const char *method, const char *path, json_t *body,
		     struct err *err)
{
	json_auto_t *stolen = body;
	return fc_api_call(vm->api_sock, method, path, stolen, NULL, API_TIMEOUT_MS, err);
}

static int put(struct fc_vm *vm, const char *path, json_t *body, struct err *err)
{
	return send_body(vm, "PUT", path, body, err);
}

/* Stages the template's kernel and rootfs in the VM's jail, configures the machine and boots
 * it until its agent answers. */
static int boot_template(const struct config *cfg, struct fc_vm *vm, const struct template *t,
			 const struct sandbox_limits *l, const char *kernel, struct err *err)
{
	_cleanup_free_ char *args = boot_args(l);
	int r;
	if ((r = fc_jail_stage(vm->root, kernel, "vmlinux", cfg->fc_uid, cfg->fc_gid, 0400, err)) <
		    0 ||
	    (r = fc_jail_stage(vm->root, t->rootfs_img, "rootfs.ext4", cfg->fc_uid, cfg->fc_gid,
			       0400, err)) < 0)
		return r;
	if ((r = put(vm, "/machine-config",
		     json_pack("{s:i, s:i, s:b}", "vcpu_count", (int)l->vcpus, "mem_size_mib",
			       (int)l->mem_mib, "smt", 0),
		     err)) < 0 ||
	    (r = put(vm, "/boot-source",
		     json_pack("{s:s, s:s}", "kernel_image_path", "/vmlinux", "boot_args", args),
		     err)) < 0 ||
	    (r = put(vm, "/drives/rootfs",
		     json_pack("{s:s, s:s, s:b, s:b}", "drive_id", "rootfs", "path_on_host",
			       "/rootfs.ext4", "is_root_device", 1, "is_read_only", 1),
		     err)) < 0 ||
	    (r = put(vm, "/vsock",
		     json_pack("{s:i, s:s}", "guest_cid", FC_GUEST_CID, "uds_path", FC_VSOCK_UDS),
		     err)) < 0 ||
	    (r = put(vm, "/entropy", json_object(), err)) < 0 ||
	    (r = put(vm, "/network-interfaces/eth0",
		     json_pack("{s:s, s:s}", "iface_id", "eth0", "host_dev_name", FC_TAP_NAME),
		     err)) < 0 ||
	    (r = put(vm, "/actions", json_pack("{s:s}", "action_type", "InstanceStart"), err)) < 0)
		return r;
	_cleanup_close_ int fd = -1;
	if ((r = vsock_connect(vm->vsock, BOOT_TIMEOUT_MS, &fd, err)) < 0 ||
	    (r = agent_ping(fd, BOOT_TIMEOUT_MS, err)) < 0) {
		_cleanup_free_ char *tail = console_tail(vm);
		err_wrap(err, "booting template %s%s%s", t->name, *tail ? "; console: " : "", tail);
		return r;
	}
	return 0;
}

/* Pauses the booted VM and takes its Full snapshot, in its jail. */
static int snapshot_take(struct fc_vm *vm, struct err *err)
{
	int r = send_body(vm, "PATCH", "/vm", json_pack("{s:s}", "state", "Paused"), err);
	if (r < 0)
		return r;
	return put(vm, "/snapshot/create",
		   json_pack("{s:s, s:s, s:s}", "snapshot_type", "Full", "snapshot_path",
			     "/vmstate", "mem_file_path", "/memory"),
		   err);
}

/* Moves the snapshot's files out of the jail, which goes with the VM, into out_dir. */
static int snapshot_move(const struct config *cfg, const struct fc_vm *vm, const char *out_dir,
			 struct err *err)
{
	const char *names[] = { "vmstate", "memory" };
	for (size_t i = 0; i < 2; i++) {
		_cleanup_free_ char *src = xasprintf("%s/%s", vm->root, names[i]);
		_cleanup_free_ char *dst = xasprintf("%s/%s", out_dir, names[i]);
		if (rename(src, dst) < 0 && (errno != EXDEV || fc_copy_file(src, dst, 0640) < 0))
			return err_sys(err, errno, "cannot keep snapshot file `%s`", src);
		if (chown(dst, 0, cfg->fc_gid) < 0 || chmod(dst, 0640) < 0)
			return err_sys(err, errno, "cannot set owner of `%s`", dst);
	}
	return 0;
}

/* Boots the template once in a throwaway jail and takes its snapshot into `out_dir`. */
static int build_snapshot(const struct config *cfg, struct template *t,
			  const struct sandbox_limits *l, const char *out_dir, json_t **ret_meta,
			  struct err *err)
{
	char hex[9];
	snprintf(hex, sizeof(hex), "%08lx", (unsigned long)(time_mono_ms() & 0xffffffff));
	_cleanup_free_ char *id = xasprintf("tpl-%s", hex);
	_cleanup_free_ char *kernel = xasprintf("%s/vmlinux", cfg->artifacts_dir);
	if (!t->rootfs_img)
		return err_set(err, ENOENT, "template %s has no rootfs.ext4", t->name);
	if (access(kernel, R_OK) < 0)
		return err_sys(err, errno, "guest kernel `%s`", kernel);

	struct fc_vm *vm = NULL;
	int r = vm_start_net(cfg, id, l, NULL, &vm, err);
	if (r < 0)
		return r;
	if ((r = boot_template(cfg, vm, t, l, kernel, err)) == 0 &&
	    (r = snapshot_take(vm, err)) == 0) {
		*ret_meta = snapshot_identity(cfg, t, l, &vm->version);
		r = snapshot_move(cfg, vm, out_dir, err);
	}
	vm_discard(vm, id);
	return r;
}

/* The version of the installed binary, from `firecracker --version`, which must answer
 * within FC_VERSION_TIMEOUT_MS. */
static int binary_version(const char *bin, struct fc_version *ret, struct err *err)
{
	char *const argv[] = { (char *)bin, (char *)"--version", NULL };
	char out[256];
	int st = spawn_run_bounded(argv, FC_VERSION_TIMEOUT_MS, out, sizeof(out));
	if (st == -ETIMEDOUT)
		return err_set(err, ETIMEDOUT, "`%s --version` did not answer within %d ms", bin,
			       FC_VERSION_TIMEOUT_MS);
	if (st < 0)
		return err_sys(err, -st, "cannot run `%s --version`", bin);
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return err_set(err, ENOEXEC, "`%s --version` failed", bin);
	const char *v = strstr(out, "v");
	if (!v || fc_version_parse(v, ret) < 0)
		return err_set(err, EBADMSG, "cannot read the version of `%s`", bin);
	return 0;
}

/* Puts the snapshot built in tmp in dir's place: meta.json last, so a half-written one never
 * matches. */
static int snapshot_install(const char *dir, const char *tmp, json_t *meta, struct err *err)
{
	_cleanup_free_ char *tmp_meta = xasprintf("%s/meta.json", tmp);
	_cleanup_free_ char *old = xasprintf("%s.old", dir);
	int r = 0;
	if (json_dump_file(meta, tmp_meta, JSON_INDENT(2)) < 0)
		r = err_sys(err, errno, "cannot write `%s`", tmp_meta);
	else if (fs_rm_rf(old, NULL) < 0 || (rename(dir, old) < 0 && errno != ENOENT) ||
		 rename(tmp, dir) < 0)
		r = err_sys(err, errno, "cannot install the snapshot in `%s`", dir);
	fs_rm_rf(old, NULL);
	return r;
}

/* Builds the template's snapshot unless the one it has was made from `want`. Called with
 * fc_mod.lock held; the template's lock file keeps other daemons out. */
static int snapshot_ensure(const struct config *cfg, struct template *t,
			   const struct sandbox_limits *l, const json_t *want, struct err *err)
{
	_cleanup_free_ char *dir = xasprintf("%s/firecracker", t->dir);
	_cleanup_free_ char *meta_path = xasprintf("%s/meta.json", dir);
	_cleanup_free_ char *tmp = xasprintf("%s.tmp", dir);
	/* Another daemon on the same artifacts must not build the same snapshot at once. */
	_cleanup_free_ char *lock_path = xasprintf("%s/.firecracker.lock", t->dir);
	_cleanup_close_ int lock = open(lock_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lock >= 0)
		flock(lock, LOCK_EX);
	json_auto_t *have = json_load_file(meta_path, 0, NULL);
	if (have && json_equal(have, want))
		return 0;
	if (have)
		log_info("firecracker", "snapshot of template %s is stale: rebuilding", t->name);
	fs_rm_rf(tmp, NULL);
	if (mkdir(tmp, 0750) < 0 || chown(tmp, 0, cfg->fc_gid) < 0)
		return err_sys(err, errno, "cannot create `%s`", tmp);
	long t0 = time_mono_ms();
	json_auto_t *meta = NULL;
	int r = build_snapshot(cfg, t, l, tmp, &meta, err);
	if (r == 0)
		r = snapshot_install(dir, tmp, meta, err);
	if (r == 0)
		log_info("firecracker", "snapshot of template %s built in %ld ms", t->name,
			 time_mono_ms() - t0);
	else
		fs_rm_rf(tmp, NULL);
	return r;
}

static int fc_prepare(const struct config *cfg, struct template *t, struct err *err)
{
	struct sandbox_limits l;
	driver_default_limits(cfg, t, &l);
	struct fc_version v;
	int r = binary_version(cfg->fc_bin, &v, err);
	if (r < 0)
		return r;
	json_auto_t *want = snapshot_identity(cfg, t, &l, &v);
	pthread_mutex_lock(&fc_mod.lock);
	r = snapshot_ensure(cfg, t, &l, want, err);
	pthread_mutex_unlock(&fc_mod.lock);
	return r;
}

/* --- sandboxes ---------------------------------------------------------------------- */

/* Stages the template's rootfs and snapshot in the started VM's jail, loads the snapshot and
 * connects to the agent (*ret_fd). */
static int restore(const struct config *cfg, struct fc_vm *vm, const struct template *t,
		   const char *rootfs, const char *vmstate, const char *memory, int *ret_fd,
		   struct err *err)
{
	int r;
	/* The drive must sit where it was at snapshot time; the snapshot files are shared. */
	if ((r = fc_jail_stage(vm->root, rootfs, "rootfs.ext4", cfg->fc_uid, cfg->fc_gid, 0400,
			       err)) < 0 ||
	    (r = fc_jail_stage(vm->root, vmstate, "vmstate", cfg->fc_uid, cfg->fc_gid, 0400, err)) <
		    0 ||
	    (r = fc_jail_stage(vm->root, memory, "memory", cfg->fc_uid, cfg->fc_gid, 0400, err)) <
		    0)
		return r;
	json_t *load =
		json_pack("{s:s, s:{s:s, s:s}, s:b}", "snapshot_path", "/vmstate", "mem_backend",
			  "backend_type", "File", "backend_path", "/memory", "resume_vm", 1);
	if ((r = put(vm, "/snapshot/load", load, err)) < 0)
		return r;
	if ((r = vsock_connect(vm->vsock, RESTORE_TIMEOUT_MS, ret_fd, err)) < 0) {
		_cleanup_free_ char *tail = console_tail(vm);
		err_wrap(err, "restoring %s%s%s", t->name, *tail ? "; console: " : "", tail);
		return r;
	}
	return 0;
}

/* --- saved VMs ----------------------------------------------------------------------- */

/* A save's directory, by a name checked like a sandbox id. */
static char *saved_path(const char *name, const char *file)
{
	return file ? xasprintf("%s/%s/%s", fc_mod.saved_dir, name, file)
		    : xasprintf("%s/%s", fc_mod.saved_dir, name);
}

static json_t *file_identity(const struct stat *st)
{
	return json_pack("{s:I, s:I, s:I, s:I}", "dev", (json_int_t)st->st_dev, "ino",
			 (json_int_t)st->st_ino, "size", (json_int_t)st->st_size, "mtime",
			 (json_int_t)st->st_mtim.tv_sec);
}

static bool same_file(const json_t *id, const struct stat *st)
{
	return json_integer_value(json_object_get(id, "dev")) == (json_int_t)st->st_dev &&
	       json_integer_value(json_object_get(id, "ino")) == (json_int_t)st->st_ino &&
	       json_integer_value(json_object_get(id, "size")) == (json_int_t)st->st_size &&
	       json_integer_value(json_object_get(id, "mtime")) == (json_int_t)st->st_mtim.tv_sec;
}

static int sync_path(const char *path, struct err *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fsync(fd) < 0)
		return err_sys(err, errno, "firecracker: sync `%s`", path);
	return 0;
}

/* Writes the save into `tmp`: a Full snapshot of the paused VM, its files moved out of the
 * jail and synced, the rootfs linked, meta.json (*ret_keep) last. */
static int save_files(struct fc_vm *vm, const char *tmp, const char *name, bool fork, bool durable,
		      json_t **ret_keep, struct err *err)
{
	int r = put(vm, "/snapshot/create",
		    json_pack("{s:s, s:s, s:s}", "snapshot_type", "Full", "snapshot_path",
			      "/saved-vmstate", "mem_file_path", "/saved-memory"),
		    err);
	if (r < 0)
		return r;
	static const char *const names[] = { "vmstate", "memory" };
	struct stat st[2];
	uint64_t saved = 0;
	for (size_t i = 0; i < 2; i++) {
		_cleanup_free_ char *src = xasprintf("%s/saved-%s", vm->root, names[i]);
		_cleanup_free_ char *dst = xasprintf("%s/%s", tmp, names[i]);
		int moved = rename(src, dst) == 0 ? 0
			    : errno == EXDEV      ? fc_copy_file(src, dst, 0600)
						  : -errno;
		unlink(src);
		if (moved < 0)
			return err_sys(err, -moved, "firecracker: cannot keep `%s`", src);
		if (durable && (r = sync_path(dst, err)) < 0)
			return r;
		if (stat(dst, &st[i]) < 0)
			return err_sys(err, errno, "firecracker: `%s`", dst);
		saved += (uint64_t)st[i].st_blocks * 512;
	}
	/* The rootfs the guest runs on, by a link where the file systems allow (a rebuild of
	 * the template replaces its file, the link keeps this one), else by its identity. */
	_cleanup_free_ char *rootfs_src = xasprintf("%s/rootfs.ext4", vm->root);
	_cleanup_free_ char *rootfs_dst = xasprintf("%s/rootfs.ext4", tmp);
	struct stat rst;
	if (stat(rootfs_src, &rst) < 0)
		return err_sys(err, errno, "firecracker: the VM's rootfs");
	bool linked = link(rootfs_src, rootfs_dst) == 0;
	char version[48];
	snprintf(version, sizeof(version), "%u.%u.%u", vm->version.major, vm->version.minor,
		 vm->version.patch);
	json_auto_t *keep = json_pack(
		"{s:s, s:s, s:b, s:s, s:I, s:I, s:b, s:o, s:I, s:I}", "driver", "firecracker",
		"sandbox", name, "fork", fork, "firecracker", version, "memMib",
		(json_int_t)vm->limits.mem_mib, "vcpus", (json_int_t)vm->limits.vcpus,
		"rootfsLinked", linked, "rootfs", file_identity(&rst), "stateBytes",
		(json_int_t)(st[0].st_size + st[1].st_size), "savedBytes", (json_int_t)saved);
	_cleanup_free_ char *meta = xasprintf("%s/meta.json", tmp);
	if (json_dump_file(keep, meta, JSON_COMPACT) < 0)
		return err_set(err, EIO, "firecracker: cannot write `%s`", meta);
	if (durable && ((r = sync_path(meta, err)) < 0 || (r = sync_path(tmp, err)) < 0))
		return r;
	*ret_keep = TAKE_PTR(keep);
	return 0;
}

/* Saves the VM whole as `name` (Paused, then save_files) in a directory renamed into place
 * once complete. The VM stays paused on success; on failure it is as it was. */
static int save_vm(struct sandbox *sb, const char *name, bool fork, bool durable, json_t **ret_keep,
		   struct err *err)
{
	struct fc_vm *vm = sb->priv;
	if (!cgroup_id_valid(name))
		return err_set(err, EINVAL, "firecracker: sandbox id `%s` is too long to save",
			       sb->id);
	int r = fs_mkdir_p(fc_mod.saved_dir, 0700);
	if (r < 0)
		return err_sys(err, -r, "firecracker: cannot create `%s`", fc_mod.saved_dir);
	_cleanup_free_ char *final = saved_path(name, NULL);
	_cleanup_free_ char *tmp = xasprintf("%s/.tmp-%s", fc_mod.saved_dir, name);
	fs_rm_rf(tmp, NULL);
	if (mkdir(tmp, 0700) < 0)
		return err_sys(err, errno, "firecracker: cannot create `%s`", tmp);
	json_t *keep = NULL;
	if ((vm->frozen || (r = send_body(vm, "PATCH", "/vm", json_pack("{s:s}", "state", "Paused"),
					  err)) == 0) &&
	    (r = save_files(vm, tmp, name, fork, durable, &keep, err)) == 0 &&
	    rename(tmp, final) < 0)
		r = err_sys(err, errno, "firecracker: rename `%s`", tmp);
	if (r == 0) {
		if (durable)
			sync_path(fc_mod.saved_dir, NULL);
		*ret_keep = keep;
		return 0;
	}
	json_decref(keep);
	fs_rm_rf(tmp, NULL);
	if (!vm->frozen) {
		struct err e;
		if (send_body(vm, "PATCH", "/vm", json_pack("{s:s}", "state", "Resumed"), &e) < 0)
			log_warn("firecracker", "sandbox %s: resuming after a failed save: %s",
				 sb->id, e.msg);
	}
	return r;
}

/* What a save keeps, checked: a name of ours, and its files. */
static int saved_open(const json_t *keep, const char **ret_name, struct err *err)
{
	const char *name = json_string_value(json_object_get(keep, "sandbox"));
	if (!name || !cgroup_id_valid(name) ||
	    strcmp(json_string_value(json_object_get(keep, "driver")) ?: "", "firecracker") != 0)
		return err_set(err, EINVAL, "firecracker: not a saved VM's record");
	static const char *const files[] = { "vmstate", "memory", "meta.json" };
	for (size_t i = 0; i < ARRAY_SIZE(files); i++) {
		_cleanup_free_ char *p = saved_path(name, files[i]);
		struct stat st;
		if (lstat(p, &st) < 0 || !S_ISREG(st.st_mode))
			return err_set(err, ENOENT, "firecracker: the saved VM `%s` is missing", p);
	}
	*ret_name = name;
	return 0;
}

/* The save's rootfs: its link, or the template's file when it is still the very one. */
static char *saved_rootfs(const json_t *keep, const char *name, const struct template *t,
			  struct err *err)
{
	if (json_is_true(json_object_get(keep, "rootfsLinked")))
		return saved_path(name, "rootfs.ext4");
	struct stat st;
	if (!t->rootfs_img || stat(t->rootfs_img, &st) < 0 ||
	    !same_file(json_object_get(keep, "rootfs"), &st)) {
		err_set(err, ESTALE,
			"firecracker: the template image the saved VM ran on was replaced (a "
			"rebuild)");
		return NULL;
	}
	return xstrdup(t->rootfs_img);
}

/* Whether this server can load the save: the same Firecracker, the same machine. */
static int saved_matches(const struct config *cfg, const json_t *keep,
			 const struct sandbox_limits *l, struct err *err)
{
	struct fc_version v;
	int r = binary_version(cfg->fc_bin, &v, err);
	if (r < 0)
		return r;
	char have[32];
	snprintf(have, sizeof(have), "%u.%u.%u", v.major, v.minor, v.patch);
	const char *made = json_string_value(json_object_get(keep, "firecracker"));
	if (!made || strcmp(made, have) != 0)
		return err_set(err, ESTALE,
			       "firecracker: the VM was saved by Firecracker %s, this is %s: a "
			       "snapshot loads only in the version that made it",
			       made ? made : "?", have);
	if (json_integer_value(json_object_get(keep, "memMib")) != (json_int_t)l->mem_mib ||
	    json_integer_value(json_object_get(keep, "vcpus")) != (json_int_t)l->vcpus)
		return err_set(err, EINVAL,
			       "firecracker: the VM was saved with %lld MiB and %lld vCPUs, not "
			       "%u MiB and %u",
			       (long long)json_integer_value(json_object_get(keep, "memMib")),
			       (long long)json_integer_value(json_object_get(keep, "vcpus")),
			       l->mem_mib, l->vcpus);
	return 0;
}

static int fc_create(const struct config *cfg, const struct sandbox_spec *spec,
		     struct sandbox **ret, struct err *err)
{
	struct template *t = spec->tmpl;
	_cleanup_free_ char *snap = xasprintf("%s/firecracker", t->dir);
	_cleanup_free_ char *vmstate = xasprintf("%s/vmstate", snap);
	_cleanup_free_ char *memory = xasprintf("%s/memory", snap);
	_cleanup_free_ char *rootfs = t->rootfs_img ? xstrdup(t->rootfs_img) : NULL;
	const char *saved = NULL;
	int r;
	if (spec->hibernated) {
		if ((r = saved_open(spec->hibernated, &saved, err)) < 0 ||
		    (r = saved_matches(cfg, spec->hibernated, &spec->limits, err)) < 0)
			return r;
		free(vmstate);
		free(memory);
		free(rootfs);
		vmstate = saved_path(saved, "vmstate");
		memory = saved_path(saved, "memory");
		if (!(rootfs = saved_rootfs(spec->hibernated, saved, t, err)))
			return -err->errnum;
	} else if (access(vmstate, R_OK) < 0 || access(memory, R_OK) < 0) {
		return err_set(err, ENOENT, "template %s has no firecracker snapshot", t->name);
	}
	if (!rootfs)
		return err_set(err, ENOENT, "template %s has no rootfs.ext4", t->name);

	struct fc_vm *vm = NULL;
	if ((r = vm_start_net(cfg, spec->id, &spec->limits, spec->netns_path, &vm, err)) < 0)
		return r;
	vm->limits = spec->limits;
	int fd = -1;
	if ((r = restore(cfg, vm, t, rootfs, vmstate, memory, &fd, err)) < 0) {
		vm_discard(vm, spec->id);
		return r;
	}
	/* A hibernation's save is this sandbox now (its jail holds links to what it needs); a
	 * fork's serves the next one. */
	if (saved && !json_is_true(json_object_get(spec->hibernated, "fork"))) {
		_cleanup_free_ char *dir = saved_path(saved, NULL);
		if (fs_rm_rf(dir, NULL) < 0)
			log_warn("firecracker", "sandbox %s: cannot remove `%s`", spec->id, dir);
	}
	struct sandbox *sb = xcalloc(1, sizeof(*sb));
	sb->driver = &driver_firecracker;
	sb->id = xstrdup(spec->id);
	sb->agent_fd = fd;
	sb->pid = vm->vmm;
	sb->priv = vm;
	sb->record = json_pack("{s:s}", "jail", vm->jail_dir);
	if (vm->vmm > 0)
		proc_record_add(sb->record, vm->vmm);
	*ret = sb;
	return 0;
}

static void fc_destroy(struct sandbox *sb)
{
	struct fc_vm *vm = sb->priv;
	if (sb->agent_fd >= 0)
		close(sb->agent_fd);
	vm_discard(vm, sb->id);
	json_decref(sb->record);
	free(sb->id);
	free(sb);
}

static void fc_cleanup_stale(const struct config *cfg, const char *id, json_t *record)
{
	if (!cgroup_id_valid(id))
		return;
	_cleanup_free_ char *dir = fc_jail_dir(cfg->fc_jail_base, cfg->fc_bin, id);
	_cleanup_free_ char *netns = own_netns_path(cfg, id);
	const struct driver_stale stale = { .driver = "firecracker",
					    .what = "Firecracker",
					    .dir = dir };
	driver_cleanup_stale(&stale, id, record);
	tap_netns_remove(netns);
}

/* Freezes the VM's vCPUs, or lets them run again. */
static int fc_pause(struct sandbox *sb, bool pause, struct err *err)
{
	struct fc_vm *vm = sb->priv;
	int r = send_body(vm, "PATCH", "/vm",
			  json_pack("{s:s}", "state", pause ? "Paused" : "Resumed"), err);
	if (r == 0)
		vm->frozen = pause;
	return r;
}

static int fc_hibernate(struct sandbox *sb, json_t **ret_keep, struct err *err)
{
	int r = save_vm(sb, sb->id, false, true, ret_keep, err);
	if (r == 0)
		fc_destroy(sb);
	return r;
}

static int fc_fork_save(struct sandbox *sb, bool durable, json_t **ret_keep, struct err *err)
{
	char hex[9];
	random_hex(hex, 4);
	_cleanup_free_ char *name = xasprintf("%s-f%s", sb->id, hex);
	struct fc_vm *vm = sb->priv;
	int r = save_vm(sb, name, true, durable, ret_keep, err);
	if (r == 0 && !vm->frozen) {
		struct err e;
		if (send_body(vm, "PATCH", "/vm", json_pack("{s:s}", "state", "Resumed"), &e) < 0)
			log_warn("firecracker", "sandbox %s: resuming after its save: %s", sb->id,
				 e.msg);
	}
	return r;
}

static int fc_hibernated_claim(const json_t *keep, struct err *err)
{
	const char *name;
	return saved_open(keep, &name, err);
}

static void fc_hibernated_discard(const json_t *keep)
{
	const char *name = json_string_value(json_object_get(keep, "sandbox"));
	if (!name || !cgroup_id_valid(name))
		return;
	_cleanup_free_ char *dir = saved_path(name, NULL);
	if (fs_rm_rf(dir, NULL) < 0)
		log_warn("firecracker", "cannot remove `%s`", dir);
}

/* Removes what no record names: a save a crash orphaned, one half made. */
static void fc_hibernated_sweep(json_t *const *keeps, size_t n)
{
	_cleanup_closedir_ DIR *d = fc_mod.saved_dir ? opendir(fc_mod.saved_dir) : NULL;
	if (!d)
		return;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		bool named = false;
		for (size_t i = 0; i < n && !named; i++) {
			const char *id = json_string_value(json_object_get(keeps[i], "sandbox"));
			named = id && strcmp(id, de->d_name) == 0;
		}
		if (named)
			continue;
		_cleanup_free_ char *p = xasprintf("%s/%s", fc_mod.saved_dir, de->d_name);
		log_info("firecracker", "removing `%s`: no session or snapshot keeps it", p);
		if (fs_rm_rf(p, NULL) < 0)
			log_warn("firecracker", "cannot remove `%s`", p);
	}
}

static uint64_t fc_oom_kills(struct sandbox *sb)
{
	struct fc_vm *vm = sb->priv;
	return vm && vm->cg ? cgroup_oom_kills(vm->cg) : 0;
}

static int fc_usage(struct sandbox *sb, struct cgroup_usage *ret)
{
	struct fc_vm *vm = sb->priv;
	return vm && vm->cg ? cgroup_usage(vm->cg, ret, NULL) : -ENOENT;
}

const struct driver driver_firecracker = {
	.name = "firecracker",
	.isolation = "vm",
	.snapshots = true,
	.probe = fc_probe,
	.init = fc_init,
	.prepare = fc_prepare,
	.create = fc_create,
	.destroy = fc_destroy,
	.cleanup_stale = fc_cleanup_stale,
	.oom_kills = fc_oom_kills,
	.usage = fc_usage,
	.pause = fc_pause,
	.hibernate = fc_hibernate,
	.hibernate_keeps_processes = true,
	.fork_save = fc_fork_save,
	.hibernated_claim = fc_hibernated_claim,
	.hibernated_discard = fc_hibernated_discard,
	.hibernated_sweep = fc_hibernated_sweep,
};
