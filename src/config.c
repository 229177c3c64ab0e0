#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/statvfs.h>
#include <sys/un.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/log.h"
#include "util/size.h"

#define KiB ((uint64_t)1024)
#define MiB (KiB * 1024)
#define GiB (MiB * 1024)
#define TiB (GiB * 1024)

/* Where `meson install` puts the agent (<prefix>/<libexecdir>/agent-sandbox, set by the
 * build), for a daemon with no build tree around it. */
#ifndef AGENT_BIN_INSTALLED
#define AGENT_BIN_INSTALLED "/usr/local/libexec/agent-sandbox/sandbox-agent"
#endif
/* Where `meson install` puts the dashboard's assets (<prefix>/<datadir>/agent-sandbox/ui). */
#ifndef UI_DIR_INSTALLED
#define UI_DIR_INSTALLED "/usr/local/share/agent-sandbox/ui"
#endif

/* How much of a bad value is echoed back in a message. */
#define ECHO_MAX     64

#define SUN_PATH_MAX sizeof(((struct sockaddr_un *)0)->sun_path)

enum var_kind {
	V_STRING, /* any string */
	V_PATH,   /* a path, made absolute against the working directory */
	V_SOCKET, /* an absolute path that fits in sockaddr_un */
	V_NAME,   /* a template name */
	V_PREFIX, /* an API key prefix */
	V_INT,    /* int within [min, max] */
	V_UINT,   /* unsigned within [min, max] */
	V_U64,    /* uint64_t within [min, max] */
	V_SIZE,   /* size_t within [min, max], in bytes: the syntax of size_parse ("512M") */
	V_BYTES,  /* uint64_t within [min, max], in bytes: the syntax of size_parse ("512M") */
	V_BOOL,   /* bool */
	V_MODE,   /* enum net_filter_mode */
	V_CHOICE, /* a string, one of choices[] */
};

struct var {
	const char *name;
	enum var_kind kind;
	size_t offset;
	const char *def; /* default, parsed like a value from the environment; NULL = unset */
	uint64_t min, max;
	const char *const *choices;
};

static const char *const drivers[] = { "auto", "jail", "qemu", "firecracker", NULL };
static const char *const accels[] = { "auto", "kvm", "tcg", NULL };
static const char *const modes[] = { "none", "allow", "deny", NULL };
static const char *const network_modes[] = { "auto", "on", "off", NULL };
static const char *const storage_modes[] = { "disk", "tmpfs", NULL };
static const char *const cgroup_modes[] = { "auto", "delegated", "root", NULL };

#define F(field) offsetof(struct config, field)

/* Every variable, in the order of struct config. Ranges keep each value inside what the
 * kernel, the VMMs and our own arithmetic accept. */
