/*
 * timeline_term.c -- `loopscope timeline` on the terminal: a row of glyphs
 * per lane fitted to the terminal width, the time axis and the legend; the
 * labels, columns and tick steps the SVG picture shares.  Depends on
 * timeline.h.
 */
#include "timeline.h"

#include <langinfo.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

const char *const tl_disp_names[D_COUNT] = { "not alive", "suspended", "ready",
                                              "ran briefly", "running", "blocking", "unknown" };
const char tl_ascii_glyph[D_COUNT] = { ' ', '.', '-', '|', '#', '!', '?' };
const char *const tl_utf8_glyph[D_COUNT] = { " ", "\xe2\x94\x80" /* ─ */,
                                              "\xe2\x96\x91" /* ░ */, "\xe2\x96\x8c" /* ▌ */,
                                              "\xe2\x96\x88" /* █ */, "\xe2\x96\x93" /* ▓ */,
                                              "?" };
const char *const tl_ansi_color[D_COUNT] = { "", "\033[34m", "\033[33m", "\033[32m",
                                              "\033[32m", "\033[1;31m", "\033[35m" };

/* Display name "name#id", at most w bytes: the name is cut (ending in '~')
 * so that the id stays.  The name is escaped for the terminal (the SVG
 * shows the same label) and cut between characters. */
void tl_lane_label(const lane *ln, char *buf, size_t w)
{
    if (ln->is_loop && ln->pid) {     /* a process group's: pid/tid */
        snprintf(buf, w + 1, "thread %lld/%lld", (long long)ln->pid, (long long)ln->tid);
        return;
    }
    if (ln->is_loop) {
        snprintf(buf, w + 1, "%s %lld", ln->thread ? "thread" : "loop",
                 (long long)(ln->thread && ln->tid ? ln->tid : ln->id));
        return;
    }
    char id[24];
    snprintf(id, sizeof(id), "#%lld", (long long)ln->id);
    size_t il = strlen(id), nl = 0;
    const char *full = ls_term(ln->name);
    if (strlen(full) + il <= w) {
        nl = strlen(full);
        memcpy(buf, full, nl);
    } else if (il + 2 <= w) {            /* "a_very_lon~#12" */
        const char *cut = ls_term_n(ln->name, w - il - 1);
        nl = strlen(cut);
        memcpy(buf, cut, nl);
        buf[nl++] = '~';
    } else {
        nl = 0;
        il = il < w ? il : w;
    }
    memcpy(buf + nl, id, il);
    buf[nl + il] = 0;
}

/* The column of a position (in columns, may be out of range or huge). */
int tl_col_of(double c, int ncols)
{
    return c < 0 ? 0 : c >= ncols ? ncols - 1 : (int)c;
}

/* What each of ncols columns shows (D_*): the highest-ranked state of
 * the spans touching it, "running" only if the task ran for half of it. */
void tl_lane_cells(const tl *x, const lane *ln, int ncols, unsigned char *cells,
                       double *run_out)
{
    static const unsigned char disp[ST_COUNT] = { D_NONE, D_SUSP, D_READY, D_RAN, D_BLOCK };
    double q = (double)(x->to - x->from) / ncols;
    double *run = calloc((size_t)ncols, sizeof(*run));
    memset(cells, D_NONE, (size_t)ncols);
    const spans *lists[2] = { &ln->st, &ln->blk };
    for (int l = 0; l < 2; l++)
        for (size_t i = 0; i < lists[l]->n; i++) {
            const span *s = &lists[l]->v[i];
            int c0 = tl_col_of((double)(s->s - x->from) / q, ncols);
            int c1 = tl_col_of((double)(s->e - 1 - x->from) / q, ncols);
            for (int c = c0; c <= c1; c++) {
                if (disp[s->st] > cells[c])
                    cells[c] = disp[s->st];
                if (s->run_pm && run) {
                    double a = x->from + q * c, b = a + q;
                    double lo = s->s > a ? s->s : a, hi = s->e < b ? s->e : b;
                    if (hi > lo)
                        run[c] += (hi - lo) * s->run_pm / 1000.0;
                }
            }
        }
    for (int c = 0; run && c < ncols; c++)
        if (cells[c] == D_RAN && run[c] >= q / 2)
            cells[c] = D_RUN;
    if (run && run_out)
        memcpy(run_out, run, (size_t)ncols * sizeof(*run));
    free(run);
}

