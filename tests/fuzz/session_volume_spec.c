/* Fuzz target: the "volumes" of a session's creation (src/session/volume_spec.c), JSON any
 * client sends. What parses must keep the promises volume_mounts_parse makes: at most
 * SANDBOX_VOLUMES_MAX mounts, valid names and paths, no name twice, no path inside another. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "session/volume.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bool inside(const char *a, const char *b)
{
	size_t n = strlen(b);
	return strncmp(a, b, n) == 0 && (a[n] == '\0' || a[n] == '/');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	json_t *v = json_loadb((const char *)data, size, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
	if (!v)
		return 0;
	struct volume_mounts m;
	struct err e;
	if (volume_mounts_parse(v, &m, &e) < 0) {
		if (!e.msg[0] || m.n != 0)
			abort();
		json_decref(v);
		return 0;
	}
	if (m.n > SANDBOX_VOLUMES_MAX)
		abort();
	for (unsigned i = 0; i < m.n; i++) {
		if (!volume_name_valid(m.m[i].name) || volume_path_check(m.m[i].path, &e) < 0)
			abort();
		for (unsigned k = 0; k < i; k++)
			if (strcmp(m.m[i].name, m.m[k].name) == 0 ||
			    inside(m.m[i].path, m.m[k].path) || inside(m.m[k].path, m.m[i].path))
				abort();
	}
	volume_mounts_fini(&m);
	json_decref(v);
	return 0;
}
