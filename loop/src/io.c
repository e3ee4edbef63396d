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
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* evl_sendfile: the fallback's buffer (asyncio uses 256 KiB; a smaller one
 * costs a few more wakeups per MiB and less memory per transfer), and the
 * largest count one sendfile(2) call takes. */
#define EVL__SENDFILE_CHUNK (64u * 1024)
#define EVL__SENDFILE_MAX ((size_t)0x7ffff000)

void evl__iowait_run(evl__handle *h)
{
    evl__iowait *w = evl__container_of(h, evl__iowait, h);
    if (w->fut.state == EVL_FUTURE_PENDING)
        evl__future_complete(&w->fut, EVL_FUTURE_DONE, w->revents ? (intptr_t)w->revents : EVL_EBADF);
}

/* evl_wait_fd; spec: the speculative read of loop/ORDERING.md rule 16,
 * which returns 0 instead of an error when it cannot wait (the caller then
 * makes its syscall, as without speculation). */
static int evl__wait_fd(evl__task *t, int fd, unsigned events, bool spec)
{
    evl_loop *loop = t->fut.loop;
    evl__fdent *e = evl__fd_get(loop, fd);
    if (!e)
        return spec ? 0 : EVL_ENOMEM;
    if (e->internal || ((events & EVL_READABLE) && e->reader) || ((events & EVL_WRITABLE) && e->writer))
        return spec ? 0 : EVL_EBUSY;

    evl__iowait w;
    w.h.next = w.h.prev = NULL;
    w.h.run = evl__iowait_run;
    evl__future_init(&w.fut, loop, EVL__FUT_STACK, EVL_WAKER_IO);
    w.fd = fd;
    w.events = events;
    w.revents = 0;
    if ((e->armed | events) != e->armed) { /* (the interest usually stays armed) */
        int rc = evl__poll_arm(loop, fd, e->armed | events);
        if (rc < 0)
            return spec ? 0 : rc;     /* EPERM: not pollable (a regular file) */
        e = &loop->fds[fd];
    }
    e->grace &= ~events;
    if (events & EVL_READABLE)
        e->reader = &w;
    if (events & EVL_WRITABLE)
        e->writer = &w;
    if (spec) {
        loop->spec = &w;
        loop->spec_reads++;
    }
    loop->io_waits++;
    intptr_t r = evl__task_wait(t, &w.fut, EVL_SUSPEND_IO, (uint64_t)fd, 0);
    loop->io_waits--;
    if (loop->spec == &w)
        loop->spec = NULL;            /* (the poll normally took it) */
    /* Done (not cancelled): whoever completed the wait (its handle, after
     * the poll or evl_close detached it from the fd; or the speculation's
     * resume) left nothing to undo. */
    if (EVL__LIKELY(w.fut.state == EVL_FUTURE_DONE))
        return (int)r;
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
    return evl__wait_fd(t, fd, events, false);
}

/* Before a read-side call (recv, read, recvfrom, accept) on fd: the
 * speculative read of loop/ORDERING.md rule 16.  When the calling task is
 * the last handle of its batch and fd met EAGAIN last time, the task waits
 * for readability without trying the syscall, and the next poll decides:
 * fd not reported readable means the syscall would have failed with EAGAIN
 * (the task waits, as it would have); reported, the task resumes before
 * anything else runs (evl__poll_spec_resume) and makes the syscall.
 * Returns 0 to make the syscall, < 0 the wait's error (cancelled, or
 * EVL_EBADF when evl_close'd), as the wait after EAGAIN would have. */
static int evl__read_spec(evl_loop *loop, int fd)
{
    evl__task *t = loop->current;
    if (!t || t->must_cancel || loop->spec || loop->stopping ||
        (loop->batch_end && loop->ready.head.next != loop->batch_end))
        return 0;                     /* not the last handle of its batch */
    int r = evl__wait_fd(t, fd, EVL_READABLE, true);
    return r < 0 ? r : 0;
}

