/*
 * top_data.c -- what `loopscope top` keeps from the recorder's hooks
 * (tracer/live.h): task names, the tasks finished in the last seconds, the
 * blocking feed, and per-second loop statistics (iterations, time in the
 * poll, an iteration-latency histogram); and the rows of the task table,
 * read from the recorder's replay.  Bounded: top.h.
 */
#define _GNU_SOURCE
#include "top.h"
#include "codes.h"
#include "replay.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *const top_sort_names[TOP_NSORT] = {
    [TOP_SORT_BUSY] = "busy", [TOP_SORT_SCHED] = "sched", [TOP_SORT_IDLE] = "idle",
    [TOP_SORT_LONGEST] = "longest", [TOP_SORT_RESUMES] = "resumes", [TOP_SORT_WAKES] = "wakes",
    [TOP_SORT_NAME] = "name", [TOP_SORT_ID] = "id",
};

int64_t top_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* ------------------------------------------------------------- names */

/* Open addressing, linear probing, backward-shift deletion. */
static size_t name_slot(const top *t, uint64_t id)
{
    uint64_t h = id * 0x9e3779b97f4a7c15ull;
    return (size_t)(h >> 17) & (t->names_cap - 1);
}

static top_name *name_find(top *t, uint64_t id)
{
    if (!t->names_cap)
        return NULL;
    for (size_t i = name_slot(t, id);; i = (i + 1) & (t->names_cap - 1)) {
        if (t->names[i].id == id)
            return &t->names[i];
        if (!t->names[i].id)
            return NULL;
    }
}

static void name_insert(top *t, uint64_t id, char *name)
{
    size_t i = name_slot(t, id);
    while (t->names[i].id && t->names[i].id != id)
        i = (i + 1) & (t->names_cap - 1);
    if (t->names[i].id) {
        free(t->names[i].name);
    } else {
        t->names[i].id = id;
        t->nnames++;
    }
    t->names[i].name = name;
}

static bool names_resize(top *t, size_t cap)
{
    top_name *old = t->names;
    size_t ocap = t->names_cap;
    top_name *n = calloc(cap, sizeof(*n));
    if (!n)
        return false;
    t->names = n;
    t->names_cap = cap;
    t->nnames = 0;
    for (size_t i = 0; i < ocap; i++)
        if (old[i].id)
            name_insert(t, old[i].id, old[i].name);
    free(old);
    return true;
}

static void name_remove(top *t, uint64_t id)
{
    top_name *e = name_find(t, id);
    if (!e)
        return;
    free(e->name);
    size_t i = (size_t)(e - t->names), mask = t->names_cap - 1;
    t->names[i].id = 0;
    t->names[i].name = NULL;
    t->nnames--;
    /* backward shift: move later entries of the run into the hole */
    for (size_t j = (i + 1) & mask; t->names[j].id; j = (j + 1) & mask) {
        size_t home = name_slot(t, t->names[j].id);
        if (((j - home) & mask) >= ((j - i) & mask)) {
            t->names[i] = t->names[j];
            t->names[j].id = 0;
            t->names[j].name = NULL;
            i = j;
        }
    }
}

/* The name as kept: the target's bytes, each NUL as U+FFFD (like the
 * store), cut to fit; NUL-terminated.  Escaped only when printed. */
static void name_copy(char *dst, size_t cap, const char *src, size_t len)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i]) {
            if (o + 1 >= cap)
                break;
            dst[o++] = src[i];
        } else {
            if (o + 3 >= cap)
                break;
            memcpy(dst + o, "\xef\xbf\xbd", 3);
            o += 3;
        }
    }
    dst[o] = 0;
}

const char *top_name_of(top *t, uint64_t id)
{
    top_name *e = name_find(t, id);
    return e ? e->name : NULL;
}

static void on_task_created(void *ctx, uint64_t loop, uint64_t task, const char *name,
                            size_t len, bool preexisting)
{
    top *t = ctx;
    (void)loop;
    (void)preexisting;
    if (t->nnames >= TOP_NAMES_MAX) {
        t->names_full = true;     /* top_collect keeps only the live tasks' names */
        return;
    }
    if ((t->nnames + 1) * 2 > t->names_cap &&
        !names_resize(t, t->names_cap ? 2 * t->names_cap : 1024))
        return;
    char buf[TOP_NAME_BYTES];
    name_copy(buf, sizeof(buf), name, len);
    char *s = strdup(buf);
    if (s)
        name_insert(t, task, s);
}

