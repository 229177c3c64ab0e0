/* sandbox create: a session made explicitly, with its own template, timeout, env, limits, or
 * from a snapshot. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth/keys.h"
#include "cli.h"
#include "sandbox.h"

void cmd_create_help(void)
{
	printf("usage: sandbox create [ID] [--template T] [--idle-timeout DURATION] [--env "
	       "K=V]...\n"
	       "                      [--memory SIZE] [--cpu-quota US] [--pids N] [--disk SIZE]\n"
	       "                      [--storage disk|tmpfs] [--volume NAME:/PATH[:ro]]... "
	       "[--json]\n"
	       "                      [--on-timeout destroy|pause] [--snapshot NAME]\n\n"
	       "Creates a session (its id is made up when ID is absent) and prints its id.\n"
	       "  -t, --template T        template; default the server's\n"
	       "  --idle-timeout DURATION destroyed after this long without a request: seconds,\n"
	       "                          or 90m, 12h, 7d (at most 7d)\n"
	       "  --on-timeout destroy|pause  what the idle timeout does (default destroy):\n"
	       "                          pause keeps the session as it is until `sandbox resume`\n"
	       "  -e, --env K=V           environment of every command in the session\n"
	       "  --memory SIZE           memory limit: bytes, or with K, M, G, T (at least 16M)\n"
	       "  --cpu-quota US          CPU time per the server's CPU period, in microseconds\n"
	       "  --pids N                at most N processes (at least 4)\n"
	       "  --disk SIZE             disk size (jail, disk storage: at most\n"
	       "                          SANDBOX_MAX_DISK_BYTES), else workspace size; at least "
	       "1M\n"
	       "  --storage disk|tmpfs    jail: root and /workspace on a disk, or tmpfs\n"
	       "  -v, --volume NAME:/PATH[:ro]  mount a persistent volume (sandbox volumes\n"
	       "                          create)\n"
	       "  --snapshot NAME         start from a snapshot (sandbox snapshot): its files,\n"
	       "                          and on qemu its processes; its template, limits and\n"
	       "                          storage are the snapshot's (so not with --template,\n"
	       "                          --memory, --cpu-quota, --pids, --disk, --storage,\n"
	       "                          --volume)\n"
	       "Limits may only lower the server's (a disk: within its cap). --json prints the "
	       "session object.\n");
}

static int parse_count(const char *s, json_int_t *ret)
{
	char *end;
	long long v = strtoll(s, &end, 10);
	if (end == s || *end || v <= 0)
		return -1;
	*ret = v;
	return 0;
}

/* Fills body from argv; returns 0, or 2 after a message on a bad option. */
static int parse_create_opts(int argc, char **argv, json_t *body)
{
	json_t *env = json_object_get(body, "env");
	json_t *res = json_object_get(body, "resources");
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--json") == 0)
			continue;
		if (a[0] != '-') {
			if (json_object_get(body, "id"))
				return cli_fail("unexpected argument `%s`", a), 2;
			json_object_set_new(body, "id", json_string(a));
			continue;
		}
		if (i + 1 >= argc)
			return cli_fail("option %s needs a value", a), 2;
		const char *v = argv[++i];
		json_int_t n;
		if (strcmp(a, "--template") == 0 || strcmp(a, "-t") == 0) {
			json_object_set_new(body, "template", json_string(v));
		} else if (strcmp(a, "--snapshot") == 0) {
			json_object_set_new(body, "snapshot", json_string(v));
		} else if (strcmp(a, "--idle-timeout") == 0) {
			int64_t secs;
			if (keys_parse_duration(v, &secs) < 0 || secs <= 0)
				return cli_fail(
					       "--idle-timeout takes a duration like 600, 90m, 12h "
					       "or 7d"),
				       2;
			json_object_set_new(body, "idleTimeout", json_integer(secs));
		} else if (strcmp(a, "--on-timeout") == 0) {
			if (strcmp(v, "destroy") != 0 && strcmp(v, "pause") != 0)
				return cli_fail("--on-timeout takes destroy or pause"), 2;
			json_object_set_new(body, "onTimeout", json_string(v));
		} else if (strcmp(a, "--env") == 0 || strcmp(a, "-e") == 0) {
			if (cli_env_add(env, v) < 0)
				return 2;
		} else if (strcmp(a, "--memory") == 0 || strcmp(a, "--disk") == 0) {
			if (cli_parse_size(a, v, &n) < 0)
				return 2;
			json_object_set_new(res, a[2] == 'm' ? "memoryBytes" : "diskBytes",
					    json_integer(n));
		} else if (strcmp(a, "--volume") == 0 || strcmp(a, "-v") == 0) {
			json_t *vols = json_object_get(body, "volumes");
			if (!vols) {
				vols = json_array();
				json_object_set_new(body, "volumes", vols);
			}
			if (cli_volume_add(vols, v) != 0)
				return 2;
		} else if (strcmp(a, "--storage") == 0) {
			if (strcmp(v, "disk") != 0 && strcmp(v, "tmpfs") != 0)
				return cli_fail("--storage takes disk or tmpfs"), 2;
			json_object_set_new(body, "storage", json_string(v));
		} else if (strcmp(a, "--cpu-quota") == 0 || strcmp(a, "--pids") == 0) {
			if (parse_count(v, &n) < 0)
				return cli_fail("%s takes a positive whole number", a), 2;
			json_object_set_new(res, a[2] == 'c' ? "cpuQuotaUs" : "pidsMax",
					    json_integer(n));
		} else {
			return cli_fail("unknown option `%s`", a), 2;
		}
	}
	return 0;
}

int cmd_create(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	bool json = cli_flag(argc, argv, "--json");
	json_t *body = json_pack("{s:o, s:o}", "env", json_object(), "resources", json_object());
	int rc = parse_create_opts(argc, argv, body);
	if (rc == 0) {
		if (!json_object_size(json_object_get(body, "env")))
			json_object_del(body, "env");
		if (!json_object_size(json_object_get(body, "resources")))
			json_object_del(body, "resources");
		json_t *session = NULL;
		struct err e;
		if (client_json(c, "POST", "/exec/", body, &session, NULL, &e) < 0) {
			rc = cli_fail("%s", e.msg);
		} else if (json) {
			cli_print_json(session);
		} else {
			puts(json_string_value(json_object_get(session, "id")));
		}
		json_decref(session);
	}
	json_decref(body);
	client_free(c);
	return rc;
}
