/* proc: background processes. A spawned command belongs to the agent, not to the channel
 * that started it: it runs until it ends (or the sandbox does), its output goes into a
 * bounded replay buffer here, in the sandbox's memory, and any number of attach operations,
 * from any connection, stream that buffer from where they ask and then what follows, in
 * order. By default the process never waits for a reader: a reader that falls more than the
 * buffer behind is told how many bytes it missed (an EVENT "gap") instead of stalling the
 * program. A reader that asks to hold it (attach "hold") is never left behind instead: while
 * reading more would push out of the buffer what that reader has not been sent, the process's
 * output is not read, so its pipe fills and its writes wait, as they would on a slow terminal.
 * A process spawned with "hold" keeps all its output for its first holding reader, which
 * comes a round trip later, for at most AGENT_FIRST_HOLD_NS.
 *
 * Ended processes are kept (their buffer, status and times) until AGENT_KEEP_ENDED newer
 * ones ended, or until their buffer's room is needed by a new process. */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "util/cleanup.h"

#define AGENT_KEEP_ENDED 64
#define CHUNK_MAX        (16u << 10) /* bytes of output per chunk of the buffer */
#define CHUNK_OVERHEAD   64          /* what a chunk costs beyond its bytes, for the limit */
#define READ_MAX         (64u << 10)
/* What appending up to READ_MAX bytes may add to a buffer's count beyond the bytes: the last
 * chunk's growth to CHUNK_MAX, and the overhead of the new chunks (at least 256 bytes each). */
#define APPEND_SLACK        (CHUNK_MAX + 8 * (CHUNK_OVERHEAD + 256))
#define AGENT_FIRST_HOLD_NS (10 * 1000000000LL)

/* A run of output of one stream, at offset `off` of the process's whole output. */
struct chunk {
	uint64_t off;
	uint32_t len, cap;
	uint8_t stream; /* GUEST_STDOUT or GUEST_STDERR */
	uint8_t data[];
};

struct proc {
	pid_t pid;
	char *tag;
	char **argv;
	char *cwd;
	char **env_keys;
	bool pty;
	int out_fd, err_fd, in_fd;
	int pfd_out, pfd_err;
	/* the replay buffer: chunks q[head..head+n) in a ring of qcap */
	struct chunk **q;
	size_t qhead, qn, qcap;
	size_t held;  /* bytes of the chunks, with their overhead */
	size_t limit; /* replayBytes */
	uint64_t produced;
	bool exited;
	int status;
	int64_t start_ns, end_ns, start_wall_ms, end_wall_ms;
	int64_t drain_until;
	int64_t timeout_at, kill_at, grace_ns;
	bool term_sent, timed_out;
	bool ended;       /* exited and its output closed: attachers get the result */
	uint64_t end_seq; /* order of ending, for keeping the newest ended */
	unsigned refs;    /* attach and input operations holding it */
	struct op *writer;
	struct attach_op *holds;  /* its holding attaches (their hold_next) */
	int64_t first_hold_until; /* spawned with "hold": all is kept until then, 0: no more */
};

/* An attach operation: one reader of a process's output (op_attach). */
struct attach_op {
	struct op op;
	struct proc *p;
	uint64_t pos; /* the next byte of the process's output to send */
	bool output, follow;
	bool detached; /* cancelled, or not following: the process goes on */
	bool hangup;   /* the process is this reader's (a terminal's): it ends with it */
	bool hold;     /* in p->holds: the process waits for this reader */
	struct attach_op *hold_next;
};

struct procs {
	struct proc **p;
	size_t n;
	uint64_t ended_seq;
};

static struct procs *table(struct agent *a)
{
	if (!a->procs)
		a->procs = xcalloc(1, sizeof(*a->procs));
	return a->procs;
}

static int64_t wall_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* --- the replay buffer --------------------------------------------------------------- */

static struct chunk *q_at(const struct proc *p, size_t i)
{
	return p->q[(p->qhead + i) % p->qcap];
}

static uint64_t buf_start(const struct proc *p)
{
	return p->qn ? q_at(p, 0)->off : p->produced;
}

static void buf_drop_head(struct proc *p)
{
	struct chunk *c = q_at(p, 0);
	p->held -= c->cap + CHUNK_OVERHEAD;
	free(c);
	p->qhead = (p->qhead + 1) % p->qcap;
	p->qn--;
}

