/* admit: whether the host has room for one more sandbox, by measurement (session.h).
 *
 * Two resources run out before any configured cap when sessions are many: the host's memory
 * and the daemon's descriptors (its limit is the hard RLIMIT_NOFILE, which an unprivileged
 * setting cannot raise: 20,000 on some hosts). Both are measured, never summed from limits:
 * limits overcommit, and what the host still has is what decides.
 *
 * Memory is MemAvailable, read at each check (a read of /proc/meminfo: microseconds).
 * Descriptors are counted from /proc/self/fd, which costs in proportion to their number, so a
 * count is kept for COUNT_TTL_MS and, between counts, each admitted sandbox is assumed to take
 * SESSION_FDS_GUESS more; only when that estimate comes near the limit are they counted again,
 * and the count decides. */
#include <dirent.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <sys/resource.h>

#include "session/quota.h"
#include "driver/room.h"
#include "metrics/metrics.h"
#include "session/internal.h"
#include "session/session.h"
#include "session/volume.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/time.h"

#define COUNT_TTL_MS      250
#define SESSION_FDS_GUESS 4

static struct {
	uint64_t counted_ms; /* monotonic time of the last count, 0: never */
	long counted;        /* descriptors open then */
	unsigned admitted;   /* sandboxes admitted since */
} fds;

static int64_t mem_available(void)
{
	return session_host_memory_available();
}

int64_t session_host_memory_available(void)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/meminfo", "re");
	if (!f)
		return -1;
	char line[256];
	unsigned long long kib;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
			return (int64_t)(kib * 1024);
	return -1;
}

static long fd_limit(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur == RLIM_INFINITY ||
	    rl.rlim_cur > 1u << 30)
		return 1L << 30;
	return (long)rl.rlim_cur;
}

static long fd_count(void)
{
	_cleanup_closedir_ DIR *d = opendir("/proc/self/fd");
	if (!d)
		return -1;
	long n = -3; /* ".", ".." and the directory's own descriptor */
	while (readdir(d))
		n++;
	return n;
}

/* The daemon's descriptors open now, or (unless fresh) an over-estimate of it. */
static long fds_open(bool fresh)
{
	uint64_t now = time_mono_ms();
	if (fresh || !fds.counted_ms || now - fds.counted_ms >= COUNT_TTL_MS) {
		long n = fd_count();
		if (n < 0)
			return -1;
		fds.counted = n;
		fds.counted_ms = now;
		fds.admitted = 0;
	}
	return fds.counted + (long)fds.admitted * SESSION_FDS_GUESS;
}

int session_memory_check(struct err *err)
{
	uint64_t mark = session_mod.cfg->memory_watermark;
	if (!mark)
		return 0;
	int64_t avail = mem_available();
	if (avail < 0 || (uint64_t)avail >= mark)
		return 0;
	return err_set(err, ENOMEM,
		       "The host is low on memory: %llu MiB available, below "
		       "SANDBOX_MEMORY_WATERMARK_BYTES (%llu MiB); try again later",
		       (unsigned long long)avail >> 20, (unsigned long long)mark >> 20);
}

int session_descriptor_check(struct err *err)
{
	unsigned reserve = session_mod.cfg->descriptor_reserve;
	if (!reserve)
		return 0;
	long limit = fd_limit(), open = fds_open(false);
	/* An estimate refuses nothing: near the limit, the descriptors are counted. */
	if (open >= 0 && open + (long)reserve > limit)
		open = fds_open(true);
	if (open < 0 || open + (long)reserve <= limit)
		return 0;
	return err_set(err, EMFILE,
		       "The server is low on file descriptors: about %ld of its %ld are open, "
		       "and SANDBOX_DESCRIPTOR_RESERVE (%u) are kept free; try again later",
		       open, limit, reserve);
}

/* Sandboxes still being torn down hold what live ones hold (processes, memory, an address
 * of the network pool) until their teardown ends, and teardown runs behind creation
 * (loop_submit_background): so they count against SANDBOX_MAX_SESSIONS, beyond one per
 * worker (a session destroyed and made again at once), or a client that creates and
 * destroys in a loop could keep any number of them alive. */
