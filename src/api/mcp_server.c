/* mcp_server: MCP sessions and methods, whatever the transport.
 *
 * An MCP session is the protocol's conversation (initialize, then requests), not a sandbox:
 * the tools name sandbox sessions by id, owned by the same API key. MCP sessions are bounded
 * in number (SANDBOX_MCP_MAX_SESSIONS) and end after SANDBOX_MCP_SESSION_TIMEOUT seconds
 * without a message, unless a call is still running or (HTTP+SSE) their stream is open;
 * ending one cancels its calls. */
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api/api.h"
#include "api/cluster.h"
#include "api/mcp.h"
#include "session/quota.h"
#include "cluster/cluster.h"
#include "util/cleanup.h"
#include "util/log.h"
#include "util/random.h"
#include "util/time.h"

struct mcp_settings mcp_settings;

struct mcp_call {
	struct mcp_session *s;
	struct mcp_sink *k;
	json_t *id;
	json_t *progress_token;
	char tool[64];
	struct mcp_tool_run run;
	uint64_t t0_ms;
	struct mcp_call *next;
};

struct mcp_session {
	char id[100]; /* in a cluster, "<node>~<hex>": any node finds the node it lives on */
	char *owner;
	char version[16];
	bool initialized;  /* initialize answered */
	bool client_ready; /* notifications/initialized received */
	bool ended;
	bool quota_held; /* a unit of QUOTA_MCP_SESSIONS */
	int refs;
	uint64_t active_ms;
	struct mcp_call *calls;
	unsigned ncalls;
	struct mcp_sink *stream;
	char *client; /* clientInfo, for the log */
	struct mcp_session *next;
};

static struct {
	bool ready;
	struct mcp_session *sessions;
	unsigned nsessions;
	struct event *sweep;
} mcp_server_mod;

static void sweep(evutil_socket_t fd, short what, void *arg)
{
	uint64_t now = time_mono_ms();
	struct mcp_session *s = mcp_server_mod.sessions;
	while (s) {
		struct mcp_session *next = s->next;
		/* An HTTP+SSE session lives as long as its stream: the open stream is its
		 * client's presence, and keep-alives find out when it is gone. */
		if (s->ncalls == 0 && !s->stream &&
		    now - s->active_ms >= (uint64_t)mcp_settings.idle_timeout_s * 1000)
			mcp_session_end(s, "idle timeout");
		s = next;
	}
}

void mcp_init(void)
{
	if (mcp_server_mod.ready)
		return;
	mcp_server_mod.ready = true;
	mcp_settings.idle_timeout_s = api_cfg ? api_cfg->mcp_session_timeout_s : 1800;
	mcp_settings.max_sessions = api_cfg ? api_cfg->mcp_max_sessions : 256;
	mcp_settings.max_inflight = 32;
	mcp_server_mod.sweep = event_new(api_base, -1, EV_PERSIST, sweep, NULL);
	unsigned ms = api_cfg ? api_cfg->mcp_sweep_interval_ms : 5000;
	struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (suseconds_t)(ms % 1000) * 1000 };
	event_add(mcp_server_mod.sweep, &tv);
}

/* --- sessions ----------------------------------------------------------------------- */

struct mcp_session *mcp_session_new(const char *owner, struct err *err, int *ret_status)
{
	if (mcp_server_mod.nsessions >= mcp_settings.max_sessions)
		sweep(-1, 0, NULL);
	if (mcp_server_mod.nsessions >= mcp_settings.max_sessions) {
		err_set(err, EAGAIN,
			"The server is at its limit of %u MCP sessions; end one (DELETE /mcp) or "
			"wait for idle ones to expire",
			mcp_settings.max_sessions);
		*ret_status = 503;
		return NULL;
	}
	/* The server's cap is the one above (idle sessions are swept first); the key's own
	 * quota is a 429. */
	int r = quota_admit(owner, QUOTA_MCP_SESSIONS, err);
	if (r < 0) {
		*ret_status = r == -EAGAIN ? 429 : 503;
		return NULL;
	}
	struct mcp_session *s = xcalloc(1, sizeof(*s));
	char hex[33];
	random_hex(hex, 16);
	snprintf(s->id, sizeof(s->id), "%s%s%s", cluster_enabled() ? cluster_node_name() : "",
		 cluster_enabled() ? "~" : "", hex);
	s->owner = xstrdup(owner ? owner : "");
	s->quota_held = true;
	s->refs = 1; /* the table's */
	s->active_ms = time_mono_ms();
	s->next = mcp_server_mod.sessions;
	mcp_server_mod.sessions = s;
	mcp_server_mod.nsessions++;
	return s;
}

