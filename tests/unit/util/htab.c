/* Tests of src/util/htab.c: SipHash-2-4 against its published test vector, and the table
 * (insert, duplicate keys, remove, growth). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "util/htab.h"

/* The hash's key is random; for the reference vector the test sets it (htab.c's key is
 * static, so this test links a copy of the algorithm through a seam). */
uint64_t htab_siphash_keyed(const uint64_t key[2], const void *data, size_t n);

static void test_vector(void **state)
{
	(void)state;
	/* The paper's appendix: key 00 01 ... 0f, message 00 01 ... 0e (15 bytes). */
	uint8_t k[16], m[15];
	for (int i = 0; i < 16; i++)
		k[i] = (uint8_t)i;
	for (int i = 0; i < 15; i++)
		m[i] = (uint8_t)i;
	uint64_t key[2];
	memcpy(&key[0], k, 8);
	memcpy(&key[1], k + 8, 8);
	assert_true(htab_siphash_keyed(key, m, sizeof(m)) == 0xa129ca6149be45e5ULL);
}

static void test_keyed(void **state)
{
	(void)state;
	assert_true(htab_hash_str("abc") == htab_hash_str("abc"));
	assert_true(htab_hash_str("abc") != htab_hash_str("abd"));
	assert_true(htab_hash("", 0) != htab_hash("\0", 1));
}

struct item {
	struct hlink link;
	int key;
	int value;
};

static uint64_t key_hash(int key)
{
	return htab_hash(&key, sizeof(key));
}

static struct item *find(struct htab *t, int key, int value)
{
	for (struct hlink *l = htab_first(t, key_hash(key)); l; l = htab_next(l)) {
		struct item *it = (struct item *)l;
		if (it->key == key && (value < 0 || it->value == value))
			return it;
	}
	return NULL;
}

static void test_table(void **state)
{
	(void)state;
	struct htab t = { 0 };
	assert_null(find(&t, 1, -1));
	enum { N = 5000 };
	struct item *items = calloc(N, sizeof(*items));
	for (int i = 0; i < N; i++) {
		items[i].key = i / 2; /* every key twice */
		items[i].value = i;
		htab_insert(&t, &items[i].link, key_hash(items[i].key));
	}
	assert_int_equal(t.count, N);
	assert_true(t.nbuckets >= N);
	for (int i = 0; i < N; i++)
		assert_ptr_equal(find(&t, i / 2, i), &items[i]);
	/* Removing one of two entries of a key leaves the other. */
	for (int i = 0; i < N; i += 2)
		htab_remove(&t, &items[i].link);
	assert_int_equal(t.count, N / 2);
	for (int i = 0; i < N; i++) {
		struct item *it = find(&t, i / 2, -1);
		assert_non_null(it);
		assert_int_equal(it->value, (i / 2) * 2 + 1);
	}
	assert_null(find(&t, N, -1));
	htab_fini(&t);
	free(items);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_vector),
		cmocka_unit_test(test_keyed),
		cmocka_unit_test(test_table),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
