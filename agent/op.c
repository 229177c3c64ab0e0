/* op: what every operation shares (registration, terminal frames, flow control), and the
 * small operations that answer at once: ping, resume, shutdown. */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "init.h"
#include "util/cleanup.h"

/* <linux/random.h> is not part of every libc: _IOW('R', 0x03, int[2]). */
#define AGENT_RNDADDENTROPY 0x40085203
#define AGENT_RNDRESEEDCRNG 0x5207

const char *agent_code(int errnum)
{
	if (errnum == WS_ESCAPE)
		return "ESCAPE";
	return err_name(errnum);
}

void op_register(struct conn *c, struct op *op, const struct op_vt *vt, uint32_t ch)
{
	op->vt = vt;
	op->conn = c;
	op->ch = ch;
	op->done = false;
	op->child = 0;
	op->send_credit = GUEST_WINDOW_INITIAL;
	op->recv_left = GUEST_WINDOW_INITIAL;
	op->recv_unacked = 0;
	op->pfd_first = 0;
	op->pfd_n = 0;
	c->ops = xrealloc(c->ops, (c->nops + 1) * sizeof(*c->ops));
	c->ops[c->nops++] = op;
	c->active++;
}

static void op_end(struct op *op)
{
	op->done = true;
	op->conn->active--;
}

void op_result(struct op *op, const struct jw *w)
{
	if (op->done)
		return;
	conn_frame(op->conn, GUEST_RESULT, op->ch, w->buf, w->len);
	op_end(op);
}

void op_error(struct op *op, const struct err *e)
{
	if (op->done)
		return;
	conn_error(op->conn, op->ch, e);
	op_end(op);
}

void op_consumed(struct op *op, size_t n)
{
	op->recv_unacked += n;
	if (op->done || op->recv_unacked < AGENT_WINDOW_GRANT)
		return;
	uint32_t grant = op->recv_unacked > UINT32_MAX ? UINT32_MAX : (uint32_t)op->recv_unacked;
	uint8_t p[4] = { (uint8_t)(grant >> 24), (uint8_t)(grant >> 16), (uint8_t)(grant >> 8),
			 (uint8_t)grant };
	conn_frame(op->conn, GUEST_WINDOW, op->ch, p, sizeof(p));
	op->recv_unacked -= grant;
	op->recv_left += grant;
}

size_t op_send_room(const struct op *op)
{
	if (!conn_may_send_data(op->conn))
		return 0;
	return op->send_credit < GUEST_DATA_CHUNK ? (size_t)op->send_credit : GUEST_DATA_CHUNK;
}

static void send_result(struct conn *c, uint32_t ch, const struct jw *w)
{
	conn_frame(c, GUEST_RESULT, ch, w->buf, w->len);
}

void op_ping(struct conn *c, uint32_t ch, const struct req *r)
{
	struct jw w;
	jw_init(&w);
	jw_obj_open(&w);
	jw_key(&w, "pong");
	jw_bool(&w, true);
	jw_key(&w, "protocol");
	jw_int(&w, GUEST_PROTO_VERSION);
	jw_key(&w, "agent");
	jw_str(&w, AGENT_NAME);
	jw_obj_close(&w);
	send_result(c, ch, &w);
	jw_free(&w);
}

/* Mixes the bytes into the kernel pool. Crediting them needs CAP_SYS_ADMIN and is done only
 * as the VM's init: in a jail the kernel (and its pool) is the host's. */
