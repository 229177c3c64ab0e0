#include "session/quota.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"

#define TABLE_SIZE 1024  /* buckets */
#define OWNERS_MAX 65536 /* beyond, owners holding nothing are forgotten */

struct owner {
	struct owner *next;
	char *id;
	bool admin;
	struct quota_set own;
	uint64_t used[QUOTA_NKINDS];
};

static const char *const names[QUOTA_NKINDS] = {
	[QUOTA_SESSIONS] = "sessions",        [QUOTA_COMMANDS] = "commands",
	[QUOTA_MCP_SESSIONS] = "mcpSessions", [QUOTA_FILE_OPS] = "fileOps",
	[QUOTA_STREAMS] = "streams",          [QUOTA_WATCHES] = "watches",
	[QUOTA_MEMORY] = "memoryBytes",       [QUOTA_DISK] = "diskBytes",
};

/* What each kind is called in messages, and the settings behind its numbers. */
static const char *const nouns[QUOTA_NKINDS] = {
	[QUOTA_SESSIONS] = "sessions",
	[QUOTA_COMMANDS] = "running commands",
	[QUOTA_MCP_SESSIONS] = "MCP sessions",
	[QUOTA_FILE_OPS] = "file operations in flight",
	[QUOTA_STREAMS] = "process streams and terminals open",
	[QUOTA_WATCHES] = "watch streams",
	[QUOTA_MEMORY] = "of sessions' memory",
	[QUOTA_DISK] = "of sessions' disks",
};
static const char *const cap_vars[QUOTA_NKINDS] = {
	[QUOTA_SESSIONS] = "SANDBOX_MAX_SESSIONS",
	[QUOTA_COMMANDS] = "SANDBOX_MAX_COMMANDS",
	[QUOTA_MCP_SESSIONS] = "SANDBOX_MCP_MAX_SESSIONS",
	[QUOTA_FILE_OPS] = "SANDBOX_MAX_FILE_OPS",
	[QUOTA_STREAMS] = "SANDBOX_MAX_STREAMS",
	[QUOTA_WATCHES] = "SANDBOX_MAX_WATCHES",
	[QUOTA_MEMORY] = "",
	[QUOTA_DISK] = "",
};
static const char *const key_vars[QUOTA_NKINDS] = {
	[QUOTA_SESSIONS] = "SANDBOX_KEY_MAX_SESSIONS",
	[QUOTA_COMMANDS] = "SANDBOX_KEY_MAX_COMMANDS",
	[QUOTA_MCP_SESSIONS] = "SANDBOX_KEY_MAX_MCP_SESSIONS",
	[QUOTA_FILE_OPS] = "SANDBOX_KEY_MAX_FILE_OPS",
	[QUOTA_STREAMS] = "SANDBOX_KEY_MAX_STREAMS",
	[QUOTA_WATCHES] = "SANDBOX_KEY_MAX_WATCHES",
	[QUOTA_MEMORY] = "SANDBOX_KEY_MAX_MEMORY_BYTES",
	[QUOTA_DISK] = "SANDBOX_KEY_MAX_DISK_BYTES",
};

#define KINDS_LIST \
	"sessions, commands, mcpSessions, fileOps, streams, watches, memoryBytes, diskBytes"

static struct {
	const struct config *cfg; /* read at each admission: the caps in force now */
	uint64_t total[QUOTA_NKINDS];
	struct owner *table[TABLE_SIZE];
	size_t nowners;
} quota_mod;

void quota_init(const struct config *cfg)
{
	quota_shutdown();
	quota_mod.cfg = cfg;
}

bool quota_kind_bytes(enum quota_kind k)
{
	return k == QUOTA_MEMORY || k == QUOTA_DISK;
}

