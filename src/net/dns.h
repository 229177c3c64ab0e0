/* dns: a strict parser and a few builders for DNS messages (RFC 1035), for the resolver that
 * sandboxd runs inside every sandbox's network namespace.
 *
 * Everything here is pure (no I/O, no allocation) and bounded: a message is at most
 * DNS_MSG_MAX bytes, a name at most DNS_NAME_MAX characters, and compression pointers must
 * point strictly backwards (and past the header), so a name is read in a bounded number of
 * steps and a pointer loop is impossible. Every function treats its input as hostile; those that
 * fail return a negative errno (-EBADMSG for a malformed message) and set nothing. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DNS_MSG_MAX        65535 /* largest message (TCP length prefix) */
#define DNS_HEADER_LEN     12
#define DNS_NAME_MAX       253 /* presentation form without the final dot */
#define DNS_LABEL_MAX      63

#define DNS_TYPE_A         1
#define DNS_TYPE_CNAME     5
#define DNS_TYPE_AAAA      28
#define DNS_TYPE_OPT       41
#define DNS_CLASS_IN       1

#define DNS_RCODE_NOERROR  0
#define DNS_RCODE_FORMERR  1
#define DNS_RCODE_SERVFAIL 2
#define DNS_RCODE_NXDOMAIN 3
#define DNS_RCODE_NOTIMP   4
#define DNS_RCODE_REFUSED  5

#define DNS_OPCODE_QUERY   0

struct dns_header {
	uint16_t id;
	bool qr, aa, tc, rd, ra;
	uint8_t opcode;
	uint8_t rcode;
	uint16_t qdcount, ancount, nscount, arcount;
};

struct dns_question {
	char name[DNS_NAME_MAX + 1]; /* lower case, no final dot; "" for the root */
	uint16_t qtype;
	uint16_t qclass;
};

/* An address record of an answer section. */
struct dns_addr {
	uint16_t type; /* DNS_TYPE_A or DNS_TYPE_AAAA */
	uint32_t ttl;
	uint8_t addr[16]; /* 4 bytes used for A */
};

/* Decodes the fixed header. */
int dns_parse_header(const uint8_t *msg, size_t len, struct dns_header *ret);

/* Reads the name at *off (following compression pointers) into out (lower case, dot
 * separated, without the final dot) and advances *off past the name as stored at that place.
 * Labels may hold any byte except '.' and NUL, which are refused (they would make the
 * presentation form ambiguous). */
int dns_read_name(const uint8_t *msg, size_t len, size_t *off, char out[DNS_NAME_MAX + 1]);

/* Parses a query from a client: QR clear, exactly one question, no answer or authority
 * records. *ret_end (optional) is the offset just after the question. Returns 0, -EBADMSG
 * when the message cannot be answered at all (too short for a header: drop it), or a
 * positive DNS rcode that the reply should carry (FORMERR, NOTIMP, REFUSED); h is filled in
 * whenever the header could be read. */
int dns_parse_query(const uint8_t *msg, size_t len, struct dns_header *h, struct dns_question *q,
		    size_t *ret_end);

/* CNAMEs followed from the asked name, at most. */
#define DNS_CHAIN_MAX 8

/* Parses a response and checks that it answers `q` with `id`. Up to `max` address records of
 * the answer section go to addrs (others are counted in *ret_n but not stored): those of the
 * asked name, and of the names its CNAMEs lead to (at most DNS_CHAIN_MAX in all, in answer
 * order); an address of any other name in the answer is not the asked name's and is left
 * out. Returns 0, or -EBADMSG when it is malformed or does not answer the question (then it
 * must be ignored). */
int dns_parse_response(const uint8_t *msg, size_t len, uint16_t id, const struct dns_question *q,
		       struct dns_header *h, struct dns_addr *addrs, size_t max, size_t *ret_n);

/* Writes into out a reply to `query` (which dns_parse_query accepted up to `qend`, or 0 when
 * the question could not be read) carrying rcode and no records. Returns the length, or
 * -ENOBUFS when out is too small. */
int dns_build_error(const uint8_t *query, size_t qlen, size_t qend, uint8_t rcode, uint8_t *out,
		    size_t outlen);

/* Writes the 16-bit message id at the start of msg (len >= 2). */
void dns_set_id(uint8_t *msg, uint16_t id);

/* Whether a name is one a sandbox may ask about: letters, digits, '-' and '_' in each label. */
bool dns_name_valid(const char *name);

/* Whether `name` matches `pattern`: "example.com" matches exactly that name, "*.example.com"
 * any name below it (not example.com itself). Both are compared without case; a final dot on
 * either is ignored. */
bool dns_name_match(const char *pattern, const char *name);
