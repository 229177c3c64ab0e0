/* preview: how a session is reached from outside the API's routes.
 *
 * Its preview name is the DNS label of its `<port>-<name>.<SANDBOX_PUBLIC_DOMAIN>` host names:
 * the session id when that is a lowercase DNS label of at most SESSION_PREVIEW_NAME_MAX
 * characters that no other live session uses, else a generated one; host names are global,
 * session ids only per owner, so the session object is where a client learns its name.
 *
 * Its secret (random, in memory only: it ends with the session) is never handed out itself:
 * the tokens given out are views of it, an HMAC of the secret and the view's label, so that
 * one view does not give another's rights. The traffic token opens the session's previews
 * (and is E2B's `trafficAccessToken`); the envd token its data plane (E2B's
 * `envdAccessToken`). Rotating the secret changes every view at once. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

struct session;

#define SESSION_PREVIEW_NAME_MAX 57
#define SESSION_SECRET_LEN       32
/* A token's length: a 2-letter view prefix, '_', 40 hex digits. */
#define SESSION_TOKEN_LEN 43
/* Ports a session may make public at once. */
#define SESSION_PUBLIC_PORTS_MAX 32

enum session_token_view {
	SESSION_TOKEN_TRAFFIC, /* previews: "pt_...", the session's HTTP ports and nothing else */
	SESSION_TOKEN_ENVD,    /* the E2B data plane: "ea_...", runs commands and code */
	/* E2B's trafficAccessToken: "ta_...", the HTTP ports and the code interpreter's context
	 * routes (which carry nothing else), never code */
	SESSION_TOKEN_E2B_TRAFFIC,
};

/* Whether name is a lowercase DNS label of 1 to SESSION_PREVIEW_NAME_MAX characters (a-z,
 * 0-9, '-', not at either end). */
static inline bool session_preview_label_ok(const char *name)
{
	size_t n = strlen(name);
	if (n == 0 || n > SESSION_PREVIEW_NAME_MAX || name[0] == '-' || name[n - 1] == '-')
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
			return false;
	}
	return true;
}

/* Gives a new session its secret and its preview name (in the table's namespace: call it
 * before the session is added to the table). */
void session_preview_init(struct session *s);

/* The live session whose preview name is `name`, or NULL. */
struct session *session_find_preview(const char *name);

/* Writes the view's token (SESSION_TOKEN_LEN characters and a NUL) into out. */
void session_token(const struct session *s, enum session_token_view v,
		   char out[SESSION_TOKEN_LEN + 1]);
/* Whether `given` is the view's current token (constant time). */
bool session_token_check(const struct session *s, enum session_token_view v, const char *given);
/* A new secret: every token given out so far stops working. */
void session_secret_rotate(struct session *s);

/* The per-port public switch: a public port is reachable without a key or a token. */
bool session_port_public(const struct session *s, unsigned port);
/* 0, or -ENOSPC when SESSION_PUBLIC_PORTS_MAX ports are public already. */
int session_port_set_public(struct session *s, unsigned port, bool on);
