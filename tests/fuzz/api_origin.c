/* Fuzz target: the Host and Origin checks of the front door (src/api/origin.c), which read
 * header values any client sends. The input is split at its first NUL into a Host and an
 * Origin; both are checked against a policy with names, wildcards and origins listed. The
 * answers must be consistent: an IP literal or a listed name always passes, and a check never
 * reads out of bounds. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/origin.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct origin_policy policy, open_policy;
static int ready;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!ready) {
		const char *origins[] = { "https://app.example, http://x.test:8080/", "*bad" };
		origin_policy_init(&policy, "127.0.0.1", "box", "sandbox.example,*.preview.example",
				   origins, 2);
		const char *any[] = { "*" };
		origin_policy_init(&open_policy, "0.0.0.0", "box", "*", any, 1);
		ready = 1;
	}
	if (size > 4096)
		return 0;
	char *buf = malloc(size + 2);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	buf[size + 1] = '\0';
	const char *host = buf;
	const char *origin = buf + strlen(buf) + (strlen(buf) < size ? 1 : 0);
	bool host_ok = origin_host_ok(&policy, host);
	(void)origin_ok(&policy, origin, host_ok ? host : NULL);
	(void)origin_ok(&policy, origin, NULL);
	/* A policy open to any name and origin refuses nothing well formed. */
	if (!origin_ok(&open_policy, origin, host))
		abort();
	if (host_ok && !origin_host_ok(&open_policy, host))
		abort();
	free(buf);
	return 0;
}
