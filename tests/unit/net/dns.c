/* Tests of src/net/dns.c: queries and responses as a hostile peer would shape them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <string.h>

#include <cmocka.h>

#include "net/dns.h"

/* A message under construction. */
struct msg {
	uint8_t b[1024];
	size_t n;
};

static void put8(struct msg *m, uint8_t v)
{
	m->b[m->n++] = v;
}

static void put16(struct msg *m, uint16_t v)
{
	put8(m, (uint8_t)(v >> 8));
	put8(m, (uint8_t)v);
}

static void put32(struct msg *m, uint32_t v)
{
	put16(m, (uint16_t)(v >> 16));
	put16(m, (uint16_t)v);
}

static void header(struct msg *m, uint16_t id, uint16_t flags, uint16_t qd, uint16_t an,
		   uint16_t ns, uint16_t ar)
{
	m->n = 0;
	put16(m, id);
	put16(m, flags);
	put16(m, qd);
	put16(m, an);
	put16(m, ns);
	put16(m, ar);
}

/* Appends a name in wire form from "a.b.c". */
static void name(struct msg *m, const char *s)
{
	while (*s) {
		size_t n = strcspn(s, ".");
		put8(m, (uint8_t)n);
		memcpy(m->b + m->n, s, n);
		m->n += n;
		s += n;
		if (*s == '.')
			s++;
	}
	put8(m, 0);
}

static void question(struct msg *m, const char *qname, uint16_t type)
{
	name(m, qname);
	put16(m, type);
	put16(m, DNS_CLASS_IN);
}

static void rr_a(struct msg *m, uint16_t name_ptr, uint32_t ttl, const uint8_t addr[4])
{
	put16(m, (uint16_t)(0xc000 | name_ptr));
	put16(m, DNS_TYPE_A);
	put16(m, DNS_CLASS_IN);
	put32(m, ttl);
	put16(m, 4);
	memcpy(m->b + m->n, addr, 4);
	m->n += 4;
}

static void opt_rr(struct msg *m)
{
	put8(m, 0);
	put16(m, DNS_TYPE_OPT);
	put16(m, 1232);
	put32(m, 0);
	put16(m, 0);
}

static int parse_q(const struct msg *m, struct dns_question *q)
{
	struct dns_header h;
	size_t end = 0;
	return dns_parse_query(m->b, m->n, &h, q, &end);
}

static void test_header_too_short(void **state)
{
	uint8_t b[11] = { 0 };
	struct dns_header h;
	assert_int_equal(dns_parse_header(b, sizeof(b), &h), -EBADMSG);
}

static void test_query_ok(void **state)
{
	struct msg m;
	header(&m, 0x1234, 0x0100, 1, 0, 0, 0);
	question(&m, "WWW.Example.COM", DNS_TYPE_A);
	struct dns_header h;
	struct dns_question q;
	size_t end = 0;
	assert_int_equal(dns_parse_query(m.b, m.n, &h, &q, &end), 0);
	assert_string_equal(q.name, "www.example.com");
	assert_int_equal(q.qtype, DNS_TYPE_A);
	assert_int_equal(h.id, 0x1234);
	assert_true(h.rd);
	assert_int_equal(end, m.n);
}

static void test_query_with_edns(void **state)
{
	struct msg m;
	header(&m, 1, 0x0100, 1, 0, 0, 1);
	question(&m, "example.com", DNS_TYPE_AAAA);
	size_t qend = m.n;
	opt_rr(&m);
	struct dns_header h;
	struct dns_question q;
	size_t end = 0;
	assert_int_equal(dns_parse_query(m.b, m.n, &h, &q, &end), 0);
	assert_int_equal(end, qend);
}

