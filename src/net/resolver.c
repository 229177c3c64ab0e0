#include "net/resolver.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "metrics/metrics.h"
#include "net/dns.h"
#include "net/nft.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/random.h"
#include "util/time.h"

#define MAX_UPSTREAMS        4
#define ATTEMPT_TIMEOUT_MS   2000
#define MAX_ATTEMPTS         3
#define PENDING_PER_RESOLVER 64
#define PENDING_TOTAL        512 /* each holds a socket */
/* What a resolver may always have pending, however many share the budget. */
#define PENDING_FLOOR    4
#define TCP_CLIENTS_MAX  8
#define TCP_IDLE_S       10
#define TCP_OUTPUT_MAX   (256 * 1024)
#define QUERY_MAX        4096 /* what we accept from a sandbox */
#define UDP_BATCH        32   /* datagrams read per wakeup, for fairness */
#define ANSWER_ADDRS_MAX 64
#define TRACKED_MAX      4096 /* addresses one sandbox may have in the allow set */
#define TTL_MIN_S        60   /* a client may connect a little after the TTL ran out */
#define TTL_MAX_S        86400

struct upstream {
	struct sockaddr_storage addr;
	socklen_t len;
};

/* The sandboxes of one owner (an API key): the budget is shared fairly between owners first,
 * then between the sandboxes of each. */
struct group {
	char *name;
	unsigned nresolvers; /* resolvers in it */
	unsigned nactive;    /* of them, with questions pending */
	unsigned npending;
	struct group *next;
};

static struct {
	struct upstream v[MAX_UPSTREAMS];
	unsigned n;
	unsigned pending_total;
	struct group *groups;
	struct net_resolver *resolvers; /* every one, for make_room */
	uint8_t rnd[256];
	size_t rnd_left;
} resolver_mod;

struct tcp_client;

struct pending {
	struct net_resolver *r;
	struct pending *prev, *next;
	/* Where the answer goes: a UDP peer, or a TCP client (NULL once it is gone). */
	struct sockaddr_storage peer;
	socklen_t peer_len;
	struct tcp_client *tc;
	bool via_tcp;
	uint16_t client_id;
	uint16_t id; /* of the current attempt */
	struct dns_question q;
	uint8_t *msg; /* the query as sent upstream */
	size_t len;
	size_t qend;
	unsigned attempt;
	int fd;
	struct event *ev;
};

struct tcp_client {
	struct net_resolver *r;
	struct bufferevent *bev;
	struct tcp_client *next;
};

struct tracked {
	uint32_t addr;
	uint64_t expires_ms; /* monotonic; an upper bound of the kernel's expiry */
};

struct net_resolver {
	struct event_base *base;
	const struct net_policy *policy;
	char ifname[16];
	int udp_fd;
	struct event *udp_ev;
	struct evconnlistener *listener;
	struct pending *pending;
	unsigned npending;
	struct tcp_client *clients;
	unsigned nclients;
	struct tracked *tracked;
	size_t ntracked;
	struct group *group;
	struct net_resolver *next_all;
};

/* --- small helpers ------------------------------------------------------------------ */

static uint16_t random_id(void)
{
	if (resolver_mod.rnd_left < 2) {
		random_bytes(resolver_mod.rnd, sizeof(resolver_mod.rnd));
		resolver_mod.rnd_left = sizeof(resolver_mod.rnd);
	}
	resolver_mod.rnd_left -= 2;
	return (uint16_t)(resolver_mod.rnd[resolver_mod.rnd_left] << 8 |
			  resolver_mod.rnd[resolver_mod.rnd_left + 1]);
}

static void count(const char *decision, const char *reason)
{
	metrics_add(metrics_daemon.egress_decisions_total, 1, decision, reason);
}

unsigned net_resolver_pending_total(void)
{
	return resolver_mod.pending_total;
}

/* --- upstream servers --------------------------------------------------------------- */

