/* room: the state filesystem's room for the disk images sandboxes write into.
 *
 * A disk (a jail's or a VM's, a volume, a fork's copy) is an image of its size on the state
 * filesystem. Sparse, a promise is not space: one tenant filling its disk could take the
 * blocks another's disk counts on, and the kernel then loses the other's writes.
 *
 * At an overcommit ratio (SANDBOX_DISK_OVERCOMMIT) of 1, each image's whole size is allocated
 * with fallocate() when it is made: its writes go to blocks it holds, no tenant's write can
 * fail because of another's, and the filesystem's own count admits disks: one that does not
 * fit while the reserve (SANDBOX_DISK_RESERVE_BYTES) stays free is refused with ENOSPC, naming
 * the numbers. (A share of an image cannot be allocated instead: ext4 inside it spreads its
 * files over the whole image, so a partial allocation reserves blocks its writes miss.)
 *
 * Above 1 images stay sparse; the session layer admits them, promising at most the ratio
 * times the room (session/admit.c), watches the free space (room_state) and stops the session
 * using the most beyond its share (its size over the ratio) first when the reserve is reached.
 * Here an image is then only refused while the reserve is already taken. Library code:
 * nothing here logs. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "util/err.h"

/* The ratio (1 or more) and the reserve, from the configuration; before any claim. */
void room_configure(double overcommit, uint64_t reserve_bytes);
double room_overcommit(void);
uint64_t room_reserve(void);

/* A disk's share of the filesystem: its size over the ratio, rounded up to 4 KiB (at most its
 * size). */
uint64_t room_share(uint64_t bytes);

/* Claims room for a new image of `bytes` (fd: the image, open for writing on the state
 * filesystem, already of its size): at a ratio of 1 allocates all of it, then checks that the
 * reserve is still free. ENOSPC (nothing kept: the caller drops the image) when it is not,
 * the message naming what `what` needed, what was free and the settings. A filesystem without
 * fallocate() is admitted by the check alone. */
int room_claim(int fd, uint64_t bytes, const char *what, struct err *err);

/* Checks, without allocating, that `bytes` more would leave the reserve free on the
 * filesystem of fd (a copy about to be written: a snapshot). */
int room_check(int fd, uint64_t bytes, const char *what, struct err *err);

struct room_state {
	uint64_t size;    /* the filesystem's size */
	uint64_t free;    /* free to unprivileged writers (f_bavail) */
	uint64_t reserve; /* SANDBOX_DISK_RESERVE_BYTES */
	bool low;         /* free below the reserve */
};

/* The state filesystem (any path on it) now. */
int room_state(const char *path, struct room_state *out);
