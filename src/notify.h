/* notify: what sandboxd tells its service manager (systemd's sd_notify protocol).
 *
 * Without NOTIFY_SOCKET in the environment (not started by systemd, or by a unit that is not
 * Type=notify) every call is a no-op. */
#pragma once

#include <event2/event.h>

/* Starts the watchdog's keep-alive on base when the manager asked for one (WATCHDOG_USEC):
 * WATCHDOG=1 every half period, from the loop, so that a loop stuck anywhere stops it. */
void notify_init(struct event_base *base);

/* READY=1 with a status line: the daemon serves. */
void notify_ready(const char *status);

/* STOPPING=1: the daemon has begun to stop (a stop takes up to the shutdown grace). */
void notify_stopping(void);

/* Stops the keep-alive; safe to call without notify_init. */
void notify_free(void);