/* ------------------------------------------------- per-second buckets */

static top_sec *sec_at(top *t, int64_t s)
{
    if (s < 0)
        return NULL;
    top_sec *b = &t->secs[s % TOP_SECS];
    if (b->sec == s)
        return b;
    if (b->sec > s)
        return NULL;                  /* older than what is kept */
    memset(b, 0, sizeof(*b));
    b->sec = s;
    return b;
}

/* The upper bound of a bucket (exclusive), so percentiles err high. */
static int64_t hist_upper(int i)
{
    if (i < 8)
        return i;
    int e = (i - 8) / 8 + 3, m = (i - 8) % 8;
    return e >= 60 ? INT64_MAX : ((int64_t)(9 + m) << (e - 3)) - 1;
}

/* Spread `amount` of the interval [a, b) over the seconds it covers (the
 * last TOP_SECS only); field: offset of the double in top_sec. */
static void spread(top *t, int64_t a, int64_t b, double amount, size_t field)
{
    if (b <= a) {
        top_sec *s = sec_at(t, b / 1000000000ll);
        if (s)
            *(double *)((char *)s + field) += amount;
        return;
    }
    int64_t first = (b - 1) / 1000000000ll - (TOP_SECS - 1);
    double len = (double)(b - a);
    for (int64_t sec = a / 1000000000ll; sec <= (b - 1) / 1000000000ll; sec++) {
        if (sec < first)
            sec = first;
        int64_t lo = sec * 1000000000ll, hi = lo + 1000000000ll;
        int64_t x = a > lo ? a : lo, y = b < hi ? b : hi;
        top_sec *s = sec_at(t, sec);
        if (s && y > x)
            *(double *)((char *)s + field) += amount * (double)(y - x) / len;
    }
}

static void add_iteration(top *t, int64_t ts, int64_t busy)
{
    top_sec *s = sec_at(t, ts / 1000000000ll);
    if (!s)
        return;
    s->iterations++;
    s->hist[ls_hist_index(busy)]++;
    if (busy > s->max_busy)
        s->max_busy = busy;
}

static top_loop *loop_of(top *t, uint64_t id)
{
    for (size_t i = 0; i < t->nloops; i++)
        if (t->loops[i].id == id)
            return &t->loops[i];
    if (t->nloops == TOP_LOOPS_MAX)
        return NULL;
    t->loops[t->nloops] = (top_loop){ .id = id };
    return &t->loops[t->nloops++];
}

/* libevl: an on-CPU episode is reported while its step runs (dur 0); it
 * ends, as model/derive.c has it, at the task's next suspend or finish,
 * or for a callback at the loop's next callback_end, less the off-CPU
 * episodes inside it. */
static void resolve_oncpu(top *t, const ls_event *e)
{
    for (int i = 0; i < t->npending;) {
        uint64_t k = t->pending[i];
        top_feed *f = &t->feed[k % TOP_FEED_MAX];
        bool gone = t->nfeed - k > TOP_FEED_MAX;   /* overwritten since */
        bool ends = !gone && f->loop == e->loop && e->ts > f->start &&
                    (f->task ? e->task == f->task && (e->kind == EVL_PROBE_ID_task_suspend ||
                                                      e->kind == EVL_PROBE_ID_task_finish)
                             : e->kind == EVL_PROBE_ID_callback_end);
        if (!gone && !ends) {
            i++;
            continue;
        }
        if (ends) {
            int64_t d = e->ts - f->start;
            for (uint64_t j = k + 1; j < t->nfeed; j++) {
                const top_feed *o = &t->feed[j % TOP_FEED_MAX];
                if (t->nfeed - j <= TOP_FEED_MAX && o->kind == LS_BLOCK_OFFCPU &&
                    o->loop == f->loop && o->start >= f->start && o->start < e->ts)
                    d -= o->dur;
            }
            f->dur = d > 0 ? d : 0;
            f->pending = false;
        }
        t->pending[i] = t->pending[--t->npending];
    }
}

/* libevl: an iteration's busy time runs from poll_exit to the next
 * poll_enter; its idle time is inside the poll. */
