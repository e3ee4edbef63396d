/*
 * group.c -- a process group's recording: `record -p PID,PID...`,
 * `--children`, `--cgroup PATH`, `--comm NAME`; one trace for them all.
 *
 * Each process is a member: a recorder of its own (its target, BPF
 * object, decoder, symbols, Python census: everything engine.c drives
 * for one process) run on a thread of its own, whose one sink is the
 * member sink below.  That sink moves the member's ids into a range of
 * their own -- loop, task and stack ids plus (k << LS_ID_SHIFT), k the
 * member's place in the group -- and hands each record to the group's
 * sinks (the trace) under the group's lock: the stages downstream see one
 * stream, the ids of two processes never meet, and `loops.pid` says whose
 * a loop is.  The group's thread finds the processes (the forks and execs
 * its members report, a cgroup's or a name's new processes), starts and
 * joins members, commits the store, and finishes the trace once, after
 * the last member.  Part of the recorder (recorder.h); the processes
 * table: SCHEMA.md.
 */
#define _GNU_SOURCE
#include "recorder.h"
#include "metrics.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/signalfd.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#define LS_GROUP_MAX 64           /* members in one recording; more are counted, not recorded */
#define LS_ID_SHIFT 40            /* a member's ids: its own + (k << 40) */
#define LS_SCAN_NS 500000000ll    /* --cgroup, --comm: looked at again this often */
#define LS_PENDING_MAX 256        /* forks and execs reported, not yet attached */
#define LS_MEMBER_RING_KB 8192    /* a member's ring buffer unless --ringbuf-kb */
#define LS_GROUP_KEYS 128         /* meta keys the group keeps (ours, not the target's) */
#define LS_TURN_MS 50             /* the group's thread looks around at least this often */

enum { M_RUNNING, M_ENDING, M_DONE, M_JOINED };

typedef struct ls_member {
    recorder r;                   /* its own recorder; r.member points back here */
    struct ls_group *g;
    uint32_t k;                   /* its place: the id range, processes.id */
    pid_t pid, parent;
    pthread_t th;
    _Atomic int state;
    bool ending;                  /* in ls_recorder_stop: its meta is its end's */
    bool exec;                    /* it exec'd: attached again as a new member */
    bool failed;                  /* could not be attached */
    _Atomic bool opened;          /* attached (or failed to be) */
    bool announced;               /* the group's thread said so */
    const char *why;
    int64_t attached, ended;
    char mode[16], runtime[128], binary[PATH_MAX];
} ls_member;

struct ls_pending {
    pid_t pid, parent;
};

typedef struct ls_group {
    recorder *r;                  /* the trace's: the options, the sinks */
    const struct ls_group_sel *sel;
    pthread_mutex_t mu;           /* the sinks, and everything below */
    ls_member *m[LS_GROUP_MAX];
    uint32_t n;
    uint64_t refused;             /* processes past LS_GROUP_MAX */
    uint64_t failed;              /* could not be attached (gone, not ours ...) */
    struct ls_pending pending[LS_PENDING_MAX];
    int npending;
    uint64_t pending_lost;
    /* meta: the keys written (the first member's value is the trace's),
     * and the counters summed over the members' end */
    char *keys[LS_GROUP_KEYS];
    int nkeys;
    char *sum_key[LS_GROUP_KEYS];
    uint64_t sum[LS_GROUP_KEYS];
    int nsum;
    bool any_generic;
} ls_group;

/* ---- the member sink: ids moved, the group's sinks under its lock */

static uint64_t rm(const ls_member *m, uint64_t id)
{
    return id ? id + ((uint64_t)m->k << LS_ID_SHIFT) : 0;
}

static int64_t rms(const ls_member *m, int64_t id)
{
    return id > 0 ? (int64_t)rm(m, (uint64_t)id) : id;
}

#define LOCKED(m, body)                                                        \
    do {                                                                       \
        ls_group *g_ = (m)->g;                                                 \
        pthread_mutex_lock(&g_->mu);                                           \
        recorder *gr = g_->r;                                                  \
        body;                                                                  \
        pthread_mutex_unlock(&g_->mu);                                         \
    } while (0)

static bool has_key(ls_group *g, const char *key)
{
    for (int i = 0; i < g->nkeys; i++)
        if (!strcmp(g->keys[i], key))
            return true;
    if (g->nkeys < LS_GROUP_KEYS)
        g->keys[g->nkeys++] = strdup(key);
    return false;
}