struct mcp_session *mcp_session_find(const char *id, const char *owner)
{
	if (!id)
		return NULL;
	for (struct mcp_session *s = mcp_server_mod.sessions; s; s = s->next)
		if (strcmp(s->id, id) == 0 && strcmp(s->owner, owner ? owner : "") == 0)
			return s;
	return NULL;
}

const char *mcp_session_id(const struct mcp_session *s)
{
	return s->id;
}

const char *mcp_session_version(const struct mcp_session *s)
{
	return s->initialized ? s->version : NULL;
}

void mcp_session_ref(struct mcp_session *s)
{
	s->refs++;
}

void mcp_session_unref(struct mcp_session *s)
{
	if (--s->refs > 0)
		return;
	free(s->owner);
	free(s->client);
	free(s);
}

void mcp_session_attach_stream(struct mcp_session *s, struct mcp_sink *k)
{
	s->stream = k;
}

struct mcp_sink *mcp_session_stream(struct mcp_session *s)
{
	return s->stream;
}

static void call_abort(struct mcp_call *c);

void mcp_session_end(struct mcp_session *s, const char *why)
{
	if (s->ended)
		return;
	s->ended = true;
	for (struct mcp_session **pp = &mcp_server_mod.sessions; *pp; pp = &(*pp)->next) {
		if (*pp == s) {
			*pp = s->next;
			mcp_server_mod.nsessions--;
			break;
		}
	}
	if (s->quota_held) {
		s->quota_held = false;
		quota_release(s->owner, QUOTA_MCP_SESSIONS);
	}
	log_info("mcp", "MCP session %.8s... ended (%s)", s->id, why);
	mcp_session_ref(s);
	while (s->calls)
		call_abort(s->calls);
	struct mcp_sink *stream = s->stream;
	s->stream = NULL;
	if (stream && stream->ops->session_ended)
		stream->ops->session_ended(stream);
	mcp_session_unref(s); /* the table's */
	mcp_session_unref(s);
}

/* --- calls -------------------------------------------------------------------------- */

static void call_over(struct mcp_call *c)
{
	struct mcp_session *s = c->s;
	for (struct mcp_call **pp = &s->calls; *pp; pp = &(*pp)->next) {
		if (*pp == c) {
			*pp = c->next;
			s->ncalls--;
			break;
		}
	}
	s->active_ms = time_mono_ms();
	struct mcp_sink *k = c->k;
	json_decref(c->id);
	json_decref(c->progress_token);
	free(c);
	k->ops->request_done(k);
	mcp_session_unref(s);
}

/* Ends a call unanswered: its client cancelled it or is gone. */
static void call_abort(struct mcp_call *c)
{
	if (c->run.cancel) {
		void (*cancel)(struct mcp_call *, void *) = c->run.cancel;
		c->run.cancel = NULL;
		cancel(c, c->run.state);
	}
	log_debug("mcp", "call of %s cancelled", c->tool);
	call_over(c);
}

const char *mcp_call_owner(const struct mcp_call *c)
{
	return c->s->owner;
}

json_t *mcp_call_progress_token(const struct mcp_call *c)
{
	return c->progress_token;
}

void mcp_call_set_run(struct mcp_call *c, const struct mcp_tool_run *run)
{
	c->run = *run;
}

void mcp_call_reply(struct mcp_call *c, json_t *result)
{
	c->run.cancel = NULL;
	if (log_enabled(LOG_DEBUG))
		log_debug("mcp", "%s answered in %llu ms%s", c->tool,
			  (unsigned long long)(time_mono_ms() - c->t0_ms),
			  json_is_true(json_object_get(result, "isError")) ? " (tool error)" : "");
	c->k->ops->send(c->k, mcp_result(c->id, result), true);
	call_over(c);
}

void mcp_call_notify(struct mcp_call *c, json_t *notification)
{
	c->k->ops->send(c->k, notification, false);
}

size_t mcp_call_pending(struct mcp_call *c)
{
	return c->k->ops->pending(c->k);
}

void mcp_call_on_drain(struct mcp_call *c, struct mcp_drain *d)
{
	struct mcp_sink *k = c->k;
	if (!d->waiting) {
		d->waiting = true;
		d->next = k->waiters;
		k->waiters = d;
	}
	if (k->ops->arm_drain)
		k->ops->arm_drain(k, MCP_HIGH_WATER / 2);
	else
		mcp_sink_drained(k);
}

