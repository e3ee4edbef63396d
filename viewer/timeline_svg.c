/*
 * timeline_svg.c -- `loopscope timeline --svg FILE`: the timeline as an SVG
 * picture whose spans carry hover titles (every trace string through
 * ls_xml_write).  Depends on timeline.h.
 */
#include "timeline.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const state_names[ST_COUNT] = { "not alive", "suspended", "ready", "running",
                                                   "blocking" };
static const char *const svg_color[ST_COUNT] = { "none", "#9aa7b8", "#e8a915", "#2e9e44",
                                                 "#d62728" };

void tl_svg_rect(FILE *f, tl *x, const lane *ln, const span *s, double y, double h)
{
    double px = (double)SVG_LANE_W / (double)(x->to - x->from);
    double x0 = SVG_NAME_W + (double)(s->s - x->from) * px, w = (double)(s->e - s->s) * px;
    if (w < 1 && s->st != ST_SUSP)
        w = 1;                           /* short steps and episodes stay visible */
    char label[64], d1[32], d2[32];
    tl_lane_label(ln, label, sizeof(label) - 1);
    fprintf(f, "<rect class=\"s%d\" x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\">"
               "<title>", s->st, x0, y, w, h);
    ls_xml_write(f, label);
    fprintf(f, ": %s", state_names[s->st]);
    if (s->reason) {
        fputs(" (", f);
        ls_xml_write(f, s->reason);
        if (ln->is_loop && s->arg >= 0)
            fprintf(f, " in task %lld", (long long)s->arg);
        fputc(')', f);
    }
    fprintf(f, "&#10;start %s, duration %s%s</title></rect>\n",
            tl_fmt_at(d1, sizeof(d1), s->s - x->start), ls_fmt_dur(d2, sizeof(d2), s->e - s->s),
            ln->binned && s->st != ST_BLOCK ? " (approximate: a busy task drawn per pixel)" : "");
}

/* A lane with more spans than pixels, drawn like the terminal: per pixel
 * column, stretches of one display class, "ran briefly" in a lighter
 * green, each with its running share in the title. */
static void svg_dense(FILE *f, tl *x, const lane *ln, double y)
{
    static const int cls[D_COUNT] = { 0, 1, 2, 5, 3, 4, 6 };   /* D_* -> CSS class s<N> */
    unsigned char *cells = malloc(SVG_LANE_W);
    double *run = calloc(SVG_LANE_W, sizeof(*run));
    if (!cells || !run) {
        free(cells);
        free(run);
        return;
    }
    tl_lane_cells(x, ln, SVG_LANE_W, cells, run);
    double q = (double)(x->to - x->from) / SVG_LANE_W;
    char label[64], d1[32], d2[32];
    tl_lane_label(ln, label, sizeof(label) - 1);
    for (int c = 0; c < SVG_LANE_W;) {
        int d = cells[c], e = c;
        double r = 0;
        while (e < SVG_LANE_W && cells[e] == d)
            r += run[e++];
        if (d != D_NONE && d != D_BLOCK) {   /* blocking: drawn from its own spans */
            bool thin = d == D_SUSP;
            int64_t s0 = x->from + (int64_t)(q * c), s1 = x->from + (int64_t)(q * e);
            fprintf(f, "<rect class=\"s%d\" x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%d\">"
                       "<title>", cls[d], SVG_NAME_W + c, y + (thin ? 7 : 3), e - c, thin ? 4 : 12);
            ls_xml_write(f, label);
            fprintf(f, ": %s, running %.3g%% of the time&#10;start %s, duration %s"
                       " (many short spans, drawn per pixel)</title></rect>\n",
                    tl_disp_names[d], 100.0 * r / (double)(s1 - s0),
                    tl_fmt_at(d1, sizeof(d1), s0 - x->start), ls_fmt_dur(d2, sizeof(d2), s1 - s0));
        }
        c = e;
    }
    free(cells);
    free(run);
}

/* The width of one character of a sans-serif font, in em, bounded from
 * above: the widest of DejaVu Sans Bold (the widest common sans), Liberation
 * Sans and Helvetica in each class, so that text measured with it fits
 * whatever font the viewer picks. */
