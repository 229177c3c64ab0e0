/* ws_control: see ws_control.h. */
#include "api/ws_control.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "session/ops.h"
#include "util/cleanup.h"
#include "util/signame.h"

void ws_control_fini(struct ws_control *c)
{
	free(c->data);
	c->data = NULL;
}

int ws_control_parse(const uint8_t *p, size_t n, struct ws_control *out, struct err *err)
{
	memset(out, 0, sizeof(*out));
	if (n > WS_CONTROL_MAX)
		return err_set(err, EINVAL, "a control message has at most %u bytes",
			       WS_CONTROL_MAX);
	json_error_t jerr;
	json_auto_t *j = json_loadb((const char *)p, n, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(j))
		return err_set(
			err, EINVAL,
			"a text message must be a JSON object such as {\"type\": \"resize\", "
			"\"rows\": 24, \"cols\": 80}");
	const char *type = json_string_value(json_object_get(j, "type"));
	if (!type)
		return err_set(err, EINVAL, "a control message needs a \"type\"");
	if (!strcmp(type, "resize")) {
		json_t *r = json_object_get(j, "rows"), *c = json_object_get(j, "cols");
		if (!json_is_integer(r) || !json_is_integer(c) || json_integer_value(r) < 1 ||
		    json_integer_value(r) > OPS_TERMINAL_MAX || json_integer_value(c) < 1 ||
		    json_integer_value(c) > OPS_TERMINAL_MAX)
			return err_set(
				err, EINVAL,
				"resize: \"rows\" and \"cols\" must be integers from 1 to %d",
				OPS_TERMINAL_MAX);
		out->type = WS_CTL_RESIZE;
		out->rows = (unsigned)json_integer_value(r);
		out->cols = (unsigned)json_integer_value(c);
		return 0;
	}
	if (!strcmp(type, "signal")) {
		int sig = signal_from_name(json_string_value(json_object_get(j, "signal")));
		if (sig < 0)
			return err_set(
				err, EINVAL,
				"signal: \"signal\" must be a name such as \"INT\" or \"TERM\"");
		out->type = WS_CTL_SIGNAL;
		out->signal = sig;
		return 0;
	}
	if (!strcmp(type, "input")) {
		json_t *d = json_object_get(j, "data");
		if (!json_is_string(d))
			return err_set(err, EINVAL, "input: \"data\" must be a string");
		out->type = WS_CTL_INPUT;
		out->len = json_string_length(d);
		out->data = xmalloc(out->len + 1);
		memcpy(out->data, json_string_value(d), out->len + 1);
		return 0;
	}
	if (!strcmp(type, "eof")) {
		out->type = WS_CTL_EOF;
		return 0;
	}
	return err_set(err, EINVAL,
		       "unknown control message type `%.40s` (resize, signal, input, eof)", type);
}
