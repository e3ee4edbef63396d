/*
 * cmd_ps.c -- `loopscope ps [--tree|--json] PID`: a snapshot of every task
 * of a running event-loop process, read from outside without stopping it.
 *
 * A source reads one snapshot of a process's tasks into the runtime-neutral
 * struct ps_snap (names, states, why each waits, on what, the locks it
 * holds, its async stack resolved to function, file:line); the printers
 * only read that.  The sources are tried in order (ps_sources[]): the first
 * that recognises the process takes it: libevl (ps_evl.c: the loops'
 * pending tasks through evl_debug), then CPython 3.10-3.15 asyncio,
 * through the task census (pytasks.h: ls_py_detect, ls_pytasks_census,
 * ls_py_frame).  The snapshot's types: ps.h.
 *
 * From a snapshot: the table (one row per task, sorted by state then
 * name), the await tree (--tree: a task awaiting another is shown under
 * the one it awaits) and the wait-for graph (a task -> the task it awaits,
 * a task -> the holder of the lock, semaphore or condition it waits for),
 * whose cycles are printed as paths, or all of it as JSON (--json).
 *
 * Every string in a snapshot was chosen by the target (task names,
 * function names, file names): escaped for the terminal (ps_term) or for
 * JSON (ps_json_str), never printed raw.  Errors: one line on stderr,
 * "loopscope ps: ...", exit 1 (2 for bad arguments).
 */
#define _GNU_SOURCE
#include "tracer.h"
#include "pytasks.h"
#include "error.h"
#include "evl-probes.h"
#include "ps.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PS_MAX_CYCLES 64            /* cycles printed */
#define PS_CYCLE_STEPS 1000000      /* DFS steps spent looking for them */
#define PS_TREE_INDENT 32           /* tree levels drawn; deeper: "(+N)" */
#define PS_NAME_COL 32              /* characters of NAME in the table */

/* ------------------------------------------------------------ snapshot */

void ps_snap_free(struct ps_snap *s)
{
    for (size_t i = 0; i < s->n; i++) {
        for (size_t k = 0; k < s->t[i].nframes; k++) {
            free(s->t[i].frames[k].function);
            free(s->t[i].frames[k].file);
        }
        free(s->t[i].frames);
        free(s->t[i].name);
    }
    free(s->t);
    s->t = NULL;
    s->n = 0;
}

struct ps_source {
    const char *name;
    ps_source_fn *snapshot;
};


/* ---- CPython asyncio (pytasks.h) ---- */

char *ps_strdup(const char *s)
{
    char *d = strdup(s ? s : "?");
    if (!d) {
        fputs("loopscope ps: out of memory\n", stderr);
        exit(1);
    }
    return d;
}

static bool ps_denied(int err)
{
    return err == EPERM || err == EACCES;
}

static int ps_cpython(pid_t pid, struct ps_snap *s, char *why, size_t whylen)
{
    struct ls_py_cfg cfg;
    const char *w = NULL;
    char desc[64] = "";
    errno = 0;
    ls_py *py = ls_py_detect(pid, &cfg, desc, sizeof desc, &w);
    int err = errno;
    if (!py) {
        /* its files or memory could not be read: another user's process */
        if (ps_denied(err) && w && (!strcmp(w, "cannot read /proc/PID/exe") ||
                                    !strncmp(w, "CPython", 7)))
            return ps_fail("cannot read process %d: permission denied%s", (int)pid,
                           geteuid() ? " (not root: run as root, or as its user)" : "");
        snprintf(why, whylen, "%s", w ? w : "not CPython");
        if (!strcmp(why, "no such process") && (kill(pid, 0) == 0 || errno == EPERM))
            snprintf(why, whylen, "not CPython (no executable: a kernel thread, or exiting)");
        /* a CPython it cannot read (unsupported, not initialized) is still
         * CPython: no other source will take it */
        return strncmp(why, "CPython", 7) ? PS_NOT_MINE : PS_FAILED;
    }
    int rc = PS_FAILED;
    ls_pytasks *pt = ls_pytasks_new(py, &w);
    struct ls_pyt_census c = { 0 };
    if (!pt) {
        ps_fail("pid %d: %s: %s", (int)pid, desc, w ? w : "cannot read its tasks");
        goto out;
    }
    errno = 0;
    int crc = ls_pytasks_census(pt, &c);
    err = errno;
    if (crc < 0 || (c.flags & LS_PYT_GONE)) {
        if (c.flags & LS_PYT_GONE)
            ps_fail("process %d exited during the census", (int)pid);
        else if (ps_denied(err))
            ps_fail("cannot read process %d: permission denied%s", (int)pid,
                    geteuid() ? " (not root: run as root, or as its user)" : "");
        else
            ps_fail("pid %d: %s: cannot read its tasks", (int)pid, desc);
        goto out;
    }
    if (c.flags & LS_PYT_NO_ASYNCIO) {
        ps_fail("pid %d: no asyncio in this process (not imported yet)", (int)pid);
        goto out;
    }
    s->pid = pid;
    snprintf(s->runtime, sizeof s->runtime, "%s", desc);
    s->version_key = "python";
    const char *v = strchr(desc, ' ');
    snprintf(s->version, sizeof s->version, "%s", v ? v + 1 : desc);
    s->dur_ns = c.dur;
    s->flags = ((c.flags & LS_PYT_TRUNCATED) ? PS_TRUNCATED : 0) |
               ((c.flags & LS_PYT_READ_ERROR) ? PS_READ_ERROR : 0);
    s->t = calloc(c.n ? c.n : 1, sizeof *s->t);
    if (!s->t) {
        ps_fail("out of memory");
        goto out;
    }
    for (size_t i = 0; i < c.n; i++) {
        const struct ls_pytask *p = &c.t[i];
        struct ps_task *t = &s->t[s->n++];
        t->id = p->addr;
        t->name = ps_strdup(p->name);
        t->state = p->state;
        t->reason = p->state == LS_PYT_WAITING ? p->reason : 0;
        t->object = p->state == LS_PYT_WAITING ? p->object : 0;
        snprintf(t->awaits, sizeof t->awaits, "%s", p->awaits);
        t->nheld = p->nheld > 4 ? 4 : p->nheld;
        memcpy(t->held, p->held, sizeof t->held);
        t->cancels = p->cancels;
        t->unretrieved = p->unretrieved;
        t->chain_cut = p->chain_cut;
        uint32_t nf = p->nframes > LS_PYT_MAX_DEPTH ? LS_PYT_MAX_DEPTH : p->nframes;
        t->frames = calloc(nf ? nf : 1, sizeof *t->frames);
        if (!t->frames) {
            ps_fail("out of memory");
            goto out;
        }
        for (uint32_t k = 0; k < nf; k++) {
            const char *fn, *file;
            int line;
            ls_py_frame(py, &p->frames[k], &fn, &file, &line);
            /* the standard library's frames are the runtime's */
            t->frames[k] = (struct ps_frame){ ps_strdup(fn), ps_strdup(file), line,
                                              strstr(file, "/lib/python3") != NULL };
            t->nframes++;
        }
    }
    rc = PS_MINE;
out:
    if (rc != PS_MINE)
        ps_snap_free(s);
    ls_pyt_census_free(&c);
    ls_pytasks_free(pt);
    ls_py_free(py);
    return rc;
}

