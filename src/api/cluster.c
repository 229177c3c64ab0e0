#include "api/cluster.h"

#include <curl/curl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api.h"
#include "api/host.h"
#include "api/mcp.h"
#include "api/auth.h"
#include "cluster/cluster.h"
#include "api/forward.h"
#include "metrics/metrics.h"
#include "util/cleanup.h"
#include "util/log.h"

#define FANOUT_MAX_BODY    (64u << 20)
#define FANOUT_MAX_WAITING 32

static unsigned fanouts; /* listings being gathered */

static bool session_route(const struct http_route *r)
{
	return r && (!strncmp(r->pattern, "/exec/:id", 9) ||
		     !strncmp(r->pattern, "/sandboxes/:id", 14) ||
		     !strncmp(r->pattern, "/v2/sandboxes/:id", 17));
}

static bool e2b_data_plane(const struct http_route *r)
{
	return r == &api_envd_route;
}

/* 410 (E2B's data plane: 502) for a session whose node is gone. */
static int lost(struct http_ctx *ctx, const char *id, const struct cluster_node *n)
{
	char when[40] = "a moment ago";
	if (n->down_ms) {
		time_t t = (time_t)(n->down_ms / 1000);
		struct tm tm;
		gmtime_r(&t, &tm);
		strftime(when, sizeof(when), "at %Y-%m-%dT%H:%M:%SZ", &tm);
	}
	char msg[400];
	snprintf(msg, sizeof(msg),
		 "session `%.128s` is on node `%s`, which is not up (its lease ended %s): the "
		 "session is lost unless that node comes back",
		 id, n->name, n->down_ms ? when : "or it never registered");
	metrics_add(metrics_daemon.cluster_forwarded_total, 1, "request", "lost");
	if (e2b_data_plane(ctx->route))
		api_e2b_error(ctx, 502, "%s", msg);
	else if (api_e2b_route(ctx->route))
		api_e2b_error(ctx, 410, "%s", msg);
	else
		http_reply_error(ctx, 410, "%s", msg);
	return -1;
}

int api_cluster_route_owned(struct http_ctx *ctx, const char *owner, unsigned scopes, bool admin)
{
	if (!cluster_enabled() || !session_route(ctx->route) || ctx->nparams == 0)
		return 0;
	const char *id = http_param(ctx, 0);
	const struct cluster_node *n = NULL;
	enum cluster_where w = cluster_session_where(owner, id, &n);
	if (w == CLUSTER_UNKNOWN && admin)
		w = cluster_session_where_any(id, &n);
	if (w == CLUSTER_REMOTE) {
		cluster_forward_at_head(ctx, n, owner, scopes, true, "request");
		return 1;
	}
	if (w == CLUSTER_LOST)
		return lost(ctx, id, n);
	return 0;
}

/* The node a value "<node>~<rest>" names (a ticket, an MCP session's id), into out. */
static bool node_prefix(const char *v, char *out, size_t cap)
{
	const char *tilde = v ? strchr(v, '~') : NULL;
	if (!tilde || tilde == v || (size_t)(tilde - v) >= cap)
		return false;
	memcpy(out, v, (size_t)(tilde - v));
	out[tilde - v] = '\0';
	return true;
}

/* "/exec/<id>/ports/..." : the id. */
static bool path_form_id(const char *path, char *out, size_t cap)
{
	if (strncmp(path, "/exec/", 6) != 0)
		return false;
	const char *s = path + 6;
	size_t n = strcspn(s, "/");
	if (!n || n >= cap)
		return false;
	memcpy(out, s, n);
	out[n] = '\0';
	return true;
}

