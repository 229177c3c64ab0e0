#include "notify.h"

#include <inttypes.h>
#include <stdio.h>
#include <systemd/sd-daemon.h>

#include "util/log.h"

static struct event *keepalive;

static void on_keepalive(evutil_socket_t fd, short what, void *arg)
{
	sd_notify(0, "WATCHDOG=1");
}

void notify_init(struct event_base *base)
{
	uint64_t usec = 0;
	/* > 0 only when WATCHDOG_USEC is set (and WATCHDOG_PID, if set, is this process). */
	if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0)
		return;
	uint64_t half = usec / 2;
	struct timeval tv = { .tv_sec = (time_t)(half / 1000000),
			      .tv_usec = (suseconds_t)(half % 1000000) };
	keepalive = event_new(base, -1, EV_PERSIST, on_keepalive, NULL);
	event_add(keepalive, &tv);
	log_info("notify", "watchdog every %" PRIu64 " ms", usec / 1000);
}

void notify_ready(const char *status)
{
	char msg[600];
	snprintf(msg, sizeof(msg), "READY=1\nSTATUS=%s", status);
	sd_notify(0, msg);
	/* The first keep-alive now, not half a period after the start. */
	if (keepalive)
		sd_notify(0, "WATCHDOG=1");
}

void notify_stopping(void)
{
	sd_notify(0, "STOPPING=1\nSTATUS=stopping: finishing in-flight requests");
}

void notify_free(void)
{
	if (keepalive)
		event_free(keepalive);
	keepalive = NULL;
}
