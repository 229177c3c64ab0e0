/* jsonload: jansson's parse, with large plain strings cut out first (jsonload.h). */
#include "util/jsonload.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/random.h"
#include "util/text.h"

#define MAX_SPANS 64

struct span {
	size_t start, len; /* the string's contents, quotes excluded */
};

/* Whether the bytes need nothing of a JSON parser: no escape, no control character, valid
 * UTF-8 (ASCII checked a word at a time). */
static bool plain(const uint8_t *p, size_t n)
{
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, p + i, 8);
		/* any byte >= 0x80, or < 0x20 */
		if ((w & 0x8080808080808080ull) ||
		    ((w - 0x2020202020202020ull) & ~w & 0x8080808080808080ull))
			break;
	}
	for (size_t j = i; j < n; j++)
		if (p[j] < 0x20)
			return false;
	return memchr(p, '\\', n) == NULL && utf8_valid(p + i, n - i);
}

/* The large plain string values of the text (not keys), at most MAX_SPANS. */
static size_t find_spans(const uint8_t *buf, size_t len, struct span *sp)
{
	size_t n = 0;
	const uint8_t *end = buf + len;
	const uint8_t *p = buf;
	while (p < end && n < MAX_SPANS) {
		const uint8_t *q = memchr(p, '"', (size_t)(end - p));
		if (!q)
			break;
		/* The string's end: the next quote not escaped. */
		const uint8_t *s = q + 1, *e = s;
		bool escaped = false;
		for (;;) {
			const uint8_t *c = memchr(e, '"', (size_t)(end - e));
			if (!c)
				return n; /* unterminated: jansson says so */
			/* An odd run of backslashes before it escapes it. */
			size_t bs = 0;
			while (c - bs > s && c[-1 - (ptrdiff_t)bs] == '\\')
				bs++;
			if (bs)
				escaped = true;
			if (bs % 2 == 0) {
				e = c;
				break;
			}
			e = c + 1;
		}
		p = e + 1;
		size_t slen = (size_t)(e - s);
		if (slen < JSONLOAD_LARGE || escaped)
			continue;
		/* A key is followed by ':'. */
		const uint8_t *k = p;
		while (k < end && (*k == ' ' || *k == '\t' || *k == '\n' || *k == '\r'))
			k++;
		if (k < end && *k == ':')
			continue;
		if (!plain(s, slen))
			continue;
		sp[n].start = (size_t)(s - buf);
		sp[n].len = slen;
		n++;
	}
	return n;
}

struct markers {
	const char *nonce;
	size_t nlen;
	const uint8_t *buf;
	const struct span *sp;
	size_t n;
	size_t found;
};

/* The string a marker stands for (a new value), or NULL when x is not a marker. */
static json_t *unmark(struct markers *m, const json_t *x)
{
	if (!json_is_string(x) || json_string_length(x) <= m->nlen ||
	    memcmp(json_string_value(x), m->nonce, m->nlen) != 0)
		return NULL;
	size_t k = strtoul(json_string_value(x) + m->nlen, NULL, 10);
	if (k >= m->n)
		return NULL;
	m->found++;
	return json_stringn_nocheck((const char *)m->buf + m->sp[k].start, m->sp[k].len);
}

/* Puts the strings back where their markers are (m->found counts them). */
static void restore(json_t *v, struct markers *m, unsigned depth)
{
	if (depth > 4096)
		return;
	if (json_is_object(v)) {
		for (void *it = json_object_iter(v); it; it = json_object_iter_next(v, it)) {
			json_t *x = json_object_iter_value(it), *str = unmark(m, x);
			if (str)
				json_object_iter_set_new(v, it, str);
			else
				restore(x, m, depth + 1);
		}
	} else if (json_is_array(v)) {
		for (size_t i = 0; i < json_array_size(v); i++) {
			json_t *x = json_array_get(v, i), *str = unmark(m, x);
			if (str)
				json_array_set_new(v, i, str);
			else
				restore(x, m, depth + 1);
		}
	}
}

json_t *jsonload(const uint8_t *buf, size_t len, size_t flags, json_error_t *err)
{
	struct span sp[MAX_SPANS];
	size_t n = len >= JSONLOAD_LARGE ? find_spans(buf, len, sp) : 0;
	if (!n)
		return json_loadb((const char *)buf, len, flags, err);
	/* A marker no text can hold by chance: a fresh random nonce. */
	char nonce[40];
	nonce[0] = '\x01';
	random_hex(nonce + 1, 16);
	size_t nlen = strlen(nonce);
	nonce[nlen++] = '#';
	nonce[nlen] = '\0';
	size_t cut = 0;
	for (size_t i = 0; i < n; i++)
		cut += sp[i].len;
	size_t cap = len - cut + n * (nlen + 24) + 1;
	char *text = malloc(cap);
	if (!text)
		return json_loadb((const char *)buf, len, flags, err);
	size_t o = 0, at = 0;
	for (size_t i = 0; i < n; i++) {
		memcpy(text + o, buf + at, sp[i].start - at);
		o += sp[i].start - at;
		/* \u0001 in the text: jansson's value then starts with the byte 1 */
		o += (size_t)snprintf(text + o, cap - o, "\\u0001%s%zu", nonce + 1, i);
		at = sp[i].start + sp[i].len;
	}
	memcpy(text + o, buf + at, len - at);
	o += len - at;
	json_t *root = json_loadb(text, o, flags, err);
	free(text);
	if (!root)
		return json_loadb((const char *)buf, len, flags, err);
	struct markers m = { .nonce = nonce, .nlen = nlen, .buf = buf, .sp = sp, .n = n };
	if (json_is_string(root)) {
		/* A text that is one large string */
		json_decref(root);
		return json_stringn_nocheck((const char *)buf + sp[0].start, sp[0].len);
	}
	restore(root, &m, 0);
	if (m.found != n) {
		/* Something unexpected (a duplicate key dropped one): the plain parse decides. */
		json_decref(root);
		return json_loadb((const char *)buf, len, flags, err);
	}
	return root;
}
