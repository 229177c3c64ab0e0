/* httpbench: what a request costs on each candidate for sandboxd's HTTP layer, beside evhttp
 * (today's) measured in the same run: libmicrohttpd driven from a libevent loop through its
 * epoll descriptor (plain and with MHD_USE_TURBO), and bufferevents with http_parser (h1.h).
 *
 * Each server runs alone in a child process on one libevent loop (servers.h) and answers the
 * same route (route.h). This process is the client: N sequential round trips of
 * POST /exec/:id/execute over one keep-alive connection, then N over a fresh connection each;
 * rounds interleave the servers, in an order rotated each round, so that a machine's drift
 * falls on all of them alike. Then, for each server in a new child, the resident memory it
 * takes for idle open connections (VmRSS from /proc/<pid>/status), before and after one
 * request on each, and the CPU it burns meanwhile (a loop that spins while idle shows there).
 *
 * Usage: bench-httpbench [--requests N] [--rounds N] [--idle N] [--servers a,b,...]
 *                        [--cpus same|two|any] [--mhd-pool BYTES]
 *        bench-httpbench --serve evhttp|mhd|mhd-turbo|parser PORT   (one server, to try by hand) */
#include <errno.h>
#include <event2/event.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../stats.h"
#include "route.h"
#include "servers.h"

#define MAX_ROUNDS 16
#define WARMUP     500
#define SANDBOX_ID "3f2a9c1be07d4a55"

static const struct bench_server all_servers[] = {
	{ "evhttp", srv_evhttp_start },
	{ "mhd", srv_mhd_start },
	{ "mhd-turbo", srv_mhd_turbo_start },
	{ "parser", srv_parser_start },
};
#define NSERVERS (sizeof(all_servers) / sizeof(all_servers[0]))

enum mode { KEEP_ALIVE, FRESH, NMODES };
static const char *const mode_names[NMODES] = { "keep-alive", "fresh conn" };

struct result {
	double *us; /* every round's samples, microseconds */
	size_t n;
	double wall_s; /* the runs' wall time, summed */
	double cpu_s;  /* the server's CPU time meanwhile, summed */
	double round_p50[MAX_ROUNDS];
	double round_rps[MAX_ROUNDS];
};

struct memory {
	double per_idle[MAX_ROUNDS]; /* bytes per idle connection, opened only */
	double per_used[MAX_ROUNDS]; /* bytes per idle connection after one request on each */
	double cpu_pct[MAX_ROUNDS];  /* CPU while they idle */
};

/* Where the client and the servers run: both on one CPU (the default: a round trip is then the
 * two sides' work and two context switches), on two (a round trip also pays two wake-ups of
 * an idle CPU, which in a VM can cost more than the work), or wherever the scheduler likes
 * (which changes from run to run, and with it every latency). */
enum placement { SAME_CPU, TWO_CPUS, ANYWHERE };
static enum placement placement = SAME_CPU;

static struct sockaddr_in server_addr;
static char request[512];
static size_t request_len;

static void die(const char *what)
{
	fprintf(stderr, "httpbench: %s: %s\n", what, strerror(errno));
	exit(1);
}

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static double median(const double *v, size_t n)
{
	double tmp[MAX_ROUNDS];
	memcpy(tmp, v, n * sizeof(*v));
	return bench_pct(tmp, n, 50);
}

/* --- the servers' processes ------------------------------------------------------------ */

static void pin(int cpu)
{
	cpu_set_t set;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set) < 0)
		die("sched_setaffinity");
}

/* The CPU time pid has run, in seconds (/proc/<pid>/schedstat counts nanoseconds). */
static double cpu_seconds(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/schedstat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		die(path);
	unsigned long long ns = 0;
	if (fscanf(f, "%llu", &ns) != 1)
		ns = 0;
	fclose(f);
	return (double)ns / 1e9;
}

static void on_term(evutil_socket_t sig, short what, void *arg)
{
	event_base_loopbreak(arg);
}

/* A listening socket on 127.0.0.1:port (0: any free port); server_addr gets its address. */
static int listen_on(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket");
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK),
				 .sin_port = htons((uint16_t)port) };
	socklen_t alen = sizeof(a);
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 4096) < 0 ||
	    getsockname(fd, (struct sockaddr *)&server_addr, &alen) < 0)
		die("listening on 127.0.0.1");
	return fd;
}

