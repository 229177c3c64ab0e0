#include "net/pool.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/cleanup.h"

int net_pool_init(struct net_pool *p, const char *cidr, struct err *err)
{
	char ip[INET_ADDRSTRLEN];
	const char *slash = strchr(cidr, '/');
	memset(p, 0, sizeof(*p));
	if (!slash || (size_t)(slash - cidr) >= sizeof(ip))
		return err_set(err, EINVAL, "SANDBOX_NET_POOL `%s`: expected a.b.c.d/len", cidr);
	memcpy(ip, cidr, (size_t)(slash - cidr));
	ip[slash - cidr] = '\0';
	struct in_addr a;
	char *end;
	long len = strtol(slash + 1, &end, 10);
	if (inet_pton(AF_INET, ip, &a) != 1 || *end || end == slash + 1)
		return err_set(err, EINVAL, "SANDBOX_NET_POOL `%s`: expected a.b.c.d/len", cidr);
	if (len < NET_POOL_MIN_PREFIX || len > NET_POOL_MAX_PREFIX)
		return err_set(err, EINVAL,
			       "SANDBOX_NET_POOL `%s`: the prefix length must be %d to %d", cidr,
			       NET_POOL_MIN_PREFIX, NET_POOL_MAX_PREFIX);
	uint32_t mask = 0xffffffffu << (32 - len);
	uint32_t base = ntohl(a.s_addr);
	if (base & ~mask)
		return err_set(
			err, EINVAL,
			"SANDBOX_NET_POOL `%s`: host bits are set (the network is %u.%u.%u.%u/%ld)",
			cidr, (base & mask) >> 24, (base & mask) >> 16 & 0xff,
			(base & mask) >> 8 & 0xff, (base & mask) & 0xff, len);
	p->base = base;
	p->prefix = (unsigned)len;
	p->nblocks = (uint32_t)((1ull << (32 - len)) / NET_POOL_BLOCK);
	p->bits = xcalloc((p->nblocks + 7) / 8, 1);
	return 0;
}

void net_pool_free(struct net_pool *p)
{
	free(p->bits);
	memset(p, 0, sizeof(*p));
}

bool net_pool_in_use(const struct net_pool *p, uint32_t block)
{
	return block < p->nblocks && (p->bits[block / 8] & (1u << (block % 8)));
}

int net_pool_alloc(struct net_pool *p, uint32_t *ret_block)
{
	if (p->used >= p->nblocks)
		return -ENOSPC;
	for (uint32_t i = 0; i < p->nblocks; i++) {
		uint32_t b = (p->next + i) % p->nblocks;
		if (p->bits[b / 8] == 0xff) {
			/* Skip a full byte at once (the common case in a busy pool). */
			i += 7 - b % 8;
			continue;
		}
		if (!net_pool_in_use(p, b)) {
			p->bits[b / 8] |= (uint8_t)(1u << (b % 8));
			p->used++;
			p->next = (b + 1) % p->nblocks;
			*ret_block = b;
			return 0;
		}
	}
	return -ENOSPC;
}

void net_pool_release(struct net_pool *p, uint32_t block)
{
	if (!net_pool_in_use(p, block))
		return;
	p->bits[block / 8] &= (uint8_t) ~(1u << (block % 8));
	p->used--;
}

uint32_t net_pool_addr(const struct net_pool *p, uint32_t block, enum net_pool_slot slot)
{
	return p->base + block * NET_POOL_BLOCK + (uint32_t)slot;
}
