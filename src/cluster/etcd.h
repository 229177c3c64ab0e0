/* etcd: a client of etcd's v3 API through its JSON gateway (POST /v3/...), over libcurl; no
 * gRPC stack.
 *
 * Calls block, each bounded by the client's timeout, and are made from a thread of the
 * caller's (never the event loop's): a client is used by one thread at a time. Keys and values
 * are bytes (base64 on the wire). The endpoints are tried in turn: one that cannot be reached
 * moves the client to the next, and a call fails only once every endpoint failed. With a user
 * and password, the client authenticates (POST /v3/auth/authenticate) and sends its token,
 * again when etcd says the token expired. TLS: a CA to check the servers by, and a client
 * certificate and key where etcd asks for one.
 *
 * What the gateway answers is untrusted input: every reply is bounded (ETCD_MAX_REPLY) and
 * parsed strictly (etcd_parse_range, etcd_watch_parse_line, fuzzed). */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define ETCD_MAX_REPLY (16u << 20)

struct etcd_opts {
	const char *endpoints; /* "http://h1:2379,https://h2:2379" */
	long timeout_ms;       /* each call's bound (a watch's connection only) */
	const char *user, *password;
	const char *ca, *cert, *key; /* PEM files, or NULL */
};

struct etcd_client;

/* A client (no connection is made yet); EINVAL naming the bad endpoint. */
int etcd_new(const struct etcd_opts *o, struct etcd_client **ret, struct err *err);
struct etcd_client *etcd_free(struct etcd_client *c);
/* A flag that, once true, ends a call under way (a watch) with ECANCELED. */
void etcd_set_stop(struct etcd_client *c, const atomic_bool *stop);
/* A flag that, once true, ends a watch under way with ECANCELED (the caller clears it and
 * watches again). */
void etcd_set_restart(struct etcd_client *c, const atomic_bool *restart);
/* The endpoint the last call used (or will try first). */
const char *etcd_endpoint(const struct etcd_client *c);

struct etcd_kv {
	char *key;
	char *value; /* NUL-terminated too */
	size_t value_len;
	int64_t create_rev, mod_rev, lease;
};

struct etcd_kvs {
	struct etcd_kv *v;
	size_t n;
	int64_t revision; /* the store's revision when read */
};

/* Whether an error answer (HTTP status, the gateway's message) is one another member may
 * not give: no leader, or a member going away. A call then tries the next endpoint. */
bool etcd_try_another_member(long status, const char *msg);

void etcd_kv_clear(struct etcd_kv *kv);
void etcd_kvs_clear(struct etcd_kvs *kvs);

/* The key (prefix: every key below it) as read now. */
int etcd_get(struct etcd_client *c, const char *key, bool prefix, struct etcd_kvs *ret,
	     struct err *err);
/* Puts a value (lease 0: none); *ret_rev (optional) gets the revision it made. */
int etcd_put(struct etcd_client *c, const char *key, const char *value, size_t len, int64_t lease,
	     int64_t *ret_rev, struct err *err);
/* Deletes the key (prefix: every key below it); *ret_deleted (optional) gets how many. */
int etcd_delete(struct etcd_client *c, const char *key, bool prefix, int64_t *ret_deleted,
		struct err *err);
/* Creates the key only where it does not exist (one transaction): *ret_created says whether
 * it did; when it did not, *ret_existing (optional) gets what is there. *ret_rev (optional):
 * the revision of the creation. */
int etcd_create(struct etcd_client *c, const char *key, const char *value, size_t len,
		int64_t lease, bool *ret_created, struct etcd_kv *ret_existing, int64_t *ret_rev,
		struct err *err);
/* A condition of etcd_put_if: `key`'s create revision (0: it does not exist) or mod
 * revision is `rev`. */
struct etcd_cmp {
	const char *key;
	bool mod; /* compare the mod revision, else the create revision */
	int64_t rev;
};
/* Puts `key` (value NULL: deletes it) only where every condition holds (one transaction):
 * *ret_ok says whether it did, and *ret_rev (optional) the revision it made; when it did not,
 * *ret_existing (optional) gets `key` as it is (empty when absent). */
int etcd_put_if(struct etcd_client *c, const char *key, const char *value, size_t len,
		const struct etcd_cmp *cmps, size_t ncmps, bool *ret_ok, int64_t *ret_rev,
		struct etcd_kv *ret_existing, struct err *err);
/* Deletes the key only while its mod revision is `mod_rev` (nobody changed it since). */
int etcd_delete_if(struct etcd_client *c, const char *key, int64_t mod_rev, bool *ret_deleted,
		   struct err *err);
/* Creates `key2` and puts `key1` only where `key1` does not exist (one transaction): the
 * bootstrap of a fresh cluster, where exactly one caller wins. */
int etcd_create_pair(struct etcd_client *c, const char *key1, const char *value1, const char *key2,
		     const char *value2, bool *ret_created, struct err *err);

int etcd_lease_grant(struct etcd_client *c, int64_t ttl_s, int64_t *ret_id, struct err *err);
/* Renews the lease; ENOENT when it has expired (etcd answers a TTL of 0). */
int etcd_lease_keepalive(struct etcd_client *c, int64_t id, int64_t *ret_ttl, struct err *err);
int etcd_lease_revoke(struct etcd_client *c, int64_t id, struct err *err);

enum etcd_event_type {
	ETCD_EVENT_PUT,
	ETCD_EVENT_DELETE,
};

/* Called for each event; return nonzero to end the watch (etcd_watch then returns 0). */
typedef int (*etcd_watch_fn)(enum etcd_event_type type, const struct etcd_kv *kv, void *arg);

/* Watches every key below `prefix` from revision `start_rev` (its events first, then each as
 * it comes) until fn asks to end, the stop flag is set (ECANCELED), the connection fails, or
 * etcd compacted the revision away (ESTALE: read again, then watch from there). *next_rev is
 * kept current: the revision to resume from after any failure. */
int etcd_watch(struct etcd_client *c, const char *prefix, int64_t start_rev, etcd_watch_fn fn,
	       void *arg, int64_t *next_rev, struct err *err);

/* --- parsing, exposed for tests and fuzzing ------------------------------------------ */

/* A range reply's kvs and header revision. EBADMSG for anything malformed. */
int etcd_parse_range(const char *text, size_t len, struct etcd_kvs *ret, struct err *err);

/* One line of the watch stream: its events go to fn; *next_rev rises past them. Returns 0,
 * 1 when fn asked to end, or a negative errno (EBADMSG, ESTALE for a compacted revision, EIO
 * for an error etcd reports). */
int etcd_watch_parse_line(const char *line, size_t len, etcd_watch_fn fn, void *arg,
			  int64_t *next_rev, struct err *err);
