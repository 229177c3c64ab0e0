/* htab: an intrusive hash table with a keyed hash, for tables whose keys clients choose.
 *
 * Entries embed a struct hlink; the table never allocates them and never compares keys: a
 * lookup walks the chain of one hash (htab_first, htab_next) and the caller compares its own
 * keys, so one table can hold entries whose identity is several fields (an owner and an id).
 * The hash is SipHash-2-4 under a key drawn at start-up, so that a client cannot choose ids
 * that fall into one chain. Buckets double when the table is as full as it has buckets and
 * never shrink; operations are O(1) on average, and nothing here can fail but allocation
 * (which aborts, as everywhere in the daemon). Not thread-safe: one table, one thread. */
#pragma once

#include <stddef.h>
#include <stdint.h>

struct hlink {
	struct hlink *next;
	uint64_t hash;
};

/* The entry of type `type` whose member `member` is the link l. */
#define htab_entry(l, type, member) ((type *)(void *)((char *)(l)-offsetof(type, member)))

struct htab {
	struct hlink **buckets;
	size_t nbuckets; /* a power of two, or 0 before the first insert */
	size_t count;
};

/* The keyed hash of n bytes, and of a NUL-terminated string. */
uint64_t htab_hash(const void *data, size_t n);
uint64_t htab_hash_str(const char *s);
/* Mixes a second hash into h (for keys of several fields). */
uint64_t htab_hash_combine(uint64_t h, uint64_t more);

void htab_insert(struct htab *t, struct hlink *l, uint64_t hash);
/* Removes l, which must be in t. */
void htab_remove(struct htab *t, struct hlink *l);
/* The first entry whose hash is `hash`, then the next one of the same hash, or NULL. */
struct hlink *htab_first(const struct htab *t, uint64_t hash);
struct hlink *htab_next(const struct hlink *l);
void htab_fini(struct htab *t);
