/* client_internal: what the library's files share beyond sandbox.h. */
#pragma once

#include <curl/curl.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox.h"

/* http://host:port (for unix: URLs http://localhost), the socket's path or NULL, the
 * "Authorization: ..." header or NULL, and the Host header's value. */
const char *client_base(const struct client *c);
const char *client_unix_path(const struct client *c);
const char *client_auth_header(const struct client *c);
char *client_host_header(const struct client *c);
/* err for an error reply of `status` whose body is body[0..len). */
int client_http_error(struct err *err, long status, const char *body, size_t len);

/* A connection taken over by an HTTP/1.1 upgrade (upgrade.c): curl's handle (CONNECT_ONLY),
 * its socket, and the bytes read from it that the caller has not consumed. */
struct client_conn {
	CURL *curl;
	int fd;
	uint8_t *in;
	size_t in_len, in_cap;
};
/* Connects to the daemon and sends `GET path` with `Upgrade: protocol`, the client's Host and
 * key, and extra (header lines, each ending in "\r\n"; may be NULL). 0 once the answer was a
 * 101 that names protocol, with what came after its head in conn->in; else a negative errno
 * with err (the server's message for an error reply) and conn closed. */
int client_upgrade(struct client *c, const char *path, const char *protocol, const char *extra,
		   struct client_conn *conn, struct err *err);
/* Sends all of p, waiting (up to 30 s at a time) while the server takes nothing. */
int client_conn_send(struct client_conn *conn, const void *p, size_t n, struct err *err);
/* Sends what the socket takes now: the number of bytes (0: none, poll for POLLOUT). */
ssize_t client_conn_write(struct client_conn *conn, const void *p, size_t n, struct err *err);
/* Appends what can be read now to conn->in: 1 when it read something, 0 when there was
 * nothing (poll for POLLIN), negative at the end of the connection. */
int client_conn_fill(struct client_conn *conn, struct err *err);
/* Drops the first n bytes of conn->in. */
void client_conn_consume(struct client_conn *conn, size_t n);
/* Closes the connection and frees what it holds (a closed one again: nothing). */
void client_conn_close(struct client_conn *conn);
