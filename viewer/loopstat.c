/*
 * loopstat.c -- the generic loop mode's tables, read defensively (loopstat.h).
 */
#include "loopstat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int64_t ls_sat_add(int64_t a, int64_t b)
{
    int64_t r;
    if (__builtin_add_overflow(a, b, &r) || r > LS_TS_LIMIT)
        return LS_TS_LIMIT;
    return r < 0 ? 0 : r;
}

/* A count or duration from the trace: clamped, -1 when negative. */
static int64_t col_count(sqlite3_stmt *st, int i)
{
    int64_t v = ls_col_ts(st, i);
    return v < 0 ? -1 : v;
}

static ls_loopstat *find(ls_loopstat *s, size_t n, int64_t id)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s[mid].id == id)
            return &s[mid];
        if (s[mid].id < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Run sql (rows ordered by loop id) and hand each row to fn. */
static bool each_row(ls_trace *t, const char *sql, ls_loopstat *s, size_t n,
                     void (*fn)(ls_loopstat *l, sqlite3_stmt *st))
{
    sqlite3_stmt *st = ls_prepare(t, sql);
    if (!st)
        return false;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        ls_loopstat *l = find(s, n, sqlite3_column_int64(st, 0));
        if (l)
            fn(l, st);
    }
    bool ok = ls_step_ok(t, st, rc);
    sqlite3_finalize(st);
    return ok;
}

/* loop_id, start_ns, end_ns, iterations, wait_ns, busy_ns, max_busy_ns,
 * by loop and start. */
static void window_row(ls_loopstat *l, sqlite3_stmt *st)
{
    int64_t s = ls_col_ts(st, 1), e = ls_col_ts(st, 2);
    int64_t it = col_count(st, 3), wait = col_count(st, 4), busy = col_count(st, 5),
            mx = col_count(st, 6);
    if (e < s || it < 0 || wait < 0 || busy < 0 || mx < 0) {
        l->bad_windows++;
        return;
    }
    if (l->windows && s < l->last_ns)
        l->overlaps++;
    int64_t from = l->windows && s < l->last_ns ? l->last_ns : s;
    if (e > from)
        l->covered_ns = ls_sat_add(l->covered_ns, e - from);
    if (!l->windows || s < l->first_ns)
        l->first_ns = s;
    if (!l->windows || e > l->last_ns)
        l->last_ns = e;
    l->windows++;
    l->span_ns = ls_sat_add(l->span_ns, e - s);
    l->iterations = ls_sat_add(l->iterations, it);
    l->wait_ns = ls_sat_add(l->wait_ns, wait);
    l->busy_ns = ls_sat_add(l->busy_ns, busy);
    if (mx > l->max_busy_ns || l->windows == 1) {
        l->max_busy_ns = mx;
        l->max_at_ns = s;
    }
}

/* loop_id, lo_ns, hi_ns, count, busy_ns, by loop and lo. */
static void hist_row(ls_loopstat *l, sqlite3_stmt *st)
{
    int64_t lo = ls_col_ts(st, 1), hi = ls_col_ts(st, 2), c = col_count(st, 3),
            busy = col_count(st, 4);
    if (lo < 0 || hi <= lo || c < 0 || busy < 0 || l->nhist >= LS_HIST_MAX || !l->hist) {
        l->hist_bad++;
        return;
    }
    l->hist[l->nhist++] = (ls_bucket){ lo, hi, c, busy };
    l->hist_count = ls_sat_add(l->hist_count, c);
    l->hist_busy = ls_sat_add(l->hist_busy, busy);
}

