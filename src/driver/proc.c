#include "driver/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "util/cleanup.h"

uint64_t proc_start_time(pid_t pid)
{
	char path[64], buf[1024];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	ssize_t n = read(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* The command name (field 2) may hold spaces and parentheses: skip past its last ')'. */
	char *p = strrchr(buf, ')');
	if (!p)
		return 0;
	p++;
	for (int field = 3; field < 22 && p; field++)
		p = strchr(p + 1, ' ');
	return p ? strtoull(p + 1, NULL, 10) : 0;
}

void proc_boot_id(char buf[64])
{
	buf[0] = '\0';
	_cleanup_close_ int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	ssize_t n = read(fd, buf, 63);
	buf[n > 0 ? n : 0] = '\0';
	buf[strcspn(buf, "\n")] = '\0';
}

void proc_record_add(json_t *record, pid_t pid)
{
	char boot[64];
	proc_boot_id(boot);
	json_object_set_new(record, "pid", json_integer(pid));
	json_object_set_new(record, "start_time", json_integer((json_int_t)proc_start_time(pid)));
	json_object_set_new(record, "boot_id", json_string(boot));
}

bool proc_kill_recorded(json_t *record, bool (*also)(pid_t pid, void *arg), void *arg, int wait_ms)
{
	json_int_t pid = json_integer_value(json_object_get(record, "pid"));
	json_int_t start = json_integer_value(json_object_get(record, "start_time"));
	const char *boot = json_string_value(json_object_get(record, "boot_id"));
	char now[64];
	proc_boot_id(now);
	if (pid <= 1 || pid > INT32_MAX || start <= 0 || !boot || strcmp(boot, now) != 0)
		return false;
	_cleanup_close_ int pfd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
	if (pfd < 0)
		return false;
	if ((json_int_t)proc_start_time((pid_t)pid) != start || (also && !also((pid_t)pid, arg)))
		return false;
	/* Still alive after the checks: /proc/<pid> was this pidfd's process. */
	if (syscall(SYS_pidfd_send_signal, pfd, 0, NULL, 0) < 0)
		return false;
	syscall(SYS_pidfd_send_signal, pfd, SIGKILL, NULL, 0);
	struct pollfd p = { .fd = pfd, .events = POLLIN };
	while (poll(&p, 1, wait_ms) < 0 && errno == EINTR)
		;
	return true;
}