/* The server's cap for k (0: none, before quota_init, and for the byte kinds). */
static uint64_t cap(enum quota_kind k)
{
	const struct config *c = quota_mod.cfg;
	if (!c)
		return 0;
	switch (k) {
	case QUOTA_MEMORY:
	case QUOTA_DISK:
		return 0;
	case QUOTA_SESSIONS:
		return c->max_sessions;
	case QUOTA_COMMANDS:
		return c->max_commands;
	case QUOTA_MCP_SESSIONS:
		return c->mcp_max_sessions;
	case QUOTA_STREAMS:
		return c->max_streams;
	case QUOTA_WATCHES:
		return c->max_watches;
	default:
		return c->max_file_ops;
	}
}

/* The server's quota for a key without one of its own (0: none). */
static uint64_t key_default(enum quota_kind k)
{
	const struct config *c = quota_mod.cfg;
	if (!c)
		return 0;
	switch (k) {
	case QUOTA_MEMORY:
		return c->key_max_memory_bytes;
	case QUOTA_DISK:
		return c->key_max_disk_bytes;
	case QUOTA_SESSIONS:
		return c->key_max_sessions;
	case QUOTA_COMMANDS:
		return c->key_max_commands;
	case QUOTA_MCP_SESSIONS:
		return c->key_max_mcp_sessions;
	case QUOTA_STREAMS:
		return c->key_max_streams;
	case QUOTA_WATCHES:
		return c->key_max_watches;
	default:
		return c->key_max_file_ops;
	}
}

void quota_shutdown(void)
{
	for (size_t i = 0; i < TABLE_SIZE; i++) {
		struct owner *o = quota_mod.table[i];
		while (o) {
			struct owner *next = o->next;
			free(o->id);
			free(o);
			o = next;
		}
		quota_mod.table[i] = NULL;
	}
	quota_mod.nowners = 0;
	quota_mod.cfg = NULL;
	memset(quota_mod.total, 0, sizeof(quota_mod.total));
}

void quota_set_default(struct quota_set *q)
{
	for (size_t i = 0; i < QUOTA_NKINDS; i++)
		q->v[i] = QUOTA_DEFAULT;
}

int quota_kind_from_name(const char *name)
{
	for (int i = 0; i < QUOTA_NKINDS; i++)
		if (strcmp(names[i], name) == 0)
			return i;
	return -1;
}

/* The largest quota a key can be given; far above any cap, far from overflowing: a
 * billion units, or a pebibyte. */
#define QUOTA_VALUE_MAX 1000000000LL
#define QUOTA_BYTES_MAX (1LL << 50)

static long long value_max(enum quota_kind k)
{
	return quota_kind_bytes(k) ? QUOTA_BYTES_MAX : QUOTA_VALUE_MAX;
}

int quota_set_merge_json(struct quota_set *q, json_t *obj, struct err *err)
{
	if (!json_is_object(obj))
		return err_set(
			err, EINVAL,
			"`quotas` must be an object such as {\"sessions\": 4} (kinds: " KINDS_LIST
			")");
	const char *name;
	json_t *v;
	json_object_foreach (obj, name, v) {
		int k = quota_kind_from_name(name);
		if (k < 0)
			return err_set(err, EINVAL, "unknown quota `%.64s` (kinds: " KINDS_LIST ")",
				       name);
		if (json_is_null(v)) {
			q->v[k] = QUOTA_DEFAULT;
			continue;
		}
		if (!json_is_integer(v) || json_integer_value(v) < 0 ||
		    json_integer_value(v) > value_max((enum quota_kind)k))
			return err_set(err, EINVAL,
				       "quota `%s` must be an integer from 0 (no quota of its own) "
				       "to %lld%s, or null (the server's default)",
				       name, value_max((enum quota_kind)k),
				       quota_kind_bytes((enum quota_kind)k) ? " (bytes)" : "");
		q->v[k] = json_integer_value(v);
	}
	return 0;
}

