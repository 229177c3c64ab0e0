/* ops: what a client does with a session (run a command, write, read and list files, create,
 * destroy), independent of the transport that asked (REST, MCP).
 *
 * A session is named by its owner (the caller's API key id, "" without auth) and its id.
 * execute and write_file create the session on first use, as the REST API always has;
 * read_file and list_files need it to exist. Another owner's session does not exist for the
 * caller (ENOENT), unless the target says the caller is an admin (any_owner): then an id
 * means the caller's own session first, otherwise the one other owner's session by that id
 * (EEXIST when several owners have one: the id is ambiguous), and only without either is a
 * session created, as the caller's. docs/auth.md states the rule for clients.
 *
 * Asynchronous operations return a handle and report through callbacks on the loop thread,
 * never before the starting call has returned: exactly one terminal callback per operation,
 * unless the caller detaches first, after which there is none. Errors carry an errno that
 * http_status_for_errno() turns into a status (ENOENT 404, EINVAL 400, EEXIST 409, ...) and a
 * message meant for the caller. */
#pragma once

#include <event2/event.h>
#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "session/session.h"
#include "util/err.h"

/* The session an operation acts on. The strings are copied. */
struct ops_target {
	const char *owner;         /* the caller's key id, "" without auth */
	const char *session_id;    /* checked with session_id_valid() */
	const char *template_name; /* for a session created on the way; NULL: the default */
	bool any_owner;            /* an admin: other owners' sessions are reachable (above) */
	/* The transport holds the caller's quota for this operation already (REST takes it at
	 * the request's head, before the body): ops does not take it again. Otherwise execute
	 * takes a unit of QUOTA_COMMANDS and a file operation one of QUOTA_FILE_OPS for its
	 * life, and refuses with EAGAIN when the caller's quota or the server's cap is reached. */
	bool admitted;
	/* Paths (and a command's cwd) are the sandbox's own, any it has, resolved with the
	 * command user's permissions; otherwise they are confined to the workspace, relative to
	 * it (REST and MCP, as the reference has them). E2B's filesystem view. */
	bool any_path;
	/* connect: a visitor without the session's key or token (a public port's). Visitors
	 * like it have a share of SANDBOX_PREVIEW_MAX_CONNECTIONS of their own, below the cap,
	 * so that however many hold connections open the key's and the token's holders still
	 * find room. */
	bool anonymous;
};

/* Must be called before any other function (the loop and the limits to apply); calling it
 * again with the same arguments changes nothing, so every transport may. */
void ops_init(struct event_base *base, const struct config *cfg);

/* Checks a command's or a session's environment: NULL, JSON null or an object of strings
 * with valid names; EINVAL naming the bad entry otherwise. */
int ops_check_env(json_t *env, struct err *err);

/* --- execute ------------------------------------------------------------------------ */

enum ops_stream { OPS_STDOUT = 0, OPS_STDERR = 1 };

struct ops_exec_req {
	const char *command; /* required */
	/* Arguments after the command (borrowed array of strings), or NULL: then a command with
	 * shell syntax in it runs as `/bin/sh -c command`, a plain word as itself. */
	json_t *args;
	json_t *env;     /* borrowed object of strings (over the session's own), or NULL */
	const char *cwd; /* relative to the workspace, or NULL */
	/* Milliseconds; 0 means none. Unless has_timeout, the server's default applies. */
	uint64_t timeout_ms;
	bool has_timeout;
	const void *stdin_data; /* copied; sent, then end of input, when has_stdin */
	size_t stdin_len;
	bool has_stdin;
	/* Who runs it: NULL or "user", the command user; "root", the sandbox's own root (a
	 * jail's user-namespace root, never the host's). Anything else is EINVAL. */
	const char *user;
};

struct ops_exec_result {
	const char *exec_id;
	const char *session_id;
	bool has_exit_code;
	int exit_code;
	const char *signal; /* the signal that ended the command ("SIGKILL"), or NULL */
	double duration_ms;
	bool timed_out;  /* killed by its timeout */
	bool cancelled;  /* killed because someone cancelled it */
	bool oom_killed; /* a process of the sandbox was killed for want of memory meanwhile */
};

struct ops_exec;

