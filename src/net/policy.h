/* net/policy: the egress policy of a sandbox: which names its resolver answers, which
 * destinations it may reach, and how fast.
 *
 * The server's policy comes from the reference project's variables (VM_DNS_*, VM_DEST_*,
 * VM_BW_*). A session may bring its own at creation, which is merged into the server's by
 * net_policy_merge(): the result never permits anything the server's policy does not, and an
 * override that asks for more is refused with a message saying which part.
 *
 * Pure code: no I/O, no global state. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "util/err.h"

#define NET_PROTO_ALL 0
#define NET_PROTO_TCP 6
#define NET_PROTO_UDP 17

/* Limits on what a policy may hold (a session's override is user input). */
#define NET_POLICY_MAX_NAMES 256
#define NET_POLICY_MAX_RULES 256

/* One `cidr[:port[-port]][/tcp|/udp|/all]` rule (IPv4). */
struct net_dest_rule {
	uint32_t addr; /* network address, host order, host bits clear */
	uint8_t prefix;
	uint8_t proto;    /* NET_PROTO_ALL, NET_PROTO_TCP or NET_PROTO_UDP */
	uint16_t port_lo; /* 0 and 0: any port */
	uint16_t port_hi;
};

struct net_rules {
	struct net_dest_rule *v;
	size_t n;
};

/* Name patterns, lower case, without a final dot: "example.com" or "*.example.com". */
struct net_names {
	char **v;
	size_t n;
};

struct net_policy {
	/* Names. A name resolves when (!dns_allow_only or it matches dns_allow) and it matches
	 * nothing in dns_deny; others get NXDOMAIN. */
	bool dns_allow_only;
	struct net_names dns_allow;
	struct net_names dns_deny;

	/* Destinations. Always blocked: IPv6, the host's own addresses and the other sandboxes.
	 * Then dest_deny drops; when dest_allow_lifts, dest_allow accepts before the default
	 * blocks (link-local, private, CGNAT, multicast, reserved) drop; when dest_allow_only,
	 * only dest_allow (and, with dns_allow_only, addresses the resolver handed out) is
	 * reachable. */
	bool dest_allow_only;
	bool dest_allow_lifts;
	struct net_rules dest_allow;
	struct net_rules dest_deny;

	/* Bandwidth per direction (kbit = 1000 bits). */
	bool bw_enabled;
	unsigned bw_rate_kbit;
	unsigned bw_burst_kbit;
};

/* Parses one destination rule. */
int net_rule_parse(const char *s, struct net_dest_rule *ret, struct err *err);

/* Formats a rule back (at least 48 bytes). */
void net_rule_format(const struct net_dest_rule *r, char *buf, size_t len);

/* Whether rule `inner` permits nothing that `outer` does not. */
bool net_rule_within(const struct net_dest_rule *inner, const struct net_dest_rule *outer);

/* Parses a comma-separated list of rules, or of name patterns; blanks around items are
 * ignored, empty items skipped. */
int net_rules_parse(const char *list, struct net_rules *ret, struct err *err);
int net_names_parse(const char *list, struct net_names *ret, struct err *err);

/* Whether every name `inner` matches is matched by `outer`. */
bool net_name_within(const char *inner, const char *outer);

/* The server's policy from its configuration. */
int net_policy_from_config(const struct config *cfg, struct net_policy *ret, struct err *err);

/* Merges a session's override into the server's policy. The override is an object:
 *   {"dns":  {"mode": "none|allow|deny", "domains": ["a.example", "*.b.example"] or "a,b"},
 *    "dest": {"mode": "none|allow|deny", "rules": ["10.1.0.0/16:443/tcp"] or "r1,r2"},
 *    "bandwidth": {"rateKbit": N, "burstKbit": N}}
 * every part optional. "none" (or no part) keeps the server's choice; deny lists add to the
 * server's; an allow list must lie within the server's allow list when it has one; a rate or
 * burst must not exceed the server's. Anything looser is refused (-EINVAL, err says what). */
int net_policy_merge(const struct net_policy *server, const json_t *override,
		     struct net_policy *ret, struct err *err);

/* Deep copy. */
void net_policy_copy(struct net_policy *dst, const struct net_policy *src);

void net_policy_free(struct net_policy *p);

/* A canonical text of the destination part of the policy: equal texts give equal packet
 * filters (names the shared filter chain). Caller frees. */
char *net_policy_dest_key(const struct net_policy *p);

/* The reference project's mode names, for metrics labels. */
const char *net_policy_dns_mode(const struct net_policy *p);
const char *net_policy_dest_mode(const struct net_policy *p);

enum net_dns_verdict {
	NET_DNS_ALLOW,
	NET_DNS_DENIED,      /* on the deny list */
	NET_DNS_NOT_ALLOWED, /* allow list in force and the name is not on it */
};

/* What the resolver does with a question for `name`. */
enum net_dns_verdict net_policy_dns_verdict(const struct net_policy *p, const char *name);

/* Whether names are filtered at all (queries to other resolvers are then blocked). */
bool net_policy_dns_filtered(const struct net_policy *p);
