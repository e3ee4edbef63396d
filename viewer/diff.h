/*
 * diff.h -- private to `loopscope diff` (cmd_diff.c: options, opening both
 * traces, notes, the command; diff_read.c: reading and merging both sides;
 * diff_out.c: terminal tables and JSON; diff_svg.c: the blocking graph
 * coloured by change).  Depends on trace.h, output.h and loopstat.h;
 * diff_svg.c also on gv.h (Graphviz).
 */
#ifndef LOOPSCOPE_DIFF_H
#define LOOPSCOPE_DIFF_H

#include "loopstat.h"
#include "output.h"
#include "trace.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* How a site (or a task group, a loop) changed from BEFORE to AFTER. */
enum diff_change { DC_SAME, DC_NEW, DC_GONE, DC_WORSE, DC_BETTER, DC_NA };
#define DC_N 6
/* "same", "new", "gone", "worse", "better", "n/a" (on both sides, but
 * what is compared is missing on one) */
extern const char *const diff_change_name[DC_N];

/* A worse/better verdict needs both: a relative change beyond 10% and an
 * absolute one of at least min_abs ns. */
enum diff_change diff_compare(int64_t before, int64_t after, int64_t min_abs);
/* A count or time read from a trace, clamped (ls_ts) and at least 0. */
int64_t diff_nonneg(int64_t v);

/* Either trace of the pair. */
struct diff_side {
    ls_trace *t;
    const char *path;
    char *target;             /* program and arguments, the program's directory cut */
    char *program;            /* the program's file name: what must match */
    bool generic;             /* meta mode = 'generic' */
    bool lifecycle;           /* a task lifecycle: libevl's, or a generic trace's census */
    char *source;             /* a census lifecycle's origin (ls_lifecycle_text), or NULL */
    char *task_source;        /* meta task_source (generic traces), or NULL */
    bool detection_off;       /* meta blocking_detection = 'off' */
    bool lossy;
    int64_t duration_ns;
    int64_t threshold_ns;     /* meta block_threshold_ns */
    int64_t tasks, episodes;  /* rows */
};

/* A blocking site, the application frame nearest the blocking call
 * (trace.h's sites view): function, file (short, ls_short_path), line. */
struct diff_site {
    char *fn, *file;          /* NULL: no application frame / no stack */
    int64_t line;             /* in AFTER when there */
    int64_t line_before;      /* in BEFORE: another when the site moved */
    char *calls[2];           /* syscalls or kinds it blocked in, per side */
    int64_t n[2], total[2], max[2];
    enum diff_change ch;
};

/* Tasks of one name pattern. */
struct diff_group {
    char *name;               /* the pattern: digits as '*' */
    char *function;           /* task function of the first task seen */
    int64_t tasks[2], busy[2], sched[2], resumes[2];
    int64_t steps[2], p50[2], p99[2], smax[2];   /* running spans that ended */
    enum diff_change ch;
};

/* Leaked tasks of one leak kind and name pattern. */
struct diff_leak {
    char *kind, *name;
    int64_t n[2];
};

/* Read and merge both sides (diff_read.c); lists sorted by key.  False
 * after an error line. */
bool diff_read_sites(struct diff_side s[2], int64_t min_ns, struct diff_site **out, size_t *n);
bool diff_read_groups(struct diff_side s[2], struct diff_group **out, size_t *n);
bool diff_read_leaks(struct diff_side s[2], struct diff_leak **out, size_t *n);
void diff_free_sites(struct diff_site *v, size_t n);
void diff_free_groups(struct diff_group *v, size_t n);
void diff_free_leaks(struct diff_leak *v, size_t n);

/* Each section, as a terminal table (j NULL) or as keys of the JSON
 * object j is in (diff_out.c): at most limit rows in a table, all in JSON.
 * *changed is set when a row changed. */
void diff_print_sites(struct diff_site *v, size_t n, int64_t min_ns, long limit, ls_json *j,
                      bool *changed);
void diff_print_groups(struct diff_group *v, size_t n, long limit, ls_json *j, bool *changed);
/* Loops matched in order of id, ls[k] of nl[k] loops (loopstat.h). */
void diff_print_loops(ls_loopstat *ls[2], size_t nl[2], long limit, ls_json *j, bool *changed);
void diff_print_leaks(struct diff_leak *v, size_t n, long limit, ls_json *j, bool *changed);


/* Write the blocking graph of both traces, coloured by change, as SVG to
 * path: episodes of at least min_ns.  0, or 1 after an error line. */
int diff_svg(struct diff_side side[2], int64_t min_ns, const char *path);

#endif
