#include "cluster/etcd.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "util/cleanup.h"
#include "util/text.h"

#define MAX_ENDPOINTS 16

struct etcd_client {
	char *endpoints[MAX_ENDPOINTS];
	size_t nendpoints, current;
	long timeout_ms;
	char *user, *password, *ca, *cert, *key;
	char *token; /* the auth token, once authenticated */
	const atomic_bool *stop;
	const atomic_bool *restart;
	CURL *h; /* kept between calls: its connection is reused */
};

static void strfree(char **s)
{
	free(*s);
	*s = NULL;
}

static char *dup_or_null(const char *s)
{
	return s && *s ? xstrdup(s) : NULL;
}

int etcd_new(const struct etcd_opts *o, struct etcd_client **ret, struct err *err)
{
	if (!o->endpoints || !*o->endpoints)
		return err_set(err, EINVAL, "no etcd endpoint given");
	struct etcd_client *c = xcalloc(1, sizeof(*c));
	const char *p = o->endpoints;
	while (*p) {
		size_t len = strcspn(p, ", ");
		if (len) {
			_cleanup_free_ char *e = strndup(p, len);
			if (!e)
				abort();
			size_t el = len;
			while (el && e[el - 1] == '/')
				e[--el] = '\0';
			bool ok = (!strncmp(e, "http://", 7) && e[7]) ||
				  (!strncmp(e, "https://", 8) && e[8]);
			if (!ok || strpbrk(e, " \t\r\n?#") || c->nendpoints == MAX_ENDPOINTS) {
				etcd_free(c);
				if (ok)
					return err_set(err, EINVAL, "at most %d etcd endpoints",
						       MAX_ENDPOINTS);
				return err_set(
					err, EINVAL,
					"etcd endpoint `%.100s` is not an http:// or https:// "
					"URL",
					e);
			}
			c->endpoints[c->nendpoints++] = TAKE_PTR(e);
		}
		p += len;
		p += strspn(p, ", ");
	}
	if (!c->nendpoints) {
		etcd_free(c);
		return err_set(err, EINVAL, "no etcd endpoint given");
	}
	c->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 2000;
	c->user = dup_or_null(o->user);
	c->password = dup_or_null(o->password);
	c->ca = dup_or_null(o->ca);
	c->cert = dup_or_null(o->cert);
	c->key = dup_or_null(o->key);
	*ret = c;
	return 0;
}

struct etcd_client *etcd_free(struct etcd_client *c)
{
	if (!c)
		return NULL;
	for (size_t i = 0; i < c->nendpoints; i++)
		free(c->endpoints[i]);
	free(c->user);
	if (c->password) {
		explicit_bzero(c->password, strlen(c->password));
		free(c->password);
	}
	free(c->ca);
	free(c->cert);
	free(c->key);
	free(c->token);
	if (c->h)
		curl_easy_cleanup(c->h);
	free(c);
	return NULL;
}

void etcd_set_stop(struct etcd_client *c, const atomic_bool *stop)
{
	c->stop = stop;
}

void etcd_set_restart(struct etcd_client *c, const atomic_bool *restart)
{
	c->restart = restart;
}

const char *etcd_endpoint(const struct etcd_client *c)
{
	return c->endpoints[c->current];
}

void etcd_kv_clear(struct etcd_kv *kv)
{
	if (!kv)
		return;
	free(kv->key);
	free(kv->value);
	*kv = (struct etcd_kv){ 0 };
}

void etcd_kvs_clear(struct etcd_kvs *kvs)
{
	if (!kvs)
		return;
	for (size_t i = 0; i < kvs->n; i++)
		etcd_kv_clear(&kvs->v[i]);
	free(kvs->v);
	*kvs = (struct etcd_kvs){ 0 };
}

/* --- the wire's JSON ---------------------------------------------------------------- */

