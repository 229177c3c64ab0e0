/* Tests of sandbox-agent through its protocol: the real binary (sandbox-agent-host) on a
 * socketpair with a fresh workspace per test. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "../wait.h"

static int setup(void **state)
{
	struct client *c = malloc(sizeof(*c));
	client_start(c);
	*state = c;
	return 0;
}

static int teardown(void **state)
{
	struct client *c = *state;
	int st = client_stop(c);
	free(c);
	/* EOF on the connection: the agent leaves with status 0. */
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	return 0;
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void put_file(struct client *c, const char *rel, const char *content)
{
	FILE *f = fopen(ws_file(c, rel), "w");
	assert_non_null(f);
	fputs(content, f);
	fclose(f);
}

/* Sends a request and expects an ERROR with `code`; then checks the agent still serves. */
static void expect_error(struct client *c, uint32_t ch, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void expect_error(struct client *c, uint32_t ch, const char *code, const char *fmt, ...)
{
	char *s;
	va_list ap;
	va_start(ap, fmt);
	assert_true(vasprintf(&s, fmt, ap) >= 0);
	va_end(ap);
	client_send(c, GUEST_REQUEST, ch, s, strlen(s));
	struct reply r;
	assert_int_equal(client_wait(c, ch, &r, 10000), 0);
	if (r.type != GUEST_ERROR || strcmp(reply_str(&r, "code"), code) != 0) {
		char *j = json_dumps(r.json, 0);
		fprintf(stderr, "request %s: want %s, got %s\n", s, code, j);
		free(j);
		fail();
	}
	assert_non_null(reply_str(&r, "error"));
	reply_free(&r);
	free(s);
	assert_true(client_ping(c, ch + 100000));
}

static void run(struct client *c, uint32_t ch, struct reply *r, const char *json)
{
	client_send(c, GUEST_REQUEST, ch, json, strlen(json));
	assert_int_equal(client_wait(c, ch, r, 20000), 0);
}

static void test_ping(void **state)
{
	struct client *c = *state;
	struct reply r;
	run(c, 1, &r, "{\"op\":\"ping\"}");
	assert_int_equal(r.type, GUEST_RESULT);
	assert_int_equal(reply_int(&r, "protocol"), GUEST_PROTO_VERSION);
	assert_string_equal(reply_str(&r, "agent"), "sandbox-agent");
	reply_free(&r);
}

static void test_exec_output_and_exit(void **state)
{
	struct client *c = *state;
	struct reply r;
	run(c, 1, &r,
	    "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"echo out; echo err >&2; exit 7\"]}");
	assert_int_equal(r.type, GUEST_RESULT);
	assert_string_equal(r.out, "out\n");
	assert_string_equal(r.err, "err\n");
	assert_int_equal(reply_int(&r, "exitCode"), 7);
	assert_true(json_is_null(json_object_get(r.json, "signal")));
	assert_true(json_is_false(json_object_get(r.json, "timedOut")));
	assert_true(json_is_false(json_object_get(r.json, "cancelled")));
	assert_true(json_is_number(json_object_get(r.json, "durationMs")));
	assert_true(reply_int(&r, "pid") > 0);
	reply_free(&r);

	run(c, 2, &r, "{\"op\":\"exec\",\"argv\":[\"true\"]}");
	assert_int_equal(reply_int(&r, "exitCode"), 0);
	assert_int_equal(r.out_len, 0);
	reply_free(&r);
}

static void test_exec_signal(void **state)
{
	struct client *c = *state;
	struct reply r;
	run(c, 1, &r, "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"kill -KILL $$\"]}");
	assert_true(json_is_null(json_object_get(r.json, "exitCode")));
	assert_string_equal(reply_str(&r, "signal"), "SIGKILL");
	reply_free(&r);
	run(c, 2, &r, "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"kill -SEGV $$\"]}");
	assert_string_equal(reply_str(&r, "signal"), "SIGSEGV");
	reply_free(&r);
}

static void test_exec_env(void **state)
{
	struct client *c = *state;
	struct reply r;
	run(c, 1, &r,
	    "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"echo "
	    "$FOO:$HOME:$LANG:$PATH:${TERM-unset}\"],"
	    "\"env\":{\"FOO\":\"b a r\",\"HOME\":\"/h\"}}");
	assert_string_equal(r.out, "b a r:/h:C.UTF-8:/usr/local/sbin:/usr/local/bin:/usr/sbin:"
				   "/usr/bin:/sbin:/bin:unset\n");
	reply_free(&r);

	/* The default HOME is the workspace. */
	run(c, 2, &r, "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"printf %s \\\"$HOME\\\"\"]}");
	char real[512];
	assert_non_null(realpath(c->ws, real));
	assert_string_equal(r.out, real);
	reply_free(&r);

	expect_error(c, 3, "EINVAL",
		     "{\"op\":\"exec\",\"argv\":[\"true\"],\"env\":{\"A=B\":\"x\"}}");
	expect_error(c, 4, "EINVAL", "{\"op\":\"exec\",\"argv\":[\"true\"],\"env\":{\"A\":1}}");
}

/* The image's ENV (the env file) sits between the defaults and the request's env. */
static void test_exec_image_env(void **state)
{
	char path[] = "/tmp/agent-env-XXXXXX";
	int fd = mkstemp(path);
	const char *content = "FOO=image\nBAR=from image\nPATH=/opt/x/bin:/usr/bin:/bin\n"
			      "not a line\n=novalue\n";
	assert_true(write(fd, content, strlen(content)) == (ssize_t)strlen(content));
	close(fd);
	client_env_file = path;
	struct client c;
	client_start(&c);
	client_env_file = NULL;
	struct reply r;
	run(&c, 1, &r,
	    "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"echo $FOO:$BAR:$PATH:$LANG\"],"
	    "\"env\":{\"FOO\":\"req\"}}");
	assert_string_equal(r.out, "req:from image:/opt/x/bin:/usr/bin:/bin:C.UTF-8\n");
	reply_free(&r);
	assert_int_equal(client_stop(&c), 0);
	unlink(path);
}

static void test_exec_cwd(void **state)
{
	struct client *c = *state;
	struct reply r;
	char want[600], real[512];
	assert_int_equal(mkdir(ws_file(c, "sub"), 0755), 0);
	assert_int_equal(mkdir(ws_file(c, "sub/deeper"), 0755), 0);
	assert_non_null(realpath(c->ws, real));
	run(c, 1, &r, "{\"op\":\"exec\",\"argv\":[\"pwd\"],\"cwd\":\"sub/deeper\"}");
	snprintf(want, sizeof(want), "%s/sub/deeper\n", real);
	assert_string_equal(r.out, want);
	reply_free(&r);
	run(c, 2, &r, "{\"op\":\"exec\",\"argv\":[\"pwd\"]}");
	snprintf(want, sizeof(want), "%s\n", real);
	assert_string_equal(r.out, want);
	reply_free(&r);
	expect_error(c, 3, "ENOENT", "{\"op\":\"exec\",\"argv\":[\"pwd\"],\"cwd\":\"missing\"}");
	expect_error(c, 4, "ESCAPE", "{\"op\":\"exec\",\"argv\":[\"pwd\"],\"cwd\":\"..\"}");
	expect_error(c, 5, "ESCAPE", "{\"op\":\"exec\",\"argv\":[\"pwd\"],\"cwd\":\"/tmp\"}");
}

static void test_exec_stdin(void **state)
{
	struct client *c = *state;
	struct reply r;
	client_request(c, 1, "{\"op\":\"exec\",\"argv\":[\"cat\"],\"stdin\":true}");
	client_send(c, GUEST_DATA, 1, "hello ", 6);
	client_send(c, GUEST_DATA, 1, "world", 5);
	client_send(c, GUEST_EOF, 1, NULL, 0);
	assert_int_equal(client_wait(c, 1, &r, 10000), 0);
	assert_string_equal(r.out, "hello world");
	assert_int_equal(reply_int(&r, "exitCode"), 0);
	reply_free(&r);

	/* Without "stdin" the command reads /dev/null-like EOF at once. */
	run(c, 2, &r, "{\"op\":\"exec\",\"argv\":[\"cat\"]}");
	assert_int_equal(r.out_len, 0);
	assert_int_equal(reply_int(&r, "exitCode"), 0);
	reply_free(&r);

	/* More than a window of stdin: the agent grants credit as the child consumes it. */
	size_t total = 3u << 20;
	client_request(c, 3, "{\"op\":\"exec\",\"argv\":[\"wc\",\"-c\"],\"stdin\":true}");
	uint64_t credit = GUEST_WINDOW_INITIAL, granted = 0;
	static char chunk[65536];
	memset(chunk, 'x', sizeof(chunk));
	size_t sent = 0;
	while (sent < total) {
		while (credit < sizeof(chunk)) {
			struct frame f;
			assert_int_equal(client_next(c, 3, &f, 10000), 0);
			assert_int_equal(f.ch, 3);
			assert_int_equal(f.type, GUEST_WINDOW);
			uint32_t g = (uint32_t)f.payload[0] << 24 | f.payload[1] << 16 |
				     f.payload[2] << 8 | f.payload[3];
			credit += g;
			granted += g;
			frame_free(&f);
		}
		client_send(c, GUEST_DATA, 3, chunk, sizeof(chunk));
		credit -= sizeof(chunk);
		sent += sizeof(chunk);
	}
	client_send(c, GUEST_EOF, 3, NULL, 0);
	assert_int_equal(client_wait(c, 3, &r, 10000), 0);
	assert_true(granted >= total - GUEST_WINDOW_INITIAL);
	assert_int_equal(atoll(r.out), (long long)total);
	reply_free(&r);
}

static void test_exec_timeout(void **state)
{
	struct client *c = *state;
	struct reply r;
	/* It would run far past its timeout, on purpose; it ends no earlier than that. */
	double t0 = now_s();
	run(c, 1, &r, "{\"op\":\"exec\",\"argv\":[\"sleep\",\"10\"],\"timeoutMs\":300}");
	assert_true(now_s() - t0 >= 0.29);
	assert_true(json_is_true(json_object_get(r.json, "timedOut")));
	assert_string_equal(reply_str(&r, "signal"), "SIGTERM");
	reply_free(&r);
}

static void test_exec_cancel(void **state)
{
	struct client *c = *state;
	struct reply r;
	struct frame f;
	/* Cancelled once it runs (its first output says so); only the cancel can end it in
	 * time. */
	client_request(
		c, 1, "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"echo started; exec sleep 10\"]}");
	assert_int_equal(client_next(c, 1, &f, WAIT_TIMEOUT_MS), 0);
	assert_int_equal(f.type, GUEST_STDOUT);
	frame_free(&f);
	client_send(c, GUEST_CANCEL, 1, NULL, 0);
	assert_int_equal(client_wait(c, 1, &r, 5000), 0);
	assert_true(json_is_true(json_object_get(r.json, "cancelled")));
	assert_true(json_is_false(json_object_get(r.json, "timedOut")));
	assert_string_equal(reply_str(&r, "signal"), "SIGTERM");
	reply_free(&r);
	/* A CANCEL after the end is ignored. */
	client_send(c, GUEST_CANCEL, 1, NULL, 0);
	assert_true(client_ping(c, 2));
}

static void test_exec_term_ignored(void **state)
{
	struct client *c = *state;
	struct reply r;
	double t0 = now_s();
	/* The whole group ignores SIGTERM (sleep inherits the ignored disposition), and would
	 * run far past its timeout: only SIGKILL, after the grace, ends it. */
	run(c, 1, &r,
	    "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"trap '' TERM; sleep 30; echo survived\"],"
	    "\"timeoutMs\":200,\"killGraceMs\":300}");
	assert_true(now_s() - t0 >= 0.49);
	assert_string_equal(reply_str(&r, "signal"), "SIGKILL");
	assert_true(json_is_true(json_object_get(r.json, "timedOut")));
	assert_int_equal(r.out_len, 0);
	reply_free(&r);
}

static void test_exec_cannot_start(void **state)
{
	struct client *c = *state;
	struct reply r;
	run(c, 1, &r, "{\"op\":\"exec\",\"argv\":[\"no-such-command-here\"]}");
	assert_int_equal(r.type, GUEST_ERROR);
	assert_string_equal(reply_str(&r, "code"), "ENOENT");
	assert_string_equal(reply_str(&r, "error"),
			    "cannot execute `no-such-command-here`: No such file or directory");
	reply_free(&r);

	put_file(c, "script.sh", "#!/bin/sh\necho hi\n");
	chmod(ws_file(c, "script.sh"), 0644);
	expect_error(c, 2, "EACCES", "{\"op\":\"exec\",\"argv\":[\"./script.sh\"]}");
	chmod(ws_file(c, "script.sh"), 0755);
	run(c, 3, &r, "{\"op\":\"exec\",\"argv\":[\"./script.sh\"]}");
	assert_string_equal(r.out, "hi\n");
	reply_free(&r);
	expect_error(c, 4, "EINVAL", "{\"op\":\"exec\",\"argv\":[]}");
	expect_error(c, 5, "EINVAL", "{\"op\":\"exec\"}");
	expect_error(c, 6, "EINVAL", "{\"op\":\"exec\",\"argv\":[\"a\\u0000b\"]}");
}

static void test_exec_background_does_not_block(void **state)
{
	struct client *c = *state;
	struct reply r;
	/* The answer comes while the background job, which would run a minute, still runs. */
	run(c, 1, &r, "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"sleep 60 & echo $!\"]}");
	assert_int_equal(reply_int(&r, "exitCode"), 0);
	pid_t job = (pid_t)atoi(r.out);
	assert_true(job > 0);
	assert_int_equal(kill(job, 0), 0);
	kill(job, SIGKILL);
	reply_free(&r);
}

static void test_concurrent(void **state)
{
	struct client *c = *state;
	struct reply r;
	/* It runs until cancelled at the end: what comes meanwhile is served beside it. */
	client_request(c, 1, "{\"op\":\"exec\",\"argv\":[\"sleep\",\"30\"]}");
	put_file(c, "f", "content");
	assert_true(client_ping(c, 2));
	run(c, 3, &r, "{\"op\":\"read\",\"path\":\"f\"}");
	assert_string_equal(r.out, "content");
	reply_free(&r);
	run(c, 4, &r, "{\"op\":\"exec\",\"argv\":[\"echo\",\"quick\"]}");
	assert_string_equal(r.out, "quick\n");
	reply_free(&r);
	client_send(c, GUEST_CANCEL, 1, NULL, 0);
	assert_int_equal(client_wait(c, 1, &r, 5000), 0);
	assert_true(json_is_true(json_object_get(r.json, "cancelled")));
	reply_free(&r);
}

static void test_write_read_binary(void **state)
{
	struct client *c = *state;
	struct reply r;
	unsigned char all[256 * 4];
	for (size_t i = 0; i < sizeof(all); i++)
		all[i] = (unsigned char)i;
	assert_int_equal(client_write_file(c, 1, "bin/all.bin", all, sizeof(all), NULL, &r), 0);
	assert_int_equal(r.type, GUEST_RESULT);
	assert_int_equal(reply_int(&r, "size"), sizeof(all));
	assert_string_equal(reply_str(&r, "path"), "bin/all.bin");
	reply_free(&r);
	run(c, 2, &r, "{\"op\":\"read\",\"path\":\"bin/all.bin\"}");
	assert_int_equal(r.type, GUEST_RESULT);
	assert_int_equal(r.out_len, sizeof(all));
	assert_memory_equal(r.out, all, sizeof(all));
	assert_int_equal(reply_int(&r, "size"), sizeof(all));
	reply_free(&r);
}

static void test_write_read_large(void **state)
{
	struct client *c = *state;
	struct reply r;
	size_t n = (5u << 20) + 12345;
	unsigned char *data = malloc(n);
	uint32_t x = 12345;
	for (size_t i = 0; i < n; i++) {
		x = x * 1103515245 + 12345;
		data[i] = (unsigned char)(x >> 16);
	}
	assert_int_equal(client_write_file(c, 1, "big.bin", data, n, NULL, &r), 0);
	assert_int_equal(r.type, GUEST_RESULT);
	assert_int_equal(reply_int(&r, "size"), (long long)n);
	reply_free(&r);
	run(c, 2, &r, "{\"op\":\"read\",\"path\":\"/big.bin\"}"); /* made relative below */
	reply_free(&r);
	char req[700];
	snprintf(req, sizeof(req), "{\"op\":\"read\",\"path\":\"%s/big.bin\"}", c->ws);
	run(c, 3, &r, req);
	assert_int_equal(r.type, GUEST_RESULT);
	assert_int_equal(r.out_len, n);
	assert_memory_equal(r.out, data, n);
	assert_true(r.nframes >= n / GUEST_DATA_CHUNK);
	reply_free(&r);
	free(data);
}

static void test_write_empty_mode_parents(void **state)
{
	struct client *c = *state;
	struct reply r;
	struct stat st;
	assert_int_equal(client_write_file(c, 1, "empty", "", 0, NULL, &r), 0);
	assert_int_equal(reply_int(&r, "size"), 0);
	reply_free(&r);
	assert_int_equal(stat(ws_file(c, "empty"), &st), 0);
	assert_int_equal(st.st_size, 0);
	assert_int_equal(st.st_mode & 07777, 0644);
	run(c, 2, &r, "{\"op\":\"read\",\"path\":\"empty\"}");
	assert_int_equal(r.type, GUEST_RESULT);
	assert_int_equal(r.nframes, 0);
	assert_int_equal(reply_int(&r, "size"), 0);
	reply_free(&r);

	assert_int_equal(client_write_file(c, 3, "x.sh", "#!/bin/sh\n", 10, "\"mode\":493", &r), 0);
	reply_free(&r);
	assert_int_equal(stat(ws_file(c, "x.sh"), &st), 0);
	assert_int_equal(st.st_mode & 07777, 0755);
	assert_int_equal(client_write_file(c, 4, "secret", "s", 1, "\"mode\":384", &r), 0);
	reply_free(&r);
	assert_int_equal(stat(ws_file(c, "secret"), &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);

	assert_int_equal(client_write_file(c, 5, "p/q/r/s.txt", "deep", 4, NULL, &r), 0);
	assert_int_equal(r.type, GUEST_RESULT);
	reply_free(&r);
	assert_int_equal(stat(ws_file(c, "p/q/r"), &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 0777, 0755);

	/* Overwrite. */
	assert_int_equal(client_write_file(c, 6, "p/q/r/s.txt", "new", 3, NULL, &r), 0);
	reply_free(&r);
	run(c, 7, &r, "{\"op\":\"read\",\"path\":\"./p/q/r/s.txt\"}");
	assert_string_equal(r.out, "new");
	reply_free(&r);

	assert_int_equal(mkdir(ws_file(c, "adir"), 0755), 0);
	expect_error(c, 8, "EISDIR", "{\"op\":\"write\",\"path\":\"adir\"}");
	expect_error(c, 9, "EINVAL", "{\"op\":\"write\",\"path\":\".\"}");
	expect_error(c, 10, "EINVAL", "{\"op\":\"write\",\"path\":\"f\",\"mode\":\"644\"}");
}

static size_t count_entries(struct client *c, const char *rel)
{
	char cmd[700];
	snprintf(cmd, sizeof(cmd), "ls -A '%s/%s' | wc -l", c->ws, rel);
	FILE *p = popen(cmd, "r");
	size_t n = 0;
	assert_int_equal(fscanf(p, "%zu", &n), 1);
	pclose(p);
	return n;
}

static void test_write_no_torn_file(void **state)
{
	struct client *c = *state;
	struct reply r;
	put_file(c, "f", "old");
	client_request(c, 1, "{\"op\":\"write\",\"path\":\"f\"}");
	client_send(c, GUEST_DATA, 1, "new-partial", 11);
	/* Meanwhile the old content is intact. */
	run(c, 2, &r, "{\"op\":\"read\",\"path\":\"f\"}");
	assert_string_equal(r.out, "old");
	reply_free(&r);
	client_send(c, GUEST_CANCEL, 1, NULL, 0);
	assert_int_equal(client_wait(c, 1, &r, 5000), 0);
	assert_int_equal(r.type, GUEST_ERROR);
	assert_string_equal(reply_str(&r, "code"), "ECANCELED");
	reply_free(&r);
	run(c, 3, &r, "{\"op\":\"read\",\"path\":\"f\"}");
	assert_string_equal(r.out, "old");
	reply_free(&r);
	assert_int_equal(count_entries(c, "."), 1); /* no temporary file left */

	/* maxBytes exceeded: error, target untouched, no temporary file. */
	assert_int_equal(client_write_file(c, 4, "f", "0123456789", 10, "\"maxBytes\":5", &r), 0);
	assert_int_equal(r.type, GUEST_ERROR);
	assert_string_equal(reply_str(&r, "code"), "EFBIG");
	reply_free(&r);
	assert_int_equal(count_entries(c, "."), 1);
	run(c, 5, &r, "{\"op\":\"read\",\"path\":\"f\"}");
	assert_string_equal(r.out, "old");
	reply_free(&r);
	assert_true(client_ping(c, 6));

	/* The connection goes away mid-write: the temporary file is removed too. */
	client_request(c, 7, "{\"op\":\"write\",\"path\":\"g\"}");
	client_send(c, GUEST_DATA, 7, "partial", 7);
	assert_true(client_ping(c, 8));
}

/* Writes n bytes of `fill` to rel, with `mid` (if any) at offset at. */
static void put_sized(struct client *c, const char *rel, size_t n, char fill, size_t at,
		      const char *mid)
{
	char *buf = malloc(n);
	assert_non_null(buf);
	memset(buf, fill, n);
	if (mid)
		memcpy(buf + at, mid, strlen(mid));
	FILE *f = fopen(ws_file(c, rel), "w");
	assert_non_null(f);
	assert_int_equal(fwrite(buf, 1, n, f), n);
	fclose(f);
	free(buf);
}

static void expect_info(struct reply *r, long long size, int text)
{
	assert_int_equal(r->type, GUEST_RESULT);
	assert_int_equal(r->ninfo, 1);
	assert_int_equal(json_integer_value(json_object_get(r->info, "size")), size);
	json_t *t = json_object_get(r->info, "text");
	if (text < 0)
		assert_null(t);
	else
		assert_true(json_is_boolean(t) && json_is_true(t) == (text == 1));
	assert_int_equal(r->out_len, (size_t)size);
}

static void test_read_announces_the_file(void **state)
{
	struct client *c = *state;
	struct reply r;
	put_file(c, "t", "caf\xc3\xa9 au lait\n");
	/* Not asked (a host older than protocol 3): no FILEINFO, which it would not know. */
	run(c, 7, &r, "{\"op\":\"read\",\"path\":\"t\",\"checkText\":true}");
	assert_int_equal(r.type, GUEST_RESULT);
	assert_int_equal(r.ninfo, 0);
	assert_int_equal(r.out_len, 14);
	reply_free(&r);
	run(c, 1, &r, "{\"op\":\"read\",\"path\":\"t\",\"info\":true}");
	expect_info(&r, 14, -1);
	reply_free(&r);
	run(c, 2, &r, "{\"op\":\"read\",\"path\":\"t\",\"info\":true,\"checkText\":true}");
	expect_info(&r, 14, 1);
	reply_free(&r);
	/* A NUL, a lone continuation byte, a character cut by the end: not text. */
	put_sized(c, "nul", 100, 'a', 50, "\x01");
	FILE *f = fopen(ws_file(c, "nul"), "r+");
	fseek(f, 60, SEEK_SET);
	fputc(0, f);
	fclose(f);
	run(c, 3, &r, "{\"op\":\"read\",\"path\":\"nul\",\"info\":true,\"checkText\":true}");
	expect_info(&r, 100, 0);
	reply_free(&r);
	put_sized(c, "bad", 100, 'a', 10, "\x80");
	run(c, 4, &r, "{\"op\":\"read\",\"path\":\"bad\",\"info\":true,\"checkText\":true}");
	expect_info(&r, 100, 0);
	reply_free(&r);
	put_sized(c, "cut", 100, 'a', 99, "\xe2");
	run(c, 5, &r, "{\"op\":\"read\",\"path\":\"cut\",\"info\":true,\"checkText\":true}");
	expect_info(&r, 100, 0);
	reply_free(&r);
	/* Characters across the scan's 64 KiB pieces and the 256 KiB data frames are text. */
	size_t n = 3 * GUEST_DATA_CHUNK;
	put_sized(c, "big", n, 'x', GUEST_DATA_CHUNK - 1, "\xe2\x82\xac");
	f = fopen(ws_file(c, "big"), "r+");
	fseek(f, 65535, SEEK_SET);
	fputs("\xf0\x9f\x98\x80", f);
	fclose(f);
	run(c, 6, &r, "{\"op\":\"read\",\"path\":\"big\",\"info\":true,\"checkText\":true}");
	expect_info(&r, (long long)n, 1);
	reply_free(&r);
}

/* Takes the first window of read ch, with no credit granted back. */
static void first_window(struct client *c, uint32_t ch, const char *rel, bool check_text)
{
	c->auto_window = false;
	client_request(c, ch, "{\"op\":\"read\",\"path\":\"%s\",\"info\":true,\"checkText\":%s}",
		       rel, check_text ? "true" : "false");
	struct frame f;
	uint64_t got = 0;
	assert_int_equal(client_next(c, ch, &f, 5000), 0);
	assert_int_equal(f.type, GUEST_FILEINFO);
	frame_free(&f);
	while (got < GUEST_WINDOW_INITIAL) {
		assert_int_equal(client_next(c, ch, &f, 5000), 0);
		assert_int_equal(f.type, GUEST_FILEDATA);
		got += f.len;
		frame_free(&f);
	}
}

static void expect_changed(struct client *c, uint32_t ch)
{
	struct reply r;
	c->auto_window = true;
	client_window(c, ch, GUEST_WINDOW_INITIAL);
	assert_int_equal(client_wait(c, ch, &r, 30000), 0);
	assert_int_equal(r.type, GUEST_ERROR);
	assert_string_equal(reply_str(&r, "code"), "ESTALE");
	reply_free(&r);
}

static void test_read_of_a_changing_file_fails(void **state)
{
	struct client *c = *state;
	size_t n = 4u << 20;
	/* Grown while being read. */
	put_sized(c, "grow", n, 'g', 0, NULL);
	first_window(c, 1, "grow", false);
	FILE *f = fopen(ws_file(c, "grow"), "a");
	fputs("more", f);
	fclose(f);
	expect_changed(c, 1);
	/* Shrunk. */
	put_sized(c, "shrink", n, 's', 0, NULL);
	first_window(c, 2, "shrink", false);
	assert_int_equal(truncate(ws_file(c, "shrink"), (off_t)(n / 2) + 1), 0);
	expect_changed(c, 2);
	/* The same size, rewritten in place after the part already sent. */
	put_sized(c, "same", n, 'm', 0, NULL);
	first_window(c, 3, "same", false);
	f = fopen(ws_file(c, "same"), "r+");
	fseek(f, (long)(n - 10), SEEK_SET);
	fputs("changed", f);
	fclose(f);
	expect_changed(c, 3);
	/* Text that stops being text where it was not read yet. */
	put_sized(c, "text", n, 't', 0, NULL);
	first_window(c, 4, "text", true);
	f = fopen(ws_file(c, "text"), "r+");
	fseek(f, (long)(n - 10), SEEK_SET);
	fputc(0, f);
	fclose(f);
	expect_changed(c, 4);
}

static void test_read_errors(void **state)
{
	struct client *c = *state;
	struct reply r;
	expect_error(c, 1, "ENOENT", "{\"op\":\"read\",\"path\":\"missing\"}");
	assert_int_equal(mkdir(ws_file(c, "d"), 0755), 0);
	expect_error(c, 2, "EISDIR", "{\"op\":\"read\",\"path\":\"d\"}");
	expect_error(c, 3, "EISDIR", "{\"op\":\"read\",\"path\":\".\"}");
	put_file(c, "ten", "0123456789");
	expect_error(c, 4, "EFBIG", "{\"op\":\"read\",\"path\":\"ten\",\"maxBytes\":9}");
	run(c, 5, &r, "{\"op\":\"read\",\"path\":\"ten\",\"maxBytes\":10}");
	assert_string_equal(r.out, "0123456789");
	reply_free(&r);
	assert_int_equal(mkfifo(ws_file(c, "fifo"), 0644), 0);
	expect_error(c, 6, "EINVAL", "{\"op\":\"read\",\"path\":\"fifo\"}");
	expect_error(c, 7, "EINVAL", "{\"op\":\"read\"}");
	expect_error(c, 8, "EINVAL", "{\"op\":\"read\",\"path\":\"\"}");
}

static json_t *find_entry(json_t *entries, const char *path)
{
	size_t i;
	json_t *e;
	json_array_foreach (entries, i, e) {
		if (strcmp(json_string_value(json_object_get(e, "path")), path) == 0)
			return e;
	}
	return NULL;
}

static void test_list(void **state)
{
	struct client *c = *state;
	struct reply r;
	assert_int_equal(mkdir(ws_file(c, "d"), 0755), 0);
	assert_int_equal(mkdir(ws_file(c, "d/e"), 0700), 0);
	put_file(c, "d/e/f.txt", "12345");
	put_file(c, "top", "x");
	assert_int_equal(symlink("nowhere", ws_file(c, "d/broken")), 0);
	assert_int_equal(symlink("/etc", ws_file(c, "etc")), 0);
	run(c, 1, &r, "{\"op\":\"list\",\"recursive\":true}");
	assert_int_equal(r.type, GUEST_RESULT);
	json_t *entries = json_object_get(r.json, "entries");
	assert_int_equal(json_array_size(entries), 6);
	assert_true(json_is_false(json_object_get(r.json, "truncated")));
	json_t *e = find_entry(entries, "d/e/f.txt");
	assert_non_null(e);
	assert_string_equal(json_string_value(json_object_get(e, "name")), "f.txt");
	assert_string_equal(json_string_value(json_object_get(e, "type")), "file");
	assert_int_equal(json_integer_value(json_object_get(e, "size")), 5);
	assert_true(json_is_number(json_object_get(e, "mtime")));
	e = find_entry(entries, "d/e");
	assert_string_equal(json_string_value(json_object_get(e, "type")), "dir");
	assert_int_equal(json_integer_value(json_object_get(e, "mode")), 0700);
	e = find_entry(entries, "d/broken");
	assert_non_null(e);
	assert_string_equal(json_string_value(json_object_get(e, "type")), "symlink");
	e = find_entry(entries, "etc");
	assert_string_equal(json_string_value(json_object_get(e, "type")), "symlink");
	assert_null(find_entry(entries, "etc/passwd")); /* not followed */
	reply_free(&r);

	run(c, 2, &r, "{\"op\":\"list\",\"path\":\"d\"}");
	entries = json_object_get(r.json, "entries");
	assert_int_equal(json_array_size(entries), 2);
	assert_non_null(find_entry(entries, "e"));
	assert_string_equal(reply_str(&r, "path"), "d");
	reply_free(&r);

	run(c, 3, &r, "{\"op\":\"list\",\"recursive\":true,\"maxEntries\":2}");
	assert_int_equal(json_array_size(json_object_get(r.json, "entries")), 2);
	assert_true(json_is_true(json_object_get(r.json, "truncated")));
	reply_free(&r);

	expect_error(c, 4, "ENOENT", "{\"op\":\"list\",\"path\":\"nope\"}");
	expect_error(c, 5, "ENOTDIR", "{\"op\":\"list\",\"path\":\"top\"}");
	expect_error(c, 6, "ESCAPE", "{\"op\":\"list\",\"path\":\"etc\"}");
}

static void test_list_bounded(void **state)
{
	struct client *c = *state;
	struct reply r;
	/* Long names: the reply must stay within one frame and say it is truncated. */
	char name[256];
	memset(name, 'n', 200);
	for (int i = 0; i < 6000; i++) {
		snprintf(name + 200, sizeof(name) - 200, "%05d", i);
		int fd = open(ws_file(c, name), O_CREAT | O_WRONLY, 0644);
		assert_true(fd >= 0);
		close(fd);
	}
	run(c, 1, &r, "{\"op\":\"list\"}");
	assert_int_equal(r.type, GUEST_RESULT);
	assert_true(json_is_true(json_object_get(r.json, "truncated")));
	size_t n = json_array_size(json_object_get(r.json, "entries"));
	assert_true(n > 1000 && n < 6000);
	reply_free(&r);
}

static void test_stat_mkdir_remove(void **state)
{
	struct client *c = *state;
	struct reply r;
	put_file(c, "f", "abc");
	run(c, 1, &r, "{\"op\":\"stat\",\"path\":\"f\"}");
	assert_string_equal(reply_str(&r, "type"), "file");
	assert_int_equal(reply_int(&r, "size"), 3);
	reply_free(&r);
	run(c, 2, &r, "{\"op\":\"stat\",\"path\":\".\"}");
	assert_string_equal(reply_str(&r, "type"), "dir");
	reply_free(&r);
	expect_error(c, 3, "ENOENT", "{\"op\":\"stat\",\"path\":\"nope\"}");

	expect_error(c, 4, "ENOENT", "{\"op\":\"mkdir\",\"path\":\"a/b\"}");
	run(c, 5, &r, "{\"op\":\"mkdir\",\"path\":\"a/b\",\"parents\":true}");
	assert_int_equal(r.type, GUEST_RESULT);
	reply_free(&r);
	run(c, 6, &r, "{\"op\":\"mkdir\",\"path\":\"a/b\",\"parents\":true}");
	assert_int_equal(r.type, GUEST_RESULT);
	reply_free(&r);
	expect_error(c, 7, "EEXIST", "{\"op\":\"mkdir\",\"path\":\"a/b\"}");
	put_file(c, "a/b/file", "x");

	expect_error(c, 8, "ENOTEMPTY", "{\"op\":\"remove\",\"path\":\"a\"}");
	run(c, 9, &r, "{\"op\":\"remove\",\"path\":\"a\",\"recursive\":true}");
	assert_int_equal(r.type, GUEST_RESULT);
	reply_free(&r);
	struct stat st;
	assert_int_equal(stat(ws_file(c, "a"), &st), -1);
	run(c, 10, &r, "{\"op\":\"remove\",\"path\":\"f\"}");
	assert_int_equal(r.type, GUEST_RESULT);
	reply_free(&r);
	expect_error(c, 11, "ENOENT", "{\"op\":\"remove\",\"path\":\"f\"}");
	expect_error(c, 12, "EPERM", "{\"op\":\"remove\",\"path\":\".\",\"recursive\":true}");
	expect_error(c, 13, "EPERM", "{\"op\":\"remove\",\"path\":\"x/..\",\"recursive\":true}");
	assert_int_equal(stat(c->ws, &st), 0);

	/* A symlink to a directory outside is removed itself, never what it points at. */
	assert_int_equal(mkdir("/tmp/agent-test-keep", 0755) == 0 || errno == EEXIST, 1);
	put_file(c, "../agent-test-keep/keep", "");
	assert_int_equal(symlink("/tmp/agent-test-keep", ws_file(c, "out")), 0);
	run(c, 14, &r, "{\"op\":\"remove\",\"path\":\"out\",\"recursive\":true}");
	assert_int_equal(r.type, GUEST_RESULT);
	reply_free(&r);
	assert_int_equal(stat("/tmp/agent-test-keep/keep", &st), 0);
	unlink("/tmp/agent-test-keep/keep");
	rmdir("/tmp/agent-test-keep");
}

/* The next EVENT of ch as JSON (the caller's), failing the test on anything else. */
static json_t *next_event(struct client *c, uint32_t ch)
{
	struct frame f;
	assert_int_equal(client_next(c, ch, &f, 10000), 0);
	if (f.type != GUEST_EVENT) {
		fprintf(stderr, "want an EVENT, got type %u: %s\n", f.type, f.payload);
		fail();
	}
	json_t *j = json_loadb((const char *)f.payload, f.len, 0, NULL);
	assert_non_null(j);
	frame_free(&f);
	return j;
}

/* The next EVENT's "type path [from]". */
static char *next_event_text(struct client *c, uint32_t ch)
{
	json_t *j = next_event(c, ch);
	const char *from = json_string_value(json_object_get(j, "from"));
	char *s;
	assert_true(asprintf(&s, "%s %s%s%s", json_string_value(json_object_get(j, "type")),
			     json_string_value(json_object_get(j, "path")), from ? " " : "",
			     from ? from : "") >= 0);
	json_decref(j);
	return s;
}

static void expect_event(struct client *c, uint32_t ch, const char *want)
{
	char *got = next_event_text(c, ch);
	if (strcmp(got, want) != 0) {
		fprintf(stderr, "want event `%s`, got `%s`\n", want, got);
		fail();
	}
	free(got);
}

/* rename(2) of two workspace paths (ws_file's buffer holds one at a time). */
static int ws_rename(struct client *c, const char *from, const char *to)
{
	char *a = strdup(ws_file(c, from));
	int r = rename(a, ws_file(c, to));
	free(a);
	return r;
}

static void test_watch_events(void **state)
{
	struct client *c = *state;
	assert_int_equal(mkdir(ws_file(c, "w"), 0755), 0);
	client_request(c, 1, "{\"op\":\"watch\",\"path\":\"w\",\"recursive\":true}");
	json_t *ready = next_event(c, 1);
	assert_string_equal(json_string_value(json_object_get(ready, "type")), "ready");
	assert_int_equal(json_integer_value(json_object_get(ready, "watches")), 1);
	json_decref(ready);
	put_file(c, "w/a", "x");
	expect_event(c, 1, "create w/a");
	expect_event(c, 1, "write w/a");
	assert_int_equal(chmod(ws_file(c, "w/a"), 0600), 0);
	expect_event(c, 1, "chmod w/a");
	assert_int_equal(ws_rename(c, "w/a", "w/b"), 0);
	expect_event(c, 1, "rename w/b w/a");
	/* A directory made later is watched; moved out, it is forgotten. */
	assert_int_equal(mkdir(ws_file(c, "w/d"), 0755), 0);
	expect_event(c, 1, "create w/d");
	put_file(c, "w/d/f", "");
	expect_event(c, 1, "create w/d/f");
	assert_int_equal(ws_rename(c, "w/d", "outside"), 0);
	expect_event(c, 1, "rename w/d");
	put_file(c, "outside/g", "");
	assert_int_equal(unlink(ws_file(c, "w/b")), 0);
	expect_event(c, 1, "remove w/b"); /* and nothing of outside/g before it */
	client_send(c, GUEST_CANCEL, 1, NULL, 0);
	struct reply r;
	assert_int_equal(client_wait(c, 1, &r, 10000), 0);
	assert_int_equal(r.type, GUEST_RESULT);
	assert_int_equal(reply_int(&r, "events"), 8);
	assert_int_equal(reply_int(&r, "overflows"), 0);
	reply_free(&r);
	/* The filter: only removes. */
	client_request(c, 2, "{\"op\":\"watch\",\"path\":\".\",\"events\":[\"remove\"]}");
	json_decref(next_event(c, 2));
	put_file(c, "n", "");
	assert_int_equal(unlink(ws_file(c, "n")), 0);
	expect_event(c, 2, "remove n");
	/* The watched directory removed: its last event, then the RESULT. */
	assert_int_equal(mkdir(ws_file(c, "gone"), 0755), 0);
	client_request(c, 3, "{\"op\":\"watch\",\"path\":\"gone\"}");
	json_decref(next_event(c, 3));
	assert_int_equal(rmdir(ws_file(c, "gone")), 0);
	expect_event(c, 3, "remove gone");
	assert_int_equal(client_wait(c, 3, &r, 10000), 0);
	assert_int_equal(r.type, GUEST_RESULT);
	assert_true(json_is_true(json_object_get(r.json, "gone")));
	reply_free(&r);
	client_send(c, GUEST_CANCEL, 2, NULL, 0);
	assert_int_equal(client_wait(c, 2, &r, 10000), 0);
	reply_free(&r);
}

static void test_watch_errors(void **state)
{
	struct client *c = *state;
	put_file(c, "file", "");
	assert_int_equal(symlink("/etc", ws_file(c, "etc")), 0);
	expect_error(c, 1, "ESCAPE", "{\"op\":\"watch\",\"path\":\"../\"}");
	expect_error(c, 2, "ESCAPE", "{\"op\":\"watch\",\"path\":\"etc\"}");
	expect_error(c, 3, "ENOTDIR", "{\"op\":\"watch\",\"path\":\"file\"}");
	expect_error(c, 4, "ENOENT", "{\"op\":\"watch\",\"path\":\"missing\"}");
	expect_error(c, 5, "EINVAL", "{\"op\":\"watch\",\"path\":\".\",\"events\":[\"boom\"]}");
	expect_error(c, 6, "EINVAL", "{\"op\":\"watch\",\"path\":\".\",\"events\":[]}");
	expect_error(c, 7, "EINVAL", "{\"op\":\"watch\",\"path\":\".\",\"maxWatches\":0}");
	/* Beyond maxWatches: at the start, and when the tree grows past it. */
	assert_int_equal(mkdir(ws_file(c, "t"), 0755), 0);
	assert_int_equal(mkdir(ws_file(c, "t/a"), 0755), 0);
	expect_error(c, 8, "ENOSPC",
		     "{\"op\":\"watch\",\"path\":\"t\",\"recursive\":true,\"maxWatches\":1}");
	client_request(c, 9,
		       "{\"op\":\"watch\",\"path\":\"t\",\"recursive\":true,\"maxWatches\":2}");
	struct reply r;
	assert_int_equal(mkdir(ws_file(c, "t/b"), 0755), 0);
	assert_int_equal(client_wait(c, 9, &r, 10000), 0);
	assert_int_equal(r.type, GUEST_ERROR);
	assert_string_equal(reply_str(&r, "code"), "ENOSPC");
	reply_free(&r);
}

/* A host that grants no credit: the agent holds a bounded queue, stops reading inotify, and
 * reports what was lost as one overflow once credit comes back. */
static void test_watch_overflow_when_the_host_does_not_read(void **state)
{
	struct client *c = *state;
	assert_int_equal(mkdir(ws_file(c, "o"), 0755), 0);
	client_request(c, 1, "{\"op\":\"watch\",\"path\":\"o\"}");
	json_decref(next_event(c, 1));
	/* More events than the credit, the agent's queue and the kernel's queue hold. */
	int n = 60000;
	for (int i = 0; i < n; i++) {
		char name[32];
		snprintf(name, sizeof(name), "o/f%d", i);
		put_file(c, name, "");
	}
	/* Everything the credit allowed, then nothing until a WINDOW. */
	size_t bytes = 0, got = 0;
	bool overflow = false;
	for (;;) {
		struct frame f;
		if (client_next(c, 1, &f, 500) == -ETIMEDOUT)
			break;
		assert_int_equal(f.type, GUEST_EVENT);
		bytes += f.len;
		got++;
		overflow |= strstr((const char *)f.payload, "overflow") != NULL;
		frame_free(&f);
	}
	assert_true(bytes <= GUEST_WINDOW_INITIAL);
	assert_false(overflow);
	assert_true(got < (size_t)n);
	/* Credit back, read on: one overflow says what was lost. */
	client_window(c, 1, 64u << 20);
	unsigned overflows = 0;
	for (;;) {
		struct frame f;
		if (client_next(c, 1, &f, 500) == -ETIMEDOUT)
			break;
		got++;
		overflows += strstr((const char *)f.payload, "overflow") != NULL;
		frame_free(&f);
	}
	assert_true(overflows >= 1);
	assert_true(got < (size_t)n);
	client_send(c, GUEST_CANCEL, 1, NULL, 0);
	struct reply r;
	assert_int_equal(client_wait(c, 1, &r, 10000), 0);
	assert_int_equal(reply_int(&r, "overflows"), overflows);
	reply_free(&r);
}

/* A listening socket on 127.0.0.1 (port 0: any); its port goes to *port. */
static int listen_loopback(int *port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(fd >= 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(fd, 4), 0);
	socklen_t l = sizeof(a);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &l), 0);
	*port = ntohs(a.sin_port);
	return fd;
}

/* A server in a child for one connection: sends `greeting` bytes of 'g', then echoes what it
 * reads upper-cased until EOF, then closes. */
static pid_t echo_server(int *port, size_t greeting)
{
	int lfd = listen_loopback(port);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		int fd = accept(lfd, NULL, NULL);
		char buf[65536];
		memset(buf, 'g', sizeof(buf));
		while (greeting) {
			size_t n = greeting < sizeof(buf) ? greeting : sizeof(buf);
			ssize_t k = write(fd, buf, n);
			if (k <= 0)
				_exit(1);
			greeting -= (size_t)k;
		}
		ssize_t n;
		while ((n = read(fd, buf, sizeof(buf))) > 0) {
			for (ssize_t i = 0; i < n; i++)
				if (buf[i] >= 'a' && buf[i] <= 'z')
					buf[i] = (char)(buf[i] - 32);
			if (write(fd, buf, (size_t)n) != n)
				_exit(1);
		}
		_exit(0);
	}
	close(lfd);
	return pid;
}

