/*
 * metrics.c -- a sink of the recorder's pipeline (sink.h) that keeps
 * running totals of what the recorder sees, and serves them over HTTP in
 * Prometheus's text exposition format (version 0.0.4): `loopscope record
 * --metrics [HOST:]PORT` (tracer/README.md, "Metrics").  What is exported
 * and what each metric means: tracer/README.md.
 *
 * Everything runs on the recorder's one thread: the engine polls the
 * listening socket and the clients with the ring buffer (ls_metrics_pollfds,
 * ls_metrics_io); for a process group (group.c), the group's thread polls
 * them and its members' threads feed the sink, all under the group's lock.  A client gets one answer and the connection closes; at
 * most LS_METRICS_CLIENTS at a time (more wait in the listen backlog), each
 * closed after LS_METRICS_CLIENT_NS whatever it did (a client that connects
 * and never reads, or never sends, holds a slot that long at most).  Every
 * label value that comes from the target (its command name, a call site's
 * function and file) is escaped for the format, and call sites are bounded
 * (LS_METRICS_SITES, the rest counted as site="other").
 */
#define _GNU_SOURCE
#include "metrics.h"
#include "decode.h"
#include "recorder.h"
#include "sink.h"
#include "codes.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define LS_METRICS_CLIENTS 8
#define LS_METRICS_CLIENT_NS 5000000000ll   /* a client's whole life */
#define LS_METRICS_REQ 2048                 /* bytes of a request read */
#define LS_METRICS_SITES 64                 /* call sites with a series of their own */
#define LS_METRICS_LABEL 256                /* bytes of a site label, before escaping */
#define LS_METRICS_LOOPS 1024               /* loop threads with series of their own */
#define LS_METRICS_OTHERS 128               /* processes with a site="other" series */
#define LS_METRICS_PROCS 128                /* processes with series of their own */

struct mloop {
    uint64_t loop;
    uint32_t pid, tid;
    uint64_t hist[LS_HIST_BUCKETS];
    uint64_t iterations, busy_ns, wait_ns;
    uint64_t blocks[3], block_ns[3];        /* by kind (1 off-cpu, 2 on-cpu) */
};

struct mcount {
    uint64_t blocks, block_ns;
};

/* A call site of a process (its innermost application frame). */
struct msite {
    uint32_t pid;
    char *label;                            /* "function file:line" */
    struct mcount n;
};

/* A process's episodes at sites past the first LS_METRICS_SITES. */
struct mother {
    uint32_t pid;
    struct mcount n;
};

/* The site of each stack seen (direct-mapped by stack id, as live.c). */
struct mstack {
    int64_t id;
    char *label;                            /* its site, NULL: none (yet) */
    bool done;                              /* its innermost application frame seen */
};

struct mclient {
    int fd;                                 /* -1: free */
    int64_t since;
    char req[LS_METRICS_REQ];
    size_t nreq;
    char *out;                              /* the answer, being written */
    size_t nout, off;
};

struct ls_metrics {
    recorder *r;
    int lfd;
    struct mclient c[LS_METRICS_CLIENTS];
    struct mloop *loops;
    size_t nloops;
    struct msite sites[LS_METRICS_SITES];
    size_t nsites;
    struct mother other[LS_METRICS_OTHERS];
    size_t nother;
    struct mstack stacks[4096];
    ls_replay *replay;
    uint64_t scrapes;
    char url[INET6_ADDRSTRLEN + 32];
};

/* ------------------------------------------------------------- the sink */

static struct mloop *loop_of(struct ls_metrics *m, uint64_t loop)
{
    for (size_t i = 0; i < m->nloops; i++)
        if (m->loops[i].loop == loop)
            return &m->loops[i];
    if (m->nloops == LS_METRICS_LOOPS)
        return NULL;
    if (!m->nloops || !(m->nloops & (m->nloops - 1))) {
        size_t cap = m->nloops ? 2 * m->nloops : 4;
        struct mloop *l = realloc(m->loops, cap * sizeof *l);
        if (!l)
            return NULL;
        m->loops = l;
    }
    struct mloop *l = &m->loops[m->nloops++];
    memset(l, 0, sizeof *l);
    l->loop = loop;
    return l;
}

