/*
 * diff_out.c -- `loopscope diff`: each section's terminal table or JSON
 * (diff.h).  Numbers show as "before -> after" with the arrows aligned;
 * rows heaviest first.  Depends on output.h (tables, JSON, ls_term for every
 * string from a trace) and loopstat.h (iteration histogram quantiles).
 */
#define _GNU_SOURCE
#include "diff.h"
#include "loopstat.h"
#include "output.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------- pair tables */

/* A table whose numeric cells are "before -> after", arrows aligned. */
struct ptab {
    const ls_col *cols;
    int ncols;
    unsigned pairs;           /* bit c: column c holds pairs */
    char **cells;             /* row-major; a pair is "before\tafter" */
    size_t n, cap;
};

static void pt_add(struct ptab *p, char *s)
{
    if (!s || !ls_grow((void **)&p->cells, &p->cap, p->n + 1, sizeof(*p->cells))) {
        fputs("error: out of memory\n", stderr);
        exit(1);
    }
    p->cells[p->n++] = s;
}

static void pt_str(struct ptab *p, const char *s)
{
    pt_add(p, strdup(s ? s : ""));
}

static void pt_pair(struct ptab *p, const char *a, const char *b)
{
    char *s = NULL;
    pt_add(p, asprintf(&s, "%s\t%s", a, b) < 0 ? NULL : s);
}

/* Durations; has[k] false prints "-". */
static void pt_durs(struct ptab *p, const int64_t v[2], bool has0, bool has1)
{
    char a[32] = "-", b[32] = "-";
    if (has0)
        ls_fmt_dur(a, sizeof(a), v[0]);
    if (has1)
        ls_fmt_dur(b, sizeof(b), v[1]);
    pt_pair(p, a, b);
}

static void pt_ints(struct ptab *p, const int64_t v[2])
{
    char a[32], b[32];
    snprintf(a, sizeof(a), "%lld", (long long)v[0]);
    snprintf(b, sizeof(b), "%lld", (long long)v[1]);
    pt_pair(p, a, b);
}

static void pt_print(struct ptab *p)
{
    size_t wl[32] = { 0 }, wr[32] = { 0 };
    int nc = p->ncols < 32 ? p->ncols : 32;
    for (size_t i = 0; i < p->n; i++) {
        int c = (int)(i % (size_t)p->ncols);
        if (c >= nc || !(p->pairs & (1u << c)))
            continue;
        char *tab = strchr(p->cells[i], '\t');
        size_t l = tab ? (size_t)(tab - p->cells[i]) : strlen(p->cells[i]);
        if (l > wl[c])
            wl[c] = l;
        if (tab && strlen(tab + 1) > wr[c])
            wr[c] = strlen(tab + 1);
    }
    ls_table *t = ls_table_new(p->cols, p->ncols);
    for (size_t i = 0; i < p->n; i++) {
        int c = (int)(i % (size_t)p->ncols);
        char *s = p->cells[i], *tab = strchr(s, '\t');
        if (c < nc && (p->pairs & (1u << c)) && tab) {
            char buf[160];
            *tab = '\0';
            snprintf(buf, sizeof(buf), "%*s -> %*s", (int)wl[c], s, (int)wr[c], tab + 1);
            ls_table_str(t, buf);
        } else {
            ls_table_str(t, s);
        }
        free(s);
    }
    free(p->cells);
    ls_table_print(t, stdout, false);
}

static char *site_text(const struct diff_site *x)
{
    char *s = NULL;
    if (x->file && x->line_before != x->line &&
        asprintf(&s, "%s:%lld %s (moved from :%lld)", x->file, (long long)x->line,
                 x->fn ? x->fn : "?", (long long)x->line_before) >= 0)
        return s;
    if (x->file && asprintf(&s, "%s:%lld %s", x->file, (long long)x->line, x->fn ? x->fn : "?") >= 0)
        return s;
    return strdup(x->fn ? x->fn : "(no application frame)");
}

