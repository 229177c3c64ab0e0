#include "net/nft.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <libmnl/libmnl.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/sha256.h"

extern char **environ;

/* What nft may write on stderr that we keep for the message. */
#define NFT_STDERR_MAX 2048
#define NFT_TIMEOUT_MS 10000

/* Ranges a sandbox does not reach unless the server's allow list names them. */
static const struct {
	const char *addr;
	unsigned len;
} default_blocked[] = {
	{ "0.0.0.0", 8 },      /* "this network" */
	{ "10.0.0.0", 8 },     /* private */
	{ "100.64.0.0", 10 },  /* carrier-grade NAT */
	{ "127.0.0.0", 8 },    /* loopback */
	{ "169.254.0.0", 16 }, /* link-local, cloud metadata */
	{ "172.16.0.0", 12 },  /* private */
	{ "192.168.0.0", 16 }, /* private */
	{ "224.0.0.0", 4 },    /* multicast */
	{ "240.0.0.0", 4 },    /* reserved and limited broadcast */
};

static char nft_path[256];

static bool executable(const char *p)
{
	struct stat st;
	return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, X_OK) == 0;
}

static char *nft_configured;

void net_nft_set_bin(const char *path)
{
	free(nft_configured);
	nft_configured = path && *path ? xstrdup(path) : NULL;
}

int net_nft_find(struct err *err)
{
	if (nft_configured) {
		if (!executable(nft_configured))
			return err_set(err, ENOENT, "SANDBOX_NFT `%s` is not an executable",
				       nft_configured);
		snprintf(nft_path, sizeof(nft_path), "%s", nft_configured);
		return 0;
	}
	const char *path = getenv("PATH");
	_cleanup_free_ char *dirs = xasprintf("%s:/usr/sbin:/sbin", path ? path : "");
	char *save = NULL;
	for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		char cand[256];
		if (snprintf(cand, sizeof(cand), "%s/nft", d) >= (int)sizeof(cand))
			continue;
		if (executable(cand)) {
			snprintf(nft_path, sizeof(nft_path), "%s", cand);
			return 0;
		}
	}
	return err_set(err, ENOENT, "the nft program (package nftables) was not found");
}

/* Reads what is left on fd into buf (bounded), waiting at most until deadline. */
static size_t drain(int fd, char *buf, size_t cap, const struct timespec *deadline)
{
	size_t n = 0;
	for (;;) {
		struct timespec now;
		clock_gettime(CLOCK_MONOTONIC, &now);
		long left = (deadline->tv_sec - now.tv_sec) * 1000 +
			    (deadline->tv_nsec - now.tv_nsec) / 1000000;
		if (left <= 0)
			break;
		struct pollfd pfd = { .fd = fd, .events = POLLIN };
		int r = poll(&pfd, 1, (int)left);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		char tmp[512];
		ssize_t k = read(fd, tmp, sizeof(tmp));
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		size_t take = (size_t)k < cap - 1 - n ? (size_t)k : cap - 1 - n;
		memcpy(buf + n, tmp, take);
		n += take;
	}
	buf[n] = '\0';
	return n;
}

/* Writes all of buf to fd. */
static int write_all(int fd, const char *buf, size_t len)
{
	while (len) {
		ssize_t k = write(fd, buf, len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		buf += k;
		len -= (size_t)k;
	}
	return 0;
}

/* Starts `nft -j -f -` with stdin from in_fd, stdout to /dev/null and stderr to err_fd.
 * Returns 0 or posix_spawn's error. */
static int nft_spawn(int in_fd, int err_fd, pid_t *ret_pid)
{
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, in_fd, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, err_fd, 2);
	posix_spawnattr_init(&attr);
	/* The daemon ignores SIGPIPE and may block signals on workers: nft gets defaults. */
	sigset_t none, all;
	sigemptyset(&none);
	sigfillset(&all);
	posix_spawnattr_setsigmask(&attr, &none);
	posix_spawnattr_setsigdefault(&attr, &all);
	posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
	char *argv[] = { nft_path, "-j", "-f", "-", NULL };
	int e = posix_spawn(ret_pid, nft_path, &fa, &attr, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&attr);
	return e;
}

/* Waits for nft and says how the batch went: msg is what it wrote on stderr, wr how writing
 * the batch to it went. */