/* Serves on fd until SIGTERM or SIGINT, then exits. */
static void __attribute__((noreturn)) serve(const struct bench_server *s, int fd)
{
	struct event_base *base = event_base_new();
	struct event *term = base ? evsignal_new(base, SIGTERM, on_term, base) : NULL;
	struct event *intr = base ? evsignal_new(base, SIGINT, on_term, base) : NULL;
	if (!term || !intr || event_add(term, NULL) < 0 || event_add(intr, NULL) < 0 ||
	    s->start(base, fd) < 0)
		_exit(1);
	event_base_dispatch(base);
	_exit(0);
}

/* A child serving a listening socket of its own (server_addr gets its address). */
static pid_t server_spawn(const struct bench_server *s)
{
	int fd = listen_on(0);
	pid_t pid = fork();
	if (pid < 0)
		die("fork");
	if (pid == 0) {
		if (placement != ANYWHERE)
			pin(placement == SAME_CPU ? 0 : 1);
		serve(s, fd);
	}
	close(fd);
	return pid;
}

static void server_stop(pid_t pid, const char *name)
{
	int status;
	kill(pid, SIGTERM);
	if (waitpid(pid, &status, 0) < 0)
		die("waitpid");
	if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0) &&
	    !(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM)) {
		fprintf(stderr, "httpbench: the %s server failed (status %#x)\n", name, status);
		exit(1);
	}
}

/* --- the client ------------------------------------------------------------------------ */

static int dial(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		die("socket");
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(fd, (struct sockaddr *)&server_addr, sizeof(server_addr)) < 0)
		die("connect");
	return fd;
}

/* Closes a connection with a reset, leaving no TIME_WAIT behind: a run's tens of thousands of
 * fresh connections would otherwise fill the loopback's port range with them, and connect()
 * would take milliseconds to find a free port. The server has sent its whole reply by then; it
 * sees the connection end as it would see a client that goes away. */
static void close_abort(int fd)
{
	struct linger l = { .l_onoff = 1, .l_linger = 0 };
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
	close(fd);
}

static void write_all(int fd, const char *p, size_t len)
{
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			die("write");
		p += n;
		len -= (size_t)n;
	}
}

/* Reads one response (a head and a Content-Length body, nothing after it). Returns its status;
 * *ret_body points at its body in buf. */
static int read_response(int fd, char *buf, size_t cap, const char **ret_body)
{
	size_t have = 0, total = 0;
	int status = -1;
	for (;;) {
		ssize_t n = read(fd, buf + have, cap - 1 - have);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die("read");
		if (n == 0) {
			fprintf(stderr,
				"httpbench: the server closed the connection mid-response\n");
			exit(1);
		}
		have += (size_t)n;
		buf[have] = '\0';
		if (!total) {
			char *end = strstr(buf, "\r\n\r\n");
			if (!end)
				continue;
			const char *cl = strcasestr(buf, "\r\nContent-Length:");
			if (strncmp(buf, "HTTP/1.1 ", 9) || !cl || cl > end)
				goto bad;
			status = atoi(buf + 9);
			total = (size_t)(end + 4 - buf) + strtoul(cl + 17, NULL, 10);
			*ret_body = end + 4;
		}
		if (have > total)
			goto bad;
		if (have == total)
			return status;
		if (have == cap - 1)
			goto bad;
	}
bad:
	fprintf(stderr, "httpbench: unexpected response:\n%s\n", buf);
	exit(1);
}

/* One request and its reply, which must be the route's. */
static void round_trip(int fd)
{
	char buf[4096];
	const char *body;
	write_all(fd, request, request_len);
	int status = read_response(fd, buf, sizeof(buf), &body);
	if (status != 200 || !strstr(body, "\"id\":\"" SANDBOX_ID "\"")) {
		fprintf(stderr, "httpbench: unexpected reply %d: %s\n", status, body);
		exit(1);
	}
}

static void build_request(void)
{
	static const char body[] = "{\"command\":\"true\",\"args\":[],\"timeout_ms\":30000}";
	int n = snprintf(request, sizeof(request),
			 "POST /exec/" SANDBOX_ID "/execute HTTP/1.1\r\n"
			 "Host: 127.0.0.1\r\n"
			 "Authorization: Bearer " ROUTE_KEY "\r\n"
			 "Content-Type: application/json\r\n"
			 "Content-Length: %zu\r\n"
			 "\r\n%s",
			 strlen(body), body);
	request_len = (size_t)n;
}

