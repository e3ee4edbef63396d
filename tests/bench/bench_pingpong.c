/*
 * bench_pingpong.c -- ping-pong over a unix socketpair on one thread: round
 * trips per second for libevl (two tasks, evl_send/evl_recv), a hand-written
 * level-triggered epoll loop, libev (ev_io), libuv (uv_pipe_t stream with
 * uv_try_write, and uv_poll_t with read/write in the callback).
 *
 * One end sends a MSG-byte message, the other reads it whole and sends it
 * back; a round trip ends when the first end has read the echo.  Both ends
 * live in the same loop, so each round trip is two trips through the poller.
 * The callback-based peers read once per readiness report and write in the
 * callback; libevl's tasks try the syscall first and await readiness on
 * EAGAIN, as asyncio's sock_recv does.
 *
 * The same file built against the library without probes gives
 * bench_pingpong_noprobes (impl name "evl-noprobes", see CMakeLists.txt);
 * run.sh alternates the two binaries.  See tests/bench/README.md.
 */
#include "bench.h"

#include <ev.h>
#include <evl.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#ifndef BENCH_EVL_IMPL
#define BENCH_EVL_IMPL "evl"
#endif

#define MSG 64

static long rounds;

static void make_pair(int sv[2])
{
    BENCH_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv) == 0);
}

/* The per-end state of the callback-based peers: bytes of the current
 * message received so far, and round trips completed (ping end only). */
typedef struct end {
    int fd;
    int is_ping;
    size_t got;
    long done;
    char buf[MSG];
} end;

/* Read what is there (one syscall); return 1 when a whole message is in. */
static int end_read(end *e)
{
    ssize_t n = read(e->fd, e->buf + e->got, MSG - e->got);
    if (n < 0 && errno == EAGAIN)
        return 0;
    BENCH_CHECK(n > 0);
    e->got += (size_t)n;
    if (e->got < MSG)
        return 0;
    e->got = 0;
    return 1;
}

static void end_write(end *e)
{
    BENCH_CHECK_EQ(write(e->fd, e->buf, MSG), MSG);
}

/* A whole message arrived at e: echo it, or count the round trip and start
 * the next one.  Returns 1 when the run is over. */
static int end_on_message(end *e)
{
    if (e->is_ping && ++e->done == rounds)
        return 1;
    end_write(e);
    return 0;
}

static double per_second(uint64_t t0, uint64_t t1)
{
    return (double)rounds * 1e9 / (double)(t1 - t0);
}

/* ------------------------------------------------------------- libevl */

static ssize_t evl_recv_full(int fd, char *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        ssize_t n = evl_recv(fd, buf + got, len - got, 0);
        if (n <= 0)
            return n < 0 ? n : -EPIPE;
        got += (size_t)n;
    }
    return (ssize_t)got;
}

static intptr_t evl_ping(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[MSG] = {0};
    for (long i = 0; i < rounds; i++) {
        ssize_t n = evl_send(fd, buf, MSG, 0);
        if (n != MSG)
            return n < 0 ? n : -EIO;
        n = evl_recv_full(fd, buf, MSG);
        if (n != MSG)
            return n < 0 ? n : -EIO;
    }
    return 0;
}

static intptr_t evl_pong(void *arg)
{
    int fd = (int)(intptr_t)arg;
    char buf[MSG];
    for (long i = 0; i < rounds; i++) {
        ssize_t n = evl_recv_full(fd, buf, MSG);
        if (n != MSG)
            return n < 0 ? n : -EIO;
        n = evl_send(fd, buf, MSG, 0);
        if (n != MSG)
            return n < 0 ? n : -EIO;
    }
    return 0;
}

static double run_evl(void)
{
    int sv[2];
    make_pair(sv);
    evl_loop *loop = evl_loop_new(NULL);
    BENCH_CHECK(loop != NULL);

    uint64_t t0 = bench_wall_ns();
    evl_task *pong = evl_spawn(loop, "pong", evl_pong, (void *)(intptr_t)sv[1]);
    evl_task *ping = evl_spawn(loop, "ping", evl_ping, (void *)(intptr_t)sv[0]);
    BENCH_CHECK(pong != NULL && ping != NULL);
    BENCH_CHECK_EQ(evl_run(loop), 0);
    uint64_t t1 = bench_wall_ns();

    intptr_t r1 = evl_future_result(ping), r2 = evl_future_result(pong);
    if (r1 != 0 || r2 != 0)
        BENCH_DIE("evl ping-pong: ping %s, pong %s", evl_strerror((int)r1),
                  evl_strerror((int)r2));
    evl_future_unref(ping);
    evl_future_unref(pong);
    BENCH_CHECK_EQ(evl_loop_free(loop), 0);
    close(sv[0]);
    close(sv[1]);
    return per_second(t0, t1);
}

