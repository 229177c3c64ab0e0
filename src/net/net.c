#include "net/net.h"

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
#include "util/log.h"
#include "util/sha256.h"
#include "util/time.h"

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
	struct net_sandbox *next;
};

struct dying_link;

static struct {
	bool enabled;
	struct event_base *base;
	pthread_mutex_t lock; /* the list, the pool */
	struct net_pool pool;
	struct net_policy server;
	struct net_sandbox *list;
	size_t count;
	struct dying_link *dying; /* host links whose namespace is going away */
	int root_ns_fd;
	int lock_fd;
	bool table_made;
	bool set_ip_forward;

	pthread_mutex_t nft_lock; /* chains and host_addrs: the structure of our table */
	struct chain *chains;
	uint32_t *host_addrs;
	size_t n_host;
} N = {
	.lock = PTHREAD_MUTEX_INITIALIZER,
	.nft_lock = PTHREAD_MUTEX_INITIALIZER,
	.root_ns_fd = -1,
	.lock_fd = -1,
};

/* --- small helpers ------------------------------------------------------------------ */

static void ip_text(uint32_t addr, char out[INET_ADDRSTRLEN])
{
	struct in_addr a = { .s_addr = htonl(addr) };
	inet_ntop(AF_INET, &a, out, INET_ADDRSTRLEN);
}

/* Writes a value to a file under /proc/sys, as the calling thread's namespace sees it. */
static int sysctl_write(const char *path, const char *value, struct err *err)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return err_sys(err, errno, "cannot open %s", path);
	ssize_t n = write(fd, value, strlen(value));
	int e = errno;
	close(fd);
	if (n != (ssize_t)strlen(value))
		return err_sys(err, n < 0 ? e : EIO, "cannot write %s", path);
	return 0;
}

static int sysctl_read(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, len - 1);
	close(fd);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
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

/* Called with N.lock held. */
static struct net_sandbox *find_locked(const char *id)
{
	for (struct net_sandbox *s = N.list; s; s = s->next)
		if (strcmp(s->id, id) == 0)
			return s;
	return NULL;
}

bool net_enabled(void)
{
	return N.enabled;
}

size_t net_sandbox_count(void)
{
	pthread_mutex_lock(&N.lock);
	size_t n = N.count;
	pthread_mutex_unlock(&N.lock);
	return n;
}

/* --- our table's structure ---------------------------------------------------------- */

/* Takes a reference on the chain of policy p, creating it when no sandbox uses it yet. */
static int chain_get(const struct net_policy *p, bool permanent, struct chain **ret,
		     struct err *err)
{
	_cleanup_free_ char *key = net_policy_dest_key(p);
	int r = 0;
	pthread_mutex_lock(&N.nft_lock);
	struct chain *c;
	for (c = N.chains; c; c = c->next)
		if (strcmp(c->key, key) == 0)
			break;
	if (c) {
		c->refs++;
		goto out;
	}
	c = xcalloc(1, sizeof(*c));
	net_nft_policy_chain_name(key, c->name);
	for (struct chain *o = N.chains; o; o = o->next) {
		if (strcmp(o->name, c->name) == 0) {
			/* Two policies with the same 64-bit digest: told apart by a suffix. */
			size_t n = strlen(c->name);
			snprintf(c->name + n, sizeof(c->name) - n, "_%p", (void *)c);
		}
	}
	json_t *cmds = net_nft_policy_cmds(c->name, p, N.pool.base, N.pool.prefix);
	r = net_nft_run(cmds, err);
	json_decref(cmds);
	if (r < 0) {
		free(c);
		c = NULL;
		goto out;
	}
	c->key = TAKE_PTR(key);
	c->refs = 1;
	c->permanent = permanent;
	c->next = N.chains;
	N.chains = c;
out:
	pthread_mutex_unlock(&N.nft_lock);
	*ret = c;
	return r;
}

static void chain_put(struct chain *c)
{
	if (!c)
		return;
	pthread_mutex_lock(&N.nft_lock);
	if (--c->refs > 0 || c->permanent) {
		pthread_mutex_unlock(&N.nft_lock);
		return;
	}
	for (struct chain **pp = &N.chains; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	}
	struct err e;
	json_t *cmds = net_nft_policy_delete_cmds(c->name);
	if (net_nft_run(cmds, &e) < 0)
		log_warn("net", "removing policy chain %s: %s", c->name, e.msg);
	json_decref(cmds);
	pthread_mutex_unlock(&N.nft_lock);
	free(c->key);
	free(c);
}

