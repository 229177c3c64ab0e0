/* watch: reports changes under a directory of the workspace as EVENT frames, until CANCEL.
 *
 * One inotify descriptor per watch, read from the poll loop. Each directory watched is
 * remembered by its path relative to the workspace, so that an event names the file as the
 * other operations do; a recursive watch adds the directories created (or moved in) later and
 * keeps the paths of directories renamed inside the tree. Events go out one per EVENT frame,
 * each consuming the host's credit like data; while the host grants none, events wait in a
 * bounded queue, and once that is full the inotify descriptor is no longer read: the kernel's
 * own queue fills and overflows instead. Whatever is lost (the kernel's IN_Q_OVERFLOW, or the
 * agent's queue full) is reported as one "overflow" event in its place. */
#include "agent.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/cleanup.h"

/* How long a MOVED_FROM read alone waits for its MOVED_TO (see watch_step). */
#define MOVE_GRACE_NS (50LL * 1000 * 1000)

/* Events waiting for the host's credit; once this few are left free the descriptor is not
 * read (a read of WATCH_READ_BUF bytes holds at most WATCH_READ_BUF / 16 events). */
#define WATCH_QUEUE_MAX 4096
#define WATCH_READ_BUF  4096
#define WATCH_READ_ROOM (WATCH_READ_BUF / sizeof(struct inotify_event) + 2)
/* Reads per step, so that one busy watch does not hold the loop. */
#define WATCH_READS_PER_STEP 16

#define WATCH_MASK                                                                     \
	(IN_CREATE | IN_MODIFY | IN_ATTRIB | IN_DELETE | IN_MOVED_FROM | IN_MOVED_TO | \
	 IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_EXCL_UNLINK)

/* The first event: the watches are in place, every change from now on is reported. */
#define WATCH_READY (1u << 16)

struct watch_dir {
	int wd;
	char *rel; /* relative to the workspace, "" for its root */
};

struct watch_event {
	char *json;
	size_t len;
	unsigned kind; /* REQ_WATCH_*, 0 for an overflow, WATCH_READY */
	char *path;    /* of a write, to fold the next ones into it */
};

struct watch_op {
	struct op op;
	int ifd;
	bool recursive;
	unsigned filter;
	int64_t max_watches;
	char *root;                 /* the watched directory's relative path */
	const struct workspace *ws; /* what root is relative to (agent_ws) */
	int root_wd;
	struct watch_dir *dirs;
	size_t ndirs, cap;
	struct watch_event q[WATCH_QUEUE_MAX];
	size_t qhead, qlen;
	bool lost; /* events were dropped: an overflow is owed */
	bool root_gone;
	/* a MOVED_FROM waiting for its MOVED_TO */
	bool move_pending;
	int64_t move_deadline; /* a lone MOVED_FROM is settled as a move out of the tree then */
	uint32_t move_cookie;
	char *move_from;
	bool move_dir;
	bool move_tmp; /* move_from is a write's temporary file (agent_is_write_tmp) */
	int64_t events, overflows;
	struct err fail; /* a watch that could not be added later (the limit) */
	bool failed;
};

static struct watch_dir *dir_by_wd(struct watch_op *x, int wd)
{
	for (size_t i = 0; i < x->ndirs; i++)
		if (x->dirs[i].wd == wd)
			return &x->dirs[i];
	return NULL;
}

static void dir_drop(struct watch_op *x, size_t i)
{
	free(x->dirs[i].rel);
	x->dirs[i] = x->dirs[--x->ndirs];
}

static char *join(const char *dir, const char *name)
{
	if (!*dir)
		return xstrdup(name);
	return xasprintf("%s/%s", dir, name);
}

static const char *shown(const char *rel)
{
	return *rel ? rel : ".";
}

