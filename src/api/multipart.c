/* multipart: see multipart.h. The body is a preamble, then parts each introduced by
 * "\r\n--boundary" and a line end, then "\r\n--boundary--" and an epilogue; the parser keeps
 * only the bytes that may still be the start of a delimiter (or a part's headers). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "api/multipart.h"
#include "util/cleanup.h"

enum { M_PREAMBLE, M_AFTER_DELIM, M_HEADERS, M_BODY, M_DONE, M_FAILED };

/* RFC 2046's bchars, without the space (which may not end a boundary anyway). */
static bool bchar(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       strchr("'()+_,-./:=?", c) != NULL;
}

int multipart_boundary(const char *ct, char out[MULTIPART_BOUNDARY_MAX + 1])
{
	if (!ct || strncasecmp(ct, "multipart/form-data", 19) != 0)
		return -1;
	for (const char *p = ct + 19; (p = strchr(p, ';'));) {
		p++;
		while (*p == ' ' || *p == '\t')
			p++;
		if (strncasecmp(p, "boundary=", 9) != 0)
			continue;
		p += 9;
		bool quoted = *p == '"';
		if (quoted)
			p++;
		size_t n = 0;
		while (p[n] && (quoted ? p[n] != '"' : (p[n] != ';' && p[n] != ' ')))
			n++;
		if (quoted && p[n] != '"')
			return -1;
		if (n == 0 || n > MULTIPART_BOUNDARY_MAX)
			return -1;
		for (size_t i = 0; i < n; i++)
			if (!bchar(p[i]) && !(quoted && p[i] == ' ' && i + 1 < n))
				return -1;
		memcpy(out, p, n);
		out[n] = '\0';
		return 0;
	}
	return -1;
}

static int fail(struct multipart *m, const char *why)
{
	if (m->state != M_FAILED)
		snprintf(m->error, sizeof(m->error), "%s", why);
	m->state = M_FAILED;
	return -1;
}

void multipart_init(struct multipart *m, const char *boundary, const struct multipart_cbs *cbs,
		    void *arg)
{
	memset(m, 0, sizeof(*m));
	m->cbs = cbs;
	m->arg = arg;
	m->delim_len = (size_t)snprintf(m->delim, sizeof(m->delim), "\r\n--%.*s",
					MULTIPART_BOUNDARY_MAX, boundary);
	/* The first delimiter may open the body: as if a line end came before it. */
	m->cap = MULTIPART_HEADERS_MAX + sizeof(m->delim) + 8;
	m->buf = malloc(m->cap);
	if (!m->buf)
		abort();
	memcpy(m->buf, "\r\n", 2);
	m->len = 2;
	m->state = M_PREAMBLE;
}

void multipart_fini(struct multipart *m)
{
	free(m->buf);
	m->buf = NULL;
}

static void consume(struct multipart *m, size_t n)
{
	memmove(m->buf, m->buf + n, m->len - n);
	m->len -= n;
}

static const uint8_t *find(const uint8_t *hay, size_t n, const char *needle, size_t k)
{
	return k <= n ? memmem(hay, n, needle, k) : NULL;
}

/* Undoes the escapes of a quoted filename: \x, %22, %0D, %0A. */
static void unescape(const char *in, size_t n, char *out, size_t cap)
{
	size_t o = 0;
	for (size_t i = 0; i < n && o + 1 < cap; i++) {
		if (in[i] == '\\' && i + 1 < n) {
			out[o++] = in[++i];
		} else if (in[i] == '%' && i + 2 < n && in[i + 1] == '2' && in[i + 2] == '2') {
			out[o++] = '"';
			i += 2;
		} else if (in[i] == '%' && i + 2 < n && in[i + 1] == '0' &&
			   (in[i + 2] == 'D' || in[i + 2] == 'd' || in[i + 2] == 'A' ||
			    in[i + 2] == 'a')) {
			out[o++] = (in[i + 2] == 'D' || in[i + 2] == 'd') ? '\r' : '\n';
			i += 2;
		} else {
			out[o++] = in[i];
		}
	}
	out[o] = '\0';
}

/* A parameter of a Content-Disposition value (name="..." or name=token), or -1. */
static int disposition_param(const char *v, size_t vn, const char *key, char *out, size_t cap)
{
	size_t kn = strlen(key);
	for (size_t i = 0; i < vn; i++) {
		if (v[i] != ';')
			continue;
		size_t j = i + 1;
		while (j < vn && (v[j] == ' ' || v[j] == '\t'))
			j++;
		if (j + kn + 1 > vn || strncasecmp(v + j, key, kn) != 0 || v[j + kn] != '=')
			continue;
		j += kn + 1;
		if (j < vn && v[j] == '"') {
			size_t s = ++j;
			while (j < vn && v[j] != '"') {
				if (v[j] == '\\')
					j++;
				j++;
			}
			if (j >= vn)
				return -1;
			unescape(v + s, j - s, out, cap);
		} else {
			size_t s = j;
			while (j < vn && v[j] != ';' && v[j] != ' ')
				j++;
			unescape(v + s, j - s, out, cap);
		}
		return 0;
	}
	return -1;
}