static const struct var vars[] = {
	{ "HOST", V_STRING, F(host), "127.0.0.1" },
	{ "PORT", V_INT, F(port), "3000", 0, 65535 },
	{ "SANDBOX_SOCKET", V_SOCKET, F(socket_path), NULL },
	{ "SANDBOX_SOCKET_GROUP", V_STRING, F(socket_group), NULL },
	{ "SANDBOX_PORT_FILE", V_PATH, F(port_file), NULL },

	{ "SANDBOX_STATE_DIR", V_PATH, F(state_dir), "/var/lib/agent-sandbox/state" },
	{ "SANDBOX_RUN_DIR", V_PATH, F(run_dir), "/run/agent-sandbox" },
	{ "FIRECRACKER_ARTIFACTS_DIR", V_PATH, F(artifacts_dir),
	  "/var/lib/agent-sandbox/artifacts" },
	{ "SANDBOX_AGENT_BIN", V_PATH, F(agent_bin), NULL }, /* default: see agent_bin_default */
	{ "SANDBOX_UI_DIR", V_PATH, F(ui_dir), NULL },       /* default: see ui_dir_default */

	{ "SANDBOX_DRIVER", V_CHOICE, F(driver), "auto", 0, 0, drivers },
	{ "SANDBOX_KERNEL_FALLBACKS", V_STRING, F(kernel_fallbacks), NULL },
	{ "SANDBOX_CGROUP", V_CHOICE, F(cgroup), "auto", 0, 0, cgroup_modes },
	{ "SANDBOX_DEFAULT_TEMPLATE", V_NAME, F(default_template), "node" },
	{ "SANDBOX_WARM_POOL", V_UINT, F(warm_pool), "2", 0, 256 },
	{ "SANDBOX_MAX_SESSIONS", V_UINT, F(max_sessions), "64", 1, 65536 },
	{ "SANDBOX_MAX_COMMANDS", V_UINT, F(max_commands), "256", 1, 1048576 },
	{ "SANDBOX_MAX_FILE_OPS", V_UINT, F(max_file_ops), "64", 1, 1048576 },
	{ "SANDBOX_MAX_UPLOAD_BYTES", V_BYTES, F(max_upload_bytes), "4294967296", 1,
	  1099511627776 },
	{ "SANDBOX_MAX_STREAMS", V_UINT, F(max_streams), "256", 1, 1048576 },
	{ "SANDBOX_MAX_PROCESSES", V_UINT, F(max_processes), "128", 1, 1024 },
	{ "SANDBOX_PROCESS_REPLAY_BYTES", V_BYTES, F(process_replay_bytes), "262144", 65536,
	  67108864 },
	{ "SANDBOX_SESSION_REPLAY_BYTES", V_BYTES, F(session_replay_bytes), "33554432", 65536,
	  4294967296 },
	{ "SANDBOX_MAX_WATCHES", V_UINT, F(max_watches), "64", 1, 1048576 },
	{ "SANDBOX_WATCH_MAX_DIRS", V_UINT, F(watch_max_dirs), "8192", 1, 65536 },
	/* Unset: a quarter of the cap (see config_load). */
	{ "SANDBOX_KEY_MAX_SESSIONS", V_UINT, F(key_max_sessions), NULL, 0, 65536 },
	{ "SANDBOX_KEY_MAX_COMMANDS", V_UINT, F(key_max_commands), NULL, 0, 1048576 },
	{ "SANDBOX_KEY_MAX_MCP_SESSIONS", V_UINT, F(key_max_mcp_sessions), NULL, 0, 100000 },
	{ "SANDBOX_KEY_MAX_FILE_OPS", V_UINT, F(key_max_file_ops), NULL, 0, 1048576 },
	{ "SANDBOX_KEY_MAX_STREAMS", V_UINT, F(key_max_streams), NULL, 0, 1048576 },
	{ "SANDBOX_KEY_MAX_WATCHES", V_UINT, F(key_max_watches), NULL, 0, 1048576 },
	/* Unset: a quarter of what the host has (see config_load). */
	{ "SANDBOX_KEY_MAX_MEMORY_BYTES", V_BYTES, F(key_max_memory_bytes), NULL, 0, 1024 * TiB },
	{ "SANDBOX_KEY_MAX_DISK_BYTES", V_BYTES, F(key_max_disk_bytes), NULL, 0, 1024 * TiB },
	{ "SESSION_IDLE_TIMEOUT", V_UINT, F(idle_timeout_s), "1800", 1, 31536000 },
	{ "SESSION_MAX_LIFETIME", V_UINT, F(max_lifetime_s), "86400", 0, 31536000 },
	{ "VM_VCPU_COUNT", V_UINT, F(vcpus), "1", 1, 32 },
	{ "VM_MEM_SIZE_MIB", V_UINT, F(mem_mib), "128", 16, 1048576 },
	{ "VM_CPU_QUOTA_US", V_U64, F(cpu_quota_us), "50000", 1000, 1000000000 },
	{ "VM_CPU_PERIOD_US", V_U64, F(cpu_period_us), "100000", 1000, 1000000 },
	{ "VM_MEMORY_LIMIT_BYTES", V_BYTES, F(memory_limit), "134217728", MiB, TiB },
	{ "VM_NOFILE_LIMIT", V_UINT, F(nofile), "1024", 16, 1048576 },
	{ "VM_DISK_LIMIT_BYTES", V_BYTES, F(disk_limit), "536870912", MiB, 16 * TiB },
	{ "SANDBOX_PIDS_MAX", V_UINT, F(pids_max), "256", 1, 4194304 },
	{ "SANDBOX_STORAGE", V_CHOICE, F(storage), "disk", 0, 0, storage_modes },
	{ "SANDBOX_DISK_BYTES", V_BYTES, F(disk_bytes), "1073741824", MiB, 16 * TiB },
	{ "SANDBOX_MAX_DISK_BYTES", V_BYTES, F(max_disk_bytes), "17179869184", MiB, 16 * TiB },
	{ "SANDBOX_DISK_OVERCOMMIT", V_STRING, F(disk_overcommit), "4" },
	{ "SANDBOX_DISK_RESERVE_BYTES", V_BYTES, F(disk_reserve_bytes), "1073741824", 0, 16 * TiB },
	{ "SANDBOX_MAX_VOLUME_BYTES", V_BYTES, F(max_volume_bytes), "17179869184", 8 * MiB,
	  16 * TiB },
	{ "SANDBOX_KEY_MAX_VOLUMES", V_UINT, F(key_max_volumes), "16", 0, 65536 },
	{ "SANDBOX_KEY_MAX_BODY_BYTES", V_BYTES, F(key_max_body_bytes), "268435456", 0, 16 * TiB },
	{ "SANDBOX_MAX_BODY_SPOOL_BYTES", V_BYTES, F(max_body_spool_bytes), "1073741824", 0,
	  16 * TiB },
	{ "SANDBOX_KEY_MAX_VOLUME_BYTES", V_BYTES, F(key_max_volume_bytes), "68719476736", 0,
	  1024 * TiB },
	{ "SANDBOX_KEY_MAX_SNAPSHOTS", V_UINT, F(key_max_snapshots), "16", 0, 65536 },
	{ "SANDBOX_KEY_MAX_SNAPSHOT_BYTES", V_BYTES, F(key_max_snapshot_bytes), "34359738368", 0,
	  1024 * TiB },
	{ "SANDBOX_SNAPSHOT_TTL", V_UINT, F(snapshot_ttl_s), "604800", 1, 315360000 },
	{ "SANDBOX_MAX_MEMORY_BYTES", V_BYTES, F(max_memory), "4294967296", 16 * MiB, 16 * TiB },
	{ "SANDBOX_MAX_VCPUS", V_UINT, F(max_vcpus), "4", 1, 32 },
	{ "SANDBOX_MEMORY_WATERMARK_BYTES", V_BYTES, F(memory_watermark), "268435456", 0,
	  16 * TiB },
	{ "SANDBOX_DESCRIPTOR_RESERVE", V_UINT, F(descriptor_reserve), "512", 0, 1048576 },
	/* Above the uids of ordinary accounts, and (with the ranges) below 2^31: the kernel's
	 * ping_group_range takes no group beyond that. */
	{ "SANDBOX_UID_BASE", V_U64, F(uid_base), "1879048192", 65536, 2147418112 },
	{ "SANDBOX_UID_RANGES", V_UINT, F(uid_ranges), "1024", 1, 32767 },
	{ "SANDBOX_SUBUID_FILE", V_PATH, F(subuid_file), "/etc/subuid" },
	{ "SANDBOX_SUBGID_FILE", V_PATH, F(subgid_file), "/etc/subgid" },
	/* Entries of this account are the daemon's own registration of its ranges. */
	{ "SANDBOX_SUBID_OWNER", V_STRING, F(subid_owner), "agent-sandbox" },

	{ "SANDBOX_MAX_BODY_BYTES", V_SIZE, F(max_body_bytes), "100663296", KiB, 4 * GiB },
	{ "SANDBOX_MAX_OUTPUT_BYTES", V_SIZE, F(max_output_bytes), "16777216", KiB, 4 * GiB },
	{ "SANDBOX_MAX_READ_BYTES", V_SIZE, F(max_read_bytes), "67108864", KiB, 4 * GiB },
	{ "SANDBOX_MCP_MAX_READ_BYTES", V_SIZE, F(mcp_max_read_bytes), "4194304", KiB, 1 * GiB },
	{ "SANDBOX_MAX_JSON_DEPTH", V_UINT, F(max_json_depth), "32", 2, 1000 },
	{ "SANDBOX_MAX_JSON_ELEMENTS", V_UINT, F(max_json_elements), "10000", 16, 10000000 },
	{ "SANDBOX_EXEC_TIMEOUT_MS", V_UINT, F(default_timeout_ms), "0", 0, UINT_MAX },
	{ "SANDBOX_WORKERS", V_UINT, F(workers), "4", 1, 256 },

	{ "SANDBOX_MAX_CONNECTIONS", V_UINT, F(http_max_connections), "0", 0, 1048576 },
	{ "SANDBOX_MAX_CONNECTIONS_PER_ADDRESS", V_UINT, F(http_max_per_address), "128", 1,
	  1048576 },
	{ "SANDBOX_HEADER_TIMEOUT_MS", V_UINT, F(http_header_timeout_ms), "10000", 100, 3600000 },
	{ "SANDBOX_BODY_TIMEOUT_MS", V_UINT, F(http_body_timeout_ms), "60000", 100, 3600000 },
	{ "SANDBOX_BODY_MIN_RATE", V_UINT, F(http_body_min_rate), "1024", 0, 1073741824 },
	{ "SANDBOX_KEEPALIVE_TIMEOUT_MS", V_UINT, F(http_keepalive_timeout_ms), "60000", 100,
	  3600000 },
	{ "SANDBOX_ALLOWED_HOSTS", V_STRING, F(allowed_hosts), "" },
	{ "SANDBOX_ALLOWED_ORIGINS", V_STRING, F(allowed_origins), "" },
	{ "SANDBOX_PUBLIC_DOMAIN", V_STRING, F(public_domain), "localhost" },
	{ "SANDBOX_PREVIEW_URL", V_STRING, F(preview_url), NULL },
	{ "SANDBOX_PREVIEW_MAX_CONNECTIONS", V_UINT, F(preview_max_connections), "64", 1, 1048576 },
	{ "SANDBOX_PREVIEW_IDLE_TIMEOUT_MS", V_UINT, F(preview_idle_timeout_ms), "300000", 1000,
	  86400000 },

	{ "SANDBOX_FIRST_REPLY_TIMEOUT_MS", V_UINT, F(first_reply_timeout_ms), "30000", 100,
	  3600000 },
	{ "SANDBOX_FILE_OP_TIMEOUT_MS", V_UINT, F(file_op_timeout_ms), "120000", 100, 86400000 },
	{ "SANDBOX_PING_INTERVAL_MS", V_UINT, F(ping_interval_ms), "10000", 0, 3600000 },
	{ "SANDBOX_PING_TIMEOUT_MS", V_UINT, F(ping_timeout_ms), "30000", 100, 3600000 },
	{ "SANDBOX_SHUTDOWN_GRACE_MS", V_UINT, F(shutdown_grace_ms), "10000", 0, 3600000 },
	{ "SANDBOX_REAPER_INTERVAL_MS", V_UINT, F(reaper_interval_ms), "1000", 10, 60000 },
	{ "SANDBOX_POOL_RETRY_MS", V_UINT, F(pool_retry_ms), "5000", 10, 600000 },

	{ "AUTH_ENABLED", V_BOOL, F(auth_enabled), "true" },
	{ "AUTH_KEY_PREFIX", V_PREFIX, F(key_prefix), "sk_test_" },
	{ "MCP_AUTH_TOKEN", V_STRING, F(mcp_auth_token), NULL },

	{ "E2B_TEMPLATE_ALIASES", V_STRING, F(e2b_template_aliases),
	  "base=code-interpreter,code-interpreter-v1=code-interpreter,code-interpreter-v1=python" },
	{ "E2B_ENVD_VERSION", V_STRING, F(e2b_envd_version), "0.5.7" },

	{ "FIRECRACKER_BIN", V_PATH, F(fc_bin), "/usr/local/bin/firecracker" },
	{ "FIRECRACKER_JAILER_BIN", V_PATH, F(fc_jailer_bin), "/usr/local/bin/jailer" },
	{ "FIRECRACKER_JAIL_BASE", V_PATH, F(fc_jail_base), "/var/lib/agent-sandbox/jailer" },
	{ "FIRECRACKER_UID", V_UINT, F(fc_uid), "997", 0, 4294967294u },
	{ "FIRECRACKER_GID", V_UINT, F(fc_gid), "982", 0, 4294967294u },
	{ "FIRECRACKER_KVM_CHECK", V_BOOL, F(fc_kvm_check), "true" },

	{ "SANDBOX_QEMU_BIN", V_STRING, F(qemu_bin), "qemu-system-x86_64" },
	{ "SANDBOX_QEMU_ACCEL", V_CHOICE, F(qemu_accel), "auto", 0, 0, accels },

	{ "SANDBOX_NETWORK", V_CHOICE, F(network), "auto", 0, 0, network_modes },
	{ "SANDBOX_NET_POOL", V_STRING, F(net_pool), "10.200.0.0/16" },
	{ "SANDBOX_NFT", V_PATH, F(nft_bin), NULL },

	{ "SANDBOX_CLUSTER", V_STRING, F(cluster), NULL },
	{ "SANDBOX_NODE_NAME", V_STRING, F(node_name), NULL },
	{ "SANDBOX_NODE_URL", V_STRING, F(node_url), NULL },
	{ "SANDBOX_NODE_LABELS", V_STRING, F(node_labels), "" },
	{ "SANDBOX_CLUSTER_SECRET_FILE", V_PATH, F(cluster_secret_file), NULL },
	{ "SANDBOX_CLUSTER_PREFIX", V_STRING, F(cluster_prefix), "/agent-sandbox/" },
	{ "SANDBOX_CLUSTER_LEASE_TTL", V_UINT, F(cluster_lease_ttl_s), "10", 2, 3600 },
	{ "SANDBOX_CLUSTER_TIMEOUT_MS", V_UINT, F(cluster_timeout_ms), "2000", 100, 60000 },
	{ "SANDBOX_ETCD_USER", V_STRING, F(etcd_user), NULL },
	{ "SANDBOX_ETCD_PASSWORD_FILE", V_PATH, F(etcd_password_file), NULL },
	{ "SANDBOX_ETCD_CA", V_PATH, F(etcd_ca), NULL },
	{ "SANDBOX_ETCD_CERT", V_PATH, F(etcd_cert), NULL },
	{ "SANDBOX_ETCD_KEY", V_PATH, F(etcd_key), NULL },

	{ "SANDBOX_MCP_ALLOWED_ORIGINS", V_STRING, F(mcp_allowed_origins), "" },
	{ "SANDBOX_MCP_SESSION_TIMEOUT", V_UINT, F(mcp_session_timeout_s), "1800", 1, 604800 },
	{ "SANDBOX_MCP_MAX_SESSIONS", V_UINT, F(mcp_max_sessions), "256", 1, 100000 },
	{ "SANDBOX_MCP_SWEEP_INTERVAL_MS", V_UINT, F(mcp_sweep_interval_ms), "5000", 10, 600000 },

	{ "VM_DNS_MODE", V_MODE, F(dns_mode), "none", 0, 0, modes },
	{ "VM_DNS_DOMAINS", V_STRING, F(dns_domains), "" },
	{ "VM_DNS_UPSTREAM", V_STRING, F(dns_upstream), "8.8.8.8,1.1.1.1" },
	{ "VM_DEST_MODE", V_MODE, F(dest_mode), "none", 0, 0, modes },
	{ "VM_DEST_RULES", V_STRING, F(dest_rules), "" },
	{ "VM_BW_ENABLED", V_BOOL, F(bw_enabled), "false" },
	{ "VM_BW_RATE_KBIT", V_UINT, F(bw_rate_kbit), "10240", 1, 100000000 },
	{ "VM_BW_BURST_KBIT", V_UINT, F(bw_burst_kbit), "1024", 1, 100000000 },
};