static void mt_loop(void *s, uint64_t loop, uint32_t pid, uint32_t tid, int64_t seen)
{
    (void)seen;
    struct mloop *l = loop_of(s, loop);
    if (l) {
        l->pid = pid;
        l->tid = tid;
    }
}

static void mt_window(void *s, uint64_t loop, const struct ls_window *w)
{
    struct mloop *l = loop_of(s, loop);
    if (!l)
        return;
    for (int b = 0; b < LS_HIST_BUCKETS; b++)
        l->hist[b] += w->hist[b];
    l->iterations += w->iterations;
    l->busy_ns += w->busy_ns;
    l->wait_ns += w->wait_ns;
}

/* Stack id's entry (NULL: none); make: take one for it, in one of the
 * LS_STACK_WAYS places its hash gives, first a free one, then one without
 * a site (an await chain's), else the first.  The ids are hashed: a
 * group's processes have ids id + k << 40 (group.c), the same low bits,
 * and the await chains a census stores take ids as fast as it runs, so a
 * plain id % size would let one process's stacks evict another's sites. */
#define LS_STACK_WAYS 4
static struct mstack *stack_entry(struct ls_metrics *m, int64_t id, bool make)
{
    const size_t n = sizeof m->stacks / sizeof m->stacks[0];
    uint64_t h = (uint64_t)id * 0x9e3779b97f4a7c15ull;
    size_t first = (size_t)((h ^ (h >> 31)) % n), pick = n;
    for (size_t k = 0; k < LS_STACK_WAYS; k++) {
        size_t i = (first + k) % n;
        if (m->stacks[i].id == id)
            return &m->stacks[i];
        if (!m->stacks[i].id && (pick == n || m->stacks[pick].id))
            pick = i;                 /* a free one: the best */
        else if (!m->stacks[i].label && pick == n)
            pick = i;                 /* one without a site: the next best */
    }
    if (!make)
        return NULL;
    struct mstack *st = &m->stacks[pick == n ? first : pick];
    free(st->label);
    *st = (struct mstack){ .id = id };
    return st;
}

static void mt_frame(void *s, int64_t stack, int depth, uint64_t pc, const ls_sym *f, bool app)
{
    struct ls_metrics *m = s;
    (void)pc;
    if (stack <= 0)
        return;
    struct mstack *st = stack_entry(m, stack, false);
    if (!st || depth == 0) {
        if (st) {                     /* the same id again: stored anew */
            free(st->label);
            *st = (struct mstack){ .id = stack };
        } else
            st = stack_entry(m, stack, true);
    }
    if (st->done || !app)
        return;
    st->done = true;
    if (asprintf(&st->label, "%s %s:%d", f->function ? f->function : "?",
                 f->file ? f->file : "?", f->line) < 0)
        st->label = NULL;
}

/* Where an episode of pid at label (NULL: none) counts: its site, or the
 * process's "other"; NULL past every bound. */
static struct mcount *site_count(struct ls_metrics *m, uint32_t pid, const char *label)
{
    if (label) {
        for (size_t i = 0; i < m->nsites; i++)
            if (m->sites[i].pid == pid && !strcmp(m->sites[i].label, label))
                return &m->sites[i].n;
        char *copy = m->nsites < LS_METRICS_SITES ? strdup(label) : NULL;
        if (copy) {                   /* (a slot an ended process left: counts anew) */
            m->sites[m->nsites] = (struct msite){ .pid = pid, .label = copy };
            return &m->sites[m->nsites++].n;
        }
    }
    for (size_t i = 0; i < m->nother; i++)
        if (m->other[i].pid == pid)
            return &m->other[i].n;
    if (m->nother == LS_METRICS_OTHERS)
        return NULL;
    m->other[m->nother] = (struct mother){ .pid = pid };
    return &m->other[m->nother++].n;
}