/* Heaviest first (the larger of both sides' weight), then in key order:
 * sorts indexes into a list already sorted by key. */
static int cmp_weight(const void *a, const void *b, void *ctx)
{
    const int64_t *w = ctx;
    size_t x = *(const size_t *)a, y = *(const size_t *)b;
    if (w[x] != w[y])
        return w[x] > w[y] ? -1 : 1;
    return x < y ? -1 : x > y;
}

static size_t *by_weight(const int64_t *w, size_t n)
{
    size_t *ix = malloc((n ? n : 1) * sizeof(*ix));
    if (!ix) {
        fputs("error: out of memory\n", stderr);
        exit(1);
    }
    for (size_t i = 0; i < n; i++)
        ix[i] = i;
    qsort_r(ix, n, sizeof(*ix), cmp_weight, (void *)w);
    return ix;
}

static int64_t max2(const int64_t v[2])
{
    return v[0] > v[1] ? v[0] : v[1];
}

static int64_t site_weight(const struct diff_site *x)
{
    return max2(x->total);
}

static int64_t group_weight(const struct diff_group *g)
{
    return max2(g->busy);
}

/* "2 new, 5 gone" for a section's title; "no change" when all are same. */
static void summary(char *buf, size_t n, const int count[DC_N])
{
    static const char *const word[DC_N] = { "unchanged", "new", "gone", "worse", "better",
                                            "not comparable" };
    static const int order[DC_N] = { DC_NEW, DC_GONE, DC_WORSE, DC_BETTER, DC_SAME, DC_NA };
    size_t len = 0;
    buf[0] = '\0';
    bool changed = false;
    for (int i = 0; i < DC_N; i++) {
        int c = order[i];
        if (!count[c] || ((c == DC_SAME || c == DC_NA) && !changed))
            continue;
        changed |= c != DC_SAME && c != DC_NA;
        len += (size_t)snprintf(buf + len, len < n ? n - len : 0, "%s%d %s", len ? ", " : "",
                                count[c], word[c]);
    }
    if (!changed)
        snprintf(buf, n, "no change");
}

/* One side's numbers as an object; null when absent there (present[k]
 * false); the fields from `nullable` on are null when has_tail is false
 * (e.g. step percentiles without steps). */
static void json_pair_obj(ls_json *j, const char *key, const char *const names[],
                          const int64_t *const vals[], int nv, int k, bool present,
                          int nullable, bool has_tail)
{
    ls_json_key(j, key);
    if (!present) {
        ls_json_null(j);
        return;
    }
    ls_json_begin_object(j);
    for (int i = 0; i < nv; i++) {
        ls_json_key(j, names[i]);
        if (i >= nullable && !has_tail)
            ls_json_null(j);
        else
            ls_json_int(j, vals[i][k]);
    }
    ls_json_end_object(j);
}

