/* stale: what every driver does with a sandbox a previous run of the daemon left behind
 * (driver.h, struct driver_stale). */
#include "driver/driver.h"

#include <string.h>

#include "driver/cgroup.h"
#include "driver/proc.h"
#include "util/fs.h"
#include "util/log.h"

/* How long a leftover process may take to die once killed. */
#define STALE_WAIT_MS 2000

void driver_cleanup_stale(const struct driver_stale *s, const char *id, json_t *record)
{
	if (!cgroup_id_valid(id)) {
		log_warn(s->driver, "not cleaning up invalid sandbox id `%s`", id ? id : "");
		return;
	}
	if (record && proc_kill_recorded(record, s->also, s->arg, STALE_WAIT_MS))
		log_info(s->driver, "sandbox %s: killed a leftover %s", id, s->what);
	struct err e;
	if (s->dir && fs_rm_rf(s->dir, &e) < 0)
		log_warn(s->driver, "sandbox %s: %s", id, e.msg);
	struct cgroup_root root;
	if (cgroup_root_detect(CGROUP_ROOT, &root, &e) < 0) {
		log_warn(s->driver, "sandbox %s: %s", id, e.msg);
		return;
	}
	struct cgroup *cg = NULL;
	if (cgroup_open(&root, id, &cg, &e) < 0 || cgroup_remove(cg, &e) < 0)
		log_warn(s->driver, "sandbox %s: %s", id, e.msg);
	/* A v2 cgroup the record names elsewhere: its daemon had another delegated cgroup (a
	 * transient scope of its own, which a restart does not get back). */
	json_t *dirs = json_object_get(record, "cgroups"), *dir;
	size_t i;
	json_array_foreach (dirs, i, dir) {
		const char *path = json_string_value(dir);
		if (root.version != CGROUP_V2 || !path || (cg && strcmp(path, cg->dir[0]) == 0))
			continue;
		struct cgroup *old = NULL;
		if (cgroup_open_path(&root, id, path, &old, &e) < 0 || cgroup_remove(old, &e) < 0)
			log_warn(s->driver, "sandbox %s: %s", id, e.msg);
		cgroup_free(old);
	}
	cgroup_free(cg);
	cgroup_root_free(&root);
}
