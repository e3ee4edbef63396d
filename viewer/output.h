/*
 * output.h -- how the commands print: aligned tables (or the same rows as
 * JSON with --json), durations, colours only on a terminal.
 */
#ifndef LOOPSCOPE_OUTPUT_H
#define LOOPSCOPE_OUTPUT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "error.h"

/* "812ns", "3.4us", "12.3ms", "2.51s"; "-" for a negative value. */
char *ls_fmt_dur(char *buf, size_t n, int64_t ns);
/* An errno-style error code by name ("EIO" for -5), else its number. */
char *ls_fmt_err(char *buf, size_t n, int64_t err);

/* ------------------------------------------------------ trace strings */

/* Every string in a trace was chosen by the traced program or by whoever
 * wrote the file: any bytes (invalid UTF-8, control characters, ANSI
 * escapes, newlines).  Each destination has one escaper here, used for
 * every such string that goes there. */

/* ls_utf8_decode(p, &cp): the UTF-8 character at p, its length or 0
 * (model/error.h). */

/* For the terminal: valid UTF-8 without control characters.  \n \r \t
 * become those two-character escapes, other C0/C1 controls, DEL and bytes
 * that are not UTF-8 become \xNN, bidirectional overrides \uNNNN.  The
 * result lives until 16 more calls (so one printf can use several). */
const char *ls_term(const char *s);
/* The same cut to at most `max` bytes of output (not inside a character or
 * an escape), for fixed-width columns; "" for NULL. */
const char *ls_term_n(const char *s, size_t max);

/* For XML text and attribute values (SVG): entities for & < > " ', tab and
 * newlines as character references, and U+FFFD for every character XML 1.0
 * does not allow (other controls, U+FFFE/U+FFFF) and every invalid byte. */
void ls_xml_write(FILE *f, const char *s);

/* For a Graphviz label (malloc'd; NULL when out of memory): valid UTF-8
 * (U+FFFD for invalid bytes, controls and non-characters, a space for a
 * newline), backslashes doubled so that \N or \l in a name stay text; with
 * html, the XML entities of an HTML-like label instead of the doubling. */
char *ls_dot_text(const char *s, bool html);

/* ---------------------------------------------------------------- JSON */

/* A streaming JSON writer with commas and escaping handled. */
typedef struct ls_json {
    FILE *f;
    int depth;
    bool first[32];           /* no element written yet at this depth */
    bool after_key;
} ls_json;

void ls_json_init(ls_json *j, FILE *f);
void ls_json_begin_object(ls_json *j);
void ls_json_end_object(ls_json *j);
void ls_json_begin_array(ls_json *j);
void ls_json_end_array(ls_json *j);
void ls_json_key(ls_json *j, const char *key);
void ls_json_str(ls_json *j, const char *s);     /* NULL -> null */
void ls_json_int(ls_json *j, int64_t v);
void ls_json_double(ls_json *j, double v);
void ls_json_bool(ls_json *j, bool v);
void ls_json_null(ls_json *j);
/* A JSON string literal for s (NULL as ""): quotes and backslashes escaped,
 * control characters as \u00XX, bytes that are not UTF-8 as U+FFFD, so the
 * output is valid JSON whatever the bytes.  The one JSON string escaper of
 * the viewer (the writer above and the Perfetto export use it). */
void ls_json_write_str(FILE *f, const char *s);

/* --------------------------------------------------------------- tables */

/* Columns: a header and an alignment; cells are typed so that --json
 * prints numbers as numbers and the table prints them formatted. */
enum ls_cell_kind { LS_CELL_STR, LS_CELL_INT, LS_CELL_DUR, LS_CELL_NULL };

typedef struct ls_col {
    const char *header;       /* table header, and JSON key when json_key is NULL */
    const char *json_key;
    bool right;               /* right-aligned (numbers) */
} ls_col;

typedef struct ls_table ls_table;

ls_table *ls_table_new(const ls_col *cols, int ncols);
void ls_table_str(ls_table *t, const char *s);   /* next cell of the current row */
void ls_table_int(ls_table *t, int64_t v);
void ls_table_dur(ls_table *t, int64_t ns);      /* JSON: integer ns */
void ls_table_null(ls_table *t);
/* Print (aligned text, or a JSON array of objects) and free. */
void ls_table_print(ls_table *t, FILE *f, bool json);
void ls_table_free(ls_table *t);
/* The rows as a JSON array written through j (e.g. as a value after
 * ls_json_key), then free. */
void ls_table_print_json(ls_table *t, ls_json *j);
/* The same, calling row(r, j, ctx) in the object of each row r (0, 1, ...)
 * after its cells, to add keys of its own. */
void ls_table_print_json_with(ls_table *t, ls_json *j, void (*row)(size_t r, ls_json *j, void *ctx),
                              void *ctx);

/* Make room for n elements of sz bytes in *arr (capacity *cap, doubled
 * as needed); false when out of memory (*arr is then unchanged). */
bool ls_grow(void **arr, size_t *cap, size_t n, size_t sz);

#endif
