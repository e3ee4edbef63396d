/*
 * poll_epoll.c -- the poller: epoll behind a handful of functions (like
 * Redis's ae_epoll.c).  Level-triggered.  Interest is kept armed after a
 * wait completes (the next wait on the fd usually follows at once) and
 * dropped lazily when an event arrives that nobody waits for; so an fd that
 * was awaited must be closed with evl_close(), which forgets it.
 *
 * Level-triggered is what makes the speculative read of loop/ORDERING.md
 * rule 16 exact: a poll reports every armed fd that is ready when it runs,
 * so "not reported" means "not readable", and results set aside after a
 * missed speculation are reported again by the next poll.
 */
#define _GNU_SOURCE
#include "evl-internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#define EVL__MAX_EVENTS 256

int evl__poll_init(evl_loop *loop)
{
    loop->epfd = epoll_create1(EPOLL_CLOEXEC);
    return loop->epfd < 0 ? -errno : 0;
}

void evl__poll_release(evl_loop *loop)
{
    if (loop->epfd >= 0)
        close(loop->epfd);
    loop->epfd = -1;
    free(loop->fds);
    loop->fds = NULL;
    loop->nfds = 0;
}

static int evl__fd_grow(evl_loop *loop, int fd)
{
    if (fd < loop->nfds)
        return 0;
    int n = loop->nfds ? loop->nfds : 64;
    while (n <= fd)
        n *= 2;
    evl__fdent *a = realloc(loop->fds, (size_t)n * sizeof(*a));
    if (!a)
        return EVL_ENOMEM;
    memset(a + loop->nfds, 0, (size_t)(n - loop->nfds) * sizeof(*a));
    loop->fds = a;
    loop->nfds = n;
    return 0;
}

evl__fdent *evl__fd_get_slow(evl_loop *loop, int fd)
{
    return evl__fd_grow(loop, fd) < 0 ? NULL : &loop->fds[fd];
}

static uint32_t evl__epoll_bits(uint32_t events)
{
    return (events & EVL_READABLE ? EPOLLIN : 0) | (events & EVL_WRITABLE ? EPOLLOUT : 0);
}

/* Make fd's registered interest exactly `events` (EVL_READABLE|WRITABLE). */
int evl__poll_arm(evl_loop *loop, int fd, uint32_t events)
{
    int rc = evl__fd_grow(loop, fd);
    if (rc < 0)
        return rc;
    evl__fdent *e = &loop->fds[fd];
    if (e->armed == events)
        return 0;
    struct epoll_event ev = { .events = evl__epoll_bits(events), .data.fd = fd };
    int op = !e->armed ? EPOLL_CTL_ADD : events ? EPOLL_CTL_MOD : EPOLL_CTL_DEL;
    if (epoll_ctl(loop->epfd, op, fd, &ev) < 0) {
        /* Our view was stale (fd closed and reused without evl_close). */
        if (op == EPOLL_CTL_MOD && errno == ENOENT)
            op = EPOLL_CTL_ADD;
        else if (op == EPOLL_CTL_ADD && errno == EEXIST)
            op = EPOLL_CTL_MOD;
        else if (op == EPOLL_CTL_DEL && (errno == ENOENT || errno == EBADF))
            op = -1;
        else
            return -errno;
        if (op >= 0 && epoll_ctl(loop->epfd, op, fd, &ev) < 0)
            return -errno;
    }
    e->armed = events;
    return 0;
}

/* Forget fd (evl_close): drop interest, wake its waiters with EBADF. */
void evl__poll_forget(evl_loop *loop, int fd)
{
    if (fd < 0 || fd >= loop->nfds)
        return;
    evl__fdent *e = &loop->fds[fd];
    evl__iowait *w[2] = { e->reader, e->writer };
    e->reader = e->writer = NULL;
    for (int i = 0; i < 2; i++) {
        if (!w[i] || (i == 1 && w[1] == w[0]))
            continue;
        w[i]->revents = 0;
        if (!evl__handle_queued(&w[i]->h))
            evl__queue_push(&loop->ready, &w[i]->h);
    }
    e->rd_spec = 0;                   /* a new file may get this number */
    if (e->armed) {
        struct epoll_event ev = { 0 };
        epoll_ctl(loop->epfd, EPOLL_CTL_DEL, fd, &ev);
        e->armed = 0;
    }
}

/* Queue w's handle (its task resumes one iteration later); returns the
 * directions it waited for. */
static unsigned evl__fire(evl_loop *loop, evl__fdent *e, evl__iowait *w, unsigned ready)
{
    w->revents = ready & w->events;
    if (e->reader == w)
        e->reader = NULL;
    if (e->writer == w)
        e->writer = NULL;
    e->grace |= w->events;
    evl__queue_push(&loop->ready, &w->h);
    return w->events;
}

static void evl__wakefd_read(evl_loop *loop)
{
    uint64_t v;
    ssize_t r = read(loop->wakefd, &v, sizeof(v));
    (void)r;                          /* EAGAIN: already read */
}

