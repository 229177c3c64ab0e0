/* Tests of src/net/policy.c: the reference's rule syntax, domain lists, and the merge of a
 * session's override, which may only tighten the server's policy. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "net/policy.h"

static struct net_dest_rule rule(const char *s)
{
	struct net_dest_rule r;
	struct err e;
	int rc = net_rule_parse(s, &r, &e);
	if (rc < 0)
		fail_msg("`%s`: %s", s, e.msg);
	return r;
}

static void assert_rule_fails(const char *s, const char *needle)
{
	struct net_dest_rule r;
	struct err e = { 0 };
	assert_int_equal(net_rule_parse(s, &r, &e), -EINVAL);
	if (!strstr(e.msg, needle))
		fail_msg("`%s`: message `%s` lacks `%s`", s, e.msg, needle);
}

static void assert_format(const char *in, const char *want)
{
	struct net_dest_rule r = rule(in);
	char buf[64];
	net_rule_format(&r, buf, sizeof(buf));
	assert_string_equal(buf, want);
}

static void test_rule_forms(void **state)
{
	struct net_dest_rule r = rule("169.254.169.254/32");
	assert_int_equal(r.addr, 0xa9fea9fe);
	assert_int_equal(r.prefix, 32);
	assert_int_equal(r.proto, NET_PROTO_ALL);
	assert_int_equal(r.port_lo, 0);

	r = rule("10.0.0.0/8:443/tcp");
	assert_int_equal(r.addr, 0x0a000000);
	assert_int_equal(r.prefix, 8);
	assert_int_equal(r.proto, NET_PROTO_TCP);
	assert_int_equal(r.port_lo, 443);
	assert_int_equal(r.port_hi, 443);

	r = rule("1.2.3.4:80");
	assert_int_equal(r.prefix, 32);
	assert_int_equal(r.port_lo, 80);

	r = rule("198.51.100.0/24:1000-2000/UDP");
	assert_int_equal(r.proto, NET_PROTO_UDP);
	assert_int_equal(r.port_lo, 1000);
	assert_int_equal(r.port_hi, 2000);

	r = rule("0.0.0.0/0/all");
	assert_int_equal(r.prefix, 0);
	assert_int_equal(r.addr, 0);

	/* Host bits are cleared, as iptables did with the reference's rules. */
	r = rule("10.1.2.3/8");
	assert_int_equal(r.addr, 0x0a000000);

	assert_format("10.0.0.0/8:443/tcp", "10.0.0.0/8:443/tcp");
	assert_format("1.2.3.4", "1.2.3.4/32/all");
	assert_format("1.2.3.0/24:5-9/udp", "1.2.3.0/24:5-9/udp");
}

static void test_rule_errors(void **state)
{
	assert_rule_fails("", "IPv4");
	assert_rule_fails("example.com", "not an IPv4 address");
	assert_rule_fails("::1", "IPv6");
	assert_rule_fails("[2001:db8::1]:443", "IPv6");
	assert_rule_fails("10.0.0.0/33", "prefix");
	assert_rule_fails("10.0.0.0/", "protocol");
	assert_rule_fails("1.2.3.4:0", "port");
	assert_rule_fails("1.2.3.4:70000", "port");
	assert_rule_fails("1.2.3.4:", "port");
	assert_rule_fails("1.2.3.4:9-3", "range");
	assert_rule_fails("1.2.3.4:9-", "range");
	assert_rule_fails("1.2.3.4/icmp", "protocol");
	assert_rule_fails("1.2.3.4:80/tcp/x", "protocol");
	assert_rule_fails("1.2.3.4 :80", "not an IPv4");
	assert_rule_fails("256.1.1.1", "not an IPv4");
}

static void test_rule_lists(void **state)
{
	struct net_rules rs;
	struct err e;
	assert_int_equal(net_rules_parse(" 169.254.169.254/32 , ,10.0.0.0/8:443/tcp,", &rs, &e), 0);
	assert_int_equal(rs.n, 2);
	assert_int_equal(rs.v[1].port_lo, 443);
	free(rs.v);
	assert_int_equal(net_rules_parse("", &rs, &e), 0);
	assert_int_equal(rs.n, 0);
	assert_int_equal(net_rules_parse(NULL, &rs, &e), 0);
	assert_int_equal(net_rules_parse("1.2.3.4,bad", &rs, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "bad"));
}

