#include "driver/firecracker/fc_api.h"

#include <curl/curl.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/time.h"

#define MAX_REPLY (1u << 20)

struct reply {
	char *data;
	size_t len;
};

static size_t collect(char *p, size_t size, size_t n, void *arg)
{
	struct reply *r = arg;
	size_t len = size * n;
	if (r->len + len > MAX_REPLY)
		return 0;
	r->data = xrealloc(r->data, r->len + len + 1);
	memcpy(r->data + r->len, p, len);
	r->len += len;
	r->data[r->len] = '\0';
	return len;
}

int fc_api_call(const char *sock, const char *method, const char *path, json_t *body, json_t **ret,
		long timeout_ms, struct err *err)
{
	CURL *h = curl_easy_init();
	if (!h)
		return err_set(err, ENOMEM, "firecracker API: cannot create a client");
	_cleanup_free_ char *url = xasprintf("http://localhost%s", path);
	_cleanup_free_ char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	struct reply r = { 0 };
	struct curl_slist *hdrs = NULL;
	hdrs = curl_slist_append(hdrs, "Accept: application/json");
	hdrs = curl_slist_append(hdrs, "Expect:");
	if (text)
		hdrs = curl_slist_append(hdrs, "Content-Type: application/json");
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, sock);
	curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &r);
	if (text) {
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, text);
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(text));
	}
	CURLcode rc = curl_easy_perform(h);
	long status = 0;
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(h);

	int res = 0;
	if (rc != CURLE_OK) {
		res = err_set(err, rc == CURLE_OPERATION_TIMEDOUT ? ETIMEDOUT : ECONNREFUSED,
			      "firecracker API %s %s: %s", method, path, curl_easy_strerror(rc));
	} else if (status < 200 || status >= 300) {
		json_auto_t *j = r.data ? json_loads(r.data, 0, NULL) : NULL;
		const char *fault = json_string_value(json_object_get(j, "fault_message"));
		res = err_set(err, status == 400 ? EINVAL : EIO, "firecracker %s %s: %s (HTTP %ld)",
			      method, path, fault ? fault : (r.data ? r.data : "no reason given"),
			      status);
	} else if (ret) {
		json_error_t jerr;
		*ret = r.len ? json_loads(r.data, 0, &jerr) : json_object();
		if (!*ret)
			res = err_set(err, EBADMSG, "firecracker %s %s: malformed reply: %s",
				      method, path, jerr.text);
	}
	free(r.data);
	return res;
}

int fc_api_wait(const char *sock, long timeout_ms, struct err *err)
{
	struct sockaddr_un sun = { .sun_family = AF_UNIX };
	if (strlen(sock) >= sizeof(sun.sun_path))
		return err_set(err, ENAMETOOLONG, "API socket path `%s` is longer than %zu bytes",
			       sock, sizeof(sun.sun_path) - 1);
	strcpy(sun.sun_path, sock);
	uint64_t deadline = time_deadline(timeout_ms);
	for (;;) {
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return err_sys(err, errno, "socket");
		int r = connect(fd, (struct sockaddr *)&sun, sizeof(sun));
		close(fd);
		if (r == 0)
			return 0;
		if (time_mono_ms() >= deadline)
			return err_set(err, ETIMEDOUT,
				       "firecracker did not open its API socket `%s` within %ld ms",
				       sock, timeout_ms);
		poll(NULL, 0, 5);
	}
}

int fc_version_parse(const char *s, struct fc_version *ret)
{
	if (*s == 'v')
		s++;
	unsigned a, b, c;
	if (sscanf(s, "%u.%u.%u", &a, &b, &c) != 3)
		return -EINVAL;
	*ret = (struct fc_version){ a, b, c };
	return 0;
}

int fc_version_at_least(const struct fc_version *v, unsigned major, unsigned minor, unsigned patch)
{
	if (v->major != major)
		return v->major > major;
	if (v->minor != minor)
		return v->minor > minor;
	return v->patch >= patch;
}

int fc_api_version(const char *sock, struct fc_version *ret, struct err *err)
{
	json_auto_t *j = NULL;
	int r = fc_api_call(sock, "GET", "/version", NULL, &j, 2000, err);
	if (r < 0)
		return r;
	const char *v = json_string_value(json_object_get(j, "firecracker_version"));
	if (!v || fc_version_parse(v, ret) < 0)
		return err_set(err, EBADMSG, "firecracker reported no usable version");
	return 0;
}
