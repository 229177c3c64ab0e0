/* ws: WebSocket (RFC 6455) connections taken over from the HTTP layer; wslay does the
 * framing (masking, fragments, control frames, the closing handshake), this file the
 * handshake, the I/O on the connection's bufferevent, UTF-8 checks and bounds. */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <wslay/wslay.h>

#include "http/http.h"
#include "http/internal.h"
#include "util/bev.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/random.h"
#include "util/text.h"

/* Bytes queued toward the peer above which wslay is told to wait (and producers with it). */
#define WS_HIGH_WATER (1024 * 1024)
/* Bytes queued toward the peer above which its input is not read any more. */
#define WS_READ_STOP (4 * WS_HIGH_WATER)
/* Bytes read from the socket and not yet taken by wslay, at most. */
#define WS_READ_BUFFER (256 * 1024)
/* What one queued message costs beyond its payload (wslay's record of it, the allocator's
 * share): an empty pong counts this much, so that pings the peer never lets us answer stop
 * the reading like any other unread reply. */
#define WS_MSG_COST 256
/* How long a closing handshake may take before the connection is dropped. */
#define WS_CLOSE_MS 5000

struct http_ws {
	struct bufferevent *bev;
	wslay_event_context_ptr wctx;
	const struct http_ws_ops *ops;
	void *arg;
	struct event *close_timer;
	int busy;  /* callbacks running: freeing waits */
	bool done; /* closed: to be freed */
	bool closed_told;
	bool read_stopped; /* input left unread while too much waits to go out */
	char peer[64];
};

static ssize_t ws_recv(wslay_event_context_ptr wctx, uint8_t *buf, size_t len, int flags,
		       void *user)
{
	struct http_ws *ws = user;
	/* A peer that does not read what it is sent is not read from either: what its
	 * messages make us answer (pongs, errors) cannot pile up. ws_on_write reads again. */
	if (http_ws_pending(ws) >= WS_READ_STOP) {
		ws->read_stopped = true;
		wslay_event_set_error(wctx, WSLAY_ERR_WOULDBLOCK);
		return -1;
	}
	int n = evbuffer_remove(bufferevent_get_input(ws->bev), buf, len);
	if (n <= 0) {
		wslay_event_set_error(wctx, WSLAY_ERR_WOULDBLOCK);
		return -1;
	}
	return n;
}

static ssize_t ws_send(wslay_event_context_ptr wctx, const uint8_t *data, size_t len, int flags,
		       void *user)
{
	struct http_ws *ws = user;
	struct evbuffer *out = bufferevent_get_output(ws->bev);
	if (evbuffer_get_length(out) >= WS_HIGH_WATER) {
		wslay_event_set_error(wctx, WSLAY_ERR_WOULDBLOCK);
		return -1;
	}
	if (evbuffer_add(out, data, len) < 0) {
		wslay_event_set_error(wctx, WSLAY_ERR_CALLBACK_FAILURE);
		return -1;
	}
	return (ssize_t)len;
}

static int ws_genmask(wslay_event_context_ptr wctx, uint8_t *buf, size_t len, void *user)
{
	random_bytes(buf, len);
	return 0;
}

static void ws_on_msg(wslay_event_context_ptr wctx, const struct wslay_event_on_msg_recv_arg *m,
		      void *user)
{
	struct http_ws *ws = user;
	if (m->opcode != WSLAY_TEXT_FRAME && m->opcode != WSLAY_BINARY_FRAME)
		return; /* ping, pong and close are wslay's */
	if (m->opcode == WSLAY_TEXT_FRAME && !utf8_valid(m->msg, m->msg_length)) {
		wslay_event_queue_close(wctx, WSLAY_CODE_INVALID_FRAME_PAYLOAD_DATA,
					(const uint8_t *)"text is not UTF-8", 17);
		return;
	}
	if (ws->ops->message && !ws->closed_told)
		ws->ops->message(ws, m->opcode == WSLAY_BINARY_FRAME, m->msg, m->msg_length,
				 ws->arg);
}

static const struct wslay_event_callbacks ws_callbacks = {
	.recv_callback = ws_recv,
	.send_callback = ws_send,
	.genmask_callback = ws_genmask,
	.on_msg_recv_callback = ws_on_msg,
};

static void ws_free(struct http_ws *ws)
{
	if (ws->close_timer)
		event_free(ws->close_timer);
	if (ws->bev)
		bufferevent_free(ws->bev);
	wslay_event_context_free(ws->wctx);
	free(ws);
}

