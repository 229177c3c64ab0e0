/* config: the daemon's settings, read once from the environment and validated at start.
 *
 * Every variable of the reference project keeps its name and meaning; our own start with
 * SANDBOX_. config_load() reports every bad value, one message per line, in err. */
#pragma once

#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

enum net_filter_mode { NET_FILTER_NONE, NET_FILTER_ALLOW, NET_FILTER_DENY };

struct config {
	/* listening */
	char *host;         /* HOST, default 127.0.0.1 */
	int port;           /* PORT, default 3000; 0 picks a free port */
	char *socket_path;  /* SANDBOX_SOCKET, optional Unix socket */
	char *socket_group; /* SANDBOX_SOCKET_GROUP: the socket's group (mode 0660), default the
			       daemon's own */
	char *port_file;    /* SANDBOX_PORT_FILE: where the bound port is written (tests) */

	/* places */
	char *state_dir;     /* SANDBOX_STATE_DIR, default /var/lib/agent-sandbox/state */
	char *run_dir;       /* SANDBOX_RUN_DIR, default /run/agent-sandbox */
	char *artifacts_dir; /* FIRECRACKER_ARTIFACTS_DIR, default /var/lib/agent-sandbox/artifacts
			      */
	char *agent_bin;     /* SANDBOX_AGENT_BIN, default: sandbox-agent beside sandboxd */
	char *ui_dir; /* SANDBOX_UI_DIR: the dashboard's assets, default build/ui beside sandboxd,
			 else the installed ones */