static int host_addrs_get(uint32_t **ret, size_t *n, struct err *err)
{
	struct net_nl nl;
	int r = net_nl_open(&nl, err);
	if (r < 0)
		return r;
	r = net_nl_addrs4(&nl, NET_NFT_IFPREFIX, ret, n, err);
	net_nl_close(&nl);
	return r;
}

/* Keeps host_addrs in step with the host's addresses (they may change while we run). */
static void host_addrs_refresh(void)
{
	uint32_t *addrs = NULL;
	size_t n = 0;
	struct err e;
	if (host_addrs_get(&addrs, &n, &e) < 0) {
		log_warn("net", "%s", e.msg);
		return;
	}
	pthread_mutex_lock(&N.nft_lock);
	if (n == N.n_host && (n == 0 || memcmp(addrs, N.host_addrs, n * sizeof(*addrs)) == 0)) {
		pthread_mutex_unlock(&N.nft_lock);
		free(addrs);
		return;
	}
	json_t *cmds = net_nft_host_addrs_cmds(addrs, n);
	if (net_nft_run(cmds, &e) < 0) {
		log_warn("net", "updating the host's addresses: %s", e.msg);
		free(addrs);
	} else {
		log_info("net", "the host's addresses changed: %zu now blocked for sandboxes", n);
		free(N.host_addrs);
		N.host_addrs = addrs;
		N.n_host = n;
	}
	json_decref(cmds);
	pthread_mutex_unlock(&N.nft_lock);
}

/* --- one sandbox's network ---------------------------------------------------------- */

/* The steps that need the calling thread inside the new namespace: creating it, its
 * sysctls, and every socket that must live in it. The thread always comes back to the root
 * namespace; if it cannot, it is unusable and we stop rather than run a worker in a
 * sandbox's namespace. */
static int inside_new_ns(struct net_sandbox *s, struct net_nl *nsnl, struct err *err)
{
	int r;
	if (unshare(CLONE_NEWNET) < 0)
		return err_sys(err, errno, "creating a network namespace");
	s->ns_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (s->ns_fd < 0) {
		r = err_sys(err, errno, "opening the new network namespace");
		goto back;
	}
	/* IPv6 off before any link exists, so that links moved in inherit it. */
	if ((r = sysctl_write("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1", err)) < 0 ||
	    (r = sysctl_write("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1", err)) < 0) {
		/* A kernel without IPv6 has nothing to disable. */
		if (err->errnum != ENOENT)
			goto back;
	}
	if (s->tap && (r = sysctl_write("/proc/sys/net/ipv4/ip_forward", "1", err)) < 0)
		goto back;
	if ((r = net_nl_open(nsnl, err)) < 0)
		goto back;
	s->udp_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	s->tcp_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s->udp_fd < 0 || s->tcp_fd < 0) {
		r = err_sys(err, errno, "resolver sockets");
		goto back;
	}
	if (s->tap) {
		/* A TAP belongs to the namespace /dev/net/tun was opened in. Persistent, so
		 * that the VMM can attach to it later. */
		_cleanup_close_ int tun = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
		struct ifreq ifr;
		memset(&ifr, 0, sizeof(ifr));
		ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
		snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", NET_TAP_NAME);
		if (tun < 0 || ioctl(tun, TUNSETIFF, &ifr) < 0 ||
		    ioctl(tun, TUNSETPERSIST, 1) < 0) {
			r = err_sys(err, errno, "creating %s", NET_TAP_NAME);
			goto back;
		}
	}
	r = 0;
back:
	if (setns(N.root_ns_fd, CLONE_NEWNET) < 0) {
		log_fields(LOG_FATAL, "net", NULL,
			   "cannot return to the root network namespace: %s", strerror(errno));
		abort();
	}
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