static void buf_append(struct proc *p, uint8_t stream, const uint8_t *data, size_t len)
{
	while (len) {
		struct chunk *last = p->qn ? q_at(p, p->qn - 1) : NULL;
		if (last && last->stream == stream && last->len < CHUNK_MAX) {
			size_t take = CHUNK_MAX - last->len < len ? CHUNK_MAX - last->len : len;
			if (last->len + take > last->cap) {
				size_t cap = last->cap * 2;
				while (cap < last->len + take)
					cap *= 2;
				if (cap > CHUNK_MAX)
					cap = CHUNK_MAX;
				p->held += cap - last->cap;
				last = xrealloc(last, sizeof(*last) + cap);
				last->cap = (uint32_t)cap;
				p->q[(p->qhead + p->qn - 1) % p->qcap] = last;
			}
			memcpy(last->data + last->len, data, take);
			last->len += (uint32_t)take;
			p->produced += take;
			data += take;
			len -= take;
			continue;
		}
		if (p->qn == p->qcap) {
			size_t cap = p->qcap ? p->qcap * 2 : 16;
			struct chunk **q = xcalloc(cap, sizeof(*q));
			for (size_t i = 0; i < p->qn; i++)
				q[i] = q_at(p, i);
			free(p->q);
			p->q = q;
			p->qhead = 0;
			p->qcap = cap;
		}
		size_t cap = len < 256 ? 256 : len > CHUNK_MAX ? CHUNK_MAX : len;
		struct chunk *c = xmalloc(sizeof(*c) + cap);
		c->off = p->produced;
		c->len = 0;
		c->cap = (uint32_t)cap;
		c->stream = stream;
		p->q[(p->qhead + p->qn) % p->qcap] = c;
		p->qn++;
		p->held += cap + CHUNK_OVERHEAD;
	}
	/* The newest chunk always stays: it may be the only one a reader has not seen. */
	while (p->held > p->limit && p->qn > 1)
		buf_drop_head(p);
}

/* The chunk holding offset off (buf_start <= off < produced). */
static const struct chunk *buf_find(const struct proc *p, uint64_t off)
{
	size_t lo = 0, hi = p->qn;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;
		if (q_at(p, mid)->off <= off)
			lo = mid;
		else
			hi = mid;
	}
	return q_at(p, lo);
}

/* --- holding readers ------------------------------------------------------------------ */

/* The first byte some reader still needs kept, UINT64_MAX when none does. */
static uint64_t hold_from(const struct proc *p, int64_t now)
{
	uint64_t from = p->first_hold_until > now ? 0 : UINT64_MAX;
	for (const struct attach_op *x = p->holds; x; x = x->hold_next)
		if (x->pos < from)
			from = x->pos;
	return from;
}

/* How many bytes of output may be read now without pushing out of the buffer what a holding
 * reader still needs: READ_MAX when no reader holds the process, 0 when it must wait. */
static size_t read_room(const struct proc *p, int64_t now)
{
	uint64_t from = hold_from(p, now);
	if (from == UINT64_MAX)
		return READ_MAX;
	size_t keep = p->held;
	for (size_t i = 0; i < p->qn; i++) {
		const struct chunk *c = q_at(p, i);
		if (c->off + c->len > from)
			break;
		keep -= c->cap + CHUNK_OVERHEAD;
	}
	if (keep + APPEND_SLACK >= p->limit)
		return 0;
	size_t room = p->limit - keep - APPEND_SLACK;
	return room < READ_MAX ? room : READ_MAX;
}

/* --- the table ----------------------------------------------------------------------- */

static void proc_free(struct proc *p)
{
	while (p->qn)
		buf_drop_head(p);
	free(p->q);
	agent_close_fd(&p->out_fd);
	agent_close_fd(&p->err_fd);
	agent_close_fd(&p->in_fd);
	free(p->tag);
	for (char **s = p->argv; s && *s; s++)
		free(*s);
	free(p->argv);
	for (char **s = p->env_keys; s && *s; s++)
		free(*s);
	free(p->env_keys);
	free(p->cwd);
	free(p);
}

static void table_remove(struct procs *t, size_t i)
{
	proc_free(t->p[i]);
	memmove(t->p + i, t->p + i + 1, (t->n - i - 1) * sizeof(*t->p));
	t->n--;
}

/* Forgets the oldest ended process nobody holds; false when there is none. */
static bool evict_one(struct procs *t)
{
	size_t best = SIZE_MAX;
	for (size_t i = 0; i < t->n; i++) {
		struct proc *p = t->p[i];
		if (p->ended && !p->refs && (best == SIZE_MAX || p->end_seq < t->p[best]->end_seq))
			best = i;
	}
	if (best == SIZE_MAX)
		return false;
	table_remove(t, best);
	return true;
}

