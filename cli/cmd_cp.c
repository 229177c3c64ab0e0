/* sandbox cp: files and directory trees between this machine and a session, bytes exactly,
 * through the files API (write, read, files). */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "sandbox.h"
#include "util/cleanup.h"
#include "util/text.h"

void cmd_cp_help(void)
{
	printf("usage: sandbox cp LOCAL SESSION:PATH     upload\n"
	       "       sandbox cp SESSION:PATH LOCAL     download (LOCAL - for stdout)\n\n"
	       "Paths in the session are relative to its /workspace. A directory is copied\n"
	       "with everything in it: its contents land in the target directory, made if\n"
	       "missing (like `cp -r SRC/. DST`), with their permission bits. Symlinks and\n"
	       "special files are skipped with a warning; directories with no files in them\n"
	       "are not made in a session.\n");
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

/* dir/name, or name alone when dir is empty or ".". */
static char *join(const char *dir, const char *name)
{
	if (!*dir || strcmp(dir, ".") == 0)
		return xstrdup(name);
	size_t n = strlen(dir);
	return xasprintf("%s%s%s", dir, dir[n - 1] == '/' ? "" : "/", name);
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

/* Like mkdir -p; 0 or -errno. */
static int mkdir_p(const char *path)
{
	_cleanup_free_ char *p = xstrdup(path);
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	if (mkdir(p, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static int upload_file(struct client *c, const char *id, const char *local, const char *rpath,
		       int mode)
{
	_cleanup_free_ char *data = NULL;
	size_t len = 0;
	int r = read_local(local, &data, &len);
	if (r < 0)
		return cli_fail("cannot read `%s`: %s", local, strerror(-r));
	_cleanup_free_ char *b64 = base64_encode((const uint8_t *)data, len, NULL);
	json_t *body =
		json_pack("{s:s, s:s, s:s}", "path", rpath, "content", b64, "encoding", "base64");
	if (mode >= 0)
		json_object_set_new(body, "mode", json_integer(mode));
	_cleanup_free_ char *esc = client_escape(id);
	_cleanup_free_ char *p = xasprintf("/exec/%s/write", esc);
	struct err e;
	int rc = 0;
	if (client_json(c, "POST", p, body, NULL, NULL, &e) < 0)
		rc = cli_fail("cannot write %s:%s: %s", id, rpath, e.msg);
	json_decref(body);
	return rc;
}

static int upload_dir(struct client *c, const char *id, const char *local, const char *rpath)
{
	DIR *d = opendir(local);
	if (!d)
		return cli_fail("cannot read `%s`: %s", local, strerror(errno));
	int rc = 0;
	struct dirent *de;
	while (rc == 0 && (de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		_cleanup_free_ char *lp = xasprintf("%s/%s", local, de->d_name);
		_cleanup_free_ char *rp = join(rpath, de->d_name);
		struct stat st;
		if (lstat(lp, &st) < 0)
			rc = cli_fail("cannot read `%s`: %s", lp, strerror(errno));
		else if (S_ISDIR(st.st_mode))
			rc = upload_dir(c, id, lp, rp);
		else if (S_ISREG(st.st_mode))
			rc = upload_file(c, id, lp, rp, (int)(st.st_mode & 07777));
		else
			fprintf(stderr, "sandbox: skipped `%s`: not a regular file or directory\n",
				lp);
	}
	closedir(d);
	return rc;
}

static int write_local(const char *path, const char *data, size_t len, int mode)
{
	FILE *f = strcmp(path, "-") == 0 ? stdout : fopen(path, "wb");
	if (!f)
		return cli_fail("cannot write `%s`: %s", path, strerror(errno));
	bool ok = fwrite(data, 1, len, f) == len;
	if ((f != stdout ? fclose(f) : fflush(f)) != 0)
		ok = false;
	if (!ok)
		return cli_fail("cannot write `%s`: %s", path, strerror(errno));
	if (mode >= 0 && f != stdout && chmod(path, (mode_t)mode) < 0)
		return cli_fail("cannot set the mode of `%s`: %s", path, strerror(errno));
	return 0;
}

static int download_file(struct client *c, const char *id, const char *rpath, const char *local,
			 int mode)
{
	_cleanup_free_ char *esc = client_escape(id);
	_cleanup_free_ char *q = client_escape(rpath);
	_cleanup_free_ char *p = xasprintf("/exec/%s/read?path=%s", esc, q);
	_cleanup_free_ char *data = NULL;
	size_t len = 0;
	struct err e;
	if (client_bytes(c, p, &data, &len, &e) < 0)
		return cli_fail("%s", e.msg);
	return write_local(local, data, len, mode);
}

/* A listed path must stay below the local target: no "..", not absolute. */
static bool safe_relative(const char *p)
{
	if (!*p || p[0] == '/')
		return false;
	for (const char *s = p; s; s = strchr(s, '/') ? strchr(s, '/') + 1 : NULL)
		if (strncmp(s, "..", 2) == 0 && (s[2] == '/' || s[2] == '\0'))
			return false;
	return true;
}

/* Copies the listing of directory rpath (entries relative to it) into local. */
static int download_dir(struct client *c, const char *id, const char *rpath, json_t *listing,
			const char *local)
{
	if (strcmp(local, "-") == 0)
		return cli_fail("%s:%s is a directory: give a local directory, not -", id, rpath);
	if (json_is_true(json_object_get(listing, "truncated")))
		return cli_fail("%s:%s holds too many files to list at once", id, rpath);
	int r = mkdir_p(local);
	if (r < 0)
		return cli_fail("cannot make `%s`: %s", local, strerror(-r));
	size_t i;
	json_t *f;
	json_array_foreach (json_object_get(listing, "files"), i, f) {
		const char *path = json_string_value(json_object_get(f, "path"));
		const char *type = json_string_value(json_object_get(f, "type"));
		if (!path || !type || !safe_relative(path))
			return cli_fail("the listing of %s:%s has a bad entry", id, rpath);
		_cleanup_free_ char *lp = xasprintf("%s/%s", local, path);
		_cleanup_free_ char *rp = join(rpath, path);
		json_t *mode = json_object_get(f, "mode");
		if (strcmp(type, "dir") == 0) {
			if ((r = mkdir_p(lp)) < 0)
				return cli_fail("cannot make `%s`: %s", lp, strerror(-r));
		} else if (strcmp(type, "file") == 0) {
			_cleanup_free_ char *parent = xstrdup(lp);
			*strrchr(parent, '/') = '\0';
			if ((r = mkdir_p(parent)) < 0)
				return cli_fail("cannot make `%s`: %s", parent, strerror(-r));
			if (download_file(c, id, rp, lp,
					  json_is_integer(mode)
						  ? (int)json_integer_value(mode) & 07777
						  : -1) != 0)
				return 1;
		} else {
			fprintf(stderr, "sandbox: skipped %s:%s: a %s, not a regular file\n", id,
				rp, type);
		}
	}
	return 0;
}

static int download(struct client *c, const char *id, const char *rpath, const char *local)
{
	/* A directory lists; anything else is read as a file (and its error is the one to show). */
	_cleanup_free_ char *esc = client_escape(id);
	_cleanup_free_ char *q = client_escape(*rpath ? rpath : ".");
	_cleanup_free_ char *p = xasprintf("/exec/%s/files?path=%s&recursive=true", esc, q);
	json_t *listing = NULL;
	struct err e;
	int rc;
	if (client_json(c, "GET", p, NULL, &listing, NULL, &e) == 0)
		rc = download_dir(c, id, rpath, listing, local);
	else
		rc = download_file(c, id, rpath, local, -1);
	json_decref(listing);
	return rc;
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
	struct stat st;
	if (remote_spec(argv[2], &id, &rpath)) {
		if (strcmp(argv[1], "-") != 0 && stat(argv[1], &st) == 0 && S_ISDIR(st.st_mode))
			rc = upload_dir(c, id, argv[1], rpath);
		else
			rc = upload_file(c, id, argv[1], rpath, -1);
	} else if (remote_spec(argv[1], &id, &rpath)) {
		rc = download(c, id, rpath, argv[2]);
	} else {
		rc = cli_fail("one side must be SESSION:PATH");
	}
	free(id);
	client_free(c);
	return rc;
}