int api_cluster_route_anonymous(struct http_ctx *ctx)
{
	if (!cluster_enabled() || !ctx->route)
		return 0;
	const struct http_route *r = ctx->route;
	const struct cluster_node *n = NULL;
	enum cluster_where w = CLUSTER_UNKNOWN;
	char buf[160];
	const char *name = NULL;
	if (r == &api_envd_route || r == &api_preview_host_route) {
		name = http_header(ctx, "E2b-Sandbox-Id");
		struct preview_host ph;
		const char *host = http_header(ctx, "Host");
		if ((!name || r == &api_preview_host_route) && host && api_cfg->public_domain &&
		    preview_host_parse(host, api_cfg->public_domain, &ph) == 0) {
			snprintf(buf, sizeof(buf), "%s", ph.name);
			name = buf;
		}
		if (!name)
			return 0;
		w = cluster_preview_where(name, &n);
	} else if (r == &api_preview_path_route) {
		if (!path_form_id(ctx->path, buf, sizeof(buf)))
			return 0;
		name = buf;
		/* A preview name (unique in the cluster) first, else a session id. */
		w = cluster_preview_where(name, &n);
		if (w == CLUSTER_UNKNOWN)
			w = cluster_session_where_any(name, &n);
	} else if ((r->flags & HTTP_ROUTE_TICKET) && ctx->nparams && http_query(ctx, "ticket")) {
		/* The ticket names the node that issued it, where its session is. */
		char node[64];
		name = http_param(ctx, 0);
		if (!node_prefix(http_query(ctx, "ticket"), node, sizeof(node)) ||
		    !strcmp(node, cluster_node_name()))
			return 0;
		n = cluster_node_find(node);
		if (!n)
			return 0; /* not a node's: refused here as any bad ticket */
		w = n->up ? CLUSTER_REMOTE : CLUSTER_LOST;
	} else {
		return 0;
	}
	if (w == CLUSTER_REMOTE) {
		cluster_forward_at_head(ctx, n, NULL, 0, false, "request");
		return 1;
	}
	if (w == CLUSTER_LOST)
		return lost(ctx, name, n);
	return 0;
}

/* --- listings ------------------------------------------------------------------------- */

struct part {
	char node[64];
	char *url;
	char *sig;
	struct reply {
		char *data;
		size_t len;
		bool over;
	} r;
	long status;
	json_t *body; /* the answer parsed (on the thread, not the loop) */
};

struct fanout {
	struct http_ctx *ctx;
	atomic_bool gone; /* its client left: the transfers end */
	char *target;
	char *peer; /* the client's address */
	struct part *parts;
	size_t n;
	long timeout_ms;
	void (*done)(struct http_ctx *ctx, json_t *parts, void *arg);
	void *arg;
};

struct collect_nodes {
	struct fanout *f;
	const char *method, *target, *owner;
	unsigned scopes;
};

static void add_node(const struct cluster_node *n, void *arg)
{
	struct collect_nodes *c = arg;
	if (!n->up || !strcmp(n->name, cluster_node_name()) || !n->url[0])
		return;
	struct fanout *f = c->f;
	f->parts = xrealloc(f->parts, (f->n + 1) * sizeof(*f->parts));
	struct part *p = &f->parts[f->n++];
	*p = (struct part){ 0 };
	snprintf(p->node, sizeof(p->node), "%s", n->name);
	size_t ul = strlen(n->url);
	p->url = xasprintf("%.*s%s", (int)(ul && n->url[ul - 1] == '/' ? ul - 1 : ul), n->url,
			   c->target);
	p->sig = cluster_peer_sign(n->name, c->method, c->target, c->owner, c->scopes);
}

static size_t collect(char *data, size_t size, size_t nmemb, void *arg)
{
	struct reply *r = arg;
	size_t len = size * nmemb;
	if (r->len + len > FANOUT_MAX_BODY) {
		r->over = true;
		return 0;
	}
	r->data = xrealloc(r->data, r->len + len + 1);
	memcpy(r->data + r->len, data, len);
	r->len += len;
	r->data[r->len] = '\0';
	return len;
}

