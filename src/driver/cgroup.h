/* cgroup: one control group per sandbox, under a parent of our own named `agent-sandbox`.
 *
 * The manager is chosen once at start (cgroup_configure, then cgroup_root_detect):
 *   - delegated v2: a systemd service with Delegate=yes (systemd marks the service's cgroup
 *     with the xattr trusted.delegate): <own>/agent-sandbox/<id>, where <own> is the daemon's
 *     own cgroup; the daemon moves itself (and any process of its own) into the leaf
 *     <own>/daemon first, since a cgroup that hands controllers to its children may hold no
 *     process. Nothing outside <own> is ever written.
 *   - plain v2 (started by hand, or a unit without delegation): <root>/agent-sandbox/<id>,
 *     with memory, cpu and pids enabled in the subtree_control of the root and of
 *     agent-sandbox.
 *   - v1: <root>/<controller>/agent-sandbox/<id> for the memory, cpu and pids hierarchies
 *     (cpuacct comes along where it is co-mounted with cpu).
 * Nothing outside agent-sandbox (and, delegated, the daemon's leaf) is ever created, written
 * or removed.
 *
 * The hierarchy root is a parameter so that the logic can be tested against a plain
 * directory tree (see cgroup_root_plain). Library code: nothing here logs. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/err.h"

#define CGROUP_PARENT "agent-sandbox"
/* Delegated: the leaf of the daemon's own cgroup that the daemon moves itself into. */
#define CGROUP_DAEMON_LEAF "daemon"
/* Where the cgroup hierarchies are mounted. */
#define CGROUP_ROOT "/sys/fs/cgroup"

/* The v1 controllers a sandbox is placed in, in this order. */
#define CGROUP_V1_MAX 3
/* Its directories at most: one per v1 hierarchy, and the freezer's. */
#define CGROUP_DIRS_MAX (CGROUP_V1_MAX + 1)

enum cgroup_version { CGROUP_V1 = 1, CGROUP_V2 = 2 };

/* SANDBOX_CGROUP: where a v2 host's sandboxes go. */
enum cgroup_delegation {
	CGROUP_DELEGATION_AUTO, /* below the daemon's own cgroup when systemd delegated it */
	CGROUP_DELEGATION_ON,   /* below the daemon's own cgroup, whatever it is marked */
	CGROUP_DELEGATION_OFF,  /* below the hierarchy's root */
};

/* Sets how cgroup_root_detect chooses, for the whole process; before any other call. */
void cgroup_configure(enum cgroup_delegation d);

struct cgroup_root {
	enum cgroup_version version;
	char *path;                   /* /sys/fs/cgroup, or a test directory; delegated: the
				       * daemon's own cgroup below it */
	bool delegated;               /* v2: path is the daemon's own, delegated cgroup */
	char *rel;                    /* path relative to the hierarchy's root: "" or
				       * "/system.slice/x.service" */
	bool plain;                   /* a plain directory tree: control files are created on
				       * first write, and removed before rmdir (tests) */
	unsigned n_ctl;               /* v1: distinct controller hierarchies */
	char *ctl_dir[CGROUP_V1_MAX]; /* v1: mount point of each (memory, cpu, pids) */
	char *freezer_dir;            /* v1: the freezer hierarchy's, when mounted (optional) */
};

struct cgroup_limits {
	uint64_t memory_bytes;  /* 0: no limit; swap is never allowed beyond it */
	uint64_t cpu_quota_us;  /* 0: no limit */
	uint64_t cpu_period_us; /* 0: 100000 */
	uint32_t pids_max;      /* 0: no limit */
};

struct cgroup {
	enum cgroup_version version;
	bool plain;
	char *id;
	unsigned n;                   /* directories: 1 for v2, one per v1 hierarchy */
	char *dir[CGROUP_DIRS_MAX];   /* the sandbox's cgroup directories, each once */
	char *procs[CGROUP_DIRS_MAX]; /* <dir>/cgroup.procs: where a process joins */
	char *freezer;                /* the directory with freezer.state (v1) or cgroup.freeze
				       * (v2), NULL without a freezer */
	char *ctl[CGROUP_V1_MAX];     /* the directory of each controller (memory, cpu, pids) */
	char *oom_file;               /* memory.events (v2) or memory.oom_control (v1) */
};

/* Finds which cgroup version is mounted at `path` (statfs) and, for v1, the memory, cpu and
 * pids hierarchies below it. Fails with a message naming what is missing. */
int cgroup_root_detect(const char *path, struct cgroup_root *ret, struct err *err);

/* Describes a plain directory tree at `path` as a hierarchy of `version` (tests). For v1 the
 * controller directories are <path>/memory, <path>/cpu and <path>/pids. */
