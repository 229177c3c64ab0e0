/* conn: one connection to the host: frame I/O, dispatch to operations, flow control and the
 * poll loop that drives it all. */
#include "agent.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "util/cleanup.h"

#define IN_CAP (GUEST_HDR_LEN + GUEST_MAX_PAYLOAD + (64u << 10))

static size_t out_pending(const struct conn *c)
{
	return c->out_len - c->out_off;
}

bool conn_may_send_data(const struct conn *c)
{
	return out_pending(c) < AGENT_OUT_HIGH;
}

static void out_reserve(struct conn *c, size_t n)
{
	/* Drop what was written before growing. */
	if (c->out_off && (c->out_off == c->out_len || c->out_cap - c->out_len < n)) {
		memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
		c->out_len -= c->out_off;
		c->out_off = 0;
	}
	if (c->out_cap - c->out_len >= n)
		return;
	size_t cap = c->out_cap ? c->out_cap : 65536;
	while (cap - c->out_len < n)
		cap *= 2;
	c->out = xrealloc(c->out, cap);
	c->out_cap = cap;
}

uint8_t *conn_reserve(struct conn *c, size_t max)
{
	out_reserve(c, GUEST_HDR_LEN + max);
	return c->out + c->out_len + GUEST_HDR_LEN;
}

void conn_commit(struct conn *c, uint8_t type, uint32_t ch, size_t n)
{
	guest_frame_header(c->out + c->out_len, type, ch, (uint32_t)n);
	c->out_len += GUEST_HDR_LEN + n;
}

void conn_frame(struct conn *c, uint8_t type, uint32_t ch, const void *p, size_t n)
{
	uint8_t *dst = conn_reserve(c, n);
	if (n)
		memcpy(dst, p, n);
	conn_commit(c, type, ch, n);
}

void conn_error(struct conn *c, uint32_t ch, const struct err *e)
{
	struct jw w;
	jw_init(&w);
	jw_obj_open(&w);
	jw_key(&w, "error");
	jw_str(&w, e->msg);
	jw_key(&w, "code");
	jw_str(&w, agent_code(e->errnum));
	jw_obj_close(&w);
	conn_frame(c, GUEST_ERROR, ch, w.buf, w.len);
	jw_free(&w);
}

static struct op *find_op(struct conn *c, uint32_t ch)
{
	for (size_t i = 0; i < c->nops; i++)
		if (!c->ops[i]->done && c->ops[i]->ch == ch)
			return c->ops[i];
	return NULL;
}

static void fail_op(struct op *op, int errnum, const char *msg)
{
	struct err e;
	err_set(&e, errnum, "%s", msg);
	op_error(op, &e);
}

/* An error about a frame: on an open channel it ends the operation (its one terminal frame),
 * elsewhere it is a lone ERROR on that channel. */
