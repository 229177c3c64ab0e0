/* spawner: the process that clones the plans' children for the daemon (spawn.h, "the
 * spawner"): starting it, the request and its reply, and the spawner's own loop. */
#include "util/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "util/cleanup.h"
#include "util/log.h"
#include "util/time.h"

#ifndef CLONE_PARENT
#define CLONE_PARENT 0x00008000
#endif

/* The largest plan that goes through the spawner (a jail's is about 20 KiB); a larger one is
 * cloned by the daemon. The socket's send buffer is set to hold it (start_locked). */
#define SPAWNER_MAX_MSG (128u << 10)
/* How long a request may take before the spawner is taken for hung. */
#define SPAWNER_TIMEOUT_MS 10000
/* A lost spawner is replaced at a request at least this long after. */
#define SPAWNER_RESTART_MS 5000
#define SPAWNER_MAGIC      0x6e776173u

struct request {
	uint32_t magic;
	uint32_t size; /* of the whole message */
	uint64_t flags;
	uint64_t caps_keep;
	int32_t parent;
	int32_t report_to;
	uint32_t cap_last;
	uint32_t n_ops;
	uint32_t n_fds; /* the plan's; the report pipe, the gate and the cgroup follow them */
	uint32_t has_cgroup;
	uint32_t seccomp_len; /* instructions; with has_seccomp */
	uint32_t has_seccomp;
	uint32_t argc, envc; /* UINT32_MAX: NULL */
	uint32_t ops_off, filter_off, argv_off, envp_off;
	struct spawn_fd fds[SPAWN_MAX_FDS]; /* `from` is the order of arrival */
};

struct reply {
	int32_t pid; /* or a negative errno */
	uint32_t placed;
};

static struct {
	pthread_mutex_t lock;
	int sock;         /* -1: no spawner */
	pid_t pid;        /* the spawner's while it is there, or a lost one's not yet reaped */
	uint64_t lost_at; /* when it was lost (time_mono_ms); 0: never started */
	_Atomic uint64_t via, direct;
} spawner_mod = { .lock = PTHREAD_MUTEX_INITIALIZER, .sock = -1 };

static int start_locked(struct err *err);

/* --- the request (the daemon) ----------------------------------------------------------- */

static size_t align8(size_t n)
{
	return (n + 7) & ~(size_t)7;
}

static size_t str_size(const char *s)
{
	return s ? strlen(s) + 1 : 0;
}

static size_t vec_len(char *const *v)
{
	size_t n = 0;
	while (v && v[n])
		n++;
	return n;
}

struct writer {
	unsigned char *buf;
	size_t at; /* where the next string goes */
};

/* A string's offset in the message, as the pointer the spawner turns back into one. */
static const char *put_str(struct writer *w, const char *s)
{
	if (!s)
		return NULL;
	size_t n = strlen(s) + 1;
	memcpy(w->buf + w->at, s, n);
	const char *off = (const char *)(uintptr_t)w->at;
	w->at += n;
	return off;
}

static void put_vec(struct writer *w, size_t off, char *const *v, size_t n)
{
	uintptr_t *slots = (uintptr_t *)(void *)(w->buf + off);
	for (size_t i = 0; i < n; i++)
		slots[i] = (uintptr_t)put_str(w, v[i]);
	slots[n] = 0;
}