/* The trace's own end: not summed, written by the group. */
static bool group_key(const char *key)
{
    static const char *const own[] = {
        LS_META_END_NS, LS_META_END_UTC, LS_META_DURATION_NS, LS_META_STOP_REASON,
        LS_META_START_NS, LS_META_START_UTC, LS_META_MODE, LS_META_RECORDER_PRIORITY,
        LS_META_PRIORITY_RAISES,
    };
    for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++)
        if (!strcmp(own[i], key))
            return true;
    return false;
}

static void add_sum(ls_group *g, const char *key, const char *value)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(value, &end, 10);
    if (!*value || *end || errno || !isdigit((unsigned char)*value))
        return;
    for (int i = 0; i < g->nsum; i++)
        if (!strcmp(g->sum_key[i], key)) {
            g->sum[i] += v;
            return;
        }
    if (g->nsum < LS_GROUP_KEYS && (g->sum_key[g->nsum] = strdup(key)))
        g->sum[g->nsum++] = v;
}

/* A member's meta: its mode, runtime and binary go to its processes row;
 * at its start, a key no member wrote before becomes the trace's (so the
 * trace describes the first process, and the processes table each one);
 * at its end, the counters are summed into the trace's. */
static void mb_meta(void *s, const char *key, const char *value)
{
    ls_member *m = s;
    if (!strcmp(key, LS_META_MODE))
        snprintf(m->mode, sizeof(m->mode), "%s", value);
    else if (!strcmp(key, LS_META_RUNTIME))
        snprintf(m->runtime, sizeof(m->runtime), "%s", value);
    else if (!strcmp(key, LS_META_TARGET_BINARY))
        snprintf(m->binary, sizeof(m->binary), "%s", value);
    LOCKED(m, {
        if (!strcmp(key, LS_META_MODE) && !strcmp(value, "generic"))
            g_->any_generic = true;
        if (group_key(key))
            ;
        else if (m->ending)
            add_sum(g_, key, value);
        else if (!has_key(g_, key))
            ls_sink_meta(gr, key, "%s", value);
    });
}

static void mb_loop(void *s, uint64_t loop, uint32_t pid, uint32_t tid, int64_t seen)
{
    ls_member *m = s;
    LOCKED(m, ls_sink_loop(gr, rm(m, loop), pid, tid, seen));
}

static void mb_loop_stop(void *s, uint64_t loop, int64_t stopped)
{
    ls_member *m = s;
    LOCKED(m, ls_sink_loop_stop(gr, rm(m, loop), stopped));
}

static void mb_task(void *s, const ls_task_rec *t)
{
    ls_member *m = s;
    ls_task_rec c = *t;
    c.task = rm(m, t->task);
    c.loop = rm(m, t->loop);
    c.parent = rm(m, t->parent);
    LOCKED(m, ls_sink_task(gr, &c));
}

static void mb_task_unknown(void *s, uint64_t task, uint64_t loop)
{
    ls_member *m = s;
    LOCKED(m, ls_sink_task_unknown(gr, rm(m, task), rm(m, loop)));
}

static void mb_task_named(void *s, uint64_t task, uint64_t loop, const char *name, size_t len)
{
    ls_member *m = s;
    LOCKED(m, ls_sink_task_named(gr, rm(m, task), rm(m, loop), name, len));
}

static void mb_task_leak(void *s, uint64_t task, int kind)
{
    ls_member *m = s;
    LOCKED(m, ls_sink_task_leak(gr, rm(m, task), kind));
}

static void mb_task_finish(void *s, uint64_t task, uint64_t loop, int64_t ended, int state,
                           int64_t error)
{
    ls_member *m = s;
    LOCKED(m, ls_sink_task_finish(gr, rm(m, task), rm(m, loop), ended, state, error));
}

/* An event's arguments that are task ids (SCHEMA.md, "events"). */
static void mb_event(void *s, const ls_event *e)
{
    ls_member *m = s;
    ls_event c = *e;
    c.loop = rm(m, e->loop);
    c.task = rm(m, e->task);
    switch (e->kind) {
    case EVL_PROBE_ID_task_create:
    case EVL_PROBE_ID_task_wake:
    case EVL_PROBE_ID_task_cancel:
        c.arg0 = rms(m, e->arg0);
        break;
    case EVL_PROBE_ID_task_suspend:
        if (e->reason == EVL_SUSPEND_TASK)
            c.arg0 = rms(m, e->arg0);
        else if (e->reason == EVL_SUSPEND_LOCK)
            c.arg1 = rms(m, e->arg1);
        break;
    }
    LOCKED(m, ls_sink_event(gr, &c));   /* its rowid: the group's count */
}