json_t *quota_set_json(const struct quota_set *q)
{
	json_t *o = json_object();
	for (size_t i = 0; i < QUOTA_NKINDS; i++)
		if (q->v[i] != QUOTA_DEFAULT)
			json_object_set_new(o, names[i], json_integer(q->v[i]));
	return o;
}

char *quota_set_dump(const struct quota_set *q)
{
	json_auto_t *o = quota_set_json(q);
	char *s = json_dumps(o, JSON_COMPACT | JSON_SORT_KEYS);
	if (!s)
		abort();
	return s;
}

void quota_set_load(struct quota_set *q, const char *text)
{
	quota_set_default(q);
	if (!text || !*text)
		return;
	json_auto_t *o = json_loads(text, 0, NULL);
	if (!json_is_object(o))
		return;
	for (size_t i = 0; i < QUOTA_NKINDS; i++) {
		json_t *v = json_object_get(o, names[i]);
		if (json_is_integer(v) && json_integer_value(v) >= 0 &&
		    json_integer_value(v) <= value_max((enum quota_kind)i))
			q->v[i] = json_integer_value(v);
	}
}

/* FNV-1a */
static size_t slot_of(const char *id)
{
	uint32_t h = 2166136261u;
	for (const unsigned char *p = (const unsigned char *)id; *p; p++)
		h = (h ^ *p) * 16777619u;
	return h % TABLE_SIZE;
}

static bool owner_idle(const struct owner *o)
{
	for (size_t i = 0; i < QUOTA_NKINDS; i++)
		if (o->used[i])
			return false;
	return true;
}

/* Forgets the owners that hold nothing: what auth noted of one is noted again on its next
 * request, before it can take anything. */
static void owners_sweep(void)
{
	for (size_t i = 0; i < TABLE_SIZE; i++) {
		for (struct owner **pp = &quota_mod.table[i]; *pp;) {
			struct owner *o = *pp;
			if (!owner_idle(o)) {
				pp = &o->next;
				continue;
			}
			*pp = o->next;
			free(o->id);
			free(o);
			quota_mod.nowners--;
		}
	}
}

static struct owner *owner_find(const char *id, bool create)
{
	struct owner **head = &quota_mod.table[slot_of(id)];
	for (struct owner *o = *head; o; o = o->next)
		if (strcmp(o->id, id) == 0)
			return o;
	if (!create)
		return NULL;
	if (quota_mod.nowners >= OWNERS_MAX) {
		owners_sweep();
		head = &quota_mod.table[slot_of(id)];
	}
	struct owner *o = xcalloc(1, sizeof(*o));
	o->id = xstrdup(id);
	quota_set_default(&o->own);
	o->next = *head;
	*head = o;
	quota_mod.nowners++;
	return o;
}

void quota_note_key(const char *owner, bool admin, const struct quota_set *own)
{
	if (!owner || !*owner)
		return;
	struct owner *o = owner_find(owner, true);
	o->admin = admin;
	o->own = *own;
}

static uint64_t limit_of(const struct owner *o, enum quota_kind k)
{
	if (!o)
		return 0;
	if (o->own.v[k] != QUOTA_DEFAULT)
		return (uint64_t)o->own.v[k];
	return o->admin ? 0 : key_default(k);
}

/* An owner nothing is known of yet (a session created before a restart, say) is a key
 * like any other: the default applies. */
static uint64_t limit_for(const char *owner, enum quota_kind k)
{
	if (!owner || !*owner)
		return 0;
	struct owner *o = owner_find(owner, false);
	return o ? limit_of(o, k) : key_default(k);
}

/* "3 GiB" for a message; "512 MiB" below one. */
static void bytes_text(char *buf, size_t size, uint64_t n)
{
	if (n >= (1ull << 30) && n % (1ull << 30) == 0)
		snprintf(buf, size, "%llu GiB", (unsigned long long)(n >> 30));
	else if (n >= (1ull << 30))
		snprintf(buf, size, "%.1f GiB", (double)n / (double)(1ull << 30));
	else
		snprintf(buf, size, "%llu MiB", (unsigned long long)((n + (1ull << 20) - 1) >> 20));
}