/* The plan as one message, or NULL when it is larger than a message may be. */
static unsigned char *encode(const struct spawn_plan *p, uint64_t flags, bool cgroup, size_t *len)
{
	size_t argc = vec_len(p->argv), envc = vec_len(p->envp);
	size_t strings = 0;
	for (size_t i = 0; i < p->n; i++)
		strings += str_size(p->ops[i].src) + str_size(p->ops[i].dst) +
			   str_size(p->ops[i].fstype) + str_size(p->ops[i].data);
	for (size_t i = 0; i < argc; i++)
		strings += str_size(p->argv[i]);
	for (size_t i = 0; i < envc; i++)
		strings += str_size(p->envp[i]);
	size_t n_insns = p->seccomp ? p->seccomp->len : 0;
	size_t ops_off = align8(sizeof(struct request));
	size_t filter_off = align8(ops_off + p->n * sizeof(struct spawn_op));
	size_t argv_off = align8(filter_off + n_insns * sizeof(struct sock_filter));
	size_t envp_off = argv_off + (p->argv ? argc + 1 : 0) * sizeof(uintptr_t);
	size_t str_off = envp_off + (p->envp ? envc + 1 : 0) * sizeof(uintptr_t);
	size_t total = str_off + strings;
	if (total > SPAWNER_MAX_MSG || p->n > SPAWNER_MAX_MSG)
		return NULL;

	unsigned char *buf = xcalloc(1, total);
	struct request *rq = (struct request *)(void *)buf;
	*rq = (struct request){
		.magic = SPAWNER_MAGIC,
		.size = (uint32_t)total,
		.flags = flags,
		.caps_keep = p->caps_keep,
		.parent = (int32_t)p->parent,
		.report_to = p->report_to,
		.cap_last = p->cap_last,
		.n_ops = (uint32_t)p->n,
		.n_fds = (uint32_t)p->n_fds,
		.has_cgroup = cgroup,
		.seccomp_len = (uint32_t)n_insns,
		.has_seccomp = p->seccomp != NULL,
		.argc = p->argv ? (uint32_t)argc : UINT32_MAX,
		.envc = p->envp ? (uint32_t)envc : UINT32_MAX,
		.ops_off = (uint32_t)ops_off,
		.filter_off = (uint32_t)filter_off,
		.argv_off = (uint32_t)argv_off,
		.envp_off = (uint32_t)envp_off,
	};
	memcpy(rq->fds, p->fds, p->n_fds * sizeof(*p->fds));
	struct writer w = { .buf = buf, .at = str_off };
	struct spawn_op *ops = (struct spawn_op *)(void *)(buf + ops_off);
	for (size_t i = 0; i < p->n; i++) {
		ops[i] = p->ops[i];
		ops[i].what = NULL;
		ops[i].src = put_str(&w, p->ops[i].src);
		ops[i].dst = put_str(&w, p->ops[i].dst);
		ops[i].fstype = put_str(&w, p->ops[i].fstype);
		ops[i].data = put_str(&w, p->ops[i].data);
	}
	if (n_insns)
		memcpy(buf + filter_off, p->seccomp->filter, n_insns * sizeof(struct sock_filter));
	if (p->argv)
		put_vec(&w, argv_off, p->argv, argc);
	if (p->envp)
		put_vec(&w, envp_off, p->envp, envc);
	*len = total;
	return buf;
}

/* Reaps a lost spawner if it is gone; true when there is none left to reap. Locked. */
static bool reap_lost(void)
{
	if (spawner_mod.pid <= 0)
		return true;
	pid_t r;
	do
		r = waitpid(spawner_mod.pid, NULL, WNOHANG);
	while (r < 0 && errno == EINTR);
	if (r == 0)
		return false;
	spawner_mod.pid = 0;
	return true;
}

/* The spawner is gone or hung: until it is replaced, the daemon clones by itself. It is not
 * waited for here: one stuck in the kernel would hold every spawn behind the lock. Locked. */
static void lost(const char *why)
{
	log_warn("spawn",
		 "the spawner (pid %d) %s; children are cloned by the daemon until it is replaced",
		 (int)spawner_mod.pid, why);
	close(TAKE_FD(spawner_mod.sock));
	kill(spawner_mod.pid, SIGKILL);
	spawner_mod.lost_at = time_mono_ms();
	reap_lost();
}

/* A lost spawner's replacement, once it is reaped and SPAWNER_RESTART_MS have passed since.
 * Locked. */
static void maybe_restart(void)
{
	if (spawner_mod.sock >= 0 || !spawner_mod.lost_at ||
	    time_mono_ms() - spawner_mod.lost_at < SPAWNER_RESTART_MS || !reap_lost())
		return;
	struct err e = { 0 };
	if (start_locked(&e) < 0) {
		log_warn("spawn", "%s", e.msg);
		spawner_mod.lost_at = time_mono_ms();
		return;
	}
	log_info("spawn", "a new spawner (pid %d) replaces the one lost", (int)spawner_mod.pid);
}

/* One message with nfd descriptors attached (SCM_RIGHTS); 0 or a negative errno. Used on
 * both sides, like spawn_recv_fds: it neither allocates nor locks. */
