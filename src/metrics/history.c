/* history: a ring of the daemon's main figures, one sample per interval (see metrics.h). */
#include <pthread.h>
#include <string.h>

#include "metrics/metrics.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct metrics_sample ring[METRICS_HISTORY_MAX];
static size_t head, count; /* the oldest sample's index, how many are kept */

static bool server_error(const char *status)
{
	return status[0] == '5';
}

static bool execute(const char *type)
{
	return strcmp(type, "execute") == 0;
}

static bool failure(const char *result)
{
	return strcmp(result, "failure") == 0;
}

void metrics_history_add(const struct metrics_sample *s)
{
	pthread_mutex_lock(&lock);
	ring[(head + count) % METRICS_HISTORY_MAX] = *s;
	if (count < METRICS_HISTORY_MAX)
		count++;
	else
		head = (head + 1) % METRICS_HISTORY_MAX;
	pthread_mutex_unlock(&lock);
}

void metrics_history_sample(uint64_t t_ms)
{
	struct sandbox_metrics *m = &metrics_daemon;
	metrics_refresh();
	struct metrics_sample s = { .t_ms = t_ms };
	s.sessions = metrics_total(m->exec_sessions_active, NULL, NULL, NULL);
	s.creation_s = metrics_total(m->vm_creation_time, NULL, NULL, &s.creations);
	s.executes = metrics_total(m->exec_message_total, "type", execute, NULL);
	s.errors = metrics_total(m->http_requests_total, "status", server_error, NULL) +
		   metrics_total(m->vsock_errors_total, NULL, NULL, NULL) +
		   metrics_total(m->guest_protocol_errors_total, NULL, NULL, NULL) +
		   metrics_total(m->session_creations_total, "result", failure, NULL);
	metrics_history_add(&s);
}

size_t metrics_history_read(uint64_t since_ms, struct metrics_sample *out, size_t max)
{
	pthread_mutex_lock(&lock);
	/* Filtered one by one, not cut at the first match: the wall clock may have been set back
	 * between two samples. */
	size_t after = 0;
	for (size_t i = 0; i < count; i++)
		after += ring[(head + i) % METRICS_HISTORY_MAX].t_ms > since_ms;
	size_t skip = after > max ? after - max : 0, n = 0;
	for (size_t i = 0; i < count && n < max; i++) {
		const struct metrics_sample *s = &ring[(head + i) % METRICS_HISTORY_MAX];
		if (s->t_ms <= since_ms)
			continue;
		if (skip) {
			skip--;
			continue;
		}
		out[n++] = *s;
	}
	pthread_mutex_unlock(&lock);
	return n;
}

void metrics_history_reset(void)
{
	pthread_mutex_lock(&lock);
	head = count = 0;
	pthread_mutex_unlock(&lock);
}