/* A request on a connection of its own that must get `want`. */
static void expect_status(const char *req, size_t len, size_t piece, int want, const char *name,
			  const char *what)
{
	int fd = dial();
	for (size_t off = 0; off < len; off += piece)
		write_all(fd, req + off, len - off < piece ? len - off : piece);
	char buf[4096];
	const char *body;
	int status = read_response(fd, buf, sizeof(buf), &body);
	close_abort(fd);
	if (status != want) {
		fprintf(stderr, "httpbench: %s: %s: status %d, not %d\n", name, what, status, want);
		exit(1);
	}
}

/* That each server does what the benchmark assumes: the route, byte by byte too, and the
 * refusals. */
static void check(const char *name)
{
	char req[512];
	expect_status(request, request_len, 1, 200, name, "a request sent byte by byte");
	int n = snprintf(req, sizeof(req),
			 "POST /exec/x/execute HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer no\r\n"
			 "Content-Length: 2\r\n\r\n{}");
	expect_status(req, (size_t)n, sizeof(req), 401, name, "a wrong key");
	n = snprintf(req, sizeof(req),
		     "POST /exec/x/other HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}");
	expect_status(req, (size_t)n, sizeof(req), 404, name, "another path");
	n = snprintf(req, sizeof(req),
		     "GET /exec/x/execute HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer " ROUTE_KEY
		     "\r\n\r\n");
	expect_status(req, (size_t)n, sizeof(req), 405, name, "another method");
}

/* N round trips to the server pid; appends their times to r. */
static void run(pid_t pid, enum mode mode, size_t n, struct result *r, size_t round)
{
	int fd = mode == KEEP_ALIVE ? dial() : -1;
	double *us = r->us + r->n;
	double cpu = cpu_seconds(pid);
	uint64_t start = now_ns();
	for (size_t i = 0; i < n; i++) {
		uint64_t t0 = now_ns();
		if (mode == FRESH)
			fd = dial();
		round_trip(fd);
		uint64_t t1 = now_ns();
		if (mode == FRESH)
			close_abort(fd);
		us[i] = (double)(t1 - t0) / 1e3;
	}
	double wall = (double)(now_ns() - start) / 1e9;
	if (mode == KEEP_ALIVE)
		close_abort(fd);
	r->cpu_s += cpu_seconds(pid) - cpu;
	r->round_rps[round] = (double)n / wall;
	r->wall_s += wall;
	double *tmp = malloc(n * sizeof(*tmp));
	if (!tmp)
		die("malloc");
	memcpy(tmp, us, n * sizeof(*tmp));
	r->round_p50[round] = bench_pct(tmp, n, 50);
	free(tmp);
	r->n += n;
}

static void warm_up(void)
{
	int fd = dial();
	for (int i = 0; i < WARMUP; i++)
		round_trip(fd);
	close_abort(fd);
	for (int i = 0; i < WARMUP / 5; i++) {
		fd = dial();
		round_trip(fd);
		close_abort(fd);
	}
}

/* --- memory ---------------------------------------------------------------------------- */

static long rss_kb(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		die(path);
	long kb = -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

/* utime + stime of pid, in clock ticks. */
static long cpu_ticks(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	FILE *f = fopen(path, "r");
	if (!f)
		die(path);
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	const char *p = strrchr(buf, ')');
	long utime = 0, stime = 0;
	/* After the command: state, then fields 4..13, then utime (14) and stime (15). */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %ld %ld", &utime,
			 &stime) != 2)
		return -1;
	return utime + stime;
}

static void sleep_ms(long ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000 };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

static void measure_memory(const struct bench_server *s, size_t idle, struct memory *m,
			   size_t round)
{
	pid_t pid = server_spawn(s);
	warm_up();
	sleep_ms(100);
	long base = rss_kb(pid);

	int *fds = malloc(idle * sizeof(*fds));
	if (!fds)
		die("malloc");
	for (size_t i = 0; i < idle; i++)
		fds[i] = dial();
	/* Accepting is first come, first served: once a later connection is answered, the
	 * server has taken every one before it. */
	int fd = dial();
	round_trip(fd);
	close_abort(fd);
	sleep_ms(100);
	long opened = rss_kb(pid);

	long t0 = cpu_ticks(pid);
	sleep_ms(1000);
	long t1 = cpu_ticks(pid);

	for (size_t i = 0; i < idle; i++)
		round_trip(fds[i]);
	sleep_ms(100);
	long used = rss_kb(pid);

	for (size_t i = 0; i < idle; i++)
		close_abort(fds[i]);
	free(fds);
	server_stop(pid, s->name);

	m->per_idle[round] = (double)(opened - base) * 1024.0 / (double)idle;
	m->per_used[round] = (double)(used - base) * 1024.0 / (double)idle;
	m->cpu_pct[round] = (double)(t1 - t0) * 100.0 / (double)sysconf(_SC_CLK_TCK);
}

