/* Tests of src/net/nl.c against the kernel, in throwaway network namespaces. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "net/nl.h"
#include "netns_child.h"

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

static void body(void)
{
	struct net_nl nl, peer_nl;
	struct err e;
	/* A second namespace for the veth's peer, as a sandbox's would be. */
	int here = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	CHECK(here >= 0);
	CHECK(unshare(CLONE_NEWNET) == 0);
	int there = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	CHECK(there >= 0);
	CHECK(net_nl_open(&peer_nl, &e) == 0);
	CHECK(setns(here, CLONE_NEWNET) == 0);
	CHECK(net_nl_open(&nl, &e) == 0);

	CHECK(net_nl_link_index(&nl, "lo", &e) == 1);
	CHECK(net_nl_link_index(&nl, "nothere0", &e) == -ENODEV);
	CHECK(strstr(e.msg, "nothere0") != NULL);

	if (net_nl_veth_add(&nl, "as-t1", "eth0", there, &e) < 0) {
		fprintf(stderr, "%s\n", e.msg);
		CHECK(0);
	}
	/* Twice: the name is taken. */
	CHECK(net_nl_veth_add(&nl, "as-t1", "eth0", there, &e) < 0);
	int h = net_nl_link_index(&nl, "as-t1", &e);
	CHECK(h > 1);
	int p = net_nl_link_index(&peer_nl, "eth0", &e);
	CHECK(p > 1);
	/* The peer is not here. */
	CHECK(net_nl_link_index(&nl, "eth0", &e) == -ENODEV);

	CHECK(net_nl_addr_add(&nl, h, 0x0ac80000, 31, &e) == 0);
	CHECK(net_nl_addr_add(&nl, h, 0x0ac80000, 31, &e) < 0);
	CHECK(net_nl_addr_add(&peer_nl, p, 0x0ac80001, 31, &e) == 0);
	CHECK(net_nl_link_up(&peer_nl, p, &e) == 0);
	CHECK(net_nl_link_up(&peer_nl, 1, &e) == 0);
	CHECK(net_nl_route_add(&peer_nl, 0, 0, 0x0ac80000, p, &e) == 0);
	CHECK(net_nl_route_add(&nl, 0x0ac80002, 31, 0x0ac80001, h, &e) == 0);

	char *out = capture("ip -4 route show");
	CHECK(strstr(out, "10.200.0.2/31 via 10.200.0.1 dev as-t1") != NULL);
	free(out);

	CHECK(net_nl_qdisc_tbf(&nl, h, 125000, 16000, &e) == 0);
	/* Replacing it works the same. */
	CHECK(net_nl_qdisc_tbf(&nl, h, 250000, 16000, &e) == 0);
	out = capture("tc qdisc show dev as-t1");
	CHECK(strstr(out, "tbf") != NULL);
	CHECK(strstr(out, "rate 2Mbit") != NULL);
	CHECK(strstr(out, "burst 16000b") != NULL);
	free(out);

	uint32_t *addrs;
	size_t n;
	CHECK(net_nl_addrs4(&nl, NULL, &addrs, &n, &e) == 0);
	CHECK(n == 2);
	CHECK(addrs[0] == 0x0ac80000 && addrs[1] == 0x7f000001);
	free(addrs);
	CHECK(net_nl_addrs4(&nl, "as-", &addrs, &n, &e) == 0);
	CHECK(n == 1 && addrs[0] == 0x7f000001);
	free(addrs);

	CHECK(net_nl_link_del(&nl, "as-t1", &e) == 0);
	CHECK(net_nl_link_del(&nl, "as-t1", &e) == -ENODEV);
	/* The peer went with it. */
	CHECK(net_nl_link_index(&peer_nl, "eth0", &e) == -ENODEV);
	net_nl_close(&nl);
	net_nl_close(&peer_nl);
	close(here);
	close(there);
}

static void test_links(void **state)
{
	const char *missing = netns_child_missing();
	if (missing)
		fail_msg("%s", missing);
	if (access("/sbin/tc", X_OK) != 0)
		fail_msg("no /sbin/tc (package iproute2, which make test installs)");
	assert_int_equal(netns_child_run(body), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_links),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
