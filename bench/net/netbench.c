/* netbench: how long a sandbox's network takes to set up and tear down through src/net,
 * beside the reference project's sequence of `ip`/`iptables` shell-outs for the same job,
 * replayed in the same run.
 *
 * Everything happens in throwaway namespaces: the process first moves into a new network
 * namespace and a private mount namespace with a tmpfs on /run, so that our nftables table,
 * the reference's iptables rules, every veth, TAP and named namespace (/run/netns) exist only
 * there and vanish with the process. Nothing is sent anywhere.
 *
 * Usage: netbench [--runs N] [--ref-runs N] [--json FILE]   (root) */
#include <errno.h>
#include <event2/event.h>
#include <math.h>
#include <net/if.h>
#include <sched.h>
#include <spawn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../stats.h"
#include "config.h"
#include "net/net.h"
#include "util/log.h"

extern char **environ;

#define WARMUP 5

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void die(const char *what)
{
	fprintf(stderr, "netbench: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* A network namespace and a private mount namespace with an empty /run of our own. */
static void isolate(void)
{
	if (unshare(CLONE_NEWNS | CLONE_NEWNET) < 0)
		die("unshare");
	if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		die("making / private");
	if (mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755") < 0)
		die("tmpfs on /run");
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	strcpy(ifr.ifr_name, "lo");
	if (s < 0 || ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		die("lo");
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		die("lo up");
	close(s);
}

/* Runs one command through /bin/sh, as the reference's exec() did. */
static int shell(const char *cmd)
{
	char *argv[] = { "sh", "-c", (char *)cmd, NULL };
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", 0x1 /* O_WRONLY */, 0);
	pid_t pid;
	int e = posix_spawn(&pid, "/bin/sh", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (e)
		return -e;
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* The reference's per-VM sequence: namespace, veth, TAP, forwarding and NAT inside, NAT and
 * forwarding rules on the host, one egress rule; then its teardown. 20 + 5 commands. */
static int reference(unsigned n, double *setup, double *teardown)
{
	char c[25][256];
	unsigned a = n % 250 + 1;
	int k = 0;
	snprintf(c[k++], 256, "ip netns add fc-%u", n);
	snprintf(c[k++], 256, "ip link add veth-%u type veth peer name vpeer-%u", n, n);
	snprintf(c[k++], 256, "ip link set vpeer-%u netns fc-%u", n, n);
	snprintf(c[k++], 256, "ip addr add 10.0.%u.1/30 dev veth-%u", a, n);
	snprintf(c[k++], 256, "ip link set veth-%u up", n);
	snprintf(c[k++], 256, "ip netns exec fc-%u ip addr add 10.0.%u.2/30 dev vpeer-%u", n, a, n);
	snprintf(c[k++], 256, "ip netns exec fc-%u ip link set vpeer-%u up", n, n);
	snprintf(c[k++], 256, "ip netns exec fc-%u ip link set lo up", n);
	snprintf(c[k++], 256, "ip netns exec fc-%u ip route add default via 10.0.%u.1", n, a);
	snprintf(c[k++], 256, "ip netns exec fc-%u ip tuntap add tap0 mode tap", n);
	snprintf(c[k++], 256, "ip netns exec fc-%u ip addr add 172.16.0.1/30 dev tap0", n);
	snprintf(c[k++], 256, "ip netns exec fc-%u ip link set tap0 up", n);
	snprintf(c[k++], 256, "ip netns exec fc-%u sysctl -qw net.ipv4.ip_forward=1", n);
	snprintf(c[k++], 256,
		 "ip netns exec fc-%u iptables -t nat -A POSTROUTING -o vpeer-%u -j MASQUERADE", n,
		 n);
	snprintf(c[k++], 256,
		 "ip netns exec fc-%u iptables -A FORWARD -i tap0 -o vpeer-%u -j ACCEPT", n, n);
	snprintf(c[k++], 256,
		 "ip netns exec fc-%u iptables -A FORWARD -i vpeer-%u -o tap0 -m state --state "
		 "RELATED,ESTABLISHED -j ACCEPT",
		 n, n);
	snprintf(c[k++], 256,
		 "iptables -t nat -A POSTROUTING -s 10.0.%u.0/30 -o eth0 -j MASQUERADE", a);
	snprintf(c[k++], 256, "iptables -A FORWARD -i veth-%u -j ACCEPT", n);
	snprintf(c[k++], 256,
		 "iptables -A FORWARD -o veth-%u -m state --state RELATED,ESTABLISHED -j ACCEPT",
		 n);
	snprintf(c[k++], 256, "iptables -I FORWARD -i veth-%u -d 169.254.169.254/32 -j DROP", n);
	int nsetup = k;
	snprintf(c[k++], 256, "iptables -D FORWARD -i veth-%u -d 169.254.169.254/32 -j DROP", n);
	snprintf(c[k++], 256,
		 "iptables -D FORWARD -o veth-%u -m state --state RELATED,ESTABLISHED -j ACCEPT",
		 n);
	snprintf(c[k++], 256, "iptables -D FORWARD -i veth-%u -j ACCEPT", n);
	snprintf(c[k++], 256,
		 "iptables -t nat -D POSTROUTING -s 10.0.%u.0/30 -o eth0 -j MASQUERADE", a);
	snprintf(c[k++], 256, "ip link del veth-%u && ip netns del fc-%u", n, n);
	double t0 = now_ms();
	for (int i = 0; i < k; i++) {
		if (i == nsetup)
			*setup = now_ms() - t0;
		if (shell(c[i]) < 0) {
			fprintf(stderr, "netbench: reference step failed: %s\n", c[i]);
			return -1;
		}
	}
	*teardown = now_ms() - t0 - *setup;
	return 0;
}

static int ours(unsigned n, bool tap, double *setup, double *teardown)
{
	char id[32];
	snprintf(id, sizeof(id), "sb-%012x", n);
	struct err e;
	char *path = NULL;
	double t0 = now_ms();
	if (net_sandbox_create(id, NULL, tap, &path, &e) < 0) {
		fprintf(stderr, "netbench: %s\n", e.msg);
		return -1;
	}
	net_sandbox_start(id);
	double t1 = now_ms();
	net_sandbox_stop(id);
	net_sandbox_destroy(id);
	double t2 = now_ms();
	free(path);
	*setup = t1 - t0;
	*teardown = t2 - t1;
	return 0;
}

struct series {
	const char *name;
	double *setup, *teardown, *total;
	size_t n;
	double p50[3], p99[3];
};

static void summarize(struct series *s)
{
	double *v[3] = { s->setup, s->teardown, s->total };
	for (int i = 0; i < 3; i++) {
		s->p50[i] = bench_pct(v[i], s->n, 50);
		s->p99[i] = bench_pct(v[i], s->n, 99);
	}
}

/* Waits until the kernel has dismantled the namespaces and links of the previous series, so
 * that its background work does not count against the next one. */
static void settle(void)
{
	for (int i = 0; i < 600; i++) {
		struct if_nameindex *ifs = if_nameindex();
		bool busy = false;
		for (struct if_nameindex *p = ifs; p && p->if_index; p++)
			busy |= strncmp(p->if_name, "as-", 3) == 0 ||
				strncmp(p->if_name, "veth-", 5) == 0;
		if_freenameindex(ifs);
		if (!busy)
			break;
		usleep(50 * 1000);
	}
	usleep(500 * 1000);
}

static int measure(struct series *s, size_t n, int which)
{
	settle();
	s->setup = calloc(n, sizeof(double));
	s->teardown = calloc(n, sizeof(double));
	s->total = calloc(n, sizeof(double));
	static unsigned serial;
	for (size_t i = 0; i < n + WARMUP; i++) {
		double a, b;
		int r = which == 2 ? reference(serial++, &a, &b)
				   : ours(serial++, which == 1, &a, &b);
		if (r < 0)
			return -1;
		if (i < WARMUP)
			continue;
		s->setup[s->n] = a;
		s->teardown[s->n] = b;
		s->total[s->n] = a + b;
		s->n++;
	}
	summarize(s);
	return 0;
}

int main(int argc, char **argv)
{
	size_t runs = 200, ref_runs = 30;
	const char *json = NULL;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
			runs = strtoul(argv[++i], NULL, 10);
		else if (strcmp(argv[i], "--ref-runs") == 0 && i + 1 < argc)
			ref_runs = strtoul(argv[++i], NULL, 10);
		else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc)
			json = argv[++i];
		else {
			fprintf(stderr,
				"usage: netbench [--runs N] [--ref-runs N] [--json FILE]\n");
			return 2;
		}
	}
	if (geteuid() != 0) {
		fprintf(stderr, "netbench: needs root (namespaces, links, nftables)\n");
		return 1;
	}
	if (runs < 1 || ref_runs < 1)
		return 2;
	isolate();
	log_set_level(LOG_WARN);
	setenv("SANDBOX_NETWORK", "on", 1);

	struct config cfg;
	struct err e;
	if (config_load(&cfg, &e) < 0) {
		fprintf(stderr, "netbench: %s\n", e.msg);
		return 1;
	}
	struct event_base *base = event_base_new();
	if (net_init(base, &cfg, &e) < 0) {
		fprintf(stderr, "netbench: %s\n", e.msg);
		return 1;
	}

	struct series s[3] = {
		{ .name = "src/net, jail (veth)" },
		{ .name = "src/net, VM (veth + TAP)" },
		{ .name = "reference shell-outs" },
	};
	if (measure(&s[2], ref_runs, 2) < 0 || measure(&s[0], runs, 0) < 0 ||
	    measure(&s[1], runs, 1) < 0)
		return 1;
	net_shutdown();

	printf("sandbox network setup + teardown, milliseconds (%zu runs each, %zu of the "
	       "reference)\n",
	       runs, ref_runs);
	printf("%-26s %9s %9s %9s %9s %9s %9s\n", "", "setup p50", "p99", "teardown", "p99",
	       "total p50", "p99");
	for (int i = 0; i < 3; i++)
		printf("%-26s %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f\n", s[i].name, s[i].p50[0],
		       s[i].p99[0], s[i].p50[1], s[i].p99[1], s[i].p50[2], s[i].p99[2]);
	double ratio_vm = s[2].p50[2] / s[1].p50[2], ratio_jail = s[2].p50[2] / s[0].p50[2];
	printf("reference / src/net, total p50: %.1fx (VM), %.1fx (jail); setup p50: %.1fx (VM)\n",
	       ratio_vm, ratio_jail, s[2].p50[0] / s[1].p50[0]);
	printf("target: at least 20x: %s\n", ratio_vm >= 20 ? "met" : "NOT met");

	if (json) {
		FILE *f = fopen(json, "w");
		if (!f)
			die(json);
		fprintf(f, "{\"runs\": %zu, \"refRuns\": %zu, \"series\": [", runs, ref_runs);
		for (int i = 0; i < 3; i++)
			fprintf(f,
				"%s{\"name\": \"%s\", \"setupP50\": %.4f, \"setupP99\": %.4f, "
				"\"teardownP50\": %.4f, \"teardownP99\": %.4f, \"totalP50\": %.4f, "
				"\"totalP99\": %.4f}",
				i ? ", " : "", s[i].name, s[i].p50[0], s[i].p99[0], s[i].p50[1],
				s[i].p99[1], s[i].p50[2], s[i].p99[2]);
		fprintf(f, "], \"ratioVm\": %.2f, \"ratioJail\": %.2f}\n", ratio_vm, ratio_jail);
		fclose(f);
	}
	config_free(&cfg);
	event_base_free(base);
	for (int i = 0; i < 3; i++) {
		free(s[i].setup);
		free(s[i].teardown);
		free(s[i].total);
	}
	return ratio_vm >= 20 ? 0 : 3;
}
