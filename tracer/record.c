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
#include "store.h"
#include "symbols.h"
#include "tracer.h"

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
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define LS_MAX_LINKS 32
#define LS_MAX_LOOP_THREADS 64
#define LS_MAX_DEPTH 64
#define LS_STACK_IDS 4096         /* distinct stacks remembered for dedup */

/* Per-task time accounting, done as events stream in (task_stats): each
 * create/run/suspend/wake event lasts until the task's next one. */
typedef struct ls_task_acc {
    uint64_t id;              /* 0 = free slot */
    uint64_t loop;
    int64_t last_ts;          /* time of the last lifecycle event */
    int last_kind;            /* its kind; 0 once finished */
    int64_t busy, sched, idle, longest;
    uint64_t resumes, wakes;
} ls_task_acc;

typedef struct recorder {
    /* options */
    pid_t pid;
    const char *out;
    double duration;          /* seconds, 0 = until stopped */
    bool force;
    bool no_batch;
    bool quiet;
    unsigned ringbuf_kb;
    double block_threshold_ms;
    bool no_blocking;
    bool syscalls;
    char **cmd;               /* -- CMD ARGS */
    /* state */
    char binary[PATH_MAX];    /* the ELF file holding the evl probes */
    struct record_bpf *skel;
    struct bpf_link *links[LS_MAX_LINKS];
    int nlinks;
    struct ring_buffer *rb;
    ls_store *store;
    ls_syms *syms;
    int pidfd;
    pid_t child;              /* started by us (-- CMD) */
    int go_pipe;              /* write end: releases the child to exec */
    uint64_t tasks_created, tasks_finished;
    struct ls_loop_info {
        uint64_t id;          /* a loop with a row already */
        int64_t stopped;      /* loop_stop time, 0 while running */
    } *loops;
    size_t nloops, loops_cap;
    uint32_t sampled_tids[LS_MAX_LOOP_THREADS]; /* loop threads with a cpu sampler */
    struct bpf_link *samplers[LS_MAX_LOOP_THREADS];
    int nsampled;
    struct { uint64_t hash; int64_t id; } stack_ids[LS_STACK_IDS];
    int64_t next_stack_id;
    uint64_t blocks;
    int64_t start_ns;
    bool target_gone;
    int64_t consume_until;    /* ls_on_msg yields back to the main loop then */
    unsigned since_check;
    ls_task_acc *acc;         /* open-addressing table of tasks */
    size_t acc_cap, acc_n;
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
 * mapped shared library.  Fills r->binary. */
static int ls_find_probes(recorder *r)
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
    char target[PATH_MAX] = "?";
    ssize_t n = readlink(exe, target, sizeof(target) - 1);
    if (n > 0)
        target[n] = 0;
    return ls_err("pid %d (%s) has no loopscope probes: no USDT provider 'evl' in %s or in "
                  "its mapped libraries (is it built with libevl and EVL_PROBES on?)",
                  r->pid, target, exe);
}

/* Which capabilities recording needs and this process lacks. */
static int ls_check_privileges(void)
{
    if (geteuid() == 0)
        return 0;
    unsigned long long eff = 0;
    FILE *f = fopen("/proc/self/status", "re");
    char line[256];
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "CapEff: %llx", &eff) == 1)
            break;
    if (f)
        fclose(f);
    const int CAP_SYS_ADMIN_ = 21, CAP_PERFMON_ = 38, CAP_BPF_ = 39;
    if (eff & (1ull << CAP_SYS_ADMIN_))
        return 0;
    bool bpf = eff & (1ull << CAP_BPF_), perfmon = eff & (1ull << CAP_PERFMON_);
    if (bpf && perfmon)
        return 0;
    return ls_err("recording needs root or CAP_BPF and CAP_PERFMON; missing: %s%s%s",
                  bpf ? "" : "CAP_BPF", !bpf && !perfmon ? ", " : "", perfmon ? "" : "CAP_PERFMON");
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

/* The loop's entry, made (with its loops row and CPU sampler) the first
 * time a message names it. */