static double char_em(unsigned char c)
{
    if (c >= 0x80)
        return 1.1;                      /* a byte starting a non-ASCII character */
    if (c == ' ')
        return 0.38;
    if (strchr("il.,:;'|!`", c))
        return 0.42;
    if (strchr("fjrt()[]{}/\\-\"", c))
        return 0.58;
    if (strchr("mw", c))
        return 1.06;
    if (strchr("MW%@", c))
        return 1.12;
    if (c >= 'A' && c <= 'Z')
        return 0.88;
    if (strchr("+=<>~#&_^*?$", c))
        return 0.86;
    return 0.74;                         /* other lower case letters, digits */
}

/* An upper bound of s's width drawn at font_px: each character counted
 * once (the continuation bytes of UTF-8 add nothing); bold is already the
 * widest the table allows. */
double tl_svg_text_w(const char *s, double font_px, bool bold)
{
    (void)bold;
    double w = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        if ((*p & 0xc0) != 0x80)
            w += char_em(*p);
    return w * font_px;
}

/* The longest prefix of s (whole characters) followed by an ellipsis that
 * fits max_px, or s itself when it fits. */
void tl_svg_fit(const char *s, double font_px, bool bold, double max_px, char *buf, size_t n)
{
    if (!n)
        return;
    if (tl_svg_text_w(s, font_px, bold) <= max_px && strlen(s) < n) {
        memcpy(buf, s, strlen(s) + 1);
        return;
    }
    double w = 1.1 * font_px;            /* the ellipsis */
    size_t k = 0, cut = 0;
    while (s[k]) {
        size_t e = k + 1;
        while (s[e] && ((unsigned char)s[e] & 0xc0) == 0x80)
            e++;
        w += char_em((unsigned char)s[k]) * font_px;
        if (w > max_px || e + 4 > n)
            break;
        k = cut = e;
    }
    memcpy(buf, s, cut);
    memcpy(buf + cut, "\xe2\x80\xa6", 4);   /* … and its NUL */
}

/* The title line, bold 14 px, within the picture: "PATH: REST", REST cut
 * if it alone would leave PATH less than 160 px, then PATH shortened from
 * its left (its file name is the part worth keeping). */
void tl_svg_title(FILE *f, const char *path, const char *rest)
{
    const double px = 14, room = SVG_W - 20;
    char r[512], p[512];
    tl_svg_fit(rest, px, true, room - 160 - tl_svg_text_w(": ", px, true), r, sizeof(r));
    double avail = room - tl_svg_text_w(": ", px, true) - tl_svg_text_w(r, px, true);
    const char *tail = path;
    if (tl_svg_text_w(path, px, true) > avail) {
        double w = 1.1 * px;             /* the leading ellipsis */
        const char *q = path + strlen(path);
        while (q > path) {
            const char *b = q - 1;
            while (b > path && ((unsigned char)*b & 0xc0) == 0x80)
                b--;
            w += char_em((unsigned char)*b) * px;
            if (w > avail)
                break;
            q = b;
        }
        snprintf(p, sizeof(p), "\xe2\x80\xa6%s", q);
        tail = p;
    }
    fprintf(f, "<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">");
    ls_xml_write(f, tail);
    fputs(": ", f);
    ls_xml_write(f, r);
    fprintf(f, "</text>\n");
}

/* The picture's start: prolog, styles, background (the caller writes the
 * title, tl_svg_title). */
FILE *tl_svg_open(const tl *x, const char *file, int extra_h)
{
    FILE *f = fopen(file, "w");
    if (!f) {
        ls_error("timeline: cannot write '%s': %m", file);
        return NULL;
    }
    int h = SVG_TOP + (int)x->nlanes * SVG_ROW_H + 50 + extra_h;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
               "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n",
            SVG_W, h, SVG_W, h);
    fprintf(f, "<style>\n"
               "rect.s1 { fill: %s; } rect.s2 { fill: %s; } rect.s3 { fill: %s; }\n"
               "rect.s4 { fill: %s; fill-opacity: 0.9; } rect.s5 { fill: #9fd4a9; }\n"
               "rect.s6 { fill: #c7b6dc; }\n"
               "rect:hover { stroke: #000; stroke-width: 1; }\n"
               "text.name { font-family: monospace; }\n"
               "line.grid { stroke: #ddd; stroke-width: 1; }\n"
               "</style>\n",
            svg_color[1], svg_color[2], svg_color[3], svg_color[4]);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n");
    return f;
}