/* Whether `rel` is `prefix` or below it. */
static bool under(const char *rel, const char *prefix)
{
	size_t n = strlen(prefix);
	if (!n)
		return true;
	return strncmp(rel, prefix, n) == 0 && (rel[n] == '\0' || rel[n] == '/');
}

/* --- the queue ---------------------------------------------------------------------- */

static struct watch_event *q_last(struct watch_op *x)
{
	if (!x->qlen)
		return NULL;
	return &x->q[(x->qhead + x->qlen - 1) % WATCH_QUEUE_MAX];
}

static void q_push(struct watch_op *x, struct jw *w, unsigned kind, const char *path)
{
	if (x->qlen == WATCH_QUEUE_MAX) {
		jw_free(w);
		x->lost = true;
		return;
	}
	struct watch_event *e = &x->q[(x->qhead + x->qlen++) % WATCH_QUEUE_MAX];
	e->json = w->buf;
	e->len = w->len;
	e->kind = kind;
	e->path = kind == REQ_WATCH_WRITE ? xstrdup(path) : NULL;
}

static void q_pop(struct watch_op *x)
{
	free(x->q[x->qhead].json);
	free(x->q[x->qhead].path);
	x->qhead = (x->qhead + 1) % WATCH_QUEUE_MAX;
	x->qlen--;
}

/* The overflow owed takes the place of what was lost, once there is room for it; one is
 * enough for any number of losses in a row. */
static void q_settle_loss(struct watch_op *x)
{
	if (!x->lost || x->qlen == WATCH_QUEUE_MAX)
		return;
	x->lost = false;
	struct watch_event *last = q_last(x);
	if (last && last->kind == 0)
		return;
	struct jw w;
	jw_init(&w);
	jw_obj_open(&w);
	jw_key(&w, "type");
	jw_str(&w, "overflow");
	jw_obj_close(&w);
	q_push(x, &w, 0, NULL);
}

static const char *kind_name(unsigned kind)
{
	switch (kind) {
	case REQ_WATCH_CREATE:
		return "create";
	case REQ_WATCH_WRITE:
		return "write";
	case REQ_WATCH_REMOVE:
		return "remove";
	case REQ_WATCH_RENAME:
		return "rename";
	default:
		return "chmod";
	}
}

static void emit(struct watch_op *x, unsigned kind, const char *path, bool dir, const char *from)
{
	if (!(x->filter & kind))
		return;
	q_settle_loss(x);
	struct watch_event *last = q_last(x);
	/* A file written in many pieces: one write event while the first still waits. */
	if (kind == REQ_WATCH_WRITE && last && last->kind == kind && strcmp(last->path, path) == 0)
		return;
	struct jw w;
	jw_init(&w);
	jw_obj_open(&w);
	jw_key(&w, "type");
	jw_str(&w, kind_name(kind));
	jw_key(&w, "path");
	jw_str(&w, path);
	jw_key(&w, "dir");
	jw_bool(&w, dir);
	if (from) {
		jw_key(&w, "from");
		jw_str(&w, from);
	}
	jw_obj_close(&w);
	if (w.len > GUEST_EVENT_MAX) {
		/* Paths are bounded by PATH_MAX: never, but the host would refuse it. */
		jw_free(&w);
		x->lost = true;
		return;
	}
	q_push(x, &w, kind, path);
}

/* Sends what the host's credit allows. */
static void q_send(struct watch_op *x)
{
	while (x->qlen && conn_may_send_data(x->op.conn)) {
		struct watch_event *e = &x->q[x->qhead];
		if (x->op.send_credit < e->len)
			break;
		conn_frame(x->op.conn, GUEST_EVENT, x->op.ch, e->json, e->len);
		x->op.send_credit -= e->len;
		if (e->kind == 0)
			x->overflows++;
		else if (e->kind != WATCH_READY)
			x->events++;
		q_pop(x);
	}
}

static void q_clear(struct watch_op *x)
{
	while (x->qlen)
		q_pop(x);
}

