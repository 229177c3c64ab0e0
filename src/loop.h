/* loop: the worker pool that runs blocking work off the event loop, and libevent's own
 * messages in the daemon's log.
 *
 * Only the loop thread touches daemon state. Work that blocks (creating or destroying a
 * sandbox, building a snapshot) runs on a worker; its completion runs back on the loop
 * thread, in submission order per worker. */
#pragma once

#include <event2/event.h>
#include <stdbool.h>

/* Starts `nthreads` workers whose completions are delivered on `base`. */
int loop_pool_start(struct event_base *base, unsigned nthreads);

/* Runs work(arg) on a worker, then done(arg) on the loop thread (done may be NULL). */
void loop_submit(void (*work)(void *arg), void (*done)(void *arg), void *arg);
/* The same for work that may wait (tearing sandboxes down): it runs in submission order on
 * all workers but one, and takes a worker ahead of other work only when none of it runs, so
 * that thousands of such jobs never hold up the rest (a session's creation) behind them. */
void loop_submit_background(void (*work)(void *arg), void (*done)(void *arg), void *arg);

/* Whether workers are running to take work (not before loop_pool_start, nor once stopping). */
bool loop_pool_running(void);

/* Lets queued jobs finish, joins the workers and delivers remaining completions. */
void loop_pool_stop(void);

/* Pools of their own, for work that must not wait behind the daemon's workers, nor hold
 * them (a cluster's requests to etcd, which wait as long as etcd has no quorum): the same
 * contract as loop_submit, each pool's completions in its own submission order. */
struct loop_pool;
/* Starts `nthreads` threads (NULL when they cannot be started). */
struct loop_pool *loop_pool_new(struct event_base *base, unsigned nthreads);
void loop_pool_submit(struct loop_pool *p, void (*work)(void *arg), void (*done)(void *arg),
		      void *arg);
/* Runs done(arg) on the loop thread soon; callable from any thread (a long-running job's
 * news for the loop). */
void loop_pool_post(struct loop_pool *p, void (*done)(void *arg), void *arg);
/* Lets queued jobs finish (a running one must end on its own: ask it first), joins the
 * threads and delivers the remaining completions; returns NULL. Accepts NULL. */
struct loop_pool *loop_pool_free(struct loop_pool *p);

/* Sends libevent's own messages (a failed accept, a bad socket) to the log as lines like
 * every other (module "libevent"), at most LOOP_LIBEVENT_LOG_BURST a second: a failure that
 * repeats in a loop must not flood the log. What was dropped is counted in the next line's
 * "suppressed". */
#define LOOP_LIBEVENT_LOG_BURST 10
void loop_log_libevent(void);
