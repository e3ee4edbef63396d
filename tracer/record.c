/*
 * record.c -- `loopscope record`: attach record.bpf.c to a running process
 * (or to a command it starts) and write what it sees into a trace database.
 * Overview: tracer/README.md.  Lifecycle (STYLE.md 9): parse -> find the
 * probes -> open skeleton -> configure rodata -> load -> attach -> poll
 * until the target exits, a signal, or --duration -> finish the database;
 * one cleanup path whose destroy calls accept NULL.
 */
#define _GNU_SOURCE
#include "record.h"
#include "record.skel.h"
#include "pystack.h"
#include "store.h"
#include "symbols.h"
#include "tasks.h"
#include "tracer.h"
#include "ls_schema.h"

#include <bpf/libbpf.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <getopt.h>
#include <linux/perf_event.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <stddef.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LS_MAX_LINKS 32
#define LS_MAX_LOOP_THREADS 64
#define LS_MAX_DEPTH 64
#define LS_STACK_IDS 4096         /* distinct stacks remembered for dedup */
#define LS_MAX_LOOPS 1024         /* loop ids accepted per recording */
#define LS_MIN_RINGBUF_KB 256     /* room for a few full batches (64 KiB each) */
#define LS_WINDOW_NS 20000000ull  /* generic mode: iterations summed per 20 ms */
#define LS_JIT_HINT "; start node with --perf-basic-prof --interpreted-frames-native-stack " \
                    "to name them"

typedef struct recorder {
    /* options */
    pid_t pid;
    const char *out;
    double duration;          /* seconds, 0 = until stopped */
    bool force;
    bool no_batch;
    enum { LS_MODE_AUTO, LS_MODE_LIBEVL, LS_MODE_GENERIC } mode;
    bool wait_all;            /* --wait-calls all: poll/select loops too */
    bool wait_raw;            /* --wait-hook raw: raw sys_enter/sys_exit */
    bool quiet;
    unsigned ringbuf_kb;
    double block_threshold_ms;
    bool no_blocking;
    bool syscalls;
    char **cmd;               /* -- CMD ARGS */
    /* state */
    char binary[PATH_MAX];    /* the ELF file holding the evl probes, or
                               * in generic mode the target's executable */
    bool generic;             /* recording in the generic loop mode */
    char runtime[128];        /* what the target runs on (meta.runtime) */
    struct record_bpf *skel;
    struct bpf_link *links[LS_MAX_LINKS];
    int nlinks;
    struct ring_buffer *rb;
    ls_store *store;
    ls_syms *syms;
    ls_py *py;                /* generic mode, a CPython target: its stacks */
    int pidfd;
    pid_t child;              /* started by us (-- CMD) */
    int go_pipe;              /* write end: releases the child to exec */
    uint64_t tasks_created, tasks_finished;
    struct ls_loop_info {
        uint64_t id;          /* a loop with a row already */
        int64_t stopped;      /* loop_stop time, 0 while running */
        int64_t last_ts;      /* its newest accepted record: records of a
                               * loop never go back in time */
        bool snapshot_asked;  /* a snapshot was requested (or not needed) */
        uint64_t hist[LS_HIST_BUCKETS];     /* generic: iteration latency */
        uint64_t hist_ns[LS_HIST_BUCKETS];  /* and the busy time in each bucket */
    } *loops;
    size_t nloops, loops_cap;
    uint32_t sampled_tids[LS_MAX_LOOP_THREADS]; /* loop threads with a cpu sampler */
    struct bpf_link *samplers[LS_MAX_LOOP_THREADS];
    int nsampled;
    struct { uint64_t hash; int64_t id; } stack_ids[LS_STACK_IDS];
    int64_t next_stack_id;
    uint64_t blocks;
    int64_t attach_ns;        /* before the first probe was attached */
    int64_t start_ns;
    int64_t end_ns;           /* when recording stopped (open spans end there) */
    int64_t detach_ns;        /* when the programs were detached */
    bool target_gone;
    int64_t consume_until;    /* ls_on_msg yields back to the main loop then */
    unsigned since_check;
    ls_tasks *tasks;          /* live tasks and their accounting */
    /* What the recorder itself counted (meta): */
    uint64_t records;         /* records accepted */
    uint64_t rejected;        /* records refused as malformed (bad size,
                               * kind, state, task id, time) */
    uint64_t rejected_msgs;   /* messages refused (loops over LS_MAX_LOOPS) */
    uint64_t untracked;       /* tasks beyond LS_TASKS_MAX: no task_stats */
    uint64_t snapshot_fail;   /* snapshot requests that could not be written */
} recorder;

static volatile sig_atomic_t ls_stop_signal;

static void ls_on_signal(int sig) { ls_stop_signal = sig; }

static int64_t ls_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

static int ls_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int ls_err(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("error: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return 1;
}

static int ls_libbpf_print(enum libbpf_print_level level, const char *fmt, va_list ap)
{
    if (level == LIBBPF_DEBUG || !getenv("LOOPSCOPE_DEBUG"))
        return 0;
    return vfprintf(stderr, fmt, ap);
}

/* ------------------------------------------------------------ the target */

/* Does the ELF file at path carry USDT notes of provider "evl"? */
static bool ls_has_evl_probes(const char *path)
{
    bool found = false;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return false;
    elf_version(EV_CURRENT);
    Elf *e = elf_begin(fd, ELF_C_READ, NULL);
    size_t shstrndx;
    if (!e || elf_getshdrstrndx(e, &shstrndx) != 0)
        goto out;
    for (Elf_Scn *scn = NULL; !found && (scn = elf_nextscn(e, scn));) {
        GElf_Shdr sh;
        if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE)
            continue;
        const char *name = elf_strptr(e, shstrndx, sh.sh_name);
        if (!name || strcmp(name, ".note.stapsdt") != 0)
            continue;
        Elf_Data *d = elf_getdata(scn, NULL);
        size_t off = 0, noff, doff;
        GElf_Nhdr nh;
        while (d && (off = gelf_getnote(d, off, &nh, &noff, &doff)) > 0) {
            /* desc: pc, base, semaphore (3 addresses), then provider\0 */
            size_t asz = gelf_getclass(e) == ELFCLASS32 ? 4 : 8;
            if (nh.n_type == 3 && nh.n_descsz > 3 * asz &&
                strcmp((const char *)d->d_buf + doff + 3 * asz, "evl") == 0) {
                found = true;
                break;
            }
        }
    }
out:
    if (e)
        elf_end(e);
    close(fd);
    return found;
}

/* Find the file that holds libevl in the target: its executable, else a
 * mapped shared library.  Fills r->binary; -1 if there is none. */
static int ls_probe_file(recorder *r)
{
    char exe[64];
    snprintf(exe, sizeof(exe), "/proc/%d/exe", r->pid);
    /* Attach through /proc/PID/exe: a binary replaced on disk since the
     * process started would otherwise silently record nothing. */
    if (ls_has_evl_probes(exe)) {
        snprintf(r->binary, sizeof(r->binary), "%s", exe);
        return 0;
    }
    char maps[64], line[PATH_MAX + 128];
    snprintf(maps, sizeof(maps), "/proc/%d/maps", r->pid);
    FILE *f = fopen(maps, "re");
    if (f) {
        while (fgets(line, sizeof(line), f)) {
            char *path = strchr(line, '/');
            if (!path || !strstr(line, "r-xp"))
                continue;
            path[strcspn(path, "\n")] = 0;
            if (ls_has_evl_probes(path)) {
                snprintf(r->binary, sizeof(r->binary), "%s", path);
                fclose(f);
                return 0;
            }
        }
        fclose(f);
    }
    return -1;
}

/* Choose the mode: libevl's probes when the target has them (unless
 * --mode generic), else the generic loop mode (unless --mode libevl). */
static int ls_find_probes(recorder *r)
{
    char exe[64];
    snprintf(exe, sizeof(exe), "/proc/%d/exe", r->pid);
    if (r->mode != LS_MODE_GENERIC && ls_probe_file(r) == 0)
        return 0;
    char target[PATH_MAX] = "?";
    ssize_t n = readlink(exe, target, sizeof(target) - 1);
    if (n > 0)
        target[n] = 0;
    if (r->mode != LS_MODE_LIBEVL) {
        r->generic = true;
        snprintf(r->binary, sizeof(r->binary), "%s", target);
        return 0;
    }
    return ls_err("pid %d (%s) has no loopscope probes: no USDT provider 'evl' in %s or in "
                  "its mapped libraries (is it built with libevl and EVL_PROBES on?)",
                  r->pid, target, exe);
}

/* Effective capabilities of this process (a bit per CAP_ number). */
static unsigned long long ls_cap_eff(void)
{
    unsigned long long eff = 0;
    FILE *f = fopen("/proc/self/status", "re");
    char line[256];
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "CapEff: %llx", &eff) == 1)
            break;
    if (f)
        fclose(f);
    return eff;
}

enum { LS_CAP_DAC_READ_SEARCH = 2, LS_CAP_SYS_PTRACE = 19, LS_CAP_SYS_ADMIN = 21 };

/* Which capabilities recording needs and this process lacks (measured on
 * this project's kernel, tracer/README.md "Privileges"): creating uprobes
 * needs CAP_SYS_ADMIN (CAP_BPF + CAP_PERFMON load the programs but the
 * uprobe perf events fail with EACCES).  Checked on the capabilities, not
 * the uid: root in a container may lack them. */
