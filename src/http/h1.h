/* h1: reads HTTP/1.1 requests off one connection's bytes with http_parser (libhttp-parser).
 *
 * Bytes go in through h1_feed as they arrive, in pieces of any size. A request's head (method,
 * target, headers, its Content-Length) is handed to on_head once complete, before any byte of
 * its body, so that a route and a key can be checked first; then its body in pieces to on_body
 * (already de-chunked), then on_end. After on_end the reader stops at the end of that request,
 * even when the next one is already in the bytes fed: the caller answers, then calls h1_next
 * and feeds the rest. Every part a client controls is bounded (target, names, values, their
 * number, the header block, the body).
 *
 * Does no I/O. A struct h1 lives inside the caller's connection and is small: what a request
 * keeps of its head is allocated when the request starts and freed by h1_next, so that an idle
 * connection holds nothing more. */
#pragma once

#include <http_parser.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define H1_MAX_TARGET  8192
#define H1_MAX_FIELD   256   /* a header's name */
#define H1_MAX_VALUE   8192  /* a header's value */
#define H1_MAX_HEADERS 100   /* headers in one request */
#define H1_MAX_HEADER  32768 /* the whole header block (request line included) */

/* Valid from on_head until h1_next. */
struct h1_head {
	enum http_method method;
	unsigned short http_major, http_minor;
	const char *target; /* as sent: path and query, NUL-terminated */
	size_t target_len;
	const char *authorization; /* NULL when absent */
	const char *host;          /* NULL when absent (HTTP/1.0) */
	uint64_t content_length;   /* 0 without Content-Length (or chunked) */
	bool chunked;
	bool keep_alive;      /* the connection may serve another request after this one */
	bool expect_continue; /* the client waits for "100 Continue" before sending its body */
	bool upgrade;         /* Upgrade (WebSocket) or CONNECT: after on_end the connection's bytes
			       * are another protocol's, and h1_next must not be called */
	size_t nheaders;
	int status; /* a response's status (h1_init_response); 0 for a request */
};

struct h1_callbacks {
	/* The head is complete. Returns 0 to go on to the body, or a status (>= 400) to refuse
	 * the request: h1_feed then returns -status. */
	int (*on_head)(const struct h1_head *head, void *arg);
	/* Part of the body. Returns 0, or a status to stop as on_head. */
	int (*on_body)(const char *data, size_t len, void *arg);
	/* The request is complete. Returns 0, or a status to stop as on_head. */
	int (*on_end)(void *arg);
};

struct h1 {
	http_parser parser;
	const struct h1_callbacks *cb;
	void *arg;
	uint64_t max_body;
	struct h1_head head;
	uint64_t body_seen;
	size_t header_bytes;
	/* The target, then each header's name and value, one after the other, NUL-terminated. */
	char *store;
	size_t store_len, store_cap;
	uint32_t name_at[H1_MAX_HEADERS];  /* offsets in store of each header's name... */
	uint32_t value_at[H1_MAX_HEADERS]; /* ...and value */
	size_t name_len;                   /* bytes of the current name so far */
	size_t value_len;                  /* bytes of the current value so far */
	bool in_target;                    /* the target is being stored */
	bool in_value;                     /* the last piece of header was a value */
	bool head_done; /* on_head was called: what follows the body (trailers) is not kept */
	int status;     /* the status a failure asks for, once failed */
	bool started;   /* bytes of a request were fed since h1_next */
	bool ended;     /* on_end was called; h1_next before feeding more */
	/* h1_init_response: */
	bool response;     /* reads responses: no target, Host, Expect or once-only checks */
	bool skip_body;    /* the answer to a HEAD: no body whatever its head says */
	size_t max_value;  /* a header's value (H1_MAX_VALUE for requests) */
	size_t max_header; /* the header block (H1_MAX_HEADER for requests) */
};

/* Prepares h for a new connection: bodies over max_body bytes are refused with 413. */
void h1_init(struct h1 *h, const struct h1_callbacks *cb, void *arg, uint64_t max_body);

/* Prepares h to read an upstream's responses (http/upstream.c) instead of requests: a head
 * (status line and headers, head.status) of at most max_header bytes, each value at most
 * max_value, then its body (unbounded) as http_parser frames it; a 1xx but 101 is a response
 * of its own (on_head, on_end, then h1_next for the final one). With head_request, the answer
 * has no body whatever its head says. Failures return -400 (malformed, or cut short at EOF),
 * -431 (a head too large) or on_head's status. */
void h1_init_response(struct h1 *h, const struct h1_callbacks *cb, void *arg, bool head_request,
		      size_t max_header, size_t max_value);

/* Changes the body limit of the request under way (from on_head: a route's own limit). */
void h1_set_max_body(struct h1 *h, uint64_t max_body);

/* Parses up to len bytes. Returns how many were consumed: all of them, or fewer when a
 * request ended (h1_ended() is then true) and the rest belongs to the next one. Returns
 * -status when the request is malformed (400), too large (413, 414, 431), uses what we do not
 * serve (501) or a callback refused it: the connection must be answered with that status and
 * closed, since where the next request starts is unknown. */
ssize_t h1_feed(struct h1 *h, const char *data, size_t len);

/* Whether the current request ended (on_end was called). */
bool h1_ended(const struct h1 *h);

/* The value of the current request's header `name` (any case), or NULL. From on_head on. */
const char *h1_header(const struct h1 *h, const char *name);

/* The i-th header of the current request (i < head.nheaders). */
void h1_header_at(const struct h1 *h, size_t i, const char **name, const char **value);

/* Starts on the next request of the connection once the last one is answered. */
void h1_next(struct h1 *h);

/* Frees what h holds (the connection is closed). */
void h1_free(struct h1 *h);

/* The connection's peer closed it. Returns 0 between requests, or -400 when it did so within
 * a request. */
int h1_eof(struct h1 *h);