/* --- report ---------------------------------------------------------------------------- */

static void print_latency(const struct bench_server **servers, size_t ns, struct result r[][NMODES],
			  size_t rounds)
{
	printf("\n%-10s %-10s %7s %7s %7s %8s  %6s %6s %6s %6s  %s\n", "server", "connection",
	       "p50 us", "p99 us", "CPU us", "req/s", "p50 x", "p99 x", "CPU x", "req/s x",
	       "p50 x by round");
	for (int m = 0; m < NMODES; m++) {
		double base_p50 = 0, base_p99 = 0, base_cpu = 0, base_rps = 0;
		for (size_t i = 0; i < ns; i++) {
			struct result *x = &r[i][m];
			double p50 = bench_pct(x->us, x->n, 50), p99 = bench_pct(x->us, x->n, 99);
			double cpu = x->cpu_s * 1e6 / (double)x->n;
			double rps = (double)x->n / x->wall_s;
			if (i == 0) {
				base_p50 = p50;
				base_p99 = p99;
				base_cpu = cpu;
				base_rps = rps;
			}
			printf("%-10s %-10s %7.1f %7.1f %7.2f %8.0f  %6.2f %6.2f %6.2f %6.2f ",
			       servers[i]->name, mode_names[m], p50, p99, cpu, rps, p50 / base_p50,
			       p99 / base_p99, cpu / base_cpu, rps / base_rps);
			for (size_t k = 0; k < rounds; k++)
				printf(" %.2f", x->round_p50[k] / r[0][m].round_p50[k]);
			printf("\n");
		}
	}
}

static void print_memory(const struct bench_server **servers, size_t ns, struct memory *mem,
			 size_t rounds, size_t idle)
{
	printf("\nresident memory with %zu idle connections (median of %zu rounds)\n", idle,
	       rounds);
	printf("%-10s %12s %7s %14s %7s %12s\n", "server", "B/idle conn", "x", "B/conn after 1",
	       "x", "idle CPU %");
	double b_idle = median(mem[0].per_idle, rounds), b_used = median(mem[0].per_used, rounds);
	for (size_t i = 0; i < ns; i++) {
		double per_idle = median(mem[i].per_idle, rounds);
		double per_used = median(mem[i].per_used, rounds);
		printf("%-10s %12.0f %7.2f %14.0f %7.2f %12.1f\n", servers[i]->name, per_idle,
		       per_idle / b_idle, per_used, per_used / b_used,
		       median(mem[i].cpu_pct, rounds));
	}
}

/* --- main ------------------------------------------------------------------------------ */

static size_t parse_count(const char *s, const char *opt)
{
	char *end;
	unsigned long v = strtoul(s ? s : "", &end, 10);
	if (!s || *end || v == 0) {
		fprintf(stderr, "httpbench: %s needs a positive number\n", opt);
		exit(2);
	}
	return v;
}

static const char *const placement_names[] = { "same", "two", "any" };

static enum placement parse_placement(const char *s)
{
	for (int p = SAME_CPU; p <= ANYWHERE; p++)
		if (s && !strcmp(s, placement_names[p]))
			return (enum placement)p;
	fprintf(stderr, "httpbench: --cpus is same, two or any\n");
	exit(2);
}

/* The servers named in a comma-separated list; evhttp, the baseline, always comes first. */
static size_t pick_servers(const char *list, const struct bench_server **out)
{
	size_t n = 0;
	out[n++] = &all_servers[0];
	for (size_t i = 1; i < NSERVERS; i++) {
		if (list) {
			const char *p = strstr(list, all_servers[i].name);
			size_t len = strlen(all_servers[i].name);
			bool found = false;
			for (; p; p = strstr(p + 1, all_servers[i].name))
				if ((p == list || p[-1] == ',') && (p[len] == ',' || !p[len]))
					found = true;
			if (!found)
				continue;
		}
		out[n++] = &all_servers[i];
	}
	return n;
}