static int ls_check_privileges(void)
{
    if (!(ls_cap_eff() & (1ull << LS_CAP_SYS_ADMIN)))
        return ls_err("recording needs CAP_SYS_ADMIN (uprobes; CAP_BPF and CAP_PERFMON "
                      "are not enough on this kernel); missing: CAP_SYS_ADMIN");
    return 0;
}

/* A target of another user: reading its maps, memory and files (probes,
 * stacks, symbols, the snapshot request) needs CAP_SYS_PTRACE and
 * CAP_DAC_READ_SEARCH. */
static int ls_check_target_access(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "re");
    long uid = -1;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "Uid: %*d %ld", &uid) == 1)
            break;
    if (f)
        fclose(f);
    unsigned long long eff = ls_cap_eff();
    bool ptrace = eff & (1ull << LS_CAP_SYS_PTRACE), dac = eff & (1ull << LS_CAP_DAC_READ_SEARCH);
    if (uid < 0 || (uid == (long)geteuid() && uid == (long)getuid()) || (ptrace && dac))
        return 0;
    return ls_err("pid %d runs as uid %ld: reading its memory and files needs CAP_SYS_PTRACE "
                  "and CAP_DAC_READ_SEARCH; missing: %s%s%s", (int)pid, uid,
                  ptrace ? "" : "CAP_SYS_PTRACE", !ptrace && !dac ? ", " : "",
                  dac ? "" : "CAP_DAC_READ_SEARCH");
}

/* ---------------------------------------------------------- ingestion */

/* On-CPU detection: sample the loop thread's CPU time every half
 * threshold; on_cpu_sample reports steps that overran it. */
static void ls_sample_thread(recorder *r, uint32_t tid)
{
    if (r->no_blocking || r->nsampled == LS_MAX_LOOP_THREADS)
        return;
    for (int i = 0; i < r->nsampled; i++)
        if (r->sampled_tids[i] == tid)
            return;
    struct perf_event_attr a = {
        .type = PERF_TYPE_SOFTWARE,
        .size = sizeof(a),
        .config = PERF_COUNT_SW_TASK_CLOCK,
        .sample_period = (uint64_t)(r->block_threshold_ms * 1e6 / 2),
    };
    int fd = (int)syscall(SYS_perf_event_open, &a, (pid_t)tid, -1, -1, PERF_FLAG_FD_CLOEXEC);
    if (fd < 0)
        return;                       /* on-CPU detection off for this loop */
    struct bpf_link *l = bpf_program__attach_perf_event(r->skel->progs.on_cpu_sample, fd);
    if (!l) {
        close(fd);
        return;
    }
    r->sampled_tids[r->nsampled] = tid;
    r->samplers[r->nsampled++] = l;
}

static void ls_detect_runtime(recorder *r, bool running);

/* Generic mode, a command we started: its first loop thread shows that it
 * runs its program now (past any shell or pyenv shim): what it is. */
static void ls_child_runs(recorder *r)
{
    char exe[64], path[PATH_MAX];
    snprintf(exe, sizeof(exe), "/proc/%d/exe", r->pid);
    ssize_t n = readlink(exe, path, sizeof(path) - 1);
    if (n <= 0)
        return;
    path[n] = 0;
    snprintf(r->binary, sizeof(r->binary), "%s", path);
    ls_detect_runtime(r, true);
    ls_store_meta(r->store, "target_binary", "%s", r->binary);
    ls_store_meta(r->store, "runtime", "%s", r->runtime);
}

/* The loop's entry, made (with its loops row and CPU sampler) the first
 * time a message names it. */
static struct ls_loop_info *ls_loop_seen(recorder *r, uint64_t loop, uint32_t pid, uint32_t tid,
                                         int64_t ts)
{
    for (size_t i = 0; i < r->nloops; i++)
        if (r->loops[i].id == loop)
            return &r->loops[i];
    if (r->nloops == LS_MAX_LOOPS)     /* loop ids are the target's choice */
        return NULL;
    if (r->nloops == r->loops_cap) {
        size_t cap = r->loops_cap ? 2 * r->loops_cap : 8;
        struct ls_loop_info *a = realloc(r->loops, cap * sizeof(*a));
        if (!a)
            return NULL;
        r->loops = a;
        r->loops_cap = cap;
    }
    ls_sample_thread(r, tid);
    if (r->generic && r->child && !r->nloops)
        ls_child_runs(r);
    ls_store_loop(r->store, loop, pid, tid, ts);
    r->loops[r->nloops] = (struct ls_loop_info){ .id = loop, .last_ts = r->attach_ns };
    return &r->loops[r->nloops++];
}

/* Symbols need the process's mappings as they are once it runs (for a
 * child started by us, libraries are mapped only after exec): made at the
 * first use. */
static ls_syms *ls_get_syms(recorder *r)
{
    if (!r->syms)
        r->syms = ls_syms_new(r->pid);
    return r->syms;
}

static void ls_store_stat_row(ls_task *a, void *arg)
{
    recorder *r = arg;
    ls_store_task_stat(r->store, a->id, a->busy, a->sched, a->idle, a->resumes, a->wakes,
                       a->longest);
}

/* The task an accepted record names: its table entry (NULL when the table
 * is full), and a tasks row in any case, so events never name a task
 * missing from tasks. */
static ls_task *ls_task_seen(recorder *r, uint64_t loop, uint64_t id)
{
    bool made;
    ls_task *a = ls_tasks_get(r->tasks, id, loop, &made);
    if (!a) {                         /* not tracked: make sure of the row */
        ls_store_task_unknown(r->store, id, loop);
        return NULL;
    }
    return a;
}

static void ls_task_row(recorder *r, ls_task *a, uint64_t loop, uint64_t id)
{
    if (!a || a->row != LS_ROW_NONE)
        return;
    ls_store_task_unknown(r->store, id, loop);
    a->row = LS_ROW_PLACEHOLDER;
}

/* Per-task accounting (task_stats): each create/run/suspend/wake lasts
 * until the task's next event; at its finish the row is written and the
 * task leaves memory. */
static void ls_account(recorder *r, ls_task *a, const struct evl_rec *e, bool pre)
{
    if (!a || (pre && a->last_kind))
        return;                       /* a late snapshot: its events tell more */
    ls_task_close_span(a, (int64_t)e->ts, e->kind);
    a->last_ts = (int64_t)e->ts;
    a->last_kind = pre ? LS_TASK_PREEXISTING : e->kind;
    if (e->kind == EVL_PROBE_ID_task_run)
        a->resumes++;
    else if (e->kind == EVL_PROBE_ID_task_wake)
        a->wakes++;
    else if (e->kind == EVL_PROBE_ID_task_finish) {
        a->last_kind = 0;
        ls_store_stat_row(a, r);
        ls_tasks_remove(r->tasks, a);
    }
}

/* At the end: the open span of each unfinished task lasts until its loop
 * stopped, or the end of the recording; then store every row. */
static void ls_close_open(ls_task *a, void *arg)
{
    recorder *r = arg;
    int64_t stop = r->end_ns;
    for (size_t l = 0; l < r->nloops; l++)
        if (r->loops[l].id == a->loop && r->loops[l].stopped)
            stop = r->loops[l].stopped;
    ls_task_close_span(a, stop, 0);
    ls_store_stat_row(a, r);
}

static bool ls_in_list(int v, const int *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (list[i] == v)
            return true;
    return false;
}

/* The trust boundary for lifecycle records: a record is accepted only if
 * its kind is a lifecycle probe, its task id is set where one is needed,
 * its enum argument is in its list, and its time lies between the last
 * record of its loop and the kernel's time of the message carrying it.
 * Everything after this function may trust those fields. */
static bool ls_rec_valid(const struct evl_rec *e, int64_t not_before, int64_t not_after)
{
#define LS_V(n, v, s) v,
    static const int reasons[] = { EVL_SUSPEND_LIST(LS_V) };
    static const int wakers[] = { EVL_WAKER_LIST(LS_V) };
    static const int leaks[] = { EVL_LEAK_LIST(LS_V) };
#undef LS_V
    static const int finals[] = { EVL_FINAL_FINISHED, EVL_FINAL_FAILED, EVL_FINAL_CANCELLED };
#define LS_N(a) (sizeof(a) / sizeof(a[0]))
    if ((int64_t)e->ts < not_before || (int64_t)e->ts > not_after || e->ts > INT64_MAX)
        return false;
    switch (e->kind) {
    case EVL_PROBE_ID_task_create:
    case EVL_PROBE_ID_task_run:
    case EVL_PROBE_ID_task_cancel:
        return e->task != 0;
    case EVL_PROBE_ID_task_suspend:
        return e->task && ls_in_list((int)e->a32, reasons, LS_N(reasons));
    case EVL_PROBE_ID_task_wake:
        return e->task && ls_in_list((int)e->a32, wakers, LS_N(wakers));
    case EVL_PROBE_ID_task_finish:
        return e->task && ls_in_list((int)e->a32, finals, LS_N(finals));
    case EVL_PROBE_ID_task_leak:
        return e->task && ls_in_list((int)e->a32, leaks, LS_N(leaks));
    case EVL_PROBE_ID_poll_enter:
    case EVL_PROBE_ID_poll_exit:
    case EVL_PROBE_ID_callback_begin:
    case EVL_PROBE_ID_callback_end:
        return true;
    default:                          /* loop_start/stop/batch are not records */
        return false;
    }
#undef LS_N
}

