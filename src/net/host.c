/* net/host: sandbox networking on the host: the lock that makes one daemon its manager,
 * our nftables table and the server's policy chain, IPv4 forwarding, what a crashed daemon
 * left; set up at start and undone at exit. */
#include "net/internal.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "net/nft.h"
#include "net/resolver.h"
#include "util/cleanup.h"
#include "util/log.h"

/* Makes /run/netns a shared mount, as `ip netns` does, so that unmounting a namespace here
 * also unmounts the copies other mount namespaces made of it and the namespace can go. */
static int netns_dir_setup(struct err *err)
{
	if (mkdir(NET_NETNS_DIR, 0755) < 0 && errno != EEXIST)
		return err_sys(err, errno, "cannot create %s", NET_NETNS_DIR);
	if (mount("", NET_NETNS_DIR, "none", MS_SHARED | MS_REC, NULL) == 0)
		return 0;
	if (errno != EINVAL)
		return err_sys(err, errno, "cannot make %s a shared mount", NET_NETNS_DIR);
	/* Not a mount point yet. */
	if (mount(NET_NETNS_DIR, NET_NETNS_DIR, "none", MS_BIND | MS_REC, NULL) < 0 ||
	    mount("", NET_NETNS_DIR, "none", MS_SHARED | MS_REC, NULL) < 0)
		return err_sys(err, errno, "cannot make %s a shared mount", NET_NETNS_DIR);
	return 0;
}

/* Removes the networks a previous run left: each has its directory in NET_STATE_DIR. */
static void cleanup_stale(void)
{
	_cleanup_closedir_ DIR *d = opendir(NET_STATE_DIR);
	if (!d)
		return;
	struct dirent *de;
	_cleanup_nl_ struct net_nl nl = { 0 };
	struct err e;
	bool have_nl = net_nl_open(&nl, &e) == 0;
	while ((de = readdir(d))) {
		if (strncmp(de->d_name, NET_NFT_IFPREFIX, strlen(NET_NFT_IFPREFIX)) != 0 ||
		    strlen(de->d_name) >= NET_NAME_MAX || de->d_type != DT_DIR)
			continue;
		log_info("net", "removing network %s left by a previous run", de->d_name);
		if (have_nl && net_nl_link_del(&nl, de->d_name, &e) < 0 && e.errnum != ENODEV)
			log_warn("net", "%s", e.msg);
		_cleanup_free_ char *ns = xasprintf("%s/%s", NET_NETNS_DIR, de->d_name);
		net_netns_unmount(de->d_name);
		if (unlink(ns) < 0 && errno != ENOENT)
			log_warn("net", "removing %s: %s", ns, strerror(errno));
		_cleanup_free_ char *dir = xasprintf("%s/%s", NET_STATE_DIR, de->d_name);
		_cleanup_free_ char *conf = xasprintf("%s/resolv.conf", dir);
		unlink(conf);
		if (rmdir(dir) < 0)
			log_warn("net", "removing %s: %s", dir, strerror(errno));
	}
}