static void test_query_refusals(void **state)
{
	struct msg m;
	struct dns_question q;

	header(&m, 1, 0x8100, 1, 0, 0, 0); /* a response, not a query */
	question(&m, "example.com", DNS_TYPE_A);
	assert_int_equal(parse_q(&m, &q), -EBADMSG);

	header(&m, 1, 0x0900, 1, 0, 0, 0); /* opcode 1 */
	question(&m, "example.com", DNS_TYPE_A);
	assert_int_equal(parse_q(&m, &q), DNS_RCODE_NOTIMP);

	header(&m, 1, 0x0100, 2, 0, 0, 0);
	question(&m, "a.com", DNS_TYPE_A);
	question(&m, "b.com", DNS_TYPE_A);
	assert_int_equal(parse_q(&m, &q), DNS_RCODE_FORMERR);

	header(&m, 1, 0x0100, 0, 0, 0, 0);
	assert_int_equal(parse_q(&m, &q), DNS_RCODE_FORMERR);

	header(&m, 1, 0x0100, 1, 1, 0, 0); /* an answer in a query */
	question(&m, "example.com", DNS_TYPE_A);
	assert_int_equal(parse_q(&m, &q), DNS_RCODE_FORMERR);

	header(&m, 1, 0x0100, 1, 0, 0, 0);
	question(&m, "example.com", DNS_TYPE_A);
	put8(&m, 0); /* trailing byte */
	assert_int_equal(parse_q(&m, &q), DNS_RCODE_FORMERR);

	header(&m, 1, 0x0100, 1, 0, 0, 0);
	name(&m, "version.bind");
	put16(&m, 16);
	put16(&m, 3); /* CHAOS */
	assert_int_equal(parse_q(&m, &q), DNS_RCODE_REFUSED);

	header(&m, 1, 0x0100, 1, 0, 0, 0);
	name(&m, "example.com");
	put16(&m, DNS_TYPE_A); /* class missing */
	assert_int_equal(parse_q(&m, &q), DNS_RCODE_FORMERR);
}

static void test_name_pointer_loops(void **state)
{
	struct msg m;
	struct dns_question q;

	/* A pointer to itself. */
	header(&m, 1, 0x0100, 1, 0, 0, 0);
	put16(&m, 0xc000 | 12);
	put16(&m, DNS_TYPE_A);
	put16(&m, DNS_CLASS_IN);
	assert_int_equal(parse_q(&m, &q), DNS_RCODE_FORMERR);

	/* A label, then a pointer back to that label. */
	header(&m, 1, 0x0100, 1, 0, 0, 0);
	put8(&m, 1);
	put8(&m, 'a');
	put16(&m, 0xc000 | 12);
	put16(&m, DNS_TYPE_A);
	put16(&m, DNS_CLASS_IN);
	assert_int_equal(parse_q(&m, &q), DNS_RCODE_FORMERR);

	/* A pointer forward. */
	header(&m, 1, 0x0100, 1, 0, 0, 0);
	put16(&m, 0xc000 | 20);
	put16(&m, DNS_TYPE_A);
	put16(&m, DNS_CLASS_IN);
	name(&m, "a");
	assert_int_equal(parse_q(&m, &q), DNS_RCODE_FORMERR);

	/* A pointer past the end. */
	header(&m, 1, 0x0100, 1, 0, 0, 0);
	put16(&m, 0xc000 | 0x3fff);
	assert_int_equal(parse_q(&m, &q), DNS_RCODE_FORMERR);

	/* A pointer into the header. */
	header(&m, 1, 0x0100, 1, 0, 0, 0);
	put16(&m, 0xc000 | 1);
	put16(&m, DNS_TYPE_A);
	put16(&m, DNS_CLASS_IN);
	assert_int_equal(parse_q(&m, &q), DNS_RCODE_FORMERR);

	/* Half a pointer. */
	header(&m, 1, 0x0100, 1, 0, 0, 0);
	put8(&m, 0xc0);
	assert_int_equal(parse_q(&m, &q), DNS_RCODE_FORMERR);
}

static void test_name_pointer_chain(void **state)
{
	/* "b" + ptr("a"+ptr(...)) read through two pointers, each going further back. */
	uint8_t b[64];
	size_t n = 0;
	memset(b, 0, sizeof(b));
	n = 12;
	size_t com = n;
	b[n++] = 3;
	memcpy(b + n, "com", 3);
	n += 3;
	b[n++] = 0;
	size_t ex = n;
	b[n++] = 7;
	memcpy(b + n, "example", 7);
	n += 7;
	b[n++] = 0xc0;
	b[n++] = (uint8_t)com;
	size_t www = n;
	b[n++] = 3;
	memcpy(b + n, "www", 3);
	n += 3;
	b[n++] = 0xc0;
	b[n++] = (uint8_t)ex;
	char out[DNS_NAME_MAX + 1];
	size_t off = www;
	assert_int_equal(dns_read_name(b, n, &off, out), 0);
	assert_string_equal(out, "www.example.com");
	assert_int_equal(off, n);
}