static void mb_window(void *s, uint64_t loop, const struct ls_window *w)
{
    ls_member *m = s;
    LOCKED(m, ls_sink_window(gr, rm(m, loop), w));
}

static void mb_hist(void *s, uint64_t loop, int64_t lo, int64_t hi, uint64_t count,
                    uint64_t busy_ns)
{
    ls_member *m = s;
    LOCKED(m, ls_sink_hist(gr, rm(m, loop), lo, hi, count, busy_ns));
}

static void mb_frame(void *s, int64_t stack, int depth, uint64_t pc, const ls_sym *f, bool app)
{
    ls_member *m = s;
    LOCKED(m, ls_sink_frame_app(gr, rms(m, stack), depth, pc, f, app));
}

static void mb_stack(void *s, int64_t stack, int depth)
{
    ls_member *m = s;
    LOCKED(m, ls_sink_stack(gr, rms(m, stack), depth));
}

static void mb_block(void *s, const ls_block_rec *b)
{
    ls_member *m = s;
    ls_block_rec c = *b;
    c.loop = rm(m, b->loop);
    c.task = rm(m, b->task);
    c.stack = rms(m, b->stack);
    LOCKED(m, ls_sink_block(gr, &c));
}

static void mb_await_stack(void *s, uint64_t task, int64_t ts, int64_t stack)
{
    ls_member *m = s;
    LOCKED(m, ls_sink_await_stack(gr, rm(m, task), ts, rms(m, stack)));
}

static void mb_syscall_stat(void *s, uint64_t loop, uint32_t tid, uint32_t nr, uint64_t count,
                            uint64_t total_ns, uint64_t max_ns)
{
    ls_member *m = s;
    LOCKED(m, ls_sink_syscall_stat(gr, rm(m, loop), tid, nr, count, total_ns, max_ns));
}

/* Its end is the member's, not the trace's: the group ends the trace. */
static const ls_sink_ops member_sink = {
    .name = "group member",
    .meta = mb_meta,
    .loop = mb_loop,
    .loop_stop = mb_loop_stop,
    .task = mb_task,
    .task_unknown = mb_task_unknown,
    .task_named = mb_task_named,
    .task_leak = mb_task_leak,
    .task_finish = mb_task_finish,
    .event = mb_event,
    .window = mb_window,
    .hist = mb_hist,
    .frame = mb_frame,
    .stack = mb_stack,
    .block = mb_block,
    .await_stack = mb_await_stack,
    .syscall_stat = mb_syscall_stat,
};

/* ---- members */

/* Its processes row, as it stands (under the group's lock). */
static void proc_row(ls_member *m)
{
    ls_proc_rec p = { .id = m->k, .pid = (uint32_t)m->pid, .parent = (uint32_t)m->parent,
                      .binary = m->binary[0] ? m->binary : NULL,
                      .mode = m->mode[0] ? m->mode : NULL,
                      .runtime = m->runtime[0] ? m->runtime : NULL,
                      .attached = m->attached, .ended = m->ended,
                      .end_reason = m->ended ? m->why : NULL };
    ls_sink_process(m->g->r, &p);
}

static bool exe_of(pid_t pid, char *buf, size_t len)
{
    char p[64];
    snprintf(p, sizeof(p), "/proc/%d/exe", (int)pid);
    ssize_t n = readlink(p, buf, len - 1);
    if (n <= 0)
        return false;
    buf[n] = 0;
    return true;
}

