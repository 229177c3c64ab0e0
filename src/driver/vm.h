/* vm: what the VM drivers (qemu, firecracker) share, so that their guests behave alike: the
 * guest kernel's command line with the guest-wide limits it carries, and the host resources a
 * VMM process needs beyond its guest. */
#pragma once

#include <stdint.h>

#include "driver/driver.h"

/* The vsock port the agent listens on when its channel is vsock. */
#define VM_AGENT_VSOCK_PORT 5000

/* The guest kernel's own threads (about 30 at rest; kworkers come and go), on top of the
 * sandbox's pids limit in the guest's threads-max. */
#define VM_GUEST_KTHREADS 64

struct vm_cmdline_opts {
	const char *machine;  /* the VMM's arguments: panic, bus ("panic=-1"; "panic=1 pci=off") */
	const char *clock;    /* clock arguments, each after a space; "" for none */
	const char *channel;  /* where the agent finds the host: "serial:agent", "vsock:5000" */
	unsigned threads_max; /* the guest's threads-max (0: the kernel's default) */
	uint64_t workspace_mib; /* size of the guest's /workspace */
};

/* The guest kernel's command line (caller frees). Every VM driver's guest gets the same
 * console, root device, init and agent arguments, memory overcommit as the host has for the
 * jail (a process that takes more memory than the guest has is OOM-killed, and the driver
 * counts it, rather than one large allocation failing while smaller ones succeed), and the
 * sandbox's pids limit as the guest-wide threads-max (a fork bomb stays a fork bomb of the
 * guest's, not a hung guest). */
char *vm_guest_cmdline(const struct vm_cmdline_opts *o);

/* The guest's threads-max for a sandbox's pids limit: the limit plus the guest kernel's own
 * threads; 0 (the kernel's default) when the sandbox has no limit. */
unsigned vm_guest_threads_max(uint32_t pids_max);

/* What a VMM process needs of the host besides its guest's RAM and vCPU threads. */
struct vm_vmm_needs {
	unsigned overhead_mib; /* its heap, caches, device buffers */
	unsigned min_pids;     /* its threads besides one per vCPU */
};

/* The host cgroup limits of a VMM running a guest of mem_mib and vcpus: the sandbox's own,
 * raised to guest RAM plus the VMM's overhead and to its threads. Below those the kernel
 * would kill or starve the VMM itself, not a process in the guest (which has its own OOM
 * killer and threads-max for that). */
void vm_vmm_limits(const struct sandbox_limits *lim, unsigned mem_mib, unsigned vcpus,
		   const struct vm_vmm_needs *needs, uint64_t *ret_memory_bytes,
		   uint32_t *ret_pids_max);
