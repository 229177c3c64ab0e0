/* vmbench: a VM driver's cold boot to first execute against its snapshot restore to first
 * execute, in one run, through the driver interface (src/driver/driver.h), so that any
 * driver that restores snapshots (qemu, firecracker) is measured the same way.
 *
 * One sample: create() a sandbox, send the agent what the session layer sends first
 * (`resume`), then `exec true`, and wait for the exec's RESULT; then destroy() it (not
 * timed). Restore samples use the sandbox resources the template's snapshot was prepared
 * for. Cold samples ask for 1 MiB more workspace, which no snapshot was made for: a driver
 * must boot such a sandbox from scratch rather than restore a machine of another shape.
 * The two kinds alternate, so that load on the host weighs on both alike.
 *
 * With --confinement (qemu), each run also takes a restore sample with QEMU unconfined
 * (qemu_bench_unconfined: as root, in the host's namespaces, without -sandbox), and the
 * ratio confined / unconfined is printed. With --clones N, N restored sandboxes are then
 * kept alive at once and their VMMs' Rss and Pss summed (confined, and unconfined too with
 * --confinement), which shows whether clones still share the template's pages.
 *
 * usage: vmbench [--driver NAME] [--template NAME] [--runs N] [--json FILE] [--confinement]
 *                [--clones N]
 * Settings come from the environment as for sandboxd (FIRECRACKER_ARTIFACTS_DIR, VM_*,
 * SANDBOX_QEMU_*); SANDBOX_RUN_DIR defaults to a fresh temporary directory. */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "../stats.h"
#include "config.h"
#include "driver/driver.h"
#include "driver/qemu/qemu.h"
#include "guest/proto.h"
#include "template/template.h"
#include "util/cleanup.h"
#include "util/fs.h"
#include "util/log.h"

#define REPLY_TIMEOUT_MS 120000

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static int send_request(int fd, uint32_t ch, const char *json)
{
	size_t n = strlen(json);
	uint8_t hdr[GUEST_HDR_LEN];
	guest_frame_header(hdr, GUEST_REQUEST, ch, (uint32_t)n);
	if (send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL) != (ssize_t)sizeof(hdr) ||
	    send(fd, json, n, MSG_NOSIGNAL) != (ssize_t)n)
		return -errno;
	return 0;
}

/* Waits for the terminal frame of channel `ch`; 0 for RESULT. */
static int wait_result(int fd, uint32_t ch, struct err *err)
{
	struct guest_decoder dec;
	guest_decoder_init(&dec, GUEST_MAX_PAYLOAD);
	static uint8_t buf[GUEST_HDR_LEN + GUEST_MAX_PAYLOAD];
	size_t len = 0;
	double deadline = now_ms() + REPLY_TIMEOUT_MS;
	for (;;) {
		struct guest_frame f;
		size_t used = 0;
		enum guest_decode_status st = guest_decode(&dec, buf, len, &f, &used);
		if (st == GUEST_DECODE_FRAME && f.channel == ch &&
		    (f.type == GUEST_RESULT || f.type == GUEST_ERROR)) {
			if (f.type == GUEST_ERROR)
				return err_set(err, EPROTO,
					       "the agent answered with an error: %.*s",
					       (int)(f.len > 200 ? 200 : f.len), f.payload);
			return 0;
		}
		if (used) {
			memmove(buf, buf + used, len - used);
			len -= used;
			continue;
		}
		int left = (int)(deadline - now_ms());
		if (left <= 0)
			return err_set(err, ETIMEDOUT, "no answer from the agent");
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (poll(&p, 1, left) <= 0)
			continue;
		ssize_t k = recv(fd, buf + len, sizeof(buf) - len, 0);
		if (k <= 0)
			return err_set(err, ECONNRESET, "the agent channel closed");
		len += (size_t)k;
	}
}

/* One sample, in milliseconds from the call to create(): create() returned, the agent's
 * first answer (resume), the first exec's result. */
struct times {
	double created;
	double first_reply;
	double first_exec;
};

