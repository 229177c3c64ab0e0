#include "driver/cgroup.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/magic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "util/cleanup.h"

#ifndef CGROUP2_SUPER_MAGIC
#define CGROUP2_SUPER_MAGIC 0x63677270
#endif
#ifndef CGROUP_SUPER_MAGIC
#define CGROUP_SUPER_MAGIC 0x27e0eb
#endif

/* The controllers every sandbox is limited by; v1 slots follow this order. */
static const char *const controllers[CGROUP_V1_MAX] = { "memory", "cpu", "pids" };
enum { CTL_MEMORY, CTL_CPU, CTL_PIDS };

/* The inode of the initial cgroup namespace (the kernel's PROC_CGROUP_INIT_INO). */
#define CGROUP_NS_INIT_INO 0xEFFFFFFBU

/* How long cgroup_remove waits for killed processes to leave before giving up. */
#define REMOVE_WAIT_MS 2000

bool cgroup_id_valid(const char *id)
{
	size_t n = id ? strlen(id) : 0;
	if (n == 0 || n > 40 || id[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = id[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-'))
			return false;
	}
	return true;
}

/* Writes `val` to <dir>/<file>. Control files are never created on a real hierarchy. */
static int cg_write(bool plain, const char *dir, const char *file, const char *val, struct err *err)
{
	_cleanup_free_ char *p = xasprintf("%s/%s", dir, file);
	int flags = O_WRONLY | O_CLOEXEC | (plain ? O_CREAT | O_TRUNC : 0);
	_cleanup_close_ int fd = open(p, flags, 0644);
	if (fd < 0)
		return err_sys(err, errno, "cgroup: open `%s`", p);
	size_t len = strlen(val);
	ssize_t w = write(fd, val, len);
	if (w < 0)
		return err_sys(err, errno, "cgroup: write `%s` to `%s`", val, p);
	if ((size_t)w != len)
		return err_set(err, EIO, "cgroup: short write to `%s`", p);
	return 0;
}

/* Reads <dir>/<file> (or `dir` alone when file is NULL) into a NUL-terminated buffer. */
static int cg_read(const char *dir, const char *file, char **ret, struct err *err)
{
	_cleanup_free_ char *p = file ? xasprintf("%s/%s", dir, file) : xstrdup(dir);
	_cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return err_sys(err, errno, "cgroup: open `%s`", p);
	size_t cap = 4096, len = 0;
	_cleanup_free_ char *buf = xmalloc(cap);
	for (;;) {
		if (cap - len < 2)
			buf = xrealloc(buf, cap *= 2);
		ssize_t r = read(fd, buf + len, cap - len - 1);
		if (r < 0) {
			if (errno == EINTR)
				continue;
			return err_sys(err, errno, "cgroup: read `%s`", p);
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	buf[len] = '\0';
	*ret = TAKE_PTR(buf);
	return 0;
}

/* Whether optional control file <dir>/<file> exists (always, in a plain tree). */
static bool cg_has(bool plain, const char *dir, const char *file)
{
	if (plain)
		return true;
	_cleanup_free_ char *p = xasprintf("%s/%s", dir, file);
	return access(p, F_OK) == 0;
}

/* Whether the space-separated list `s` holds `word`. */
static bool has_word(const char *s, const char *word)
{
	size_t n = strlen(word);
	for (const char *p = s; (p = strstr(p, word)); p += n) {
		bool start = p == s || p[-1] == ' ' || p[-1] == '\n' || p[-1] == '+';
		bool end = p[n] == '\0' || p[n] == ' ' || p[n] == '\n';
		if (start && end)
			return true;
	}
	return false;
}

static void root_init(struct cgroup_root *r, const char *path, enum cgroup_version v, bool plain)
{
	memset(r, 0, sizeof(*r));
	r->version = v;
	r->path = xstrdup(path);
	r->rel = xstrdup("");
	r->plain = plain;
}

static enum cgroup_delegation delegation = CGROUP_DELEGATION_AUTO;

void cgroup_configure(enum cgroup_delegation d)
{
	delegation = d;
}

/* The daemon's own cgroup in the v2 hierarchy ("0::/system.slice/x.service"), without the
 * leaf it moved itself into; NULL when it cannot be read. */
static char *own_cgroup(void)
{
	_cleanup_free_ char *buf = NULL;
	if (cg_read("/proc/self/cgroup", NULL, &buf, NULL) < 0)
		return NULL;
	char *line = strstr(buf, "0::");
	if (!line || (line != buf && line[-1] != '\n'))
		return NULL;
	line += 3;
	line[strcspn(line, "\n")] = '\0';
	size_t len = strlen(line);
	if (line[0] != '/' || strstr(line, "/../") || strstr(line, "/./") ||
	    (len >= 3 && strcmp(line + len - 3, "/..") == 0) ||
	    (len >= 2 && strcmp(line + len - 2, "/.") == 0))
		return NULL;
	size_t n = strlen(line), leaf = strlen("/" CGROUP_DAEMON_LEAF);
	if (n > leaf && strcmp(line + n - leaf, "/" CGROUP_DAEMON_LEAF) == 0)
		line[n - leaf] = '\0';
	return xstrdup(line);
}

/* Whether systemd delegated `dir`: it sets trusted.delegate (user.delegate for a user's
 * manager) to "1" on the cgroup of a unit with Delegate=yes (systemd 251 and later). */
static bool marked_delegated(const char *dir)
{
	static const char *const names[] = { "trusted.delegate", "user.delegate" };
	for (size_t i = 0; i < ARRAY_SIZE(names); i++) {
		char v[8];
		ssize_t n = getxattr(dir, names[i], v, sizeof(v));
		if (n == 1 && v[0] == '1')
			return true;
	}
	return false;
}

/* A v2 root becomes the daemon's own cgroup when that is delegated (or said to be). */
static void choose_delegation(struct cgroup_root *r)
{
	if (delegation == CGROUP_DELEGATION_OFF)
		return;
	_cleanup_free_ char *own = own_cgroup();
	if (!own)
		return;
	bool top = strcmp(own, "/") == 0;
	/* The top of the initial cgroup namespace is the host's root cgroup: its processes are
	 * the host's, never to be moved into a leaf of ours. */
	struct stat ns;
	if (top && (stat("/proc/self/ns/cgroup", &ns) < 0 || ns.st_ino == CGROUP_NS_INIT_INO))
		return;
	_cleanup_free_ char *dir = top ? xstrdup(r->path) : xasprintf("%s%s", r->path, own);
	if (delegation == CGROUP_DELEGATION_AUTO && (top || !marked_delegated(dir)))
		return;
	free(r->path);
	free(r->rel);
	r->path = TAKE_PTR(dir);
	r->rel = top ? xstrdup("") : TAKE_PTR(own);
	r->delegated = true;
}

int cgroup_root_detect(const char *path, struct cgroup_root *ret, struct err *err)
{
	struct statfs st;
	if (statfs(path, &st) < 0)
		return err_sys(err, errno, "cgroup: statfs `%s`", path);

	struct cgroup_root r;
	if (st.f_type == CGROUP2_SUPER_MAGIC) {
		root_init(&r, path, CGROUP_V2, false);
		choose_delegation(&r);
		*ret = r;
		return 0;
	}

	/* v1 (or hybrid, where the controllers live in the v1 hierarchies): one mount per
	 * controller, usually <path>/<controller>, possibly a symlink to a co-mount. */
	root_init(&r, path, CGROUP_V1, false);
	for (unsigned i = 0; i < CGROUP_V1_MAX; i++) {
		_cleanup_free_ char *p = xasprintf("%s/%s", path, controllers[i]);
		if (statfs(p, &st) < 0 || st.f_type != CGROUP_SUPER_MAGIC) {
			cgroup_root_free(&r);
			return err_set(err, ENOENT,
				       "cgroup: `%s` is not a cgroup2 mount and has no v1 `%s` "
				       "hierarchy: mount the %s controller",
				       path, controllers[i], controllers[i]);
		}
		char *real = realpath(p, NULL);
		r.ctl_dir[i] = real ? real : xstrdup(p);
	}
	r.n_ctl = CGROUP_V1_MAX;
	/* The freezer is optional: without it sessions cannot be paused. */
	_cleanup_free_ char *fz = xasprintf("%s/freezer", path);
	if (statfs(fz, &st) == 0 && st.f_type == CGROUP_SUPER_MAGIC) {
		char *real = realpath(fz, NULL);
		r.freezer_dir = real ? real : xstrdup(fz);
	}
	*ret = r;
	return 0;
}

void cgroup_root_plain(const char *path, enum cgroup_version version, struct cgroup_root *ret)
{
	root_init(ret, path, version, true);
	if (version == CGROUP_V1) {
		for (unsigned i = 0; i < CGROUP_V1_MAX; i++) {
			/* Resolved as detection does, so a symlink stands for a co-mount. */
			_cleanup_free_ char *p = xasprintf("%s/%s", path, controllers[i]);
			char *real = realpath(p, NULL);
			ret->ctl_dir[i] = real ? real : xstrdup(p);
		}
		ret->n_ctl = CGROUP_V1_MAX;
		_cleanup_free_ char *fz = xasprintf("%s/freezer", path);
		if (access(fz, F_OK) == 0)
			ret->freezer_dir = xstrdup(fz);
	}
}

void cgroup_root_plain_delegated(const char *path, struct cgroup_root *ret)
{
	root_init(ret, path, CGROUP_V2, true);
	ret->delegated = true;
}

char *cgroup_root_describe(const struct cgroup_root *root)
{
	if (root->version == CGROUP_V1)
		return xasprintf("v1 (%s/{memory,cpu,pids}/" CGROUP_PARENT ")", root->path);
	if (root->delegated)
		return xasprintf("v2, delegated: %s/" CGROUP_PARENT
				 " (sandboxd in %s/" CGROUP_DAEMON_LEAF ")",
				 root->path, root->path);
	return xasprintf("v2: %s/" CGROUP_PARENT, root->path);
}

void cgroup_root_free(struct cgroup_root *root)
{
	if (!root)
		return;
	free(root->path);
	free(root->rel);
	for (unsigned i = 0; i < CGROUP_V1_MAX; i++)
		free(root->ctl_dir[i]);
	free(root->freezer_dir);
	memset(root, 0, sizeof(*root));
}

int cgroup_check(const struct cgroup_root *root, struct err *err)
{
	if (root->version == CGROUP_V1) {
		for (unsigned i = 0; i < root->n_ctl; i++) {
			struct stat st;
			if (stat(root->ctl_dir[i], &st) < 0 || !S_ISDIR(st.st_mode))
				return err_set(err, ENOENT, "cgroup: no v1 `%s` hierarchy at `%s`",
					       controllers[i], root->ctl_dir[i]);
		}
		return 0;
	}

	_cleanup_free_ char *avail = NULL;
	int r = cg_read(root->path, "cgroup.controllers", &avail, err);
	if (r < 0)
		return r;
	for (unsigned i = 0; i < CGROUP_V1_MAX; i++)
		if (!has_word(avail, controllers[i]))
			return err_set(
				err, ENOENT,
				"cgroup: the `%s` controller is not available in `%s` (it may "
				"be bound to a v1 hierarchy)",
				controllers[i], root->path);
	return 0;
}

static int mkdir_parent(const char *dir, struct err *err)
{
	if (mkdir(dir, 0755) < 0 && errno != EEXIST)
		return err_sys(err, errno, "cgroup: mkdir `%s`", dir);
	return 0;
}

/* Enables memory, cpu and pids for the children of `dir` unless already enabled. */
static int enable_controllers(const struct cgroup_root *root, const char *dir, struct err *err)
{
	_cleanup_free_ char *cur = NULL;
	if (!root->plain || access(dir, F_OK) == 0) {
		struct err ignored;
		if (cg_read(dir, "cgroup.subtree_control", &cur, &ignored) < 0)
			cur = NULL;
	}
	if (cur && has_word(cur, "memory") && has_word(cur, "cpu") && has_word(cur, "pids"))
		return 0;
	int r = cg_write(root->plain, dir, "cgroup.subtree_control", "+memory +cpu +pids", err);
	if (r < 0)
		return err_wrap(err, "cgroup: cannot enable the memory, cpu and pids controllers");
	return 0;
}

/* Delegated: every process of the daemon's own cgroup (the daemon, its spawner, anything
 * else of the unit's) into the leaf, which a cgroup must be empty of before it may enable
 * controllers for its children. Repeated while a process forks meanwhile, a bounded time. */
static int move_into_leaf(const struct cgroup_root *root, struct err *err)
{
	_cleanup_free_ char *leaf = xasprintf("%s/" CGROUP_DAEMON_LEAF, root->path);
	int r = mkdir_parent(leaf, err);
	if (r < 0)
		return r;
	for (int round = 0; round < 16; round++) {
		_cleanup_free_ char *procs = NULL;
		if ((r = cg_read(root->path, "cgroup.procs", &procs, err)) < 0)
			return r;
		if (root->plain) {
			/* A plain tree's list is a file: moved whole, then emptied. */
			if ((r = cg_write(true, leaf, "cgroup.procs", procs, err)) < 0 ||
			    (r = cg_write(true, root->path, "cgroup.procs", "", err)) < 0)
				return r;
			return 0;
		}
		if (!*procs)
			return 0;
		char *save = NULL;
		for (char *pid = strtok_r(procs, "\n", &save); pid;
		     pid = strtok_r(NULL, "\n", &save)) {
			struct err e;
			/* Gone meanwhile: nothing to move. */
			if (cg_write(false, leaf, "cgroup.procs", pid, &e) < 0 &&
			    e.errnum != ESRCH && e.errnum != EINVAL)
				return err_set(err, e.errnum,
					       "cgroup: cannot move process %s into `%s`: %s", pid,
					       leaf, e.msg);
		}
	}
	return err_set(err, EBUSY,
		       "cgroup: `%s` still has processes after 16 rounds of moving "
		       "them into its leaf",
		       root->path);
}

int cgroup_init(const struct cgroup_root *root, struct err *err)
{
	int r;
	if (root->version == CGROUP_V1) {
		for (unsigned i = 0; i < root->n_ctl; i++) {
			_cleanup_free_ char *p = xasprintf("%s/" CGROUP_PARENT, root->ctl_dir[i]);
			if ((r = mkdir_parent(p, err)) < 0)
				return r;
		}
		if (root->freezer_dir) {
			_cleanup_free_ char *p = xasprintf("%s/" CGROUP_PARENT, root->freezer_dir);
			if ((r = mkdir_parent(p, err)) < 0)
				return r;
		}
		return 0;
	}

	if (root->delegated && (r = move_into_leaf(root, err)) < 0)
		return r;
	/* A v2 controller reaches agent-sandbox/<id> only when every ancestor enables it (a
	 * delegated cgroup's ancestors are systemd's, which enabled what it delegated). */
	if ((r = enable_controllers(root, root->path, err)) < 0)
		return r;
	_cleanup_free_ char *parent = xasprintf("%s/" CGROUP_PARENT, root->path);
	if ((r = mkdir_parent(parent, err)) < 0)
		return r;
	return enable_controllers(root, parent, err);
}

static struct cgroup *cgroup_new(const struct cgroup_root *root, const char *id)
{
	struct cgroup *cg = xcalloc(1, sizeof(*cg));
	cg->version = root->version;
	cg->plain = root->plain;
	cg->id = xstrdup(id);
	if (root->version == CGROUP_V2) {
		cg->dir[cg->n++] = xasprintf("%s/" CGROUP_PARENT "/%s", root->path, id);
		for (unsigned i = 0; i < CGROUP_V1_MAX; i++)
			cg->ctl[i] = xstrdup(cg->dir[0]);
		cg->oom_file = xasprintf("%s/memory.events", cg->dir[0]);
		cg->freezer = xstrdup(cg->dir[0]);
	} else {
		for (unsigned i = 0; i < root->n_ctl; i++) {
			cg->ctl[i] = xasprintf("%s/" CGROUP_PARENT "/%s", root->ctl_dir[i], id);
			/* Co-mounted controllers share one directory: list each once. */
			bool dup = false;
			for (unsigned j = 0; j < cg->n; j++)
				dup = dup || strcmp(cg->dir[j], cg->ctl[i]) == 0;
			if (!dup)
				cg->dir[cg->n++] = xstrdup(cg->ctl[i]);
		}
		cg->oom_file = xasprintf("%s/memory.oom_control", cg->ctl[CTL_MEMORY]);
		if (root->freezer_dir) {
			cg->freezer = xasprintf("%s/" CGROUP_PARENT "/%s", root->freezer_dir, id);
			bool dup = false;
			for (unsigned j = 0; j < cg->n; j++)
				dup = dup || strcmp(cg->dir[j], cg->freezer) == 0;
			if (!dup)
				cg->dir[cg->n++] = xstrdup(cg->freezer);
		}
	}
	for (unsigned i = 0; i < cg->n; i++)
		cg->procs[i] = xasprintf("%s/cgroup.procs", cg->dir[i]);
	return cg;
}

int cgroup_open(const struct cgroup_root *root, const char *id, struct cgroup **ret,
		struct err *err)
{
	if (!cgroup_id_valid(id))
		return err_set(err, EINVAL, "cgroup: invalid sandbox id `%s`", id ? id : "");
	*ret = cgroup_new(root, id);
	return 0;
}

int cgroup_open_path(const struct cgroup_root *root, const char *id, const char *dir,
		     struct cgroup **ret, struct err *err)
{
	if (!cgroup_id_valid(id))
		return err_set(err, EINVAL, "cgroup: invalid sandbox id `%s`", id ? id : "");
	if (root->version != CGROUP_V2)
		return err_set(err, EINVAL, "cgroup: a recorded directory on v1");
	_cleanup_free_ char *suffix = xasprintf("/" CGROUP_PARENT "/%s", id);
	size_t n = dir ? strlen(dir) : 0, m = strlen(suffix);
	bool ok = n > m && n < PATH_MAX &&
		  strncmp(dir, CGROUP_ROOT "/", strlen(CGROUP_ROOT) + 1) == 0 &&
		  strcmp(dir + n - m, suffix) == 0 && !strstr(dir, "/../") && !strstr(dir, "/./") &&
		  !strstr(dir, "//");
	if (!ok)
		return err_set(err, EINVAL, "cgroup: `%.200s` is not a cgroup of sandbox %s",
			       dir ? dir : "", id);
	struct cgroup *cg = cgroup_new(root, id);
	free(cg->dir[0]);
	free(cg->procs[0]);
	free(cg->oom_file);
	free(cg->freezer);
	cg->dir[0] = xstrdup(dir);
	cg->procs[0] = xasprintf("%s/cgroup.procs", dir);
	cg->oom_file = xasprintf("%s/memory.events", dir);
	cg->freezer = xstrdup(dir);
	for (unsigned i = 0; i < CGROUP_V1_MAX; i++) {
		free(cg->ctl[i]);
		cg->ctl[i] = xstrdup(dir);
	}
	*ret = cg;
	return 0;
}

void cgroup_free(struct cgroup *cg)
{
	if (!cg)
		return;
	for (unsigned i = 0; i < CGROUP_DIRS_MAX; i++) {
		free(cg->dir[i]);
		free(cg->procs[i]);
	}
	for (unsigned i = 0; i < CGROUP_V1_MAX; i++)
		free(cg->ctl[i]);
	free(cg->freezer);
	free(cg->oom_file);
	free(cg->id);
	free(cg);
}

uint64_t cgroup_tcp_limit(uint64_t memory_bytes)
{
	uint64_t q = memory_bytes / 4;
	return q < CGROUP_TCP_MIN ? CGROUP_TCP_MIN : q;
}

static int apply_limits(const struct cgroup *cg, const struct cgroup_limits *l, struct err *err)
{
	bool plain = cg->plain;
	char val[64];
	int r;

	if (l->memory_bytes) {
		const char *d = cg->ctl[CTL_MEMORY];
		snprintf(val, sizeof(val), "%" PRIu64, l->memory_bytes);
		if (cg->version == CGROUP_V2) {
			if ((r = cg_write(plain, d, "memory.max", val, err)) < 0)
				return r;
			/* Swapping would let a sandbox exceed its memory limit. */
			if (cg_has(plain, d, "memory.swap.max") &&
			    (r = cg_write(plain, d, "memory.swap.max", "0", err)) < 0)
				return r;
		} else {
			if ((r = cg_write(plain, d, "memory.limit_in_bytes", val, err)) < 0)
				return r;
			/* memsw counts memory + swap: equal to the memory limit means no swap.
			 * It must never be below limit_in_bytes, hence the order. */
			if (cg_has(plain, d, "memory.memsw.limit_in_bytes") &&
			    (r = cg_write(plain, d, "memory.memsw.limit_in_bytes", val, err)) < 0)
				return r;
			/* v1 counts socket buffers apart from the memory above, and only once a
			 * limit is written: without it a sandbox's connections take what the
			 * host-wide tcp_mem allows, which every socket on the host shares. (v2
			 * charges them to memory.max.) */
			if (cg_has(plain, d, "memory.kmem.tcp.limit_in_bytes")) {
				snprintf(val, sizeof(val), "%" PRIu64,
					 cgroup_tcp_limit(l->memory_bytes));
				if ((r = cg_write(plain, d, "memory.kmem.tcp.limit_in_bytes", val,
						  err)) < 0)
					return r;
			}
		}
	}

	if (l->cpu_quota_us) {
		const char *d = cg->ctl[CTL_CPU];
		uint64_t period = l->cpu_period_us ? l->cpu_period_us : 100000;
		if (cg->version == CGROUP_V2) {
			snprintf(val, sizeof(val), "%" PRIu64 " %" PRIu64, l->cpu_quota_us, period);
			if ((r = cg_write(plain, d, "cpu.max", val, err)) < 0)
				return r;
		} else {
			snprintf(val, sizeof(val), "%" PRIu64, period);
			if ((r = cg_write(plain, d, "cpu.cfs_period_us", val, err)) < 0)
				return r;
			snprintf(val, sizeof(val), "%" PRIu64, l->cpu_quota_us);
			if ((r = cg_write(plain, d, "cpu.cfs_quota_us", val, err)) < 0)
				return r;
		}
	}

	if (l->pids_max) {
		snprintf(val, sizeof(val), "%" PRIu32, l->pids_max);
		if ((r = cg_write(plain, cg->ctl[CTL_PIDS], "pids.max", val, err)) < 0)
			return r;
	}
	return 0;
}

int cgroup_create(const struct cgroup_root *root, const char *id,
		  const struct cgroup_limits *limits, struct cgroup **ret, struct err *err)
{
	if (!cgroup_id_valid(id))
		return err_set(err, EINVAL, "cgroup: invalid sandbox id `%s`", id ? id : "");

	struct cgroup *cg = cgroup_new(root, id);
	unsigned made = 0;
	int r;
	for (; made < cg->n; made++) {
		if (mkdir(cg->dir[made], 0755) == 0)
			continue;
		if (errno == EEXIST)
			r = err_set(err, EEXIST,
				    "cgroup: `%s` already exists: an earlier run left it behind",
				    cg->dir[made]);
		else
			r = err_sys(err, errno, "cgroup: mkdir `%s`", cg->dir[made]);
		goto err;
	}
	if ((r = apply_limits(cg, limits, err)) < 0)
		goto err;
	*ret = cg;
	return 0;

err:
	/* Only the directories made here: an existing one belongs to someone else's run. */
	cg->n = made;
	cgroup_remove(cg, NULL);
	cgroup_free(cg);
	return r;
}

int cgroup_enter(const struct cgroup *cg, pid_t pid, struct err *err)
{
	char val[32];
	snprintf(val, sizeof(val), "%d", (int)pid);
	for (unsigned i = 0; i < cg->n; i++) {
		int r = cg_write(cg->plain, cg->dir[i], "cgroup.procs", val, err);
		if (r < 0)
			return r;
	}
	return 0;
}

uint64_t cgroup_oom_kills(const struct cgroup *cg)
{
	if (!cg || !cg->oom_file)
		return 0;
	_cleanup_free_ char *buf = NULL;
	if (cg_read(cg->oom_file, NULL, &buf, NULL) < 0)
		return 0;
	for (const char *line = buf; line; line = strchr(line, '\n')) {
		line += *line == '\n';
		if (strncmp(line, "oom_kill ", 9) == 0)
			return strtoull(line + 9, NULL, 10);
	}
	return 0;
}

/* The value of `key` in a flat keyed file ("key value" lines); false when absent. */
static bool keyed_value(const char *buf, const char *key, uint64_t *ret)
{
	size_t n = strlen(key);
	for (const char *line = buf; line && *line; line = strchr(line, '\n')) {
		line += *line == '\n';
		if (strncmp(line, key, n) == 0 && line[n] == ' ') {
			*ret = strtoull(line + n + 1, NULL, 10);
			return true;
		}
	}
	return false;
}

/* The single number a file holds. */
static int read_number(const char *dir, const char *file, uint64_t *ret, struct err *err)
{
	_cleanup_free_ char *buf = NULL;
	int r = cg_read(dir, file, &buf, err);
	if (r < 0)
		return r;
	char *end;
	errno = 0;
	*ret = strtoull(buf, &end, 10);
	if (errno || end == buf)
		return err_set(err, EIO, "cgroup: `%s/%s` holds no number", dir, file);
	return 0;
}

/* A process's CPU time and its waited-for children's (/proc/<pid>/stat: utime, stime, cutime,
 * cstime), in clock ticks; 0 when it is gone. */
static uint64_t proc_ticks(const char *pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%s/stat", pid);
	_cleanup_free_ char *buf = NULL;
	if (cg_read(path, NULL, &buf, NULL) < 0)
		return 0;
	const char *p = strrchr(buf, ')');
	if (!p)
		return 0;
	/* After the name: field 3 (state) onwards; utime is field 14. */
	uint64_t sum = 0;
	for (int field = 3; field <= 17 && p; field++) {
		p = strchr(p + 1, ' ');
		if (p && field >= 14)
			sum += strtoull(p + 1, NULL, 10);
	}
	return sum;
}

/* CPU time of the processes in the cgroup now, for a v1 host whose cpuacct is not mounted
 * with cpu: what has ended without being waited for inside is not counted. */
static uint64_t procs_cpu_usec(const char *dir)
{
	_cleanup_free_ char *procs = NULL;
	if (cg_read(dir, "cgroup.procs", &procs, NULL) < 0)
		return 0;
	long hz = sysconf(_SC_CLK_TCK);
	uint64_t ticks = 0;
	char *save = NULL;
	for (char *pid = strtok_r(procs, "\n", &save); pid; pid = strtok_r(NULL, "\n", &save))
		ticks += proc_ticks(pid);
	return hz > 0 ? ticks * (1000000 / (uint64_t)hz) : 0;
}

int cgroup_usage(const struct cgroup *cg, struct cgroup_usage *ret, struct err *err)
{
	*ret = (struct cgroup_usage){ 0 };
	const char *mem = cg->ctl[CTL_MEMORY], *cpu = cg->ctl[CTL_CPU];
	_cleanup_free_ char *stat = NULL;
	int r;
	if (cg->version == CGROUP_V2) {
		if ((r = read_number(mem, "memory.current", &ret->memory_bytes, err)) < 0)
			return r;
		if (cg_read(mem, "memory.stat", &stat, NULL) == 0)
			keyed_value(stat, "file", &ret->cache_bytes);
		_cleanup_free_ char *cs = NULL;
		if (cg_read(cpu, "cpu.stat", &cs, NULL) == 0)
			ret->has_cpu = keyed_value(cs, "usage_usec", &ret->cpu_usec);
		return 0;
	}
	if ((r = read_number(mem, "memory.usage_in_bytes", &ret->memory_bytes, err)) < 0)
		return r;
	if (cg_read(mem, "memory.stat", &stat, NULL) == 0)
		keyed_value(stat, "total_cache", &ret->cache_bytes);
	uint64_t ns;
	if (read_number(cpu, "cpuacct.usage", &ns, NULL) == 0) {
		ret->cpu_usec = ns / 1000;
	} else {
		ret->cpu_usec = procs_cpu_usec(mem);
		ret->approximate = true;
	}
	ret->has_cpu = true;
	return 0;
}

/* Whether /proc/<pid>/cgroup places the process in a directory ending in `suffix`. */
static bool pid_in_cgroup(pid_t pid, const char *suffix)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	_cleanup_free_ char *buf = NULL;
	if (cg_read(path, NULL, &buf, NULL) < 0)
		return false;
	size_t n = strlen(suffix);
	char *save = NULL;
	for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		size_t len = strlen(line);
		/* A suffix check: the hierarchy root may be deeper in a nested cgroup namespace. */
		if (len > n && strcmp(line + len - n, suffix) == 0 &&
		    (line[len - n - 1] == ':' || line[len - n - 1] == '/'))
			return true;
	}
	return false;
}

/* SIGKILLs each pid listed in <dir>/cgroup.procs; returns how many were listed. A pid is
 * pinned with a pidfd and checked to still be in this cgroup first, so that a pid reused
 * by an unrelated process after its owner exited is never signalled. */
static int kill_listed(const char *dir, const char *suffix)
{
	_cleanup_free_ char *buf = NULL;
	if (cg_read(dir, "cgroup.procs", &buf, NULL) < 0)
		return 0;
	int listed = 0;
	for (char *s = buf; *s;) {
		char *end;
		long pid = strtol(s, &end, 10);
		if (end == s)
			break;
		s = end + (*end == '\n');
		if (pid <= 0)
			continue;
		listed++;
		int pfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
		if (pfd < 0) {
			if (errno == ENOSYS && pid_in_cgroup((pid_t)pid, suffix))
				kill((pid_t)pid, SIGKILL);
			continue;
		}
		if (pid_in_cgroup((pid_t)pid, suffix))
			syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0);
		close(pfd);
	}
	return listed;
}

/* Plain trees (tests) hold regular files that a real cgroup directory does not. */
static void unlink_files(const char *dir)
{
	_cleanup_closedir_ DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_type == DT_REG)
			unlinkat(dirfd(d), e->d_name, 0);
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int cgroup_remove(struct cgroup *cg, struct err *err)
{
	if (!cg)
		return 0;

	/* Frozen processes do not act on SIGKILL until they are thawed. */
	if (cg->freezer && !cg->plain && access(cg->freezer, F_OK) == 0)
		cgroup_freeze(cg, false, NULL);
	bool gone[CGROUP_DIRS_MAX] = { false };
	for (unsigned i = 0; i < cg->n; i++) {
		gone[i] = access(cg->dir[i], F_OK) < 0 && errno == ENOENT;
		/* cgroup.kill (v2, Linux 5.14) kills every member atomically, forks included. */
		if (!gone[i] && cg->version == CGROUP_V2 &&
		    cg_has(false, cg->dir[i], "cgroup.kill"))
			cg_write(false, cg->dir[i], "cgroup.kill", "1", NULL);
	}

	_cleanup_free_ char *suffix = xasprintf("/" CGROUP_PARENT "/%s", cg->id);
	int first = 0;
	unsigned waited = 0, step = 1;
	for (;;) {
		bool busy = false;
		int last_errno = 0;
		for (unsigned i = 0; i < cg->n; i++) {
			if (gone[i])
				continue;
			/* A plain tree's cgroup.procs names no real members: never signal those. */
			if (!cg->plain && kill_listed(cg->dir[i], suffix) > 0) {
				busy = true;
				continue;
			}
			if (cg->plain)
				unlink_files(cg->dir[i]);
			if (rmdir(cg->dir[i]) == 0 || errno == ENOENT) {
				gone[i] = true;
				continue;
			}
			last_errno = errno;
			/* EBUSY: members are still exiting. Anything else will not get better. */
			if (errno != EBUSY) {
				if (!first)
					first = err_sys(err, errno, "cgroup: rmdir `%s`",
							cg->dir[i]);
				gone[i] = true;
				continue;
			}
			busy = true;
		}
		if (!busy)
			break;
		if (waited >= REMOVE_WAIT_MS) {
			for (unsigned i = 0; i < cg->n; i++)
				if (!gone[i] && !first)
					first = err_set(
						err, last_errno ? last_errno : EBUSY,
						"cgroup: `%s` still has processes after %u ms",
						cg->dir[i], waited);
			break;
		}
		sleep_ms(step);
		waited += step;
		step = step < 32 ? step * 2 : step;
	}
	return first;
}

int cgroup_freeze(const struct cgroup *cg, bool frozen, struct err *err)
{
	if (!cg->freezer)
		return err_set(
			err, ENOTSUP,
			"cgroup: no freezer (mount the v1 freezer controller, or use cgroup v2)");
	bool v2 = cg->version == CGROUP_V2;
	int r = v2 ? cg_write(cg->plain, cg->freezer, "cgroup.freeze", frozen ? "1" : "0", err)
		   : cg_write(cg->plain, cg->freezer, "freezer.state", frozen ? "FROZEN" : "THAWED",
			      err);
	if (r < 0 || cg->plain)
		return r;
	/* Settled: v2 says "frozen 1" in cgroup.events, v1 FROZEN (not FREEZING) or THAWED. */
	for (unsigned waited = 0; waited < 5000; waited += 5) {
		_cleanup_free_ char *buf = NULL;
		if (cg_read(cg->freezer, v2 ? "cgroup.events" : "freezer.state", &buf, err) < 0)
			return -err->errnum;
		bool done;
		if (v2) {
			const char *f = strstr(buf, "frozen ");
			done = f && (f[7] == '1') == frozen;
		} else {
			done = strncmp(buf, frozen ? "FROZEN" : "THAWED", 6) == 0;
		}
		if (done)
			return 0;
		struct timespec ts = { 0, 5 * 1000000 };
		nanosleep(&ts, NULL);
	}
	return err_set(err, ETIMEDOUT, "cgroup: `%s` did not %s within 5 s", cg->freezer,
		       frozen ? "freeze" : "thaw");
}
