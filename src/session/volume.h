/* volume: persistent named volumes (docs/storage.md).
 *
 * A volume is an ext4 image of a fixed size in SANDBOX_STATE_DIR/volumes, owned by the API key
 * that made it ("" without authentication), named by that owner (names are per owner: another
 * key's volume of the same name is another volume, and unknown to this one). It is recorded
 * in the store before its image exists and marked ready once the image is complete, so that a
 * start after a crash removes every image whose creation did not finish, and every file of
 * the directory the store does not know.
 *
 * A session mounts volumes at creation (jail, disk storage): read-write in one session at a
 * time, read-only in any number (alongside the writer or not: they share one filesystem).
 * Only the loop thread calls this module. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "config.h"
#include "driver/driver.h"
#include "util/err.h"

#define VOLUME_NAME_MAX  63
#define VOLUME_PATH_MAX  255
#define VOLUME_MIN_BYTES (8ULL << 20)

/* A name: 1 to VOLUME_NAME_MAX of [A-Za-z0-9._-], starting with a letter or a digit. */
bool volume_name_valid(const char *name);
/* A mount path: absolute, normalized (no "//", ".", ".." or trailing "/"), at most
 * VOLUME_PATH_MAX of [A-Za-z0-9._-/], not "/" nor below /proc, /dev, /sys or /run (the
 * sandbox's own mounts). EINVAL saying why. */
int volume_path_check(const char *path, struct err *err);

/* What a request asks to mount. */
struct volume_mount_req {
	char *name;
	char *path;
	bool read_only;
};
struct volume_mounts {
	unsigned n;
	struct volume_mount_req m[SANDBOX_VOLUMES_MAX];
};
/* Parses "volumes": [{"name", "path", "readOnly"?}, ...] (NULL or null: none): each of the
 * right type, no other field, at most SANDBOX_VOLUMES_MAX, no volume twice, no path twice or
 * inside another. EINVAL naming the problem; *ret is empty then. */
int volume_mounts_parse(const json_t *v, struct volume_mounts *ret, struct err *err);
void volume_mounts_fini(struct volume_mounts *m);

/* Creates the table when missing, forgets (and removes the images of) volumes whose creation
 * did not finish, removes files of the directory no volume has, and loads the rest. */
int volume_init(const struct config *cfg, struct err *err);
void volume_shutdown(void);

/* done(volume, NULL, arg) with the new volume's object, or (NULL, err, arg). */
typedef void (*volume_done_fn)(json_t *volume, const struct err *err, void *arg);
/* Starts making a volume; 0 and done later, or the error at once: EINVAL (name, size under
 * VOLUME_MIN_BYTES or over SANDBOX_MAX_VOLUME_BYTES), EEXIST (the owner has one by that name),
 * EAGAIN (the owner's SANDBOX_KEY_MAX_VOLUMES or SANDBOX_KEY_MAX_VOLUME_BYTES), EROFS (the
 * store does not write). */
int volume_create(const char *owner, const char *name, uint64_t bytes, volume_done_fn done,
		  void *arg, struct err *err);
/* The owner's volumes (every owner's when owner is NULL, each with its "owner"). */
json_t *volume_list(const char *owner);
/* The owner's volume of that name; any_owner: else another owner's (admins). NULL: ENOENT. */
json_t *volume_get(const char *owner, const char *name, bool any_owner, struct err *err);
/* Deletes it and its image: ENOENT, EBUSY while a session mounts it or it is being made. */
int volume_delete(const char *owner, const char *name, bool any_owner, struct err *err);

/* A session's hold on its volumes. */
struct volume_claim;
/* Takes the owner's volumes for session `session_id`: ENOENT for an unknown one, EBUSY for a
 * second read-write mount, EINVAL for a driver without volumes. NULL *ret for none. */
int volume_claim(const char *owner, const char *session_id, const struct volume_mounts *m,
		 struct volume_claim **ret, struct err *err);
/* What the driver mounts (valid while the claim is). */
const struct sandbox_volume *volume_claim_spec(const struct volume_claim *c, unsigned *n);
/* [{"name", "path", "readOnly"}] for the session object. */
json_t *volume_claim_json(const struct volume_claim *c);
/* Gives them back (after the sandbox is gone); accepts NULL. */
void volume_release(struct volume_claim *c);

/* For the metrics: how many volumes exist and the sum of their sizes. */
void volume_totals(uint64_t *count, uint64_t *bytes);
