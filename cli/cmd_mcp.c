/* sandbox mcp: the stdio transport of MCP, as a bridge onto the daemon's Streamable HTTP
 * endpoint (POST /mcp), so that every rule of the protocol lives in sandboxd and an MCP
 * client config needs neither root nor the daemon's files.
 *
 * Each line on stdin is one JSON-RPC message (or batch), POSTed as it is; every message the
 * daemon sends back, whether as a JSON reply or as the events of an SSE stream, is written
 * to stdout as one line. Nothing else ever goes to stdout: diagnostics go to stderr. Many
 * requests run at once (a long execute does not hold up a ping), on one curl multi handle.
 *
 * The bridge keeps the MCP session: it sends the initialize request, notes the session id
 * and the negotiated version, and holds later messages until that answer is in. If the
 * daemon forgets the session (it expired while the client was idle, or the daemon
 * restarted), the bridge initializes a new one with the client's original parameters and
 * sends the message again, so a long-lived client never sees the difference. A
 * notifications/cancelled for a request still in flight also drops that request's HTTP
 * exchange, which makes the daemon cancel it even if the notification overtook it. */
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "cli.h"
#include "sandbox.h"
#include "util/cleanup.h"

/* The longest stdin line or reply accepted (bodies the daemon takes are smaller). */
#define MAX_MESSAGE       (256u << 20)
#define DELETE_TIMEOUT_MS 2000

void cmd_mcp_help(void)
{
	printf("usage: sandbox mcp [--url URL] [--api-key KEY] [--verbose]\n\n"
	       "Speaks MCP (newline-delimited JSON-RPC) on stdin and stdout and forwards it to\n"
	       "sandboxd's Streamable HTTP endpoint, URL/mcp. Logs go to stderr.\n\n"
	       "  --url URL       the daemon: http://host:port or unix:/path/to.sock\n"
	       "                  (default $SANDBOX_URL, else unix:%s where it\n"
	       "                  exists, else http://127.0.0.1:3000)\n"
	       "  --api-key KEY   the API key (default $SANDBOX_API_KEY, else the key file)\n"
	       "  -v, --verbose   log every message on stderr\n",
	       CLIENT_SERVICE_SOCKET);
}

enum state {
	ST_NEW,          /* no session yet */
	ST_INITIALIZING, /* the client's initialize is in flight */
	ST_REINIT,       /* our own initialize is in flight, after the session was lost */
	ST_READY,
};

struct job {
	char *body; /* the line as POSTed */
	size_t len;
	json_t *msg; /* parsed, or NULL when the line is not JSON (the daemon says so) */
	json_t *id;  /* a request's id (borrowed from msg) */
	bool is_initialize;
	bool internal; /* ours (re-initialization): the answer is not the client's */
	bool resent;   /* already sent again once after the session was lost */
	bool sent_session;
	CURL *easy;
	struct curl_slist *headers;
	long status;
	bool sse;
	char *session_id; /* from the reply's headers */
	/* the reply */
	char *buf;
	size_t buf_len;
	bool too_big;
	/* SSE parsing */
	char *line;
	size_t line_len;
	char *data;
	size_t data_len;
	bool has_data;
	bool after_cr;
	bool answered; /* a response came back on the stream */
	struct job *next;
};

static struct {
	char *base; /* http://host:port */
	char *unix_path;
	char *auth_header;
	bool verbose;
	CURLM *multi;
	enum state state;
	char *session_id;
	char *version;
	json_t *init_params; /* the client's initialize params, for re-initialization */
	struct job *inflight;
	struct job *queue, **queue_tail; /* waiting for the session */
	int sig_pipe[2];
	volatile sig_atomic_t stop;
	bool stdout_broken;
	bool eof;
	unsigned next_internal_id;
} bridge_mod;

