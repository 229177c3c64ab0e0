/* Tests of src/util/bev.c: a read callback that calls bev_fill() takes a megabyte in a few
 * large reads instead of libevent's 4096-byte ones, never beyond its bound, the read high
 * watermark, or while reading is disabled, and leaves libevent's own reading (the end of
 * the stream, the frozen input) as it was; bev_large_writes() lets a write event go past
 * libevent's 16 KiB. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdbool.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "util/bev.h"
#include "util/cleanup.h"

#define MiB (1u << 20)

struct reader {
	struct event_base *base;
	struct bufferevent *bev;
	size_t max;       /* bev_fill's bound; 0: the callback does not fill */
	size_t total;     /* bytes taken */
	size_t callbacks; /* read callbacks */
	size_t most;      /* the most the input held at one callback */
	size_t want;      /* stop the loop once this much was taken */
	bool eof;
};

static void reader_read(struct bufferevent *bev, void *arg)
{
	struct reader *r = arg;
	if (r->max)
		bev_fill(bev, r->max);
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t n = evbuffer_get_length(in);
	r->callbacks++;
	if (n > r->most)
		r->most = n;
	r->total += n;
	evbuffer_drain(in, n);
	if (r->want && r->total >= r->want)
		event_base_loopbreak(r->base);
}

static void reader_event(struct bufferevent *bev, short what, void *arg)
{
	struct reader *r = arg;
	if (what & BEV_EVENT_EOF) {
		r->eof = true;
		event_base_loopbreak(r->base);
	}
}

/* A socket pair whose buffers hold a megabyte and more, so that the writer's data is all
 * waiting when the reader looks. */
static void big_pair(int sv[2])
{
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	int size = 4 * MiB;
	for (int i = 0; i < 2; i++) {
		/* As root the force works; otherwise the plain request, capped by the kernel. */
		if (setsockopt(sv[i], SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof(size)) < 0)
			setsockopt(sv[i], SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
		if (setsockopt(sv[i], SOL_SOCKET, SO_RCVBUFFORCE, &size, sizeof(size)) < 0)
			setsockopt(sv[i], SOL_SOCKET, SO_RCVBUF, &size, sizeof(size));
	}
	int have = 0;
	socklen_t len = sizeof(have);
	assert_int_equal(getsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &have, &len), 0);
	if (have < 2 * (int)MiB) {
		close(sv[0]);
		close(sv[1]);
		skip(); /* the writer would block: it needs root for the buffers */
	}
}

struct writer {
	int fd;
	size_t len;
	bool close_after;
};