void cgroup_root_plain(const char *path, enum cgroup_version version, struct cgroup_root *ret);
/* A plain tree at `path` as the daemon's own delegated v2 cgroup (tests). */
void cgroup_root_plain_delegated(const char *path, struct cgroup_root *ret);

/* What the manager is, for the log: "v1", "v2 at /sys/fs/cgroup" or "v2 delegated at ...". */
char *cgroup_root_describe(const struct cgroup_root *root);

void cgroup_root_free(struct cgroup_root *root);

/* Checks that the memory, cpu and pids controllers are available. */
int cgroup_check(const struct cgroup_root *root, struct err *err);

/* Creates the agent-sandbox parent(s) and, on v2, enables the controllers for its children;
 * delegated, first moves every process of the daemon's own cgroup into its leaf
 * CGROUP_DAEMON_LEAF. Idempotent. */
int cgroup_init(const struct cgroup_root *root, struct err *err);

/* The cgroup of sandbox `id` (paths only, nothing is created): for cleanup of a previous run.
 * `id` must be a valid sandbox id. */
int cgroup_open(const struct cgroup_root *root, const char *id, struct cgroup **ret,
		struct err *err);

/* The v2 cgroup of sandbox `id` at `dir`, a directory an earlier daemon recorded (it may
 * have had another delegated cgroup: a transient scope of its own). `dir` must be below
 * CGROUP_ROOT and end in /agent-sandbox/<id>, with no `.` or `..` component; EINVAL
 * otherwise, and on v1 (whose directories do not move). */
int cgroup_open_path(const struct cgroup_root *root, const char *id, const char *dir,
		     struct cgroup **ret, struct err *err);

/* The smallest limit of a v1 sandbox's TCP buffers. */
#define CGROUP_TCP_MIN (16ull << 20)
/* On cgroup v1, the limit of a sandbox's TCP buffers (memory.kmem.tcp.limit_in_bytes), which
 * v1 counts apart from its memory: a quarter of its memory limit, at least CGROUP_TCP_MIN. On
 * v2 they are part of memory.max. */
uint64_t cgroup_tcp_limit(uint64_t memory_bytes);

/* Creates the cgroup of sandbox `id` and applies the limits. Fails with EEXIST when it already
 * exists (a leftover is never reused). On failure nothing is left. */
int cgroup_create(const struct cgroup_root *root, const char *id,
		  const struct cgroup_limits *limits, struct cgroup **ret, struct err *err);

/* Moves process `pid` (and its threads) into the cgroup: each directory's cgroup.procs. */
int cgroup_enter(const struct cgroup *cg, pid_t pid, struct err *err);

/* How many processes the memory limit has killed (0 when unknown). One small read. */
uint64_t cgroup_oom_kills(const struct cgroup *cg);

/* What a sandbox's processes use, as its cgroup counts it. */
struct cgroup_usage {
	uint64_t cpu_usec;     /* CPU time, since the cgroup was made */
	uint64_t memory_bytes; /* memory charged, page cache included */
	uint64_t cache_bytes;  /* of which page cache (file-backed) */
	bool has_cpu;          /* whether cpu_usec was read */
	bool approximate;      /* v1 without cpuacct beside cpu: cpu_usec is the sum of its
				* processes' times now (which can go down when one ends) */
};

/* Reads the sandbox's usage: v2 memory.current, memory.stat's `file`, cpu.stat's
 * `usage_usec`; v1 memory.usage_in_bytes, memory.stat's `total_cache`, cpuacct.usage (where
 * cpuacct is mounted with cpu; else its processes' times from /proc). Fails when the memory
 * controller's files cannot be read. */
int cgroup_usage(const struct cgroup *cg, struct cgroup_usage *ret, struct err *err);

/* Kills every process left in the cgroup (cgroup.kill where available, else SIGKILL to each
 * listed pid, repeated until empty within a bounded wait) and removes its directories.
 * Idempotent: directories already gone are fine. Returns the first failure. */
int cgroup_remove(struct cgroup *cg, struct err *err);

/* Freezes every process of the cgroup (frozen) or lets them run again, and waits (a bounded
 * time) until the kernel says it is done: v2 cgroup.freeze, v1 the freezer hierarchy's
 * freezer.state. ENOTSUP without a freezer, ETIMEDOUT when it does not settle. */
int cgroup_freeze(const struct cgroup *cg, bool frozen, struct err *err);

/* Frees the paths; removes nothing. Accepts NULL. */
void cgroup_free(struct cgroup *cg);

/* Whether `id` may name a sandbox cgroup: 1-40 characters of [a-z0-9-], not starting with
 * '-'. Guards every path built from an id. */
bool cgroup_id_valid(const char *id);