/* A member's thread: the engine's lifecycle for its one process. */
static void *member_main(void *arg)
{
    ls_member *m = arg;
    recorder *r = &m->r;
    const char *why = "recording stopped";
    char exe0[PATH_MAX] = "", exe1[PATH_MAX] = "";
    exe_of(m->pid, exe0, sizeof(exe0));
    int err = ls_recorder_open(r);
    if (!err) {                       /* its row, once its meta named it */
        pthread_mutex_lock(&m->g->mu);
        proc_row(m);
        pthread_mutex_unlock(&m->g->mu);
    }
    atomic_store(&m->opened, true);
    /* exec'd while it was being attached: its programs see the old image */
    if (!err && exe_of(m->pid, exe1, sizeof(exe1)) && exe0[0] && strcmp(exe0, exe1)) {
        m->exec = true;
        atomic_store(&r->stop_req, true);
        r->stop_why = "exec'd";
    }
    if (err) {
        m->failed = true;
        why = kill(m->pid, 0) < 0 && errno == ESRCH ? "exited before it was attached"
                                                      : "could not be attached";
    } else {
        err = ls_recorder_run(r, &why);
        m->ending = true;
        err = ls_recorder_stop(r, err, why);
    }
    m->why = why;
    pthread_mutex_lock(&m->g->mu);
    m->ended = ls_now();
    if (!m->failed)
        proc_row(m);
    atomic_store(&m->state, M_ENDING);  /* no longer among ls_recorder_procs' */
    pthread_mutex_unlock(&m->g->mu);
    ls_recorder_free(r);
    atomic_store(&m->state, M_DONE);
    return NULL;
}

/* Is pid a running member? (under the lock) */
static bool is_member(ls_group *g, pid_t pid)
{
    for (uint32_t i = 0; i < g->n; i++)
        if (g->m[i]->pid == pid && atomic_load(&g->m[i]->state) == M_RUNNING &&
            !g->m[i]->exec)
            return true;
    return false;
}

/* Attach to pid as the next member (under the lock). */
static void member_start(ls_group *g, pid_t pid, pid_t parent)
{
    if (is_member(g, pid))
        return;
    if (g->n == LS_GROUP_MAX) {
        g->refused++;
        return;
    }
    ls_member *m = calloc(1, sizeof(*m));
    if (!m) {
        g->failed++;
        return;
    }
    recorder *t = g->r, *r = &m->r;
    /* the options, none of the state */
    *r = (recorder){ .pid = pid, .duration = 0, .no_batch = t->no_batch, .mode = t->mode,
                     .wait_calls = t->wait_calls, .wait_raw = t->wait_raw, .quiet = true,
                     .ringbuf_kb = t->ringbuf_kb, .block_threshold_ms = t->block_threshold_ms,
                     .no_blocking = t->no_blocking, .syscalls = t->syscalls,
                     .threshold_given = t->threshold_given, .argc = t->argc, .argv = t->argv,
                     .census_ms = t->census_ms, .task_probe_rate = t->task_probe_rate,
                     .priority_given = t->priority_given, .no_tasks = t->no_tasks,
                     .priority = t->priority, .pidfd = -1, .go_pipe = -1, .member = m,
                     .watch_procs = g->sel->children };
    m->g = g;
    m->k = g->n;
    m->pid = pid;
    m->parent = parent;
    m->attached = ls_now();
    if (ls_sink_add(r, &member_sink, m)) {
        free(m);
        g->failed++;
        return;
    }
    g->m[g->n++] = m;
    atomic_store(&m->state, M_RUNNING);
    if (pthread_create(&m->th, NULL, member_main, m)) {
        m->failed = true;
        m->why = "no thread";
        atomic_store(&m->state, M_DONE);
        ls_sinks_free(r);
    }
}

/* A member forked or exec'd (ingest.c, on its thread). */
void ls_group_proc(recorder *r, uint32_t kind, uint32_t pid)
{
    ls_member *m = r->member;
    if (kind == LS_PROC_EXEC) {       /* attached again, as what it runs now */
        m->exec = true;
        r->stop_why = "exec'd";
        atomic_store(&r->stop_req, true);
        return;
    }
    if (kind != LS_PROC_FORK || !pid || pid > INT_MAX)
        return;
    pthread_mutex_lock(&m->g->mu);
    ls_group *g = m->g;
    if (g->npending < LS_PENDING_MAX)
        g->pending[g->npending++] = (struct ls_pending){ (pid_t)pid, m->pid };
    else
        g->pending_lost++;
    pthread_mutex_unlock(&m->g->mu);
}

int ls_recorder_procs(recorder *r, recorder **out, int max)
{
    ls_group *g = r->group;
    if (!g) {
        out[0] = r;
        return max > 0;
    }
    int n = 0;
    for (uint32_t i = 0; i < g->n && n < max; i++)
        if (atomic_load(&g->m[i]->state) == M_RUNNING && atomic_load(&g->m[i]->opened) &&
            !g->m[i]->failed)
            out[n++] = &g->m[i]->r;
    return n;
}

