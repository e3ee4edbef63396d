/*
 * sink.c -- the fan-out to the recorder's sinks (sink.h): each record to
 * every sink, in the order the sinks were added.  Part of the recorder
 * (recorder.h).
 */
#define _GNU_SOURCE
#include "recorder.h"

#include <stdarg.h>
#include <stdio.h>

int ls_sink_add(recorder *r, const ls_sink_ops *ops, void *s)
{
    if (r->nsinks == LS_MAX_SINKS)
        return ls_error("too many sinks");
    r->sinks[r->nsinks++] = (ls_sink){ .ops = ops, .s = s };
    return 0;
}

/* Call op with the sink's state and the arguments on every sink that has it. */
#define EACH(op, ...)                                                          \
    for (int i_ = 0; i_ < r->nsinks; i_++)                                     \
        if (r->sinks[i_].ops->op)                                              \
            r->sinks[i_].ops->op(r->sinks[i_].s, __VA_ARGS__)

void ls_sink_meta(recorder *r, const char *key, const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    EACH(meta, key, buf);
}

void ls_sink_process(recorder *r, const ls_proc_rec *p) { EACH(process, p); }

void ls_sink_loop(recorder *r, uint64_t loop, uint32_t pid, uint32_t tid, int64_t seen)
{
    EACH(loop, loop, pid, tid, seen);
}

void ls_sink_loop_stop(recorder *r, uint64_t loop, int64_t stopped)
{
    EACH(loop_stop, loop, stopped);
}

void ls_sink_task(recorder *r, const ls_task_rec *t) { EACH(task, t); }

void ls_sink_task_unknown(recorder *r, uint64_t task, uint64_t loop)
{
    EACH(task_unknown, task, loop);
}

void ls_sink_task_named(recorder *r, uint64_t task, uint64_t loop, const char *name, size_t len)
{
    EACH(task_named, task, loop, name, len);
}

void ls_sink_task_leak(recorder *r, uint64_t task, int kind) { EACH(task_leak, task, kind); }

void ls_sink_task_finish(recorder *r, uint64_t task, uint64_t loop, int64_t ended, int state,
                         int64_t error)
{
    EACH(task_finish, task, loop, ended, state, error);
}

void ls_sink_event(recorder *r, ls_event *e)
{
    e->rowid = (int64_t)++r->nevents;   /* rowids are 1, 2, ... in store order */
    EACH(event, e);
}

void ls_sink_window(recorder *r, uint64_t loop, const struct ls_window *w)
{
    EACH(window, loop, w);
}

void ls_sink_hist(recorder *r, uint64_t loop, int64_t lo, int64_t hi, uint64_t count,
                  uint64_t busy_ns)
{
    EACH(hist, loop, lo, hi, count, busy_ns);
}

void ls_sink_frame_app(recorder *r, int64_t stack, int depth, uint64_t pc, const ls_sym *f,
                       bool app)
{
    EACH(frame, stack, depth, pc, f, app);
}

void ls_sink_frame(recorder *r, int64_t stack, int depth, uint64_t pc, const ls_sym *f)
{
    bool app = r->dec && r->dec->app_frame && r->dec->app_frame(r, f);
    ls_sink_frame_app(r, stack, depth, pc, f, app);
}

void ls_sink_stack(recorder *r, int64_t stack, int depth) { EACH(stack, stack, depth); }

void ls_sink_block(recorder *r, const ls_block_rec *b) { EACH(block, b); }

void ls_sink_await_stack(recorder *r, uint64_t task, int64_t ts, int64_t stack)
{
    EACH(await_stack, task, ts, stack);
}

void ls_sink_syscall_stat(recorder *r, uint64_t loop, uint32_t tid, uint32_t nr, uint64_t count,
                          uint64_t total_ns, uint64_t max_ns)
{
    EACH(syscall_stat, loop, tid, nr, count, total_ns, max_ns);
}

int ls_sinks_end(recorder *r, int64_t end_ns)
{
    int err = 0;
    for (int i = 0; i < r->nsinks; i++)
        if (r->sinks[i].ops->end && r->sinks[i].ops->end(r->sinks[i].s, end_ns) && !err)
            err = -1;
    return err;
}

void ls_sinks_free(recorder *r)
{
    for (int i = 0; i < r->nsinks; i++)
        if (r->sinks[i].ops->free)
            r->sinks[i].ops->free(r->sinks[i].s);
    r->nsinks = 0;
}
