/*
 * top.h -- `loopscope top`: what it keeps between two screens (top_data.c,
 * fed by the recorder's hooks, tracer/live.h) and how it draws them
 * (cmd_top.c: the curses screen and the plain text mode).  Everything is
 * bounded whatever the target does: names (TOP_NAMES_MAX), finished tasks
 * shown (TOP_DONE_MAX), the blocking feed (TOP_FEED_MAX), loops
 * (TOP_LOOPS_MAX); per-second buckets of the last TOP_SECS seconds.
 */
#ifndef LOOPSCOPE_TOP_H
#define LOOPSCOPE_TOP_H

#include "live.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TOP_NAME_BYTES 160        /* a name as kept: 47 bytes, each NUL as U+FFFD (3) */
#define TOP_NAMES_MAX 65536       /* names kept; then only those of tasks still live */
#define TOP_DONE_MAX 256          /* finished tasks still shown */
#define TOP_DONE_KEEP_NS 5000000000ll
#define TOP_FEED_MAX 256          /* blocking episodes kept for the feed */
#define TOP_LOOPS_MAX 1024
#define TOP_SECS 8                /* per-second buckets kept */
#define TOP_LAG_SECS 5            /* lag percentiles over the last 5 s */
#define TOP_HBUCKETS 488          /* iteration latency: 8 buckets per power of two */

enum top_sort { TOP_SORT_BUSY, TOP_SORT_SCHED, TOP_SORT_IDLE, TOP_SORT_LONGEST,
                TOP_SORT_RESUMES, TOP_SORT_WAKES, TOP_SORT_NAME, TOP_SORT_ID, TOP_NSORT };

/* One row of the task table. */
typedef struct top_row {
    uint64_t id, loop;
    const char *name;         /* the target's bytes (raw, NUL-terminated): escape to print */
    int state;                /* EVL_FINAL_* or LS_TASK_NO_STATE (pre-existing, not known yet) */
    int64_t detail;           /* suspended: the reason */
    bool done;
    int64_t busy, sched, idle, longest;
    uint64_t resumes, wakes;
} top_row;

typedef struct top_feed {
    int64_t start, dur;
    uint64_t loop, task;
    int kind;
    bool pending;             /* libevl on-CPU: its step has not ended yet (dur unknown) */
    char task_name[TOP_NAME_BYTES];   /* "" until known: resolved when shown */
    char syscall[32];
    char site[256];           /* "file:line function" of the innermost application frame */
} top_feed;

typedef struct top_sec {
    int64_t sec;              /* CLOCK_MONOTONIC seconds; -1 unused */
    double iterations;        /* generic windows are spread over the seconds they cover */
    double wait_ns, covered_ns;
    uint64_t hist[TOP_HBUCKETS];
    int64_t max_busy;
} top_sec;

typedef struct top_loop {
    uint64_t id;
    bool in_poll, stopped;
    int64_t enter, last_exit;
} top_loop;

typedef struct top_name {
    uint64_t id;              /* 0: free slot */
    char *name;
} top_name;

typedef struct top {
    /* options */
    pid_t pid;
    char comm[64];            /* /proc/PID/comm, the target's word */
    const char *out;
    bool text;                /* plain text lines (stdout is not a terminal, or --text) */
    enum top_sort sort;
    char filter[64];
    /* what the hooks gathered */
    bool generic;
    top_name *names;
    size_t names_cap, nnames;
    bool names_full;
    top_row done[TOP_DONE_MAX];
    char done_names[TOP_DONE_MAX][TOP_NAME_BYTES];
    int64_t done_at[TOP_DONE_MAX];
    size_t ndone, done_next;
    top_feed feed[TOP_FEED_MAX];
    uint64_t nfeed;           /* episodes ever seen (feed[nfeed % TOP_FEED_MAX] is next) */
    uint64_t feed_printed;    /* text mode: episodes already printed */
    uint64_t pending[16];     /* on-CPU episodes (feed numbers) whose step still runs */
    int npending;
    int64_t threshold_ns;     /* the blocking threshold (pending episodes are at least that) */
    top_sec secs[TOP_SECS];
    top_loop loops[TOP_LOOPS_MAX];
    size_t nloops;
    /* the rows of the last screen */
    top_row *rows;
    size_t nrows, rows_cap, nlive;
    ls_live_status st;        /* the last tick's */
    bool have_st;
    const char *why;          /* why it stopped */
    /* the screen */
    bool curses;              /* initscr done, endwin not yet */
    bool editing;             /* typing the filter after '/' */
    int64_t last_draw;
    int64_t start;
} top;

/* top_data.c: the hooks, and what the screens read */
int64_t top_now(void);        /* CLOCK_MONOTONIC, the recorder's and the target's clock */
void top_hooks(top *t, ls_live_hooks *h);
void top_free(top *t);
/* Fill t->rows from the replay (live tasks, current span counted to now)
 * and the finished tasks of the last few seconds; filtered and sorted. */
void top_collect(top *t, ls_replay *replay, int64_t now);
const char *top_name_of(top *t, uint64_t id);
/* Over the last complete second (iterations/s, idle share; idle < 0 when
 * nothing covered it) and the last TOP_LAG_SECS seconds (p50, p99, max;
 * -1 when no iteration). */
typedef struct top_loopstat {
    double iter_per_s, idle;
    int64_t p50, p99, max;
    uint64_t n;
} top_loopstat;
void top_loopstats(top *t, int64_t now, top_loopstat *ls);
const char *top_state_name(const top_row *r, char *buf, size_t n);
extern const char *const top_sort_names[TOP_NSORT];

#endif