#undef F

/* The problems found so far, one line each. */
struct problems {
	char *text;
	size_t len;
	unsigned count;
};

static void problem_add(struct problems *p, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void problem_add(struct problems *p, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	_cleanup_free_ char *line = NULL;
	int n = vasprintf(&line, fmt, ap);
	va_end(ap);
	if (n < 0)
		abort();
	p->text = xrealloc(p->text, p->len + (size_t)n + 2);
	if (p->len)
		p->text[p->len++] = '\n';
	memcpy(p->text + p->len, line, (size_t)n + 1);
	p->len += (size_t)n;
	p->count++;
}

/* Writes as many whole lines as fit into err, then how many were left out. */
static int problems_report(struct problems *p, struct err *err)
{
	if (p->len < ERR_MSG_MAX)
		return err_set(err, EINVAL, "%s", p->text);

	char tail[64];
	size_t room = ERR_MSG_MAX - sizeof(tail);
	size_t cut = 0;
	unsigned kept = 0;
	for (size_t i = 0; i < p->len && i <= room; i++) {
		if (p->text[i] == '\n') {
			cut = i;
			kept++;
		}
	}
	snprintf(tail, sizeof(tail), "\n(and %u more)", p->count - kept);
	return err_set(err, EINVAL, "%.*s%s", (int)cut, p->text, tail);
}

/* A bad value as shown in a message: cut short, control bytes replaced. */
static void echo(char out[static ECHO_MAX + 4], const char *s)
{
	size_t i = 0;
	for (; s[i] && i < ECHO_MAX; i++)
		out[i] = isprint((unsigned char)s[i]) && s[i] != '`' ? s[i] : '?';
	if (s[i]) {
		memcpy(out + i, "...", 3);
		i += 3;
	}
	out[i] = '\0';
}

/* A decimal integer, the whole string, within [min, max]. */
static int parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *ret)
{
	if (!*s)
		return -EINVAL;
	for (const char *c = s; *c; c++)
		if (*c < '0' || *c > '9')
			return -EINVAL;
	errno = 0;
	unsigned long long v = strtoull(s, NULL, 10);
	if (errno == ERANGE || v < min || v > max)
		return -ERANGE;
	*ret = v;
	return 0;
}

