#include "net/nl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <libmnl/libmnl.h>
#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/pkt_sched.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/cleanup.h"

/* Room for any request we send and for one answer datagram. */
#define NL_BUF 8192
/* Answers to a dump come in datagrams of up to a page each; this holds several. */
#define NL_DUMP_BUF 32768

int net_nl_open(struct net_nl *nl, struct err *err)
{
	memset(nl, 0, sizeof(*nl));
	nl->sk = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
	if (!nl->sk)
		return err_sys(err, errno, "netlink socket");
	if (mnl_socket_bind(nl->sk, 0, MNL_SOCKET_AUTOPID) < 0) {
		int e = errno;
		mnl_socket_close(nl->sk);
		nl->sk = NULL;
		return err_sys(err, e, "netlink bind");
	}
	/* Extended acks carry the kernel's reason for a refusal; nice to have, not needed. */
	int one = 1;
	mnl_socket_setsockopt(nl->sk, NETLINK_EXT_ACK, &one, sizeof(one));
	mnl_socket_setsockopt(nl->sk, NETLINK_CAP_ACK, &one, sizeof(one));
	nl->portid = mnl_socket_get_portid(nl->sk);
	nl->seq = (uint32_t)time(NULL);
	return 0;
}

void net_nl_close(struct net_nl *nl)
{
	if (nl->sk)
		mnl_socket_close(nl->sk);
	nl->sk = NULL;
}

static struct nlmsghdr *msg_start(struct net_nl *nl, void *buf, uint16_t type, uint16_t flags)
{
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	nlh->nlmsg_type = type;
	nlh->nlmsg_flags = NLM_F_REQUEST | flags;
	nlh->nlmsg_seq = ++nl->seq;
	return nlh;
}

/* Sends a request and runs cb (may be NULL) on each answer until the ack or the end of a
 * dump. Returns 0 or the kernel's negative errno. */
static int talk(struct net_nl *nl, struct nlmsghdr *nlh, mnl_cb_t cb, void *data, char *rbuf,
		size_t rlen)
{
	uint32_t seq = nlh->nlmsg_seq;
	if (mnl_socket_sendto(nl->sk, nlh, nlh->nlmsg_len) < 0)
		return -errno;
	for (;;) {
		ssize_t n = mnl_socket_recvfrom(nl->sk, rbuf, rlen);
		if (n < 0)
			return errno == EINTR ? -EINTR : -errno;
		int r = mnl_cb_run(rbuf, (size_t)n, seq, nl->portid, cb, data);
		if (r <= MNL_CB_STOP)
			return r < 0 ? -errno : 0;
	}
}

static int request(struct net_nl *nl, struct nlmsghdr *nlh)
{
	char rbuf[NL_BUF];
	nlh->nlmsg_flags |= NLM_F_ACK;
	return talk(nl, nlh, NULL, NULL, rbuf, sizeof(rbuf));
}

static int link_cb(const struct nlmsghdr *nlh, void *data)
{
	const struct ifinfomsg *ifm = mnl_nlmsg_get_payload(nlh);
	*(int *)data = ifm->ifi_index;
	return MNL_CB_OK;
}

int net_nl_link_index(struct net_nl *nl, const char *name, struct err *err)
{
	char buf[NL_BUF], rbuf[NL_BUF];
	/* The ack after the answer tells talk() that nothing else follows. */
	struct nlmsghdr *nlh = msg_start(nl, buf, RTM_GETLINK, NLM_F_ACK);
	struct ifinfomsg *ifm = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifm));
	ifm->ifi_family = AF_UNSPEC;
	mnl_attr_put_strz(nlh, IFLA_IFNAME, name);
	/* Without this the kernel would count every VF of a NIC into the answer. */
	mnl_attr_put_u32(nlh, IFLA_EXT_MASK, RTEXT_FILTER_SKIP_STATS);
	int index = 0;
	int r = talk(nl, nlh, link_cb, &index, rbuf, sizeof(rbuf));
	if (r == -ENODEV || (r == 0 && index <= 0))
		return err_set(err, ENODEV, "no network interface `%s`", name);
	if (r < 0)
		return err_sys(err, -r, "looking up network interface `%s`", name);
	return index;
}

