/* Process metrics of sandboxd itself, refreshed at each scrape from /proc/self. */
#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "metrics/metrics.h"
#include "metrics/process.h"
#include "util/cleanup.h"

static struct {
	struct metric *cpu, *rss, *vsz, *fds, *max_fds, *start;
	double start_time;
} process_mod;

static double boot_time(void)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/stat", "re");
	if (!f)
		return 0;
	char line[256];
	double bt = 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "btime %lf", &bt) == 1)
			break;
	return bt;
}

static void refresh_memory(void)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/self/statm", "re");
	unsigned long size, resident;
	if (f && fscanf(f, "%lu %lu", &size, &resident) == 2) {
		long page = sysconf(_SC_PAGESIZE);
		metrics_set(process_mod.vsz, (double)size * (double)page);
		metrics_set(process_mod.rss, (double)resident * (double)page);
	}
}

/* Counts the daemon's descriptors: the other refreshers have closed theirs by then. */
static void refresh_fds(void)
{
	_cleanup_closedir_ DIR *d = opendir("/proc/self/fd");
	if (!d)
		return;
	int n = -1; /* the directory's own fd */
	while (readdir(d))
		n++;
	metrics_set(process_mod.fds, (double)(n - 2)); /* "." and ".." */
}

static void refresh(void *arg)
{
	struct rusage ru;
	if (getrusage(RUSAGE_SELF, &ru) == 0)
		metrics_set(process_mod.cpu,
			    (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
				    (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6);
	refresh_memory();
	refresh_fds();
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		metrics_set(process_mod.max_fds, (double)rl.rlim_cur);
	metrics_set(process_mod.start, process_mod.start_time);
}

/* Field 22 of /proc/self/stat: start time in clock ticks since boot. */
static double start_time(void)
{
	_cleanup_fclose_ FILE *f = fopen("/proc/self/stat", "re");
	char buf[1024];
	if (!f || !fgets(buf, sizeof(buf), f))
		return 0;
	char *p = strrchr(buf, ')');
	unsigned long long ticks = 0;
	for (int field = 2; p && *p && field < 22; p++)
		if (*p == ' ')
			field++;
	if (!p || sscanf(p, "%llu", &ticks) != 1)
		return 0;
	return boot_time() + (double)ticks / (double)sysconf(_SC_CLK_TCK);
}

void metrics_process_init(void)
{
	process_mod.cpu =
		metrics_counter("process_cpu_seconds_total", "User and system CPU seconds", NULL);
	process_mod.rss =
		metrics_gauge("process_resident_memory_bytes", "Resident memory in bytes", NULL);
	process_mod.vsz =
		metrics_gauge("process_virtual_memory_bytes", "Virtual memory in bytes", NULL);
	process_mod.fds = metrics_gauge("process_open_fds", "Open file descriptors", NULL);
	process_mod.max_fds = metrics_gauge("process_max_fds", "File descriptor limit", NULL);
	process_mod.start =
		metrics_gauge("process_start_time_seconds",
			      "Start time of the process since the epoch in seconds", NULL);
	process_mod.start_time = start_time();
	metrics_on_scrape(refresh, NULL);
}