static int parse_bool(const char *s, bool *ret)
{
	static const char *const yes[] = { "true", "1", "yes" };
	static const char *const no[] = { "false", "0", "no" };
	for (size_t i = 0; i < ARRAY_SIZE(yes); i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*ret = true;
			return 0;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*ret = false;
			return 0;
		}
	}
	return -EINVAL;
}

/* The index of s in a NULL-terminated list, compared without case, or -1. */
static int choice_index(const char *const *choices, const char *s)
{
	for (int i = 0; choices[i]; i++)
		if (strcasecmp(s, choices[i]) == 0)
			return i;
	return -1;
}

static char *choices_list(const char *const *choices)
{
	char *out = xstrdup("");
	for (int i = 0; choices[i]; i++) {
		char *next = xasprintf("%s%s%s", out, i ? ", " : "", choices[i]);
		free(out);
		out = next;
	}
	return out;
}

/* Letters, digits and `charset`, 1 to max bytes, not starting with a dot. */
static bool is_word(const char *s, const char *charset, size_t max)
{
	size_t n = strlen(s);
	if (n == 0 || n > max || s[0] == '.')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr(charset, s[i]))
			return false;
	return true;
}

static char *absolute(const char *path)
{
	if (path[0] == '/')
		return xstrdup(path);
	_cleanup_free_ char *cwd = getcwd(NULL, 0);
	if (!cwd)
		return xstrdup(path); /* unreachable working directory: leave it to the user */
	return xasprintf("%s/%s", cwd, path);
}