/* One record of a batch: e points at `avail` readable bytes (>= sizeof *e,
 * e->size checked by the caller). */
static void ls_ingest_rec(recorder *r, struct ls_loop_info *li, const struct evl_rec *e,
                          size_t avail, int64_t msg_ts)
{
    uint64_t loop = li->id;
    if (!ls_rec_valid(e, li->last_ts, msg_ts)) {
        if ((int64_t)e->ts < r->attach_ns && (int64_t)e->ts >= 0 && e->kind <= EVL_PROBE_ID_callback_end)
            return;                   /* made before this recording began */
        r->rejected++;
        return;
    }
    li->last_ts = (int64_t)e->ts;
    int64_t reason = e->a32;
    ls_task *a = e->task ? ls_task_seen(r, loop, e->task) : NULL;
    bool pre = false;
    switch (e->kind) {
    case EVL_PROBE_ID_task_create: {
        size_t n = e->a32 & ~EVL_REC_PREEXISTING;
        if (n > avail - sizeof(*e))
            n = avail - sizeof(*e);
        if (n > EVL_NAME_MAX - 1)
            n = EVL_NAME_MAX - 1;
        pre = e->a32 & EVL_REC_PREEXISTING;
        if (pre && a && a->row == LS_ROW_CREATED)
            return;                   /* a snapshot repeated for a task we know */
        ls_syms *syms = ls_get_syms(r);
        const ls_sym *sym = syms ? ls_syms_lookup(syms, e->a1) : NULL;
        ls_store_task_create(r->store, e->task, loop, e->a0, (const char *)(e + 1), n,
                             sym ? sym->function : NULL, e->a1, (int64_t)e->ts, pre);
        if (a)
            a->row = LS_ROW_CREATED;
        else if (!pre)
            r->untracked++;
        r->tasks_created++;
        reason = pre;
        break;
    }
    case EVL_PROBE_ID_task_leak:
        ls_task_row(r, a, loop, e->task);
        ls_store_task_leak(r->store, e->task, (int)e->a32);
        break;
    case EVL_PROBE_ID_task_finish:
        ls_store_task_finish(r->store, e->task, loop, (int64_t)e->ts, (int)e->a32, (int64_t)e->a0);
        if (a && a->row == LS_ROW_NONE)
            a->row = LS_ROW_PLACEHOLDER;
        r->tasks_finished++;
        break;
    default:
        if (e->task)
            ls_task_row(r, a, loop, e->task);
        break;
    }
    ls_store_event(r->store, (int64_t)e->ts, loop, e->task, e->kind, reason,
                   (int64_t)e->a0, (int64_t)e->a1);
    r->records++;
    if (e->kind >= EVL_PROBE_ID_task_create && e->kind <= EVL_PROBE_ID_task_finish)
        ls_account(r, a, e, pre);
}

/* Drain the ring buffer for at most `budget_ns`, so that a producer
 * faster than SQLite cannot keep the recorder from stopping or committing.
 * Returns messages consumed, or -1 when the budget ran out first. */
static int ls_consume(recorder *r, int64_t budget_ns)
{
    r->consume_until = ls_now() + budget_ns;
    int n = ring_buffer__consume(r->rb);
    return n == -EAGAIN ? -1 : n;
}

/* Store the Python frames f[from, to) of a captured stack from depth on. */
static int ls_store_py_frames(recorder *r, int64_t id, int depth, const struct ls_pystack *py,
                              uint32_t from, uint32_t to)
{
    for (uint32_t i = from; i < to && depth < LS_MAX_DEPTH; i++) {
        ls_sym f = { .module = "python" };
        ls_py_frame(r->py, &py->f[i], &f.function, &f.file, &f.line);
        ls_store_frame(r->store, id, depth++, 0, &f);
    }
    return depth;
}

/* Unwind, symbolize and store (once) the stack of a blocking episode.  A
 * CPython stack is merged in: the Python frames a native
 * _PyEval_EvalFrameDefault runs (up to and including the next ENTRY frame,
 * pystack.h) go right before it; Python frames the native stack gave no
 * place to (the unwind stopped early) go at its end. */
static int64_t ls_stack_id(recorder *r, uint32_t tid, const struct ls_block *b,
                           const struct ls_pystack *py, const uint8_t *stack)
{
    uint64_t pcs[LS_MAX_DEPTH];
    int n = ls_syms_unwind(ls_get_syms(r), (pid_t)tid, (const uint64_t *)b->regs, stack, b->stack_len, pcs, LS_MAX_DEPTH);
    uint32_t npy = r->py ? py->nframes : 0;
    if (npy > LS_PY_MAX_FRAMES)
        npy = LS_PY_MAX_FRAMES;
    if (n <= 0 && !npy)
        return 0;
    if (n < 0)
        n = 0;
    uint64_t h = 1469598103934665603ull;   /* FNV-1a over the pcs and Python frames */
    for (int i = 0; i < n; i++)
        h = (h ^ pcs[i]) * 1099511628211ull;
    for (uint32_t i = 0; i < npy; i++)
        h = (h ^ py->f[i].code ^ ((uint64_t)(uint32_t)py->f[i].instr << 32)) * 1099511628211ull;
    size_t slot = h % LS_STACK_IDS;
    if (r->stack_ids[slot].id && r->stack_ids[slot].hash == h)
        return r->stack_ids[slot].id;
    /* One row per frame, inlined functions expanded (same address); each
     * stored right after its lookup (symbols.h: valid until the next). */
    int64_t id = ++r->next_stack_id;
    int depth = 0;
    uint32_t next_py = 0;
    for (int i = 0; i < n && depth < LS_MAX_DEPTH; i++) {
        for (const ls_sym *f = ls_syms_lookup(r->syms, pcs[i]); f && depth < LS_MAX_DEPTH;
             f = f->inlined_into) {
            if (next_py < npy && f->function && !strcmp(f->function, "_PyEval_EvalFrameDefault")) {
                uint32_t end = next_py;
                while (end < npy && !(py->f[end++].flags & LS_PYF_ENTRY))
                    ;
                depth = ls_store_py_frames(r, id, depth, py, next_py, end);
                next_py = end;
                /* ls_py_frame does not touch the symbol cache: f is valid */
            }
            if (depth < LS_MAX_DEPTH)
                ls_store_frame(r->store, id, depth++, pcs[i], f);
        }
    }
    depth = ls_store_py_frames(r, id, depth, py, next_py, npy);
    ls_store_stack(r->store, id, depth);
    r->stack_ids[slot].hash = h;
    r->stack_ids[slot].id = id;
    return id;
}

/* Generic mode: the asyncio task a blocking episode happened in, as a
 * tasks row named after it; its id is a hash of the Task's address and
 * name (an address is reused once a task is freed).  0 if none. */
static uint64_t ls_generic_task(recorder *r, uint64_t loop, const struct ls_pystack *py)
{
    const char *name = r->py && py->task ? ls_py_task_name(r->py, py) : NULL;
    if (!name)
        return 0;
    size_t n = strlen(name);
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < 8; i++)
        h = (h ^ ((py->task >> (8 * i)) & 0xff)) * 1099511628211ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (uint8_t)name[i]) * 1099511628211ull;
    h &= INT64_MAX;
    ls_store_task_named(r->store, h ? h : 1, loop, n ? name : "?", n ? n : 1);
    return h ? h : 1;
}

/* A blocking episode.  The BPF side wrote it, but from what the target
 * published: the task id and, for on-CPU episodes, the step's start
 * (pub.since) are the target's word, so the start is kept inside
 * [recording start, sample] and the task gets a row if it has none. */
static void ls_on_block(recorder *r, const struct ls_msg_hdr *h)
{
    const struct ls_block *b = (const void *)(h + 1);
    const struct ls_pystack *py = (const void *)(b + 1);
    size_t fixed = sizeof(*b) + sizeof(*py);
    if (h->len < fixed || b->stack_len > h->len - fixed ||
        (b->kind != LS_BLOCK_OFFCPU && b->kind != LS_BLOCK_ONCPU))
        return;
    struct ls_loop_info *li = ls_loop_seen(r, h->loop, h->pid, h->tid, (int64_t)h->ts);
    if (!li) {
        r->rejected_msgs++;
        return;
    }
    int64_t start = (int64_t)b->start_ns, dur = (int64_t)b->dur_ns;
    if (b->kind == LS_BLOCK_ONCPU) {
        int64_t sample = (int64_t)b->sample_ns;
        if (start > sample || start < r->attach_ns || b->start_ns > INT64_MAX)
            start = sample > r->attach_ns ? r->attach_ns : sample;
    }
    if (dur < 0)
        dur = 0;
    if (b->task && !r->generic)
        ls_task_row(r, ls_task_seen(r, h->loop, b->task), h->loop, b->task);
    uint64_t task = b->task;
    if (r->generic)
        task = ls_generic_task(r, h->loop, py);
    int64_t stack = ls_stack_id(r, h->tid, b, py, (const uint8_t *)(py + 1));
    ls_store_blocking(r->store, h->loop, task, start, dur, (int)b->kind, b->syscall, stack);
    r->blocks++;
}

