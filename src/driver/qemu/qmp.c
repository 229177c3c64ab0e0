#include "driver/qemu/qmp.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/time.h"

struct qmp {
	int fd;
	uint64_t next_id;
	char *buf; /* received bytes not yet consumed */
	size_t len;
	size_t cap;
};

enum qmp_kind qmp_classify(const json_t *msg)
{
	if (!json_is_object(msg))
		return QMP_INVALID;
	if (json_object_get(msg, "return"))
		return QMP_RETURN;
	const json_t *e = json_object_get(msg, "error");
	if (e)
		return json_is_object(e) ? QMP_ERROR : QMP_INVALID;
	if (json_is_string(json_object_get(msg, "event")))
		return QMP_EVENT;
	if (json_is_object(json_object_get(msg, "QMP")))
		return QMP_GREETING;
	return QMP_INVALID;
}

int qmp_reply_error(const json_t *msg, const char *command, struct err *err)
{
	const json_t *e = json_object_get(msg, "error");
	const char *cls = json_string_value(json_object_get(e, "class"));
	const char *desc = json_string_value(json_object_get(e, "desc"));
	int errnum = EIO;
	if (cls && (strcmp(cls, "CommandNotFound") == 0 || strcmp(cls, "DeviceNotFound") == 0))
		errnum = ENOENT;
	return err_set(err, errnum, "qmp `%s`: %s", command,
		       desc  ? desc
		       : cls ? cls
			     : "unknown error");
}

/* Reads what is available into the buffer, waiting until the deadline for something. */
static int fill(struct qmp *q, uint64_t deadline, const char *what, struct err *err)
{
	if (q->len == QMP_MAX_MESSAGE)
		return err_set(err, EPROTO, "qmp: a message from QEMU exceeds %u bytes",
			       QMP_MAX_MESSAGE);
	if (q->cap - q->len < 4096 && q->cap < QMP_MAX_MESSAGE) {
		size_t cap = q->cap ? q->cap * 2 : 8192;
		q->cap = cap > QMP_MAX_MESSAGE ? QMP_MAX_MESSAGE : cap;
		q->buf = xrealloc(q->buf, q->cap);
	}
	for (;;) {
		ssize_t n = read(q->fd, q->buf + q->len, q->cap - q->len);
		if (n > 0) {
			q->len += (size_t)n;
			return 0;
		}
		if (n == 0)
			return err_set(err, ECONNRESET,
				       "qmp: QEMU closed its control socket while waiting for %s",
				       what);
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return err_sys(err, errno, "qmp: reading %s", what);
		int ms = time_left_ms(deadline);
		if (ms == 0)
			return err_set(err, ETIMEDOUT, "qmp: QEMU did not answer %s in time", what);
		struct pollfd p = { .fd = q->fd, .events = POLLIN };
		if (poll(&p, 1, ms) < 0 && errno != EINTR)
			return err_sys(err, errno, "qmp: poll");
	}
}

/* The next message (one line of JSON), or a failure at the deadline. Blank lines are
 * skipped; a line that is not a JSON object fails. */
static int read_message(struct qmp *q, uint64_t deadline, const char *what, json_t **ret,
			struct err *err)
{
	for (;;) {
		char *nl = q->len ? memchr(q->buf, '\n', q->len) : NULL;
		if (!nl) {
			int r = fill(q, deadline, what, err);
			if (r < 0)
				return r;
			continue;
		}
		size_t line = (size_t)(nl - q->buf);
		json_error_t jerr;
		json_auto_t *msg = NULL;
		size_t skip = 0;
		while (skip < line &&
		       (q->buf[skip] == ' ' || q->buf[skip] == '\t' || q->buf[skip] == '\r'))
			skip++;
		if (skip < line)
			msg = json_loadb(q->buf, line, JSON_REJECT_DUPLICATES, &jerr);
		bool blank = skip >= line;
		memmove(q->buf, nl + 1, q->len - line - 1);
		q->len -= line + 1;
		if (blank)
			continue;
		if (!msg || qmp_classify(msg) == QMP_INVALID)
			return err_set(err, EPROTO,
				       "qmp: QEMU sent something that is not a QMP "
				       "message while we waited for %s",
				       what);
		*ret = TAKE_PTR(msg);
		return 0;
	}
}

/* Writes p[0..n), with `fd` (unless -1) passed along the first bytes (SCM_RIGHTS): QEMU takes
 * a descriptor that arrives with a command's bytes for that command (getfd). */