static void test_name_limits(void **state)
{
	struct msg m;
	struct dns_question q;

	/* A 64-byte label is an extended label type (0x40): refused. */
	header(&m, 1, 0x0100, 1, 0, 0, 0);
	put8(&m, 64);
	for (int i = 0; i < 64; i++)
		put8(&m, 'a');
	put8(&m, 0);
	put16(&m, DNS_TYPE_A);
	put16(&m, DNS_CLASS_IN);
	assert_int_equal(parse_q(&m, &q), DNS_RCODE_FORMERR);

	/* 4 labels of 63: 255 characters, over the limit of 253. */
	header(&m, 1, 0x0100, 1, 0, 0, 0);
	for (int l = 0; l < 4; l++) {
		put8(&m, 63);
		for (int i = 0; i < 63; i++)
			put8(&m, 'a');
	}
	put8(&m, 0);
	put16(&m, DNS_TYPE_A);
	put16(&m, DNS_CLASS_IN);
	assert_int_equal(parse_q(&m, &q), DNS_RCODE_FORMERR);

	/* 3 labels of 63 and one of 61: 253 characters, the most there may be. */
	header(&m, 1, 0x0100, 1, 0, 0, 0);
	for (int l = 0; l < 4; l++) {
		int len = l == 3 ? 61 : 63;
		put8(&m, (uint8_t)len);
		for (int i = 0; i < len; i++)
			put8(&m, 'a');
	}
	put8(&m, 0);
	put16(&m, DNS_TYPE_A);
	put16(&m, DNS_CLASS_IN);
	assert_int_equal(parse_q(&m, &q), 0);
	assert_int_equal(strlen(q.name), 253);

	/* A dot or a NUL inside a label. */
	header(&m, 1, 0x0100, 1, 0, 0, 0);
	put8(&m, 3);
	put8(&m, 'a');
	put8(&m, '.');
	put8(&m, 'b');
	put8(&m, 0);
	put16(&m, DNS_TYPE_A);
	put16(&m, DNS_CLASS_IN);
	assert_int_equal(parse_q(&m, &q), DNS_RCODE_FORMERR);
	m.b[14] = '\0';
	assert_int_equal(parse_q(&m, &q), DNS_RCODE_FORMERR);

	/* A label running past the end. */
	header(&m, 1, 0x0100, 1, 0, 0, 0);
	put8(&m, 10);
	put8(&m, 'a');
	assert_int_equal(parse_q(&m, &q), DNS_RCODE_FORMERR);
}

/* A response to "example.com A" with a CNAME and two A records, names compressed. */
static void response(struct msg *m, uint16_t id)
{
	static const uint8_t a1[4] = { 198, 51, 100, 10 }, a2[4] = { 198, 51, 100, 11 };
	header(m, id, 0x8180, 1, 3, 0, 0);
	question(m, "example.com", DNS_TYPE_A);
	/* example.com CNAME www.example.com */
	put16(m, 0xc000 | 12);
	put16(m, DNS_TYPE_CNAME);
	put16(m, DNS_CLASS_IN);
	put32(m, 300);
	put16(m, 6);
	size_t target = m->n;
	put8(m, 3);
	put8(m, 'w');
	put8(m, 'w');
	put8(m, 'w');
	put16(m, 0xc000 | 12);
	rr_a(m, (uint16_t)target, 120, a1);
	rr_a(m, (uint16_t)target, 0x80000001u, a2);
}

static void test_response_ok(void **state)
{
	struct msg m;
	response(&m, 0xbeef);
	struct dns_question q = { .name = "example.com",
				  .qtype = DNS_TYPE_A,
				  .qclass = DNS_CLASS_IN };
	struct dns_header h;
	struct dns_addr addrs[4];
	size_t n = 0;
	assert_int_equal(dns_parse_response(m.b, m.n, 0xbeef, &q, &h, addrs, 4, &n), 0);
	assert_int_equal(n, 2);
	assert_int_equal(addrs[0].type, DNS_TYPE_A);
	assert_int_equal(addrs[0].ttl, 120);
	assert_memory_equal(addrs[0].addr, ((uint8_t[]){ 198, 51, 100, 10 }), 4);
	/* A TTL with the top bit set counts as zero. */
	assert_int_equal(addrs[1].ttl, 0);

	/* Only `max` are stored, all are counted. */
	assert_int_equal(dns_parse_response(m.b, m.n, 0xbeef, &q, &h, addrs, 1, &n), 0);
	assert_int_equal(n, 2);
}

