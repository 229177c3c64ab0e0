/* Tests of src/driver/qemu_argv.c: QEMU's argv for snapshot boots and clones, the guest
 * kernel's command line, quoting. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "driver/qemu/qemu.h"

static const struct qemu_machine tcg_serial = {
	.accel = QEMU_ACCEL_TCG,
	.channel = QEMU_CHANNEL_SERIAL,
	.vcpus = 1,
	.mem_mib = 128,
	.kernel = "/a/vmlinux",
	.rootfs = "/t/base/rootfs.ext4",
	.cmdline = "console=ttyS0 init=/sbin/sandbox-agent",
};

static size_t count(char **argv)
{
	size_t n = 0;
	while (argv[n])
		n++;
	return n;
}

/* The value after the first `opt` whose value starts with `prefix` (NULL: any), or NULL. */
static const char *value_of(char **argv, const char *opt, const char *prefix)
{
	for (size_t i = 0; argv[i] && argv[i + 1]; i++)
		if (strcmp(argv[i], opt) == 0 &&
		    (!prefix || strncmp(argv[i + 1], prefix, strlen(prefix)) == 0))
			return argv[i + 1];
	return NULL;
}

static bool has(char **argv, const char *word)
{
	for (size_t i = 0; argv[i]; i++)
		if (strcmp(argv[i], word) == 0)
			return true;
	return false;
}

static void test_clone_of_a_snapshot(void **state)
{
	struct qemu_launch l = {
		.m = &tcg_serial,
		.qemu_bin = "/usr/bin/qemu-system-x86_64",
		.name = "sb-0123abcd",
		.mem_share = false,
		.incoming = true,
		.ram_fd = 10,
		.rootfs_fd = 11,
	};
	char **argv = qemu_argv(&l);
	assert_string_equal(argv[0], "/usr/bin/qemu-system-x86_64");
	assert_null(argv[count(argv)]);
	assert_string_equal(value_of(argv, "-name", NULL), "sb-0123abcd");
	assert_string_equal(value_of(argv, "-M", NULL),
			    "microvm,x-option-roms=off,memory-backend=mem");
	assert_string_equal(value_of(argv, "-accel", NULL), "tcg,thread=single,tb-size=64");
	assert_null(value_of(argv, "-cpu", NULL));
	assert_string_equal(value_of(argv, "-smp", NULL), "1");
	assert_string_equal(value_of(argv, "-m", NULL), "128M");
	/* Private copy-on-write mapping of the snapshot's RAM, inherited as a descriptor. */
	assert_string_equal(value_of(argv, "-object", NULL), "memory-backend-file,id=mem,size=128M,"
							     "mem-path=/proc/self/fd/3,share=off");
	assert_string_equal(value_of(argv, "-incoming", NULL), "defer");
	assert_true(has(argv, "-nodefaults"));
	assert_true(has(argv, "-no-user-config"));
	assert_true(has(argv, "-nographic"));
	assert_true(has(argv, "-no-reboot"));
	assert_string_equal(value_of(argv, "-kernel", NULL), "/proc/self/fd/5");
	assert_string_equal(value_of(argv, "-append", NULL),
			    "console=ttyS0 init=/sbin/sandbox-agent");
	assert_string_equal(value_of(argv, "-drive", NULL),
			    "id=root,file=/dev/fdset/1,format=raw,if=none,readonly=on");
	assert_string_equal(value_of(argv, "-add-fd", NULL), "fd=4,set=1,opaque=rootfs");
	assert_non_null(value_of(argv, "-device", "virtio-blk-device,drive=root"));
	/* The TAP, attached by the child before it gave up root. */
	assert_string_equal(value_of(argv, "-netdev", NULL), "tap,id=net0,fd=6");
	/* The agent's port and QMP, on sockets the driver bound and listens on. */
	assert_non_null(value_of(argv, "-device", "virtio-serial-device"));
	assert_string_equal(value_of(argv, "-chardev", "socket,id=agent"),
			    "socket,id=agent,fd=8,server=on,wait=off");
	assert_string_equal(value_of(argv, "-device", "virtserialport"),
			    "virtserialport,chardev=agent,name=agent");
	assert_null(value_of(argv, "-device", "vhost-vsock"));
	assert_string_equal(value_of(argv, "-chardev", "socket,id=qmp"),
			    "socket,id=qmp,fd=7,server=on,wait=off");
	assert_string_equal(value_of(argv, "-mon", NULL), "chardev=qmp,mode=control");
	assert_null(value_of(argv, "-qmp", NULL));
	/* QEMU's own seccomp filter, with everything it can forbid besides. */
	assert_string_equal(
		value_of(argv, "-sandbox", NULL),
		"on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny");
	/* No balloon: nothing that could punch holes in the template's RAM. */
	for (size_t i = 0; argv[i]; i++)
		assert_null(strstr(argv[i], "balloon"));
	/* No path of the host's: everything is a descriptor. */
	for (size_t i = 0; argv[i]; i++) {
		assert_null(strstr(argv[i], "/t/base/"));
		assert_null(strstr(argv[i], "/a/vmlinux"));
	}
	assert_string_equal(value_of(argv, "-serial", NULL), "chardev:console");
	qemu_argv_free(argv);
}

