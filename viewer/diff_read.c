/*
 * diff_read.c -- `loopscope diff`: read blocking sites, task groups (with
 * their step latency percentiles) and leaks from both traces and merge
 * them by key (diff.h).  Each side is aggregated in SQL; rows of both sides
 * are sorted together and equal keys merged, so the cost is n log n
 * whatever the traces hold.  Depends on trace.h and ls_codes.h.
 */
#define _GNU_SOURCE
#include "diff.h"
#include "ls_codes.h"

#include <stdlib.h>
#include <string.h>

static const char *col_text(sqlite3_stmt *st, int i)
{
    return (const char *)sqlite3_column_text(st, i);
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

static int cmp_str(const char *a, const char *b)
{
    if (!a || !b)
        return a ? 1 : b ? -1 : 0;           /* NULL (no frame) first */
    return strcmp(a, b);
}

static int64_t nonneg(int64_t v)
{
    v = ls_ts(v);
    return v < 0 ? 0 : v;
}

/* ---------------------------------------------------------------- sites */

static const char sites_sql[] =
    "SELECT s.function, s.file, s.line, count(*), CAST(total(b.dur_ns) AS INTEGER),"
    "  max(b.dur_ns), group_concat(DISTINCT coalesce(y.name, k.name))"
    " FROM blocking b LEFT JOIN sites s ON s.stack_id = b.stack_id"
    " LEFT JOIN syscalls y ON y.nr = b.syscall LEFT JOIN blocking_kinds k ON k.id = b.kind"
    " WHERE b.dur_ns >= ?1 GROUP BY s.function, s.file, s.line";

static int cmp_site(const void *x, const void *y)
{
    const struct diff_site *a = x, *b = y;
    int c = cmp_str(a->fn, b->fn);
    if (!c)
        c = cmp_str(a->file, b->file);
    if (!c)
        c = a->line < b->line ? -1 : a->line > b->line;
    return c;
}

void diff_free_sites(struct diff_site *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(v[i].fn);
        free(v[i].file);
        free(v[i].calls[0]);
        free(v[i].calls[1]);
    }
    free(v);
}

bool diff_read_sites(struct diff_side s[2], int64_t min_ns, struct diff_site **out, size_t *n)
{
    struct diff_site *v = NULL;
    size_t nv = 0, cap = 0;
    for (int k = 0; k < 2; k++) {
        if (s[k].detection_off)
            continue;
        sqlite3_stmt *st = ls_prepare(s[k].t, sites_sql);
        if (!st)
            goto fail;
        sqlite3_bind_int64(st, 1, min_ns);
        int step;
        while ((step = sqlite3_step(st)) == SQLITE_ROW) {
            if (!diff_grow((void **)&v, &cap, nv + 1, sizeof(*v)))
                break;
            struct diff_site *x = &v[nv++];
            memset(x, 0, sizeof(*x));
            x->fn = dup_or_null(col_text(st, 0));
            x->file = dup_or_null(ls_short_path(col_text(st, 1)));
            x->line = sqlite3_column_type(st, 2) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 2);
            x->n[k] = nonneg(sqlite3_column_int64(st, 3));
            x->total[k] = nonneg(sqlite3_column_int64(st, 4));
            x->max[k] = nonneg(sqlite3_column_int64(st, 5));
            x->calls[k] = dup_or_null(col_text(st, 6));
        }
        bool ok = ls_step_ok(s[k].t, st, step);
        sqlite3_finalize(st);
        if (!ok)
            goto fail;
    }
    if (nv)
        qsort(v, nv, sizeof(*v), cmp_site);
    /* Merge equal keys (the other side's, or one side's under another full
     * path with the same short one). */
    size_t m = 0;
    for (size_t i = 0; i < nv; i++) {
        if (m && !cmp_site(&v[m - 1], &v[i])) {
            struct diff_site *a = &v[m - 1], *b = &v[i];
            for (int k = 0; k < 2; k++) {
                a->n[k] = ls_ts(a->n[k] + b->n[k]);
                a->total[k] = ls_ts(a->total[k] + b->total[k]);
                if (b->max[k] > a->max[k])
                    a->max[k] = b->max[k];
                if (!a->calls[k]) {
                    a->calls[k] = b->calls[k];
                    b->calls[k] = NULL;
                }
                free(b->calls[k]);
            }
            free(b->fn);
            free(b->file);
            continue;
        }
        v[m++] = v[i];
    }
    for (size_t i = 0; i < m; i++) {
        struct diff_site *x = &v[i];
        x->ch = !x->n[0] ? DC_NEW : !x->n[1] ? DC_GONE
              : diff_compare(x->total[0], x->total[1], 1000000);
    }
    *out = v;
    *n = m;
    return true;
