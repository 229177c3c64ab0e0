/* session: the table of sessions, their state machine, the warm pool and the reaper.
 *
 * creating -> ready -> destroying -> gone, or creating -> failed (the error is handed to
 * every waiter and the session removed; nothing stays in `creating`). A session is named
 * by its owner (the API key id, "" without auth) and an id the client chose or we made;
 * owners never see each other's sessions. Only the loop thread touches this module. */
#pragma once

#include <event2/event.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "driver/driver.h"
#include "guest/client.h"
#include "session/preview.h"
#include "template/template.h"
#include "util/err.h"
#include "util/htab.h"

struct volume_mounts;
struct volume_claim;

enum session_state {
	SESSION_CREATING,
	SESSION_READY,
	SESSION_DESTROYING,
	SESSION_GONE,
	SESSION_FAILED,
	SESSION_PAUSED, /* its sandbox is frozen (session_pause); ready again after a resume */
};

/* Per-session limits asked for at creation; 0 keeps the server's. They may only tighten the
 * server's limits (session_resources_check). */
enum session_storage {
	SESSION_STORAGE_DEFAULT, /* SANDBOX_STORAGE */
	SESSION_STORAGE_TMPFS,
	SESSION_STORAGE_DISK,
};

/* What a session's own timeouts (its idle timeout, the E2B API's deadline) do when they fire:
 * destroy it (the default) or pause it (docs/lifecycle.md): hibernated where it can be (a
 * jail's hibernation keeps its files, not its processes), else frozen; or frozen, its
 * processes kept running from memory when it resumes (PAUSE_MEMORY, E2B's default pause). */
enum session_on_timeout {
	SESSION_ON_TIMEOUT_DESTROY,
	SESSION_ON_TIMEOUT_PAUSE,
	SESSION_ON_TIMEOUT_PAUSE_MEMORY,
};

/* Its name in the state database ("destroy", "pause", "pauseMemory"), and back (DESTROY for
 * anything else). */
const char *session_on_timeout_name(enum session_on_timeout t);
enum session_on_timeout session_on_timeout_parse(const char *name);

struct session_resources {
	uint64_t memory_bytes;
	uint64_t cpu_quota_us;
	uint64_t workspace_bytes; /* diskBytes */
	uint32_t pids_max;
	enum session_storage storage; /* "storage": tmpfs or disk (jail) */
};

/* What a session holds of its owner's quotas beyond its unit of `sessions`: its memory
 * limit and its disk's size (session/quota.h, QUOTA_MEMORY and QUOTA_DISK). */
struct session_charge {
	uint64_t memory, disk;
};

struct session {
	struct hlink by_id;      /* session_mod.ids: by id */
	struct hlink by_preview; /* session_mod.previews: by preview_name */
	char *id;                /* client-visible id */
	char *owner;             /* API key id, "" when auth is off */
	char *sandbox_id;        /* internal id naming cgroups and dirs */
	struct template *tmpl;
	enum session_state state;
	struct err failure;
	struct session_resources resources; /* asked for at creation (0: the server's) */
	struct sandbox_limits limits;       /* in force: session_limits() */
	struct session_charge charge;       /* what its owner's quotas hold for it (admit.c) */
	struct sandbox *sb;
	struct guest_conn *conn;
	/* Its sandbox's OOM kills (driver oom_kills) already told to a client, as a command's
	 * oomKilled: those after them are news when the agent is lost. */
	uint64_t oom_told;
	struct volume_claim *volumes; /* what it mounts (volume.h), NULL: none */
	json_t *env;                  /* default environment for commands (object) */
	uint64_t created_ms;          /* wall clock */
	uint64_t active_mono_ms;      /* monotonic time of the last activity */
	uint64_t attach_mono_ms;      /* when the sandbox was handed over */
	unsigned idle_timeout_s;
	unsigned running; /* operations in flight: they count as activity */
	uint64_t execs_total;
	struct session_waiter *waiters;
	struct session_gone_waiter *gone_waiters; /* session_on_gone() */
	struct session_exec *execs;
	/* preview.h: its host-name label, its secret and the ports open to anyone */
	char preview_name[SESSION_PREVIEW_NAME_MAX + 1];
	bool id_generated; /* session_create_opts.id_generated */
	uint8_t secret[SESSION_SECRET_LEN];
	uint16_t public_ports[SESSION_PUBLIC_PORTS_MAX];
	size_t npublic;
	unsigned proxied;           /* connections to its ports open now */
	unsigned proxied_anonymous; /* of those, made by visitors without key or token */
	bool transition;            /* a pause or resume runs on a worker (it holds sb) */
	bool destroy_pending;       /* destroyed meanwhile: the sandbox goes when it ends */
	uint64_t paused_ms;         /* wall clock of the last pause */
	enum session_on_timeout on_timeout;
	bool auto_resume; /* session_create_opts.auto_resume */
	bool auto_paused; /* its last pause was its timeout's (on_timeout) */
	bool disk_paused; /* frozen by the state filesystem's watch (admit.c) */
	/* Hibernation (hibernate.c): paused with no sandbox at all, its disk kept by the driver
	 * (kept: the driver's record of it, also in the state database); hibernating while that
	 * runs, resuming while a new sandbox is made over the disk (state creating). */
	bool hibernated, hibernating, resuming;
	json_t *kept;
	uint32_t next_channel; /* its last connection's next channel id (hibernate.c), or 0 */
	json_t *egress_spec;   /* the egress policy it asked for at creation (a copy), or NULL */
	char *snapshot;        /* the snapshot it was made from (snapshot.h), or NULL */
	/* A sandbox made from a save of a running VM (its processes carried on): what the next
	 * `resume` tells its agent, {"from": "hibernation" | "fork" | "snapshot", "session": the
	 * id it was saved as} (guest protocol 10), or NULL; once its agent answered, with
	 * "processes" (its background processes running then), in the session object. */
	json_t *restored;
	/* The E2B API's view (api/e2b.c): an absolute deadline (wall clock ms, 0: none) that
	 * replaces the idle timeout, the client's metadata (object of strings) and the template
	 * id it asked for (an alias of tmpl's name, or NULL). */
	uint64_t deadline_ms;
	uint32_t deadline_span_s; /* how far ahead the deadline was last set */
	json_t *metadata;
	char *alias;
	/* The code interpreter's contexts (api/interp.c): id -> {language, cwd, tag, busy,
	 * executions}, or NULL. */
	json_t *e2b_contexts;
	struct session_usage_log *usage; /* its last readings (usage.c), NULL before the first */
	int refs;
	struct session *next;
};