/* ------------------------------------------------------------- epoll */

static double run_epoll(void)
{
    int sv[2];
    make_pair(sv);
    end e[2] = {{.fd = sv[0], .is_ping = 1}, {.fd = sv[1]}};
    int ep = epoll_create1(EPOLL_CLOEXEC);
    BENCH_CHECK(ep >= 0);
    for (int i = 0; i < 2; i++) {
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &e[i]};
        BENCH_CHECK(epoll_ctl(ep, EPOLL_CTL_ADD, e[i].fd, &ev) == 0);
    }

    uint64_t t0 = bench_wall_ns();
    end_write(&e[0]);
    for (int over = 0; !over;) {
        struct epoll_event evs[8];
        int n = epoll_wait(ep, evs, 8, -1);
        BENCH_CHECK(n >= 0 || errno == EINTR);
        for (int i = 0; i < n && !over; i++) {
            end *x = evs[i].data.ptr;
            if (end_read(x))
                over = end_on_message(x);
        }
    }
    uint64_t t1 = bench_wall_ns();

    BENCH_CHECK_EQ(e[0].done, rounds);
    close(ep);
    close(sv[0]);
    close(sv[1]);
    return per_second(t0, t1);
}

/* --------------------------------------------------------------- libev */

typedef struct ev_end {
    ev_io w;
    end e;
} ev_end;

static void ev_end_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)revents;
    ev_end *x = (ev_end *)w;
    if (end_read(&x->e) && end_on_message(&x->e))
        ev_break(loop, EVBREAK_ALL);
}

static double run_libev(void)
{
    int sv[2];
    make_pair(sv);
    struct ev_loop *loop = ev_loop_new(EVFLAG_AUTO);
    BENCH_CHECK(loop != NULL);
    ev_end x[2] = {{.e = {.fd = sv[0], .is_ping = 1}}, {.e = {.fd = sv[1]}}};
    for (int i = 0; i < 2; i++) {
        ev_io_init(&x[i].w, ev_end_cb, x[i].e.fd, EV_READ);
        ev_io_start(loop, &x[i].w);
    }

    uint64_t t0 = bench_wall_ns();
    end_write(&x[0].e);
    ev_run(loop, 0);
    uint64_t t1 = bench_wall_ns();

    BENCH_CHECK_EQ(x[0].e.done, rounds);
    for (int i = 0; i < 2; i++)
        ev_io_stop(loop, &x[i].w);
    ev_loop_destroy(loop);
    close(sv[0]);
    close(sv[1]);
    return per_second(t0, t1);
}

/* ------------------------------------------------- libuv: uv_pipe_t */

typedef struct uv_end {
    uv_pipe_t pipe;
    end e;
    char rbuf[65536]; /* libuv's suggested read size: a short read ends the
                       * read loop without an extra EAGAIN read */
} uv_end;

static void uv_end_alloc(uv_handle_t *h, size_t hint, uv_buf_t *buf)
{
    (void)hint;
    uv_end *x = h->data;
    *buf = uv_buf_init(x->rbuf, sizeof x->rbuf);
}

static void uv_end_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    (void)buf;
    uv_end *x = s->data;
    if (nread == 0)
        return;
    if (nread < 0)
        BENCH_DIE("libuv read: %s", uv_strerror((int)nread));
    x->e.got += (size_t)nread; /* strict alternation: never past MSG */
    if (x->e.got < MSG)
        return;
    BENCH_CHECK_EQ(x->e.got, MSG);
    x->e.got = 0;
    if (x->e.is_ping && ++x->e.done == rounds) {
        uv_stop(s->loop);
        return;
    }
    uv_buf_t out = uv_buf_init(x->e.buf, MSG);
    BENCH_CHECK_EQ(uv_try_write(s, &out, 1), MSG);
}