fail:
    diff_free_sites(v, nv);
    return false;
}

/* ---------------------------------------------------------- task groups */

static const char groups_sql[] =
    "SELECT name_pattern(coalesce(t.name, '?')) AS k, count(*),"
    "  CAST(total(s.busy_ns) AS INTEGER), CAST(total(s.scheduled_ns) AS INTEGER),"
    "  CAST(total(s.resumes) AS INTEGER), min(t.function)"
    " FROM tasks t LEFT JOIN task_stats s ON s.task_id = t.id GROUP BY k";

/* A step: a running span, from task_run to the task's next event (the
 * replay's rule, model/replay.h); steps still running at the end are left
 * out.  Percentiles by nearest rank. */
static const char steps_sql[] =
    "WITH s AS (SELECT task_id, kind, ts_ns,"
    "    lead(ts_ns) OVER (PARTITION BY task_id ORDER BY ts_ns, rowid) AS nx"
    "    FROM events WHERE task_id IS NOT NULL),"
    " d AS (SELECT name_pattern(coalesce(t.name, '?')) AS k, max(s.nx - s.ts_ns, 0) AS dur"
    "    FROM s JOIN tasks t ON t.id = s.task_id"
    "    WHERE s.kind = " LS_SQL_KIND_task_run " AND s.nx IS NOT NULL),"
    " r AS (SELECT k, dur, row_number() OVER (PARTITION BY k ORDER BY dur) AS rn,"
    "    count(*) OVER (PARTITION BY k) AS n FROM d)"
    " SELECT k, max(n), max(CASE WHEN rn = (n * 50 + 99) / 100 THEN dur END),"
    "  max(CASE WHEN rn = (n * 99 + 99) / 100 THEN dur END), max(dur) FROM r GROUP BY k";

static int cmp_group(const void *x, const void *y)
{
    const struct diff_group *a = x, *b = y;
    return cmp_str(a->name, b->name);
}

void diff_free_groups(struct diff_group *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(v[i].name);
        free(v[i].function);
    }
    free(v);
}

static bool read_steps(struct diff_side *s, int k, struct diff_group *v, size_t n)
{
    sqlite3_stmt *st = ls_prepare(s->t, steps_sql);
    if (!st)
        return false;
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        struct diff_group key = { .name = (char *)col_text(st, 0) };
        struct diff_group *g = key.name ? bsearch(&key, v, n, sizeof(*v), cmp_group) : NULL;
        if (!g)
            continue;
        g->steps[k] = nonneg(sqlite3_column_int64(st, 1));
        g->p50[k] = nonneg(sqlite3_column_int64(st, 2));
        g->p99[k] = nonneg(sqlite3_column_int64(st, 3));
        g->smax[k] = nonneg(sqlite3_column_int64(st, 4));
    }
    bool ok = ls_step_ok(s->t, st, step);
    sqlite3_finalize(st);
    return ok;
}

