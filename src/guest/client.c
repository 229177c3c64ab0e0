#include "guest/client.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <string.h>

#include "guest/event.h"
#include "guest/proto.h"
#include "util/bev.h"
#include "util/cleanup.h"
#include "util/log.h"

struct guest_op {
	struct guest_conn *conn;
	uint32_t channel;
	const struct guest_op_cbs *cbs;
	void *arg;
	bool detached;         /* no callbacks any more */
	bool finished;         /* on_done ran (or was suppressed) */
	bool released;         /* its channel is closed: freed once no callback is running */
	bool giving_up;        /* the host gave up on it: the agent's grace period runs */
	int64_t recv_credit;   /* data bytes the agent may still send us */
	uint64_t consumed;     /* delivered and released, not yet granted back */
	int64_t send_credit;   /* data bytes we may still send */
	struct evbuffer *outq; /* DATA not yet sent */
	bool eof_queued, eof_sent;
	struct event *timer;
	char *timeout_what;
	struct guest_op *next, *prev;
};

struct guest_conn {
	struct bufferevent *bev;
	struct guest_decoder dec;
	guest_close_fn on_close;
	void *arg;
	bool dead;
	struct err why;
	uint32_t next_channel;
	struct guest_op *ops; /* doubly linked; released ones too, until they are reaped */
	size_t nops;          /* ops not released */
	/* How many of our own frames are on the stack (entry points from libevent, and public
	 * calls). Nothing is freed while it is above zero: a callback may free the connection
	 * or end any op, and every caller up the stack still holds pointers to them. The
	 * outermost frame reaps released ops and, if asked to, frees the connection. */
	int depth;
	bool free_pending;
	uint64_t grace_ms; /* guest_conn_set_grace */
	/* frames and bytes for channels that are not open: a budget, then it is a violation */
	uint64_t stray_frames, stray_bytes;
	/* liveness (guest_conn_set_liveness) */
	struct event *live_timer;
	uint64_t live_interval_ms, live_timeout_ms;
	struct guest_op *live_ping; /* the ping awaiting its answer, if any */
};

/* What an agent may send for channels that are not open before that is a violation: after
 * a cancel it may still flush a window of output, in frames of any size. */
#define GUEST_STRAY_FRAMES_MAX 4096
#define GUEST_STRAY_BYTES_MAX  (64ull << 20)

static guest_violation_fn violation_hook;

void guest_set_violation_hook(guest_violation_fn fn)
{
	violation_hook = fn;
}

int guest_code_errno(const char *code)
{
	/* The agent names its errors with err_name(), and a path that leaves the workspace
	 * ESCAPE (which the API reports like EXDEV). */
	if (code && strcmp(code, "ESCAPE") == 0)
		return EXDEV;
	int num = err_from_name(code);
	return num ? num : EIO;
}

int guest_check_protocol(const json_t *result, struct err *err)
{
	const json_t *v = json_object_get(result, "protocol");
	if (!json_is_integer(v))
		return err_set(err, EPROTONOSUPPORT,
			       "its sandbox agent is older than protocol %d, which this sandboxd "
			       "speaks (it reports no protocol version)",
			       GUEST_PROTO_VERSION);
	json_int_t have = json_integer_value(v);
	if (have < GUEST_PROTO_VERSION)
		return err_set(err, EPROTONOSUPPORT,
			       "its sandbox agent speaks protocol %lld, older than the %d this "
			       "sandboxd speaks",
			       (long long)have, GUEST_PROTO_VERSION);
	return 0;
}

static void violation(const char *kind)
{
	if (violation_hook)
		violation_hook(kind);
}

/* --- sending ------------------------------------------------------------------------ */

static void send_frame(struct guest_conn *c, uint8_t type, uint32_t channel, const void *p,
		       size_t len)
{
	if (c->dead)
		return;
	uint8_t hdr[GUEST_HDR_LEN];
	guest_frame_header(hdr, type, channel, (uint32_t)len);
	struct evbuffer *out = bufferevent_get_output(c->bev);
	evbuffer_add(out, hdr, sizeof(hdr));
	if (len)
		evbuffer_add(out, p, len);
}

