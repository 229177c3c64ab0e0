/* request: turns a REQUEST payload into a checked, typed request.
 *
 * Everything the operations rely on is validated here (types, ranges, required fields), so
 * the operations never look at JSON. Error codes: EPROTO for text that is not a JSON object,
 * EINVAL for a missing, wrong-typed or out-of-range field or an unknown op; the message names
 * the field. Strings with NUL bytes are rejected. Unknown fields are ignored. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "json.h"
#include "util/err.h"

#define REQ_MAX_ENTROPY           4096      /* bytes of entropy a resume may carry */
#define REQ_MAX_VOLUMES           8         /* volumes a resume's storage may mount */
#define REQ_MAX_SERIAL            20        /* bytes of a drive's serial (virtio-blk's) */
#define REQ_MAX_TIMEOUT_MS        604800000 /* a week */
#define REQ_DEFAULT_KILL_GRACE_MS 2000
#define REQ_DEFAULT_MAX_ENTRIES   10000
#define REQ_MAX_ENTRIES           1000000
#define REQ_DEFAULT_MAX_WATCHES   8192 /* directories a recursive watch may cover */
#define REQ_MAX_WATCHES           65536

/* The kinds of event a watch reports (its "events" filter is a set of these). */
enum req_watch_event {
	REQ_WATCH_CREATE = 1 << 0,
	REQ_WATCH_WRITE = 1 << 1,
	REQ_WATCH_REMOVE = 1 << 2,
	REQ_WATCH_RENAME = 1 << 3,
	REQ_WATCH_CHMOD = 1 << 4,
	REQ_WATCH_ALL = (1 << 5) - 1,
};

enum req_op {
	REQ_PING,
	REQ_RESUME,
	REQ_EXEC,
	REQ_WRITE,
	REQ_READ,
	REQ_LIST,
	REQ_STAT,
	REQ_MKDIR,
	REQ_REMOVE,
	REQ_RENAME,
	REQ_SHUTDOWN,
	REQ_SPAWN,
	REQ_PROCS,
	REQ_ATTACH,
	REQ_SIGNAL,
	REQ_INPUT,
	REQ_RESIZE,
	REQ_WATCH,
	REQ_CONNECT,
	REQ_PORTS,
};

#define REQ_MAX_TAG           64         /* bytes of a process's tag */
#define REQ_MAX_REPLAY_BYTES  (64 << 20) /* a process's replay buffer */
#define REQ_MIN_REPLAY_BYTES  (64 << 10)
#define REQ_DEFAULT_REPLAY    (1 << 20)
#define REQ_MAX_TERMINAL_SIZE 1000 /* rows or columns */

struct req_exec {
	const char **argv; /* NULL-terminated (array owned by the request) */
	size_t argc;
	const char **env_keys; /* env_n entries each (arrays owned by the request) */
	const char **env_vals;
	size_t env_n;
	const char *cwd;    /* NULL: the workspace */
	int64_t timeout_ms; /* 0: none */
	bool stdin_pipe;
	int64_t kill_grace_ms;
	bool as_root;  /* "user": "root": the sandbox's root, not the command user */
	bool any_path; /* "anyPath": cwd is any path of the sandbox, not the workspace's */
};

/* A background process: a command (x) that outlives its request. */
struct req_spawn {
	struct req_exec x;
	const char *tag; /* NULL: none */
	bool pty;        /* on a pseudo-terminal of rows x cols */
	int64_t rows, cols;
	int64_t replay_bytes; /* output kept for attach */
	int64_t max_procs;    /* the session's limit on processes alive (host's setting) */
	int64_t max_replay;   /* on the replay bytes of all its processes together */
	bool hold;            /* its output waits for its first holding attach (op_proc.c) */
};

/* The process an attach, signal, input or resize is about: by pid or by tag. */
struct req_proc_ref {
	int64_t pid; /* 0: by tag */
	const char *tag;
};

struct req_resume {
	bool has_time;
	int64_t sec;
	int64_t nsec;
	uint8_t entropy[REQ_MAX_ENTROPY];
	size_t entropy_len;
	const char *session_id; /* NULL when absent */
	const char *hostname;   /* NULL when absent */
	/* "network": the VM's eth0 (address/prefix, default route via gateway, resolver dns);
	 * addresses in network byte order. */
	bool has_network;
	uint32_t net_addr;
	uint32_t net_gateway;
	uint32_t net_dns;
	unsigned net_prefix; /* 1-32 */
	/* "restored": it was made from a save of a running sandbox (protocol 10): from one of
	 * "hibernation", "fork", "snapshot"; session: the id it was saved as (NULL: absent). */
	const char *restored_from;
	const char *restored_session;
	/* "storage": what a VM mounts before anything runs (storage.c). */
	bool has_storage;
	const char *disk_serial; /* "disk": the serial of its disk's drive; NULL: none */
	unsigned nvolumes;
	struct req_volume {
		const char *serial; /* the drive's */
		const char *path;   /* absolute, normalized, not "/" */
		bool read_only;
	} volumes[REQ_MAX_VOLUMES];
};

struct req {
	enum req_op op;
	const char *op_name;
	struct json_doc *doc; /* owns every string below */
	const char *path; /* write, read, list, stat, mkdir, remove, watch; rename: its source */
	/* "anyPath": the paths are the sandbox's, resolved from its root with the command
	 * user's permissions, not confined to the workspace (E2B's filesystem view). */
	bool any_path;
	union {
		struct req_exec exec;
		struct req_resume resume;
		struct {
			int64_t mode;
			int64_t max_bytes; /* -1: no limit */
		} write;
		struct {
			int64_t max_bytes; /* -1: no limit */
			bool info;         /* FILEINFO before the data (hosts of protocol 3) */
			bool check_text;   /* FILEINFO says whether the file is text */
		} read;
		struct {
			bool recursive;
			int64_t max_entries;
		} list;
		struct {
			bool parents;
		} mkdir;
		struct {
			bool recursive;
		} remove;
		struct req_spawn spawn;
		struct {
			struct req_proc_ref ref;
			int64_t replay_bytes; /* of the past output; -1: all that is kept */
			bool output;          /* stream output (false: only the result) */
			bool follow;          /* wait for the end (false: what is kept, then end) */
			bool hangup;          /* the process ends with this attach (a terminal's) */
			bool hold;            /* the process waits for this reader (op_proc.c) */
		} attach;
		struct {
			struct req_proc_ref ref;
			int64_t signal;
		} signal;
		struct {
			struct req_proc_ref ref;
			bool close; /* at EOF, close the process's stdin (a terminal gets ^D) */
		} input;
		struct {
			struct req_proc_ref ref;
			int64_t rows, cols;
		} resize;
		struct {
			const char *to; /* the destination */
			bool parents;   /* create the destination's missing directories */
			bool overwrite; /* replace what is there (else EEXIST) */
		} rename;
		struct {
			int64_t port; /* 1-65535, on the sandbox's loopback */
		} connect;
		struct {
			bool recursive;
			unsigned events;     /* enum req_watch_event bits */
			int64_t max_watches; /* directories watched at most */
		} watch;
	} u;
};

/* Parses and validates payload[0..len). On success *ret owns its data (req_fini). */
int req_parse(const void *payload, size_t len, struct req *ret, struct err *err);

void req_fini(struct req *r);

/* Parses a dotted quad strictly (four decimal numbers 0-255, no leading zeros, nothing else)
 * into *ret, in network byte order. Returns 0 or -EINVAL. */
int req_parse_ipv4(const char *s, uint32_t *ret);