static struct ls_loop_info *ls_loop_seen(recorder *r, uint64_t loop, uint32_t pid, uint32_t tid,
                                         int64_t ts)
{
    for (size_t i = 0; i < r->nloops; i++)
        if (r->loops[i].id == loop)
            return &r->loops[i];
    if (r->nloops == r->loops_cap) {
        size_t cap = r->loops_cap ? 2 * r->loops_cap : 8;
        struct ls_loop_info *a = realloc(r->loops, cap * sizeof(*a));
        if (!a)
            return NULL;
        r->loops = a;
        r->loops_cap = cap;
    }
    ls_sample_thread(r, tid);
    ls_store_loop(r->store, loop, pid, tid, ts);
    r->loops[r->nloops] = (struct ls_loop_info){ loop, 0 };
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

static ls_task_acc *ls_acc(recorder *r, uint64_t task, uint64_t loop)
{
    if (r->acc_n * 2 >= r->acc_cap) {       /* grow and rehash at 50% */
        size_t cap = r->acc_cap ? r->acc_cap * 2 : 4096;
        ls_task_acc *a = calloc(cap, sizeof(*a));
        if (!a)
            return NULL;
        for (size_t i = 0; i < r->acc_cap; i++) {
            if (!r->acc[i].id)
                continue;
            size_t k = (r->acc[i].id * 0x9E3779B97F4A7C15ull) & (cap - 1);
            while (a[k].id)
                k = (k + 1) & (cap - 1);
            a[k] = r->acc[i];
        }
        free(r->acc);
        r->acc = a;
        r->acc_cap = cap;
    }
    size_t k = (task * 0x9E3779B97F4A7C15ull) & (r->acc_cap - 1);
    while (r->acc[k].id && r->acc[k].id != task)
        k = (k + 1) & (r->acc_cap - 1);
    if (!r->acc[k].id) {
        r->acc[k].id = task;
        r->acc[k].loop = loop;
        r->acc_n++;
    }
    return &r->acc[k];
}

/* last_kind of a task that existed before the recording: until its first
 * event we do not know what it was doing; that event tells (woken: it was
 * suspended; run: it was ready). */
#define LS_ACC_PREEXISTING (-1)

/* Close the span the task was in (its last event's kind) at ts; next_kind
 * is the event that ends it (0 at the end of the recording). */
static void ls_acc_close(ls_task_acc *a, int64_t ts, int next_kind)
{
    int64_t d = ts - a->last_ts;
    if (!a->last_kind || d < 0)
        return;
    int kind = a->last_kind;
    if (kind == LS_ACC_PREEXISTING)
        kind = next_kind == EVL_PROBE_ID_task_run ? EVL_PROBE_ID_task_wake
                                                  : EVL_PROBE_ID_task_suspend;
    switch (kind) {
    case EVL_PROBE_ID_task_run:
        a->busy += d;
        if (d > a->longest)
            a->longest = d;
        break;
    case EVL_PROBE_ID_task_create:
    case EVL_PROBE_ID_task_wake:
        a->sched += d;
        break;
    case EVL_PROBE_ID_task_suspend:
        a->idle += d;
        break;
    }
}

static void ls_acc_note(recorder *r, uint64_t loop, const struct evl_rec *e)
{
    if (e->kind < EVL_PROBE_ID_task_create || e->kind > EVL_PROBE_ID_task_finish || !e->task)
        return;
    ls_task_acc *a = ls_acc(r, e->task, loop);
    if (!a)
        return;
    ls_acc_close(a, (int64_t)e->ts, e->kind);
    a->last_ts = (int64_t)e->ts;
    a->last_kind = e->kind == EVL_PROBE_ID_task_finish ? 0 : e->kind;
    if (e->kind == EVL_PROBE_ID_task_create && (e->a32 & EVL_REC_PREEXISTING))
        a->last_kind = LS_ACC_PREEXISTING;
    if (e->kind == EVL_PROBE_ID_task_run)
        a->resumes++;
    else if (e->kind == EVL_PROBE_ID_task_wake)
        a->wakes++;
}

/* At the end: the open span of each unfinished task lasts until its loop
 * stopped, or the end of the recording; then store every row. */
static void ls_store_task_stats(recorder *r, int64_t end)
{
    for (size_t i = 0; i < r->acc_cap; i++) {
        ls_task_acc *a = &r->acc[i];
        if (!a->id)
            continue;
        int64_t stop = end;
        for (size_t l = 0; l < r->nloops; l++)
            if (r->loops[l].id == a->loop && r->loops[l].stopped)
                stop = r->loops[l].stopped;
        ls_acc_close(a, stop, 0);
        ls_store_task_stat(r->store, a->id, a->busy, a->sched, a->idle, a->resumes, a->wakes,
                           a->longest);
    }
}

static void ls_ingest_rec(recorder *r, uint64_t loop, const struct evl_rec *e, size_t avail)
{
    int64_t reason = e->a32;
    switch (e->kind) {
    case EVL_PROBE_ID_task_create: {
        char name[EVL_NAME_MAX];
        size_t n = e->a32 & ~EVL_REC_PREEXISTING;
        if (n > avail - sizeof(*e))
            n = avail - sizeof(*e);
        if (n >= sizeof(name))
            n = sizeof(name) - 1;
        memcpy(name, e + 1, n);
        name[n] = 0;
        bool pre = e->a32 & EVL_REC_PREEXISTING;
        ls_syms *syms = ls_get_syms(r);
        ls_sym sym = syms ? ls_syms_lookup(syms, e->a1) : (ls_sym){ 0 };
        ls_store_task_create(r->store, e->task, loop, e->a0, name, sym.function, e->a1,
                             (int64_t)e->ts, pre);
        r->tasks_created++;
        reason = pre;
        break;
    }
    case EVL_PROBE_ID_task_leak:
        ls_store_task_leak(r->store, e->task, (int)e->a32);
        break;
    case EVL_PROBE_ID_task_finish:
        ls_store_task_finish(r->store, e->task, loop, (int64_t)e->ts, (int)e->a32, (int64_t)e->a0);
        r->tasks_finished++;
        break;
    }
    ls_acc_note(r, loop, e);
    ls_store_event(r->store, (int64_t)e->ts, loop, e->task, e->kind, reason,
                   (int64_t)e->a0, (int64_t)e->a1);
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

/* Unwind, symbolize and store (once) the stack of a blocking episode. */
static int64_t ls_stack_id(recorder *r, uint32_t tid, const struct ls_block *b, const uint8_t *stack)
{
    uint64_t pcs[LS_MAX_DEPTH];
    int n = ls_syms_unwind(ls_get_syms(r), (pid_t)tid, (const uint64_t *)b->regs, stack, b->stack_len, pcs, LS_MAX_DEPTH);
    if (n <= 0)
        return 0;
    uint64_t h = 1469598103934665603ull;   /* FNV-1a over the pcs */
    for (int i = 0; i < n; i++)
        h = (h ^ pcs[i]) * 1099511628211ull;
    size_t slot = h % LS_STACK_IDS;
    if (r->stack_ids[slot].id && r->stack_ids[slot].hash == h)
        return r->stack_ids[slot].id;
    /* One row per frame, inlined functions expanded (same address). */
    ls_sym frames[LS_MAX_DEPTH];
    uint64_t addrs[LS_MAX_DEPTH];
    int depth = 0;
    for (int i = 0; i < n && depth < LS_MAX_DEPTH; i++) {
        ls_sym sym = ls_syms_lookup(r->syms, pcs[i]);
        for (const ls_sym *f = &sym; f && depth < LS_MAX_DEPTH; f = f->inlined_into) {
            frames[depth] = *f;
            addrs[depth++] = pcs[i];
        }
    }
    int64_t id = ++r->next_stack_id;
    ls_store_stack(r->store, id, depth, addrs, frames);
    r->stack_ids[slot].hash = h;
    r->stack_ids[slot].id = id;
    return id;
}

static void ls_on_block(recorder *r, const struct ls_msg_hdr *h)
{
    const struct ls_block *b = (const void *)(h + 1);
    if (h->len < sizeof(*b) || b->stack_len > h->len - sizeof(*b))
        return;
    int64_t stack = ls_stack_id(r, h->tid, b, (const uint8_t *)(b + 1));
    ls_store_blocking(r->store, h->loop, b->task, (int64_t)b->start_ns, (int64_t)b->dur_ns,
                      (int)b->kind, b->syscall, stack);
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

/* At the end: episodes still open in BPF (the loop has not polled since). */
static void ls_flush_open_episodes(recorder *r)
{
    if (r->no_blocking || !r->skel)
        return;
    struct bpf_map *map = r->skel->maps.offcpu;
    size_t vsize = bpf_map__value_size(map);
    uint8_t *v = malloc(vsize);
    uint32_t key, next;
    int64_t now = ls_now();
    int rc = bpf_map__get_next_key(map, NULL, &next, sizeof(next));
    while (v && rc == 0) {
        key = next;
        rc = bpf_map__get_next_key(map, &key, &next, sizeof(next));
        if (bpf_map__lookup_elem(map, &key, sizeof(key), v, vsize, 0) != 0)
            continue;
        struct ls_msg_hdr *h = (struct ls_msg_hdr *)(void *)v;
        struct ls_block *b = (struct ls_block *)(h + 1);
        if (!b->dur_ns)               /* still asleep right now */
            b->dur_ns = (uint64_t)(now - (int64_t)b->start_ns);
        if (b->dur_ns >= (uint64_t)(r->block_threshold_ms * 1e6))
            ls_on_block(r, h);
    }
    free(v);
}

static int ls_on_msg(void *ctx, void *data, size_t size)
{
    recorder *r = ctx;
    const struct ls_msg_hdr *h = data;
    if (++r->since_check >= 64) {
        r->since_check = 0;
        if (ls_now() > r->consume_until)
            return -EAGAIN;           /* libbpf stops here; the rest stays queued */
    }
    if (size < sizeof(*h) || h->len > size - sizeof(*h))
        return 0;
    const uint8_t *p = (const uint8_t *)(h + 1);
    switch (h->type) {
    case LS_MSG_LOOP_START:
        ls_loop_seen(r, h->loop, h->pid, h->tid, (int64_t)h->ts);
        ls_store_event(r->store, (int64_t)h->ts, h->loop, 0, EVL_PROBE_ID_loop_start, h->tid,
                       (int64_t)h->arg, 0);
        break;
    case LS_MSG_LOOP_STOP: {
        struct ls_loop_info *li = ls_loop_seen(r, h->loop, h->pid, h->tid, (int64_t)h->ts);
        if (li)
            li->stopped = (int64_t)h->ts;
        ls_store_loop_stop(r->store, h->loop, (int64_t)h->ts);
        ls_store_event(r->store, (int64_t)h->ts, h->loop, 0, EVL_PROBE_ID_loop_stop, h->tid, 0, 0);
        break;
    }
    case LS_MSG_BLOCK:
        ls_on_block(r, h);
        break;
    case LS_MSG_BATCH:
    case LS_MSG_REC:
        ls_loop_seen(r, h->loop, h->pid, h->tid, (int64_t)h->ts);
        for (size_t off = 0; off + sizeof(struct evl_rec) <= h->len;) {
            const struct evl_rec *e = (const struct evl_rec *)(const void *)(p + off);
            if (e->size < sizeof(*e) || off + e->size > h->len)
                break;                /* malformed: drop the rest */
            ls_ingest_rec(r, h->loop, e, h->len - off);
            off += e->size;
        }
        break;
    }
    return 0;
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
    for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
        bool want = i < 2 || t[i].batched != r->no_batch;
        if (!want)
            continue;
        int rc = ls_attach(r, t[i].prog, t[i].probe);
        if (rc < 0)
            return ls_err("cannot attach to probe evl:%s in '%s': %s", t[i].probe, r->binary,
                          strerror(-rc));
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
    if (!ls_has_evl_probes(r->binary))
        return ls_err("'%s' has no loopscope probes in its executable (for libevl in a shared "
                      "library, start the program and use -p PID)", r->binary);
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
    ls_store_meta(r->store, "mode", "%s", r->no_batch ? "unbatched" : "batched");
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
    ls_store_meta(r->store, "batches", "%llu", (unsigned long long)ls_stat(r, LS_STAT_BATCHES));
    ls_store_meta(r->store, "dropped_messages", "%llu",
                  (unsigned long long)ls_stat(r, LS_STAT_DROPPED_MSGS));
    ls_store_meta(r->store, "dropped_events", "%llu",
                  (unsigned long long)ls_stat(r, LS_STAT_DROPPED_RECS));
    ls_store_meta(r->store, "blocking_episodes", "%llu", (unsigned long long)r->blocks);
    ls_store_meta(r->store, "read_errors", "%llu",
                  (unsigned long long)ls_stat(r, LS_STAT_READ_ERRORS));
}

/* ----------------------------------------------------------------- main */

static void ls_usage(FILE *f)
{
    fputs("usage: loopscope record -p PID [-o FILE] [-d SECONDS] [options]\n"
          "       loopscope record [-o FILE] [-d SECONDS] [options] -- CMD [ARGS...]\n"
          "\n"
          "Attach to a running libevl program (or start one) and record its task\n"
          "lifecycle into a SQLite trace.  Ends on Ctrl-C/SIGTERM, after --duration,\n"
          "or when the target exits.\n"
          "\n"
          "  -p, --pid PID        attach to this running process\n"
          "  -o, --output FILE    trace database to write (default: trace.db)\n"
          "  -d, --duration SEC   stop after SEC seconds\n"
          "  -f, --force          replace FILE if it exists (only once the new trace is done)\n"
          "      --no-batch       one uprobe hit per event instead of per batch (slower)\n"
          "      --ringbuf-kb N   ring buffer size in KiB, a power of two (default 65536)\n"
          "  -t, --block-threshold MS  report loop stalls of at least MS ms (default 10)\n"
          "      --no-blocking    do not detect blocking (no sched_switch program)\n"
          "      --syscalls       also time every syscall of the loop threads (costs\n"
          "                       every process on the machine ~0.1-0.2 us per syscall)\n"
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
            if (*end || v < 4 || v > (1 << 21) || (v & (v - 1)))
                return ls_err("invalid --ringbuf-kb '%s' (a power of two, 4..2097152)", optarg);
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
    fprintf(stderr, "\rrecording pid %d: %.1fs  %.0f events/s  tasks alive %llu  dropped %llu   ",
            r->pid, el, dt > 0 ? (ev - *last_ev) / dt : 0.0,
            (unsigned long long)(r->tasks_created - r->tasks_finished),
            (unsigned long long)ls_stat(r, LS_STAT_DROPPED_RECS));
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

    if (r->cmd) {
        if ((err = ls_spawn(r)))
            goto cleanup;
    } else {
        if (kill(r->pid, 0) < 0 && errno == ESRCH) {
            err = ls_err("no process with pid %d", r->pid);
            goto cleanup;
        }
        if ((err = ls_find_probes(r)))
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
                     err == -EPERM || err == -EACCES ? " (needs root or CAP_BPF+CAP_PERFMON)" : "");
        goto cleanup;
    }
    r->store = ls_store_create(r->out, r->force, errbuf, sizeof(errbuf));
    if (!r->store) {
        err = ls_err("%s", errbuf);
        goto cleanup;
    }
    if ((err = ls_attach_all(r)))
        goto cleanup;
    r->rb = ring_buffer__new(bpf_map__fd(r->skel->maps.events), ls_on_msg, r, NULL);
    if (!r->rb) {
        err = ls_err("cannot create the ring buffer reader: %s", strerror(errno));
        goto cleanup;
    }
    r->start_ns = ls_now();
    ls_write_meta(r, argc, argv);
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
        fprintf(stderr, "recording pid %d (%s) into '%s'%s\n", r->pid, r->binary, r->out,
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
    for (int i = 0; i < r->nlinks; i++)
        bpf_link__destroy(r->links[i]);
    r->nlinks = 0;
    for (int i = 0; i < r->nsampled; i++)
        bpf_link__destroy(r->samplers[i]);
    r->nsampled = 0;
    while (ls_consume(r, 200000000) < 0)
        ;                             /* nothing new arrives once detached */
    ls_flush_open_episodes(r);
    ls_store_syscalls(r);
    ls_write_end_meta(r, why);
    ls_store_task_stats(r, ls_now());
    uint64_t dropped = ls_stat(r, LS_STAT_DROPPED_RECS);
    uint64_t nev = ls_store_nevents(r->store);
    double secs = (ls_now() - r->start_ns) / 1e9;
    ls_store *st = r->store;
    r->store = NULL;
    if (ls_store_finish(st, errbuf, sizeof(errbuf)) < 0) {
        err = ls_err("%s", errbuf);
        goto cleanup;
    }
    if (!r->quiet || dropped) {
        fprintf(stderr, "recorded %llu events, %llu tasks, %llu loop%s from pid %d in %.1f s "
                        "into '%s' (%s)", (unsigned long long)nev,
                (unsigned long long)r->tasks_created, (unsigned long long)r->nloops,
                r->nloops == 1 ? "" : "s", r->pid, secs, r->out, why);
        if (dropped)
            fprintf(stderr, "; LOSSY: dropped events: %llu", (unsigned long long)dropped);
        fputc('\n', stderr);
    }

cleanup:
    for (int i = 0; i < r->nlinks; i++)
        bpf_link__destroy(r->links[i]);
    for (int i = 0; i < r->nsampled; i++)
        bpf_link__destroy(r->samplers[i]);
    ring_buffer__free(r->rb);
    record_bpf__destroy(r->skel);
    if (r->store)                     /* an error path: keep what was written */
        ls_store_finish(r->store, errbuf, sizeof(errbuf));
    ls_syms_free(r->syms);
    free(r->acc);
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