static void op_flush(struct guest_op *op)
{
	struct guest_conn *c = op->conn;
	if (c->dead)
		return;
	size_t have;
	while ((have = evbuffer_get_length(op->outq)) > 0 && op->send_credit > 0) {
		size_t n = have;
		if (n > GUEST_DATA_CHUNK)
			n = GUEST_DATA_CHUNK;
		if ((int64_t)n > op->send_credit)
			n = (size_t)op->send_credit;
		uint8_t hdr[GUEST_HDR_LEN];
		guest_frame_header(hdr, GUEST_DATA, op->channel, (uint32_t)n);
		struct evbuffer *out = bufferevent_get_output(c->bev);
		evbuffer_add(out, hdr, sizeof(hdr));
		evbuffer_remove_buffer(op->outq, out, n);
		op->send_credit -= (int64_t)n;
	}
	if (op->eof_queued && !op->eof_sent && evbuffer_get_length(op->outq) == 0) {
		send_frame(c, GUEST_EOF, op->channel, NULL, 0);
		op->eof_sent = true;
	}
}

/* --- lifetime ---------------------------------------------------------------------- */

static void conn_destroy(struct guest_conn *c);

static void conn_enter(struct guest_conn *c)
{
	c->depth++;
}

/* Leaves a frame entered with conn_enter. The outermost one frees what was released
 * meanwhile, and the connection itself when guest_conn_free asked for it: the caller must
 * not touch c, or any op of it, afterwards. */
static void conn_leave(struct guest_conn *c)
{
	if (--c->depth > 0)
		return;
	struct guest_op *op = c->ops;
	while (op) {
		struct guest_op *next = op->next;
		if (op->released) {
			if (op->prev)
				op->prev->next = op->next;
			else
				c->ops = op->next;
			if (op->next)
				op->next->prev = op->prev;
			if (op->timer)
				event_free(op->timer);
			evbuffer_free(op->outq);
			free(op->timeout_what);
			free(op);
		}
		op = next;
	}
	if (c->free_pending)
		conn_destroy(c);
}

/* The op's channel is closed: no frame is sent or taken for it any more. Its memory goes at
 * the outermost conn_leave, so every caller on the stack may still look at it. */
static void op_release(struct guest_op *op)
{
	if (op->released)
		return;
	op->released = true;
	op->conn->nops--;
	if (op->timer)
		event_del(op->timer);
}

/* Runs on_done once (unless detached). Does not release: the channel stays open until the
 * agent's terminal frame arrives or the connection ends. Called only inside a frame. */
static void op_finish(struct guest_op *op, json_t *result, const struct err *err)
{
	if (op->finished)
		return;
	op->finished = true;
	if (op->timer)
		event_del(op->timer);
	bool call = !op->detached && op->cbs->on_done;
	op->detached = true;
	if (call)
		op->cbs->on_done(op, result, err, op->arg);
}