static int send_fds(int sock, const void *msg, size_t len, const int *fds, size_t nfd)
{
	struct iovec iov = { .iov_base = (void *)(uintptr_t)msg, .iov_len = len };
	union {
		char buf[CMSG_SPACE(SPAWN_MSG_MAX_FDS * sizeof(int))];
		struct cmsghdr align;
	} u;
	memset(&u, 0, sizeof(u));
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	if (nfd) {
		mh.msg_control = u.buf;
		mh.msg_controllen = CMSG_SPACE(nfd * sizeof(int));
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(nfd * sizeof(int));
		memcpy(CMSG_DATA(cm), fds, nfd * sizeof(int));
	}
	ssize_t n;
	do
		n = sendmsg(sock, &mh, MSG_NOSIGNAL);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	return n == (ssize_t)len ? 0 : -EPROTO;
}

/* The reply and the pidfd that may come with it; 0, or a negative errno when there is none. */
static int recv_reply(struct reply *rep, int *pidfd)
{
	*pidfd = -1;
	struct pollfd pfd = { .fd = spawner_mod.sock, .events = POLLIN };
	uint64_t deadline = time_deadline(SPAWNER_TIMEOUT_MS);
	int r;
	do
		r = poll(&pfd, 1, time_left_ms(deadline));
	while (r < 0 && errno == EINTR);
	if (r < 0)
		return -errno;
	if (r == 0)
		return -ETIMEDOUT;
	size_t nfd;
	int mflags;
	ssize_t n = spawn_recv_fds(spawner_mod.sock, rep, sizeof(*rep), pidfd, 1, &nfd, &mflags);
	if (n < 0)
		return (int)n;
	if (!nfd)
		*pidfd = -1;
	if (n != (ssize_t)sizeof(*rep)) {
		if (*pidfd >= 0)
			close(TAKE_FD(*pidfd));
		return n == 0 ? -ECONNRESET : -EPROTO;
	}
	return 0;
}

bool spawner_clone(struct spawn_plan *plan, uint64_t flags, int cgroup_fd, long *pid, int *pidfd,
		   bool *placed)
{
	pthread_mutex_lock(&spawner_mod.lock);
	maybe_restart();
	size_t len = 0;
	_cleanup_free_ unsigned char *msg =
		spawner_mod.sock >= 0 ? encode(plan, flags, cgroup_fd >= 0, &len) : NULL;
	_cleanup_close_pair_ int gate[2] = { -1, -1 };
	if (msg && pipe2(gate, O_CLOEXEC) < 0)
		msg = (free(msg), NULL);
	if (!msg) {
		pthread_mutex_unlock(&spawner_mod.lock);
		atomic_fetch_add(&spawner_mod.direct, 1);
		return false;
	}
	int fds[SPAWN_MSG_MAX_FDS];
	size_t nfd = 0;
	for (size_t i = 0; i < plan->n_fds; i++)
		fds[nfd++] = plan->fds[i].from;
	fds[nfd++] = plan->report_fd;
	fds[nfd++] = gate[0];
	if (cgroup_fd >= 0)
		fds[nfd++] = cgroup_fd;

	int r = send_fds(spawner_mod.sock, msg, len, fds, nfd);
	if (r == -EPIPE || r == -ECONNRESET)
		lost("is gone");
	struct reply rep;
	if (r == 0) {
		r = recv_reply(&rep, pidfd);
		if (r < 0)
			lost(r == -ETIMEDOUT ? "did not answer" : "died during a request");
	}
	if (r < 0) {
		/* Not cloned, or cloned and held at the gate, which closes below: the child ends
		 * before its first step. Either way the daemon clones it itself. */
		pthread_mutex_unlock(&spawner_mod.lock);
		atomic_fetch_add(&spawner_mod.direct, 1);
		return false;
	}
	if (rep.pid > 0) {
		/* The child knows no one but the daemon from here on. */
		static const char go = 1;
		ssize_t w;
		do
			w = write(gate[1], &go, 1);
		while (w < 0 && errno == EINTR);
	}
	*pid = rep.pid;
	*placed = rep.placed != 0;
	atomic_fetch_add(&spawner_mod.via, 1);
	pthread_mutex_unlock(&spawner_mod.lock);
	return true;
}

pid_t spawner_pid(void)
{
	pthread_mutex_lock(&spawner_mod.lock);
	pid_t pid = spawner_mod.sock >= 0 ? spawner_mod.pid : 0;
	pthread_mutex_unlock(&spawner_mod.lock);
	return pid;
}

void spawner_counts(uint64_t *via_spawner, uint64_t *direct)
{
	*via_spawner = atomic_load(&spawner_mod.via);
	*direct = atomic_load(&spawner_mod.direct);
}

