/* list, stat, mkdir, remove, rename: metadata operations that answer at once.
 *
 * Nothing here follows a symlink found inside the tree being listed or removed: entries are
 * examined with lstat semantics and descended into with O_NOFOLLOW. */
#include "agent.h"

#include <dirent.h>
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <pwd.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/cleanup.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1u << 0) /* <linux/fs.h>; musl's headers lack it */
#endif

#define LIST_MAX_DEPTH   64
#define REMOVE_MAX_DEPTH 256

static const char *type_name(mode_t m)
{
	if (S_ISREG(m))
		return "file";
	if (S_ISDIR(m))
		return "dir";
	if (S_ISLNK(m))
		return "symlink";
	return "other";
}

/* The name the image gives an owner, or its number as text; the last one is kept, as
 * listings ask for the same few again and again. */
static const char *owner_name(uid_t uid, bool group)
{
	static struct {
		bool set;
		unsigned id;
		char name[64];
	} last[2];
	int k = group;
	if (last[k].set && last[k].id == uid)
		return last[k].name;
	char buf[1024];
	const char *name = NULL;
	if (group) {
		struct group gr, *found = NULL;
		if (getgrgid_r((gid_t)uid, &gr, buf, sizeof(buf), &found) == 0 && found)
			name = found->gr_name;
	} else {
		struct passwd pw, *found = NULL;
		if (getpwuid_r(uid, &pw, buf, sizeof(buf), &found) == 0 && found)
			name = found->pw_name;
	}
	if (name && strlen(name) < sizeof(last[k].name))
		snprintf(last[k].name, sizeof(last[k].name), "%s", name);
	else
		snprintf(last[k].name, sizeof(last[k].name), "%u", (unsigned)uid);
	last[k].set = true;
	last[k].id = (unsigned)uid;
	return last[k].name;
}

static void put_stat(struct jw *w, const struct stat *st)
{
	jw_key(w, "type");
	jw_str(w, type_name(st->st_mode));
	jw_key(w, "size");
	jw_int(w, (int64_t)st->st_size);
	jw_key(w, "mode");
	jw_int(w, st->st_mode & 07777);
	jw_key(w, "mtime");
	jw_timespec(w, (int64_t)st->st_mtim.tv_sec, st->st_mtim.tv_nsec);
	jw_key(w, "owner");
	jw_str(w, owner_name(st->st_uid, false));
	jw_key(w, "group");
	jw_str(w, owner_name(st->st_gid, true));
}

/* A symlink's target, as it is written ("target"), after put_stat. */
static void put_link(struct jw *w, int dfd, const char *name, const struct stat *st)
{
	if (!S_ISLNK(st->st_mode))
		return;
	char target[PATH_MAX];
	ssize_t n = readlinkat(dfd, name, target, sizeof(target) - 1);
	if (n < 0)
		return;
	target[n] = '\0';
	jw_key(w, "target");
	jw_str(w, target);
}

static void send_result(struct conn *c, uint32_t ch, struct jw *w)
{
	conn_frame(c, GUEST_RESULT, ch, w->buf, w->len);
	jw_free(w);
}

static const char *shown(const struct wspath *p)
{
	return *p->rel ? p->rel : ".";
}

struct lister {
	struct jw w;
	size_t limit; /* the RESULT must stay under GUEST_MAX_PAYLOAD */
	int64_t max_entries;
	int64_t count;
	bool recursive;
	bool truncated;
};

static int cmp_names(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Reads the names in a directory, sorted so that listings are stable. */
static char **read_names(int dfd, size_t *ret_n)
{
	*ret_n = 0;
	int fd = openat(dfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	DIR *d = fdopendir(fd);
	if (!d) {
		close(fd);
		return NULL;
	}
	char **v = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 64;
			v = xrealloc(v, cap * sizeof(*v));
		}
		v[n++] = xstrdup(de->d_name);
	}
	closedir(d);
	if (n)
		qsort(v, n, sizeof(*v), cmp_names);
	*ret_n = n;
	return v;
}