static void on_event(void *ctx, const ls_event *e)
{
    top *t = ctx;
    if (t->npending)
        resolve_oncpu(t, e);
    if (e->kind != EVL_PROBE_ID_poll_enter && e->kind != EVL_PROBE_ID_poll_exit)
        return;
    top_loop *l = loop_of(t, e->loop);
    if (!l)
        return;
    if (e->kind == EVL_PROBE_ID_poll_enter) {
        if (l->last_exit && e->ts >= l->last_exit)
            add_iteration(t, e->ts, e->ts - l->last_exit);
        l->in_poll = true;
        l->enter = e->ts;
    } else {
        if (l->in_poll && e->ts >= l->enter)
            spread(t, l->enter, e->ts, (double)(e->ts - l->enter), offsetof(top_sec, wait_ns));
        l->in_poll = false;
        l->last_exit = e->ts;
    }
}

/* Generic mode: a window of a loop thread (20 ms, or longer when the
 * thread slept): its counts spread over the seconds it covers, its
 * power-of-two histogram put at each bucket's upper bound (capped at the
 * window's longest). */
static void on_window(void *ctx, const ls_live_window *w)
{
    top *t = ctx;
    t->generic = true;
    if (w->end < w->start)
        return;
    spread(t, w->start, w->end, (double)w->iterations, offsetof(top_sec, iterations));
    spread(t, w->start, w->end, (double)w->wait_ns, offsetof(top_sec, wait_ns));
    spread(t, w->start, w->end, (double)(w->end - w->start), offsetof(top_sec, covered_ns));
    top_sec *s = sec_at(t, w->end / 1000000000ll);
    if (!s)
        return;
    for (int b = 0; b < w->nbuckets && b < 62; b++) {
        if (!w->hist[b])
            continue;
        int64_t v = ((int64_t)2 << b) - 1;
        if (v > (int64_t)w->max_busy_ns)
            v = (int64_t)w->max_busy_ns;
        s->hist[ls_hist_index(v)] += w->hist[b];
    }
    if ((int64_t)w->max_busy_ns > s->max_busy)
        s->max_busy = (int64_t)w->max_busy_ns;
}

void top_loopstats(top *t, int64_t now, top_loopstat *out)
{
    int64_t cur = now / 1000000000ll, last = cur - 1;
    *out = (top_loopstat){ .idle = -1, .p50 = -1, .p99 = -1, .max = -1 };
    top_sec *s = &t->secs[((last % TOP_SECS) + TOP_SECS) % TOP_SECS];
    bool have = s->sec == last;
    if (have)
        out->iter_per_s = s->iterations;
    if (t->generic) {
        if (have && s->covered_ns > 0)
            out->idle = s->wait_ns / s->covered_ns;
    } else if (t->nloops) {
        double wait = have ? s->wait_ns : 0;
        int64_t lo = last * 1000000000ll, hi = lo + 1000000000ll;
        for (size_t i = 0; i < t->nloops; i++) {
            const top_loop *l = &t->loops[i];
            if (!l->in_poll || l->enter >= hi)
                continue;               /* sleeping in its poll since `enter` */
            int64_t x = l->enter > lo ? l->enter : lo, y = now < hi ? now : hi;
            if (y > x)
                wait += (double)(y - x);
        }
        out->idle = wait / (1e9 * (double)t->nloops);
        if (out->idle > 1)
            out->idle = 1;
    }
    static uint64_t h[TOP_HBUCKETS];
    memset(h, 0, sizeof(h));
    for (int k = 0; k < TOP_LAG_SECS; k++) {
        top_sec *b = &t->secs[(((cur - k) % TOP_SECS) + TOP_SECS) % TOP_SECS];
        if (b->sec != cur - k)
            continue;
        for (int i = 0; i < TOP_HBUCKETS; i++)
            h[i] += b->hist[i], out->n += b->hist[i];
        if (b->max_busy > out->max)
            out->max = b->max_busy;
    }
    if (!out->n)
        return;
    uint64_t acc = 0, want50 = (out->n + 1) / 2, want99 = out->n - out->n / 100;
    for (int i = 0; i < TOP_HBUCKETS; i++) {
        acc += h[i];
        int64_t v = hist_upper(i) < out->max ? hist_upper(i) : out->max;
        if (out->p50 < 0 && acc >= want50)
            out->p50 = v;
        if (out->p99 < 0 && acc >= want99) {
            out->p99 = v;
            break;
        }
    }
}

/* ------------------------------------------------------- tasks, feed */

