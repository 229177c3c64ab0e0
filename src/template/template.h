/* template: the registry of built templates found under <artifacts>/templates/.
 *
 * A template directory holds template.json (the manifest), rootfs.ext4 for VM drivers and
 * rootfs/ for the jail driver, plus per-driver subdirectories (snapshots). The registry is
 * owned by the loop thread; templates are reference-counted so that a reload (SIGHUP) never
 * frees one a sandbox is being created from. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "util/err.h"

struct template
{
	int refs;
	char *name;
	char *dir;           /* <artifacts>/templates/<name> */
	char *rootfs_dir;    /* <dir>/rootfs when present, else NULL */
	char *rootfs_img;    /* <dir>/rootfs.ext4 when present, else NULL */
	unsigned mem_mib;    /* resources.memSizeMib (0: the server default) */
	unsigned vcpus;      /* resources.vcpuCount (0: the server default) */
	uint64_t disk_bytes; /* resources.diskBytes: its sandboxes' disk (0: the server default) */
	json_t *manifest;    /* template.json as loaded (owned) */
};

struct template *template_ref(struct template *t);
void template_unref(struct template *t);

/* Loads one template directory; fails with a reason when it is not a valid template. */
int template_load(const char *dir, struct template **ret, struct err *err);

/* The templates loaded from <artifacts>/templates. */
struct template_registry {
	struct template **items;
	size_t n;
};

/* Loads every valid template under dir (invalid ones are skipped with a logged reason)
 * into a fresh registry, replacing reg's contents (old templates are unreferenced). */
int template_registry_load(struct template_registry *reg, const char *templates_dir,
			   struct err *err);
void template_registry_clear(struct template_registry *reg);
struct template *template_find(const struct template_registry *reg, const char *name);
/* Comma-separated names, for error messages (caller frees). */
char *template_names(const struct template_registry *reg);
/* The manifest as the API shows it. */
json_t *template_json(const struct template *t);
