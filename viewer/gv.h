/*
 * gv.h -- Graphviz helpers for the commands that draw (graph, and any
 * other that writes an SVG/PNG/PDF/DOT picture): a string builder whose
 * text from the trace is escaped for DOT labels, attribute setters, note
 * nodes and the writer that lays out and renders in-process with libgvc
 * ("dot" layout) or writes the unlaid graph (.dot, agwrite).
 *
 * Depends on Graphviz's cgraph and gvc, output.h (ls_dot_text) and
 * trace.h (ls_error).
 */
#ifndef LOOPSCOPE_GV_H
#define LOOPSCOPE_GV_H

#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>

#include <stddef.h>

/* ------------------------------------------------------- string builder */

typedef struct gv_buf {
    char *s;                  /* NUL-terminated; NULL until the first add */
    size_t len, cap;
} gv_buf;

void gv_add(gv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Text from the trace (task names, functions) inside a DOT label, or an
 * HTML-like one: output.c's ls_dot_text (valid UTF-8, no controls, which
 * Graphviz would copy into the SVG; backslashes, which start escapes such
 * as \N or \l, doubled). */
void gv_text(gv_buf *b, const char *s);
void gv_html(gv_buf *b, const char *s);
const char *gv_str(gv_buf *b);
void gv_reset(gv_buf *b);

/* --------------------------------------------------------- graph helpers */

/* Set one attribute, declaring it (default "") on first use. */
void gv_set(void *obj, const char *attr, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* An HTML-like label (a title with a colour legend). */
void gv_set_html_label(void *obj, Agraph_t *g, const char *html);
/* A directed graph with loopscope's defaults (Helvetica, filled boxes). */
Agraph_t *gv_graph_new(const char *rankdir);
/* The node named by fmt, created if new. */
Agnode_t *gv_node(Agraph_t *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A note node: an empty trace, or what a limit left out. */
Agnode_t *gv_note(Agraph_t *g, const char *name, const char *text);

/* ---------------------------------------------------------------- output */

/* The Graphviz format of an output path, from its extension (.svg, .png,
 * .pdf; .dot and .gv give "dot": the graph as built, not laid out); NULL
 * if unknown. */
const char *gv_format_of(const char *path);
/* Fail before the work, not after it: the output's directory must exist
 * and be writable (or the file itself writable).  0, or 1 after an error
 * line starting with cmd. */
int gv_check_writable(const char *cmd, const char *path);
/* Write g to path in format (gv_format_of): agwrite for "dot", else layout
 * with "dot" and render.  0, or 1 after an error line starting with cmd
 * (the partial file removed).  Call agseterr(AGERR) first to keep
 * Graphviz's warnings off stderr. */
int gv_write(Agraph_t *g, const char *cmd, const char *path, const char *format);

#endif