static void set_string(struct config *cfg, size_t offset, char *value)
{
	char **field = (char **)((char *)cfg + offset);
	free(*field);
	*field = value;
}

/* Parses one value into its field; a bad value adds a problem and leaves the field as is. */
static void var_apply(struct config *cfg, const struct var *v, const char *s, struct problems *p)
{
	void *field = (char *)cfg + v->offset;
	char shown[ECHO_MAX + 4];
	uint64_t n;
	bool b;
	int i;

	echo(shown, s);
	switch (v->kind) {
	case V_STRING:
		set_string(cfg, v->offset, xstrdup(s));
		return;
	case V_PATH:
		set_string(cfg, v->offset, absolute(s));
		return;
	case V_SOCKET:
		if (s[0] != '/' || strlen(s) >= SUN_PATH_MAX) {
			problem_add(p, "%s: `%s` is not an absolute path shorter than %zu bytes",
				    v->name, shown, SUN_PATH_MAX);
			return;
		}
		set_string(cfg, v->offset, xstrdup(s));
		return;
	case V_NAME:
		if (!is_word(s, "._-", 64)) {
			problem_add(p, "%s: `%s` is not a template name (%s)", v->name, shown,
				    "up to 64 letters, digits, `.`, `_`, `-`; no leading `.`");
			return;
		}
		set_string(cfg, v->offset, xstrdup(s));
		return;
	case V_PREFIX:
		if (!is_word(s, "_-", 32)) {
			problem_add(p, "%s: `%s` is not a key prefix (%s)", v->name, shown,
				    "up to 32 letters, digits, `_`, `-`");
			return;
		}
		set_string(cfg, v->offset, xstrdup(s));
		return;
	case V_SIZE:
	case V_BYTES:
		i = size_parse(s, &n);
		if (i < 0) {
			problem_add(p, "%s: `%s` is %s", v->name, shown, size_parse_problem(i));
			return;
		}
		if (n < v->min || n > v->max) {
			problem_add(p, "%s: `%s` is not between %llu and %llu bytes", v->name,
				    shown, (unsigned long long)v->min, (unsigned long long)v->max);
			return;
		}
		if (v->kind == V_BYTES)
			*(uint64_t *)field = n;
		else
			*(size_t *)field = (size_t)n;
		return;
	case V_INT:
	case V_UINT:
	case V_U64:
		if (parse_u64(s, v->min, v->max, &n) < 0) {
			problem_add(p, "%s: `%s` is not a number between %llu and %llu", v->name,
				    shown, (unsigned long long)v->min, (unsigned long long)v->max);
			return;
		}
		if (v->kind == V_INT)
			*(int *)field = (int)n;
		else if (v->kind == V_UINT)
			*(unsigned *)field = (unsigned)n;
		else
			*(uint64_t *)field = n;
		return;
	case V_BOOL:
		if (parse_bool(s, &b) < 0) {
			problem_add(p, "%s: `%s` is not one of true, false, 1, 0, yes, no", v->name,
				    shown);
			return;
		}
		*(bool *)field = b;
		return;
	case V_MODE:
	case V_CHOICE:
		i = choice_index(v->choices, s);
		if (i < 0) {
			_cleanup_free_ char *list = choices_list(v->choices);
			problem_add(p, "%s: `%s` is not one of %s", v->name, shown, list);
			return;
		}
		if (v->kind == V_MODE)
			*(enum net_filter_mode *)field = (enum net_filter_mode)i;
		else
			set_string(cfg, v->offset, xstrdup(v->choices[i]));
		return;
	}
}

