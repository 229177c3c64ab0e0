#include "net/dns.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* Fixed part of a resource record after its name: type, class, ttl, rdlength. */
#define RR_FIXED_LEN 10

static uint16_t get16(const uint8_t *p)
{
	return (uint16_t)(p[0] << 8 | p[1]);
}

static uint32_t get32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)(v >> 8);
	p[1] = (uint8_t)v;
}

static char lower(char c)
{
	return c >= 'A' && c <= 'Z' ? (char)(c - 'A' + 'a') : c;
}

int dns_parse_header(const uint8_t *msg, size_t len, struct dns_header *ret)
{
	if (len < DNS_HEADER_LEN)
		return -EBADMSG;
	struct dns_header h = {
		.id = get16(msg),
		.qr = msg[2] & 0x80,
		.opcode = (msg[2] >> 3) & 0x0f,
		.aa = msg[2] & 0x04,
		.tc = msg[2] & 0x02,
		.rd = msg[2] & 0x01,
		.ra = msg[3] & 0x80,
		.rcode = msg[3] & 0x0f,
		.qdcount = get16(msg + 4),
		.ancount = get16(msg + 6),
		.nscount = get16(msg + 8),
		.arcount = get16(msg + 10),
	};
	*ret = h;
	return 0;
}

int dns_read_name(const uint8_t *msg, size_t len, size_t *off, char out[DNS_NAME_MAX + 1])
{
	size_t pos = *off;
	/* Where the run of labels being read began: a pointer must lead strictly before it, so
	 * every jump goes further back and a loop cannot exist. */
	size_t seg_start = pos;
	size_t after = 0; /* offset after the name in place, once a pointer was followed */
	size_t n = 0;

	for (;;) {
		if (pos >= len)
			return -EBADMSG;
		uint8_t c = msg[pos];
		if (c == 0) {
			pos++;
			break;
		}
		if ((c & 0xc0) == 0xc0) {
			if (pos + 1 >= len)
				return -EBADMSG;
			size_t target = (size_t)(c & 0x3f) << 8 | msg[pos + 1];
			/* Nothing in the header is a name; a pointer there would also make a
			 * name change when a reply rewrites the header. */
			if (target >= seg_start || target < DNS_HEADER_LEN)
				return -EBADMSG;
			if (!after)
				after = pos + 2;
			seg_start = pos = target;
			continue;
		}
		if (c & 0xc0) /* 0x40 and 0x80: obsolete extended label types */
			return -EBADMSG;
		if (pos + 1 + c > len)
			return -EBADMSG;
		if (n + (n ? 1 : 0) + c > DNS_NAME_MAX)
			return -EBADMSG;
		if (n)
			out[n++] = '.';
		for (size_t i = 0; i < c; i++) {
			char ch = (char)msg[pos + 1 + i];
			if (ch == '.' || ch == '\0')
				return -EBADMSG;
			out[n++] = lower(ch);
		}
		pos += 1 + (size_t)c;
	}
	out[n] = '\0';
	*off = after ? after : pos;
	return 0;
}

/* Steps over one resource record at *off, checking that it lies within the message. On
 * success the record's type, class, ttl and rdata offset/length are returned. */
static int skip_rr(const uint8_t *msg, size_t len, size_t *off, uint16_t *type, uint16_t *cls,
		   uint32_t *ttl, size_t *rdoff, uint16_t *rdlen)
{
	char name[DNS_NAME_MAX + 1];
	size_t pos = *off;
	if (dns_read_name(msg, len, &pos, name) < 0)
		return -EBADMSG;
	if (len - pos < RR_FIXED_LEN)
		return -EBADMSG;
	*type = get16(msg + pos);
	*cls = get16(msg + pos + 2);
	*ttl = get32(msg + pos + 4);
	*rdlen = get16(msg + pos + 8);
	pos += RR_FIXED_LEN;
	if (len - pos < *rdlen)
		return -EBADMSG;
	*rdoff = pos;
	*off = pos + *rdlen;
	return 0;
}

static int skip_rrs(const uint8_t *msg, size_t len, size_t *off, unsigned count)
{
	for (unsigned i = 0; i < count; i++) {
		uint16_t type, cls, rdlen;
		uint32_t ttl;
		size_t rdoff;
		if (skip_rr(msg, len, off, &type, &cls, &ttl, &rdoff, &rdlen) < 0)
			return -EBADMSG;
	}
	return 0;
}

static int read_question(const uint8_t *msg, size_t len, size_t *off, struct dns_question *q)
{
	size_t pos = *off;
	if (dns_read_name(msg, len, &pos, q->name) < 0)
		return -EBADMSG;
	if (len - pos < 4)
		return -EBADMSG;
	q->qtype = get16(msg + pos);
	q->qclass = get16(msg + pos + 2);
	*off = pos + 4;
	return 0;
}

int dns_parse_query(const uint8_t *msg, size_t len, struct dns_header *h, struct dns_question *q,
		    size_t *ret_end)
{
	if (dns_parse_header(msg, len, h) < 0 || h->qr)
		return -EBADMSG;
	if (h->opcode != DNS_OPCODE_QUERY)
		return DNS_RCODE_NOTIMP;
	if (h->qdcount != 1 || h->ancount || h->nscount)
		return DNS_RCODE_FORMERR;
	size_t off = DNS_HEADER_LEN;
	struct dns_question tmp;
	if (read_question(msg, len, &off, &tmp) < 0)
		return DNS_RCODE_FORMERR;
	size_t qend = off;
	/* The additional section (EDNS) is forwarded as it is, so it must at least be well
	 * formed, and nothing may follow it. */
	if (skip_rrs(msg, len, &off, h->arcount) < 0 || off != len)
		return DNS_RCODE_FORMERR;
	*q = tmp;
	if (ret_end)
		*ret_end = qend;
	if (q->qclass != DNS_CLASS_IN)
		return DNS_RCODE_REFUSED;
	return 0;
}

