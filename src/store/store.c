#include "store/store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>

#include "util/cleanup.h"
#include "util/fs.h"
#include "util/log.h"

static sqlite3 *db;
static char *state_dir;

/* How long a statement of the event loop waits for another connection's write lock: a few
 * milliseconds, so that another process holding the lock (an sqlite3 shell, a backup that
 * writes) never stalls the loop and with it every request. Opening (the migrations, before
 * the daemon serves) and closing (the queue's last writes) wait for STORE_OPEN_BUSY_MS. */
#define STORE_LOOP_BUSY_MS 20
#define STORE_OPEN_BUSY_MS 5000
/* How often queued writes are tried again while the lock is held. */
#define STORE_RETRY_MS 100

/* Writes of sandbox records that found the database locked, in the order they were asked
 * for: tried again from a timer, and every later one of them goes behind them. */
struct pending {
	struct pending *next;
	char *id;
	bool del;
	char *driver, *owner, *session_id, *text; /* a put's */
};

static struct {
	struct pending *head, **tail;
	size_t n;
	struct event_base *base;
	struct event *retry;
} Q = { .tail = &Q.head };

static void pending_free(struct pending *p);
static int flush_queue(void);

int store_prepare_dir(const char *dir, struct err *err)
{
	int r = fs_mkdir_p(dir, 0700);
	if (r < 0)
		return err_sys(err, -r, "cannot create state directory `%s`", dir);
	/* A directory made before (or by hand) is closed to others too: it holds the key
	 * store and the first start's admin key. */
	if (chmod(dir, 0700) < 0)
		return err_sys(err, errno, "cannot make state directory `%s` private", dir);
	static const char *const files[] = { "sandboxd.db", "sandboxd.db-wal", "sandboxd.db-shm" };
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		_cleanup_free_ char *path = xasprintf("%s/%s", dir, files[i]);
		/* SQLite gives its -wal and -shm files the database's mode: it is made 0600. */
		_cleanup_close_ int fd =
			open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | (i == 0 ? O_CREAT : 0), 0600);
		if (fd < 0 && errno == ENOENT && i > 0)
			continue;
		if (fd < 0 || fchmod(fd, 0600) < 0)
			return err_sys(err, errno, "cannot make `%s` private", path);
	}
	return 0;
}

/* The claim's descriptor: open for the life of the process, never inherited by an exec. */
static int claim_fd = -1;

/* The pid written in a claimed lock file, or 0 when it holds none (a claimant between its
 * lock and its write, or a file of someone else's making). */
static long claimant_pid(int fd)
{
	char buf[24];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	char *end;
	errno = 0;
	long pid = strtol(buf, &end, 10);
	if (errno || end == buf || (*end != '\n' && *end != '\0') || pid <= 0 || pid > INT32_MAX)
		return 0;
	return pid;
}

int store_claim_dir(const char *dir, struct err *err)
{
	if (claim_fd >= 0)
		return 0;
	int r = store_prepare_dir(dir, err);
	if (r < 0)
		return r;
	_cleanup_free_ char *path = xasprintf("%s/sandboxd.lock", dir);
	_cleanup_close_ int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return err_sys(err, errno, "cannot open `%s`", path);
	struct stat st;
	if (fstat(fd, &st) < 0)
		return err_sys(err, errno, "cannot stat `%s`", path);
	if (!S_ISREG(st.st_mode))
		return err_set(err, EINVAL, "`%s` is not a regular file", path);
	struct flock fl = { .l_type = F_WRLCK, .l_whence = SEEK_SET };
	if (fcntl(fd, F_OFD_SETLK, &fl) < 0) {
		if (errno != EAGAIN && errno != EACCES)
			return err_sys(err, errno, "cannot lock `%s`", path);
		long pid = claimant_pid(fd);
		if (pid > 0)
			return err_set(err, EBUSY,
				       "another sandboxd (pid %ld) uses the state directory `%s`; "
				       "stop it, or give this one its own SANDBOX_STATE_DIR",
				       pid, dir);
		return err_set(err, EBUSY,
			       "another sandboxd uses the state directory `%s` (it holds `%s`); "
			       "stop it, or give this one its own SANDBOX_STATE_DIR",
			       dir, path);
	}
	char pid[24];
	int n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n)
		return err_sys(err, errno, "cannot write `%s`", path);
	claim_fd = fd;
	fd = -1;
	return 0;
}

