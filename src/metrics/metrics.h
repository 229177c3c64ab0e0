/* metrics: a small Prometheus registry and its text exposition (format 0.0.4).
 *
 * Metrics are declared once at start with a fixed list of label names; callers pass label
 * values from bounded sets only (route templates, not paths; never session ids, commands
 * or file names). Every metric also caps its series count: values past the cap are folded
 * into one series whose labels are all "other", so no client can grow memory without
 * bound. Safe from any thread. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

/* Runs the scrape hooks, so that the gauges they keep are current (metrics_render does). */
void metrics_refresh(void);

/* The sum of the values of a counter's or a gauge's series (a histogram's: of its sums, and
 * the count of its observations in *ret_count unless NULL), over the series whose label
 * `label` has a value `keep` accepts (label NULL: every series). 0 for a NULL metric. */
double metrics_total(struct metric *m, const char *label, bool (*keep)(const char *value),
		     uint64_t *ret_count);

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

/* --- history (history.c) -----------------------------------------------------------------
 * The daemon's main figures over the last hour, for the dashboard's charts: a ring of
 * METRICS_HISTORY_MAX samples (fixed memory), one taken every METRICS_HISTORY_INTERVAL_MS by
 * whoever owns the timer (api/metrics.c). Counters are kept as they are (cumulative since the
 * daemon started), so that a reader makes rates and means between any two samples. */
#define METRICS_HISTORY_INTERVAL_MS 10000
#define METRICS_HISTORY_MAX         360

struct metrics_sample {
	uint64_t t_ms;      /* when, wall clock (ms since the epoch) */
	double sessions;    /* exec_sessions_active */
	uint64_t creations; /* vm_creation_time's count */
	double creation_s;  /* vm_creation_time's sum, seconds */
	double executes;    /* exec_message_total{type="execute"} */
	double errors;      /* 5xx replies, vsock and guest protocol errors, failed creations */
};

/* Takes a sample of metrics_daemon (hooks run first: metrics_refresh) stamped t_ms into the
 * ring, dropping the oldest past METRICS_HISTORY_MAX. From the loop thread (the hooks'). */
void metrics_history_sample(uint64_t t_ms);
/* Adds a sample as it is (tests). */
void metrics_history_add(const struct metrics_sample *s);
/* Copies into out the newest `max` (at most) of the samples taken after since_ms, oldest
 * first; returns how many. */
size_t metrics_history_read(uint64_t since_ms, struct metrics_sample *out, size_t max);
/* Empties the ring (tests, shutdown). */
void metrics_history_reset(void);