bool diff_read_groups(struct diff_side s[2], struct diff_group **out, size_t *n)
{
    struct diff_group *v = NULL;
    size_t nv = 0, cap = 0;
    for (int k = 0; k < 2; k++) {
        sqlite3_stmt *st = ls_prepare(s[k].t, groups_sql);
        if (!st)
            goto fail;
        int step;
        while ((step = sqlite3_step(st)) == SQLITE_ROW) {
            if (!diff_grow((void **)&v, &cap, nv + 1, sizeof(*v)))
                break;
            struct diff_group *x = &v[nv++];
            memset(x, 0, sizeof(*x));
            x->name = strdup(col_text(st, 0) ? col_text(st, 0) : "?");
            x->function = dup_or_null(col_text(st, 5));
            x->tasks[k] = nonneg(sqlite3_column_int64(st, 1));
            x->busy[k] = nonneg(sqlite3_column_int64(st, 2));
            x->sched[k] = nonneg(sqlite3_column_int64(st, 3));
            x->resumes[k] = nonneg(sqlite3_column_int64(st, 4));
            if (!x->name) {
                free(x->function);
                nv--;
                break;
            }
        }
        bool ok = ls_step_ok(s[k].t, st, step);
        sqlite3_finalize(st);
        if (!ok)
            goto fail;
    }
    if (nv)
        qsort(v, nv, sizeof(*v), cmp_group);
    size_t m = 0;
    for (size_t i = 0; i < nv; i++) {
        if (m && !cmp_group(&v[m - 1], &v[i])) {   /* one per side: fill in */
            struct diff_group *a = &v[m - 1], *b = &v[i];
            for (int k = 0; k < 2; k++) {
                a->tasks[k] += b->tasks[k];
                a->busy[k] += b->busy[k];
                a->sched[k] += b->sched[k];
                a->resumes[k] += b->resumes[k];
            }
            if (!a->function) {
                a->function = b->function;
                b->function = NULL;
            }
            free(b->function);
            free(b->name);
            continue;
        }
        v[m++] = v[i];
    }
    for (int k = 0; k < 2; k++)
        if (!read_steps(&s[k], k, v, m))
            goto fail_merged;
    for (size_t i = 0; i < m; i++) {
        struct diff_group *g = &v[i];
        g->ch = !g->tasks[0] ? DC_NEW : !g->tasks[1] ? DC_GONE
              : g->steps[0] && g->steps[1] ? diff_compare(g->p99[0], g->p99[1], 100000) : DC_NA;
    }
    *out = v;
    *n = m;
    return true;
fail_merged:
    nv = m;
fail:
    diff_free_groups(v, nv);
    return false;
}

/* ---------------------------------------------------------------- leaks */

static const char leaks_sql[] =
    "SELECT coalesce(k.name, 'kind ' || t.leak), name_pattern(coalesce(t.name, '?')), count(*)"
    " FROM tasks t LEFT JOIN leak_kinds k ON k.id = t.leak"
    " WHERE t.leak IS NOT NULL AND t.leak != 0 GROUP BY 1, 2";

static int cmp_leak(const void *x, const void *y)
{
    const struct diff_leak *a = x, *b = y;
    int c = cmp_str(a->kind, b->kind);
    return c ? c : cmp_str(a->name, b->name);
}

void diff_free_leaks(struct diff_leak *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(v[i].kind);
        free(v[i].name);
    }
    free(v);
}

bool diff_read_leaks(struct diff_side s[2], struct diff_leak **out, size_t *n)
{
    struct diff_leak *v = NULL;
    size_t nv = 0, cap = 0;
    for (int k = 0; k < 2; k++) {
        sqlite3_stmt *st = ls_prepare(s[k].t, leaks_sql);
        if (!st)
            goto fail;
        int step;
        while ((step = sqlite3_step(st)) == SQLITE_ROW) {
            if (!diff_grow((void **)&v, &cap, nv + 1, sizeof(*v)))
                break;
            struct diff_leak *x = &v[nv++];
            memset(x, 0, sizeof(*x));
            x->kind = strdup(col_text(st, 0) ? col_text(st, 0) : "?");
            x->name = strdup(col_text(st, 1) ? col_text(st, 1) : "?");
            x->n[k] = nonneg(sqlite3_column_int64(st, 2));
        }
        bool ok = ls_step_ok(s[k].t, st, step);
        sqlite3_finalize(st);
        if (!ok)
            goto fail;
    }
    if (nv)
        qsort(v, nv, sizeof(*v), cmp_leak);
    size_t m = 0;
    for (size_t i = 0; i < nv; i++) {
        if (m && !cmp_leak(&v[m - 1], &v[i])) {
            v[m - 1].n[0] += v[i].n[0];
            v[m - 1].n[1] += v[i].n[1];
            free(v[i].kind);
            free(v[i].name);
            continue;
        }
        v[m++] = v[i];
    }
    *out = v;
    *n = m;
    return true;
fail:
    diff_free_leaks(v, nv);
    return false;
}
