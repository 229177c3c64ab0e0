/* usage: what a session's sandbox uses (its cgroup's counters, driver.usage), read when a
 * client asks, and the session's last SESSION_USAGE_KEEP readings kept so that asking again
 * gives a series (the E2B API's metrics). No timer reads anything: a host of idle sessions
 * pays nothing for it, and a session's log is made at its first reading. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "session/session.h"
#include "util/cleanup.h"
#include "util/time.h"

/* Readings closer than this to the last one are that one: a client asking in a loop neither
 * fills the log with copies nor divides by a tiny interval. */
#define USAGE_MIN_INTERVAL_MS 1000

struct session_usage_log {
	struct session_usage ring[SESSION_USAGE_KEEP];
	size_t n, head;             /* readings held; where the next one goes */
	uint64_t cpu_usec, mono_ms; /* the last reading's CPU counter and monotonic time */
};

static unsigned cpu_count(const struct sandbox_limits *l)
{
	if (l->vcpus)
		return l->vcpus;
	if (l->cpu_quota_us && l->cpu_period_us)
		return (unsigned)((l->cpu_quota_us + l->cpu_period_us - 1) / l->cpu_period_us);
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (unsigned)n : 1;
}

static uint64_t memory_total(const struct sandbox_limits *l)
{
	if (l->mem_mib)
		return (uint64_t)l->mem_mib << 20;
	if (l->memory_bytes)
		return l->memory_bytes;
	long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
	return pages > 0 && size > 0 ? (uint64_t)pages * (uint64_t)size : 0;
}

void session_usage_free(struct session *s)
{
	free(s->usage);
	s->usage = NULL;
}

int session_usage_take(struct session *s, struct session_usage *ret)
{
	struct sandbox *sb = s->sb;
	if (!sb || !sb->driver->usage || s->state == SESSION_CREATING)
		return -ENOENT;
	struct session_usage_log *log = s->usage;
	uint64_t mono = time_mono_ms();
	if (log && log->n && mono - log->mono_ms < USAGE_MIN_INTERVAL_MS) {
		*ret = log->ring[(log->head + SESSION_USAGE_KEEP - 1) % SESSION_USAGE_KEEP];
		return 0;
	}
	struct cgroup_usage u;
	int r = sb->driver->usage(sb, &u);
	if (r < 0)
		return r;
	struct session_usage v = {
		.t_ms = time_wall_ms(),
		.cpu_count = cpu_count(&s->limits),
		.cpu_pct = -1,
		.memory_bytes = u.memory_bytes,
		.cache_bytes = u.cache_bytes,
		.memory_total = memory_total(&s->limits),
	};
	/* The CPU share since the last reading, or over the session's life for its first. */
	if (u.has_cpu) {
		uint64_t since_cpu = log && log->n ? log->cpu_usec : 0;
		uint64_t since_ms = log && log->n
					    ? mono - log->mono_ms
					    : (v.t_ms > s->created_ms ? v.t_ms - s->created_ms : 0);
		double used = u.cpu_usec > since_cpu ? (double)(u.cpu_usec - since_cpu) : 0;
		double pct =
			since_ms ? used / ((double)since_ms * 1000.0 * v.cpu_count) * 100.0 : 0;
		v.cpu_pct = pct > 100.0 ? 100.0 : pct;
	}
	uint64_t used, size;
	if (sb->driver->disk_usage && sb->driver->disk_usage(sb, &used, &size) == 0) {
		v.disk_used = used;
		v.disk_total = size;
	} else {
		v.disk_total = s->limits.workspace_bytes;
	}
	if (!log)
		log = s->usage = xcalloc(1, sizeof(*log));
	log->ring[log->head] = v;
	log->head = (log->head + 1) % SESSION_USAGE_KEEP;
	log->n += log->n < SESSION_USAGE_KEEP;
	if (u.has_cpu)
		log->cpu_usec = u.cpu_usec;
	log->mono_ms = mono;
	*ret = v;
	return 0;
}

size_t session_usage_read(const struct session *s, uint64_t from_ms, uint64_t to_ms,
			  struct session_usage *out, size_t max)
{
	const struct session_usage_log *log = s->usage;
	size_t k = 0;
	for (size_t i = 0; log && i < log->n && k < max; i++) {
		const struct session_usage *v =
			&log->ring[(log->head + SESSION_USAGE_KEEP - log->n + i) %
				   SESSION_USAGE_KEEP];
		if (v->t_ms >= from_ms && v->t_ms <= to_ms)
			out[k++] = *v;
	}
	return k;
}