static int parse_upstream(const char *s, struct upstream *u, struct err *err)
{
	char host[INET6_ADDRSTRLEN + 1];
	unsigned long port = 53;
	const char *port_s = NULL;
	size_t n;

	memset(u, 0, sizeof(*u));
	if (*s == '[') {
		const char *close = strchr(s, ']');
		if (!close || (close[1] && close[1] != ':'))
			return err_set(err, EINVAL, "VM_DNS_UPSTREAM: bad address `%s`", s);
		n = (size_t)(close - s - 1);
		if (n >= sizeof(host))
			return err_set(err, EINVAL, "VM_DNS_UPSTREAM: bad address `%s`", s);
		memcpy(host, s + 1, n);
		host[n] = '\0';
		port_s = close[1] ? close + 2 : NULL;
	} else {
		const char *colon = strchr(s, ':');
		bool v6 = colon && strchr(colon + 1, ':');
		n = v6 || !colon ? strlen(s) : (size_t)(colon - s);
		if (n >= sizeof(host))
			return err_set(err, EINVAL, "VM_DNS_UPSTREAM: bad address `%s`", s);
		memcpy(host, s, n);
		host[n] = '\0';
		port_s = !v6 && colon ? colon + 1 : NULL;
	}
	if (port_s) {
		char *end;
		port = strtoul(port_s, &end, 10);
		if (!*port_s || *end || port == 0 || port > 65535)
			return err_set(err, EINVAL, "VM_DNS_UPSTREAM: bad port in `%s`", s);
	}
	struct sockaddr_in *in4 = (struct sockaddr_in *)&u->addr;
	struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&u->addr;
	if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
		in4->sin_family = AF_INET;
		in4->sin_port = htons((uint16_t)port);
		u->len = sizeof(*in4);
	} else if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
		in6->sin6_family = AF_INET6;
		in6->sin6_port = htons((uint16_t)port);
		u->len = sizeof(*in6);
	} else {
		return err_set(err, EINVAL, "VM_DNS_UPSTREAM: `%s` is not an IP address", s);
	}
	return 0;
}

int net_resolver_set_upstreams(const char *list, struct err *err)
{
	_cleanup_free_ char *copy = xstrdup(list ? list : "");
	char *save = NULL;
	unsigned n = 0;
	for (char *item = strtok_r(copy, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
		while (*item == ' ' || *item == '\t')
			item++;
		size_t len = strlen(item);
		while (len && (item[len - 1] == ' ' || item[len - 1] == '\t'))
			item[--len] = '\0';
		if (!*item)
			continue;
		if (n == MAX_UPSTREAMS)
			return err_set(err, E2BIG, "VM_DNS_UPSTREAM: at most %d servers",
				       MAX_UPSTREAMS);
		int r = parse_upstream(item, &resolver_mod.v[n], err);
		if (r < 0)
			return r;
		n++;
	}
	if (n == 0)
		return err_set(err, EINVAL, "VM_DNS_UPSTREAM: no server given");
	resolver_mod.n = n;
	return 0;
}

void net_resolver_clear_upstreams(void)
{
	resolver_mod.n = 0;
}

/* --- answers to the sandbox --------------------------------------------------------- */

static void tcp_client_free(struct tcp_client *c);

static void send_tcp(struct tcp_client *c, const uint8_t *msg, size_t len)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);
	if (evbuffer_get_length(out) + len > TCP_OUTPUT_MAX) {
		/* A client that does not read its answers loses its connection. */
		tcp_client_free(c);
		return;
	}
	uint8_t hdr[2] = { (uint8_t)(len >> 8), (uint8_t)len };
	evbuffer_add(out, hdr, 2);
	evbuffer_add(out, msg, len);
}

static void reply(struct net_resolver *r, struct tcp_client *tc, const struct sockaddr *peer,
		  socklen_t peer_len, const uint8_t *msg, size_t len)
{
	if (tc) {
		send_tcp(tc, msg, len);
		return;
	}
	/* A full socket buffer drops the answer, as the network would; the client asks again. */
	if (sendto(r->udp_fd, msg, len, MSG_DONTWAIT, peer, peer_len) < 0)
		log_debug("net", "resolver of %s: answering: %s", r->ifname, strerror(errno));
}