static void logmsg(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void logmsg(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs("sandbox mcp: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* --- stdout ------------------------------------------------------------------------- */

/* Writes one message as one line; only valid JSON ever reaches stdout. */
static void emit(json_t *msg)
{
	if (bridge_mod.stdout_broken)
		return;
	char *text = json_dumps(msg, JSON_COMPACT | JSON_REAL_PRECISION(15));
	if (!text)
		return;
	if (bridge_mod.verbose)
		logmsg("<- %.300s", text);
	if (fputs(text, stdout) == EOF || fputc('\n', stdout) == EOF || fflush(stdout) == EOF) {
		/* The client closed our stdout: nobody is listening any more. */
		bridge_mod.stdout_broken = true;
		bridge_mod.stop = 1;
	}
	free(text);
}

/* An error answer to a request of the client (nothing for notifications). */
static void emit_error(struct job *j, int code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void emit_error(struct job *j, int code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (!j->id || j->internal) {
		logmsg("%s", msg);
		return;
	}
	json_t *e = json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", j->id, "error",
			      "code", code, "message", msg);
	emit(e);
	json_decref(e);
}

/* --- answers ------------------------------------------------------------------------ */

static void send_job(struct job *j);
static void start_reinit(void);

/* An answer of the daemon, for the client or for us. */
static void deliver(struct job *j, json_t *msg)
{
	if (json_object_get(msg, "id") && json_object_get(msg, "method") == NULL)
		j->answered = true;
	if (j->is_initialize && json_is_object(msg)) {
		json_t *version =
			json_object_get(json_object_get(msg, "result"), "protocolVersion");
		if (json_is_string(version)) {
			free(bridge_mod.version);
			bridge_mod.version = xstrdup(json_string_value(version));
		}
	}
	if (!j->internal)
		emit(msg);
}

static void deliver_text(struct job *j, const char *text, size_t len)
{
	json_error_t jerr;
	json_t *msg = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!msg) {
		logmsg("the daemon sent something that is not JSON (%s); dropped", jerr.text);
		return;
	}
	deliver(j, msg);
	json_decref(msg);
}

/* SSE: lines end with \n, \r\n or \r; an empty line dispatches the event. */
static void sse_line(struct job *j, const char *line, size_t len)
{
	if (len == 0) {
		if (j->has_data)
			deliver_text(j, j->data, j->data_len);
		j->data_len = 0;
		j->has_data = false;
		return;
	}
	if (line[0] == ':')
		return;
	const char *colon = memchr(line, ':', len);
	size_t nlen = colon ? (size_t)(colon - line) : len;
	const char *value = colon ? colon + 1 : line + len;
	size_t vlen = len - (size_t)(value - line);
	if (vlen && *value == ' ')
		value++, vlen--;
	if (nlen != 4 || memcmp(line, "data", 4) != 0)
		return; /* event names do not matter: every event carries a message */
	j->data = xrealloc(j->data, j->data_len + vlen + 2);
	if (j->has_data)
		j->data[j->data_len++] = '\n';
	memcpy(j->data + j->data_len, value, vlen);
	j->data_len += vlen;
	j->data[j->data_len] = '\0';
	j->has_data = true;
}

static bool sse_feed(struct job *j, const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		char c = p[i];
		if (c == '\n' && j->after_cr) {
			j->after_cr = false;
			continue;
		}
		j->after_cr = c == '\r';
		if (c == '\r' || c == '\n') {
			sse_line(j, j->line ? j->line : "", j->line_len);
			j->line_len = 0;
			continue;
		}
		if (j->line_len + j->data_len >= MAX_MESSAGE)
			return false;
		j->line = xrealloc(j->line, j->line_len + 2);
		j->line[j->line_len++] = c;
	}
	return true;
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
	struct job *j = arg;
	size_t len = size * n;
	if (j->status == 0)
		curl_easy_getinfo(j->easy, CURLINFO_RESPONSE_CODE, &j->status);
	if (j->sse && j->status == 200) {
		if (!sse_feed(j, p, len)) {
			j->too_big = true;
			return 0;
		}
		return len;
	}
	if (j->buf_len + len > MAX_MESSAGE) {
		j->too_big = true;
		return 0;
	}
	j->buf = xrealloc(j->buf, j->buf_len + len + 1);
	memcpy(j->buf + j->buf_len, p, len);
	j->buf_len += len;
	j->buf[j->buf_len] = '\0';
	return len;
}

static size_t on_header(char *p, size_t size, size_t n, void *arg)
{
	struct job *j = arg;
	size_t len = size * n;
	size_t vlen;
	const char *v;
	if (len > 13 && strncasecmp(p, "Content-Type:", 13) == 0) {
		v = p + 13;
		while (*v == ' ')
			v++;
		j->sse = strncasecmp(v, "text/event-stream", 17) == 0;
	} else if (len > 15 && strncasecmp(p, "Mcp-Session-Id:", 15) == 0) {
		v = p + 15;
		while (*v == ' ')
			v++;
		vlen = len - (size_t)(v - p);
		while (vlen && (v[vlen - 1] == '\r' || v[vlen - 1] == '\n' || v[vlen - 1] == ' '))
			vlen--;
		free(j->session_id);
		j->session_id = strndup(v, vlen);
	}
	return len;
}

/* --- jobs --------------------------------------------------------------------------- */

static void job_free(struct job *j)
{
	if (j->easy) {
		curl_multi_remove_handle(bridge_mod.multi, j->easy);
		curl_easy_cleanup(j->easy);
	}
	curl_slist_free_all(j->headers);
	json_decref(j->msg);
	free(j->body);
	free(j->session_id);
	free(j->buf);
	free(j->line);
	free(j->data);
	free(j);
}

static void job_reset_reply(struct job *j)
{
	if (j->easy) {
		curl_multi_remove_handle(bridge_mod.multi, j->easy);
		curl_easy_cleanup(j->easy);
		j->easy = NULL;
	}
	curl_slist_free_all(j->headers);
	j->headers = NULL;
	j->status = 0;
	j->sse = j->too_big = j->has_data = j->after_cr = j->answered = false;
	j->buf_len = j->line_len = j->data_len = 0;
}

static struct job *job_new(char *body, size_t len)
{
	struct job *j = xcalloc(1, sizeof(*j));
	j->body = body;
	j->len = len;
	json_error_t jerr;
	j->msg = json_loadb(body, len, 0, &jerr);
	if (json_is_object(j->msg)) {
		json_t *id = json_object_get(j->msg, "id");
		const char *method = json_string_value(json_object_get(j->msg, "method"));
		if (method && id && !json_is_null(id))
			j->id = id;
		j->is_initialize = method && j->id && strcmp(method, "initialize") == 0;
	}
	return j;
}

static void unlink_inflight(struct job *j)
{
	for (struct job **pp = &bridge_mod.inflight; *pp; pp = &(*pp)->next) {
		if (*pp == j) {
			*pp = j->next;
			j->next = NULL;
			return;
		}
	}
}

static void enqueue(struct job *j)
{
	j->next = NULL;
	*bridge_mod.queue_tail = j;
	bridge_mod.queue_tail = &j->next;
}

static void flush_queue(void)
{
	while (bridge_mod.queue && (bridge_mod.state == ST_READY || bridge_mod.state == ST_NEW)) {
		struct job *j = bridge_mod.queue;
		bridge_mod.queue = j->next;
		if (!bridge_mod.queue)
			bridge_mod.queue_tail = &bridge_mod.queue;
		send_job(j);
	}
}

static void send_job(struct job *j)
{
	j->easy = curl_easy_init();
	if (!j->easy)
		abort();
	struct curl_slist *h = NULL;
	h = curl_slist_append(h, "Content-Type: application/json");
	h = curl_slist_append(h, "Accept: application/json, text/event-stream");
	h = curl_slist_append(h, "Expect:");
	if (bridge_mod.auth_header)
		h = curl_slist_append(h, bridge_mod.auth_header);
	j->sent_session = false;
	if (bridge_mod.session_id && !j->is_initialize) {
		_cleanup_free_ char *sid = xasprintf("Mcp-Session-Id: %s", bridge_mod.session_id);
		h = curl_slist_append(h, sid);
		j->sent_session = true;
	}
	if (bridge_mod.version && !j->is_initialize) {
		_cleanup_free_ char *pv = xasprintf("MCP-Protocol-Version: %s", bridge_mod.version);
		h = curl_slist_append(h, pv);
	}
	j->headers = h;
	_cleanup_free_ char *url = xasprintf("%s/mcp", bridge_mod.base);
	curl_easy_setopt(j->easy, CURLOPT_URL, url);
	if (bridge_mod.unix_path)
		curl_easy_setopt(j->easy, CURLOPT_UNIX_SOCKET_PATH, bridge_mod.unix_path);
	curl_easy_setopt(j->easy, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(j->easy, CURLOPT_POST, 1L);
	curl_easy_setopt(j->easy, CURLOPT_POSTFIELDS, j->body);
	curl_easy_setopt(j->easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)j->len);
	curl_easy_setopt(j->easy, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(j->easy, CURLOPT_WRITEDATA, j);
	curl_easy_setopt(j->easy, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(j->easy, CURLOPT_HEADERDATA, j);
	curl_easy_setopt(j->easy, CURLOPT_PRIVATE, j);
	curl_easy_setopt(j->easy, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
	curl_easy_setopt(j->easy, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(j->easy, CURLOPT_NOSIGNAL, 1L);
	curl_multi_add_handle(bridge_mod.multi, j->easy);
	j->next = bridge_mod.inflight;
	bridge_mod.inflight = j;
	if (bridge_mod.verbose)
		logmsg("-> %.300s", j->body);
}

/* The daemon's words for an HTTP error, from its JSON-RPC error or {"error": ...} body. */
static const char *error_text(json_t *body)
{
	const char *m =
		json_string_value(json_object_get(json_object_get(body, "error"), "message"));
	if (!m)
		m = json_string_value(json_object_get(body, "error"));
	return m ? m : "no details";
}

static void finish_initialize(struct job *j, bool ok)
{
	if (ok && j->session_id) {
		free(bridge_mod.session_id);
		bridge_mod.session_id = xstrdup(j->session_id);
		bridge_mod.state = ST_READY;
		if (j->internal) {
			/* Ours: the client already said initialized once; the daemon hears it
			 * again for the new session. */
			struct job *n = job_new(xstrdup("{\"jsonrpc\":\"2.0\",\"method\":"
							"\"notifications/initialized\"}"),
						54);
			n->internal = true;
			send_job(n);
			logmsg("the daemon had lost the MCP session; a new one was initialized");
		}
	} else {
		bridge_mod.state = ST_NEW;
		if (j->internal)
			logmsg("initializing a new MCP session failed (HTTP %ld)", j->status);
	}
	flush_queue();
}

static void job_done(struct job *j, CURLcode rc)
{
	unlink_inflight(j);
	if (rc != CURLE_OK && !(j->too_big && rc == CURLE_WRITE_ERROR)) {
		emit_error(j, -32603, "cannot reach sandboxd at %s: %s", bridge_mod.base,
			   curl_easy_strerror(rc));
		if (j->is_initialize)
			finish_initialize(j, false);
		job_free(j);
		return;
	}
	curl_easy_getinfo(j->easy, CURLINFO_RESPONSE_CODE, &j->status);
	if (j->too_big) {
		emit_error(j, -32603, "the daemon's reply exceeds %u bytes", MAX_MESSAGE);
		if (j->is_initialize)
			finish_initialize(j, false);
		job_free(j);
		return;
	}
	if (j->status == 404 && j->sent_session && !j->resent && bridge_mod.init_params) {
		/* The daemon forgot the session: make a new one, then send this again. */
		j->resent = true;
		job_reset_reply(j);
		if (bridge_mod.state == ST_READY)
			start_reinit();
		enqueue(j);
		flush_queue();
		return;
	}
	json_t *body = NULL;
	if (!j->sse && j->buf_len) {
		json_error_t jerr;
		body = json_loadb(j->buf, j->buf_len, 0, &jerr);
	}
	if (j->status >= 200 && j->status < 300) {
		if (j->sse && j->has_data) /* an event not closed by an empty line */
			deliver_text(j, j->data, j->data_len);
		else if (body)
			deliver(j, body);
		if (j->is_initialize)
			finish_initialize(j, body && json_object_get(body, "result"));
		else if (j->id && !j->answered && j->status != 202)
			/* A stream that ended without the answer: the request was cancelled. */
			logmsg("no answer to request %s (cancelled)", j->body);
	} else {
		/* HTTP errors carry a JSON-RPC error without the request's id: give it back. */
		json_t *err = json_object_get(body, "error");
		int code = (int)json_integer_value(json_object_get(err, "code"));
		bool notification = json_is_object(j->msg) &&
				    json_is_string(json_object_get(j->msg, "method")) && !j->id;
		if (j->id && !j->internal) {
			char msg[1024];
			snprintf(msg, sizeof(msg), "sandboxd answered HTTP %ld: %s", j->status,
				 error_text(body));
			json_t *e =
				json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", j->id,
					  "error", "code", code ? code : -32603, "message", msg);
			emit(e);
			json_decref(e);
		} else if (!notification && !j->internal && err &&
			   json_object_get(body, "jsonrpc")) {
			/* Not a valid message (or a batch refused as a whole): the daemon's error
			 * is the answer JSON-RPC owes. */
			emit(body);
		} else {
			logmsg("sandboxd answered HTTP %ld: %s", j->status, error_text(body));
		}
		if (j->is_initialize)
			finish_initialize(j, false);
	}
	json_decref(body);
	job_free(j);
}

static void start_reinit(void)
{
	bridge_mod.state = ST_REINIT;
	json_t *req = json_pack("{s:s, s:s, s:s, s:O}", "jsonrpc", "2.0", "id", "", "method",
				"initialize", "params", bridge_mod.init_params);
	char idbuf[48];
	snprintf(idbuf, sizeof(idbuf), "sandbox-mcp-reinit-%u", ++bridge_mod.next_internal_id);
	json_object_set_new(req, "id", json_string(idbuf));
	char *text = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	struct job *j = job_new(text, strlen(text));
	j->internal = true;
	send_job(j);
}

/* notifications/cancelled for a request still in flight: drop its exchange too, so that the
 * daemon cancels it even if the notification arrives first. */
static void cancel_inflight(json_t *msg)
{
	const char *method = json_string_value(json_object_get(msg, "method"));
	if (!method || strcmp(method, "notifications/cancelled") != 0)
		return;
	json_t *rid = json_object_get(json_object_get(msg, "params"), "requestId");
	if (!rid)
		return;
	for (struct job *j = bridge_mod.inflight; j; j = j->next) {
		if (j->id && json_equal(j->id, rid) && !j->is_initialize) {
			unlink_inflight(j);
			job_free(j);
			return;
		}
	}
	for (struct job **pp = &bridge_mod.queue; *pp; pp = &(*pp)->next) {
		struct job *j = *pp;
		if (j->id && json_equal(j->id, rid)) {
			*pp = j->next;
			if (!bridge_mod.queue)
				bridge_mod.queue_tail = &bridge_mod.queue;
			else if (bridge_mod.queue_tail == &j->next)
				bridge_mod.queue_tail = pp;
			job_free(j);
			return;
		}
	}
}

/* One line from the client. */
static void on_line(char *line, size_t len)
{
	while (len && (line[len - 1] == '\r' || line[len - 1] == ' ' || line[len - 1] == '\t'))
		len--;
	size_t skip = strspn(line, " \t");
	if (skip >= len)
		return;
	char *body = strndup(line + skip, len - skip);
	struct job *j = job_new(body, len - skip);
	if (j->msg && json_is_object(j->msg))
		cancel_inflight(j->msg);
	if (j->is_initialize) {
		json_decref(bridge_mod.init_params);
		json_t *params = json_object_get(j->msg, "params");
		bridge_mod.init_params =
			json_is_object(params) ? json_deep_copy(params) : json_object();
		free(bridge_mod.session_id);
		bridge_mod.session_id = NULL;
		free(bridge_mod.version);
		bridge_mod.version = NULL;
		bridge_mod.state = ST_INITIALIZING;
		send_job(j);
		return;
	}
	if (bridge_mod.state == ST_INITIALIZING || bridge_mod.state == ST_REINIT) {
		enqueue(j);
		return;
	}
	send_job(j);
}

/* --- the loop ----------------------------------------------------------------------- */

static void on_signal(int sig)
{
	bridge_mod.stop = 1;
	int saved = errno;
	if (write(bridge_mod.sig_pipe[1], "x", 1) < 0) {
		/* The loop notices bridge_mod.stop at its next wake-up anyway. */
	}
	errno = saved;
}

static void delete_session(void)
{
	if (!bridge_mod.session_id)
		return;
	CURL *e = curl_easy_init();
	if (!e)
		return;
	struct curl_slist *h = NULL;
	_cleanup_free_ char *sid = xasprintf("Mcp-Session-Id: %s", bridge_mod.session_id);
	h = curl_slist_append(h, sid);
	if (bridge_mod.version) {
		_cleanup_free_ char *pv = xasprintf("MCP-Protocol-Version: %s", bridge_mod.version);
		h = curl_slist_append(h, pv);
	}
	if (bridge_mod.auth_header)
		h = curl_slist_append(h, bridge_mod.auth_header);
	_cleanup_free_ char *url = xasprintf("%s/mcp", bridge_mod.base);
	curl_easy_setopt(e, CURLOPT_URL, url);
	if (bridge_mod.unix_path)
		curl_easy_setopt(e, CURLOPT_UNIX_SOCKET_PATH, bridge_mod.unix_path);
	curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "DELETE");
	curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
	curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)DELETE_TIMEOUT_MS);
	curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
	FILE *sink = fopen("/dev/null", "we");
	if (sink)
		curl_easy_setopt(e, CURLOPT_WRITEDATA, sink);
	curl_easy_perform(e);
	if (sink)
		fclose(sink);
	curl_easy_cleanup(e);
	curl_slist_free_all(h);
}

static int parse_args(int argc, char **argv, const char **url, const char **key)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--url") == 0 && i + 1 < argc) {
			*url = argv[++i];
		} else if (strcmp(argv[i], "--api-key") == 0 && i + 1 < argc) {
			*key = argv[++i];
		} else if (strcmp(argv[i], "--verbose") == 0 || strcmp(argv[i], "-v") == 0) {
			bridge_mod.verbose = true;
		} else {
			cli_fail("mcp: unknown option `%s` (see sandbox mcp --help)", argv[i]);
			return -1;
		}
	}
	return 0;
}

