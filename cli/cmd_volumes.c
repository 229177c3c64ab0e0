/* sandbox volumes: the caller's persistent volumes (create, ls, rm). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "sandbox.h"
#include "util/cleanup.h"
#include "util/size.h"

void cmd_volumes_help(void)
{
	printf("usage: sandbox volumes create NAME SIZE   make a volume of SIZE (bytes, or K, M, "
	       "G, T)\n"
	       "       sandbox volumes ls [--json]        list your volumes\n"
	       "       sandbox volumes rm NAME...         delete volumes and their files\n\n"
	       "Sessions mount volumes at creation: sandbox create --volume NAME:/PATH[:ro].\n"
	       "A volume is read-write in one session at a time, read-only in any number.\n");
}

int cli_parse_size(const char *what, const char *s, json_int_t *ret)
{
	uint64_t v;
	int r = size_parse(s, &v);
	if (r < 0) {
		cli_fail("%s takes a size: `%s` is %s", what, s, size_parse_problem(r));
		return -1;
	}
	if (v == 0) {
		cli_fail("%s takes a size: `%s` is none (more than 0 bytes)", what, s);
		return -1;
	}
	*ret = (json_int_t)v;
	return 0;
}

int cli_volume_add(json_t *volumes, const char *spec)
{
	const char *colon = strchr(spec, ':');
	if (!colon || colon == spec || colon[1] != '/')
		return cli_fail("--volume takes NAME:/PATH or NAME:/PATH:ro, not `%s`", spec);
	_cleanup_free_ char *name = strndup(spec, (size_t)(colon - spec));
	_cleanup_free_ char *path = strdup(colon + 1);
	bool ro = false;
	size_t n = strlen(path);
	if (n > 3 && strcmp(path + n - 3, ":ro") == 0) {
		path[n - 3] = '\0';
		ro = true;
	} else if (n > 3 && strcmp(path + n - 3, ":rw") == 0) {
		path[n - 3] = '\0';
	}
	json_array_append_new(
		volumes, json_pack("{s:s, s:s, s:b}", "name", name, "path", path, "readOnly", ro));
	return 0;
}

static char *volume_path(const char *name)
{
	/* Names are [A-Za-z0-9._-]: nothing to escape; others are refused by the server. */
	for (const char *p = name; *p; p++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-",
			    *p))
			return NULL;
	return xasprintf("/volumes/%s", name);
}

static void print_volume(json_t *v)
{
	json_t *mounts = json_object_get(v, "mounts");
	printf("%-24s %12lld %12lld  %-8s %zu\n", json_string_value(json_object_get(v, "name")),
	       (long long)json_integer_value(json_object_get(v, "sizeBytes")),
	       (long long)json_integer_value(json_object_get(v, "allocatedBytes")),
	       json_string_value(json_object_get(v, "state")), json_array_size(mounts));
}

int cmd_volumes(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	const char *sub = argc >= 2 ? argv[1] : "ls";
	bool json = cli_flag(argc, argv, "--json");
	json_t *r = NULL;
	struct err e;
	int rc = 0;
	if (strcmp(sub, "create") == 0) {
		json_int_t size;
		if (argc < 4) {
			rc = cli_fail(
				"usage: sandbox volumes create NAME SIZE (bytes, or K, M, G, T)");
		} else if (cli_parse_size("SIZE", argv[3], &size) < 0) {
			rc = 1;
		} else {
			json_t *body = json_pack("{s:s, s:I}", "name", argv[2], "sizeBytes", size);
			if (client_json(c, "POST", "/volumes", body, &r, NULL, &e) < 0)
				rc = cli_fail("%s", e.msg);
			else if (json)
				cli_print_json(r);
			else
				puts(json_string_value(json_object_get(r, "name")));
			json_decref(body);
		}
	} else if (strcmp(sub, "ls") == 0 || strcmp(sub, "list") == 0) {
		if (client_json(c, "GET", "/volumes", NULL, &r, NULL, &e) < 0) {
			rc = cli_fail("%s", e.msg);
		} else if (json) {
			cli_print_json(json_object_get(r, "volumes"));
		} else {
			printf("%-24s %12s %12s  %-8s %s\n", "NAME", "SIZE", "ALLOCATED", "STATE",
			       "MOUNTS");
			size_t i;
			json_t *v;
			json_array_foreach (json_object_get(r, "volumes"), i, v)
				print_volume(v);
		}
	} else if (strcmp(sub, "rm") == 0 || strcmp(sub, "delete") == 0) {
		if (argc < 3)
			rc = cli_fail("usage: sandbox volumes rm NAME...");
		for (int i = 2; i < argc; i++) {
			if (argv[i][0] == '-')
				continue;
			_cleanup_free_ char *path = volume_path(argv[i]);
			json_t *out = NULL;
			if (!path)
				rc = cli_fail("`%s` is not a volume name", argv[i]);
			else if (client_json(c, "DELETE", path, NULL, &out, NULL, &e) < 0)
				rc = cli_fail("%s", e.msg);
			json_decref(out);
		}
	} else {
		rc = cli_fail("unknown volumes command `%s` (create, ls, rm)", sub);
	}
	json_decref(r);
	client_free(c);
	return rc;
}
