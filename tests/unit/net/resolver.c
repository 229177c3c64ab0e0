/* Tests of src/net/resolver.c: a resolver and a fake upstream server on one event loop, in a
 * throwaway network namespace (the allow set is a real nftables set there). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <arpa/inet.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "metrics/metrics.h"
#include "net/dns.h"
#include "net/nft.h"
#include "net/resolver.h"
#include "netns_child.h"

#define RESOLVER_ADDR "127.0.0.2"

static struct event_base *base;
static int upstream_fd;
static unsigned upstream_queries;
static uint16_t upstream_last_id;

/* --- the fake upstream ---------------------------------------------------------------- */

static size_t answer(const uint8_t *q, size_t qlen, uint16_t id, const uint8_t addr[4],
		     uint8_t *out)
{
	memcpy(out, q, qlen);
	out[0] = (uint8_t)(id >> 8);
	out[1] = (uint8_t)id;
	out[2] |= 0x80;
	out[3] = 0x80;
	out[7] = 1; /* one answer */
	size_t n = qlen;
	static const uint8_t rr[] = { 0xc0, 12, 0, 1, 0, 1, 0, 0, 0, 30, 0, 4 };
	memcpy(out + n, rr, sizeof(rr));
	n += sizeof(rr);
	memcpy(out + n, addr, 4);
	return n + 4;
}

static void on_upstream(evutil_socket_t fd, short what, void *arg)
{
	uint8_t q[512], out[600];
	struct sockaddr_storage peer;
	socklen_t plen = sizeof(peer);
	ssize_t n = recvfrom(fd, q, sizeof(q), 0, (struct sockaddr *)&peer, &plen);
	if (n < DNS_HEADER_LEN)
		return;
	upstream_queries++;
	struct dns_header h;
	struct dns_question qq;
	CHECK(dns_parse_query(q, (size_t)n, &h, &qq, NULL) == 0);
	upstream_last_id = h.id;
	if (strcmp(qq.name, "slow.example") == 0)
		return;
	static const uint8_t good[4] = { 198, 51, 100, 7 }, bad[4] = { 203, 0, 113, 66 };
	if (strcmp(qq.name, "spoof.example") == 0) {
		/* A forged answer with another id first: it must be ignored. */
		size_t k = answer(q, (size_t)n, (uint16_t)(h.id + 1), bad, out);
		sendto(fd, out, k, 0, (struct sockaddr *)&peer, plen);
	}
	size_t k = answer(q, (size_t)n, h.id, good, out);
	sendto(fd, out, k, 0, (struct sockaddr *)&peer, plen);
}

/* --- a client --------------------------------------------------------------------------- */

static size_t query(uint8_t *b, uint16_t id, const char *name, uint8_t opcode)
{
	memset(b, 0, DNS_HEADER_LEN);
	b[0] = (uint8_t)(id >> 8);
	b[1] = (uint8_t)id;
	b[2] = (uint8_t)(opcode << 3 | 1);
	b[5] = 1;
	size_t n = DNS_HEADER_LEN;
	while (*name) {
		size_t l = strcspn(name, ".");
		b[n++] = (uint8_t)l;
		memcpy(b + n, name, l);
		n += l;
		name += l;
		if (*name)
			name++;
	}
	b[n++] = 0;
	b[n++] = 0;
	b[n++] = DNS_TYPE_A;
	b[n++] = 0;
	b[n++] = DNS_CLASS_IN;
	return n;
}

struct reply {
	uint8_t b[1024];
	ssize_t n;
};

static void on_reply(evutil_socket_t fd, short what, void *arg)
{
	struct reply *r = arg;
	r->n = (what & EV_READ) ? recv(fd, r->b, sizeof(r->b), 0) : -1;
	event_base_loopbreak(base);
}

