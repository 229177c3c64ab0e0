#include "net/internal.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "metrics/metrics.h"
#include "net/nft.h"
#include "net/nl.h"
#include "net/pool.h"
#include "net/resolver.h"
#include "util/cleanup.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/sha256.h"
#include "util/time.h"

struct net_module net_mod = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.nft_lock = PTHREAD_MUTEX_INITIALIZER,
	.root_ns_fd = -1,
	.netns_dir_fd = -1,
	.lock_fd = -1,
};

/* --- small helpers ------------------------------------------------------------------ */

void net_ip_text(uint32_t addr, char out[INET_ADDRSTRLEN])
{
	struct in_addr a = { .s_addr = htonl(addr) };
	inet_ntop(AF_INET, &a, out, INET_ADDRSTRLEN);
}

/* Writes all of text to path, opened with O_WRONLY | flags; `open_fails` says in the message
 * what a failing open means. */
static int write_text(const char *path, int flags, const char *text, const char *open_fails,
		      struct err *err)
{
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC | flags, 0644);
	if (fd < 0)
		return err_sys(err, errno, "%s %s", open_fails, path);
	ssize_t n = write(fd, text, strlen(text));
	if (n != (ssize_t)strlen(text))
		return err_sys(err, n < 0 ? errno : EIO, "cannot write %s", path);
	return 0;
}

/* Writes a value to a file under /proc/sys, as the calling thread's namespace sees it. */
int net_sysctl_write(const char *path, const char *value, struct err *err)
{
	return write_text(path, 0, value, "cannot open", err);
}

int net_sysctl_read(const char *path, char *buf, size_t len)
{
	return fs_read_line(path, buf, len);
}

/* The link and namespace name of a sandbox: "as-" and the id's random part when it fits an
 * interface name, else a digest of the id. */
static void name_for(const char *id, char out[NET_NAME_MAX])
{
	const char *s = strncmp(id, "sb-", 3) == 0 ? id + 3 : id;
	size_t n = strlen(s);
	bool plain = n > 0 && n <= NET_NAME_MAX - 4;
	for (size_t i = 0; plain && i < n; i++)
		plain = (s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-';
	if (plain) {
		snprintf(out, NET_NAME_MAX, "as-%s", s);
		return;
	}
	char hex[2 * SHA256_LEN + 1];
	sha256_hex(id, strlen(id), hex);
	snprintf(out, NET_NAME_MAX, "as-%.12s", hex);
}

/* The address of one slot of the sandbox's block of the pool. */
static uint32_t addr_of(const struct net_sandbox *s, enum net_pool_slot slot)
{
	return net_pool_addr(&net_mod.pool, s->block, slot);
}

/* Called with net_mod.lock held. */
static struct net_sandbox *find_locked(const char *id)
{
	for (struct net_sandbox *s = net_mod.list; s; s = s->next)
		if (strcmp(s->id, id) == 0)
			return s;
	return NULL;
}

bool net_enabled(void)
{
	return net_mod.enabled;
}

size_t net_sandbox_count(void)
{
	pthread_mutex_lock(&net_mod.lock);
	size_t n = net_mod.count;
	pthread_mutex_unlock(&net_mod.lock);
	return n;
}

/* --- our table's structure ---------------------------------------------------------- */

void net_chain_free(struct chain *c)
{
	if (!c)
		return;
	free(c->key);
	free(c);
}

static void chain_freep(struct chain **c)
{
	net_chain_free(*c);
}

/* Names c after its key and creates it in our table for policy p. Called with nft_lock
 * held. */
static int chain_create(struct chain *c, const struct net_policy *p, struct err *err)
{
	net_nft_policy_chain_name(c->key, c->name);
	for (struct chain *o = net_mod.chains; o; o = o->next) {
		if (strcmp(o->name, c->name) == 0) {
			/* Two policies with the same 64-bit digest: told apart by a suffix. */
			size_t n = strlen(c->name);
			snprintf(c->name + n, sizeof(c->name) - n, "_%p", (void *)c);
		}
	}
	json_auto_t *cmds = net_nft_policy_cmds(c->name, p, net_mod.pool.base, net_mod.pool.prefix);
	return net_nft_run(cmds, err);
}

/* Takes a reference on the chain of policy p, creating it when no sandbox uses it yet. */
int net_chain_get(const struct net_policy *p, bool permanent, struct chain **ret, struct err *err)
{
	_cleanup_free_ char *key = net_policy_dest_key(p);
	int r = 0;
	pthread_mutex_lock(&net_mod.nft_lock);
	struct chain *c;
	for (c = net_mod.chains; c; c = c->next)
		if (strcmp(c->key, key) == 0)
			break;
	if (c) {
		c->refs++;
	} else {
		_cleanup_(chain_freep) struct chain *fresh = xcalloc(1, sizeof(*fresh));
		fresh->key = TAKE_PTR(key);
		r = chain_create(fresh, p, err);
		if (r == 0) {
			fresh->refs = 1;
			fresh->permanent = permanent;
			fresh->next = net_mod.chains;
			net_mod.chains = c = TAKE_PTR(fresh);
		}
	}
	pthread_mutex_unlock(&net_mod.nft_lock);
	*ret = c;
	return r;
}

static void chain_put(struct chain *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&net_mod.nft_lock);
	if (--c->refs > 0 || c->permanent) {
		pthread_mutex_unlock(&net_mod.nft_lock);
		return;
	}
	for (struct chain **pp = &net_mod.chains; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	}
	struct err e;
	json_auto_t *cmds = net_nft_policy_delete_cmds(c->name);
	if (net_nft_run(cmds, &e) < 0)
		log_warn("net", "removing policy chain %s: %s", c->name, e.msg);
	pthread_mutex_unlock(&net_mod.nft_lock);
	net_chain_free(c);
}