	/* sandboxes */
	char *driver;              /* SANDBOX_DRIVER: auto|jail|qemu|firecracker */
	char *cgroup;              /* SANDBOX_CGROUP: auto|delegated|root, where a cgroup v2
				      host's sandboxes go (docs/hosts.md) */
	char *kernel_fallbacks;    /* SANDBOX_KERNEL_FALLBACKS: kernel features to treat as
				      missing, so that their fallbacks run on a kernel that has
				      them (docs/hosts.md): `mount-clone` */
	char *default_template;    /* SANDBOX_DEFAULT_TEMPLATE, default node */
	unsigned warm_pool;        /* SANDBOX_WARM_POOL, default 2 per template */
	unsigned max_sessions;     /* SANDBOX_MAX_SESSIONS, default 64 */
	unsigned max_commands;     /* SANDBOX_MAX_COMMANDS: running at once, default 256 */
	unsigned max_file_ops;     /* SANDBOX_MAX_FILE_OPS: in flight at once, default 64 */
	uint64_t max_upload_bytes; /* SANDBOX_MAX_UPLOAD_BYTES: a streamed upload, 4 GiB */
	unsigned max_streams;      /* SANDBOX_MAX_STREAMS: attaches and terminals open, 256 */
	/* Background processes, per session: how many may run, the replay buffer each gets by
	   default, and all of their buffers together (kept in the sandbox's memory). */
	unsigned max_processes;        /* SANDBOX_MAX_PROCESSES, default 128 */
	uint64_t process_replay_bytes; /* SANDBOX_PROCESS_REPLAY_BYTES, default 256 KiB */
	uint64_t session_replay_bytes; /* SANDBOX_SESSION_REPLAY_BYTES, default 32 MiB */
	unsigned max_watches;          /* SANDBOX_MAX_WATCHES: watch streams open at once, 64 */
	unsigned watch_max_dirs; /* SANDBOX_WATCH_MAX_DIRS: directories one watch covers, 8192 */
	/* What one key may hold at once unless it has its own quota (session/quota.h); 0 = no
	   quota. Each defaults to a quarter of the server's cap for the kind. */
	unsigned key_max_sessions;     /* SANDBOX_KEY_MAX_SESSIONS */
	unsigned key_max_commands;     /* SANDBOX_KEY_MAX_COMMANDS */
	unsigned key_max_mcp_sessions; /* SANDBOX_KEY_MAX_MCP_SESSIONS */
	unsigned key_max_file_ops;     /* SANDBOX_KEY_MAX_FILE_OPS */
	unsigned key_max_streams;      /* SANDBOX_KEY_MAX_STREAMS */
	unsigned key_max_watches;      /* SANDBOX_KEY_MAX_WATCHES */
	/* The bytes one key's sessions may be promised (0: any): their memory limits, unset a
	   quarter of the host's memory; their disks, unset a quarter of the state filesystem's
	   size (less its reserve) times SANDBOX_DISK_OVERCOMMIT. */
	uint64_t key_max_memory_bytes; /* SANDBOX_KEY_MAX_MEMORY_BYTES */
	uint64_t key_max_disk_bytes;   /* SANDBOX_KEY_MAX_DISK_BYTES */
	unsigned idle_timeout_s;       /* SESSION_IDLE_TIMEOUT (seconds), default 1800 */
	unsigned max_lifetime_s;       /* SESSION_MAX_LIFETIME (seconds), default 86400; 0 = none */
	unsigned vcpus;                /* VM_VCPU_COUNT, default 1 */
	unsigned mem_mib;              /* VM_MEM_SIZE_MIB, default 128 */
	uint64_t cpu_quota_us;         /* VM_CPU_QUOTA_US, default 50000 */
	uint64_t cpu_period_us;        /* VM_CPU_PERIOD_US, default 100000 */
	uint64_t memory_limit; /* VM_MEMORY_LIMIT_BYTES, default 128 MiB (host-side cgroup) */
	unsigned nofile;       /* VM_NOFILE_LIMIT, default 1024 */
	uint64_t disk_limit;   /* VM_DISK_LIMIT_BYTES, default 512 MiB (workspace size) */
	unsigned pids_max;     /* SANDBOX_PIDS_MAX, default 256 */
	/* jail: where a sandbox's writable files live (docs/storage.md) */
	char *storage;           /* SANDBOX_STORAGE: disk|tmpfs, default disk */
	uint64_t disk_bytes;     /* SANDBOX_DISK_BYTES: a sandbox's disk, default 1 GiB */
	uint64_t max_disk_bytes; /* SANDBOX_MAX_DISK_BYTES: cap of any sandbox's disk, 16 GiB */
	/* SANDBOX_DISK_OVERCOMMIT: disk bytes promised per byte of the state filesystem's free
	   room, from 1 (every disk's size allocated when it is made) to 1000, default 4; parsed
	   into disk_overcommit_ratio */
	char *disk_overcommit;
	double disk_overcommit_ratio;
	/* SANDBOX_DISK_RESERVE_BYTES: free space of the state filesystem no disk may take,
	   default 1 GiB */
	uint64_t disk_reserve_bytes;
	uint64_t max_volume_bytes;     /* SANDBOX_MAX_VOLUME_BYTES: cap of a volume's size */
	unsigned key_max_volumes;      /* SANDBOX_KEY_MAX_VOLUMES: volumes a key may own (0: any) */
	uint64_t key_max_volume_bytes; /* SANDBOX_KEY_MAX_VOLUME_BYTES: their sizes' sum (0: any) */
	/* SANDBOX_KEY_MAX_BODY_BYTES: bytes of request bodies one key may have the daemon hold
	   at once, in memory and spooled to the state directory (0: any), default 256 MiB */
	uint64_t key_max_body_bytes;
	/* SANDBOX_MAX_BODY_SPOOL_BYTES: bytes of large bodies kept in files of the state
	   directory at once, all keys together (0: any), default 1 GiB */
	uint64_t max_body_spool_bytes;
	unsigned
		key_max_snapshots; /* SANDBOX_KEY_MAX_SNAPSHOTS: snapshots a key may own (0: any) */
	uint64_t key_max_snapshot_bytes; /* SANDBOX_KEY_MAX_SNAPSHOT_BYTES: their bytes (0: any) */
	unsigned snapshot_ttl_s; /* SANDBOX_SNAPSHOT_TTL: a snapshot's default and longest life */
	/* Caps, separate from the defaults above: no session's limits (asked for, from its
	 * template's manifest or the default) go past them. */
	uint64_t max_memory; /* SANDBOX_MAX_MEMORY_BYTES, default 4 GiB */
	unsigned max_vcpus;  /* SANDBOX_MAX_VCPUS, default 4 */
	/* SANDBOX_MEMORY_WATERMARK_BYTES, default 256 MiB: while the host's MemAvailable is
	 * below it, no new session is admitted; 0: no check. */
	uint64_t memory_watermark;
	/* SANDBOX_DESCRIPTOR_RESERVE, default 512: while fewer of the daemon's descriptors are
	 * free, no new session is admitted; 0: no check. */
	unsigned descriptor_reserve;

	/* jail: each sandbox's user namespace maps its root to a host uid range of 65536 */
	uint64_t uid_base;   /* SANDBOX_UID_BASE: the first range's first uid, default 0x70000000 */
	unsigned uid_ranges; /* SANDBOX_UID_RANGES: how many ranges, default 1024 */
	char *subuid_file;   /* SANDBOX_SUBUID_FILE: ranges given to users, default /etc/subuid */
	char *subgid_file;   /* SANDBOX_SUBGID_FILE: default /etc/subgid */
	char *subid_owner;   /* SANDBOX_SUBID_OWNER: whose subuid/subgid entries register the
				ranges for sandboxd itself, default agent-sandbox */