static size_t count(const struct procs *t, bool ended, size_t *replay)
{
	size_t n = 0;
	if (replay)
		*replay = 0;
	for (size_t i = 0; i < t->n; i++) {
		if (t->p[i]->ended == ended)
			n++;
		if (replay)
			*replay += t->p[i]->limit;
	}
	return n;
}

size_t procs_running(struct agent *a)
{
	return a->procs ? count(a->procs, false, NULL) : 0;
}

/* By pid, or by tag: the running one, else the newest that ended. NULL with e set. */
static struct proc *lookup(struct agent *a, const struct req_proc_ref *ref, struct err *e)
{
	struct procs *t = table(a);
	struct proc *found = NULL;
	for (size_t i = 0; i < t->n; i++) {
		struct proc *p = t->p[i];
		if (ref->pid ? p->pid != ref->pid : strcmp(p->tag ? p->tag : "", ref->tag) != 0)
			continue;
		if (!found || (found->ended && (!p->ended || p->end_seq > found->end_seq)))
			found = p;
	}
	if (!found) {
		if (ref->pid)
			err_set(e, ESRCH, "no background process with pid %lld",
				(long long)ref->pid);
		else
			err_set(e, ESRCH, "no background process tagged `%s`", ref->tag);
	}
	return found;
}

static void mark_ended(struct procs *t, struct proc *p)
{
	if (p->ended)
		return;
	p->ended = true;
	p->end_seq = ++t->ended_seq;
	agent_close_fd(&p->in_fd);
	while (count(t, true, NULL) > AGENT_KEEP_ENDED && evict_one(t))
		;
}

static void start_kill(struct proc *p)
{
	if (p->term_sent)
		return;
	p->term_sent = true;
	kill(-p->pid, SIGTERM);
	kill(-p->pid, SIGCONT);
	p->kill_at = agent_now_ns() + p->grace_ns;
	if (p->grace_ns == 0) {
		kill(-p->pid, SIGKILL);
		p->kill_at = 0;
	}
}

int procs_poll_fill(struct agent *a, struct pollfd *pfd, int64_t *deadline)
{
	if (!a->procs)
		return 0;
	struct procs *t = a->procs;
	int n = 0;
	int64_t now = agent_now_ns();
	for (size_t i = 0; i < t->n; i++) {
		struct proc *p = t->p[i];
		p->pfd_out = p->pfd_err = -1;
		if (p->ended)
			continue;
		/* A holding reader behind: the output waits in the pipe (read again once the
		 * reader took some, when this is filled anew). */
		bool room = read_room(p, now) > 0;
		if (p->out_fd >= 0 && room) {
			pfd[n] = (struct pollfd){ .fd = p->out_fd, .events = POLLIN };
			p->pfd_out = n++;
		}
		if (p->err_fd >= 0 && room) {
			pfd[n] = (struct pollfd){ .fd = p->err_fd, .events = POLLIN };
			p->pfd_err = n++;
		}
		int64_t d = INT64_MAX;
		if (p->first_hold_until > now && !room)
			d = p->first_hold_until;
		if (!p->exited && p->timeout_at && !p->term_sent && p->timeout_at < d)
			d = p->timeout_at;
		if (!p->exited && p->kill_at && p->kill_at < d)
			d = p->kill_at;
		if (p->exited && room)
			d = p->out_fd < 0 && p->err_fd < 0 ? now : p->drain_until;
		if (d < *deadline)
			*deadline = d;
	}
	return n;
}

static void pump(struct proc *p, int *fd, uint8_t type, size_t room)
{
	uint8_t buf[READ_MAX];
	ssize_t n = read(*fd, buf, room < sizeof(buf) ? room : sizeof(buf));
	if (n > 0) {
		buf_append(p, type, buf, (size_t)n);
		return;
	}
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	/* EOF, or EIO from a terminal whose other side every process closed. */
	agent_close_fd(fd);
}

