/* origin: which Host names and browser origins the server answers to (front.c applies it).
 *
 * Parses untrusted header values (Host, Origin) without allocating; fuzzed in
 * tests/fuzz/api_origin.c. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define ORIGIN_LIST_MAX 64 /* names in each allow list */

struct origin_list {
	char *names[ORIGIN_LIST_MAX]; /* lower-cased */
	size_t n;
	bool any; /* "*" */
};

struct origin_policy {
	struct origin_list hosts;
	struct origin_list origins;
};

/* The policy of a server listening on `listen_host` on the machine named `self_name` (may be
 * NULL): allowed_hosts (comma-separated, "*.example.com" for every name under it, "*" any;
 * empty: localhost, *.localhost and self_name; the listening name is added either way), and
 * the origins of each of the comma-separated lists in origins[0..norigins). Returns the
 * number of entries left out for want of room (the caller says so). */
size_t origin_policy_init(struct origin_policy *p, const char *listen_host, const char *self_name,
			  const char *allowed_hosts, const char *const *origins, size_t norigins);
void origin_policy_free(struct origin_policy *p);

/* Whether a listening address is this machine's loopback ("localhost", 127/8, ::1). */
bool origin_is_loopback_address(const char *host);

/* Whether a Host header value ("name[:port]", "[v6][:port]") names this server: an IP
 * literal, or a name on the list. */
bool origin_host_ok(const struct origin_policy *p, const char *host_header);

/* Whether a browser page of `origin` may call: this machine's loopback origins, the server
 * itself (the origin's host and port are the request's Host, an allowed name), or a listed
 * origin. host_header may be NULL. */
bool origin_ok(const struct origin_policy *p, const char *origin, const char *host_header);
