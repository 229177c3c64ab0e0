/* qemu_disk: a VM sandbox's own disk (SANDBOX_STORAGE=disk), the writable half of its root.
 *
 * As the jail's (jail_disk.c), the disk is a sparse ext4 image of the sandbox's size made
 * without a name: an O_TMPFILE in SANDBOX_STATE_DIR/disks, formatted by mkfs.ext4 through
 * the daemon's /proc/<pid>/fd link. Unlike the jail's, the host never mounts it: QEMU gets
 * the descriptor and the guest's kernel mounts the filesystem (agent/storage.c makes the
 * overlay), so no loop device is needed. The image's last references are the daemon's
 * descriptor and QEMU's; when the sandbox is destroyed (or the daemon dies, even by kill -9:
 * its QEMUs die with it) the kernel frees its blocks. A full disk is the guest's ENOSPC: the
 * filesystem is the image's size, and QEMU refuses any access past the image's end. */
#include "driver/qemu/qemu.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "driver/room.h"
#include "util/cleanup.h"
#include "util/fs.h"
#include "util/spawn.h"

/* How long mkfs.ext4 may take (it takes milliseconds). */
#define MKFS_TIMEOUT_MS 30000

static int run_mkfs(int img, struct err *err)
{
	_cleanup_free_ char *mkfs = spawn_find_binary("mkfs.ext4");
	if (!mkfs)
		return err_set(err, ENOENT,
			       "qemu: mkfs.ext4 not found (e2fsprogs): needed for "
			       "SANDBOX_STORAGE=disk");
	/* mkfs.ext4 does not inherit the descriptor (close-on-exec); it opens the image through
	 * the daemon's link to it, which only root can follow. */
	_cleanup_free_ char *path = xasprintf("/proc/%d/fd/%d", (int)getpid(), img);
	/* No journal: the disk lives as long as the sandbox, a crash ends both. No reserved
	 * blocks: the sandbox gets all it was given. The inode tables are not zeroed (the guest
	 * mounts with noinit_itable): nothing but the guest's own writes allocates the image. */
	char *const argv[] = { mkfs,
			       "-q",
			       "-F",
			       "-m",
			       "0",
			       "-O",
			       "^has_journal",
			       "-E",
			       "lazy_itable_init=1,nodiscard,root_owner=0:0",
			       "-b",
			       "4096",
			       path,
			       NULL };
	char out[512];
	int st = spawn_run_bounded(argv, MKFS_TIMEOUT_MS, out, sizeof(out));
	if (st < 0)
		return err_sys(err, -st, "qemu: mkfs.ext4 of a disk");
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return err_set(err, EIO, "qemu: mkfs.ext4 of a disk failed: %s", out);
	return 0;
}

/* A new empty file without a name in <state_dir>/disks: its descriptor, or negative errno. */
static int unnamed_image(const char *state_dir, struct err *err)
{
	_cleanup_free_ char *dir = xasprintf("%s/disks", state_dir);
	if (fs_mkdir_p(dir, 0700) < 0)
		return err_sys(err, errno, "qemu: make %s", dir);
	int img = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (img < 0)
		return err_sys(err, errno, "qemu: a disk image in %s", dir);
	return img;
}

int qemu_disk_create(const char *state_dir, uint64_t bytes, struct err *err)
{
	if (bytes > QEMU_SLOT_BYTES)
		return err_set(err, EINVAL,
			       "a VM's disk is at most %llu bytes (its drive's capacity in the "
			       "template's snapshot), not %llu",
			       QEMU_SLOT_BYTES, (unsigned long long)bytes);
	_cleanup_close_ int img = unnamed_image(state_dir, err);
	if (img < 0)
		return img;
	if (ftruncate(img, (off_t)bytes) < 0)
		return err_sys(err, errno, "qemu: size the disk image to %llu bytes",
			       (unsigned long long)bytes);
	int r = room_claim(img, bytes, "the VM's disk", err);
	if (r < 0)
		return r;
	r = run_mkfs(img, err);
	if (r < 0)
		return r;
	return TAKE_FD(img);
}

