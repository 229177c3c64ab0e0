#include "api/api.h"

#define GET    HTTP_REQ_GET
#define POST   HTTP_REQ_POST
#define DELETE HTTP_REQ_DELETE

/* Bodies of routes that take only a few fields are kept small (the server's
 * SANDBOX_MAX_BODY_BYTES is for file contents, stdin and MCP messages that carry them). */
#define SMALL_BODY   (64u << 10)
#define SESSION_BODY (1u << 20) /* a session's env and egress policy */
/* A streamed upload: its own limit, SANDBOX_MAX_UPLOAD_BYTES, is the handler's. */
#define UPLOAD_BODY ((size_t)1 << 46)

/* Order matters: fixed paths before the :id patterns they would also match. */
const struct http_route api_routes[] = {
	{ GET, "/health", api_health, NULL },
	{ GET, "/ready", api_ready, NULL },
	{ GET, "/metrics", api_metrics, "metrics" },
	{ GET, "/metrics/history", api_metrics_history, "metrics" },
	{ GET, "/exec/templates", api_exec_templates, "exec" },
	{ GET, "/exec", api_exec_list, "exec" },
	{ POST, "/exec", api_exec_create, "exec", SESSION_BODY },
	{ POST, "/exec/:id/execute", api_exec_execute, "exec", 0, HTTP_ROUTE_JSON_BODY },
	{ POST, "/exec/:id/cancel", api_exec_cancel, "exec", SMALL_BODY },
	{ POST, "/exec/:id/write", api_exec_write, "exec", 0, HTTP_ROUTE_JSON_BODY },
	{ GET, "/exec/:id/read", api_exec_read, "exec" },
	{ HTTP_REQ_PUT, "/exec/:id/file", api_exec_upload, "exec", UPLOAD_BODY,
	  HTTP_ROUTE_STREAM_BODY },
	{ GET, "/exec/:id/files", api_exec_files, "exec" },
	{ GET, "/exec/:id/stat", api_exec_stat, "exec" },
	{ POST, "/exec/:id/mkdir", api_exec_mkdir, "exec", SMALL_BODY },
	{ POST, "/exec/:id/remove", api_exec_remove, "exec", SMALL_BODY },
	{ POST, "/exec/:id/move", api_exec_move, "exec", SMALL_BODY },
	{ POST, "/exec/:id/processes", api_process_start, "exec", SESSION_BODY },
	{ GET, "/exec/:id/processes", api_process_list, "exec" },
	{ GET, "/exec/:id/processes/:pid", api_process_get, "exec" },
	{ DELETE, "/exec/:id/processes/:pid", api_process_kill, "exec" },
	{ GET, "/exec/:id/processes/:pid/output", api_process_output, "exec" },
	{ POST, "/exec/:id/processes/:pid/wait", api_process_wait, "exec", SMALL_BODY },
	{ POST, "/exec/:id/processes/:pid/signal", api_process_signal, "exec", SMALL_BODY },
	{ POST, "/exec/:id/processes/:pid/stdin", api_process_stdin, "exec" },
	{ POST, "/exec/:id/processes/:pid/resize", api_process_resize, "exec", SMALL_BODY },
	{ GET, "/exec/:id/processes/:pid/ws", api_process_ws, "exec", 0, HTTP_ROUTE_TICKET },
	{ GET, "/exec/:id/terminal", api_terminal_open, "exec", 0, HTTP_ROUTE_TICKET },
	{ POST, "/exec/:id/tickets", api_ticket_create, "exec", SMALL_BODY },
	{ GET, "/exec/:id/watch", api_exec_watch, "exec" },
	{ GET, "/exec/:id/ports", api_exec_ports, "exec" },
	{ GET, "/exec/:id/preview", api_exec_preview, "exec" },
	{ POST, "/exec/:id/preview/token", api_exec_preview_token, "exec", SMALL_BODY },
	{ POST, "/exec/:id/preview/public", api_exec_preview_public, "exec", SMALL_BODY },
	{ GET, "/exec/:id/forward/:port", api_exec_forward, "exec" },
	{ POST, "/exec/:id/pause", api_exec_pause, "exec", SMALL_BODY },
	{ POST, "/exec/:id/resume", api_exec_resume, "exec", SMALL_BODY },
	{ POST, "/exec/:id/fork", api_exec_fork, "exec", SMALL_BODY },
	{ POST, "/exec/:id/snapshot", api_exec_snapshot, "exec", SMALL_BODY },
	{ DELETE, "/exec/:id", api_exec_delete, "exec" },
	{ POST, "/volumes", api_volumes_create, "exec", SMALL_BODY },
	{ GET, "/volumes", api_volumes_list, "exec" },
	{ GET, "/volumes/:name", api_volumes_get, "exec" },
	{ DELETE, "/volumes/:name", api_volumes_delete, "exec" },
	{ GET, "/snapshots", api_snapshots_list, "exec" },
	{ GET, "/snapshots/:name", api_snapshots_get, "exec" },
	{ DELETE, "/snapshots/:name", api_snapshots_delete, "exec" },
	{ GET | POST | DELETE, "/mcp", api_mcp, "exec", 0, HTTP_ROUTE_JSON_BODY },
	{ POST, "/mcp/messages", api_mcp_messages, "exec", 0, HTTP_ROUTE_JSON_BODY },
	{ GET, "/sse", api_mcp_sse, "exec" },
	{ POST, "/messages", api_mcp_messages, "exec", 0, HTTP_ROUTE_JSON_BODY },
	{ POST, "/sandboxes", api_e2b_create, "exec", SESSION_BODY },
	{ GET, "/sandboxes", api_e2b_list, "exec" },
	{ GET, "/v2/sandboxes", api_e2b_list, "exec" },
	{ POST, "/v2/sandboxes", api_e2b_create, "exec", SESSION_BODY },
	{ POST, "/v2/sandboxes/:id/connect", api_e2b_connect, "exec", SMALL_BODY },
	{ GET, "/sandboxes/:id", api_e2b_get, "exec" },
	{ DELETE, "/sandboxes/:id", api_e2b_kill, "exec" },
	{ POST, "/sandboxes/:id/timeout", api_e2b_timeout, "exec", SMALL_BODY },
	{ POST, "/sandboxes/:id/connect", api_e2b_connect, "exec", SMALL_BODY },
	{ GET, "/sandboxes/:id/metrics", api_e2b_metrics, "exec" },
	{ POST, "/sandboxes/:id/pause", api_e2b_pause, "exec", SMALL_BODY },
	{ POST, "/sandboxes/:id/resume", api_e2b_resume, "exec", SMALL_BODY },
	{ GET | POST | DELETE | HTTP_REQ_PUT, "/sandboxes/:id/:what", api_e2b_unsupported, "exec",
	  SMALL_BODY },
	{ GET, "/admin/keys", api_admin_keys_list, "admin" },
	{ POST, "/admin/keys", api_admin_keys_create, "admin", SMALL_BODY },
	{ POST, "/admin/keys/:id/revoke", api_admin_keys_revoke, "admin", SMALL_BODY },
	{ POST, "/admin/keys/:id/rotate", api_admin_keys_rotate, "admin", SMALL_BODY },
	{ DELETE, "/admin/keys/:id", api_admin_keys_delete, "admin" },
	{ HTTP_REQ_PATCH, "/admin/keys/:id", api_admin_keys_update, "admin", SMALL_BODY },
	{ GET, "/admin/nodes", api_admin_nodes_list, "admin" },
	{ POST, "/admin/nodes/:name/cordon", api_admin_nodes_cordon, "admin", SMALL_BODY },
	{ POST, "/admin/nodes/:name/uncordon", api_admin_nodes_uncordon, "admin", SMALL_BODY },
	/* The dashboard's static files: no key (its API calls carry one). */
	{ GET | HTTP_REQ_HEAD, "/ui", api_ui_index, NULL },
	{ GET | HTTP_REQ_HEAD, "/ui/:asset", api_ui_asset, NULL },
};