void mcp_call_drain_cancel(struct mcp_call *c, struct mcp_drain *d)
{
	if (!d->waiting)
		return;
	for (struct mcp_drain **pp = &c->k->waiters; *pp; pp = &(*pp)->next) {
		if (*pp == d) {
			*pp = d->next;
			break;
		}
	}
	d->waiting = false;
}

void mcp_sink_drained(struct mcp_sink *k)
{
	struct mcp_drain *d = k->waiters;
	k->waiters = NULL;
	while (d) {
		struct mcp_drain *next = d->next;
		d->waiting = false;
		d->fn(d);
		d = next;
	}
}

void mcp_sink_gone(struct mcp_session *s, struct mcp_sink *k)
{
	mcp_session_ref(s);
	for (struct mcp_call *c = s->calls; c;) {
		struct mcp_call *next = c->next;
		if (c->k == k)
			call_abort(c);
		c = next;
	}
	mcp_session_unref(s);
}

/* --- methods ------------------------------------------------------------------------ */

static void reply(struct mcp_sink *k, json_t *msg)
{
	k->ops->send(k, msg, true);
	k->ops->request_done(k);
}

static json_t *server_info(const char *version)
{
	json_t *info = json_pack("{s:s, s:s}", "name", "agent-sandbox", "version", SANDBOX_VERSION);
	if (mcp_version_at_least(version, "2025-06-18"))
		json_object_set_new(info, "title", json_string("agent-sandbox"));
	return info;
}

static const char instructions[] =
	"Each session is a disposable Linux machine. Create one with create_session (or name "
	"any new sessionId in execute or write_file: it is created on first use), run commands "
	"with execute, move files with write_file, read_file and list_files (paths are relative "
	"to the workspace), stop a running command with cancel, and destroy the session with "
	"reset_session. Idle sessions are destroyed after a while; pause_session keeps one as it "
	"is, using no CPU, until resume_session.";

static void do_initialize(struct mcp_session *s, struct mcp_sink *k, const struct mcp_msg *m)
{
	if (s->initialized) {
		reply(k, mcp_error(m->id, MCP_INVALID_REQUEST,
				   "Invalid Request: this MCP session is already initialized"));
		return;
	}
	json_t *pv = json_object_get(m->params, "protocolVersion");
	if (!json_is_string(pv)) {
		reply(k, mcp_error(m->id, MCP_INVALID_PARAMS,
				   "Invalid params: \"protocolVersion\" must be a string"));
		return;
	}
	const char *version = mcp_version_negotiate(json_string_value(pv));
	snprintf(s->version, sizeof(s->version), "%s", version);
	s->initialized = true;
	json_t *ci = json_object_get(m->params, "clientInfo");
	const char *cname = json_string_value(json_object_get(ci, "name"));
	const char *cver = json_string_value(json_object_get(ci, "version"));
	free(s->client);
	s->client = xasprintf("%.64s %.32s", cname ? cname : "?", cver ? cver : "");
	log_info("mcp", "MCP session %.8s... initialized: protocol %s (asked %.32s), client %s",
		 s->id, version, json_string_value(pv), s->client);
	json_t *result = json_pack("{s:s, s:{s:{s:b}}, s:o, s:s}", "protocolVersion", version,
				   "capabilities", "tools", "listChanged", 0, "serverInfo",
				   server_info(version), "instructions", instructions);
	reply(k, mcp_result(m->id, result));
}

static void do_tools_list(struct mcp_session *s, struct mcp_sink *k, const struct mcp_msg *m)
{
	json_t *cursor = json_object_get(m->params, "cursor");
	size_t offset = 0;
	if (cursor && !json_is_null(cursor)) {
		/* Our cursors are offsets we handed out; anything else is not one of them. */
		const char *c = json_string_value(cursor);
		char *end = NULL;
		unsigned long v = c && *c >= '0' && *c <= '9' ? strtoul(c, &end, 10) : 0;
		if (!c || !end || *end || v > 1000) {
			reply(k, mcp_error(m->id, MCP_INVALID_PARAMS,
					   "Invalid params: unknown cursor"));
			return;
		}
		offset = v;
	}
	json_t *page = mcp_tools_list(s->version, offset);
	if (!page) {
		reply(k, mcp_error(m->id, MCP_INVALID_PARAMS, "Invalid params: unknown cursor"));
		return;
	}
	reply(k, mcp_result(m->id, page));
}