/* The connection is over: tells the owner once, frees when no callback is running. */
static void ws_finish(struct http_ws *ws, uint16_t code)
{
	if (!ws->closed_told) {
		ws->closed_told = true;
		if (ws->bev)
			bufferevent_disable(ws->bev, EV_READ | EV_WRITE);
		if (ws->ops->closed) {
			ws->busy++;
			ws->ops->closed(ws, code, ws->arg);
			ws->busy--;
		}
	}
	ws->done = true;
	if (ws->busy == 0)
		ws_free(ws);
}

/* Sends what wslay has queued; ends the connection when neither side has more to say.
 * Returns false once ws is finished. */
static bool ws_pump(struct http_ws *ws)
{
	if (wslay_event_want_write(ws->wctx) && wslay_event_send(ws->wctx) < 0) {
		ws_finish(ws, WSLAY_CODE_ABNORMAL_CLOSURE);
		return false;
	}
	if (!wslay_event_want_read(ws->wctx) && !wslay_event_want_write(ws->wctx)) {
		/* Both closes exchanged (or reading failed): once the last bytes are out. */
		if (evbuffer_get_length(bufferevent_get_output(ws->bev)) == 0) {
			uint16_t code = wslay_event_get_status_code_received(ws->wctx);
			ws_finish(ws, code);
			return false;
		}
	}
	if (wslay_event_get_close_sent(ws->wctx) && !evtimer_pending(ws->close_timer, NULL)) {
		struct timeval tv = { WS_CLOSE_MS / 1000, 0 };
		evtimer_add(ws->close_timer, &tv);
	}
	return true;
}

static void ws_on_read(struct bufferevent *bev, void *arg)
{
	struct http_ws *ws = arg;
	bev_fill(bev, BEV_FILL_MAX);
	ws->busy++;
	int r = wslay_event_recv(ws->wctx);
	ws->busy--;
	if (ws->done) {
		ws_finish(ws, 0);
		return;
	}
	if (r < 0) {
		ws_finish(ws, WSLAY_CODE_PROTOCOL_ERROR);
		return;
	}
	ws_pump(ws);
}

static void ws_on_write(struct bufferevent *bev, void *arg)
{
	struct http_ws *ws = arg;
	if (!ws_pump(ws))
		return;
	if (ws->read_stopped && http_ws_pending(ws) < WS_READ_STOP / 2) {
		ws->read_stopped = false;
		bufferevent_trigger(ws->bev, EV_READ,
				    BEV_TRIG_DEFER_CALLBACKS | BEV_TRIG_IGNORE_WATERMARKS);
	}
	if (ws->ops->drain && !wslay_event_get_close_sent(ws->wctx) &&
	    http_ws_pending(ws) < WS_HIGH_WATER / 2) {
		ws->busy++;
		ws->ops->drain(ws, ws->arg);
		ws->busy--;
		if (ws->done)
			ws_finish(ws, 0);
	}
}

static void ws_on_event(struct bufferevent *bev, short what, void *arg)
{
	struct http_ws *ws = arg;
	uint16_t code = wslay_event_get_close_received(ws->wctx)
				? wslay_event_get_status_code_received(ws->wctx)
				: WSLAY_CODE_ABNORMAL_CLOSURE;
	ws_finish(ws, code);
}

static void ws_on_close_timeout(evutil_socket_t fd, short what, void *arg)
{
	ws_finish(arg, WSLAY_CODE_ABNORMAL_CLOSURE);
}

/* Whether the comma-separated header value holds `token` (any case). */
static bool has_token(const char *value, const char *token)
{
	size_t tl = strlen(token);
	for (const char *p = value; p && *p;) {
		p += strspn(p, " \t,");
		size_t n = strcspn(p, ",");
		size_t e = n;
		while (e && (p[e - 1] == ' ' || p[e - 1] == '\t'))
			e--;
		if (e == tl && !strncasecmp(p, token, tl))
			return true;
		p += n;
	}
	return false;
}

/* Sec-WebSocket-Accept for a key (RFC 6455 4.2.2): base64(SHA-1(key + the GUID)). */
static char *accept_value(const char *key)
{
	char buf[128];
	int n = snprintf(buf, sizeof(buf), "%s258EAFA5-E914-47DA-95CA-C5AB0DC85B11", key);
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned int mdlen = 0;
	if (n < 0 || (size_t)n >= sizeof(buf) ||
	    !EVP_Digest(buf, (size_t)n, md, &mdlen, EVP_sha1(), NULL))
		return NULL;
	return base64_encode(md, mdlen, NULL);
}