struct ops_exec_cbs {
	/* The command started (optional); ops_exec_id() names it from now on. */
	void (*on_start)(struct ops_exec *x, void *arg);
	/* Output in arrival order per stream: valid UTF-8 (invalid bytes become U+FFFD), never
	 * cut inside a character. Not NUL-terminated. */
	void (*on_output)(struct ops_exec *x, enum ops_stream stream, const char *text, size_t len,
			  void *arg);
	/* Terminal: the command ended (r) or could not run (err: ENOENT for a missing command
	 * or directory, ECANCELED when cancelled before it started, the session's failure...).
	 * The handle is freed when this returns. */
	void (*on_done)(struct ops_exec *x, const struct ops_exec_result *r, const struct err *err,
			void *arg);
};

/* Starts a command, creating the session when needed. Returns NULL with err set (EINVAL,
 * and nothing else happens) when the request is invalid. */
struct ops_exec *ops_execute(const struct ops_target *t, const struct ops_exec_req *req,
			     const struct ops_exec_cbs *cbs, void *arg, struct err *err);

/* Asks the command to stop (SIGTERM, then SIGKILL); on_done follows, with cancelled set. */
void ops_exec_cancel(struct ops_exec *x);
/* The caller is gone: no more callbacks; a running command is cancelled. */
void ops_exec_detach(struct ops_exec *x);
/* Back-pressure: while paused, output keeps arriving only until the agent's window (one
 * GUEST_WINDOW_INITIAL) is used up; resume lets it send again. */
void ops_exec_pause(struct ops_exec *x);
void ops_exec_resume(struct ops_exec *x);
/* The command's id ("exec_..."), "" until it started. */
const char *ops_exec_id(const struct ops_exec *x);
/* The session the command runs in (NULL until it started). */
struct session *ops_exec_session(const struct ops_exec *x);

/* --- watch -------------------------------------------------------------------------- */

/* Watches a directory of an existing session for changes: files and directories created,
 * written, removed, renamed or whose attributes changed, below it when recursive (directories
 * that appear later included). The caller holds a unit of QUOTA_WATCHES for the watch's life
 * (unless t->admitted). */
struct ops_watch_req {
	const char *path; /* required: a directory inside the workspace */
	bool recursive;
	json_t *events;      /* borrowed array of kinds to report ("create", ...), or NULL: all */
	uint64_t timeout_ms; /* 0: until cancelled; then it ends on its own, with timed_out */
};

struct ops_watch_result {
	uint64_t events;    /* events delivered */
	uint64_t overflows; /* times events were lost (each reported by one overflow event) */
	bool timed_out;     /* it ended because timeout_ms passed */
	bool gone;          /* it ended because the watched directory was removed or moved */
};

struct ops_watch;

struct ops_watch_cbs {
	/* The watch is in place (optional): every change from now on is reported. `watches` is
	 * how many directories it covers. Before it, the request may still fail (ENOENT,
	 * ENOTDIR, EXDEV for a path outside the workspace, ENOSPC past the watch limit...). */
	void (*on_ready)(struct ops_watch *w, uint64_t watches, void *arg);
	/* One event, checked (guest/event.h): {type, path, dir[, from]} or {type: "overflow"}
	 * (borrowed). */
	void (*on_event)(struct ops_watch *w, json_t *event, void *arg);
	/* Terminal: cancelled, timed out or gone (r), or failed (err). Freed when it returns. */
	void (*on_done)(struct ops_watch *w, const struct ops_watch_result *r,
			const struct err *err, void *arg);
};

struct ops_watch *ops_watch(const struct ops_target *t, const struct ops_watch_req *req,
			    const struct ops_watch_cbs *cbs, void *arg, struct err *err);
/* Ends the watch: on_done follows with the counts. */
void ops_watch_cancel(struct ops_watch *w);
/* The caller is gone: no more callbacks; the watch ends in the agent. */
void ops_watch_detach(struct ops_watch *w);
/* Back-pressure, as for a command's output: while paused the agent may send at most one
 * window of events; beyond that it queues a bounded number, then reports an overflow. */
void ops_watch_pause(struct ops_watch *w);
void ops_watch_resume(struct ops_watch *w);

/* --- files and sessions ------------------------------------------------------------- */