/* A tick step of about `want` ns: 1, 2 or 5 times a power of ten. */
int64_t tl_nice_step(double want)
{
    double p = pow(10, floor(log10(want > 1 ? want : 1)));
    double m = want / p;
    double k = m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10;
    if (!(k * p < 4e18))                 /* windows are at most 2^62 ns (clamped times) */
        return (int64_t)4e18;
    return (int64_t)(k * p) > 0 ? (int64_t)(k * p) : 1;
}

/* A tick label: "250ms", "1.5s", "60.72ms": the unit follows the size of
 * `top` (the largest label), the decimals the step. */
void tl_fmt_tick(char *buf, size_t n, int64_t v, int64_t step, int64_t top)
{
    static const struct { int64_t div; const char *unit; } units[] = {
        { 1000000000, "s" }, { 1000000, "ms" }, { 1000, "us" }, { 1, "ns" },
    };
    size_t u = 0;
    while (u < 3 && units[u].div > top)
        u++;
    int dec = 0;
    for (int64_t d = units[u].div; dec < 9 && step % d != 0; d /= 10)
        dec++;
    snprintf(buf, n, "%.*f%s", dec, (double)v / (double)units[u].div, units[u].unit);
}

/* A point in time for titles and headers, to the microsecond: "+60.730ms",
 * "+7.188466s" (relative to the trace start). */
char *tl_fmt_at(char *buf, size_t n, int64_t rel)
{
    if (rel < 1000000000 && rel > -1000000000)
        snprintf(buf, n, "+%.3fms", (double)rel / 1e6);
    else
        snprintf(buf, n, "+%.6fs", (double)rel / 1e9);
    return buf;
}

