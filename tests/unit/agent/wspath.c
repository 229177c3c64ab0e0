/* Tests of agent/wspath.c: lexical normalization and confined resolution, run once with
 * openat2 and once with the user-space walk. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sys/stat.h>
#include <unistd.h>

#include "wspath.h"

struct fixture {
	char dir[64];
	struct workspace ws;
};

static void mk(const char *dir, const char *rel, const char *link)
{
	char p[256];
	snprintf(p, sizeof(p), "%s/%s", dir, rel);
	if (!link)
		assert_int_equal(mkdir(p, 0755), 0);
	else if (strcmp(link, "FILE") == 0)
		close(open(p, O_CREAT | O_WRONLY, 0644));
	else
		assert_int_equal(symlink(link, p), 0);
}

static int setup(void **state, bool walk)
{
	struct fixture *f = calloc(1, sizeof(*f));
	snprintf(f->dir, sizeof(f->dir), "/tmp/wspath-test-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	mk(f->dir, "d", NULL);
	mk(f->dir, "d/f", "FILE");
	mk(f->dir, "d/sub", NULL);
	mk(f->dir, "in", "d/sub");      /* inside */
	mk(f->dir, "up", "d/..");       /* inside: the root */
	mk(f->dir, "abs", "/etc");      /* absolute: out */
	mk(f->dir, "out", "..");        /* out */
	mk(f->dir, "chain1", "chain2"); /* chain out */
	mk(f->dir, "chain2", "d/../..");
	mk(f->dir, "loop1", "loop2");
	mk(f->dir, "loop2", "loop1");
	mk(f->dir, "file", "FILE");
	mk(f->dir, "tofile", "d/f");
	struct err e;
	assert_int_equal(ws_init(&f->ws, f->dir, &e), 0);
	ws_force_walk = walk;
	*state = f;
	return 0;
}

static int setup_openat2(void **state)
{
	return setup(state, false);
}

static int setup_walk(void **state)
{
	return setup(state, true);
}

static int rm_cb(const char *p, const struct stat *st, int flag, struct FTW *ftw)
{
	remove(p);
	return 0;
}

static int teardown(void **state)
{
	struct fixture *f = *state;
	ws_fini(&f->ws);
	nftw(f->dir, rm_cb, 8, FTW_DEPTH | FTW_PHYS);
	free(f);
	ws_force_walk = false;
	return 0;
}

static void norm(struct fixture *f, const char *in, const char *want)
{
	struct wspath p;
	struct err e = { 0 };
	int r = wspath_init(&f->ws, in, &p, &e);
	if (!want) {
		assert_int_equal(r, -WS_ESCAPE);
		assert_non_null(strstr(e.msg, "escapes the workspace"));
		return;
	}
	if (r < 0)
		fprintf(stderr, "%s: %s\n", in, e.msg);
	assert_int_equal(r, 0);
	assert_string_equal(p.rel, want);
	wspath_fini(&p);
}

static void test_normalize(void **state)
{
	struct fixture *f = *state;
	char abs[300];
	norm(f, "a", "a");
	norm(f, "./a//b/", "a/b");
	norm(f, "a/./b/../c", "a/c");
	norm(f, ".", "");
	norm(f, "a/..", "");
	norm(f, "..", NULL);
	norm(f, "../x", NULL);
	norm(f, "a/../../x", NULL);
	norm(f, "/etc/passwd", NULL);
	norm(f, "/", NULL);
	snprintf(abs, sizeof(abs), "%s/x/y", f->ws.path);
	norm(f, abs, "x/y");
	snprintf(abs, sizeof(abs), "%s", f->ws.path);
	norm(f, abs, "");
	snprintf(abs, sizeof(abs), "%sx/y", f->ws.path); /* a sibling with a longer name */
	norm(f, abs, NULL);
	snprintf(abs, sizeof(abs), "%s/../x", f->ws.path);
	norm(f, abs, NULL);
	struct wspath p;
	struct err e;
	assert_int_equal(wspath_init(&f->ws, "", &p, &e), -EINVAL);
	char longname[300];
	memset(longname, 'a', 299);
	longname[299] = 0;
	assert_int_equal(wspath_init(&f->ws, longname, &p, &e), -ENAMETOOLONG);
}

static int try_open(struct fixture *f, const char *in, int flags)
{
	struct wspath p;
	struct err e = { 0 };
	int r = wspath_init(&f->ws, in, &p, &e);
	if (r < 0)
		return r;
	r = ws_open(&f->ws, &p, flags, 0644, &e);
	wspath_fini(&p);
	if (r >= 0)
		close(r);
	return r >= 0 ? 0 : r;
}