/* ---- finding processes */

static pid_t parse_pid(const char *s)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    return *s && !*end && !errno && v > 0 && v <= INT_MAX ? (pid_t)v : 0;
}

/* pid's children, and theirs (--children at the start): attached. */
static void add_descendants(ls_group *g, pid_t pid, int depth)
{
    char path[96];
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = depth < 16 ? opendir(path) : NULL;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        pid_t tid = parse_pid(e->d_name);
        if (!tid)
            continue;
        char cp[96];
        snprintf(cp, sizeof(cp), "/proc/%d/task/%d/children", (int)pid, (int)tid);
        FILE *f = fopen(cp, "re");
        long c;
        while (f && fscanf(f, "%ld", &c) == 1)
            if (c > 0 && c <= INT_MAX && !is_member(g, (pid_t)c)) {
                member_start(g, (pid_t)c, pid);
                add_descendants(g, (pid_t)c, depth + 1);
            }
        if (f)
            fclose(f);
    }
    if (d)
        closedir(d);
}

/* --cgroup: its processes now (false: the cgroup is gone). */
static bool scan_cgroup(ls_group *g)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/cgroup.procs", g->sel->cgroup);
    FILE *f = fopen(path, "re");
    if (!f)
        return false;
    long p;
    while (fscanf(f, "%ld", &p) == 1)
        if (p > 0 && p <= INT_MAX && (pid_t)p != getpid())
            member_start(g, (pid_t)p, 0);
    fclose(f);
    return true;
}

/* --comm: every process of that name now (ours excepted). */
static void scan_comm(ls_group *g)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        pid_t pid = parse_pid(e->d_name);
        if (!pid || pid == getpid())
            continue;
        char path[64], comm[64];
        snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
        FILE *f = fopen(path, "re");
        size_t n = f ? fread(comm, 1, sizeof(comm) - 1, f) : 0;
        if (f)
            fclose(f);
        if (n && comm[n - 1] == '\n')
            n--;
        comm[n] = 0;
        if (n && !strcmp(comm, g->sel->comm))
            member_start(g, pid, 0);
    }
    if (d)
        closedir(d);
}

/* Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or
 * /sys/fs/cgroup/unified beside v1's), from our mountinfo. */
static bool cgroup2_root(char *out, size_t len)
{
    FILE *f = fopen("/proc/self/mountinfo", "re");
    char line[4096];
    bool found = false;
    while (!found && f && fgets(line, sizeof(line), f)) {
        char mnt[PATH_MAX];
        const char *dash = strstr(line, " - cgroup2 ");
        if (dash && sscanf(line, "%*s %*s %*s %*s %4095s", mnt) == 1 && strlen(mnt) < len) {
            memcpy(out, mnt, strlen(mnt) + 1);
            found = true;
        }
    }
    if (f)
        fclose(f);
    return found;
}

/* A cgroup: a directory of a cgroup file system (v2, or a v1 hierarchy),
 * given as its path, or from the v2 hierarchy's root (system.slice/x.service). */
static int resolve_cgroup(const char *arg, char *out, size_t len)
{
    char p[PATH_MAX], root[PATH_MAX];
    struct statfs sf;
    if (arg[0] == '/' && statfs(arg, &sf) == 0)
        snprintf(p, sizeof(p), "%s", arg);
    else if (cgroup2_root(root, sizeof(root)))
        snprintf(p, sizeof(p), "%s/%s", root, arg[0] == '/' ? arg + 1 : arg);
    else
        return ls_error("no cgroup '%s': no cgroup v2 hierarchy is mounted", arg);
    if (statfs(p, &sf) != 0)
        return ls_error("no cgroup '%s': %s: %s", arg, p, strerror(errno));
    if (sf.f_type != CGROUP2_SUPER_MAGIC && sf.f_type != CGROUP_SUPER_MAGIC)
        return ls_error("no cgroup '%s': %s is not on a cgroup file system", arg, p);
    char procs[PATH_MAX + 16];
    snprintf(procs, sizeof(procs), "%s/cgroup.procs", p);
    if (access(procs, R_OK) != 0)
        return ls_error("no cgroup '%s': cannot read %s: %s", arg, procs, strerror(errno));
    if (strlen(p) >= len)
        return ls_error("cgroup path too long: '%s'", arg);
    memcpy(out, p, strlen(p) + 1);
    return 0;
}

