/* sandbox ps: your sessions, with how long each has been idle and when it will go. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "sandbox.h"

void cmd_ps_help(void)
{
	printf("usage: sandbox ps [--json]\n\n"
	       "Lists your sessions (all of them with an admin key). IDLE is the time since the\n"
	       "session's last request; EXPIRES is when the idle timeout will destroy it (never\n"
	       "while a command runs), or the server's expiry time when it gives one; RESOURCES\n"
	       "are the session's own limits when the server reports them (- when it does not);\n"
	       "NET is whether its sandbox has a network (the daemon's /health says why not).\n"
	       "STATE is ready, paused (sandbox pause/resume), hibernated (sandbox pause\n"
	       "--hibernate: its processes were ended), creating or failed; a paused session's\n"
	       "idle clock is stopped (EXPIRES: when resumed).\n"
	       "--json prints the server's session objects as they are.\n");
}

/* "45s", "12m", "3h", "2d": the largest unit, rounded down. */
static void fmt_duration(char *buf, size_t len, long long ms)
{
	long long s = ms < 0 ? 0 : ms / 1000;
	if (s < 60)
		snprintf(buf, len, "%llds", s);
	else if (s < 3600)
		snprintf(buf, len, "%lldm%02llds", s / 60, s % 60);
	else if (s < 86400)
		snprintf(buf, len, "%lldh%02lldm", s / 3600, s / 60 % 60);
	else
		snprintf(buf, len, "%lldd%02lldh", s / 86400, s / 3600 % 24);
}

static void fmt_expiry(char *buf, size_t len, json_t *s)
{
	const char *at = json_string_value(json_object_get(s, "expiresAt"));
	json_t *timeout = json_object_get(s, "idleTimeout");
	const char *state = json_string_value(json_object_get(s, "state"));
	if (state && strcmp(state, "paused") == 0) {
		/* No idle clock while paused (docs/lifecycle.md). */
		snprintf(buf, len, "when resumed");
	} else if (at) {
		snprintf(buf, len, "%s", at);
	} else if (!json_is_integer(timeout)) {
		snprintf(buf, len, "-");
	} else if (json_integer_value(json_object_get(s, "running")) > 0) {
		snprintf(buf, len, "when idle");
	} else {
		char d[32];
		fmt_duration(d, sizeof(d),
			     json_integer_value(timeout) * 1000 -
				     json_integer_value(json_object_get(s, "idleMs")));
		snprintf(buf, len, "in %s", d);
	}
}

/* "memoryBytes=67108864 pidsMax=64" as "mem=64M pids=64"; "-" without resources. */
static void fmt_resources(char *buf, size_t len, json_t *s)
{
	static const struct {
		const char *field, *label;
		bool bytes;
	} names[] = { { "memoryBytes", "mem", true },
		      { "cpuQuotaUs", "cpu", false },
		      { "pidsMax", "pids", false },
		      { "diskBytes", "disk", true } };
	json_t *res = json_object_get(s, "resources");
	size_t n = 0;
	buf[0] = '\0';
	const char *key;
	json_t *v;
	json_object_foreach (res, key, v) {
		const char *label = key;
		bool bytes = false;
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (strcmp(names[i].field, key) == 0)
				label = names[i].label, bytes = names[i].bytes;
		long long x = json_integer_value(v);
		const char *unit = "";
		if (bytes && x && x % (1 << 30) == 0)
			x >>= 30, unit = "G";
		else if (bytes && x && x % (1 << 20) == 0)
			x >>= 20, unit = "M";
		if (n < len)
			n += (size_t)snprintf(buf + n, len - n, "%s%s=%lld%s", n ? "," : "", label,
					      x, unit);
	}
	if (!buf[0])
		snprintf(buf, len, "-");
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
		cli_print_json(json_object_get(r, "sessions"));
	} else {
		printf("%-32s %-12s %-8s %-7s %-9s %-12s %-28s %-4s %s\n", "ID", "TEMPLATE",
		       "STATE", "RUNNING", "IDLE", "EXPIRES", "RESOURCES", "NET", "CREATED");
		size_t i;
		json_t *s;
		json_array_foreach (json_object_get(r, "sessions"), i, s) {
			char idle[32], exp[64], res[128];
			fmt_duration(idle, sizeof(idle),
				     json_integer_value(json_object_get(s, "idleMs")));
			fmt_expiry(exp, sizeof(exp), s);
			fmt_resources(res, sizeof(res), s);
			const char *net = json_string_value(json_object_get(s, "network"));
			const char *state = json_string_value(json_object_get(s, "state"));
			const char *mode = json_string_value(json_object_get(s, "pauseMode"));
			if (mode && strcmp(mode, "hibernate") == 0)
				state = "hibernated";
			printf("%-32s %-12s %-8s %-7lld %-9s %-12s %-28s %-4s %s\n",
			       json_string_value(json_object_get(s, "id")),
			       json_string_value(json_object_get(s, "template")), state,
			       (long long)json_integer_value(json_object_get(s, "running")), idle,
			       exp, res, net ? net : "-",
			       json_string_value(json_object_get(s, "createdAt")));
		}
	}
	json_decref(r);
	client_free(c);
	return rc;
}