/* An int64 the gateway sends as a string ("42") or, at times, a number; absent is 0. */
static int get_i64(const json_t *o, const char *name, int64_t *ret)
{
	const json_t *v = json_object_get(o, name);
	*ret = 0;
	if (!v)
		return 0;
	if (json_is_integer(v)) {
		*ret = json_integer_value(v);
		return 0;
	}
	const char *s = json_string_value(v);
	if (!s || !*s || strlen(s) > 20)
		return -1;
	char *end;
	errno = 0;
	long long x = strtoll(s, &end, 10);
	if (errno || *end)
		return -1;
	*ret = x;
	return 0;
}

static char *b64(const char *s, size_t len)
{
	return base64_encode((const uint8_t *)s, len, NULL);
}

/* A base64 field into a NUL-terminated string (absent: ""). */
static int get_b64(const json_t *o, const char *name, char **ret, size_t *ret_len)
{
	const json_t *v = json_object_get(o, name);
	if (!v) {
		*ret = xstrdup("");
		if (ret_len)
			*ret_len = 0;
		return 0;
	}
	const char *s = json_string_value(v);
	uint8_t *out;
	size_t outlen;
	if (!s || base64_decode(s, strlen(s), &out, &outlen) < 0)
		return -1;
	char *z = xmalloc(outlen + 1);
	memcpy(z, out, outlen);
	z[outlen] = '\0';
	free(out);
	*ret = z;
	if (ret_len)
		*ret_len = outlen;
	return 0;
}

static int parse_kv(const json_t *j, struct etcd_kv *kv)
{
	*kv = (struct etcd_kv){ 0 };
	if (!json_is_object(j) || get_b64(j, "key", &kv->key, NULL) < 0 ||
	    get_b64(j, "value", &kv->value, &kv->value_len) < 0 ||
	    get_i64(j, "create_revision", &kv->create_rev) < 0 ||
	    get_i64(j, "mod_revision", &kv->mod_rev) < 0 || get_i64(j, "lease", &kv->lease) < 0) {
		etcd_kv_clear(kv);
		return -1;
	}
	return 0;
}

static int header_revision(const json_t *reply, int64_t *ret)
{
	return get_i64(json_object_get(reply, "header"), "revision", ret);
}

static int parse_kvs(const json_t *reply, struct etcd_kvs *ret)
{
	*ret = (struct etcd_kvs){ 0 };
	if (header_revision(reply, &ret->revision) < 0)
		return -1;
	const json_t *arr = json_object_get(reply, "kvs");
	if (!arr)
		return 0;
	if (!json_is_array(arr))
		return -1;
	size_t n = json_array_size(arr);
	ret->v = xcalloc(n ? n : 1, sizeof(*ret->v));
	for (size_t i = 0; i < n; i++) {
		if (parse_kv(json_array_get(arr, i), &ret->v[i]) < 0) {
			etcd_kvs_clear(ret);
			return -1;
		}
		ret->n++;
	}
	return 0;
}

int etcd_parse_range(const char *text, size_t len, struct etcd_kvs *ret, struct err *err)
{
	json_error_t jerr;
	json_auto_t *j = json_loadb(text, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(j) || parse_kvs(j, ret) < 0)
		return err_set(err, EBADMSG, "etcd: malformed range reply");
	return 0;
}

/* --- calls ---------------------------------------------------------------------------- */

struct reply {
	char *data;
	size_t len;
	bool over;
};

static size_t collect(char *p, size_t size, size_t n, void *arg)
{
	struct reply *r = arg;
	size_t len = size * n;
	if (r->len + len > ETCD_MAX_REPLY) {
		r->over = true;
		return 0;
	}
	r->data = xrealloc(r->data, r->len + len + 1);
	memcpy(r->data + r->len, p, len);
	r->len += len;
	r->data[r->len] = '\0';
	return len;
}

static int on_progress(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	struct etcd_client *c = arg;
	return (c->stop && atomic_load(c->stop)) || (c->restart && atomic_load(c->restart)) ? 1 : 0;
}

