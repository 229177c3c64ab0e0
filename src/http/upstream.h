/* upstream: what a relay of one client request to an upstream HTTP/1.1 server needs, whatever
 * carries its bytes (a socket to another node, api/forward.c; a channel of a sandbox's
 * agent to one of its ports, api/proxy.c).
 *
 * Toward the upstream, upstream_write_head() writes the request's head: its method and target,
 * its headers but the hop-by-hop ones (RFC 9110 7.6.1: the fixed list, and what the client's
 * Connection names) and those the caller drops or rewrites, the caller's own, the body's
 * framing (its Content-Length, or chunked as it came; a buffered body's length) and
 * `Connection: close` (or the upgrade asked for). upstream_body_piece() and upstream_body_end()
 * frame the body as the head said.
 *
 * From the upstream, struct upstream_reader reads its answer with h1 (h1_init_response): the
 * head bounded (UPSTREAM_MAX_HEAD bytes, UPSTREAM_MAX_HEADERS headers), informational answers
 * dropped (at most 16), the final head handed over with the length to re-frame its body toward
 * the client with (http_stream_start_raw), then the body, then its end (the upstream's end of
 * file for a body that ends with the connection). A 101 to a request that asked for an upgrade
 * ends the reader: what follows is the tunnel's. Every failure is the upstream's, told with a
 * sentence for a 502 (r->why). The reader does no I/O: its caller feeds it.
 *
 * upstream_open() (upstream_conn.c) does all of it over a socket of its own (TCP or unix):
 * the connection, the body both ways with back-pressure, timeouts, the tunnel after a 101,
 * and failures handed to the caller to answer (api/forward.c). A relay whose bytes go another
 * way (api/proxy.c: a channel of the sandbox's agent connection) uses the writer and the
 * reader above with its own transport. */
#pragma once

#include <event2/buffer.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "http/h1.h"
#include "http/http.h"

#define UPSTREAM_MAX_HEAD    (64u << 10) /* an upstream's response head */
#define UPSTREAM_MAX_HEADERS H1_MAX_HEADERS
#define UPSTREAM_MAX_INTERIM 16 /* 1xx answers dropped before the final one */

/* Whether a request header never goes to an upstream: hop-by-hop, or framing the relay makes
 * itself. `connection`: the client's Connection header (may be NULL); Host is never dropped
 * for being named in it. */
bool upstream_hop_request_header(const char *name, const char *connection);

/* Whether a response header never goes back to the client: hop-by-hop, framing, Date (the
 * server sets its own). `connection`: the upstream's Connection header (may be NULL). */
bool upstream_hop_response_header(const char *name, const char *connection);

enum upstream_header {
	UPSTREAM_KEEP, /* the header goes out as it came */
	UPSTREAM_DROP, /* it does not (or the filter wrote what goes instead) */
};

struct upstream_request {
	const char *target; /* the request target as it goes out (path and query) */
	/* Called for each header of the client's that is not hop-by-hop; may write a
	 * replacement into out. NULL: every such header goes. */
	enum upstream_header (*filter)(const char *name, const char *value, struct evbuffer *out,
				       void *arg);
	/* Adds the caller's own headers (may be NULL). */
	void (*extra)(struct evbuffer *out, void *arg);
	void *arg;
	bool buffered; /* the body was read already: it goes after the head, with its length */
	bool upgrade;  /* the client asked to switch protocols: its Upgrade goes on */
};

/* Writes ctx's request head toward the upstream into out (and, when r->buffered, its body).
 * Returns whether the body goes chunked (upstream_body_piece). */
bool upstream_write_head(struct evbuffer *out, struct http_ctx *ctx,
			 const struct upstream_request *r);

/* The chunk header of a piece of len bytes ("<hex>\r\n") into buf; returns its length. */
size_t upstream_chunk_header(char buf[24], size_t len);
/* Adds a piece of the body to out, framed as the head said. */
void upstream_body_piece(struct evbuffer *out, const void *data, size_t len, bool chunked);
/* Adds the body's end (the last chunk, when chunked). */
void upstream_body_end(struct evbuffer *out, bool chunked);

/* The final head of an upstream's answer. */
struct upstream_answer {
	int status;
	int64_t length; /* toward the client: a length, HTTP_LENGTH_CHUNKED or _NONE */
	bool upgrade;   /* a 101: the reader ends here, the rest is the tunnel's */
	size_t nheaders;
	const char *connection; /* its Connection header, or NULL */
};

