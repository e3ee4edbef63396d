/*
 * http_server.c -- an HTTP/1.1 server on libevl, with the bugs loopscope is
 * for.  One task per connection (keep-alive: it serves requests until the
 * client closes), so thousands of concurrent connections cost one small
 * stack each.
 *
 *   GET /            200, a short body
 *   GET /block       200 after 20 ms of "work" done with usleep() on the
 *                    loop thread: every other connection stalls meanwhile
 *   GET /offload     the same 20 ms of work run in the executor: correct
 *   GET /leak        200, but the handler also spawns a task that waits for
 *                    a reply, then drops the future it should answer: the
 *                    task can never wake (an "abandoned" leak)
 *   anything else    404
 *
 * Usage: http_server [--port P] [--seconds S]
 * Prints "pid N" and "port P"; serves until S seconds passed (0: forever)
 * or SIGINT/SIGTERM, then shuts down as asyncio.Runner.close does: every
 * task still pending (evl_all_tasks) is cancelled and awaited.
 * examples/demo.sh drives it and records it.
 */
#define _GNU_SOURCE
#include "evl.h"
#include "http_req.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <unistd.h>

static long next_conn = 1;

static intptr_t slow_work(void *arg)
{
    usleep(20 * 1000);                /* stands for a synchronous library call */
    return 0;
}

/* A task waiting for a reply that will never come. */
static intptr_t wait_for_reply(void *arg)
{
    return evl_await(arg);
}

static const char *route(const char *path, int *status)
{
    *status = 200;
    if (!strcmp(path, "/"))
        return "hello from libevl\n";
    if (!strcmp(path, "/block")) {
        slow_work(NULL);              /* BUG: blocks the loop for 20 ms */
        return "done the slow way\n";
    }
    if (!strcmp(path, "/offload")) {
        evl_run_in_executor(slow_work, NULL);
        return "done in the executor\n";
    }
    if (!strcmp(path, "/leak")) {
        evl_future *reply = evl_future_new(NULL);
        evl_future_unref(evl_spawn(NULL, "wait_for_reply", wait_for_reply, reply));
        evl_yield();                  /* it starts and awaits the reply */
        evl_future_unref(reply);      /* BUG: the only one who could answer forgets */
        return "started a task that will never finish\n";
    }
    *status = 404;
    return "not found\n";
}

/* Serve requests on one connection until the client closes it.  Every
 * complete request in the buffer is answered, the answers go out in one
 * send, then the next read.  A read that came back short emptied the
 * socket: the next one first waits for the fd to be readable (as libuv
 * does), rather than making a recv that would fail with EAGAIN and then
 * wait; the wait costs no syscall (the poll runs anyway). */
static intptr_t handle_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[8192], out[8192];
    size_t have = 0, scanned = 0;
    bool drained = false;
    for (;;) {
        size_t off = 0, olen = 0, hl;
        bool close_after = false;
        while (!close_after && (hl = http_head_end(buf + off, have - off, &scanned))) {
            if (olen + HTTP_ANSWER_MAX > sizeof(out)) {
                if (evl_sendall(fd, out, olen, 0) < 0)
                    goto out;
                olen = 0;
            }
            char path[HTTP_PATH_MAX + 1];
            http_parse(buf + off, hl, path, &close_after);
            int status;
            const char *body = route(path, &status);
            olen += http_answer(out + olen, status, body, close_after);
            off += hl;
        }
        if (olen && evl_sendall(fd, out, olen, 0) < 0)
            goto out;
        if (close_after)
            goto out;
        memmove(buf, buf + off, have - off);
        have -= off;
        if (have == sizeof(buf))
            goto out;                 /* headers too large */
        if (drained && evl_wait_fd(fd, EVL_READABLE) < 0)
            goto out;
        ssize_t n = evl_recv(fd, buf + have, sizeof(buf) - have, 0);
        if (n <= 0)
            goto out;
        drained = (size_t)n < sizeof(buf) - have;
        have += (size_t)n;
    }
out:
    evl_close(fd);
    return 0;
}

static intptr_t acceptor(void *arg)
{
    int lfd = (int)(intptr_t)arg;
    for (;;) {
        int fd = evl_accept(lfd, NULL, NULL);
        if (fd < 0)
            return fd == EVL_ECANCELED ? 0 : fd;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        char name[32];
        snprintf(name, sizeof(name), "handle_conn#%ld", next_conn++);
        evl_future_unref(evl_spawn(NULL, name, handle_conn, (void *)(intptr_t)fd));
    }
}

/* Stop on SIGINT/SIGTERM (a signalfd awaited like any fd) or the timer. */
static intptr_t stopper(void *arg)
{
    int sfd = (int)(intptr_t)arg;
    struct signalfd_siginfo si;
    if (evl_read(sfd, &si, sizeof(si)) < 0)
        return 0;                     /* cancelled by the shutdown */
    evl_stop(evl_loop_current());
    return 0;
}

/* asyncio.Runner.close's _cancel_all_tasks: cancel every task not done yet
 * (the acceptor, the stopper, open connections, a /leak task waiting for
 * its reply) and run the loop until all of them are done.  Returns how
 * many there were. */
static size_t cancel_all_tasks(evl_loop *loop)
{
    size_t n = evl_all_tasks(loop, NULL, 0);
    evl_task **ts = n ? malloc(n * sizeof(*ts)) : NULL;
    if (!ts)
        return 0;
    n = evl_all_tasks(loop, ts, n);   /* none can have come or gone */
    for (size_t i = 0; i < n; i++)
        evl_cancel(ts[i]);
    evl_future *all = evl_gather_new(loop, ts, n, EVL_GATHER_COLLECT);
    if (all)
        evl_run_until_complete(loop, all);
    evl_future_unref(all);
    for (size_t i = 0; i < n; i++)
        evl_future_unref(ts[i]);
    free(ts);
    return n;
}

static void on_timeout(evl_loop *loop, void *arg)
{
    evl_stop(loop);
}

int main(int argc, char **argv)
{
    int port = 8080;
    double seconds = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--port") && i + 1 < argc)
            port = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: http_server [--port P] [--seconds S]\n");
            return 2;
        }
    }
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t slen = sizeof(sa);
    if (bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(lfd, 1024) < 0 ||
        getsockname(lfd, (struct sockaddr *)&sa, &slen) < 0) {
        perror("http_server: listen");
        return 1;
    }
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGTERM);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int sfd = signalfd(-1, &mask, SFD_NONBLOCK | SFD_CLOEXEC);
    printf("pid %d\nport %d\n", (int)getpid(), ntohs(sa.sin_port));
    fflush(stdout);

    evl_loop *loop = evl_loop_new(NULL);
    evl_task *ac = evl_spawn(loop, "acceptor", acceptor, (void *)(intptr_t)lfd);
    evl_task *st = evl_spawn(loop, "stopper", stopper, (void *)(intptr_t)sfd);
    if (seconds > 0)
        evl_call_later(loop, (uint64_t)(seconds * 1e9), on_timeout, NULL);
    evl_run(loop);
    evl_future_unref(ac);
    evl_future_unref(st);
    size_t cancelled = cancel_all_tasks(loop);
    int leaked = evl_loop_free(loop);
    close(lfd);
    close(sfd);
    printf("served %ld connections; %zu tasks cancelled at exit, %d still pending\n",
           next_conn - 1, cancelled, leaked);
    return 0;
}
