/* init: PID 1 duties in a VM (see init.h). */
#include "init.h"
#include "wspath.h"

#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent.h"
#include "util/cleanup.h"

void init_parse_cmdline(const char *cmdline, struct init_config *cfg)
{
	snprintf(cfg->channel, sizeof(cfg->channel), "%s", INIT_DEFAULT_CHANNEL);
	snprintf(cfg->hostname, sizeof(cfg->hostname), "%s", INIT_DEFAULT_HOSTNAME);
	cfg->workspace_mib = INIT_DEFAULT_WORKSPACE_MIB;

	const char *p = cmdline;
	while (*p) {
		while (*p == ' ' || *p == '\t' || *p == '\n')
			p++;
		const char *e = p;
		while (*e && *e != ' ' && *e != '\t' && *e != '\n')
			e++;
		size_t n = (size_t)(e - p);
		char word[256];
		if (n && n < sizeof(word)) {
			memcpy(word, p, n);
			word[n] = '\0';
			char *v = strchr(word, '=');
			if (v) {
				*v++ = '\0';
				if (strcmp(word, "sandbox.channel") == 0 &&
				    strlen(v) < sizeof(cfg->channel) &&
				    (strncmp(v, "serial:", 7) == 0 || strncmp(v, "vsock:", 6) == 0))
					snprintf(cfg->channel, sizeof(cfg->channel), "%s", v);
				else if (strcmp(word, "sandbox.hostname") == 0 && *v &&
					 strlen(v) < sizeof(cfg->hostname))
					snprintf(cfg->hostname, sizeof(cfg->hostname), "%s", v);
				else if (strcmp(word, "sandbox.workspace_mib") == 0) {
					char *end;
					unsigned long long mib = strtoull(v, &end, 10);
					if (*v && !*end && mib > 0 && mib <= (1ull << 24))
						cfg->workspace_mib = mib;
				}
			}
		}
		p = e;
	}
}

static void do_mount(const char *src, const char *dst, const char *type, unsigned long flags,
		     const char *data, mode_t dir_mode)
{
	if (mkdir(dst, dir_mode) < 0 && errno != EEXIST)
		agent_log("mkdir %s: %s", dst, strerror(errno));
	if (mount(src, dst, type, flags, data) < 0 && errno != EBUSY)
		agent_log("mount %s on %s: %s", type, dst, strerror(errno));
}

static void lo_up(void)
{
	_cleanup_close_ int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0) {
		agent_log("lo: socket: %s", strerror(errno));
		return;
	}
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "lo");
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0) {
		agent_log("lo: %s", strerror(errno));
		return;
	}
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		agent_log("lo up: %s", strerror(errno));
}

static void set_sin(struct sockaddr *sa, uint32_t addr)
{
	struct sockaddr_in sin;
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = addr;
	memcpy(sa, &sin, sizeof(sin));
}

static int addr_ioctl(int s, unsigned long req, const char *what, uint32_t addr, struct err *err)
{
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", INIT_NET_IFACE);
	set_sin(&ifr.ifr_addr, addr);
	if (ioctl(s, req, &ifr) < 0)
		return err_sys(err, errno, "%s: setting the %s", INIT_NET_IFACE, what);
	return 0;
}

/* The resolver, in /run (the root is read-only), bind-mounted once on /etc/resolv.conf;
 * later writes go to the same file, so the mount always shows the current one. */
static int write_resolv_conf(uint32_t dns, struct err *err)
{
	static bool mounted;
	char text[64], ip[INET_ADDRSTRLEN];
	struct in_addr a = { .s_addr = dns };
	inet_ntop(AF_INET, &a, ip, sizeof(ip));
	int n = snprintf(text, sizeof(text), "nameserver %s\n", ip);
	_cleanup_close_ int fd =
		open(INIT_RESOLV_CONF, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0 || write(fd, text, (size_t)n) != n)
		return err_sys(err, errno, "writing %s", INIT_RESOLV_CONF);
	if (mounted)
		return 0;
	if (mount(INIT_RESOLV_CONF, "/etc/resolv.conf", NULL, MS_BIND, NULL) < 0)
		return err_sys(err, errno, "mounting %s on /etc/resolv.conf", INIT_RESOLV_CONF);
	mount(NULL, "/etc/resolv.conf", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL);
	mounted = true;
	return 0;
}

