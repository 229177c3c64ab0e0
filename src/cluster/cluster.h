/* cluster: many sandboxd nodes sharing one etcd (SANDBOX_CLUSTER, docs/cluster.md).
 *
 * Without SANDBOX_CLUSTER nothing here runs and every call is a cheap no-op. With it, each
 * node:
 *   - registers under a lease (P/nodes/<name>: its URL, driver, templates, labels, capacity
 *     and load), renewed every third of SANDBOX_CLUSTER_LEASE_TTL, so that a node that dies
 *     disappears once its lease expires;
 *   - records every session it holds (P/sessions/<owner>/<id>: its node and preview name), a
 *     client-chosen id claimed in one transaction, so that an id names one session in the
 *     whole cluster;
 *   - keeps the API keys in etcd (P/keys/<id>: the whole row, its hash included) and mirrors
 *     them into its own key store, so that a key made, rotated or revoked on any node takes
 *     effect on every node as its watch delivers the change;
 *   - watches the whole prefix, resuming from its revision after any disconnect, into tables
 *     of nodes, cordons and sessions that routing (route.c) and placement read without
 *     asking etcd: a lost quorum stops creations (they need a record) but not the sessions
 *     that exist.
 * Requests to etcd run on threads of the module's own (loop_pool_new), never on the loop nor
 * on the daemon's workers: an etcd without quorum makes them wait, never the rest.
 *
 * Only the loop thread calls these functions (but cluster_init/cluster_start at start). */
#pragma once

#include <event2/event.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "config.h"
#include "util/err.h"

/* What the cluster needs of the layers above it (sessions, keys), given at start (main.c), so
 * that this module includes none of them. */
struct cluster_hooks {
	/* Adds this node's figures to its record: "templates" (an array of names), "sessions"
	 * (how many it holds) and "memAvailable" (bytes). */
	void (*node_figures)(json_t *record);
	/* Calls fn for every session this node holds. */
	void (*foreach_session)(void (*fn)(const char *owner, const char *id, const char *preview,
					   const char *template, void *arg),
				void *arg);
	/* The key table: a key's whole row (NULL with ENOENT when there is none), writing one,
	 * deleting one, keeping only some, and every key's id. */
	json_t *(*key_row)(const char *id, struct err *err);
	int (*key_apply)(const json_t *row, struct err *err);
	int (*key_delete)(const char *id, struct err *err);
	int (*keys_keep_only)(const char *const *ids, size_t n, struct err *err);
	int (*key_ids)(void (*fn)(const char *id, void *arg), void *arg, struct err *err);
};

/* Whether this daemon is a node of a cluster. */
bool cluster_enabled(void);

/* Connects to etcd, reads the prefix (nodes, sessions, keys), takes this node's lease, and
 * settles the key store: the first node of a fresh cluster (an etcd transaction decides)
 * publishes its keys, every other takes the cluster's. Blocks, bounded by a few timeouts; a
 * node that cannot reach etcd does not start. */
int cluster_init(struct event_base *base, const struct config *cfg, const char *driver,
		 const char *isolation, const struct cluster_hooks *hooks, struct err *err);
/* Once the sessions are loaded (hibernated ones put back): removes this node's records of
 * sessions it no longer holds, records those it holds, registers the node and starts the
 * watch and the lease's renewals. */
int cluster_start(int port, struct err *err);
/* Revokes the lease (the node leaves the listings at once) and stops the threads. */
void cluster_shutdown(void);

/* This node's name and advertised URL. */
const char *cluster_node_name(void);

/* Whether the first start's admin key is this node's to create: the node that won the
 * bootstrap, before any key exists. */
bool cluster_first_key_is_ours(void);
/* Publishes a key's row as it is in the local store (or its deletion), blocking; for the
 * first start's key. */
int cluster_publish_key_now(const char *id, struct err *err);
/* The same from the loop, asynchronously: done(NULL, arg) once etcd holds it, or with the
 * error (the caller then puts the local store back as it was). */
void cluster_publish_key(const char *id, void (*done)(const struct err *err, void *arg), void *arg);

/* --- sessions --------------------------------------------------------------------------- */

/* Claims (owner, id) for a new session of this node, in one transaction: done(NULL) once
 * recorded; EEXIST when a session of another live node holds the id; EROFS (503) when etcd
 * cannot be written (no quorum), at once when the lease could not be renewed lately. */
void cluster_session_claim(const char *owner, const char *id, const char *preview,
			   const char *template, void (*done)(const struct err *err, void *arg),
			   void *arg);
/* Records a session made otherwise (a fork, a session put back at start). */
void cluster_session_put(const char *owner, const char *id, const char *preview,
			 const char *template);
