/* init: what the agent does as the VM's init (PID 1 started without arguments): mount the
 * basic filesystems, bring up lo, set the hostname, read its settings from the kernel command
 * line, and power the machine off cleanly. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "util/err.h"

#define INIT_DEFAULT_WORKSPACE_MIB 512
#define INIT_DEFAULT_CHANNEL       "serial:agent"
#define INIT_DEFAULT_HOSTNAME      "sandbox"
#define INIT_NET_IFACE             "eth0"
#define INIT_RESOLV_CONF           "/run/resolv.conf"

struct init_config {
	char channel[64]; /* "serial:NAME" or "vsock:PORT" */
	uint64_t workspace_mib;
	char hostname[65];
};

/* Reads sandbox.channel=, sandbox.workspace_mib= and sandbox.hostname= from a kernel command
 * line; missing or malformed values keep their defaults. */
void init_parse_cmdline(const char *cmdline, struct init_config *cfg);

/* Mounts /proc, /sys, /dev, /dev/pts, /dev/shm, /tmp, /run and the /workspace tmpfs, reads
 * the command line into *cfg, brings up lo and sets the hostname. Failures of single steps
 * are logged, not fatal: a half-working guest still answers the host. */
void init_setup(struct init_config *cfg);
/* Mounts the workspace on WS_HOME too (the command user's home), when the template has that
 * directory: at start, and again in the root a disk makes (storage.c). */
void init_home_mount(void);

/* Configures the VM's network from a `resume`: brings INIT_NET_IFACE up with addr/prefix, a
 * default route via gateway, and `nameserver dns` in INIT_RESOLV_CONF, bind-mounted on
 * /etc/resolv.conf (the root is read-only). Addresses in network byte order. Again with other
 * values, it replaces the earlier configuration. Returns 0 or a negative errno (err). */
int init_network(uint32_t addr, unsigned prefix, uint32_t gateway, uint32_t dns, struct err *err);

struct agent;
struct req_resume;

/* Mounts a resume's "storage" (storage.c): the disk, as the upper layer of an overlay that
 * becomes the root (with /workspace and /tmp on it; the agent pivots into it and reopens its
 * workspace), then each volume at its path, made in the new root. Once per boot: again is
 * EALREADY. Returns 0 or a negative errno (err); a failure midway leaves what was done. */
int init_storage(struct agent *a, const struct req_resume *x, struct err *err);

/* Terminates every process, syncs and powers off. Does not return. */
void init_poweroff(void) __attribute__((noreturn));
