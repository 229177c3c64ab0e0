#include "sandbox.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "client_internal.h"
#include "util/cleanup.h"

#define DEFAULT_URL "http://127.0.0.1:3000"
#define MAX_REPLY   (256u << 20)

struct client {
	CURL *curl;
	char *base;      /* http://host:port, without a trailing slash */
	char *unix_path; /* set for unix: URLs */
	char *auth;      /* "Authorization: Bearer ..." or NULL */
	const char *const *extra;
	bool (*abort_fn)(void *arg);
	void *abort_arg;
};

struct buf {
	char *data;
	size_t len;
	bool too_big;
};

struct line_state {
	struct buf pending;
	int (*on_line)(json_t *obj, void *arg);
	void *arg;
	bool aborted;
	bool bad_json;
	long status;
	CURL *curl;
	struct buf error_body;
};

static size_t collect(char *p, size_t size, size_t n, void *arg)
{
	struct buf *b = arg;
	size_t len = size * n;
	if (b->len + len > MAX_REPLY) {
		b->too_big = true;
		return 0;
	}
	b->data = xrealloc(b->data, b->len + len + 1);
	memcpy(b->data + b->len, p, len);
	b->len += len;
	b->data[b->len] = '\0';
	return len;
}

const char *client_default_url(void)
{
	struct stat st;
	if (stat(CLIENT_SERVICE_SOCKET, &st) == 0 && S_ISSOCK(st.st_mode))
		return "unix:" CLIENT_SERVICE_SOCKET;
	return DEFAULT_URL;
}

struct client *client_new(const char *url, const char *api_key)
{
	static bool inited;
	if (!inited) {
		curl_global_init(CURL_GLOBAL_DEFAULT);
		inited = true;
	}
	if (!url || !*url)
		url = getenv("SANDBOX_URL");
	if (!url || !*url)
		url = client_default_url();
	if (!api_key)
		api_key = getenv("SANDBOX_API_KEY");
	struct client *c = xcalloc(1, sizeof(*c));
	c->curl = curl_easy_init();
	if (!c->curl)
		abort();
	if (strncmp(url, "unix:", 5) == 0) {
		c->unix_path = xstrdup(url + 5);
		c->base = xstrdup("http://localhost");
	} else {
		c->base = xstrdup(url);
		size_t n = strlen(c->base);
		while (n && c->base[n - 1] == '/')
			c->base[--n] = '\0';
	}
	if (api_key && *api_key)
		c->auth = xasprintf("Authorization: Bearer %s", api_key);
	return c;
}

void client_free(struct client *c)
{
	if (!c)
		return;
	curl_easy_cleanup(c->curl);
	free(c->base);
	free(c->unix_path);
	free(c->auth);
	free(c);
}

struct client *client_dup(const struct client *c)
{
	struct client *d = xcalloc(1, sizeof(*d));
	d->curl = curl_easy_init();
	if (!d->curl)
		abort();
	d->base = xstrdup(c->base);
	d->unix_path = c->unix_path ? xstrdup(c->unix_path) : NULL;
	d->auth = c->auth ? xstrdup(c->auth) : NULL;
	d->extra = c->extra;
	return d;
}

const char *client_url(const struct client *c)
{
	return c->unix_path ? c->unix_path : c->base;
}

const char *client_http_url(const struct client *c)
{
	return c->unix_path ? NULL : c->base;
}

void client_set_abort_check(struct client *c, bool (*fn)(void *arg), void *arg)
{
	c->abort_fn = fn;
	c->abort_arg = arg;
}

static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		       curl_off_t ulnow)
{
	struct client *c = arg;
	return c->abort_fn && c->abort_fn(c->abort_arg) ? 1 : 0;
}

void client_set_headers(struct client *c, const char *const *headers)
{
	c->extra = headers;
}

char *client_escape(const char *s)
{
	char *e = curl_easy_escape(NULL, s, 0);
	char *out = xstrdup(e ? e : "");
	curl_free(e);
	return out;
}

