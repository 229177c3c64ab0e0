/* Fuzz target: the reader of /etc/subuid and /etc/subgid (jail_subid_check in
 * src/driver/jail/jail_uid.c), which parses "name:start:count" lines whatever the file holds.
 * The input's first 16 bytes are the range [lo, lo + len), the rest is the file. Naming an
 * owner only ever removes refusals: a range the file leaves free stays free. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "driver/jail/jail.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 16 || size > 65536)
		return 0;
	uint64_t lo, len;
	memcpy(&lo, data, 8);
	memcpy(&len, data + 8, 8);
	lo %= 1ULL << 32;
	len = len % (1ULL << 32) + 1;
	int fd = memfd_create("subid", MFD_CLOEXEC);
	if (fd < 0)
		return 0;
	if (write(fd, data + 16, size - 16) != (ssize_t)(size - 16)) {
		close(fd);
		return 0;
	}
	char path[64];
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	struct err e;
	int plain = jail_subid_check(path, lo, lo + len, NULL, &e);
	int owned = jail_subid_check(path, lo, lo + len, "agent-sandbox", &e);
	if (plain != 0 && plain != -EEXIST)
		__builtin_trap();
	if (plain == 0 && owned != 0)
		__builtin_trap();
	close(fd);
	return 0;
}