static void conn_fail(struct guest_conn *c, int errnum, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* Ends the connection: every open op fails with the reason, then on_close runs. Inside a
 * frame of its own, so it may run from anywhere. */
static void conn_fail(struct guest_conn *c, int errnum, const char *fmt, ...)
{
	if (c->dead)
		return;
	c->dead = true;
	va_list ap;
	va_start(ap, fmt);
	char msg[ERR_MSG_MAX];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	err_set(&c->why, errnum, "%s", msg);
	bufferevent_disable(c->bev, EV_READ | EV_WRITE);
	if (c->live_timer)
		event_del(c->live_timer);

	conn_enter(c);
	/* Callbacks may start no op (the connection is dead) and free none (frees wait for the
	 * outermost frame), so the list stays as it is while we walk it. */
	for (struct guest_op *op = c->ops; op; op = op->next)
		if (!op->released)
			op_finish(op, NULL, &c->why);
	for (struct guest_op *op = c->ops; op; op = op->next)
		op_release(op);
	if (c->on_close)
		c->on_close(c, &c->why, c->arg);
	conn_leave(c);
}

/* --- receiving ---------------------------------------------------------------------- */

static struct guest_op *find_op(struct guest_conn *c, uint32_t channel)
{
	for (struct guest_op *op = c->ops; op; op = op->next)
		if (op->channel == channel && !op->released)
			return op;
	return NULL;
}

static void handle_terminal(struct guest_op *op, const struct guest_frame *f)
{
	json_error_t jerr;
	json_t *j = json_loadb((const char *)f->payload, f->len, JSON_REJECT_DUPLICATES, &jerr);
	if (!j || !json_is_object(j)) {
		json_decref(j);
		violation("json");
		struct err e;
		err_set(&e, EREMOTEIO, "sandbox agent sent a malformed reply");
		op_finish(op, NULL, &e);
	} else if (f->type == GUEST_RESULT) {
		op_finish(op, j, NULL);
		json_decref(j);
	} else {
		const char *msg = json_string_value(json_object_get(j, "error"));
		const char *code = json_string_value(json_object_get(j, "code"));
		struct err e;
		err_set(&e, guest_code_errno(code), "%s", msg ? msg : "sandbox agent error");
		json_decref(j);
		op_finish(op, NULL, &e);
	}
	op_release(op);
}

static void handle_info(struct guest_op *op, const struct guest_frame *f)
{
	struct guest_conn *c = op->conn;
	if (!op->cbs->on_info) {
		violation("frame");
		conn_fail(c, EREMOTEIO,
			  "sandbox agent sent file information for an operation "
			  "that has none");
		return;
	}
	json_error_t jerr;
	json_t *j = json_loadb((const char *)f->payload, f->len, JSON_REJECT_DUPLICATES, &jerr);
	if (!j || !json_is_object(j)) {
		json_decref(j);
		violation("json");
		conn_fail(c, EREMOTEIO, "sandbox agent sent malformed file information");
		return;
	}
	if (!op->detached)
		op->cbs->on_info(op, j, op->arg);
	json_decref(j);
}

/* An EVENT: JSON, counted against the channel's credit like data (the consumer hands it
 * back with guest_op_consumed), so that an agent cannot queue events without bound. */
static void handle_event(struct guest_op *op, const struct guest_frame *f)
{
	struct guest_conn *c = op->conn;
	if (!op->cbs->on_event) {
		violation("frame");
		conn_fail(c, EREMOTEIO,
			  "sandbox agent sent an event for an operation that has none");
		return;
	}
	if (f->len > GUEST_EVENT_MAX) {
		violation("frame");
		conn_fail(c, EREMOTEIO, "sandbox agent sent an event of %u bytes (at most %u)",
			  f->len, GUEST_EVENT_MAX);
		return;
	}
	op->recv_credit -= f->len;
	if (op->recv_credit < 0) {
		violation("credit");
		conn_fail(c, EREMOTEIO, "sandbox agent sent more events than it was allowed");
		return;
	}
	json_error_t jerr;
	json_t *j = json_loadb((const char *)f->payload, f->len, JSON_REJECT_DUPLICATES, &jerr);
	if (!j || !json_is_object(j) || !json_is_string(json_object_get(j, "type"))) {
		json_decref(j);
		violation("json");
		conn_fail(c, EREMOTEIO, "sandbox agent sent a malformed event");
		return;
	}
	if (op->detached)
		guest_op_consumed(op, f->len);
	else
		op->cbs->on_event(op, j, f->len, op->arg);
	json_decref(j);
}

static void handle_frame(struct guest_conn *c, const struct guest_frame *f)
{
	if (!guest_type_valid(f->type, 0)) {
		violation("frame");
		conn_fail(c, EREMOTEIO, "sandbox agent sent a frame of unknown type %u", f->type);
		return;
	}
	struct guest_op *op = find_op(c, f->channel);
	if (!op) {
		/* A channel we never opened, or one already closed (a second terminal reply,
		 * data after the result or after we gave up): count it and drop the frame,
		 * within a budget that a well-behaved agent never reaches. */
		violation("channel");
		c->stray_bytes += f->len;
		if (++c->stray_frames > GUEST_STRAY_FRAMES_MAX ||
		    c->stray_bytes > GUEST_STRAY_BYTES_MAX)
			conn_fail(c, EREMOTEIO,
				  "sandbox agent sent too much for channels that are not open");
		return;
	}
	switch (f->type) {
	case GUEST_WINDOW:
		if (f->len != 4) {
			violation("frame");
			conn_fail(c, EREMOTEIO, "sandbox agent sent a malformed window frame");
			return;
		}
		op->send_credit += ((uint32_t)f->payload[0] << 24) |
				   ((uint32_t)f->payload[1] << 16) |
				   ((uint32_t)f->payload[2] << 8) | f->payload[3];
		if (op->send_credit > (int64_t)GUEST_WINDOW_INITIAL * 64)
			op->send_credit = (int64_t)GUEST_WINDOW_INITIAL * 64;
		op_flush(op);
		if (op->cbs->on_sent && !op->detached)
			op->cbs->on_sent(op, op->arg);
		return;
	case GUEST_STDOUT:
	case GUEST_STDERR:
	case GUEST_FILEDATA:
		if (!op->cbs->on_data) {
			/* resume, ping: operations that never produce data */
			violation("frame");
			conn_fail(c, EREMOTEIO,
				  "sandbox agent sent data for an operation that has none");
			return;
		}
		op->recv_credit -= f->len;
		if (op->recv_credit < 0) {
			violation("credit");
			conn_fail(c, EREMOTEIO, "sandbox agent sent more data than it was allowed");
			return;
		}
		if (op->detached) {
			guest_op_consumed(op, f->len);
			return;
		}
		op->cbs->on_data(op, f->type, f->payload, f->len, op->arg);
		return;
	case GUEST_FILEINFO:
		handle_info(op, f);
		return;
	case GUEST_EVENT:
		handle_event(op, f);
		return;
	case GUEST_RESULT:
	case GUEST_ERROR:
		handle_terminal(op, f);
		return;
	}
}

static void on_read(struct bufferevent *bev, void *arg)
{
	struct guest_conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	bev_fill(bev, BEV_FILL_MAX);
	conn_enter(c);
	while (!c->dead) {
		size_t avail = evbuffer_get_length(in);
		if (avail < GUEST_HDR_LEN)
			break;
		const uint8_t *p = evbuffer_pullup(in, GUEST_HDR_LEN);
		uint32_t len = ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) |
			       ((uint32_t)p[2] << 8) | p[3];
		if (len > GUEST_MAX_PAYLOAD) {
			violation("frame");
			conn_fail(c, EREMOTEIO, "sandbox agent sent an oversize frame (%u bytes)",
				  len);
			break;
		}
		size_t whole = GUEST_HDR_LEN + (size_t)len;
		if (avail < whole)
			break;
		p = evbuffer_pullup(in, (ev_ssize_t)whole);
		struct guest_frame f;
		size_t consumed = 0;
		if (guest_decode(&c->dec, p, whole, &f, &consumed) != GUEST_DECODE_FRAME ||
		    consumed != whole) {
			violation("frame");
			conn_fail(c, EREMOTEIO, "sandbox agent sent an undecodable frame");
			break;
		}
		handle_frame(c, &f);
		evbuffer_drain(in, whole);
	}
	conn_leave(c);
}