static int nft_result(pid_t pid, int wr, char *msg, struct err *err)
{
	int status = 0;
	pid_t w;
	do
		w = waitpid(pid, &status, 0);
	while (w < 0 && errno == EINTR);
	if (w < 0)
		return err_sys(err, errno, "nft: waitpid");
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0 || wr < 0) {
		/* The first line says what nft refused. */
		msg[strcspn(msg, "\n")] = '\0';
		return err_set(err, EPROTO, "nft refused the batch: %s",
			       *msg     ? msg
			       : wr < 0 ? strerror(-wr)
					: "no message");
	}
	return 0;
}

int net_nft_run(json_t *cmds, struct err *err)
{
	if (!*nft_path) {
		int r = net_nft_find(err);
		if (r < 0)
			return r;
	}
	json_auto_t *doc = json_pack("{s:O}", "nftables", cmds);
	_cleanup_free_ char *text = json_dumps(doc, JSON_COMPACT);
	if (!text)
		return err_set(err, ENOMEM, "nft: cannot encode the batch");

	_cleanup_close_pair_ int in[2] = { -1, -1 };
	_cleanup_close_pair_ int errp[2] = { -1, -1 };
	if (pipe2(in, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0)
		return err_sys(err, errno, "nft: pipe");
	pid_t pid;
	int e = nft_spawn(in[0], errp[1], &pid);
	/* nft has its own copies of these ends; with ours gone, its exit ends its stderr. */
	close(TAKE_FD(in[0]));
	close(TAKE_FD(errp[1]));
	if (e != 0)
		return err_sys(err, e, "cannot run %s", nft_path);

	/* nft reads its whole input before it writes anything, so writing first cannot
	 * deadlock on a full stderr pipe. */
	int wr = write_all(in[1], text, strlen(text));
	close(TAKE_FD(in[1]));
	char msg[NFT_STDERR_MAX];
	struct timespec deadline;
	clock_gettime(CLOCK_MONOTONIC, &deadline);
	deadline.tv_sec += NFT_TIMEOUT_MS / 1000;
	drain(errp[0], msg, sizeof(msg), &deadline);
	return nft_result(pid, wr, msg, err);
}

/* --- JSON builders ------------------------------------------------------------------ */

static json_t *ip_str(uint32_t addr)
{
	struct in_addr a = { .s_addr = htonl(addr) };
	char s[INET_ADDRSTRLEN];
	inet_ntop(AF_INET, &a, s, sizeof(s));
	return json_string(s);
}

/* An address or a prefix, as the right-hand side of a match. */
static json_t *net_value(uint32_t addr, unsigned prefix)
{
	if (prefix == 32)
		return ip_str(addr);
	return json_pack("{s:{s:o, s:i}}", "prefix", "addr", ip_str(addr), "len", (int)prefix);
}

static json_t *meta(const char *key)
{
	return json_pack("{s:{s:s}}", "meta", "key", key);
}

static json_t *payload(const char *proto, const char *field)
{
	return json_pack("{s:{s:s, s:s}}", "payload", "protocol", proto, "field", field);
}

static json_t *match(json_t *left, const char *op, json_t *right)
{
	return json_pack("{s:{s:s, s:o, s:o}}", "match", "op", op, "left", left, "right", right);
}

static json_t *verdict(const char *v)
{
	return json_pack("{s:n}", v);
}

static json_t *obj(const char *what, json_t *body)
{
	json_object_set_new(body, "family", json_string("inet"));
	json_object_set_new(body, "table", json_string(NET_NFT_TABLE));
	return json_pack("{s:o}", what, body);
}

static json_t *cmd(const char *verb, const char *what, json_t *body)
{
	return json_pack("{s:o}", verb, obj(what, body));
}

/* A rule in `chain` made of the given expressions (the array is taken). */
static json_t *rule(const char *chain, json_t *expr)
{
	return cmd("add", "rule", json_pack("{s:s, s:o}", "chain", chain, "expr", expr));
}

static json_t *base_chain(const char *name, const char *type, const char *hook, int prio)
{
	return cmd("add", "chain",
		   json_pack("{s:s, s:s, s:s, s:i, s:s}", "name", name, "type", type, "hook", hook,
			     "prio", prio, "policy", "accept"));
}

static json_t *sandbox_links(void)
{
	return json_string(NET_NFT_IFPREFIX "*");
}

static json_t *ct_reply(void)
{
	return match(json_pack("{s:{s:s}}", "ct", "key", "state"), "in",
		     json_pack("[s, s]", "established", "related"));
}

static json_t *addr_elems(const uint32_t *addrs, size_t n)
{
	json_t *a = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(a, ip_str(addrs[i]));
	return a;
}

json_t *net_nft_host_addrs_cmds(const uint32_t *addrs, size_t n)
{
	json_t *c = json_array();
	json_array_append_new(c, cmd("flush", "set", json_pack("{s:s}", "name", NET_NFT_HOST_SET)));
	if (n)
		json_array_append_new(c, cmd("add", "element",
					     json_pack("{s:s, s:o}", "name", NET_NFT_HOST_SET,
						       "elem", addr_elems(addrs, n))));
	return c;
}

json_t *net_nft_table_delete_cmds(void)
{
	/* Adding first makes the delete succeed whether or not the table exists. */
	json_t *t = json_pack("{s:s, s:s}", "family", "inet", "name", NET_NFT_TABLE);
	return json_pack("[{s:{s:O}}, {s:{s:o}}]", "add", "table", t, "delete", "table", t);
}

json_t *net_nft_table_cmds(uint32_t pool_base, unsigned pool_prefix, const uint32_t *host_addrs,
			   size_t n_host)
{
	json_t *c = net_nft_table_delete_cmds();
	json_array_append_new(c, json_pack("{s:{s:{s:s, s:s}}}", "add", "table", "family", "inet",
					   "name", NET_NFT_TABLE));
	json_array_append_new(c, cmd("add", "set",
				     json_pack("{s:s, s:s, s:[s]}", "name", NET_NFT_HOST_SET,
					       "type", "ipv4_addr", "flags", "interval")));
	json_array_append_new(c, cmd("add", "map",
				     json_pack("{s:s, s:s, s:s}", "name", NET_NFT_MAP, "type",
					       "ifname", "map", "verdict")));
	json_array_append_new(c, cmd("add", "set",
				     json_pack("{s:s, s:[s, s], s:[s], s:i}", "name",
					       NET_NFT_DNS_SET, "type", "ifname", "ipv4_addr",
					       "flags", "timeout", "size", NET_NFT_SET_SIZE)));
	if (n_host)
		json_array_append_new(c, cmd("add", "element",
					     json_pack("{s:s, s:o}", "name", NET_NFT_HOST_SET,
						       "elem", addr_elems(host_addrs, n_host))));

	json_array_append_new(c, base_chain("forward", "filter", "forward", 0));
	json_array_append_new(c,
			      rule("forward", json_pack("[{s:{s:o, s:s}}]", "vmap", "key",
							meta("iifname"), "data", "@" NET_NFT_MAP)));
	json_array_append_new(
		c,
		rule("forward", json_pack("[o, o]", match(meta("iifname"), "==", sandbox_links()),
					  verdict("drop"))));
	json_array_append_new(
		c, rule("forward",
			json_pack("[o, o, o]", match(meta("oifname"), "==", sandbox_links()),
				  ct_reply(), verdict("accept"))));
	json_array_append_new(
		c,
		rule("forward", json_pack("[o, o]", match(meta("oifname"), "==", sandbox_links()),
					  verdict("drop"))));

	json_array_append_new(c, base_chain("input", "filter", "input", 0));
	json_array_append_new(
		c,
		rule("input", json_pack("[o, o, o]", match(meta("iifname"), "==", sandbox_links()),
					ct_reply(), verdict("accept"))));
	json_array_append_new(
		c, rule("input", json_pack("[o, o]", match(meta("iifname"), "==", sandbox_links()),
					   verdict("drop"))));

	json_array_append_new(c, base_chain("postrouting", "nat", "postrouting", 100));
	json_array_append_new(
		c, rule("postrouting", json_pack("[o, o, o]",
						 match(payload("ip", "saddr"),
						       "==", net_value(pool_base, pool_prefix)),
						 match(meta("oifname"), "!=", sandbox_links()),
						 verdict("masquerade"))));
	return c;
}

/* The match expressions of one destination rule, appended to expr. */
static void rule_matches(json_t *expr, const struct net_dest_rule *r)
{
	if (r->prefix)
		json_array_append_new(
			expr, match(payload("ip", "daddr"), "==", net_value(r->addr, r->prefix)));
	const char *proto = r->proto == NET_PROTO_TCP   ? "tcp"
			    : r->proto == NET_PROTO_UDP ? "udp"
							: NULL;
	if (!r->port_lo) {
		if (proto)
			json_array_append_new(expr,
					      match(meta("l4proto"), "==", json_string(proto)));
		return;
	}
	json_t *port = r->port_lo == r->port_hi
			       ? json_integer(r->port_lo)
			       : json_pack("{s:[i, i]}", "range", (int)r->port_lo, (int)r->port_hi);
	if (proto) {
		json_array_append_new(expr, match(payload(proto, "dport"), "==", port));
	} else {
		json_array_append_new(expr, match(meta("l4proto"), "==",
						  json_pack("{s:[s, s]}", "set", "tcp", "udp")));
		json_array_append_new(expr, match(payload("th", "dport"), "==", port));
	}
}

static void rules_verdict(json_t *c, const char *chain, const struct net_rules *rs, const char *v)
{
	for (size_t i = 0; i < rs->n; i++) {
		json_t *expr = json_array();
		rule_matches(expr, &rs->v[i]);
		json_array_append_new(expr, verdict(v));
		json_array_append_new(c, rule(chain, expr));
	}
}

json_t *net_nft_policy_cmds(const char *chain, const struct net_policy *p, uint32_t pool_base,
			    unsigned pool_prefix)
{
	json_t *c = json_array();
	json_array_append_new(c, cmd("add", "chain", json_pack("{s:s}", "name", chain)));
	/* Packets of a flow already let through keep going, whatever expires meanwhile. */
	json_array_append_new(c, rule(chain, json_pack("[o, o]", ct_reply(), verdict("accept"))));
	/* Never: IPv6 (disabled in sandboxes anyway), the host, other sandboxes. */
	json_array_append_new(
		c,
		rule(chain, json_pack("[o, o]", match(meta("nfproto"), "==", json_string("ipv6")),
				      verdict("drop"))));
	json_array_append_new(c, rule(chain, json_pack("[o, o]",
						       match(payload("ip", "daddr"), "==",
							     json_string("@" NET_NFT_HOST_SET)),
						       verdict("drop"))));
	json_array_append_new(c, rule(chain, json_pack("[o, o]",
						       match(payload("ip", "daddr"), "==",
							     net_value(pool_base, pool_prefix)),
						       verdict("drop"))));
	rules_verdict(c, chain, &p->dest_deny, "drop");
	if (net_policy_dns_filtered(p)) {
		/* Name filtering means nothing if another resolver can be asked directly. */
		json_array_append_new(
			c, rule(chain,
				json_pack("[o, o, o]",
					  match(meta("l4proto"),
						"==", json_pack("{s:[s, s]}", "set", "tcp", "udp")),
					  match(payload("th", "dport"),
						"==", json_pack("{s:[i, i]}", "set", 53, 853)),
					  verdict("drop"))));
	}
	if (p->dest_allow_lifts)
		rules_verdict(c, chain, &p->dest_allow, "accept");
	json_t *blocked = json_array();
	for (size_t i = 0; i < ARRAY_SIZE(default_blocked); i++)
		json_array_append_new(blocked, json_pack("{s:{s:s, s:i}}", "prefix", "addr",
							 default_blocked[i].addr, "len",
							 (int)default_blocked[i].len));
	json_array_append_new(c, rule(chain, json_pack("[o, o]",
						       match(payload("ip", "daddr"), "==",
							     json_pack("{s:o}", "set", blocked)),
						       verdict("drop"))));
	if (!p->dest_allow_lifts && p->dest_allow_only)
		rules_verdict(c, chain, &p->dest_allow, "accept");
	if (p->dns_allow_only) {
		json_t *key =
			json_pack("{s:[o, o]}", "concat", meta("iifname"), payload("ip", "daddr"));
		json_array_append_new(
			c, rule(chain, json_pack("[o, o]",
						 match(key, "==", json_string("@" NET_NFT_DNS_SET)),
						 verdict("accept"))));
	}
	bool closed = p->dest_allow_only || p->dns_allow_only;
	json_array_append_new(c,
			      rule(chain, json_pack("[o]", verdict(closed ? "drop" : "accept"))));
	return c;
}

json_t *net_nft_policy_delete_cmds(const char *chain)
{
	json_t *c = json_array();
	json_array_append_new(c, cmd("flush", "chain", json_pack("{s:s}", "name", chain)));
	json_array_append_new(c, cmd("delete", "chain", json_pack("{s:s}", "name", chain)));
	return c;
}

void net_nft_policy_chain_name(const char *key, char out[NET_NFT_CHAIN_MAX])
{
	char hex[2 * SHA256_LEN + 1];
	sha256_hex(key, strlen(key), hex);
	snprintf(out, NET_NFT_CHAIN_MAX, "pol_%.16s", hex);
}

/* --- nfnetlink ---------------------------------------------------------------------- */

static struct {
	pthread_mutex_t lock;
	struct mnl_socket *sk;
	uint32_t portid;
	uint32_t seq;
} NL = { .lock = PTHREAD_MUTEX_INITIALIZER };

#define NFNL_BUF 65536

int net_nfnl_open(struct err *err)
{
	pthread_mutex_lock(&NL.lock);
	int r = 0;
	if (!NL.sk) {
		NL.sk = mnl_socket_open2(NETLINK_NETFILTER, SOCK_CLOEXEC);
		if (!NL.sk) {
			r = err_sys(err, errno, "nfnetlink socket");
		} else if (mnl_socket_bind(NL.sk, 0, MNL_SOCKET_AUTOPID) < 0) {
			r = err_sys(err, errno, "nfnetlink bind");
			mnl_socket_close(NL.sk);
			NL.sk = NULL;
		} else {
			NL.portid = mnl_socket_get_portid(NL.sk);
			NL.seq = (uint32_t)time(NULL);
		}
	}
	pthread_mutex_unlock(&NL.lock);
	return r;
}

void net_nfnl_close(void)
{
	pthread_mutex_lock(&NL.lock);
	if (NL.sk)
		mnl_socket_close(NL.sk);
	NL.sk = NULL;
	pthread_mutex_unlock(&NL.lock);
}

static void batch_marker(struct mnl_nlmsg_batch *b, uint16_t type, uint32_t seq)
{
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(mnl_nlmsg_batch_current(b));
	nlh->nlmsg_type = type;
	nlh->nlmsg_flags = NLM_F_REQUEST;
	nlh->nlmsg_seq = seq;
	struct nfgenmsg *nfg = mnl_nlmsg_put_extra_header(nlh, sizeof(*nfg));
	nfg->nfgen_family = AF_UNSPEC;
	nfg->version = NFNETLINK_V0;
	nfg->res_id = htons(NFNL_SUBSYS_NFTABLES);
	mnl_nlmsg_batch_next(b);
}

/* Starts a set-element message for `set` in the batch; returns the elements nest. */
static struct nlattr *elem_msg_start(struct mnl_nlmsg_batch *b, struct nlmsghdr **ret_nlh,
				     uint16_t msg, uint16_t flags, const char *set, uint32_t seq)
{
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(mnl_nlmsg_batch_current(b));
	nlh->nlmsg_type = (NFNL_SUBSYS_NFTABLES << 8) | msg;
	nlh->nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK | flags;
	nlh->nlmsg_seq = seq;
	struct nfgenmsg *nfg = mnl_nlmsg_put_extra_header(nlh, sizeof(*nfg));
	nfg->nfgen_family = NFPROTO_INET;
	nfg->version = NFNETLINK_V0;
	nfg->res_id = 0;
	mnl_attr_put_strz(nlh, NFTA_SET_ELEM_LIST_TABLE, NET_NFT_TABLE);
	mnl_attr_put_strz(nlh, NFTA_SET_ELEM_LIST_SET, set);
	*ret_nlh = nlh;
	return mnl_attr_nest_start(nlh, NFTA_SET_ELEM_LIST_ELEMENTS);
}

static void elem_msg_end(struct mnl_nlmsg_batch *b, struct nlmsghdr *nlh, struct nlattr *elems)
{
	mnl_attr_nest_end(nlh, elems);
	mnl_nlmsg_batch_next(b);
}

/* The key of dns_allowed: the link name padded to IFNAMSIZ, then the address, as the kernel
 * lays out a concatenation (each part rounded up to 32 bits). */
static void put_key(struct nlmsghdr *nlh, const char *ifname, const uint32_t *addr)
{
	uint8_t key[IFNAMSIZ + 4];
	memset(key, 0, sizeof(key));
	strncpy((char *)key, ifname, IFNAMSIZ - 1);
	size_t len = IFNAMSIZ;
	if (addr) {
		uint32_t be = htonl(*addr);
		memcpy(key + IFNAMSIZ, &be, 4);
		len += 4;
	}
	struct nlattr *k = mnl_attr_nest_start(nlh, NFTA_SET_ELEM_KEY);
	mnl_attr_put(nlh, NFTA_DATA_VALUE, len, key);
	mnl_attr_nest_end(nlh, k);
}

/* Sends the batch and collects the acks of its `nmsg` messages. Returns 0 or the first
 * negative errno the kernel reported. Called with NL.lock held. */
static int batch_send(struct mnl_nlmsg_batch *b, unsigned nmsg)
{
	if (!NL.sk)
		return -ENOTCONN;
	if (mnl_socket_sendto(NL.sk, mnl_nlmsg_batch_head(b), mnl_nlmsg_batch_size(b)) < 0)
		return -errno;
	/* nfnetlink handles a batch inside sendmsg(): every answer is queued by now. The poll
	 * is a guard against a kernel that would not. */
	char buf[8192];
	unsigned acks = 0;
	int first = 0;
	while (acks < nmsg) {
		ssize_t n = recv(mnl_socket_get_fd(NL.sk), buf, sizeof(buf), MSG_DONTWAIT);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			struct pollfd pfd = { .fd = mnl_socket_get_fd(NL.sk), .events = POLLIN };
			if (poll(&pfd, 1, 1000) <= 0)
				return first ? first : -ETIMEDOUT;
			continue;
		}
		if (n <= 0)
			return first ? first : -EIO;
		const struct nlmsghdr *nlh = (const struct nlmsghdr *)buf;
		int len = (int)n;
		for (; mnl_nlmsg_ok(nlh, len); nlh = mnl_nlmsg_next(nlh, &len)) {
			if (nlh->nlmsg_type != NLMSG_ERROR)
				continue;
			const struct nlmsgerr *e = mnl_nlmsg_get_payload(nlh);
			acks++;
			if (e->error && !first)
				first = e->error;
			/* After a failure the kernel aborts the batch; acks of the messages
			 * after it may not come. */
			if (e->error)
				return first;
		}
	}
	return first;
}