static int setup(const char *url, const char *key)
{
	if (!url || !*url)
		url = getenv("SANDBOX_URL");
	if (!url || !*url)
		url = client_default_url();
	if (!key || !*key)
		key = getenv("SANDBOX_API_KEY");
	if (strncmp(url, "unix:", 5) == 0) {
		if (!url[5])
			return cli_fail("mcp: `unix:` needs a socket path (unix:/path/to.sock)");
		bridge_mod.unix_path = xstrdup(url + 5);
		bridge_mod.base = xstrdup("http://localhost");
	} else if (strncmp(url, "http://", 7) == 0 || strncmp(url, "https://", 8) == 0) {
		bridge_mod.base = xstrdup(url);
		size_t n = strlen(bridge_mod.base);
		while (n && bridge_mod.base[n - 1] == '/')
			bridge_mod.base[--n] = '\0';
	} else {
		return cli_fail("mcp: the daemon's URL must be http://..., https://... or "
				"unix:/path, not `%s`",
				url);
	}
	if (key && *key)
		bridge_mod.auth_header = xasprintf("Authorization: Bearer %s", key);
	return 0;
}

static void drain_multi(void)
{
	CURLMsg *m;
	int left;
	while ((m = curl_multi_info_read(bridge_mod.multi, &left))) {
		if (m->msg != CURLMSG_DONE)
			continue;
		char *priv = NULL;
		curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &priv);
		job_done((struct job *)priv, m->data.result);
	}
}