/* The handle, set up for a POST of `body` to `path` at the current endpoint. */
static CURL *prepare(struct etcd_client *c, const char *path, const char *body,
		     struct curl_slist **hdrs, bool stream)
{
	if (!c->h && !(c->h = curl_easy_init()))
		return NULL;
	CURL *h = c->h;
	curl_easy_reset(h);
	_cleanup_free_ char *url = xasprintf("%s%s", c->endpoints[c->current], path);
	*hdrs = curl_slist_append(NULL, "Content-Type: application/json");
	*hdrs = curl_slist_append(*hdrs, "Expect:");
	if (c->token) {
		_cleanup_free_ char *a = xasprintf("Authorization: %s", c->token);
		*hdrs = curl_slist_append(*hdrs, a);
	}
	/* A member cut off from the quorum keeps a stream open with nothing on it: etcd ends
	 * streams of a member without a leader when they ask it to. */
	if (stream)
		*hdrs = curl_slist_append(*hdrs, "Grpc-Metadata-hasleader: true");
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, *hdrs);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, c->timeout_ms);
	if (!stream)
		curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, c->timeout_ms);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 5L);
	curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 2L);
	curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
	curl_easy_setopt(h, CURLOPT_XFERINFODATA, c);
	if (c->ca)
		curl_easy_setopt(h, CURLOPT_CAINFO, c->ca);
	if (c->cert)
		curl_easy_setopt(h, CURLOPT_SSLCERT, c->cert);
	if (c->key)
		curl_easy_setopt(h, CURLOPT_SSLKEY, c->key);
	return h;
}

/* What a failed transfer means: the endpoint cannot be reached (try the next), or another
 * failure. */
static bool unreachable(CURLcode rc)
{
	return rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
	       rc == CURLE_OPERATION_TIMEDOUT || rc == CURLE_GOT_NOTHING ||
	       rc == CURLE_RECV_ERROR || rc == CURLE_SEND_ERROR || rc == CURLE_SSL_CONNECT_ERROR;
}

/* An error reply's text: {"error": "...", "message": "..."} or {"error": {"message": ...}}. */
static void error_text(const json_t *j, const char *raw, char *out, size_t cap)
{
	const json_t *e = json_object_get(j, "error");
	const char *m = json_string_value(json_object_get(j, "message"));
	if (!m && json_is_object(e))
		m = json_string_value(json_object_get(e, "message"));
	if (!m)
		m = json_string_value(e);
	snprintf(out, cap, "%.300s", m ? m : raw ? raw : "no reason given");
}

static bool token_expired(const char *msg)
{
	return strstr(msg, "invalid auth token") || strstr(msg, "auth token");
}

static int authenticate(struct etcd_client *c, struct err *err);

bool etcd_try_another_member(long status, const char *msg)
{
	/* No leader (a lost quorum): another member may have one. A member going away: its
	 * gateway still answers while the connection to its own server closes (HTTP 408,
	 * "the client connection is closing"; or "transport is closing"). */
	return status == 503 || strstr(msg, "no leader") || strstr(msg, "unavailable") ||
	       strstr(msg, "connection is closing") || strstr(msg, "transport is closing");
}

