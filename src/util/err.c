#include "util/err.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int err_ret(int errnum)
{
	return errnum > 0 ? -errnum : -EIO;
}

int err_set(struct err *err, int errnum, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		va_end(ap);
		err->errnum = errnum > 0 ? errnum : EIO;
	}
	return err_ret(errnum);
}

int err_sys(struct err *err, int errnum, const char *fmt, ...)
{
	if (err) {
		va_list ap;
		va_start(ap, fmt);
		int n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
		va_end(ap);
		if (n >= 0 && (size_t)n < sizeof(err->msg))
			snprintf(err->msg + n, sizeof(err->msg) - (size_t)n, ": %s",
				 strerror(errnum));
		err->errnum = errnum > 0 ? errnum : EIO;
	}
	return err_ret(errnum);
}

int err_wrap(struct err *err, const char *fmt, ...)
{
	if (!err)
		return -EIO;
	char old[ERR_MSG_MAX];
	memcpy(old, err->msg, sizeof(old));
	va_list ap;
	va_start(ap, fmt);
	int n = vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
	va_end(ap);
	if (n >= 0 && (size_t)n < sizeof(err->msg))
		snprintf(err->msg + n, sizeof(err->msg) - (size_t)n, ": %.*s",
			 (int)(sizeof(err->msg) - (size_t)n), old);
	return err_ret(err->errnum);
}

void err_clear(struct err *err)
{
	if (err) {
		err->errnum = 0;
		err->msg[0] = '\0';
	}
}

int err_copy(struct err *dst, const struct err *src)
{
	if (!src)
		return -EIO;
	if (dst && dst != src)
		*dst = *src;
	return err_ret(src->errnum);
}

/* clang-format off */
static const struct { int num; const char *name; } err_names[] = {
#define E(x) { x, #x }
	E(EPERM), E(ENOENT), E(ESRCH), E(EINTR), E(EIO), E(E2BIG), E(ENOEXEC), E(EBADF),
	E(ECHILD), E(EAGAIN), E(ENOMEM), E(EACCES), E(EFAULT), E(EBUSY), E(EEXIST), E(EXDEV),
	E(ENODEV), E(ENOTDIR), E(EISDIR), E(EINVAL), E(ENFILE), E(EMFILE), E(ETXTBSY), E(EFBIG),
	E(ENOSPC), E(EROFS), E(EMLINK), E(EPIPE), E(ERANGE), E(ENAMETOOLONG), E(ENOSYS),
	E(ENOTEMPTY), E(ELOOP), E(EPROTO), E(EMSGSIZE), E(ENOTSUP), E(ECONNRESET),
	E(ECONNREFUSED), E(ETIMEDOUT), E(ECANCELED), E(EOVERFLOW), E(EBADMSG), E(ENOTCONN),
	E(ESHUTDOWN), E(EDQUOT), E(ENOTSOCK), E(EADDRINUSE), E(EREMOTEIO), E(EPROTONOSUPPORT), E(ESTALE),
	E(ENOTTY),
#undef E
};
/* clang-format on */

const char *err_name(int errnum)
{
	for (size_t i = 0; i < sizeof(err_names) / sizeof(err_names[0]); i++)
		if (err_names[i].num == errnum)
			return err_names[i].name;
	return "EIO";
}

int err_from_name(const char *name)
{
	if (name)
		for (size_t i = 0; i < sizeof(err_names) / sizeof(err_names[0]); i++)
			if (strcmp(err_names[i].name, name) == 0)
				return err_names[i].num;
	return 0;
}