struct ops_result {
	const char *session_id;
	struct session *session; /* create: the new session */
	const char *path;        /* as requested ("." for an empty list path) */
	uint64_t size;           /* write: bytes written; read: bytes read */
	const uint8_t *data;     /* read: the contents, valid during the callback */
	json_t *entries;         /* list: the agent's entries (borrowed; untrusted shapes) */
	/* stat, mkdir, remove, move: the agent's result object (borrowed; untrusted shapes):
	 * {path, type, size, mode, mtime} for stat, {path} otherwise ("from" too for move). */
	json_t *info;
	bool truncated; /* list: more entries than one reply holds */
};

struct ops_call;

/* Terminal: exactly one of r and err. The handle is freed when this returns. */
typedef void (*ops_done_fn)(struct ops_call *c, const struct ops_result *r, const struct err *err,
			    void *arg);

/* Writes `len` bytes to `path` (replacing the file atomically), creating the session when
 * needed. `data` is taken over (freed by ops, even on failure). mode < 0: the default. */
struct ops_call *ops_write_file(const struct ops_target *t, const char *path, uint8_t *data,
				size_t len, int mode, ops_done_fn done, void *arg, struct err *err);
/* Reads a file of at most max_bytes (0: the server's SANDBOX_MAX_READ_BYTES); EFBIG beyond. */
struct ops_call *ops_read_file(const struct ops_target *t, const char *path, size_t max_bytes,
			       ops_done_fn done, void *arg, struct err *err);
/* A read streamed to its caller: on_head once, with the file's size and (when check_text
 * was asked) whether it is text JSON can carry as it is (valid UTF-8 without NUL); then
 * on_data with the contents in order, exactly `size` bytes in all, and the text it promised
 * when it said so; then done (r->size, no r->data) or err. An err after on_head means the
 * contents delivered are not the file's (ESTALE: it changed while being read; EREMOTEIO: its
 * agent broke the protocol; ETIMEDOUT...). Every byte must be handed back with
 * ops_call_consumed() once the caller no longer holds it: the agent sends at most one
 * GUEST_WINDOW_INITIAL ahead of that, which is what bounds a read's memory. The size limit
 * is the server's SANDBOX_MAX_READ_BYTES (EFBIG beyond). */
struct ops_read_cbs {
	void (*on_head)(struct ops_call *c, uint64_t size, bool text, void *arg);
	void (*on_data)(struct ops_call *c, const uint8_t *data, size_t len, void *arg);
};
struct ops_call *ops_read_stream(const struct ops_target *t, const char *path, bool check_text,
				 const struct ops_read_cbs *cbs, ops_done_fn done, void *arg,
				 struct err *err);
void ops_call_consumed(struct ops_call *c, size_t n);
/* A read's reply as every transport gives it: {path, content, encoding, size}. The content is
 * the text itself ("utf8"), or "base64" when asked or when the bytes are not text that JSON
 * can carry (invalid UTF-8, a NUL). */
json_t *ops_read_json(const struct ops_result *r, bool want_base64);
/* Metadata, answered at once by the agent; each is a file operation for the quotas.
 * stat: a path's type, size, mode and time, of the path itself (a symlink is not followed).
 * mkdir: a directory (with its missing parents when asked); creates the session on first use,
 * as a write does. remove: a file, a symlink, an empty directory, or a tree when recursive
 * (symlinks inside are removed, never followed). move: renames `from` to `to` inside the
 * workspace, creating the destination's missing directories; without overwrite an existing
 * `to` is EEXIST. All but mkdir need the session to exist. */
struct ops_call *ops_stat_path(const struct ops_target *t, const char *path, ops_done_fn done,
			       void *arg, struct err *err);
/* A stat's reply as every transport gives it, {path, type, size, mode, mtime}, from the
 * agent's answer checked (NULL when it is not of that shape: the agent broke the protocol). */
json_t *ops_stat_json(const struct ops_result *r);
struct ops_call *ops_make_dir(const struct ops_target *t, const char *path, bool parents,
			      ops_done_fn done, void *arg, struct err *err);
struct ops_call *ops_remove_path(const struct ops_target *t, const char *path, bool recursive,
				 ops_done_fn done, void *arg, struct err *err);
struct ops_call *ops_move_path(const struct ops_target *t, const char *from, const char *to,
			       bool overwrite, ops_done_fn done, void *arg, struct err *err);
/* Lists a directory (NULL or "": the workspace), recursively when asked. */
struct ops_call *ops_list_files(const struct ops_target *t, const char *path, bool recursive,
				ops_done_fn done, void *arg, struct err *err);