/* POSTs `body` to `path`, trying each endpoint once; *ret gets the parsed reply. */
static int call(struct etcd_client *c, const char *path, const char *body, json_t **ret,
		struct err *err)
{
	*ret = NULL;
	bool reauthed = false;
	char last[400] = "";
	for (size_t tried = 0; tried < c->nendpoints; tried++) {
		if (c->stop && atomic_load(c->stop))
			return err_set(err, ECANCELED, "etcd: stopping");
		if (c->user && !c->token && strcmp(path, "/v3/auth/authenticate") != 0) {
			int r = authenticate(c, err);
			if (r == -ECONNREFUSED || r == -ETIMEDOUT) {
				snprintf(last, sizeof(last), "%.380s", err->msg);
				c->current = (c->current + 1) % c->nendpoints;
				continue;
			}
			if (r < 0)
				return r;
		}
		struct curl_slist *hdrs = NULL;
		CURL *h = prepare(c, path, body, &hdrs, false);
		if (!h)
			return err_set(err, ENOMEM, "etcd: cannot create a client");
		struct reply r = { 0 };
		curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
		curl_easy_setopt(h, CURLOPT_WRITEDATA, &r);
		CURLcode rc = curl_easy_perform(h);
		long status = 0;
		curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
		curl_slist_free_all(hdrs);
		if (rc == CURLE_ABORTED_BY_CALLBACK) {
			free(r.data);
			return err_set(err, ECANCELED, "etcd: stopping");
		}
		if (r.over) {
			free(r.data);
			return err_set(err, EMSGSIZE, "etcd %s: a reply over %u bytes", path,
				       ETCD_MAX_REPLY);
		}
		if (rc != CURLE_OK && unreachable(rc)) {
			snprintf(last, sizeof(last), "%s: %s", c->endpoints[c->current],
				 curl_easy_strerror(rc));
			free(r.data);
			c->current = (c->current + 1) % c->nendpoints;
			continue;
		}
		if (rc != CURLE_OK) {
			free(r.data);
			return err_set(err, EIO, "etcd %s at %s: %s", path,
				       c->endpoints[c->current], curl_easy_strerror(rc));
		}
		json_error_t jerr;
		json_t *j = r.len ? json_loadb(r.data, r.len, JSON_REJECT_DUPLICATES, &jerr) : NULL;
		if (status != 200 || !json_is_object(j)) {
			char msg[320];
			error_text(j, r.data, msg, sizeof(msg));
			json_decref(j);
			free(r.data);
			if (status == 401 || token_expired(msg)) {
				if (c->user && !reauthed) {
					reauthed = true;
					strfree(&c->token);
					tried--; /* the same endpoint, with a new token */
					continue;
				}
				return err_set(err, EACCES, "etcd %s: %s", path, msg);
			}
			if (etcd_try_another_member(status, msg)) {
				snprintf(last, sizeof(last), "%s: %s", c->endpoints[c->current],
					 msg);
				c->current = (c->current + 1) % c->nendpoints;
				continue;
			}
			return err_set(err, status == 200 ? EBADMSG : EIO, "etcd %s: %s (HTTP %ld)",
				       path, msg, status);
		}
		free(r.data);
		*ret = j;
		return 0;
	}
	return err_set(err, ETIMEDOUT, "etcd cannot be reached (%s)",
		       *last ? last : "no endpoint answered");
}

static int authenticate(struct etcd_client *c, struct err *err)
{
	json_auto_t *req = json_pack("{s:s, s:s}", "name", c->user, "password",
				     c->password ? c->password : "");
	_cleanup_free_ char *body = json_dumps(req, JSON_COMPACT);
	json_auto_t *j = NULL;
	int r = call(c, "/v3/auth/authenticate", body, &j, err);
	if (r < 0)
		return r == -EIO ? err_set(err, EACCES, "etcd: authentication failed: %s", err->msg)
				 : r;
	const char *token = json_string_value(json_object_get(j, "token"));
	if (!token || !*token || strlen(token) > 4096 || strpbrk(token, "\r\n"))
		return err_set(err, EBADMSG, "etcd: authentication gave no usable token");
	free(c->token);
	c->token = xstrdup(token);
	return 0;
}

static char *range_end(const char *key)
{
	size_t n = strlen(key);
	char *e = xstrdup(key);
	/* The smallest key greater than every key with this prefix: its last byte below 0xff,
	 * plus one, the rest cut. A prefix of only 0xff bytes has no end: "\0" means "to the
	 * end of the keyspace". */
	while (n > 0) {
		unsigned char ch = (unsigned char)e[n - 1];
		if (ch < 0xff) {
			e[n - 1] = (char)(ch + 1);
			e[n] = '\0';
			return e;
		}
		n--;
	}
	free(e);
	return xstrdup("");
}

/* {"key": b64(key), "range_end": b64(end)} for a prefix. */
static json_t *key_json(const char *key, bool prefix)
{
	_cleanup_free_ char *k = b64(key, strlen(key));
	json_t *j = json_pack("{s:s}", "key", k);
	if (prefix) {
		_cleanup_free_ char *end = range_end(key);
		_cleanup_free_ char *e = *end ? b64(end, strlen(end)) : xstrdup("AA==");
		json_object_set_new(j, "range_end", json_string(e));
	}
	return j;
}