int net_nl_veth_add(struct net_nl *nl, const char *name, const char *peer, int netns_fd,
		    struct err *err)
{
	char buf[NL_BUF];
	struct nlmsghdr *nlh = msg_start(nl, buf, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL);
	struct ifinfomsg *ifm = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifm));
	ifm->ifi_family = AF_UNSPEC;
	/* This end comes up with the link itself, a round trip fewer. Not the peer: it is
	 * configured before the two ends know each other, and a veth without its peer refuses
	 * to come up (ENOTCONN). */
	ifm->ifi_flags = ifm->ifi_change = IFF_UP;
	mnl_attr_put_strz(nlh, IFLA_IFNAME, name);
	struct nlattr *linkinfo = mnl_attr_nest_start(nlh, IFLA_LINKINFO);
	mnl_attr_put_strz(nlh, IFLA_INFO_KIND, "veth");
	struct nlattr *data = mnl_attr_nest_start(nlh, IFLA_INFO_DATA);
	struct nlattr *peer_attr = mnl_attr_nest_start(nlh, VETH_INFO_PEER);
	struct ifinfomsg *pifm = mnl_nlmsg_put_extra_header(nlh, sizeof(*pifm));
	pifm->ifi_family = AF_UNSPEC;
	mnl_attr_put_strz(nlh, IFLA_IFNAME, peer);
	mnl_attr_put_u32(nlh, IFLA_NET_NS_FD, (uint32_t)netns_fd);
	mnl_attr_nest_end(nlh, peer_attr);
	mnl_attr_nest_end(nlh, data);
	mnl_attr_nest_end(nlh, linkinfo);
	int r = request(nl, nlh);
	if (r < 0)
		return err_sys(err, -r, "creating veth pair `%s`", name);
	return 0;
}

int net_nl_link_up(struct net_nl *nl, int ifindex, struct err *err)
{
	char buf[NL_BUF];
	struct nlmsghdr *nlh = msg_start(nl, buf, RTM_NEWLINK, 0);
	struct ifinfomsg *ifm = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifm));
	ifm->ifi_family = AF_UNSPEC;
	ifm->ifi_index = ifindex;
	ifm->ifi_flags = ifm->ifi_change = IFF_UP;
	int r = request(nl, nlh);
	if (r < 0)
		return err_sys(err, -r, "bringing up interface %d", ifindex);
	return 0;
}

int net_nl_link_del(struct net_nl *nl, const char *name, struct err *err)
{
	char buf[NL_BUF];
	struct nlmsghdr *nlh = msg_start(nl, buf, RTM_DELLINK, 0);
	struct ifinfomsg *ifm = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifm));
	ifm->ifi_family = AF_UNSPEC;
	mnl_attr_put_strz(nlh, IFLA_IFNAME, name);
	int r = request(nl, nlh);
	if (r == -ENODEV)
		return -ENODEV;
	if (r < 0)
		return err_sys(err, -r, "deleting interface `%s`", name);
	return 0;
}

int net_nl_addr_add(struct net_nl *nl, int ifindex, uint32_t addr, unsigned prefix, struct err *err)
{
	char buf[NL_BUF];
	struct nlmsghdr *nlh = msg_start(nl, buf, RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL);
	struct ifaddrmsg *ifa = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifa));
	ifa->ifa_family = AF_INET;
	ifa->ifa_prefixlen = (uint8_t)prefix;
	ifa->ifa_scope = RT_SCOPE_UNIVERSE;
	ifa->ifa_index = (uint32_t)ifindex;
	uint32_t be = htonl(addr);
	mnl_attr_put(nlh, IFA_LOCAL, sizeof(be), &be);
	mnl_attr_put(nlh, IFA_ADDRESS, sizeof(be), &be);
	int r = request(nl, nlh);
	if (r < 0) {
		char ip[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &be, ip, sizeof(ip));
		return err_sys(err, -r, "adding address %s/%u", ip, prefix);
	}
	return 0;
}

int net_nl_route_add(struct net_nl *nl, uint32_t dst, unsigned prefix, uint32_t gw, int ifindex,
		     struct err *err)
{
	char buf[NL_BUF];
	struct nlmsghdr *nlh = msg_start(nl, buf, RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL);
	struct rtmsg *rtm = mnl_nlmsg_put_extra_header(nlh, sizeof(*rtm));
	rtm->rtm_family = AF_INET;
	rtm->rtm_dst_len = (uint8_t)prefix;
	rtm->rtm_table = RT_TABLE_MAIN;
	rtm->rtm_protocol = RTPROT_STATIC;
	rtm->rtm_scope = gw ? RT_SCOPE_UNIVERSE : RT_SCOPE_LINK;
	rtm->rtm_type = RTN_UNICAST;
	uint32_t be_dst = htonl(dst), be_gw = htonl(gw);
	if (prefix)
		mnl_attr_put(nlh, RTA_DST, sizeof(be_dst), &be_dst);
	if (gw)
		mnl_attr_put(nlh, RTA_GATEWAY, sizeof(be_gw), &be_gw);
	mnl_attr_put_u32(nlh, RTA_OIF, (uint32_t)ifindex);
	int r = request(nl, nlh);
	if (r < 0) {
		char ip[INET_ADDRSTRLEN];
		inet_ntop(AF_INET, &be_dst, ip, sizeof(ip));
		return err_sys(err, -r, "adding a route to %s/%u", ip, prefix);
	}
	return 0;
}

