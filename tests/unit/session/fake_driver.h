/* A driver for the session tests. create() starts an agent on the far end of a socketpair and
 * hands back the near end: the real sandbox-agent (in a workspace directory of its own) or,
 * when the test gives a script, the misbehaving fake agent of tests/security. It can also
 * fail, or hold every create() until the test lets it go on, so that a test can look at a
 * session while it is being created. destroy() ends the agent and waits for it; it too can
 * be held.
 *
 * create() and destroy() run on the session layer's workers; everything else is for the
 * loop thread (the test). The counters are read under the driver's lock. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "driver/driver.h"

/* What the next create() calls do. */
struct fake_plan {
	int fail_errnum;    /* create() fails with this errno; 0: it succeeds */
	const char *script; /* the fake agent with this script (copied); NULL: the real agent */
	bool hold;          /* create() waits until fake_driver_release() */
	bool hold_destroy;  /* destroy() waits until fake_driver_release() */
};

struct fake_counts {
	unsigned calls;         /* create() entered */
	unsigned held;          /* create() calls waiting for fake_driver_release() now */
	unsigned created;       /* sandboxes handed out */
	unsigned destroyed;     /* sandboxes destroyed */
	unsigned destroys_held; /* destroy() calls waiting for fake_driver_release() now */
};

extern const struct driver fake_driver;

/* The two agents' executables, and a directory for the workspaces. */
void fake_driver_setup(const char *agent, const char *fake_agent, const char *dir);
/* Replaces the plan (the default: succeed with the real agent, no hold). */
void fake_driver_plan(const struct fake_plan *plan);
/* Lets every held create() go on, and stops holding. */
void fake_driver_release(void);
void fake_driver_counts(struct fake_counts *ret);
/* The agent process of the sandbox created last. */
pid_t fake_driver_last_pid(void);
/* The limits the last create() was asked for. */
void fake_driver_last_limits(struct sandbox_limits *ret);
/* What oom_kills() reports, for every sandbox: one more kill. */
void fake_driver_count_oom_kill(void);