int store_claim_note_url(const char *url, struct err *err)
{
	if (claim_fd < 0)
		return err_set(err, EBADF, "the state directory is not claimed");
	char buf[600];
	int n = snprintf(buf, sizeof(buf), "%d\n%s\n", (int)getpid(), url);
	if (n < 0 || (size_t)n >= sizeof(buf))
		return err_set(err, ENAMETOOLONG, "the address `%.64s...` is too long", url);
	if (pwrite(claim_fd, buf, (size_t)n, 0) != n)
		return err_sys(err, errno, "cannot write the state directory's lock file");
	return 0;
}

char *store_claimant_url(const char *dir)
{
	_cleanup_free_ char *path = xasprintf("%s/sandboxd.lock", dir);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	char buf[600];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	if (n <= 0)
		return NULL;
	buf[n] = '\0';
	char *line = strchr(buf, '\n');
	if (!line || !*++line)
		return NULL;
	line[strcspn(line, "\n")] = '\0';
	return *line ? xstrdup(line) : NULL;
}

int store_open(const char *dir, struct err *err)
{
	int r = store_prepare_dir(dir, err);
	if (r < 0)
		return r;
	_cleanup_free_ char *path = xasprintf("%s/sandboxd.db", dir);
	if (sqlite3_open_v2(path, &db,
			    SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
			    NULL) != SQLITE_OK) {
		r = err_set(err, EIO, "cannot open `%s`: %s", path, sqlite3_errmsg(db));
		sqlite3_close(db);
		db = NULL;
		return r;
	}
	sqlite3_busy_timeout(db, STORE_OPEN_BUSY_MS);
	/* A newer release's database is left exactly as it is, its journal mode included
	 * (store_migrate checks again, in its transaction). */
	int version;
	if (store_schema_version(db, &version, err) < 0 ||
	    (version > STORE_SCHEMA_VERSION && store_migrate(db, err) < 0)) {
		r = err_wrap(err, "the state database `%s`", path);
		store_close();
		return r;
	}
	_cleanup_sqlite_free_ char *msg = NULL;
	/* WAL with synchronous=NORMAL: a record survives the process's death, with no fsync per
	 * write (only a power loss can take the last ones). The log is checkpointed every 256
	 * pages (1 MiB) and cut back to 1 MiB after, so the state directory's need stays small
	 * and known (docs/operations.md). */
	if (sqlite3_exec(db,
			 "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; "
			 "PRAGMA wal_autocheckpoint=256; PRAGMA journal_size_limit=1048576;",
			 NULL, NULL, &msg) != SQLITE_OK) {
		r = err_set(err, EIO, "cannot initialise `%s`: %s", path, msg ? msg : "?");
		store_close();
		return r;
	}
	r = store_migrate(db, err);
	if (r < 0) {
		err_wrap(err, "the state database `%s`", path);
		store_close();
		return r;
	}
	sqlite3_busy_timeout(db, STORE_LOOP_BUSY_MS);
	state_dir = xstrdup(dir);
	return 0;
}

void store_close(void)
{
	if (db && Q.head) {
		/* The last queued writes may wait for the lock: the daemon is stopping. */
		sqlite3_busy_timeout(db, STORE_OPEN_BUSY_MS);
		struct event *retry = TAKE_PTR(Q.retry);
		if (flush_queue() < 0)
			log_warn("store",
				 "%zu write(s) of sandbox records were not made: the "
				 "database stayed locked",
				 Q.n);
		Q.retry = retry;
	}
	while (Q.head) {
		struct pending *p = Q.head;
		Q.head = p->next;
		pending_free(p);
	}
	Q.tail = &Q.head;
	Q.n = 0;
	store_set_event_base(NULL);
	if (db)
		sqlite3_close(db);
	db = NULL;
	free(state_dir);
	state_dir = NULL;
}

sqlite3 *store_db(void)
{
	return db;
}

/* One write of a sandbox record: SQLITE_DONE, SQLITE_BUSY when the database is locked, or
 * another code. */