/* --- watches ------------------------------------------------------------------------ */

/* inotify names what it watches by path: the directory already opened inside the workspace
 * is named through its descriptor, so nothing is resolved twice. Without /proc, the working
 * directory serves for a moment instead. */
static int add_watch_fd(int ifd, int fd, uint32_t mask)
{
	char name[64];
	snprintf(name, sizeof(name), "/proc/self/fd/%d", fd);
	int wd = inotify_add_watch(ifd, name, mask);
	if (wd >= 0 || (errno != ENOENT && errno != ENOTDIR))
		return wd;
	_cleanup_close_ int cwd = open(".", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (cwd < 0 || fchdir(fd) < 0)
		return -1;
	wd = inotify_add_watch(ifd, ".", mask);
	int er = errno;
	if (fchdir(cwd) < 0)
		agent_log("watch: cannot return to the working directory: %s", strerror(errno));
	errno = er;
	return wd;
}

static int limit_error(struct watch_op *x, struct err *e)
{
	return err_set(e, ENOSPC,
		       "watch `%s`: the tree has more than %lld directories, the most one watch "
		       "covers (maxWatches)",
		       shown(x->root), (long long)x->max_watches);
}

static void emit(struct watch_op *x, unsigned kind, const char *path, bool dir, const char *from);

/* Watches the directory `rel` (opened as fd), and with a recursive watch every directory
 * below it. A directory that vanished meanwhile is skipped. With announce (a directory new
 * in the tree), what it holds already is reported as created: it may have been made before
 * the directory's own watch was in place. */
static int add_tree(struct watch_op *x, int fd, const char *rel, bool announce, struct err *e)
{
	struct watch_dir *known = NULL;
	int wd = add_watch_fd(x->ifd, fd, WATCH_MASK);
	if (wd < 0) {
		if (errno == ENOSPC)
			return err_set(e, ENOSPC,
				       "watch `%s`: the system's limit of watches is reached "
				       "(fs.inotify.max_user_watches)",
				       shown(x->root));
		if (errno == ENOENT || errno == ENOTDIR)
			return 0;
		return err_sys(e, errno, "watch `%s`", shown(rel));
	}
	known = dir_by_wd(x, wd);
	if (known) {
		/* The same directory under a new name (moved inside the tree). */
		free(known->rel);
		known->rel = xstrdup(rel);
	} else {
		if ((int64_t)x->ndirs >= x->max_watches) {
			inotify_rm_watch(x->ifd, wd);
			return limit_error(x, e);
		}
		if (x->ndirs == x->cap) {
			x->cap = x->cap ? x->cap * 2 : 16;
			x->dirs = xrealloc(x->dirs, x->cap * sizeof(*x->dirs));
		}
		x->dirs[x->ndirs++] = (struct watch_dir){ .wd = wd, .rel = xstrdup(rel) };
	}
	if (!x->recursive)
		return 0;

	int dfd = openat(fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return 0;
	DIR *d = fdopendir(dfd);
	if (!d) {
		close(dfd);
		return 0;
	}
	int ret = 0;
	struct dirent *de;
	while (ret == 0 && (de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		_cleanup_free_ char *path = join(rel, de->d_name);
		if (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN) {
			if (announce)
				emit(x, REQ_WATCH_CREATE, path, false, NULL);
			continue;
		}
		_cleanup_close_ int sub = openat(dirfd(d), de->d_name,
						 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (announce)
			emit(x, REQ_WATCH_CREATE, path, sub >= 0, NULL);
		if (sub < 0)
			continue; /* not a directory (or a symlink to one), or gone */
		ret = add_tree(x, sub, path, announce, e);
	}
	closedir(d);
	return ret;
}

/* A directory that appeared inside the tree (created, or moved in). */
static void add_new_dir(struct watch_op *x, const char *rel)
{
	struct err e;
	struct wspath wp = { .rel = (char *)rel, .orig = rel };
	int fd = ws_open(x->ws, &wp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW, 0, &e);
	if (fd < 0)
		return; /* gone already, or not a directory any more */
	if (add_tree(x, fd, rel, true, &e) < 0 && !x->failed) {
		x->failed = true;
		x->fail = e;
	}
	close(fd);
}

/* Forgets the watches of `rel` and below: the tree left the watched one. */
static void drop_tree(struct watch_op *x, const char *rel)
{
	for (size_t i = 0; i < x->ndirs;) {
		if (x->dirs[i].wd != x->root_wd && under(x->dirs[i].rel, rel)) {
			inotify_rm_watch(x->ifd, x->dirs[i].wd);
			dir_drop(x, i);
		} else {
			i++;
		}
	}
}

/* Renames the paths of `from` and below to `to`; false when `from` itself had no watch. */
static bool move_tree(struct watch_op *x, const char *from, const char *to)
{
	size_t n = strlen(from);
	bool found = false;
	for (size_t i = 0; i < x->ndirs; i++) {
		struct watch_dir *d = &x->dirs[i];
		if (d->wd == x->root_wd || !under(d->rel, from))
			continue;
		found |= d->rel[n] == '\0';
		char *rel = xasprintf("%s%s", to, d->rel + n);
		free(d->rel);
		d->rel = rel;
	}
	return found;
}

/* A MOVED_FROM whose MOVED_TO did not follow: the file left the tree. */
static void settle_move(struct watch_op *x)
{
	if (!x->move_pending)
		return;
	x->move_pending = false;
	if (!x->move_tmp)
		emit(x, REQ_WATCH_RENAME, x->move_from, x->move_dir, NULL);
	if (x->move_dir && x->recursive)
		drop_tree(x, x->move_from);
	free(x->move_from);
	x->move_from = NULL;
}

static void handle_root_self(struct watch_op *x, uint32_t mask)
{
	if (mask & IN_DELETE_SELF)
		emit(x, REQ_WATCH_REMOVE, shown(x->root), true, NULL);
	else if (mask & IN_MOVE_SELF)
		emit(x, REQ_WATCH_RENAME, shown(x->root), true, NULL);
	/* Under another name, or none: the paths would be wrong. The watch ends. */
	x->root_gone = true;
}

static void handle_event(struct watch_op *x, const struct inotify_event *ev)
{
	if (ev->mask & IN_Q_OVERFLOW) {
		settle_move(x);
		x->lost = true;
		q_settle_loss(x);
		return;
	}
	if (ev->mask & IN_MOVED_TO && x->move_pending && ev->cookie != x->move_cookie)
		settle_move(x);
	if (!(ev->mask & IN_MOVED_TO))
		settle_move(x);

	struct watch_dir *d = dir_by_wd(x, ev->wd);
	if (!d)
		return; /* a watch dropped meanwhile */
	if (ev->mask & IN_IGNORED) {
		bool root = ev->wd == x->root_wd;
		dir_drop(x, (size_t)(d - x->dirs));
		if (root)
			x->root_gone = true;
		return;
	}
	bool isdir = ev->mask & IN_ISDIR;
	if (!ev->len || !ev->name[0]) {
		/* The directory itself: its parent (when watched) reports it already. */
		if (ev->wd != x->root_wd)
			return;
		if (ev->mask & (IN_DELETE_SELF | IN_MOVE_SELF))
			handle_root_self(x, ev->mask);
		else if (ev->mask & IN_ATTRIB)
			emit(x, REQ_WATCH_CHMOD, shown(x->root), true, NULL);
		return;
	}
	_cleanup_free_ char *path = join(d->rel, ev->name);
	/* A write's temporary file is not shown: its rename over the target is the write. */
	bool tmp = !isdir && agent_is_write_tmp(ev->name);
	if (tmp && !(ev->mask & IN_MOVED_FROM))
		return;
	if (ev->mask & IN_CREATE) {
		emit(x, REQ_WATCH_CREATE, path, isdir, NULL);
		if (isdir && x->recursive)
			add_new_dir(x, path);
	} else if (ev->mask & IN_MODIFY) {
		emit(x, REQ_WATCH_WRITE, path, isdir, NULL);
	} else if (ev->mask & IN_ATTRIB) {
		emit(x, REQ_WATCH_CHMOD, path, isdir, NULL);
	} else if (ev->mask & IN_DELETE) {
		emit(x, REQ_WATCH_REMOVE, path, isdir, NULL);
	} else if (ev->mask & IN_MOVED_FROM) {
		x->move_pending = true;
		x->move_deadline = 0;
		x->move_cookie = ev->cookie;
		x->move_from = path;
		x->move_dir = isdir;
		x->move_tmp = tmp;
		path = NULL;
	} else if (ev->mask & IN_MOVED_TO) {
		if (x->move_pending && x->move_tmp) {
			emit(x, REQ_WATCH_WRITE, path, false, NULL);
			x->move_pending = false;
			free(x->move_from);
			x->move_from = NULL;
		} else if (x->move_pending) {
			emit(x, REQ_WATCH_RENAME, path, isdir, x->move_from);
			if (isdir && x->recursive && !move_tree(x, x->move_from, path))
				add_new_dir(x, path); /* gone before its watch was added */
			x->move_pending = false;
			free(x->move_from);
			x->move_from = NULL;
		} else {
			/* Moved in from outside the tree: new here. */
			emit(x, REQ_WATCH_CREATE, path, isdir, NULL);
			if (isdir && x->recursive)
				add_new_dir(x, path);
		}
	}
}

/* Reads the descriptor while the queue has room; false when it has nothing more now. */
static bool read_events(struct watch_op *x)
{
	char buf[WATCH_READ_BUF] __attribute__((aligned(__alignof__(struct inotify_event))));
	ssize_t n = read(x->ifd, buf, sizeof(buf));
	if (n <= 0)
		return false;
	for (char *p = buf; p < buf + n;) {
		const struct inotify_event *ev = (const struct inotify_event *)p;
		handle_event(x, ev);
		p += sizeof(*ev) + ev->len;
	}
	return true;
}

/* --- the operation ------------------------------------------------------------------ */

static void watch_end(struct watch_op *x)
{
	struct jw w;
	jw_init(&w);
	jw_obj_open(&w);
	jw_key(&w, "events");
	jw_int(&w, x->events);
	jw_key(&w, "overflows");
	jw_int(&w, x->overflows);
	if (x->root_gone) {
		jw_key(&w, "gone");
		jw_bool(&w, true);
	}
	jw_obj_close(&w);
	op_result(&x->op, &w);
	jw_free(&w);
}

static bool queue_has_room(const struct watch_op *x)
{
	return x->qlen + WATCH_READ_ROOM <= WATCH_QUEUE_MAX;
}

static int watch_poll_fill(struct op *op, struct pollfd *pfd, int64_t *deadline)
{
	struct watch_op *x = (struct watch_op *)op;
	if (x->failed || (x->root_gone && !x->qlen)) {
		*deadline = agent_now_ns();
		return 0;
	}
	if (x->move_pending && x->move_deadline && x->move_deadline < *deadline)
		*deadline = x->move_deadline;
	if (!queue_has_room(x) || x->root_gone)
		return 0;
	pfd[0] = (struct pollfd){ .fd = x->ifd, .events = POLLIN };
	return 1;
}

static void watch_step(struct op *op, const struct pollfd *pfd, int n)
{
	struct watch_op *x = (struct watch_op *)op;
	if (n && pfd[0].revents) {
		bool drained = false;
		for (int i = 0; i < WATCH_READS_PER_STEP && queue_has_room(x) && !x->root_gone;
		     i++) {
			if (!read_events(x)) {
				drained = true;
				break;
			}
		}
		/* Nothing more to read. The kernel queues a rename's MOVED_FROM and MOVED_TO one
		 * after the other, not at once: a read may come between them (seen on a slow
		 * machine). A MOVED_FROM left alone waits MOVE_GRACE_NS for its MOVED_TO; past
		 * that, nothing is coming and the file left the tree. */
		if (drained && x->move_pending && !x->move_deadline)
			x->move_deadline = agent_now_ns() + MOVE_GRACE_NS;
		q_settle_loss(x);
	}
	if (x->move_pending && x->move_deadline && agent_now_ns() >= x->move_deadline)
		settle_move(x);
	if (!x->move_pending)
		x->move_deadline = 0;
	q_send(x);
	if (x->failed) {
		q_clear(x);
		op_error(op, &x->fail);
	} else if (x->root_gone && !x->qlen) {
		settle_move(x);
		q_send(x);
		if (!x->qlen)
			watch_end(x);
	}
}

static void watch_cancel(struct op *op)
{
	struct watch_op *x = (struct watch_op *)op;
	q_clear(x);
	watch_end(x);
}

static void watch_destroy(struct op *op)
{
	struct watch_op *x = (struct watch_op *)op;
	q_clear(x);
	if (x->ifd >= 0)
		close(x->ifd);
	for (size_t i = 0; i < x->ndirs; i++)
		free(x->dirs[i].rel);
	free(x->dirs);
	free(x->move_from);
	free(x->root);
	free(x);
}

static const struct op_vt watch_vt = {
	.name = "watch",
	.cancel = watch_cancel,
	.poll_fill = watch_poll_fill,
	.step = watch_step,
	.destroy = watch_destroy,
};

void op_watch(struct conn *c, uint32_t ch, const struct req *r)
{
	struct agent *a = c->a;
	struct err e;
	struct wspath wp;
	const struct workspace *ws = agent_ws(a, r->any_path);
	if (wspath_init(ws, r->path, &wp, &e) < 0) {
		conn_error(c, ch, &e);
		return;
	}
	_cleanup_close_ int fd = ws_open(ws, &wp, O_RDONLY | O_DIRECTORY, 0, &e);
	if (fd < 0) {
		wspath_fini(&wp);
		conn_error(c, ch, &e);
		return;
	}
	struct watch_op *x = xcalloc(1, sizeof(*x));
	x->ws = ws;
	x->recursive = r->u.watch.recursive;
	x->filter = r->u.watch.events;
	x->max_watches = r->u.watch.max_watches;
	x->root = xstrdup(wp.rel);
	x->op.conn = c;
	wspath_fini(&wp);
	x->ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (x->ifd < 0) {
		if (errno == EMFILE)
			err_set(&e, EMFILE,
				"watch `%s`: too many watches in this sandbox "
				"(fs.inotify.max_user_instances)",
				shown(x->root));
		else
			err_sys(&e, errno, "watch `%s`", shown(x->root));
		goto fail;
	}
	if (add_tree(x, fd, x->root, false, &e) < 0)
		goto fail;
	if (!x->ndirs) {
		err_set(&e, ENOENT, "watch `%s`: the directory vanished", shown(x->root));
		goto fail;
	}
	x->root_wd = x->dirs[0].wd;
	op_register(c, &x->op, &watch_vt, ch);
	struct jw w;
	jw_init(&w);
	jw_obj_open(&w);
	jw_key(&w, "type");
	jw_str(&w, "ready");
	jw_key(&w, "path");
	jw_str(&w, shown(x->root));
	jw_key(&w, "watches");
	jw_int(&w, (int64_t)x->ndirs);
	jw_obj_close(&w);
	q_push(x, &w, WATCH_READY, NULL);
	q_send(x);
	return;
fail:
	watch_destroy(&x->op);
	conn_error(c, ch, &e);
}
