/* h1: see h1.h. http_parser does the grammar (request line, header syntax, Content-Length
 * versus Transfer-Encoding, chunked decoding); this file keeps what the server needs of a
 * request, bounds it, and stops at the end of each request. */
#include "h1.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define STORE_MIN 256

static struct h1 *of(http_parser *p)
{
	return p->data;
}

/* Records a failure: the first status wins, and the callback returning non-zero makes
 * http_parser stop with HPE_CB_*. */
static int fail(struct h1 *h, int status)
{
	if (!h->status)
		h->status = status;
	return -1;
}

static int add_header_bytes(struct h1 *h, size_t len)
{
	h->header_bytes += len;
	return h->header_bytes > h->max_header ? fail(h, 431) : 0;
}

/* Appends to the store, keeping room for a NUL after it. Bounded by the callers' limits. */
static void store_add(struct h1 *h, const char *data, size_t len)
{
	if (h->store_len + len + 1 > h->store_cap) {
		size_t cap = h->store_cap ? h->store_cap : STORE_MIN;
		while (cap < h->store_len + len + 1)
			cap *= 2;
		h->store = realloc(h->store, cap);
		if (!h->store)
			abort();
		h->store_cap = cap;
	}
	memcpy(h->store + h->store_len, data, len);
	h->store_len += len;
	h->store[h->store_len] = '\0';
}

/* Ends a stored string: its NUL is kept. */
static void store_end(struct h1 *h)
{
	store_add(h, "", 0);
	h->store_len++;
}

static int on_message_begin(http_parser *p)
{
	struct h1 *h = of(p);
	memset(&h->head, 0, sizeof(h->head));
	h->body_seen = 0;
	h->header_bytes = 0;
	h->store_len = 0;
	h->name_len = h->value_len = 0;
	h->in_target = true;
	h->in_value = false;
	h->head_done = false;
	h->started = true;
	return 0;
}

static int on_url(http_parser *p, const char *at, size_t len)
{
	struct h1 *h = of(p);
	if (add_header_bytes(h, len) < 0)
		return -1;
	if (len > H1_MAX_TARGET - h->head.target_len)
		return fail(h, 414);
	store_add(h, at, len);
	h->head.target_len += len;
	return 0;
}

static void end_target(struct h1 *h)
{
	if (!h->in_target)
		return;
	h->in_target = false;
	store_end(h);
}

/* Headers a request may not carry twice: which of two keys, hosts or lengths counts is
 * exactly what a request smuggler plays on. */
static bool once_only(const char *name)
{
	static const char *const names[] = {
		"host",         "authorization",  "x-api-key",         "expect", "upgrade",
		"content-type", "content-length", "sec-websocket-key", "origin", "mcp-session-id",
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!strcasecmp(name, names[i]))
			return true;
	return false;
}

/* A value is complete: http_parser leaves the whitespace that may end it (RFC 9110 5.5). */
static void end_value(struct h1 *h)
{
	if (!h->in_value)
		return;
	while (h->value_len &&
	       (h->store[h->store_len - 1] == ' ' || h->store[h->store_len - 1] == '\t')) {
		h->store[--h->store_len] = '\0';
		h->value_len--;
	}
	store_end(h);
	h->in_value = false;
	h->head.nheaders++;
}

/* A character of a token (RFC 9110 5.6.2), which a field name is made of. */
static bool tchar(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       (c && strchr("!#$%&'*+-.^_`|~", c));
}