static void test_connect(void **state)
{
	struct client *c = *state;
	int port;
	pid_t pid = echo_server(&port, 0);
	client_request(c, 1, "{\"op\":\"connect\",\"port\":%d}", port);
	json_t *ev = next_event(c, 1);
	assert_string_equal(json_string_value(json_object_get(ev, "type")), "connected");
	json_decref(ev);
	client_send(c, GUEST_DATA, 1, "hello, ", 7);
	client_send(c, GUEST_DATA, 1, "world", 5);
	client_send(c, GUEST_EOF, 1, NULL, 0);
	struct reply r;
	assert_int_equal(client_wait(c, 1, &r, 10000), 0);
	assert_int_equal(r.type, GUEST_RESULT);
	assert_int_equal(r.out_len, 12);
	assert_memory_equal(r.out, "HELLO, WORLD", 12);
	assert_int_equal(reply_int(&r, "bytesIn"), 12);
	assert_int_equal(reply_int(&r, "bytesOut"), 12);
	reply_free(&r);
	int st;
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_int_equal(WEXITSTATUS(st), 0);

	/* More than a window from the server: it comes as credit is granted, all of it. */
	size_t big = 3u << 20;
	pid = echo_server(&port, big);
	client_request(c, 2, "{\"op\":\"connect\",\"port\":%d}", port);
	json_decref(next_event(c, 2));
	client_send(c, GUEST_EOF, 2, NULL, 0);
	assert_int_equal(client_wait(c, 2, &r, 20000), 0);
	assert_int_equal(r.type, GUEST_RESULT);
	assert_int_equal(r.out_len, big);
	assert_int_equal(reply_int(&r, "bytesIn"), (long long)big);
	reply_free(&r);
	assert_int_equal(waitpid(pid, &st, 0), pid);

	/* CANCEL ends a connection the server keeps open. */
	pid = echo_server(&port, 0);
	client_request(c, 3, "{\"op\":\"connect\",\"port\":%d}", port);
	json_decref(next_event(c, 3));
	client_send(c, GUEST_CANCEL, 3, NULL, 0);
	assert_int_equal(client_wait(c, 3, &r, 10000), 0);
	assert_int_equal(r.type, GUEST_RESULT);
	reply_free(&r);
	assert_int_equal(waitpid(pid, &st, 0), pid);
}

