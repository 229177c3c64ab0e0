/* Tests of src/net/net.c: whole sandbox networks, made and removed in a child process that
 * has a network namespace and a mount namespace (with its own /run) of its own, so that the
 * module's host-wide state (the lock, /run/netns, our table) is the child's alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "net/net.h"
#include "net/nft.h"
#include "netns_child.h"
#include "../wait.h"

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

static bool exists(const char *path)
{
	struct stat st;
	return lstat(path, &st) == 0;
}

/* A private /run, as netbench and tests/net have. */
static void private_run(void)
{
	CHECK(unshare(CLONE_NEWNS) == 0);
	CHECK(mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0);
	CHECK(mount("tmpfs", "/run", "tmpfs", 0, "mode=0755") == 0);
}

static struct config config(void)
{
	struct config c;
	memset(&c, 0, sizeof(c));
	c.dns_domains = "";
	c.dest_rules = "";
	c.dns_upstream = "192.0.2.53";
	c.bw_enabled = true;
	c.bw_rate_kbit = 8000;
	c.bw_burst_kbit = 256;
	return c;
}

/* Whether the kernel has dismantled the namespaces of removed sandboxes: no link of ours
 * is left. */
static bool links_gone(void *unused)
{
	char *out = capture("ip -br link");
	bool gone = strstr(out, "as-") == NULL;
	free(out);
	return gone;
}

static void body(void)
{
	private_run();
	struct event_base *base = event_base_new();
	struct config cfg = config();
	struct err e;
	cfg.network = "on";
	cfg.net_pool = "10.250.0.0/29"; /* two sandboxes at most */
	CHECK(net_init(base, &cfg, &e) == 0);
	CHECK(net_enabled());
	char *out = capture("nft list table inet agent_sandbox");
	CHECK(strstr(out, "masquerade") != NULL);
	free(out);

	/* A jail's network. */
	char *path = NULL;
	CHECK(net_sandbox_create("sb-00000000000a", NULL, false, &path, &e) == 0);
	CHECK(path && strcmp(path, "/run/netns/as-00000000000a") == 0);
	CHECK(exists(path));
	struct net_sandbox_info info;
	CHECK(net_sandbox_info("sb-00000000000a", &info) == 0);
	CHECK(strcmp(info.name, "as-00000000000a") == 0);
	CHECK(strcmp(info.guest_addr, "10.250.0.1") == 0);
	CHECK(strcmp(info.gateway, "10.250.0.0") == 0);
	CHECK(strcmp(info.dns, "10.250.0.2") == 0);
	CHECK(!info.tap);
	char rc[128];
	CHECK(net_resolv_conf_path(path, rc, sizeof(rc)) == 0);
	CHECK(strcmp(rc, info.resolv_conf) == 0);
	out = capture("cat /run/agent-sandbox-net/as-00000000000a/resolv.conf");
	CHECK(strcmp(out, "nameserver 10.250.0.2\n") == 0);
	free(out);
	out = capture("ip netns exec as-00000000000a ip -4 addr; "
		      "ip netns exec as-00000000000a ip -4 route; "
		      "ip netns exec as-00000000000a cat /proc/sys/net/ipv6/conf/all/disable_ipv6; "
		      "ip netns exec as-00000000000a ss -lnu; tc qdisc show dev as-00000000000a");
	CHECK(strstr(out, "inet 10.250.0.1/31") != NULL);
	CHECK(strstr(out, "inet 10.250.0.2/32 scope global lo") != NULL);
	CHECK(strstr(out, "default via 10.250.0.0 dev eth0") != NULL);
	CHECK(strstr(out, "\n1\n") != NULL);
	CHECK(strstr(out, "10.250.0.2:53") != NULL);
	CHECK(strstr(out, "tbf") != NULL && strstr(out, "rate 8Mbit") != NULL);
	free(out);
	out = capture("nft list map inet agent_sandbox egress");
	CHECK(strstr(out, "\"as-00000000000a\" : goto pol_") != NULL);
	free(out);
	/* Not twice. No TAP for a jail. */
	char *again = NULL;
	CHECK(net_sandbox_create("sb-00000000000a", NULL, false, &again, &e) == -EEXIST);
	CHECK(net_sandbox_tap_open("sb-00000000000a", false, &e) < 0);

	/* A VM's network, with a session's own policy (a new chain). */
	struct net_policy *pol;
	json_error_t je;
	json_t *o = json_loads("{\"dest\": {\"mode\": \"deny\", \"rules\": [\"192.0.2.0/24\"]}}", 0,
			       &je);
	CHECK(net_policy_for_session(o, &pol, &e) == 0);
	json_decref(o);
	char *vpath = NULL;
	CHECK(net_sandbox_create("sb-00000000000b", pol, true, &vpath, &e) == 0);
	CHECK(net_sandbox_info("sb-00000000000b", &info) == 0);
	CHECK(info.tap && strcmp(info.tap_name, "tap0") == 0);
	CHECK(strcmp(info.guest_addr, "10.250.0.7") == 0);
	CHECK(strcmp(info.gateway, "10.250.0.6") == 0);
	CHECK(strcmp(info.dns, "10.250.0.6") == 0);
	int tap = net_sandbox_tap_open("sb-00000000000b", true, &e);
	CHECK(tap >= 0);
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	CHECK(ioctl(tap, TUNGETIFF, &ifr) == 0);
	CHECK(strcmp(ifr.ifr_name, "tap0") == 0);
	CHECK(ifr.ifr_flags & IFF_VNET_HDR);
	close(tap);
	out = capture("ip route; ip netns exec as-00000000000b ip -4 addr show tap0; "
		      "nft list table inet agent_sandbox");
	CHECK(strstr(out, "10.250.0.6/31 via 10.250.0.5 dev as-00000000000b") != NULL);
	CHECK(strstr(out, "inet 10.250.0.6/31") != NULL);
	CHECK(strstr(out, "192.0.2.0/24 drop") != NULL);
	free(out);

	/* The pool is full. */
	char *none = NULL;
	CHECK(net_sandbox_create("sb-00000000000c", NULL, false, &none, &e) == -EAGAIN);
	CHECK(strstr(e.msg, "SANDBOX_NET_POOL") != NULL);
	CHECK(net_sandbox_count() == 2);

	/* The resolvers come and go on the loop thread. */
	net_sandbox_start("sb-00000000000a");
	net_sandbox_start("sb-00000000000b");
	net_sandbox_stop("sb-00000000000a");
	net_sandbox_stop("sb-00000000000b");
	net_sandbox_stop("sb-unknown");

	net_sandbox_destroy("sb-00000000000a");
	net_sandbox_destroy("sb-00000000000b");
	net_sandbox_destroy("sb-00000000000b"); /* twice: nothing */
	net_policy_destroy(pol);
	CHECK(net_sandbox_count() == 0);
	CHECK(!exists(path) && !exists(vpath));
	CHECK(!exists("/run/agent-sandbox-net/as-00000000000a"));
	out = capture("nft list table inet agent_sandbox");
	CHECK(strstr(out, "as-0000") == NULL);
	/* The session's chain went with its last sandbox; the server's stays. */
	CHECK(strstr(out, "192.0.2.0/24") == NULL);
	CHECK(strstr(out, "chain pol_") != NULL);
	free(out);
	CHECK(wait_until(links_gone, NULL, WAIT_TIMEOUT_MS, "the removed sandboxes' links to go"));
	/* Released addresses are handed out again once their links are gone. */
	CHECK(net_sandbox_create("sb-00000000000c", NULL, false, &none, &e) == 0);
	net_sandbox_destroy("sb-00000000000c");
	free(none);

	net_shutdown();
	CHECK(!net_enabled());
	out = capture("nft list tables; ip -br link; ls /run/netns /run/agent-sandbox-net");
	CHECK(strstr(out, "agent_sandbox") == NULL);
	CHECK(strstr(out, "as-") == NULL);
	free(out);
	free(path);
	free(vpath);
	event_base_free(base);
}

