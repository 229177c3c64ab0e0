/* Runs a test body in a child process inside a throwaway network namespace, so that tests of
 * links, nftables and sockets touch nothing of the host's. The body reports a failure with
 * CHECK, which ends the child with the failing line (cmocka's asserts must not run in the
 * child: they would unwind into the child's copy of the test runner). */
#pragma once

#include <errno.h>
#include <net/if.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHECK(cond)                                                                              \
	do {                                                                                     \
		if (!(cond)) {                                                                   \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
			_exit(__LINE__ & 0xff ? __LINE__ & 0xff : 1);                            \
		}                                                                                \
	} while (0)

/* What running a body in a network namespace needs and this process lacks, or NULL. Tests
 * fail with it rather than skip: `make test` runs as root, on a kernel that the jail driver
 * (network namespaces in every sandbox) needs anyway. */
static inline const char *netns_child_missing(void)
{
	if (geteuid() != 0)
		return "network namespaces and nftables need root (sudo make test)";
	if (access("/proc/self/ns/net", R_OK) != 0)
		return "this kernel has no network namespaces";
	return NULL;
}

static inline void netns_child_lo_up(void)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	strcpy(ifr.ifr_name, "lo");
	if (s >= 0 && ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
		ifr.ifr_flags |= IFF_UP;
		ioctl(s, SIOCSIFFLAGS, &ifr);
	}
	if (s >= 0)
		close(s);
}

/* Runs body() in a child in a new network namespace (loopback up); returns 0 when the body
 * returned normally, else the child's exit status or -1. */
static inline int netns_child_run(void (*body)(void))
{
	fflush(stdout);
	fflush(stderr);
	pid_t pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		if (unshare(CLONE_NEWNET) < 0) {
			perror("unshare(CLONE_NEWNET)");
			_exit(2);
		}
		netns_child_lo_up();
		body();
		_exit(0);
	}
	int status;
	while (waitpid(pid, &status, 0) < 0)
		if (errno != EINTR)
			return -1;
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return -1;
}