int net_host_addrs_get(uint32_t **ret, size_t *n, struct err *err)
{
	_cleanup_nl_ struct net_nl nl = { 0 };
	int r = net_nl_open(&nl, err);
	if (r < 0)
		return r;
	return net_nl_addrs4(&nl, NET_NFT_IFPREFIX, ret, n, err);
}

/* Keeps host_addrs in step with the host's addresses (they may change while we run). */
static void host_addrs_refresh(void)
{
	_cleanup_free_ uint32_t *addrs = NULL;
	size_t n = 0;
	struct err e;
	if (net_host_addrs_get(&addrs, &n, &e) < 0) {
		log_warn("net", "%s", e.msg);
		return;
	}
	pthread_mutex_lock(&net_mod.nft_lock);
	if (n == net_mod.n_host &&
	    (n == 0 || memcmp(addrs, net_mod.host_addrs, n * sizeof(*addrs)) == 0)) {
		pthread_mutex_unlock(&net_mod.nft_lock);
		return;
	}
	json_auto_t *cmds = net_nft_host_addrs_cmds(addrs, n);
	if (net_nft_run(cmds, &e) < 0) {
		log_warn("net", "updating the host's addresses: %s", e.msg);
	} else {
		log_info("net", "the host's addresses changed: %zu now blocked for sandboxes", n);
		free(net_mod.host_addrs);
		net_mod.host_addrs = TAKE_PTR(addrs);
		net_mod.n_host = n;
	}
	pthread_mutex_unlock(&net_mod.nft_lock);
}

/* --- one sandbox's network ---------------------------------------------------------- */

/* Brings the calling thread back to the root namespace after a moment in a sandbox's. If it
 * cannot come back it is unusable: we stop rather than run a worker in a sandbox's
 * namespace. */
static void return_to_root_ns(void)
{
	if (setns(net_mod.root_ns_fd, CLONE_NEWNET) < 0) {
		log_fields(LOG_FATAL, "net", NULL,
			   "cannot return to the root network namespace: %s", strerror(errno));
		abort();
	}
}

