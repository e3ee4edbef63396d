/*
 * timeline_generic.c -- `loopscope timeline` on a generic loop mode trace
 * (a process not built on libevl): a row per loop thread from its
 * iteration windows (loop_windows) and blocking episodes, on the terminal
 * or as SVG.  A generic trace with a task lifecycle (a census of its
 * asyncio tasks) draws its task lanes as libevl's, with these thread rows
 * instead of the blocking-only loop rows (tl_thread_*).  Depends on
 * timeline.h.
 */
#include "loopstat.h"
#include "timeline.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

static void gcol_add(gcol *c, const gcol *d, double k)
{
    c->busy += d->busy * k;
    c->wait += d->wait * k;
    c->iters += d->iters * k;
    c->cover += d->cover * k;
}

/* What a generic column shows (D_*), from the shares of the time its
 * windows span (ls_window_shares, the rule info and export use): blocked >
 * unknown for half of it or more > busy for half of it > busy for a tenth
 * of it > waiting; blank without window.  Time neither busy nor waiting
 * is never drawn as busy. */
void tl_thread_cells(const tl *x, const lane *ln, int ncols, unsigned char *cells)
{
    tl_lane_cells(x, ln, ncols, cells, NULL);      /* its blocking episodes */
    for (int c = 0; c < ncols; c++) {
        const gcol *g = &ln->gc[c];
        if (cells[c] == D_BLOCK || !(g->cover > 0))
            continue;
        ls_shares sh = ls_window_shares(g->cover, g->busy, g->wait);
        cells[c] = sh.unknown >= 0.5 ? D_UNK : sh.busy >= 0.5 ? D_RUN
                   : sh.busy >= 0.1 ? D_RAN : D_SUSP;
    }
}

/* "thread 12: busy 4.1%, waiting 50.9%, unknown 45.0% of 1.36s in windows" */
void tl_thread_share(const lane *ln, int ncols, char *buf, size_t n)
{
    gcol sum = { 0 };
    for (int c = 0; ln->gc && c < ncols; c++)
        gcol_add(&sum, &ln->gc[c], 1);
    char label[64], d[32];
    tl_lane_label(ln, label, 30);
    ls_shares sh = ls_window_shares(sum.cover, sum.busy, sum.wait);
    if (!(sum.cover > 0)) {
        snprintf(buf, n, "%s: no window in the time shown", label);
        return;
    }
    snprintf(buf, n, "%s: busy %.1f%%, waiting %.1f%%, unknown %.1f%% of %s in windows", label,
             100 * sh.busy, 100 * sh.wait, 100 * sh.unknown,
             ls_fmt_dur(d, sizeof(d), (int64_t)(sum.cover + 0.5)));
}

/* A loop thread's windows in [from, to), each one's busy, wait and
 * iterations spread evenly over it, summed per column: the partial columns
 * at its ends directly, the whole ones through a difference array, so a
 * window costs O(1) however many columns it spans. */
static bool generic_fill(tl *x, lane *ln, int ncols)
{
    if (!ls_has_table(x->t, "loop_windows")) {     /* an older trace: blocking only */
        if (!(ln->gc = calloc((size_t)ncols, sizeof(*ln->gc))))
            return !ls_error("out of memory");
        return true;
    }
    ln->gc = calloc((size_t)ncols, sizeof(*ln->gc));
    gcol *diff = calloc((size_t)ncols + 1, sizeof(*diff));
    if (!ln->gc || !diff) {
        free(diff);
        ls_error("out of memory");
        return false;
    }
    sqlite3_stmt *st = ls_prepare(x->t, "SELECT start_ns, end_ns, iterations, wait_ns, busy_ns"
                                        " FROM loop_windows WHERE loop_id = ?1 AND start_ns < ?3"
                                        " AND end_ns > ?2");
    if (!st) {
        free(diff);
        return false;
    }
    sqlite3_bind_int64(st, 1, ln->id);
    sqlite3_bind_int64(st, 2, x->from);
    sqlite3_bind_int64(st, 3, x->to);
    double q = (double)(x->to - x->from) / ncols;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
        int64_t s = ls_col_ts(st, 0), e = ls_col_ts(st, 1), it = ls_col_ts(st, 2),
                wait = ls_col_ts(st, 3), busy = ls_col_ts(st, 4);
        if (e <= s || it < 0 || wait < 0 || busy < 0)
            continue;                    /* malformed: counted by info */
        double len = (double)(e - s);
        gcol dens = { (double)busy / len, (double)wait / len, (double)it / len, 1 };
        double a = (double)((s > x->from ? s : x->from) - x->from) / q;
        double b = (double)((e < x->to ? e : x->to) - x->from) / q;
        if (!(b > a))
            continue;
        int c0 = tl_col_of(a, ncols), c1 = tl_col_of(ceil(b) - 1, ncols);
        if (c0 >= c1) {
            gcol_add(&ln->gc[c0], &dens, (b - a) * q);
            continue;
        }
        gcol_add(&ln->gc[c0], &dens, (c0 + 1 - a) * q);
        gcol_add(&ln->gc[c1], &dens, (b - c1) * q);
        gcol_add(&diff[c0 + 1], &dens, q);
        gcol_add(&diff[c1], &dens, -q);
    }
    bool ok = ls_step_ok(x->t, st, rc);
    sqlite3_finalize(st);
    gcol run = { 0 };
    for (int c = 0; c < ncols; c++) {
        gcol_add(&run, &diff[c], 1);
        gcol_add(&ln->gc[c], &run, 1);
    }
    free(diff);
    return ok;
}