/* --syscalls: copy the per-thread syscall times into the database. */
static void ls_store_syscalls(recorder *r)
{
    if (!r->syscalls || !r->skel)
        return;
    struct bpf_map *map = r->skel->maps.sys_stats;
    struct ls_sys_key key, next;
    int rc = bpf_map__get_next_key(map, NULL, &next, sizeof(next));
    while (rc == 0) {
        key = next;
        rc = bpf_map__get_next_key(map, &key, &next, sizeof(next));
        struct ls_sys_stat v;
        if (bpf_map__lookup_elem(map, &key, sizeof(key), &v, sizeof(v), 0) != 0)
            continue;
        struct { uint64_t pub, loop; } lt = { 0, 0 };
        bpf_map__lookup_elem(r->skel->maps.loop_threads, &key.tid, sizeof(key.tid), &lt,
                             sizeof(lt), 0);
        ls_store_syscall_stat(r->store, lt.loop, key.tid, key.nr, v.count, v.total_ns, v.max_ns);
    }
}

/* Call fn on a copy of each value of a BPF hash map keyed by thread id
 * (at the end, once detached: nothing changes the map meanwhile). */
static void ls_map_each(recorder *r, struct bpf_map *map,
                        void (*fn)(recorder *r, uint32_t key, void *value))
{
    size_t vsize = bpf_map__value_size(map);
    uint8_t *v = malloc(vsize);
    uint32_t key, next;
    int rc = bpf_map__get_next_key(map, NULL, &next, sizeof(next));
    while (v && rc == 0) {
        key = next;
        rc = bpf_map__get_next_key(map, &key, &next, sizeof(next));
        if (bpf_map__lookup_elem(map, &key, sizeof(key), v, vsize, 0) == 0)
            fn(r, key, v);
    }
    free(v);
}

/* At the end: episodes still open in BPF (the loop has not polled since):
 * off-CPU ones, and in the generic mode on-CPU ones. */
static void ls_flush_open(recorder *r, uint32_t key, void *value);

static void ls_flush_open_episodes(recorder *r)
{
    if (r->no_blocking || !r->skel)
        return;
    ls_map_each(r, r->skel->maps.offcpu, ls_flush_open);
    if (r->generic)
        ls_map_each(r, r->skel->maps.oncpu_open, ls_flush_open);
}

static void ls_flush_open(recorder *r, uint32_t key, void *v)
{
    struct ls_msg_hdr *h = (struct ls_msg_hdr *)v;
    struct ls_block *b = (struct ls_block *)(h + 1);
    /* Still asleep, or (on-CPU) still in its step when we detached,
     * unless the loop had entered its wait since (generic mode). */
    int64_t end = r->detach_ns;
    struct ls_gloop g;
    if (r->generic && bpf_map__lookup_elem(r->skel->maps.gloops, &key, sizeof(key), &g,
                                           sizeof(g), 0) == 0 &&
        g.in_wait && g.steps == b->steps && (int64_t)g.enter_ns < end)
        end = (int64_t)g.enter_ns;
    if (!b->dur_ns)
        b->dur_ns = end > (int64_t)b->start_ns ? (uint64_t)(end - (int64_t)b->start_ns) : 0;
    /* An on-CPU episode counts CPU time: less the step's time switched
     * out (as the BPF side does when the step ends). */
    struct ls_step_off so;
    if (b->kind == LS_BLOCK_ONCPU &&
        bpf_map__lookup_elem(r->skel->maps.step_off, &key, sizeof(key), &so, sizeof(so),
                             0) == 0 && so.steps == b->steps)
        b->dur_ns = so.off_ns < b->dur_ns ? b->dur_ns - so.off_ns : 0;
    if (b->dur_ns >= (uint64_t)(r->block_threshold_ms * 1e6))
        ls_on_block(r, h);
}

static void ls_ingest_msg(recorder *r, const void *data, size_t size);

/* Generic mode: a window of a loop thread's iterations (written by the BPF
 * side from kernel times, not by the target). */
static void ls_on_window(recorder *r, struct ls_loop_info *li, const struct ls_window *w)
{
    if (w->end_ns < w->start_ns || w->end_ns > INT64_MAX)
        return;
    uint64_t n = 0;
    for (int b = 0; b < LS_HIST_BUCKETS; b++) {
        li->hist[b] += w->hist[b];
        li->hist_ns[b] += w->hist_ns[b];
        n += w->hist[b];
    }
    if (!n && !w->wait_ns && !w->busy_ns)
        return;                       /* nothing happened: no row */
    ls_store_window(r->store, li->id, (int64_t)w->start_ns, (int64_t)w->end_ns, w->iterations,
                    w->wait_ns, w->busy_ns, w->max_busy_ns);
}

/* At the end: the windows still being summed in BPF, then each loop's
 * iteration histogram. */
static void ls_flush_window(recorder *r, uint32_t key, void *v)
{
    struct ls_window *w = &((struct ls_gloop *)v)->w;
    struct ls_loop_info *li = ls_loop_seen(r, key, (uint32_t)r->pid, key, (int64_t)w->start_ns);
    if (!li)
        return;
    w->end_ns = (uint64_t)r->detach_ns;   /* the last window ends there */
    ls_on_window(r, li, w);
}

static void ls_flush_windows(recorder *r)
{
    if (!r->generic || !r->skel)
        return;
    _Static_assert(sizeof(struct ls_gloop) % 8 == 0, "gloops value: no tail padding");
    if (bpf_map__value_size(r->skel->maps.gloops) == sizeof(struct ls_gloop))
        ls_map_each(r, r->skel->maps.gloops, ls_flush_window);
    for (size_t i = 0; i < r->nloops; i++)
        for (int b = 0; b < LS_HIST_BUCKETS; b++)
            if (r->loops[i].hist[b])
                ls_store_hist(r->store, r->loops[i].id, b ? 1ll << b : 0, 2ll << b,
                              r->loops[i].hist[b], r->loops[i].hist_ns[b]);
}

/* Ask a loop for its task snapshot again (evl-probes.h: snapshot_req).
 * Needed when the loop did not see our attach as a rise of the semaphore:
 * another tracer is attached, or the previous one left while the loop
 * slept.  A repeated snapshot is harmless (known tasks are skipped).  pub
 * is the target's word: it must look like an aligned user address, and
 * the write goes through the kernel's checks on the target's own memory. */
static void ls_request_snapshot(recorder *r, uint64_t pub)
{
    if (!pub || pub % 8 || pub >= (1ull << 47) - sizeof(struct evl_loop_pub)) {
        r->snapshot_fail++;
        return;
    }
    struct evl_loop_pub cur;
    struct iovec local = { &cur, sizeof(cur) };
    struct iovec remote = { (void *)(uintptr_t)pub, sizeof(cur) };
    if (process_vm_readv(r->pid, &local, 1, &remote, 1, 0) != (ssize_t)sizeof(cur)) {
        r->snapshot_fail++;
        return;
    }
    uint32_t req = cur.snapshot_done + 1;
    local = (struct iovec){ &req, sizeof(req) };
    remote = (struct iovec){ (void *)(uintptr_t)(pub + offsetof(struct evl_loop_pub, snapshot_req)),
                             sizeof(req) };
    if (process_vm_writev(r->pid, &local, 1, &remote, 1, 0) != (ssize_t)sizeof(req))
        r->snapshot_fail++;
}

static int ls_on_msg(void *ctx, void *data, size_t size)
{
    recorder *r = ctx;
    ls_ingest_msg(r, data, size);
    /* libbpf has already consumed this message when it calls us (a
     * negative return does not give it back): the budget is checked only
     * once it is stored, and the rest stays queued. */
    if (++r->since_check >= 64) {
        r->since_check = 0;
        if (ls_now() > r->consume_until)
            return -EAGAIN;
    }
    return 0;
}

static void ls_ingest_msg(recorder *r, const void *data, size_t size)
{
    const struct ls_msg_hdr *h = data;
    if (size < sizeof(*h) || h->len > size - sizeof(*h))
        return;
    const uint8_t *p = (const uint8_t *)(h + 1);
    struct ls_loop_info *li = NULL;
    if (h->type != LS_MSG_BLOCK &&
        !(li = ls_loop_seen(r, h->loop, h->pid, h->tid, (int64_t)h->ts))) {
        r->rejected_msgs++;           /* more loop ids than any real program */
        return;
    }
    switch (h->type) {
    case LS_MSG_LOOP_START:
        li->snapshot_asked = true;    /* it starts under our eyes: no tasks yet */
        if (!r->generic)              /* generic traces have no events */
            ls_store_event(r->store, (int64_t)h->ts, h->loop, 0, EVL_PROBE_ID_loop_start,
                           h->tid, (int64_t)h->arg, 0);
        break;
    case LS_MSG_LOOP_STOP:
        li->stopped = (int64_t)h->ts;
        ls_store_loop_stop(r->store, h->loop, (int64_t)h->ts);
        if (!r->generic)
            ls_store_event(r->store, (int64_t)h->ts, h->loop, 0, EVL_PROBE_ID_loop_stop,
                           h->tid, 0, 0);
        break;
    case LS_MSG_WINDOW:
        if (h->len >= sizeof(struct ls_window))
            ls_on_window(r, li, (const struct ls_window *)(const void *)p);
        break;
    case LS_MSG_BLOCK:
        ls_on_block(r, h);
        break;
    case LS_MSG_BATCH:
    case LS_MSG_REC:
        if (r->generic)
            break;
        if (!li->snapshot_asked) {
            li->snapshot_asked = true;
            ls_request_snapshot(r, h->arg);
        }
        for (size_t off = 0; off + sizeof(struct evl_rec) <= h->len;) {
            const struct evl_rec *e = (const struct evl_rec *)(const void *)(p + off);
            if (e->size < sizeof(*e) || e->size % 8 || e->size > h->len - off) {
                r->rejected++;        /* no framing left to trust: drop the rest */
                break;
            }
            ls_ingest_rec(r, li, e, e->size, (int64_t)h->ts);
            off += e->size;
        }
        break;
    }
}