struct http_ws *http_ws_accept(struct http_ctx *ctx, const char *protocol,
			       const struct http_ws_ops *ops, void *arg, size_t max_message)
{
	const char *upgrade = http_header(ctx, "Upgrade");
	if (!upgrade || !has_token(upgrade, "websocket")) {
		http_add_header(ctx, "Upgrade", "websocket");
		http_reply_error(ctx, 426,
				 "This endpoint speaks WebSocket: send Upgrade: websocket");
		return NULL;
	}
	const char *version = http_header(ctx, "Sec-WebSocket-Version");
	if (!version || strcmp(version, "13")) {
		http_add_header(ctx, "Sec-WebSocket-Version", "13");
		http_reply_error(ctx, 426, "Only WebSocket version 13 is spoken");
		return NULL;
	}
	const char *key = http_header(ctx, "Sec-WebSocket-Key");
	_cleanup_free_ uint8_t *raw = NULL;
	size_t rawlen = 0;
	if (!key || base64_decode(key, strlen(key), &raw, &rawlen) < 0 || rawlen != 16) {
		http_reply_error(ctx, 400, "Sec-WebSocket-Key must be 16 bytes in base64");
		return NULL;
	}
	const char *connection = http_header(ctx, "Connection");
	if (strcmp(http_method(ctx), "GET") || !connection || !has_token(connection, "upgrade") ||
	    !http_upgrade_requested(ctx)) {
		http_reply_error(ctx, 400,
				 "A WebSocket handshake is a GET with Connection: Upgrade");
		return NULL;
	}
	_cleanup_free_ char *acc = accept_value(key);
	if (!acc) {
		http_reply_error(ctx, 500, "Cannot compute the handshake's answer");
		return NULL;
	}
	struct http_ws *ws = xcalloc(1, sizeof(*ws));
	snprintf(ws->peer, sizeof(ws->peer), "%s", http_peer(ctx));
	if (wslay_event_context_server_init(&ws->wctx, &ws_callbacks, ws) != 0)
		abort();
	wslay_event_config_set_max_recv_msg_length(ws->wctx,
						   max_message ? max_message : 1024 * 1024);
	ws->ops = ops;
	ws->arg = arg;
	http_add_header_raw(ctx, "Upgrade", "websocket");
	http_add_header_raw(ctx, "Connection", "Upgrade");
	http_add_header_raw(ctx, "Sec-WebSocket-Accept", acc);
	if (protocol)
		http_add_header_raw(ctx, "Sec-WebSocket-Protocol", protocol);
	struct event_base *base = NULL;
	ws->bev = http_upgrade_raw(ctx, 101);
	if (!ws->bev) {
		wslay_event_context_free(ws->wctx);
		free(ws);
		return NULL;
	}
	base = bufferevent_get_base(ws->bev);
	ws->close_timer = evtimer_new(base, ws_on_close_timeout, ws);
	bufferevent_setcb(ws->bev, ws_on_read, ws_on_write, ws_on_event, ws);
	/* The socket is read only while what was read is taken (see ws_recv). */
	bufferevent_setwatermark(ws->bev, EV_READ, 0, WS_READ_BUFFER);
	bufferevent_enable(ws->bev, EV_READ | EV_WRITE);
	/* Frames the client sent right behind its handshake are read from the loop. */
	if (evbuffer_get_length(bufferevent_get_input(ws->bev)))
		bufferevent_trigger(ws->bev, EV_READ, BEV_TRIG_DEFER_CALLBACKS);
	return ws;
}

void http_ws_send(struct http_ws *ws, bool binary, const void *data, size_t len)
{
	if (ws->closed_told)
		return;
	struct wslay_event_msg m = {
		.opcode = binary ? WSLAY_BINARY_FRAME : WSLAY_TEXT_FRAME,
		.msg = data,
		.msg_length = len,
	};
	if (wslay_event_queue_msg(ws->wctx, &m) != 0)
		return;
	if (!ws->busy)
		ws_pump(ws);
	else
		bufferevent_trigger(ws->bev, EV_WRITE,
				    BEV_TRIG_DEFER_CALLBACKS | BEV_TRIG_IGNORE_WATERMARKS);
}

size_t http_ws_pending(struct http_ws *ws)
{
	if (!ws->bev)
		return 0;
	return evbuffer_get_length(bufferevent_get_output(ws->bev)) +
	       wslay_event_get_queued_msg_length(ws->wctx) +
	       wslay_event_get_queued_msg_count(ws->wctx) * WS_MSG_COST;
}

void http_ws_close(struct http_ws *ws, uint16_t code, const char *reason)
{
	if (ws->closed_told)
		return;
	size_t rl = reason ? strlen(reason) : 0;
	if (rl > 123)
		rl = 123; /* a close frame's payload is at most 125 bytes */
	wslay_event_queue_close(ws->wctx, code, (const uint8_t *)reason, rl);
	if (!ws->busy)
		ws_pump(ws);
	else
		bufferevent_trigger(ws->bev, EV_WRITE,
				    BEV_TRIG_DEFER_CALLBACKS | BEV_TRIG_IGNORE_WATERMARKS);
}