int net_nl_qdisc_tbf(struct net_nl *nl, int ifindex, uint64_t rate_bytes, uint32_t burst_bytes,
		     struct err *err)
{
	char buf[NL_BUF];
	struct nlmsghdr *nlh = msg_start(nl, buf, RTM_NEWQDISC, NLM_F_CREATE | NLM_F_REPLACE);
	struct tcmsg *tcm = mnl_nlmsg_put_extra_header(nlh, sizeof(*tcm));
	tcm->tcm_family = AF_UNSPEC;
	tcm->tcm_ifindex = ifindex;
	tcm->tcm_handle = 1u << 16;
	tcm->tcm_parent = TC_H_ROOT;
	mnl_attr_put_strz(nlh, TCA_KIND, "tbf");

	struct tc_tbf_qopt q;
	memset(&q, 0, sizeof(q));
	q.rate.rate = rate_bytes > UINT32_MAX ? UINT32_MAX : (uint32_t)rate_bytes;
	/* Ethernet-aware: the kernel computes transmission times itself, no rate table. */
	q.rate.linklayer = TC_LINKLAYER_ETHERNET;
	/* Queue: the burst plus 50 ms at the rate, as `tc ... latency 50ms` would give. */
	uint64_t limit = burst_bytes + rate_bytes / 20;
	q.limit = limit > UINT32_MAX ? UINT32_MAX : (uint32_t)limit;
	/* With TCA_TBF_BURST the kernel derives the bucket from bytes; `buffer` (in scheduler
	 * ticks) is then unused, but some kernels refuse a zero. */
	q.buffer = 1;
	struct nlattr *opts = mnl_attr_nest_start(nlh, TCA_OPTIONS);
	mnl_attr_put(nlh, TCA_TBF_PARMS, sizeof(q), &q);
	if (rate_bytes > UINT32_MAX)
		mnl_attr_put_u64(nlh, TCA_TBF_RATE64, rate_bytes);
	mnl_attr_put_u32(nlh, TCA_TBF_BURST, burst_bytes);
	mnl_attr_nest_end(nlh, opts);
	int r = request(nl, nlh);
	if (r < 0)
		return err_sys(err, -r, "setting a token-bucket qdisc on interface %d", ifindex);
	return 0;
}

struct addrs {
	const char *skip;
	uint32_t *v;
	size_t n, cap;
};

static int addr_attr_cb(const struct nlattr *attr, void *data)
{
	const struct nlattr **tb = data;
	int type = mnl_attr_get_type(attr);
	if (type <= IFA_MAX && mnl_attr_type_valid(attr, IFA_MAX) >= 0)
		tb[type] = attr;
	return MNL_CB_OK;
}

static int addr_cb(const struct nlmsghdr *nlh, void *data)
{
	struct addrs *a = data;
	const struct ifaddrmsg *ifa = mnl_nlmsg_get_payload(nlh);
	const struct nlattr *tb[IFA_MAX + 1] = { 0 };
	if (ifa->ifa_family != AF_INET)
		return MNL_CB_OK;
	mnl_attr_parse(nlh, sizeof(*ifa), addr_attr_cb, tb);
	const struct nlattr *at = tb[IFA_LOCAL] ? tb[IFA_LOCAL] : tb[IFA_ADDRESS];
	if (!at || mnl_attr_get_payload_len(at) != 4)
		return MNL_CB_OK;
	if (a->skip && tb[IFA_LABEL]) {
		const char *label = mnl_attr_get_str(tb[IFA_LABEL]);
		if (strncmp(label, a->skip, strlen(a->skip)) == 0)
			return MNL_CB_OK;
	}
	uint32_t be;
	memcpy(&be, mnl_attr_get_payload(at), 4);
	if (a->n == a->cap) {
		a->cap = a->cap ? 2 * a->cap : 16;
		a->v = xrealloc(a->v, a->cap * sizeof(*a->v));
	}
	a->v[a->n++] = ntohl(be);
	return MNL_CB_OK;
}

static int cmp_u32(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
	return a < b ? -1 : a > b;
}

int net_nl_addrs4(struct net_nl *nl, const char *skip_prefix, uint32_t **ret, size_t *ret_n,
		  struct err *err)
{
	char buf[NL_BUF];
	_cleanup_free_ char *rbuf = xmalloc(NL_DUMP_BUF);
	struct nlmsghdr *nlh = msg_start(nl, buf, RTM_GETADDR, NLM_F_DUMP);
	struct ifaddrmsg *ifa = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifa));
	ifa->ifa_family = AF_INET;
	struct addrs a = { .skip = skip_prefix };
	int r = talk(nl, nlh, addr_cb, &a, rbuf, NL_DUMP_BUF);
	if (r < 0) {
		free(a.v);
		return err_sys(err, -r, "listing the host's addresses");
	}
	if (a.n) {
		qsort(a.v, a.n, sizeof(*a.v), cmp_u32);
		size_t k = 1;
		for (size_t i = 1; i < a.n; i++)
			if (a.v[i] != a.v[k - 1])
				a.v[k++] = a.v[i];
		a.n = k;
	}
	*ret = a.v;
	*ret_n = a.n;
	return 0;
}
