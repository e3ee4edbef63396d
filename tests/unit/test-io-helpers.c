/*
 * test-io-helpers.c -- the asyncio socket helpers: evl_sendall (slow
 * reader, peer reset, cancellation), evl_recvfrom/evl_sendto (UDP echo),
 * evl_sendfile (native and fallback, peer gone), evl_getaddrinfo (in the
 * executor, errors, cancellation) and connect with a timeout through
 * evl_wait_for (the pattern evl.h documents).
 */
#define _GNU_SOURCE
#include "task.h"
#include "evl-internal.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

/* A byte that depends on its position, so that order is checked too. */
static unsigned char pat(size_t i)
{
    return (unsigned char)(i * 7 + (i >> 13));
}

static unsigned char *pattern(size_t n)
{
    unsigned char *b = malloc(n);
    ASSERT_NOT_NULL(b);
    for (size_t i = 0; i < n; i++)
        b[i] = pat(i);
    return b;
}

static void set_bufs(int fd, int bytes)
{
    ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof(bytes)), 0);
    ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof(bytes)), 0);
}

static void nonblocking(int fd)
{
    int fl = fcntl(fd, F_GETFL);
    ASSERT_GE(fl, 0);
    ASSERT_EQ(fcntl(fd, F_SETFL, fl | O_NONBLOCK), 0);
}

/* A connected TCP pair over 127.0.0.1, both ends non-blocking, with small
 * fixed buffers (no autotuning: a few hundred KB fill them). */
static void tcp_pair(int sv[2])
{
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(lfd, 0);
    struct sockaddr_in a = { .sin_family = AF_INET };
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    ASSERT_EQ(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    ASSERT_EQ(listen(lfd, 1), 0);
    ASSERT_EQ(getsockname(lfd, (struct sockaddr *)&a, &len), 0);
    sv[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(sv[0], 0);
    set_bufs(sv[0], 65536);
    ASSERT_EQ(connect(sv[0], (struct sockaddr *)&a, sizeof(a)), 0);
    sv[1] = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    ASSERT_GE(sv[1], 0);
    set_bufs(sv[1], 65536);
    nonblocking(sv[0]);
    nonblocking(sv[1]);
    close(lfd);
}

static void unix_pair(int sv[2], int bufsize)
{
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv), 0);
    if (bufsize)
        set_bufs(sv[0], bufsize);
}

/* A SIGPIPE kills the test (the default action), whatever the runner set:
 * "no crash" then means something. */
static void default_sigpipe(void)
{
    signal(SIGPIPE, SIG_DFL);
}

/* After the helpers: SIGPIPE neither left blocked nor pending. */
static void assert_sigpipe_clean(void)
{
    sigset_t cur, pend;
    ASSERT_EQ(pthread_sigmask(SIG_BLOCK, NULL, &cur), 0);
    ASSERT_FALSE(sigismember(&cur, SIGPIPE));
    ASSERT_EQ(sigpending(&pend), 0);
    ASSERT_FALSE(sigismember(&pend, SIGPIPE));
}

/* Reset a TCP connection: close with SO_LINGER 0 sends RST. */
static void reset_close(int fd)
{
    struct linger l = { 1, 0 };
    ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l)), 0);
    ASSERT_EQ(evl_close(fd), 0);
}

/* Read until n bytes came or EOF; check them against pat(first + i). */
static size_t read_check(int fd, size_t n, size_t first, size_t chunk)
{
    unsigned char *buf = malloc(chunk);
    ASSERT_NOT_NULL(buf);
    size_t got = 0;
    while (got < n) {
        ssize_t r = evl_recv(fd, buf, chunk < n - got ? chunk : n - got, 0);
        ASSERT_GE(r, 0);
        if (r == 0)
            break;
        for (ssize_t i = 0; i < r; i++)
            if (buf[i] != pat(first + got + (size_t)i))
                FAIL("byte %zu differs: got %u, want %u", got + (size_t)i, buf[i],
                     pat(first + got + (size_t)i));
        got += (size_t)r;
    }
    free(buf);
    return got;
}

/* --------------------------------------------- sendall to a slow reader */

#define SLOW_BYTES (6u << 20)

struct slow {
    int sv[2];
    evl_task *writer;
    unsigned char *data;
    int saw_writer_suspended;         /* sendall was waiting for room */
    size_t got;
};

