/* Fuzz target: what the dashboard's routes read from a client (src/api/ui_assets.c): the
 * asset name of a path, an If-None-Match header and the Host written into the CSP. The input
 * is split at its first two NULs into the three. The answers must be consistent: a name that
 * passes is one plain path component of a known type, found only when it is in the set; a
 * Host that passes holds nothing that could end a CSP directive. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/ui.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static uint8_t js[] = "x()";
static struct ui_asset set[] = {
	{ .name = "index.html",
	  .type = "text/html",
	  .data = js,
	  .len = 3,
	  .etag = "\"0123456789abcdef0123456789abcdef\"" },
	{ .name = "app.js",
	  .type = "text/javascript",
	  .data = js,
	  .len = 3,
	  .etag = "\"fedcba9876543210fedcba9876543210\"" },
};
static const struct ui_assets assets = { set, 2 };

static const char *next(const char *p, const char *end)
{
	size_t n = strnlen(p, (size_t)(end - p));
	return p + n < end ? p + n + 1 : end;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 4096)
		return 0;
	char *buf = malloc(size + 3);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	memset(buf + size, 0, 3);
	const char *end = buf + size + 2;
	const char *name = buf;
	const char *inm = next(name, end);
	const char *host = next(inm, end);

	if (ui_name_ok(name)) {
		if (strchr(name, '/') || strstr(name, "..") || name[0] == '.' ||
		    strlen(name) > UI_NAME_MAX || !ui_content_type(name))
			abort();
	}
	const struct ui_asset *a = ui_assets_find(&assets, name);
	if (a && strcmp(a->name, name) != 0)
		abort();
	for (size_t i = 0; i < 2; i++) {
		bool m = ui_etag_match(inm, set[i].etag);
		/* The tag itself, anywhere in the list, always matches. */
		if (strcmp(inm, set[i].etag) == 0 && !m)
			abort();
	}
	if (ui_host_plain(host) && strpbrk(host, " ;,'\"\r\n\t"))
		abort();
	free(buf);
	return 0;
}
