/* volume: persistent named volumes: their records, images, limits and mounts (volume.h).
 *
 * Crash-safe creation: the row goes into the store as "creating" before the image file
 * exists, the image is written, synced and only then the row says "ready". A start finds a
 * "creating" row only after a crash in between: it removes that image (whatever state it is
 * in) and the row. A deletion removes the row first and the image after, so a crash between
 * leaves a file no row names, which the start removes too. */
#include "session/session.h"
#include "session/volume.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "loop.h"
#include "store/store.h"
#include "driver/room.h"
#include "util/cleanup.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/random.h"
#include "util/spawn.h"
#include "util/time.h"
#include "util/timejson.h"

/* How long mkfs.ext4 may take on a volume (it takes milliseconds, sparse). */
#define MKFS_TIMEOUT_MS 60000
/* Who owns a new volume's root, on the disk and so in every session: the command user. */
#define VOLUME_ROOT_OWNER "1000:1000"

struct holder {
	char *session_id;
	bool read_only;
	struct holder *next;
};

struct volume {
	char *id; /* names its image: vol-<hex>.img */
	char *owner;
	char *name;
	char *image;
	uint64_t bytes;
	uint64_t created_ms;
	bool ready; /* false while being made */
	struct holder *holders;
	struct volume *next;
};

struct volume_claim {
	unsigned n;
	struct volume *v[SANDBOX_VOLUMES_MAX];
	char *session_id;
	struct sandbox_volume spec[SANDBOX_VOLUMES_MAX];
	char *path[SANDBOX_VOLUMES_MAX];
};

static struct {
	const struct config *cfg;
	char *dir;
	struct volume *all;
} volume_mod;

/* --- the table -------------------------------------------------------------------------- */

static void volume_free(struct volume *v)
{
	free(v->id);
	free(v->owner);
	free(v->name);
	free(v->image);
	free(v);
}

static struct volume *find(const char *owner, const char *name, bool any_owner)
{
	for (struct volume *v = volume_mod.all; v; v = v->next)
		if (strcmp(v->name, name) == 0 && strcmp(v->owner, owner ? owner : "") == 0)
			return v;
	if (any_owner)
		for (struct volume *v = volume_mod.all; v; v = v->next)
			if (strcmp(v->name, name) == 0)
				return v;
	return NULL;
}

static void unlink_volume(struct volume *v)
{
	for (struct volume **pp = &volume_mod.all; *pp; pp = &(*pp)->next)
		if (*pp == v) {
			*pp = v->next;
			return;
		}
}

static char *image_of(const char *id)
{
	return xasprintf("%s/%s.img", volume_mod.dir, id);
}

static int row_exec(const char *sql, const char *a, const char *b, struct err *err)
{
	sqlite3 *db = store_db();
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	if (!db || sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return err_set(err, EROFS, "store: %s", db ? sqlite3_errmsg(db) : "not open");
	sqlite3_bind_text(st, 1, a, -1, SQLITE_STATIC);
	if (b)
		sqlite3_bind_text(st, 2, b, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_DONE)
		return err_set(err, EROFS, "store: %s", sqlite3_errmsg(db));
	return 0;
}

static json_t *volume_json(const struct volume *v, bool with_owner)
{
	json_t *holders = json_array();
	for (struct holder *h = v->holders; h; h = h->next)
		json_array_append_new(holders, json_pack("{s:s, s:b}", "sessionId", h->session_id,
							 "readOnly", h->read_only));
	struct stat st;
	uint64_t allocated = stat(v->image, &st) == 0 ? (uint64_t)st.st_blocks * 512 : 0;
	json_t *j = json_pack("{s:s, s:I, s:I, s:s, s:o}", "name", v->name, "sizeBytes",
			      (json_int_t)v->bytes, "allocatedBytes", (json_int_t)allocated,
			      "state", v->ready ? "ready" : "creating", "mounts", holders);
	json_object_set_new(j, "createdAt", time_iso8601_json(v->created_ms));
	if (with_owner)
		json_object_set_new(j, "owner", json_string(v->owner));
	return j;
}

/* --- start ------------------------------------------------------------------------------ */

static bool known_image(const char *file)
{
	for (struct volume *v = volume_mod.all; v; v = v->next) {
		const char *base = strrchr(v->image, '/');
		if (base && strcmp(base + 1, file) == 0)
			return true;
	}
	return false;
}

/* Files of the directory no volume has: the leftovers of a crash during a deletion. */
static void remove_strays(void)
{
	_cleanup_closedir_ DIR *d = opendir(volume_mod.dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.' || known_image(e->d_name))
			continue;
		if (unlinkat(dirfd(d), e->d_name, 0) == 0)
			log_info("volume", "removed %s/%s, which no volume has", volume_mod.dir,
				 e->d_name);
	}
}

int volume_init(const struct config *cfg, struct err *err)
{
	volume_mod.cfg = cfg;
	free(volume_mod.dir);
	volume_mod.dir = xasprintf("%s/volumes", cfg->state_dir);
	if (fs_mkdir_p(volume_mod.dir, 0700) < 0)
		return err_sys(err, errno, "volume: make %s", volume_mod.dir);
	sqlite3 *db = store_db();
	if (!db)
		return err_set(err, EIO, "volume: the store is not open");
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db,
			       "SELECT id, owner, name, size_bytes, created_ms, state FROM volumes",
			       -1, &st, NULL) != SQLITE_OK)
		return err_set(err, EIO, "volume: %s", sqlite3_errmsg(db));
	struct volume *unfinished = NULL;
	while (sqlite3_step(st) == SQLITE_ROW) {
		struct volume *v = xcalloc(1, sizeof(*v));
		v->id = xstrdup((const char *)sqlite3_column_text(st, 0));
		v->owner = xstrdup((const char *)sqlite3_column_text(st, 1));
		v->name = xstrdup((const char *)sqlite3_column_text(st, 2));
		v->bytes = (uint64_t)sqlite3_column_int64(st, 3);
		v->created_ms = (uint64_t)sqlite3_column_int64(st, 4);
		v->ready = strcmp((const char *)sqlite3_column_text(st, 5), "ready") == 0;
		v->image = image_of(v->id);
		struct volume **list = v->ready ? &volume_mod.all : &unfinished;
		v->next = *list;
		*list = v;
	}
	/* Made when the previous run stopped: its image is not to be trusted. */
	while (unfinished) {
		struct volume *v = unfinished;
		unfinished = v->next;
		if (unlink(v->image) == 0 || errno == ENOENT)
			row_exec("DELETE FROM volumes WHERE id = ?", v->id, NULL, NULL);
		log_info("volume",
			 "volume `%s` of `%s` was being made when the server stopped: "
			 "removed",
			 v->name, v->owner);
		volume_free(v);
	}
	remove_strays();
	return 0;
}

