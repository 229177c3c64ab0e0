/* exec: runs a command in its own session and process group, streams its output within the
 * channel's credit, feeds its stdin from DATA frames, and enforces timeout and cancel by
 * signalling the whole group (SIGTERM, then SIGKILL after the grace period). */
#include "agent.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/fsuid.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/cleanup.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#endif

#define DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

struct exec_op {
	struct op op;
	pid_t pid; /* main process, leader of its process group */
	int out_fd, err_fd, in_fd;
	uint8_t *inbuf; /* stdin bytes received but not yet taken by the child */
	size_t in_off, in_len, in_cap;
	bool in_eof;
	bool stdin_pipe;
	bool exited;
	int status;
	int64_t start_ns, end_ns;
	int64_t timeout_at; /* 0: none */
	int64_t kill_at;    /* SIGKILL due; 0: none */
	int64_t grace_ns;
	bool term_sent, timed_out, cancelled;
	bool finished;      /* the RESULT was sent (not an ERROR for a protocol fault) */
	int64_t drain_left; /* time still allowed for draining the pipes after the exit */
	int64_t drain_mark;
	bool drain_eligible; /* the pipes were polled (not held back by credit) */
	int pfd_out, pfd_err, pfd_in;
};

void agent_close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void start_kill(struct exec_op *x)
{
	if (x->term_sent)
		return;
	x->term_sent = true;
	kill(-x->pid, SIGTERM);
	/* Stopped processes would not act on SIGTERM before the grace period ends. */
	kill(-x->pid, SIGCONT);
	x->kill_at = agent_now_ns() + x->grace_ns;
	if (x->grace_ns == 0) {
		kill(-x->pid, SIGKILL);
		x->kill_at = 0;
	}
}

static void finish(struct exec_op *x)
{
	x->finished = true;
	/* After a timeout or cancel nothing of the group may survive the result. */
	if (x->timed_out || x->cancelled)
		kill(-x->pid, SIGKILL);
	agent_close_fd(&x->out_fd);
	agent_close_fd(&x->err_fd);
	agent_close_fd(&x->in_fd);

	struct jw w;
	char sb[16];
	jw_init(&w);
	jw_obj_open(&w);
	jw_key(&w, "exitCode");
	if (WIFEXITED(x->status))
		jw_int(&w, WEXITSTATUS(x->status));
	else
		jw_null(&w);
	jw_key(&w, "signal");
	if (WIFSIGNALED(x->status))
		jw_str(&w, agent_signame(WTERMSIG(x->status), sb));
	else
		jw_null(&w);
	jw_key(&w, "durationMs");
	jw_fixed(&w, (double)(x->end_ns - x->start_ns) / 1e6, 3);
	jw_key(&w, "timedOut");
	jw_bool(&w, x->timed_out);
	jw_key(&w, "cancelled");
	jw_bool(&w, x->cancelled);
	jw_key(&w, "pid");
	jw_int(&w, x->pid);
	jw_obj_close(&w);
	op_result(&x->op, &w);
	jw_free(&w);
}

static void pump(struct exec_op *x, int *fd, uint8_t type)
{
	size_t room = op_send_room(&x->op);
	if (*fd < 0 || !room)
		return;
	uint8_t *dst = conn_reserve(x->op.conn, room);
	ssize_t n = read(*fd, dst, room);
	if (n > 0) {
		conn_commit(x->op.conn, type, x->op.ch, (size_t)n);
		x->op.send_credit -= (uint64_t)n;
		return;
	}
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	agent_close_fd(fd);
}