/* Sends one query over UDP and runs the loop until its answer or timeout_ms. */
static ssize_t ask_udp(const uint8_t *q, size_t n, struct reply *r, int timeout_ms)
{
	int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(53) };
	inet_pton(AF_INET, RESOLVER_ADDR, &to.sin_addr);
	CHECK(connect(fd, (struct sockaddr *)&to, sizeof(to)) == 0);
	CHECK(send(fd, q, n, 0) == (ssize_t)n);
	struct event *ev = event_new(base, fd, EV_READ, on_reply, r);
	struct timeval tv = { .tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000 };
	r->n = -1;
	event_add(ev, &tv);
	event_base_dispatch(base);
	event_free(ev);
	close(fd);
	return r->n;
}

static uint8_t rcode(const struct reply *r)
{
	return r->b[3] & 0x0f;
}

static char *capture(const char *cmd)
{
	FILE *f = popen(cmd, "r");
	if (!f)
		return strdup("");
	char *buf = calloc(1, 65536);
	size_t n = fread(buf, 1, 65535, f);
	buf[n] = '\0';
	pclose(f);
	return buf;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void run_for_ms(int ms)
{
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000 };
	event_base_loopexit(base, &tv);
	event_base_dispatch(base);
}

/* Eight sandboxes of one owner each send 64 questions nobody answers, filling the budget
 * (512); a sandbox of another owner still gets every answer: its questions take the slots of
 * the first owner's oldest. */
static void fairness(const struct net_policy *pol)
{
	enum { FLOODERS = 8, EACH = 64 };
	struct net_resolver *rs[FLOODERS + 1];
	int clients[FLOODERS];
	for (int i = 0; i <= FLOODERS; i++) {
		char addr[32];
		snprintf(addr, sizeof(addr), "127.0.0.%d", 10 + i);
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(53) };
		inet_pton(AF_INET, addr, &a.sin_addr);
		int u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		int t = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		CHECK(bind(u, (struct sockaddr *)&a, sizeof(a)) == 0);
		CHECK(bind(t, (struct sockaddr *)&a, sizeof(a)) == 0);
		CHECK(listen(t, 4) == 0);
		char name[16];
		snprintf(name, sizeof(name), "as-fair%d", i);
		rs[i] = net_resolver_new(base, u, t, name, pol, i < FLOODERS ? "flooder" : "");
		if (i == FLOODERS)
			break;
		clients[i] = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		CHECK(connect(clients[i], (struct sockaddr *)&a, sizeof(a)) == 0);
		for (int k = 0; k < EACH; k++) {
			uint8_t q[512];
			size_t n = query(q, (uint16_t)(0x6000 + k), "slow.example", 0);
			CHECK(send(clients[i], q, n, 0) == (ssize_t)n);
		}
	}
	for (int t = 0; t < 40 && net_resolver_pending_total() < FLOODERS * EACH; t++)
		run_for_ms(50);
	CHECK(net_resolver_pending_total() == FLOODERS * EACH);
	/* The other owner's sandbox (127.0.0.18; owner "" was given at creation, and a
	 * sandbox taken by a session gets its owner later). */
	net_resolver_set_owner(rs[FLOODERS], "victim");
	unsigned answered = 0;
	for (int k = 0; k < 5; k++) {
		uint8_t q[512];
		size_t n = query(q, (uint16_t)(0x7000 + k), "ok.example", 0);
		int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		struct sockaddr_in to = { .sin_family = AF_INET, .sin_port = htons(53) };
		inet_pton(AF_INET, "127.0.0.18", &to.sin_addr);
		CHECK(connect(fd, (struct sockaddr *)&to, sizeof(to)) == 0);
		CHECK(send(fd, q, n, 0) == (ssize_t)n);
		struct reply rep;
		struct event *ev = event_new(base, fd, EV_READ, on_reply, &rep);
		struct timeval tv = { 5, 0 };
		rep.n = -1;
		event_add(ev, &tv);
		event_base_dispatch(base);
		event_free(ev);
		close(fd);
		if (!(rep.n > 0 && rcode(&rep) == DNS_RCODE_NOERROR))
			fprintf(stderr, "victim %d: n %zd rcode %d pending %u\n", k, rep.n,
				rep.n > 0 ? rcode(&rep) : -1, net_resolver_pending_total());
		answered += rep.n > 0 && rcode(&rep) == DNS_RCODE_NOERROR;
	}
	CHECK(answered == 5);
	/* The budget is still spent, now shared: the flooders hold what the other left them. */
	CHECK(net_resolver_pending_total() <= FLOODERS * EACH);
	for (int i = 0; i <= FLOODERS; i++)
		net_resolver_free(rs[i]);
	for (int i = 0; i < FLOODERS; i++)
		close(clients[i]);
	CHECK(net_resolver_pending_total() == 0);
}

