#include "cluster/cluster.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cluster/etcd.h"
#include "loop.h"
#include "metrics/metrics.h"
#include "util/cleanup.h"
#include "util/htab.h"
#include "util/log.h"
#include "util/random.h"
#include "util/time.h"
#include "util/timejson.h"

#define NODE_NAME_MAX 63
#define SECRET_MIN    32
#define SECRET_MAX    4096
#define PEER_SKEW_MS  60000 /* how far a peer's clock may be from ours */
#define LABELS_MAX    32
#define START_TRIES   5

struct cnode {
	struct hlink link;
	struct cluster_node pub;
	char *name, *url, *host;
	int port;
	json_t *info;
	struct sockaddr_storage addr; /* its URL's host, resolved off the loop */
	socklen_t addrlen;            /* 0: it could not be resolved */
	bool up, cordoned, seen;
	uint64_t down_ms;
	size_t nrecs; /* session records naming it */
	struct cnode *next;
};

struct crec {
	struct hlink by_key, by_preview, by_id;
	char *owner, *id, *node, *preview;
	bool seen;
	struct crec *prev, *next;
};

static struct {
	bool on;
	struct cluster_hooks hooks;
	const struct config *cfg;
	struct event_base *base;
	const char *driver, *isolation;
	char name[NODE_NAME_MAX + 1];
	char *url;
	char *prefix;
	json_t *labels;
	uint8_t secret[SECRET_MAX];
	size_t secret_len;
	char instance[17];
	uint64_t started_ms;
	struct etcd_opts eo;
	char *etcd_password;
	/* threads: requests in order, the lease, the watch */
	struct loop_pool *io, *lease_pool, *watch_pool, *peers, *calls;
	struct etcd_client *io_c, *lease_c, *watch_c;
	atomic_bool stop;
	atomic_bool watch_restart; /* the watch ends and starts again from where it was */
	atomic_bool abandon; /* stopping while etcd does not answer: queued writes are dropped */
	/* the lease (the lease thread's while a job runs) */
	int64_t lease;
	char *lease_last; /* the record last written (the lease thread's) */
	bool lease_pending;
	bool store_ok;
	char store_why[300];
	struct event *tick;
	bool first_key_ours;
	int64_t synced_rev;
	bool watching;
	/* tables */
	struct htab nodes;
	struct cnode *node_list;
	struct htab recs, previews, ids;
	struct htab keyrevs;
	struct keyrev *keyrev_list;
	struct crec *rec_list;
} cluster_mod;

bool cluster_enabled(void)
{
	return cluster_mod.on;
}

const char *cluster_node_name(void)
{
	return cluster_mod.name;
}

bool cluster_first_key_is_ours(void)
{
	return cluster_mod.on && cluster_mod.first_key_ours;
}

static void count_etcd(const char *op, int r)
{
	metrics_add(metrics_daemon.cluster_etcd_requests, 1, op, r < 0 ? "failure" : "success");
}

/* --- names and keys ------------------------------------------------------------------- */

static bool name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > NODE_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
		      c == '.'))
			return false;
	}
	return true;
}

/* The owner as a key segment: "" (no authentication) is "-", which no key id is. */
static const char *owner_seg(const char *owner)
{
	return owner && *owner ? owner : "-";
}

static char *rec_key(const char *owner, const char *id)
{
	return xasprintf("%ssessions/%s/%s", cluster_mod.prefix, owner_seg(owner), id);
}

static uint64_t rec_hash(const char *owner, const char *id)
{
	return htab_hash_combine(htab_hash_str(owner_seg(owner)), htab_hash_str(id));
}

/* --- tables (loop thread) ------------------------------------------------------------- */

static struct cnode *node_get(const char *name)
{
	for (struct hlink *l = htab_first(&cluster_mod.nodes, htab_hash_str(name)); l;
	     l = htab_next(l)) {
		struct cnode *n = htab_entry(l, struct cnode, link);
		if (!strcmp(n->name, name))
			return n;
	}
	return NULL;
}

static void node_sync_pub(struct cnode *n)
{
	n->pub = (struct cluster_node){ .name = n->name,
					.url = n->url ? n->url : "",
					.host = n->host ? n->host : "",
					.port = n->port,
					.up = n->up,
					.cordoned = n->cordoned,
					.down_ms = n->down_ms,
					.info = n->info,
					.addr = n->addrlen ? (const struct sockaddr *)&n->addr
							   : NULL,
					.addrlen = n->addrlen };
}

static struct cnode *node_make(const char *name)
{
	struct cnode *n = node_get(name);
	if (n)
		return n;
	n = xcalloc(1, sizeof(*n));
	n->name = xstrdup(name);
	n->next = cluster_mod.node_list;
	cluster_mod.node_list = n;
	htab_insert(&cluster_mod.nodes, &n->link, htab_hash_str(name));
	node_sync_pub(n);
	return n;
}

/* Splits http://host:port[/] into its host and port (80 by default). */
static int parse_url(const char *url, char **ret_host, int *ret_port)
{
	if (strncmp(url, "http://", 7) != 0)
		return -1;
	const char *h = url + 7;
	size_t hl;
	const char *rest;
	if (*h == '[') {
		const char *e = strchr(h, ']');
		if (!e)
			return -1;
		hl = (size_t)(e - h - 1);
		h++;
		rest = e + 1;
	} else {
		hl = strcspn(h, ":/");
		rest = h + hl;
	}
	if (!hl || hl > 253)
		return -1;
	long port = 80;
	if (*rest == ':') {
		char *end;
		port = strtol(rest + 1, &end, 10);
		if (port <= 0 || port > 65535 || (*end && strcmp(end, "/") != 0))
			return -1;
	} else if (*rest && strcmp(rest, "/") != 0) {
		return -1;
	}
	*ret_host = strndup(h, hl);
	if (!*ret_host)
		abort();
	*ret_port = (int)port;
	return 0;
}

/* A node's address: what a URL's host resolves to. Blocks on a name: called off the loop
 * (the watch's thread) or at start. */
struct addr {
	struct sockaddr_storage sa;
	socklen_t len;
};

static void resolve(const char *host, int port, struct addr *out)
{
	out->len = 0;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *res = NULL;
	char p[8];
	snprintf(p, sizeof(p), "%d", port);
	if (getaddrinfo(host, p, &hints, &res) == 0 && res && res->ai_addrlen <= sizeof(out->sa)) {
		memcpy(&out->sa, res->ai_addr, res->ai_addrlen);
		out->len = res->ai_addrlen;
	}
	if (res)
		freeaddrinfo(res);
}

/* The address of the node record `value` names, resolved (0 length when it cannot be). */
static void resolve_record(const char *value, size_t len, struct addr *out)
{
	out->len = 0;
	json_auto_t *j = json_loadb(value, len, 0, NULL);
	const char *url = json_string_value(json_object_get(j, "url"));
	_cleanup_free_ char *host = NULL;
	int port;
	if (url && parse_url(url, &host, &port) == 0)
		resolve(host, port, out);
}

static void node_put(const char *name, const char *value, size_t len, const struct addr *addr)
{
	json_error_t jerr;
	json_auto_t *j = json_loadb(value, len, JSON_REJECT_DUPLICATES, &jerr);
	const char *url = json_string_value(json_object_get(j, "url"));
	_cleanup_free_ char *host = NULL;
	int port;
	if (!json_is_object(j) || !url || parse_url(url, &host, &port) < 0) {
		log_warn("cluster", "node `%.63s`'s record is malformed: left out", name);
		return;
	}
	struct cnode *n = node_make(name);
	struct addr here;
	if (!addr) {
		/* At start, before the loop runs: blocking is allowed. */
		resolve(host, port, &here);
		addr = &here;
	}
	memcpy(&n->addr, &addr->sa, sizeof(n->addr));
	n->addrlen = addr->len;
	if (!addr->len)
		log_warn("cluster",
			 "node %s's address `%.100s` cannot be resolved: requests for its "
			 "sessions fail until it can",
			 name, host);
	free(n->url);
	n->url = xstrdup(url);
	free(n->host);
	n->host = TAKE_PTR(host);
	n->port = port;
	json_decref(n->info);
	n->info = json_incref(j);
	if (!n->up && strcmp(name, cluster_mod.name) != 0)
		log_info("cluster", "node %s is up at %s", name, url);
	n->up = true;
	n->down_ms = 0;
	n->seen = true;
	node_sync_pub(n);
}

static void node_gone(const char *name)
{
	struct cnode *n = node_get(name);
	if (!n || !n->up)
		return;
	n->up = false;
	n->down_ms = time_wall_ms();
	log_warn("cluster", "node %s left the cluster (its lease ended)", name);
	node_sync_pub(n);
}

static void cordon_set(const char *name, bool on)
{
	struct cnode *n = node_make(name);
	n->cordoned = on;
	node_sync_pub(n);
}

static struct crec *rec_get(const char *owner, const char *id)
{
	const char *o = owner_seg(owner);
	for (struct hlink *l = htab_first(&cluster_mod.recs, rec_hash(owner, id)); l;
	     l = htab_next(l)) {
		struct crec *r = htab_entry(l, struct crec, by_key);
		if (!strcmp(r->owner, o) && !strcmp(r->id, id))
			return r;
	}
	return NULL;
}