static void reply_error(struct net_resolver *r, struct tcp_client *tc, const struct sockaddr *peer,
			socklen_t peer_len, const uint8_t *query, size_t qlen, size_t qend,
			uint8_t rcode)
{
	uint8_t out[DNS_HEADER_LEN + DNS_NAME_MAX + 2 + 4 + 8];
	int n = dns_build_error(query, qlen, qend, rcode, out, sizeof(out));
	if (n > 0)
		reply(r, tc, peer, peer_len, out, (size_t)n);
}

/* --- the nftables allow set ---------------------------------------------------------- */

static struct tracked *tracked_find(struct net_resolver *r, uint32_t addr)
{
	for (size_t i = 0; i < r->ntracked; i++)
		if (r->tracked[i].addr == addr)
			return &r->tracked[i];
	return NULL;
}

/* A slot for a new address: a free one, else the one expiring first (whose element is
 * removed from the set by the caller: it is returned in *evicted). */
static struct tracked *tracked_slot(struct net_resolver *r, uint64_t now, bool *evicted)
{
	*evicted = false;
	for (size_t i = 0; i < r->ntracked; i++)
		if (r->tracked[i].expires_ms <= now)
			return &r->tracked[i];
	if (r->ntracked < TRACKED_MAX) {
		if (!r->tracked)
			r->tracked = xcalloc(TRACKED_MAX, sizeof(*r->tracked));
		return &r->tracked[r->ntracked++];
	}
	struct tracked *first = &r->tracked[0];
	for (size_t i = 1; i < r->ntracked; i++)
		if (r->tracked[i].expires_ms < first->expires_ms)
			first = &r->tracked[i];
	*evicted = true;
	return first;
}

/* Lets the sandbox reach the IPv4 addresses of an answer for their TTL. Returns 0 or a
 * negative errno (the answer is then withheld: the client would fail to connect anyway). */
static int allow_addrs(struct net_resolver *r, const struct dns_addr *a, size_t n)
{
	uint32_t add[ANSWER_ADDRS_MAX], tmo[ANSWER_ADDRS_MAX], del[2 * ANSWER_ADDRS_MAX];
	size_t nadd = 0, ndel = 0;
	uint64_t now = time_mono_ms();
	struct err e;

	for (size_t i = 0; i < n; i++) {
		if (a[i].type != DNS_TYPE_A)
			continue;
		uint32_t addr = (uint32_t)a[i].addr[0] << 24 | (uint32_t)a[i].addr[1] << 16 |
				(uint32_t)a[i].addr[2] << 8 | a[i].addr[3];
		uint32_t ttl = a[i].ttl < TTL_MIN_S   ? TTL_MIN_S
			       : a[i].ttl > TTL_MAX_S ? TTL_MAX_S
						      : a[i].ttl;
		/* One second more than the kernel's timer, so that when we think an element
		 * is gone, it is. */
		uint64_t expires = now + (uint64_t)ttl * 1000 + 1000;
		bool dup = false;
		for (size_t k = 0; k < nadd; k++)
			dup |= add[k] == addr;
		if (dup)
			continue;
		struct tracked *t = tracked_find(r, addr);
		if (t && t->expires_ms > now) {
			/* Already allowed long enough: nothing to do (the common case). */
			if (t->expires_ms + 5000 >= expires)
				continue;
			/* The kernel keeps an element's own timeout on a second add: replace. */
			del[ndel++] = addr;
		} else if (!t) {
			bool evicted;
			t = tracked_slot(r, now, &evicted);
			if (evicted && t->expires_ms > now + 1000)
				del[ndel++] = t->addr;
		}
		t->addr = addr;
		t->expires_ms = expires;
		add[nadd] = addr;
		tmo[nadd++] = ttl * 1000;
	}
	if (ndel && net_nfnl_dns_del(r->ifname, del, ndel, &e) < 0)
		log_warn("net", "resolver of %s: %s", r->ifname, e.msg);
	if (nadd && net_nfnl_dns_add(r->ifname, add, tmo, nadd, &e) < 0) {
		log_warn("net", "resolver of %s: %s", r->ifname, e.msg);
		return -e.errnum;
	}
	return 0;
}

/* --- the shared budget ------------------------------------------------------------- */