int qemu_disk_clone(const char *state_dir, int from, struct err *err)
{
	struct stat st;
	if (fstat(from, &st) < 0)
		return err_sys(err, errno, "qemu: the disk to copy");
	_cleanup_close_ int img = unnamed_image(state_dir, err);
	if (img < 0)
		return img;
	if (ftruncate(img, st.st_size) < 0)
		return err_sys(err, errno, "qemu: size a copy of the disk");
	int r = room_claim(img, (uint64_t)st.st_size, "the VM's disk", err);
	if (r < 0)
		return r;
	r = fs_copy_data(from, img, (uint64_t)st.st_size, err);
	if (r < 0)
		return err_wrap(err, "qemu: copying the disk");
	return TAKE_FD(img);
}

int qemu_disk_usage(int fd, uint64_t *used, uint64_t *size)
{
	struct stat st;
	if (fd < 0)
		return -ENOENT;
	if (fstat(fd, &st) < 0)
		return -errno;
	*size = (uint64_t)st.st_size;
	uint64_t alloc = (uint64_t)st.st_blocks * 512u;
	*used = alloc < *size ? alloc : *size;
	return 0;
}

/* qcow2, version 2: a 72-byte header in cluster 0, the refcount table in cluster 1, its first
 * refcount block (16-bit counts) in cluster 2, the L1 table (all zeros: nothing allocated)
 * from cluster 3. Each L2 table maps 8192 clusters of 64 KiB, so an L1 entry covers 512 MiB. */
#define QCOW2_CLUSTER_BITS 16
#define QCOW2_CLUSTER      (1u << QCOW2_CLUSTER_BITS)

static void be32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (24 - 8 * i));
}

static void be64(uint8_t *p, uint64_t v)
{
	be32(p, (uint32_t)(v >> 32));
	be32(p + 4, (uint32_t)v);
}

static int pwrite_all(int fd, const void *buf, size_t n, off_t at)
{
	for (size_t done = 0; done < n;) {
		ssize_t k = pwrite(fd, (const char *)buf + done, n - done, at + (off_t)done);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -EIO;
		done += (size_t)k;
	}
	return 0;
}

int qemu_overlay_create(const char *state_dir, uint64_t bytes, struct err *err)
{
	if (bytes > QEMU_SLOT_BYTES)
		return err_set(err, EINVAL, "an overlay of %llu bytes is above a drive's capacity",
			       (unsigned long long)bytes);
	uint64_t per_l1 = (uint64_t)QCOW2_CLUSTER * (QCOW2_CLUSTER / 8);
	uint32_t l1_size = (uint32_t)((bytes + per_l1 - 1) / per_l1);
	uint32_t l1_clusters = (l1_size * 8 + QCOW2_CLUSTER - 1) / QCOW2_CLUSTER;
	if (!l1_clusters)
		l1_clusters = 1;
	uint32_t clusters = 3 + l1_clusters;

	_cleanup_free_ char *dir = xasprintf("%s/disks", state_dir);
	if (fs_mkdir_p(dir, 0700) < 0)
		return err_sys(err, errno, "qemu: make %s", dir);
	_cleanup_close_ int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0)
		return err_sys(err, errno, "qemu: an overlay image in %s", dir);
	uint8_t hdr[72] = { 0 };
	be32(hdr + 0, 0x514649fbu); /* "QFI\xfb" */
	be32(hdr + 4, 2);
	be32(hdr + 20, QCOW2_CLUSTER_BITS);
	be64(hdr + 24, bytes);
	be32(hdr + 36, l1_size);
	be64(hdr + 40, 3ull * QCOW2_CLUSTER);
	be64(hdr + 48, 1ull * QCOW2_CLUSTER);
	be32(hdr + 56, 1);
	uint8_t table[8];
	be64(table, 2ull * QCOW2_CLUSTER);
	uint8_t counts[2 * 64];
	memset(counts, 0, sizeof(counts));
	for (uint32_t c = 0; c < clusters && c < 64; c++)
		counts[2 * c + 1] = 1;
	if (ftruncate(fd, (off_t)clusters * QCOW2_CLUSTER) < 0)
		return err_sys(err, errno, "qemu: sizing an overlay image");
	int r;
	if ((r = pwrite_all(fd, hdr, sizeof(hdr), 0)) < 0 ||
	    (r = pwrite_all(fd, table, sizeof(table), QCOW2_CLUSTER)) < 0 ||
	    (r = pwrite_all(fd, counts, sizeof(counts), 2 * QCOW2_CLUSTER)) < 0)
		return err_sys(err, -r, "qemu: writing an overlay image");
	return TAKE_FD(fd);
}