/* The first window start and the last window or episode end (absolute);
 * false when there is none. */
bool tl_generic_bounds(tl *x, int64_t *first, int64_t *last)
{
    bool win = ls_has_table(x->t, "loop_windows");
    sqlite3_stmt *st = ls_prepare(x->t, win
        ? "SELECT min(s), max(e) FROM (SELECT start_ns AS s, end_ns AS e FROM loop_windows"
          " WHERE end_ns > start_ns UNION ALL SELECT start_ns, start_ns + dur_ns FROM blocking"
          " WHERE dur_ns > 0)"
        : "SELECT min(start_ns), max(start_ns + dur_ns) FROM blocking WHERE dur_ns > 0");
    bool ok = st && sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL;
    if (ok) {
        *first = ls_col_ts(st, 0);
        *last = ls_col_ts(st, 1) - 1;
        if (*last < *first)
            *last = *first;
    }
    sqlite3_finalize(st);
    return ok;
}

bool tl_thread_fill(tl *x, lane *ln, int ncols)
{
    return generic_fill(x, ln, ncols);
}

static const char *const generic_names[D_COUNT] = {
    "no window", "waiting (in the wait call)", "?", "partly busy (10-50%)",
    "busy (half of the time or more)", "blocked (a blocking episode)",
    "unknown (half of the time or more neither busy nor waiting)",
};

/* A note under a generic picture or table: columns finer than windows. */
void tl_thread_note(const tl *x, double q, char *buf, size_t n)
{
    int64_t w = ls_meta_int(x->t, LS_META_WINDOW_NS, 0);
    char d[32];
    if (w > 0 && q < (double)w)
        snprintf(buf, n, "busy and wait times come from %s windows, spread evenly over each: "
                 "columns are finer than that, so approximate", ls_fmt_dur(d, sizeof(d), w));
    else
        buf[0] = 0;
}

void tl_thread_legend(const char *head, bool color, bool utf8)
{
    printf("%s", head);
    static const int order[] = { D_BLOCK, D_RUN, D_RAN, D_SUSP, D_UNK };
    for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
        int s = order[k];
        printf("%s%s", k ? "  " : " ", color ? tl_ansi_color[s] : "");
        fputs(utf8 ? tl_utf8_glyph[s] : (char[]){ tl_ascii_glyph[s], 0 }, stdout);
        printf("%s %s", color ? "\033[0m" : "", generic_names[s]);
    }
    printf("\n");
}

