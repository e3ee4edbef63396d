/*
 * blocking_server.c -- a small TCP server on libevl with deliberate
 * blocking bugs, one per route, each on its own line marked "BUG:"; and,
 * with --good, the same work done without blocking the loop.
 *
 * Each connection is served by a task named handle_conn#N that reads one
 * line naming a route and answers "done ROUTE".  A heartbeat task sleeps
 * 5 ms in a loop: it is the victim every stall delays.
 *
 *   route   the bug (blocks the loop)        --good (does not)
 *   sleep   usleep(50 ms)                    evl_sleep(50 ms)
 *   pipe    read() on a blocking pipe        evl_read() on a non-blocking one
 *   fsync   write + fsync() of 4 MiB         both in the executor
 *   spin    50 ms of CPU                     the same spin in the executor
 *   dns     getaddrinfo(NAME)                evl_getaddrinfo() (the executor)
 *           (NAME: --dns-name, default "localhost")
 *
 * Usage: blocking_server [--good] [--port P] [--requests N] [--dns-name NAME]
 * Prints "pid N" and "port P", then serves until N requests were answered
 * (forever if N is 0).  `loopscope record -p PID` then `loopscope blocking`
 * names each bug with its file:line.
 */
#define _GNU_SOURCE
#include "evl.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static bool good;
static long max_requests, served;
static evl_loop *loop;

/* Burn ms of this thread's CPU time (CPU time, not wall time: on a busy
 * machine the spin still costs the loop ms of computation). */
static void spin_ms(int ms)
{
    struct timespec a, b;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
    do
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
    while ((b.tv_sec - a.tv_sec) * 1000 + (b.tv_nsec - a.tv_nsec) / 1000000 < ms);
}

/* Executor job: write one byte into a pipe 50 ms from now. */
static intptr_t late_write(void *arg)
{
    int fd = (int)(intptr_t)arg;
    usleep(50 * 1000);
    ssize_t r = write(fd, "x", 1);
    close(fd);
    return r;
}

/* 4 MiB into a new unlinked file in the current directory (fsync of a
 * file on tmpfs would be free). */
static int make_dirty_file(void)
{
    char path[] = "blocking_server.XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0)
        return -1;
    unlink(path);
    static char block[1 << 16];
    memset(block, 'x', sizeof(block));
    for (int i = 0; i < 64; i++)
        if (write(fd, block, sizeof(block)) < 0)
            break;
    return fd;
}

static intptr_t do_spin(void *arg) { spin_ms(50); return 0; }

static intptr_t do_write_fsync(void *arg)
{
    int fd = make_dirty_file();
    int rc = fd >= 0 ? fsync(fd) : -1;
    if (fd >= 0)
        close(fd);
    return rc < 0 ? -1 : 0;
}

static const char *dns_name = "localhost";

static intptr_t do_dns(void *arg)
{
    struct addrinfo *ai = NULL;
    int rc = getaddrinfo(dns_name, "80", NULL, &ai);
    if (ai)
        freeaddrinfo(ai);
    return rc == 0 ? 0 : -1;
}

static void route_sleep(void)
{
    if (good)
        evl_sleep(EVL_MS(50));
    else
        usleep(50 * 1000); /* BUG: sleep */
}

static void route_pipe(void)
{
    int fds[2];
    char c;
    if (pipe2(fds, good ? O_NONBLOCK : 0) < 0)
        return;
    evl_future_unref(evl_executor_submit(NULL, late_write, (void *)(intptr_t)fds[1]));
    if (good)
        evl_read(fds[0], &c, 1);
    else if (read(fds[0], &c, 1) < 0) /* BUG: pipe */
        perror("read");
    if (good)
        evl_close(fds[0]);
    else
        close(fds[0]);
}

static void route_fsync(void)
{
    if (good) {
        evl_run_in_executor(do_write_fsync, NULL);
        return;
    }
    int fd = make_dirty_file();
    fsync(fd); /* BUG: fsync */
    close(fd);
}

static void route_spin(void)
{
    if (good)
        evl_run_in_executor(do_spin, NULL);
    else
        spin_ms(50); /* BUG: spin */
}

static void route_dns(void)
{
    struct addrinfo *ai = NULL;
    if (!good)
        do_dns(NULL); /* BUG: dns */
    else if (evl_getaddrinfo(dns_name, "80", NULL, &ai) == 0)
        freeaddrinfo(ai);
}

static const struct { const char *name; void (*fn)(void); } routes[] = {
    { "sleep", route_sleep }, { "pipe", route_pipe }, { "fsync", route_fsync },
    { "spin", route_spin },   { "dns", route_dns },
};

static intptr_t handle_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char line[64] = { 0 };
    size_t n = 0;
    while (n < sizeof(line) - 1 && !memchr(line, '\n', n)) {
        ssize_t r = evl_recv(fd, line + n, sizeof(line) - 1 - n, 0);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    line[strcspn(line, "\r\n")] = 0;
    const char *answer = "unknown route";
    for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++) {
        if (strcmp(line, routes[i].name) == 0) {
            routes[i].fn();
            answer = routes[i].name;
        }
    }
    char out[96];
    int len = snprintf(out, sizeof(out), "done %s\n", answer);
    evl_sendall(fd, out, (size_t)len, 0); /* an error: the client is gone */
    evl_close(fd);
    if (max_requests && ++served >= max_requests)
        evl_stop(loop);
    return 0;
}

static intptr_t heartbeat(void *arg)
{
    for (;;)
        if (evl_sleep(EVL_MS(5)) < 0)
            return 0;
}

static intptr_t acceptor(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    for (long id = 1;; id++) {
        int fd = evl_accept(lfd, NULL, NULL);
        if (fd < 0)
            return fd;
        char name[32];
        snprintf(name, sizeof(name), "handle_conn#%ld", id);
        evl_future_unref(evl_spawn(NULL, name, handle_conn, (void *)(intptr_t)fd));
    }
}

int main(int argc, char **argv)
{
    int port = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--good"))
            good = true;
        else if (!strcmp(argv[i], "--port") && i + 1 < argc)
            port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--requests") && i + 1 < argc)
            max_requests = atol(argv[++i]);
        else if (!strcmp(argv[i], "--dns-name") && i + 1 < argc)
            dns_name = argv[++i];
        else {
            fprintf(stderr, "usage: blocking_server [--good] [--port P] [--requests N] "
                            "[--dns-name NAME]\n");
            return 2;
        }
    }
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t slen = sizeof(sa);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 128) < 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &slen) < 0) {
        perror("listen");
        return 1;
    }
    printf("pid %d\nport %d\n", (int)getpid(), ntohs(sa.sin_port));
    fflush(stdout);
    loop = evl_loop_new(NULL);
    evl_task *hb = evl_spawn(loop, "heartbeat", heartbeat, NULL);
    evl_task *ac = evl_spawn(loop, "acceptor", acceptor, (void *)(intptr_t)lfd);
    evl_run(loop);
    evl_cancel(hb);
    evl_cancel(ac);
    evl_run_until_complete(loop, ac);
    evl_run_until_complete(loop, hb);
    evl_future_unref(hb);
    evl_future_unref(ac);
    evl_loop_free(loop);
    close(lfd);
    return 0;
}