/* The virtio-blk devices, in order: what a restore matches against its snapshot. */
static void devices_of(char **argv, char *out, size_t n)
{
	out[0] = '\0';
	for (size_t i = 0; argv[i] && argv[i + 1]; i++)
		if (strcmp(argv[i], "-device") == 0 &&
		    strncmp(argv[i + 1], "virtio-blk-device", 17) == 0) {
			strncat(out, argv[i + 1], n - strlen(out) - 2);
			strcat(out, ";");
		}
}

/* Placeholders in the snapshot, images in a clone, the same devices either way. */
static void test_drives_are_placeholders_or_images(void **state)
{
	struct qemu_launch snap = {
		.m = &tcg_serial, .qemu_bin = "q", .name = "prep-1", .ram_fd = 10, .rootfs_fd = 11
	};
	char **a = qemu_argv(&snap);
	char want[2048], got[2048];
	devices_of(a, want, sizeof(want));
	assert_string_equal(want,
			    "virtio-blk-device,drive=root;"
			    "virtio-blk-device,drive=drive0,serial=sandbox-drive0,write-cache=on;"
			    "virtio-blk-device,drive=drive1,serial=sandbox-drive1,write-cache=on;"
			    "virtio-blk-device,drive=drive2,serial=sandbox-drive2,write-cache=on;"
			    "virtio-blk-device,drive=drive3,serial=sandbox-drive3,write-cache=on;"
			    "virtio-blk-device,drive=drive4,serial=sandbox-drive4,write-cache=on;");
	assert_string_equal(value_of(a, "-blockdev", NULL),
			    "driver=null-co,node-name=drive0,size=1099511627776,read-zeroes=on");
	assert_null(value_of(a, "-add-fd", "fd=10"));
	qemu_argv_free(a);

	struct qemu_drives d = { .fd = { 40, -1, 41, 42, -1 },
				 .ro = { false, false, false, true, false },
				 .overlay = { -1, -1, -1, 43, -1 } };
	struct qemu_launch clone = snap;
	clone.incoming = true;
	clone.drives = &d;
	a = qemu_argv(&clone);
	devices_of(a, got, sizeof(got));
	assert_string_equal(got, want);
	/* The disk, read-write, through the descriptor at its number. */
	assert_string_equal(value_of(a, "-add-fd", "fd=10"), "fd=10,set=2,opaque=drive0");
	assert_string_equal(value_of(a, "-blockdev", "driver=raw,node-name=drive0"),
			    "driver=raw,node-name=drive0,read-only=off,file.driver=file,"
			    "file.filename=/dev/fdset/2,file.locking=off");
	assert_string_equal(value_of(a, "-blockdev", "driver=null-co,node-name=drive1"),
			    "driver=null-co,node-name=drive1,size=1099511627776,read-zeroes=on");
	assert_string_equal(value_of(a, "-blockdev", "driver=raw,node-name=drive2"),
			    "driver=raw,node-name=drive2,read-only=off,file.driver=file,"
			    "file.filename=/dev/fdset/6,file.locking=off");
	/* A read-only volume: its image read-only, under a qcow2 overlay of its own. */
	assert_string_equal(value_of(a, "-blockdev", "driver=raw,node-name=image3"),
			    "driver=raw,node-name=image3,read-only=on,file.driver=file,"
			    "file.filename=/dev/fdset/8,file.locking=off");
	assert_string_equal(value_of(a, "-add-fd", "fd=18"), "fd=18,set=9,opaque=overlay3");
	assert_string_equal(value_of(a, "-blockdev", "driver=qcow2"),
			    "driver=qcow2,node-name=drive3,backing=image3,file.driver=file,"
			    "file.filename=/dev/fdset/9,file.locking=off");
	qemu_argv_free(a);
}

static void test_snapshot_boot_shares_its_ram_file(void **state)
{
	struct qemu_launch l = {
		.m = &tcg_serial,
		.qemu_bin = "qemu",
		.name = "prep-1",
		.mem_share = true,
		.ram_fd = 10,
		.rootfs_fd = 11,
	};
	char **argv = qemu_argv(&l);
	const char *obj = value_of(argv, "-object", NULL);
	assert_non_null(obj);
	assert_non_null(strstr(obj, ",share=on"));
	assert_null(value_of(argv, "-incoming", NULL));
	qemu_argv_free(argv);
}

static void test_cold_boot_has_anonymous_ram(void **state)
{
	struct qemu_launch l = {
		.m = &tcg_serial,
		.qemu_bin = "qemu",
		.name = "sb-1",
		.ram_fd = -1,
		.rootfs_fd = -1,
	};
	char **argv = qemu_argv(&l);
	assert_string_equal(value_of(argv, "-M", NULL), "microvm,x-option-roms=off");
	assert_null(value_of(argv, "-object", NULL));
	assert_null(value_of(argv, "-incoming", NULL));
	qemu_argv_free(argv);
}

