/* jail_seccomp: the system-call filter of every jail, and the capabilities it keeps.
 *
 * A deny list on top of the capability drop: everything the agent and ordinary programs use is
 * allowed; what reaches kernel surfaces a sandbox has no business with (modules, kexec, BPF,
 * keyrings, tracing, mounts, new namespaces, clocks, raw I/O ports, handles) fails with EPERM,
 * as under Docker's default profile, so that programs see a normal "not permitted" error.
 *
 * On x86_64 the same rules also cover the i386 and x32 entry points: a 64-bit process can make
 * 32-bit system calls (int $0x80), and a filter written for x86_64 numbers alone would let
 * them through. Any other architecture is killed. */
#include "driver/jail/jail.h"

#include <errno.h>
#include <linux/capability.h>
#include <sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <unistd.h>

#include "util/cleanup.h"

#ifndef CLONE_NEWCGROUP
#define CLONE_NEWCGROUP 0x02000000
#endif
#ifndef CLONE_NEWTIME
#define CLONE_NEWTIME 0x00000080
#endif

/* Denied outright. A name this libseccomp does not know (it predates the system call) cannot
 * be filtered and is skipped: the capability drop is what stands in its way then. */
static const char *const denied[] = {
	/* kernel modules and kexec */
	"init_module",
	"finit_module",
	"delete_module",
	"create_module",
	"query_module",
	"get_kernel_syms",
	"kexec_load",
	"kexec_file_load",
	/* BPF, keyrings, perf, kernel log */
	"bpf",
	"keyctl",
	"add_key",
	"request_key",
	"perf_event_open",
	"syslog",
	"lookup_dcookie",
	/* tracing other processes */
	"ptrace",
	"process_vm_readv",
	"process_vm_writev",
	"pidfd_getfd",
	/* the machine */
	"reboot",
	"swapon",
	"swapoff",
	"acct",
	"vhangup",
	"nfsservctl",
	"quotactl",
	"quotactl_fd",
	"uselib",
	"_sysctl",
	"iopl",
	"ioperm",
	/* clocks are the host's */
	"settimeofday",
	"clock_settime",
	"clock_settime64",
	"clock_adjtime",
	"clock_adjtime64",
	"adjtimex",
	"stime",
	/* the mount tree was set up before the exec and stays as it is */
	"mount",
	"umount",
	"umount2",
	"pivot_root",
	"move_mount",
	"open_tree",
	"fsopen",
	"fsmount",
	"fspick",
	"mount_setattr",
	/* namespaces of others */
	"setns",
	/* file handles bypass path-based confinement */
	"open_by_handle_at",
	"name_to_handle_at",
	/* userfaultfd stalls kernel paths at will; io_uring is a large attack surface that
	 * seccomp cannot see into (libuv and others fall back to threads) */
	"userfaultfd",
	"io_uring_setup",
	"io_uring_enter",
	"io_uring_register",
};

/* Namespace flags that unshare() and clone() may not be given. */
static const unsigned long ns_flags[] = {
	CLONE_NEWNS,  CLONE_NEWUTS, CLONE_NEWIPC,    CLONE_NEWUSER,
	CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWCGROUP,
};

/* personality() flags that weaken the process's own memory layout protections. */
static const unsigned long unsafe_personality[] = {
	ADDR_NO_RANDOMIZE,
	ADDR_COMPAT_LAYOUT,
	MMAP_PAGE_ZERO,
	READ_IMPLIES_EXEC,
};

uint64_t jail_caps_keep(void)
{
	static const int keep[] = {
		CAP_CHOWN,      CAP_DAC_OVERRIDE, CAP_FOWNER,
		CAP_FSETID,     CAP_KILL,         CAP_SETGID,
		CAP_SETUID,     CAP_SETPCAP,      CAP_NET_BIND_SERVICE,
		CAP_SYS_CHROOT, CAP_AUDIT_WRITE,  CAP_SETFCAP,
	};
	uint64_t mask = 0;
	for (size_t i = 0; i < ARRAY_SIZE(keep); i++)
		mask |= 1ULL << keep[i];
	return mask;
}

static void ctx_release(scmp_filter_ctx *ctx)
{
	if (*ctx)
		seccomp_release(*ctx);
}

static int deny(scmp_filter_ctx ctx, const char *name, uint32_t action, unsigned n,
		const struct scmp_arg_cmp *cmp, struct err *err)
{
	int nr = seccomp_syscall_resolve_name(name);
	if (nr == __NR_SCMP_ERROR)
		return 0;
	int r = seccomp_rule_add_array(ctx, action, nr, n, cmp);
	if (r < 0)
		return err_sys(err, -r, "jail: seccomp rule for %s", name);
	return 0;
}

