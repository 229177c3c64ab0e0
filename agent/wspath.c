/* wspath: path resolution confined to the workspace (see wspath.h). */
#include "wspath.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/cleanup.h"

/* Not every libc ships <linux/openat2.h>; the ABI is fixed, so spell it out. */
#ifndef SYS_openat2
#define SYS_openat2 437
#endif
struct ws_open_how {
	uint64_t flags;
	uint64_t mode;
	uint64_t resolve;
};
#define WS_RESOLVE_NO_MAGICLINKS 0x02
#define WS_RESOLVE_BENEATH       0x08

#define WS_MAX_SYMLINKS          40
#define WS_MAX_DEPTH             256

bool ws_force_walk;
static bool no_openat2;

int ws_init(struct workspace *ws, const char *path, struct err *err)
{
	ws->path = NULL;
	ws->alias = NULL;
	ws->fd = -1;
	_cleanup_free_ char *abs = realpath(path, NULL);
	if (!abs)
		return err_sys(err, errno, "workspace `%s`", path);
	int fd = open(abs, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return err_sys(err, errno, "open workspace `%s`", abs);
	struct stat st, home;
	int hfd = strcmp(abs, WS_HOME) == 0
			  ? -1
			  : open(WS_HOME, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (hfd >= 0 && fstat(fd, &st) == 0 && fstat(hfd, &home) == 0 && st.st_dev == home.st_dev &&
	    st.st_ino == home.st_ino) {
		close(fd);
		fd = hfd;
		ws->alias = xstrdup(WS_HOME);
	} else if (hfd >= 0) {
		close(hfd);
	}
	ws->path = TAKE_PTR(abs);
	ws->fd = fd;
	return 0;
}

void ws_fini(struct workspace *ws)
{
	free(ws->path);
	ws->path = NULL;
	free(ws->alias);
	ws->alias = NULL;
	if (ws->fd >= 0)
		close(ws->fd);
	ws->fd = -1;
}

static int escape(const char *orig, struct err *err)
{
	return err_set(err, WS_ESCAPE, "path `%s` escapes the workspace", orig);
}

int wspath_init(const struct workspace *ws, const char *in, struct wspath *ret, struct err *err)
{
	ret->rel = NULL;
	ret->orig = in;
	if (!*in)
		return err_set(err, EINVAL, "empty path");
	size_t inlen = strlen(in);
	if (inlen >= PATH_MAX)
		return err_set(err, ENAMETOOLONG, "path too long (%zu bytes)", inlen);

	const char *s = in;
	if (*s == '/') {
		size_t wl = strlen(ws->path);
		if (strcmp(ws->path, "/") == 0)
			wl = 0;
		size_t al = ws->alias ? strlen(ws->alias) : 0;
		if (strncmp(s, ws->path, wl) == 0 && (s[wl] == '/' || s[wl] == '\0'))
			s += wl;
		else if (al && strncmp(s, ws->alias, al) == 0 && (s[al] == '/' || s[al] == '\0'))
			s += al;
		else
			return escape(in, err);
	}

	/* Components are copied into out; `starts` remembers where each began so that ".."
	 * can drop the last one. */
	_cleanup_free_ char *out = xmalloc(inlen + 1);
	size_t starts[PATH_MAX / 2 + 1];
	size_t depth = 0, o = 0;
	while (*s) {
		while (*s == '/')
			s++;
		if (!*s)
			break;
		const char *e = strchrnul(s, '/');
		size_t n = (size_t)(e - s);
		if (n == 1 && s[0] == '.') {
			/* nothing */
		} else if (n == 2 && s[0] == '.' && s[1] == '.') {
			if (depth == 0)
				return escape(in, err);
			o = starts[--depth];
		} else {
			if (n > NAME_MAX)
				return err_set(err, ENAMETOOLONG,
					       "path `%s`: a component is too long", in);
			size_t st = o;
			if (o)
				out[o++] = '/';
			starts[depth++] = st;
			memcpy(out + o, s, n);
			o += n;
		}
		s = e;
	}
	out[o] = '\0';
	ret->rel = TAKE_PTR(out);
	return 0;
}

void wspath_fini(struct wspath *p)
{
	free(p->rel);
	p->rel = NULL;
}

static int map_open_error(const struct wspath *p, int e, struct err *err)
{
	if (e == EXDEV)
		return escape(p->orig, err);
	const char *shown = *p->rel ? p->orig : ".";
	if (e == ELOOP)
		return err_set(err, ELOOP, "`%s`: too many levels of symbolic links", shown);
	return err_sys(err, e, "`%s`", shown);
}

/* The user-space walk: each component is opened with O_NOFOLLOW relative to the directory
 * before it; symlinks are expanded by hand and ".." pops a stack of directories, so nothing
 * can climb above the workspace descriptor.
 *
 * One function on purpose: the directory stack, the pending-path buffer and the symlink
 * budget are one state machine, and every exit must close the same stack; split up, each
 * piece would take all of that state as arguments and the invariant would be spread thin. */
static int walk(const struct workspace *ws, const char *rel, int flags, mode_t mode)
{
	int stack[WS_MAX_DEPTH];
	int depth = 0;
	int links = 0;
	int ret;
	char *pending = xstrdup(*rel ? rel : ".");
	char *cur = pending;

	stack[0] = ws->fd;
#define TOP (stack[depth])
	for (;;) {
		while (*cur == '/')
			cur++;
		char *e = strchrnul(cur, '/');
		bool last = true;
		for (char *q = e; *q; q++)
			if (*q != '/') {
				last = false;
				break;
			}
		char save = *e;
		*e = '\0';
		const char *c = *cur ? cur : ".";

		if (strcmp(c, "..") == 0) {
			if (depth == 0) {
				ret = -EXDEV;
				goto out;
			}
			close(stack[depth--]);
			c = ".";
			if (!last) {
				*e = save;
				cur = e;
				continue;
			}
		}
		if (strcmp(c, ".") == 0 && !last) {
			*e = save;
			cur = e;
			continue;
		}

		int fd;
		if (last)
			fd = openat(TOP, c, flags | O_NOFOLLOW | O_CLOEXEC, mode);
		else
			fd = openat(TOP, c, O_PATH | O_NOFOLLOW | O_CLOEXEC);
		int oe = errno;
		struct stat st;
		bool is_link = false;
		if (fd >= 0 && (!last || (flags & O_PATH))) {
			if (fstat(fd, &st) < 0) {
				ret = -errno;
				close(fd);
				goto out;
			}
			is_link = S_ISLNK(st.st_mode);
		} else if (fd < 0 && last && (oe == ELOOP || oe == ENOTDIR)) {
			/* O_NOFOLLOW on a symlink fails with ELOOP (ENOTDIR with O_DIRECTORY):
			 * find out whether it is one, then expand it. */
			fd = openat(TOP, c, O_PATH | O_NOFOLLOW | O_CLOEXEC);
			if (fd < 0 || fstat(fd, &st) < 0 || !S_ISLNK(st.st_mode)) {
				if (fd >= 0)
					close(fd);
				ret = -oe;
				goto out;
			}
			if (flags & O_NOFOLLOW) {
				close(fd);
				ret = -oe;
				goto out;
			}
			is_link = true;
		}
		if (fd < 0) {
			ret = -oe;
			goto out;
		}
		if (is_link && (!last || !(flags & O_NOFOLLOW))) {
			char target[PATH_MAX];
			ssize_t n = readlinkat(fd, "", target, sizeof(target) - 1);
			close(fd);
			if (n < 0) {
				ret = -errno;
				goto out;
			}
			target[n] = '\0';
			if (++links > WS_MAX_SYMLINKS) {
				ret = -ELOOP;
				goto out;
			}
			if (target[0] == '/' || n == 0) {
				ret = n == 0 ? -ENOENT : -EXDEV;
				goto out;
			}
			*e = save;
			char *rest = xasprintf("%s%s", target, e);
			free(pending);
			pending = cur = rest;
			continue;
		}
		if (last) {
			ret = fd;
			goto out;
		}
		if (!S_ISDIR(st.st_mode)) {
			close(fd);
			ret = -ENOTDIR;
			goto out;
		}
		if (depth + 1 >= WS_MAX_DEPTH) {
			close(fd);
			ret = -ENAMETOOLONG;
			goto out;
		}
		stack[++depth] = fd;
		*e = save;
		cur = e;
	}
#undef TOP
out:
	while (depth > 0)
		close(stack[depth--]);
	free(pending);
	return ret;
}

static int open_beneath(const struct workspace *ws, const char *rel, int flags, mode_t mode)
{
	if (!ws_force_walk && !no_openat2) {
		struct ws_open_how how = {
			.flags = (uint64_t)(flags | O_CLOEXEC),
			.mode = (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? mode : 0,
			.resolve = WS_RESOLVE_BENEATH | WS_RESOLVE_NO_MAGICLINKS,
		};
		for (int tries = 0; tries < 16; tries++) {
			long fd = syscall(SYS_openat2, ws->fd, *rel ? rel : ".", &how, sizeof(how));
			if (fd >= 0)
				return (int)fd;
			/* EAGAIN: a concurrent rename made ".." ambiguous; the kernel asks to
			 * retry. */
			if (errno != EAGAIN)
				break;
		}
		if (errno != ENOSYS)
			return -errno;
		no_openat2 = true;
	}
	return walk(ws, rel, flags, mode);
}

int ws_open(const struct workspace *ws, const struct wspath *p, int flags, mode_t mode,
	    struct err *err)
{
	int fd = open_beneath(ws, p->rel, flags, mode);
	if (fd < 0)
		return map_open_error(p, -fd, err);
	return fd;
}

int ws_open_parent(const struct workspace *ws, const struct wspath *p, bool mkparents,
		   const char **ret_base, struct err *err)
{
	if (!*p->rel)
		return err_set(err, EINVAL, "`%s` is the workspace root", p->orig);
	char *slash = strrchr(p->rel, '/');
	size_t plen = slash ? (size_t)(slash - p->rel) : 0;
	_cleanup_free_ char *parent = xmalloc(plen + 1);
	memcpy(parent, p->rel, plen);
	parent[plen] = '\0';
	*ret_base = slash ? slash + 1 : p->rel;

	int fd = open_beneath(ws, parent, O_PATH | O_DIRECTORY, 0);
	if (fd >= 0)
		return fd;
	if (fd != -ENOENT || !mkparents)
		return map_open_error(p, -fd, err);

	/* Create what is missing, one prefix at a time, each resolved from the root again so
	 * that symlinks among the existing parents are still confined. */
	for (size_t i = 1; i <= plen; i++) {
		if (i < plen && parent[i] != '/')
			continue;
		char save = parent[i];
		parent[i] = '\0';
		int cfd = open_beneath(ws, parent, O_PATH | O_DIRECTORY, 0);
		if (cfd == -ENOENT) {
			char *ls = strrchr(parent, '/');
			const char *name = ls ? ls + 1 : parent;
			if (ls)
				*ls = '\0';
			int pfd = open_beneath(ws, ls ? parent : "", O_PATH | O_DIRECTORY, 0);
			if (ls)
				*ls = '/';
			if (pfd < 0) {
				parent[i] = save;
				return map_open_error(p, -pfd, err);
			}
			int r = mkdirat(pfd, name, 0755);
			int e = errno;
			close(pfd);
			if (r < 0 && e != EEXIST) {
				int ret = err_sys(err, e, "create directory `%s`", parent);
				parent[i] = save;
				return ret;
			}
			cfd = open_beneath(ws, parent, O_PATH | O_DIRECTORY, 0);
		}
		parent[i] = save;
		if (cfd < 0)
			return map_open_error(p, -cfd, err);
		if (i == plen)
			return cfd;
		close(cfd);
	}
	return err_set(err, EIO, "`%s`: cannot resolve its directory", p->orig);
}