static int teardown_check(struct err *err)
{
	const struct config *cfg = session_mod.cfg;
	if (!cfg->max_sessions)
		return 0;
	uint64_t held = (uint64_t)session_mod.nsessions + session_mod.destroying;
	if (held < (uint64_t)cfg->max_sessions + cfg->workers)
		return 0;
	return err_set(err, EAGAIN,
		       "The server is at its limit of %u sessions (SANDBOX_MAX_SESSIONS) with the "
		       "%u sandboxes it is still tearing down; try again shortly",
		       cfg->max_sessions, session_mod.destroying);
}

int session_host_check(struct err *err)
{
	int r = session_memory_check(err);
	if (r == 0)
		r = session_descriptor_check(err);
	if (r < 0) {
		metrics_add(metrics_daemon.admission_refusals_total, 1,
			    r == -ENOMEM ? "memory" : "descriptors");
		return r;
	}
	if ((r = teardown_check(err)) < 0) {
		metrics_add(metrics_daemon.admission_refusals_total, 1, "teardown");
		return r;
	}
	fds.admitted++;
	return 0;
}

const char *session_host_reason(int errnum)
{
	return errnum == ENOMEM ? "memory" : errnum == EMFILE ? "descriptors" : NULL;
}

void session_host_publish(void)
{
	int64_t avail = mem_available();
	if (avail >= 0)
		metrics_set(metrics_daemon.host_memory_available_bytes, (double)avail);
	long open = fds_open(true), limit = fd_limit();
	if (open >= 0)
		metrics_set(metrics_daemon.descriptors_free, (double)(limit - open));
}

/* --- what an owner's sessions hold --------------------------------------------------- */

void session_charge_of(const struct sandbox_limits *l, struct session_charge *ret)
{
	ret->memory = l->memory_bytes;
	ret->disk = l->disk ? l->workspace_bytes : 0;
}

int session_units_take(const char *owner, const struct session_charge *c, unsigned count,
		       struct err *err)
{
	unsigned taken = 0;
	int r = 0;
	for (; taken < count; taken++)
		if ((r = quota_admit(owner, QUOTA_SESSIONS, err)) < 0)
			break;
	if (r == 0 && (r = quota_admit_n(owner, QUOTA_MEMORY, c->memory * count, err)) == 0) {
		if ((r = quota_admit_n(owner, QUOTA_DISK, c->disk * count, err)) == 0)
			return 0;
		quota_release_n(owner, QUOTA_MEMORY, c->memory * count);
	}
	quota_release_n(owner, QUOTA_SESSIONS, taken);
	return r;
}

void session_units_give(const char *owner, const struct session_charge *c, unsigned count)
{
	quota_release_n(owner, QUOTA_SESSIONS, count);
	quota_release_n(owner, QUOTA_MEMORY, c->memory * count);
	quota_release_n(owner, QUOTA_DISK, c->disk * count);
}

void session_units_force(const char *owner, const struct session_charge *c)
{
	quota_take_n(owner, QUOTA_SESSIONS, 1);
	quota_take_n(owner, QUOTA_MEMORY, c->memory);
	quota_take_n(owner, QUOTA_DISK, c->disk);
}

/* --- the state filesystem's reserve (driver/room.h) ------------------------------------ */

static struct {
	struct event *timer;
	bool low;       /* below the reserve at the last tick */
	bool told_none; /* said once that no session could be stopped */
} room;

int session_disk_check(uint64_t bytes, struct err *err)
{
	double ratio = room_overcommit();
	struct room_state st;
	if (ratio <= 1.0 || !bytes || !session_mod.cfg ||
	    room_state(session_mod.cfg->state_dir, &st) < 0)
		return 0; /* at 1, each image allocates its size (driver/room.h) */
	/* Promised: every session's disk (hibernated ones too) and every volume. Held: what the
	 * running disks hold now, which the free space no longer shows. */
	uint64_t promised = 0, held = 0;
	for (struct session *s = session_mod.sessions; s; s = s->next) {
		if (!s->limits.disk || s->state == SESSION_FAILED)
			continue;
		promised += s->limits.workspace_bytes;
		uint64_t used, size;
		if (s->sb && s->sb->driver->disk_usage &&
		    s->sb->driver->disk_usage(s->sb, &used, &size) == 0)
			held += used;
	}
	uint64_t nvol, vbytes;
	volume_totals(&nvol, &vbytes);
	promised += vbytes;
	uint64_t space = st.free > st.reserve          ? st.free - st.reserve + held
			 : held > st.reserve - st.free ? held - (st.reserve - st.free)
						       : 0;
	if ((double)(promised + bytes) <= ratio * (double)space)
		return 0;
	return err_set(
		err, ENOSPC,
		"the state filesystem has no room for %llu MiB more of disks: %llu MiB are "
		"promised to disks and volumes, and SANDBOX_DISK_OVERCOMMIT %g allows %llu "
		"MiB (%llu MiB free beyond the %llu MiB reserve, SANDBOX_DISK_RESERVE_BYTES, "
		"and %llu MiB the disks hold)",
		(unsigned long long)(bytes >> 20), (unsigned long long)(promised >> 20), ratio,
		(unsigned long long)((uint64_t)(ratio * (double)space) >> 20),
		(unsigned long long)((st.free > st.reserve ? st.free - st.reserve : 0) >> 20),
		(unsigned long long)(st.reserve >> 20), (unsigned long long)(held >> 20));
}

