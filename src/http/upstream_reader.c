/* upstream_reader: see upstream.h (a file of its own, so that the fuzz target of what an
 * upstream answers links the reader and h1 only). */
#include <stdio.h>
#include <string.h>

#include "http/upstream.h"

static int fail(struct upstream_reader *r, const char *why)
{
	if (!r->failed) {
		r->failed = true;
		snprintf(r->why, sizeof(r->why), "%s", why);
	}
	return 502;
}

static int on_head(const struct h1_head *head, void *arg)
{
	struct upstream_reader *r = arg;
	int status = head->status;
	if (status < 100 || status > 999)
		return fail(r, "a status out of range");
	if (status < 200 && status != 101) {
		/* informational: dropped, the real answer follows */
		if (++r->interim > UPSTREAM_MAX_INTERIM)
			return fail(r, "too many informational answers");
		return 0;
	}
	if (status == 101 && !r->allow_upgrade)
		return fail(r, "switching protocols unasked");
	struct upstream_answer a = {
		.status = status,
		.nheaders = head->nheaders,
		.connection = h1_header(&r->h1, "connection"),
		.upgrade = status == 101,
	};
	if (status == 101 || status == 204 || status == 304)
		a.length = HTTP_LENGTH_NONE;
	else if (!head->chunked && (r->h1.parser.flags & F_CONTENTLENGTH))
		a.length = (int64_t)head->content_length;
	else
		a.length = r->head_request ? HTTP_LENGTH_NONE : HTTP_LENGTH_CHUNKED;
	r->head_done = true;
	r->upgraded = a.upgrade;
	if (r->cb->on_head && r->cb->on_head(&a, r->arg) < 0)
		return fail(r, "an answer refused");
	return 0;
}

static int on_body(const char *data, size_t len, void *arg)
{
	struct upstream_reader *r = arg;
	if (r->cb->on_body && r->cb->on_body(data, len, r->arg) < 0)
		return fail(r, "a body refused");
	return 0;
}

static const struct h1_callbacks reader_cbs = { .on_head = on_head, .on_body = on_body };

void upstream_reader_init(struct upstream_reader *r, const struct upstream_reader_cbs *cb,
			  void *arg, bool head_request, bool allow_upgrade)
{
	memset(r, 0, sizeof(*r));
	r->cb = cb;
	r->arg = arg;
	r->head_request = head_request;
	r->allow_upgrade = allow_upgrade;
	h1_init_response(&r->h1, &reader_cbs, r, head_request, UPSTREAM_MAX_HEAD,
			 UPSTREAM_MAX_HEAD);
}

void upstream_reader_free(struct upstream_reader *r)
{
	h1_free(&r->h1);
}

static ssize_t feed_failed(struct upstream_reader *r, int status)
{
	if (status == 431)
		fail(r, "a head too large");
	else if (status == 400)
		fail(r, http_errno_description(HTTP_PARSER_ERRNO(&r->h1.parser)));
	else
		fail(r, "a malformed answer");
	return -1;
}

ssize_t upstream_reader_feed(struct upstream_reader *r, const char *data, size_t len)
{
	if (r->failed)
		return -1;
	size_t used = 0;
	while (!r->done && used < len) {
		ssize_t n = h1_feed(&r->h1, data + used, len - used);
		if (n < 0)
			return feed_failed(r, (int)-n);
		used += (size_t)n;
		if (!h1_ended(&r->h1))
			continue; /* h1 took all of it */
		if (r->head_done)
			r->done = true;
		else
			h1_next(&r->h1); /* an informational answer ended */
	}
	return (ssize_t)used;
}

int upstream_reader_eof(struct upstream_reader *r)
{
	if (r->failed)
		return -1;
	if (r->done)
		return 0;
	int e = h1_eof(&r->h1);
	if (e < 0 && e != -400) {
		feed_failed(r, -e);
		return -1;
	}
	if (e == 0 && h1_ended(&r->h1) && r->head_done) {
		r->done = true;
		return 0;
	}
	fail(r, r->head_done ? "the connection closed before the answer was complete"
			     : "the connection closed without an answer");
	return -1;
}

void upstream_reader_header_at(const struct upstream_reader *r, size_t i, const char **name,
			       const char **value)
{
	h1_header_at(&r->h1, i, name, value);
}
