/* Tests of src/net/pool.c: carving the pool, never handing out a block twice, next-fit. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "net/pool.h"

static void test_init_errors(void **state)
{
	struct net_pool p;
	struct err e;
	assert_int_equal(net_pool_init(&p, "10.200.0.0", &e), -EINVAL);
	assert_int_equal(net_pool_init(&p, "10.200.0.0/", &e), -EINVAL);
	assert_int_equal(net_pool_init(&p, "10.200.0.0/x", &e), -EINVAL);
	assert_int_equal(net_pool_init(&p, "10.300.0.0/16", &e), -EINVAL);
	assert_int_equal(net_pool_init(&p, "10.200.0.0/31", &e), -EINVAL);
	assert_int_equal(net_pool_init(&p, "10.0.0.0/7", &e), -EINVAL);
	assert_int_equal(net_pool_init(&p, "10.200.1.0/16", &e), -EINVAL);
	assert_non_null(strstr(e.msg, "10.200.0.0/16"));
}

static void test_addresses(void **state)
{
	struct net_pool p;
	struct err e;
	assert_int_equal(net_pool_init(&p, "10.200.0.0/16", &e), 0);
	assert_int_equal(p.nblocks, 16384);
	uint32_t b;
	assert_int_equal(net_pool_alloc(&p, &b), 0);
	assert_int_equal(b, 0);
	assert_int_equal(net_pool_addr(&p, b, NET_POOL_HOST), 0x0ac80000);
	assert_int_equal(net_pool_addr(&p, b, NET_POOL_NS), 0x0ac80001);
	assert_int_equal(net_pool_addr(&p, b, NET_POOL_INNER), 0x0ac80002);
	assert_int_equal(net_pool_addr(&p, b, NET_POOL_GUEST), 0x0ac80003);
	assert_int_equal(net_pool_alloc(&p, &b), 0);
	assert_int_equal(net_pool_addr(&p, b, NET_POOL_HOST), 0x0ac80004);
	net_pool_free(&p);
}

static void test_next_fit(void **state)
{
	struct net_pool p;
	struct err e;
	assert_int_equal(net_pool_init(&p, "192.0.2.0/28", &e), 0);
	assert_int_equal(p.nblocks, 4);
	uint32_t a, b, c, d, x;
	assert_int_equal(net_pool_alloc(&p, &a), 0);
	assert_int_equal(net_pool_alloc(&p, &b), 0);
	assert_int_equal(net_pool_alloc(&p, &c), 0);
	net_pool_release(&p, b);
	/* The block just released is the last to come back. */
	assert_int_equal(net_pool_alloc(&p, &d), 0);
	assert_int_equal(d, 3);
	assert_int_equal(net_pool_alloc(&p, &x), 0);
	assert_int_equal(x, b);
	assert_int_equal(net_pool_alloc(&p, &x), -ENOSPC);
	assert_int_equal(p.used, 4);
	net_pool_release(&p, a);
	net_pool_release(&p, a); /* twice: no effect */
	assert_int_equal(p.used, 3);
	assert_false(net_pool_in_use(&p, a));
	assert_true(net_pool_in_use(&p, c));
	assert_false(net_pool_in_use(&p, 99));
	net_pool_release(&p, 99);
	net_pool_free(&p);

	assert_int_equal(net_pool_init(&p, "192.0.2.4/30", &e), 0);
	assert_int_equal(p.nblocks, 1);
	assert_int_equal(net_pool_alloc(&p, &a), 0);
	assert_int_equal(net_pool_alloc(&p, &b), -ENOSPC);
	net_pool_free(&p);
}

static void test_every_block_once(void **state)
{
	struct net_pool p;
	struct err e;
	assert_int_equal(net_pool_init(&p, "10.200.0.0/16", &e), 0);
	uint8_t *seen = calloc(p.nblocks, 1);
	uint32_t b;
	/* Free a few in the middle as we go, as sessions end out of order. */
	for (uint32_t i = 0; i < p.nblocks; i++) {
		assert_int_equal(net_pool_alloc(&p, &b), 0);
		assert_int_equal(seen[b], 0);
		seen[b] = 1;
	}
	assert_int_equal(net_pool_alloc(&p, &b), -ENOSPC);
	for (uint32_t i = 100; i < 200; i += 3) {
		net_pool_release(&p, i);
		seen[i] = 0;
	}
	for (uint32_t i = 100; i < 200; i += 3) {
		assert_int_equal(net_pool_alloc(&p, &b), 0);
		assert_int_equal(seen[b], 0);
		seen[b] = 1;
	}
	assert_int_equal(net_pool_alloc(&p, &b), -ENOSPC);
	free(seen);
	net_pool_free(&p);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_init_errors),
		cmocka_unit_test(test_addresses),
		cmocka_unit_test(test_next_fit),
		cmocka_unit_test(test_every_block_once),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
