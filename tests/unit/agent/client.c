/* Test client of the guest protocol (see client.h). */
#include "client.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../wait.h"

#define IN_CAP (GUEST_HDR_LEN + GUEST_MAX_PAYLOAD + 65536)

static void die(const char *what)
{
	fprintf(stderr, "client: %s: %s\n", what, strerror(errno));
	abort();
}

const char *client_env_file;

void client_start(struct client *c)
{
	memset(c, 0, sizeof(*c));
	const char *agent = getenv("SANDBOX_AGENT");
	if (!agent) {
		fprintf(stderr, "SANDBOX_AGENT is not set\n");
		abort();
	}
	snprintf(c->ws, sizeof(c->ws), "/tmp/agent-test-XXXXXX");
	if (!mkdtemp(c->ws))
		die("mkdtemp");
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
		die("socketpair");
	c->pid = fork();
	if (c->pid < 0)
		die("fork");
	if (c->pid == 0) {
		int fd = dup(sv[1]); /* without CLOEXEC */
		char fds[16];
		snprintf(fds, sizeof(fds), "%d", fd);
		if (client_env_file)
			execl(agent, agent, "--fd", fds, "--workspace", c->ws, "--env-file",
			      client_env_file, (char *)NULL);
		else
			execl(agent, agent, "--fd", fds, "--workspace", c->ws, (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	c->fd = sv[0];
	c->in = malloc(IN_CAP);
	c->auto_window = true;
	guest_decoder_init(&c->dec, GUEST_MAX_PAYLOAD);
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	remove(p);
	return 0;
}

struct reaped {
	pid_t pid;
	int status;
};

static bool reaped(void *arg)
{
	struct reaped *r = arg;
	return waitpid(r->pid, &r->status, WNOHANG) == r->pid;
}

int client_stop(struct client *c)
{
	if (c->fd >= 0)
		close(c->fd);
	c->fd = -1;
	/* The agent must leave on EOF; one that does not is killed, and the status says so. */
	struct reaped r = { .pid = c->pid, .status = -1 };
	if (!wait_until(reaped, &r, WAIT_TIMEOUT_MS, "the agent to exit on EOF")) {
		kill(c->pid, SIGKILL);
		waitpid(c->pid, NULL, 0);
		r.status = -1;
	}
	int status = r.status;
	chmod(c->ws, 0755);
	nftw(c->ws, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
	for (size_t i = 0; i < c->nbacklog; i++)
		frame_free(&c->backlog[i]);
	free(c->backlog);
	free(c->in);
	return status;
}

static void write_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;
	while (n) {
		ssize_t k = write(fd, b, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			die("write");
		b += k;
		n -= (size_t)k;
	}
}

void client_send(struct client *c, uint8_t type, uint32_t ch, const void *p, size_t n)
{
	uint8_t h[GUEST_HDR_LEN];
	guest_frame_header(h, type, ch, (uint32_t)n);
	write_all(c->fd, h, sizeof(h));
	if (n)
		write_all(c->fd, p, n);
}

void client_request(struct client *c, uint32_t ch, const char *fmt, ...)
{
	char *s;
	va_list ap;
	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		die("vasprintf");
	va_end(ap);
	client_send(c, GUEST_REQUEST, ch, s, strlen(s));
	free(s);
}

void client_window(struct client *c, uint32_t ch, uint32_t n)
{
	uint8_t p[4] = { (uint8_t)(n >> 24), (uint8_t)(n >> 16), (uint8_t)(n >> 8), (uint8_t)n };
	client_send(c, GUEST_WINDOW, ch, p, 4);
}

void frame_free(struct frame *f)
{
	free(f->payload);
	f->payload = NULL;
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Decodes one frame from the input buffer, reading more as needed. */
static int read_frame(struct client *c, struct frame *f, int64_t deadline)
{
	for (;;) {
		struct guest_frame gf;
		size_t used;
		enum guest_decode_status st = guest_decode(&c->dec, c->in, c->in_len, &gf, &used);
		if (st == GUEST_DECODE_FRAME) {
			f->type = gf.type;
			f->ch = gf.channel;
			f->len = gf.len;
			f->payload = malloc(gf.len + 1);
			memcpy(f->payload, gf.payload, gf.len);
			f->payload[gf.len] = 0;
		}
		memmove(c->in, c->in + used, c->in_len - used);
		c->in_len -= used;
		if (st == GUEST_DECODE_FRAME)
			return 0;
		if (st == GUEST_DECODE_OVERSIZE) {
			fprintf(stderr, "client: oversize frame from the agent\n");
			abort();
		}
		int64_t left = deadline - now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd p = { .fd = c->fd, .events = POLLIN };
		int r = poll(&p, 1, (int)left);
		if (r < 0 && errno != EINTR)
			die("poll");
		if (r <= 0)
			continue;
		ssize_t n = read(c->fd, c->in + c->in_len, IN_CAP - c->in_len);
		if (n == 0)
			return -EPIPE;
		if (n < 0 && errno != EINTR && errno != EAGAIN)
			return -EPIPE;
		if (n > 0)
			c->in_len += (size_t)n;
	}
}

int client_next(struct client *c, uint32_t ch, struct frame *f, int timeout_ms)
{
	if (ch) {
		for (size_t i = 0; i < c->nbacklog; i++) {
			if (c->backlog[i].ch != ch)
				continue;
			*f = c->backlog[i];
			memmove(c->backlog + i, c->backlog + i + 1,
				(c->nbacklog - i - 1) * sizeof(*f));
			c->nbacklog--;
			return 0;
		}
	}
	return read_frame(c, f, now_ms() + timeout_ms);
}

static void append(char **buf, size_t *len, const uint8_t *p, size_t n)
{
	*buf = realloc(*buf, *len + n + 1);
	memcpy(*buf + *len, p, n);
	*len += n;
	(*buf)[*len] = 0;
}

int client_wait(struct client *c, uint32_t ch, struct reply *r, int timeout_ms)
{
	memset(r, 0, sizeof(*r));
	int64_t deadline = now_ms() + timeout_ms;
	for (;;) {
		struct frame f;
		int64_t left = deadline - now_ms();
		int ret = client_next(c, ch, &f, left > 0 ? (int)left : 0);
		if (ret < 0)
			return ret;
		if (f.ch != ch) {
			c->backlog = realloc(c->backlog, (c->nbacklog + 1) * sizeof(f));
			c->backlog[c->nbacklog++] = f;
			continue;
		}
		switch (f.type) {
		case GUEST_STDOUT:
		case GUEST_FILEDATA:
		case GUEST_STDERR:
			if (f.type == GUEST_STDERR)
				append(&r->err, &r->err_len, f.payload, f.len);
			else
				append(&r->out, &r->out_len, f.payload, f.len);
			r->nframes++;
			if (c->auto_window)
				client_window(c, ch, f.len);
			break;
		case GUEST_FILEINFO:
			/* Before any data, and once. */
			if (r->ninfo++ || r->out_len) {
				fprintf(stderr, "client: FILEINFO out of place\n");
				abort();
			}
			r->info = json_loadb((const char *)f.payload, f.len, JSON_REJECT_DUPLICATES,
					     NULL);
			if (!json_is_object(r->info)) {
				fprintf(stderr, "client: bad FILEINFO from the agent\n");
				abort();
			}
			break;
		case GUEST_EVENT:
			/* A watch's events, one JSON object a line in out. */
			append(&r->out, &r->out_len, f.payload, f.len);
			append(&r->out, &r->out_len, (const uint8_t *)"\n", 1);
			r->nframes++;
			break;
		case GUEST_WINDOW:
			if (f.len == 4)
				r->windows += (uint32_t)f.payload[0] << 24 | f.payload[1] << 16 |
					      f.payload[2] << 8 | f.payload[3];
			break;
		case GUEST_RESULT:
		case GUEST_ERROR:
			r->type = f.type;
			r->json = json_loadb((const char *)f.payload, f.len, JSON_REJECT_DUPLICATES,
					     NULL);
			if (!r->json) {
				fprintf(stderr, "client: bad JSON from the agent: %s\n", f.payload);
				abort();
			}
			frame_free(&f);
			return 0;
		default:
			fprintf(stderr, "client: unexpected frame type %u\n", f.type);
			abort();
		}
		frame_free(&f);
	}
}

void reply_free(struct reply *r)
{
	if (r->json)
		json_decref(r->json);
	json_decref(r->info);
	free(r->out);
	free(r->err);
	memset(r, 0, sizeof(*r));
}

const char *reply_str(const struct reply *r, const char *key)
{
	json_t *v = json_object_get(r->json, key);
	return json_is_string(v) ? json_string_value(v) : NULL;
}

long long reply_int(const struct reply *r, const char *key)
{
	json_t *v = json_object_get(r->json, key);
	return json_is_integer(v) ? json_integer_value(v) : -999;
}

int client_write_file(struct client *c, uint32_t ch, const char *path, const void *data, size_t len,
		      const char *extra_json, struct reply *r)
{
	client_request(c, ch, "{\"op\":\"write\",\"path\":\"%s\"%s%s}", path, extra_json ? "," : "",
		       extra_json ? extra_json : "");
	uint64_t credit = GUEST_WINDOW_INITIAL;
	const uint8_t *p = data;
	size_t off = 0;
	while (off < len) {
		while (credit == 0) {
			struct frame f;
			int ret = client_next(c, ch, &f, 10000);
			if (ret < 0)
				return ret;
			if (f.ch == ch && f.type == GUEST_WINDOW && f.len == 4) {
				credit += (uint32_t)f.payload[0] << 24 | f.payload[1] << 16 |
					  f.payload[2] << 8 | f.payload[3];
			} else if (f.ch == ch &&
				   (f.type == GUEST_ERROR || f.type == GUEST_RESULT)) {
				/* Ended early (an error): put it back for client_wait. */
				c->backlog = realloc(c->backlog, (c->nbacklog + 1) * sizeof(f));
				c->backlog[c->nbacklog++] = f;
				return client_wait(c, ch, r, 10000);
			} else if (f.ch != ch) {
				c->backlog = realloc(c->backlog, (c->nbacklog + 1) * sizeof(f));
				c->backlog[c->nbacklog++] = f;
				continue;
			}
			frame_free(&f);
		}
		size_t n = len - off;
		if (n > GUEST_DATA_CHUNK)
			n = GUEST_DATA_CHUNK;
		if (n > credit)
			n = (size_t)credit;
		client_send(c, GUEST_DATA, ch, p + off, n);
		off += n;
		credit -= n;
	}
	client_send(c, GUEST_EOF, ch, NULL, 0);
	return client_wait(c, ch, r, 20000);
}

bool client_ping(struct client *c, uint32_t ch)
{
	struct reply r;
	client_request(c, ch, "{\"op\":\"ping\"}");
	if (client_wait(c, ch, &r, 5000) < 0)
		return false;
	bool ok = r.type == GUEST_RESULT && json_is_true(json_object_get(r.json, "pong"));
	reply_free(&r);
	return ok;
}

const char *ws_file(struct client *c, const char *rel)
{
	static char buf[512];
	snprintf(buf, sizeof(buf), "%s/%s", c->ws, rel);
	return buf;
}