static int call_json(struct etcd_client *c, const char *path, json_t *req, json_t **ret,
		     struct err *err)
{
	_cleanup_free_ char *body = json_dumps(req, JSON_COMPACT);
	return call(c, path, body, ret, err);
}

int etcd_get(struct etcd_client *c, const char *key, bool prefix, struct etcd_kvs *ret,
	     struct err *err)
{
	json_auto_t *req = key_json(key, prefix);
	json_auto_t *j = NULL;
	int r = call_json(c, "/v3/kv/range", req, &j, err);
	if (r < 0)
		return r;
	if (parse_kvs(j, ret) < 0)
		return err_set(err, EBADMSG, "etcd: malformed range reply");
	return 0;
}

static json_t *put_json(const char *key, const char *value, size_t len, int64_t lease)
{
	_cleanup_free_ char *k = b64(key, strlen(key));
	_cleanup_free_ char *v = b64(value, len);
	json_t *j = json_pack("{s:s, s:s}", "key", k, "value", v);
	if (lease) {
		char id[24];
		snprintf(id, sizeof(id), "%" PRId64, lease);
		json_object_set_new(j, "lease", json_string(id));
	}
	return j;
}

int etcd_put(struct etcd_client *c, const char *key, const char *value, size_t len, int64_t lease,
	     int64_t *ret_rev, struct err *err)
{
	json_auto_t *req = put_json(key, value, len, lease);
	json_auto_t *j = NULL;
	int r = call_json(c, "/v3/kv/put", req, &j, err);
	if (r < 0)
		return r;
	int64_t rev;
	if (header_revision(j, &rev) < 0)
		return err_set(err, EBADMSG, "etcd: malformed put reply");
	if (ret_rev)
		*ret_rev = rev;
	return 0;
}

int etcd_delete(struct etcd_client *c, const char *key, bool prefix, int64_t *ret_deleted,
		struct err *err)
{
	json_auto_t *req = key_json(key, prefix);
	json_auto_t *j = NULL;
	int r = call_json(c, "/v3/kv/deleterange", req, &j, err);
	if (r < 0)
		return r;
	int64_t n;
	if (get_i64(j, "deleted", &n) < 0)
		return err_set(err, EBADMSG, "etcd: malformed delete reply");
	if (ret_deleted)
		*ret_deleted = n;
	return 0;
}

/* A transaction's "succeeded" (absent when false, as the gateway leaves out false). */
static int txn(struct etcd_client *c, json_t *req, bool *ret_ok, json_t **ret, struct err *err)
{
	int r = call_json(c, "/v3/kv/txn", req, ret, err);
	if (r < 0)
		return r;
	const json_t *ok = json_object_get(*ret, "succeeded");
	if (ok && !json_is_boolean(ok)) {
		json_decref(*ret);
		*ret = NULL;
		return err_set(err, EBADMSG, "etcd: malformed transaction reply");
	}
	*ret_ok = json_is_true(ok);
	return 0;
}

/* The key a failed transaction's range (its first failure response) found, in *out: empty
 * when there was none. */
static int failed_txn_existing(const json_t *j, struct etcd_kv *out, struct err *err)
{
	const json_t *resp = json_array_get(json_object_get(j, "responses"), 0);
	struct etcd_kvs kvs;
	if (parse_kvs(json_object_get(resp, "response_range"), &kvs) < 0)
		return err_set(err, EBADMSG, "etcd: malformed transaction reply");
	*out = (struct etcd_kv){ 0 };
	if (kvs.n) {
		*out = kvs.v[0];
		kvs.v[0] = (struct etcd_kv){ 0 };
	}
	etcd_kvs_clear(&kvs);
	return 0;
}

