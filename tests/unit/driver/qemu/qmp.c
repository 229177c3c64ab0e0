/* Tests of src/driver/qmp.c against a scripted QMP peer on a socketpair: greeting and
 * negotiation, events and stale replies skipped, errors, timeouts, hang-ups, garbage. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "driver/qemu/qmp.h"

#define GREETING                                                                            \
	"{\"QMP\": {\"version\": {\"qemu\": {\"micro\": 22, \"minor\": 2, \"major\": 7}}, " \
	"\"capabilities\": [\"oob\"]}}\r\n"

/* The peer: runs `script` on its end of the socketpair. */
struct peer {
	int fd;
	void (*script)(struct peer *p);
	pthread_t thread;
	char line[4096];
};

static void say(struct peer *p, const char *text)
{
	size_t n = strlen(text);
	assert_int_equal(send(p->fd, text, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* Reads one command line and returns its id; checks its name. */
static long long hear(struct peer *p, const char *command)
{
	size_t n = 0;
	while (n < sizeof(p->line) - 1) {
		ssize_t k = read(p->fd, p->line + n, 1);
		if (k <= 0)
			break;
		if (p->line[n++] == '\n')
			break;
	}
	p->line[n] = '\0';
	json_t *msg = json_loads(p->line, 0, NULL);
	assert_non_null(msg);
	assert_string_equal(json_string_value(json_object_get(msg, "execute")), command);
	long long id = json_integer_value(json_object_get(msg, "id"));
	json_decref(msg);
	return id;
}

static void reply(struct peer *p, long long id, const char *ret)
{
	char buf[1024];
	snprintf(buf, sizeof(buf), "{\"return\": %s, \"id\": %lld}\r\n", ret, id);
	say(p, buf);
}

static void *peer_main(void *arg)
{
	struct peer *p = arg;
	p->script(p);
	return NULL;
}

static void negotiate(struct peer *p)
{
	say(p, GREETING);
	reply(p, hear(p, "qmp_capabilities"), "{}");
}

static struct qmp *open_with(struct peer *p, void (*script)(struct peer *))
{
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	p->fd = sv[1];
	p->script = script;
	assert_int_equal(pthread_create(&p->thread, NULL, peer_main, p), 0);
	struct qmp *q = NULL;
	struct err e = { 0 };
	int r = qmp_open(sv[0], 2000, &q, &e);
	if (r < 0)
		fail_msg("qmp_open: %s", e.msg);
	return q;
}

static void finish(struct peer *p, struct qmp *q)
{
	qmp_close(q);
	pthread_join(p->thread, NULL);
	close(p->fd);
}

static void script_events_and_stale_replies(struct peer *p)
{
	negotiate(p);
	long long id = hear(p, "query-status");
	say(p, "{\"timestamp\": {\"seconds\": 1, \"microseconds\": 2}, \"event\": \"RESUME\"}\r\n");
	reply(p, id - 1, "{\"status\": \"stale\"}");
	say(p, "\r\n");
	/* The real reply, split in two writes. */
	char buf[256];
	snprintf(buf, sizeof(buf),
		 "{\"return\": {\"status\": \"running\", \"running\": true}, "
		 "\"id\": %lld}\r\n",
		 id);
	size_t half = strlen(buf) / 2;
	assert_int_equal(send(p->fd, buf, half, MSG_NOSIGNAL), (ssize_t)half);
	/* Pacing: the pause lets the client read the first half on its own, which is the case
	 * under test (a missed pause only makes the test weaker, never wrong). */
	struct timespec ts = { 0, 20 * 1000000L };
	nanosleep(&ts, NULL);
	say(p, buf + half);
	hear(p, "cont");
	/* No id: not ours. Then ours. */
	say(p, "{\"return\": {}}\r\n");
	reply(p, id + 1, "{}");
}

static void test_events_and_stale_replies_are_skipped(void **state)
{
	struct peer p;
	struct qmp *q = open_with(&p, script_events_and_stale_replies);
	struct err e = { 0 };
	json_t *ret = NULL;
	assert_int_equal(qmp_execute(q, "query-status", NULL, 2000, &ret, &e), 0);
	assert_string_equal(json_string_value(json_object_get(ret, "status")), "running");
	json_decref(ret);
	assert_int_equal(qmp_execute(q, "cont", NULL, 2000, NULL, &e), 0);
	finish(&p, q);
}

static void script_errors(struct peer *p)
{
	negotiate(p);
	long long id = hear(p, "migrate");
	char buf[256];
	snprintf(buf, sizeof(buf),
		 "{\"id\": %lld, \"error\": {\"class\": \"GenericError\", \"desc\": \"boom\"}}\r\n",
		 id);
	say(p, buf);
	id = hear(p, "nonexistent");
	snprintf(buf, sizeof(buf),
		 "{\"id\": %lld, \"error\": {\"class\": \"CommandNotFound\", \"desc\": \"The "
		 "command nonexistent has not been found\"}}\r\n",
		 id);
	say(p, buf);
}

static void test_error_replies(void **state)
{
	struct peer p;
	struct qmp *q = open_with(&p, script_errors);
	struct err e = { 0 };
	json_t *args = json_pack("{s:s}", "uri", "exec:cat > x");
	json_t *ret = NULL;
	assert_int_equal(qmp_execute(q, "migrate", args, 2000, &ret, &e), -EIO);
	assert_null(ret);
	assert_string_equal(e.msg, "qmp `migrate`: boom");
	json_decref(args);
	assert_int_equal(qmp_execute(q, "nonexistent", NULL, 2000, NULL, &e), -ENOENT);
	assert_non_null(strstr(e.msg, "has not been found"));
	finish(&p, q);
}

static void script_silent(struct peer *p)
{
	negotiate(p);
	hear(p, "query-migrate");
	/* never answers; waits for the client to hang up */
	char c;
	while (read(p->fd, &c, 1) > 0)
		;
}

static void test_timeout(void **state)
{
	struct peer p;
	struct qmp *q = open_with(&p, script_silent);
	struct err e = { 0 };
	struct timespec a, b;
	clock_gettime(CLOCK_MONOTONIC, &a);
	assert_int_equal(qmp_execute(q, "query-migrate", NULL, 150, NULL, &e), -ETIMEDOUT);
	clock_gettime(CLOCK_MONOTONIC, &b);
	long ms = (b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000;
	assert_true(ms >= 140 && ms < 1500);
	assert_non_null(strstr(e.msg, "did not answer `query-migrate`"));
	finish(&p, q);
}

static void script_hangup(struct peer *p)
{
	negotiate(p);
	hear(p, "stop");
	shutdown(p->fd, SHUT_RDWR);
}

static void test_hangup(void **state)
{
	struct peer p;
	struct qmp *q = open_with(&p, script_hangup);
	struct err e = { 0 };
	assert_int_equal(qmp_execute(q, "stop", NULL, 2000, NULL, &e), -ECONNRESET);
	assert_non_null(strstr(e.msg, "closed"));
	finish(&p, q);
}

static void script_garbage(struct peer *p)
{
	negotiate(p);
	hear(p, "stop");
	say(p, "this is not json\r\n");
}

static void test_garbage(void **state)
{
	struct peer p;
	struct qmp *q = open_with(&p, script_garbage);
	struct err e = { 0 };
	assert_int_equal(qmp_execute(q, "stop", NULL, 2000, NULL, &e), -EPROTO);
	finish(&p, q);
}

static void script_oversize(struct peer *p)
{
	negotiate(p);
	hear(p, "stop");
	char *big = malloc(QMP_MAX_MESSAGE + 10);
	memset(big, ' ', QMP_MAX_MESSAGE + 9);
	big[QMP_MAX_MESSAGE + 9] = '\0';
	/* The client stops reading at the cap; its close ends this write. */
	size_t n = strlen(big), off = 0;
	while (off < n) {
		ssize_t k = send(p->fd, big + off, n - off, MSG_NOSIGNAL);
		if (k <= 0)
			break;
		off += (size_t)k;
	}
	free(big);
}

static void test_oversize_message(void **state)
{
	struct peer p;
	struct qmp *q = open_with(&p, script_oversize);
	struct err e = { 0 };
	assert_int_equal(qmp_execute(q, "stop", NULL, 5000, NULL, &e), -EPROTO);
	assert_non_null(strstr(e.msg, "exceeds"));
	shutdown(p.fd, SHUT_RDWR);
	finish(&p, q);
}

static void script_no_greeting(struct peer *p)
{
	say(p, "{\"event\": \"STOP\"}\r\n");
}

static void test_no_greeting(void **state)
{
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	struct peer p = { .fd = sv[1], .script = script_no_greeting };
	assert_int_equal(pthread_create(&p.thread, NULL, peer_main, &p), 0);
	struct qmp *q = NULL;
	struct err e = { 0 };
	assert_int_equal(qmp_open(sv[0], 1000, &q, &e), -EPROTO);
	assert_null(q);
	pthread_join(p.thread, NULL);
	close(p.fd);
}

/* The getfd command's bytes carry a descriptor: the peer receives a copy of the same file. */
static void script_getfd(struct peer *p)
{
	negotiate(p);
	char buf[512];
	union {
		char b[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} ctl;
	struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) - 1 };
	struct msghdr mh = { .msg_iov = &iov,
			     .msg_iovlen = 1,
			     .msg_control = ctl.b,
			     .msg_controllen = sizeof(ctl.b) };
	ssize_t n = recvmsg(p->fd, &mh, 0);
	assert_true(n > 0);
	buf[n] = '\0';
	struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
	assert_non_null(c);
	assert_int_equal(c->cmsg_type, SCM_RIGHTS);
	int fd;
	memcpy(&fd, CMSG_DATA(c), sizeof(fd));
	char got[16] = "";
	assert_int_equal(pread(fd, got, 5, 0), 5);
	assert_memory_equal(got, "state", 5);
	close(fd);
	json_t *msg = json_loads(buf, JSON_DISABLE_EOF_CHECK, NULL);
	assert_non_null(msg);
	assert_string_equal(json_string_value(json_object_get(msg, "execute")), "getfd");
	assert_string_equal(
		json_string_value(json_object_get(json_object_get(msg, "arguments"), "fdname")),
		"state");
	reply(p, json_integer_value(json_object_get(msg, "id")), "{}");
	json_decref(msg);
}

static void test_pass_fd(void **state)
{
	char path[] = "/tmp/test-qmp-XXXXXX";
	int fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	assert_int_equal(write(fd, "state", 5), 5);
	struct peer p;
	struct qmp *q = open_with(&p, script_getfd);
	struct err e = { 0 };
	assert_int_equal(qmp_pass_fd(q, fd, "state", 2000, &e), 0);
	finish(&p, q);
	close(fd);
}

static void test_classify(void **state)
{
	struct {
		const char *text;
		enum qmp_kind kind;
	} cases[] = {
		{ GREETING, QMP_GREETING },
		{ "{\"return\": {}, \"id\": 1}", QMP_RETURN },
		{ "{\"return\": []}", QMP_RETURN },
		{ "{\"error\": {\"class\": \"GenericError\", \"desc\": \"x\"}}", QMP_ERROR },
		{ "{\"error\": \"flat\"}", QMP_INVALID },
		{ "{\"event\": \"STOP\", \"timestamp\": {}}", QMP_EVENT },
		{ "{\"event\": 5}", QMP_INVALID },
		{ "{\"QMP\": 1}", QMP_INVALID },
		{ "[1, 2]", QMP_INVALID },
		{ "{}", QMP_INVALID },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *m = json_loads(cases[i].text, 0, NULL);
		assert_non_null(m);
		if (qmp_classify(m) != cases[i].kind)
			fail_msg("%s: kind %d, expected %d", cases[i].text, qmp_classify(m),
				 cases[i].kind);
		json_decref(m);
	}
	assert_int_equal(qmp_classify(NULL), QMP_INVALID);
}

static void test_reply_error_without_desc(void **state)
{
	json_t *m = json_loads("{\"error\": {\"class\": \"DeviceNotFound\"}}", 0, NULL);
	struct err e = { 0 };
	assert_int_equal(qmp_reply_error(m, "device_del", &e), -ENOENT);
	assert_string_equal(e.msg, "qmp `device_del`: DeviceNotFound");
	json_decref(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_events_and_stale_replies_are_skipped),
		cmocka_unit_test(test_error_replies),
		cmocka_unit_test(test_timeout),
		cmocka_unit_test(test_hangup),
		cmocka_unit_test(test_garbage),
		cmocka_unit_test(test_oversize_message),
		cmocka_unit_test(test_no_greeting),
		cmocka_unit_test(test_pass_fd),
		cmocka_unit_test(test_classify),
		cmocka_unit_test(test_reply_error_without_desc),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