static void test_connect_errors(void **state)
{
	struct client *c = *state;
	int port;
	close(listen_loopback(&port)); /* nothing listens there now */
	client_request(c, 1, "{\"op\":\"connect\",\"port\":%d}", port);
	struct reply r;
	assert_int_equal(client_wait(c, 1, &r, 10000), 0);
	assert_int_equal(r.type, GUEST_ERROR);
	assert_string_equal(reply_str(&r, "code"), "ECONNREFUSED");
	assert_non_null(strstr(reply_str(&r, "error"), "nothing is listening"));
	reply_free(&r);
	const char *bad[] = { "{\"op\":\"connect\"}", "{\"op\":\"connect\",\"port\":0}",
			      "{\"op\":\"connect\",\"port\":65536}",
			      "{\"op\":\"connect\",\"port\":\"80\"}" };
	for (unsigned i = 0; i < sizeof(bad) / sizeof(*bad); i++) {
		client_request(c, 10 + i, "%s", bad[i]);
		assert_int_equal(client_wait(c, 10 + i, &r, 10000), 0);
		assert_int_equal(r.type, GUEST_ERROR);
		assert_string_equal(reply_str(&r, "code"), "EINVAL");
		reply_free(&r);
	}
	assert_true(client_ping(c, 99));
}