int session_room_low(struct err *err)
{
	struct room_state st;
	if (room_state(session_mod.cfg->state_dir, &st) < 0 || !st.low)
		return 0;
	return err_set(err, ENOSPC,
		       "the state filesystem is below its reserve: %llu MiB free, %llu MiB kept "
		       "(SANDBOX_DISK_RESERVE_BYTES); sessions are stopped, the one using the most "
		       "beyond its disk's share first, until there is room again",
		       (unsigned long long)(st.free >> 20), (unsigned long long)(st.reserve >> 20));
}

/* How far beyond its share the session's disk is, in bytes (0 when within it). */
static uint64_t beyond_share(struct session *s)
{
	uint64_t used, size;
	if (!s->sb || !s->limits.disk || !s->sb->driver->disk_usage ||
	    s->sb->driver->disk_usage(s->sb, &used, &size) < 0)
		return 0;
	uint64_t share = room_share(size);
	return used > share ? used - share : 0;
}

static void on_disk_paused(struct session *s, const struct err *err, void *arg)
{
	if (!s)
		return;
	if (err) {
		log_warn("session", "session %s: cannot be stopped for the state filesystem: %s",
			 s->id, err->msg);
		return;
	}
	s->disk_paused = true;
}

static void stop_one(void)
{
	struct session *worst = NULL;
	uint64_t most = 0;
	for (struct session *s = session_mod.sessions; s; s = s->next) {
		if (s->state != SESSION_READY || s->transition || s->resuming)
			continue;
		uint64_t over = beyond_share(s);
		if (over > most) {
			most = over;
			worst = s;
		}
	}
	if (!worst) {
		if (!room.told_none)
			log_warn("session",
				 "the state filesystem is below its reserve and no session's disk "
				 "is beyond its share: what fills it is not a sandbox's disk");
		room.told_none = true;
		return;
	}
	log_warn("session",
		 "session %s: stopped (frozen): the state filesystem is below its reserve and "
		 "its disk is the one %llu MiB beyond its share, the most",
		 worst->id, (unsigned long long)(most >> 20));
	metrics_add(metrics_daemon.disk_reserve_stops_total, 1);
	session_freeze_now(worst, on_disk_paused, NULL);
}

static void on_room_tick(evutil_socket_t fd, short what, void *arg)
{
	struct room_state st;
	if (room_state(session_mod.cfg->state_dir, &st) < 0)
		return;
	metrics_set(metrics_daemon.state_fs_free_bytes, (double)st.free);
	metrics_set(metrics_daemon.state_fs_size_bytes, (double)st.size);
	if (st.low != room.low)
		log_warn("session",
			 "the state filesystem %s its reserve: %llu MiB free, %llu MiB kept",
			 st.low ? "is below" : "is back above", (unsigned long long)(st.free >> 20),
			 (unsigned long long)(st.reserve >> 20));
	room.low = st.low;
	if (!st.low) {
		room.told_none = false;
		return;
	}
	stop_one();
}

void session_room_watch(struct event_base *base)
{
	metrics_set(metrics_daemon.state_fs_reserve_bytes, (double)room_reserve());
	room.timer = event_new(base, -1, EV_PERSIST, on_room_tick, NULL);
	struct timeval tv = { 0, SESSION_ROOM_TICK_MS * 1000 };
	event_add(room.timer, &tv);
	on_room_tick(-1, 0, NULL);
}

void session_room_unwatch(void)
{
	if (room.timer)
		event_free(room.timer);
	room.timer = NULL;
}
