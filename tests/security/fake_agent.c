/* fake-agent: a stand-in for sandbox-agent that speaks the guest protocol (src/guest/proto.h)
 * and misbehaves where its script says. The misbehaving-agent tests use it in two places:
 * tests/security/agent_matrix.c runs it on a socketpair against the guest client, and
 * tests/security/test_agent.py makes it the agent of jail sandboxes under the real daemon.
 *
 *     fake-agent --fd N [--script TEXT] [--workspace DIR]
 *
 * The script is TEXT, else the file /etc/fake-agent.script when it exists (so that a template
 * carries the script of its sandboxes), else empty: then the agent just answers. One rule a
 * line, `#` starts a comment:
 *
 *     OP[#N] PHASE FAULT
 *
 * OP is a request's "op" (ping, resume, exec, read, write, list) or `*`; #N picks its N-th
 * occurrence on the connection (default: every one). PHASE says when the fault replaces the
 * agent's behaviour: `reply` (instead of the terminal reply), `midstream` (after the first
 * chunk of output of exec or read, or the first chunk of input of write), `after` (after the
 * terminal reply). FAULT is one of
 *     error         an ERROR frame (code ENOSPC, which the host must pass on as such)
 *     malformed     a RESULT whose payload is not JSON
 *     notobject     a RESULT whose payload is JSON but not an object
 *     silent        nothing (other requests are still answered)
 *     eof           the connection is closed and the agent exits
 *     oversize      a frame header announcing more than GUEST_MAX_PAYLOAD bytes
 *     overcredit    output beyond the channel's credit, without waiting for a WINDOW frame
 *     wrongchannel  the terminal reply on a channel the host never opened
 *     duplicate     the terminal reply twice
 * and, for read in the reply phase, what it says of the file not fitting what it sends:
 *     noinfo        contents without FILEINFO first
 *     overannounce  more contents than FILEINFO announced
 *     short         fewer contents than announced, then the RESULT
 *     nottext       FILEINFO says text, the contents hold a NUL
 *     twoinfo       FILEINFO twice
 *
 * Answers without a fault: ping {"pong":true,"protocol":V}, resume {"protocol":V}, exec one
 * line of stdout then {"exitCode":0}, read FILEINFO, some bytes then {"size":N}, write (after EOF)
 * {"size":N}, list {"entries":[]}, watch its ready EVENT and one create EVENT then
 * {"events":1,...}, connect its connected EVENT, one line of STDOUT then {"bytesIn":12,...},
 * ports {"ports":[]}; `hang` (an op of the tests only) never; anything else
 * ENOTSUP. FAKE_AGENT_PROTOCOL (or a script line
 * `protocol V`) sets V, by default the protocol of the host it was built with.
 *
 * Libc only, so that it builds static with musl for the jail's root filesystems. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "guest/proto.h"

#define MAX_RULES    64
#define MAX_WRITES   64
#define SCRIPT_FILE  "/etc/fake-agent.script"
#define OUTPUT_CHUNK "fake output\n"
#define READ_CHUNK   "fake file contents\n"

enum phase { PH_REPLY, PH_MIDSTREAM, PH_AFTER };
enum fault {
	F_NONE,
	F_ERROR,
	F_MALFORMED,
	F_NOTOBJECT,
	F_SILENT,
	F_EOF,
	F_OVERSIZE,
	F_OVERCREDIT,
	F_WRONGCHANNEL,
	F_DUPLICATE,
	/* read only: what it says of the file does not fit what it sends */
	F_NOINFO,       /* contents without FILEINFO first */
	F_OVERANNOUNCE, /* more contents than FILEINFO announced */
	F_SHORT,        /* fewer contents than announced, then the RESULT */
	F_NOTTEXT,      /* FILEINFO says text, the contents hold a NUL */
	F_TWOINFO,      /* FILEINFO twice */
};

struct rule {
	char op[16];
	unsigned nth; /* 0: every occurrence */
	enum phase phase;
	enum fault fault;
};