static const struct ps_source ps_sources[] = {
    { "libevl", ps_libevl },
    { "cpython", ps_cpython },
};

/* ------------------------------------------------------------- escaping */

int ps_fail(const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    /* one line: the message quotes only our words and numbers, but a
     * newline in it would still make two */
    for (char *p = buf; *p; p++)
        if ((unsigned char)*p < 0x20 || *p == 0x7f)
            *p = '?';
    fprintf(stderr, "loopscope ps: %s\n", buf);
    return PS_FAILED;
}

/* One character of s for the terminal into e (at least 16 bytes): its
 * bytes, or an escape; returns how many bytes of s it took (0 at the end)
 * and sets *elen, *cols (columns: 1 for a character, the escape's length). */
static int ps_term_unit(const char *p, char *e, size_t *elen, size_t *cols)
{
    uint32_t cp;
    int n = ls_utf8_decode(p, &cp);
    if (!*p)
        return 0;
    if (n == 0) {
        *elen = (size_t)snprintf(e, 16, "\\x%02x", (unsigned char)*p);
        n = 1;
    } else if (cp == '\n' || cp == '\r' || cp == '\t') {
        *elen = (size_t)snprintf(e, 16, "\\%c", cp == '\n' ? 'n' : cp == '\r' ? 'r' : 't');
    } else if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp < 0xa0)) {
        *elen = (size_t)snprintf(e, 16, "\\x%02x", (unsigned)cp);
    } else if ((cp >= 0x202a && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069)) {
        *elen = (size_t)snprintf(e, 16, "\\u%04x", (unsigned)cp);   /* reorders the line */
    } else {
        memcpy(e, p, (size_t)n);
        *elen = (size_t)n;
        *cols = 1;
        return n;
    }
    *cols = *elen;
    return n;
}

/* s for the terminal: valid UTF-8 without control characters (\n \r \t as
 * those escapes, other C0/C1 controls, DEL and bytes that are not UTF-8 as
 * \xNN, bidirectional overrides as \uNNNN), at most max columns (0: no
 * limit), cut with ".." between characters, never inside an escape.  In
 * one of 8 rotating buffers: valid until 8 more calls. */
static const char *ps_term(const char *s, size_t max)
{
    enum { CAP = 4096 * 4 + 16 };
    static char bufs[8][CAP];
    static unsigned next;
    char *out = bufs[next++ % 8];
    size_t len = 0, cols = 0;
    if (!s)
        s = "";
    size_t room = max ? max : SIZE_MAX;         /* columns for the whole string */
    /* does it all fit? */
    size_t total = 0;
    for (const char *p = s;;) {
        char e[16];
        size_t el, c;
        int n = ps_term_unit(p, e, &el, &c);
        if (!n)
            break;
        total += c;
        p += n;
    }
    size_t limit = total <= room ? room : room < 2 ? 0 : room - 2;
    bool cut = total > room;
    for (const char *p = s;;) {
        char e[16];
        size_t el, c;
        int n = ps_term_unit(p, e, &el, &c);
        if (!n)
            break;
        if (cols + c > limit || len + el > CAP - 4) {
            cut = true;
            break;
        }
        memcpy(out + len, e, el);
        len += el;
        cols += c;
        p += n;
    }
    if (cut) {
        memcpy(out + len, "..", 2);
        len += 2;
    }
    out[len] = 0;
    return out;
}