void volume_shutdown(void)
{
	while (volume_mod.all) {
		struct volume *v = volume_mod.all;
		volume_mod.all = v->next;
		while (v->holders) {
			struct holder *h = v->holders;
			v->holders = h->next;
			free(h->session_id);
			free(h);
		}
		volume_free(v);
	}
	free(volume_mod.dir);
	volume_mod.dir = NULL;
}

/* --- creation --------------------------------------------------------------------------- */

struct create_job {
	struct volume *v;
	volume_done_fn done;
	void *arg;
	struct err err;
	int rc;
};

static int make_image(const char *path, uint64_t bytes, struct err *err)
{
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return err_sys(err, errno, "volume: create its image");
	if (ftruncate(fd, (off_t)bytes) < 0)
		return err_sys(err, errno, "volume: size its image");
	int r = room_claim(fd, bytes, "the volume", err);
	if (r < 0)
		return r;
	_cleanup_free_ char *mkfs = spawn_find_binary("mkfs.ext4");
	if (!mkfs)
		return err_set(err, ENOENT, "volume: mkfs.ext4 not found (e2fsprogs)");
	/* A journal: a volume outlives sandboxes and the daemon. No reserved blocks. Its root is
	 * the command user's in canonical ids, as every session sees it. */
	char ext[] =
		"lazy_itable_init=1,lazy_journal_init=1,nodiscard,root_owner=" VOLUME_ROOT_OWNER;
	char *const argv[] = { mkfs, "-q", "-F",   "-m",         "0", "-E",
			       ext,  "-b", "4096", (char *)path, NULL };
	char out[512];
	int st = spawn_run_bounded(argv, MKFS_TIMEOUT_MS, out, sizeof(out));
	if (st < 0)
		return err_sys(err, -st, "volume: mkfs.ext4");
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return err_set(err, EIO, "volume: mkfs.ext4 failed: %s", out);
	if (fsync(fd) < 0)
		return err_sys(err, errno, "volume: sync its image");
	return 0;
}