static void rec_free(struct crec *r)
{
	struct cnode *n = node_get(r->node);
	if (n && n->nrecs)
		n->nrecs--;
	htab_remove(&cluster_mod.recs, &r->by_key);
	htab_remove(&cluster_mod.ids, &r->by_id);
	if (r->preview)
		htab_remove(&cluster_mod.previews, &r->by_preview);
	if (r->prev)
		r->prev->next = r->next;
	else
		cluster_mod.rec_list = r->next;
	if (r->next)
		r->next->prev = r->prev;
	free(r->owner);
	free(r->id);
	free(r->node);
	free(r->preview);
	free(r);
}

static bool seg_ok(const char *s, size_t n)
{
	if (n == 0 || n > 128)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_' || c == '.'))
			return false;
	}
	return true;
}

/* "<owner>/<id>" into its two parts, each a session id's characters. */
static bool split_rec(const char *rest, char **owner, char **id)
{
	const char *slash = strchr(rest, '/');
	if (!slash || !seg_ok(rest, (size_t)(slash - rest)) ||
	    !seg_ok(slash + 1, strlen(slash + 1)))
		return false;
	*owner = strndup(rest, (size_t)(slash - rest));
	*id = xstrdup(slash + 1);
	if (!*owner)
		abort();
	return true;
}

static void rec_put(const char *rest, const char *value, size_t len)
{
	_cleanup_free_ char *owner = NULL, *id = NULL;
	json_error_t jerr;
	json_auto_t *j = json_loadb(value, len, JSON_REJECT_DUPLICATES, &jerr);
	const char *node = json_string_value(json_object_get(j, "node"));
	const char *preview = json_string_value(json_object_get(j, "preview"));
	if (!split_rec(rest, &owner, &id) || !node || !name_ok(node) ||
	    (preview && !seg_ok(preview, strlen(preview)))) {
		log_warn("cluster", "a malformed session record was left out");
		return;
	}
	const char *o = strcmp(owner, "-") ? owner : "";
	struct crec *r = rec_get(o, id);
	if (r)
		rec_free(r);
	r = xcalloc(1, sizeof(*r));
	r->owner = xstrdup(owner);
	r->id = xstrdup(id);
	r->node = xstrdup(node);
	r->preview = preview && *preview ? xstrdup(preview) : NULL;
	r->seen = true;
	htab_insert(&cluster_mod.recs, &r->by_key, rec_hash(o, id));
	htab_insert(&cluster_mod.ids, &r->by_id, htab_hash_str(id));
	if (r->preview)
		htab_insert(&cluster_mod.previews, &r->by_preview, htab_hash_str(r->preview));
	r->next = cluster_mod.rec_list;
	if (cluster_mod.rec_list)
		cluster_mod.rec_list->prev = r;
	cluster_mod.rec_list = r;
	node_make(node)->nrecs++; /* a record may name a node not seen yet */
}

static void rec_del(const char *rest)
{
	_cleanup_free_ char *owner = NULL, *id = NULL;
	if (!split_rec(rest, &owner, &id))
		return;
	struct crec *r = rec_get(strcmp(owner, "-") ? owner : "", id);
	if (r)
		rec_free(r);
}

/* The etcd revision of each key's record as this node last saw it: a change of a key is
 * written only over that revision, so that no node writes back a row another node changed
 * meanwhile (a revocation undone by a rotation made on a stale row). */
struct keyrev {
	struct hlink link;
	char id[40];
	int64_t rev;
	struct keyrev *next;
};

static struct keyrev *keyrev_get(const char *id)
{
	for (struct hlink *l = htab_first(&cluster_mod.keyrevs, htab_hash_str(id)); l;
	     l = htab_next(l)) {
		struct keyrev *k = htab_entry(l, struct keyrev, link);
		if (!strcmp(k->id, id))
			return k;
	}
	return NULL;
}

static void keyrev_set(const char *id, int64_t rev)
{
	struct keyrev *k = keyrev_get(id);
	if (!k) {
		if (strlen(id) >= sizeof(k->id))
			return;
		k = xcalloc(1, sizeof(*k));
		snprintf(k->id, sizeof(k->id), "%s", id);
		htab_insert(&cluster_mod.keyrevs, &k->link, htab_hash_str(id));
		k->next = cluster_mod.keyrev_list;
		cluster_mod.keyrev_list = k;
	}
	k->rev = rev;
}

static void keyrev_drop(const char *id)
{
	struct keyrev *k = keyrev_get(id);
	if (!k)
		return;
	htab_remove(&cluster_mod.keyrevs, &k->link);
	for (struct keyrev **pp = &cluster_mod.keyrev_list; *pp; pp = &(*pp)->next)
		if (*pp == k) {
			*pp = k->next;
			break;
		}
	free(k);
}

static void key_del(const char *id)
{
	struct err e;
	keyrev_drop(id);
	if (cluster_mod.hooks.key_delete(id, &e) < 0 && e.errnum != ENOENT)
		log_warn("cluster", "cannot delete key `%.40s`: %s", id, e.msg);
}

static void key_put(const char *id, const char *value, size_t len, int64_t rev)
{
	json_error_t jerr;
	json_auto_t *row = json_loadb(value, len, JSON_REJECT_DUPLICATES, &jerr);
	struct err e;
	const char *rid = json_string_value(json_object_get(row, "id"));
	/* A row this node cannot take is not left standing as it was (enabled, perhaps,
	 * where the cluster revoked it): the key goes here until a row it can take comes. */
	if (!row || !rid || strcmp(rid, id) != 0) {
		log_warn("cluster", "key record `%.40s` is malformed: the key is removed here", id);
		key_del(id);
		return;
	}
	if (cluster_mod.hooks.key_apply(row, &e) < 0) {
		log_warn("cluster", "key record `%.40s`: %s: the key is removed here", id, e.msg);
		key_del(id);
		return;
	}
	keyrev_set(id, rev);
}

/* One key of the prefix, put or deleted (a node's record with its address resolved, or
 * NULL at start). */
static void apply(enum etcd_event_type t, const char *key, const char *value, size_t len,
		  int64_t mod_rev, const struct addr *addr)
{
	size_t pl = strlen(cluster_mod.prefix);
	if (strncmp(key, cluster_mod.prefix, pl) != 0)
		return;
	const char *rest = key + pl;
	bool put = t == ETCD_EVENT_PUT;
	if (!strncmp(rest, "nodes/", 6) && name_ok(rest + 6)) {
		if (put)
			node_put(rest + 6, value, len, addr);
		else
			node_gone(rest + 6);
	} else if (!strncmp(rest, "cordon/", 7) && name_ok(rest + 7)) {
		cordon_set(rest + 7, put);
	} else if (!strncmp(rest, "sessions/", 9)) {
		if (put)
			rec_put(rest + 9, value, len);
		else
			rec_del(rest + 9);
	} else if (!strncmp(rest, "keys/", 5) && seg_ok(rest + 5, strlen(rest + 5))) {
		if (put)
			key_put(rest + 5, value, len, mod_rev);
		else
			key_del(rest + 5);
	}
}

/* The whole prefix as read at one revision: the tables become exactly that (addrs: the
 * nodes' addresses resolved, parallel to kvs, or NULL at start). */
static void apply_all(const struct etcd_kvs *kvs, const struct addr *addrs)
{
	for (struct cnode *n = cluster_mod.node_list; n; n = n->next) {
		n->seen = false;
		n->cordoned = false;
	}
	for (struct crec *r = cluster_mod.rec_list; r; r = r->next)
		r->seen = false;
	size_t pl = strlen(cluster_mod.prefix);
	_cleanup_free_ const char **ids = xcalloc(kvs->n + 1, sizeof(*ids));
	size_t nids = 0;
	for (size_t i = 0; i < kvs->n; i++) {
		const struct etcd_kv *kv = &kvs->v[i];
		apply(ETCD_EVENT_PUT, kv->key, kv->value, kv->value_len, kv->mod_rev,
		      addrs ? &addrs[i] : NULL);
		if (!strncmp(kv->key, cluster_mod.prefix, pl) && !strncmp(kv->key + pl, "keys/", 5))
			ids[nids++] = kv->key + pl + 5;
	}
	for (struct cnode *n = cluster_mod.node_list; n; n = n->next) {
		if (!n->seen && n->up) {
			n->up = false;
			n->down_ms = time_wall_ms();
		}
		node_sync_pub(n);
	}
	for (struct crec *r = cluster_mod.rec_list, *next; r; r = next) {
		next = r->next;
		if (!r->seen)
			rec_free(r);
	}
	struct err e;
	if (cluster_mod.hooks.keys_keep_only(ids, nids, &e) < 0)
		log_warn("cluster", "cannot settle the key store: %s", e.msg);
}

/* --- jobs on the io thread ------------------------------------------------------------ */

enum job_kind {
	J_PUT,
	J_DELETE,
	J_CLAIM,
	J_FORGET_MINE, /* delete a session record if it is this node's */
	J_TAKE_OVER,   /* a record of a lost node's session: replaced by ours */
	J_PUT_MINE,    /* a record of this node's, unless another node holds the id */
	J_KEY,         /* a key's row (or its deletion), over the revision this node saw */
	J_KEY_READ,    /* a key's row as etcd has it now */
};

struct job {
	enum job_kind kind;
	const char *op; /* for the metric */
	char *key, *value;
	int64_t mod_rev;
	int result;
	struct err err;
	char other_node[NODE_NAME_MAX + 1]; /* J_CLAIM, J_TAKE_OVER: who holds the id */
	void (*done)(const struct err *err, void *arg);
	void *arg;
	int64_t new_rev;         /* J_KEY: the revision made */
	struct etcd_kv existing; /* J_KEY (refused), J_KEY_READ: the key's record in etcd */
};

