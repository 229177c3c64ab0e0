#include "api/origin.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/cleanup.h"

/* Adds each comma-separated entry of `text` (trimmed, lower-cased, without a trailing '/');
 * "*" means any. Returns the entries left out for want of room. */
static size_t list_add(struct origin_list *l, const char *text)
{
	if (!text || !*text)
		return 0;
	size_t dropped = 0;
	_cleanup_free_ char *copy = xstrdup(text);
	char *save = NULL;
	for (char *tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		while (isspace((unsigned char)*tok))
			tok++;
		size_t n = strlen(tok);
		while (n && (isspace((unsigned char)tok[n - 1]) || tok[n - 1] == '/'))
			tok[--n] = '\0';
		if (!n)
			continue;
		for (char *c = tok; *c; c++)
			*c = (char)tolower((unsigned char)*c);
		if (strcmp(tok, "*") == 0)
			l->any = true;
		else if (l->n < ORIGIN_LIST_MAX)
			l->names[l->n++] = xstrdup(tok);
		else
			dropped++;
	}
	return dropped;
}

static void list_free(struct origin_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->names[i]);
	memset(l, 0, sizeof(*l));
}

bool origin_is_loopback_address(const char *host)
{
	struct in_addr a4;
	struct in6_addr a6;
	if (!host || !*host || strcasecmp(host, "localhost") == 0)
		return true;
	if (inet_pton(AF_INET, host, &a4) == 1)
		return (ntohl(a4.s_addr) >> 24) == 127;
	if (inet_pton(AF_INET6, host, &a6) == 1)
		return IN6_IS_ADDR_LOOPBACK(&a6);
	return false;
}

size_t origin_policy_init(struct origin_policy *p, const char *listen_host, const char *self_name,
			  const char *allowed_hosts, const char *const *origins, size_t norigins)
{
	memset(p, 0, sizeof(*p));
	size_t dropped = list_add(&p->hosts, allowed_hosts);
	/* Unset, the names that lead here on any machine (IP addresses always pass), and the
	 * machine's own name: a listener on every address (0.0.0.0 in a container published
	 * on 127.0.0.1, say) is as reachable by rebinding as a loopback one. */
	if (!p->hosts.n && !p->hosts.any) {
		dropped += list_add(&p->hosts, "localhost,*.localhost");
		if (self_name && *self_name)
			dropped += list_add(&p->hosts, self_name);
	}
	if (listen_host && *listen_host && !p->hosts.any)
		dropped += list_add(&p->hosts, listen_host);
	for (size_t i = 0; i < norigins; i++)
		dropped += list_add(&p->origins, origins[i]);
	return dropped;
}

void origin_policy_free(struct origin_policy *p)
{
	list_free(&p->hosts);
	list_free(&p->origins);
}

/* Splits "name[:port]" or "[v6][:port]" into its name (brackets kept for v6, lower-cased).
 * Returns false when it is not of that shape or does not fit. */
static bool host_name(const char *authority, char *out, size_t cap)
{
	size_t n;
	if (*authority == '[') {
		const char *close = strchr(authority, ']');
		if (!close)
			return false;
		n = (size_t)(close - authority) + 1;
	} else {
		n = strcspn(authority, ":");
	}
	const char *rest = authority + n;
	if (*rest == ':') {
		rest++;
		if (!*rest || strlen(rest) > 5)
			return false;
		for (; *rest; rest++)
			if (!isdigit((unsigned char)*rest))
				return false;
	} else if (*rest) {
		return false;
	}
	if (!n || n >= cap)
		return false;
	for (size_t i = 0; i < n; i++) {
		unsigned char ch = (unsigned char)authority[i];
		if (ch <= ' ' || ch >= 0x7f)
			return false;
		out[i] = (char)tolower(ch);
	}
	out[n] = '\0';
	return true;
}

/* An IP literal cannot be rebound: it names the address itself. */
static bool is_ip_literal(const char *name)
{
	struct in_addr a4;
	struct in6_addr a6;
	if (inet_pton(AF_INET, name, &a4) == 1)
		return true;
	size_t n = strlen(name);
	if (n > 2 && name[0] == '[' && name[n - 1] == ']') {
		char inner[64];
		if (n - 2 >= sizeof(inner))
			return false;
		memcpy(inner, name + 1, n - 2);
		inner[n - 2] = '\0';
		return inet_pton(AF_INET6, inner, &a6) == 1;
	}
	return false;
}

static bool name_allowed(const struct origin_policy *p, const char *name)
{
	if (p->hosts.any || is_ip_literal(name))
		return true;
	size_t len = strlen(name);
	for (size_t i = 0; i < p->hosts.n; i++) {
		const char *h = p->hosts.names[i];
		if (strncmp(h, "*.", 2) == 0) {
			size_t sl = strlen(h) - 1; /* ".example.com" */
			if (len > sl && strcmp(name + len - sl, h + 1) == 0)
				return true;
		} else if (strcmp(h, name) == 0) {
			return true;
		}
	}
	return false;
}

bool origin_host_ok(const struct origin_policy *p, const char *host_header)
{
	char name[256];
	return host_name(host_header, name, sizeof(name)) && name_allowed(p, name);
}

bool origin_ok(const struct origin_policy *p, const char *origin, const char *host_header)
{
	if (p->origins.any)
		return true;
	const char *at = strstr(origin, "://");
	if (!at || at == origin)
		return false;
	char authority[300];
	size_t an = strlen(at + 3);
	if (an >= sizeof(authority))
		return false;
	memcpy(authority, at + 3, an + 1);
	if (an && authority[an - 1] == '/')
		authority[--an] = '\0';
	if (strchr(authority, '/'))
		return false;
	char name[256];
	if (!host_name(authority, name, sizeof(name)))
		return false;
	/* This machine's loopback: a local tool (an MCP inspector, a dev server). */
	if (strcmp(name, "localhost") == 0 || strcmp(name, "127.0.0.1") == 0 ||
	    strcmp(name, "[::1]") == 0)
		return true;
	/* The same origin: a page this server itself served, under a name it answers to. */
	if (host_header && strcasecmp(authority, host_header) == 0 && name_allowed(p, name))
		return true;
	for (size_t i = 0; i < p->origins.n; i++)
		if (strcasecmp(p->origins.names[i], origin) == 0)
			return true;
	return false;
}