static void test_rule_within(void **state)
{
	struct net_dest_rule net8 = rule("10.0.0.0/8");
	struct net_dest_rule net16 = rule("10.1.0.0/16");
	struct net_dest_rule web = rule("10.0.0.0/8:80-443/tcp");
	assert_true(net_rule_within(&net16, &net8));
	assert_false(net_rule_within(&net8, &net16));
	assert_true(net_rule_within(&net8, &net8));
	struct net_dest_rule r = rule("10.1.0.0/16:443/tcp");
	assert_true(net_rule_within(&r, &web));
	r = rule("10.1.0.0/16:443/udp");
	assert_false(net_rule_within(&r, &web));
	r = rule("10.1.0.0/16:443");
	assert_false(net_rule_within(&r, &web));     /* all protocols is more than tcp */
	assert_false(net_rule_within(&net16, &web)); /* any port is more than 80-443 */
	r = rule("10.1.0.0/16:80-444/tcp");
	assert_false(net_rule_within(&r, &web));
	r = rule("11.0.0.0/16");
	assert_false(net_rule_within(&r, &net8));
}

static void test_names(void **state)
{
	struct net_names ns;
	struct err e;
	assert_int_equal(net_names_parse("*.NpmJS.org, GitHub.com. ,", &ns, &e), 0);
	assert_int_equal(ns.n, 2);
	assert_string_equal(ns.v[0], "*.npmjs.org");
	assert_string_equal(ns.v[1], "github.com");
	for (size_t i = 0; i < ns.n; i++)
		free(ns.v[i]);
	free(ns.v);
	assert_int_equal(net_names_parse("a..b", &ns, &e), -EINVAL);
	assert_int_equal(net_names_parse("*", &ns, &e), -EINVAL);
	assert_int_equal(net_names_parse("a*.b", &ns, &e), -EINVAL);
	assert_int_equal(net_names_parse("*.*.b", &ns, &e), -EINVAL);
	assert_int_equal(net_names_parse("has space.com", &ns, &e), -EINVAL);
}

static void test_name_within(void **state)
{
	assert_true(net_name_within("a.example.com", "*.example.com"));
	assert_true(net_name_within("*.a.example.com", "*.example.com"));
	assert_true(net_name_within("*.example.com", "*.example.com"));
	assert_false(net_name_within("example.com", "*.example.com"));
	assert_false(net_name_within("*.example.com", "example.com"));
	assert_true(net_name_within("example.com", "example.com"));
	assert_false(net_name_within("*.com", "*.example.com"));
	assert_false(net_name_within("a.example.org", "*.example.com"));
}

static struct config base_config(void)
{
	struct config c;
	memset(&c, 0, sizeof(c));
	c.dns_domains = "";
	c.dest_rules = "";
	c.dns_upstream = "8.8.8.8";
	c.bw_rate_kbit = 10240;
	c.bw_burst_kbit = 1024;
	return c;
}

static struct net_policy server(enum net_filter_mode dns, const char *domains,
				enum net_filter_mode dest, const char *rules, bool bw)
{
	struct config c = base_config();
	c.dns_mode = dns;
	c.dns_domains = (char *)domains;
	c.dest_mode = dest;
	c.dest_rules = (char *)rules;
	c.bw_enabled = bw;
	struct net_policy p;
	struct err e;
	if (net_policy_from_config(&c, &p, &e) < 0)
		fail_msg("%s", e.msg);
	return p;
}