struct upstream_reader_cbs {
	/* The final head (upstream_reader_header_at for its headers). Returns 0, or -1 to
	 * refuse it (the reader fails: a 502). */
	int (*on_head)(const struct upstream_answer *a, void *arg);
	/* Part of the body, de-chunked. Returns 0, or -1 to stop (the reader fails). */
	int (*on_body)(const char *data, size_t len, void *arg);
};

struct upstream_reader {
	struct h1 h1;
	const struct upstream_reader_cbs *cb;
	void *arg;
	bool head_request;  /* the answer to a HEAD has no body */
	bool allow_upgrade; /* the client asked for an upgrade: a 101 is welcome */
	unsigned interim;   /* informational answers dropped */
	bool head_done;     /* on_head was called */
	bool done;          /* the answer is whole (or, with upgrade, its head is) */
	bool upgraded;      /* a 101 ended it */
	bool failed;        /* why says why */
	char why[160];
};

void upstream_reader_init(struct upstream_reader *r, const struct upstream_reader_cbs *cb,
			  void *arg, bool head_request, bool allow_upgrade);
void upstream_reader_free(struct upstream_reader *r);

/* Reads len bytes of the upstream's answer. Returns how many were used: all of them, or fewer
 * once r->done (the rest, after a 101, is the new protocol's; after a whole answer, nothing the
 * client asked for); -1 when the answer is malformed, too large or refused (r->why). */
ssize_t upstream_reader_feed(struct upstream_reader *r, const char *data, size_t len);

/* The upstream closed its side. Returns 0 when the answer is whole now (a body that ends with
 * the connection), -1 otherwise (r->why). */
int upstream_reader_eof(struct upstream_reader *r);

/* The i-th header of the final head (i < nheaders), from on_head on. */
void upstream_reader_header_at(const struct upstream_reader *r, size_t i, const char **name,
			       const char **value);

/* --- a connection of its own ----------------------------------------------------------------
 *
 * upstream_open() relays ctx's request to an upstream over a socket of its own (TCP or a unix
 * socket), non-blocking on `base`: the head goes out first, the body (streamed, or
 * buffered) as the upstream takes it, the answer's body as the client takes it (each way at
 * most about UPSTREAM_HIGH queued), a 101 turns both connections into a byte tunnel (each side's
 * end passed on as a half-close). The caller writes the answer's headers (on_head); a failure
 * before the answer's head went out is the caller's to answer (on_fail: a 502, or a 504 when
 * the upstream sent nothing for idle_timeout_ms), one after it cuts the reply. on_done comes
 * last, once, whatever happened (and not after upstream_close). */

#define UPSTREAM_HIGH (1u << 20) /* bytes queued toward one side past which the other waits */
#define UPSTREAM_LOW  (256u << 10)

struct upstream_conn;

struct upstream_conn_cbs {
	/* The final head: add its headers to the client's reply (upstream_reader_header_at on
	 * r); for a 101, the Connection and Upgrade to send. Returns 0, or -1 to refuse (502). */
	int (*on_head)(const struct upstream_answer *a, const struct upstream_reader *r, void *arg);
	/* The client is to be answered with status and why (a sentence to put after the
	 * upstream's name): the caller replies on ctx. */
	void (*on_fail)(struct http_ctx *ctx, int status, const char *why, void *arg);
	/* The relay is over. */
	void (*on_done)(void *arg);
};

struct upstream_conn_cfg {
	struct event_base *base;
	const struct sockaddr *addr; /* AF_INET, AF_INET6 or AF_UNIX */
	socklen_t addrlen;
	unsigned connect_timeout_ms; /* 0: none */
	unsigned idle_timeout_ms;    /* until the answer's head, between bytes; 0: none */
	const struct upstream_request *request;
};

/* Starts the relay; ctx belongs to it until on_done (or on_fail). NULL after on_fail and
 * on_done when the connection cannot even be started. */
struct upstream_conn *upstream_open(struct http_ctx *ctx, const struct upstream_conn_cfg *cfg,
				    const struct upstream_conn_cbs *cb, void *arg);

/* Ends a relay without any callback (the HTTP server is gone). */
void upstream_close(struct upstream_conn *u);
