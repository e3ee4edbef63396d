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
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>

#define LS_GROUP_MAX 64           /* members in one recording; more are counted, not recorded */
#define LS_ID_SHIFT 40            /* a member's ids: its own + (k << 40) */
#define LS_SCAN_NS 500000000ll    /* --cgroup, --comm: looked at again this often */
#define LS_LOOPS_SCAN_NS 2000000000ll  /* --loops: every process's threads, this often */
#define LS_LOOPS_THREADS 256      /* --loops: the threads of a process looked at */
#define LS_PENDING_MAX 256        /* forks and execs reported, not yet attached */
#define LS_MEMBER_RING_KB 8192    /* a member's ring buffer unless --ringbuf-kb */
#define LS_GROUP_KEYS 128         /* meta keys the group keeps (ours, not the target's) */
#define LS_REFUSED_MAX 256        /* processes remembered as not attachable */
#define LS_CAP_NS 1000000000ll    /* the agent's directory looked at this often */
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
    char *out;                    /* the agent: its flight traces' name */
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
    ls_member *m[LS_GROUP_MAX];   /* the members not joined yet */
    uint32_t n;
    uint32_t next_k;              /* the next member's place (never reused) */
    uint64_t recorded;            /* members attached */
    uint64_t refused;             /* processes past LS_GROUP_MAX at once */
    uint64_t failed;              /* could not be attached (gone, not ours ...) */
    /* processes that could not be attached (pid and start time, a ring):
     * not tried again at each scan */
    struct { pid_t pid; unsigned long long start; } refusedp[LS_REFUSED_MAX];
    unsigned nrefusedp;
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
    if (!m->failed) {
        proc_row(m);
        m->g->recorded++;
    }
    atomic_store(&m->state, M_ENDING);  /* no longer among ls_recorder_procs' */
    pthread_mutex_unlock(&m->g->mu);
    ls_recorder_free(r);
    atomic_store(&m->state, M_DONE);
    return NULL;
}

/* Is pid a member that has not ended? (under the lock) */
static bool is_member(ls_group *g, pid_t pid)
{
    for (uint32_t i = 0; i < g->n; i++)
        if (g->m[i]->pid == pid && atomic_load(&g->m[i]->state) == M_RUNNING &&
            !g->m[i]->exec)
            return true;
    return false;
}

/* pid, as started at start, could not be attached before. */
static bool was_refused(ls_group *g, pid_t pid, unsigned long long start)
{
    unsigned n = g->nrefusedp < LS_REFUSED_MAX ? g->nrefusedp : LS_REFUSED_MAX;
    for (unsigned i = 0; i < n; i++)
        if (g->refusedp[i].pid == pid && g->refusedp[i].start == start)
            return true;
    return false;
}

/* Attach to pid as the next member (under the lock). */
static void member_start(ls_group *g, pid_t pid, pid_t parent)
{
    char state;
    unsigned long long start = 0;
    if (is_member(g, pid) || !ls_proc_stat(pid, &state, &start) ||
        was_refused(g, pid, start))
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
                     .wait_calls = t->wait_calls, .wait_hook = t->wait_hook, .quiet = true,
                     .ringbuf_kb = t->ringbuf_kb, .block_threshold_ms = t->block_threshold_ms,
                     .no_blocking = t->no_blocking, .syscalls = t->syscalls,
                     .threshold_given = t->threshold_given, .argc = t->argc, .argv = t->argv,
                     .census_ms = t->census_ms, .task_probe_rate = t->task_probe_rate,
                     .priority_given = t->priority_given, .no_tasks = t->no_tasks,
                     .priority = t->priority, .pidfd = -1, .go_pipe = -1, .member = m,
                     .watch_procs = g->sel->children,
                     .flight_window_ns = t->flight_window_ns, .flight_tail_ns = t->flight_tail_ns,
                     .flight_memory = t->flight_memory, .trig_block_ns = t->trig_block_ns,
                     .trig_leak = t->trig_leak, .flight_live = t->flight_window_ns != 0 };
    if (g->sel->dir) {                /* the agent: DIR/COMM-PID.db, traces COMM-PID-N.db */
        char comm[64];
        ls_proc_comm(pid, comm, sizeof(comm));
        for (char *c = comm; *c; c++)
            if (!isalnum((unsigned char)*c) && *c != '_' && *c != '.')
                *c = '_';
        if (asprintf(&m->out, "%s/%s-%d.db", g->sel->dir, comm[0] ? comm : "process",
                     (int)pid) < 0)
            m->out = NULL;
        r->out = m->out;
    }
    m->g = g;
    m->k = g->next_k++;
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
        m->th = 0;                    /* none to join */
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