/* One sample; with keep, the sandbox is not destroyed but returned there (on success). */
static int sample_keep(const struct driver *d, const struct config *cfg, struct sandbox_spec *spec,
		       struct times *ms, struct sandbox **keep, struct err *err)
{
	double t0 = now_ms();
	struct sandbox *sb = NULL;
	int r = d->create(cfg, spec, &sb, err);
	if (r < 0)
		return r;
	ms->created = now_ms() - t0;
	struct timespec wall;
	clock_gettime(CLOCK_REALTIME, &wall);
	char resume[256];
	snprintf(resume, sizeof(resume),
		 "{\"op\":\"resume\",\"time\":{\"sec\":%lld,\"nsec\":%ld},"
		 "\"entropy\":\"00112233445566778899aabbccddeeff\",\"sessionId\":\"bench\","
		 "\"hostname\":\"sandbox\"}",
		 (long long)wall.tv_sec, wall.tv_nsec);
	if ((r = send_request(sb->agent_fd, 1, resume)) < 0) {
		err_sys(err, -r, "writing to the agent");
		goto out;
	}
	if ((r = wait_result(sb->agent_fd, 1, err)) < 0)
		goto out;
	ms->first_reply = now_ms() - t0;
	if ((r = send_request(sb->agent_fd, 2, "{\"op\":\"exec\",\"argv\":[\"true\"]}")) < 0) {
		err_sys(err, -r, "writing to the agent");
		goto out;
	}
	if ((r = wait_result(sb->agent_fd, 2, err)) < 0)
		goto out;
	ms->first_exec = now_ms() - t0;
	if (keep) {
		*keep = sb;
		return 0;
	}
out:
	d->destroy(sb);
	return r;
}

static int sample(const struct driver *d, const struct config *cfg, struct sandbox_spec *spec,
		  struct times *ms, struct err *err)
{
	return sample_keep(d, cfg, spec, ms, NULL, err);
}

/* Rss and Pss of process pid, in kB (smaps_rollup); false when it cannot be read. */
static bool memory_of(pid_t pid, long *rss, long *pss)
{
	char path[64], line[256];
	snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int)pid);
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	*rss = *pss = -1;
	while (f && fgets(line, sizeof(line), f)) {
		sscanf(line, "Rss: %ld kB", rss);
		sscanf(line, "Pss: %ld kB", pss);
	}
	return *rss >= 0 && *pss >= 0;
}

/* n restored sandboxes alive at once, each past its first execute: the sum of their VMMs'
 * Rss and Pss (Pss counts a page shared by k of them as 1/k in each). */
static int clones(const struct driver *d, const struct config *cfg, struct sandbox_spec spec, int n,
		  const char *label, struct err *err)
{
	struct sandbox **sbs = xcalloc((size_t)n, sizeof(*sbs));
	int r = 0;
	long rss = 0, pss = 0;
	for (int i = 0; i < n && r == 0; i++) {
		char id[48];
		snprintf(id, sizeof(id), "bench-%d-k%d", (int)getpid(), i);
		spec.id = id;
		struct times t;
		r = sample_keep(d, cfg, &spec, &t, &sbs[i], err);
	}
	for (int i = 0; i < n && r == 0; i++) {
		long a, b;
		if (!memory_of(sbs[i]->pid, &a, &b)) {
			r = err_set(err, ESRCH, "no smaps_rollup for the VMM of clone %d", i);
			break;
		}
		rss += a;
		pss += b;
	}
	if (r == 0)
		printf("%d clones alive%s: VMMs' Rss %.1f MiB, Pss %.1f MiB (%.1f MiB each)\n", n,
		       label, rss / 1024.0, pss / 1024.0, pss / 1024.0 / n);
	for (int i = 0; i < n; i++)
		if (sbs[i])
			d->destroy(sbs[i]);
	free(sbs);
	return r;
}

/* A restored sandbox (bench-<pid>-<tag><i>) past its first execute, saved (the driver's
 * fork_save for a fork, as a fork's save, not synced; else its hibernate; timed: *save_ms)
 * into *keep. A fork's sandbox runs on: *ret_sb (a hibernated one is gone: ret_sb NULL). */
static int restored_and_saved(const struct driver *d, const struct config *cfg,
			      struct sandbox_spec spec, const char *tag, int i, bool fork,
			      json_t **keep, double *save_ms, struct sandbox **ret_sb,
			      struct err *err)
{
	char id[48];
	snprintf(id, sizeof(id), "bench-%d-%s%d", (int)getpid(), tag, i);
	spec.id = id;
	struct sandbox *sb = NULL;
	struct times first;
	int r = sample_keep(d, cfg, &spec, &first, &sb, err);
	if (r < 0)
		return r;
	double t0 = now_ms();
	if ((r = fork ? d->fork_save(sb, false, keep, err) : d->hibernate(sb, keep, err)) < 0) {
		d->destroy(sb);
		return r;
	}
	*save_ms = now_ms() - t0;
	if (ret_sb)
		*ret_sb = sb;
	return 0;
}

