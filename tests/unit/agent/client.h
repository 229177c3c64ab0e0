/* A small blocking client of the guest protocol for the agent's tests: starts
 * sandbox-agent-host on a socketpair with a fresh workspace, sends frames, collects replies. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "guest/proto.h"

struct frame {
	uint8_t type;
	uint32_t ch;
	uint32_t len;
	uint8_t *payload; /* malloc'd, NUL-terminated for convenience */
};

/* When set before client_start: the agent reads this as its image environment file. */
extern const char *client_env_file;

struct client {
	int fd;
	pid_t pid;
	char ws[256]; /* the workspace (a fresh temporary directory) */
	struct guest_decoder dec;
	uint8_t *in;
	size_t in_len;
	struct frame *backlog; /* frames read while waiting for another channel */
	size_t nbacklog;
	bool auto_window; /* grant credit back for every data frame received */
};

/* What client_wait collected for one channel. */
struct reply {
	uint8_t type; /* GUEST_RESULT or GUEST_ERROR */
	json_t *json; /* the terminal frame's payload */
	json_t *info; /* a read's FILEINFO, or NULL */
	size_t ninfo; /* FILEINFO frames received */
	char *out;    /* STDOUT or FILEDATA bytes */
	size_t out_len;
	char *err; /* STDERR bytes */
	size_t err_len;
	size_t nframes;   /* data frames received */
	uint64_t windows; /* credit granted to us by WINDOW frames */
};

/* Starts the agent (path from $SANDBOX_AGENT) with --fd and a new workspace. */
void client_start(struct client *c);
/* Closes the connection, waits for the agent to exit (returns its wait status) and removes
 * the workspace. */
int client_stop(struct client *c);

void client_send(struct client *c, uint8_t type, uint32_t ch, const void *p, size_t n);
/* Sends a REQUEST whose JSON is given as a printf format. */
void client_request(struct client *c, uint32_t ch, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
void client_window(struct client *c, uint32_t ch, uint32_t n);

/* Reads the next frame (from the backlog for `ch` first when ch != 0), waiting at most
 * timeout_ms. Returns 0, -ETIMEDOUT or -EPIPE. */
int client_next(struct client *c, uint32_t ch, struct frame *f, int timeout_ms);
void frame_free(struct frame *f);

/* Collects frames of ch until its terminal frame. Returns 0 or -ETIMEDOUT/-EPIPE. */
int client_wait(struct client *c, uint32_t ch, struct reply *r, int timeout_ms);
void reply_free(struct reply *r);

/* Shorthands: string member of the reply's JSON or NULL; integer member or -999. */
const char *reply_str(const struct reply *r, const char *key);
long long reply_int(const struct reply *r, const char *key);

/* Runs a write op for path with data, respecting the agent's credit; returns the reply. */
int client_write_file(struct client *c, uint32_t ch, const char *path, const void *data, size_t len,
		      const char *extra_json, struct reply *r);

/* Round trip of a ping on ch: true when it is answered with pong. */
bool client_ping(struct client *c, uint32_t ch);

/* Path of a file in the workspace (static buffer). */
const char *ws_file(struct client *c, const char *rel);