static int on_header_field(http_parser *p, const char *at, size_t len)
{
	struct h1 *h = of(p);
	if (add_header_bytes(h, len) < 0)
		return -1;
	/* RFC 9112 5.1: no whitespace between a field name and its colon, refused with 400.
	 * The parser tolerates it, and would take "Transfer-Encoding :" for the framing while
	 * "Host :" passed the duplicate check under another name. */
	for (size_t i = 0; i < len; i++)
		if (!tchar((unsigned char)at[i]))
			return fail(h, 400);
	if (h->head_done)
		return 0; /* a trailer: counted, not kept */
	end_target(h);
	if (h->in_value || h->name_len == 0) {
		end_value(h);
		if (h->head.nheaders == H1_MAX_HEADERS)
			return fail(h, 431);
		h->name_at[h->head.nheaders] = (uint32_t)h->store_len;
		h->name_len = 0;
	}
	if (len > H1_MAX_FIELD - h->name_len)
		return fail(h, 431);
	store_add(h, at, len);
	h->name_len += len;
	return 0;
}

static int on_header_value(http_parser *p, const char *at, size_t len)
{
	struct h1 *h = of(p);
	if (add_header_bytes(h, len) < 0)
		return -1;
	if (h->head_done)
		return 0;
	if (!h->in_value) {
		store_end(h); /* the name's */
		size_t i = h->head.nheaders;
		const char *name = h->store + h->name_at[i];
		if (!h->response && once_only(name) && h1_header(h, name))
			return fail(h, 400);
		h->value_at[i] = (uint32_t)h->store_len;
		h->in_value = true;
		h->value_len = 0;
		h->name_len = 0;
	}
	if (len > h->max_value - h->value_len)
		return fail(h, 431);
	store_add(h, at, len);
	h->value_len += len;
	return 0;
}

static int on_headers_complete(http_parser *p)
{
	struct h1 *h = of(p);
	struct h1_head *head = &h->head;
	end_target(h);
	end_value(h);
	h->head_done = true;
	head->target = h->store;
	head->http_major = p->http_major;
	head->http_minor = p->http_minor;
	head->keep_alive = http_should_keep_alive(p) != 0;
	head->upgrade = p->upgrade != 0;
	if (h->response) {
		head->status = (int)p->status_code;
		head->chunked = (p->flags & F_CHUNKED) != 0;
		head->content_length = (p->flags & F_CONTENTLENGTH) ? p->content_length : 0;
		/* A 101 switches protocols whatever headers came with it. */
		head->upgrade = head->upgrade || head->status == 101;
		int status = h->cb->on_head ? h->cb->on_head(head, h->arg) : 0;
		if (status)
			return fail(h, status);
		/* RFC 9112 6.3: the answer to a HEAD, a 1xx (101: what follows is the new
		 * protocol's), a 204 and a 304 have no body, whatever their heads say (http_parser
		 * would read one that a Content-Length or chunked announces). */
		bool bodiless = head->status < 200 || head->status == 204 || head->status == 304;
		return h->skip_body || bodiless ? 1 : 0;
	}
	head->host = h1_header(h, "host");
	/* RFC 9112 3.2: a 1.1 request without Host is refused. */
	if (p->http_major == 1 && p->http_minor >= 1 && !head->host)
		return fail(h, 400);
	head->authorization = h1_header(h, "authorization");
	const char *expect = h1_header(h, "expect");
	if (expect) {
		if (strcasecmp(expect, "100-continue"))
			return fail(h, 417);
		head->expect_continue = true;
	}
	head->method = (enum http_method)p->method;
	head->chunked = (p->flags & F_CHUNKED) != 0;
	head->content_length = (p->flags & F_CONTENTLENGTH) ? p->content_length : 0;
	int status = h->cb->on_head ? h->cb->on_head(head, h->arg) : 0;
	if (status)
		return fail(h, status);
	/* After on_head, which may have set the route's own limit. */
	if (head->content_length > h->max_body)
		return fail(h, 413);
	return 0;
}

static int on_body(http_parser *p, const char *at, size_t len)
{
	struct h1 *h = of(p);
	if (len > h->max_body - h->body_seen)
		return fail(h, 413);
	h->body_seen += len;
	int status = h->cb->on_body ? h->cb->on_body(at, len, h->arg) : 0;
	return status ? fail(h, status) : 0;
}

