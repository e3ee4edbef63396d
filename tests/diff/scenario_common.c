/* scenario_common.c -- see scenario_common.h. */
#define _POSIX_C_SOURCE 200809L

#include "scenario_common.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

void say(const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    vprintf(format, ap);
    va_end(ap);
    putchar('\n');
    fflush(stdout);
}

const char *str_of(intptr_t r)
{
    static char bufs[16][24];
    static unsigned next;
    if (r == EVL_ECANCELED)
        return "cancelled";
    if (r == EVL_ETIMEDOUT)
        return "timeout";
    if (r < 0)
        return "error";
    char *b = bufs[next++ % 16];
    snprintf(b, sizeof bufs[0], "%ld", (long)r);
    return b;
}

const char *tstate(const evl_task *t)
{
    switch (evl_task_state(t)) {
    case EVL_TASK_FINISHED: return "finished";
    case EVL_TASK_FAILED: return "failed";
    case EVL_TASK_CANCELLED: return "cancelled";
    default: return "pending";
    }
}

void say_results(const char *prefix, const intptr_t *res, size_t n)
{
    char line[256];
    size_t len = (size_t)snprintf(line, sizeof line, "%s", prefix);
    for (size_t i = 0; i < n && len < sizeof line; i++)
        len += (size_t)snprintf(line + len, sizeof line - len, "%s%s",
                                i ? " " : "", str_of(res[i]));
    say("%s", line);
}

void must(long rc, const char *what)
{
    if (rc < 0) {
        fprintf(stderr, "%s: %s\n", what, evl_err_name((int)rc));
        exit(2);
    }
}

void *must_ptr(void *p, const char *what)
{
    if (!p) {
        perror(what);
        exit(2);
    }
    return p;
}

evl_task *spawn(const char *name, evl_task_fn fn, void *arg)
{
    return must_ptr(evl_spawn(NULL, name, fn, arg), "evl_spawn");
}

intptr_t await_drop(evl_task *t)
{
    intptr_t r = evl_await(t);
    evl_future_unref(t);
    return r;
}

intptr_t ticker(void *arg)
{
    int n = AINT(arg);
    for (int i = 0; i < n; i++) {
        say("tick %d", i);
        evl_sleep(0);
    }
    return 0;
}