/* A hibernation sample: a restored sandbox past its first execute is saved whole
 * (hibernate(), timed: *save_ms, its stream's size *bytes), then a sandbox is made from the
 * save and sampled as any other (create() to its first execute: *ms). */
static int sample_hibernate(const struct driver *d, const struct config *cfg,
			    struct sandbox_spec spec, int i, double *save_ms, double *bytes,
			    struct times *ms, struct err *err)
{
	json_t *keep = NULL;
	int r = restored_and_saved(d, cfg, spec, "h", i, false, &keep, save_ms, NULL, err);
	if (r < 0)
		return r;
	*bytes = (double)json_integer_value(json_object_get(keep, "stateBytes"));
	char id2[48];
	snprintf(id2, sizeof(id2), "bench-%d-w%d", (int)getpid(), i);
	spec.id = id2;
	spec.hibernated = keep;
	if ((r = sample(d, cfg, &spec, ms, err)) < 0)
		d->hibernated_discard(keep);
	json_decref(keep);
	return r;
}

/* A fork sample: a restored sandbox past its first execute is forked into n (fork_save,
 * timed: *save_ms), then n sandboxes are made from the save one after the other, each to its
 * first execute; *all_ms is from the fork's start to the last one's first execute. */
static int sample_fork(const struct driver *d, const struct config *cfg, struct sandbox_spec spec,
		       int i, int n, double *save_ms, double *all_ms, struct err *err)
{
	json_t *keep = NULL;
	struct sandbox *sb = NULL;
	int r = restored_and_saved(d, cfg, spec, "p", i, true, &keep, save_ms, &sb, err);
	if (r < 0)
		return r;
	double t0 = now_ms() - *save_ms;
	struct sandbox **forks = xcalloc((size_t)n, sizeof(*forks));
	spec.hibernated = keep;
	for (int k = 0; k < n && r == 0; k++) {
		char fid[48];
		snprintf(fid, sizeof(fid), "bench-%d-p%d-%d", (int)getpid(), i, k);
		spec.id = fid;
		struct times t;
		r = sample_keep(d, cfg, &spec, &t, &forks[k], err);
	}
	*all_ms = now_ms() - t0;
	for (int k = 0; k < n; k++)
		if (forks[k])
			d->destroy(forks[k]);
	free(forks);
	d->hibernated_discard(keep);
	json_decref(keep);
	d->destroy(sb);
	return r;
}

static void print_row(const char *label, double *v, int runs, double *p50, double *p95)
{
	*p50 = bench_pct(v, (size_t)runs, 50);
	*p95 = bench_pct(v, (size_t)runs, 95);
	printf("%-40s %9.1f %9.1f %9.1f %9.1f\n", label, *p50, *p95, v[0], v[runs - 1]);
}

