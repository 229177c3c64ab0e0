/* upstream: see upstream.h. */
#include "http/upstream.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "util/text.h"

static bool listed(const char *name, const char *const *names, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!strcasecmp(name, names[i]))
			return true;
	return false;
}

bool upstream_hop_request_header(const char *name, const char *connection)
{
	static const char *const drop[] = {
		"Connection",
		"Keep-Alive",
		"Proxy-Connection",
		"Proxy-Authorization",
		"TE",
		"Trailer",
		"Transfer-Encoding",
		"Upgrade",
		"Content-Length",
		"Expect",
	};
	if (listed(name, drop, sizeof(drop) / sizeof(*drop)))
		return true;
	/* A client names hop-by-hop headers in Connection, but not the upstream's Host. */
	return connection && strcasecmp(name, "Host") != 0 && token_listed(connection, name);
}

bool upstream_hop_response_header(const char *name, const char *connection)
{
	static const char *const drop[] = {
		"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding",
		"TE",         "Trailer",    "Upgrade",          "Content-Length",
		"Date",
	};
	if (listed(name, drop, sizeof(drop) / sizeof(*drop)))
		return true;
	return connection && token_listed(connection, name);
}

bool upstream_write_head(struct evbuffer *out, struct http_ctx *ctx,
			 const struct upstream_request *r)
{
	evbuffer_add_printf(out, "%s %s HTTP/1.1\r\n", http_method(ctx),
			    r->target && *r->target ? r->target : "/");
	const char *connection = http_header(ctx, "Connection");
	size_t n = http_header_count(ctx);
	for (size_t i = 0; i < n; i++) {
		const char *name, *value;
		http_header_at(ctx, i, &name, &value);
		if (upstream_hop_request_header(name, connection))
			continue;
		if (r->filter && r->filter(name, value, out, r->arg) == UPSTREAM_DROP)
			continue;
		evbuffer_add_printf(out, "%s: %s\r\n", name, value);
	}
	if (r->extra)
		r->extra(out, r->arg);
	uint64_t length = 0;
	bool chunked = false;
	if (r->buffered)
		http_body(ctx, &length);
	else
		http_body_framing(ctx, &length, &chunked);
	if (chunked)
		evbuffer_add(out, "Transfer-Encoding: chunked\r\n", 28);
	else if (length)
		evbuffer_add_printf(out, "Content-Length: %llu\r\n", (unsigned long long)length);
	const char *upgrade = http_header(ctx, "Upgrade");
	if (r->upgrade && upgrade)
		evbuffer_add_printf(out, "Connection: Upgrade\r\nUpgrade: %s\r\n", upgrade);
	else
		evbuffer_add(out, "Connection: close\r\n", 19);
	evbuffer_add(out, "\r\n", 2);
	if (r->buffered) {
		size_t len;
		const uint8_t *body = http_body(ctx, &len);
		if (len)
			evbuffer_add(out, body, len);
	}
	return chunked;
}

size_t upstream_chunk_header(char buf[24], size_t len)
{
	return (size_t)snprintf(buf, 24, "%zx\r\n", len);
}

void upstream_body_piece(struct evbuffer *out, const void *data, size_t len, bool chunked)
{
	if (!len)
		return; /* an empty chunk would end a chunked body */
	if (chunked) {
		char hdr[24];
		evbuffer_add(out, hdr, upstream_chunk_header(hdr, len));
	}
	evbuffer_add(out, data, len);
	if (chunked)
		evbuffer_add(out, "\r\n", 2);
}

void upstream_body_end(struct evbuffer *out, bool chunked)
{
	if (chunked)
		evbuffer_add(out, "0\r\n\r\n", 5);
}