static void create_work(void *arg)
{
	struct create_job *j = arg;
	j->rc = make_image(j->v->image, j->v->bytes, &j->err);
	if (j->rc == 0) {
		_cleanup_close_ int d = open(volume_mod.dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (d >= 0)
			fsync(d);
	} else {
		unlink(j->v->image);
	}
}

static void create_done(void *arg)
{
	struct create_job *j = arg;
	struct volume *v = j->v;
	if (j->rc == 0 &&
	    row_exec("UPDATE volumes SET state = 'ready' WHERE id = ?", v->id, NULL, &j->err) < 0)
		j->rc = -1;
	if (j->rc < 0) {
		unlink(v->image);
		row_exec("DELETE FROM volumes WHERE id = ?", v->id, NULL, NULL);
		unlink_volume(v);
		j->done(NULL, &j->err, j->arg);
		volume_free(v);
	} else {
		v->ready = true;
		log_info("volume", "volume `%s` of `%s` made (%llu bytes)", v->name, v->owner,
			 (unsigned long long)v->bytes);
		json_auto_t *o = volume_json(v, false);
		j->done(o, NULL, j->arg);
	}
	free(j);
}

/* The owner's count and bytes, those being made included. */
static void owner_usage(const char *owner, uint64_t *count, uint64_t *bytes)
{
	*count = *bytes = 0;
	for (struct volume *v = volume_mod.all; v; v = v->next)
		if (strcmp(v->owner, owner) == 0) {
			(*count)++;
			*bytes += v->bytes;
		}
}

int volume_create(const char *owner, const char *name, uint64_t bytes, volume_done_fn done,
		  void *arg, struct err *err)
{
	owner = owner ? owner : "";
	if (!volume_name_valid(name))
		return err_set(err, EINVAL,
			       "\"name\" must be 1 to %d letters, digits, . _ -, starting with a "
			       "letter or a digit",
			       VOLUME_NAME_MAX);
	if (bytes < VOLUME_MIN_BYTES)
		return err_set(err, EINVAL, "\"sizeBytes\" must be at least %llu (8 MiB)",
			       (unsigned long long)VOLUME_MIN_BYTES);
	if (bytes > volume_mod.cfg->max_volume_bytes)
		return err_set(err, EINVAL,
			       "\"sizeBytes\" must be at most %llu (SANDBOX_MAX_VOLUME_BYTES)",
			       (unsigned long long)volume_mod.cfg->max_volume_bytes);
	if (find(owner, name, false))
		return err_set(err, EEXIST, "volume `%s` already exists", name);
	uint64_t count, used;
	owner_usage(owner, &count, &used);
	if (volume_mod.cfg->key_max_volumes && count >= volume_mod.cfg->key_max_volumes)
		return err_set(err, EAGAIN,
			       "Volume limit reached: this key has %llu volumes, the most it may "
			       "have (SANDBOX_KEY_MAX_VOLUMES)",
			       (unsigned long long)count);
	if (volume_mod.cfg->key_max_volume_bytes &&
	    used + bytes > volume_mod.cfg->key_max_volume_bytes)
		return err_set(err, EAGAIN,
			       "Volume bytes limit reached: this key's volumes have %llu bytes, "
			       "%llu more would pass %llu (SANDBOX_KEY_MAX_VOLUME_BYTES)",
			       (unsigned long long)used, (unsigned long long)bytes,
			       (unsigned long long)volume_mod.cfg->key_max_volume_bytes);
	if (session_disk_check(bytes, err) < 0)
		return -ENOSPC;
	char hex[17];
	random_hex(hex, 8);
	struct volume *v = xcalloc(1, sizeof(*v));
	v->id = xasprintf("vol-%s", hex);
	v->owner = xstrdup(owner);
	v->name = xstrdup(name);
	v->image = image_of(v->id);
	v->bytes = bytes;
	v->created_ms = time_wall_ms();
	/* Recorded before the image exists: see the top of the file. */
	sqlite3 *db = store_db();
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	if (!db || sqlite3_prepare_v2(
			   db,
			   "INSERT INTO volumes(id, owner, name, size_bytes, created_ms, state) "
			   "VALUES (?,?,?,?,?,'creating')",
			   -1, &st, NULL) != SQLITE_OK) {
		volume_free(v);
		return err_set(err, EROFS, "the server cannot record volumes now");
	}
	sqlite3_bind_text(st, 1, v->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, v->owner, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, v->name, -1, SQLITE_STATIC);
	sqlite3_bind_int64(st, 4, (sqlite3_int64)bytes);
	sqlite3_bind_int64(st, 5, (sqlite3_int64)v->created_ms);
	if (sqlite3_step(st) != SQLITE_DONE) {
		int r = err_set(err, EROFS, "the server cannot record volumes now (%s)",
				sqlite3_errmsg(db));
		volume_free(v);
		return r;
	}
	v->next = volume_mod.all;
	volume_mod.all = v;
	struct create_job *j = xcalloc(1, sizeof(*j));
	j->v = v;
	j->done = done;
	j->arg = arg;
	loop_submit(create_work, create_done, j);
	return 0;
}

json_t *volume_list(const char *owner)
{
	json_t *a = json_array();
	for (struct volume *v = volume_mod.all; v; v = v->next)
		if (!owner || strcmp(v->owner, owner) == 0)
			json_array_append_new(a, volume_json(v, owner == NULL));
	return a;
}

json_t *volume_get(const char *owner, const char *name, bool any_owner, struct err *err)
{
	struct volume *v = name ? find(owner, name, any_owner) : NULL;
	if (!v) {
		err_set(err, ENOENT, "Volume `%s` not found", name ? name : "");
		return NULL;
	}
	return volume_json(v, any_owner);
}

int volume_delete(const char *owner, const char *name, bool any_owner, struct err *err)
{
	struct volume *v = name ? find(owner, name, any_owner) : NULL;
	if (!v)
		return err_set(err, ENOENT, "Volume `%s` not found", name ? name : "");
	if (!v->ready)
		return err_set(err, EBUSY, "volume `%s` is being made", name);
	if (v->holders)
		return err_set(err, EBUSY,
			       "volume `%s` is mounted by session `%s`: destroy the sessions that "
			       "mount it first",
			       name, v->holders->session_id);
	int r = row_exec("DELETE FROM volumes WHERE id = ?", v->id, NULL, err);
	if (r < 0)
		return r;
	/* Sparse: unlinking frees what was written, quickly. */
	if (unlink(v->image) < 0 && errno != ENOENT)
		log_warn("volume", "cannot remove %s: %s (removed at the next start)", v->image,
			 strerror(errno));
	log_info("volume", "volume `%s` of `%s` deleted", v->name, v->owner);
	unlink_volume(v);
	volume_free(v);
	return 0;
}

/* --- mounts ----------------------------------------------------------------------------- */

static struct holder *writer_of(const struct volume *v)
{
	for (struct holder *h = v->holders; h; h = h->next)
		if (!h->read_only)
			return h;
	return NULL;
}

int volume_claim(const char *owner, const char *session_id, const struct volume_mounts *m,
		 struct volume_claim **ret, struct err *err)
{
	*ret = NULL;
	if (!m || m->n == 0)
		return 0;
	owner = owner ? owner : "";
	struct volume *vs[SANDBOX_VOLUMES_MAX];
	for (unsigned i = 0; i < m->n; i++) {
		struct volume *v = find(owner, m->m[i].name, false);
		if (!v)
			return err_set(err, ENOENT, "Volume `%s` not found", m->m[i].name);
		if (!v->ready)
			return err_set(err, EBUSY, "volume `%s` is being made", v->name);
		struct holder *w = writer_of(v);
		if (!m->m[i].read_only && w)
			return err_set(
				err, EBUSY,
				"volume `%s` is mounted read-write by session `%s`: a volume "
				"has one writer at a time (mount it with \"readOnly\": true, "
				"or destroy that session first)",
				v->name, w->session_id);
		vs[i] = v;
	}
	struct volume_claim *c = xcalloc(1, sizeof(*c));
	c->session_id = xstrdup(session_id ? session_id : "");
	for (unsigned i = 0; i < m->n; i++) {
		struct holder *h = xcalloc(1, sizeof(*h));
		h->session_id = xstrdup(c->session_id);
		h->read_only = m->m[i].read_only;
		h->next = vs[i]->holders;
		vs[i]->holders = h;
		c->v[i] = vs[i];
		c->path[i] = xstrdup(m->m[i].path);
		c->spec[i] = (struct sandbox_volume){ .image = vs[i]->image,
						      .path = c->path[i],
						      .read_only = m->m[i].read_only };
	}
	c->n = m->n;
	*ret = c;
	return 0;
}

const struct sandbox_volume *volume_claim_spec(const struct volume_claim *c, unsigned *n)
{
	*n = c ? c->n : 0;
	return c ? c->spec : NULL;
}

json_t *volume_claim_json(const struct volume_claim *c)
{
	json_t *a = json_array();
	for (unsigned i = 0; c && i < c->n; i++)
		json_array_append_new(a, json_pack("{s:s, s:s, s:b}", "name", c->v[i]->name, "path",
						   c->path[i], "readOnly", c->spec[i].read_only));
	return a;
}

void volume_release(struct volume_claim *c)
{
	if (!c)
		return;
	for (unsigned i = 0; i < c->n; i++) {
		struct volume *v = c->v[i];
		for (struct holder **pp = &v->holders; *pp; pp = &(*pp)->next) {
			struct holder *h = *pp;
			if (h->read_only == c->spec[i].read_only &&
			    strcmp(h->session_id, c->session_id) == 0) {
				*pp = h->next;
				free(h->session_id);
				free(h);
				break;
			}
		}
		free(c->path[i]);
	}
	free(c->session_id);
	free(c);
}

void volume_totals(uint64_t *count, uint64_t *bytes)
{
	*count = *bytes = 0;
	for (struct volume *v = volume_mod.all; v; v = v->next) {
		(*count)++;
		*bytes += v->bytes;
	}
}
