/*
 * timeline.h -- what the parts of `loopscope timeline` share: the rows
 * (lanes) and the spans drawn on them, the window, and the functions of
 * each part.  The parts: timeline_model.c reads the trace (which tasks,
 * their states over the window, blocking episodes), timeline_term.c draws
 * them on the terminal, timeline_svg.c as an SVG picture,
 * timeline_generic.c handles a generic loop mode trace (a row per loop
 * thread), cmd_timeline.c is the command.  Depends on viewer/trace.h
 * (the trace and its SQLite handle) and viewer/output.h.
 */
#ifndef LOOPSCOPE_TIMELINE_H
#define LOOPSCOPE_TIMELINE_H

#include "output.h"
#include "trace.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Task states, in increasing display priority. */
enum { ST_NONE, ST_SUSP, ST_READY, ST_RUN, ST_BLOCK, ST_COUNT };

/* What a terminal column shows, in increasing priority: the highest class
 * present in its time slice, where "running" needs the task to have run
 * for at least half of the slice and "ran" is any shorter running. */
enum { D_NONE, D_SUSP, D_READY, D_RAN, D_RUN, D_BLOCK, D_UNK, D_COUNT };
/* D_UNK: a generic loop thread's column whose windows' time is mostly
 * neither busy nor waiting (loopstat.h, ls_window_shares): never drawn
 * as busy.  Task lanes never show it. */

extern const char *const tl_disp_names[D_COUNT];
extern const char tl_ascii_glyph[D_COUNT];
extern const char *const tl_utf8_glyph[D_COUNT];
extern const char *const tl_ansi_color[D_COUNT];

#define NAME_W 20            /* terminal name column: "name#id", truncated */
#define SVG_W 1200           /* picture width, px */
#define SVG_NAME_W 190       /* name column, px */
#define SVG_LANE_W 970       /* lane width, px: also the binning resolution */
#define SVG_ROW_H 18
#define SVG_TOP 58

struct opts {
    const char *from_s, *to_s;   /* as given, for messages */
    int64_t from, to;            /* relative to the trace start; -1 unset */
    const char *glob;
    int64_t loop;                /* -1: all loops */
    long limit;
    const char *svg;
    bool no_color, ascii;
};

/* One stretch of time in one state. */
typedef struct span {
    int64_t s, e;                /* absolute ns, [s, e) clipped to the window */
    int st;                      /* ST_* */
    const char *reason;          /* static or owned by the lookup tables; may be NULL */
    int64_t arg;                 /* blocking: task id or -1 */
    int run_pm;                  /* per mille of [s, e) the task was running */
} span;

typedef struct spans {
    span *v;
    size_t n, cap;
} spans;

/* One row: a task, or a loop's blocking episodes. */
typedef struct lane {
    bool is_loop;
    int64_t id, loop;            /* task id (or loop id), its loop */
    int64_t tid, pid;            /* a loop thread's row: its thread, and its process when
                                  * the trace holds several (else 0) */
    char *name;                  /* task name (owned); NULL for a loop */
    int64_t alive_end;           /* absolute ns after which the task is gone */
    spans st;                    /* state spans, in time order */
    spans blk;                   /* blocking episodes */
    bool binned;                 /* st resolved per column: times are approximate */
    bool thread;                 /* generic mode: a loop thread's row */
    struct gcol *gc;             /* generic mode: per column sums (owned) */
} lane;

/* Generic mode: what one column of a loop thread's row holds, in ns (and
 * iterations), from the windows overlapping it; cover is the time its
 * windows span (busy + wait, and what is neither: unknown). */
typedef struct gcol {
    double busy, wait, iters, cover;
} gcol;

/* What the whole command works on. */
typedef struct tl {
    ls_trace *t;
    int64_t start, end;          /* recording bounds (absolute) */
    int64_t from, to;            /* window (absolute), to exclusive */
    lane *lanes;
    size_t nlanes;
    char *susp_names[32], *wake_names[32], *sys_names[512]; /* lookup tables, by id */
    sqlite3_stmt *q_before, *q_after, *q_range, *q_count;
    bool generic;                /* generic loop mode: loop thread rows */
    bool lifecycle;              /* a task lifecycle (libevl's, or a generic trace's
                                    census): task lanes; generic: with thread rows */
    char *source;                /* a census lifecycle's origin (ls_lifecycle_text) */
    char **owned;                /* strings spans point to (generic titles) */
    size_t nowned;
} tl;