static void test_ports(void **state)
{
	struct client *c = *state;
	int port;
	int fd = listen_loopback(&port);
	client_request(c, 1, "{\"op\":\"ports\"}");
	struct reply r;
	assert_int_equal(client_wait(c, 1, &r, 10000), 0);
	assert_int_equal(r.type, GUEST_RESULT);
	json_t *ports = json_object_get(r.json, "ports");
	assert_true(json_is_array(ports));
	bool found = false;
	size_t i;
	json_t *p;
	json_array_foreach (ports, i, p)
		if (json_integer_value(json_object_get(p, "port")) == port)
			found = !strcmp(json_string_value(json_object_get(p, "address")),
					"127.0.0.1");
	assert_true(found);
	reply_free(&r);
	close(fd);
	client_request(c, 2, "{\"op\":\"ports\"}");
	assert_int_equal(client_wait(c, 2, &r, 10000), 0);
	found = false;
	json_array_foreach (json_object_get(r.json, "ports"), i, p)
		found |= json_integer_value(json_object_get(p, "port")) == port;
	assert_false(found);
	reply_free(&r);
}

static void test_escapes(void **state)
{
	struct client *c = *state;
	assert_int_equal(symlink("/etc", ws_file(c, "etclink")), 0);
	assert_int_equal(symlink("b", ws_file(c, "a")), 0);
	assert_int_equal(symlink("../..", ws_file(c, "b")), 0);
	assert_int_equal(mkdir(ws_file(c, "d"), 0755), 0);
	assert_int_equal(symlink("../../..", ws_file(c, "d/up")), 0);
	assert_int_equal(symlink("../inside", ws_file(c, "d/ok")), 0);
	put_file(c, "inside", "in");

	const char *ops[] = { "read", "stat", "list", "remove", "mkdir" };
	const char *paths[] = { "../x", "/etc/passwd", "etclink/passwd",
				"a/x",  "a/../../x",   "d/up/etc/passwd",
				"..",   "d/../../x" };
	uint32_t ch = 1;
	for (size_t i = 0; i < sizeof(paths) / sizeof(paths[0]); i++) {
		for (size_t j = 0; j < sizeof(ops) / sizeof(ops[0]); j++)
			expect_error(c, ch++, "ESCAPE", "{\"op\":\"%s\",\"path\":\"%s\"}", ops[j],
				     paths[i]);
		char w[300];
		snprintf(w, sizeof(w), "{\"op\":\"write\",\"path\":\"%s/new\"}", paths[i]);
		expect_error(c, ch++, "ESCAPE", "%s", w);
	}
	expect_error(c, ch++, "ESCAPE", "{\"op\":\"read\",\"path\":\"etclink\"}");
	struct reply r;
	run(c, ch++, &r, "{\"op\":\"read\",\"path\":\"d/ok\"}");
	assert_string_equal(r.out, "in");
	reply_free(&r);
	/* The message names the path. */
	run(c, ch++, &r, "{\"op\":\"read\",\"path\":\"../etc/passwd\"}");
	assert_string_equal(reply_str(&r, "error"), "path `../etc/passwd` escapes the workspace");
	reply_free(&r);
	struct stat st;
	assert_int_equal(stat("/etc/passwd", &st), 0);
}

