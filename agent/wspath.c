/* wspath: path resolution confined to the workspace (see wspath.h). */
#include "wspath.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <sys/statfs.h>
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
#define WS_RESOLVE_IN_ROOT       0x10
#ifndef PROC_SUPER_MAGIC
#define PROC_SUPER_MAGIC 0x9fa0
#endif

#define WS_MAX_SYMLINKS 40
#define WS_MAX_DEPTH    256

bool ws_force_walk;
static bool no_openat2;

int ws_init(struct workspace *ws, const char *path, struct err *err)
{
	ws->path = NULL;
	ws->alias = NULL;
	ws->fd = -1;
	ws->in_root = false;
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

int ws_init_root(struct workspace *ws, struct err *err)
{
	ws->alias = NULL;
	ws->in_root = true;
	ws->fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (ws->fd < 0) {
		ws->path = NULL;
		return err_sys(err, errno, "open the root");
	}
	ws->path = xstrdup("/");
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
			if (depth == 0 && ws->in_root)
				; /* the root's parent is the root */
			else if (depth == 0)
				return escape(in, err);
			else
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
			if (depth == 0 && !ws->in_root) {
				ret = -EXDEV;
				goto out;
			}
			if (depth > 0)
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
			if (n == 0 || (target[0] == '/' && !ws->in_root)) {
				ret = n == 0 ? -ENOENT : -EXDEV;
				goto out;
			}
			/* Within the root, an absolute target starts over from it. */
			if (target[0] == '/')
				while (depth > 0)
					close(stack[depth--]);
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
			.resolve = (ws->in_root ? WS_RESOLVE_IN_ROOT : WS_RESOLVE_BENEATH) |
				   WS_RESOLVE_NO_MAGICLINKS,
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

/* Whether fd is one of the agent's own /proc entries (its environment, memory, descriptors):
 * reachable by a path of the sandbox's (/proc/self, /proc/1, a symlink to either), and not
 * the sandbox's to read through the agent, which would read them as itself. */
static bool agent_proc_entry(int fd)
{
	struct statfs sf;
	if (fstatfs(fd, &sf) < 0 || sf.f_type != PROC_SUPER_MAGIC)
		return false;
	char link[64], target[PATH_MAX];
	snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
	ssize_t n = readlink(link, target, sizeof(target) - 1);
	if (n < 0)
		return true; /* cannot tell: refused */
	target[n] = '\0';
	char mine[32];
	int ml = snprintf(mine, sizeof(mine), "/proc/%d", (int)getpid());
	return strncmp(target, mine, (size_t)ml) == 0 && (target[ml] == '\0' || target[ml] == '/');
}

int ws_open(const struct workspace *ws, const struct wspath *p, int flags, mode_t mode,
	    struct err *err)
{
	int fd = open_beneath(ws, p->rel, flags, mode);
	if (fd < 0)
		return map_open_error(p, -fd, err);
	if (ws->in_root && agent_proc_entry(fd)) {
		close(fd);
		return err_set(err, EACCES, "`%s`: permission denied (the sandbox agent's own)",
			       p->orig);
	}
	return fd;
}

int ws_mkdirat(const struct workspace *ws, int dfd, const char *name, mode_t mode)
{
	if (!ws->in_root)
		return mkdirat(dfd, name, mode);
	/* setfsuid answers with the identity before; asked for -1 it changes nothing. */
	uid_t uid = (uid_t)setfsuid((uid_t)-1);
	gid_t gid = (gid_t)setfsgid((gid_t)-1);
	setfsuid(0);
	setfsgid(0);
	int r = mkdirat(dfd, name, mode);
	int e = errno;
	if (r == 0) {
		/* Through a descriptor of a directory: whatever a process of the sandbox puts at
		 * that name meanwhile, nothing but a directory is given away. */
		int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 || fchown(fd, uid, gid) < 0) {
			e = errno;
			unlinkat(dfd, name, AT_REMOVEDIR);
			r = -1;
		}
		if (fd >= 0)
			close(fd);
	}
	setfsuid(uid);
	setfsgid(gid);
	errno = e;
	return r;
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
			int r = ws_mkdirat(ws, pfd, name, 0755);
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
