/* guest event: validation of EVENT payloads (see event.h). */
#include "guest/event.h"

#include <errno.h>
#include <string.h>

#include "guest/proto.h"
#include "util/text.h"

static const char *const kinds[] = { "create", "write", "remove", "rename", "chmod" };

int guest_event_path_ok(const char *s, size_t n)
{
	if (n == 0 || n > GUEST_EVENT_PATH_MAX || memchr(s, '\0', n))
		return 0;
	if (!utf8_valid((const uint8_t *)s, n))
		return 0;
	if (n == 1 && s[0] == '.')
		return 1;
	size_t start = 0;
	for (size_t i = 0; i <= n; i++) {
		if (i < n && s[i] != '/')
			continue;
		size_t len = i - start;
		if (len == 0)
			return 0; /* leading, trailing or doubled "/" */
		if ((len == 1 && s[start] == '.') ||
		    (len == 2 && s[start] == '.' && s[start + 1] == '.'))
			return 0;
		start = i + 1;
	}
	return 1;
}

static int bad(struct err *err, const char *what)
{
	return err_set(err, EBADMSG, "sandbox agent sent an event %s", what);
}

static int get_path(json_t *o, const char *key, json_t **ret)
{
	json_t *v = json_object_get(o, key);
	if (!json_is_string(v) || !guest_event_path_ok(json_string_value(v), json_string_length(v)))
		return -1;
	*ret = v;
	return 0;
}

int guest_event_parse(const uint8_t *p, size_t n, json_t **ret, struct err *err)
{
	*ret = NULL;
	if (n > GUEST_EVENT_MAX)
		return err_set(err, EMSGSIZE,
			       "sandbox agent sent an event of %zu bytes (at most %u)", n,
			       GUEST_EVENT_MAX);
	json_error_t jerr;
	json_t *o = json_loadb((const char *)p, n, JSON_REJECT_DUPLICATES, &jerr);
	int r = guest_event_check(o, n, ret, err);
	json_decref(o);
	return r;
}

int guest_event_check(json_t *o, size_t n, json_t **ret, struct err *err)
{
	*ret = NULL;
	if (n > GUEST_EVENT_MAX)
		return err_set(err, EMSGSIZE,
			       "sandbox agent sent an event of %zu bytes (at most %u)", n,
			       GUEST_EVENT_MAX);
	if (!json_is_object(o))
		return bad(err, "that is not a JSON object");
	int r = 0;
	const char *type = json_string_value(json_object_get(o, "type"));
	size_t k = 0;
	while (type && k < sizeof(kinds) / sizeof(kinds[0]) && strcmp(type, kinds[k]) != 0)
		k++;
	if (type && strcmp(type, "ready") == 0) {
		json_t *path = NULL, *w = json_object_get(o, "watches");
		if (get_path(o, "path", &path) < 0 || !json_is_integer(w) ||
		    json_integer_value(w) < 1 || json_integer_value(w) > GUEST_EVENT_WATCHES_MAX ||
		    json_object_size(o) != 3)
			return bad(err, "of type ready that is not {type, path, watches}");
		*ret = json_pack("{s:s, s:O, s:O}", "type", "ready", "path", path, "watches", w);
		return 0;
	}
	if (type && strcmp(type, "overflow") == 0) {
		if (json_object_size(o) != 1)
			return bad(err, "of type overflow with other members");
		*ret = json_pack("{s:s}", "type", "overflow");
		return 0;
	}
	if (!type || k == sizeof(kinds) / sizeof(kinds[0]))
		return bad(err, "of an unknown type");
	json_t *path = NULL, *from = NULL, *dir = json_object_get(o, "dir");
	bool is_rename = strcmp(type, "rename") == 0;
	size_t members = 3;
	if (get_path(o, "path", &path) < 0)
		r = bad(err, "without a valid relative path");
	else if (!json_is_boolean(dir))
		r = bad(err, "without a boolean \"dir\"");
	else if (json_object_get(o, "from") &&
		 (!is_rename || (members++, get_path(o, "from", &from) < 0)))
		r = bad(err, "with an invalid \"from\"");
	else if (json_object_size(o) != members)
		r = bad(err, "with unknown members");
	if (r == 0) {
		*ret = json_pack("{s:s, s:O, s:O}", "type", kinds[k], "path", path, "dir", dir);
		if (from)
			json_object_set(*ret, "from", from);
	}
	return r;
}