static uint64_t ls_stat(recorder *r, enum ls_stat k)
{
    int ncpu = libbpf_num_possible_cpus();
    if (ncpu <= 0 || !r->skel)
        return 0;
    uint64_t vals[ncpu], sum = 0;
    uint32_t key = k;
    if (bpf_map__lookup_elem(r->skel->maps.stats, &key, sizeof(key), vals,
                             sizeof(uint64_t) * (size_t)ncpu, 0) != 0)
        return 0;
    for (int i = 0; i < ncpu; i++)
        sum += vals[i];
    return sum;
}

/* ----------------------------------------------------------- attaching */

static int ls_attach(recorder *r, struct bpf_program *prog, const char *probe)
{
    if (r->nlinks == LS_MAX_LINKS)
        return -E2BIG;
    struct bpf_link *l = bpf_program__attach_usdt(prog, r->child ? r->child : r->pid,
                                                  r->binary, "evl", probe, NULL);
    if (!l)
        return -errno;
    r->links[r->nlinks++] = l;
    return 0;
}

/* The generic mode's wait-call programs, enter and exit (tracepoints
 * syscalls:sys_enter_NAME / sys_exit_NAME); the first three are the epoll
 * family, the rest only with --wait-calls all. */
#define LS_WAIT_PROGS(s) { \
    { s->progs.on_enter_epoll_wait, s->progs.on_exit_epoll_wait }, \
    { s->progs.on_enter_epoll_pwait, s->progs.on_exit_epoll_pwait }, \
    { s->progs.on_enter_epoll_pwait2, s->progs.on_exit_epoll_pwait2 }, \
    { s->progs.on_enter_poll, s->progs.on_exit_poll }, \
    { s->progs.on_enter_ppoll, s->progs.on_exit_ppoll }, \
    { s->progs.on_enter_select, s->progs.on_exit_select }, \
    { s->progs.on_enter_pselect6, s->progs.on_exit_pselect6 } }
#define LS_EPOLL_CALLS 3

/* libbpf finds the syscall tracepoints' ids in tracefs: mount it where it
 * looks first when it is not mounted anywhere (a bare system, a fresh
 * container; we run as root). */
static int ls_need_tracefs(void)
{
    if (access("/sys/kernel/tracing/events/syscalls", F_OK) == 0 ||
        access("/sys/kernel/debug/tracing/events/syscalls", F_OK) == 0)
        return 0;
    if (mount("nodev", "/sys/kernel/tracing", "tracefs", 0, NULL) < 0)
        return ls_err("the generic mode needs the syscall tracepoints: tracefs is not mounted "
                      "and mounting it on /sys/kernel/tracing failed: %s", strerror(errno));
    if (access("/sys/kernel/tracing/events/syscalls", F_OK) != 0)
        return ls_err("the generic mode needs the syscall tracepoints: this kernel has none "
                      "(CONFIG_FTRACE_SYSCALLS)");
    return 0;
}

static int ls_attach_generic(recorder *r)
{
    struct record_bpf *s = r->skel;
    struct bpf_program *wait[][2] = LS_WAIT_PROGS(s);
    int n = r->wait_raw ? 0 : r->wait_all ? (int)(sizeof(wait) / sizeof(wait[0]))
                                          : LS_EPOLL_CALLS;
    int err = n ? ls_need_tracefs() : 0;
    if (err)
        return err;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < 2; j++) {
            struct bpf_link *l = r->nlinks < LS_MAX_LINKS ? bpf_program__attach(wait[i][j]) : NULL;
            if (!l)
                return ls_err("cannot attach to the tracepoint of %s: %s",
                              bpf_program__name(wait[i][j]), strerror(errno));
            r->links[r->nlinks++] = l;
        }
    struct bpf_program *more[] = { s->progs.on_thread_exit, s->progs.on_wait_enter,
                                   s->progs.on_wait_exit };
    for (int i = 0; i < (r->wait_raw ? 3 : 1); i++) {
        struct bpf_link *l = r->nlinks < LS_MAX_LINKS ? bpf_program__attach(more[i]) : NULL;
        if (!l)
            return ls_err("cannot attach %s: %s", bpf_program__name(more[i]), strerror(errno));
        r->links[r->nlinks++] = l;
    }
    return 0;
}

/* Generic mode: only the programs of the wait calls asked for are loaded;
 * libevl mode: none of them. */
static void ls_choose_programs(recorder *r)
{
    struct record_bpf *s = r->skel;
    struct bpf_program *wait[][2] = LS_WAIT_PROGS(s);
    int n = !r->generic || r->wait_raw ? 0
            : r->wait_all ? (int)(sizeof(wait) / sizeof(wait[0])) : LS_EPOLL_CALLS;
    for (size_t i = 0; i < sizeof(wait) / sizeof(wait[0]); i++)
        for (int j = 0; j < 2; j++)
            bpf_program__set_autoload(wait[i][j], (int)i < n);
    bpf_program__set_autoload(s->progs.on_thread_exit, r->generic);
    bpf_program__set_autoload(s->progs.on_wait_enter, r->generic && r->wait_raw);
    bpf_program__set_autoload(s->progs.on_wait_exit, r->generic && r->wait_raw);
    struct bpf_program *usdt[] = {
        s->progs.on_loop_start, s->progs.on_loop_stop, s->progs.on_batch,
        s->progs.on_task_create, s->progs.on_task_run, s->progs.on_task_suspend,
        s->progs.on_task_wake, s->progs.on_task_finish, s->progs.on_task_cancel,
        s->progs.on_task_leak, s->progs.on_poll_enter, s->progs.on_poll_exit,
        s->progs.on_callback_begin, s->progs.on_callback_end,
    };
    if (r->generic)
        for (size_t i = 0; i < sizeof(usdt) / sizeof(usdt[0]); i++)
            bpf_program__set_autoload(usdt[i], false);
}

static int ls_attach_all(recorder *r)
{
    struct record_bpf *s = r->skel;
    struct { struct bpf_program *prog; const char *probe; bool batched; } t[] = {
        { s->progs.on_loop_start, "loop_start", true },
        { s->progs.on_loop_stop, "loop_stop", true },
        { s->progs.on_batch, "batch", true },
        { s->progs.on_task_create, "task_create", false },
        { s->progs.on_task_run, "task_run", false },
        { s->progs.on_task_suspend, "task_suspend", false },
        { s->progs.on_task_wake, "task_wake", false },
        { s->progs.on_task_finish, "task_finish", false },
        { s->progs.on_task_cancel, "task_cancel", false },
        { s->progs.on_task_leak, "task_leak", false },
        { s->progs.on_poll_enter, "poll_enter", false },
        { s->progs.on_poll_exit, "poll_exit", false },
        { s->progs.on_callback_begin, "callback_begin", false },
        { s->progs.on_callback_end, "callback_end", false },
    };
    if (r->syscalls) {
        struct bpf_link *e = bpf_program__attach(s->progs.on_sys_enter);
        struct bpf_link *x = e ? bpf_program__attach(s->progs.on_sys_exit) : NULL;
        if (!x) {
            bpf_link__destroy(e);
            return ls_err("cannot attach to the raw_syscalls tracepoints: %s", strerror(errno));
        }
        r->links[r->nlinks++] = e;
        r->links[r->nlinks++] = x;
    }
    if (!r->no_blocking) {
        struct bpf_link *l = bpf_program__attach(s->progs.on_switch);
        if (!l)
            return ls_err("cannot attach to the sched_switch tracepoint: %s", strerror(errno));
        r->links[r->nlinks++] = l;
    }
    if (r->generic)
        return ls_attach_generic(r);
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        bool want = i < 2 || t[i].batched != r->no_batch;
        if (!want)
            continue;
        int rc = ls_attach(r, t[i].prog, t[i].probe);
        if (rc < 0)
            return ls_err("cannot attach to probe evl:%s in '%s': %s%s", t[i].probe, r->binary,
                          strerror(-rc), rc == -EACCES || rc == -EPERM
                                             ? " (uprobes need CAP_SYS_ADMIN)" : "");
    }
    return 0;
}

