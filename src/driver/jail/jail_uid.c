/* jail_uid: the host uid/gid ranges that the sandboxes' user namespaces map to.
 *
 * Range i is [base + i * 65536, base + (i + 1) * 65536): uid and gid alike, root inside the
 * sandbox being its first id. A range belongs to one live sandbox at a time; a destroyed
 * sandbox's range is handed out again. Ranges must not overlap what /etc/subuid and
 * /etc/subgid give to users: those users' own rootless containers would then share host ids
 * (and with them files, signals and per-user budgets) with our sandboxes. */
#include "driver/jail/jail.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "util/cleanup.h"

static struct {
	pthread_mutex_t lock;
	uint32_t base;
	unsigned n;
	uint8_t *used; /* one byte per range: 1 while a sandbox (or a leftover) holds it */
	unsigned next; /* where the search for a free range starts */
} ids = { .lock = PTHREAD_MUTEX_INITIALIZER };

/* "name:start:count" lines; # comments and blank lines skipped. A missing file is no entry.
 * Entries of `owner` (the account the package registers the ranges for, so that useradd
 * gives them to nobody else) are the daemon's own and never an overlap. */
int jail_subid_check(const char *path, uint64_t lo, uint64_t hi, const char *owner, struct err *err)
{
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? 0 : err_sys(err, errno, "jail: %s", path);
	char line[512];
	unsigned no = 0;
	while (fgets(line, sizeof(line), f)) {
		no++;
		char *p = line;
		while (isspace((unsigned char)*p))
			p++;
		if (!*p || *p == '#')
			continue;
		char *c1 = strchr(p, ':');
		char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		if (owner && *owner && strlen(owner) == (size_t)(c1 - p) &&
		    strncmp(p, owner, (size_t)(c1 - p)) == 0)
			continue;
		char *end;
		errno = 0;
		uint64_t start = strtoull(c1 + 1, &end, 10);
		if (errno || end != c2)
			continue;
		uint64_t count = strtoull(c2 + 1, &end, 10);
		if (errno || count == 0)
			continue;
		/* [start, start + count) against [lo, hi) */
		if (start < hi && lo < start + count)
			return err_set(err, EEXIST,
				       "jail: the sandboxes' uid/gid ranges [%" PRIu64 ", %" PRIu64
				       ") overlap %s line %u (%.*s, ids %" PRIu64 "-%" PRIu64
				       "): set SANDBOX_UID_BASE outside every entry",
				       lo, hi, path, no, (int)(c1 - p), p, start,
				       start + count - 1);
	}
	return 0;
}

/* The configuration's defaults, for a configuration that was not loaded (tests). */
#define DEFAULT_BASE   0x70000000U
#define DEFAULT_RANGES 1024U

int jail_uid_setup(const struct config *cfg, struct err *err)
{
	uint64_t lo = cfg->uid_base ? cfg->uid_base : DEFAULT_BASE;
	unsigned n = cfg->uid_ranges ? cfg->uid_ranges : DEFAULT_RANGES;
	const char *subuid = cfg->subuid_file ? cfg->subuid_file : "/etc/subuid";
	const char *subgid = cfg->subgid_file ? cfg->subgid_file : "/etc/subgid";
	const char *owner = cfg->subid_owner;
	uint64_t hi = lo + (uint64_t)n * JAIL_UID_RANGE;
	/* ping_group_range and the kernel's id maps stop at 2^31 - 1 and 2^32 - 2. */
	if (hi > (1ULL << 31))
		return err_set(err, ERANGE,
			       "jail: SANDBOX_UID_BASE %" PRIu64
			       " with %u ranges of %u ends at %" PRIu64 ", beyond 2^31",
			       lo, n, JAIL_UID_RANGE, hi);
	int r;
	if ((r = jail_subid_check(subuid, lo, hi, owner, err)) < 0 ||
	    (r = jail_subid_check(subgid, lo, hi, owner, err)) < 0)
		return r;
	pthread_mutex_lock(&ids.lock);
	/* Set up once: probe and init both check, and ranges in use stay in use. */
	if (!ids.used) {
		ids.used = xcalloc(n, 1);
		ids.base = (uint32_t)lo;
		ids.n = n;
		ids.next = 0;
	}
	pthread_mutex_unlock(&ids.lock);
	return 0;
}

int jail_uid_alloc(uint32_t *ret, struct err *err)
{
	pthread_mutex_lock(&ids.lock);
	int r = err_set(err, EAGAIN, "jail: all %u uid ranges are in use (SANDBOX_UID_RANGES)",
			ids.n);
	for (unsigned k = 0; k < ids.n; k++) {
		unsigned i = (ids.next + k) % ids.n;
		if (ids.used[i])
			continue;
		ids.used[i] = 1;
		/* Round robin: a range just freed rests while the others are used. */
		ids.next = (i + 1) % ids.n;
		*ret = ids.base + i * JAIL_UID_RANGE;
		r = 0;
		break;
	}
	pthread_mutex_unlock(&ids.lock);
	return r;
}

/* The index of the range that begins at base, or -1. Called with ids.lock held. */
static long range_index(uint32_t base)
{
	if (!ids.used || base < ids.base || (base - ids.base) % JAIL_UID_RANGE)
		return -1;
	uint32_t i = (base - ids.base) / JAIL_UID_RANGE;
	return i < ids.n ? (long)i : -1;
}

void jail_uid_release(uint32_t base)
{
	pthread_mutex_lock(&ids.lock);
	long i = range_index(base);
	if (i >= 0)
		ids.used[i] = 0;
	pthread_mutex_unlock(&ids.lock);
}

int jail_uid_claim(uint32_t base, struct err *err)
{
	pthread_mutex_lock(&ids.lock);
	long i = range_index(base);
	int r = 0;
	if (i < 0)
		r = err_set(err, EINVAL, "jail: no uid range begins at %" PRIu32, base);
	else if (ids.used[i])
		r = err_set(err, EBUSY, "jail: the uid range at %" PRIu32 " is in use", base);
	else
		ids.used[i] = 1;
	pthread_mutex_unlock(&ids.lock);
	return r;
}

/* Whether any process on the host runs with a real uid in [lo, lo + JAIL_UID_RANGE). */
static bool range_busy(uint32_t lo)
{
	_cleanup_closedir_ DIR *d = opendir("/proc");
	if (!d)
		return true;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (!isdigit((unsigned char)de->d_name[0]))
			continue;
		char path[300], line[256];
		snprintf(path, sizeof(path), "/proc/%s/status", de->d_name);
		_cleanup_fclose_ FILE *f = fopen(path, "re");
		while (f && fgets(line, sizeof(line), f)) {
			unsigned long uid;
			if (sscanf(line, "Uid: %lu", &uid) != 1)
				continue;
			if (uid >= lo && uid - lo < JAIL_UID_RANGE)
				return true;
			break;
		}
	}
	return false;
}

void jail_uid_reserve_if_busy(uint32_t base)
{
	/* Outside the lock: reading every process's status takes a while. */
	bool busy = range_busy(base);
	pthread_mutex_lock(&ids.lock);
	long i = range_index(base);
	if (i >= 0 && busy)
		ids.used[i] = 1;
	pthread_mutex_unlock(&ids.lock);
}
