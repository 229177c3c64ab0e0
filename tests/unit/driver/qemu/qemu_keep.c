/* Tests of src/driver/qemu/qemu_keep.c without a VM: a saved VM's record read back, and every
 * way a record or the files it names can be wrong (a record is the daemon's own, from its
 * state database, but the files under it are on a disk anyone with root may have touched):
 * another driver's record, ids that are paths, machines this host cannot run, a template image
 * changed in place, a symlink or a missing file in the saved directory. Then a resume's
 * commit, the names a resumed VM's disk and image go by, and the sweeps at start. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "driver/qemu/qemu.h"
#include "util/cleanup.h"
#include "util/fs.h"

#define ID "sb-0123456789ab"

struct fixture {
	char dir[64];
	char *state;
	char *saved; /* state/qemu-saved/ID */
	char *rootfs;
	struct qemu_host h;
};

static void write_file(const char *path, const char *content)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, content, strlen(content)), (ssize_t)strlen(content));
	close(fd);
}

static char *path_in(const char *dir, const char *name)
{
	return xasprintf("%s/%s", dir, name);
}

static int setup(void **state)
{
	struct fixture *f = xcalloc(1, sizeof(*f));
	snprintf(f->dir, sizeof(f->dir), "/tmp/test-qemu-keep-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	f->state = path_in(f->dir, "state");
	f->saved = xasprintf("%s/%s/%s", f->state, QEMU_KEEP_DIR, ID);
	assert_int_equal(fs_mkdir_p(f->saved, 0700), 0);
	f->rootfs = path_in(f->dir, "rootfs.ext4");
	write_file(f->rootfs, "not really ext4");
	_cleanup_free_ char *st = path_in(f->saved, "state.mig");
	write_file(st, "QEVM");
	_cleanup_free_ char *disk = path_in(f->saved, "disk.img");
	write_file(disk, "a disk");
	_cleanup_free_ char *link_path = path_in(f->saved, "rootfs.ext4");
	assert_int_equal(link(f->rootfs, link_path), 0);
	f->h = (struct qemu_host){
		.qemu_version = "QEMU emulator version 7.2.22",
		.kernel = "/nonexistent/vmlinux",
		.accel = QEMU_ACCEL_TCG,
		.channel = QEMU_CHANNEL_SERIAL,
		.host_cpu = "",
	};
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	fs_rm_rf(f->dir, NULL);
	free(f->state);
	free(f->saved);
	free(f->rootfs);
	free(f);
	return 0;
}

/* The record qemu_keep_save writes for the fixture's saved VM. */
static json_t *record(const struct fixture *f)
{
	struct stat st;
	assert_int_equal(stat(f->rootfs, &st), 0);
	json_int_t mtime = (json_int_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
	return json_pack("{s:s, s:s, s:{s:s, s:s, s:i, s:i, s:s, s:i}, s:s, s:s, "
			 "s:{s:b, s:I, s:I, s:I, s:I}, s:b, s:I, s:I}",
			 "driver", "qemu", "sandbox", ID, "machine", "accel", "tcg", "channel",
			 "serial", "vcpus", 1, "memMib", 128, "cmdline", "console=hvc0", "vsockCid",
			 0, "qemuVersion", f->h.qemu_version, "hostCpu", "", "rootfs", "linked", 1,
			 "dev", (json_int_t)st.st_dev, "ino", (json_int_t)st.st_ino, "size",
			 (json_int_t)st.st_size, "mtimeNs", mtime, "disk", 1, "diskBytes",
			 (json_int_t)6, "stateBytes", (json_int_t)4);
}

static int open_rec(struct fixture *f, json_t *rec, struct err *e)
{
	struct qemu_kept k;
	int r = qemu_keep_open(&f->h, f->state, rec, f->rootfs, &k, e);
	if (r == 0)
		qemu_kept_close(&k);
	return r;
}

static void test_a_saved_vm_opens_as_it_was_saved(void **state)
{
	struct fixture *f = *state;
	json_auto_t *rec = record(f);
	struct qemu_kept k;
	struct err e;
	assert_int_equal(qemu_keep_open(&f->h, f->state, rec, f->rootfs, &k, &e), 0);
	assert_int_equal(k.m.vcpus, 1);
	assert_int_equal(k.m.mem_mib, 128);
	assert_string_equal(k.m.cmdline, "console=hvc0");
	assert_true(k.state_fd >= 0 && k.disk_fd >= 0 && k.rootfs_fd >= 0);
	/* The disk is opened for writing: QEMU binds it read-write. */
	assert_int_equal(fcntl(k.disk_fd, F_GETFL) & O_ACCMODE, O_RDWR);
	char buf[8] = { 0 };
	assert_int_equal(read(k.state_fd, buf, 4), 4);
	assert_string_equal(buf, "QEVM");
	qemu_kept_close(&k);
	assert_int_equal(k.state_fd, -1);
	assert_null(k.m.cmdline);
	assert_int_equal(qemu_keep_check(f->state, rec, &e), 0);
}

static void test_records_that_are_not_a_saved_vms(void **state)
{
	struct fixture *f = *state;
	struct err e;
	json_auto_t *not_object = json_string("qemu");
	assert_int_equal(open_rec(f, not_object, &e), -EINVAL);
	static const char *const ids[] = { "../../etc", "sb/../x",       "",
					   "..",        "sb-ok/../../x", "SB-UPPER" };
	for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++) {
		json_auto_t *rec = record(f);
		json_object_set_new(rec, "sandbox", json_string(ids[i]));
		assert_int_equal(open_rec(f, rec, &e), -EINVAL);
		assert_int_equal(qemu_keep_check(f->state, rec, &e), -EINVAL);
	}
	json_auto_t *jail = record(f);
	json_object_set_new(jail, "driver", json_string("jail"));
	assert_int_equal(open_rec(f, jail, &e), -EINVAL);
	json_auto_t *no_id = record(f);
	json_object_del(no_id, "sandbox");
	assert_int_equal(open_rec(f, no_id, &e), -EINVAL);
	/* Machines that no QEMU should be asked for. */
	static const char *const keys[] = { "vcpus", "memMib", "vcpus", "memMib" };
	static const json_int_t values[] = { 0, 0, 100000, (json_int_t)1 << 40 };
	for (size_t i = 0; i < 4; i++) {
		json_auto_t *rec = record(f);
		json_object_set_new(json_object_get(rec, "machine"), keys[i],
				    json_integer(values[i]));
		assert_int_equal(open_rec(f, rec, &e), -EINVAL);
	}
	json_auto_t *no_cmdline = record(f);
	json_object_del(json_object_get(no_cmdline, "machine"), "cmdline");
	assert_int_equal(open_rec(f, no_cmdline, &e), -EINVAL);
}

static void test_a_machine_this_host_cannot_restore(void **state)
{
	struct fixture *f = *state;
	struct err e;
	json_auto_t *kvm = record(f);
	json_object_set_new(json_object_get(kvm, "machine"), "accel", json_string("kvm"));
	assert_int_equal(open_rec(f, kvm, &e), -EXDEV);
	assert_non_null(strstr(e.msg, "kvm"));
	json_auto_t *vsock = record(f);
	json_object_set_new(json_object_get(vsock, "machine"), "channel", json_string("vsock"));
	assert_int_equal(open_rec(f, vsock, &e), -EXDEV);
	json_auto_t *other = record(f);
	json_object_set_new(other, "qemuVersion", json_string("QEMU emulator version 9.0"));
	assert_int_equal(open_rec(f, other, &e), -EXDEV);
	assert_non_null(strstr(e.msg, "another QEMU"));
	/* Under KVM the host CPU counts too. */
	f->h.accel = QEMU_ACCEL_KVM;
	f->h.host_cpu = "Some CPU";
	json_auto_t *cpu = record(f);
	json_object_set_new(json_object_get(cpu, "machine"), "accel", json_string("kvm"));
	json_object_set_new(cpu, "hostCpu", json_string("Another CPU"));
	assert_int_equal(open_rec(f, cpu, &e), -EXDEV);
	json_object_set_new(cpu, "hostCpu", json_string("Some CPU"));
	assert_int_equal(open_rec(f, cpu, &e), 0);
}

static void test_a_template_image_changed_in_place_is_refused(void **state)
{
	struct fixture *f = *state;
	struct err e;
	json_auto_t *rec = record(f);
	/* The link is the same file: written through the template's path, it changed. */
	write_file(f->rootfs, "other bytes, longer");
	assert_int_equal(open_rec(f, rec, &e), -ESTALE);
	assert_non_null(strstr(e.msg, "changed"));
	/* Not linked: the template's file must be the very one recorded. */
	json_auto_t *unlinked = record(f);
	json_object_set_new(json_object_get(unlinked, "rootfs"), "linked", json_false());
	_cleanup_free_ char *link_path = path_in(f->saved, "rootfs.ext4");
	assert_int_equal(unlink(link_path), 0);
	assert_int_equal(open_rec(f, unlinked, &e), 0);
	/* Replaced (a rebuild): another inode. */
	_cleanup_free_ char *tmp = path_in(f->dir, "new.ext4");
	write_file(tmp, "other bytes, longer");
	assert_int_equal(rename(tmp, f->rootfs), 0);
	assert_int_equal(open_rec(f, unlinked, &e), -ESTALE);
}

static void test_files_missing_or_not_files(void **state)
{
	struct fixture *f = *state;
	struct err e;
	json_auto_t *rec = record(f);
	_cleanup_free_ char *disk = path_in(f->saved, "disk.img");
	_cleanup_free_ char *st = path_in(f->saved, "state.mig");
	/* A symlink where a file of the save should be is not followed. */
	assert_int_equal(rename(st, disk), 0);
	assert_int_equal(symlink("/etc/passwd", st), 0);
	assert_true(open_rec(f, rec, &e) < 0);
	assert_int_equal(qemu_keep_check(f->state, rec, &e), -ENOENT);
	assert_int_equal(unlink(st), 0);
	assert_int_equal(rename(disk, st), 0);
	/* It had a disk, and the disk is gone. */
	assert_int_equal(open_rec(f, rec, &e), -ENOENT);
	assert_non_null(strstr(e.msg, "disk.img"));
	json_object_set_new(rec, "disk", json_false());
	assert_int_equal(open_rec(f, rec, &e), 0);
	/* The whole save gone. */
	qemu_keep_remove(f->state, ID);
	struct stat sb;
	assert_int_equal(stat(f->saved, &sb), -1);
	assert_int_equal(open_rec(f, rec, &e), -ENOENT);
	assert_int_equal(qemu_keep_check(f->state, rec, &e), -ENOENT);
	/* Nothing to remove is fine; a path for an id is never made. */
	qemu_keep_remove(f->state, ID);
	qemu_keep_remove(f->state, "../state");
	assert_int_equal(stat(f->state, &sb), 0);
}

static void test_a_resume_takes_the_save_in_one_step(void **state)
{
	struct fixture *f = *state;
	struct err e;
	bool disk = false, rootfs = false;
	assert_int_equal(qemu_keep_consume(f->state, ID, "sb-new000000000", &disk, &rootfs, &e), 0);
	assert_true(disk && rootfs);
	_cleanup_free_ char *base = xasprintf("%s/%s", f->state, QEMU_KEEP_DIR);
	_cleanup_free_ char *live_disk =
		xasprintf("%s/sb-new000000000%s", base, QEMU_KEEP_LIVE_DISK);
	_cleanup_free_ char *live_rootfs =
		xasprintf("%s/sb-new000000000%s", base, QEMU_KEEP_LIVE_ROOTFS);
	struct stat sb;
	assert_int_equal(stat(live_disk, &sb), 0);
	assert_int_equal(stat(live_rootfs, &sb), 0);
	/* The rootfs name is the template's file still (a link). */
	struct stat t;
	assert_int_equal(stat(f->rootfs, &t), 0);
	assert_int_equal(sb.st_ino, t.st_ino);
	/* The save itself is gone, and a second take of it fails, touching nothing. */
	assert_int_equal(stat(f->saved, &sb), -1);
	assert_int_equal(qemu_keep_consume(f->state, ID, "sb-new000000000", &disk, &rootfs, &e),
			 -ENOENT);
	assert_false(disk || rootfs);
	assert_int_equal(qemu_keep_consume(f->state, "../x", "sb-new000000000", &disk, &rootfs, &e),
			 -EINVAL);
	assert_int_equal(qemu_keep_consume(f->state, ID, "../../x", &disk, &rootfs, &e), -EINVAL);
	qemu_keep_remove_live(f->state, "sb-new000000000");
	assert_int_equal(stat(live_disk, &sb), -1);
	assert_int_equal(stat(live_rootfs, &sb), -1);
	qemu_keep_remove_live(f->state, "sb-new000000000");
}

static void test_the_start_removes_what_no_session_keeps(void **state)
{
	struct fixture *f = *state;
	_cleanup_free_ char *base = xasprintf("%s/%s", f->state, QEMU_KEEP_DIR);
	_cleanup_free_ char *orphan = xasprintf("%s/sb-orphan0000000", base);
	_cleanup_free_ char *fork = xasprintf("%s/%s-f0a1b2c3d", base, ID);
	_cleanup_free_ char *live = xasprintf("%s/sb-gone00000000%s", base, QEMU_KEEP_LIVE_DISK);
	assert_int_equal(fs_mkdir_p(orphan, 0700), 0);
	assert_int_equal(fs_mkdir_p(fork, 0700), 0);
	write_file(live, "a disk no VM runs on");
	const char *keep[] = { ID, NULL };
	qemu_keep_sweep_orphans(f->state, keep, 2);
	struct stat sb;
	assert_int_equal(stat(f->saved, &sb), 0);
	assert_int_equal(stat(orphan, &sb), -1);
	assert_int_equal(stat(fork, &sb), -1);
	assert_int_equal(stat(live, &sb), -1);
	/* Nothing kept: everything goes. */
	qemu_keep_sweep_orphans(f->state, NULL, 0);
	assert_int_equal(stat(f->saved, &sb), -1);
	assert_int_equal(stat(base, &sb), 0);
}

static void test_the_sweep_removes_unfinished_saves_only(void **state)
{
	struct fixture *f = *state;
	_cleanup_free_ char *tmp = xasprintf("%s/%s/%s.tmp-AbC123", f->state, QEMU_KEEP_DIR, ID);
	assert_int_equal(fs_mkdir_p(tmp, 0700), 0);
	_cleanup_free_ char *inside = path_in(tmp, "state.mig");
	write_file(inside, "half");
	qemu_keep_sweep(f->state);
	struct stat sb;
	assert_int_equal(stat(tmp, &sb), -1);
	assert_int_equal(stat(f->saved, &sb), 0);
	/* No directory at all is fine. */
	qemu_keep_remove(f->state, ID);
	_cleanup_free_ char *base = path_in(f->state, QEMU_KEEP_DIR);
	assert_int_equal(rmdir(base), 0);
	qemu_keep_sweep(f->state);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_a_saved_vm_opens_as_it_was_saved, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_records_that_are_not_a_saved_vms, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_a_machine_this_host_cannot_restore, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_a_template_image_changed_in_place_is_refused,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_files_missing_or_not_files, setup, teardown),
		cmocka_unit_test_setup_teardown(test_a_resume_takes_the_save_in_one_step, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_the_start_removes_what_no_session_keeps, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_the_sweep_removes_unfinished_saves_only, setup,
						teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
