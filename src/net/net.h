/* net: each sandbox's network, built with netlink, filtered with nftables, resolved by us.
 *
 * Per sandbox (sandbox id `sb-0123456789ab` gives the name `as-0123456789ab`):
 *   - a network namespace bind-mounted at /run/netns/<name>, IPv6 disabled inside;
 *   - a veth pair: <name> in the root namespace, eth0 in the sandbox's namespace, on a /31
 *     from SANDBOX_NET_POOL (default 10.200.0.0/16, four addresses per sandbox); the default
 *     route inside points at the host end;
 *   - for VM drivers, a TAP `tap0` in the namespace on a second /31, routed: the VM's
 *     gateway and resolver is the namespace's end of it (net_sandbox_tap_open);
 *   - a resolver (net/resolver.h) on the namespace's third address, port 53, UDP and TCP;
 *     /etc/resolv.conf inside the sandbox must be the file net_resolv_conf_path() names;
 *   - its egress policy: an element of our nftables map pointing its host link at the chain
 *     of its policy (net/nft.h); a token bucket each way when bandwidth is limited.
 * Creation and removal block (worker threads); the resolver runs on the event loop between
 * net_sandbox_start() and net_sandbox_stop(), which must be called on the loop thread.
 *
 * SANDBOX_NETWORK: auto (default) sets all this up when it can (root, nftables) and otherwise
 * logs why and gives sandboxes an empty namespace, with no network at all; on makes it a
 * start-up error; off never tries. Only one daemon per host manages sandbox networking (a
 * lock in NET_STATE_DIR); another one runs with networking off. */
#pragma once

#include <event2/event.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "config.h"
#include "net/policy.h"
#include "util/err.h"

/* Host-wide state of sandbox networking: the lock, and a directory per sandbox network
 * (its resolv.conf; its presence after a crash says the network is ours to remove). */
#define NET_STATE_DIR "/run/agent-sandbox-net"
#define NET_NETNS_DIR "/run/netns"
#define NET_NAME_MAX  16 /* "as-" + 12 characters + NUL: an interface name */
#define NET_TAP_NAME  "tap0"

/* The resolv.conf for the sandbox whose namespace is at netns_path (/run/netns/<name>):
 * NET_STATE_DIR/<name>/resolv.conf. The session layer hands it to the driver in the sandbox
 * spec; a driver that gives the sandbox its own root (the jail) bind-mounts it, read-only,
 * on /etc/resolv.conf. Returns 0, or -ENAMETOOLONG. */
static inline int net_resolv_conf_path(const char *netns_path, char *buf, size_t len)
{
	const char *slash = strrchr(netns_path, '/');
	const char *name = slash ? slash + 1 : netns_path;
	size_t need = strlen(NET_STATE_DIR) + 1 + strlen(name) + strlen("/resolv.conf") + 1;
	if (need > len)
		return -36; /* ENAMETOOLONG, without making every includer include errno.h */
	strcpy(buf, NET_STATE_DIR);
	strcat(buf, "/");
	strcat(buf, name);
	strcat(buf, "/resolv.conf");
	return 0;
}

/* What a driver or the guest needs to know about a sandbox's network (addresses are dotted
 * strings). For the jail, eth0 is configured already; a VM configures its own interface on
 * the TAP with guest_addr/prefix via gateway, resolver `dns`. */
struct net_sandbox_info {
	char name[NET_NAME_MAX];
	char netns_path[64];
	char resolv_conf[96];
	bool tap;
	char tap_name[NET_NAME_MAX];
	char guest_addr[16];
	char gateway[16];
	char dns[16];
	unsigned prefix;
};

/* Sets up host-side networking: the lock, leftovers of a crashed run, our nftables table
 * (replacing a stale one), forwarding. Returns 0 also when networking ends up off in auto
 * mode; net_enabled() tells. Called once, on the loop thread, before any sandbox. */
int net_init(struct event_base *base, const struct config *cfg, struct err *err);

bool net_enabled(void);
/* Why sandboxes have no network ("SANDBOX_NETWORK=off", "unavailable: ..."), or NULL when
 * networking is on. */
const char *net_why_off(void);

/* Removes our table (only when no sandbox network remains) and undoes net_init. */
void net_shutdown(void);

/* The server's policy merged with a session's override (see net_policy_merge); *ret is
 * heap-allocated (net_policy_destroy). An empty or NULL override gives a copy of the
 * server's. Loop-safe (pure). */
int net_policy_for_session(const json_t *override, struct net_policy **ret, struct err *err);
void net_policy_destroy(struct net_policy *p);

/* Builds the network of sandbox `id` under `policy` (NULL: the server's), with a TAP when
 * `tap`. *ret_netns_path (caller frees) is the namespace for the driver to use, or NULL when
 * networking is off. On failure nothing is left. Blocking: worker threads. */
int net_sandbox_create(const char *id, const struct net_policy *policy, bool tap,
		       char **ret_netns_path, struct err *err);

/* Starts / stops the sandbox's resolver. Loop thread; unknown ids are ignored. */
void net_sandbox_start(const char *id);
void net_sandbox_stop(const char *id);
/* The API key id whose sandboxes share a part of the DNS filter's budget with it (a pooled
 * sandbox gets one when a session takes it). Loop thread; unknown ids are ignored. */
void net_sandbox_set_owner(const char *id, const char *owner);

/* Removes everything of the sandbox's network. Never fails: what cannot be removed is
 * logged. Call after the sandbox's processes are gone. Blocking: worker threads. */
void net_sandbox_destroy(const char *id);

/* Fills *ret; -ENOENT for an unknown id. Any thread. */
int net_sandbox_info(const char *id, struct net_sandbox_info *ret);

/* Opens the sandbox's TAP for a VMM (qemu `-netdev tap,fd=N`): a new descriptor, O_CLOEXEC,
 * attached with IFF_TAP | IFF_NO_PI | vnet_hdr ? IFF_VNET_HDR : 0. Blocking. */
int net_sandbox_tap_open(const char *id, bool vnet_hdr, struct err *err);

/* Number of sandbox networks in place. */
size_t net_sandbox_count(void);