static void test_kvm_vsock_and_vcpus(void **state)
{
	struct qemu_machine m = tcg_serial;
	m.accel = QEMU_ACCEL_KVM;
	m.channel = QEMU_CHANNEL_VSOCK;
	m.vcpus = 2;
	m.mem_mib = 512;
	struct qemu_launch l = {
		.m = &m,
		.qemu_bin = "qemu",
		.name = "sb-2",
		.vsock_cid = 77,
		.ram_fd = -1,
		.rootfs_fd = -1,
	};
	char **argv = qemu_argv(&l);
	assert_string_equal(value_of(argv, "-accel", NULL), "kvm");
	assert_string_equal(value_of(argv, "-cpu", NULL), "host");
	assert_string_equal(value_of(argv, "-smp", NULL), "2");
	assert_string_equal(value_of(argv, "-m", NULL), "512M");
	assert_string_equal(value_of(argv, "-device", "vhost-vsock"),
			    "vhost-vsock-device,guest-cid=77,vhostfd=9");
	assert_null(value_of(argv, "-device", "virtio-serial"));
	assert_null(value_of(argv, "-chardev", "socket,id=agent"));
	qemu_argv_free(argv);

	m.accel = QEMU_ACCEL_TCG;
	argv = qemu_argv(&l);
	/* More than one vCPU: multi-threaded TCG. */
	assert_string_equal(value_of(argv, "-accel", NULL), "tcg,thread=multi,tb-size=64");
	qemu_argv_free(argv);
}

static void test_inherited_descriptors_replace_paths(void **state)
{
	/* A clone gets the snapshot's RAM and the template's image as descriptors. */
	struct qemu_launch l = {
		.m = &tcg_serial,
		.qemu_bin = "qemu",
		.name = "sb-4",
		.incoming = true,
		.ram_fd = 10,
		.rootfs_fd = 11,
	};
	char **argv = qemu_argv(&l);
	assert_string_equal(value_of(argv, "-M", NULL),
			    "microvm,x-option-roms=off,memory-backend=mem");
	assert_string_equal(
		value_of(argv, "-object", NULL),
		"memory-backend-file,id=mem,size=128M,mem-path=/proc/self/fd/3,share=off");
	assert_string_equal(value_of(argv, "-drive", NULL),
			    "id=root,file=/dev/fdset/1,format=raw,if=none,readonly=on");
	assert_string_equal(value_of(argv, "-add-fd", NULL), "fd=4,set=1,opaque=rootfs");
	for (size_t i = 0; argv[i]; i++)
		assert_null(strstr(argv[i], "/t/base/"));
	qemu_argv_free(argv);
}

static void test_kernel_cmdline(void **state)
{
	struct qemu_cmdline_opts o = {
		.accel = QEMU_ACCEL_TCG,
		.channel = QEMU_CHANNEL_SERIAL,
		.tsc_khz = 2596128,
		.workspace_mib = 512,
	};
	char *c = qemu_cmdline(&o);
	assert_string_equal(c, "console=ttyS0 quiet panic=-1 reboot=k tsc_early_khz=2596128 "
			       "tsc=reliable root=/dev/vda rootfstype=ext4 ro "
			       "sysctl.vm.overcommit_memory=1 init=/sbin/sandbox-agent "
			       "sandbox.channel=serial:agent "
			       "sandbox.workspace_mib=512");
	free(c);

	/* The sandbox's pids limit, guest-wide. */
	o.tasks_max = 320;
	c = qemu_cmdline(&o);
	assert_non_null(strstr(c, " sysctl.vm.overcommit_memory=1 sysctl.kernel.threads-max=320 "));
	free(c);
	o.tasks_max = 0;

	/* KVM has a paravirtual clock: no TSC pinning. vsock: the agent's port. */
	o.accel = QEMU_ACCEL_KVM;
	o.channel = QEMU_CHANNEL_VSOCK;
	c = qemu_cmdline(&o);
	assert_null(strstr(c, "tsc"));
	assert_non_null(strstr(c, " sandbox.channel=vsock:5000 "));
	free(c);

	/* An unknown TSC rate leaves the guest to calibrate. */
	o.accel = QEMU_ACCEL_TCG;
	o.tsc_khz = 0;
	c = qemu_cmdline(&o);
	assert_null(strstr(c, "tsc"));
	free(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_clone_of_a_snapshot),
		cmocka_unit_test(test_drives_are_placeholders_or_images),
		cmocka_unit_test(test_snapshot_boot_shares_its_ram_file),
		cmocka_unit_test(test_cold_boot_has_anonymous_ram),
		cmocka_unit_test(test_kvm_vsock_and_vcpus),
		cmocka_unit_test(test_inherited_descriptors_replace_paths),
		cmocka_unit_test(test_kernel_cmdline),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
