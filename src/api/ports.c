/* ports: what the API says about a session's ports and previews (docs/ingress.md).
 *
 *   GET  /exec/:id/ports                 the TCP ports listening in the sandbox, with their URLs
 *   GET  /exec/:id/preview               the preview's name, URLs, token and public ports
 *   POST /exec/:id/preview/token         a new token (every earlier one stops working)
 *   POST /exec/:id/preview/public        {"port": N, "public": bool}
 *
 * The proxying itself is proxy.c. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "api/api.h"
#include "net/net.h"
#include "session/ops.h"
#include "session/preview.h"
#include "util/cleanup.h"

static int served_port;

void api_preview_init(int port)
{
	served_port = port;
}

/* The host-form URL of a port (port 0: the template, with "{port}"). */
static json_t *host_url(const struct session *s, unsigned port)
{
	char p[12];
	if (port)
		snprintf(p, sizeof(p), "%u", port);
	else
		snprintf(p, sizeof(p), "{port}");
	char out[600];
	const char *tpl = api_cfg->preview_url;
	if (!tpl || !*tpl) {
		snprintf(out, sizeof(out), "http://%s-%s.%s:%d/", p, s->preview_name,
			 api_cfg->public_domain, served_port);
		return json_string(out);
	}
	/* {port} and {name} replaced, the rest as it is */
	size_t o = 0;
	for (const char *c = tpl; *c && o + 1 < sizeof(out);) {
		const char *rep = NULL;
		size_t skip = 1;
		if (!strncmp(c, "{port}", 6)) {
			rep = p;
			skip = 6;
		} else if (!strncmp(c, "{name}", 6)) {
			rep = s->preview_name;
			skip = 6;
		}
		if (rep) {
			int n = snprintf(out + o, sizeof(out) - o, "%s", rep);
			o = n < 0 ? o : o + (size_t)n;
			if (o >= sizeof(out))
				o = sizeof(out) - 1;
		} else {
			out[o++] = *c;
		}
		c += skip;
	}
	out[o] = '\0';
	return json_string(out);
}

static json_t *path_url(const struct session *s, unsigned port)
{
	char out[300];
	if (port)
		snprintf(out, sizeof(out), "/exec/%s/ports/%u/", s->preview_name, port);
	else
		snprintf(out, sizeof(out), "/exec/%s/ports/{port}/", s->preview_name);
	return json_string(out);
}

json_t *api_preview_json(const struct session *s, bool with_token)
{
	json_t *pub = json_array();
	for (size_t i = 0; i < s->npublic; i++)
		json_array_append_new(pub, json_integer(s->public_ports[i]));
	json_t *j = json_pack("{s:s, s:o, s:o, s:o}", "name", s->preview_name, "url",
			      host_url(s, 0), "pathUrl", path_url(s, 0), "publicPorts", pub);
	if (with_token) {
		char tok[SESSION_TOKEN_LEN + 1];
		session_token(s, SESSION_TOKEN_TRAFFIC, tok);
		json_object_set_new(j, "token", json_string(tok));
	}
	return j;
}

/* The caller's session named in the path, ready; replies and returns NULL otherwise. */
static struct session *path_session(struct http_ctx *ctx)
{
	const char *id = api_path_session_id(ctx);
	if (!id)
		return NULL;
	struct ops_target t = api_request_target(ctx, id, NULL);
	struct err e;
	struct session *s = ops_find_session(&t, &e);
	if (!s)
		api_reply_err(ctx, &e);
	return s;
}

struct ports_req {
	struct http_ctx *ctx;
	char id[130];
	char owner[64];
	bool any;
};

static void on_ports(struct ops_call *c, const struct ops_result *r, const struct err *err,
		     void *arg)
{
	struct ports_req *q = arg;
	struct http_ctx *ctx = q->ctx;
	if (err) {
		free(q);
		api_reply_err(ctx, err);
		return;
	}
	/* The session may have gone while the agent answered. */
	struct ops_target t = { .owner = q->owner, .session_id = q->id, .any_owner = q->any };
	struct err e;
	struct session *s = ops_find_session(&t, &e);
	free(q);
	if (!s) {
		api_reply_err(ctx, &e);
		return;
	}
	/* The resolver's sockets are the daemon's, opened in the sandbox's namespace: not the
	 * sandbox's ports. */
	struct net_sandbox_info ni;
	bool net = s->sandbox_id && net_sandbox_info(s->sandbox_id, &ni) == 0;
	json_t *list = json_array();
	size_t i;
	json_t *p;
	json_array_foreach (r->entries, i, p) {
		unsigned port = (unsigned)json_integer_value(json_object_get(p, "port"));
		if (net && port == 53 &&
		    !strcmp(json_string_value(json_object_get(p, "address")), ni.dns))
			continue;
		json_t *e2 = json_deep_copy(p);
		json_object_set_new(e2, "public", json_boolean(session_port_public(s, port)));
		json_object_set_new(e2, "url", host_url(s, port));
		json_object_set_new(e2, "pathUrl", path_url(s, port));
		json_array_append_new(list, e2);
	}
	http_reply_json(ctx, 200,
			json_pack("{s:o, s:b}", "ports", list, "truncated", r->truncated));
}

void api_exec_ports(struct http_ctx *ctx)
{
	const char *id = api_path_session_id(ctx);
	if (!id)
		return;
	struct ops_target t = api_request_target(ctx, id, NULL);
	struct ports_req *q = xcalloc(1, sizeof(*q));
	q->ctx = ctx;
	snprintf(q->id, sizeof(q->id), "%s", id);
	snprintf(q->owner, sizeof(q->owner), "%s", t.owner ? t.owner : "");
	q->any = t.any_owner;
	struct err e;
	if (!ops_list_ports(&t, on_ports, q, &e)) {
		free(q);
		api_reply_err(ctx, &e);
	}
}

void api_exec_preview(struct http_ctx *ctx)
{
	struct session *s = path_session(ctx);
	if (s)
		http_reply_json(ctx, 200, api_preview_json(s, true));
}

void api_exec_preview_token(struct http_ctx *ctx)
{
	struct session *s = path_session(ctx);
	if (!s)
		return;
	session_secret_rotate(s);
	http_reply_json(ctx, 200, api_preview_json(s, true));
}

void api_exec_preview_public(struct http_ctx *ctx)
{
	const char *id;
	json_t *body;
	if (api_id_and_body(ctx, &id, &body) < 0)
		return;
	json_t *port = json_object_get(body, "port"), *pub = json_object_get(body, "public");
	if (!json_is_integer(port) || json_integer_value(port) < 1 ||
	    json_integer_value(port) > 65535 || !json_is_boolean(pub)) {
		json_decref(body);
		http_reply_error(ctx, 400,
				 "the body is {\"port\": 1 to 65535, \"public\": true or false}");
		return;
	}
	struct session *s = path_session(ctx);
	if (!s) {
		json_decref(body);
		return;
	}
	if (session_port_set_public(s, (unsigned)json_integer_value(port), json_is_true(pub)) < 0) {
		json_decref(body);
		http_reply_error(ctx, 409, "at most %d ports of a session are public at once",
				 SESSION_PUBLIC_PORTS_MAX);
		return;
	}
	json_decref(body);
	http_reply_json(ctx, 200, api_preview_json(s, false));
}
