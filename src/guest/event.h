/* guest event: checks what an agent sends in an EVENT frame (proto.h) before anything of it
 * reaches a client.
 *
 * The agent is not trusted: the payload must be at most GUEST_EVENT_MAX bytes of one JSON
 * object of a known kind, with exactly the members that kind has, each of its type, and paths
 * that are relative, normalized and UTF-8 ("." for the workspace itself; no empty, "." or ".."
 * component, no leading or trailing "/", at most GUEST_EVENT_PATH_MAX bytes). What comes out is
 * a fresh object built from the checked values, so that nothing else the agent put in it is
 * passed on. Pure: no I/O, no global state (a fuzz target drives it). */
#pragma once

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define GUEST_EVENT_PATH_MAX    4096
#define GUEST_EVENT_WATCHES_MAX 65536

/* Parses and checks a watch's event: {"type": "create"|"write"|"remove"|"rename"|"chmod",
 * "path": "rel", "dir": bool[, "from": "rel" (rename only)]}, {"type": "overflow"}, or the
 * first, {"type": "ready", "path": "rel", "watches": N} (whether it came first is the
 * consumer's to judge). On
 * success *ret is a new object (the caller's). Errors: EMSGSIZE (too large), EBADMSG (not
 * that shape), with a message naming what is wrong. */
int guest_event_parse(const uint8_t *p, size_t n, json_t **ret, struct err *err);

/* The same check of an event already parsed from n bytes (o borrowed; NULL or not an object
 * is EBADMSG): for a consumer that gets the EVENT's JSON from the guest client. */
int guest_event_check(json_t *o, size_t n, json_t **ret, struct err *err);

/* Whether s[0..n) is a path as above. */
int guest_event_path_ok(const char *s, size_t n);