static int take_lock(struct err *err)
{
	if (mkdir(NET_STATE_DIR, 0755) < 0 && errno != EEXIST)
		return err_sys(err, errno, "cannot create %s", NET_STATE_DIR);
	net_mod.lock_fd = open(LOCK_FILE, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (net_mod.lock_fd < 0)
		return err_sys(err, errno, "cannot open %s", LOCK_FILE);
	if (flock(net_mod.lock_fd, LOCK_EX | LOCK_NB) < 0) {
		int e = errno;
		close(net_mod.lock_fd);
		net_mod.lock_fd = -1;
		if (e == EWOULDBLOCK)
			return err_set(err, EBUSY,
				       "another sandboxd manages sandbox networking on this host "
				       "(%s is locked)",
				       LOCK_FILE);
		return err_sys(err, e, "cannot lock %s", LOCK_FILE);
	}
	return 0;
}

static int forwarding_on(struct err *err)
{
	char v[16];
	if (net_sysctl_read("/proc/sys/net/ipv4/ip_forward", v, sizeof(v)) == 0 &&
	    strcmp(v, "1") == 0)
		return 0;
	int r = net_sysctl_write("/proc/sys/net/ipv4/ip_forward", "1", err);
	if (r < 0)
		return r;
	net_mod.set_ip_forward = true;
	log_info("net", "enabled IPv4 forwarding (net.ipv4.ip_forward=1) for sandbox traffic; "
			"restored at exit");
	return 0;
}

/* Refuses a pool that overlaps one of the host's addresses: its traffic would be ours. */
static int check_pool(struct err *err)
{
	uint32_t mask = 0xffffffffu << (32 - net_mod.pool.prefix);
	for (size_t i = 0; i < net_mod.n_host; i++) {
		if ((net_mod.host_addrs[i] & mask) == net_mod.pool.base) {
			char ip[INET_ADDRSTRLEN];
			net_ip_text(net_mod.host_addrs[i], ip);
			return err_set(err, EADDRINUSE,
				       "SANDBOX_NET_POOL overlaps the host's address %s", ip);
		}
	}
	return 0;
}

/* Reads the settings; a mistake in them is the operator's to fix, whatever the mode. */
static int configure(const struct config *cfg, struct err *err)
{
	int r;
	net_nft_set_bin(cfg->nft_bin);
	const char *pool = cfg->net_pool && *cfg->net_pool ? cfg->net_pool : DEFAULT_POOL;
	if ((r = net_pool_init(&net_mod.pool, pool, err)) < 0 ||
	    (r = net_policy_from_config(cfg, &net_mod.server, err)) < 0 ||
	    (r = net_resolver_set_upstreams(cfg->dns_upstream, err)) < 0)
		return r;
	return 0;
}

/* What the host must allow: in auto mode, failing here turns networking off. */
static int setup(struct err *err)
{
	int r;
	if (geteuid() != 0)
		return err_set(err, EPERM, "sandbox networking needs root");
	if ((r = net_nft_find(err)) < 0 || (r = take_lock(err)) < 0)
		return r;
	net_mod.root_ns_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (net_mod.root_ns_fd < 0)
		return err_sys(err, errno, "cannot open the root network namespace");
	if ((r = netns_dir_setup(err)) < 0)
		return r;
	net_mod.netns_dir_fd = open(NET_NETNS_DIR, O_PATH | O_DIRECTORY | O_CLOEXEC);
	cleanup_stale();
	if ((r = net_host_addrs_get(&net_mod.host_addrs, &net_mod.n_host, err)) < 0 ||
	    (r = check_pool(err)) < 0)
		return r;
	json_auto_t *cmds = net_nft_table_cmds(net_mod.pool.base, net_mod.pool.prefix,
					       net_mod.host_addrs, net_mod.n_host);
	if ((r = net_nft_run(cmds, err)) < 0)
		return err_wrap(err, "creating nftables table inet %s", NET_NFT_TABLE);
	net_mod.table_made = true;
	struct chain *c;
	if ((r = net_chain_get(&net_mod.server, true, &c, err)) < 0)
		return err_wrap(err, "creating the server's policy chain");
	if ((r = net_nfnl_open(err)) < 0 || (r = forwarding_on(err)) < 0)
		return r;
	return 0;
}

/* Waits a little for links whose namespaces are going away, then deletes what is left. */
static void drain_dying(void)
{
	_cleanup_nl_ struct net_nl nl = { 0 };
	struct err e;
	if (net_nl_open(&nl, &e) < 0) {
		log_warn("net", "%s", e.msg);
		return;
	}
	for (int i = 0; i < 60 && net_mod.dying; i++) {
		net_reap_dying(&nl, false);
		if (net_mod.dying)
			usleep(50 * 1000);
	}
	net_reap_dying(&nl, true);
}

/* Undoes what setup() did, whatever point it reached. */
static void undo(void)
{
	struct err e;
	drain_dying();
	bool table_gone = false;
	if (net_mod.count == 0 && net_mod.table_made) {
		json_auto_t *cmds = net_nft_table_delete_cmds();
		if (net_nft_run(cmds, &e) < 0)
			log_warn("net", "removing nftables table inet %s: %s", NET_NFT_TABLE,
				 e.msg);
		else
			table_gone = true;
	} else if (net_mod.count) {
		log_warn("net", "%zu sandbox networks remain: nftables table inet %s kept",
			 net_mod.count, NET_NFT_TABLE);
	}
	if (net_mod.set_ip_forward && table_gone) {
		if (net_sysctl_write("/proc/sys/net/ipv4/ip_forward", "0", &e) < 0)
			log_warn("net", "%s", e.msg);
		else
			log_info("net", "IPv4 forwarding restored to off");
	}
	net_mod.set_ip_forward = false;
	net_mod.table_made = false;
	while (net_mod.chains) {
		struct chain *c = net_mod.chains;
		net_mod.chains = c->next;
		net_chain_free(c);
	}
	net_nfnl_close();
	net_resolver_clear_upstreams();
	free(net_mod.host_addrs);
	net_mod.host_addrs = NULL;
	net_mod.n_host = 0;
	net_policy_free(&net_mod.server);
	net_pool_free(&net_mod.pool);
	if (net_mod.root_ns_fd >= 0)
		close(net_mod.root_ns_fd);
	net_mod.root_ns_fd = -1;
	if (net_mod.netns_dir_fd >= 0)
		close(net_mod.netns_dir_fd);
	net_mod.netns_dir_fd = -1;
	if (net_mod.lock_fd >= 0)
		close(net_mod.lock_fd);
	net_mod.lock_fd = -1;
}

int net_init(struct event_base *base, const struct config *cfg, struct err *err)
{
	const char *m = cfg->network;
	enum net_mode mode = NET_MODE_AUTO;
	if (m && *m && strcmp(m, "auto") != 0) {
		if (strcmp(m, "on") == 0)
			mode = NET_MODE_ON;
		else if (strcmp(m, "off") == 0)
			mode = NET_MODE_OFF;
		else
			return err_set(err, EINVAL,
				       "SANDBOX_NETWORK `%s`: expected auto, on or off", m);
	}
	net_mod.base = base;
	if (mode == NET_MODE_OFF) {
		log_info("net", "sandbox networking is off (SANDBOX_NETWORK=off): sandboxes have "
				"no network");
		snprintf(net_mod.why_off, sizeof(net_mod.why_off), "SANDBOX_NETWORK=off");
		return 0;
	}
	int r = configure(cfg, err);
	if (r < 0) {
		undo();
		return r;
	}
	struct err e = { 0 };
	r = setup(&e);
	if (r < 0) {
		undo();
		if (mode == NET_MODE_ON)
			return err_copy(err, &e);
		log_error("net", "sandbox networking is unavailable, sandboxes have no network: %s",
			  e.msg);
		snprintf(net_mod.why_off, sizeof(net_mod.why_off), "unavailable: %.200s", e.msg);
		return 0;
	}
	net_mod.enabled = true;
	char ip[INET_ADDRSTRLEN];
	net_ip_text(net_mod.pool.base, ip);
	log_info("net",
		 "sandbox networking on: pool %s/%u (%u sandboxes), dns %s, destinations %s, "
		 "bandwidth %s",
		 ip, net_mod.pool.prefix, net_mod.pool.nblocks,
		 net_policy_dns_mode(&net_mod.server), net_policy_dest_mode(&net_mod.server),
		 net_mod.server.bw_enabled ? "limited" : "unlimited");
	return 0;
}

const char *net_why_off(void)
{
	return net_mod.enabled ? NULL : net_mod.why_off[0] ? net_mod.why_off : "not started";
}

void net_shutdown(void)
{
	if (!net_mod.enabled)
		return;
	net_mod.enabled = false;
	undo();
}
