/*
 * export.h -- `loopscope export`: what is exported (the track model,
 * export_model.c and export_loops.c) and the one small interface its
 * writers implement (export_json.c: the Chrome trace event JSON;
 * export_proto.c: Perfetto's protobuf trace format).
 *
 * The model walks the trace once and calls the writer with tracks (a loop,
 * its thread, its tasks, its counters), slices, instants, flows and
 * counter samples, in this order per track: a track is declared before
 * anything is written on it; a slice is written before the slices nested
 * in it (which lie within it); a flow's start is written right before the
 * slice that ends it.  Times are absolute trace ns, clipped to the window.
 */
#ifndef LOOPSCOPE_EXPORT_H
#define LOOPSCOPE_EXPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "trace.h"

typedef enum ls_xkind {
    LS_XT_LOOP,               /* a loop: a process */
    LS_XT_THREAD,             /* its thread: loop events, callback episodes */
    LS_XT_TASK,               /* one task: its states */
    LS_XT_COUNTER,            /* one series of a loop (generic mode windows) */
} ls_xkind;

#define LS_XT_DEPTH 8         /* slices open at once on a track, at most */

typedef struct ls_xtrack {
    ls_xkind kind;
    uint64_t uuid;            /* unique in the export, never 0 */
    uint64_t parent;          /* the loop's uuid; 0 for a loop */
    int64_t pid, tid;         /* JSON: the loop id and the thread id */
    int64_t sort;             /* its rank among its siblings */
    /* The writer's: slice ends not yet written, innermost last. */
    int nopen;
    int64_t open_end[LS_XT_DEPTH];
} ls_xtrack;

typedef enum ls_xatype {
    LS_XA_INT,
    LS_XA_STR,                /* free text from the trace */
    LS_XA_NAME,               /* one of few names (interned where it helps) */
    LS_XA_MS,                 /* i: ns, shown as milliseconds */
    LS_XA_HEX,                /* i: an address */
    LS_XA_NUM,                /* d */
} ls_xatype;

typedef struct ls_xarg {
    const char *key;
    ls_xatype type;
    int64_t i;
    double d;
    const char *s;
} ls_xarg;

/* A slice or an instant. */
typedef struct ls_xev {
    const char *name, *cat;   /* cat and args' keys: string literals */
    bool name_tmp;            /* name is not a constant (a buffer reused) */
    const char *cname;        /* JSON: a reserved colour name, or NULL */
    const ls_xarg *args;
    int nargs;
    uint64_t flow_in;         /* a slice: the flow that ends at its start (0: none) */
    const char *flow_via;
} ls_xev;

typedef struct ls_xmeta {      /* meta keys shown with the trace (otherData) */
    const char *key, *value;
} ls_xmeta;

typedef struct ls_xwriter ls_xwriter;
typedef struct ls_xwriter_ops {
    /* The header, with the trace's meta values. */
    void (*begin)(ls_xwriter *w, const ls_xmeta *meta, int nmeta);
    /* Declare t (name: what a viewer shows; a loop's also its process). */
    void (*track)(ls_xwriter *w, ls_xtrack *t, const char *name);
    void (*slice)(ls_xwriter *w, ls_xtrack *t, int64_t start, int64_t end, const ls_xev *e);
    void (*instant)(ls_xwriter *w, ls_xtrack *t, int64_t ts, const ls_xev *e);
    /* A flow from t at ts; it ends at the next slice with flow_in id. */
    void (*flow_start)(ls_xwriter *w, ls_xtrack *t, int64_t ts, uint64_t id, const char *via);
    /* One sample of n series (tracks of kind LS_XT_COUNTER, one loop's)
     * named series[i] in JSON's counter `group`. */
    void (*counters)(ls_xwriter *w, ls_xtrack *const *t, const char *group,
                     const char *const *series, const double *v, int n, int64_t ts);
    /* Nothing more on t: write what is pending. */
    void (*track_end)(ls_xwriter *w, ls_xtrack *t);
    /* The trailer; false if writing failed. */
    bool (*end)(ls_xwriter *w);
    void (*free)(ls_xwriter *w);
} ls_xwriter_ops;

struct ls_xwriter {
    const ls_xwriter_ops *ops;
    FILE *f;
    int64_t base;             /* ns that becomes ts 0 (the recording start) */
};

ls_xwriter *ls_export_json_new(FILE *f, int64_t base);
ls_xwriter *ls_export_proto_new(FILE *f, int64_t base);

/* Run the export of t through w; window [from, to] absolute ns, end the
 * recording's end.  False after printing an error. */
bool ls_export_run(ls_trace *t, ls_xwriter *w, int64_t from, int64_t to, int64_t end);

#endif
