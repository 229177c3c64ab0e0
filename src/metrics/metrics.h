/* metrics: a small Prometheus registry and its text exposition (format 0.0.4).
 *
 * Metrics are declared once at start with a fixed list of label names; callers pass label
 * values from bounded sets only (route templates, not paths; never session ids, commands
 * or file names). Every metric also caps its series count: values past the cap are folded
 * into one series whose labels are all "other", so no client can grow memory without
 * bound. Safe from any thread. */
#pragma once

#include <stddef.h>

enum metric_type { METRIC_COUNTER, METRIC_GAUGE, METRIC_HISTOGRAM };

struct metric;

/* `labels` is a comma-separated list of label names, or NULL. */
struct metric *metrics_counter(const char *name, const char *help, const char *labels);
struct metric *metrics_gauge(const char *name, const char *help, const char *labels);
/* Buckets are upper bounds in increasing order (+Inf is implied); NULL: the default latency
 * buckets (0.0001 s to 30 s). */
struct metric *metrics_histogram(const char *name, const char *help, const char *labels,
				 const double *buckets, size_t nbuckets);

/* Label values follow v, one per declared label name, as const char *. */
void metrics_add(struct metric *m, double v, ...);
void metrics_set(struct metric *m, double v, ...);
void metrics_observe(struct metric *m, double v, ...);

/* Adds a hook called at each scrape before rendering (to refresh gauges). */
void metrics_on_scrape(void (*fn)(void *arg), void *arg);

/* The exposition text (caller frees). */
char *metrics_render(size_t *len);

/* Drops every metric (tests, shutdown). */
void metrics_reset(void);

/* The daemon's own metrics, declared by metrics_init(): the reference project's names, plus
 * ours. */
struct sandbox_metrics {
	struct metric *active_vm_count;       /* gauge {state} */
	struct metric *vm_creation_time;      /* histogram {driver, source} */
	struct metric *exec_sessions_active;  /* gauge */
	struct metric *exec_session_duration; /* histogram */
	struct metric *exec_message_total;    /* counter {type} */
	struct metric *exec_message_duration; /* histogram {type} */
	struct metric *vsock_connection_time; /* histogram */
	struct metric *vsock_errors_total;    /* counter {kind} */
	struct metric *vm_resource_config;    /* gauge {resource} */
	struct metric
		*vm_egress_policy_applied_total; /* counter {dns_mode, dest_mode, bw_enabled} */
	struct metric *http_requests_total;      /* counter {route, method, status} */
	struct metric *http_request_duration;    /* histogram {route, method} */
	struct metric *http_connections;         /* gauge */
	struct metric *http_connections_closed;  /* counter {reason} */
	struct metric *http_bodies_offloaded;    /* counter */
	struct metric *spawns;                   /* counter {via}: spawner, daemon */
	struct metric *session_creations_total;  /* counter {template, driver, result} */
	struct metric *warm_pool_size;           /* gauge {template} */
	struct metric *sandbox_disk_bytes;       /* gauge {kind}: used, allocated */
	struct metric *volumes;                  /* gauge {kind}: count, bytes (their sizes) */
	struct metric *snapshots;     /* gauge {kind}: count, bytes (what their saves hold) */
	struct metric *session_saves; /* gauge {state}: running, waiting (the save gate) */
	struct metric *guest_protocol_errors_total; /* counter {kind} */
	struct metric *watches_active;              /* gauge */
	struct metric *watch_events_total;          /* counter {type} */
	struct metric *egress_decisions_total;      /* counter {decision, reason} */
	struct metric *preview_requests_total;      /* counter {form, status} */
	struct metric *preview_bytes_total;         /* counter {direction} */
	struct metric *preview_connections;         /* gauge */
	struct metric *admission_refusals_total;    /* counter {reason} */
	struct metric *host_memory_available_bytes; /* gauge */
	struct metric *descriptors_free;            /* gauge */
	struct metric *http_body_bytes;             /* gauge, where */
	struct metric *state_fs_free_bytes;         /* gauge */
	struct metric *state_fs_size_bytes;         /* gauge */
	struct metric *state_fs_reserve_bytes;      /* gauge */
	struct metric *disk_reserve_stops_total;    /* counter */
	struct metric *sessions_paused;             /* gauge {mode} */
	struct metric *session_pauses_total;        /* counter {action, result} */
	struct metric *session_pause_duration;      /* histogram {action} */
	/* many hosts (cluster/): nodes by state, sessions by node (bounded by the nodes),
	 * whether etcd takes this node's renewals, etcd requests, forwarded requests */
	struct metric *cluster_nodes;            /* gauge {state}: up, down, cordoned */
	struct metric *cluster_sessions;         /* gauge {node} */
	struct metric *cluster_store_up;         /* gauge */
	struct metric *cluster_etcd_requests;    /* counter {op, result} */
	struct metric *cluster_watch_restarts;   /* counter {reason} */
	struct metric *cluster_forwarded_total;  /* counter {kind, result} */
	struct metric *cluster_forward_duration; /* histogram {kind} */
};

/* Every module records into these; NULL (a no-op) until metrics_init() and after
 * metrics_reset(). */
extern struct sandbox_metrics metrics_daemon;

void metrics_init(void);
