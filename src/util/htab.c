/* htab: an intrusive hash table with a keyed hash (htab.h). */
#include "util/htab.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"
#include "util/random.h"

static uint64_t sip_key[2];
static pthread_once_t sip_once = PTHREAD_ONCE_INIT;

static void sip_init(void)
{
	random_bytes(sip_key, sizeof(sip_key));
}

static inline uint64_t rotl(uint64_t x, int b)
{
	return (x << b) | (x >> (64 - b));
}

#define SIPROUND(v0, v1, v2, v3)   \
	do {                       \
		v0 += v1;          \
		v1 = rotl(v1, 13); \
		v1 ^= v0;          \
		v0 = rotl(v0, 32); \
		v2 += v3;          \
		v3 = rotl(v3, 16); \
		v3 ^= v2;          \
		v0 += v3;          \
		v3 = rotl(v3, 21); \
		v3 ^= v0;          \
		v2 += v1;          \
		v1 = rotl(v1, 17); \
		v1 ^= v2;          \
		v2 = rotl(v2, 32); \
	} while (0)

static uint64_t load_le64(const uint8_t *p)
{
	uint64_t v = 0;
	for (int i = 7; i >= 0; i--)
		v = (v << 8) | p[i];
	return v;
}

/* SipHash-2-4 (Aumasson and Bernstein) of n bytes under key (little-endian halves). */
uint64_t htab_siphash_keyed(const uint64_t key[2], const void *data, size_t n);
uint64_t htab_siphash_keyed(const uint64_t key[2], const void *data, size_t n)
{
	const uint8_t *p = data;
	uint64_t k0 = key[0], k1 = key[1];
	uint64_t v0 = k0 ^ 0x736f6d6570736575ULL, v1 = k1 ^ 0x646f72616e646f6dULL;
	uint64_t v2 = k0 ^ 0x6c7967656e657261ULL, v3 = k1 ^ 0x7465646279746573ULL;
	size_t whole = n - n % 8;
	for (size_t i = 0; i < whole; i += 8) {
		uint64_t m = load_le64(p + i);
		v3 ^= m;
		SIPROUND(v0, v1, v2, v3);
		SIPROUND(v0, v1, v2, v3);
		v0 ^= m;
	}
	uint64_t last = (uint64_t)(n & 0xff) << 56;
	for (size_t i = 0; i < n % 8; i++)
		last |= (uint64_t)p[whole + i] << (8 * i);
	v3 ^= last;
	SIPROUND(v0, v1, v2, v3);
	SIPROUND(v0, v1, v2, v3);
	v0 ^= last;
	v2 ^= 0xff;
	for (int i = 0; i < 4; i++)
		SIPROUND(v0, v1, v2, v3);
	return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t htab_hash(const void *data, size_t n)
{
	pthread_once(&sip_once, sip_init);
	return htab_siphash_keyed(sip_key, data, n);
}

uint64_t htab_hash_str(const char *s)
{
	return htab_hash(s, strlen(s));
}

uint64_t htab_hash_combine(uint64_t h, uint64_t more)
{
	uint64_t pair[2] = { h, more };
	return htab_hash(pair, sizeof(pair));
}

static void grow(struct htab *t)
{
	size_t n = t->nbuckets ? t->nbuckets * 2 : 64;
	struct hlink **b = xcalloc(n, sizeof(*b));
	for (size_t i = 0; i < t->nbuckets; i++) {
		for (struct hlink *l = t->buckets[i], *next; l; l = next) {
			next = l->next;
			l->next = b[l->hash & (n - 1)];
			b[l->hash & (n - 1)] = l;
		}
	}
	free(t->buckets);
	t->buckets = b;
	t->nbuckets = n;
}

void htab_insert(struct htab *t, struct hlink *l, uint64_t hash)
{
	if (t->count >= t->nbuckets)
		grow(t);
	l->hash = hash;
	struct hlink **head = &t->buckets[hash & (t->nbuckets - 1)];
	l->next = *head;
	*head = l;
	t->count++;
}

void htab_remove(struct htab *t, struct hlink *l)
{
	if (!t->nbuckets)
		return;
	for (struct hlink **pp = &t->buckets[l->hash & (t->nbuckets - 1)]; *pp; pp = &(*pp)->next) {
		if (*pp == l) {
			*pp = l->next;
			l->next = NULL;
			t->count--;
			return;
		}
	}
}

static struct hlink *same_hash(struct hlink *l, uint64_t hash)
{
	while (l && l->hash != hash)
		l = l->next;
	return l;
}

struct hlink *htab_first(const struct htab *t, uint64_t hash)
{
	if (!t->nbuckets)
		return NULL;
	return same_hash(t->buckets[hash & (t->nbuckets - 1)], hash);
}

struct hlink *htab_next(const struct hlink *l)
{
	return same_hash(l->next, l->hash);
}

void htab_fini(struct htab *t)
{
	free(t->buckets);
	*t = (struct htab){ 0 };
}