static void bad_settings_body(void)
{
	private_run();
	struct event_base *base = event_base_new();
	struct config cfg = config();
	struct err e;
	cfg.network = "auto";
	cfg.net_pool = "10.250.0.1/16";
	/* A mistake in the settings is an error even in auto mode. */
	CHECK(net_init(base, &cfg, &e) == -EINVAL);
	CHECK(strstr(e.msg, "host bits") != NULL);
	cfg.net_pool = "10.250.0.0/16";
	cfg.dest_rules = "10.0.0.0/8:http";
	cfg.dest_mode = NET_FILTER_DENY;
	CHECK(net_init(base, &cfg, &e) == -EINVAL);
	CHECK(strstr(e.msg, "VM_DEST_RULES") != NULL);
	cfg = config();
	cfg.network = "maybe";
	CHECK(net_init(base, &cfg, &e) == -EINVAL);
	/* Off: nothing is set up, creation gives no namespace. */
	cfg.network = "off";
	CHECK(net_init(base, &cfg, &e) == 0);
	CHECK(!net_enabled());
	char *path = (char *)"unset";
	CHECK(net_sandbox_create("sb-000000000001", NULL, false, &path, &e) == 0);
	CHECK(path == NULL);
	net_sandbox_destroy("sb-000000000001");
	char *out = capture("nft list tables");
	CHECK(strstr(out, "agent_sandbox") == NULL);
	free(out);
	event_base_free(base);
}

static void test_sandbox_networks(void **state)
{
	struct err e;
	const char *missing = netns_child_missing();
	if (missing)
		fail_msg("%s", missing);
	if (net_nft_find(&e) < 0)
		fail_msg("%s (nft is in the package nftables, which make test installs)", e.msg);
	/* A device the machine may not have (a container without it): the one reason to skip. */
	if (access("/dev/net/tun", R_OK) != 0) {
		print_message("skipped: no /dev/net/tun on this machine\n");
		skip();
	}
	assert_int_equal(netns_child_run(body), 0);
}

static void test_bad_settings(void **state)
{
	const char *missing = netns_child_missing();
	if (missing)
		fail_msg("%s", missing);
	assert_int_equal(netns_child_run(bad_settings_body), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sandbox_networks),
		cmocka_unit_test(test_bad_settings),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