static int write_resolv_conf(struct net_sandbox *s, uint32_t dns, struct err *err)
{
	char ip[INET_ADDRSTRLEN];
	ip_text(dns, ip);
	_cleanup_free_ char *path = xasprintf("%s/resolv.conf", s->dir);
	_cleanup_free_ char *text = xasprintf("nameserver %s\n", ip);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return err_sys(err, errno, "cannot write %s", path);
	ssize_t n = write(fd, text, strlen(text));
	int e = errno;
	close(fd);
	if (n != (ssize_t)strlen(text))
		return err_sys(err, n < 0 ? e : EIO, "cannot write %s", path);
	return 0;
}

static uint64_t kbit_bytes(unsigned kbit)
{
	return (uint64_t)kbit * 1000 / 8;
}

/* A sandbox's host link on its way out. It goes with the sandbox's namespace, which the
 * kernel dismantles in the background once our last reference is gone: deleting it ourselves
 * would block for its RCU grace periods (10-30 ms here), one link at a time. Its addresses
 * stay taken until it is gone. */
struct dying_link {
	char name[NET_NAME_MAX];
	uint32_t block;
	uint64_t since_ms;
	struct dying_link *next;
};

/* After this long a link still there is deleted by hand: something kept its namespace alive. */
#define DYING_LINK_PATIENCE_MS 10000

/* Gives back the addresses of links that are gone; deletes, by hand, links that outstayed
 * their namespace (all of them when `all`). */
static void reap_dying(struct net_nl *nl, bool all)
{
	pthread_mutex_lock(&N.lock);
	struct dying_link *list = TAKE_PTR(N.dying);
	pthread_mutex_unlock(&N.lock);
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
		pthread_mutex_lock(&N.lock);
		if (r == -ENODEV) {
			net_pool_release(&N.pool, d->block);
			free(d);
		} else {
			d->next = N.dying;
			N.dying = d;
		}
		pthread_mutex_unlock(&N.lock);
	}
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
		if (umount2(s->netns_path, MNT_DETACH) < 0 && errno != EINVAL && errno != ENOENT)
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
	pthread_mutex_lock(&N.lock);
	if (s->made_link) {
		struct dying_link *d = xcalloc(1, sizeof(*d));
		snprintf(d->name, sizeof(d->name), "%s", s->name);
		d->block = s->block;
		d->since_ms = time_mono_ms();
		d->next = N.dying;
		N.dying = d;
	} else {
		net_pool_release(&N.pool, s->block);
	}
	pthread_mutex_unlock(&N.lock);
}

static void sandbox_free(struct net_sandbox *s)
{
	net_policy_free(&s->policy);
	free(s->id);
	free(s);
}

