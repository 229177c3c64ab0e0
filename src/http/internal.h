/* What http.c shares with ws.c: not for the rest of the daemon. */
#pragma once

#include <stdbool.h>

#include "http/http.h"

/* Adds a reply header even while a stream starts (no checks: the caller's text is ours). */
void http_add_header_raw(struct http_ctx *ctx, const char *name, const char *value);
