/* op_net: the sandbox's own TCP ports, seen from inside it.
 *
 * connect: a byte stream to a port on the sandbox's loopback (127.0.0.1, else ::1), which is
 * how the host reaches a server inside whatever the sandbox's network: a jail's agent runs in
 * the sandbox's network namespace, a VM's in the guest. Only loopback is ever dialled: the
 * request names a port, never an address, so the host cannot be made to reach anything the
 * sandbox itself could not. DATA goes to the socket (credit returned as the socket takes it),
 * EOF half-closes it; what the server sends comes back as STDOUT within the channel's credit.
 * The op ends with RESULT {"bytesIn", "bytesOut"} when the server closes its side, or ERROR
 * when it cannot connect (ECONNREFUSED: nothing listens there) or the connection fails.
 *
 * ports: the TCP ports listening in the sandbox, from /proc/net/tcp and tcp6 (which show
 * the network namespace of whoever reads them: the sandbox's). */
#include "agent.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util/cleanup.h"

/* How long a connection may take to be made (loopback answers at once; a server with a
 * full backlog does not). */
#define NET_CONNECT_NS (10 * 1000000000LL)
/* Ports listed at most. */
#define NET_MAX_PORTS 1024

struct net_op {
	struct op op;
	int fd;
	int port;
	bool v6; /* dialling ::1 (127.0.0.1 refused) */
	bool connected;
	int64_t deadline; /* of the connect */
	uint8_t *buf;     /* bytes from the host not yet taken by the socket */
	size_t off, len, cap;
	bool host_eof; /* no more DATA: shut the socket's sending side once buf is out */
	bool shut;
	bool event_due; /* "connected" not yet sent (waiting for credit) */
	uint64_t bytes_in, bytes_out;
	int pfd;
};

static void net_fail(struct net_op *x, int errnum, const char *what)
{
	struct err e;
	if (errnum == ECONNREFUSED)
		err_set(&e, ECONNREFUSED, "nothing is listening on port %d in the sandbox",
			x->port);
	else
		err_set(&e, errnum, "port %d: %s: %s", x->port, what, strerror(errnum));
	agent_close_fd(&x->fd);
	op_error(&x->op, &e);
}

static void net_done(struct net_op *x)
{
	agent_close_fd(&x->fd);
	struct jw w;
	jw_init(&w);
	jw_obj_open(&w);
	jw_key(&w, "bytesIn");
	jw_int(&w, (int64_t)x->bytes_in);
	jw_key(&w, "bytesOut");
	jw_int(&w, (int64_t)x->bytes_out);
	jw_obj_close(&w);
	op_result(&x->op, &w);
	jw_free(&w);
}

/* Starts a connection to the loopback address of the current family. 0, or -errno when it
 * failed at once. */
