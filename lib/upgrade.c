/* upgrade: a connection to the daemon taken over by an HTTP/1.1 upgrade (a WebSocket, or a
 * raw byte stream to a port of a session). curl opens it (CONNECT_ONLY: TCP, TLS or a Unix
 * socket, as for every other request of the client); the request and the head of its answer
 * are written and read here, and from then on the bytes are the caller's. */
#include <curl/curl.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "client_internal.h"
#include "util/cleanup.h"

/* How long the server may take to answer the upgrade, or to take a blocked send. */
#define UPGRADE_WAIT_MS  30000
#define UPGRADE_HEAD_MAX (64u << 10)

static int wait_fd(int fd, short events)
{
	struct pollfd p = { .fd = fd, .events = events };
	return poll(&p, 1, UPGRADE_WAIT_MS) > 0 ? 0 : -ETIMEDOUT;
}

ssize_t client_conn_write(struct client_conn *conn, const void *p, size_t n, struct err *err)
{
	size_t sent = 0;
	CURLcode rc = curl_easy_send(conn->curl, p, n, &sent);
	if (rc == CURLE_AGAIN)
		return 0;
	if (rc != CURLE_OK)
		return err_set(err, EPIPE, "connection lost: %s", curl_easy_strerror(rc));
	return (ssize_t)sent;
}

int client_conn_send(struct client_conn *conn, const void *p, size_t n, struct err *err)
{
	const uint8_t *b = p;
	while (n) {
		ssize_t sent = client_conn_write(conn, b, n, err);
		if (sent < 0)
			return (int)sent;
		if (sent == 0) {
			if (wait_fd(conn->fd, POLLOUT) < 0)
				return err_set(err, ETIMEDOUT, "the server takes no data");
			continue;
		}
		b += sent;
		n -= (size_t)sent;
	}
	return 0;
}

int client_conn_fill(struct client_conn *conn, struct err *err)
{
	if (conn->in_cap - conn->in_len < 65536) {
		conn->in_cap = conn->in_cap ? conn->in_cap * 2 : 131072;
		conn->in = xrealloc(conn->in, conn->in_cap);
	}
	size_t got = 0;
	CURLcode rc = curl_easy_recv(conn->curl, conn->in + conn->in_len,
				     conn->in_cap - conn->in_len, &got);
	if (rc == CURLE_AGAIN)
		return 0;
	if (rc != CURLE_OK || got == 0)
		return err_set(err, ECONNRESET, "the server closed the connection");
	conn->in_len += got;
	return 1;
}

void client_conn_consume(struct client_conn *conn, size_t n)
{
	memmove(conn->in, conn->in + n, conn->in_len - n);
	conn->in_len -= n;
}

void client_conn_close(struct client_conn *conn)
{
	if (conn->curl)
		curl_easy_cleanup(conn->curl);
	conn->curl = NULL;
	conn->fd = -1;
	free(conn->in);
	conn->in = NULL;
	conn->in_len = conn->in_cap = 0;
}

int client_upgrade(struct client *c, const char *path, const char *protocol, const char *extra,
		   struct client_conn *conn, struct err *err)
{
	*conn = (struct client_conn){ .fd = -1, .curl = curl_easy_init() };
	if (!conn->curl)
		abort();
	_cleanup_free_ char *url = xasprintf("%s%s", client_base(c), path);
	curl_easy_setopt(conn->curl, CURLOPT_URL, url);
	if (client_unix_path(c))
		curl_easy_setopt(conn->curl, CURLOPT_UNIX_SOCKET_PATH, client_unix_path(c));
	curl_easy_setopt(conn->curl, CURLOPT_CONNECT_ONLY, 1L);
	curl_easy_setopt(conn->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(conn->curl, CURLOPT_CONNECTTIMEOUT, 10L);
	CURLcode rc = curl_easy_perform(conn->curl);
	curl_socket_t sock = CURL_SOCKET_BAD;
	if (rc == CURLE_OK)
		rc = curl_easy_getinfo(conn->curl, CURLINFO_ACTIVESOCKET, &sock);
	if (rc != CURLE_OK || sock == CURL_SOCKET_BAD) {
		client_conn_close(conn);
		return err_set(err, ECONNREFUSED, "cannot reach sandboxd at %s: %s", client_url(c),
			       curl_easy_strerror(rc));
	}
	conn->fd = (int)sock;

	/* The request, by hand: curl only connected. */
	_cleanup_free_ char *host = client_host_header(c);
	const char *auth = client_auth_header(c);
	_cleanup_free_ char *req = xasprintf(
		"GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: %s\r\nConnection: Upgrade\r\n%s%s%s\r\n",
		path, host, protocol, extra ? extra : "", auth ? auth : "", auth ? "\r\n" : "");
	_cleanup_free_ char *head = NULL, *want = NULL;
	int r = client_conn_send(conn, req, strlen(req), err);
	if (r < 0)
		goto fail;
	char *end;
	while (!(end = memmem(conn->in, conn->in_len, "\r\n\r\n", 4))) {
		if (conn->in_len > UPGRADE_HEAD_MAX) {
			r = err_set(err, EPROTO, "the server's answer to the upgrade is too long");
			goto fail;
		}
		if (wait_fd(conn->fd, POLLIN) < 0) {
			r = err_set(err, ETIMEDOUT, "the server did not answer the upgrade");
			goto fail;
		}
		if ((r = client_conn_fill(conn, err)) < 0)
			goto fail;
	}
	size_t head_len = (size_t)(end - (char *)conn->in) + 4;
	head = xmalloc(head_len + 1);
	memcpy(head, conn->in, head_len);
	head[head_len] = '\0';
	int status = 0;
	if (sscanf(head, "HTTP/1.%*d %d", &status) != 1) {
		r = err_set(err, EPROTO, "the server's answer is not HTTP");
		goto fail;
	}
	if (status != 101) {
		/* The error reply's body, for its message. */
		long clen = 0;
		const char *cl = strcasestr(head, "\r\nContent-Length:");
		if (cl)
			clen = strtol(cl + 17, NULL, 10);
		if (clen < 0 || clen > (long)UPGRADE_HEAD_MAX)
			clen = 0;
		while (conn->in_len < head_len + (size_t)clen) {
			if (wait_fd(conn->fd, POLLIN) < 0 || client_conn_fill(conn, NULL) < 0)
				break;
		}
		size_t have = conn->in_len - head_len;
		size_t blen = have < (size_t)clen ? have : (size_t)clen;
		r = client_http_error(err, status, (const char *)conn->in + head_len, blen);
		goto fail;
	}
	want = xasprintf("\r\nUpgrade: %s\r\n", protocol);
	if (!strcasestr(head, want)) {
		r = err_set(err, EPROTO, "the server did not upgrade to %s", protocol);
		goto fail;
	}
	client_conn_consume(conn, head_len);
	return 0;
fail:
	client_conn_close(conn);
	return r;
}