/* The legend line: the classes, then the blocking class and a hint. */
void tl_svg_legend(FILE *f, const svg_leg *leg, size_t n, const char *blocking)
{
    int lx = 10;
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "<rect class=\"s%d\" x=\"%d\" y=\"%d\" width=\"14\" height=\"%d\"/>"
                   "<text x=\"%d\" y=\"42\">%s</text>\n", leg[i].cls, lx, leg[i].cls == 1 ? 35 : 31,
                leg[i].cls == 1 ? 4 : 12, lx + 18, leg[i].name);
        lx += 110;
    }
    fprintf(f, "<rect class=\"s4\" x=\"%d\" y=\"31\" width=\"14\" height=\"12\"/>"
               "<text x=\"%d\" y=\"42\">%s</text>\n", lx, lx + 18, blocking);
    fprintf(f, "<text x=\"%d\" y=\"42\" fill=\"#666\">hover a span for details</text>\n", lx + 170);
}

/* Grid lines and the time axis under the rows. */
void tl_svg_axis(FILE *f, const tl *x)
{
    double q = (double)(x->to - x->from) / SVG_LANE_W;
    int64_t step = tl_nice_step(q * 90);
    int64_t rel0 = x->from - x->start;
    int axis_y = SVG_TOP + (int)x->nlanes * SVG_ROW_H + 6;
    fprintf(f, "<g>\n");
    int64_t v = (rel0 + step - 1) / step * step;
    for (int k = 0; k <= SVG_LANE_W && v <= x->to - x->start; k++, v += step) {
        double px = SVG_NAME_W + (double)(v - rel0) / q;
        char b[32];
        tl_fmt_tick(b, sizeof(b), v, step, x->to - x->start);
        fprintf(f, "<line class=\"grid\" x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>"
                   "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\" fill=\"#444\">+%s</text>\n",
                px, SVG_TOP - 4, px, axis_y, px, axis_y + 16, b);
    }
    fprintf(f, "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#444\"/>\n</g>\n",
            SVG_NAME_W, axis_y, SVG_NAME_W + SVG_LANE_W, axis_y);
}

/* A row's group, label and stripe; returns its top y (the caller closes
 * the group). */
double tl_svg_row_begin(FILE *f, const lane *ln, size_t i)
{
    double y = SVG_TOP + (double)i * SVG_ROW_H;
    char label[64];
    tl_lane_label(ln, label, 26);
    fprintf(f, "<g>\n<text class=\"name\" x=\"10\" y=\"%.1f\"%s>", y + 12,
            ln->is_loop ? " font-weight=\"bold\"" : "");
    ls_xml_write(f, label);
    fprintf(f, "</text>\n");
    if (i % 2 == 0)
        fprintf(f, "<rect x=\"%d\" y=\"%.1f\" width=\"%d\" height=\"%d\" fill=\"#f6f7f9\"/>\n",
                SVG_NAME_W, y, SVG_LANE_W, SVG_ROW_H);
    return y;
}

bool tl_svg_close(FILE *f, const char *file)
{
    fprintf(f, "</svg>\n");
    if (fclose(f) != 0) {
        ls_error("timeline: cannot write '%s': %m", file);
        return false;
    }
    return true;
}

