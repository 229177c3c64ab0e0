/* bev: a socket's bufferevent read and written in large pieces.
 *
 * libevent 2.1 reads a socket at most 4096 bytes at a time (EVBUFFER_MAX_READ, which only
 * 2.2 makes settable) and goes back to its loop between reads, and it writes at most 16 KiB
 * per write event: a megabyte moved through the daemon cost about 260 reads, as many FIONREAD
 * ioctls, epoll waits and writes. bev_fill(), called at the start of a read callback, reads
 * on from the socket in large pieces; bev_large_writes() lets each write event hand the
 * kernel all that is queued. */
#pragma once

#include <event2/bufferevent.h>
#include <stddef.h>

/* The most bev_fill() reads at once, and what it leaves in the input at most. */
#define BEV_FILL_MAX (256u << 10)

/* Reads from bev's socket into its input buffer until the socket has nothing more, the
 * input holds `max` bytes (at most BEV_FILL_MAX, and never beyond the read high watermark
 * when one is set), or the socket is at its end or fails (which libevent then sees on its
 * next read). Reads nothing while reading is disabled, nor unless the input already holds
 * a whole libevent read (4096 bytes): a socket that had less had nothing more. For socket
 * bufferevents only. Returns the bytes it added. */
size_t bev_fill(struct bufferevent *bev, size_t max);

/* Each write event writes all that is queued, up to what the socket takes. */
void bev_large_writes(struct bufferevent *bev);