int net_nfnl_egress_add(const char *ifname, const char *chain, struct err *err)
{
	char buf[4096];
	pthread_mutex_lock(&NL.lock);
	struct mnl_nlmsg_batch *b = mnl_nlmsg_batch_start(buf, sizeof(buf));
	batch_marker(b, NFNL_MSG_BATCH_BEGIN, NL.seq++);
	struct nlmsghdr *nlh;
	struct nlattr *elems =
		elem_msg_start(b, &nlh, NFT_MSG_NEWSETELEM, NLM_F_CREATE, NET_NFT_MAP, NL.seq++);
	struct nlattr *el = mnl_attr_nest_start(nlh, NFTA_LIST_ELEM);
	put_key(nlh, ifname, NULL);
	struct nlattr *data = mnl_attr_nest_start(nlh, NFTA_SET_ELEM_DATA);
	struct nlattr *vd = mnl_attr_nest_start(nlh, NFTA_DATA_VERDICT);
	mnl_attr_put_u32(nlh, NFTA_VERDICT_CODE, htonl((uint32_t)NFT_GOTO));
	mnl_attr_put_strz(nlh, NFTA_VERDICT_CHAIN, chain);
	mnl_attr_nest_end(nlh, vd);
	mnl_attr_nest_end(nlh, data);
	mnl_attr_nest_end(nlh, el);
	elem_msg_end(b, nlh, elems);
	batch_marker(b, NFNL_MSG_BATCH_END, NL.seq++);
	int r = batch_send(b, 1);
	mnl_nlmsg_batch_stop(b);
	pthread_mutex_unlock(&NL.lock);
	if (r < 0)
		return err_sys(err, -r, "nftables: adding `%s` to the egress map", ifname);
	return 0;
}