void procs_step(struct agent *a, const struct pollfd *pfd, int n)
{
	if (!a->procs)
		return;
	struct procs *t = a->procs;
	int64_t now = agent_now_ns();
	for (size_t i = 0; i < t->n; i++) {
		struct proc *p = t->p[i];
		if (p->ended)
			continue;
		if (p->pfd_out >= 0 && p->pfd_out < n && pfd[p->pfd_out].revents &&
		    read_room(p, now))
			pump(p, &p->out_fd, GUEST_STDOUT, read_room(p, now));
		if (p->pfd_err >= 0 && p->pfd_err < n && pfd[p->pfd_err].revents &&
		    read_room(p, now))
			pump(p, &p->err_fd, GUEST_STDERR, read_room(p, now));
		p->pfd_out = p->pfd_err = -1;
		if (!p->exited) {
			if (p->timeout_at && now >= p->timeout_at && !p->term_sent) {
				p->timed_out = true;
				start_kill(p);
			}
			if (p->kill_at && now >= p->kill_at) {
				kill(-p->pid, SIGKILL);
				p->kill_at = 0;
			}
			continue;
		}
		/* Daemons the command left behind may hold its pipes open: after the drain
		 * period the output ends with the command. The period runs while the output is
		 * read: a holding reader behind keeps what is still in the pipes. */
		if (!read_room(p, now))
			p->drain_until = now + AGENT_DRAIN_NS;
		if (now >= p->drain_until) {
			agent_close_fd(&p->out_fd);
			agent_close_fd(&p->err_fd);
		}
		if (p->out_fd < 0 && p->err_fd < 0)
			mark_ended(t, p);
	}
	/* Evicting happens only in mark_ended and spawn: indices above stay valid. */
}

bool procs_child_exit(struct agent *a, pid_t pid, int status)
{
	if (!a->procs)
		return false;
	for (size_t i = 0; i < a->procs->n; i++) {
		struct proc *p = a->procs->p[i];
		if (p->pid != pid || p->exited)
			continue;
		p->exited = true;
		p->status = status;
		p->end_ns = agent_now_ns();
		p->end_wall_ms = wall_ms();
		p->drain_until = p->end_ns + AGENT_DRAIN_NS;
		p->kill_at = 0;
		if (p->timed_out)
			kill(-p->pid, SIGKILL);
		return true;
	}
	return false;
}

/* --- JSON ------------------------------------------------------------------------------ */

static void proc_json(struct jw *w, const struct proc *p)
{
	char sb[16];
	jw_obj_open(w);
	jw_key(w, "pid");
	jw_int(w, p->pid);
	jw_key(w, "tag");
	if (p->tag)
		jw_str(w, p->tag);
	else
		jw_null(w);
	jw_key(w, "argv");
	jw_arr_open(w);
	for (char **s = p->argv; *s; s++)
		jw_str(w, *s);
	jw_arr_close(w);
	jw_key(w, "cwd");
	jw_str(w, p->cwd);
	jw_key(w, "envKeys");
	jw_arr_open(w);
	for (char **s = p->env_keys; *s; s++)
		jw_str(w, *s);
	jw_arr_close(w);
	jw_key(w, "pty");
	jw_bool(w, p->pty);
	jw_key(w, "state");
	jw_str(w, p->ended ? "exited" : "running");
	jw_key(w, "startedAt");
	jw_int(w, p->start_wall_ms);
	jw_key(w, "exitCode");
	if (p->exited && WIFEXITED(p->status))
		jw_int(w, WEXITSTATUS(p->status));
	else
		jw_null(w);
	jw_key(w, "signal");
	if (p->exited && WIFSIGNALED(p->status))
		jw_str(w, agent_signame(WTERMSIG(p->status), sb));
	else
		jw_null(w);
	jw_key(w, "endedAt");
	if (p->exited)
		jw_int(w, p->end_wall_ms);
	else
		jw_null(w);
	jw_key(w, "durationMs");
	jw_fixed(w, (double)((p->exited ? p->end_ns : agent_now_ns()) - p->start_ns) / 1e6, 3);
	jw_key(w, "timedOut");
	jw_bool(w, p->timed_out);
	jw_key(w, "outputBytes");
	jw_int(w, (int64_t)p->produced);
	jw_key(w, "replayFrom");
	jw_int(w, (int64_t)buf_start(p));
	jw_key(w, "replayBytes");
	jw_int(w, (int64_t)p->limit);
	jw_obj_close(w);
}

static void answer_proc(struct conn *c, uint32_t ch, const struct proc *p, const char *key)
{
	struct jw w;
	jw_init(&w);
	jw_obj_open(&w);
	jw_key(&w, key);
	proc_json(&w, p);
	jw_obj_close(&w);
	conn_frame(c, GUEST_RESULT, ch, w.buf, w.len);
	jw_free(&w);
}

/* --- spawn and procs --------------------------------------------------------------------- */

static char **strv_dup(const char *const *v, size_t n)
{
	char **out = xcalloc(n + 1, sizeof(*out));
	for (size_t i = 0; i < n; i++)
		out[i] = xstrdup(v[i]);
	return out;
}

