/* Tests of src/guest/call.c: one blocking request against the fake agent
 * (tests/security/fake_agent.c), good and bad. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "guest/call.h"
#include "guest/proto.h"

static const char *fake_agent;

struct agent {
	int fd;
	pid_t pid;
};

static struct agent start(const char *script)
{
	int sv[2];
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		dup2(sv[1], 3);
		execl(fake_agent, "fake-agent", "--fd", "3", "--script", script, (char *)NULL);
		_exit(127);
	}
	close(sv[1]);
	return (struct agent){ .fd = sv[0], .pid = pid };
}

static void stop(struct agent *a)
{
	close(a->fd);
	kill(a->pid, SIGKILL);
	waitpid(a->pid, NULL, 0);
}

static int call(struct agent *a, const char *request, int timeout_ms, char **result, struct err *e)
{
	struct guest_call c = {
		.fd = a->fd, .channel = 1, .request = request, .timeout_ms = timeout_ms
	};
	return guest_call(&c, result, e);
}

static void test_ping(void **state)
{
	struct agent a = start("");
	struct err e;
	char *result = NULL;
	assert_int_equal(call(&a, "{\"op\":\"ping\"}", 5000, &result, &e), 0);
	assert_non_null(strstr(result, "\"pong\":true"));
	free(result);
	stop(&a);
}

static void test_output_before_the_reply_is_skipped(void **state)
{
	struct agent a = start("");
	struct err e;
	assert_int_equal(call(&a, "{\"op\":\"exec\",\"argv\":[\"true\"]}", 5000, NULL, &e), 0);
	stop(&a);
}

static void test_faults(void **state)
{
	static const struct {
		const char *script;
		int errnum;
	} cases[] = {
		{ "ping reply error", EREMOTEIO },        { "ping reply silent", ETIMEDOUT },
		{ "ping reply eof", ECONNRESET },         { "ping reply oversize", EREMOTEIO },
		{ "ping reply wrongchannel", ETIMEDOUT },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct agent a = start(cases[i].script);
		struct err e;
		int r = call(&a, "{\"op\":\"ping\"}", 500, NULL, &e);
		if (r != -cases[i].errnum)
			fail_msg("%s: %d (%s)", cases[i].script, r, e.msg);
		stop(&a);
	}
}

static bool dead(void *arg)
{
	return false;
}

static void test_a_dead_vm_ends_the_wait(void **state)
{
	struct agent a = start("ping reply silent");
	struct guest_call c = { .fd = a.fd,
				.channel = 1,
				.request = "{\"op\":\"ping\"}",
				.timeout_ms = 60000,
				.alive = dead };
	struct err e;
	assert_int_equal(guest_call(&c, NULL, &e), -ECHILD);
	stop(&a);
}

static void test_a_request_larger_than_the_socket_buffer(void **state)
{
	/* Written in many parts on a non-blocking socket: each partial write must go on
	 * where the last one stopped. */
	struct agent a = start("");
	int fl = fcntl(a.fd, F_GETFL);
	fcntl(a.fd, F_SETFL, fl | O_NONBLOCK);
	size_t n = 600 << 10;
	char *req = malloc(n + 64);
	int k = snprintf(req, n + 64, "{\"op\":\"ping\",\"pad\":\"");
	memset(req + k, 'x', n);
	strcpy(req + k + n, "\"}");
	struct err e;
	assert_int_equal(call(&a, req, 10000, NULL, &e), 0);
	free(req);
	stop(&a);
}

int main(int argc, char **argv)
{
	if (argc != 2)
		return 2;
	fake_agent = argv[1];
	signal(SIGPIPE, SIG_IGN);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_ping),
		cmocka_unit_test(test_output_before_the_reply_is_skipped),
		cmocka_unit_test(test_faults),
		cmocka_unit_test(test_a_dead_vm_ends_the_wait),
		cmocka_unit_test(test_a_request_larger_than_the_socket_buffer),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