int dns_parse_response(const uint8_t *msg, size_t len, uint16_t id, const struct dns_question *q,
		       struct dns_header *h, struct dns_addr *addrs, size_t max, size_t *ret_n)
{
	struct dns_header hd;
	if (dns_parse_header(msg, len, &hd) < 0 || !hd.qr || hd.id != id ||
	    hd.opcode != DNS_OPCODE_QUERY || hd.qdcount != 1)
		return -EBADMSG;
	size_t off = DNS_HEADER_LEN;
	struct dns_question got;
	if (read_question(msg, len, &off, &got) < 0)
		return -EBADMSG;
	if (strcmp(got.name, q->name) != 0 || got.qtype != q->qtype || got.qclass != q->qclass)
		return -EBADMSG;

	/* The names whose addresses answer the question: the asked one, and those a CNAME of
	 * one of them leads to (answers list the chain first). An address record of any other
	 * name is carried to the client but is not the asked name's: it is not reported. */
	char names[DNS_CHAIN_MAX][DNS_NAME_MAX + 1];
	size_t nnames = 1;
	snprintf(names[0], sizeof(names[0]), "%s", q->name);
	size_t n = 0;
	for (unsigned i = 0; i < hd.ancount; i++) {
		uint16_t type, cls, rdlen;
		uint32_t ttl;
		size_t rdoff;
		char owner[DNS_NAME_MAX + 1];
		size_t at = off;
		if (dns_read_name(msg, len, &at, owner) < 0)
			return -EBADMSG;
		if (skip_rr(msg, len, &off, &type, &cls, &ttl, &rdoff, &rdlen) < 0)
			return -EBADMSG;
		bool ours = false;
		for (size_t k = 0; k < nnames && !ours; k++)
			ours = strcasecmp(owner, names[k]) == 0;
		if (cls == DNS_CLASS_IN && type == DNS_TYPE_CNAME && ours &&
		    nnames < DNS_CHAIN_MAX) {
			size_t t = rdoff;
			if (dns_read_name(msg, len, &t, names[nnames]) < 0 || t != rdoff + rdlen)
				return -EBADMSG;
			nnames++;
			continue;
		}
		if (cls != DNS_CLASS_IN || (type != DNS_TYPE_A && type != DNS_TYPE_AAAA) || !ours)
			continue;
		size_t want = type == DNS_TYPE_A ? 4 : 16;
		if (rdlen != want)
			return -EBADMSG;
		if (n < max) {
			struct dns_addr *a = &addrs[n];
			memset(a, 0, sizeof(*a));
			a->type = type;
			/* RFC 2181: a TTL with the top bit set is read as zero. */
			a->ttl = ttl & 0x80000000u ? 0 : ttl;
			memcpy(a->addr, msg + rdoff, want);
		}
		n++;
	}
	if (skip_rrs(msg, len, &off, hd.nscount) < 0 || skip_rrs(msg, len, &off, hd.arcount) < 0)
		return -EBADMSG;
	if (off != len)
		return -EBADMSG;
	*h = hd;
	if (ret_n)
		*ret_n = n;
	return 0;
}

int dns_build_error(const uint8_t *query, size_t qlen, size_t qend, uint8_t rcode, uint8_t *out,
		    size_t outlen)
{
	if (qlen < DNS_HEADER_LEN || qend > qlen)
		return -EINVAL;
	size_t n = qend >= DNS_HEADER_LEN ? qend : DNS_HEADER_LEN;
	if (outlen < n)
		return -ENOBUFS;
	memcpy(out, query, n);
	/* QR, the query's opcode and RD; AA and TC clear. RA set, Z/AD clear, CD kept. */
	out[2] = (uint8_t)(0x80 | (query[2] & 0x78) | (query[2] & 0x01));
	out[3] = (uint8_t)(0x80 | (query[3] & 0x10) | (rcode & 0x0f));
	put16(out + 4, n > DNS_HEADER_LEN ? 1 : 0);
	put16(out + 6, 0);
	put16(out + 8, 0);
	put16(out + 10, 0);
	return (int)n;
}

void dns_set_id(uint8_t *msg, uint16_t id)
{
	put16(msg, id);
}

bool dns_name_valid(const char *name)
{
	size_t label = 0;
	if (!*name)
		return false;
	for (const char *p = name; *p; p++) {
		char c = *p;
		if (c == '.') {
			if (label == 0)
				return false;
			label = 0;
			continue;
		}
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '-' || c == '_'))
			return false;
		if (++label > DNS_LABEL_MAX)
			return false;
	}
	return label > 0;
}

/* Length of s without one final dot. */
static size_t trimmed_len(const char *s)
{
	size_t n = strlen(s);
	return n && s[n - 1] == '.' ? n - 1 : n;
}

static bool equal_nocase(const char *a, const char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (lower(a[i]) != lower(b[i]))
			return false;
	return true;
}

bool dns_name_match(const char *pattern, const char *name)
{
	size_t pn = trimmed_len(pattern), nn = trimmed_len(name);
	if (pn >= 2 && pattern[0] == '*' && pattern[1] == '.') {
		const char *suffix = pattern + 1; /* ".example.com" */
		size_t sn = pn - 1;
		/* At least one label before the suffix. */
		return nn > sn && equal_nocase(name + nn - sn, suffix, sn);
	}
	return pn == nn && pn > 0 && equal_nocase(pattern, name, pn);
}