static void fanout_work(void *arg)
{
	struct fanout *f = arg;
	CURLM *m = curl_multi_init();
	CURL **h = xcalloc(f->n ? f->n : 1, sizeof(*h));
	struct curl_slist **hdrs = xcalloc(f->n ? f->n : 1, sizeof(*hdrs));
	for (size_t i = 0; i < f->n; i++) {
		struct part *p = &f->parts[i];
		h[i] = curl_easy_init();
		if (!h[i])
			continue;
		_cleanup_free_ char *s = xasprintf(CLUSTER_PEER_HEADER ": %s", p->sig);
		_cleanup_free_ char *x = xasprintf("X-Forwarded-For: %s", f->peer);
		hdrs[i] = curl_slist_append(hdrs[i], s);
		hdrs[i] = curl_slist_append(hdrs[i], x);
		hdrs[i] = curl_slist_append(hdrs[i], "Accept: application/json");
		curl_easy_setopt(h[i], CURLOPT_URL, p->url);
		curl_easy_setopt(h[i], CURLOPT_HTTPHEADER, hdrs[i]);
		curl_easy_setopt(h[i], CURLOPT_NOSIGNAL, 1L);
		curl_easy_setopt(h[i], CURLOPT_PROTOCOLS_STR, "http");
		curl_easy_setopt(h[i], CURLOPT_TIMEOUT_MS, f->timeout_ms);
		curl_easy_setopt(h[i], CURLOPT_WRITEFUNCTION, collect);
		curl_easy_setopt(h[i], CURLOPT_WRITEDATA, &p->r);
		curl_easy_setopt(h[i], CURLOPT_PRIVATE, p);
		curl_multi_add_handle(m, h[i]);
	}
	int running = 1;
	while (running && !atomic_load(&f->gone) && !cluster_stopping()) {
		if (curl_multi_perform(m, &running) != CURLM_OK)
			break;
		if (running)
			curl_multi_poll(m, NULL, 0, 100, NULL);
	}
	CURLMsg *msg;
	int left;
	while ((msg = curl_multi_info_read(m, &left))) {
		if (msg->msg != CURLMSG_DONE)
			continue;
		struct part *p;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&p);
		if (msg->data.result == CURLE_OK && !p->r.over)
			curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &p->status);
	}
	for (size_t i = 0; i < f->n; i++) {
		if (h[i]) {
			curl_multi_remove_handle(m, h[i]);
			curl_easy_cleanup(h[i]);
		}
		curl_slist_free_all(hdrs[i]);
	}
	curl_multi_cleanup(m);
	free(h);
	free(hdrs);
	/* Parsed here: a cluster's parts can be large, and the loop serves everyone. */
	for (size_t i = 0; i < f->n; i++) {
		struct part *p = &f->parts[i];
		if (p->status == 200 && p->r.data) {
			json_error_t jerr;
			p->body = json_loadb(p->r.data, p->r.len, JSON_REJECT_DUPLICATES, &jerr);
		}
		free(p->r.data);
		p->r.data = NULL;
	}
}

static void fanout_free(struct fanout *f)
{
	for (size_t i = 0; i < f->n; i++) {
		free(f->parts[i].url);
		free(f->parts[i].sig);
		free(f->parts[i].r.data);
		json_decref(f->parts[i].body);
	}
	free(f->parts);
	free(f->target);
	free(f->peer);
	free(f);
}

static void fanout_done(void *arg)
{
	struct fanout *f = arg;
	struct http_ctx *ctx = f->ctx;
	fanouts--;
	if (ctx)
		ctx->on_gone = NULL;
	if (!ctx || atomic_load(&f->gone)) {
		f->done(NULL, NULL, f->arg);
		if (ctx) {
			/* A reply nobody reads: the request ends, and is freed. */
			http_stream_abort(ctx);
			http_ctx_release(ctx);
		}
		fanout_free(f);
		return;
	}
	json_t *parts = json_array();
	for (size_t i = 0; i < f->n; i++) {
		struct part *p = &f->parts[i];
		json_t *body = p->body;
		p->body = NULL;
		metrics_add(metrics_daemon.cluster_forwarded_total, 1, "list",
			    p->status == 200 && body ? "success" : "failure");
		if (p->status != 200 || !body)
			log_warn("cluster", "node %s did not give its part of a listing (HTTP %ld)",
				 p->node, p->status);
		json_array_append_new(parts, json_pack("{s:s, s:I, s:o}", "node", p->node, "status",
						       (json_int_t)p->status, "body",
						       body ? body : json_null()));
	}
	f->done(ctx, parts, f->arg);
	json_decref(parts);
	http_ctx_release(ctx);
	fanout_free(f);
}

static void fanout_gone(struct http_ctx *ctx, void *arg)
{
	struct fanout *f = arg;
	atomic_store(&f->gone, true);
}