static int refuse_quota(struct owner *o, enum quota_kind k, uint64_t limit, uint64_t n,
			struct err *err)
{
	if (!quota_kind_bytes(k)) {
		err_set(err, EAGAIN,
			"Quota `%s` reached: this key holds %llu of its %llu %s (the key's own "
			"quota, or %s for every key)",
			names[k], (unsigned long long)o->used[k], (unsigned long long)limit,
			nouns[k], key_vars[k]);
		return -EAGAIN;
	}
	char held[32], of[32], more[32];
	bytes_text(held, sizeof(held), o->used[k]);
	bytes_text(of, sizeof(of), limit);
	bytes_text(more, sizeof(more), n);
	err_set(err, EAGAIN,
		"Quota `%s` reached: this key holds %s of its %s %s, and this asks %s more (the "
		"key's own quota, or %s for every key)",
		names[k], held, of, nouns[k], more, key_vars[k]);
	return -EAGAIN;
}

int quota_admit_n(const char *owner, enum quota_kind k, uint64_t n, struct err *err)
{
	if (!n)
		return 0;
	uint64_t c = cap(k);
	if (c && (quota_mod.total[k] >= c || n > c - quota_mod.total[k])) {
		if (k == QUOTA_SESSIONS)
			err_set(err, ENOBUFS,
				"The server is at its limit of %llu sessions "
				"(SANDBOX_MAX_SESSIONS)",
				(unsigned long long)c);
		else
			err_set(err, ENOBUFS, "The server is at its limit of %llu %s (%s)",
				(unsigned long long)c, nouns[k], cap_vars[k]);
		return -ENOBUFS;
	}
	if (owner && *owner) {
		struct owner *o = owner_find(owner, true);
		uint64_t limit = limit_of(o, k);
		if (limit && (o->used[k] >= limit || n > limit - o->used[k]))
			return refuse_quota(o, k, limit, n, err);
		o->used[k] += n;
	}
	quota_mod.total[k] += n;
	return 0;
}

int quota_admit(const char *owner, enum quota_kind k, struct err *err)
{
	return quota_admit_n(owner, k, 1, err);
}

void quota_take_n(const char *owner, enum quota_kind k, uint64_t n)
{
	quota_mod.total[k] += n;
	if (owner && *owner)
		owner_find(owner, true)->used[k] += n;
}

void quota_release_n(const char *owner, enum quota_kind k, uint64_t n)
{
	quota_mod.total[k] -= n < quota_mod.total[k] ? n : quota_mod.total[k];
	if (!owner || !*owner)
		return;
	struct owner *o = owner_find(owner, false);
	if (o)
		o->used[k] -= n < o->used[k] ? n : o->used[k];
}

void quota_release(const char *owner, enum quota_kind k)
{
	quota_release_n(owner, k, 1);
}

uint64_t quota_used(const char *owner, enum quota_kind k)
{
	if (!owner || !*owner)
		return 0;
	struct owner *o = owner_find(owner, false);
	return o ? o->used[k] : 0;
}

uint64_t quota_used_total(enum quota_kind k)
{
	return quota_mod.total[k];
}

uint64_t quota_limit(const char *owner, enum quota_kind k)
{
	return limit_for(owner, k);
}

json_t *quota_usage_json(const char *owner)
{
	json_t *o = json_object();
	for (size_t i = 0; i < QUOTA_NKINDS; i++) {
		uint64_t limit = limit_for(owner, (enum quota_kind)i);
		json_object_set_new(
			o, names[i],
			json_pack("{s:I, s:o}", "used",
				  (json_int_t)quota_used(owner, (enum quota_kind)i), "limit",
				  limit ? json_integer((json_int_t)limit) : json_null()));
	}
	return o;
}
