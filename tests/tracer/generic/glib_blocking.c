/*
 * glib_blocking.c -- a GLib main loop (g_main_loop_run: it waits in
 * poll()) with a blocking timeout callback, for
 * tests/tracer/test_generic.py: a loop that waits in poll(), never in
 * epoll_wait, must be found without flags.
 *
 *   glib_blocking [--seconds S]
 *
 * Every 250 ms a timeout callback (slow_timeout_cb) calls g_usleep(50 ms)
 * on the loop thread: a blocking bug the recorder must report, with this
 * file's line of the g_usleep.  Prints "pid N" first, then "cb T0 T1 TID"
 * per call (CLOCK_MONOTONIC ns); exits after S seconds (default 30).
 */
#define _GNU_SOURCE
#include <glib.h>
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

static gboolean slow_timeout_cb(gpointer data)
{
    (void)data;
    uint64_t t0 = mono_ns();
    g_usleep(50 * 1000);   /* BUG: blocks the loop thread */
    printf("cb %llu %llu %d\n", (unsigned long long)t0, (unsigned long long)mono_ns(),
           (int)gettid());
    fflush(stdout);
    return G_SOURCE_CONTINUE;
}

static gboolean stop_cb(gpointer loop)
{
    g_main_loop_quit(loop);
    return G_SOURCE_REMOVE;
}

int main(int argc, char **argv)
{
    double seconds = 30;
    if (argc == 3 && !strcmp(argv[1], "--seconds"))
        seconds = atof(argv[2]);
    GMainLoop *loop = g_main_loop_new(NULL, FALSE);
    printf("pid %d\n", (int)getpid());
    fflush(stdout);
    g_timeout_add(250, slow_timeout_cb, NULL);
    g_timeout_add((guint)(seconds * 1000), stop_cb, loop);
    g_main_loop_run(loop);
    g_main_loop_unref(loop);
    return 0;
}
