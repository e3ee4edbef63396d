/*
 * export_json.c -- `loopscope export --format chrome-json`: the writer of
 * export.h for the Chrome/Perfetto Trace Event Format (JSON object form:
 * {"displayTimeUnit":"ns","otherData":{...},"traceEvents":[...]}), to open
 * in ui.perfetto.dev or chrome://tracing.
 *
 * A loop is a process (pid = loop id), its thread and its tasks threads
 * (tid = the thread id, the task id), each named by metadata events.
 * Slices are complete "X" events, instants "i" (thread scope), a flow an
 * "s" on the waker's track and an "f" bound to the enclosing slice (bp
 * "e") written right after the slice it ends at, counters one "C" event
 * per sample.  Array order carries no meaning in this format (viewers sort
 * by ts); where two slices start at the same instant the enclosing one
 * comes first, which is what Perfetto's stable sort needs to nest them.
 *
 * Timestamps are microseconds from the recording start printed with three
 * decimals, so nanosecond precision survives.  Every string goes through
 * the viewer's one JSON escaper (output.h).
 */
#define _GNU_SOURCE
#include "export.h"
#include "output.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct jwriter {
    ls_xwriter w;
    int64_t events;            /* trace events written */
    int nargs;                 /* args written in the open "args" object */
} jwriter;

static void put_lit(FILE *f, const char *s) { fputs_unlocked(s, f); }
static void put_str(FILE *f, const char *s) { ls_json_write_str(f, s); }

/* Integers and timestamps are formatted by hand and written with the
 * unlocked stdio calls: with printf a 10M-event export spent a third of
 * its time in vfprintf and stream locking. */
static void put_i64(FILE *f, int64_t v)
{
    char b[24], *p = b + sizeof(b);
    uint64_t u = v < 0 ? -(uint64_t)v : (uint64_t)v;
    do
        *--p = (char)('0' + u % 10);
    while (u /= 10);
    if (v < 0)
        *--p = '-';
    fwrite_unlocked(p, 1, (size_t)(b + sizeof(b) - p), f);
}

/* A timestamp or duration in microseconds with nanosecond digits. */
static void put_us(FILE *f, int64_t ns)
{
    uint64_t u = ns < 0 ? -(uint64_t)ns : (uint64_t)ns;   /* INT64_MIN too */
    if (ns < 0)
        putc_unlocked('-', f);
    put_i64(f, (int64_t)(u / 1000));
    int r = (int)(u % 1000);
    char b[4] = { '.', (char)('0' + r / 100), (char)('0' + r / 10 % 10), (char)('0' + r % 10) };
    fwrite_unlocked(b, 1, 4, f);
}

static void ev_start(jwriter *j, char ph, const char *name, const char *cat,
                     const ls_xtrack *t, int64_t ts)
{
    FILE *f = j->w.f;
    put_lit(f, j->events++ ? ",\n{\"ph\":\"" : "\n{\"ph\":\"");
    putc_unlocked(ph, f);
    put_lit(f, "\",\"name\":");
    put_str(f, name);
    if (cat) {
        put_lit(f, ",\"cat\":");
        put_str(f, cat);
    }
    put_lit(f, ",\"pid\":");
    put_i64(f, t->pid);
    put_lit(f, ",\"tid\":");
    put_i64(f, t->tid);
    put_lit(f, ",\"ts\":");
    put_us(f, ts - j->w.base);
}

static void put_cname(jwriter *j, const char *cname)
{
    if (!cname)
        return;
    put_lit(j->w.f, ",\"cname\":\"");
    put_lit(j->w.f, cname);           /* one of the model's constants */
    putc_unlocked('"', j->w.f);
}

static void arg_key(jwriter *j, const char *k)
{
    if (j->nargs++)
        putc_unlocked(',', j->w.f);
    put_str(j->w.f, k);
    putc_unlocked(':', j->w.f);
}

/* Milliseconds as an exact decimal number (ns precision, no trailing
 * zeros), for args a human reads. */
static void put_ms(FILE *f, int64_t ns)
{
    char b[40];
    uint64_t u = ns < 0 ? -(uint64_t)ns : (uint64_t)ns;   /* a trace value: INT64_MIN too */
    int n = snprintf(b, sizeof(b), "%s%" PRIu64 ".%06d", ns < 0 ? "-" : "", u / 1000000,
                     (int)(u % 1000000));
    while (n > 0 && b[n - 1] == '0')
        b[--n] = 0;
    if (n > 0 && b[n - 1] == '.')
        b[--n] = 0;
    put_lit(f, b);
}