/* Prepares the handle for one request; returns the header list to free. */
static struct curl_slist *prepare(struct client *c, const char *method, const char *path,
				  const char *body, const char *accept)
{
	CURL *h = c->curl;
	curl_easy_reset(h);
	_cleanup_free_ char *url = xasprintf("%s%s", c->base, path);
	curl_easy_setopt(h, CURLOPT_URL, url);
	if (c->unix_path)
		curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, c->unix_path);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
	struct curl_slist *hdrs = NULL;
	_cleanup_free_ char *acc = xasprintf("Accept: %s", accept);
	hdrs = curl_slist_append(hdrs, acc);
	if (c->auth)
		hdrs = curl_slist_append(hdrs, c->auth);
	for (const char *const *x = c->extra; x && *x; x++)
		hdrs = curl_slist_append(hdrs, *x);
	if (body) {
		hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
	} else if (strcmp(method, "GET") != 0) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, "");
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)0);
	}
	hdrs = curl_slist_append(hdrs, "Expect:");
	if (c->abort_fn) {
		curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
		curl_easy_setopt(h, CURLOPT_XFERINFODATA, c);
		curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	}
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	return hdrs;
}

int client_http_error(struct err *err, long status, const char *body, size_t len)
{
	json_t *j = body && len ? json_loadb(body, len, 0, NULL) : NULL;
	const char *msg = json_string_value(json_object_get(j, "error"));
	int errnum = status == 404                    ? ENOENT
		     : status == 401 || status == 403 ? EACCES
		     : status == 429                  ? EAGAIN
		     : status >= 500                  ? EIO
						      : EINVAL;
	int r = err_set(err, errnum, "%s (HTTP %ld)",
			msg ? msg : (body && len ? body : "request failed"), status);
	json_decref(j);
	return r;
}

/* The server's error message from an error reply's body. */
static int http_error(struct err *err, long status, const struct buf *b)
{
	return client_http_error(err, status, b->data, b->len);
}

const char *client_base(const struct client *c)
{
	return c->base;
}

const char *client_unix_path(const struct client *c)
{
	return c->unix_path;
}

const char *client_auth_header(const struct client *c)
{
	return c->auth;
}

char *client_host_header(const struct client *c)
{
	if (c->unix_path)
		return xstrdup("localhost");
	const char *p = strstr(c->base, "://");
	p = p ? p + 3 : c->base;
	size_t n = strcspn(p, "/");
	char *h = xmalloc(n + 1);
	memcpy(h, p, n);
	h[n] = '\0';
	return h;
}

static int transport_error(struct client *c, struct err *err, CURLcode rc)
{
	return err_set(err, ECONNREFUSED, "cannot reach sandboxd at %s: %s", client_url(c),
		       curl_easy_strerror(rc));
}

int client_json(struct client *c, const char *method, const char *path, json_t *body, json_t **ret,
		int *ret_status, struct err *err)
{
	_cleanup_free_ char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	struct curl_slist *hdrs = prepare(c, method, path, text, "application/json");
	struct buf b = { 0 };
	curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, &b);
	CURLcode rc = curl_easy_perform(c->curl);
	curl_slist_free_all(hdrs);
	long status = 0;
	curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &status);
	if (ret_status)
		*ret_status = (int)status;
	int r = 0;
	if (b.too_big)
		r = err_set(err, EFBIG, "reply larger than %u bytes", MAX_REPLY);
	else if (rc != CURLE_OK)
		r = transport_error(c, err, rc);
	else if (status >= 400)
		r = http_error(err, status, &b);
	else if (ret) {
		json_error_t jerr;
		*ret = b.len ? json_loadb(b.data, b.len, 0, &jerr) : json_object();
		if (!*ret)
			r = err_set(err, EBADMSG, "malformed reply from sandboxd: %s", jerr.text);
	}
	free(b.data);
	return r;
}