static struct group *group_get(const char *name)
{
	struct group *g;
	for (g = resolver_mod.groups; g; g = g->next)
		if (!strcmp(g->name, name))
			break;
	if (!g) {
		g = xcalloc(1, sizeof(*g));
		g->name = xstrdup(name);
		g->next = resolver_mod.groups;
		resolver_mod.groups = g;
	}
	g->nresolvers++;
	return g;
}

static void group_put(struct group *g)
{
	if (--g->nresolvers)
		return;
	for (struct group **pp = &resolver_mod.groups; *pp; pp = &(*pp)->next)
		if (*pp == g) {
			*pp = g->next;
			break;
		}
	free(g->name);
	free(g);
}

void net_resolver_set_owner(struct net_resolver *r, const char *owner)
{
	struct group *g = group_get(owner ? owner : "");
	if (g == r->group) {
		group_put(g);
		return;
	}
	struct group *old = r->group;
	old->npending -= r->npending;
	g->npending += r->npending;
	if (r->npending) {
		old->nactive--;
		g->nactive++;
	}
	r->group = g;
	group_put(old);
}

/* A resolver's questions pending change by one (+1 or -1). */
static void pending_count(struct net_resolver *r, int d)
{
	struct group *g = r->group;
	if (d > 0) {
		if (r->npending++ == 0)
			g->nactive++;
		g->npending++;
		resolver_mod.pending_total++;
	} else {
		if (--r->npending == 0)
			g->nactive--;
		g->npending--;
		resolver_mod.pending_total--;
	}
}

static unsigned at_least_floor(unsigned n)
{
	return n > PENDING_FLOOR ? n : PENDING_FLOOR;
}

/* An owner's fair share: the budget over the owners with questions pending, counting g and
 * the owner of the question being admitted (`asking`, which may have none yet). */
static unsigned group_limit(const struct group *g, const struct net_resolver *asking)
{
	unsigned active = 0;
	for (const struct group *x = resolver_mod.groups; x; x = x->next)
		active += x->npending > 0 || x == g || x == asking->group;
	return at_least_floor(PENDING_TOTAL / (active ? active : 1));
}

/* A sandbox's: its owner's share over its owner's sandboxes with questions pending, counting
 * it and the one asking. */
static unsigned resolver_limit(const struct net_resolver *r, const struct net_resolver *asking)
{
	unsigned active = r->group->nactive + (r->npending == 0) +
			  (asking != r && asking->group == r->group && asking->npending == 0);
	unsigned l = at_least_floor(group_limit(r->group, asking) / (active ? active : 1));
	return l < PENDING_PER_RESOLVER ? l : PENDING_PER_RESOLVER;
}

static void pending_fail(struct pending *p, uint8_t rcode, const char *reason);

/* The budget is spent and r is within its share: the oldest question of the sandbox most
 * beyond its share, of the owner most beyond its share, makes room (it is answered
 * SERVFAIL). False when nobody is beyond a share. */
static bool make_room(const struct net_resolver *r)
{
	/* The owner most beyond its share, else r's own (r and its owner are within theirs). */
	struct group *worst = r->group;
	long most = 0;
	for (struct group *g = resolver_mod.groups; g; g = g->next) {
		long over = (long)g->npending - (long)group_limit(g, r);
		if (over > most) {
			most = over;
			worst = g;
		}
	}
	/* Its sandbox most beyond its share; of another owner, else the one holding the most. */
	struct net_resolver *victim = NULL;
	long vmost = 0;
	unsigned held = 0;
	for (struct net_resolver *x = resolver_mod.resolvers; x; x = x->next_all) {
		if (x->group != worst || x == r || !x->npending)
			continue;
		long over = (long)x->npending - (long)resolver_limit(x, r);
		if (over > vmost) {
			vmost = over;
			victim = x;
		} else if (!vmost && worst != r->group && x->npending > held) {
			held = x->npending;
			victim = x;
		}
	}
	if (!victim)
		return false;
	struct pending *oldest = victim->pending;
	while (oldest->next)
		oldest = oldest->next;
	pending_fail(oldest, DNS_RCODE_SERVFAIL, "dns_busy");
	return true;
}