static int parse_headers(struct multipart *m, const char *h, size_t n)
{
	char name[MULTIPART_NAME_MAX + 1] = "", filename[MULTIPART_NAME_MAX + 1] = "";
	bool disposition = false;
	for (size_t i = 0; i < n;) {
		const char *eol = memmem(h + i, n - i, "\r\n", 2);
		size_t ln = eol ? (size_t)(eol - (h + i)) : n - i;
		const char *line = h + i;
		i += ln + 2;
		if (ln == 0)
			continue;
		const char *colon = memchr(line, ':', ln);
		if (!colon)
			return fail(m, "a part's header line has no colon");
		size_t kn = (size_t)(colon - line);
		if (kn == 19 && strncasecmp(line, "Content-Disposition", 19) == 0) {
			const char *v = colon + 1;
			size_t vn = ln - kn - 1;
			while (vn && (*v == ' ' || *v == '\t'))
				v++, vn--;
			if (vn < 9 || strncasecmp(v, "form-data", 9) != 0)
				return fail(m, "a part's Content-Disposition is not form-data");
			if (disposition)
				return fail(m, "a part has two Content-Disposition headers");
			disposition = true;
			if (disposition_param(v, vn, "name", name, sizeof(name)) < 0)
				return fail(m, "a part's Content-Disposition has no name");
			disposition_param(v, vn, "filename", filename, sizeof(filename));
		}
	}
	if (!disposition)
		return fail(m, "a part has no Content-Disposition header");
	if (++m->parts > MULTIPART_PARTS_MAX)
		return fail(m, "too many parts");
	m->in_part = true;
	if (m->cbs->on_begin && m->cbs->on_begin(name, filename, m->arg) < 0)
		return fail(m, "refused");
	return 0;
}

static int emit(struct multipart *m, size_t n)
{
	if (n && m->cbs->on_data && m->cbs->on_data(m->buf, n, m->arg) < 0)
		return fail(m, "refused");
	consume(m, n);
	return 0;
}

/* Runs the machine over what is buffered; stops when it needs more bytes. */
static int step(struct multipart *m)
{
	for (;;) {
		switch (m->state) {
		case M_PREAMBLE:
		case M_BODY: {
			const uint8_t *d = find(m->buf, m->len, m->delim, m->delim_len);
			if (!d) {
				/* Keep what may be a delimiter's beginning. */
				size_t keep = m->delim_len - 1;
				if (m->len <= keep)
					return 0;
				if (m->state == M_BODY)
					return emit(m, m->len - keep);
				consume(m, m->len - keep);
				return 0;
			}
			size_t at = (size_t)(d - m->buf);
			if (m->state == M_BODY) {
				if (emit(m, at) < 0)
					return -1;
				m->in_part = false;
				if (m->cbs->on_end && m->cbs->on_end(m->arg) < 0)
					return fail(m, "refused");
				at = 0;
			}
			consume(m, at + m->delim_len);
			m->state = M_AFTER_DELIM;
			break;
		}
		case M_AFTER_DELIM: {
			if (m->len < 2)
				return 0;
			if (m->buf[0] == '-' && m->buf[1] == '-') {
				m->state = M_DONE;
				m->len = 0;
				return 0;
			}
			/* Transport padding (spaces, tabs) may follow a delimiter. */
			size_t i = 0;
			while (i < m->len && (m->buf[i] == ' ' || m->buf[i] == '\t'))
				i++;
			if (i > 256)
				return fail(m, "a delimiter is followed by too much padding");
			if (m->len < i + 2)
				return 0;
			if (m->buf[i] != '\r' || m->buf[i + 1] != '\n')
				return fail(m, "a delimiter is not followed by a line end");
			consume(m, i + 2);
			m->state = M_HEADERS;
			break;
		}
		case M_HEADERS: {
			/* A part without headers (its empty line at once) has no name. */
			if (m->len >= 2 && m->buf[0] == '\r' && m->buf[1] == '\n')
				return fail(m, "a part has no Content-Disposition header");
			const uint8_t *e = find(m->buf, m->len, "\r\n\r\n", 4);
			if (!e) {
				if (m->len > MULTIPART_HEADERS_MAX)
					return fail(m, "a part's headers are too long");
				return 0;
			}
			size_t hn = (size_t)(e - m->buf) + 2;
			if (hn > MULTIPART_HEADERS_MAX)
				return fail(m, "a part's headers are too long");
			if (parse_headers(m, (const char *)m->buf, hn - 2) < 0)
				return -1;
			consume(m, hn + 2);
			m->state = M_BODY;
			break;
		}
		case M_DONE:
			m->len = 0; /* the epilogue is ignored */
			return 0;
		default:
			return -1;
		}
	}
}

int multipart_feed(struct multipart *m, const uint8_t *data, size_t len)
{
	if (m->state == M_FAILED)
		return -1;
	while (len) {
		if (m->state == M_DONE)
			return 0;
		/* Take at most one buffer's worth at a time: memory stays bounded. */
		size_t room = m->cap - m->len;
		size_t n = len < room ? len : room;
		memcpy(m->buf + m->len, data, n);
		m->len += n;
		data += n;
		len -= n;
		if (step(m) < 0)
			return -1;
		if (m->len == m->cap)
			return fail(m, "a part's headers are too long");
	}
	return 0;
}

int multipart_finish(struct multipart *m)
{
	if (m->state == M_FAILED)
		return -1;
	if (m->state != M_DONE)
		return fail(m, "the body ended before its closing delimiter");
	return 0;
}
