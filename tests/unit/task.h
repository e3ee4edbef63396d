/*
 * task.h -- assertion macros and helpers for the libevl unit tests.
 *
 * Every test is `TEST_IMPL(name) { ...; return 0; }` and is listed in
 * test-list.h.  A failed assertion prints both values and file:line on
 * stderr and exits the process with status 1 (ctest runs each case in its
 * own process, so nothing is left to clean up).  Returning TEST_SKIP (77)
 * marks the case skipped (missing privileges).
 */
#ifndef EVL_UNIT_TASK_H
#define EVL_UNIT_TASK_H

#include "evl.h"

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TEST_OK 0
#define TEST_SKIP 77

#define TEST_IMPL(name)                                                       \
    int run_test_##name(void);                                                \
    int run_test_##name(void)

#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif
#ifndef TEST_ASAN
#define TEST_ASAN 0
#endif

/* Print the failure and exit(1) without running atexit handlers (a failed
 * test's state is not worth tearing down); registered fail hooks run first
 * (e.g. to restore a sysctl). */
__attribute__((noreturn, format(printf, 3, 4)))
void test_fail(const char *file, int line, const char *fmt, ...);
/* Run fn() before exiting on a failed assertion (at most 8 hooks). */
void test_on_fail(void (*fn)(void));

#define FAIL(...) test_fail(__FILE__, __LINE__, __VA_ARGS__)