/* A read-side call met EAGAIN: its next one may be speculative. */
static void evl__read_drained(int fd)
{
    evl_loop *loop = evl__tls_loop;
    if (loop && fd >= 0 && fd < loop->nfds)
        loop->fds[fd].rd_spec = 1;
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
        if ((events) == EVL_READABLE)                                         \
            evl__read_drained(fd);                                            \
        int r_ = evl_wait_fd(fd, (events));                                   \
        if (r_ < 0)                                                           \
            return r_;                                                        \
    }

/* A read-side call that may be speculative (rule 16): only when it cannot
 * succeed without data to read.  A zero-length read succeeds at once and
 * out-of-band or error-queue reads do not wait for EPOLLIN, so those
 * always make their syscall.  The fd's rd_spec is tested here, inline:
 * on most reads it is clear. */
#define EVL__SPEC_READ(ok)                                                    \
    do {                                                                      \
        evl_loop *l_ = evl__tls_loop;                                         \
        if (l_ && fd >= 0 && fd < l_->nfds && l_->fds[fd].rd_spec && (ok)) {  \
            int s_ = evl__read_spec(l_, fd);                                  \
            if (s_ < 0)                                                       \
                return s_;                                                    \
        }                                                                     \
    } while (0)
#define EVL__SPEC_FLAGS_OK(len, flags) ((len) > 0 && !((flags) & (MSG_OOB | MSG_ERRQUEUE)))

/* evl_recv when the fd's rd_spec is set, or after a recv that failed:
 * the whole of it (speculation, retries, the wait). */
static __attribute__((noinline)) ssize_t evl__recv_full(int fd, void *buf, size_t len, int flags)
{
    EVL__SPEC_READ(EVL__SPEC_FLAGS_OK(len, flags));
    EVL__RETRY_IO(recv(fd, buf, len, flags | MSG_DONTWAIT), EVL_READABLE)
}

static __attribute__((noinline)) ssize_t evl__recv_failed(int fd, void *buf, size_t len,
                                                          int flags)
{
    /* The first recv failed (errno): what EVL__RETRY_IO does with it. */
    if (errno != EINTR) {
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        evl__read_drained(fd);
        int r = evl_wait_fd(fd, EVL_READABLE);
        if (r < 0)
            return r;
    }
    EVL__RETRY_IO(recv(fd, buf, len, flags | MSG_DONTWAIT), EVL_READABLE)
}

ssize_t evl_recv(int fd, void *buf, size_t len, int flags)
{
    /* The common case in a few instructions: no speculation (rd_spec
     * clear), the recv succeeds; the rest out of line. */
    evl_loop *l = evl__tls_loop;
    if (EVL__UNLIKELY(l && fd >= 0 && fd < l->nfds && l->fds[fd].rd_spec))
        return evl__recv_full(fd, buf, len, flags);
    ssize_t n = recv(fd, buf, len, flags | MSG_DONTWAIT);
    if (EVL__LIKELY(n >= 0))
        return n;
    return evl__recv_failed(fd, buf, len, flags);
}

ssize_t evl_send(int fd, const void *buf, size_t len, int flags)
{
    EVL__RETRY_IO(send(fd, buf, len, flags | MSG_DONTWAIT | MSG_NOSIGNAL), EVL_WRITABLE)
}

ssize_t evl_read(int fd, void *buf, size_t len)
{
    EVL__SPEC_READ(len > 0);
    EVL__RETRY_IO(read(fd, buf, len), EVL_READABLE)
}

ssize_t evl_write(int fd, const void *buf, size_t len)
{
    EVL__RETRY_IO(write(fd, buf, len), EVL_WRITABLE)
}

int evl_accept(int fd, struct sockaddr *addr, socklen_t *addrlen)
{
    EVL__SPEC_READ(1);
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

ssize_t evl_recvfrom(int fd, void *buf, size_t len, int flags, struct sockaddr *addr,
                     socklen_t *addrlen)
{
    /* addrlen is in-out: a retry after EAGAIN must offer the caller's size
     * again, not what a failed call may have left there. */
    socklen_t cap = addrlen ? *addrlen : 0;
    EVL__SPEC_READ(EVL__SPEC_FLAGS_OK(len, flags));
    for (;;) {
        if (addrlen)
            *addrlen = cap;
        ssize_t n = recvfrom(fd, buf, len, flags | MSG_DONTWAIT, addr, addrlen);
        if (n >= 0)
            return n;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK)
            return -errno;
        evl__read_drained(fd);
        int r = evl_wait_fd(fd, EVL_READABLE);
        if (r < 0)
            return r;
    }
}

