/* net/nl: the rtnetlink requests sandbox networking needs (links, addresses, routes, a
 * token-bucket qdisc, the host's addresses), over libmnl.
 *
 * A netlink socket belongs to the network namespace it was opened in, whatever namespace the
 * thread using it is in later: open one inside a sandbox's namespace and it configures that
 * namespace from anywhere. Requests are synchronous (each waits for the kernel's answer) and
 * a socket is used by one thread at a time. Errors name the operation and the object. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

struct mnl_socket;

struct net_nl {
	struct mnl_socket *sk;
	uint32_t portid;
	uint32_t seq;
};

/* Opens a NETLINK_ROUTE socket in the calling thread's network namespace. */
int net_nl_open(struct net_nl *nl, struct err *err);
/* Closes it; a zeroed or closed struct net_nl is fine. */
void net_nl_close(struct net_nl *nl);

/* `_cleanup_nl_ struct net_nl nl = { 0 };`: closed at the end of its scope (util/cleanup.h). */
#define _cleanup_nl_ __attribute__((cleanup(net_nl_close)))

/* The index of the link called `name`, or -ENODEV. */
int net_nl_link_index(struct net_nl *nl, const char *name, struct err *err);

/* Creates a veth pair: `name` here, up, and `peer` (down) in the namespace netns_fd. */
int net_nl_veth_add(struct net_nl *nl, const char *name, const char *peer, int netns_fd,
		    struct err *err);

int net_nl_link_up(struct net_nl *nl, int ifindex, struct err *err);

/* Deletes the link called `name` (and a veth's peer with it); -ENODEV when there is none. */
int net_nl_link_del(struct net_nl *nl, const char *name, struct err *err);

/* Adds addr/prefix (host order) to a link. */
int net_nl_addr_add(struct net_nl *nl, int ifindex, uint32_t addr, unsigned prefix,
		    struct err *err);

/* Adds a route to dst/prefix (0/0: the default route) via gw (0: none) out of ifindex. */
int net_nl_route_add(struct net_nl *nl, uint32_t dst, unsigned prefix, uint32_t gw, int ifindex,
		     struct err *err);

/* Replaces the root qdisc of a link with a token bucket: rate and burst in bytes. */
int net_nl_qdisc_tbf(struct net_nl *nl, int ifindex, uint64_t rate_bytes, uint32_t burst_bytes,
		     struct err *err);

/* Every IPv4 address of the namespace (host order), sorted, without duplicates, except
 * those of links whose name starts with `skip_prefix` (may be NULL). Caller frees *ret. */
int net_nl_addrs4(struct net_nl *nl, const char *skip_prefix, uint32_t **ret, size_t *ret_n,
		  struct err *err);
