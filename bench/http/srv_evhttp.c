/* srv_evhttp: the benchmark's baseline, evhttp with the settings of src/http/http.c. evhttp
 * reads the whole request, body included, before it calls us: route and key are checked
 * last. */
#include <event2/buffer.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <string.h>

#include "route.h"
#include "servers.h"

static void reply_status(struct evhttp_request *req, int status, const char *reason)
{
	struct evbuffer *out = evhttp_request_get_output_buffer(req);
	evbuffer_add_printf(out, "{\"error\":\"%s\"}", reason);
	evhttp_send_reply(req, status, reason, NULL);
}

static void on_request(struct evhttp_request *req, void *arg)
{
	const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
	const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
	const char *id;
	int id_len = path ? route_match(path, strlen(path), &id) : -1;
	if (id_len < 0) {
		reply_status(req, 404, "Not Found");
		return;
	}
	if (evhttp_request_get_command(req) != EVHTTP_REQ_POST) {
		reply_status(req, 405, "Method Not Allowed");
		return;
	}
	struct evkeyvalq *headers = evhttp_request_get_input_headers(req);
	if (!route_key_ok(evhttp_find_header(headers, "Authorization"))) {
		reply_status(req, 401, "Unauthorized");
		return;
	}
	/* The whole body, contiguous, as http_body() makes it. */
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	size_t body_len = evbuffer_get_length(in);
	if (body_len)
		evbuffer_pullup(in, -1);

	char body[256];
	size_t n = route_reply(body, sizeof(body), id, (size_t)id_len, body_len);
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
			  "application/json");
	evbuffer_add(evhttp_request_get_output_buffer(req), body, n);
	evhttp_send_reply(req, 200, "OK", NULL);
}

int srv_evhttp_start(struct event_base *base, int fd)
{
	struct evhttp *evh = evhttp_new(base);
	if (!evh) {
		fprintf(stderr, "evhttp_new failed\n");
		return -1;
	}
	evhttp_set_allowed_methods(evh, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_PUT |
						EVHTTP_REQ_DELETE | EVHTTP_REQ_PATCH |
						EVHTTP_REQ_HEAD | EVHTTP_REQ_OPTIONS);
	evhttp_set_max_body_size(evh, ROUTE_MAX_BODY);
	evhttp_set_max_headers_size(evh, 64 * 1024);
	evhttp_set_default_content_type(evh, "application/json");
	evhttp_set_flags(evh, EVHTTP_SERVER_LINGERING_CLOSE);
	evhttp_set_timeout(evh, ROUTE_IDLE_S);
	evhttp_set_gencb(evh, on_request, NULL);
	if (!evhttp_accept_socket_with_handle(evh, fd)) {
		fprintf(stderr, "evhttp_accept_socket_with_handle failed\n");
		return -1;
	}
	return 0;
}