/* The session is gone: its record goes, if it is this node's. */
void cluster_session_gone(const char *owner, const char *id);

/* A node as the tables know it. */
struct cluster_node {
	const char *name;
	const char *url;  /* http://host:port */
	const char *host; /* as its URL has it */
	int port;
	/* What the host resolved to when the record came (off the loop), NULL when it could
	 * not be resolved. */
	const struct sockaddr *addr;
	unsigned addrlen;
	bool up;            /* its lease lives */
	bool cordoned;      /* takes no new session */
	uint64_t down_ms;   /* wall clock when its lease was seen to end, 0 while up */
	const json_t *info; /* its record (templates, labels, capacity, load) */
};

enum cluster_where {
	CLUSTER_UNKNOWN, /* no record: not a session of the cluster's (or not yet) */
	CLUSTER_LOCAL,   /* recorded as this node's */
	CLUSTER_REMOTE,  /* on a live node: *ret_node */
	CLUSTER_LOST,    /* on a node whose lease ended: *ret_node */
};

/* Where session (owner, id) lives, by the tables. */
enum cluster_where cluster_session_where(const char *owner, const char *id,
					 const struct cluster_node **ret_node);
/* Where a session of id `id` of any owner lives (an admin's request, a ticket's, a token's):
 * here when one of them is this node's, else the first on a live node, else lost. */
enum cluster_where cluster_session_where_any(const char *id, const struct cluster_node **ret_node);
/* Where the session of preview name `name` lives (previews, E2B's data plane). */
enum cluster_where cluster_preview_where(const char *name, const struct cluster_node **ret_node);
/* A node by name (NULL when unknown). */
const struct cluster_node *cluster_node_find(const char *name);
/* Calls fn for each known node, this one included. */
void cluster_foreach_node(void (*fn)(const struct cluster_node *n, void *arg), void *arg);

/* Chooses the node for a new session of `template`: a live, uncordoned node that has the
 * template and room, whose labels include every one of `selector` (an object of strings, or
 * NULL), least loaded first, this node when it ties. NULL with err set (EINVAL for a bad
 * selector, EHOSTUNREACH when no node fits: 503 saying why). */
const struct cluster_node *cluster_place(const char *template, const json_t *selector,
					 struct err *err);

/* Cordons a node (it takes no new sessions) or lifts it; recorded in etcd, so it outlives
 * the node's restarts. done(NULL) once written. */
void cluster_cordon(const char *name, bool on, void (*done)(const struct err *err, void *arg),
		    void *arg);

/* The nodes as /admin/nodes shows them. */
json_t *cluster_nodes_json(void);
/* What /health says of the cluster: this node, its store's state, the nodes up. */
json_t *cluster_health_json(void);

/* The loop, SANDBOX_CLUSTER_TIMEOUT_MS, and threads of the module's for work that talks to
 * other nodes (a listing's parts), so that none of it waits behind etcd or the workers. */
struct event_base *cluster_event_base(void);
/* Whether the node is stopping (callable from any thread: long transfers end). */
bool cluster_stopping(void);
unsigned cluster_timeout_ms(void);
void cluster_peers_submit(void (*work)(void *arg), void (*done)(void *arg), void *arg);
/* Threads for calls that last as long as what they call does (an MCP tool run on another
 * node): CLUSTER_MAX_CALLS of them, so that the caller must refuse more rather than queue
 * them behind each other. */
#define CLUSTER_MAX_CALLS 8
void cluster_calls_submit(void (*work)(void *arg), void (*done)(void *arg), void *arg);

/* --- peers ------------------------------------------------------------------------------ */

/* The header a node puts on what it sends another: its name, the node it is for, the time, a
 * nonce, the identity it vouches for (owner "" and scopes 0: none, the receiver
 * authenticates the caller) and an HMAC-SHA256 of them and of the request's method and target
 * under the cluster's secret. */
#define CLUSTER_PEER_HEADER "X-Sandbox-Peer"
char *cluster_peer_sign(const char *dest, const char *method, const char *target, const char *owner,
			unsigned scopes);
/* Checks such a header: 0 with the sender's name and the identity it vouches for
 * (*ret_has_identity false when none), or EACCES saying why: no cluster, a bad signature,
 * made for another node, made over a minute ago, from a node that is not up, or seen before
 * (a header works once). */
int cluster_peer_verify(const char *header, const char *method, const char *target, char *ret_node,
			size_t node_cap, char *ret_owner, size_t owner_cap, unsigned *ret_scopes,
			bool *ret_has_identity, struct err *err);