/*
 * --- the spawner's side -------------------------------------------------------------------
 *
 * Nothing here allocates: the spawner's memory stays what the daemon's was at the fork, which
 * is what each clone copies. The message lands in a static buffer and the plan is rebuilt in
 * place, its offsets turned back into pointers.
 */

static unsigned char inbox[SPAWNER_MAX_MSG] __attribute__((aligned(16)));
static char daemon_name[16];

/* Turns an offset back into a pointer to a NUL-terminated string inside the message. */
static int fix_str(const char **s, size_t size)
{
	uintptr_t off = (uintptr_t)*s;
	if (!off)
		return 0;
	if (off >= size || !memchr(inbox + off, '\0', size - off))
		return -EPROTO;
	*s = (const char *)(inbox + off);
	return 0;
}

static int fix_vec(char *const **vec, uint32_t off, uint32_t n, size_t size)
{
	if (n == UINT32_MAX) {
		*vec = NULL;
		return 0;
	}
	if (off % sizeof(uintptr_t) || off > size || (size - off) / sizeof(uintptr_t) <= n)
		return -EPROTO;
	const char **slots = (const char **)(void *)(inbox + off);
	for (uint32_t i = 0; i < n; i++)
		if (!slots[i] || fix_str(&slots[i], size) < 0)
			return -EPROTO;
	if (slots[n])
		return -EPROTO;
	*vec = (char *const *)slots;
	return 0;
}

/* The plan of a request of `size` bytes, with its descriptors as received. */
static int decode(size_t size, const int *fds, size_t nfd, struct spawn_plan *p,
		  struct sock_fprog *prog, uint64_t *flags, int *cgroup_fd)
{
	const struct request *rq = (const struct request *)(void *)inbox;
	if (size < sizeof(*rq) || rq->magic != SPAWNER_MAGIC || rq->size != size ||
	    rq->n_fds >= SPAWN_MAX_FDS || nfd != rq->n_fds + 2 + (rq->has_cgroup ? 1 : 0))
		return -EPROTO;
	if (rq->ops_off % 8 || rq->ops_off > size ||
	    (size - rq->ops_off) / sizeof(struct spawn_op) < rq->n_ops)
		return -EPROTO;
	if (rq->filter_off % 8 || rq->filter_off > size ||
	    (size - rq->filter_off) / sizeof(struct sock_filter) < rq->seccomp_len ||
	    rq->seccomp_len > UINT16_MAX)
		return -EPROTO;

	memset(p, 0, sizeof(*p));
	p->name = daemon_name; /* what the child calls itself once past the gate */
	p->ops = (struct spawn_op *)(void *)(inbox + rq->ops_off);
	p->n = p->cap = rq->n_ops;
	for (size_t i = 0; i < p->n; i++) {
		struct spawn_op *op = &p->ops[i];
		if (fix_str(&op->src, size) < 0 || fix_str(&op->dst, size) < 0 ||
		    fix_str(&op->fstype, size) < 0 || fix_str(&op->data, size) < 0)
			return -EPROTO;
		op->what = NULL;
	}
	if (fix_vec(&p->argv, rq->argv_off, rq->argc, size) < 0 ||
	    fix_vec(&p->envp, rq->envp_off, rq->envc, size) < 0)
		return -EPROTO;
	if (rq->has_seccomp) {
		prog->len = (unsigned short)rq->seccomp_len;
		prog->filter = (struct sock_filter *)(void *)(inbox + rq->filter_off);
		p->seccomp = prog;
	}
	p->n_fds = rq->n_fds;
	for (size_t i = 0; i < p->n_fds; i++) {
		p->fds[i] = rq->fds[i];
		p->fds[i].from = fds[i];
		if (p->fds[i].to < 0)
			return -EPROTO;
	}
	p->report_fd = fds[p->n_fds];
	p->gate_fd = fds[p->n_fds + 1];
	p->report_to = rq->report_to;
	*cgroup_fd = rq->has_cgroup ? fds[p->n_fds + 2] : -1;
	p->parent = rq->parent;
	*flags = rq->flags;
	p->caps_keep = rq->caps_keep;
	p->cap_last = rq->cap_last;
	return 0;
}

