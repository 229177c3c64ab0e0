#include "guest/call.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "guest/proto.h"
#include "util/time.h"

/* Longest terminal reply taken: a ping's or a resume's is a few hundred bytes. */
#define CALL_MAX_PAYLOAD (64u << 10)
#define ALIVE_EVERY_MS   100

/* Waits until fd is ready for `events`, at most until the deadline, asking alive() on the
 * way. 0 when ready, else a negative errno with err set. */
static int wait_fd(const struct guest_call *c, short events, uint64_t deadline, struct err *err)
{
	for (;;) {
		int left = time_left_ms(deadline);
		if (left == 0)
			return err_set(err, ETIMEDOUT, "the agent did not answer in %d ms",
				       c->timeout_ms);
		struct pollfd p = { .fd = c->fd, .events = events };
		int r = poll(&p, 1, left > ALIVE_EVERY_MS ? ALIVE_EVERY_MS : left);
		if (r < 0 && errno != EINTR)
			return err_sys(err, errno, "waiting for the agent");
		if (r > 0)
			return 0;
		if (c->alive && !c->alive(c->arg))
			return err_set(err, ECHILD, "the VM stopped before its agent answered");
	}
}

static int send_all(const struct guest_call *c, const uint8_t *p, size_t n, uint64_t deadline,
		    struct err *err)
{
	while (n) {
		ssize_t k = send(c->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (k < 0 && errno == ENOTSOCK)
			k = write(c->fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			int r = wait_fd(c, POLLOUT, deadline, err);
			if (r < 0)
				return r;
			continue;
		}
		if (k <= 0)
			return err_sys(err, k < 0 ? errno : EPIPE, "writing to the agent");
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

int guest_call(const struct guest_call *c, char **ret_result, struct err *err)
{
	uint64_t deadline = time_deadline((uint64_t)c->timeout_ms);
	size_t rlen = strlen(c->request);
	if (rlen > GUEST_MAX_PAYLOAD)
		return err_set(err, E2BIG, "request too large for the sandbox agent");
	uint8_t hdr[GUEST_HDR_LEN];
	guest_frame_header(hdr, GUEST_REQUEST, c->channel, (uint32_t)rlen);
	int r = send_all(c, hdr, sizeof(hdr), deadline, err);
	if (r == 0)
		r = send_all(c, (const uint8_t *)c->request, rlen, deadline, err);
	if (r < 0)
		return r;

	struct guest_decoder dec;
	guest_decoder_init(&dec, CALL_MAX_PAYLOAD);
	size_t cap = GUEST_HDR_LEN + CALL_MAX_PAYLOAD, len = 0;
	uint8_t *buf = malloc(cap);
	if (!buf)
		abort();
	for (;;) {
		struct guest_frame f;
		size_t used = 0;
		enum guest_decode_status st = guest_decode(&dec, buf, len, &f, &used);
		if (st == GUEST_DECODE_FRAME && f.channel == c->channel &&
		    (f.type == GUEST_RESULT || f.type == GUEST_ERROR)) {
			if (f.type == GUEST_ERROR)
				r = err_set(
					err, EREMOTEIO, "the agent answered with an error: %.*s",
					(int)(f.len > 200 ? 200 : f.len), (const char *)f.payload);
			else if (ret_result) {
				*ret_result = malloc(f.len + 1);
				if (!*ret_result)
					abort();
				memcpy(*ret_result, f.payload, f.len);
				(*ret_result)[f.len] = '\0';
			}
			break;
		}
		if (st == GUEST_DECODE_OVERSIZE && f.channel == c->channel) {
			r = err_set(err, EREMOTEIO, "the agent sent an oversize reply");
			break;
		}
		if (used) {
			memmove(buf, buf + used, len - used);
			len -= used;
			continue;
		}
		if ((r = wait_fd(c, POLLIN, deadline, err)) < 0)
			break;
		ssize_t k = read(c->fd, buf + len, cap - len);
		if (k < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK))
			continue;
		if (k <= 0) {
			r = k == 0 ? err_set(err, ECONNRESET, "the agent closed the connection")
				   : err_sys(err, errno, "reading from the agent");
			break;
		}
		len += (size_t)k;
	}
	free(buf);
	return r;
}