static int on_message_complete(http_parser *p)
{
	struct h1 *h = of(p);
	int status = h->cb->on_end ? h->cb->on_end(h->arg) : 0;
	if (status)
		return fail(h, status);
	h->ended = true;
	/* One request at a time: the rest of the bytes wait for h1_next. */
	http_parser_pause(p, 1);
	return 0;
}

static const http_parser_settings settings = {
	.on_message_begin = on_message_begin,
	.on_url = on_url,
	.on_header_field = on_header_field,
	.on_header_value = on_header_value,
	.on_headers_complete = on_headers_complete,
	.on_body = on_body,
	.on_message_complete = on_message_complete,
};

void h1_init(struct h1 *h, const struct h1_callbacks *cb, void *arg, uint64_t max_body)
{
	memset(h, 0, sizeof(*h));
	http_parser_init(&h->parser, HTTP_REQUEST);
	h->parser.data = h;
	h->cb = cb;
	h->arg = arg;
	h->max_body = max_body;
	h->max_value = H1_MAX_VALUE;
	h->max_header = H1_MAX_HEADER;
}

void h1_init_response(struct h1 *h, const struct h1_callbacks *cb, void *arg, bool head_request,
		      size_t max_header, size_t max_value)
{
	h1_init(h, cb, arg, UINT64_MAX);
	http_parser_init(&h->parser, HTTP_RESPONSE);
	h->parser.data = h;
	h->response = true;
	h->skip_body = head_request;
	h->max_header = max_header;
	h->max_value = max_value;
}

void h1_set_max_body(struct h1 *h, uint64_t max_body)
{
	h->max_body = max_body;
}

/* The status for an error http_parser found itself. */
static int status_for(enum http_errno e)
{
	switch (e) {
	case HPE_HEADER_OVERFLOW:
		return 431;
	default:
		return 400;
	}
}

ssize_t h1_feed(struct h1 *h, const char *data, size_t len)
{
	if (h->status)
		return -h->status;
	if (h->ended || len == 0)
		return 0;
	size_t n = http_parser_execute(&h->parser, &settings, data, len);
	enum http_errno e = HTTP_PARSER_ERRNO(&h->parser);
	if (h->status)
		return -h->status;
	if (e == HPE_PAUSED && h->ended)
		return (ssize_t)n;
	if (e != HPE_OK || n != len) {
		/* Without an error, http_parser stops early only after an upgrade's request,
		 * which on_message_complete has paused on. */
		h->status = e != HPE_OK ? status_for(e) : 400;
		return -h->status;
	}
	return (ssize_t)n;
}

bool h1_ended(const struct h1 *h)
{
	return h->ended;
}

const char *h1_header(const struct h1 *h, const char *name)
{
	for (size_t i = 0; i < h->head.nheaders; i++)
		if (!strcasecmp(h->store + h->name_at[i], name))
			return h->store + h->value_at[i];
	return NULL;
}

void h1_header_at(const struct h1 *h, size_t i, const char **name, const char **value)
{
	*name = h->store + h->name_at[i];
	*value = h->store + h->value_at[i];
}

void h1_next(struct h1 *h)
{
	h->ended = false;
	h->started = false;
	memset(&h->head, 0, sizeof(h->head));
	free(h->store);
	h->store = NULL;
	h->store_len = h->store_cap = 0;
	http_parser_pause(&h->parser, 0);
}

void h1_free(struct h1 *h)
{
	free(h->store);
	h->store = NULL;
	h->store_len = h->store_cap = 0;
}

int h1_eof(struct h1 *h)
{
	if (h->status)
		return -h->status;
	if (h->ended)
		return 0;
	http_parser_execute(&h->parser, &settings, NULL, 0);
	if (h->status)
		return -h->status;
	/* http_parser accepts EOF only between requests (HPE_INVALID_EOF_STATE within one). */
	if (HTTP_PARSER_ERRNO(&h->parser) == HPE_OK || (h->ended && h->response))
		return 0;
	return -400;
}