static bool pid_gone(void *pid)
{
	return kill(*(pid_t *)pid, 0) < 0 && errno == ESRCH;
}

/* Whether process pid is gone (waiting for it to go). */
static bool gone(pid_t pid)
{
	return wait_until(pid_gone, &pid, WAIT_TIMEOUT_MS, "a killed process to go");
}

static void test_protocol_errors(void **state)
{
	struct client *c = *state;
	struct reply r;

	/* Oversize frame: an error on its channel, the payload skipped, service goes on. */
	size_t n = GUEST_MAX_PAYLOAD + 1;
	char *big = calloc(1, n);
	client_send(c, GUEST_REQUEST, 1, big, n);
	free(big);
	assert_int_equal(client_wait(c, 1, &r, 5000), 0);
	assert_int_equal(r.type, GUEST_ERROR);
	assert_string_equal(reply_str(&r, "code"), "EMSGSIZE");
	reply_free(&r);
	assert_true(client_ping(c, 2));

	expect_error(c, 3, "EPROTO", "{\"op\":\"ping\"");
	expect_error(c, 4, "EPROTO", "{\"op\":\"ping\"} x");
	expect_error(c, 5, "EPROTO", "[1,2]");
	expect_error(c, 6, "EINVAL", "{\"op\":\"frobnicate\"}");
	expect_error(c, 7, "EINVAL", "{\"nop\":1}");
	expect_error(c, 8, "EINVAL", "{\"op\":\"read\",\"path\":7}");
	run(c, 9, &r, "{\"op\":\"read\",\"path\":7}");
	assert_non_null(strstr(reply_str(&r, "error"), "`path`"));
	reply_free(&r);

	/* Unknown frame type and an agent-only type sent by the host. */
	client_send(c, 99, 10, "x", 1);
	assert_int_equal(client_wait(c, 10, &r, 5000), 0);
	assert_string_equal(reply_str(&r, "code"), "EPROTO");
	reply_free(&r);
	client_send(c, GUEST_RESULT, 11, "{}", 2);
	assert_int_equal(client_wait(c, 11, &r, 5000), 0);
	assert_string_equal(reply_str(&r, "code"), "EPROTO");
	reply_free(&r);
	assert_true(client_ping(c, 12));

	/* Channel 0 is reserved. */
	client_request(c, 0, "{\"op\":\"ping\"}");
	struct frame f;
	assert_int_equal(client_next(c, 0, &f, 5000), 0);
	assert_int_equal(f.type, GUEST_ERROR);
	assert_int_equal(f.ch, 0);
	frame_free(&f);

	/* DATA, EOF, CANCEL and WINDOW for channels that are not open are ignored. */
	client_send(c, GUEST_DATA, 5000, "zz", 2);
	client_send(c, GUEST_EOF, 5001, NULL, 0);
	client_send(c, GUEST_CANCEL, 5002, NULL, 0);
	client_window(c, 5003, 100);
	assert_true(client_ping(c, 13));

	/* A second REQUEST on an open channel ends that operation with one ERROR. Its command
	 * would outlive any wait below: it is gone only if it was killed. */
	client_request(c, 14,
		       "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"echo $$; exec sleep 100\"]}");
	assert_int_equal(client_next(c, 14, &f, 5000), 0);
	assert_int_equal(f.type, GUEST_STDOUT);
	pid_t victim = (pid_t)atoi((char *)f.payload);
	frame_free(&f);
	client_request(c, 14, "{\"op\":\"ping\"}");
	assert_int_equal(client_wait(c, 14, &r, 5000), 0);
	assert_int_equal(r.type, GUEST_ERROR);
	assert_string_equal(reply_str(&r, "code"), "EPROTO");
	reply_free(&r);
	assert_true(client_ping(c, 15));
	/* Nothing more arrives on 14, and its command was killed. */
	assert_int_equal(client_next(c, 14, &f, 300), -ETIMEDOUT);
	assert_true(gone(victim));

	/* A malformed WINDOW on an open channel (its command runs long enough to get it). */
	client_request(c, 16, "{\"op\":\"exec\",\"argv\":[\"sleep\",\"5\"]}");
	client_send(c, GUEST_WINDOW, 16, "abc", 3);
	assert_int_equal(client_wait(c, 16, &r, 5000), 0);
	assert_string_equal(reply_str(&r, "code"), "EPROTO");
	reply_free(&r);

	/* DATA beyond the granted window (the child, running long enough to get it all, reads
	 * nothing, so no credit comes back beyond what the pipe buffer takes). */
	client_request(c, 17, "{\"op\":\"exec\",\"argv\":[\"sleep\",\"5\"],\"stdin\":true}");
	char *chunk = calloc(1, GUEST_DATA_CHUNK);
	for (int i = 0; i < 6; i++)
		client_send(c, GUEST_DATA, 17, chunk, GUEST_DATA_CHUNK);
	free(chunk);
	assert_int_equal(client_wait(c, 17, &r, 5000), 0);
	assert_int_equal(r.type, GUEST_ERROR);
	assert_string_equal(reply_str(&r, "code"), "EPROTO");
	reply_free(&r);
	assert_true(client_ping(c, 18));

	expect_error(c, 19, "ENOTSUP", "{\"op\":\"shutdown\"}");
}

