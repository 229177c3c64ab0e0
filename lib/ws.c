/* ws: the client side of a WebSocket (RFC 6455) over a connection taken over by an upgrade
 * (upgrade.c). Frames are masked out, unmasked in; fragments are joined, pings answered, a
 * close answered and reported. */
#include "sandbox.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "client_internal.h"
#include "util/cleanup.h"
#include "util/random.h"

#define WS_MAX_MESSAGE (16u << 20)

struct client_ws {
	struct client_conn conn; /* its in: bytes read, not yet consumed */
	uint8_t *msg;            /* the message being joined, and the last one returned */
	size_t msg_len;
	int msg_op;
	size_t consumed; /* of in, by the message returned last */
	unsigned close_code;
	bool closed;
};

int client_ws_fd(const struct client_ws *ws)
{
	return ws->conn.fd;
}

unsigned client_ws_close_code(const struct client_ws *ws)
{
	return ws->close_code;
}

static int send_all(struct client_ws *ws, const void *p, size_t n, struct err *err)
{
	return client_conn_send(&ws->conn, p, n, err);
}

/* Reads what is there into in; 0 (maybe nothing new), -1 at the end of the connection. */
static int fill(struct client_ws *ws, struct err *err)
{
	if (client_conn_fill(&ws->conn, err) >= 0)
		return 0;
	ws->closed = true;
	if (!ws->close_code)
		ws->close_code = 1006;
	return -1;
}

static int send_frame(struct client_ws *ws, int op, const void *data, size_t len, struct err *err)
{
	uint8_t head[14];
	size_t h = 0;
	head[h++] = (uint8_t)(0x80 | op);
	if (len < 126) {
		head[h++] = (uint8_t)(0x80 | len);
	} else if (len < 65536) {
		head[h++] = 0x80 | 126;
		head[h++] = (uint8_t)(len >> 8);
		head[h++] = (uint8_t)len;
	} else {
		head[h++] = 0x80 | 127;
		for (int i = 7; i >= 0; i--)
			head[h++] = (uint8_t)((uint64_t)len >> (8 * i));
	}
	uint8_t mask[4];
	random_bytes(mask, sizeof(mask));
	memcpy(head + h, mask, 4);
	h += 4;
	_cleanup_free_ uint8_t *body = xmalloc(len + 1);
	const uint8_t *src = data;
	for (size_t i = 0; i < len; i++)
		body[i] = src[i] ^ mask[i % 4];
	if (send_all(ws, head, h, err) < 0)
		return -1;
	return send_all(ws, body, len, err);
}

int client_ws_send(struct client_ws *ws, bool binary, const void *data, size_t len, struct err *err)
{
	if (ws->closed)
		return err_set(err, EPIPE, "the connection is closed");
	return send_frame(ws, binary ? 2 : 1, data, len, err);
}