struct ops_session_opts {
	unsigned idle_timeout_s; /* 0: the server's */
	/* What its idle timeout (and the E2B API's deadline) do: destroy it, or pause it. */
	enum session_on_timeout on_timeout;
	bool auto_resume; /* session_create_opts.auto_resume */
	json_t *env;      /* borrowed object of strings (copied), or NULL */
	/* Copied; NULL: the server's limits. It may only tighten them (EINVAL otherwise). */
	const struct session_resources *resources;
	/* Borrowed (copied); NULL: the server's egress policy. An object {dns, dest, bandwidth}
	 * that may only tighten the server's policy (EINVAL otherwise, see networking.md). */
	json_t *egress;
	/* Borrowed, NULL: none. [{"name", "path", "readOnly"}] of the caller's volumes to mount
	 * (volume_mounts_parse: EINVAL when malformed; at creation ENOENT for an unknown volume,
	 * EBUSY for a second writer). */
	json_t *volumes;
	/* The caller made t->session_id up at random (never a client's choice), so that it may
	 * serve as the session's preview name as it is (session_create_opts.id_generated). */
	bool id_generated;
	/* Borrowed (copied), NULL: none. The caller's snapshot to make it from (snapshot.h):
	 * ENOENT for an unknown one, EINVAL with a template, resources or volumes of its own. */
	const char *snapshot;
};

/* --- the sandbox's own ports ------------------------------------------------------------
 *
 * A connection to a TCP port on the sandbox's loopback, made by its agent (so it works the
 * same for a jail and a VM, with networking on or off, and reaches nothing but that
 * sandbox). Only an existing, ready session (ENOENT, EBUSY); a unit of QUOTA_STREAMS of the
 * session's owner and one of its SANDBOX_PREVIEW_MAX_CONNECTIONS for its life (EAGAIN).
 * The caller sends while ops_connect_queued() is below OPS_UPLOAD_HIGH and waits for on_ready
 * otherwise; done follows when the server closes (r->info {bytesIn, bytesOut}), or err:
 * ECONNREFUSED when nothing listens on the port, ETIMEDOUT when it does not answer. */
struct ops_connect_cbs {
	/* The connection is made (before any on_data). */
	void (*on_connected)(struct ops_call *c, void *arg);
	/* Bytes from the server, in order; returned with ops_call_consumed() once the caller's
	 * client took them (the agent sends at most a window ahead). */
	void (*on_data)(struct ops_call *c, const uint8_t *data, size_t len, void *arg);
	/* More may be sent now. */
	void (*on_ready)(struct ops_call *c, void *arg);
};
/* How many of a session's SANDBOX_PREVIEW_MAX_CONNECTIONS visitors without key or token may
 * hold at once (ops_target.anonymous): all but a quarter of them (at least one, from a cap of
 * two), which stays for the key's and the token's holders. */
unsigned ops_anonymous_connections(const struct config *cfg);
struct ops_call *ops_connect(const struct ops_target *t, unsigned port,
			     const struct ops_connect_cbs *cbs, ops_done_fn done, void *arg,
			     struct err *err);
void ops_connect_send(struct ops_call *c, const void *data, size_t len);
size_t ops_connect_queued(struct ops_call *c);
/* Half-closes the connection toward the server once what was sent is out. */
void ops_connect_eof(struct ops_call *c);
/* The TCP ports listening in the session's sandbox: r->entries [{port, address}], checked,
 * sorted by port. */
struct ops_call *ops_list_ports(const struct ops_target *t, ops_done_fn done, void *arg,
				struct err *err);

/* Pauses or resumes the caller's session (session_pause: EBUSY in the wrong state or with
 * operations in flight, ENOTSUP when its driver cannot); cb runs once, never before this
 * returns, with the session (NULL on failure) and err. */
typedef void (*ops_pause_fn)(struct session *s, const struct err *err, void *arg);
int ops_pause_session(const struct ops_target *t, bool pause, ops_pause_fn cb, void *arg,
		      struct err *err);
/* ops_pause_session with a mode for a pause (session_pause_mode: frozen, or hibernated); a
 * resume resumes either. ops_pause_session is this with SESSION_PAUSE_FREEZE. */
int ops_pause_session_mode(const struct ops_target *t, bool pause, enum session_pause_mode mode,
			   ops_pause_fn cb, void *arg, struct err *err);