/* A pseudo-terminal: the master (non-blocking) and its other side, sized rows x cols. */
static int open_pty(struct agent *a, int64_t rows, int64_t cols, int *master, int *slave,
		    struct err *e)
{
	*master = *slave = -1;
	int m = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (m < 0)
		return err_sys(e, errno, "cannot open a terminal (/dev/ptmx)");
	char name[64];
	if (grantpt(m) < 0 || unlockpt(m) < 0 || ptsname_r(m, name, sizeof(name)) != 0) {
		int en = errno;
		close(m);
		return err_sys(e, en, "cannot set up a terminal");
	}
	int s = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (s < 0) {
		int en = errno;
		close(m);
		return err_sys(e, en, "cannot open the terminal %s", name);
	}
	/* The command's user owns its terminal (mesg, write, tools that check). */
	if (a->as_user && fchown(s, a->uid, (gid_t)-1) < 0)
		agent_log("cannot give %s to uid %u: %s", name, a->uid, strerror(errno));
	struct winsize ws = { .ws_row = (unsigned short)rows, .ws_col = (unsigned short)cols };
	ioctl(m, TIOCSWINSZ, &ws);
	fcntl(m, F_SETFL, fcntl(m, F_GETFL) | O_NONBLOCK);
	*master = m;
	*slave = s;
	return 0;
}

void op_spawn(struct conn *c, uint32_t ch, const struct req *r)
{
	const struct req_spawn *rs = &r->u.spawn;
	struct agent *a = c->a;
	struct procs *t = table(a);
	struct err e;

	if (count(t, false, NULL) >= (size_t)rs->max_procs) {
		err_set(&e, EAGAIN,
			"too many background processes: %lld are running, the limit of this "
			"sandbox",
			(long long)rs->max_procs);
		conn_error(c, ch, &e);
		return;
	}
	if (rs->tag) {
		for (size_t i = 0; i < t->n; i++)
			if (!t->p[i]->ended && t->p[i]->tag && strcmp(t->p[i]->tag, rs->tag) == 0) {
				err_set(&e, EEXIST, "a running process is tagged `%s` already",
					rs->tag);
				conn_error(c, ch, &e);
				return;
			}
	}
	size_t replay;
	count(t, false, &replay);
	while ((t->n >= AGENT_MAX_PROCS ||
		(count(t, false, &replay),
		 replay + (size_t)rs->replay_bytes > (size_t)rs->max_replay)) &&
	       evict_one(t))
		;
	if (t->n >= AGENT_MAX_PROCS || replay + (size_t)rs->replay_bytes > (size_t)rs->max_replay) {
		err_set(&e, EAGAIN,
			"the replay buffers of this sandbox's processes would exceed %lld bytes "
			"(%zu are taken): ask for fewer replayBytes or end a process",
			(long long)rs->max_replay, replay);
		conn_error(c, ch, &e);
		return;
	}

	int in[2] = { -1, -1 }, out[2] = { -1, -1 }, errp[2] = { -1, -1 };
	int master = -1, slave = -1;
	pid_t pid;
	int64_t start = agent_now_ns();
	if (rs->pty) {
		if (open_pty(a, rs->rows, rs->cols, &master, &slave, &e) < 0) {
			conn_error(c, ch, &e);
			return;
		}
		pid = agent_start_command(a, &rs->x, slave, slave, slave, true, &e);
		close(slave);
		if (pid < 0) {
			close(master);
			conn_error(c, ch, &e);
			return;
		}
	} else {
		int r1;
		if ((r1 = agent_make_pipe(in, false)) < 0 ||
		    (r1 = agent_make_pipe(out, true)) < 0 ||
		    (r1 = agent_make_pipe(errp, true)) < 0) {
			err_sys(&e, -r1, "cannot execute `%s`: pipe", rs->x.argv[0]);
			pid = -1;
		} else {
			pid = agent_start_command(a, &rs->x, in[0], out[1], errp[1], false, &e);
		}
		agent_close_fd(&in[0]);
		agent_close_fd(&out[1]);
		agent_close_fd(&errp[1]);
		if (pid < 0) {
			agent_close_fd(&in[1]);
			agent_close_fd(&out[0]);
			agent_close_fd(&errp[0]);
			conn_error(c, ch, &e);
			return;
		}
	}

	struct proc *p = xcalloc(1, sizeof(*p));
	p->pid = pid;
	p->tag = rs->tag ? xstrdup(rs->tag) : NULL;
	p->argv = strv_dup(rs->x.argv, rs->x.argc);
	p->cwd = xstrdup(rs->x.cwd ? rs->x.cwd : ".");
	p->env_keys = strv_dup(rs->x.env_keys, rs->x.env_n);
	p->pty = rs->pty;
	if (rs->pty) {
		p->out_fd = master;
		p->in_fd = fcntl(master, F_DUPFD_CLOEXEC, 0);
		p->err_fd = -1;
	} else {
		p->out_fd = out[0];
		p->err_fd = errp[0];
		p->in_fd = in[1];
		if (!rs->x.stdin_pipe)
			agent_close_fd(&p->in_fd);
	}
	p->pfd_out = p->pfd_err = -1;
	p->limit = (size_t)rs->replay_bytes;
	if (rs->hold)
		p->first_hold_until = start + AGENT_FIRST_HOLD_NS;
	p->start_ns = start;
	p->start_wall_ms = wall_ms();
	p->grace_ns = rs->x.kill_grace_ms * 1000000LL;
	if (rs->x.timeout_ms)
		p->timeout_at = start + rs->x.timeout_ms * 1000000LL;
	t->p = xrealloc(t->p, (t->n + 1) * sizeof(*t->p));
	t->p[t->n++] = p;
	answer_proc(c, ch, p, "process");
}