/* Reads what stdin has; splits it into lines. Returns false at end of input. */
static bool read_stdin(char **buf, size_t *len, bool *discarding)
{
	char chunk[65536];
	ssize_t n = read(STDIN_FILENO, chunk, sizeof(chunk));
	if (n < 0)
		return errno == EINTR || errno == EAGAIN;
	if (n == 0) {
		/* A last line without its newline still counts. */
		if (*len && !*discarding)
			on_line(*buf, *len);
		*len = 0;
		return false;
	}
	size_t start = 0;
	for (size_t i = 0; i < (size_t)n; i++) {
		if (chunk[i] != '\n')
			continue;
		if (*discarding) {
			*discarding = false;
		} else {
			*buf = xrealloc(*buf, *len + (i - start) + 1);
			memcpy(*buf + *len, chunk + start, i - start);
			*len += i - start;
			(*buf)[*len] = '\0';
			on_line(*buf, *len);
		}
		*len = 0;
		start = i + 1;
	}
	size_t rest = (size_t)n - start;
	if (*discarding || !rest)
		return true;
	if (*len + rest > MAX_MESSAGE) {
		logmsg("a message longer than %u bytes was dropped", MAX_MESSAGE);
		json_t *e = json_pack("{s:s, s:n, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", "error",
				      "code", -32700, "message", "Parse error: message too large");
		emit(e);
		json_decref(e);
		*discarding = true;
		*len = 0;
		return true;
	}
	*buf = xrealloc(*buf, *len + rest + 1);
	memcpy(*buf + *len, chunk + start, rest);
	*len += rest;
	return true;
}