bool tl_write_svg(tl *x, const char *file, const char *path, size_t ntasks, size_t nmatch)
{
    bool threads = false;
    for (size_t i = 0; i < x->nlanes; i++)
        threads |= x->lanes[i].thread;
    FILE *f = tl_svg_open(x, file, threads ? 16 : 0);   /* threads: a second note line */
    if (!f)
        return false;
    char d1[32], d2[32], d3[32], rest[512], more[48] = "";
    if (nmatch > ntasks)
        snprintf(more, sizeof(more), ", %zu more not shown", nmatch - ntasks);
    /* a census: what its times mean */
    snprintf(rest, sizeof(rest), "%zu task%s, %s .. %s (%s)%s%s%s", ntasks, ntasks == 1 ? "" : "s",
             tl_fmt_at(d1, sizeof(d1), x->from - x->start),
             tl_fmt_at(d2, sizeof(d2), x->to - x->start),
             ls_fmt_dur(d3, sizeof(d3), x->to - x->from), more,
             x->source ? " \xe2\x80\x94 " : "", x->source ? x->source : "");
    tl_svg_title(f, path, rest);
    if (threads) {                       /* the thread rows' colours, under the axis */
        char note[200], d[32], line[400], fit[400];
        tl_thread_note(x, (double)(x->to - x->from) / SVG_LANE_W, note, sizeof(note));
        int y = SVG_TOP + (int)x->nlanes * SVG_ROW_H + 42;
        tl_svg_fit("thread rows: green, the loop busy half of the time or more; light green, "
                   "partly busy; grey, waiting in its wait call;", 12, false, SVG_W - 20, fit,
                   sizeof(fit));
        fprintf(f, "<text x=\"10\" y=\"%d\" fill=\"#666\">", y);
        ls_xml_write(f, fit);
        snprintf(line, sizeof(line), "lilac, unknown (half of the time or more neither busy nor "
                 "waiting)%s%s", note[0] ? "; approximate, from windows of " : "",
                 note[0] ? ls_fmt_dur(d, sizeof(d), ls_meta_int(x->t, LS_META_WINDOW_NS, 0)) : "");
        tl_svg_fit(line, 12, false, SVG_W - 20, fit, sizeof(fit));
        fprintf(f, "</text>\n<text x=\"10\" y=\"%d\" fill=\"#666\">", y + 16);
        ls_xml_write(f, fit);
        fprintf(f, "</text>\n");
    }
    static const svg_leg leg[] = {
        { 3, "running" }, { 5, "ran briefly" }, { 2, "ready" }, { 1, "suspended" },
    };
    tl_svg_legend(f, leg, sizeof(leg) / sizeof(leg[0]), "blocking the loop");

    tl_svg_axis(f, x);

    /* Rows. */
    for (size_t i = 0; i < x->nlanes; i++) {
        lane *ln = &x->lanes[i];
        double y = tl_svg_row_begin(f, ln, i);
        if (ln->thread)
            tl_svg_thread_row(f, x, ln, y);
        else if (ln->binned || ln->st.n > SVG_LANE_W / 4)
            svg_dense(f, x, ln, y);
        else
            for (size_t k = 0; k < ln->st.n; k++) {
                const span *s = &ln->st.v[k];
                bool thin = s->st == ST_SUSP;
                tl_svg_rect(f, x, ln, s, y + (thin ? 7 : 3), thin ? 4 : 12);
            }
        for (size_t k = 0; k < ln->blk.n; k++)
            tl_svg_rect(f, x, ln, &ln->blk.v[k], y + 1, 16);
        fprintf(f, "</g>\n");
    }
    return tl_svg_close(f, file);
}

/* Nothing to draw: a picture that says so (--svg promises a file). */
bool tl_write_note_svg(const char *file, const char *path, const char *msg)
{
    FILE *f = fopen(file, "w");
    if (!f) {
        ls_error("timeline: cannot write '%s': %m", file);
        return false;
    }
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"40\" "
               "viewBox=\"0 0 %d 40\" font-family=\"sans-serif\" font-size=\"12\">\n"
               "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n"
               "<text x=\"10\" y=\"24\">", SVG_W, SVG_W);
    ls_xml_write(f, path);
    fputs(": ", f);
    ls_xml_write(f, msg);
    fputs("</text>\n</svg>\n", f);
    if (fclose(f) != 0) {
        ls_error("timeline: cannot write '%s': %m", file);
        return false;
    }
    return true;
}