/* Moves buffered stdin into the pipe; the credit comes back as the child takes it. */
static void feed_stdin(struct exec_op *x)
{
	while (x->in_fd >= 0 && x->in_off < x->in_len) {
		ssize_t n = write(x->in_fd, x->inbuf + x->in_off, x->in_len - x->in_off);
		if (n > 0) {
			x->in_off += (size_t)n;
			op_consumed(&x->op, (size_t)n);
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return;
		/* The child closed its stdin: what it did not read is dropped. */
		op_consumed(&x->op, x->in_len - x->in_off);
		agent_close_fd(&x->in_fd);
	}
	if (x->in_off == x->in_len) {
		x->in_off = x->in_len = 0;
		if (x->in_eof)
			agent_close_fd(&x->in_fd);
	}
}

static void exec_data(struct op *op, const uint8_t *p, size_t n)
{
	struct exec_op *x = (struct exec_op *)op;
	if (x->in_fd < 0 || x->in_eof) {
		op_consumed(op, n);
		return;
	}
	if (x->in_len + n > x->in_cap) {
		x->in_cap = x->in_len + n;
		x->inbuf = xrealloc(x->inbuf, x->in_cap);
	}
	memcpy(x->inbuf + x->in_len, p, n);
	x->in_len += n;
	feed_stdin(x);
}

static void exec_eof(struct op *op)
{
	struct exec_op *x = (struct exec_op *)op;
	x->in_eof = true;
	feed_stdin(x);
}

static void exec_cancel(struct op *op)
{
	struct exec_op *x = (struct exec_op *)op;
	x->cancelled = true;
	if (x->exited)
		finish(x);
	else
		start_kill(x);
}

static int exec_poll_fill(struct op *op, struct pollfd *pfd, int64_t *deadline)
{
	struct exec_op *x = (struct exec_op *)op;
	int n = 0;
	bool room = op_send_room(op) > 0;
	x->pfd_out = x->pfd_err = x->pfd_in = -1;
	if (x->out_fd >= 0 && room) {
		pfd[n] = (struct pollfd){ .fd = x->out_fd, .events = POLLIN };
		x->pfd_out = n++;
	}
	if (x->err_fd >= 0 && room) {
		pfd[n] = (struct pollfd){ .fd = x->err_fd, .events = POLLIN };
		x->pfd_err = n++;
	}
	if (x->in_fd >= 0 && x->in_off < x->in_len) {
		pfd[n] = (struct pollfd){ .fd = x->in_fd, .events = POLLOUT };
		x->pfd_in = n++;
	}
	x->drain_eligible = room;
	int64_t d = INT64_MAX;
	if (x->timeout_at && !x->term_sent)
		d = x->timeout_at;
	if (x->kill_at && x->kill_at < d)
		d = x->kill_at;
	if (x->exited) {
		int64_t now = agent_now_ns();
		if (x->out_fd < 0 && x->err_fd < 0)
			d = now;
		else if (room && now + x->drain_left < d)
			d = now + x->drain_left;
	}
	if (d < *deadline)
		*deadline = d;
	return n;
}

static void exec_step(struct op *op, const struct pollfd *pfd, int n)
{
	struct exec_op *x = (struct exec_op *)op;
	if (n) {
		if (x->pfd_out >= 0 && pfd[x->pfd_out].revents)
			pump(x, &x->out_fd, GUEST_STDOUT);
		if (x->pfd_err >= 0 && pfd[x->pfd_err].revents)
			pump(x, &x->err_fd, GUEST_STDERR);
		if (x->pfd_in >= 0 && pfd[x->pfd_in].revents)
			feed_stdin(x);
	}
	int64_t now = agent_now_ns();
	if (!x->exited) {
		if (x->timeout_at && now >= x->timeout_at && !x->term_sent) {
			/* A command that already exited (its status not collected yet) finished in
			 * time: peek without reaping before calling it timed out. */
			siginfo_t si = { 0 };
			if (waitid(P_PID, (id_t)x->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
			    si.si_pid == x->pid)
				return;
			x->timed_out = true;
			start_kill(x);
		}
		if (x->kill_at && now >= x->kill_at) {
			kill(-x->pid, SIGKILL);
			x->kill_at = 0;
		}
		return;
	}
	/* Time spent waiting for credit does not count against the drain period: output
	 * written before the exit is never lost to a slow host. */
	if (x->drain_eligible)
		x->drain_left -= now - x->drain_mark;
	x->drain_mark = now;
	if ((x->out_fd < 0 && x->err_fd < 0) || x->drain_left <= 0)
		finish(x);
}

static void exec_child_exit(struct op *op, int status)
{
	struct exec_op *x = (struct exec_op *)op;
	x->exited = true;
	x->status = status;
	x->end_ns = agent_now_ns();
	x->drain_left = AGENT_DRAIN_NS;
	x->drain_mark = x->end_ns;
	x->kill_at = 0;
}

static void exec_destroy(struct op *op)
{
	struct exec_op *x = (struct exec_op *)op;
	/* Ended without its RESULT (connection lost, protocol fault): nobody can wait for the
	 * command any more. */
	if (!x->finished)
		kill(-x->pid, SIGKILL);
	agent_close_fd(&x->out_fd);
	agent_close_fd(&x->err_fd);
	agent_close_fd(&x->in_fd);
	free(x->inbuf);
	free(x);
}

static const struct op_vt exec_vt = {
	.name = "exec",
	.data = exec_data,
	.eof = exec_eof,
	.cancel = exec_cancel,
	.poll_fill = exec_poll_fill,
	.step = exec_step,
	.child_exit = exec_child_exit,
	.destroy = exec_destroy,
};

/* What the child reports on its status pipe when it cannot exec. */
struct start_failure {
	int stage; /* 0: exec, 1: chdir, 2: other setup */
	int errnum;
};

/* Finds key in a list of keys; the index or -1. */
static ssize_t find_key(const char *const *keys, size_t n, const char *key)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(keys[i], key) == 0)
			return (ssize_t)i;
	return -1;
}