static void test_from_config(void **state)
{
	struct net_policy p =
		server(NET_FILTER_NONE, "ignored.example", NET_FILTER_NONE, "", false);
	assert_false(p.dns_allow_only);
	assert_int_equal(p.dns_deny.n, 0);
	assert_false(net_policy_dns_filtered(&p));
	assert_string_equal(net_policy_dns_mode(&p), "none");
	assert_string_equal(net_policy_dest_mode(&p), "none");
	net_policy_free(&p);

	p = server(NET_FILTER_ALLOW, "*.npmjs.org,github.com", NET_FILTER_ALLOW, "10.0.0.0/8",
		   true);
	assert_true(p.dns_allow_only);
	assert_int_equal(p.dns_allow.n, 2);
	assert_true(p.dest_allow_only);
	assert_true(p.dest_allow_lifts);
	assert_int_equal(p.dest_allow.n, 1);
	assert_true(p.bw_enabled);
	assert_int_equal(net_policy_dns_verdict(&p, "registry.npmjs.org"), NET_DNS_ALLOW);
	assert_int_equal(net_policy_dns_verdict(&p, "evil.example"), NET_DNS_NOT_ALLOWED);
	net_policy_free(&p);

	p = server(NET_FILTER_DENY, "*.evil.example", NET_FILTER_DENY, "1.2.3.4/32", false);
	assert_int_equal(net_policy_dns_verdict(&p, "a.evil.example"), NET_DNS_DENIED);
	assert_int_equal(net_policy_dns_verdict(&p, "good.example"), NET_DNS_ALLOW);
	assert_true(net_policy_dns_filtered(&p));
	assert_string_equal(net_policy_dest_mode(&p), "deny");
	net_policy_free(&p);

	struct config c = base_config();
	c.dest_rules = "nope";
	struct err e;
	assert_int_equal(net_policy_from_config(&c, &p, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "VM_DEST_RULES"));
	c = base_config();
	c.dns_domains = "bad domain";
	assert_int_equal(net_policy_from_config(&c, &p, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "VM_DNS_DOMAINS"));
}

static int merge(const struct net_policy *s, const char *json, struct net_policy *out,
		 struct err *e)
{
	json_error_t je;
	json_t *o = json ? json_loads(json, 0, &je) : NULL;
	if (json && !o)
		fail_msg("bad test JSON: %s", je.text);
	memset(e, 0, sizeof(*e));
	int r = net_policy_merge(s, o, out, e);
	json_decref(o);
	return r;
}

static void assert_merge_fails(const struct net_policy *s, const char *json, const char *needle)
{
	struct net_policy out;
	struct err e;
	assert_int_equal(merge(s, json, &out, &e), -EINVAL);
	if (!strstr(e.msg, needle))
		fail_msg("`%s`: message `%s` lacks `%s`", json, e.msg, needle);
}

static void test_merge_nothing(void **state)
{
	struct net_policy s = server(NET_FILTER_DENY, "x.example", NET_FILTER_NONE, "", false);
	struct net_policy out;
	struct err e;
	assert_int_equal(merge(&s, NULL, &out, &e), 0);
	assert_int_equal(out.dns_deny.n, 1);
	net_policy_free(&out);
	assert_int_equal(merge(&s, "{}", &out, &e), 0);
	net_policy_free(&out);
	assert_int_equal(merge(&s, "{\"dns\": {\"mode\": \"none\"}, \"dest\": null}", &out, &e), 0);
	assert_int_equal(out.dns_deny.n, 1);
	char *a = net_policy_dest_key(&s), *b = net_policy_dest_key(&out);
	assert_string_equal(a, b);
	free(a);
	free(b);
	net_policy_free(&out);
	net_policy_free(&s);
}