static void job_free(struct job *j)
{
	free(j->key);
	free(j->value);
	etcd_kv_clear(&j->existing);
	free(j);
}

static void io_work(void *arg)
{
	struct job *j = arg;
	struct etcd_client *c = cluster_mod.io_c;
	if (atomic_load(&cluster_mod.abandon)) {
		j->result = err_set(&j->err, ECANCELED, "the node is stopping without etcd");
		return;
	}
	switch (j->kind) {
	case J_PUT:
		j->result = etcd_put(c, j->key, j->value, strlen(j->value), 0, NULL, &j->err);
		break;
	case J_DELETE:
		j->result = etcd_delete(c, j->key, false, NULL, &j->err);
		break;
	case J_CLAIM: {
		bool created = false;
		struct etcd_kv old = { 0 };
		j->result = etcd_create(c, j->key, j->value, strlen(j->value), 0, &created, &old,
					NULL, &j->err);
		if (j->result == 0 && !created) {
			json_auto_t *v = json_loadb(old.value, old.value_len, 0, NULL);
			const char *node = json_string_value(json_object_get(v, "node"));
			snprintf(j->other_node, sizeof(j->other_node), "%s",
				 node && name_ok(node) ? node : "?");
			j->mod_rev = old.mod_rev;
			j->result = -EEXIST;
		}
		etcd_kv_clear(&old);
		break;
	}
	case J_TAKE_OVER: {
		/* One transaction: the record is still the one read, and (another node's) that
		 * node's own record is gone from etcd, its lease ended: never on this node's
		 * view of it alone. */
		_cleanup_free_ char *nk =
			xasprintf("%snodes/%s", cluster_mod.prefix, j->other_node);
		struct etcd_cmp cmps[2] = { { j->key, true, j->mod_rev }, { nk, false, 0 } };
		bool ok = false;
		j->result = etcd_put_if(c, j->key, j->value, strlen(j->value), cmps,
					strcmp(j->other_node, cluster_mod.name) ? 2 : 1, &ok, NULL,
					NULL, &j->err);
		if (j->result == 0 && !ok)
			j->result = err_set(&j->err, EEXIST,
					    "session `%s` is on node `%s`, which is up", j->key,
					    j->other_node);
		break;
	}
	case J_KEY: {
		struct etcd_cmp cmp = { j->key, j->mod_rev != 0, j->mod_rev };
		bool ok = false;
		j->result = etcd_put_if(c, j->key, j->value, j->value ? strlen(j->value) : 0, &cmp,
					1, &ok, &j->new_rev, &j->existing, &j->err);
		if (j->result == 0 && !ok)
			j->result = err_set(&j->err, EEXIST,
					    "the key was changed on another node meanwhile; its "
					    "state now is the cluster's: look again, then make the "
					    "change again");
		break;
	}
	case J_KEY_READ: {
		struct etcd_kvs kvs = { 0 };
		j->result = etcd_get(c, j->key, false, &kvs, &j->err);
		if (j->result == 0 && kvs.n) {
			j->existing = kvs.v[0];
			kvs.v[0] = (struct etcd_kv){ 0 };
		}
		etcd_kvs_clear(&kvs);
		break;
	}
	case J_PUT_MINE: {
		/* A record made only where there is none, or where it is this node's: a node that
		 * comes back never takes an id another node holds now. */
		struct etcd_cmp absent = { j->key, false, 0 };
		struct etcd_kv old = { 0 };
		bool ok = false;
		j->result = etcd_put_if(c, j->key, j->value, strlen(j->value), &absent, 1, &ok,
					NULL, &old, &j->err);
		if (j->result == 0 && !ok) {
			json_auto_t *v = json_loadb(old.value, old.value_len, 0, NULL);
			const char *node = json_string_value(json_object_get(v, "node"));
			if (node && !strcmp(node, cluster_mod.name)) {
				struct etcd_cmp same = { j->key, true, old.mod_rev };
				j->result = etcd_put_if(c, j->key, j->value, strlen(j->value),
							&same, 1, &ok, NULL, NULL, &j->err);
			}
			if (j->result == 0 && !ok)
				j->result =
					err_set(&j->err, EEXIST,
						"another node holds this session's id now (`%s`); "
						"this node's copy is not reachable through the "
						"cluster",
						j->key);
		}
		etcd_kv_clear(&old);
		break;
	}
	case J_FORGET_MINE: {
		struct etcd_kvs kvs = { 0 };
		j->result = etcd_get(c, j->key, false, &kvs, &j->err);
		if (j->result == 0 && kvs.n) {
			json_auto_t *v = json_loadb(kvs.v[0].value, kvs.v[0].value_len, 0, NULL);
			const char *node = json_string_value(json_object_get(v, "node"));
			bool deleted;
			if (node && !strcmp(node, cluster_mod.name))
				j->result = etcd_delete_if(c, j->key, kvs.v[0].mod_rev, &deleted,
							   &j->err);
		}
		etcd_kvs_clear(&kvs);
		break;
	}
	}
}

static void io_done(void *arg)
{
	struct job *j = arg;
	count_etcd(j->op, j->result == -EEXIST ? 0 : j->result);
	if (j->result < 0 && j->result != -EEXIST && !j->done)
		log_warn("cluster", "%s `%s`: %s", j->op, j->key, j->err.msg);
	if (j->done)
		j->done(j->result < 0 ? &j->err : NULL, j->arg);
	job_free(j);
}

static struct job *job_new(enum job_kind kind, const char *op, char *key, char *value)
{
	struct job *j = xcalloc(1, sizeof(*j));
	j->kind = kind;
	j->op = op;
	j->key = key;
	j->value = value;
	return j;
}

static void submit(struct job *j)
{
	loop_pool_submit(cluster_mod.io, io_work, io_done, j);
}

/* --- sessions ------------------------------------------------------------------------- */

static char *rec_value(const char *preview, const char *template)
{
	json_auto_t *v = json_pack("{s:s, s:I}", "node", cluster_mod.name, "created",
				   (json_int_t)time_wall_ms());
	if (preview && *preview)
		json_object_set_new(v, "preview", json_string(preview));
	if (template)
		json_object_set_new(v, "template", json_string(template));
	return json_dumps(v, JSON_COMPACT);
}

/* What the loop knows of a record it has just written (its watch event may come later). */
static void rec_note_ours(const char *owner, const char *id, const char *preview)
{
	_cleanup_free_ char *rest = xasprintf("%s/%s", owner_seg(owner), id);
	_cleanup_free_ char *value = rec_value(preview, NULL);
	rec_put(rest, value, strlen(value));
}

struct claim {
	char *owner, *id, *preview;
	void (*done)(const struct err *err, void *arg);
	void *arg;
};

static void claim_free(struct claim *c)
{
	free(c->owner);
	free(c->id);
	free(c->preview);
	free(c);
}

static void claim_finish(const struct err *err, void *arg)
{
	struct claim *c = arg;
	if (!err)
		rec_note_ours(c->owner, c->id, c->preview);
	c->done(err, c->arg);
	claim_free(c);
}

static void claim_done(const struct err *err, void *arg);

static void claim_job_done(void *arg)
{
	struct job *j = arg;
	struct claim *c = j->arg;
	count_etcd("claim", j->result == -EEXIST ? 0 : j->result);
	if (j->result == -EEXIST) {
		const struct cnode *n = node_get(j->other_node);
		/* A record of ours that this node's start did not clear yet (the session it
		 * named is not here any more), or of a node that is not up by our tables: taken
		 * over if etcd agrees (transaction: that node's own record is gone). */
		if (!strcmp(j->other_node, cluster_mod.name) || !n || !n->up) {
			if (strcmp(j->other_node, cluster_mod.name) != 0)
				log_info("cluster",
					 "session %s of node %s, which is not up, is replaced by a "
					 "new "
					 "one",
					 c->id, j->other_node);
			struct job *t =
				job_new(J_TAKE_OVER, "claim", TAKE_PTR(j->key), TAKE_PTR(j->value));
			t->mod_rev = j->mod_rev;
			snprintf(t->other_node, sizeof(t->other_node), "%s", j->other_node);
			t->done = claim_finish;
			t->arg = c;
			submit(t);
			job_free(j);
			return;
		}
		struct err e;
		err_set(&e, EEXIST,
			"session `%s` exists on node `%s` (made there a moment ago): send the "
			"request again",
			c->id, j->other_node);
		claim_done(&e, c);
		job_free(j);
		return;
	}
	if (j->result < 0) {
		struct err e;
		err_set(&e, EROFS, "the cluster cannot record the session: %s", j->err.msg);
		claim_done(&e, c);
	} else {
		claim_finish(NULL, c);
	}
	job_free(j);
}

static void claim_done(const struct err *err, void *arg)
{
	struct claim *c = arg;
	c->done(err, c->arg);
	claim_free(c);
}

void cluster_session_claim(const char *owner, const char *id, const char *preview,
			   const char *template, void (*done)(const struct err *err, void *arg),
			   void *arg)
{
	if (!cluster_mod.on || !cluster_mod.io) {
		done(NULL, arg);
		return;
	}
	if (!cluster_mod.store_ok) {
		struct err e;
		err_set(&e, EROFS,
			"the cluster's store (etcd) is not answering this node, so no session can "
			"be recorded: %s",
			cluster_mod.store_why);
		count_etcd("claim", -1);
		done(&e, arg);
		return;
	}
	struct claim *c = xcalloc(1, sizeof(*c));
	c->owner = xstrdup(owner ? owner : "");
	c->id = xstrdup(id);
	c->preview = preview ? xstrdup(preview) : NULL;
	c->done = done;
	c->arg = arg;
	struct job *j = job_new(J_CLAIM, "claim", rec_key(owner, id), rec_value(preview, template));
	j->arg = c;
	loop_pool_submit(cluster_mod.io, io_work, claim_job_done, j);
}