/* The agent beside the daemon in a build tree (build/src/sandboxd, build/agent/sandbox-agent),
 * else the installed one. */
static char *agent_bin_default(void)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = '\0';
		char *slash = strrchr(exe, '/');
		if (slash) {
			*slash = '\0';
			_cleanup_free_ char *guess = xasprintf("%s/../agent/sandbox-agent", exe);
			char *real = realpath(guess, NULL);
			if (real)
				return real;
		}
	}
	return xstrdup(AGENT_BIN_INSTALLED);
}

/* The dashboard built beside the daemon in a build tree (build/src/sandboxd, build/ui), else
 * the installed one. */
static char *ui_dir_default(void)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		exe[n] = '\0';
		char *slash = strrchr(exe, '/');
		if (slash) {
			*slash = '\0';
			_cleanup_free_ char *guess = xasprintf("%s/../ui/index.html", exe);
			_cleanup_free_ char *real = realpath(guess, NULL);
			char *end = real ? strrchr(real, '/') : NULL;
			if (end) {
				*end = '\0';
				return xstrdup(real);
			}
		}
	}
	return xstrdup(UI_DIR_INSTALLED);
}

/* An unset variable and an empty one both mean the default. */
static const char *env(const char *name)
{
	const char *s = getenv(name);
	return s && *s ? s : NULL;
}

