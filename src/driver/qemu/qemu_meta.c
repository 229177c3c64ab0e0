/* qemu_meta: a snapshot's meta.json, what it was made from. A snapshot is restored only when
 * every input matches: guest state saved under another kernel, rootfs, QEMU or machine shape
 * would restore into garbage (or not at all). Pure functions (tested directly). */
#include "driver/qemu/qemu.h"

#include <errno.h>
#include <inttypes.h>
#include <string.h>

json_t *qemu_meta_build(const struct qemu_snap_key *k)
{
	const struct qemu_machine *m = &k->m;
	return json_pack("{s:i, s:{s:s, s:s, s:I, s:I}, s:{s:s, s:I, s:I}, s:s, s:s, s:s, s:i, "
			 "s:i, s:s, s:i, s:I, s:i, s:s}",
			 "format", QEMU_SNAPSHOT_FORMAT, "kernel", "path", m->kernel, "sha256",
			 k->kernel_sha256, "size", (json_int_t)k->kernel_size, "mtimeNs",
			 (json_int_t)k->kernel_mtime_ns, "rootfs", "path", m->rootfs, "size",
			 (json_int_t)k->rootfs_size, "mtimeNs", (json_int_t)k->rootfs_mtime_ns,
			 "qemu", k->qemu_version ? k->qemu_version : "", "accel",
			 qemu_accel_name(m->accel), "channel", qemu_channel_name(m->channel),
			 "vcpus", (int)m->vcpus, "memMib", (int)m->mem_mib, "cmdline", m->cmdline,
			 "tscKhz", (int)k->tsc_khz, "workspaceMib", (json_int_t)k->workspace_mib,
			 "tasksMax", (int)k->tasks_max, "hostCpu", k->host_cpu ? k->host_cpu : "");
}

unsigned qemu_meta_tsc_khz(const json_t *meta)
{
	json_int_t v = json_integer_value(json_object_get(meta, "tscKhz"));
	return v > 0 && v < UINT32_MAX ? (unsigned)v : 0;
}

static const char *str_at(const json_t *o, const char *a, const char *b)
{
	const json_t *v = json_object_get(o, a);
	if (b)
		v = json_object_get(v, b);
	return json_string_value(v);
}

static bool int_at(const json_t *o, const char *a, const char *b, json_int_t *ret)
{
	const json_t *v = json_object_get(o, a);
	if (b)
		v = json_object_get(v, b);
	if (!json_is_integer(v))
		return false;
	*ret = json_integer_value(v);
	return true;
}

int qemu_meta_match(const json_t *meta, const struct qemu_snap_key *want, struct err *why)
{
	const struct qemu_machine *m = &want->m;
	json_int_t format, ksize, kmtime, rsize, rmtime, vcpus, mem, tsc, ws, tasks;
	const char *kpath = str_at(meta, "kernel", "path"),
		   *ksha = str_at(meta, "kernel", "sha256");
	const char *rpath = str_at(meta, "rootfs", "path"), *qemu = str_at(meta, "qemu", NULL);
	const char *accel = str_at(meta, "accel", NULL), *chan = str_at(meta, "channel", NULL);
	const char *cmdline = str_at(meta, "cmdline", NULL), *cpu = str_at(meta, "hostCpu", NULL);
	if (!json_is_object(meta) || !int_at(meta, "format", NULL, &format) ||
	    !int_at(meta, "kernel", "size", &ksize) ||
	    !int_at(meta, "kernel", "mtimeNs", &kmtime) ||
	    !int_at(meta, "rootfs", "size", &rsize) ||
	    !int_at(meta, "rootfs", "mtimeNs", &rmtime) || !int_at(meta, "vcpus", NULL, &vcpus) ||
	    !int_at(meta, "memMib", NULL, &mem) || !int_at(meta, "tscKhz", NULL, &tsc) ||
	    !int_at(meta, "workspaceMib", NULL, &ws) || !int_at(meta, "tasksMax", NULL, &tasks) ||
	    !kpath || !ksha || !rpath || !qemu || !accel || !chan || !cmdline || !cpu)
		return err_set(why, EINVAL, "its meta.json is incomplete");

	if (format != QEMU_SNAPSHOT_FORMAT)
		return err_set(why, ESTALE, "it has format %lld, this server makes format %d",
			       (long long)format, QEMU_SNAPSHOT_FORMAT);
	if (strcmp(kpath, m->kernel) != 0 || strcmp(ksha, want->kernel_sha256) != 0 ||
	    ksize != (json_int_t)want->kernel_size)
		return err_set(why, ESTALE, "the guest kernel %s changed", m->kernel);
	if (strcmp(rpath, m->rootfs) != 0 || rsize != (json_int_t)want->rootfs_size ||
	    rmtime != (json_int_t)want->rootfs_mtime_ns)
		return err_set(why, ESTALE, "the template's %s changed", m->rootfs);
	if (strcmp(qemu, want->qemu_version ? want->qemu_version : "") != 0)
		return err_set(why, ESTALE, "QEMU changed (%s, now %s)", qemu,
			       want->qemu_version ? want->qemu_version : "unknown");
	if (strcmp(accel, qemu_accel_name(m->accel)) != 0)
		return err_set(why, ESTALE, "it was made with %s, this server uses %s", accel,
			       qemu_accel_name(m->accel));
	if (strcmp(cpu, want->host_cpu ? want->host_cpu : "") != 0)
		return err_set(why, ESTALE, "the host CPU changed (%s, now %s)", cpu,
			       want->host_cpu ? want->host_cpu : "");
	if (strcmp(chan, qemu_channel_name(m->channel)) != 0)
		return err_set(why, ESTALE, "its agent channel is %s, this host uses %s", chan,
			       qemu_channel_name(m->channel));
	if (vcpus != (json_int_t)m->vcpus || mem != (json_int_t)m->mem_mib)
		return err_set(why, ESTALE,
			       "it has %lld vCPU(s) and %lld MiB, sandboxes get %u and %u MiB",
			       (long long)vcpus, (long long)mem, m->vcpus, m->mem_mib);
	if (ws != (json_int_t)want->workspace_mib)
		return err_set(why, ESTALE, "its workspace is %lld MiB, sandboxes get %" PRIu64,
			       (long long)ws, want->workspace_mib);
	if (tasks != (json_int_t)want->tasks_max)
		return err_set(why, ESTALE, "its guest allows %lld tasks, sandboxes get %u",
			       (long long)tasks, want->tasks_max);
	if (tsc != (json_int_t)want->tsc_khz)
		return err_set(why, ESTALE, "the host's TSC rate changed (%lld kHz, now %u kHz)",
			       (long long)tsc, want->tsc_khz);
	/* Anything else on the command line (a new option of this server, say). */
	if (strcmp(cmdline, m->cmdline) != 0)
		return err_set(why, ESTALE, "the guest kernel command line changed");
	return 0;
}