static void test_resume(void **state)
{
	struct client *c = *state;
	struct reply r;
	/* Outside a VM the agent never touches the clock (it would be the host's). */
	run(c, 1, &r,
	    "{\"op\":\"resume\",\"time\":{\"sec\":1000,\"nsec\":5},\"entropy\":\"00ff10\","
	    "\"sessionId\":\"s-1\",\"hostname\":\"box\"}");
	assert_int_equal(r.type, GUEST_RESULT);
	assert_int_equal(reply_int(&r, "protocol"), GUEST_PROTO_VERSION);
	assert_true(json_is_false(json_object_get(r.json, "clockSet")));
	assert_int_equal(reply_int(&r, "entropyBytes"), 3);
	assert_true(json_is_false(json_object_get(r.json, "entropyCredited")));
	assert_string_equal(reply_str(&r, "sessionId"), "s-1");
	reply_free(&r);
	assert_true(time(NULL) > 1000000000);
	expect_error(c, 2, "EINVAL", "{\"op\":\"resume\",\"entropy\":\"0g\"}");
	expect_error(c, 3, "EINVAL", "{\"op\":\"resume\",\"time\":{\"nsec\":1}}");
}

/* Protocol 10: a resume that says the sandbox was restored from a save ends what the
 * previous connection left open (a command still running) and counts the background
 * processes that carried on; a bad "restored" is refused. */