static void test_open(void **state)
{
	struct fixture *f = *state;
	assert_int_equal(try_open(f, "d/f", O_RDONLY), 0);
	assert_int_equal(try_open(f, ".", O_RDONLY | O_DIRECTORY), 0);
	assert_int_equal(try_open(f, "in", O_RDONLY | O_DIRECTORY), 0);
	assert_int_equal(try_open(f, "up/d/f", O_RDONLY), 0);
	assert_int_equal(try_open(f, "tofile", O_RDONLY), 0);
	/* ".." is resolved lexically first: "in/../f" is "f", not "d/sub/../f". */
	assert_int_equal(try_open(f, "in/../f", O_RDONLY), -ENOENT);
	assert_int_equal(try_open(f, "in/../d/f", O_RDONLY), 0);
	assert_int_equal(try_open(f, "in/../../x", O_RDONLY), -WS_ESCAPE);
	assert_int_equal(try_open(f, "abs", O_RDONLY), -WS_ESCAPE);
	assert_int_equal(try_open(f, "abs/passwd", O_RDONLY), -WS_ESCAPE);
	assert_int_equal(try_open(f, "out", O_RDONLY | O_DIRECTORY), -WS_ESCAPE);
	assert_int_equal(try_open(f, "out/x", O_RDONLY), -WS_ESCAPE);
	assert_int_equal(try_open(f, "chain1/etc", O_RDONLY), -WS_ESCAPE);
	assert_int_equal(try_open(f, "chain1", O_RDONLY), -WS_ESCAPE);
	assert_int_equal(try_open(f, "loop1", O_RDONLY), -ELOOP);
	assert_int_equal(try_open(f, "missing", O_RDONLY), -ENOENT);
	assert_int_equal(try_open(f, "file/x", O_RDONLY), -ENOTDIR);
	assert_int_equal(try_open(f, "tofile", O_RDONLY | O_NOFOLLOW), -ELOOP);
	assert_int_equal(try_open(f, "file", O_RDONLY | O_DIRECTORY), -ENOTDIR);
	assert_int_equal(try_open(f, "in", O_PATH | O_NOFOLLOW), 0);
	assert_int_equal(try_open(f, "d/new", O_WRONLY | O_CREAT | O_EXCL), 0);
	assert_int_equal(try_open(f, "in/new", O_WRONLY | O_CREAT | O_EXCL), 0);
	assert_int_equal(try_open(f, "in/new", O_WRONLY | O_CREAT | O_EXCL), -EEXIST);
	assert_int_equal(try_open(f, "out/new", O_WRONLY | O_CREAT), -WS_ESCAPE);
}

static void test_parent(void **state)
{
	struct fixture *f = *state;
	struct wspath p;
	struct err e;
	const char *base;
	assert_int_equal(wspath_init(&f->ws, "x/y/z/file", &p, &e), 0);
	assert_int_equal(ws_open_parent(&f->ws, &p, false, &base, &e), -ENOENT);
	int fd = ws_open_parent(&f->ws, &p, true, &base, &e);
	assert_true(fd >= 0);
	assert_string_equal(base, "file");
	close(fd);
	wspath_fini(&p);
	struct stat st;
	char path[300];
	snprintf(path, sizeof(path), "%s/x/y/z", f->dir);
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 0777, 0755);

	assert_int_equal(wspath_init(&f->ws, "in/new/dir/f", &p, &e), 0);
	fd = ws_open_parent(&f->ws, &p, true, &base, &e);
	assert_true(fd >= 0);
	close(fd);
	wspath_fini(&p);
	snprintf(path, sizeof(path), "%s/d/sub/new/dir", f->dir);
	assert_int_equal(stat(path, &st), 0);

	assert_int_equal(wspath_init(&f->ws, "out/new/f", &p, &e), 0);
	assert_int_equal(ws_open_parent(&f->ws, &p, true, &base, &e), -WS_ESCAPE);
	wspath_fini(&p);
	assert_int_equal(wspath_init(&f->ws, "file/new/f", &p, &e), 0);
	assert_int_equal(ws_open_parent(&f->ws, &p, true, &base, &e), -ENOTDIR);
	wspath_fini(&p);
	assert_int_equal(wspath_init(&f->ws, "top", &p, &e), 0);
	fd = ws_open_parent(&f->ws, &p, false, &base, &e);
	assert_true(fd >= 0);
	assert_string_equal(base, "top");
	close(fd);
	wspath_fini(&p);
	assert_int_equal(wspath_init(&f->ws, ".", &p, &e), 0);
	assert_int_equal(ws_open_parent(&f->ws, &p, false, &base, &e), -EINVAL);
	wspath_fini(&p);
}