static void test_merge_dns(void **state)
{
	struct net_policy out;
	struct err e;

	/* Server without filtering: any list tightens it. */
	struct net_policy s = server(NET_FILTER_NONE, "", NET_FILTER_NONE, "", false);
	assert_int_equal(merge(&s,
			       "{\"dns\": {\"mode\": \"allow\", \"domains\": [\"*.a.example\"]}}",
			       &out, &e),
			 0);
	assert_true(out.dns_allow_only);
	assert_int_equal(net_policy_dns_verdict(&out, "x.a.example"), NET_DNS_ALLOW);
	assert_int_equal(net_policy_dns_verdict(&out, "b.example"), NET_DNS_NOT_ALLOWED);
	net_policy_free(&out);
	net_policy_free(&s);

	/* Server allow list: the session's must lie inside it. */
	s = server(NET_FILTER_ALLOW, "*.example.com,github.com", NET_FILTER_NONE, "", false);
	assert_int_equal(merge(&s,
			       "{\"dns\": {\"mode\": \"allow\", \"domains\": \"api.example.com, "
			       "*.cdn.example.com\"}}",
			       &out, &e),
			 0);
	assert_int_equal(out.dns_allow.n, 2);
	assert_int_equal(net_policy_dns_verdict(&out, "github.com"), NET_DNS_NOT_ALLOWED);
	assert_int_equal(net_policy_dns_verdict(&out, "x.cdn.example.com"), NET_DNS_ALLOW);
	net_policy_free(&out);
	assert_merge_fails(&s, "{\"dns\": {\"mode\": \"allow\", \"domains\": [\"evil.example\"]}}",
			   "evil.example");
	assert_merge_fails(&s, "{\"dns\": {\"mode\": \"allow\", \"domains\": [\"*.com\"]}}",
			   "*.com");
	/* A deny list adds to the server's allow list. */
	assert_int_equal(
		merge(&s, "{\"dns\": {\"mode\": \"deny\", \"domains\": [\"bad.example.com\"]}}",
		      &out, &e),
		0);
	assert_true(out.dns_allow_only);
	assert_int_equal(net_policy_dns_verdict(&out, "bad.example.com"), NET_DNS_DENIED);
	assert_int_equal(net_policy_dns_verdict(&out, "ok.example.com"), NET_DNS_ALLOW);
	net_policy_free(&out);
	net_policy_free(&s);

	/* Server deny list: kept under a session's allow list. */
	s = server(NET_FILTER_DENY, "bad.example", NET_FILTER_NONE, "", false);
	assert_int_equal(merge(&s, "{\"dns\": {\"mode\": \"allow\", \"domains\": [\"*.example\"]}}",
			       &out, &e),
			 0);
	assert_int_equal(net_policy_dns_verdict(&out, "bad.example"), NET_DNS_DENIED);
	assert_int_equal(net_policy_dns_verdict(&out, "good.example"), NET_DNS_ALLOW);
	net_policy_free(&out);

	assert_merge_fails(&s, "{\"dns\": {\"mode\": \"maybe\"}}", "mode");
	assert_merge_fails(&s, "{\"dns\": {\"mode\": \"deny\", \"domains\": [1]}}", "[0]");
	assert_merge_fails(&s, "{\"dns\": {\"mode\": \"deny\", \"domains\": [\"no way\"]}}",
			   "no way");
	assert_merge_fails(&s, "{\"dns\": {\"modes\": \"deny\"}}", "modes");
	assert_merge_fails(&s, "{\"dns\": []}", "object");
	net_policy_free(&s);
}

static void test_merge_dest(void **state)
{
	struct net_policy out;
	struct err e;

	/* Server with no rules: a session's allow list narrows, and opens nothing. */
	struct net_policy s = server(NET_FILTER_NONE, "", NET_FILTER_NONE, "", false);
	assert_int_equal(merge(&s, "{\"dest\": {\"mode\": \"allow\", \"rules\": [\"10.0.0.0/8\"]}}",
			       &out, &e),
			 0);
	assert_true(out.dest_allow_only);
	assert_false(out.dest_allow_lifts);
	net_policy_free(&out);
	net_policy_free(&s);

	/* Server allow list that opens 10/8: a session may keep part of it. */
	s = server(NET_FILTER_NONE, "", NET_FILTER_ALLOW, "10.0.0.0/8,198.51.100.0/24:80-443/tcp",
		   false);
	assert_int_equal(
		merge(&s,
		      "{\"dest\": {\"mode\": \"allow\", \"rules\": [\"10.9.0.0/16:5432/tcp\", "
		      "\"198.51.100.7:443/tcp\"]}}",
		      &out, &e),
		0);
	assert_true(out.dest_allow_only);
	assert_true(out.dest_allow_lifts);
	assert_int_equal(out.dest_allow.n, 2);
	net_policy_free(&out);
	assert_merge_fails(&s, "{\"dest\": {\"mode\": \"allow\", \"rules\": [\"0.0.0.0/0\"]}}",
			   "0.0.0.0/0");
	assert_merge_fails(
		&s, "{\"dest\": {\"mode\": \"allow\", \"rules\": [\"198.51.100.7:22/tcp\"]}}",
		"198.51.100.7/32:22/tcp");
	/* Deny rules add up. */
	assert_int_equal(
		merge(&s, "{\"dest\": {\"mode\": \"deny\", \"rules\": \"10.1.0.0/16\"}}", &out, &e),
		0);
	assert_int_equal(out.dest_deny.n, 1);
	assert_int_equal(out.dest_allow.n, 2);
	assert_true(out.dest_allow_lifts);
	char *k1 = net_policy_dest_key(&s), *k2 = net_policy_dest_key(&out);
	assert_string_not_equal(k1, k2);
	free(k1);
	free(k2);
	net_policy_free(&out);
	assert_merge_fails(&s, "{\"dest\": {\"mode\": \"deny\", \"rules\": [\"bad\"]}}", "bad");
	assert_merge_fails(&s, "{\"dest\": {\"rules\": 5}}", "array");
	net_policy_free(&s);
}

