/* route: what the three servers of the HTTP benchmark answer, shared so that they do the same
 * work: the route POST /exec/:id/execute, the caller's key, the reply's body. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define ROUTE_KEY      "sk-bench-0123456789abcdef0123456789abcdef"
#define ROUTE_MAX_BODY (1024 * 1024) /* the daemon's default max_body_bytes is larger; any cap */
#define ROUTE_MAX_ID   64
#define ROUTE_IDLE_S   60 /* every server closes a connection idle this long */

/* Matches a request's path (a query, if any, ends it) against /exec/:id/execute. Returns the
 * id's length and points *ret_id at it, or -1 when the path is another one (404). */
int route_match(const char *path, size_t len, const char **ret_id);

/* Whether an Authorization header's value (NULL when absent) carries the key (else 401). */
bool route_key_ok(const char *authorization);

/* Writes the reply's JSON body (about 100 bytes) for the sandbox `id` and a request body of
 * body_len bytes into buf. Returns its length. */
size_t route_reply(char *buf, size_t cap, const char *id, size_t id_len, size_t body_len);
