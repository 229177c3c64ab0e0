/* sandbox ls: files of a session. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "sandbox.h"
#include "util/cleanup.h"

void cmd_ls_help(void)
{
	printf("usage: sandbox ls SESSION [PATH] [-r|--recursive] [--json]\n");
}

int cmd_ls(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	bool json = cli_flag(argc, argv, "--json");
	bool rec = cli_flag(argc, argv, "-r") || cli_flag(argc, argv, "--recursive");
	const char *id = NULL, *path = ".";
	for (int i = 1; i < argc; i++) {
		if (argv[i][0] == '-')
			continue;
		if (!id)
			id = argv[i];
		else
			path = argv[i];
	}
	if (!id) {
		cmd_ls_help();
		client_free(c);
		return 2;
	}
	_cleanup_free_ char *esc = client_escape(id);
	_cleanup_free_ char *q = client_escape(path);
	_cleanup_free_ char *p =
		xasprintf("/exec/%s/files?path=%s&recursive=%s", esc, q, rec ? "true" : "false");
	json_t *r = NULL;
	struct err e;
	int rc = 0;
	if (client_json(c, "GET", p, NULL, &r, NULL, &e) < 0) {
		rc = cli_fail("%s", e.msg);
	} else if (json) {
		cli_print_json(r);
	} else {
		size_t i;
		json_t *f;
		json_array_foreach (json_object_get(r, "files"), i, f) {
			const char *type = json_string_value(json_object_get(f, "type"));
			printf("%-7s %10lld  %s%s\n", type ? type : "?",
			       (long long)json_integer_value(json_object_get(f, "size")),
			       json_string_value(json_object_get(f, "path")),
			       type && strcmp(type, "dir") == 0 ? "/" : "");
		}
		if (json_is_true(json_object_get(r, "truncated")))
			fprintf(stderr, "sandbox: the listing was truncated\n");
	}
	json_decref(r);
	client_free(c);
	return rc;
}