/* Attaches fd, an open /dev/net/tun, to the sandbox's TAP. Returns ioctl's result. */
static int tap_attach(int fd, int flags)
{
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	ifr.ifr_flags = (short)flags;
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", NET_TAP_NAME);
	return ioctl(fd, TUNSETIFF, &ifr);
}

/* A TAP belongs to the namespace /dev/net/tun was opened in: called inside the sandbox's.
 * Persistent, so that the VMM can attach to it later. */
static int tap_create(struct err *err)
{
	_cleanup_close_ int tun = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
	if (tun < 0 || tap_attach(tun, IFF_TAP | IFF_NO_PI) < 0 || ioctl(tun, TUNSETPERSIST, 1) < 0)
		return err_sys(err, errno, "creating %s", NET_TAP_NAME);
	return 0;
}

/* What is done from inside the new namespace (see inside_new_ns). */
static int configure_new_ns(struct net_sandbox *s, struct net_nl *nsnl, struct err *err)
{
	int r;
	s->ns_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (s->ns_fd < 0)
		return err_sys(err, errno, "opening the new network namespace");
	/* IPv6 off before any link exists, so that links moved in inherit it. */
	if ((r = net_sysctl_write("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1", err)) < 0 ||
	    (r = net_sysctl_write("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1", err)) < 0) {
		/* A kernel without IPv6 has nothing to disable. */
		if (err->errnum != ENOENT)
			return r;
	}
	if (s->tap && (r = net_sysctl_write("/proc/sys/net/ipv4/ip_forward", "1", err)) < 0)
		return r;
	if ((r = net_nl_open(nsnl, err)) < 0)
		return r;
	s->udp_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	s->tcp_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s->udp_fd < 0 || s->tcp_fd < 0)
		return err_sys(err, errno, "resolver sockets");
	return s->tap ? tap_create(err) : 0;
}

/* The steps that need the calling thread inside the new namespace: creating it, its
 * sysctls, and every socket that must live in it (nsnl among them). The thread always comes
 * back to the root namespace. */
static int inside_new_ns(struct net_sandbox *s, struct net_nl *nsnl, struct err *err)
{
	if (unshare(CLONE_NEWNET) < 0)
		return err_sys(err, errno, "creating a network namespace");
	int r = configure_new_ns(s, nsnl, err);
	return_to_root_ns();
	return r;
}

