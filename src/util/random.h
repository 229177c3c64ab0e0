/* random: bytes from the kernel's generator, for ids, secrets and a guest's entropy. */
#pragma once

#include <stddef.h>

/* Fills buf with n random bytes; aborts if the kernel cannot give them (it always can once
 * booted: a daemon without randomness must not go on making secrets). */
void random_bytes(void *buf, size_t n);

/* Writes nbytes random bytes as 2 * nbytes lower-case hex digits and a NUL to out. */
void random_hex(char *out, size_t nbytes);