int etcd_create(struct etcd_client *c, const char *key, const char *value, size_t len,
		int64_t lease, bool *ret_created, struct etcd_kv *ret_existing, int64_t *ret_rev,
		struct err *err)
{
	_cleanup_free_ char *k = b64(key, strlen(key));
	json_auto_t *req =
		json_pack("{s:[{s:s, s:s, s:s, s:s}], s:[{s:o}], s:[{s:{s:s}}]}", "compare", "key",
			  k, "result", "EQUAL", "target", "CREATE", "create_revision", "0",
			  "success", "request_put", put_json(key, value, len, lease), "failure",
			  "request_range", "key", k);
	json_auto_t *j = NULL;
	bool ok;
	int r = txn(c, req, &ok, &j, err);
	if (r < 0)
		return r;
	*ret_created = ok;
	if (ret_rev && header_revision(j, ret_rev) < 0)
		return err_set(err, EBADMSG, "etcd: malformed transaction reply");
	return ok || !ret_existing ? 0 : failed_txn_existing(j, ret_existing, err);
}

int etcd_put_if(struct etcd_client *c, const char *key, const char *value, size_t len,
		const struct etcd_cmp *cmps, size_t ncmps, bool *ret_ok, int64_t *ret_rev,
		struct etcd_kv *ret_existing, struct err *err)
{
	json_t *compare = json_array();
	for (size_t i = 0; i < ncmps; i++) {
		_cleanup_free_ char *k = b64(cmps[i].key, strlen(cmps[i].key));
		char rev[24];
		snprintf(rev, sizeof(rev), "%" PRId64, cmps[i].rev);
		json_array_append_new(
			compare, json_pack("{s:s, s:s, s:s, s:s}", "key", k, "result", "EQUAL",
					   "target", cmps[i].mod ? "MOD" : "CREATE",
					   cmps[i].mod ? "mod_revision" : "create_revision", rev));
	}
	_cleanup_free_ char *k = b64(key, strlen(key));
	json_t *op = value ? json_pack("{s:o}", "request_put", put_json(key, value, len, 0))
			   : json_pack("{s:{s:s}}", "request_delete_range", "key", k);
	json_auto_t *req = json_pack("{s:o, s:[o], s:[{s:{s:s}}]}", "compare", compare, "success",
				     op, "failure", "request_range", "key", k);
	json_auto_t *j = NULL;
	bool ok;
	int r = txn(c, req, &ok, &j, err);
	if (r < 0)
		return r;
	*ret_ok = ok;
	if (ok && ret_rev && header_revision(j, ret_rev) < 0)
		return err_set(err, EBADMSG, "etcd: malformed transaction reply");
	return ok || !ret_existing ? 0 : failed_txn_existing(j, ret_existing, err);
}

int etcd_delete_if(struct etcd_client *c, const char *key, int64_t mod_rev, bool *ret_deleted,
		   struct err *err)
{
	_cleanup_free_ char *k = b64(key, strlen(key));
	char rev[24];
	snprintf(rev, sizeof(rev), "%" PRId64, mod_rev);
	json_auto_t *req = json_pack("{s:[{s:s, s:s, s:s, s:s}], s:[{s:{s:s}}]}", "compare", "key",
				     k, "result", "EQUAL", "target", "MOD", "mod_revision", rev,
				     "success", "request_delete_range", "key", k);
	json_auto_t *j = NULL;
	return txn(c, req, ret_deleted, &j, err);
}

int etcd_create_pair(struct etcd_client *c, const char *key1, const char *value1, const char *key2,
		     const char *value2, bool *ret_created, struct err *err)
{
	_cleanup_free_ char *k = b64(key1, strlen(key1));
	json_auto_t *req =
		json_pack("{s:[{s:s, s:s, s:s, s:s}], s:[{s:o}, {s:o}]}", "compare", "key", k,
			  "result", "EQUAL", "target", "CREATE", "create_revision", "0", "success",
			  "request_put", put_json(key1, value1, strlen(value1), 0), "request_put",
			  put_json(key2, value2, strlen(value2), 0));
	json_auto_t *j = NULL;
	return txn(c, req, ret_created, &j, err);
}