/* Prepares the template, takes the samples and prints the table; 0 on success. */
static int bench(struct config *cfg, const char *tname, int runs, const char *json_path,
		 bool confinement, int n_clones, bool hibernate, int n_forks)
{
	struct err e = { 0 };
	const struct driver *d = NULL;
	if (driver_select(cfg, &d, &e) < 0) {
		fprintf(stderr, "vmbench: %s\n", e.msg);
		return 1;
	}
	_cleanup_free_ char *tdir = xasprintf("%s/templates/%s", cfg->artifacts_dir, tname);
	struct template *t = NULL;
	if (template_load(tdir, &t, &e) < 0) {
		fprintf(stderr, "vmbench: template %s: %s\n", tname, e.msg);
		return 1;
	}
	int status = 1;
	double prep_ms = 0;
	if (d->prepare) {
		double t0 = now_ms();
		if (d->prepare(cfg, t, &e) < 0) {
			fprintf(stderr, "vmbench: preparing %s: %s\n", tname, e.msg);
			template_unref(t);
			return 1;
		}
		prep_ms = now_ms() - t0;
	}

	/* What the session layer gives a sandbox of this template. */
	struct sandbox_spec spec = { .tmpl = t };
	driver_default_limits(cfg, t, &spec.limits);
	struct sandbox_spec cold = spec;
	cold.limits.workspace_bytes += 1u << 20;

	struct times *cold_t = xcalloc((size_t)runs, sizeof(*cold_t));
	struct times *warm_t = xcalloc((size_t)runs, sizeof(*warm_t));
	struct times *open_t = xcalloc((size_t)runs, sizeof(*open_t));
	struct times *hib_t = xcalloc((size_t)runs, sizeof(*hib_t));
	double *save_ms = xcalloc((size_t)runs, sizeof(double));
	double *save_bytes = xcalloc((size_t)runs, sizeof(double));
	double *fork_save = xcalloc((size_t)runs, sizeof(double));
	double *fork_all = xcalloc((size_t)runs, sizeof(double));
	if (n_forks && !d->fork_save) {
		fprintf(stderr, "vmbench: --fork is for a driver that forks\n");
		n_forks = 0;
	}
	if (hibernate && (!d->hibernate || !d->hibernate_keeps_processes)) {
		fprintf(stderr, "vmbench: --hibernate is for a driver that saves VMs whole\n");
		hibernate = false;
	}
	if (confinement && strcmp(d->name, "qemu") != 0) {
		fprintf(stderr, "vmbench: --confinement is for the qemu driver\n");
		confinement = false;
	}
	fprintf(stderr,
		"vmbench: driver %s, template %s, %d runs each (snapshot ready in %.0f ms)\n",
		d->name, tname, runs, prep_ms);
	for (int i = 0; i < runs; i++) {
		char id[40];
		snprintf(id, sizeof(id), "bench-%d-c%d", (int)getpid(), i);
		cold.id = id;
		if (sample(d, cfg, &cold, &cold_t[i], &e) < 0) {
			fprintf(stderr, "vmbench: cold boot %d: %s\n", i, e.msg);
			goto out;
		}
		/* As the session layer does before every creation (not timed): if the snapshot
		 * went stale meanwhile (a template rebuild), it is rebuilt rather than every
		 * later sample booting cold. */
		if (d->prepare && d->prepare(cfg, t, &e) < 0) {
			fprintf(stderr, "vmbench: preparing %s: %s\n", tname, e.msg);
			goto out;
		}
		snprintf(id, sizeof(id), "bench-%d-r%d", (int)getpid(), i);
		spec.id = id;
		if (sample(d, cfg, &spec, &warm_t[i], &e) < 0) {
			fprintf(stderr, "vmbench: restore %d: %s\n", i, e.msg);
			goto out;
		}
		if (confinement) {
			snprintf(id, sizeof(id), "bench-%d-u%d", (int)getpid(), i);
			spec.id = id;
			qemu_bench_unconfined = true;
			int r = sample(d, cfg, &spec, &open_t[i], &e);
			qemu_bench_unconfined = false;
			if (r < 0) {
				fprintf(stderr, "vmbench: unconfined restore %d: %s\n", i, e.msg);
				goto out;
			}
		}
		if (hibernate && sample_hibernate(d, cfg, spec, i, &save_ms[i], &save_bytes[i],
						  &hib_t[i], &e) < 0) {
			fprintf(stderr, "vmbench: hibernation %d: %s\n", i, e.msg);
			goto out;
		}
		if (n_forks &&
		    sample_fork(d, cfg, spec, i, n_forks, &fork_save[i], &fork_all[i], &e) < 0) {
			fprintf(stderr, "vmbench: fork %d: %s\n", i, e.msg);
			goto out;
		}
		fprintf(stderr, "  run %2d: cold %8.1f ms   restore %8.1f ms", i + 1,
			cold_t[i].first_exec, warm_t[i].first_exec);
		if (n_forks)
			fprintf(stderr, "   fork of %d: save %8.1f ms, all executed %8.1f ms",
				n_forks, fork_save[i], fork_all[i]);
		if (confinement)
			fprintf(stderr, "   unconfined %8.1f ms", open_t[i].first_exec);
		if (hibernate)
			fprintf(stderr, "   save %8.1f ms, resume %8.1f ms", save_ms[i],
				hib_t[i].first_exec);
		fprintf(stderr, "\n");
	}

	printf("VM start to first execute: driver %s, template %s, %d runs each, milliseconds\n",
	       d->name, tname, runs);
	printf("%-40s %9s %9s %9s %9s\n", "", "p50", "p95", "min", "max");
	double p50[3][3], p95[3][3];
	static const char *const what[3] = { "create() returned", "agent's first answer",
					     "first execute" };
	static const char *const kind[3] = { "cold", "restore", "restore, unconfined" };
	for (int k = 0; k < (confinement ? 3 : 2); k++) {
		const struct times *ts = k == 0 ? cold_t : k == 1 ? warm_t : open_t;
		for (int phase = 0; phase < 3; phase++) {
			double *v = xcalloc((size_t)runs, sizeof(double));
			for (int i = 0; i < runs; i++)
				v[i] = phase == 0   ? ts[i].created
				       : phase == 1 ? ts[i].first_reply
						    : ts[i].first_exec;
			p50[k][phase] = bench_pct(v, (size_t)runs, 50);
			p95[k][phase] = bench_pct(v, (size_t)runs, 95);
			char label[64];
			snprintf(label, sizeof(label), "%s: %s", kind[k], what[phase]);
			printf("%-40s %9.1f %9.1f %9.1f %9.1f\n", label, p50[k][phase],
			       p95[k][phase], v[0], v[runs - 1]);
			free(v);
		}
	}
	double c50 = p50[0][2], c95 = p95[0][2], r50 = p50[1][2], r95 = p95[1][2];
	double s50 = 0, s95 = 0, h50 = 0, h95 = 0, b50 = 0, b95 = 0;
	double f50 = 0, f95 = 0, a50 = 0, a95 = 0;
	if (n_forks) {
		char label[64];
		print_row("fork: save (fork_save())", fork_save, runs, &f50, &f95);
		snprintf(label, sizeof(label), "fork: %d forks to their first execute", n_forks);
		print_row(label, fork_all, runs, &a50, &a95);
		printf("fork of %d to every first execute / %d restores from the template: p50 "
		       "%.3f; per fork %.1f ms\n",
		       n_forks, n_forks, a50 / (r50 * n_forks), a50 / n_forks);
	}
	if (hibernate) {
		double *v = xcalloc((size_t)runs, sizeof(double));
		for (int i = 0; i < runs; i++)
			v[i] = hib_t[i].first_exec;
		print_row("hibernate: save (hibernate())", save_ms, runs, &s50, &s95);
		print_row("hibernate: resume to first execute", v, runs, &h50, &h95);
		for (int i = 0; i < runs; i++)
			save_bytes[i] /= 1 << 20;
		print_row("hibernate: saved state, MiB", save_bytes, runs, &b50, &b95);
		free(v);
		printf("first execute, resume from a save / restore from the template: p50 %.3f; "
		       "/ cold: p50 %.3f; saved state p50 %.1f MiB\n",
		       h50 / r50, h50 / c50, b50);
	}
	printf("first execute, restore / cold: p50 %.3f (1/%.1f), p95 %.3f (1/%.1f); "
	       "target <= 0.25: %s\n",
	       r50 / c50, c50 / r50, r95 / c95, c95 / r95, r50 <= c50 / 4 ? "met" : "NOT met");
	if (confinement)
		printf("first execute, confined / unconfined restore: p50 %.3f, p95 %.3f; "
		       "create() returned: p50 %.3f\n",
		       r50 / p50[2][2], r95 / p95[2][2], p50[1][0] / p50[2][0]);
	if (n_clones > 0) {
		if (d->prepare && d->prepare(cfg, t, &e) < 0) {
			fprintf(stderr, "vmbench: preparing %s: %s\n", tname, e.msg);
			goto out;
		}
		if (clones(d, cfg, spec, n_clones, "", &e) < 0) {
			fprintf(stderr, "vmbench: clones: %s\n", e.msg);
			goto out;
		}
		if (confinement) {
			qemu_bench_unconfined = true;
			int r = clones(d, cfg, spec, n_clones, ", unconfined", &e);
			qemu_bench_unconfined = false;
			if (r < 0) {
				fprintf(stderr, "vmbench: clones: %s\n", e.msg);
				goto out;
			}
		}
	}
	if (json_path) {
		json_t *j = json_pack("{s:s, s:s, s:i, s:f, s:{s:f, s:f}, s:{s:f, s:f}, s:f}",
				      "driver", d->name, "template", tname, "runs", runs,
				      "prepareMs", prep_ms, "coldMs", "p50", c50, "p95", c95,
				      "restoreMs", "p50", r50, "p95", r95, "ratioP50", r50 / c50);
		if (n_forks)
			json_object_set_new(j, "fork",
					    json_pack("{s:i, s:{s:f, s:f}, s:{s:f, s:f}}", "forks",
						      n_forks, "saveMs", "p50", f50, "p95", f95,
						      "allExecutedMs", "p50", a50, "p95", a95));
		if (hibernate)
			json_object_set_new(j, "hibernate",
					    json_pack("{s:{s:f, s:f}, s:{s:f, s:f}, s:f}", "saveMs",
						      "p50", s50, "p95", s95, "resumeMs", "p50",
						      h50, "p95", h95, "stateMibP50", b50));
		if (confinement)
			json_object_set_new(
				j, "unconfinedRestoreMs",
				json_pack("{s:f, s:f}", "p50", p50[2][2], "p95", p95[2][2]));
		if (json_dump_file(j, json_path, JSON_INDENT(2)) < 0)
			fprintf(stderr, "vmbench: cannot write %s\n", json_path);
		json_decref(j);
	}
	status = 0;
out:
	free(cold_t);
	free(warm_t);
	free(open_t);
	free(hib_t);
	free(save_ms);
	free(save_bytes);
	free(fork_save);
	free(fork_all);
	template_unref(t);
	return status;
}

