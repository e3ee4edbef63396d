/*
 * runner.c -- the evl_unit driver and the helpers of task.h.
 *
 *   evl_unit NAME     run one test in this process; exit 0, 1 or 77 (skip)
 *   evl_unit --list   print every test name, one a line
 *   evl_unit          run every test, each in a forked child, and summarise
 *
 * ctest registers one entry per name (tests/unit/CMakeLists.txt reads them
 * from test-list.h), so each case runs in its own process with a timeout.
 */
#define _GNU_SOURCE
#include "task.h"
#include "test-list.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define XX(name) int run_test_##name(void);
TEST_LIST(XX)
#undef XX

static const struct {
    const char *name;
    int (*fn)(void);
} tests[] = {
#define XX(name) { #name, run_test_##name },
    TEST_LIST(XX)
#undef XX
};
#define NTESTS (sizeof(tests) / sizeof(tests[0]))

/* ------------------------------------------------------------- failures */

static void (*fail_hooks[8])(void);
static int nfail_hooks;

void test_on_fail(void (*fn)(void))
{
    if (nfail_hooks < 8)
        fail_hooks[nfail_hooks++] = fn;
}

void test_fail(const char *file, int line, const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    fflush(stdout);
    fprintf(stderr, "%s:%d: %s\n", file, line, buf);
    fflush(stderr);
    while (nfail_hooks > 0)
        fail_hooks[--nfail_hooks]();
    _exit(1);
}

/* -------------------------------------------------------------- helpers */

evl_loop *test_loop(unsigned flags, size_t stack_size)
{
    evl_loop_options o;
    evl_loop_options_init(&o);
    o.flags = flags;
    if (stack_size)
        o.stack_size = stack_size;
    evl_loop *loop = evl_loop_new(&o);
    if (!loop)
        FAIL("evl_loop_new failed: %s", strerror(errno));
    return loop;
}

uint64_t test_wall_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

char test_trace[8192];

void test_log(const char *fmt, ...)
{
    size_t len = strlen(test_trace);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(test_trace + len, sizeof(test_trace) - len, fmt, ap);
    va_end(ap);
    len = strlen(test_trace);
    if (len + 1 < sizeof(test_trace)) {
        test_trace[len] = ' ';
        test_trace[len + 1] = 0;
    }
}

void test_log_reset(void) { test_trace[0] = 0; }

void capture_begin(test_capture *c)
{
    char path[] = "/tmp/evl_unit_stderr.XXXXXX";
    fflush(stderr);
    c->file_fd = mkstemp(path);
    if (c->file_fd < 0)
        FAIL("mkstemp: %s", strerror(errno));
    unlink(path);
    c->saved_fd = dup(2);
    if (c->saved_fd < 0 || dup2(c->file_fd, 2) < 0)
        FAIL("dup2: %s", strerror(errno));
}

char *capture_end(test_capture *c)
{
    fflush(stderr);
    dup2(c->saved_fd, 2);
    close(c->saved_fd);
    off_t size = lseek(c->file_fd, 0, SEEK_END);
    char *buf = malloc((size_t)size + 1);
    if (!buf)
        FAIL("out of memory");
    ssize_t n = pread(c->file_fd, buf, (size_t)size, 0);
    buf[n > 0 ? n : 0] = 0;
    close(c->file_fd);
    /* Echo it, so a failing ctest log shows what the library said. */
    fprintf(stderr, "---- captured stderr ----\n%s-------------------------\n", buf);
    return buf;
}

int test_fork_run(void (*fn)(void *), void *arg, char **err)
{
    int p[2];
    if (pipe(p) < 0)
        FAIL("pipe: %s", strerror(errno));
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        FAIL("fork: %s", strerror(errno));
    if (pid == 0) {
        close(p[0]);
        dup2(p[1], 2);
        close(p[1]);
        fn(arg);
        fflush(stderr);
        _exit(0);
    }
    close(p[1]);
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (len + 1024 > cap)
            buf = realloc(buf, cap *= 2);
        ssize_t n = read(p[0], buf + len, cap - len - 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = 0;
    close(p[0]);
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            FAIL("waitpid: %s", strerror(errno));
    fprintf(stderr, "---- child stderr ----\n%s----------------------\n", buf);
    *err = buf;
    return status;
}

/*
 * Live heap blocks allocated through malloc/calloc/realloc by libevl and
 * the tests: the link wraps those symbols (-Wl,--wrap, see CMakeLists.txt;
 * libevl is a static library, so its calls are wrapped too).  Counting
 * blocks is exact, unlike mallinfo2 (which counts tcache'd chunks as in
 * use) and works under ASan as well.
 */
static atomic_long live_blocks;

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_realloc(void *p, size_t size);
void __real_free(void *p);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_realloc(void *p, size_t size);
void __wrap_free(void *p);

void *__wrap_malloc(size_t size)
{
    void *p = __real_malloc(size);
    if (p)
        atomic_fetch_add_explicit(&live_blocks, 1, memory_order_relaxed);
    return p;
}

void *__wrap_calloc(size_t n, size_t size)
{
    void *p = __real_calloc(n, size);
    if (p)
        atomic_fetch_add_explicit(&live_blocks, 1, memory_order_relaxed);
    return p;
}

void *__wrap_realloc(void *p, size_t size)
{
    void *q = __real_realloc(p, size);
    if (!p && q)
        atomic_fetch_add_explicit(&live_blocks, 1, memory_order_relaxed);
    return q;
}

void __wrap_free(void *p)
{
    if (p)
        atomic_fetch_sub_explicit(&live_blocks, 1, memory_order_relaxed);
    __real_free(p);
}

size_t test_heap_in_use(void)
{
    return (size_t)atomic_load(&live_blocks);
}

/* ----------------------------------------------------------------- main */

static int run_one(size_t i)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    int rc = tests[i].fn();
    fflush(stdout);
    return rc;
}

static int run_all(const char *self)
{
    size_t pass = 0, fail = 0, skip = 0;
    for (size_t i = 0; i < NTESTS; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            execl(self, self, tests[i].name, (char *)NULL);
            _exit(127);
        }
        int status;
        waitpid(pid, &status, 0);
        const char *verdict;
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            verdict = "ok";
            pass++;
        } else if (WIFEXITED(status) && WEXITSTATUS(status) == TEST_SKIP) {
            verdict = "skip";
            skip++;
        } else {
            verdict = "FAIL";
            fail++;
        }
        printf("%-4s %s", verdict, tests[i].name);
        if (WIFSIGNALED(status))
            printf(" (signal %d)", WTERMSIG(status));
        printf("\n");
    }
    printf("%zu passed, %zu failed, %zu skipped\n", pass, fail, skip);
    return fail ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < NTESTS; i++)
            printf("%s\n", tests[i].name);
        return 0;
    }
    if (argc == 1)
        return run_all("/proc/self/exe");
    if (argc != 2) {
        fprintf(stderr, "usage: %s [--list | NAME]\n", argv[0]);
        return 2;
    }
    for (size_t i = 0; i < NTESTS; i++)
        if (strcmp(argv[1], tests[i].name) == 0)
            return run_one(i);
    fprintf(stderr, "error: no test named '%s' (see --list)\n", argv[1]);
    return 2;
}
