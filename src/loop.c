#include "loop.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <jansson.h>

#include "util/cleanup.h"
#include "util/log.h"
#include "util/time.h"

struct job {
	void (*work)(void *);
	void (*done)(void *);
	void *arg;
	struct job *next;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct job *todo, *todo_tail;
	struct job *finished, *finished_tail;
	pthread_t *threads;
	unsigned nthreads;
	bool stopping;
	int efd;
	struct event *ev;
} pool = { .lock = PTHREAD_MUTEX_INITIALIZER, .cond = PTHREAD_COND_INITIALIZER, .efd = -1 };

static void push(struct job **head, struct job **tail, struct job *j)
{
	j->next = NULL;
	if (*tail)
		(*tail)->next = j;
	else
		*head = j;
	*tail = j;
}

static void *worker_main(void *unused)
{
	pthread_mutex_lock(&pool.lock);
	for (;;) {
		while (!pool.todo && !pool.stopping)
			pthread_cond_wait(&pool.cond, &pool.lock);
		struct job *j = pool.todo;
		if (!j)
			break;
		pool.todo = j->next;
		if (!pool.todo)
			pool.todo_tail = NULL;
		pthread_mutex_unlock(&pool.lock);

		j->work(j->arg);

		pthread_mutex_lock(&pool.lock);
		push(&pool.finished, &pool.finished_tail, j);
		uint64_t one = 1;
		ssize_t w = write(pool.efd, &one, sizeof(one));
		(void)w;
	}
	pthread_mutex_unlock(&pool.lock);
	return NULL;
}

static void deliver(void)
{
	pthread_mutex_lock(&pool.lock);
	struct job *j = pool.finished;
	pool.finished = pool.finished_tail = NULL;
	pthread_mutex_unlock(&pool.lock);
	while (j) {
		struct job *next = j->next;
		if (j->done)
			j->done(j->arg);
		free(j);
		j = next;
	}
}

static void on_wake(evutil_socket_t fd, short what, void *unused)
{
	uint64_t n;
	ssize_t r = read(fd, &n, sizeof(n));
	(void)r;
	deliver();
}

int loop_pool_start(struct event_base *base, unsigned nthreads)
{
	pool.efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (pool.efd < 0)
		return -errno;
	pool.ev = event_new(base, pool.efd, EV_READ | EV_PERSIST, on_wake, NULL);
	event_add(pool.ev, NULL);
	pool.threads = xcalloc(nthreads, sizeof(pthread_t));
	for (unsigned i = 0; i < nthreads; i++) {
		int r = pthread_create(&pool.threads[i], NULL, worker_main, NULL);
		if (r)
			return -r;
		pool.nthreads++;
	}
	return 0;
}

bool loop_pool_running(void)
{
	pthread_mutex_lock(&pool.lock);
	bool running = pool.nthreads > 0 && !pool.stopping;
	pthread_mutex_unlock(&pool.lock);
	return running;
}

void loop_submit(void (*work)(void *arg), void (*done)(void *arg), void *arg)
{
	struct job *j = xcalloc(1, sizeof(*j));
	j->work = work;
	j->done = done;
	j->arg = arg;
	pthread_mutex_lock(&pool.lock);
	push(&pool.todo, &pool.todo_tail, j);
	pthread_cond_signal(&pool.cond);
	pthread_mutex_unlock(&pool.lock);
}

void loop_pool_stop(void)
{
	pthread_mutex_lock(&pool.lock);
	pool.stopping = true;
	pthread_cond_broadcast(&pool.cond);
	pthread_mutex_unlock(&pool.lock);
	for (unsigned i = 0; i < pool.nthreads; i++)
		pthread_join(pool.threads[i], NULL);
	deliver();
	free(pool.threads);
	pool.threads = NULL;
	pool.nthreads = 0;
	if (pool.ev)
		event_free(pool.ev);
	pool.ev = NULL;
	if (pool.efd >= 0)
		close(pool.efd);
	pool.efd = -1;
	pool.stopping = false;
}

static void on_libevent_log(int severity, const char *msg)
{
	static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
	static uint64_t window_ms;
	static unsigned in_window, dropped;
	pthread_mutex_lock(&lock);
	uint64_t now = time_mono_ms();
	if (now - window_ms >= 1000) {
		window_ms = now;
		in_window = 0;
	}
	bool write = in_window < LOOP_LIBEVENT_LOG_BURST;
	unsigned suppressed = 0;
	if (write) {
		in_window++;
		suppressed = TAKE_STRUCT(dropped);
	} else {
		dropped++;
	}
	pthread_mutex_unlock(&lock);
	if (!write)
		return;
	enum log_level level = severity == EVENT_LOG_DEBUG  ? LOG_DEBUG
			       : severity == EVENT_LOG_MSG  ? LOG_INFO
			       : severity == EVENT_LOG_WARN ? LOG_WARN
							    : LOG_ERROR;
	json_auto_t *fields = suppressed ? json_pack("{s:i}", "suppressed", suppressed) : NULL;
	log_fields(level, "libevent", fields, "%s", msg);
}

void loop_log_libevent(void)
{
	event_set_log_callback(on_libevent_log);
}