/* --- usage (usage.c) ----------------------------------------------------------------------
 * What a session's sandbox uses, read from the host's counters when asked; the last
 * SESSION_USAGE_KEEP readings are kept (at most one a second). */
#define SESSION_USAGE_KEEP 32

struct session_usage {
	uint64_t t_ms;         /* when (wall clock) */
	unsigned cpu_count;    /* its vCPUs, or its CPU quota rounded up, or the host's */
	double cpu_pct;        /* of cpu_count, since the reading before (-1: not counted) */
	uint64_t memory_bytes; /* charged to it, page cache included */
	uint64_t cache_bytes;  /* of which page cache */
	uint64_t memory_total; /* its memory limit (or guest RAM, or the host's) */
	uint64_t disk_used, disk_total;
};

/* Reads what the session uses now and keeps the reading (a reading under a second old is
 * returned as it is). -ENOENT while it has no running sandbox (creating, hibernated, gone),
 * or when the driver cannot tell. */
int session_usage_take(struct session *s, struct session_usage *ret);
/* Copies into out (at most max) the kept readings taken between from_ms and to_ms (wall
 * clock, inclusive), oldest first; returns how many. */
size_t session_usage_read(const struct session *s, uint64_t from_ms, uint64_t to_ms,
			  struct session_usage *out, size_t max);
void session_usage_free(struct session *s);

/* A running command that can be cancelled by id. */
struct session_exec {
	char id[25];
	struct guest_op *op;
	struct session_exec *next;
};

struct session_create_opts {
	/* The id was made by the server (random, never a client's choice): it may serve as the
	 * session's preview name as it is (preview.h). */
	bool id_generated;
	const struct session_resources *resources; /* NULL: the server's limits */
	const char *template_name;                 /* NULL: the default template */
	unsigned idle_timeout_s;                   /* 0: the server default */
	enum session_on_timeout on_timeout;        /* what its timeouts do */
	/* A paused one is resumed by a request to one of its ports (preview.h), as by an
	 * explicit resume. */
	bool auto_resume;
	json_t *env; /* borrowed, object or NULL */
	/* Borrowed, NULL: the server's egress policy. An object {dns, dest, bandwidth} merged
	 * into it by net_policy_merge (net/policy.h): it may only tighten it, and a looser one
	 * fails the creation (EINVAL, with the reason). */
	const json_t *egress;
	/* Borrowed, NULL: none. The owner's volumes to mount (volume.h): jail with disk storage
	 * only (EINVAL otherwise); ENOENT for an unknown one, EBUSY for a second writer. */
	const struct volume_mounts *volumes;
	/* NULL: none. The owner's snapshot to make it from (snapshot.h): its template, resources,
	 * environment and egress policy are the session's (EINVAL with a template, resources or
	 * volumes of its own), ENOENT for an unknown one. */
	const char *snapshot;
};