int net_nfnl_egress_del(const char *ifname, struct err *err)
{
	char buf[4096];
	pthread_mutex_lock(&NL.lock);
	struct mnl_nlmsg_batch *b = mnl_nlmsg_batch_start(buf, sizeof(buf));
	batch_marker(b, NFNL_MSG_BATCH_BEGIN, NL.seq++);
	struct nlmsghdr *nlh;
	struct nlattr *elems =
		elem_msg_start(b, &nlh, NFT_MSG_DELSETELEM, 0, NET_NFT_MAP, NL.seq++);
	struct nlattr *el = mnl_attr_nest_start(nlh, NFTA_LIST_ELEM);
	put_key(nlh, ifname, NULL);
	mnl_attr_nest_end(nlh, el);
	elem_msg_end(b, nlh, elems);
	batch_marker(b, NFNL_MSG_BATCH_END, NL.seq++);
	int r = batch_send(b, 1);
	mnl_nlmsg_batch_stop(b);
	pthread_mutex_unlock(&NL.lock);
	if (r == -ENOENT)
		return -ENOENT;
	if (r < 0)
		return err_sys(err, -r, "nftables: removing `%s` from the egress map", ifname);
	return 0;
}

/* Elements per message: each takes about 60 bytes, the buffer is NFNL_BUF. */
#define DNS_ELEMS_PER_BATCH 256

