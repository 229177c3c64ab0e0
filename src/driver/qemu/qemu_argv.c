/* qemu_argv: QEMU's command line and the guest kernel's. Pure functions (tested directly). */
#include "driver/qemu/qemu.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "driver/vm.h"
#include "util/cleanup.h"

const char *qemu_accel_name(enum qemu_accel a)
{
	return a == QEMU_ACCEL_KVM ? "kvm" : "tcg";
}

const char *qemu_channel_name(enum qemu_channel c)
{
	return c == QEMU_CHANNEL_VSOCK ? "vsock" : "serial";
}

struct argv {
	char **v;
	size_t n;
	size_t cap;
};

static void add(struct argv *a, char *s)
{
	if (a->n + 2 > a->cap) {
		a->cap = a->cap ? a->cap * 2 : 64;
		a->v = xrealloc(a->v, a->cap * sizeof(*a->v));
	}
	a->v[a->n++] = s;
	a->v[a->n] = NULL;
}

static void add2(struct argv *a, const char *opt, char *val)
{
	add(a, xstrdup(opt));
	add(a, val);
}

/* The disk and volume drives (qemu.h): the same devices, with the same properties, whether
 * placeholders or bound, so that a clone's device state matches its snapshot's. A bound one
 * reads and writes its image through the descriptor (an fd set, as the root), without
 * QEMU's image locking: the volume rules (session/volume.c) decide who shares an image. */
static void add_drives(struct argv *a, const struct qemu_drives *d)
{
	for (unsigned i = 0; i < QEMU_DRIVES; i++) {
		unsigned set = 2 + 2 * i;
		if (d && d->fd[i] >= 0) {
			bool over = d->ro[i] && d->overlay[i] >= 0;
			add2(a, "-add-fd",
			     xasprintf("fd=%u,set=%u,opaque=drive%u", QEMU_FD_DRIVE0 + i, set, i));
			add2(a, "-blockdev",
			     xasprintf("driver=raw,node-name=%s%u,read-only=%s,file.driver=file,"
				       "file.filename=/dev/fdset/%u,file.locking=off",
				       over ? "image" : "drive", i, d->ro[i] ? "on" : "off", set));
			if (over) {
				add2(a, "-add-fd",
				     xasprintf("fd=%u,set=%u,opaque=overlay%u",
					       QEMU_FD_OVERLAY0 + i, set + 1, i));
				add2(a, "-blockdev",
				     xasprintf("driver=qcow2,node-name=drive%u,backing=image%u,"
					       "file.driver=file,file.filename=/dev/fdset/%u,"
					       "file.locking=off",
					       i, i, set + 1));
			}
		} else {
			add2(a, "-blockdev",
			     xasprintf("driver=null-co,node-name=drive%u,size=%llu,read-zeroes=on",
				       i, QEMU_SLOT_BYTES));
		}
		char serial[32];
		snprintf(serial, sizeof(serial), QEMU_DRIVE_SERIAL, i);
		add2(a, "-device",
		     xasprintf("virtio-blk-device,drive=drive%u,serial=%s,write-cache=on", i,
			       serial));
	}
}

