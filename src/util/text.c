#include "util/text.h"

#include <string.h>
#include <strings.h>

#include "util/cleanup.h"

/* Length of the valid UTF-8 sequence starting at p (1-4), 0 if invalid, or -1 if the
 * sequence is valid so far but cut by the end of the buffer. */
static int utf8_seq(const uint8_t *p, size_t avail)
{
	uint8_t c = p[0];
	int n;
	uint32_t min;
	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf)
		n = 2, min = 0x80;
	else if (c >= 0xe0 && c <= 0xef)
		n = 3, min = 0x800;
	else if (c >= 0xf0 && c <= 0xf4)
		n = 4, min = 0x10000;
	else
		return 0;
	uint32_t cp = c & (0x3f >> (n - 1));
	for (int i = 1; i < n; i++) {
		if ((size_t)i >= avail)
			return -1;
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		cp = (cp << 6) | (p[i] & 0x3f);
		/* Reject overlongs and surrogates as early as the second byte allows. */
		if (i == 1 && n == 3 && c == 0xe0 && p[1] < 0xa0)
			return 0;
		if (i == 1 && n == 3 && c == 0xed && p[1] > 0x9f)
			return 0;
		if (i == 1 && n == 4 && c == 0xf0 && p[1] < 0x90)
			return 0;
		if (i == 1 && n == 4 && c == 0xf4 && p[1] > 0x8f)
			return 0;
	}
	if (cp < min || cp > 0x10ffff)
		return 0;
	return n;
}

size_t utf8_incomplete_tail(const uint8_t *buf, size_t len)
{
	size_t start = len > 3 ? len - 3 : 0;
	for (size_t i = start; i < len; i++) {
		if ((buf[i] & 0xc0) == 0x80)
			continue;
		if (utf8_seq(buf + i, len - i) == -1)
			return len - i;
	}
	return 0;
}

bool utf8_valid(const uint8_t *buf, size_t len)
{
	for (size_t i = 0; i < len;) {
		int n = utf8_seq(buf + i, len - i);
		if (n <= 0)
			return false;
		i += (size_t)n;
	}
	return true;
}

bool utf8_stream_feed(struct utf8_stream *s, const uint8_t *buf, size_t len)
{
	size_t i = 0;
	/* Finish the character the last piece cut, a byte at a time (at most 3). */
	while (s->ntail && i < len && !s->bad) {
		s->tail[s->ntail++] = buf[i++];
		int n = utf8_seq(s->tail, s->ntail);
		if (n > 0)
			s->ntail = 0;
		else if (n == 0)
			s->bad = true;
	}
	while (i < len && !s->bad) {
		if (buf[i] == 0) {
			s->bad = true;
			break;
		}
		int n = utf8_seq(buf + i, len - i);
		if (n > 0) {
			i += (size_t)n;
		} else if (n == 0) {
			s->bad = true;
		} else {
			memcpy(s->tail, buf + i, len - i);
			s->ntail = len - i;
			break;
		}
	}
	return !s->bad;
}

bool utf8_stream_end(const struct utf8_stream *s)
{
	return !s->bad && s->ntail == 0;
}

char *utf8_sanitize(const uint8_t *buf, size_t len, size_t *outlen)
{
	char *out = xmalloc(len * 3 + 1);
	size_t o = 0;
	for (size_t i = 0; i < len;) {
		int n = utf8_seq(buf + i, len - i);
		if (n <= 0) {
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
			continue;
		}
		memcpy(out + o, buf + i, (size_t)n);
		o += (size_t)n;
		i += (size_t)n;
	}
	out[o] = '\0';
	if (outlen)
		*outlen = o;
	return out;
}

static const char b64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

char *base64_encode(const uint8_t *buf, size_t len, size_t *outlen)
{
	char *out = xmalloc(BASE64_LEN(len) + 1);
	size_t o = base64_encode_into(out, buf, len);
	out[o] = '\0';
	if (outlen)
		*outlen = o;
	return out;
}

size_t base64_encode_into(char *out, const uint8_t *buf, size_t len)
{
	size_t o = 0, i = 0;
	for (; i + 2 < len; i += 3) {
		uint32_t v = (uint32_t)buf[i] << 16 | (uint32_t)buf[i + 1] << 8 | buf[i + 2];
		out[o++] = b64[v >> 18];
		out[o++] = b64[(v >> 12) & 63];
		out[o++] = b64[(v >> 6) & 63];
		out[o++] = b64[v & 63];
	}
	if (i < len) {
		uint32_t v = (uint32_t)buf[i] << 16 | (i + 1 < len ? (uint32_t)buf[i + 1] << 8 : 0);
		out[o++] = b64[v >> 18];
		out[o++] = b64[(v >> 12) & 63];
		out[o++] = i + 1 < len ? b64[(v >> 6) & 63] : '=';
		out[o++] = '=';
	}
	return o;
}

