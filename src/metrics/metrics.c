#include "metrics/metrics.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "util/cleanup.h"

#define MAX_LABELS 4
#define MAX_SERIES 500

struct series {
	char *values[MAX_LABELS];
	double value;   /* counter/gauge; histogram sum */
	uint64_t count; /* histogram */
	uint64_t *bucket_counts;
};

struct metric {
	char *name;
	char *help;
	enum metric_type type;
	char *labels[MAX_LABELS];
	size_t nlabels;
	double *buckets;
	size_t nbuckets;
	struct series *series;
	size_t nseries;
	struct metric *next;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct metric *all, **tail = &all;
static struct {
	void (*fn)(void *);
	void *arg;
} hooks[8];
static size_t nhooks;

struct sandbox_metrics metrics_daemon;

static const double default_buckets[] = { 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005,
					  0.01,   0.025,   0.05,   0.1,   0.25,   0.5,
					  1,      2.5,     5,      10,    30 };

static struct metric *declare(const char *name, const char *help, const char *labels,
			      enum metric_type type)
{
	struct metric *m = xcalloc(1, sizeof(*m));
	m->name = xstrdup(name);
	m->help = xstrdup(help);
	m->type = type;
	if (labels) {
		_cleanup_free_ char *copy = xstrdup(labels);
		char *save = NULL;
		for (char *t = strtok_r(copy, ",", &save); t && m->nlabels < MAX_LABELS;
		     t = strtok_r(NULL, ",", &save))
			m->labels[m->nlabels++] = xstrdup(t);
	}
	pthread_mutex_lock(&lock);
	*tail = m;
	tail = &m->next;
	pthread_mutex_unlock(&lock);
	return m;
}

struct metric *metrics_counter(const char *name, const char *help, const char *labels)
{
	return declare(name, help, labels, METRIC_COUNTER);
}

struct metric *metrics_gauge(const char *name, const char *help, const char *labels)
{
	return declare(name, help, labels, METRIC_GAUGE);
}

struct metric *metrics_histogram(const char *name, const char *help, const char *labels,
				 const double *buckets, size_t nbuckets)
{
	struct metric *m = declare(name, help, labels, METRIC_HISTOGRAM);
	if (!buckets) {
		buckets = default_buckets;
		nbuckets = ARRAY_SIZE(default_buckets);
	}
	m->buckets = xcalloc(nbuckets, sizeof(double));
	memcpy(m->buckets, buckets, nbuckets * sizeof(double));
	m->nbuckets = nbuckets;
	return m;
}

/* The series for these label values, created if needed (lock held). */
static struct series *series_for(struct metric *m, va_list ap)
{
	const char *vals[MAX_LABELS];
	for (size_t i = 0; i < m->nlabels; i++) {
		vals[i] = va_arg(ap, const char *);
		if (!vals[i])
			vals[i] = "";
	}
	for (size_t s = 0; s < m->nseries; s++) {
		size_t i;
		for (i = 0; i < m->nlabels; i++)
			if (strcmp(m->series[s].values[i], vals[i]) != 0)
				break;
		if (i == m->nlabels)
			return &m->series[s];
	}
	if (m->nseries >= MAX_SERIES) {
		/* Fold the excess into one "other" series. */
		for (size_t i = 0; i < m->nlabels; i++)
			vals[i] = "other";
		for (size_t s = 0; s < m->nseries; s++) {
			size_t i;
			for (i = 0; i < m->nlabels; i++)
				if (strcmp(m->series[s].values[i], "other") != 0)
					break;
			if (i == m->nlabels)
				return &m->series[s];
		}
	}
	m->series = xrealloc(m->series, (m->nseries + 1) * sizeof(*m->series));
	struct series *s = &m->series[m->nseries++];
	memset(s, 0, sizeof(*s));
	for (size_t i = 0; i < m->nlabels; i++)
		s->values[i] = xstrdup(vals[i]);
	if (m->type == METRIC_HISTOGRAM)
		s->bucket_counts = xcalloc(m->nbuckets, sizeof(uint64_t));
	return s;
}

void metrics_add(struct metric *m, double v, ...)
{
	if (!m)
		return;
	va_list ap;
	va_start(ap, v);
	pthread_mutex_lock(&lock);
	series_for(m, ap)->value += v;
	pthread_mutex_unlock(&lock);
	va_end(ap);
}

void metrics_set(struct metric *m, double v, ...)
{
	if (!m)
		return;
	va_list ap;
	va_start(ap, v);
	pthread_mutex_lock(&lock);
	series_for(m, ap)->value = v;
	pthread_mutex_unlock(&lock);
	va_end(ap);
}

void metrics_observe(struct metric *m, double v, ...)
{
	if (!m)
		return;
	va_list ap;
	va_start(ap, v);
	pthread_mutex_lock(&lock);
	struct series *s = series_for(m, ap);
	s->value += v;
	s->count++;
	for (size_t i = 0; i < m->nbuckets; i++)
		if (v <= m->buckets[i])
			s->bucket_counts[i]++;
	pthread_mutex_unlock(&lock);
	va_end(ap);
}

void metrics_on_scrape(void (*fn)(void *arg), void *arg)
{
	if (nhooks < ARRAY_SIZE(hooks))
		hooks[nhooks++] = (typeof(hooks[0])){ fn, arg };
}

/* Label values escaped as the text format requires. */
static void put_escaped(FILE *f, const char *s)
{
	for (; *s; s++) {
		if (*s == '\\' || *s == '"')
			fputc('\\', f), fputc(*s, f);
		else if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
}

static void put_labels(FILE *f, const struct metric *m, const struct series *s,
		       const char *extra_name, const char *extra_value)
{
	if (!m->nlabels && !extra_name)
		return;
	fputc('{', f);
	for (size_t i = 0; i < m->nlabels; i++) {
		fprintf(f, "%s%s=\"", i ? "," : "", m->labels[i]);
		put_escaped(f, s->values[i]);
		fputc('"', f);
	}
	if (extra_name)
		fprintf(f, "%s%s=\"%s\"", m->nlabels ? "," : "", extra_name, extra_value);
	fputc('}', f);
}

static void put_value(FILE *f, double v)
{
	if (isinf(v))
		fputs(v > 0 ? "+Inf" : "-Inf", f);
	else if (v == (double)(int64_t)v && fabs(v) < 1e15)
		fprintf(f, "%lld", (long long)v);
	else
		fprintf(f, "%.9g", v);
}

void metrics_refresh(void)
{
	for (size_t i = 0; i < nhooks; i++)
		hooks[i].fn(hooks[i].arg);
}

double metrics_total(struct metric *m, const char *label, bool (*keep)(const char *value),
		     uint64_t *ret_count)
{
	double sum = 0;
	uint64_t count = 0;
	if (m) {
		pthread_mutex_lock(&lock);
		size_t li = 0;
		while (label && li < m->nlabels && strcmp(m->labels[li], label) != 0)
			li++;
		for (size_t i = 0; i < m->nseries; i++) {
			/* A label the metric does not have: no series has a value for it. */
			if (label && (li == m->nlabels || !keep(m->series[i].values[li])))
				continue;
			sum += m->series[i].value;
			count += m->series[i].count;
		}
		pthread_mutex_unlock(&lock);
	}
	if (ret_count)
		*ret_count = count;
	return sum;
}

char *metrics_render(size_t *len)
{
	metrics_refresh();
	char *buf = NULL;
	size_t size = 0;
	FILE *f = open_memstream(&buf, &size);
	pthread_mutex_lock(&lock);
	for (struct metric *m = all; m; m = m->next) {
		static const char *const types[] = { "counter", "gauge", "histogram" };
		fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", m->name, m->help, m->name,
			types[m->type]);
		if (m->nseries == 0 && m->nlabels == 0 && m->type != METRIC_HISTOGRAM) {
			fprintf(f, "%s 0\n", m->name);
			continue;
		}
		for (size_t i = 0; i < m->nseries; i++) {
			const struct series *s = &m->series[i];
			if (m->type != METRIC_HISTOGRAM) {
				fputs(m->name, f);
				put_labels(f, m, s, NULL, NULL);
				fputc(' ', f);
				put_value(f, s->value);
				fputc('\n', f);
				continue;
			}
			for (size_t b = 0; b < m->nbuckets; b++) {
				char le[32];
				snprintf(le, sizeof(le), "%g", m->buckets[b]);
				fprintf(f, "%s_bucket", m->name);
				put_labels(f, m, s, "le", le);
				fprintf(f, " %llu\n", (unsigned long long)s->bucket_counts[b]);
			}
			fprintf(f, "%s_bucket", m->name);
			put_labels(f, m, s, "le", "+Inf");
			fprintf(f, " %llu\n%s_sum", (unsigned long long)s->count, m->name);
			put_labels(f, m, s, NULL, NULL);
			fputc(' ', f);
			put_value(f, s->value);
			fprintf(f, "\n%s_count", m->name);
			put_labels(f, m, s, NULL, NULL);
			fprintf(f, " %llu\n", (unsigned long long)s->count);
		}
	}
	pthread_mutex_unlock(&lock);
	fclose(f);
	if (len)
		*len = size;
	return buf;
}

void metrics_reset(void)
{
	pthread_mutex_lock(&lock);
	while (all) {
		struct metric *m = all;
		all = m->next;
		for (size_t i = 0; i < m->nseries; i++) {
			for (size_t j = 0; j < m->nlabels; j++)
				free(m->series[i].values[j]);
			free(m->series[i].bucket_counts);
		}
		for (size_t j = 0; j < m->nlabels; j++)
			free(m->labels[j]);
		free(m->series);
		free(m->buckets);
		free(m->name);
		free(m->help);
		free(m);
	}
	tail = &all;
	nhooks = 0;
	memset(&metrics_daemon, 0, sizeof(metrics_daemon));
	pthread_mutex_unlock(&lock);
}

void metrics_init(void)
{
	static const double vm_buckets[] = { 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
					     0.25,  0.5,    1,     2,    5,     10,   30 };
	static const double life_buckets[] = {
		1, 10, 60, 300, 900, 1800, 3600, 7200, 21600, 86400
	};
	metrics_daemon.active_vm_count =
		metrics_gauge("active_vm_count", "Sandboxes by state", "state");
	metrics_daemon.vm_creation_time =
		metrics_histogram("vm_creation_time",
				  "Seconds to create a sandbox (snapshot restore or "
				  "warm-pool hand-over)",
				  "driver,source", vm_buckets, ARRAY_SIZE(vm_buckets));
	metrics_daemon.exec_sessions_active =
		metrics_gauge("exec_sessions_active", "Sessions alive", NULL);
	metrics_daemon.exec_session_duration =
		metrics_histogram("exec_session_duration_seconds", "Session lifetimes", NULL,
				  life_buckets, ARRAY_SIZE(life_buckets));
	metrics_daemon.exec_message_total = metrics_counter(
		"exec_message_total", "Operations sent to sandboxes by type", "type");
	metrics_daemon.watches_active =
		metrics_gauge("watches_active", "Watches open in sandboxes' agents", NULL);
	metrics_daemon.preview_requests_total = metrics_counter(
		"preview_requests_total",
		"Requests to sessions' ports by URL form (host, path, forward) and status class",
		"form,status");
	metrics_daemon.preview_bytes_total = metrics_counter(
		"preview_bytes_total", "Bytes carried to (in) and from (out) sessions' ports",
		"direction");
	metrics_daemon.preview_connections =
		metrics_gauge("preview_connections", "Connections to sessions' ports open", NULL);
	metrics_daemon.admission_refusals_total = metrics_counter(
		"admission_refusals_total",
		"Sessions refused because the host was short of memory or descriptors, or the "
		"server's cap was held by sandboxes still being torn down",
		"reason");
	metrics_daemon.host_memory_available_bytes = metrics_gauge(
		"host_memory_available_bytes", "The host's MemAvailable at the last scrape", NULL);
	metrics_daemon.descriptors_free = metrics_gauge(
		"descriptors_free", "The daemon's descriptors left below its limit", NULL);
	metrics_daemon.state_fs_free_bytes = metrics_gauge(
		"state_fs_free_bytes", "Free bytes of the state directory's filesystem", NULL);
	metrics_daemon.state_fs_size_bytes = metrics_gauge(
		"state_fs_size_bytes", "Size of the state directory's filesystem", NULL);
	metrics_daemon.state_fs_reserve_bytes =
		metrics_gauge("state_fs_reserve_bytes",
			      "Free bytes of the state filesystem no disk may take "
			      "(SANDBOX_DISK_RESERVE_BYTES)",
			      NULL);
	metrics_daemon.disk_reserve_stops_total = metrics_counter(
		"disk_reserve_stops_total",
		"Sessions frozen because the state filesystem reached its reserve", NULL);
	metrics_daemon.watch_events_total = metrics_counter(
		"watch_events_total", "Watch events delivered to clients by type", "type");
	metrics_daemon.exec_message_duration =
		metrics_histogram("exec_message_duration_seconds",
				  "Operation round-trip time by type", "type", NULL, 0);
	metrics_daemon.vsock_connection_time =
		metrics_histogram("vsock_connection_time",
				  "Seconds from a new sandbox to its agent's "
				  "first answer",
				  NULL, vm_buckets, ARRAY_SIZE(vm_buckets));
	metrics_daemon.vsock_errors_total = metrics_counter(
		"vsock_errors_total", "Errors on sandbox agent connections by kind", "kind");
	metrics_daemon.vm_resource_config = metrics_gauge(
		"vm_resource_config", "Configured per-sandbox resource limits", "resource");
	metrics_daemon.vm_egress_policy_applied_total = metrics_counter(
		"vm_egress_policy_applied_total", "Egress policies applied to sandboxes",
		"dns_mode,dest_mode,bw_enabled");
	metrics_daemon.http_requests_total = metrics_counter(
		"http_requests_total", "HTTP requests by route template, method and status",
		"route,method,status");
	metrics_daemon.http_connections =
		metrics_gauge("http_connections", "Client connections open", NULL);
	metrics_daemon.http_connections_closed =
		metrics_counter("http_connections_closed_total",
				"Client connections the server closed early: refused at a cap, "
				"evicted to make room, "
				"too slow to send a request, or taking nothing of a reply",
				"reason");
	metrics_daemon.spawns = metrics_counter(
		"process_spawns_total",
		"Children started (sandboxes' first processes, VMMs, helper programs), by the "
		"spawner or, without one, by the daemon itself",
		"via");
	metrics_daemon.http_body_bytes = metrics_gauge(
		"http_request_body_bytes",
		"Bytes of request bodies being received, in memory or spooled to the state "
		"directory",
		"where");
	metrics_daemon.http_bodies_offloaded = metrics_counter(
		"http_json_bodies_offloaded_total",
		"JSON request bodies over a megabyte, parsed on the worker pool", NULL);
	metrics_daemon.http_request_duration = metrics_histogram(
		"http_request_duration_seconds", "HTTP request latency by route template",
		"route,method", NULL, 0);
	metrics_daemon.session_creations_total =
		metrics_counter("session_creations_total",
				"Session creations by template, driver and "
				"result",
				"template,driver,result");
	metrics_daemon.warm_pool_size = metrics_gauge("warm_pool_size",
						      "Ready sandboxes waiting in the warm "
						      "pool by template",
						      "template");
	metrics_daemon.volumes = metrics_gauge(
		"sandbox_volumes",
		"Persistent volumes: how many (count) and their sizes' sum (bytes)", "kind");
	metrics_daemon.sandbox_disk_bytes =
		metrics_gauge("sandbox_disk_bytes",
			      "Bytes of the sessions' disks: used (by their filesystems) and "
			      "allocated (their sizes)",
			      "kind");
	metrics_daemon.sessions_paused = metrics_gauge(
		"sessions_paused", "Sessions paused now by mode (freeze, hibernate)", "mode");
	metrics_daemon.snapshots = metrics_gauge(
		"sandbox_snapshots",
		"Snapshots: how many (count) and what their saves hold on the host's disk (bytes)",
		"kind");
	metrics_daemon.session_saves =
		metrics_gauge("session_saves",
			      "Saves of running sessions (hibernations, forks, snapshots) running "
			      "on workers now, "
			      "and waiting for one (at most half the workers save at once)",
			      "state");
	metrics_daemon.session_pauses_total = metrics_counter(
		"session_pauses_total",
		"Pauses, hibernations, resumes, forks and snapshots of sessions by action (pause, "
		"hibernate, resume, fork, snapshot) and result (success, failure, refused)",
		"action,result");
	metrics_daemon.session_pause_duration =
		metrics_histogram("session_pause_duration_seconds",
				  "Seconds a pause, hibernation, resume, fork's or snapshot's save "
				  "took, from the call "
				  "to the sandbox frozen, saved or running",
				  "action", vm_buckets, ARRAY_SIZE(vm_buckets));
	metrics_daemon.cluster_nodes = metrics_gauge(
		"cluster_nodes", "Nodes of the cluster by state (up, down, cordoned)", "state");
	metrics_daemon.cluster_sessions = metrics_gauge(
		"cluster_sessions", "Sessions recorded in the cluster by node", "node");
	metrics_daemon.cluster_store_up = metrics_gauge(
		"cluster_store_up", "1 while etcd takes this node's lease renewals, else 0", NULL);
	metrics_daemon.cluster_etcd_requests = metrics_counter(
		"cluster_etcd_requests_total",
		"Requests of this node to etcd by operation and result (success, failure)",
		"op,result");
	metrics_daemon.cluster_watch_restarts = metrics_counter(
		"cluster_watch_restarts_total",
		"Restarts of this node's watch of etcd by reason (disconnected, compacted)",
		"reason");
	metrics_daemon.cluster_forwarded_total = metrics_counter(
		"cluster_forwarded_total",
		"Requests this node forwarded to the node of their session, by kind (request, "
		"create, list) and result (success, failure, lost)",
		"kind,result");
	metrics_daemon.cluster_forward_duration = metrics_histogram(
		"cluster_forward_duration_seconds",
		"Seconds from a forwarded request's head to the other node's answer's head", "kind",
		NULL, 0);
	metrics_daemon.guest_protocol_errors_total = metrics_counter(
		"guest_protocol_errors_total", "Guest protocol violations by kind", "kind");
	metrics_daemon.egress_decisions_total =
		metrics_counter("egress_decisions_total",
				"Egress policy decisions by outcome and reason", "decision,reason");
}