static int dns_batch(uint16_t msg, const char *ifname, const uint32_t *addrs,
		     const uint32_t *timeouts_ms, size_t n)
{
	_cleanup_free_ char *buf = xmalloc(NFNL_BUF);
	struct mnl_nlmsg_batch *b = mnl_nlmsg_batch_start(buf, NFNL_BUF);
	batch_marker(b, NFNL_MSG_BATCH_BEGIN, NL.seq++);
	struct nlmsghdr *nlh;
	struct nlattr *elems =
		elem_msg_start(b, &nlh, msg, msg == NFT_MSG_NEWSETELEM ? NLM_F_CREATE : 0,
			       NET_NFT_DNS_SET, NL.seq++);
	for (size_t i = 0; i < n; i++) {
		struct nlattr *el = mnl_attr_nest_start(nlh, NFTA_LIST_ELEM);
		put_key(nlh, ifname, &addrs[i]);
		if (timeouts_ms)
			mnl_attr_put_u64(nlh, NFTA_SET_ELEM_TIMEOUT, htobe64(timeouts_ms[i]));
		mnl_attr_nest_end(nlh, el);
	}
	elem_msg_end(b, nlh, elems);
	batch_marker(b, NFNL_MSG_BATCH_END, NL.seq++);
	int r = batch_send(b, 1);
	mnl_nlmsg_batch_stop(b);
	return r;
}

