/* srv_mhd: libmicrohttpd driven from our libevent loop, as sandboxd would run it: no threads
 * of MHD's own (MHD_USE_EPOLL without MHD_USE_INTERNAL_POLLING_THREAD), its epoll descriptor
 * watched by one event, MHD_run when it is readable, and a timer for MHD_get_timeout. Suspend,
 * resume and upgrade are enabled, as the daemon would need them, though this route uses
 * neither.
 *
 * The access handler is called first with the head only (route and key are checked there,
 * before any body is read), then with pieces of the body, then once more with none. */
#include <event2/event.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "route.h"
#include "servers.h"

size_t srv_mhd_pool_bytes = 32 * 1024;

struct mhd_srv {
	struct MHD_Daemon *d;
	struct event *io;    /* MHD's epoll descriptor is readable */
	struct event *timer; /* what MHD_get_timeout asked for */
};

/* One request from its head to its end. */
struct mhd_req {
	char id[ROUTE_MAX_ID + 1];
	size_t id_len;
	char *body;
	size_t len, cap;
	bool too_large;
};

/* Runs MHD, then arms the timer for when it must run again even without I/O: MHD_run may leave
 * work it knows of (a connection with bytes read but not yet processed: its sockets are in
 * epoll edge-triggered, so no new readiness will come for them) and says so with a timeout of
 * 0. */
static void drive(struct mhd_srv *s)
{
	MHD_run(s->d);
	MHD_UNSIGNED_LONG_LONG ms;
	if (MHD_get_timeout(s->d, &ms) == MHD_YES) {
		struct timeval tv = { .tv_sec = (time_t)(ms / 1000),
				      .tv_usec = (suseconds_t)(ms % 1000) * 1000 };
		evtimer_add(s->timer, &tv);
	} else {
		evtimer_del(s->timer);
	}
}

static void on_ready(evutil_socket_t fd, short what, void *arg)
{
	drive(arg);
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned int status, const char *body,
			     size_t len)
{
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	enum MHD_Result ret = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result reply_error(struct MHD_Connection *c, unsigned int status,
				   const char *reason)
{
	char body[128];
	int n = snprintf(body, sizeof(body), "{\"error\":\"%s\"}", reason);
	return reply(c, status, body, (size_t)n);
}

/* The head: route, method, key, the announced length. */
static enum MHD_Result on_head(struct MHD_Connection *c, const char *url, const char *method,
			       void **con_cls)
{
	const char *id;
	int id_len = route_match(url, strlen(url), &id);
	if (id_len < 0)
		return reply_error(c, MHD_HTTP_NOT_FOUND, "Not Found");
	if (strcmp(method, MHD_HTTP_METHOD_POST))
		return reply_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "Method Not Allowed");
	const char *auth =
		MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
	if (!route_key_ok(auth))
		return reply_error(c, MHD_HTTP_UNAUTHORIZED, "Unauthorized");
	const char *cl =
		MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
	if (cl && strtoull(cl, NULL, 10) > ROUTE_MAX_BODY)
		return reply_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "Payload Too Large");
	struct mhd_req *r = calloc(1, sizeof(*r));
	if (!r)
		abort();
	memcpy(r->id, id, (size_t)id_len);
	r->id_len = (size_t)id_len;
	*con_cls = r;
	return MHD_YES;
}

static void append(struct mhd_req *r, const char *data, size_t len)
{
	if (len > ROUTE_MAX_BODY - r->len) {
		r->too_large = true;
		return;
	}
	if (r->len + len > r->cap) {
		r->cap = r->cap ? r->cap * 2 : 256;
		while (r->cap < r->len + len)
			r->cap *= 2;
		r->body = realloc(r->body, r->cap);
		if (!r->body)
			abort();
	}
	memcpy(r->body + r->len, data, len);
	r->len += len;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url,
				 const char *method, const char *version, const char *upload_data,
				 size_t *upload_data_size, void **con_cls)
{
	struct mhd_req *r = *con_cls;
	if (!r)
		return on_head(c, url, method, con_cls);
	if (*upload_data_size) {
		append(r, upload_data, *upload_data_size);
		*upload_data_size = 0;
		return MHD_YES;
	}
	if (r->too_large)
		return reply_error(c, MHD_HTTP_CONTENT_TOO_LARGE, "Payload Too Large");
	char body[256];
	size_t n = route_reply(body, sizeof(body), r->id, r->id_len, r->len);
	return reply(c, MHD_HTTP_OK, body, n);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct mhd_req *r = *con_cls;
	if (!r)
		return;
	free(r->body);
	free(r);
	*con_cls = NULL;
}

static int start(struct event_base *base, int fd, unsigned int extra_flags)
{
	struct mhd_srv *s = calloc(1, sizeof(*s));
	if (!s)
		abort();
	unsigned int flags = MHD_USE_EPOLL | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME |
			     MHD_ALLOW_UPGRADE | extra_flags;
	/* MHD's default connection limit is FD_SETSIZE - 4 (1020) even with epoll. */
	s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_access, s, MHD_OPTION_LISTEN_SOCKET,
				(MHD_socket)fd, MHD_OPTION_CONNECTION_LIMIT, (unsigned int)16384,
				MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)ROUTE_IDLE_S,
				MHD_OPTION_CONNECTION_MEMORY_LIMIT, srv_mhd_pool_bytes,
				MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_END);
	if (!s->d) {
		fprintf(stderr, "MHD_start_daemon failed\n");
		return -1;
	}
	const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_EPOLL_FD);
	if (!info) {
		fprintf(stderr, "MHD_get_daemon_info(MHD_DAEMON_INFO_EPOLL_FD) failed\n");
		return -1;
	}
	s->io = event_new(base, info->epoll_fd, EV_READ | EV_PERSIST, on_ready, s);
	s->timer = evtimer_new(base, on_ready, s);
	if (!s->io || !s->timer || event_add(s->io, NULL) < 0) {
		fprintf(stderr, "watching MHD's epoll descriptor failed\n");
		return -1;
	}
	drive(s);
	return 0;
}

int srv_mhd_start(struct event_base *base, int fd)
{
	return start(base, fd, 0);
}

int srv_mhd_turbo_start(struct event_base *base, int fd)
{
	return start(base, fd, MHD_USE_TURBO);
}
