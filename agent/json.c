/* json: strict reader and compact writer (see json.h). */
#include "json.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"

/* Values and strings of one document come from a chain of blocks freed together. */
struct arena_block {
	struct arena_block *next;
	size_t used;
	size_t cap;
	_Alignas(16) unsigned char data[];
};

struct json_doc {
	struct arena_block *blocks;
	struct json *root;
	size_t first_cap; /* the first block's size, from the text's */
};

/* The arena's blocks: the first sized to the text (a request of a hundred bytes needs a few
 * hundred: a block of 64 KiB would be mapped and unmapped by the allocator around every
 * request, its pages faulted in each time), the next ones larger. */
#define ARENA_FIRST_MIN 1024
#define ARENA_BLOCK     65536

struct parser {
	const unsigned char *p;
	const unsigned char *end;
	const unsigned char *start;
	struct json_doc *doc;
	struct err *err;
	int depth;
};

static void *arena_alloc(struct json_doc *doc, size_t n)
{
	n = (n + 15) & ~(size_t)15;
	struct arena_block *b = doc->blocks;
	if (!b || b->cap - b->used < n) {
		size_t cap = b ? ARENA_BLOCK : doc->first_cap;
		if (cap < n)
			cap = n;
		b = xmalloc(sizeof(*b) + cap);
		b->cap = cap;
		b->used = 0;
		b->next = doc->blocks;
		doc->blocks = b;
	}
	void *r = b->data + b->used;
	b->used += n;
	return r;
}

static int fail(struct parser *ps, const char *what)
{
	return err_set(ps->err, EPROTO, "invalid JSON at byte %zu: %s", (size_t)(ps->p - ps->start),
		       what);
}