int net_nfnl_dns_add(const char *ifname, const uint32_t *addrs, const uint32_t *timeouts_ms,
		     size_t n, struct err *err)
{
	int r = 0;
	pthread_mutex_lock(&NL.lock);
	for (size_t i = 0; i < n && r >= 0; i += DNS_ELEMS_PER_BATCH) {
		size_t k = n - i < DNS_ELEMS_PER_BATCH ? n - i : DNS_ELEMS_PER_BATCH;
		r = dns_batch(NFT_MSG_NEWSETELEM, ifname, addrs + i, timeouts_ms + i, k);
	}
	pthread_mutex_unlock(&NL.lock);
	if (r < 0)
		return err_sys(err, -r, "nftables: adding resolved addresses for `%s`", ifname);
	return 0;
}

int net_nfnl_dns_del(const char *ifname, const uint32_t *addrs, size_t n, struct err *err)
{
	int r = 0;
	pthread_mutex_lock(&NL.lock);
	for (size_t i = 0; i < n; i += DNS_ELEMS_PER_BATCH) {
		size_t k = n - i < DNS_ELEMS_PER_BATCH ? n - i : DNS_ELEMS_PER_BATCH;
		r = dns_batch(NFT_MSG_DELSETELEM, ifname, addrs + i, NULL, k);
		/* One element that expired meanwhile fails the whole batch: then one by one,
		 * missing ones being fine. */
		for (size_t j = 0; r == -ENOENT && j < k; j++) {
			int e = dns_batch(NFT_MSG_DELSETELEM, ifname, addrs + i + j, NULL, 1);
			if (e < 0 && e != -ENOENT) {
				r = e;
				break;
			}
			if (j == k - 1)
				r = 0;
		}
		if (r < 0)
			break;
	}
	pthread_mutex_unlock(&NL.lock);
	if (r < 0)
		return err_sys(err, -r, "nftables: removing resolved addresses of `%s`", ifname);
	return 0;
}
