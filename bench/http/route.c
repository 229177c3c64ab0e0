/* route: see route.h. */
#include "route.h"

#include <stdio.h>
#include <string.h>

#define PREFIX "/exec/"
#define SUFFIX "/execute"

int route_match(const char *path, size_t len, const char **ret_id)
{
	const char *q = memchr(path, '?', len);
	if (q)
		len = (size_t)(q - path);
	size_t pre = strlen(PREFIX), suf = strlen(SUFFIX);
	if (len <= pre + suf || memcmp(path, PREFIX, pre) || memcmp(path + len - suf, SUFFIX, suf))
		return -1;
	const char *id = path + pre;
	size_t id_len = len - pre - suf;
	if (id_len > ROUTE_MAX_ID || memchr(id, '/', id_len))
		return -1;
	*ret_id = id;
	return (int)id_len;
}

bool route_key_ok(const char *authorization)
{
	static const char bearer[] = "Bearer ";
	return authorization && !strncmp(authorization, bearer, strlen(bearer)) &&
	       !strcmp(authorization + strlen(bearer), ROUTE_KEY);
}

size_t route_reply(char *buf, size_t cap, const char *id, size_t id_len, size_t body_len)
{
	int n = snprintf(buf, cap,
			 "{\"id\":\"%.*s\",\"exit_code\":0,\"stdout\":\"\",\"stderr\":\"\","
			 "\"duration_ms\":1,\"timed_out\":false,\"request_bytes\":%zu}",
			 (int)id_len, id, body_len);
	return n < 0 ? 0 : (size_t)n >= cap ? cap - 1 : (size_t)n;
}