static void skip_ws(struct parser *ps)
{
	while (ps->p < ps->end &&
	       (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
		ps->p++;
}

size_t utf8_valid_seq(const unsigned char *p, size_t n)
{
	if (n == 0)
		return 0;
	unsigned char c = p[0];
	if (c < 0x80)
		return 1;
	size_t len;
	unsigned char lo = 0x80, hi = 0xbf; /* allowed range of the second byte */
	if (c >= 0xc2 && c <= 0xdf) {
		len = 2;
	} else if (c >= 0xe0 && c <= 0xef) {
		len = 3;
		if (c == 0xe0)
			lo = 0xa0; /* overlong */
		else if (c == 0xed)
			hi = 0x9f; /* UTF-16 surrogates */
	} else if (c >= 0xf0 && c <= 0xf4) {
		len = 4;
		if (c == 0xf0)
			lo = 0x90; /* overlong */
		else if (c == 0xf4)
			hi = 0x8f; /* above U+10FFFF */
	} else {
		return 0;
	}
	if (n < len || p[1] < lo || p[1] > hi)
		return 0;
	for (size_t i = 2; i < len; i++)
		if ((p[i] & 0xc0) != 0x80)
			return 0;
	return len;
}

static int hex4(const unsigned char *p, unsigned *out)
{
	unsigned v = 0;
	for (int i = 0; i < 4; i++) {
		unsigned char c = p[i];
		v <<= 4;
		if (c >= '0' && c <= '9')
			v |= c - '0';
		else if (c >= 'a' && c <= 'f')
			v |= c - 'a' + 10;
		else if (c >= 'A' && c <= 'F')
			v |= c - 'A' + 10;
		else
			return -1;
	}
	*out = v;
	return 0;
}

static size_t put_utf8(unsigned char *o, unsigned cp)
{
	if (cp < 0x80) {
		o[0] = (unsigned char)cp;
		return 1;
	}
	if (cp < 0x800) {
		o[0] = (unsigned char)(0xc0 | cp >> 6);
		o[1] = (unsigned char)(0x80 | (cp & 0x3f));
		return 2;
	}
	if (cp < 0x10000) {
		o[0] = (unsigned char)(0xe0 | cp >> 12);
		o[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
		o[2] = (unsigned char)(0x80 | (cp & 0x3f));
		return 3;
	}
	o[0] = (unsigned char)(0xf0 | cp >> 18);
	o[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3f));
	o[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3f));
	o[3] = (unsigned char)(0x80 | (cp & 0x3f));
	return 4;
}

/* Parses a string starting at the opening quote. The decoded form is never longer than the
 * encoded one, so one allocation of the encoded length suffices. */
static int parse_string(struct parser *ps, const char **ret, size_t *ret_len)
{
	const unsigned char *q = ps->p + 1;
	/* Find the closing quote first to size the output. */
	const unsigned char *e = q;
	while (e < ps->end && *e != '"') {
		if (*e == '\\') {
			if (e + 1 >= ps->end)
				break;
			e += 2;
		} else {
			e++;
		}
	}
	if (e >= ps->end)
		return fail(ps, "unterminated string");

	unsigned char *out = arena_alloc(ps->doc, (size_t)(e - q) + 1);
	size_t o = 0;
	ps->p = q;
	while (ps->p < e) {
		unsigned char c = *ps->p;
		if (c < 0x20)
			return fail(ps, "control character in string");
		if (c != '\\') {
			size_t k = utf8_valid_seq(ps->p, (size_t)(e - ps->p));
			if (!k)
				return fail(ps, "invalid UTF-8 in string");
			memcpy(out + o, ps->p, k);
			o += k;
			ps->p += k;
			continue;
		}
		c = ps->p[1];
		ps->p += 2;
		switch (c) {
		case '"':
		case '\\':
		case '/':
			out[o++] = c;
			break;
		case 'b':
			out[o++] = '\b';
			break;
		case 'f':
			out[o++] = '\f';
			break;
		case 'n':
			out[o++] = '\n';
			break;
		case 'r':
			out[o++] = '\r';
			break;
		case 't':
			out[o++] = '\t';
			break;
		case 'u': {
			unsigned cp;
			ps->p -= 2;
			if (e - ps->p < 6 || hex4(ps->p + 2, &cp) < 0)
				return fail(ps, "bad \\u escape");
			ps->p += 6;
			if (cp >= 0xdc00 && cp <= 0xdfff)
				return fail(ps, "unpaired low surrogate");
			if (cp >= 0xd800 && cp <= 0xdbff) {
				unsigned lo;
				if (e - ps->p < 6 || ps->p[0] != '\\' || ps->p[1] != 'u' ||
				    hex4(ps->p + 2, &lo) < 0 || lo < 0xdc00 || lo > 0xdfff)
					return fail(ps, "unpaired high surrogate");
				ps->p += 6;
				cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
			}
			o += put_utf8(out + o, cp);
			break;
		}
		default:
			ps->p -= 2;
			return fail(ps, "bad escape in string");
		}
	}
	out[o] = '\0';
	ps->p = e + 1;
	*ret = (const char *)out;
	*ret_len = o;
	return 0;
}

static int parse_number(struct parser *ps, struct json *v)
{
	const unsigned char *s = ps->p;
	const unsigned char *q = s;
	bool neg = false, integral = true;
	if (q < ps->end && *q == '-') {
		neg = true;
		q++;
	}
	if (q >= ps->end || *q < '0' || *q > '9')
		return fail(ps, "bad number");
	uint64_t mag = 0;
	bool big = false;
	if (*q == '0') {
		q++;
	} else {
		while (q < ps->end && *q >= '0' && *q <= '9') {
			if (mag > (UINT64_MAX - 9) / 10)
				big = true;
			else
				mag = mag * 10 + (uint64_t)(*q - '0');
			q++;
		}
	}
	if (q < ps->end && *q == '.') {
		integral = false;
		q++;
		if (q >= ps->end || *q < '0' || *q > '9')
			return fail(ps, "bad number: digits expected after the point");
		while (q < ps->end && *q >= '0' && *q <= '9')
			q++;
	}
	if (q < ps->end && (*q == 'e' || *q == 'E')) {
		integral = false;
		q++;
		if (q < ps->end && (*q == '+' || *q == '-'))
			q++;
		if (q >= ps->end || *q < '0' || *q > '9')
			return fail(ps, "bad number: digits expected in the exponent");
		while (q < ps->end && *q >= '0' && *q <= '9')
			q++;
	}
	if (integral) {
		if (big || mag > (uint64_t)JSON_INT_MAX)
			return fail(ps, "integer out of range (more than 2^53)");
		v->type = JSON_INT;
		v->u.i = neg ? -(int64_t)mag : (int64_t)mag;
		ps->p = q;
		return 0;
	}
	/* strtod needs a terminated copy; the token is short unless the input is silly. */
	size_t n = (size_t)(q - s);
	char small[64];
	_cleanup_free_ char *heap = NULL;
	char *tmp = small;
	if (n >= sizeof(small))
		tmp = heap = xmalloc(n + 1);
	memcpy(tmp, s, n);
	tmp[n] = '\0';
	char *endp;
	double d = strtod(tmp, &endp);
	if (endp != tmp + n || !isfinite(d))
		return fail(ps, "number out of range");
	v->type = JSON_REAL;
	v->u.d = d;
	ps->p = q;
	return 0;
}

static int parse_value(struct parser *ps, struct json **ret);

static int cmp_key(const void *a, const void *b)
{
	const struct json *x = *(struct json *const *)a, *y = *(struct json *const *)b;
	return strcmp(x->key, y->key);
}

/* Sorting a copy of the member list finds duplicates in n log n, so a large object cannot
 * make the parser quadratic. */
static int check_duplicates(struct parser *ps, struct json *obj)
{
	if (obj->u.kids.n < 2)
		return 0;
	_cleanup_free_ struct json **v = xmalloc(obj->u.kids.n * sizeof(*v));
	size_t i = 0;
	for (struct json *m = obj->u.kids.first; m; m = m->next)
		v[i++] = m;
	qsort(v, obj->u.kids.n, sizeof(*v), cmp_key);
	for (i = 1; i < obj->u.kids.n; i++)
		if (strcmp(v[i - 1]->key, v[i]->key) == 0)
			return err_set(ps->err, EPROTO, "invalid JSON: duplicate key `%s`",
				       v[i]->key);
	return 0;
}

static int parse_container(struct parser *ps, struct json *v, bool object)
{
	if (++ps->depth > JSON_MAX_DEPTH)
		return fail(ps, "nesting too deep");
	unsigned char close = object ? '}' : ']';
	v->type = object ? JSON_OBJECT : JSON_ARRAY;
	ps->p++;
	skip_ws(ps);
	struct json **tail = &v->u.kids.first;
	if (ps->p < ps->end && *ps->p == close) {
		ps->p++;
		ps->depth--;
		return 0;
	}
	for (;;) {
		const char *key = NULL;
		if (object) {
			size_t klen;
			if (ps->p >= ps->end || *ps->p != '"')
				return fail(ps, "object key expected");
			int r = parse_string(ps, &key, &klen);
			if (r < 0)
				return r;
			if (strlen(key) != klen)
				return fail(ps, "NUL byte in object key");
			skip_ws(ps);
			if (ps->p >= ps->end || *ps->p != ':')
				return fail(ps, "':' expected");
			ps->p++;
		}
		struct json *kid;
		int r = parse_value(ps, &kid);
		if (r < 0)
			return r;
		kid->key = key;
		*tail = kid;
		tail = &kid->next;
		v->u.kids.n++;
		skip_ws(ps);
		if (ps->p >= ps->end)
			return fail(ps, object ? "unterminated object" : "unterminated array");
		if (*ps->p == ',') {
			ps->p++;
			skip_ws(ps);
			continue;
		}
		if (*ps->p == close) {
			ps->p++;
			break;
		}
		return fail(ps, object ? "',' or '}' expected" : "',' or ']' expected");
	}
	ps->depth--;
	return object ? check_duplicates(ps, v) : 0;
}

static int parse_literal(struct parser *ps, const char *word)
{
	size_t n = strlen(word);
	if ((size_t)(ps->end - ps->p) < n || memcmp(ps->p, word, n) != 0)
		return fail(ps, "unexpected character");
	ps->p += n;
	return 0;
}

static int parse_value(struct parser *ps, struct json **ret)
{
	skip_ws(ps);
	if (ps->p >= ps->end)
		return fail(ps, "value expected");
	struct json *v = arena_alloc(ps->doc, sizeof(*v));
	memset(v, 0, sizeof(*v));
	int r;
	switch (*ps->p) {
	case '{':
	case '[':
		r = parse_container(ps, v, *ps->p == '{');
		break;
	case '"':
		v->type = JSON_STRING;
		r = parse_string(ps, &v->u.str.s, &v->u.str.len);
		break;
	case 't':
		v->type = JSON_BOOL;
		v->u.b = true;
		r = parse_literal(ps, "true");
		break;
	case 'f':
		v->type = JSON_BOOL;
		r = parse_literal(ps, "false");
		break;
	case 'n':
		v->type = JSON_NULL;
		r = parse_literal(ps, "null");
		break;
	default:
		r = parse_number(ps, v);
	}
	if (r < 0)
		return r;
	*ret = v;
	return 0;
}

int json_parse(const char *buf, size_t len, struct json_doc **ret, struct err *err)
{
	if (len > JSON_MAX_INPUT)
		return err_set(err, EMSGSIZE, "JSON text too large (%zu bytes, at most %u)", len,
			       JSON_MAX_INPUT);
	struct json_doc *doc = xcalloc(1, sizeof(*doc));
	doc->first_cap = len < ARENA_BLOCK / 8 ? 8 * len : ARENA_BLOCK;
	if (doc->first_cap < ARENA_FIRST_MIN)
		doc->first_cap = ARENA_FIRST_MIN;
	struct parser ps = {
		.p = (const unsigned char *)buf,
		.end = (const unsigned char *)buf + len,
		.start = (const unsigned char *)buf,
		.doc = doc,
		.err = err,
	};
	int r = parse_value(&ps, &doc->root);
	if (r >= 0) {
		skip_ws(&ps);
		if (ps.p != ps.end)
			r = fail(&ps, "trailing characters after the value");
	}
	if (r < 0) {
		json_doc_free(doc);
		return r;
	}
	*ret = doc;
	return 0;
}

const struct json *json_root(const struct json_doc *doc)
{
	return doc->root;
}

struct json_doc *json_doc_free(struct json_doc *doc)
{
	if (!doc)
		return NULL;
	struct arena_block *b = doc->blocks;
	while (b) {
		struct arena_block *n = b->next;
		free(b);
		b = n;
	}
	free(doc);
	return NULL;
}

const struct json *json_get(const struct json *obj, const char *key)
{
	if (!obj || obj->type != JSON_OBJECT)
		return NULL;
	for (const struct json *m = obj->u.kids.first; m; m = m->next)
		if (strcmp(m->key, key) == 0)
			return m;
	return NULL;
}

const char *json_str(const struct json *v)
{
	if (!v || v->type != JSON_STRING || strlen(v->u.str.s) != v->u.str.len)
		return NULL;
	return v->u.str.s;
}

const char *json_type_name(enum json_type t)
{
	switch (t) {
	case JSON_NULL:
		return "null";
	case JSON_BOOL:
		return "boolean";
	case JSON_INT:
		return "integer";
	case JSON_REAL:
		return "number";
	case JSON_STRING:
		return "string";
	case JSON_ARRAY:
		return "array";
	case JSON_OBJECT:
		return "object";
	}
	return "value";
}

/* --- writer --- */

void jw_init(struct jw *w)
{
	memset(w, 0, sizeof(*w));
}

void jw_free(struct jw *w)
{
	free(w->buf);
	jw_init(w);
}

static void jw_reserve(struct jw *w, size_t n)
{
	if (w->cap - w->len > n)
		return;
	size_t cap = w->cap ? w->cap : 256;
	while (cap - w->len <= n)
		cap *= 2;
	w->buf = xrealloc(w->buf, cap);
	w->cap = cap;
}

static void jw_put(struct jw *w, const char *s, size_t n)
{
	jw_reserve(w, n);
	memcpy(w->buf + w->len, s, n);
	w->len += n;
	w->buf[w->len] = '\0';
}

static void jw_sep(struct jw *w)
{
	if (w->comma && !w->after_key)
		jw_put(w, ",", 1);
	w->after_key = false;
}

static void jw_open(struct jw *w, const char *c)
{
	jw_sep(w);
	jw_put(w, c, 1);
	w->comma = false;
}

static void jw_close(struct jw *w, const char *c)
{
	jw_put(w, c, 1);
	w->comma = true;
}

void jw_obj_open(struct jw *w)
{
	jw_open(w, "{");
}

void jw_obj_close(struct jw *w)
{
	jw_close(w, "}");
}

void jw_arr_open(struct jw *w)
{
	jw_open(w, "[");
}

void jw_arr_close(struct jw *w)
{
	jw_close(w, "]");
}

static void jw_quoted(struct jw *w, const char *s, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *p = (const unsigned char *)s;
	jw_reserve(w, n + 2);
	jw_put(w, "\"", 1);
	size_t i = 0;
	while (i < n) {
		/* Copy the longest run that needs no escaping at once. */
		size_t j = i;
		while (j < n && p[j] >= 0x20 && p[j] < 0x80 && p[j] != '"' && p[j] != '\\')
			j++;
		if (j > i) {
			jw_put(w, s + i, j - i);
			i = j;
			continue;
		}
		unsigned char c = p[i];
		char esc[7] = { '\\', 0 };
		switch (c) {
		case '"':
		case '\\':
			esc[1] = (char)c;
			jw_put(w, esc, 2);
			i++;
			continue;
		case '\n':
			jw_put(w, "\\n", 2);
			i++;
			continue;
		case '\t':
			jw_put(w, "\\t", 2);
			i++;
			continue;
		case '\r':
			jw_put(w, "\\r", 2);
			i++;
			continue;
		}
		if (c < 0x20) {
			memcpy(esc, "\\u00", 4);
			esc[4] = hex[c >> 4];
			esc[5] = hex[c & 15];
			jw_put(w, esc, 6);
			i++;
			continue;
		}
		size_t k = utf8_valid_seq(p + i, n - i);
		if (k) {
			jw_put(w, s + i, k);
			i += k;
		} else {
			jw_put(w, "\xef\xbf\xbd", 3);
			i++;
		}
	}
	jw_put(w, "\"", 1);
}

void jw_key(struct jw *w, const char *key)
{
	jw_sep(w);
	jw_quoted(w, key, strlen(key));
	jw_put(w, ":", 1);
	w->after_key = true;
}

void jw_strn(struct jw *w, const char *s, size_t n)
{
	jw_sep(w);
	jw_quoted(w, s, n);
	w->comma = true;
}

void jw_str(struct jw *w, const char *s)
{
	jw_strn(w, s, strlen(s));
}

static void jw_scalar(struct jw *w, const char *s, size_t n)
{
	jw_sep(w);
	jw_put(w, s, n);
	w->comma = true;
}

void jw_int(struct jw *w, int64_t v)
{
	char b[32];
	int n = snprintf(b, sizeof(b), "%lld", (long long)v);
	jw_scalar(w, b, (size_t)n);
}

void jw_bool(struct jw *w, bool v)
{
	if (v)
		jw_scalar(w, "true", 4);
	else
		jw_scalar(w, "false", 5);
}

void jw_null(struct jw *w)
{
	jw_scalar(w, "null", 4);
}

void jw_fixed(struct jw *w, double v, int decimals)
{
	if (!isfinite(v)) {
		jw_null(w);
		return;
	}
	char b[64];
	int n = snprintf(b, sizeof(b), "%.*f", decimals, v);
	if (n < 0 || (size_t)n >= sizeof(b)) {
		jw_null(w);
		return;
	}
	jw_scalar(w, b, (size_t)n);
}

void jw_timespec(struct jw *w, int64_t sec, long nsec)
{
	char b[48];
	int n;
	if (sec < 0 && nsec > 0) {
		/* -1 s + 0.25 s is -0.75 s. */
		n = snprintf(b, sizeof(b), "-%lld.%09ld", -(long long)(sec + 1),
			     1000000000L - nsec);
	} else {
		n = snprintf(b, sizeof(b), "%lld.%09ld", (long long)sec, nsec);
	}
	jw_scalar(w, b, (size_t)n);
}