/* Decoding table: 0-63 for the alphabet (standard and URL-safe), 64 for padding and
 * whitespace handled by the caller, 255 for anything else. */
static const uint8_t b64_table[256] = {
	['A'] = 0,  ['B'] = 1,  ['C'] = 2,  ['D'] = 3,  ['E'] = 4,  ['F'] = 5,  ['G'] = 6,
	['H'] = 7,  ['I'] = 8,  ['J'] = 9,  ['K'] = 10, ['L'] = 11, ['M'] = 12, ['N'] = 13,
	['O'] = 14, ['P'] = 15, ['Q'] = 16, ['R'] = 17, ['S'] = 18, ['T'] = 19, ['U'] = 20,
	['V'] = 21, ['W'] = 22, ['X'] = 23, ['Y'] = 24, ['Z'] = 25, ['a'] = 26, ['b'] = 27,
	['c'] = 28, ['d'] = 29, ['e'] = 30, ['f'] = 31, ['g'] = 32, ['h'] = 33, ['i'] = 34,
	['j'] = 35, ['k'] = 36, ['l'] = 37, ['m'] = 38, ['n'] = 39, ['o'] = 40, ['p'] = 41,
	['q'] = 42, ['r'] = 43, ['s'] = 44, ['t'] = 45, ['u'] = 46, ['v'] = 47, ['w'] = 48,
	['x'] = 49, ['y'] = 50, ['z'] = 51, ['0'] = 52, ['1'] = 53, ['2'] = 54, ['3'] = 55,
	['4'] = 56, ['5'] = 57, ['6'] = 58, ['7'] = 59, ['8'] = 60, ['9'] = 61, ['+'] = 62,
	['-'] = 62, ['/'] = 63, ['_'] = 63,
};

/* Values in b64_table are 0 both for 'A' and for characters it does not list: this tells
 * them apart. */
static int b64_val(char c)
{
	uint8_t v = b64_table[(uint8_t)c];
	return v || c == 'A' ? v : -1;
}

int base64_decode(const char *in, size_t inlen, uint8_t **ret, size_t *retlen)
{
	_cleanup_free_ uint8_t *out = xmalloc(inlen / 4 * 3 + 3);
	size_t o = 0;
	uint32_t acc = 0;
	int nacc = 0, pad = 0;
	size_t i = 0;
	/* Whole groups of four alphabet characters, the common case, without the checks below. */
	while (nacc == 0 && !pad && i + 4 <= inlen) {
		int a = b64_val(in[i]), b = b64_val(in[i + 1]), c = b64_val(in[i + 2]),
		    d = b64_val(in[i + 3]);
		if ((a | b | c | d) < 0)
			break;
		uint32_t v = (uint32_t)a << 18 | (uint32_t)b << 12 | (uint32_t)c << 6 | (uint32_t)d;
		out[o++] = (uint8_t)(v >> 16);
		out[o++] = (uint8_t)(v >> 8);
		out[o++] = (uint8_t)v;
		i += 4;
	}
	for (; i < inlen; i++) {
		char c = in[i];
		if (c == ' ' || c == '\n' || c == '\r' || c == '\t')
			continue;
		if (c == '=') {
			pad++;
			continue;
		}
		int v = b64_val(c);
		if (v < 0 || pad)
			return -1;
		acc = acc << 6 | (uint32_t)v;
		if (++nacc == 4) {
			out[o++] = (uint8_t)(acc >> 16);
			out[o++] = (uint8_t)(acc >> 8);
			out[o++] = (uint8_t)acc;
			acc = 0;
			nacc = 0;
		}
	}
	if (nacc == 1 || pad > 2 || (pad && nacc + pad != 4))
		return -1;
	if (nacc == 2) {
		out[o++] = (uint8_t)(acc >> 4);
	} else if (nacc == 3) {
		out[o++] = (uint8_t)(acc >> 10);
		out[o++] = (uint8_t)(acc >> 2);
	}
	*ret = TAKE_PTR(out);
	*retlen = o;
	return 0;
}

bool token_listed(const char *list, const char *name)
{
	size_t n = strlen(name);
	for (const char *s = list; s && *s;) {
		s += strspn(s, " \t,");
		size_t len = strcspn(s, " \t,");
		if (len == n && strncasecmp(s, name, n) == 0)
			return true;
		s += len;
	}
	return false;
}