static void generic_terminal(tl *x, const struct opts *o, const char *path, size_t nmatch)
{
    bool color, utf8;
    tl_term_style(o, &color, &utf8);
    int ncols = tl_terminal_width() - NAME_W - 1;
    if (ncols < 10)
        ncols = 10;
    double q = (double)(x->to - x->from) / ncols;
    char d1[32], d2[32], d3[32], d4[32], note[200];
    printf("%s: %zu loop thread%s (generic loop mode), %s .. %s (%s), one column = %s\n",
           ls_term(path), x->nlanes, x->nlanes == 1 ? "" : "s",
           tl_fmt_at(d1, sizeof(d1), x->from - x->start), tl_fmt_at(d2, sizeof(d2), x->to - x->start),
           ls_fmt_dur(d3, sizeof(d3), x->to - x->from), ls_fmt_dur(d4, sizeof(d4), (int64_t)q));
    unsigned char *cells = malloc((size_t)ncols);
    for (size_t i = 0; cells && i < x->nlanes; i++) {
        tl_thread_cells(x, &x->lanes[i], ncols, cells);
        tl_print_cells(&x->lanes[i], cells, ncols, color, utf8);
    }
    free(cells);
    tl_print_axis(x, ncols, q, utf8);
    tl_thread_legend("legend:", color, utf8);
    tl_thread_note(x, q, note, sizeof(note));
    if (note[0])
        printf("%s\n", note);
    for (size_t i = 0; i < x->nlanes; i++) {
        char share[160];
        tl_thread_share(&x->lanes[i], ncols, share, sizeof(share));
        printf("%s\n", share);
    }
    if (nmatch > x->nlanes)
        printf("%zu more loop thread%s not shown: use --limit or --loop\n", nmatch - x->nlanes,
               nmatch - x->nlanes == 1 ? "" : "s");
}

static bool generic_svg(tl *x, const char *file, const char *path, size_t nmatch)
{
    FILE *f = tl_svg_open(x, file, 0);
    if (!f)
        return false;
    char d1[32], d2[32], d3[32], note[200], rest[200], more[48] = "";
    double q = (double)(x->to - x->from) / SVG_LANE_W;
    if (nmatch > x->nlanes)
        snprintf(more, sizeof(more), ", %zu more not shown", nmatch - x->nlanes);
    snprintf(rest, sizeof(rest), "%zu loop thread%s (generic loop mode), %s .. %s (%s)%s",
             x->nlanes, x->nlanes == 1 ? "" : "s", tl_fmt_at(d1, sizeof(d1), x->from - x->start),
             tl_fmt_at(d2, sizeof(d2), x->to - x->start),
             ls_fmt_dur(d3, sizeof(d3), x->to - x->from), more);
    tl_svg_title(f, path, rest);
    tl_thread_note(x, q, note, sizeof(note));
    if (note[0]) {                       /* under the axis: the title's line is full */
        char fit[200];
        tl_svg_fit(note, 12, false, SVG_W - 20, fit, sizeof(fit));
        fprintf(f, "<text x=\"10\" y=\"%d\" fill=\"#666\">", SVG_TOP + (int)x->nlanes * SVG_ROW_H + 42);
        ls_xml_write(f, fit);
        fprintf(f, "</text>\n");
    }
    static const svg_leg leg[] = {
        { 3, "busy (half+)" }, { 5, "partly busy" }, { 1, "waiting" }, { 6, "unknown" },
    };
    tl_svg_legend(f, leg, sizeof(leg) / sizeof(leg[0]), "blocked");
    tl_svg_axis(f, x);
    for (size_t i = 0; i < x->nlanes; i++) {
        lane *ln = &x->lanes[i];
        double y = tl_svg_row_begin(f, ln, i);
        tl_svg_thread_row(f, x, ln, y);
        for (size_t k = 0; k < ln->blk.n; k++)
            tl_svg_rect(f, x, ln, &ln->blk.v[k], y + 1, 16);
        fprintf(f, "</g>\n");
    }
    return tl_svg_close(f, file);
}