static void on_event(struct bufferevent *bev, short what, void *arg)
{
	struct guest_conn *c = arg;
	int errnum = EVUTIL_SOCKET_ERROR();
	if (what & BEV_EVENT_EOF)
		conn_fail(c, ECONNRESET, "sandbox connection closed (the sandbox stopped)");
	else if (what & BEV_EVENT_ERROR)
		conn_fail(c, ECONNRESET, "sandbox connection failed: %s", strerror(errnum));
}

/* --- public ------------------------------------------------------------------------- */

struct guest_conn *guest_conn_new(struct event_base *base, int fd, guest_close_fn on_close,
				  void *arg)
{
	struct guest_conn *c = xcalloc(1, sizeof(*c));
	evutil_make_socket_nonblocking(fd);
	c->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (!c->bev)
		abort();
	guest_decoder_init(&c->dec, GUEST_MAX_PAYLOAD);
	c->on_close = on_close;
	c->arg = arg;
	c->next_channel = 1;
	c->grace_ms = GUEST_GIVE_UP_GRACE_MS;
	/* Never hold more than a few frames of unread input: the agent's credit bounds the
	 * rest, and reading stops while a consumer is slow. */
	bufferevent_setwatermark(c->bev, EV_READ, 0, 4 * (GUEST_MAX_PAYLOAD + GUEST_HDR_LEN));
	bev_large_writes(c->bev);
	bufferevent_setcb(c->bev, on_read, NULL, on_event, c);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	return c;
}

