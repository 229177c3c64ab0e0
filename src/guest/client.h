/* guest client: sandboxd's end of the guest protocol (see proto.h), on the event loop.
 *
 * A guest_conn wraps the byte stream a driver handed over. Operations are independent
 * channels on it; each gets exactly one on_done call: the agent's RESULT, its ERROR, a
 * host-side timeout, or the connection's loss. The agent is not trusted: frames are
 * bounded, JSON is parsed strictly, credit is enforced, and any protocol violation closes
 * the connection (failing its operations) instead of being guessed around. What the agent
 * did wrong is reported as EREMOTEIO (its silence as ETIMEDOUT, its hanging up as
 * ECONNRESET), never as an errno that would blame the API's caller.
 *
 * Lifetime: a callback may end any operation or free the connection; nothing is freed until
 * the outermost of the client's frames on the stack returns, so no caller is left holding
 * freed memory. */
#pragma once

#include <event2/event.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

struct guest_conn;
struct guest_op;

struct guest_op_cbs {
	/* Bytes arrived: type is GUEST_STDOUT, GUEST_STDERR or GUEST_FILEDATA. The consumer
	 * calls guest_op_consumed() once it no longer holds the bytes; that is what lets the
	 * agent send more. */
	void (*on_data)(struct guest_op *op, uint8_t type, const uint8_t *data, size_t len,
			void *arg);
	/* A read's FILEINFO object (borrowed; its shape unchecked: the consumer judges it, and
	 * whether it came once and first). NULL: the op takes none, and one is a violation. */
	void (*on_info)(struct guest_op *op, json_t *info, void *arg);
	/* An EVENT object (borrowed; it has a string "type", the rest unchecked), len bytes of
	 * the channel's credit that the consumer returns with guest_op_consumed() as for data.
	 * NULL: the op takes none, and one is a violation. */
	void (*on_event)(struct guest_op *op, json_t *event, size_t len, void *arg);
	/* The agent granted credit and queued DATA went out: guest_op_queued() is lower
	 * (optional; for producers that keep the queue short). */
	void (*on_sent)(struct guest_op *op, void *arg);
	/* Terminal. Exactly one of result (the agent's RESULT object, borrowed) and err is
	 * non-NULL; for an agent ERROR, err->errnum is the errno its code names (ESCAPE maps
	 * to EXDEV) and err->msg its message. The op is freed when this returns. */
	void (*on_done)(struct guest_op *op, json_t *result, const struct err *err, void *arg);
};

typedef void (*guest_close_fn)(struct guest_conn *c, const struct err *why, void *arg);

/* Takes ownership of fd. on_close runs once when the connection is lost (not on free). */
struct guest_conn *guest_conn_new(struct event_base *base, int fd, guest_close_fn on_close,
				  void *arg);

/* Changes who hears about the connection's loss. */
void guest_conn_set_close(struct guest_conn *c, guest_close_fn on_close, void *arg);

/* Fails every open operation with ECONNRESET ("sandbox connection closed") and frees. */
void guest_conn_free(struct guest_conn *c);

/* The same, failing them with errnum and msg instead: the host ends them for its own reason
 * (the server shutting down), not the sandbox. */
void guest_conn_close(struct guest_conn *c, int errnum, const char *msg);

/* How long the agent has to end an operation the host gave up on (its timeout fired, or
 * its caller detached): after that its channel is closed on our side. */
#define GUEST_GIVE_UP_GRACE_MS 10000
void guest_conn_set_grace(struct guest_conn *c, uint64_t ms);

/* Liveness: while the connection lives, a ping goes to the agent every interval_ms (counted
 * from the last answer), and a ping left unanswered for timeout_ms ends the connection with
 * ETIMEDOUT as if the agent had hung up: its operations fail and on_close runs. This is what
 * fails a sandbox whose agent went silent while nothing else waits on it. interval_ms 0 stops
 * the pings. */
void guest_conn_set_liveness(struct guest_conn *c, uint64_t interval_ms, uint64_t timeout_ms);

/* Whether the connection is still usable. */
bool guest_conn_alive(struct guest_conn *c);

/* The channel id the next operation gets; setting it (never lower) makes a new connection go
 * on from an earlier one's, so that what an agent restored with a VM still had queued for
 * the old connection is for channels not open on this one. */
uint32_t guest_conn_next_channel(const struct guest_conn *c);
void guest_conn_set_next_channel(struct guest_conn *c, uint32_t next);

/* Number of operations in flight. */
size_t guest_conn_ops(struct guest_conn *c);

/* Protocol violations seen (for metrics), by kind: "frame", "json", "credit", "channel",
 * "event". */
typedef void (*guest_violation_fn)(const char *kind);
void guest_set_violation_hook(guest_violation_fn fn);

/* Opens an operation with `request` (borrowed; must have "op"). Returns NULL with err set
 * when the connection is gone. */
struct guest_op *guest_op_start(struct guest_conn *c, json_t *request,
				const struct guest_op_cbs *cbs, void *arg, struct err *err);

/* Queues DATA (stdin or file contents); sent as the agent grants credit. */
void guest_op_send(struct guest_op *op, const void *data, size_t len);
/* Queues EOF after the data. */
void guest_op_eof(struct guest_op *op);
/* Asks the agent to cancel; on_done still follows. */
void guest_op_cancel(struct guest_op *op);
/* Returns credit for n bytes delivered through on_data. */
void guest_op_consumed(struct guest_op *op, size_t n);
/* Fails the op with ETIMEDOUT if it has not ended in `ms`; the host then gives up on it
 * (see GUEST_GIVE_UP_GRACE_MS). */
void guest_op_set_timeout(struct guest_op *op, uint64_t ms, const char *what);
/* Removes the timeout guest_op_set_timeout() set. */
void guest_op_clear_timeout(struct guest_op *op);
/* The caller is no longer interested: cancels in the agent, no more callbacks; the host
 * gives up on it (see GUEST_GIVE_UP_GRACE_MS). */
void guest_op_detach(struct guest_op *op);
/* For a consumer that finds the agent's data wrong for the operation (a kind it never
 * produces): a protocol violation, which ends the connection (op's on_done runs, with
 * EREMOTEIO). Only from inside on_data or on_info; op must not be used afterwards. */
void guest_op_violation(struct guest_op *op, const char *what);

/* Bytes queued toward the agent and not yet sent. */
size_t guest_op_queued(struct guest_op *op);

/* Checks the protocol version an agent reported in the result of its ping or resume
 * ("protocol"): 0 when it speaks GUEST_PROTO_VERSION or newer, else -EPROTONOSUPPORT with a
 * message saying which it speaks (an agent from before protocol 2 reports none). */
int guest_check_protocol(const json_t *result, struct err *err);

/* Maps an agent error code ("ENOENT", "ESCAPE", ...) to an errno value. */
int guest_code_errno(const char *code);