/* The command's environment: the agent's defaults, under the image's ENV, under the
 * request's env (which the host already merged over the session's). */
static char **build_env(const struct req_exec *r, const struct image_env *img, const char *home,
			const char *user, const char **ret_path)
{
	const char *defaults[][2] = {
		{ "HOME", home }, { "PATH", DEFAULT_PATH }, { "LANG", "C.UTF-8" },
		{ "USER", user }, { "LOGNAME", user },
	};
	size_t nd = ARRAY_SIZE(defaults);
	char **envp = xcalloc(nd + img->n + r->env_n + 1, sizeof(*envp));
	size_t n = 0;
	*ret_path = DEFAULT_PATH;
	for (size_t i = 0; i < nd; i++) {
		const char *key = defaults[i][0];
		const char *v = defaults[i][1];
		ssize_t k = find_key((const char *const *)img->keys, img->n, key);
		if (k >= 0)
			v = img->vals[k];
		k = find_key(r->env_keys, r->env_n, key);
		if (k >= 0)
			v = r->env_vals[k];
		if (strcmp(key, "PATH") == 0)
			*ret_path = v;
		if (v) /* a user without a name has no USER */
			envp[n++] = xasprintf("%s=%s", key, v);
	}
	for (size_t i = 0; i < img->n; i++) {
		const char *key = img->keys[i];
		bool is_default = false;
		for (size_t d = 0; d < nd; d++)
			is_default |= strcmp(key, defaults[d][0]) == 0;
		/* Later duplicates in the file and keys the request sets are left to those. */
		if (is_default || find_key((const char *const *)img->keys, i, key) >= 0 ||
		    find_key(r->env_keys, r->env_n, key) >= 0)
			continue;
		envp[n++] = xasprintf("%s=%s", key, img->vals[i]);
	}
	for (size_t j = 0; j < r->env_n; j++) {
		bool is_default = false;
		for (size_t d = 0; d < nd; d++)
			is_default |= strcmp(r->env_keys[j], defaults[d][0]) == 0;
		/* A later duplicate cannot happen: the JSON reader rejects duplicate keys. */
		if (!is_default)
			envp[n++] = xasprintf("%s=%s", r->env_keys[j], r->env_vals[j]);
	}
	return envp;
}

/* The files to try, in order, as execvp would: argv[0] itself when it has a slash, else
 * each PATH entry (an empty one meaning the working directory). */
static char **build_candidates(const char *cmd, const char *path)
{
	if (strchr(cmd, '/')) {
		char **c = xcalloc(2, sizeof(*c));
		c[0] = xstrdup(cmd);
		return c;
	}
	size_t n = 1;
	for (const char *p = path; *p; p++)
		n += *p == ':';
	char **c = xcalloc(n + 1, sizeof(*c));
	size_t i = 0;
	const char *p = path;
	for (;;) {
		const char *e = strchrnul(p, ':');
		if (e == p)
			c[i++] = xstrdup(cmd);
		else
			c[i++] = xasprintf("%.*s/%s", (int)(e - p), p, cmd);
		if (!*e)
			break;
		p = e + 1;
	}
	return c;
}