void diff_print_sites(struct diff_site *v, size_t n, int64_t min_ns, long limit, ls_json *j,
                        bool *changed)
{
    char d[32], sum[128];
    int count[DC_N] = { 0 };
    int64_t *w = calloc(n ? n : 1, sizeof(*w));
    if (!w)
        exit(1);
    for (size_t i = 0; i < n; i++) {
        count[v[i].ch]++;
        w[i] = site_weight(&v[i]);
    }
    size_t *ix = by_weight(w, n);
    summary(sum, sizeof(sum), count);
    *changed |= count[DC_SAME] + count[DC_NA] < (int)n;
    if (j) {
        ls_json_key(j, "min_episode_ns"); ls_json_int(j, min_ns);
        ls_json_key(j, "sites");
        ls_json_begin_array(j);
        static const char *const names[] = { "episodes", "total_ns", "max_ns" };
        for (size_t r = 0; r < n; r++) {
            const struct diff_site *x = &v[ix[r]];
            const int64_t *const vals[] = { x->n, x->total, x->max };
            ls_json_begin_object(j);
            ls_json_key(j, "change"); ls_json_str(j, diff_change_name[x->ch]);
            ls_json_key(j, "function"); ls_json_str(j, x->fn);
            ls_json_key(j, "file"); ls_json_str(j, x->file);
            for (int k = 0; k < 2; k++) {
                ls_json_key(j, k ? "line_before" : "line");
                if (x->file)
                    ls_json_int(j, k ? x->line_before : x->line);
                else
                    ls_json_null(j);
            }
            for (int k = 0; k < 2; k++) {
                json_pair_obj(j, k ? "after" : "before", names, vals, 3, k, x->n[k] > 0, 3, true);
                ls_json_key(j, k ? "calls_after" : "calls_before");
                ls_json_str(j, x->calls[k]);
            }
            ls_json_end_object(j);
        }
        ls_json_end_array(j);
    } else if (!n) {
        printf("\nblocking sites (episodes of at least %s): none in either trace\n",
               ls_fmt_dur(d, sizeof(d), min_ns));
    } else {
        printf("\nblocking sites (episodes of at least %s): %s\n",
               ls_fmt_dur(d, sizeof(d), min_ns), sum);
        static const ls_col cols[] = {
            { "CHANGE", NULL, false }, { "SITE", NULL, false }, { "EPISODES", NULL, true },
            { "TOTAL", NULL, true }, { "MAX", NULL, true }, { "IN", NULL, false },
        };
        struct ptab p = { cols, 6, 0x1c, NULL, 0, 0 };
        for (size_t r = 0; r < n && r < (size_t)limit; r++) {
            const struct diff_site *x = &v[ix[r]];
            pt_str(&p, diff_change_name[x->ch]);
            pt_add(&p, site_text(x));
            pt_ints(&p, x->n);
            pt_durs(&p, x->total, x->n[0] > 0, x->n[1] > 0);
            pt_durs(&p, x->max, x->n[0] > 0, x->n[1] > 0);
            pt_str(&p, x->calls[1] ? x->calls[1] : x->calls[0]);
        }
        pt_print(&p);
        if (n > (size_t)limit)
            printf("... %zu more (--limit)\n", n - (size_t)limit);
    }
    free(ix);
    free(w);
}

void diff_print_groups(struct diff_group *v, size_t n, long limit, ls_json *j, bool *changed)
{
    char sum[128];
    int count[DC_N] = { 0 };
    int64_t *w = calloc(n ? n : 1, sizeof(*w));
    if (!w)
        exit(1);
    for (size_t i = 0; i < n; i++) {
        count[v[i].ch]++;
        w[i] = group_weight(&v[i]);
    }
    size_t *ix = by_weight(w, n);
    summary(sum, sizeof(sum), count);
    *changed |= count[DC_SAME] + count[DC_NA] < (int)n;
    if (j) {
        ls_json_key(j, "tasks");
        ls_json_begin_array(j);
        static const char *const names[] = {
            "tasks", "busy_ns", "scheduled_ns", "resumes", "steps", "step_p50_ns", "step_p99_ns",
            "step_max_ns",
        };
        for (size_t r = 0; r < n; r++) {
            const struct diff_group *g = &v[ix[r]];
            const int64_t *const vals[] = { g->tasks, g->busy, g->sched, g->resumes,
                                            g->steps, g->p50, g->p99, g->smax };
            ls_json_begin_object(j);
            ls_json_key(j, "change"); ls_json_str(j, diff_change_name[g->ch]);
            ls_json_key(j, "name"); ls_json_str(j, g->name);
            ls_json_key(j, "function"); ls_json_str(j, g->function);
            for (int k = 0; k < 2; k++)
                json_pair_obj(j, k ? "after" : "before", names, vals, 8, k, g->tasks[k] > 0, 5,
                              g->steps[k] > 0);
            ls_json_end_object(j);
        }
        ls_json_end_array(j);
    } else if (!n) {
        printf("\ntasks: none in either trace\n");
    } else {
        printf("\ntasks by name (runs of digits as *; a step: task_run to the task's next "
               "event): %s\n", sum);
        static const ls_col cols[] = {
            { "CHANGE", NULL, false }, { "NAME", NULL, false }, { "TASKS", NULL, true },
            { "BUSY", NULL, true }, { "SCHEDULED", NULL, true }, { "STEPS", NULL, true },
            { "STEP p50", NULL, true }, { "STEP p99", NULL, true },
        };
        struct ptab p = { cols, 8, 0xfc, NULL, 0, 0 };
        for (size_t r = 0; r < n && r < (size_t)limit; r++) {
            const struct diff_group *g = &v[ix[r]];
            pt_str(&p, diff_change_name[g->ch]);
            pt_str(&p, g->name);
            pt_ints(&p, g->tasks);
            pt_durs(&p, g->busy, g->tasks[0] > 0, g->tasks[1] > 0);
            pt_durs(&p, g->sched, g->tasks[0] > 0, g->tasks[1] > 0);
            pt_ints(&p, g->resumes);
            pt_durs(&p, g->p50, g->steps[0] > 0, g->steps[1] > 0);
            pt_durs(&p, g->p99, g->steps[0] > 0, g->steps[1] > 0);
        }
        pt_print(&p);
        if (n > (size_t)limit)
            printf("... %zu more (--limit)\n", n - (size_t)limit);
    }
    free(ix);
    free(w);
}