static void on_task_done(void *ctx, const ls_task *tk, bool finished)
{
    top *t = ctx;
    if (!finished)
        return;                       /* the recording ends */
    size_t i = t->done_next++ % TOP_DONE_MAX;
    if (t->ndone < TOP_DONE_MAX)
        t->ndone++;
    int final = tk->tnode >= LS_NODE_FINAL && tk->tnode < LS_NODE_FINAL + 100
                    ? tk->tnode - LS_NODE_FINAL : EVL_FINAL_FINISHED;
    t->done[i] = (top_row){ .id = tk->id, .loop = tk->loop, .state = final, .done = true,
                            .busy = tk->busy, .sched = tk->sched, .idle = tk->idle,
                            .longest = tk->longest, .resumes = tk->resumes, .wakes = tk->wakes };
    const char *n = top_name_of(t, tk->id);
    snprintf(t->done_names[i], TOP_NAME_BYTES, "%s", n ? n : "?");
    t->done[i].name = t->done_names[i];
    t->done_at[i] = top_now();
    name_remove(t, tk->id);           /* its name lives on in done_names */
}

static void on_block(void *ctx, const ls_live_block *b)
{
    top *t = ctx;
    top_feed *f = &t->feed[t->nfeed % TOP_FEED_MAX];
    *f = (top_feed){ .start = b->start, .dur = b->dur, .loop = b->loop, .task = b->task,
                     .kind = b->kind };
    if (b->kind == LS_BLOCK_ONCPU && !b->dur && !t->generic) {
        if (t->npending == (int)(sizeof(t->pending) / sizeof(t->pending[0])))
            t->pending[0] = t->pending[--t->npending];   /* forget one: shown as ">=" */
        t->pending[t->npending++] = t->nfeed;
        f->pending = true;
    }
    t->nfeed++;
    const char *n = b->task_name ? b->task_name : b->task ? top_name_of(t, b->task) : NULL;
    if (n)
        snprintf(f->task_name, sizeof(f->task_name), "%s", n);
    else if (!b->task)
        snprintf(f->task_name, sizeof(f->task_name), "%s",
                 t->generic ? "(no asyncio task)" : "(callback)");
    /* else: named when shown, if its task_create has come by then */
    if (b->syscall_name)
        snprintf(f->syscall, sizeof(f->syscall), "%s", b->syscall_name);
    else if (b->syscall >= 0)
        snprintf(f->syscall, sizeof(f->syscall), "syscall %lld", (long long)b->syscall);
    else
        snprintf(f->syscall, sizeof(f->syscall), "%s",
                 b->kind == LS_BLOCK_ONCPU ? "(on-cpu)" : "(none)");
    if (b->file)
        snprintf(f->site, sizeof(f->site), "%s:%d %s", b->file, b->line,
                 b->function ? b->function : "?");
    else
        snprintf(f->site, sizeof(f->site), "%s", b->function ? b->function
                                                             : "(no application frame)");
}

void top_hooks(top *t, ls_live_hooks *h)
{
    for (int i = 0; i < TOP_SECS; i++)
        t->secs[i].sec = -1;
    h->task_created = on_task_created;
    h->event = on_event;
    h->task_done = on_task_done;
    h->block = on_block;
    h->window = on_window;
    h->ctx = t;
}

void top_free(top *t)
{
    for (size_t i = 0; i < t->names_cap; i++)
        free(t->names[i].name);
    free(t->names);
    free(t->rows);
    t->names = NULL;
    t->rows = NULL;
}

/* ----------------------------------------------------------- the rows */

struct collect {
    top *t;
    int64_t now;
    top_name *keep;               /* names_full: the names of live tasks */
    size_t keep_cap, nkeep;
};

static bool row_push(top *t, const top_row *r)
{
    if (t->filter[0] && !strstr(r->name ? r->name : "?", t->filter))
        return true;
    if (t->nrows == t->rows_cap) {
        size_t cap = t->rows_cap ? 2 * t->rows_cap : 256;
        top_row *n = realloc(t->rows, cap * sizeof(*n));
        if (!n)
            return false;
        t->rows = n;
        t->rows_cap = cap;
    }
    t->rows[t->nrows++] = *r;
    return true;
}

