/* net/nft: our nftables table, `inet agent_sandbox`, and nothing else of the host's ruleset.
 *
 * Structure (chains, sets, policy chains) changes through the nft binary, one JSON batch per
 * change (`nft -j -f -`): a batch is applied whole or not at all, and we do not link the
 * GPL libnftables. The table:
 *
 *   forward      iifname vmap @egress        a sandbox's packets go to its policy chain
 *                iifname "as-*" drop         a sandbox link without a policy: nothing out
 *                oifname "as-*" ct state established,related accept; oifname "as-*" drop
 *   input        from "as-*": replies only   the host, sandboxd's API included, is closed
 *   postrouting  ip saddr <pool> oifname != "as-*" masquerade
 *   egress       map ifname : verdict        one element per sandbox: goto its policy chain
 *   dns_allowed  set ifname . ipv4_addr with timeouts: what each resolver handed out
 *   host_addrs   set of the host's own IPv4 addresses
 *   pol_<hash>   one chain per distinct destination policy, shared by every sandbox with it
 *
 * Per-sandbox state is then only set elements (the map entry and resolved addresses), which
 * change through nfnetlink directly: a sandbox is added or removed by one netlink batch in
 * microseconds, where starting nft costs about ten milliseconds. */
#pragma once

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "net/policy.h"
#include "util/err.h"

#define NET_NFT_TABLE     "agent_sandbox"
#define NET_NFT_IFPREFIX  "as-" /* every sandbox link in the root namespace */
#define NET_NFT_MAP       "egress"
#define NET_NFT_DNS_SET   "dns_allowed"
#define NET_NFT_HOST_SET  "host_addrs"
#define NET_NFT_SET_SIZE  1048576 /* elements of dns_allowed, all sandboxes together */
#define NET_NFT_CHAIN_MAX 32      /* length of a policy chain's name */

/* The nft binary to use (SANDBOX_NFT); NULL or "": look on PATH and in /usr/sbin, /sbin. */
void net_nft_set_bin(const char *path);

/* Finds the nft binary (the one set, else on PATH, in /usr/sbin, /sbin); ENOENT if none. */
int net_nft_find(struct err *err);

/* Runs one batch: `cmds` is the array of commands of {"nftables": [...]}. Blocking. */
int net_nft_run(json_t *cmds, struct err *err);

/* Commands that create the table afresh (deleting one left by an earlier run first), with the
 * pool's NAT and the host addresses given. */
json_t *net_nft_table_cmds(uint32_t pool_base, unsigned pool_prefix, const uint32_t *host_addrs,
			   size_t n_host);

/* Commands that delete the table (when it exists). */
json_t *net_nft_table_delete_cmds(void);

/* Commands that replace the content of host_addrs. */
json_t *net_nft_host_addrs_cmds(const uint32_t *addrs, size_t n);

/* Commands that create policy chain `chain` for p (destination part only). */
json_t *net_nft_policy_cmds(const char *chain, const struct net_policy *p, uint32_t pool_base,
			    unsigned pool_prefix);

/* Commands that delete policy chain `chain`. */
json_t *net_nft_policy_delete_cmds(const char *chain);

/* The chain name for a policy key (net_policy_dest_key). */
void net_nft_policy_chain_name(const char *key, char out[NET_NFT_CHAIN_MAX]);

/* --- set elements over nfnetlink (thread-safe, non-blocking in practice) ---------------- */

int net_nfnl_open(struct err *err);
void net_nfnl_close(void);

/* Points link `ifname` at policy chain `chain` (adds the egress map element). */
int net_nfnl_egress_add(const char *ifname, const char *chain, struct err *err);

/* Removes link `ifname` from the egress map; -ENOENT when it was not there. */
int net_nfnl_egress_del(const char *ifname, struct err *err);

/* Adds (ifname, addr) to dns_allowed for timeout_ms; an element already there keeps its own
 * timeout (the caller replaces it with net_nfnl_dns_del first to extend it). */
int net_nfnl_dns_add(const char *ifname, const uint32_t *addrs, const uint32_t *timeouts_ms,
		     size_t n, struct err *err);

/* Removes (ifname, addr) elements; ones already expired are skipped without error. */
int net_nfnl_dns_del(const char *ifname, const uint32_t *addrs, size_t n, struct err *err);