static bool add_entropy(struct agent *a, const uint8_t *p, size_t n)
{
	_cleanup_close_ int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	if (a->init) {
		struct {
			int entropy_count;
			int buf_size;
			uint8_t buf[REQ_MAX_ENTROPY];
		} info;
		info.entropy_count = (int)n * 8;
		info.buf_size = (int)n;
		memcpy(info.buf, p, n);
		if (ioctl(fd, AGENT_RNDADDENTROPY, &info) == 0) {
			/* Clones of one snapshot share the generator's state: without a reseed
			 * they would keep drawing the same bytes until the kernel's own next one.
			 */
			ioctl(fd, AGENT_RNDRESEEDCRNG, 0);
			return true;
		}
	}
	while (n) {
		ssize_t k = write(fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		p += k;
		n -= (size_t)k;
	}
	return false;
}

void op_resume(struct conn *c, uint32_t ch, const struct req *r)
{
	const struct req_resume *x = &r->u.resume;
	struct agent *a = c->a;
	bool clock_set = false, host_set = false, credited = false, net_set = false;

	/* Storage first: the network's resolver goes into the root it makes. Without it the
	 * sandbox is not what the host made, so its failure is the resume's. */
	if (x->has_storage) {
		struct err e;
		if (!a->init) {
			err_set(&e, ENOTSUP, "storage is mounted only by a VM's init");
			conn_error(c, ch, &e);
			return;
		}
		if (init_storage(a, x, &e) < 0) {
			err_wrap(&e, "storage");
			conn_error(c, ch, &e);
			return;
		}
	}

	/* Only a VM has a clock of its own; in a jail it would be the host's. */
	if (x->has_time && a->init) {
		struct timespec ts = { .tv_sec = (time_t)x->sec, .tv_nsec = (long)x->nsec };
		clock_set = clock_settime(CLOCK_REALTIME, &ts) == 0;
	}
	if (x->entropy_len)
		credited = add_entropy(a, x->entropy, x->entropy_len);
	if (x->hostname && (a->init || a->pid1))
		host_set = sethostname(x->hostname, strlen(x->hostname)) == 0;
	/* A VM configures its own interface (a clone of a snapshot has its own address); a
	 * jail's namespace was configured by the host. */
	if (x->has_network && a->init) {
		struct err e;
		net_set = init_network(x->net_addr, x->net_prefix, x->net_gateway, x->net_dns,
				       &e) == 0;
		if (!net_set)
			agent_log("network: %s", e.msg);
	}
	if (x->session_id)
		agent_log("resumed as session %s", x->session_id);
	/* Made from a save of a running VM: what its connection had open belongs to the host it
	 * was saved by (the host refuses a save with operations in flight, so this is what a
	 * misbehaving or racing host left), and nothing of it may reach the new one. */
	size_t dropped = 0;
	if (x->restored_from) {
		dropped = c->active;
		conn_drop_ops(c);
		agent_log("restored from a %s of session %s: %zu operation(s) of the previous "
			  "connection ended, %zu background process(es) running",
			  x->restored_from, x->restored_session ? x->restored_session : "?",
			  dropped, procs_running(a));
	}

	struct jw w;
	jw_init(&w);
	jw_obj_open(&w);
	jw_key(&w, "protocol");
	jw_int(&w, GUEST_PROTO_VERSION);
	jw_key(&w, "clockSet");
	jw_bool(&w, clock_set);
	jw_key(&w, "entropyBytes");
	jw_int(&w, (int64_t)x->entropy_len);
	jw_key(&w, "entropyCredited");
	jw_bool(&w, credited);
	jw_key(&w, "hostnameSet");
	jw_bool(&w, host_set);
	jw_key(&w, "networkConfigured");
	jw_bool(&w, net_set);
	jw_key(&w, "storageMounted");
	jw_bool(&w, x->has_storage);
	if (x->session_id) {
		jw_key(&w, "sessionId");
		jw_str(&w, x->session_id);
	}
	if (x->restored_from) {
		jw_key(&w, "restored");
		jw_bool(&w, true);
		jw_key(&w, "processes");
		jw_int(&w, (int64_t)procs_running(a));
		jw_key(&w, "droppedOperations");
		jw_int(&w, (int64_t)dropped);
	}
	jw_obj_close(&w);
	send_result(c, ch, &w);
	jw_free(&w);
}

void op_shutdown(struct conn *c, uint32_t ch, const struct req *r)
{
	if (!c->a->init) {
		struct err e;
		err_set(&e, ENOTSUP, "shutdown is only available when the agent is the VM's init");
		conn_error(c, ch, &e);
		return;
	}
	struct jw w;
	jw_init(&w);
	jw_obj_open(&w);
	jw_obj_close(&w);
	send_result(c, ch, &w);
	jw_free(&w);
	c->a->poweroff = true;
}
