/* mcp_schema: the subset of JSON Schema that the MCP tools' input schemas use (types,
 * required and additional properties, string lengths and patterns, number ranges, enums,
 * arrays of items), applied to a client's arguments before a tool runs, so that the schema a
 * client sees is exactly the rule applied. */
#include <errno.h>
#include <regex.h>
#include <stdio.h>
#include <string.h>

#include "api/mcp.h"
#include "util/cleanup.h"

static bool type_is(json_t *v, const char *type)
{
	if (strcmp(type, "object") == 0)
		return json_is_object(v);
	if (strcmp(type, "array") == 0)
		return json_is_array(v);
	if (strcmp(type, "string") == 0)
		return json_is_string(v);
	if (strcmp(type, "integer") == 0)
		return json_is_integer(v);
	if (strcmp(type, "number") == 0)
		return json_is_number(v);
	if (strcmp(type, "boolean") == 0)
		return json_is_boolean(v);
	if (strcmp(type, "null") == 0)
		return json_is_null(v);
	return false;
}

static const char *type_article(const char *type)
{
	if (strcmp(type, "object") == 0)
		return "an object";
	if (strcmp(type, "array") == 0)
		return "an array";
	if (strcmp(type, "string") == 0)
		return "a string";
	if (strcmp(type, "integer") == 0)
		return "a whole number";
	if (strcmp(type, "number") == 0)
		return "a number";
	if (strcmp(type, "boolean") == 0)
		return "true or false";
	return "null";
}

static int check_type(json_t *schema, json_t *v, const char *where, struct err *err)
{
	json_t *type = json_object_get(schema, "type");
	if (json_is_string(type)) {
		if (!type_is(v, json_string_value(type)))
			return err_set(err, EINVAL, "%s must be %s", where,
				       type_article(json_string_value(type)));
		return 0;
	}
	if (json_is_array(type)) {
		size_t i;
		json_t *t;
		json_array_foreach (type, i, t)
			if (json_is_string(t) && type_is(v, json_string_value(t)))
				return 0;
		/* "a whole number or null" */
		_cleanup_free_ char *want = xstrdup("");
		json_array_foreach (type, i, t) {
			if (!json_is_string(t))
				continue;
			char *more = xasprintf("%s%s%s", want, *want ? " or " : "",
					       type_article(json_string_value(t)));
			free(want);
			want = more;
		}
		return err_set(err, EINVAL, "%s must be %s", where,
			       *want ? want : "of another type");
	}
	return 0;
}

static size_t utf8_chars(const char *s, size_t len)
{
	size_t n = 0;
	for (size_t i = 0; i < len; i++)
		n += ((uint8_t)s[i] & 0xc0) != 0x80;
	return n;
}

static int check_string(json_t *schema, json_t *v, const char *where, struct err *err)
{
	size_t n = utf8_chars(json_string_value(v), json_string_length(v));
	json_t *min = json_object_get(schema, "minLength");
	json_t *max = json_object_get(schema, "maxLength");
	if (json_is_integer(min) && (json_int_t)n < json_integer_value(min))
		return err_set(err, EINVAL, "%s must not be %s", where, n ? "that short" : "empty");
	if (json_is_integer(max) && (json_int_t)n > json_integer_value(max))
		return err_set(err, EINVAL, "%s must be at most %lld characters", where,
			       (long long)json_integer_value(max));
	json_t *pattern = json_object_get(schema, "pattern");
	if (json_is_string(pattern)) {
		regex_t re;
		if (regcomp(&re, json_string_value(pattern), REG_EXTENDED | REG_NOSUB) != 0)
			return err_set(err, EINVAL, "%s: bad pattern in the schema", where);
		/* An embedded NUL cannot occur: jansson rejects \u0000 in strings. */
		int r = regexec(&re, json_string_value(v), 0, NULL, 0);
		regfree(&re);
		if (r != 0)
			return err_set(err, EINVAL, "%s must match %s", where,
				       json_string_value(pattern));
	}
	return 0;
}

static int check_number(json_t *schema, json_t *v, const char *where, struct err *err)
{
	double x = json_number_value(v);
	json_t *min = json_object_get(schema, "minimum");
	json_t *max = json_object_get(schema, "maximum");
	if (json_is_number(min) && x < json_number_value(min))
		return err_set(err, EINVAL, "%s must be at least %.15g", where,
			       json_number_value(min));
	if (json_is_number(max) && x > json_number_value(max))
		return err_set(err, EINVAL, "%s must be at most %.15g", where,
			       json_number_value(max));
	return 0;
}

static int check_object(json_t *schema, json_t *v, const char *where, struct err *err)
{
	json_t *props = json_object_get(schema, "properties");
	json_t *extra = json_object_get(schema, "additionalProperties");
	json_t *required = json_object_get(schema, "required");
	size_t i;
	json_t *r;
	json_array_foreach (required, i, r) {
		if (!json_object_get(v, json_string_value(r)))
			return err_set(err, EINVAL, "%s.%s is required", where,
				       json_string_value(r));
	}
	const char *key;
	json_t *val;
	json_object_foreach (v, key, val) {
		_cleanup_free_ char *sub = xasprintf("%s.%.64s", where, key);
		json_t *ps = json_object_get(props, key);
		if (!ps && json_is_false(extra)) {
			_cleanup_free_ char *names = xstrdup("");
			const char *pk;
			json_t *pv;
			json_object_foreach (props, pk, pv) {
				char *more = xasprintf("%s%s%s", names, *names ? ", " : "", pk);
				free(names);
				names = more;
			}
			return err_set(err, EINVAL, "%s is not an argument of this tool (%s: %s)",
				       sub, *names ? "expected" : "it takes none",
				       *names ? names : "no arguments");
		}
		if (!ps && json_is_object(extra))
			ps = extra;
		if (ps && mcp_schema_check(ps, val, sub, err) < 0)
			return -EINVAL;
	}
	return 0;
}

int mcp_schema_check(json_t *schema, json_t *v, const char *where, struct err *err)
{
	if (check_type(schema, v, where, err) < 0)
		return -EINVAL;
	json_t *en = json_object_get(schema, "enum");
	if (json_is_array(en)) {
		size_t i;
		json_t *e;
		bool found = false;
		json_array_foreach (en, i, e)
			found = found || json_equal(e, v);
		if (!found)
			return err_set(err, EINVAL, "%s must be one of the allowed values", where);
	}
	if (json_is_string(v))
		return check_string(schema, v, where, err);
	if (json_is_number(v))
		return check_number(schema, v, where, err);
	if (json_is_object(v))
		return check_object(schema, v, where, err);
	if (json_is_array(v)) {
		json_t *items = json_object_get(schema, "items");
		size_t i;
		json_t *item;
		json_array_foreach (v, i, item) {
			if (!items)
				break;
			_cleanup_free_ char *sub = xasprintf("%s[%zu]", where, i);
			if (mcp_schema_check(items, item, sub, err) < 0)
				return -EINVAL;
		}
	}
	return 0;
}