static void mt_block(void *s, const ls_block_rec *b)
{
    struct ls_metrics *m = s;
    uint64_t dur = b->dur > 0 ? (uint64_t)b->dur : 0;
    struct mloop *l = loop_of(m, b->loop);
    if (l && b->kind >= 1 && b->kind <= 2) {
        l->blocks[b->kind]++;
        l->block_ns[b->kind] += dur;
    }
    struct mstack *st = b->stack > 0 ? stack_entry(m, b->stack, false) : NULL;
    struct mcount *c = site_count(m, l ? l->pid : 0, st ? st->label : NULL);
    if (c) {
        c->blocks++;
        c->block_ns += dur;
    }
}

static void mt_event(void *s, const ls_event *e)
{
    struct ls_metrics *m = s;
    if (e->kind == EVL_PROBE_ID_loop_start || e->kind == EVL_PROBE_ID_loop_stop)
        return;
    ls_replay_event(m->replay, e);
}

static void mt_free(void *s)
{
    struct ls_metrics *m = s;
    for (int i = 0; i < LS_METRICS_CLIENTS; i++) {
        if (m->c[i].fd >= 0)
            close(m->c[i].fd);
        free(m->c[i].out);
    }
    if (m->lfd >= 0)
        close(m->lfd);
    for (size_t i = 0; i < m->nsites; i++)
        free(m->sites[i].label);
    for (size_t i = 0; i < sizeof m->stacks / sizeof m->stacks[0]; i++)
        free(m->stacks[i].label);
    free(m->loops);
    ls_replay_free(m->replay);
    m->r->metrics = NULL;
    free(m);
}

/* A process of a group that ended: its series go (Prometheus marks them
 * stale), and its room with them. */
static void mt_process(void *s, const ls_proc_rec *p)
{
    struct ls_metrics *m = s;
    if (!p->ended)
        return;
    for (size_t i = 0; i < m->nloops;)
        if (m->loops[i].pid == p->pid)
            m->loops[i] = m->loops[--m->nloops];
        else
            i++;
    for (size_t i = 0; i < m->nsites;)
        if (m->sites[i].pid == p->pid) {
            free(m->sites[i].label);
            m->sites[i] = m->sites[--m->nsites];
        } else {
            i++;
        }
    for (size_t i = 0; i < m->nother;)
        if (m->other[i].pid == p->pid)
            m->other[i] = m->other[--m->nother];
        else
            i++;
}

static const ls_sink_ops metrics_sink = {
    .name = "metrics",
    .process = mt_process,
    .loop = mt_loop,
    .window = mt_window,
    .frame = mt_frame,
    .block = mt_block,
    .event = mt_event,
    .free = mt_free,
};

/* --------------------------------------------------------- the exposition */

/* A label value: backslash, double quote and newline escaped, other
 * control bytes as \xHH (the format allows any UTF-8; bytes that are not
 * are kept, Prometheus replaces them), at most cap bytes of input. */
static void put_label(FILE *f, const char *s, size_t cap)
{
    for (size_t i = 0; s && s[i] && i < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\')
            fputs("\\\\", f);
        else if (c == '"')
            fputs("\\\"", f);
        else if (c == '\n')
            fputs("\\n", f);
        else if (c < 0x20 || c == 0x7f)
            fprintf(f, "\\\\x%02x", c);
        else
            fputc(c, f);
    }
}

static void help(FILE *f, const char *name, const char *type, const char *text)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, text, name, type);
}

/* Tasks by state, per process: a task's loop gives its process (loops
 * sorted by id, each with its process's place in procs). */
struct loop_proc {
    uint64_t loop;
    int p;
};

struct task_count {
    struct loop_proc *lp;
    size_t nlp;
    uint64_t (*n)[8];                       /* [process][state] */
};

static int cmp_loop_proc(const void *a, const void *b)
{
    uint64_t x = ((const struct loop_proc *)a)->loop, y = ((const struct loop_proc *)b)->loop;
    return x < y ? -1 : x > y;
}

static void count_task(const ls_task *t, void *ctx)
{
    struct task_count *tc = ctx;
    if (t->done || t->state < 0 || t->state >= 8)
        return;
    struct loop_proc key = { t->loop, 0 };
    const struct loop_proc *lp = bsearch(&key, tc->lp, tc->nlp, sizeof key, cmp_loop_proc);
    if (lp)
        tc->n[lp->p][t->state]++;
}

/* The loop label: its id as its process knows it (a group adds its own
 * range to each process's ids: group.c); a generic loop's is its tid. */
