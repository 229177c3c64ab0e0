/* net/resolver: the DNS resolver each sandbox talks to, run by sandboxd on its event loop.
 *
 * Its UDP and TCP sockets are opened inside the sandbox's network namespace (by net.c, on the
 * worker that builds the namespace) and bound to the sandbox-facing resolver address; the
 * loop serves them like any other descriptor, so a sandbox costs two sockets, not a process.
 * A question for a denied name gets NXDOMAIN; an allowed one is forwarded over UDP to the
 * upstream servers (VM_DNS_UPSTREAM) from the root namespace, with a fresh socket and a random
 * id per attempt, a timeout, and the answer checked against the question. When the sandbox's
 * policy is an allow list, the IPv4 addresses of each answer are added to the nftables set
 * its policy chain accepts, for their TTL, before the answer is passed on, so a connection to
 * an address the resolver never handed out is dropped.
 *
 * Pending questions are bounded per sandbox and in total; so are TCP clients. Loop thread
 * only. */
#pragma once

#include <event2/event.h>

#include "net/policy.h"
#include "util/err.h"

#define NET_RESOLVER_PORT 53

struct net_resolver;

/* Parses VM_DNS_UPSTREAM ("ip", "ip:port", "[ipv6]:port", comma-separated); once at start. */
int net_resolver_set_upstreams(const char *list, struct err *err);
void net_resolver_clear_upstreams(void);

/* Starts serving udp_fd and tcp_fd (bound, TCP listening; the resolver takes them) for the
 * sandbox whose host link is `ifname` under `policy` (borrowed: it must outlive the
 * resolver). */
struct net_resolver *net_resolver_new(struct event_base *base, int udp_fd, int tcp_fd,
				      const char *ifname, const struct net_policy *policy,
				      const char *owner);
/* The owner (an API key id; "" for none) whose sandboxes share its part of the pending
 * questions' budget: the budget is divided fairly between owners with questions pending, an
 * owner's part between its sandboxes (never below a small floor each), and a question within
 * its shares takes the slot of the oldest question of the one most beyond its share when the
 * budget is spent. */
void net_resolver_set_owner(struct net_resolver *r, const char *owner);

/* Stops serving, drops pending questions, removes the addresses it put in the nftables set,
 * closes its sockets. NULL is fine. */
void net_resolver_free(struct net_resolver *r);

/* Questions waiting for an upstream answer, all resolvers together (for tests and metrics). */
unsigned net_resolver_pending_total(void);