static void list_dir(struct lister *l, int dfd, const char *prefix, int depth)
{
	size_t n;
	char **names = read_names(dfd, &n);
	for (size_t i = 0; i < n; i++) {
		if (l->truncated)
			break;
		if (l->count >= l->max_entries) {
			l->truncated = true;
			break;
		}
		struct stat st;
		if (fstatat(dfd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue; /* removed meanwhile */
		_cleanup_free_ char *path =
			*prefix ? xasprintf("%s/%s", prefix, names[i]) : xstrdup(names[i]);

		size_t saved_len = l->w.len;
		bool saved_comma = l->w.comma;
		jw_obj_open(&l->w);
		jw_key(&l->w, "path");
		jw_str(&l->w, path);
		jw_key(&l->w, "name");
		jw_str(&l->w, names[i]);
		put_stat(&l->w, &st);
		put_link(&l->w, dfd, names[i], &st);
		jw_obj_close(&l->w);
		if (l->w.len > l->limit) {
			/* Roll the entry back: the reply must fit one frame. */
			l->w.len = saved_len;
			l->w.buf[saved_len] = '\0';
			l->w.comma = saved_comma;
			l->truncated = true;
			break;
		}
		l->count++;

		if (l->recursive && S_ISDIR(st.st_mode)) {
			if (depth + 1 >= LIST_MAX_DEPTH) {
				l->truncated = true;
				continue;
			}
			int sub = openat(dfd, names[i],
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub >= 0) {
				list_dir(l, sub, path, depth + 1);
				close(sub);
			}
		}
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
}

void op_list(struct conn *c, uint32_t ch, const struct req *r)
{
	struct agent *a = c->a;
	struct err e;
	struct wspath wp;
	if (wspath_init(agent_ws(a, r->any_path), r->path, &wp, &e) < 0) {
		conn_error(c, ch, &e);
		return;
	}
	_cleanup_close_ int fd =
		ws_open(agent_ws(a, r->any_path), &wp, O_RDONLY | O_DIRECTORY, 0, &e);
	if (fd < 0) {
		wspath_fini(&wp);
		conn_error(c, ch, &e);
		return;
	}
	struct lister l = {
		.max_entries = r->u.list.max_entries,
		.recursive = r->u.list.recursive,
	};
	jw_init(&l.w);
	jw_obj_open(&l.w);
	jw_key(&l.w, "path");
	jw_str(&l.w, shown(&wp));
	jw_key(&l.w, "entries");
	jw_arr_open(&l.w);
	/* Room for closing the array and the "truncated" member. */
	l.limit = GUEST_MAX_PAYLOAD - 64;
	list_dir(&l, fd, "", 0);
	jw_arr_close(&l.w);
	jw_key(&l.w, "truncated");
	jw_bool(&l.w, l.truncated);
	jw_obj_close(&l.w);
	wspath_fini(&wp);
	send_result(c, ch, &l.w);
}

void op_stat(struct conn *c, uint32_t ch, const struct req *r)
{
	struct agent *a = c->a;
	struct err e;
	struct wspath wp;
	struct stat st;
	const char *base;
	if (wspath_init(agent_ws(a, r->any_path), r->path, &wp, &e) < 0) {
		conn_error(c, ch, &e);
		return;
	}
	_cleanup_close_ int dfd = -1;
	if (!*wp.rel) {
		if (fstat(agent_ws(a, r->any_path)->fd, &st) < 0) {
			err_sys(&e, errno, "stat `.`");
			goto fail;
		}
	} else {
		dfd = ws_open_parent(agent_ws(a, r->any_path), &wp, false, &base, &e);
		if (dfd < 0)
			goto fail;
		if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			err_sys(&e, errno, "stat `%s`", r->path);
			goto fail;
		}
	}
	struct jw w;
	jw_init(&w);
	jw_obj_open(&w);
	jw_key(&w, "path");
	jw_str(&w, shown(&wp));
	put_stat(&w, &st);
	if (dfd >= 0)
		put_link(&w, dfd, base, &st);
	jw_obj_close(&w);
	wspath_fini(&wp);
	send_result(c, ch, &w);
	return;
fail:
	wspath_fini(&wp);
	conn_error(c, ch, &e);
}

static void send_path(struct conn *c, uint32_t ch, const struct wspath *wp)
{
	struct jw w;
	jw_init(&w);
	jw_obj_open(&w);
	jw_key(&w, "path");
	jw_str(&w, shown(wp));
	jw_obj_close(&w);
	send_result(c, ch, &w);
}

void op_mkdir(struct conn *c, uint32_t ch, const struct req *r)
{
	struct agent *a = c->a;
	struct err e;
	struct wspath wp;
	const char *base;
	_cleanup_close_ int dfd = -1;
	bool parents = r->u.mkdir.parents;
	if (wspath_init(agent_ws(a, r->any_path), r->path, &wp, &e) < 0) {
		conn_error(c, ch, &e);
		return;
	}
	if (!*wp.rel) {
		if (!parents) {
			err_set(&e, EEXIST, "`%s` is the workspace root", r->path);
			goto fail;
		}
		goto ok;
	}
	dfd = ws_open_parent(agent_ws(a, r->any_path), &wp, parents, &base, &e);
	if (dfd < 0)
		goto fail;
	if (ws_mkdirat(agent_ws(a, r->any_path), dfd, base, 0755) < 0) {
		int er = errno;
		struct stat st;
		if (!(er == EEXIST && parents && fstatat(dfd, base, &st, 0) == 0 &&
		      S_ISDIR(st.st_mode))) {
			err_sys(&e, er, "mkdir `%s`", r->path);
			goto fail;
		}
	}
ok:
	send_path(c, ch, &wp);
	wspath_fini(&wp);
	return;
fail:
	wspath_fini(&wp);
	conn_error(c, ch, &e);
}

/* Removes the directory `name` in dfd and everything below it, never following symlinks. */
static int remove_tree(int dfd, const char *name, int depth, struct err *e, const char *shown_path)
{
	if (depth >= REMOVE_MAX_DEPTH)
		return err_set(e, ENAMETOOLONG, "remove `%s`: the tree is too deep", shown_path);
	_cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return err_sys(e, errno, "remove `%s`", shown_path);
	size_t n;
	char **names = read_names(fd, &n);
	int ret = 0;
	for (size_t i = 0; i < n; i++) {
		if (ret == 0) {
			struct stat st;
			if (fstatat(fd, names[i], &st, AT_SYMLINK_NOFOLLOW) < 0) {
				if (errno != ENOENT)
					ret = err_sys(e, errno, "remove `%s`", shown_path);
			} else if (S_ISDIR(st.st_mode)) {
				ret = remove_tree(fd, names[i], depth + 1, e, shown_path);
			} else if (unlinkat(fd, names[i], 0) < 0 && errno != ENOENT) {
				ret = err_sys(e, errno, "remove `%s`", shown_path);
			}
		}
		free(names[i]);
	}
	free(names);
	if (ret < 0)
		return ret;
	if (unlinkat(dfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
		return err_sys(e, errno, "remove `%s`", shown_path);
	return 0;
}

void op_remove(struct conn *c, uint32_t ch, const struct req *r)
{
	struct agent *a = c->a;
	struct err e;
	struct wspath wp;
	const char *base;
	struct stat st;
	_cleanup_close_ int dfd = -1;
	if (wspath_init(agent_ws(a, r->any_path), r->path, &wp, &e) < 0) {
		conn_error(c, ch, &e);
		return;
	}
	if (!*wp.rel) {
		err_set(&e, EPERM, "refusing to remove the workspace root");
		goto fail;
	}
	dfd = ws_open_parent(agent_ws(a, r->any_path), &wp, false, &base, &e);
	if (dfd < 0)
		goto fail;
	if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		err_sys(&e, errno, "remove `%s`", r->path);
		goto fail;
	}
	if (S_ISDIR(st.st_mode)) {
		if (r->u.remove.recursive) {
			if (remove_tree(dfd, base, 0, &e, r->path) < 0)
				goto fail;
		} else if (unlinkat(dfd, base, AT_REMOVEDIR) < 0) {
			err_sys(&e, errno, "remove `%s`", r->path);
			goto fail;
		}
	} else if (unlinkat(dfd, base, 0) < 0) {
		err_sys(&e, errno, "remove `%s`", r->path);
		goto fail;
	}
	send_path(c, ch, &wp);
	wspath_fini(&wp);
	return;
fail:
	wspath_fini(&wp);
	conn_error(c, ch, &e);
}

/* Renames within the workspace. Neither end's last component is followed (rename(2) never
 * does); both parents are opened inside the workspace. */
void op_rename(struct conn *c, uint32_t ch, const struct req *r)
{
	struct agent *a = c->a;
	struct err e;
	struct wspath from, to;
	const char *from_base, *to_base;
	_cleanup_close_ int from_dfd = -1;
	_cleanup_close_ int to_dfd = -1;
	if (wspath_init(agent_ws(a, r->any_path), r->path, &from, &e) < 0) {
		conn_error(c, ch, &e);
		return;
	}
	if (wspath_init(agent_ws(a, r->any_path), r->u.rename.to, &to, &e) < 0) {
		wspath_fini(&from);
		conn_error(c, ch, &e);
		return;
	}
	if (!*from.rel || !*to.rel) {
		err_set(&e, EPERM, "refusing to move the workspace root or onto it");
		goto fail;
	}
	from_dfd = ws_open_parent(agent_ws(a, r->any_path), &from, false, &from_base, &e);
	if (from_dfd < 0)
		goto fail;
	struct stat st;
	if (fstatat(from_dfd, from_base, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		err_sys(&e, errno, "move `%s`", r->path);
		goto fail;
	}
	to_dfd = ws_open_parent(agent_ws(a, r->any_path), &to, r->u.rename.parents, &to_base, &e);
	if (to_dfd < 0)
		goto fail;
	unsigned flags = r->u.rename.overwrite ? 0 : RENAME_NOREPLACE;
	/* renameat2(2) through syscall(2): the static C library has no wrapper. */
	if (syscall(SYS_renameat2, from_dfd, from_base, to_dfd, to_base, flags) < 0) {
		int er = errno;
		if (er == EEXIST)
			err_set(&e, EEXIST, "move `%s`: `%s` exists", r->path, r->u.rename.to);
		else
			err_sys(&e, er, "move `%s` to `%s`", r->path, r->u.rename.to);
		goto fail;
	}
	struct jw w;
	jw_init(&w);
	jw_obj_open(&w);
	jw_key(&w, "path");
	jw_str(&w, shown(&to));
	jw_key(&w, "from");
	jw_str(&w, shown(&from));
	jw_obj_close(&w);
	wspath_fini(&from);
	wspath_fini(&to);
	send_result(c, ch, &w);
	return;
fail:
	wspath_fini(&from);
	wspath_fini(&to);
	conn_error(c, ch, &e);
}
