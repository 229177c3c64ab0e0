/* cleanup: scope-bound release of memory, fds and handles (GCC/Clang cleanup attribute).
 *
 * Ownership is handed over by setting the variable to NULL / -1 / zero (see TAKE_PTR,
 * TAKE_FD, TAKE_STRUCT). jansson's json_auto_t does the same for a json_t *; modules keep the
 * helpers of their own handles beside them (store.h: SQLite statements; net/nl.h: netlink
 * sockets). */
#pragma once

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <dirent.h>

static inline void cleanup_freep(void *p)
{
	free(*(void **)p);
}

static inline void cleanup_closep(int *fd)
{
	if (*fd >= 0)
		close(*fd);
}

/* A pipe or socket pair: each end that is still open (>= 0). */
static inline void cleanup_close_pairp(int (*fds)[2])
{
	cleanup_closep(&(*fds)[0]);
	cleanup_closep(&(*fds)[1]);
}

static inline void cleanup_fclosep(FILE **f)
{
	if (*f)
		fclose(*f);
}

static inline void cleanup_closedirp(DIR **d)
{
	if (*d)
		closedir(*d);
}

#define _cleanup_free_     __attribute__((cleanup(cleanup_freep)))
#define _cleanup_close_    __attribute__((cleanup(cleanup_closep)))
#define _cleanup_fclose_   __attribute__((cleanup(cleanup_fclosep)))
#define _cleanup_closedir_ __attribute__((cleanup(cleanup_closedirp)))
/* `int p[2] = { -1, -1 }`, both ends closed at the end of the scope. */
#define _cleanup_close_pair_ __attribute__((cleanup(cleanup_close_pairp)))
/* Any other handle: fn receives a pointer to the variable (`void fn(T *)` for a `T v`). */
#define _cleanup_(fn) __attribute__((cleanup(fn)))

#define TAKE_PTR(p)                      \
	({                               \
		__typeof__(p) _tp = (p); \
		(p) = NULL;              \
		_tp;                     \
	})

#define TAKE_FD(fd)             \
	({                      \
		int _tf = (fd); \
		(fd) = -1;      \
		_tf;            \
	})

/* A struct that owns what it points to, handed over whole: the variable is left zeroed. */
#define TAKE_STRUCT(s)                      \
	({                                  \
		__typeof__(s) _ts = (s);    \
		(s) = (__typeof__(s)){ 0 }; \
		_ts;                        \
	})

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Aborts on allocation failure: OOM is not threaded through every path. */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t m);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