static void conn_destroy(struct guest_conn *c)
{
	while (c->ops) {
		struct guest_op *op = c->ops;
		c->ops = op->next;
		if (op->timer)
			event_free(op->timer);
		evbuffer_free(op->outq);
		free(op->timeout_what);
		free(op);
	}
	if (c->live_timer)
		event_free(c->live_timer);
	bufferevent_free(c->bev);
	free(c);
}

void guest_conn_close(struct guest_conn *c, int errnum, const char *msg)
{
	if (!c || c->free_pending)
		return;
	c->on_close = NULL;
	conn_enter(c);
	conn_fail(c, errnum, "%s", msg);
	c->free_pending = true; /* by the outermost frame: maybe this one */
	conn_leave(c);
}

void guest_conn_free(struct guest_conn *c)
{
	guest_conn_close(c, ECONNRESET, "sandbox connection closed");
}

void guest_conn_set_close(struct guest_conn *c, guest_close_fn on_close, void *arg)
{
	c->on_close = on_close;
	c->arg = arg;
}

static void timeval_ms(struct timeval *tv, uint64_t ms)
{
	tv->tv_sec = (time_t)(ms / 1000);
	tv->tv_usec = (suseconds_t)(ms % 1000) * 1000;
}

static void live_arm(struct guest_conn *c, uint64_t ms)
{
	struct timeval tv;
	timeval_ms(&tv, ms);
	evtimer_add(c->live_timer, &tv);
}

static void on_live_answer(struct guest_op *op, json_t *result, const struct err *err, void *arg)
{
	struct guest_conn *c = arg;
	c->live_ping = NULL;
	/* Any terminal reply, even an agent's ERROR, shows the agent is there. A connection
	 * that failed has nothing left to watch. */
	if (!c->dead && c->live_interval_ms)
		live_arm(c, c->live_interval_ms);
}

static const struct guest_op_cbs live_cbs = { .on_done = on_live_answer };

static void on_live_timer(evutil_socket_t fd, short what, void *arg)
{
	struct guest_conn *c = arg;
	if (c->dead || !c->live_interval_ms)
		return;
	if (c->live_ping) {
		conn_enter(c);
		conn_fail(c, ETIMEDOUT,
			  "the sandbox agent stopped answering (no reply to a liveness ping in "
			  "%llu ms)",
			  (unsigned long long)c->live_timeout_ms);
		conn_leave(c); /* may free c */
		return;
	}
	json_t *req = json_pack("{s:s}", "op", "ping");
	struct err e;
	c->live_ping = guest_op_start(c, req, &live_cbs, c, &e);
	json_decref(req);
	if (c->live_ping)
		live_arm(c, c->live_timeout_ms);
}

void guest_conn_set_liveness(struct guest_conn *c, uint64_t interval_ms, uint64_t timeout_ms)
{
	c->live_interval_ms = interval_ms;
	c->live_timeout_ms = timeout_ms;
	if (!c->live_timer)
		c->live_timer = evtimer_new(bufferevent_get_base(c->bev), on_live_timer, c);
	event_del(c->live_timer);
	if (interval_ms && !c->dead && !c->live_ping)
		live_arm(c, interval_ms);
	else if (interval_ms && c->live_ping)
		live_arm(c, timeout_ms);
}

uint32_t guest_conn_next_channel(const struct guest_conn *c)
{
	return c->next_channel;
}

void guest_conn_set_next_channel(struct guest_conn *c, uint32_t next)
{
	if (next > c->next_channel)
		c->next_channel = next;
}

bool guest_conn_alive(struct guest_conn *c)
{
	return c && !c->dead;
}

size_t guest_conn_ops(struct guest_conn *c)
{
	return c->nops;
}

struct guest_op *guest_op_start(struct guest_conn *c, json_t *request,
				const struct guest_op_cbs *cbs, void *arg, struct err *err)
{
	if (c->dead) {
		err_copy(err, &c->why);
		return NULL;
	}
	char *text = json_dumps(request, JSON_COMPACT);
	size_t len = strlen(text);
	if (len > GUEST_MAX_PAYLOAD) {
		free(text);
		err_set(err, E2BIG, "request too large for the sandbox agent");
		return NULL;
	}
	struct guest_op *op = xcalloc(1, sizeof(*op));
	op->conn = c;
	op->channel = c->next_channel++;
	op->cbs = cbs;
	op->arg = arg;
	op->recv_credit = GUEST_WINDOW_INITIAL;
	op->send_credit = GUEST_WINDOW_INITIAL;
	op->outq = evbuffer_new();
	op->next = c->ops;
	if (c->ops)
		c->ops->prev = op;
	c->ops = op;
	c->nops++;
	send_frame(c, GUEST_REQUEST, op->channel, text, len);
	free(text);
	return op;
}

