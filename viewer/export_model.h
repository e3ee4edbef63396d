/*
 * export_model.h -- the export's track model, shared by its two halves:
 * export_model.c (the walk over the events, the tasks' states from the one
 * replay, model/replay.h, wake flows, task blocking episodes) and
 * export_loops.c (loops, their iterations and callbacks, the episodes
 * outside tasks, generic-mode window counters).  Writers: export.h.
 */
#ifndef LOOPSCOPE_EXPORT_MODEL_H
#define LOOPSCOPE_EXPORT_MODEL_H

#include "export.h"

/* A blocking episode (a row of `blocking`, with its site). */
typedef struct episode {
    int64_t id, task_id, loop_id, start, dur, kind, delayed;
    char *syscall, *site, *victims, *task;
    struct episode *next;
} episode;

#define XL_SERIES 4           /* generic-mode counters per loop */

typedef struct xloop {
    ls_xtrack proc, thread, series[XL_SERIES];
    int64_t id, os_tid, track_tid, started, stopped;
    int64_t pid;               /* a process group's trace: its process (else 0) */
    int64_t poll_ts;           /* poll_enter of the open idle span, -1 none */
    int64_t poll_timeout;
    int64_t iter_ts;           /* poll_exit opening the current iteration, -1 none */
    int64_t iter_fds, iter_n;
    int64_t cb_ts, cb_addr;    /* open plain callback, -1 none */
    size_t blk_next;           /* next callback episode of this loop (cb_blocking) */
    bool series_declared;
} xloop;

typedef struct exporter {
    ls_trace *t;
    ls_xwriter *w;
    int64_t from, to;          /* window, absolute ns (inclusive) */
    int64_t end;               /* recording end (ns) */
    bool generic;              /* generic loop mode: no lifecycle, loop threads */
    xloop *loops;
    size_t nloops;
    episode *cb_blocking;      /* episodes outside any task (generic: all), by start */
    size_t ncb;
} exporter;

/* Does [a, b] show in the window? (an instant when a == b) */
static inline bool x_in_window(const exporter *x, int64_t a, int64_t b)
{
    return b <= a ? a >= x->from && a <= x->to : a < x->to && b > x->from;
}

/* Write slice [a, b] on t clipped to the window (t NULL: nothing). */
void x_slice(exporter *x, ls_xtrack *t, int64_t a, int64_t b, const ls_xev *e);
void x_instant(exporter *x, ls_xtrack *t, int64_t ts, const ls_xev *e);

/* export_loops.c */
bool x_loops_load(exporter *x);          /* loops, callback episodes; declares */
xloop *x_loop(exporter *x, int64_t id);
void x_loop_event(exporter *x, xloop *l, int64_t ts, int kind, int64_t reason, int64_t arg0);
void x_loops_finish(exporter *x);
bool x_window_counters(exporter *x);
void x_loops_free(exporter *x);

/* Episodes: the query (WHERE and ORDER BY filled in), a row, a slice. */
extern const char x_episodes_sql[];
void x_episode_read(sqlite3_stmt *st, episode *e);
void x_episode_free(episode *e);
/* One episode as a slice on t clipped to [lo, hi] (the step or callback it
 * happened in) and to after *prev_end, so slices nest. */
void x_episode_write(exporter *x, const episode *e, ls_xtrack *t, int64_t lo, int64_t hi,
                     int64_t *prev_end);

/* An errno-style error as args "error" and "error_name"; returns the
 * number of args written into a (2 at most). */
int x_error_args(ls_xarg *a, int64_t err);

#endif