static double run_libuv(void)
{
    int sv[2];
    make_pair(sv);
    uv_loop_t loop;
    BENCH_CHECK_EQ(uv_loop_init(&loop), 0);
    uv_end *x = calloc(2, sizeof *x);
    BENCH_CHECK(x != NULL);
    x[0].e = (end){.fd = sv[0], .is_ping = 1};
    x[1].e = (end){.fd = sv[1]};
    for (int i = 0; i < 2; i++) {
        BENCH_CHECK_EQ(uv_pipe_init(&loop, &x[i].pipe, 0), 0);
        BENCH_CHECK_EQ(uv_pipe_open(&x[i].pipe, x[i].e.fd), 0);
        x[i].pipe.data = &x[i];
        BENCH_CHECK_EQ(uv_read_start((uv_stream_t *)&x[i].pipe, uv_end_alloc, uv_end_read), 0);
    }

    uint64_t t0 = bench_wall_ns();
    uv_buf_t out = uv_buf_init(x[0].e.buf, MSG);
    BENCH_CHECK_EQ(uv_try_write((uv_stream_t *)&x[0].pipe, &out, 1), MSG);
    uv_run(&loop, UV_RUN_DEFAULT);
    uint64_t t1 = bench_wall_ns();

    BENCH_CHECK_EQ(x[0].e.done, rounds);
    for (int i = 0; i < 2; i++)
        uv_close((uv_handle_t *)&x[i].pipe, NULL); /* closes the fds */
    uv_run(&loop, UV_RUN_DEFAULT);
    BENCH_CHECK_EQ(uv_loop_close(&loop), 0);
    free(x);
    return per_second(t0, t1);
}

/* ------------------------------------------------- libuv: uv_poll_t */

typedef struct uvp_end {
    uv_poll_t poll;
    end e;
} uvp_end;

static void uvp_end_cb(uv_poll_t *p, int status, int events)
{
    (void)events;
    BENCH_CHECK_EQ(status, 0);
    uvp_end *x = (uvp_end *)p;
    if (end_read(&x->e) && end_on_message(&x->e))
        uv_stop(p->loop);
}

static double run_libuv_poll(void)
{
    int sv[2];
    make_pair(sv);
    uv_loop_t loop;
    BENCH_CHECK_EQ(uv_loop_init(&loop), 0);
    uvp_end x[2] = {{.e = {.fd = sv[0], .is_ping = 1}}, {.e = {.fd = sv[1]}}};
    for (int i = 0; i < 2; i++) {
        BENCH_CHECK_EQ(uv_poll_init(&loop, &x[i].poll, x[i].e.fd), 0);
        BENCH_CHECK_EQ(uv_poll_start(&x[i].poll, UV_READABLE, uvp_end_cb), 0);
    }

    uint64_t t0 = bench_wall_ns();
    end_write(&x[0].e);
    uv_run(&loop, UV_RUN_DEFAULT);
    uint64_t t1 = bench_wall_ns();

    BENCH_CHECK_EQ(x[0].e.done, rounds);
    for (int i = 0; i < 2; i++)
        uv_close((uv_handle_t *)&x[i].poll, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    BENCH_CHECK_EQ(uv_loop_close(&loop), 0);
    close(sv[0]);
    close(sv[1]);
    return per_second(t0, t1);
}

int main(int argc, char **argv)
{
    bench_opts o;
    bench_parse(&o, argc, argv);
    rounds = bench_count(&o, 200000, 1000);

    bench_series evl = {.bench = "pingpong", .impl = BENCH_EVL_IMPL, .unit = "rt/s"};
    bench_series ep = {.bench = "pingpong", .impl = "epoll", .unit = "rt/s"};
    bench_series ev = {.bench = "pingpong", .impl = "libev", .unit = "rt/s"};
    bench_series uv = {.bench = "pingpong", .impl = "libuv", .unit = "rt/s"};
    bench_series uvp = {.bench = "pingpong", .impl = "libuv-poll", .unit = "rt/s"};
    for (int r = 0; r < o.repeats; r++) {
        if (bench_want(&o, BENCH_EVL_IMPL))
            bench_add(&evl, run_evl());
        if (bench_want(&o, "epoll"))
            bench_add(&ep, run_epoll());
        if (bench_want(&o, "libev"))
            bench_add(&ev, run_libev());
        if (bench_want(&o, "libuv"))
            bench_add(&uv, run_libuv());
        if (bench_want(&o, "libuv-poll"))
            bench_add(&uvp, run_libuv_poll());
    }
    bench_print(&evl);
    bench_print(&ep);
    bench_print(&ev);
    bench_print(&uv);
    bench_print(&uvp);
    return 0;
}