static void free_strv(char **v)
{
	if (!v)
		return;
	for (char **p = v; *p; p++)
		free(*p);
	free(v);
}

static void child_report(int fd, int stage, int errnum)
{
	struct start_failure f = { stage, errnum };
	ssize_t k = write(fd, &f, sizeof(f));
	(void)k;
	_exit(127);
}

/* What a command never has, even as root (in a VM, where commands run as root): tracing
 * or reading the memory of other processes (the agent's), loading kernel modules and raw
 * I/O (ports, /dev/mem). Dropped from the bounding set and every set of the command's, so
 * that no exec gives them back. A template that needs a module has it built into the guest
 * kernel. */
enum { CAP_MODULE = 16, CAP_RAWIO = 17, CAP_PTRACE = 19 }; /* linux/capability.h */
static const int command_drops[] = { CAP_PTRACE, CAP_MODULE, CAP_RAWIO };

/* capget/capset's arguments (linux/capability.h, which musl's toolchain lacks). */
#define CAP_VERSION_3 0x20080522
struct cap_header {
	uint32_t version;
	int pid;
};
struct cap_data {
	uint32_t effective;
	uint32_t permitted;
	uint32_t inheritable;
};

/* Only async-signal-safe calls: it runs in the child after fork. */
static int drop_command_caps(void)
{
	if (geteuid() != 0)
		return 0; /* an unprivileged agent's commands have none of them anyway */
	for (size_t i = 0; i < ARRAY_SIZE(command_drops); i++)
		/* Already out of a jail's bounding set, whose agent may not drop (no
		 * CAP_SETPCAP). */
		if (prctl(PR_CAPBSET_READ, command_drops[i], 0, 0, 0) == 1 &&
		    prctl(PR_CAPBSET_DROP, command_drops[i], 0, 0, 0) < 0)
			return -errno;
	struct cap_header h = { .version = CAP_VERSION_3, .pid = 0 };
	struct cap_data d[2];
	if (syscall(SYS_capget, &h, d) < 0)
		return -errno;
	for (size_t i = 0; i < ARRAY_SIZE(command_drops); i++) {
		uint32_t bit = 1u << (command_drops[i] % 32);
		struct cap_data *w = &d[command_drops[i] / 32];
		w->effective &= ~bit;
		w->permitted &= ~bit;
		w->inheritable &= ~bit;
	}
	if (syscall(SYS_capset, &h, d) < 0)
		return -errno;
	return prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL
		       ? -errno
		       : 0;
}

/* Runs in the child, which shares the agent's memory until it execs (spawn_child): only
 * async-signal-safe calls from here on, nothing that allocates or writes the agent's data. */