	/* requests */
	size_t max_body_bytes;   /* SANDBOX_MAX_BODY_BYTES, default 96 MiB */
	size_t max_output_bytes; /* SANDBOX_MAX_OUTPUT_BYTES: buffered execute output, default 16
				    MiB */
	size_t max_read_bytes;   /* SANDBOX_MAX_READ_BYTES: largest file read, default 64 MiB */
	/* SANDBOX_MCP_MAX_READ_BYTES: largest MCP read_file (one JSON-RPC message), 4 MiB */
	size_t mcp_max_read_bytes;
	/* SANDBOX_MAX_JSON_DEPTH, SANDBOX_MAX_JSON_ELEMENTS: a JSON request body's nesting and
	 * number of values (32, 10000) */
	unsigned max_json_depth;
	unsigned max_json_elements;
	unsigned default_timeout_ms; /* SANDBOX_EXEC_TIMEOUT_MS: when a request gives none, default
					0 = none */
	unsigned workers;            /* SANDBOX_WORKERS: blocking-work threads, default 4 */

	/* connections (docs/operations.md, "Connections") */
	/* SANDBOX_MAX_CONNECTIONS: client connections open at once; default 0 = half of what the
	   descriptor limit leaves after a reserve */
	unsigned http_max_connections;
	/* SANDBOX_MAX_CONNECTIONS_PER_ADDRESS: connections from one address that have not yet
	   passed a key check, default 128 */
	unsigned http_max_per_address;
	/* SANDBOX_HEADER_TIMEOUT_MS: for a request's head to arrive, default 10000 */
	unsigned http_header_timeout_ms;
	/* SANDBOX_BODY_TIMEOUT_MS: the longest pause within a request's body, default 60000 */
	unsigned http_body_timeout_ms;
	/* SANDBOX_BODY_MIN_RATE: bytes a second a request's body must average, after a first
	   SANDBOX_BODY_TIMEOUT_MS, for as long as the daemon reads it; default 1024, 0 for none */
	unsigned http_body_min_rate;
	/* SANDBOX_KEEPALIVE_TIMEOUT_MS: an idle kept-alive connection is closed after, default
	   60000 */
	unsigned http_keepalive_timeout_ms;
	/* SANDBOX_ALLOWED_HOSTS: Host names requests may name, comma-separated ("*.example.com"
	   for every name under it); default: loopback names when listening on loopback, any
	   otherwise. IP literals are always accepted. */
	char *allowed_hosts;
	/* SANDBOX_ALLOWED_ORIGINS: browser origins that may call the API, comma-separated ("*":
	   any); this machine's own loopback origins always may. SANDBOX_MCP_ALLOWED_ORIGINS is
	   its older name, still read (the two lists are joined). */
	char *allowed_origins;
	/* previews (docs/ingress.md) */
	/* SANDBOX_PUBLIC_DOMAIN: `<port>-<name>.<domain>` Host names reach sessions' ports,
	   default localhost */
	char *public_domain;
	/* SANDBOX_PREVIEW_URL: how a preview URL is written, with {port} and {name}; default
	   http://{port}-{name}.<domain>:<PORT>/ */
	char *preview_url;
	/* SANDBOX_PREVIEW_MAX_CONNECTIONS: connections to one session's ports at once, 64 */
	unsigned preview_max_connections;
	/* SANDBOX_PREVIEW_IDLE_TIMEOUT_MS: a proxied connection with no bytes either way is
	   closed after, default 300000 */
	unsigned preview_idle_timeout_ms;

	/* waits: each default suits production; tests shorten them */
	/* SANDBOX_FIRST_REPLY_TIMEOUT_MS: for a new sandbox's agent to answer, default 30000 */
	unsigned first_reply_timeout_ms;
	/* SANDBOX_FILE_OP_TIMEOUT_MS: for one file operation, default 120000 */
	unsigned file_op_timeout_ms;
	/* SANDBOX_PING_INTERVAL_MS: between liveness pings of an agent, default 10000; 0 = none */
	unsigned ping_interval_ms;
	/* SANDBOX_PING_TIMEOUT_MS: a ping unanswered this long fails its sandbox, default 30000 */
	unsigned ping_timeout_ms;
	/* SANDBOX_SHUTDOWN_GRACE_MS: for in-flight requests to finish on SIGTERM, default 10000 */
	unsigned shutdown_grace_ms;
	/* SANDBOX_REAPER_INTERVAL_MS: between idle and lifetime checks, default 1000 */
	unsigned reaper_interval_ms;
	/* SANDBOX_POOL_RETRY_MS: first back-off of a failing warm pool, default 5000 */
	unsigned pool_retry_ms;

