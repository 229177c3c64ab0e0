/* Tests of src/net/nft.c: the JSON batches we give nft, and the set elements we write over
 * nfnetlink ourselves. The kernel tests run in throwaway network namespaces. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "net/nft.h"
#include "netns_child.h"

#define POOL_BASE 0x0ac80000u /* 10.200.0.0 */

static struct net_policy policy(bool allow_only, bool lifts, const char *allow, const char *deny,
				bool dns_allow, const char *dns_deny)
{
	struct net_policy p;
	memset(&p, 0, sizeof(p));
	struct err e;
	p.dest_allow_only = allow_only;
	p.dest_allow_lifts = lifts;
	p.dns_allow_only = dns_allow;
	if (net_rules_parse(allow, &p.dest_allow, &e) < 0 ||
	    net_rules_parse(deny, &p.dest_deny, &e) < 0 ||
	    net_names_parse(dns_deny, &p.dns_deny, &e) < 0)
		fail_msg("%s", e.msg);
	return p;
}

static char *dump(json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	json_decref(j);
	return s;
}

/* The verdict of the last rule of a policy chain. */
static const char *last_verdict(json_t *cmds)
{
	json_t *last = json_array_get(cmds, json_array_size(cmds) - 1);
	json_t *expr =
		json_object_get(json_object_get(json_object_get(last, "add"), "rule"), "expr");
	json_t *v = json_array_get(expr, json_array_size(expr) - 1);
	return json_object_get(v, "accept") ? "accept" : json_object_get(v, "drop") ? "drop" : "?";
}

static void test_policy_open(void **state)
{
	struct net_policy p = policy(false, false, "", "", false, "");
	json_t *c = net_nft_policy_cmds("pol_x", &p, POOL_BASE, 16);
	assert_string_equal(last_verdict(c), "accept");
	char *s = dump(c);
	/* The default blocks, the host, the pool, IPv6. */
	assert_non_null(strstr(s, "\"169.254.0.0\""));
	assert_non_null(strstr(s, "\"100.64.0.0\""));
	assert_non_null(strstr(s, "@host_addrs"));
	assert_non_null(strstr(s, "\"10.200.0.0\""));
	assert_non_null(strstr(s, "\"ipv6\""));
	/* No name filtering: no port-53 block, no resolved-address set. */
	assert_null(strstr(s, "853"));
	assert_null(strstr(s, "@dns_allowed"));
	free(s);
	net_policy_free(&p);
}

static void test_policy_closed(void **state)
{
	struct net_policy p = policy(true, true, "10.0.0.0/8:5432/tcp,198.51.100.0/24:80-443", "",
				     true, "x.example");
	json_t *c = net_nft_policy_cmds("pol_y", &p, POOL_BASE, 16);
	assert_string_equal(last_verdict(c), "drop");
	char *s = dump(c);
	assert_non_null(strstr(s, "@dns_allowed"));
	assert_non_null(strstr(s, "853"));
	assert_non_null(strstr(s, "{\"range\":[80,443]}"));
	assert_non_null(strstr(s, "\"th\""));
	/* An allow rule that opens a default-blocked range comes before the default blocks. */
	char *allow = strstr(s, "5432");
	char *blocks = strstr(s, "169.254.0.0");
	assert_non_null(allow);
	assert_non_null(blocks);
	assert_true(allow < blocks);
	free(s);
	net_policy_free(&p);

	/* Without the server's say-so, an allow list comes after the default blocks. */
	p = policy(true, false, "10.0.0.0/8", "", false, "");
	s = dump(net_nft_policy_cmds("pol_z", &p, POOL_BASE, 16));
	const char *opened = strstr(s, "\"10.0.0.0\",\"len\":8}}}},{\"accept\":null}");
	assert_non_null(opened);
	assert_true(opened > strstr(s, "169.254.0.0"));
	free(s);
	net_policy_free(&p);
}

static void test_chain_names(void **state)
{
	char a[NET_NFT_CHAIN_MAX], b[NET_NFT_CHAIN_MAX];
	net_nft_policy_chain_name("any", a);
	net_nft_policy_chain_name("only", b);
	assert_int_equal(strlen(a), 4 + 16);
	assert_memory_equal(a, "pol_", 4);
	assert_string_not_equal(a, b);
	net_nft_policy_chain_name("any", b);
	assert_string_equal(a, b);
}

/* Output of a shell command (run in the child's namespace). */
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