const size_t api_nroutes = sizeof(api_routes) / sizeof(api_routes[0]);

/* Chosen by the host router (api_host_route) before the routes above: every method, every path
 * below the prefix, and a body as large as an upload's (the handler checks who calls at the
 * head, before any byte of it). */
#define ANY_METHOD                                                                        \
	(HTTP_REQ_GET | HTTP_REQ_POST | HTTP_REQ_PUT | HTTP_REQ_DELETE | HTTP_REQ_PATCH | \
	 HTTP_REQ_HEAD | HTTP_REQ_OPTIONS)
const struct http_route api_preview_host_route = {
	ANY_METHOD,  "<port>-<name> (preview)",
	api_preview, NULL,
	UPLOAD_BODY, HTTP_ROUTE_STREAM_BODY | HTTP_ROUTE_SELF_AUTH
};
const struct http_route api_preview_path_route = {
	ANY_METHOD,  "/exec/:id/ports/:port/*",
	api_preview, NULL,
	UPLOAD_BODY, HTTP_ROUTE_STREAM_BODY | HTTP_ROUTE_SELF_AUTH
};

/* The E2B data plane: no key (the envd token is checked by its handler), a body as large as
 * an upload's (POST /files; RPC bodies are bounded by the handler). */
const struct http_route api_envd_route = {
	ANY_METHOD,  "E2b-Sandbox-Id (envd)",
	api_envd,    NULL,
	UPLOAD_BODY, HTTP_ROUTE_STREAM_BODY | HTTP_ROUTE_SELF_AUTH
};

const struct http_route *api_host_route(struct http_ctx *ctx, const char *host, void *arg)
{
	(void)arg;
	if (api_envd_request(ctx, host))
		return &api_envd_route;
	if (!api_preview_request(ctx, host))
		return NULL;
	return api_preview_host(host) ? &api_preview_host_route : &api_preview_path_route;
}
