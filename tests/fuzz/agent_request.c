/* Fuzz target: REQUEST validation (agent/request.c): any payload either fails with a message
 * or yields a request whose invariants the operations rely on. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct req r;
	struct err e = { 0 };
	if (req_parse(data, size, &r, &e) < 0) {
		if (!e.msg[0] || !e.errnum)
			abort();
		return 0;
	}
	switch (r.op) {
	case REQ_EXEC:
		if (!r.u.exec.argc || !r.u.exec.argv[0] || r.u.exec.argv[r.u.exec.argc] ||
		    !*r.u.exec.argv[0])
			abort();
		for (size_t i = 0; i < r.u.exec.argc; i++)
			(void)strlen(r.u.exec.argv[i]);
		for (size_t i = 0; i < r.u.exec.env_n; i++)
			if (strchr(r.u.exec.env_keys[i], '=') || !r.u.exec.env_vals[i])
				abort();
		if (r.u.exec.timeout_ms < 0 || r.u.exec.kill_grace_ms < 0)
			abort();
		break;
	case REQ_WRITE:
	case REQ_READ:
	case REQ_STAT:
	case REQ_MKDIR:
	case REQ_REMOVE:
	case REQ_LIST:
		if (!r.path)
			abort();
		break;
	case REQ_RESUME:
		if (r.u.resume.entropy_len > REQ_MAX_ENTROPY)
			abort();
		break;
	default:
		break;
	}
	req_fini(&r);
	return 0;
}