static void put_args(jwriter *j, const ls_xarg *a, int n)
{
    FILE *f = j->w.f;
    char b[40];
    put_lit(f, ",\"args\":{");
    j->nargs = 0;
    for (int i = 0; i < n; i++) {
        arg_key(j, a[i].key);
        switch (a[i].type) {
        case LS_XA_INT:
            put_i64(f, a[i].i);
            break;
        case LS_XA_STR:
        case LS_XA_NAME:
            put_str(f, a[i].s);
            break;
        case LS_XA_MS:
            put_ms(f, a[i].i);
            break;
        case LS_XA_HEX:
            snprintf(b, sizeof(b), "\"0x%" PRIx64 "\"", (uint64_t)a[i].i);
            put_lit(f, b);
            break;
        case LS_XA_NUM:
            snprintf(b, sizeof(b), "%.6g", isfinite(a[i].d) ? a[i].d : 0.0);
            put_lit(f, b);
            break;
        }
    }
    put_lit(f, "}}");
}

static void meta_event(jwriter *j, const char *name, const ls_xtrack *t, const char *key,
                       const char *sval, int64_t ival)
{
    FILE *f = j->w.f;
    fputs(j->events++ ? ",\n" : "\n", f);
    fprintf(f, "{\"ph\":\"M\",\"name\":\"%s\",\"pid\":%" PRId64 ",\"tid\":%" PRId64
            ",\"ts\":0,\"args\":{\"%s\":", name, t->pid, t->tid, key);
    if (sval)
        put_str(f, sval);
    else
        fprintf(f, "%" PRId64, ival);
    fputs("}}", f);
}

static void j_begin(ls_xwriter *w, const ls_xmeta *meta, int nmeta)
{
    FILE *f = w->f;
    fputs("{\"displayTimeUnit\":\"ns\",\"otherData\":{", f);
    for (int i = 0; i < nmeta; i++) {
        fprintf(f, "%s\"%s\":", i ? "," : "", meta[i].key);
        put_str(f, meta[i].value);
    }
    fputs("},\"traceEvents\":[", f);
}

static void j_track(ls_xwriter *w, ls_xtrack *t, const char *name)
{
    jwriter *j = (jwriter *)w;
    switch (t->kind) {
    case LS_XT_LOOP:
        meta_event(j, "process_name", t, "name", name, 0);
        meta_event(j, "process_sort_index", t, "sort_index", NULL, t->sort);
        break;
    case LS_XT_THREAD:
    case LS_XT_TASK:
        meta_event(j, "thread_name", t, "name", name, 0);
        meta_event(j, "thread_sort_index", t, "sort_index", NULL, t->sort);
        break;
    case LS_XT_COUNTER:                  /* a series of the loop's "C" events */
        break;
    }
}

static void j_slice(ls_xwriter *w, ls_xtrack *t, int64_t a, int64_t b, const ls_xev *e)
{
    jwriter *j = (jwriter *)w;
    ev_start(j, 'X', e->name, e->cat, t, a);
    put_lit(w->f, ",\"dur\":");
    put_us(w->f, b - a);
    put_cname(j, e->cname);
    put_args(j, e->args, e->nargs);
    if (e->flow_in) {                    /* after the slice it binds to */
        ev_start(j, 'f', "wake", "wake", t, a);
        fprintf(w->f, ",\"id\":%" PRIu64 ",\"bp\":\"e\"", e->flow_in);
        ls_xarg via = { "via", LS_XA_NAME, .s = e->flow_via };
        put_args(j, &via, 1);
    }
}

static void j_instant(ls_xwriter *w, ls_xtrack *t, int64_t ts, const ls_xev *e)
{
    jwriter *j = (jwriter *)w;
    ev_start(j, 'i', e->name, e->cat, t, ts);
    put_lit(w->f, ",\"s\":\"t\"");
    put_cname(j, e->cname);
    put_args(j, e->args, e->nargs);
}

static void j_flow_start(ls_xwriter *w, ls_xtrack *t, int64_t ts, uint64_t id, const char *via)
{
    jwriter *j = (jwriter *)w;
    ev_start(j, 's', "wake", "wake", t, ts);
    fprintf(w->f, ",\"id\":%" PRIu64, id);
    ls_xarg a = { "via", LS_XA_NAME, .s = via };
    put_args(j, &a, 1);
}

static void j_counters(ls_xwriter *w, ls_xtrack *const *t, const char *group,
                       const char *const *series, const double *v, int n, int64_t ts)
{
    jwriter *j = (jwriter *)w;
    ls_xarg a[8];
    if (n > 8)
        n = 8;
    for (int i = 0; i < n; i++)
        a[i] = (ls_xarg){ series[i], LS_XA_NUM, .d = v[i] };
    ev_start(j, 'C', group, NULL, t[0], ts);
    put_args(j, a, n);
}

static void j_track_end(ls_xwriter *w, ls_xtrack *t)
{
    (void)w;
    (void)t;
}

static bool j_end(ls_xwriter *w)
{
    fputs("\n]}\n", w->f);
    return !ferror(w->f);
}

static void j_free(ls_xwriter *w) { free(w); }

static const ls_xwriter_ops json_ops = {
    j_begin, j_track, j_slice, j_instant, j_flow_start, j_counters, j_track_end, j_end, j_free,
};

ls_xwriter *ls_export_json_new(FILE *f, int64_t base)
{
    jwriter *j = calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    j->w = (ls_xwriter){ &json_ops, f, base };
    return &j->w;
}