int main(int argc, char **argv)
{
	size_t requests = 20000, rounds = 3, idle = 1000;
	const char *list = NULL, *serve_name = NULL;
	int serve_port = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--requests"))
			requests = parse_count(argv[++i], "--requests");
		else if (!strcmp(argv[i], "--rounds"))
			rounds = parse_count(argv[++i], "--rounds");
		else if (!strcmp(argv[i], "--idle"))
			idle = parse_count(argv[++i], "--idle");
		else if (!strcmp(argv[i], "--servers") && i + 1 < argc)
			list = argv[++i];
		else if (!strcmp(argv[i], "--mhd-pool"))
			srv_mhd_pool_bytes = parse_count(argv[++i], "--mhd-pool");
		else if (!strcmp(argv[i], "--cpus"))
			placement = parse_placement(argv[++i]);
		else if (!strcmp(argv[i], "--serve") && i + 2 < argc) {
			serve_name = argv[++i];
			serve_port = (int)parse_count(argv[++i], "--serve");
		} else {
			fprintf(stderr,
				"usage: %s [--requests N] [--rounds N] [--idle N] "
				"[--servers mhd,mhd-turbo,parser] [--cpus same|two|any] "
				"[--mhd-pool BYTES]\n       %s --serve NAME PORT\n",
				argv[0], argv[0]);
			return 2;
		}
	}
	signal(SIGPIPE, SIG_IGN);
	if (serve_name) {
		for (size_t i = 0; i < NSERVERS; i++)
			if (!strcmp(all_servers[i].name, serve_name)) {
				int fd = listen_on(serve_port);
				printf("%s on 127.0.0.1:%d\n", serve_name, serve_port);
				fflush(stdout);
				serve(&all_servers[i], fd);
			}
		fprintf(stderr, "httpbench: no server %s\n", serve_name);
		return 2;
	}
	if (placement == TWO_CPUS && sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		fprintf(stderr, "httpbench: --cpus two needs two CPUs\n");
		return 2;
	}
	if (placement != ANYWHERE)
		pin(0);
	if (rounds > MAX_ROUNDS) {
		fprintf(stderr, "httpbench: at most %d rounds\n", MAX_ROUNDS);
		return 2;
	}
	/* The idle connections' descriptors, on both sides. */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur < idle + 64) {
		fprintf(stderr, "httpbench: %zu idle connections need more descriptors than %lu\n",
			idle, (unsigned long)rl.rlim_cur);
		return 1;
	}
	build_request();

	const struct bench_server *servers[NSERVERS];
	size_t ns = pick_servers(list, servers);
	static struct result results[NSERVERS][NMODES];
	static struct memory memory[NSERVERS];
	for (size_t i = 0; i < ns; i++)
		for (int m = 0; m < NMODES; m++)
			if (!(results[i][m].us = malloc(requests * rounds * sizeof(double))))
				die("malloc");

	printf("HTTP servers on one libevent loop each: POST /exec/:id/execute, %zu-byte request, "
	       "%zu requests per run, %zu rounds, --cpus %s, MHD pool %zu bytes\n",
	       request_len, requests, rounds, placement_names[placement], srv_mhd_pool_bytes);
	printf("x = the server's value / evhttp's, measured in the same run (p50, p99: lower is "
	       "faster; req/s: higher is faster)\n");
	for (size_t k = 0; k < rounds; k++) {
		for (size_t j = 0; j < ns; j++) {
			size_t i = (j + k) % ns;
			pid_t pid = server_spawn(servers[i]);
			if (k == 0)
				check(servers[i]->name);
			warm_up();
			for (int m = 0; m < NMODES; m++)
				run(pid, (enum mode)m, requests, &results[i][m], k);
			server_stop(pid, servers[i]->name);
			fprintf(stderr,
				"round %zu: %-10s keep-alive p50 %.1f us, fresh p50 %.1f us\n",
				k + 1, servers[i]->name, results[i][KEEP_ALIVE].round_p50[k],
				results[i][FRESH].round_p50[k]);
		}
	}
	print_latency(servers, ns, results, rounds);
	fflush(stdout);

	for (size_t k = 0; k < rounds; k++)
		for (size_t j = 0; j < ns; j++) {
			size_t i = (j + k) % ns;
			measure_memory(servers[i], idle, &memory[i], k);
		}
	print_memory(servers, ns, memory, rounds, idle);
	return 0;
}