int etcd_lease_grant(struct etcd_client *c, int64_t ttl_s, int64_t *ret_id, struct err *err)
{
	char ttl[24];
	snprintf(ttl, sizeof(ttl), "%" PRId64, ttl_s);
	json_auto_t *req = json_pack("{s:s}", "TTL", ttl);
	json_auto_t *j = NULL;
	int r = call_json(c, "/v3/lease/grant", req, &j, err);
	if (r < 0)
		return r;
	int64_t id, got;
	if (get_i64(j, "ID", &id) < 0 || get_i64(j, "TTL", &got) < 0 || id == 0)
		return err_set(err, EBADMSG, "etcd: malformed lease grant reply");
	*ret_id = id;
	return 0;
}

int etcd_lease_keepalive(struct etcd_client *c, int64_t id, int64_t *ret_ttl, struct err *err)
{
	char s[24];
	snprintf(s, sizeof(s), "%" PRId64, id);
	json_auto_t *req = json_pack("{s:s}", "ID", s);
	json_auto_t *j = NULL;
	int r = call_json(c, "/v3/lease/keepalive", req, &j, err);
	if (r < 0)
		return r;
	/* A stream's message: {"result": {...}} or {"error": {...}}. */
	const json_t *res = json_object_get(j, "result");
	if (!json_is_object(res)) {
		char msg[320];
		error_text(j, NULL, msg, sizeof(msg));
		return err_set(err, EIO, "etcd lease keepalive: %s", msg);
	}
	int64_t ttl;
	if (get_i64(res, "TTL", &ttl) < 0)
		return err_set(err, EBADMSG, "etcd: malformed keepalive reply");
	if (ttl <= 0)
		return err_set(err, ENOENT, "etcd: lease %" PRId64 " has expired", id);
	if (ret_ttl)
		*ret_ttl = ttl;
	return 0;
}

int etcd_lease_revoke(struct etcd_client *c, int64_t id, struct err *err)
{
	char s[24];
	snprintf(s, sizeof(s), "%" PRId64, id);
	json_auto_t *req = json_pack("{s:s}", "ID", s);
	json_auto_t *j = NULL;
	return call_json(c, "/v3/lease/revoke", req, &j, err);
}

/* --- watch ---------------------------------------------------------------------------- */

int etcd_watch_parse_line(const char *line, size_t len, etcd_watch_fn fn, void *arg,
			  int64_t *next_rev, struct err *err)
{
	json_error_t jerr;
	json_auto_t *j = json_loadb(line, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!json_is_object(j))
		return err_set(err, EBADMSG, "etcd watch: malformed message");
	const json_t *res = json_object_get(j, "result");
	if (!json_is_object(res)) {
		char msg[320];
		error_text(j, NULL, msg, sizeof(msg));
		return err_set(err, EIO, "etcd watch: %s", msg);
	}
	int64_t compact;
	if (get_i64(res, "compact_revision", &compact) < 0)
		return err_set(err, EBADMSG, "etcd watch: malformed message");
	if (compact > 0) {
		*next_rev = compact;
		return err_set(err, ESTALE, "etcd watch: revision compacted up to %" PRId64,
			       compact);
	}
	if (json_is_true(json_object_get(res, "canceled"))) {
		const char *why = json_string_value(json_object_get(res, "cancel_reason"));
		return err_set(err, EIO, "etcd watch canceled: %.200s", why ? why : "no reason");
	}
	const json_t *events = json_object_get(res, "events");
	if (events && !json_is_array(events))
		return err_set(err, EBADMSG, "etcd watch: malformed events");
	size_t i;
	const json_t *ev;
	json_array_foreach (events, i, ev) {
		const char *type = json_string_value(json_object_get(ev, "type"));
		if (type && strcmp(type, "PUT") != 0 && strcmp(type, "DELETE") != 0)
			return err_set(err, EBADMSG, "etcd watch: unknown event type");
		struct etcd_kv kv;
		if (parse_kv(json_object_get(ev, "kv"), &kv) < 0)
			return err_set(err, EBADMSG, "etcd watch: malformed event");
		if (kv.mod_rev >= *next_rev)
			*next_rev = kv.mod_rev + 1;
		int stop = fn(type && !strcmp(type, "DELETE") ? ETCD_EVENT_DELETE : ETCD_EVENT_PUT,
			      &kv, arg);
		etcd_kv_clear(&kv);
		if (stop)
			return 1;
	}
	int64_t rev;
	if (header_revision(res, &rev) == 0 && rev >= *next_rev && !events)
		*next_rev = rev + 1; /* a progress notification: nothing before it is left */
	return 0;
}