void api_cluster_fanout(struct http_ctx *ctx, const char *owner, unsigned scopes,
			void (*done)(struct http_ctx *ctx, json_t *parts, void *arg), void *arg)
{
	/* Listings wait for two threads: past a bound, the next is refused, not queued. */
	if (fanouts >= FANOUT_MAX_WAITING) {
		http_add_header(ctx, "Retry-After", "1");
		http_reply_error(ctx, 503,
				 "this node gathers %u listings from the cluster already: "
				 "try again",
				 fanouts);
		done(NULL, NULL, arg);
		return;
	}
	fanouts++;
	struct fanout *f = xcalloc(1, sizeof(*f));
	f->ctx = ctx;
	f->done = done;
	f->arg = arg;
	f->target = xstrdup(http_target(ctx));
	f->peer = xstrdup(http_peer(ctx));
	f->timeout_ms = cluster_timeout_ms();
	struct collect_nodes c = { .f = f,
				   .method = http_method(ctx),
				   .target = f->target,
				   .owner = owner,
				   .scopes = scopes };
	cluster_foreach_node(add_node, &c);
	http_ctx_hold(ctx);
	ctx->on_gone = fanout_gone;
	ctx->on_gone_arg = f;
	cluster_peers_submit(fanout_work, fanout_done, f);
}

/* --- creation ------------------------------------------------------------------------- */

static int create_refused(struct http_ctx *ctx, bool e2b, const struct err *e)
{
	int status = http_status_for_errno(e->errnum);
	if (status == 503)
		http_add_header(ctx, "Retry-After", "1");
	if (e2b)
		api_e2b_error(ctx, status, "%s", e->msg);
	else
		http_reply_error(ctx, status, "%s", e->msg);
	return -1;
}

int api_cluster_route_create(struct http_ctx *ctx, const char *owner, unsigned scopes,
			     const char *id, const char *template, const json_t *selector,
			     bool pinned, bool e2b)
{
	if (!cluster_enabled() || auth_from_peer(ctx))
		return 0;
	const struct cluster_node *n = NULL;
	if (id) {
		enum cluster_where w = cluster_session_where(owner, id, &n);
		/* The session exists: its node answers for it. */
		if (w == CLUSTER_REMOTE) {
			cluster_forward_buffered(ctx, n, owner, scopes, "create");
			return 1;
		}
		if (w == CLUSTER_LOCAL)
			return 0;
	}
	/* From a snapshot, with volumes: what it needs is on this node. */
	if (pinned)
		return 0;
	struct err e;
	n = cluster_place(template ? template : api_cfg->default_template, selector, &e);
	if (!n)
		return create_refused(ctx, e2b, &e);
	if (!strcmp(n->name, cluster_node_name()))
		return 0;
	cluster_forward_buffered(ctx, n, owner, scopes, "create");
	return 1;
}

/* --- MCP ------------------------------------------------------------------------------ */

static bool mcp_route(const struct http_route *r)
{
	return r && (!strncmp(r->pattern, "/mcp", 4) || !strcmp(r->pattern, "/sse") ||
		     !strcmp(r->pattern, "/messages"));
}

int api_cluster_route_mcp(struct http_ctx *ctx, const char *owner, unsigned scopes)
{
	if (!cluster_enabled() || !mcp_route(ctx->route))
		return 0;
	const char *sid = http_header(ctx, "Mcp-Session-Id");
	if (!sid)
		sid = http_query(ctx, "sessionId");
	char name[64];
	if (!node_prefix(sid, name, sizeof(name)) || !strcmp(name, cluster_node_name()))
		return 0;
	const struct cluster_node *n = cluster_node_find(name);
	if (!n || !n->up) {
		http_reply_json(
			ctx, 404,
			mcp_error(NULL, MCP_NO_SESSION,
				  "Session not found: it lived on node `%.63s`, which is not up; "
				  "initialize a new one",
				  name));
		return -1;
	}
	cluster_forward_at_head(ctx, n, owner, scopes, true, "request");
	return 1;
}

static unsigned remote_calls; /* in flight, at most CLUSTER_MAX_CALLS */

struct mcp_remote {
	struct mcp_call *c;    /* NULL once cancelled */
	atomic_bool cancelled; /* the transfer under way ends (its node sees its client go) */
	char node[64];
	char *base; /* the node's URL */
	char *owner;
	char *version;
	char *call; /* the tools/call message */
	long timeout_ms;
	/* out */
	json_t *result;
	char error[400];
	struct mcp_remote *next; /* in flight, for the per-key count */
};

#define MCP_REMOTE_PER_OWNER 2

