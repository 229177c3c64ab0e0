/* sandbox rm: destroy sessions, or remove files of them (SESSION:PATH, cmd_fs.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "sandbox.h"
#include "util/cleanup.h"

void cmd_rm_help(void)
{
	printf("usage: sandbox rm SESSION...\n"
	       "       sandbox rm [-r|--recursive] SESSION:PATH...   remove files of a session\n");
}

int cmd_rm(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	if (argc < 2) {
		cmd_rm_help();
		client_free(c);
		return 2;
	}
	/* With a colon the arguments name files (session ids have none). */
	for (int i = 1; i < argc; i++) {
		if (strchr(argv[i], ':')) {
			int r = cli_rm_paths(c, argc, argv);
			client_free(c);
			return r;
		}
	}
	int rc = 0;
	for (int i = 1; i < argc; i++) {
		_cleanup_free_ char *esc = client_escape(argv[i]);
		_cleanup_free_ char *p = xasprintf("/exec/%s", esc);
		struct err e;
		json_t *reply = NULL;
		if (client_json(c, "DELETE", p, NULL, &reply, NULL, &e) < 0) {
			rc = cli_fail("%s: %s", argv[i], e.msg);
			continue;
		}
		/* An unknown session is a 200 with destroyed false (the reference's answer). */
		if (json_is_false(json_object_get(reply, "destroyed"))) {
			const char *msg = json_string_value(json_object_get(reply, "message"));
			rc = cli_fail("%s: %s", argv[i], msg ? msg : "no such session");
		}
		json_decref(reply);
	}
	client_free(c);
	return rc;
}
