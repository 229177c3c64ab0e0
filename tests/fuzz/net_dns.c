/* libFuzzer target: the DNS parser of sandboxd's resolver (src/net/dns.c), fed what a hostile
 * sandbox (queries) or upstream server (responses) could send. Besides memory safety it checks
 * the parser's promises: names stay within their bounds, and the error reply built for an
 * accepted query is itself a well-formed answer to that query. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "net/dns.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dns_header h;
	struct dns_question q;
	size_t qend = 0;
	int r = dns_parse_query(data, size, &h, &q, &qend);
	if (r >= 0) {
		if (strlen(q.name) > DNS_NAME_MAX || qend > size)
			abort();
		uint8_t out[DNS_HEADER_LEN + DNS_NAME_MAX + 2 + 4 + 8];
		int n = dns_build_error(data, size, r == DNS_RCODE_FORMERR ? 0 : qend,
					DNS_RCODE_NXDOMAIN, out, sizeof(out));
		if (n < DNS_HEADER_LEN)
			abort();
		if (r == 0) {
			struct dns_header rh;
			struct dns_addr a[1];
			size_t na;
			if (dns_parse_response(out, (size_t)n, h.id, &q, &rh, a, 1, &na) != 0 ||
			    rh.rcode != DNS_RCODE_NXDOMAIN || na != 0)
				abort();
		}
		(void)dns_name_valid(q.name);
		(void)dns_name_match("*.example.com", q.name);
	}

	/* As a response to whatever question it carries. */
	if (size >= DNS_HEADER_LEN) {
		size_t off = DNS_HEADER_LEN;
		struct dns_question rq = { .qtype = 1, .qclass = 1 };
		if (dns_read_name(data, size, &off, rq.name) == 0 && off <= size) {
			struct dns_header rh;
			struct dns_addr addrs[8];
			size_t na = 0;
			if (off + 4 <= size) {
				rq.qtype = (uint16_t)(data[off] << 8 | data[off + 1]);
				rq.qclass = (uint16_t)(data[off + 2] << 8 | data[off + 3]);
			}
			uint16_t id = (uint16_t)(data[0] << 8 | data[1]);
			if (dns_parse_response(data, size, id, &rq, &rh, addrs, 8, &na) == 0) {
				for (size_t i = 0; i < na && i < 8; i++)
					if (addrs[i].type != DNS_TYPE_A &&
					    addrs[i].type != DNS_TYPE_AAAA)
						abort();
			}
		}
	}

	/* A name at every offset: bounded, never past the end. */
	for (size_t off0 = 0; off0 < size && off0 < 64; off0++) {
		char name[DNS_NAME_MAX + 1];
		size_t off = off0;
		if (dns_read_name(data, size, &off, name) == 0 &&
		    (off > size || off <= off0 || strlen(name) > DNS_NAME_MAX))
			abort();
	}
	return 0;
}
