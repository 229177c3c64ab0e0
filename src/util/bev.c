#include "util/bev.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <sys/uio.h>

/* libevent's own cap on one read of a socket (buffer.c). */
#define LIBEVENT_MAX_READ 4096

size_t bev_fill(struct bufferevent *bev, size_t max)
{
	struct evbuffer *in = bufferevent_get_input(bev);
	evutil_socket_t fd = bufferevent_getfd(bev);
	size_t have = evbuffer_get_length(in);
	if (fd < 0 || have < LIBEVENT_MAX_READ || !(bufferevent_get_enabled(bev) & EV_READ))
		return 0;
	size_t high = 0;
	if (bufferevent_getwatermark(bev, EV_READ, NULL, &high) == 0 && high && high < max)
		max = high;
	if (max > BEV_FILL_MAX)
		max = BEV_FILL_MAX;
	size_t added = 0;
	/* libevent keeps the input's end frozen but while it reads itself. */
	evbuffer_unfreeze(in, 0);
	while (have < max) {
		struct evbuffer_iovec v[2];
		int n = evbuffer_reserve_space(in, (ev_ssize_t)(max - have), v, 2);
		if (n <= 0)
			break;
		struct iovec iov[2];
		size_t room = 0;
		for (int i = 0; i < n; i++) {
			/* reserve_space may offer more than was asked: read no more than that. */
			size_t len = v[i].iov_len;
			if (len > max - have - room)
				len = max - have - room;
			v[i].iov_len = len;
			iov[i].iov_base = v[i].iov_base;
			iov[i].iov_len = len;
			room += len;
		}
		ssize_t r;
		do
			r = readv(fd, iov, n);
		while (r < 0 && errno == EINTR);
		if (r <= 0) {
			evbuffer_commit_space(in, v, 0);
			break;
		}
		size_t left = (size_t)r;
		int used = 0;
		for (; used < n && left; used++) {
			if (v[used].iov_len > left)
				v[used].iov_len = left;
			left -= v[used].iov_len;
		}
		evbuffer_commit_space(in, v, used);
		have += (size_t)r;
		added += (size_t)r;
		if ((size_t)r < room)
			break; /* the socket is empty: do not ask it again */
	}
	evbuffer_freeze(in, 0);
	return added;
}

void bev_large_writes(struct bufferevent *bev)
{
	bufferevent_set_max_single_write(bev, BEV_FILL_MAX * 4);
}