/* ---- the group's thread */

static void group_end_meta(ls_group *g, const char *why, int64_t end)
{
    recorder *r = g->r;
    time_t wall = time(NULL) - (time_t)((ls_now() - end) / 1000000000ll);
    char iso[64];
    strftime(iso, sizeof(iso), "%Y-%m-%dT%H:%M:%SZ", gmtime(&wall));
    ls_sink_meta(r, LS_META_START_NS, "%lld", (long long)r->start_ns);
    ls_sink_meta(r, LS_META_MODE, "%s", g->any_generic ? "generic" : "libevl");
    ls_sink_meta(r, LS_META_END_NS, "%lld", (long long)end);
    ls_sink_meta(r, LS_META_END_UTC, "%s", iso);
    ls_sink_meta(r, LS_META_DURATION_NS, "%lld", (long long)(end - r->start_ns));
    ls_sink_meta(r, LS_META_STOP_REASON, "%s", why);
    for (int i = 0; i < g->nsum; i++)
        ls_sink_meta(r, g->sum_key[i], "%llu", (unsigned long long)g->sum[i]);
    uint32_t recorded = 0;
    for (uint32_t i = 0; i < g->n; i++)
        recorded += !g->m[i]->failed;
    ls_sink_meta(r, LS_META_PROCESSES, "%u", recorded);
    ls_sink_meta(r, LS_META_PROCESSES_UNRECORDED, "%llu",
                 (unsigned long long)(g->refused + g->failed + g->pending_lost));
}

static void stop_all(ls_group *g, const char *why)
{
    for (uint32_t i = 0; i < g->n; i++)
        if (atomic_load(&g->m[i]->state) == M_RUNNING) {
            g->m[i]->r.stop_why = why;
            atomic_store(&g->m[i]->r.stop_req, true);
        }
}

/* Join the members that are done (one that exec'd is attached again
 * unless restart is false); how many still run. */
static uint32_t reap(ls_group *g, bool restart)
{
    uint32_t running = 0;
    for (uint32_t i = 0; i < g->n; i++) {
        ls_member *m = g->m[i];
        int st = atomic_load(&m->state);
        if (st == M_DONE) {
            if (m->th)
                pthread_join(m->th, NULL);
            atomic_store(&m->state, M_JOINED);
            if (m->failed) {
                g->failed++;
                if (!g->r->quiet)
                    fprintf(stderr, "%spid %d: not recorded: %s\n", isatty(2) ? "\r" : "",
                            (int)m->pid, m->why);
            }
            if (m->exec && restart && kill(m->pid, 0) == 0) {
                pthread_mutex_lock(&g->mu);
                m->exec = false;      /* so that is_member lets it in again */
                member_start(g, m->pid, m->parent);
                pthread_mutex_unlock(&g->mu);
            }
        } else if (st == M_RUNNING) {
            running++;
        }
    }
    return running;
}

/* Each member attached since the last call: a line (tests wait for it). */
static void announce(ls_group *g, bool tty)
{
    for (uint32_t i = 0; i < g->n; i++) {
        ls_member *m = g->m[i];
        if (m->announced || !atomic_load(&m->opened))
            continue;
        m->announced = true;
        if (g->r->quiet || m->failed)
            continue;
        char parent[48] = "";
        if (m->parent)
            snprintf(parent, sizeof(parent), ", forked by %d", (int)m->parent);
        fprintf(stderr, "%spid %d: recording (%s%s%s%s)\n", tty ? "\r" : "", (int)m->pid,
                m->binary, m->mode[0] ? ", " : "", m->mode, parent);
    }
}

static void print_group_status(ls_group *g, int64_t now, uint32_t running)
{
    uint64_t loops = 0, blocks = 0;
    for (uint32_t i = 0; i < g->n; i++)
        if (atomic_load(&g->m[i]->state) == M_RUNNING) {
            loops += g->m[i]->r.nloops;
            blocks += g->m[i]->r.blocks;
        }
    fprintf(stderr, "\r%.0f s: %u processes recorded (%u running), %llu loops, %llu blocking "
                    "episodes in the running ones   ", (now - g->r->start_ns) / 1e9, g->n,
            running, (unsigned long long)loops, (unsigned long long)blocks);
}

