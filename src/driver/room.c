/* room: see room.h. */
#include "driver/room.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <sys/statvfs.h>

static double ratio = 1.0;
static uint64_t reserve;

void room_configure(double overcommit, uint64_t reserve_bytes)
{
	ratio = overcommit >= 1.0 ? overcommit : 1.0;
	reserve = reserve_bytes;
}

double room_overcommit(void)
{
	return ratio;
}

uint64_t room_reserve(void)
{
	return reserve;
}

uint64_t room_share(uint64_t bytes)
{
	double share = ceil((double)bytes / ratio);
	uint64_t s = share >= (double)bytes ? bytes : (uint64_t)share;
	s = (s + 4095) & ~(uint64_t)4095;
	return s < bytes ? s : bytes;
}

static uint64_t avail_of(const struct statvfs *v)
{
	return (uint64_t)v->f_bavail * (uint64_t)v->f_frsize;
}

/* "1.5 GiB" style, for messages. */
static const char *human(uint64_t n, char buf[32])
{
	if (n >= (1ull << 30))
		snprintf(buf, 32, "%.1f GiB", (double)n / (double)(1ull << 30));
	else
		snprintf(buf, 32, "%.1f MiB", (double)n / (double)(1ull << 20));
	return buf;
}

static int no_room(struct err *err, const char *what, uint64_t need, uint64_t avail)
{
	char a[32], b[32], c[32];
	return err_set(err, ENOSPC,
		       "the state filesystem has no room for %s: it needs %s of it "
		       "(SANDBOX_DISK_OVERCOMMIT %g), %s is free and %s is kept in reserve "
		       "(SANDBOX_DISK_RESERVE_BYTES)",
		       what, human(need, a), ratio, human(avail, b), human(reserve, c));
}

int room_check(int fd, uint64_t bytes, const char *what, struct err *err)
{
	struct statvfs v;
	if (fstatvfs(fd, &v) < 0)
		return err_sys(err, errno, "the state filesystem's free space");
	uint64_t avail = avail_of(&v);
	if (avail < reserve || avail - reserve < bytes)
		return no_room(err, what, bytes, avail);
	return 0;
}

int room_claim(int fd, uint64_t bytes, const char *what, struct err *err)
{
	/* Sparse above 1: the session layer admitted it. */
	uint64_t share = ratio > 1.0 ? 0 : bytes;
	/* Allocated first, then checked: two claims at once cannot both take the last of the
	 * room before either looks. */
	if (share && fallocate(fd, 0, 0, (off_t)share) < 0) {
		if (errno == ENOSPC) {
			struct statvfs v;
			return no_room(err, what, share, fstatvfs(fd, &v) == 0 ? avail_of(&v) : 0);
		}
		if (errno != EOPNOTSUPP)
			return err_sys(err, errno, "allocate %s's share of the state filesystem",
				       what);
		return room_check(fd, share, what, err);
	}
	struct statvfs v;
	if (fstatvfs(fd, &v) < 0)
		return err_sys(err, errno, "the state filesystem's free space");
	if (avail_of(&v) < reserve)
		return no_room(err, what, share, avail_of(&v) + share);
	return 0;
}

int room_state(const char *path, struct room_state *out)
{
	struct statvfs v;
	if (statvfs(path, &v) < 0)
		return -errno;
	out->size = (uint64_t)v.f_blocks * (uint64_t)v.f_frsize;
	out->free = avail_of(&v);
	out->reserve = reserve;
	out->low = out->free < reserve;
	return 0;
}
