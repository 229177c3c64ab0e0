/* sandbox cp: files between this machine and a session, bytes exactly. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "sandbox.h"
#include "util/cleanup.h"
#include "util/text.h"

void cmd_cp_help(void)
{
	printf("usage: sandbox cp LOCAL SESSION:PATH     upload\n"
	       "       sandbox cp SESSION:PATH LOCAL     download (LOCAL - for stdout)\n\n"
	       "Paths in the session are relative to its /workspace.\n");
}

/* Splits "session:path"; a local path may contain ':' only after a '/'. */
static bool remote_spec(const char *s, char **id, const char **path)
{
	const char *colon = strchr(s, ':');
	const char *slash = strchr(s, '/');
	if (!colon || (slash && slash < colon) || colon == s)
		return false;
	*id = strndup(s, (size_t)(colon - s));
	*path = colon + 1;
	return true;
}

static int read_local(const char *path, char **ret, size_t *len)
{
	FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
	if (!f)
		return -errno;
	size_t cap = 1 << 16, n = 0;
	char *buf = xmalloc(cap);
	size_t r;
	while ((r = fread(buf + n, 1, cap - n, f)) > 0) {
		n += r;
		if (n == cap)
			buf = xrealloc(buf, cap *= 2);
	}
	int e = ferror(f) ? EIO : 0;
	if (f != stdin)
		fclose(f);
	if (e) {
		free(buf);
		return -e;
	}
	*ret = buf;
	*len = n;
	return 0;
}

int cmd_cp(int argc, char **argv)
{
	struct client *c = cli_client(&argc, argv);
	int rc = 0;
	if (argc != 3) {
		cmd_cp_help();
		client_free(c);
		return 2;
	}
	char *id = NULL;
	const char *rpath;
	struct err e;
	if (remote_spec(argv[2], &id, &rpath)) {
		_cleanup_free_ char *data = NULL;
		size_t len = 0;
		int r = read_local(argv[1], &data, &len);
		if (r < 0) {
			rc = cli_fail("cannot read `%s`: %s", argv[1], strerror(-r));
			goto out;
		}
		_cleanup_free_ char *b64 = base64_encode((const uint8_t *)data, len, NULL);
		json_t *body = json_pack("{s:s, s:s, s:s}", "path", rpath, "content", b64,
					 "encoding", "base64");
		_cleanup_free_ char *esc = client_escape(id);
		_cleanup_free_ char *p = xasprintf("/exec/%s/write", esc);
		if (client_json(c, "POST", p, body, NULL, NULL, &e) < 0)
			rc = cli_fail("%s", e.msg);
		json_decref(body);
	} else if (remote_spec(argv[1], &id, &rpath)) {
		_cleanup_free_ char *esc = client_escape(id);
		_cleanup_free_ char *q = client_escape(rpath);
		_cleanup_free_ char *p = xasprintf("/exec/%s/read?path=%s", esc, q);
		_cleanup_free_ char *data = NULL;
		size_t len = 0;
		if (client_bytes(c, p, &data, &len, &e) < 0) {
			rc = cli_fail("%s", e.msg);
			goto out;
		}
		FILE *f = strcmp(argv[2], "-") == 0 ? stdout : fopen(argv[2], "wb");
		if (!f) {
			rc = cli_fail("cannot write `%s`: %s", argv[2], strerror(errno));
			goto out;
		}
		if (fwrite(data, 1, len, f) != len || (f != stdout ? fclose(f) : fflush(f)) != 0)
			rc = cli_fail("cannot write `%s`: %s", argv[2], strerror(errno));
	} else {
		rc = cli_fail("one side must be SESSION:PATH");
	}
out:
	free(id);
	client_free(c);
	return rc;
}
