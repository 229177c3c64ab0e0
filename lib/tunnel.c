/* tunnel: a raw byte stream to a port of a session, over a connection to the daemon taken
 * over by `Upgrade: tcp` (upgrade.c). */
#include "sandbox.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "util/cleanup.h"

struct client_tunnel {
	struct client_conn conn;
};

struct client_tunnel *client_tunnel_open(struct client *c, const char *session_id, unsigned port,
					 struct err *err)
{
	if (port < 1 || port > 65535) {
		err_set(err, EINVAL, "a port is a number from 1 to 65535");
		return NULL;
	}
	_cleanup_free_ char *esc = client_escape(session_id);
	_cleanup_free_ char *path = xasprintf("/exec/%s/forward/%u", esc, port);
	struct client_tunnel *t = xcalloc(1, sizeof(*t));
	if (client_upgrade(c, path, "tcp", NULL, &t->conn, err) < 0) {
		free(t);
		return NULL;
	}
	return t;
}

int client_tunnel_fd(const struct client_tunnel *t)
{
	return t->conn.fd;
}

ssize_t client_tunnel_write(struct client_tunnel *t, const void *data, size_t len, struct err *err)
{
	return client_conn_write(&t->conn, data, len, err);
}

ssize_t client_tunnel_read(struct client_tunnel *t, void *buf, size_t cap, struct err *err)
{
	/* What came with the head of the answer first. */
	if (t->conn.in_len) {
		size_t n = t->conn.in_len < cap ? t->conn.in_len : cap;
		memcpy(buf, t->conn.in, n);
		client_conn_consume(&t->conn, n);
		return (ssize_t)n;
	}
	/* Then the socket, through curl (which may hold decrypted bytes the socket no longer
	 * shows: hence "read until 0"). */
	size_t got = 0;
	CURLcode rc = curl_easy_recv(t->conn.curl, buf, cap, &got);
	if (rc == CURLE_AGAIN)
		return 0;
	if (rc != CURLE_OK)
		return err_set(err, ECONNRESET, "the connection broke: %s", curl_easy_strerror(rc));
	if (got == 0)
		return err_set(err, ECONNRESET, "the port closed the connection");
	return (ssize_t)got;
}

void client_tunnel_free(struct client_tunnel *t)
{
	if (!t)
		return;
	client_conn_close(&t->conn);
	free(t);
}