typedef void (*session_ready_fn)(struct session *s, const struct err *err, void *arg);

/* Starts the session layer: loads templates, cleans up what a previous run left (using the
 * store), starts the reaper and fills the warm pools. */
int session_init(struct event_base *base, const struct config *cfg, const struct driver *drv,
		 struct err *err);

/* Destroys every session and pooled sandbox, waiting (on the loop) until all are gone;
 * calls done() when nothing of ours remains. What still runs fails with ESHUTDOWN ("the
 * server is shutting down"). */
void session_shutdown(void (*done)(void *arg), void *arg);

/* The shutdown grace begins: from now on no session is created and no command started
 * (ESHUTDOWN, "the server is shutting down"); what runs may finish until session_shutdown. */
void session_grace_begin(void);
/* Whether the shutdown grace (or the shutdown) has begun. */
bool session_closing(void);

/* Reloads templates from disk (SIGHUP). */
int session_reload_templates(struct err *err);
const struct template_registry *session_templates(void);
const struct driver *session_driver(void);
/* Why the session's agent is lost, into ret: `why` (the connection's end), or, when the
 * sandbox's OOM killer has killed processes since `oom_since` (a count of the driver's
 * oom_kills), that: the agent went with them, which the connection alone does not say. */
void session_lost_reason(const struct session *s, uint64_t oom_since, const struct err *why,
			 struct err *ret);

/* Finds a session (NULL if it does not exist for this owner). */
struct session *session_find(const char *owner, const char *id);

/* Gets a ready session, creating it when it does not exist. cb runs exactly once, possibly
 * before this returns; on failure err says why (ENOENT for an unknown template, EAGAIN at
 * capacity...). `created` (optional) tells whether a new session was started. */
void session_get_or_create(const char *owner, const char *id,
			   const struct session_create_opts *opts, session_ready_fn cb, void *arg,
			   bool *created);

/* Checks `r` against the server's limits: memoryBytes up to the cap SANDBOX_MAX_MEMORY_BYTES,
 * the others only lower; EINVAL naming the field (and the cap) otherwise. */
int session_resources_check(const struct session_resources *r, struct err *err);

/* The limits a session of template `t` runs with: each from the request (`r`, may be NULL),
 * else the template's manifest (memSizeMib, vcpuCount), else the server's default. EINVAL
 * naming the cap when its memory passes SANDBOX_MAX_MEMORY_BYTES, or (VM drivers) its vCPUs
 * SANDBOX_MAX_VCPUS. */
int session_limits(const struct template *t, const struct session_resources *r,
		   struct sandbox_limits *ret, struct err *err);

/* Admission by measurement (admit.c). session_memory_check: 0 while the host's MemAvailable
 * is at or above SANDBOX_MEMORY_WATERMARK_BYTES (or the check is off), else ENOMEM saying so.
 * session_descriptor_check: 0 while at least SANDBOX_DESCRIPTOR_RESERVE of the daemon's
 * descriptors are free, else EMFILE. session_host_check: both, for a sandbox about to be
 * made, counting a refusal in admission_refusals_total. Both errors are 503 with
 * Retry-After. */
int session_memory_check(struct err *err);
/* MemAvailable from /proc/meminfo in bytes, or -1 when it cannot be read. */
int64_t session_host_memory_available(void);
int session_descriptor_check(struct err *err);
int session_host_check(struct err *err);
/* "memory" for ENOMEM, "descriptors" for EMFILE, else NULL: the reason of a refusal. */
const char *session_host_reason(int errnum);
/* Sets the gauges of host memory and free descriptors (on each scrape). */
void session_host_publish(void);

/* The state filesystem's watch (driver/room.h): every SESSION_ROOM_TICK_MS, while its free
 * space is below SANDBOX_DISK_RESERVE_BYTES, the ready session whose disk uses the most beyond
 * its share (its size over SANDBOX_DISK_OVERCOMMIT) is frozen, one a tick, with operations in
 * flight or not (pausedBy "disk"); it resumes only once the reserve is free again. */
#define SESSION_ROOM_TICK_MS 250
void session_room_watch(struct event_base *base);
void session_room_unwatch(void);
/* Above SANDBOX_DISK_OVERCOMMIT 1: 0 when `bytes` more of disk (a session's, a volume's)
 * keep the disks and volumes promised within the ratio times the room (the free space beyond
 * the reserve, and what the running disks hold), else ENOSPC naming the numbers (507). At 1
 * the image's own allocation decides (driver/room.h): 0. */
int session_disk_check(uint64_t bytes, struct err *err);
/* 0 while the state filesystem's reserve is free, else ENOSPC saying so (/ready, resume). */
int session_room_low(struct err *err);