/* A --cgroup's processes now (false: the cgroup is gone). */
static bool scan_cgroup(ls_group *g, const char *cg)
{
    char path[PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/cgroup.procs", cg);
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

/* --loops: does pid (a user process: it has an executable) have a thread
 * asleep in a wait call now?  Its first LS_LOOPS_THREADS threads. */
static bool has_loop(pid_t pid, int wait_calls)
{
    char path[64], exe[16];
    snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
    if (readlink(path, exe, sizeof(exe)) <= 0)
        return false;                 /* a kernel thread, or gone */
    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    struct dirent *e;
    bool found = false;
    for (int n = 0; !found && d && n < LS_LOOPS_THREADS && (e = readdir(d));) {
        pid_t tid = parse_pid(e->d_name);
        if (tid) {
            n++;
            found = ls_thread_waits(pid, tid, wait_calls) != 0;
        }
    }
    if (d)
        closedir(d);
    return found;
}

/* Every process with a loop, or with a --comm name, now (ours excepted);
 * loops: look for loops this time. */
static void scan_procs(ls_group *g, bool loops)
{
    DIR *d = opendir("/proc");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        pid_t pid = parse_pid(e->d_name);
        if (!pid || pid == getpid() || is_member(g, pid))
            continue;
        char comm[64];
        ls_proc_comm(pid, comm, sizeof(comm));
        bool want = false;
        for (int i = 0; comm[0] && i < g->sel->ncomm && !want; i++)
            want = !strcmp(comm, g->sel->comm[i]);
        if (want || (loops && has_loop(pid, g->r->wait_calls)))
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
 * given as its path, or from the v2 hierarchy's root (system.slice/x.service):
 * its path into out, or what is wrong with it into err (non-zero). */
static int cgroup_path(const char *arg, char *out, size_t len, char *err, size_t elen)
{
    char p[PATH_MAX], root[PATH_MAX];
    struct statfs sf;
    if (arg[0] == '/' && statfs(arg, &sf) == 0)
        snprintf(p, sizeof(p), "%s", arg);
    else if (cgroup2_root(root, sizeof(root)))
        snprintf(p, sizeof(p), "%s/%s", root, arg[0] == '/' ? arg + 1 : arg);
    else
        return snprintf(err, elen, "no cgroup v2 hierarchy is mounted");
    if (statfs(p, &sf) != 0)
        return snprintf(err, elen, "%s: %s", p, strerror(errno));
    if (sf.f_type != CGROUP2_SUPER_MAGIC && sf.f_type != CGROUP_SUPER_MAGIC)
        return snprintf(err, elen, "%s is not on a cgroup file system", p);
    char procs[PATH_MAX + 16];
    snprintf(procs, sizeof(procs), "%s/cgroup.procs", p);
    if (access(procs, R_OK) != 0)
        return snprintf(err, elen, "cannot read %s: %s", procs, strerror(errno));
    if (strlen(p) >= len)
        return snprintf(err, elen, "its path is too long");
    memcpy(out, p, strlen(p) + 1);
    return 0;
}

/* ---- the group's thread */

static void group_end_meta(ls_group *g, const char *why, int64_t end)
{
    recorder *r = g->r;
    r->end_ns = end;
    ls_sink_meta(r, LS_META_START_NS, "%lld", (long long)r->start_ns);
    ls_sink_meta_utc(r, LS_META_START_UTC, r->start_ns);
    ls_sink_meta(r, LS_META_MODE, "%s", g->any_generic ? "generic" : "libevl");
    ls_write_span_meta(r, why);
    for (int i = 0; i < g->nsum; i++)
        ls_sink_meta(r, g->sum_key[i], "%llu", (unsigned long long)g->sum[i]);
    ls_sink_meta(r, LS_META_PROCESSES, "%llu", (unsigned long long)g->recorded);
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

/* Join the members that are done, and let them go (one that exec'd is
 * attached again unless restart is false); how many still run. */
static uint32_t reap(ls_group *g, bool restart)
{
    uint32_t running = 0;
    for (uint32_t i = 0; i < g->n;) {
        ls_member *m = g->m[i];
        int st = atomic_load(&m->state);
        if (st != M_DONE) {
            running += st == M_RUNNING;
            i++;
            continue;
        }
        if (m->th)
            pthread_join(m->th, NULL);
        if (!g->r->quiet)             /* tests wait for these lines */
            fprintf(stderr, "%spid %d: %s: %s\n", isatty(2) ? "\r" : "", (int)m->pid,
                    m->failed ? "not recorded" : "done", m->why);
        pthread_mutex_lock(&g->mu);
        g->failed += m->failed;
        char state;
        unsigned long long start;
        if (m->failed && ls_proc_stat(m->pid, &state, &start)) {   /* not tried again */
            g->refusedp[g->nrefusedp % LS_REFUSED_MAX].pid = m->pid;
            g->refusedp[g->nrefusedp++ % LS_REFUSED_MAX].start = start;
        }
        g->m[i] = g->m[--g->n];       /* its slot to the last member */
        if (m->exec && restart && kill(m->pid, 0) == 0)
            member_start(g, m->pid, m->parent);
        pthread_mutex_unlock(&g->mu);
        free(m->out);
        free(m);
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
        char parent[48] = "", bin[sizeof(m->binary)];
        if (m->parent)
            snprintf(parent, sizeof(parent), ", forked by %d", (int)m->parent);
        /* the target's file name: no control bytes to the terminal */
        size_t k = 0;
        for (; m->binary[k]; k++)
            bin[k] = (unsigned char)m->binary[k] < 0x20 || m->binary[k] == 0x7f ? '?'
                                                                                 : m->binary[k];
        bin[k] = 0;
        fprintf(stderr, "%spid %d: recording (%s%s%s%s)\n", tty ? "\r" : "", (int)m->pid,
                bin, m->mode[0] ? ", " : "", m->mode, parent);
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

/* The agent: DIR's finished traces (*.db without a -wal beside them)
 * under cap bytes, the oldest removed first. */
static void dir_cap(const char *dir, uint64_t cap)
{
    struct ent {
        char name[256];
        int64_t mtime;
        uint64_t size;
    } *v = NULL;
    size_t n = 0, capn = 0;
    uint64_t total = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        struct stat st;
        char wal[272];
        snprintf(wal, sizeof(wal), "%s-wal", e->d_name);
        /* a trace being written has its WAL beside it: left alone */
        if (len < 4 || len >= 256 || strcmp(e->d_name + len - 3, ".db") ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode) ||
            faccessat(dirfd(d), wal, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
            continue;
        if (n == capn) {
            capn = capn ? 2 * capn : 64;
            struct ent *nv = realloc(v, capn * sizeof(*v));
            if (!nv)
                break;
            v = nv;
        }
        memcpy(v[n].name, e->d_name, len + 1);
        v[n].mtime = (int64_t)st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec;
        v[n].size = (uint64_t)st.st_size;
        total += v[n++].size;
    }
    while (total > cap && n) {
        size_t old = 0;
        for (size_t i = 1; i < n; i++)
            if (v[i].mtime < v[old].mtime)
                old = i;
        if (unlinkat(dirfd(d), v[old].name, 0) == 0)
            total -= v[old].size;
        v[old] = v[--n];
    }
    if (d)
        closedir(d);
    free(v);
}

/* The selection's cgroups resolved (into cg, at most LS_SEL_MAX); a
 * missing one is an error, unless the agent waits for it (said, and its
 * cg left empty: looked for again at each scan). */
static int resolve_all(const struct ls_group_sel *sel, char (*cg)[PATH_MAX], bool wait)
{
    char err[PATH_MAX + 64];
    for (int i = 0; i < sel->ncgroup; i++)
        if (cgroup_path(sel->cgroup[i], cg[i], PATH_MAX, err, sizeof(err))) {
            cg[i][0] = 0;
            if (!wait)
                return ls_error("no cgroup '%s': %s", sel->cgroup[i], err);
            fprintf(stderr, "agent: no cgroup '%s' yet (%s): looked for every %lld ms\n",
                    sel->cgroup[i], err, LS_SCAN_NS / 1000000);
        }
    return 0;
}

/* Every selection that finds processes by looking: attach what it finds
 * (--loops: when loops is true). */
static void scan_all(ls_group *g, char (*cg)[PATH_MAX], bool *cg_ok, bool tty, bool loops)
{
    const struct ls_group_sel *sel = g->sel;
    char err[PATH_MAX + 64];
    for (int i = 0; i < sel->ncgroup; i++) {
        if (!cg[i][0] && cgroup_path(sel->cgroup[i], cg[i], PATH_MAX, err, sizeof(err))) {
            cg[i][0] = 0;             /* the agent's: not there yet */
            continue;
        }
        bool ok = scan_cgroup(g, cg[i]);
        if (ok != cg_ok[i] && !g->r->quiet)
            fprintf(stderr, "%scgroup %s %s\n", tty ? "\r" : "", cg[i], ok ? "is there" : "is gone");
        cg_ok[i] = ok;
    }
    if (sel->ncomm || (sel->loops && loops))
        scan_procs(g, sel->loops && loops);
}

/* Before any member ran: nothing recorded, nothing left behind (the
 * trace file removed); returns err. */
static int group_abort(ls_group *g, int err)
{
    recorder *r = g->r;
    ls_sinks_free(r);
    ls_store_abort(r->store);
    r->store = NULL;
    r->group = NULL;
    pthread_mutex_destroy(&g->mu);
    free(g);
    return err;
}

int ls_group_record(recorder *r, struct ls_group_sel *sel, const char **why)
{
    char errbuf[512];
    static char cg[LS_SEL_MAX][PATH_MAX];
    bool cg_ok[LS_SEL_MAX];
    int err;
    bool agent = sel->dir != NULL;
    *why = "every process exited";
    if ((err = ls_check_privileges()))
        return err;
    if ((err = resolve_all(sel, cg, agent)))
        return err;
    for (int i = 0; i < sel->npids; i++)
        if (kill(sel->pids[i], 0) < 0 && errno == ESRCH)
            return ls_error("no process with pid %d", (int)sel->pids[i]);
    if (!agent && ls_store_check(r->out, r->force, errbuf, sizeof(errbuf)) < 0)
        return ls_error("%s", errbuf);
    if (agent && (mkdir(sel->dir, 0700) < 0 && errno != EEXIST))
        return ls_error("cannot make '%s': %s", sel->dir, strerror(errno));
    if (agent && access(sel->dir, W_OK) < 0)
        return ls_error("cannot write flight traces into '%s': %s", sel->dir, strerror(errno));
    ls_group *g = calloc(1, sizeof(*g));
    if (!g)
        return ls_error("out of memory");
    g->r = r;
    r->group = g;
    g->sel = sel;
    pthread_mutex_init(&g->mu, NULL);
    if (!r->ringbuf_given)
        r->ringbuf_kb = LS_MEMBER_RING_KB;
    if (!agent) {
        r->store = ls_store_create(r->out, r->force, errbuf, sizeof(errbuf));
        if (!r->store)
            return group_abort(g, ls_error("%s", errbuf));
        if ((err = ls_sink_add(r, &ls_store_sink, r->store)))
            return group_abort(g, err);
    }
    if (r->metrics_addr && (err = ls_metrics_start(r, r->metrics_addr)))
        return group_abort(g, err);
    r->start_ns = ls_now();
    /* The members' threads take no signal: the group's thread stops them. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    /* SIGINT, SIGTERM and SIGHUP are read from a signalfd below, never
     * taken by a handler (the members' engines install one): blocked here
     * from now on, and every signal while members are started (their
     * threads inherit that) */
    sigset_t run = old, stop_set;
    sigemptyset(&stop_set);
    sigaddset(&stop_set, SIGINT);
    sigaddset(&stop_set, SIGTERM);
    sigaddset(&stop_set, SIGHUP);
    sigorset(&run, &old, &stop_set);
    pthread_mutex_lock(&g->mu);
    for (int i = 0; i < sel->npids; i++) {
        member_start(g, sel->pids[i], 0);
        if (sel->children)
            add_descendants(g, sel->pids[i], 0);
    }
    for (int i = 0; i < sel->ncgroup; i++)
        cg_ok[i] = cg[i][0] && scan_cgroup(g, cg[i]);
    if (sel->ncomm || sel->loops)
        scan_procs(g, sel->loops);
    if (sel->children && sel->ncgroup)
        for (uint32_t i = 0, n = g->n; i < n; i++)
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
    if (!started && !agent) {
        pthread_sigmask(SIG_SETMASK, &old, NULL);
        return group_abort(g, sel->ncgroup || sel->ncomm
            ? ls_error("no process matches %s %s", sel->ncgroup ? "cgroup" : "comm",
                       sel->ncgroup ? sel->cgroup[0] : sel->comm[0])
            : ls_error("no process has a thread waiting in a wait call (--loops)"));
    }
    if (!r->quiet && agent)
        fprintf(stderr, "agent: %u process%s now; flight traces into '%s' (at most %llu MiB)\n",
                started, started == 1 ? "" : "es", sel->dir,
                (unsigned long long)(sel->dir_cap >> 20));
    else if (!r->quiet)
        fprintf(stderr, "recording a process group (%u process%s%s%s%s) into '%s'%s\n", started,
                started == 1 ? "" : "es", sel->children ? "; their children too" : "",
                sel->ncgroup ? "; cgroup " : "", sel->ncgroup ? cg[0] : "", r->out,
                isatty(2) ? "; Ctrl-C to stop" : "");
    announce(g, isatty(2) && !r->quiet);
    ls_metrics_announce(r);

    int sfd = signalfd(-1, &stop_set, SFD_NONBLOCK | SFD_CLOEXEC);
    int64_t deadline = r->duration > 0 ? r->start_ns + (int64_t)(r->duration * 1e9) : 0;
    int64_t last_scan = ls_now(), last_loops = last_scan, last_status = r->start_ns, last_cap = 0;
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
        if (sig == SIGHUP && agent && !stopping) {
            /* the configuration again: new processes by it, now */
            pthread_mutex_lock(&g->mu);
            int rerr = sel->reload ? sel->reload(r, sel) : 0;
            if (!rerr)
                resolve_all(sel, cg, true);
            pthread_mutex_unlock(&g->mu);
            if (!r->quiet)
                fprintf(stderr, "%sagent: %s\n", tty ? "\r" : "",
                        rerr ? "the configuration has errors (above): kept the one before"
                             : "configuration reloaded");
            last_scan = last_loops = 0;
            sig = 0;
        }
        if (!stopping && sig > 0)
            stop_why = sig == SIGINT ? "interrupted (SIGINT)" : "terminated by signal";
        else if (!stopping && deadline && now >= deadline)
            stop_why = "duration reached";
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
                bool loops = now - last_loops >= LS_LOOPS_SCAN_NS;
                last_scan = now;
                if (loops)
                    last_loops = now;
                scan_all(g, cg, cg_ok, tty, loops);
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
        if (agent && now - last_cap >= LS_CAP_NS) {
            last_cap = now;
            dir_cap(sel->dir, sel->dir_cap);
        }
        pthread_sigmask(SIG_BLOCK, &all, NULL);      /* a member attached again */
        uint32_t running = reap(g, !stopping);
        pthread_sigmask(SIG_SETMASK, &run, NULL);
        /* Only a selection that can match new processes keeps waiting. */
        bool can_grow = !stopping && (agent || sel->ncomm);
        for (int i = 0; !stopping && i < sel->ncgroup; i++)
            can_grow = can_grow || cg_ok[i];
        if (!running && !can_grow) {
            pthread_mutex_lock(&g->mu);
            bool more = g->npending > 0 && !stopping;
            bool ending = g->n > 0;   /* joined next turn */
            pthread_mutex_unlock(&g->mu);
            if (!more && !ending)
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
    if (!agent)
        group_end_meta(g, *why, end);
    err = ls_sinks_end(r, end);
    r->store = NULL;
    r->trace_done = !err && !agent;
    if (!r->quiet || g->refused || g->failed)
        fprintf(stderr, "%s %llu process%s%s%s%s (%s)%s\n", agent ? "agent: recorded" : "recorded",
                (unsigned long long)g->recorded, g->recorded == 1 ? "" : "es",
                agent ? "" : " into '", agent ? "" : r->out, agent ? "" : "'", *why,
                g->refused ? "; more processes at once than a group records (64): the rest "
                             "were not recorded" : "");
    for (int i = 0; i < g->nkeys; i++)
        free(g->keys[i]);
    for (int i = 0; i < g->nsum; i++)
        free(g->sum_key[i]);
    ls_sinks_free(r);
    pthread_mutex_destroy(&g->mu);
    free(g);
    return err;
}