static bool loopstats_read_into(ls_trace *t, ls_loopstat **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    bool win = ls_has_table(t, "loop_windows"), hist = ls_has_table(t, "iteration_hist");
    char sql[512];
    /* a loop's tid and pid from its row; a loop with windows and no row
     * (an older trace) is its own tid */
    snprintf(sql, sizeof(sql), "SELECT id, coalesce(max(tid), id), max(pid) FROM (SELECT id, tid,"
             " pid FROM loops%s%s) GROUP BY id ORDER BY id",
             win ? " UNION ALL SELECT DISTINCT loop_id, NULL, NULL FROM loop_windows" : "",
             hist ? " UNION ALL SELECT DISTINCT loop_id, NULL, NULL FROM iteration_hist" : "");
    sqlite3_stmt *st = ls_prepare(t, sql);
    if (!st)
        return false;
    ls_loopstat *s = NULL;
    size_t cap = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        if (*n == cap) {
            cap = cap ? cap * 2 : 8;
            ls_loopstat *p = realloc(s, cap * sizeof(*s));
            if (!p) {
                ls_error("out of memory");
                rc = SQLITE_NOMEM;
                break;
            }
            s = p;
        }
        ls_loopstat *l = &s[(*n)++];
        memset(l, 0, sizeof(*l));
        l->id = sqlite3_column_int64(st, 0);
        l->tid = sqlite3_column_int64(st, 1);
        l->pid = sqlite3_column_int64(st, 2);
    }
    bool ok = rc != SQLITE_NOMEM && ls_step_ok(t, st, rc);
    sqlite3_finalize(st);
    *out = s;
    if (!ok)
        return false;
    if (win && !each_row(t, "SELECT loop_id, start_ns, end_ns, iterations, wait_ns, busy_ns,"
                            " max_busy_ns FROM loop_windows ORDER BY loop_id, start_ns, end_ns",
                         s, *n, window_row))
        return false;
    if (!hist)
        return true;
    /* The histogram is small (a bucket per power of two): room for it per
     * loop that has one. */
    st = ls_prepare(t, "SELECT DISTINCT loop_id FROM iteration_hist");
    if (!st)
        return false;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        ls_loopstat *l = find(s, *n, sqlite3_column_int64(st, 0));
        if (l && !l->hist)
            l->hist = calloc(LS_HIST_MAX, sizeof(*l->hist));
    }
    ok = ls_step_ok(t, st, rc);
    sqlite3_finalize(st);
    return ok && each_row(t, "SELECT loop_id, lo_ns, hi_ns, count, busy_ns FROM iteration_hist"
                             " ORDER BY loop_id, lo_ns, hi_ns", s, *n, hist_row);
}

void ls_loopstats_free(ls_loopstat *s, size_t n)
{
    for (size_t i = 0; s && i < n; i++)
        free(s[i].hist);
    free(s);
}

/* On failure nothing is left to free: a partial read is freed here (a
 * damaged trace can fail after the first rows). */
bool ls_loopstats_read(ls_trace *t, ls_loopstat **out, size_t *n)
{
    if (loopstats_read_into(t, out, n))
        return true;
    ls_loopstats_free(*out, *n);
    *out = NULL;
    *n = 0;
    return false;
}

bool ls_hist_quantile(const ls_loopstat *s, double q, int64_t *lo, int64_t *hi, bool *capped)
{
    if (s->hist_count <= 0)
        return false;
    /* nearest rank: the smallest bucket whose cumulative count reaches it */
    double rank = q * (double)s->hist_count;
    int64_t cum = 0;
    for (int i = 0; i < s->nhist; i++) {
        cum = ls_sat_add(cum, s->hist[i].count);
        if (s->hist[i].count > 0 && (double)cum >= rank) {
            *lo = s->hist[i].lo;
            *hi = s->hist[i].hi;
            *capped = s->windows > 0 && s->max_busy_ns >= *lo && s->max_busy_ns < *hi;
            if (*capped)
                *hi = s->max_busy_ns;
            return true;
        }
    }
    return false;
}

ls_shares ls_window_shares(double span, double busy, double wait)
{
    if (!(busy >= 0))
        busy = 0;
    if (!(wait >= 0))
        wait = 0;
    double whole = busy + wait > span ? busy + wait : span;
    if (!(whole > 0))
        return (ls_shares){ 0, 0, 0 };
    ls_shares r = { busy / whole, wait / whole, 0 };
    r.unknown = 1 - r.busy - r.wait;
    if (r.unknown < 1e-12)
        r.unknown = 0;
    return r;
}
