#include "template/template.h"

#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/stat.h>

#include "util/cleanup.h"
#include "util/log.h"

struct template *template_ref(struct template *t)
{
	if (t)
		t->refs++;
	return t;
}

void template_unref(struct template *t)
{
	if (!t || --t->refs > 0)
		return;
	free(t->name);
	free(t->dir);
	free(t->rootfs_dir);
	free(t->rootfs_img);
	json_decref(t->manifest);
	free(t);
}

static bool valid_name(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n > 64)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
		      c == '.'))
			return false;
	}
	return s[0] != '.';
}

static unsigned json_uint(json_t *obj, const char *key)
{
	json_t *v = json_object_get(obj, key);
	if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1 << 20)
		return 0;
	return (unsigned)json_integer_value(v);
}

int template_load(const char *dir, struct template **ret, struct err *err)
{
	_cleanup_free_ char *path = xasprintf("%s/template.json", dir);
	json_error_t jerr;
	json_auto_t *m = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	if (!m)
		return err_set(err, EINVAL, "%s: %s", path, jerr.text);
	if (!json_is_object(m))
		return err_set(err, EINVAL, "%s: not a JSON object", path);
	const char *name = json_string_value(json_object_get(m, "name"));
	const char *base = strrchr(dir, '/') ? strrchr(dir, '/') + 1 : dir;
	if (!name || !valid_name(name) || strcmp(name, base) != 0)
		return err_set(err, EINVAL, "%s: \"name\" must be the directory's name (`%s`)",
			       path, base);
	struct template *t = xcalloc(1, sizeof(*t));
	t->refs = 1;
	t->name = xstrdup(name);
	t->dir = xstrdup(dir);
	json_t *res = json_object_get(m, "resources");
	t->mem_mib = json_uint(res, "memSizeMib");
	t->vcpus = json_uint(res, "vcpuCount");
	json_t *disk = json_object_get(res, "diskBytes");
	if (json_is_integer(disk) && json_integer_value(disk) > 0)
		t->disk_bytes = (uint64_t)json_integer_value(disk);
	t->manifest = TAKE_PTR(m);

	struct stat st;
	_cleanup_free_ char *rd = xasprintf("%s/rootfs", dir);
	_cleanup_free_ char *ri = xasprintf("%s/rootfs.ext4", dir);
	if (stat(rd, &st) == 0 && S_ISDIR(st.st_mode))
		t->rootfs_dir = TAKE_PTR(rd);
	if (stat(ri, &st) == 0 && S_ISREG(st.st_mode))
		t->rootfs_img = TAKE_PTR(ri);
	if (!t->rootfs_dir && !t->rootfs_img) {
		template_unref(t);
		return err_set(err, ENOENT, "%s: neither rootfs/ nor rootfs.ext4 is present", dir);
	}
	*ret = t;
	return 0;
}

void template_registry_clear(struct template_registry *reg)
{
	for (size_t i = 0; i < reg->n; i++)
		template_unref(reg->items[i]);
	free(reg->items);
	reg->items = NULL;
	reg->n = 0;
}

static int cmp_names(const void *a, const void *b)
{
	const struct template *x = *(struct template *const *)a;
	const struct template *y = *(struct template *const *)b;
	return strcmp(x->name, y->name);
}

int template_registry_load(struct template_registry *reg, const char *templates_dir,
			   struct err *err)
{
	struct template_registry fresh = { 0 };
	_cleanup_closedir_ DIR *d = opendir(templates_dir);
	if (!d) {
		if (errno != ENOENT)
			return err_sys(err, errno, "cannot read `%s`", templates_dir);
		log_warn("template", "no templates directory at %s", templates_dir);
	}
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		_cleanup_free_ char *dir = xasprintf("%s/%s", templates_dir, de->d_name);
		struct stat st;
		if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
			continue;
		struct template *t;
		struct err e;
		if (template_load(dir, &t, &e) < 0) {
			log_warn("template", "skipping template `%s`: %s", de->d_name, e.msg);
			continue;
		}
		fresh.items = xrealloc(fresh.items, (fresh.n + 1) * sizeof(*fresh.items));
		fresh.items[fresh.n++] = t;
	}
	if (fresh.n)
		qsort(fresh.items, fresh.n, sizeof(*fresh.items), cmp_names);
	template_registry_clear(reg);
	*reg = fresh;
	return 0;
}

struct template *template_find(const struct template_registry *reg, const char *name)
{
	for (size_t i = 0; i < reg->n; i++)
		if (strcmp(reg->items[i]->name, name) == 0)
			return reg->items[i];
	return NULL;
}

char *template_names(const struct template_registry *reg)
{
	size_t len = 1;
	for (size_t i = 0; i < reg->n; i++)
		len += strlen(reg->items[i]->name) + 2;
	char *s = xcalloc(1, len);
	for (size_t i = 0; i < reg->n; i++) {
		if (i)
			strcat(s, ", ");
		strcat(s, reg->items[i]->name);
	}
	return s;
}

json_t *template_json(const struct template *t)
{
	json_t *j = json_deep_copy(t->manifest);
	json_object_set_new(j, "name", json_string(t->name));
	return j;
}
