/* ui: the dashboard's static files, loaded once from SANDBOX_UI_DIR and served from memory
 * by ui.c at /ui.
 *
 * Only names that pass ui_name_ok are ever looked at: one path component of letters, digits,
 * `.`, `_` and `-`, not starting with `.`, with a known extension; each is opened under the
 * directory with O_NOFOLLOW and taken only if it is a regular file within UI_FILE_MAX. So a
 * request names an entry of the loaded set or nothing: no path from a client reaches the
 * filesystem. Parses untrusted header values (If-None-Match, Host) without allocating;
 * fuzzed in tests/fuzz/api_ui.c. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define UI_NAME_MAX  64         /* characters of an asset's name */
#define UI_FILE_MAX  (8u << 20) /* bytes of one asset */
#define UI_TOTAL_MAX (32u << 20)
#define UI_FILES_MAX 128
#define UI_ETAG_LEN  34 /* "32 hex digits", quotes included */

struct ui_asset {
	char name[UI_NAME_MAX + 1];
	const char *type; /* Content-Type */
	uint8_t *data;
	size_t len;
	char etag[UI_ETAG_LEN + 1];
};

struct ui_assets {
	struct ui_asset *v;
	size_t n;
};

/* Whether `name` may name an asset (see above). */
bool ui_name_ok(const char *name);

/* The Content-Type of an asset by its extension, or NULL for one that is not served. */
const char *ui_content_type(const char *name);

/* Loads every asset of `dir` (entries with a bad name, symlinks, non-regular files and files
 * over UI_FILE_MAX are skipped), at most UI_FILES_MAX and UI_TOTAL_MAX bytes together, into
 * *a (emptied first). Returns the number loaded, or a negative errno when the directory
 * cannot be opened. */
int ui_assets_load(struct ui_assets *a, const char *dir, struct err *err);
/* The asset called `name`, or NULL. */
const struct ui_asset *ui_assets_find(const struct ui_assets *a, const char *name);
void ui_assets_free(struct ui_assets *a);

/* Whether an If-None-Match value (`*`, or a comma-separated list of entity tags, weak or
 * strong) matches `etag`. */
bool ui_etag_match(const char *if_none_match, const char *etag);

/* Whether a Host header value is plain enough to be written into the page's CSP
 * (`name[:port]` or `[v6][:port]` of letters, digits, `.`, `-`, `:`; at most 255). */
bool ui_host_plain(const char *host);