static int dial(struct net_op *x)
{
	agent_close_fd(&x->fd);
	x->fd = socket(x->v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (x->fd < 0)
		return -errno;
	int r;
	if (x->v6) {
		struct sockaddr_in6 a = { .sin6_family = AF_INET6,
					  .sin6_port = htons((uint16_t)x->port),
					  .sin6_addr = IN6ADDR_LOOPBACK_INIT };
		r = connect(x->fd, (struct sockaddr *)&a, sizeof(a));
	} else {
		struct sockaddr_in a = { .sin_family = AF_INET,
					 .sin_port = htons((uint16_t)x->port),
					 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		r = connect(x->fd, (struct sockaddr *)&a, sizeof(a));
	}
	if (r == 0) {
		x->connected = true;
		x->event_due = true;
		return 0;
	}
	return errno == EINPROGRESS ? 0 : -errno;
}

/* A connection attempt failed with errnum: ::1 next, or the op's end. */
static void dial_failed(struct net_op *x, int errnum)
{
	if (!x->v6 && (errnum == ECONNREFUSED || errnum == ENETUNREACH)) {
		x->v6 = true;
		int r = dial(x);
		if (r == 0)
			return;
		/* No IPv6 at all: what 127.0.0.1 said is the answer. */
		if (r != -EAFNOSUPPORT && r != -EADDRNOTAVAIL && r != -ENETUNREACH)
			errnum = -r;
	}
	net_fail(x, errnum, "connect");
}

static void send_connected(struct net_op *x)
{
	if (!x->event_due || op_send_room(&x->op) < 32)
		return;
	x->event_due = false;
	static const char ev[] = "{\"type\":\"connected\"}";
	conn_frame(x->op.conn, GUEST_EVENT, x->op.ch, ev, sizeof(ev) - 1);
	x->op.send_credit -= sizeof(ev) - 1;
}

/* Moves the host's bytes into the socket; the credit comes back as it takes them. */
static void flush_out(struct net_op *x)
{
	while (x->fd >= 0 && x->connected && x->off < x->len) {
		ssize_t n = send(x->fd, x->buf + x->off, x->len - x->off, MSG_NOSIGNAL);
		if (n > 0) {
			x->off += (size_t)n;
			x->bytes_out += (uint64_t)n;
			op_consumed(&x->op, (size_t)n);
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		net_fail(x, n < 0 ? errno : EPIPE, "send");
		return;
	}
	if (x->off == x->len) {
		x->off = x->len = 0;
		if (x->host_eof && !x->shut && x->fd >= 0 && x->connected) {
			shutdown(x->fd, SHUT_WR);
			x->shut = true;
		}
	}
}

static void net_data(struct op *op, const uint8_t *p, size_t n)
{
	struct net_op *x = (struct net_op *)op;
	if (x->host_eof || x->fd < 0) {
		op_consumed(op, n);
		return;
	}
	/* Within the window the host was granted, so never more than that is held here. */
	if (x->len + n > x->cap) {
		x->cap = x->len + n;
		x->buf = xrealloc(x->buf, x->cap);
	}
	memcpy(x->buf + x->len, p, n);
	x->len += n;
	flush_out(x);
}

static void net_eof(struct op *op)
{
	struct net_op *x = (struct net_op *)op;
	x->host_eof = true;
	flush_out(x);
}

static void net_cancel(struct op *op)
{
	struct net_op *x = (struct net_op *)op;
	net_done(x);
}

/* Reads what the server sent, within the credit. */
static void pump_in(struct net_op *x)
{
	size_t room = op_send_room(&x->op);
	if (x->fd < 0 || !room)
		return;
	uint8_t *dst = conn_reserve(x->op.conn, room);
	ssize_t n = recv(x->fd, dst, room, 0);
	if (n > 0) {
		conn_commit(x->op.conn, GUEST_STDOUT, x->op.ch, (size_t)n);
		x->op.send_credit -= (uint64_t)n;
		x->bytes_in += (uint64_t)n;
		return;
	}
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n == 0) {
		net_done(x);
		return;
	}
	net_fail(x, errno, "recv");
}

static int net_poll_fill(struct op *op, struct pollfd *pfd, int64_t *deadline)
{
	struct net_op *x = (struct net_op *)op;
	x->pfd = -1;
	if (x->fd < 0)
		return 0;
	short ev = 0;
	if (!x->connected) {
		ev = POLLOUT;
		if (x->deadline < *deadline)
			*deadline = x->deadline;
	} else {
		if (x->event_due) {
			if (op_send_room(op) >= 32)
				*deadline = 0;
		} else if (op_send_room(op) > 0) {
			ev |= POLLIN;
		}
		if (x->off < x->len)
			ev |= POLLOUT;
	}
	if (!ev)
		return 0;
	pfd[0] = (struct pollfd){ .fd = x->fd, .events = ev };
	x->pfd = 0;
	return 1;
}

static void net_step(struct op *op, const struct pollfd *pfd, int n)
{
	struct net_op *x = (struct net_op *)op;
	if (x->fd < 0)
		return;
	short rev = n && x->pfd >= 0 ? pfd[x->pfd].revents : 0;
	if (!x->connected) {
		if (rev) {
			int soerr = 0;
			socklen_t sl = sizeof(soerr);
			if (getsockopt(x->fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
				soerr = errno;
			if (soerr) {
				dial_failed(x, soerr);
				return;
			}
			x->connected = true;
			x->event_due = true;
		} else if (agent_now_ns() >= x->deadline) {
			net_fail(x, ETIMEDOUT, "connect");
			return;
		} else {
			return;
		}
	}
	send_connected(x);
	if (x->event_due)
		return;
	if (rev & POLLOUT)
		flush_out(x);
	if (x->fd >= 0 && (rev & (POLLIN | POLLHUP | POLLERR)))
		pump_in(x);
}

static void net_destroy(struct op *op)
{
	struct net_op *x = (struct net_op *)op;
	agent_close_fd(&x->fd);
	free(x->buf);
	free(x);
}

static const struct op_vt net_vt = {
	.name = "connect",
	.data = net_data,
	.eof = net_eof,
	.cancel = net_cancel,
	.poll_fill = net_poll_fill,
	.step = net_step,
	.destroy = net_destroy,
};

void op_connect(struct conn *c, uint32_t ch, const struct req *r)
{
	struct net_op *x = xcalloc(1, sizeof(*x));
	x->fd = -1;
	x->port = (int)r->u.connect.port;
	x->deadline = agent_now_ns() + NET_CONNECT_NS;
	op_register(c, &x->op, &net_vt, ch);
	int e = dial(x);
	if (e < 0)
		dial_failed(x, -e);
}

/* --- ports -------------------------------------------------------------------------------- */

struct listener {
	int port;
	char addr[INET6_ADDRSTRLEN];
};

/* Adds the listening sockets of one /proc/net file. */
static void scan(const char *path, bool v6, struct listener *l, size_t *n)
{
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	if (!f)
		return;
	char line[512];
	if (!fgets(line, sizeof(line), f)) /* the header */
		return;
	while (*n < NET_MAX_PORTS && fgets(line, sizeof(line), f)) {
		char local[64], remote[64];
		unsigned st;
		if (sscanf(line, " %*d: %63s %63s %x", local, remote, &st) != 3 || st != 0x0A)
			continue;
		char *colon = strrchr(local, ':');
		if (!colon)
			continue;
		*colon = '\0';
		unsigned long port = strtoul(colon + 1, NULL, 16);
		if (port == 0 || port > 65535)
			continue;
		char text[INET6_ADDRSTRLEN] = "";
		if (!v6 && strlen(local) == 8) {
			struct in_addr a;
			a.s_addr = (uint32_t)strtoul(local, NULL, 16); /* as the kernel stored it */
			inet_ntop(AF_INET, &a, text, sizeof(text));
		} else if (v6 && strlen(local) == 32) {
			struct in6_addr a;
			for (int w = 0; w < 4; w++) {
				char word[9];
				memcpy(word, local + 8 * w, 8);
				word[8] = '\0';
				uint32_t v = (uint32_t)strtoul(word, NULL, 16);
				memcpy(&a.s6_addr[4 * w], &v, 4);
			}
			inet_ntop(AF_INET6, &a, text, sizeof(text));
		} else {
			continue;
		}
		bool seen = false;
		for (size_t i = 0; i < *n && !seen; i++)
			seen = l[i].port == (int)port && !strcmp(l[i].addr, text);
		if (seen)
			continue;
		l[*n].port = (int)port;
		snprintf(l[*n].addr, sizeof(l[*n].addr), "%s", text);
		(*n)++;
	}
}

static int by_port(const void *a, const void *b)
{
	const struct listener *x = a, *y = b;
	if (x->port != y->port)
		return x->port < y->port ? -1 : 1;
	return strcmp(x->addr, y->addr);
}

void op_ports(struct conn *c, uint32_t ch, const struct req *r)
{
	(void)r;
	struct listener *l = xcalloc(NET_MAX_PORTS, sizeof(*l));
	size_t n = 0;
	scan("/proc/net/tcp", false, l, &n);
	scan("/proc/net/tcp6", true, l, &n);
	qsort(l, n, sizeof(*l), by_port);
	struct jw w;
	jw_init(&w);
	jw_obj_open(&w);
	jw_key(&w, "ports");
	jw_arr_open(&w);
	for (size_t i = 0; i < n; i++) {
		jw_obj_open(&w);
		jw_key(&w, "port");
		jw_int(&w, l[i].port);
		jw_key(&w, "address");
		jw_str(&w, l[i].addr);
		jw_obj_close(&w);
	}
	jw_arr_close(&w);
	jw_key(&w, "truncated");
	jw_bool(&w, n == NET_MAX_PORTS);
	jw_obj_close(&w);
	conn_frame(c, GUEST_RESULT, ch, w.buf, w.len);
	jw_free(&w);
	free(l);
}
