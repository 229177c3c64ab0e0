/* preview: session preview names, the session secret and its token views (preview.h). */
#include "session/preview.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <string.h>

#include "session/internal.h"
#include "util/random.h"

struct session *session_find_preview(const char *name)
{
	for (struct hlink *l = htab_first(&session_mod.previews, htab_hash_str(name)); l;
	     l = htab_next(l)) {
		struct session *s = htab_entry(l, struct session, by_preview);
		if (strcmp(s->preview_name, name) == 0 && s->state != SESSION_DESTROYING &&
		    s->state != SESSION_GONE)
			return s;
	}
	return NULL;
}

void session_preview_init(struct session *s)
{
	random_bytes(s->secret, sizeof(s->secret));
	/* A name is an origin (cookies, storage, shared links): one a client chose is never
	 * handed to the next session that asks for it, so it gets a random tail; only an id the
	 * server made up (random already) serves as it is. */
	if (s->id_generated && session_preview_label_ok(s->id) && !session_find_preview(s->id)) {
		snprintf(s->preview_name, sizeof(s->preview_name), "%s", s->id);
		return;
	}
	bool keep =
		session_preview_label_ok(s->id) && strlen(s->id) <= SESSION_PREVIEW_NAME_MAX - 9;
	do {
		if (keep) {
			char tail[9];
			random_hex(tail, 4);
			snprintf(s->preview_name, sizeof(s->preview_name), "%s-%s", s->id, tail);
		} else {
			/* "p" and 20 hex digits */
			s->preview_name[0] = 'p';
			random_hex(s->preview_name + 1, 10);
		}
	} while (session_find_preview(s->preview_name));
}

static const char *view_label(enum session_token_view v)
{
	switch (v) {
	case SESSION_TOKEN_ENVD:
		return "envd";
	case SESSION_TOKEN_E2B_TRAFFIC:
		return "e2b-traffic";
	case SESSION_TOKEN_TRAFFIC:
		break;
	}
	return "traffic";
}

void session_token(const struct session *s, enum session_token_view v,
		   char out[SESSION_TOKEN_LEN + 1])
{
	uint8_t mac[EVP_MAX_MD_SIZE];
	unsigned len = 0;
	const char *label = view_label(v);
	HMAC(EVP_sha256(), s->secret, (int)sizeof(s->secret), (const uint8_t *)label, strlen(label),
	     mac, &len);
	static const char hex[] = "0123456789abcdef";
	memcpy(out,
	       v == SESSION_TOKEN_ENVD          ? "ea_"
	       : v == SESSION_TOKEN_E2B_TRAFFIC ? "ta_"
						: "pt_",
	       3);
	for (size_t i = 0; i < 20; i++) {
		out[3 + 2 * i] = hex[mac[i] >> 4];
		out[4 + 2 * i] = hex[mac[i] & 15];
	}
	out[SESSION_TOKEN_LEN] = '\0';
	OPENSSL_cleanse(mac, sizeof(mac));
}

bool session_token_check(const struct session *s, enum session_token_view v, const char *given)
{
	if (!given || strlen(given) != SESSION_TOKEN_LEN)
		return false;
	char want[SESSION_TOKEN_LEN + 1];
	session_token(s, v, want);
	bool ok = CRYPTO_memcmp(want, given, SESSION_TOKEN_LEN) == 0;
	OPENSSL_cleanse(want, sizeof(want));
	return ok;
}

void session_secret_rotate(struct session *s)
{
	random_bytes(s->secret, sizeof(s->secret));
}

bool session_port_public(const struct session *s, unsigned port)
{
	for (size_t i = 0; i < s->npublic; i++)
		if (s->public_ports[i] == port)
			return true;
	return false;
}

int session_port_set_public(struct session *s, unsigned port, bool on)
{
	for (size_t i = 0; i < s->npublic; i++) {
		if (s->public_ports[i] != port)
			continue;
		if (!on)
			s->public_ports[i] = s->public_ports[--s->npublic];
		return 0;
	}
	if (!on)
		return 0;
	if (s->npublic == SESSION_PUBLIC_PORTS_MAX)
		return -ENOSPC;
	s->public_ports[s->npublic++] = (uint16_t)port;
	return 0;
}
