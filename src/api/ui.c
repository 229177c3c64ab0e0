/* ui: the dashboard (ui/), served as static files at
 *   GET|HEAD /ui           308 to /ui/
 *   GET|HEAD /ui/          index.html
 *   GET|HEAD /ui/:asset    one asset of the set loaded from SANDBOX_UI_DIR at start
 * These routes need no key: they give out only files installed with the daemon. The page
 * is a client of the API like any other; its calls carry the key it was given, in a header.
 * Every reply of these routes, errors included, carries a strict Content-Security-Policy
 * (scripts and styles only from this server, no framing), X-Frame-Options,
 * X-Content-Type-Options and Referrer-Policy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api.h"
#include "api/ui.h"
#include "util/log.h"

static struct {
	struct ui_assets assets;
	bool loaded;
	char *dir;
} ui_mod;

void ui_init(const struct config *cfg)
{
	ui_shutdown();
	struct err e;
	int n = ui_assets_load(&ui_mod.assets, cfg->ui_dir, &e);
	ui_mod.dir = strdup(cfg->ui_dir);
	if (n < 0) {
		log_info("api", "no dashboard at /ui: %s (SANDBOX_UI_DIR)", e.msg);
		return;
	}
	ui_mod.loaded = ui_assets_find(&ui_mod.assets, "index.html") != NULL;
	if (!ui_mod.loaded)
		log_info("api", "no dashboard at /ui: `%s` has no index.html (SANDBOX_UI_DIR)",
			 cfg->ui_dir);
	else
		log_info("api", "dashboard at /ui: %d files from %s", n, cfg->ui_dir);
}

void ui_shutdown(void)
{
	ui_assets_free(&ui_mod.assets);
	free(ui_mod.dir);
	ui_mod.dir = NULL;
	ui_mod.loaded = false;
}

static void security_headers(struct http_ctx *ctx)
{
	/* 'self' covers ws: of the page's own origin in browsers that follow CSP 3; the origin
	 * is named too, for those that do not. The Host passed the front door's check. */
	const char *host = http_header(ctx, "Host");
	char ws[600] = "";
	if (ui_host_plain(host))
		snprintf(ws, sizeof(ws), " ws://%s wss://%s", host, host);
	char csp[900];
	snprintf(csp, sizeof(csp),
		 "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "
		 "font-src 'self'; connect-src 'self'%s; object-src 'none'; base-uri 'none'; "
		 "form-action 'none'; frame-ancestors 'none'",
		 ws);
	http_add_header(ctx, "Content-Security-Policy", csp);
	http_add_header(ctx, "X-Frame-Options", "DENY");
	http_add_header(ctx, "X-Content-Type-Options", "nosniff");
	http_add_header(ctx, "Referrer-Policy", "no-referrer");
	http_add_header(ctx, "Cross-Origin-Opener-Policy", "same-origin");
	http_add_header(ctx, "Cross-Origin-Resource-Policy", "same-origin");
}

static void serve(struct http_ctx *ctx, const char *name)
{
	security_headers(ctx);
	if (!ui_mod.loaded) {
		http_reply_error(ctx, 404,
				 "The dashboard is not installed: `%s` has no index.html "
				 "(SANDBOX_UI_DIR)",
				 ui_mod.dir ? ui_mod.dir : "");
		return;
	}
	const struct ui_asset *a = ui_assets_find(&ui_mod.assets, name);
	if (!a) {
		http_reply_error(ctx, 404, "No such file in the dashboard");
		return;
	}
	/* Revalidated on every load (no-cache), so that a new build is seen at once. */
	http_add_header(ctx, "Cache-Control", "no-cache");
	http_add_header(ctx, "ETag", a->etag);
	if (ui_etag_match(http_header(ctx, "If-None-Match"), a->etag)) {
		http_reply_bytes(ctx, 304, NULL, "", 0);
		return;
	}
	http_reply_bytes(ctx, 200, a->type, a->data, a->len);
}

void api_ui_index(struct http_ctx *ctx)
{
	/* The router takes /ui and /ui/ for one route: the page's relative links need the
	 * slash. */
	if (ctx->path && strcmp(ctx->path, "/ui") == 0) {
		security_headers(ctx);
		http_add_header(ctx, "Location", "/ui/");
		http_reply_json(ctx, 308, json_pack("{s:s}", "location", "/ui/"));
		return;
	}
	serve(ctx, "index.html");
}

void api_ui_asset(struct http_ctx *ctx)
{
	/* The name as sent, not as decoded: no valid name needs a %-escape, and a decoded one
	 * could hide a NUL ("index.html%00.js") or a slash. */
	const char *raw = ctx->path && strncmp(ctx->path, "/ui/", 4) == 0 ? ctx->path + 4 : "";
	serve(ctx, raw);
}