static struct mcp_remote *remotes;

/* Ends the transfer once the call was cancelled (its client cancelled it or left) or the
 * node stops: the other node sees its client go and ends the tool. */
static int mcp_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	struct mcp_remote *r = arg;
	return atomic_load(&r->cancelled) || cluster_stopping() ? 1 : 0;
}

static size_t mcp_collect(char *data, size_t size, size_t nmemb, void *arg)
{
	return collect(data, size, nmemb, arg);
}

struct mcp_head {
	char sid[128];
};

static size_t mcp_header(char *line, size_t size, size_t n, void *arg)
{
	struct mcp_head *h = arg;
	size_t len = size * n;
	const char *name = "Mcp-Session-Id:";
	size_t nl = strlen(name);
	if (len > nl && !strncasecmp(line, name, nl)) {
		const char *v = line + nl;
		v += strspn(v, " \t");
		size_t vl = strcspn(v, "\r\n");
		if (vl < sizeof(h->sid)) {
			memcpy(h->sid, v, vl);
			h->sid[vl] = '\0';
		}
	}
	return len;
}

/* One request of the exchange with the other node's /mcp: its answer's JSON, or NULL with
 * r->error set. */
static json_t *mcp_request(struct mcp_remote *r, const char *method, const char *body,
			   const char *sid, struct mcp_head *head)
{
	CURL *h = curl_easy_init();
	if (!h) {
		snprintf(r->error, sizeof(r->error), "cannot make a client");
		return NULL;
	}
	_cleanup_free_ char *url = xasprintf("%s/mcp", r->base);
	_cleanup_free_ char *sig = cluster_peer_sign(r->node, method, "/mcp", r->owner, 1);
	_cleanup_free_ char *sh = xasprintf(CLUSTER_PEER_HEADER ": %s", sig);
	_cleanup_free_ char *sidh = sid ? xasprintf("Mcp-Session-Id: %s", sid) : NULL;
	struct curl_slist *hdrs = curl_slist_append(NULL, sh);
	hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
	hdrs = curl_slist_append(hdrs, "Accept: application/json");
	if (sidh)
		hdrs = curl_slist_append(hdrs, sidh);
	struct reply got = { 0 };
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	if (body) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
	}
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http");
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, r->timeout_ms);
	/* A tool runs as long as it runs (a command): no bound on the whole, but a node that
	 * vanishes is noticed. */
	curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 10L);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 5L);
	curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, mcp_progress);
	curl_easy_setopt(h, CURLOPT_XFERINFODATA, r);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, mcp_collect);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &got);
	if (head) {
		curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, mcp_header);
		curl_easy_setopt(h, CURLOPT_HEADERDATA, head);
	}
	CURLcode rc = curl_easy_perform(h);
	long status = 0;
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(h);
	json_t *j = NULL;
	if (rc != CURLE_OK || got.over)
		snprintf(r->error, sizeof(r->error), "node %s cannot be reached: %s", r->node,
			 got.over ? "its answer is too large" : curl_easy_strerror(rc));
	else if (got.len && !(j = json_loadb(got.data, got.len, 0, NULL)))
		snprintf(r->error, sizeof(r->error), "node %s answered HTTP %ld, not JSON", r->node,
			 status);
	free(got.data);
	return j;
}

static void mcp_remote_work(void *arg)
{
	struct mcp_remote *r = arg;
	json_auto_t *init = json_pack(
		"{s:s, s:i, s:s, s:{s:s, s:{}, s:{s:s, s:s}}}", "jsonrpc", "2.0", "id", 1, "method",
		"initialize", "params", "protocolVersion", r->version, "capabilities", "clientInfo",
		"name", "sandboxd (another node of the cluster)", "version", SANDBOX_VERSION);
	_cleanup_free_ char *init_text = json_dumps(init, JSON_COMPACT);
	struct mcp_head head = { "" };
	json_auto_t *ok = mcp_request(r, "POST", init_text, NULL, &head);
	if (!ok)
		return;
	if (!json_object_get(ok, "result") || !head.sid[0]) {
		const char *m =
			json_string_value(json_object_get(json_object_get(ok, "error"), "message"));
		snprintf(r->error, sizeof(r->error), "node %s: %s", r->node,
			 m ? m : "its MCP session could not be made");
		return;
	}
	json_auto_t *answer = mcp_request(r, "POST", r->call, head.sid, NULL);
	json_decref(mcp_request(r, "DELETE", NULL, head.sid, NULL));
	if (!answer)
		return;
	json_t *result = json_object_get(answer, "result");
	if (json_is_object(result)) {
		r->result = json_incref(result);
		r->error[0] = '\0';
		return;
	}
	const char *m =
		json_string_value(json_object_get(json_object_get(answer, "error"), "message"));
	snprintf(r->error, sizeof(r->error), "node %s: %s", r->node, m ? m : "no answer");
}