static int bind_resolver(struct net_sandbox *s, uint32_t addr, struct err *err)
{
	struct sockaddr_in sin = { .sin_family = AF_INET,
				   .sin_port = htons(NET_RESOLVER_PORT),
				   .sin_addr.s_addr = htonl(addr) };
	/* No SO_REUSEADDR: nothing in the sandbox can bind the same port beside us. */
	if (bind(s->udp_fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 ||
	    bind(s->tcp_fd, (struct sockaddr *)&sin, sizeof(sin)) < 0 ||
	    listen(s->tcp_fd, TCP_BACKLOG) < 0)
		return err_sys(err, errno, "resolver socket");
	return 0;
}

/* The sandbox's directory in NET_STATE_DIR, with its resolv.conf naming the resolver at dns.
 * First of all: the directory is what says, after a crash, that this network is ours. */
static int make_state_dir(struct net_sandbox *s, uint32_t dns, struct err *err)
{
	if (mkdir(s->dir, 0755) < 0)
		return err_sys(err, errno, "cannot create %s", s->dir);
	s->made_dir = true;
	char ip[INET_ADDRSTRLEN];
	net_ip_text(dns, ip);
	_cleanup_free_ char *path = xasprintf("%s/resolv.conf", s->dir);
	_cleanup_free_ char *text = xasprintf("nameserver %s\n", ip);
	return write_text(path, O_CREAT | O_TRUNC | O_NOFOLLOW, text, "cannot write", err);
}

/* Bind-mounts the namespace (s->ns_fd) on s->netns_path, where drivers find it. */
static int pin_namespace(struct net_sandbox *s, struct err *err)
{
	int fd = open(s->netns_path, O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
	if (fd < 0)
		return err_sys(err, errno, "cannot create %s", s->netns_path);
	close(fd);
	s->made_ns_path = true;
	char src[64];
	snprintf(src, sizeof(src), "/proc/self/fd/%d", s->ns_fd);
	if (mount(src, s->netns_path, "none", MS_BIND, NULL) < 0)
		return err_sys(err, errno, "cannot bind-mount the namespace on %s", s->netns_path);
	return 0;
}

static uint64_t kbit_bytes(unsigned kbit)
{
	return (uint64_t)kbit * 1000 / 8;
}

/* The token bucket of the policy on the link ifindex of nl's namespace: one on each end of
 * the veth pair limits both directions. */
static int limit_bandwidth(struct net_nl *nl, int ifindex, const struct net_policy *p,
			   struct err *err)
{
	uint64_t burst = kbit_bytes(p->bw_burst_kbit);
	/* A bucket smaller than a packet would hold every full-size packet forever. */
	if (burst < 2 * MTU_BYTES)
		burst = 2 * MTU_BYTES;
	return net_nl_qdisc_tbf(nl, ifindex, kbit_bytes(p->bw_rate_kbit), (uint32_t)burst, err);
}

/* The host's end: the veth pair (its peer goes into the namespace), its address, strict
 * reverse-path filtering, the route to a VM's TAP, the bucket toward the sandbox. */
static int host_side(struct net_sandbox *s, struct err *err)
{
	_cleanup_nl_ struct net_nl nl = { 0 };
	int r;
	if ((r = net_nl_open(&nl, err)) < 0 ||
	    (r = net_nl_veth_add(&nl, s->name, NS_LINK, s->ns_fd, err)) < 0)
		return r;
	s->made_link = true;
	int hidx = net_nl_link_index(&nl, s->name, err);
	if (hidx < 0)
		return hidx;
	if ((r = net_nl_addr_add(&nl, hidx, addr_of(s, NET_POOL_HOST), 31, err)) < 0)
		return r;
	/* Strict reverse-path filtering: the sandbox cannot send with another's address. */
	char rp[96];
	snprintf(rp, sizeof(rp), "/proc/sys/net/ipv4/conf/%s/rp_filter", s->name);
	if ((r = net_sysctl_write(rp, "1", err)) < 0)
		return r;
	if (s->tap && (r = net_nl_route_add(&nl, addr_of(s, NET_POOL_INNER), 31,
					    addr_of(s, NET_POOL_NS), hidx, err)) < 0)
		return r;
	if (s->policy.bw_enabled && (r = limit_bandwidth(&nl, hidx, &s->policy, err)) < 0)
		return r;
	return 0;
}

/* The sandbox's end, through nsnl, the socket opened inside its namespace: lo and eth0 up,
 * the resolver's address (on the TAP for a VM, else on lo), the default route to the host,
 * the bucket toward the world. */
static int sandbox_side(struct net_sandbox *s, struct net_nl *nsnl, struct err *err)
{
	uint32_t inner = addr_of(s, NET_POOL_INNER);
	int r;
	if ((r = net_nl_link_up(nsnl, 1 /* lo */, err)) < 0)
		return r;
	int eidx = net_nl_link_index(nsnl, NS_LINK, err);
	if (eidx < 0)
		return eidx;
	if ((r = net_nl_addr_add(nsnl, eidx, addr_of(s, NET_POOL_NS), 31, err)) < 0 ||
	    (r = net_nl_link_up(nsnl, eidx, err)) < 0)
		return r;
	if (s->tap) {
		int tidx = net_nl_link_index(nsnl, NET_TAP_NAME, err);
		if (tidx < 0)
			return tidx;
		if ((r = net_nl_addr_add(nsnl, tidx, inner, 31, err)) < 0 ||
		    (r = net_nl_link_up(nsnl, tidx, err)) < 0)
			return r;
	} else if ((r = net_nl_addr_add(nsnl, 1, inner, 32, err)) < 0) {
		return r;
	}
	if ((r = net_nl_route_add(nsnl, 0, 0, addr_of(s, NET_POOL_HOST), eidx, err)) < 0)
		return r;
	if (s->policy.bw_enabled && (r = limit_bandwidth(nsnl, eidx, &s->policy, err)) < 0)
		return r;
	return 0;
}

/* A sandbox's host link on its way out. It goes with the sandbox's namespace, which the
 * kernel dismantles in the background once our last reference is gone: deleting it ourselves
 * would block for its RCU grace periods (10-30 ms here), one link at a time. Its addresses
 * stay taken until it is gone. */
/* After this long a link still there is deleted by hand: something kept its namespace alive. */
#define DYING_LINK_PATIENCE_MS 10000

/* Gives back the addresses of links that are gone; deletes, by hand, links that outstayed
 * their namespace (all of them when `all`). */
void net_reap_dying(struct net_nl *nl, bool all)
{
	pthread_mutex_lock(&net_mod.lock);
	struct dying_link *list = TAKE_PTR(net_mod.dying);
	pthread_mutex_unlock(&net_mod.lock);
	uint64_t now = time_mono_ms();
	struct err e;
	while (list) {
		struct dying_link *d = list;
		list = d->next;
		int r = net_nl_link_index(nl, d->name, &e);
		if (r >= 0 && (all || now - d->since_ms > DYING_LINK_PATIENCE_MS)) {
			log_warn("net", "interface %s outlived its namespace: deleting it",
				 d->name);
			r = net_nl_link_del(nl, d->name, &e);
			if (r < 0 && r != -ENODEV)
				log_warn("net", "%s", e.msg);
			r = -ENODEV;
		}
		pthread_mutex_lock(&net_mod.lock);
		if (r == -ENODEV) {
			net_pool_release(&net_mod.pool, d->block);
			free(d);
		} else {
			d->next = net_mod.dying;
			net_mod.dying = d;
		}
		pthread_mutex_unlock(&net_mod.lock);
	}
}

int net_netns_unmount(const char *name)
{
	/* Every mount on it, through each mount of the directory: `ip netns add` on the host
	 * binds /run/netns onto itself and makes it shared, which under systemd propagates into
	 * the daemon's namespace over the directory the daemon made shared; a namespace's mount
	 * is then on both, and the lower one, covered, is reached only through the directory's
	 * descriptor taken at start. */
	char paths[2][PATH_MAX];
	snprintf(paths[0], sizeof(paths[0]), "%s/%s", NET_NETNS_DIR, name);
	unsigned n = 1;
	if (net_mod.netns_dir_fd >= 0)
		snprintf(paths[n++], sizeof(paths[1]), "/proc/self/fd/%d/%s", net_mod.netns_dir_fd,
			 name);
	int done = 0, e = 0;
	for (unsigned i = 0; i < n; i++)
		for (int k = 0; k < 8; k++) {
			if (umount2(paths[i], MNT_DETACH) == 0) {
				done++;
				continue;
			}
			if (errno != EINVAL && errno != ENOENT)
				e = errno;
			break;
		}
	if (!done && e) {
		errno = e;
		return -1;
	}
	return 0;
}

/* Removes what exists of s's network; every step tolerates what is already gone. */
static void teardown(struct net_sandbox *s)
{
	struct err e;
	/* The policy first: from here on the sandbox's link leads nowhere. */
	int r = net_nfnl_egress_del(s->name, &e);
	if (r < 0 && r != -ENOENT && r != -ENOTCONN)
		log_warn("net", "%s", e.msg);
	if (s->udp_fd >= 0)
		close(s->udp_fd);
	if (s->tcp_fd >= 0)
		close(s->tcp_fd);
	s->udp_fd = s->tcp_fd = -1;
	if (s->made_ns_path) {
		if (net_netns_unmount(s->name) < 0)
			log_warn("net", "unmounting %s: %s", s->netns_path, strerror(errno));
		if (unlink(s->netns_path) < 0 && errno != ENOENT)
			log_warn("net", "removing %s: %s", s->netns_path, strerror(errno));
	}
	/* Our last reference: the kernel now dismantles the namespace, and with it the veth
	 * pair, the TAP and the route to it. */
	if (s->ns_fd >= 0)
		close(s->ns_fd);
	s->ns_fd = -1;
	if (s->made_dir) {
		_cleanup_free_ char *conf = xasprintf("%s/resolv.conf", s->dir);
		unlink(conf);
		if (rmdir(s->dir) < 0 && errno != ENOENT)
			log_warn("net", "removing %s: %s", s->dir, strerror(errno));
	}
	chain_put(s->chain);
	s->chain = NULL;
	if (!s->have_block)
		return;
	s->have_block = false;
	pthread_mutex_lock(&net_mod.lock);
	if (s->made_link) {
		struct dying_link *d = xcalloc(1, sizeof(*d));
		snprintf(d->name, sizeof(d->name), "%s", s->name);
		d->block = s->block;
		d->since_ms = time_mono_ms();
		d->next = net_mod.dying;
		net_mod.dying = d;
	} else {
		net_pool_release(&net_mod.pool, s->block);
	}
	pthread_mutex_unlock(&net_mod.lock);
}

static void sandbox_free(struct net_sandbox *s)
{
	net_policy_free(&s->policy);
	free(s->id);
	free(s->owner);
	free(s);
}

static void sandbox_freep(struct net_sandbox **s)
{
	if (*s)
		sandbox_free(*s);
}

/* Every part of s's network, in the order that lets teardown() undo what exists of it. */
static int build(struct net_sandbox *s, struct err *err)
{
	uint32_t resolver = addr_of(s, NET_POOL_INNER);
	_cleanup_nl_ struct net_nl nsnl = { 0 };
	int r;
	if ((r = make_state_dir(s, resolver, err)) < 0)
		return r;
	if ((r = inside_new_ns(s, &nsnl, err)) < 0)
		return r;
	if ((r = pin_namespace(s, err)) < 0)
		return r;
	if ((r = host_side(s, err)) < 0)
		return r;
	if ((r = sandbox_side(s, &nsnl, err)) < 0)
		return r;
	if ((r = bind_resolver(s, resolver, err)) < 0)
		return r;
	/* Last: from here on the sandbox's packets reach its policy chain instead of the
	 * table's catch-all drop. */
	return net_nfnl_egress_add(s->name, s->chain->name, err);
}

/* Gives back the addresses of host links that are gone by now (see net_reap_dying). */
static void reap_dying_links(void)
{
	_cleanup_nl_ struct net_nl nl = { 0 };
	if (net_nl_open(&nl, NULL) == 0)
		net_reap_dying(&nl, false);
}

int net_sandbox_create(const char *id, const struct net_policy *policy, bool tap,
		       char **ret_netns_path, struct err *err)
{
	*ret_netns_path = NULL;
	if (!net_mod.enabled)
		return 0;
	_cleanup_(sandbox_freep) struct net_sandbox *s = xcalloc(1, sizeof(*s));
	s->id = xstrdup(id);
	s->tap = tap;
	s->ns_fd = s->udp_fd = s->tcp_fd = -1;
	name_for(id, s->name);
	net_policy_copy(&s->policy, policy ? policy : &net_mod.server);
	int r;

	reap_dying_links();
	pthread_mutex_lock(&net_mod.lock);
	bool dup = find_locked(id) != NULL;
	for (struct net_sandbox *o = net_mod.list; o && !dup; o = o->next)
		dup = strcmp(o->name, s->name) == 0;
	r = dup ? -EEXIST : net_pool_alloc(&net_mod.pool, &s->block);
	pthread_mutex_unlock(&net_mod.lock);
	if (r == -EEXIST)
		return err_set(err, EEXIST, "network `%s` of sandbox %s exists already", s->name,
			       id);
	if (r < 0)
		return err_set(err, EAGAIN,
			       "no free addresses left in SANDBOX_NET_POOL (%u in use)",
			       net_mod.pool.used);
	s->have_block = true;
	snprintf(s->netns_path, sizeof(s->netns_path), "%s/%s", NET_NETNS_DIR, s->name);
	snprintf(s->dir, sizeof(s->dir), "%s/%s", NET_STATE_DIR, s->name);

	host_addrs_refresh();
	if ((r = net_chain_get(&s->policy, false, &s->chain, err)) < 0 || (r = build(s, err)) < 0) {
		err_wrap(err, "sandbox network");
		teardown(s);
		return r;
	}
	metrics_add(metrics_daemon.vm_egress_policy_applied_total, 1,
		    net_policy_dns_mode(&s->policy), net_policy_dest_mode(&s->policy),
		    s->policy.bw_enabled ? "true" : "false");
	*ret_netns_path = xstrdup(s->netns_path);
	pthread_mutex_lock(&net_mod.lock);
	s->next = net_mod.list;
	net_mod.list = TAKE_PTR(s);
	net_mod.count++;
	pthread_mutex_unlock(&net_mod.lock);
	return 0;
}

void net_sandbox_start(const char *id)
{
	if (!net_mod.enabled)
		return;
	pthread_mutex_lock(&net_mod.lock);
	struct net_sandbox *s = find_locked(id);
	if (s && !s->resolver && s->udp_fd >= 0) {
		s->resolver = net_resolver_new(net_mod.base, s->udp_fd, s->tcp_fd, s->name,
					       &s->policy, s->owner);
		s->udp_fd = s->tcp_fd = -1;
	}
	pthread_mutex_unlock(&net_mod.lock);
}

void net_sandbox_set_owner(const char *id, const char *owner)
{
	if (!net_mod.enabled)
		return;
	pthread_mutex_lock(&net_mod.lock);
	struct net_sandbox *s = find_locked(id);
	if (s) {
		free(s->owner);
		s->owner = xstrdup(owner ? owner : "");
		if (s->resolver)
			net_resolver_set_owner(s->resolver, s->owner);
	}
	pthread_mutex_unlock(&net_mod.lock);
}

void net_sandbox_stop(const char *id)
{
	if (!net_mod.enabled)
		return;
	pthread_mutex_lock(&net_mod.lock);
	struct net_sandbox *s = find_locked(id);
	struct net_resolver *r = s ? TAKE_PTR(s->resolver) : NULL;
	pthread_mutex_unlock(&net_mod.lock);
	net_resolver_free(r);
}

/* The last of a sandbox whose resolver was still running when it was destroyed. */
static void free_on_loop(evutil_socket_t fd, short what, void *arg)
{
	struct net_sandbox *s = arg;
	net_resolver_free(s->resolver);
	sandbox_free(s);
}

void net_sandbox_destroy(const char *id)
{
	if (!net_mod.enabled)
		return;
	pthread_mutex_lock(&net_mod.lock);
	struct net_sandbox *s = NULL;
	for (struct net_sandbox **pp = &net_mod.list; *pp; pp = &(*pp)->next) {
		if (strcmp((*pp)->id, id) == 0) {
			s = *pp;
			*pp = s->next;
			net_mod.count--;
			break;
		}
	}
	pthread_mutex_unlock(&net_mod.lock);
	if (!s)
		return;
	teardown(s);
	log_debug("net", "network %s of sandbox %s removed", s->name, id);
	if (s->resolver) {
		/* The resolver belongs to the loop: it goes there, with the policy it reads. */
		log_warn("net", "sandbox %s destroyed with its resolver running", id);
		struct timeval now = { 0 };
		event_base_once(net_mod.base, -1, EV_TIMEOUT, free_on_loop, s, &now);
		return;
	}
	sandbox_free(s);
}

int net_sandbox_info(const char *id, struct net_sandbox_info *ret)
{
	if (!net_mod.enabled)
		return -ENOENT;
	pthread_mutex_lock(&net_mod.lock);
	struct net_sandbox *s = find_locked(id);
	if (!s) {
		pthread_mutex_unlock(&net_mod.lock);
		return -ENOENT;
	}
	struct net_sandbox_info info;
	memset(&info, 0, sizeof(info));
	snprintf(info.name, sizeof(info.name), "%s", s->name);
	snprintf(info.netns_path, sizeof(info.netns_path), "%s", s->netns_path);
	net_resolv_conf_path(s->netns_path, info.resolv_conf, sizeof(info.resolv_conf));
	info.tap = s->tap;
	if (s->tap)
		snprintf(info.tap_name, sizeof(info.tap_name), "%s", NET_TAP_NAME);
	uint32_t inner = addr_of(s, NET_POOL_INNER);
	net_ip_text(addr_of(s, s->tap ? NET_POOL_GUEST : NET_POOL_NS), info.guest_addr);
	net_ip_text(s->tap ? inner : addr_of(s, NET_POOL_HOST), info.gateway);
	net_ip_text(inner, info.dns);
	info.prefix = 31;
	pthread_mutex_unlock(&net_mod.lock);
	*ret = info;
	return 0;
}

int net_sandbox_tap_open(const char *id, bool vnet_hdr, struct err *err)
{
	if (!net_mod.enabled)
		return err_set(err, ENOTCONN, "sandbox networking is off");
	pthread_mutex_lock(&net_mod.lock);
	struct net_sandbox *s = find_locked(id);
	_cleanup_close_ int nsfd =
		s && s->tap && s->ns_fd >= 0 ? fcntl(s->ns_fd, F_DUPFD_CLOEXEC, 0) : -1;
	pthread_mutex_unlock(&net_mod.lock);
	if (nsfd < 0)
		return err_set(err, ENOENT, "sandbox %s has no TAP", id);
	if (setns(nsfd, CLONE_NEWNET) < 0)
		return err_sys(err, errno, "entering the network namespace of sandbox %s", id);
	/* Only the open needs the namespace: the device is looked up in the opener's. */
	_cleanup_close_ int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
	int e = errno;
	return_to_root_ns();
	if (fd < 0)
		return err_sys(err, e, "cannot open /dev/net/tun");
	if (tap_attach(fd, IFF_TAP | IFF_NO_PI | (vnet_hdr ? IFF_VNET_HDR : 0)) < 0)
		return err_sys(err, errno, "attaching to %s of sandbox %s", NET_TAP_NAME, id);
	return TAKE_FD(fd);
}

int net_policy_for_session(const json_t *override, struct net_policy **ret, struct err *err)
{
	_cleanup_free_ struct net_policy *p = xcalloc(1, sizeof(*p));
	/* With networking off there is nothing to merge into; the override is still checked
	 * against the configuration so that a client learns about its mistakes. */
	static const struct net_policy unfiltered;
	const struct net_policy *server = net_mod.enabled ? &net_mod.server : &unfiltered;
	int r = net_policy_merge(server, override, p, err);
	if (r < 0)
		return r;
	*ret = TAKE_PTR(p);
	return 0;
}

void net_policy_destroy(struct net_policy *p)
{
	if (!p)
		return;
	net_policy_free(p);
	free(p);
}
