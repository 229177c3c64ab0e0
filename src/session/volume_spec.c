/* volume_spec: what a request says of volumes: their names, mount paths and the "volumes" of a
 * session's creation (volume.h). Pure functions of their input, shared with the fuzz target. */
#include "session/volume.h"

#include <errno.h>
#include <string.h>

#include "util/cleanup.h"

static bool name_char(char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '.' || c == '_' || c == '-';
}

bool volume_name_valid(const char *name)
{
	size_t n = name ? strlen(name) : 0;
	if (n == 0 || n > VOLUME_NAME_MAX || !name_char(name[0]) || name[0] == '.' ||
	    name[0] == '_' || name[0] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!name_char(name[i]))
			return false;
	return true;
}

/* The sandbox's own mounts, which a volume may not be at or below. */
static const char *const reserved[] = { "/proc", "/dev", "/sys", "/run" };
/* The command user's home: /workspace by a second name (a recursive bind, after the volumes). */
#define HOME "/home/user"

static bool below(const char *path, const char *dir)
{
	size_t n = strlen(dir);
	return strncmp(path, dir, n) == 0 && (path[n] == '\0' || path[n] == '/');
}

int volume_path_check(const char *path, struct err *err)
{
	size_t n = path ? strlen(path) : 0;
	if (n == 0 || path[0] != '/')
		return err_set(err, EINVAL, "a volume's \"path\" must be an absolute path");
	if (n > VOLUME_PATH_MAX)
		return err_set(err, EINVAL, "a volume's \"path\" has at most %d characters",
			       VOLUME_PATH_MAX);
	if (n == 1)
		return err_set(err, EINVAL, "a volume cannot be mounted on /");
	for (size_t i = 0; i < n; i++)
		if (path[i] != '/' && !name_char(path[i]))
			return err_set(err, EINVAL,
				       "a volume's \"path\" may contain only letters, digits and "
				       ". _ - /");
	if (path[n - 1] == '/' || strstr(path, "//"))
		return err_set(err, EINVAL, "a volume's \"path\" must be normalized (`%s`)", path);
	for (const char *c = path; c; c = strchr(c + 1, '/')) {
		const char *s = c + 1;
		size_t len = strcspn(s, "/");
		if ((len == 1 && s[0] == '.') || (len == 2 && s[0] == '.' && s[1] == '.'))
			return err_set(err, EINVAL,
				       "a volume's \"path\" must not contain . or .. (`%s`)", path);
	}
	for (size_t i = 0; i < ARRAY_SIZE(reserved); i++)
		if (below(path, reserved[i]))
			return err_set(err, EINVAL, "a volume cannot be mounted on or below %s",
				       reserved[i]);
	/* The home is mounted after the volumes: it would hide one on or below it, and one
	 * above it (/home) would hide the home's own mount point. */
	if (below(path, HOME) || below(HOME, path))
		return err_set(err, EINVAL,
			       "a volume cannot be mounted on, below or above %s, the workspace's "
			       "second name: mount it below /workspace, which %s shows",
			       HOME, HOME);
	return 0;
}

void volume_mounts_fini(struct volume_mounts *m)
{
	for (unsigned i = 0; i < m->n; i++) {
		free(m->m[i].name);
		free(m->m[i].path);
	}
	m->n = 0;
}

static int parse_one(const json_t *o, unsigned i, struct volume_mount_req *ret, struct err *err)
{
	if (!json_is_object(o))
		return err_set(err, EINVAL,
			       "\"volumes[%u]\" must be an object {\"name\", \"path\", "
			       "\"readOnly\"}",
			       i);
	const char *key;
	json_t *val;
	json_object_foreach ((json_t *)o, key, val) {
		if (strcmp(key, "name") != 0 && strcmp(key, "path") != 0 &&
		    strcmp(key, "readOnly") != 0)
			return err_set(err, EINVAL, "\"volumes[%u]\": unknown field \"%.64s\"", i,
				       key);
	}
	json_t *name = json_object_get(o, "name"), *path = json_object_get(o, "path"),
	       *ro = json_object_get(o, "readOnly");
	if (!json_is_string(name) || !json_is_string(path))
		return err_set(err, EINVAL,
			       "\"volumes[%u]\" needs \"name\" and \"path\", both strings", i);
	if (ro && !json_is_null(ro) && !json_is_boolean(ro))
		return err_set(err, EINVAL, "\"volumes[%u].readOnly\" must be true or false", i);
	const char *n = json_string_value(name), *p = json_string_value(path);
	if (strlen(n) != json_string_length(name) || !volume_name_valid(n))
		return err_set(
			err, EINVAL,
			"\"volumes[%u].name\" is not a volume name (1 to %d letters, digits, "
			". _ -, starting with a letter or a digit)",
			i, VOLUME_NAME_MAX);
	int r;
	if (strlen(p) != json_string_length(path))
		return err_set(err, EINVAL, "\"volumes[%u].path\" contains a NUL byte", i);
	if ((r = volume_path_check(p, err)) < 0)
		return r;
	ret->name = xstrdup(n);
	ret->path = xstrdup(p);
	ret->read_only = json_is_true(ro);
	return 0;
}

int volume_mounts_parse(const json_t *v, struct volume_mounts *ret, struct err *err)
{
	memset(ret, 0, sizeof(*ret));
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_array(v))
		return err_set(err, EINVAL, "\"volumes\" must be an array");
	if (json_array_size(v) > SANDBOX_VOLUMES_MAX)
		return err_set(err, EINVAL, "a session mounts at most %d volumes",
			       SANDBOX_VOLUMES_MAX);
	for (unsigned i = 0; i < json_array_size(v); i++) {
		struct volume_mount_req m = { 0 };
		int r = parse_one(json_array_get(v, i), i, &m, err);
		for (unsigned k = 0; r == 0 && k < ret->n; k++) {
			if (strcmp(ret->m[k].name, m.name) == 0)
				r = err_set(err, EINVAL, "volume `%s` is mounted twice", m.name);
			else if (below(m.path, ret->m[k].path) || below(ret->m[k].path, m.path))
				r = err_set(err, EINVAL,
					    "volume paths %s and %s are one inside the other",
					    ret->m[k].path, m.path);
		}
		if (r < 0) {
			free(m.name);
			free(m.path);
			volume_mounts_fini(ret);
			return r;
		}
		ret->m[ret->n++] = m;
	}
	return 0;
}