void guest_op_send(struct guest_op *op, const void *data, size_t len)
{
	if (op->eof_queued || op->finished)
		return;
	evbuffer_add(op->outq, data, len);
	op_flush(op);
}

void guest_op_eof(struct guest_op *op)
{
	if (op->eof_queued)
		return;
	op->eof_queued = true;
	op_flush(op);
}

void guest_op_cancel(struct guest_op *op)
{
	send_frame(op->conn, GUEST_CANCEL, op->channel, NULL, 0);
}

void guest_op_consumed(struct guest_op *op, size_t n)
{
	op->consumed += n;
	if (op->consumed >= GUEST_WINDOW_INITIAL / 4) {
		uint32_t inc = (uint32_t)op->consumed;
		uint8_t be[4] = { (uint8_t)(inc >> 24), (uint8_t)(inc >> 16), (uint8_t)(inc >> 8),
				  (uint8_t)inc };
		op->recv_credit += inc;
		op->consumed = 0;
		send_frame(op->conn, GUEST_WINDOW, op->channel, be, 4);
	}
}

static void op_arm(struct guest_op *op, uint64_t ms);

/* The host no longer waits for this op (its caller heard a timeout, or went away): the agent
 * is told to cancel, nothing more goes to it but EOF, and it has the connection's grace
 * period to end the channel with its terminal reply. After that the channel is closed on our
 * side, so that an agent that ignores the cancel holds nothing of ours (and what it still
 * sends counts as stray). */
static void op_give_up(struct guest_op *op)
{
	if (op->giving_up || op->released)
		return;
	op->giving_up = true;
	guest_op_cancel(op);
	evbuffer_drain(op->outq, evbuffer_get_length(op->outq));
	if (!op->eof_sent) {
		op->eof_queued = true;
		op_flush(op);
	}
	if (op->consumed)
		guest_op_consumed(op, 0);
	op_arm(op, op->conn->grace_ms);
}

static void on_op_timer(evutil_socket_t fd, short what, void *arg)
{
	struct guest_op *op = arg;
	struct guest_conn *c = op->conn;
	conn_enter(c);
	if (op->giving_up) {
		op_release(op);
	} else {
		struct err e;
		err_set(&e, ETIMEDOUT, "%s: the sandbox did not answer in time",
			op->timeout_what ? op->timeout_what : "operation");
		op_finish(op, NULL, &e);
		op_give_up(op); /* unless the callback ended the connection meanwhile */
	}
	conn_leave(c);
}

static void op_arm(struct guest_op *op, uint64_t ms)
{
	if (!op->timer)
		op->timer = evtimer_new(bufferevent_get_base(op->conn->bev), on_op_timer, op);
	struct timeval tv;
	timeval_ms(&tv, ms);
	evtimer_add(op->timer, &tv);
}

void guest_op_set_timeout(struct guest_op *op, uint64_t ms, const char *what)
{
	if (op->finished)
		return;
	free(op->timeout_what);
	op->timeout_what = what ? xstrdup(what) : NULL;
	op_arm(op, ms);
}

void guest_op_clear_timeout(struct guest_op *op)
{
	if (op->timer && !op->giving_up)
		event_del(op->timer);
}

void guest_op_detach(struct guest_op *op)
{
	if (op->detached)
		return;
	op->detached = true;
	op->finished = true;
	op_give_up(op);
}

void guest_conn_set_grace(struct guest_conn *c, uint64_t ms)
{
	c->grace_ms = ms;
}

void guest_op_violation(struct guest_op *op, const char *what)
{
	violation("frame");
	conn_fail(op->conn, EREMOTEIO, "sandbox agent sent %s", what);
}

size_t guest_op_queued(struct guest_op *op)
{
	return evbuffer_get_length(op->outq);
}
