#include "driver/vm.h"

#include <inttypes.h>
#include <stdio.h>

#include "util/cleanup.h"

char *vm_guest_cmdline(const struct vm_cmdline_opts *o)
{
	char tasks[48] = "";
	if (o->threads_max)
		snprintf(tasks, sizeof(tasks), " sysctl.kernel.threads-max=%u", o->threads_max);
	/* quiet: every console byte is an emulated UART write, and the console is for
	 * failures; panics and OOM kills still print. */
	return xasprintf("console=ttyS0 quiet %s reboot=k%s root=/dev/vda rootfstype=ext4 ro "
			 "sysctl.vm.overcommit_memory=1%s init=/sbin/sandbox-agent "
			 "sandbox.channel=%s sandbox.workspace_mib=%" PRIu64,
			 o->machine, o->clock ? o->clock : "", tasks, o->channel, o->workspace_mib);
}

unsigned vm_guest_threads_max(uint32_t pids_max)
{
	return pids_max ? pids_max + VM_GUEST_KTHREADS : 0;
}

void vm_vmm_limits(const struct sandbox_limits *lim, unsigned mem_mib, unsigned vcpus,
		   const struct vm_vmm_needs *needs, uint64_t *ret_memory_bytes,
		   uint32_t *ret_pids_max)
{
	uint64_t memory = ((uint64_t)mem_mib + needs->overhead_mib) << 20;
	uint32_t pids = needs->min_pids + vcpus;
	*ret_memory_bytes = lim->memory_bytes > memory ? lim->memory_bytes : memory;
	*ret_pids_max = lim->pids_max > pids ? lim->pids_max : pids;
}