/* Characters of an escaped (valid UTF-8) string: its width in columns,
 * but for wide characters. */
static size_t ps_width(const char *s)
{
    size_t w = 0;
    for (; *s; s++)
        w += ((unsigned char)*s & 0xc0) != 0x80;
    return w;
}

static void ps_pad(FILE *f, const char *s, size_t width)
{
    fputs(s, f);
    for (size_t w = ps_width(s); w < width; w++)
        fputc(' ', f);
}

/* A JSON string literal: quotes, backslashes and controls escaped, bytes
 * that are not UTF-8 as U+FFFD: valid JSON whatever the bytes. */
static void ps_json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const char *p = s ? s : ""; *p;) {
        uint32_t cp;
        int n = ls_utf8_decode(p, &cp);
        if (n == 0) {
            fputs("\\ufffd", f);
            p++;
            continue;
        }
        if (cp == '"' || cp == '\\')
            fprintf(f, "\\%c", (char)cp);
        else if (cp == '\n')
            fputs("\\n", f);
        else if (cp == '\t')
            fputs("\\t", f);
        else if (cp < 0x20 || cp == 0x7f)
            fprintf(f, "\\u%04x", (unsigned)cp);
        else
            fwrite(p, 1, (size_t)n, f);
        p += n;
    }
    fputc('"', f);
}

/* ------------------------------------------------------- what waits on what */

static const char *ps_reason_name(int reason)
{
#define PS_REASON(n, v, s) case v: return s;
    switch (reason) {
    EVL_SUSPEND_LIST(PS_REASON)
    default:
        return NULL;
    }
#undef PS_REASON
}

/* reasons whose object is a primitive worth naming by address */
static bool ps_reason_has_object(int reason)
{
    switch (reason) {
    case EVL_SUSPEND_LOCK: case EVL_SUSPEND_EVENT: case EVL_SUSPEND_CONDITION:
    case EVL_SUSPEND_SEMAPHORE: case EVL_SUSPEND_QUEUE_GET: case EVL_SUSPEND_QUEUE_PUT:
    case EVL_SUSPEND_QUEUE_JOIN: case EVL_SUSPEND_TASKGROUP:
        return true;
    default:
        return false;
    }
}

static bool ps_reason_is_lock(int reason)
{
    return reason == EVL_SUSPEND_LOCK || reason == EVL_SUSPEND_SEMAPHORE ||
           reason == EVL_SUSPEND_CONDITION;
}

/* The snapshot with its order, index and graph. */
struct ps_view {
    struct ps_snap *s;
    size_t *order;                  /* indices, by state then name then id */
    size_t *rank;                   /* rank[i]: i's place in order */
    size_t *byid;                   /* indices by id */
    /* who holds what: (object, task) pairs by object then table order */
    struct ps_hold { uint64_t obj; size_t rank, task; } *holds;
    size_t nholds;
    /* wait-for edges, CSR: task i -> edge_to[edge_at[i] .. edge_at[i+1]) */
    size_t *edge_at, *edge_to;
    size_t nedges;
    /* await tree: parent (the awaited task) or SIZE_MAX; children in order */
    size_t *parent, *child_at, *child;
    /* cycles: nodes, each cycle's start in cyc_at (ncycles + 1 entries) */
    size_t *cyc, *cyc_at, ncycles, cyc_cap;
};

static struct ps_snap *ps_sort_snap;

static int ps_cmp_order(const void *a, const void *b)
{
    const struct ps_task *x = &ps_sort_snap->t[*(const size_t *)a];
    const struct ps_task *y = &ps_sort_snap->t[*(const size_t *)b];
    if (x->state != y->state)
        return x->state < y->state ? -1 : 1;
    int c = strcmp(x->name, y->name);
    if (c)
        return c;
    return x->id < y->id ? -1 : x->id > y->id;
}

static int ps_cmp_id(const void *a, const void *b)
{
    uint64_t x = ps_sort_snap->t[*(const size_t *)a].id, y = ps_sort_snap->t[*(const size_t *)b].id;
    return x < y ? -1 : x > y;
}