void cluster_session_put(const char *owner, const char *id, const char *preview,
			 const char *template)
{
	if (!cluster_mod.on || !cluster_mod.io)
		return;
	rec_note_ours(owner, id, preview);
	submit(job_new(J_PUT_MINE, "put", rec_key(owner, id), rec_value(preview, template)));
}

void cluster_session_gone(const char *owner, const char *id)
{
	if (!cluster_mod.on || !cluster_mod.io)
		return;
	struct crec *r = rec_get(owner, id);
	if (r && !strcmp(r->node, cluster_mod.name))
		rec_free(r);
	submit(job_new(J_FORGET_MINE, "delete", rec_key(owner, id), NULL));
}

enum cluster_where cluster_session_where(const char *owner, const char *id,
					 const struct cluster_node **ret_node)
{
	*ret_node = NULL;
	if (!cluster_mod.on)
		return CLUSTER_UNKNOWN;
	struct crec *r = rec_get(owner, id);
	if (!r)
		return CLUSTER_UNKNOWN;
	if (!strcmp(r->node, cluster_mod.name))
		return CLUSTER_LOCAL;
	struct cnode *n = node_make(r->node);
	*ret_node = &n->pub;
	return n->up ? CLUSTER_REMOTE : CLUSTER_LOST;
}

enum cluster_where cluster_preview_where(const char *name, const struct cluster_node **ret_node)
{
	*ret_node = NULL;
	if (!cluster_mod.on || !name)
		return CLUSTER_UNKNOWN;
	for (struct hlink *l = htab_first(&cluster_mod.previews, htab_hash_str(name)); l;
	     l = htab_next(l)) {
		struct crec *r = htab_entry(l, struct crec, by_preview);
		if (strcmp(r->preview, name) != 0)
			continue;
		if (!strcmp(r->node, cluster_mod.name))
			return CLUSTER_LOCAL;
		struct cnode *n = node_make(r->node);
		*ret_node = &n->pub;
		return n->up ? CLUSTER_REMOTE : CLUSTER_LOST;
	}
	return CLUSTER_UNKNOWN;
}

enum cluster_where cluster_session_where_any(const char *id, const struct cluster_node **ret_node)
{
	*ret_node = NULL;
	if (!cluster_mod.on || !id)
		return CLUSTER_UNKNOWN;
	struct cnode *remote = NULL, *gone = NULL;
	for (struct hlink *l = htab_first(&cluster_mod.ids, htab_hash_str(id)); l;
	     l = htab_next(l)) {
		struct crec *r = htab_entry(l, struct crec, by_id);
		if (strcmp(r->id, id) != 0)
			continue;
		if (!strcmp(r->node, cluster_mod.name))
			return CLUSTER_LOCAL;
		struct cnode *n = node_make(r->node);
		if (n->up && !remote)
			remote = n;
		else if (!n->up && !gone)
			gone = n;
	}
	if (remote) {
		*ret_node = &remote->pub;
		return CLUSTER_REMOTE;
	}
	if (gone) {
		*ret_node = &gone->pub;
		return CLUSTER_LOST;
	}
	return CLUSTER_UNKNOWN;
}

struct event_base *cluster_event_base(void)
{
	return cluster_mod.base;
}

unsigned cluster_timeout_ms(void)
{
	return cluster_mod.cfg ? cluster_mod.cfg->cluster_timeout_ms : 2000;
}

bool cluster_stopping(void)
{
	return atomic_load(&cluster_mod.stop);
}

void cluster_peers_submit(void (*work)(void *arg), void (*done)(void *arg), void *arg)
{
	loop_pool_submit(cluster_mod.peers, work, done, arg);
}

void cluster_calls_submit(void (*work)(void *arg), void (*done)(void *arg), void *arg)
{
	loop_pool_submit(cluster_mod.calls, work, done, arg);
}

const struct cluster_node *cluster_node_find(const char *name)
{
	struct cnode *n = cluster_mod.on ? node_get(name) : NULL;
	return n ? &n->pub : NULL;
}

void cluster_foreach_node(void (*fn)(const struct cluster_node *n, void *arg), void *arg)
{
	for (struct cnode *n = cluster_mod.node_list; n; n = n->next)
		fn(&n->pub, arg);
}

/* --- placement ------------------------------------------------------------------------ */

static bool has_template(const json_t *info, const char *template)
{
	size_t i;
	const json_t *t;
	json_array_foreach (json_object_get(info, "templates"), i, t) {
		if (json_is_string(t) && !strcmp(json_string_value(t), template))
			return true;
	}
	return false;
}

static bool labels_match(const json_t *info, const json_t *selector)
{
	const json_t *labels = json_object_get(info, "labels");
	const char *k;
	const json_t *v;
	json_object_foreach ((json_t *)selector, k, v) {
		const char *have = json_string_value(json_object_get(labels, k));
		if (!have || strcmp(have, json_string_value(v)) != 0)
			return false;
	}
	return true;
}

/* Its sessions by the records (current to the watch's last event, unlike the count in its
 * own record, which it renews every third of its lease) over its capacity. */
static double load_of(const struct cnode *n)
{
	json_int_t cap = json_integer_value(json_object_get(n->info, "capacity"));
	return cap > 0 ? (double)n->nrecs / (double)cap : 1.0;
}

const struct cluster_node *cluster_place(const char *template, const json_t *selector,
					 struct err *err)
{
	if (selector && !json_is_null(selector)) {
		if (!json_is_object(selector) || json_object_size(selector) > LABELS_MAX)
			goto bad;
		const char *k;
		const json_t *v;
		json_object_foreach ((json_t *)selector, k, v) {
			if (!json_is_string(v) || !seg_ok(k, strlen(k)) ||
			    strlen(json_string_value(v)) > 128)
				goto bad;
		}
	} else {
		selector = NULL;
	}
	struct cnode *best = NULL;
	double best_load = 0;
	size_t up = 0, fitting = 0;
	for (struct cnode *n = cluster_mod.node_list; n; n = n->next) {
		if (!n->up || !n->info)
			continue;
		up++;
		if (n->cordoned || !has_template(n->info, template) ||
		    (selector && !labels_match(n->info, selector)))
			continue;
		fitting++;
		json_int_t cap = json_integer_value(json_object_get(n->info, "capacity"));
		if (cap > 0 && (json_int_t)n->nrecs >= cap)
			continue;
		double load = load_of(n);
		bool self = !strcmp(n->name, cluster_mod.name);
		if (!best || load < best_load - 1e-9 ||
		    (load <= best_load + 1e-9 && self &&
		     strcmp(best->name, cluster_mod.name) != 0)) {
			best = n;
			best_load = load;
		}
	}
	if (!best) {
		if (fitting)
			err_set(err, EHOSTUNREACH,
				"every node that fits this session (%zu of the %zu up) is full",
				fitting, up);
		else
			err_set(err, EHOSTUNREACH,
				"no node of the cluster (%zu up) takes sessions of template "
				"`%s`%s: "
				"none that is up and not cordoned has it%s",
				up, template, selector ? " with these labels" : "",
				selector ? " and the labels" : "");
		return NULL;
	}
	return &best->pub;
bad:
	err_set(err, EINVAL,
		"\"nodeSelector\" must be an object of at most %d labels, each a name of letters, "
		"digits, '.', '_' or '-' and a string value",
		LABELS_MAX);
	return NULL;
}

struct cordon_call {
	void (*done)(const struct err *err, void *arg);
	void *arg;
	char name[NODE_NAME_MAX + 1];
	bool was; /* before the change, put back when etcd does not take it */
};

static void cordon_done(const struct err *err, void *arg)
{
	struct cordon_call *c = arg;
	if (err)
		cordon_set(c->name, c->was);
	c->done(err, c->arg);
	free(c);
}

void cluster_cordon(const char *name, bool on, void (*done)(const struct err *err, void *arg),
		    void *arg)
{
	char *key = xasprintf("%scordon/%s", cluster_mod.prefix, name);
	struct job *j;
	if (on) {
		json_auto_t *v = json_pack("{s:I, s:s}", "at", (json_int_t)time_wall_ms(), "by",
					   cluster_mod.name);
		j = job_new(J_PUT, "cordon", key, json_dumps(v, JSON_COMPACT));
	} else {
		j = job_new(J_DELETE, "cordon", key, NULL);
	}
	struct cordon_call *c = xcalloc(1, sizeof(*c));
	snprintf(c->name, sizeof(c->name), "%s", name);
	c->was = node_make(name)->cordoned;
	cordon_set(name, on); /* at once here; the watch tells the others */
	c->done = done;
	c->arg = arg;
	j->done = cordon_done;
	j->arg = c;
	submit(j);
}

/* --- a change of a key ----------------------------------------------------------------- */

struct key_call {
	void (*done)(const struct err *err, void *arg);
	void *arg;
};

/* The key's row as etcd has it (an empty record: none), put into the local store. */
static void key_take(const char *id, const struct etcd_kv *kv)
{
	if (kv->key && kv->key[0])
		key_put(id, kv->value, kv->value_len, kv->mod_rev);
	else
		key_del(id);
}

static void key_read_done(void *arg)
{
	struct job *j = arg;
	count_etcd("key", j->result);
	if (j->result == 0)
		key_take(j->other_node, &j->existing);
	job_free(j);
}

