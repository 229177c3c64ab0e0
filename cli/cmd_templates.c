/* sandbox templates: list the daemon's templates, or build one from templates/<name>/. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "sandbox.h"
#include "util/cleanup.h"

void cmd_templates_help(void)
{
	printf("usage: sandbox templates [--json]      list the templates the daemon has loaded\n"
	       "       sandbox templates build NAME     build templates/NAME (needs root)\n\n"
	       "The build runs templates/build.sh from $SANDBOX_SOURCE_DIR, or the source tree\n"
	       "this binary was built in, else the installed builder (%s).\n"
	       "The daemon loads new templates on SIGHUP.\n",
	       TEMPLATE_BUILDER_INSTALLED);
}

/* templates/build.sh: beside the source tree of the build this binary is from. */
static char *build_script(void)
{
	const char *src = getenv("SANDBOX_SOURCE_DIR");
	if (src && *src)
		return xasprintf("%s/templates/build.sh", src);
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return NULL;
	exe[n] = '\0';
	/* <src>/build/cli/sandbox -> <src>/templates/build.sh */
	for (int up = 0; up < 3; up++) {
		char *slash = strrchr(exe, '/');
		if (!slash)
			return NULL;
		*slash = '\0';
		char *candidate = xasprintf("%s/templates/build.sh", exe);
		if (access(candidate, X_OK) == 0)
			return candidate;
		free(candidate);
	}
	return access(TEMPLATE_BUILDER_INSTALLED, X_OK) == 0 ? xstrdup(TEMPLATE_BUILDER_INSTALLED)
							     : NULL;
}

int cmd_templates(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	if (argc >= 2 && strcmp(argv[1], "build") == 0) {
		client_free(c);
		if (argc != 3)
			return cli_fail("usage: sandbox templates build NAME");
		_cleanup_free_ char *script = build_script();
		if (!script)
			return cli_fail("cannot find templates/build.sh; set SANDBOX_SOURCE_DIR");
		execl(script, script, argv[2], (char *)NULL);
		return cli_fail("cannot run %s: %s", script, strerror(errno));
	}
	json_t *r = NULL;
	struct err e;
	int rc = 0;
	if (client_json(c, "GET", "/exec/templates", NULL, &r, NULL, &e) < 0) {
		rc = cli_fail("%s", e.msg);
	} else if (cli_flag(argc, argv, "--json")) {
		cli_print_json(json_object_get(r, "templates"));
	} else {
		size_t i;
		json_t *t;
		json_array_foreach (json_object_get(r, "templates"), i, t) {
			const char *d = json_string_value(json_object_get(t, "description"));
			printf("%-12s %s\n", json_string_value(json_object_get(t, "name")),
			       d ? d : "");
		}
	}
	json_decref(r);
	client_free(c);
	return rc;
}