ssize_t evl_sendto(int fd, const void *buf, size_t len, int flags, const struct sockaddr *addr,
                   socklen_t addrlen)
{
    EVL__RETRY_IO(sendto(fd, buf, len, flags | MSG_DONTWAIT | MSG_NOSIGNAL, addr, addrlen),
                  EVL_WRITABLE)
}

/* asyncio's sock_sendall: send, and on a short write or EAGAIN wait until
 * writable and send the rest.  *sent always holds what the kernel took. */
static int evl__sendall_rest(int fd, const char *p, size_t len, int flags, ssize_t n,
                             size_t *sent);

int evl_sendall_sent(int fd, const void *buf, size_t len, int flags, size_t *sent)
{
    if (!evl__current_task()) {
        if (sent)
            *sent = 0;
        return EVL_ENOTTASK;          /* "task only", even when it could not block */
    }
    /* The common case first: the kernel takes it all at once. */
    ssize_t n = len ? send(fd, buf, len, flags | MSG_DONTWAIT | MSG_NOSIGNAL) : 0;
    if (EVL__LIKELY((size_t)n == len)) {
        if (sent)
            *sent = len;
        return 0;
    }
    return evl__sendall_rest(fd, buf, len, flags, n, sent);
}

/* evl_sendall_sent after a first send that did not take everything: n is
 * what it returned (errno set when < 0).  Short write: send the rest;
 * EAGAIN: wait until writable, send again; EINTR: again; other errors end
 * it. */
