/* Tests of src/driver/vm.c: what both VM drivers' guests and VMMs get. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "driver/vm.h"

static void test_cmdline(void **state)
{
	struct vm_cmdline_opts o = { .machine = "panic=1 pci=off",
				     .channel = "vsock:5000",
				     .threads_max = vm_guest_threads_max(256),
				     .workspace_mib = 512 };
	char *c = vm_guest_cmdline(&o);
	assert_string_equal(c, "console=ttyS0 quiet panic=1 pci=off reboot=k root=/dev/vda "
			       "rootfstype=ext4 ro sysctl.vm.overcommit_memory=1 "
			       "sysctl.kernel.threads-max=320 init=/sbin/sandbox-agent "
			       "sandbox.channel=vsock:5000 sandbox.workspace_mib=512");
	free(c);
	/* No pids limit: the kernel's own threads-max. */
	o.threads_max = vm_guest_threads_max(0);
	c = vm_guest_cmdline(&o);
	assert_null(strstr(c, "threads-max"));
	assert_non_null(strstr(c, " sysctl.vm.overcommit_memory=1 "));
	free(c);
}

static void test_vmm_limits(void **state)
{
	const struct vm_vmm_needs needs = { .overhead_mib = 64, .min_pids = 16 };
	struct sandbox_limits lim = { .memory_bytes = 128u << 20, .pids_max = 256 };
	uint64_t mem;
	uint32_t pids;
	/* The sandbox's limit equals guest RAM: raised by the VMM's overhead. */
	vm_vmm_limits(&lim, 128, 1, &needs, &mem, &pids);
	assert_int_equal(mem, (128u + 64) << 20);
	assert_int_equal(pids, 256);
	/* A larger limit is kept; so is a pids limit above the VMM's threads. */
	lim.memory_bytes = 1u << 30;
	lim.pids_max = 4;
	vm_vmm_limits(&lim, 128, 2, &needs, &mem, &pids);
	assert_int_equal(mem, 1u << 30);
	assert_int_equal(pids, 16 + 2);
	/* No limits at all: what the VMM needs. */
	vm_vmm_limits(&(struct sandbox_limits){ 0 }, 256, 1, &needs, &mem, &pids);
	assert_int_equal(mem, (256u + 64) << 20);
	assert_int_equal(pids, 17);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cmdline),
		cmocka_unit_test(test_vmm_limits),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
