/* sandbox forward SESSION PORT [LOCAL_PORT] [--bind ADDR]: a local port relayed to a port of a
 * session, like ssh -L. Every connection accepted locally gets its own connection to the
 * daemon (GET /exec/:id/forward/:port, Upgrade: tcp) and a thread that relays bytes both
 * ways, through a bounded buffer each way, until either side closes. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cli.h"
#include "sandbox.h"
#include "util/cleanup.h"

/* Connections relayed at once; one more is closed as soon as it is accepted. */
#define FORWARD_MAX_CONNECTIONS 256
/* Bytes held each way while the other side is slower. */
#define FORWARD_BUF (128u << 10)

static volatile sig_atomic_t forward_stop;
static atomic_int forward_active;

static void on_stop(int sig)
{
	forward_stop = 1;
}

struct relay {
	struct client *c;
	const char *session_id;
	unsigned port;
	int fd; /* the local connection */
};

struct pipe_buf {
	uint8_t *data;
	size_t off, len;
};

/* Reads the local connection into b while b has room; false when the connection broke (its
 * end sets *eof). */
static bool read_local(int fd, struct pipe_buf *b, bool *eof)
{
	while (b->off + b->len < FORWARD_BUF) {
		ssize_t n = recv(fd, b->data + b->off + b->len, FORWARD_BUF - b->off - b->len, 0);
		if (n > 0) {
			b->len += (size_t)n;
			continue;
		}
		if (n == 0) {
			*eof = true;
			return true;
		}
		if (errno == EINTR)
			continue;
		return errno == EAGAIN || errno == EWOULDBLOCK;
	}
	return true;
}

/* Writes what b holds to the local connection while it takes it; false when it broke. */
static bool write_local(int fd, struct pipe_buf *b)
{
	while (b->len) {
		ssize_t n = send(fd, b->data + b->off, b->len, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno == EAGAIN || errno == EWOULDBLOCK;
		b->off += (size_t)n;
		b->len -= (size_t)n;
	}
	b->off = 0;
	return true;
}

static void compact(struct pipe_buf *b)
{
	if (b->off && !b->len)
		b->off = 0;
	else if (b->off > FORWARD_BUF / 2) {
		memmove(b->data, b->data + b->off, b->len);
		b->off = 0;
	}
}

/* Relays between the local connection and the tunnel until either ends. */
static void relay_bytes(int fd, struct client_tunnel *t)
{
	struct pipe_buf up = { xmalloc(FORWARD_BUF) }, down = { xmalloc(FORWARD_BUF) };
	bool local_eof = false, remote_eof = false, remote_hup = false;
	struct err e;
	for (;;) {
		/* Everything that can move now, then a wait for what cannot. The tunnel is read
		 * until it has nothing, since curl may hold bytes its socket no longer shows. */
		while (!remote_eof && down.off + down.len < FORWARD_BUF) {
			ssize_t n = client_tunnel_read(t, down.data + down.off + down.len,
						       FORWARD_BUF - down.off - down.len, &e);
			if (n < 0)
				remote_eof = true;
			if (n <= 0)
				break;
			down.len += (size_t)n;
		}
		if (!write_local(fd, &down))
			break;
		if (!local_eof && !read_local(fd, &up, &local_eof))
			break;
		while (up.len) {
			ssize_t n = client_tunnel_write(t, up.data + up.off, up.len, &e);
			if (n < 0)
				goto out;
			if (n == 0)
				break;
			up.off += (size_t)n;
			up.len -= (size_t)n;
		}
		compact(&up);
		compact(&down);
		/* Either side's end ends the relay once what it sent is passed on. */
		if ((local_eof && !up.len) || (remote_eof && !down.len))
			break;
		struct pollfd p[2] = {
			{ .fd = fd,
			  .events = (short)((!local_eof && up.off + up.len < FORWARD_BUF ? POLLIN
											 : 0) |
					    (down.len ? POLLOUT : 0)) },
			{ .fd = remote_hup ? -1 : client_tunnel_fd(t),
			  .events =
				  (short)((!remote_eof && down.off + down.len < FORWARD_BUF ? POLLIN
											    : 0) |
					  (up.len ? POLLOUT : 0)) },
		};
		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		/* A local connection reset is the end; the tunnel's is seen by its next read, once
		 * what came before it is passed on (and it is not polled meanwhile). */
		if (p[0].revents & (POLLERR | POLLHUP | POLLNVAL))
			break;
		if (p[1].revents & (POLLERR | POLLHUP | POLLNVAL))
			remote_hup = true;
	}
out:
	free(up.data);
	free(down.data);
}

static void *relay_main(void *arg)
{
	struct relay *r = arg;
	struct err e;
	struct client_tunnel *t = client_tunnel_open(r->c, r->session_id, r->port, &e);
	if (!t) {
		fprintf(stderr, "sandbox: forward: %s\n", e.msg);
	} else {
		int fl = fcntl(r->fd, F_GETFL);
		fcntl(r->fd, F_SETFL, fl | O_NONBLOCK);
		relay_bytes(r->fd, t);
		client_tunnel_free(t);
	}
	close(r->fd);
	free(r);
	atomic_fetch_sub(&forward_active, 1);
	return NULL;
}

void cmd_forward_help(void)
{
	printf("usage: sandbox forward SESSION PORT [LOCAL_PORT] [--bind ADDR]\n\n"
	       "Relays a local port to PORT in a session, like ssh -L: every connection made to\n"
	       "ADDR:LOCAL_PORT is a connection to PORT on the sandbox's loopback, through the\n"
	       "daemon, bytes both ways until either side closes. Several connections may be\n"
	       "open at once; Ctrl-C stops. Prints the address it listens on first.\n"
	       "  LOCAL_PORT   the local port (default: PORT; 0: any free one)\n"
	       "  --bind ADDR  the local address to listen on (default 127.0.0.1; whoever can\n"
	       "               reach ADDR reaches the port, without a key)\n");
}

/* A listening socket on addr:port; -1 after saying why not. */
static int listen_on(const char *addr, const char *port)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV },
			*res = NULL;
	int rc = getaddrinfo(addr, port, &hints, &res);
	if (rc != 0) {
		cli_fail("cannot listen on %s: %s", addr, gai_strerror(rc));
		return -1;
	}
	int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int one = 1;
	if (fd >= 0)
		setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (fd < 0 || bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 128) < 0) {
		cli_fail("cannot listen on %s port %s: %s", addr, port, strerror(errno));
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	return fd;
}