/* Forks the caller's running session into count new ones (session_fork: 1 to OPS_FORK_MAX,
 * EINVAL otherwise); cb runs once, never before this returns, with the forks' session objects
 * (a JSON array, borrowed) or err. */
#define OPS_FORK_MAX 16
typedef void (*ops_fork_fn)(json_t *forks, const struct err *err, void *arg);
int ops_fork_session(const struct ops_target *t, unsigned count, ops_fork_fn cb, void *arg,
		     struct err *err);

/* Snapshots the caller's running session as the caller's snapshot `name`, kept ttl_s seconds
 * (0: the server's SANDBOX_SNAPSHOT_TTL): snapshot_take's errors; cb runs once, never before
 * this returns, with the snapshot's object (borrowed) or err. */
typedef void (*ops_snapshot_fn)(json_t *snapshot, const struct err *err, void *arg);
int ops_snapshot_session(const struct ops_target *t, const char *name, uint64_t ttl_s,
			 ops_snapshot_fn cb, void *arg, struct err *err);

/* Creates session t->session_id (NULL: a fresh id) of the caller (never another owner's,
 * whatever any_owner says) with these options (template_name is taken from t; o may be
 * NULL); EEXIST when the caller already has one by that id. */
struct ops_call *ops_create_session(const struct ops_target *t, const struct ops_session_opts *o,
				    ops_done_fn done, void *arg, struct err *err);
/* No more callbacks. A file operation already sent to the agent is cancelled there; a
 * session being created goes on being created. */
void ops_call_detach(struct ops_call *c);

/* Destroys a session at once, whatever its state (ENOENT when the caller has none by that
 * id). On success, done(arg) (when not NULL) follows once the session is gone: its sandbox
 * destroyed and its volumes free for another session (possibly before this returns). */
int ops_destroy_session(const struct ops_target *t, const char *why, void (*done)(void *arg),
			void *arg, struct err *err);
/* Cancels running command exec_id of a session: ENOENT for no such session or command,
 * EINVAL when exec_id is NULL. */
int ops_cancel_exec(const struct ops_target *t, const char *exec_id, struct err *err);
/* The caller's sessions as the REST API lists them; with any_owner every owner's, each with
 * its "owner" (whose it is matters once they are mixed). */
json_t *ops_list_sessions(const struct ops_target *t);

/* --- background processes ------------------------------------------------------------
 *
 * A background process runs detached from any request, until it ends or its session does;
 * its output is kept in a replay buffer in the sandbox (its agent), from which any number of
 * attaches stream it, in order. These are calls (ops_call) like the file operations: each
 * holds a unit of QUOTA_COMMANDS while in flight, an attach one of QUOTA_STREAMS for its
 * life. Processes are named by pid (as seen in the sandbox) or by the tag given at start. */

#define OPS_TAG_MAX      64
#define OPS_TERMINAL_MAX 1000
#define OPS_REPLAY_MIN   (64u << 10)
#define OPS_REPLAY_MAX   (64u << 20)

struct ops_proc_ref {
	int pid;         /* 0: by tag */
	const char *tag; /* borrowed */
};
/* "123" is a pid, anything else a tag (1 to OPS_TAG_MAX of [A-Za-z0-9._:-]); EINVAL. */
int ops_proc_ref_parse(const char *s, struct ops_proc_ref *ref, struct err *err);

struct ops_spawn_req {
	struct ops_exec_req x; /* its stdin fields are unused; has_timeout: 0 means none */
	const char *tag;       /* NULL: none; unique among the session's running processes */
	bool stdin_open;       /* keep its stdin open for ops_process_input */
	bool pty;              /* on a terminal of rows x cols (stdin always open) */
	unsigned rows, cols;
	const char *term;      /* TERM for a terminal; NULL: xterm-256color */
	uint64_t replay_bytes; /* 0: SANDBOX_PROCESS_REPLAY_BYTES */
	/* Its output waits for its first attach with `hold` (for at most 10 s): a client that
	 * starts a command and then attaches to it misses nothing in between. */
	bool hold;
};
/* Starts a background process, creating the session when needed; r->info is the process
 * (pid, tag, command, argv, cwd, envKeys, pty, state, startedAt, endedAt, exitCode, signal,
 * durationMs, timedOut, outputBytes, replayFrom). EAGAIN at the session's limits, EEXIST for
 * a tag in use. */
struct ops_call *ops_spawn(const struct ops_target *t, const struct ops_spawn_req *req,
			   ops_done_fn done, void *arg, struct err *err);