static void test_resume_restored(void **state)
{
	struct client *c = *state;
	struct reply r;
	run(c, 1, &r, "{\"op\":\"spawn\",\"argv\":[\"sleep\",\"30\"],\"tag\":\"kept\"}");
	assert_int_equal(r.type, GUEST_RESULT);
	reply_free(&r);
	const char *left = "{\"op\":\"exec\",\"argv\":[\"sleep\",\"30\"]}";
	client_send(c, GUEST_REQUEST, 2, left, strlen(left));
	assert_true(client_ping(c, 3)); /* the exec has started */
	run(c, 4, &r,
	    "{\"op\":\"resume\",\"sessionId\":\"child\",\"restored\":{\"from\":\"fork\","
	    "\"session\":\"parent\"}}");
	assert_int_equal(r.type, GUEST_RESULT);
	assert_true(json_is_true(json_object_get(r.json, "restored")));
	assert_int_equal(reply_int(&r, "processes"), 1);
	assert_int_equal(reply_int(&r, "droppedOperations"), 1);
	reply_free(&r);
	/* Nothing more of the dropped exec comes; the connection serves on. */
	assert_true(client_ping(c, 5));
	struct frame f;
	assert_int_not_equal(client_next(c, 2, &f, 300), 0);
	expect_error(c, 6, "EINVAL", "{\"op\":\"resume\",\"restored\":{\"from\":\"nap\"}}");
	expect_error(c, 7, "EINVAL", "{\"op\":\"resume\",\"restored\":{}}");
	expect_error(c, 8, "EINVAL", "{\"op\":\"resume\",\"restored\":\"fork\"}");
	/* Without "restored", nothing is said of it. */
	run(c, 9, &r, "{\"op\":\"resume\"}");
	assert_null(json_object_get(r.json, "restored"));
	reply_free(&r);
	run(c, 10, &r, "{\"op\":\"signal\",\"tag\":\"kept\",\"signal\":\"KILL\"}");
	reply_free(&r);
}

