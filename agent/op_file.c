/* write and read: file contents as raw DATA / FILEDATA frames within the channel's credit.
 *
 * A write goes to a temporary file in the target's directory and is renamed over the target
 * on EOF, so readers never see a torn file; the temporary file is removed on any failure or
 * cancel. Watches do not show the temporary file (op_watch.c): its rename is the target's
 * write. A write with anyPath (E2B's) of a file that does not exist yet first makes it, empty,
 * so that watchers see it created and then written, as E2B's writes are; readers then see it
 * empty or whole, and it goes again if the write fails. */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/cleanup.h"

struct write_op {
	struct op op;
	int dir_fd;
	int fd;
	const char *base;
	char tmp[64];
	char *rel;
	mode_t mode;
	int64_t max_bytes; /* -1: none */
	uint64_t size;
	bool placed; /* the target made empty first (above): placed_dev/ino */
	dev_t placed_dev;
	ino_t placed_ino;
};

/* Removes the empty target a failed write made, if it is still that file. */
static void unplace(struct write_op *x)
{
	struct stat st;
	if (x->placed && fstatat(x->dir_fd, x->base, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	    st.st_dev == x->placed_dev && st.st_ino == x->placed_ino && st.st_size == 0)
		unlinkat(x->dir_fd, x->base, 0);
	x->placed = false;
}

static void write_cleanup(struct write_op *x)
{
	if (x->fd >= 0) {
		close(x->fd);
		x->fd = -1;
		unlinkat(x->dir_fd, x->tmp, 0);
		unplace(x);
	}
}

static void write_fail(struct write_op *x, struct err *e)
{
	write_cleanup(x);
	op_error(&x->op, e);
}

static void write_data(struct op *op, const uint8_t *p, size_t n)
{
	struct write_op *x = (struct write_op *)op;
	struct err e;
	op_consumed(op, n);
	if (x->max_bytes >= 0 && x->size + n > (uint64_t)x->max_bytes) {
		err_set(&e, EFBIG, "`%s` exceeds the limit of %lld bytes", x->rel,
			(long long)x->max_bytes);
		write_fail(x, &e);
		return;
	}
	while (n) {
		ssize_t k = write(x->fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0) {
			err_sys(&e, k < 0 ? errno : EIO, "write `%s`", x->rel);
			write_fail(x, &e);
			return;
		}
		p += k;
		n -= (size_t)k;
		x->size += (uint64_t)k;
	}
}

static void write_eof(struct op *op)
{
	struct write_op *x = (struct write_op *)op;
	struct err e;
	/* fchmod, not the creation mode: the umask must not change what was asked for. */
	if (fchmod(x->fd, x->mode) < 0) {
		err_sys(&e, errno, "chmod `%s`", x->rel);
		write_fail(x, &e);
		return;
	}
	int fd = x->fd;
	x->fd = -1;
	if (close(fd) < 0) {
		err_sys(&e, errno, "write `%s`", x->rel);
		unlinkat(x->dir_fd, x->tmp, 0);
		unplace(x);
		op_error(op, &e);
		return;
	}
	if (renameat(x->dir_fd, x->tmp, x->dir_fd, x->base) < 0) {
		err_sys(&e, errno, "write `%s`", x->rel);
		unlinkat(x->dir_fd, x->tmp, 0);
		unplace(x);
		op_error(op, &e);
		return;
	}
	x->placed = false;
	struct jw w;
	jw_init(&w);
	jw_obj_open(&w);
	jw_key(&w, "path");
	jw_str(&w, x->rel);
	jw_key(&w, "size");
	jw_int(&w, (int64_t)x->size);
	jw_obj_close(&w);
	op_result(op, &w);
	jw_free(&w);
}

static void write_cancel(struct op *op)
{
	struct write_op *x = (struct write_op *)op;
	struct err e;
	err_set(&e, ECANCELED, "write `%s` cancelled", x->rel);
	write_fail(x, &e);
}

static void write_destroy(struct op *op)
{
	struct write_op *x = (struct write_op *)op;
	write_cleanup(x);
	if (x->dir_fd >= 0)
		close(x->dir_fd);
	free(x->rel);
	free(x);
}

static const struct op_vt write_vt = {
	.name = "write",
	.data = write_data,
	.eof = write_eof,
	.cancel = write_cancel,
	.destroy = write_destroy,
};

void op_write(struct conn *c, uint32_t ch, const struct req *r)
{
	struct agent *a = c->a;
	struct err e;
	struct wspath wp;
	const char *base;
	if (wspath_init(agent_ws(a, r->any_path), r->path, &wp, &e) < 0) {
		conn_error(c, ch, &e);
		return;
	}
	int dfd = ws_open_parent(agent_ws(a, r->any_path), &wp, true, &base, &e);
	if (dfd < 0) {
		wspath_fini(&wp);
		conn_error(c, ch, &e);
		return;
	}
	/* Refuse a directory now rather than after all the data has arrived. */
	struct stat st;
	if (fstatat(dfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISDIR(st.st_mode)) {
		err_set(&e, EISDIR, "`%s` is a directory", r->path);
		close(dfd);
		wspath_fini(&wp);
		conn_error(c, ch, &e);
		return;
	}

	struct write_op *x = xcalloc(1, sizeof(*x));
	x->dir_fd = dfd;
	x->fd = -1;
	x->base = base; /* points into wp.rel, now owned by x */
	x->rel = TAKE_PTR(wp.rel);
	x->mode = (mode_t)r->u.write.mode;
	x->max_bytes = r->u.write.max_bytes;
	static unsigned counter;
	for (int tries = 0; tries < 16 && x->fd < 0; tries++) {
		snprintf(x->tmp, sizeof(x->tmp),
			 AGENT_WRITE_TMP_PREFIX "%x-%x-%x" AGENT_WRITE_TMP_SUFFIX,
			 (unsigned)getpid(), ++counter, (unsigned)agent_now_ns());
		x->fd = openat(dfd, x->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (x->fd < 0 && errno != EEXIST)
			break;
	}
	if (x->fd < 0) {
		err_sys(&e, errno, "write `%s`", x->rel);
		conn_error(c, ch, &e);
		write_destroy(&x->op);
		return;
	}
	if (r->any_path) {
		int pfd = openat(dfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
				 0600);
		if (pfd >= 0 && fstat(pfd, &st) == 0) {
			x->placed = true;
			x->placed_dev = st.st_dev;
			x->placed_ino = st.st_ino;
		}
		if (pfd >= 0)
			close(pfd);
	}
	op_register(c, &x->op, &write_vt, ch);
}

/* Whether bytes are text that JSON carries as it is: valid UTF-8 without NUL, checked as
 * they pass, a character cut by the end of one piece finished by the next. */
struct text_check {
	uint8_t tail[4];
	size_t ntail; /* bytes of a cut character kept */
	size_t want;  /* its length */
	bool bad;
};

static void text_check_feed(struct text_check *t, const uint8_t *p, size_t n)
{
	while (n && !t->bad) {
		if (t->ntail) {
			/* Finish the character the last piece cut: at most 4 bytes. */
			t->tail[t->ntail++] = *p++;
			n--;
			if ((t->tail[t->ntail - 1] & 0xc0) != 0x80)
				t->bad = true;
			else if (t->ntail == t->want)
				t->bad = utf8_valid_seq(t->tail, t->ntail) != t->want;
			if (t->ntail == t->want)
				t->ntail = 0;
			continue;
		}
		if (*p == 0) {
			t->bad = true;
			return;
		}
		if (*p < 0x80) {
			p++, n--;
			continue;
		}
		size_t k = utf8_valid_seq(p, n);
		if (k) {
			p += k, n -= k;
			continue;
		}
		/* Invalid, or valid so far but cut by the end: only a short lead-in is kept. */
		size_t want = *p >= 0xf0 ? 4 : *p >= 0xe0 ? 3 : 2;
		if (n >= want || *p < 0xc2 || *p > 0xf4) {
			t->bad = true;
			return;
		}
		for (size_t i = 1; i < n; i++)
			if ((p[i] & 0xc0) != 0x80)
				t->bad = true;
		memcpy(t->tail, p, n);
		t->ntail = n;
		t->want = want;
		return;
	}
}

/* Whether everything fed was text, ending on a character boundary. */
static bool text_check_ok(const struct text_check *t)
{
	return !t->bad && t->ntail == 0;
}

struct read_op {
	struct op op;
	int fd;
	char *rel;
	int64_t max_bytes;
	uint64_t size;
	uint64_t announced; /* the size FILEINFO gave */
	bool check_text;    /* FILEINFO said "text": true; the bytes sent must be */
	struct text_check text;
	struct timespec mtime; /* when it was opened */
};

static void read_changed(struct read_op *x)
{
	struct err e;
	err_set(&e, ESTALE, "`%s` changed while being read", x->rel);
	op_error(&x->op, &e);
}

static int read_poll_fill(struct op *op, struct pollfd *pfd, int64_t *deadline)
{
	/* Regular files are always ready: step again as soon as there is credit. */
	if (op_send_room(op))
		*deadline = 0;
	return 0;
}

/* Whether the file is still as it was opened: the size announced, not modified since. */
static bool read_unchanged(struct read_op *x)
{
	struct stat st;
	return fstat(x->fd, &st) == 0 && (uint64_t)st.st_size == x->announced &&
	       st.st_mtim.tv_sec == x->mtime.tv_sec && st.st_mtim.tv_nsec == x->mtime.tv_nsec;
}

static void read_finish(struct read_op *x)
{
	if (x->size != x->announced || !read_unchanged(x) ||
	    (x->check_text && !text_check_ok(&x->text))) {
		read_changed(x);
		return;
	}
	struct jw w;
	jw_init(&w);
	jw_obj_open(&w);
	jw_key(&w, "size");
	jw_int(&w, (int64_t)x->size);
	jw_obj_close(&w);
	op_result(&x->op, &w);
	jw_free(&w);
}

static void read_step(struct op *op, const struct pollfd *pfd, int n)
{
	struct read_op *x = (struct read_op *)op;
	struct err e;
	size_t room = op_send_room(op);
	if (!room)
		return;
	uint8_t *dst = conn_reserve(op->conn, room);
	ssize_t k = read(x->fd, dst, room);
	if (k < 0) {
		if (errno == EINTR)
			return;
		err_sys(&e, errno, "read `%s`", x->rel);
		op_error(op, &e);
		return;
	}
	if (k == 0) {
		read_finish(x);
		return;
	}
	if (x->max_bytes >= 0 && x->size + (uint64_t)k > (uint64_t)x->max_bytes) {
		/* The file grew past the limit while being read. */
		err_set(&e, EFBIG, "`%s` exceeds the limit of %lld bytes", x->rel,
			(long long)x->max_bytes);
		op_error(op, &e);
		return;
	}
	if (x->size + (uint64_t)k > x->announced) {
		read_changed(x);
		return;
	}
	if (x->check_text) {
		text_check_feed(&x->text, dst, (size_t)k);
		if (x->text.bad) {
			read_changed(x);
			return;
		}
	}
	/* The last bytes go only if the file is still as it was: a change found after them
	 * would come when the reader already holds what looks like the whole file. */
	if (x->size + (uint64_t)k == x->announced && !read_unchanged(x)) {
		read_changed(x);
		return;
	}
	conn_commit(op->conn, GUEST_FILEDATA, op->ch, (size_t)k);
	op->send_credit -= (uint64_t)k;
	x->size += (uint64_t)k;
}

static void read_cancel(struct op *op)
{
	struct read_op *x = (struct read_op *)op;
	struct err e;
	err_set(&e, ECANCELED, "read `%s` cancelled", x->rel);
	op_error(op, &e);
}

static void read_destroy(struct op *op)
{
	struct read_op *x = (struct read_op *)op;
	if (x->fd >= 0)
		close(x->fd);
	free(x->rel);
	free(x);
}

static const struct op_vt read_vt = {
	.name = "read",
	.cancel = read_cancel,
	.poll_fill = read_poll_fill,
	.step = read_step,
	.destroy = read_destroy,
};

/* Reads the file once from its start (without moving its offset) to tell whether it is
 * text; bounded by its size, which the caller checked against the limit. */
static int read_scan_text(int fd, uint64_t size, bool *ret_text, const char *path, struct err *e)
{
	static uint8_t buf[64 << 10];
	struct text_check t = { 0 };
	uint64_t off = 0;
	while (off < size && !t.bad) {
		size_t want = size - off < sizeof(buf) ? (size_t)(size - off) : sizeof(buf);
		ssize_t k = pread(fd, buf, want, (off_t)off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return err_sys(e, errno, "read `%s`", path);
		if (k == 0)
			break; /* shrank: the read itself finds out */
		text_check_feed(&t, buf, (size_t)k);
		off += (uint64_t)k;
	}
	*ret_text = text_check_ok(&t);
	return 0;
}

static void read_send_info(struct conn *c, uint32_t ch, uint64_t size, bool check_text, bool text)
{
	struct jw w;
	jw_init(&w);
	jw_obj_open(&w);
	jw_key(&w, "size");
	jw_int(&w, (int64_t)size);
	if (check_text) {
		jw_key(&w, "text");
		jw_bool(&w, text);
	}
	jw_obj_close(&w);
	conn_frame(c, GUEST_FILEINFO, ch, w.buf, w.len);
	jw_free(&w);
}

void op_read(struct conn *c, uint32_t ch, const struct req *r)
{
	struct agent *a = c->a;
	struct err e;
	struct wspath wp;
	if (wspath_init(agent_ws(a, r->any_path), r->path, &wp, &e) < 0) {
		conn_error(c, ch, &e);
		return;
	}
	/* O_NONBLOCK: opening a FIFO must not hang the agent. */
	_cleanup_close_ int fd =
		ws_open(agent_ws(a, r->any_path), &wp, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0, &e);
	if (fd < 0) {
		wspath_fini(&wp);
		conn_error(c, ch, &e);
		return;
	}
	struct stat st;
	bool text = false;
	int ret = 0;
	if (fstat(fd, &st) < 0)
		ret = err_sys(&e, errno, "stat `%s`", r->path);
	else if (S_ISDIR(st.st_mode))
		ret = err_set(&e, EISDIR, "`%s` is a directory", r->path);
	else if (!S_ISREG(st.st_mode))
		ret = err_set(&e, EINVAL, "`%s` is not a regular file", r->path);
	else if (r->u.read.max_bytes >= 0 && st.st_size > r->u.read.max_bytes)
		ret = err_set(&e, EFBIG, "`%s` is %lld bytes, over the limit of %lld", r->path,
			      (long long)st.st_size, (long long)r->u.read.max_bytes);
	else if (r->u.read.info && r->u.read.check_text)
		ret = read_scan_text(fd, (uint64_t)st.st_size, &text, r->path, &e);
	if (ret < 0) {
		wspath_fini(&wp);
		conn_error(c, ch, &e);
		return;
	}
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	struct read_op *x = xcalloc(1, sizeof(*x));
	x->fd = TAKE_FD(fd);
	x->rel = TAKE_PTR(wp.rel);
	x->max_bytes = r->u.read.max_bytes;
	x->announced = (uint64_t)st.st_size;
	x->check_text = text;
	x->mtime = st.st_mtim;
	/* Only a host that asks knows the frame: an older one would take it for a fault. */
	if (r->u.read.info)
		read_send_info(c, ch, x->announced, r->u.read.check_text, text);
	op_register(c, &x->op, &read_vt, ch);
}