static bool call_id_in_use(struct mcp_session *s, json_t *id)
{
	for (struct mcp_call *c = s->calls; c; c = c->next)
		if (json_equal(c->id, id))
			return true;
	return false;
}

static void do_tools_call(struct mcp_session *s, struct mcp_sink *k, const struct mcp_msg *m)
{
	json_t *name = json_object_get(m->params, "name");
	json_t *args = json_object_get(m->params, "arguments");
	if (!json_is_string(name)) {
		reply(k, mcp_error(m->id, MCP_INVALID_PARAMS,
				   "Invalid params: \"name\" must be the name of a tool"));
		return;
	}
	if (args && !json_is_object(args) && !json_is_null(args)) {
		reply(k, mcp_error(m->id, MCP_INVALID_PARAMS,
				   "Invalid params: \"arguments\" must be an object"));
		return;
	}
	if (!mcp_tool_exists(json_string_value(name))) {
		reply(k, mcp_error(m->id, MCP_INVALID_PARAMS, "Unknown tool: %.100s",
				   json_string_value(name)));
		return;
	}
	if (s->ncalls >= mcp_settings.max_inflight) {
		reply(k, mcp_error(m->id, MCP_SERVER_BUSY,
				   "Too many requests in flight in this MCP session (at most %u)",
				   mcp_settings.max_inflight));
		return;
	}
	if (call_id_in_use(s, m->id)) {
		reply(k, mcp_error(m->id, MCP_INVALID_REQUEST,
				   "Invalid Request: request id already in use"));
		return;
	}
	struct mcp_call *c = xcalloc(1, sizeof(*c));
	c->s = s;
	mcp_session_ref(s);
	c->k = k;
	c->id = json_incref(m->id);
	c->t0_ms = time_mono_ms();
	snprintf(c->tool, sizeof(c->tool), "%s", json_string_value(name));
	json_t *token = json_object_get(json_object_get(m->params, "_meta"), "progressToken");
	if (json_is_string(token) || json_is_integer(token))
		c->progress_token = json_incref(token);
	c->next = s->calls;
	s->calls = c;
	s->ncalls++;
	log_debug("mcp", "tools/call %s", c->tool);
	json_auto_t *empty = NULL;
	if (!json_is_object(args))
		args = empty = json_object();
	/* A tool for a session of another node of the cluster is called there. */
	if (api_cluster_mcp_call(c, c->tool, args, s->version))
		return;
	mcp_tool_call(c, c->tool, args, s->version);
}

static void do_cancelled(struct mcp_session *s, const struct mcp_msg *m)
{
	json_t *id = json_object_get(m->params, "requestId");
	if (!id)
		return;
	for (struct mcp_call *c = s->calls; c; c = c->next) {
		if (json_equal(c->id, id)) {
			const char *reason =
				json_string_value(json_object_get(m->params, "reason"));
			log_info("mcp", "the client cancelled %s%s%.200s", c->tool,
				 reason ? ": " : "", reason ? reason : "");
			call_abort(c);
			return;
		}
	}
	/* Unknown or already answered: the notification raced the reply, nothing to do. */
}

void mcp_handle(struct mcp_session *s, struct mcp_sink *k, const struct mcp_msg *m)
{
	s->active_ms = time_mono_ms();
	switch (m->kind) {
	case MCP_INVALID:
		reply(k, mcp_error(m->id, m->error_code, "%s", m->error));
		return;
	case MCP_RESPONSE:
		/* We send no requests, so no response is awaited. */
		return;
	case MCP_NOTIFICATION:
		if (strcmp(m->method, "notifications/initialized") == 0)
			s->client_ready = true;
		else if (strcmp(m->method, "notifications/cancelled") == 0)
			do_cancelled(s, m);
		return;
	case MCP_REQUEST:
		break;
	}
	if (strcmp(m->method, "initialize") == 0) {
		do_initialize(s, k, m);
	} else if (strcmp(m->method, "ping") == 0) {
		reply(k, mcp_result(m->id, json_object()));
	} else if (!s->initialized) {
		reply(k, mcp_error(m->id, MCP_INVALID_REQUEST,
				   "Invalid Request: the MCP session is not initialized; send "
				   "initialize first"));
	} else if (strcmp(m->method, "tools/list") == 0) {
		do_tools_list(s, k, m);
	} else if (strcmp(m->method, "tools/call") == 0) {
		do_tools_call(s, k, m);
	} else {
		reply(k, mcp_error(m->id, MCP_METHOD_NOT_FOUND, "Method not found: %.100s",
				   m->method));
	}
}