/* -- CMD: fork a child that waits until we are attached, then execs. */
static int ls_spawn(recorder *r)
{
    const char *cmd = r->cmd[0];
    char path[PATH_MAX];
    if (strchr(cmd, '/')) {
        snprintf(path, sizeof(path), "%s", cmd);
    } else {
        const char *env = getenv("PATH");
        char *dirs = strdup(env ? env : "/usr/local/bin:/usr/bin:/bin");
        bool ok = false;
        for (char *save, *d = strtok_r(dirs, ":", &save); d && !ok; d = strtok_r(NULL, ":", &save)) {
            snprintf(path, sizeof(path), "%s/%s", d, cmd);
            ok = access(path, X_OK) == 0;
        }
        free(dirs);
        if (!ok)
            return ls_err("command not found: '%s'", cmd);
    }
    if (access(path, X_OK) != 0)
        return ls_err("cannot execute '%s': %s", path, strerror(errno));
    if (!realpath(path, r->binary))
        return ls_err("cannot resolve '%s': %s", path, strerror(errno));
    bool probes = r->mode != LS_MODE_GENERIC && ls_has_evl_probes(r->binary);
    if (!probes && r->mode == LS_MODE_LIBEVL)
        return ls_err("'%s' has no loopscope probes in its executable (for libevl in a shared "
                      "library, start the program and use -p PID)", r->binary);
    r->generic = !probes;
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0)
        return ls_err("pipe: %s", strerror(errno));
    pid_t c = fork();
    if (c < 0)
        return ls_err("fork: %s", strerror(errno));
    if (c == 0) {
        char b;
        close(fds[1]);
        if (read(fds[0], &b, 1) != 1)
            _exit(127);               /* the recorder gave up */
        execv(r->binary, r->cmd);
        fprintf(stderr, "error: cannot execute '%s': %s\n", r->binary, strerror(errno));
        _exit(127);
    }
    close(fds[0]);
    r->child = c;
    r->pid = c;
    r->go_pipe = fds[1];
    return 0;
}

/* A CPython whose structures we know: where they are, for the BPF side
 * (py_cfg lives in .bss, so it can be set while the programs run; the
 * walk starts once runtime is set, written last).  A command we started
 * is looked at when its first loop thread shows up: by then it runs the
 * interpreter, not the shell or pyenv shim that started it. */
static void ls_detect_python(recorder *r)
{
    struct ls_py_cfg cfg;
    const char *why = NULL;
    char desc[sizeof(r->runtime)];
    if (r->py || !(r->py = ls_py_detect(r->pid, &cfg, desc, sizeof(desc), &why)))
        return;
    uint64_t runtime = cfg.runtime;
    cfg.runtime = 0;
    r->skel->bss->py_cfg = cfg;
    __atomic_store_n(&r->skel->bss->py_cfg.runtime, runtime, __ATOMIC_RELEASE);
    snprintf(r->runtime, sizeof(r->runtime), "%s", desc);
}

/* What the target runs on (meta.runtime, the first line); running: it
 * runs its program (not a command we started that has not exec'd yet). */
static void ls_detect_runtime(recorder *r, bool running)
{
    if (!r->generic) {
        snprintf(r->runtime, sizeof(r->runtime), "libevl");
        return;
    }
    const char *base = strrchr(r->binary, '/');
    base = base ? base + 1 : r->binary;
    if (running)
        ls_detect_python(r);
    if (r->py)
        return;
    if (!strncmp(base, "python", 6))
        snprintf(r->runtime, sizeof(r->runtime), "CPython (no Python stacks)");
    else if (!strcmp(base, "node") || !strcmp(base, "nodejs"))
        snprintf(r->runtime, sizeof(r->runtime), "Node.js");
    else
        snprintf(r->runtime, sizeof(r->runtime), "native");
}

/* Generic mode: threads already asleep in a wait call when we attach are
 * loop threads from the start (else a thread is one from its next wait
 * call on): read from /proc/PID/task/TID/syscall. */
static void ls_find_waiting_threads(recorder *r)
{
    static const long calls[] = { SYS_epoll_wait, SYS_epoll_pwait, 441 /* epoll_pwait2 */,
                                  SYS_poll, SYS_ppoll, SYS_select, SYS_pselect6 };
    int ncalls = r->wait_all ? (int)(sizeof(calls) / sizeof(calls[0])) : LS_EPOLL_CALLS;
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task", r->pid);
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char *end;
        long tid = strtol(e->d_name, &end, 10);
        if (*end || tid <= 0 || tid > INT32_MAX)
            continue;
        char sp[96], buf[64];
        snprintf(sp, sizeof(sp), "/proc/%d/task/%ld/syscall", r->pid, tid);
        int fd = open(sp, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
        if (fd >= 0)
            close(fd);
        if (n <= 0)
            continue;
        buf[n] = 0;
        long nr = strtol(buf, &end, 10);
        bool waits = false;
        for (int i = 0; i < ncalls; i++)
            waits |= end != buf && nr == calls[i];
        if (!waits)
            continue;
        int64_t now = ls_now();
        struct ls_gloop g = { .in_wait = 1, .enter_ns = (uint64_t)now, .w.start_ns = (uint64_t)now };
        uint32_t key = (uint32_t)tid;
        if (bpf_map__update_elem(r->skel->maps.gloops, &key, sizeof(key), &g, sizeof(g),
                                 BPF_NOEXIST) == 0)
            ls_loop_seen(r, key, (uint32_t)r->pid, key, now);
    }
    if (d)
        closedir(d);
}

/* ----------------------------------------------------------------- meta */

