/* ticket: see ticket.h. */
#include "auth/ticket.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "auth/keys.h"
#include "util/random.h"
#include "util/time.h"

struct ticket {
	char secret[TICKET_LEN + 1]; /* "" when free */
	char owner[40];
	char session[129];
	unsigned scopes;
	uint64_t expires_ms;
};

static struct ticket ticket_slots[TICKET_MAX];

int ticket_issue(const char *owner, unsigned scopes, const char *session_id,
		 char out[TICKET_LEN + 1], struct err *err)
{
	uint64_t now = time_mono_ms();
	struct ticket *slot = NULL;
	size_t mine = 0;
	for (size_t i = 0; i < TICKET_MAX; i++) {
		struct ticket *t = &ticket_slots[i];
		if (t->secret[0] && t->expires_ms <= now)
			t->secret[0] = '\0';
		if (!t->secret[0]) {
			if (!slot)
				slot = t;
			continue;
		}
		if (strcmp(t->owner, owner) == 0)
			mine++;
	}
	if (!slot || mine >= TICKET_PER_OWNER)
		return err_set(err, EAGAIN,
			       "too many WebSocket tickets outstanding (at most %d per key): use "
			       "or let expire the ones issued",
			       TICKET_PER_OWNER);
	random_hex(slot->secret, TICKET_LEN / 2);
	snprintf(slot->owner, sizeof(slot->owner), "%s", owner);
	snprintf(slot->session, sizeof(slot->session), "%s", session_id);
	slot->scopes = scopes;
	slot->expires_ms = now + TICKET_TTL_MS;
	memcpy(out, slot->secret, TICKET_LEN + 1);
	return 0;
}

bool ticket_take(const char *ticket, const char *session_id, char owner[40], unsigned *scopes)
{
	if (!ticket || strlen(ticket) != TICKET_LEN)
		return false;
	uint64_t now = time_mono_ms();
	for (size_t i = 0; i < TICKET_MAX; i++) {
		struct ticket *t = &ticket_slots[i];
		if (!t->secret[0] || !auth_secure_equal(t->secret, ticket))
			continue;
		/* Found: whatever else is wrong, it is used up. */
		bool ok = t->expires_ms > now && strcmp(t->session, session_id) == 0;
		t->secret[0] = '\0';
		if (ok) {
			memcpy(owner, t->owner, sizeof(t->owner));
			*scopes = t->scopes;
		}
		return ok;
	}
	return false;
}