int main(int argc, char **argv)
{
	const char *driver = "qemu", *tname = "base", *json_path = NULL;
	int runs = 20, n_clones = 0, n_forks = 0;
	bool confinement = false, hibernate = false;
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--driver") == 0 && i + 1 < argc)
			driver = argv[++i];
		else if (strcmp(argv[i], "--template") == 0 && i + 1 < argc)
			tname = argv[++i];
		else if (strcmp(argv[i], "--runs") == 0 && i + 1 < argc)
			runs = atoi(argv[++i]);
		else if (strcmp(argv[i], "--json") == 0 && i + 1 < argc)
			json_path = argv[++i];
		else if (strcmp(argv[i], "--confinement") == 0)
			confinement = true;
		else if (strcmp(argv[i], "--hibernate") == 0)
			hibernate = true;
		else if (strcmp(argv[i], "--fork") == 0 && i + 1 < argc)
			n_forks = atoi(argv[++i]);
		else if (strcmp(argv[i], "--clones") == 0 && i + 1 < argc)
			n_clones = atoi(argv[++i]);
		else {
			fprintf(stderr,
				"usage: %s [--driver NAME] [--template NAME] [--runs N] "
				"[--json FILE] [--confinement] [--clones N] [--hibernate] [--fork "
				"N]\n",
				argv[0]);
			return 2;
		}
	}
	if (n_forks < 0 || n_forks > 16) {
		fprintf(stderr, "vmbench: --fork must be between 0 and 16\n");
		return 2;
	}
	if (n_clones < 0 || n_clones > 64) {
		fprintf(stderr, "vmbench: --clones must be between 0 and 64\n");
		return 2;
	}
	if (runs < 1 || runs > 10000) {
		fprintf(stderr, "vmbench: --runs must be between 1 and 10000\n");
		return 2;
	}
	log_set_level(LOG_WARN);
	char tmp[] = "/tmp/vmbench-run-XXXXXX";
	bool own_run_dir = !getenv("SANDBOX_RUN_DIR");
	if (own_run_dir) {
		if (!mkdtemp(tmp)) {
			perror("vmbench: mkdtemp");
			return 1;
		}
		setenv("SANDBOX_RUN_DIR", tmp, 1);
	}
	/* Saves (--hibernate) go to a state directory of the run's own, unless one is set. */
	_cleanup_free_ char *state = NULL;
	if (own_run_dir && !getenv("SANDBOX_STATE_DIR")) {
		state = xasprintf("%s/state", tmp);
		setenv("SANDBOX_STATE_DIR", state, 1);
	}
	setenv("SANDBOX_DRIVER", driver, 1);

	struct config cfg;
	struct err e = { 0 };
	int status = 1;
	if (config_load(&cfg, &e) < 0) {
		fprintf(stderr, "vmbench: %s\n", e.msg);
	} else {
		/* Drivers log what they choose at info; the samples are the point here. */
		log_set_level(LOG_WARN);
		status = bench(&cfg, tname, runs, json_path, confinement, n_clones, hibernate,
			       n_forks);
	}
	config_free(&cfg);
	if (own_run_dir) {
		/* The drivers' directories in it are empty once every sandbox is destroyed. */
		_cleanup_free_ char *sub = xasprintf("%s/%s", tmp, driver);
		rmdir(sub);
		if (state)
			fs_rm_rf(state, NULL);
		rmdir(tmp);
	}
	return status;
}
