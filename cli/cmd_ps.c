/* sandbox ps: your sessions, with how long each has been idle and when it will go. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "sandbox.h"
#include "util/cleanup.h"

void cmd_ps_help(void)
{
	printf("usage: sandbox ps [--json]\n\n"
	       "Lists your sessions (all of them with an admin key). IDLE is the time since the\n"
	       "session's last request; EXPIRES is when the idle timeout will destroy it (never\n"
	       "while a command runs), or the server's expiry time when it gives one; RESOURCES\n"
	       "are the session's own limits when the server reports them (- when it does not);\n"
	       "NET is whether its sandbox has a network (the daemon's /health says why not).\n"
	       "STORAGE is where its files are: tmpfs:SIZE (in memory), or disk:USED/SIZE (a\n"
	       "disk of its own; disk:SIZE while the server does not measure it).\n"
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

/* 67108864 as "64M", 1234567 as "1.2M": whole units when exact, else one decimal. */
static void fmt_size(char *buf, size_t len, long long x)
{
	static const char units[] = "KMGT";
	if (x < 1024) {
		snprintf(buf, len, "%lldB", x < 0 ? 0 : x);
		return;
	}
	int u = 0;
	long long div = 1024;
	while (u < 3 && x >= div * 1024)
		div *= 1024, u++;
	if (x % div == 0)
		snprintf(buf, len, "%lld%c", x / div, units[u]);
	else
		snprintf(buf, len, "%.1f%c", (double)x / (double)div, units[u]);
}

/* "memoryBytes=67108864 pidsMax=64" as "mem=64M,pids=64"; "-" without resources. The storage
 * asked for is shown in its own column. */
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
		if (strcmp(key, "storage") == 0)
			continue;
		const char *label = key;
		bool bytes = false;
		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
			if (strcmp(names[i].field, key) == 0)
				label = names[i].label, bytes = names[i].bytes;
		char val[64];
		if (json_is_string(v))
			snprintf(val, sizeof(val), "%s", json_string_value(v));
		else if (bytes)
			fmt_size(val, sizeof(val), json_integer_value(v));
		else
			snprintf(val, sizeof(val), "%lld", (long long)json_integer_value(v));
		if (n < len)
			n += (size_t)snprintf(buf + n, len - n, "%s%s=%s", n ? "," : "", label,
					      val);
	}
	if (!buf[0])
		snprintf(buf, len, "-");
}

/* "disk:1.2M/64M" (used/size of a disk of its own, as the server measures it), "disk:64M"
 * when it gives no usage (a hibernated session), "tmpfs:64M" (its size); "-" without any. */
static void fmt_storage(char *buf, size_t len, json_t *s)
{
	const char *kind = json_string_value(json_object_get(s, "storage"));
	json_t *disk = json_object_get(s, "disk");
	json_t *limit = json_object_get(json_object_get(s, "limits"), "diskBytes");
	char used[32], size[32];
	if (!kind) {
		snprintf(buf, len, "-");
	} else if (json_is_integer(json_object_get(disk, "usedBytes")) &&
		   json_is_integer(json_object_get(disk, "sizeBytes"))) {
		fmt_size(used, sizeof(used),
			 json_integer_value(json_object_get(disk, "usedBytes")));
		fmt_size(size, sizeof(size),
			 json_integer_value(json_object_get(disk, "sizeBytes")));
		snprintf(buf, len, "%s:%s/%s", kind, used, size);
	} else if (json_is_integer(limit)) {
		fmt_size(size, sizeof(size), json_integer_value(limit));
		snprintf(buf, len, "%s:%s", kind, size);
	} else {
		snprintf(buf, len, "%s", kind);
	}
}

enum {
	COL_ID,
	COL_TEMPLATE,
	COL_STATE,
	COL_RUNNING,
	COL_IDLE,
	COL_EXPIRES,
	COL_RESOURCES,
	COL_NET,
	COL_STORAGE,
	COL_CREATED,
	NCOLS
};

static const char *const headers[NCOLS] = { "ID",      "TEMPLATE",  "STATE", "RUNNING", "IDLE",
					    "EXPIRES", "RESOURCES", "NET",   "STORAGE", "CREATED" };

/* One row's cells (each freed by the caller). */
static void session_row(json_t *s, char *cells[NCOLS])
{
	char idle[32], exp[64], res[256], storage[96];
	fmt_duration(idle, sizeof(idle), json_integer_value(json_object_get(s, "idleMs")));
	fmt_expiry(exp, sizeof(exp), s);
	fmt_resources(res, sizeof(res), s);
	fmt_storage(storage, sizeof(storage), s);
	const char *net = json_string_value(json_object_get(s, "network"));
	const char *state = json_string_value(json_object_get(s, "state"));
	const char *mode = json_string_value(json_object_get(s, "pauseMode"));
	const char *id = json_string_value(json_object_get(s, "id"));
	const char *tmpl = json_string_value(json_object_get(s, "template"));
	const char *created = json_string_value(json_object_get(s, "createdAt"));
	if (mode && strcmp(mode, "hibernate") == 0)
		state = "hibernated";
	cells[COL_ID] = xstrdup(id ? id : "-");
	cells[COL_TEMPLATE] = xstrdup(tmpl ? tmpl : "-");
	cells[COL_STATE] = xstrdup(state ? state : "-");
	cells[COL_RUNNING] =
		xasprintf("%lld", (long long)json_integer_value(json_object_get(s, "running")));
	cells[COL_IDLE] = xstrdup(idle);
	cells[COL_EXPIRES] = xstrdup(exp);
	cells[COL_RESOURCES] = xstrdup(res);
	cells[COL_NET] = xstrdup(net ? net : "-");
	cells[COL_STORAGE] = xstrdup(storage);
	cells[COL_CREATED] = xstrdup(created ? created : "-");
}

/* One line: every cell padded to its column's width but the last. */
static void print_row(const char *const cells[NCOLS], const size_t width[NCOLS])
{
	for (int c = 0; c + 1 < NCOLS; c++)
		printf("%-*s ", (int)width[c], cells[c]);
	printf("%s\n", cells[NCOLS - 1]);
}

/* Prints the table with every column as wide as its widest cell. */
static void print_table(json_t *sessions)
{
	size_t n = json_array_size(sessions), width[NCOLS], i;
	char *(*rows)[NCOLS] = xcalloc(n ? n : 1, sizeof(*rows));
	json_t *s;
	for (int c = 0; c < NCOLS; c++)
		width[c] = strlen(headers[c]);
	json_array_foreach (sessions, i, s) {
		session_row(s, rows[i]);
		for (int c = 0; c < NCOLS; c++)
			if (strlen(rows[i][c]) > width[c])
				width[c] = strlen(rows[i][c]);
	}
	print_row(headers, width);
	for (i = 0; i < n; i++) {
		print_row((const char *const *)rows[i], width);
		for (int c = 0; c < NCOLS; c++)
			free(rows[i][c]);
	}
	free(rows);
}

int cmd_ps(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	json_t *r = NULL;
	struct err e;
	int rc = 0;
	if (client_json(c, "GET", "/exec/", NULL, &r, NULL, &e) < 0)
		rc = cli_fail("%s", e.msg);
	else if (cli_flag(argc, argv, "--json"))
		cli_print_json(json_object_get(r, "sessions"));
	else
		print_table(json_object_get(r, "sessions"));
	json_decref(r);
	client_free(c);
	return rc;
}