void op_procs(struct conn *c, uint32_t ch, const struct req *r)
{
	struct procs *t = table(c->a);
	struct jw w;
	jw_init(&w);
	jw_obj_open(&w);
	jw_key(&w, "processes");
	jw_arr_open(&w);
	for (size_t i = 0; i < t->n; i++)
		proc_json(&w, t->p[i]);
	jw_arr_close(&w);
	jw_obj_close(&w);
	conn_frame(c, GUEST_RESULT, ch, w.buf, w.len);
	jw_free(&w);
}

/* --- attach ------------------------------------------------------------------------------ */

static void attach_unhold(struct attach_op *x)
{
	if (!x->hold)
		return;
	for (struct attach_op **pp = &x->p->holds; *pp; pp = &(*pp)->hold_next)
		if (*pp == x) {
			*pp = x->hold_next;
			break;
		}
	x->hold = false;
}

#define AGENT_HANGUP_NS (2000 * 1000000LL)

/* As a terminal's hangup when its reader goes: SIGHUP to the group now, SIGKILL after a
 * grace period (procs_step), to this very process, whatever pids are reused meanwhile. */
static void attach_hang_up(struct attach_op *x)
{
	struct proc *p = x->p;
	if (!x->hangup || p->exited)
		return;
	x->hangup = false;
	kill(-p->pid, SIGHUP);
	kill(-p->pid, SIGCONT);
	p->term_sent = true;
	p->kill_at = agent_now_ns() + AGENT_HANGUP_NS;
}

static void attach_finish(struct attach_op *x)
{
	attach_unhold(x);
	struct jw w;
	jw_init(&w);
	jw_obj_open(&w);
	jw_key(&w, "process");
	proc_json(&w, x->p);
	jw_key(&w, "detached");
	jw_bool(&w, x->detached);
	jw_key(&w, "position");
	jw_int(&w, (int64_t)x->pos);
	jw_obj_close(&w);
	op_result(&x->op, &w);
	jw_free(&w);
}

/* Sends what the credit allows; true when the reader has everything produced so far. */
static bool attach_send(struct attach_op *x)
{
	struct proc *p = x->p;
	if (!x->output) {
		x->pos = p->produced;
		return true;
	}
	uint64_t start = buf_start(p);
	if (x->pos < start) {
		if (op_send_room(&x->op) < 64)
			return false;
		struct jw w;
		jw_init(&w);
		jw_obj_open(&w);
		jw_key(&w, "type");
		jw_str(&w, "gap");
		jw_key(&w, "bytes");
		jw_int(&w, (int64_t)(start - x->pos));
		jw_obj_close(&w);
		conn_frame(x->op.conn, GUEST_EVENT, x->op.ch, w.buf, w.len);
		x->op.send_credit -= w.len;
		jw_free(&w);
		x->pos = start;
	}
	while (x->pos < p->produced) {
		size_t room = op_send_room(&x->op);
		if (!room)
			return false;
		const struct chunk *ck = buf_find(p, x->pos);
		size_t at = (size_t)(x->pos - ck->off);
		size_t n = ck->len - at < room ? ck->len - at : room;
		conn_frame(x->op.conn, ck->stream, x->op.ch, ck->data + at, n);
		x->op.send_credit -= n;
		x->pos += n;
	}
	return true;
}

static void attach_cancel(struct op *op)
{
	struct attach_op *x = (struct attach_op *)op;
	x->detached = true;
	attach_hang_up(x);
	attach_finish(x);
}