static int write_all(struct qmp *q, const char *p, size_t n, int fd, uint64_t deadline,
		     struct err *err)
{
	while (n) {
		struct iovec iov = { .iov_base = (void *)p, .iov_len = n };
		union {
			char buf[CMSG_SPACE(sizeof(int))];
			struct cmsghdr align;
		} ctl;
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
		if (fd >= 0) {
			memset(&ctl, 0, sizeof(ctl));
			mh.msg_control = ctl.buf;
			mh.msg_controllen = sizeof(ctl.buf);
			struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(int));
			memcpy(CMSG_DATA(c), &fd, sizeof(int));
		}
		ssize_t k = sendmsg(q->fd, &mh, MSG_NOSIGNAL);
		if (k > 0) {
			p += k;
			n -= (size_t)k;
			fd = -1; /* sent with those bytes */
			continue;
		}
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0 && errno != EAGAIN)
			return err_sys(err, errno, "qmp: writing to QEMU");
		int ms = time_left_ms(deadline);
		if (ms == 0)
			return err_set(err, ETIMEDOUT,
				       "qmp: QEMU does not read its control socket");
		struct pollfd pfd = { .fd = q->fd, .events = POLLOUT };
		if (poll(&pfd, 1, ms) < 0 && errno != EINTR)
			return err_sys(err, errno, "qmp: poll");
	}
	return 0;
}

static int execute_until(struct qmp *q, const char *command, json_t *args, int fd,
			 uint64_t deadline, json_t **ret, struct err *err)
{
	json_int_t id = (json_int_t)++q->next_id;
	json_auto_t *req = json_pack("{s:s, s:I}", "execute", command, "id", id);
	if (args)
		json_object_set(req, "arguments", args);
	_cleanup_free_ char *text = json_dumps(req, JSON_COMPACT);
	if (!text)
		return err_set(err, EINVAL, "qmp `%s`: arguments cannot be encoded", command);
	size_t n = strlen(text);
	text[n] = '\n'; /* replaces the NUL: the buffer is freed, never read as a string */
	int r = write_all(q, text, n + 1, fd, deadline, err);
	if (r < 0)
		return r;

	char what[96];
	snprintf(what, sizeof(what), "`%s`", command);
	for (;;) {
		json_auto_t *msg = NULL;
		if ((r = read_message(q, deadline, what, &msg, err)) < 0)
			return r;
		enum qmp_kind kind = qmp_classify(msg);
		json_t *rid = json_object_get(msg, "id");
		if ((kind != QMP_RETURN && kind != QMP_ERROR) || !json_is_integer(rid) ||
		    json_integer_value(rid) != id)
			continue; /* an event, or the late reply to an earlier command */
		if (kind == QMP_ERROR)
			return qmp_reply_error(msg, command, err);
		if (ret)
			*ret = json_incref(json_object_get(msg, "return"));
		return 0;
	}
}

int qmp_execute(struct qmp *q, const char *command, json_t *args, int timeout_ms, json_t **ret,
		struct err *err)
{
	return execute_until(q, command, args, -1, time_mono_ms() + timeout_ms, ret, err);
}

int qmp_pass_fd(struct qmp *q, int fd, const char *name, int timeout_ms, struct err *err)
{
	json_auto_t *args = json_pack("{s:s}", "fdname", name);
	return execute_until(q, "getfd", args, fd, time_mono_ms() + timeout_ms, NULL, err);
}

static void qmp_closep(struct qmp **q)
{
	qmp_close(*q);
}

int qmp_open(int fd, int timeout_ms, struct qmp **ret, struct err *err)
{
	uint64_t deadline = time_deadline(timeout_ms);
	_cleanup_(qmp_closep) struct qmp *q = xcalloc(1, sizeof(*q));
	q->fd = fd;
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return err_sys(err, errno, "qmp: socket");
	json_auto_t *greeting = NULL;
	int r = read_message(q, deadline, "the greeting", &greeting, err);
	if (r < 0)
		return r;
	if (qmp_classify(greeting) != QMP_GREETING)
		return err_set(err, EPROTO, "qmp: QEMU's control socket did not greet with QMP");
	if ((r = execute_until(q, "qmp_capabilities", NULL, -1, deadline, NULL, err)) < 0)
		return r;
	*ret = TAKE_PTR(q);
	return 0;
}

void qmp_close(struct qmp *q)
{
	if (!q)
		return;
	if (q->fd >= 0)
		close(q->fd);
	free(q->buf);
	free(q);
}