static int add_rules(scmp_filter_ctx ctx, struct err *err)
{
	const uint32_t eperm = SCMP_ACT_ERRNO(EPERM);
	int r;

	for (size_t i = 0; i < ARRAY_SIZE(denied); i++)
		if ((r = deny(ctx, denied[i], eperm, 0, NULL, err)) < 0)
			return r;

	/* New namespaces: each flag is its own rule, since a rule's comparisons are ANDed. */
	for (size_t i = 0; i < ARRAY_SIZE(ns_flags); i++) {
		struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_MASKED_EQ, ns_flags[i], ns_flags[i]);
		if ((r = deny(ctx, "unshare", eperm, 1, &c, err)) < 0 ||
		    (r = deny(ctx, "clone", eperm, 1, &c, err)) < 0)
			return r;
	}
	struct scmp_arg_cmp newtime = SCMP_A0(SCMP_CMP_MASKED_EQ, CLONE_NEWTIME, CLONE_NEWTIME);
	if ((r = deny(ctx, "unshare", eperm, 1, &newtime, err)) < 0)
		return r;
	/* clone3 passes its flags in memory, out of the filter's sight. ENOSYS makes libc fall
	 * back to clone(), whose flags are checked above. */
	if ((r = deny(ctx, "clone3", SCMP_ACT_ERRNO(ENOSYS), 0, NULL, err)) < 0)
		return r;

	/* personality(): allowed unless it sets an unsafe flag; 0xffffffff only queries. Bit 31
	 * is set in the query alone, so "unsafe flag with bit 31 clear" and "bit 31 set with any
	 * other bit clear" cover every denied value. */
	for (size_t i = 0; i < ARRAY_SIZE(unsafe_personality); i++) {
		unsigned long f = unsafe_personality[i];
		struct scmp_arg_cmp c = SCMP_A0(SCMP_CMP_MASKED_EQ, f | 0x80000000UL, f);
		if ((r = deny(ctx, "personality", eperm, 1, &c, err)) < 0)
			return r;
	}
	for (unsigned bit = 0; bit < 31; bit++) {
		struct scmp_arg_cmp c =
			SCMP_A0(SCMP_CMP_MASKED_EQ, 0x80000000UL | (1UL << bit), 0x80000000UL);
		if ((r = deny(ctx, "personality", eperm, 1, &c, err)) < 0)
			return r;
	}
	return 0;
}

int jail_seccomp_build(struct sock_fprog *ret, struct err *err)
{
	_cleanup_(ctx_release) scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
	if (!ctx)
		return err_set(err, ENOMEM, "jail: seccomp_init failed");
	int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	if (r < 0)
		return err_sys(err, -r, "jail: seccomp bad-architecture action");
	/* The filter is exported, not loaded here: no_new_privs is the plan's own step. */
	seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0);

	if (seccomp_arch_native() == SCMP_ARCH_X86_64) {
		uint32_t extra[] = { SCMP_ARCH_X86, SCMP_ARCH_X32 };
		for (size_t i = 0; i < ARRAY_SIZE(extra); i++) {
			r = seccomp_arch_add(ctx, extra[i]);
			if (r < 0 && r != -EEXIST)
				return err_sys(err, -r, "jail: seccomp: add a compat architecture");
		}
	}
	if ((r = add_rules(ctx, err)) < 0)
		return r;

	/* libseccomp 2.5 exports to a descriptor only; a memfd turns that into a buffer. */
	_cleanup_close_ int fd = memfd_create("jail-seccomp", MFD_CLOEXEC);
	if (fd < 0)
		return err_sys(err, errno, "jail: memfd_create");
	if ((r = seccomp_export_bpf(ctx, fd)) < 0)
		return err_sys(err, -r, "jail: seccomp_export_bpf");
	off_t size = lseek(fd, 0, SEEK_END);
	if (size <= 0 || size % (off_t)sizeof(struct sock_filter) != 0 ||
	    size / (off_t)sizeof(struct sock_filter) > BPF_MAXINSNS)
		return err_set(err, EINVAL, "jail: seccomp: unexpected filter size %lld",
			       (long long)size);
	_cleanup_free_ struct sock_filter *insns = xmalloc((size_t)size);
	if (pread(fd, insns, (size_t)size, 0) != size)
		return err_set(err, EIO, "jail: seccomp: cannot read the exported filter back");
	ret->len = (unsigned short)(size / (off_t)sizeof(struct sock_filter));
	ret->filter = TAKE_PTR(insns);
	return 0;
}
