/* guest protocol: frame header encoding and the incremental decoder (see proto.h). */
#include "guest/proto.h"

static void put_be32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)(v >> 24);
	p[1] = (uint8_t)(v >> 16);
	p[2] = (uint8_t)(v >> 8);
	p[3] = (uint8_t)v;
}

static uint32_t get_be32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | (uint32_t)p[3];
}

void guest_frame_header(uint8_t hdr[GUEST_HDR_LEN], uint8_t type, uint32_t channel, uint32_t len)
{
	put_be32(hdr, len);
	hdr[4] = type;
	put_be32(hdr + 5, channel);
}

int guest_type_valid(uint8_t type, int from_host)
{
	switch (type) {
	case GUEST_REQUEST:
	case GUEST_DATA:
	case GUEST_EOF:
	case GUEST_CANCEL:
		return from_host ? 1 : 0;
	case GUEST_WINDOW:
		return 1;
	case GUEST_STDOUT:
	case GUEST_STDERR:
	case GUEST_FILEDATA:
	case GUEST_FILEINFO:
	case GUEST_EVENT:
	case GUEST_RESULT:
	case GUEST_ERROR:
		return from_host ? 0 : 1;
	default:
		return 0;
	}
}

void guest_decoder_init(struct guest_decoder *d, uint32_t max_payload)
{
	d->max_payload = max_payload;
	d->skip = 0;
}

enum guest_decode_status guest_decode(struct guest_decoder *d, const uint8_t *buf, size_t n,
				      struct guest_frame *out, size_t *consumed)
{
	size_t off = 0;

	/* Finish discarding an oversize payload first; whatever follows it is the next frame,
	 * decoded in the same call so that the caller never has to loop on empty progress. */
	if (d->skip) {
		size_t k = d->skip < n ? (size_t)d->skip : n;
		d->skip -= k;
		off = k;
		if (d->skip) {
			*consumed = off;
			return GUEST_DECODE_NEED_MORE;
		}
	}

	if (n - off < GUEST_HDR_LEN) {
		*consumed = off;
		return GUEST_DECODE_NEED_MORE;
	}

	const uint8_t *h = buf + off;
	uint32_t len = get_be32(h);
	out->type = h[4];
	out->channel = get_be32(h + 5);
	out->len = len;

	if (len > d->max_payload) {
		/* Never buffer it: report the header now and drop the payload as it arrives. */
		size_t avail = n - off - GUEST_HDR_LEN;
		size_t k = avail < len ? avail : len;
		d->skip = (uint64_t)len - k;
		out->payload = NULL;
		*consumed = off + GUEST_HDR_LEN + k;
		return GUEST_DECODE_OVERSIZE;
	}

	if (n - off - GUEST_HDR_LEN < len) {
		*consumed = off;
		return GUEST_DECODE_NEED_MORE;
	}

	out->payload = h + GUEST_HDR_LEN;
	*consumed = off + GUEST_HDR_LEN + len;
	return GUEST_DECODE_FRAME;
}