static int put_row(const char *sandbox_id, const char *driver, const char *owner,
		   const char *session_id, const char *text)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(
		db,
		"INSERT OR REPLACE INTO sandboxes(id, driver, owner, session_id, "
		"record) VALUES (?,?,?,?,?)",
		-1, &st, NULL);
	if (rc != SQLITE_OK)
		return rc;
	sqlite3_bind_text(st, 1, sandbox_id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, driver, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, owner, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 4, session_id, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 5, text, -1, SQLITE_STATIC);
	return sqlite3_step(st);
}

static int delete_row(const char *sandbox_id)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	int rc = sqlite3_prepare_v2(db, "DELETE FROM sandboxes WHERE id = ?", -1, &st, NULL);
	if (rc != SQLITE_OK)
		return rc;
	sqlite3_bind_text(st, 1, sandbox_id, -1, SQLITE_STATIC);
	return sqlite3_step(st);
}

static bool locked(int rc)
{
	return (rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED;
}

static void pending_free(struct pending *p)
{
	free(p->id);
	free(p->driver);
	free(p->owner);
	free(p->session_id);
	free(p->text);
	free(p);
}

static void arm_retry(void)
{
	static const struct timeval tv = { .tv_usec = STORE_RETRY_MS * 1000 };
	if (Q.retry && !evtimer_pending(Q.retry, NULL))
		evtimer_add(Q.retry, &tv);
}

/* Writes the queue's entries in order until the lock stops one: 0 when it is empty. */
static int flush_queue(void)
{
	while (Q.head) {
		struct pending *p = Q.head;
		int rc = p->del ? delete_row(p->id)
				: put_row(p->id, p->driver, p->owner, p->session_id, p->text);
		if (locked(rc)) {
			arm_retry();
			return -EAGAIN;
		}
		if (rc != SQLITE_DONE)
			log_warn("store", "cannot %s the record of sandbox %s: %s",
				 p->del ? "delete" : "write", p->id, sqlite3_errmsg(db));
		Q.head = p->next;
		if (!Q.head)
			Q.tail = &Q.head;
		Q.n--;
		pending_free(p);
	}
	return 0;
}

static void on_retry(evutil_socket_t fd, short what, void *arg)
{
	if (flush_queue() == 0)
		log_info("store", "the queued writes of sandbox records are done");
}

static void enqueue(struct pending *p)
{
	if (!Q.head)
		log_warn("store",
			 "the state database is locked by another process: writes of sandbox "
			 "records are queued and retried every %d ms",
			 STORE_RETRY_MS);
	*Q.tail = p;
	Q.tail = &p->next;
	Q.n++;
	arm_retry();
}

void store_set_event_base(struct event_base *base)
{
	if (Q.retry)
		event_free(Q.retry);
	Q.retry = NULL;
	Q.base = base;
	if (base)
		Q.retry = evtimer_new(base, on_retry, NULL);
}

size_t store_queued_writes(void)
{
	return Q.n;
}

int store_sandbox_put(const char *sandbox_id, const char *driver, const char *owner,
		      const char *session_id, json_t *record, struct err *err)
{
	_cleanup_free_ char *text = record ? json_dumps(record, JSON_COMPACT) : xstrdup("{}");
	int rc = put_row(sandbox_id, driver, owner, session_id, text);
	if (rc != SQLITE_DONE)
		return err_set(err, locked(rc) ? EAGAIN : EIO, "store: %s", sqlite3_errmsg(db));
	return 0;
}

int store_sandbox_update(const char *sandbox_id, const char *driver, const char *owner,
			 const char *session_id, json_t *record, struct err *err)
{
	_cleanup_free_ char *text = record ? json_dumps(record, JSON_COMPACT) : xstrdup("{}");
	/* Behind the writes queued before it, so that they land in order. */
	int rc = Q.head ? SQLITE_BUSY : put_row(sandbox_id, driver, owner, session_id, text);
	if (locked(rc) && Q.retry) {
		struct pending *p = xcalloc(1, sizeof(*p));
		p->id = xstrdup(sandbox_id);
		p->driver = xstrdup(driver);
		p->owner = owner ? xstrdup(owner) : NULL;
		p->session_id = session_id ? xstrdup(session_id) : NULL;
		p->text = TAKE_PTR(text);
		enqueue(p);
		return 0;
	}
	if (rc != SQLITE_DONE)
		return err_set(err, EIO, "store: %s", sqlite3_errmsg(db));
	return 0;
}

int store_sandbox_delete(const char *sandbox_id)
{
	int rc = Q.head ? SQLITE_BUSY : delete_row(sandbox_id);
	if (locked(rc) && Q.retry) {
		struct pending *p = xcalloc(1, sizeof(*p));
		p->id = xstrdup(sandbox_id);
		p->del = true;
		enqueue(p);
		return 0;
	}
	return rc == SQLITE_DONE ? 0 : -EIO;
}

int store_sandbox_foreach(store_sandbox_fn fn, void *arg, struct err *err)
{
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, "SELECT id, driver, record FROM sandboxes", -1, &st, NULL) !=
	    SQLITE_OK)
		return err_set(err, EIO, "store: %s", sqlite3_errmsg(db));
	int rc;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *id = (const char *)sqlite3_column_text(st, 0);
		const char *driver = (const char *)sqlite3_column_text(st, 1);
		const char *text = (const char *)sqlite3_column_text(st, 2);
		json_auto_t *rec = text ? json_loads(text, 0, NULL) : NULL;
		fn(id, driver, rec, arg);
	}
	return rc == SQLITE_DONE ? 0 : err_set(err, EIO, "store: %s", sqlite3_errmsg(db));
}