static size_t ps_find(const struct ps_view *v, uint64_t id)
{
    size_t lo = 0, hi = v->s->n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        uint64_t m = v->s->t[v->byid[mid]].id;
        if (m == id)
            return v->byid[mid];
        if (m < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    return SIZE_MAX;
}

static void *ps_alloc(size_t n, size_t sz)
{
    void *p = calloc(n ? n : 1, sz);
    if (!p) {
        fputs("loopscope ps: out of memory\n", stderr);
        exit(1);
    }
    return p;
}

/* The task i awaits (TASK), if it is in the snapshot and not i itself. */
static size_t ps_awaited(const struct ps_view *v, size_t i)
{
    const struct ps_task *t = &v->s->t[i];
    if (t->reason != EVL_SUSPEND_TASK || !t->object)
        return SIZE_MAX;
    size_t j = ps_find(v, t->object);
    return j == i ? SIZE_MAX : j;
}

static int ps_cmp_hold(const void *a, const void *b)
{
    const struct ps_hold *x = a, *y = b;
    if (x->obj != y->obj)
        return x->obj < y->obj ? -1 : 1;
    return x->rank < y->rank ? -1 : x->rank > y->rank;
}

/* Edges out of i, into out (at most cap; returns how many there are). */
static size_t ps_edges_of(const struct ps_view *v, size_t i, size_t *out, size_t cap)
{
    const struct ps_task *t = &v->s->t[i];
    size_t n = 0;
    if (t->state != LS_PYT_WAITING || !t->object)
        return 0;
    if (t->reason == EVL_SUSPEND_TASK) {
        size_t j = ps_find(v, t->object);
        if (j != SIZE_MAX) {
            if (out && n < cap)
                out[n] = j;
            n++;
        }
    } else if (ps_reason_is_lock(t->reason)) {
        size_t lo = 0, hi = v->nholds;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (v->holds[mid].obj < t->object)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (; lo < v->nholds && v->holds[lo].obj == t->object; lo++) {
            size_t j = v->holds[lo].task;
            if (j == i || (lo && v->holds[lo - 1].obj == t->object && v->holds[lo - 1].task == j))
                continue;
            if (out && n < cap)
                out[n] = j;
            n++;
        }
    }
    return n;
}

/* Every elementary cycle of the wait-for graph (up to PS_MAX_CYCLES, within
 * PS_CYCLE_STEPS steps), each starting from its first task in table order:
 * for each start s, a DFS through tasks after s only. */
static void ps_cycles(struct ps_view *v)
{
    size_t n = v->s->n;
    size_t *path = ps_alloc(n, sizeof *path), *it = ps_alloc(n, sizeof *it);
    bool *on = ps_alloc(n, sizeof *on);
    v->cyc_at = ps_alloc(PS_MAX_CYCLES + 1, sizeof *v->cyc_at);
    v->cyc_cap = 64;
    v->cyc = ps_alloc(v->cyc_cap, sizeof *v->cyc);
    long steps = 0;
    for (size_t r0 = 0; r0 < n && v->ncycles < PS_MAX_CYCLES && steps < PS_CYCLE_STEPS; r0++) {
        size_t s = v->order[r0];
        if (v->edge_at[s] == v->edge_at[s + 1])
            continue;
        size_t depth = 0;
        path[0] = s;
        it[0] = v->edge_at[s];
        on[s] = true;
        while (depth != SIZE_MAX && steps++ < PS_CYCLE_STEPS && v->ncycles < PS_MAX_CYCLES) {
            size_t u = path[depth];
            if (it[depth] == v->edge_at[u + 1]) {
                on[u] = false;
                depth--;                    /* wraps to SIZE_MAX at the start */
                continue;
            }
            size_t w = v->edge_to[it[depth]++];
            if (w == s) {
                /* a cycle: path[0..depth] */
                size_t base = v->cyc_at[v->ncycles];
                while (base + depth + 1 > v->cyc_cap) {
                    v->cyc_cap *= 2;
                    v->cyc = realloc(v->cyc, v->cyc_cap * sizeof *v->cyc);
                    if (!v->cyc) {
                        fputs("loopscope ps: out of memory\n", stderr);
                        exit(1);
                    }
                }
                memcpy(v->cyc + base, path, (depth + 1) * sizeof *path);
                v->cyc_at[++v->ncycles] = base + depth + 1;
            } else if (!on[w] && v->rank[w] > r0) {
                path[++depth] = w;
                it[depth] = v->edge_at[w];
                on[w] = true;
            }
        }
        for (size_t k = 0; k < n && depth != SIZE_MAX; k++)
            on[k] = false;                  /* left early: clear */
    }
    free(path);
    free(it);
    free(on);
}

static void ps_view_init(struct ps_view *v, struct ps_snap *s)
{
    size_t n = s->n;
    memset(v, 0, sizeof *v);
    v->s = s;
    v->order = ps_alloc(n, sizeof *v->order);
    v->rank = ps_alloc(n, sizeof *v->rank);
    v->byid = ps_alloc(n, sizeof *v->byid);
    for (size_t i = 0; i < n; i++)
        v->order[i] = v->byid[i] = i;
    ps_sort_snap = s;
    qsort(v->order, n, sizeof *v->order, ps_cmp_order);
    qsort(v->byid, n, sizeof *v->byid, ps_cmp_id);
    for (size_t r = 0; r < n; r++)
        v->rank[v->order[r]] = r;
    /* holders */
    v->holds = ps_alloc(4 * n, sizeof *v->holds);
    for (size_t i = 0; i < n; i++)
        for (uint32_t k = 0; k < s->t[i].nheld && k < 4; k++)
            v->holds[v->nholds++] = (struct ps_hold){ s->t[i].held[k], v->rank[i], i };
    qsort(v->holds, v->nholds, sizeof *v->holds, ps_cmp_hold);
    /* wait-for edges */
    v->edge_at = ps_alloc(n + 1, sizeof *v->edge_at);
    for (size_t i = 0; i < n; i++)
        v->edge_at[i + 1] = v->edge_at[i] + ps_edges_of(v, i, NULL, 0);
    v->nedges = v->edge_at[n];
    v->edge_to = ps_alloc(v->nedges, sizeof *v->edge_to);
    for (size_t i = 0; i < n; i++)
        ps_edges_of(v, i, v->edge_to + v->edge_at[i], v->edge_at[i + 1] - v->edge_at[i]);
    /* await tree: children of j = the tasks awaiting j, in table order */
    v->parent = ps_alloc(n, sizeof *v->parent);
    v->child_at = ps_alloc(n + 1, sizeof *v->child_at);
    v->child = ps_alloc(n, sizeof *v->child);
    size_t *cnt = ps_alloc(n + 1, sizeof *cnt);
    for (size_t i = 0; i < n; i++) {
        v->parent[i] = ps_awaited(v, i);
        if (v->parent[i] != SIZE_MAX)
            cnt[v->parent[i] + 1]++;
    }
    for (size_t i = 0; i < n; i++)
        v->child_at[i + 1] = v->child_at[i] + cnt[i + 1];
    memset(cnt, 0, (n + 1) * sizeof *cnt);
    for (size_t r = 0; r < n; r++) {
        size_t i = v->order[r], p = v->parent[i];
        if (p != SIZE_MAX)
            v->child[v->child_at[p] + cnt[p]++] = i;
    }
    free(cnt);
    ps_cycles(v);
}

static void ps_view_free(struct ps_view *v)
{
    free(v->order);
    free(v->rank);
    free(v->byid);
    free(v->holds);
    free(v->edge_at);
    free(v->edge_to);
    free(v->parent);
    free(v->child_at);
    free(v->child);
    free(v->cyc);
    free(v->cyc_at);
}

/* ------------------------------------------------------------- printing */

/* What t waits on, for the terminal: "lock 0x..", "task fan-0", "sleep". */
static const char *ps_waits_on(const struct ps_view *v, const struct ps_task *t, char *buf,
                               size_t len)
{
    if (t->state != LS_PYT_WAITING) {
        snprintf(buf, len, "-");
        return buf;
    }
    const char *r = ps_reason_name(t->reason);
    if (t->reason == EVL_SUSPEND_TASK) {
        size_t j = t->object ? ps_find(v, t->object) : SIZE_MAX;
        if (j != SIZE_MAX)
            snprintf(buf, len, "task %s", ps_term(v->s->t[j].name, PS_NAME_COL));
        else
            snprintf(buf, len, "task 0x%" PRIx64, t->object);
    } else if (r && ps_reason_has_object(t->reason) && t->object)
        snprintf(buf, len, "%s 0x%" PRIx64, r, t->object);
    else
        snprintf(buf, len, "%s", r ? r : "?");
    return buf;
}

static const char *ps_holds_str(const struct ps_task *t, char *buf, size_t len)
{
    size_t o = 0;
    buf[0] = 0;
    for (uint32_t k = 0; k < t->nheld && k < 4 && o < len; k++)
        o += (size_t)snprintf(buf + o, len - o, "%s0x%" PRIx64, k ? "," : "", t->held[k]);
    if (!t->nheld)
        snprintf(buf, len, "-");
    return buf;
}

/* The innermost frame of t's stack outside the standard library. */
static const struct ps_frame *ps_app_frame(const struct ps_task *t)
{
    for (size_t k = t->nframes; k-- > 0;)
        if (!t->frames[k].runtime)
            return &t->frames[k];
    return NULL;
}

static void ps_header(FILE *f, const struct ps_snap *s)
{
    fprintf(f, "pid %d  %s  %zu task%s  (census in %.1f ms)\n", (int)s->pid,
            ps_term(s->runtime, 0), s->n, s->n == 1 ? "" : "s", (double)s->dur_ns / 1e6);
}

static void ps_notes(const struct ps_snap *s)
{
    if (s->flags & PS_TRUNCATED)
        fprintf(stderr, "loopscope ps: note: more than %d tasks: the rest are not shown\n",
                LS_PYT_MAX_TASKS);
    if (s->flags & PS_READ_ERROR)
        fputs("loopscope ps: note: some tasks changed while they were read and are not "
              "shown\n", stderr);
}

/* "cycle: dl-a -> dl-b -> dl-a (lock 0x.. held by dl-b; lock 0x.. held by dl-a)" */
static void ps_print_cycles(FILE *f, const struct ps_view *v)
{
    for (size_t c = 0; c < v->ncycles; c++) {
        size_t a = v->cyc_at[c], b = v->cyc_at[c + 1];
        fputs("cycle: ", f);
        for (size_t k = a; k < b; k++)
            fprintf(f, "%s -> ", ps_term(v->s->t[v->cyc[k]].name, 0));
        fprintf(f, "%s (", ps_term(v->s->t[v->cyc[a]].name, 0));
        for (size_t k = a; k < b; k++) {
            const struct ps_task *t = &v->s->t[v->cyc[k]];
            const struct ps_task *to = &v->s->t[v->cyc[k + 1 < b ? k + 1 : a]];
            if (t->reason == EVL_SUSPEND_TASK)
                fprintf(f, "%sawaits task %s", k > a ? "; " : "", ps_term(to->name, 0));
            else
                fprintf(f, "%s%s 0x%" PRIx64 " held by %s", k > a ? "; " : "",
                        ps_reason_name(t->reason), t->object, ps_term(to->name, 0));
        }
        fputs(")\n", f);
    }
    if (v->ncycles == PS_MAX_CYCLES)
        fprintf(f, "(only the first %d cycles)\n", PS_MAX_CYCLES);
}

static void ps_print_table(FILE *f, const struct ps_view *v)
{
    static const char *const hdr[] = { "ID", "NAME", "STATE", "WAITS ON", "HOLDS", "AT" };
    enum { NC = 5 };                /* padded; AT last, printed as it comes */
    size_t n = v->s->n, w[NC];
    for (int k = 0; k < NC; k++)
        w[k] = strlen(hdr[k]);
    char *cells = ps_alloc(n * NC, 512);
#define CELL(r, k) (cells + ((r) * NC + (k)) * 512)
    for (size_t r = 0; r < n; r++) {
        const struct ps_task *t = &v->s->t[v->order[r]];
        char buf[256];
        snprintf(CELL(r, 0), 512, "0x%" PRIx64, t->id);
        snprintf(CELL(r, 1), 512, "%s", ps_term(t->name, PS_NAME_COL));
        snprintf(CELL(r, 2), 512, "%s%s", ls_pyt_state_name(t->state),
                 t->unretrieved ? "*" : "");
        snprintf(CELL(r, 3), 512, "%s", ps_waits_on(v, t, buf, sizeof buf));
        snprintf(CELL(r, 4), 512, "%s", ps_holds_str(t, buf, sizeof buf));
        for (int k = 0; k < NC; k++) {
            size_t cw = ps_width(CELL(r, k));
            if (cw > w[k])
                w[k] = cw;
        }
    }
    for (int k = 0; k < NC; k++) {
        ps_pad(f, hdr[k], w[k]);
        fputs("  ", f);
    }
    fprintf(f, "%s\n", hdr[NC]);
    for (size_t r = 0; r < n; r++) {
        for (int k = 0; k < NC; k++) {
            ps_pad(f, CELL(r, k), w[k]);
            fputs("  ", f);
        }
        const struct ps_frame *fr = ps_app_frame(&v->s->t[v->order[r]]);
        if (fr) {
            /* two calls, each in its own rotating buffer */
            const char *fn = ps_term(fr->function, 0), *file = ps_term(fr->file, 0);
            fprintf(f, "%s %s:%d\n", fn, file, fr->line);
        } else
            fputs("-\n", f);
    }
#undef CELL
    free(cells);
    bool unretrieved = false;
    for (size_t i = 0; i < n; i++)
        unretrieved |= v->s->t[i].unretrieved;
    if (unretrieved)
        fputs("* failed, its exception not retrieved yet\n", f);
    ps_print_cycles(f, v);
}

/* The tree's left margin for a line at depth d (0: a root): the levels
 * above it (last[k]: the node at depth k was its parent's last child),
 * then, for a node's own line, its branch. */
static void ps_margin(FILE *f, const bool *last, size_t d, bool node)
{
    size_t from = 1;
    if (d > PS_TREE_INDENT) {
        from = d - PS_TREE_INDENT + 1;
        fprintf(f, "(+%zu) ", from - 1);
    }
    for (size_t k = from; k <= d; k++) {
        if (k == d && node)
            fputs(last[k] ? "`- " : "|- ", f);
        else
            fputs(last[k] ? "   " : "|  ", f);
    }
}

static bool ps_frame_eq(const struct ps_frame *a, const struct ps_frame *b)
{
    return a->line == b->line && !strcmp(a->function, b->function) && !strcmp(a->file, b->file);
}

static void ps_print_node(FILE *f, const struct ps_view *v, size_t i, const bool *last,
                          size_t d, bool seen)
{
    const struct ps_task *t = &v->s->t[i];
    char buf[256], hb[128];
    ps_margin(f, last, d, true);
    fprintf(f, "%s  (0x%" PRIx64 ")  %s", ps_term(t->name, 0), t->id, ls_pyt_state_name(t->state));
    if (t->state == LS_PYT_WAITING)
        fprintf(f, " on %s", ps_waits_on(v, t, buf, sizeof buf));
    if (t->nheld)
        fprintf(f, ", holds %s", ps_holds_str(t, hb, sizeof hb));
    if (t->cancels)
        fprintf(f, ", %d cancel request%s", t->cancels, t->cancels == 1 ? "" : "s");
    if (t->unretrieved)
        fputs(", exception not retrieved", f);
    if (seen) {
        fputs("  (await cycle: shown above)\n", f);
        return;
    }
    fputc('\n', f);
    bool kids = v->child_at[i] != v->child_at[i + 1];
    const char *bar = kids ? "|" : " ";
    /* innermost first; a run of the same frame (recursion) once */
    for (size_t k = t->nframes; k-- > 0;) {
        const struct ps_frame *fr = &t->frames[k];
        size_t same = 0;
        while (same < k && ps_frame_eq(&t->frames[k - 1 - same], fr))
            same++;
        ps_margin(f, last, d, false);
        const char *fn = ps_term(fr->function, 0), *file = ps_term(fr->file, 0);
        fprintf(f, "%s  %s  %s:%d\n", bar, fn, file, fr->line);
        if (same) {
            ps_margin(f, last, d, false);
            fprintf(f, "%s  [the same frame %zu more time%s]\n", bar, same, same == 1 ? "" : "s");
            k -= same;
        }
    }
    if (t->chain_cut) {
        /* the chain was deeper than a census keeps (its innermost frames
         * are above), or it looped */
        ps_margin(f, last, d, false);
        fprintf(f, "%s  ... (await chain cut)\n", bar);
    }
}

/* Depth-first from root: each task once (a task met again, in an await
 * cycle, is named and not followed). */
static void ps_print_tree_from(FILE *f, const struct ps_view *v, size_t root, bool *done,
                               size_t *stack, size_t *next, bool *last)
{
    size_t d = 0;
    stack[0] = root;
    next[0] = v->child_at[root];
    last[0] = true;
    done[root] = true;
    ps_print_node(f, v, root, last, 0, false);
    while (d != SIZE_MAX) {
        size_t u = stack[d];
        if (next[d] == v->child_at[u + 1]) {
            d--;
            continue;
        }
        size_t c = v->child[next[d]++];
        last[d + 1] = next[d] == v->child_at[u + 1];
        if (done[c]) {
            ps_print_node(f, v, c, last, d + 1, true);
            continue;
        }
        done[c] = true;
        ps_print_node(f, v, c, last, d + 1, false);
        d++;
        stack[d] = c;
        next[d] = v->child_at[c];
    }
}

static void ps_print_tree(FILE *f, const struct ps_view *v)
{
    size_t n = v->s->n;
    bool *done = ps_alloc(n, sizeof *done), *last = ps_alloc(n + 1, sizeof *last);
    size_t *stack = ps_alloc(n + 1, sizeof *stack), *next = ps_alloc(n + 1, sizeof *next);
    /* roots: tasks that await no task of the snapshot */
    for (size_t r = 0; r < n; r++) {
        size_t i = v->order[r];
        if (v->parent[i] == SIZE_MAX)
            ps_print_tree_from(f, v, i, done, stack, next, last);
    }
    /* what is left awaits in a cycle of tasks: from its first in table order */
    for (size_t r = 0; r < n; r++) {
        size_t i = v->order[r];
        if (!done[i])
            ps_print_tree_from(f, v, i, done, stack, next, last);
    }
    free(done);
    free(last);
    free(stack);
    free(next);
    if (v->ncycles) {
        fputc('\n', f);
        ps_print_cycles(f, v);
    }
}

static void ps_json_hex(FILE *f, uint64_t v)
{
    if (v)
        fprintf(f, "\"0x%" PRIx64 "\"", v);
    else
        fputs("null", f);
}

static void ps_print_json(FILE *f, const struct ps_view *v)
{
    const struct ps_snap *s = v->s;
    fprintf(f, "{\"pid\":%d,", (int)s->pid);
    ps_json_str(f, s->version_key);
    fputc(':', f);
    ps_json_str(f, s->version);
    fprintf(f, ",\"census_ns\":%" PRId64 ",\"truncated\":%s,\"read_error\":%s,\"tasks\":[",
            s->dur_ns, (s->flags & PS_TRUNCATED) ? "true" : "false",
            (s->flags & PS_READ_ERROR) ? "true" : "false");
    for (size_t r = 0; r < s->n; r++) {
        const struct ps_task *t = &s->t[v->order[r]];
        fprintf(f, "%s\n{\"id\":\"0x%" PRIx64 "\",\"name\":", r ? "," : "", t->id);
        ps_json_str(f, t->name);
        fprintf(f, ",\"state\":\"%s\",\"reason\":", ls_pyt_state_name(t->state));
        const char *rn = t->state == LS_PYT_WAITING ? ps_reason_name(t->reason) : NULL;
        if (rn)
            ps_json_str(f, rn);
        else
            fputs("null", f);
        fputs(",\"object\":", f);
        ps_json_hex(f, t->object);
        fputs(",\"awaits\":", f);
        if (t->awaits[0])
            ps_json_str(f, t->awaits);
        else
            fputs("null", f);
        fputs(",\"held\":[", f);
        for (uint32_t k = 0; k < t->nheld && k < 4; k++) {
            fputs(k ? "," : "", f);
            ps_json_hex(f, t->held[k]);
        }
        fprintf(f, "],\"cancels\":%d,\"unretrieved\":%s,\"chain_cut\":%s,\"stack\":[",
                t->cancels, t->unretrieved ? "true" : "false", t->chain_cut ? "true" : "false");
        for (size_t k = 0; k < t->nframes; k++) {
            fputs(k ? ",{\"function\":" : "{\"function\":", f);
            ps_json_str(f, t->frames[k].function);
            fputs(",\"file\":", f);
            ps_json_str(f, t->frames[k].file);
            fprintf(f, ",\"line\":%d}", t->frames[k].line);
        }
        fputs("]}", f);
    }
    fputs("],\n\"cycles\":[", f);
    for (size_t c = 0; c < v->ncycles; c++) {
        fputs(c ? ",[" : "[", f);
        for (size_t k = v->cyc_at[c]; k < v->cyc_at[c + 1]; k++) {
            fputs(k > v->cyc_at[c] ? "," : "", f);
            ps_json_str(f, s->t[v->cyc[k]].name);
        }
        fputc(']', f);
    }
    fputs("]}\n", f);
}

/* ------------------------------------------------------------ the command */

static void usage(FILE *f)
{
    fputs("usage: loopscope ps [--tree | --json] PID\n"
          "\n"
          "A snapshot of every asyncio task of a running CPython 3.10-3.15 process,\n"
          "read from outside (process_vm_readv) without stopping or changing it:\n"
          "one row per task, sorted by state then name, with what it waits on, the\n"
          "locks it holds and the innermost frame of its async stack outside the\n"
          "standard library.  Cycles of tasks waiting for each other (awaiting a\n"
          "task, or a lock another task holds) are printed as `cycle:` lines.\n"
          "\n"
          "  -p, --pid PID   the process (or PID as the argument)\n"
          "      --tree      the await tree: a task awaiting another is drawn under\n"
          "                  it, each with its async stack (innermost frame first);\n"
          "                  then the wait-for cycles\n"
          "      --json      one JSON object: pid, python, tasks (id, name, state,\n"
          "                  reason, object, awaits, held, cancels, unretrieved,\n"
          "                  stack outermost first) and cycles (lists of task names)\n"
          "  -h, --help      this help\n"
          "\n"
          "Reading another user's process needs root (CAP_SYS_PTRACE).  The target\n"
          "runs while it is read: a task that changes meanwhile may be left out\n"
          "(a note on stderr says so).\n"
          "\n"
          "example: loopscope ps --tree $(pgrep -f my_service.py)\n",
          f);
}

static bool ps_parse_pid(const char *s, pid_t *pid)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (!*s || *end || errno || v <= 0 || v > INT_MAX || s[0] == '+' || s[0] == ' ')
        return false;
    *pid = (pid_t)v;
    return true;
}