static intptr_t slow_writer(void *arg)
{
    struct slow *s = arg;
    size_t sent = 12345;
    int rc = evl_sendall_sent(s->sv[0], s->data, SLOW_BYTES, 0, &sent);
    ASSERT_ERR(rc, 0);
    ASSERT_EQ(sent, SLOW_BYTES);
    ASSERT_EQ(evl_close(s->sv[0]), 0);
    return 0;
}

static intptr_t slow_reader(void *arg)
{
    struct slow *s = arg;
    unsigned char buf[3000];          /* a few KB a time, then let others run */
    for (;;) {
        if (evl_task_state(s->writer) == EVL_TASK_SUSPENDED)
            s->saw_writer_suspended++;
        ssize_t r = evl_recv(s->sv[1], buf, sizeof(buf), 0);
        ASSERT_GE(r, 0);
        if (r == 0)
            break;
        for (ssize_t i = 0; i < r; i++)
            if (buf[i] != pat(s->got + (size_t)i))
                FAIL("byte %zu differs", s->got + (size_t)i);
        s->got += (size_t)r;
        evl_yield();
    }
    return 0;
}

TEST_IMPL(io_sendall_slow_reader)
{
    evl_loop *loop = test_loop(0, 0);
    struct slow s = { .data = pattern(SLOW_BYTES) };
    unix_pair(s.sv, 16384);
    s.writer = evl_spawn(loop, "writer", slow_writer, &s);
    evl_task *r = evl_spawn(loop, "reader", slow_reader, &s);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(evl_task_state(s.writer), EVL_TASK_FINISHED);
    ASSERT_EQ(evl_task_state(r), EVL_TASK_FINISHED);
    ASSERT_EQ(s.got, SLOW_BYTES);               /* every byte, in order */
    ASSERT_GT(s.saw_writer_suspended, 0);       /* it did wait for room */
    evl_future_unref(s.writer);
    evl_future_unref(r);
    ASSERT_EQ(evl_close(s.sv[1]), 0);
    ASSERT_LOOP_FREE(loop, 0);
    free(s.data);
    return 0;
}

/* ----------------------------------------------- sendall, peer resets */

#define RESET_BYTES (8u << 20)
#define RESET_READ 65536u

struct reset {
    int sv[2];
    unsigned char *data;
    size_t sent;
    int rc;
};

static intptr_t reset_sender(void *arg)
{
    struct reset *s = arg;
    s->rc = evl_sendall_sent(s->sv[0], s->data, RESET_BYTES, 0, &s->sent);
    return s->rc;
}

static intptr_t reset_reader(void *arg)
{
    struct reset *s = arg;
    ASSERT_EQ(read_check(s->sv[1], RESET_READ, 0, 4096), RESET_READ);
    reset_close(s->sv[1]);            /* with the rest unread: RST */
    return 0;
}

TEST_IMPL(io_sendall_peer_reset)
{
    default_sigpipe();
    size_t heap0 = test_heap_in_use();
    evl_loop *loop = test_loop(0, 0);
    struct reset s = { .data = pattern(RESET_BYTES) };
    tcp_pair(s.sv);
    evl_task *w = evl_spawn(loop, "sender", reset_sender, &s);
    evl_task *r = evl_spawn(loop, "reader", reset_reader, &s);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_TRUE(s.rc == -ECONNRESET || s.rc == -EPIPE);
    ASSERT_EQ(evl_task_state(w), EVL_TASK_FAILED);
    ASSERT_ERR(evl_future_result(w), s.rc);     /* retrieved: no leak verdict */
    ASSERT_GE(s.sent, RESET_READ);
    ASSERT_LT(s.sent, RESET_BYTES);
    ASSERT_EQ(evl_future_result(r), 0);
    evl_future_unref(w);
    evl_future_unref(r);
    ASSERT_EQ(evl_close(s.sv[0]), 0);
    ASSERT_LOOP_FREE(loop, 0);
    free(s.data);
    ASSERT_HEAP_BACK_TO(heap0);
    assert_sigpipe_clean();
    return 0;
}

/* ------------------------------------------- sendall, cancelled midway */

#define CANCEL_BYTES (4u << 20)

struct cancel_send {
    int sv[2];
    unsigned char *data;
    evl_task *sender;
    size_t sent;
    int rc;
};

static intptr_t cancelled_sender(void *arg)
{
    struct cancel_send *s = arg;
    s->rc = evl_sendall_sent(s->sv[0], s->data, CANCEL_BYTES, 0, &s->sent);
    return s->rc;
}

