/*
 * epoll_spin.c -- the measured program of generic_overhead.py: a minimal
 * "event loop" whose every iteration is one epoll_wait that returns at once.
 *
 *   epoll_spin [--mode epoll|getppid] --n N   one measurement, then exit
 *   epoll_spin [--mode epoll|getppid]         serve measurements on stdin
 *
 * mode epoll (the default): epoll_wait(timeout 0) on an epoll fd watching an
 * eventfd that is always readable (level-triggered, never read), so every
 * call returns 1 at once: one loop iteration, no sleep.  This is the
 * cheapest iteration a loop can have, so the cost that loopscope's generic
 * loop mode adds per iteration (the BPF programs on the syscall
 * tracepoints, the task-clock sample) is the largest share of it here.
 * mode getppid: getppid() instead, a cheap syscall that no loopscope program
 * watches: what enabling syscall tracepoints costs other syscalls.
 *
 * Served mode, for measuring one process while a recorder attaches and
 * detaches between measurements: prints "pid P" and "ready" on stdout, then
 * for every line on stdin
 *
 *   N            N iterations in the mode of the command line
 *   MODE N       N iterations in MODE (epoll or getppid)
 *
 * answers one line
 *
 *   ns_per_iter X wall_ns_per_iter Y iters N
 *
 * X is the thread's CPU time (CLOCK_THREAD_CPUTIME_ID: user + system,
 * including the BPF programs run on its behalf) per iteration, Y the wall
 * time.  Between commands the process waits for stdin in epoll_wait
 * (timeout -1) on a second epoll fd, as an idle event loop does; so a
 * recorder in the generic mode sees one loop thread that is idle between
 * measurements, not a thread blocked outside its loop.  EOF on stdin ends it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

enum mode { MODE_EPOLL, MODE_GETPPID };

static int spin_ep;      /* watches the always-readable eventfd */

static void die(const char *what)
{
    fprintf(stderr, "epoll_spin: %s: %s\n", what, strerror(errno));
    exit(1);
}

static uint64_t clock_ns(clockid_t c)
{
    struct timespec ts;
    clock_gettime(c, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int parse_mode(const char *s, enum mode *m)
{
    if (!strcmp(s, "epoll"))
        *m = MODE_EPOLL;
    else if (!strcmp(s, "getppid"))
        *m = MODE_GETPPID;
    else
        return -1;
    return 0;
}

static void measure(enum mode m, long n)
{
    struct epoll_event ev;
    volatile long sink = 0;
    uint64_t c0 = clock_ns(CLOCK_THREAD_CPUTIME_ID), w0 = clock_ns(CLOCK_MONOTONIC);
    if (m == MODE_EPOLL) {
        for (long i = 0; i < n; i++) {
            int r = epoll_wait(spin_ep, &ev, 1, 0);
            if (r != 1) {
                if (r < 0 && errno == EINTR)
                    continue;
                fprintf(stderr, "epoll_spin: epoll_wait returned %d (errno %d), not 1\n",
                        r, errno);
                exit(1);
            }
        }
    } else {
        for (long i = 0; i < n; i++)
            sink += getppid();
    }
    uint64_t c1 = clock_ns(CLOCK_THREAD_CPUTIME_ID), w1 = clock_ns(CLOCK_MONOTONIC);
    (void)sink;
    printf("ns_per_iter %.2f wall_ns_per_iter %.2f iters %ld\n",
           (double)(c1 - c0) / (double)n, (double)(w1 - w0) / (double)n, n);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    enum mode mode = MODE_EPOLL;
    long once = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
            if (parse_mode(argv[++i], &mode) < 0) {
                fprintf(stderr, "epoll_spin: unknown mode '%s'\n", argv[i]);
                return 2;
            }
        } else if (!strcmp(argv[i], "--n") && i + 1 < argc) {
            once = strtol(argv[++i], NULL, 10);
            if (once <= 0) {
                fprintf(stderr, "epoll_spin: --n wants a positive count\n");
                return 2;
            }
        } else {
            fprintf(stderr, "usage: epoll_spin [--mode epoll|getppid] [--n N]\n");
            return 2;
        }
    }

    int efd = eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK);  /* counter 1: readable */
    if (efd < 0)
        die("eventfd");
    spin_ep = epoll_create1(EPOLL_CLOEXEC);
    if (spin_ep < 0)
        die("epoll_create1");
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = efd};
    if (epoll_ctl(spin_ep, EPOLL_CTL_ADD, efd, &ev) < 0)
        die("epoll_ctl");

    if (once) {
        measure(mode, once);
        return 0;
    }

    int ctl_ep = epoll_create1(EPOLL_CLOEXEC);
    if (ctl_ep < 0)
        die("epoll_create1");
    struct epoll_event in = {.events = EPOLLIN, .data.fd = 0};
    if (epoll_ctl(ctl_ep, EPOLL_CTL_ADD, 0, &in) < 0)
        die("epoll_ctl(stdin)");
    printf("pid %ld\nready\n", (long)getpid());
    fflush(stdout);

    /* Lines are short and come one at a time (the driver waits for each
     * answer), so a line is read with read() once stdin is readable. */
    char buf[256];
    size_t len = 0;
    for (;;) {
        struct epoll_event got;
        int r = epoll_wait(ctl_ep, &got, 1, -1);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            die("epoll_wait(stdin)");
        }
        ssize_t k = read(0, buf + len, sizeof buf - 1 - len);
        if (k < 0) {
            if (errno == EINTR || errno == EAGAIN)
                continue;
            die("read(stdin)");
        }
        if (k == 0)
            return 0;
        len += (size_t)k;
        buf[len] = '\0';
        char *nl;
        while ((nl = strchr(buf, '\n'))) {
            *nl = '\0';
            enum mode m = mode;
            char word[16];
            long n = 0;
            if (sscanf(buf, "%15s %ld", word, &n) == 2) {
                if (parse_mode(word, &m) < 0) {
                    fprintf(stderr, "epoll_spin: unknown mode '%s'\n", word);
                    return 2;
                }
            } else if (sscanf(buf, "%ld", &n) != 1) {
                n = 0;
            }
            if (n <= 0) {
                fprintf(stderr, "epoll_spin: bad command '%s'\n", buf);
                return 2;
            }
            measure(m, n);
            len -= (size_t)(nl + 1 - buf);
            memmove(buf, nl + 1, len + 1);
        }
        if (len == sizeof buf - 1) {
            fprintf(stderr, "epoll_spin: command line too long\n");
            return 2;
        }
    }
}
