/* quota: what one caller may hold at once, and what the whole server may.
 *
 * Every resource a client holds for a while (a session, a running command, an MCP session,
 * a file operation in flight) is taken with quota_admit() and given back with
 * quota_release(). One function decides for all of them, in this order:
 *   1. the server's cap for the kind (SANDBOX_MAX_SESSIONS, SANDBOX_MAX_COMMANDS, ...);
 *   2. the caller's own quota: the key's override when it has one, else the server's default
 *      for keys (SANDBOX_KEY_MAX_*, a quarter of the cap unless set). Keys with the admin scope
 *      have no default quota (an admin can create keys, so a quota could not bind it), only
 *      an override when one is set; without authentication (owner "") only the caps apply.
 * A refusal names what was reached, in a message meant for the caller.
 *
 * The byte kinds (QUOTA_MEMORY, QUOTA_DISK) have no server cap: what the host still has is
 * measured at each creation (session.h), not summed from limits. A key's default for them is
 * a quarter of the host's memory, and of its state filesystem times the disk overcommit
 * (config_load), so that one key cannot promise itself the whole host.
 *
 * Counts are kept per owner (the key id) in a hash table, with what authentication last
 * noted of the key; beyond 65,536 owners, those holding nothing are forgotten (noted again on
 * their next request). Only the loop thread calls this. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "util/err.h"

enum quota_kind {
	QUOTA_SESSIONS,     /* sessions alive (being created or ready) */
	QUOTA_COMMANDS,     /* commands running (an execute from its request to its result) */
	QUOTA_MCP_SESSIONS, /* MCP sessions open */
	QUOTA_FILE_OPS,     /* file operations in flight (write, read, list) */
	QUOTA_STREAMS,      /* streams open: attaches to processes' output, terminals */
	QUOTA_WATCHES,      /* watch streams open (a watch from its request to its end) */
	/* Amounts rather than counts: bytes promised to the key's sessions, each charged the
	 * limit it was created with (its sandbox_limits), whatever it uses now. */
	QUOTA_MEMORY, /* memory limits of its sessions (memoryBytes) */
	QUOTA_DISK,   /* disks of its sessions with disk storage (diskBytes) */
	QUOTA_NKINDS
};

/* A key's own quotas: QUOTA_DEFAULT where it has none (the server's default applies),
 * QUOTA_UNLIMITED for no quota of its own (the server's cap still applies), else the
 * largest number it may hold. */
#define QUOTA_DEFAULT   (-1)
#define QUOTA_UNLIMITED 0
struct quota_set {
	int64_t v[QUOTA_NKINDS];
};

/* session_init() calls it: the caps are read from cfg at each admission. */
void quota_init(const struct config *cfg);
void quota_shutdown(void);

/* A set with every quota at QUOTA_DEFAULT. */
void quota_set_default(struct quota_set *q);
/* The kind a name of the API and the CLI names ("sessions", "commands", "mcpSessions",
 * "fileOps", "streams", "watches", "memoryBytes", "diskBytes"), -1 for an unknown name. */
int quota_kind_from_name(const char *name);
/* Whether k counts bytes rather than units. */
bool quota_kind_bytes(enum quota_kind k);
/* Merges a JSON object {"sessions": 4, "commands": null, ...} into *q: a number sets the
 * quota (0: none of its own), null puts back the default. EINVAL names an unknown kind or a
 * bad value. */
int quota_set_merge_json(struct quota_set *q, json_t *obj, struct err *err);
/* The quotas that are set (not QUOTA_DEFAULT), as an object. */
json_t *quota_set_json(const struct quota_set *q);
/* Text form for the key store: the JSON object, compact. */
char *quota_set_dump(const struct quota_set *q);
/* Reads quota_set_dump()'s text (NULL or empty: every default); unknown kinds are ignored
 * (a newer server's), bad values are taken as the default. */
void quota_set_load(struct quota_set *q, const char *text);

/* What authentication learnt of a key on its last successful check: whether it is an admin,
 * and its own quotas (copied). */
void quota_note_key(const char *owner, bool admin, const struct quota_set *own);

/* Takes one unit of kind k for owner. Returns 0, or fills err and returns -ENOBUFS when the
 * server's cap is reached, -EAGAIN when the caller's quota is (the caller chooses the status
 * of the cap; a quota is 429). */
int quota_admit(const char *owner, enum quota_kind k, struct err *err);
/* Gives back a unit quota_admit() gave. */
void quota_release(const char *owner, enum quota_kind k);
/* The same for n units (bytes, for the byte kinds) at once: all or none. n = 0 takes
 * nothing and is never refused. */
int quota_admit_n(const char *owner, enum quota_kind k, uint64_t n, struct err *err);
void quota_release_n(const char *owner, enum quota_kind k, uint64_t n);
/* Takes n units whatever the cap and quota: what was held before a restart is held again,
 * and a lowered quota does not turn it out (it only refuses more). */
void quota_take_n(const char *owner, enum quota_kind k, uint64_t n);

/* How many units of k owner holds, and the whole server. */
uint64_t quota_used(const char *owner, enum quota_kind k);
uint64_t quota_used_total(enum quota_kind k);
/* The quota in force for owner (0: none of its own). */
uint64_t quota_limit(const char *owner, enum quota_kind k);
/* {"sessions": {"used": 1, "limit": 32}, ...} for owner; limit null where there is none. */
json_t *quota_usage_json(const char *owner);
