/* libsandbox: a small C client for sandboxd's HTTP API (libcurl + jansson), used by the
 * `sandbox` CLI and its stdio MCP bridge.
 *
 * The daemon is reached at a URL: http://host:port (default http://127.0.0.1:3000, or
 * $SANDBOX_URL) or unix:/path/to/socket. The API key ($SANDBOX_API_KEY) travels as a bearer
 * token. Calls block; errors come back as negative errno with a message in err (for an HTTP
 * error the server's {"error": ...} text and its status). */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "util/err.h"

struct client;

/* url or key may be NULL: then $SANDBOX_URL / $SANDBOX_API_KEY, then the defaults. */
struct client *client_new(const char *url, const char *api_key);

/* The local service's socket, which a packaged sandboxd listens on. */
#define CLIENT_SERVICE_SOCKET "/run/agent-sandbox/sandboxd.sock"

/* The daemon's address when neither an argument nor $SANDBOX_URL names one:
 * unix:CLIENT_SERVICE_SOCKET where that socket exists, else http://127.0.0.1:3000. */
const char *client_default_url(void);
void client_free(struct client *c);
const char *client_url(const struct client *c);
/* The daemon's HTTP URL (without a trailing slash), or NULL when it is reached over a Unix
 * socket: what a browser would be given. */
const char *client_http_url(const struct client *c);
/* A client of its own (another connection) to the same daemon with the same key and headers,
 * for a second transfer at once (another thread, or from an abort check). */
struct client *client_dup(const struct client *c);

/* Sends a JSON request (body may be NULL) and parses a JSON reply into *ret (may be NULL
 * when the caller does not need it). *ret_status gets the HTTP status (0 if unreachable).
 * An HTTP status >= 400 is an error whose message is the server's. */
int client_json(struct client *c, const char *method, const char *path, json_t *body, json_t **ret,
		int *ret_status, struct err *err);

/* Like client_json for a reply of raw bytes (Accept: application/octet-stream). */
int client_bytes(struct client *c, const char *path, char **ret, size_t *ret_len, struct err *err);

/* Like client_json with a body of raw bytes (Content-Type: application/octet-stream). */
int client_post_bytes(struct client *c, const char *path, const void *data, size_t len,
		      json_t **ret, struct err *err);

/* Streams an NDJSON reply: on_line runs for each JSON object as it arrives; a negative
 * return from it aborts the transfer (the server then cancels the command). */
int client_ndjson(struct client *c, const char *method, const char *path, json_t *body,
		  int (*on_line)(json_t *obj, void *arg), void *arg, struct err *err);

/* A check run about once a second during transfers; returning true aborts the transfer
 * (so Ctrl-C can stop a stream that is waiting for output). */
void client_set_abort_check(struct client *c, bool (*fn)(void *arg), void *arg);

/* Extra headers for every request ("Name: value"), e.g. for MCP; NULL-terminated. */
void client_set_headers(struct client *c, const char *const *headers);

/* Percent-encodes s for a URL path segment or query value (caller frees). */
char *client_escape(const char *s);

/* --- WebSocket (RFC 6455), for terminals ------------------------------------------------ */

/* A WebSocket on path (of the client's URL, with its key), for a program driving a
 * terminal. NULL with err set when the upgrade is refused (the server's error, as
 * client_json's) or the server cannot be reached. */
struct client_ws;
struct client_ws *client_ws_open(struct client *c, const char *path, struct err *err);
/* The socket, to poll for reading. */
int client_ws_fd(const struct client_ws *ws);
/* Sends one message (binary or text). -1 with err on a broken connection. */
int client_ws_send(struct client_ws *ws, bool binary, const void *data, size_t len,
		   struct err *err);
/* The next whole message: 1 with *data and *len (valid until the next call), 0 when none is whole
 * yet (poll again), -1 once the connection ended (client_ws_close_code says how; err why). */
int client_ws_recv(struct client_ws *ws, bool *binary, const uint8_t **data, size_t *len,
		   struct err *err);
/* The server's close code (1005 when it gave none, 1006 for a connection that broke). */
unsigned client_ws_close_code(const struct client_ws *ws);
/* Closes (with a close frame when still open) and frees. */
void client_ws_free(struct client_ws *ws);

/* --- a byte stream to a port of a session (GET /exec/:id/forward/:port, Upgrade: tcp) --- */

/* A connection to TCP port `port` on the loopback of session_id's sandbox, through the
 * daemon (what `sandbox forward` relays). NULL with err set when the daemon refuses (the
 * server's error: no such session, nothing listening on the port...) or cannot be reached. */
struct client_tunnel;
struct client_tunnel *client_tunnel_open(struct client *c, const char *session_id, unsigned port,
					 struct err *err);
/* The socket, to poll (POLLIN when client_tunnel_read may have bytes, POLLOUT when a write
 * took none). */
int client_tunnel_fd(const struct client_tunnel *t);
/* Takes what the connection accepts now of data: the number of bytes, 0 when none (poll for
 * POLLOUT), negative with err once the connection is broken. */
ssize_t client_tunnel_write(struct client_tunnel *t, const void *data, size_t len, struct err *err);
/* Reads bytes from the port: their number, 0 when none is there yet (poll for POLLIN), or
 * negative with err once the other side closed. Bytes may be waiting before the socket polls
 * readable (those that came with the answer to the upgrade): read until 0 before polling. */
ssize_t client_tunnel_read(struct client_tunnel *t, void *buf, size_t cap, struct err *err);
/* Closes the connection and frees t (NULL: nothing). */
void client_tunnel_free(struct client_tunnel *t);