/* The next whole message from what was read: 1, 0 for none yet, -1 at the end. */
static int parse(struct client_ws *ws, bool *binary, const uint8_t **data, size_t *len,
		 struct err *err)
{
	for (;;) {
		size_t off = 0, n = ws->conn.in_len;
		if (n < 2)
			return 0;
		uint8_t b0 = ws->conn.in[0], b1 = ws->conn.in[1];
		uint64_t plen = b1 & 0x7f;
		off = 2;
		if (plen == 126) {
			if (n < 4)
				return 0;
			plen = (uint64_t)ws->conn.in[2] << 8 | ws->conn.in[3];
			off = 4;
		} else if (plen == 127) {
			if (n < 10)
				return 0;
			plen = 0;
			for (int i = 0; i < 8; i++)
				plen = plen << 8 | ws->conn.in[2 + i];
			off = 10;
		}
		if (b1 & 0x80 || plen > WS_MAX_MESSAGE || ws->msg_len + plen > WS_MAX_MESSAGE) {
			ws->closed = true;
			ws->close_code = 1002;
			return err_set(err, EPROTO,
				       "the server sent a frame this client does not take");
		}
		if (n - off < plen)
			return 0;
		int op = b0 & 0x0f;
		const uint8_t *payload = ws->conn.in + off;
		size_t total = off + (size_t)plen;
		if (op == 8) {
			ws->close_code =
				plen >= 2 ? (unsigned)(payload[0] << 8 | payload[1]) : 1005;
			send_frame(ws, 8, payload, plen >= 2 ? 2 : 0, err);
			ws->closed = true;
			if (plen > 2)
				return err_set(err, ECONNRESET, "%.*s", (int)(plen - 2),
					       payload + 2);
			return err_set(err, ECONNRESET, "the server closed the connection");
		}
		if (op == 9 || op == 10) {
			if (op == 9 && send_frame(ws, 10, payload, (size_t)plen, err) < 0)
				return -1;
			memmove(ws->conn.in, ws->conn.in + total, n - total);
			ws->conn.in_len -= total;
			continue;
		}
		/* A data frame: whole messages are returned from in when they come in one frame,
		 * else joined in msg. */
		if (op)
			ws->msg_op = op;
		if ((b0 & 0x80) && ws->msg_len == 0) {
			*binary = ws->msg_op == 2;
			*data = payload;
			*len = (size_t)plen;
			ws->consumed = total;
			return 1;
		}
		ws->msg = xrealloc(ws->msg, ws->msg_len + (size_t)plen + 1);
		memcpy(ws->msg + ws->msg_len, payload, (size_t)plen);
		ws->msg_len += (size_t)plen;
		memmove(ws->conn.in, ws->conn.in + total, n - total);
		ws->conn.in_len -= total;
		if (b0 & 0x80) {
			*binary = ws->msg_op == 2;
			*data = ws->msg;
			*len = ws->msg_len;
			ws->consumed = 0;
			ws->msg_len =
				0; /* the caller has it until the next call, which appends none */
			return 1;
		}
	}
}

int client_ws_recv(struct client_ws *ws, bool *binary, const uint8_t **data, size_t *len,
		   struct err *err)
{
	if (ws->consumed) {
		memmove(ws->conn.in, ws->conn.in + ws->consumed, ws->conn.in_len - ws->consumed);
		ws->conn.in_len -= ws->consumed;
		ws->consumed = 0;
		ws->msg_len = 0;
		ws->msg_op = 0;
	}
	if (ws->closed)
		return err_set(err, ECONNRESET, "the connection is closed");
	/* What is buffered first: the socket is read only when no whole message is, so that
	 * the buffer holds at most one message and what came with it. */
	int r = parse(ws, binary, data, len, err);
	if (r != 0)
		return r;
	if (fill(ws, err) < 0)
		return -1;
	return parse(ws, binary, data, len, err);
}

void client_ws_free(struct client_ws *ws)
{
	if (!ws)
		return;
	if (!ws->closed) {
		struct err e;
		uint8_t code[2] = { 1000 >> 8, 1000 & 0xff };
		send_frame(ws, 8, code, 2, &e);
	}
	client_conn_close(&ws->conn);
	free(ws->msg);
	free(ws);
}

struct client_ws *client_ws_open(struct client *c, const char *path, struct err *err)
{
	uint8_t nonce[16];
	random_bytes(nonce, sizeof(nonce));
	static const char b64[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char key[25];
	for (size_t i = 0, o = 0; i < 16; i += 3) {
		uint32_t v = (uint32_t)nonce[i] << 16 |
			     (i + 1 < 16 ? (uint32_t)nonce[i + 1] << 8 : 0) |
			     (i + 2 < 16 ? nonce[i + 2] : 0);
		key[o++] = b64[v >> 18 & 63];
		key[o++] = b64[v >> 12 & 63];
		key[o++] = i + 1 < 16 ? b64[v >> 6 & 63] : '=';
		key[o++] = i + 2 < 16 ? b64[v & 63] : '=';
	}
	key[24] = '\0';
	_cleanup_free_ char *extra =
		xasprintf("Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n", key);
	struct client_ws *ws = xcalloc(1, sizeof(*ws));
	if (client_upgrade(c, path, "websocket", extra, &ws->conn, err) < 0) {
		free(ws);
		return NULL;
	}
	return ws;
}