/* An address of a name that is neither asked nor reached by a CNAME of it is not the asked
 * name's: an upstream (or a spoofer) slipping one into an answer opens nothing with it. */
static void test_response_other_names_left_out(void **state)
{
	struct msg m;
	static const uint8_t mine[4] = { 198, 51, 100, 20 }, other[4] = { 203, 0, 113, 9 };
	header(&m, 9, 0x8180, 1, 2, 0, 0);
	question(&m, "asked.example", DNS_TYPE_A);
	/* other.example A 203.0.113.9, then asked.example A 198.51.100.20 */
	name(&m, "other.example");
	put16(&m, DNS_TYPE_A);
	put16(&m, DNS_CLASS_IN);
	put32(&m, 60);
	put16(&m, 4);
	memcpy(m.b + m.n, other, 4);
	m.n += 4;
	rr_a(&m, 12, 60, mine);
	struct dns_question q = { .name = "asked.example",
				  .qtype = DNS_TYPE_A,
				  .qclass = DNS_CLASS_IN };
	struct dns_header h;
	struct dns_addr addrs[4];
	size_t n = 0;
	assert_int_equal(dns_parse_response(m.b, m.n, 9, &q, &h, addrs, 4, &n), 0);
	assert_int_equal(n, 1);
	assert_memory_equal(addrs[0].addr, mine, 4);
}

static void test_response_mismatch(void **state)
{
	struct msg m;
	response(&m, 7);
	struct dns_question q = { .name = "example.com",
				  .qtype = DNS_TYPE_A,
				  .qclass = DNS_CLASS_IN };
	struct dns_header h;
	struct dns_addr addrs[4];
	size_t n;
	assert_int_equal(dns_parse_response(m.b, m.n, 8, &q, &h, addrs, 4, &n), -EBADMSG);
	struct dns_question other = q;
	strcpy(other.name, "example.org");
	assert_int_equal(dns_parse_response(m.b, m.n, 7, &other, &h, addrs, 4, &n), -EBADMSG);
	other = q;
	other.qtype = DNS_TYPE_AAAA;
	assert_int_equal(dns_parse_response(m.b, m.n, 7, &other, &h, addrs, 4, &n), -EBADMSG);
	/* Every truncation of a valid response is refused, none read past the end. */
	for (size_t len = 0; len < m.n; len++)
		assert_int_equal(dns_parse_response(m.b, len, 7, &q, &h, addrs, 4, &n), -EBADMSG);
	/* A query is not a response. */
	m.b[2] &= 0x7f;
	assert_int_equal(dns_parse_response(m.b, m.n, 7, &q, &h, addrs, 4, &n), -EBADMSG);
}

static void test_response_bad_rdata(void **state)
{
	struct msg m;
	header(&m, 3, 0x8180, 1, 1, 0, 0);
	question(&m, "example.com", DNS_TYPE_A);
	put16(&m, 0xc000 | 12);
	put16(&m, DNS_TYPE_A);
	put16(&m, DNS_CLASS_IN);
	put32(&m, 60);
	put16(&m, 5); /* an A record of five bytes */
	for (int i = 0; i < 5; i++)
		put8(&m, 1);
	struct dns_question q = { .name = "example.com",
				  .qtype = DNS_TYPE_A,
				  .qclass = DNS_CLASS_IN };
	struct dns_header h;
	struct dns_addr addrs[4];
	size_t n;
	assert_int_equal(dns_parse_response(m.b, m.n, 3, &q, &h, addrs, 4, &n), -EBADMSG);

	/* rdlength past the end. */
	header(&m, 3, 0x8180, 1, 1, 0, 0);
	question(&m, "example.com", DNS_TYPE_A);
	put16(&m, 0xc000 | 12);
	put16(&m, DNS_TYPE_A);
	put16(&m, DNS_CLASS_IN);
	put32(&m, 60);
	put16(&m, 400);
	put32(&m, 0);
	assert_int_equal(dns_parse_response(m.b, m.n, 3, &q, &h, addrs, 4, &n), -EBADMSG);

	/* More records announced than present. */
	response(&m, 3);
	m.b[7] = 9;
	assert_int_equal(dns_parse_response(m.b, m.n, 3, &q, &h, addrs, 4, &n), -EBADMSG);
}

