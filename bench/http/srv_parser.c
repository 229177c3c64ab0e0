/* srv_parser: our own connection layer, as candidate (b) would start: a bufferevent per
 * connection, h1.h (http_parser) for the requests. The head is checked (route, method, key,
 * announced length) before any byte of the body is kept; one request at a time per
 * connection; after an error the reply goes out, our side is shut down and what the client
 * still sends is read and dropped for a while, so that closing does not reset the connection
 * under the reply it has not read yet. */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "http/h1.h"
#include "route.h"
#include "servers.h"

#define LINGER_S 2

struct pconn {
	struct bufferevent *bev;
	struct h1 h1;
	struct evbuffer *body; /* the current request's body; made at its first byte */
	char id[ROUTE_MAX_ID + 1];
	size_t id_len;
	bool closing; /* the last reply is being written; then shut down and linger */
};

static const char *reason_of(int status)
{
	switch (status) {
	case 200:
		return "OK";
	case 400:
		return "Bad Request";
	case 401:
		return "Unauthorized";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 413:
		return "Content Too Large";
	case 414:
		return "URI Too Long";
	case 417:
		return "Expectation Failed";
	case 431:
		return "Request Header Fields Too Large";
	case 501:
		return "Not Implemented";
	default:
		return "Error";
	}
}

/* The Date header's value, formatted once a second. */
static const char *http_date(void)
{
	static time_t last;
	static char buf[64];
	time_t now = time(NULL);
	if (now != last) {
		struct tm tm;
		gmtime_r(&now, &tm);
		strftime(buf, sizeof(buf), "%a, %d %b %Y %H:%M:%S GMT", &tm);
		last = now;
	}
	return buf;
}

static void conn_free(struct pconn *c)
{
	bufferevent_free(c->bev);
	h1_free(&c->h1);
	if (c->body)
		evbuffer_free(c->body);
	free(c);
}

/* After the last reply: shuts our side, then drops what the client still sends until it closes
 * or LINGER_S pass. */
static void on_linger_read(struct bufferevent *bev, void *arg)
{
	struct evbuffer *in = bufferevent_get_input(bev);
	evbuffer_drain(in, evbuffer_get_length(in));
}

static void on_event(struct bufferevent *bev, short what, void *arg);

static void linger(struct pconn *c)
{
	shutdown(bufferevent_getfd(c->bev), SHUT_WR);
	struct timeval t = { .tv_sec = LINGER_S };
	bufferevent_setcb(c->bev, on_linger_read, NULL, on_event, c);
	bufferevent_set_timeouts(c->bev, &t, NULL);
	bufferevent_enable(c->bev, EV_READ);
}

/* Sends bytes straight to the socket while nothing waits before them, so that most replies
 * cost one send(2) and no change to what epoll watches; the rest goes through the bufferevent,
 * which writes it when the socket can take it. */
static void conn_send(struct pconn *c, const char *data, size_t len)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);
	if (evbuffer_get_length(out) == 0) {
		ssize_t n = send(bufferevent_getfd(c->bev), data, len, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (n > 0) {
			data += n;
			len -= (size_t)n;
		}
	}
	if (len)
		evbuffer_add(out, data, len);
}

/* Sends a whole reply, head and body in one piece. */
static void send_reply(struct pconn *c, int status, const char *body, size_t len, bool keep)
{
	char msg[1024];
	int n = snprintf(msg, sizeof(msg),
			 "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\n"
			 "Content-Length: %zu\r\nDate: %s\r\n%s\r\n",
			 status, reason_of(status), len, http_date(),
			 keep ? "" : "Connection: close\r\n");
	if (len <= sizeof(msg) - (size_t)n) {
		memcpy(msg + n, body, len);
		conn_send(c, msg, (size_t)n + len);
	} else {
		conn_send(c, msg, (size_t)n);
		conn_send(c, body, len);
	}
	if (keep)
		return;
	c->closing = true;
	bufferevent_disable(c->bev, EV_READ);
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
		linger(c);
}

static void send_error(struct pconn *c, int status)
{
	char body[128];
	int n = snprintf(body, sizeof(body), "{\"error\":\"%s\"}", reason_of(status));
	send_reply(c, status, body, (size_t)n, false);
}

static int on_head(const struct h1_head *head, void *arg)
{
	struct pconn *c = arg;
	const char *id;
	int id_len = route_match(head->target, head->target_len, &id);
	if (id_len < 0)
		return 404;
	if (head->method != HTTP_POST)
		return 405;
	if (!route_key_ok(head->authorization))
		return 401;
	if (head->upgrade)
		return 501;
	memcpy(c->id, id, (size_t)id_len);
	c->id_len = (size_t)id_len;
	if (head->expect_continue)
		conn_send(c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
	return 0;
}

static int on_body(const char *data, size_t len, void *arg)
{
	struct pconn *c = arg;
	if (!c->body && !(c->body = evbuffer_new()))
		abort();
	evbuffer_add(c->body, data, len);
	return 0;
}

static int on_end(void *arg)
{
	struct pconn *c = arg;
	size_t body_len = c->body ? evbuffer_get_length(c->body) : 0;
	/* The whole body, contiguous, as a handler would parse it. */
	if (body_len)
		evbuffer_pullup(c->body, -1);
	char body[256];
	size_t n = route_reply(body, sizeof(body), c->id, c->id_len, body_len);
	send_reply(c, 200, body, n, c->h1.head.keep_alive);
	if (body_len)
		evbuffer_drain(c->body, body_len);
	return 0;
}

static const struct h1_callbacks callbacks = {
	.on_head = on_head,
	.on_body = on_body,
	.on_end = on_end,
};

static void on_read(struct bufferevent *bev, void *arg)
{
	struct pconn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t len;
	while (!c->closing && (len = evbuffer_get_contiguous_space(in)) > 0) {
		const char *data = (const char *)evbuffer_pullup(in, (ev_ssize_t)len);
		ssize_t n = h1_feed(&c->h1, data, len);
		if (n < 0) {
			send_error(c, (int)-n);
			return;
		}
		evbuffer_drain(in, (size_t)n);
		/* on_end replied at once: the next request may start. */
		if (h1_ended(&c->h1) && !c->closing)
			h1_next(&c->h1);
	}
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
	struct pconn *c = arg;
	if ((what & BEV_EVENT_EOF) && !c->closing && h1_eof(&c->h1) < 0)
		fprintf(stderr, "srv_parser: a client closed its connection within a request\n");
	conn_free(c);
}

static void on_write(struct bufferevent *bev, void *arg)
{
	struct pconn *c = arg;
	/* The last reply is out. */
	if (c->closing)
		linger(c);
}

static void on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
		      int socklen, void *arg)
{
	struct event_base *base = evconnlistener_get_base(l);
	struct pconn *c = calloc(1, sizeof(*c));
	if (!c)
		abort();
	c->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (!c->bev) {
		evutil_closesocket(fd);
		free(c);
		return;
	}
	h1_init(&c->h1, &callbacks, c, ROUTE_MAX_BODY);
	struct timeval idle = { .tv_sec = ROUTE_IDLE_S };
	bufferevent_setcb(c->bev, on_read, on_write, on_event, c);
	bufferevent_set_timeouts(c->bev, &idle, &idle);
	bufferevent_enable(c->bev, EV_READ);
}

int srv_parser_start(struct event_base *base, int fd)
{
	struct evconnlistener *l =
		evconnlistener_new(base, on_accept, NULL, LEV_OPT_CLOSE_ON_FREE, -1, fd);
	if (!l) {
		fprintf(stderr, "evconnlistener_new failed\n");
		return -1;
	}
	return 0;
}