int tl_terminal_width(void)
{
    const char *c = getenv("COLUMNS");
    char *end;
    if (c && *c) {
        long v = strtol(c, &end, 10);
        if (!*end && v > 0 && v < 100000)
            return (int)v;
    }
    struct winsize ws;
    if (isatty(STDOUT_FILENO) && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    return 100;
}

/* Colours and UTF-8 glyphs only on a terminal that takes them. */
void tl_term_style(const struct opts *o, bool *color, bool *utf8)
{
    bool tty = isatty(STDOUT_FILENO);
    const char *nc = getenv("NO_COLOR");
    *color = tty && !o->no_color && !(nc && *nc);
    const char *cs = nl_langinfo(CODESET);
    *utf8 = tty && !o->ascii && cs && !strcmp(cs, "UTF-8");
}

/* One terminal row: the lane's label, then its cells' glyphs up to the
 * last one that is not blank. */
void tl_print_cells(const lane *ln, const unsigned char *cells, int ncols, bool color,
                        bool utf8)
{
    char label[NAME_W + 1];
    int last = ncols;
    while (last > 0 && cells[last - 1] == D_NONE)
        last--;
    tl_lane_label(ln, label, NAME_W);
    printf("%-*s", NAME_W, label);
    if (last)
        putchar(' ');
    int prev = -1;
    for (int c = 0; c < last; c++) {
        int s = cells[c];
        if (color && s != prev)
            fputs(prev > ST_NONE ? "\033[0m" : "", stdout), fputs(tl_ansi_color[s], stdout);
        prev = s;
        if (utf8)
            fputs(tl_utf8_glyph[s], stdout);
        else
            putchar(tl_ascii_glyph[s]);
    }
    if (color && prev > ST_NONE)
        fputs("\033[0m", stdout);
    putchar('\n');
}

/* The time axis under the rows, q ns per column. */
void tl_print_axis(const tl *x, int ncols, double q, bool utf8)
{
    /* The axis: a tick about every 12 columns, labels where they fit. */
    int64_t step = tl_nice_step(q * 12);
    int64_t rel0 = x->from - x->start;
    char *ticks = malloc((size_t)ncols + 1), *labels = malloc((size_t)ncols + 64);
    memset(ticks, '-', (size_t)ncols);
    memset(labels, ' ', (size_t)ncols + 63);
    ticks[ncols] = 0;
    int label_end = 0;
    /* Times are clamped (ls_ts), so v cannot overflow; the count bounds the
     * loop whatever the step. */
    int64_t v = (rel0 + step - 1) / step * step;
    for (int k = 0; k <= ncols && v < x->to - x->start; k++, v += step) {
        double cd = (double)(v - rel0) / q;
        if (cd < 0 || cd >= ncols)
            continue;
        int c = (int)cd;
        ticks[c] = '+';
        char b[32];
        b[0] = '+';
        tl_fmt_tick(b + 1, sizeof(b) - 1, v, step, x->to - x->start);
        size_t l = strlen(b);
        if (c >= label_end && c + (int)l <= ncols) {
            memcpy(labels + c, b, l);
            label_end = c + (int)l + 2;
        }
    }
    int ll = ncols;
    while (ll > 0 && labels[ll - 1] == ' ')
        ll--;
    labels[ll] = 0;
    if (utf8) {
        printf("%*s ", NAME_W, "");
        for (int c = 0; c < ncols; c++)
            fputs(ticks[c] == '+' ? "\xe2\x94\xbc" : "\xe2\x94\x80", stdout);
        putchar('\n');
    } else {
        printf("%*s %s\n", NAME_W, "", ticks);
    }
    if (ll)
        printf("%*s %s\n", NAME_W, "", labels);
    free(ticks);
    free(labels);
}

void tl_print_terminal(tl *x, const struct opts *o, const char *path, size_t ntasks,
                           size_t nmatch, int nloops)
{
    bool color, utf8;
    tl_term_style(o, &color, &utf8);
    int width = tl_terminal_width();
    int ncols = width - NAME_W - 1;
    if (ncols < 10)
        ncols = 10;
    double q = (double)(x->to - x->from) / ncols;
    char d1[32], d2[32], d3[32], d4[32];

    printf("%s: %zu task%s on %d loop%s, %s .. %s (%s), one column = %s\n", ls_term(path), ntasks,
           ntasks == 1 ? "" : "s", nloops, nloops == 1 ? "" : "s",
           tl_fmt_at(d1, sizeof(d1), x->from - x->start), tl_fmt_at(d2, sizeof(d2), x->to - x->start),
           ls_fmt_dur(d3, sizeof(d3), x->to - x->from), ls_fmt_dur(d4, sizeof(d4), (int64_t)q));

    unsigned char *cells = malloc((size_t)ncols);
    bool threads = false;
    for (size_t i = 0; cells && i < x->nlanes; i++) {
        if (x->lanes[i].thread)              /* a generic trace's loop thread */
            tl_thread_cells(x, &x->lanes[i], ncols, cells);
        else
            tl_lane_cells(x, &x->lanes[i], ncols, cells, NULL);
        threads |= x->lanes[i].thread;
        tl_print_cells(&x->lanes[i], cells, ncols, color, utf8);
    }
    free(cells);

    tl_print_axis(x, ncols, q, utf8);

    /* The legend, then what was left out. */
    printf("legend:");
    for (int s = D_BLOCK; s >= D_SUSP; s--) {
        printf("%s%s", s == D_BLOCK ? " " : "  ", color ? tl_ansi_color[s] : "");
        fputs(utf8 ? tl_utf8_glyph[s] : (char[]){ tl_ascii_glyph[s], 0 }, stdout);
        printf("%s %s%s", color ? "\033[0m" : "", tl_disp_names[s],
               s == D_READY ? " (waiting for the loop)" : "");
    }
    printf("\n");
    if (threads) {
        char note[200];
        tl_thread_legend("threads:", color, utf8);
        tl_thread_note(x, q, note, sizeof(note));
        if (note[0])
            printf("%s\n", note);
        for (size_t i = 0; i < x->nlanes; i++)
            if (x->lanes[i].thread) {
                char share[160];
                tl_thread_share(&x->lanes[i], ncols, share, sizeof(share));
                printf("%s\n", share);
            }
    }
    if (x->source)
        printf("tasks: %s, states and times as the censuses saw them\n", ls_term(x->source));
    if (nmatch > ntasks)
        printf("%zu more task%s in the window not shown (the %zu busiest are): "
               "use --limit, --tasks or --loop\n", nmatch - ntasks, nmatch - ntasks == 1 ? "" : "s",
               ntasks);
}

