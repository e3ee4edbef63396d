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

/* ------------------------------------------------------------------ JSON */

void ls_json_init(ls_json *j, FILE *f)
{
    memset(j, 0, sizeof(*j));
    j->f = f;
    j->first[0] = true;
}

static void ls_json_sep(ls_json *j)
{
    if (j->after_key) {
        j->after_key = false;
        return;
    }
    if (!j->first[j->depth])
        fputc(',', j->f);
    j->first[j->depth] = false;
}

static void ls_json_open(ls_json *j, char c)
{
    ls_json_sep(j);
    fputc(c, j->f);
    if (j->depth < 31)
        j->depth++;
    j->first[j->depth] = true;
}

static void ls_json_close(ls_json *j, char c)
{
    if (j->depth > 0)
        j->depth--;
    fputc(c, j->f);
    if (j->depth == 0)
        fputc('\n', j->f);
}

void ls_json_begin_object(ls_json *j) { ls_json_open(j, '{'); }
void ls_json_end_object(ls_json *j) { ls_json_close(j, '}'); }
void ls_json_begin_array(ls_json *j) { ls_json_open(j, '['); }
void ls_json_end_array(ls_json *j) { ls_json_close(j, ']'); }

static void ls_json_escaped(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        switch (*p) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        default:
            if (*p < 0x20)
                fprintf(f, "\\u%04x", *p);
            else
                fputc(*p, f);
        }
    }
    fputc('"', f);
}

void ls_json_key(ls_json *j, const char *key)
{
    ls_json_sep(j);
    ls_json_escaped(j->f, key);
    fputc(':', j->f);
    j->after_key = true;
}

void ls_json_str(ls_json *j, const char *s)
{
    ls_json_sep(j);
    if (s)
        ls_json_escaped(j->f, s);
    else
        fputs("null", j->f);
}

void ls_json_int(ls_json *j, int64_t v)
{
    ls_json_sep(j);
    fprintf(j->f, "%" PRId64, v);
}

void ls_json_double(ls_json *j, double v)
{
    ls_json_sep(j);
    fprintf(j->f, "%.6g", v);
}

void ls_json_bool(ls_json *j, bool v)
{
    ls_json_sep(j);
    fputs(v ? "true" : "false", j->f);
}

void ls_json_null(ls_json *j)
{
    ls_json_sep(j);
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

static void ls_table_add(ls_table *t, int kind, int64_t v, const char *s)
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
        ls_table_add(t, LS_CELL_STR, 0, s);
    else
        ls_table_null(t);
}

void ls_table_int(ls_table *t, int64_t v)
{
    char b[32];
    snprintf(b, sizeof(b), "%" PRId64, v);
    ls_table_add(t, LS_CELL_INT, v, b);
}

void ls_table_dur(ls_table *t, int64_t ns)
{
    char b[32];
    ls_table_add(t, LS_CELL_DUR, ns, ls_fmt_dur(b, sizeof(b), ns));
}

void ls_table_null(ls_table *t)
{
    ls_table_add(t, LS_CELL_NULL, 0, "-");
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
        size_t w[64] = { 0 };
        for (int c = 0; c < t->ncols && c < 64; c++)
            w[c] = strlen(t->cols[c].header);
        for (size_t i = 0; i < t->ncells; i++) {
            size_t c = i % (size_t)t->ncols, len = strlen(t->cells[i].s);
            if (c < 64 && len > w[c])
                w[c] = len;
        }
        for (size_t r = 0; r <= nrows; r++) {
            for (int c = 0; c < t->ncols && c < 64; c++) {
                const char *s = r == 0 ? t->cols[c].header
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