static int build(struct net_sandbox *s, struct err *err)
{
	uint32_t host = net_pool_addr(&N.pool, s->block, NET_POOL_HOST);
	uint32_t nsaddr = net_pool_addr(&N.pool, s->block, NET_POOL_NS);
	uint32_t inner = net_pool_addr(&N.pool, s->block, NET_POOL_INNER);
	struct net_nl nl = { 0 }, nsnl = { 0 };
	int r;

	/* The directory first: it is what says, after a crash, that this network is ours. */
	if (mkdir(s->dir, 0755) < 0)
		return err_sys(err, errno, "cannot create %s", s->dir);
	s->made_dir = true;
	if ((r = write_resolv_conf(s, inner, err)) < 0)
		return r;

	if ((r = inside_new_ns(s, &nsnl, err)) < 0)
		goto out;
	int fd = open(s->netns_path, O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
	if (fd < 0) {
		r = err_sys(err, errno, "cannot create %s", s->netns_path);
		goto out;
	}
	close(fd);
	s->made_ns_path = true;
	char src[64];
	snprintf(src, sizeof(src), "/proc/self/fd/%d", s->ns_fd);
	if (mount(src, s->netns_path, "none", MS_BIND, NULL) < 0) {
		r = err_sys(err, errno, "cannot bind-mount the namespace on %s", s->netns_path);
		goto out;
	}

	/* The host's side. */
	if ((r = net_nl_open(&nl, err)) < 0 ||
	    (r = net_nl_veth_add(&nl, s->name, NS_LINK, s->ns_fd, err)) < 0)
		goto out;
	s->made_link = true;
	int hidx = net_nl_link_index(&nl, s->name, err);
	if (hidx < 0) {
		r = hidx;
		goto out;
	}
	if ((r = net_nl_addr_add(&nl, hidx, host, 31, err)) < 0)
		goto out;
	/* Strict reverse-path filtering: the sandbox cannot send with another's address. */
	char rp[96];
	snprintf(rp, sizeof(rp), "/proc/sys/net/ipv4/conf/%s/rp_filter", s->name);
	if ((r = sysctl_write(rp, "1", err)) < 0)
		goto out;
	if (s->tap && (r = net_nl_route_add(&nl, inner, 31, nsaddr, hidx, err)) < 0)
		goto out;
	if (s->policy.bw_enabled) {
		uint64_t burst = kbit_bytes(s->policy.bw_burst_kbit);
		/* A bucket smaller than a packet would hold every full-size packet forever. */
		if (burst < 2 * MTU_BYTES)
			burst = 2 * MTU_BYTES;
		if ((r = net_nl_qdisc_tbf(&nl, hidx, kbit_bytes(s->policy.bw_rate_kbit),
					  (uint32_t)burst, err)) < 0)
			goto out;
	}

	/* The sandbox's side, through the socket opened inside its namespace. */
	if ((r = net_nl_link_up(&nsnl, 1 /* lo */, err)) < 0)
		goto out;
	int eidx = net_nl_link_index(&nsnl, NS_LINK, err);
	if (eidx < 0) {
		r = eidx;
		goto out;
	}
	if ((r = net_nl_addr_add(&nsnl, eidx, nsaddr, 31, err)) < 0 ||
	    (r = net_nl_link_up(&nsnl, eidx, err)) < 0)
		goto out;
	if (s->tap) {
		int tidx = net_nl_link_index(&nsnl, NET_TAP_NAME, err);
		if (tidx < 0) {
			r = tidx;
			goto out;
		}
		if ((r = net_nl_addr_add(&nsnl, tidx, inner, 31, err)) < 0 ||
		    (r = net_nl_link_up(&nsnl, tidx, err)) < 0)
			goto out;
	} else if ((r = net_nl_addr_add(&nsnl, 1, inner, 32, err)) < 0) {
		goto out;
	}
	if ((r = net_nl_route_add(&nsnl, 0, 0, host, eidx, err)) < 0)
		goto out;
	if (s->policy.bw_enabled) {
		uint64_t burst = kbit_bytes(s->policy.bw_burst_kbit);
		if (burst < 2 * MTU_BYTES)
			burst = 2 * MTU_BYTES;
		if ((r = net_nl_qdisc_tbf(&nsnl, eidx, kbit_bytes(s->policy.bw_rate_kbit),
					  (uint32_t)burst, err)) < 0)
			goto out;
	}
	if ((r = bind_resolver(s, inner, err)) < 0)
		goto out;

	/* Last: from here on the sandbox's packets reach its policy chain instead of the
	 * table's catch-all drop. */
	r = net_nfnl_egress_add(s->name, s->chain->name, err);
out:
	net_nl_close(&nl);
	net_nl_close(&nsnl);
	return r;
}

int net_sandbox_create(const char *id, const struct net_policy *policy, bool tap,
		       char **ret_netns_path, struct err *err)
{
	*ret_netns_path = NULL;
	if (!N.enabled)
		return 0;
	struct net_sandbox *s = xcalloc(1, sizeof(*s));
	s->id = xstrdup(id);
	s->tap = tap;
	s->ns_fd = s->udp_fd = s->tcp_fd = -1;
	name_for(id, s->name);
	net_policy_copy(&s->policy, policy ? policy : &N.server);
	int r;

	struct net_nl nl;
	if (net_nl_open(&nl, err) == 0) {
		reap_dying(&nl, false);
		net_nl_close(&nl);
	}
	pthread_mutex_lock(&N.lock);
	bool dup = find_locked(id) != NULL;
	for (struct net_sandbox *o = N.list; o && !dup; o = o->next)
		dup = strcmp(o->name, s->name) == 0;
	r = dup ? -EEXIST : net_pool_alloc(&N.pool, &s->block);
	pthread_mutex_unlock(&N.lock);
	if (r == -EEXIST) {
		err_set(err, EEXIST, "network `%s` of sandbox %s exists already", s->name, id);
		sandbox_free(s);
		return -EEXIST;
	}
	if (r < 0) {
		err_set(err, EAGAIN, "no free addresses left in SANDBOX_NET_POOL (%u in use)",
			N.pool.used);
		sandbox_free(s);
		return -EAGAIN;
	}
	s->have_block = true;
	snprintf(s->netns_path, sizeof(s->netns_path), "%s/%s", NET_NETNS_DIR, s->name);
	snprintf(s->dir, sizeof(s->dir), "%s/%s", NET_STATE_DIR, s->name);

	host_addrs_refresh();
	if ((r = chain_get(&s->policy, false, &s->chain, err)) < 0 || (r = build(s, err)) < 0) {
		err_wrap(err, "sandbox network");
		teardown(s);
		sandbox_free(s);
		return r;
	}
	metrics_add(M.vm_egress_policy_applied_total, 1, net_policy_dns_mode(&s->policy),
		    net_policy_dest_mode(&s->policy), s->policy.bw_enabled ? "true" : "false");
	*ret_netns_path = xstrdup(s->netns_path);
	pthread_mutex_lock(&N.lock);
	s->next = N.list;
	N.list = s;
	N.count++;
	pthread_mutex_unlock(&N.lock);
	return 0;
}

void net_sandbox_start(const char *id)
{
	if (!N.enabled)
		return;
	pthread_mutex_lock(&N.lock);
	struct net_sandbox *s = find_locked(id);
	if (s && !s->resolver && s->udp_fd >= 0) {
		s->resolver = net_resolver_new(N.base, s->udp_fd, s->tcp_fd, s->name, &s->policy);
		s->udp_fd = s->tcp_fd = -1;
	}
	pthread_mutex_unlock(&N.lock);
}

void net_sandbox_stop(const char *id)
{
	if (!N.enabled)
		return;
	pthread_mutex_lock(&N.lock);
	struct net_sandbox *s = find_locked(id);
	struct net_resolver *r = s ? TAKE_PTR(s->resolver) : NULL;
	pthread_mutex_unlock(&N.lock);
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
	if (!N.enabled)
		return;
	pthread_mutex_lock(&N.lock);
	struct net_sandbox *s = NULL;
	for (struct net_sandbox **pp = &N.list; *pp; pp = &(*pp)->next) {
		if (strcmp((*pp)->id, id) == 0) {
			s = *pp;
			*pp = s->next;
			N.count--;
			break;
		}
	}
	pthread_mutex_unlock(&N.lock);
	if (!s)
		return;
	teardown(s);
	log_debug("net", "network %s of sandbox %s removed", s->name, id);
	if (s->resolver) {
		/* The resolver belongs to the loop: it goes there, with the policy it reads. */
		log_warn("net", "sandbox %s destroyed with its resolver running", id);
		struct timeval now = { 0 };
		event_base_once(N.base, -1, EV_TIMEOUT, free_on_loop, s, &now);
		return;
	}
	sandbox_free(s);
}

int net_sandbox_info(const char *id, struct net_sandbox_info *ret)
{
	if (!N.enabled)
		return -ENOENT;
	pthread_mutex_lock(&N.lock);
	struct net_sandbox *s = find_locked(id);
	if (!s) {
		pthread_mutex_unlock(&N.lock);
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
	uint32_t inner = net_pool_addr(&N.pool, s->block, NET_POOL_INNER);
	ip_text(s->tap ? net_pool_addr(&N.pool, s->block, NET_POOL_GUEST)
		       : net_pool_addr(&N.pool, s->block, NET_POOL_NS),
		info.guest_addr);
	ip_text(s->tap ? inner : net_pool_addr(&N.pool, s->block, NET_POOL_HOST), info.gateway);
	ip_text(inner, info.dns);
	info.prefix = 31;
	pthread_mutex_unlock(&N.lock);
	*ret = info;
	return 0;
}

int net_sandbox_tap_open(const char *id, bool vnet_hdr, struct err *err)
{
	if (!N.enabled)
		return err_set(err, ENOTCONN, "sandbox networking is off");
	pthread_mutex_lock(&N.lock);
	struct net_sandbox *s = find_locked(id);
	int nsfd = s && s->tap && s->ns_fd >= 0 ? fcntl(s->ns_fd, F_DUPFD_CLOEXEC, 0) : -1;
	pthread_mutex_unlock(&N.lock);
	if (nsfd < 0)
		return err_set(err, ENOENT, "sandbox %s has no TAP", id);
	if (setns(nsfd, CLONE_NEWNET) < 0) {
		int e = errno;
		close(nsfd);
		return err_sys(err, e, "entering the network namespace of sandbox %s", id);
	}
	/* Only the open needs the namespace: the device is looked up in the opener's. */
	int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
	int e = errno;
	close(nsfd);
	if (setns(N.root_ns_fd, CLONE_NEWNET) < 0) {
		log_fields(LOG_FATAL, "net", NULL,
			   "cannot return to the root network namespace: %s", strerror(errno));
		abort();
	}
	if (fd < 0)
		return err_sys(err, e, "cannot open /dev/net/tun");
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	ifr.ifr_flags = IFF_TAP | IFF_NO_PI | (vnet_hdr ? IFF_VNET_HDR : 0);
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", NET_TAP_NAME);
	if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
		e = errno;
		close(fd);
		return err_sys(err, e, "attaching to %s of sandbox %s", NET_TAP_NAME, id);
	}
	return fd;
}

/* --- start and stop ----------------------------------------------------------------- */

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
	struct net_nl nl;
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
		umount2(ns, MNT_DETACH);
		unlink(ns);
		_cleanup_free_ char *dir = xasprintf("%s/%s", NET_STATE_DIR, de->d_name);
		_cleanup_free_ char *conf = xasprintf("%s/resolv.conf", dir);
		unlink(conf);
		if (rmdir(dir) < 0)
			log_warn("net", "removing %s: %s", dir, strerror(errno));
	}
	if (have_nl)
		net_nl_close(&nl);
}