/* The session's processes, running and recently ended: r->entries, each as above. */
struct ops_call *ops_list_processes(const struct ops_target *t, ops_done_fn done, void *arg,
				    struct err *err);

struct ops_attach_opts {
	int64_t replay_bytes; /* of the output already produced; -1: all that is kept */
	bool output;          /* stream the output (false: only wait for the end) */
	bool follow;          /* until the process ends (false: what is kept, then done) */
	/* The process ends when this attach does before it (detached, or its connection
	 * lost): SIGHUP to its group, SIGKILL two seconds later, as a terminal's hangup. */
	bool hangup;
	/* The process waits for this reader rather than let it fall behind (no gap): while its
	 * buffer holds as much as this reader has not taken, its output waits in the pipe and
	 * its writes block. For a reader that must get every byte (a command run by a client
	 * that reads all of it); the default lets a slow reader miss bytes instead. */
	bool hold;
};
struct ops_attach_cbs {
	/* The attach began (before any output), on process pid (optional). */
	void (*on_attached)(struct ops_call *c, int pid, void *arg);
	/* Raw bytes in order; the caller returns them with ops_call_consumed() once its client
	 * took them (the agent sends at most a window ahead). */
	void (*on_output)(struct ops_call *c, enum ops_stream stream, const uint8_t *data,
			  size_t len, void *arg);
	/* `bytes` of output were lost to this reader (it fell a whole buffer behind). */
	void (*on_gap)(struct ops_call *c, uint64_t bytes, void *arg);
};
/* Streams a process's output; done gives r->info: the process, with "detached" (the attach
 * ended before the process: not following, or detached) and "position" (bytes of its output
 * before the next one this attach would have sent). ESRCH: no such process. */
struct ops_call *ops_attach(const struct ops_target *t, const struct ops_proc_ref *ref,
			    const struct ops_attach_opts *o, const struct ops_attach_cbs *cbs,
			    ops_done_fn done, void *arg, struct err *err);
/* Sends sig to the process's group. ESRCH once it ended. */
struct ops_call *ops_signal_process(const struct ops_target *t, const struct ops_proc_ref *ref,
				    int sig, ops_done_fn done, void *arg, struct err *err);
/* Writes data (taken over) to the process's stdin, then closes it when `close` (a terminal
 * gets ^D instead); r->info {bytes, closed}. EPIPE: its stdin is closed; EBUSY: another
 * client is writing to it. */
struct ops_call *ops_process_input(const struct ops_target *t, const struct ops_proc_ref *ref,
				   uint8_t *data, size_t len, bool close, ops_done_fn done,
				   void *arg, struct err *err);
/* Resizes the process's terminal (ENOTTY: it has none). */
struct ops_call *ops_resize_process(const struct ops_target *t, const struct ops_proc_ref *ref,
				    unsigned rows, unsigned cols, ops_done_fn done, void *arg,
				    struct err *err);

/* --- streamed uploads -----------------------------------------------------------------
 *
 * A write whose contents arrive in pieces, never whole in the daemon: the caller sends
 * while ops_upload_queued() is below OPS_UPLOAD_HIGH and waits for on_ready otherwise (and
 * before the first: the session may still be starting), then ends it; done follows with
 * r->size. The file appears at once, whole, when the upload ends (the agent writes a
 * temporary file and renames it), or not at all (failure, detach). Creates the session on
 * first use, as a write does; a unit of QUOTA_FILE_OPS for its life. */

#define OPS_UPLOAD_HIGH (1u << 20)

struct ops_upload_cbs {
	/* More may be sent now (queued below OPS_UPLOAD_HIGH). */
	void (*on_ready)(struct ops_call *c, void *arg);
};
struct ops_call *ops_upload(const struct ops_target *t, const char *path, int mode,
			    uint64_t max_bytes, const struct ops_upload_cbs *cbs, ops_done_fn done,
			    void *arg, struct err *err);
void ops_upload_send(struct ops_call *c, const void *data, size_t len);
size_t ops_upload_queued(struct ops_call *c);
void ops_upload_end(struct ops_call *c);

/* The caller's existing, ready session, or NULL with err set: ENOENT (none), EBUSY (still
 * being created). A failed session reports its failure once and is forgotten. */
struct session *ops_find_session(const struct ops_target *t, struct err *err);