char **qemu_argv(const struct qemu_launch *l)
{
	const struct qemu_machine *m = l->m;
	struct argv a = { 0 };
	add(&a, xstrdup(l->qemu_bin));
	add2(&a, "-name", xstrdup(l->name));

	/* microvm: no PCI, no firmware to speak of, virtio on MMIO. Option ROMs only slow the
	 * start. The RAM backend, when there is one, is the file snapshots share. */
	bool ram_file = l->ram_fd >= 0;
	add2(&a, "-M",
	     xasprintf("microvm,x-option-roms=off%s", ram_file ? ",memory-backend=mem" : ""));
	if (m->accel == QEMU_ACCEL_KVM) {
		add2(&a, "-accel", xstrdup("kvm"));
		add2(&a, "-cpu", xstrdup("host"));
	} else {
		/* One vCPU runs on one thread either way; with more, multi-threaded TCG lets
		 * them use more than one host core. */
		add2(&a, "-accel",
		     xasprintf("tcg,thread=%s,tb-size=%u", m->vcpus > 1 ? "multi" : "single",
			       QEMU_TCG_TB_MIB));
	}
	add2(&a, "-smp", xasprintf("%u", m->vcpus));
	add2(&a, "-m", xasprintf("%uM", m->mem_mib));
	/* QEMU 7.2 opens a RAM file by path only: its own /proc/self/fd names the descriptor. */
	if (ram_file)
		add2(&a, "-object",
		     xasprintf("memory-backend-file,id=mem,size=%uM,mem-path=/proc/self/fd/%d,"
			       "share=%s",
			       m->mem_mib, QEMU_FD_RAM, l->mem_share ? "on" : "off"));
	add(&a, xstrdup("-nodefaults"));
	add(&a, xstrdup("-no-user-config"));
	add(&a, xstrdup("-nographic"));
	/* A guest reboot (panic=-1 turns a panic into one) ends QEMU: sandboxes never reboot. */
	add(&a, xstrdup("-no-reboot"));
	add2(&a, "-kernel", xasprintf("/proc/self/fd/%d", QEMU_FD_KERNEL));
	add2(&a, "-append", xstrdup(m->cmdline));

	/* As an fd set: QEMU then uses the descriptor itself instead of reopening the image,
	 * which its uid may not be allowed to. */
	add2(&a, "-add-fd", xasprintf("fd=%d,set=1,opaque=rootfs", QEMU_FD_ROOTFS));
	add2(&a, "-drive", xstrdup("id=root,file=/dev/fdset/1,format=raw,if=none,readonly=on"));
	add2(&a, "-device", xstrdup("virtio-blk-device,drive=root"));
	add_drives(&a, l->drives);
	/* Entropy from the host for the guest's RNG, on top of what `resume` brings. */
	add2(&a, "-device", xstrdup("virtio-rng-device"));

	/* The NIC, on the TAP `tap0` of the network namespace QEMU runs in: the sandbox's (the
	 * net module's, routed) or, without one, a new empty namespace where the child creates
	 * it (its link stays down: nothing to reach). The child attaches to it before giving up
	 * root, and QEMU gets the descriptor. Snapshot and clones thus always have the same
	 * device. */
	add2(&a, "-netdev", xasprintf("tap,id=net0,fd=%d", QEMU_FD_TAP));
	add2(&a, "-device", xstrdup("virtio-net-device,netdev=net0"));

	if (m->channel == QEMU_CHANNEL_VSOCK) {
		add2(&a, "-device",
		     xasprintf("vhost-vsock-device,guest-cid=%u,vhostfd=%d", l->vsock_cid,
			       QEMU_FD_VHOST));
	} else {
		add2(&a, "-device", xstrdup("virtio-serial-device"));
		add2(&a, "-chardev",
		     xasprintf("socket,id=agent,fd=%d,server=on,wait=off", QEMU_FD_AGENT));
		add2(&a, "-device",
		     xstrdup("virtserialport,chardev=agent,name=" QEMU_AGENT_PORT_NAME));
	}

	/* The serial console goes to QEMU's stdout, which the driver captures with a cap. */
	add2(&a, "-chardev", xstrdup("stdio,id=console,signal=off"));
	add2(&a, "-serial", xstrdup("chardev:console"));
	add2(&a, "-chardev", xasprintf("socket,id=qmp,fd=%d,server=on,wait=off", QEMU_FD_QMP));
	add2(&a, "-mon", xstrdup("chardev=qmp,mode=control"));
	if (!l->unconfined)
		add2(&a, "-sandbox", xstrdup(QEMU_SANDBOX_OPT));
	if (l->incoming)
		add2(&a, "-incoming", xstrdup("defer"));
	return a.v;
}

void qemu_argv_free(char **argv)
{
	if (!argv)
		return;
	for (char **p = argv; *p; p++)
		free(*p);
	free(argv);
}

const struct vm_vmm_needs qemu_vmm_needs = { .overhead_mib = QEMU_OVERHEAD_MIB,
					     .min_pids = QEMU_MIN_PIDS };

char *qemu_cmdline(const struct qemu_cmdline_opts *o)
{
	char channel[64];
	if (o->channel == QEMU_CHANNEL_VSOCK)
		snprintf(channel, sizeof(channel), "vsock:%u", VM_AGENT_VSOCK_PORT);
	else
		snprintf(channel, sizeof(channel), "serial:%s", QEMU_AGENT_PORT_NAME);
	char tsc[64] = "";
	if (o->accel == QEMU_ACCEL_TCG && o->tsc_khz)
		snprintf(tsc, sizeof(tsc), " tsc_early_khz=%u tsc=reliable", o->tsc_khz);
	/* panic=-1 reboots at once, which ends QEMU. */
	struct vm_cmdline_opts v = { .machine = "panic=-1",
				     .clock = tsc,
				     .channel = channel,
				     .threads_max = o->tasks_max,
				     .workspace_mib = o->workspace_mib };
	return vm_guest_cmdline(&v);
}
