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

#include "metrics/metrics.h"
#include "session/internal.h"
#include "session/session.h"
#include "util/cleanup.h"
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