static void frame_error(struct conn *c, uint32_t ch, int errnum, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void frame_error(struct conn *c, uint32_t ch, int errnum, const char *fmt, ...)
{
	char msg[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	struct op *op = find_op(c, ch);
	if (op) {
		fail_op(op, errnum, msg);
		return;
	}
	struct err e;
	err_set(&e, errnum, "%s", msg);
	conn_error(c, ch, &e);
}

static void start_request(struct conn *c, uint32_t ch, const uint8_t *p, size_t n)
{
	if (ch == 0) {
		frame_error(c, 0, EPROTO, "channel 0 is reserved");
		return;
	}
	struct op *open = find_op(c, ch);
	if (open) {
		fail_op(open, EPROTO, "REQUEST on a channel that is already open");
		return;
	}
	struct err e;
	if (c->active >= AGENT_MAX_OPS) {
		err_set(&e, EAGAIN, "too many concurrent operations (at most %d)", AGENT_MAX_OPS);
		conn_error(c, ch, &e);
		return;
	}
	struct req r;
	if (req_parse(p, n, &r, &e) < 0) {
		conn_error(c, ch, &e);
		return;
	}
	switch (r.op) {
	case REQ_PING:
		op_ping(c, ch, &r);
		break;
	case REQ_RESUME:
		op_resume(c, ch, &r);
		break;
	case REQ_SHUTDOWN:
		op_shutdown(c, ch, &r);
		break;
	case REQ_EXEC:
		op_exec(c, ch, &r);
		break;
	case REQ_WRITE:
		op_write(c, ch, &r);
		break;
	case REQ_READ:
		op_read(c, ch, &r);
		break;
	case REQ_LIST:
		op_list(c, ch, &r);
		break;
	case REQ_STAT:
		op_stat(c, ch, &r);
		break;
	case REQ_MKDIR:
		op_mkdir(c, ch, &r);
		break;
	case REQ_REMOVE:
		op_remove(c, ch, &r);
		break;
	case REQ_RENAME:
		op_rename(c, ch, &r);
		break;
	case REQ_SPAWN:
		op_spawn(c, ch, &r);
		break;
	case REQ_PROCS:
		op_procs(c, ch, &r);
		break;
	case REQ_ATTACH:
		op_attach(c, ch, &r);
		break;
	case REQ_SIGNAL:
		op_signal(c, ch, &r);
		break;
	case REQ_INPUT:
		op_input(c, ch, &r);
		break;
	case REQ_RESIZE:
		op_resize(c, ch, &r);
		break;
	case REQ_WATCH:
		op_watch(c, ch, &r);
		break;
	case REQ_CONNECT:
		op_connect(c, ch, &r);
		break;
	case REQ_PORTS:
		op_ports(c, ch, &r);
		break;
	}
	req_fini(&r);
}

static uint32_t get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

static void handle_frame(struct conn *c, const struct guest_frame *f)
{
	if (!guest_type_valid(f->type, 1)) {
		frame_error(c, f->channel, EPROTO, "unexpected frame type %u", f->type);
		return;
	}
	if (f->type == GUEST_REQUEST) {
		start_request(c, f->channel, f->payload, f->len);
		return;
	}
	/* Anything else for a channel that is not open is ignored: it may simply have crossed
	 * the operation's terminal frame on the wire. */
	struct op *op = find_op(c, f->channel);
	if (!op)
		return;
	switch (f->type) {
	case GUEST_DATA:
		if (f->len > op->recv_left) {
			fail_op(op, EPROTO, "DATA beyond the granted window");
			return;
		}
		op->recv_left -= f->len;
		if (op->vt->data)
			op->vt->data(op, f->payload, f->len);
		else
			op_consumed(op, f->len);
		break;
	case GUEST_EOF:
		if (op->vt->eof)
			op->vt->eof(op);
		break;
	case GUEST_CANCEL:
		if (op->vt->cancel)
			op->vt->cancel(op);
		else
			fail_op(op, ECANCELED, "cancelled");
		break;
	case GUEST_WINDOW:
		if (f->len != 4) {
			fail_op(op, EPROTO, "WINDOW payload must be 4 bytes");
			return;
		}
		op->send_credit += get_be32(f->payload);
		/* A hostile host cannot overflow the counter: 2^32 grants of 2^32 at most. */
		break;
	}
}

/* Decodes and handles buffered frames while the outgoing queue has room for their replies. */
static void process_input(struct conn *c)
{
	size_t off = 0;
	while (out_pending(c) < AGENT_OUT_HARD) {
		struct guest_frame f;
		size_t used;
		enum guest_decode_status st =
			guest_decode(&c->dec, c->in + off, c->in_len - off, &f, &used);
		if (st == GUEST_DECODE_FRAME)
			handle_frame(c, &f);
		else if (st == GUEST_DECODE_OVERSIZE)
			frame_error(c, f.channel, EMSGSIZE,
				    "frame of %u bytes exceeds the limit of %u bytes", f.len,
				    GUEST_MAX_PAYLOAD);
		off += used;
		if (st == GUEST_DECODE_NEED_MORE)
			break;
	}
	if (off) {
		memmove(c->in, c->in + off, c->in_len - off);
		c->in_len -= off;
	}
}

static bool input_pending(struct conn *c)
{
	if (out_pending(c) >= AGENT_OUT_HARD || c->in_len < GUEST_HDR_LEN)
		return false;
	/* A whole frame (or skippable bytes) is already buffered. */
	struct guest_decoder d = c->dec;
	struct guest_frame f;
	size_t used;
	return guest_decode(&d, c->in, c->in_len, &f, &used) != GUEST_DECODE_NEED_MORE || used > 0;
}

static void read_input(struct conn *c)
{
	for (int i = 0; i < 4 && c->in_len < c->in_cap; i++) {
		ssize_t n = read(c->fd, c->in + c->in_len, c->in_cap - c->in_len);
		if (n > 0) {
			c->in_len += (size_t)n;
			continue;
		}
		if (n == 0)
			c->hup = true;
		else if (errno == EAGAIN || errno == EINTR)
			return;
		else if (errno == ECONNRESET || errno == EPIPE)
			c->hup = true;
		else
			c->failed = true;
		return;
	}
}

static void write_output(struct conn *c)
{
	while (out_pending(c)) {
		ssize_t n = write(c->fd, c->out + c->out_off, out_pending(c));
		if (n > 0) {
			c->out_off += (size_t)n;
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
			c->hup = true;
		else
			c->failed = true;
		return;
	}
	c->out_off = c->out_len = 0;
}

static void sweep(struct conn *c)
{
	size_t j = 0;
	for (size_t i = 0; i < c->nops; i++) {
		struct op *op = c->ops[i];
		if (op->done)
			op->vt->destroy(op);
		else
			c->ops[j++] = op;
	}
	c->nops = j;
}

static void destroy_all(struct conn *c)
{
	for (size_t i = 0; i < c->nops; i++)
		c->ops[i]->vt->destroy(c->ops[i]);
	c->nops = c->active = 0;
}

void conn_drop_ops(struct conn *c)
{
	destroy_all(c);
}

/* Gives queued replies (a shutdown's RESULT) up to a second to reach the host. */
static void flush_output(struct conn *c)
{
	int64_t end = agent_now_ns() + 1000000000LL;
	while (out_pending(c) && !c->hup && !c->failed) {
		int64_t left = end - agent_now_ns();
		if (left <= 0)
			return;
		struct pollfd p = { .fd = c->fd, .events = POLLOUT };
		if (poll(&p, 1, (int)(left / 1000000) + 1) < 0 && errno != EINTR)
			return;
		if (p.revents & (POLLHUP | POLLERR))
			return;
		if (p.revents & POLLOUT)
			write_output(c);
	}
}

int conn_serve(struct agent *a, int fd)
{
	struct conn c = { .a = a, .fd = fd };
	guest_decoder_init(&c.dec, GUEST_MAX_PAYLOAD);
	c.in_cap = IN_CAP;
	c.in = xmalloc(c.in_cap);
	int fl = fcntl(fd, F_GETFL);
	if (fl >= 0 && !(fl & O_NONBLOCK))
		fcntl(fd, F_SETFL, fl | O_NONBLOCK);
	a->conn = &c;

	size_t pcap = 2 + AGENT_MAX_OPS * AGENT_OP_MAX_FDS + AGENT_MAX_PROCS * AGENT_PROC_FDS;
	_cleanup_free_ struct pollfd *pfd = xcalloc(pcap, sizeof(*pfd));
	int ret = 0;

	while (!c.hup && !a->stop && !a->poweroff) {
		if (c.failed) {
			ret = -EIO;
			break;
		}
		int n = 0;
		int64_t now = agent_now_ns();
		int64_t deadline = INT64_MAX;
		pfd[n++] = (struct pollfd){ .fd = a->sigpipe[0], .events = POLLIN };
		short ev = 0;
		if (out_pending(&c) < AGENT_OUT_HARD && c.in_len < c.in_cap)
			ev |= POLLIN;
		if (out_pending(&c))
			ev |= POLLOUT;
		pfd[n++] = (struct pollfd){ .fd = fd, .events = ev };
		if (input_pending(&c))
			deadline = now;
		for (size_t i = 0; i < c.nops; i++) {
			struct op *op = c.ops[i];
			op->pfd_first = n;
			op->pfd_n =
				op->vt->poll_fill ? op->vt->poll_fill(op, pfd + n, &deadline) : 0;
			n += op->pfd_n;
		}
		int procs_first = n;
		n += procs_poll_fill(a, pfd + n, &deadline);
		int timeout = -1;
		if (deadline != INT64_MAX) {
			int64_t ms = deadline <= now ? 0 : (deadline - now + 999999) / 1000000;
			timeout = ms > 60000 ? 60000 : (int)ms;
		}
		int pr = poll(pfd, (nfds_t)n, timeout);
		if (pr < 0 && errno != EINTR) {
			ret = -errno;
			break;
		}
		if (pr < 0)
			continue;

		if (pfd[0].revents)
			agent_handle_signals(a);
		if (pfd[1].revents & POLLOUT)
			write_output(&c);
		if (pfd[1].revents & (POLLIN | POLLHUP | POLLERR))
			read_input(&c);
		if (c.hup || c.failed)
			continue;
		process_input(&c);
		/* Output read now is sent by the attach operations stepped below. */
		procs_step(a, pfd + procs_first, n - procs_first);
		for (size_t i = 0; i < c.nops; i++) {
			struct op *op = c.ops[i];
			if (!op->done && op->vt->step)
				op->vt->step(op, pfd + op->pfd_first, op->pfd_n);
			op->pfd_n = 0;
		}
		sweep(&c);
		/* Replies usually fit the socket buffer: send them now rather than after
		 * another poll. */
		if (out_pending(&c))
			write_output(&c);
	}

	if (a->stop || a->poweroff) {
		destroy_all(&c);
		flush_output(&c);
	}
	destroy_all(&c);
	a->conn = NULL;
	free(c.in);
	free(c.out);
	free(c.ops);
	return ret;
}
