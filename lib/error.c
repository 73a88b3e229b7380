/*
 * error.c - status codes, per-handle messages and the fatal-state rule.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"

const char *
sk_strerror(int code)
{
	switch (code) {
	case SK_OK:		return "success";
	case SK_EINVAL:		return "invalid argument";
	case SK_ENOMEM:		return "out of memory";
	case SK_EIO:		return "input/output error";
	case SK_ENOENT:		return "no such file or object";
	case SK_EFORMAT:	return "corrupt or truncated data";
	case SK_EDECODE:	return "undecodable image";
	case SK_ETOOBIG:	return "over a limit";
	case SK_EUNSUPPORTED:	return "not supported";
	case SK_EFATAL:		return "handle failed earlier";
	case SK_EACCES:		return "permission denied";
	case SK_ENOSPC:		return "no space left on device";
	case SK_ENETWORK:	return "network failure";
	case SK_ECHANGED:	return "object changed while read";
	case SK_ETIMEDOUT:	return "timed out";
	case SK_ECANCELED:	return "cancelled";
	}
	return "unknown error";
}

int
sk_errno_code(int errnum)
{
	switch (errnum) {
	case ENOENT:
	case ENOTDIR:		return SK_ENOENT;
	case EACCES:
	case EPERM:
	case EROFS:		return SK_EACCES;
	case ENOSPC:
	case EDQUOT:		return SK_ENOSPC;
	case ENOMEM:		return SK_ENOMEM;
	case EINVAL:		return SK_EINVAL;
	}
	return SK_EIO;
}

int
sk__verror_set(struct sk_error *err, int code, const char *fmt, va_list ap)
{
	char raw[SK_ERRMSG_MAX];

	if (err != NULL) {
		err->code = code;
		vsnprintf(raw, sizeof raw, fmt, ap);
		/* names and servers' words are in it: a message never holds
		 * what could drive a terminal (sk_escape) */
		sk_escape(err->msg, sizeof err->msg, raw, strlen(raw), 0);
	}
	return code;
}

int
sk_error_set(struct sk_error *err, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	sk__verror_set(err, code, fmt, ap);
	va_end(ap);
	return code;
}

const char *
sk_errmsg(const void *handle)
{
	const struct sk__handle *h = handle;

	if (h == NULL)
		return "no handle (out of memory)";
	return h->err.msg;
}

void
sk__handle_init(struct sk__handle *h, uint32_t magic)
{
	h->magic = magic;
	h->state = SK__STATE_OK;
	h->err.code = 0;
	h->err.msg[0] = '\0';
}

int
sk__fail(struct sk__handle *h, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	sk__verror_set(&h->err, code, fmt, ap);
	va_end(ap);
	return code;
}

int
sk__fatal(struct sk__handle *h, int code, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	sk__verror_set(&h->err, code, fmt, ap);
	va_end(ap);
	h->state = SK__STATE_FATAL;
	return code;
}

int
sk__check(struct sk__handle *h, uint32_t magic, const char *fn)
{
	if (h == NULL || h->magic != magic) {
		/* Not ours: nothing to record the message on. */
		sk_log(SK_LOG_ERROR, "%s: invalid handle", fn);
		return SK_EINVAL;
	}
	if (h->state == SK__STATE_FATAL)
		return SK_EFATAL;
	return 0;
}

char *
sk__strdup(const char *s)
{
	return s == NULL ? NULL : strdup(s);
}

char *
sk__asprintf(const char *fmt, ...)
{
	va_list ap;
	char *s;
	int n;

	va_start(ap, fmt);
	n = vasprintf(&s, fmt, ap);
	va_end(ap);
	return n < 0 ? NULL : s;
}