static intptr_t canceller(void *arg)
{
    struct cancel_send *s = arg;
    evl_yield();                      /* the sender filled the buffer and waits */
    ASSERT_EQ(evl_task_state(s->sender), EVL_TASK_SUSPENDED);
    ASSERT_EQ(evl_cancel(s->sender), 1);
    return 0;
}

TEST_IMPL(io_sendall_cancel)
{
    evl_loop *loop = test_loop(0, 0);
    struct cancel_send s = { .data = pattern(CANCEL_BYTES) };
    unix_pair(s.sv, 65536);           /* nobody reads sv[1] while it runs */
    s.sender = evl_spawn(loop, "sender", cancelled_sender, &s);
    evl_task *c = evl_spawn(loop, "canceller", canceller, &s);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_ERR(s.rc, EVL_ECANCELED);
    ASSERT_EQ(evl_task_state(s.sender), EVL_TASK_CANCELLED);
    ASSERT_GT(s.sent, 0);
    ASSERT_LT(s.sent, CANCEL_BYTES);
    /* The documented state: exactly the first `sent` bytes went out. */
    unsigned char *buf = malloc(CANCEL_BYTES);
    size_t got = 0;
    for (;;) {
        ssize_t r = recv(s.sv[1], buf + got, CANCEL_BYTES - got, MSG_DONTWAIT);
        if (r <= 0) {
            ASSERT_TRUE(r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
            break;
        }
        got += (size_t)r;
    }
    ASSERT_EQ(got, s.sent);
    ASSERT_EQ(memcmp(buf, s.data, got), 0);
    free(buf);
    evl_future_unref(s.sender);
    evl_future_unref(c);
    ASSERT_EQ(evl_close(s.sv[0]), 0);
    ASSERT_EQ(evl_close(s.sv[1]), 0);
    ASSERT_LOOP_FREE(loop, 0);
    free(s.data);
    return 0;
}

/* Outside a task and with nothing to send. */
static intptr_t sendall_empty(void *arg)
{
    size_t sent = 99;
    ASSERT_ERR(evl_sendall_sent(*(int *)arg, "", 0, 0, &sent), 0);
    ASSERT_EQ(sent, 0);
    return 0;
}

TEST_IMPL(io_sendall_edges)
{
    int sv[2];
    unix_pair(sv, 0);
    size_t sent = 99;
    ASSERT_ERR(evl_sendall_sent(sv[0], "x", 1, 0, &sent), EVL_ENOTTASK);
    ASSERT_EQ(sent, 0);
    ASSERT_ERR(evl_sendall(sv[0], "x", 1, 0), EVL_ENOTTASK);
    evl_loop *loop = test_loop(0, 0);
    evl_task *t = evl_spawn(loop, "empty", sendall_empty, &sv[0]);
    ASSERT_EQ(evl_run_until_complete(loop, t), 0);
    evl_future_unref(t);
    ASSERT_LOOP_FREE(loop, 0);
    close(sv[0]);
    close(sv[1]);
    return 0;
}

/* ------------------------------------------------------------ UDP echo */

#define UDP_ROUNDS 100

struct udp {
    int srv, cli;
    struct sockaddr_in srv_addr;
};

static intptr_t udp_server(void *arg)
{
    struct udp *u = arg;
    for (int i = 0; i < UDP_ROUNDS; i++) {
        char buf[64];
        struct sockaddr_in from;
        socklen_t flen = sizeof(from);
        ssize_t n = evl_recvfrom(u->srv, buf, sizeof(buf), 0, (struct sockaddr *)&from, &flen);
        ASSERT_GT(n, 0);
        ASSERT_EQ(flen, sizeof(from));
        ASSERT_EQ(evl_sendto(u->srv, buf, (size_t)n, 0, (struct sockaddr *)&from, flen), n);
    }
    return UDP_ROUNDS;
}

static intptr_t udp_client(void *arg)
{
    struct udp *u = arg;
    for (int i = 0; i < UDP_ROUNDS; i++) {
        char msg[32], buf[64] = { 0 };
        int len = snprintf(msg, sizeof(msg), "datagram %d", i);
        ASSERT_EQ(evl_sendto(u->cli, msg, (size_t)len, 0, (struct sockaddr *)&u->srv_addr,
                             sizeof(u->srv_addr)), len);
        struct sockaddr_in from;
        socklen_t flen = sizeof(from);
        ssize_t n = evl_recvfrom(u->cli, buf, sizeof(buf) - 1, 0, (struct sockaddr *)&from, &flen);
        ASSERT_EQ(n, len);
        ASSERT_STR_EQ(buf, msg);
        ASSERT_EQ(from.sin_port, u->srv_addr.sin_port);
        ASSERT_EQ(from.sin_addr.s_addr, u->srv_addr.sin_addr.s_addr);
    }
    /* A datagram longer than the buffer is truncated, as by recvfrom(2);
     * addr and addrlen may be NULL. */
    ASSERT_EQ(evl_sendto(u->cli, "0123456789", 10, 0, (struct sockaddr *)&u->srv_addr,
                         sizeof(u->srv_addr)), 10);
    return 0;
}

static intptr_t udp_truncated(void *arg)
{
    struct udp *u = arg;
    char buf[4];
    ASSERT_EQ(evl_recvfrom(u->srv, buf, sizeof(buf), 0, NULL, NULL), 4);
    ASSERT_EQ(memcmp(buf, "0123", 4), 0);
    return 0;
}

TEST_IMPL(io_udp_echo)
{
    evl_loop *loop = test_loop(0, 0);
    struct udp u;
    u.srv = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    u.cli = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ASSERT_GE(u.srv, 0);
    ASSERT_GE(u.cli, 0);
    memset(&u.srv_addr, 0, sizeof(u.srv_addr));
    u.srv_addr.sin_family = AF_INET;
    u.srv_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(u.srv_addr);
    ASSERT_EQ(bind(u.srv, (struct sockaddr *)&u.srv_addr, sizeof(u.srv_addr)), 0);
    ASSERT_EQ(getsockname(u.srv, (struct sockaddr *)&u.srv_addr, &len), 0);
    /* The server starts first and waits in recvfrom: the EAGAIN path. */
    evl_task *s = evl_spawn(loop, "udp_server", udp_server, &u);
    evl_task *c = evl_spawn(loop, "udp_client", udp_client, &u);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(evl_future_result(s), UDP_ROUNDS);
    ASSERT_EQ(evl_future_result(c), 0);
    evl_task *t = evl_spawn(loop, "udp_truncated", udp_truncated, &u);
    ASSERT_EQ(evl_run_until_complete(loop, t), 0);
    evl_future_unref(s);
    evl_future_unref(c);
    evl_future_unref(t);
    ASSERT_EQ(evl_close(u.srv), 0);
    ASSERT_EQ(evl_close(u.cli), 0);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* ------------------------------------------------------------ sendfile */

#define FILE_BYTES (6u << 20)         /* far more than the 64 KiB buffers */

static int pattern_file(size_t n)
{
    char path[] = "/tmp/evl-sendfile.XXXXXX";
    int fd = mkstemp(path);
    ASSERT_GE(fd, 0);
    unlink(path);
    unsigned char *b = pattern(n);
    for (size_t off = 0; off < n;) {
        ssize_t w = write(fd, b + off, n - off);
        ASSERT_GT(w, 0);
        off += (size_t)w;
    }
    free(b);
    ASSERT_EQ(lseek(fd, 0, SEEK_SET), 0);
    return fd;
}

struct sf {
    int sv[2];
    int in;
    off_t off;
    ssize_t r1, r2;
    size_t got;
    int rc;
};

#define SF_SKIP 100
#define SF_TAIL 7

static intptr_t sf_sender(void *arg)
{
    struct sf *s = arg;
    /* A range, by offset: the file position stays where it was. */
    s->off = SF_SKIP;
    s->r1 = evl_sendfile(s->sv[0], s->in, &s->off, FILE_BYTES - SF_SKIP - SF_TAIL);
    ASSERT_EQ(lseek(s->in, 0, SEEK_CUR), 0);
    /* The whole file from its position (count 0: to the end). */
    s->r2 = evl_sendfile(s->sv[0], s->in, NULL, 0);
    ASSERT_EQ(lseek(s->in, 0, SEEK_CUR), FILE_BYTES);
    ASSERT_EQ(evl_close(s->sv[0]), 0);
    return 0;
}

static intptr_t sf_reader(void *arg)
{
    struct sf *s = arg;
    size_t first = FILE_BYTES - SF_SKIP - SF_TAIL;
    s->got = read_check(s->sv[1], first, SF_SKIP, 4096);
    ASSERT_EQ(s->got, first);
    s->got += read_check(s->sv[1], FILE_BYTES, 0, 4096);
    char c;
    ASSERT_EQ(evl_recv(s->sv[1], &c, 1, 0), 0);   /* and nothing more */
    return 0;
}

TEST_IMPL(io_sendfile_large)
{
    evl_loop *loop = test_loop(0, 0);
    struct sf s = { .in = pattern_file(FILE_BYTES) };
    tcp_pair(s.sv);
    evl_task *w = evl_spawn(loop, "sendfile", sf_sender, &s);
    evl_task *r = evl_spawn(loop, "reader", sf_reader, &s);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(evl_future_result(w), 0);
    ASSERT_EQ(evl_future_result(r), 0);
    ASSERT_EQ(s.r1, FILE_BYTES - SF_SKIP - SF_TAIL);
    ASSERT_EQ(s.off, FILE_BYTES - SF_TAIL);
    ASSERT_EQ(s.r2, FILE_BYTES);
    ASSERT_EQ(s.got, 2 * (size_t)FILE_BYTES - SF_SKIP - SF_TAIL);
    evl_future_unref(w);
    evl_future_unref(r);
    ASSERT_EQ(evl_close(s.sv[1]), 0);
    close(s.in);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* The fallback: in_fd a pipe (not a regular file), a *blocking* one, fed
 * by another task of the same loop: if the fallback read it without waiting
 * for readability the loop would hang. */
#define PIPE_BYTES (3u << 20)

static intptr_t pipe_feeder(void *arg)
{
    int fd = *(int *)arg;
    unsigned char *b = pattern(PIPE_BYTES);
    size_t off = 0;
    while (off < PIPE_BYTES) {
        ssize_t w = evl_write(fd, b + off, PIPE_BYTES - off < 10000 ? PIPE_BYTES - off : 10000);
        ASSERT_GT(w, 0);
        off += (size_t)w;
    }
    free(b);
    ASSERT_EQ(evl_close(fd), 0);
    return 0;
}

static intptr_t sf_pipe_sender(void *arg)
{
    struct sf *s = arg;
    off_t off = 0;
    ASSERT_ERR(evl_sendfile(s->sv[0], s->in, &off, 10), -ESPIPE); /* a pipe has no offsets */
    s->r1 = evl_sendfile(s->sv[0], s->in, NULL, 1000);
    s->r2 = evl_sendfile(s->sv[0], s->in, NULL, 0);
    ASSERT_EQ(evl_close(s->sv[0]), 0);
    return 0;
}

static intptr_t sf_pipe_reader(void *arg)
{
    struct sf *s = arg;
    s->got = read_check(s->sv[1], PIPE_BYTES + 1, 0, 8192);
    return 0;
}

TEST_IMPL(io_sendfile_fallback_pipe)
{
    evl_loop *loop = test_loop(0, 0);
    int p[2];
    ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
    nonblocking(p[1]);                /* the read end stays blocking */
    struct sf s = { .in = p[0] };
    unix_pair(s.sv, 65536);
    evl_task *f = evl_spawn(loop, "feeder", pipe_feeder, &p[1]);
    evl_task *w = evl_spawn(loop, "sendfile", sf_pipe_sender, &s);
    evl_task *r = evl_spawn(loop, "reader", sf_pipe_reader, &s);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(evl_future_result(f), 0);
    ASSERT_EQ(evl_future_result(w), 0);
    ASSERT_EQ(evl_future_result(r), 0);
    ASSERT_EQ(s.r1, 1000);
    ASSERT_EQ(s.r2, PIPE_BYTES - 1000);
    ASSERT_EQ(s.got, PIPE_BYTES);     /* every byte, in order, then EOF */
    evl_future_unref(f);
    evl_future_unref(w);
    evl_future_unref(r);
    ASSERT_EQ(evl_close(s.sv[1]), 0);
    ASSERT_EQ(evl_close(p[0]), 0);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* The peer went away: sendfile(2) raises SIGPIPE on a socket whose peer
 * closed; evl_sendfile returns -EPIPE instead and the process lives.  Then
 * a TCP peer that resets mid-transfer; and a blocking out_fd is refused. */
struct sf_gone {
    int unix_sv[2], tcp_sv[2];
    int in;
    off_t off;
    ssize_t r_unix, r_tcp, r_blocking;
};

static intptr_t sf_gone_sender(void *arg)
{
    struct sf_gone *s = arg;
    s->r_unix = evl_sendfile(s->unix_sv[0], s->in, NULL, 0);
    s->off = 0;
    s->r_tcp = evl_sendfile(s->tcp_sv[0], s->in, &s->off, 0);
    int fl = fcntl(s->unix_sv[0], F_GETFL);
    ASSERT_EQ(fcntl(s->unix_sv[0], F_SETFL, fl & ~O_NONBLOCK), 0);
    s->r_blocking = evl_sendfile(s->unix_sv[0], s->in, NULL, 0);
    return 0;
}

static intptr_t sf_gone_reader(void *arg)
{
    struct sf_gone *s = arg;
    ASSERT_EQ(read_check(s->tcp_sv[1], RESET_READ, 0, 4096), RESET_READ);
    reset_close(s->tcp_sv[1]);
    return 0;
}

TEST_IMPL(io_sendfile_peer_gone)
{
    default_sigpipe();
    evl_loop *loop = test_loop(0, 0);
    struct sf_gone s = { .in = pattern_file(FILE_BYTES) };
    unix_pair(s.unix_sv, 0);
    ASSERT_EQ(close(s.unix_sv[1]), 0);
    tcp_pair(s.tcp_sv);
    evl_task *w = evl_spawn(loop, "sendfile", sf_gone_sender, &s);
    evl_task *r = evl_spawn(loop, "reader", sf_gone_reader, &s);
    ASSERT_EQ(evl_run(loop), 0);
    ASSERT_EQ(evl_future_result(w), 0);
    ASSERT_EQ(evl_future_result(r), 0);
    ASSERT_ERR(s.r_unix, -EPIPE);
    ASSERT_TRUE(s.r_tcp == -ECONNRESET || s.r_tcp == -EPIPE);
    ASSERT_GE(s.off, RESET_READ);     /* what went out before the reset */
    ASSERT_LT(s.off, FILE_BYTES);
    ASSERT_ERR(s.r_blocking, EVL_EINVAL);
    assert_sigpipe_clean();
    evl_future_unref(w);
    evl_future_unref(r);
    ASSERT_EQ(evl_close(s.unix_sv[0]), 0);
    ASSERT_EQ(evl_close(s.tcp_sv[0]), 0);
    close(s.in);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* --------------------------------------------------------- getaddrinfo */

struct gai {
    evl_task *lookup;
    int rc;
    int loopback;                     /* answers that are 127.0.0.1 or ::1 */
    int ticks;                        /* steps of the other task meanwhile */
    int in_executor;                  /* ... that saw lookup await the pool */
};

static intptr_t gai_lookup(void *arg)
{
    struct gai *g = arg;
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM };
    struct addrinfo *res = (struct addrinfo *)1;
    g->rc = evl_getaddrinfo("localhost", "80", &hints, &res);
    if (g->rc != 0) {
        ASSERT_NULL(res);
        return g->rc;
    }
    ASSERT_NOT_NULL(res);
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        ASSERT_EQ(a->ai_socktype, SOCK_STREAM);
        if (a->ai_family == AF_INET) {
            struct sockaddr_in *in = (struct sockaddr_in *)a->ai_addr;
            ASSERT_EQ(ntohs(in->sin_port), 80);
            g->loopback += in->sin_addr.s_addr == htonl(INADDR_LOOPBACK);
        } else if (a->ai_family == AF_INET6) {
            struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)a->ai_addr;
            ASSERT_EQ(ntohs(in6->sin6_port), 80);
            g->loopback += IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr);
        }
    }
    freeaddrinfo(res);
    return 0;
}

static intptr_t gai_other(void *arg)
{
    struct gai *g = arg;
    while (!evl_future_done(g->lookup)) {
        evl__task *t = evl__task_of(g->lookup);
        if (t->tstate == EVL_TASK_SUSPENDED && t->fut_waiter &&
            t->fut_waiter->kind == EVL__FUT_EXEC)
            g->in_executor++;
        g->ticks++;
        evl_yield();
    }
    return 0;
}

TEST_IMPL(io_getaddrinfo_localhost)
{
    evl_loop *loop = test_loop(0, 0);
    struct gai g = { 0 };
    g.lookup = evl_spawn(loop, "lookup", gai_lookup, &g);
    evl_task *o = evl_spawn(loop, "other", gai_other, &g);
    ASSERT_EQ(evl_run(loop), 0);
    if (g.rc != 0)
        FAIL("evl_getaddrinfo(localhost): %d (%s)", g.rc,
             evl_is_eai(g.rc) ? gai_strerror(evl_eai_code(g.rc)) : evl_strerror(g.rc));
    ASSERT_GT(g.loopback, 0);
    /* The other task ran while the lookup was suspended on the executor. */
    ASSERT_GT(g.in_executor, 0);
    ASSERT_GE(g.ticks, g.in_executor);
    ASSERT_EQ(evl_future_result(g.lookup), 0);
    evl_future_unref(g.lookup);
    evl_future_unref(o);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

static intptr_t gai_errors(void *arg)
{
    struct addrinfo *res = (struct addrinfo *)1;
    struct addrinfo hints = { .ai_flags = AI_NUMERICHOST, .ai_socktype = SOCK_DGRAM };
    /* Numeric only: no resolver is asked, the answer is EAI_NONAME. */
    int rc = evl_getaddrinfo("not-a-number", "53", &hints, &res);
    ASSERT_TRUE(evl_is_eai(rc));
    ASSERT_EQ(evl_eai_code(rc), EAI_NONAME);
    ASSERT_NULL(res);
    ASSERT_STR_EQ(gai_strerror(evl_eai_code(rc)), gai_strerror(EAI_NONAME));
    hints.ai_flags = 0x7fff0000;      /* no such flags */
    rc = evl_getaddrinfo("127.0.0.1", "53", &hints, &res);
    ASSERT_TRUE(evl_is_eai(rc));
    ASSERT_EQ(evl_eai_code(rc), EAI_BADFLAGS);
    ASSERT_FALSE(evl_is_eai(EVL_ECANCELED));
    ASSERT_FALSE(evl_is_eai(-ECONNRESET));
    ASSERT_FALSE(evl_is_eai(EVL_ENOTTASK));
    ASSERT_ERR(evl_getaddrinfo("127.0.0.1", "53", NULL, NULL), EVL_EINVAL);
    /* Numeric host and service: the same answer getaddrinfo(3) gives. */
    hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
    ASSERT_ERR(evl_getaddrinfo("127.0.0.2", "8080", &hints, &res), 0);
    ASSERT_NOT_NULL(res);
    ASSERT_EQ(res->ai_family, AF_INET);
    struct sockaddr_in *in = (struct sockaddr_in *)res->ai_addr;
    ASSERT_EQ(ntohs(in->sin_port), 8080);
    ASSERT_EQ(ntohl(in->sin_addr.s_addr), 0x7f000002);
    freeaddrinfo(res);
    return 0;
}

TEST_IMPL(io_getaddrinfo_errors)
{
    struct addrinfo *res = NULL;
    ASSERT_ERR(evl_getaddrinfo("localhost", NULL, NULL, &res), EVL_ENOTTASK);
    evl_loop *loop = test_loop(0, 0);
    evl_task *t = evl_spawn(loop, "errors", gai_errors, NULL);
    ASSERT_EQ(evl_run_until_complete(loop, t), 0);
    evl_future_unref(t);
    ASSERT_LOOP_FREE(loop, 0);
    return 0;
}

/* Cancelled while the lookup runs: the task ends CANCELLED at once, the
 * request and its answer are freed when the job ends (heap back to where it
 * was), and nothing is reported leaked. */
static intptr_t gai_cancelled(void *arg)
{
    struct addrinfo *res = (struct addrinfo *)1;
    int rc = evl_getaddrinfo("localhost", "http", NULL, &res);
    ASSERT_ERR(rc, EVL_ECANCELED);
    ASSERT_NULL(res);
    return rc;
}

static intptr_t gai_canceller(void *arg)
{
    evl_task *t = arg;
    evl_yield();                      /* it submitted the job and waits */
    ASSERT_EQ(evl_task_state(t), EVL_TASK_SUSPENDED);
    ASSERT_EQ(evl__task_of(t)->fut_waiter->kind, EVL__FUT_EXEC);
    ASSERT_EQ(evl_cancel(t), 1);
    return 0;
}

TEST_IMPL(io_getaddrinfo_cancel)
{
    /* glibc loads its NSS modules once per process, with memory it keeps:
     * warm it up before counting. */
    struct addrinfo *warm = NULL;
    if (getaddrinfo("localhost", "http", NULL, &warm) == 0)
        freeaddrinfo(warm);
    size_t heap0 = test_heap_in_use();
    evl_loop *loop = test_loop(0, 0);
    evl_task *t = evl_spawn(loop, "lookup", gai_cancelled, NULL);
    evl_task *c = evl_spawn(loop, "canceller", gai_canceller, t);
    ASSERT_EQ(evl_run(loop), 0);          /* returns once the job ended too */
    ASSERT_EQ(evl_task_state(t), EVL_TASK_CANCELLED);
    ASSERT_EQ(evl_future_result(c), 0);
    evl_future_unref(t);
    evl_future_unref(c);
    ASSERT_LOOP_FREE(loop, 0);
    ASSERT_HEAP_BACK_TO(heap0);
    return 0;
}

/* ------------------------------------------------- connect with timeout */

/* The pattern evl.h documents for evl_connect, verbatim. */
struct conn {
    int fd;
    const struct sockaddr *sa;
    socklen_t len;
};

static intptr_t connect_task(void *arg)
{
    struct conn *c = arg;
    return evl_connect(c->fd, c->sa, c->len);
}

static intptr_t connect_timeout(int fd, const struct sockaddr *sa, socklen_t salen,
                                uint64_t timeout)
{
    struct conn c = { fd, sa, salen };
    evl_task *t = evl_spawn(NULL, "connect", connect_task, &c);
    intptr_t r = t ? evl_wait_for(t, timeout) : EVL_ENOMEM;
    if (t) {
        /* wait_for returned: the connect task has ended, either way. */
        ASSERT_TRUE(evl_future_done(t));
        evl_future_unref(t);
    }
    return r;
}

struct ct {
    struct sockaddr_in full, open;
    intptr_t r_full, r_open;
};

static intptr_t ct_client(void *arg)
{
    struct ct *s = arg;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    s->r_full = connect_timeout(fd, (struct sockaddr *)&s->full, sizeof(s->full), EVL_MS(100));
    ASSERT_EQ(evl_close(fd), 0);
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    s->r_open = connect_timeout(fd, (struct sockaddr *)&s->open, sizeof(s->open), EVL_SEC(10));
    ASSERT_EQ(evl_close(fd), 0);
    return 0;
}

static int listener(struct sockaddr_in *a, int backlog)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    memset(a, 0, sizeof(*a));
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(*a);
    ASSERT_EQ(bind(fd, (struct sockaddr *)a, sizeof(*a)), 0);
    ASSERT_EQ(listen(fd, backlog), 0);
    ASSERT_EQ(getsockname(fd, (struct sockaddr *)a, &len), 0);
    return fd;
}

/* Connections queued on a listening socket: TCP_INFO reports its accept
 * queue's length in tcpi_unacked (and its limit in tcpi_sacked). */
static unsigned accept_queue(int lfd)
{
    struct tcp_info ti;
    socklen_t len = sizeof(ti);
    ASSERT_EQ(getsockopt(lfd, IPPROTO_TCP, TCP_INFO, &ti, &len), 0);
    return ti.tcpi_unacked;
}

TEST_IMPL(io_connect_timeout)
{
    /* A listener whose accept queue is full drops SYNs: a connect to it
     * stays in progress however long one waits.  Backlog 1 holds 2. */
    struct ct s;
    int full = listener(&s.full, 1);
    int fillers[2];
    for (int i = 0; i < 2; i++) {
        fillers[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        ASSERT_GE(fillers[i], 0);
        int rc = connect(fillers[i], (struct sockaddr *)&s.full, sizeof(s.full));
        ASSERT_TRUE(rc == 0 || errno == EINPROGRESS);
        /* Wait (bounded) until the kernel queued it: a setup wait, not an
         * assertion on time. */
        for (int ms = 0; accept_queue(full) < (unsigned)i + 1; ms++) {
            if (ms == 5000)
                FAIL("the listener's accept queue holds %u connections, not %d",
                     accept_queue(full), i + 1);
            poll(NULL, 0, 1);
        }
    }
    int open = listener(&s.open, 16);
    evl_loop *loop = test_loop(0, 0);
    evl_task *c = evl_spawn(loop, "client", ct_client, &s);
    ASSERT_EQ(evl_run_until_complete(loop, c), 0);
    ASSERT_ERR(s.r_full, EVL_ETIMEDOUT);
    ASSERT_ERR(s.r_open, 0);
    evl_future_unref(c);
    ASSERT_LOOP_FREE(loop, 0);
    close(fillers[0]);
    close(fillers[1]);
    close(full);
    close(open);
    return 0;
}