static json_t *tool_error(const char *msg)
{
	return json_pack("{s:[{s:s, s:s}], s:b}", "content", "type", "text", "text", msg, "isError",
			 1);
}

static void mcp_remote_done(void *arg)
{
	struct mcp_remote *r = arg;
	remote_calls--;
	for (struct mcp_remote **pp = &remotes; *pp; pp = &(*pp)->next)
		if (*pp == r) {
			*pp = r->next;
			break;
		}
	metrics_add(metrics_daemon.cluster_forwarded_total, 1, "mcp",
		    r->result ? "success" : "failure");
	if (r->c)
		mcp_call_reply(r->c, r->result ? json_incref(r->result) : tool_error(r->error));
	json_decref(r->result);
	free(r->base);
	free(r->owner);
	free(r->version);
	free(r->call);
	free(r);
}

static void mcp_remote_cancel(struct mcp_call *c, void *state)
{
	struct mcp_remote *r = state;
	r->c = NULL; /* its answer, when it comes, goes nowhere */
	atomic_store(&r->cancelled, true);
}

bool api_cluster_mcp_call(struct mcp_call *c, const char *tool, json_t *args, const char *version)
{
	if (!cluster_enabled())
		return false;
	const char *sid = json_string_value(json_object_get(args, "sessionId"));
	if (!sid)
		return false;
	const struct cluster_node *n = NULL;
	enum cluster_where w = cluster_session_where(mcp_call_owner(c), sid, &n);
	if (w == CLUSTER_LOST) {
		char msg[300];
		snprintf(msg, sizeof(msg),
			 "session `%.128s` is on node `%s`, which is not up: the session is lost "
			 "unless that node comes back",
			 sid, n->name);
		mcp_call_reply(c, tool_error(msg));
		return true;
	}
	if (w != CLUSTER_REMOTE)
		return false;
	/* Each key's share of the threads: no key holds them all. */
	const char *owner = mcp_call_owner(c);
	unsigned mine = 0;
	for (struct mcp_remote *x = remotes; x; x = x->next)
		mine += !strcmp(x->owner, owner);
	if (remote_calls >= CLUSTER_MAX_CALLS || mine >= MCP_REMOTE_PER_OWNER) {
		mcp_call_reply(
			c,
			tool_error(
				mine >= MCP_REMOTE_PER_OWNER
					? "this key has as many MCP tools running on other nodes "
					  "of the cluster through this one as it may at once; try "
					  "again when one ends"
					: "too many MCP tools are running on other nodes of the "
					  "cluster through this one at once; try again"));
		return true;
	}
	remote_calls++;
	struct mcp_remote *r = xcalloc(1, sizeof(*r));
	r->c = c;
	snprintf(r->node, sizeof(r->node), "%s", n->name);
	size_t ul = strlen(n->url);
	r->base = xasprintf("%.*s", (int)(ul && n->url[ul - 1] == '/' ? ul - 1 : ul), n->url);
	r->owner = xstrdup(mcp_call_owner(c));
	r->version = xstrdup(version ? version : "2025-03-26");
	json_auto_t *msg =
		json_pack("{s:s, s:i, s:s, s:{s:s, s:O}}", "jsonrpc", "2.0", "id", 1, "method",
			  "tools/call", "params", "name", tool, "arguments", args);
	r->call = json_dumps(msg, JSON_COMPACT);
	r->timeout_ms = cluster_timeout_ms();
	r->next = remotes;
	remotes = r;
	struct mcp_tool_run run = { .cancel = mcp_remote_cancel, .state = r };
	mcp_call_set_run(c, &run);
	cluster_calls_submit(mcp_remote_work, mcp_remote_done, r);
	return true;
}
