#include "driver/driver.h"

#include <errno.h>
#include <string.h>

#include "driver/cgroup.h"
#include "driver/room.h"
#include "util/log.h"

/* The drivers in the order `auto` tries them. */
static const struct driver *const drivers[] = {
	&driver_firecracker,
	&driver_qemu,
	&driver_jail,
};

const struct driver *driver_find(const char *name)
{
	for (size_t i = 0; i < sizeof(drivers) / sizeof(drivers[0]); i++)
		if (drivers[i] && strcmp(drivers[i]->name, name) == 0)
			return drivers[i];
	return NULL;
}

static void append_reason(char *buf, size_t cap, const char *driver, const char *why)
{
	size_t len = strlen(buf);
	/* Cut at the end when long: the first reasons matter most. */
	if (len < cap &&
	    snprintf(buf + len, cap - len, "%s%s: %s", len ? "; " : "", driver, why) < 0)
		buf[len] = '\0';
}

int driver_select(const struct config *cfg, const struct driver **ret, struct err *err)
{
	/* Every driver, and stale clean-up, place sandboxes where the one manager says. */
	const char *cg = cfg->cgroup ? cfg->cgroup : "auto";
	cgroup_configure(strcmp(cg, "delegated") == 0 ? CGROUP_DELEGATION_ON
			 : strcmp(cg, "root") == 0    ? CGROUP_DELEGATION_OFF
						      : CGROUP_DELEGATION_AUTO);
	/* And every disk image claims its room by the same rule. */
	room_configure(cfg->disk_overcommit_ratio, cfg->disk_reserve_bytes);
	if (strcmp(cfg->driver, "auto") != 0) {
		const struct driver *d = driver_find(cfg->driver);
		if (!d)
			return err_set(err, EINVAL, "unknown driver `%s`", cfg->driver);
		int r = d->probe(cfg, err);
		if (r < 0)
			return err_wrap(err, "driver %s cannot run here", d->name);
		r = d->init(cfg, err);
		if (r < 0)
			return err_wrap(err, "driver %s", d->name);
		*ret = d;
		return 0;
	}
	char reasons[ERR_MSG_MAX - 64] = "";
	for (size_t i = 0; i < sizeof(drivers) / sizeof(drivers[0]); i++) {
		const struct driver *d = drivers[i];
		struct err why;
		if (d->probe(cfg, &why) < 0) {
			log_info("driver", "driver %s not usable: %s", d->name, why.msg);
			append_reason(reasons, sizeof(reasons), d->name, why.msg);
			continue;
		}
		if (d->init(cfg, &why) < 0) {
			log_warn("driver", "driver %s failed to initialise: %s", d->name, why.msg);
			append_reason(reasons, sizeof(reasons), d->name, why.msg);
			continue;
		}
		*ret = d;
		return 0;
	}
	/* Each driver's reason: the one that should have run says what it misses (its agent
	 * binary, /dev/kvm...). */
	return err_set(err, ENODEV, "no sandbox driver can run on this host (%s)", reasons);
}

void driver_default_limits(const struct config *cfg, const struct template *t,
			   struct sandbox_limits *ret)
{
	/* The template's manifest (memSizeMib, vcpuCount) before the server's defaults; the
	 * caller checks the result against the caps (SANDBOX_MAX_MEMORY_BYTES, _VCPUS). */
	*ret = (struct sandbox_limits){
		.memory_bytes = t->mem_mib ? (uint64_t)t->mem_mib << 20 : cfg->memory_limit,
		.cpu_quota_us = cfg->cpu_quota_us,
		.cpu_period_us = cfg->cpu_period_us,
		.pids_max = cfg->pids_max,
		.workspace_bytes = cfg->disk_limit,
		.nofile = cfg->nofile,
		.vcpus = t->vcpus ? t->vcpus : cfg->vcpus,
		.mem_mib = t->mem_mib ? t->mem_mib : cfg->mem_mib,
	};
}
