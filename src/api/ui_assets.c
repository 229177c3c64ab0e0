/* ui_assets: the dashboard's files in memory (see ui.h). */
#include "api/ui.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/sha256.h"

static const struct {
	const char *ext;
	const char *type;
} types[] = {
	{ ".html", "text/html; charset=utf-8" },
	{ ".js", "text/javascript; charset=utf-8" },
	{ ".css", "text/css; charset=utf-8" },
	{ ".json", "application/json" },
	{ ".png", "image/png" },
	{ ".svg", "image/svg+xml" },
	{ ".ico", "image/x-icon" },
	{ ".woff2", "font/woff2" },
	{ ".txt", "text/plain; charset=utf-8" },
};

static bool name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '.' || c == '_' || c == '-';
}

const char *ui_content_type(const char *name)
{
	const char *dot = name ? strrchr(name, '.') : NULL;
	if (!dot)
		return NULL;
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		if (strcmp(dot, types[i].ext) == 0)
			return types[i].type;
	}
	return NULL;
}

bool ui_name_ok(const char *name)
{
	if (!name || !*name || name[0] == '.')
		return false;
	size_t n = 0;
	for (const char *p = name; *p; p++, n++) {
		if (n >= UI_NAME_MAX || !name_char(*p))
			return false;
		if (p[0] == '.' && p[1] == '.')
			return false;
	}
	return ui_content_type(name) != NULL;
}

void ui_assets_free(struct ui_assets *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->v[i].data);
	free(a->v);
	a->v = NULL;
	a->n = 0;
}

/* Reads the regular file `name` under dirfd into *ret (at most UI_FILE_MAX bytes); -1 when
 * it is not one. */
static int read_asset(int dirfd, const char *name, uint8_t **ret, size_t *ret_len)
{
	_cleanup_close_ int fd =
		openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > UI_FILE_MAX)
		return -1;
	size_t want = (size_t)st.st_size;
	_cleanup_free_ uint8_t *buf = malloc(want ? want : 1);
	if (!buf)
		abort();
	size_t got = 0;
	while (got < want) {
		ssize_t r = read(fd, buf + got, want - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1; /* it shrank, or cannot be read: leave it out */
		got += (size_t)r;
	}
	*ret = buf;
	buf = NULL;
	*ret_len = got;
	return 0;
}

int ui_assets_load(struct ui_assets *a, const char *dir, struct err *err)
{
	ui_assets_free(a);
	_cleanup_close_ int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return err_sys(err, errno, "cannot open `%s`", dir);
	int dupfd = dup(dirfd);
	if (dupfd < 0)
		return err_sys(err, errno, "cannot read `%s`", dir);
	_cleanup_closedir_ DIR *d = fdopendir(dupfd);
	if (!d) {
		close(dupfd);
		return err_sys(err, errno, "cannot read `%s`", dir);
	}
	a->v = calloc(UI_FILES_MAX, sizeof(*a->v));
	if (!a->v)
		abort();
	size_t total = 0;
	struct dirent *de;
	while ((de = readdir(d)) && a->n < UI_FILES_MAX) {
		if (!ui_name_ok(de->d_name))
			continue;
		struct ui_asset *x = &a->v[a->n];
		if (read_asset(dirfd, de->d_name, &x->data, &x->len) < 0)
			continue;
		if (total + x->len > UI_TOTAL_MAX) {
			free(x->data);
			x->data = NULL;
			break;
		}
		total += x->len;
		strcpy(x->name, de->d_name); /* ui_name_ok: at most UI_NAME_MAX */
		x->type = ui_content_type(x->name);
		char hex[2 * SHA256_LEN + 1];
		sha256_hex(x->data, x->len, hex);
		x->etag[0] = '"';
		memcpy(x->etag + 1, hex, UI_ETAG_LEN - 2);
		x->etag[UI_ETAG_LEN - 1] = '"';
		x->etag[UI_ETAG_LEN] = '\0';
		a->n++;
	}
	return (int)a->n;
}

const struct ui_asset *ui_assets_find(const struct ui_assets *a, const char *name)
{
	if (!ui_name_ok(name))
		return NULL;
	for (size_t i = 0; i < a->n; i++) {
		if (strcmp(a->v[i].name, name) == 0)
			return &a->v[i];
	}
	return NULL;
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t';
}

bool ui_etag_match(const char *inm, const char *etag)
{
	if (!inm || !etag)
		return false;
	size_t elen = strlen(etag);
	const char *p = inm;
	for (;;) {
		while (is_space(*p) || *p == ',')
			p++;
		if (!*p)
			return false;
		if (*p == '*')
			return true;
		/* The weak comparison (RFC 9110 8.8.3.2): W/"x" matches "x". */
		if (p[0] == 'W' && p[1] == '/')
			p += 2;
		const char *start = p;
		if (*p != '"') {
			/* Not an entity tag: skip to the next comma. */
			while (*p && *p != ',')
				p++;
			continue;
		}
		p++;
		while (*p && *p != '"')
			p++;
		if (!*p)
			return false; /* unterminated */
		p++;
		if ((size_t)(p - start) == elen && strncmp(start, etag, elen) == 0)
			return true;
	}
}

bool ui_host_plain(const char *host)
{
	if (!host || !*host)
		return false;
	size_t n = 0;
	for (const char *p = host; *p; p++, n++) {
		char c = *p;
		if (n >= 255)
			return false;
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '.' || c == '-' || c == ':' || c == '[' || c == ']'))
			return false;
	}
	return true;
}