int client_bytes(struct client *c, const char *path, char **ret, size_t *ret_len, struct err *err)
{
	struct curl_slist *hdrs = prepare(c, "GET", path, NULL, "application/octet-stream");
	struct buf b = { 0 };
	curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, &b);
	CURLcode rc = curl_easy_perform(c->curl);
	curl_slist_free_all(hdrs);
	long status = 0;
	curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &status);
	int r = 0;
	if (b.too_big)
		r = err_set(err, EFBIG, "reply larger than %u bytes", MAX_REPLY);
	else if (rc != CURLE_OK)
		r = transport_error(c, err, rc);
	else if (status >= 400)
		r = http_error(err, status, &b);
	if (r < 0) {
		free(b.data);
		return r;
	}
	*ret = b.data ? b.data : xcalloc(1, 1);
	*ret_len = b.len;
	return 0;
}

int client_post_bytes(struct client *c, const char *path, const void *data, size_t len,
		      json_t **ret, struct err *err)
{
	struct curl_slist *hdrs = prepare(c, "POST", path, NULL, "application/json");
	hdrs = curl_slist_append(hdrs, "Content-Type: application/octet-stream");
	curl_easy_setopt(c->curl, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(c->curl, CURLOPT_POSTFIELDS, len ? data : "");
	curl_easy_setopt(c->curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	struct buf b = { 0 };
	curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, &b);
	CURLcode rc = curl_easy_perform(c->curl);
	curl_slist_free_all(hdrs);
	long status = 0;
	curl_easy_getinfo(c->curl, CURLINFO_RESPONSE_CODE, &status);
	int r = 0;
	if (b.too_big)
		r = err_set(err, EFBIG, "reply larger than %u bytes", MAX_REPLY);
	else if (rc != CURLE_OK)
		r = transport_error(c, err, rc);
	else if (status >= 400)
		r = http_error(err, status, &b);
	else if (ret) {
		*ret = b.len ? json_loadb(b.data, b.len, 0, NULL) : json_object();
		if (!*ret)
			r = err_set(err, EBADMSG, "malformed reply from sandboxd");
	}
	free(b.data);
	return r;
}

static size_t on_stream(char *p, size_t size, size_t n, void *arg)
{
	struct line_state *st = arg;
	size_t len = size * n;
	if (!st->status)
		curl_easy_getinfo(st->curl, CURLINFO_RESPONSE_CODE, &st->status);
	if (st->status >= 400)
		return collect(p, size, n, &st->error_body);
	if (collect(p, size, n, &st->pending) != len)
		return 0;
	char *start = st->pending.data;
	char *nl;
	while ((nl = memchr(start, '\n', st->pending.len - (size_t)(start - st->pending.data)))) {
		*nl = '\0';
		if (*start) {
			json_t *obj = json_loads(start, 0, NULL);
			if (!obj) {
				st->bad_json = true;
				return 0;
			}
			int r = st->on_line(obj, st->arg);
			json_decref(obj);
			if (r < 0) {
				st->aborted = true;
				return 0;
			}
		}
		start = nl + 1;
	}
	size_t rest = st->pending.len - (size_t)(start - st->pending.data);
	memmove(st->pending.data, start, rest);
	st->pending.len = rest;
	return len;
}

int client_ndjson(struct client *c, const char *method, const char *path, json_t *body,
		  int (*on_line)(json_t *obj, void *arg), void *arg, struct err *err)
{
	_cleanup_free_ char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	struct curl_slist *hdrs = prepare(c, method, path, text, "application/x-ndjson");
	struct line_state st = { .on_line = on_line, .arg = arg, .curl = c->curl };
	curl_easy_setopt(c->curl, CURLOPT_WRITEFUNCTION, on_stream);
	curl_easy_setopt(c->curl, CURLOPT_WRITEDATA, &st);
	CURLcode rc = curl_easy_perform(c->curl);
	curl_slist_free_all(hdrs);
	int r = 0;
	if (st.aborted)
		r = err_set(err, ECANCELED, "stopped");
	else if (st.bad_json)
		r = err_set(err, EBADMSG, "malformed line in the stream from sandboxd");
	else if (st.status >= 400)
		r = http_error(err, st.status, &st.error_body);
	else if (rc != CURLE_OK)
		r = transport_error(c, err, rc);
	free(st.pending.data);
	free(st.error_body.data);
	return r;
}