/* Freezes a ready session even with operations in flight (they carry on after its resume):
 * the state filesystem's watch. As session_pause otherwise. */
void session_freeze_now(struct session *s,
			void (*cb)(struct session *s, const struct err *err, void *arg), void *arg);

/* Validates a client-chosen session id. */
bool session_id_valid(const char *id);
/* Makes a fresh random session id (caller frees). */
char *session_new_id(void);

/* Pauses a ready session with no operation in flight (its sandbox's processes are frozen:
 * they use no CPU, their memory stays) or resumes a paused one; cb runs once, from the loop,
 * when done (err: EBUSY in the wrong state or with operations in flight, ENOTSUP when the
 * driver or the host cannot, the driver's failure otherwise). While paused the session's
 * operations are refused (EBUSY, "is paused"), its agent is not pinged, its idle clock is
 * stopped and its lifetime still runs. */
void session_pause(struct session *s, bool pause,
		   void (*cb)(struct session *s, const struct err *err, void *arg), void *arg);

/* How a session is paused (docs/lifecycle.md): frozen (its processes stop, memory kept), or
 * hibernated (its sandbox freed, so that it costs no memory, and kept on disk: it survives a
 * daemon restart. qemu: the whole VM, and a resume restores it, its processes carrying on;
 * jail with a disk: its disk only, its processes are ended, and a resume starts a fresh agent
 * over the same disk). SESSION_PAUSE_KEEP: hibernated where the processes carry on after it
 * (qemu), else frozen: what E2B's pause is. */
enum session_pause_mode {
	SESSION_PAUSE_FREEZE,
	SESSION_PAUSE_HIBERNATE,
	SESSION_PAUSE_KEEP,
};

/* Sets what a timeout's pause calls first, so that a transport ends what its clients hold
 * open in the session (streams, watches) as its own pause does: their operations in flight
 * would keep it from pausing. */
void session_set_suspend_hook(void (*fn)(const char *owner, const char *id));

/* Whether the session can be hibernated now, as far as its sandbox goes (a driver that can,
 * a disk where the driver keeps only that, no volumes). */
bool session_can_hibernate(const struct session *s);

/* session_pause with a mode. Hibernating: a ready or frozen session with no operation in
 * flight (EBUSY), of a driver that can (ENOTSUP, also for a session without a disk or with
 * volumes). A resume resumes either kind. */
void session_pause_mode(struct session *s, bool pause, enum session_pause_mode mode,
			void (*cb)(struct session *s, const struct err *err, void *arg), void *arg);

/* Forks a running session (fork.c, docs/lifecycle.md): count new sessions of its owner from
 * its current state, each with an identity of its own. cb runs once every fork is ready or
 * failed, with a JSON array (borrowed) of the forks' session objects ({"id", "state":
 * "failed", "error"} for one that failed), or with err when none could be made: EBUSY (not
 * running, operations in flight), ENOTSUP (a driver that cannot), EINVAL (volumes), EAGAIN
 * (beyond the owner's or the server's sessions), ESHUTDOWN; the driver's error otherwise.
 * It may run before session_fork returns. */
typedef void (*session_fork_fn)(json_t *forks, const struct err *err, void *arg);
void session_fork(struct session *s, unsigned count, session_fork_fn cb, void *arg);

/* Starts destroying the session; it disappears from the table at once. */
void session_destroy(struct session *s, const char *why);
/* Calls fn(arg) once the session is gone (state gone: its sandbox destroyed, its disk
 * unmounted, its volumes given back), at once when it is. A session that is not being
 * destroyed keeps fn until it is. */
void session_on_gone(struct session *s, void (*fn)(void *arg), void *arg);

/* Keeps a session alive while an operation runs. */
void session_ref(struct session *s);
void session_unref(struct session *s);
void session_touch(struct session *s);
void session_op_begin(struct session *s);
void session_op_end(struct session *s);

/* Registers a running command so that it can be cancelled by id. */
struct session_exec *session_exec_add(struct session *s, struct guest_op *op);
void session_exec_remove(struct session *s, struct session_exec *e);
struct session_exec *session_exec_find(struct session *s, const char *exec_id);

/* Iterates over the sessions of `owner` (all sessions when owner is NULL). */
void session_foreach(const char *owner, void (*fn)(struct session *s, void *arg), void *arg);
size_t session_count(void);
size_t session_pool_size(void);
/* The same per template: {"base": 1, ...} (every template with a pool). */
json_t *session_pool_sizes(void);
json_t *session_json(const struct session *s);
const char *session_state_name(enum session_state st);

/* Whether the driver can currently create sandboxes (for /ready). */
bool session_driver_healthy(struct err *err);