static const char *const fault_names[] = {
	"",       "error",        "malformed",  "notobject",    "silent",
	"eof",    "oversize",     "overcredit", "wrongchannel", "duplicate",
	"noinfo", "overannounce", "short",      "nottext",      "twoinfo",
};

static struct rule rules[MAX_RULES];
static size_t nrules;
static int fd = -1;
static long protocol = GUEST_PROTO_VERSION;

/* A write in progress: its channel, the bytes received, the fault to apply midstream. */
struct pending_write {
	uint32_t ch;
	uint64_t got;
	enum fault midstream, after, reply;
};
static struct pending_write writes[MAX_WRITES];

/* Occurrences of each op so far, by name (a handful of names: a linear table is enough). */
static struct {
	char op[16];
	unsigned n;
} seen[16];

static void die(const char *what)
{
	fprintf(stderr, "fake-agent: %s\n", what);
	exit(2);
}

/* --- the script -------------------------------------------------------------------- */

static void parse_rule(char *line)
{
	char op[32], phase[32], fault[32];
	line += strspn(line, " \t");
	if (*line == '#') /* a comment; `#` after an op name is its occurrence */
		return;
	int n = sscanf(line, "%31s %31s %31s", op, phase, fault);
	if (n <= 0)
		return;
	if (n == 2 && strcmp(op, "protocol") == 0) {
		protocol = strtol(phase, NULL, 10);
		return;
	}
	if (n != 3)
		die("a rule is: OP[#N] PHASE FAULT");
	if (nrules == MAX_RULES)
		die("too many rules");
	struct rule *r = &rules[nrules];
	char *at = strchr(op, '#');
	if (at) {
		*at = '\0';
		r->nth = (unsigned)strtoul(at + 1, NULL, 10);
	}
	if (strlen(op) >= sizeof(r->op))
		die("op name too long");
	strcpy(r->op, op);
	if (strcmp(phase, "reply") == 0)
		r->phase = PH_REPLY;
	else if (strcmp(phase, "midstream") == 0)
		r->phase = PH_MIDSTREAM;
	else if (strcmp(phase, "after") == 0)
		r->phase = PH_AFTER;
	else
		die("PHASE is reply, midstream or after");
	r->fault = F_NONE;
	for (size_t i = 1; i < sizeof(fault_names) / sizeof(fault_names[0]); i++)
		if (strcmp(fault, fault_names[i]) == 0)
			r->fault = (enum fault)i;
	if (r->fault == F_NONE)
		die("unknown FAULT");
	nrules++;
}

static void parse_script(char *text)
{
	for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
		parse_rule(line);
}

static char *read_file(const char *path)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return NULL;
	static char buf[8192];
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	return buf;
}

static unsigned occurrence(const char *op)
{
	for (size_t i = 0; i < sizeof(seen) / sizeof(seen[0]); i++) {
		if (seen[i].op[0] == '\0') {
			snprintf(seen[i].op, sizeof(seen[i].op), "%s", op);
			return ++seen[i].n;
		}
		if (strcmp(seen[i].op, op) == 0)
			return ++seen[i].n;
	}
	return 0;
}

/* The fault the script names for this occurrence of op in this phase, or F_NONE. */
static enum fault fault_for(const char *op, unsigned nth, enum phase phase)
{
	for (size_t i = 0; i < nrules; i++) {
		const struct rule *r = &rules[i];
		if (r->phase == phase && (strcmp(r->op, "*") == 0 || strcmp(r->op, op) == 0) &&
		    (r->nth == 0 || r->nth == nth))
			return r->fault;
	}
	return F_NONE;
}

/* --- frames ------------------------------------------------------------------------ */