static int attach_poll_fill(struct op *op, struct pollfd *pfd, int64_t *deadline)
{
	struct attach_op *x = (struct attach_op *)op;
	bool pending = x->output && x->pos < x->p->produced && op_send_room(op) > 0;
	if (pending || x->p->ended || !x->follow || x->pos < buf_start(x->p))
		*deadline = agent_now_ns();
	return 0;
}

static void attach_step(struct op *op, const struct pollfd *pfd, int n)
{
	struct attach_op *x = (struct attach_op *)op;
	if (!attach_send(x))
		return;
	if (x->p->ended) {
		attach_finish(x);
	} else if (!x->follow) {
		x->detached = true;
		attach_finish(x);
	}
}

static void attach_destroy(struct op *op)
{
	struct attach_op *x = (struct attach_op *)op;
	/* Ended without the process (the host went): a terminal's process goes too. */
	attach_hang_up(x);
	attach_unhold(x);
	x->p->refs--;
	free(x);
}

static const struct op_vt attach_vt = {
	.name = "attach",
	.cancel = attach_cancel,
	.poll_fill = attach_poll_fill,
	.step = attach_step,
	.destroy = attach_destroy,
};

void op_attach(struct conn *c, uint32_t ch, const struct req *r)
{
	struct err e;
	struct proc *p = lookup(c->a, &r->u.attach.ref, &e);
	if (!p) {
		conn_error(c, ch, &e);
		return;
	}
	struct attach_op *x = xcalloc(1, sizeof(*x));
	op_register(c, &x->op, &attach_vt, ch);
	x->p = p;
	p->refs++;
	x->output = r->u.attach.output;
	x->follow = r->u.attach.follow;
	x->hangup = r->u.attach.hangup;
	uint64_t start = buf_start(p);
	int64_t want = r->u.attach.replay_bytes;
	x->pos = want < 0 || (uint64_t)want >= p->produced - start ? start
								   : p->produced - (uint64_t)want;
	/* A holding reader of output it follows: from now on nothing it has not been sent is
	 * pushed out, and the first one ends the spawn's hold. */
	if (r->u.attach.hold && x->output && x->follow && !p->ended) {
		x->hold = true;
		x->hold_next = p->holds;
		p->holds = x;
		p->first_hold_until = 0;
	}
	/* The reader learns at once that it is attached (and where it starts). */
	struct jw w;
	jw_init(&w);
	jw_obj_open(&w);
	jw_key(&w, "type");
	jw_str(&w, "attached");
	jw_key(&w, "pid");
	jw_int(&w, p->pid);
	jw_key(&w, "position");
	jw_int(&w, (int64_t)x->pos);
	jw_obj_close(&w);
	conn_frame(c, GUEST_EVENT, ch, w.buf, w.len);
	x->op.send_credit -= w.len;
	jw_free(&w);
}

/* --- signal, resize ----------------------------------------------------------------------- */

static void answer_empty(struct conn *c, uint32_t ch)
{
	conn_frame(c, GUEST_RESULT, ch, "{}", 2);
}

void op_signal(struct conn *c, uint32_t ch, const struct req *r)
{
	struct err e;
	struct proc *p = lookup(c->a, &r->u.signal.ref, &e);
	if (p && p->exited) {
		err_set(&e, ESRCH, "process %d has ended", p->pid);
		p = NULL;
	}
	if (!p) {
		conn_error(c, ch, &e);
		return;
	}
	int sig = (int)r->u.signal.signal;
	/* The whole group: what the command started goes with it, as with a terminal's ^C. */
	if (kill(-p->pid, sig) < 0 && kill(p->pid, sig) < 0) {
		err_sys(&e, errno, "cannot signal process %d", p->pid);
		conn_error(c, ch, &e);
		return;
	}
	/* Killed: its timeout has nothing left to do (any other signal leaves it armed). */
	if (sig == SIGKILL)
		p->term_sent = true;
	answer_empty(c, ch);
}

void op_resize(struct conn *c, uint32_t ch, const struct req *r)
{
	struct err e;
	struct proc *p = lookup(c->a, &r->u.resize.ref, &e);
	if (p && (!p->pty || p->ended)) {
		err_set(&e, p->ended ? ESRCH : ENOTTY,
			p->ended ? "process %d has ended" : "process %d has no terminal", p->pid);
		p = NULL;
	}
	if (!p) {
		conn_error(c, ch, &e);
		return;
	}
	struct winsize ws = { .ws_row = (unsigned short)r->u.resize.rows,
			      .ws_col = (unsigned short)r->u.resize.cols };
	if (ioctl(p->out_fd >= 0 ? p->out_fd : p->in_fd, TIOCSWINSZ, &ws) < 0) {
		err_sys(&e, errno, "cannot resize the terminal of process %d", p->pid);
		conn_error(c, ch, &e);
		return;
	}
	answer_empty(c, ch);
}

