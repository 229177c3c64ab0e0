/* proc: the identity of a process a driver started, so that a later daemon run can kill it
 * and nothing else.
 *
 * A pid alone can be reused; the pair (pid, start time) within one boot cannot. Records hold
 * "pid", "start_time" and "boot_id"; proc_kill_recorded() checks all three through a pidfd,
 * so that the pid cannot change hands between the check and the kill. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* Field 22 of /proc/<pid>/stat: start time in clock ticks since boot; 0 when unknown. */
uint64_t proc_start_time(pid_t pid);

/* /proc/sys/kernel/random/boot_id, or "" when unknown. */
void proc_boot_id(char buf[64]);

/* Adds "pid", "start_time" and "boot_id" of `pid` to the record object. */
void proc_record_add(json_t *record, pid_t pid);

/* Kills the recorded process (SIGKILL, then waits up to wait_ms for it to go) if and only if
 * it is the very process that was recorded and `also(pid, arg)` (optional) agrees. Returns
 * whether it killed it. */
bool proc_kill_recorded(json_t *record, bool (*also)(pid_t pid, void *arg), void *arg, int wait_ms);