int cmd_mcp(int argc, char **argv)
{
	const char *url = NULL, *key = NULL;
	if (parse_args(argc, argv, &url, &key) < 0)
		return 2;
	if (setup(url, key) != 0)
		return 2;
	if (pipe2(bridge_mod.sig_pipe, O_CLOEXEC | O_NONBLOCK) < 0)
		return cli_fail("mcp: pipe: %s", strerror(errno));
	signal(SIGPIPE, SIG_IGN);
	struct sigaction sa = { .sa_handler = on_signal };
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	curl_global_init(CURL_GLOBAL_DEFAULT);
	bridge_mod.multi = curl_multi_init();
	bridge_mod.queue_tail = &bridge_mod.queue;
	bridge_mod.state = ST_NEW;
	if (bridge_mod.verbose)
		logmsg("forwarding to %s/mcp%s%s", bridge_mod.base,
		       bridge_mod.unix_path ? " over " : "",
		       bridge_mod.unix_path ? bridge_mod.unix_path : "");

	char *line = NULL;
	size_t line_len = 0;
	bool discarding = false;
	while (!bridge_mod.stop) {
		/* At the end of input, finish what is in flight, then leave. */
		if (bridge_mod.eof && !bridge_mod.inflight && !bridge_mod.queue)
			break;
		struct curl_waitfd fds[2] = {
			{ .fd = bridge_mod.sig_pipe[0], .events = CURL_WAIT_POLLIN },
			{ .fd = STDIN_FILENO, .events = CURL_WAIT_POLLIN },
		};
		int running = 0;
		curl_multi_perform(bridge_mod.multi, &running);
		drain_multi();
		if (bridge_mod.stop ||
		    (bridge_mod.eof && !bridge_mod.inflight && !bridge_mod.queue))
			break;
		curl_multi_poll(bridge_mod.multi, fds, bridge_mod.eof ? 1 : 2, 1000, NULL);
		if (!bridge_mod.eof && (fds[1].revents & (CURL_WAIT_POLLIN | CURL_WAIT_POLLPRI)))
			bridge_mod.eof = !read_stdin(&line, &line_len, &discarding);
		else if (!bridge_mod.eof && fds[1].revents)
			bridge_mod.eof = !read_stdin(&line, &line_len, &discarding);
	}
	free(line);
	/* Whatever is still running is dropped: the daemon cancels it as its client is gone. */
	while (bridge_mod.inflight) {
		struct job *j = bridge_mod.inflight;
		bridge_mod.inflight = j->next;
		job_free(j);
	}
	while (bridge_mod.queue) {
		struct job *j = bridge_mod.queue;
		bridge_mod.queue = j->next;
		job_free(j);
	}
	delete_session();
	curl_multi_cleanup(bridge_mod.multi);
	json_decref(bridge_mod.init_params);
	free(bridge_mod.session_id);
	free(bridge_mod.version);
	free(bridge_mod.base);
	free(bridge_mod.unix_path);
	free(bridge_mod.auth_header);
	close(bridge_mod.sig_pipe[0]);
	close(bridge_mod.sig_pipe[1]);
	curl_global_cleanup();
	return 0;
}