static void test_build_error(void **state)
{
	struct msg m;
	header(&m, 0xabcd, 0x0110, 1, 0, 0, 1); /* RD and CD */
	question(&m, "denied.example", DNS_TYPE_A);
	size_t qend = m.n;
	opt_rr(&m);
	uint8_t out[512];
	int n = dns_build_error(m.b, m.n, qend, DNS_RCODE_NXDOMAIN, out, sizeof(out));
	assert_int_equal(n, (int)qend);
	struct dns_header h;
	assert_int_equal(dns_parse_header(out, (size_t)n, &h), 0);
	assert_int_equal(h.id, 0xabcd);
	assert_true(h.qr);
	assert_true(h.rd);
	assert_true(h.ra);
	assert_false(h.aa);
	assert_int_equal(h.rcode, DNS_RCODE_NXDOMAIN);
	assert_int_equal(h.qdcount, 1);
	assert_int_equal(h.ancount + h.nscount + h.arcount, 0);
	assert_true(out[3] & 0x10); /* CD kept */
	/* It answers the question it repeats. */
	struct dns_question q = { .name = "denied.example",
				  .qtype = DNS_TYPE_A,
				  .qclass = DNS_CLASS_IN };
	struct dns_addr a[1];
	size_t na;
	assert_int_equal(dns_parse_response(out, (size_t)n, 0xabcd, &q, &h, a, 1, &na), 0);

	/* Without a readable question: the header alone. */
	n = dns_build_error(m.b, m.n, 0, DNS_RCODE_FORMERR, out, sizeof(out));
	assert_int_equal(n, DNS_HEADER_LEN);
	assert_int_equal(out[5], 0);
	assert_int_equal(dns_build_error(m.b, m.n, qend, 1, out, 4), -ENOBUFS);
}

static void test_name_valid(void **state)
{
	assert_true(dns_name_valid("example.com"));
	assert_true(dns_name_valid("_srv._tcp.example.com"));
	assert_true(dns_name_valid("a-b.c0"));
	assert_false(dns_name_valid(""));
	assert_false(dns_name_valid("a..b"));
	assert_false(dns_name_valid(".a"));
	assert_false(dns_name_valid("a."));
	assert_false(dns_name_valid("a b"));
	assert_false(dns_name_valid("*.a"));
	char longlabel[80];
	memset(longlabel, 'a', 64);
	longlabel[64] = '\0';
	assert_false(dns_name_valid(longlabel));
}

static void test_name_match(void **state)
{
	assert_true(dns_name_match("example.com", "example.com"));
	assert_true(dns_name_match("example.com", "EXAMPLE.com."));
	assert_false(dns_name_match("example.com", "www.example.com"));
	assert_true(dns_name_match("*.example.com", "www.example.com"));
	assert_true(dns_name_match("*.example.com", "a.b.example.com"));
	assert_false(dns_name_match("*.example.com", "example.com"));
	assert_false(dns_name_match("*.example.com", "badexample.com"));
	assert_false(dns_name_match("*.example.com", ".example.com"));
	assert_true(dns_name_match("*.npmjs.org.", "registry.npmjs.org"));
	assert_false(dns_name_match("", ""));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_too_short),
		cmocka_unit_test(test_query_ok),
		cmocka_unit_test(test_query_with_edns),
		cmocka_unit_test(test_query_refusals),
		cmocka_unit_test(test_name_pointer_loops),
		cmocka_unit_test(test_name_pointer_chain),
		cmocka_unit_test(test_name_limits),
		cmocka_unit_test(test_response_ok),
		cmocka_unit_test(test_response_other_names_left_out),
		cmocka_unit_test(test_response_mismatch),
		cmocka_unit_test(test_response_bad_rdata),
		cmocka_unit_test(test_build_error),
		cmocka_unit_test(test_name_valid),
		cmocka_unit_test(test_name_match),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
