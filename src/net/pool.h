/* net/pool: the addresses sandboxes get, carved out of one IPv4 prefix (SANDBOX_NET_POOL).
 *
 * The pool is cut into blocks of four addresses, one block per sandbox: two point-to-point
 * /31 links, host <-> namespace (the veth pair) and namespace <-> guest (a VM's TAP; for the
 * jail the third address is the resolver's, on the namespace's loopback). A /16 holds 16384
 * blocks. Allocation is next-fit, so a block just released is the last to be handed out
 * again (late packets and conntrack entries of a gone sandbox never reach a new one), and a
 * block in use is never handed out twice. Not thread-safe: the caller locks. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "util/err.h"

#define NET_POOL_BLOCK      4
#define NET_POOL_MIN_PREFIX 8  /* at most 2^22 blocks */
#define NET_POOL_MAX_PREFIX 30 /* at least one block */

/* The four addresses of a block, in order. */
enum net_pool_slot {
	NET_POOL_HOST = 0,  /* veth end in the root namespace: the sandbox's gateway */
	NET_POOL_NS = 1,    /* veth end in the sandbox's namespace (eth0) */
	NET_POOL_INNER = 2, /* resolver address; a VM's gateway on the TAP */
	NET_POOL_GUEST = 3, /* a VM's own address */
};

struct net_pool {
	uint32_t base; /* host order, host bits clear */
	unsigned prefix;
	uint32_t nblocks;
	uint32_t used;
	uint32_t next; /* where the next search starts */
	uint8_t *bits;
};

/* Parses "a.b.c.d/len" (NET_POOL_MIN_PREFIX <= len <= NET_POOL_MAX_PREFIX). */
int net_pool_init(struct net_pool *p, const char *cidr, struct err *err);
void net_pool_free(struct net_pool *p);

/* Takes a free block; -ENOSPC when every block is in use. */
int net_pool_alloc(struct net_pool *p, uint32_t *ret_block);

/* Gives a block back; freeing a free block is a no-op. */
void net_pool_release(struct net_pool *p, uint32_t block);

bool net_pool_in_use(const struct net_pool *p, uint32_t block);

/* The address (host order) of slot `slot` of block `block`. */
uint32_t net_pool_addr(const struct net_pool *p, uint32_t block, enum net_pool_slot slot);