	/* auth */
	bool auth_enabled;    /* AUTH_ENABLED, default true */
	char *key_prefix;     /* AUTH_KEY_PREFIX, default sk_test_ */
	char *mcp_auth_token; /* MCP_AUTH_TOKEN (legacy) */

	/* firecracker */
	char *fc_bin;        /* FIRECRACKER_BIN */
	char *fc_jailer_bin; /* FIRECRACKER_JAILER_BIN */
	char *fc_jail_base;  /* FIRECRACKER_JAIL_BASE */
	unsigned fc_uid;     /* FIRECRACKER_UID, default 997 */
	unsigned fc_gid;     /* FIRECRACKER_GID, default 982 */
	bool fc_kvm_check;   /* FIRECRACKER_KVM_CHECK, default true: probe /dev/kvm when chosen */

	/* qemu */
	char *qemu_bin;   /* SANDBOX_QEMU_BIN, default qemu-system-x86_64 */
	char *qemu_accel; /* SANDBOX_QEMU_ACCEL: auto|kvm|tcg */

	/* sandbox networking */
	char *network;  /* SANDBOX_NETWORK: auto|on|off */
	char *net_pool; /* SANDBOX_NET_POOL, default 10.200.0.0/16 */
	char *nft_bin;  /* SANDBOX_NFT: the nft binary (default: found on PATH) */

	/* the E2B-compatible API (docs/e2b.md) */
	char *e2b_template_aliases; /* E2B_TEMPLATE_ALIASES: "alias=template,...", default
				       base=code-interpreter (else the template base),
				       code-interpreter-v1=code-interpreter, else python */
	char *e2b_envd_version;     /* E2B_ENVD_VERSION: what create reports, default 0.5.7 */

	/* many hosts on etcd (docs/cluster.md) */
	char *cluster;                /* SANDBOX_CLUSTER: etcd endpoints; unset: one host */
	char *node_name;              /* SANDBOX_NODE_NAME, default the host name */
	char *node_url;               /* SANDBOX_NODE_URL: where the other nodes reach this one */
	char *node_labels;            /* SANDBOX_NODE_LABELS: "k=v,k2=v2" */
	char *cluster_secret_file;    /* SANDBOX_CLUSTER_SECRET_FILE: the nodes' shared secret */
	char *cluster_prefix;         /* SANDBOX_CLUSTER_PREFIX, default /agent-sandbox/ */
	unsigned cluster_lease_ttl_s; /* SANDBOX_CLUSTER_LEASE_TTL, default 10 */
	unsigned cluster_timeout_ms;  /* SANDBOX_CLUSTER_TIMEOUT_MS, default 2000 */
	char *etcd_user;              /* SANDBOX_ETCD_USER */
	char *etcd_password_file;     /* SANDBOX_ETCD_PASSWORD_FILE */
	char *etcd_ca;                /* SANDBOX_ETCD_CA */
	char *etcd_cert;              /* SANDBOX_ETCD_CERT */
	char *etcd_key;               /* SANDBOX_ETCD_KEY */

	/* MCP */
	char *mcp_allowed_origins;      /* SANDBOX_MCP_ALLOWED_ORIGINS, comma-separated */
	unsigned mcp_session_timeout_s; /* SANDBOX_MCP_SESSION_TIMEOUT, default 1800 */
	unsigned mcp_max_sessions;      /* SANDBOX_MCP_MAX_SESSIONS, default 256 */
	unsigned mcp_sweep_interval_ms; /* SANDBOX_MCP_SWEEP_INTERVAL_MS: idle sessions are looked
					   for this often, default 5000 */

	/* network egress */
	enum net_filter_mode dns_mode;  /* VM_DNS_MODE */
	char *dns_domains;              /* VM_DNS_DOMAINS */
	char *dns_upstream;             /* VM_DNS_UPSTREAM */
	enum net_filter_mode dest_mode; /* VM_DEST_MODE */
	char *dest_rules;               /* VM_DEST_RULES */
	bool bw_enabled;                /* VM_BW_ENABLED */
	unsigned bw_rate_kbit;          /* VM_BW_RATE_KBIT */
	unsigned bw_burst_kbit;         /* VM_BW_BURST_KBIT */
};

/* Fills cfg from the environment (envp-style lookups through getenv). On any invalid value
 * returns -EINVAL with every problem listed in err->msg; cfg is then still freeable. */
int config_load(struct config *cfg, struct err *err);

/* Every setting as NAME=default, one a line, in the table's order (empty: unset, or computed
 * at start); what the packaged environment file is checked against. */
void config_print_defaults(FILE *out);

/* The same for --help: each line after indent, NAME=default or NAME alone when unset. */
void config_print_names(FILE *out, const char *indent);

/* Frees the strings owned by cfg. */
void config_free(struct config *cfg);