static void write_all(const void *p, size_t n)
{
	const char *c = p;
	while (n) {
		ssize_t k = write(fd, c, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			exit(0); /* the host went away */
		c += k;
		n -= (size_t)k;
	}
}

static void frame(uint8_t type, uint32_t ch, const void *p, size_t len)
{
	uint8_t hdr[GUEST_HDR_LEN];
	guest_frame_header(hdr, type, ch, (uint32_t)len);
	write_all(hdr, sizeof(hdr));
	if (len)
		write_all(p, len);
}

static void frame_str(uint8_t type, uint32_t ch, const char *s)
{
	frame(type, ch, s, strlen(s));
}

static bool read_all(void *p, size_t n)
{
	char *c = p;
	while (n) {
		ssize_t k = read(fd, c, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return false;
		c += k;
		n -= (size_t)k;
	}
	return true;
}

/* Sends what a fault sends in place of (or after) the terminal reply `ok` on channel ch.
 * Returns false when the agent is to stop. */
static bool do_fault(enum fault f, uint32_t ch, const char *ok)
{
	static char junk[GUEST_DATA_CHUNK];
	switch (f) {
	case F_NONE:
		frame_str(GUEST_RESULT, ch, ok);
		return true;
	case F_ERROR:
		frame_str(GUEST_ERROR, ch,
			  "{\"error\":\"the fake agent refuses\",\"code\":\"ENOSPC\"}");
		return true;
	case F_MALFORMED:
		frame_str(GUEST_RESULT, ch, "{\"this is\": not json");
		return true;
	case F_NOTOBJECT:
		frame_str(GUEST_RESULT, ch, "[\"an\", \"array\"]");
		return true;
	case F_SILENT:
		return true;
	case F_EOF:
		return false;
	case F_OVERSIZE: {
		uint8_t hdr[GUEST_HDR_LEN];
		guest_frame_header(hdr, GUEST_RESULT, ch, GUEST_MAX_PAYLOAD + 1);
		write_all(hdr, sizeof(hdr));
		write_all(junk, 64);
		return true;
	}
	case F_OVERCREDIT:
		memset(junk, 'x', sizeof(junk));
		for (uint64_t sent = 0; sent <= GUEST_WINDOW_INITIAL; sent += sizeof(junk))
			frame(GUEST_STDOUT, ch, junk, sizeof(junk));
		return true;
	case F_WRONGCHANNEL:
		frame_str(GUEST_RESULT, ch + 1000, ok);
		return true;
	case F_DUPLICATE:
		frame_str(GUEST_RESULT, ch, ok);
		frame_str(GUEST_RESULT, ch, ok);
		return true;
	default: /* the read faults happened before the reply */
		frame_str(GUEST_RESULT, ch, ok);
		return true;
	}
	return true;
}

/* The reply phase and then the after phase. */
static bool finish(const char *op, unsigned nth, uint32_t ch, const char *ok)
{
	if (!do_fault(fault_for(op, nth, PH_REPLY), ch, ok))
		return false;
	enum fault after = fault_for(op, nth, PH_AFTER);
	return after == F_NONE || do_fault(after, ch, ok);
}

/* --- requests ---------------------------------------------------------------------- */

/* The value of "op" in a compact JSON request, into out. */
static void request_op(const char *json, char *out, size_t max)
{
	out[0] = '\0';
	const char *p = strstr(json, "\"op\":\"");
	if (!p)
		return;
	p += 6;
	size_t n = 0;
	while (p[n] && p[n] != '"' && n + 1 < max)
		n++;
	memcpy(out, p, n);
	out[n] = '\0';
}

/* A read's FILEINFO ({"size":N}, with "text" when the request asked), as `f` has it. */
static void read_info(uint32_t ch, const char *json, enum fault f)
{
	char info[64];
	size_t size = strlen(READ_CHUNK);
	if (f == F_NOINFO)
		return;
	if (f == F_OVERANNOUNCE)
		size -= 5;
	if (f == F_SHORT)
		size += 10;
	bool text = strstr(json, "\"checkText\":true") != NULL;
	snprintf(info, sizeof(info), "{\"size\":%zu%s}", size,
		 text || f == F_NOTTEXT ? ",\"text\":true" : "");
	frame_str(GUEST_FILEINFO, ch, info);
	if (f == F_TWOINFO)
		frame_str(GUEST_FILEINFO, ch, info);
}

static bool handle_request(uint32_t ch, const char *json)
{
	char op[16], ok[128];
	request_op(json, op, sizeof(op));
	unsigned nth = occurrence(op);
	enum fault mid = fault_for(op, nth, PH_MIDSTREAM);

	if (strcmp(op, "ping") == 0 || strcmp(op, "resume") == 0) {
		if (strcmp(op, "ping") == 0)
			snprintf(ok, sizeof(ok), "{\"pong\":true,\"protocol\":%ld}", protocol);
		else
			snprintf(ok, sizeof(ok), "{\"protocol\":%ld}", protocol);
		return finish(op, nth, ch, ok);
	}
	if (strcmp(op, "read") == 0)
		read_info(ch, json, fault_for(op, nth, PH_REPLY));
	if (strcmp(op, "attach") == 0) {
		/* An attach: its start event, output, then the process as its result. */
		frame_str(GUEST_EVENT, ch, "{\"type\":\"attached\",\"pid\":7,\"position\":0}");
		frame_str(GUEST_STDOUT, ch, OUTPUT_CHUNK);
		if (mid != F_NONE)
			return do_fault(mid, ch, "{}");
		return finish(op, nth, ch, "{\"process\":{\"pid\":7},\"detached\":false}");
	}
	if (strcmp(op, "exec") == 0 || strcmp(op, "read") == 0) {
		bool exec = op[0] == 'e';
		const char *chunk = exec ? OUTPUT_CHUNK : READ_CHUNK;
		if (!exec && fault_for(op, nth, PH_REPLY) == F_NOTTEXT)
			frame(GUEST_FILEDATA, ch, "fake\0file contents", 19);
		else
			frame_str(exec ? GUEST_STDOUT : GUEST_FILEDATA, ch, chunk);
		if (mid != F_NONE)
			return do_fault(mid, ch, "{}");
		if (exec)
			snprintf(ok, sizeof(ok), "{\"exitCode\":0}");
		else
			snprintf(ok, sizeof(ok), "{\"size\":%zu}", strlen(chunk));
		return finish(op, nth, ch, ok);
	}
	if (strcmp(op, "write") == 0 || strcmp(op, "input") == 0) {
		for (size_t i = 0; i < MAX_WRITES; i++) {
			if (writes[i].ch == 0) {
				writes[i] = (struct pending_write){
					.ch = ch,
					.midstream = mid,
					.reply = fault_for(op, nth, PH_REPLY),
					.after = fault_for(op, nth, PH_AFTER),
				};
				return true;
			}
		}
		frame_str(GUEST_ERROR, ch, "{\"error\":\"too many writes\",\"code\":\"EAGAIN\"}");
		return true;
	}
	if (strcmp(op, "watch") == 0) {
		/* In place, one change, then its end (as when the directory is removed). */
		frame_str(GUEST_EVENT, ch, "{\"type\":\"ready\",\"path\":\"dir\",\"watches\":1}");
		frame_str(GUEST_EVENT, ch,
			  "{\"type\":\"create\",\"path\":\"dir/f\",\"dir\":false}");
		if (mid != F_NONE)
			return do_fault(mid, ch, "{}");
		return finish(op, nth, ch, "{\"events\":1,\"overflows\":0,\"gone\":true}");
	}
	if (strcmp(op, "connect") == 0) {
		/* Made, one chunk from the server, then the server's close. */
		frame_str(GUEST_EVENT, ch, "{\"type\":\"connected\"}");
		frame_str(GUEST_STDOUT, ch, OUTPUT_CHUNK);
		if (mid != F_NONE)
			return do_fault(mid, ch, "{}");
		return finish(op, nth, ch, "{\"bytesIn\":12,\"bytesOut\":0}");
	}
	if (strcmp(op, "ports") == 0)
		return finish(op, nth, ch, "{\"ports\":[],\"truncated\":false}");
	if (strcmp(op, "list") == 0)
		return finish(op, nth, ch, "{\"entries\":[]}");
	if (strcmp(op, "stat") == 0)
		return finish(op, nth, ch,
			      "{\"path\":\"file\",\"type\":\"file\",\"size\":1,\"mode\":420,"
			      "\"mtime\":1.5}");
	if (strcmp(op, "mkdir") == 0 || strcmp(op, "remove") == 0 || strcmp(op, "rename") == 0)
		return finish(op, nth, ch, "{\"path\":\"file\"}");
	if (strcmp(op, "spawn") == 0 || strcmp(op, "signal") == 0 || strcmp(op, "resize") == 0 ||
	    strcmp(op, "procs") == 0)
		return finish(op, nth, ch, "{\"process\":{\"pid\":7},\"processes\":[]}");
	if (strcmp(op, "hang") == 0)
		return true;
	frame_str(GUEST_ERROR, ch, "{\"error\":\"not in the fake agent\",\"code\":\"ENOTSUP\"}");
	return true;
}

static struct pending_write *write_of(uint32_t ch)
{
	for (size_t i = 0; i < MAX_WRITES; i++)
		if (writes[i].ch == ch)
			return &writes[i];
	return NULL;
}

/* DATA or EOF on a write's channel. */
static bool handle_write_input(uint8_t type, uint32_t ch, uint32_t len)
{
	struct pending_write *w = write_of(ch);
	if (!w)
		return true;
	if (type == GUEST_DATA) {
		w->got += len;
		uint8_t grant[4] = { (uint8_t)(len >> 24), (uint8_t)(len >> 16),
				     (uint8_t)(len >> 8), (uint8_t)len };
		frame(GUEST_WINDOW, ch, grant, sizeof(grant));
		if (w->midstream != F_NONE) {
			enum fault f = w->midstream;
			w->ch = 0;
			return do_fault(f, ch, "{}");
		}
		return true;
	}
	char ok[64];
	snprintf(ok, sizeof(ok), "{\"size\":%llu}", (unsigned long long)w->got);
	enum fault reply = w->reply, after = w->after;
	w->ch = 0;
	if (!do_fault(reply, ch, ok))
		return false;
	return after == F_NONE || do_fault(after, ch, ok);
}

int main(int argc, char **argv)
{
	const char *script = NULL;
	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--fd") == 0)
			fd = atoi(argv[i + 1]);
		else if (strcmp(argv[i], "--script") == 0)
			script = argv[i + 1];
		/* --workspace and the like: the real agent's options, ignored */
	}
	if (fd < 0)
		die("usage: fake-agent --fd N [--script TEXT]");
	const char *env = getenv("FAKE_AGENT_PROTOCOL");
	if (env)
		protocol = strtol(env, NULL, 10);
	static char text[8192];
	if (script)
		snprintf(text, sizeof(text), "%s", script);
	else if (read_file(SCRIPT_FILE))
		snprintf(text, sizeof(text), "%s", read_file(SCRIPT_FILE));
	parse_script(text);

	static uint8_t payload[GUEST_MAX_PAYLOAD + 1];
	for (;;) {
		uint8_t hdr[GUEST_HDR_LEN];
		if (!read_all(hdr, sizeof(hdr)))
			return 0;
		uint32_t len = (uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 |
			       (uint32_t)hdr[2] << 8 | hdr[3];
		uint32_t ch = (uint32_t)hdr[5] << 24 | (uint32_t)hdr[6] << 16 |
			      (uint32_t)hdr[7] << 8 | hdr[8];
		if (len > GUEST_MAX_PAYLOAD)
			die("the host sent an oversize frame");
		if (!read_all(payload, len))
			return 0;
		payload[len] = '\0';
		bool go_on = true;
		switch (hdr[4]) {
		case GUEST_REQUEST:
			go_on = handle_request(ch, (const char *)payload);
			break;
		case GUEST_DATA:
		case GUEST_EOF:
			go_on = handle_write_input(hdr[4], ch, len);
			break;
		default: /* CANCEL, WINDOW: nothing to do for answers that are already sent */
			break;
		}
		if (!go_on)
			return 0;
	}
}