/* --- forwarding --------------------------------------------------------------------- */

static void pending_free(struct pending *p)
{
	struct net_resolver *r = p->r;
	if (p->prev)
		p->prev->next = p->next;
	else
		r->pending = p->next;
	if (p->next)
		p->next->prev = p->prev;
	pending_count(r, -1);
	if (p->ev)
		event_free(p->ev);
	if (p->fd >= 0)
		close(p->fd);
	free(p->msg);
	free(p);
}

static void pending_fail(struct pending *p, uint8_t rcode, const char *reason)
{
	count("error", reason);
	if (!p->via_tcp || p->tc)
		reply_error(p->r, p->tc, (struct sockaddr *)&p->peer, p->peer_len, p->msg, p->len,
			    p->qend, rcode);
	pending_free(p);
}

static void on_upstream(evutil_socket_t fd, short what, void *arg);

/* Sends the query to the next server with a fresh socket and id. */
static int attempt(struct pending *p)
{
	const struct upstream *u = &resolver_mod.v[p->attempt % resolver_mod.n];
	p->attempt++;
	if (p->ev) {
		event_free(p->ev);
		p->ev = NULL;
	}
	if (p->fd >= 0)
		close(p->fd);
	/* A new socket per attempt: a random source port, and an answer to an earlier attempt
	 * cannot be mistaken for this one. */
	p->fd = socket(u->addr.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (p->fd < 0)
		return -errno;
	if (connect(p->fd, (const struct sockaddr *)&u->addr, u->len) < 0)
		return -errno;
	p->id = random_id();
	dns_set_id(p->msg, p->id);
	if (send(p->fd, p->msg, p->len, 0) < 0)
		return -errno;
	p->ev = event_new(p->r->base, p->fd, EV_READ | EV_PERSIST, on_upstream, p);
	struct timeval tv = { .tv_sec = ATTEMPT_TIMEOUT_MS / 1000,
			      .tv_usec = (ATTEMPT_TIMEOUT_MS % 1000) * 1000 };
	event_add(p->ev, &tv);
	return 0;
}

static void retry_or_fail(struct pending *p, const char *reason)
{
	while (p->attempt < MAX_ATTEMPTS) {
		if (attempt(p) == 0)
			return;
	}
	pending_fail(p, DNS_RCODE_SERVFAIL, reason);
}

static void on_upstream(evutil_socket_t fd, short what, void *arg)
{
	struct pending *p = arg;
	if (what & EV_TIMEOUT) {
		retry_or_fail(p, "dns_upstream_timeout");
		return;
	}
	uint8_t buf[DNS_MSG_MAX];
	for (;;) {
		ssize_t n = recv(fd, buf, sizeof(buf), 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		if (n < 0) {
			/* ICMP unreachable and the like: try the next server. */
			retry_or_fail(p, "dns_upstream_error");
			return;
		}
		struct dns_header h;
		struct dns_addr addrs[ANSWER_ADDRS_MAX];
		size_t naddrs = 0;
		if (dns_parse_response(buf, (size_t)n, p->id, &p->q, &h, addrs, ANSWER_ADDRS_MAX,
				       &naddrs) < 0)
			continue; /* not an answer to this question: keep waiting */
		struct net_resolver *r = p->r;
		if (r->policy->dns_allow_only && naddrs) {
			size_t k = naddrs < ANSWER_ADDRS_MAX ? naddrs : ANSWER_ADDRS_MAX;
			if (allow_addrs(r, addrs, k) < 0) {
				pending_fail(p, DNS_RCODE_SERVFAIL, "dns_allow_set_failed");
				return;
			}
		}
		dns_set_id(buf, p->client_id);
		if (!p->via_tcp || p->tc)
			reply(r, p->tc, (struct sockaddr *)&p->peer, p->peer_len, buf, (size_t)n);
		pending_free(p);
		return;
	}
}

/* Handles one question from the sandbox. */
static void handle_query(struct net_resolver *r, struct tcp_client *tc, const struct sockaddr *peer,
			 socklen_t peer_len, const uint8_t *msg, size_t len)
{
	struct dns_header h;
	struct dns_question q;
	size_t qend = 0;
	int rc = dns_parse_query(msg, len, &h, &q, &qend);
	if (rc < 0) {
		count("deny", "dns_malformed");
		return;
	}
	if (rc > 0) {
		count("deny", "dns_unsupported");
		reply_error(r, tc, peer, peer_len, msg, len, qend, (uint8_t)rc);
		return;
	}
	if (!dns_name_valid(q.name)) {
		count("deny", "dns_unsupported");
		reply_error(r, tc, peer, peer_len, msg, len, qend, DNS_RCODE_REFUSED);
		return;
	}
	enum net_dns_verdict v = net_policy_dns_verdict(r->policy, q.name);
	if (v != NET_DNS_ALLOW) {
		const char *reason = v == NET_DNS_DENIED ? "dns_denylist" : "dns_not_allowlisted";
		count("deny", reason);
		log_debug("net", "resolver of %s: %s refused (%s)", r->ifname, q.name, reason);
		reply_error(r, tc, peer, peer_len, msg, len, qend, DNS_RCODE_NXDOMAIN);
		return;
	}
	/* The budget (PENDING_TOTAL) is shared fairly: an owner may hold its share, a sandbox
	 * its share of its owner's, and one within its share takes a slot from the one most
	 * beyond its own when the budget is spent. */
	if (resolver_mod.n == 0 || r->npending >= resolver_limit(r, r) ||
	    r->group->npending >= group_limit(r->group, r) ||
	    (resolver_mod.pending_total >= PENDING_TOTAL && !make_room(r))) {
		count("error", "dns_busy");
		reply_error(r, tc, peer, peer_len, msg, len, qend, DNS_RCODE_SERVFAIL);
		return;
	}
	count("allow", "dns_forwarded");
	struct pending *p = xcalloc(1, sizeof(*p));
	p->r = r;
	p->fd = -1;
	p->tc = tc;
	p->via_tcp = tc != NULL;
	if (peer) {
		memcpy(&p->peer, peer, peer_len);
		p->peer_len = peer_len;
	}
	p->client_id = h.id;
	p->q = q;
	p->msg = xmalloc(len);
	memcpy(p->msg, msg, len);
	p->len = len;
	p->qend = qend;
	p->next = r->pending;
	if (r->pending)
		r->pending->prev = p;
	r->pending = p;
	pending_count(r, +1);
	retry_or_fail(p, "dns_upstream_error");
}

/* --- UDP ----------------------------------------------------------------------------- */

static void on_udp(evutil_socket_t fd, short what, void *arg)
{
	struct net_resolver *r = arg;
	uint8_t buf[QUERY_MAX];
	for (int i = 0; i < UDP_BATCH; i++) {
		struct sockaddr_storage peer;
		socklen_t plen = sizeof(peer);
		ssize_t n =
			recvfrom(fd, buf, sizeof(buf), MSG_TRUNC, (struct sockaddr *)&peer, &plen);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return;
		if ((size_t)n > sizeof(buf)) {
			count("deny", "dns_malformed");
			continue;
		}
		handle_query(r, NULL, (struct sockaddr *)&peer, plen, buf, (size_t)n);
	}
}

/* --- TCP ----------------------------------------------------------------------------- */

static void tcp_client_free(struct tcp_client *c)
{
	struct net_resolver *r = c->r;
	for (struct pending *p = r->pending; p; p = p->next)
		if (p->tc == c)
			p->tc = NULL;
	for (struct tcp_client **pp = &r->clients; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			break;
		}
	}
	r->nclients--;
	bufferevent_free(c->bev);
	free(c);
}

static void on_tcp_read(struct bufferevent *bev, void *arg)
{
	struct tcp_client *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	for (;;) {
		uint8_t hdr[2];
		if (evbuffer_copyout(in, hdr, 2) < 2)
			return;
		size_t len = (size_t)hdr[0] << 8 | hdr[1];
		if (len < DNS_HEADER_LEN || len > QUERY_MAX) {
			count("deny", "dns_malformed");
			tcp_client_free(c);
			return;
		}
		if (evbuffer_get_length(in) < 2 + len)
			return;
		uint8_t msg[QUERY_MAX];
		evbuffer_drain(in, 2);
		evbuffer_remove(in, msg, len);
		handle_query(c->r, c, NULL, 0, msg, len);
		/* handle_query may have dropped a client that does not read. */
		bool alive = false;
		for (struct tcp_client *x = c->r->clients; x && !alive; x = x->next)
			alive = x == c;
		if (!alive)
			return;
	}
}

static void on_tcp_event(struct bufferevent *bev, short what, void *arg)
{
	tcp_client_free(arg);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa, int salen,
		      void *arg)
{
	struct net_resolver *r = arg;
	if (r->nclients >= TCP_CLIENTS_MAX) {
		close(fd);
		count("error", "dns_busy");
		return;
	}
	struct bufferevent *bev = bufferevent_socket_new(r->base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (!bev) {
		close(fd);
		return;
	}
	struct tcp_client *c = xcalloc(1, sizeof(*c));
	c->r = r;
	c->bev = bev;
	c->next = r->clients;
	r->clients = c;
	r->nclients++;
	bufferevent_setcb(c->bev, on_tcp_read, NULL, on_tcp_event, c);
	struct timeval idle = { .tv_sec = TCP_IDLE_S };
	bufferevent_set_timeouts(c->bev, &idle, &idle);
	bufferevent_setwatermark(c->bev, EV_READ, 0, 2 + QUERY_MAX);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
}

/* --- life cycle ---------------------------------------------------------------------- */

struct net_resolver *net_resolver_new(struct event_base *base, int udp_fd, int tcp_fd,
				      const char *ifname, const struct net_policy *policy,
				      const char *owner)
{
	struct net_resolver *r = xcalloc(1, sizeof(*r));
	r->base = base;
	r->group = group_get(owner ? owner : "");
	r->next_all = resolver_mod.resolvers;
	resolver_mod.resolvers = r;
	r->policy = policy;
	snprintf(r->ifname, sizeof(r->ifname), "%s", ifname);
	r->udp_fd = udp_fd;
	evutil_make_socket_nonblocking(udp_fd);
	evutil_make_socket_nonblocking(tcp_fd);
	r->udp_ev = event_new(base, udp_fd, EV_READ | EV_PERSIST, on_udp, r);
	event_add(r->udp_ev, NULL);
	r->listener = evconnlistener_new(base, on_accept, r, LEV_OPT_CLOSE_ON_FREE, -1, tcp_fd);
	if (!r->listener) {
		log_warn("net", "resolver of %s: cannot serve TCP", ifname);
		close(tcp_fd);
	}
	return r;
}

void net_resolver_free(struct net_resolver *r)
{
	if (!r)
		return;
	while (r->pending)
		pending_free(r->pending);
	for (struct net_resolver **pp = &resolver_mod.resolvers; *pp; pp = &(*pp)->next_all)
		if (*pp == r) {
			*pp = r->next_all;
			break;
		}
	group_put(r->group);
	while (r->clients)
		tcp_client_free(r->clients);
	if (r->listener)
		evconnlistener_free(r->listener);
	if (r->udp_ev)
		event_free(r->udp_ev);
	if (r->udp_fd >= 0)
		close(r->udp_fd);
	/* The sandbox is going: its addresses leave the allow set now rather than at their
	 * timeout. Elements within two seconds of expiry are left to the kernel. */
	uint64_t soon = time_mono_ms() + 2000;
	size_t n = 0;
	for (size_t i = 0; i < r->ntracked; i++)
		if (r->tracked[i].expires_ms > soon)
			r->tracked[n++].addr = r->tracked[i].addr;
	if (n) {
		_cleanup_free_ uint32_t *addrs = xcalloc(n, sizeof(*addrs));
		for (size_t i = 0; i < n; i++)
			addrs[i] = r->tracked[i].addr;
		struct err e;
		if (net_nfnl_dns_del(r->ifname, addrs, n, &e) < 0)
			log_warn("net", "resolver of %s: %s", r->ifname, e.msg);
	}
	free(r->tracked);
	free(r);
}