static void ls_write_meta(recorder *r, int argc, char **argv)
{
    struct utsname u;
    uname(&u);
    ls_store_meta(r->store, "tool", "loopscope %s", LOOPSCOPE_VERSION);
    ls_store_meta(r->store, "schema_version", "%d", LS_SCHEMA_VERSION);
    ls_store_meta(r->store, "host", "%s", u.nodename);
    ls_store_meta(r->store, "kernel", "%s %s", u.sysname, u.release);
    ls_store_meta(r->store, "clock", "CLOCK_MONOTONIC");
    ls_store_meta(r->store, "target_pid", "%d", r->pid);
    ls_store_meta(r->store, "target_binary", "%s", r->binary);
    char path[64], buf[4096];
    snprintf(path, sizeof(path), "/proc/%d/cmdline", r->pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (r->child) {                   /* not exec'd yet: use what we will run */
        n = 0;
        for (char **a = r->cmd; *a && n < (ssize_t)sizeof(buf) - 1; a++)
            n += snprintf(buf + n, sizeof(buf) - (size_t)n, "%s%s", a == r->cmd ? "" : " ", *a);
    } else if (n > 0) {
        for (ssize_t i = 0; i < n - 1; i++)
            if (!buf[i])
                buf[i] = ' ';
    }
    buf[n > 0 ? n : 0] = 0;
    ls_store_meta(r->store, "target_cmdline", "%s", buf);
    n = 0;
    for (int i = 0; i < argc && n < (ssize_t)sizeof(buf) - 1; i++)
        n += snprintf(buf + n, sizeof(buf) - (size_t)n, "%s%s", i ? " " : "", argv[i]);
    ls_store_meta(r->store, "recorder_cmdline", "%s", buf);
    ls_store_meta(r->store, "mode", "%s", r->generic ? "generic"
                                          : r->no_batch ? "unbatched" : "batched");
    ls_store_meta(r->store, "runtime", "%s", r->runtime);
    if (r->generic) {
        ls_store_meta(r->store, "wait_calls", "%s", r->wait_all ? "all" : "epoll");
        ls_store_meta(r->store, "wait_hook", "%s", r->wait_raw ? "raw" : "tracepoint");
        ls_store_meta(r->store, "window_ns", "%llu", (unsigned long long)LS_WINDOW_NS);
    }
    ls_store_meta(r->store, "ringbuf_kb", "%u", r->ringbuf_kb);
    ls_store_meta(r->store, "blocking_detection", "%s", r->no_blocking ? "off" : "on");
    ls_store_meta(r->store, "syscalls", "%s", r->syscalls ? "on" : "off");
    ls_store_meta(r->store, "block_threshold_ns", "%lld",
                  (long long)(r->block_threshold_ms * 1e6));
    ls_store_meta(r->store, "start_ns", "%lld", (long long)r->start_ns);
    time_t now = time(NULL);
    char iso[64];
    strftime(iso, sizeof(iso), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    ls_store_meta(r->store, "start_utc", "%s", iso);
}

static void ls_write_end_meta(recorder *r, const char *why)
{
    int64_t end = ls_now();
    time_t now = time(NULL);
    char iso[64];
    strftime(iso, sizeof(iso), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    ls_store_meta(r->store, "end_ns", "%lld", (long long)end);
    ls_store_meta(r->store, "end_utc", "%s", iso);
    ls_store_meta(r->store, "duration_ns", "%lld", (long long)(end - r->start_ns));
    ls_store_meta(r->store, "stop_reason", "%s", why);
    /* Counted by the kernel or by the recorder (SCHEMA.md), except
     * *_claimed: the target's own word, stored as such. */
    ls_store_meta(r->store, "batches", "%llu", (unsigned long long)ls_stat(r, LS_STAT_BATCHES));
    ls_store_meta(r->store, "records", "%llu", (unsigned long long)r->records);
    ls_store_meta(r->store, "dropped_messages", "%llu",
                  (unsigned long long)ls_stat(r, LS_STAT_DROPPED_MSGS));
    ls_store_meta(r->store, "dropped_bytes", "%llu",
                  (unsigned long long)ls_stat(r, LS_STAT_DROPPED_BYTES));
    ls_store_meta(r->store, "dropped_events_claimed", "%llu",
                  (unsigned long long)ls_stat(r, LS_STAT_CLAIMED_DROPPED));
    ls_store_meta(r->store, "rejected_records", "%llu", (unsigned long long)r->rejected);
    ls_store_meta(r->store, "rejected_messages", "%llu", (unsigned long long)r->rejected_msgs);
    ls_store_meta(r->store, "untracked_tasks", "%llu", (unsigned long long)r->untracked);
    ls_store_meta(r->store, "snapshot_request_failures", "%llu",
                  (unsigned long long)r->snapshot_fail);
    ls_store_meta(r->store, "blocking_episodes", "%llu", (unsigned long long)r->blocks);
    if (r->generic)
        ls_store_meta(r->store, "untracked_wait_calls", "%llu",
                      (unsigned long long)ls_stat(r, LS_STAT_UNTRACKED_WAITS));
    ls_store_meta(r->store, "read_errors", "%llu",
                  (unsigned long long)ls_stat(r, LS_STAT_READ_ERRORS));
    uint64_t unnamed = 0, jit = r->generic && r->syms ? ls_syms_jit_frames(r->syms, &unnamed) : 0;
    if (jit) {
        /* JIT code in the stacks (Node.js): named from its perf map, if
         * the target writes one (tracer/JIT.md). */
        const char *hint = !unnamed ? ""
                           : ls_syms_has_perfmap(r->syms) ? " (not in the perf map)" : LS_JIT_HINT;
        ls_store_meta(r->store, "jit_symbols", "%s; %llu of %llu JIT frames unnamed%s",
                      ls_syms_perfmap_status(r->syms), (unsigned long long)unnamed,
                      (unsigned long long)jit, hint);
        if (unnamed && !r->quiet && !ls_syms_has_perfmap(r->syms))
            fprintf(stderr, "JS frames: %llu of %llu unnamed%s\n", (unsigned long long)unnamed,
                    (unsigned long long)jit, hint);
    }
}

/* ----------------------------------------------------------------- main */

static void ls_usage(FILE *f)
{
    fputs("usage: loopscope record -p PID [-o FILE] [-d SECONDS] [options]\n"
          "       loopscope record [-o FILE] [-d SECONDS] [options] -- CMD [ARGS...]\n"
          "\n"
          "Attach to a running program (or start one) and record it into a SQLite\n"
          "trace: the task lifecycle of a libevl program, or in the generic loop mode\n"
          "(any other process: Python asyncio, Node.js, libuv, redis ...) its loop\n"
          "threads' iterations and blocking calls.  Ends on Ctrl-C/SIGTERM, after\n"
          "--duration, or when the target exits.\n"
          "\n"
          "  -p, --pid PID        attach to this running process\n"
          "  -o, --output FILE    trace database to write (default: trace.db)\n"
          "  -d, --duration SEC   stop after SEC seconds\n"
          "  -f, --force          replace FILE if it exists (only once the new trace is done)\n"
          "      --no-batch       one uprobe hit per event instead of per batch (slower)\n"
          "      --ringbuf-kb N   ring buffer size in KiB, a power of two >= 256 (default 65536)\n"
          "  -t, --block-threshold MS  report loop stalls of at least MS ms (default 10)\n"
          "      --no-blocking    do not detect blocking (no sched_switch program)\n"
          "      --syscalls       also time every syscall of the loop threads (costs\n"
          "                       every process on the machine ~0.1-0.2 us per syscall)\n"
          "      --mode MODE      auto (default: libevl if the target has its probes,\n"
          "                       else generic), libevl or generic\n"
          "      --wait-calls SET generic mode: the calls a loop waits in: epoll (default:\n"
          "                       epoll_wait, epoll_pwait, epoll_pwait2) or all (also\n"
          "                       poll, ppoll, select, pselect6)\n"
          "      --wait-hook HOOK generic mode: how the wait calls are seen: tracepoint\n"
          "                       (default: their own syscall tracepoints) or raw (one\n"
          "                       raw tracepoint on every syscall; see tracer/README.md)\n"
          "  -q, --quiet          no live status line\n"
          "\n"
          "example: loopscope record -p $(pidof server) -d 10 -o server.db\n", f);
}

static int ls_parse(recorder *r, int argc, char **argv)
{
    static const struct option opts[] = {
        { "pid", required_argument, NULL, 'p' },
        { "output", required_argument, NULL, 'o' },
        { "duration", required_argument, NULL, 'd' },
        { "force", no_argument, NULL, 'f' },
        { "quiet", no_argument, NULL, 'q' },
        { "no-batch", no_argument, NULL, 'B' },
        { "ringbuf-kb", required_argument, NULL, 'R' },
        { "block-threshold", required_argument, NULL, 't' },
        { "no-blocking", no_argument, NULL, 'N' },
        { "syscalls", no_argument, NULL, 'S' },
        { "mode", required_argument, NULL, 'M' },
        { "wait-calls", required_argument, NULL, 'W' },
        { "wait-hook", required_argument, NULL, 'H' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int c;
    char *end;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+p:o:d:t:fqh", opts, NULL)) != -1) {
        switch (c) {
        case 'p': {
            long v = strtol(optarg, &end, 10);
            if (*end || v <= 0 || v > INT_MAX)
                return ls_err("invalid pid '%s'", optarg);
            r->pid = (pid_t)v;
            break;
        }
        case 'o':
            r->out = optarg;
            break;
        case 'd':
            r->duration = strtod(optarg, &end);
            if (*end || !(r->duration > 0))
                return ls_err("invalid duration '%s' (seconds, > 0)", optarg);
            break;
        case 'f':
            r->force = true;
            break;
        case 'q':
            r->quiet = true;
            break;
        case 'B':
            r->no_batch = true;
            break;
        case 'R': {
            long v = strtol(optarg, &end, 10);
            /* Below a few full batches (64 KiB each) most batches would
             * not fit: refused rather than silently lossy. */
            if (*end || v < LS_MIN_RINGBUF_KB || v > (1 << 21) || (v & (v - 1)))
                return ls_err("invalid --ringbuf-kb '%s' (a power of two, %d..2097152)", optarg,
                              LS_MIN_RINGBUF_KB);
            r->ringbuf_kb = (unsigned)v;
            break;
        }
        case 't':
            r->block_threshold_ms = strtod(optarg, &end);
            if (*end || !(r->block_threshold_ms >= 0.1) || r->block_threshold_ms > 60000)
                return ls_err("invalid --block-threshold '%s' (milliseconds, 0.1..60000)", optarg);
            break;
        case 'N':
            r->no_blocking = true;
            break;
        case 'S':
            r->syscalls = true;
            break;
        case 'M':
            if (!strcmp(optarg, "auto"))
                r->mode = LS_MODE_AUTO;
            else if (!strcmp(optarg, "libevl"))
                r->mode = LS_MODE_LIBEVL;
            else if (!strcmp(optarg, "generic"))
                r->mode = LS_MODE_GENERIC;
            else
                return ls_err("invalid --mode '%s' (auto, libevl or generic)", optarg);
            break;
        case 'W':
            if (strcmp(optarg, "epoll") && strcmp(optarg, "all"))
                return ls_err("invalid --wait-calls '%s' (epoll or all)", optarg);
            r->wait_all = !strcmp(optarg, "all");
            break;
        case 'H':
            if (strcmp(optarg, "tracepoint") && strcmp(optarg, "raw"))
                return ls_err("invalid --wait-hook '%s' (tracepoint or raw)", optarg);
            r->wait_raw = !strcmp(optarg, "raw");
            break;
        case 'h':
            ls_usage(stdout);
            exit(0);
        default:
            ls_usage(stderr);
            return 2;
        }
    }
    if (optind < argc)
        r->cmd = argv + optind;
    if (!r->pid == !r->cmd)
        return ls_err("give either -p PID or -- CMD (see 'loopscope record --help')");
    return 0;
}

static void ls_status(recorder *r, int64_t now, uint64_t *last_ev, int64_t *last_t)
{
    double el = (now - r->start_ns) / 1e9, dt = (now - *last_t) / 1e9;
    uint64_t ev = ls_store_nevents(r->store);
    if (r->generic) {
        fprintf(stderr, "\rrecording pid %d: %.1fs  loop threads %zu  blocking episodes %llu  "
                        "dropped %llu   ", r->pid, el, r->nloops, (unsigned long long)r->blocks,
                (unsigned long long)ls_stat(r, LS_STAT_DROPPED_MSGS));
        return;
    }
    fprintf(stderr, "\rrecording pid %d: %.1fs  %.0f events/s  tasks alive %llu  dropped %llu   ",
            r->pid, el, dt > 0 ? (ev - *last_ev) / dt : 0.0,
            (unsigned long long)(r->tasks_created - r->tasks_finished),
            (unsigned long long)ls_stat(r, LS_STAT_DROPPED_MSGS));
    *last_ev = ev;
    *last_t = now;
}

int cmd_record(int argc, char **argv)
{
    recorder rr = { .out = "trace.db", .ringbuf_kb = 65536, .block_threshold_ms = 10,
                    .pidfd = -1, .go_pipe = -1 };
    recorder *r = &rr;
    char errbuf[512];
    const char *why = "target exited";
    int err = ls_parse(r, argc, argv);
    if (err)
        return err;
    libbpf_set_print(ls_libbpf_print);
    if ((err = ls_check_privileges()))
        return err;
    /* A bad output is refused before the target is touched; the file
     * itself is made only once every probe is attached, so a failed
     * attach leaves nothing behind. */
    if (ls_store_check(r->out, r->force, errbuf, sizeof(errbuf)) < 0)
        return ls_err("%s", errbuf);
    r->tasks = ls_tasks_new(LS_TASKS_MAX);
    if (!r->tasks)
        return ls_err("out of memory");

    if (r->cmd) {
        if ((err = ls_spawn(r)))
            goto cleanup;
    } else {
        if (kill(r->pid, 0) < 0 && errno == ESRCH) {
            err = ls_err("no process with pid %d", r->pid);
            goto cleanup;
        }
        if ((err = ls_check_target_access(r->pid)) || (err = ls_find_probes(r)))
            goto cleanup;
    }
    r->pidfd = (int)syscall(SYS_pidfd_open, r->pid, 0);
    if (r->pidfd < 0) {
        err = ls_err("cannot watch pid %d: %s", r->pid, strerror(errno));
        goto cleanup;
    }

    r->skel = record_bpf__open();
    if (!r->skel) {
        err = ls_err("cannot open the BPF object: %s", strerror(errno));
        goto cleanup;
    }
    r->skel->rodata->target_tgid = (uint32_t)r->pid;
    r->skel->rodata->block_threshold_ns = (uint64_t)(r->block_threshold_ms * 1e6);
    r->skel->rodata->detect_blocking = !r->no_blocking;
    r->skel->rodata->trace_syscalls = r->syscalls;
    r->skel->rodata->generic = r->generic;
    ls_detect_runtime(r, !r->child);
    r->skel->rodata->window_ns = LS_WINDOW_NS;
    r->skel->rodata->wait_all = r->wait_all;
    ls_choose_programs(r);
    if (!r->syscalls) {
        bpf_program__set_autoload(r->skel->progs.on_sys_enter, false);
        bpf_program__set_autoload(r->skel->progs.on_sys_exit, false);
    }
    if (r->no_blocking) {
        bpf_program__set_autoload(r->skel->progs.on_switch, false);
        bpf_program__set_autoload(r->skel->progs.on_cpu_sample, false);
    }
    bpf_map__set_max_entries(r->skel->maps.events, r->ringbuf_kb * 1024u);
    int ncpu = libbpf_num_possible_cpus();
    bpf_map__set_max_entries(r->skel->maps.block_scratch, ncpu > 0 ? (uint32_t)ncpu : 1);
    bpf_map__set_max_entries(r->skel->maps.scratch, ncpu > 0 ? (uint32_t)ncpu : 1);
    if ((err = record_bpf__load(r->skel))) {
        err = ls_err("cannot load the BPF programs: %s%s", strerror(-err),
                     err == -EPERM || err == -EACCES ? " (needs CAP_SYS_ADMIN)" : "");
        goto cleanup;
    }
    r->attach_ns = ls_now();
    if ((err = ls_attach_all(r)))
        goto cleanup;
    r->store = ls_store_create(r->out, r->force, errbuf, sizeof(errbuf));
    if (!r->store) {
        err = ls_err("%s", errbuf);
        goto cleanup;
    }
    r->rb = ring_buffer__new(bpf_map__fd(r->skel->maps.events), ls_on_msg, r, NULL);
    if (!r->rb) {
        err = ls_err("cannot create the ring buffer reader: %s", strerror(errno));
        goto cleanup;
    }
    r->start_ns = ls_now();
    ls_write_meta(r, argc, argv);
    if (r->generic && !r->child)
        ls_find_waiting_threads(r);
    if (r->child) {
        if (write(r->go_pipe, "g", 1) != 1) {
            err = ls_err("cannot start '%s': %s", r->cmd[0], strerror(errno));
            goto cleanup;
        }
        close(r->go_pipe);
        r->go_pipe = -1;
    }

    struct sigaction sa = { .sa_handler = ls_on_signal };
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    bool tty = !r->quiet && isatty(2);
    if (!r->quiet)
        fprintf(stderr, "recording pid %d (%s) in the %s into '%s'%s\n", r->pid, r->binary,
                r->generic ? "generic loop mode" : "libevl mode", r->out,
                tty ? "; Ctrl-C to stop" : "");
    int64_t deadline = r->duration > 0 ? r->start_ns + (int64_t)(r->duration * 1e9) : 0;
    int64_t last_status = r->start_ns;
    uint64_t last_ev = 0;
    struct pollfd pfd = { r->pidfd, POLLIN, 0 };
    for (;;) {
        if (ls_stop_signal) {
            why = ls_stop_signal == SIGINT ? "interrupted (SIGINT)" : "terminated by signal";
            break;
        }
        int64_t now = ls_now();
        if (deadline && now >= deadline) {
            why = "duration reached";
            break;
        }
        /* Batches arrive without wakeups (BPF_RB_NO_WAKEUP): poll the
         * target's pidfd with a short timeout and drain each time. */
        if (poll(&pfd, 1, 20) < 0 && errno != EINTR) {
            err = ls_err("poll: %s", strerror(errno));
            break;
        }
        ls_consume(r, 200000000);
        if (pfd.revents & POLLIN) {
            r->target_gone = true;    /* drain what it sent before dying */
            while (ls_consume(r, 200000000) < 0)
                ;
            break;
        }
        now = ls_now();
        if (ls_store_tick(r->store, now) < 0) {
            err = ls_err("writing '%s' failed: %s", r->out, ls_store_error(r->store));
            break;
        }
        if (tty && now - last_status >= 1000000000ll)
            ls_status(r, now, &last_ev, &last_status);
    }
    if (tty)
        fputc('\n', stderr);

    /* Detach first (the target keeps running, semaphores drop to 0), then
     * take what is still in the ring buffer. */
    r->detach_ns = ls_now();
    for (int i = 0; i < r->nlinks; i++)
        bpf_link__destroy(r->links[i]);
    r->nlinks = 0;
    for (int i = 0; i < r->nsampled; i++)
        bpf_link__destroy(r->samplers[i]);
    r->nsampled = 0;
    while (ls_consume(r, 200000000) < 0)
        ;                             /* nothing new arrives once detached */
    ls_flush_open_episodes(r);
    ls_flush_windows(r);
    ls_store_syscalls(r);
    ls_write_end_meta(r, why);
    r->end_ns = ls_now();
    ls_tasks_each(r->tasks, ls_close_open, r);
    uint64_t dropped = ls_stat(r, LS_STAT_DROPPED_MSGS), rejected = r->rejected + r->rejected_msgs;
    uint64_t nev = ls_store_nevents(r->store);
    double secs = (ls_now() - r->start_ns) / 1e9;
    ls_store *st = r->store;
    r->store = NULL;
    if (ls_store_finish(st, errbuf, sizeof(errbuf)) < 0) {
        err = ls_err("%s", errbuf);
        goto cleanup;
    }
    if (!r->quiet || dropped || rejected) {
        if (r->generic)
            fprintf(stderr, "recorded %llu blocking episode%s, %llu loop thread%s from pid %d in "
                            "%.1f s into '%s' (%s)", (unsigned long long)r->blocks,
                    r->blocks == 1 ? "" : "s", (unsigned long long)r->nloops,
                    r->nloops == 1 ? "" : "s", r->pid, secs, r->out, why);
        else
            fprintf(stderr, "recorded %llu events, %llu tasks, %llu loop%s from pid %d in %.1f s "
                            "into '%s' (%s)", (unsigned long long)nev,
                    (unsigned long long)r->tasks_created, (unsigned long long)r->nloops,
                    r->nloops == 1 ? "" : "s", r->pid, secs, r->out, why);
        if (dropped)
            fprintf(stderr, "; LOSSY: %llu messages dropped (the target claims %llu events "
                            "in them)", (unsigned long long)dropped,
                    (unsigned long long)ls_stat(r, LS_STAT_CLAIMED_DROPPED));
        if (rejected)
            fprintf(stderr, "; %llu malformed records or messages rejected",
                    (unsigned long long)rejected);
        fputc('\n', stderr);
    }

cleanup:
    for (int i = 0; i < r->nlinks; i++)
        bpf_link__destroy(r->links[i]);
    for (int i = 0; i < r->nsampled; i++)
        bpf_link__destroy(r->samplers[i]);
    ring_buffer__free(r->rb);
    record_bpf__destroy(r->skel);
    if (r->store && r->start_ns)      /* an error while recording: keep what was written */
        ls_store_finish(r->store, errbuf, sizeof(errbuf));
    else
        ls_store_abort(r->store);     /* nothing was recorded: leave nothing behind */
    ls_syms_free(r->syms);
    ls_py_free(r->py);
    ls_tasks_free(r->tasks);
    free(r->loops);
    if (r->go_pipe >= 0)
        close(r->go_pipe);            /* the child exits without running */
    if (r->child) {
        int status;
        if (!r->target_gone)
            kill(r->child, SIGTERM);
        waitpid(r->child, &status, 0);
    }
    if (r->pidfd >= 0)
        close(r->pidfd);
    return err;
}
