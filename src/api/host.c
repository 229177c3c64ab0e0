/* host: `<port>-<name>.<domain>` Host names (host.h). */
#include "api/host.h"

#include <string.h>
#include <strings.h>

#include "session/preview.h"

static bool label_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
}

bool preview_domain_ok(const char *domain)
{
	size_t n = strlen(domain);
	if (n == 0 || n > 200)
		return false;
	size_t label = 0;
	for (size_t i = 0; i <= n; i++) {
		char c = domain[i];
		if (c == '.' || c == '\0') {
			if (label == 0 || label > 63 || domain[i - 1] == '-')
				return false;
			label = 0;
			continue;
		}
		if (!label_char(c) || (label == 0 && c == '-'))
			return false;
		label++;
	}
	return true;
}

int preview_host_parse(const char *host, const char *domain, struct preview_host *out)
{
	if (!host || !domain)
		return -1;
	size_t n = strnlen(host, HOST_NAME_MAX_LEN + 8);
	if (n == 0 || n > HOST_NAME_MAX_LEN + 7 || host[0] == '[')
		return -1;
	/* The server's own port, then a trailing dot. */
	const char *colon = memchr(host, ':', n);
	if (colon) {
		size_t digits = n - (size_t)(colon - host) - 1;
		if (digits == 0 || digits > 5 || strspn(colon + 1, "0123456789") != digits)
			return -1;
		n = (size_t)(colon - host);
	}
	if (n && host[n - 1] == '.')
		n--;
	size_t dn = strlen(domain);
	const char *dot = memchr(host, '.', n);
	if (!dot || (size_t)(host + n - dot - 1) != dn || strncasecmp(dot + 1, domain, dn) != 0)
		return -1;
	size_t first = (size_t)(dot - host);
	const char *dash = memchr(host, '-', first);
	if (!dash)
		return -1;
	size_t pdigits = (size_t)(dash - host);
	if (pdigits == 0 || pdigits > 5 || host[0] == '0')
		return -1;
	unsigned port = 0;
	for (size_t i = 0; i < pdigits; i++) {
		if (host[i] < '0' || host[i] > '9')
			return -1;
		port = port * 10 + (unsigned)(host[i] - '0');
	}
	if (port < 1 || port > 65535)
		return -1;
	size_t nlen = first - pdigits - 1;
	if (nlen == 0 || nlen > SESSION_PREVIEW_NAME_MAX)
		return -1;
	char name[SESSION_PREVIEW_NAME_MAX + 1];
	for (size_t i = 0; i < nlen; i++) {
		char c = dash[1 + i];
		if (c >= 'A' && c <= 'Z')
			c = (char)(c - 'A' + 'a');
		name[i] = c;
	}
	name[nlen] = '\0';
	if (!session_preview_label_ok(name))
		return -1;
	out->port = port;
	memcpy(out->name, name, nlen + 1);
	return 0;
}
