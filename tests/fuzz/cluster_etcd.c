/* Fuzz target: what etcd's JSON gateway answers (src/cluster/etcd.c), which a node parses
 * from every member it reaches: a range reply, and the lines of a watch's stream. Whatever
 * the input, the parsers answer 0 or an error, and what they return is whole: every key and
 * value NUL-terminated at its length, the revision to resume from never going back. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cluster/etcd.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int on_event(enum etcd_event_type t, const struct etcd_kv *kv, void *arg)
{
	size_t *n = arg;
	if (strlen(kv->value) > kv->value_len || kv->value[kv->value_len] != '\0' || !kv->key)
		abort();
	(*n)++;
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct etcd_kvs kvs;
	struct err e;
	if (etcd_parse_range((const char *)data, size, &kvs, &e) == 0) {
		for (size_t i = 0; i < kvs.n; i++)
			if (!kvs.v[i].key || kvs.v[i].value[kvs.v[i].value_len] != '\0')
				abort();
		etcd_kvs_clear(&kvs);
	} else if (e.errnum != EBADMSG) {
		abort();
	}
	/* The same bytes as a watch's stream, line by line. */
	int64_t next = 1;
	size_t events = 0;
	const char *p = (const char *)data, *end = p + size;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t len = nl ? (size_t)(nl - p) : (size_t)(end - p);
		int64_t before = next;
		int r = etcd_watch_parse_line(p, len, on_event, &events, &next, &e);
		if (r == 0 && next < before)
			abort();
		if (r < 0 && r != -EBADMSG && r != -ESTALE && r != -EIO)
			abort();
		p += len + 1;
	}
	return 0;
}