/* "127.0.0.1:8080" or "[::1]:8080" of a bound socket. */
static void bound_name(int fd, char *buf, size_t len)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[INET6_ADDRSTRLEN] = "?";
	unsigned port = 0;
	getsockname(fd, (struct sockaddr *)&ss, &sl);
	if (ss.ss_family == AF_INET6) {
		struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
		inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
		port = ntohs(a->sin6_port);
		snprintf(buf, len, "[%s]:%u", host, port);
	} else {
		struct sockaddr_in *a = (struct sockaddr_in *)&ss;
		inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
		port = ntohs(a->sin_port);
		snprintf(buf, len, "%s:%u", host, port);
	}
}

int cmd_forward(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	const char *id = NULL, *port_s = NULL, *local_s = NULL, *bind_addr = "127.0.0.1";
	int bad = 0;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--bind") == 0 && i + 1 < argc)
			bind_addr = argv[++i];
		else if (argv[i][0] == '-')
			bad = 1;
		else if (!id)
			id = argv[i];
		else if (!port_s)
			port_s = argv[i];
		else if (!local_s)
			local_s = argv[i];
		else
			bad = 1;
	}
	if (bad || !port_s) {
		cmd_forward_help();
		client_free(c);
		return 2;
	}
	int port = cli_port_arg(port_s, false);
	int local = local_s ? cli_port_arg(local_s, true) : port;
	if (port < 0 || local < 0) {
		client_free(c);
		return cli_fail(
			"a port is a number from 1 to 65535 (a local one may be 0), not `%s`",
			port < 0 ? port_s : local_s);
	}
	/* The session and its port, before anything listens here. */
	struct err e;
	json_t *listing = cli_session_ports(c, id, &e);
	if (!listing) {
		client_free(c);
		return cli_fail("%s", e.msg);
	}
	int rc = cli_need_listening(listing, id, port);
	json_decref(listing);
	if (rc) {
		client_free(c);
		return rc;
	}
	char local_buf[8];
	snprintf(local_buf, sizeof(local_buf), "%d", local);
	int lfd = listen_on(bind_addr, local_buf);
	if (lfd < 0) {
		client_free(c);
		return 1;
	}
	char name[INET6_ADDRSTRLEN + 16];
	bound_name(lfd, name, sizeof(name));
	printf("forwarding %s to port %d of session %s (Ctrl-C stops)\n", name, port, id);
	fflush(stdout);

	struct sigaction sa = { .sa_handler = on_stop }, old_int, old_term,
			 ign = { .sa_handler = SIG_IGN };
	sigaction(SIGINT, &sa, &old_int);
	sigaction(SIGTERM, &sa, &old_term);
	sigaction(SIGPIPE, &ign, NULL);
	/* The relays' threads leave the signals to this one, whose poll they interrupt. */
	sigset_t stop_set, old_mask;
	sigemptyset(&stop_set);
	sigaddset(&stop_set, SIGINT);
	sigaddset(&stop_set, SIGTERM);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	while (!forward_stop) {
		struct pollfd p = { .fd = lfd, .events = POLLIN };
		if (poll(&p, 1, -1) < 0)
			continue; /* EINTR: forward_stop says whether to go on */
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0)
			continue;
		if (atomic_load(&forward_active) >= FORWARD_MAX_CONNECTIONS) {
			fprintf(stderr,
				"sandbox: forward: %d connections are open already: one more "
				"refused\n",
				FORWARD_MAX_CONNECTIONS);
			close(fd);
			continue;
		}
		struct relay *r = xcalloc(1, sizeof(*r));
		*r = (struct relay){ .c = c, .session_id = id, .port = (unsigned)port, .fd = fd };
		atomic_fetch_add(&forward_active, 1);
		pthread_t th;
		pthread_sigmask(SIG_BLOCK, &stop_set, &old_mask);
		int err = pthread_create(&th, &attr, relay_main, r);
		pthread_sigmask(SIG_SETMASK, &old_mask, NULL);
		if (err) {
			fprintf(stderr, "sandbox: forward: cannot start a relay: %s\n",
				strerror(err));
			atomic_fetch_sub(&forward_active, 1);
			close(fd);
			free(r);
		}
	}
	pthread_attr_destroy(&attr);
	close(lfd);
	sigaction(SIGINT, &old_int, NULL);
	sigaction(SIGTERM, &old_term, NULL);
	/* The relays still running end with the process (their connections close with it);
	 * without any, nothing uses the client any more. */
	if (atomic_load(&forward_active) == 0)
		client_free(c);
	return 0;
}
