/*
 * cmd_diff.c -- `loopscope diff BEFORE AFTER`: what changed between two
 * recordings of the same service: blocking sites (new, gone, worse,
 * better), tasks grouped by name (count, busy and scheduled time, step
 * latency p50/p99), loop iteration latency, leaks.  Terminal tables, --json,
 * and --svg (diff_svg.c).  Depends on trace.h, output.h, loopstat.h
 * (iteration_hist) and gv.h (--svg's output checks).
 */
#define _GNU_SOURCE
#include "commands.h"
#include "diff.h"
#include "loopstat.h"
#include "gv.h"
#include "output.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage[] =
    "usage: loopscope diff BEFORE AFTER [--svg FILE] [--limit N] [--json]\n"
    "\n"
    "What changed between two recordings of the same service, e.g. before and\n"
    "after a fix:\n"
    "  blocking sites   by the application frame that made the blocking call\n"
    "                   (function, file:line, as `blocking` shows them): episodes,\n"
    "                   total and longest stall before -> after; new, gone,\n"
    "                   worse or better (total stall time changed by more than\n"
    "                   10% and 1ms)\n"
    "  tasks by name    tasks grouped by name with each run of digits as '*'\n"
    "                   (conn-17 and conn-18 are conn-*): count, busy and\n"
    "                   scheduled time, steps, step latency p50/p99 (a step: from\n"
    "                   task_run to the task's next event); worse or better by\n"
    "                   the p99 step (10% and 100us)\n"
    "  loops            iteration latency p50/p99 per loop (iteration_hist, upper\n"
    "                   bounds of power-of-two buckets), loops matched in order\n"
    "  leaks            leaked tasks per leak kind and task name\n"
    "Only episodes at least as long as both recordings' blocking thresholds\n"
    "are compared.  Traces of different programs, or a libevl trace against a\n"
    "generic-mode one, still diff: what cannot be compared is said.\n"
    "\n"
    "  --svg FILE   the blocking call graph of both, coloured by change: new red,\n"
    "               gone grey and dashed, worse orange, better green\n"
    "  --limit N    at most N rows per table (default 20; --json lists all)\n"
    "  --json       JSON instead of text\n"
    "\n"
    "example: loopscope diff before.db after.db --svg change.svg\n";

const char *const diff_change_name[DC_N] = { "same", "new", "gone", "worse", "better", "n/a" };

struct opts {
    const char *svg;
    long limit;
};

static int on_opt(int c, const char *arg, void *ctx)
{
    struct opts *o = ctx;
    char *end;
    if (c == 's') {
        o->svg = arg;
    } else if (c == 'l') {
        o->limit = strtol(arg, &end, 10);
        if (*end || o->limit <= 0)
            return ls_error("diff: invalid --limit '%s'", arg);
    }
    return 0;
}

enum diff_change diff_compare(int64_t before, int64_t after, int64_t min_abs)
{
    int64_t d = after - before;      /* both clamped: no overflow */
    if (d >= min_abs && (double)after > 1.1 * (double)before)
        return DC_WORSE;
    if (-d >= min_abs && (double)after < (double)before / 1.1)
        return DC_BETTER;
    return DC_SAME;
}

bool diff_grow(void **arr, size_t *cap, size_t n, size_t sz)
{
    if (n <= *cap)
        return true;
    size_t c = *cap ? *cap * 2 : 16;
    while (c < n)
        c *= 2;
    void *p = realloc(*arr, c * sz);
    if (!p)
        return false;
    *arr = p;
    *cap = c;
    return true;
}

/* SQL name_pattern(name): runs of digits as '*' (graph --kind tasks groups
 * sibling tasks the same way). */