#define ASSERT_TRUE(e)                                                        \
    do {                                                                      \
        if (!(e))                                                             \
            FAIL("ASSERT_TRUE(%s) failed", #e);                               \
    } while (0)
#define ASSERT_FALSE(e)                                                       \
    do {                                                                      \
        if (e)                                                                \
            FAIL("ASSERT_FALSE(%s) failed", #e);                              \
    } while (0)

/* Signed integer comparisons (results, errors, counts). */
#define ASSERT_CMP_(a, op, b)                                                 \
    do {                                                                      \
        intmax_t a_ = (intmax_t)(a), b_ = (intmax_t)(b);                      \
        if (!(a_ op b_))                                                      \
            FAIL("ASSERT(%s %s %s): %jd %s %jd is false", #a, #op, #b, a_,    \
                 #op, b_);                                                    \
    } while (0)
#define ASSERT_EQ(a, b) ASSERT_CMP_(a, ==, b)
#define ASSERT_NE(a, b) ASSERT_CMP_(a, !=, b)
#define ASSERT_LT(a, b) ASSERT_CMP_(a, <, b)
#define ASSERT_LE(a, b) ASSERT_CMP_(a, <=, b)
#define ASSERT_GT(a, b) ASSERT_CMP_(a, >, b)
#define ASSERT_GE(a, b) ASSERT_CMP_(a, >=, b)

/* Unsigned 64-bit comparisons (times, ids). */
#define ASSERT_UCMP_(a, op, b)                                                \
    do {                                                                      \
        uint64_t a_ = (uint64_t)(a), b_ = (uint64_t)(b);                      \
        if (!(a_ op b_))                                                      \
            FAIL("ASSERT(%s %s %s): %" PRIu64 " %s %" PRIu64 " is false", #a, \
                 #op, #b, a_, #op, b_);                                       \
    } while (0)
#define ASSERT_U64_EQ(a, b) ASSERT_UCMP_(a, ==, b)
#define ASSERT_U64_NE(a, b) ASSERT_UCMP_(a, !=, b)
#define ASSERT_U64_LT(a, b) ASSERT_UCMP_(a, <, b)
#define ASSERT_U64_LE(a, b) ASSERT_UCMP_(a, <=, b)
#define ASSERT_U64_GT(a, b) ASSERT_UCMP_(a, >, b)
#define ASSERT_U64_GE(a, b) ASSERT_UCMP_(a, >=, b)

/* libevl error codes: prints the symbolic names too. */
#define ASSERT_ERR(a, b)                                                      \
    do {                                                                      \
        intmax_t a_ = (intmax_t)(a), b_ = (intmax_t)(b);                      \
        if (a_ != b_)                                                         \
            FAIL("ASSERT_ERR(%s, %s): %jd (%s) != %jd (%s)", #a, #b, a_,      \
                 evl_err_name((int)a_), b_, evl_err_name((int)b_));           \
    } while (0)

#define ASSERT_PTR_EQ(a, b)                                                   \
    do {                                                                      \
        const void *a_ = (const void *)(a), *b_ = (const void *)(b);          \
        if (a_ != b_)                                                         \
            FAIL("ASSERT_PTR_EQ(%s, %s): %p != %p", #a, #b, a_, b_);          \
    } while (0)
#define ASSERT_PTR_NE(a, b)                                                   \
    do {                                                                      \
        const void *a_ = (const void *)(a), *b_ = (const void *)(b);          \
        if (a_ == b_)                                                         \
            FAIL("ASSERT_PTR_NE(%s, %s): both %p", #a, #b, a_);               \
    } while (0)
#define ASSERT_NULL(a)                                                        \
    do {                                                                      \
        const void *a_ = (const void *)(a);                                   \
        if (a_ != NULL)                                                       \
            FAIL("ASSERT_NULL(%s): %p", #a, a_);                              \
    } while (0)
#define ASSERT_NOT_NULL(a)                                                    \
    do {                                                                      \
        if ((a) == NULL)                                                      \
            FAIL("ASSERT_NOT_NULL(%s): NULL", #a);                            \
    } while (0)

#define ASSERT_STR_EQ(a, b)                                                   \
    do {                                                                      \
        const char *a_ = (a), *b_ = (b);                                      \
        if (!a_ || !b_ || strcmp(a_, b_) != 0)                                \
            FAIL("ASSERT_STR_EQ(%s, %s):\n  got:      \"%s\"\n  expected: \"%s\"", \
                 #a, #b, a_ ? a_ : "(null)", b_ ? b_ : "(null)");             \
    } while (0)
#define ASSERT_STR_CONTAINS(hay, needle)                                      \
    do {                                                                      \
        const char *h_ = (hay), *n_ = (needle);                               \
        if (!h_ || !strstr(h_, n_))                                           \
            FAIL("ASSERT_STR_CONTAINS(%s, %s): \"%s\" not found in:\n%s",     \
                 #hay, #needle, n_, h_ ? h_ : "(null)");                      \
    } while (0)
#define ASSERT_STR_NOT_CONTAINS(hay, needle)                                  \
    do {                                                                      \
        const char *h_ = (hay), *n_ = (needle);                               \
        if (h_ && strstr(h_, n_))                                             \
            FAIL("ASSERT_STR_NOT_CONTAINS(%s, %s): \"%s\" found in:\n%s",     \
                 #hay, #needle, n_, h_);                                      \
    } while (0)

/* ---------------------------------------------------------------- helpers */

/* A loop with the given flags (and stack size, 0 = default); fails the test
 * if it cannot be created. */
evl_loop *test_loop(unsigned flags, size_t stack_size);
/* evl_loop_free that must report exactly `leaked` leaked tasks. */
#define ASSERT_LOOP_FREE(loop, leaked) ASSERT_EQ(evl_loop_free(loop), (leaked))

/* CLOCK_MONOTONIC in ns (wall time, not the loop's clock). */
uint64_t test_wall_ns(void);

/* An ordering log: test_log("a%d", 1) appends "a1 ". */
extern char test_trace[8192];
void test_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void test_log_reset(void);

/* Redirect this process's stderr (fd 2) to a temporary file; capture_end
 * restores it and returns what was written (malloc'd, NUL-terminated). */
typedef struct test_capture {
    int saved_fd;
    int file_fd;
} test_capture;
void capture_begin(test_capture *c);
char *capture_end(test_capture *c);

/* Run fn(arg) in a forked child with its stderr captured.  Returns the
 * child's wait status; *err receives the captured stderr (malloc'd). */
int test_fork_run(void (*fn)(void *), void *arg, char **err);

/* Heap blocks currently allocated by libevl and the tests (malloc, calloc
 * and realloc are wrapped at link time; see runner.c). */
size_t test_heap_in_use(void);
/* Assert that the count of live heap blocks went back to `before`. */
#define ASSERT_HEAP_BACK_TO(before)                                           \
    do {                                                                      \
        size_t now_ = test_heap_in_use();                                     \
        if (now_ != (before))                                                 \
            FAIL("heap not released: %zu blocks live before, %zu after "      \
                 "(%+zd)", (size_t)(before), now_,                            \
                 (ssize_t)(now_ - (before)));                                 \
    } while (0)

/* A deterministic PRNG (xorshift64*). */
static inline uint64_t test_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 2685821657736338717ull;
}

#endif /* EVL_UNIT_TASK_H */