static int evl__sendall_rest(int fd, const char *p, size_t len, int flags, ssize_t n,
                             size_t *sent)
{
    size_t done = 0;
    int rc = 0;
    for (;;) {
        if (n >= 0) {
            done += (size_t)n;
            if (done >= len)
                break;
        } else if (errno == EINTR) {
            /* again */
        } else if (errno != EAGAIN && errno != EWOULDBLOCK) {
            rc = -errno;
            break;
        } else {
            rc = evl_wait_fd(fd, EVL_WRITABLE);
            if (rc < 0)
                break;
            rc = 0;
        }
        n = send(fd, p + done, len - done, flags | MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    if (sent)
        *sent = done;
    return rc;
}

int evl_sendall(int fd, const void *buf, size_t len, int flags)
{
    return evl_sendall_sent(fd, buf, len, flags, NULL);
}

/* ------------------------------------------------------------ sendfile */

/* sendfile(2) has no MSG_NOSIGNAL: a peer that went away raises SIGPIPE,
 * which kills a process that did not ignore it.  Block SIGPIPE in this
 * thread around the call and, if the call raised it, consume it (unless one
 * was already pending: that one is not ours). */
static ssize_t evl__sendfile_nosignal(int out_fd, int in_fd, off_t *offset, size_t n)
{
    sigset_t pipe_set, old;
    sigemptyset(&pipe_set);
    sigaddset(&pipe_set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_set, &old);
    sigset_t pending;
    sigpending(&pending);
    int was_pending = sigismember(&pending, SIGPIPE);
    ssize_t r = sendfile(out_fd, in_fd, offset, n);
    int err = errno;
    if (r < 0 && err == EPIPE && !was_pending) {
        static const struct timespec zero = { 0, 0 };
        while (sigtimedwait(&pipe_set, NULL, &zero) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    errno = err;
    return r;
}

/* Errors of a first sendfile(2) call that mean "not usable for this pair
 * of fds", after which asyncio falls back to read + send. */
static bool evl__sendfile_unusable(int err)
{
    return err == EINVAL || err == ENOSYS || err == EOPNOTSUPP || err == ENOTSUP ||
           err == ESPIPE || err == EOVERFLOW;
}

/* One read for the fallback.  A regular file (or an fd epoll refuses, such
 * as /dev/zero) is read directly, as sendfile(2) itself would; anything
 * else (pipes, sockets, ttys) is read when readable, so that even a
 * blocking one never blocks the loop. */
static ssize_t evl__fallback_read(int fd, void *buf, size_t n, const off_t *offset,
                                  bool pollable, bool nonblock)
{
    if (pollable && !nonblock) {
        int r = evl_wait_fd(fd, EVL_READABLE);
        if (r == -EPERM)
            pollable = false;
        else if (r < 0)
            return r;
    }
    for (;;) {
        ssize_t got = offset ? pread(fd, buf, n, *offset) : read(fd, buf, n);
        if (got >= 0)
            return got;
        if (errno == EINTR)
            continue;
        if (!pollable || (errno != EAGAIN && errno != EWOULDBLOCK))
            return -errno;
        int r = evl_wait_fd(fd, EVL_READABLE);
        if (r < 0)
            return r;
    }
}

/* asyncio's _sock_sendfile_fallback: read a chunk, sendall it, repeat. */
static ssize_t evl__sendfile_fallback(int out_fd, int in_fd, off_t *offset, size_t count,
                                      bool regular)
{
    size_t chunk = EVL__SENDFILE_CHUNK;
    if (count && count < chunk)
        chunk = count;
    char *buf = malloc(chunk);
    if (!buf)
        return EVL_ENOMEM;
    int fl = fcntl(in_fd, F_GETFL);
    bool nonblock = fl >= 0 && (fl & O_NONBLOCK);
    size_t total = 0;
    ssize_t rc = 0;
    while (!count || total < count) {
        size_t want = count && count - total < chunk ? count - total : chunk;
        ssize_t got = evl__fallback_read(in_fd, buf, want, offset, !regular, nonblock);
        if (got <= 0) {
            rc = got;                 /* end of file, or the error */
            break;
        }
        size_t sent = 0;
        rc = evl_sendall_sent(out_fd, buf, (size_t)got, 0, &sent);
        total += sent;
        if (offset)
            *offset += (off_t)sent;
        else if (sent < (size_t)got && regular)
            lseek(in_fd, -(off_t)((size_t)got - sent), SEEK_CUR); /* give back what was not sent */
        if (rc < 0)
            break;
    }
    free(buf);
    return rc < 0 ? rc : (ssize_t)total;
}

ssize_t evl_sendfile(int out_fd, int in_fd, off_t *offset, size_t count)
{
    if (!evl__current_task())
        return EVL_ENOTTASK;
    if (count > SSIZE_MAX)
        return EVL_EINVAL;
    int fl = fcntl(out_fd, F_GETFL);
    if (fl < 0)
        return -errno;
    if (!(fl & O_NONBLOCK))
        return EVL_EINVAL;            /* sendfile(2) would block the loop */
    struct stat st;
    if (fstat(in_fd, &st) < 0)
        return -errno;
    bool regular = S_ISREG(st.st_mode);
    if (!regular)                     /* asyncio: "not a regular file" */
        return evl__sendfile_fallback(out_fd, in_fd, offset, count, false);
    size_t total = 0;
    while (!count || total < count) {
        size_t want = count ? count - total : EVL__SENDFILE_MAX;
        if (want > EVL__SENDFILE_MAX)
            want = EVL__SENDFILE_MAX;
        ssize_t n = evl__sendfile_nosignal(out_fd, in_fd, offset, want);
        if (n > 0) {
            total += (size_t)n;
            continue;
        }
        if (n == 0)
            break;                    /* end of file */
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            int r = evl_wait_fd(out_fd, EVL_WRITABLE);
            if (r < 0)
                return r;
            continue;
        }
        if (total == 0 && evl__sendfile_unusable(errno))
            return evl__sendfile_fallback(out_fd, in_fd, offset, count, true);
        return -errno;
    }
    return (ssize_t)total;
}
