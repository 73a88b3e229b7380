/*
 * harness.h - a tiny unit-test harness that prints TAP: each TEST() runs in
 * its own process, in a fresh temporary directory, under a timeout.
 */
#ifndef SK_TEST_HARNESS_H
#define SK_TEST_HARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "shardkit.h"

struct t_test {
	const char *name;
	void (*fn)(void);
	const char *file;
	int line;
	struct t_test *next;
};

void t_register(struct t_test *t);

/*
 * TEST(name) { ... } defines a test. A constructor registers it before
 * main(); main() orders the tests by file and line, so TAP numbers are
 * stable across link orders.
 */
#define TEST(name)							\
	static void test_##name(void);					\
	static struct t_test t_entry_##name = {				\
		#name, test_##name, __FILE__, __LINE__, NULL		\
	};								\
	__attribute__((constructor)) static void t_reg_##name(void)	\
	{								\
		t_register(&t_entry_##name);				\
	}								\
	static void test_##name(void)

/* ------------------------------------------------------------------------ */
/* inside a test                                                            */

/* The test's temporary directory (also the working directory). */
const char *t_tmpdir(void);
/* t_tmpdir()/name in one of a few rotating static buffers. */
const char *t_path(const char *name);

/* Print "# text" diagnostics. */
void t_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Fail the test now: print "# file:line: text" and exit the test process. */
void t_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
/* Report the test as skipped ("ok N name # SKIP reason") and stop it. */
void t_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Small file helpers; they fail the test on error. t_read_file's buffer is
 * NUL-terminated (not counted in *len) and is the caller's to free. */
#define t_write_file(path, data, len) \
	t_write_file_at(__FILE__, __LINE__, (path), (data), (len))
#define t_read_file(path, len) t_read_file_at(__FILE__, __LINE__, (path), (len))
/* Run a shell command (printf-style); fail unless it exits 0. */
#define t_system(...) t_system_at(__FILE__, __LINE__, __VA_ARGS__)

void t_write_file_at(const char *file, int line, const char *path,
    const void *data, size_t len);
void *t_read_file_at(const char *file, int line, const char *path,
    size_t *len);
void t_system_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The message behind a handle: an sk_error's msg, else sk_errmsg(). */
const char *t_err_msg(const struct sk_error *err);
#define T_ERRMSG(h) _Generic((h),					\
	struct sk_error *: t_err_msg((const struct sk_error *)(const void *)(h)), \
	const struct sk_error *: t_err_msg((const struct sk_error *)(const void *)(h)), \
	default: sk_errmsg((const void *)(h)))

/* ------------------------------------------------------------------------ */
/* assertions: a failed one prints where and why and fails the test         */

#define CHECK(cond) do {						\
	if (!(cond))							\
		t_fail(__FILE__, __LINE__, "CHECK(%s) failed", #cond);	\
} while (0)

#define CHECK_EQ_INT(a, b) do {						\
	intmax_t t_a_ = (intmax_t)(a), t_b_ = (intmax_t)(b);		\
	if (t_a_ != t_b_)						\
		t_fail(__FILE__, __LINE__,				\
		    "CHECK_EQ_INT(%s, %s): %jd != %jd", #a, #b, t_a_, t_b_); \
} while (0)

#define CHECK_EQ_STR(a, b) do {						\
	const char *t_a_ = (a), *t_b_ = (b);				\
	if (t_a_ == NULL || t_b_ == NULL || strcmp(t_a_, t_b_) != 0)	\
		t_fail(__FILE__, __LINE__,				\
		    "CHECK_EQ_STR(%s, %s): \"%s\" != \"%s\"", #a, #b,	\
		    t_a_ ? t_a_ : "(null)", t_b_ ? t_b_ : "(null)");	\
} while (0)

#define CHECK_MEM_EQ(a, b, n) do {					\
	size_t t_n_ = (n);						\
	if (memcmp((a), (b), t_n_) != 0)				\
		t_fail(__FILE__, __LINE__,				\
		    "CHECK_MEM_EQ(%s, %s, %zu): bytes differ", #a, #b, t_n_); \
} while (0)

/* hay contains needle (case-sensitive). */
#define CHECK_CONTAINS(hay, needle) do {				\
	const char *t_h_ = (hay), *t_n_ = (needle);			\
	if (t_h_ == NULL || strstr(t_h_, t_n_) == NULL)			\
		t_fail(__FILE__, __LINE__,				\
		    "CHECK_CONTAINS(%s, %s): \"%s\" lacks \"%s\"", #hay, #needle, \
		    t_h_ ? t_h_ : "(null)", t_n_);			\
} while (0)

/*
 * CHECK_OK(call, handle): call must not return a negative SK_E* code; on
 * failure print the code and handle's message (handle: any shardkit handle,
 * or a struct sk_error *). Evaluates to the call's value.
 */
#define CHECK_OK(call, handle) ({					\
	int64_t t_rc_ = (int64_t)(call);				\
	if (t_rc_ < 0)							\
		t_fail(__FILE__, __LINE__, "%s = %jd (%s): %s", #call,	\
		    (intmax_t)t_rc_, sk_strerror((int)t_rc_),		\
		    T_ERRMSG(handle));					\
	t_rc_;								\
})

/*
 * CHECK_ERR(call, code, handle): call must fail with code and leave a
 * non-empty message on handle. Evaluates to the message.
 */
#define CHECK_ERR(call, code, handle) ({				\
	int64_t t_rc_ = (int64_t)(call);				\
	int t_want_ = (code);						\
	if (t_rc_ != t_want_)						\
		t_fail(__FILE__, __LINE__,				\
		    "%s = %jd (%s), want %d (%s); message: %s", #call,	\
		    (intmax_t)t_rc_, t_rc_ < 0 ? sk_strerror((int)t_rc_) : "ok", \
		    t_want_, sk_strerror(t_want_), T_ERRMSG(handle));	\
	const char *t_m_ = T_ERRMSG(handle);				\
	if (t_m_ == NULL || t_m_[0] == '\0')				\
		t_fail(__FILE__, __LINE__, "%s failed without a message", #call); \
	t_m_;								\
})

#endif /* SK_TEST_HARNESS_H */