struct watch_state {
	struct etcd_client *c;
	etcd_watch_fn fn;
	void *arg;
	int64_t *next_rev;
	char *buf;
	size_t len, cap;
	int result; /* 0, 1 (fn asked to end), or a negative errno with err set */
	struct err err;
};

#define WATCH_MAX_LINE (8u << 20)

static size_t watch_data(char *p, size_t size, size_t n, void *arg)
{
	struct watch_state *w = arg;
	size_t len = size * n;
	if (w->result)
		return 0;
	if (w->len + len > WATCH_MAX_LINE) {
		w->result = err_set(&w->err, EMSGSIZE, "etcd watch: a message over %u bytes",
				    WATCH_MAX_LINE);
		return 0;
	}
	if (w->len + len + 1 > w->cap) {
		w->cap = (w->len + len + 1) * 2;
		w->buf = xrealloc(w->buf, w->cap);
	}
	memcpy(w->buf + w->len, p, len);
	w->len += len;
	size_t start = 0;
	for (;;) {
		char *nl = memchr(w->buf + start, '\n', w->len - start);
		if (!nl)
			break;
		size_t l = (size_t)(nl - (w->buf + start));
		if (l) {
			int r = etcd_watch_parse_line(w->buf + start, l, w->fn, w->arg, w->next_rev,
						      &w->err);
			if (r) {
				w->result = r;
				return 0;
			}
		}
		start += l + 1;
	}
	memmove(w->buf, w->buf + start, w->len - start);
	w->len -= start;
	return len;
}

int etcd_watch(struct etcd_client *c, const char *prefix, int64_t start_rev, etcd_watch_fn fn,
	       void *arg, int64_t *next_rev, struct err *err)
{
	*next_rev = start_rev;
	if (c->user && !c->token) {
		int r = authenticate(c, err);
		if (r < 0)
			return r;
	}
	json_auto_t *create = key_json(prefix, true);
	char rev[24];
	snprintf(rev, sizeof(rev), "%" PRId64, start_rev);
	json_object_set_new(create, "start_revision", json_string(rev));
	json_object_set_new(create, "progress_notify", json_true());
	json_auto_t *req = json_pack("{s:O}", "create_request", create);
	_cleanup_free_ char *body = json_dumps(req, JSON_COMPACT);
	struct curl_slist *hdrs = NULL;
	CURL *h = prepare(c, "/v3/watch", body, &hdrs, true);
	if (!h)
		return err_set(err, ENOMEM, "etcd: cannot create a client");
	struct watch_state w = { .c = c, .fn = fn, .arg = arg, .next_rev = next_rev };
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, watch_data);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &w);
	CURLcode rc = curl_easy_perform(h);
	long status = 0;
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(hdrs);
	free(w.buf);
	if (w.result == 1)
		return 0;
	if (w.result < 0) {
		if (w.err.errnum == EIO && token_expired(w.err.msg))
			strfree(&c->token);
		return err_copy(err, &w.err);
	}
	if (rc == CURLE_ABORTED_BY_CALLBACK)
		return err_set(err, ECANCELED, "etcd: stopping");
	/* Ended by etcd or the network: the caller resumes from *next_rev, at the next
	 * endpoint when this one cannot be reached. */
	if (rc != CURLE_OK && unreachable(rc))
		c->current = (c->current + 1) % c->nendpoints;
	if (status == 401)
		strfree(&c->token);
	return err_set(
		err, EPIPE, "etcd watch at %s ended: %s (HTTP %ld)",
		c->endpoints[(c->current + c->nendpoints - (rc != CURLE_OK && unreachable(rc))) %
			     c->nendpoints],
		rc == CURLE_OK ? "the stream closed" : curl_easy_strerror(rc), status);
}
