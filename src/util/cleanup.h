/* cleanup: scope-bound release of memory, fds and handles (GCC/Clang cleanup attribute).
 *
 * Ownership is handed over by setting the variable to NULL / -1 (see TAKE_PTR, TAKE_FD). */
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

/* A pipe's or a socketpair's two ends: `int p[2]`, each -1 or open. */
static inline void cleanup_close_pairp(int (*p)[2])
{
	for (int i = 0; i < 2; i++)
		if ((*p)[i] >= 0)
			close((*p)[i]);
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

#define _cleanup_free_       __attribute__((cleanup(cleanup_freep)))
#define _cleanup_close_      __attribute__((cleanup(cleanup_closep)))
#define _cleanup_close_pair_ __attribute__((cleanup(cleanup_close_pairp)))
#define _cleanup_fclose_     __attribute__((cleanup(cleanup_fclosep)))
#define _cleanup_closedir_   __attribute__((cleanup(cleanup_closedirp)))

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

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* Aborts on allocation failure: OOM is not threaded through every path. */
void *xmalloc(size_t n);
void *xcalloc(size_t n, size_t m);
void *xrealloc(void *p, size_t n);
char *xstrdup(const char *s);
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