static void collect_task(const ls_task *tk, void *arg)
{
    struct collect *c = arg;
    top *t = c->t;
    if (tk->done || (!tk->seen && tk->state == LS_TASK_NO_STATE))
        return;
    top_row r = { .id = tk->id, .loop = tk->loop, .name = top_name_of(t, tk->id),
                  .state = tk->state, .detail = tk->detail, .busy = tk->busy,
                  .sched = tk->sched, .idle = tk->idle, .longest = tk->longest,
                  .resumes = tk->resumes, .wakes = tk->wakes };
    int64_t d = c->now - tk->since;   /* the span it is in, counted to now */
    if (tk->node == LS_NODE_PREEXISTING)
        r.state = LS_TASK_NO_STATE;   /* what it does: its next event tells */
    else if (d > 0 && tk->state == EVL_FINAL_RUNNING) {
        r.busy += d;
        if (d > r.longest)
            r.longest = d;
    } else if (d > 0 && (tk->state == EVL_FINAL_READY || tk->state == EVL_FINAL_CREATED))
        r.sched += d;
    else if (d > 0 && tk->state == EVL_FINAL_SUSPENDED)
        r.idle += d;
    t->nlive++;
    row_push(t, &r);
    /* names_full: the map is rebuilt with the live tasks' names only */
    if (c->keep && r.name && c->nkeep < TOP_NAMES_MAX) {
        size_t i = (size_t)((tk->id * 0x9e3779b97f4a7c15ull) >> 17) & (c->keep_cap - 1);
        while (c->keep[i].id)
            i = (i + 1) & (c->keep_cap - 1);
        c->keep[i].id = tk->id;
        c->keep[i].name = strdup(r.name);
        c->nkeep++;
    }
}

static enum top_sort sort_key;

static int cmp_u(uint64_t a, uint64_t b) { return a < b ? 1 : a > b ? -1 : 0; }
static int cmp_i(int64_t a, int64_t b) { return a < b ? 1 : a > b ? -1 : 0; }

static int row_cmp(const void *pa, const void *pb)
{
    const top_row *a = pa, *b = pb;
    int c = 0;
    switch (sort_key) {
    case TOP_SORT_BUSY: c = cmp_i(a->busy, b->busy); break;
    case TOP_SORT_SCHED: c = cmp_i(a->sched, b->sched); break;
    case TOP_SORT_IDLE: c = cmp_i(a->idle, b->idle); break;
    case TOP_SORT_LONGEST: c = cmp_i(a->longest, b->longest); break;
    case TOP_SORT_RESUMES: c = cmp_u(a->resumes, b->resumes); break;
    case TOP_SORT_WAKES: c = cmp_u(a->wakes, b->wakes); break;
    case TOP_SORT_NAME: c = strcmp(a->name ? a->name : "?", b->name ? b->name : "?"); break;
    default: break;
    }
    return c ? c : a->id < b->id ? -1 : a->id > b->id ? 1 : 0;
}

void top_collect(top *t, ls_replay *replay, int64_t now)
{
    t->nrows = 0;
    t->nlive = 0;
    struct collect c = { .t = t, .now = now };
    if (t->names_full) {
        c.keep_cap = 2 * (size_t)TOP_NAMES_MAX;
        c.keep = calloc(c.keep_cap, sizeof(*c.keep));
    }
    if (replay)
        ls_replay_each_task(replay, collect_task, &c);
    if (c.keep) {
        for (size_t i = 0; i < t->names_cap; i++)
            free(t->names[i].name);
        free(t->names);
        t->names = c.keep;
        t->names_cap = c.keep_cap;
        t->nnames = c.nkeep;
        t->names_full = false;
        for (size_t i = 0; i < t->nrows; i++)   /* the rows pointed at the old names */
            t->rows[i].name = top_name_of(t, t->rows[i].id);
    }
    for (size_t k = 0; k < t->ndone; k++)
        if (now - t->done_at[k] <= TOP_DONE_KEEP_NS)
            row_push(t, &t->done[k]);
    sort_key = t->sort;
    if (t->nrows)
        qsort(t->rows, t->nrows, sizeof(*t->rows), row_cmp);
}

const char *top_state_name(const top_row *r, char *buf, size_t n)
{
#define TOP_S(name, v, s) [v] = s,
    static const char *const states[] = { EVL_STATE_LIST(TOP_S) };
    static const char *const reasons[] = { EVL_SUSPEND_LIST(TOP_S) };
#undef TOP_S
    int nst = (int)(sizeof(states) / sizeof(states[0]));
    int nre = (int)(sizeof(reasons) / sizeof(reasons[0]));
    if (r->state == LS_TASK_NO_STATE)
        snprintf(buf, n, "unknown");  /* pre-existing: its next event tells */
    else if (r->state == EVL_FINAL_SUSPENDED && r->detail > 0 && r->detail < nre &&
             reasons[r->detail])
        snprintf(buf, n, "wait:%s", reasons[r->detail]);
    else if (r->state >= 0 && r->state < nst && states[r->state])
        snprintf(buf, n, "%s", states[r->state]);
    else
        snprintf(buf, n, "%d", r->state);
    return buf;
}
