/*
 * test-io.c -- fd readiness and the socket helpers: socketpair ping-pong,
 * bulk transfer through full buffers, one reader per fd, evl_close waking
 * waiters, cancelled waits, hang-ups, pipes, TCP over 127.0.0.1, and the
 * skipped polls and speculative reads of loop/ORDERING.md rule 16.
 */
#define _GNU_SOURCE
#include "task.h"
#include "evl-internal.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

static void make_pair(int sv[2])
{
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
}

/* ---------------------------------------------------------- ping-pong */

#define ROUNDS 200

static intptr_t pinger(void *arg)
{
    int fd = *(int *)arg;
    char buf[16];
    for (int i = 0; i < ROUNDS; i++) {
        int n = snprintf(buf, sizeof(buf), "ping%d", i);
        ASSERT_EQ(evl_send(fd, buf, (size_t)n, 0), n);
        char in[16] = { 0 };
        ssize_t got = evl_recv(fd, in, sizeof(in) - 1, 0);
        ASSERT_GT(got, 0);
        char want[16];
        snprintf(want, sizeof(want), "pong%d", i);
        ASSERT_STR_EQ(in, want);
    }
    return ROUNDS;
}

static intptr_t ponger(void *arg)
{
    int fd = *(int *)arg;
    int rounds = 0;
    for (;;) {
        char in[16] = { 0 };
        ssize_t got = evl_recv(fd, in, sizeof(in) - 1, 0);
        if (got == 0)
            break;                               /* peer closed */
        ASSERT_GT(got, 4);
        ASSERT_TRUE(strncmp(in, "ping", 4) == 0);
        in[1] = 'o';
        ASSERT_EQ(evl_send(fd, in, (size_t)got, 0), got);
        rounds++;
    }
    return rounds;
}

static intptr_t ping_then_close(void *arg)
{
    intptr_t r = pinger(arg);
    ASSERT_EQ(evl_close(*(int *)arg), 0);
    return r;
}

TEST_IMPL(io_socketpair_pingpong)
{
    evl_loop *loop = test_loop(0, 0);
    int sv[2];
    make_pair(sv);
    evl_task *b = evl_spawn(loop, "ponger", ponger, &sv[1]);
    evl_task *a = evl_spawn(loop, "pinger", ping_then_close, &sv[0]);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(evl_future_result(a), ROUNDS);
    ASSERT_EQ(evl_future_result(b), ROUNDS);
    ASSERT_EQ(loop->io_waits, 0);
    evl_future_unref(a);
    evl_future_unref(b);
    ASSERT_LOOP_FREE(loop, 0);
    close(sv[1]);
    return 0;
}

/* ------------------------------------------------ bulk: full buffers */

#define BULK (4u << 20)

static intptr_t bulk_writer(void *arg)
{
    int fd = *(int *)arg;
    unsigned char *buf = malloc(65536);
    size_t sent = 0;
    while (sent < BULK) {
        size_t n = BULK - sent < 65536 ? BULK - sent : 65536;
        for (size_t i = 0; i < n; i++)
            buf[i] = (unsigned char)((sent + i) * 7);
        ssize_t w = evl_send(fd, buf, n, 0);     /* may wait for room */
        ASSERT_GT(w, 0);
        sent += (size_t)w;
    }
    free(buf);
    ASSERT_EQ(evl_close(fd), 0);
    return (intptr_t)sent;
}

static intptr_t bulk_reader(void *arg)
{
    int fd = *(int *)arg;
    unsigned char buf[8192];
    size_t got = 0;
    for (;;) {
        ssize_t n = evl_recv(fd, buf, sizeof(buf), 0);
        ASSERT_GE(n, 0);
        if (n == 0)
            break;
        for (ssize_t i = 0; i < n; i++)
            if (buf[i] != (unsigned char)((got + (size_t)i) * 7))
                FAIL("byte %zu corrupted", got + (size_t)i);
        got += (size_t)n;
    }
    return (intptr_t)got;
}

