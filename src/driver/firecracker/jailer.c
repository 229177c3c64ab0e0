#include "driver/firecracker/jailer.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/cleanup.h"

struct argv_buf {
	char **v;
	size_t n;
};

static void push(struct argv_buf *a, char *s)
{
	a->v = xrealloc(a->v, (a->n + 2) * sizeof(char *));
	a->v[a->n++] = s;
	a->v[a->n] = NULL;
}

static void push_cgroup(struct argv_buf *a, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void push_cgroup(struct argv_buf *a, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	char *s = NULL;
	if (vasprintf(&s, fmt, ap) < 0)
		abort();
	va_end(ap);
	push(a, xstrdup("--cgroup"));
	push(a, s);
}

char **fc_jailer_argv(const struct fc_jail_spec *s)
{
	struct argv_buf a = { 0 };
	push(&a, xstrdup(s->jailer_bin));
	push(&a, xstrdup("--id"));
	push(&a, xstrdup(s->id));
	push(&a, xstrdup("--exec-file"));
	push(&a, xstrdup(s->fc_bin));
	push(&a, xstrdup("--uid"));
	push(&a, xasprintf("%u", s->uid));
	push(&a, xstrdup("--gid"));
	push(&a, xasprintf("%u", s->gid));
	push(&a, xstrdup("--chroot-base-dir"));
	push(&a, xstrdup(s->chroot_base));
	if (s->netns_path) {
		push(&a, xstrdup("--netns"));
		push(&a, xstrdup(s->netns_path));
	}
	push(&a, xstrdup("--cgroup-version"));
	push(&a, xasprintf("%d", s->cgroup_version));
	if (s->parent_cgroup) {
		push(&a, xstrdup("--parent-cgroup"));
		push(&a, xstrdup(s->parent_cgroup));
	}
	if (s->cgroup_version == 2) {
		if (s->memory_bytes) {
			push_cgroup(&a, "memory.max=%llu", (unsigned long long)s->memory_bytes);
			push_cgroup(&a, "memory.swap.max=0");
		}
		if (s->cpu_quota_us && s->cpu_period_us)
			push_cgroup(&a, "cpu.max=%llu %llu", (unsigned long long)s->cpu_quota_us,
				    (unsigned long long)s->cpu_period_us);
	} else {
		if (s->memory_bytes)
			push_cgroup(&a, "memory.limit_in_bytes=%llu",
				    (unsigned long long)s->memory_bytes);
		if (s->cpu_quota_us && s->cpu_period_us) {
			push_cgroup(&a, "cpu.cfs_period_us=%llu",
				    (unsigned long long)s->cpu_period_us);
			push_cgroup(&a, "cpu.cfs_quota_us=%llu",
				    (unsigned long long)s->cpu_quota_us);
		}
	}
	if (s->pids_max)
		push_cgroup(&a, "pids.max=%u", s->pids_max);
	if (s->nofile) {
		push(&a, xstrdup("--resource-limit"));
		push(&a, xasprintf("no-file=%u", s->nofile));
	}
	push(&a, xstrdup("--new-pid-ns"));
	push(&a, xstrdup("--"));
	push(&a, xstrdup("--api-sock"));
	push(&a, xstrdup(FC_API_SOCK));
	return a.v;
}

void fc_argv_free(char **argv)
{
	if (!argv)
		return;
	for (char **p = argv; *p; p++)
		free(*p);
	free(argv);
}

char *fc_jail_dir(const char *chroot_base, const char *fc_bin, const char *id)
{
	const char *exe = strrchr(fc_bin, '/') ? strrchr(fc_bin, '/') + 1 : fc_bin;
	return xasprintf("%s/%s/%s", chroot_base, exe, id);
}

int fc_copy_file(const char *src, const char *dst, mode_t mode)
{
	_cleanup_close_ int in = open(src, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	struct stat st;
	if (fstat(in, &st) < 0)
		return -errno;
	_cleanup_close_ int out = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
	if (out < 0)
		return -errno;
	off_t off = 0;
	while (off < st.st_size) {
		ssize_t n = sendfile(out, in, &off, (size_t)(st.st_size - off));
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
	}
	return 0;
}

int fc_jail_stage(const char *root, const char *src, const char *name, uid_t uid, gid_t gid,
		  mode_t mode, struct err *err)
{
	_cleanup_free_ char *dst = xasprintf("%s/%s", root, name);
	if (link(src, dst) < 0) {
		if (errno != EXDEV && errno != EPERM)
			return err_sys(err, errno, "cannot link `%s` into the jail", src);
		/* Another filesystem (or protected hard links): copy instead. */
		int r = fc_copy_file(src, dst, mode);
		if (r < 0)
			return err_sys(err, -r, "cannot copy `%s` into the jail", src);
	}
	/* A copy belongs to the jailed user. A hard link shares its inode with the template's
	 * file, which every jail reads: it stays root's, readable by the jail's group only. */
	struct stat st;
	if (stat(dst, &st) < 0)
		return err_sys(err, errno, "stat `%s`", dst);
	bool shared = st.st_nlink > 1;
	if (chown(dst, shared ? 0 : uid, gid) < 0 ||
	    chmod(dst, shared ? (mode & 0440) | 0040 : mode) < 0)
		return err_sys(err, errno, "cannot set owner and mode of `%s`", dst);
	return 0;
}
