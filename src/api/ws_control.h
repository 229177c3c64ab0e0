/* ws_control: the JSON control messages a terminal's WebSocket client sends in text frames
 * (binary frames are raw input):
 *   {"type": "resize", "rows": R, "cols": C}   the terminal's size (1 to 1000 each)
 *   {"type": "signal", "signal": "INT"}        a signal to the process's group
 *   {"type": "input", "data": "text"}          input as text (as a binary frame would be)
 *   {"type": "eof"}                            end of input (^D on a terminal)
 * Anything else is EINVAL with a message meant for the client. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "util/err.h"

#define WS_CONTROL_MAX (64u << 10) /* bytes of one control message */

enum ws_control_type { WS_CTL_RESIZE, WS_CTL_SIGNAL, WS_CTL_INPUT, WS_CTL_EOF };

struct ws_control {
	enum ws_control_type type;
	unsigned rows, cols; /* resize */
	int signal;          /* signal: its number */
	char *data;          /* input: the text (owned; ws_control_fini) */
	size_t len;
};

int ws_control_parse(const uint8_t *p, size_t n, struct ws_control *out, struct err *err);
void ws_control_fini(struct ws_control *c);