static void reply(int sock, long pid, bool placed, int pidfd)
{
	struct reply rep = { .pid = (int32_t)pid, .placed = placed };
	/* A daemon gone meanwhile: the next receive ends the spawner. */
	send_fds(sock, &rep, sizeof(rep), &pidfd, pidfd >= 0 ? 1 : 0);
}

/* Serves requests until the daemon closes its end. */
__attribute__((noreturn)) static void serve(int sock)
{
	for (;;) {
		int fds[SPAWN_MSG_MAX_FDS];
		size_t nfd;
		int mflags;
		ssize_t n = spawn_recv_fds(sock, inbox, sizeof(inbox), fds, SPAWN_MSG_MAX_FDS, &nfd,
					   &mflags);
		if (n <= 0)
			_exit(0);

		struct spawn_plan plan;
		struct sock_fprog prog;
		uint64_t flags = 0;
		int cgroup_fd = -1, pidfd = -1;
		bool placed = false;
		long pid = -EPROTO;
		/* CLONE_PARENT: the child is the daemon's. */
		if (!(mflags & (MSG_TRUNC | MSG_CTRUNC)) &&
		    decode((size_t)n, fds, nfd, &plan, &prog, &flags, &cgroup_fd) == 0)
			pid = spawn_clone(&plan, flags | CLONE_PARENT, cgroup_fd, &pidfd, &placed);
		for (size_t i = 0; i < nfd; i++)
			close(fds[i]);
		reply(sock, pid, placed, pidfd);
		if (pidfd >= 0)
			close(pidfd);
		/* Nothing of one plan stays in the next child's memory. */
		memset(inbox, 0, (size_t)n);
	}
}

/* The spawner's start: it keeps the standard descriptors (its children inherit them, as the
 * daemon's own would) and its end of the socket, dies with the daemon, and blocks every
 * signal (each child resets its own, SOP_SIGNALS). */
__attribute__((noreturn)) static void spawner_main(int sock, pid_t daemon)
{
	sigset_t all;
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != daemon)
		_exit(0);
	if (prctl(PR_GET_NAME, daemon_name, 0, 0, 0) < 0)
		memcpy(daemon_name, "sandboxd", sizeof("sandboxd"));
	prctl(PR_SET_NAME, "sandboxd-spawn", 0, 0, 0);
	if (sock != 3 && (dup3(sock, 3, O_CLOEXEC) < 0 || close(sock) < 0))
		_exit(1);
	if (syscall(SYS_close_range, 4U, ~0U, 0) < 0) {
		/* Kernels before 5.9. */
		struct rlimit rl;
		if (errno != ENOSYS || getrlimit(RLIMIT_NOFILE, &rl) < 0)
			_exit(1);
		/* The daemon has a few dozen open this early. */
		for (rlim_t fd = 4; fd < rl.rlim_cur && fd < 65536; fd++)
			close((int)fd);
	}
	serve(3);
}

/* Forks a spawner. Locked. */
static int start_locked(struct err *err)
{
	int sv[2];
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
		return err_sys(err, errno, "spawner: socketpair");
	/* Room for the largest message whatever net.core.wmem_default says. */
	int size = 2 * SPAWNER_MAX_MSG;
	if (setsockopt(sv[0], SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof(size)) < 0)
		setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
	pid_t daemon = getpid();
	pid_t pid = fork();
	if (pid == 0) {
		close(sv[0]);
		spawner_main(sv[1], daemon);
	}
	int e = errno;
	close(sv[1]);
	if (pid < 0) {
		close(sv[0]);
		return err_sys(err, e, "spawner: fork");
	}
	spawner_mod.sock = sv[0];
	spawner_mod.pid = pid;
	return 0;
}

int spawner_start(struct err *err)
{
	pthread_mutex_lock(&spawner_mod.lock);
	int r = spawner_mod.sock >= 0 ? 0 : start_locked(err);
	pthread_mutex_unlock(&spawner_mod.lock);
	return r;
}

void spawner_stop(void)
{
	pthread_mutex_lock(&spawner_mod.lock);
	if (spawner_mod.sock >= 0) {
		close(TAKE_FD(spawner_mod.sock));
		kill(spawner_mod.pid, SIGKILL);
	}
	if (spawner_mod.pid > 0)
		while (waitpid(spawner_mod.pid, NULL, 0) < 0 && errno == EINTR)
			;
	spawner_mod.pid = 0;
	spawner_mod.lost_at = 0;
	pthread_mutex_unlock(&spawner_mod.lock);
}
