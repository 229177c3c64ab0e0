/* Fuzz target: a terminal WebSocket's control messages (src/api/ws_control.c), text frames
 * any client sends. What parses must be within the bounds it promises: a size of 1 to 1000, a
 * signal from the list, input that is exactly the string given. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "api/ws_control.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ws_control c;
	struct err e;
	if (ws_control_parse(data, size, &c, &e) < 0) {
		if (!e.msg[0])
			abort(); /* every refusal says why */
		return 0;
	}
	switch (c.type) {
	case WS_CTL_RESIZE:
		if (c.rows < 1 || c.rows > 1000 || c.cols < 1 || c.cols > 1000)
			abort();
		break;
	case WS_CTL_SIGNAL:
		if (c.signal < 1 || c.signal > 64)
			abort();
		break;
	case WS_CTL_INPUT:
		if (!c.data || c.data[c.len] != '\0')
			abort();
		break;
	case WS_CTL_EOF:
		break;
	}
	ws_control_fini(&c);
	return 0;
}