static void sql_name_pattern(sqlite3_context *cx, int argc, sqlite3_value **argv)
{
    (void)argc;
    const unsigned char *s = sqlite3_value_text(argv[0]);
    if (!s) {
        sqlite3_result_null(cx);
        return;
    }
    char *p = malloc(strlen((const char *)s) + 1), *q = p;
    if (!p) {
        sqlite3_result_error_nomem(cx);
        return;
    }
    while (*s) {
        if (*s >= '0' && *s <= '9') {
            *q++ = '*';
            while (*s >= '0' && *s <= '9')
                s++;
        } else {
            *q++ = (char)*s++;
        }
    }
    *q = '\0';
    sqlite3_result_text(cx, p, -1, free);
}

/* ---------------------------------------------------------------- sides */

/* "prog args" from meta target_cmdline (or target_binary), the program's
 * directory cut; *program gets the program's file name. */
static char *target_of(ls_trace *t, char **program)
{
    char *cmd = ls_meta(t, "target_cmdline");
    if (!cmd || !*cmd) {
        free(cmd);
        cmd = ls_meta(t, "target_binary");
    }
    if (!cmd)
        cmd = strdup("?");
    size_t first = strcspn(cmd, " ");
    const char *base = cmd;
    for (const char *p = cmd; p < cmd + first; p++)
        if (*p == '/' && p + 1 < cmd + first)
            base = p + 1;
    *program = strndup(base, (size_t)(cmd + first - base));
    char *r = strdup(base);
    free(cmd);
    return r;
}

static int64_t count_rows(ls_trace *t, const char *sql)
{
    sqlite3_stmt *st = ls_prepare(t, sql);
    int64_t n = 0;
    if (st && sqlite3_step(st) == SQLITE_ROW)
        n = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    return n;
}

static bool side_open(struct diff_side *s, const char *path)
{
    memset(s, 0, sizeof(*s));
    s->path = path;
    s->t = ls_trace_open(path);
    if (!s->t)
        return false;
    if (!ls_create_app_frames(s->t) ||
        sqlite3_create_function(s->t->db, "name_pattern", 1, SQLITE_UTF8 | SQLITE_DETERMINISTIC,
                                NULL, sql_name_pattern, NULL, NULL) != SQLITE_OK)
        return false;
    s->target = target_of(s->t, &s->program);
    s->generic = ls_is_generic(s->t);
    char *det = ls_meta(s->t, "blocking_detection");
    s->detection_off = det && !strcmp(det, "off");
    free(det);
    ls_drops d;
    ls_read_drops(s->t, &d);
    s->lossy = ls_drops_lossy(&d);
    s->duration_ns = ls_meta_ts(s->t, "duration_ns", 0);
    if (s->duration_ns <= 0)
        s->duration_ns = ls_ts(ls_meta_ts(s->t, "end_ns", 0) - ls_meta_ts(s->t, "start_ns", 0));
    s->threshold_ns = ls_meta_ts(s->t, "block_threshold_ns", 0);
    if (s->threshold_ns < 0)
        s->threshold_ns = 0;
    s->tasks = count_rows(s->t, "SELECT count(*) FROM tasks");
    s->episodes = count_rows(s->t, "SELECT count(*) FROM blocking");
    return true;
}