void tl_svg_thread_row(FILE *f, tl *x, const lane *ln, double y)
{
    static const int cls[D_COUNT] = { 0, 1, 2, 5, 3, 4, 6 };   /* D_* -> CSS class s<N> */
    double q = (double)(x->to - x->from) / SVG_LANE_W;
    char d1[32], d2[32];
    unsigned char *cells = malloc(SVG_LANE_W);
    if (cells) {
        char label[64], share[160];
        tl_lane_label(ln, label, sizeof(label) - 1);
        tl_thread_share(ln, SVG_LANE_W, share, sizeof(share));
        /* the row's shares over the time shown, on its name */
        fprintf(f, "<rect x=\"0\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"none\" "
                   "pointer-events=\"all\"><title>", y, SVG_NAME_W, SVG_ROW_H);
        ls_xml_write(f, share);
        fprintf(f, "</title></rect>\n");
        tl_thread_cells(x, ln, SVG_LANE_W, cells);
        for (int c = 0; c < SVG_LANE_W;) {
            int d = cells[c], e = c;
            gcol sum = { 0 };
            while (e < SVG_LANE_W && cells[e] == d)
                gcol_add(&sum, &ln->gc[e++], 1);
            if (d != D_NONE && d != D_BLOCK) {   /* blocking: drawn from its own spans */
                bool thin = d == D_SUSP;
                int64_t s0 = x->from + (int64_t)(q * c), s1 = x->from + (int64_t)(q * e);
                ls_shares sh = ls_window_shares(sum.cover, sum.busy, sum.wait);
                fprintf(f, "<rect class=\"s%d\" x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%d\">"
                           "<title>", cls[d], SVG_NAME_W + c, y + (thin ? 7 : 3), e - c,
                        thin ? 4 : 12);
                ls_xml_write(f, label);
                fprintf(f, ": busy %.3g%%, waiting %.3g%%", 100 * sh.busy, 100 * sh.wait);
                if (sh.unknown >= 0.0005)
                    fprintf(f, ", unknown %.3g%% (neither busy nor waiting)", 100 * sh.unknown);
                fprintf(f, ", about %.0f iterations&#10;start %s, duration %s</title></rect>\n",
                        sum.iters, tl_fmt_at(d1, sizeof(d1), s0 - x->start),
                        ls_fmt_dur(d2, sizeof(d2), s1 - s0));
            }
            c = e;
        }
    }
    free(cells);
}

/* The generic loop mode's timeline: a row per loop thread. */
int tl_timeline_generic(tl *x, const struct opts *o, const char *path)
{
    if (o->glob)
        return ls_error("timeline: --tasks selects task rows; a generic loop mode trace has loop "
                        "thread rows only (use --loop TID)");
    bool win = ls_has_table(x->t, "loop_windows");
    char sql[320];
    /* --loop: its id, or its thread's (a process group's loop ids are not tids) */
    snprintf(sql, sizeof(sql), "SELECT id, coalesce(max(tid), id), max(pid) FROM (SELECT id, tid,"
             " pid FROM loops%s) GROUP BY id HAVING ?1 IS NULL OR id = ?1 OR max(tid) = ?1"
             " ORDER BY id",
             win ? " UNION ALL SELECT DISTINCT loop_id, NULL, NULL FROM loop_windows" : "");
    bool group = ls_trace_group(x->t);
    sqlite3_stmt *st = ls_prepare(x->t, sql);
    if (!st)
        return 1;
    if (o->loop >= 0)
        sqlite3_bind_int64(st, 1, o->loop);
    x->lanes = calloc((size_t)o->limit, sizeof(*x->lanes));
    size_t nmatch = 0;
    int rc;
    while ((rc = sqlite3_step(st)) == SQLITE_ROW)
        if (nmatch++ < (size_t)o->limit && x->lanes)
            x->lanes[x->nlanes++] = (lane){ .is_loop = true, .thread = true,
                                            .id = sqlite3_column_int64(st, 0),
                                            .loop = sqlite3_column_int64(st, 0),
                                            .tid = sqlite3_column_int64(st, 1),
                                            .pid = group ? sqlite3_column_int64(st, 2) : 0 };
    bool ok = ls_step_ok(x->t, st, rc);
    sqlite3_finalize(st);
    if (!ok)
        return 1;
    int ncols = o->svg ? SVG_LANE_W : tl_terminal_width() - NAME_W - 1;
    if (ncols < 10)
        ncols = 10;
    for (size_t i = 0; i < x->nlanes; i++)
        if (win ? !generic_fill(x, &x->lanes[i], ncols)
                : !(x->lanes[i].gc = calloc((size_t)ncols, sizeof(gcol))))
            return 1;
    if (!tl_load_blocking(x))
        return 1;
    char d1[32], d2[32];
    if (!o->svg) {
        generic_terminal(x, o, path, nmatch);
        return 0;
    }
    if (!generic_svg(x, o->svg, path, nmatch))
        return 1;
    printf("wrote %s: %zu loop thread%s, %s .. %s\n", o->svg, x->nlanes,
           x->nlanes == 1 ? "" : "s", tl_fmt_at(d1, sizeof(d1), x->from - x->start),
           tl_fmt_at(d2, sizeof(d2), x->to - x->start));
    return 0;
}