int ls_group_record(recorder *r, const struct ls_group_sel *sel, const char **why)
{
    char errbuf[512], cg[PATH_MAX];
    int err;
    *why = "every process exited";
    if ((err = ls_check_privileges()))
        return err;
    if (sel->cgroup && (err = resolve_cgroup(sel->cgroup, cg, sizeof(cg))))
        return err;
    for (int i = 0; i < sel->npids; i++)
        if (kill(sel->pids[i], 0) < 0 && errno == ESRCH)
            return ls_error("no process with pid %d", (int)sel->pids[i]);
    if (ls_store_check(r->out, r->force, errbuf, sizeof(errbuf)) < 0)
        return ls_error("%s", errbuf);
    struct ls_group_sel s2 = *sel;
    if (sel->cgroup)
        s2.cgroup = cg;
    ls_group *g = calloc(1, sizeof(*g));
    if (!g)
        return ls_error("out of memory");
    g->r = r;
    r->group = g;
    g->sel = &s2;
    pthread_mutex_init(&g->mu, NULL);
    if (!r->ringbuf_given)
        r->ringbuf_kb = LS_MEMBER_RING_KB;
    r->store = ls_store_create(r->out, r->force, errbuf, sizeof(errbuf));
    if (!r->store) {
        free(g);
        return ls_error("%s", errbuf);
    }
    if ((err = ls_sink_add(r, &ls_store_sink, r->store))) {
        ls_store_abort(r->store);
        free(g);
        return err;
    }
    if (r->metrics_addr && (err = ls_metrics_start(r, r->metrics_addr))) {
        ls_sinks_free(r);
        ls_store_abort(r->store);
        r->store = NULL;
        free(g);
        return err;
    }
    r->start_ns = ls_now();
    /* The members' threads take no signal: the group's thread stops them. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    /* SIGINT, SIGTERM and SIGHUP are taken with sigtimedwait below, never
     * by a handler (the members' engines install one): blocked here from
     * now on, and every signal while members are started (their threads
     * inherit that) */
    sigset_t run = old;
    sigaddset(&run, SIGINT);
    sigaddset(&run, SIGTERM);
    sigaddset(&run, SIGHUP);
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < sel->npids; i++) {
        member_start(g, sel->pids[i], 0);
        if (sel->children)
            add_descendants(g, sel->pids[i], 0);
    }
    bool cgroup_ok = !sel->cgroup || scan_cgroup(g);
    if (sel->comm)
        scan_comm(g);
    if (sel->children && sel->cgroup)
        for (uint32_t i = 0; i < g->n; i++)
            add_descendants(g, g->m[i]->pid, 0);
    uint32_t started = g->n;
    pthread_mutex_unlock(&g->mu);
    pthread_sigmask(SIG_SETMASK, &run, NULL);
    /* the first line once every process found so far is attached */
    for (bool ready = false; !ready;) {
        ready = true;
        for (uint32_t i = 0; i < started; i++)
            ready = ready && atomic_load(&g->m[i]->opened);
        if (!ready)
            usleep(5000);
    }
    if (!started) {
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        ls_sinks_free(r);
        ls_store_abort(r->store);
        r->store = NULL;
        free(g);
        return ls_error("no process matches %s%s%s", sel->cgroup ? "cgroup " : "comm ",
                        sel->cgroup ? sel->cgroup : sel->comm,
                        cgroup_ok ? "" : " (it is gone)");
    }
    if (!r->quiet)
        fprintf(stderr, "recording a process group (%u process%s%s%s%s) into '%s'%s\n", started,
                started == 1 ? "" : "es", sel->children ? "; their children too" : "",
                sel->cgroup ? "; cgroup " : "", sel->cgroup ? cg : "", r->out,
                isatty(2) ? "; Ctrl-C to stop" : "");
    announce(g, isatty(2) && !r->quiet);
    ls_metrics_announce(r);

    sigset_t stop_set;
    sigemptyset(&stop_set);
    sigaddset(&stop_set, SIGINT);
    sigaddset(&stop_set, SIGTERM);
    sigaddset(&stop_set, SIGHUP);
    int sfd = signalfd(-1, &stop_set, SFD_NONBLOCK | SFD_CLOEXEC);
    int64_t deadline = r->duration > 0 ? r->start_ns + (int64_t)(r->duration * 1e9) : 0;
    int64_t last_scan = ls_now(), last_status = r->start_ns;
    bool stopping = false, tty = !r->quiet && isatty(2);
    const char *stop_why = NULL;
    for (;;) {
        /* a stop signal, a metrics client, or the next turn */
        struct pollfd pfd[1 + 16] = { { sfd, POLLIN, 0 } };
        pthread_mutex_lock(&g->mu);
        nfds_t nfd = 1 + (nfds_t)ls_metrics_pollfds(r, pfd + 1, 16);
        pthread_mutex_unlock(&g->mu);
        poll(pfd, nfd, LS_TURN_MS);
        struct signalfd_siginfo si;
        int sig = read(sfd, &si, sizeof si) == (ssize_t)sizeof si ? (int)si.ssi_signo : 0;
        int64_t now = ls_now();
        if (r->metrics) {
            pthread_mutex_lock(&g->mu);
            ls_metrics_io(r, now);    /* never blocks */
            pthread_mutex_unlock(&g->mu);
        }
        if (!stopping && sig > 0) {
            stop_why = sig == SIGINT ? "interrupted (SIGINT)" : "terminated by signal";
        } else if (!stopping && deadline && now >= deadline) {
            stop_why = "duration reached";
        }
        if (stop_why && !stopping) {
            stopping = true;
            *why = stop_why;
            pthread_mutex_lock(&g->mu);
            stop_all(g, stop_why);
            pthread_mutex_unlock(&g->mu);
        }
        if (!stopping) {
            pthread_sigmask(SIG_BLOCK, &all, NULL);  /* new threads: no signals */
            pthread_mutex_lock(&g->mu);
            for (int i = 0; i < g->npending; i++)
                member_start(g, g->pending[i].pid, g->pending[i].parent);
            g->npending = 0;
            if (now - last_scan >= LS_SCAN_NS) {
                last_scan = now;
                if (sel->cgroup && !scan_cgroup(g) && cgroup_ok) {
                    cgroup_ok = false;
                    if (!r->quiet)
                        fprintf(stderr, "%scgroup %s is gone\n", tty ? "\r" : "", cg);
                }
                if (sel->comm)
                    scan_comm(g);
            }
            pthread_mutex_unlock(&g->mu);
            pthread_sigmask(SIG_SETMASK, &run, NULL);
        }
        announce(g, tty);
        pthread_mutex_lock(&g->mu);
        if (ls_store_tick(r->store, now) < 0 && !stopping) {
            stop_why = "writing the trace failed";
            *why = stop_why;
            stopping = true;
            fprintf(stderr, "%serror: writing '%s' failed: %s\n", tty ? "\r" : "", r->out,
                    ls_store_error(r->store));
            stop_all(g, stop_why);
        }
        pthread_mutex_unlock(&g->mu);
        pthread_sigmask(SIG_BLOCK, &all, NULL);      /* a member attached again */
        uint32_t running = reap(g, !stopping);
        pthread_sigmask(SIG_SETMASK, &run, NULL);
        /* Only a selection that can match new processes keeps waiting. */
        bool can_grow = !stopping && (sel->comm || (sel->cgroup && cgroup_ok));
        if (!running && !can_grow) {
            pthread_mutex_lock(&g->mu);
            bool more = g->npending > 0 && !stopping;
            pthread_mutex_unlock(&g->mu);
            if (!more)
                break;
        }
        if (tty && now - last_status >= 1000000000ll) {
            last_status = now;
            print_group_status(g, now, running);
        }
    }
    close(sfd);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (tty)
        fputc('\n', stderr);
    int64_t end = ls_now();
    group_end_meta(g, *why, end);
    err = ls_sinks_end(r, end);
    r->store = NULL;
    r->trace_done = !err;
    if (!r->quiet || g->refused || g->failed)
        fprintf(stderr, "recorded %u process%s into '%s' (%s)%s%s\n", g->n,
                g->n == 1 ? "" : "es", r->out, *why,
                g->refused ? "; more processes than a group records (" : "",
                g->refused ? "64): the rest were not recorded" : "");
    for (uint32_t i = 0; i < g->n; i++)
        free(g->m[i]);
    for (int i = 0; i < g->nkeys; i++)
        free(g->keys[i]);
    for (int i = 0; i < g->nsum; i++)
        free(g->sum_key[i]);
    ls_sinks_free(r);
    pthread_mutex_destroy(&g->mu);
    free(g);
    return err;
}