static unsigned long long loop_label(const struct mloop *l)
{
    return (unsigned long long)(l->loop & ((1ull << 40) - 1));
}

static char *render(struct ls_metrics *m, size_t *len)
{
    recorder *procs[LS_METRICS_PROCS];
    int np = ls_recorder_procs(m->r, procs, LS_METRICS_PROCS);
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (!f)
        return NULL;
    help(f, "loopscope_target_info", "gauge",
         "A process recorded: its command name and the recorder's mode.");
    for (int p = 0; p < np; p++) {
        recorder *r = procs[p];
        char comm[64];
        ls_proc_comm(r->pid, comm, sizeof comm);
        fprintf(f, "loopscope_target_info{pid=\"%d\",comm=\"", (int)r->pid);
        put_label(f, comm, sizeof comm);
        fprintf(f, "\",mode=\"%s\",runtime=\"", r->dec && r->dec->tasks ? "libevl" : "generic");
        put_label(f, r->runtime, sizeof r->runtime);
        fputs("\"} 1\n", f);
    }

    help(f, "loopscope_loop_iteration_seconds", "histogram",
         "Busy time of each loop iteration (between two waits), generic mode.");
    for (size_t i = 0; i < m->nloops; i++) {
        const struct mloop *l = &m->loops[i];
        uint64_t cum = 0;
        char lab[64];
        snprintf(lab, sizeof lab, "pid=\"%u\",loop=\"%llu\"", l->pid, loop_label(l));
        for (int b = 0; b < LS_HIST_BUCKETS; b++) {
            cum += l->hist[b];
            fprintf(f, "loopscope_loop_iteration_seconds_bucket{%s,le=\"%.9g\"} %llu\n", lab,
                    (double)(2ull << b) / 1e9, (unsigned long long)cum);
        }
        fprintf(f, "loopscope_loop_iteration_seconds_bucket{%s,le=\"+Inf\"} %llu\n", lab,
                (unsigned long long)cum);
        fprintf(f, "loopscope_loop_iteration_seconds_sum{%s} %.9f\n", lab, l->busy_ns / 1e9);
        fprintf(f, "loopscope_loop_iteration_seconds_count{%s} %llu\n", lab,
                (unsigned long long)cum);
    }
    help(f, "loopscope_loop_wait_seconds_total", "counter",
         "Time loop threads spent waiting in their wait call (idle), generic mode.");
    for (size_t i = 0; i < m->nloops; i++)
        fprintf(f, "loopscope_loop_wait_seconds_total{pid=\"%u\",loop=\"%llu\"} %.9f\n",
                m->loops[i].pid, loop_label(&m->loops[i]), m->loops[i].wait_ns / 1e9);

    static const char *const kinds[3] = { NULL,
#define LS__KN(n, v, s) [v] = s,
        LS_BLOCKING_KIND_LIST(LS__KN)
#undef LS__KN
    };
    help(f, "loopscope_blocking_episodes_total", "counter",
         "Blocking episodes of loop threads, by kind.");
    for (size_t i = 0; i < m->nloops; i++)
        for (int k = 1; k <= 2; k++)
            fprintf(f, "loopscope_blocking_episodes_total{pid=\"%u\",loop=\"%llu\",kind=\"%s\"} "
                       "%llu\n", m->loops[i].pid, loop_label(&m->loops[i]), kinds[k],
                    (unsigned long long)m->loops[i].blocks[k]);
    help(f, "loopscope_blocking_seconds_total", "counter",
         "Time loop threads spent blocked in episodes, by kind.");
    for (size_t i = 0; i < m->nloops; i++)
        for (int k = 1; k <= 2; k++)
            fprintf(f, "loopscope_blocking_seconds_total{pid=\"%u\",loop=\"%llu\",kind=\"%s\"} "
                       "%.9f\n", m->loops[i].pid, loop_label(&m->loops[i]), kinds[k],
                    m->loops[i].block_ns[k] / 1e9);
    /* a site's two families: its episodes, then its time */
    static const char *const site_fam[2][2] = {
        { "loopscope_blocking_site_episodes_total",
          "Blocking episodes by call site (the innermost application frame); "
          "sites past the first 64 are site=\"other\"." },
        { "loopscope_blocking_site_seconds_total",
          "Time blocked by call site, as loopscope_blocking_site_episodes_total." },
    };
    for (int k = 0; k < 2; k++) {
        help(f, site_fam[k][0], "counter", site_fam[k][1]);
        for (size_t i = 0; i < m->nsites; i++) {
            fprintf(f, "%s{pid=\"%u\",site=\"", site_fam[k][0], m->sites[i].pid);
            put_label(f, m->sites[i].label, LS_METRICS_LABEL);
            if (k)
                fprintf(f, "\"} %.9f\n", m->sites[i].n.block_ns / 1e9);
            else
                fprintf(f, "\"} %llu\n", (unsigned long long)m->sites[i].n.blocks);
        }
        for (size_t i = 0; i < m->nother; i++)
            if (k)
                fprintf(f, "%s{pid=\"%u\",site=\"other\"} %.9f\n", site_fam[k][0],
                        m->other[i].pid, m->other[i].n.block_ns / 1e9);
            else
                fprintf(f, "%s{pid=\"%u\",site=\"other\"} %llu\n", site_fam[k][0],
                        m->other[i].pid, (unsigned long long)m->other[i].n.blocks);
    }

    uint64_t (*n)[8] = calloc((size_t)(np ? np : 1), sizeof *n);
    struct task_count tc = { calloc(m->nloops ? m->nloops : 1, sizeof *tc.lp), 0, n };
    for (size_t i = 0; tc.lp && i < m->nloops; i++)
        for (int p = 0; p < np; p++)
            if ((uint32_t)procs[p]->pid == m->loops[i].pid)
                tc.lp[tc.nlp++] = (struct loop_proc){ m->loops[i].loop, p };
    if (n && tc.lp) {
        qsort(tc.lp, tc.nlp, sizeof *tc.lp, cmp_loop_proc);
        ls_replay_each_task(m->replay, count_task, &tc);
    }
    free(tc.lp);
    help(f, "loopscope_tasks", "gauge",
         "Live tasks by state (libevl, and CPython asyncio's census), as last seen.");
    static const char *const states[] = { "created", "ready", "running", "suspended" };
    for (int p = 0; n && p < np; p++)
        for (int st = 0; st < 4; st++)
            fprintf(f, "loopscope_tasks{pid=\"%d\",state=\"%s\"} %llu\n", (int)procs[p]->pid,
                    states[st], (unsigned long long)n[p][st]);
    free(n);
    /* per process: what its recorder counted */
    struct { const char *name, *type, *help; } per[] = {
        { "loopscope_tasks_created_total", "counter", "Tasks made." },
        { "loopscope_tasks_finished_total", "counter", "Tasks ended." },
        { "loopscope_dropped_messages_total", "counter",
          "Messages the kernel side could not hand over (ring buffer full)." },
        { "loopscope_lost_records_total", "counter",
          "Records libevl's loops dropped while the recorder held every buffer they lend." },
        { "loopscope_rejected_total", "counter", "Malformed records or messages rejected." },
    };
    for (size_t k = 0; k < sizeof per / sizeof per[0]; k++) {
        help(f, per[k].name, per[k].type, per[k].help);
        for (int p = 0; p < np; p++) {
            recorder *r = procs[p];
            uint64_t v = k == 0 ? r->tasks_created : k == 1 ? r->tasks_finished
                       : k == 2 ? ls_stat(r, LS_STAT_DROPPED_MSGS)
                       : k == 3 ? (r->member ? 0 : ls_loop_lost(r))  /* its thread's table */
                       : r->rejected + r->rejected_msgs;
            fprintf(f, "%s{pid=\"%d\"} %llu\n", per[k].name, (int)r->pid, (unsigned long long)v);
        }
    }

    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    help(f, "loopscope_recorder_cpu_seconds_total", "counter", "The recorder's own CPU time.");
    fprintf(f, "loopscope_recorder_cpu_seconds_total %.6f\n",
            ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
                (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6);
    long pages = 0;
    FILE *sm = fopen("/proc/self/statm", "r");
    if (sm) {
        long size;
        if (fscanf(sm, "%ld %ld", &size, &pages) != 2)
            pages = 0;
        fclose(sm);
    }
    help(f, "loopscope_recorder_resident_bytes", "gauge", "The recorder's resident memory.");
    fprintf(f, "loopscope_recorder_resident_bytes %lld\n",
            (long long)pages * sysconf(_SC_PAGESIZE));
    help(f, "loopscope_metrics_scrapes_total", "counter", "Answers to GET /metrics so far.");
    fprintf(f, "loopscope_metrics_scrapes_total %llu\n", (unsigned long long)m->scrapes + 1);
    if (fclose(f)) {
        free(buf);
        return NULL;
    }
    return buf;
}

/* ------------------------------------------------------------------ HTTP */

static void client_close(struct mclient *c)
{
    if (c->fd >= 0)
        close(c->fd);
    free(c->out);
    *c = (struct mclient){ .fd = -1 };
}

/* The answer to a whole request in c->req. */
static void answer(struct ls_metrics *m, struct mclient *c)
{
    char *body = NULL;
    size_t blen = 0;
    int code = 200;
    const char *type = "text/plain; version=0.0.4; charset=utf-8";
    bool get = !strncmp(c->req, "GET ", 4), head = !strncmp(c->req, "HEAD ", 5);
    const char *path = c->req + (get ? 4 : 5);
    size_t plen = strcspn(path, " ?\r\n");
    if (!get && !head) {
        code = 405;
    } else if (plen == 8 && !strncmp(path, "/metrics", 8)) {
        body = render(m, &blen);
        if (!body)
            code = 500;
        else
            m->scrapes++;
    } else {
        code = 404;
    }
    if (code != 200) {
        type = "text/plain; charset=utf-8";
        body = strdup(code == 404 ? "not found: the metrics are at /metrics\n"
                      : code == 405 ? "only GET and HEAD\n" : "out of memory\n");
        blen = body ? strlen(body) : 0;
    }
    char *out = NULL;
    size_t olen = 0;
    FILE *f = open_memstream(&out, &olen);
    if (f) {
        fprintf(f, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
                   "Connection: close\r\n\r\n", code,
                code == 200 ? "OK" : code == 404 ? "Not Found"
                : code == 405 ? "Method Not Allowed" : "Internal Server Error", type, blen);
        if (body && !head)
            fwrite(body, 1, blen, f);
        if (fclose(f)) {
            free(out);
            out = NULL;
        }
    }
    free(body);
    if (!out) {
        client_close(c);
        return;
    }
    c->out = out;
    c->nout = olen;
    c->off = 0;
}

int ls_metrics_pollfds(recorder *r, struct pollfd *p, int max)
{
    struct ls_metrics *m = r->metrics;
    int n = 0;
    if (!m || max < 1 + LS_METRICS_CLIENTS)
        return 0;
    bool room = false;
    for (int i = 0; i < LS_METRICS_CLIENTS; i++) {
        struct mclient *c = &m->c[i];
        if (c->fd < 0) {
            room = true;
            continue;
        }
        p[n++] = (struct pollfd){ c->fd, c->out ? POLLOUT : POLLIN, 0 };
    }
    if (room)
        p[n++] = (struct pollfd){ m->lfd, POLLIN, 0 };
    return n;
}

void ls_metrics_io(recorder *r, int64_t now)
{
    struct ls_metrics *m = r->metrics;
    if (!m)
        return;
    for (int i = 0; i < LS_METRICS_CLIENTS; i++) {
        struct mclient *c = &m->c[i];
        if (c->fd < 0)
            continue;
        if (now - c->since > LS_METRICS_CLIENT_NS) {
            client_close(c);            /* too slow, whatever it did */
            continue;
        }
        if (!c->out) {
            ssize_t got = read(c->fd, c->req + c->nreq, sizeof c->req - 1 - c->nreq);
            if (got == 0 || (got < 0 && errno != EAGAIN && errno != EINTR)) {
                client_close(c);
                continue;
            }
            if (got > 0)
                c->nreq += (size_t)got;
            c->req[c->nreq] = 0;
            if (strstr(c->req, "\r\n\r\n") || strstr(c->req, "\n\n"))
                answer(m, c);
            else if (c->nreq == sizeof c->req - 1)
                client_close(c);        /* no end of headers in 2 KiB */
            if (c->fd < 0 || !c->out)
                continue;
        }
        ssize_t put = send(c->fd, c->out + c->off, c->nout - c->off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (put < 0 && errno != EAGAIN && errno != EINTR) {
            client_close(c);
            continue;
        }
        if (put > 0)
            c->off += (size_t)put;
        if (c->off == c->nout)
            client_close(c);            /* Connection: close */
    }
    for (int i = 0; i < LS_METRICS_CLIENTS; i++) {
        if (m->c[i].fd >= 0)
            continue;
        int fd = accept4(m->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            break;
        m->c[i] = (struct mclient){ .fd = fd, .since = now };
    }
}

/* [HOST:]PORT, HOST a name or an address ([v6] too); no HOST: 127.0.0.1. */
int ls_metrics_parse(const char *spec, char host[256], char port[16])
{
    const char *colon = strrchr(spec, ':');
    snprintf(host, 256, "127.0.0.1");
    if (colon) {
        size_t hl = (size_t)(colon - spec);
        if (hl >= 256 || !hl)
            return ls_error("invalid --metrics '%s' ([HOST:]PORT)", spec);
        memcpy(host, spec, hl);
        host[hl] = 0;
        if (hl >= 2 && host[0] == '[' && host[hl - 1] == ']') {
            memmove(host, host + 1, hl - 2);
            host[hl - 2] = 0;
        }
        spec = colon + 1;
    }
    char *end;
    long pn = strtol(spec, &end, 10);
    if (!*spec || *end || pn < 0 || pn > 65535)
        return ls_error("invalid --metrics port '%s' (0-65535)", spec);
    snprintf(port, 16, "%ld", pn);
    return 0;
}

int ls_metrics_start(recorder *r, const char *spec)
{
    char host[256], port[16];
    if (ls_metrics_parse(spec, host, port))
        return 1;
    struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                              .ai_flags = AI_PASSIVE | AI_NUMERICSERV }, *ai = NULL;
    int e = getaddrinfo(host, port, &hints, &ai);
    if (e)
        return ls_error("--metrics: cannot resolve '%s': %s", host, gai_strerror(e));
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 16)) {
        int err = errno;
        if (fd >= 0)
            close(fd);
        freeaddrinfo(ai);
        return ls_error("--metrics: cannot listen on %s port %s: %s", host, port, strerror(err));
    }
    freeaddrinfo(ai);
    struct ls_metrics *m = calloc(1, sizeof *m);
    ls_replay_ops ops = { .spans_only = true };
    if (!m || !(m->replay = ls_replay_new(&ops, LS_TASKS_MAX))) {
        free(m);
        close(fd);
        return ls_error("out of memory");
    }
    m->r = r;
    m->lfd = fd;
    for (int i = 0; i < LS_METRICS_CLIENTS; i++)
        m->c[i].fd = -1;
    r->metrics = m;
    if (ls_sink_add(r, &metrics_sink, m) < 0) {
        mt_free(m);
        return ls_error("out of memory");
    }
    /* the port it got (PORT 0: any) */
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    char hb[INET6_ADDRSTRLEN] = "?";
    int got = 0;
    if (!getsockname(fd, (struct sockaddr *)&sa, &sl)) {
        if (sa.ss_family == AF_INET) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)&sa)->sin_addr, hb, sizeof hb);
            got = ntohs(((struct sockaddr_in *)&sa)->sin_port);
        } else if (sa.ss_family == AF_INET6) {
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&sa)->sin6_addr, hb, sizeof hb);
            got = ntohs(((struct sockaddr_in6 *)&sa)->sin6_port);
        }
    }
    snprintf(m->url, sizeof m->url, "http://%s%s%s:%d/metrics", strchr(hb, ':') ? "[" : "", hb,
             strchr(hb, ':') ? "]" : "", got);
    return 0;
}

void ls_metrics_announce(recorder *r)
{
    if (r->metrics && !r->quiet)
        fprintf(stderr, "metrics: %s\n", r->metrics->url);
}