int store_check_writable(struct err *err)
{
	if (!state_dir)
		return err_set(err, EIO, "the state database is not open");
	_cleanup_free_ char *probe = xasprintf("%s/.ready-probe", state_dir);
	int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return err_sys(err, errno, "state directory `%s` is not writable", state_dir);
	ssize_t w = write(fd, "ok", 2);
	int e = w == 2 ? 0 : errno ? errno : EIO;
	close(fd);
	unlink(probe);
	if (e)
		return err_sys(err, e, "state directory `%s` is not writable", state_dir);
	return 0;
}

/* --- records owned by a key ------------------------------------------------------------ */

static int records_open(struct err *err)
{
	return db ? 0 : err_set(err, EROFS, "store: not open");
}

int store_records_put(const struct store_records *t, const char *owner, const char *name,
		      const json_t *record, bool replace, struct err *err)
{
	int r = records_open(err);
	if (r < 0)
		return r;
	_cleanup_free_ char *text = json_dumps(record, JSON_COMPACT);
	_cleanup_free_ char *sql =
		xasprintf("INSERT%s INTO %s (owner, %s, record) VALUES (?, ?, ?)",
			  replace ? " OR REPLACE" : "", t->table, t->key);
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	if (!text || sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return err_set(err, EROFS, "store: %s", sqlite3_errmsg(db));
	sqlite3_bind_text(st, 1, owner, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 3, text, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_DONE)
		return err_set(err, EROFS, "store: %s", sqlite3_errmsg(db));
	return 0;
}

void store_records_delete(const struct store_records *t, const char *owner, const char *name)
{
	struct err e;
	if (records_open(&e) < 0)
		return;
	_cleanup_free_ char *sql =
		xasprintf("DELETE FROM %s WHERE owner = ? AND %s = ?", t->table, t->key);
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return;
	sqlite3_bind_text(st, 1, owner, -1, SQLITE_STATIC);
	sqlite3_bind_text(st, 2, name, -1, SQLITE_STATIC);
	if (sqlite3_step(st) != SQLITE_DONE)
		log_warn("store", "cannot delete %s `%s` from %s: %s", t->key, name, t->table,
			 sqlite3_errmsg(db));
}

int store_records_foreach(const struct store_records *t, store_records_fn fn, void *arg,
			  struct err *err)
{
	int r = records_open(err);
	if (r < 0)
		return r;
	_cleanup_free_ char *sql = xasprintf("SELECT owner, %s, record FROM %s", t->key, t->table);
	_cleanup_stmt_ sqlite3_stmt *st = NULL;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		return err_set(err, EROFS, "store: %s", sqlite3_errmsg(db));
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *owner = (const char *)sqlite3_column_text(st, 0);
		const char *name = (const char *)sqlite3_column_text(st, 1);
		const char *text = (const char *)sqlite3_column_text(st, 2);
		if (!owner || !name)
			continue;
		json_auto_t *rec = text ? json_loads(text, 0, NULL) : NULL;
		fn(owner, name, rec, arg);
	}
	return 0;
}
