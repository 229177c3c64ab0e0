/* host: the Host names that reach a port of a session, `<port>-<name>.<domain>`, with an
 * optional `:port` of the server's and a trailing dot; the domain is SANDBOX_PUBLIC_DOMAIN and
 * the name a session's preview name (session/preview.h). Pure functions over untrusted text
 * (tests/fuzz/api_host.c). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#define HOST_NAME_MAX_LEN 253

struct preview_host {
	unsigned port; /* 1-65535 */
	char name[58]; /* the preview name, lowercased */
};

/* Whether `domain` can carry preview names: DNS labels of a-z, 0-9 and '-' (1 to 63 each, no
 * '-' at either end), dot-separated, at most 200 characters in all. */
bool preview_domain_ok(const char *domain);

/* Parses a Host header's value: 0 and *out when it names a port of a preview name directly
 * under `domain` (compared without regard to case), -1 otherwise. */
int preview_host_parse(const char *host, const char *domain, struct preview_host *out);