/* --- input ------------------------------------------------------------------------------ */

struct input_op {
	struct op op;
	struct proc *p;
	uint8_t *buf;
	size_t off, len, cap;
	uint64_t written;
	bool eof, close;
	int pfd;
};

static void input_end(struct input_op *x, int errnum)
{
	if (x->p->writer == &x->op)
		x->p->writer = NULL;
	if (errnum) {
		struct err e;
		err_set(&e, errnum, "the stdin of process %d is closed", x->p->pid);
		op_error(&x->op, &e);
		return;
	}
	struct jw w;
	jw_init(&w);
	jw_obj_open(&w);
	jw_key(&w, "bytes");
	jw_int(&w, (int64_t)x->written);
	jw_key(&w, "closed");
	jw_bool(&w, x->close);
	jw_obj_close(&w);
	op_result(&x->op, &w);
	jw_free(&w);
}

/* Writes buffered bytes; ends the op at EOF once all are in. */
static void input_feed(struct input_op *x)
{
	struct proc *p = x->p;
	while (x->off < x->len) {
		if (p->in_fd < 0) {
			input_end(x, EPIPE);
			return;
		}
		ssize_t n = write(p->in_fd, x->buf + x->off, x->len - x->off);
		if (n > 0) {
			x->off += (size_t)n;
			x->written += (uint64_t)n;
			op_consumed(&x->op, (size_t)n);
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		agent_close_fd(&p->in_fd);
		input_end(x, EPIPE);
		return;
	}
	x->off = x->len = 0;
	if (!x->eof)
		return;
	if (x->close && p->in_fd >= 0) {
		if (p->pty) {
			/* A terminal has no end of input of its own: its line discipline makes
			 * one of ^D at the start of a line. */
			if (write(p->in_fd, "\x04", 1) < 0)
				agent_log("cannot send ^D to process %d", p->pid);
		} else {
			agent_close_fd(&p->in_fd);
		}
	}
	input_end(x, 0);
}

static void input_data(struct op *op, const uint8_t *d, size_t n)
{
	struct input_op *x = (struct input_op *)op;
	if (x->len + n > x->cap) {
		x->cap = x->len + n;
		x->buf = xrealloc(x->buf, x->cap);
	}
	memcpy(x->buf + x->len, d, n);
	x->len += n;
	input_feed(x);
}

static void input_eof(struct op *op)
{
	struct input_op *x = (struct input_op *)op;
	x->eof = true;
	input_feed(x);
}

static int input_poll_fill(struct op *op, struct pollfd *pfd, int64_t *deadline)
{
	struct input_op *x = (struct input_op *)op;
	x->pfd = -1;
	if (x->off < x->len && x->p->in_fd >= 0) {
		pfd[0] = (struct pollfd){ .fd = x->p->in_fd, .events = POLLOUT };
		x->pfd = 0;
		return 1;
	}
	if (x->off < x->len)
		*deadline = agent_now_ns(); /* its stdin went: fail now */
	return 0;
}

static void input_step(struct op *op, const struct pollfd *pfd, int n)
{
	struct input_op *x = (struct input_op *)op;
	if (x->off < x->len)
		input_feed(x);
}

static void input_destroy(struct op *op)
{
	struct input_op *x = (struct input_op *)op;
	if (x->p->writer == op)
		x->p->writer = NULL;
	x->p->refs--;
	free(x->buf);
	free(x);
}

static const struct op_vt input_vt = {
	.name = "input",
	.data = input_data,
	.eof = input_eof,
	.poll_fill = input_poll_fill,
	.step = input_step,
	.destroy = input_destroy,
};

void op_input(struct conn *c, uint32_t ch, const struct req *r)
{
	struct err e;
	struct proc *p = lookup(c->a, &r->u.input.ref, &e);
	if (p && (p->in_fd < 0 || p->ended)) {
		err_set(&e, EPIPE,
			p->ended ? "process %d has ended" : "the stdin of process %d is closed",
			p->pid);
		p = NULL;
	}
	if (p && p->writer) {
		err_set(&e, EBUSY, "another client is writing to the stdin of process %d", p->pid);
		p = NULL;
	}
	if (!p) {
		conn_error(c, ch, &e);
		return;
	}
	struct input_op *x = xcalloc(1, sizeof(*x));
	op_register(c, &x->op, &input_vt, ch);
	x->p = p;
	x->close = r->u.input.close;
	x->pfd = -1;
	p->refs++;
	p->writer = &x->op;
}