static void key_job_done(void *arg)
{
	struct job *j = arg;
	struct key_call *kc = j->arg;
	const char *id = j->other_node;
	count_etcd("key", j->result == -EEXIST ? 0 : j->result);
	if (j->result == 0) {
		if (j->value)
			keyrev_set(id, j->new_rev);
		else
			keyrev_drop(id);
		kc->done(NULL, kc->arg);
	} else if (j->result == -EEXIST) {
		/* Changed elsewhere: this node takes the cluster's state (no rollback). */
		key_take(id, &j->existing);
		kc->done(&j->err, kc->arg);
	} else {
		/* Whether etcd took it is not known (a timeout can hide a write that happened):
		 * the caller puts its state back, then this node reads the cluster's. */
		kc->done(&j->err, kc->arg);
		struct job *r = job_new(J_KEY_READ, "key", TAKE_PTR(j->key), NULL);
		snprintf(r->other_node, sizeof(r->other_node), "%s", id);
		loop_pool_submit(cluster_mod.io, io_work, key_read_done, r);
	}
	free(kc);
	job_free(j);
}

/* --- keys ----------------------------------------------------------------------------- */

static char *key_key(const char *id)
{
	return xasprintf("%skeys/%s", cluster_mod.prefix, id);
}

int cluster_publish_key_now(const char *id, struct err *err)
{
	/* A client of its own: the io thread may be using its own meanwhile. */
	struct etcd_client *c = NULL;
	int r = etcd_new(&cluster_mod.eo, &c, err);
	if (r < 0)
		return r;
	json_auto_t *row = cluster_mod.hooks.key_row(id, err);
	_cleanup_free_ char *key = key_key(id);
	if (!row) {
		r = err->errnum == ENOENT ? etcd_delete(c, key, false, NULL, err) : -err->errnum;
	} else {
		_cleanup_free_ char *v = json_dumps(row, JSON_COMPACT);
		r = etcd_put(c, key, v, strlen(v), 0, NULL, err);
	}
	count_etcd("key", r);
	etcd_free(c);
	return r;
}

void cluster_publish_key(const char *id, void (*done)(const struct err *err, void *arg), void *arg)
{
	struct err e;
	json_auto_t *row = cluster_mod.hooks.key_row(id, &e);
	if (!row && e.errnum != ENOENT) {
		done(&e, arg);
		return;
	}
	struct job *j =
		job_new(J_KEY, "key", key_key(id), row ? json_dumps(row, JSON_COMPACT) : NULL);
	const struct keyrev *k = keyrev_get(id);
	j->mod_rev = k ? k->rev : 0;
	snprintf(j->other_node, sizeof(j->other_node), "%.39s", id);
	struct key_call *kc = xcalloc(1, sizeof(*kc));
	kc->done = done;
	kc->arg = arg;
	j->done = NULL;
	j->arg = kc;
	loop_pool_submit(cluster_mod.io, io_work, key_job_done, j);
}

/* --- the node's own record and its lease ---------------------------------------------- */

static char *node_record(void)
{
	json_auto_t *j = json_pack(
		"{s:s, s:s, s:s, s:s, s:O, s:I, s:s, s:I, s:s}", "name", cluster_mod.name, "url",
		cluster_mod.url, "driver", cluster_mod.driver, "isolation", cluster_mod.isolation,
		"labels", cluster_mod.labels, "capacity", (json_int_t)cluster_mod.cfg->max_sessions,
		"version", SANDBOX_VERSION, "startedAt", (json_int_t)cluster_mod.started_ms,
		"instance", cluster_mod.instance);
	/* Its templates, sessions and free memory, as the sessions' layer counts them. */
	cluster_mod.hooks.node_figures(j);
	return json_dumps(j, JSON_COMPACT);
}

struct lease_job {
	char *record;
	int64_t lease; /* in: the lease to renew (0: none yet); out: the one in force */
	bool renewed;  /* out: the record is in etcd under a live lease */
	struct err err;
};

static void lease_work(void *arg)
{
	struct lease_job *l = arg;
	struct etcd_client *c = cluster_mod.lease_c;
	_cleanup_free_ char *key = xasprintf("%snodes/%s", cluster_mod.prefix, cluster_mod.name);
	int r = 0;
	bool fresh = false;
	if (l->lease) {
		r = etcd_lease_keepalive(c, l->lease, NULL, &l->err);
		count_etcd("keepalive", r);
		if (r == -ENOENT)
			l->lease = 0; /* expired: a new one, and the record again under it */
		else if (r < 0)
			return;
	}
	if (!l->lease) {
		r = etcd_lease_grant(c, cluster_mod.cfg->cluster_lease_ttl_s, &l->lease, &l->err);
		count_etcd("lease", r);
		if (r < 0)
			return;
		fresh = true;
	}
	/* The record is written when it changed (or under a new lease): a renewal alone makes
	 * no revision, so an idle cluster does not grow etcd's history. */
	if (!fresh && cluster_mod.lease_last && !strcmp(cluster_mod.lease_last, l->record)) {
		l->renewed = true;
		return;
	}
	r = etcd_put(c, key, l->record, strlen(l->record), l->lease, NULL, &l->err);
	count_etcd("register", r);
	if (r < 0) {
		if (fresh) {
			struct err ignored;
			etcd_lease_revoke(c, l->lease, &ignored);
			l->lease = 0;
		}
		return;
	}
	free(cluster_mod.lease_last);
	cluster_mod.lease_last = xstrdup(l->record);
	l->renewed = true;
}

static void publish_gauges(void);

static void lease_done(void *arg)
{
	struct lease_job *l = arg;
	cluster_mod.lease_pending = false;
	if (l->lease != cluster_mod.lease && cluster_mod.lease && l->lease)
		log_warn("cluster", "this node's lease had expired: it registered again");
	cluster_mod.lease = l->lease;
	bool was = cluster_mod.store_ok;
	cluster_mod.store_ok = l->renewed;
	if (!l->renewed) {
		snprintf(cluster_mod.store_why, sizeof(cluster_mod.store_why), "%.280s",
			 l->err.msg);
		if (was)
			log_warn("cluster", "etcd did not take this node's lease renewal: %s",
				 l->err.msg);
	} else {
		cluster_mod.store_why[0] = '\0';
		if (!was) {
			log_info("cluster", "etcd takes this node's lease renewals again");
			atomic_store(&cluster_mod.watch_restart, true);
		}
	}
	publish_gauges();
	free(l->record);
	free(l);
}

static void lease_kick(void)
{
	if (cluster_mod.lease_pending || atomic_load(&cluster_mod.stop))
		return;
	cluster_mod.lease_pending = true;
	struct lease_job *l = xcalloc(1, sizeof(*l));
	l->record = node_record();
	l->lease = cluster_mod.lease;
	loop_pool_submit(cluster_mod.lease_pool, lease_work, lease_done, l);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
	lease_kick();
}

/* --- the watch ------------------------------------------------------------------------ */

struct wevent {
	enum etcd_event_type type;
	char *key, *value;
	size_t len;
	int64_t mod_rev;
	struct addr addr;
};

static bool is_node_key(const char *key)
{
	size_t pl = strlen(cluster_mod.prefix);
	return !strncmp(key, cluster_mod.prefix, pl) && !strncmp(key + pl, "nodes/", 6);
}

static void wevent_done(void *arg)
{
	struct wevent *w = arg;
	apply(w->type, w->key, w->value, w->len, w->mod_rev, &w->addr);
	publish_gauges();
	free(w->key);
	free(w->value);
	free(w);
}

static int on_event(enum etcd_event_type type, const struct etcd_kv *kv, void *arg)
{
	struct wevent *w = xcalloc(1, sizeof(*w));
	w->type = type;
	w->key = xstrdup(kv->key);
	w->value = xmalloc(kv->value_len + 1);
	memcpy(w->value, kv->value, kv->value_len + 1);
	w->len = kv->value_len;
	w->mod_rev = kv->mod_rev;
	if (type == ETCD_EVENT_PUT && is_node_key(kv->key))
		resolve_record(kv->value, kv->value_len, &w->addr);
	loop_pool_post(cluster_mod.watch_pool, wevent_done, w);
	return atomic_load(&cluster_mod.stop) ? 1 : 0;
}

struct resync {
	struct etcd_kvs kvs;
	struct addr *addrs;
};