static long rss_kb(pid_t pid)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	FILE *f = fopen(path, "r");
	long kb = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

static void test_flow_control(void **state)
{
	struct client *c = *state;
	struct reply r;
	c->auto_window = false;
	/* A flood of output with a reader that grants nothing: the agent stops at one window,
	 * the child blocks on its pipe, memory stays flat. */
	client_request(c, 1,
		       "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"head -c 20000000 /dev/zero; "
		       "echo done >&2\"]}");
	uint64_t got = 0;
	struct frame f;
	while (client_next(c, 1, &f, 700) == 0) {
		assert_int_equal(f.type, GUEST_STDOUT);
		got += f.len;
		frame_free(&f);
	}
	assert_int_equal(got, GUEST_WINDOW_INITIAL);
	long kb = rss_kb(c->pid);
	assert_true(kb > 0 && kb < 64 * 1024);

	/* Granting credit lets it go on, slowly at first. */
	client_window(c, 1, 4096);
	assert_int_equal(client_next(c, 1, &f, 5000), 0);
	assert_true(f.len <= 4096);
	got += f.len;
	frame_free(&f);

	/* Then read everything with credit. */
	c->auto_window = true;
	client_window(c, 1, GUEST_WINDOW_INITIAL);
	/* Bounded generously: sanitizers and a loaded machine make this slow, not wrong. */
	assert_int_equal(client_wait(c, 1, &r, 300000), 0);
	assert_int_equal(got + r.out_len, 20000000);
	assert_string_equal(r.err, "done\n");
	assert_int_equal(reply_int(&r, "exitCode"), 0);
	reply_free(&r);
	kb = rss_kb(c->pid);
	assert_true(kb > 0 && kb < 64 * 1024);
}

static void test_max_ops(void **state)
{
	struct client *c = *state;
	struct reply r;
	for (uint32_t i = 1; i <= 256; i++)
		client_request(c, i, "{\"op\":\"write\",\"path\":\"w%u\"}", i);
	run(c, 257, &r, "{\"op\":\"write\",\"path\":\"over\"}");
	assert_int_equal(r.type, GUEST_ERROR);
	assert_string_equal(reply_str(&r, "code"), "EAGAIN");
	reply_free(&r);
	for (uint32_t i = 1; i <= 256; i++)
		client_send(c, GUEST_EOF, i, NULL, 0);
	for (uint32_t i = 1; i <= 256; i++) {
		assert_int_equal(client_wait(c, i, &r, 5000), 0);
		assert_int_equal(r.type, GUEST_RESULT);
		reply_free(&r);
	}
	assert_true(client_ping(c, 300));
}

static void test_eof_kills_children(void **state)
{
	struct client c;
	struct reply r;
	client_start(&c);
	/* A daemon left behind by a finished command ... */
	run(&c, 1, &r,
	    "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"sleep 100 >/dev/null 2>&1 & echo $!\"]}");
	pid_t daemon = (pid_t)atoi(r.out);
	reply_free(&r);
	/* ... and a command still running. */
	client_request(&c, 2,
		       "{\"op\":\"exec\",\"argv\":[\"sh\",\"-c\",\"echo $$; exec sleep 100\"]}");
	struct frame f;
	assert_int_equal(client_next(&c, 2, &f, 5000), 0);
	pid_t running = (pid_t)atoi((char *)f.payload);
	frame_free(&f);
	assert_true(daemon > 0 && running > 0);
	assert_int_equal(kill(daemon, 0), 0);
	assert_int_equal(kill(running, 0), 0);
	int st = client_stop(&c);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 0);
	assert_true(gone(daemon));
	assert_true(gone(running));
}

int main(void)
{
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	const struct CMUnitTest tests[] = {
		T(test_ping),
		T(test_exec_output_and_exit),
		T(test_exec_signal),
		T(test_exec_env),
		T(test_exec_cwd),
		cmocka_unit_test(test_exec_image_env),
		T(test_exec_stdin),
		T(test_exec_timeout),
		T(test_exec_cancel),
		T(test_exec_term_ignored),
		T(test_exec_cannot_start),
		T(test_exec_background_does_not_block),
		T(test_concurrent),
		T(test_write_read_binary),
		T(test_write_read_large),
		T(test_write_empty_mode_parents),
		T(test_write_no_torn_file),
		T(test_read_errors),
		T(test_read_announces_the_file),
		T(test_read_of_a_changing_file_fails),
		T(test_list),
		T(test_list_bounded),
		T(test_stat_mkdir_remove),
		T(test_watch_events),
		T(test_watch_errors),
		T(test_watch_overflow_when_the_host_does_not_read),
		T(test_connect),
		T(test_connect_errors),
		T(test_ports),
		T(test_escapes),
		T(test_protocol_errors),
		T(test_resume),
		T(test_resume_restored),
		T(test_flow_control),
		T(test_max_ops),
		cmocka_unit_test(test_eof_kills_children),
	};
	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