static int take_lock(struct err *err)
{
	if (mkdir(NET_STATE_DIR, 0755) < 0 && errno != EEXIST)
		return err_sys(err, errno, "cannot create %s", NET_STATE_DIR);
	N.lock_fd = open(LOCK_FILE, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (N.lock_fd < 0)
		return err_sys(err, errno, "cannot open %s", LOCK_FILE);
	if (flock(N.lock_fd, LOCK_EX | LOCK_NB) < 0) {
		int e = errno;
		close(N.lock_fd);
		N.lock_fd = -1;
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
	if (sysctl_read("/proc/sys/net/ipv4/ip_forward", v, sizeof(v)) == 0 && strcmp(v, "1") == 0)
		return 0;
	int r = sysctl_write("/proc/sys/net/ipv4/ip_forward", "1", err);
	if (r < 0)
		return r;
	N.set_ip_forward = true;
	log_info("net", "enabled IPv4 forwarding (net.ipv4.ip_forward=1) for sandbox traffic; "
			"restored at exit");
	return 0;
}

/* Each sandbox holds its resolver's two sockets: the default soft limit of 1024 descriptors
 * would cap the daemon at a few hundred sandboxes. */
static void raise_nofile(void)
{
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rlim_t old = rl.rlim_cur;
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
			log_debug("net", "descriptor limit raised from %llu to %llu",
				  (unsigned long long)old, (unsigned long long)rl.rlim_max);
	}
}

/* Refuses a pool that overlaps one of the host's addresses: its traffic would be ours. */
static int check_pool(struct err *err)
{
	uint32_t mask = 0xffffffffu << (32 - N.pool.prefix);
	for (size_t i = 0; i < N.n_host; i++) {
		if ((N.host_addrs[i] & mask) == N.pool.base) {
			char ip[INET_ADDRSTRLEN];
			ip_text(N.host_addrs[i], ip);
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
	if ((r = net_pool_init(&N.pool, pool, err)) < 0 ||
	    (r = net_policy_from_config(cfg, &N.server, err)) < 0 ||
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
	N.root_ns_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (N.root_ns_fd < 0)
		return err_sys(err, errno, "cannot open the root network namespace");
	if ((r = netns_dir_setup(err)) < 0)
		return r;
	cleanup_stale();
	if ((r = host_addrs_get(&N.host_addrs, &N.n_host, err)) < 0 || (r = check_pool(err)) < 0)
		return r;
	json_t *cmds = net_nft_table_cmds(N.pool.base, N.pool.prefix, N.host_addrs, N.n_host);
	r = net_nft_run(cmds, err);
	json_decref(cmds);
	if (r < 0)
		return err_wrap(err, "creating nftables table inet %s", NET_NFT_TABLE);
	N.table_made = true;
	struct chain *c;
	if ((r = chain_get(&N.server, true, &c, err)) < 0)
		return err_wrap(err, "creating the server's policy chain");
	if ((r = net_nfnl_open(err)) < 0 || (r = forwarding_on(err)) < 0)
		return r;
	raise_nofile();
	return 0;
}

/* Waits a little for links whose namespaces are going away, then deletes what is left. */
static void drain_dying(void)
{
	struct net_nl nl;
	struct err e;
	if (net_nl_open(&nl, &e) < 0) {
		log_warn("net", "%s", e.msg);
		return;
	}
	for (int i = 0; i < 60 && N.dying; i++) {
		reap_dying(&nl, false);
		if (N.dying)
			usleep(50 * 1000);
	}
	reap_dying(&nl, true);
	net_nl_close(&nl);
}

/* Undoes what setup() did, whatever point it reached. */
static void undo(void)
{
	struct err e;
	drain_dying();
	bool table_gone = false;
	if (N.count == 0 && N.table_made) {
		json_t *cmds = net_nft_table_delete_cmds();
		if (net_nft_run(cmds, &e) < 0)
			log_warn("net", "removing nftables table inet %s: %s", NET_NFT_TABLE,
				 e.msg);
		else
			table_gone = true;
		json_decref(cmds);
	} else if (N.count) {
		log_warn("net", "%zu sandbox networks remain: nftables table inet %s kept", N.count,
			 NET_NFT_TABLE);
	}
	if (N.set_ip_forward && table_gone) {
		if (sysctl_write("/proc/sys/net/ipv4/ip_forward", "0", &e) < 0)
			log_warn("net", "%s", e.msg);
		else
			log_info("net", "IPv4 forwarding restored to off");
	}
	N.set_ip_forward = false;
	N.table_made = false;
	while (N.chains) {
		struct chain *c = N.chains;
		N.chains = c->next;
		free(c->key);
		free(c);
	}
	net_nfnl_close();
	net_resolver_clear_upstreams();
	free(N.host_addrs);
	N.host_addrs = NULL;
	N.n_host = 0;
	net_policy_free(&N.server);
	net_pool_free(&N.pool);
	if (N.root_ns_fd >= 0)
		close(N.root_ns_fd);
	N.root_ns_fd = -1;
	if (N.lock_fd >= 0)
		close(N.lock_fd);
	N.lock_fd = -1;
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
	N.base = base;
	if (mode == NET_MODE_OFF) {
		log_info("net", "sandbox networking is off (SANDBOX_NETWORK=off): sandboxes have "
				"no network");
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
		return 0;
	}
	N.enabled = true;
	char ip[INET_ADDRSTRLEN];
	ip_text(N.pool.base, ip);
	log_info("net",
		 "sandbox networking on: pool %s/%u (%u sandboxes), dns %s, destinations %s, "
		 "bandwidth %s",
		 ip, N.pool.prefix, N.pool.nblocks, net_policy_dns_mode(&N.server),
		 net_policy_dest_mode(&N.server), N.server.bw_enabled ? "limited" : "unlimited");
	return 0;
}

void net_shutdown(void)
{
	if (!N.enabled)
		return;
	N.enabled = false;
	undo();
}

int net_policy_for_session(const json_t *override, struct net_policy **ret, struct err *err)
{
	struct net_policy *p = xcalloc(1, sizeof(*p));
	/* With networking off there is nothing to merge into; the override is still checked
	 * against the configuration so that a client learns about its mistakes. */
	static const struct net_policy unfiltered;
	const struct net_policy *server = N.enabled ? &N.server : &unfiltered;
	int r = net_policy_merge(server, override, p, err);
	if (r < 0) {
		free(p);
		return r;
	}
	*ret = p;
	return 0;
}

void net_policy_destroy(struct net_policy *p)
{
	if (!p)
		return;
	net_policy_free(p);
	free(p);
}
