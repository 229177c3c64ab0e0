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

struct loop_pool {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct job *todo, *todo_tail;
	struct job *later, *later_tail; /* background jobs (loop_submit_background) */
	unsigned later_running;
	bool later_last; /* the last job taken was background work */
	struct job *finished, *finished_tail;
	pthread_t *threads;
	unsigned nthreads;
	bool stopping;
	int efd;
	struct event *ev;
};

/* The daemon's workers (loop_submit): creating and destroying sandboxes, large bodies. */
static struct loop_pool pool = { .lock = PTHREAD_MUTEX_INITIALIZER,
				 .cond = PTHREAD_COND_INITIALIZER,
				 .efd = -1 };

static void push(struct job **head, struct job **tail, struct job *j)
{
	j->next = NULL;
	if (*tail)
		(*tail)->next = j;
	else
		*head = j;
	*tail = j;
}

/* Queues j's completion for the loop thread; p->lock held. */
static void finish_locked(struct loop_pool *p, struct job *j)
{
	push(&p->finished, &p->finished_tail, j);
	uint64_t one = 1;
	ssize_t w = write(p->efd, &one, sizeof(one));
	(void)w;
}

static struct job *pop(struct job **head, struct job **tail)
{
	struct job *j = *head;
	*head = j->next;
	if (!*head)
		*tail = NULL;
	return j;
}

/* How many background jobs may run at once: all workers but one, so that a flood of them
 * (a client destroying thousands of sessions) never holds up other work. When stopping,
 * what is left runs on every worker. */
static bool later_may_run(const struct loop_pool *p)
{
	unsigned cap = p->nthreads > 1 ? p->nthreads - 1 : 1;
	return p->later && (p->stopping || p->later_running < cap);
}

/* The next job for a free worker, or NULL; p->lock held. Background work goes ahead of
 * other work only when none of it runs and the last job taken was not background work, so
 * that each progresses however much of the other waits (with one worker, they alternate). */
static struct job *next_job(struct loop_pool *p, bool *background)
{
	*background = later_may_run(p) && (!p->todo || (p->later_running == 0 && !p->later_last));
	if (*background || p->todo)
		p->later_last = *background;
	if (*background)
		return pop(&p->later, &p->later_tail);
	if (p->todo)
		return pop(&p->todo, &p->todo_tail);
	return NULL;
}

static void *worker_main(void *arg)
{
	struct loop_pool *p = arg;
	pthread_mutex_lock(&p->lock);
	for (;;) {
		bool background;
		struct job *j;
		while (!(j = next_job(p, &background)) && !p->stopping)
			pthread_cond_wait(&p->cond, &p->lock);
		if (!j)
			break;
		if (background)
			p->later_running++;
		pthread_mutex_unlock(&p->lock);

		if (j->work)
			j->work(j->arg);

		pthread_mutex_lock(&p->lock);
		if (background) {
			p->later_running--;
			/* A worker waiting only because of the cap may take the next one. */
			if (p->later)
				pthread_cond_broadcast(&p->cond);
		}
		finish_locked(p, j);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

static void deliver(struct loop_pool *p)
{
	pthread_mutex_lock(&p->lock);
	struct job *j = p->finished;
	p->finished = p->finished_tail = NULL;
	pthread_mutex_unlock(&p->lock);
	while (j) {
		struct job *next = j->next;
		if (j->done)
			j->done(j->arg);
		free(j);
		j = next;
	}
}

static void on_wake(evutil_socket_t fd, short what, void *arg)
{
	uint64_t n;
	ssize_t r = read(fd, &n, sizeof(n));
	(void)r;
	deliver(arg);
}

static int pool_start(struct loop_pool *p, struct event_base *base, unsigned nthreads)
{
	p->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (p->efd < 0)
		return -errno;
	p->ev = event_new(base, p->efd, EV_READ | EV_PERSIST, on_wake, p);
	event_add(p->ev, NULL);
	p->threads = xcalloc(nthreads ? nthreads : 1, sizeof(pthread_t));
	for (unsigned i = 0; i < nthreads; i++) {
		int r = pthread_create(&p->threads[i], NULL, worker_main, p);
		if (r)
			return -r;
		p->nthreads++;
	}
	return 0;
}

static bool pool_running(struct loop_pool *p)
{
	pthread_mutex_lock(&p->lock);
	bool running = p->nthreads > 0 && !p->stopping;
	pthread_mutex_unlock(&p->lock);
	return running;
}

static void pool_submit(struct loop_pool *p, void (*work)(void *arg), void (*done)(void *arg),
			void *arg, bool background)
{
	struct job *j = xcalloc(1, sizeof(*j));
	j->work = work;
	j->done = done;
	j->arg = arg;
	pthread_mutex_lock(&p->lock);
	if (background)
		push(&p->later, &p->later_tail, j);
	else
		push(&p->todo, &p->todo_tail, j);
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

static void pool_stop(struct loop_pool *p)
{
	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	for (unsigned i = 0; i < p->nthreads; i++)
		pthread_join(p->threads[i], NULL);
	deliver(p);
	free(p->threads);
	p->threads = NULL;
	p->nthreads = 0;
	if (p->ev)
		event_free(p->ev);
	p->ev = NULL;
	if (p->efd >= 0)
		close(p->efd);
	p->efd = -1;
	p->stopping = false;
}

int loop_pool_start(struct event_base *base, unsigned nthreads)
{
	return pool_start(&pool, base, nthreads);
}

bool loop_pool_running(void)
{
	return pool_running(&pool);
}

void loop_submit(void (*work)(void *arg), void (*done)(void *arg), void *arg)
{
	pool_submit(&pool, work, done, arg, false);
}

void loop_submit_background(void (*work)(void *arg), void (*done)(void *arg), void *arg)
{
	pool_submit(&pool, work, done, arg, true);
}

void loop_pool_stop(void)
{
	pool_stop(&pool);
}

struct loop_pool *loop_pool_new(struct event_base *base, unsigned nthreads)
{
	struct loop_pool *p = xcalloc(1, sizeof(*p));
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	p->efd = -1;
	if (pool_start(p, base, nthreads) < 0) {
		loop_pool_free(p);
		return NULL;
	}
	return p;
}

void loop_pool_submit(struct loop_pool *p, void (*work)(void *arg), void (*done)(void *arg),
		      void *arg)
{
	pool_submit(p, work, done, arg, false);
}

void loop_pool_post(struct loop_pool *p, void (*done)(void *arg), void *arg)
{
	struct job *j = xcalloc(1, sizeof(*j));
	j->done = done;
	j->arg = arg;
	pthread_mutex_lock(&p->lock);
	finish_locked(p, j);
	pthread_mutex_unlock(&p->lock);
}

struct loop_pool *loop_pool_free(struct loop_pool *p)
{
	if (!p)
		return NULL;
	pool_stop(p);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->cond);
	free(p);
	return NULL;
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
