/* snapshot: named saves of running sessions, from which new sessions start (lifecycle.md).
 *
 * A snapshot is what a fork saves (driver.h: fork_save; a VM's RAM and devices with a copy
 * of its disk, a jail's copy of its disk), kept under a name of its owner's (the API key that
 * made it, "" without authentication; another key's snapshot of the same name is another
 * one) until it is deleted or expires (SANDBOX_SNAPSHOT_TTL, or less when asked). A session
 * made from it is made as a fork is, each with a disk of its own and an identity of its own;
 * it has the snapshot's template, resources and environment.
 *
 * Crash safety: the driver names a save only once it is complete, and the snapshot's row in
 * the state database is written after it; a start removes every save no row (of a snapshot
 * or a hibernated session) names. A delete forgets the row first, then frees the save; a
 * save sessions are being made from is freed once the last of them is made.
 *
 * Limits, per owner: SANDBOX_KEY_MAX_SNAPSHOTS of them, SANDBOX_KEY_MAX_SNAPSHOT_BYTES of
 * what their saves hold on the host's disk (checked before the save with what it will
 * hold at most, and after it with what it holds). Only the loop thread calls this module. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "session/session.h"
#include "util/err.h"

struct snapshot;

/* done(snapshot, NULL, arg) with the new snapshot's object (borrowed), or (NULL, err, arg). */
typedef void (*snapshot_done_fn)(json_t *snapshot, const struct err *err, void *arg);
/* Starts saving the running session s as its owner's snapshot `name`, kept for ttl_s
 * seconds (0: SANDBOX_SNAPSHOT_TTL). 0 and done later, or the error at once: EINVAL (the
 * name, ttl_s above SANDBOX_SNAPSHOT_TTL, volumes), EEXIST (the owner has one by that name,
 * or one is being made), EAGAIN (the owner's limits), ENOTSUP (the driver), EBUSY (s is not
 * running, or has operations in flight). */
int snapshot_take(struct session *s, const char *name, uint64_t ttl_s, snapshot_done_fn done,
		  void *arg, struct err *err);
/* The owner's snapshots (every owner's when owner is NULL, each with its "owner"). */
json_t *snapshot_list(const char *owner);
/* The owner's snapshot of that name; any_owner: else another owner's (admins). NULL:
 * ENOENT. */
json_t *snapshot_get(const char *owner, const char *name, bool any_owner, struct err *err);
/* Deletes it: its row at once, its save once no session is being made from it. ENOENT. */
int snapshot_delete(const char *owner, const char *name, bool any_owner, struct err *err);

/* A session made from a snapshot of its owner's: the snapshot, NULL with ENOENT. */
const struct snapshot *snapshot_find(const char *owner, const char *name, struct err *err);
/* What a session made from it has: its template's name, resources, environment (an object),
 * egress policy (an object or NULL), the guest's next channel (0: a new agent), and the
 * session it was taken from. */
const char *snapshot_template(const struct snapshot *sn);
void snapshot_resources(const struct snapshot *sn, struct session_resources *ret);
const json_t *snapshot_env(const struct snapshot *sn);
const json_t *snapshot_egress(const struct snapshot *sn);
uint32_t snapshot_next_channel(const struct snapshot *sn);
/* The id of the session it was taken from. */
const char *snapshot_session(const struct snapshot *sn);
/* The driver's record of the save (sandbox_spec.hibernated), valid while it is held. */
const json_t *snapshot_keep(const struct snapshot *sn);
/* A hold on its save while a sandbox is made from it; given back once that is done. */
struct snapshot *snapshot_hold(const struct snapshot *sn);
void snapshot_release(struct snapshot *sn);

/* At start (before any sandbox is made): loads the snapshots, claiming each one's save from
 * the driver (a row whose save is gone is forgotten), and appends every row's save to
 * `keeps` (the saves the driver must not sweep). */
void snapshot_load(json_t *keeps);
/* Deletes the snapshots whose time is up (the reaper's). */
void snapshot_reap(void);
/* How many there are and the bytes they hold (for /metrics). */
void snapshot_totals(uint64_t *count, uint64_t *bytes);
/* Forgets them all (the saves stay, for the next start). */
void snapshot_shutdown(void);
