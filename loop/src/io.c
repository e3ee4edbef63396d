/*
 * io.c -- awaiting fd readiness and the socket helpers built on it.
 *
 * A wait lives in the awaiting task's frame: an evl__iowait whose handle the
 * poller queues when the fd is ready; that handle completes the wait's
 * future in the run phase and the task resumes one iteration later, as
 * asyncio's reader callbacks do.
 */
#define _GNU_SOURCE
#include "evl-internal.h"

#include <errno.h>
#include <sys/socket.h>
#include <unistd.h>

static void evl__iowait_run(evl__handle *h)
{
    evl__iowait *w = evl__container_of(h, evl__iowait, h);
    if (w->fut.state == EVL_FUTURE_PENDING)
        evl__future_complete(&w->fut, EVL_FUTURE_DONE, w->revents ? (intptr_t)w->revents : EVL_EBADF);
}

int evl_wait_fd(int fd, unsigned events)
{
    evl__task *t = evl__current_task();
    if (!t)
        return EVL_ENOTTASK;
    if (fd < 0)
        return EVL_EBADF;
    events &= EVL_READABLE | EVL_WRITABLE;
    if (!events)
        return EVL_EINVAL;
    evl_loop *loop = t->fut.loop;
    evl__fdent *e = evl__fd_get(loop, fd);
    if (!e)
        return EVL_ENOMEM;
    if (e->internal || ((events & EVL_READABLE) && e->reader) || ((events & EVL_WRITABLE) && e->writer))
        return EVL_EBUSY;

    evl__iowait w;
    w.h.next = w.h.prev = NULL;
    w.h.run = evl__iowait_run;
    evl__future_init(&w.fut, loop, EVL__FUT_STACK, EVL_WAKER_IO);
    w.fd = fd;
    w.events = events;
    w.revents = 0;
    int rc = evl__poll_arm(loop, fd, e->armed | events);
    if (rc < 0)
        return rc;
    e = &loop->fds[fd];
    e->grace &= ~events;
    if (events & EVL_READABLE)
        e->reader = &w;
    if (events & EVL_WRITABLE)
        e->writer = &w;
    loop->io_waits++;
    intptr_t r = evl__task_wait(t, &w.fut, EVL_SUSPEND_IO, (uint64_t)fd, 0);
    loop->io_waits--;
    /* Cancelled: detach from the fd and the ready queue. */
    if (fd < loop->nfds) {
        e = &loop->fds[fd];
        if (e->reader == &w)
            e->reader = NULL;
        if (e->writer == &w)
            e->writer = NULL;
    }
    if (evl__handle_queued(&w.h))
        evl__queue_remove(&w.h);
    return (int)r;
}

int evl_close(int fd)
{
    evl_loop *loop = evl__tls_loop;
    if (loop)
        evl__poll_forget(loop, fd);
    return close(fd) < 0 ? -errno : 0;
}

#define EVL__RETRY_IO(call, events)                                           \
    for (;;) {                                                                \
        ssize_t n_ = (call);                                                  \
        if (n_ >= 0)                                                          \
            return n_;                                                        \
        if (errno == EINTR)                                                   \
            continue;                                                         \
        if (errno != EAGAIN && errno != EWOULDBLOCK)                          \
            return -errno;                                                    \
        int r_ = evl_wait_fd(fd, (events));                                   \
        if (r_ < 0)                                                           \
            return r_;                                                        \
    }

ssize_t evl_recv(int fd, void *buf, size_t len, int flags)
{
    EVL__RETRY_IO(recv(fd, buf, len, flags | MSG_DONTWAIT), EVL_READABLE)
}

ssize_t evl_send(int fd, const void *buf, size_t len, int flags)
{
    EVL__RETRY_IO(send(fd, buf, len, flags | MSG_DONTWAIT | MSG_NOSIGNAL), EVL_WRITABLE)
}

ssize_t evl_read(int fd, void *buf, size_t len)
{
    EVL__RETRY_IO(read(fd, buf, len), EVL_READABLE)
}

ssize_t evl_write(int fd, const void *buf, size_t len)
{
    EVL__RETRY_IO(write(fd, buf, len), EVL_WRITABLE)
}

int evl_accept(int fd, struct sockaddr *addr, socklen_t *addrlen)
{
    EVL__RETRY_IO(accept4(fd, addr, addrlen, SOCK_NONBLOCK | SOCK_CLOEXEC), EVL_READABLE)
}

int evl_connect(int fd, const struct sockaddr *addr, socklen_t addrlen)
{
    if (connect(fd, addr, addrlen) == 0)
        return 0;
    if (errno != EINPROGRESS && errno != EINTR)
        return -errno;
    int r = evl_wait_fd(fd, EVL_WRITABLE);
    if (r < 0)
        return r;
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
        return -errno;
    return -err;
}
