/*
 * output.c -- tables, JSON and durations (output.h).
 */
#define _GNU_SOURCE
#include "output.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

char *ls_fmt_dur(char *buf, size_t n, int64_t ns)
{
    if (ns < 0)
        snprintf(buf, n, "-");
    else if (ns < 1000)
        snprintf(buf, n, "%" PRId64 "ns", ns);
    else if (ns < 1000000)
        snprintf(buf, n, "%.*fus", ns < 10000 ? 2 : ns < 100000 ? 1 : 0, ns / 1e3);
    else if (ns < 1000000000)
        snprintf(buf, n, "%.*fms", ns < 10000000 ? 2 : ns < 100000000 ? 1 : 0, ns / 1e6);
    else
        snprintf(buf, n, "%.2fs", ns / 1e9);
    return buf;
}

char *ls_fmt_err(char *buf, size_t n, int64_t err)
{
    const char *s = err < 0 && err > -4096 ? strerrorname_np((int)-err) : NULL;
    if (s)
        snprintf(buf, n, "%s", s);
    else
        snprintf(buf, n, "%lld", (long long)err);
    return buf;
}

/* --------------------------------------------------------- trace strings */

static bool is_control(uint32_t cp)
{
    return cp < 0x20 || (cp >= 0x7f && cp < 0xa0);
}

/* A growable byte buffer. */
typedef struct ls_buf {
    char *s;
    size_t len, cap;
} ls_buf;

static void buf_add(ls_buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            fputs("error: out of memory\n", stderr);
            exit(1);
        }
        b->s = p;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void buf_str(ls_buf *b, const char *s) { buf_add(b, s, strlen(s)); }

static const char fffd[] = "\xef\xbf\xbd";   /* U+FFFD, the replacement character */

const char *ls_term_n(const char *s, size_t max)
{
    static ls_buf ring[16];
    static unsigned next;
    ls_buf *b = &ring[next++ % 16];
    b->len = 0;
    buf_add(b, "", 0);
    for (const char *p = s ? s : ""; *p;) {
        uint32_t cp;
        int n = ls_utf8_decode(p, &cp);
        char esc[16];
        const char *out = p;
        size_t len = (size_t)n;
        if (n == 0) {
            snprintf(esc, sizeof(esc), "\\x%02x", (unsigned char)*p);
            n = 1;
            out = esc, len = strlen(esc);
        } else if (is_control(cp)) {
            if (cp == '\n' || cp == '\r' || cp == '\t')
                snprintf(esc, sizeof(esc), "\\%c", cp == '\n' ? 'n' : cp == '\r' ? 'r' : 't');
            else
                snprintf(esc, sizeof(esc), "\\x%02x", (unsigned)cp);
            out = esc, len = strlen(esc);
        } else if ((cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069)) {
            snprintf(esc, sizeof(esc), "\\u%04x", (unsigned)cp);   /* reorders the line */
            out = esc, len = strlen(esc);
        }
        if (b->len + len > max)
            break;
        buf_add(b, out, len);
        p += n;
    }
    return b->s;
}

const char *ls_term(const char *s)
{
    return ls_term_n(s, SIZE_MAX);
}

