/* servers: the HTTP servers the benchmark compares. Each serves the route of route.h on a
 * listening socket from one libevent loop, in the calling thread only, as sandboxd would. */
#pragma once

#include <event2/event.h>
#include <stddef.h>

struct bench_server {
	const char *name;
	/* Starts serving on the listening (non-blocking) socket fd from base's loop; the
	 * caller then runs the loop. Returns 0, or -1 after printing why. */
	int (*start)(struct event_base *base, int fd);
};

/* libevent's evhttp, set up as src/http/http.c sets it up (the baseline). */
int srv_evhttp_start(struct event_base *base, int fd);
/* libmicrohttpd without threads of its own: its epoll descriptor watched by the loop. */
int srv_mhd_start(struct event_base *base, int fd);
/* MHD_OPTION_CONNECTION_MEMORY_LIMIT of the servers started next: each connection's pool,
 * which must hold the request's head and the reply's (MHD's default: 32 KiB). */
extern size_t srv_mhd_pool_bytes;
/* The same with MHD_USE_TURBO (reads and writes tried before readiness is known). */
int srv_mhd_turbo_start(struct event_base *base, int fd);
/* bufferevents and h1.h (http_parser). */
int srv_parser_start(struct event_base *base, int fd);
