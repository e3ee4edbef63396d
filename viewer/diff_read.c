/*
 * diff_read.c -- `loopscope diff`: read blocking sites, task groups (with
 * their step latency percentiles) and leaks from both traces and merge
 * them by key (diff.h).  Each side is aggregated in SQL; rows of both sides
 * are sorted together and equal keys merged, so the cost is n log n
 * whatever the traces hold; step latencies come from the one replay of
 * task states.  Depends on trace.h and model/replay.h.
 */
#define _GNU_SOURCE
#include "diff.h"
#include "replay.h"

#include <stdlib.h>
#include <string.h>

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

int64_t diff_nonneg(int64_t v)
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

/* A fix moves the lines below it: within one function and file, when as
 * many sites are only in BEFORE as only in AFTER, they are the same sites
 * moved, paired in line order (line_before keeps the old line).  v is
 * sorted by function, file, line; returns the new count. */
static size_t match_moved(struct diff_site *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        v[i].line_before = v[i].line;
    size_t m = 0;
    for (size_t lo = 0; lo < n;) {
        size_t hi = lo + 1, gone = 0, added = 0;
        while (hi < n && !cmp_str(v[hi].fn, v[lo].fn) && !cmp_str(v[hi].file, v[lo].file))
            hi++;
        for (size_t i = lo; i < hi; i++) {
            gone += v[i].n[0] > 0 && v[i].n[1] == 0;
            added += v[i].n[0] == 0 && v[i].n[1] > 0;
        }
        if (gone && gone == added && v[lo].file) {
            /* fold the k-th new site into the k-th gone one */
            size_t g = lo, a = lo;
            for (size_t k = 0; k < gone; k++) {
                while (!(v[g].n[0] > 0 && v[g].n[1] == 0))
                    g++;
                while (!(v[a].n[0] == 0 && v[a].n[1] > 0))
                    a++;
                struct diff_site *x = &v[g], *y = &v[a];
                x->line = y->line;
                x->n[1] = y->n[1];
                x->total[1] = y->total[1];
                x->max[1] = y->max[1];
                x->calls[1] = y->calls[1];
                y->calls[1] = NULL;
                y->n[1] = -1;                   /* folded: dropped below */
                g++;
                a++;
            }
        }
        for (size_t i = lo; i < hi; i++) {
            if (v[i].n[1] < 0) {
                free(v[i].fn);
                free(v[i].file);
                free(v[i].calls[0]);
                free(v[i].calls[1]);
                continue;
            }
            v[m++] = v[i];
        }
        lo = hi;
    }
    return m;
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
            if (!ls_grow((void **)&v, &cap, nv + 1, sizeof(*v)))
                break;
            struct diff_site *x = &v[nv++];
            memset(x, 0, sizeof(*x));
            x->fn = dup_or_null(ls_col_text(st, 0));
            x->file = dup_or_null(ls_short_path(ls_col_text(st, 1)));
            x->line = sqlite3_column_type(st, 2) == SQLITE_NULL ? -1 : sqlite3_column_int64(st, 2);
            x->n[k] = diff_nonneg(sqlite3_column_int64(st, 3));
            x->total[k] = diff_nonneg(sqlite3_column_int64(st, 4));
            x->max[k] = diff_nonneg(sqlite3_column_int64(st, 5));
            x->calls[k] = dup_or_null(ls_col_text(st, 6));
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
    m = match_moved(v, m);
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

/* ---------------------------------------------------------------- steps */

/* A step: a running span of the one replay (model/replay.h), from task_run
 * to the task's next event; steps cut by the end of the recording or of
 * their loop are left out.  Per group its durations are kept exactly up to
 * STEPS_EXACT of them, then in the replay's histogram buckets (8 per power
 * of two, ls_hist_bucket): a percentile is then its bucket's upper bound
 * (at most the longest step), within 1/8 of a power of two. */
#define STEPS_EXACT 4096
#define HIST_N 488                /* ls_hist_index's buckets over int64 */

struct steps {
    int64_t *v;                   /* exact durations, or NULL once in hist */
    uint64_t *hist;               /* HIST_N counts */
    size_t n, cap;
    int64_t max;
};

struct steps_ctx {
    int64_t *ids;                 /* task ids, sorted */
    size_t *group;                /* their group (index into groups) */
    size_t ntasks;
    struct steps *st;             /* one per group */
    bool oom;
};

static void steps_add(struct steps_ctx *c, struct steps *g, int64_t d)
{
    if (d > g->max)
        g->max = d;
    if (!g->hist && g->n < STEPS_EXACT) {
        if (!ls_grow((void **)&g->v, &g->cap, g->n + 1, sizeof(*g->v))) {
            c->oom = true;
            return;
        }
        g->v[g->n++] = d;
        return;
    }
    if (!g->hist) {
        g->hist = calloc(HIST_N, sizeof(*g->hist));
        if (!g->hist) {
            c->oom = true;
            return;
        }
        for (size_t i = 0; i < g->n; i++)
            g->hist[ls_hist_index(g->v[i])]++;
        free(g->v);
        g->v = NULL;
    }
    g->hist[ls_hist_index(d)]++;
    g->n++;
}

static void on_span(void *ctx, const ls_span *s)
{
    struct steps_ctx *c = ctx;
    if (s->node != LS_NODE_RUNNING || s->end_kind == 0)
        return;
    int64_t id = (int64_t)s->task;
    size_t lo = 0, hi = c->ntasks;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->ids[mid] < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == c->ntasks || c->ids[lo] != id || c->group[lo] == SIZE_MAX)
        return;
    int64_t d = ls_ts(s->end) - ls_ts(s->start);
    steps_add(c, &c->st[c->group[lo]], d < 0 ? 0 : d);
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest rank: the value of rank ceil(q * n). */
static int64_t steps_quantile(struct steps *g, int pct)
{
    uint64_t rank = ((uint64_t)g->n * (uint64_t)pct + 99) / 100;
    if (rank < 1)
        rank = 1;
    if (!g->hist)
        return g->v[rank - 1];                     /* sorted */
    uint64_t cum = 0;
    for (int i = 0; i < HIST_N; i++) {
        cum += g->hist[i];
        if (g->hist[i] && cum >= rank) {
            int64_t lo, hi;
            ls_hist_bounds(i, &lo, &hi);
            return hi < g->max ? hi : g->max;
        }
    }
    return g->max;
}

static bool read_steps(struct diff_side *s, int k, struct diff_group *v, size_t n)
{
    struct steps_ctx c = { 0 };
    size_t cap = 0, gcap = 0;         /* of c.ids, c.group */
    bool ok = false;
    ls_replay *r = NULL;
    sqlite3_stmt *st = NULL, *lp = NULL;
    c.st = calloc(n ? n : 1, sizeof(*c.st));
    if (!c.st)
        goto out;
    /* each task's group */
    st = ls_prepare(s->t, "SELECT id, name_pattern(coalesce(name, '?')) FROM tasks ORDER BY id");
    if (!st)
        goto out;
    int step;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        if (!ls_grow((void **)&c.ids, &cap, c.ntasks + 1, sizeof(*c.ids)) ||
            !ls_grow((void **)&c.group, &gcap, c.ntasks + 1, sizeof(*c.group))) {
            c.oom = true;
            break;
        }
        struct diff_group key = { .name = (char *)ls_col_text(st, 1) };
        struct diff_group *x = key.name ? bsearch(&key, v, n, sizeof(*v), cmp_group) : NULL;
        c.ids[c.ntasks] = sqlite3_column_int64(st, 0);
        c.group[c.ntasks++] = x ? (size_t)(x - v) : SIZE_MAX;
    }
    if (!ls_step_ok(s->t, st, step))
        goto out;
    sqlite3_finalize(st);
    st = NULL;

    /* the replay, as model/derive.c feeds it */
    ls_replay_ops ops = { .on_span = on_span, .ctx = &c, .spans_only = true };
    r = ls_replay_new(&ops, SIZE_MAX / 2);
    lp = ls_prepare(s->t, "SELECT id, stopped_ns FROM loops WHERE stopped_ns IS NOT NULL");
    st = ls_prepare(s->t, "SELECT ts_ns, loop_id, coalesce(task_id, 0), kind, coalesce(reason, 0),"
                          " coalesce(arg0, 0), coalesce(arg1, 0) FROM events ORDER BY rowid");
    if (!r || !lp || !st) {
        c.oom |= !r;
        goto out;
    }
    while ((step = sqlite3_step(lp)) == SQLITE_ROW)
        ls_replay_loop_stop(r, (uint64_t)sqlite3_column_int64(lp, 0), ls_col_ts(lp, 1));
    if (!ls_step_ok(s->t, lp, step))
        goto out;
    while ((step = sqlite3_step(st)) == SQLITE_ROW) {
        ls_event e = {
            .ts = ls_col_ts(st, 0), .loop = (uint64_t)sqlite3_column_int64(st, 1),
            .task = (uint64_t)sqlite3_column_int64(st, 2), .kind = sqlite3_column_int(st, 3),
            .reason = sqlite3_column_int64(st, 4), .arg0 = sqlite3_column_int64(st, 5),
            .arg1 = sqlite3_column_int64(st, 6),
        };
        ls_replay_event(r, &e);
    }
    if (!ls_step_ok(s->t, st, step))
        goto out;
    ls_replay_end(r, ls_meta_ts(s->t, LS_META_END_NS, INT64_MAX));
    for (size_t i = 0; i < n; i++) {
        struct steps *g = &c.st[i];
        if (!g->n)
            continue;
        if (!g->hist)
            qsort(g->v, g->n, sizeof(*g->v), cmp_i64);
        v[i].steps[k] = (int64_t)(g->n > (size_t)LS_TS_LIMIT ? (size_t)LS_TS_LIMIT : g->n);
        v[i].p50[k] = steps_quantile(g, 50);
        v[i].p99[k] = steps_quantile(g, 99);
        v[i].smax[k] = g->max;
    }
    ok = true;
out:
    if (c.oom) {
        ls_error("diff: out of memory");
        ok = false;
    }
    sqlite3_finalize(st);
    sqlite3_finalize(lp);
    ls_replay_free(r);
    for (size_t i = 0; c.st && i < n; i++) {
        free(c.st[i].v);
        free(c.st[i].hist);
    }
    free(c.st);
    free(c.ids);
    free(c.group);
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
            if (!ls_grow((void **)&v, &cap, nv + 1, sizeof(*v)))
                break;
            struct diff_group *x = &v[nv++];
            memset(x, 0, sizeof(*x));
            x->name = strdup(ls_col_text(st, 0) ? ls_col_text(st, 0) : "?");
            x->function = dup_or_null(ls_col_text(st, 5));
            x->tasks[k] = diff_nonneg(sqlite3_column_int64(st, 1));
            x->busy[k] = diff_nonneg(sqlite3_column_int64(st, 2));
            x->sched[k] = diff_nonneg(sqlite3_column_int64(st, 3));
            x->resumes[k] = diff_nonneg(sqlite3_column_int64(st, 4));
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
            if (!ls_grow((void **)&v, &cap, nv + 1, sizeof(*v)))
                break;
            struct diff_leak *x = &v[nv++];
            memset(x, 0, sizeof(*x));
            x->kind = strdup(ls_col_text(st, 0) ? ls_col_text(st, 0) : "?");
            x->name = strdup(ls_col_text(st, 1) ? ls_col_text(st, 1) : "?");
            x->n[k] = diff_nonneg(sqlite3_column_int64(st, 2));
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
