/* Tests of src/api/mcp_schema.c: the JSON Schema subset applied to MCP tool arguments. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "api/mcp.h"

static const char schema_text[] =
	"{\"type\": \"object\", \"additionalProperties\": false, \"required\": [\"command\"],"
	" \"properties\": {"
	"  \"command\": {\"type\": \"string\", \"minLength\": 1, \"maxLength\": 8},"
	"  \"sessionId\": {\"type\": \"string\", \"pattern\": \"^[a-z0-9-]+$\"},"
	"  \"timeout\": {\"type\": [\"integer\", \"null\"], \"minimum\": 0, \"maximum\": 1000},"
	"  \"stream\": {\"enum\": [\"stdout\", \"stderr\"]},"
	"  \"args\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}},"
	"  \"env\": {\"type\": \"object\", \"additionalProperties\": {\"type\": \"string\"}}"
	"}}";

/* The error for args (JSON), or NULL when they pass. */
static const char *check(const char *args)
{
	static struct err e;
	json_t *schema = json_loads(schema_text, 0, NULL);
	json_t *v = json_loads(args, JSON_DECODE_ANY, NULL);
	assert_non_null(schema);
	assert_non_null(v);
	int r = mcp_schema_check(schema, v, "arguments", &e);
	json_decref(schema);
	json_decref(v);
	return r < 0 ? e.msg : NULL;
}

static void test_valid(void **state)
{
	assert_null(check("{\"command\": \"ls\"}"));
	assert_null(check("{\"command\": \"ls\", \"sessionId\": \"a-1\", \"timeout\": 1000,"
			  " \"stream\": \"stderr\", \"args\": [\"-l\"], \"env\": {\"A\": \"b\"}}"));
	assert_null(check("{\"command\": \"ls\", \"timeout\": null}"));
}

static void test_invalid(void **state)
{
	static const struct {
		const char *args, *error;
	} cases[] = {
		{ "[]", "arguments must be an object" },
		{ "{}", "arguments.command is required" },
		{ "{\"command\": 5}", "arguments.command must be a string" },
		{ "{\"command\": \"\"}", "arguments.command must not be empty" },
		{ "{\"command\": \"123456789\"}", "arguments.command" },
		{ "{\"command\": \"ls\", \"sessionId\": \"A B\"}", "arguments.sessionId" },
		{ "{\"command\": \"ls\", \"timeout\": -1}",
		  "arguments.timeout must be at least 0" },
		{ "{\"command\": \"ls\", \"timeout\": 1001}",
		  "arguments.timeout must be at most 1000" },
		{ "{\"command\": \"ls\", \"timeout\": 1.5}",
		  "arguments.timeout must be a whole number or null" },
		{ "{\"command\": \"ls\", \"stream\": \"both\"}",
		  "arguments.stream must be one of the allowed values" },
		{ "{\"command\": \"ls\", \"args\": [\"a\", 2]}",
		  "arguments.args[1] must be a string" },
		{ "{\"command\": \"ls\", \"env\": {\"A\": 1}}",
		  "arguments.env.A must be a string" },
		{ "{\"command\": \"ls\", \"cwd\": \"/\"}",
		  "arguments.cwd is not an argument of this tool" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		const char *got = check(cases[i].args);
		if (!got || !strstr(got, cases[i].error))
			fail_msg("%s: expected an error with \"%s\", got %s", cases[i].args,
				 cases[i].error, got ? got : "none");
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid),
		cmocka_unit_test(test_invalid),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