static void side_close(struct diff_side *s)
{
    ls_trace_close(s->t);
    free(s->target);
    free(s->program);
}


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
    if (!s || !diff_grow((void **)&p->cells, &p->cap, p->n + 1, sizeof(*p->cells))) {
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

/* ------------------------------------------------------------- output */

static void json_side(ls_json *j, const struct diff_side *s)
{
    ls_json_begin_object(j);
    ls_json_key(j, "path"); ls_json_str(j, s->path);
    ls_json_key(j, "target"); ls_json_str(j, s->target);
    ls_json_key(j, "mode"); ls_json_str(j, s->generic ? "generic" : "libevl");
    ls_json_key(j, "duration_ns"); ls_json_int(j, s->duration_ns);
    ls_json_key(j, "tasks"); ls_json_int(j, s->tasks);
    ls_json_key(j, "blocking_episodes"); ls_json_int(j, s->episodes);
    ls_json_key(j, "block_threshold_ns"); ls_json_int(j, s->threshold_ns);
    ls_json_key(j, "blocking_detection"); ls_json_bool(j, !s->detection_off);
    ls_json_key(j, "lossy"); ls_json_bool(j, s->lossy);
    ls_json_end_object(j);
}

/* The notes on what cannot be compared, or only with care. */
static int make_notes(struct diff_side s[2], int64_t min_ns, char *notes[8])
{
    static const char *const which[2] = { "BEFORE", "AFTER" };
    char d1[32], d2[32], d3[32];
    int n = 0;
    if (strcmp(s[0].program, s[1].program) &&
        asprintf(&notes[n], "the traces are of different programs (%s, %s): the comparison may "
                            "mean little", s[0].program, s[1].program) >= 0)
        n++;
    if (s[0].generic != s[1].generic &&
        asprintf(&notes[n], "%s is a generic-mode trace and %s a libevl one: tasks, steps and leaks "
                            "cannot be compared (a generic trace has no task lifecycle)",
                 which[s[0].generic ? 0 : 1], which[s[0].generic ? 1 : 0]) >= 0)
        n++;
    else if (s[0].generic && s[1].generic &&
             asprintf(&notes[n], "generic-mode traces have no task lifecycle: tasks, steps and "
                                 "leaks are not compared") >= 0)
        n++;
    for (int k = 0; k < 2; k++)
        if (s[k].detection_off &&
            asprintf(&notes[n], "blocking detection was off in %s: its blocking sites are unknown",
                     which[k]) >= 0)
            n++;
    if (s[0].threshold_ns != s[1].threshold_ns &&
        asprintf(&notes[n], "the blocking thresholds differ (%s, %s): episodes of at least %s are "
                            "compared", ls_fmt_dur(d1, sizeof(d1), s[0].threshold_ns),
                 ls_fmt_dur(d2, sizeof(d2), s[1].threshold_ns),
                 ls_fmt_dur(d3, sizeof(d3), min_ns)) >= 0)
        n++;
    for (int k = 0; k < 2; k++)
        if (s[k].lossy && asprintf(&notes[n], "%s lost events (dropped or rejected records): its "
                                              "counts are lower bounds", which[k]) >= 0)
            n++;
    return n;
}

static char *site_text(const struct diff_site *x)
{
    char *s = NULL;
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

static void print_sites(struct diff_site *v, size_t n, int64_t min_ns, long limit, ls_json *j,
                        bool *changed)
{
    char d[32], sum[128];
    int count[DC_N] = { 0 };
    int64_t *w = malloc((n ? n : 1) * sizeof(*w));
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
            ls_json_key(j, "line");
            if (x->file)
                ls_json_int(j, x->line);
            else
                ls_json_null(j);
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

static void print_groups(struct diff_group *v, size_t n, long limit, ls_json *j, bool *changed)
{
    char sum[128];
    int count[DC_N] = { 0 };
    int64_t *w = malloc((n ? n : 1) * sizeof(*w));
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

static void print_loops(ls_loopstat *ls[2], size_t nl[2], long limit, ls_json *j, bool *changed)
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

static void print_leaks(struct diff_leak *v, size_t n, long limit, ls_json *j, bool *changed)
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

/* ---------------------------------------------------------------- main */

int cmd_diff(int argc, char **argv)
{
    struct opts o = { .svg = NULL, .limit = 20 };
    static const struct option longopts[] = {
        { "svg", required_argument, NULL, 's' },
        { "limit", required_argument, NULL, 'l' },
        { 0 },
    };
    ls_optspec spec = { longopts, "", on_opt, &o };
    const char *paths[2] = { NULL, NULL };
    bool json = false;
    int rc = ls_parse_common(argc, argv, usage, &paths[0], &json, &spec, &paths[1]);
    if (rc)
        return rc;
    if (!paths[1]) {
        fprintf(stderr, "error: diff: two traces needed, BEFORE and AFTER\n"
                        "see 'loopscope diff --help'\n");
        return 2;
    }
    if (o.svg && gv_check_writable("diff", o.svg))
        return 1;

    struct diff_side s[2];
    struct diff_site *sites = NULL;
    struct diff_group *groups = NULL;
    struct diff_leak *leaks = NULL;
    size_t nsites = 0, ngroups = 0, nleaks = 0, nl[2] = { 0, 0 };
    ls_loopstat *ls[2] = { NULL, NULL };
    char *notes[8] = { 0 };
    int nnotes = 0;
    rc = 1;
    memset(s, 0, sizeof(s));
    if (!side_open(&s[0], paths[0]) || !side_open(&s[1], paths[1]))
        goto out;
    int64_t min_ns = s[0].threshold_ns > s[1].threshold_ns ? s[0].threshold_ns : s[1].threshold_ns;
    bool lifecycle = !s[0].generic && !s[1].generic;
    if (!diff_read_sites(s, min_ns, &sites, &nsites) ||
        (lifecycle && (!diff_read_groups(s, &groups, &ngroups) ||
                       !diff_read_leaks(s, &leaks, &nleaks))) ||
        !ls_loopstats_read(s[0].t, &ls[0], &nl[0]) || !ls_loopstats_read(s[1].t, &ls[1], &nl[1]))
        goto out;
    nnotes = make_notes(s, min_ns, notes);

    bool changed = false;
    ls_json jj, *j = NULL;
    char d[32];
    if (json) {
        j = &jj;
        ls_json_init(j, stdout);
        ls_json_begin_object(j);
        ls_json_key(j, "before"); json_side(j, &s[0]);
        ls_json_key(j, "after"); json_side(j, &s[1]);
        ls_json_key(j, "notes");
        ls_json_begin_array(j);
        for (int i = 0; i < nnotes; i++)
            ls_json_str(j, notes[i]);
        ls_json_end_array(j);
    } else {
        for (int k = 0; k < 2; k++)
            printf("%-7s %s: %s (%s), %s, %lld task%s, %lld blocking episode%s\n",
                   k ? "after:" : "before:", ls_term(s[k].path), ls_term(s[k].target),
                   s[k].generic ? "generic" : "libevl", ls_fmt_dur(d, sizeof(d), s[k].duration_ns),
                   (long long)s[k].tasks, s[k].tasks == 1 ? "" : "s", (long long)s[k].episodes,
                   s[k].episodes == 1 ? "" : "s");
        for (int i = 0; i < nnotes; i++)
            printf("note: %s\n", ls_term(notes[i]));
    }
    print_sites(sites, nsites, min_ns, o.limit, j, &changed);
    if (lifecycle) {
        print_groups(groups, ngroups, o.limit, j, &changed);
    } else if (j) {
        ls_json_key(j, "tasks"); ls_json_null(j);
    }
    print_loops(ls, nl, o.limit, j, &changed);
    if (lifecycle) {
        print_leaks(leaks, nleaks, o.limit, j, &changed);
    } else if (j) {
        ls_json_key(j, "leaks"); ls_json_null(j);
    }
    if (j) {
        ls_json_key(j, "changed"); ls_json_bool(j, changed);
        ls_json_end_object(j);
    } else if (!changed) {
        printf("\nnothing changed\n");
    }
    rc = o.svg ? diff_svg(s, min_ns, o.svg) : 0;
out:
    for (int i = 0; i < nnotes; i++)
        free(notes[i]);
    diff_free_sites(sites, nsites);
    diff_free_groups(groups, ngroups);
    diff_free_leaks(leaks, nleaks);
    for (int k = 0; k < 2; k++) {
        ls_loopstats_free(ls[k], nl[k]);
        side_close(&s[k]);
    }
    return rc;
}
