/* stats: the order statistics every benchmark prints. */
#pragma once

#include <math.h>
#include <stddef.h>
#include <stdlib.h>

static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Nearest-rank percentile p (0-100) of n samples, which it sorts in place. */
static inline double bench_pct(double *v, size_t n, double p)
{
	qsort(v, n, sizeof(*v), bench_cmp_double);
	size_t k = (size_t)ceil(p / 100.0 * (double)n);
	return v[k ? (k > n ? n - 1 : k - 1) : 0];
}
