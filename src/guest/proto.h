/* guest protocol: the wire format between sandboxd and sandbox-agent.
 *
 * One byte stream per sandbox carries many concurrent operations. Every frame is
 *
 *     u32 length (big-endian, payload bytes only) | u8 type | u32 channel (big-endian) | payload
 *
 * The host opens an operation by sending REQUEST on a channel id it has not used yet on this
 * connection (ids are never reused; channel 0 is reserved). The operation ends with exactly one
 * terminal frame from the agent, RESULT or ERROR, after which the channel is closed.
 *
 * Control payloads (REQUEST, RESULT, ERROR) are UTF-8 JSON objects. Data payloads (DATA,
 * STDOUT, STDERR, FILEDATA) are raw bytes, never base64.
 *
 * Flow control: data frames on a channel consume the receiver's credit for that channel.
 * Each side starts with GUEST_WINDOW_INITIAL bytes of credit per channel per direction and
 * must not send more data than the credit the peer has granted; the receiver grants more
 * with WINDOW frames once it has consumed data. So neither side ever buffers more than one
 * window per channel, whatever the other side does.
 *
 * Both sides treat the peer as hostile: a frame whose length exceeds the receiver's maximum
 * is an error for that frame (its payload is skipped), never a reason to allocate it. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The protocol's version, which the agent reports as "protocol" in the results of ping and
 * resume; the host refuses an agent older than its own. 2: ping and resume report it. 3: a
 * read announces its file (FILEINFO) before the contents, so the host can stream them. 4: the
 * rename operation. 5: background processes (spawn, procs, attach, signal, input, resize) and
 * EVENT frames. 6: the watch operation. 7: connect (a byte stream to a port inside the
 * sandbox) and ports (those listening). 8: exec's user (spawn's too: "user": "root" runs the
 * command as the sandbox's root). 9: resume's "storage" (a VM's disk and volumes, mounted by
 * its agent before anything runs; its result says "storageMounted"). 10: resume's "restored"
 * ({"from": "hibernation" | "fork" | "snapshot", "session": the id it was saved as}: a VM made
 * from a save of a running one, its processes carried on), on which the agent ends what the
 * previous connection left open and answers "restored": true and "processes": the background
 * processes still running. */
#define GUEST_PROTO_VERSION  10
#define GUEST_HDR_LEN        9
#define GUEST_MAX_PAYLOAD    (1u << 20)   /* largest payload either side accepts */
#define GUEST_DATA_CHUNK     (256u << 10) /* data frames are at most this big */
#define GUEST_WINDOW_INITIAL (1u << 20)   /* initial credit per channel and direction */
#define GUEST_EVENT_MAX      (64u << 10)  /* largest EVENT payload */

enum guest_type {
	/* host -> agent */
	GUEST_REQUEST = 1, /* JSON: opens the channel, {"op": "...", ...} */
	GUEST_DATA = 2,    /* raw: stdin bytes (exec) or file contents (write) */
	GUEST_EOF = 3,     /* empty: no more DATA on this channel */
	GUEST_CANCEL = 4,  /* empty: cancel the operation (its terminal frame still follows) */
	/* both directions */
	GUEST_WINDOW = 5, /* 4 bytes: u32 big-endian credit increment for this channel */
	/* agent -> host */
	GUEST_STDOUT = 16,   /* raw (connect: what the server sent) */
	GUEST_STDERR = 17,   /* raw */
	GUEST_FILEDATA = 18, /* raw: contents of a read */
	/* JSON, once per read that asked with "info": true, before its FILEDATA:
	 * {"size": N, "text": bool}. "size" is the
	 * file's size when it was opened: exactly that many FILEDATA bytes follow, or the read
	 * ends with an ERROR (ESTALE when the file changed meanwhile). "text" (only when the
	 * request had "checkText": true) tells whether the whole file is valid UTF-8 without
	 * NUL; the bytes sent after "text": true are. */
	GUEST_FILEINFO = 19,
	/* JSON, any number, not terminal: something that happened on the channel, {"type":...},
	 * at most GUEST_EVENT_MAX bytes; it consumes the channel's credit like a data frame. An
	 * attach's first is {"type": "attached", "pid": N, "position": N}, then {"type": "gap",
	 * "bytes": N} where N bytes of output were overwritten in the replay buffer before this
	 * reader got them; a watch's, its changes ({"type": "create", "path": "rel", "dir":
	 * false}). */
	GUEST_EVENT = 20,
	GUEST_RESULT = 32, /* JSON, terminal */
	GUEST_ERROR = 33,  /* JSON, terminal: {"error": "message", "code": "ENOENT"} */
};

struct guest_frame {
	uint8_t type;
	uint32_t channel;
	uint32_t len;           /* payload length as announced */
	const uint8_t *payload; /* points into the caller's buffer; NULL when skipped */
};

/* Writes the 9-byte header for a frame. */
void guest_frame_header(uint8_t hdr[GUEST_HDR_LEN], uint8_t type, uint32_t channel, uint32_t len);

/* Whether `type` is a type that `from_host` (1) or the agent (0) may send. */
int guest_type_valid(uint8_t type, int from_host);

/* Incremental decoder. Feed it bytes as they arrive; it yields whole frames without ever
 * allocating per frame. Frames longer than max_payload are reported with payload == NULL
 * and GUEST_DECODE_OVERSIZE, and their payload is skipped as it arrives. */
struct guest_decoder {
	uint32_t max_payload;
	uint64_t skip; /* payload bytes of an oversize frame still to discard */
};

enum guest_decode_status {
	GUEST_DECODE_NEED_MORE = 0, /* not enough bytes for a frame */
	GUEST_DECODE_FRAME = 1,     /* *out holds a frame */
	GUEST_DECODE_OVERSIZE = 2,  /* *out holds an oversize frame's header; payload skipped */
};

void guest_decoder_init(struct guest_decoder *d, uint32_t max_payload);

/* Looks at buf[0..n). Returns a guest_decode_status and sets *consumed to the number of
 * bytes the caller must drop from the front of its buffer (possibly nonzero with NEED_MORE
 * while skipping). Never reads past n. The bytes that finish an earlier oversize frame's
 * payload are counted in *consumed of the call that yields the next frame. out->payload
 * points into buf (non-NULL even when len is 0): use it before dropping the bytes.
 * The type is not checked here (see guest_type_valid). */
enum guest_decode_status guest_decode(struct guest_decoder *d, const uint8_t *buf, size_t n,
				      struct guest_frame *out, size_t *consumed);
