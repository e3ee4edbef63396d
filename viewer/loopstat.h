/*
 * loopstat.h -- the generic loop mode (tracer/SCHEMA.md: meta mode =
 * 'generic', tables loop_windows and iteration_hist): is a trace generic,
 * and each loop thread's iterations summed over the recording, read with
 * every hostile value checked (negative counts, windows backwards or
 * overlapping, buckets with hi_ns <= lo_ns, absurd sizes).  Traces written
 * before these tables exist read as having no windows and no histogram.
 */
#ifndef LOOPSCOPE_LOOPSTAT_H
#define LOOPSCOPE_LOOPSTAT_H

#include "trace.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define LS_HIST_MAX 256        /* buckets kept per loop (power-of-two ns: 64) */

typedef struct ls_bucket {
    int64_t lo, hi;            /* [lo, hi) ns, hi > lo >= 0 */
    int64_t count, busy;       /* >= 0 */
} ls_bucket;

typedef struct ls_loopstat {
    int64_t id;                /* loops.id (generic mode: the thread id) */
    int64_t tid;               /* loops.tid, or id when the loop has no row */
    int64_t pid;               /* loops.pid, 0 when it has no row */
    /* loop_windows */
    int64_t windows;           /* rows used */
    int64_t bad_windows;       /* rows ignored: end before start, negative numbers */
    int64_t overlaps;          /* windows starting before the previous one ended */
    int64_t iterations, wait_ns, busy_ns, max_busy_ns;   /* sums (saturating), max */
    int64_t covered_ns;        /* time covered by windows (overlaps counted once) */
    int64_t span_ns;           /* the windows' lengths summed (saturating): the time
                                * their busy, wait and unknown shares divide */
    int64_t first_ns, last_ns; /* first window start, last window end */
    int64_t max_at_ns;         /* start of the window holding the longest iteration */
    /* iteration_hist, by lo_ns */
    ls_bucket *hist;
    int nhist;
    int64_t hist_bad;          /* rows ignored: hi <= lo, negative, beyond LS_HIST_MAX */
    int64_t hist_count;        /* iterations in the histogram (saturating) */
    int64_t hist_busy;         /* their busy time (saturating) */
} ls_loopstat;

/* Every loop of the trace (loops rows and loop ids of the two tables), by
 * id; *n = 0 for none.  Returns false after printing an error line,
 * with *out NULL and *n 0 (nothing to free). */
bool ls_loopstats_read(ls_trace *t, ls_loopstat **out, size_t *n);
void ls_loopstats_free(ls_loopstat *s, size_t n);

/* The bucket holding quantile q (0 < q <= 1) of the histogram: the value
 * is in [*lo, *hi), or at most *hi when *capped (the measured longest
 * iteration lies in that bucket and bounds it).  False without a
 * histogram. */
bool ls_hist_quantile(const ls_loopstat *s, double q, int64_t *lo, int64_t *hi, bool *capped);

/* What a window's span (or a sum of spans) was, as fractions of it: busy
 * (out of the wait call), waiting (in it), and unknown: the rest, time the
 * recorder did not account for as either (a window of a recorder before
 * the last window was completed at the stop, a window ended by its
 * thread's exit, a damaged row).  Every command that shows a busy share
 * uses this one rule (info, timeline, export): it is never busy.  When
 * busy + wait exceed the span (a hostile or overlapping row) the shares are
 * of busy + wait and unknown is 0. */
typedef struct ls_shares {
    double busy, wait, unknown;  /* 0..1, summing to 1 (0, 0, 0 for an empty span) */
} ls_shares;
ls_shares ls_window_shares(double span, double busy, double wait);

/* a + b for non-negative counts, saturating at LS_TS_LIMIT. */
int64_t ls_sat_add(int64_t a, int64_t b);

#endif