int cmd_ps(int argc, char **argv)
{
    static const struct option opts[] = {
        { "pid", required_argument, NULL, 'p' },
        { "tree", no_argument, NULL, 'T' },
        { "json", no_argument, NULL, 'J' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    bool tree = false, json = false;
    const char *pidarg = NULL;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":p:h", opts, NULL)) != -1) {
        switch (c) {
        case 'p':
            if (pidarg) {
                ps_fail("more than one PID (see 'loopscope ps --help')");
                return 2;
            }
            pidarg = optarg;
            break;
        case 'T':
            tree = true;
            break;
        case 'J':
            json = true;
            break;
        case 'h':
            usage(stdout);
            return 0;
        case ':':
            ps_fail("option '%s' needs a value (see 'loopscope ps --help')",
                    ps_term(argv[optind - 1], 64));
            return 2;
        default:
            ps_fail("unknown option '%s' (see 'loopscope ps --help')",
                    ps_term(optopt ? (char[]){ '-', (char)optopt, 0 } : argv[optind - 1], 64));
            return 2;
        }
    }
    for (; optind < argc; optind++) {
        if (pidarg) {
            ps_fail("unexpected argument '%s' (see 'loopscope ps --help')",
                    ps_term(argv[optind], 64));
            return 2;
        }
        pidarg = argv[optind];
    }
    if (tree && json) {
        ps_fail("--tree and --json cannot be combined (--json has both)");
        return 2;
    }
    if (!pidarg) {
        ps_fail("missing PID (see 'loopscope ps --help')");
        return 2;
    }
    pid_t pid;
    if (!ps_parse_pid(pidarg, &pid)) {
        ps_fail("invalid PID '%s'", ps_term(pidarg, 64));
        return 2;
    }
    if (kill(pid, 0) < 0 && errno == ESRCH) {
        ps_fail("no such process: %d", (int)pid);
        return 1;
    }

    struct ps_snap snap = { 0 };
    char why[128] = "";
    int rc = PS_NOT_MINE;
    for (size_t k = 0; k < sizeof ps_sources / sizeof ps_sources[0] && rc == PS_NOT_MINE; k++) {
        char w[128] = "";
        rc = ps_sources[k].snapshot(pid, &snap, w, sizeof w);
        if (rc == PS_NOT_MINE)        /* the last source's words: the most specific */
            snprintf(why, sizeof why, "%s", w);
        if (rc == PS_FAILED)          /* said already, unless it left words */
            snprintf(why, sizeof why, "%s", w);
    }
    if (rc != PS_MINE) {
        if (!strcmp(why, "no such process"))
            ps_fail("no such process: %d", (int)pid);
        else if (why[0] && rc == PS_NOT_MINE)
            ps_fail("pid %d: %s; loopscope ps reads libevl and CPython 3.10-3.15 asyncio "
                    "processes",
                    (int)pid, why);
        else if (why[0])
            ps_fail("pid %d: %s", (int)pid, why);
        return 1;
    }
    struct ps_view v;
    ps_view_init(&v, &snap);
    if (json) {
        ps_print_json(stdout, &v);
    } else {
        ps_header(stdout, &snap);
        if (tree)
            ps_print_tree(stdout, &v);
        else
            ps_print_table(stdout, &v);
    }
    ps_notes(&snap);
    ps_view_free(&v);
    ps_snap_free(&snap);
    return 0;
}
