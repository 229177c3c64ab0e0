/* sandbox cat: a file of a session on stdout, bytes exactly. */
#include <stdio.h>
#include <stdlib.h>

#include "cli.h"
#include "sandbox.h"
#include "util/cleanup.h"

void cmd_cat_help(void)
{
	printf("usage: sandbox cat SESSION PATH\n");
}

int cmd_cat(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	if (argc != 3) {
		cmd_cat_help();
		client_free(c);
		return 2;
	}
	_cleanup_free_ char *esc = client_escape(argv[1]);
	_cleanup_free_ char *q = client_escape(argv[2]);
	_cleanup_free_ char *p = xasprintf("/exec/%s/read?path=%s", esc, q);
	_cleanup_free_ char *data = NULL;
	size_t len;
	struct err e;
	int rc = 0;
	if (client_bytes(c, p, &data, &len, &e) < 0)
		rc = cli_fail("%s", e.msg);
	else
		fwrite(data, 1, len, stdout);
	client_free(c);
	return rc;
}
