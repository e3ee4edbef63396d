/*
 * ev_poll_blocking.c -- a libev program on its poll() backend with a
 * blocking timer callback, for tests/tracer/test_generic.py: a loop that
 * waits in poll(), never in epoll_wait, must be found without flags.
 *
 *   ev_poll_blocking [--seconds S]
 *
 * The loop watches a pipe (as a server watches its sockets: a poll on no
 * descriptor at all is a sleep to the recorder, not a wait).
 * Every 250 ms a timer callback (slow_timer_cb) calls usleep(50 ms) on the
 * loop thread: a blocking bug the recorder must report, with this file's
 * line of the usleep.  Prints "pid N" first, then "cb T0 T1 TID" per call
 * (CLOCK_MONOTONIC ns, an independent measurement); exits after S seconds
 * (default 30).
 */
#define _GNU_SOURCE
#include <ev.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void slow_timer_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)loop, (void)w, (void)revents;
    uint64_t t0 = mono_ns();
    usleep(50 * 1000);   /* BUG: blocks the loop thread */
    printf("cb %llu %llu %d\n", (unsigned long long)t0, (unsigned long long)mono_ns(),
           (int)gettid());
    fflush(stdout);
}

static void pipe_cb(struct ev_loop *loop, ev_io *w, int revents)
{
    (void)loop, (void)w, (void)revents;
}

static void stop_cb(struct ev_loop *loop, ev_timer *w, int revents)
{
    (void)w, (void)revents;
    ev_break(loop, EVBREAK_ALL);
}

int main(int argc, char **argv)
{
    double seconds = 30;
    if (argc == 3 && !strcmp(argv[1], "--seconds"))
        seconds = atof(argv[2]);
    struct ev_loop *loop = ev_loop_new(EVBACKEND_POLL);
    if (!loop || ev_backend(loop) != EVBACKEND_POLL) {
        fprintf(stderr, "ev_poll_blocking: no poll backend\n");
        return 1;
    }
    printf("pid %d\n", (int)getpid());
    fflush(stdout);
    int fds[2];
    if (pipe(fds)) {
        perror("ev_poll_blocking: pipe");
        return 1;
    }
    ev_io io;
    ev_io_init(&io, pipe_cb, fds[0], EV_READ);
    ev_io_start(loop, &io);
    ev_timer slow, stop;
    ev_timer_init(&slow, slow_timer_cb, 0.25, 0.25);
    ev_timer_init(&stop, stop_cb, seconds, 0);
    ev_timer_start(loop, &slow);
    ev_timer_start(loop, &stop);
    ev_run(loop, 0);
    ev_loop_destroy(loop);
    return 0;
}
