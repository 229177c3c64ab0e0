/* Tests of src/driver/qemu_snap.c without booting anything: the key of a template, snapshots
 * found valid or stale on disk, a clone's files surviving what happens to their paths, and
 * prepare() doing nothing when the snapshot is valid. */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "driver/qemu/qemu.h"
#include "util/cleanup.h"
#include "util/fs.h"
#include "util/sha256.h"

struct fixture {
	char dir[64];
	char *kernel;
	char *tdir;
	char *rootfs;
	struct qemu_host h;
	struct qemu_want w;
};

static void write_file(const char *path, const char *content, size_t size)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	assert_true(fd >= 0);
	if (content)
		assert_int_equal(write(fd, content, strlen(content)), (ssize_t)strlen(content));
	else
		assert_int_equal(ftruncate(fd, (off_t)size), 0);
	close(fd);
}

static int setup(void **state)
{
	struct fixture *f = xcalloc(1, sizeof(*f));
	snprintf(f->dir, sizeof(f->dir), "/tmp/test-qemu-snap-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	f->kernel = xasprintf("%s/vmlinux", f->dir);
	write_file(f->kernel, "not really a kernel", 0);
	f->tdir = xasprintf("%s/base", f->dir);
	assert_int_equal(mkdir(f->tdir, 0755), 0);
	f->rootfs = xasprintf("%s/rootfs.ext4", f->tdir);
	write_file(f->rootfs, "not really ext4", 0);
	f->h = (struct qemu_host){
		.qemu_bin = "/nonexistent/qemu",
		.qemu_version = "QEMU emulator version 7.2.22",
		.run_dir = f->dir,
		.kernel = f->kernel,
		.accel = QEMU_ACCEL_TCG,
		.channel = QEMU_CHANNEL_SERIAL,
		.tsc_khz = 2000000,
		.host_cpu = "",
	};
	f->w = (struct qemu_want){
		.tdir = f->tdir,
		.rootfs = f->rootfs,
		.vcpus = 1,
		.mem_mib = 1,
		.workspace_mib = 64,
		.pids_max = 100,
	};
	/* Cgroups as a plain directory tree: a build's VM gets one there. */
	_cleanup_free_ char *cg = xasprintf("%s/cgroup", f->dir);
	assert_int_equal(mkdir(cg, 0755), 0);
	cgroup_root_plain(cg, CGROUP_V1, &f->h.cg);
	for (unsigned i = 0; i < f->h.cg.n_ctl; i++)
		assert_int_equal(mkdir(f->h.cg.ctl_dir[i], 0755), 0);
	struct err e = { 0 };
	if (cgroup_init(&f->h.cg, &e) < 0)
		fail_msg("cgroup_init: %s", e.msg);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	fs_rm_rf(f->dir, NULL);
	cgroup_root_free(&f->h.cg);
	free(f->kernel);
	free(f->tdir);
	free(f->rootfs);
	free(f);
	return 0;
}

/* A snapshot on disk as a build would leave it, made from key k. */
static void install(struct fixture *f, const struct qemu_snap_key *k, size_t ram_size)
{
	_cleanup_free_ char *dir = xasprintf("%s/qemu", f->tdir);
	mkdir(dir, 0700);
	_cleanup_free_ char *state = xasprintf("%s/state.mig", dir);
	_cleanup_free_ char *ram = xasprintf("%s/memory.ram", dir);
	_cleanup_free_ char *meta = xasprintf("%s/meta.json", dir);
	write_file(state, "QEVM", 0);
	write_file(ram, NULL, ram_size);
	json_t *m = qemu_meta_build(k);
	assert_int_equal(json_dump_file(m, meta, 0), 0);
	json_decref(m);
}

static void test_key_of_a_template(void **state)
{
	struct fixture *f = *state;
	struct qemu_snap_key k;
	struct err e = { 0 };
	assert_int_equal(qemu_key_build(&f->h, &f->w, NULL, &k, &e), 0);
	char sha[65];
	sha256_hex("not really a kernel", strlen("not really a kernel"), sha);
	assert_string_equal(k.kernel_sha256, sha);
	assert_int_equal(k.rootfs_size, strlen("not really ext4"));
	assert_string_equal(k.m.rootfs, f->rootfs);
	assert_int_equal(k.m.mem_mib, 1);
	assert_non_null(strstr(k.m.cmdline, "tsc_early_khz=2000000 "));
	assert_non_null(strstr(k.m.cmdline, "sandbox.workspace_mib=64"));
	assert_non_null(strstr(k.m.cmdline, "sysctl.kernel.threads-max=164 "));
	assert_int_equal(k.tsc_khz, 2000000);
	qemu_key_free(&k);

	/* A missing rootfs or kernel is an error that says where. */
	struct qemu_want w = f->w;
	w.rootfs = "/nonexistent/rootfs.ext4";
	assert_int_equal(qemu_key_build(&f->h, &w, NULL, &k, &e), -ENOENT);
	assert_non_null(strstr(e.msg, "/nonexistent/rootfs.ext4"));
	struct qemu_host h = f->h;
	h.kernel = "/nonexistent/vmlinux";
	assert_int_equal(qemu_key_build(&h, &f->w, NULL, &k, &e), -ENOENT);
	assert_non_null(strstr(e.msg, "guest/kernel/build.sh"));
}

static void test_tsc_noise_keeps_the_snapshot_rate(void **state)
{
	struct fixture *f = *state;
	struct qemu_snap_key k;
	struct err e = { 0 };
	json_t *meta = json_pack("{s:i}", "tscKhz", 2001500); /* 0.075% away */
	assert_int_equal(qemu_key_build(&f->h, &f->w, meta, &k, &e), 0);
	assert_int_equal(k.tsc_khz, 2001500);
	assert_non_null(strstr(k.m.cmdline, "tsc_early_khz=2001500 "));
	qemu_key_free(&k);
	json_object_set_new(meta, "tscKhz", json_integer(2100000)); /* another host */
	assert_int_equal(qemu_key_build(&f->h, &f->w, meta, &k, &e), 0);
	assert_int_equal(k.tsc_khz, 2000000);
	qemu_key_free(&k);
	json_decref(meta);
}

static void test_valid_stale_and_missing(void **state)
{
	struct fixture *f = *state;
	struct err e = { 0 };
	struct qemu_snap s;
	assert_int_equal(qemu_snap_acquire(&f->h, &f->w, &s, &e), -ENOENT);
	assert_non_null(strstr(e.msg, "no usable snapshot"));

	struct qemu_snap_key k;
	assert_int_equal(qemu_key_build(&f->h, &f->w, NULL, &k, &e), 0);
	install(f, &k, 1u << 20);
	assert_int_equal(qemu_snap_acquire(&f->h, &f->w, &s, &e), 0);
	assert_string_equal(s.key.m.cmdline, k.m.cmdline);
	assert_true(s.ram_fd >= 0 && s.state_fd >= 0 && s.rootfs_fd >= 0);
	qemu_snap_release(&s);
	assert_int_equal(s.ram_fd, -1);

	/* Valid: prepare() returns at once (a build would fail: there is no QEMU here). */
	assert_int_equal(qemu_snap_prepare(&f->h, &f->w, &e), 0);

	/* Other resources than the snapshot's: not used. */
	struct qemu_want w = f->w;
	w.mem_mib = 2;
	assert_int_equal(qemu_snap_acquire(&f->h, &w, &s, &e), -ENOENT);
	assert_non_null(strstr(e.msg, "sandboxes get 1 and 2 MiB"));

	/* RAM file of the wrong size: incomplete. */
	install(f, &k, 4096);
	assert_int_equal(qemu_snap_acquire(&f->h, &f->w, &s, &e), -ENOENT);
	assert_non_null(strstr(e.msg, "incomplete"));
	install(f, &k, 1u << 20);

	/* The template's image changed: stale, whatever the cache knew. No pause is needed
	 * for its mtime to move: the size changes anyway. */
	write_file(f->rootfs, "a rebuilt rootfs image", 0);
	assert_int_equal(qemu_snap_acquire(&f->h, &f->w, &s, &e), -ENOENT);
	assert_non_null(strstr(e.msg, "rootfs.ext4 changed"));
	qemu_key_free(&k);
}

static void test_a_clone_keeps_its_files_whatever_happens_to_the_paths(void **state)
{
	struct fixture *f = *state;
	struct err e = { 0 };
	struct qemu_snap_key k;
	assert_int_equal(qemu_key_build(&f->h, &f->w, NULL, &k, &e), 0);
	install(f, &k, 1u << 20);
	qemu_key_free(&k);

	struct qemu_snap s;
	assert_int_equal(qemu_snap_acquire(&f->h, &f->w, &s, &e), 0);
	/* templates/build.sh replaces the whole template directory; a rebuild swaps the
	 * snapshot: what the clone opened is still the snapshot it validated. */
	_cleanup_free_ char *snapdir = xasprintf("%s/qemu", f->tdir);
	assert_int_equal(fs_rm_rf(snapdir, &e), 0);
	assert_int_equal(unlink(f->rootfs), 0);
	char buf[8];
	assert_int_equal(pread(s.state_fd, buf, 4, 0), 4);
	assert_memory_equal(buf, "QEVM", 4);
	struct stat st;
	assert_int_equal(fstat(s.ram_fd, &st), 0);
	assert_int_equal(st.st_size, 1u << 20);
	assert_int_equal(fstat(s.rootfs_fd, &st), 0);
	assert_int_equal(st.st_size, strlen("not really ext4"));
	qemu_snap_release(&s);
}

/* Writes `text` at offset `at` of the snapshot's RAM file. */
static void ram_write(struct fixture *f, const char *name, off_t at, const char *text)
{
	_cleanup_free_ char *ram = xasprintf("%s/qemu/%s", f->tdir, name);
	int fd = open(ram, O_WRONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, text, strlen(text), at), (ssize_t)strlen(text));
	close(fd);
}