/* Loops matched in order of id (libevl: creation order; generic: thread
 * ids).  Quantiles are bucket upper bounds (loopstat.h). */
static void quant(const ls_loopstat *l, double q, int64_t *hi, bool *capped, bool *has)
{
    int64_t lo;
    *has = l && ls_hist_quantile(l, q, &lo, hi, capped);
}

void diff_print_loops(ls_loopstat *ls[2], size_t nl[2], long limit, ls_json *j, bool *changed)
{
    size_t n = nl[0] > nl[1] ? nl[0] : nl[1];
    size_t with_hist = 0;
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < nl[k]; i++)
            with_hist += ls[k][i].hist_count > 0;
    if (j) {
        ls_json_key(j, "loops");
        ls_json_begin_array(j);
    } else if (!with_hist) {
        printf("\nloop iteration latency: no iteration histogram in either trace\n");
        return;
    } else {
        printf("\nloop iteration latency (busy time per iteration; upper bounds of power-of-two "
               "buckets; loops in order of id):\n");
    }
    static const ls_col cols[] = {
        { "CHANGE", NULL, false }, { "LOOP", NULL, false }, { "ITERATIONS", NULL, true },
        { "p50", NULL, true }, { "p99", NULL, true },
    };
    struct ptab p = { cols, 5, 0x1c, NULL, 0, 0 };
    for (size_t i = 0; i < n; i++) {
        const ls_loopstat *l[2] = { i < nl[0] ? &ls[0][i] : NULL, i < nl[1] ? &ls[1][i] : NULL };
        int64_t hi50[2] = { 0 }, hi99[2] = { 0 }, iters[2] = { 0 };
        bool cap50[2] = { 0 }, cap99[2] = { 0 }, h50[2], h99[2];
        for (int k = 0; k < 2; k++) {
            quant(l[k], 0.50, &hi50[k], &cap50[k], &h50[k]);
            quant(l[k], 0.99, &hi99[k], &cap99[k], &h99[k]);
            iters[k] = l[k] ? l[k]->hist_count : 0;
        }
        enum diff_change ch = !l[0] ? DC_NEW : !l[1] ? DC_GONE
                            : h99[0] && h99[1] ? diff_compare(hi99[0], hi99[1], 100000) : DC_NA;
        *changed |= ch != DC_SAME && ch != DC_NA;
        if (j) {
            ls_json_begin_object(j);
            ls_json_key(j, "change"); ls_json_str(j, diff_change_name[ch]);
            for (int k = 0; k < 2; k++) {
                ls_json_key(j, k ? "after" : "before");
                if (!l[k]) {
                    ls_json_null(j);
                    continue;
                }
                ls_json_begin_object(j);
                ls_json_key(j, "loop_id"); ls_json_int(j, l[k]->id);
                ls_json_key(j, "iterations"); ls_json_int(j, iters[k]);
                ls_json_key(j, "p50_upper_ns");
                h50[k] ? ls_json_int(j, hi50[k]) : ls_json_null(j);
                ls_json_key(j, "p99_upper_ns");
                h99[k] ? ls_json_int(j, hi99[k]) : ls_json_null(j);
                ls_json_end_object(j);
            }
            ls_json_end_object(j);
            continue;
        }
        if (i >= (size_t)limit)
            continue;
        char a[48] = "-", b[48] = "-", d[32];
        pt_str(&p, diff_change_name[ch]);
        if (l[0])
            snprintf(a, sizeof(a), "%lld", (long long)l[0]->id);
        if (l[1])
            snprintf(b, sizeof(b), "%lld", (long long)l[1]->id);
        char *ids = NULL;
        pt_add(&p, asprintf(&ids, "%s -> %s", a, b) < 0 ? NULL : ids);
        pt_ints(&p, iters);
        for (int q = 0; q < 2; q++) {
            const int64_t *hi = q ? hi99 : hi50;
            const bool *cap = q ? cap99 : cap50, *has = q ? h99 : h50;
            for (int k = 0; k < 2; k++) {
                char *dst = k ? b : a;
                if (has[k])
                    snprintf(dst, 48, "%s%s", cap[k] ? "<=" : "<", ls_fmt_dur(d, sizeof(d), hi[k]));
                else
                    snprintf(dst, 48, "-");
            }
            pt_pair(&p, a, b);
        }
    }
    if (j) {
        ls_json_end_array(j);
        free(p.cells);
        return;
    }
    pt_print(&p);
    if (n > (size_t)limit)
        printf("... %zu more (--limit)\n", n - (size_t)limit);
}