static void kernel_body(void)
{
	struct err e;
	uint32_t host[] = { 0x0a000001, 0xc0000202 };
	json_t *c = net_nft_table_cmds(POOL_BASE, 16, host, 2);
	if (net_nft_run(c, &e) < 0) {
		fprintf(stderr, "table: %s\n", e.msg);
		CHECK(0);
	}
	json_decref(c);
	/* Replacing the table (a stale one after a crash) works the same. */
	c = net_nft_table_cmds(POOL_BASE, 16, host, 2);
	CHECK(net_nft_run(c, &e) == 0);
	json_decref(c);

	struct net_policy pols[] = {
		policy(false, false, "", "", false, ""),
		policy(true, true, "10.0.0.0/8,192.0.2.0/24:1-100/udp", "", false, ""),
		policy(false, false, "", "1.2.3.4:443/tcp,5.6.0.0/16", false, "bad.example"),
		policy(true, false, "0.0.0.0/0:443/tcp", "", true, ""),
	};
	for (size_t i = 0; i < sizeof(pols) / sizeof(pols[0]); i++) {
		char name[NET_NFT_CHAIN_MAX];
		char *key = net_policy_dest_key(&pols[i]);
		net_nft_policy_chain_name(key, name);
		free(key);
		c = net_nft_policy_cmds(name, &pols[i], POOL_BASE, 16);
		if (net_nft_run(c, &e) < 0) {
			fprintf(stderr, "policy %zu: %s\n", i, e.msg);
			CHECK(0);
		}
		json_decref(c);
		if (i == 0) {
			CHECK(net_nfnl_open(&e) == 0);
			CHECK(net_nfnl_egress_add("as-test1", name, &e) == 0);
		}
		net_policy_free(&pols[i]);
	}
	/* A chain that does not exist is refused by the kernel. */
	CHECK(net_nfnl_egress_add("as-test2", "pol_nothere", &e) < 0);
	char *out = capture("nft -j list map inet agent_sandbox egress");
	CHECK(strstr(out, "as-test1") != NULL);
	CHECK(strstr(out, "as-test2") == NULL);
	free(out);

	uint32_t addrs[] = { 0xc6336407, 0xc6336408 };
	uint32_t tmo[] = { 60000, 120000 };
	CHECK(net_nfnl_dns_add("as-test1", addrs, tmo, 2, &e) == 0);
	/* Adding again is not an error. */
	CHECK(net_nfnl_dns_add("as-test1", addrs, tmo, 1, &e) == 0);
	out = capture("nft list set inet agent_sandbox dns_allowed");
	CHECK(strstr(out, "\"as-test1\" . 198.51.100.7") != NULL);
	CHECK(strstr(out, "\"as-test1\" . 198.51.100.8") != NULL);
	free(out);
	CHECK(net_nfnl_dns_del("as-test1", addrs, 1, &e) == 0);
	/* One of the two is gone already: the other is still removed. */
	CHECK(net_nfnl_dns_del("as-test1", addrs, 2, &e) == 0);
	out = capture("nft list set inet agent_sandbox dns_allowed");
	CHECK(strstr(out, "198.51.100") == NULL);
	free(out);

	CHECK(net_nfnl_egress_del("as-test1", &e) == 0);
	CHECK(net_nfnl_egress_del("as-test1", &e) == -ENOENT);

	uint32_t more[] = { 0x0a000001, 0x0a000002, 0x0a000003 };
	c = net_nft_host_addrs_cmds(more, 3);
	CHECK(net_nft_run(c, &e) == 0);
	json_decref(c);
	out = capture("nft list set inet agent_sandbox host_addrs");
	CHECK(strstr(out, "10.0.0.3") != NULL);
	CHECK(strstr(out, "192.0.2.2") == NULL);
	free(out);

	c = net_nft_table_delete_cmds();
	CHECK(net_nft_run(c, &e) == 0);
	json_decref(c);
	c = net_nft_table_delete_cmds();
	CHECK(net_nft_run(c, &e) == 0); /* nothing to delete is fine */
	json_decref(c);
	out = capture("nft list tables");
	CHECK(strstr(out, "agent_sandbox") == NULL);
	free(out);

	/* A batch nft refuses comes back with its message. */
	c = json_pack("[{s:{s:{s:s, s:s, s:s}}}]", "add", "chain", "family", "inet", "table",
		      "nope", "name", "x");
	CHECK(net_nft_run(c, &e) < 0);
	CHECK(strstr(e.msg, "nft refused") != NULL);
	json_decref(c);
	net_nfnl_close();
}

static void test_kernel(void **state)
{
	struct err e;
	const char *missing = netns_child_missing();
	if (missing)
		fail_msg("%s", missing);
	if (net_nft_find(&e) < 0)
		fail_msg("%s (nft is in the package nftables, which make test installs)", e.msg);
	assert_int_equal(netns_child_run(kernel_body), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_policy_open),
		cmocka_unit_test(test_policy_closed),
		cmocka_unit_test(test_chain_names),
		cmocka_unit_test(test_kernel),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
