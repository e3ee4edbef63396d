/*
 * gv.c -- Graphviz helpers (gv.h): the label string builder, attribute
 * setters, note nodes, and the in-process writer (cgraph + libgvc, nothing
 * shelled out).  Depends on Graphviz, output.h and trace.h.
 */
#define _GNU_SOURCE
#include "gv.h"
#include "output.h"
#include "trace.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

/* ------------------------------------------------------- string builder */

void gv_add(gv_buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if (b->len + (size_t)n + 1 > b->cap) {
        size_t cap = (b->len + (size_t)n + 1) * 2;
        char *s = realloc(b->s, cap);
        if (!s)
            return;
        b->s = s;
        b->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void gv_text(gv_buf *b, const char *s)
{
    char *t = ls_dot_text(s ? s : "?", false);
    gv_add(b, "%s", t ? t : "?");
    free(t);
}

void gv_html(gv_buf *b, const char *s)
{
    char *t = ls_dot_text(s ? s : "?", true);
    gv_add(b, "%s", t ? t : "?");
    free(t);
}

const char *gv_str(gv_buf *b)
{
    return b->s ? b->s : "";
}

void gv_reset(gv_buf *b)
{
    b->len = 0;
    if (b->s)
        b->s[0] = '\0';
}

/* --------------------------------------------------------- graph helpers */

void gv_set(void *obj, const char *attr, const char *fmt, ...)
{
    char *v = NULL;
    va_list ap;
    va_start(ap, fmt);
    int n = vasprintf(&v, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    agsafeset(obj, (char *)attr, v, (char *)"");
    free(v);
}

void gv_set_html_label(void *obj, Agraph_t *g, const char *html)
{
    char *h = agstrdup_html(g, (char *)html);
    agsafeset(obj, (char *)"label", h, (char *)"");   /* shares h's refstr: stays HTML */
    agstrfree(g, h);
}

Agraph_t *gv_graph_new(const char *rankdir)
{
    Agraph_t *g = agopen((char *)"loopscope", Agdirected, NULL);
    if (!g)
        return NULL;
    agattr(g, AGRAPH, (char *)"rankdir", (char *)rankdir);
    agattr(g, AGRAPH, (char *)"fontname", (char *)"Helvetica");
    agattr(g, AGRAPH, (char *)"labelloc", (char *)"t");
    agattr(g, AGRAPH, (char *)"nodesep", (char *)"0.3");
    agattr(g, AGNODE, (char *)"fontname", (char *)"Helvetica");
    agattr(g, AGNODE, (char *)"fontsize", (char *)"11");
    agattr(g, AGNODE, (char *)"shape", (char *)"box");
    agattr(g, AGNODE, (char *)"style", (char *)"filled");
    agattr(g, AGNODE, (char *)"fillcolor", (char *)"white");
    agattr(g, AGEDGE, (char *)"fontname", (char *)"Helvetica");
    agattr(g, AGEDGE, (char *)"fontsize", (char *)"9");
    return g;
}

Agnode_t *gv_node(Agraph_t *g, const char *fmt, ...)
{
    char name[64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof(name), fmt, ap);
    va_end(ap);
    return agnode(g, name, 1);
}

Agnode_t *gv_note(Agraph_t *g, const char *name, const char *text)
{
    Agnode_t *n = agnode(g, (char *)name, 1);
    gv_buf b = { 0 };
    gv_text(&b, text);
    gv_set(n, "shape", "note");
    gv_set(n, "fillcolor", "#fffde7");
    gv_set(n, "label", "%s", gv_str(&b));
    free(b.s);
    return n;
}

/* ---------------------------------------------------------------- output */

const char *gv_format_of(const char *path)
{
    static const char *const map[][2] = {
        { ".svg", "svg" }, { ".png", "png" }, { ".pdf", "pdf" }, { ".dot", "dot" }, { ".gv", "dot" },
    };
    const char *dot = strrchr(path, '.'), *slash = strrchr(path, '/');
    if (!dot || (slash && slash > dot))
        return NULL;
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (!strcasecmp(dot, map[i][0]))
            return map[i][1];
    return NULL;
}

int gv_check_writable(const char *cmd, const char *path)
{
    struct stat sb;
    if (stat(path, &sb) == 0) {
        if (S_ISDIR(sb.st_mode))
            return ls_error("%s: cannot write '%s': is a directory", cmd, path);
        if (access(path, W_OK) != 0)
            return ls_error("%s: cannot write '%s': %s", cmd, path, strerror(errno));
        return 0;
    }
    const char *slash = strrchr(path, '/');
    char *dir = slash ? strndup(path, slash == path ? 1 : (size_t)(slash - path)) : strdup(".");
    int rc = 0;
    if (!dir || access(dir, W_OK | X_OK) != 0)
        rc = ls_error("%s: cannot write '%s': %s", cmd, path, strerror(dir ? errno : ENOMEM));
    free(dir);
    return rc;
}

int gv_write(Agraph_t *g, const char *cmd, const char *path, const char *format)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return ls_error("%s: cannot write '%s': %s", cmd, path, strerror(errno));
    bool render_failed = false;
    if (!strcmp(format, "dot")) {
        agwrite(g, f);
    } else {
        GVC_t *gvc = gvContext();
        if (!gvc || gvLayout(gvc, g, "dot") != 0) {
            render_failed = true;
        } else {
            render_failed = gvRender(gvc, g, format, f) != 0;
            gvFreeLayout(gvc, g);
        }
        if (gvc)
            gvFreeContext(gvc);
    }
    int err = ferror(f) ? (errno ? errno : EIO) : 0;
    if (fclose(f) != 0 && !err)
        err = errno;
    if (render_failed || err) {
        remove(path);
        if (render_failed)
            return ls_error("%s: Graphviz could not render '%s' as %s", cmd, path, format);
        return ls_error("%s: cannot write '%s': %s", cmd, path, strerror(err));
    }
    return 0;
}