static void body(void)
{
	struct err e;
	metrics_init();
	base = event_base_new();
	CHECK(base != NULL);

	/* Our table, for the allow set. */
	json_t *c = net_nft_table_cmds(0x0ac80000, 16, NULL, 0);
	CHECK(net_nft_run(c, &e) == 0);
	json_decref(c);
	CHECK(net_nfnl_open(&e) == 0);

	/* The upstream server on 127.0.0.1, a port of its own. */
	upstream_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	struct sockaddr_in up = { .sin_family = AF_INET };
	inet_pton(AF_INET, "127.0.0.1", &up.sin_addr);
	CHECK(bind(upstream_fd, (struct sockaddr *)&up, sizeof(up)) == 0);
	socklen_t ulen = sizeof(up);
	CHECK(getsockname(upstream_fd, (struct sockaddr *)&up, &ulen) == 0);
	struct event *uev = event_new(base, upstream_fd, EV_READ | EV_PERSIST, on_upstream, NULL);
	event_add(uev, NULL);
	char list[64];
	snprintf(list, sizeof(list), " 127.0.0.1:%u ", ntohs(up.sin_port));
	CHECK(net_resolver_set_upstreams("1.2.3.4:0", &e) < 0);
	CHECK(net_resolver_set_upstreams("", &e) < 0);
	CHECK(net_resolver_set_upstreams(list, &e) == 0);

	/* The resolver's sockets, as net.c makes them. */
	struct sockaddr_in rs = { .sin_family = AF_INET, .sin_port = htons(53) };
	inet_pton(AF_INET, RESOLVER_ADDR, &rs.sin_addr);
	int udp = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	int tcp = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(bind(udp, (struct sockaddr *)&rs, sizeof(rs)) == 0);
	CHECK(bind(tcp, (struct sockaddr *)&rs, sizeof(rs)) == 0);
	CHECK(listen(tcp, 4) == 0);

	struct net_policy pol;
	memset(&pol, 0, sizeof(pol));
	pol.dns_allow_only = true;
	CHECK(net_names_parse("*.example", &pol.dns_allow, &e) == 0);
	CHECK(net_names_parse("bad.example", &pol.dns_deny, &e) == 0);
	struct net_resolver *r = net_resolver_new(base, udp, tcp, "as-test1", &pol, "");

	uint8_t q[512];
	struct reply rep;
	size_t n;

	/* Denied and not allowed: NXDOMAIN, upstream never asked. */
	n = query(q, 0x1111, "bad.example", 0);
	CHECK(ask_udp(q, n, &rep, 2000) > 0);
	CHECK(rcode(&rep) == DNS_RCODE_NXDOMAIN);
	CHECK(rep.b[0] == 0x11 && rep.b[1] == 0x11);
	n = query(q, 0x1112, "other.test", 0);
	CHECK(ask_udp(q, n, &rep, 2000) > 0);
	CHECK(rcode(&rep) == DNS_RCODE_NXDOMAIN);
	CHECK(upstream_queries == 0);

	/* Allowed: forwarded with an id of ours, answered with the client's. */
	n = query(q, 0x2222, "www.example", 0);
	CHECK(ask_udp(q, n, &rep, 5000) > 0);
	CHECK(rcode(&rep) == DNS_RCODE_NOERROR);
	CHECK(rep.b[0] == 0x22 && rep.b[1] == 0x22);
	CHECK(upstream_queries == 1);
	/* Its address is in the allow set, for this sandbox's link. */
	char *out = capture("nft list set inet agent_sandbox dns_allowed");
	CHECK(strstr(out, "\"as-test1\" . 198.51.100.7") != NULL);
	free(out);

	/* A forged answer is ignored; the real one comes through. */
	n = query(q, 0x3333, "spoof.example", 0);
	CHECK(ask_udp(q, n, &rep, 5000) > 0);
	CHECK(rcode(&rep) == DNS_RCODE_NOERROR);
	CHECK(memmem(rep.b, (size_t)rep.n, "\xc6\x33\x64\x07", 4) != NULL);
	CHECK(memmem(rep.b, (size_t)rep.n, "\xcb\x00\x71\x42", 4) == NULL);
	out = capture("nft list set inet agent_sandbox dns_allowed");
	CHECK(strstr(out, "203.0.113.66") == NULL);
	free(out);

	/* Over TCP: the same, with a length in front. */
	int tc = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	CHECK(connect(tc, (struct sockaddr *)&rs, sizeof(rs)) == 0);
	n = query(q + 2, 0x2323, "www.example", 0);
	q[0] = (uint8_t)(n >> 8);
	q[1] = (uint8_t)n;
	CHECK(send(tc, q, n + 2, 0) == (ssize_t)(n + 2));
	struct event *tev = event_new(base, tc, EV_READ, on_reply, &rep);
	struct timeval ttv = { .tv_sec = 5 };
	rep.n = -1;
	event_add(tev, &ttv);
	event_base_dispatch(base);
	event_free(tev);
	CHECK(rep.n > 2 + DNS_HEADER_LEN);
	CHECK((size_t)rep.n == 2 + ((size_t)rep.b[0] << 8 | rep.b[1]));
	CHECK(rep.b[2] == 0x23 && rep.b[3] == 0x23);
	CHECK((rep.b[5] & 0x0f) == DNS_RCODE_NOERROR);
	close(tc);

	/* Other opcodes: NOTIMP. Garbage: no answer at all. */
	n = query(q, 0x4444, "www.example", 2);
	CHECK(ask_udp(q, n, &rep, 2000) > 0);
	CHECK(rcode(&rep) == DNS_RCODE_NOTIMP);
	CHECK(ask_udp((const uint8_t *)"\x01\x02\x03", 3, &rep, 300) < 0);

	/* No answer upstream: SERVFAIL after every attempt. */
	unsigned before = upstream_queries;
	double t0 = now_s();
	n = query(q, 0x5555, "slow.example", 0);
	CHECK(ask_udp(q, n, &rep, 15000) > 0);
	CHECK(rcode(&rep) == DNS_RCODE_SERVFAIL);
	CHECK(upstream_queries - before == 3);
	CHECK(now_s() - t0 > 5.0);
	CHECK(net_resolver_pending_total() == 0);

	fairness(&pol);

	/* Leaving removes the addresses it allowed. */
	net_resolver_free(r);
	out = capture("nft list set inet agent_sandbox dns_allowed");
	CHECK(strstr(out, "198.51.100.7") == NULL);
	free(out);

	/* The decisions were counted. */
	char *m = metrics_render(&n);
	CHECK(strstr(m, "reason=\"dns_denylist\"") != NULL);
	CHECK(strstr(m, "reason=\"dns_not_allowlisted\"") != NULL);
	CHECK(strstr(m, "reason=\"dns_upstream_timeout\"") != NULL);
	free(m);

	c = net_nft_table_delete_cmds();
	CHECK(net_nft_run(c, &e) == 0);
	json_decref(c);
	net_nfnl_close();
	net_policy_free(&pol);
	event_free(uev);
	close(upstream_fd);
	event_base_free(base);
	metrics_reset();
}

static void test_resolver(void **state)
{
	struct err e;
	const char *missing = netns_child_missing();
	if (missing)
		fail_msg("%s", missing);
	if (net_nft_find(&e) < 0)
		fail_msg("%s (nft is in the package nftables, which make test installs)", e.msg);
	assert_int_equal(netns_child_run(body), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_resolver),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
