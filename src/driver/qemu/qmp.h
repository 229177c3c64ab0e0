/* qmp: a small blocking client of QEMU's machine protocol (QMP) on a connected stream socket.
 *
 * QMP speaks JSON objects, one per line: a greeting on connect, then one reply per command
 * ({"return": ...} or {"error": {"class", "desc"}}), with asynchronous events ({"event": ...})
 * interleaved anywhere. Every command carries an id of ours; replies with another id (left
 * over from a command that timed out) and events are skipped.
 *
 * Blocking with deadlines: meant for the worker threads that run driver code. A QEMU process
 * runs guest-influenced code, so its messages are bounded in size and never trusted further
 * than their JSON shape. Library code: nothing here logs. */
#pragma once

#include <jansson.h>
#include <stddef.h>

#include "util/err.h"

/* Longest QMP message accepted; QEMU's replies to the commands we send are far smaller. */
#define QMP_MAX_MESSAGE (256u << 10)

struct qmp;

/* Takes the connected socket fd (owned from now on, even on failure), reads the greeting and
 * leaves capability negotiation mode, all within timeout_ms. */
int qmp_open(int fd, int timeout_ms, struct qmp **ret, struct err *err);

/* Runs `command` with `args` (borrowed, NULL for none) and waits at most timeout_ms for its
 * reply. On success *ret (when not NULL) gets the "return" value (owned by the caller). A QMP
 * error reply fails with EIO (ENOENT for CommandNotFound/DeviceNotFound) and its description
 * in err. */
int qmp_execute(struct qmp *q, const char *command, json_t *args, int timeout_ms, json_t **ret,
		struct err *err);

/* Hands QEMU a copy of descriptor fd under `name` (QMP getfd, the descriptor passed with
 * SCM_RIGHTS), for commands that take "fd:<name>". fd stays the caller's. */
int qmp_pass_fd(struct qmp *q, int fd, const char *name, int timeout_ms, struct err *err);

/* Closes the socket and frees q. Accepts NULL. */
void qmp_close(struct qmp *q);

/* --- exposed for tests -------------------------------------------------------------------- */

enum qmp_kind {
	QMP_INVALID = 0, /* not a QMP message */
	QMP_GREETING,    /* {"QMP": {...}} */
	QMP_RETURN,      /* {"return": ..., "id": ...} */
	QMP_ERROR,       /* {"error": {"class": ..., "desc": ...}, "id": ...} */
	QMP_EVENT,       /* {"event": "...", ...} */
};

/* What kind of message msg is. */
enum qmp_kind qmp_classify(const json_t *msg);

/* The errno for a QMP error reply, with "qmp `command`: <desc>" in err. */
int qmp_reply_error(const json_t *msg, const char *command, struct err *err);