static void test_a_clone_gets_the_ram_sealed_and_shared(void **state)
{
	struct fixture *f = *state;
	struct err e = { 0 };
	struct qemu_snap_key k;
	assert_int_equal(qemu_key_build(&f->h, &f->w, NULL, &k, &e), 0);
	install(f, &k, 1u << 20);
	ram_write(f, "memory.ram", 4096, "guest page");
	ram_write(f, "memory.ram", (1u << 20) - 5, "last");

	struct qemu_snap a, b;
	assert_int_equal(qemu_snap_acquire(&f->h, &f->w, &a, &e), 0);
	assert_int_equal(qemu_snap_acquire(&f->h, &f->w, &b, &e), 0);
	/* One memfd for both clones (their pages are the same), not the file. */
	struct stat sa, sb, file;
	_cleanup_free_ char *ram = xasprintf("%s/qemu/memory.ram", f->tdir);
	assert_int_equal(stat(ram, &file), 0);
	assert_int_equal(fstat(a.ram_fd, &sa), 0);
	assert_int_equal(fstat(b.ram_fd, &sb), 0);
	assert_int_equal(sa.st_ino, sb.st_ino);
	assert_int_equal(sa.st_dev, sb.st_dev);
	assert_true(sa.st_ino != file.st_ino || sa.st_dev != file.st_dev);
	assert_int_equal(sa.st_size, 1u << 20);
	/* A copy of the data; the holes stay holes. */
	char buf[16] = { 0 };
	assert_int_equal(pread(a.ram_fd, buf, 10, 4096), 10);
	assert_memory_equal(buf, "guest page", 10);
	assert_int_equal(pread(a.ram_fd, buf, 4, (1u << 20) - 5), 4);
	assert_memory_equal(buf, "last", 4);
	assert_true((uint64_t)sa.st_blocks * 512 < (1u << 20) / 2);

	/* Sealed: no write, resize or shared writable mapping, through any descriptor of it. */
	int seals = fcntl(a.ram_fd, F_GET_SEALS);
	assert_int_equal(seals & (F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
			 F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", a.ram_fd);
	int rw = open(path, O_RDWR | O_CLOEXEC);
	assert_true(rw >= 0);
	assert_int_equal(pwrite(rw, "x", 1, 0), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(ftruncate(rw, 4096), -1);
	assert_int_equal(errno, EPERM);
	assert_int_equal(fcntl(rw, F_ADD_SEALS, 0), -1);
	assert_ptr_equal(mmap(NULL, 1u << 20, PROT_READ | PROT_WRITE, MAP_SHARED, rw, 0),
			 MAP_FAILED);
	/* What QEMU does: a private, writable mapping, whose writes stay its own. */
	char *p = mmap(NULL, 1u << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE, rw, 0);
	assert_true(p != MAP_FAILED);
	assert_memory_equal(p + 4096, "guest page", 10);
	memcpy(p + 4096, "dirty", 5);
	assert_int_equal(pread(b.ram_fd, buf, 10, 4096), 10);
	assert_memory_equal(buf, "guest page", 10);
	munmap(p, 1u << 20);
	close(rw);
	qemu_snap_release(&a);
	qemu_snap_release(&b);

	/* A rebuild replaces the RAM file: the next clone gets a new memfd of it. */
	_cleanup_free_ char *next = xasprintf("%s/qemu/memory.next", f->tdir);
	write_file(next, NULL, 1u << 20);
	ram_write(f, "memory.next", 4096, "other page");
	assert_int_equal(rename(next, ram), 0);
	assert_int_equal(qemu_snap_acquire(&f->h, &f->w, &a, &e), 0);
	assert_int_equal(fstat(a.ram_fd, &sb), 0);
	assert_true(sb.st_ino != sa.st_ino);
	assert_int_equal(pread(a.ram_fd, buf, 10, 4096), 10);
	assert_memory_equal(buf, "other page", 10);
	qemu_snap_release(&a);
	qemu_key_free(&k);
}

static void test_prepare_reports_a_failed_build(void **state)
{
	struct fixture *f = *state;
	struct err e = { 0 };
	/* No snapshot, and the QEMU binary does not exist: the build fails and says so; no
	 * temporary directory is left. */
	int r = qemu_snap_prepare(&f->h, &f->w, &e);
	assert_true(r < 0);
	assert_non_null(strstr(e.msg, "building the snapshot"));
	assert_non_null(strstr(e.msg, "/nonexistent/qemu"));
	_cleanup_closedir_ DIR *d = opendir(f->tdir);
	struct dirent *de;
	while ((de = readdir(d)))
		assert_null(strstr(de->d_name, ".qemu.tmp-"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_key_of_a_template, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tsc_noise_keeps_the_snapshot_rate, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_valid_stale_and_missing, setup, teardown),
		cmocka_unit_test_setup_teardown(
			test_a_clone_keeps_its_files_whatever_happens_to_the_paths, setup,
			teardown),
		cmocka_unit_test_setup_teardown(test_a_clone_gets_the_ram_sealed_and_shared, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_prepare_reports_a_failed_build, setup,
						teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
