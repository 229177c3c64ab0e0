/* qemu_kvm_cache: the KVM probe's verdict, kept for the rest of the boot. The probe boots a
 * guest kernel under KVM (up to 3 s where KVM cannot run guests); its answer cannot change
 * while the boot, the host kernel, QEMU and the guest kernel stay the same, so every start
 * after the first reads it from a file of the run directory instead. The file is only
 * believed when it is ours, well formed and made for exactly these inputs. */
#include "driver/qemu/qemu.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "util/cleanup.h"

#define CACHE_FORMAT 1
#define CACHE_MAX    (16 * 1024) /* bytes: a real one is a few hundred */
#define BOOT_ID_PATH "/proc/sys/kernel/random/boot_id"

/* The identity of a file the verdict depends on: its path, size and modification time. */
static int file_id(json_t *key, const char *name, const char *path, struct err *err)
{
	struct stat st;
	if (stat(path, &st) < 0)
		return err_sys(err, errno, "%s", path);
	json_object_set_new(
		key, name,
		json_pack("{s:s, s:I, s:I}", "path", path, "size", (json_int_t)st.st_size,
			  "mtimeNs",
			  (json_int_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec));
	return 0;
}

json_t *qemu_kvm_cache_key(const char *boot_id_path, const char *qemu_bin, const char *qemu_version,
			   const char *kernel, struct err *err)
{
	char boot_id[64] = "";
	_cleanup_fclose_ FILE *f = fopen(boot_id_path ? boot_id_path : BOOT_ID_PATH, "re");
	if (!f || !fgets(boot_id, sizeof(boot_id), f)) {
		err_sys(err, errno ? errno : EIO, "cannot read the boot id");
		return NULL;
	}
	boot_id[strcspn(boot_id, "\n")] = '\0';
	if (!boot_id[0]) {
		err_set(err, EIO, "empty boot id");
		return NULL;
	}
	struct utsname u;
	if (uname(&u) < 0) {
		err_sys(err, errno, "uname");
		return NULL;
	}
	json_auto_t *key = json_pack("{s:s, s:s, s:s}", "bootId", boot_id, "hostKernel", u.release,
				     "qemuVersion", qemu_version ? qemu_version : "");
	if (file_id(key, "qemu", qemu_bin, err) < 0 || file_id(key, "guestKernel", kernel, err) < 0)
		return NULL;
	/* The device itself: another /dev/kvm (a module reloaded) is another answer. */
	struct stat st;
	json_object_set_new(key, "kvmDevice",
			    json_integer(stat("/dev/kvm", &st) == 0 ? (json_int_t)st.st_rdev : -1));
	return json_incref(key);
}

/* Whether a reason kept in the file is one to show: printable ASCII that fits. */
static bool why_ok(const char *s, size_t n)
{
	size_t len = strlen(s);
	if (len == 0 || len >= n)
		return false;
	for (size_t i = 0; i < len; i++)
		if (s[i] < 0x20 || s[i] > 0x7e)
			return false;
	return true;
}

int qemu_kvm_cache_load(const char *path, const json_t *key, bool *ret_usable, char *why, size_t n,
			char *reason, size_t rn)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		snprintf(reason, rn, errno == ENOENT ? "none kept yet" : "cannot open it: %s",
			 strerror(errno));
		return -1;
	}
	struct stat st;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & 0022) || st.st_size > CACHE_MAX) {
		snprintf(reason, rn, "not a file of ours that only we may write");
		return -1;
	}
	char buf[CACHE_MAX + 1];
	ssize_t len = read(fd, buf, sizeof(buf));
	if (len < 0 || len > CACHE_MAX) {
		snprintf(reason, rn, "cannot read it");
		return -1;
	}
	json_error_t jerr;
	json_auto_t *j = json_loadb(buf, (size_t)len, JSON_REJECT_DUPLICATES, &jerr);
	json_t *format = json_object_get(j, "format"), *usable = json_object_get(j, "usable");
	json_t *kept_why = json_object_get(j, "why");
	if (!json_is_object(j) || !json_is_integer(format) || !json_is_boolean(usable) ||
	    !json_is_object(json_object_get(j, "key")) || (kept_why && !json_is_string(kept_why))) {
		snprintf(reason, rn, "malformed");
		return -1;
	}
	if (json_integer_value(format) != CACHE_FORMAT) {
		snprintf(reason, rn, "another format");
		return -1;
	}
	if (!json_equal(json_object_get(j, "key"), (json_t *)key)) {
		snprintf(reason, rn, "made for another boot, host kernel, QEMU or guest kernel");
		return -1;
	}
	if (json_is_false(usable)) {
		if (!kept_why || !why_ok(json_string_value(kept_why), n)) {
			snprintf(reason, rn, "malformed");
			return -1;
		}
		snprintf(why, n, "%s", json_string_value(kept_why));
	}
	*ret_usable = json_is_true(usable);
	return 0;
}

int qemu_kvm_cache_store(const char *path, const json_t *key, bool usable, const char *why,
			 struct err *err)
{
	json_auto_t *j =
		json_pack("{s:i, s:O, s:b}", "format", CACHE_FORMAT, "key", key, "usable", usable);
	if (!usable)
		json_object_set_new(j, "why", json_string(why ? why : ""));
	_cleanup_free_ char *text = json_dumps(j, JSON_COMPACT | JSON_ENSURE_ASCII);
	_cleanup_free_ char *tmp = xasprintf("%s.tmp.%d", path, (int)getpid());
	_cleanup_close_ int fd =
		open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return err_sys(err, errno, "cannot write %s", tmp);
	size_t len = strlen(text);
	if (write(fd, text, len) != (ssize_t)len) {
		int saved = errno ? errno : EIO;
		unlink(tmp);
		return err_sys(err, saved, "cannot write %s", tmp);
	}
	if (rename(tmp, path) < 0) {
		int saved = errno;
		unlink(tmp);
		return err_sys(err, saved, "cannot rename %s to %s", tmp, path);
	}
	return 0;
}