static void __attribute__((noreturn))
child_main(const struct agent *a, bool as_root, int cwd_fd, int in_fd, int out_fd, int err_fd,
	   int status_fd, bool ctty, char **argv, char **envp, char **cand)
{
	static const int sigs[] = { SIGCHLD, SIGTERM, SIGINT, SIGHUP, SIGPIPE };
	for (size_t i = 0; i < ARRAY_SIZE(sigs); i++)
		signal(sigs[i], SIG_DFL);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	if (setsid() < 0)
		child_report(status_fd, 2, errno);
	/* A terminal's command: the terminal becomes its session's controlling one, so that
	 * ^C and a resize reach its foreground group. */
	if (ctty && ioctl(in_fd, TIOCSCTTY, 0) < 0)
		child_report(status_fd, 2, errno);
	/* The agent's capabilities and uid stay with the agent: a command runs as a plain user
	 * with no capability and no supplementary group (see harden() in main.c). */
	if (a->as_user && !as_root &&
	    (setgroups(0, NULL) < 0 || setresgid(a->gid, a->gid, a->gid) < 0 ||
	     setresuid(a->uid, a->uid, a->uid) < 0))
		child_report(status_fd, 2, errno);
	/* Root's command: the agent's own ids, but its file-system ids back to root's (the
	 * agent works on files as the command user), which gives the effective set its file
	 * capabilities again. Root inside a jail is its user namespace's, never the host's. */
	if (as_root && (setgroups(0, NULL) < 0 || setresgid(0, 0, 0) < 0 || setresuid(0, 0, 0) < 0))
		child_report(status_fd, 2, errno);
	if (as_root) {
		setfsgid(0);
		setfsuid(0);
	}
	int r = drop_command_caps();
	if (r < 0)
		child_report(status_fd, 2, -r);
	if (dup2(in_fd, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(err_fd, 2) < 0)
		child_report(status_fd, 2, errno);
	if (fchdir(cwd_fd) < 0)
		child_report(status_fd, 1, errno);
	int saved = ENOENT;
	bool eacces = false;
	for (char **c = cand; *c; c++) {
		execve(*c, argv, envp);
		saved = errno;
		if (saved == EACCES)
			eacces = true;
		else if (saved != ENOENT && saved != ENOTDIR)
			break;
	}
	child_report(status_fd, 0,
		     eacces && (saved == ENOENT || saved == ENOTDIR) ? EACCES : saved);
	_exit(127);
}

/* What spawn_child's child needs. */
struct child_args {
	const struct agent *a;
	bool as_root, ctty;
	int cwd_fd, in_fd, out_fd, err_fd, status_fd;
	char **argv, **envp, **cand;
};

static int child_entry(void *arg)
{
	const struct child_args *c = arg;
	child_main(c->a, c->as_root, c->cwd_fd, c->in_fd, c->out_fd, c->err_fd, c->status_fd,
		   c->ctty, c->argv, c->envp, c->cand);
}

/* The child's stack: the agent is single-threaded, and the parent waits (CLONE_VFORK) until
 * the child has exec'd or exited, so one serves every start. */
#define CHILD_STACK_BYTES (256u << 10)
static char *child_stack;

/* Starts the command's process the way posix_spawn does: a child sharing the agent's memory
 * (no copy of its page tables, which a fork of the agent costs on every command) until it
 * execs, the agent suspended meanwhile. Every signal is blocked across it, so that no
 * handler of the agent's runs in the child before child_main resets them. */
static pid_t spawn_child(struct child_args *args)
{
	if (!child_stack) {
		child_stack = mmap(NULL, CHILD_STACK_BYTES, PROT_READ | PROT_WRITE,
				   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
		if (child_stack == MAP_FAILED) {
			child_stack = NULL;
			pid_t pid = fork();
			if (pid == 0)
				child_entry(args);
			return pid;
		}
	}
#if defined(__SANITIZE_ADDRESS__)
	/* The last child left its frames' redzones poisoned in the shadow memory it shared
	 * with the agent (it exec'd or exited without returning): clear them, or the next
	 * child's frames at other depths trip over them. */
	__asan_unpoison_memory_region(child_stack, CHILD_STACK_BYTES);
#endif
	sigset_t all, old;
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);
	pid_t pid = clone(child_entry, child_stack + CHILD_STACK_BYTES,
			  CLONE_VM | CLONE_VFORK | SIGCHLD, args);
	int saved = errno;
	sigprocmask(SIG_SETMASK, &old, NULL);
	errno = saved;
	return pid;
}

int agent_make_pipe(int p[2], bool parent_reads)
{
	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	int mine = parent_reads ? p[0] : p[1];
	fcntl(mine, F_SETFL, fcntl(mine, F_GETFL) | O_NONBLOCK);
	return 0;
}

pid_t agent_start_command(struct agent *a, const struct req_exec *rx, int in_fd, int out_fd,
			  int err_fd, bool ctty, struct err *e)
{
	struct wspath wp = { 0 };
	_cleanup_close_ int cwd_fd = -1;

	const struct workspace *ws = rx->cwd ? agent_ws(a, rx->any_path) : &a->ws;
	if (wspath_init(ws, rx->cwd ? rx->cwd : ".", &wp, e) < 0 ||
	    (cwd_fd = ws_open(ws, &wp, O_PATH | O_DIRECTORY, 0, e)) < 0) {
		if (rx->cwd)
			err_wrap(e, "cwd");
		wspath_fini(&wp);
		return -1;
	}
	wspath_fini(&wp);

	const char *path;
	/* The name the image's /etc/passwd gives the user it runs as, if any. */
	struct passwd pw, *found = NULL;
	char pwbuf[1024];
	uid_t uid = rx->as_root || !a->as_user ? getuid() : a->uid;
	if (getpwuid_r(uid, &pw, pwbuf, sizeof(pwbuf), &found) != 0)
		found = NULL;
	char **envp = build_env(rx, &a->image_env, a->ws.alias ? a->ws.alias : a->ws.path,
				found ? found->pw_name : NULL, &path);
	char **cand = build_candidates(rx->argv[0], path);
	int st[2] = { -1, -1 };
	pid_t pid = -1;
	int r1 = agent_make_pipe(st, true);
	if (r1 < 0) {
		err_sys(e, -r1, "cannot execute `%s`: pipe", rx->argv[0]);
		goto out;
	}
	/* The status pipe is read blocking: the child writes to it or execs right away. */
	fcntl(st[0], F_SETFL, fcntl(st[0], F_GETFL) & ~O_NONBLOCK);

	struct child_args args = { .a = a,
				   .as_root = rx->as_root,
				   .ctty = ctty,
				   .cwd_fd = cwd_fd,
				   .in_fd = in_fd,
				   .out_fd = out_fd,
				   .err_fd = err_fd,
				   .status_fd = st[1],
				   .argv = (char **)rx->argv,
				   .envp = envp,
				   .cand = cand };
	pid = spawn_child(&args);
	if (pid < 0) {
		err_sys(e, errno, "cannot execute `%s`: clone", rx->argv[0]);
		goto out;
	}

	agent_close_fd(&st[1]);
	struct start_failure f;
	ssize_t k;
	do
		k = read(st[0], &f, sizeof(f));
	while (k < 0 && errno == EINTR);
	if (k == (ssize_t)sizeof(f)) {
		/* The child is ours and not yet seen by the reaper: collect it here. */
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		if (f.stage == 1)
			err_sys(e, f.errnum, "cannot change to the working directory");
		else
			err_sys(e, f.errnum, "cannot execute `%s`", rx->argv[0]);
		pid = -1;
	}
out:
	agent_close_fd(&st[0]);
	agent_close_fd(&st[1]);
	free_strv(envp);
	free_strv(cand);
	return pid;
}

void op_exec(struct conn *c, uint32_t ch, const struct req *r)
{
	const struct req_exec *rx = &r->u.exec;
	struct err e;
	int in[2] = { -1, -1 }, out[2] = { -1, -1 }, errp[2] = { -1, -1 };
	int r1;
	if ((r1 = agent_make_pipe(in, false)) < 0 || (r1 = agent_make_pipe(out, true)) < 0 ||
	    (r1 = agent_make_pipe(errp, true)) < 0) {
		err_sys(&e, -r1, "cannot execute `%s`: pipe", rx->argv[0]);
		goto fail;
	}
	int64_t start = agent_now_ns();
	pid_t pid = agent_start_command(c->a, rx, in[0], out[1], errp[1], false, &e);
	if (pid < 0)
		goto fail;
	agent_close_fd(&in[0]);
	agent_close_fd(&out[1]);
	agent_close_fd(&errp[1]);

	struct exec_op *x = xcalloc(1, sizeof(*x));
	op_register(c, &x->op, &exec_vt, ch);
	x->op.child = pid;
	x->pid = pid;
	x->in_fd = in[1];
	x->out_fd = out[0];
	x->err_fd = errp[0];
	x->stdin_pipe = rx->stdin_pipe;
	x->start_ns = start;
	x->grace_ns = rx->kill_grace_ms * 1000000LL;
	if (rx->timeout_ms)
		x->timeout_at = start + rx->timeout_ms * 1000000LL;
	if (!x->stdin_pipe)
		agent_close_fd(&x->in_fd);
	return;

fail:
	for (int i = 0; i < 2; i++) {
		agent_close_fd(&in[i]);
		agent_close_fd(&out[i]);
		agent_close_fd(&errp[i]);
	}
	conn_error(c, ch, &e);
}