void diff_print_leaks(struct diff_leak *v, size_t n, long limit, ls_json *j, bool *changed)
{
    for (size_t i = 0; i < n; i++)
        *changed |= v[i].n[0] != v[i].n[1];
    if (j) {
        ls_json_key(j, "leaks");
        ls_json_begin_array(j);
        for (size_t i = 0; i < n; i++) {
            ls_json_begin_object(j);
            ls_json_key(j, "kind"); ls_json_str(j, v[i].kind);
            ls_json_key(j, "name"); ls_json_str(j, v[i].name);
            ls_json_key(j, "before"); ls_json_int(j, v[i].n[0]);
            ls_json_key(j, "after"); ls_json_int(j, v[i].n[1]);
            ls_json_end_object(j);
        }
        ls_json_end_array(j);
        return;
    }
    if (!n) {
        printf("\nleaks: none in either trace\n");
        return;
    }
    /* per kind (v is sorted by kind, then name) */
    printf("\nleaked tasks:");
    for (size_t i = 0; i < n;) {
        int64_t c[2] = { 0, 0 };
        size_t k = i;
        for (; k < n && !strcmp(v[k].kind, v[i].kind); k++) {
            c[0] += v[k].n[0];
            c[1] += v[k].n[1];
        }
        printf("%s %s %lld -> %lld", i ? "," : "", ls_term(v[i].kind), (long long)c[0],
               (long long)c[1]);
        i = k;
    }
    printf("\n");
    static const ls_col cols[] = {
        { "KIND", NULL, false }, { "NAME", NULL, false }, { "TASKS", NULL, true },
    };
    struct ptab p = { cols, 3, 0x4, NULL, 0, 0 };
    for (size_t i = 0; i < n && i < (size_t)limit; i++) {
        pt_str(&p, v[i].kind);
        pt_str(&p, v[i].name);
        pt_ints(&p, v[i].n);
    }
    pt_print(&p);
    if (n > (size_t)limit)
        printf("... %zu more (--limit)\n", n - (size_t)limit);
}