static void evl__dispatch(evl_loop *loop, int fd, uint32_t ev)
{
    evl__fdent *e = &loop->fds[fd];
    if (e->internal)                  /* the wakeup eventfd: read in evl__poll */
        return;
    evl__iowait *rd = e->reader, *wr = e->writer;
    if (EVL__LIKELY(ev == EPOLLIN && rd && !wr)) {
        /* The common case, what the general path below does for it: the
         * reader fires (its events include READABLE), and nothing is left
         * unwanted (fired covers READABLE). */
        rd->revents = EVL_READABLE;
        e->reader = NULL;
        e->grace |= rd->events;
        evl__queue_push(&loop->ready, &rd->h);
        return;
    }
    unsigned ready = (ev & (EPOLLIN | EPOLLRDHUP) ? EVL_READABLE : 0) |
                     (ev & EPOLLOUT ? EVL_WRITABLE : 0) |
                     (ev & (EPOLLERR | EPOLLHUP) ? EVL_READABLE | EVL_WRITABLE : 0);
    unsigned fired = 0;
    if (rd && (ready & rd->events))
        fired |= evl__fire(loop, e, rd, ready);
    if (wr && wr != rd && (ready & wr->events))
        fired |= evl__fire(loop, e, wr, ready);
    /* Readiness nobody waits for: the task woken last time by this fd
     * resumes one iteration after its wake-up and will likely wait again,
     * so tolerate that once (grace) before dropping the interest. */
    unsigned waiting = (e->reader ? e->reader->events : 0) | (e->writer ? e->writer->events : 0);
    unsigned unwanted = ready & e->armed & ~fired & ~waiting;
    unsigned forgiven = unwanted & e->grace;
    e->grace &= ~forgiven;
    unwanted &= ~forgiven;
    if (unwanted)
        evl__poll_arm(loop, fd, e->armed & ~unwanted);
}

/* Did a poll that returned evs[0..n) report w's fd ready for w?  A poll
 * that failed (EINTR) or filled the array may have left it out, so only a
 * complete one says no. */
static bool evl__spec_maybe_ready(const struct epoll_event *evs, int n, const evl__iowait *w)
{
    if (n < 0 || n >= EVL__MAX_EVENTS)
        return true;
    for (int i = 0; i < n; i++)
        if (evs[i].data.fd == w->fd)
            return (evs[i].events & (EPOLLIN | EPOLLRDHUP | EPOLLERR | EPOLLHUP)) != 0;
    return false;
}

void evl__poll_spec_resume(evl_loop *loop)
{
    evl__iowait *w = loop->spec_missed_w;
    loop->spec_missed_w = NULL;
    evl__fdent *e = &loop->fds[w->fd];
    e->rd_spec = 0;                   /* data came: read first next time */
    e->grace |= w->events;            /* it will likely wait again soon */
    if (e->reader == w)
        e->reader = NULL;
    if (e->writer == w)
        e->writer = NULL;
    w->revents = EVL_READABLE;
    /* The task is the only waiter of its stack future: completing it
     * queues the task's wakeup, which runs here and now instead of in the
     * next batch, as if the read had not waited (w is gone after it). */
    evl__waiter *wt = w->fut.cbs_head;
    evl__future_complete(&w->fut, EVL_FUTURE_DONE, EVL_READABLE);
    assert(wt && !wt->next && wt->h.run == evl__task_wakeup_run);
    evl__queue_remove(&wt->h);
    loop->io_quiet = 0;
    wt->h.run(&wt->h);
}

int evl__poll(evl_loop *loop, int64_t timeout_ns)
{
    struct epoll_event evs[EVL__MAX_EVENTS];
    int n;
    if (timeout_ns <= 0) {
        /* No timeout or a zero one: epoll_wait says the same, without
         * epoll_pwait2's timespec to copy in and check (0.4 % of
         * examples/http_server's CPU under wrk, perf). */
        n = epoll_wait(loop->epfd, evs, EVL__MAX_EVENTS, timeout_ns < 0 ? -1 : 0);
    } else {
        struct timespec ts = { .tv_sec = timeout_ns / 1000000000,
                               .tv_nsec = timeout_ns % 1000000000 };
        n = epoll_pwait2(loop->epfd, evs, EVL__MAX_EVENTS, &ts, NULL);
        if (n < 0 && errno == ENOSYS) { /* kernels before 5.11: round up to ms */
            int ms = (int)((timeout_ns + 999999) / 1000000);
            n = epoll_wait(loop->epfd, evs, EVL__MAX_EVENTS, ms);
        }
    }
    loop->poll_whole = n >= 0 && n < EVL__MAX_EVENTS;
    evl__iowait *spec = loop->spec;
    if (spec) {                       /* loop/ORDERING.md rule 16 */
        loop->spec = NULL;
        if (evl__spec_maybe_ready(evs, n, spec)) {
            /* Set everything aside (level-triggered: reported again). */
            loop->spec_missed++;
            loop->spec_missed_w = spec;
            loop->poll_whole = 0;
            return EVL__POLL_SPEC_MISSED;
        }
    }
    if (n <= 0)
        return 0;                     /* EINTR counts as no event */
    /* Threadsafe posts first: asyncio appends them to _ready when made,
     * before the poll's I/O callbacks.  The wakeup eventfd is read before
     * they are taken, never after: a post made in between would otherwise
     * have its wakeup consumed with nothing to take it, and a loop whose
     * last post (or evl_loop_release) fell there slept forever. */
    for (int i = 0; i < n; i++)
        if (evs[i].data.fd == loop->wakefd)
            evl__wakefd_read(loop);
    evl__drain_posted(loop);
    for (int i = 0; i < n; i++)
        evl__dispatch(loop, evs[i].data.fd, evs[i].events);
    return n;
}