TEST_IMPL(io_bulk_transfer)
{
    evl_loop *loop = test_loop(0, 0);
    int sv[2];
    make_pair(sv);
    evl_task *w = evl_spawn(loop, "writer", bulk_writer, &sv[0]);
    evl_task *r = evl_spawn(loop, "reader", bulk_reader, &sv[1]);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(evl_future_result(w), BULK);
    ASSERT_EQ(evl_future_result(r), BULK);
    evl_future_unref(w);
    evl_future_unref(r);
    ASSERT_EQ(evl_close(sv[1]), 0);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* ---------------------------------------------- one reader per fd */

static intptr_t wait_readable(void *arg)
{
    int fd = *(int *)arg;
    int r = evl_wait_fd(fd, EVL_READABLE);
    test_log("%s:%s", evl_task_name(evl_current_task()),
             r < 0 ? evl_err_name(r) : r == EVL_READABLE ? "R" : "?");
    return r;
}

static intptr_t second_reader(void *arg)
{
    int *sv = arg;
    ASSERT_ERR(evl_wait_fd(sv[0], EVL_READABLE), EVL_EBUSY);
    ASSERT_ERR(evl_wait_fd(sv[0], EVL_READABLE | EVL_WRITABLE), EVL_EBUSY);
    ASSERT_ERR(evl_wait_fd(sv[0], 0), EVL_EINVAL);
    ASSERT_ERR(evl_wait_fd(-1, EVL_READABLE), EVL_EBADF);
    /* The loop's own eventfd is off limits. */
    ASSERT_ERR(evl_wait_fd(evl_loop_current()->wakefd, EVL_READABLE), EVL_EBUSY);
    /* A writer on the same fd is fine while the reader waits. */
    ASSERT_EQ(evl_wait_fd(sv[0], EVL_WRITABLE), EVL_WRITABLE);
    test_log("writable");
    ASSERT_EQ(write(sv[1], "x", 1), 1);
    return 0;
}

TEST_IMPL(io_wait_fd_busy)
{
    evl_loop *loop = test_loop(0, 0);
    int sv[2];
    make_pair(sv);
    test_log_reset();
    evl_task *a = evl_spawn(loop, "a", wait_readable, &sv[0]);
    evl_task *b = evl_spawn(loop, "b", second_reader, sv);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_STR_EQ(test_trace, "writable a:R ");
    ASSERT_EQ(evl_future_result(a), EVL_READABLE);
    ASSERT_EQ(evl_future_result(b), 0);
    evl_future_unref(a);
    evl_future_unref(b);
    ASSERT_EQ(evl_close(sv[0]), 0);
    ASSERT_EQ(evl_close(sv[1]), 0);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* One waiter for READABLE|WRITABLE on a socket that is writable but not
 * readable must wake with EVL_WRITABLE (it is level-triggered: epoll
 * reports EPOLLOUT at once). */
static intptr_t wait_either(void *arg)
{
    return evl_wait_fd(*(int *)arg, EVL_READABLE | EVL_WRITABLE);
}

static intptr_t guard_either(void *arg)
{
    evl_task *t = evl_spawn(NULL, "either", wait_either, arg);
    /* A guard so that a lost wakeup fails the test instead of hanging. */
    intptr_t r = evl_wait_for(t, EVL_SEC(2));
    evl_future_unref(t);
    return r;
}

TEST_IMPL(io_wait_fd_both_writable)
{
    evl_loop *loop = test_loop(0, 0);
    int sv[2];
    make_pair(sv);
    evl_task *t = evl_spawn(loop, "guard", guard_either, &sv[0]);
    intptr_t r = evl_run_until_complete(loop, t);
    if (r < 0)
        FAIL("evl_wait_fd(fd, READABLE|WRITABLE) on a writable socket: %s "
             "(expected EVL_WRITABLE within 2 s)", evl_err_name((int)r));
    ASSERT_EQ(r, EVL_WRITABLE);
    evl_future_unref(t);
    evl_close(sv[0]);
    evl_close(sv[1]);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* -------------------------------------------- evl_close wakes waiters */

static intptr_t close_it(void *arg)
{
    int fd = *(int *)arg;
    test_log("close");
    ASSERT_EQ(evl_close(fd), 0);
    return 0;
}

static intptr_t wait_writable_blocked(void *arg)
{
    int fd = *(int *)arg;
    /* Fill the send buffer so that writability has to be awaited. */
    char buf[4096] = { 0 };
    while (send(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0)
        ;
    int r = evl_wait_fd(fd, EVL_WRITABLE);
    test_log("w:%s", evl_err_name(r));
    return r;
}

TEST_IMPL(io_close_wakes_waiter)
{
    evl_loop *loop = test_loop(0, 0);
    int sv[2];
    make_pair(sv);
    test_log_reset();
    evl_task *a = evl_spawn(loop, "a", wait_readable, &sv[0]);
    evl_task *w = evl_spawn(loop, "w", wait_writable_blocked, &sv[0]);
    evl_task *c = evl_spawn(loop, "c", close_it, &sv[0]);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_STR_EQ(test_trace, "close a:EBADF w:EBADF ");
    ASSERT_ERR(evl_future_result(a), EVL_EBADF);
    ASSERT_EQ(evl_task_state(a), EVL_TASK_FAILED);
    ASSERT_EQ(loop->io_waits, 0);
    evl_future_unref(a);
    evl_future_unref(w);
    evl_future_unref(c);
    ASSERT_EQ(close(sv[1]), 0);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* A cancelled wait detaches from the fd: the next reader is not EBUSY. */
static intptr_t cancel_then_rewait(void *arg)
{
    int *sv = arg;
    evl_task *a = evl_spawn(NULL, "a", wait_readable, &sv[0]);
    ASSERT_EQ(evl_yield(), 0);                   /* a is waiting now */
    ASSERT_EQ(evl_task_state(a), EVL_TASK_SUSPENDED);
    ASSERT_EQ(evl_cancel(a), 1);
    ASSERT_ERR(evl_await(a), EVL_ECANCELED);
    ASSERT_EQ(evl_task_state(a), EVL_TASK_CANCELLED);
    evl_future_unref(a);
    ASSERT_EQ(write(sv[1], "y", 1), 1);
    ASSERT_EQ(evl_wait_fd(sv[0], EVL_READABLE), EVL_READABLE);
    char c;
    ASSERT_EQ(evl_recv(sv[0], &c, 1, 0), 1);
    ASSERT_EQ(c, 'y');
    return 0;
}

TEST_IMPL(io_cancel_wait)
{
    evl_loop *loop = test_loop(0, 0);
    int sv[2];
    make_pair(sv);
    test_log_reset();
    evl_task *t = evl_spawn(loop, "t", cancel_then_rewait, sv);
    ASSERT_EQ(evl_run_until_complete(loop, t), 0);
    ASSERT_STR_EQ(test_trace, "a:ECANCELED ");
    ASSERT_EQ(loop->io_waits, 0);
    evl_future_unref(t);
    evl_close(sv[0]);
    evl_close(sv[1]);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* A hang-up counts as both readable and writable; recv returns 0. */
static intptr_t wait_both(void *arg)
{
    int fd = *(int *)arg;
    int r = evl_wait_fd(fd, EVL_READABLE);
    ASSERT_TRUE(r & EVL_READABLE);
    char c;
    ASSERT_EQ(evl_recv(fd, &c, 1, 0), 0);
    return r;
}

static intptr_t hang_up(void *arg)
{
    ASSERT_EQ(evl_close(*(int *)arg), 0);
    return 0;
}

TEST_IMPL(io_hangup)
{
    evl_loop *loop = test_loop(0, 0);
    int sv[2];
    make_pair(sv);
    evl_task *a = evl_spawn(loop, "a", wait_both, &sv[0]);
    evl_task *b = evl_spawn(loop, "b", hang_up, &sv[1]);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_GT(evl_future_result(a), 0);
    evl_future_unref(a);
    evl_future_unref(b);
    evl_close(sv[0]);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* evl_read / evl_write on a pipe. */
static intptr_t pipe_reader(void *arg)
{
    int fd = *(int *)arg;
    char buf[64] = { 0 };
    size_t got = 0;
    while (got < 11) {
        ssize_t n = evl_read(fd, buf + got, sizeof(buf) - 1 - got);
        ASSERT_GT(n, 0);
        got += (size_t)n;
    }
    ASSERT_STR_EQ(buf, "hello world");
    return (intptr_t)got;
}

static intptr_t pipe_writer(void *arg)
{
    int fd = *(int *)arg;
    ASSERT_EQ(evl_write(fd, "hello", 5), 5);
    ASSERT_EQ(evl_sleep(EVL_MS(2)), 0);
    ASSERT_EQ(evl_write(fd, " world", 6), 6);
    return 0;
}

TEST_IMPL(io_pipe)
{
    evl_loop *loop = test_loop(0, 0);
    int p[2];
    ASSERT_EQ(pipe2(p, O_NONBLOCK | O_CLOEXEC), 0);
    evl_task *r = evl_spawn(loop, "r", pipe_reader, &p[0]);
    evl_task *w = evl_spawn(loop, "w", pipe_writer, &p[1]);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(evl_future_result(r), 11);
    evl_future_unref(r);
    evl_future_unref(w);
    evl_close(p[0]);
    evl_close(p[1]);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* An fd closed with evl_close and its number reused by a new socket:
 * waiting on the new one works. */
static intptr_t reuse_fd(void *arg)
{
    int sv[2];
    make_pair(sv);
    ASSERT_EQ(write(sv[1], "a", 1), 1);
    ASSERT_EQ(evl_wait_fd(sv[0], EVL_READABLE), EVL_READABLE);
    int old = sv[0];
    ASSERT_EQ(evl_close(sv[0]), 0);
    ASSERT_EQ(evl_close(sv[1]), 0);
    int nv[2];
    make_pair(nv);
    ASSERT_TRUE(nv[0] == old || nv[1] == old);
    int fd = nv[0] == old ? nv[0] : nv[1];
    int peer = nv[0] == old ? nv[1] : nv[0];
    ASSERT_EQ(write(peer, "b", 1), 1);
    ASSERT_EQ(evl_wait_fd(fd, EVL_READABLE), EVL_READABLE);
    char c;
    ASSERT_EQ(evl_recv(fd, &c, 1, 0), 1);
    ASSERT_EQ(c, 'b');
    evl_close(nv[0]);
    evl_close(nv[1]);
    return 0;
}

TEST_IMPL(io_fd_reuse_after_close)
{
    evl_loop *loop = test_loop(0, 0);
    evl_task *t = evl_spawn(loop, "t", reuse_fd, NULL);
    ASSERT_EQ(evl_run_until_complete(loop, t), 0);
    evl_future_unref(t);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* ------------------------------------------------------------- TCP */

static intptr_t tcp_server(void *arg)
{
    int lfd = *(int *)arg;
    struct sockaddr_in peer;
    socklen_t plen = sizeof(peer);
    int fd = evl_accept(lfd, (struct sockaddr *)&peer, &plen);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(plen, sizeof(peer));
    ASSERT_EQ(peer.sin_addr.s_addr, htonl(INADDR_LOOPBACK));
    ASSERT_TRUE(fcntl(fd, F_GETFL) & O_NONBLOCK);
    ASSERT_TRUE(fcntl(fd, F_GETFD) & FD_CLOEXEC);
    char buf[64];
    size_t got = 0;
    for (;;) {
        ssize_t n = evl_recv(fd, buf + got, sizeof(buf) - got, 0);
        ASSERT_GE(n, 0);
        if (n == 0)
            break;
        got += (size_t)n;
    }
    ASSERT_EQ(got, 5);
    ASSERT_TRUE(memcmp(buf, "hello", 5) == 0);
    ASSERT_EQ(evl_send(fd, "HELLO", 5, 0), 5);
    ASSERT_EQ(evl_close(fd), 0);
    return 1;
}

static intptr_t tcp_client(void *arg)
{
    struct sockaddr_in *addr = arg;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    ASSERT_EQ(evl_connect(fd, (struct sockaddr *)addr, sizeof(*addr)), 0);
    ASSERT_EQ(evl_send(fd, "hello", 5, 0), 5);
    ASSERT_EQ(shutdown(fd, SHUT_WR), 0);
    char buf[16] = { 0 };
    size_t got = 0;
    for (;;) {
        ssize_t n = evl_recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
        ASSERT_GE(n, 0);
        if (n == 0)
            break;
        got += (size_t)n;
    }
    ASSERT_STR_EQ(buf, "HELLO");
    ASSERT_EQ(evl_close(fd), 0);
    return 2;
}

static int tcp_listener(struct sockaddr_in *addr)
{
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ASSERT_GE(lfd, 0);
    memset(addr, 0, sizeof(*addr));
    addr->sin_family = AF_INET;
    addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr->sin_port = 0;
    ASSERT_EQ(bind(lfd, (struct sockaddr *)addr, sizeof(*addr)), 0);
    ASSERT_EQ(listen(lfd, 16), 0);
    socklen_t len = sizeof(*addr);
    ASSERT_EQ(getsockname(lfd, (struct sockaddr *)addr, &len), 0);
    ASSERT_NE(addr->sin_port, 0);
    return lfd;
}

TEST_IMPL(io_tcp_accept_connect)
{
    evl_loop *loop = test_loop(0, 0);
    struct sockaddr_in addr;
    int lfd = tcp_listener(&addr);
    evl_task *s = evl_spawn(loop, "server", tcp_server, &lfd);
    evl_task *c = evl_spawn(loop, "client", tcp_client, &addr);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(evl_future_result(s), 1);
    ASSERT_EQ(evl_future_result(c), 2);
    evl_future_unref(s);
    evl_future_unref(c);
    ASSERT_EQ(evl_close(lfd), 0);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* Many clients against one accepting task. */
#define NCLIENTS 50
static intptr_t tcp_echo_conn(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[32];
    ssize_t n;
    while ((n = evl_recv(fd, buf, sizeof(buf), 0)) > 0)
        ASSERT_EQ(evl_send(fd, buf, (size_t)n, 0), n);
    ASSERT_EQ(n, 0);
    evl_close(fd);
    return 0;
}

static intptr_t tcp_acceptor(void *arg)
{
    int lfd = *(int *)arg;
    evl_task *conns[NCLIENTS];
    for (int i = 0; i < NCLIENTS; i++) {
        int fd = evl_accept(lfd, NULL, NULL);
        ASSERT_GE(fd, 0);
        conns[i] = evl_spawn(NULL, "conn", tcp_echo_conn, (void *)(intptr_t)fd);
    }
    int r = evl_gather(conns, NCLIENTS, 0, NULL);
    for (int i = 0; i < NCLIENTS; i++)
        evl_future_unref(conns[i]);
    return r;
}

static intptr_t tcp_echo_client(void *arg)
{
    struct sockaddr_in *addr = arg;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ASSERT_EQ(evl_connect(fd, (struct sockaddr *)addr, sizeof(*addr)), 0);
    uint64_t id = evl_task_id(evl_current_task());
    for (int i = 0; i < 10; i++) {
        char out[32], in[32] = { 0 };
        int n = snprintf(out, sizeof(out), "%" PRIu64 "-%d", id, i);
        ASSERT_EQ(evl_send(fd, out, (size_t)n, 0), n);
        size_t got = 0;
        while (got < (size_t)n) {
            ssize_t k = evl_recv(fd, in + got, (size_t)n - got, 0);
            ASSERT_GT(k, 0);
            got += (size_t)k;
        }
        ASSERT_STR_EQ(in, out);
    }
    evl_close(fd);
    return 0;
}

TEST_IMPL(io_tcp_many_clients)
{
    evl_loop *loop = test_loop(0, 0);
    struct sockaddr_in addr;
    int lfd = tcp_listener(&addr);
    evl_task *a = evl_spawn(loop, "acceptor", tcp_acceptor, &lfd);
    evl_task *c[NCLIENTS];
    for (int i = 0; i < NCLIENTS; i++)
        c[i] = evl_spawn(loop, "client", tcp_echo_client, &addr);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(evl_future_result(a), 0);
    for (int i = 0; i < NCLIENTS; i++) {
        ASSERT_EQ(evl_future_result(c[i]), 0);
        evl_future_unref(c[i]);
    }
    evl_future_unref(a);
    evl_close(lfd);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

static intptr_t tcp_refused(void *arg)
{
    struct sockaddr_in *addr = arg;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int r = evl_connect(fd, (struct sockaddr *)addr, sizeof(*addr));
    evl_close(fd);
    return r;
}

TEST_IMPL(io_tcp_connect_refused)
{
    evl_loop *loop = test_loop(0, 0);
    struct sockaddr_in addr;
    int lfd = tcp_listener(&addr);
    close(lfd);                                  /* nobody listens there now */
    evl_task *t = evl_spawn(loop, "refused", tcp_refused, &addr);
    ASSERT_ERR(evl_run_until_complete(loop, t), -ECONNREFUSED);
    evl_future_unref(t);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* ------------------------------ skipped polls and speculative reads */

/* loop/ORDERING.md rule 16.  The expected traces are CPython 3.11's output
 * for the same program (loop.sock_recv, asyncio.sleep(0), socketpairs);
 * the counters show that the path under test was taken. */

typedef struct spec_fds {
    int x[2], z[2];
} spec_fds;

static intptr_t spec_ticker(void *arg)
{
    int n = (int)(intptr_t)arg;
    for (int i = 0; i < n; i++) {
        test_log("t%d", i);
        ASSERT_EQ(evl_yield(), 0);
    }
    return 0;
}

/* A partial read leaves data: the next reads return it without waiting
 * (no tick in between), even when the read is speculative. */
static intptr_t spec_reader(void *arg)
{
    spec_fds *f = arg;
    char c;
    for (int i = 0; i < 3; i++) {
        ASSERT_EQ(evl_recv(f->x[0], &c, 1, 0), 1);
        test_log("%c", c);
    }
    ASSERT_EQ(evl_recv(f->x[0], &c, 1, 0), 0);
    test_log("eof");
    return 0;
}

static intptr_t spec_writer(void *arg)
{
    spec_fds *f = arg;
    ASSERT_EQ(evl_yield(), 0);
    ASSERT_EQ(write(f->x[1], "abc", 3), 3);
    ASSERT_EQ(evl_close(f->x[1]), 0);
    test_log("w");
    return 0;
}

TEST_IMPL(io_spec_partial_read_no_wait)
{
    evl_loop *loop = test_loop(0, 0);
    spec_fds f;
    make_pair(f.x);
    test_log_reset();
    evl_task *r = evl_spawn(loop, "reader", spec_reader, &f);
    evl_task *t = evl_spawn(loop, "ticker", spec_ticker, (void *)(intptr_t)6);
    evl_task *w = evl_spawn(loop, "writer", spec_writer, &f);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_STR_EQ(test_trace, "t0 t1 w t2 t3 a b c eof t4 t5 ");
    ASSERT_EQ(evl_future_result(r), 0);
    /* The second read was speculative (the reader met EAGAIN before and
     * ran last in its batch) and the poll found data: it went on at once. */
    ASSERT_GE(loop->spec_reads, 1);
    ASSERT_GE(loop->spec_missed, 1);
    ASSERT_EQ(loop->io_waits, 0);
    ASSERT_TRUE(loop->spec == NULL);
    evl_future_unref(r);
    evl_future_unref(t);
    evl_future_unref(w);
    evl_close(f.x[0]);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* A write by a task forces the next poll: the zero-timeout poll is skipped
 * only after a batch of fd-wait completions, never after user code (here
 * a ticker runs in every batch, so no poll may be skipped). */
static intptr_t skip_r(void *arg)
{
    spec_fds *f = arg;
    char c;
    ASSERT_EQ(evl_recv(f->x[0], &c, 1, 0), 1);
    test_log("r");
    return 0;
}

static intptr_t skip_w(void *arg)
{
    spec_fds *f = arg;
    char c;
    ASSERT_EQ(evl_recv(f->z[0], &c, 1, 0), 1);
    test_log("w");
    ASSERT_EQ(write(f->x[1], "x", 1), 1);
    test_log("w2");
    return 0;
}

static intptr_t skip_e(void *arg)
{
    spec_fds *f = arg;
    ASSERT_EQ(evl_yield(), 0);
    ASSERT_EQ(evl_yield(), 0);
    ASSERT_EQ(write(f->z[1], "z", 1), 1);
    test_log("e");
    return 0;
}

TEST_IMPL(io_poll_skip_after_write)
{
    evl_loop *loop = test_loop(0, 0);
    spec_fds f;
    make_pair(f.x);
    make_pair(f.z);
    test_log_reset();
    evl_task *ts[4] = {
        evl_spawn(loop, "r", skip_r, &f),
        evl_spawn(loop, "w", skip_w, &f),
        evl_spawn(loop, "t", spec_ticker, (void *)(intptr_t)8),
        evl_spawn(loop, "e", skip_e, &f),
    };
    ASSERT_EQ(evl_run(loop), 0);
    /* A skip after w's write (user code) would queue r's wakeup one
     * iteration late: "... t6 t7 r". */
    ASSERT_STR_EQ(test_trace, "t0 t1 t2 e t3 t4 w w2 t5 t6 r t7 ");
    for (int i = 0; i < 4; i++) {
        ASSERT_EQ(evl_future_result(ts[i]), 0);
        evl_future_unref(ts[i]);
    }
    for (int i = 0; i < 2; i++) {
        evl_close(f.x[i]);
        evl_close(f.z[i]);
    }
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* Exact-size ping-pong between two tasks: after the first round every
 * read that would meet EAGAIN is speculative and confirmed by the poll,
 * and the poll before each woken task runs is skipped. */
static intptr_t exact_pp(void *arg)
{
    int fd = *(int *)arg;
    bool ping = ((int *)arg)[2];
    char buf[64] = { 0 };
    for (int i = 0; i < ROUNDS; i++) {
        if (ping)
            ASSERT_EQ(evl_send(fd, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
        size_t got = 0;
        while (got < sizeof(buf)) {
            ssize_t n = evl_recv(fd, buf + got, sizeof(buf) - got, 0);
            ASSERT_GT(n, 0);
            got += (size_t)n;
        }
        if (!ping)
            ASSERT_EQ(evl_send(fd, buf, sizeof(buf), 0), (ssize_t)sizeof(buf));
    }
    return 0;
}

TEST_IMPL(io_spec_pingpong_confirmed)
{
    evl_loop *loop = test_loop(0, 0);
    int sv[2];
    make_pair(sv);
    int a[3] = { sv[0], 0, 1 }, b[3] = { sv[1], 0, 0 };
    evl_task *pong = evl_spawn(loop, "pong", exact_pp, b);
    evl_task *ping = evl_spawn(loop, "ping", exact_pp, a);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(evl_future_result(ping), 0);
    ASSERT_EQ(evl_future_result(pong), 0);
    ASSERT_GE(loop->spec_reads, 2 * ROUNDS - 2);
    ASSERT_EQ(loop->spec_missed, 0);
    ASSERT_GE(loop->polls_skipped, 2 * ROUNDS - 2);
    evl_future_unref(ping);
    evl_future_unref(pong);
    evl_close(sv[0]);
    evl_close(sv[1]);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* An fd closed with evl_close and its number reused by a new socket does
 * not inherit the old one's "met EAGAIN": the first read of the new one
 * makes its syscall (it is not speculative) and returns the data at once. */
static intptr_t reuse_poke(void *arg)
{
    ASSERT_EQ(evl_yield(), 0);
    ASSERT_EQ(write(*(int *)arg, "a", 1), 1);
    return 0;
}

static intptr_t reuse_spec_reader(void *arg)
{
    (void)arg;
    evl_loop *loop = evl_loop_current();
    int old[2];
    make_pair(old);
    evl_task *p = evl_spawn(NULL, "poke", reuse_poke, &old[1]);
    char c;
    ASSERT_EQ(evl_recv(old[0], &c, 1, 0), 1);     /* EAGAIN, then waits */
    ASSERT_EQ(c, 'a');
    ASSERT_EQ(loop->fds[old[0]].rd_spec, 1);
    ASSERT_EQ(evl_await(p), 0);
    evl_future_unref(p);
    ASSERT_EQ(evl_close(old[0]), 0);
    ASSERT_EQ(evl_close(old[1]), 0);
    ASSERT_EQ(loop->fds[old[0]].rd_spec, 0);
    int nv[2];
    make_pair(nv);
    ASSERT_TRUE(nv[0] == old[0] || nv[1] == old[0]);
    int fd = nv[0] == old[0] ? nv[0] : nv[1];
    int peer = nv[0] == old[0] ? nv[1] : nv[0];
    ASSERT_EQ(write(peer, "b", 1), 1);
    uint64_t before = loop->spec_reads;
    test_log("new");
    ASSERT_EQ(evl_recv(fd, &c, 1, 0), 1);
    test_log("%c", c);
    ASSERT_EQ(loop->spec_reads, before);
    evl_close(nv[0]);
    evl_close(nv[1]);
    return 0;
}

TEST_IMPL(io_spec_fd_reuse_not_inherited)
{
    evl_loop *loop = test_loop(0, 0);
    test_log_reset();
    evl_task *t = evl_spawn(loop, "ticker", spec_ticker, (void *)(intptr_t)6);
    evl_task *r = evl_spawn(loop, "reader", reuse_spec_reader, NULL);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(evl_future_result(r), 0);
    ASSERT_TRUE(strstr(test_trace, "new b ") != NULL);
    evl_future_unref(r);
    evl_future_unref(t);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* A speculative read the poll confirmed is an ordinary wait: cancelling
 * it returns EVL_ECANCELED and leaves nothing behind; the next reader of
 * the fd is not EBUSY. */
static intptr_t spec_cancelled_reader(void *arg)
{
    int fd = *(int *)arg;
    char c;
    ssize_t n = evl_recv(fd, &c, 1, 0);
    test_log("r:%s", n < 0 ? evl_err_name((int)n) : "data");
    return n;
}

static intptr_t spec_cancel_main(void *arg)
{
    int *sv = arg;
    evl_loop *loop = evl_loop_current();
    /* Meet EAGAIN once so that the next read of sv[0] may be speculative. */
    evl_task *a = evl_spawn(NULL, "a", spec_cancelled_reader, &sv[0]);
    ASSERT_EQ(evl_yield(), 0);
    ASSERT_EQ(write(sv[1], "1", 1), 1);
    ASSERT_EQ(evl_await(a), 1);
    evl_future_unref(a);
    ASSERT_EQ(loop->fds[sv[0]].rd_spec, 1);
    uint64_t before = loop->spec_reads;
    evl_task *b = evl_spawn(NULL, "b", spec_cancelled_reader, &sv[0]);
    ASSERT_EQ(evl_sleep(EVL_MS(1)), 0);          /* b speculates, the poll confirms */
    ASSERT_EQ(loop->spec_reads, before + 1);
    ASSERT_TRUE(loop->spec == NULL);
    ASSERT_EQ(evl_task_state(b), EVL_TASK_SUSPENDED);
    ASSERT_EQ(evl_cancel(b), 1);
    ASSERT_ERR(evl_await(b), EVL_ECANCELED);
    evl_future_unref(b);
    ASSERT_TRUE(loop->fds[sv[0]].reader == NULL);
    ASSERT_EQ(write(sv[1], "2", 1), 1);
    char c;
    ASSERT_EQ(evl_recv(sv[0], &c, 1, 0), 1);
    ASSERT_EQ(c, '2');
    return 0;
}

TEST_IMPL(io_spec_cancel_confirmed)
{
    evl_loop *loop = test_loop(0, 0);
    int sv[2];
    make_pair(sv);
    test_log_reset();
    evl_task *t = evl_spawn(loop, "main", spec_cancel_main, sv);
    ASSERT_EQ(evl_run_until_complete(loop, t), 0);
    ASSERT_STR_EQ(test_trace, "r:data r:ECANCELED ");
    ASSERT_EQ(loop->io_waits, 0);
    evl_future_unref(t);
    evl_close(sv[0]);
    evl_close(sv[1]);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* A speculative read with nothing else to do: its poll sleeps until
 * another thread writes, reports the fd, and the reader goes on at once
 * with the data (whether the write came before or during the poll). */
typedef struct spec_thread_arg {
    int sig[2];
    int peer;
} spec_thread_arg;

static void *spec_late_writer(void *arg)
{
    spec_thread_arg *a = arg;
    char go;
    if (read(a->sig[0], &go, 1) != 1 || write(a->peer, "q", 1) != 1)
        abort();
    return NULL;
}

static intptr_t spec_sleeping_reader(void *arg)
{
    int *sv = arg;
    evl_loop *loop = evl_loop_current();
    char c;
    ASSERT_EQ(evl_recv(sv[0], &c, 1, 0), 1);     /* EAGAIN first: 'p' */
    ASSERT_EQ(c, 'p');
    ASSERT_EQ(loop->spec_reads, 0);
    ASSERT_EQ(write(sv[2], "g", 1), 1);          /* the thread may write now */
    ASSERT_EQ(evl_recv(sv[0], &c, 1, 0), 1);     /* speculative, missed */
    ASSERT_EQ(c, 'q');
    ASSERT_EQ(loop->spec_reads, 1);
    ASSERT_EQ(loop->spec_missed, 1);
    return 0;
}

static intptr_t spec_write_p(void *arg)
{
    ASSERT_EQ(evl_yield(), 0);
    ASSERT_EQ(write(*(int *)arg, "p", 1), 1);
    return 0;
}

TEST_IMPL(io_spec_missed_after_sleep)
{
    evl_loop *loop = test_loop(0, 0);
    int sv[2];
    make_pair(sv);
    spec_thread_arg a = { .peer = sv[1] };
    ASSERT_EQ(pipe2(a.sig, O_CLOEXEC), 0);
    pthread_t th;
    ASSERT_EQ(pthread_create(&th, NULL, spec_late_writer, &a), 0);
    int args[3] = { sv[0], sv[1], a.sig[1] };
    evl_task *r = evl_spawn(loop, "reader", spec_sleeping_reader, args);
    evl_task *w = evl_spawn(loop, "p", spec_write_p, &sv[1]);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(pthread_join(th, NULL), 0);
    ASSERT_EQ(evl_future_result(r), 0);
    ASSERT_EQ(evl_future_result(w), 0);
    ASSERT_EQ(loop->io_waits, 0);
    evl_future_unref(r);
    evl_future_unref(w);
    evl_close(sv[0]);
    evl_close(sv[1]);
    close(a.sig[0]);
    close(a.sig[1]);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}