/* ------------------------------------------- reading (timeline_model.c) */

bool tl_load_names(tl *x, const char *sql, char **names, size_t n);
bool tl_prepare_reads(tl *x);
bool tl_exact_task(tl *x, lane *ln);
void tl_bin_task(tl *x, lane *ln, int ncols);
bool tl_load_blocking(tl *x);
bool tl_event_bounds(tl *x, int64_t *first, int64_t *last);

/* ------------------------------------------ terminal (timeline_term.c) */

void tl_lane_label(const lane *ln, char *buf, size_t w);
int tl_col_of(double c, int ncols);
void tl_lane_cells(const tl *x, const lane *ln, int ncols, unsigned char *cells,
                   double *run_out);
int64_t tl_nice_step(double want);
void tl_fmt_tick(char *buf, size_t n, int64_t v, int64_t step, int64_t top);
char *tl_fmt_at(char *buf, size_t n, int64_t rel);
int tl_terminal_width(void);
void tl_term_style(const struct opts *o, bool *color, bool *utf8);
void tl_print_cells(const lane *ln, const unsigned char *cells, int ncols, bool color,
                    bool utf8);
void tl_print_axis(const tl *x, int ncols, double q, bool utf8);
void tl_print_terminal(tl *x, const struct opts *o, const char *path, size_t ntasks,
                       size_t nmatch, int nloops);

/* ------------------------------------------------ SVG (timeline_svg.c) */

typedef struct svg_leg {
    int cls;                     /* CSS class s<N> */
    const char *name;
} svg_leg;

void tl_svg_rect(FILE *f, tl *x, const lane *ln, const span *s, double y, double h);
FILE *tl_svg_open(const tl *x, const char *file, int extra_h);
void tl_svg_legend(FILE *f, const svg_leg *leg, size_t n, const char *blocking);
void tl_svg_axis(FILE *f, const tl *x);
double tl_svg_row_begin(FILE *f, const lane *ln, size_t i);
bool tl_svg_close(FILE *f, const char *file);
bool tl_write_svg(tl *x, const char *file, const char *path, size_t ntasks, size_t nmatch);
bool tl_write_note_svg(const char *file, const char *path, const char *msg);

/* ----------------------------------- generic loop mode (timeline_generic.c) */

bool tl_generic_bounds(tl *x, int64_t *first, int64_t *last);
int tl_timeline_generic(tl *x, const struct opts *o, const char *path);
/* A loop thread's row (lane.thread) among task lanes, in a generic trace
 * with a lifecycle: its per-column sums from loop_windows (tl_thread_fill,
 * ncols columns), what each column shows (D_*: blocked, busy half of the
 * time or more, partly busy, waiting), its legend line after `head`, the
 * note on columns finer than the windows (empty when none), its SVG row. */
bool tl_thread_fill(tl *x, lane *ln, int ncols);
void tl_thread_cells(const tl *x, const lane *ln, int ncols, unsigned char *cells);
void tl_thread_legend(const char *head, bool color, bool utf8);
void tl_thread_note(const tl *x, double q, char *buf, size_t n);
void tl_svg_thread_row(FILE *f, tl *x, const lane *ln, double y);
/* A loop thread's shares over the window shown (its columns summed): the
 * busy share info and export give for the same time. */
void tl_thread_share(const lane *ln, int ncols, char *buf, size_t n);
/* The SVG title after "PATH: ": PATH shortened from its left (with an
 * ellipsis) so that the line fits the picture, its width estimated
 * conservatively (tl_svg_text_w); then what follows it. */
void tl_svg_title(FILE *f, const char *path, const char *rest);
double tl_svg_text_w(const char *s, double font_px, bool bold);
/* s cut (at a character, with an ellipsis) to fit max_px: into buf. */
void tl_svg_fit(const char *s, double font_px, bool bold, double max_px, char *buf, size_t n);

#endif
