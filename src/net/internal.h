/* What the files of the network module share (net.c: the table's structure and each
 * sandbox's network; host.c: setting networking up on the host at start and undoing it at
 * exit). Nothing outside src/net/ includes this. */
#pragma once

#include <arpa/inet.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "net/net.h"
#include "net/nft.h"
#include "net/nl.h"
#include "net/pool.h"
#include "net/policy.h"
#include "util/err.h"

#define DEFAULT_POOL "10.200.0.0/16"
#define LOCK_FILE    NET_STATE_DIR "/lock"
#define NS_LINK      "eth0"
#define TCP_BACKLOG  16
#define MTU_BYTES    1500

enum net_mode { NET_MODE_AUTO, NET_MODE_ON, NET_MODE_OFF };

/* A policy chain of our table and the sandboxes using it. */
struct chain {
	char *key;
	char name[NET_NFT_CHAIN_MAX];
	unsigned refs;
	bool permanent; /* the server's: lives as long as the table */
	struct chain *next;
};

struct net_sandbox {
	char *id;
	char name[NET_NAME_MAX];
	char netns_path[64];
	char dir[96];
	uint32_t block;
	bool have_block;
	/* What this sandbox's creation made, hence what teardown may remove. */
	bool made_dir, made_ns_path, made_link;
	bool tap;
	struct net_policy policy;
	struct chain *chain;
	int ns_fd;
	int udp_fd, tcp_fd;
	struct net_resolver *resolver; /* loop thread */
	char *owner;                   /* its session's API key id (the resolver's budget) */
	struct net_sandbox *next;
};

/* The module's state (net.c and host.c). */
struct net_module {
	bool enabled;
	char why_off[256]; /* why sandboxes have no network, when they have none */
	struct event_base *base;
	pthread_mutex_t lock; /* the list, the pool */
	struct net_pool pool;
	struct net_policy server;
	struct net_sandbox *list;
	size_t count;
	struct dying_link *dying; /* host links whose namespace is going away */
	int root_ns_fd;
	int netns_dir_fd; /* NET_NETNS_DIR as this daemon made it shared (O_PATH), or -1 */
	int lock_fd;
	bool table_made;
	bool set_ip_forward;

	pthread_mutex_t nft_lock; /* chains and host_addrs: the structure of our table */
	struct chain *chains;
	uint32_t *host_addrs;
	size_t n_host;
};

extern struct net_module net_mod;

/* A host link whose namespace is going away: its addresses are reused once it is gone. */
struct dying_link {
	char name[NET_NAME_MAX];
	uint32_t block;
	uint64_t since_ms;
	struct dying_link *next;
};

/* net.c, for host.c */
void net_ip_text(uint32_t addr, char out[INET_ADDRSTRLEN]);
/* Unmounts every mount on NET_NETNS_DIR/<name>, through each mount of the directory; 0, or
 * -1 with errno when none could be and something other than "not mounted" was wrong. */
int net_netns_unmount(const char *name);
int net_sysctl_write(const char *path, const char *value, struct err *err);
int net_sysctl_read(const char *path, char *buf, size_t len);
int net_chain_get(const struct net_policy *p, bool permanent, struct chain **ret, struct err *err);
/* Frees a chain taken off the list (NULL is fine); its nftables chain is not touched. */
void net_chain_free(struct chain *c);
int net_host_addrs_get(uint32_t **ret, size_t *n, struct err *err);
void net_reap_dying(struct net_nl *nl, bool all);
