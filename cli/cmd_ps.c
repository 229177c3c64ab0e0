/* sandbox ps: your sessions. */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "sandbox.h"

void cmd_ps_help(void)
{
	printf("usage: sandbox ps [--json]\n");
}

int cmd_ps(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	json_t *r = NULL;
	struct err e;
	int rc = 0;
	if (client_json(c, "GET", "/exec/", NULL, &r, NULL, &e) < 0) {
		rc = cli_fail("%s", e.msg);
	} else if (cli_flag(argc, argv, "--json")) {
		char *s = json_dumps(json_object_get(r, "sessions"), JSON_INDENT(2));
		puts(s);
		free(s);
	} else {
		printf("%-32s %-12s %-10s %-8s %s\n", "ID", "TEMPLATE", "STATE", "RUNNING",
		       "CREATED");
		size_t i;
		json_t *s;
		json_array_foreach (json_object_get(r, "sessions"), i, s)
			printf("%-32s %-12s %-10s %-8lld %s\n",
			       json_string_value(json_object_get(s, "id")),
			       json_string_value(json_object_get(s, "template")),
			       json_string_value(json_object_get(s, "state")),
			       (long long)json_integer_value(json_object_get(s, "running")),
			       json_string_value(json_object_get(s, "createdAt")));
	}
	json_decref(r);
	client_free(c);
	return rc;
}