int init_network(uint32_t addr, unsigned prefix, uint32_t gateway, uint32_t dns, struct err *err)
{
	_cleanup_close_ int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0)
		return err_sys(err, errno, "socket");
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", INIT_NET_IFACE);
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		return err_sys(err, errno, "%s", INIT_NET_IFACE);
	ifr.ifr_flags |= IFF_UP;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		return err_sys(err, errno, "%s: bringing it up", INIT_NET_IFACE);

	/* The address replaces the interface's primary one (a clone of a snapshot may be
	 * configured again); its classful mask and broadcast are then corrected. A /31 or /32
	 * has no broadcast address: with one, the gateway would be it. */
	uint32_t mask = htonl(prefix >= 32 ? 0xffffffffu : ~(0xffffffffu >> prefix));
	uint32_t brd = prefix >= 31 ? 0 : (addr | ~mask);
	int r;
	if ((r = addr_ioctl(s, SIOCSIFADDR, "address", addr, err)) < 0 ||
	    (r = addr_ioctl(s, SIOCSIFNETMASK, "netmask", mask, err)) < 0 ||
	    (r = addr_ioctl(s, SIOCSIFBRDADDR, "broadcast address", brd, err)) < 0)
		return r;

	struct rtentry rt;
	memset(&rt, 0, sizeof(rt));
	set_sin(&rt.rt_dst, 0);
	set_sin(&rt.rt_genmask, 0);
	set_sin(&rt.rt_gateway, gateway);
	rt.rt_flags = RTF_UP | RTF_GATEWAY;
	char dev[IFNAMSIZ];
	snprintf(dev, sizeof(dev), "%s", INIT_NET_IFACE);
	rt.rt_dev = dev;
	/* A default route left from an earlier configuration goes first (no gateway, no
	 * device: any default route). */
	struct rtentry any = rt;
	any.rt_flags = RTF_UP;
	set_sin(&any.rt_gateway, 0);
	any.rt_dev = NULL;
	for (int i = 0; i < 8 && ioctl(s, SIOCDELRT, &any) == 0; i++)
		;
	if (ioctl(s, SIOCADDRT, &rt) < 0)
		return err_sys(err, errno, "default route via the gateway");
	return write_resolv_conf(dns, err);
}

static void read_cmdline(struct init_config *cfg)
{
	char buf[4096] = "";
	_cleanup_close_ int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, buf, sizeof(buf) - 1);
		buf[n > 0 ? n : 0] = '\0';
	}
	init_parse_cmdline(buf, cfg);
}

void init_home_mount(void)
{
	struct stat st;
	/* Templates built before it have no mount point, and their commands live in /workspace
	 * alone; a link there is not followed. */
	if (lstat("/home", &st) < 0 || !S_ISDIR(st.st_mode) || lstat(WS_HOME, &st) < 0 ||
	    !S_ISDIR(st.st_mode))
		return;
	if (mount("/workspace", WS_HOME, NULL, MS_BIND | MS_REC, NULL) < 0)
		agent_log("mount the workspace on %s: %s", WS_HOME, strerror(errno));
}

void init_setup(struct init_config *cfg)
{
	umask(022);
	do_mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL, 0555);
	read_cmdline(cfg);
	do_mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL, 0555);
	do_mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755", 0755);
	do_mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
		 "gid=5,mode=620,ptmxmode=666", 0755);
	do_mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777", 01777);
	do_mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777", 01777);
	do_mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755", 0755);
	char opts[64];
	snprintf(opts, sizeof(opts), "mode=0755,size=%llum",
		 (unsigned long long)cfg->workspace_mib);
	do_mount("tmpfs", "/workspace", "tmpfs", MS_NOSUID | MS_NODEV, opts, 0755);
	init_home_mount();

	/* devtmpfs does not provide these; shells and many tools expect them. */
	static const char *const links[][2] = {
		{ "/proc/self/fd", "/dev/fd" },
		{ "/proc/self/fd/0", "/dev/stdin" },
		{ "/proc/self/fd/1", "/dev/stdout" },
		{ "/proc/self/fd/2", "/dev/stderr" },
	};
	for (size_t i = 0; i < ARRAY_SIZE(links); i++)
		if (symlink(links[i][0], links[i][1]) < 0 && errno != EEXIST)
			agent_log("symlink %s: %s", links[i][1], strerror(errno));

	lo_up();
	if (sethostname(cfg->hostname, strlen(cfg->hostname)) < 0)
		agent_log("sethostname: %s", strerror(errno));
}

static void reap_for(int64_t ns)
{
	int64_t end = agent_now_ns() + ns;
	while (agent_now_ns() < end) {
		pid_t pid;
		while ((pid = waitpid(-1, NULL, WNOHANG)) > 0)
			;
		if (pid < 0 && errno == ECHILD)
			return;
		struct timespec ts = { 0, 20 * 1000000L };
		nanosleep(&ts, NULL);
	}
}

void init_poweroff(void)
{
	agent_log("powering off");
	kill(-1, SIGTERM);
	reap_for(1000000000LL);
	kill(-1, SIGKILL);
	reap_for(500000000LL);
	sync();
	reboot(RB_POWER_OFF);
	/* Not allowed to (a pid namespace, no capability): leaving is the next best thing. */
	_exit(0);
}
