/* api: sandboxd's HTTP routes. Handlers translate between HTTP/JSON and the session layer;
 * they own no state of their own beyond one request. */
#pragma once

#include <stddef.h>

#include "http/http.h"

/* The route table (routes.c). */
extern const struct http_route api_routes[];
extern const size_t api_nroutes;

/* The daemon's configuration, for handlers. */
extern const struct config *api_cfg;
extern struct event_base *api_base;

/* Sets the configuration, what /health reports and when the daemon started. */
void api_init(struct event_base *base, const struct config *cfg, const char *driver_name,
	      const char *isolation);

/* The front door (front.c): the Host, Origin and key checks and the quota a route holds, at
 * every routed request's head (an http_auth_fn). front_init reads the allow lists. */
void front_init(const struct config *cfg);
void front_shutdown(void);
int front_check(struct http_ctx *ctx, const char *scope, void *arg);

/* The owner of sessions created by this request: the caller's key id, "" without auth. */
const char *api_owner(struct http_ctx *ctx);
/* Whether the caller may act on every owner's sessions (admin scope). */
bool api_is_admin(struct http_ctx *ctx);

/* /exec routes (exec.c) */
void api_exec_templates(struct http_ctx *ctx);
void api_exec_list(struct http_ctx *ctx);
void api_exec_create(struct http_ctx *ctx);
void api_exec_execute(struct http_ctx *ctx);
void api_exec_cancel(struct http_ctx *ctx);
void api_exec_write(struct http_ctx *ctx);
void api_exec_read(struct http_ctx *ctx);
void api_exec_files(struct http_ctx *ctx);
void api_exec_stat(struct http_ctx *ctx);
void api_exec_mkdir(struct http_ctx *ctx);
void api_exec_remove(struct http_ctx *ctx);
void api_exec_move(struct http_ctx *ctx);
/* PUT /exec/:id/file: a streamed upload (upload.c) */
void api_exec_upload(struct http_ctx *ctx);
void api_exec_watch(struct http_ctx *ctx);
void api_exec_delete(struct http_ctx *ctx);

/* background processes (process.c) */
void api_process_start(struct http_ctx *ctx);
void api_process_list(struct http_ctx *ctx);
void api_process_get(struct http_ctx *ctx);
void api_process_output(struct http_ctx *ctx);
void api_process_wait(struct http_ctx *ctx);
void api_process_signal(struct http_ctx *ctx);
void api_process_kill(struct http_ctx *ctx);
void api_process_stdin(struct http_ctx *ctx);
void api_process_resize(struct http_ctx *ctx);
/* WebSocket terminals and their tickets (terminal.c) */
void api_terminal_open(struct http_ctx *ctx);
void api_process_ws(struct http_ctx *ctx);
void api_ticket_create(struct http_ctx *ctx);
/* execute with "background": true: the body is a process start's. */
void api_exec_background(struct http_ctx *ctx, const char *id, json_t *body);

/* previews (proxy.c, ports.c, docs/ingress.md): the host router's choice (a Host of the
 * `<port>-<name>.<domain>` form, or a path below /exec/:id/ports/:port), its handler, and the
 * routes about ports. */
extern const struct http_route api_preview_host_route, api_preview_path_route;
bool api_preview_request(struct http_ctx *ctx, const char *host);
bool api_preview_host(const char *host);
const struct http_route *api_host_route(struct http_ctx *ctx, const char *host, void *arg);
void api_preview(struct http_ctx *ctx);
void api_preview_init(int served_port);
void api_exec_ports(struct http_ctx *ctx);
void api_exec_preview(struct http_ctx *ctx);
void api_exec_preview_token(struct http_ctx *ctx);
void api_exec_preview_public(struct http_ctx *ctx);
void api_exec_forward(struct http_ctx *ctx);
/* pause and resume (lifecycle.c) */
void api_exec_pause(struct http_ctx *ctx);
void api_exec_resume(struct http_ctx *ctx);
void api_exec_fork(struct http_ctx *ctx);
void api_exec_snapshot(struct http_ctx *ctx);
void api_snapshots_list(struct http_ctx *ctx);
void api_snapshots_get(struct http_ctx *ctx);
void api_snapshots_delete(struct http_ctx *ctx);
struct session;
/* A session's preview as the API shows it: name, url and pathUrl (with "{port}"),
 * publicPorts, and with_token its token. */
json_t *api_preview_json(const struct session *s, bool with_token);

/* Helpers of exec.c that the other /exec adapters share: error replies (EAGAIN with
 * Retry-After), the caller's target, the path's session id and the JSON body's fields, each
 * replying 400 and returning -1 (or NULL) when bad. */
struct ops_target;
struct ops_exec_req;
struct err;
void api_reply_err(struct http_ctx *ctx, const struct err *err);
struct ops_target api_request_target(struct http_ctx *ctx, const char *id, const char *tmpl);
int api_id_and_body(struct http_ctx *ctx, const char **ret_id, json_t **ret_body);
const char *api_path_session_id(struct http_ctx *ctx);
int api_opt_string(struct http_ctx *ctx, json_t *body, const char *key, const char **ret);
int api_opt_bool(struct http_ctx *ctx, json_t *body, const char *key, bool def, bool *ret);
/* command, args, cwd, env, timeout, template of an execute-like body. */
int api_parse_command(struct http_ctx *ctx, json_t *body, struct ops_exec_req *req,
		      const char **tmpl);