static void test_merge_bandwidth(void **state)
{
	struct net_policy out;
	struct err e;
	struct net_policy s = server(NET_FILTER_NONE, "", NET_FILTER_NONE, "", true);
	assert_int_equal(merge(&s, "{\"bandwidth\": {\"rateKbit\": 1000}}", &out, &e), 0);
	assert_true(out.bw_enabled);
	assert_int_equal(out.bw_rate_kbit, 1000);
	assert_int_equal(out.bw_burst_kbit, 1024);
	net_policy_free(&out);
	assert_merge_fails(&s, "{\"bandwidth\": {\"rateKbit\": 20000}}", "exceeds");
	assert_merge_fails(&s, "{\"bandwidth\": {\"burstKbit\": 5000}}", "exceeds");
	assert_merge_fails(&s, "{\"bandwidth\": {\"rateKbit\": 0}}", "rateKbit");
	assert_merge_fails(&s, "{\"bandwidth\": {\"rateKbit\": \"fast\"}}", "rateKbit");
	assert_merge_fails(&s, "{\"bandwidth\": {\"rate\": 5}}", "rate");
	net_policy_free(&s);

	/* Without a server limit any limit tightens, but it needs a rate. */
	s = server(NET_FILTER_NONE, "", NET_FILTER_NONE, "", false);
	assert_int_equal(
		merge(&s, "{\"bandwidth\": {\"rateKbit\": 50000, \"burstKbit\": 64}}", &out, &e),
		0);
	assert_true(out.bw_enabled);
	assert_int_equal(out.bw_rate_kbit, 50000);
	assert_int_equal(out.bw_burst_kbit, 64);
	net_policy_free(&out);
	assert_merge_fails(&s, "{\"bandwidth\": {\"burstKbit\": 64}}", "rateKbit is required");
	net_policy_free(&s);
}

static void test_merge_shape(void **state)
{
	struct net_policy s = server(NET_FILTER_NONE, "", NET_FILTER_NONE, "", false);
	assert_merge_fails(&s, "[]", "object");
	assert_merge_fails(&s, "{\"firewall\": {}}", "firewall");
	net_policy_free(&s);
}

static void test_copy_is_deep(void **state)
{
	struct net_policy s =
		server(NET_FILTER_ALLOW, "a.example", NET_FILTER_DENY, "1.2.3.4", true);
	struct net_policy c;
	net_policy_copy(&c, &s);
	net_policy_free(&s);
	assert_string_equal(c.dns_allow.v[0], "a.example");
	assert_int_equal(c.dest_deny.v[0].addr, 0x01020304);
	net_policy_free(&c);
	net_policy_free(&c); /* idempotent */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rule_forms),      cmocka_unit_test(test_rule_errors),
		cmocka_unit_test(test_rule_lists),      cmocka_unit_test(test_rule_within),
		cmocka_unit_test(test_names),           cmocka_unit_test(test_name_within),
		cmocka_unit_test(test_from_config),     cmocka_unit_test(test_merge_nothing),
		cmocka_unit_test(test_merge_dns),       cmocka_unit_test(test_merge_dest),
		cmocka_unit_test(test_merge_bandwidth), cmocka_unit_test(test_merge_shape),
		cmocka_unit_test(test_copy_is_deep),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
