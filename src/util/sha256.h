/* sha256: FIPS 180-4 SHA-256, for hashing API keys at rest. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define SHA256_LEN 32

void sha256(const void *data, size_t len, uint8_t out[SHA256_LEN]);
/* Hex digest into out (65 bytes with the NUL). */
void sha256_hex(const void *data, size_t len, char out[2 * SHA256_LEN + 1]);