/* /volumes (volume.c) */
void api_volumes_create(struct http_ctx *ctx);
void api_volumes_list(struct http_ctx *ctx);
void api_volumes_get(struct http_ctx *ctx);
void api_volumes_delete(struct http_ctx *ctx);
/* MCP: Streamable HTTP at /mcp (POST, GET, DELETE), HTTP+SSE streams at GET /mcp and
 * GET /sse, their messages at POST /mcp/messages and POST /messages (mcp.c) */
void api_mcp(struct http_ctx *ctx);
void api_mcp_sse(struct http_ctx *ctx);
void api_mcp_messages(struct http_ctx *ctx);

/* the cluster's nodes (admin.c, docs/cluster.md) */
void api_admin_nodes_list(struct http_ctx *ctx);
void api_admin_nodes_cordon(struct http_ctx *ctx);
void api_admin_nodes_uncordon(struct http_ctx *ctx);

/* the E2B-compatible control plane (e2b.c, docs/e2b.md) */
void api_e2b_create(struct http_ctx *ctx);
void api_e2b_list(struct http_ctx *ctx);
void api_e2b_get(struct http_ctx *ctx);
void api_e2b_kill(struct http_ctx *ctx);
void api_e2b_timeout(struct http_ctx *ctx);
void api_e2b_connect(struct http_ctx *ctx);
void api_e2b_metrics(struct http_ctx *ctx);
void api_e2b_pause(struct http_ctx *ctx);
void api_e2b_resume(struct http_ctx *ctx);
void api_e2b_unsupported(struct http_ctx *ctx);
/* The data plane (envd.c): the host router's choice for a request that names a sandbox by
 * E2b-Sandbox-Id, or by a preview Host of port 49983 or 49999; its handler. */
extern const struct http_route api_envd_route;
bool api_envd_request(struct http_ctx *ctx, const char *host);
void api_envd(struct http_ctx *ctx);
/* What an E2B client holds open in a sandbox (a stream, a transfer, an execution), which a
 * pause ends: cut() ends it (its client sees the end) and frees it. The strings are
 * borrowed from the holder, which releases the hold when it ends on its own. */
struct envd_hold {
	const char *owner, *sid;
	void (*cut)(struct envd_hold *h);
	struct envd_hold *next, *prev;
	bool held;
};
void api_envd_hold(struct envd_hold *h, const char *owner, const char *sid,
		   void (*cut)(struct envd_hold *h));
void api_envd_release(struct envd_hold *h);
/* Before a pause of session (owner, sid): ends every hold in it and suspends its watchers
 * (their watches end in the agent; their events wait). After its resume: the watchers
 * watch again. */
void api_envd_suspend(const char *owner, const char *sid);
void api_envd_resumed(const char *owner, const char *sid);
/* A paused session its traffic resumed (autoResume): its E2B clients' watchers watch again
 * and its deadline runs again, as long as it last was from then. */
void api_e2b_woken(struct session *s);
/* Frees the watchers left (at exit, after the sessions are gone). */
void api_envd_shutdown(void);
/* The code interpreter's routes (interp.c), for a request envd.c admitted to port 49999 of
 * session s, with its body (JSON, borrowed). */
void api_interp(struct http_ctx *ctx, struct session *s, const char *route, json_t *body);
/* Whether a route is one of the above: its errors are E2B's {"code", "message"}. */
bool api_e2b_route(const struct http_route *r);
/* Replies with E2B's error body. */
void api_e2b_error(struct http_ctx *ctx, int status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* /admin/keys (admin.c) */
void api_admin_keys_list(struct http_ctx *ctx);
void api_admin_keys_create(struct http_ctx *ctx);
void api_admin_keys_update(struct http_ctx *ctx);
void api_admin_keys_revoke(struct http_ctx *ctx);
void api_admin_keys_rotate(struct http_ctx *ctx);
void api_admin_keys_delete(struct http_ctx *ctx);

/* The dashboard at /ui (ui.c): ui_init loads its files from SANDBOX_UI_DIR (logging why not,
 * when not), ui_shutdown frees them. */
void ui_init(const struct config *cfg);
void ui_shutdown(void);
void api_ui_index(struct http_ctx *ctx);
void api_ui_asset(struct http_ctx *ctx);

/* metrics.c: the exposition, and the history of metrics.h with the timer that samples it
 * (started with the HTTP server, stopped with it; a stop also empties the history). */
void api_metrics(struct http_ctx *ctx);
void api_metrics_history(struct http_ctx *ctx);
void api_metrics_history_start(struct event_base *base);
void api_metrics_history_stop(void);

/* health.c */
void api_health(struct http_ctx *ctx);
void api_ready(struct http_ctx *ctx);