static void resync_done(void *arg)
{
	struct resync *r = arg;
	apply_all(&r->kvs, r->addrs);
	free(r->addrs);
	publish_gauges();
	etcd_kvs_clear(&r->kvs);
	free(r);
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* The watch thread's one job: watch from the revision read at start, resume after every
 * failure from where it was, read everything again when etcd compacted that revision. */
static void watch_work(void *arg)
{
	int64_t next = cluster_mod.synced_rev + 1;
	unsigned backoff = 100;
	while (!atomic_load(&cluster_mod.stop)) {
		struct err e;
		int64_t at = next;
		int r = etcd_watch(cluster_mod.watch_c, cluster_mod.prefix, at, on_event, NULL,
				   &next, &e);
		if (atomic_load(&cluster_mod.stop))
			break;
		if (r == -ECANCELED) {
			/* Asked to start again (the lease renewals came back after a failure: the
			 * member it watched may have been cut from the quorum meanwhile). */
			atomic_store(&cluster_mod.watch_restart, false);
			metrics_add(metrics_daemon.cluster_watch_restarts, 1, "disconnected");
			continue;
		}
		if (next > at)
			backoff = 100;
		if (r == -ESTALE || r == -EMSGSIZE) {
			/* Compacted away, or one revision too large to take as a message (a
			 * delete of thousands of records): read it all again, watch from there. */
			metrics_add(metrics_daemon.cluster_watch_restarts, 1, "compacted");
			struct resync *s = xcalloc(1, sizeof(*s));
			if (etcd_get(cluster_mod.watch_c, cluster_mod.prefix, true, &s->kvs, &e) ==
			    0) {
				next = s->kvs.revision + 1;
				s->addrs = xcalloc(s->kvs.n + 1, sizeof(*s->addrs));
				for (size_t i = 0; i < s->kvs.n; i++)
					if (is_node_key(s->kvs.v[i].key))
						resolve_record(s->kvs.v[i].value,
							       s->kvs.v[i].value_len, &s->addrs[i]);
				loop_pool_post(cluster_mod.watch_pool, resync_done, s);
				continue;
			}
			free(s);
		} else {
			metrics_add(metrics_daemon.cluster_watch_restarts, 1, "disconnected");
		}
		log_debug("cluster",
			  "the watch of etcd ended (%s); it resumes from revision %" PRId64, e.msg,
			  next);
		for (unsigned waited = 0; waited < backoff && !atomic_load(&cluster_mod.stop);
		     waited += 50)
			sleep_ms(50);
		if (backoff < 2000)
			backoff *= 2;
	}
}

/* --- gauges, /health, /admin/nodes ---------------------------------------------------- */

static void publish_gauges(void)
{
	double up = 0, down = 0, cordoned = 0;
	for (struct cnode *n = cluster_mod.node_list; n; n = n->next) {
		if (n->up)
			up++;
		else
			down++;
		if (n->cordoned)
			cordoned++;
		metrics_set(metrics_daemon.cluster_sessions, (double)n->nrecs, n->name);
	}
	metrics_set(metrics_daemon.cluster_nodes, up, "up");
	metrics_set(metrics_daemon.cluster_nodes, down, "down");
	metrics_set(metrics_daemon.cluster_nodes, cordoned, "cordoned");
	metrics_set(metrics_daemon.cluster_store_up, cluster_mod.store_ok ? 1.0 : 0.0);
}

static json_t *iso(uint64_t ms)
{
	return ms ? time_iso8601_json(ms) : json_null();
}

static json_t *node_json(const struct cnode *n)
{
	size_t k = n->nrecs;
	json_t *j = json_pack("{s:s, s:s, s:b, s:b, s:b, s:o, s:I}", "name", n->name, "state",
			      n->up ? "up" : "down", "up", n->up, "cordoned", n->cordoned, "self",
			      !strcmp(n->name, cluster_mod.name), "downSince", iso(n->down_ms),
			      "sessions", (json_int_t)k);
	if (n->url)
		json_object_set_new(j, "url", json_string(n->url));
	const char *fields[] = { "driver",   "isolation", "templates", "labels",
				 "capacity", "version",   "startedAt", "memAvailable" };
	for (size_t i = 0; n->info && i < ARRAY_SIZE(fields); i++) {
		json_t *v = json_object_get(n->info, fields[i]);
		if (v)
			json_object_set(j, fields[i], v);
	}
	if (n->info)
		json_object_set(j, "load", json_object_get(n->info, "sessions"));
	return j;
}

json_t *cluster_nodes_json(void)
{
	json_t *a = json_array();
	for (struct cnode *n = cluster_mod.node_list; n; n = n->next)
		json_array_append_new(a, node_json(n));
	return json_pack("{s:s, s:o, s:b}", "self", cluster_mod.name, "nodes", a, "storeOk",
			 cluster_mod.store_ok);
}

json_t *cluster_health_json(void)
{
	size_t up = 0, all = 0;
	for (struct cnode *n = cluster_mod.node_list; n; n = n->next) {
		all++;
		up += n->up;
	}
	json_t *j = json_pack("{s:s, s:s, s:b, s:I, s:I}", "node", cluster_mod.name, "url",
			      cluster_mod.url, "store", cluster_mod.store_ok, "nodesUp",
			      (json_int_t)up, "nodes", (json_int_t)all);
	if (!cluster_mod.store_ok)
		json_object_set_new(j, "storeError", json_string(cluster_mod.store_why));
	return j;
}

/* --- peers ---------------------------------------------------------------------------- */

static void sign(const char *node, const char *dest, const char *ts, const char *nonce,
		 const char *method, const char *target, const char *owner, unsigned scopes,
		 char out[65])
{
	_cleanup_free_ char *msg = xasprintf("v2\n%s\n%s\n%s\n%s\n%s\n%s\n%s\n%u", node, dest, ts,
					     nonce, method, target, owner, scopes);
	uint8_t mac[32];
	unsigned maclen = 0;
	HMAC(EVP_sha256(), cluster_mod.secret, (int)cluster_mod.secret_len, (const uint8_t *)msg,
	     strlen(msg), mac, &maclen);
	for (unsigned i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", mac[i]);
}

char *cluster_peer_sign(const char *dest, const char *method, const char *target, const char *owner,
			unsigned scopes)
{
	char ts[24], nonce[33], sig[65];
	snprintf(ts, sizeof(ts), "%" PRIu64, time_wall_ms());
	random_hex(nonce, 16);
	const char *o = owner && *owner ? owner : "-";
	sign(cluster_mod.name, dest, ts, nonce, method, target, o, scopes, sig);
	return xasprintf("v2 node=%s dest=%s ts=%s nonce=%s owner=%s scopes=%u sig=%s",
			 cluster_mod.name, dest, ts, nonce, o, scopes, sig);
}

/* The value of `name=` in a peer header, copied into out (at most cap - 1 bytes). */
static bool field(const char *h, const char *name, char *out, size_t cap)
{
	size_t n = strlen(name);
	for (const char *p = h; *p;) {
		p += strspn(p, " ");
		size_t len = strcspn(p, " ");
		if (len > n && !strncmp(p, name, n) && p[n] == '=') {
			if (len - n - 1 >= cap)
				return false;
			memcpy(out, p + n + 1, len - n - 1);
			out[len - n - 1] = '\0';
			return true;
		}
		p += len;
	}
	return false;
}

/* Nonces seen within the window a signature is good for: a header is taken once. Oldest
 * first; when full, the oldest go (a flood of valid headers needs the secret). */
#define SEEN_MAX (1u << 18)

struct seen_nonce {
	struct hlink link;
	uint64_t expires_ms;
	char nonce[33];
	struct seen_nonce *next;
};

static struct {
	struct htab tab;
	struct seen_nonce *head, *tail;
	size_t n;
} seen_nonces;

static void seen_drop_head(void)
{
	struct seen_nonce *e = seen_nonces.head;
	seen_nonces.head = e->next;
	if (!seen_nonces.head)
		seen_nonces.tail = NULL;
	htab_remove(&seen_nonces.tab, &e->link);
	free(e);
	seen_nonces.n--;
}

/* Whether the nonce was seen before; remembers it otherwise. */
static bool seen_before(const char *nonce)
{
	uint64_t now = time_mono_ms();
	while (seen_nonces.head &&
	       (seen_nonces.head->expires_ms <= now || seen_nonces.n >= SEEN_MAX))
		seen_drop_head();
	uint64_t h = htab_hash_str(nonce);
	for (struct hlink *l = htab_first(&seen_nonces.tab, h); l; l = htab_next(l))
		if (!strcmp(htab_entry(l, struct seen_nonce, link)->nonce, nonce))
			return true;
	struct seen_nonce *e = xcalloc(1, sizeof(*e));
	snprintf(e->nonce, sizeof(e->nonce), "%s", nonce);
	e->expires_ms = now + 2 * PEER_SKEW_MS + 1000;
	htab_insert(&seen_nonces.tab, &e->link, h);
	if (seen_nonces.tail)
		seen_nonces.tail->next = e;
	else
		seen_nonces.head = e;
	seen_nonces.tail = e;
	seen_nonces.n++;
	return false;
}

static bool hex32(const char *s)
{
	if (strlen(s) != 32)
		return false;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
			return false;
	return true;
}

int cluster_peer_verify(const char *header, const char *method, const char *target, char *ret_node,
			size_t node_cap, char *ret_owner, size_t owner_cap, unsigned *ret_scopes,
			bool *ret_has_identity, struct err *err)
{
	if (!cluster_mod.on)
		return err_set(err, EACCES, "this server is not a node of a cluster");
	char node[NODE_NAME_MAX + 1], dest[NODE_NAME_MAX + 1], ts[24], nonce[40], owner[64],
		scopes[8], sig[65];
	if (strncmp(header, "v2 ", 3) != 0 || !field(header, "node", node, sizeof(node)) ||
	    !field(header, "dest", dest, sizeof(dest)) || !field(header, "ts", ts, sizeof(ts)) ||
	    !field(header, "nonce", nonce, sizeof(nonce)) ||
	    !field(header, "owner", owner, sizeof(owner)) ||
	    !field(header, "scopes", scopes, sizeof(scopes)) ||
	    !field(header, "sig", sig, sizeof(sig)) || !name_ok(node) || !name_ok(dest) ||
	    !hex32(nonce) || strlen(sig) != 64)
		return err_set(err, EACCES, "a malformed " CLUSTER_PEER_HEADER " header");
	char want[65];
	char *end;
	errno = 0;
	unsigned long sc = strtoul(scopes, &end, 10);
	if (errno || *end || sc > 7)
		return err_set(err, EACCES, "a malformed " CLUSTER_PEER_HEADER " header");
	sign(node, dest, ts, nonce, method, target, owner, (unsigned)sc, want);
	if (CRYPTO_memcmp(want, sig, 64) != 0)
		return err_set(err, EACCES,
			       CLUSTER_PEER_HEADER " does not carry this cluster's signature");
	if (strcmp(dest, cluster_mod.name) != 0)
		return err_set(err, EACCES,
			       CLUSTER_PEER_HEADER " was made for node `%s`, not this one", dest);
	errno = 0;
	unsigned long long t = strtoull(ts, &end, 10);
	uint64_t now = time_wall_ms();
	if (errno || *end || t + PEER_SKEW_MS < now || t > now + PEER_SKEW_MS)
		return err_set(err, EACCES,
			       CLUSTER_PEER_HEADER
			       " is stale (made over a minute ago, or the nodes' "
			       "clocks differ by more than that)");
	struct cnode *from = node_get(node);
	if (!from || !from->up)
		return err_set(err, EACCES,
			       CLUSTER_PEER_HEADER
			       " comes from `%s`, which is not a node that is up",
			       node);
	if (seen_before(nonce))
		return err_set(err, EACCES, CLUSTER_PEER_HEADER " was sent before: it works once");
	snprintf(ret_node, node_cap, "%s", node);
	*ret_has_identity = strcmp(owner, "-") != 0;
	snprintf(ret_owner, owner_cap, "%s", *ret_has_identity ? owner : "");
	*ret_scopes = (unsigned)sc;
	return 0;
}

/* --- start and stop ------------------------------------------------------------------- */

static int read_secret(const char *path, struct err *err)
{
	if (!path)
		return err_set(err, EINVAL,
			       "SANDBOX_CLUSTER needs SANDBOX_CLUSTER_SECRET_FILE: a file of at "
			       "least %d bytes that every node shares (openssl rand -hex 32)",
			       SECRET_MIN);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return err_sys(err, errno, "SANDBOX_CLUSTER_SECRET_FILE `%s`", path);
	if (!S_ISREG(st.st_mode) || (st.st_mode & 0077))
		return err_set(err, EPERM,
			       "SANDBOX_CLUSTER_SECRET_FILE `%s` must be a regular file that only "
			       "its owner may read (mode 0600 or 0400)",
			       path);
	ssize_t n = read(fd, cluster_mod.secret, sizeof(cluster_mod.secret));
	if (n < 0)
		return err_sys(err, errno, "SANDBOX_CLUSTER_SECRET_FILE `%s`", path);
	while (n > 0 && (cluster_mod.secret[n - 1] == '\n' || cluster_mod.secret[n - 1] == '\r' ||
			 cluster_mod.secret[n - 1] == ' '))
		n--;
	if (n < SECRET_MIN)
		return err_set(err, EINVAL,
			       "SANDBOX_CLUSTER_SECRET_FILE `%s` holds %zd bytes: at least %d are "
			       "needed",
			       path, n, SECRET_MIN);
	cluster_mod.secret_len = (size_t)n;
	return 0;
}

static int read_password(const char *path, struct err *err)
{
	if (!path)
		return 0;
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	if (!f)
		return err_sys(err, errno, "SANDBOX_ETCD_PASSWORD_FILE `%s`", path);
	char buf[512];
	if (!fgets(buf, sizeof(buf), f))
		buf[0] = '\0';
	buf[strcspn(buf, "\r\n")] = '\0';
	cluster_mod.etcd_password = xstrdup(buf);
	explicit_bzero(buf, sizeof(buf));
	return 0;
}

static int parse_labels(const char *s, struct err *err)
{
	cluster_mod.labels = json_object();
	_cleanup_free_ char *copy = xstrdup(s ? s : "");
	char *save = NULL;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		tok += strspn(tok, " ");
		if (!*tok)
			continue;
		char *eq = strchr(tok, '=');
		if (!eq || !seg_ok(tok, (size_t)(eq - tok)) || strlen(eq + 1) > 128 ||
		    !seg_ok(eq + 1, strlen(eq + 1)) ||
		    json_object_size(cluster_mod.labels) == LABELS_MAX)
			return err_set(err, EINVAL,
				       "SANDBOX_NODE_LABELS: `%.100s` is not name=value (letters, "
				       "digits, '.', '_', '-'; at most %d labels)",
				       tok, LABELS_MAX);
		*eq = '\0';
		json_object_set_new(cluster_mod.labels, tok, json_string(eq + 1));
	}
	return 0;
}

static int setup(const struct config *cfg, struct err *err)
{
	if (cfg->node_name && *cfg->node_name) {
		if (!name_ok(cfg->node_name))
			return err_set(err, EINVAL,
				       "SANDBOX_NODE_NAME `%.80s`: 1 to %d of a-z, 0-9, '.', '_', "
				       "'-'",
				       cfg->node_name, NODE_NAME_MAX);
		snprintf(cluster_mod.name, sizeof(cluster_mod.name), "%s", cfg->node_name);
	} else {
		char host[256] = "";
		gethostname(host, sizeof(host) - 1);
		for (char *p = host; *p; p++)
			if (*p >= 'A' && *p <= 'Z')
				*p = (char)(*p - 'A' + 'a');
		host[strcspn(host, ".")] = '\0';
		if (!name_ok(host))
			return err_set(err, EINVAL,
				       "the host name `%.80s` is not a node name: set "
				       "SANDBOX_NODE_NAME",
				       host);
		snprintf(cluster_mod.name, sizeof(cluster_mod.name), "%s", host);
	}
	const char *p = cfg->cluster_prefix;
	size_t pl = strlen(p);
	if (pl < 2 || pl > 100 || p[0] != '/' || p[pl - 1] != '/' || strstr(p, "//"))
		return err_set(err, EINVAL,
			       "SANDBOX_CLUSTER_PREFIX `%.100s` must begin and end with '/'", p);
	cluster_mod.prefix = xstrdup(p);
	int r = read_secret(cfg->cluster_secret_file, err);
	if (r < 0)
		return r;
	if ((r = read_password(cfg->etcd_password_file, err)) < 0 ||
	    (r = parse_labels(cfg->node_labels, err)) < 0)
		return r;
	cluster_mod.eo = (struct etcd_opts){ .endpoints = cfg->cluster,
					     .timeout_ms = cfg->cluster_timeout_ms,
					     .user = cfg->etcd_user,
					     .password = cluster_mod.etcd_password,
					     .ca = cfg->etcd_ca,
					     .cert = cfg->etcd_cert,
					     .key = cfg->etcd_key };
	if ((r = etcd_new(&cluster_mod.eo, &cluster_mod.io_c, err)) < 0 ||
	    (r = etcd_new(&cluster_mod.eo, &cluster_mod.lease_c, err)) < 0 ||
	    (r = etcd_new(&cluster_mod.eo, &cluster_mod.watch_c, err)) < 0)
		return r;
	etcd_set_stop(cluster_mod.watch_c, &cluster_mod.stop);
	etcd_set_restart(cluster_mod.watch_c, &cluster_mod.watch_restart);
	return 0;
}

struct key_ids {
	char (*v)[40];
	size_t n;
};

static void add_key_id(const char *id, void *arg)
{
	struct key_ids *x = arg;
	x->v = xrealloc(x->v, (x->n + 1) * sizeof(*x->v));
	snprintf(x->v[x->n++], sizeof(*x->v), "%s", id);
}

/* The first node of a fresh cluster publishes its keys; the others take the cluster's. */
static int settle_keys(const struct etcd_kvs *all, struct err *err)
{
	_cleanup_free_ char *boot = xasprintf("%sbootstrap", cluster_mod.prefix);
	bool bootstrapped = false, keys = false;
	size_t pl = strlen(cluster_mod.prefix);
	for (size_t i = 0; i < all->n; i++) {
		bootstrapped |= !strcmp(all->v[i].key, boot);
		keys |= !strncmp(all->v[i].key + pl, "keys/", 5);
	}
	if (bootstrapped || keys)
		return 0;
	json_auto_t *v =
		json_pack("{s:s, s:I}", "node", cluster_mod.name, "at", (json_int_t)time_wall_ms());
	_cleanup_free_ char *value = json_dumps(v, JSON_COMPACT);
	_cleanup_free_ char *marker = xasprintf("%sbootstrap-by", cluster_mod.prefix);
	bool won = false;
	int r = etcd_create_pair(cluster_mod.io_c, boot, value, marker, value, &won, err);
	count_etcd("bootstrap", r);
	if (r < 0)
		return r;
	if (!won)
		return 0;
	cluster_mod.first_key_ours = true;
	/* Its own keys become the cluster's (a host that joins with keys keeps them). */
	struct key_ids ids = { 0 };
	r = cluster_mod.hooks.key_ids(add_key_id, &ids, err);
	for (size_t i = 0; r == 0 && i < ids.n; i++)
		r = cluster_publish_key_now(ids.v[i], err);
	if (ids.n)
		log_info("cluster",
			 "this node began the cluster: its %zu API keys are the cluster's", ids.n);
	free(ids.v);
	return r;
}

int cluster_init(struct event_base *base, const struct config *cfg, const char *driver,
		 const char *isolation, const struct cluster_hooks *hooks, struct err *err)
{
	if (!cfg->cluster || !*cfg->cluster)
		return 0;
	cluster_mod.hooks = *hooks;
	cluster_mod.cfg = cfg;
	cluster_mod.base = base;
	cluster_mod.driver = driver;
	cluster_mod.isolation = isolation;
	cluster_mod.started_ms = time_wall_ms();
	random_hex(cluster_mod.instance, 8);
	int r = setup(cfg, err);
	if (r < 0)
		return err_wrap(err, "cluster");
	cluster_mod.on = true;
	struct etcd_kvs all = { 0 };
	for (int i = 0; i < START_TRIES; i++) {
		r = etcd_get(cluster_mod.io_c, cluster_mod.prefix, true, &all, err);
		count_etcd("range", r);
		if (r == 0 || r == -EACCES || r == -EBADMSG)
			break;
		log_warn("cluster", "cannot read etcd yet (%s): trying again", err->msg);
		sleep_ms(500u << i);
	}
	if (r < 0)
		return err_wrap(err, "cluster: cannot read etcd at %s", cfg->cluster);
	if ((r = settle_keys(&all, err)) < 0) {
		etcd_kvs_clear(&all);
		return err_wrap(err, "cluster: the API keys");
	}
	if (cluster_mod.first_key_ours) {
		/* Read again: the keys just published are the cluster's now. */
		etcd_kvs_clear(&all);
		r = etcd_get(cluster_mod.io_c, cluster_mod.prefix, true, &all, err);
		if (r < 0)
			return err_wrap(err, "cluster: cannot read etcd");
	}
	apply_all(&all, NULL);
	cluster_mod.synced_rev = all.revision;
	etcd_kvs_clear(&all);
	cluster_mod.store_ok = true;
	log_info("cluster",
		 "node %s joined the cluster at %s (revision %" PRId64 ", %zu nodes known)",
		 cluster_mod.name, cfg->cluster, cluster_mod.synced_rev, cluster_mod.nodes.count);
	return 0;
}

struct local_sessions {
	struct htab seen;
};

struct seen_entry {
	struct hlink link;
	char *owner, *id;
};

static void collect_local(const char *owner, const char *id, const char *preview,
			  const char *template, void *arg)
{
	struct local_sessions *ls = arg;
	struct seen_entry *e = xcalloc(1, sizeof(*e));
	e->owner = xstrdup(owner);
	e->id = xstrdup(id);
	htab_insert(&ls->seen, &e->link, rec_hash(owner, id));
	/* Every session held here is recorded as this node's. */
	cluster_session_put(owner, id, preview, template);
}

static bool local_has(struct local_sessions *ls, const char *owner, const char *id)
{
	for (struct hlink *l = htab_first(&ls->seen, rec_hash(owner, id)); l; l = htab_next(l)) {
		struct seen_entry *e = htab_entry(l, struct seen_entry, link);
		if (!strcmp(owner_seg(e->owner), owner_seg(owner)) && !strcmp(e->id, id))
			return true;
	}
	return false;
}

int cluster_start(int port, struct err *err)
{
	if (!cluster_mod.on)
		return 0;
	if (cluster_mod.cfg->node_url && *cluster_mod.cfg->node_url) {
		_cleanup_free_ char *h = NULL;
		int pt;
		if (parse_url(cluster_mod.cfg->node_url, &h, &pt) < 0)
			return err_set(err, EINVAL,
				       "SANDBOX_NODE_URL `%.100s` must be http://host:port",
				       cluster_mod.cfg->node_url);
		cluster_mod.url = xstrdup(cluster_mod.cfg->node_url);
	} else {
		const char *h = cluster_mod.cfg->host;
		char host[256] = "";
		if (!strcmp(h, "0.0.0.0") || !strcmp(h, "::") || !*h) {
			gethostname(host, sizeof(host) - 1);
			h = host;
		}
		cluster_mod.url = strchr(h, ':') ? xasprintf("http://[%s]:%d", h, port)
						 : xasprintf("http://%s:%d", h, port);
	}
	cluster_mod.io = loop_pool_new(cluster_mod.base, 1);
	cluster_mod.lease_pool = loop_pool_new(cluster_mod.base, 1);
	cluster_mod.watch_pool = loop_pool_new(cluster_mod.base, 1);
	cluster_mod.peers = loop_pool_new(cluster_mod.base, 2);
	cluster_mod.calls = loop_pool_new(cluster_mod.base, CLUSTER_MAX_CALLS);
	if (!cluster_mod.io || !cluster_mod.lease_pool || !cluster_mod.watch_pool ||
	    !cluster_mod.peers || !cluster_mod.calls)
		return err_set(err, EAGAIN, "cluster: cannot start its threads");
	/* This node's records: of sessions it holds (hibernated ones, put back), kept and
	 * written; of others (a crash's), removed. */
	struct local_sessions ls = { 0 };
	cluster_mod.hooks.foreach_session(collect_local, &ls);
	size_t forgotten = 0;
	for (struct crec *r = cluster_mod.rec_list, *next; r; r = next) {
		next = r->next;
		const char *o = strcmp(r->owner, "-") ? r->owner : "";
		if (!strcmp(r->node, cluster_mod.name) && !local_has(&ls, o, r->id)) {
			submit(job_new(J_FORGET_MINE, "delete", rec_key(o, r->id), NULL));
			rec_free(r);
			forgotten++;
		}
	}
	for (size_t b = 0; b < ls.seen.nbuckets; b++)
		for (struct hlink *l = ls.seen.buckets[b], *next; l; l = next) {
			next = l->next;
			struct seen_entry *e = htab_entry(l, struct seen_entry, link);
			free(e->owner);
			free(e->id);
			free(e);
		}
	htab_fini(&ls.seen);
	if (forgotten)
		log_info("cluster",
			 "%zu records of sessions this node no longer holds were removed",
			 forgotten);
	/* Registered before serving other nodes: the first renewal, blocking. */
	struct lease_job *l = xcalloc(1, sizeof(*l));
	l->record = node_record();
	cluster_mod.lease_pending = true;
	lease_work(l);
	if (!l->renewed) {
		int rr = err_set(err, EAGAIN, "cluster: cannot register node %s: %s",
				 cluster_mod.name, l->err.msg);
		free(l->record);
		free(l);
		cluster_mod.lease_pending = false;
		return rr;
	}
	node_put(cluster_mod.name, l->record, strlen(l->record),
		 NULL); /* the watch brings it again */
	lease_done(l);
	unsigned every = cluster_mod.cfg->cluster_lease_ttl_s * 1000u / 3u;
	struct timeval tv = { every / 1000, (every % 1000) * 1000 };
	cluster_mod.tick = event_new(cluster_mod.base, -1, EV_PERSIST, on_tick, NULL);
	event_add(cluster_mod.tick, &tv);
	cluster_mod.watching = true;
	loop_pool_submit(cluster_mod.watch_pool, watch_work, NULL, NULL);
	log_info("cluster", "node %s serves the cluster at %s", cluster_mod.name, cluster_mod.url);
	return 0;
}

void cluster_shutdown(void)
{
	atomic_store(&cluster_mod.stop, true);
	/* Without etcd, each queued write would wait its timeout: the records they would
	 * remove are this node's, cleared by its next start. */
	if (!cluster_mod.store_ok)
		atomic_store(&cluster_mod.abandon, true);
	if (cluster_mod.tick)
		event_free(cluster_mod.tick);
	cluster_mod.tick = NULL;
	/* Whatever the io thread still has to write (the sessions' records going) is written,
	 * then the node leaves. */
	cluster_mod.io = loop_pool_free(cluster_mod.io);
	cluster_mod.lease_pool = loop_pool_free(cluster_mod.lease_pool);
	if (cluster_mod.lease) {
		struct err e;
		int r = etcd_lease_revoke(cluster_mod.io_c, cluster_mod.lease, &e);
		count_etcd("revoke", r);
		if (r < 0)
			log_warn("cluster", "cannot revoke this node's lease: %s", e.msg);
		else
			log_info("cluster", "node %s left the cluster", cluster_mod.name);
	}
	cluster_mod.watch_pool = loop_pool_free(cluster_mod.watch_pool);
	cluster_mod.peers = loop_pool_free(cluster_mod.peers);
	cluster_mod.calls = loop_pool_free(cluster_mod.calls);
	cluster_mod.io_c = etcd_free(cluster_mod.io_c);
	cluster_mod.lease_c = etcd_free(cluster_mod.lease_c);
	cluster_mod.watch_c = etcd_free(cluster_mod.watch_c);
	for (struct crec *r = cluster_mod.rec_list, *next; r; r = next) {
		next = r->next;
		rec_free(r);
	}
	for (struct cnode *n = cluster_mod.node_list, *next; n; n = next) {
		next = n->next;
		free(n->name);
		free(n->url);
		free(n->host);
		json_decref(n->info);
		free(n);
	}
	cluster_mod.node_list = NULL;
	while (cluster_mod.keyrev_list)
		keyrev_drop(cluster_mod.keyrev_list->id);
	htab_fini(&cluster_mod.keyrevs);
	htab_fini(&cluster_mod.nodes);
	while (seen_nonces.head)
		seen_drop_head();
	htab_fini(&seen_nonces.tab);
	htab_fini(&cluster_mod.recs);
	htab_fini(&cluster_mod.previews);
	htab_fini(&cluster_mod.ids);
	json_decref(cluster_mod.labels);
	free(cluster_mod.prefix);
	free(cluster_mod.url);
	free(cluster_mod.lease_last);
	if (cluster_mod.etcd_password) {
		explicit_bzero(cluster_mod.etcd_password, strlen(cluster_mod.etcd_password));
		free(cluster_mod.etcd_password);
	}
	explicit_bzero(cluster_mod.secret, sizeof(cluster_mod.secret));
	memset(&cluster_mod, 0, sizeof(cluster_mod));
}
