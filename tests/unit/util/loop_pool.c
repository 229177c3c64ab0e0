/* Tests of the worker pool (src/loop.c): background jobs never take every worker, so other
 * work submitted behind thousands of them runs at once; they still run in order, at most all
 * workers but one at a time, and every completion reaches the loop thread. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>

#include "loop.h"
#include "util/cleanup.h"

#define WORKERS 4

static pthread_mutex_t gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cond = PTHREAD_COND_INITIALIZER;
static bool gate_open;
static atomic_int running, most_running, started_bg, done_bg, done_fg;
static int order[64], norder; /* background jobs' start order */

/* Waits until the test opens the gate. */
static void wait_gate(void)
{
	pthread_mutex_lock(&gate_lock);
	while (!gate_open)
		pthread_cond_wait(&gate_cond, &gate_lock);
	pthread_mutex_unlock(&gate_lock);
}

static void bg_work(void *arg)
{
	int now = atomic_fetch_add(&running, 1) + 1;
	int most = atomic_load(&most_running);
	while (now > most && !atomic_compare_exchange_weak(&most_running, &most, now))
		;
	pthread_mutex_lock(&gate_lock);
	if (norder < 64)
		order[norder++] = (int)(intptr_t)arg;
	atomic_fetch_add(&started_bg, 1);
	pthread_mutex_unlock(&gate_lock);
	wait_gate();
	atomic_fetch_sub(&running, 1);
}

static void bg_done(void *arg)
{
	atomic_fetch_add(&done_bg, 1);
}

static void fg_work(void *arg)
{
}

static void fg_done(void *arg)
{
	atomic_fetch_add(&done_fg, 1);
	event_base_loopbreak(arg);
}

static void open_gate(void)
{
	pthread_mutex_lock(&gate_lock);
	gate_open = true;
	pthread_cond_broadcast(&gate_cond);
	pthread_mutex_unlock(&gate_lock);
}

/* Runs the loop until `flag` reaches `want` (each completion breaks it once). */
static void run_until(struct event_base *base, atomic_int *flag, int want)
{
	while (atomic_load(flag) < want)
		event_base_loop(base, EVLOOP_ONCE);
}

static void test_background_never_holds_up_other_work(void **state)
{
	struct event_base *base = event_base_new();
	assert_int_equal(loop_pool_start(base, WORKERS), 0);
	/* Far more background jobs than workers, each holding its worker until the gate
	 * opens, then one other job. */
	int nbg = 40;
	for (int i = 0; i < nbg; i++)
		loop_submit_background(bg_work, bg_done, (void *)(intptr_t)i);
	while (atomic_load(&started_bg) < WORKERS - 1)
		usleep(1000);
	loop_submit(fg_work, fg_done, base);
	/* It completes while every background job is still held: one worker stayed free, and
	 * no more than all workers but one ran them. */
	run_until(base, &done_fg, 1);
	assert_int_equal(atomic_load(&done_bg), 0);
	assert_int_equal(atomic_load(&started_bg), WORKERS - 1);
	assert_int_equal(atomic_load(&most_running), WORKERS - 1);

	open_gate();
	loop_pool_stop();
	assert_int_equal(atomic_load(&done_bg), nbg);
	/* They were taken in order (those taken at the same moment by different workers may
	 * note their start in either; once stopping, every worker takes them). */
	bool seen[64] = { false };
	for (int i = 0; i < norder; i++) {
		assert_true(order[i] < i + WORKERS);
		assert_false(seen[order[i]]);
		seen[order[i]] = true;
	}
	event_base_free(base);
}

/* One worker, held by the first of n jobs of one kind; then one job of the other kind. */
static atomic_int held_ran, held_ran_when_other_started;

static void held_work(void *arg)
{
	atomic_fetch_add(&held_ran, 1);
	wait_gate();
}

static void mark_work(void *arg)
{
	atomic_store(&held_ran_when_other_started, atomic_load(&held_ran));
}

/* How many of the n held jobs had run when the other one started. */
static int one_worker_run(bool held_background, int n)
{
	struct event_base *base = event_base_new();
	gate_open = false;
	atomic_store(&held_ran, 0);
	assert_int_equal(loop_pool_start(base, 1), 0);
	for (int i = 0; i < n; i++)
		(held_background ? loop_submit_background : loop_submit)(held_work, NULL, NULL);
	while (atomic_load(&held_ran) < 1)
		usleep(1000);
	(held_background ? loop_submit : loop_submit_background)(mark_work, NULL, NULL);
	open_gate();
	loop_pool_stop();
	assert_int_equal(atomic_load(&held_ran), n);
	event_base_free(base);
	return atomic_load(&held_ran_when_other_started);
}

static void test_background_progresses_behind_other_work(void **state)
{
	/* Other work queued ahead does not starve background work: the next free worker takes
	 * it while none of it runs. One worker, held by the first of 100 other jobs. */
	assert_int_equal(one_worker_run(false, 100), 1);
}

static void test_one_worker_alternates(void **state)
{
	/* With a single worker, background work does not go first until it is all done: the
	 * two kinds alternate. The worker is held by the first of 50 background jobs. */
	assert_true(one_worker_run(true, 50) <= 2);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_background_never_holds_up_other_work),
		cmocka_unit_test(test_background_progresses_behind_other_work),
		cmocka_unit_test(test_one_worker_alternates),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
