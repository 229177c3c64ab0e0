/* Fuzz target: the preview Host parser (src/api/host.c), which reads a header any client
 * sends. A name it accepts must be one the parser could have been given: a port in range and
 * a valid preview label, written back it parses to the same thing. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/host.h"
#include "session/preview.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size > 1024)
		return 0;
	char *buf = malloc(size + 1);
	if (!buf)
		return 0;
	memcpy(buf, data, size);
	buf[size] = '\0';
	static const char *const domains[] = { "localhost", "preview.example.com", "a" };
	for (size_t d = 0; d < 3; d++) {
		struct preview_host h;
		if (preview_host_parse(buf, domains[d], &h) < 0)
			continue;
		if (h.port < 1 || h.port > 65535 || !session_preview_label_ok(h.name))
			abort();
		char again[400];
		snprintf(again, sizeof(again), "%u-%s.%s", h.port, h.name, domains[d]);
		struct preview_host h2;
		if (preview_host_parse(again, domains[d], &h2) < 0 || h2.port != h.port ||
		    strcmp(h2.name, h.name))
			abort();
	}
	(void)preview_domain_ok(buf);
	free(buf);
	return 0;
}
