/*
 * live.c -- the hooks of live.h (`loopscope top`), called by ingest.c and
 * blocks.c where they store what they accepted; each is a no-op when
 * r->live is NULL (`loopscope record`).  Also the innermost application
 * frame of each recent stack: blocks.c symbolizes a stack once (later
 * episodes on the same stack reuse its id), so the site is kept by stack
 * id here.  Part of the recorder (recorder.h).
 */
#define _GNU_SOURCE
#include "recorder.h"

#include <stdlib.h>
#include <string.h>

#include "syscalls.h"                 /* ls_syscall_names, generated (CMakeLists.txt) */

/* The site of a stack: its innermost application frame.  A cache of the
 * latest LS_STACK_IDS stack ids (ids grow by one), so a stack seen again
 * after 4096 newer ones shows no site. */
struct ls_live_site {
    int64_t id;
    bool have;
    char *function, *file;
    int line;
};

static bool ls_prefix(const char *s, const char *p)
{
    return s && !strncmp(s, p, strlen(p));
}

/* Application code: the rule of the viewer's `app_frames` view
 * (viewer/trace.c, ls_create_app_frames), on one frame: not in the
 * system's libraries, not anonymous or JIT memory libevl-wise, not
 * libevl's internals (evl__*); in the generic mode Python frames outside
 * the standard library, JS frames outside node's internals, and native
 * frames outside the interpreter. */
static bool ls_app_frame(const recorder *r, const ls_sym *f)
{
    const char *m = f->module ? f->module : "";
    if (r->generic && !strcmp(m, "python"))
        return !(f->file && (strstr(f->file, "/lib/python") || ls_prefix(f->file, "<frozen ")));
    if (r->generic && !strcmp(m, "[jit]"))
        return !(f->function && strstr(f->function, "node:"));
    if (ls_prefix(m, "/usr/lib/") || ls_prefix(m, "/lib/") || m[0] == '[')
        return false;
    if (!r->generic)
        return !ls_prefix(f->function, "evl__");
    if (strstr(m, "/libpython") || strstr(m, "/lib/python"))
        return false;
    return ls_prefix(r->runtime[0] ? r->runtime : "native", "native") || strcmp(m, r->binary);
}

static struct ls_live_site *ls_site(recorder *r, int64_t id)
{
    if (!r->live_sites)
        r->live_sites = calloc(LS_STACK_IDS, sizeof(*r->live_sites));
    if (!r->live_sites || id <= 0)
        return NULL;
    return &r->live_sites[(uint64_t)id % LS_STACK_IDS];
}

void ls_live_on_frame(recorder *r, int64_t stack_id, int depth, const ls_sym *f)
{
    if (!r->live || !r->live->block)
        return;
    struct ls_live_site *s = ls_site(r, stack_id);
    if (!s)
        return;
    if (s->id != stack_id) {    /* a new stack takes the slot */
        free(s->function);
        free(s->file);
        *s = (struct ls_live_site){ .id = stack_id };
    }
    if (s->have || !ls_app_frame(r, f))
        return;
    s->have = true;
    s->function = f->function ? strdup(f->function) : NULL;
    s->file = f->file ? strdup(f->file) : NULL;
    s->line = f->line;
}

void ls_live_on_block(recorder *r, const struct ls_msg_hdr *h, uint64_t task, int64_t start,
                      int64_t dur, int64_t stack_id, const struct ls_pystack *py)
{
    if (!r->live || !r->live->block)
        return;
    const struct ls_block *b = (const void *)(h + 1);
    struct ls_live_site *s = ls_site(r, stack_id);
    if (s && s->id != stack_id)
        s = NULL;
    ls_live_block lb = {
        .loop = h->loop, .task = task, .kind = (int)b->kind, .syscall = b->syscall,
        .syscall_name = b->syscall >= 0 && (uint64_t)b->syscall < sizeof(ls_syscall_names) /
                                                                  sizeof(ls_syscall_names[0])
                            ? ls_syscall_names[b->syscall] : NULL,
        .start = start, .dur = dur,
        .task_name = r->generic && r->py && py->task ? ls_py_task_name(r->py, py) : NULL,
        .function = s ? s->function : NULL, .file = s ? s->file : NULL,
        .line = s ? s->line : 0,
    };
    r->live->block(r->live->ctx, &lb);
}

void ls_live_on_task(recorder *r, uint64_t loop, uint64_t task, const char *name, size_t len,
                     bool preexisting)
{
    if (r->live && r->live->task_created)
        r->live->task_created(r->live->ctx, loop, task, name, len, preexisting);
}

void ls_live_on_event(recorder *r, const ls_event *e)
{
    if (r->live && r->live->event)
        r->live->event(r->live->ctx, e);
}

void ls_live_on_window(recorder *r, uint64_t loop, const struct ls_window *w)
{
    if (!r->live || !r->live->window)
        return;
    ls_live_window lw = {
        .loop = loop, .start = (int64_t)w->start_ns, .end = (int64_t)w->end_ns,
        .iterations = w->iterations, .wait_ns = w->wait_ns, .busy_ns = w->busy_ns,
        .max_busy_ns = w->max_busy_ns, .hist = w->hist, .nbuckets = LS_HIST_BUCKETS,
    };
    r->live->window(r->live->ctx, &lw);
}

void ls_live_free(recorder *r)
{
    if (!r->live_sites)
        return;
    for (size_t i = 0; i < LS_STACK_IDS; i++) {
        free(r->live_sites[i].function);
        free(r->live_sites[i].file);
    }
    free(r->live_sites);
    r->live_sites = NULL;
}
