/* ticket: one-use, short-lived passes for WebSocket upgrades. A browser cannot set headers
 * on a WebSocket, and an API key must never go into a URL: an authenticated POST gets a
 * ticket bound to the caller's identity and one session, and the upgrade presents it as
 * `?ticket=`. A ticket works once, within TICKET_TTL_MS, for that session only.
 *
 * At most TICKET_MAX are outstanding at once (TICKET_PER_OWNER per key); expired ones are
 * forgotten as new ones are issued. Only the loop thread calls this. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include "util/err.h"

#define TICKET_TTL_MS    30000
#define TICKET_MAX       4096
#define TICKET_PER_OWNER 64
#define TICKET_LEN       48 /* hex characters */

/* Issues a ticket for owner (a key id, "" without authentication) with its scopes, for
 * session_id, into out; EAGAIN when too many are outstanding. */
int ticket_issue(const char *owner, unsigned scopes, const char *session_id,
		 char out[TICKET_LEN + 1], struct err *err);

/* Takes the ticket for session_id: true (and its owner and scopes) once; false
 * for one unknown, used, expired or for another session. */
bool ticket_take(const char *ticket, const char *session_id, char owner[40], unsigned *scopes);