/* The sandbox's whole tree (E2B's view): any path, ".." stopping at the root, absolute
 * symlinks followed from it; the agent's own /proc entries refused, by any way there. */
static void test_root(void **state)
{
	struct fixture *f = *state;
	struct workspace root;
	struct err e;
	assert_int_equal(ws_init_root(&root, &e), 0);
	assert_true(root.in_root);
	struct fixture rf = *f;
	rf.ws = root;
	char p[300];
	assert_int_equal(try_open(&rf, "/etc/passwd", O_RDONLY), 0);
	assert_int_equal(try_open(&rf, "/../../etc/passwd", O_RDONLY), 0);
	assert_int_equal(try_open(&rf, "etc/passwd", O_RDONLY), 0);
	snprintf(p, sizeof(p), "%s/abs/passwd", f->dir); /* abs -> /etc */
	assert_int_equal(try_open(&rf, p, O_RDONLY), 0);
	snprintf(p, sizeof(p), "%s/out", f->dir); /* out -> .. */
	assert_int_equal(try_open(&rf, p, O_RDONLY | O_DIRECTORY), 0);
	snprintf(p, sizeof(p), "%s/loop1", f->dir);
	assert_int_equal(try_open(&rf, p, O_RDONLY), -ELOOP);
	assert_int_equal(try_open(&rf, "/missing/x", O_RDONLY), -ENOENT);
	assert_int_equal(try_open(&rf, "/proc/self/environ", O_RDONLY), -EACCES);
	assert_int_equal(try_open(&rf, "/proc/thread-self/status", O_RDONLY), -EACCES);
	snprintf(p, sizeof(p), "/proc/%d/maps", (int)getpid());
	assert_int_equal(try_open(&rf, p, O_RDONLY), -EACCES);
	snprintf(p, sizeof(p), "/proc/%d", (int)getpid());
	assert_int_equal(try_open(&rf, p, O_RDONLY | O_DIRECTORY), -EACCES);
	mk(f->dir, "me", "/proc/self/environ");
	snprintf(p, sizeof(p), "%s/me", f->dir);
	assert_int_equal(try_open(&rf, p, O_RDONLY), -EACCES);
	/* Other /proc entries are the sandbox's, not the agent's. */
	assert_int_equal(try_open(&rf, "/proc/cpuinfo", O_RDONLY), 0);

	/* Missing directories are made where the user could not, and given to the user, as
	 * E2B's envd makes them; in a workspace they are the user's own making. */
	assert_int_equal(chmod(f->dir, 0755), 0);
	setfsgid(1000);
	setfsuid(1000);
	struct wspath wp;
	const char *base;
	snprintf(p, sizeof(p), "%s/made/deeper/file", f->dir);
	assert_int_equal(wspath_init(&root, p, &wp, &e), 0);
	int dfd = ws_open_parent(&root, &wp, true, &base, &e);
	wspath_fini(&wp);
	assert_int_equal(ws_open_parent(&f->ws, &(struct wspath){ .rel = "mine/file", .orig = "x" },
					true, &base, &e),
			 -EACCES);
	setfsuid(0);
	setfsgid(0);
	assert_true(dfd >= 0);
	close(dfd);
	struct stat st;
	snprintf(p, sizeof(p), "%s/made", f->dir);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_uid, 1000);
	assert_int_equal(st.st_gid, 1000);
	snprintf(p, sizeof(p), "%s/made/deeper", f->dir);
	assert_int_equal(stat(p, &st), 0);
	assert_int_equal(st.st_uid, 1000);
	ws_fini(&root);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_normalize, setup_openat2, teardown),
		cmocka_unit_test_setup_teardown(test_open, setup_openat2, teardown),
		cmocka_unit_test_setup_teardown(test_parent, setup_openat2, teardown),
		cmocka_unit_test_setup_teardown(test_open, setup_walk, teardown),
		cmocka_unit_test_setup_teardown(test_parent, setup_walk, teardown),
		cmocka_unit_test_setup_teardown(test_root, setup_openat2, teardown),
		cmocka_unit_test_setup_teardown(test_root, setup_walk, teardown),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
