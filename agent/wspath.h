/* wspath: every path a request names is resolved inside the workspace, symlinks included.
 *
 * A request path is first normalized lexically ("./a//b/../c" -> "a/c"; an absolute path must
 * start with the workspace path and is made relative; a ".." that climbs above the root is an
 * escape). The result is then opened relative to an O_PATH descriptor of the workspace with
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS), so a symlink anywhere on the way that
 * leads outside (absolute targets always do) is refused by the kernel; where openat2 is
 * missing, a component-by-component walk with O_NOFOLLOW does the same in user space. */
#pragma once

#include <stdbool.h>
#include <sys/types.h>

#include "util/err.h"

/* errnum for "the path leads outside the workspace"; reported with the code "ESCAPE". */
#define WS_ESCAPE 10001

/* The command user's home: where the sandbox mounts its workspace a second time (templates
 * built with that mount point have it), and the workspace's other name. */
#define WS_HOME "/home/user"

struct workspace {
	char *path;  /* absolute, no trailing slash ("/" stays "/") */
	char *alias; /* WS_HOME when it is the workspace's directory too, else NULL */
	int fd;      /* O_PATH | O_DIRECTORY, opened through the alias when there is one, so that
		      * a command started there sees its working directory by that name */
	/* The sandbox's root rather than a workspace (ws_init_root): paths resolve as the
	 * sandbox's processes resolve them, ".." stops at the root, absolute symlinks are
	 * followed from it; only the agent's own /proc entries are refused. */
	bool in_root;
};

struct wspath {
	char *rel;        /* normalized relative path, "" for the workspace root (owned) */
	const char *orig; /* as the request gave it, for messages (borrowed) */
};

/* Opens the workspace directory `path` (made absolute), and finds whether WS_HOME is the same
 * directory. */
int ws_init(struct workspace *ws, const char *path, struct err *err);
void ws_fini(struct workspace *ws);
/* Opens the sandbox's root "/" as a workspace of the whole tree (in_root). */
int ws_init_root(struct workspace *ws, struct err *err);

/* Normalizes `in` into *ret (free with wspath_fini); an absolute path is under the workspace
 * by its path or by its alias. Errors: EINVAL (empty), ENAMETOOLONG,
 * WS_ESCAPE. */
int wspath_init(const struct workspace *ws, const char *in, struct wspath *ret, struct err *err);
void wspath_fini(struct wspath *p);

/* Opens p inside the workspace; flags as for openat(2) (O_CLOEXEC is added). Symlinks are
 * followed while they stay inside; O_NOFOLLOW applies to the last component as usual.
 * Returns the fd or a negative errno with err set (WS_ESCAPE when it leads outside). */
int ws_open(const struct workspace *ws, const struct wspath *p, int flags, mode_t mode,
	    struct err *err);

/* Opens the directory that contains p's last component, creating missing directories (0755)
 * when mkparents. *ret_base points into p->rel. p must not be the root (EINVAL). */
int ws_open_parent(const struct workspace *ws, const struct wspath *p, bool mkparents,
		   const char **ret_base, struct err *err);

/* mkdirat(dfd, name, mode), as E2B's envd makes directories in the sandbox's whole tree
 * (in_root): as the sandbox's root, then given to the caller's file-system identity, so that
 * a path's missing directories are made wherever they are asked for and belong to the user
 * (the API's caller may run anything as root already). In a workspace, as the caller. Returns
 * 0 or -1 with errno set. */
int ws_mkdirat(const struct workspace *ws, int dfd, const char *name, mode_t mode);

/* Forces the user-space walk even where openat2 exists (tests). */
extern bool ws_force_walk;