/* The size of the filesystem path is on, or of its nearest existing ancestor's (the state
 * directory is made after the settings are read); 0 when none can be measured. */
static uint64_t fs_size_at(const char *path)
{
	if (!path || path[0] != '/')
		return 0;
	char dir[PATH_MAX];
	if (snprintf(dir, sizeof(dir), "%s", path) >= (int)sizeof(dir))
		return 0;
	for (;;) {
		struct statvfs st;
		if (statvfs(dir, &st) == 0)
			return (uint64_t)st.f_blocks * st.f_frsize;
		char *slash = strrchr(dir, '/');
		if (!slash || slash == dir)
			return statvfs("/", &st) == 0 ? (uint64_t)st.f_blocks * st.f_frsize : 0;
		*slash = '\0';
	}
}

int config_load(struct config *cfg, struct err *err)
{
	struct problems p = { 0 };

	memset(cfg, 0, sizeof(*cfg));
	for (size_t i = 0; i < ARRAY_SIZE(vars); i++) {
		if (vars[i].def)
			var_apply(cfg, &vars[i], vars[i].def, &p);
	}
	/* A default that does not parse is a bug in the table above, not a user error. */
	if (p.count) {
		fprintf(stderr, "config: bad built-in default: %s\n", p.text);
		abort();
	}

	for (size_t i = 0; i < ARRAY_SIZE(vars); i++) {
		const char *s = env(vars[i].name);
		if (s)
			var_apply(cfg, &vars[i], s, &p);
	}
	if (!cfg->agent_bin)
		cfg->agent_bin = agent_bin_default();
	if (!cfg->ui_dir)
		cfg->ui_dir = ui_dir_default();
	/* A key's default quota is a quarter of the server's cap, so that no key, nor two or
	 * three, can take it all. */
	struct {
		const char *name;
		unsigned *quota;
		unsigned cap;
	} quarters[] = {
		{ "SANDBOX_KEY_MAX_SESSIONS", &cfg->key_max_sessions, cfg->max_sessions },
		{ "SANDBOX_KEY_MAX_COMMANDS", &cfg->key_max_commands, cfg->max_commands },
		{ "SANDBOX_KEY_MAX_MCP_SESSIONS", &cfg->key_max_mcp_sessions,
		  cfg->mcp_max_sessions },
		{ "SANDBOX_KEY_MAX_FILE_OPS", &cfg->key_max_file_ops, cfg->max_file_ops },
		{ "SANDBOX_KEY_MAX_STREAMS", &cfg->key_max_streams, cfg->max_streams },
		{ "SANDBOX_KEY_MAX_WATCHES", &cfg->key_max_watches, cfg->max_watches },
	};
	for (size_t i = 0; i < ARRAY_SIZE(quarters); i++)
		if (!env(quarters[i].name))
			*quarters[i].quota = quarters[i].cap >= 4 ? quarters[i].cap / 4 : 1;

	enum log_level level = LOG_INFO;
	const char *ls = env("LOG_LEVEL");
	if (ls && log_level_parse(ls, &level) < 0) {
		char shown[ECHO_MAX + 4];
		echo(shown, ls);
		problem_add(&p,
			    "LOG_LEVEL: `%s` is not one of trace, debug, info, warn, error, fatal, "
			    "silent",
			    shown);
	}
	log_set_level(level);

	/* Text for a person at a terminal, JSON for journald and files (docs/configuration.md). */
	enum log_format format = LOG_FORMAT_AUTO;
	const char *lf = env("SANDBOX_LOG_FORMAT");
	if (lf && log_format_parse(lf, &format) < 0) {
		char shown[ECHO_MAX + 4];
		echo(shown, lf);
		problem_add(&p, "SANDBOX_LOG_FORMAT: `%s` is not one of auto, json, text", shown);
	}
	log_set_format(format);

	/* The defaults must fit under the caps, or every session would be refused. */
	if (cfg->memory_limit > cfg->max_memory)
		problem_add(
			&p, "VM_MEMORY_LIMIT_BYTES: %llu is above SANDBOX_MAX_MEMORY_BYTES (%llu)",
			(unsigned long long)cfg->memory_limit, (unsigned long long)cfg->max_memory);
	if (((uint64_t)cfg->mem_mib << 20) > cfg->max_memory)
		problem_add(&p, "VM_MEM_SIZE_MIB: %u MiB is above SANDBOX_MAX_MEMORY_BYTES (%llu)",
			    cfg->mem_mib, (unsigned long long)cfg->max_memory);
	if (cfg->vcpus > cfg->max_vcpus)
		problem_add(&p, "VM_VCPU_COUNT: %u is above SANDBOX_MAX_VCPUS (%u)", cfg->vcpus,
			    cfg->max_vcpus);
	if (cfg->disk_bytes > cfg->max_disk_bytes)
		problem_add(&p, "SANDBOX_DISK_BYTES: %llu is above SANDBOX_MAX_DISK_BYTES (%llu)",
			    (unsigned long long)cfg->disk_bytes,
			    (unsigned long long)cfg->max_disk_bytes);
	{
		char *end = NULL;
		const char *oc = cfg->disk_overcommit ? cfg->disk_overcommit : "4";
		errno = 0;
		double ratio = strtod(oc, &end);
		if (errno || end == oc || *end || !(ratio >= 1.0 && ratio <= 1000.0))
			problem_add(
				&p,
				"SANDBOX_DISK_OVERCOMMIT: `%s` is not a number from 1 to 1000 "
				"(the ratio of the disk bytes promised to the state filesystem's "
				"free room)",
				oc);
		else
			cfg->disk_overcommit_ratio = ratio;
	}
	/* A key's default share of the bytes sessions are promised: a quarter, like the counts
	 * above, of the host's memory and of what disk admission may promise (driver/room.h). */
	if (!env("SANDBOX_KEY_MAX_MEMORY_BYTES")) {
		long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
		if (pages > 0 && page > 0)
			cfg->key_max_memory_bytes = (uint64_t)pages * (uint64_t)page / 4;
	}
	if (!env("SANDBOX_KEY_MAX_DISK_BYTES")) {
		uint64_t size = fs_size_at(cfg->state_dir);
		if (size > cfg->disk_reserve_bytes)
			cfg->key_max_disk_bytes =
				(uint64_t)((double)(size - cfg->disk_reserve_bytes) *
					   (cfg->disk_overcommit_ratio >= 1.0
						    ? cfg->disk_overcommit_ratio
						    : 1.0) /
					   4.0);
	}

	if (!p.count)
		return 0;
	int r = problems_report(&p, err);
	free(p.text);
	return r;
}

void config_print_defaults(FILE *out)
{
	for (size_t i = 0; i < ARRAY_SIZE(vars); i++)
		fprintf(out, "%s=%s\n", vars[i].name, vars[i].def ? vars[i].def : "");
	fprintf(out, "LOG_LEVEL=info\n");
	fprintf(out, "SANDBOX_LOG_FORMAT=auto\n");
}

void config_print_names(FILE *out, const char *indent)
{
	for (size_t i = 0; i < ARRAY_SIZE(vars); i++)
		fprintf(out, "%s%s%s%s\n", indent, vars[i].name, vars[i].def ? "=" : "",
			vars[i].def ? vars[i].def : "");
	fprintf(out, "%sLOG_LEVEL=info\n", indent);
	fprintf(out, "%sSANDBOX_LOG_FORMAT=auto\n", indent);
}

void config_free(struct config *cfg)
{
	if (!cfg)
		return;
	for (size_t i = 0; i < ARRAY_SIZE(vars); i++) {
		switch (vars[i].kind) {
		case V_STRING:
		case V_PATH:
		case V_SOCKET:
		case V_NAME:
		case V_PREFIX:
		case V_CHOICE:
			set_string(cfg, vars[i].offset, NULL);
			break;
		default:
			break;
		}
	}
}