static void *writer_run(void *arg)
{
	struct writer *w = arg;
	_cleanup_free_ uint8_t *buf = xmalloc(w->len);
	memset(buf, 'x', w->len);
	size_t off = 0;
	while (off < w->len) {
		ssize_t k = write(w->fd, buf + off, w->len - off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		off += (size_t)k;
	}
	if (w->close_after)
		close(w->fd);
	return NULL;
}

/* Sends len bytes from a thread into a reader that fills up to max, and runs the loop until
 * it has them all (or the end of the stream). */
static void transfer(struct reader *r, size_t len, size_t max, bool close_after)
{
	int sv[2];
	big_pair(sv);
	r->base = event_base_new();
	assert_non_null(r->base);
	evutil_make_socket_nonblocking(sv[0]);
	r->bev = bufferevent_socket_new(r->base, sv[0], BEV_OPT_CLOSE_ON_FREE);
	r->max = max;
	r->want = close_after ? 0 : len;
	bufferevent_setcb(r->bev, reader_read, NULL, reader_event, r);
	bufferevent_enable(r->bev, EV_READ);
	struct writer w = { .fd = sv[1], .len = len, .close_after = close_after };
	pthread_t t;
	assert_int_equal(pthread_create(&t, NULL, writer_run, &w), 0);
	/* The whole message first, so that each callback finds all of what is left. */
	pthread_join(t, NULL);
	assert_int_equal(event_base_dispatch(r->base), 0);
	bufferevent_free(r->bev);
	event_base_free(r->base);
	if (!close_after)
		close(sv[1]);
}

static void test_a_megabyte_takes_a_few_callbacks(void **state)
{
	struct reader r = { 0 };
	transfer(&r, MiB, BEV_FILL_MAX, false);
	assert_int_equal(r.total, MiB);
	/* libevent alone: 256 callbacks of 4096 bytes (the next test). Filled: the first one
	 * reads 4096 + 252 KiB, then 256 KiB each. */
	assert_true(r.callbacks <= 8);
	assert_int_equal(r.most, BEV_FILL_MAX);
}

static void test_without_fill_libevent_reads_4096(void **state)
{
	/* The reason for bev_fill, checked against the libevent the daemon is built with. */
	struct reader r = { 0 };
	transfer(&r, MiB, 0, false);
	assert_int_equal(r.total, MiB);
	assert_int_equal(r.most, 4096);
	assert_true(r.callbacks >= MiB / 4096);
}

static void test_fill_stops_at_its_bound(void **state)
{
	struct reader r = { 0 };
	transfer(&r, MiB, 64 << 10, false);
	assert_int_equal(r.total, MiB);
	assert_int_equal(r.most, 64 << 10);
}

static void test_end_of_stream_is_still_seen(void **state)
{
	struct reader r = { 0 };
	transfer(&r, MiB + 123, BEV_FILL_MAX, true);
	assert_int_equal(r.total, MiB + 123);
	assert_true(r.eof);
}

/* One bufferevent with `n` bytes waiting in its socket and libevent's first read done. */
struct held {
	struct event_base *base;
	struct bufferevent *bev;
	int peer;
};

static void held_read(struct bufferevent *bev, void *arg)
{
	event_base_loopbreak(arg);
}

static void held_open(struct held *h, size_t n)
{
	int sv[2];
	big_pair(sv);
	h->base = event_base_new();
	evutil_make_socket_nonblocking(sv[0]);
	h->bev = bufferevent_socket_new(h->base, sv[0], BEV_OPT_CLOSE_ON_FREE);
	h->peer = sv[1];
	_cleanup_free_ uint8_t *buf = xcalloc(1, n);
	assert_int_equal(write(h->peer, buf, n), (ssize_t)n);
	bufferevent_setcb(h->bev, held_read, NULL, NULL, h->base);
	bufferevent_enable(h->bev, EV_READ);
	assert_int_equal(event_base_dispatch(h->base), 0);
}

static void held_close(struct held *h)
{
	bufferevent_free(h->bev);
	event_base_free(h->base);
	close(h->peer);
}

static size_t input_len(struct held *h)
{
	return evbuffer_get_length(bufferevent_get_input(h->bev));
}

static void test_fill_respects_the_read_high_watermark(void **state)
{
	struct held h;
	held_open(&h, 512 << 10);
	bufferevent_setwatermark(h.bev, EV_READ, 0, 100000);
	assert_int_equal(input_len(&h), 4096);
	assert_int_equal(bev_fill(h.bev, BEV_FILL_MAX), 100000 - 4096);
	assert_int_equal(input_len(&h), 100000);
	assert_int_equal(bev_fill(h.bev, BEV_FILL_MAX), 0);
	held_close(&h);
}

static void test_fill_reads_nothing_while_reading_is_disabled(void **state)
{
	struct held h;
	held_open(&h, 512 << 10);
	bufferevent_disable(h.bev, EV_READ);
	assert_int_equal(bev_fill(h.bev, BEV_FILL_MAX), 0);
	assert_int_equal(input_len(&h), 4096);
	bufferevent_enable(h.bev, EV_READ);
	assert_int_equal(bev_fill(h.bev, BEV_FILL_MAX), BEV_FILL_MAX - 4096);
	held_close(&h);
}

static void test_fill_asks_nothing_after_a_short_read(void **state)
{
	/* libevent read all there was (less than 4096): the socket is not asked again. */
	struct held h;
	held_open(&h, 100);
	assert_int_equal(input_len(&h), 100);
	_cleanup_free_ uint8_t *buf = xcalloc(1, 5000);
	assert_int_equal(write(h.peer, buf, 5000), 5000);
	assert_int_equal(bev_fill(h.bev, BEV_FILL_MAX), 0);
	held_close(&h);
}

static void test_the_input_end_is_frozen_again(void **state)
{
	/* libevent keeps the input's end frozen outside its own reads; so does bev_fill. */
	struct held h;
	held_open(&h, 64 << 10);
	struct evbuffer *in = bufferevent_get_input(h.bev);
	assert_int_equal(evbuffer_add(in, "x", 1), -1);
	assert_int_equal(bev_fill(h.bev, BEV_FILL_MAX), (64 << 10) - 4096);
	assert_int_equal(evbuffer_add(in, "x", 1), -1);
	held_close(&h);
}

static void test_large_writes_pass_16k_per_event(void **state)
{
	for (int large = 0; large < 2; large++) {
		int sv[2];
		big_pair(sv);
		struct event_base *base = event_base_new();
		evutil_make_socket_nonblocking(sv[0]);
		struct bufferevent *bev =
			bufferevent_socket_new(base, sv[0], BEV_OPT_CLOSE_ON_FREE);
		if (large)
			bev_large_writes(bev);
		_cleanup_free_ uint8_t *buf = xcalloc(1, MiB);
		bufferevent_write(bev, buf, MiB);
		bufferevent_enable(bev, EV_WRITE);
		assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
		size_t left = evbuffer_get_length(bufferevent_get_output(bev));
		if (large)
			assert_int_equal(left, 0);
		else
			assert_int_equal(left, MiB - 16384); /* libevent's default */
		bufferevent_free(bev);
		event_base_free(base);
		close(sv[1]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_a_megabyte_takes_a_few_callbacks),
		cmocka_unit_test(test_without_fill_libevent_reads_4096),
		cmocka_unit_test(test_fill_stops_at_its_bound),
		cmocka_unit_test(test_end_of_stream_is_still_seen),
		cmocka_unit_test(test_fill_respects_the_read_high_watermark),
		cmocka_unit_test(test_fill_reads_nothing_while_reading_is_disabled),
		cmocka_unit_test(test_fill_asks_nothing_after_a_short_read),
		cmocka_unit_test(test_the_input_end_is_frozen_again),
		cmocka_unit_test(test_large_writes_pass_16k_per_event),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