void ls_xml_write(FILE *f, const char *s)
{
    for (const char *p = s ? s : ""; *p;) {
        uint32_t cp;
        int n = ls_utf8_decode(p, &cp);
        if (n == 0) {
            fputs(fffd, f);
            p++;
            continue;
        }
        switch (cp) {
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '&': fputs("&amp;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        case '\t': fputs("&#9;", f); break;
        case '\n': fputs("&#10;", f); break;
        case '\r': fputs("&#13;", f); break;
        default:
            if (is_control(cp) || cp == 0xfffe || cp == 0xffff)
                fputs(fffd, f);
            else
                fwrite(p, 1, (size_t)n, f);
        }
        p += n;
    }
}

char *ls_dot_text(const char *s, bool html)
{
    ls_buf b = { 0 };
    buf_add(&b, "", 0);
    for (const char *p = s ? s : ""; *p;) {
        uint32_t cp;
        int n = ls_utf8_decode(p, &cp);
        if (n == 0) {
            buf_str(&b, fffd);
            p++;
            continue;
        }
        if (cp == '\n' || cp == '\r' || cp == '\t')
            buf_str(&b, " ");
        else if (is_control(cp) || cp == 0xfffe || cp == 0xffff)
            buf_str(&b, fffd);           /* Graphviz would copy it into SVG as is */
        else if (!html && cp == '\\')
            buf_str(&b, "\\\\");
        else if (html && cp == '&')
            buf_str(&b, "&amp;");
        else if (html && cp == '<')
            buf_str(&b, "&lt;");
        else if (html && cp == '>')
            buf_str(&b, "&gt;");
        else if (html && cp == '"')
            buf_str(&b, "&quot;");
        else
            buf_add(&b, p, (size_t)n);
        p += n;
    }
    return b.s;
}

/* ------------------------------------------------------------------ JSON */

/* Written with the unlocked stdio calls, plain runs in one write: a
 * 10M-event Perfetto export spends much of its time here. */
void ls_json_write_str(FILE *f, const char *s)
{
    const char *p = s ? s : "";
    putc_unlocked('"', f);
    while (*p) {
        const char *run = p;
        while ((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x80 && *p != '"' && *p != '\\')
            p++;
        if (p > run)
            fwrite_unlocked(run, 1, (size_t)(p - run), f);
        if (!*p)
            break;
        uint32_t cp;
        int n = ls_utf8_decode(p, &cp);
        if (n == 0) {
            fputs_unlocked("\\ufffd", f);
            p++;
        } else if (cp == '"' || cp == '\\') {
            putc_unlocked('\\', f);
            putc_unlocked((int)cp, f);
            p++;
        } else if (cp == '\n' || cp == '\r' || cp == '\t') {
            putc_unlocked('\\', f);
            putc_unlocked(cp == '\n' ? 'n' : cp == '\r' ? 'r' : 't', f);
            p++;
        } else if (cp < 0x20) {
            static const char hex[] = "0123456789abcdef";
            char e[7] = { '\\', 'u', '0', '0', hex[cp >> 4], hex[cp & 15], 0 };
            fputs_unlocked(e, f);
            p++;
        } else {
            fwrite_unlocked(p, 1, (size_t)n, f);
            p += n;
        }
    }
    putc_unlocked('"', f);
}

void ls_json_init(ls_json *j, FILE *f)
{
    memset(j, 0, sizeof(*j));
    j->f = f;
    j->first[0] = true;
}

static void json_sep(ls_json *j)
{
    if (j->after_key) {
        j->after_key = false;
        return;
    }
    if (!j->first[j->depth])
        fputc(',', j->f);
    j->first[j->depth] = false;
}

static void json_open(ls_json *j, char c)
{
    json_sep(j);
    fputc(c, j->f);
    if (j->depth < 31)
        j->depth++;
    j->first[j->depth] = true;
}

static void json_close(ls_json *j, char c)
{
    if (j->depth > 0)
        j->depth--;
    fputc(c, j->f);
    if (j->depth == 0)
        fputc('\n', j->f);
}

void ls_json_begin_object(ls_json *j) { json_open(j, '{'); }
void ls_json_end_object(ls_json *j) { json_close(j, '}'); }
void ls_json_begin_array(ls_json *j) { json_open(j, '['); }
void ls_json_end_array(ls_json *j) { json_close(j, ']'); }


void ls_json_key(ls_json *j, const char *key)
{
    json_sep(j);
    ls_json_write_str(j->f, key);
    fputc(':', j->f);
    j->after_key = true;
}

void ls_json_str(ls_json *j, const char *s)
{
    json_sep(j);
    if (s)
        ls_json_write_str(j->f, s);
    else
        fputs("null", j->f);
}

void ls_json_int(ls_json *j, int64_t v)
{
    json_sep(j);
    fprintf(j->f, "%" PRId64, v);
}

void ls_json_double(ls_json *j, double v)
{
    json_sep(j);
    fprintf(j->f, "%.6g", v);
}

void ls_json_bool(ls_json *j, bool v)
{
    json_sep(j);
    fputs(v ? "true" : "false", j->f);
}

void ls_json_null(ls_json *j)
{
    json_sep(j);
    fputs("null", j->f);
}

/* ---------------------------------------------------------------- tables */

typedef struct ls_cell {
    int kind;
    int64_t v;
    char *s;                  /* text form (STR, and formatted numbers) */
} ls_cell;

struct ls_table {
    const ls_col *cols;
    int ncols;
    ls_cell *cells;
    size_t ncells, cap;
};

ls_table *ls_table_new(const ls_col *cols, int ncols)
{
    ls_table *t = calloc(1, sizeof(*t));
    if (t) {
        t->cols = cols;
        t->ncols = ncols;
    }
    return t;
}

static void table_add(ls_table *t, int kind, int64_t v, const char *s)
{
    if (t->ncells == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 256;
        t->cells = realloc(t->cells, t->cap * sizeof(*t->cells));
        if (!t->cells) {
            fputs("error: out of memory\n", stderr);
            exit(1);
        }
    }
    t->cells[t->ncells++] = (ls_cell){ kind, v, strdup(s) };
}

void ls_table_str(ls_table *t, const char *s)
{
    if (s)
        table_add(t, LS_CELL_STR, 0, s);
    else
        ls_table_null(t);
}

void ls_table_int(ls_table *t, int64_t v)
{
    char b[32];
    snprintf(b, sizeof(b), "%" PRId64, v);
    table_add(t, LS_CELL_INT, v, b);
}

void ls_table_dur(ls_table *t, int64_t ns)
{
    char b[32];
    table_add(t, LS_CELL_DUR, ns, ls_fmt_dur(b, sizeof(b), ns));
}

void ls_table_null(ls_table *t)
{
    table_add(t, LS_CELL_NULL, 0, "-");
}

void ls_table_print(ls_table *t, FILE *f, bool json)
{
    size_t nrows = t->ncells / (size_t)t->ncols;
    if (json) {
        ls_json j;
        ls_json_init(&j, f);
        ls_table_print_json(t, &j);
        return;
    } else {
        /* Text goes to a terminal: cells escaped (JSON keeps the bytes). */
        for (size_t i = 0; i < t->ncells; i++) {
            if (t->cells[i].kind != LS_CELL_STR)
                continue;
            char *s = strdup(ls_term(t->cells[i].s));
            if (!s) {
                fputs("error: out of memory\n", stderr);
                exit(1);
            }
            free(t->cells[i].s);
            t->cells[i].s = s;
        }
        size_t w[64] = { 0 };
        for (int c = 0; c < t->ncols && c < 64; c++)
            w[c] = strlen(ls_term(t->cols[c].header));
        for (size_t i = 0; i < t->ncells; i++) {
            size_t c = i % (size_t)t->ncols, len = strlen(t->cells[i].s);
            if (c < 64 && len > w[c])
                w[c] = len;
        }
        for (size_t r = 0; r <= nrows; r++) {
            for (int c = 0; c < t->ncols && c < 64; c++) {
                const char *s = r == 0 ? ls_term(t->cols[c].header)
                                       : t->cells[(r - 1) * (size_t)t->ncols + (size_t)c].s;
                bool last = c == t->ncols - 1;
                if (t->cols[c].right)
                    fprintf(f, "%*s%s", (int)w[c], s, last ? "" : "  ");
                else if (last)
                    fputs(s, f);
                else
                    fprintf(f, "%-*s  ", (int)w[c], s);
            }
            fputc('\n', f);
        }
    }
    ls_table_free(t);
}

void ls_table_print_json(ls_table *t, ls_json *j)
{
    ls_table_print_json_with(t, j, NULL, NULL);
}

void ls_table_print_json_with(ls_table *t, ls_json *j, void (*row)(size_t r, ls_json *j, void *ctx),
                              void *ctx)
{
    size_t nrows = t->ncells / (size_t)t->ncols;
    ls_json_begin_array(j);
    for (size_t r = 0; r < nrows; r++) {
        ls_json_begin_object(j);
        for (int c = 0; c < t->ncols; c++) {
            ls_cell *x = &t->cells[r * (size_t)t->ncols + (size_t)c];
            ls_json_key(j, t->cols[c].json_key ? t->cols[c].json_key : t->cols[c].header);
            if (x->kind == LS_CELL_STR)
                ls_json_str(j, x->s);
            else if (x->kind == LS_CELL_NULL)
                ls_json_null(j);
            else
                ls_json_int(j, x->v);
        }
        if (row)
            row(r, j, ctx);
        ls_json_end_object(j);
    }
    ls_json_end_array(j);
    ls_table_free(t);
}

void ls_table_free(ls_table *t)
{
    for (size_t i = 0; i < t->ncells; i++)
        free(t->cells[i].s);
    free(t->cells);
    free(t);
}

bool ls_grow(void **arr, size_t *cap, size_t n, size_t sz)
{
    if (n <= *cap)
        return true;
    size_t c = *cap ? *cap * 2 : 16;
    while (c < n) {
        if (c > SIZE_MAX / 2 / sz)
            return false;
        c *= 2;
    }
    void *p = realloc(*arr, c * sz);
    if (!p)
        return false;
    *arr = p;
    *cap = c;
    return true;
}
